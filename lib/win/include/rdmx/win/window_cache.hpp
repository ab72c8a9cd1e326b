// The per-core window cache (after rte_mempool_cache): a cache-line-aligned LIFO owned by one poll
// core, no locked instruction: its length is a single-writer atomic (rdmx::Counter) that another
// thread may read (rdmx_core_stats_get's cached_windows). Refills from and flushes to the shared
// depot in bursts of half its nominal size. Its array can hold every window of the pool, so a push
// never fails: windows whose unmap has not completed (kUnmapping) cannot go to the depot and may
// pile up above the nominal size.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include <rdmx/core/config.hpp>
#include <rdmx/core/counter.hpp>
#include <rdmx/win/window.hpp>

namespace rdmx::win {

class alignas(kCacheLine) WindowCache {
 public:
  WindowCache() = default;
  // Setup path.
  void init(uint32_t nominal_size, uint32_t capacity);

  // Any thread (the others get a length the owner stored); the rest: the owning core only.
  uint32_t len() const noexcept { return static_cast<uint32_t>(len_.get()); }
  uint32_t nominal_size() const noexcept { return size_; }
  uint32_t batch() const noexcept { return batch_; }
  bool over() const noexcept { return len() > size_; }
  Window* at(uint32_t i) const noexcept { return slots_[i]; }

  Window* pop() noexcept {
    const uint32_t n = len();
    if (!n) return nullptr;
    len_.set(n - 1);
    return slots_[n - 1];
  }
  void push(Window* w) noexcept {
    const uint32_t n = len();
    RDMX_DEBUG_ASSERT(n < cap_);
    slots_[n] = w;
    len_.set(n + 1);
  }
  // Forgets the top n windows (the caller took them with at()).
  void drop(uint32_t n) noexcept {
    RDMX_DEBUG_ASSERT(n <= len());
    len_.sub(n);
  }
  // Burst get: the top min(n, len()) windows into out[0..k) in one copy (out[k-1] was the top,
  // as if popped one at a time in reverse). Returns k.
  uint32_t pop_burst(Window** out, uint32_t n) noexcept {
    const uint32_t have = len(), k = n < have ? n : have;
    len_.set(have - k);
    std::memcpy(out, &slots_[have - k], size_t{k} * sizeof(Window*));
    return k;
  }
  // Burst put: ws[0..n) on top in one copy (ws[n-1] ends on top).
  void push_burst(Window* const* ws, uint32_t n) noexcept {
    const uint32_t have = len();
    RDMX_DEBUG_ASSERT(n <= cap_ - have);
    std::memcpy(&slots_[have], ws, size_t{n} * sizeof(Window*));
    len_.set(have + n);
  }
  // Moves the topmost window satisfying `pred` to the top; false when there is none.
  template <class P>
  bool raise_first(P&& pred) noexcept {
    const uint32_t have = len();
    for (uint32_t i = have; i-- > 0;) {
      if (pred(slots_[i])) {
        Window* w = slots_[i];
        slots_[i] = slots_[have - 1];
        slots_[have - 1] = w;
        return true;
      }
    }
    return false;
  }
  // Removes up to `max` windows satisfying `pred`, oldest (bottom) first, into `out`; keeps the
  // others in order. Returns how many were taken.
  template <class P>
  uint32_t take_oldest(Window** out, uint32_t max, P&& pred) noexcept {
    uint32_t taken = 0, kept = 0;
    const uint32_t have = len();
    for (uint32_t i = 0; i < have; ++i) {
      Window* w = slots_[i];
      if (taken < max && pred(w))
        out[taken++] = w;
      else
        slots_[kept++] = w;
    }
    len_.set(kept);
    return taken;
  }

 private:
  Counter len_;
  uint32_t size_ = 0;   // nominal size: flush above it
  uint32_t batch_ = 0;  // refill / flush burst = size_ / 2
  uint32_t cap_ = 0;
  std::unique_ptr<Window*[]> slots_;
};

}  // namespace rdmx::win
