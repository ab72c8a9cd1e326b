#include <rdmx/mem/page_allocator.hpp>

namespace rdmx::mem {

PageAllocator::PageAllocator(Arena& arena) : arena_(arena) {
  arena_.seal();
  n_total_ = arena_.n_pages();
  n_free_ = n_total_;
  stack_ = std::make_unique<uint32_t[]>(n_total_);
  in_use_ = std::make_unique<uint64_t[]>((n_total_ + 63) / 64);
  // Lowest page on top, so a fresh allocator hands out pages in address order.
  for (uint32_t i = 0; i < n_total_; ++i) stack_[i] = n_total_ - 1 - i;
}

bool PageAllocator::is_allocated(uint64_t page) const noexcept {
  if (!arena_.is_page(page)) return false;
  const uint32_t i = arena_.page_index(page);
  return (in_use_[i / 64] >> (i % 64)) & 1;
}

Errc PageAllocator::alloc_bulk(std::span<uint64_t> out) noexcept {
  if (out.size() > n_free_) return Errc::kNoMemory;
  for (uint64_t& p : out) {
    const uint32_t i = stack_[--n_free_];
    in_use_[i / 64] |= uint64_t{1} << (i % 64);
    p = arena_.page_addr(i);
  }
  return Errc::kOk;
}

uint64_t PageAllocator::alloc() noexcept {
  uint64_t p = 0;
  return alloc_bulk({&p, 1}) == Errc::kOk ? p : 0;
}

Errc PageAllocator::free_bulk(std::span<const uint64_t> pages) noexcept {
  for (uint64_t p : pages) {
    if (!arena_.is_page(p)) return Errc::kNotInArena;
    const uint32_t i = arena_.page_index(p);
    const uint64_t bit = uint64_t{1} << (i % 64);
    if (!(in_use_[i / 64] & bit)) return Errc::kInvalidArgument;
    in_use_[i / 64] &= ~bit;
    stack_[n_free_++] = i;
  }
  return Errc::kOk;
}

}  // namespace rdmx::mem
