// Launching poll cores: one run-to-completion function per worker lcore, a stop flag, a join.
//
// Threading (doc/guides/runtime.md):
//   main lcore   - builds the Launcher, start(), request_stop(), wait(); reads stats().
//   poll lcore i - runs the function given to start() with its CoreContext: setup phase (allocate
//                  on its NUMA node, create its queues), then run_poll_loop() (the run phase:
//                  strict mode, zero system calls), then teardown. It alone writes its
//                  CoreStats and pushes to its HotLogRing.
//   any thread   - request_stop(), stats(): lock-free reads of relaxed atomics.
//
// The poll loop is a template over the poller (STYLE rule 5): no indirect call per iteration.
// A poller returns true when it did work (BUSY) and false when it found nothing (IDLE); the loop
// counts busy and idle iterations and the TSC cycles spent in each.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include <rdmx/core/config.hpp>
#include <rdmx/core/result.hpp>
#include <rdmx/rt/dpdk.hpp>
#include <rdmx/rt/hot_log.hpp>
#include <rdmx/rt/syscall_guard.hpp>

namespace rdmx::rt {

class Launcher;

enum class Phase : uint8_t { kNotStarted, kSetup, kRun, kDrain, kTeardown, kDone };
const char* phase_name(Phase p) noexcept;

// Written by its poll core only (relaxed load + store: one plain mov each on x86), read by any
// thread without a lock. One cache line per core, so cores never share one.
struct alignas(kCacheLine) CoreStats {
  std::atomic<uint64_t> busy_iters{0};
  std::atomic<uint64_t> idle_iters{0};
  std::atomic<uint64_t> busy_tsc{0};
  std::atomic<uint64_t> idle_tsc{0};
  std::atomic<Phase> phase{Phase::kNotStarted};

  // Poll core only. Hot path.
  void account(bool busy, uint64_t tsc) noexcept {
    auto bump = [](std::atomic<uint64_t>& c, uint64_t v) {
      c.store(c.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
    };
    if (busy) {
      bump(busy_iters, 1);
      bump(busy_tsc, tsc);
    } else {
      bump(idle_iters, 1);
      bump(idle_tsc, tsc);
    }
  }
};

struct CoreStatsSnapshot {
  uint64_t busy_iters = 0;
  uint64_t idle_iters = 0;
  uint64_t busy_tsc = 0;
  uint64_t idle_tsc = 0;
  Phase phase = Phase::kNotStarted;
  uint64_t iters() const noexcept { return busy_iters + idle_iters; }
};

struct StrictOptions {
  bool enabled = false;  // `--strict-no-syscalls`
  Action action = Action::kKill;
};

// What a poll core gets. Owned by the Launcher; one per launched lcore.
class CoreContext {
 public:
  unsigned index() const noexcept { return index_; }  // 0..n_cores-1
  unsigned lcore_id() const noexcept { return lcore_id_; }
  int socket() const noexcept { return socket_; }  // NUMA node to allocate on
  const StrictOptions& strict() const noexcept { return strict_; }

  // Hot path: one relaxed load.
  bool stop_requested() const noexcept { return stop_->load(std::memory_order_relaxed); }
  CoreStats& stats() noexcept { return *stats_; }
  HotLogRing& log() noexcept { return *log_; }
  void set_phase(Phase p) noexcept { stats_->phase.store(p, std::memory_order_release); }

  // Setup -> run: enters strict mode when enabled. Fails (and logs, still in setup) when the
  // filter cannot be installed.
  Status enter_run_phase();
  // Run -> drain/teardown: leaves strict mode (no system call).
  void leave_run_phase(Phase next = Phase::kTeardown) noexcept;

 private:
  friend class Launcher;
  unsigned index_ = 0;
  unsigned lcore_id_ = 0;
  int socket_ = 0;
  StrictOptions strict_;
  const std::atomic<bool>* stop_ = nullptr;
  CoreStats* stats_ = nullptr;
  HotLogRing* log_ = nullptr;
  Launcher* launcher_ = nullptr;
};

// The run phase of a poll core: polls until the stop flag is seen, then keeps polling until
// `drained()` says all in-flight work is complete (still in the run phase: draining is hot-path
// work too), then leaves the run phase. Returns 0, or -1 when the run phase could not be
// entered. Called on the poll core, from the function given to Launcher::start().
template <class Poll, class Drained>
int run_poll_loop(CoreContext& ctx, Poll&& poll, Drained&& drained) noexcept {
  if (!ctx.enter_run_phase().ok()) return -1;
  CoreStats& st = ctx.stats();
  uint64_t prev = rte_rdtsc();
  while (!ctx.stop_requested()) {
    const bool busy = poll();
    const uint64_t now = rte_rdtsc();
    st.account(busy, now - prev);
    prev = now;
  }
  ctx.set_phase(Phase::kDrain);
  while (!drained()) {
    const bool busy = poll();
    const uint64_t now = rte_rdtsc();
    st.account(busy, now - prev);
    prev = now;
  }
  ctx.leave_run_phase();
  return 0;
}

template <class Poll>
int run_poll_loop(CoreContext& ctx, Poll&& poll) noexcept {
  return run_poll_loop(ctx, static_cast<Poll&&>(poll), [] { return true; });
}

struct LauncherConfig {
  std::vector<unsigned> lcores;  // worker lcores to launch on (Placement::poll)
  std::vector<int> sockets;      // NUMA node per lcore (empty: rte_lcore_to_socket_id)
  StrictOptions strict;
  uint32_t log_ring_entries = 1024;  // power of two
};

class Launcher {
 public:
  // Setup path, main lcore. Checks that every lcore is an enabled worker lcore.
  static Result<std::unique_ptr<Launcher>> create(LauncherConfig cfg);
  ~Launcher();
  Launcher(const Launcher&) = delete;
  Launcher& operator=(const Launcher&) = delete;

  // Main lcore. Launches fn on every lcore (rte_eal_remote_launch). The function runs to
  // completion: setup, run_poll_loop(), teardown; it returns 0 on success. Fails when a launch
  // fails (lcore busy); the lcores already launched are stopped and joined.
  Status start(std::function<int(CoreContext&)> fn);

  // Any thread (also a signal handler: one atomic store).
  void request_stop() noexcept { stop_.store(true, std::memory_order_relaxed); }
  bool stop_requested() const noexcept { return stop_.load(std::memory_order_relaxed); }
  bool running() const noexcept { return running_; }

  // Main lcore. Sleeps (1 ms steps, so the main thread does not compete with a device thread on
  // a shared CPU) until every launched lcore has returned, then joins them with
  // rte_eal_mp_wait_lcore(). Returns each core's return code, in index order.
  std::vector<int> wait();
  // request_stop() + wait(); fails when a core returned non-zero or strict mode recorded a
  // violation (Action::kRecord).
  Status stop_and_wait();

  size_t n_cores() const noexcept { return ctx_.size(); }
  const CoreContext& core(size_t i) const noexcept { return *ctx_[i]; }
  // Any thread, lock-free.
  CoreStatsSnapshot stats(size_t i) const noexcept;
  CoreStatsSnapshot total() const noexcept;
  std::vector<HotLogRing*> log_rings() const;

 private:
  Launcher() = default;
  static int lcore_entry(void* arg);

  std::atomic<bool> stop_{false};
  bool running_ = false;
  std::function<int(CoreContext&)> fn_;
  std::vector<std::unique_ptr<CoreContext>> ctx_;
  std::unique_ptr<CoreStats[]> stats_;
  std::vector<std::unique_ptr<HotLogRing>> logs_;
  std::vector<int> rets_;
  uint64_t violations_at_start_ = 0;
};

}  // namespace rdmx::rt
