// The requester: doorbells, the send queue's poll and messages out to the link (transmit); the
// link sends each packet and owns its recovery (roce_link.hpp). Runs under Engine::mu_.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "datapath.hpp"
#include "roce_link.hpp"

namespace rdmx::emu::detail {

namespace {

PktOp pkt_op(uint8_t op) noexcept {
  switch (op) {
    case MLX5_OPCODE_RDMA_WRITE:
      return PktOp::kWrite;
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return PktOp::kWriteImm;
    case MLX5_OPCODE_RDMA_READ:
      return PktOp::kRead;
    case MLX5_OPCODE_SEND:
      return PktOp::kSend;
    case MLX5_OPCODE_SEND_IMM:
      return PktOp::kSendImm;
    default:
      return PktOp::kSendInv;
  }
}

}  // namespace

// ---- doorbells ----------------------------------------------------------------------------------
// A doorbell record that moved backwards, or claims more outstanding entries than the ring holds:
// reported; past-written always errors the QP (the device would read slots nobody wrote),
// backwards only when the checker is fatal.
void Engine::bad_doorbell(QpCtx& q, const char* ring, uint16_t v, uint16_t pi, uint32_t ahead,
                          uint32_t n, const char* what) noexcept {
  const bool backwards = static_cast<uint16_t>(pi - v) < 0x8000;
  char buf[160];
  if (backwards) {
    std::snprintf(buf, sizeof(buf), "%s doorbell record moved backwards: %u -> %u", ring, pi, v);
    report(&q, v, Rule::kDoorbellBackwards, buf);
  } else {
    std::snprintf(buf, sizeof(buf), "%s doorbell record %u claims %u %s a ring of %u", ring, v,
                  ahead, what, n);
    report(&q, v, Rule::kDoorbellPastWritten, buf);
  }
  if (q.state != QpState::kError && (!backwards || opt_.checker_fatal)) enter_error(q);
}

bool Engine::poll_rq_doorbell(QpCtx& q) noexcept {
  if (!q.rq_n) return false;
  const uint16_t v = static_cast<uint16_t>(load_dbr(q.rq_db));
  if (v == q.rq_db_seen) return false;
  const uint16_t fwd = static_cast<uint16_t>(v - static_cast<uint16_t>(q.rq_pi));
  q.rq_db_seen = v;
  if (q.rq_pi + fwd - q.rq_ci <= q.rq_n) {
    q.rq_pi += fwd;
    ++st_.doorbells;
    return true;
  }
  bad_doorbell(q, "RQ", v, static_cast<uint16_t>(q.rq_pi), q.rq_pi + fwd - q.rq_ci, q.rq_n,
               "receives ahead of");
  return true;
}

bool Engine::poll_sq(QpCtx& q) noexcept {
  bool work = false;
  const uint16_t v = static_cast<uint16_t>(load_dbr(q.sq_db));
  if (v != q.sq_db_seen) {
    const uint16_t fwd = static_cast<uint16_t>(v - static_cast<uint16_t>(q.sq_pi));
    const uint32_t oldest = q.inflight.empty() ? q.sq_ci : q.inflight.front().counter;
    q.sq_db_seen = v;
    work = true;
    if (q.sq_pi + fwd - oldest <= q.sq_n) {
      q.sq_pi += fwd;
      ++st_.doorbells;
    } else {
      bad_doorbell(q, "SQ", v, static_cast<uint16_t>(q.sq_pi), q.sq_pi + fwd - oldest, q.sq_n,
                   "WQEBBs outstanding in");
    }
  }
  if (opt_.mode == Mode::kSink) {
    sink_sq(q);
    return work;
  }
  if (q.state == QpState::kError) {
    work |= flush_new(q);
    return work;
  }
  if (q.state == QpState::kRtr || q.state == QpState::kRts) work |= poll_rq_doorbell(q);
  if (q.state != QpState::kRts) return work;
  while (!q.sq_halt && q.sq_ci != q.sq_pi) {
    if (!execute(q)) break;
    work = true;
  }
  work |= transmit(q);
  work |= emit_send(q);
  if (q.cq_overrun && q.state != QpState::kError) {
    enter_error(q);
    work = true;
  }
  return work;
}

void Engine::sink_sq(QpCtx& q) noexcept {
  while (q.sq_ci != q.sq_pi) {
    const uint8_t* ctrl = q.sq_buf + size_t{q.sq_ci & (q.sq_n - 1)} * 64;
    const uint8_t ds = ctrl[7] & prm::kCtrlDsMask;
    uint32_t nbb = ds ? prm::ds_to_wqebbs(ds) : 1;
    nbb = std::min(nbb, q.sq_pi - q.sq_ci);
    if (ctrl[11] & MLX5_WQE_CTRL_CQ_UPDATE) {
      prm::CqeFields f;
      f.opcode = MLX5_CQE_REQ;
      f.qpn = q.qpn;
      f.send_opcode = ctrl[3];
      f.wqe_counter = static_cast<uint16_t>(q.sq_ci);
      write_cqe(q, f);
    }
    q.sq_ci += nbb;
    ++st_.wqes;
  }
}

// ---- transmit -----------------------------------------------------------------------------------
// Sends the packets of every message from tx_next on that has not left yet, in order, as far as
// the request ring has room, READs within max_rd_atomic.
bool Engine::transmit(QpCtx& q) noexcept {
  bool work = false;
  while (q.tx_next < q.inflight.size()) {
    SendEntry& e = q.inflight[q.tx_next];
    if (e.st == SendEntry::St::kError) break;
    if (!e.remote || e.st != SendEntry::St::kWait || e.tx_done) {
      ++q.tx_next;
      continue;
    }
    prm::DecodedWqe& w = dw2_;
    if (prm::decode_wqe(q.sq_buf, q.sq_n, e.counter, w) != prm::DecodeError::kOk) {
      finish_entry(q, e, kSynLocQpOp);  // the SQ bytes changed under an in-flight WQE
      break;
    }
    if (e.opcode == MLX5_OPCODE_RDMA_READ && reads_at_limit(q)) break;
    const PktOp op = pkt_op(e.opcode);
    do {
      WireSlot* s = wire_->tx_slot(side_, WireClass::kReq);
      if (!s) return work;
      PktHdr& h = s->h;
      h = PktHdr{};
      h.op = op;
      h.dst_qpn = q.peer_qpn;
      h.src_qpn = q.qpn;
      h.msn = e.msn;
      h.imm = w.ctrl.imm;
      h.rkey = w.rkey;
      h.msg_len = e.len;
      h.offset = e.tx_off;
      h.raddr = w.raddr + e.tx_off;
      uint32_t n = 0;
      if (op != PktOp::kRead) {
        n = static_cast<uint32_t>(std::min<uint64_t>(path_mtu(q), e.len - e.tx_off));
        // Checked here, copied by the link into the packet it encodes (kPktInMemory).
        if (const uint8_t synd = gather(q, w, e.tx_off, nullptr, n)) {
          finish_entry(q, e, synd);
          return true;
        }
      }
      h.len = n;
      h.flags =
          static_cast<uint8_t>((e.tx_off == 0 ? kPktFirst : 0) |
                               (op == PktOp::kRead || e.tx_off + n == e.len ? kPktLast : 0) |
                               (w.ctrl.solicited() ? kPktSolicited : 0) | (n ? kPktInMemory : 0));
      wire_->tx_commit(side_, WireClass::kReq);
      ++st_.tx_packets;
      st_.tx_bytes += n;
      e.tx_off += n;
      work = true;
    } while (op != PktOp::kRead && e.tx_off < e.len);
    e.tx_done = true;
    e.sent_ns = opt_.mode == Mode::kThreaded ? now_ns() : 0;
    ++q.tx_next;
  }
  return work;
}

// The requester keeps at most max_rd_atomic READs outstanding (ibv_modify_qp(3) RTS
// max_rd_atomic): true when the next one must wait for a response.
bool Engine::reads_at_limit(const QpCtx& q) const noexcept {
  if (!q.max_rd_atomic) return false;
  uint32_t out = 0;
  for (size_t i = 0; i < q.tx_next; ++i) {
    const SendEntry& o = q.inflight[i];
    out +=
        o.remote && o.tx_done && o.st == SendEntry::St::kWait && o.opcode == MLX5_OPCODE_RDMA_READ;
  }
  return out >= q.max_rd_atomic;
}

// Gathers bytes [off, off+n) of the message of `w` into dst (inline data from the ring, or
// through the lkeys): 0 or LOCAL_PROT_ERR. A null dst only checks.
uint8_t Engine::gather(QpCtx& q, const prm::DecodedWqe& w, uint64_t off, uint8_t* dst,
                       uint32_t n) noexcept {
  uint64_t skip = off;
  uint32_t got = 0;
  if (w.has_inline) {
    if (dst)
      prm::copy_from_ring(q.sq_buf, q.sq_n, w.inline_ring_offset + static_cast<uint32_t>(skip), dst,
                          n);
    got = n;
  }
  for (uint32_t i = 0; i < w.n_sge && got < n; ++i) {
    const prm::KlmFields& g = w.sge[i];
    if (skip >= g.byte_count) {
      skip -= g.byte_count;
      continue;
    }
    const uint64_t take = std::min<uint64_t>(g.byte_count - skip, n - got);
    const XlateErr xe = walk(g.mkey, g.address + skip, take, kLR, [&](uint8_t* p, uint64_t k) {
      if (dst) std::memcpy(dst + got, p, k);
      got += static_cast<uint32_t>(k);
    });
    if (xe != XlateErr::kOk) return kSynLocProt;
    skip = 0;
  }
  return 0;
}

bool Engine::regather(uint32_t qpn, uint32_t msn, uint64_t off, uint8_t* dst, uint32_t n) noexcept {
  // The message's decoded WQE is kept from one packet to the next (rg_): valid until an entry
  // leaves the SQ (a completion, an error flush, a reset: inflight_gen_).
  if (rg_.gen != inflight_gen_ || rg_.qpn != qpn || rg_.msn != msn) {
    rg_.gen = ~uint64_t{0};
    QpCtx* q = find_qp(qpn);
    if (!q || q->state != QpState::kRts) return false;
    const SendEntry* found = nullptr;
    for (auto it = q->inflight.rbegin(); it != q->inflight.rend(); ++it)
      if (it->remote && it->msn == msn && it->st == SendEntry::St::kWait) {
        found = &*it;
        break;
      }
    if (!found ||
        prm::decode_wqe(q->sq_buf, q->sq_n, found->counter, rg_.w) != prm::DecodeError::kOk)
      return false;
    rg_.gen = inflight_gen_;
    rg_.qpn = qpn;
    rg_.msn = msn;
    rg_.len = found->len;
    rg_.q = q;
  }
  if (off + n > rg_.len || rg_.q->state != QpState::kRts) return false;
  return gather(*rg_.q, rg_.w, off, dst, n) == 0;
}

// ---- retry exceeded
// ------------------------------------------------------------------------------
void Engine::retry_exceeded(const QpCtx& q, const SendEntry& e) noexcept {
  ++st_.retry_exceeded;
  if (opt_.mode != Mode::kThreaded || !e.sent_ns) return;
  const uint64_t gap = gap_since(e.sent_ns);
  if (!gap || gap < q.ack_ns) return;
  // Not the peer's fault alone: this device was not polled (its thread starved or stopped) for
  // longer than an ACK timeout while the request waited. A NIC never starves; say so.
  ++st_.starved_retry_exc;
  std::fprintf(stderr,
               "%s: QP 0x%x: transport retry exceeded (timeout %.1f ms x %u retries); the emu "
               "thread did not run for %llu ms while the request waited\n",
               opt_.name.c_str(), q.qpn, static_cast<double>(q.ack_ns) / 1e6,
               static_cast<unsigned>(q.tm.retry_cnt),
               static_cast<unsigned long long>(gap / 1000000));
}

}  // namespace rdmx::emu::detail
