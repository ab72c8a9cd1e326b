// lib/win without a device: validation (posts nothing), the UMR bytes a map and an unmap
// write (read back with the prm decoder), fences, key rotation, cache/depot and the state
// checker, with the test playing the device's part on the CQ (suite 'unit').
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>

#include <rdmx/mem/arena.hpp>
#include <rdmx/mem/page_allocator.hpp>
#include <rdmx/mlx5/prm/decode.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

#include "plain_device.hpp"

namespace {

using rdmx::Errc;
using rdmx::mlx5::kAccessLocalWrite;
using rdmx::mlx5::kAccessRemoteAtomic;
using rdmx::mlx5::kAccessRemoteRead;
using rdmx::mlx5::kAccessRemoteWrite;
using namespace rdmx::win;
namespace prm = rdmx::mlx5::prm;

constexpr uint32_t kRw = kAccessLocalWrite | kAccessRemoteWrite | kAccessRemoteRead;

// Cores of the next Rigs take this KLM writer (CoreConfig::klm_variant; unset: the default).
std::optional<prm::KlmVariant> g_klm_variant;

struct Rig {
  explicit Rig(uint32_t n_windows = 8, uint32_t max_pages = 16, uint32_t cache_size = 8,
               uint32_t sq = 1024, uint32_t page = 4096, uint32_t n_cores = 1,
               KeyPolicy keys = KeyPolicy::kRandom, uint64_t key_seed = 0) {
    rdmx::mem::ArenaConfig ac;
    ac.bytes = size_t{512} * page;
    ac.page_size = page;
    arena = std::move(rdmx::mem::Arena::create(dev, ac)).value();
    PoolConfig pc;
    pc.n_windows = n_windows;
    pc.max_pages = max_pages;
    pc.key_policy = keys;
    pc.key_seed = key_seed;
    auto p = WindowPool::create(dev, *arena, pc);
    EXPECT_TRUE(p.ok()) << (p.ok() ? "" : p.error().message);
    pool = std::move(p).value();
    pages = std::make_unique<rdmx::mem::PageAllocator>(*arena);
    CoreConfig cc;
    cc.cache_size = cache_size;
    cc.qp.sq_wqebbs = sq;
    cc.qp.cq_cqes = 4096;
    cc.klm_variant = g_klm_variant;
    for (uint32_t i = 0; i < n_cores; ++i) {
      auto c = PollCore::create(*pool, cc);
      EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
      cores.push_back(std::move(c).value());
    }
  }
  ~Rig() {
    // The plain device executes nothing: unmap what is mapped and complete what is in flight
    // before the cores go (their destructors would wait for it).
    for (size_t i = 0; i < cores.size(); ++i) {
      for (uint32_t k = 0; k < pool->n_windows(); ++k) {
        Window& w = pool->window(k);
        if (w.state() == WindowState::kMapped && w.owner() == core(i).id()) {
          if (core(i).unmap(&w) == Errc::kNoRoom) {
            complete_all(i);
            EXPECT_EQ(core(i).unmap(&w), Errc::kOk);
          }
        }
      }
      complete_all(i);
    }
    cores.clear();
  }
  PollCore& core(size_t i = 0) { return *cores[i]; }
  rdmx::test::PlainDevice::Qp& qp(size_t i = 0) { return dev.qp(i); }
  std::vector<uint64_t> alloc(uint32_t n) {
    std::vector<uint64_t> v(n);
    EXPECT_EQ(pages->alloc_bulk(v), Errc::kOk);
    return v;
  }
  // Plays the device: one CQE for the last WQE posted covers every WQE in flight.
  void complete_all(size_t i = 0) {
    auto& sq = core(i).qp().sq();
    core(i).flush();
    if (sq.in_flight() == 0) return;
    // The last WQE starts at pi - its size; find it by walking from ci.
    uint64_t at = sq.ci(), last = at;
    while (at != sq.pi()) {
      last = at;
      at += sq.shadow_at(at).n_wqebb;
    }
    complete_through(last, i);
  }
  // Plays the device: one CQE for the WQE that starts at SQ counter `at` (and all before it).
  void complete_through(uint64_t at, size_t i = 0) {
    core(i).flush();
    rdmx::test::PlainDevice::write_send_cqe(qp(i), static_cast<uint16_t>(at));
    core(i).poll(64, [&](const rdmx::mlx5::Completion& c) { app.push_back(c); });
  }
  prm::DecodedWqe decode(uint32_t slot, size_t i = 0) {
    prm::DecodedWqe d;
    auto& sq = core(i).qp().sq();
    EXPECT_EQ(prm::decode_wqe(qp(i).sq.get(), sq.wqe_cnt(), slot, d), prm::DecodeError::kOk);
    return d;
  }
  Census census() {
    auto c = pool->check_windows();
    EXPECT_TRUE(c.ok()) << (c.ok() ? "" : c.error().message);
    return c.ok() ? c.value() : Census{};
  }

  rdmx::test::PlainDevice dev;
  std::unique_ptr<rdmx::mem::Arena> arena;
  std::unique_ptr<WindowPool> pool;
  std::unique_ptr<rdmx::mem::PageAllocator> pages;
  std::vector<std::unique_ptr<PollCore>> cores;
  std::vector<rdmx::mlx5::Completion> app;
};

// The byte-compare tests run once per fence cap (2, 1, 0); each run also takes one KLM writer
// (AVX-512, AVX2, baseline), or the default where the CPU lacks it.
void use_variant_of(uint8_t fence_cap) {
  const prm::KlmVariant v = prm::kKlmVariants[fence_cap % 3];
  if (prm::klm_variant_supported(v)) g_klm_variant = v;
}

// Core 0's SQ ring beside a scratch ring of the same size (`want`, filled by the builders),
// compared byte by byte from a WQE's first WQEBB, wrapping as the ring does.
struct RingCompare {
  explicit RingCompare(Rig& r)
      : ring(static_cast<const uint8_t*>(r.qp().sq.get())),
        ring_bytes(r.core().qp().sq().wqe_cnt() * MLX5_SEND_WQE_BB),
        want(ring_bytes) {}
  testing::AssertionResult same(uint32_t pi, uint32_t bytes) const {
    for (uint32_t i = 0; i < bytes; ++i) {
      const uint32_t at = (pi * MLX5_SEND_WQE_BB + i) & (ring_bytes - 1);
      if (ring[at] != want[at]) return testing::AssertionFailure() << "byte " << i;
    }
    return testing::AssertionSuccess();
  }
  const uint8_t* ring;
  uint32_t ring_bytes;
  std::vector<uint8_t> want;
};

// A random request over n pages of 4 KiB: a first byte offset and a length that ends in the
// last page.
struct RandomSpan {
  uint32_t off;
  uint64_t len;
};
RandomSpan random_span(std::mt19937& rng, uint32_t n) {
  const uint32_t off = rng() % 4096;
  const uint64_t lo = n == 1 ? 1 : uint64_t{n - 1} * 4096 - off + 1;
  const uint64_t hi = uint64_t{n} * 4096 - off;
  return {off, lo + rng() % (hi - lo + 1)};
}

// The builders' description of the map that `m` answered, posted at `pi` with `fm`.
prm::UmrMap expected_map(Rig& r, uint32_t pi, uint8_t fm, const MapResult& m, uint32_t access,
                         std::span<const uint64_t> pages, RandomSpan sp) {
  prm::UmrMap um;
  um.qpn = r.core().qp().sq().qpn();
  um.wqe_index = static_cast<uint16_t>(pi);
  um.fm_ce_se = fm;
  um.mkey = m.rkey;
  um.access = rdmx::mlx5::mkc_access_bits(access);
  um.parent_lkey = r.arena->lkey();
  um.page_size = 4096;
  um.first_offset = sp.off;
  um.length = sp.len;
  um.pages = pages;
  um.check = prm::kUmrFlagFailIfNotFree;
  return um;
}

TEST(WindowPool, CreatesWindowsAndChecks) {
  Rig r(8, 16, 4);
  EXPECT_EQ(r.dev.n_mkeys, 8);
  EXPECT_EQ(r.dev.last_max_entries, 16u);
  auto c = r.census();
  EXPECT_EQ(c.total, 8u);
  EXPECT_EQ(c.cache, 2u);  // initial fill: half the cache
  EXPECT_EQ(c.depot, 6u);
  EXPECT_EQ(r.pool->inline_klm_limit(), 52u);
  // find() by mkey index, any key byte.
  for (uint32_t i = 0; i < 8; ++i) {
    Window& w = r.pool->window(i);
    EXPECT_EQ(r.pool->find(w.rkey()), &w);
    EXPECT_EQ(r.pool->find(w.rkey() ^ 0x5a), &w);
  }
  EXPECT_EQ(r.pool->find(0x12345600), nullptr);
}

TEST(WindowPool, MkeyCreationFailureRollsBack) {
  rdmx::test::PlainDevice dev;
  rdmx::mem::ArenaConfig ac;
  ac.bytes = 1 << 20;
  auto arena = std::move(rdmx::mem::Arena::create(dev, ac)).value();
  PoolConfig pc;
  pc.n_windows = 4;
  dev.fail_mkeys = 1;
  auto p = WindowPool::create(dev, *arena, pc);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.error().code, Errc::kDeviceError);
  EXPECT_EQ(dev.n_mkeys, 0);
  pc.max_pages = 2000;  // over the device's max_klm_list
  EXPECT_EQ(WindowPool::create(dev, *arena, pc).error().code, Errc::kUnsupported);
}

// Every bad input gets its own code and posts nothing.
TEST(Map, BadInputPostsNothing) {
  Rig r;
  PollCore& c = r.core();
  const auto pg = r.alloc(20);
  const uint64_t base = r.arena->base();
  const uint32_t pi0 = c.qp().sq().pi();
  auto expect = [&](Errc e, std::span<const uint64_t> pages, uint32_t access, uint32_t off,
                    uint64_t len) {
    MapResult m = c.map(pages, access, off, len);
    EXPECT_EQ(m.errc, e) << rdmx::errc_name(m.errc);
    EXPECT_EQ(m.window, nullptr);
    EXPECT_EQ(c.qp().sq().pi(), pi0);
    EXPECT_EQ(c.last_error(), e);
  };
  std::span<const uint64_t> one(pg.data(), 1), three(pg.data(), 3);
  expect(Errc::kInvalidArgument, {}, kRw, 0, 1);                             // zero pages
  expect(Errc::kTooManyPages, std::span(pg.data(), 17), kRw, 0, 17 * 4096);  // > max_pages
  const uint64_t outside[] = {base - 4096};
  expect(Errc::kNotInArena, outside, kRw, 0, 10);
  const uint64_t misaligned[] = {pg[0] + 512};
  expect(Errc::kNotInArena, misaligned, kRw, 0, 10);
  const uint64_t past_end[] = {r.arena->base() + r.arena->size()};
  expect(Errc::kNotInArena, past_end, kRw, 0, 10);
  const uint64_t mixed[] = {pg[0], pg[1] + 1};
  expect(Errc::kNotInArena, mixed, kRw, 0, 4097);
  expect(Errc::kOutOfRange, one, kRw, 4096, 1);        // offset beyond the first page
  expect(Errc::kOutOfRange, one, kRw, 100, 4000);      // runs past the last page
  expect(Errc::kOutOfRange, three, kRw, 0, 2 * 4096);  // never reaches the last page
  expect(Errc::kInvalidArgument, one, kRw, 0, 0);      // zero length
  expect(Errc::kInvalidArgument, one, 0x10, 0, 1);     // unknown access bit
  expect(Errc::kInvalidArgument, one, 0x80000000u | kRw, 0, 1);
  expect(Errc::kInvalidArgument, one, kAccessRemoteWrite, 0, 1);   // RW without LW
  expect(Errc::kInvalidArgument, one, kAccessRemoteAtomic, 0, 1);  // A without LW
  EXPECT_EQ(c.stats().maps, 0u);
  EXPECT_EQ(c.stats().error_count(Errc::kInvalidArgument), 6u);
  EXPECT_EQ(c.stats().error_count(Errc::kNotInArena), 4u);
  // Boundary cases that are fine.
  EXPECT_TRUE(c.map(one, kRw, 4095, 1).ok());
  EXPECT_TRUE(c.map(three, kRw, 0, 2 * 4096 + 1).ok());
  EXPECT_TRUE(c.map(three, kAccessRemoteRead, 4095, 2 * 4096 + 1).ok());
  EXPECT_TRUE(c.map(one, 0, 0, 4096).ok());  // local read only
  r.census();
}

TEST(Unmap, BadInputPostsNothing) {
  Rig r(8, 16, 8, 1024, 4096, 2);
  PollCore& a = r.core(0);
  PollCore& b = r.core(1);
  const auto pg = r.alloc(1);
  MapResult m = a.map(pg, kRw, 0, 4096);
  ASSERT_TRUE(m.ok());
  const uint32_t pa = a.qp().sq().pi(), pb = b.qp().sq().pi();
  EXPECT_EQ(b.unmap(m.window), Errc::kWrongCore);
  EXPECT_EQ(a.unmap(nullptr), Errc::kInvalidArgument);
  Window fake;
  EXPECT_EQ(a.unmap(&fake), Errc::kInvalidArgument);
  EXPECT_EQ(a.unmap(reinterpret_cast<Window*>(reinterpret_cast<char*>(m.window) + 8)),
            Errc::kInvalidArgument);
  // A window sitting in a cache is not mapped.
  Window* cached = b.cache().at(0);
  EXPECT_EQ(a.unmap(cached), Errc::kNotMapped);
  EXPECT_EQ(a.qp().sq().pi(), pa);
  EXPECT_EQ(b.qp().sq().pi(), pb);
  EXPECT_EQ(a.unmap(m.window), Errc::kOk);
  const uint32_t pa2 = a.qp().sq().pi();
  EXPECT_EQ(a.unmap(m.window), Errc::kNotMapped);  // twice
  EXPECT_EQ(a.qp().sq().pi(), pa2);
  EXPECT_EQ(b.stats().error_count(Errc::kWrongCore), 1u);
  r.census();
}

// The bytes of an inline map: ctrl, UMR ctrl, mkey context, KLMs.
TEST(Map, InlineUmrBytes) {
  Rig r;
  PollCore& c = r.core();
  const auto pg = r.alloc(5);
  const uint32_t slot = c.qp().sq().pi();
  // 5 pages, first byte 100 into the first, ending 50 bytes into the fifth.
  const uint64_t len = 4 * 4096 - 100 + 50;
  MapResult m = c.map(pg, kRw, 100, len);
  ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
  Window* w = m.window;
  EXPECT_EQ(m.iova, 0u);
  EXPECT_EQ(m.length, len);
  EXPECT_EQ(m.rkey, m.lkey);
  EXPECT_NE(m.rkey & 0xff, 0u);  // created with key 0: the first map writes another key
  EXPECT_EQ(w->state(), WindowState::kMapped);
  EXPECT_EQ(c.qp().sq().pi() - slot, 2u + 2u);  // 8 + align4(5) = 16 DS = 4 WQEBBs
  prm::DecodedWqe d = r.decode(slot);
  EXPECT_EQ(d.ctrl.opcode, MLX5_OPCODE_UMR);
  EXPECT_EQ(d.ctrl.qpn, c.qp_handle());
  EXPECT_EQ(d.ctrl.wqe_index, static_cast<uint16_t>(slot));
  EXPECT_EQ(d.ctrl.imm, m.rkey);
  EXPECT_EQ(d.ctrl.ds, prm::umr_inline_ds(5));
  EXPECT_EQ(d.n_wqebb, 4u);
  ASSERT_TRUE(d.has_umr);
  EXPECT_EQ(d.umr.flags, MLX5_WQE_UMR_CTRL_FLAG_INLINE | prm::kUmrFlagFailIfNotFree);
  EXPECT_EQ(d.umr.klm_octowords, 8u);
  EXPECT_EQ(d.umr.mkey_mask, prm::kMapMask);
  EXPECT_EQ(d.umr.mkey_mask & MLX5_WQE_UMR_CTRL_MKEY_MASK_START_ADDR, 0u);  // zero-based IOVA
  EXPECT_FALSE(d.mkc.free);
  EXPECT_EQ(d.mkc.key, m.rkey & 0xff);
  EXPECT_EQ(d.mkc.access, rdmx::mlx5::mkc_access_bits(kRw));
  EXPECT_EQ(d.mkc.start_addr, 0u);
  EXPECT_EQ(d.mkc.len, len);
  ASSERT_EQ(d.n_klm, 8u);
  EXPECT_EQ(d.klm[0].address, pg[0] + 100);
  EXPECT_EQ(d.klm[0].byte_count, 4096u - 100);
  for (uint32_t i = 1; i < 4; ++i) {
    EXPECT_EQ(d.klm[i].address, pg[i]);
    EXPECT_EQ(d.klm[i].byte_count, 4096u);
  }
  EXPECT_EQ(d.klm[4].address, pg[4]);
  EXPECT_EQ(d.klm[4].byte_count, 50u);
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(d.klm[i].mkey, r.arena->lkey());
  for (uint32_t i = 5; i < 8; ++i) EXPECT_EQ(d.klm[i].byte_count, 0u);  // zero padding
  EXPECT_EQ(c.stats().inline_maps, 1u);
  EXPECT_EQ(c.stats().pages_mapped, 5u);
}

// map() and unmap() write their UMRs from per-core templates in a fast path (contiguous WQEs)
// and with the cursor builders otherwise (a WQE that wraps the ring's end). Both must give the
// bytes of prm::build_umr_map_inline / build_umr_invalidate for the same request, in every
// ring position: a small SQ makes the maps wrap. Random requests, accesses, fences.
TEST(Map, TemplateBytesMatchTheBuilders) {
  for (const uint8_t fence_cap : {2, 1, 0}) {
    rdmx::test::PlainDevice::default_umr_fence = fence_cap;
    use_variant_of(fence_cap);
    Rig r(8, 16, 8, 64);
    rdmx::test::PlainDevice::default_umr_fence = 2;
    g_klm_variant.reset();
    PollCore& c = r.core();
    auto& sq = c.qp().sq();
    RingCompare rc(r);
    std::vector<uint8_t>& want = rc.want;
    auto pg = r.alloc(16);
    std::mt19937 rng(fence_cap + 7);
    const uint32_t accesses[] = {0, kAccessLocalWrite, kAccessRemoteRead, kRw,
                                 kAccessLocalWrite | kAccessRemoteAtomic};
    const uint8_t umr_fence = prm::umr_fence_bits(fence_cap);
    auto same = [&](uint32_t pi, uint32_t nbb) { return rc.same(pi, nbb * MLX5_SEND_WQE_BB); };
    uint32_t wrapped = 0;
    for (int it = 0; it < 400; ++it) {
      const uint32_t n = 1 + rng() % 16;
      std::shuffle(pg.begin(), pg.end(), rng);
      const RandomSpan sp = random_span(rng, n);
      const uint32_t access = accesses[rng() % 5];
      if (sq.free_wqebbs() < 2 * prm::ds_to_wqebbs(prm::umr_inline_ds(16))) r.complete_all();
      const uint32_t pi = sq.pi();
      const uint8_t fm = sq.next_fm_ce_se(false, umr_fence);
      MapResult m = c.map(std::span(pg.data(), n), access, sp.off, sp.len);
      ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
      const prm::UmrMap um = expected_map(r, pi, fm, m, access, std::span(pg.data(), n), sp);
      prm::RingCursor cur(want.data(), sq.wqe_cnt(), pi);
      const uint32_t nbb = prm::ds_to_wqebbs(prm::build_umr_map_inline(cur, um));
      ASSERT_EQ(sq.pi() - pi, nbb);
      ASSERT_TRUE(same(pi, nbb)) << "map of " << n << " pages at " << pi;
      wrapped += (pi % sq.wqe_cnt()) + nbb > sq.wqe_cnt();
      const uint32_t upi = sq.pi();
      const uint8_t ufm = sq.next_fm_ce_se(false, 0);  // an invalidate takes no umr_fence
      ASSERT_EQ(c.unmap(m.window), Errc::kOk);
      prm::RingCursor ucur(want.data(), sq.wqe_cnt(), upi);
      prm::build_umr_invalidate(ucur, sq.qpn(), static_cast<uint16_t>(upi), ufm, m.rkey, 0);
      ASSERT_TRUE(same(upi, 2)) << "unmap at " << upi;
    }
    EXPECT_GT(wrapped, 0u);  // the cursor path ran too
  }
}

// Pointer mode's fast path (more pages than the inline limit of 52): the WQE and the window's KLM
// array must be what build_umr_map_pointer and write_page_klms write, in every ring position
// and fence cap, whether the window on top of the cache still has a pointer-mode map in flight
// (another is raised) or not.
TEST(Map, PointerTemplateBytesMatchTheBuilders) {
  for (const uint8_t fence_cap : {2, 1, 0}) {
    rdmx::test::PlainDevice::default_umr_fence = fence_cap;
    use_variant_of(fence_cap);
    Rig r(8, 256, 8, 64);
    rdmx::test::PlainDevice::default_umr_fence = 2;
    g_klm_variant.reset();
    PollCore& c = r.core();
    auto& sq = c.qp().sq();
    RingCompare rc(r);
    std::vector<uint8_t> want_klms(256 * prm::kKlmBytes);
    auto pg = r.alloc(256);
    std::mt19937 rng(fence_cap + 17);
    const uint8_t umr_fence = prm::umr_fence_bits(fence_cap);
    uint32_t raised = 0;
    for (int it = 0; it < 300; ++it) {
      const uint32_t n = 53 + rng() % 204;
      std::shuffle(pg.begin(), pg.end(), rng);
      const RandomSpan sp = random_span(rng, n);
      const uint32_t access = rng() % 2 ? kRw : kAccessLocalWrite;
      if (sq.free_wqebbs() < 8 || it % 5 == 4) r.complete_all();
      raised += c.cache().len() > 0 && c.cache().at(c.cache().len() - 1)->n_pages() > 52 &&
                c.klm_busy(c.cache().at(c.cache().len() - 1));
      const uint32_t pi = sq.pi();
      const uint8_t fm = sq.next_fm_ce_se(false, umr_fence);
      const uint64_t pointer_maps = c.stats().pointer_maps;
      MapResult m = c.map(std::span(pg.data(), n), access, sp.off, sp.len);
      ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc) << " it " << it;
      ASSERT_EQ(c.stats().pointer_maps, pointer_maps + 1);
      const prm::DecodedWqe d = r.decode(pi);
      ASSERT_TRUE(d.has_klm_ptr);
      const prm::UmrMap um = expected_map(r, pi, fm, m, access, std::span(pg.data(), n), sp);
      prm::RingCursor cur(rc.want.data(), sq.wqe_cnt(), pi);
      ASSERT_EQ(prm::build_umr_map_pointer(cur, um, d.klm_ptr.address, r.arena->lkey()),
                prm::kUmrPointerDs);
      ASSERT_EQ(sq.pi() - pi, 3u);
      ASSERT_TRUE(rc.same(pi, prm::kUmrPointerDs * 16)) << "map of " << n << " pages at " << pi;
      prm::write_page_klms(reinterpret_cast<mlx5_wqe_umr_klm_seg*>(want_klms.data()), um);
      ASSERT_EQ(std::memcmp(reinterpret_cast<const void*>(d.klm_ptr.address), want_klms.data(),
                            prm::align4(n) * prm::kKlmBytes),
                0)
          << "KLM array of " << n << " pages";
      ASSERT_EQ(c.unmap(m.window), Errc::kOk);
    }
    EXPECT_GT(raised, 20u);  // maps right after an unmap found a busy window on top
    r.complete_all();
  }
}

// map_interleaved's fast path writes the map template's head and the repeat block itself; the
// general path (a WQE that would wrap the ring's end) goes through the cursor builder. Both must
// give build_umr_interleaved's bytes, in every ring position and fence cap: random layouts of 1
// to 6 parts and now and then the most the window allows (max_pages 16 here: 15 and the repeat
// header), random accesses.
TEST(Map, InterleavedTemplateBytesMatchTheBuilder) {
  for (const uint8_t fence_cap : {2, 1, 0}) {
    rdmx::test::PlainDevice::default_umr_fence = fence_cap;
    Rig r(8, 16, 8, 64);
    rdmx::test::PlainDevice::default_umr_fence = 2;
    PollCore& c = r.core();
    auto& sq = c.qp().sq();
    RingCompare rc(r);
    std::mt19937 rng(fence_cap + 29);
    const uint32_t accesses[] = {0, kAccessLocalWrite, kAccessRemoteRead, kRw,
                                 kAccessLocalWrite | kAccessRemoteAtomic};
    const uint8_t umr_fence = prm::umr_fence_bits(fence_cap);
    const uint64_t base = r.arena->base(), size = r.arena->data_end() - base;
    const uint32_t most = std::min(16u, r.pool->inline_klm_limit()) - 1;
    uint32_t wrapped = 0;
    for (int it = 0; it < 400; ++it) {
      const uint32_t n = it % 16 == 15 ? most : 1 + rng() % 6;
      const uint32_t blocks = 1 + rng() % 8;
      std::vector<InterleavedPart> parts(n);
      std::vector<prm::RepeatEntry> ents(n);
      for (uint32_t i = 0; i < n; ++i) {
        parts[i].bytes = 1 + rng() % 64;
        parts[i].skip = rng() % 512;
        const uint64_t span = uint64_t{blocks} * (parts[i].bytes + parts[i].skip);
        parts[i].addr = base + rng() % (size - span);
        ents[i] = {parts[i].addr, static_cast<uint16_t>(parts[i].bytes),
                   static_cast<uint16_t>(parts[i].bytes + parts[i].skip), r.arena->lkey()};
      }
      const uint32_t access = accesses[rng() % 5];
      if (sq.free_wqebbs() < 2 * 16) r.complete_all();
      const uint32_t pi = sq.pi();
      const uint8_t fm = sq.next_fm_ce_se(false, umr_fence);
      const uint64_t maps = c.stats().maps, pages = c.stats().pages_mapped;
      MapResult m = c.map_interleaved(parts, blocks, access);
      ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
      EXPECT_EQ(c.stats().maps, maps + 1);
      // No page list: the length in chunk pages, rounded up.
      const uint64_t ps = r.arena->page_size();
      EXPECT_EQ(c.stats().pages_mapped, pages + (m.length + ps - 1) / ps);
      EXPECT_EQ(m.window->state(), WindowState::kMapped);
      EXPECT_EQ(m.window->length(), m.length);
      prm::UmrVerbsHead h;
      h.qpn = sq.qpn();
      h.wqe_index = static_cast<uint16_t>(pi);
      h.fm_ce_se = fm;
      h.mkey = m.rkey;
      h.access = rdmx::mlx5::mkc_access_bits(access);
      h.check = prm::kUmrFlagFailIfNotFree;
      prm::RingCursor cur(rc.want.data(), sq.wqe_cnt(), pi);
      const uint32_t nbb = prm::ds_to_wqebbs(prm::build_umr_interleaved(cur, h, blocks, ents));
      ASSERT_EQ(sq.pi() - pi, nbb);
      ASSERT_TRUE(rc.same(pi, nbb * MLX5_SEND_WQE_BB)) << n << " parts at " << pi;
      EXPECT_EQ(
          m.length, uint64_t{blocks} * [&] {
            uint64_t b = 0;
            for (const auto& p : parts) b += p.bytes;
            return b;
          }());
      wrapped += (pi % sq.wqe_cnt()) + nbb > sq.wqe_cnt();
      ASSERT_EQ(c.unmap(m.window), Errc::kOk);
    }
    EXPECT_GT(wrapped, 0u);  // the general path ran too
    r.complete_all();
  }
}

// 52 entries is the inline limit; 53 goes to pointer mode (pool with max_pages 256).
TEST(Map, PointerModeBytes) {
  Rig r(4, 256, 4);
  PollCore& c = r.core();
  EXPECT_EQ(r.arena->n_pages(), 512u - 4u);  // 4 KLM arrays of 4 KiB reserved at the tail
  const auto pg = r.alloc(256);
  uint32_t slot = c.qp().sq().pi();
  MapResult m52 = c.map(std::span(pg.data(), 52), kRw, 0, 52 * 4096);
  ASSERT_TRUE(m52.ok());
  EXPECT_EQ(r.decode(slot).ctrl.ds, 60u);
  EXPECT_EQ(c.qp().sq().pi() - slot, 15u);
  slot = c.qp().sq().pi();
  MapResult m = c.map(pg, kAccessLocalWrite | kAccessRemoteWrite, 7, 256 * 4096 - 7);
  ASSERT_TRUE(m.ok());
  prm::DecodedWqe d = r.decode(slot);
  EXPECT_EQ(d.ctrl.ds, prm::kUmrPointerDs);
  EXPECT_EQ(c.qp().sq().pi() - slot, 3u);
  EXPECT_EQ(d.umr.flags, prm::kUmrFlagFailIfNotFree);  // INLINE clear
  EXPECT_EQ(d.umr.klm_octowords, 256u);
  ASSERT_TRUE(d.has_klm_ptr);
  EXPECT_EQ(d.klm_ptr.address % prm::kKlmPtrAlign, 0u);
  EXPECT_EQ(d.klm_ptr.mkey, r.arena->lkey());
  EXPECT_GE(d.klm_ptr.address, r.arena->data_end());
  EXPECT_TRUE(r.arena->contains(d.klm_ptr.address, 256 * 16));
  EXPECT_EQ(d.mkc.len, 256u * 4096 - 7);
  auto* k = reinterpret_cast<const mlx5_wqe_umr_klm_seg*>(d.klm_ptr.address);
  EXPECT_EQ(rdmx::load_be(&k[0].address), pg[0] + 7);
  EXPECT_EQ(rdmx::load_be(&k[0].byte_count), 4096u - 7);
  for (uint32_t i = 1; i < 256; ++i) {
    EXPECT_EQ(rdmx::load_be(&k[i].address), pg[i]);
    EXPECT_EQ(rdmx::load_be(&k[i].byte_count), 4096u);
    EXPECT_EQ(rdmx::load_be(&k[i].mkey), r.arena->lkey());
  }
  EXPECT_EQ(c.stats().pointer_maps, 1u);
  // The window's KLM array is in use by the device until the map completes: unmap and map
  // again must pick another window, and with none left, say kBusy (not kNoWindow).
  ASSERT_EQ(c.unmap(m.window), Errc::kOk);
  MapResult m2 = c.map(pg, kRw, 0, 256 * 4096);
  ASSERT_TRUE(m2.ok());
  EXPECT_NE(m2.window, m.window);
  ASSERT_EQ(c.unmap(m2.window), Errc::kOk);
  MapResult m3 = c.map(pg, kRw, 0, 256 * 4096);  // two windows left in cache/depot: m52's + 1
  ASSERT_TRUE(m3.ok());
  ASSERT_EQ(c.unmap(m3.window), Errc::kOk);
  ASSERT_EQ(c.unmap(m52.window), Errc::kOk);
  // Now every free window has a pointer-mode map in flight except m52's.
  MapResult m4 = c.map(pg, kRw, 0, 256 * 4096);
  ASSERT_TRUE(m4.ok());
  EXPECT_EQ(m4.window, m52.window);
  const uint32_t pi = c.qp().sq().pi();
  EXPECT_EQ(c.map(pg, kRw, 0, 256 * 4096).errc, Errc::kBusy);
  EXPECT_EQ(c.qp().sq().pi(), pi);
  EXPECT_EQ(c.stats().klm_waits, 1u);
  r.complete_all();
  EXPECT_TRUE(c.map(pg, kRw, 0, 256 * 4096).ok());
  r.census();
}

TEST(Unmap, InvalidateBytesAndFences) {
  Rig r;
  PollCore& c = r.core();
  const auto pg = r.alloc(2);
  MapResult m = c.map(pg, kRw, 0, 8192);
  ASSERT_TRUE(m.ok());
  // Plain unmap: invalidate UMR, small fence inherited from the map just before.
  uint32_t slot = c.qp().sq().pi();
  ASSERT_EQ(c.unmap(m.window), Errc::kOk);
  prm::DecodedWqe d = r.decode(slot);
  EXPECT_EQ(d.ctrl.opcode, MLX5_OPCODE_UMR);
  EXPECT_EQ(d.ctrl.ds, prm::kUmrHeaderDs);
  EXPECT_EQ(d.ctrl.imm, m.rkey);
  EXPECT_EQ(d.ctrl.fence(), prm::kFenceInitiatorSmall);
  EXPECT_EQ(d.umr.mkey_mask, uint64_t{MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE});
  EXPECT_EQ(d.umr.flags & prm::kUmrFlagCheckMask, 0u);
  EXPECT_TRUE(d.mkc.free);
  EXPECT_EQ(m.window->state(), WindowState::kUnmapping);

  // A READ that scatters into the window: the unmap waits for it (SMALL_AND_FENCE).
  m = c.map(pg, kRw, 0, 8192);
  ASSERT_TRUE(m.ok());
  const prm::Sge into_window{0, 8192, m.lkey};
  ASSERT_EQ(c.post_read({&into_window, 1}, 0, 0x1234, 7), Errc::kOk);
  slot = c.qp().sq().pi();
  ASSERT_EQ(c.unmap(m.window), Errc::kOk);
  EXPECT_EQ(r.decode(slot).ctrl.fence(), prm::kFenceSmallAndFence);

  // A WRITE that gathers from the window: strong ordering (retransmissions re-read it).
  m = c.map(pg, kRw, 0, 8192);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(c.post_write({&into_window, 1}, 0, 0x1234, 8), Errc::kOk);  // lkey of old key
  const prm::Sge from_window{0, 100, m.lkey};
  ASSERT_EQ(c.post_send({&from_window, 1}, 9), Errc::kOk);
  slot = c.qp().sq().pi();
  ASSERT_EQ(c.unmap(m.window), Errc::kOk);
  EXPECT_EQ(r.decode(slot).ctrl.fence(), prm::kFenceStrongOrdering);

  // A READ into arena memory (parent lkey) does not fence an unrelated window's unmap.
  m = c.map(pg, kRw, 0, 8192);
  ASSERT_TRUE(m.ok());
  const prm::Sge arena_buf{pg[0], 64, r.arena->lkey()};
  ASSERT_EQ(c.post_read({&arena_buf, 1}, 0, 0x1234, 10), Errc::kOk);
  slot = c.qp().sq().pi();
  ASSERT_EQ(c.unmap(m.window), Errc::kOk);
  EXPECT_EQ(r.decode(slot).ctrl.fence(), 0u);
  // The WQE after a map carries INITIATOR_SMALL (SqWriter's fence cache).
  m = c.map(pg, kRw, 0, 8192);
  slot = c.qp().sq().pi();
  ASSERT_EQ(c.post_write({&arena_buf, 1}, 0, m.rkey, 11), Errc::kOk);
  EXPECT_EQ(r.decode(slot).ctrl.fence(), prm::kFenceInitiatorSmall);
  EXPECT_EQ(c.post_write({&arena_buf, 1}, 0, m.rkey, kInternalCookie | 1), Errc::kInvalidArgument);
  r.census();
}

// A window used as the local key of an I/O and unmapped once that I/O's completion was polled
// (as the NFS client invalidates after the reply) needs no ordering fence: the SQ keeps flowing.
// Only the umr_fence cap's fence remains (here NONE, then STRONG).
TEST(Unmap, NoFenceOnceTheLocalUseCompleted) {
  for (uint8_t cap : {uint8_t{2}, uint8_t{0}}) {
    Rig r;
    r.dev.mutable_caps().umr_fence = cap;
    // The cap is read at PollCore::create: a second core (QP 1) gets it.
    CoreConfig cc;
    cc.cache_size = 8;
    r.cores.push_back(std::move(PollCore::create(*r.pool, cc)).value());
    PollCore& c = r.core(1);
    const auto pg = r.alloc(2);
    for (int read = 0; read < 2; ++read) {
      MapResult m = c.map(pg, kRw, 0, 8192);
      ASSERT_TRUE(m.ok());
      const prm::Sge sge{0, 8192, m.lkey};
      ASSERT_EQ(
          read ? c.post_read({&sge, 1}, 0, 0x1234, 20) : c.post_write({&sge, 1}, 0, 0x1234, 20),
          Errc::kOk);
      // Another I/O after it, not using the window, still in flight at the unmap.
      const prm::Sge other{pg[0], 64, r.arena->lkey()};
      r.complete_all(1);  // the I/O's completion is polled...
      ASSERT_EQ(c.post_write({&other, 1}, 0, 0x1234, 21), Errc::kOk);
      const uint64_t fenced = c.stats().fenced_unmaps;
      const uint32_t slot = c.qp().sq().pi();
      ASSERT_EQ(c.unmap(m.window), Errc::kOk);  // ...so the invalidate waits for nothing
      // and takes no umr_fence: the kernel gives the cap's fence to REG_MR only (wr.c).
      EXPECT_EQ(r.decode(slot, 1).ctrl.fence(), prm::kFenceNone)
          << "read " << read << " cap " << int(cap);
      EXPECT_EQ(c.stats().fenced_unmaps, fenced);
      r.complete_all(1);
    }
    // Not yet completed: fenced as before, and counted.
    MapResult m = c.map(pg, kRw, 0, 8192);
    ASSERT_TRUE(m.ok());
    const prm::Sge sge{0, 8192, m.lkey};
    ASSERT_EQ(c.post_read({&sge, 1}, 0, 0x1234, 22), Errc::kOk);
    uint32_t slot = c.qp().sq().pi();
    ASSERT_EQ(c.unmap(m.window), Errc::kOk);
    EXPECT_EQ(r.decode(slot, 1).ctrl.fence(), prm::kFenceSmallAndFence);
    EXPECT_EQ(c.stats().fenced_unmaps, 1u);
    // Two uses, the first completed, the last not: the last one decides.
    m = c.map(pg, kRw, 0, 8192);
    ASSERT_TRUE(m.ok());
    const prm::Sge sge2{0, 8192, m.lkey};
    ASSERT_EQ(c.post_write({&sge2, 1}, 0, 0x1234, 23), Errc::kOk);
    r.complete_all(1);
    ASSERT_EQ(c.post_send({&sge2, 1}, 24), Errc::kOk);
    slot = c.qp().sq().pi();
    ASSERT_EQ(c.unmap(m.window), Errc::kOk);
    EXPECT_EQ(r.decode(slot, 1).ctrl.fence(), prm::kFenceStrongOrdering);
    EXPECT_EQ(c.stats().fenced_unmaps, 2u);
    r.complete_all(1);
    r.census();
  }
}

TEST(WindowCache, BurstsMatchOneAtATime) {
  std::vector<Window> ws(40);
  WindowCache a, b;
  a.init(16, 40);
  b.init(16, 40);
  std::vector<Window*> in;
  for (auto& w : ws) in.push_back(&w);
  a.push_burst(in.data(), 10);
  for (uint32_t i = 0; i < 10; ++i) b.push(in[i]);
  ASSERT_EQ(a.len(), 10u);
  for (uint32_t i = 0; i < 10; ++i) EXPECT_EQ(a.at(i), b.at(i));
  Window* out[32];
  // Fewer than asked: takes what there is; out[k-1] is the top.
  EXPECT_EQ(a.pop_burst(out, 4), 4u);
  for (uint32_t i = 4; i-- > 0;) EXPECT_EQ(out[i], b.pop());
  EXPECT_EQ(a.pop_burst(out, 32), 6u);
  EXPECT_EQ(out[5], in[5]);
  EXPECT_EQ(out[0], in[0]);
  EXPECT_EQ(a.len(), 0u);
  EXPECT_EQ(a.pop_burst(out, 32), 0u);
  a.push_burst(out, 6);
  EXPECT_EQ(a.pop(), in[5]);
}

TEST(Map, IncrementKeysRotateEveryMapAndWrap) {
  Rig r(1, 4, 2, 1024, 4096, 1, KeyPolicy::kIncrement);
  PollCore& c = r.core();
  const auto pg = r.alloc(1);
  uint8_t prev = 0;
  for (int i = 0; i < 600; ++i) {
    MapResult m = c.map(pg, kRw, 0, 4096);
    ASSERT_TRUE(m.ok()) << i << " " << rdmx::errc_name(m.errc);
    EXPECT_EQ(static_cast<uint8_t>(m.rkey & 0xff), static_cast<uint8_t>(prev + 1));
    prev = static_cast<uint8_t>(m.rkey);
    ASSERT_EQ(c.unmap(m.window), Errc::kOk);
    if (i % 50 == 49) r.complete_all();
  }
}

// Random keys (the default), one window mapped over and over: never the key it had, every step
// 1..255 uniform (chi-square, fixed seed: the figure is deterministic), consecutive steps
// independent (chi-square over the 255 x 255 pairs). RDMX_TEST_MAPS overrides the count.
TEST(Map, RandomKeysNeverRepeatAndAreUniform) {
  uint64_t maps = 1'000'000;
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  maps = 100'000;
#endif
  if (const char* e = std::getenv("RDMX_TEST_MAPS")) maps = std::strtoull(e, nullptr, 10);
  Rig r(1, 4, 2, 1024, 4096, 1, KeyPolicy::kRandom, 0x5eed);
  PollCore& c = r.core();
  ASSERT_EQ(c.keys().policy(), KeyPolicy::kRandom);
  const auto pg = r.alloc(1);
  std::vector<uint64_t> steps(256, 0);
  std::vector<uint32_t> pairs(256 * 256, 0);
  uint8_t prev = 0, prev_step = 0;
  for (uint64_t i = 0; i < maps; ++i) {
    MapResult m = c.map(pg, kRw, 0, 4096);
    ASSERT_TRUE(m.ok()) << i << " " << rdmx::errc_name(m.errc);
    const uint8_t key = static_cast<uint8_t>(m.rkey);
    const uint8_t step = static_cast<uint8_t>(key - prev);
    ASSERT_NE(step, 0) << "map " << i << " kept key " << int(key);
    ++steps[step];
    if (i) ++pairs[prev_step * 256 + step];
    prev = key;
    prev_step = step;
    ASSERT_EQ(c.unmap(m.window), Errc::kOk);
    if (i % 128 == 127) r.complete_all();
  }
  EXPECT_EQ(steps[0], 0u);
  // Chi-square bounds at p = 1e-6 either side (Wilson-Hilferty): a fixed seed gives one value.
  auto bound = [](double df, double z) {
    const double a = 2.0 / (9.0 * df);
    return df * std::pow(1.0 - a + z * std::sqrt(a), 3);
  };
  const double e1 = static_cast<double>(maps) / 255.0;
  double x1 = 0;
  for (int s = 1; s < 256; ++s) x1 += (steps[s] - e1) * (steps[s] - e1) / e1;
  EXPECT_LT(x1, bound(254, 4.75)) << "steps not uniform";
  EXPECT_GT(x1, bound(254, -4.75)) << "steps too regular to be random";
  const double e2 = static_cast<double>(maps - 1) / (255.0 * 255.0);
  double x2 = 0;
  for (int a = 1; a < 256; ++a)
    for (int b = 1; b < 256; ++b) {
      const double d = pairs[a * 256 + b] - e2;
      x2 += d * d / e2;
    }
  EXPECT_LT(x2, bound(255.0 * 255 - 1, 4.75)) << "consecutive steps not independent";
  RecordProperty("chi2_steps", std::to_string(x1));
  RecordProperty("chi2_pairs", std::to_string(x2));
}

// Without a test seed every core keys its generator from getrandom(2): two cores of one pool and
// two setups draw different sequences; with a test seed the cores still differ (core id mixed in)
// and the same seed replays.
TEST(Map, KeySeedsDifferBetweenCoresAndSetups) {
  auto seq = [](Rig& r, size_t core) {
    const auto pg = r.alloc(1);
    std::vector<uint8_t> keys;
    for (int i = 0; i < 32; ++i) {
      MapResult m = r.core(core).map(pg, kRw, 0, 4096);
      EXPECT_TRUE(m.ok());
      if (!m.ok()) break;
      keys.push_back(static_cast<uint8_t>(m.rkey));
      EXPECT_EQ(r.core(core).unmap(m.window), Errc::kOk);
    }
    r.complete_all(core);
    return keys;
  };
  // 32 keys alike by chance: 255^-32.
  Rig a(4, 4, 2, 1024, 4096, 2), b(4, 4, 2, 1024, 4096, 2);
  const auto a0 = seq(a, 0), a1 = seq(a, 1), b0 = seq(b, 0);
  EXPECT_NE(a0, a1) << "two cores drew the same keys";
  EXPECT_NE(a0, b0) << "two setups drew the same keys";
  Rig s(4, 4, 2, 1024, 4096, 2, KeyPolicy::kRandom, 42),
      t(4, 4, 2, 1024, 4096, 2, KeyPolicy::kRandom, 42);
  const auto s0 = seq(s, 0), s1 = seq(s, 1), t0 = seq(t, 0);
  EXPECT_NE(s0, s1) << "a test seed gave two cores one stream";
  EXPECT_EQ(s0, t0) << "a test seed did not replay";
}

TEST(KeyGen, PolicyNamesAndIncrementSteps) {
  KeyPolicy p = KeyPolicy::kRandom;
  EXPECT_TRUE(parse_key_policy("increment", &p));
  EXPECT_EQ(p, KeyPolicy::kIncrement);
  EXPECT_TRUE(parse_key_policy("random", &p));
  EXPECT_EQ(p, KeyPolicy::kRandom);
  EXPECT_FALSE(parse_key_policy("rand", &p));
  EXPECT_FALSE(parse_key_policy(nullptr, &p));
  EXPECT_STREQ(key_policy_name(KeyPolicy::kIncrement), "increment");
  KeyGen g;
  ASSERT_TRUE(g.init(KeyPolicy::kIncrement).ok());
  for (uint64_t i = 0; i < 10000; ++i) {
    g.refresh(i);
    ASSERT_EQ(g.step(i), 1);
  }
  EXPECT_EQ(g.regenerations(), 0u);
  // A random table is redrawn half by half as the draws pass; no step is ever zero, and a half
  // is new after its redraw (the draws do not replay the table).
  KeyGen h;
  ASSERT_TRUE(h.init(KeyPolicy::kRandom, 7, 0, 1024).ok());
  const uint32_t n = h.table_steps();
  ASSERT_GE(n, 2048u);
  std::vector<uint8_t> first;
  for (uint64_t i = 0; i < 4 * uint64_t{n}; ++i) {
    if (i % 64 == 0) h.refresh(i);  // a poll every 64 maps
    const uint8_t s = h.step(i);
    ASSERT_NE(s, 0) << "draw " << i;
    if (i < n) first.push_back(s);
  }
  EXPECT_GE(h.regenerations(), 6u);
  size_t same = 0;
  for (uint64_t i = 0; i < n; ++i) same += first[i] == h.step(4 * uint64_t{n} + i);
  EXPECT_LT(same, n / 64) << "the table was not redrawn";
  // The table is sized by the owner's bound: a bound of 10,000 draws between refreshes needs
  // halves of at least 10,000 steps.
  KeyGen big;
  ASSERT_TRUE(big.init(KeyPolicy::kRandom, 7, 1, 10000).ok());
  EXPECT_GE(big.table_steps(), 20000u);
}

TEST(Map, ExhaustionIsImmediateAndCounted) {
  Rig r(6, 4, 4);
  PollCore& c = r.core();
  const auto pg = r.alloc(1);
  std::vector<Window*> ws;
  for (int i = 0; i < 6; ++i) {
    MapResult m = c.map(pg, kRw, 0, 4096);
    ASSERT_TRUE(m.ok());
    ws.push_back(m.window);
  }
  const uint32_t pi = c.qp().sq().pi();
  EXPECT_EQ(c.map(pg, kRw, 0, 4096).errc, Errc::kNoWindow);
  EXPECT_EQ(c.qp().sq().pi(), pi);
  EXPECT_EQ(c.stats().exhausted, 1u);
  EXPECT_EQ(r.census().mapped, 6u);
  EXPECT_EQ(c.unmap_burst(ws), 6u);
  EXPECT_EQ(r.census().unmapping, 6u);
  std::vector<MapRequest> reqs(8, MapRequest{pg, kRw, 0, 4096});
  std::vector<Window*> out(8);
  EXPECT_EQ(c.map_burst(reqs, out), 6u);  // best effort
  EXPECT_EQ(c.last_error(), Errc::kNoWindow);
  EXPECT_EQ(c.unmap_burst(std::span(out.data(), 6)), 6u);
}

// map_burst/unmap_burst keep the SQ producer, the cache top and the key draw in locals across a
// burst: they must write the same WQE bytes, hand out the same windows and keys, count the same
// and stop at the same request as map()/unmap() one at a time. Two identical rigs (random keys
// from the same test seed), one driven by bursts, one by single calls; bursts mix inline and
// pointer-mode maps (the fast path gives way to map_general and resumes), a ring that wraps, a bad
// page or a stale window in the middle, for every KLM writer this CPU runs.
TEST(MapBurst, SameWqesWindowsKeysAndCountsAsOneAtATime) {
  for (const prm::KlmVariant writer : prm::kKlmVariants) {
    if (!prm::klm_variant_supported(writer)) continue;
    g_klm_variant = writer;
    Rig a(24, 64, 24, 256, 4096, 1, KeyPolicy::kRandom, 5);
    Rig b(24, 64, 24, 256, 4096, 1, KeyPolicy::kRandom, 5);
    g_klm_variant.reset();
    ASSERT_EQ(a.core().klm_variant(), writer);
    PollCore& ca = a.core();
    PollCore& cb = b.core();
    auto pa = a.alloc(64);
    (void)b.alloc(64);
    // The rigs' arenas differ: an address of a's arena is compared as the same offset in b's.
    const uint64_t a0 = a.arena->base(), a1 = a0 + a.arena->size(), b0 = b.arena->base();
    auto to_b = [&](uint64_t v) { return v >= a0 && v < a1 ? v - a0 + b0 : v; };
    const uint32_t ring_words = ca.qp().sq().wqe_cnt() * MLX5_SEND_WQE_BB / 8;
    const uint8_t* ra = static_cast<const uint8_t*>(a.qp().sq.get());
    const uint8_t* rb = static_cast<const uint8_t*>(b.qp().sq.get());
    auto same_rings = [&]() -> testing::AssertionResult {
      for (uint32_t i = 0; i < ring_words; ++i) {
        uint64_t x, y;
        std::memcpy(&x, ra + 8 * i, 8);
        std::memcpy(&y, rb + 8 * i, 8);
        if (rdmx::detail::bswap(to_b(rdmx::detail::bswap(x))) != y)
          return testing::AssertionFailure() << "ring word " << i;
      }
      return testing::AssertionSuccess();
    };
    const uint64_t outside = 3 * 4096;  // a page of neither arena
    std::mt19937 rng(11 + static_cast<uint32_t>(writer));
    uint32_t stopped_maps = 0, stopped_unmaps = 0, pointer = 0;
    std::vector<std::vector<uint64_t>> lists, lists_b;
    for (int round = 0; round < 120; ++round) {
      const uint32_t k = 1 + rng() % 8;
      lists.assign(k, {});
      lists_b.assign(k, {});
      std::vector<MapRequest> reqs(k), reqs_b(k);
      for (uint32_t i = 0; i < k; ++i) {
        const uint32_t n = rng() % 4 == 0 ? 53 + rng() % 12 : 1 + rng() % 16;  // 53+: pointer
        std::shuffle(pa.begin(), pa.end(), rng);
        lists[i].assign(pa.begin(), pa.begin() + n);
        if (rng() % 16 == 0) lists[i][rng() % n] = outside;
        const RandomSpan sp = random_span(rng, n);
        reqs[i] = MapRequest{lists[i], kRw, sp.off, sp.len};
        for (uint64_t v : lists[i]) lists_b[i].push_back(to_b(v));
        reqs_b[i] = MapRequest{lists_b[i], kRw, sp.off, sp.len};
      }
      std::vector<Window*> wa(k), wb;
      const size_t got = ca.map_burst(reqs, wa);
      for (const MapRequest& q : reqs_b) {
        MapResult m = cb.map(q.pages, q.access, q.first_byte_offset, q.length);
        if (!m.ok()) break;
        wb.push_back(m.window);
      }
      ASSERT_EQ(got, wb.size()) << "round " << round;
      stopped_maps += got < k;
      if (got < k) {
        ASSERT_EQ(ca.last_error(), cb.last_error());
      }
      for (size_t i = 0; i < got; ++i) {
        ASSERT_EQ(wa[i]->id(), wb[i]->id());
        ASSERT_EQ(wa[i]->rkey(), wb[i]->rkey());
        pointer += wa[i]->n_pages() > 52;
      }
      // Unmap them in a random order, sometimes with a window that is not mapped in the middle.
      std::vector<size_t> order(got);
      for (size_t i = 0; i < got; ++i) order[i] = i;
      std::shuffle(order.begin(), order.end(), rng);
      std::vector<Window*> ua, ub;
      for (size_t i : order) {
        ua.push_back(wa[i]);
        ub.push_back(wb[i]);
      }
      if (got > 1 && rng() % 4 == 0) {
        const size_t at = rng() % got;
        ua.insert(ua.begin() + at, ua[(at + 1) % got]);  // unmapped by then: kNotMapped
        ub.insert(ub.begin() + at, ub[(at + 1) % got]);
      }
      size_t ub_done = 0;
      while (ub_done < ub.size() && cb.unmap(ub[ub_done]) == Errc::kOk) ++ub_done;
      const size_t ua_done = ca.unmap_burst(ua);
      ASSERT_EQ(ua_done, ub_done) << "round " << round;
      if (ua_done < ua.size()) {
        ++stopped_unmaps;
        ASSERT_EQ(ca.last_error(), cb.last_error());
        for (size_t i = ua_done + 1; i < ua.size(); ++i) {  // the rest, one at a time on both
          (void)ca.unmap(ua[i]);
          (void)cb.unmap(ub[i]);
        }
      }
      ASSERT_EQ(ca.qp().sq().pi(), cb.qp().sq().pi());
      ASSERT_TRUE(same_rings()) << "round " << round;
      if (ca.qp().sq().free_wqebbs() < 128) {
        a.complete_all();
        b.complete_all();
      }
    }
    const CoreCounts sa = snapshot(ca.stats());
    const CoreCounts sb = snapshot(cb.stats());
#define RDMX_SAME_COUNTER(name, type, kind, unit, help) EXPECT_EQ(sa.name, sb.name) << #name;
    RDMX_CORE_COUNTERS(RDMX_SAME_COUNTER)
#undef RDMX_SAME_COUNTER
    EXPECT_EQ(sa.errors, sb.errors);
    EXPECT_GT(sa.inline_maps, 200u);
    EXPECT_GT(pointer, 20u);
    EXPECT_GT(stopped_maps, 3u);
    EXPECT_GT(stopped_unmaps, 3u);
    EXPECT_GT(ca.qp().sq().pi(), 4 * ca.qp().sq().wqe_cnt());  // the ring wrapped
    a.complete_all();
    b.complete_all();
  }
}

TEST(Map, SqFullIsNoRoom) {
  Rig r(64, 4, 64, 16);  // 16-WQEBB SQ: 5 maps of 3 WQEBBs fit
  PollCore& c = r.core();
  const auto pg = r.alloc(1);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(c.map(pg, kRw, 0, 4096).ok());
  EXPECT_EQ(c.map(pg, kRw, 0, 4096).errc, Errc::kNoRoom);
  r.complete_all();
  EXPECT_TRUE(c.map(pg, kRw, 0, 4096).ok());
}

// Windows leave a core only after their unmap completed; the depot rebalances between cores.
TEST(Cache, DepotOnlyAfterCompletion) {
  Rig r(16, 4, 4, 1024, 4096, 2);
  PollCore& a = r.core(0);
  PollCore& b = r.core(1);
  const auto pg = r.alloc(1);
  EXPECT_EQ(r.census().depot, 12u);
  std::vector<Window*> ws;
  for (int i = 0; i < 10; ++i) {
    MapResult m = a.map(pg, kRw, 0, 4096);
    ASSERT_TRUE(m.ok());
    ws.push_back(m.window);
  }
  for (Window* w : ws) ASSERT_EQ(a.unmap(w), Errc::kOk);
  // Over the nominal size, but nothing completed: nothing may leave core a.
  Census c = r.census();
  EXPECT_EQ(c.unmapping, 10u);
  EXPECT_EQ(a.stats().depot_flushes, 0u);
  EXPECT_EQ(a.cache().len(), 10u);
  r.complete_all(0);  // the poll flushes down to the nominal size
  c = r.census();
  EXPECT_EQ(c.unmapping, 0u);
  EXPECT_GE(a.stats().depot_flushes, 1u);
  EXPECT_LE(a.cache().len(), a.cache().nominal_size());
  // Core b drains everything it can get.
  std::vector<Window*> got;
  for (;;) {
    MapResult m = b.map(pg, kRw, 0, 4096);
    if (!m.ok()) break;
    got.push_back(m.window);
  }
  EXPECT_EQ(got.size(), 16u - a.cache().len());
  for (Window* w : got) EXPECT_EQ(w->owner(), b.id());
  EXPECT_GE(b.stats().depot_refills, 1u);
  for (Window* w : got) ASSERT_EQ(b.unmap(w), Errc::kOk);
  r.census();
}

TEST(RemoteInvalidate, FreesOnceAndRefusesSecondUnmap) {
  Rig r(4, 4, 4, 1024, 4096, 2);
  PollCore& c = r.core();
  const auto pg = r.alloc(1);
  MapResult m = c.map(pg, kRw, 0, 4096);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ(c.remote_invalidated(m.rkey ^ 1), Errc::kNotMapped);  // wrong key: stale
  EXPECT_EQ(r.core(1).remote_invalidated(m.rkey), Errc::kWrongCore);
  EXPECT_EQ(c.remote_invalidated(m.rkey), Errc::kOk);
  EXPECT_EQ(m.window->state(), WindowState::kUnmapping);  // its map UMR is still in flight
  const uint32_t pi = c.qp().sq().pi();
  EXPECT_EQ(c.unmap(m.window), Errc::kNotMapped);
  EXPECT_EQ(c.qp().sq().pi(), pi);
  EXPECT_EQ(c.remote_invalidated(m.rkey), Errc::kNotMapped);
  EXPECT_EQ(c.stats().remote_invalidations, 1u);
  r.complete_all();
  // Recorded kUnmapping; its UMRs done, the core reads it as free.
  EXPECT_EQ(m.window->state(), WindowState::kUnmapping);
  EXPECT_EQ(c.state_of(m.window), WindowState::kCache);
  r.census();
}

// Nothing updates a window when its UMRs complete: the core compares the window's last UMR
// position with the SQ consumer. A window is done exactly when the consumer passed its last
// UMR, not when it reached it; a pointer-mode map's KLM array is busy until that map completed.
TEST(Completion, WindowsReadTheirStateFromTheSqConsumer) {
  Rig r(8, 256, 8, 1024);
  PollCore& c = r.core();
  auto& sq = c.qp().sq();
  const auto pg = r.alloc(60);
  const uint64_t pa = sq.pi();
  MapResult a = c.map(std::span(pg.data(), 4), kRw, 0, 4 * 4096);  // inline, fast path
  ASSERT_TRUE(a.ok());
  EXPECT_FALSE(c.umrs_done(a.window));
  const uint64_t pb = sq.pi();
  MapResult b = c.map(pg, kRw, 0, 60 * 4096);  // pointer mode, fast path
  ASSERT_TRUE(b.ok());
  EXPECT_TRUE(c.klm_busy(b.window));
  r.complete_through(pa);  // a's map: the consumer at b's map
  EXPECT_TRUE(c.umrs_done(a.window));
  EXPECT_FALSE(c.umrs_done(b.window));
  EXPECT_TRUE(c.klm_busy(b.window)) << "the consumer reached b's map, it did not pass it";
  const uint64_t pu = sq.pi();
  ASSERT_EQ(c.unmap(a.window), Errc::kOk);
  r.complete_through(pb);  // b's map: the consumer at a's invalidate
  EXPECT_FALSE(c.klm_busy(b.window));
  EXPECT_TRUE(c.umrs_done(b.window));
  EXPECT_FALSE(c.umrs_done(a.window)) << "its invalidate has not completed";
  EXPECT_EQ(c.state_of(a.window), WindowState::kUnmapping);
  EXPECT_EQ(r.census().unmapping, 1u);
  r.complete_through(pu);
  EXPECT_TRUE(c.umrs_done(a.window));
  EXPECT_EQ(a.window->state(), WindowState::kUnmapping) << "nothing touched it";
  EXPECT_EQ(c.state_of(a.window), WindowState::kCache);
  EXPECT_EQ(r.census().unmapping, 0u);
  // A peer's invalidation of b (no UMR of this core): free at once, its UMRs being done.
  EXPECT_EQ(c.remote_invalidated(b.rkey), Errc::kOk);
  EXPECT_EQ(b.window->state(), WindowState::kCache);
}

// Random map/unmap/invalidate/complete steps with the checker after each (device-less).
TEST(Stress, RandomStepsKeepTheStateMachine) {
  Rig r(32, 8, 8, 256, 4096, 2);
  const auto pg = r.alloc(64);
  std::mt19937_64 rng(42);
  std::vector<std::vector<Window*>> mapped(2);
  for (int step = 0; step < 20000; ++step) {
    const size_t ci = rng() % 2;
    PollCore& c = r.core(ci);
    auto& mine = mapped[ci];
    const uint32_t op = rng() % 10;
    if (op < 5) {
      const uint32_t n = 1 + rng() % 8;
      std::vector<uint64_t> p(n);
      for (auto& x : p) x = pg[rng() % pg.size()];
      MapResult m = c.map(p, kRw, 0, uint64_t{n} * 4096);
      if (m.ok())
        mine.push_back(m.window);
      else
        ASSERT_TRUE(m.errc == Errc::kNoWindow || m.errc == Errc::kNoRoom)
            << rdmx::errc_name(m.errc);
    } else if (op < 8 && !mine.empty()) {
      const size_t k = rng() % mine.size();
      const Errc e = c.unmap(mine[k]);
      ASSERT_TRUE(e == Errc::kOk || e == Errc::kNoRoom) << rdmx::errc_name(e);
      if (e == Errc::kOk) mine.erase(mine.begin() + static_cast<long>(k));
    } else if (op == 8 && !mine.empty()) {
      const size_t k = rng() % mine.size();
      ASSERT_EQ(c.remote_invalidated(mine[k]->rkey()), Errc::kOk);
      mine.erase(mine.begin() + static_cast<long>(k));
    } else {
      r.complete_all(ci);
    }
    auto cen = r.pool->check_windows();
    ASSERT_TRUE(cen.ok()) << "step " << step << ": " << cen.error().message;
    ASSERT_EQ(cen.value().mapped, mapped[0].size() + mapped[1].size());
  }
  for (size_t i = 0; i < 2; ++i) {
    const CoreStats& s = r.core(i).stats();
    EXPECT_GT(s.maps, 3000u);
    EXPECT_GT(s.unmaps, 2000u);
    EXPECT_GT(s.remote_invalidations, 500u);
    EXPECT_GT(s.depot_refills, 10u);
  }
}

}  // namespace
