// RC timers as QP attributes (mlx5::RcTimers, applied at connect) and the responder's class C
// errors (its QP to error, an async event) on the in-process wire, threaded and inline.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include "emu_util.hpp"

namespace rdmx::emu::test {
namespace {

using std::chrono::milliseconds;

class Timers : public EmuTest {
 protected:
  static mlx5::QpConfig timed_cfg(uint8_t timeout, uint8_t retry_cnt) {
    mlx5::QpConfig c = small_cfg();
    mlx5::RcTimers t;
    t.timeout = timeout;
    t.retry_cnt = retry_cnt;
    c.timers = t;
    return c;
  }
  // A 64-byte WRITE from a_ posted while b_'s device does not run for `stall` (its thread
  // stopped, as a descheduled or paused peer); returns the WRITE's completion status.
  uint8_t write_across_stall(milliseconds stall) {
    src_.alloc(*a_.dev, 4096, 1);
    dst_.alloc(*b_.dev, 4096, 2);
    pair_.b->stop();
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst_.addr(), dst_.mr.rkey,
         {{src_.addr(), 64, src_.mr.lkey}});
    std::this_thread::sleep_for(stall);
    EXPECT_TRUE(pair_.b->start().ok());
    return wait(a_, 1, 20000)[0].status;
  }
  // A WRITE the requester gave up on still waits in b_'s wire and lands in dst_ once b_ runs
  // again, as a late packet does on a fabric: both threads stop before the buffers go.
  void TearDown() override {
    if (pair_.a) {
      pair_.a->stop();
      pair_.b->stop();
    }
    EmuTest::TearDown();
  }
  Buf src_, dst_;
};

// 4.096 us x 2^10 = 4.2 ms, 3 retries: 16.8 ms of silence is a dead peer.
constexpr uint8_t kShort = 10;

TEST_F(Timers, DefaultTimersSurviveAStalledResponder) {
  open(Mode::kThreaded);  // no QpConfig::timers: Options::timers, rdma_cm's 1.07 s x 8
  EXPECT_EQ(write_across_stall(milliseconds(300)), 0);
  EXPECT_EQ(0, std::memcmp(dst_.p, src_.p, 64));
  EXPECT_EQ(a_.dev->stats().retry_exceeded, 0u);
}

TEST_F(Timers, ShortQpTimeoutFailsAcrossTheSameStall) {
  open(Mode::kThreaded, timed_cfg(kShort, 3));
  EXPECT_EQ(write_across_stall(milliseconds(300)), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
  const EmuStats s = a_.dev->stats();
  EXPECT_EQ(s.retry_exceeded, 1u);
  // The peer's fault, unless a_'s own thread was itself descheduled for longer than the 4.2 ms
  // timeout (a loaded machine): only then may the retries be blamed on it.
  if (s.max_poll_gap_us * 1000 < mlx5::ack_timeout_ns(kShort)) {
    EXPECT_EQ(s.starved_retry_exc, 0u);
  }
}

TEST_F(Timers, DeviceDefaultTimersApplyToQpsWithoutTheirOwn) {
  Options o;
  o.timers.timeout = kShort;
  o.timers.retry_cnt = 3;
  open(Mode::kThreaded, small_cfg(), 1, o);
  EXPECT_EQ(write_across_stall(milliseconds(300)), MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
}

TEST_F(Timers, OutOfRangeTimersAreRefused) {
  open(Mode::kInline);
  mlx5::QpConfig c = small_cfg();
  c.timers = mlx5::RcTimers{};
  c.timers->retry_cnt = 8;
  auto q = a_.dev->create_qp(c);
  ASSERT_FALSE(q.ok());
  EXPECT_NE(q.error().message.find("retry_cnt 8"), std::string::npos) << q.error().message;
  Options o;
  o.timers.timeout = 32;
  EXPECT_FALSE(make_pair(o, o).ok());
}

// The requester's own device thread does not run for 300 ms while its WRITE waits: the retry
// count runs out the moment it runs again, and the log and stats say why.
TEST_F(Timers, StarvedEmuThreadIsNamedWhenRetriesRunOut) {
  open(Mode::kThreaded, timed_cfg(kShort, 3));
  src_.alloc(*a_.dev, 4096, 1);
  dst_.alloc(*b_.dev, 4096, 2);
  pair_.b->stop();  // nobody answers
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst_.addr(), dst_.mr.rkey, {{src_.addr(), 64, src_.mr.lkey}});
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (a_.dev->stats().tx_packets == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  ASSERT_GT(a_.dev->stats().tx_packets, 0u);
  pair_.a->stop();
  std::this_thread::sleep_for(milliseconds(300));
  testing::internal::CaptureStderr();
  ASSERT_TRUE(pair_.a->start().ok());
  const uint8_t st = wait(a_, 1)[0].status;
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(st, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  EXPECT_EQ(a_.dev->stats().starved_retry_exc, 1u);
  EXPECT_GE(a_.dev->stats().max_poll_gap_us, 250000u);
  EXPECT_NE(log.find("emu thread did not run for"), std::string::npos) << log;
  EXPECT_TRUE(pair_.b->start().ok());
}

// ---- responder class C errors ------------------------------------------------------------------
class ResponderErrors : public EmuModeTest {
 protected:
  // A pair in the test's mode, a source buffer on a_, and b_'s buffer with one receive posted.
  void open_with_receive(Buf& src, Buf& rb) {
    open(GetParam());
    src.alloc(*a_.dev, 4096, 1);
    rb.alloc(*b_.dev, 4096, 2);
    recv(b_, 10, {{rb.addr(), 256, rb.mr.lkey}});
  }
};

// A WRITE with a bad rkey: the requester completes with REMOTE_ACCESS_ERR as before; the
// responder's QP is in error, its posted receives flush, a later WQE of its own flushes, and it
// raised IBV_EVENT_QP_ACCESS_ERR naming its QPN (once).
TEST_P(ResponderErrors, BadRkeyMovesTheResponderToError) {
  Buf src, rb;
  open_with_receive(src, rb);
  recv(b_, 11, {{rb.addr(256), 256, rb.mr.lkey}});
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, rb.addr(), rb.mr.rkey ^ 0x100,
       {{src.addr(), 64, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  auto cb = wait(b_, 2, 1000);
  for (const Completion& c : cb) EXPECT_EQ(c.status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  expect_responder_error(b_, mlx5::AsyncEventKind::kQpAccessErr);
  rdma(b_, MLX5_OPCODE_RDMA_WRITE, 2, src.addr(), src.mr.rkey, {{rb.addr(), 64, rb.mr.lkey}});
  EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_WR_FLUSH_ERR);
  mlx5::AsyncEvent ev[2];
  EXPECT_EQ(a_.dev->poll_async_events(ev), 0u);  // the requester's side raises nothing
  EXPECT_EQ(b_.dev->stats().responder_errors, 1u);
  // RESET and connect again: the pair works.
  reconnect();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 3, rb.addr(), rb.mr.rkey, {{src.addr(), 64, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, 0);
}

// A READ outside the registration: the same, through the READ path.
TEST_P(ResponderErrors, ReadOutOfBoundsMovesTheResponderToError) {
  open(GetParam());
  Buf dst, mem;
  dst.alloc(*a_.dev, 8192, 1);
  mem.alloc(*b_.dev, 4096, 2);
  rdma(a_, MLX5_OPCODE_RDMA_READ, 1, mem.addr(4000), mem.mr.rkey, {{dst.addr(), 200, dst.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  expect_responder_error(b_, mlx5::AsyncEventKind::kQpAccessErr);
}

// SEND with invalidate naming a key that is no window: a remote operational error at the
// requester; the responder's receive completes in error and its QP is fatal (QP_FATAL, as the
// kernel reports a WQ catastrophic error).
TEST_P(ResponderErrors, BadSendInvalidateIsFatalForTheResponder) {
  Buf src, rb;
  open_with_receive(src, rb);
  send(a_, MLX5_OPCODE_SEND_INVAL, 1, {{src.addr(), 32, src.mr.lkey}}, rb.mr.rkey);
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_OP_ERR);
  EXPECT_EQ(wait(b_, 1)[0].status, MLX5_CQE_SYNDROME_LOCAL_PROT_ERR);
  expect_responder_error(b_, mlx5::AsyncEventKind::kQpFatal);
}

// Under Options::responder_keeps_rts (key statistics only) the responder NAKs and stays in RTS.
TEST_P(ResponderErrors, KeepsRtsOptionIsTheOldBehaviour) {
  Options o;
  o.responder_keeps_rts = true;
  open(GetParam(), small_cfg(), 1, o);
  Buf src, rb;
  src.alloc(*a_.dev, 4096, 1);
  rb.alloc(*b_.dev, 4096, 2);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, rb.addr(), rb.mr.rkey ^ 0x100,
       {{src.addr(), 64, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(b_.dev->query_qp(b_.desc.qpn).value(), mlx5::QpState::kRts);
  mlx5::AsyncEvent ev[2];
  EXPECT_EQ(b_.dev->poll_async_events(ev), 0u);
}

// A one-sided reconnect (endpoint::recover_core; the attack bed's): the requester's QP went to
// error and is connected again without RESET to the responder, which kept its connection. Its
// link states the PSN after the last one it sent, which is the responder's expected PSN, so the
// next WRITE executes. A fresh random PSN would fall behind it (a duplicate: re-ACKed, the WRITE
// completed but never executed) or ahead (NAKed, then retried until TRANSPORT_RETRY_EXC).
TEST_P(ResponderErrors, AOneSidedReconnectContinuesAtTheExpectedPsn) {
  Options o;
  o.responder_keeps_rts = true;
  o.timers.timeout = 10;  // 4.2 ms: a PSN the responder does not expect fails in 34 ms
  open(GetParam(), small_cfg(), 1, o);
  Buf src, rb;
  src.alloc(*a_.dev, 4096, 1);
  rb.alloc(*b_.dev, 4096, 2);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, rb.addr(), rb.mr.rkey, {{src.addr(), 64, src.mr.lkey}});
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, rb.addr(), rb.mr.rkey ^ 0x100,
       {{src.addr(), 64, src.mr.lkey}});
  ASSERT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  ASSERT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
  ASSERT_TRUE(a_.dev->connect(a_.desc.qpn, b_.dev->local_info(b_.desc.qpn)).ok());
  a_.qp.reset();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 3, rb.addr(1024), rb.mr.rkey,
       {{src.addr(1024), 64, src.mr.lkey}});
  const Completion c = wait(a_, 1)[0];
  EXPECT_TRUE(c.ok()) << int(c.status);
  EXPECT_EQ(0, std::memcmp(rb.p + 1024, src.p + 1024, 64)) << "completed, not executed";
  EXPECT_EQ(b_.dev->query_qp(b_.desc.qpn).value(), mlx5::QpState::kRts);
}

// A responder QP in error answers nothing (IBTA vol. 1 10.3.1; rxe_resp.c get_req frees every
// request packet of a responder in error): its peer's WRITE is sent retry_cnt + 1 times, then
// completes with TRANSPORT_RETRY_EXC_ERR, and nothing lands. With rdma_cm's timers that is
// 1.07 s x 8; this QP's 4.2 ms x 4 is what a test that wants it noticed fast asks for.
TEST_P(ResponderErrors, APeerInErrorAnswersNothingAndTheRetriesRunOut) {
  mlx5::QpConfig cfg = small_cfg();
  cfg.timers = mlx5::RcTimers{};
  cfg.timers->timeout = kShort;
  cfg.timers->retry_cnt = 3;
  open(GetParam(), cfg);
  Buf src, rb;
  src.alloc(*a_.dev, 4096, 1);
  rb.alloc(*b_.dev, 4096, 2);
  const std::vector<uint8_t> before(rb.p, rb.p + 4096);
  ASSERT_TRUE(b_.dev->modify_qp(b_.desc.qpn, mlx5::QpState::kError).ok());
  const auto t0 = std::chrono::steady_clock::now();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, rb.addr(), rb.mr.rkey, {{src.addr(), 64, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1, 5000)[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  const auto took = std::chrono::steady_clock::now() - t0;
  const EmuStats st = a_.dev->stats();
  EXPECT_EQ(st.roce.timeouts, 4u);     // retry_cnt + 1 expiries of the timer
  EXPECT_EQ(st.roce.retransmits, 3u);  // the request sent again on all but the last
  EXPECT_EQ(b_.dev->stats().roce.acks_sent, 0u) << "a responder in error answered";
  if (GetParam() == Mode::kThreaded) {
    EXPECT_GE(took, milliseconds(16));  // 4 x 4.2 ms
  }
  EXPECT_EQ(0, std::memcmp(rb.p, before.data(), 4096)) << "a QP in error executed a WRITE";
}

INSTANTIATE_TEST_SUITE_P(Emu, ResponderErrors, ::testing::Values(Mode::kInline, Mode::kThreaded),
                         mode_param_name);

}  // namespace
}  // namespace rdmx::emu::test
