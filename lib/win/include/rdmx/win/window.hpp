// A window: one indirect (KLM) mkey created at setup, pointed at a list of chunk pages by a map
// (one UMR WQE) and freed by an unmap (one invalidate UMR WQE). See doc/guides/windows.md.
//
// rkey = lkey = (mkey index << 8) | key. Every map writes a new 8-bit key from the core's KeyGen
// (key_gen.hpp: random by default, never the current key), so a peer holding the rkey of an
// earlier mapping is refused by the NIC and cannot predict the next one. IOVA: zero-based — the
// mkey's start address is 0 from creation and no UMR writes it, so a peer addresses bytes 0 ..
// length-1 of a mapping (the first byte is `first_byte_offset` into the first page).
#pragma once

#include <cstdint>
#include <span>

#include <rdmx/core/config.hpp>
#include <rdmx/core/result.hpp>

namespace rdmx::win {

class PollCore;
class WindowPool;
class WindowCache;

// Where a window is. Exactly one at any time (WindowPool::check_windows proves it):
//   kCache     free, in its owner core's cache; every UMR on it has completed
//   kUnmapping in its owner core's cache, reusable by that core (same-SQ ordering), but its
//              invalidate UMR had not completed when this was recorded: it may not leave the
//              core until it has. Completions do not rewrite the state (the core compares the
//              window's last UMR position with its SQ consumer): Window::state() is the state
//              recorded, PollCore::state_of() the state as of now (kCache once that UMR is done)
//   kDepot     in the shared depot, owned by no core; device state free
//   kMapped    handed to the application by map(); owned by the core that mapped it
enum class WindowState : uint8_t { kCache, kUnmapping, kDepot, kMapped };
const char* window_state_name(WindowState s) noexcept;

inline constexpr uint16_t kNoCore = 0xffff;

class alignas(kCacheLine) Window {
 public:
  // Valid while the window is mapped (the values of the current mapping).
  uint32_t rkey() const noexcept { return mkey_base_ | key_; }
  uint32_t lkey() const noexcept { return mkey_base_ | key_; }
  uint64_t iova() const noexcept { return 0; }  // zero-based
  uint64_t length() const noexcept { return length_; }
  uint32_t n_pages() const noexcept { return n_pages_; }
  uint8_t key() const noexcept { return key_; }
  uint32_t mkey_index() const noexcept { return mkey_base_ >> 8; }

  WindowState state() const noexcept { return state_; }
  uint16_t owner() const noexcept { return owner_; }
  uint32_t id() const noexcept { return id_; }
  bool dirty() const noexcept { return dirty_; }

 private:
  friend class PollCore;
  friend class WindowPool;
  friend class WindowCache;

  // Local uses since the map that decide the unmap's fence (doc/guides/windows.md, "Fences").
  static constexpr uint8_t kUsedByRead = 1;    // lkey of an RDMA READ / atomic scatter list
  static constexpr uint8_t kUsedByGather = 2;  // lkey of a WRITE / SEND gather list

  uint32_t mkey_base_ = 0;  // index << 8
  uint8_t key_ = 0;         // current 8-bit key (the one written by the last map)
  WindowState state_ = WindowState::kDepot;
  uint8_t local_use_ = 0;
  bool dirty_ = false;  // a UMR on it was flushed/failed: device state unknown until recover()
  uint16_t owner_ = kNoCore;
  // SQ producer counter (WQEBBs, low 32 bits) just past the last data WQE posted with this
  // window in its local SGE list since the map (meaningful while local_use_ != 0). Once the SQ
  // consumer reached it, every such WQE completed and the unmap needs no ordering fence.
  uint32_t use_end_ = 0;
  uint32_t id_ = 0;  // index in the pool
  uint32_t n_pages_ = 0;
  // Its owner's SQ producer counter (SqWriter::pi(), 64-bit WQEBBs) just past its last UMR:
  // every UMR posted on it has completed once that SQ's consumer reached it, which is how the
  // core tells (PollCore::umrs_done) without touching the window when the completions are
  // polled. 0 while in the depot (another core's counters mean nothing to it).
  uint64_t umr_end_ = 0;
  // The same for its last pointer-mode map (low 32 bits): its KLM array may still be read by
  // the device while that map has not completed (PollCore::klm_busy).
  uint32_t klm_end_ = 0;
  uint64_t length_ = 0;
  // The key of the current mapping as the invalidate WQE carries it, set with key_ by every map
  // (PollCore::set_key) so that unmap's fast path only loads them: ctrl bytes 8-15 without
  // fm_ce_se (the mkey, big-endian: prm::ctrl_word1(0, mkey)) and the mkey context's first word
  // (prm::mkc_word0(true, 0, key)).
  uint64_t inv_ctrl1_ = 0;
  uint64_t inv_mkc0_ = 0;
};

static_assert(sizeof(Window) == kCacheLine, "a window is one cache line");

// One map request (map_burst).
struct MapRequest {
  std::span<const uint64_t> pages;  // chunk page addresses, page aligned, in the arena
  uint32_t access = 0;              // mlx5::Access bits
  uint32_t first_byte_offset = 0;   // offset of the first mapped byte in pages[0]
  uint64_t length = 0;              // bytes mapped; must end inside the last page
};

// One part of every block of an interleaved layout (PollCore::map_interleaved): `bytes` bytes
// of the arena at `addr` in block 0, and `bytes + skip` further on in each next block. A storage
// target's data and protection information: {data, 512, 0} and {pi, 8, 0} over n blocks put
// 512 data bytes then their 8 metadata bytes, n times, behind one rkey.
struct InterleavedPart {
  uint64_t addr = 0;
  uint32_t bytes = 0;
  uint32_t skip = 0;
};

// What map() returns: the window and what to hand the peer (rkey, iova, length), or an Errc.
struct MapResult {
  Window* window = nullptr;
  uint32_t rkey = 0;
  uint32_t lkey = 0;
  uint64_t iova = 0;
  uint64_t length = 0;
  Errc errc = Errc::kOk;
  bool ok() const noexcept { return errc == Errc::kOk; }
};

// ---- Type-2 memory windows -------------------------------------------------------------------
// A memory window of one poll core (CoreConfig::memory_windows): allocated at setup
// (ibv_alloc_mw, type 2), bound to a byte range of the arena by a bind WQE posted on the core's
// QP (PollCore::bind_mw), and only usable by remote requests arriving on that QP. Every bind
// writes a new key from the core's generator, so the rkey of an earlier binding is dead.
// Unlike a Window it maps one contiguous range of the arena (one translation entry), is never
// the local key of a WQE, and never leaves its core.
//   kFree         free on the device (or its invalidate is in the SQ: same-SQ order lets the
//                 core bind it again at once)
//   kBound        bound by bind_mw(); its rkey is valid on the core's QP
enum class MwState : uint8_t { kFree, kBound };

class MemoryWindow {
 public:
  // Valid while bound (the values of the current binding).
  uint32_t rkey() const noexcept { return mkey_base_ | key_; }
  uint64_t addr() const noexcept { return addr_; }  // first bound byte of the arena
  uint64_t length() const noexcept { return length_; }
  bool zero_based() const noexcept { return zero_based_; }
  uint64_t iova() const noexcept { return zero_based_ ? 0 : addr_; }  // what the peer addresses
  MwState state() const noexcept { return state_; }
  uint16_t outstanding_umrs() const noexcept { return outstanding_; }
  bool dirty() const noexcept { return dirty_; }
  uint32_t id() const noexcept { return id_; }

 private:
  friend class PollCore;
  uint32_t mkey_base_ = 0;  // index << 8
  uint8_t key_ = 0;         // key of the last bind (an invalidate keeps it)
  MwState state_ = MwState::kFree;
  bool zero_based_ = false;
  bool dirty_ = false;        // a bind/invalidate of it failed or was flushed: recover()
  uint16_t outstanding_ = 0;  // its bind/invalidate WQEs not yet completed
  uint32_t id_ = 0;           // index in the core's windows
  uint64_t addr_ = 0;
  uint64_t length_ = 0;
};

// What bind_mw() returns: the window and what to hand the peer (rkey, iova, length), or an Errc.
struct BindResult {
  MemoryWindow* mw = nullptr;
  uint32_t rkey = 0;
  uint64_t iova = 0;
  uint64_t length = 0;
  Errc errc = Errc::kOk;
  bool ok() const noexcept { return errc == Errc::kOk; }
};

}  // namespace rdmx::win
