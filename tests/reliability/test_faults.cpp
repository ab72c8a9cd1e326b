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
#include "../security/rig.hpp"

namespace rdmx::sectest {
namespace {

struct OpRecord {
  uint64_t seq = 0;  // posting order
  int reports = 0;
  uint8_t status = 0xff;
};

// Totals over every test of this binary (printed at the end, used by doc/guides/reliability.md).
struct Totals {
  uint64_t faults = 0, ops = 0, completed = 0, failed = 0, lost = 0, duplicated = 0;
  ~Totals() {
    std::printf("reliability: faults survived %" PRIu64 ", operations posted %" PRIu64
                ", completed %" PRIu64 ", failed with a syndrome %" PRIu64 ", lost %" PRIu64
                ", duplicated %" PRIu64 "\n",
                faults, ops, completed, failed, lost, duplicated);
  }
} g_totals;

class Workload {
 public:
  Workload(Rig& r, uint64_t seed) : r_(r), rng_(seed) {
    for (uint32_t i = 8; i < r.a.arena->n_pages(); ++i) pages_.push_back(r.a.arena->page_addr(i));
    b_map();
  }

  static constexpr uint32_t kBPages = 4;  // B's pool holds 4-page windows

  // B maps 4 pages of its arena read/write for A.
  void b_map() {
    std::vector<uint64_t> p;
    for (uint32_t i = 0; i < kBPages; ++i) p.push_back(r_.b.arena->page_addr(8 + i));
    MapResult m = r_.cb().map(p, kRw, 0, kBPages * 4096);
    ASSERT_TRUE(m.ok()) << errc_name(m.errc);
    b_rkey_ = m.rkey;
    ASSERT_TRUE(r_.settle(r_.cb()));
  }

  void on(const Completion& c) {
    if (c.recv) return;
    auto it = ops_.find(c.cookie);
    if (it == ops_.end()) {
      ++unknown_;
      return;
    }
    ++it->second.reports;
    it->second.status = c.status;
  }

  // Posts up to n operations (and some maps/unmaps) on A; rings every few. Returns how many
  // application operations were posted (posting stops at kQpError).
  uint32_t burst(uint32_t n) {
    PollCore& c = r_.ca();
    uint32_t posted = 0;
    for (uint32_t i = 0; i < n; ++i) {
      const uint32_t op = static_cast<uint32_t>(rng_() % 8);
      if (op == 0) {
        const uint64_t p[2] = {pages_[rng_() % pages_.size()], pages_[rng_() % pages_.size()]};
        MapResult m = c.map(p, kRw, 0, 8192);
        if (m.ok())
          a_mapped_.push_back(m.window);
        else if (m.errc == Errc::kQpError)
          break;
        continue;
      }
      if (op == 1 && !a_mapped_.empty()) {
        const size_t k = rng_() % a_mapped_.size();
        const Errc e = c.unmap(a_mapped_[k]);
        if (e == Errc::kOk) {
          a_mapped_[k] = a_mapped_.back();
          a_mapped_.pop_back();
        } else if (e == Errc::kQpError) {
          break;
        }
        continue;
      }
      const bool write = op & 1;
      const uint32_t len = 1 + static_cast<uint32_t>(rng_() % 8192);
      const uint64_t raddr = rng_() % (kBPages * 4096 - len + 1);
      const Sge s{r_.a.arena->page_addr(static_cast<uint32_t>(rng_() % 8)), len,
                  r_.a.arena->lkey()};
      const uint64_t cookie = next_cookie_++;
      Errc e;
      for (;;) {
        e = write ? c.post_write({&s, 1}, raddr, b_rkey_, cookie)
                  : c.post_read({&s, 1}, raddr, b_rkey_, cookie);
        if (e != Errc::kNoRoom) break;
        c.flush();
        if (!c.poll(64, [&](const Completion& x) { on(x); })) r_.pump();
      }
      if (e == Errc::kQpError) break;
      EXPECT_EQ(e, Errc::kOk) << errc_name(e);
      ops_[cookie] = OpRecord{seq_++, 0, 0xff};
      ++posted;
      if (rng_() % 16 == 0) c.flush();
    }
    c.flush();
    return posted;
  }

  // Polls A until every WQE it posted has been retired by a CQE.
  bool drain(int timeout_s = 30) {
    PollCore& c = r_.ca();
    return r_.poll_until(
        c, [&](const Completion& x) { on(x); },
        [&] { return c.qp().sq().in_flight() == 0 && c.umrs_in_flight() == 0; }, timeout_s);
  }

  // The ledger: exactly once each, in-order error semantics. `injected` = the syndrome the
  // fault produces on the WQE it hits (0 = none expected among application WQEs).
  void check_ledger(const char* what, bool expect_error) {
    std::map<uint64_t, const OpRecord*> by_seq;
    uint64_t completed = 0, failed = 0, lost = 0, dup = 0;
    for (const auto& [cookie, rec] : ops_) {
      by_seq[rec.seq] = &rec;
      if (rec.reports == 0) ++lost;
      if (rec.reports > 1) ++dup;
      if (rec.reports >= 1) (rec.status == 0 ? completed : failed) += 1;
    }
    bool seen_error = false;
    uint64_t success_after_error = 0;
    for (const auto& [seq, rec] : by_seq) {
      if (rec->status != 0 && rec->reports) seen_error = true;
      if (rec->status == 0 && seen_error) ++success_after_error;
    }
    EXPECT_EQ(lost, 0u) << what;
    EXPECT_EQ(dup, 0u) << what;
    EXPECT_EQ(unknown_, 0u) << what;
    EXPECT_EQ(success_after_error, 0u) << what;
    if (expect_error) {
      EXPECT_TRUE(seen_error || r_.ca().stats().umr_errors > 0) << what << ": no error seen";
    }
    g_totals.ops += ops_.size();
    g_totals.completed += completed;
    g_totals.failed += failed;
    g_totals.lost += lost;
    g_totals.duplicated += dup;
    std::printf("  %-40s ops %5zu completed %5" PRIu64 " failed %5" PRIu64 " lost %" PRIu64
                " dup %" PRIu64 " (A: %" PRIu64 " UMR errors, syndromes:",
                what, ops_.size(), completed, failed, lost, dup, r_.ca().stats().umr_errors);
    const auto& syn = r_.ca().stats().syndromes;
    for (size_t i = 0; i < syn.size(); ++i)
      if (syn[i]) std::printf(" 0x%02zx x%" PRIu64, i, syn[i]);
    std::printf(")\n");
    ops_.clear();
    unknown_ = 0;
  }

  uint64_t count_status(uint8_t st) const {
    uint64_t n = 0;
    for (const auto& [c, rec] : ops_) n += rec.reports && rec.status == st;
    return n;
  }

  void check_windows(const char* what) {
    auto ca = r_.a.pool->check_windows();
    ASSERT_TRUE(ca.ok()) << what << ": A: " << ca.error().message;
    auto cb = r_.b.pool->check_windows();
    ASSERT_TRUE(cb.ok()) << what << ": B: " << cb.error().message;
    EXPECT_EQ(ca.value().total, r_.a.pool->n_windows());
    EXPECT_EQ(ca.value().mapped, a_mapped_.size()) << what;
  }

  // Both ends back to RTS; both cores recovered; B maps its window again.
  void recover() {
    ASSERT_TRUE(drain()) << "A did not retire every WQE before recovery";
    r_.recover_both();
    a_mapped_.clear();  // recover() freed them (their mappings are gone)
    check_windows("after recover");
    auto ca = r_.a.pool->check_windows();
    ASSERT_TRUE(ca.ok());
    EXPECT_EQ(ca.value().mapped, 0u);
    EXPECT_EQ(ca.value().dirty, 0u);
    EXPECT_EQ(ca.value().unmapping, 0u);
    b_map();
    auto st = r_.pair.a->query_qp(r_.ca().qp_handle());
    ASSERT_TRUE(st.ok());
    EXPECT_EQ(st.value(), mlx5::QpState::kRts);
    ++g_totals.faults;
  }

  // Traffic resumes: a verified WRITE + READ round trip, then a clean burst.
  void expect_traffic_resumes(const char* what) {
    PollCore& c = r_.ca();
    uint8_t* src = r_.a.base() + r_.a.arena->page_addr(2) - r_.a.arena->base();
    uint8_t* dst = r_.a.base() + r_.a.arena->page_addr(4) - r_.a.arena->base();
    for (int i = 0; i < 4096; ++i) src[i] = static_cast<uint8_t>(rng_());
    std::memset(dst, 0, 4096);
    const Sge s{r_.a.arena->page_addr(2), 4096, r_.a.arena->lkey()};
    const Sge d{r_.a.arena->page_addr(4), 4096, r_.a.arena->lkey()};
    const uint64_t cw = next_cookie_++, cr = next_cookie_++;
    ops_[cw] = OpRecord{seq_++, 0, 0xff};
    ops_[cr] = OpRecord{seq_++, 0, 0xff};
    ASSERT_EQ(c.post_write({&s, 1}, 4096, b_rkey_, cw, true), Errc::kOk);
    ASSERT_EQ(c.post_read({&d, 1}, 4096, b_rkey_, cr, true), Errc::kOk);
    ASSERT_TRUE(drain());
    EXPECT_EQ(ops_[cw].status, 0) << what;
    EXPECT_EQ(ops_[cr].status, 0) << what;
    EXPECT_EQ(std::memcmp(src, dst, 4096), 0) << what << ": round trip data differs";
    burst(200);
    ASSERT_TRUE(drain());
    EXPECT_FALSE(c.qp().in_error()) << what;
    EXPECT_EQ(count_status(0), ops_.size()) << what << ": not every op completed after recovery";
    check_ledger(what, false);
    check_windows(what);
  }

  Rig& r_;
  std::mt19937_64 rng_;
  std::vector<uint64_t> pages_;
  std::vector<Window*> a_mapped_;
  std::unordered_map<uint64_t, OpRecord> ops_;
  uint64_t next_cookie_ = 1, seq_ = 0, unknown_ = 0;
  uint32_t b_rkey_ = 0;
};

class Faults : public ::testing::TestWithParam<emu::Mode> {
 protected:
  RigConfig cfg() const {
    RigConfig c;
    c.mode = GetParam();
    c.a_windows = 64;
    c.a_max_pages = 8;
    c.a_arena_pages = 256;
    c.b_arena_pages = 64;
    c.retry_cnt = 2;
    c.transport_timeout_ms = 20;
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
  Workload w(*rig_, 1);
  const uint32_t rounds = static_cast<uint32_t>(scaled(20, 3));
  std::mt19937_64 rng(11);
  for (uint32_t round = 0; round < rounds; ++round) {
    const uint8_t synd =
        round % 2 ? MLX5_CQE_SYNDROME_LOCAL_PROT_ERR : MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR;
    ASSERT_TRUE(rig_->pair.a->faults()
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
  Workload w(*rig_, 2);
  const uint32_t rounds = static_cast<uint32_t>(scaled(10, 2));
  for (uint32_t round = 0; round < rounds; ++round) {
    // Hold completions so that hundreds of WQEs are executed or queued but not completed.
    ASSERT_TRUE(rig_->pair.a->faults().delay_completions(rig_->ca().qp_handle(), 1000000).ok());
    w.burst(400);
    for (int i = 0; i < 50; ++i) rig_->pump();
    EXPECT_GT(rig_->ca().qp().sq().in_flight(), 100u);
    ASSERT_TRUE(rig_->pair.a->faults().qp_to_error(rig_->ca().qp_handle()).ok());
    ASSERT_TRUE(rig_->pair.a->faults().delay_completions(rig_->ca().qp_handle(), 0).ok());
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
  Workload w(*rig_, 3);
  const uint32_t rounds = static_cast<uint32_t>(scaled(5, 2));
  for (uint32_t round = 0; round < rounds; ++round) {
    w.burst(50);
    ASSERT_TRUE(w.drain());
    rig_->pair.a->faults().set_peer_unreachable(true);
    w.burst(100);
    ASSERT_TRUE(w.drain());
    rig_->pair.a->faults().set_peer_unreachable(false);
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
  Workload w(*rig_, 4);
  ASSERT_TRUE(rig_->pair.a->faults().delay_completions(rig_->ca().qp_handle(), 200).ok());
  const uint32_t rounds = static_cast<uint32_t>(scaled(10, 2));
  for (uint32_t round = 0; round < rounds; ++round) {
    w.burst(300);
    ASSERT_TRUE(w.drain(60));
    EXPECT_FALSE(rig_->ca().qp().in_error());
    EXPECT_EQ(w.count_status(0), w.ops_.size());
    w.check_windows("delayed completions");
    w.check_ledger("delayed completions", false);
  }
  ASSERT_TRUE(rig_->pair.a->faults().delay_completions(rig_->ca().qp_handle(), 0).ok());
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
// SQ + RQ (every WQE and every receive can need its own CQE: a QP in error flushes each one),
// and at exactly that size the worst case (SQ full of signaled WQEs + RQ full, then the QP goes
// to error) fits. The queue layer under it has no such guard (QpConfig::cq_cqes is the caller's
// contract); there emu reports the overrun (checker rule cq-overrun, cqes_dropped).
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
  cc.qp.cq_cqes = 128;  // >= 80 (emu sizes CQs in powers of two)
  cc.signal_every = 1;  // every WQE signaled: the most CQEs
  auto ca = take(PollCore::create(*pool_a, cc));
  auto cb = take(PollCore::create(*pool_b, cc));
  ASSERT_TRUE(emu::connect_qps(*pair.a, ca->qp_handle(), *pair.b, cb->qp_handle()).ok());
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
  ASSERT_TRUE(emu::connect_qps(*pair.a, da.qpn, *pair.b, db.qpn).ok());
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
