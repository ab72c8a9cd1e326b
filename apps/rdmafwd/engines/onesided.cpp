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
  l.onesided.targets_unmapped = false;
  const uint32_t len = io_len(l);
  if (l.remote_peer) {  // two processes: the server mapped its windows at the rendezvous
    if (l.onesided.remote_rkeys.size() < l.depth) return false;
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
        l.onesided.targets[i] = m.window;
        break;
      }
      if (m.errc != Errc::kNoRoom && m.errc != Errc::kBusy) {
        for (uint32_t j = 0; j < i; ++j) (void)p.unmap(l.onesided.targets[j]);
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
    return csum_pages(l.c_dst.slot(slot), l.page_size, len) == l.onesided.remote_csums[slot];
  }
  const SlotBufs& dst = kWrite ? l.p_dst : l.c_dst;
  const auto* h = reinterpret_cast<const PayloadHdr*>(dst.slot(slot)[0]);
  if (h->seq != seq) return false;
  return csum_pages(dst.slot(slot), l.page_size, len) == l.csums[slot];
}

// The data WQEs' completions: each checked (unless --no-verify), timed, its window unmapped and
// its slot freed; an error one fails the lane (the runner recovers it).
template <bool kWrite>
bool poll_ios(Lane& l, win::PollCore& c, uint64_t now) {
  const uint32_t len = io_len(l);
  const bool busy = c.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
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
    unmap_or_queue(c, l.unmaps, sl.w);
    push_slot(l, s);
  }) > 0;
  if (c.qp().in_error() && !l.failed) io_failed(l);
  return busy;
}

// The I/O's sequence number in the payload headers: one process, the source's carries it and
// the destination's is cleared (a stale buffer cannot pass); two-process write, the source's
// (the server checks the last write of each slot).
template <bool kWrite>
void stamp(Lane& l, uint32_t slot, uint64_t seq) {
  if (l.cfg.verify && !l.remote_peer) {
    reinterpret_cast<PayloadHdr*>((kWrite ? l.c_src : l.p_src).slot(slot)[0])->seq = seq;
    reinterpret_cast<PayloadHdr*>((kWrite ? l.p_dst : l.c_dst).slot(slot)[0])->seq = 0;
  } else if (kWrite && l.remote_peer) {
    reinterpret_cast<PayloadHdr*>(l.c_src.slot(slot)[0])->seq = seq;
  }
}

// The key of the peer's window over `slot`; --forge-rkey-every (tests): a forged key byte every
// N-th op (the server's QP refuses it and counts the refusal).
uint32_t target_rkey(const Lane& l, uint32_t slot) {
  if (!l.remote_peer) return l.onesided.targets[slot]->rkey();
  uint32_t rkey = l.onesided.remote_rkeys[slot];
  if (l.cfg.forge_rkey_every && l.seq % l.cfg.forge_rkey_every == 0) rkey ^= 1;
  return rkey;
}

// One I/O of `slot`: its local pages mapped into a window whose lkey is the local side of one
// RDMA WRITE or READ to / from the peer's window. False when it could not go (the slot unused).
template <bool kWrite>
bool issue_io(Lane& l, win::PollCore& c, uint32_t slot, uint64_t now) {
  Lane::Slot& sl = l.slots[slot];
  const uint32_t len = io_len(l);
  const SlotBufs& local = kWrite ? l.c_src : l.c_dst;
  const win::MapResult m = c.map(std::span<const uint64_t>(local.slot(slot), l.cfg.pages),
                                 mlx5::kAccessLocalWrite, 0, len);
  if (!m.ok()) {
    note_reject(l, m.errc);
    return false;
  }
  sl.seq = ++l.seq;
  stamp<kWrite>(l, slot, sl.seq);
  const mlx5::prm::Sge sg = sge(m.iova, len, m.lkey);
  const uint32_t rkey = target_rkey(l, slot);
  const Errc e = kWrite ? c.post_write({&sg, 1}, 0, rkey, cookie(kCkIo, slot), true)
                        : c.post_read({&sg, 1}, 0, rkey, cookie(kCkIo, slot), true);
  if (e != Errc::kOk) {
    note_reject(l, e);
    unmap_or_queue(c, l.unmaps, m.window);
    return false;
  }
  sl.w = m.window;
  sl.tsc = now;
  sl.busy = true;
  ++l.issued;
  return true;
}

template <bool kWrite>
bool fwd(Lane& l) {
  win::PollCore& c = *l.c;
  const uint64_t now = rte_rdtsc();
  const bool busy = poll_ios<kWrite>(l, c, now);
  retry_unmaps(c, l.unmaps);
  uint32_t n = 0, slot = 0;
  for (; n < l.cfg.burst && may_issue(l) && pop_slot(l, slot); ++n) {
    if (!issue_io<kWrite>(l, c, slot, now)) {
      push_slot(l, slot);
      break;
    }
  }
  c.flush();
  return busy || n > 0;
}

template <bool kWrite>
bool idle(Lane& l) {
  if (!l.failed && (!all_slots_free(l) || l.unmaps.n != 0)) return false;
  if (!l.onesided.targets_unmapped && !l.remote_peer) {
    win::PollCore& p = *l.p;
    for (uint32_t i = 0; i < l.depth; ++i) {
      while (p.unmap(l.onesided.targets[i]) == Errc::kNoRoom) {
        p.flush();
        (void)p.quiesce();
      }
    }
    p.flush();
    (void)p.quiesce();
    l.onesided.targets_unmapped = true;
  }
  return true;
}

}  // namespace

extern const Engine kWriteEngine = {
    "write",     "map, RDMA WRITE through the window (lkey), unmap on completion",
    false,       false,
    start<true>, fwd<true>,
    idle<true>,  nullptr,
    nullptr};
extern const Engine kReadEngine = {
    "read",       "map, RDMA READ into the window (lkey), unmap on completion",
    false,        false,
    start<false>, fwd<false>,
    idle<false>,  nullptr,
    nullptr};

}  // namespace rdmafwd
