// Type-2 memory windows of a poll core (PollCore::bind_mw / invalidate_mw) over emu: the bytes a
// peer touches through one, its binding to the core's QP, key changes, refusals, remote
// invalidation and recovery. Side A binds; side B is the peer.
#include <rdmx/mlx5/prm/decode.hpp>

#include "emu_rig.hpp"

namespace {

using namespace rdmx_test;

constexpr uint32_t kMwRw = kAccessRemoteWrite | kAccessRemoteRead;

// A bind as a MapResult, for the rig's helpers.
MapResult as_map(const BindResult& b) {
  MapResult m;
  m.rkey = m.lkey = b.rkey;
  m.iova = b.iova;
  m.length = b.length;
  return m;
}

// Peer WRITE and READ through a memory window touch exactly the bound bytes: random ranges of
// the arena (virtual and zero-based addressing), every arena byte compared; after the
// invalidate the rkey moves nothing, and each bind gives the window a key other than its last.
TEST(EmuMemoryWindow, PeerWriteReadTouchExactlyTheBoundBytes) {
  EmuRig r(16, 16, 512, 1, 8, 4);
  std::mt19937_64 rng(11);
  PollCore& c = r.ca();
  ASSERT_EQ(c.n_memory_windows(), 4u);
  const uint64_t base = r.a.arena().base();
  const uint64_t data = r.a.arena().data_end() - base;
  std::vector<uint32_t> last_rkey(4, 0);
  for (int iter = 0; iter < 60; ++iter) {
    const uint64_t len = 1 + rng() % 70000;
    const uint64_t off = rng() % (data - len + 1);
    const bool zb = iter % 2;
    BindResult b = c.bind_mw(base + off, len, kMwRw, zb);
    ASSERT_TRUE(b.ok()) << rdmx::errc_name(b.errc);
    EXPECT_EQ(b.iova, zb ? 0 : base + off);
    EXPECT_EQ(b.mw->state(), MwState::kBound);
    EXPECT_NE(b.rkey, last_rkey[b.mw->id()]) << "a bind reused the window's last key";
    last_rkey[b.mw->id()] = b.rkey;
    r.settle(c);
    r.write_read_check(
        rng, as_map(b), [&](uint64_t i) { return off + i; }, iter);
    if (HasFatalFailure()) return;
    if (iter % 2) {
      // Past the end: refused, nothing moves; recover() (after the QP error) frees the window.
      EXPECT_EQ(r.peer_op(true, 0, b.iova + len - 1, 2, b.rkey), kRemAccess);
      r.recover();
      r.expect_arena_matches_shadow("past the end");
      EXPECT_EQ(c.invalidate_mw(b.mw), Errc::kNotMapped);
    } else {
      ASSERT_EQ(c.invalidate_mw(b.mw), Errc::kOk);
      r.settle(c);
    }
    EXPECT_EQ(b.mw->state(), MwState::kFree);
    EXPECT_EQ(r.peer_op(true, 0, b.iova, 8, b.rkey), kRemAccess) << "invalidated rkey worked";
    r.recover();
    r.expect_arena_matches_shadow("after invalidate");
  }
  EXPECT_EQ(c.stats().mw_binds, 60u);
  EXPECT_EQ(c.stats().mw_invalidates, 30u);
  EXPECT_EQ(c.free_memory_windows(), 4u);
  r.expect_no_checker_reports();
}

// The invalidate's bytes: rdma-core's type-2 LOCAL_INV (CHECK_QPN, mask FREE|KEY|QPN) with the
// window's own key byte.
TEST(EmuMemoryWindow, InvalidateBytesAreRdmaCoresWithTheKeyKept) {
  EmuRig r(16, 16, 512, 1, 8, 2);
  PollCore& c = r.ca();
  BindResult b = c.bind_mw(r.a.arena().base() + 4096, 8192, kMwRw);
  ASSERT_TRUE(b.ok());
  r.settle(c);
  namespace prm = rdmx::mlx5::prm;
  rdmx::mlx5::SqWriter& sq = c.qp().sq();
  const uint32_t slot = sq.pi() & (sq.wqe_cnt() - 1);
  const uint8_t* ring = sq.cursor().here() - size_t{slot} * 64;
  ASSERT_EQ(c.invalidate_mw(b.mw), Errc::kOk);
  prm::DecodedWqe d;
  ASSERT_EQ(prm::decode_wqe(ring, sq.wqe_cnt(), slot, d), prm::DecodeError::kOk);
  EXPECT_EQ(d.ctrl.opcode, MLX5_OPCODE_UMR);
  EXPECT_EQ(d.ctrl.imm, b.rkey);
  EXPECT_EQ(d.ctrl.fence(), prm::kFenceInitiatorSmall);  // inherited from the bind
  EXPECT_EQ(d.umr.flags, prm::kLocalInvUmrFlags);
  EXPECT_EQ(d.umr.mkey_mask, prm::kLocalInvMask);
  EXPECT_TRUE(d.mkc.free);
  EXPECT_EQ(d.mkc.qpn, prm::kMkeyQpnNone);
  EXPECT_EQ(d.mkc.key, b.rkey & 0xff);
  r.settle(c);
  EXPECT_EQ(r.peer_op(true, 0, b.iova, 8, b.rkey), kRemAccess);
  r.recover();
  r.expect_no_checker_reports();
}

// The rkey of a memory window bound on core 0's QP is refused on core 1's connection (same
// devices, same PD), and a rebind kills the previous rkey on core 0's connection too.
TEST(EmuMemoryWindow, OtherQpAndOldKeyAreRefused) {
  EmuRig r(16, 16, 512, 2, 8, 2);
  const uint64_t base = r.a.arena().base();
  BindResult b = r.ca(0).bind_mw(base + 4096, 8192, kMwRw);
  ASSERT_TRUE(b.ok());
  r.settle(r.ca(0));
  const uint64_t refused0 = r.a.emu()->stats().qp_binding_refusals;
  EXPECT_EQ(r.peer_op(true, 0, b.iova, 64, b.rkey, 1), kRemAccess);
  r.recover(1);
  EXPECT_EQ(r.peer_op(false, 0, b.iova, 64, b.rkey, 1), kRemAccess);
  EXPECT_EQ(r.a.emu()->stats().qp_binding_refusals, refused0 + 2);
  r.expect_arena_matches_shadow("access from another QP");
  r.recover(1);
  // The bound QP: works.
  for (int i = 0; i < 64; ++i) r.arena_b()[i] = static_cast<uint8_t>(i * 7);
  ASSERT_EQ(r.peer_op(true, 0, b.iova + 100, 64, b.rkey, 0), 0);
  std::memcpy(&r.shadow[4096 + 100], r.arena_b(), 64);
  r.expect_arena_matches_shadow("bound QP");
  // Invalidate and bind again (the same window: LIFO): the old rkey is dead on core 0 as well.
  ASSERT_EQ(r.ca(0).invalidate_mw(b.mw), Errc::kOk);
  BindResult b2 = r.ca(0).bind_mw(base + 4096, 8192, kMwRw);
  ASSERT_TRUE(b2.ok());
  ASSERT_EQ(b2.mw, b.mw);
  EXPECT_NE(b2.rkey, b.rkey);
  r.settle(r.ca(0));
  EXPECT_EQ(r.peer_op(true, 0, b.iova, 64, b.rkey, 0), kRemAccess);
  r.expect_arena_matches_shadow("old key");
  r.recover(0);  // frees b2 too (the QP error ended its binding)
  EXPECT_EQ(b2.mw->state(), MwState::kFree);
  BindResult b3 = r.ca(0).bind_mw(base + 4096, 8192, kMwRw);
  ASSERT_TRUE(b3.ok());
  r.settle(r.ca(0));
  EXPECT_EQ(r.peer_op(false, 0, b3.iova, 64, b3.rkey, 0), 0);
  r.expect_no_checker_reports();
}

// Refused binds and invalidates post nothing and say why.
TEST(EmuMemoryWindow, RefusedCallsPostNothing) {
  EmuRig r(16, 16, 512, 1, 8, 2);
  PollCore& c = r.ca();
  const uint64_t base = r.a.arena().base();
  const uint64_t end = r.a.arena().data_end();
  const uint32_t pi = c.qp().sq().pi();
  EXPECT_EQ(c.bind_mw(base, 0, kMwRw).errc, Errc::kInvalidArgument);
  EXPECT_EQ(c.bind_mw(base, 64, 0).errc, Errc::kInvalidArgument);
  EXPECT_EQ(c.bind_mw(base, 64, kAccessLocalWrite | kMwRw).errc, Errc::kInvalidArgument);
  EXPECT_EQ(c.bind_mw(base, 64, 0x10).errc, Errc::kInvalidArgument);
  EXPECT_EQ(c.bind_mw(base, (uint64_t{1} << 31) + 1, kMwRw).errc, Errc::kOutOfRange);
  EXPECT_EQ(c.bind_mw(base - 1, 64, kMwRw).errc, Errc::kNotInArena);
  EXPECT_EQ(c.bind_mw(end - 63, 64, kMwRw).errc, Errc::kNotInArena);
  EXPECT_EQ(c.bind_mw(~uint64_t{0} - 10, 64, kMwRw).errc, Errc::kNotInArena);
  EXPECT_EQ(c.invalidate_mw(nullptr), Errc::kInvalidArgument);
  EXPECT_EQ(c.invalidate_mw(&c.memory_window(0)), Errc::kNotMapped);
  MemoryWindow bogus;
  EXPECT_EQ(c.invalidate_mw(&bogus), Errc::kInvalidArgument);
  EXPECT_EQ(c.qp().sq().pi(), pi) << "a refused call posted a WQE";
  BindResult b1 = c.bind_mw(end - 64, 64, kMwRw);
  BindResult b2 = c.bind_mw(base, 64, kAccessRemoteRead);
  ASSERT_TRUE(b1.ok() && b2.ok());
  const uint32_t pi2 = c.qp().sq().pi();
  EXPECT_EQ(c.bind_mw(base, 64, kMwRw).errc, Errc::kNoWindow);
  EXPECT_EQ(c.qp().sq().pi(), pi2);
  EXPECT_EQ(c.stats().error_count(Errc::kNoWindow), 1u);
  ASSERT_EQ(c.invalidate_mw(b1.mw), Errc::kOk);
  EXPECT_EQ(c.invalidate_mw(b1.mw), Errc::kNotMapped);
  r.settle(c);
  // A read-only binding refuses WRITE.
  EXPECT_EQ(r.peer_op(true, 0, b2.iova, 8, b2.rkey), kRemAccess);
  r.recover();
  r.expect_arena_matches_shadow("read-only binding");
  r.expect_no_checker_reports();
}

// The peer's SEND_WITH_INV frees a bound memory window: the core sees it in poll(), counts it,
// refuses a later invalidate_mw, and the window binds again.
TEST(EmuMemoryWindow, RemoteInvalidateFreesIt) {
  EmuRig r(16, 16, 512, 1, 8, 1);
  PollCore& c = r.ca();
  BindResult b = c.bind_mw(r.a.arena().base(), 4096, kMwRw);
  ASSERT_TRUE(b.ok());
  const Sge rbuf{r.a.arena().page_addr(r.a.arena().n_pages() - 1), 256, r.a.arena().lkey()};
  ASSERT_EQ(c.post_recv({&rbuf, 1}, 77), Errc::kOk);
  r.settle(c);
  const Sge msg{r.b.arena().base(), 8, r.b.arena().lkey()};
  ASSERT_EQ(r.cb().post_send_inv({&msg, 1}, b.rkey, 5, true), Errc::kOk);
  r.drain(r.cb());
  bool got = false;
  c.poll(16, [&](const Completion& x) {
    if (x.recv && x.cookie == 77) got = x.ok() && x.imm == b.rkey;
  });
  ASSERT_TRUE(got);
  std::memcpy(&r.shadow[rbuf.addr - r.a.arena().base()], r.arena_b(), 8);
  EXPECT_EQ(c.stats().mw_remote_invalidations, 1u);
  EXPECT_EQ(b.mw->state(), MwState::kFree);
  EXPECT_EQ(c.free_memory_windows(), 1u);
  EXPECT_EQ(c.invalidate_mw(b.mw), Errc::kNotMapped);
  EXPECT_EQ(r.peer_op(true, 0, b.iova, 8, b.rkey), kRemAccess);
  r.recover();
  BindResult b2 = c.bind_mw(r.a.arena().base(), 4096, kMwRw);
  ASSERT_TRUE(b2.ok());
  r.settle(c);
  EXPECT_EQ(r.peer_op(false, 0, b2.iova, 64, b2.rkey), 0);
  r.expect_arena_matches_shadow("remote invalidation");
  r.expect_no_checker_reports();
}

// After a QP error, recover() frees every memory window (their bindings are gone).
TEST(EmuMemoryWindow, RecoverFreesBoundWindows) {
  EmuRig r(16, 16, 512, 1, 8, 3);
  PollCore& c = r.ca();
  const uint64_t base = r.a.arena().base();
  BindResult b[2] = {c.bind_mw(base, 4096, kMwRw), c.bind_mw(base + 8192, 100, kMwRw)};
  ASSERT_TRUE(b[0].ok() && b[1].ok());
  r.settle(c);
  // A bad rkey from the peer puts both QPs in error.
  EXPECT_EQ(r.peer_op(true, 0, 0, 8, 0x12345600), kRemAccess);
  r.recover();
  EXPECT_EQ(c.free_memory_windows(), 3u);
  for (const BindResult& x : b) {
    EXPECT_EQ(x.mw->state(), MwState::kFree);
    EXPECT_TRUE(r.a.emu()->inspect_mkey(x.rkey).free);
    EXPECT_EQ(r.peer_op(true, 0, x.iova, 8, x.rkey), kRemAccess);
    r.recover();
  }
  r.expect_arena_matches_shadow("recover");
}

// Every bind gives the window a key other than its last, in the same mkey; under the default
// (random) policy the steps are not all +1 (the increment policy's sequence).
TEST(EmuMemoryWindow, EveryBindChangesTheKey) {
  EmuRig r(16, 16, 512, 1, 8, 1);
  PollCore& c = r.ca();
  ASSERT_EQ(c.keys().policy(), KeyPolicy::kRandom);
  const uint64_t base = r.a.arena().base();
  uint32_t prev = c.memory_window(0).rkey();
  uint32_t plus_one = 0;
  for (int i = 0; i < 2000; ++i) {
    BindResult b = c.bind_mw(base, 64, kMwRw);
    ASSERT_TRUE(b.ok());
    ASSERT_NE(b.rkey & 0xff, prev & 0xff);
    ASSERT_EQ(b.rkey >> 8, prev >> 8);
    plus_one += ((b.rkey - prev) & 0xff) == 1;
    prev = b.rkey;
    ASSERT_EQ(c.invalidate_mw(b.mw), Errc::kOk);
    r.settle(c);
  }
  EXPECT_LT(plus_one, 100u) << "keys step by +1: predictable";  // expected ~8
  r.expect_no_checker_reports();
}

}  // namespace
