// PRM constants that <infiniband/mlx5dv.h> does not define. Everything mlx5dv.h defines is used
// from there (MLX5_OPCODE_*, MLX5_WQE_CTRL_*, MLX5_WQE_UMR_CTRL_*, MLX5_CQE_*, segment structs);
// this file is the one place the rest is defined, each value with its source.
// Sources: doc/guides/mlx5-facts.md (section numbers below) and the primary sources it cites.
#pragma once

#include <cstdint>

#include <infiniband/mlx5dv.h>

namespace rdmx::mlx5::prm {

// ---- Control segment (facts §2.1, §2.2) -------------------------------------------------
// ds is a 6-bit field: a WQE is at most 63 DS. Kernel include/linux/mlx5/qp.h
// MLX5_WQE_CTRL_DS_MASK; DPDK mlx5_prm.h "Absolute maximum size is 63 segments".
inline constexpr uint32_t kCtrlDsMask = 0x3f;
inline constexpr uint32_t kMaxWqeDs = 63;
// fm_ce_se bits 7:5, fence mode. mlx5dv.h has INITIATOR_SMALL_FENCE (1<<5) and FENCE (4<<5);
// kernel qp.h MLX5_FENCE_MODE_FENCE = 2<<5, MLX5_FENCE_MODE_STRONG_ORDERING = 3<<5.
inline constexpr uint8_t kFenceMask = 0xe0;
inline constexpr uint8_t kFenceNone = 0;
inline constexpr uint8_t kFenceInitiatorSmall = MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE;  // 0x20
inline constexpr uint8_t kFenceFence = 2 << 5;                                        // 0x40
inline constexpr uint8_t kFenceStrongOrdering = 3 << 5;                               // 0x60
inline constexpr uint8_t kFenceSmallAndFence = MLX5_WQE_CTRL_FENCE;                   // 0x80
// The fence a UMR WQE itself must carry, from HCA cap umr_fence (2 bits at 0x20a): 0 STRONG ->
// STRONG_ORDERING, 1 SMALL -> INITIATOR_SMALL, 2 NONE -> none (kernel main.c
// mlx5_get_umr_fence). An unknown value gets the strongest fence.
constexpr uint8_t umr_fence_bits(uint32_t umr_fence_cap) noexcept {
  return umr_fence_cap == 1   ? kFenceInitiatorSmall
         : umr_fence_cap == 2 ? kFenceNone
                              : kFenceStrongOrdering;
}

// fm_ce_se bits 3:2, completion mode. 0 = CQE on error only (DPDK MLX5_COMP_ONLY_ERR).
inline constexpr uint8_t kCeMask = 0x0c;

// ---- UMR control segment flags (facts §2.3) -------------------------------------------
// Bits 6:5 free-state check. mlx5dv.h's MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE (1<<5) means "fail
// if the mkey is NOT free"; 2<<5 means "fail if the mkey IS free" (kernel device.h
// MLX5_UMR_CHECK_FREE). Named here by effect, to avoid the naming trap.
// The op of a repeat-block translation header (mlx5dv_wr_mr_interleaved; rdma-core
// providers/mlx5/qp.c umr_strided_seg_create): it sits where a KLM's mkey would, which is how
// the device tells the two translations apart.
inline constexpr uint32_t kRepeatBlockOp = 0x400;
inline constexpr uint8_t kUmrFlagFailIfNotFree = MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE;  // 0x20
inline constexpr uint8_t kUmrFlagFailIfFree = 2 << 5;                                // 0x40
inline constexpr uint8_t kUmrFlagCheckMask = 3 << 5;

// ---- mkey_mask bits missing from mlx5dv.h (kernel include/linux/mlx5/device.h) -------------
inline constexpr uint64_t kMaskPageSize = 1ull << 1;
inline constexpr uint64_t kMaskPd = 1ull << 7;
inline constexpr uint64_t kMaskEnRinval = 1ull << 8;
inline constexpr uint64_t kMaskLocalRead = 1ull << 17;
inline constexpr uint64_t kMaskSmallFence = 1ull << 23;
// Bits the emu understands; any other bit set in a UMR is a PRM-checker "nonsense mask" report.
inline constexpr uint64_t kMaskKnown =
    MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | kMaskPageSize | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
    kMaskPd | kMaskEnRinval | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY | MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN |
    kMaskLocalRead | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC |
    kMaskSmallFence | MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE;

// ---- mkey context (facts §2.5; rdma-core mlx5_ifc.h mlx5_ifc_mkc_bits) -----------------
// access_mode is split: bits 4:2 in byte 0 (bits 4:2 of the field), bits 1:0 in byte 2.
inline constexpr uint8_t kAccessModeMtt = 0x1;
inline constexpr uint8_t kAccessModeKlm = 0x2;
inline constexpr uint8_t kAccessModeKsm = 0x3;
inline constexpr uint8_t kMkcAccessModeLowMask = 0x03;  // byte 2 bits 1:0
inline constexpr uint8_t kMkcUmrEn = 1 << 7;            // byte 2 bit 7
// flags_pd (bytes 12-15): bit 31 length64, bit 24 en_rinval (kernel MLX5_MKEY_REMOTE_INVAL).
inline constexpr uint32_t kMkcFlagLength64 = 1u << 31;
inline constexpr uint32_t kMkcFlagEnRinval = 1u << 24;
inline constexpr uint32_t kMkcPdMask = 0x00ffffff;
// qpn field value meaning "not bound to a QP" (rdma-core verbs.c _mlx5dv_create_mkey).
inline constexpr uint32_t kMkeyQpnNone = 0xffffff;
// All access bits of the mkc access byte.
inline constexpr uint8_t kMkcAccessAll =
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE |
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ |
    MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE | MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ;

// ---- Sizes (facts §2.7) ----------------------------------------------------------------
inline constexpr uint32_t kCtrlSegBytes = 16;
inline constexpr uint32_t kUmrCtrlSegBytes = 48;
inline constexpr uint32_t kMkeyCtxSegBytes = 64;
inline constexpr uint32_t kKlmBytes = 16;
// Inline UMR: ctrl + umr ctrl + mkc = 8 DS, then align4(N) KLM DS. 8 + align4(N) <= 63 gives
// align4(N) <= 52 (inference, facts §8.1).
inline constexpr uint32_t kUmrHeaderDs = 8;
inline constexpr uint32_t kMaxInlineKlm = 52;
// Pointer-mode UMR: 8 DS + one 16-byte pointer = 9 DS (DPDK mlx5_crypto_gcm.c); the KLM array
// must be 2 KiB aligned (DPDK mlx5_prm.h MLX5_UMR_KLM_PTR_ALIGN, kernel MLX5_UMR_ALIGN).
inline constexpr uint32_t kUmrPointerDs = 9;
inline constexpr uint32_t kKlmPtrAlign = 2048;
// Most inline KLMs a UMR may carry on a device whose send WQEs are limited to max_wqe_sz_sq
// bytes (HCA cap at 0x290, 16 b). rdma-core sizes a UMR-capable QP's WQE as 192 bytes of overhead
// (ctrl 16 + UMR ctrl 48 + mkey context 64 + 64; verbs.c _sq_overhead) plus
// align16(4 + max_inline_data), refused above max_sq_desc_sz = max_wqe_sz_sq (verbs.c
// mlx5_calc_send_wqe); a QP sized for n inline KLMs needs max_inline_data = 16 n - 4. The largest
// multiple of 4 that fits, at most kMaxInlineKlm: 1024 -> 52, 512 -> 20, 256 -> 4.
inline constexpr uint32_t kUmrQpWqeOverhead = 192;
constexpr uint32_t max_inline_klm_for(uint32_t max_wqe_sz_sq) noexcept {
  if (max_wqe_sz_sq <= kUmrQpWqeOverhead) return 0;
  const uint32_t n = ((max_wqe_sz_sq - kUmrQpWqeOverhead) / 16) & ~3u;
  return n > kMaxInlineKlm ? kMaxInlineKlm : n;
}
// KLM byte_count is "up to 2GB" (mlx5dv.h comment on mlx5_wqe_umr_klm_seg).
inline constexpr uint64_t kMaxKlmBytes = 1ull << 31;

constexpr uint32_t align4(uint32_t n) noexcept {
  return (n + 3u) & ~3u;
}
constexpr uint32_t ds_to_wqebbs(uint32_t ds) noexcept {
  return (ds + 3u) / 4u;
}
constexpr uint32_t umr_inline_ds(uint32_t n_klm) noexcept {
  return kUmrHeaderDs + align4(n_klm);
}

// ---- CQE (mlx5dv.h struct mlx5_cqe64, mlx5_err_cqe) -----------------------------------------
// sop_drop_qpn: bits 31:24 carry the send WQE opcode in requester CQEs; 23:0 the QPN.
inline constexpr uint32_t kCqeQpnMask = 0x00ffffff;
// CQ doorbell record: bits 23:0 consumer index (rdma-core mlx5 update_cons_index).
inline constexpr uint32_t kCqDbrCiMask = 0x00ffffff;

}  // namespace rdmx::mlx5::prm
