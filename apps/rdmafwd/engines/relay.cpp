// --fwd relay: zero-copy forwarding source -> relay -> sink.
//
//   source (core c, side A)  maps a slot's chunk pages into a window and SENDs the message with
//                            the window's lkey (one gather entry), unmaps on completion;
//   relay-in (core p, B)     receives each message into a receive slot of chunk pages (one
//                            scatter entry per page);
//   relay-out (core r, B)    maps exactly those received pages into a window and SENDs them on
//                            (no copy), unmaps on completion and gives the receive slot back;
//   sink (core s, A)         receives, checks the header sequence and the checksum, and counts
//                            the message; latency is source TSC (in the header) to sink.
//
// Flow control: the source holds `io-depth` credits, one per message anywhere in the pipe. A
// message gives its credit back once both receive slots it used are posted again: the relay-in
// slot (after the relay-out SEND completed) and the sink slot (after the sink checked it), in
// whichever order that happens; so neither receive queue can run dry (no RNR). In one process
// the credit goes back directly.
//
// Two processes (--role client --fwd relay against a server): the client holds source and sink
// (c, s), the server relay-in and relay-out (p, r), each lane two connections (c-p, r-s). The
// client cannot see the relay-in slot being reposted, so a credit comes back when the sink
// reposts its slot, and the server posts 2 x io-depth relay-in receives instead: at most
// io-depth messages are between source and sink, and every relay-out completion is polled
// (the whole CQ, each pass) before the next relay-in receives, so at most io-depth more slots
// wait for their relay-out completion; the relay-in queue cannot run dry. The client's RDMA
// goodbye (an rpc bye request) reaches relay-in and ends the server's lane.
#include <algorithm>

#include "common.hpp"
#include "peer_checks.hpp"

namespace rdmafwd {
namespace {

bool start(Lane& l) {
  reset_slots(l);
  const uint32_t len = io_len(l);
  for (uint32_t i = 0; l.c && i < l.depth; ++i)
    l.csums[i] = csum_pages(l.c_src.slot(i), l.page_size, len);
  l.relay.credits = l.depth;
  l.relay.backlog_head = l.relay.backlog_n = 0;
  l.relay.sink_seq = l.seq;
  return true;
}

// A message's credit returns on its second release (relay-in slot and sink slot reposted).
// At most io-depth messages are in flight, so seq % depth names one of them.
void release(Lane& l, uint64_t seq) {
  if (l.remote_peer) {  // two processes: the sink's repost is the one release the client sees
    ++l.relay.credits;
    return;
  }
  uint8_t& r = l.srv[seq % l.depth].op;
  if (++r == 2) {
    r = 0;
    ++l.relay.credits;
  }
}

void backlog_push(Lane& l, uint32_t k) {
  l.relay.backlog[(l.relay.backlog_head + l.relay.backlog_n++) % l.p_recv_n] = k;
}

// Relay-out: forwards received slot k (byte_len in relay_w's place until mapped).
bool relay_forward(Lane& l, uint32_t k, uint32_t bytes) {
  win::PollCore& r = *l.r;
  const uint32_t n_pages = (bytes + l.page_size - 1) / l.page_size;
  const win::MapResult m = r.map(std::span<const uint64_t>(l.p_recv.slot(k), n_pages),
                                 mlx5::kAccessLocalWrite, 0, bytes);
  if (!m.ok()) {
    note_reject(l, m.errc);
    return false;
  }
  const mlx5::prm::Sge sg = sge(m.iova, bytes, m.lkey);
  const Errc e = r.post_send({&sg, 1}, cookie(kCkRelay, k), true);
  if (e != Errc::kOk) {
    note_reject(l, e);
    (void)r.unmap(m.window);
    return false;
  }
  l.relay.relay_w[k] = m.window;
  return true;
}

// Sink: check and count, give the receive slot back, return the credit.
bool sink_poll(Lane& l, uint64_t now, uint32_t cap) {
  win::PollCore& s = *l.s;
  const uint32_t n = s.poll(cap, [&](const mlx5::Completion& x) {
    if (!x.ok()) {
      io_failed(l);
      return;
    }
    if (!x.recv) return;
    const uint32_t k = cookie_slot(x.cookie);
    const auto* h = reinterpret_cast<const PayloadHdr*>(l.s_recv.slot(k)[0]);
    if (l.cfg.verify) {
      const bool good =
          h->magic == kPayloadMagic && h->seq == l.relay.sink_seq + 1 && h->len == x.byte_len &&
          csum_pages(l.s_recv.slot(k), l.page_size, x.byte_len) == Csum{h->csum_a, h->csum_b};
      if (!good) l.st.verify_fail.add(1);
    }
    l.relay.sink_seq = h->seq;
    io_done(l, h->tsc, now, x.byte_len);
    release(l, h->seq);
    if (Errc e = post_slot_recv(s, l.s_recv, k, l.page_size, l.lkey_a, kCkSinkRecv); e != Errc::kOk)
      note_reject(l, e);
  });
  if (n) s.flush();
  return n > 0;
}

// Gives relay-in receive slot k back (its message forwarded, or the client's goodbye read).
void repost_relay_in(Lane& l, uint32_t k) {
  if (Errc e = post_slot_recv(*l.p, l.p_recv, k, l.page_size, l.lkey_b, kCkReqRecv); e != Errc::kOk)
    note_reject(l, e);
}

// Relay-out: each completion releases the message's credit (two processes: counts it as the
// server's I/O), unmaps its window and gives its relay-in slot back (`reposted`). Returns the
// completions.
uint32_t relay_out_done(Lane& l, uint32_t cap, bool& reposted) {
  win::PollCore& r = *l.r;
  // Two processes: every relay-out completion, each pass (see the top of the file).
  const uint32_t r_cap = l.remote_client ? std::max(cap, l.p_recv_n) : cap;
  return r.poll(r_cap, [&](const mlx5::Completion& x) {
    if (x.recv) return;
    const uint32_t k = cookie_slot(x.cookie);
    if (!x.ok()) io_failed(l);
    const auto* h = reinterpret_cast<const PayloadHdr*>(l.p_recv.slot(k)[0]);
    if (!l.remote_client)
      release(l, h->seq);
    else if (x.ok())  // forwarded: no latency sample (the server has no clock of the source);
      io_done_untimed(l, l.srv[k].len);  // the bytes it received, not the client's header's
    if (win::Window*& w = l.relay.relay_w[k]) {
      if (r.unmap(w) != Errc::kOk) l.st.rejected.add(1);
      w = nullptr;
    }
    repost_relay_in(l, k);
    reposted = true;
  });
}

// Relay-in: one message received into slot k, checked and queued for relay-out; the
// two-process client's goodbye (an rpc NFSv3 NULL call) ends the lane. Returns whether the slot
// was posted again.
bool relay_in(Lane& l, uint32_t k, uint32_t byte_len) {
  if (l.remote_client && byte_len <= kSmall &&
      rpc_goodbye({reinterpret_cast<const uint8_t*>(l.p_recv.slot(k)[0]), byte_len})) {
    l.st.peer_bye.set(1);
    repost_relay_in(l, k);
    return true;
  }
  if (l.refusing) return false;  // its client is being dropped: nothing more of it is relayed
  if (!check_relay_message(byte_len, l.p_recv.per_slot * l.page_size)) {
    l.st.refused_requests.add(1);
    l.st.refused_why.set(static_cast<uint64_t>(RpcVerdict::kLen));
    l.refusing = true;
    return false;
  }
  l.srv[k].len = byte_len;
  // Two processes: a message accepted is the server's I/O, so that issued = completed +
  // failed + abandoned holds on this side too (doc/guides/rdmafwd.md, statistics).
  if (l.remote_client) ++l.issued;
  backlog_push(l, k);
  return false;
}

// Relay-out: the received messages in arrival order, while a window and SQ room are there.
void forward_backlog(Lane& l) {
  RelayState& rs = l.relay;
  while (rs.backlog_n && !l.failed) {
    const uint32_t k = rs.backlog[rs.backlog_head];
    if (!relay_forward(l, k, l.srv[k].len)) break;
    rs.backlog_head = (rs.backlog_head + 1) % l.p_recv_n;
    --rs.backlog_n;
  }
}

// Relay: relay-out completions first (they give receive slots back), then every message
// relay-in received is forwarded (or queued until a window / SQ room frees).
bool relay_poll(Lane& l, uint32_t cap) {
  bool reposted = false;
  uint32_t n = relay_out_done(l, cap, reposted);
  n += l.p->poll(cap, [&](const mlx5::Completion& x) {
    if (!x.ok())
      io_failed(l);
    else if (x.recv)
      reposted |= relay_in(l, cookie_slot(x.cookie), x.byte_len);
  });
  forward_backlog(l);
  l.r->flush();
  if (reposted) l.p->flush();
  return n > 0;
}

// Source: one message of slot `slot` (mapped, headed, sent); false when it could not go.
bool source_send(Lane& l, uint32_t slot, uint32_t len, uint64_t now) {
  win::PollCore& c = *l.c;
  const win::MapResult m = c.map(std::span<const uint64_t>(l.c_src.slot(slot), l.cfg.pages),
                                 mlx5::kAccessLocalWrite, 0, len);
  if (!m.ok()) {
    note_reject(l, m.errc);
    return false;
  }
  auto* h = reinterpret_cast<PayloadHdr*>(l.c_src.slot(slot)[0]);
  h->magic = kPayloadMagic;
  h->seq = l.seq + 1;
  h->tsc = now;
  h->slot = slot;
  h->len = len;
  h->csum_a = l.csums[slot].a;
  h->csum_b = l.csums[slot].b;
  const mlx5::prm::Sge sg = sge(m.iova, len, m.lkey);
  if (const Errc e = c.post_send({&sg, 1}, cookie(kCkSrc, slot), true); e != Errc::kOk) {
    note_reject(l, e);
    unmap_or_queue(c, l.unmaps, m.window);
    return false;
  }
  ++l.seq;
  l.slots[slot].w = m.window;
  l.slots[slot].busy = true;
  return true;
}

// Source: completions free the slot (and its window); then inject while credits last.
bool source_poll_and_inject(Lane& l, uint64_t now, uint32_t cap, uint32_t& issued) {
  win::PollCore& c = *l.c;
  const bool busy = c.poll(cap, [&](const mlx5::Completion& x) {
    if (x.recv || cookie_kind(x.cookie) != kCkSrc) return;
    const uint32_t slot = cookie_slot(x.cookie);
    if (!x.ok()) io_failed(l);
    unmap_or_queue(c, l.unmaps, l.slots[slot].w);
    push_slot(l, slot);
  }) > 0;
  for (win::PollCore* k : {l.c, l.p, l.r, l.s})
    if (k && k->qp().in_error() && !l.failed) io_failed(l);
  retry_unmaps(c, l.unmaps);
  const uint32_t len = io_len(l);
  uint32_t slot = 0;
  while (issued < l.cfg.burst && l.relay.credits > 0 && may_issue(l) && pop_slot(l, slot)) {
    if (!source_send(l, slot, len, now)) {
      push_slot(l, slot);
      break;
    }
    --l.relay.credits;
    ++l.issued;
    ++issued;
  }
  c.flush();
  return busy;
}

bool fwd(Lane& l) {
  const uint64_t now = rte_rdtsc();
  const uint32_t cap = l.cfg.burst * 4;
  uint32_t issued = 0;
  // In one process a lane is all four roles; in two, the client source and sink, the server
  // relay-in and relay-out.
  bool busy = l.s && sink_poll(l, now, cap);
  if (l.p && l.r) busy |= relay_poll(l, cap);
  if (l.c) busy |= source_poll_and_inject(l, now, cap, issued);
  return busy || issued > 0;
}

bool idle(Lane& l) {
  if (l.failed) return true;
  if (!all_slots_free(l) || l.unmaps.n != 0 || l.relay.backlog_n != 0 ||
      l.relay.credits != static_cast<int64_t>(l.depth))
    return false;
  for (win::Window* w : l.relay.relay_w)
    if (w) return false;  // relay-out completion not seen yet
  return true;
}

// Recovery: every window is about to be invalidated, the relay-out ones with the rest.
void before_reconnect(Lane& l) {
  std::fill(l.relay.relay_w.begin(), l.relay.relay_w.end(), nullptr);
}

}  // namespace

extern const Engine kRelayEngine = {
    "relay", "zero-copy source -> relay -> sink: received chunk pages are mapped and sent on",
    true,    false,
    start,   fwd,
    idle,    before_reconnect,
    nullptr};

}  // namespace rdmafwd
