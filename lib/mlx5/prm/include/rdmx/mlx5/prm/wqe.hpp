// Pure WQE segment writers and the composed WQE builders used by the hot path, by the emu's
// tests and by rdmx-wqe. No I/O, no state: each function writes bytes where it is told.
// Layouts are <infiniband/mlx5dv.h>'s; every multi-byte field is big-endian.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

#if defined(__SSSE3__)
#include <tmmintrin.h>
#endif
#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

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
  uint8_t access = 0;       // MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_* bits
  uint8_t access_mode = 0;  // kAccessModeKlm etc. (0 = leave zero, as rdma-core's UMR does)
  uint8_t key = 0;          // mkey_7_0 (tag)
  uint32_t qpn = kMkeyQpnNone;
  uint32_t flags_pd = 0;  // kMkcFlag* | pd
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
  m->free =
      static_cast<uint8_t>((c.free ? MLX5_WQE_MKEY_CONTEXT_FREE : 0) | ((c.access_mode >> 2) << 2));
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
// Whole-word writers for the hot UMRs. The segments above store field by field (memset, then
// each field, each a separate store); the map and unmap UMRs instead assemble each 8-byte word of
// their fixed 128-byte head from its big-endian fields in registers and store it once. Constant
// words fold to immediates; all-zero words are plain zero stores.
// --------------------------------------------------------------------------------------------

// Stores `v` as the 8 bytes at `p` (host order: v is already the bytes, low byte first).
inline void put_u64(uint8_t* p, uint64_t v) noexcept {
  std::memcpy(p, &v, sizeof(v));
}

// Control segment bytes 0-7: opmod_idx_opcode | qpn_ds.
constexpr uint64_t ctrl_word0(uint16_t wqe_index, uint8_t opcode, uint8_t opmod, uint32_t qpn,
                              uint32_t ds) noexcept {
  return uint64_t{detail::bswap((uint32_t{opmod} << 24) | (uint32_t{wqe_index} << 8) | opcode)} |
         (uint64_t{detail::bswap((qpn << 8) | (ds & kCtrlDsMask))} << 32);
}
// Control segment bytes 8-15: signature 0 | dci_stream_channel_id 0 | fm_ce_se | imm.
constexpr uint64_t ctrl_word1(uint8_t fm_ce_se, Be32 imm) noexcept {
  return (uint64_t{fm_ce_se} << 24) | (uint64_t{imm.raw()} << 32);
}
// UMR control segment bytes 0-7: flags | reserved(3) | klm_octowords | translation_offset 0.
constexpr uint64_t umr_ctrl_word0(uint8_t flags, uint16_t klm_octowords) noexcept {
  return uint64_t{flags} | (uint64_t{detail::bswap(klm_octowords)} << 32);
}
// Mkey context bytes 0-7: free | reserved | access_flags | sf 0 | qpn_mkey (qpn 0xffffff, key).
// (access_mode 0 as in set_mkey_ctx with MkeyCtx::access_mode = 0.)
constexpr uint64_t mkc_word0(bool free, uint8_t access, uint8_t key) noexcept {
  return uint64_t{free ? uint8_t{MLX5_WQE_MKEY_CONTEXT_FREE} : uint8_t{0}} |
         (uint64_t{access} << 16) | (uint64_t{detail::bswap((kMkeyQpnNone << 8) | key)} << 32);
}

//  The 128-byte head of a UMR WQE as map and invalidate write it: two WQEBBs, the second
//  possibly wrapped to the ring's start. Bytes not named are zero.
//  WQEBB 0: ctrl {ctrl0, ctrl1} | umr ctrl {umr0, mkey_mask, 32 x 0}
//  WQEBB 1: mkey ctx {mkc0, reserved2 0 + flags_pd 0, start_addr, len, 32 x 0}
//  Same bytes as set_ctrl + set_umr_ctrl + set_mkey_ctx with {qpn 0xffffff, access_mode 0,
//  flags_pd 0, translations_octword_size 0, log_page_size 0}. The cursor must be at a WQEBB
//  boundary (a WQE start); it is left after the mkey context.
inline void write_umr_head(RingCursor& cur, uint64_t ctrl0, uint64_t ctrl1, uint64_t umr0,
                           uint64_t mkey_mask, uint64_t mkc0, uint64_t start_addr,
                           uint64_t len) noexcept {
  RDMX_DEBUG_ASSERT(cur.offset() % RingCursor::kWqebbBytes == 0);
  uint8_t* b0 = cur.here();
  cur.advance(RingCursor::kWqebbBytes);
  uint8_t* b1 = cur.here();
  cur.advance(RingCursor::kWqebbBytes);
  put_u64(b0, ctrl0);
  put_u64(b0 + 8, ctrl1);
  put_u64(b0 + 16, umr0);
  put_u64(b0 + 24, detail::bswap(mkey_mask));
  std::memset(b0 + 32, 0, 32);
  put_u64(b1, mkc0);
  put_u64(b1 + 8, 0);
  put_u64(b1 + 16, detail::bswap(start_addr));
  put_u64(b1 + 24, detail::bswap(len));
  std::memset(b1 + 32, 0, 32);
}

// write_umr_head for a WQE that does not reach past the ring's end, `p` at its start, with
// start_addr 0 and the mask and length already big-endian (the hot path's templates keep them
// so). The same 128 bytes.
inline void put_umr_head(uint8_t* p, uint64_t ctrl0, uint64_t ctrl1, uint64_t umr0,
                         uint64_t mkey_mask_be, uint64_t mkc0, uint64_t len_be) noexcept {
  put_u64(p, ctrl0);
  put_u64(p + 8, ctrl1);
  put_u64(p + 16, umr0);
  put_u64(p + 24, mkey_mask_be);
  std::memset(p + 32, 0, 32);
  put_u64(p + 64, mkc0);
  put_u64(p + 72, 0);
  put_u64(p + 80, 0);
  put_u64(p + 88, len_be);
  std::memset(p + 96, 0, 32);
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
  uint32_t mkey = 0;        // index<<8 | new key
  uint8_t access = 0;       // mkc access bits
  uint64_t start_addr = 0;  // the window's IOVA
  uint32_t parent_lkey = 0;
  uint32_t page_size = 0;
  uint32_t first_offset = 0;        // offset of the first byte in pages[0]
  uint64_t length = 0;              // bytes mapped in all
  std::span<const uint64_t> pages;  // page addresses (page_size aligned)
  uint8_t check = 0;                // kUmrFlagFailIfNotFree / kUmrFlagFailIfFree / 0
  bool set_start_addr = false;      // write START_ADDR (else the mkey keeps its start address)
  bool no_atomic_mask = false;      // leave the atomic bit out of the mask (devices with
                                    // umr_modify_atomic_disabled; `access` has no atomic then)
};

// The mask a map writes: free (to valid), key, length, every access bit (so access is exactly
// what was asked for, no more). On a device with HCA cap umr_modify_atomic_disabled the atomic
// bit (21) must stay out (Linux umr.c umr_check_mkey_mask; frwr_mkey_mask adds it only for
// atomic access): kMapMaskNoAtomic. Windows are created without atomic rights and such a device
// can never grant them by UMR, so access stays exact there too.
inline constexpr uint64_t kMapMask =
    MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
inline constexpr uint64_t kMapMaskNoAtomic =
    kMapMask & ~uint64_t{MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC};

// Writes the KLM list for a chunk-page map at the cursor, zero-padded to a multiple of 4
// entries. Returns the number of entries written (before padding). Inline: the per-page loop is
// the hot path's only part that grows with the map (SSSE3 where the includer is built with it).
// The same list into plain memory (pointer mode): write_page_klms(out, m); `out` holds
// align4(n) entries.
// Checking the pages while writing them (one pass over the list): every page address p must be
// page aligned relative to `base` and below base + span. write_page_klms(..., PageCheck&) folds
// every page into `acc` (OR of p - base) and `over` (any p - base > span - 1, compared as signed:
// an address below base wraps to a negative difference, which the OR's sign bit also catches).
//
// The middle run of whole-page entries (the only part that grows with the map) may be written by
// a variant built for a wider vector unit, chosen once at setup (klm_mid_variant): it writes the
// same bytes and folds the same pages. nullptr: the inline baseline (SSE4.2 when the includer is
// built with it, else scalar).
struct PageCheck;
using KlmMidFn = void (*)(const uint64_t* pages, uint32_t count, uint8_t* out, uint64_t head,
                          PageCheck* pc) noexcept;
enum class KlmVariant : uint8_t { kBaseline, kAvx2, kAvx512 };
inline constexpr KlmVariant kKlmVariants[] = {KlmVariant::kBaseline, KlmVariant::kAvx2,
                                              KlmVariant::kAvx512};
const char* klm_variant_name(KlmVariant v) noexcept;
// Whether this CPU can run v (kBaseline: always; kAvx512 needs AVX-512 F, BW and DQ).
bool klm_variant_supported(KlmVariant v) noexcept;
// The best variant this CPU supports within a vector width of max_simd_bits (DPDK's
// rte_vect_get_max_simd_bitwidth(): 256 unless EAL ran with --force-max-simd-bitwidth=512, as
// DPDK's own AVX-512 paths are chosen).
KlmVariant klm_best_variant(uint32_t max_simd_bits = 256) noexcept;
// The middle-run writer of v (nullptr for kBaseline, or when v is not supported).
KlmMidFn klm_mid_variant(KlmVariant v) noexcept;
// A variant's writer pays for its call above this many middle entries; below, the inline
// baseline runs.
inline constexpr uint32_t kKlmMidCallMin = 32;

struct PageCheck {
  uint64_t base = 0;
  uint64_t span = 0;  // bytes from base that hold pages (> 0)
  uint64_t acc = 0;
  uint64_t over = 0;
  KlmMidFn mid = nullptr;
  // After the list was written: were all pages good? (page_size: a power of two)
  bool ok(uint64_t page_size) const noexcept {
    return ((acc & (page_size - 1)) | (acc >> 63) | over) == 0;
  }
};

namespace klm_impl {

template <bool kCheck>
inline void check_one(PageCheck* pc, uint64_t p) noexcept {
  if constexpr (kCheck) {
    const uint64_t d = p - pc->base;
    pc->acc |= d;
    pc->over |= static_cast<int64_t>(d) > static_cast<int64_t>(pc->span - 1);
  }
}

// klm_range's middle entries two per step with SSE (SSE4.2: also checked; SSSE3: unchecked
// only): advances i and out past the pairs written, leaving an odd last entry (and every entry
// without SSE) to the scalar loop. Inline: it is the loop of klm_range, split for reading only.
template <bool kCheck>
[[gnu::always_inline]] inline void klm_mid_pairs([[maybe_unused]] uint8_t*& out,
                                                 [[maybe_unused]] uint32_t& i,
                                                 [[maybe_unused]] uint32_t mid_end,
                                                 [[maybe_unused]] const uint64_t* pages,
                                                 [[maybe_unused]] uint64_t head,
                                                 [[maybe_unused]] PageCheck* pc) noexcept {
#if defined(__SSE4_2__)
  // Two entries per step: one 16-byte load of two addresses, one pshufb swaps both, each
  // entry one 16-byte store of {head, address}. The check: psubq, por, pcmpgtq, por.
  const __m128i head2 = _mm_set1_epi64x(static_cast<long long>(head));
  const __m128i swap64 = _mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
  __m128i vbase, vlast, vacc, vover;
  if constexpr (kCheck) {
    vbase = _mm_set1_epi64x(static_cast<long long>(pc->base));
    vlast = _mm_set1_epi64x(static_cast<long long>(pc->span - 1));
    vacc = _mm_setzero_si128();
    vover = _mm_setzero_si128();
  }
  for (; i + 2 <= mid_end; i += 2, out += 2 * kKlmBytes) {
    const __m128i p = _mm_loadu_si128(reinterpret_cast<const __m128i*>(pages + i));
    if constexpr (kCheck) {
      const __m128i d = _mm_sub_epi64(p, vbase);
      vacc = _mm_or_si128(vacc, d);
      vover = _mm_or_si128(vover, _mm_cmpgt_epi64(d, vlast));
    }
    const __m128i a = _mm_shuffle_epi8(p, swap64);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi64(head2, a));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + kKlmBytes), _mm_unpackhi_epi64(head2, a));
  }
  if constexpr (kCheck) {
    vacc = _mm_or_si128(vacc, _mm_unpackhi_epi64(vacc, vacc));
    vover = _mm_or_si128(vover, _mm_unpackhi_epi64(vover, vover));
    pc->acc |= static_cast<uint64_t>(_mm_cvtsi128_si64(vacc));
    pc->over |= static_cast<uint64_t>(_mm_cvtsi128_si64(vover));
  }
#elif defined(__SSSE3__)
  if constexpr (!kCheck) {
    const __m128i head2 = _mm_set1_epi64x(static_cast<long long>(head));
    const __m128i swap64 = _mm_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7);
    for (; i + 2 <= mid_end; i += 2, out += 2 * kKlmBytes) {
      const __m128i a =
          _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(pages + i)), swap64);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out), _mm_unpacklo_epi64(head2, a));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + kKlmBytes), _mm_unpackhi_epi64(head2, a));
    }
  }
#endif
}

// Entries [from, to) of the KLM list of a chunk-page map, zero padding (entries >= n) included.
// The first and last entries may cover part of a page and are written on their own; every
// middle entry is one whole page: 8 constant bytes {byte_count = page_size, mkey = parent lkey}
// and the swapped page address. Everything the loop needs is in locals, so the stores (which may
// alias anything) do not make the compiler reload the request per entry. kCheck: every page of
// [from, to) is also folded into *pc (the bytes written are the same).
template <bool kCheck>
inline void klm_range(uint8_t* out, uint32_t from, uint32_t to, const UmrMap& m,
                      PageCheck* pc) noexcept {
  const uint64_t* const pages = m.pages.data();
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  const uint64_t ps = m.page_size;
  const uint32_t lkey = m.parent_lkey;
  uint32_t i = from;
  if (i == 0 && i < to && n != 0) {
    // First entry: from first_offset to the page's end, or less when that is all there is.
    const uint64_t bytes = std::min<uint64_t>(ps - m.first_offset, m.length);
    check_one<kCheck>(pc, pages[0]);
    set_klm(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(out), static_cast<uint32_t>(bytes), lkey,
            pages[0] + m.first_offset);
    out += kKlmBytes;
    ++i;
  }
  const uint32_t mid_end = std::min(to, n - (n != 0));
  if (i < mid_end) {
    // {byte_count, mkey} as the 8 bytes they are in the WQE (two big-endian words).
    const uint64_t head =
        uint64_t{detail::bswap(m.page_size)} | (uint64_t{detail::bswap(lkey)} << 32);
    if constexpr (kCheck) {
      if (pc->mid && mid_end - i > kKlmMidCallMin) {
        pc->mid(pages + i, mid_end - i, out, head, pc);
        out += size_t{mid_end - i} * kKlmBytes;
        i = mid_end;
      }
    }
    klm_mid_pairs<kCheck>(out, i, mid_end, pages, head, pc);
    for (; i < mid_end; ++i, out += kKlmBytes) {
      check_one<kCheck>(pc, pages[i]);
      const uint64_t addr = detail::bswap(pages[i]);
      std::memcpy(out, &head, sizeof(head));
      std::memcpy(out + 8, &addr, sizeof(addr));
    }
  }
  if (i < to && i + 1 == n) {
    // Last entry (n > 1 here): what is left of `length` after the pages before it.
    const uint64_t before = (ps - m.first_offset) + uint64_t(n - 2) * ps;
    const uint64_t bytes = std::min<uint64_t>(ps, m.length - before);
    check_one<kCheck>(pc, pages[i]);
    set_klm(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(out), static_cast<uint32_t>(bytes), lkey,
            pages[i]);
    out += kKlmBytes;
    ++i;
  }
  if (i < to) std::memset(out, 0, size_t{to - i} * kKlmBytes);
}

}  // namespace klm_impl

namespace klm_impl {
template <bool kCheck>
inline uint32_t write_ring(RingCursor& cur, const UmrMap& m, PageCheck* pc) noexcept {
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  const uint32_t total = align4(n);
  uint32_t i = 0;
  while (i < total) {  // at most twice: once before the ring's end, once after it
    const uint32_t run_end = std::min(total, i + cur.contiguous() / kKlmBytes);
    klm_range<kCheck>(cur.here(), i, run_end, m, pc);
    cur.advance((run_end - i) * kKlmBytes);
    i = run_end;
  }
  return n;
}
}  // namespace klm_impl

inline uint32_t write_page_klms(RingCursor& cur, const UmrMap& m) noexcept {
  return klm_impl::write_ring<false>(cur, m, nullptr);
}
// The same, folding every page into `pc` (validation in the same pass; pc.ok() afterwards).
inline uint32_t write_page_klms(RingCursor& cur, const UmrMap& m, PageCheck& pc) noexcept {
  return klm_impl::write_ring<true>(cur, m, &pc);
}

inline uint32_t write_page_klms(mlx5_wqe_umr_klm_seg* out, const UmrMap& m) noexcept {
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  klm_impl::klm_range<false>(reinterpret_cast<uint8_t*>(out), 0, align4(n), m, nullptr);
  return n;
}
inline uint32_t write_page_klms(mlx5_wqe_umr_klm_seg* out, const UmrMap& m,
                                PageCheck& pc) noexcept {
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  klm_impl::klm_range<true>(reinterpret_cast<uint8_t*>(out), 0, align4(n), m, &pc);
  return n;
}

// The KLM list of a chunk-page map into memory that does not wrap (the hot path's inline map),
// checking every page in the same pass: a writer per vector width, chosen once at setup
// (klm_list_variant) like KlmMidFn. The request must already be valid but for its pages: n >= 1,
// first_offset < page_size, end = first_offset + length with (n - 1) * ps < end <= n * ps. Its
// constants in one place (of()): head = {be page_size, be lkey}, lkey_hi = be lkey << 32, pages p
// with p - base page aligned and <= last pass; check = the bits of p - base that fail it as
// misaligned or below base. Writes align4(n) entries, the bytes of write_page_klms; returns 0
// when every page passes (PageCheck::ok), else nonzero.
struct KlmListConsts {
  uint64_t head = 0;
  uint64_t lkey_hi = 0;
  uint64_t base = 0;
  uint64_t last = 0;
  uint64_t page_size = 0;
  uint64_t check = 0;
  uint32_t page_shift = 0;
  // Pages of page_size bytes (a power of two) from base up to base + span, under lkey.
  static KlmListConsts of(uint64_t page_size, uint32_t lkey, uint64_t base,
                          uint64_t span) noexcept {
    KlmListConsts k;
    k.lkey_hi = uint64_t{detail::bswap(lkey)} << 32;
    k.head = uint64_t{detail::bswap(static_cast<uint32_t>(page_size))} | k.lkey_hi;
    k.base = base;
    k.last = span - 1;
    k.page_size = page_size;
    k.check = (page_size - 1) | (uint64_t{1} << 63);
    k.page_shift = static_cast<uint32_t>(__builtin_ctzll(page_size));
    return k;
  }
};
using KlmListFn = uint64_t (*)(uint8_t* out, const uint64_t* pages, uint32_t n,
                               uint64_t first_offset, uint64_t end,
                               const KlmListConsts& k) noexcept;
// The whole-list writer of v (never nullptr for a supported v; nullptr when v is not).
KlmListFn klm_list_variant(KlmVariant v) noexcept;

// The 128-byte head of a map (ctrl | umr ctrl | mkey ctx): flags = INLINE or 0 (pointer mode),
// plus m.check; START_ADDR in the mask only when m.set_start_addr. Inline: the hot path builds
// it in registers (write_umr_head).
inline void write_umr_map_head(RingCursor& cur, const UmrMap& m, uint32_t ds, uint8_t flags,
                               uint16_t octowords) noexcept {
  const uint64_t base = m.no_atomic_mask ? kMapMaskNoAtomic : kMapMask;
  const uint64_t mask = m.set_start_addr ? base | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR : base;
  write_umr_head(cur, ctrl_word0(m.wqe_index, MLX5_OPCODE_UMR, 0, m.qpn, ds),
                 ctrl_word1(m.fm_ce_se, Be32::from_host(m.mkey)),
                 umr_ctrl_word0(static_cast<uint8_t>(flags | m.check), octowords), mask,
                 mkc_word0(false, m.access, static_cast<uint8_t>(m.mkey & 0xff)), m.start_addr,
                 m.length);
}

//  Inline UMR map WQE: ctrl | umr ctrl | mkey ctx | KLM x align4(N)
//  DS = 8 + align4(N) (N <= kMaxInlineKlm).
inline uint32_t build_umr_map_inline(RingCursor& cur, const UmrMap& m) noexcept {
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  RDMX_DEBUG_ASSERT(n <= kMaxInlineKlm);
  const uint32_t ds = umr_inline_ds(n);
  write_umr_map_head(cur, m, ds, MLX5_WQE_UMR_CTRL_FLAG_INLINE, static_cast<uint16_t>(align4(n)));
  write_page_klms(cur, m);
  return ds;
}
// The same, checking the pages in the KLM pass (pc.ok() afterwards; same bytes).
inline uint32_t build_umr_map_inline(RingCursor& cur, const UmrMap& m, PageCheck& pc) noexcept {
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  RDMX_DEBUG_ASSERT(n <= kMaxInlineKlm);
  const uint32_t ds = umr_inline_ds(n);
  write_umr_map_head(cur, m, ds, MLX5_WQE_UMR_CTRL_FLAG_INLINE, static_cast<uint16_t>(align4(n)));
  write_page_klms(cur, m, pc);
  return ds;
}

//  Pointer-mode UMR map WQE: ctrl | umr ctrl | mkey ctx | data seg -> KLM array. 9 DS.
//  The caller has written the KLM array (2 KiB aligned) in registered memory `klm_lkey`.
inline uint32_t build_umr_map_pointer(RingCursor& cur, const UmrMap& m, uint64_t klm_addr,
                                      uint32_t klm_lkey) noexcept {
  const uint32_t n = static_cast<uint32_t>(m.pages.size());
  write_umr_map_head(cur, m, kUmrPointerDs, 0, static_cast<uint16_t>(align4(n)));
  // Pointer to the KLM array: byte_count = array bytes rounded to 64 (kernel convention).
  const uint32_t bytes = (align4(n) * kKlmBytes + 63u) & ~63u;
  set_data(cur.take<mlx5_wqe_data_seg>(), bytes, klm_lkey, klm_addr);
  return kUmrPointerDs;
}

//  Invalidate (unmap) UMR WQE: ctrl | umr ctrl {mask FREE} | mkey ctx {free=1}. 8 DS.
//  check = kUmrFlagFailIfFree makes the device refuse to free an already free mkey.
inline uint32_t build_umr_invalidate(RingCursor& cur, uint32_t qpn, uint16_t wqe_index,
                                     uint8_t fm_ce_se, uint32_t mkey, uint8_t check) noexcept {
  write_umr_head(cur, ctrl_word0(wqe_index, MLX5_OPCODE_UMR, 0, qpn, kUmrHeaderDs),
                 ctrl_word1(fm_ce_se, Be32::from_host(mkey)),
                 umr_ctrl_word0(static_cast<uint8_t>(MLX5_WQE_UMR_CTRL_FLAG_INLINE | check), 0),
                 MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE,
                 mkc_word0(true, 0, static_cast<uint8_t>(mkey & 0xff)), 0, 0);
  return kUmrHeaderDs;
}

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
};

// --------------------------------------------------------------------------------------------
// Verbs-shaped UMR builders: the WQEs rdma-core's providers/mlx5/qp.c builds for
// mlx5dv_wr_mr_list, mlx5dv_wr_mr_interleaved and ibv_wr_local_inv (doc/guides/mlx5-facts.md §3).
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
  // Not in rdma-core's WQEs (both 0 there): the window layer's free-state check
  // (kUmrFlagFailIfNotFree) and, on devices with umr_modify_atomic_disabled, kMapMaskNoAtomic.
  uint8_t check = 0;
  bool no_atomic_mask = false;
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

//  Invalidate of a type-2 memory window: rdma-core's LOCAL_INV above (flags
//  INLINE|TRANSLATION_OFFSET|CHECK_QPN = 0x98, mask FREE|KEY|QPN = 0x20006000, mkey ctx {free 1,
//  qpn 0xffffff}: the device refuses it from another QP than the one the window is bound to, and
//  unbinds the window from its QP) with one difference: the key byte is the window's current key
//  (rkey & 0xff), not 0, so the window keeps its key and the next bind's key differs from every
//  retired one. 8 DS.
uint32_t build_mw_invalidate(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                             uint32_t rkey) noexcept;

// A memory window bind (ibv_wr_bind_mw / IBV_WR_BIND_MW). rdma-core builds it in
// providers/mlx5/qp.c set_bind_wr (set_umr_control_seg, set_umr_mkey_seg, set_umr_data_seg).
struct BindMw {
  uint32_t qpn = 0;  // the QP that posts it (and, type 2, the QP the window is bound to)
  uint16_t wqe_index = 0;
  uint8_t fm_ce_se = 0;
  uint32_t mw_rkey = 0;   // the window's rkey before the bind (ctrl imm: which mkey)
  uint32_t new_rkey = 0;  // its rkey after (the low byte is written: ibv_inc_rkey's)
  bool type2 = true;
  uint8_t access = 0;  // MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_* (LW/RR/RW/A)
  bool zero_based = false;
  uint64_t addr = 0;    // the bound range of the MR (virtual address)
  uint64_t length = 0;  // 1 .. 2^31 (a single KLM); 0 unbinds
  uint32_t mr_lkey = 0;
  bool no_atomic_mask = false;  // leave mask bit 21 (atomic) clear: umr_modify_atomic_disabled
};

//  BIND_MW, length > 0: 12 DS
//  ctrl {UMR, imm = mw_rkey} |
//  umr ctrl {flags INLINE|TRANSLATION_OFFSET (type 2: |CHECK_FREE) = 0x90 / 0xb0, octowords 4,
//            mask FREE|KEY|LEN|START_ADDR|LW|RR|RW|A (type 2: |QPN) = 0x203c2041 / 0x203c6041} |
//  mkey ctx {free 0, access, qpn = type 2 ? qpn : 0xffffff, key = new_rkey & 0xff,
//            start_addr = zero_based ? 0 : addr, len = length} |
//  one KLM {length, mr_lkey, addr} padded with zeros to 64 bytes.
//  length 0 (unbind): 8 DS, no KLM; flags INLINE|TRANSLATION_OFFSET (type 2: |CHECK_QPN),
//  octowords 0, mask FREE|KEY (type 2: |QPN), mkey ctx {free 1, qpn 0xffffff, key}.
//  The next WQE must carry INITIATOR_SMALL_FENCE (rdma-core sets it: the bind is a UMR).
inline constexpr uint64_t kBindMwMask =
    MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_LEN | MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_LOCAL_WRITE |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_READ |
    MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_REMOTE_WRITE | MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC;
inline constexpr uint64_t kMaxBindMwLength = uint64_t{1} << 31;  // one KLM: 2 GiB
uint32_t build_bind_mw(RingCursor& cur, const BindMw& b) noexcept;

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
