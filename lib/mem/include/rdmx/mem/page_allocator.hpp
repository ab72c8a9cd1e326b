// Chunk-page allocator: a LIFO free list of the arena's data pages, for apps and tests that need
// page lists to map. Owned by one core (no locks, no atomics); a page-state bitmap catches double
// frees and frees of pages that were never handed out.
#pragma once

#include <cstdint>
#include <memory>
#include <span>

#include <rdmx/core/result.hpp>
#include <rdmx/mem/arena.hpp>

namespace rdmx::mem {

class PageAllocator {
 public:
  // Setup path: every data page of `arena` starts free. Seals the arena (no more reserve_tail).
  explicit PageAllocator(Arena& arena);

  uint32_t n_free() const noexcept { return n_free_; }
  uint32_t n_total() const noexcept { return n_total_; }

  // All-or-nothing: writes `out.size()` page addresses or returns kNoMemory and takes nothing.
  Errc alloc_bulk(std::span<uint64_t> out) noexcept;
  // One page, or 0 when none is free.
  uint64_t alloc() noexcept;
  // Returns pages. kNotInArena for an address that is not a data page, kInvalidArgument for a
  // page that is already free; pages before the bad one are freed, the rest are not.
  Errc free_bulk(std::span<const uint64_t> pages) noexcept;
  Errc free(uint64_t page) noexcept { return free_bulk({&page, 1}); }

  bool is_allocated(uint64_t page) const noexcept;

 private:
  Arena& arena_;
  uint32_t n_total_ = 0;
  uint32_t n_free_ = 0;
  std::unique_ptr<uint32_t[]> stack_;   // free page indices; top = stack_[n_free_-1]
  std::unique_ptr<uint64_t[]> in_use_;  // bitmap, 1 = handed out
};

}  // namespace rdmx::mem
