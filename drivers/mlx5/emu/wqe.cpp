// The WQE interpreter: decode and gate each WQE at the SQ's consumer index, run the local ones
// (NOP, LOCAL_INVAL, UMR: umr.cpp), hand the remote ones to the requester, and the checker's
// ordering rules (fences around UMRs and invalidates). Runs under Engine::mu_.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "datapath.hpp"

namespace rdmx::emu::detail {

namespace {

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

}  // namespace

// ---- checker helpers ----------------------------------------------------------------------------
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

// ---- the WQE interpreter ------------------------------------------------------------------------
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

// The WQE at sq_ci in four steps: its form (check_wqe_form), its fence (fence_waits,
// check_fence), the checker's ordering rules and an injected fault, then its operation
// (run_wqe). Every WQE the device consumes becomes an inflight entry, completed in order.
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
  uint8_t synd = check_wqe_form(q, w, de, avail, &nbb);
  if (!synd) {
    if (fence_waits(q, w.ctrl.fence())) return false;
    synd = check_fence(q, w);
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
  if (!synd) synd = run_wqe(q, w, e);
  q.sq_ci += e.n_wqebb;
  q.inflight.push_back(e);
  SendEntry& pe = q.inflight.back();
  if (synd || !pe.remote) finish_entry(q, pe, synd);
  return true;
}

// The forms the device cannot execute, each reported: 0, or LOCAL_QP_OP_ERR (or the reserved
// field check's syndrome). *nbb: the WQEBBs the WQE takes (1 when its size cannot be trusted).
uint8_t Engine::check_wqe_form(QpCtx& q, const prm::DecodedWqe& w, prm::DecodeError de,
                               uint32_t avail, uint32_t* nbb) noexcept {
  const uint32_t at = q.sq_ci;
  const uint16_t idx = static_cast<uint16_t>(at);
  char buf[192];
  if (de != prm::DecodeError::kOk) {
    std::snprintf(buf, sizeof(buf), "%s: %s (opcode 0x%02x, ds %u)",
                  std::string(prm::decode_error_name(de)).c_str(),
                  "the device cannot execute these bytes", w.ctrl.opcode, w.ctrl.ds);
    report(&q, idx, Rule::kMalformedWqe, buf);
    *nbb =
        (de == prm::DecodeError::kDsZero || de == prm::DecodeError::kDsBeyondRing) ? 1 : w.n_wqebb;
    return kSynLocQpOp;
  }
  if (w.ctrl.wqe_index != idx) {
    std::snprintf(buf, sizeof(buf),
                  "slot %u holds wqe_index 0x%04x (opcode 0x%02x): the doorbell record covers "
                  "a slot with no newly written WQE",
                  at & (q.sq_n - 1), w.ctrl.wqe_index, w.ctrl.opcode);
    report(&q, idx, Rule::kDoorbellPastWritten, buf);
    return kSynLocQpOp;
  }
  if (w.n_wqebb > avail) {
    std::snprintf(buf, sizeof(buf),
                  "WQE of %u WQEBBs but the doorbell record covers only %u of them", w.n_wqebb,
                  avail);
    report(&q, idx, Rule::kDoorbellPastWritten, buf);
    return kSynLocQpOp;
  }
  *nbb = w.n_wqebb;
  if (uint32_t{w.ctrl.ds} * 16 > prof_->max_wqe_sz_sq) {
    // Longer than the device's max_wqe_sz_sq (HCA cap 0x290; rdma-core refuses to create such a
    // QP, verbs.c mlx5_calc_send_wqe): the device cannot execute it. The syndrome real parts
    // report is not public; emu reports LOCAL_QP_OP_ERR, as for every WQE it cannot execute.
    std::snprintf(buf, sizeof(buf), "WQE of %u bytes (ds %u), device max_wqe_sz_sq %u (%s)",
                  uint32_t{w.ctrl.ds} * 16, w.ctrl.ds, prof_->max_wqe_sz_sq, prof_->name);
    report(&q, idx, Rule::kWqeTooLarge, buf);
    return kSynLocQpOp;
  }
  if (w.ctrl.qpn != q.qpn) {
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
    return kSynLocQpOp;
  }
  return check_reserved(q, w, q.sq_buf + size_t{at & (q.sq_n - 1)} * 64);
}

// Fences that wait for remote work to finish block the SQ here (the WQE is not consumed).
bool Engine::fence_waits(const QpCtx& q, uint8_t fence) const noexcept {
  if (fence != prm::kFenceStrongOrdering && fence != prm::kFenceFence &&
      fence != prm::kFenceSmallAndFence)
    return false;
  for (const SendEntry& o : q.inflight) {
    if (o.st != SendEntry::St::kWait) continue;
    if (fence == prm::kFenceStrongOrdering || o.opcode == MLX5_OPCODE_RDMA_READ) return true;
  }
  return false;
}

// A fence the WQE may start under: the UMRs it orders, or a reserved mode (LOCAL_QP_OP_ERR).
uint8_t Engine::check_fence(QpCtx& q, const prm::DecodedWqe& w) noexcept {
  const uint8_t fence = w.ctrl.fence();
  // INITIATOR_SMALL, STRONG_ORDERING and SMALL_AND_FENCE all start this WQE after every
  // earlier local WQE (UMR included) completed: earlier UMRs are ordered from here on.
  if (fence == prm::kFenceInitiatorSmall || fence == prm::kFenceStrongOrdering ||
      fence == prm::kFenceSmallAndFence)
    q.hot.clear();
  if (fence != 0 && fence != prm::kFenceInitiatorSmall && fence != prm::kFenceFence &&
      fence != prm::kFenceStrongOrdering && fence != prm::kFenceSmallAndFence) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), "reserved fence mode 0x%02x", fence);
    report(&q, w.ctrl.wqe_index, Rule::kMalformedWqe, buf);
    return kSynLocQpOp;
  }
  return 0;
}

// The WQE's operation: the local ones run here; a remote one (WRITE, READ, SEND) is checked
// and becomes a message the requester sends (e.remote).
uint8_t Engine::run_wqe(QpCtx& q, const prm::DecodedWqe& w, SendEntry& e) noexcept {
  switch (w.ctrl.opcode) {
    case MLX5_OPCODE_NOP:
      return 0;
    case MLX5_OPCODE_UMR:
      return exec_umr(q, w);
    case MLX5_OPCODE_LOCAL_INVAL:
      return exec_local_inval(q, w);
    default:
      break;
  }
  if (!is_remote_op(w.ctrl.opcode)) return kSynLocQpOp;
  const bool rd = w.ctrl.opcode == MLX5_OPCODE_RDMA_READ;
  uint64_t total = 0;
  if (const uint8_t synd = check_local_sges(q, w, rd ? kLW : kLR, &total)) return synd;
  e.remote = true;
  e.msn = q.next_msn++;
  e.len = total;
  e.byte_cnt = static_cast<uint32_t>(total);
  e.st = SendEntry::St::kWait;
  if (unreachable_.load(std::memory_order_relaxed) || !q.connected || !wire_->peer_open(side_)) {
    st_.retries += q.tm.retry_cnt;
    return kSynRetry;
  }
  return 0;
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

}  // namespace rdmx::emu::detail
