// CQ owner bit and index correctness across many wraps (CQ sizes 8 and 4096), SQ wqe_index
// across the 16-bit wrap, and receive counters.
#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

struct CqCase {
  Mode mode;
  uint32_t cqes;
};

class CqWrap : public EmuTest, public ::testing::WithParamInterface<CqCase> {};

TEST_P(CqWrap, OwnerBitAndCountersOverTenWraps) {
  mlx5::QpConfig cfg = small_cfg();
  cfg.cq_cqes = GetParam().cqes;
  cfg.sq_wqebbs = 256;
  open(GetParam().mode, cfg);
  const uint32_t n = cfg.cq_cqes;
  const uint64_t total = uint64_t{n} * 10 + 3;
  const auto* cqes = static_cast<const mlx5_cqe64*>(a_.desc.cq.buf);
  uint64_t posted = 0, seen = 0;
  uint32_t wqebb = 0;  // free-running SQ counter (2-WQEBB NOPs make it cross 65536 too)
  std::vector<uint16_t> idx_of;
  while (seen < total) {
    // n - 1: a CQ of n entries holds n - 1 CQEs (the spare entry).
    const uint32_t burst = std::min<uint64_t>({100, total - posted, n - 1});
    for (uint32_t i = 0; i < burst; ++i) {
      const uint8_t f = fm(a_, true);
      const uint32_t ds = (posted % 4 == 3) ? 1 : 8;
      idx_of.push_back(static_cast<uint16_t>(wqebb));
      post(
          a_, MLX5_OPCODE_NOP, posted,
          [&](prm::RingCursor& c, uint16_t idx) {
            return prm::build_nop(c, a_.desc.qpn, idx, f, ds);
          },
          false);
      wqebb += prm::ds_to_wqebbs(ds);
      ++posted;
    }
    a_.qp.sq().ring_doorbell();
    // Check the raw CQEs before the poller consumes them.
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    uint64_t target = posted;
    while (seen < target) {
      const uint32_t ci = a_.qp.cq().ci();
      const mlx5_cqe64* c = &cqes[ci & (n - 1)];
      if (!prm::cqe_is_sw_owned(c, ci, n)) {
        ASSERT_LT(std::chrono::steady_clock::now(), end) << "no CQE at " << ci;
        if (a_.dev->mode() == Mode::kInline) {
          a_.dev->progress();
        } else {
          std::this_thread::yield();
        }
        continue;
      }
      ASSERT_EQ(prm::cqe_owner(c), (ci / n) & 1) << ci;
      ASSERT_EQ(prm::cqe_opcode(c), MLX5_CQE_REQ);
      ASSERT_EQ(prm::cqe_wqe_counter(c), idx_of[seen]) << seen;
      ASSERT_EQ(prm::cqe_qpn(c), a_.desc.qpn);
      uint32_t k = a_.qp.poll(1, [&](const Completion& x) {
        EXPECT_EQ(x.cookie, seen);
        EXPECT_TRUE(x.ok());
      });
      ASSERT_EQ(k, 1u);
      ++seen;
    }
  }
  EXPECT_GE(a_.qp.cq().ci(), 10 * n);
  EXPECT_EQ(a_.qp.stats().bad_cqes, 0u);
  if (n == 4096) {
    EXPECT_GT(wqebb, 65536u) << "the 16-bit wqe_index wrapped";
  }
}

INSTANTIATE_TEST_SUITE_P(Emu, CqWrap,
                         ::testing::Values(CqCase{Mode::kInline, 8}, CqCase{Mode::kInline, 4096},
                                           CqCase{Mode::kThreaded, 8},
                                           CqCase{Mode::kThreaded, 4096}),
                         [](const ::testing::TestParamInfo<CqCase>& i) {
                           return std::string(mode_name(i.param.mode)) + "_" +
                                  std::to_string(i.param.cqes);
                         });

// A completion callback that posts and rings while the poll is still running: the CQEs the
// poll already read must be published (CQ doorbell record) before the callback, or the device
// sees a full CQ and overruns it. CQ of 8 (7 usable), 7 completions waiting, each callback
// posts one more signaled WQE.
TEST_F(EmuTest, CallbackThatPostsSeesConsumedCqesFreed) {
  mlx5::QpConfig cfg = small_cfg();
  cfg.cq_cqes = 8;
  cfg.sq_wqebbs = 8;
  cfg.rq_wqes = 0;
  open(Mode::kInline, cfg);
  auto nop = [&](uint64_t cookie) {
    const uint8_t f = fm(a_, true);
    auto& sq = a_.qp.sq();
    ASSERT_TRUE(sq.has_room(1));
    auto cur = sq.cursor();
    sq.commit(prm::build_nop(cur, a_.desc.qpn, sq.wqe_index(), f, 1), MLX5_OPCODE_NOP, cookie);
    sq.ring_doorbell();  // inline mode: the device runs now and writes the CQE
  };
  for (uint64_t i = 0; i < 7; ++i) nop(i);
  std::vector<uint64_t> seen;
  uint64_t next = 100;
  const uint32_t k = a_.qp.poll(7, [&](const Completion& c) {
    EXPECT_TRUE(c.ok()) << int(c.status);
    seen.push_back(c.cookie);
    nop(next++);
  });
  EXPECT_EQ(k, 7u);
  EXPECT_EQ(a_.dev->checker().count(Rule::kCqOverrun), 0u) << a_.dev->checker().dump();
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kRts);
  auto more = wait(a_, 7);
  for (const auto& c : more) {
    EXPECT_TRUE(c.ok());
    seen.push_back(c.cookie);
  }
  ASSERT_EQ(seen.size(), 14u);
  for (uint64_t i = 0; i < 7; ++i) {
    EXPECT_EQ(seen[i], i);
    EXPECT_EQ(seen[7 + i], 100 + i);
  }
}

TEST_F(EmuTest, ReceiveCountersWrapWithSendTraffic) {
  mlx5::QpConfig cfg = small_cfg();
  cfg.cq_cqes = 8;
  cfg.rq_wqes = 4;
  open(Mode::kInline, cfg);
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 1);
  dst.alloc(*b_.dev, 4096, 2);
  for (uint64_t i = 0; i < 100; ++i) {
    recv(b_, 1000 + i, {{dst.addr(i % 64), 64, dst.mr.lkey}});
    send(a_, MLX5_OPCODE_SEND_IMM, i, {{src.addr(i), 1 + uint32_t(i % 50), src.mr.lkey}},
         uint32_t(i));
    auto ca = wait(a_, 1);
    auto cb = wait(b_, 1);
    ASSERT_TRUE(ca[0].ok() && cb[0].ok()) << i;
    ASSERT_EQ(cb[0].cookie, 1000 + i);
    ASSERT_EQ(cb[0].imm, uint32_t(i));
    ASSERT_EQ(cb[0].byte_len, 1 + uint32_t(i % 50));
    ASSERT_EQ(0, std::memcmp(dst.p + i % 64, src.p + i, 1 + i % 50));
  }
}

}  // namespace
}  // namespace rdmx::emu::test
