// The RC link's connections and its pump: a QP's transport state made at connect, kept over a
// reconnect and ended by stop / forget; every received packet checked (address, QP) and handed
// to the requester's or the responder's half. The halves: link_requester.cpp (engine requests
// -> packets with PSNs; ACKs, NAKs and READ responses -> completions), link_responder.cpp
// (request packets -> engine; its verdicts -> ACK / NAK / READ responses), link_loss.cpp (the
// retransmission and RNR timers, go-back-N). roce_link.hpp says what the link models.
#include "roce_link.hpp"

#include <algorithm>
#include <cstring>

#include "wire.hpp"

namespace rdmx::emu::detail {

static_assert(sizeof(EmuStats::Roce::rx_dropped) / sizeof(uint64_t) >=
              static_cast<size_t>(roce::Drop::kCount));

Result<std::unique_ptr<RoceLink>> RoceLink::open(const RoceOptions& opt,
                                                 std::unique_ptr<Carrier> carrier) {
  if (opt.window < 2 || opt.window > 4096 || opt.mtu < 256 || opt.mtu > kWireMtu ||
      (opt.mtu & (opt.mtu - 1)) != 0)
    return make_error(Errc::kInvalidArgument,
                      "emu: RoCE wire: window must be 2..4096 and mtu a power of two 256..4096");
  if (carrier && (opt.loss != 0 || opt.reorder != 0 || opt.duplicate != 0 || !opt.pcap.empty()))
    return make_error(Errc::kInvalidArgument,
                      "emu: RoCE wire: loss, reorder, duplicate and pcap need the UDP carrier");
  if (!carrier) {
    auto c = UdpCarrier::open(opt);
    if (!c) return std::move(c).error();
    carrier = std::move(c.value());
  }
  std::unique_ptr<RoceLink> l(new RoceLink(opt, std::move(carrier)));
  return l;
}

EmuStats::Roce RoceLink::stats() const noexcept {
  EmuStats::Roce s = st_;
  const CarrierStats& c = carrier_->stats();
  s.tx_packets = c.tx_packets;
  s.injected_loss = c.injected_loss;
  s.injected_reorder = c.injected_reorder;
  s.injected_dup = c.injected_dup;
  s.ring_full = c.ring_full;
  return s;
}

RoceLink::Qp* RoceLink::find(uint32_t qpn) noexcept {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : it->second.get();
}

uint32_t RoceLink::sq_psn(uint32_t qpn) {
  auto it = sq_psn_.find(qpn);
  // A connection that carried requests is not connected again with the same PSN (a reconnect
  // without RESET: recover_core): the next one continues where it stopped, so that a late
  // packet of it falls behind the next one's expected PSN (a duplicate, never executed), and a
  // peer that kept its connection (Options::responder_keeps_rts) expects exactly that PSN.
  if (const Qp* q = find(qpn); it != sq_psn_.end() && q && q->carried && it->second == q->isn)
    it->second = q->next_psn;
  if (it == sq_psn_.end()) it = sq_psn_.emplace(qpn, psn_rng_() & roce::kPsnMask).first;
  return it->second;
}

void RoceLink::connect(uint32_t qpn, uint32_t peer_qpn, uint32_t peer_ip, uint32_t mtu,
                       uint32_t rq_psn, uint32_t first_msn, const mlx5::RcTimers& tm,
                       uint64_t rnr_wait_ns) {
  std::unique_ptr<Qp> q = take_qp();
  q->qpn = qpn;
  q->peer_qpn = peer_qpn;
  q->peer_ip = peer_ip;
  q->mtu = mtu;
  q->sport = static_cast<uint16_t>(0xC000 | (qpn & 0x3FFF));  // fixed per QP, as rxe_qp.c
  // Each side's send PSN is its own random draw, stated in its connect info; the next
  // incarnation of the QP (after a RESET) draws again.
  q->next_psn = q->isn = sq_psn(qpn);
  q->epsn = rq_psn & roce::kPsnMask;
  // Nothing executed yet: a duplicate is answered with an ACK of the PSN before the first, MSN 0
  // (rxe_resp.c duplicate_request acknowledges ack_psn - 1).
  q->acked_psn = roce::psn_add(q->epsn, -1);
  q->acked_msn = 0;
  q->tx.resize(opt_.window);
  q->msgs.resize(opt_.window);
  q->rmsgs.resize(size_t{opt_.window} * 2);
  q->rmsn = q->rmsn0 = first_msn;
  q->ack_ns = mlx5::ack_timeout_ns(tm.timeout);
  q->retry_cnt = tm.retry_cnt;
  q->retry_left = q->retry_cnt;
  q->rnr_retry = q->rnr_left = tm.rnr_retry;
  q->rnr_wait_ns = rnr_wait_ns;
  std::unique_ptr<Qp>& slot = qps_[qpn];
  keep(std::move(slot));  // a reconnect without RESET: the old connection's state
  slot = std::move(q);
}

// A connection's rings (the window's packet records, its messages) are kept for the link's next
// connection, so that a reconnect (recovery; a peer whose every refused request costs it its
// connection) or a QP made and destroyed per operation allocates and zeroes nothing: doing so at
// each connect made emu_fuzz_replay (a QP pair per input) 0.05 s -> 7 s and every reconnect cost
// page faults.
std::unique_ptr<RoceLink::Qp> RoceLink::take_qp() {
  if (spare_.empty()) return std::make_unique<Qp>();
  std::unique_ptr<Qp> q = std::move(spare_.back());
  spare_.pop_back();
  std::vector<TxPkt> tx = std::move(q->tx);
  std::vector<Msg> msgs = std::move(q->msgs);
  std::vector<RMsg> rmsgs = std::move(q->rmsgs);
  *q = Qp{};  // every field as a new connection's; the buffers' bytes are written before use
  std::fill(tx.begin(), tx.end(), TxPkt{});
  std::fill(msgs.begin(), msgs.end(), Msg{});
  std::fill(rmsgs.begin(), rmsgs.end(), RMsg{});
  q->tx = std::move(tx);
  q->msgs = std::move(msgs);
  q->rmsgs = std::move(rmsgs);
  return q;
}

void RoceLink::keep(std::unique_ptr<Qp> q) {
  if (q && spare_.size() < kSpareQps) spare_.push_back(std::move(q));
}

void RoceLink::stop(uint32_t qpn) noexcept {
  if (Qp* q = find(qpn)) {
    q->dead = true;
    q->tx_count = q->m_count = 0;
    q->timer_ns = 0;
    q->rnr_until = 0;
    q->resend = kNoResend;
    q->owed = false;
  }
}

void RoceLink::forget(uint32_t qpn) {
  if (auto it = qps_.find(qpn); it != qps_.end()) {
    keep(std::move(it->second));
    qps_.erase(it);
  }
  sq_psn_.erase(qpn);
}

void RoceLink::emit(const roce::Packet& p) noexcept {
  size_t cap = 0;
  uint8_t* b = carrier_->tx_buf(&cap);
  if (!b) return;
  if (const size_t n = roce::encode(p, b, cap, icrc_)) carrier_->send_buf(n, p.dst_ip, now_);
}

// Drains the carrier, a burst at a time, up to kRxBudget packets per pump while the engine's
// rings can hold a burst and the held packets (rx_keeps) leave room; the rest waits in the
// packet ring or the socket buffer for the next pump.
bool RoceLink::rx_network(Rings& w) noexcept {
  bool work = false;
  const bool keeps = carrier_->rx_keeps();
  // What the engine read goes back to the sender; when the engine left unread more than leaves
  // room for a burst, what it had a turn to read (it waits) is copied out.
  ++pumps_;
  if (keeps) rx_release(w, held_n_ + Carrier::kRxBatch > kHoldMax);
  for (uint32_t taken = 0; taken < kRxBudget;) {
    if (keeps && held_n_ + Carrier::kRxBatch > kHoldMax) break;  // the engine reads these first
    // No wait for room to answer: both links would wait on each other's ring for good (the
    // senders keep kHeadroom free for the ACKs a burst causes; a refused one costs a timer).
    if (w.tx_free(1, WireClass::kReq) < Carrier::kRxBatch ||
        w.tx_free(1, WireClass::kResp) < Carrier::kRxBatch)
      break;
    const unsigned got = rx_burst(w);
    if (got == 0) break;
    work = true;
    taken += got;
    if (got < Carrier::kRxBatch) break;  // drained
  }
  return work;
}

unsigned RoceLink::rx_burst(Rings& w) noexcept {
  RxPkt pkts[Carrier::kRxBatch];
  const unsigned got = carrier_->recv_burst(pkts, Carrier::kRxBatch);
  const bool keeps = carrier_->rx_keeps();
  for (unsigned i = 0; i < got; ++i) {
    handed_.slot = nullptr;
    if (!rx_one(w, pkts[i])) {  // not taken: it and the rest wait in the carrier
      ++st_.rx_waits;
      carrier_->unread(got - i);
      return i;
    }
    if (keeps) hold(handed_.slot, handed_.cls, handed_.pos);
  }
  return got;
}

void RoceLink::hold(WireSlot* s, WireClass c, uint64_t pos) noexcept {
  held_[(held_head_ + held_n_) % kPktSlots] = Held{s, pos, pumps_, c};
  ++held_n_;
}

void RoceLink::rx_release(Rings& w, bool unpin) noexcept {
  unsigned n = 0;
  for (; n < held_n_; ++n) {
    Held& h = held_[(held_head_ + n) % kPktSlots];
    if (h.slot && w.popped(1, h.cls) <= h.pos) {  // the engine has not read it yet
      // The engine runs between the device's two pumps: a packet of the last pump it has
      // not seen yet.
      if (!unpin || pumps_ - h.pump < 2) break;
      std::memcpy(h.slot->payload, h.slot->ext, h.slot->h.len);
      h.slot->ext = nullptr;
      ++st_.rx_unpinned;
    }
  }
  held_head_ = (held_head_ + n) % kPktSlots;
  held_n_ -= n;
  carrier_->rx_release(n);
}

bool RoceLink::rx_one(Rings& w, const RxPkt& pkt) noexcept {
  roce::Packet p;
  roce::Drop d = pkt.truncated ? roce::Drop::kNotRoce : roce::decode(pkt.data, pkt.len, &p, icrc_);
  Qp* q = nullptr;
  if (d == roce::Drop::kNone) {
    q = find(p.dqpn);
    // rxe_recv.c check_addr: an RC packet must come from the QP's peer to its own address;
    // anything else is dropped silently, before its PSN is looked at.
    if (!q)
      d = roce::Drop::kNoQp;
    else if (p.src_ip != q->peer_ip || p.dst_ip != opt_.local_ipv4)
      d = roce::Drop::kNotPeer;
  }
  if (d != roce::Drop::kNone) {  // dropped and counted (other UDP to this address included)
    ++st_.rx_dropped[int(d)];
    return true;
  }
  // A QP in the error state takes no packet and answers none, a duplicate's re-ACK included
  // (IBTA vol. 1 10.3.1; rxe_resp.c get_req frees what a responder in error receives).
  if (q->dead) return true;
  // A frame longer than the receiving port's MTU never reaches its transport: the port drops
  // it (Linux net/core/dev.c is_skb_forwardable: len > dev->mtu + hard_header_len), and the
  // requester's retry timer runs out. The QP's path MTU stands for the port's here.
  if (p.payload_len > q->mtu) {
    ++mtu_drops_;
    return true;
  }
  // A response behind completions this QP still owes the engine waits for them, and a packet
  // the engine's rings have no room for waits too: on a packet ring it stays in its slot for
  // the next pump (Carrier::unread; a socket's packet is dropped and sent again by the peer, as
  // a NIC drops what it has no buffer for). A lossless link loses nothing here.
  const bool is_req = roce::opcode_flags(p.opcode) & roce::kIsRequest;
  if ((!is_req && q->owed) || w.tx_free(1, WireClass::kReq) == 0 ||
      w.tx_free(1, WireClass::kResp) == 0)
    return false;
  if (is_req)
    on_request(w, *q, p);
  else if (!on_response(w, *q, p))
    return false;
  ++st_.rx_packets;
  return true;
}

bool RoceLink::pump(Rings& w, uint64_t now_ns, bool* pending) noexcept {
  now_ = now_ns;
  bool work = false;
  for (auto& [qpn, q] : qps_) {
    if (q->owed) {
      const uint32_t before = q->m_count;
      ack_up_to(w, *q, q->owed_psn, q->owed_inclusive);
      work |= q->m_count != before;
    }
    work |= resend_some(*q);
  }
  work |= rx_network(w);
  work |= resp_from_engine(w);
  work |= tx_from_engine(w);
  for (auto& [qpn, q] : qps_) {
    timers(w, *q);
    *pending |= q->tx_count != 0 || q->r_count != 0 || q->owed;
  }
  carrier_->flush(now_);
  return work;
}

}  // namespace rdmx::emu::detail
