// Fault injection: error on the Nth WQE, QP to error now, peer unreachable, delayed
// completions, failing mkey creation.
#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

class Faults_ : public EmuModeTest {
 protected:
  void SetUp() override {
    open(GetParam());
    src.alloc(*a_.dev, 4096, 1);
    dst.alloc(*b_.dev, 4096, 2);
  }
  void write(uint64_t cookie, size_t off = 0) {
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, cookie, dst.addr(off), dst.mr.rkey,
         {{src.addr(off), 16, src.mr.lkey}});
  }
  Buf src, dst;
};

TEST_P(Faults_, ErrorOnNthWqe) {
  ASSERT_TRUE(
      a_.dev->faults().error_on_nth_wqe(a_.desc.qpn, 3, MLX5_CQE_SYNDROME_REMOTE_OP_ERR).ok());
  for (uint64_t i = 1; i <= 4; ++i) write(i, i * 16);
  auto c = wait(a_, 4);
  EXPECT_TRUE(c[0].ok());
  EXPECT_TRUE(c[1].ok());
  EXPECT_EQ(c[2].status, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
  EXPECT_EQ(c[2].cookie, 3u);
  EXPECT_EQ(c[3].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  EXPECT_NE(0, std::memcmp(dst.p + 48, src.p + 48, 16)) << "the failed WQE had no effect";
}

TEST_P(Faults_, QpToErrorFlushesPostedWork) {
  recv(a_, 9, {{src.addr(), 16, src.mr.lkey}});
  ASSERT_TRUE(a_.dev->faults().qp_to_error(a_.desc.qpn).ok());
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
  write(1);
  auto c = wait(a_, 2);
  EXPECT_TRUE(c[0].recv);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  EXPECT_EQ(c[1].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
}

TEST_P(Faults_, PeerUnreachable) {
  a_.dev->faults().set_peer_unreachable(true);
  write(1);
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
}

TEST_P(Faults_, DelayedCompletions) {
  ASSERT_TRUE(a_.dev->faults().delay_completions(a_.desc.qpn, 50).ok());
  write(1);
  if (GetParam() == Mode::kInline) {
    // Inline: the doorbell executed it but the CQE waits for 50 more device polls.
    EXPECT_EQ(a_.qp.poll(4, [](const Completion&) {}), 0u);
    for (int i = 0; i < 45; ++i) a_.dev->progress();
    EXPECT_EQ(a_.qp.poll(4, [](const Completion&) {}), 0u);
    for (int i = 0; i < 5; ++i) a_.dev->progress();
  }
  auto c = wait(a_, 1);
  EXPECT_TRUE(c[0].ok());
  EXPECT_GE(a_.dev->stats().polls, 50u);
}

TEST_P(Faults_, FailMkeyCreation) {
  a_.dev->faults().fail_mkey_creations(2);
  auto w1 = a_.dev->create_window_mkey(4, true);
  ASSERT_FALSE(w1.ok());
  EXPECT_EQ(w1.error().code, Errc::kDeviceError);
  EXPECT_FALSE(a_.dev->reg_mr(src.p, 16, mlx5::kAccessAll).ok());
  EXPECT_TRUE(a_.dev->create_window_mkey(4, true).ok());
}

INSTANTIATE_TEST_SUITE_P(Emu, Faults_, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);

}  // namespace
}  // namespace rdmx::emu::test
