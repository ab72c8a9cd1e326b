// The arena: the one piece of memory rdmx may expose, registered once as the parent MR.
//
// Anatomy (addresses grow to the right):
//
//   base                                    data_end                          base + size
//   +-----------------------------------------+-----------------------------------+
//   | chunk pages: what windows may map       | reserved tail (window KLM lists,  |
//   | (and what PageAllocator hands out)      | ...): registered, never mappable  |
//   +-----------------------------------------+-----------------------------------+
//
// The whole arena is registered with Device::reg_mr once, at create(). The parent MR's lkey is
// what every window's translation entries point at; its rkey never leaves the process (rdmx
// gives peers window rkeys only), and by default it is registered with local rights only
// (ArenaConfig::access), so that rkey opens nothing remotely even when guessed. Chunk pages are
// page_size-aligned pieces of the data part.
//
// Thread safety: after setup (create + reserve_tail) an Arena is read-only and may be shared by
// every poll core. All query functions are hot-path safe (noexcept, no allocation).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include <rdmx/core/config.hpp>
#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::mem {

// Where the arena's memory comes from.
enum class Source : uint8_t {
  kDpdk,  // rte_memzone_reserve_aligned (hugepages when the EAL has them); needs the EAL
  kHeap,  // an internal aligned allocation (tests and EAL-less tools)
  kUser,  // the caller's buffer (must outlive the Arena; must be page_size aligned)
};

struct ArenaConfig {
  size_t bytes = 0;              // arena size; rounded up to a whole number of chunk pages
  uint32_t page_size = kPage4K;  // kPage4K, kPage64K or kPage2M
  Source source = Source::kHeap;
  void* user_buf = nullptr;         // Source::kUser
  int numa_node = -1;               // Source::kDpdk socket; -1 = any (SOCKET_ID_ANY)
  std::string name = "rdmx_arena";  // Source::kDpdk memzone name (unique per process)
  // Access of the parent MR itself (local read is implicit). Default: local write only, so the
  // parent's rkey, which is never handed out but is guessable (over emu it is 0x201), opens
  // nothing remotely. Windows do not need more: the device checks a window's rights on the
  // window mkey, and its KLM entries (naming the parent's lkey) are translation only: the
  // kernel's SG_GAPS MRs put the PD's local-only local_dma_lkey there the same way.
  // Opt in to remote bits (e.g. kAccessAll) only when a peer is *given* the arena's own rkey and
  // RDMA-accesses the arena directly, without windows; then the whole registration is exposed to
  // it. In-tree users: rdmx-perf's io tests (the emu peer's target buffer, apps/rdmx-perf/
  // tests_io.cpp) and its rpc tests' register-once peer (the client arena, tests_rpc.cpp). A
  // local SGE over the arena (lkey) never needs remote bits.
  // Add kAccessMwBind when poll cores bind type-2 memory windows to the arena
  // (CoreConfig::memory_windows): a window can be bound only to an MR registered with it.
  uint32_t access = mlx5::kAccessLocalWrite;
};

// A buffer translated into chunk pages (to_pages).
struct PageSpan {
  uint32_t n_pages = 0;       // entries written to the output
  uint32_t first_offset = 0;  // offset of the buffer's first byte in the first page
  Errc errc = Errc::kOk;
  bool ok() const noexcept { return errc == Errc::kOk; }
};

class Arena {
 public:
  // Setup path: allocates (or adopts) the memory and registers it with `dev` as one MR.
  static Result<std::unique_ptr<Arena>> create(mlx5::Device& dev, const ArenaConfig& cfg);
  ~Arena();
  Arena(const Arena&) = delete;
  Arena& operator=(const Arena&) = delete;

  // Setup path: takes `bytes` (rounded up to whole chunk pages) from the end of the data part,
  // aligned to `align` (a power of two <= page_size). The reserved memory is registered but is
  // never a valid chunk page for a map. Must be called before any PageAllocator is made over
  // this arena (kState otherwise); returns the reserved region's address.
  Result<uint64_t> reserve_tail(size_t bytes, size_t align);
  // Set by PageAllocator: from then on the data part is fixed.
  void seal() noexcept { sealed_ = true; }
  bool sealed() const noexcept { return sealed_; }

  uint64_t base() const noexcept { return base_; }
  size_t size() const noexcept { return size_; }
  uint64_t data_end() const noexcept { return data_end_; }
  uint32_t page_size() const noexcept { return page_size_; }
  uint32_t page_shift() const noexcept { return page_shift_; }
  uint32_t n_pages() const noexcept {
    return static_cast<uint32_t>((data_end_ - base_) >> page_shift_);
  }
  uint32_t lkey() const noexcept { return mr_.lkey; }
  const mlx5::MrInfo& mr() const noexcept { return mr_; }
  Source source() const noexcept { return source_; }
  void* ptr(uint64_t addr) const noexcept { return reinterpret_cast<void*>(addr); }

  // [addr, addr+len) lies inside the whole registered region (data or reserved).
  bool contains(uint64_t addr, uint64_t len) const noexcept {
    return addr >= base_ && len <= size_ && addr - base_ <= size_ - len;
  }
  // `addr` is the start of a chunk page of the data part (in the arena, aligned, not reserved).
  bool is_page(uint64_t addr) const noexcept {
    return addr >= base_ && addr < data_end_ && ((addr - base_) & (page_size_ - 1)) == 0;
  }
  uint64_t page_addr(uint32_t index) const noexcept {
    return base_ + (uint64_t{index} << page_shift_);
  }
  uint32_t page_index(uint64_t addr) const noexcept {
    return static_cast<uint32_t>((addr - base_) >> page_shift_);
  }

  // Translates the buffer [addr, addr+len) (inside the data part, len > 0) into the chunk pages
  // it touches, written to `out`, and the offset of its first byte in the first page.
  // Errors: kInvalidArgument (len 0), kNotInArena (outside the data part), kTooManyPages (out is
  // too small). Hot-path safe.
  PageSpan to_pages(uint64_t addr, uint64_t len, std::span<uint64_t> out) const noexcept;

 private:
  Arena() = default;

  mlx5::Device* dev_ = nullptr;
  Source source_ = Source::kHeap;
  uint64_t base_ = 0;
  size_t size_ = 0;
  uint64_t data_end_ = 0;
  uint32_t page_size_ = kPage4K;
  uint32_t page_shift_ = 12;
  bool sealed_ = false;
  mlx5::MrInfo mr_;
  const void* memzone_ = nullptr;  // rte_memzone* for Source::kDpdk
  void* heap_ = nullptr;           // Source::kHeap
};

}  // namespace rdmx::mem
