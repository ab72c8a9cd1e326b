// PRM checker: a missing fence is caught, a correct fence is not flagged; the other rules.
#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

class Checker_ : public EmuModeTest {
 protected:
  void SetUp() override {}
  void setup(bool fatal = false) {
    Options o;
    o.checker_fatal = fatal;
    open(GetParam(), small_cfg(), 1, o);
    arena.alloc(*a_.dev, 4 * 4096, 1);
    dst.alloc(*b_.dev, 4 * 4096, 2);
    win = a_.dev->create_window_mkey(4, true).value() | 0x21;
  }
  // UMR map on A (unsignaled, not rung), then a WRITE that gathers through the window with an
  // explicit fm_ce_se (bypassing the SqWriter's automatic fence).
  void map_then_use(uint8_t fence) {
    umr_map(a_, 1, win, arena.mr.lkey, {arena.addr(0), arena.addr(4096)}, 4096, 8192, kAccRW, 0, 0,
            false, false);
    const uint8_t f = static_cast<uint8_t>(fence | MLX5_WQE_CTRL_CQ_UPDATE);
    std::vector<prm::Sge> sg{{0, 8192, win}};
    post(a_, MLX5_OPCODE_RDMA_WRITE, 2, [&](prm::RingCursor& c, uint16_t idx) {
      return prm::build_rdma(c, MLX5_OPCODE_RDMA_WRITE, a_.desc.qpn, idx, f, dst.addr(),
                             dst.mr.rkey, sg, Be32{});
    });
  }
  Buf arena, dst;
  uint32_t win = 0;
};

TEST_P(Checker_, MissingFenceAfterUmrIsCaught) {
  setup();
  expected_reports_a_ = 1;
  map_then_use(0);
  auto c = wait(a_, 2);
  EXPECT_TRUE(c[1].ok());  // not fatal: the emu still executes it
  ASSERT_EQ(a_.dev->checker().count(Rule::kMissingFenceAfterUmr), 1u);
  auto r = a_.dev->checker().reports();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].qpn, a_.desc.qpn);
  EXPECT_EQ(r[0].wqe_index, 3u);  // the WRITE follows a 3-WQEBB UMR at index 0
}

TEST_P(Checker_, MissingFenceFatalGivesErrorCqe) {
  setup(true);
  expected_reports_a_ = 1;
  map_then_use(0);
  auto c = wait(a_, 2);
  EXPECT_TRUE(c[0].ok());
  EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
}

TEST_P(Checker_, InitiatorSmallFenceIsNotFlagged) {
  setup();
  map_then_use(prm::kFenceInitiatorSmall);
  auto c = wait(a_, 2);
  EXPECT_TRUE(c[0].ok() && c[1].ok());
  EXPECT_EQ(0, std::memcmp(dst.p, arena.p, 8192));
}

TEST_P(Checker_, StrongOrderingIsNotFlagged) {
  setup();
  map_then_use(prm::kFenceStrongOrdering);
  auto c = wait(a_, 2);
  EXPECT_TRUE(c[0].ok() && c[1].ok());
}

TEST_P(Checker_, FenceModeFenceDoesNotOrderUmr) {
  setup();
  expected_reports_a_ = 1;
  map_then_use(prm::kFenceFence);  // 0x40 orders against RDMA READs only
  wait(a_, 2);
  EXPECT_EQ(a_.dev->checker().count(Rule::kMissingFenceAfterUmr), 1u);
}

TEST_P(Checker_, PolledUmrCompletionOrdersLaterUse) {
  setup();
  umr_map(a_, 1, win, arena.mr.lkey, {arena.addr(0), arena.addr(4096)}, 4096, 8192, kAccRW);
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  const uint8_t f = MLX5_WQE_CTRL_CQ_UPDATE;  // no fence: the UMR's CQE was consumed
  std::vector<prm::Sge> sg{{0, 64, win}};
  post(a_, MLX5_OPCODE_RDMA_WRITE, 2, [&](prm::RingCursor& c, uint16_t idx) {
    return prm::build_rdma(c, MLX5_OPCODE_RDMA_WRITE, a_.desc.qpn, idx, f, dst.addr(), dst.mr.rkey,
                           sg, Be32{});
  });
  EXPECT_TRUE(wait(a_, 1)[0].ok());
}

// The peer uses a window whose UMR was followed by an unfenced SEND advertising it.
TEST_P(Checker_, RemoteUseBeforeUmrOrdered) {
  setup();
  expected_reports_a_ = 1;
  Buf adv, rb, src;
  adv.alloc(*a_.dev, 64, 3);
  rb.alloc(*b_.dev, 64, 4);
  src.alloc(*b_.dev, 8192, 5);
  recv(b_, 1, {{rb.addr(), 64, rb.mr.lkey}});
  umr_map(a_, 1, win, arena.mr.lkey, {arena.addr(0), arena.addr(4096)}, 4096, 8192, kAccRW, 0, 0,
          false, false);
  std::vector<prm::Sge> sg{{adv.addr(), 8, adv.mr.lkey}};
  post(a_, MLX5_OPCODE_SEND, 2, [&](prm::RingCursor& c, uint16_t idx) {
    return prm::build_send(c, MLX5_OPCODE_SEND, a_.desc.qpn, idx, MLX5_WQE_CTRL_CQ_UPDATE, sg,
                           Be32{});
  });
  wait(b_, 1);
  // B writes into the window before A polled anything.
  rdma(b_, MLX5_OPCODE_RDMA_WRITE, 3, 0, win, {{src.addr(), 100, src.mr.lkey}});
  EXPECT_TRUE(wait(b_, 1)[0].ok());
  EXPECT_EQ(a_.dev->checker().count(Rule::kRemoteUseBeforeOrdered), 1u);
  wait(a_, 2);
}

TEST_P(Checker_, RemoteUseAfterFencedAdvertIsNotFlagged) {
  setup();
  Buf adv, rb, src;
  adv.alloc(*a_.dev, 64, 3);
  rb.alloc(*b_.dev, 64, 4);
  src.alloc(*b_.dev, 8192, 5);
  recv(b_, 1, {{rb.addr(), 64, rb.mr.lkey}});
  umr_map(a_, 1, win, arena.mr.lkey, {arena.addr(0), arena.addr(4096)}, 4096, 8192, kAccRW, 0, 0,
          false, false);
  send(a_, MLX5_OPCODE_SEND, 2, {{adv.addr(), 8, adv.mr.lkey}});  // SqWriter adds 0x20
  wait(b_, 1);
  rdma(b_, MLX5_OPCODE_RDMA_WRITE, 3, 0, win, {{src.addr(), 100, src.mr.lkey}});
  EXPECT_TRUE(wait(b_, 1)[0].ok());
  EXPECT_EQ(0, std::memcmp(arena.p, src.p, 100));
  wait(a_, 2);
}

TEST_P(Checker_, TooManyTranslationEntries) {
  setup();
  expected_reports_a_ = 2;
  // Capacity align4(4) = 4: eight entries do not fit -> error.
  std::vector<uint64_t> pages;
  for (int i = 0; i < 8; ++i) pages.push_back(arena.addr(size_t(i % 4) * 4096));
  umr_map(a_, 1, win, arena.mr.lkey, pages, 4096, 8 * 4096, kAccRW);
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_MW_BIND_ERR);
  // Created for 3: four entries fit the hardware capacity but exceed what was asked: report.
  reconnect();
  const uint32_t w3 = a_.dev->create_window_mkey(3, false).value();
  umr_map(a_, 2, w3, arena.mr.lkey,
          {arena.addr(0), arena.addr(4096), arena.addr(8192), arena.addr(12288)}, 4096, 4 * 4096,
          kAccRW);
  EXPECT_TRUE(wait(a_, 1)[0].ok());
  EXPECT_EQ(a_.dev->checker().count(Rule::kTooManyEntries), 2u);
}

TEST_P(Checker_, UnknownMaskBits) {
  setup();
  expected_reports_a_ = 1;
  const uint8_t f = fm(a_);
  post(a_, MLX5_OPCODE_UMR, 1, [&](prm::RingCursor& c, uint16_t idx) {
    const uint32_t ds = prm::build_umr_invalidate(c, a_.desc.qpn, idx, f, win, 0);
    auto* u = reinterpret_cast<mlx5_wqe_umr_ctrl_seg*>(static_cast<uint8_t*>(a_.desc.sq.buf) +
                                                       size_t(idx % 64) * 64 + 16);
    store_be(&u->mkey_mask, uint64_t{1} << 40 | MLX5_WQE_UMR_CTRL_MKEY_MASK_FREE);
    return ds;
  });
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR);
  EXPECT_EQ(a_.dev->checker().count(Rule::kUnknownMaskBits), 1u);
}

TEST_P(Checker_, DoorbellBackwardsAndPastWritten) {
  setup();
  expected_reports_a_ = 2;
  for (int i = 0; i < 3; ++i) {
    const uint8_t f = fm(a_);
    post(a_, MLX5_OPCODE_NOP, uint64_t(i), [&](prm::RingCursor& c, uint16_t idx) {
      return prm::build_nop(c, a_.desc.qpn, idx, f, 1);
    });
  }
  wait(a_, 3);
  // Backwards: 3 -> 1.
  __atomic_store_n(a_.desc.sq.dbrec, ::rdmx::detail::bswap(uint32_t{1}), __ATOMIC_RELEASE);
  a_.dev->progress();
  EXPECT_EQ(a_.dev->checker().count(Rule::kDoorbellBackwards), 1u);
  // Past written: claim 2 more WQEBBs than were written (slot 3 holds nothing, stale index).
  __atomic_store_n(a_.desc.sq.dbrec, ::rdmx::detail::bswap(uint32_t{3}), __ATOMIC_RELEASE);
  a_.dev->progress();
  // slot 3 still holds zeroes: ds 0 is malformed; use slot bytes from an older pass instead.
  std::memcpy(static_cast<uint8_t*>(a_.desc.sq.buf) + 3 * 64, a_.desc.sq.buf, 64);
  __atomic_store_n(a_.desc.sq.dbrec, ::rdmx::detail::bswap(uint32_t{4}), __ATOMIC_RELEASE);
  a_.dev->progress();
  if (GetParam() == Mode::kThreaded) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(a_.dev->checker().count(Rule::kDoorbellPastWritten), 1u) << a_.dev->checker().dump();
  a_.qp.poll(16,
             [&](const Completion& c) { EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_LOCAL_QP_OP_ERR); });
}

TEST_P(Checker_, CqOverrun) {
  Options o;
  mlx5::QpConfig cfg = small_cfg();
  cfg.cq_cqes = 8;
  open(GetParam(), cfg, 1, o);
  expected_reports_a_ = 1;
  // A CQ of 8 entries holds 7 CQEs (the spare entry, verbs max_cqe = 2^n - 1): the 8th
  // signaled WQE overruns it.
  for (int i = 0; i < 8; ++i) {
    const uint8_t f = fm(a_);
    post(
        a_, MLX5_OPCODE_NOP, uint64_t(i),
        [&](prm::RingCursor& c, uint16_t idx) { return prm::build_nop(c, a_.desc.qpn, idx, f, 1); },
        false);
  }
  a_.qp.sq().ring_doorbell();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (a_.dev->checker().count(Rule::kCqOverrun) == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(a_.dev->checker().count(Rule::kCqOverrun), 1u);
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
  auto c = wait(a_, 7);
  for (const auto& x : c) EXPECT_TRUE(x.ok());
}

// The fence model, stepped by hand (threaded devices without their threads: nothing runs until
// progress()). PRM fence modes as rdma-core and Linux use them (kernel include/linux/mlx5/qp.h
// MLX5_FENCE_MODE_*, drivers/infiniband/hw/mlx5/wr.c mlx5_ib_post_send; rdma-core
// providers/mlx5/qp.c fm_cache): INITIATOR_SMALL (0x20) waits for earlier local work only, which
// an in-order device has finished, so it must not wait for an earlier WRITE's acknowledgement;
// STRONG_ORDERING (0x60) waits for every earlier WQE, acknowledgements included; FENCE (0x40) and
// SMALL_AND_FENCE (0x80) wait for earlier RDMA READs (and atomics) only.
class FenceModel : public EmuTest {
 protected:
  void SetUp() override {
    Options o;
    o.start_thread = false;
    open(Mode::kThreaded, small_cfg(), 1, o);
    src.alloc(*a_.dev, 4 * 4096, 1);
    dst.alloc(*b_.dev, 4 * 4096, 2);
  }
  uint64_t executed() { return a_.dev->stats().wqes; }
  // A runs alone: its WQEs execute (or block on a fence); B never answers.
  void run_a() {
    for (int i = 0; i < 4; ++i) a_.dev->progress();
  }
  // B answers (ACKs, READ responses) and A takes the answers.
  void run_both() {
    for (int i = 0; i < 8; ++i) {
      b_.dev->progress();
      a_.dev->progress();
    }
  }
  void io(uint8_t opcode, uint64_t cookie, uint8_t fence) {
    rdma(a_, opcode, cookie, dst.addr(), dst.mr.rkey, {{src.addr(), 64, src.mr.lkey}}, 0, fence);
  }
  // Runs both devices until A has n completions (bounded in time), expects them all good.
  void finish(size_t n) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (a_.got.size() < n && std::chrono::steady_clock::now() < end) {
      a_.dev->progress();
      b_.dev->progress();
      a_.qp.poll(16, [&](const Completion& c) { a_.got.push_back(c); });
    }
    ASSERT_EQ(a_.got.size(), n);
    for (const auto& x : a_.got) EXPECT_TRUE(x.ok()) << "cookie " << x.cookie;
    a_.got.clear();
  }
  Buf src, dst;
};

TEST_F(FenceModel, InitiatorSmallDoesNotWaitForAnUnacknowledgedWrite) {
  io(MLX5_OPCODE_RDMA_WRITE, 1, 0);
  run_a();
  ASSERT_EQ(executed(), 1u);
  io(MLX5_OPCODE_RDMA_WRITE, 2, prm::kFenceInitiatorSmall);
  run_a();
  EXPECT_EQ(executed(), 2u);  // the first WRITE is still waiting for its ACK
  io(MLX5_OPCODE_RDMA_READ, 3, 0);
  run_a();
  io(MLX5_OPCODE_RDMA_WRITE, 4, prm::kFenceInitiatorSmall);
  run_a();
  EXPECT_EQ(executed(), 4u);  // nor for a READ's response
  finish(4);
}

TEST_F(FenceModel, StrongOrderingWaitsForEveryEarlierWqe) {
  io(MLX5_OPCODE_RDMA_WRITE, 1, 0);
  run_a();
  io(MLX5_OPCODE_RDMA_WRITE, 2, prm::kFenceStrongOrdering);
  run_a();
  EXPECT_EQ(executed(), 1u);  // blocked until the first WRITE is acknowledged
  run_both();
  EXPECT_EQ(executed(), 2u);
  finish(2);
}

TEST_F(FenceModel, FenceWaitsForReadsOnly) {
  for (uint8_t fence : {prm::kFenceFence, prm::kFenceSmallAndFence}) {
    // An unacknowledged WRITE does not hold it...
    io(MLX5_OPCODE_RDMA_WRITE, 1, 0);
    run_a();
    const uint64_t before = executed();
    io(MLX5_OPCODE_RDMA_WRITE, 2, fence);
    run_a();
    EXPECT_EQ(executed(), before + 1) << "fence 0x" << std::hex << int(fence);
    // ...an outstanding READ does.
    io(MLX5_OPCODE_RDMA_READ, 3, 0);
    run_a();
    io(MLX5_OPCODE_RDMA_WRITE, 4, fence);
    run_a();
    EXPECT_EQ(executed(), before + 2) << "fence 0x" << std::hex << int(fence);
    run_both();
    EXPECT_EQ(executed(), before + 3);
    finish(4);
  }
}

INSTANTIATE_TEST_SUITE_P(Emu, Checker_, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);

}  // namespace
}  // namespace rdmx::emu::test
