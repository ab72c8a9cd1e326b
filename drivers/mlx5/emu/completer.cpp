// The completer: responses in (ACK, NAK, RNR NAK, READ data), the send queue's completions in
// order, flushes on error, and the CQE writers both sides use. Runs under Engine::mu_.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "datapath.hpp"
#include "roce_link.hpp"

namespace rdmx::emu::detail {

// ---- responses ----------------------------------------------------------------------------------
bool Engine::rx_responses() noexcept {
  bool work = false;
  for (int i = 0; i < 256; ++i) {
    const WireSlot* s = wire_->rx_slot(side_, WireClass::kResp);
    if (!s) break;
    handle_response(*s);
    wire_->rx_pop(side_, WireClass::kResp);
    work = true;
  }
  return work;
}

// One response at the requester, from its link: the message it answers (by sequence), then by
// opcode. The link hands over each message's final verdict once (it waits out RNR NAKs and
// timeouts, and drops duplicates); READ data comes in order.
void Engine::handle_response(const WireSlot& s) noexcept {
  const PktHdr& h = s.h;
  ++st_.rx_packets;
  QpCtx* q = find_qp(h.dst_qpn);
  if (!q || q->state != QpState::kRts) return;
  SendEntry* e = nullptr;
  for (SendEntry& o : q->inflight) {
    if (o.remote && o.msn == h.msn) {
      e = &o;
      break;
    }
  }
  if (!e || e->st != SendEntry::St::kWait) return;  // late duplicate
  if (q->corrupt_resp) {
    q->corrupt_resp = false;
    finish_entry(*q, *e, kSynBadResp);
    return;
  }
  const bool is_read = e->opcode == MLX5_OPCODE_RDMA_READ;
  switch (h.op) {
    case PktOp::kAck:
      finish_entry(*q, *e, is_read ? kSynBadResp : 0);
      return;
    case PktOp::kReadResp:
      if (!is_read || h.msg_len != e->len || h.len > e->len) {
        finish_entry(*q, *e, kSynBadResp);
        return;
      }
      if (h.offset != e->rx_bytes) return;
      return read_response(*q, *e, s);
    case PktOp::kNak:
      finish_entry(*q, *e, h.syndrome ? h.syndrome : kSynRemOp);
      return;
    default:
      finish_entry(*q, *e, kSynBadResp);
      return;
  }
}

// The next in-order READ response packet of `e`: scattered through the READ's lkeys; the READ
// completes with its last byte.
void Engine::read_response(QpCtx& q, SendEntry& e, const WireSlot& s) noexcept {
  const PktHdr& h = s.h;
  prm::DecodedWqe& w = dw2_;
  if (prm::decode_wqe(q.sq_buf, q.sq_n, e.counter, w) != prm::DecodeError::kOk) {
    finish_entry(q, e, kSynLocQpOp);
    return;
  }
  uint64_t skip = h.offset;
  uint32_t done = 0;
  for (uint32_t i = 0; i < w.n_sge && done < h.len; ++i) {
    const prm::KlmFields& g = w.sge[i];
    if (skip >= g.byte_count) {
      skip -= g.byte_count;
      continue;
    }
    const uint64_t take = std::min<uint64_t>(g.byte_count - skip, h.len - done);
    const XlateErr xe = walk(g.mkey, g.address + skip, take, kLW, [&](uint8_t* p, uint64_t k) {
      std::memcpy(p, s.data() + done, k);
      done += static_cast<uint32_t>(k);
    });
    if (xe != XlateErr::kOk) {
      finish_entry(q, e, kSynLocProt);
      return;
    }
    skip = 0;
  }
  e.rx_bytes += h.len;
  if (e.rx_bytes >= e.len) finish_entry(q, e, 0);
}

// ---- send completions and flushes ---------------------------------------------------------------
void Engine::finish_entry(QpCtx& q, SendEntry& e, uint8_t synd) noexcept {
  if (synd == kSynRetry) [[unlikely]]
    retry_exceeded(q, e);
  e.st = synd ? SendEntry::St::kError : SendEntry::St::kDone;
  e.syndrome = synd;
  e.ready_poll = poll_count_ + q.cqe_delay;
  if (synd) q.sq_halt = true;  // nothing behind an error executes; it flushes
}

bool Engine::emit_send(QpCtx& q) noexcept {
  bool work = false;
  while (!q.inflight.empty()) {
    SendEntry& e = q.inflight.front();
    if (e.st == SendEntry::St::kWait || e.ready_poll > poll_count_) break;
    work = true;
    if (e.st == SendEntry::St::kError) {
      send_cqe(q, e, e.syndrome);
      q.inflight.pop_front();
      ++inflight_gen_;
      if (q.tx_next) --q.tx_next;
      enter_error(q);
      return true;
    }
    if (e.signaled) send_cqe(q, e, 0);
    q.inflight.pop_front();
    ++inflight_gen_;
    if (q.tx_next) --q.tx_next;
  }
  return work;
}

void Engine::enter_error(QpCtx& q) noexcept {
  q.state = QpState::kError;
  // A QP in error sends nothing more: its link neither retransmits nor times out (rxe_qp.c
  // rxe_qp_error stops the requester and its retransmission timer).
  wire_->link(side_)->stop(q.qpn);
  // Every outstanding WQE flushes, in order, one CQE each (signaled or not).
  for (const SendEntry& e : q.inflight) send_cqe(q, e, kSynFlush);
  q.inflight.clear();
  ++inflight_gen_;
  q.tx_next = 0;
  q.sq_halt = false;
  q.reads.clear();
  if (q.recv_active) {
    recv_cqe(q, q.recv_counter, 0, 0, 0, false, kSynFlush);
    q.recv_active = false;
  }
  flush_new(q);
}

bool Engine::flush_new(QpCtx& q) noexcept {
  bool work = false;
  while (q.sq_ci != q.sq_pi) {
    const uint8_t* ctrl = q.sq_buf + size_t{q.sq_ci & (q.sq_n - 1)} * 64;
    const uint8_t ds = ctrl[7] & prm::kCtrlDsMask;
    uint32_t nbb = ds ? prm::ds_to_wqebbs(ds) : 1;
    nbb = std::min(nbb, q.sq_pi - q.sq_ci);
    SendEntry e;
    e.counter = q.sq_ci;
    e.opcode = ctrl[3];
    e.seq = ++q.sq_seq;
    send_cqe(q, e, kSynFlush);
    q.sq_ci += nbb;
    work = true;
  }
  if (q.rq_n) {
    poll_rq_doorbell(q);
    while (q.rq_ci != q.rq_pi) {
      recv_cqe(q, q.rq_ci, 0, 0, 0, false, kSynFlush);
      ++q.rq_ci;
      work = true;
    }
  }
  return work;
}

// ---- CQE writers --------------------------------------------------------------------------------
bool Engine::write_cqe(QpCtx& q, const prm::CqeFields& f) noexcept {
  if (q.cq_overrun) {
    ++st_.cqes_dropped;
    return false;
  }
  // A CQ of cq_n entries holds cq_n - 1 CQEs: the spare entry. Verbs reports max_cqe = 2^n - 1
  // (Linux drivers/infiniband/hw/mlx5/main.c mlx5_ib_query_device) and rdma-core allocates
  // cqe + 1 entries for a CQ of cqe (providers/mlx5/verbs.c mlx5_create_cq: "The additional
  // entry is required for resize CQ"), so filling every entry is outside what a device
  // promises to hold; emu reports it as an overrun.
  const uint32_t sw_ci = load_dbr(q.cq_db) & prm::kCqDbrCiMask;
  if (((q.cq_pi - sw_ci) & prm::kCqDbrCiMask) >= q.cq_n - 1) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "CQ of %u CQEs full (%u usable, one spare): producer %u, software consumer "
                  "(CQ doorbell record) %u",
                  q.cq_n, q.cq_n - 1, q.cq_pi & prm::kCqDbrCiMask, sw_ci);
    report(&q, f.wqe_counter, Rule::kCqOverrun, buf);
    q.cq_overrun = true;  // the QP goes to error at the end of this poll (poll_sq)
    ++st_.cqes_dropped;
    return false;
  }
  auto* c = reinterpret_cast<mlx5_cqe64*>(q.cq_buf) + (q.cq_pi & (q.cq_n - 1));
  prm::write_cqe(c, f, (q.cq_pi & q.cq_n) ? 1 : 0);
  ++q.cq_pi;
  ++st_.cqes;
  if (f.opcode == MLX5_CQE_REQ_ERR || f.opcode == MLX5_CQE_RESP_ERR) ++st_.error_cqes;
  if (f.syndrome == kSynFlush && (f.opcode == MLX5_CQE_REQ_ERR || f.opcode == MLX5_CQE_RESP_ERR))
    ++st_.flushed;
  return true;
}

void Engine::send_cqe(QpCtx& q, const SendEntry& e, uint8_t synd) noexcept {
  prm::CqeFields f;
  f.qpn = q.qpn;
  f.wqe_counter = static_cast<uint16_t>(e.counter);
  f.send_opcode = e.opcode;
  if (synd) {
    f.opcode = MLX5_CQE_REQ_ERR;
    f.syndrome = synd;
  } else {
    f.opcode = MLX5_CQE_REQ;
    f.byte_cnt = e.byte_cnt;
  }
  const uint32_t pos = q.cq_pi & prm::kCqDbrCiMask;
  if (!write_cqe(q, f)) return;
  for (HotMkey& h : q.hot)
    if (!h.covered && h.seq <= e.seq) {
      h.covered = true;
      h.cqe_pos = pos;
    }
}

void Engine::recv_cqe(QpCtx& q, uint32_t counter, uint8_t cqe_op, uint32_t bytes, uint32_t imm,
                      bool solicited, uint8_t synd) noexcept {
  prm::CqeFields f;
  f.qpn = q.qpn;
  f.wqe_counter = static_cast<uint16_t>(counter);
  if (synd) {
    f.opcode = MLX5_CQE_RESP_ERR;
    f.syndrome = synd;
  } else {
    f.opcode = cqe_op;
    f.byte_cnt = bytes;
    f.imm_inval = imm;
    f.solicited = solicited;
  }
  write_cqe(q, f);
}

}  // namespace rdmx::emu::detail
