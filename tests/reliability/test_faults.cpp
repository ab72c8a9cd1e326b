// Faults survived, nothing lost (suite 'reliability'), over emu's fault injection, in inline and
// threaded mode. Side A runs a mixed workload on its PollCore: RDMA WRITE/READ at a window B
// mapped (mostly unsignaled: signal_every 16), interleaved with maps and unmaps of A's own
// windows. Every application WQE has a unique cookie in a ledger. For each fault:
//   - every posted operation is reported exactly once, completed (0) or failed with its syndrome
//     (the injected one, or WR_FLUSH_ERR 0x05 for what followed it); none lost, none duplicated,
//     none reported that was not posted; no success after the first error (same-SQ order);
//   - every window is accounted for (WindowPool::check_windows on both sides);
//   - the QP is recovered (both ends back to RTS by connect = reset -> init -> rtr -> rts with
//     the PSNs exchanged; PollCore::recover re-invalidates every window of unknown state) and
//     traffic resumes: a verified WRITE + READ round trip and a full burst complete with status 0.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cstdio>
#include <map>
#include <random>
#include <unordered_map>
#include <vector>

#include <rdmx/mlx5/prm/wqe.hpp>
#include "workload.hpp"

namespace rdmx::sectest {
namespace {

Totals g_totals;
struct PrintTotals {
  ~PrintTotals() { g_totals.print("reliability"); }
} g_print_totals;

class Faults : public ::testing::TestWithParam<emu::Mode> {
 protected:
  RigConfig cfg() const {
    RigConfig c;
    c.mode = GetParam();
    c.a_windows = 64;
    c.a_max_pages = 8;
    c.a_arena_pages = 256;
    c.b_arena_pages = 64;
    c.timers.retry_cnt = 2;  // rdma_cm timeout (1.07 s): slow sanitizer builds time nothing out
    return c;
  }
  void TearDown() override {
    if (rig_) {
      EXPECT_EQ(rig_->checker_reports(), 0u) << rig_->checker_dump();
    }
  }
  std::unique_ptr<Rig> rig_;
};

TEST_P(Faults, ErrorCqeMidBurst) {
  rig_ = std::make_unique<Rig>(cfg());
  Workload w(*rig_, 1, g_totals);
  const uint32_t rounds = static_cast<uint32_t>(scaled(20, 3));
  std::mt19937_64 rng(11);
  for (uint32_t round = 0; round < rounds; ++round) {
    const uint8_t synd =
        round % 2 ? MLX5_CQE_SYNDROME_LOCAL_PROT_ERR : MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    ASSERT_TRUE(rig_->a.emu()
                    ->faults()
                    .error_on_nth_wqe(rig_->ca().qp_handle(), 1 + rng() % 150, synd)
                    .ok());
    w.burst(300);
    ASSERT_TRUE(w.drain());
    EXPECT_TRUE(rig_->ca().qp().in_error());
    const uint64_t hit = w.count_status(synd);
    EXPECT_LE(hit, 1u);
    w.check_windows("error CQE mid-burst");
    w.check_ledger("error CQE mid-burst", true);
    w.recover();
  }
  w.expect_traffic_resumes("after error CQEs");
}

TEST_P(Faults, QpToErrorWithManyWqesInFlight) {
  rig_ = std::make_unique<Rig>(cfg());
  Workload w(*rig_, 2, g_totals);
  const uint32_t rounds = static_cast<uint32_t>(scaled(10, 2));
  for (uint32_t round = 0; round < rounds; ++round) {
    // Hold completions so that hundreds of WQEs are executed or queued but not completed.
    ASSERT_TRUE(rig_->a.emu()->faults().delay_completions(rig_->ca().qp_handle(), 1000000).ok());
    w.burst(400);
    for (int i = 0; i < 50; ++i) rig_->pump();
    EXPECT_GT(rig_->ca().qp().sq().in_flight(), 100u);
    ASSERT_TRUE(rig_->a.emu()->faults().qp_to_error(rig_->ca().qp_handle()).ok());
    ASSERT_TRUE(rig_->a.emu()->faults().delay_completions(rig_->ca().qp_handle(), 0).ok());
    ASSERT_TRUE(w.drain());
    EXPECT_TRUE(rig_->ca().qp().in_error());
    EXPECT_GT(w.count_status(kFlushErr), 0u);
    w.check_windows("QP to error, WQEs in flight");
    w.check_ledger("QP to error, WQEs in flight", true);
    w.recover();
  }
  w.expect_traffic_resumes("after QP to error");
}

TEST_P(Faults, PeerUnreachable) {
  rig_ = std::make_unique<Rig>(cfg());
  Workload w(*rig_, 3, g_totals);
  const uint32_t rounds = static_cast<uint32_t>(scaled(5, 2));
  for (uint32_t round = 0; round < rounds; ++round) {
    w.burst(50);
    ASSERT_TRUE(w.drain());
    rig_->a.emu()->faults().set_peer_unreachable(true);
    w.burst(100);
    ASSERT_TRUE(w.drain());
    rig_->a.emu()->faults().set_peer_unreachable(false);
    EXPECT_TRUE(rig_->ca().qp().in_error());
    EXPECT_EQ(w.count_status(MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR), 1u);
    w.check_windows("peer unreachable");
    w.check_ledger("peer unreachable (retry exceeded)", true);
    w.recover();
  }
  w.expect_traffic_resumes("after peer unreachable");
}

TEST_P(Faults, DelayedCompletions) {
  rig_ = std::make_unique<Rig>(cfg());
  Workload w(*rig_, 4, g_totals);
  ASSERT_TRUE(rig_->a.emu()->faults().delay_completions(rig_->ca().qp_handle(), 200).ok());
  const uint32_t rounds = static_cast<uint32_t>(scaled(10, 2));
  for (uint32_t round = 0; round < rounds; ++round) {
    w.burst(300);
    ASSERT_TRUE(w.drain(60));
    EXPECT_FALSE(rig_->ca().qp().in_error());
    EXPECT_EQ(w.count_status(0), w.ops_.size());
    w.check_windows("delayed completions");
    w.check_ledger("delayed completions", false);
  }
  ASSERT_TRUE(rig_->a.emu()->faults().delay_completions(rig_->ca().qp_handle(), 0).ok());
  ++g_totals.faults;
  w.expect_traffic_resumes("after delayed completions");
}

INSTANTIATE_TEST_SUITE_P(Modes, Faults, ::testing::Values(emu::Mode::kInline, emu::Mode::kThreaded),
                         [](const auto& pi) { return std::string(emu::mode_name(pi.param)); });

// Forwards to an EmuDevice; create_window_mkey fails after `allow` successes (emu's own
// fail_mkey_creations fails the next k calls; this places the failure anywhere in a pool).
class FailAfter final : public mlx5::Device {
 public:
  explicit FailAfter(emu::EmuDevice& d) : d_(d) {}
  const std::string& name() const noexcept override { return d_.name(); }
  const mlx5::DeviceCaps& caps() const noexcept override { return d_.caps(); }
  Result<mlx5::MrInfo> reg_mr(void* a, size_t l, uint32_t acc) override {
    return d_.reg_mr(a, l, acc);
  }
  Status dereg_mr(const mlx5::MrInfo& mr) override { return d_.dereg_mr(mr); }
  Result<uint32_t> create_window_mkey(uint32_t n, bool ri) override {
    if (allow == 0) d_.faults().fail_mkey_creations(1);
    if (allow) --allow;
    return d_.create_window_mkey(n, ri);
  }
  Status destroy_mkey(uint32_t k) override { return d_.destroy_mkey(k); }
  Result<mlx5::QpDesc> create_qp(const mlx5::QpConfig& c) override { return d_.create_qp(c); }
  Status destroy_qp(mlx5::QpHandle q) override { return d_.destroy_qp(q); }
  mlx5::ConnectInfo local_info(mlx5::QpHandle q) override { return d_.local_info(q); }
  Status connect(mlx5::QpHandle q, const mlx5::ConnectInfo& r) override { return d_.connect(q, r); }
  Status modify_qp(mlx5::QpHandle q, mlx5::QpState t) override { return d_.modify_qp(q, t); }
  Result<mlx5::QpState> query_qp(mlx5::QpHandle q) override { return d_.query_qp(q); }
  uint32_t allow = ~0u;

 private:
  emu::EmuDevice& d_;
};

// Window creation failing at setup: the arena's reg_mr and WindowPool::create fail cleanly with
// kDeviceError wherever the failure falls, and no mkey is left behind on the device.
TEST(SetupFaults, WindowCreationFailing) {
  emu::Options o;
  auto pair = take(emu::make_pair(o, o));
  emu::EmuDevice& dev = *pair.a;
  auto live_mkeys = [&] {
    uint32_t n = 0;
    for (uint32_t idx = 2; idx < 4096; ++idx) n += dev.inspect_mkey(idx << 8).exists;
    return n;
  };
  mem::ArenaConfig ac;
  ac.bytes = 256 * 4096;
  dev.faults().fail_mkey_creations(1);
  auto bad_arena = mem::Arena::create(dev, ac);
  ASSERT_FALSE(bad_arena.ok());
  EXPECT_EQ(bad_arena.error().code, Errc::kDeviceError);
  EXPECT_EQ(live_mkeys(), 0u);
  ++g_totals.faults;
  FailAfter fdev(dev);
  for (uint32_t max_pages : {8u, 64u}) {  // inline, and pointer mode (KLM arrays in the tail)
    for (uint32_t fail_at : {0u, 1u, 7u, 31u}) {
      auto arena = take(mem::Arena::create(fdev, ac));
      const uint32_t before = live_mkeys();
      win::PoolConfig pc;
      pc.n_windows = 32;
      pc.max_pages = max_pages;
      fdev.allow = fail_at;
      auto p = WindowPool::create(fdev, *arena, pc);
      fdev.allow = ~0u;
      ASSERT_FALSE(p.ok());
      EXPECT_EQ(p.error().code, Errc::kDeviceError) << p.error().message;
      EXPECT_EQ(live_mkeys(), before)
          << "failed pool leaked mkeys: fail_at " << fail_at << " max_pages " << max_pages;
      ++g_totals.faults;
    }
  }
  EXPECT_EQ(live_mkeys(), 0u);  // the arenas above are gone too
  // A pool creates fine afterwards, and its cores work.
  auto arena = take(mem::Arena::create(dev, ac));
  win::PoolConfig pc;
  pc.n_windows = 16;
  auto pool = take(WindowPool::create(dev, *arena, pc));
  EXPECT_EQ(live_mkeys(), 1u + 16u);
  auto cen = pool->check_windows();
  ASSERT_TRUE(cen.ok());
  EXPECT_EQ(cen.value().depot, 16u);
}

// The CQ cannot be overrun through the window layer: PollCore::create refuses a CQ smaller than
// SQ + RQ plus the spare entry (every WQE and every receive can need its own CQE: a QP in error
// flushes each one), and at that size the worst case (SQ full of signaled WQEs + RQ full, then the
// QP goes to error) fits. The queue layer under it has no such guard (QpConfig::cq_cqes is the
// caller's contract); there emu reports the overrun (checker rule cq-overrun, cqes_dropped).
TEST(SetupFaults, CqOverrun) {
  emu::Options o;
  auto pair = take(emu::make_pair(o, o));
  mem::ArenaConfig ac;
  ac.bytes = 64 * 4096;
  auto arena_a = take(mem::Arena::create(*pair.a, ac));
  auto arena_b = take(mem::Arena::create(*pair.b, ac));
  win::PoolConfig pc;
  pc.n_windows = 16;
  auto pool_a = take(WindowPool::create(*pair.a, *arena_a, pc));
  auto pool_b = take(WindowPool::create(*pair.b, *arena_b, pc));
  win::CoreConfig cc;
  cc.cache_size = 4;
  cc.qp.sq_wqebbs = 64;
  cc.qp.rq_wqes = 16;
  cc.qp.cq_cqes = 64;  // < 64 + 16
  auto small = PollCore::create(*pool_a, cc);
  ASSERT_FALSE(small.ok());
  EXPECT_EQ(small.error().code, Errc::kInvalidArgument) << small.error().message;
  // Exactly SQ + RQ leaves no spare entry (a CQ of 2^n holds 2^n - 1): refused too.
  cc.qp.rq_wqes = 64;
  cc.qp.cq_cqes = 128;
  auto exact = PollCore::create(*pool_a, cc);
  ASSERT_FALSE(exact.ok());
  EXPECT_NE(exact.error().message.find("spare"), std::string::npos) << exact.error().message;
  cc.qp.rq_wqes = 16;
  cc.qp.cq_cqes = 128;  // >= 80 (emu sizes CQs in powers of two)
  cc.signal_every = 1;  // every WQE signaled: the most CQEs
  auto ca = take(PollCore::create(*pool_a, cc));
  auto cb = take(PollCore::create(*pool_b, cc));
  ASSERT_TRUE(mlx5::connect_qps(*pair.a, ca->qp_handle(), *pair.b, cb->qp_handle()).ok());
  const Sge s{arena_a->base(), 8, arena_a->lkey()};
  for (int i = 0; i < 16; ++i) ASSERT_EQ(ca->post_recv({&s, 1}, 1000 + i), Errc::kOk);
  // Hold completions, fill the SQ, then error: 64 send + 16 receive flush CQEs.
  ASSERT_TRUE(pair.a->faults().delay_completions(ca->qp_handle(), 1000000).ok());
  uint32_t posted = 0;
  while (ca->post_write({&s, 1}, 0, 0x1234500, posted + 1, true) == Errc::kOk) ++posted;
  EXPECT_EQ(posted, 64u);
  EXPECT_EQ(ca->post_write({&s, 1}, 0, 0, 999, true), Errc::kNoRoom);
  ca->flush();
  ASSERT_TRUE(pair.a->faults().qp_to_error(ca->qp_handle()).ok());
  ASSERT_TRUE(pair.a->faults().delay_completions(ca->qp_handle(), 0).ok());
  uint32_t sends = 0, recvs = 0;
  for (int i = 0; i < 100; ++i) {
    ca->poll(256, [&](const Completion& x) { (x.recv ? recvs : sends) += 1; });
    pair.a->progress();
  }
  EXPECT_EQ(sends, 64u);
  EXPECT_EQ(recvs, 16u);
  EXPECT_EQ(pair.a->checker().count(emu::Rule::kCqOverrun), 0u) << pair.a->checker().dump();
  EXPECT_EQ(pair.a->stats().cqes_dropped, 0u);
  ++g_totals.faults;

  // Below the window layer: a raw QueuePair with a CQ of 16 and 64 signaled WQEs, never polled.
  mlx5::QpConfig qc;
  qc.sq_wqebbs = 64;
  qc.rq_wqes = 0;
  qc.cq_cqes = 16;
  auto da = take(pair.a->create_qp(qc));
  auto db = take(pair.b->create_qp(qc));
  ASSERT_TRUE(mlx5::connect_qps(*pair.a, da.qpn, *pair.b, db.qpn).ok());
  mlx5::QueuePair qp;
  qp.init(da, 1);
  auto& sq = qp.sq();
  for (int i = 0; i < 64 && sq.has_room(1); ++i) {
    auto cur = sq.cursor();
    const uint32_t ds =
        mlx5::prm::build_send(cur, MLX5_OPCODE_NOP, sq.qpn(), sq.wqe_index(),
                              sq.next_fm_ce_se(true), std::span<const Sge>{}, Be32{});
    sq.commit(ds, MLX5_OPCODE_NOP, static_cast<uint64_t>(i));
  }
  sq.ring_doorbell();
  for (int i = 0; i < 10; ++i) pair.a->progress();
  std::printf("raw QueuePair, CQ of 16, 64 signaled WQEs unpolled: emu cq-overrun reports %" PRIu64
              ", CQEs dropped %" PRIu64 "\n",
              pair.a->checker().count(emu::Rule::kCqOverrun), pair.a->stats().cqes_dropped);
  EXPECT_GT(pair.a->checker().count(emu::Rule::kCqOverrun) + pair.a->stats().cqes_dropped, 0u);
  (void)pair.a->destroy_qp(da.qpn);
  (void)pair.b->destroy_qp(db.qpn);
  ca.reset();
  cb.reset();
}

}  // namespace
}  // namespace rdmx::sectest
