// Windows as RPC-over-RDMA chunks: the memory an RPC call offers its peer (a Read chunk's source,
// a Write chunk's or the Reply chunk's sink) mapped into rdmx windows, and retired after the
// reply as the Linux NFS client's FRWR mode does (net/sunrpc/xprtrdma/frwr_ops.c: frwr_reminv
// for the MR the reply's SEND_WITH_INV named, frwr_unmap_sync for the others, the reply handed
// up only after their LOCAL_INVs completed). See doc/guides/rpcrdma.md, "Chunk life".
//
//   CallChunks ch;                              // one per call in flight (no allocation)
//   Segment seg;
//   ch.map(core, pages, access, off, len, &seg, stats);  // seg -> a Write/Reply/Read chunk
//   ... send the call; the reply's receive completion `c` arrives through core.poll() ...
//   ch.retire(core, &c, agreed, stats);         // invalidates what the peer did not
//   ... keep polling; when ch.done(core): hand the reply up, then ch.reset()
//
// Everything here is hot path: noexcept, no allocation, no lock, no system call. A CallChunks
// belongs to the poll core whose windows it holds.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/qp.hpp>
#include <rdmx/rpcrdma/codec.hpp>
#include <rdmx/win/poll_core.hpp>

namespace rdmx::rpcrdma {

// Windows one call may hold: its Read segments, Write chunks and Reply chunk together.
inline constexpr uint32_t kMaxCallWindows = 8;

// Counters of one poll core's chunks (the caller keeps one per core and passes it in).
struct ChunkStats {
  uint64_t maps = 0;                  // windows mapped as chunks
  uint64_t remote_invalidations = 0;  // retired by the reply's SEND_WITH_INV: nothing posted
  uint64_t local_invalidations = 0;   // retired by a local invalidate (PollCore::unmap)
  // The reply's SEND_WITH_INV named one of the call's windows although remote invalidation was
  // not agreed (RFC 8797 private data, Remote Invalidation flag): the device freed it all the
  // same, so it is retired without a local invalidate, and counted here as the peer's error.
  uint64_t unagreed_remote_invalidations = 0;
  // A window no longer mapped under the call's rkey when the call retired it (the peer
  // invalidated it with an earlier message): nothing posted.
  uint64_t already_invalid = 0;
};

class CallChunks {
 public:
  // Maps `length` bytes of `pages` (from `first_byte_offset` into pages[0]) into a window of
  // `core` (PollCore::map) and writes the segment that names it: handle = the window's rkey,
  // offset = its IOVA (zero-based), length. Errors (nothing mapped): kNoRoom when the call holds
  // kMaxCallWindows windows, kOutOfRange for a length over 4 GiB - 1 (a segment's length is 32
  // bits), kState once retire() was called, and PollCore::map's.
  Errc map(win::PollCore& core, std::span<const uint64_t> pages, uint32_t access,
           uint32_t first_byte_offset, uint64_t length, Segment* out, ChunkStats& stats) noexcept;

  // The same for an interleaved layout (PollCore::map_interleaved: `blocks` blocks of `parts`,
  // e.g. a storage target's data and its protection information behind one rkey), with the
  // same errors, and map_interleaved's.
  Errc map_interleaved(win::PollCore& core, std::span<const win::InterleavedPart> parts,
                       uint32_t blocks, uint32_t access, Segment* out, ChunkStats& stats) noexcept;

  // The reply came (`reply`: its receive completion from core.poll(); nullptr when the call is
  // abandoned, e.g. it timed out): retires every window of the call. A reply that arrived as
  // SEND_WITH_INV naming one of the windows' rkeys has freed that window on the device (and
  // PollCore::poll already took it back): nothing is posted for it. Every other window still
  // mapped under the call's rkey gets a local invalidate, then the doorbell rings once.
  // `remote_invalidation` says whether the peers agreed on it (RFC 8797). Returns kOk, or the
  // Errc of an unmap that failed (kNoRoom: poll, then call again; it resumes where it stopped
  // and ignores `reply` and the flag, which the first call recorded).
  Errc retire(win::PollCore& core, const mlx5::Completion* reply, bool remote_invalidation,
              ChunkStats& stats) noexcept;

  // True once every window of the call is invalid on the device: retire() finished and the SQ
  // consumer passed its last local invalidate. Hand the reply to the caller only then: until
  // that, the peer could still reach the call's memory.
  bool done(const win::PollCore& core) const noexcept {
    return retiring_ && next_ == n_ && core.qp().sq().ci() >= fence_;
  }

  // Ready for the next call. Only when done() (or nothing was mapped); kState otherwise.
  Errc reset(const win::PollCore& core) noexcept;

  uint32_t n_windows() const noexcept { return n_; }
  bool retiring() const noexcept { return retiring_; }
  uint32_t rkey(uint32_t i) const noexcept { return rkeys_[i]; }
  // The i-th window as mapped (i < n_windows()); after retire() it may serve another map.
  const win::Window* window(uint32_t i) const noexcept { return windows_[i]; }

 private:
  Errc can_map(uint64_t length) const noexcept;  // room, state and the 32-bit length
  // Records a map's window (counted) and writes its segment; m's Errc when it failed.
  Errc hold(const win::MapResult& m, Segment* out, ChunkStats& stats) noexcept;

  std::array<win::Window*, kMaxCallWindows> windows_{};
  std::array<uint32_t, kMaxCallWindows> rkeys_{};  // each window's rkey as mapped for this call
  uint32_t n_ = 0;
  uint32_t next_ = 0;  // retire(): the next window to retire
  bool retiring_ = false;
  bool invalidated_ = false;  // the reply carried an invalidation
  bool agreed_ = false;
  uint32_t inv_rkey_ = 0;  // the rkey it named
  uint64_t fence_ = 0;     // SQ producer counter past the last local invalidate
};

}  // namespace rdmx::rpcrdma
