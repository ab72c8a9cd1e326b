// --fwd write / --fwd read: per I/O, the client maps its chunk pages into a window and uses the
// window's lkey as the local side of one RDMA WRITE (gather) or RDMA READ (scatter) to / from the
// peer; on the completion it unmaps the window (the window layer fences the invalidate after the
// data WQE that used it). The peer's side is a registered buffer per slot exposed through a
// window the peer maps once at start (a long-lived mapping) and unmaps at stop.
//
// Verification (single process; --no-verify turns it off): the slot header carries the I/O's
// sequence number so a stale buffer cannot pass, and the checksum of the rest of the payload is
// compared with the source's, computed at start.
#include "common.hpp"

namespace rdmafwd {
namespace {

template <bool kWrite>
bool start(Lane& l) {
  reset_slots(l);
  l.targets_unmapped = false;
  const uint32_t len = io_len(l);
  if (l.remote_peer) {  // two processes: the server mapped its windows at the rendezvous
    if (l.remote_rkeys.size() < l.depth) return false;
    if (kWrite)
      for (uint32_t i = 0; i < l.depth; ++i)
        l.csums[i] = csum_pages(l.c_src.slot(i), l.page_size, len);
    return true;
  }
  win::PollCore& p = *l.p;
  // The peer exposes slot i of its dst (write) or src (read) buffers through a window.
  for (uint32_t i = 0; i < l.depth; ++i) {
    const SlotBufs& b = kWrite ? l.p_dst : l.p_src;
    for (;;) {
      const win::MapResult m = p.map(
          std::span<const uint64_t>(b.slot(i), l.cfg.pages),
          mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead, 0, len);
      if (m.ok()) {
        l.targets[i] = m.window;
        break;
      }
      if (m.errc != Errc::kNoRoom && m.errc != Errc::kBusy) {
        for (uint32_t j = 0; j < i; ++j) (void)p.unmap(l.targets[j]);
        p.flush();
        (void)p.quiesce();
        return false;
      }
      p.flush();
      (void)p.quiesce();
    }
  }
  p.flush();
  if (!p.quiesce()) return false;  // every map executed before the client uses the rkeys
  for (uint32_t i = 0; i < l.depth; ++i) {
    l.csums[i] = kWrite ? csum_pages(l.c_src.slot(i), l.page_size, len)
                        : csum_pages(l.p_src.slot(i), l.page_size, len);
  }
  return true;
}

template <bool kWrite>
bool verify(Lane& l, uint32_t slot, uint64_t seq) {
  const uint32_t len = io_len(l);
  if (l.remote_peer) {
    // Read: what arrived is what the server holds (its checksum, sent at the rendezvous). Write:
    // the server checks its slots against the client's goodbye (apps/rdmafwd/setup.cpp).
    if (kWrite) return true;
    return csum_pages(l.c_dst.slot(slot), l.page_size, len) == l.remote_csums[slot];
  }
  const SlotBufs& dst = kWrite ? l.p_dst : l.c_dst;
  const auto* h = reinterpret_cast<const PayloadHdr*>(dst.slot(slot)[0]);
  if (h->seq != seq) return false;
  return csum_pages(dst.slot(slot), l.page_size, len) == l.csums[slot];
}

template <bool kWrite>
bool fwd(Lane& l) {
  win::PollCore& c = *l.c;
  const uint64_t now = rte_rdtsc();
  const uint32_t len = io_len(l);
  bool busy = c.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (x.recv || cookie_kind(x.cookie) != kCkIo) return;
    const uint32_t s = cookie_slot(x.cookie);
    Lane::Slot& sl = l.slots[s];
    if (!x.ok()) {
      io_failed(l);
    } else {
      if (l.cfg.verify && !verify<kWrite>(l, s, sl.seq)) l.st.verify_fail.add(1);
      io_done(l, sl.tsc, now, len);
      sl.done_seq = sl.seq;
    }
    unmap_or_queue(c, l, sl.w);
    push_slot(l, s);
  }) > 0;
  if (c.qp().in_error() && !l.failed) io_failed(l);
  retry_unmaps(c, l);
  uint32_t n = 0, slot = 0;
  while (n < l.cfg.burst && may_issue(l) && pop_slot(l, slot)) {
    Lane::Slot& sl = l.slots[slot];
    const SlotBufs& local = kWrite ? l.c_src : l.c_dst;
    const win::MapResult m = c.map(std::span<const uint64_t>(local.slot(slot), l.cfg.pages),
                                   mlx5::kAccessLocalWrite, 0, len);
    if (!m.ok()) {
      note_reject(l, m.errc);
      push_slot(l, slot);
      break;
    }
    sl.seq = ++l.seq;
    if (l.cfg.verify && !l.remote_peer) {
      // Header: the source carries the sequence number; the destination's is cleared.
      auto* src = reinterpret_cast<PayloadHdr*>((kWrite ? l.c_src : l.p_src).slot(slot)[0]);
      auto* dst = reinterpret_cast<PayloadHdr*>((kWrite ? l.p_dst : l.c_dst).slot(slot)[0]);
      src->seq = sl.seq;
      dst->seq = 0;
    } else if (kWrite && l.remote_peer) {  // the server checks the last write of each slot
      reinterpret_cast<PayloadHdr*>(l.c_src.slot(slot)[0])->seq = sl.seq;
    }
    const mlx5::prm::Sge sg = sge(m.iova, len, m.lkey);
    uint32_t rkey = l.remote_peer ? l.remote_rkeys[slot] : l.targets[slot]->rkey();
    // Tests: a forged key byte (the server's QP refuses it and counts the refusal).
    if (l.remote_peer && l.cfg.forge_rkey_every && l.seq % l.cfg.forge_rkey_every == 0) rkey ^= 1;
    const Errc e = kWrite ? c.post_write({&sg, 1}, 0, rkey, cookie(kCkIo, slot), true)
                          : c.post_read({&sg, 1}, 0, rkey, cookie(kCkIo, slot), true);
    if (e != Errc::kOk) {
      note_reject(l, e);
      unmap_or_queue(c, l, m.window);
      push_slot(l, slot);
      break;
    }
    sl.w = m.window;
    sl.tsc = now;
    sl.busy = true;
    ++l.issued;
    ++n;
  }
  c.flush();
  return busy || n > 0;
}

template <bool kWrite>
bool idle(Lane& l) {
  if (!l.failed && (!all_slots_free(l) || l.unmap_n != 0)) return false;
  if (!l.targets_unmapped && !l.remote_peer) {
    win::PollCore& p = *l.p;
    for (uint32_t i = 0; i < l.depth; ++i) {
      while (p.unmap(l.targets[i]) == Errc::kNoRoom) {
        p.flush();
        (void)p.quiesce();
      }
    }
    p.flush();
    (void)p.quiesce();
    l.targets_unmapped = true;
  }
  return true;
}

}  // namespace

extern const Engine kWriteEngine = {
    "write",     "map, RDMA WRITE through the window (lkey), unmap on completion",
    false,       false,
    start<true>, fwd<true>,
    idle<true>};
extern const Engine kReadEngine = {
    "read",       "map, RDMA READ into the window (lkey), unmap on completion",
    false,        false,
    start<false>, fwd<false>,
    idle<false>};

}  // namespace rdmafwd
