#include <algorithm>

#include <rdmx/mlx5/prm/wqe.hpp>

namespace rdmx::mlx5::prm {

namespace {
// ctrl | umr ctrl | mkey ctx of a verbs map UMR (rdma-core mkey_configure + access + layout).
void umr_verbs_header(RingCursor& cur, const UmrVerbsHead& h, uint32_t ds, uint16_t octowords,
                      uint64_t len) noexcept {
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), h.wqe_index, MLX5_OPCODE_UMR, 0, h.qpn, ds, h.fm_ce_se,
           Be32::from_host(h.mkey));
  // The UMR control segment shares the first WQEBB with the ctrl segment: never wrapped.
  auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(cur.here());
  cur.advance(kUmrCtrlSegBytes);
  set_umr_ctrl(u, MLX5_WQE_UMR_CTRL_FLAG_INLINE, octowords, kMapMask);
  MkeyCtx c;
  c.access = h.access;
  c.key = static_cast<uint8_t>(h.mkey & 0xff);
  c.len = len;
  set_mkey_ctx(cur.take<mlx5_wqe_mkey_context_seg>(), c);
}

// Zero 16-byte entries from `written` up to `total` (padding to a 64-byte multiple).
void zero_entries(RingCursor& cur, uint32_t written, uint32_t total) noexcept {
  for (uint32_t i = written; i < total; ++i) std::memset(cur.take<mlx5_wqe_umr_klm_seg>(), 0, 16);
}
}  // namespace

uint32_t build_umr_klm_list(RingCursor& cur, const UmrVerbsHead& h,
                            std::span<const Klm> klms) noexcept {
  const uint32_t n = static_cast<uint32_t>(klms.size());
  RDMX_DEBUG_ASSERT(n <= kMaxInlineKlm);
  uint64_t len = 0;
  for (const Klm& k : klms) len += k.byte_count;
  const uint32_t oct = klm_list_octowords(n);
  const uint32_t ds = kUmrHeaderDs + oct;
  umr_verbs_header(cur, h, ds, static_cast<uint16_t>(oct), len);
  for (const Klm& k : klms)
    set_klm(cur.take<mlx5_wqe_umr_klm_seg>(), k.byte_count, k.mkey, k.address);
  zero_entries(cur, n, oct);
  return ds;
}

uint32_t build_umr_interleaved(RingCursor& cur, const UmrVerbsHead& h, uint32_t repeat_count,
                               std::span<const RepeatEntry> entries) noexcept {
  const uint32_t n = static_cast<uint32_t>(entries.size());
  uint64_t block = 0;
  for (const RepeatEntry& e : entries) block += e.byte_count;
  const uint32_t oct = repeat_block_octowords(n);
  const uint32_t ds = kUmrHeaderDs + oct;
  umr_verbs_header(cur, h, ds, static_cast<uint16_t>(oct), block * repeat_count);
  static_assert(sizeof(mlx5_wqe_umr_repeat_block_seg) == 16);
  auto* rb = cur.take<mlx5_wqe_umr_repeat_block_seg>();
  store_be(&rb->byte_count, static_cast<uint32_t>(block));
  store_be(&rb->op, kRepeatBlockOp);
  store_be(&rb->repeat_count, repeat_count);
  rb->reserved = 0;
  store_be(&rb->num_ent, static_cast<uint16_t>(n));
  for (const RepeatEntry& e : entries) {
    auto* out = cur.take<mlx5_wqe_umr_repeat_ent_seg>();
    store_be(&out->stride, e.stride);
    store_be(&out->byte_count, e.byte_count);
    store_be(&out->memkey, e.mkey);
    store_be(&out->va, e.address);
  }
  zero_entries(cur, n + 1, oct);
  return ds;
}

uint32_t build_local_inv(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                         uint32_t invalidate_key) noexcept {
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), wqe_index, MLX5_OPCODE_UMR, 0, qpn, kUmrHeaderDs,
           fm_ce_se, Be32::from_host(invalidate_key));
  auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(cur.here());
  cur.advance(kUmrCtrlSegBytes);
  set_umr_ctrl(u, kLocalInvUmrFlags, 0, kLocalInvMask);
  MkeyCtx c;
  c.free = true;
  c.key = 0;
  c.qpn = kMkeyQpnNone;
  set_mkey_ctx(cur.take<mlx5_wqe_mkey_context_seg>(), c);
  return kUmrHeaderDs;
}

uint32_t build_rdma(RingCursor& cur, uint8_t opcode, uint32_t qpn, uint16_t wqe_index,
                    uint8_t fm_ce_se, uint64_t raddr, uint32_t rkey, std::span<const Sge> sges,
                    Be32 imm) noexcept {
  const uint32_t ds = 2 + static_cast<uint32_t>(sges.size());
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), wqe_index, opcode, 0, qpn, ds, fm_ce_se, imm);
  set_raddr(cur.take<mlx5_wqe_raddr_seg>(), raddr, rkey);
  for (const Sge& s : sges) set_data(cur.take<mlx5_wqe_data_seg>(), s.length, s.lkey, s.addr);
  return ds;
}

uint32_t build_send(RingCursor& cur, uint8_t opcode, uint32_t qpn, uint16_t wqe_index,
                    uint8_t fm_ce_se, std::span<const Sge> sges, Be32 imm) noexcept {
  const uint32_t ds = 1 + static_cast<uint32_t>(sges.size());
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), wqe_index, opcode, 0, qpn, ds, fm_ce_se, imm);
  for (const Sge& s : sges) set_data(cur.take<mlx5_wqe_data_seg>(), s.length, s.lkey, s.addr);
  return ds;
}

uint32_t build_inline(RingCursor& cur, uint8_t opcode, uint32_t qpn, uint16_t wqe_index,
                      uint8_t fm_ce_se, uint64_t raddr, uint32_t rkey, const void* data,
                      uint32_t len, Be32 imm) noexcept {
  const bool has_raddr = opcode == MLX5_OPCODE_RDMA_WRITE || opcode == MLX5_OPCODE_RDMA_WRITE_IMM;
  const uint32_t inl_ds = (4 + len + 15) / 16;
  const uint32_t ds = 1 + (has_raddr ? 1 : 0) + inl_ds;
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), wqe_index, opcode, 0, qpn, ds, fm_ce_se, imm);
  if (has_raddr) set_raddr(cur.take<mlx5_wqe_raddr_seg>(), raddr, rkey);
  // Inline bytes may cross WQEBB and ring boundaries: copy in pieces.
  auto* hdr = reinterpret_cast<mlx5_wqe_inl_data_seg*>(cur.here());
  set_inline_hdr(hdr, len);
  const uint8_t* src = static_cast<const uint8_t*>(data);
  uint32_t total = inl_ds * 16;  // header + data + pad
  uint32_t pos = 0;              // position within the inline segment
  while (pos < total) {
    const uint32_t chunk = std::min(total - pos, cur.contiguous());
    uint8_t* dst = cur.here();
    for (uint32_t k = 0; k < chunk; ++k) {
      const uint32_t p = pos + k;
      if (p < 4) continue;  // header already written (only in the first chunk)
      dst[k] = (p - 4 < len) ? src[p - 4] : 0;
    }
    cur.advance(chunk);
    pos += chunk;
  }
  return ds;
}

uint32_t build_nop(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                   uint32_t ds) noexcept {
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), wqe_index, MLX5_OPCODE_NOP, 0, qpn, ds, fm_ce_se, Be32{});
  for (uint32_t i = 1; i < ds; ++i) std::memset(cur.take<mlx5_wqe_data_seg>(), 0, 16);
  return ds;
}

void build_recv(void* slot, uint32_t stride, std::span<const Sge> sges) noexcept {
  auto* d = static_cast<mlx5_wqe_data_seg*>(slot);
  const uint32_t max = stride / 16;
  uint32_t i = 0;
  for (; i < sges.size() && i < max; ++i)
    set_data(&d[i], sges[i].length, sges[i].lkey, sges[i].addr);
  if (i < max) set_data(&d[i], 0, MLX5_INVALID_LKEY, 0);
}

}  // namespace rdmx::mlx5::prm
