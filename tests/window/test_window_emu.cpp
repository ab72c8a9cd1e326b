// lib/win over the emulated device (suite 'emu', inline mode: deterministic, processed on the
// doorbell). Side A owns the windows; side B is the peer that reads and writes through them.
#include <string>
#include <vector>

#include <rdmx/core/log.hpp>

#include "emu_rig.hpp"

namespace {

using namespace rdmx_test;

// Peer WRITE and READ through a window touch exactly the mapped bytes of exactly the mapped
// pages: random page lists of 1..max_pages, random offsets and lengths, every arena byte checked.
TEST(EmuWindow, PeerWriteReadTouchExactlyTheMappedBytes) {
  EmuRig r(16, 16);
  std::mt19937_64 rng(1);
  const uint64_t base = r.a.arena().base();
  for (int iter = 0; iter < 60; ++iter) {
    const uint32_t n = 1 + static_cast<uint32_t>(rng() % 16);
    auto pages = r.random_pages(rng, n);
    const uint32_t off = static_cast<uint32_t>(rng() % 4096);
    const uint64_t min_len = uint64_t{n - 1} * 4096 - off + 1;
    const uint64_t max_len = uint64_t{n} * 4096 - off;
    const uint64_t len = n == 1 ? 1 + rng() % max_len : min_len + rng() % (max_len - min_len + 1);
    MapResult m = r.ca().map(pages, kRw, off, len);
    ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
    r.settle(r.ca());
    r.write_read_check(
        rng, m, [&](uint64_t i) { return EmuRig::phys(pages, off, i, base); }, iter);
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
    r.settle(r.ca());
  }
  EXPECT_EQ(r.ca().stats().maps, 60u);
  r.expect_no_checker_reports();
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
}

// Reads and writes beyond the mapped length fail and move nothing.
TEST(EmuWindow, AccessBeyondLengthFails) {
  EmuRig r;
  std::mt19937_64 rng(2);
  auto pages = r.random_pages(rng, 2);
  MapResult m = r.ca().map(pages, kRw, 100, 5000);
  ASSERT_TRUE(m.ok());
  r.settle(r.ca());
  EXPECT_EQ(r.peer_op(true, 0, 4990, 20, m.rkey), kRemAccess);
  r.expect_arena_matches_shadow("write past the end");
  r.recover();
  r.expect_arena_matches_shadow("after recover");
  // recover() left every window free: map again (new key).
  m = r.ca().map(pages, kAccessLocalWrite | kAccessRemoteWrite, 100, 5000);
  ASSERT_TRUE(m.ok());
  r.settle(r.ca());
  EXPECT_EQ(r.peer_op(false, 0, 0, 16, m.rkey), kRemAccess);  // not granted remote read
  r.recover();
  r.expect_arena_matches_shadow("read without access");
}

// After unmap the old rkey reaches nothing; after a re-map it still fails (key rotated).
TEST(EmuWindow, UnmappedAndStaleKeysFail) {
  EmuRig r(4, 16);
  std::mt19937_64 rng(3);
  auto pages = r.random_pages(rng, 4);
  MapResult m = r.ca().map(pages, kRw, 0, 4 * 4096);
  ASSERT_TRUE(m.ok());
  r.settle(r.ca());
  ASSERT_EQ(r.peer_op(true, 0, 0, 100, m.rkey), 0);
  for (uint32_t i = 0; i < 100; ++i) r.shadow[pages[0] - r.a.arena().base() + i] = r.arena_b()[i];
  const uint32_t old_rkey = m.rkey;
  ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
  r.settle(r.ca());
  auto v = r.a.emu()->inspect_mkey(old_rkey);
  EXPECT_TRUE(v.free);
  for (uint32_t i = 0; i < 100; ++i) r.arena_b()[i] = static_cast<uint8_t>(~r.arena_b()[i]);
  EXPECT_EQ(r.peer_op(true, 0, 0, 100, old_rkey), kRemAccess);
  r.expect_arena_matches_shadow("write after unmap");
  r.recover();
  EXPECT_EQ(r.peer_op(false, 0, 0, 100, old_rkey), kRemAccess);
  r.recover();
  // Re-map the same window (one window per core here is not guaranteed; map until we get it).
  Window* w = nullptr;
  std::vector<Window*> others;
  for (int i = 0; i < 4 && !w; ++i) {
    MapResult m2 = r.ca().map(pages, kRw, 0, 4 * 4096);
    ASSERT_TRUE(m2.ok());
    if (m2.window == m.window)
      w = m2.window;
    else
      others.push_back(m2.window);
  }
  ASSERT_NE(w, nullptr);
  r.settle(r.ca());
  EXPECT_NE(w->rkey(), old_rkey);
  EXPECT_EQ(w->rkey() >> 8, old_rkey >> 8);
  EXPECT_EQ(r.peer_op(true, 0, 0, 100, old_rkey), kRemAccess);
  r.expect_arena_matches_shadow("write with a stale key after re-map");
  r.recover();
  r.expect_no_checker_reports();
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().mapped, 0u);  // recover() freed them all
  EXPECT_EQ(cen.value().unmapping, 0u);
}

// A peer's SEND_WITH_INV frees the window; the owner does not unmap it twice.
TEST(EmuWindow, RemoteInvalidation) {
  EmuRig r;
  std::mt19937_64 rng(4);
  auto pages = r.random_pages(rng, 3);
  MapResult m = r.ca().map(pages, kRw, 10, 3 * 4096 - 20);
  ASSERT_TRUE(m.ok());
  // The receive lands in the last data page (the model copies what arrives there).
  const Sge rbuf{r.a.arena().page_addr(r.a.arena().n_pages() - 1), 256, r.a.arena().lkey()};
  ASSERT_EQ(r.ca().post_recv({&rbuf, 1}, 77), Errc::kOk);
  r.settle(r.ca());
  const Sge msg{r.b.arena().base(), 8, r.b.arena().lkey()};
  ASSERT_EQ(r.cb().post_send_inv({&msg, 1}, m.rkey, 5, true), Errc::kOk);
  r.drain(r.cb());
  bool got = false;
  r.ca().poll(16, [&](const Completion& c) {
    if (c.recv && c.cookie == 77) {
      got = true;
      EXPECT_TRUE(c.ok());
      EXPECT_EQ(c.cqe_opcode, MLX5_CQE_RESP_SEND_INV);
      EXPECT_EQ(c.imm, m.rkey);
    }
  });
  ASSERT_TRUE(got);
  std::memcpy(&r.shadow[rbuf.addr - r.a.arena().base()], r.arena_b(), 8);
  EXPECT_EQ(r.ca().stats().remote_invalidations, 1u);
  EXPECT_NE(m.window->state(), WindowState::kMapped);
  EXPECT_TRUE(r.a.emu()->inspect_mkey(m.rkey).free);
  const uint32_t pi = r.ca().qp().sq().pi();
  EXPECT_EQ(r.ca().unmap(m.window), Errc::kNotMapped);
  EXPECT_EQ(r.ca().qp().sq().pi(), pi);
  r.expect_arena_matches_shadow("remote invalidation");
  EXPECT_EQ(r.peer_op(true, 0, 0, 16, m.rkey), kRemAccess);
  r.recover();
  // The window is reusable (it was free on the device: the map's free-check passes).
  MapResult m2 = r.ca().map(pages, kRw, 0, 4096 * 2 + 1);
  ASSERT_TRUE(m2.ok());
  r.settle(r.ca());
  EXPECT_EQ(r.peer_op(true, 0, 0, 16, m2.rkey), 0);
  r.expect_no_checker_reports();
}

// Pointer mode: a 256-page window (translation list in the window's KLM array).
TEST(EmuWindow, PointerMode256Pages) {
  EmuRig r(4, 256, 1024);
  std::mt19937_64 rng(5);
  const uint64_t base = r.a.arena().base();
  for (int iter = 0; iter < 4; ++iter) {
    auto pages = r.random_pages(rng, 256);
    const uint32_t off = static_cast<uint32_t>(rng() % 4096);
    const uint64_t len = 256ull * 4096 - off - rng() % 4000;
    MapResult m = r.ca().map(pages, kRw, off, len);
    ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
    r.settle(r.ca());
    // WRITE 1 MiB-ish in pieces of the peer's arena size, at random window offsets.
    for (int k = 0; k < 8; ++k) {
      const uint64_t wo = rng() % len;
      const uint32_t wl = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(len - wo, 65536));
      for (uint32_t i = 0; i < wl; ++i) r.arena_b()[i] = static_cast<uint8_t>(rng());
      ASSERT_EQ(r.peer_op(true, 0, wo, wl, m.rkey), 0);
      for (uint32_t i = 0; i < wl; ++i)
        r.shadow[EmuRig::phys(pages, off, wo + i, base)] = r.arena_b()[i];
      const uint64_t ro = rng() % len;
      const uint32_t rl = static_cast<uint32_t>(1 + rng() % std::min<uint64_t>(len - ro, 65536));
      ASSERT_EQ(r.peer_op(false, 1 << 20, ro, rl, m.rkey), 0);
      for (uint32_t i = 0; i < rl; ++i)
        ASSERT_EQ(r.arena_b()[(1 << 20) + i], r.shadow[EmuRig::phys(pages, off, ro + i, base)]);
    }
    r.expect_arena_matches_shadow("pointer mode");
    ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
    r.settle(r.ca());
  }
  EXPECT_EQ(r.ca().stats().pointer_maps, 4u);
  r.expect_no_checker_reports();
}

// Windows move between cores (two PollCores in one thread) only after their unmap completed.
TEST(EmuWindow, WindowsMoveBetweenCoresOnlyAfterQuiescence) {
  EmuRig r(8, 4, 512, 2, 4);
  PollCore& c0 = r.ca(0);
  PollCore& c1 = r.ca(1);
  std::mt19937_64 rng(6);
  auto pages = r.random_pages(rng, 1);
  // Core 1 holds the windows of its initial fill; core 0 takes every other window.
  std::vector<Window*> held;
  while (c1.cache().len()) held.push_back(c1.map(pages, kRw, 0, 4096).window);
  std::vector<Window*> ws;
  for (;;) {
    MapResult m = c0.map(pages, kRw, 0, 4096);
    if (!m.ok()) {
      EXPECT_EQ(m.errc, Errc::kNoWindow);
      break;
    }
    ws.push_back(m.window);
  }
  ASSERT_EQ(ws.size() + held.size(), 8u);
  // Unmap all without ringing the doorbell: the invalidates have not even reached the device,
  // so none may leave core 0, however far over its nominal size its cache is.
  for (Window* w : ws) ASSERT_EQ(c0.unmap(w), Errc::kOk);
  EXPECT_EQ(c1.map(pages, kRw, 0, 4096).errc, Errc::kNoWindow);
  EXPECT_EQ(r.a.pool().depot_count(), 0u);
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().unmapping, ws.size());
  // Quiescence: the unmaps complete, core 0 flushes down to its nominal size.
  r.settle(c0);
  EXPECT_EQ(r.a.pool().depot_count(), ws.size() - c0.cache().nominal_size());
  std::vector<Window*> got;
  for (;;) {
    MapResult m = c1.map(pages, kRw, 0, 4096);
    if (!m.ok()) break;
    got.push_back(m.window);
    EXPECT_EQ(m.window->owner(), c1.id());
  }
  EXPECT_EQ(got.size(), ws.size() - c0.cache().nominal_size());
  for (Window* w : held) ASSERT_EQ(c1.unmap(w), Errc::kOk);
  r.settle(c1);
  for (Window* w : got) {
    ASSERT_EQ(r.peer_op(true, 0, 0, 64, w->rkey(), 1), 0);
    ASSERT_EQ(c0.unmap(w), Errc::kWrongCore);
    ASSERT_EQ(c1.unmap(w), Errc::kOk);
  }
  r.settle(c1);
  cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().mapped, 0u);
  r.expect_no_checker_reports();
}

// A QP error mid-flight: in-flight UMRs flush, recover() leaves every window free and usable.
TEST(EmuWindow, RecoverAfterQpError) {
  EmuRig r(8, 8);
  std::mt19937_64 rng(8);
  auto pages = r.random_pages(rng, 8);
  PollCore& c = r.ca();
  std::vector<Window*> ws;
  for (int i = 0; i < 3; ++i) {
    MapResult m = c.map(pages, kRw, 0, 8 * 4096);
    ASSERT_TRUE(m.ok());
    ws.push_back(m.window);
  }
  r.settle(c);
  ASSERT_TRUE(r.a.emu()
                  ->faults()
                  .error_on_nth_wqe(c.qp_handle(), 2, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR)
                  .ok());
  ASSERT_EQ(c.unmap(ws[0]), Errc::kOk);
  ASSERT_EQ(c.unmap(ws[1]), Errc::kOk);          // this one fails
  MapResult m = c.map(pages, kRw, 0, 8 * 4096);  // flushed
  ASSERT_TRUE(m.ok());
  r.drain(c);
  EXPECT_TRUE(c.qp().in_error());
  EXPECT_GE(c.stats().umr_errors, 2u);
  EXPECT_EQ(c.map(pages, kRw, 0, 4096 * 8).errc, Errc::kQpError);
  EXPECT_EQ(c.unmap(ws[2]), Errc::kQpError);
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_GE(cen.value().dirty, 1u);
  r.recover();
  cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().mapped, 0u);
  EXPECT_EQ(cen.value().unmapping, 0u);
  EXPECT_EQ(cen.value().dirty, 0u);
  for (uint32_t i = 0; i < r.a.pool().n_windows(); ++i) {
    if (r.a.pool().window(i).owner() == c.id()) {
      EXPECT_TRUE(r.a.emu()->inspect_mkey(r.a.pool().window(i).rkey()).free) << i;
    }
  }
  // Every window maps again (the free-check in the map UMR passes) and works.
  std::vector<Window*> again;
  for (int i = 0; i < 8; ++i) {
    MapResult m2 = c.map(pages, kRw, 0, 8 * 4096);
    ASSERT_TRUE(m2.ok()) << rdmx::errc_name(m2.errc);
    again.push_back(m2.window);
  }
  r.settle(c);
  for (Window* w : again) EXPECT_EQ(r.peer_op(false, 0, 0, 64, w->rkey()), 0);
  EXPECT_EQ(r.a.emu()->checker().count(rdmx::emu::Rule::kUmrNotFree), 0u);
}

// 1,000,000 random map / unmap / remote-invalidate / poll steps, checker after every step.
TEST(EmuWindow, MillionRandomStepsWithChecker) {
  EmuRig r(32, 8, 512, 1, 8);
  PollCore& c = r.ca();
  std::mt19937_64 rng(9);
  auto pool_pages = r.random_pages(rng, 64);
  const Sge rbuf{r.a.arena().page_addr(r.a.arena().n_pages() - 1), 64, r.a.arena().lkey()};
  const Sge msg{r.b.arena().base(), 8, r.b.arena().lkey()};
  std::vector<Window*> mapped;
  uint64_t invalidations = 0, maps = 0, unmaps = 0, peer_checks = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const int kSteps = 1'000'000;
  for (int step = 0; step < kSteps; ++step) {
    const uint32_t op = static_cast<uint32_t>(rng() % 16);
    if (op < 7) {
      const uint32_t n = 1 + static_cast<uint32_t>(rng() % 8);
      uint64_t p[8];
      for (uint32_t i = 0; i < n; ++i) p[i] = pool_pages[rng() % pool_pages.size()];
      MapResult m = c.map({p, n}, kRw, 0, uint64_t{n} * 4096);
      if (m.ok()) {
        mapped.push_back(m.window);
        ++maps;
      } else {
        ASSERT_TRUE(m.errc == Errc::kNoWindow || m.errc == Errc::kNoRoom)
            << rdmx::errc_name(m.errc);
      }
    } else if (op < 13 && !mapped.empty()) {
      const size_t k = rng() % mapped.size();
      const Errc e = c.unmap(mapped[k]);
      if (e == Errc::kOk) {
        mapped[k] = mapped.back();
        mapped.pop_back();
        ++unmaps;
      } else {
        ASSERT_EQ(e, Errc::kNoRoom);
      }
    } else if (op == 13 && !mapped.empty()) {
      // The peer invalidates one window with SEND_WITH_INV.
      const size_t k = rng() % mapped.size();
      Window* w = mapped[k];
      ASSERT_EQ(c.post_recv({&rbuf, 1}, 1), Errc::kOk);
      r.settle(c);
      ASSERT_EQ(r.cb().post_send_inv({&msg, 1}, w->rkey(), 2, true), Errc::kOk);
      r.drain(r.cb());
      r.drain(c);
      ASSERT_NE(w->state(), WindowState::kMapped) << "step " << step;
      mapped[k] = mapped.back();
      mapped.pop_back();
      ++invalidations;
    } else if (op == 14) {
      c.flush();
      c.poll(64, [](const Completion&) {});
    } else if (op == 15 && step % 997 == 0 && !mapped.empty()) {
      // Now and then the peer writes through a mapped window.
      r.settle(c);
      ASSERT_EQ(r.peer_op(true, 0, 0, 64, mapped[rng() % mapped.size()]->rkey()), 0);
      ++peer_checks;
    }
    auto cen = r.a.pool().check_windows();
    ASSERT_TRUE(cen.ok()) << "step " << step << ": " << cen.error().message;
    ASSERT_EQ(cen.value().mapped, mapped.size()) << "step " << step;
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf(
      "1M steps: %llu maps, %llu unmaps, %llu remote invalidations, %llu peer writes, "
      "%.2f s\n",
      static_cast<unsigned long long>(maps), static_cast<unsigned long long>(unmaps),
      static_cast<unsigned long long>(invalidations), static_cast<unsigned long long>(peer_checks),
      secs);
  EXPECT_GT(invalidations, 1000u);
  r.expect_no_checker_reports();
  EXPECT_EQ(c.stats().umr_errors, 0u);
}

}  // namespace

// ---- Interleaved windows (repeat-block UMR) ---------------------------------------------------

namespace {

// Window byte i of an interleaved layout -> arena A offset (the model the device must follow).
uint64_t il_phys(const std::vector<InterleavedPart>& parts, uint64_t i, uint64_t base) {
  uint64_t block = 0;
  for (const InterleavedPart& p : parts) block += p.bytes;
  const uint64_t r = i / block;
  uint64_t b = i % block;
  for (const InterleavedPart& p : parts) {
    if (b < p.bytes) return p.addr + r * (p.bytes + p.skip) + b - base;
    b -= p.bytes;
  }
  ADD_FAILURE() << "il_phys: byte " << i << " in no part";
  return 0;
}

// A random storage layout: data blocks in the lower half of the arena, their metadata (and
// sometimes a third part) in the upper half, random block and metadata sizes, random gaps.
std::vector<InterleavedPart> random_layout(std::mt19937_64& rng, uint64_t base, uint64_t half,
                                           uint32_t* blocks, uint64_t max_len) {
  static const uint32_t kData[] = {512, 4096, 520, 0};
  static const uint32_t kMeta[] = {8, 16, 64, 0};
  uint32_t d = kData[rng() % 4], md = kMeta[rng() % 4];
  if (d == 0) d = 1 + static_cast<uint32_t>(rng() % 4096);
  if (md == 0) md = 1 + static_cast<uint32_t>(rng() % 128);
  std::vector<InterleavedPart> parts;
  const uint32_t dskip = rng() % 3 == 0 ? static_cast<uint32_t>(rng() % 256) : 0;
  const uint32_t mskip = rng() % 3 == 0 ? static_cast<uint32_t>(rng() % 64) : 0;
  const bool third = rng() % 4 == 0;
  const uint32_t tb = 1 + static_cast<uint32_t>(rng() % 32);
  const uint64_t per = uint64_t{d} + md + (third ? tb : 0);
  *blocks = 1 + static_cast<uint32_t>(rng() %
                                      std::max<uint64_t>(1, std::min<uint64_t>(16, max_len / per)));
  const uint64_t dspan = uint64_t{*blocks} * (d + dskip), mspan = uint64_t{*blocks} * (md + mskip);
  parts.push_back({base + rng() % (half - dspan), d, dskip});
  parts.push_back({base + half + rng() % (half / 2 - mspan), md, mskip});
  if (third)
    parts.push_back({base + half + half / 2 + rng() % (half / 2 - uint64_t{*blocks} * tb), tb, 0});
  return parts;
}

// Peer WRITE and READ through an interleaved window (data + metadata) touch exactly the bytes of
// the layout, in the layout's order: random block/metadata sizes, gaps and sub-ranges, every
// arena byte compared.
TEST(EmuInterleaved, PeerWriteReadTouchExactlyTheLayout) {
  EmuRig r(16, 16);
  std::mt19937_64 rng(11);
  const uint64_t base = r.a.arena().base();
  const uint64_t half = (r.a.arena().data_end() - base) / 2;
  const uint64_t max_len = 16 * 4096;
  for (int iter = 0; iter < 60; ++iter) {
    uint32_t blocks = 0;
    const auto parts = random_layout(rng, base, half, &blocks, max_len);
    MapResult m = r.ca().map_interleaved(parts, blocks, kRw);
    ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc) << " iter " << iter;
    uint64_t block = 0;
    for (const auto& p : parts) block += p.bytes;
    ASSERT_EQ(m.length, block * blocks);
    r.settle(r.ca());
    r.write_read_check(
        rng, m, [&](uint64_t i) { return il_phys(parts, i, base); }, iter, iter % 5 == 0);
    if (HasFatalFailure()) return;
    ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
    r.settle(r.ca());
  }
  EXPECT_EQ(r.ca().stats().maps, 60u);
  r.expect_no_checker_reports();
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
}

// A SEND scattered into a receive whose SGE is an interleaved window lands in the layout.
TEST(EmuInterleaved, SendScattersIntoTheLayout) {
  EmuRig r(16, 16);
  const uint64_t base = r.a.arena().base();
  const std::vector<InterleavedPart> parts = {{base + 8192, 512, 0}, {base + 200000, 8, 8}};
  MapResult m = r.ca().map_interleaved(parts, 6, kRw);
  ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
  r.settle(r.ca());
  const Sge rs{m.iova, static_cast<uint32_t>(m.length), m.lkey};
  ASSERT_EQ(r.ca().post_recv({&rs, 1}, 77), Errc::kOk);
  r.ca().flush();
  const uint32_t n = static_cast<uint32_t>(m.length);
  std::mt19937_64 rng(5);
  for (uint32_t i = 0; i < n; ++i) r.arena_b()[i] = static_cast<uint8_t>(rng());
  const Sge ss{r.b.arena().base(), n, r.b.arena().lkey()};
  ASSERT_EQ(r.cb().post_send({&ss, 1}, 1, true), Errc::kOk);
  r.cb().flush();
  bool got = false;
  for (int spin = 0; spin < 100000 && !got; ++spin) {
    r.cb().poll(16, [](const Completion&) {});
    r.ca().poll(16, [&](const Completion& c) {
      if (c.recv && c.cookie == 77) {
        EXPECT_EQ(c.status, 0);
        EXPECT_EQ(c.byte_len, n);
        got = true;
      }
    });
    r.a.emu()->progress();
    r.b.emu()->progress();
  }
  ASSERT_TRUE(got) << "receive did not complete";
  for (uint32_t i = 0; i < n; ++i) r.shadow[il_phys(parts, i, base)] = r.arena_b()[i];
  r.expect_arena_matches_shadow("after SEND");
  ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
  r.settle(r.ca());
  r.expect_no_checker_reports();
}

// After unmap the old rkey of an interleaved window reaches nothing, and an access past its
// length fails: neither changes a byte.
TEST(EmuInterleaved, StaleKeyAndOutOfBoundsChangeNothing) {
  EmuRig r(4, 16);
  const uint64_t base = r.a.arena().base();
  const std::vector<InterleavedPart> parts = {{base, 4096, 0}, {base + 300000, 16, 0}};
  MapResult m = r.ca().map_interleaved(parts, 4, kRw);
  ASSERT_TRUE(m.ok());
  r.settle(r.ca());
  for (uint32_t i = 0; i < 64; ++i) r.arena_b()[i] = static_cast<uint8_t>(i + 1);
  EXPECT_EQ(r.peer_op(true, 0, m.length - 8, 16, m.rkey), kRemAccess);
  r.expect_arena_matches_shadow("write past the end");
  r.recover();
  // recover() left the windows free: map again, then unmap and use the old key.
  m = r.ca().map_interleaved(parts, 4, kRw);
  ASSERT_TRUE(m.ok());
  r.settle(r.ca());
  const uint32_t old = m.rkey;
  ASSERT_EQ(r.ca().unmap(m.window), Errc::kOk);
  r.settle(r.ca());
  EXPECT_EQ(r.peer_op(true, 0, 0, 64, old), kRemAccess);
  r.expect_arena_matches_shadow("write after unmap");
  r.recover();
  EXPECT_EQ(r.peer_op(false, 0, 0, 64, old), kRemAccess);
  r.recover();
  r.expect_arena_matches_shadow("read after unmap");
}

// Layouts map_interleaved refuses, each before anything is posted.
TEST(EmuInterleaved, RefusedLayoutsPostNothing) {
  EmuRig r(4, 16);
  const uint64_t base = r.a.arena().base();
  const uint64_t end = r.a.arena().data_end();
  PollCore& c = r.ca();
  const uint32_t pi = c.qp().sq().pi();
  using P = std::vector<InterleavedPart>;
  auto code = [&](const P& p, uint32_t blocks, uint32_t access = kRw) {
    return c.map_interleaved(p, blocks, access).errc;
  };
  EXPECT_EQ(code(P{}, 1), Errc::kInvalidArgument);
  EXPECT_EQ(code(P{{base, 512, 0}}, 0), Errc::kInvalidArgument);
  EXPECT_EQ(code(P{{base, 0, 8}}, 1), Errc::kInvalidArgument);
  EXPECT_EQ(code(P{{base, 512, 0}}, 1, kAccessRemoteWrite), Errc::kInvalidArgument);
  EXPECT_EQ(code(P{{base, 65000, 536}}, 1), Errc::kOutOfRange);  // stride > 65535
  EXPECT_EQ(code(P{{base, 4096, 0}, {base + 8192, 8, 0}}, 16), Errc::kOutOfRange);  // > 64 KiB
  EXPECT_EQ(code(P{{base - 1, 512, 0}}, 1), Errc::kNotInArena);
  EXPECT_EQ(code(P{{end - 512 * 3, 512, 0}}, 4), Errc::kNotInArena);  // the 4th block is past
  EXPECT_EQ(code(P(16, InterleavedPart{base, 8, 0}), 1), Errc::kTooManyPages);  // 16 + header
  EXPECT_EQ(c.qp().sq().pi(), pi) << "a refused layout posted a WQE";
  EXPECT_TRUE(c.map_interleaved(P(15, InterleavedPart{base, 8, 0}), 1, kRw).ok());
}

}  // namespace

namespace {

// Log lines captured while a test runs (rdmx::set_log_sink).
std::vector<std::string> g_lines;
bool sink_enabled(rdmx::LogLevel) noexcept {
  return true;
}
void sink_write(rdmx::LogLevel, const char* line) noexcept {
  g_lines.emplace_back(line);
}

// A peer gone in the middle of a run (its QP errored) leaves many windows mapped: tearing the
// core and the pool down says so in one line each, not one line per window.
TEST(EmuWindow, TeardownAfterAQpErrorIsOneLinePerPart) {
  std::vector<std::string> lines;
  {
    EmuRig r(16, 16);
    std::mt19937_64 rng(11);
    for (int i = 0; i < 8; ++i) {
      MapResult m = r.ca().map(r.random_pages(rng, 4), kRw, 0, 4 * 4096);
      ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
    }
    r.settle(r.ca());
    auto* emu = dynamic_cast<rdmx::emu::EmuDevice*>(&r.a.device());
    ASSERT_NE(emu, nullptr);
    ASSERT_TRUE(emu->faults().qp_to_error(r.ca().qp_handle()).ok());
    static const rdmx::LogSink sink{sink_enabled, sink_write};
    g_lines.clear();
    rdmx::set_log_sink(&sink);
  }  // cores, then pools, torn down
  rdmx::set_log_sink(nullptr);
  lines.swap(g_lines);
  std::string all;
  for (const auto& l : lines) all += l + "\n";
  // The core (windows returned in an unknown state), the pool (mkeys not destroyed), the arena
  // (its MR still mapped by them): at most a line each; a line per window was 17 lines here.
  EXPECT_LE(lines.size(), 3u) << all;
  for (const char* part : {"poll core", "window pool", "arena"}) {
    size_t n = 0;
    for (const auto& l : lines) n += l.rfind(part, 0) == 0;
    EXPECT_LE(n, 1u) << part << ":\n" << all;
  }
}

}  // namespace
