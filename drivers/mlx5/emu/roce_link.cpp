#include "roce_link.hpp"

#include <algorithm>
#include <cstring>

#include <rdmx/core/log.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>

#include "wire.hpp"

namespace rdmx::emu::detail {

namespace {

static_assert(sizeof(EmuStats::Roce::rx_dropped) / sizeof(uint64_t) >=
              static_cast<size_t>(roce::Drop::kCount));

uint8_t req_opcode(PktOp op, bool first, bool last) noexcept {
  using namespace roce;
  switch (op) {
    case PktOp::kWrite:
      return first ? (last ? kWriteOnly : kWriteFirst) : (last ? kWriteLast : kWriteMiddle);
    case PktOp::kWriteImm:
      return first ? (last ? kWriteOnlyImm : kWriteFirst) : (last ? kWriteLastImm : kWriteMiddle);
    case PktOp::kSend:
      return first ? (last ? kSendOnly : kSendFirst) : (last ? kSendLast : kSendMiddle);
    case PktOp::kSendImm:
      return first ? (last ? kSendOnlyImm : kSendFirst) : (last ? kSendLastImm : kSendMiddle);
    case PktOp::kSendInv:
      return first ? (last ? kSendOnlyInv : kSendFirst) : (last ? kSendLastInv : kSendMiddle);
    case PktOp::kRead:
      return kReadRequest;
    default:
      return 0xFF;
  }
}

bool req_shape(uint8_t opc, ReqShape* s) noexcept {
  using namespace roce;
  switch (opc) {
    case kSendFirst:
      *s = {0, true, false, PktOp::kSend};
      return true;
    case kSendMiddle:
      *s = {0, false, false, PktOp::kSend};
      return true;
    case kSendLast:
      *s = {0, false, true, PktOp::kSend};
      return true;
    case kSendLastImm:
      *s = {0, false, true, PktOp::kSendImm};
      return true;
    case kSendOnly:
      *s = {0, true, true, PktOp::kSend};
      return true;
    case kSendOnlyImm:
      *s = {0, true, true, PktOp::kSendImm};
      return true;
    case kSendLastInv:
      *s = {0, false, true, PktOp::kSendInv};
      return true;
    case kSendOnlyInv:
      *s = {0, true, true, PktOp::kSendInv};
      return true;
    case kWriteFirst:
      *s = {1, true, false, PktOp::kWrite};
      return true;
    case kWriteMiddle:
      *s = {1, false, false, PktOp::kWrite};
      return true;
    case kWriteLast:
      *s = {1, false, true, PktOp::kWrite};
      return true;
    case kWriteLastImm:
      *s = {1, false, true, PktOp::kWriteImm};
      return true;
    case kWriteOnly:
      *s = {1, true, true, PktOp::kWrite};
      return true;
    case kWriteOnlyImm:
      *s = {1, true, true, PktOp::kWriteImm};
      return true;
    case kReadRequest:
      *s = {2, true, true, PktOp::kRead};
      return true;
    default:
      return false;
  }
}

uint32_t read_psns(uint64_t len, uint32_t mtu) noexcept {  // rxe_req.c update_wqe_psn
  return len == 0 ? 1 : static_cast<uint32_t>((len + mtu - 1) / mtu);
}

}  // namespace

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
  l->scratch_.resize(opt.mtu + roce::kMaxOverhead);
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
  for (TxPkt& t : q->tx) t.buf.resize(mtu + roce::kMaxOverhead);
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

// A connection's rings and packet buffers (window x (path MTU + headers): 266 KiB with the
// defaults) are kept for the link's next connection, so that a reconnect (recovery; a peer
// whose every refused request costs it its connection) or a QP made and destroyed per
// operation allocates and zeroes nothing: doing so at each connect made emu_fuzz_replay
// (a QP pair per input) 0.05 s -> 7 s and every reconnect cost page faults.
std::unique_ptr<RoceLink::Qp> RoceLink::take_qp() {
  if (spare_.empty()) return std::make_unique<Qp>();
  std::unique_ptr<Qp> q = std::move(spare_.back());
  spare_.pop_back();
  std::vector<TxPkt> tx = std::move(q->tx);
  std::vector<Msg> msgs = std::move(q->msgs);
  std::vector<RMsg> rmsgs = std::move(q->rmsgs);
  *q = Qp{};  // every field as a new connection's; the buffers' bytes are written before use
  for (TxPkt& t : tx) t.psn = t.len = 0;
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

// ---- transmit ----------------------------------------------------------------------------------
void RoceLink::put(const uint8_t* pkt, size_t len, uint32_t dst_ip) noexcept {
  carrier_->send(pkt, len, dst_ip, now_);
}

void RoceLink::send_ack(Qp& q, uint8_t synd, uint32_t psn, uint32_t msn) noexcept {
  roce::Packet p;
  p.src_ip = opt_.local_ipv4;
  p.dst_ip = q.peer_ip;
  p.ip_id = next_ip_id();
  p.sport = q.sport;
  p.opcode = roce::kAcknowledge;
  p.dqpn = q.peer_qpn;
  p.psn = psn;
  p.aeth_syndrome = synd;
  p.aeth_msn = msn;
  const size_t n = roce::encode(p, scratch_.data(), scratch_.size(), icrc_);
  if (roce::aeth_type(synd) == 0) ++st_.acks_sent;
  put(scratch_.data(), n, q.peer_ip);
}

// Engine request packets -> RC request packets with PSNs (rxe_req.c init_req_packet).
bool RoceLink::tx_from_engine(Rings& w) noexcept {
  bool work = false;
  while (const WireSlot* s = w.rx_slot(1, WireClass::kReq)) {
    const PktHdr& h = s->h;
    Qp* qp = find(h.src_qpn);
    if (!qp || qp->dead) {
      w.rx_pop(1, WireClass::kReq);  // the QP is gone
      work = true;
      continue;
    }
    Qp& q = *qp;
    const bool first = h.flags & kPktFirst, last = h.flags & kPktLast;
    if (q.tx_count == q.tx.size() || (first && q.m_count == q.msgs.size())) break;  // window
    if (q.rnr_until) break;            // waiting out an RNR NAK: nothing new goes (rxe_req.c)
    if (q.resend != kNoResend) break;  // go-back-N still under way: new packets follow it
    if (carrier_->tx_room() < kHeadroom) break;  // a full packet ring: the next pump sends it
    roce::Packet p;
    p.src_ip = opt_.local_ipv4;
    p.dst_ip = q.peer_ip;
    p.ip_id = next_ip_id();
    p.sport = q.sport;
    p.opcode = req_opcode(h.op, first, last);
    p.dqpn = q.peer_qpn;
    p.psn = q.next_psn;
    p.se = last && (h.flags & kPktSolicited);
    // AckReq on the last packet of each message, and every half window inside a long one, so
    // that a message of more packets than the window is acknowledged as it goes (rxe_req.c asks
    // every RXE_MAX_UNACKED_PSNS packets).
    const uint32_t in_msg =
        first ? 0
              : static_cast<uint32_t>(roce::psn_diff(
                    q.next_psn, q.msgs[(q.m_head + q.m_count - 1) % q.msgs.size()].first_psn));
    const uint32_t every = std::max<uint32_t>(1, static_cast<uint32_t>(q.tx.size() / 2));
    p.ack_req = last || (in_msg + 1) % every == 0;
    p.reth_va = h.raddr;
    p.reth_rkey = h.rkey;
    p.reth_len = static_cast<uint32_t>(h.msg_len);
    p.imm = h.imm;
    p.ieth = h.imm;
    p.payload = s->payload;
    p.payload_len = h.len;
    TxPkt& t = q.tx[(q.tx_head + q.tx_count) % q.tx.size()];
    t.len = static_cast<uint32_t>(roce::encode(p, t.buf.data(), t.buf.size(), icrc_));
    if (t.len == 0) {  // not encodable (cannot happen for engine packets): drop it
      w.rx_pop(1, WireClass::kReq);
      continue;
    }
    t.psn = p.psn;
    ++q.tx_count;
    q.carried = true;
    const uint32_t n = h.op == PktOp::kRead ? read_psns(h.msg_len, q.mtu) : 1;
    // Messages of more packets than the window: acknowledged in parts (AckReq above).
    if (first && h.op != PktOp::kRead && (h.msg_len + q.mtu - 1) / q.mtu > q.tx.size())
      ++st_.over_window;
    if (first) {
      Msg& m = q.msgs[(q.m_head + q.m_count) % q.msgs.size()];
      ++q.m_count;
      m = Msg{};
      m.msn = h.msn;
      m.first_psn = p.psn;
      m.read = h.op == PktOp::kRead;
      m.read_len = static_cast<uint32_t>(h.msg_len);
    }
    // The message's last PSN is known from its length at its first packet: an ACK inside the
    // message (AckReq every half window) must not complete it.
    if (first) {
      Msg& m = q.msgs[(q.m_head + q.m_count - 1) % q.msgs.size()];
      const uint64_t pkts =
          h.op == PktOp::kRead ? n : std::max<uint64_t>(1, (h.msg_len + q.mtu - 1) / q.mtu);
      m.last_psn = roce::psn_add(p.psn, static_cast<int32_t>(pkts - 1));
    }
    q.next_psn = roce::psn_add(q.next_psn, static_cast<int32_t>(n));
    if (!q.timer_ns) q.timer_ns = now_;
    put(t.buf.data(), t.len, q.peer_ip);
    w.rx_pop(1, WireClass::kReq);
    work = true;
  }
  return work;
}

// Go-back-N from the oldest unacknowledged packet (rxe_req.c req_retry). On a packet ring the
// window may be larger than the room the ring has: what does not fit goes on the next pumps
// (resend_some), before any new packet of the QP, so that a lossless link never refuses one.
void RoceLink::retransmit(Qp& q) noexcept {
  q.resend = 0;
  resend_some(q);
  q.timer_ns = q.tx_count ? now_ : 0;
}

bool RoceLink::resend_some(Qp& q) noexcept {
  if (q.resend == kNoResend) return false;
  bool work = false;
  while (q.resend < q.tx_count && carrier_->tx_room() >= kHeadroom) {
    TxPkt& t = q.tx[(q.tx_head + q.resend) % q.tx.size()];
    put(t.buf.data(), t.len, q.peer_ip);
    ++st_.retransmits;
    ++q.resend;
    work = true;
  }
  if (q.resend >= q.tx_count) q.resend = kNoResend;
  return work;
}

// The oldest sent packet is acknowledged: it leaves the window (a go-back under way has one
// packet less before its next one).
void RoceLink::pop_tx(Qp& q) noexcept {
  q.tx_head = (q.tx_head + 1) % q.tx.size();
  --q.tx_count;
  if (q.resend != kNoResend && q.resend) --q.resend;
}

bool RoceLink::to_engine_resp(Rings& w, Qp& q, const Msg& m, PktOp op, uint8_t synd) noexcept {
  WireSlot* s = w.tx_slot(1, WireClass::kResp);
  if (!s) return false;
  s->h = PktHdr{};
  s->h.op = op;
  s->h.dst_qpn = q.qpn;
  s->h.src_qpn = q.peer_qpn;
  s->h.msn = m.msn;
  s->h.syndrome = synd;
  s->h.flags = kPktFirst | kPktLast;
  w.tx_commit(1, WireClass::kResp);
  return true;
}

// Completes the messages an ACK at `psn` covers (coalesced ACKs: one ACK completes every message
// up to it; IBTA 9.7.5.1.2, rxe_comp.c). A READ is completed only by its responses. One ACK can
// cover more messages than the engine's response ring has room for: what it could not hand on
// stays owed (Qp::owed_*) and is handed on by the next pump before anything else of this QP is
// received (rx_network), so that no completion is lost and none overtakes another. The peer's
// packets it covers are acknowledged all the same: nothing of them is sent again.
void RoceLink::ack_up_to(Rings& w, Qp& q, uint32_t psn, bool inclusive) noexcept {
  if (q.owed) {  // an earlier ACK still owes completions: this one covers at least as much
    const int32_t d = roce::psn_diff(q.owed_psn, psn);
    if (d > 0 || (d == 0 && q.owed_inclusive)) {
      psn = q.owed_psn;
      inclusive = q.owed_inclusive;
    }
    q.owed = false;
  }
  bool progress = false;
  while (q.m_count) {
    const Msg& m = q.msgs[q.m_head];
    const int32_t d = roce::psn_diff(m.last_psn, psn);
    if (m.read || d > 0 || (d == 0 && !inclusive)) break;
    if (!to_engine_resp(w, q, m, PktOp::kAck, 0)) {
      q.owed = true;
      q.owed_psn = psn;
      q.owed_inclusive = inclusive;
      break;
    }
    q.m_head = (q.m_head + 1) % q.msgs.size();
    --q.m_count;
    progress = true;
  }
  // Sent packets the ACK covers go, those of a message it covers in part included (a
  // mid-message ACK of a long WRITE/SEND); a READ's request stays until its responses came.
  while (q.tx_count) {
    const TxPkt& t = q.tx[q.tx_head];
    const bool before_oldest = !q.m_count || roce::psn_diff(t.psn, q.msgs[q.m_head].first_psn) < 0;
    const int32_t d = roce::psn_diff(t.psn, psn);
    const bool covered = q.m_count && !q.msgs[q.m_head].read && (d < 0 || (d == 0 && inclusive));
    if (!before_oldest && !covered) break;
    pop_tx(q);
    progress = true;
  }
  if (progress) {
    q.retry_left = q.retry_cnt;
    q.rnr_left = q.rnr_retry;
    q.timer_ns = q.tx_count ? now_ : 0;
    q.last_seq_nak = 0xFFFFFFFF;
  }
}

void RoceLink::kill(Rings& w, Qp& q, uint8_t synd) noexcept {
  if (q.m_count) to_engine_resp(w, q, q.msgs[q.m_head], PktOp::kNak, synd);
  q.dead = true;
  q.tx_count = q.m_count = 0;
  q.timer_ns = 0;
  q.rnr_until = 0;
  q.resend = kNoResend;
  q.owed = false;
}

// An RNR NAK for the oldest outstanding message (Linux drivers/infiniband/sw/rxe/rxe_comp.c, the
// COMPST_RNR_RETRY state): with RNR retries left the requester sends nothing until its RNR timer
// ran out (rxe_req.c rxe_requester: wait_for_rnr_timer), then every unacknowledged packet again
// from that message on (req_retry: back to the oldest unacknowledged PSN); with none left the
// WQE completes with RNR_RETRY_EXC_ERR and the QP goes to error. The responder expects the
// message again from its first PSN (resp_from_engine), so the PSNs stay. The retries are the
// QP's rnr_retry and come back with progress, as the transport retries do; 7 is not infinite.
void RoceLink::on_rnr_nak(Rings& w, Qp& q, uint32_t psn) noexcept {
  if (!q.m_count) return;
  const Msg& m = q.msgs[q.m_head];
  if (roce::psn_diff(psn, m.first_psn) < 0 || roce::psn_diff(psn, m.last_psn) > 0) return;
  if (q.rnr_until) return;  // already waiting (a duplicated NAK)
  if (q.rnr_left == 0) {
    kill(w, q, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
    return;
  }
  --q.rnr_left;
  ++st_.rnr_retries;
  q.rnr_until = std::max<uint64_t>(now_ + q.rnr_wait_ns, 1);
  q.timer_ns = 0;  // no ACK timeout while the requester waits
}

bool RoceLink::on_response(Rings& w, Qp& q, const roce::Packet& p) noexcept {
  if (q.dead) return true;
  // Only a response to a PSN this requester sent and still awaits is acted on: one at or past
  // the next PSN to send answers nothing that was sent (dropped, counted psn_window), one before
  // the oldest outstanding PSN answers what is already answered (ignored, counted stale). Linux
  // hw/hfi1/rc.c rc_rcv_resp, hw/qib/qib_rc.c qib_rc_rcv_resp: "Ignore invalid responses",
  // "Ignore duplicate responses". Without the first check a blind forged ACK ahead would
  // complete messages the responder never saw, a forged NAK would fail the QP.
  if (roce::psn_diff(p.psn, q.next_psn) >= 0) {
    ++st_.rx_dropped[static_cast<int>(roce::Drop::kPsnWindow)];
    return true;
  }
  uint32_t oldest = q.m_count ? q.msgs[q.m_head].first_psn : q.next_psn;
  if (q.tx_count && roce::psn_diff(q.tx[q.tx_head].psn, oldest) < 0) oldest = q.tx[q.tx_head].psn;
  if (roce::psn_diff(p.psn, oldest) < 0) {
    ++st_.stale_resps;
    return true;
  }
  return p.opcode == roce::kAcknowledge ? on_acknowledge(w, q, p) : on_read_response(w, q, p);
}

// An ACK completes what it covers; a NAK first completes what precedes its PSN (rxe_comp.c
// check_ack), then: RNR waits and resends, a PSN sequence error goes back, the rest fail the QP.
bool RoceLink::on_acknowledge(Rings& w, Qp& q, const roce::Packet& p) noexcept {
  const uint8_t type = roce::aeth_type(p.aeth_syndrome);
  if (type == 0) {
    ack_up_to(w, q, p.psn, true);
    return true;
  }
  // A NAK acts once every message before it is completed (its RNR wait, go-back or error
  // belongs to the message it names, not to one the engine has not heard of yet).
  ack_up_to(w, q, p.psn, false);
  if (q.owed) return false;
  if (type == 1) {  // RNR NAK: wait the RNR timer, then send it again (on_rnr_nak)
    on_rnr_nak(w, q, p.psn);
    return true;
  }
  const uint8_t code = p.aeth_syndrome & 0x1F;
  if (code == 0) {  // PSN sequence error: go back to the oldest unacknowledged packet
    ++st_.seq_naks_rcvd;
    if (p.psn != q.last_seq_nak) retransmit(q);
    q.last_seq_nak = p.psn;
    return true;
  }
  // Invalid request, remote access, remote operational: the WQE fails, the QP errors.
  const uint8_t synd = code == 1   ? MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR
                       : code == 2 ? MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR
                                   : MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
  kill(w, q, synd);
  return true;
}

// A READ response packet: handed to the engine when it is the next one of the oldest message, a
// READ; the last one completes it.
bool RoceLink::on_read_response(Rings& w, Qp& q, const roce::Packet& p) noexcept {
  // READ response: implicitly acknowledges every earlier message (rxe_comp.c).
  while (q.m_count && !q.msgs[q.m_head].read &&
         roce::psn_diff(q.msgs[q.m_head].last_psn, p.psn) < 0) {
    ack_up_to(w, q, q.msgs[q.m_head].last_psn, true);
    if (q.owed) return false;  // the engine's ring is full: this packet waits for the next pump
  }
  if (!q.m_count) return true;
  Msg& m = q.msgs[q.m_head];
  if (!m.read || p.psn != roce::psn_add(m.first_psn, static_cast<int32_t>(m.rd_pkts))) return true;
  WireSlot* s = w.tx_slot(1, WireClass::kResp);
  if (!s) return false;
  const uint32_t npk = ((m.last_psn - m.first_psn) & roce::kPsnMask) + 1;
  PktHdr& h = s->h;
  h = PktHdr{};
  h.op = PktOp::kReadResp;
  h.dst_qpn = q.qpn;
  h.src_qpn = q.peer_qpn;
  h.msn = m.msn;
  h.offset = uint64_t{m.rd_pkts} * q.mtu;
  h.msg_len = m.read_len;
  h.len = p.payload_len;
  h.flags = static_cast<uint8_t>((m.rd_pkts == 0 ? kPktFirst : 0) |
                                 (m.rd_pkts + 1 == npk ? kPktLast : 0));
  if (p.payload_len) std::memcpy(s->payload, p.payload, p.payload_len);
  w.tx_commit(1, WireClass::kResp);
  ++m.rd_pkts;
  q.retry_left = q.retry_cnt;
  q.timer_ns = now_;
  if (m.rd_pkts == npk) {
    const uint32_t first = m.first_psn;
    q.m_head = (q.m_head + 1) % q.msgs.size();
    --q.m_count;
    while (q.tx_count && roce::psn_diff(q.tx[q.tx_head].psn, first) <= 0) {
      pop_tx(q);
    }
    q.timer_ns = q.tx_count ? now_ : 0;
  }
  return true;
}

// ---- responder ---------------------------------------------------------------------------------
// A request behind the expected PSN (rxe_resp.c duplicate_request). SEND and WRITE are not
// executed again; every one is acknowledged again, AckReq or not, with the last PSN and MSN
// acknowledged (IBTA C9-105 as rxe cites it; rxe sends ack_psn - 1). A READ is answered again
// only when it falls in a READ this responder served (find_resource) and asks for the same R_Key
// and a part of the same range; its responses start at its PSN. Anything else is dropped.
void RoceLink::on_duplicate(Rings& w, Qp& q, const roce::Packet& p) noexcept {
  ++st_.duplicates;
  if (p.opcode != roce::kReadRequest) {
    send_ack(q, roce::kAethAck, q.acked_psn, q.acked_msn);
    return;
  }
  for (ReadRec& r : q.reads) {
    if (!r.valid || roce::psn_diff(p.psn, r.first_psn) < 0 ||
        roce::psn_diff(p.psn, r.first_psn) >= static_cast<int32_t>(r.n))
      continue;
    if (p.reth_rkey != r.rkey || p.reth_va < r.va || p.reth_len > r.len ||
        p.reth_va - r.va > r.len - p.reth_len)
      return;  // not a part of that READ: rxe drops it (RESPST_CLEANUP)
    // Still with the engine (its verdict and responses are coming): nothing to replay yet. rxe
    // answers synchronously and never sees this; handing it over again would have the engine
    // check (and possibly refuse) the same READ twice.
    for (uint32_t i = 0; i < q.r_count; ++i)
      if (q.rmsgs[(q.r_head + i) % q.rmsgs.size()].msn == r.msn) return;
    WireSlot* s = w.tx_slot(1, WireClass::kReq);
    if (!s) return;
    r.resp_psn = p.psn;
    r.resp_n = read_psns(p.reth_len, q.mtu);
    s->h = PktHdr{};
    s->h.op = PktOp::kRead;
    s->h.flags = kPktFirst | kPktLast;
    s->h.dst_qpn = q.qpn;
    s->h.src_qpn = q.peer_qpn;
    s->h.msn = r.msn;
    s->h.rkey = p.reth_rkey;
    s->h.raddr = p.reth_va;
    s->h.msg_len = p.reth_len;
    w.tx_commit(1, WireClass::kReq);
    return;
  }
}

// The PSN check of a request (rxe_resp.c check_psn): true when it is the expected one.
bool RoceLink::check_psn(Rings& w, Qp& q, const roce::Packet& p) noexcept {
  switch (roce::classify_psn(p.psn, q.epsn)) {
    case roce::PsnClass::kAhead:
      // A packet was lost (or the PSN is forged): one NAK PSN sequence error carrying ePSN,
      // then silence until ePSN arrives (rxe_resp.c check_psn, sent_psn_nak). The requester
      // goes back to ePSN; nothing here changes state.
      ++st_.out_of_seq;
      if (!q.nak_sent) {
        send_ack(q, roce::kAethNakPsn, q.epsn, q.acked_msn);
        q.nak_sent = true;
        ++st_.seq_naks_sent;
      }
      return false;
    case roce::PsnClass::kDuplicate:
      on_duplicate(w, q, p);
      return false;
    case roce::PsnClass::kExpected:
      break;
  }
  return true;
}

void RoceLink::on_request(Rings& w, Qp& q, const roce::Packet& p) noexcept {
  if (!check_psn(w, q, p)) return;
  ReqShape sh;
  if (!req_shape(p.opcode, &sh)) return;
  // Opcode sequence (rxe_resp.c check_op_seq) and lengths (rxe_resp_check_length): FIRST and
  // MIDDLE carry exactly the path MTU, LAST and ONLY at most that.
  const bool seq_ok = q.in_msg ? (!sh.first && sh.kind == q.cur_kind) : sh.first;
  const bool len_ok = sh.last ? p.payload_len <= q.mtu : p.payload_len == q.mtu;
  if (!seq_ok || !len_ok) {
    send_ack(q, roce::kAethNakInvReq, p.psn, wire_msn(q, q.rmsn));
    q.in_msg = false;
    return;
  }
  if (sh.first && q.r_count == q.rmsgs.size()) {
    ++st_.rx_full;
    return;
  }
  WireSlot* s = w.tx_slot(1, WireClass::kReq);
  if (!s) {
    ++st_.rx_full;
    return;
  }
  q.nak_sent = false;
  q.carried = true;
  if (sh.first) {
    q.cur_kind = sh.kind;
    q.cur_off = 0;
    q.cur_va = p.reth_va;
    q.cur_rkey = p.reth_rkey;
    q.cur_len = p.reth_len;
    RMsg& r = q.rmsgs[(q.r_head + q.r_count) % q.rmsgs.size()];
    ++q.r_count;
    r = RMsg{q.rmsn, p.psn, p.psn, sh.kind == 2, false};
  }
  to_engine_req(q, p, sh, s);
  w.tx_commit(1, WireClass::kReq);
  advance_epsn(q, p, sh);
}

// The engine's request packet for an expected request packet `p` of the message in progress.
void RoceLink::to_engine_req(const Qp& q, const roce::Packet& p, const ReqShape& sh,
                             WireSlot* s) noexcept {
  PktHdr& h = s->h;
  h = PktHdr{};
  h.op = sh.op;
  h.flags = static_cast<uint8_t>((sh.first ? kPktFirst : 0) | (sh.last ? kPktLast : 0) |
                                 (p.se ? kPktSolicited : 0));
  h.dst_qpn = q.qpn;
  h.src_qpn = q.peer_qpn;
  h.msn = q.rmsn;
  h.imm = (roce::opcode_flags(p.opcode) & roce::kHasIeth) ? p.ieth : p.imm;
  h.rkey = q.cur_rkey;
  h.raddr = q.cur_va + q.cur_off;
  h.offset = q.cur_off;
  h.len = p.payload_len;
  // A SEND's total length is known at its last packet; before, the bytes so far (the engine
  // checks the receive buffer against it on every packet).
  h.msg_len = sh.kind == 0 ? q.cur_off + p.payload_len : q.cur_len;
  if (p.payload_len) std::memcpy(s->payload, p.payload, p.payload_len);
}

// After an expected request packet went to the engine: the next expected PSN (a READ takes one
// per response packet, rxe_resp.c), the READ remembered for its duplicates, the message's end.
void RoceLink::advance_epsn(Qp& q, const roce::Packet& p, const ReqShape& sh) noexcept {
  RMsg& r = q.rmsgs[(q.r_head + q.r_count - 1) % q.rmsgs.size()];
  uint32_t n = 1;
  if (sh.kind == 2) {
    n = read_psns(p.reth_len, q.mtu);
    ReadRec& rr = q.reads[q.read_next++ % (sizeof q.reads / sizeof q.reads[0])];
    rr = ReadRec{p.psn, n, q.rmsn, p.reth_va, p.reth_len, p.reth_rkey, p.psn, n, true};
  }
  r.last_psn = roce::psn_add(p.psn, static_cast<int32_t>(n - 1));
  q.cur_off += p.payload_len;
  q.epsn = roce::psn_add(p.psn, static_cast<int32_t>(n));
  if (sh.last) {
    r.done = true;
    q.rmsn = q.rmsn + 1;
    q.in_msg = false;
    return;
  }
  q.in_msg = true;
  // AckReq inside a message: acknowledge what arrived, when no earlier message still awaits
  // the engine's verdict (a coalesced ACK would complete it); otherwise the engine's ACK of
  // that message covers this message's packets too (on_verdict).
  if (p.ack_req && q.r_count == 1) {
    q.acked_psn = p.psn;
    q.acked_msn = wire_msn(q, q.rmsn);
    send_ack(q, roce::kAethAck, q.acked_psn, q.acked_msn);
  }
}

// ---- engine verdicts ---------------------------------------------------------------------------
// Engine responses -> ACK / NAK / READ responses. Consecutive ACKs of one QP in a batch are
// coalesced into the last one (IBTA 9.7.5.1.2): `held` is the QP whose ACK waits.
bool RoceLink::resp_from_engine(Rings& w) noexcept {
  bool work = false;
  Qp* held = nullptr;
  while (carrier_->tx_room() >= kHeadroom) {
    const WireSlot* s = w.rx_slot(1, WireClass::kResp);
    if (!s) break;
    work = true;
    if (Qp* q = find(s->h.src_qpn)) {
      if (held != q) flush_ack(held);
      on_verdict(*q, *s, held);
    }
    w.rx_pop(1, WireClass::kResp);
  }
  flush_ack(held);
  return work;
}

void RoceLink::flush_ack(Qp*& held) noexcept {
  if (held) send_ack(*held, roce::kAethAck, held->acked_psn, held->acked_msn);
  held = nullptr;
}

// The pending message numbered `msn` and how many pending ones precede it (*at); nullptr (and
// *at = r_count) when none is: a READ being replayed.
RoceLink::RMsg* RoceLink::pending(Qp& q, uint32_t msn, uint32_t* at) noexcept {
  for (*at = 0; *at < q.r_count; ++*at) {
    RMsg& c = q.rmsgs[(q.r_head + *at) % q.rmsgs.size()];
    if (c.msn == msn) return &c;
  }
  return nullptr;
}

void RoceLink::pop_through(Qp& q, uint32_t at) noexcept {
  q.r_head = (q.r_head + at + 1) % q.rmsgs.size();
  q.r_count -= at + 1;
}

void RoceLink::on_verdict(Qp& q, const WireSlot& s, Qp*& held) noexcept {
  const PktHdr& h = s.h;
  uint32_t at = 0;
  RMsg* r = pending(q, h.msn, &at);
  switch (h.op) {
    case PktOp::kAck:
      if (!r) return;
      q.acked_psn = r->last_psn;
      q.acked_msn = wire_msn(q, h.msn + 1);
      pop_through(q, at);
      // Only a message in progress left: its packets so far are acknowledged too (it may be
      // longer than the requester's window and its AckReq points passed meanwhile).
      if (q.r_count == 1 && q.in_msg && !q.rmsgs[q.r_head].read)
        q.acked_psn = roce::psn_add(q.epsn, -1);
      held = &q;
      return;
    case PktOp::kReadResp:
      send_read_resp(q, s, r, at, held);
      return;
    case PktOp::kNak:
      flush_ack(held);
      send_nak(q, h, r, at);
      return;
    case PktOp::kRnrNak:
    case PktOp::kDrop:
      flush_ack(held);
      if (!r) return;
      // The message is not executed: expect it again from its first PSN. A drop (the engine's
      // QP gone or not in RTR/RTS) answers nothing: the requester's timer runs out.
      if (h.op == PktOp::kRnrNak)
        send_ack(q, static_cast<uint8_t>(roce::kAethRnr | rnr_code()), r->first_psn,
                 wire_msn(q, h.msn));
      q.epsn = r->first_psn;
      q.rmsn = r->msn;
      q.in_msg = false;
      q.nak_sent = true;  // the requester goes back on the RNR NAK (or its timer)
      q.r_count = at;     // this message and everything after it come again
      return;
    default:
      return;
  }
}

// One READ response packet of the engine's (a first execution or a replay) on the network.
void RoceLink::send_read_resp(Qp& q, const WireSlot& s, RMsg* r, uint32_t at, Qp*& held) noexcept {
  const PktHdr& h = s.h;
  const ReadRec* rr = nullptr;
  for (const ReadRec& c : q.reads)
    if (c.valid && c.msn == h.msn) rr = &c;
  if (!rr) return;
  flush_ack(held);
  const uint32_t k = static_cast<uint32_t>(h.offset / q.mtu);
  const bool last = h.flags & kPktLast;
  roce::Packet p;
  p.src_ip = opt_.local_ipv4;
  p.dst_ip = q.peer_ip;
  p.ip_id = next_ip_id();
  p.sport = q.sport;
  p.dqpn = q.peer_qpn;
  p.psn = roce::psn_add(rr->resp_psn, static_cast<int32_t>(k));
  p.opcode = rr->resp_n == 1 ? roce::kReadRespOnly
             : k == 0        ? roce::kReadRespFirst
             : last          ? roce::kReadRespLast
                             : roce::kReadRespMiddle;
  p.aeth_syndrome = roce::kAethAck;
  p.aeth_msn = wire_msn(q, h.msn + 1);
  p.payload = s.payload;
  p.payload_len = h.len;
  const size_t n = roce::encode(p, scratch_.data(), scratch_.size(), icrc_);
  if (n) put(scratch_.data(), n, q.peer_ip);
  if (last && r) {
    q.acked_psn = r->last_psn;
    q.acked_msn = wire_msn(q, h.msn + 1);
    pop_through(q, at);
  }
}

// The engine refused a request: a NAK with the matching AETH code (IBTA 9.7.5.2.x, rxe_resp.c).
void RoceLink::send_nak(Qp& q, const PktHdr& h, RMsg* r, uint32_t at) noexcept {
  const uint8_t code = h.syndrome == MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR      ? 0x62
                       : h.syndrome == MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR ? 0x61
                                                                              : 0x63;
  send_ack(q, code, r ? r->last_psn : q.epsn, wire_msn(q, h.msn));
  if (r) pop_through(q, at);
  // A refused READ was not executed: no resource answers its duplicates (rxe keeps a
  // resource only for a READ that passed check_rkey, rxe_prepare_res in read_reply).
  for (ReadRec& c : q.reads)
    if (c.valid && c.msn == h.msn) c.valid = false;
}

uint8_t RoceLink::rnr_code() const noexcept {
  return 1;  // 0.01 ms (IBTA Table 45): the requester link's RNR timer (rnr_timer_us) paces it
}

// ---- receive -----------------------------------------------------------------------------------
bool RoceLink::rx_network(Rings& w) noexcept {
  // Only take packets the engine's rings can hold; the rest waits in the socket buffer.
  if (w.tx_free(1, WireClass::kReq) < Carrier::kRxBatch ||
      w.tx_free(1, WireClass::kResp) < Carrier::kRxBatch)
    return false;
  RxPkt pkts[Carrier::kRxBatch];
  const unsigned got = carrier_->recv_burst(pkts, Carrier::kRxBatch);
  if (got == 0) return false;
  for (unsigned i = 0; i < got; ++i) {
    roce::Packet p;
    roce::Drop d = pkts[i].truncated ? roce::Drop::kNotRoce
                                     : roce::decode(pkts[i].data, pkts[i].len, &p, icrc_);
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
      continue;
    }
    // A response behind completions this QP still owes the engine waits for them, and a
    // packet the engine's rings have no room for waits too: on a packet ring it stays in its
    // slot for the next pump (Carrier::unread; a socket's packet is dropped and sent again by
    // the peer, as a NIC drops what it has no buffer for). A lossless link loses nothing here.
    const bool is_req = roce::opcode_flags(p.opcode) & roce::kIsRequest;
    // A QP in the error state takes no packet and answers none, a duplicate's re-ACK included
    // (IBTA vol. 1 10.3.1; rxe_resp.c get_req frees what a responder in error receives).
    if (q->dead) continue;
    bool taken = !(!is_req && q->owed) && w.tx_free(1, WireClass::kReq) != 0 &&
                 w.tx_free(1, WireClass::kResp) != 0;
    // A frame longer than the receiving port's MTU never reaches its transport: the port drops
    // it (Linux net/core/dev.c is_skb_forwardable: len > dev->mtu + hard_header_len), and the
    // requester's retry timer runs out. The QP's path MTU stands for the port's here.
    if (taken && p.payload_len > q->mtu) {
      ++mtu_drops_;
      continue;
    }
    if (taken && is_req)
      on_request(w, *q, p);
    else if (taken)
      taken = on_response(w, *q, p);
    if (!taken) {
      ++st_.rx_waits;
      carrier_->unread(got - i);
      return true;
    }
    ++st_.rx_packets;
  }
  return true;
}

void RoceLink::timers(Rings& w, Qp& q) noexcept {
  if (stalled_only_) return;  // inline: fire_stalled() is the clock
  if (q.rnr_until) {  // the RNR timer: when it ran out, everything unacknowledged goes again
    if (now_ < q.rnr_until) return;
    rnr_expired(q);
    return;
  }
  // The QP's local ACK timeout (4.096 us x 2^timeout, IBTA 9.7.6.1.3); 0 never expires.
  if (!q.tx_count || !q.timer_ns || !q.ack_ns || now_ - q.timer_ns < q.ack_ns) return;
  ack_expired(w, q);
}

void RoceLink::rnr_expired(Qp& q) noexcept {
  q.rnr_until = 0;
  ++retries_;
  retransmit(q);
}

void RoceLink::ack_expired(Rings& w, Qp& q) noexcept {
  ++st_.timeouts;
  if (q.retry_left == 0) {  // the peer is gone: TRANSPORT_RETRY_EXC_ERR (rxe_comp.c)
    kill(w, q, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    return;
  }
  --q.retry_left;
  ++retries_;
  retransmit(q);
}

bool RoceLink::fire_stalled(Rings& w, uint64_t now_ns) noexcept {
  now_ = now_ns;
  bool fired = false;
  for (auto& [qpn, qp] : qps_) {
    Qp& q = *qp;
    if (q.dead) continue;
    if (q.rnr_until) {
      rnr_expired(q);
      fired = true;
    } else if (q.tx_count && q.ack_ns) {
      ack_expired(w, q);
      fired = true;
    }
  }
  carrier_->flush(now_);
  return fired;
}

bool RoceLink::pump(Rings& w, uint64_t now_ns, bool* pending) noexcept {
  now_ = now_ns;
  bool work = false;
  work |= rx_network(w);
  work |= resp_from_engine(w);
  work |= tx_from_engine(w);
  // Per QP: what the last ACKs still owe the engine (before rx_network takes another response
  // of the QP, next pump), the rest of a go-back, the timers.
  for (auto& [qpn, q] : qps_) {
    if (q->owed) {
      const uint32_t before = q->m_count;
      ack_up_to(w, *q, q->owed_psn, q->owed_inclusive);
      work |= q->m_count != before;
    }
    work |= resend_some(*q);
    timers(w, *q);
    *pending |= q->tx_count != 0 || q->r_count != 0 || q->owed;
  }
  carrier_->flush(now_);
  return work;
}

}  // namespace rdmx::emu::detail
