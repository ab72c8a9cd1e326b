// The UMR WQE: the rules on its control segment, translation entries and mkey context, and the
// commit into the mkey table. Runs under Engine::mu_.
#include <algorithm>
#include <cinttypes>
#include <cstddef>
#include <cstdio>
#include <cstring>

#include "datapath.hpp"

namespace rdmx::emu::detail {

// ---- UMR ----------------------------------------------------------------------------------------
namespace {

// The bytes entries [first, last) translate, each entry's offset into `prefix` when given (the
// translation walks it). A repeat-block entry's bytes are the low 16 bits of its byte_count
// (stride << 16 | bytes, rdma-core qp.c umr_strided_seg_create).
uint64_t sum_entries(const Klm* k, size_t first, size_t last, bool repeat,
                     uint64_t* prefix) noexcept {
  uint64_t acc = 0;
  for (size_t i = first; i < last; ++i) {
    if (prefix) prefix[i] = acc;
    acc += repeat ? k[i].byte_count & 0xffff : k[i].byte_count;
  }
  return acc;
}

}  // namespace

uint64_t Engine::umr_xlt_offset(const QpCtx& q, const prm::DecodedWqe& w) const noexcept {
  if (!(w.umr.flags & MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET)) return 0;
  const uint8_t* b = q.sq_buf + size_t{w.ctrl.wqe_index & (q.sq_n - 1u)} * 64 + 32;
  const uint64_t hi = uint64_t{b[0]} << 24 | uint64_t{b[1]} << 16 | uint64_t{b[2]} << 8 | b[3];
  return hi << 16 | w.umr.translation_offset;
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

// The new translation entries (inline, or behind the pointer-mode lkey) into umr_xlt_; `src`
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
  // off + n_oct <= capacity <= align4(max_klm_list): umr_xlt_ holds it (sized at creation).
  Klm* tmp = umr_xlt_.data();
  if (u.inline_list()) {
    for (uint32_t i = 0; i < n_oct; ++i)
      tmp[i] = Klm{w.klm[i].byte_count, w.klm[i].mkey, w.klm[i].address};
  } else if (const uint8_t syn = umr_read_ptr_list(q, w, n_oct, tmp)) {
    return syn;
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

// Pointer mode: the KLM array lives in host memory behind an lkey (read with LR), n_oct
// big-endian entries into tmp: 0 or a syndrome.
uint8_t Engine::umr_read_ptr_list(QpCtx& q, const prm::DecodedWqe& w, uint32_t n_oct,
                                  Klm* tmp) noexcept {
  if (w.klm_ptr.address % prm::kKlmPtrAlign) {
    char buf[96];
    std::snprintf(buf, sizeof(buf), "pointer-mode KLM array at 0x%" PRIx64 " is not 2 KiB aligned",
                  w.klm_ptr.address);
    report(&q, w.ctrl.wqe_index, Rule::kKlmPtrAlign, buf);
    if (opt_.checker_fatal) return kSynLocQpOp;
  }
  // The device reads the list as it lies in memory, 16 bytes per entry ({BE32 byte_count, BE32
  // mkey, BE64 address}, mlx5_wqe_umr_klm_seg): Klm has that layout in host order, so the bytes
  // land in `tmp` and are swapped in place.
  static_assert(sizeof(Klm) == 16 && offsetof(Klm, mkey) == 4 && offsetof(Klm, addr) == 8);
  uint8_t* raw = reinterpret_cast<uint8_t*>(tmp);
  size_t pos = 0;
  const XlateErr xe = walk(w.klm_ptr.mkey, w.klm_ptr.address, size_t{n_oct} * sizeof(Klm), kLR,
                           [&](uint8_t* p, uint64_t n) {
                             std::memcpy(raw + pos, p, n);
                             pos += n;
                           });
  if (xe != XlateErr::kOk) return kSynLocProt;
  for (uint32_t i = 0; i < n_oct; ++i)
    tmp[i] = Klm{::rdmx::detail::bswap(tmp[i].byte_count), ::rdmx::detail::bswap(tmp[i].mkey),
                 ::rdmx::detail::bswap(tmp[i].addr)};
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
  const uint64_t sum = sum_entries(tmp, 1, std::min(n + 1, n_oct), true, nullptr);
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
  // The window's first translation takes room for its capacity: no later UMR allocates.
  if (m.klm.capacity() < m.capacity) {
    m.klm.reserve(m.capacity);
    m.prefix.reserve(m.capacity);
  }
  if (off == 0 && !(w.umr.flags & MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET)) {
    m.klm.assign(src, src + n_oct);
  } else {
    if (m.klm.size() < off + n_oct) m.klm.resize(off + n_oct);
    std::copy(src, src + n_oct, m.klm.begin() + off);
  }
  m.prefix.resize(m.klm.size());
  uint32_t n_real = 0;
  m.repeat = off == 0 && !m.klm.empty() && m.klm[0].mkey == prm::kRepeatBlockOp;
  if (m.repeat) {  // checked by umr_check_repeat: the header takes a slot, as on the device
    const uint32_t n_rep = static_cast<uint32_t>(m.klm[0].addr & 0xffff);
    m.block = m.klm[0].byte_count;
    (void)sum_entries(m.klm.data(), 1, n_rep + 1, true, m.prefix.data());
    n_real = n_rep + 1;
    m.xlat_bytes = m.block * (m.klm[0].addr >> 32);
  } else {
    m.xlat_bytes = sum_entries(m.klm.data(), 0, m.klm.size(), false, m.prefix.data());
    n_real = static_cast<uint32_t>(
        std::count_if(m.klm.begin(), m.klm.end(), [](const Klm& k) { return k.byte_count != 0; }));
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

}  // namespace rdmx::emu::detail
