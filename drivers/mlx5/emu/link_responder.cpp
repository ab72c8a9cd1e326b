// The RC link's responder: request packets checked against the expected PSN (duplicates,
// sequence errors) and handed to the engine; the engine's verdicts leave as coalesced ACKs,
// NAKs and READ responses (IBTA vol. 1 9.7.5; rxe_resp.c).
#include <cstring>

#include <rdmx/mlx5/prm/cqe.hpp>

#include "roce_link.hpp"
#include "wire.hpp"

namespace rdmx::emu::detail {

namespace {

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

}  // namespace

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
  if (roce::aeth_type(synd) == 0) ++st_.acks_sent;
  emit(p);
}

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
  if (s->ext) handed_ = Held{s, w.produced(1, WireClass::kReq), 0, WireClass::kReq};
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
  payload_to(s, p);
}

// The payload of received packet `p` for the engine's slot `s`: in place when the carrier keeps
// its packets until released (the engine reads the packet ring), else copied.
void RoceLink::payload_to(WireSlot* s, const roce::Packet& p) const noexcept {
  if (!p.payload_len) return;
  if (carrier_->rx_keeps())
    s->ext = p.payload;
  else
    std::memcpy(s->payload, p.payload, p.payload_len);
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
  p.payload = s.data();
  p.payload_len = h.len;
  emit(p);
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

}  // namespace rdmx::emu::detail
