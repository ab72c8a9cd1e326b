#include <algorithm>
#include <cstring>

#include <rdmx/core/be.hpp>
#include <rdmx/mlx5/prm/decode.hpp>

namespace rdmx::mlx5::prm {

std::string_view decode_error_name(DecodeError e) noexcept {
  switch (e) {
    case DecodeError::kOk:
      return "ok";
    case DecodeError::kDsZero:
      return "ds-zero";
    case DecodeError::kDsBeyondRing:
      return "ds-beyond-ring";
    case DecodeError::kUnknownOpcode:
      return "unknown-opcode";
    case DecodeError::kTruncated:
      return "truncated";
    case DecodeError::kUmrOctowords:
      return "umr-octowords-mismatch";
    case DecodeError::kUmrInlineTooLong:
      return "umr-inline-too-long";
    case DecodeError::kTooManySges:
      return "too-many-sges";
    case DecodeError::kInlineLength:
      return "inline-length";
  }
  return "unknown";
}

namespace {

// Reads the ring as 16-byte DS units relative to the WQE's first byte, wrapping at the end.
class DsReader {
 public:
  DsReader(const void* ring, uint32_t n_wqebb, uint32_t slot) noexcept
      : base_(static_cast<const uint8_t*>(ring)),
        mask_(n_wqebb * 64u - 1u),
        start_((slot & (n_wqebb - 1)) * 64u) {}
  // Byte offset in the ring of DS number `i` of this WQE.
  uint32_t offset(uint32_t i) const noexcept { return (start_ + i * 16u) & mask_; }
  const uint8_t* ds(uint32_t i) const noexcept { return base_ + offset(i); }
  template <class T>
  T load(uint32_t i, uint32_t byte) const noexcept {  // big-endian field inside DS i
    T v;
    std::memcpy(&v, ds(i) + byte, sizeof(T));
    return detail::bswap(v);
  }
  uint8_t byte(uint32_t i, uint32_t b) const noexcept { return ds(i)[b]; }

 private:
  const uint8_t* base_;
  uint32_t mask_;
  uint32_t start_;
};

KlmFields read_klm(const DsReader& r, uint32_t i) noexcept {
  return KlmFields{r.load<uint32_t>(i, 0), r.load<uint32_t>(i, 4), r.load<uint64_t>(i, 8)};
}

// Data or inline segments from DS `pos` to the WQE's end.
DecodeError decode_gather(const DsReader& r, uint32_t pos, uint32_t ds, bool allow_inline,
                          DecodedWqe& out) noexcept {
  while (pos < ds) {
    const uint32_t bc = r.load<uint32_t>(pos, 0);
    if (allow_inline && (bc & MLX5_INLINE_SEG)) {
      const uint32_t len = bc & ~uint32_t(MLX5_INLINE_SEG);
      const uint64_t need = (4ull + len + 15) / 16;
      if (pos + need > ds) return DecodeError::kInlineLength;
      out.has_inline = true;
      out.inline_len = len;
      out.inline_ring_offset = r.offset(pos) + 4;
      pos += static_cast<uint32_t>(need);
      continue;
    }
    if (out.n_sge >= kMaxDecodedSges) return DecodeError::kTooManySges;
    out.sge[out.n_sge++] = read_klm(r, pos);
    ++pos;
  }
  return DecodeError::kOk;
}

// The control segment (DS 0).
void decode_ctrl(const DsReader& r, CtrlFields& c) noexcept {
  const uint32_t w0 = r.load<uint32_t>(0, 0);
  const uint32_t w1 = r.load<uint32_t>(0, 4);
  c.opmod = static_cast<uint8_t>(w0 >> 24);
  c.wqe_index = static_cast<uint16_t>(w0 >> 8);
  c.opcode = static_cast<uint8_t>(w0);
  c.qpn = w1 >> 8;
  c.ds = static_cast<uint8_t>(w1 & kCtrlDsMask);
  c.signature = r.byte(0, 8);
  c.fm_ce_se = r.byte(0, 11);
  c.imm = r.load<uint32_t>(0, 12);
}

// A UMR's control segment (DS 1), mkey context (DS 4-7) and KLM list: inline after the header,
// or the pointer to it.
DecodeError decode_umr(const DsReader& r, uint32_t ds, DecodedWqe& out) noexcept {
  if (ds < kUmrHeaderDs) return DecodeError::kTruncated;
  out.has_umr = true;
  UmrCtrlFields& u = out.umr;
  u.flags = r.byte(1, 0);
  u.klm_octowords = r.load<uint16_t>(1, 4);
  u.translation_offset = r.load<uint16_t>(1, 6);
  u.mkey_mask = r.load<uint64_t>(1, 8);
  MkcFields& m = out.mkc;
  const uint8_t b0 = r.byte(4, 0);
  const uint8_t b2 = r.byte(4, 2);
  m.free = (b0 & MLX5_WQE_MKEY_CONTEXT_FREE) != 0;
  m.access_mode = static_cast<uint8_t>((((b0 >> 2) & 0x7) << 2) | (b2 & kMkcAccessModeLowMask));
  m.umr_en = (b2 & kMkcUmrEn) != 0;
  m.access = b2 & kMkcAccessAll;
  const uint32_t qpn_mkey = r.load<uint32_t>(4, 4);
  m.qpn = qpn_mkey >> 8;
  m.key = static_cast<uint8_t>(qpn_mkey);
  m.flags_pd = r.load<uint32_t>(4, 12);
  m.start_addr = r.load<uint64_t>(5, 0);
  m.len = r.load<uint64_t>(5, 8);
  m.translations_octword_size = r.load<uint32_t>(7, 4);
  m.log_page_size = r.byte(7, 11) & 0x1f;
  if (u.inline_list()) {
    if (kUmrHeaderDs + uint32_t{u.klm_octowords} != ds) return DecodeError::kUmrOctowords;
    if (u.klm_octowords > kMaxDecodedKlm) return DecodeError::kUmrInlineTooLong;
    for (uint32_t i = 0; i < u.klm_octowords; ++i) out.klm[i] = read_klm(r, kUmrHeaderDs + i);
    out.n_klm = u.klm_octowords;
  } else if (u.klm_octowords != 0) {
    if (ds < kUmrPointerDs) return DecodeError::kTruncated;
    out.has_klm_ptr = true;
    out.klm_ptr = read_klm(r, kUmrHeaderDs);
  }
  return DecodeError::kOk;
}

}  // namespace

DecodeError decode_wqe(const void* ring, uint32_t n_wqebb, uint32_t slot,
                       DecodedWqe& out) noexcept {
  out.n_wqebb = 0;
  out.has_raddr = out.has_umr = out.has_klm_ptr = out.has_inline = false;
  out.n_klm = out.n_sge = 0;
  out.inline_len = 0;
  const DsReader r(ring, n_wqebb, slot);
  CtrlFields& c = out.ctrl;
  decode_ctrl(r, c);

  const uint32_t ds = c.ds;
  if (ds == 0) return DecodeError::kDsZero;
  out.n_wqebb = ds_to_wqebbs(ds);
  if (out.n_wqebb > n_wqebb) return DecodeError::kDsBeyondRing;

  switch (c.opcode) {
    case MLX5_OPCODE_NOP:
    case MLX5_OPCODE_LOCAL_INVAL:
      return DecodeError::kOk;
    case MLX5_OPCODE_RDMA_WRITE:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
    case MLX5_OPCODE_RDMA_READ: {
      if (ds < 2) return DecodeError::kTruncated;
      out.has_raddr = true;
      out.raddr = r.load<uint64_t>(1, 0);
      out.rkey = r.load<uint32_t>(1, 8);
      return decode_gather(r, 2, ds, c.opcode != MLX5_OPCODE_RDMA_READ, out);
    }
    case MLX5_OPCODE_SEND:
    case MLX5_OPCODE_SEND_IMM:
    case MLX5_OPCODE_SEND_INVAL:
      return decode_gather(r, 1, ds, true, out);
    case MLX5_OPCODE_UMR:
      return decode_umr(r, ds, out);
    default:
      return DecodeError::kUnknownOpcode;
  }
}

void copy_from_ring(const void* ring, uint32_t n_wqebb, uint32_t off, void* dst,
                    uint32_t len) noexcept {
  const auto* base = static_cast<const uint8_t*>(ring);
  const uint32_t size = n_wqebb * 64u;
  auto* out = static_cast<uint8_t*>(dst);
  off &= size - 1;
  while (len) {
    const uint32_t chunk = std::min(len, size - off);
    std::memcpy(out, base + off, chunk);
    out += chunk;
    len -= chunk;
    off = 0;
  }
}

}  // namespace rdmx::mlx5::prm
