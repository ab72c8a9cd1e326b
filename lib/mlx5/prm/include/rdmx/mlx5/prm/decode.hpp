// WQE decoder: send-queue bytes -> named fields. Pure and bounds-checked: it never reads outside
// the ring it is given, whatever the bytes say. Used by the emulated device's interpreter (the
// device side of every WQE), by rdmx-wqe decode, and by the fuzz targets.
#pragma once

#include <cstdint>
#include <string_view>

#include <infiniband/mlx5dv.h>
#include <rdmx/mlx5/prm/defs.hpp>

namespace rdmx::mlx5::prm {

enum class DecodeError : uint8_t {
  kOk = 0,
  kDsZero,            // ctrl ds == 0
  kDsBeyondRing,      // ds spans more WQEBBs than the ring holds
  kUnknownOpcode,     // opcode the decoder does not know
  kTruncated,         // segments the opcode needs do not fit in ds
  kUmrOctowords,      // inline translation size does not match ds, or exceeds the WQE
  kUmrInlineTooLong,  // more inline KLMs than kMaxDecodedKlm
  kTooManySges,       // more data segments than kMaxDecodedSges
  kInlineLength,      // inline byte count runs past ds
};
std::string_view decode_error_name(DecodeError e) noexcept;

inline constexpr uint32_t kMaxDecodedKlm = 64;   // >= align4(kMaxInlineKlm) with room to spare
inline constexpr uint32_t kMaxDecodedSges = 62;  // 63 DS - ctrl

struct CtrlFields {
  uint8_t opmod = 0;
  uint8_t opcode = 0;
  uint16_t wqe_index = 0;
  uint32_t qpn = 0;
  uint8_t ds = 0;
  uint8_t signature = 0;
  uint8_t fm_ce_se = 0;
  uint32_t imm = 0;  // host order value of the imm field (mkey, immediate or invalidate key)
  uint8_t fence() const noexcept { return fm_ce_se & kFenceMask; }
  bool signaled() const noexcept { return (fm_ce_se & MLX5_WQE_CTRL_CQ_UPDATE) != 0; }
  bool solicited() const noexcept { return (fm_ce_se & MLX5_WQE_CTRL_SOLICITED) != 0; }
};

struct UmrCtrlFields {
  uint8_t flags = 0;
  uint16_t klm_octowords = 0;
  uint16_t translation_offset = 0;
  uint64_t mkey_mask = 0;
  bool inline_list() const noexcept { return (flags & MLX5_WQE_UMR_CTRL_FLAG_INLINE) != 0; }
};

struct MkcFields {
  bool free = false;
  uint8_t access_mode = 0;  // 5-bit field joined from its two parts
  bool umr_en = false;
  uint8_t access = 0;  // MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_* bits
  uint32_t qpn = 0;
  uint8_t key = 0;
  uint32_t flags_pd = 0;
  uint64_t start_addr = 0;
  uint64_t len = 0;
  uint32_t translations_octword_size = 0;
  uint8_t log_page_size = 0;
};

struct KlmFields {  // also used for data segments and the UMR pointer segment
  uint32_t byte_count = 0;
  uint32_t mkey = 0;
  uint64_t address = 0;
};

struct DecodedWqe {
  CtrlFields ctrl;
  uint32_t n_wqebb = 0;
  // RDMA WRITE/READ
  bool has_raddr = false;
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  // UMR
  bool has_umr = false;
  UmrCtrlFields umr;
  MkcFields mkc;
  uint32_t n_klm = 0;  // inline entries decoded (klm_octowords; includes zero padding)
  KlmFields klm[kMaxDecodedKlm];
  bool has_klm_ptr = false;  // pointer-mode UMR
  KlmFields klm_ptr;
  // Gather list (WRITE/READ/SEND)
  uint32_t n_sge = 0;
  KlmFields sge[kMaxDecodedSges];
  // Inline data (WRITE/SEND with MLX5_INLINE_SEG)
  bool has_inline = false;
  uint32_t inline_len = 0;
  uint32_t inline_ring_offset = 0;  // byte offset in the ring of the first inline data byte
};

// Decodes the WQE whose first WQEBB is `slot` (taken modulo n_wqebb) in a ring of n_wqebb
// WQEBBs. Segments may wrap to the ring's start. Returns kOk or the first problem found; `out`
// holds what was decoded up to that point.
DecodeError decode_wqe(const void* ring, uint32_t n_wqebb, uint32_t slot, DecodedWqe& out) noexcept;

// Copies `len` inline bytes starting at ring byte offset `off` (wrapping) into dst.
void copy_from_ring(const void* ring, uint32_t n_wqebb, uint32_t off, void* dst,
                    uint32_t len) noexcept;

}  // namespace rdmx::mlx5::prm
