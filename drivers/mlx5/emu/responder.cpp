// The responder: request packets in (the gate, WRITE, SEND, READ), READ responses out in order,
// NAKs, responder errors and the asynchronous events they raise. Runs under Engine::mu_.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "datapath.hpp"

namespace rdmx::emu::detail {

// ---- async events and responder errors ----------------------------------------------------------
void Engine::raise(uint32_t qpn, mlx5::AsyncEventKind k) noexcept {
  if (events_.size() >= kMaxEvents) {
    events_.pop_front();
    ++st_.async_dropped;
  }
  events_.push_back(mlx5::AsyncEvent{k, qpn});
  ++st_.async_events;
}

size_t Engine::poll_events(std::span<mlx5::AsyncEvent> out) {
  std::lock_guard<std::mutex> g(mu_);
  size_t n = 0;
  while (n < out.size() && !events_.empty()) {
    out[n++] = events_.front();
    events_.pop_front();
  }
  return n;
}

// The kernel's mlx5 driver turns the device's WQ_ACCESS_ERROR / WQ_INVAL_REQ_ERROR /
// WQ_CATAS_ERROR events into IB_EVENT_QP_ACCESS_ERR / IB_EVENT_QP_REQ_ERR / IB_EVENT_QP_FATAL
// (Linux drivers/infiniband/hw/mlx5/qp.c mlx5_ib_qp_event); a responder's remote access error
// is the first, an invalid request the second, a remote operational error the third.
void Engine::responder_error(QpCtx& q, uint8_t nak_synd, bool consumed_receive) noexcept {
  if (q.state == QpState::kError) return;
  if (opt_.responder_keeps_rts && !consumed_receive) return;
  ++st_.responder_errors;
  raise(q.qpn, nak_synd == kSynRemAccess  ? mlx5::AsyncEventKind::kQpAccessErr
               : nak_synd == kSynRemInval ? mlx5::AsyncEventKind::kQpReqErr
                                          : mlx5::AsyncEventKind::kQpFatal);
  enter_error(q);
}

// ---- responder ----------------------------------------------------------------------------------
bool Engine::rx_requests() noexcept {
  bool work = false;
  for (int i = 0; i < 256; ++i) {
    const WireSlot* s = wire_->rx_slot(side_, WireClass::kReq);
    if (!s) break;
    if (!handle_request(*s)) break;
    wire_->rx_pop(side_, WireClass::kReq);
    work = true;
  }
  return work;
}

// One request packet at the responder: the gate (QP, path MTU, sequence, duplicates), then the
// opcode's handler. Returns false when the packet must wait (responses still streaming, no room
// on the response ring).
bool Engine::handle_request(const WireSlot& s) noexcept {
  const PktHdr& h = s.h;
  ++st_.rx_packets;
  QpCtx* q = find_qp(h.dst_qpn);
  const bool last = (h.flags & kPktLast) != 0;
  const bool first = (h.flags & kPktFirst) != 0;
  if (!q || (q->state != QpState::kRtr && q->state != QpState::kRts) || !q->connected ||
      q->peer_qpn != h.src_qpn) {
    // A real responder drops the packet silently and the requester's retry timer runs out
    // (rxe_recv.c check_type_state drops a packet for a QP outside RTR/RTS). The drop notice
    // tells this side's link, which drops the message and expects it again (on_verdict).
    if (last) return respond(h.src_qpn, h.dst_qpn, PktOp::kDrop, h.msn, 0);
    return true;
  }
  // Responses leave in PSN order: anything but a READ waits until the READ responses before it
  // have left; a READ joins the queue of READs being answered (the responder's resources,
  // max_dest_rd_atomic, bound that queue: req_read).
  if (!q->reads.empty() && h.op != PktOp::kRead) return false;
  if (wire_->tx_free(side_, WireClass::kResp) == 0) return false;
  const int32_t d = static_cast<int32_t>(h.msn - q->epsn);
  if (d > 0) return true;  // out of sequence after a NAK: the requester goes back to epsn
  if (d < 0) {             // before the expected message
    // A duplicate only if this incarnation executed it; anything older (a late message of the
    // peer's previous incarnation, whose keys recovery invalidated) is dropped, as rxe_resp.c
    // duplicate_request drops a duplicate READ it holds no resource for (a class D error).
    if (h.msn - q->epsn0 >= q->epsn - q->epsn0) {
      ++st_.stale_requests;
      return true;
    }
    if (h.op == PktOp::kRead) {
      // Re-executed on the resource it already holds (rxe_resp.c duplicate_request finds the
      // READ's resource and restarts it): no new resource, and nothing to do while its
      // responses are still queued.
      const bool queued = std::any_of(q->reads.begin(), q->reads.end(),
                                      [&](const PendingRead& r) { return r.msn == h.msn; });
      if (!queued) {
        PendingRead r{h.msn, h.src_qpn, h.rkey, h.raddr, h.msg_len, 0};
        r.replay = true;
        q->reads.push_back(r);
      }
    } else if (last) {
      respond(h.src_qpn, q->qpn, PktOp::kAck, h.msn, 0);
    }
    return true;
  }
  if (q->discard_msn_valid && q->discard_msn == h.msn && !first) return true;
  q->discard_msn_valid = false;
  switch (h.op) {
    case PktOp::kWrite:
    case PktOp::kWriteImm:
      req_write(*q, s);
      return true;
    case PktOp::kSend:
    case PktOp::kSendImm:
    case PktOp::kSendInv:
      req_send(*q, s);
      return true;
    case PktOp::kRead:
      req_read(*q, h);
      return true;
    default:
      req_nak(*q, h, PktOp::kNak, kSynRemInval, true);
      responder_error(*q, kSynRemInval);
      return true;
  }
}

// A NAK (or RNR NAK) for `h`; the rest of its message is discarded, and `advance` moves the
// expected sequence past it (an RNR NAK does not: the requester sends the message again).
void Engine::req_nak(QpCtx& q, const PktHdr& h, PktOp op, uint8_t synd, bool advance) noexcept {
  respond(h.src_qpn, q.qpn, op, h.msn, synd);
  q.discard_msn_valid = true;
  q.discard_msn = h.msn;
  if (advance) ++q.epsn;
}

bool Engine::respond(uint32_t dst_qpn, uint32_t src_qpn, PktOp op, uint32_t msn,
                     uint8_t synd) noexcept {
  WireSlot* s = wire_->tx_slot(side_, WireClass::kResp);
  if (!s) return false;
  s->h = PktHdr{};
  s->h.op = op;
  s->h.dst_qpn = dst_qpn;
  s->h.src_qpn = src_qpn;
  s->h.msn = msn;
  s->h.syndrome = synd;
  s->h.flags = kPktFirst | kPktLast;
  wire_->tx_commit(side_, WireClass::kResp);
  ++st_.tx_packets;
  return true;
}

// Checker rule: a remote use of an rkey whose UMR is neither fenced by a later WQE nor
// completed and polled. True when the checker is fatal (the access is then refused).
bool Engine::remote_use_unordered(QpCtx& q, const PktHdr& h, uint32_t rkey) noexcept {
  for (auto& [qpn, o] : qps_) {
    for (HotMkey& hm : o->hot) {
      if (hm.index != (rkey >> 8) || !hot_live(*o, hm)) continue;
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "peer QP 0x%x used rkey 0x%x while the UMR at WQE 0x%04x of QP 0x%x is "
                    "neither fenced by a later WQE nor completed and polled",
                    h.src_qpn, rkey, hm.umr_wqe, o->qpn);
      report(&q, static_cast<uint16_t>(h.msn), Rule::kRemoteUseBeforeOrdered, buf);
      return opt_.checker_fatal;
    }
  }
  return false;
}

void Engine::req_write(QpCtx& q, const WireSlot& s) noexcept {
  const PktHdr& h = s.h;
  const bool last = (h.flags & kPktLast) != 0;
  const bool first = (h.flags & kPktFirst) != 0;
  if (first && remote_use_unordered(q, h, h.rkey)) {
    req_nak(q, h, PktOp::kNak, kSynRemAccess, true);
    return responder_error(q, kSynRemAccess);
  }
  // The responder validates the RETH (R_Key, VA and the whole DMA length) on the first
  // packet (IBA 9.7.5.1.3), so a multi-packet WRITE that runs past the mkey changes nothing.
  XlateErr xe = first ? check(h.rkey, h.raddr, h.msg_len, kRW, q.pd, q.qpn) : XlateErr::kOk;
  if (xe == XlateErr::kOk)
    xe = walk(
        h.rkey, h.raddr, h.len, kRW,
        [&, done = uint64_t{0}](uint8_t* p, uint64_t k) mutable {
          std::memcpy(p, s.data() + done, k);
          done += k;
        },
        q.pd, q.qpn);
  if (xe != XlateErr::kOk) {
    // Class C: NAK remote access error, then this QP to error (responder_error). A WRITE with
    // immediate consumes its receive, which completes in error first.
    refused(q, xe);
    uint32_t counter;
    const bool took = h.op == PktOp::kWriteImm && rq_take(q, &counter);
    if (took) recv_cqe(q, counter, 0, 0, 0, false, kSynLocAccess);
    req_nak(q, h, PktOp::kNak, kSynRemAccess, true);
    return responder_error(q, kSynRemAccess, took);
  }
  if (!last) return;
  if (h.op == PktOp::kWriteImm) {
    uint32_t counter;
    if (!rq_take(q, &counter)) {
      ++st_.rnr_naks;
      return req_nak(q, h, PktOp::kRnrNak, 0, false);
    }
    recv_cqe(q, counter, MLX5_CQE_RESP_WR_IMM, static_cast<uint32_t>(h.msg_len), h.imm,
             h.flags & kPktSolicited, 0);
  }
  respond(h.src_qpn, q.qpn, PktOp::kAck, h.msn, 0);
  ++q.epsn;
}

bool Engine::rq_take(QpCtx& q, uint32_t* counter) noexcept {
  poll_rq_doorbell(q);
  if (q.rq_ci == q.rq_pi) return false;
  *counter = q.rq_ci++;
  ++st_.recvs;
  return true;
}

uint8_t Engine::scatter_recv(QpCtx& q, uint32_t counter, uint64_t off, const uint8_t* data,
                             uint32_t len, uint64_t msg_len) noexcept {
  const uint8_t* wqe = q.rq_buf + size_t{counter & (q.rq_n - 1)} * q.rq_stride;
  const uint32_t n_seg = q.rq_stride / 16;
  uint64_t cap = 0;
  for (uint32_t i = 0; i < n_seg; ++i) {
    uint32_t key;
    std::memcpy(&key, wqe + i * 16 + 4, 4);
    if (::rdmx::detail::bswap(key) == MLX5_INVALID_LKEY) break;
    uint32_t bc;
    std::memcpy(&bc, wqe + i * 16, 4);
    cap += ::rdmx::detail::bswap(bc);
  }
  if (msg_len > cap) return kSynLocLen;
  uint64_t skip = off;
  uint32_t done = 0;
  for (uint32_t i = 0; i < n_seg && done < len; ++i) {
    uint32_t bc, key;
    uint64_t addr;
    std::memcpy(&bc, wqe + i * 16, 4);
    std::memcpy(&key, wqe + i * 16 + 4, 4);
    std::memcpy(&addr, wqe + i * 16 + 8, 8);
    bc = ::rdmx::detail::bswap(bc);
    key = ::rdmx::detail::bswap(key);
    addr = ::rdmx::detail::bswap(addr);
    if (key == MLX5_INVALID_LKEY) break;
    if (skip >= bc) {
      skip -= bc;
      continue;
    }
    const uint64_t take = std::min<uint64_t>(bc - skip, len - done);
    const XlateErr xe = walk(key, addr + skip, take, kLW, [&](uint8_t* p, uint64_t k) {
      std::memcpy(p, data + done, k);
      done += static_cast<uint32_t>(k);
    });
    if (xe != XlateErr::kOk) return kSynLocProt;
    skip = 0;
  }
  return done == len ? 0 : kSynLocLen;
}

void Engine::req_send(QpCtx& q, const WireSlot& s) noexcept {
  const PktHdr& h = s.h;
  const bool last = (h.flags & kPktLast) != 0;
  if (h.flags & kPktFirst) {
    uint32_t counter;
    if (!rq_take(q, &counter)) {
      ++st_.rnr_naks;
      return req_nak(q, h, PktOp::kRnrNak, 0, false);
    }
    q.recv_active = true;
    q.recv_counter = counter;
    q.recv_off = 0;
  }
  if (!q.recv_active) return;
  // A receive that fails completes in error, NAKs the requester and puts this QP in error.
  auto fail = [&](uint8_t local_synd, uint8_t remote_synd) {
    recv_cqe(q, q.recv_counter, 0, 0, 0, false, local_synd);
    q.recv_active = false;
    req_nak(q, h, PktOp::kNak, remote_synd, true);
    responder_error(q, remote_synd, true);
  };
  if (const uint8_t synd = scatter_recv(q, q.recv_counter, h.offset, s.data(), h.len, h.msg_len))
    return fail(synd, synd == kSynLocLen ? kSynRemInval : kSynRemOp);
  if (!last) return;
  uint8_t cqe_op = MLX5_CQE_RESP_SEND;
  uint32_t imm = 0;
  if (h.op == PktOp::kSendImm) {
    cqe_op = MLX5_CQE_RESP_SEND_IMM;
    imm = h.imm;
  } else if (h.op == PktOp::kSendInv) {
    Mkey* m = lookup(h.imm);
    // A window bound to a QP (type 2) is invalidated only by a SEND_WITH_INV arriving on it.
    if (!m || m->kind != Mkey::Kind::kIndirect || !m->en_rinval || m->free ||
        (m->bound_qpn != prm::kMkeyQpnNone && m->bound_qpn != q.qpn))
      return fail(kSynLocProt, kSynRemOp);
    m->free = true;
    cqe_op = MLX5_CQE_RESP_SEND_INV;
    imm = h.imm;
  }
  recv_cqe(q, q.recv_counter, cqe_op, static_cast<uint32_t>(h.msg_len), imm,
           h.flags & kPktSolicited, 0);
  q.recv_active = false;
  respond(h.src_qpn, q.qpn, PktOp::kAck, h.msn, 0);
  ++q.epsn;
}

void Engine::req_read(QpCtx& q, const PktHdr& h) noexcept {
  uint8_t nak = 0;
  // The responder's resources in use: the new READs it is answering (a replay reuses its READ's
  // resource; a queued NAK holds none).
  const size_t in_use = static_cast<size_t>(std::count_if(
      q.reads.begin(), q.reads.end(), [](const PendingRead& r) { return !r.replay && !r.nak; }));
  if (q.max_dest_rd_atomic && in_use >= q.max_dest_rd_atomic) {
    // More outstanding READs than this responder's resources (max_dest_rd_atomic): a NAK
    // Invalid Request, REMOTE_INVAL_REQ_ERR at the requester (github.com/spdk/spdk report 2261:
    // the 9th outstanding READ against 8 resources, on a RoCE trace). A class C error: the
    // responder goes to error when the NAK leaves (responder_error).
    ++st_.read_depth_naks;
    nak = kSynRemInval;
  } else if (remote_use_unordered(q, h, h.rkey)) {
    nak = kSynRemAccess;
  } else if (h.msg_len > kMaxMsg) {
    nak = kSynRemInval;
  } else if (const XlateErr xe = check(h.rkey, h.raddr, h.msg_len, kRR, q.pd, q.qpn);
             xe != XlateErr::kOk) {
    refused(q, xe);
    nak = kSynRemAccess;
  }
  if (nak && q.reads.empty()) {
    req_nak(q, h, PktOp::kNak, nak, true);
    return responder_error(q, nak);
  }
  // Behind earlier READs, its response (or NAK) leaves after theirs (stream_reads).
  q.reads.push_back(PendingRead{h.msn, h.src_qpn, h.rkey, h.raddr, h.msg_len, 0, nak});
  ++q.epsn;
}

bool Engine::stream_reads() noexcept {
  bool work = false;
  for (auto& [qpn, qp] : qps_) {
    QpCtx& q = *qp;
    while (!q.reads.empty()) {
      PendingRead& r = q.reads.front();
      WireSlot* s = wire_->tx_slot(side_, WireClass::kResp);
      if (!s) return work;
      const uint32_t n = static_cast<uint32_t>(std::min<uint64_t>(path_mtu(q), r.len - r.off));
      PktHdr& h = s->h;
      h = PktHdr{};
      h.dst_qpn = r.src_qpn;
      h.src_qpn = q.qpn;
      h.msn = r.msn;
      if (r.nak) {  // a READ refused when it arrived, answered in its turn
        h.op = PktOp::kNak;
        h.syndrome = r.nak;
        h.flags = kPktFirst | kPktLast;
        q.reads.pop_front();
        wire_->tx_commit(side_, WireClass::kResp);
        ++st_.tx_packets;
        work = true;
        responder_error(q, h.syndrome);  // clears q.reads: the loop ends
        continue;
      }
      uint32_t got = 0;
      const XlateErr xe = walk(
          r.rkey, r.raddr + r.off, n, kRR,
          [&](uint8_t* p, uint64_t k) {
            std::memcpy(s->payload + got, p, k);
            got += static_cast<uint32_t>(k);
          },
          q.pd, q.qpn);
      const bool refuse = xe != XlateErr::kOk;
      if (refuse) {
        refused(q, xe);
        h.op = PktOp::kNak;
        h.syndrome = kSynRemAccess;
        h.flags = kPktFirst | kPktLast;
        q.reads.pop_front();
      } else {
        h.op = PktOp::kReadResp;
        h.offset = r.off;
        h.msg_len = r.len;
        h.len = n;
        h.flags = static_cast<uint8_t>((r.off == 0 ? kPktFirst : 0) |
                                       (r.off + n == r.len ? kPktLast : 0));
        r.off += n;
        st_.tx_bytes += n;
        if (r.off >= r.len) q.reads.pop_front();
      }
      wire_->tx_commit(side_, WireClass::kResp);
      ++st_.tx_packets;
      work = true;
      if (refuse) responder_error(q, kSynRemAccess);
    }
  }
  return work;
}

}  // namespace rdmx::emu::detail
