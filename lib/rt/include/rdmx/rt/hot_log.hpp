// Hot-path logging: one lock-free single-producer/single-consumer ring per poll core.
//
// A poll core must not print (printf takes a lock and makes a write(2) system call). It pushes a
// fixed-size record instead - a static printf format, up to four 64-bit arguments, the TSC - and
// a non-poll thread (HotLogDrainer, or the main thread calling drain()) formats and prints it
// through rdmx::log. When the ring is full the record is dropped and counted, never waited for.
//
//   producer: the poll core that owns the ring (push)        - hot path, no syscall, no lock
//   consumer: exactly one non-poll thread at a time (drain)  - setup/background path
//
// RDMX_HOT_LOG compiles to nothing when RDMX_HOT_LOG_ENABLED is 0. Arguments must be 8-byte
// integers or pointers (uint64_t, int64_t, size_t, void*) and the format must match them
// (%" PRIu64 ", %p, ...): the macro checks the format at compile time.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include <rdmx/core/config.hpp>
#include <rdmx/core/log.hpp>

#ifndef RDMX_HOT_LOG_ENABLED
#define RDMX_HOT_LOG_ENABLED 1
#endif

namespace rdmx::rt {

struct HotLogRecord {
  uint64_t tsc = 0;
  const char* fmt = nullptr;  // must be a string literal (it outlives the record)
  uint64_t args[4] = {};
  uint32_t lcore = 0;
  LogLevel level = LogLevel::kInfo;
  uint8_t n_args = 0;
};

class HotLogRing {
 public:
  // capacity: a power of two >= 2.
  explicit HotLogRing(uint32_t capacity, uint32_t lcore = 0);
  HotLogRing(const HotLogRing&) = delete;
  HotLogRing& operator=(const HotLogRing&) = delete;

  // Producer (the owning poll core). Hot path: never blocks, never makes a system call. Returns
  // false (and counts a drop) when the ring is full.
  template <class... Args>
  bool push(LogLevel level, const char* fmt, Args... args) noexcept {
    static_assert(sizeof...(Args) <= 4, "RDMX_HOT_LOG takes at most 4 arguments");
    static_assert(
        ((sizeof(Args) == 8 && (std::is_integral_v<Args> || std::is_pointer_v<Args>)) && ...),
        "RDMX_HOT_LOG arguments must be 8-byte integers or pointers");
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    if (tail - head_cache_ >= capacity_) {
      head_cache_ = head_.load(std::memory_order_acquire);
      if (tail - head_cache_ >= capacity_) {
        dropped_.store(dropped_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
        return false;
      }
    }
    HotLogRecord& r = records_[tail & mask_];
    r.tsc = read_tsc();
    r.fmt = fmt;
    r.lcore = lcore_;
    r.level = level;
    r.n_args = static_cast<uint8_t>(sizeof...(Args));
    size_t i = 0;
    ((r.args[i++] = to_u64(args)), ...);
    tail_.store(tail + 1, std::memory_order_release);
    return true;
  }

  // Consumer: formats and prints every pending record through rdmx::log; returns how many.
  size_t drain() noexcept;
  // Consumer: copies out at most one record (tests).
  bool pop(HotLogRecord* out) noexcept;

  uint64_t dropped() const noexcept { return dropped_.load(std::memory_order_relaxed); }
  uint32_t capacity() const noexcept { return capacity_; }

 private:
  template <class T>
  static uint64_t to_u64(T v) noexcept {
    if constexpr (std::is_pointer_v<T>) {
      return reinterpret_cast<uintptr_t>(v);
    } else {
      return static_cast<uint64_t>(v);
    }
  }
  static uint64_t read_tsc() noexcept { return __builtin_ia32_rdtsc(); }

  // Producer line.
  alignas(kCacheLine) std::atomic<uint64_t> tail_{0};
  uint64_t head_cache_ = 0;
  std::atomic<uint64_t> dropped_{0};
  // Consumer line.
  alignas(kCacheLine) std::atomic<uint64_t> head_{0};
  // Read-only after construction.
  alignas(kCacheLine) uint32_t capacity_;
  uint32_t mask_;
  uint32_t lcore_;
  std::unique_ptr<HotLogRecord[]> records_;
};

// Formats one record as rdmx::log would print it (without the "rdmx LEVEL: " prefix).
std::string format_hot_log_record(const HotLogRecord& r);

// A background thread (never a poll core) draining a set of rings every `period_us`.
class HotLogDrainer {
 public:
  HotLogDrainer() = default;
  ~HotLogDrainer() { stop(); }
  HotLogDrainer(const HotLogDrainer&) = delete;
  HotLogDrainer& operator=(const HotLogDrainer&) = delete;

  // Setup path. The rings must outlive the drainer (or stop() must be called first).
  void start(std::vector<HotLogRing*> rings, unsigned period_us = 1000);
  // Stops the thread and drains what is left. Idempotent.
  void stop();
  size_t drained() const noexcept { return drained_.load(std::memory_order_relaxed); }

 private:
  std::vector<HotLogRing*> rings_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<size_t> drained_{0};
};

namespace detail {
[[gnu::format(printf, 1, 2)]] inline void hot_log_format_check(const char*, ...) noexcept {}
}  // namespace detail

}  // namespace rdmx::rt

#if RDMX_HOT_LOG_ENABLED
#define RDMX_HOT_LOG(ring, level, fmt, ...)                                              \
  do {                                                                                   \
    if (false) ::rdmx::rt::detail::hot_log_format_check(fmt __VA_OPT__(, ) __VA_ARGS__); \
    (ring).push((level), (fmt)__VA_OPT__(, ) __VA_ARGS__);                               \
  } while (0)
#else
#define RDMX_HOT_LOG(ring, level, fmt, ...) \
  do {                                      \
  } while (0)
#endif
