// The per-core window cache (after rte_mempool_cache): a cache-line-aligned LIFO owned by one poll
// core, no atomics. Refills from and flushes to the shared depot in bursts of half its nominal
// size. Its array can hold every window of the pool, so a push never fails: windows whose unmap
// has not completed (kUnmapping) cannot go to the depot and may pile up above the nominal size.
#pragma once

#include <cstdint>
#include <cstring>
#include <memory>

#include <rdmx/core/config.hpp>
#include <rdmx/win/window.hpp>

namespace rdmx::win {

class alignas(kCacheLine) WindowCache {
 public:
  WindowCache() = default;
  // Setup path.
  void init(uint32_t nominal_size, uint32_t capacity);

  uint32_t len() const noexcept { return len_; }
  uint32_t nominal_size() const noexcept { return size_; }
  uint32_t batch() const noexcept { return batch_; }
  bool over() const noexcept { return len_ > size_; }
  Window* at(uint32_t i) const noexcept { return slots_[i]; }

  Window* pop() noexcept { return len_ ? slots_[--len_] : nullptr; }
  void push(Window* w) noexcept {
    RDMX_DEBUG_ASSERT(len_ < cap_);
    slots_[len_++] = w;
  }
  // Forgets the top n windows (the caller took them with at()).
  void drop(uint32_t n) noexcept {
    RDMX_DEBUG_ASSERT(n <= len_);
    len_ -= n;
  }
  // Burst get: the top min(n, len()) windows into out[0..k) in one copy (out[k-1] was the top,
  // as if popped one at a time in reverse). Returns k.
  uint32_t pop_burst(Window** out, uint32_t n) noexcept {
    const uint32_t k = n < len_ ? n : len_;
    len_ -= k;
    std::memcpy(out, &slots_[len_], size_t{k} * sizeof(Window*));
    return k;
  }
  // Burst put: ws[0..n) on top in one copy (ws[n-1] ends on top).
  void push_burst(Window* const* ws, uint32_t n) noexcept {
    RDMX_DEBUG_ASSERT(n <= cap_ - len_);
    std::memcpy(&slots_[len_], ws, size_t{n} * sizeof(Window*));
    len_ += n;
  }
  // Moves the topmost window satisfying `pred` to the top; false when there is none.
  template <class P>
  bool raise_first(P&& pred) noexcept {
    for (uint32_t i = len_; i-- > 0;) {
      if (pred(slots_[i])) {
        Window* w = slots_[i];
        slots_[i] = slots_[len_ - 1];
        slots_[len_ - 1] = w;
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
    for (uint32_t i = 0; i < len_; ++i) {
      Window* w = slots_[i];
      if (taken < max && pred(w))
        out[taken++] = w;
      else
        slots_[kept++] = w;
    }
    len_ = kept;
    return taken;
  }

 private:
  uint32_t len_ = 0;
  uint32_t size_ = 0;   // nominal size: flush above it
  uint32_t batch_ = 0;  // refill / flush burst = size_ / 2
  uint32_t cap_ = 0;
  std::unique_ptr<Window*[]> slots_;
};

}  // namespace rdmx::win
