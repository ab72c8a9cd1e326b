#include <rdmx/rt/hot_log.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include <rdmx/core/assert.hpp>

namespace rdmx::rt {

HotLogRing::HotLogRing(uint32_t capacity, uint32_t lcore)
    : capacity_(capacity),
      mask_(capacity - 1),
      lcore_(lcore),
      records_(std::make_unique<HotLogRecord[]>(capacity)) {
  RDMX_ASSERT(capacity >= 2 && (capacity & (capacity - 1)) == 0);
}

bool HotLogRing::pop(HotLogRecord* out) noexcept {
  const uint64_t head = head_.load(std::memory_order_relaxed);
  if (head == tail_.load(std::memory_order_acquire)) return false;
  *out = records_[head & mask_];
  head_.store(head + 1, std::memory_order_release);
  return true;
}

std::string format_hot_log_record(const HotLogRecord& r) {
  char buf[512];
  const uint64_t* a = r.args;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wformat-nonliteral"
  // The format was checked against the caller's (8-byte) argument types by RDMX_HOT_LOG; every
  // slot is passed as a uint64_t, which the x86-64 ABI passes exactly as it passes those types.
  int n = std::snprintf(buf, sizeof(buf), r.fmt, a[0], a[1], a[2], a[3]);
#pragma GCC diagnostic pop
  if (n < 0) return "(bad hot-log format)";
  return "lcore " + std::to_string(r.lcore) + " tsc " + std::to_string(r.tsc) + ": " + buf;
}

size_t HotLogRing::drain() noexcept {
  size_t n = 0;
  HotLogRecord r;
  while (pop(&r)) {
    if (log_enabled(r.level)) {
      std::string s = format_hot_log_record(r);
      log(r.level, "%s", s.c_str());
    }
    ++n;
  }
  return n;
}

void HotLogDrainer::start(std::vector<HotLogRing*> rings, unsigned period_us) {
  stop();
  rings_ = std::move(rings);
  stop_.store(false, std::memory_order_relaxed);
  thread_ = std::thread([this, period_us] {
    while (!stop_.load(std::memory_order_acquire)) {
      size_t n = 0;
      for (HotLogRing* r : rings_) n += r->drain();
      drained_.fetch_add(n, std::memory_order_relaxed);
      std::this_thread::sleep_for(std::chrono::microseconds(period_us));
    }
  });
}

void HotLogDrainer::stop() {
  if (thread_.joinable()) {
    stop_.store(true, std::memory_order_release);
    thread_.join();
  }
  size_t n = 0;
  for (HotLogRing* r : rings_) n += r->drain();
  drained_.fetch_add(n, std::memory_order_relaxed);
}

}  // namespace rdmx::rt
