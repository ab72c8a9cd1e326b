// Bad flows (suite 'security'): every misuse of map/unmap/post is refused with its specific Errc,
// nothing is posted (the SQ producer does not move), no window is consumed, and the error is
// counted in CoreStats::errors. Plus the parent MR's key (never handed out, local-only): a peer
// that guesses it, or any direct mkey nearby, reaches nothing.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <vector>

#include "rig.hpp"

namespace rdmx::sectest {
namespace {

// Runs `f` and checks that it posted nothing and consumed no window on core `c`.
struct NothingPosted {
  explicit NothingPosted(PollCore& c)
      : core(c), pi(c.qp().sq().pi()), cache(c.cache().len()), maps(c.stats().maps) {}
  ~NothingPosted() {
    EXPECT_EQ(core.qp().sq().pi(), pi) << "a refused call posted a WQE";
    EXPECT_EQ(core.cache().len(), cache) << "a refused call took a window";
    EXPECT_EQ(core.stats().maps, maps);
  }
  PollCore& core;
  uint32_t pi, cache;
  uint64_t maps;
};

std::vector<uint64_t> pages_of(Rig& r, uint32_t first, uint32_t n) {
  std::vector<uint64_t> p;
  for (uint32_t i = 0; i < n; ++i) p.push_back(r.a.arena().page_addr(first + i));
  return p;
}

TEST(BadFlows, DoubleUnmap) {
  Rig r;
  PollCore& c = r.ca();
  auto pages = pages_of(r, 0, 2);
  MapResult m = c.map(pages, kRw, 0, 8192);
  ASSERT_TRUE(m.ok());
  ASSERT_EQ(c.unmap(m.window), Errc::kOk);
  {
    NothingPosted np(c);
    EXPECT_EQ(c.unmap(m.window), Errc::kNotMapped);  // before the invalidate completed
  }
  ASSERT_TRUE(r.settle(c));
  {
    NothingPosted np(c);
    EXPECT_EQ(c.unmap(m.window), Errc::kNotMapped);  // after
  }
  EXPECT_EQ(c.stats().error_count(Errc::kNotMapped), 2u);
  // A window never mapped (free in the cache / depot).
  for (uint32_t i = 0; i < r.a.pool().n_windows(); ++i) {
    Window& w = r.a.pool().window(i);
    if (w.state() == win::WindowState::kMapped) continue;
    NothingPosted np(c);
    EXPECT_EQ(c.unmap(&w), Errc::kNotMapped);
  }
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().mapped, 0u);
}

TEST(BadFlows, UnmapAfterRemoteInvalidation) {
  Rig r;
  PollCore& c = r.ca();
  MapResult m = c.map(pages_of(r, 3, 1), kRw, 0, 4096);
  ASSERT_TRUE(m.ok());
  const Sge rbuf{r.a.arena().page_addr(0), 64, r.a.arena().lkey()};
  ASSERT_EQ(c.post_recv({&rbuf, 1}, 9), Errc::kOk);
  ASSERT_TRUE(r.settle(c));
  ASSERT_EQ(r.cb().post_send_inv({}, m.rkey, 1, true), Errc::kOk);
  bool sent = false, got = false;
  ASSERT_TRUE(r.poll_until(
      r.cb(), [&](const Completion& x) { sent |= x.ok(); }, [&] { return sent; }));
  ASSERT_TRUE(r.poll_until(
      c, [&](const Completion& x) { got |= x.recv && x.cqe_opcode == MLX5_CQE_RESP_SEND_INV; },
      [&] { return got; }));
  {
    NothingPosted np(c);
    EXPECT_EQ(c.unmap(m.window), Errc::kNotMapped);
  }
  // The notice arriving a second time (e.g. through another core) is stale.
  EXPECT_EQ(c.remote_invalidated(m.rkey), Errc::kNotMapped);
  auto cen = r.a.pool().check_windows();
  ASSERT_TRUE(cen.ok()) << cen.error().message;
  EXPECT_EQ(cen.value().mapped, 0u);
}

TEST(BadFlows, MapOfPagesOutsideTheArena) {
  RigConfig rc;
  rc.a_max_pages = 64;  // > the inline limit: the pool reserves KLM arrays at the arena's tail
  Rig r(rc);
  PollCore& c = r.ca();
  const mem::Arena& ar = r.a.arena();
  ASSERT_LT(ar.data_end(), ar.base() + ar.size()) << "expected a reserved tail";
  const uint64_t good = ar.page_addr(1);
  const uint64_t bad[] = {
      0,
      ar.base() - 4096,                // the page before the arena
      ar.base() + 1,                   // misaligned
      good + 2048,                     // misaligned inside a page
      ar.data_end(),                   // the reserved tail (KLM arrays): registered, never mappable
      ar.base() + ar.size() - 4096,    // last page of the tail
      ar.base() + ar.size(),           // just past the registration
      r.b.arena().page_addr(0),        // another host's arena
      reinterpret_cast<uint64_t>(&c),  // process memory
      ~uint64_t{0} & ~uint64_t{4095},  // top of the address space
  };
  for (uint64_t b : bad) {
    NothingPosted np(c);
    const uint64_t one[] = {b};
    EXPECT_EQ(c.map(one, kRw, 0, 4096).errc, Errc::kNotInArena) << std::hex << b;
    const uint64_t last_bad[] = {good, good, b};  // only the last entry is bad
    EXPECT_EQ(c.map(last_bad, kRw, 0, 3 * 4096).errc, Errc::kNotInArena) << std::hex << b;
  }
  EXPECT_EQ(c.stats().error_count(Errc::kNotInArena), 2 * std::size(bad));
}

TEST(BadFlows, MapWithMorePagesThanTheWindowHolds) {
  Rig r;  // max_pages 16
  PollCore& c = r.ca();
  std::vector<uint64_t> pages = pages_of(r, 0, 17);
  {
    NothingPosted np(c);
    EXPECT_EQ(c.map(pages, kRw, 0, 17 * 4096).errc, Errc::kTooManyPages);
  }
  std::vector<uint64_t> huge(1u << 20, r.a.arena().page_addr(0));
  {
    NothingPosted np(c);
    EXPECT_EQ(c.map(huge, kRw, 0, uint64_t{1} << 32).errc, Errc::kTooManyPages);
  }
  EXPECT_EQ(c.map({pages.data(), 16}, kRw, 0, 16 * 4096).errc, Errc::kOk);
}

TEST(BadFlows, MapArgumentErrors) {
  Rig r;
  PollCore& c = r.ca();
  auto p2 = pages_of(r, 4, 2);
  struct Case {
    std::vector<uint64_t> pages;
    uint32_t access, off;
    uint64_t len;
    Errc want;
  };
  const Case cases[] = {
      {{}, kRw, 0, 4096, Errc::kInvalidArgument},                 // no pages
      {p2, kRw, 0, 0, Errc::kInvalidArgument},                    // length 0
      {p2, 1u << 20, 0, 8192, Errc::kInvalidArgument},            // unknown access
      {p2, kAccessRemoteWrite, 0, 8192, Errc::kInvalidArgument},  // RW without LW
      {p2, kAccessRemoteWrite | kAccessRemoteRead, 0, 8192, Errc::kInvalidArgument},
      {p2, mlx5::kAccessRemoteAtomic, 0, 8192, Errc::kInvalidArgument},  // atomic w/o LW
      {p2, kRw, 4096, 4096, Errc::kOutOfRange},                          // offset = page
      {p2, kRw, ~0u, 1, Errc::kOutOfRange},                              // huge offset
      {p2, kRw, 0, 8193, Errc::kOutOfRange},                             // past last page
      {p2, kRw, 100, 8192 - 99, Errc::kOutOfRange},
      {p2, kRw, 0, 4096, Errc::kOutOfRange},                    // does not reach the last page
      {p2, kRw, 0, ~uint64_t{0}, Errc::kOutOfRange},            // 2^64 - 1
      {p2, kRw, 4095, ~uint64_t{0} - 4000, Errc::kOutOfRange},  // off + len wraps
  };
  for (const Case& k : cases) {
    NothingPosted np(c);
    EXPECT_EQ(c.map(k.pages, k.access, k.off, k.len).errc, k.want)
        << "pages " << k.pages.size() << " access 0x" << std::hex << k.access << " off " << k.off
        << " len " << k.len;
    EXPECT_EQ(c.last_error(), k.want);
  }
}

TEST(BadFlows, WrongCoreAndForeignWindows) {
  RigConfig rc;
  rc.n_cores = 2;
  Rig r(rc);
  PollCore& c0 = r.ca(0);
  PollCore& c1 = r.ca(1);
  MapResult m = c0.map(pages_of(r, 0, 1), kRw, 0, 4096);
  ASSERT_TRUE(m.ok());
  {
    NothingPosted np0(c0), np1(c1);
    EXPECT_EQ(c1.unmap(m.window), Errc::kWrongCore);
    EXPECT_EQ(c1.remote_invalidated(m.rkey), Errc::kWrongCore);
  }
  // Not windows of this pool at all.
  Window* foreign = &r.b.pool().window(0);
  auto* inside = reinterpret_cast<Window*>(reinterpret_cast<uint8_t*>(m.window) + 8);
  for (Window* w : {foreign, static_cast<Window*>(nullptr), inside}) {
    NothingPosted np(c0);
    EXPECT_EQ(c0.unmap(w), Errc::kInvalidArgument);
  }
  EXPECT_EQ(c0.unmap(m.window), Errc::kOk);
  ASSERT_TRUE(r.settle(c0));
}

TEST(BadFlows, InternalCookieBitAndTooManySges) {
  Rig r;
  PollCore& c = r.ca();
  const Sge s{r.a.arena().base(), 8, r.a.arena().lkey()};
  std::vector<Sge> many(17, s);
  NothingPosted np(c);
  EXPECT_EQ(c.post_write({&s, 1}, 0, 0, win::kInternalCookie | 1), Errc::kInvalidArgument);
  EXPECT_EQ(c.post_read({&s, 1}, 0, 0, win::kInternalCookie), Errc::kInvalidArgument);
  EXPECT_EQ(c.post_send({&s, 1}, ~uint64_t{0}), Errc::kInvalidArgument);
  EXPECT_EQ(c.post_send(many, 1), Errc::kInvalidArgument);
  EXPECT_EQ(c.post_recv(many, 1), Errc::kInvalidArgument);
}

TEST(BadFlows, EverythingRefusedOnAQpInError) {
  Rig r;
  PollCore& c = r.ca();
  MapResult m = c.map(pages_of(r, 0, 1), kRw, 0, 4096);
  ASSERT_TRUE(m.ok());
  ASSERT_TRUE(r.settle(c));
  ASSERT_TRUE(r.a.emu()->faults().qp_to_error(c.qp_handle()).ok());
  // Anything posted now flushes; the error CQE is what tells the core.
  const Sge s{r.a.arena().base(), 8, r.a.arena().lkey()};
  ASSERT_EQ(c.post_send({&s, 1}, 5, true), Errc::kOk);
  int flushed = 0;
  ASSERT_TRUE(r.poll_until(
      c, [&](const Completion& x) { flushed += x.cookie == 5 && x.status == kFlushErr; },
      [&] { return c.qp().in_error(); }));
  EXPECT_EQ(flushed, 1);
  {
    NothingPosted np(c);
    EXPECT_EQ(c.map(pages_of(r, 1, 1), kRw, 0, 4096).errc, Errc::kQpError);
    EXPECT_EQ(c.unmap(m.window), Errc::kQpError);
    EXPECT_EQ(c.post_write({&s, 1}, 0, m.rkey, 1), Errc::kQpError);
    EXPECT_EQ(c.post_read({&s, 1}, 0, m.rkey, 1), Errc::kQpError);
    EXPECT_EQ(c.post_send({&s, 1}, 1), Errc::kQpError);
    EXPECT_EQ(c.post_send_inv({&s, 1}, 0x1234, 1), Errc::kQpError);
    EXPECT_EQ(c.post_recv({&s, 1}, 1), Errc::kQpError);
  }
  EXPECT_EQ(c.stats().error_count(Errc::kQpError), 7u);
  r.recover_both();
  EXPECT_EQ(c.map(pages_of(r, 1, 1), kRw, 0, 4096).errc, Errc::kOk);
  ASSERT_TRUE(r.settle(c));
}

// The parent MR (the arena) is registered with local rights only (ArenaConfig::access default):
// emu, like the NIC, checks a window's rights on the window mkey and treats its KLM entries (the
// parent's lkey) as translation. Its rkey is never handed out (no window shares its index, no API
// returns it) but is guessable (over emu 0x201): with it, and with every direct mkey nearby, a
// peer's READ and WRITE are refused with REMOTE_ACCESS (0x13), and nothing on either host changes
// or is disclosed. Windows over the local-only parent still work. (Finding 2 of reliability.md.)
TEST(ParentKey, GuessedParentKeyOpensNothing) {
  RigConfig rc;
  rc.responder_keeps_rts = true;  // dozens of guesses on one connection, A's window kept mapped
  Rig r(rc);
  const mlx5::MrInfo& mr = r.a.arena().mr();
  EXPECT_EQ(mr.access, kAccessLocalWrite);
  EXPECT_EQ(r.a.emu()->inspect_mkey(mr.lkey).access,
            MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ |
                MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE);
  for (uint32_t i = 0; i < r.a.pool().n_windows(); ++i)
    EXPECT_NE(r.a.pool().window(i).mkey_index(), mr.rkey >> 8);

  // A live RW window over page 1, so the attacks run while the arena is in use.
  const uint64_t page1[] = {r.a.arena().page_addr(1)};
  MapResult w = r.ca().map(page1, kRw, 0, 4096);
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE(r.settle(r.ca()));

  // Random contents on both hosts; B's READ landing area holds a canary.
  for (size_t i = 0; i < side_data_bytes(r.a); ++i)
    side_mem(r.a)[i] = static_cast<uint8_t>(i * 131 + 7);
  const size_t land = 4096, land_len = 8192;
  std::memset(side_mem(r.b) + land, 0xA5, land_len);
  Snapshot sa, sb;
  sa.take_from(side_mem(r.a), r.a.arena().size());
  sb.take_from(side_mem(r.b), r.b.arena().size());

  uint64_t tried = 0, refused = 0, changed = 0, disclosed = 0;
  auto peer = [&](bool write, uint64_t raddr, uint32_t len, uint32_t rkey) {
    const Sge s{r.b.arena().base() + (write ? 0 : land), len, r.b.arena().lkey()};
    EXPECT_EQ(write ? r.cb().post_write({&s, 1}, raddr, rkey, 77, true)
                    : r.cb().post_read({&s, 1}, raddr, rkey, 77, true),
              Errc::kOk);
    uint8_t st = 0xff;
    EXPECT_TRUE(r.poll_until(
        r.cb(), [&](const Completion& x) { st = x.cookie == 77 ? x.status : st; },
        [&] { return st != 0xff; }));
    if (st) r.recover_peer();
    ++tried;
    refused += st == kRemAccess;
    EXPECT_EQ(st, kRemAccess) << (write ? "WRITE" : "READ") << " rkey 0x" << std::hex << rkey
                              << " raddr 0x" << raddr << " len 0x" << len;
    for (size_t i = land; i < land + land_len; ++i) disclosed += side_mem(r.b)[i] != 0xA5;
    changed += sa.verify_and_restore() + sb.verify_and_restore();
  };
  const uint64_t base = r.a.arena().base(), size = r.a.arena().size();
  // Inside the arena: the first page, the mapped page, an unmapped page, the reserved tail (the
  // pointer-mode KLM arrays), the last bytes, a multi-packet range; then around it.
  const struct {
    uint64_t addr;
    uint32_t len;
  } ranges[] = {{base, 64},
                {r.a.arena().page_addr(1), 4096},
                {r.a.arena().page_addr(7) + 100, 300},
                {r.a.arena().data_end(), 256},
                {base + size - 64, 64},
                {base + 8192, 3 * 4096},
                {base - 1, 2},
                {base + size - 1, 2},
                {base + size, 1},
                {~uint64_t{0} - 8, 64}};
  for (const auto& g : ranges) {
    peer(true, g.addr, g.len, mr.rkey);
    peer(false, g.addr, g.len, mr.rkey);
  }
  // Every direct mkey index nearby on A (all key bytes the device may have used for them, and
  // the actual one), and the parent index with every key byte.
  const uint32_t pidx = mr.rkey >> 8;
  const uint32_t hi = pidx + r.a.pool().n_windows() + 8;
  uint32_t directs = 0;
  for (uint32_t idx = 0; idx <= hi; ++idx) {
    const auto v = r.a.emu()->inspect_mkey(idx << 8);
    if (v.exists && v.indirect) continue;  // windows: the stale-key campaign's job
    if (v.exists) {
      ++directs;
      peer(true, v.start, 64, (idx << 8) | v.tag);
      peer(false, v.start, 64, (idx << 8) | v.tag);
    }
    for (uint32_t tag = 0; tag < 4; ++tag) {
      if (v.exists && tag == v.tag) continue;
      peer(tag & 1, base + 4096 * tag, 64, (idx << 8) | tag);
    }
  }
  for (uint32_t tag = 0; tag < 256; ++tag) peer(tag & 1, base + 64 * tag, 64, (pidx << 8) | tag);
  std::printf("parent MR rkey 0x%08x (local-only), %u direct mkeys near it: %" PRIu64
              " peer READ/WRITEs, "
              "%" PRIu64 " refused with 0x13, %" PRIu64 " bytes changed, %" PRIu64
              " bytes disclosed\n",
              mr.rkey, directs, tried, refused, changed, disclosed);
  EXPECT_GE(directs, 1u);
  EXPECT_EQ(refused, tried);
  EXPECT_EQ(changed, 0u);
  EXPECT_EQ(disclosed, 0u);

  // The window over the local-only parent works for the peer, read and write.
  const Sge src{r.b.arena().base(), 512, r.b.arena().lkey()};
  const Sge dst{r.b.arena().base() + land, 512, r.b.arena().lkey()};
  uint8_t st1 = 0xff, st2 = 0xff;
  ASSERT_EQ(r.cb().post_write({&src, 1}, 100, w.rkey, 1, true), Errc::kOk);
  ASSERT_EQ(r.cb().post_read({&dst, 1}, 100, w.rkey, 2, true), Errc::kOk);
  ASSERT_TRUE(r.poll_until(
      r.cb(), [&](const Completion& x) { (x.cookie == 1 ? st1 : st2) = x.status; },
      [&] { return st1 != 0xff && st2 != 0xff; }));
  EXPECT_EQ(st1, 0);
  EXPECT_EQ(st2, 0);
  EXPECT_EQ(0, std::memcmp(side_mem(r.a) + 4096 + 100, side_mem(r.b), 512));
  EXPECT_EQ(0, std::memcmp(side_mem(r.b) + land, side_mem(r.b), 512));
  EXPECT_EQ(r.checker_reports(), 0u) << r.checker_dump();
}

// Opt-in: an arena registered with remote rights (ArenaConfig::access = kAccessAll, for callers
// that hand the arena's own rkey to a peer) is reachable with that key, as documented, but never
// beyond the registration.
TEST(ParentKey, RemoteCapableArenaIsAnExplicitOptIn) {
  RigConfig rc;
  rc.a_parent_access = mlx5::kAccessAll;
  Rig r(rc);
  const mlx5::MrInfo& mr = r.a.arena().mr();
  auto peer = [&](bool write, uint64_t raddr, uint32_t len) {
    const Sge s{r.b.arena().base(), len, r.b.arena().lkey()};
    EXPECT_EQ(write ? r.cb().post_write({&s, 1}, raddr, mr.rkey, 77, true)
                    : r.cb().post_read({&s, 1}, raddr, mr.rkey, 77, true),
              Errc::kOk);
    uint8_t st = 0xff;
    EXPECT_TRUE(r.poll_until(
        r.cb(), [&](const Completion& x) { st = x.cookie == 77 ? x.status : st; },
        [&] { return st != 0xff; }));
    if (st) r.recover_peer();
    return st;
  };
  const uint64_t base = r.a.arena().base(), size = r.a.arena().size();
  EXPECT_EQ(peer(false, base + 4096, 64), 0);
  EXPECT_EQ(peer(true, base + size - 64, 64), 0);
  EXPECT_EQ(peer(false, base - 1, 2), kRemAccess);
  EXPECT_EQ(peer(true, base + size - 1, 2), kRemAccess);
  EXPECT_EQ(peer(false, base + size, 1), kRemAccess);
}

}  // namespace
}  // namespace rdmx::sectest

namespace rdmx::sectest {
namespace {

// RDMA READ depth: B reads A's window with 8 READs in one doorbell. A (responder) serves at most
// max_dest_rd_atomic READs at once; B (requester) keeps at most max_rd_atomic outstanding.
// Returns the statuses of the 8 READs in posting order (0xff: no completion seen).
std::vector<uint8_t> eight_reads(Rig& r) {
  MapResult m = r.ca().map(pages_of(r, 0, 1), kRw, 0, 4096);
  EXPECT_TRUE(m.ok());
  EXPECT_TRUE(r.settle(r.ca()));
  std::vector<uint8_t> st(8, 0xff);
  for (uint32_t i = 0; i < 8; ++i) {
    const Sge land{r.b.arena().page_addr(1) + i * 64, 64, r.b.arena().lkey()};
    EXPECT_EQ(r.cb().post_read({&land, 1}, m.iova + i * 64, m.rkey, 100 + i, true), Errc::kOk);
  }
  uint32_t seen = 0;
  EXPECT_TRUE(r.poll_until(
      r.cb(),
      [&](const Completion& x) {
        if (x.cookie >= 100 && x.cookie < 108) {
          st[x.cookie - 100] = x.status;
          ++seen;
        }
      },
      [&] { return seen == 8 || r.cb().qp().in_error(); }));
  // After an error the rest flush; collect them.
  r.poll_until(
      r.cb(),
      [&](const Completion& x) {
        if (x.cookie >= 100 && x.cookie < 108) st[x.cookie - 100] = x.status;
      },
      [&] { return r.cb().qp().sq().in_flight() == 0; }, 5);
  return st;
}

TEST(ReadDepth, NegotiatedDepthsNeverExceedTheResponder) {
  Rig r;  // connect_endpoints: each side applies min(its depth, what the peer stated)
  const std::vector<uint8_t> st = eight_reads(r);
  for (uint32_t i = 0; i < 8; ++i) EXPECT_EQ(st[i], 0) << "READ " << i;
  EXPECT_EQ(r.a.emu()->stats().read_depth_naks, 0u);
}

TEST(ReadDepth, ARequesterAboveTheRespondersResourcesGetsInvalidRequest) {
  Rig r;
  // Misapplied parameters (what a peer that ignores the exchange does): A is told that B's
  // initiator depth is 1, so A serves one READ at a time; B is told that A has 255 responder
  // resources, so B keeps its own depth.
  mlx5::ConnectInfo info_b = r.b.device().local_info(r.cb().qp_handle());
  mlx5::ConnectInfo info_a = r.a.device().local_info(r.ca().qp_handle());
  if (info_b.initiator_depth < 2) GTEST_SKIP() << "this profile's READ depth is 1";
  info_b.initiator_depth = 1;        // A's max_dest_rd_atomic = 1
  info_a.responder_resources = 255;  // B's max_rd_atomic = its own depth
  ASSERT_TRUE(endpoint::recover_core(r.ca(), info_b).ok());
  ASSERT_TRUE(endpoint::recover_core(r.cb(), info_a).ok());
  const std::vector<uint8_t> st = eight_reads(r);
  // The first READ is answered; the second, beyond A's one resource, is NAKed Invalid Request
  // (REMOTE_INVAL_REQ_ERR at B), and the rest flush with B's QP in error.
  EXPECT_EQ(st[0], 0);
  EXPECT_EQ(st[1], MLX5_CQE_SYNDROME_REMOTE_INVAL_REQ_ERR);
  for (uint32_t i = 2; i < 8; ++i) EXPECT_EQ(st[i], kFlushErr) << "READ " << i;
  EXPECT_GE(r.a.emu()->stats().read_depth_naks, 1u);
  EXPECT_TRUE(r.cb().qp().in_error());
  EXPECT_FALSE(r.ca().qp().in_error());  // the responder stays in RTS
}

}  // namespace
}  // namespace rdmx::sectest
