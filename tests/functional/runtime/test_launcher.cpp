// Launching poll lcores: busy/idle accounting, lock-free stats, stop flag, drain, relaunch.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <thread>

#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/launcher.hpp>
#include <rdmx/rt/placement.hpp>

namespace rt = rdmx::rt;

namespace {

rt::Eal* eal() {
  static rt::Eal* e = rt::init_eal_once_for_tests();
  return e;
}

std::vector<unsigned> workers() {
  std::vector<unsigned> w;
  for (const auto& s : eal()->lcores()) {
    if (!s.is_main) w.push_back(s.lcore_id);
  }
  return w;
}

}  // namespace

class LauncherTest : public testing::Test {
 protected:
  void SetUp() override {
    ASSERT_NE(eal(), nullptr);
    if (workers().empty()) GTEST_SKIP() << "needs at least 2 CPUs (one worker lcore)";
  }
};

TEST_F(LauncherTest, RejectsBadConfigs) {
  EXPECT_FALSE(rt::Launcher::create({}).ok());
  rt::LauncherConfig c;
  c.lcores = {rte_get_main_lcore()};
  EXPECT_FALSE(rt::Launcher::create(c).ok());
  c.lcores = {RTE_MAX_LCORE - 1};
  EXPECT_FALSE(rt::Launcher::create(c).ok());
  c.lcores = {workers()[0], workers()[0]};
  EXPECT_FALSE(rt::Launcher::create(c).ok());
}

TEST_F(LauncherTest, PollLoopCountsBusyIdleAndStops) {
  rt::LauncherConfig c;
  c.lcores = workers();
  auto l = rt::Launcher::create(c);
  ASSERT_TRUE(l.ok()) << l.error().message;
  rt::Launcher& launcher = **l;

  std::atomic<uint64_t> in_flight_at_stop{0};
  ASSERT_TRUE(launcher
                  .start([&](rt::CoreContext& ctx) {
                    // Setup phase: may allocate and log.
                    uint64_t n = 0;
                    uint64_t in_flight = 0;
                    int rc = rt::run_poll_loop(
                        ctx,
                        [&] {
                          ++n;
                          if (in_flight > 0) {
                            --in_flight;  // "complete" one
                            return true;
                          }
                          if (!ctx.stop_requested() && n % 3 == 0) {
                            in_flight = 5;  // "post" a burst
                            if (n % 3000 == 0) {
                              RDMX_HOT_LOG(ctx.log(), rdmx::LogLevel::kDebug, "posted at %" PRIu64,
                                           n);
                            }
                            return true;
                          }
                          return false;
                        },
                        [&] {
                          if (in_flight_at_stop.load() == 0) in_flight_at_stop = in_flight + 1;
                          return in_flight == 0;
                        });
                    return rc == 0 && in_flight == 0 ? 0 : 1;
                  })
                  .ok());
  rt::HotLogDrainer drainer;
  drainer.start(launcher.log_rings());
  // Lock-free reads while the cores run: counters only grow.
  uint64_t last = 0;
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    uint64_t now = launcher.total().iters();
    EXPECT_GE(now, last);
    last = now;
  }
  EXPECT_EQ(launcher.stats(0).phase, rt::Phase::kRun);
  ASSERT_TRUE(launcher.stop_and_wait().ok());
  drainer.stop();
  for (size_t i = 0; i < launcher.n_cores(); ++i) {
    auto s = launcher.stats(i);
    EXPECT_EQ(s.phase, rt::Phase::kDone);
    EXPECT_GT(s.busy_iters, 0u);
    EXPECT_GT(s.idle_iters, 0u);
    EXPECT_GT(s.busy_tsc + s.idle_tsc, 0u);
  }
  EXPECT_GT(launcher.total().iters(), 1000u);
  EXPECT_FALSE(launcher.running());

  // The same lcores launch again.
  ASSERT_TRUE(launcher.start([](rt::CoreContext& ctx) { return ctx.index() == 0 ? 7 : 0; }).ok());
  auto rets = launcher.wait();
  ASSERT_EQ(rets.size(), launcher.n_cores());
  EXPECT_EQ(rets[0], 7);
  EXPECT_FALSE(launcher.stop_and_wait().ok());  // a core returned 7
}

TEST_F(LauncherTest, FailingCoreFailsStopAndWait) {
  rt::LauncherConfig c;
  c.lcores = {workers()[0]};
  auto l = rt::Launcher::create(c);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE((*l)->start([](rt::CoreContext&) { return 3; }).ok());
  rdmx::Status s = (*l)->stop_and_wait();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.error().message.find("returned 3"), std::string::npos);
}

TEST_F(LauncherTest, PlacementDrivesTheLauncher) {
  auto topo = rt::discover_topology();
  ASSERT_TRUE(topo.ok());
  auto pl = rt::plan(*topo, 1, true, 0, eal()->lcores());
  ASSERT_TRUE(pl.ok()) << pl.error().message;
  rt::LauncherConfig c;
  for (const auto& s : pl->poll) {
    c.lcores.push_back(s.lcore_id);
    c.sockets.push_back(s.socket);
  }
  auto l = rt::Launcher::create(c);
  ASSERT_TRUE(l.ok());
  ASSERT_TRUE(
      (*l)->start([](rt::CoreContext& ctx) { return rt::run_poll_loop(ctx, [] { return false; }); })
          .ok());
  while ((*l)->total().iters() < 1000) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE((*l)->stop_and_wait().ok());
  EXPECT_EQ((*l)->stats(0).busy_iters, 0u);
}

// Destroying a running launcher stops and joins its cores.
TEST_F(LauncherTest, DestructorStopsCores) {
  rt::LauncherConfig c;
  c.lcores = workers();
  {
    auto l = rt::Launcher::create(c);
    ASSERT_TRUE(l.ok());
    ASSERT_TRUE((*l)->start([](rt::CoreContext& ctx) {
                      return rt::run_poll_loop(ctx, [] { return true; });
                    })
                    .ok());
  }
  for (unsigned w : workers()) EXPECT_EQ(rte_eal_get_lcore_state(w), WAIT);
}
