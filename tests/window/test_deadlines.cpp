// The recovery path's waits are bounded in time, not in polls (suite 'emu', threaded emu):
// recovering repeatedly while other threads load every CPU never times out, not even when the
// device thread does not run for a second (a descheduled emu thread on a loaded machine); and a
// budget is honoured when the device really stopped.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mem/page_allocator.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace {

using rdmx::Errc;
using rdmx::mlx5::Completion;
using namespace rdmx::win;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

constexpr uint32_t kRw =
    rdmx::mlx5::kAccessLocalWrite | rdmx::mlx5::kAccessRemoteWrite | rdmx::mlx5::kAccessRemoteRead;

template <class T>
T take(rdmx::Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

using Side = rdmx::endpoint::Endpoint;

// Busy threads on every CPU for the life of the object.
struct CpuLoad {
  explicit CpuLoad(unsigned n) {
    for (unsigned i = 0; i < n; ++i)
      threads.emplace_back([this] {
        volatile uint64_t x = 0;
        while (!stop.load(std::memory_order_relaxed)) x = x + 1;
      });
  }
  ~CpuLoad() {
    stop = true;
    for (auto& t : threads) t.join();
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
};

struct ThreadedRig {
  ThreadedRig() {
    rdmx::endpoint::DeviceOptions o;
    o.emu.idle_yield = true;  // the device thread shares its CPU with the load
    auto devs = take(rdmx::endpoint::open_device_pair("emu-threaded", o, o));
    a = take(Side::create(std::move(devs[0]), side_config()));
    b = take(Side::create(std::move(devs[1]), side_config()));
    connect();
    pages.resize(8);
    for (uint32_t i = 0; i < pages.size(); ++i) pages[i] = a.arena().page_addr(i);
  }
  ~ThreadedRig() {
    a.destroy_cores();
    b.destroy_cores();
  }
  static rdmx::endpoint::EndpointConfig side_config() {
    rdmx::endpoint::EndpointConfig ec;
    ec.arena.bytes = 256 * 4096;
    ec.pool.n_windows = 16;
    ec.pool.max_pages = 8;
    ec.core.cache_size = 8;
    ec.core.qp.sq_wqebbs = 256;
    ec.core.qp.rq_wqes = 16;
    ec.core.qp.cq_cqes = 1024;
    return ec;
  }
  void connect() {
    auto s =
        rdmx::mlx5::connect_qps(a.device(), a.core().qp_handle(), b.device(), b.core().qp_handle());
    ASSERT_TRUE(s.ok()) << s.error().message;
  }
  // Maps n windows on A (their state is unknown after the error: recover invalidates them).
  void map_some(uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
      MapResult m =
          a.core().map(std::span<const uint64_t>(pages.data() + i % 4, 4), kRw, 0, 4 * 4096);
      ASSERT_TRUE(m.ok()) << rdmx::errc_name(m.errc);
    }
    a.core().flush();
  }
  // Error on A's QP, drained on both sides (bounded in time), reconnected, both recovered.
  void fail_and_recover(bool stall_device) {
    ASSERT_TRUE(a.emu()->faults().qp_to_error(a.core().qp_handle()).ok());
    ASSERT_TRUE(a.core().quiesce()) << "flushes of A did not arrive";
    ASSERT_TRUE(b.emu()->faults().qp_to_error(b.core().qp_handle()).ok());
    ASSERT_TRUE(b.core().quiesce());
    connect();
    std::thread restarter;
    if (stall_device) {
      // The device does not run for a second while recover() waits for its invalidates.
      a.emu()->stop();
      restarter = std::thread([this] {
        std::this_thread::sleep_for(milliseconds(1000));
        ASSERT_TRUE(a.emu()->start().ok());
      });
    }
    auto sa = a.core().recover();
    if (restarter.joinable()) restarter.join();
    ASSERT_TRUE(sa.ok()) << sa.error().message;
    auto sb = b.core().recover();
    ASSERT_TRUE(sb.ok()) << sb.error().message;
    EXPECT_EQ(a.core().umrs_in_flight(), 0u);
  }

  Side a, b;
  std::vector<uint64_t> pages;
};

TEST(Deadlines, RecoverRepeatedlyUnderCpuLoadNeverTimesOut) {
  ThreadedRig r;
  CpuLoad load(std::max(2u, std::thread::hardware_concurrency()));
  const auto t0 = Clock::now();
  int rounds = 0;
  for (; rounds < 40 && Clock::now() - t0 < milliseconds(2500); ++rounds) {
    r.map_some(6);
    ASSERT_NO_FATAL_FAILURE(r.fail_and_recover(rounds == 1)) << "round " << rounds;
  }
  EXPECT_GE(rounds, 2);
  EXPECT_EQ(r.a.core().stats().recoveries, static_cast<uint64_t>(rounds));
  // Still usable: a map completes.
  r.map_some(1);
  EXPECT_TRUE(r.a.core().quiesce());
}

TEST(Deadlines, QuiesceHonoursItsBudgetWhenTheDeviceStopped) {
  ThreadedRig r;
  r.a.emu()->stop();
  r.map_some(2);
  const auto t0 = Clock::now();
  EXPECT_FALSE(r.a.core().quiesce(milliseconds(200)));
  const auto took = Clock::now() - t0;
  EXPECT_GE(took, milliseconds(200));
  EXPECT_LT(took, milliseconds(5000)) << "the budget is a deadline, not a hint";
  ASSERT_TRUE(r.a.emu()->start().ok());
  EXPECT_TRUE(r.a.core().quiesce());
}

}  // namespace
