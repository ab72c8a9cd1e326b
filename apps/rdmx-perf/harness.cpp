#include "harness.hpp"

#include <linux/perf_event.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>

#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define RDMX_PERF_HAVE_CALLGRIND 1
#endif
#endif

namespace rdmx::perf {

void callgrind_start() noexcept {
#ifdef RDMX_PERF_HAVE_CALLGRIND
  CALLGRIND_START_INSTRUMENTATION;
#endif
}
void callgrind_stop() noexcept {
#ifdef RDMX_PERF_HAVE_CALLGRIND
  CALLGRIND_STOP_INSTRUMENTATION;
#endif
}
void callgrind_dump(const std::string& what) noexcept {
#ifdef RDMX_PERF_HAVE_CALLGRIND
  CALLGRIND_DUMP_STATS_AT(what.c_str());
#else
  (void)what;
#endif
}
bool on_valgrind() noexcept {
#ifdef RDMX_PERF_HAVE_CALLGRIND
  return RUNNING_ON_VALGRIND != 0;
#else
  return false;
#endif
}

// ---- SyscallCounter
// ------------------------------------------------------------------------------
namespace {
long tracepoint_id(const char* name) {
  for (const char* root : {"/sys/kernel/tracing/events/", "/sys/kernel/debug/tracing/events/"}) {
    std::ifstream f(std::string(root) + name + "/id");
    long id = -1;
    if (f >> id) return id;
  }
  return -1;
}
}  // namespace

SyscallCounter::SyscallCounter() {
  const long id = tracepoint_id("raw_syscalls/sys_enter");
  if (id < 0) {
    why_ = "tracepoint raw_syscalls/sys_enter not found (tracefs not mounted?)";
    return;
  }
  perf_event_attr a;
  std::memset(&a, 0, sizeof a);
  a.type = PERF_TYPE_TRACEPOINT;
  a.size = sizeof a;
  a.config = static_cast<uint64_t>(id);
  a.disabled = 1;
  a.exclude_hv = 1;
  // This thread only (pid 0), any CPU.
  fd_ = static_cast<int>(syscall(SYS_perf_event_open, &a, 0, -1, -1, 0));
  if (fd_ < 0) {
    why_ = std::string("perf_event_open: ") + std::strerror(errno);
    return;
  }
  // Calibrate: what an empty start/stop pair counts (the stop ioctl enters while enabled).
  uint64_t lo = ~0ull;
  for (int i = 0; i < 5; ++i) {
    start();
    const uint64_t n = stop();
    lo = std::min(lo, n);
  }
  self_ = lo;
}

SyscallCounter::~SyscallCounter() {
  if (fd_ >= 0) close(fd_);
}

void SyscallCounter::start() noexcept {
  if (fd_ < 0) return;
  ioctl(fd_, PERF_EVENT_IOC_RESET, 0);
  ioctl(fd_, PERF_EVENT_IOC_ENABLE, 0);
}

uint64_t SyscallCounter::stop() noexcept {
  if (fd_ < 0) return 0;
  ioctl(fd_, PERF_EVENT_IOC_DISABLE, 0);
  uint64_t v = 0;
  if (read(fd_, &v, sizeof v) != sizeof v) return 0;
  return v > self_ ? v - self_ : 0;
}

// ---- Results
// -------------------------------------------------------------------------------------
CaseResult* TestResult::find(const std::string& name) {
  for (auto& c : cases)
    if (c.name == name) return &c;
  return nullptr;
}

void add_ratio(CaseResult& a, const CaseResult& b, bool by_p50) {
  if (by_p50) {
    if (b.lat.p50_ns > 0) a.ratios.push_back(Ratio{b.name + "@p50", a.lat.p50_ns / b.lat.p50_ns});
  } else if (b.ns > 0) {
    a.ratios.push_back(Ratio{b.name, a.ns / b.ns});
  }
}

Latency summarize(std::vector<uint64_t>& v, double tsc_hz, double resolution_cycles) {
  Latency l;
  if (v.empty()) return l;
  std::sort(v.begin(), v.end());
  const double ns = 1e9 / tsc_hz;
  auto at = [&](double q) {
    size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(v.size())));
    if (i > 0) --i;
    if (i >= v.size()) i = v.size() - 1;
    return static_cast<double>(v[i]) * ns;
  };
  long double sum = 0;
  for (uint64_t x : v) sum += x;
  l.samples = v.size();
  l.min_ns = static_cast<double>(v.front()) * ns;
  l.max_ns = static_cast<double>(v.back()) * ns;
  l.p50_ns = at(0.50);
  l.p99_ns = at(0.99);
  l.p999_ns = at(0.999);
  const long double mean = sum / static_cast<long double>(v.size());
  long double var = 0;
  for (uint64_t x : v) var += (x - mean) * (x - mean);
  l.avg_ns = static_cast<double>(mean) * ns;
  l.resolution_ns = resolution_cycles * ns;
  // The slow ops: the sorted vector's tail above kSlowFactor x p50 (or x the resolution).
  const double slow_above = kSlowFactor * std::max(l.p50_ns / ns, resolution_cycles);
  const auto first_slow =
      std::upper_bound(v.begin(), v.end(), slow_above,
                       [](double t, uint64_t x) { return t < static_cast<double>(x); });
  long double slow_sum = 0;
  for (auto it = first_slow; it != v.end(); ++it) slow_sum += *it;
  l.slow_fraction = static_cast<double>(v.end() - first_slow) / static_cast<double>(v.size());
  l.slow_time_share = sum > 0 ? static_cast<double>(slow_sum / sum) : 0;
  l.stdev_ns = std::sqrt(static_cast<double>(var / static_cast<long double>(v.size()))) * ns;
  return l;
}

double measure_timer_overhead() {
  auto b = make_bench(CaseResult{}, [] { clobber(); });
  constexpr uint64_t n = 20000;
  std::vector<uint64_t> t(n + 1), d(n);
  b->run_stamped(n, t.data() + 1);  // warm
  b->run_stamped(n, t.data() + 1);
  for (uint64_t i = 0; i < n; ++i) d[i] = t[i + 1] - t[i];
  std::sort(d.begin(), d.end());
  return static_cast<double>(d[n / 2]);
}

double measure_core_hz(double tsc_hz) {
  constexpr uint64_t kLoops = 200000, kAddsPerLoop = 16;
  double best = 0;
  for (int attempt = 0; attempt < 5; ++attempt) {
    uint64_t x = 0;
    const uint64_t y = static_cast<uint64_t>(attempt) + 1;
    const uint64_t t0 = tsc();
    for (uint64_t i = 0; i < kLoops; ++i) {
      // Each add waits for the previous one: kAddsPerLoop core cycles per loop (the loop's own
      // counter and branch run beside the chain). Register operands: a renamer that folds
      // chains of adds of immediates cannot shorten this one.
#define RDMX_PERF_ADD4 "add %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\tadd %1, %0\n\t"
      __asm__ volatile(RDMX_PERF_ADD4 RDMX_PERF_ADD4 RDMX_PERF_ADD4 RDMX_PERF_ADD4
                       : "+r"(x)
                       : "r"(y));
#undef RDMX_PERF_ADD4
    }
    const uint64_t ticks = tsc() - t0;
    const double cycles = static_cast<double>(kLoops * kAddsPerLoop);
    if (ticks != 0) best = std::max(best, cycles * tsc_hz / static_cast<double>(ticks));
  }
  return best;  // interruptions only lower a try
}

namespace {

// Progress on long runs: "rdmx-perf: 42 s: CASE, round R of N", at most once per period, from
// the first run_group of the process on. Called between timed phases.
void progress(const RunConfig& rc, const std::string& name, uint32_t round, uint32_t rounds) {
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point start = Clock::now();
  static Clock::time_point last = start;
  if (rc.progress_period_s <= 0) return;
  const Clock::time_point now = Clock::now();
  if (std::chrono::duration<double>(now - last).count() < rc.progress_period_s) return;
  last = now;
  std::fprintf(stderr, "rdmx-perf: %.0f s: %s, round %u of %u\n",
               std::chrono::duration<double>(now - start).count(), name.c_str(), round + 1, rounds);
}

// Every round is cut into chunks of ~kChunkUnits units, each timed on its own: the figure is
// the median chunk, so a chunk hit by a preemption (milliseconds on a shared machine) is an
// outlier instead of inflating a whole round's mean. The plain mean over everything is kept
// as extra "mean_all_ns".
constexpr uint64_t kChunkUnits = 2048;

// One case's bulk-phase totals over the rounds.
struct BulkAcc {
  uint64_t calls = 0, allocs = 0, sys = 0, cycles = 0;
  std::vector<double> rounds, chunks;
};

// One bulk round of bench b (after its warm-up): timed chunk by chunk, allocations and system
// calls counted around it (and callgrind's counts, one dump per case and round).
void bulk_round(const RunConfig& rc, Bench& b, uint32_t rounds, double ns_per_cycle, BulkAcc& acc) {
  const uint32_t burst = std::max<uint32_t>(1, b.meta.burst);
  const uint64_t calls = std::max<uint64_t>(1, rc.iterations / rounds / burst);
  const uint64_t chunk = std::max<uint64_t>(1, std::min(calls, kChunkUnits / burst));
  const uint64_t warm = rc.warmup / burst;
  if (warm) (void)b.run(warm);
  std::vector<double> mine;
  mine.reserve(calls / chunk + 1);
  const uint64_t a0 = thread_allocs();
  if (rc.syscalls) rc.syscalls->start();
  if (rc.callgrind) callgrind_start();
  uint64_t cyc = 0;
  for (uint64_t done = 0; done < calls;) {
    const uint64_t k = std::min(chunk, calls - done);
    const uint64_t c = b.run(k);
    cyc += c;
    mine.push_back(static_cast<double>(c) * ns_per_cycle / static_cast<double>(k * burst));
    done += k;
  }
  if (rc.callgrind) {
    callgrind_stop();
    callgrind_dump(b.meta.name + " calls=" + std::to_string(calls) +
                   " units=" + std::to_string(calls * burst));
  }
  const uint64_t sys = rc.syscalls ? rc.syscalls->stop() : 0;
  acc.allocs += thread_allocs() - a0;
  acc.sys += sys;
  acc.calls += calls;
  acc.cycles += cyc;
  acc.chunks.insert(acc.chunks.end(), mine.begin(), mine.end());
  std::sort(mine.begin(), mine.end());
  acc.rounds.push_back(mine[mine.size() / 2]);
}

// Stamped phase, interleaved like the bulk phase: every round stamps its share of each case's
// ops in turn (after the same warm-up), so a noisy phase of the machine falls on every case of
// the group alike; the round-trip tests compare these p50s. Returns each case's per-unit cycles.
std::vector<std::vector<uint64_t>> stamped_phase(const RunConfig& rc,
                                                 std::vector<std::unique_ptr<Bench>>& g,
                                                 uint32_t rounds) {
  const uint64_t n_st = rc.stamped ? rc.stamped : std::min<uint64_t>(rc.iterations, 1000000);
  std::vector<std::vector<uint64_t>> samples(g.size());
  uint64_t longest = 1;
  for (size_t i = 0; i < g.size(); ++i) {
    const uint64_t calls = std::max<uint64_t>(1, n_st / std::max<uint32_t>(1, g[i]->meta.burst));
    samples[i].reserve(calls);
    longest = std::max(longest, (calls + rounds - 1) / rounds);
  }
  std::vector<uint64_t> t(longest + 1);
  for (uint32_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < g.size(); ++i) {
      Bench& b = *g[i];
      const uint32_t burst = std::max<uint32_t>(1, b.meta.burst);
      const uint64_t calls = std::max<uint64_t>(1, n_st / burst);
      const uint64_t k = std::min((calls + rounds - 1) / rounds, calls - samples[i].size());
      if (k == 0) continue;
      const uint64_t warm = rc.warmup / burst;
      if (warm) (void)b.run(warm);
      b.run_stamped(k, t.data() + 1);
      for (uint64_t j = 0; j < k; ++j) {
        const double raw = static_cast<double>(t[j + 1] - t[j]) - rc.timer_overhead;
        samples[i].push_back(raw > 0 ? static_cast<uint64_t>(raw / burst + 0.5) : 0);
      }
    }
  }
  return samples;
}

// A case's figures from its bulk totals and its stamped samples (freed here).
CaseResult case_result(const RunConfig& rc, const Bench& b, const BulkAcc& acc,
                       std::vector<uint64_t>& d, double ns_per_cycle) {
  CaseResult c = b.meta;
  const uint32_t burst = std::max<uint32_t>(1, c.burst);
  c.round_ns = acc.rounds;
  std::vector<double> s = acc.chunks;
  std::sort(s.begin(), s.end());
  c.ns = s[s.size() / 2];
  c.best_ns = *std::min_element(c.round_ns.begin(), c.round_ns.end());
  c.extra.push_back({"mean_all_ns", static_cast<double>(acc.cycles) * ns_per_cycle /
                                        static_cast<double>(acc.calls * burst)});
  c.cycles = c.ns / ns_per_cycle;
  c.ops_per_s = c.ns > 0 ? 1e9 / c.ns : 0;
  c.ops = acc.calls * burst;
  c.allocs_per_op = static_cast<double>(acc.allocs) / static_cast<double>(c.ops);
  c.syscalls_per_op = (rc.syscalls && rc.syscalls->available())
                          ? static_cast<double>(acc.sys) / static_cast<double>(c.ops)
                          : -1;
  for (uint64_t x : d) c.hist.add(x);
  c.lat = summarize(d, rc.tsc_hz, std::max(1.0, rc.timer_overhead) / burst);
  std::vector<uint64_t>().swap(d);
  return c;
}

}  // namespace

std::vector<CaseResult> run_group(const RunConfig& rc, std::vector<std::unique_ptr<Bench>>& g) {
  const uint32_t rounds = std::max<uint32_t>(1, rc.rounds);
  const double ns_per_cycle = 1e9 / rc.tsc_hz;
  std::vector<BulkAcc> acc(g.size());
  for (uint32_t r = 0; r < rounds; ++r) {
    for (size_t i = 0; i < g.size(); ++i) {
      bulk_round(rc, *g[i], rounds, ns_per_cycle, acc[i]);
      progress(rc, g[i]->meta.name, r, rounds);
    }
  }
  std::vector<std::vector<uint64_t>> samples = stamped_phase(rc, g, rounds);
  std::vector<CaseResult> out;
  for (size_t i = 0; i < g.size(); ++i)
    out.push_back(case_result(rc, *g[i], acc[i], samples[i], ns_per_cycle));
  return out;
}

}  // namespace rdmx::perf
