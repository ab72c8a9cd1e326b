#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <rdmx/core/log.hpp>
#include <rdmx/mem/arena.hpp>

#include "dpdk_mem.hpp"

namespace rdmx::mem {

namespace {
bool valid_page_size(uint32_t p) {
  return p == kPage4K || p == kPage64K || p == kPage2M;
}
uint32_t log2u(uint64_t v) {
  return 63u - static_cast<uint32_t>(__builtin_clzll(v));
}
}  // namespace

Result<std::unique_ptr<Arena>> Arena::create(mlx5::Device& dev, const ArenaConfig& cfg) {
  if (!valid_page_size(cfg.page_size))
    return make_error(Errc::kInvalidArgument, "arena: page size " + std::to_string(cfg.page_size) +
                                                  " (allowed: 4096, 65536, 2097152)");
  if (cfg.bytes == 0) return make_error(Errc::kInvalidArgument, "arena: size 0");
  if ((cfg.access & ~uint32_t{mlx5::kAccessAll | mlx5::kAccessMwBind}) != 0)
    return make_error(Errc::kInvalidArgument, "arena: unknown access bits");
  const size_t bytes = (cfg.bytes + cfg.page_size - 1) & ~size_t{cfg.page_size - 1};

  std::unique_ptr<Arena> a(new Arena());
  a->dev_ = &dev;
  a->source_ = cfg.source;
  a->page_size_ = cfg.page_size;
  a->page_shift_ = log2u(cfg.page_size);
  a->size_ = bytes;

  void* mem = nullptr;
  switch (cfg.source) {
    case Source::kUser:
      if (!cfg.user_buf) return make_error(Errc::kInvalidArgument, "arena: no user buffer");
      if (reinterpret_cast<uintptr_t>(cfg.user_buf) & (cfg.page_size - 1))
        return make_error(Errc::kInvalidArgument,
                          "arena: user buffer not aligned to the chunk page size");
      mem = cfg.user_buf;
      break;
    case Source::kHeap:
      mem = std::aligned_alloc(cfg.page_size, bytes);
      if (!mem) {
        char what[160];
        std::snprintf(what, sizeof what,
                      "arena: cannot allocate %zu bytes (%.1f MiB) aligned to %u-byte pages "
                      "from the heap (aligned_alloc: out of memory)",
                      bytes, static_cast<double>(bytes) / (1 << 20), cfg.page_size);
        return make_error(Errc::kNoMemory, what);
      }
      std::memset(mem, 0, bytes);
      a->heap_ = mem;
      break;
    case Source::kDpdk: {
      const int socket = cfg.numa_node < 0 ? SOCKET_ID_ANY : cfg.numa_node;
      const rte_memzone* mz =
          rte_memzone_reserve_aligned(cfg.name.c_str(), bytes, socket, 0, cfg.page_size);
      if (!mz)
        return make_error(Errc::kNoMemory, "arena: rte_memzone_reserve_aligned(" + cfg.name +
                                               ") failed: " + rte_strerror(rte_errno) +
                                               " (is the EAL initialised?)");
      mem = mz->addr;
      a->memzone_ = mz;
      break;
    }
  }
  a->base_ = reinterpret_cast<uint64_t>(mem);
  a->data_end_ = a->base_ + bytes;

  auto mr = dev.reg_mr(mem, bytes, cfg.access);
  if (!mr) {
    // The destructor frees the memory; mr_.lkey == 0 marks "not registered".
    return make_error(mr.error().code, "arena: reg_mr failed: " + mr.error().message);
  }
  a->mr_ = mr.value();
  RDMX_LOG_DEBUG("arena: %zu bytes at 0x%llx, %u-byte pages, lkey 0x%x", bytes,
                 static_cast<unsigned long long>(a->base_), cfg.page_size, a->mr_.lkey);
  return a;
}

Arena::~Arena() {
  if (dev_ && mr_.length != 0) {
    Status s = dev_->dereg_mr(mr_);
    if (!s) RDMX_LOG_WARN("arena: dereg_mr: %s", s.error().message.c_str());
  }
  if (heap_) std::free(heap_);
  if (memzone_) rte_memzone_free(static_cast<const rte_memzone*>(memzone_));
}

Result<uint64_t> Arena::reserve_tail(size_t bytes, size_t align) {
  if (sealed_)
    return make_error(Errc::kState, "arena: reserve_tail after a PageAllocator was made");
  if (align == 0 || (align & (align - 1)) || align > page_size_)
    return make_error(Errc::kInvalidArgument, "arena: reserve alignment");
  const uint64_t rounded = (uint64_t{bytes} + page_size_ - 1) & ~uint64_t{page_size_ - 1};
  if (rounded >= data_end_ - base_)
    return make_error(Errc::kNoMemory,
                      "arena: reserving " + std::to_string(bytes) + " bytes leaves no chunk page");
  data_end_ -= rounded;  // page aligned, hence `align` aligned (align <= page_size)
  return data_end_;
}

PageSpan Arena::to_pages(uint64_t addr, uint64_t len, std::span<uint64_t> out) const noexcept {
  PageSpan r;
  if (len == 0) {
    r.errc = Errc::kInvalidArgument;
    return r;
  }
  if (addr < base_ || addr >= data_end_ || len > data_end_ - addr) {
    r.errc = Errc::kNotInArena;
    return r;
  }
  const uint64_t mask = page_size_ - 1;
  const uint64_t first = addr & ~mask;
  const uint64_t last = (addr + len - 1) & ~mask;
  const uint64_t n = ((last - first) >> page_shift_) + 1;
  if (n > out.size()) {
    r.errc = Errc::kTooManyPages;
    return r;
  }
  for (uint64_t i = 0; i < n; ++i) out[i] = first + (i << page_shift_);
  r.n_pages = static_cast<uint32_t>(n);
  r.first_offset = static_cast<uint32_t>(addr & mask);
  return r;
}

}  // namespace rdmx::mem
