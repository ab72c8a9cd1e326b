// A counter written by one thread (the one that owns the structure holding it) and read from
// any thread. The writer's increment is a plain load, add and store of an atomic (no locked
// instruction: one writer needs none), so a reader on another thread gets a value the writer
// stored, never a torn one, and there is no data race in the C++ memory model. Readers that
// need more than one counter to be consistent with another use rdmx/win/stats.hpp's snapshot.
#pragma once

#include <atomic>
#include <cstdint>

namespace rdmx {

class Counter {
 public:
  // Writer only.
  void add(uint64_t d) noexcept {
    v_.store(v_.load(std::memory_order_relaxed) + d, std::memory_order_relaxed);
  }
  Counter& operator+=(uint64_t d) noexcept {
    add(d);
    return *this;
  }
  Counter& operator++() noexcept {
    add(1);
    return *this;
  }
  // Any thread.
  uint64_t get() const noexcept { return v_.load(std::memory_order_relaxed); }
  operator uint64_t() const noexcept { return get(); }  // NOLINT: reads as the number it is

 private:
  std::atomic<uint64_t> v_{0};
};

}  // namespace rdmx
