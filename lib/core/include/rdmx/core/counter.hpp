// A value written by one thread (the one that owns the structure holding it) and read from any
// thread. The writer's update is a plain load, change and store of an atomic (no locked
// instruction: one writer needs none), so a reader on another thread gets a value the writer
// stored, never a torn one, and there is no data race in the C++ memory model.
//
// SingleWriter<kStore, kLoad> is the idea once; its users pick the memory order:
//   Counter (relaxed both ways): a counter or gauge read on its own (the queue pair's CQE
//     counts, a poll core's UMRs in flight, its cache's length).
//   win::StatCounter (release stores, acquire loads; rdmx/win/stats.hpp): the per-core window
//     statistics, whose snapshot relies on the order between counters.
#pragma once

#include <atomic>
#include <cstdint>

namespace rdmx {

template <std::memory_order kStore, std::memory_order kLoad>
class SingleWriter {
 public:
  // Writer only. Hot path.
  void add(uint64_t d) noexcept { v_.store(v_.load(std::memory_order_relaxed) + d, kStore); }
  void sub(uint64_t d) noexcept { v_.store(v_.load(std::memory_order_relaxed) - d, kStore); }
  void set(uint64_t v) noexcept { v_.store(v, kStore); }
  SingleWriter& operator+=(uint64_t d) noexcept {
    add(d);
    return *this;
  }
  SingleWriter& operator-=(uint64_t d) noexcept {
    sub(d);
    return *this;
  }
  SingleWriter& operator++() noexcept {
    add(1);
    return *this;
  }
  SingleWriter& operator--() noexcept {
    sub(1);
    return *this;
  }
  // Any thread.
  uint64_t get() const noexcept { return v_.load(kLoad); }
  operator uint64_t() const noexcept { return get(); }  // NOLINT: reads as the number it is

 private:
  std::atomic<uint64_t> v_{0};
};

using Counter = SingleWriter<std::memory_order_relaxed, std::memory_order_relaxed>;

}  // namespace rdmx
