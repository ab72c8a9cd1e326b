// Inline helpers of the forwarding engines (hot path: no allocation, no system call).
#pragma once

#include <span>

#include <rdmx/rt/dpdk.hpp>

#include "../rdmafwd.hpp"

namespace rdmafwd {

// Cookie kinds.
enum : uint8_t {
  kCkIo = 1,         // umr/write/read: the client's data WQE
  kCkReq = 2,        // rpc: client request SEND
  kCkReplyRecv = 3,  // rpc: client receive of a reply
  kCkReqRecv = 4,    // peer receive slot (rpc request, relay-in message)
  kCkSrvWrite = 5,   // rpc server: RDMA WRITE of a read request's payload
  kCkSrvRead = 6,    // rpc server: RDMA READ of a write request's payload
  kCkSrvReply = 7,   // rpc server: SEND_WITH_INV reply
  kCkSrc = 8,        // relay: source SEND
  kCkRelay = 9,      // relay: relay-out SEND
  kCkSinkRecv = 10,  // relay: sink receive slot
  kCkBye = 11,       // two-process: the client's goodbye SEND
};

// rpc: the buffer of one call or reply: the RPC-over-RDMA header, the ONC RPC message and the
// NFSv3 arguments or results (engines/nfs_wire.hpp). The largest is a WRITE call with the
// largest file handle (64 bytes): 52 header bytes (one Read segment) + 40 + 88 = 180; with the
// 32-byte handle rdmafwd's server hands out 148, a READ call 140, the replies 96 (READ) and 80
// (WRITE) (test_peer_checks measures each).
inline constexpr uint32_t kSmall = 256;
// kSmall buffers per slot of a lane's small area: client c_small: the request, the reply's
// receive, the second request of --forge-twin-every (tests); server p_small: the reply, the
// reply that belongs to no slot (by receive slot).
inline constexpr uint32_t kSmallPerSlot = 3;

inline uint32_t io_len(const Lane& l) noexcept {
  return l.cfg.pages * l.page_size;
}

inline bool may_issue(const Lane& l) noexcept {
  return !l.draining && !l.failed && (l.cfg.io_limit == 0 || l.issued < l.cfg.io_limit);
}

inline bool pop_slot(Lane& l, uint32_t& slot) noexcept {
  if (l.n_free == 0) return false;
  slot = l.free_slots[--l.n_free];
  return true;
}
inline void push_slot(Lane& l, uint32_t slot) noexcept {
  l.slots[slot].busy = false;
  l.free_slots[l.n_free++] = slot;
}
inline void reset_slots(Lane& l) noexcept {
  l.n_free = 0;
  for (uint32_t i = l.depth; i-- > 0;) {
    l.slots[i] = Lane::Slot{};
    l.srv[i] = Lane::Slot{};
    l.free_slots[l.n_free++] = i;
  }
  l.issued = l.completed = 0;
  l.unmaps.n = 0;
}
inline bool all_slots_free(const Lane& l) noexcept {
  return l.n_free == l.depth;
}

// Unmaps later when the SQ has no room now (or earlier unmaps still wait: in order).
inline void unmap_or_queue(win::PollCore& k, UnmapQueue& u, win::Window* w) noexcept {
  if (u.n == 0 && k.unmap(w) == Errc::kOk) return;
  u.q[u.n++] = w;
}
inline void retry_unmaps(win::PollCore& k, UnmapQueue& u) noexcept {
  uint32_t done = 0;
  while (done < u.n && k.unmap(u.q[done]) == Errc::kOk) ++done;
  if (done == 0) return;
  for (uint32_t i = done; i < u.n; ++i) u.q[i - done] = u.q[i];
  u.n -= done;
}

// An I/O completed without a latency sample (a relay server has no clock of the source).
inline void io_done_untimed(Lane& l, uint64_t bytes) noexcept {
  l.st.ios.add(1);
  l.st.bytes.add(bytes);
  ++l.completed;
}
inline void io_done(Lane& l, uint64_t start_tsc, uint64_t now, uint64_t bytes) noexcept {
  l.st.lat.add(now - start_tsc);
  io_done_untimed(l, bytes);
}

// A completion in error: the QP is in error: stop issuing; the lane runner recovers both ends
// and counts the I/Os that did not complete (main.cpp, recover_lane).
inline void io_failed(Lane& l) noexcept {
  l.failed = true;
}

// A rejected post for another reason than a full queue or an empty cache.
inline void note_reject(Lane& l, Errc e) noexcept {
  if (e == Errc::kQpError) {
    io_failed(l);
    return;
  }
  if (e != Errc::kNoRoom && e != Errc::kNoWindow && e != Errc::kBusy) l.st.rejected.add(1);
}

inline mlx5::prm::Sge sge(uint64_t addr, uint32_t len, uint32_t lkey) noexcept {
  mlx5::prm::Sge s;
  s.addr = addr;
  s.length = len;
  s.lkey = lkey;
  return s;
}

// Posts the receive slot `k` of `bufs` on core `k_core` (every scatter entry one chunk page).
inline Errc post_slot_recv(win::PollCore& core, const SlotBufs& bufs, uint32_t k,
                           uint32_t page_size, uint32_t lkey, uint8_t kind) noexcept {
  mlx5::prm::Sge sg[16];
  const uint32_t n = bufs.per_slot;
  for (uint32_t i = 0; i < n; ++i) sg[i] = sge(bufs.slot(k)[i], page_size, lkey);
  return core.post_recv(std::span<const mlx5::prm::Sge>(sg, n), cookie(kind, k));
}

// Message header (first kHdr bytes of a payload, outside the checksum).
struct PayloadHdr {
  uint64_t magic;
  uint64_t seq;
  uint64_t tsc;
  uint32_t slot;
  uint32_t len;
  uint64_t csum_a, csum_b;
};
inline constexpr uint64_t kPayloadMagic = 0x72646d78666c6f77ull;  // "rdmxflow"
static_assert(sizeof(PayloadHdr) <= kHdr);

}  // namespace rdmafwd
