#include <algorithm>

#include <rdmx/mlx5/prm/wqe.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace rdmx::mlx5::prm {

// ---- KLM middle-run variants (see PageCheck) ------------------------------------------------
namespace {
#if defined(__x86_64__)
// AVX2: four entries per step. The four addresses are loaded as {a0 a2 | a1 a3} (vpermq 0xd8,
// one instruction with the load), so that vpshufb (each address byte-swapped in its lane) and
// vpunpck{l,h}qdq with the constant {byte_count, mkey} word give the entries in list order:
// {e0 e1} and {e2 e3}, two 32-byte stores. The check of the differences d = v - base is vpor
// (alignment and sign) and vpcmpgtq (past the end), folded into acc/over. Eight entries per loop
// turn; the last 1-7 take a second 4-step and the masked tail (klm_list_avx2) or scalar steps.
[[gnu::target("avx2"), gnu::always_inline]] inline __m256i load4_avx2(const uint64_t* p) noexcept {
  return _mm256_permute4x64_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)), 0xd8);
}

struct Klm4Avx2 {
  __m256i head4, swap64, vbase, vlast;
  __m256i acc, over;
  [[gnu::target("avx2"), gnu::always_inline]] Klm4Avx2(uint64_t head, uint64_t base,
                                                       uint64_t last) noexcept
      : head4(_mm256_set1_epi64x(static_cast<long long>(head))),
        swap64(_mm256_set_epi8(8, 9, 10, 11, 12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,
                               12, 13, 14, 15, 0, 1, 2, 3, 4, 5, 6, 7)),
        vbase(_mm256_set1_epi64x(static_cast<long long>(base))),
        vlast(_mm256_set1_epi64x(static_cast<long long>(last))),
        acc(_mm256_setzero_si256()),
        over(_mm256_setzero_si256()) {}
  // Checks d (the differences of the lanes that count) and gives the entries of v (from
  // load4_avx2): e01 = {e0 e1}, e23 = {e2 e3}.
  [[gnu::target("avx2"), gnu::always_inline]] void entries(__m256i v, __m256i d, __m256i& e01,
                                                           __m256i& e23) noexcept {
    acc = _mm256_or_si256(acc, d);
    over = _mm256_or_si256(over, _mm256_cmpgt_epi64(d, vlast));
    const __m256i a = _mm256_shuffle_epi8(v, swap64);
    e01 = _mm256_unpacklo_epi64(head4, a);
    e23 = _mm256_unpackhi_epi64(head4, a);
  }
  [[gnu::target("avx2"), gnu::always_inline]] void step(const uint64_t* p, uint8_t* out) noexcept {
    const __m256i v = load4_avx2(p);
    __m256i e01, e23;
    entries(v, _mm256_sub_epi64(v, vbase), e01, e23);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), e01);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + 2 * kKlmBytes), e23);
  }
  // Whole steps over [p, p + (n & ~3)): eight entries per turn, then one more four. p and out
  // end past them (where the rest of the list goes).
  [[gnu::target("avx2"), gnu::always_inline]] void run(const uint64_t*& p, uint32_t n,
                                                       uint8_t*& out) noexcept {
    const uint64_t* const end8 = p + (n & ~7u);
    for (; p != end8; p += 8, out += 8 * kKlmBytes) {
      step(p, out);
      step(p + 4, out + 4 * kKlmBytes);
    }
    if (n & 4) {
      step(p, out);
      p += 4;
      out += 4 * kKlmBytes;
    }
  }
  // The lanes of acc / over folded into one word each.
  [[gnu::target("avx2"), gnu::always_inline]] static uint64_t fold(__m256i x) noexcept {
    __m128i h = _mm_or_si128(_mm256_castsi256_si128(x), _mm256_extracti128_si256(x, 1));
    h = _mm_or_si128(h, _mm_unpackhi_epi64(h, h));
    return static_cast<uint64_t>(_mm_cvtsi128_si64(h));
  }
};

[[gnu::target("avx2")]] void klm_mid_avx2(const uint64_t* pages, uint32_t count, uint8_t* out,
                                          uint64_t head, PageCheck* pc) noexcept {
  Klm4Avx2 k(head, pc->base, pc->span - 1);
  const uint64_t* p = pages;
  k.run(p, count, out);
  uint64_t a = Klm4Avx2::fold(k.acc);
  uint64_t o = Klm4Avx2::fold(k.over);
  for (; p < pages + count; ++p, out += kKlmBytes) {
    const uint64_t d = *p - pc->base;
    a |= d;
    o |= static_cast<int64_t>(d) > static_cast<int64_t>(pc->span - 1);
    const uint64_t addr = detail::bswap(*p);
    std::memcpy(out, &head, sizeof(head));
    std::memcpy(out + 8, &addr, sizeof(addr));
  }
  pc->acc |= a;
  pc->over |= o;
}

// The whole-list writers write every page (first and last included) as a whole-page entry; then
// the two partial byte counts are written over: the last page's first, the first page's second
// (with its address), so that a one-page list ends with the first page's count.
inline void partial_entries(uint8_t* out, const uint64_t* pages, uint32_t n, uint64_t first_offset,
                            uint64_t end, const KlmListConsts& k) noexcept {
  const uint32_t last_bc =
      detail::bswap(static_cast<uint32_t>(end - (uint64_t{n - 1} << k.page_shift)));
  std::memcpy(out + size_t{n - 1} * kKlmBytes, &last_bc, sizeof(last_bc));
  const uint32_t first_bc =
      detail::bswap(static_cast<uint32_t>((end < k.page_size ? end : k.page_size) - first_offset));
  std::memcpy(out, &first_bc, sizeof(first_bc));
  put_u64(out + 8, detail::bswap(pages[0] + first_offset));
}

// The whole list: every page (first and last included) as a whole-page entry, four per step as
// klm_mid_avx2; the last 1-3 pages with a masked load (lanes past the list read nothing and
// give zero entries: the padding). Then the two partial byte counts are written over: the last
// page's first, the first page's second (with its address), so that a one-page list ends with
// the first page's count.
[[gnu::target("avx2")]] uint64_t klm_list_avx2(uint8_t* out, const uint64_t* pages, uint32_t n,
                                               uint64_t first_offset, uint64_t end,
                                               const KlmListConsts& k) noexcept {
  Klm4Avx2 w(k.head, k.base, k.last);
  const uint64_t* p = pages;
  uint8_t* o = out;
  w.run(p, n, o);
  if (const uint32_t rest = n & 3u) {
    alignas(32) static constexpr int64_t kLanes[4][4] = {
        {0, 0, 0, 0}, {-1, 0, 0, 0}, {-1, -1, 0, 0}, {-1, -1, -1, 0}};
    const __m256i m = _mm256_load_si256(reinterpret_cast<const __m256i*>(kLanes[rest]));
    const __m256i v = _mm256_maskload_epi64(reinterpret_cast<const long long*>(p), m);
    // The check over the list's lanes only (d in load order, masked); entry j (16 bytes) is
    // kept when lane j is in the list, else zeroed (padding).
    __m256i e01, e23;
    w.entries(_mm256_permute4x64_epi64(v, 0xd8), _mm256_and_si256(_mm256_sub_epi64(v, w.vbase), m),
              e01, e23);
    const __m256i m01 = _mm256_permute4x64_epi64(m, 0x50);  // lanes 0 0 1 1
    const __m256i m23 = _mm256_permute4x64_epi64(m, 0xfa);  // lanes 2 2 3 3
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o), _mm256_and_si256(e01, m01));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(o + 2 * kKlmBytes), _mm256_and_si256(e23, m23));
  }
  partial_entries(out, pages, n, first_offset, end, k);
  // A page fails when its difference is misaligned or negative (a bit of k.check set in acc) or
  // past the end (an all-ones lane of over, which has them too): one vptest.
  return static_cast<uint64_t>(!_mm256_testz_si256(
      _mm256_or_si256(w.acc, w.over), _mm256_set1_epi64x(static_cast<long long>(k.check))));
}

// AVX-512 (F, BW, DQ): eight entries per step. One 64-byte load of eight addresses; d = v - base;
// the check is one unsigned compare into a mask (past the end, or below the base: the difference
// wraps) and vpor into acc (alignment); vpshufb swaps the addresses in their lanes and two
// vpermt2q put each beside the constant {byte_count, mkey} word: {e0 e1 e2 e3} and {e4 .. e7},
// two 64-byte stores. The last 1-7 entries take masked loads and stores (nothing is read or
// written past the list; the whole-list writer zeroes the padding up to align4(n)).
constexpr uint8_t spread4(uint32_t lanes) noexcept {  // lane j of 4 -> qwords 2j, 2j+1
  uint8_t q = 0;
  for (uint32_t j = 0; j < 4; ++j)
    if (lanes & (1u << j)) q = static_cast<uint8_t>(q | (3u << (2 * j)));
  return q;
}
inline constexpr uint8_t kSpread4[16] = {spread4(0),  spread4(1),  spread4(2),  spread4(3),
                                         spread4(4),  spread4(5),  spread4(6),  spread4(7),
                                         spread4(8),  spread4(9),  spread4(10), spread4(11),
                                         spread4(12), spread4(13), spread4(14), spread4(15)};

// GCC 12's AVX-512 intrinsics pass _mm512_undefined_*() where the mask form needs a source, and
// -Wuninitialized reports it once inlined (GCC bug 105593, fixed in GCC 13).
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#define RDMX_AVX512 gnu::target("avx512f,avx512bw,avx512dq")
struct Klm8Avx512 {
  static constexpr long long kSwapLo = 0x0001020304050607;
  static constexpr long long kSwapHi = 0x08090a0b0c0d0e0f;
  __m512i head8, swap64, vbase, vlast, idx_lo, idx_hi;
  __m512i acc;
  __mmask8 over = 0;
  [[RDMX_AVX512, gnu::always_inline]] Klm8Avx512(uint64_t head, uint64_t base,
                                                 uint64_t last) noexcept
      : head8(_mm512_set1_epi64(static_cast<long long>(head))),
        // Each 16-byte lane: bytes 7..0 then 15..8 (every address byte-swapped in place).
        swap64(_mm512_set_epi64(kSwapHi, kSwapLo, kSwapHi, kSwapLo, kSwapHi, kSwapLo, kSwapHi,
                                kSwapLo)),
        vbase(_mm512_set1_epi64(static_cast<long long>(base))),
        vlast(_mm512_set1_epi64(static_cast<long long>(last))),
        idx_lo(_mm512_set_epi64(11, 0, 10, 0, 9, 0, 8, 0)),
        idx_hi(_mm512_set_epi64(15, 0, 14, 0, 13, 0, 12, 0)),
        acc(_mm512_setzero_si512()) {}
  // Checks the lanes of m (v's other lanes must be zero) and gives the entries of v's eight
  // addresses: lo = {e0 .. e3}, hi = {e4 .. e7}.
  [[RDMX_AVX512, gnu::always_inline]] void entries(__m512i v, __mmask8 m, __m512i& lo,
                                                   __m512i& hi) noexcept {
    const __m512i d = _mm512_maskz_sub_epi64(m, v, vbase);
    acc = _mm512_or_si512(acc, d);
    over = static_cast<__mmask8>(over | _mm512_mask_cmpgt_epu64_mask(m, d, vlast));
    const __m512i a = _mm512_shuffle_epi8(v, swap64);
    lo = _mm512_permutex2var_epi64(head8, idx_lo, a);
    hi = _mm512_permutex2var_epi64(head8, idx_hi, a);
  }
  // Whole groups of eight over pages[0, n & ~7).
  [[RDMX_AVX512, gnu::always_inline]] void run(const uint64_t* p, uint32_t n,
                                               uint8_t* out) noexcept {
    for (const uint64_t* const end = p + (n & ~7u); p != end; p += 8, out += 8 * kKlmBytes) {
      __m512i lo, hi;
      entries(_mm512_loadu_si512(p), 0xff, lo, hi);
      _mm512_storeu_si512(out, lo);
      _mm512_storeu_si512(out + 4 * kKlmBytes, hi);
    }
  }
  // The last n & 7 (1-7) of pages[0, n): their entries (lo, hi; lanes past the list read
  // nothing and are zero), where they go in out (o), and the mask of their lanes (returned). The
  // caller stores them: masked (nothing written past the entries) or whole (zero padding).
  [[RDMX_AVX512, gnu::always_inline]] __mmask8 tail(const uint64_t* pages, uint32_t n, uint8_t* out,
                                                    uint8_t*& o, __m512i& lo,
                                                    __m512i& hi) noexcept {
    const uint32_t whole = n & ~7u;
    const __mmask8 m = static_cast<__mmask8>((1u << (n & 7u)) - 1);
    entries(_mm512_maskz_loadu_epi64(m, pages + whole), m, lo, hi);
    o = out + size_t{whole} * kKlmBytes;
    return m;
  }
  // acc's lanes folded into one word (without _mm512_reduce_or_epi64, whose GCC 12 expansion
  // trips -Wuninitialized).
  [[RDMX_AVX512, gnu::always_inline]] uint64_t acc_word() const noexcept {
    const __m256i y =
        _mm512_castsi512_si256(_mm512_or_si512(acc, _mm512_shuffle_i64x2(acc, acc, 0x4e)));
    __m128i h = _mm_or_si128(_mm256_castsi256_si128(y), _mm256_extracti128_si256(y, 1));
    h = _mm_or_si128(h, _mm_unpackhi_epi64(h, h));
    return static_cast<uint64_t>(_mm_cvtsi128_si64(h));
  }
};

[[RDMX_AVX512]] void klm_mid_avx512(const uint64_t* pages, uint32_t count, uint8_t* out,
                                    uint64_t head, PageCheck* pc) noexcept {
  Klm8Avx512 w(head, pc->base, pc->span - 1);
  w.run(pages, count, out);
  if (count & 7u) {
    __m512i lo, hi;
    uint8_t* o;
    const __mmask8 m = w.tail(pages, count, out, o, lo, hi);
    _mm512_mask_storeu_epi64(o, kSpread4[m & 0xf], lo);
    _mm512_mask_storeu_epi64(o + 4 * kKlmBytes, kSpread4[m >> 4], hi);
  }
  pc->acc |= w.acc_word();
  pc->over |= w.over != 0;
}

// The whole list, eight entries per step; the last 1-7 with a masked load, their entries kept
// when in the list and zero otherwise, up to align4(n) entries (one or two 64-byte stores).
[[RDMX_AVX512]] uint64_t klm_list_avx512(uint8_t* out, const uint64_t* pages, uint32_t n,
                                         uint64_t first_offset, uint64_t end,
                                         const KlmListConsts& k) noexcept {
  Klm8Avx512 w(k.head, k.base, k.last);
  w.run(pages, n, out);
  if (n & 7u) {
    __m512i lo, hi;
    uint8_t* o;
    const __mmask8 m = w.tail(pages, n, out, o, lo, hi);
    _mm512_storeu_si512(o, _mm512_maskz_mov_epi64(kSpread4[m & 0xf], lo));
    if (m >> 4)
      _mm512_storeu_si512(o + 4 * kKlmBytes, _mm512_maskz_mov_epi64(kSpread4[m >> 4], hi));
  }
  partial_entries(out, pages, n, first_offset, end, k);
  return (w.acc_word() & (k.page_size - 1)) | w.over;
}
#undef RDMX_AVX512
#pragma GCC diagnostic pop
#endif

uint64_t klm_list_baseline(uint8_t* out, const uint64_t* pages, uint32_t n, uint64_t first_offset,
                           uint64_t end, const KlmListConsts& k) noexcept {
  UmrMap m;
  m.parent_lkey = detail::bswap(static_cast<uint32_t>(k.lkey_hi >> 32));
  m.page_size = static_cast<uint32_t>(k.page_size);
  m.first_offset = static_cast<uint32_t>(first_offset);
  m.length = end - first_offset;
  m.pages = std::span<const uint64_t>(pages, n);
  PageCheck pc;
  pc.base = k.base;
  pc.span = k.last + 1;
  write_page_klms(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(out), m, pc);
  return pc.ok(k.page_size) ? 0 : 1;
}
}  // namespace

KlmListFn klm_list_variant(KlmVariant v) noexcept {
  if (!klm_variant_supported(v)) return nullptr;
#if defined(__x86_64__)
  if (v == KlmVariant::kAvx2) return &klm_list_avx2;
  if (v == KlmVariant::kAvx512) return &klm_list_avx512;
#endif
  return &klm_list_baseline;
}

const char* klm_variant_name(KlmVariant v) noexcept {
  switch (v) {
    case KlmVariant::kBaseline:
      return "baseline";
    case KlmVariant::kAvx2:
      return "avx2";
    case KlmVariant::kAvx512:
      return "avx512";
  }
  return "?";
}

bool klm_variant_supported(KlmVariant v) noexcept {
  switch (v) {
    case KlmVariant::kBaseline:
      return true;
    case KlmVariant::kAvx2:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx2");
#else
      return false;
#endif
    case KlmVariant::kAvx512:
#if defined(__x86_64__)
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512dq");
#else
      return false;
#endif
  }
  return false;
}

KlmVariant klm_best_variant(uint32_t max_simd_bits) noexcept {
  if (max_simd_bits >= 512 && klm_variant_supported(KlmVariant::kAvx512))
    return KlmVariant::kAvx512;
  if (max_simd_bits >= 256 && klm_variant_supported(KlmVariant::kAvx2)) return KlmVariant::kAvx2;
  return KlmVariant::kBaseline;
}

KlmMidFn klm_mid_variant(KlmVariant v) noexcept {
  if (!klm_variant_supported(v)) return nullptr;
#if defined(__x86_64__)
  if (v == KlmVariant::kAvx2) return &klm_mid_avx2;
  if (v == KlmVariant::kAvx512) return &klm_mid_avx512;
#endif
  return nullptr;
}

namespace {
// ctrl | umr ctrl | mkey ctx of a verbs map UMR (rdma-core mkey_configure + access + layout).
void umr_verbs_header(RingCursor& cur, const UmrVerbsHead& h, uint32_t ds, uint16_t octowords,
                      uint64_t len) noexcept {
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), h.wqe_index, MLX5_OPCODE_UMR, 0, h.qpn, ds, h.fm_ce_se,
           Be32::from_host(h.mkey));
  // The UMR control segment shares the first WQEBB with the ctrl segment: never wrapped.
  auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(cur.here());
  cur.advance(kUmrCtrlSegBytes);
  set_umr_ctrl(u, static_cast<uint8_t>(MLX5_WQE_UMR_CTRL_FLAG_INLINE | h.check), octowords,
               h.no_atomic_mask ? kMapMaskNoAtomic : kMapMask);
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

namespace {
// LOCAL_INV as rdma-core's set_bind_wr writes it, with `key` in the key byte.
uint32_t local_inv_with_key(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                            uint32_t invalidate_key, uint8_t key) noexcept {
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), wqe_index, MLX5_OPCODE_UMR, 0, qpn, kUmrHeaderDs,
           fm_ce_se, Be32::from_host(invalidate_key));
  auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(cur.here());
  cur.advance(kUmrCtrlSegBytes);
  set_umr_ctrl(u, kLocalInvUmrFlags, 0, kLocalInvMask);
  MkeyCtx c;
  c.free = true;
  c.key = key;
  c.qpn = kMkeyQpnNone;
  set_mkey_ctx(cur.take<mlx5_wqe_mkey_context_seg>(), c);
  return kUmrHeaderDs;
}
}  // namespace

uint32_t build_local_inv(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                         uint32_t invalidate_key) noexcept {
  return local_inv_with_key(cur, qpn, wqe_index, fm_ce_se, invalidate_key, 0);
}

uint32_t build_mw_invalidate(RingCursor& cur, uint32_t qpn, uint16_t wqe_index, uint8_t fm_ce_se,
                             uint32_t rkey) noexcept {
  return local_inv_with_key(cur, qpn, wqe_index, fm_ce_se, rkey, static_cast<uint8_t>(rkey));
}

uint32_t build_bind_mw(RingCursor& cur, const BindMw& b) noexcept {
  const bool bind = b.length != 0;
  const uint32_t ds = bind ? kUmrHeaderDs + 4 : kUmrHeaderDs;
  set_ctrl(cur.take<mlx5_wqe_ctrl_seg>(), b.wqe_index, MLX5_OPCODE_UMR, 0, b.qpn, ds, b.fm_ce_se,
           Be32::from_host(b.mw_rkey));
  auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(cur.here());
  cur.advance(kUmrCtrlSegBytes);
  uint8_t flags = MLX5_WQE_UMR_CTRL_FLAG_INLINE | MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET;
  uint64_t mask =
      bind ? kBindMwMask
           : uint64_t{MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE | MLX5_WQE_UMR_CTRL_MKEY_MASK_MKEY};
  if (b.type2) {
    flags |= bind ? MLX5_WQE_UMR_CTRL_FLAG_CHECK_FREE : MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN;
    mask |= MLX5_WQE_UMR_CTRL_MKEY_MASK_QPN;
  }
  if (b.no_atomic_mask) mask &= ~uint64_t{MLX5_WQE_UMR_CTRL_MKEY_MASK_ACCESS_ATOMIC};
  set_umr_ctrl(u, flags, bind ? 4 : 0, mask);
  MkeyCtx c;
  c.key = static_cast<uint8_t>(b.new_rkey & 0xff);
  c.qpn = b.type2 && bind ? b.qpn : kMkeyQpnNone;
  if (bind) {
    c.access = b.access;
    c.start_addr = b.zero_based ? 0 : b.addr;
    c.len = b.length;
  } else {
    c.free = true;
  }
  set_mkey_ctx(cur.take<mlx5_wqe_mkey_context_seg>(), c);
  if (bind) {
    set_klm(cur.take<mlx5_wqe_umr_klm_seg>(), static_cast<uint32_t>(b.length), b.mr_lkey, b.addr);
    zero_entries(cur, 1, 4);
  }
  return ds;
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
