// Log-linear histogram of non-negative integers (latencies in TSC cycles), in the manner of
// HdrHistogram: values below 2^SubBits have a bucket each; above, every power of two is cut into
// 2^(SubBits-1) equal sub-buckets, so a bucket is at most 2^-(SubBits-1) of its value wide.
// One implementation for rdmafwd (SubBits 5: 6 %, counters written by a poll lcore) and
// rdmx-perf (SubBits 7: 1.6 %, plain counts). Storage is the caller's; the math is here.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace rdmx {

template <uint32_t SubBits>
struct LogLinearBuckets {
  static_assert(SubBits >= 2 && SubBits < 16);
  static constexpr uint32_t kSubBits = SubBits;
  static constexpr uint32_t kSub = 1u << SubBits;
  static constexpr uint32_t kHalf = kSub / 2;
  static constexpr uint32_t kBuckets = kSub + (64 - SubBits) * kHalf;

  static constexpr uint32_t index(uint64_t v) noexcept {
    if (v < kSub) return static_cast<uint32_t>(v);
    const uint32_t msb = 63u - static_cast<uint32_t>(__builtin_clzll(v));  // >= SubBits
    const uint32_t shift = msb - (SubBits - 1);
    return kSub + (msb - SubBits) * kHalf + static_cast<uint32_t>((v >> shift) - kHalf);
  }
  // Smallest value of bucket i.
  static constexpr uint64_t lower(uint32_t i) noexcept {
    if (i < kSub) return i;
    const uint32_t k = (i - kSub) / kHalf, sub = (i - kSub) % kHalf;
    return (uint64_t{kHalf} + sub) << (k + 1);
  }
  // One past the largest value of bucket i.
  static constexpr uint64_t upper(uint32_t i) noexcept {
    return i + 1 < kBuckets ? lower(i + 1) : ~uint64_t{0};
  }
};

// What a histogram's counts say: exact count, min, max and mean (from the running sum the owner
// keeps), quantiles as the high end of the bucket holding them (never above max), and the
// standard deviation from the bucket midpoints (within the bucket width).
struct HistSummary {
  uint64_t count = 0, min = 0, max = 0;
  double mean = 0, stdev = 0;
  uint64_t p50 = 0, p99 = 0, p999 = 0;
};

template <class B>
uint64_t hist_quantile(const uint64_t* counts, uint64_t total, uint64_t max, double q) noexcept {
  if (total == 0) return 0;
  if (q >= 1.0) return max;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(total));
  if (rank >= total) rank = total - 1;
  uint64_t seen = 0;
  for (uint32_t b = 0; b < B::kBuckets; ++b) {
    seen += counts[b];
    if (seen > rank) return std::min(B::upper(b) - 1, max ? max : ~uint64_t{0});
  }
  return max;
}

template <class B>
HistSummary summarize_hist(const uint64_t* counts, uint64_t min, uint64_t max,
                           uint64_t sum) noexcept {
  HistSummary s;
  for (uint32_t b = 0; b < B::kBuckets; ++b) s.count += counts[b];
  if (s.count == 0) return s;
  s.min = min;
  s.max = max;
  const double n = static_cast<double>(s.count);
  s.mean = static_cast<double>(sum) / n;
  double var = 0;
  for (uint32_t b = 0; b < B::kBuckets; ++b) {
    if (!counts[b]) continue;
    const double hi = b + 1 < B::kBuckets ? static_cast<double>(B::upper(b) - 1)
                                          : static_cast<double>(B::lower(b));
    const double mid = std::clamp((static_cast<double>(B::lower(b)) + hi) / 2,
                                  static_cast<double>(min), static_cast<double>(max));
    var += static_cast<double>(counts[b]) * (mid - s.mean) * (mid - s.mean);
  }
  s.stdev = std::sqrt(var / n);
  s.p50 = hist_quantile<B>(counts, s.count, max, 0.5);
  s.p99 = hist_quantile<B>(counts, s.count, max, 0.99);
  s.p999 = hist_quantile<B>(counts, s.count, max, 0.999);
  return s;
}

// A single-threaded histogram with plain counts (rdmx-perf's stamped phase).
template <uint32_t SubBits>
class Histogram {
 public:
  using Buckets = LogLinearBuckets<SubBits>;
  static constexpr uint32_t kBuckets = Buckets::kBuckets;
  Histogram() : counts_(kBuckets, 0) {}
  static uint32_t index(uint64_t v) noexcept { return Buckets::index(v); }
  static uint64_t lower(uint32_t i) noexcept { return Buckets::lower(i); }
  static uint64_t upper(uint32_t i) noexcept { return Buckets::upper(i); }
  void add(uint64_t v) noexcept {
    ++counts_[index(v)];
    ++total_;
  }
  uint64_t total() const noexcept { return total_; }
  const std::vector<uint64_t>& counts() const noexcept { return counts_; }

 private:
  std::vector<uint64_t> counts_;
  uint64_t total_ = 0;
};

}  // namespace rdmx
