// Pure WQE segment writers and the composed WQE builders used by the hot path, by the emu's
// tests and by rdmx-wqe. No I/O, no state: each function writes bytes where it is told.
// Layouts are <infiniband/mlx5dv.h>'s; every multi-byte field is big-endian.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#include <infiniband/mlx5dv.h>
#include <rdmx/core/assert.hpp>
#include <rdmx/core/be.hpp>
#include <rdmx/mlx5/prm/defs.hpp>

namespace rdmx::mlx5::prm {

// A write position inside a send-queue ring. The ring is n_wqebb * 64 bytes (power of two);
// a WQE may run past the ring's end and continue at its start. Every PRM segment is 16-byte
// aligned and no segment crosses a WQEBB boundary, so wrapping is checked only when the cursor
// moves; a segment pointer handed out is always contiguous.
class RingCursor {
 public:
  RingCursor(void* ring, uint32_t n_wqebb, uint32_t slot) noexcept
      : base_(static_cast<uint8_t*>(ring)),
        mask_(n_wqebb * kWqebbBytes - 1),
        off_((slot & (n_wqebb - 1)) * kWqebbBytes) {}

  // The segment at the cursor; advances by sizeof(Seg), wrapping at the ring end.
  template <class Seg>
  Seg* take() noexcept {
    static_assert(sizeof(Seg) % 16 == 0 && sizeof(Seg) <= kWqebbBytes);
    Seg* p = reinterpret_cast<Seg*>(base_ + off_);
    off_ = (off_ + static_cast<uint32_t>(sizeof(Seg))) & mask_;
    return p;
  }
  uint8_t* here() noexcept { return base_ + off_; }
  // Bytes from the cursor to the ring's end (how much can be written before a wrap).
  uint32_t contiguous() const noexcept { return mask_ + 1 - off_; }
  void advance(uint32_t bytes) noexcept { off_ = (off_ + bytes) & mask_; }
  uint32_t offset() const noexcept { return off_; }

  static constexpr uint32_t kWqebbBytes = MLX5_SEND_WQE_BB;

 private:
  uint8_t* base_;
  uint32_t mask_;
  uint32_t off_;
};

// --------------------------------------------------------------------------------------------
// Segment writers
// --------------------------------------------------------------------------------------------

//  Control segment (16 B)
//  0        4           8     9       11       12
//  +--------+-----------+-----+-------+--------+-------+
//  |opmod|wqe_index|op  |qpn<<8|ds   |sig  |rsvd   |fm_ce_se|  imm  |
//  +--------+-----------+-----+-------+--------+-------+
inline void set_ctrl(mlx5_wqe_ctrl_seg* c, uint16_t wqe_index, uint8_t opcode, uint8_t opmod,
                     uint32_t qpn, uint32_t ds, uint8_t fm_ce_se, Be32 imm) noexcept {
  store_be(&c->opmod_idx_opcode,
           (uint32_t{opmod} << 24) | (uint32_t{wqe_index} << 8) | uint32_t{opcode});
  store_be(&c->qpn_ds, (qpn << 8) | (ds & kCtrlDsMask));
  c->signature = 0;
  c->dci_stream_channel_id = 0;
  c->fm_ce_se = fm_ce_se;
  c->imm = imm.raw();
}

//  Remote address segment (16 B): raddr(8) | rkey(4) | reserved(4)
inline void set_raddr(mlx5_wqe_raddr_seg* r, uint64_t raddr, uint32_t rkey) noexcept {
  store_be(&r->raddr, raddr);
  store_be(&r->rkey, rkey);
  r->reserved = 0;
}

//  Data (scatter/gather) segment (16 B): byte_count(4) | lkey(4) | addr(8)
inline void set_data(mlx5_wqe_data_seg* d, uint32_t byte_count, uint32_t lkey,
                     uint64_t addr) noexcept {
  store_be(&d->byte_count, byte_count);
  store_be(&d->lkey, lkey);
  store_be(&d->addr, addr);
}

//  KLM entry (16 B): byte_count(4) | mkey(4) | address(8) — same shape as a data segment.
inline void set_klm(mlx5_wqe_umr_klm_seg* k, uint32_t byte_count, uint32_t mkey,
                    uint64_t address) noexcept {
  store_be(&k->byte_count, byte_count);
  store_be(&k->mkey, mkey);
  store_be(&k->address, address);
}

//  UMR control segment (48 B)
//  0     1      4            6                    8          16                48
//  +-----+------+------------+--------------------+----------+-----------------+
//  |flags| rsvd |klm_octowords|xlt_offset/bsf_octw | mkey_mask|   reserved      |
//  +-----+------+------------+--------------------+----------+-----------------+
inline void set_umr_ctrl(mlx5_wqe_umr_ctrl_seg* u, uint8_t flags, uint16_t klm_octowords,
                         uint64_t mkey_mask) noexcept {
  std::memset(u, 0, sizeof(*u));
  u->flags = flags;
  store_be(&u->klm_octowords, klm_octowords);
  store_be(&u->mkey_mask, mkey_mask);
}

// Fields of an mkey context a UMR writes.
struct MkeyCtx {
  bool free = false;
  uint8_t access = 0;        // MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_* bits
  uint8_t access_mode = 0;   // kAccessModeKlm etc. (0 = leave zero, as rdma-core's UMR does)
  uint8_t key = 0;           // mkey_7_0 (tag)
  uint32_t qpn = kMkeyQpnNone;
  uint32_t flags_pd = 0;     // kMkcFlag* | pd
  uint64_t start_addr = 0;
  uint64_t len = 0;
  uint32_t translations_octword_size = 0;
  uint8_t log_page_size = 0;
};

//  Mkey context segment (64 B)
//  0    1    2      3  4          8    12        16          24    32   52        56   60
//  +----+----+------+--+----------+----+---------+-----------+-----+----+---------+----+--+
//  |free|rsvd|access|sf|qpn|key   |rsvd|flags_pd |start_addr | len |... |xlt_size |lps |  |
//  +----+----+------+--+----------+----+---------+-----------+-----+----+---------+----+--+
inline void set_mkey_ctx(mlx5_wqe_mkey_context_seg* m, const MkeyCtx& c) noexcept {
  std::memset(m, 0, sizeof(*m));
  m->free = static_cast<uint8_t>((c.free ? MLX5_WQE_MKEY_CONTEXT_FREE : 0) |
                                 ((c.access_mode >> 2) << 2));
  m->access_flags = static_cast<uint8_t>(c.access | (c.access_mode & kMkcAccessModeLowMask));
  store_be(&m->qpn_mkey, (c.qpn << 8) | c.key);
  store_be(&m->flags_pd, c.flags_pd);
  store_be(&m->start_addr, c.start_addr);
  store_be(&m->len, c.len);
  store_be(&m->translations_octword_size, c.translations_octword_size);
  m->log_page_size = c.log_page_size;
}

// Inline data segment header (4 B): MLX5_INLINE_SEG | byte_count. The data follows it
// directly; the segment is padded to 16 bytes.
inline void set_inline_hdr(mlx5_wqe_inl_data_seg* s, uint32_t byte_count) noexcept {
  store_be(&s->byte_count, uint32_t(MLX5_INLINE_SEG) | byte_count);
}

// --------------------------------------------------------------------------------------------
// Composed WQE builders. Each writes one whole WQE at the cursor and returns its DS count.
// --------------------------------------------------------------------------------------------

// A map of chunk pages into an indirect mkey: N equal pages, the first entered at first_offset,
// `length` bytes in all. One KLM per page: {bytes of this page, parent lkey, page address}.
struct UmrMap {
  uint32_t qpn = 0;
  uint16_t wqe_index = 0;
  uint8_t fm_ce_se = 0;
  uint32_t mkey = 0;           // index<<8 | new key
  uint8_t access = 0;          // mkc access bits
  uint64_t start_addr = 0;     // the window's IOVA
  uint32_t parent_lkey = 0;
  uint32_t page_size = 0;
  uint32_t first_offset = 0;   // offset of the first byte in pages[0]
  uint64_t length = 0;         // bytes mapped in all
  std::span<const uint64_t> pages;  // page addresses (page_size aligned)
  uint8_t check = 0;           // kUmrFlagFailIfNotFree / kUmrFlagFailIfFree / 0
  bool set_start_addr = false; // write START_ADDR (else the mkey keeps its start address)
};

// The mask a map writes: free (to valid), key, length, every access bit (so access is exactly
// what was asked for, no more).
inline constexpr uint64_t kMapMask =
    MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;

// Writes the KLM list for a chunk-page map at the cursor, zero-padded to a multiple of 4
// entries. Returns the number of entries written (before padding).
uint32_t write_page_klms(RingCursor& cur, const UmrMap& m) noexcept;
// The same list into plain memory (pointer mode); `out` holds align4(n) entries.
uint32_t write_page_klms(mlx5_wqe_umr_klm_seg* out, const UmrMap& m) noexcept;

//  Inline UMR map WQE: ctrl | umr ctrl | mkey ctx | KLM x align4(N)
//  DS = 8 + align4(N) (N <= kMaxInlineKlm).
uint32_t build_umr_map_inline(RingCursor& cur, const UmrMap& m) noexcept;

//  Pointer-mode UMR map WQE: ctrl | umr ctrl | mkey ctx | data seg -> KLM array. 9 DS.
//  The caller has written the KLM array (2 KiB aligned) in registered memory `klm_lkey`.
uint32_t build_umr_map_pointer(RingCursor& cur, const UmrMap& m, uint64_t klm_addr,
                               uint32_t klm_lkey) noexcept;

//  Invalidate (unmap) UMR WQE: ctrl | umr ctrl {mask FREE} | mkey ctx {free=1}. 8 DS.
//  check = kUmrFlagFailIfFree makes the device refuse to free an already free mkey.
uint32_t build_umr_invalidate(RingCursor& cur, uint32_t qpn, uint16_t wqe_index,
                              uint8_t fm_ce_se, uint32_t mkey, uint8_t check) noexcept;

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// --------------------------------------------------------------------------------------------
// Verbs-shaped UMR builders: the WQEs rdma-core's providers/mlx5/qp.c builds for
// mlx5dv_wr_mr_list, mlx5dv_wr_mr_interleaved and ibv_wr_local_inv (mlx5-umr.md section 3).
// Used by rdmx-wqe; the window hot path uses build_umr_map_inline above.
// --------------------------------------------------------------------------------------------

// One KLM of a generic translation list: `byte_count` bytes of `mkey` starting at `address`.
struct Klm {
  uint64_t address = 0;
  uint32_t byte_count = 0;
  uint32_t mkey = 0;
};

// One entry of an interleaved (repeat-block) layout: `byte_count` bytes of `mkey` at `address`,
// then the next repetition starts `stride` (= bytes + skip) bytes further.
struct RepeatEntry {
  uint64_t address = 0;
  uint16_t byte_count = 0;
  uint16_t stride = 0;
  uint32_t mkey = 0;
};

// Common head of the verbs UMRs: the target mkey (ctrl imm; its low byte is the new key) and
// the mkc access byte (MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*; local read is not written).
struct UmrVerbsHead {
  uint32_t qpn = 0;
  uint16_t wqe_index = 0;
  uint8_t fm_ce_se = 0;
  uint32_t mkey = 0;
  uint8_t access = 0;
};

// Inline translation size in octowords (16 B) of a list of n KLMs / of n repeat entries plus
// the repeat-block header, padded to 64 bytes (rdma-core: align(xlat_size, 64) / 16).
constexpr uint32_t klm_list_octowords(uint32_t n) noexcept {
  return align4(n);
}
constexpr uint32_t repeat_block_octowords(uint32_t n) noexcept {
  return align4(n + 1);
}

//  mr_list UMR (mlx5dv_wr_mr_list): DS = 8 + align4(N)
//  +------+-----------------------------------+------------------------------+---------------+
//  | ctrl | umr ctrl                          | mkey ctx                     | KLM x N, zero |
//  | UMR  | flags INLINE, octowords align4(N) | free 0, access, qpn 0xffffff,| padded to a   |
//  | imm= | mask FREE|KEY|LEN|LW|RR|RW|A      | key = mkey & 0xff,           | multiple of 4 |
//  | mkey |      (0x203c2001)                 | len = sum of byte_count      |               |
//  +------+-----------------------------------+------------------------------+---------------+
//  start_addr is not in the mask: the mkey stays zero-based. N may be 0 (len 0, 8 DS).
uint32_t build_umr_klm_list(RingCursor& cur, const UmrVerbsHead& h,
                            std::span<const Klm> klms) noexcept;

//  mr_interleaved UMR (mlx5dv_wr_mr_interleaved): DS = 8 + align4(N + 1)
//  ctrl | umr ctrl {INLINE, octowords align4(N+1), mask 0x203c2001} |
//  mkey ctx {len = sum(byte_count) * repeat_count} |
//  repeat block {BE32 sum(byte_count), BE32 op 0x400, BE32 repeat_count, BE16 0, BE16 N} |
//  entries {BE16 stride, BE16 byte_count, BE32 mkey, BE64 address} x N, zero padded to 64 B.
inline constexpr uint32_t kRepeatBlockOp = 0x400;
uint32_t build_umr_interleaved(RingCursor& cur, const UmrVerbsHead& h, uint32_t repeat_count,
                               std::span<const RepeatEntry> entries) noexcept;

//  LOCAL_INV as rdma-core builds it (ibv_wr_local_inv -> set_bind_wr with length 0): 8 DS
//  ctrl {UMR, imm = invalidate key} |
//  umr ctrl {flags INLINE|TRANSLATION_OFFSET|CHECK_QPN = 0x98, octowords 0,
//            mask FREE|KEY|QPN = 0x20006000} |
//  mkey ctx {free = 1, qpn = 0xffffff, key = 0}
//  It differs from build_umr_invalidate: CHECK_QPN and the QPN/KEY mask bits are set and the
//  key byte is rewritten to 0.
inline constexpr uint8_t kLocalInvUmrFlags = MLX5_WQE_UMR_CTRL_FLAG_INLINE |
                                             MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET |
                                             MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
inline constexpr uint64_t kLocalInvMask = MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE |
                                          MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
                                          MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN;
uint32_t build_local_inv(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                         uint32_t invalidate_key) noexcept;

//  RDMA WRITE / WRITE_IMM / READ WQE: ctrl | raddr | data x n. DS = 2 + n.
uint32_t build_rdma(RingCursor& cur, uint8_t opcode, uint32_t qpn, uint16_t wqe_index,
                    uint8_t fm_ce_se, uint64_t raddr, uint32_t rkey, std::span<const Sge> sges,
                    Be32 imm) noexcept;

//  SEND / SEND_IMM / SEND_INVAL WQE: ctrl (imm = immediate or invalidate rkey) | data x n.
uint32_t build_send(RingCursor& cur, uint8_t opcode, uint32_t qpn, uint16_t wqe_index,
                    uint8_t fm_ce_se, std::span<const Sge> sges, Be32 imm) noexcept;

//  Inline-data variant for WRITE and SEND: ctrl | [raddr] | inline hdr + bytes (padded to 16).
uint32_t build_inline(RingCursor& cur, uint8_t opcode, uint32_t qpn, uint16_t wqe_index,
                      uint8_t fm_ce_se, uint64_t raddr, uint32_t rkey, const void* data,
                      uint32_t len, Be32 imm) noexcept;

//  NOP WQE of `ds` DS (pads the ring; ds >= 1).
uint32_t build_nop(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                   uint32_t ds) noexcept;

// Receive WQE (RQ, stride = n * 16): data segments, the rest terminated with an invalid lkey
// (MLX5_INVALID_LKEY) entry when shorter than the stride.
void build_recv(void* slot, uint32_t stride, std::span<const Sge> sges) noexcept;

}  // namespace rdmx::mlx5::prm
