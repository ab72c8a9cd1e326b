// The device side of the emulated mlx5: mkey translation, the WQE interpreter, the RC-shaped
// transport over the wire (requester and responder), completions, flushes and the PRM checker.
// Everything here runs under Engine::mu_ (Engine::progress()).
#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "engine.hpp"
#include "roce_link.hpp"

namespace rdmx::emu::detail {

namespace {

constexpr uint8_t kLR = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ;
constexpr uint8_t kLW = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE;
constexpr uint8_t kRR = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
constexpr uint8_t kRW = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
constexpr uint8_t kAT = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC;
constexpr uint64_t kMaxMsg = 1ull << 31;

constexpr uint8_t kSynLocLen = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
constexpr uint8_t kSynLocQpOp = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
constexpr uint8_t kSynLocProt = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
constexpr uint8_t kSynFlush = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
constexpr uint8_t kSynMwBind = MLX5_CQE_SYNDROME_MW_BIND_ERR;
constexpr uint8_t kSynBadResp = MLX5_CQE_SYNDROME_BAD_RESP_ERR;
constexpr uint8_t kSynLocAccess = MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR;
constexpr uint8_t kSynRemInval = MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
constexpr uint8_t kSynRemAccess = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
constexpr uint8_t kSynRemOp = MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
constexpr uint8_t kSynRetry = MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
constexpr uint8_t kSynRnr = MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR;

inline uint32_t load_dbr(volatile uint32_t* p) noexcept {
  return ::rdmx::detail::bswap(__atomic_load_n(p, __ATOMIC_ACQUIRE));
}

// [iova, iova+len) inside [start, start+size), without 64-bit overflow.
inline bool in_range(uint64_t iova, uint64_t len, uint64_t start, uint64_t size) noexcept {
  if (iova < start) return false;
  const uint64_t off = iova - start;
  return off <= size && len <= size - off;
}

bool is_remote_op(uint8_t op) noexcept {
  switch (op) {
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
    case MLX5_OPCODE_RDMA_READ:
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
    case MLX5_OPCODE_SEND_INVAL:
      return true;
    default:
      return false;
  }
}

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

// ---- mkeys ------------------------------------------------------------------------------------
Mkey* Engine::lookup(uint32_t key) noexcept {
  const uint32_t idx = key >> 8;
  if (idx < 2 || idx >= mkeys_.size()) return nullptr;
  Mkey& m = mkeys_[idx];
  if (m.kind == Mkey::Kind::kNone || m.tag != static_cast<uint8_t>(key)) return nullptr;
  return &m;
}

template <class F>
XlateErr Engine::walk(uint32_t key, uint64_t iova, uint64_t len, uint8_t access, F&& on,
                      uint32_t pd, uint32_t qpn) noexcept {
  Mkey* m = lookup(key);
  if (!m) return XlateErr::kBadKey;
  // An mkey whose context names a QP (a type-2 memory window after its bind: the mkey context's
  // qpn, written by the bind UMR with the QPN mask bit) is usable only by requests arriving on
  // that QP; elsewhere the responder answers with a remote access error (IBTA 10.6.7.2.2, type
  // 2 windows are QP-associated; Linux rxe_mr.c / rxe_mw.c rxe_check_bind_mw and the
  // responder's "qp != mw->qp" check in rxe_resp.c check_rkey).
  if (qpn != kAnyQpn && m->bound_qpn != prm::kMkeyQpnNone && m->bound_qpn != qpn)
    return XlateErr::kQp;
  // The key must belong to the PD of the QP it arrives on, like a wrong key byte: Linux
  // drivers/infiniband/sw/rxe/rxe_mr.c lookup_mr() ("mr->ibmr.pd != &pd->ibpd" fails the
  // lookup; rxe_resp.c check_rkey() then NAKs with a remote access error) and ibv_alloc_pd(3).
  if (pd != kAnyPd && m->pd != pd) return XlateErr::kPd;
  if (m->free) return XlateErr::kState;
  if ((m->access & access) != access) return XlateErr::kAccess;
  if (!in_range(iova, len, m->start, m->len)) return XlateErr::kBounds;
  if (len == 0) return XlateErr::kOk;
  if (m->kind == Mkey::Kind::kDirect) {
    on(m->host + (iova - m->start), len);
    return XlateErr::kOk;
  }
  // Indirect: the rights were checked above, on the mkey the request names (the window), and
  // only there. Translation entries are translation, as on the NIC: see xlat().
  return xlat(*m, iova - m->start, len, on, 0);
}

// Each translation entry must resolve to a valid mkey of the window's PD whose registration holds
// the translated range, but it need not grant the access itself. That is what lets a
// remote-capable window (or the kernel's SG_GAPS MR over the PD's local_dma_lkey) point at
// local-only memory. See doc/guides/emu.md, "Indirect mkeys: rights on the window, bounds on the
// leaves". An entry may itself name an indirect mkey, translated the same way: the kernel's
// integrity MRs name their KLM pi_mr from their own KLM or repeat-block entry (Linux
// drivers/infiniband/hw/mlx5/wr.c set_sig_data_segment, data_key = pi_mr->ibmr.lkey). The HCA
// bounds the depth (cmd_hca_cap max_indirection, rdma-core mlx5_ifc.h); emu stops at
// kMaxIndirectLevels, which also ends an mkey that names itself.
namespace {
constexpr uint32_t kMaxIndirectLevels = 4;
}

template <class F>
XlateErr Engine::xlat(const Mkey& m, uint64_t off, uint64_t len, F& on, uint32_t depth) noexcept {
  if (!in_range(off, len, 0, m.xlat_bytes)) return XlateErr::kBounds;
  // A leaf: n bytes at address a of the mkey `key`, under the window's rules.
  auto leaf = [&](uint32_t leaf_key, uint64_t a, uint64_t n) -> XlateErr {
    Mkey* p = lookup(leaf_key);
    if (!p) return XlateErr::kBadKey;
    if (p->free) return XlateErr::kState;
    if (p->pd != m.pd) return XlateErr::kAccess;
    if (!in_range(a, n, p->start, p->len)) return XlateErr::kBounds;
    if (p->kind == Mkey::Kind::kDirect) {
      on(p->host + (a - p->start), n);
      return XlateErr::kOk;
    }
    if (depth + 2 > kMaxIndirectLevels) return XlateErr::kBadKey;
    return xlat(*p, a - p->start, n, on, depth + 1);
  };
  if (m.repeat) {
    while (len) {
      const uint64_t r = off / m.block, b = off % m.block;
      uint32_t i = 1;
      while (b >= m.prefix[i] + (m.klm[i].byte_count & 0xffff)) ++i;  // sum = block > b
      const Klm& e = m.klm[i];
      const uint64_t in_e = b - m.prefix[i];
      const uint64_t n = std::min<uint64_t>(len, (e.byte_count & 0xffff) - in_e);
      const uint64_t step = r * (e.byte_count >> 16) + in_e;  // < 2^32 * 2^16 + 2^16
      if (e.addr > UINT64_MAX - step) return XlateErr::kBounds;
      if (const XlateErr xe = leaf(e.mkey, e.addr + step, n); xe != XlateErr::kOk) return xe;
      off += n;
      len -= n;
    }
    return XlateErr::kOk;
  }
  size_t i = static_cast<size_t>(std::upper_bound(m.prefix.begin(), m.prefix.end(), off) -
                                 m.prefix.begin());
  i = i ? i - 1 : 0;
  while (len) {
    if (i >= m.klm.size()) return XlateErr::kBounds;
    const Klm& e = m.klm[i];
    if (e.byte_count == 0 || off >= m.prefix[i] + e.byte_count) {
      ++i;
      continue;
    }
    const uint64_t in_e = off - m.prefix[i];
    const uint64_t n = std::min<uint64_t>(len, e.byte_count - in_e);
    if (e.addr > UINT64_MAX - in_e) return XlateErr::kBounds;
    if (const XlateErr xe = leaf(e.mkey, e.addr + in_e, n); xe != XlateErr::kOk) return xe;
    off += n;
    len -= n;
    ++i;
  }
  return XlateErr::kOk;
}

XlateErr Engine::check(uint32_t key, uint64_t iova, uint64_t len, uint8_t access, uint32_t pd,
                       uint32_t qpn) noexcept {
  return walk(
      key, iova, len, access, [](uint8_t*, uint64_t) {}, pd, qpn);
}

// ---- checker helpers --------------------------------------------------------------------------
bool Engine::hot_live(QpCtx& q, HotMkey& h) noexcept {
  if (!h.covered) return true;
  // Ordered once software has consumed the CQE that covers the UMR.
  const uint32_t sw_ci = load_dbr(q.cq_db) & prm::kCqDbrCiMask;
  return ((sw_ci - h.cqe_pos - 1) & prm::kCqDbrCiMask) >= 0x800000u;
}

void Engine::check_hot_local(QpCtx& q, const prm::DecodedWqe& w, bool* fatal) noexcept {
  if (q.hot.empty()) return;
  auto one = [&](uint32_t lkey) {
    for (HotMkey& h : q.hot) {
      if (h.index != (lkey >> 8) || !hot_live(q, h)) continue;
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "%s uses mkey 0x%x changed by the UMR at WQE 0x%04x without "
                    "INITIATOR_SMALL (0x20) / STRONG_ORDERING (0x60) / SMALL_AND_FENCE (0x80) "
                    "fence (fm_ce_se 0x%02x)",
                    std::string(prm::wqe_opcode_name(w.ctrl.opcode)).c_str(), lkey, h.umr_wqe,
                    w.ctrl.fm_ce_se);
      report(&q, w.ctrl.wqe_index, Rule::kMissingFenceAfterUmr, buf);
      if (opt_.checker_fatal) *fatal = true;
      return;
    }
  };
  for (uint32_t i = 0; i < w.n_sge; ++i)
    if (w.sge[i].byte_count) one(w.sge[i].mkey);
  if (w.has_klm_ptr) one(w.klm_ptr.mkey);
}

// ---- completions ------------------------------------------------------------------------------
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
      if (q.tx_next) --q.tx_next;
      enter_error(q);
      return true;
    }
    if (e.signaled) send_cqe(q, e, 0);
    q.inflight.pop_front();
    if (q.tx_next) --q.tx_next;
  }
  return work;
}

void Engine::enter_error(QpCtx& q) noexcept {
  q.state = QpState::kError;
  // Every outstanding WQE flushes, in order, one CQE each (signaled or not).
  for (const SendEntry& e : q.inflight) send_cqe(q, e, kSynFlush);
  q.inflight.clear();
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

// ---- doorbells --------------------------------------------------------------------------------
bool Engine::poll_rq_doorbell(QpCtx& q) noexcept {
  if (!q.rq_n) return false;
  const uint16_t v = static_cast<uint16_t>(load_dbr(q.rq_db));
  if (v == q.rq_db_seen) return false;
  const uint16_t fwd = static_cast<uint16_t>(v - static_cast<uint16_t>(q.rq_pi));
  const uint16_t back = static_cast<uint16_t>(static_cast<uint16_t>(q.rq_pi) - v);
  q.rq_db_seen = v;
  if (q.rq_pi + fwd - q.rq_ci <= q.rq_n) {
    q.rq_pi += fwd;
    ++st_.doorbells;
    return true;
  }
  char buf[128];
  if (back < 0x8000) {
    std::snprintf(buf, sizeof(buf), "RQ doorbell record moved backwards: %u -> %u",
                  static_cast<uint16_t>(q.rq_pi), v);
    report(&q, v, Rule::kDoorbellBackwards, buf);
  } else {
    std::snprintf(buf, sizeof(buf), "RQ doorbell record %u is %u receives ahead of a ring of %u", v,
                  q.rq_pi + fwd - q.rq_ci, q.rq_n);
    report(&q, v, Rule::kDoorbellPastWritten, buf);
  }
  if (q.state != QpState::kError && (back >= 0x8000 || opt_.checker_fatal)) enter_error(q);
  return true;
}

bool Engine::poll_sq(QpCtx& q) noexcept {
  bool work = false;
  const uint16_t v = static_cast<uint16_t>(load_dbr(q.sq_db));
  if (v != q.sq_db_seen) {
    const uint16_t fwd = static_cast<uint16_t>(v - static_cast<uint16_t>(q.sq_pi));
    const uint16_t back = static_cast<uint16_t>(static_cast<uint16_t>(q.sq_pi) - v);
    const uint32_t oldest = q.inflight.empty() ? q.sq_ci : q.inflight.front().counter;
    q.sq_db_seen = v;
    work = true;
    if (q.sq_pi + fwd - oldest <= q.sq_n) {
      q.sq_pi += fwd;
      ++st_.doorbells;
    } else {
      char buf[160];
      if (back < 0x8000) {
        std::snprintf(buf, sizeof(buf), "SQ doorbell record moved backwards: %u -> %u",
                      static_cast<uint16_t>(q.sq_pi), v);
        report(&q, v, Rule::kDoorbellBackwards, buf);
      } else {
        std::snprintf(buf, sizeof(buf),
                      "SQ doorbell record %u claims %u WQEBBs outstanding in a ring of %u", v,
                      q.sq_pi + fwd - oldest, q.sq_n);
        report(&q, v, Rule::kDoorbellPastWritten, buf);
      }
      if (q.state != QpState::kError && (back >= 0x8000 || opt_.checker_fatal)) enter_error(q);
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
  work |= timeouts(q);
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

// ---- the WQE interpreter ----------------------------------------------------------------------
uint8_t Engine::check_local_sges(QpCtx& q, const prm::DecodedWqe& w, uint8_t access,
                                 uint64_t* total) noexcept {
  uint64_t t = 0;
  for (uint32_t i = 0; i < w.n_sge; ++i) {
    const prm::KlmFields& s = w.sge[i];
    if (s.byte_count == 0) continue;
    // Local keys too must be of the QP's PD (rxe_mr.c lookup_mr() with the QP's PD for
    // RXE_LOOKUP_LOCAL): another PD's lkey is a local protection error.
    if (check(s.mkey, s.address, s.byte_count, access, q.pd) != XlateErr::kOk) return kSynLocProt;
    t += s.byte_count;
  }
  if (w.has_inline) t += w.inline_len;
  *total = t;
  if (t > kMaxMsg) return kSynLocLen;
  return 0;
}

bool Engine::execute(QpCtx& q) noexcept {
  prm::DecodedWqe& w = dw_;
  const uint32_t at = q.sq_ci;
  const uint32_t avail = q.sq_pi - q.sq_ci;
  const prm::DecodeError de = prm::decode_wqe(q.sq_buf, q.sq_n, at, w);
  SendEntry e;
  e.counter = at;
  e.opcode = w.ctrl.opcode;
  e.signaled = w.ctrl.signaled();
  uint32_t nbb = 1;
  uint8_t synd = 0;
  char buf[192];
  const uint16_t idx = static_cast<uint16_t>(at);

  if (de != prm::DecodeError::kOk) {
    std::snprintf(buf, sizeof(buf), "%s: %s (opcode 0x%02x, ds %u)",
                  std::string(prm::decode_error_name(de)).c_str(),
                  "the device cannot execute these bytes", w.ctrl.opcode, w.ctrl.ds);
    report(&q, idx, Rule::kMalformedWqe, buf);
    nbb =
        (de == prm::DecodeError::kDsZero || de == prm::DecodeError::kDsBeyondRing) ? 1 : w.n_wqebb;
    synd = kSynLocQpOp;
  } else if (w.ctrl.wqe_index != idx) {
    std::snprintf(buf, sizeof(buf),
                  "slot %u holds wqe_index 0x%04x (opcode 0x%02x): the doorbell record covers "
                  "a slot with no newly written WQE",
                  at & (q.sq_n - 1), w.ctrl.wqe_index, w.ctrl.opcode);
    report(&q, idx, Rule::kDoorbellPastWritten, buf);
    synd = kSynLocQpOp;
  } else if (w.n_wqebb > avail) {
    std::snprintf(buf, sizeof(buf),
                  "WQE of %u WQEBBs but the doorbell record covers only %u of them", w.n_wqebb,
                  avail);
    report(&q, idx, Rule::kDoorbellPastWritten, buf);
    synd = kSynLocQpOp;
  } else if (uint32_t{w.ctrl.ds} * 16 > prof_->max_wqe_sz_sq) {
    // Longer than the device's max_wqe_sz_sq (HCA cap 0x290; rdma-core refuses to create such a
    // QP, verbs.c mlx5_calc_send_wqe): the device cannot execute it. The syndrome real parts
    // report is not public; emu reports LOCAL_QP_OP_ERR, as for every WQE it cannot execute.
    std::snprintf(buf, sizeof(buf), "WQE of %u bytes (ds %u), device max_wqe_sz_sq %u (%s)",
                  uint32_t{w.ctrl.ds} * 16, w.ctrl.ds, prof_->max_wqe_sz_sq, prof_->name);
    report(&q, idx, Rule::kWqeTooLarge, buf);
    nbb = w.n_wqebb;
    synd = kSynLocQpOp;
  } else if (w.ctrl.qpn != q.qpn) {
    // The ctrl segment names the QP: its first 8 bytes are what software writes to the UAR
    // doorbell register (rdma-core providers/mlx5/qp.c post_send_db, mlx5_write64 of the
    // ctrl's opmod_idx_opcode | qpn_ds; DPDK mlx5_common.h mlx5_doorbell_ring), which is how the
    // device learns which QP rang. Every producer writes its own QP number there (qp.c
    // mlx5_send_wr_*: qpn_ds = ds | qp_num << 8; Linux wr.c set_ctrl_seg). A WQE naming another
    // QP is a form none emits: refused like every WQE the device cannot execute.
    std::snprintf(buf, sizeof(buf),
                  "ctrl segment names QP 0x%06x, but it sits in (and the doorbell rang for) QP "
                  "0x%06x",
                  w.ctrl.qpn, q.qpn);
    report(&q, idx, Rule::kWqeQpnMismatch, buf);
    nbb = w.n_wqebb;
    synd = kSynLocQpOp;
  } else if (const uint8_t syn = check_reserved(q, w, q.sq_buf + size_t{at & (q.sq_n - 1)} * 64)) {
    nbb = w.n_wqebb;
    synd = syn;
  } else {
    nbb = w.n_wqebb;
    // Fences that wait for remote work to finish block the SQ here (the WQE is not consumed).
    const uint8_t fence = w.ctrl.fence();
    if (fence == prm::kFenceStrongOrdering || fence == prm::kFenceFence ||
        fence == prm::kFenceSmallAndFence) {
      for (const SendEntry& o : q.inflight) {
        if (o.st != SendEntry::St::kWait) continue;
        if (fence == prm::kFenceStrongOrdering || o.opcode == MLX5_OPCODE_RDMA_READ) return false;
      }
    }
    // INITIATOR_SMALL, STRONG_ORDERING and SMALL_AND_FENCE all start this WQE after every
    // earlier local WQE (UMR included) completed: earlier UMRs are ordered from here on.
    if (fence == prm::kFenceInitiatorSmall || fence == prm::kFenceStrongOrdering ||
        fence == prm::kFenceSmallAndFence)
      q.hot.clear();
    if (fence != 0 && fence != prm::kFenceInitiatorSmall && fence != prm::kFenceFence &&
        fence != prm::kFenceStrongOrdering && fence != prm::kFenceSmallAndFence) {
      std::snprintf(buf, sizeof(buf), "reserved fence mode 0x%02x", fence);
      report(&q, idx, Rule::kMalformedWqe, buf);
      synd = kSynLocQpOp;
    }
  }
  // Drop ordered hot entries (software consumed the covering CQE).
  std::erase_if(q.hot, [&](HotMkey& h) { return !hot_live(q, h); });

  e.n_wqebb = static_cast<uint16_t>(std::min(nbb, avail));
  e.seq = ++q.sq_seq;
  ++st_.wqes;
  if (!synd && q.fault_nth && e.seq == q.fault_nth) {
    q.fault_nth = 0;
    synd = q.fault_synd;
  }
  if (!synd) {
    bool fatal = false;
    check_hot_local(q, w, &fatal);
    check_invalidate_fence(q, w, &fatal);
    if (fatal) synd = kSynLocProt;
  }
  if (!synd) {
    switch (w.ctrl.opcode) {
      case MLX5_OPCODE_NOP:
        break;
      case MLX5_OPCODE_UMR:
        synd = exec_umr(q, w);
        break;
      case MLX5_OPCODE_LOCAL_INVAL:
        synd = exec_local_inval(q, w);
        break;
      default: {
        if (!is_remote_op(w.ctrl.opcode)) {
          synd = kSynLocQpOp;
          break;
        }
        const bool rd = w.ctrl.opcode == MLX5_OPCODE_RDMA_READ;
        uint64_t total = 0;
        synd = check_local_sges(q, w, rd ? kLW : kLR, &total);
        if (synd) break;
        e.remote = true;
        e.msn = q.next_msn++;
        e.len = total;
        e.byte_cnt = static_cast<uint32_t>(total);
        e.rnr_left = q.tm.rnr_retry;
        e.retry_left = q.tm.retry_cnt;
        e.st = SendEntry::St::kWait;
        if (unreachable_.load(std::memory_order_relaxed) || !q.connected ||
            !wire_->peer_open(side_)) {
          st_.retries += q.tm.retry_cnt;
          synd = kSynRetry;
        }
        break;
      }
    }
  }
  q.sq_ci += e.n_wqebb;
  q.inflight.push_back(e);
  SendEntry& pe = q.inflight.back();
  if (synd || !pe.remote) finish_entry(q, pe, synd);
  return true;
}

uint8_t Engine::exec_local_inval(QpCtx& q, const prm::DecodedWqe& w) noexcept {
  (void)q;
  Mkey* m = lookup(w.ctrl.imm);
  if (!m || m->kind != Mkey::Kind::kIndirect) return kSynLocProt;
  m->free = true;
  return 0;
}

// Reserved fields of the first WQEBB (bb0: the ctrl segment and, for a UMR, its UMR control
// segment; both always share the first WQEBB). Whether a device checks them is not public; these
// are forms no producer emits, refused as the device refuses every WQE it cannot execute
// (LOCAL_QP_OP_ERR):
//  - ctrl opmod (byte 0): 0 for every opcode emu executes (rdma-core providers/mlx5/qp.c and
//    Linux wr.c write a non-zero opmod only for atomics, TSO/ETH sends, MMO and signature
//    opcodes, none of which emu runs);
//  - ctrl bytes 9-10 (Linux include/linux/mlx5/qp.h mlx5_wqe_ctrl_seg dci_stream_channel_id):
//    meaningful on a DC initiator only, never written on an RC QP;
//  - UMR ctrl flags bits 2:0 and bytes 1-3, 20-47 (rdma-core mlx5dv.h mlx5_wqe_umr_ctrl_seg
//    rsvd0/rsvd1, which qp.c set_umr_control_seg memsets; DPDK mlx5_prm.h mlx5_wqe_umr_cseg);
//  - UMR ctrl bytes 16-19 without the TRANSLATION_OFFSET flag (with it they are the offset's
//    bits 47:16, Linux umr.c mlx5r_umr_update_offset).
uint8_t Engine::check_reserved(QpCtx& q, const prm::DecodedWqe& w, const uint8_t* bb0) noexcept {
  char buf[160];
  const char* what = nullptr;
  unsigned at = 0;
  const bool umr = w.ctrl.opcode == MLX5_OPCODE_UMR;
  constexpr uint8_t kUmrFlagsKnown = MLX5_WQE_UMR_CTRL_FLAG_INLINE | prm::kUmrFlagCheckMask |
                                     MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET |
                                     MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
  auto nonzero = [&](unsigned from, unsigned to) {  // first non-zero byte of bb0[from, to)
    for (unsigned i = from; i < to; ++i)
      if (bb0[i]) return at = i, true;
    return false;
  };
  if (w.ctrl.opmod)
    what = "ctrl opmod", at = 0;
  else if (nonzero(9, 11))
    what = "ctrl bytes 9-10 (dci_stream_channel_id, DC initiators only)";
  else if (umr && (bb0[16] & ~kUmrFlagsKnown))
    what = "UMR ctrl flags bits 2:0", at = 16;
  else if (umr && nonzero(17, 20))
    what = "UMR ctrl bytes 1-3";
  else if (umr && !(bb0[16] & MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET) && nonzero(32, 36))
    what = "UMR ctrl bytes 16-19 (translation offset 47:16) without the TRANSLATION_OFFSET flag";
  else if (umr && nonzero(36, 64))
    what = "UMR ctrl bytes 20-47";
  if (!what) return 0;
  std::snprintf(buf, sizeof(buf), "reserved field set: %s (WQE byte %u = 0x%02x, opcode 0x%02x)",
                what, at, bb0[at], w.ctrl.opcode);
  report(&q, w.ctrl.wqe_index, Rule::kReservedField, buf);
  return kSynLocQpOp;
}

uint64_t Engine::umr_xlt_offset(const QpCtx& q, const prm::DecodedWqe& w) const noexcept {
  if (!(w.umr.flags & MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET)) return 0;
  const uint8_t* b = q.sq_buf + size_t{w.ctrl.wqe_index & (q.sq_n - 1u)} * 64 + 32;
  const uint64_t hi = uint64_t{b[0]} << 24 | uint64_t{b[1]} << 16 | uint64_t{b[2]} << 8 | b[3];
  return hi << 16 | w.umr.translation_offset;
}

// A WQE that gathers from (WRITE, SEND) or scatters into (READ) an mkey keeps using it until it
// completes: a gather is read again on a retransmission until the peer acknowledged it, a READ's
// data lands when its responses arrive. An invalidate of that mkey must therefore wait for it:
// STRONG_ORDERING (0x60) behind a gather, FENCE (0x40) / SMALL_AND_FENCE (0x80) / 0x60 behind a
// READ (the fence modes of Linux include/linux/mlx5/qp.h MLX5_FENCE_MODE_*; kernels before the
// wr.c split gave a fenced LOCAL_INV strong ordering, qp.c get_fence). emu's fences hold the
// invalidate until what they wait for completed, so a user still outstanding here means the
// invalidate's fence was too weak. Without the report the fault shows on the user: its gather
// or scatter fails with LOCAL_PROT_ERR after the invalidate freed the mkey, and nothing names
// the WQE that lacked the fence.
void Engine::check_invalidate_fence(QpCtx& q, const prm::DecodedWqe& w, bool* fatal) noexcept {
  const bool inval = w.ctrl.opcode == MLX5_OPCODE_LOCAL_INVAL ||
                     (w.ctrl.opcode == MLX5_OPCODE_UMR &&
                      (w.umr.mkey_mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE) && w.mkc.free);
  if (!inval || q.inflight.empty()) return;
  const uint32_t idx = w.ctrl.imm >> 8;
  for (const SendEntry& o : q.inflight) {
    if (!o.remote || o.st != SendEntry::St::kWait) continue;
    prm::DecodedWqe& u = dw2_;
    if (prm::decode_wqe(q.sq_buf, q.sq_n, o.counter, u) != prm::DecodeError::kOk) continue;
    for (uint32_t i = 0; i < u.n_sge; ++i) {
      if (!u.sge[i].byte_count || (u.sge[i].mkey >> 8) != idx) continue;
      const bool rd = o.opcode == MLX5_OPCODE_RDMA_READ;
      char buf[256];
      std::snprintf(buf, sizeof(buf),
                    "%s invalidates mkey 0x%x while the %s at WQE 0x%04x, not completed, still %s "
                    "it: the invalidate needs %s (fm_ce_se 0x%02x)",
                    std::string(prm::wqe_opcode_name(w.ctrl.opcode)).c_str(), w.ctrl.imm,
                    std::string(prm::wqe_opcode_name(o.opcode)).c_str(),
                    static_cast<uint16_t>(o.counter), rd ? "scatters into" : "gathers from",
                    rd ? "FENCE (0x40), STRONG_ORDERING (0x60) or SMALL_AND_FENCE (0x80)"
                       : "STRONG_ORDERING (0x60)",
                    w.ctrl.fm_ce_se);
      report(&q, w.ctrl.wqe_index, Rule::kMissingFenceBeforeInvalidate, buf);
      if (opt_.checker_fatal) *fatal = true;
      return;
    }
  }
}

// A UMR WQE in four steps, each refusing with the device's syndrome before anything changes:
// the target mkey and the control segment's rules, the new translation entries, the scalar
// fields; then the commit.
uint8_t Engine::exec_umr(QpCtx& q, const prm::DecodedWqe& w) noexcept {
  const uint32_t idx = w.ctrl.imm >> 8;
  if (idx < 2 || idx >= mkeys_.size() || mkeys_[idx].kind != Mkey::Kind::kIndirect ||
      !mkeys_[idx].umr_en)
    return kSynLocProt;
  Mkey& m = mkeys_[idx];
  if (const uint8_t syn = umr_check_ctrl(q, w, m)) return syn;
  const Klm* src = nullptr;
  if (const uint8_t syn = umr_read_entries(q, w, m, src)) return syn;
  if (const uint8_t syn = umr_check_scalars(q, w, m)) return syn;
  // A UMR that leaves a memory window valid binds it, whatever its flags ask for: the bind rules
  // apply unconditionally, as a software device applies them (Linux rxe_mw.c rxe_check_bind_mw
  // runs on every bind); one that frees it is an invalidation.
  const bool leaves_valid =
      (w.umr.mkey_mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE) ? !w.mkc.free : !m.free;
  if (m.mw && leaves_valid)
    if (const uint8_t syn = umr_check_bind(q, w, m, src)) return syn;
  return umr_commit(q, w, m, src);
}

// The bind of a type-2 memory window (a UMR that gives an alloc_mw mkey a translation), held to
// the rules the verbs put on binds and that a software device applies in the same place (Linux
// drivers/infiniband/sw/rxe/rxe_mw.c rxe_check_bind_mw, which completes such a bind with
// MW_BIND_ERR): the window is bound to the QP that posts the bind (QPN mask bit, mkey context
// qpn = this QP); its one translation entry names a direct MR of the window's PD registered with
// MW_BIND (IBV_ACCESS_MW_BIND) whose range holds the bound bytes; remote write or atomic rights
// need the MR's local write (ibv_bind_mw(3)); every bind writes the 8-bit key (ibv_bind_mw(3):
// the consumer gives the window a new rkey with each bind, ibv_inc_rkey).
//
// Two rules hold whatever the UMR's flags ask for (rxe_check_bind_mw checks them on every bind):
// a type-2 window is bound from the free state only (IBTA o10-37.2.30), with or without the
// CHECK_FREE flag, and a bind carries its translation (o10-37.2.40: a type-2 window is not bound
// to no MR; without an entry it would keep its old translation).
uint8_t Engine::umr_check_bind(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m,
                               const Klm* ep) noexcept {
  const uint64_t mask = w.umr.mkey_mask;
  const prm::MkcFields& c = w.mkc;
  const Klm e = ep ? *ep : Klm{};
  const Mkey* mr = lookup(e.mkey);
  const uint8_t acc = (mask & (MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE |
                               MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC))
                          ? static_cast<uint8_t>(c.access & (kRW | kAT))
                          : uint8_t{0};
  const uint64_t len = (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN) ? c.len : m.len;
  const char* why = nullptr;
  if (!(mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN) || c.qpn != q.qpn)
    why = "a type-2 window must be bound to the QP that posts the bind";
  else if (!(mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY))
    why = "a bind must write the window's key (the KEY mask bit)";
  else if (!m.free)
    why = "the window is bound: a type-2 window is bound from the free state only";
  else if (!ep || w.umr.klm_octowords != 4 || e.byte_count == 0 || e.byte_count != len)
    why = "a bind carries one translation entry of the window's length";
  else if (!mr || mr->kind != Mkey::Kind::kDirect || mr->free || mr->pd != m.pd)
    why = "the entry names no valid MR of the window's PD";
  else if (!mr->mw_bind)
    why = "the MR was registered without MW_BIND";
  else if (acc && !(mr->access & kLW))
    why = "remote write/atomic rights over an MR without local write";
  else if (!in_range(e.addr, e.byte_count, mr->start, mr->len))
    why = "the bound range is not inside the MR";
  else if (q.pd != m.pd)
    why = "the QP is not in the window's PD";
  if (!why) return 0;
  char buf[224];
  std::snprintf(buf, sizeof(buf),
                "bind of memory window 0x%x: %s (MR 0x%x, 0x%" PRIx64 "+%u, QP 0x%x)", w.ctrl.imm,
                why, e.mkey, e.addr, e.byte_count, q.qpn);
  report(&q, w.ctrl.wqe_index, Rule::kMwBindRefused, buf);
  return kSynMwBind;
}

// The mkey mask against what the device implements and allows, and the free-state and QP checks
// of the UMR control segment's flags.
uint8_t Engine::umr_check_ctrl(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m) noexcept {
  char buf[192];
  const uint16_t idx16 = w.ctrl.wqe_index;
  const prm::UmrCtrlFields& u = w.umr;
  const uint64_t mask = u.mkey_mask;
  // Bit 4 has no meaning in any mask definition (Linux device.h MLX5_MKEY_MASK_*, rdma-core
  // mlx5dv.h), but DPDK's regex driver ORs the TRANSLATION_OFFSET control flag (1 << 4) into its
  // mask (drivers/regex/mlx5/mlx5_regex_fastpath.c complete_umr_wqe) and ships against real
  // devices: emu accepts and ignores it.
  constexpr uint64_t kMaskDpdkRegexBit4 = MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET;
  const uint64_t known = prm::kMaskKnown | kMaskDpdkRegexBit4;
  if (mask & ~known) {
    std::snprintf(buf, sizeof(buf),
                  "mkey_mask 0x%016" PRIx64 " has bits 0x%016" PRIx64
                  " the device does not implement",
                  mask, mask & ~known);
    report(&q, idx16, Rule::kUnknownMaskBits, buf);
    return kSynLocQpOp;
  }
  if ((mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC) && prof_->umr_modify_atomic_disabled) {
    // HCA cap umr_modify_atomic_disabled: the kernel refuses such a UMR before posting it (Linux
    // drivers/infiniband/hw/mlx5/umr.c umr_check_mkey_mask, -EPERM) because the device fails it
    // (commit e5366d309a77). Syndrome not public: LOCAL_QP_OP_ERR, as for unknown mask bits.
    std::snprintf(buf, sizeof(buf),
                  "mkey_mask sets the atomic bit (21) on a device with umr_modify_atomic_disabled "
                  "(%s)",
                  prof_->name);
    report(&q, idx16, Rule::kUmrMaskForbidden, buf);
    return kSynLocQpOp;
  }
  // The translation is copied in units of 64 bytes (four 16-byte entries): every producer pads
  // its list and aligns its offset to them (rdma-core providers/mlx5/qp.c umr_sg_list_create /
  // mlx5_send_wr_set_mkey_layout, klm_octowords = align(bytes, 64) / 16; Linux umr.c
  // mlx5r_umr_update_xlt "UMR copies MTTs in units of MLX5_UMR_FLEX_ALIGNMENT bytes, so we need
  // to align the offset and length accordingly", mlx5r_umr_get_xlt_octo; DPDK
  // mlx5_regex_fastpath.c RTE_ALIGN(klm_size, 4)).
  if (u.klm_octowords % 4) {
    std::snprintf(buf, sizeof(buf),
                  "klm_octowords %u is not a multiple of 4: the translation is not padded to 64 "
                  "bytes",
                  u.klm_octowords);
    report(&q, idx16, Rule::kKlmListNotPadded, buf);
    return kSynLocQpOp;
  }
  if (const uint64_t off = umr_xlt_offset(q, w); off % 4) {
    std::snprintf(
        buf, sizeof(buf),
        "translation offset %" PRIu64 " octowords is not 64-byte aligned (a multiple of 4)", off);
    report(&q, idx16, Rule::kXltOffsetUnaligned, buf);
    return kSynLocQpOp;
  }
  const uint8_t chk = u.flags & prm::kUmrFlagCheckMask;
  if (chk == prm::kUmrFlagCheckMask) {
    report(&q, idx16, Rule::kMalformedWqe, "UMR free-state check 0x60 is reserved");
    return kSynLocQpOp;
  }
  if (chk == prm::kUmrFlagFailIfNotFree && !m.free) {
    std::snprintf(buf, sizeof(buf), "UMR with check-free (0x20) on mkey 0x%x, which is valid",
                  w.ctrl.imm);
    report(&q, idx16, Rule::kUmrNotFree, buf);
    return kSynMwBind;
  }
  if (chk == prm::kUmrFlagFailIfFree && m.free) {
    std::snprintf(buf, sizeof(buf), "UMR with fail-if-free (0x40) on mkey 0x%x, which is free",
                  w.ctrl.imm);
    report(&q, idx16, Rule::kUmrFree, buf);
    return kSynMwBind;
  }
  if ((u.flags & MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN) && m.bound_qpn != prm::kMkeyQpnNone &&
      m.bound_qpn != q.qpn)
    return kSynMwBind;
  return 0;
}

// The new translation entries (inline, or behind the pointer-mode lkey) into scratch_; `src`
// stays null when the UMR writes none.
uint8_t Engine::umr_read_entries(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m,
                                 const Klm*& src) noexcept {
  char buf[192];
  const uint16_t idx16 = w.ctrl.wqe_index;
  const prm::UmrCtrlFields& u = w.umr;
  const uint32_t n_oct = u.klm_octowords;
  if (!n_oct) return 0;
  const uint64_t off = umr_xlt_offset(q, w);
  if (u.inline_list() && n_oct > prm::align4(opt_.max_inline_klm)) {
    std::snprintf(buf, sizeof(buf), "inline UMR with %u KLM octowords, device limit %u", n_oct,
                  prm::align4(opt_.max_inline_klm));
    report(&q, idx16, Rule::kMalformedWqe, buf);
    return kSynLocQpOp;
  }
  if (off + n_oct > m.capacity) {
    std::snprintf(buf, sizeof(buf),
                  "UMR writes translation entries %" PRIu64 "..%" PRIu64
                  " into mkey 0x%x that holds %u",
                  off, off + n_oct - 1, w.ctrl.imm, m.capacity);
    report(&q, idx16, Rule::kTooManyEntries, buf);
    return kSynMwBind;
  }
  scratch_.resize(size_t{n_oct} * sizeof(Klm));
  Klm* tmp = reinterpret_cast<Klm*>(scratch_.data());
  if (u.inline_list()) {
    for (uint32_t i = 0; i < n_oct; ++i)
      tmp[i] = Klm{w.klm[i].byte_count, w.klm[i].mkey, w.klm[i].address};
  } else {
    // Pointer mode: the KLM array lives in host memory behind an lkey (read with LR).
    if (w.klm_ptr.address % prm::kKlmPtrAlign) {
      std::snprintf(buf, sizeof(buf),
                    "pointer-mode KLM array at 0x%" PRIx64 " is not 2 KiB aligned",
                    w.klm_ptr.address);
      report(&q, idx16, Rule::kKlmPtrAlign, buf);
      if (opt_.checker_fatal) return kSynLocQpOp;
    }
    std::vector<uint8_t> raw(size_t{n_oct} * 16);
    size_t pos = 0;
    const XlateErr xe =
        walk(w.klm_ptr.mkey, w.klm_ptr.address, raw.size(), kLR, [&](uint8_t* p, uint64_t n) {
          std::memcpy(raw.data() + pos, p, n);
          pos += n;
        });
    if (xe != XlateErr::kOk) return kSynLocProt;
    for (uint32_t i = 0; i < n_oct; ++i) {
      uint32_t bc, key;
      uint64_t addr;
      std::memcpy(&bc, raw.data() + i * 16, 4);
      std::memcpy(&key, raw.data() + i * 16 + 4, 4);
      std::memcpy(&addr, raw.data() + i * 16 + 8, 8);
      tmp[i] =
          Klm{::rdmx::detail::bswap(bc), ::rdmx::detail::bswap(key), ::rdmx::detail::bswap(addr)};
    }
  }
  // A repeat-block header is the mkey's first translation entry (rdma-core qp.c
  // umr_strided_seg_create writes it at offset 0 with no TRANSLATION_OFFSET; Linux wr.c
  // set_sig_data_segment likewise); the entries that follow it are repeat entries. A header
  // written under an offset, or an offset into a repeat block, is a form no producer emits (the
  // header would be read as a KLM naming mkey 0x400).
  if (off != 0 && (tmp[0].mkey == prm::kRepeatBlockOp || m.repeat)) {
    std::snprintf(buf, sizeof(buf), "%s at translation offset %" PRIu64 " of mkey 0x%x",
                  tmp[0].mkey == prm::kRepeatBlockOp ? "repeat-block header (op 0x400)"
                                                     : "entries written into a repeat block",
                  off, w.ctrl.imm);
    report(&q, idx16, Rule::kRepeatHeaderNotFirst, buf);
    return kSynLocQpOp;
  }
  if (off == 0 && tmp[0].mkey == prm::kRepeatBlockOp) {
    if (const uint8_t syn = umr_check_repeat(q, w, tmp, n_oct)) return syn;
    src = tmp;
    return 0;
  }
  for (uint32_t i = 0; i < n_oct; ++i) {
    if (tmp[i].byte_count > prm::kMaxKlmBytes) {
      std::snprintf(buf, sizeof(buf), "KLM %u byte_count %u exceeds 2 GiB", i, tmp[i].byte_count);
      report(&q, idx16, Rule::kMalformedWqe, buf);
      return kSynLocQpOp;
    }
  }
  src = tmp;
  return 0;
}

// A repeat block (mlx5dv_wr_mr_interleaved; rdma-core providers/mlx5/qp.c
// umr_strided_seg_create): header {BE32 bytes per block, BE32 op 0x400, BE32 repeat count, BE16
// 0, BE16 entries}, then per entry {BE16 stride, BE16 bytes, BE32 mkey, BE64 address}, read here
// through the KLM decoding of each 16 bytes. Refused as malformed: no entry, entries beyond the
// UMR's octowords, a non-zero reserved field, a zero repeat count, entry bytes that do not sum
// to the header's block size, or a block of zero bytes.
uint8_t Engine::umr_check_repeat(QpCtx& q, const prm::DecodedWqe& w, const Klm* tmp,
                                 uint32_t n_oct) noexcept {
  char buf[192];
  const uint32_t n = static_cast<uint32_t>(tmp[0].addr & 0xffff);
  const uint32_t rsvd = static_cast<uint32_t>((tmp[0].addr >> 16) & 0xffff);
  const uint32_t repeat_count = static_cast<uint32_t>(tmp[0].addr >> 32);
  uint64_t sum = 0;
  for (uint32_t i = 1; i <= n && i < n_oct; ++i) sum += tmp[i].byte_count & 0xffff;
  const char* why = nullptr;
  if (n == 0)
    why = "no entries";
  else if (n + 1 > n_oct)
    why = "more entries than the UMR carries";
  else if (rsvd)
    why = "reserved field not zero";
  else if (repeat_count == 0)
    why = "repeat count 0";
  else if (sum != tmp[0].byte_count || sum == 0)
    why = "entry bytes do not sum to the block size";
  if (!why) {
    // Each entry's stride is at least its byte count: rdma-core writes stride = bytes_count +
    // bytes_skip (qp.c umr_strided_seg_create), the kernel stride = bcount (wr.c
    // set_sig_data_segment). A shorter stride makes repetitions overlap, which no producer asks
    // for.
    for (uint32_t i = 1; i <= n; ++i) {
      const uint32_t stride = tmp[i].byte_count >> 16, bytes = tmp[i].byte_count & 0xffff;
      if (stride >= bytes) continue;
      std::snprintf(buf, sizeof(buf), "repeat-block entry %u: stride %u below its byte count %u",
                    i - 1, stride, bytes);
      report(&q, w.ctrl.wqe_index, Rule::kRepeatStride, buf);
      return kSynLocQpOp;
    }
    return 0;
  }
  std::snprintf(buf, sizeof(buf),
                "repeat block: %s (entries %u, octowords %u, block %u, sum %" PRIu64 ", repeat %u)",
                why, n, n_oct, tmp[0].byte_count, sum, repeat_count);
  report(&q, w.ctrl.wqe_index, Rule::kMalformedWqe, buf);
  return kSynLocQpOp;
}

// The mkey context fields the mask selects, validated before anything changes.
uint8_t Engine::umr_check_scalars(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m) noexcept {
  char buf[192];
  const uint64_t mask = w.umr.mkey_mask;
  const prm::MkcFields& c = w.mkc;
  const uint64_t new_start =
      (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR) ? c.start_addr : m.start;
  const uint64_t new_len = (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN) ? c.len : m.len;
  if (new_len && new_start > UINT64_MAX - (new_len - 1)) {
    std::snprintf(buf, sizeof(buf),
                  "translation overflow: start 0x%" PRIx64 " + len 0x%" PRIx64 " wraps 2^64",
                  new_start, new_len);
    report(&q, w.ctrl.wqe_index, Rule::kMalformedWqe, buf);
    return kSynLocQpOp;
  }
  if ((mask & prm::kMaskPd) && (c.flags_pd & prm::kMkcPdMask) != m.pd) return kSynLocProt;
  return 0;
}

// Applies a checked UMR to `m`: the masked mkey context fields, then the translation entries
// `src` (null: none written).
uint8_t Engine::umr_commit(QpCtx& q, const prm::DecodedWqe& w, Mkey& m, const Klm* src) noexcept {
  const prm::UmrCtrlFields& u = w.umr;
  const prm::MkcFields& c = w.mkc;
  const uint64_t mask = u.mkey_mask;
  const uint32_t n_oct = u.klm_octowords;
  // Below the mkey's capacity when entries are written (umr_read_entries checked it).
  const uint32_t off = static_cast<uint32_t>(umr_xlt_offset(q, w));
  if (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY) m.tag = c.key;
  if (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE) m.free = c.free;
  struct {
    uint64_t bit;
    uint8_t acc;
  } const amap[] = {{prm::kMaskLocalRead, kLR},
                    {MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE, kLW},
                    {MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ, kRR},
                    {MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE, kRW},
                    {MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC, kAT}};
  for (const auto& a : amap)
    if (mask & a.bit) m.access = static_cast<uint8_t>((m.access & ~a.acc) | (c.access & a.acc));
  if (mask & prm::kMaskEnRinval) m.en_rinval = (c.flags_pd & prm::kMkcFlagEnRinval) != 0;
  if (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN) m.bound_qpn = c.qpn;
  if (mask & prm::kMaskPageSize) m.log_page_size = c.log_page_size;
  if (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR) m.start = c.start_addr;
  if (mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN) m.len = c.len;
  if (src) {
    if (const uint8_t syn = umr_set_entries(q, w, m, src, off, n_oct)) return syn;
  } else if ((mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN) && n_oct == 0 && !m.free) {
    // A map of zero entries (rdma-core num_sges = 0): an enabled, empty translation.
    m.klm.clear();
    m.prefix.clear();
    m.xlat_bytes = 0;
    m.repeat = false;
  }
  ++st_.umrs;
  // The mkey changed: later users in this SQ need a fence until the UMR is ordered.
  const uint32_t idx = w.ctrl.imm >> 8;
  std::erase_if(q.hot, [&](const HotMkey& h) { return h.index == idx; });
  q.hot.push_back(HotMkey{idx, w.ctrl.wqe_index, q.sq_seq, false, 0});
  return 0;
}

// Writes n_oct entries at `off` (the whole list when the UMR has no translation offset) and
// recomputes the prefix sums the translation walks.
uint8_t Engine::umr_set_entries(QpCtx& q, const prm::DecodedWqe& w, Mkey& m, const Klm* src,
                                uint32_t off, uint32_t n_oct) noexcept {
  if (off == 0 && !(w.umr.flags & MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET)) {
    m.klm.assign(src, src + n_oct);
  } else {
    if (m.klm.size() < off + n_oct) m.klm.resize(off + n_oct);
    std::copy(src, src + n_oct, m.klm.begin() + off);
  }
  m.prefix.resize(m.klm.size());
  uint64_t acc = 0;
  uint32_t n_real = 0;
  m.repeat = off == 0 && !m.klm.empty() && m.klm[0].mkey == prm::kRepeatBlockOp;
  if (m.repeat) {  // checked by umr_check_repeat: the header takes a slot, as on the device
    const uint32_t n_rep = static_cast<uint32_t>(m.klm[0].addr & 0xffff);
    m.block = m.klm[0].byte_count;
    for (uint32_t i = 1; i <= n_rep; ++i) {
      m.prefix[i] = acc;
      acc += m.klm[i].byte_count & 0xffff;
    }
    n_real = n_rep + 1;
    m.xlat_bytes = m.block * (m.klm[0].addr >> 32);
  } else {
    for (size_t i = 0; i < m.klm.size(); ++i) {
      m.prefix[i] = acc;
      acc += m.klm[i].byte_count;
      n_real += m.klm[i].byte_count ? 1 : 0;
    }
    m.xlat_bytes = acc;
  }
  if (n_real > m.max_entries) {
    char buf[160];
    std::snprintf(buf, sizeof(buf),
                  "mkey 0x%x now holds %u translation entries; it was created for %u", w.ctrl.imm,
                  n_real, m.max_entries);
    report(&q, w.ctrl.wqe_index, Rule::kTooManyEntries, buf);
    if (opt_.checker_fatal) {
      m.free = true;
      return kSynMwBind;
    }
  }
  return 0;
}

// ---- requester: transmit, retries, timeouts ---------------------------------------------------
void Engine::go_back(QpCtx& q, size_t from) noexcept {
  for (size_t i = from; i < q.inflight.size(); ++i) {
    SendEntry& e = q.inflight[i];
    if (!e.remote || e.st != SendEntry::St::kWait) continue;
    e.tx_done = false;
    e.tx_off = 0;
    e.rx_bytes = 0;
  }
  q.tx_next = std::min(q.tx_next, from);
  ++q.gen;
  ++st_.retries;
}

bool Engine::transmit(QpCtx& q) noexcept {
  if (q.resend_at_ns) {
    if (now_ns() < q.resend_at_ns) return false;
    q.resend_at_ns = 0;
  }
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
    if (e.opcode == MLX5_OPCODE_RDMA_READ && q.max_rd_atomic) {
      // The requester keeps at most max_rd_atomic READs outstanding (ibv_modify_qp(3) RTS
      // max_rd_atomic): the next one waits for a response.
      uint32_t out = 0;
      for (size_t i = 0; i < q.tx_next; ++i) {
        const SendEntry& o = q.inflight[i];
        out += o.remote && o.tx_done && o.st == SendEntry::St::kWait &&
               o.opcode == MLX5_OPCODE_RDMA_READ;
      }
      if (out >= q.max_rd_atomic) break;
    }
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
      h.gen = q.gen;
      h.imm = w.ctrl.imm;
      h.rkey = w.rkey;
      h.msg_len = e.len;
      h.offset = e.tx_off;
      h.raddr = w.raddr + e.tx_off;
      uint32_t n = 0;
      if (op != PktOp::kRead) {
        n = static_cast<uint32_t>(std::min<uint64_t>(path_mtu(q), e.len - e.tx_off));
        // Gather this packet's bytes (inline data from the ring, or through the lkeys).
        uint64_t skip = e.tx_off;
        uint32_t got = 0;
        if (w.has_inline) {
          prm::copy_from_ring(q.sq_buf, q.sq_n, w.inline_ring_offset + static_cast<uint32_t>(skip),
                              s->payload, n);
          got = n;
        }
        for (uint32_t i = 0; i < w.n_sge && got < n; ++i) {
          const prm::KlmFields& g = w.sge[i];
          if (skip >= g.byte_count) {
            skip -= g.byte_count;
            continue;
          }
          const uint64_t take = std::min<uint64_t>(g.byte_count - skip, n - got);
          const XlateErr xe =
              walk(g.mkey, g.address + skip, take, kLR, [&](uint8_t* p, uint64_t k) {
                std::memcpy(s->payload + got, p, k);
                got += static_cast<uint32_t>(k);
              });
          if (xe != XlateErr::kOk) {
            finish_entry(q, e, kSynLocProt);
            return true;
          }
          skip = 0;
        }
      }
      h.len = n;
      h.flags = static_cast<uint8_t>((e.tx_off == 0 ? kPktFirst : 0) |
                                     (op == PktOp::kRead || e.tx_off + n == e.len ? kPktLast : 0) |
                                     (w.ctrl.solicited() ? kPktSolicited : 0));
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

// The shared-memory wire loses nothing, so a request without a response means the peer does not
// run: the requester's ACK timer would expire retry_cnt + 1 times in a row (each retry sent
// again and unanswered), so the WQE fails after timeout x (retry_cnt + 1) of silence, with the
// retries counted. The RoCE wire's link retransmits on each expiry itself (roce_link.cpp).
bool Engine::timeouts(QpCtx& q) noexcept {
  if (opt_.mode != Mode::kThreaded || q.inflight.empty() || !q.ack_ns || wire_->roce())
    return false;
  for (SendEntry& e : q.inflight) {
    if (e.st != SendEntry::St::kWait) continue;
    if (!e.tx_done || !e.sent_ns) return false;
    if (now_ns() - e.sent_ns > q.ack_ns * (uint64_t{q.tm.retry_cnt} + 1)) {
      st_.retries += q.tm.retry_cnt;
      finish_entry(q, e, kSynRetry);
      return true;
    }
    return false;
  }
  return false;
}

void Engine::note_poll_time() noexcept {
  if (opt_.mode != Mode::kThreaded) return;
  const uint64_t now = now_ns();
  if (last_poll_ns_ && now - last_poll_ns_ >= 1000000) {
    const uint64_t gap = now - last_poll_ns_;
    gaps_[gap_next_++ % gaps_.size()] = Gap{now, gap};
    st_.max_poll_gap_us = std::max<uint64_t>(st_.max_poll_gap_us, gap / 1000);
  }
  last_poll_ns_ = now;
}

uint64_t Engine::gap_since(uint64_t since) const noexcept {
  uint64_t m = 0;
  for (const Gap& g : gaps_)
    if (g.end_ns > since) m = std::max(m, g.len_ns);
  return m;
}

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

// ---- async events and responder errors ---------------------------------------------------------
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

// ---- responder --------------------------------------------------------------------------------
bool Engine::respond(uint32_t dst_qpn, uint32_t src_qpn, PktOp op, uint32_t msn, uint32_t gen,
                     uint8_t synd) noexcept {
  WireSlot* s = wire_->tx_slot(side_, WireClass::kResp);
  if (!s) return false;
  s->h = PktHdr{};
  s->h.op = op;
  s->h.dst_qpn = dst_qpn;
  s->h.src_qpn = src_qpn;
  s->h.msn = msn;
  s->h.gen = gen;
  s->h.syndrome = synd;
  s->h.flags = kPktFirst | kPktLast;
  wire_->tx_commit(side_, WireClass::kResp);
  ++st_.tx_packets;
  return true;
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
    // A real responder drops the packet silently and the requester's retry timer fires; the
    // drop notice stands in for that timer so the outcome does not depend on wall time.
    if (last) return respond(h.src_qpn, h.dst_qpn, PktOp::kDrop, h.msn, h.gen, 0);
    return true;
  }
  if (h.len > path_mtu(*q)) {
    // A packet longer than this QP's path MTU is malformed for the responder: dropped silently,
    // so the requester retries until retry_cnt runs out (TRANSPORT_RETRY_EXC_ERR, the symptom
    // of a path MTU above what the peer's port takes). Drop notice as above.
    ++st_.mtu_drops;
    if (last) return respond(h.src_qpn, h.dst_qpn, PktOp::kDrop, h.msn, h.gen, 0);
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
        PendingRead r{h.msn, h.gen, h.src_qpn, h.rkey, h.raddr, h.msg_len, 0};
        r.replay = true;
        q->reads.push_back(r);
      }
    } else if (last) {
      respond(h.src_qpn, q->qpn, PktOp::kAck, h.msn, h.gen, 0);
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
  respond(h.src_qpn, q.qpn, op, h.msn, h.gen, synd);
  q.discard_msn_valid = true;
  q.discard_msn = h.msn;
  if (advance) ++q.epsn;
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
          std::memcpy(p, s.payload + done, k);
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
  respond(h.src_qpn, q.qpn, PktOp::kAck, h.msn, h.gen, 0);
  ++q.epsn;
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
  if (const uint8_t synd = scatter_recv(q, q.recv_counter, h.offset, s.payload, h.len, h.msg_len))
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
  respond(h.src_qpn, q.qpn, PktOp::kAck, h.msn, h.gen, 0);
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
  q.reads.push_back(PendingRead{h.msn, h.gen, h.src_qpn, h.rkey, h.raddr, h.msg_len, 0, nak});
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
      h.gen = r.gen;
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

void Engine::handle_response(const WireSlot& s) noexcept {
  const PktHdr& h = s.h;
  ++st_.rx_packets;
  QpCtx* q = find_qp(h.dst_qpn);
  if (!q || q->state != QpState::kRts) return;
  size_t at = 0;
  SendEntry* e = nullptr;
  for (; at < q->inflight.size(); ++at) {
    SendEntry& o = q->inflight[at];
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
      if (is_read) {
        finish_entry(*q, *e, kSynBadResp);
        return;
      }
      finish_entry(*q, *e, 0);
      return;
    case PktOp::kReadResp: {
      if (!is_read || h.msg_len != e->len || h.len > e->len) {
        finish_entry(*q, *e, kSynBadResp);
        return;
      }
      if (h.gen != q->gen || h.offset != e->rx_bytes) return;  // stale generation
      prm::DecodedWqe& w = dw2_;
      if (prm::decode_wqe(q->sq_buf, q->sq_n, e->counter, w) != prm::DecodeError::kOk) {
        finish_entry(*q, *e, kSynLocQpOp);
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
          std::memcpy(p, s.payload + done, k);
          done += static_cast<uint32_t>(k);
        });
        if (xe != XlateErr::kOk) {
          finish_entry(*q, *e, kSynLocProt);
          return;
        }
        skip = 0;
      }
      e->rx_bytes += h.len;
      if (e->rx_bytes >= e->len) finish_entry(*q, *e, 0);
      return;
    }
    case PktOp::kNak:
      if (h.gen != q->gen) return;
      finish_entry(*q, *e, h.syndrome ? h.syndrome : kSynRemOp);
      return;
    case PktOp::kRnrNak:
      if (h.gen != q->gen) return;
      if (e->rnr_left == 0) {
        finish_entry(*q, *e, kSynRnr);
        return;
      }
      --e->rnr_left;
      go_back(*q, at);
      if (opt_.mode == Mode::kThreaded)
        q->resend_at_ns = now_ns() + uint64_t{opt_.rnr_timer_us} * 1000ull;
      return;
    case PktOp::kDrop:
      if (h.gen != q->gen) return;
      if (e->retry_left == 0) {
        finish_entry(*q, *e, kSynRetry);
        return;
      }
      --e->retry_left;
      go_back(*q, at);
      return;
    default:
      finish_entry(*q, *e, kSynBadResp);
      return;
  }
}

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

// ---- one poll ---------------------------------------------------------------------------------
bool Engine::progress() {
  bool pending = false;
  std::lock_guard<std::mutex> g(mu_);
  return poll_locked(&pending);
}

bool Engine::poll(bool* pending) {
  std::lock_guard<std::mutex> g(mu_);
  return poll_locked(pending);
}

bool Engine::poll_locked(bool* pending) {
  note_poll_time();
  ++poll_count_;
  ++st_.polls;
  bool work = false;
  bool wait = false;
  RoceLink* link = wire_->roce();
  // RoCE wire: network in before, engine packets out after this poll (device thread only).
  if (link) work |= link->pump(*wire_, now_ns(), &wait);
  if (opt_.mode != Mode::kSink) {
    work |= rx_responses();
    work |= stream_reads();
    work |= rx_requests();
  }
  for (auto& [qpn, q] : qps_) {
    work |= poll_sq(*q);
    wait |= !q->inflight.empty() || !q->reads.empty() || q->recv_active;
  }
  if (link) work |= link->pump(*wire_, now_ns(), &wait);
  if (work) ++st_.busy_polls;
  *pending |= wait;
  return work;
}

}  // namespace rdmx::emu::detail
