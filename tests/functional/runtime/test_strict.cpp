// Strict mode: the kernel (seccomp) proves the run phase makes no system call.
//
// Every case runs in a forked child, because a violation under Action::kKill ends the whole
// process, and because a seccomp filter can never be removed from a thread. The parent (this
// gtest process) never starts the EAL; children that need it start their own, with their own
// --file-prefix.
//
// What the cases prove together:
//  - 1,000,000 iterations of a syscall-free loop run under the filter and the child exits 0;
//  - the same filter catches a single system call (getpid through syscall(2), so no libc cache
//    can hide it): the child dies with SIGSYS and names the call, or (kRecord) counts it -
//    so the first test would fail if a system call were added to that loop;
//  - the same, on a real EAL poll lcore launched by the Launcher with strict mode on;
//  - after the run phase the thread's system calls work again (forwarded), so the lcore goes
//    back to the EAL and the process shuts down cleanly.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/launcher.hpp>
#include <rdmx/rt/syscall_guard.hpp>
#include "child.hpp"

namespace rt = rdmx::rt;

namespace {

constexpr uint64_t kIterations = 1000000;

using rdmx::test::ChildResult;
using rdmx::test::run_child;

// The loop under test: the kind of work a poll core does (TSC, atomics, arithmetic on its own
// memory, a hot-log push) and nothing else.
[[gnu::noinline]] uint64_t syscall_free_loop(uint64_t n, rt::HotLogRing& log) {
  std::atomic<uint64_t> counter{0};
  uint64_t x = 0x9e3779b97f4a7c15ull;
  uint64_t tsc0 = rte_rdtsc();
  for (uint64_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    counter.fetch_add(x & 1, std::memory_order_relaxed);
    if ((i & 0xffff) == 0) {
      RDMX_HOT_LOG(log, rdmx::LogLevel::kDebug, "iteration %" PRIu64, i);
      rte_pause();
    }
  }
  return counter.load() + (rte_rdtsc() - tsc0 > 0 ? 0 : 1);
}

}  // namespace

TEST(StrictMode, MillionSyscallFreeIterationsPass) {
  auto r = run_child([] {
    rt::HotLogRing log(64);  // allocated in the setup phase
    if (!rt::enter_strict_mode(rt::Action::kKill).ok()) return 2;
    if (!rt::in_strict_run_phase()) return 3;
    uint64_t c = syscall_free_loop(kIterations, log);
    rt::leave_strict_mode();
    // Teardown: system calls work again (forwarded through the runtime's gate).
    if (syscall(SYS_getpid) != getppid() && syscall(SYS_getpid) <= 0) return 4;
    std::fprintf(stderr, "loop done: %" PRIu64 " odd values, forwarded calls %" PRIu64 "\n", c,
                 rt::strict_forwarded_calls());
    if (rt::strict_violations() != 0) return 5;
    if (rt::strict_forwarded_calls() == 0) return 6;
    return log.drain() > 0 ? 0 : 7;  // drained (and printed) outside the run phase
  });
  EXPECT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_NE(r.err.find("loop done"), std::string::npos) << r.describe();
}

TEST(StrictMode, GetpidKillsTheProcess) {
  auto r = run_child([] {
    rt::HotLogRing log(64);
    if (!rt::enter_strict_mode(rt::Action::kKill).ok()) return 2;
    syscall_free_loop(1000, log);
    syscall(SYS_getpid);  // the deliberate system call
    return 0;             // not reached
  });
  EXPECT_TRUE(r.killed_by_sigsys()) << r.describe();
  EXPECT_NE(r.err.find("system call 39 (getpid)"), std::string::npos) << r.describe();
}

TEST(StrictMode, RecordCountsAndContinues) {
  auto r = run_child([] {
    const long pid = syscall(SYS_getpid);
    if (!rt::enter_strict_mode(rt::Action::kRecord).ok()) return 2;
    const long inside = syscall(SYS_getpid);  // violation, recorded, performed
    rt::leave_strict_mode();
    if (inside != pid) return 3;
    if (rt::strict_violations() != 1) return 4;
    rt::StrictViolation v = rt::first_strict_violation();
    if (v.nr != SYS_getpid || std::string(v.name) != "getpid" || v.ip == 0) return 5;
    if (v.lcore != -1) return 6;  // not an EAL lcore
    return 0;
  });
  EXPECT_TRUE(r.exited_ok()) << r.describe();
}

// No TSYNC: another thread keeps making system calls while this one is in its strict run phase.
// The strict thread touches no shared memory inside its window (under TSan a contended atomic
// can take a futex inside the sanitizer runtime); TSC stamps are compared after the window.
TEST(StrictMode, OnlyTheCallingThreadIsFiltered) {
  auto r = run_child([] {
    constexpr size_t kMax = 1 << 20;
    std::vector<uint64_t> stamps(kMax);  // other thread's successful getpid() times
    std::atomic<size_t> n_stamps{0};     // published with release after each stamp
    std::atomic<bool> stop{false};
    std::thread other([&] {
      for (size_t i = 0; i < kMax && !stop.load(std::memory_order_relaxed);) {
        if (syscall(SYS_getpid) > 0) {
          stamps[i] = rte_rdtsc();
          n_stamps.store(++i, std::memory_order_release);
        }
      }
    });
    while (n_stamps.load(std::memory_order_acquire) == 0) std::this_thread::yield();
    // Strict windows of ~25 ms (the filter is installed once, then re-armed), until the other
    // thread is seen running inside one: on a loaded 2-CPU machine it may miss the first.
    size_t during = 0;
    for (int w = 0; w < 40 && during == 0; ++w) {
      if (!rt::enter_strict_mode(rt::Action::kKill).ok()) return 2;
      const uint64_t t0 = rte_rdtsc();
      while (rte_rdtsc() - t0 < 50000000) rte_pause();  // syscall-free, touches nothing shared
      const uint64_t t1 = rte_rdtsc();
      rt::leave_strict_mode();
      const size_t n = n_stamps.load(std::memory_order_acquire);
      for (size_t i = 0; i < n; ++i) during += stamps[i] > t0 && stamps[i] < t1;
    }
    stop = true;
    other.join();  // futex: forwarded
    std::fprintf(stderr, "other thread: %zu getpid() calls while this one was strict\n", during);
    return during > 0 && rt::strict_violations() == 0 ? 0 : 3;
  });
  EXPECT_TRUE(r.exited_ok()) << r.describe();
}

TEST(StrictMode, SettingUpAThreadAfterStrictModeIsRefusedLoudly) {
  auto r = run_child([] {
    if (!rt::enter_strict_mode(rt::Action::kKill).ok()) return 2;
    rt::leave_strict_mode();
    std::thread t([] {});
    t.join();
    return 0;
  });
  EXPECT_TRUE(r.killed_by_sigsys()) << r.describe();
  EXPECT_NE(r.err.find("thread creation"), std::string::npos) << r.describe();
}

// --- On a real EAL poll lcore, launched with strict mode by the Launcher. ---

namespace {

int eal_child(rt::Action action, bool add_getpid, uint64_t* iters_out = nullptr) {
  rt::Eal* eal = rt::init_eal_once_for_tests();
  if (eal == nullptr) return 10;
  std::vector<unsigned> workers;
  for (const auto& s : eal->lcores()) {
    if (!s.is_main) workers.push_back(s.lcore_id);
  }
  if (workers.empty()) return 77;
  rt::LauncherConfig c;
  c.lcores = {workers[0]};
  c.strict.enabled = true;
  c.strict.action = action;
  auto l = rt::Launcher::create(c);
  if (!l.ok()) return 11;
  rt::Launcher& launcher = **l;
  rdmx::Status st = launcher.start([add_getpid](rt::CoreContext& ctx) {
    uint64_t n = 0;
    return rt::run_poll_loop(ctx, [&] {
      ++n;
      if (add_getpid && n == 1000) syscall(SYS_getpid);  // the deliberate system call
      if ((n & 0x3ffff) == 0) {
        RDMX_HOT_LOG(ctx.log(), rdmx::LogLevel::kInfo, "lcore poll iteration %" PRIu64, n);
      }
      return (n & 1) != 0;
    });
  });
  if (!st.ok()) return 12;
  while (launcher.total().iters() < kIterations) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  rdmx::Status done = launcher.stop_and_wait();
  if (iters_out) *iters_out = launcher.total().iters();
  for (rt::HotLogRing* ring : launcher.log_rings()) ring->drain();
  if (!done.ok()) {
    std::fprintf(stderr, "stop_and_wait: %s\n", done.error().message.c_str());
    return 13;
  }
  std::fprintf(stderr, "lcore %u ran %" PRIu64 " iterations under strict mode\n", workers[0],
               launcher.total().iters());
  return 0;
}

}  // namespace

TEST(StrictModeEal, PollLcoreRunsAMillionIterations) {
  auto r = run_child([] { return eal_child(rt::Action::kKill, false); });
  if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 77) GTEST_SKIP() << "needs 2 lcores";
  EXPECT_TRUE(r.exited_ok()) << r.describe();
  EXPECT_NE(r.err.find("under strict mode"), std::string::npos) << r.describe();
}

TEST(StrictModeEal, GetpidOnPollLcoreKillsTheRun) {
  auto r = run_child([] { return eal_child(rt::Action::kKill, true); });
  if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 77) GTEST_SKIP() << "needs 2 lcores";
  EXPECT_TRUE(r.killed_by_sigsys()) << r.describe();
  EXPECT_NE(r.err.find("(getpid) on lcore"), std::string::npos) << r.describe();
}

TEST(StrictModeEal, GetpidOnPollLcoreFailsTheRunInRecordMode) {
  auto r = run_child([] { return eal_child(rt::Action::kRecord, true); });
  if (WIFEXITED(r.status) && WEXITSTATUS(r.status) == 77) GTEST_SKIP() << "needs 2 lcores";
  EXPECT_TRUE(WIFEXITED(r.status) && WEXITSTATUS(r.status) == 13) << r.describe();
  EXPECT_NE(r.err.find("1 system call(s) in the run phase; first: 39 (getpid)"), std::string::npos)
      << r.describe();
}
