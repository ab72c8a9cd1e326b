// Private to the emu data-path files (wqe.cpp, umr.cpp, requester.cpp, responder.cpp,
// completer.cpp, mkey.cpp): mkc access bits, CQE syndromes, the doorbell-record load, and the
// mkey translation walk, a template each caller instantiates with its own per-piece lambda.
#pragma once

#include <algorithm>
#include <cstdint>

#include "engine.hpp"

namespace rdmx::emu::detail {

inline constexpr uint8_t kLR = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ;
inline constexpr uint8_t kLW = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE;
inline constexpr uint8_t kRR = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
inline constexpr uint8_t kRW = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
inline constexpr uint8_t kAT = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC;
inline constexpr uint64_t kMaxMsg = 1ull << 31;

inline constexpr uint8_t kSynLocLen = MLX5_CQE_SYNDROME_LOCAL_LENGTH_ERR;
inline constexpr uint8_t kSynLocQpOp = MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR;
inline constexpr uint8_t kSynLocProt = MLX5_CQE_SYNDROME_LOCAL_PROT_ERR;
inline constexpr uint8_t kSynFlush = MLX5_CQE_SYNDROME_WR_FLUSH_ERR;
inline constexpr uint8_t kSynMwBind = MLX5_CQE_SYNDROME_MW_BIND_ERR;
inline constexpr uint8_t kSynBadResp = MLX5_CQE_SYNDROME_BAD_RESP_ERR;
inline constexpr uint8_t kSynLocAccess = MLX5_CQE_SYNDROME_LOCAL_ACCESS_ERR;
inline constexpr uint8_t kSynRemInval = MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR;
inline constexpr uint8_t kSynRemAccess = MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
inline constexpr uint8_t kSynRemOp = MLX5_CQE_SYNDROME_REMOTE_OP_ERR;
inline constexpr uint8_t kSynRetry = MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR;
inline constexpr uint8_t kSynRnr = MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR;

inline uint32_t load_dbr(volatile uint32_t* p) noexcept {
  return ::rdmx::detail::bswap(__atomic_load_n(p, __ATOMIC_ACQUIRE));
}

// [iova, iova+len) inside [start, start+size), without 64-bit overflow.
inline bool in_range(uint64_t iova, uint64_t len, uint64_t start, uint64_t size) noexcept {
  if (iova < start) return false;
  const uint64_t off = iova - start;
  return off <= size && len <= size - off;
}

// ---- mkey translation
// ----------------------------------------------------------------------------
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
inline constexpr uint32_t kMaxIndirectLevels = 4;

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

}  // namespace rdmx::emu::detail
