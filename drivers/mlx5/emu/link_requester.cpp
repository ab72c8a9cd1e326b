// The RC link's requester: the engine's request packets leave with PSNs, AckReq and the message
// records that the peer's ACKs, NAKs and READ responses complete (rxe_req.c, rxe_comp.c).
// Loss (timers, go-back-N): link_loss.cpp.
#include <algorithm>
#include <cstring>

#include <rdmx/mlx5/prm/cqe.hpp>

#include "engine.hpp"
#include "roce_link.hpp"
#include "wire.hpp"

namespace rdmx::emu::detail {

namespace {

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

}  // namespace

// Request packet `t` of `q` on the carrier, encoded in the carrier's buffer; its payload from
// `payload`, or with kPktInMemory gathered by the engine from memory straight into the packet.
void RoceLink::send_req(Qp& q, const TxPkt& t, const uint8_t* payload) noexcept {
  roce::Packet p;
  req_packet(q, t, payload, &p);
  size_t cap = 0;
  uint8_t* b = carrier_->tx_buf(&cap);
  if (!b) return;
  if (t.h.len && (t.h.flags & kPktInMemory)) {
    const size_t at = roce::payload_offset(p);
    p.payload = nullptr;  // encode leaves the gathered bytes
    if (at + t.h.len > cap || !eng_ || !eng_->regather(q.qpn, t.h.msn, t.h.offset, b + at, t.h.len))
        [[unlikely]] {
      ++st_.regather_fails;
      return;
    }
  }
  if (const size_t n = roce::encode(p, b, cap, icrc_)) carrier_->send_buf(n, p.dst_ip, now_);
}

void RoceLink::req_packet(const Qp& q, const TxPkt& t, const uint8_t* payload,
                          roce::Packet* out) noexcept {
  const PktHdr& h = t.h;
  const bool first = h.flags & kPktFirst, last = h.flags & kPktLast;
  roce::Packet& p = *out;
  p.src_ip = opt_.local_ipv4;
  p.dst_ip = q.peer_ip;
  p.ip_id = next_ip_id();
  p.sport = q.sport;
  p.opcode = req_opcode(h.op, first, last);
  p.dqpn = q.peer_qpn;
  p.psn = t.psn;
  p.se = last && (h.flags & kPktSolicited);
  p.ack_req = t.ack_req;
  p.reth_va = h.raddr;
  p.reth_rkey = h.rkey;
  p.reth_len = static_cast<uint32_t>(h.msg_len);
  p.imm = h.imm;
  p.ieth = h.imm;
  p.payload = payload;
  p.payload_len = h.len;
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
    // A MIDDLE or LAST packet continues the newest open message, a WRITE or SEND of the same
    // MSN; anything else is an engine bug: counted (EmuStats::roce.orphan_pkts), never sent.
    if (!first &&
        (q.m_count == 0 || q.msgs[(q.m_head + q.m_count - 1) % q.msgs.size()].msn != h.msn ||
         q.msgs[(q.m_head + q.m_count - 1) % q.msgs.size()].read)) [[unlikely]] {
      orphan(w);
      work = true;
      continue;
    }
    if (q.tx_count == q.tx.size() || (first && q.m_count == q.msgs.size())) break;  // window
    if (q.rnr_until) break;            // waiting out an RNR NAK: nothing new goes (rxe_req.c)
    if (q.resend != kNoResend) break;  // go-back-N still under way: new packets follow it
    if (carrier_->tx_room() < kHeadroom) break;   // a full packet ring: the next pump sends it
    if (req_opcode(h.op, first, last) == 0xFF) {  // not a request (cannot happen): dropped
      w.rx_pop(1, WireClass::kReq);
      continue;
    }
    // AckReq on the last packet of each message, and every half window inside a long one, so
    // that a message of more packets than the window is acknowledged as it goes (rxe_req.c asks
    // every RXE_MAX_UNACKED_PSNS packets).
    const uint32_t in_msg =
        first ? 0
              : static_cast<uint32_t>(roce::psn_diff(
                    q.next_psn, q.msgs[(q.m_head + q.m_count - 1) % q.msgs.size()].first_psn));
    const uint32_t every = std::max<uint32_t>(1, static_cast<uint32_t>(q.tx.size() / 2));
    TxPkt& t = q.tx[(q.tx_head + q.tx_count) % q.tx.size()];
    t.h = h;
    t.psn = q.next_psn;
    t.ack_req = last || (in_msg + 1) % every == 0;
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
      m.first_psn = t.psn;
      m.read = h.op == PktOp::kRead;
      m.read_len = static_cast<uint32_t>(h.msg_len);
    }
    // The message's last PSN is known from its length at its first packet: an ACK inside the
    // message (AckReq every half window) must not complete it.
    if (first) {
      Msg& m = q.msgs[(q.m_head + q.m_count - 1) % q.msgs.size()];
      const uint64_t pkts =
          h.op == PktOp::kRead ? n : std::max<uint64_t>(1, (h.msg_len + q.mtu - 1) / q.mtu);
      m.last_psn = roce::psn_add(t.psn, static_cast<int32_t>(pkts - 1));
    }
    q.next_psn = roce::psn_add(q.next_psn, static_cast<int32_t>(n));
    if (!q.timer_ns) q.timer_ns = now_;
    send_req(q, t, s->data());  // straight into the carrier's slot: the link keeps no copy
    w.rx_pop(1, WireClass::kReq);
    work = true;
  }
  return work;
}

void RoceLink::orphan(Rings& w) noexcept {
  ++st_.orphan_pkts;
  w.rx_pop(1, WireClass::kReq);
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
  payload_to(s, p);
  if (s->ext) handed_ = Held{s, w.produced(1, WireClass::kResp), 0, WireClass::kResp};
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

}  // namespace rdmx::emu::detail
