// rdmx-perf harness: TSC timing, interleaved rounds, per-op stamps, a log-linear histogram,
// allocation and system-call counters, and the result records every test fills.
//
// Method (doc/guides/rdmx-perf.md, "Method"):
//  - bulk phase: each case runs `rounds` rounds of `iterations / rounds` operations between two
//    TSC reads; the cases of a group are interleaved round by round (A B C A B C ...), so a
//    noisy neighbour or a frequency change hits every case of the group alike. The figure of a
//    case is the median of ~2048-unit chunks over all rounds (each chunk timed on its own), so a
//    preemption is an outlier, not an offset; the plain mean over everything is kept too.
//  - stamped phase: the TSC is read after every operation into a preallocated array; the
//    differences (minus the timer's own cost, measured the same way around an empty operation)
//    give min, p50, p99, p99.9 and max, and fill the histogram. It is interleaved round by round
//    like the bulk phase, so the p50s of a group's cases meet the same noisy phases.
//  - warm-up operations precede every round and are discarded.
//  - allocations (malloc/calloc/realloc/operator new on the measuring thread) and system calls
//    (perf tracepoint raw_syscalls:sys_enter on the measuring thread) are counted around every
//    bulk round.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <rdmx/core/histogram.hpp>

namespace rdmx::perf {

inline uint64_t tsc() noexcept {
  return __builtin_ia32_rdtsc();
}

// Keeps `v` alive and makes the compiler forget what it knows about memory (the operation under
// test may not be folded away or hoisted out of the loop).
template <class T>
inline void keep(T const& v) noexcept {
  asm volatile("" : : "r,m"(v) : "memory");
}
inline void clobber() noexcept {
  asm volatile("" : : : "memory");
}

// ---- Counters
// ------------------------------------------------------------------------------------ Allocations
// made by the calling thread since it started (alloc_hook.cpp).
uint64_t thread_allocs() noexcept;
// Allocations by every thread.
uint64_t total_allocs() noexcept;

// System calls made by the calling thread, counted by the kernel (perf tracepoint
// raw_syscalls:sys_enter, this thread only). available() is false when perf_event_open or the
// tracepoint is not there (then the figure is reported as -1 and the docs say how to check with
// strace).
class SyscallCounter {
 public:
  SyscallCounter();
  ~SyscallCounter();
  SyscallCounter(const SyscallCounter&) = delete;
  SyscallCounter& operator=(const SyscallCounter&) = delete;
  bool available() const noexcept { return fd_ >= 0; }
  const std::string& why_not() const noexcept { return why_; }
  void start() noexcept;
  // System calls since start(), the counter's own stop call excluded.
  uint64_t stop() noexcept;

 private:
  int fd_ = -1;
  uint64_t self_ = 0;  // sys_enter events caused by stop() itself (calibrated)
  std::string why_;
};

// ---- Histogram -------------------------------------------------------------------------------
// The shared log-linear histogram (rdmx/core/histogram.hpp), 1.6 % buckets.
using Histogram = rdmx::Histogram<7>;

// ---- Results -----------------------------------------------------------------------------------
struct Latency {
  uint64_t samples = 0;
  double min_ns = 0, p50_ns = 0, avg_ns = 0, stdev_ns = 0, p99_ns = 0, p999_ns = 0, max_ns = 0;
  // Per-op figures below this are below the timer's resolution (one stamp's cost, shared by the
  // ops of a burst): shown as "<resolution", not as a number that looks measured.
  double resolution_ns = 0;
  // The ops slower than kSlowFactor x p50 (or x the resolution, when p50 is below it): their
  // fraction of the samples and of the time (what pulls a mean away from the median).
  double slow_fraction = 0, slow_time_share = 0;
};
inline constexpr double kSlowFactor = 2;

struct Ratio {
  std::string peer;  // case name of the peer
  double value = 0;  // this / peer (time per op)
};

struct CaseResult {
  std::string name;    // "window_cache.single", "umr.map_unmap", ...
  std::string unit;    // what one op is ("get+put", "map+unmap", "I/O", ...)
  std::string role;    // "rdmx" or "peer"
  uint32_t pages = 0;  // pages per op (umr / io), 0 when not applicable
  uint64_t bytes = 0;
  uint32_t burst = 1;            // units per call
  uint32_t depth = 1;            // operations in flight (io_bw: 32)
  uint64_t ops = 0;              // units measured in the bulk phase (all rounds)
  std::vector<double> round_ns;  // per round: median chunk's mean ns per unit
  double ns = 0;                 // median over every chunk of every round: the case's figure
  double best_ns = 0;            // min of round_ns
  double cycles = 0;             // ns in cycles
  double ops_per_s = 0;
  double allocs_per_op = 0;
  double syscalls_per_op = -1;  // -1: not counted
  // Bandwidth at ns/op in MB/s as perftest counts them (2^20 bytes: ib_write_bw's "BW
  // average[MB/sec]"); -1 where the test does not report one.
  double bw_mb_s = -1;
  Latency lat;
  Histogram hist;  // per-op cycles of the stamped phase
  std::vector<Ratio> ratios;
  std::vector<std::pair<std::string, double>> extra;  // test-specific numbers
  std::string note;
};

struct Target {
  std::string name;
  double value = 0;
  double limit = 0;
  std::string cmp;  // "<=" or ">="
  bool met = false;
  std::string how;
};

struct TestResult {
  std::string test;
  bool bandwidth = false;  // the table has a bandwidth column (io_bw)
  std::vector<CaseResult> cases;
  std::vector<Target> targets;
  std::vector<std::string> notes;
  CaseResult* find(const std::string& name);
};

// ---- Runner ------------------------------------------------------------------------------------
struct RunConfig {
  uint64_t iterations = 200000;  // ops per case in the bulk phase (over all rounds)
  uint64_t stamped = 0;          // ops in the stamped phase (0: = min(iterations, 1M))
  uint64_t warmup = 10000;       // ops before every round
  uint32_t rounds = 7;
  double tsc_hz = 0;
  double timer_overhead = 0;  // cycles of one stamp (TSC read + store), subtracted
  double core_hz = 0;         // measure_core_hz: the measuring core's clock (0: unknown)
  SyscallCounter* syscalls = nullptr;
  bool callgrind = false;  // CALLGRIND_START/STOP_INSTRUMENTATION around the bulk loop
  // A one-line progress report on stderr at most every this many seconds (0: --quiet), printed
  // between timed phases only, never inside one.
  double progress_period_s = 10;
};

// One benchmarked operation. run(n) performs n calls and returns the TSC cycles they took;
// run_stamped(n, t) writes the TSC after every call into t[0..n-1] (t[-1] is the start).
class Bench {
 public:
  virtual ~Bench() = default;
  virtual uint64_t run(uint64_t n) noexcept = 0;
  virtual void run_stamped(uint64_t n, uint64_t* t) noexcept = 0;
  CaseResult meta;
};

void callgrind_start() noexcept;
void callgrind_stop() noexcept;
// Writes the counts collected so far to a callgrind.out.<pid>.<n> file named after `what`, and
// zeroes them: one dump per case and round.
void callgrind_dump(const std::string& what) noexcept;
bool on_valgrind() noexcept;

template <class Op>
class BenchOf final : public Bench {
 public:
  explicit BenchOf(Op op) : op_(std::move(op)) {}
  uint64_t run(uint64_t n) noexcept override {
    const uint64_t t0 = tsc();
    for (uint64_t i = 0; i < n; ++i) op_();
    return tsc() - t0;
  }
  void run_stamped(uint64_t n, uint64_t* t) noexcept override {
    t[-1] = tsc();
    for (uint64_t i = 0; i < n; ++i) {
      op_();
      t[i] = tsc();
    }
  }

 private:
  Op op_;
};

template <class Op>
std::unique_ptr<Bench> make_bench(CaseResult meta, Op op) {
  auto b = std::make_unique<BenchOf<Op>>(std::move(op));
  b->meta = std::move(meta);
  return b;
}

// Runs a group of benches interleaved (bulk rounds, then each one's stamped phase) and returns
// their results. `burst` in meta divides per-call figures into per-unit ones.
std::vector<CaseResult> run_group(const RunConfig& rc, std::vector<std::unique_ptr<Bench>>& g);

// Latency summary of raw per-op cycle samples (sorted in place); `resolution_cycles` is the
// timer's (the slow ops are those above kSlowFactor x the larger of p50 and it).
Latency summarize(std::vector<uint64_t>& cycles, double tsc_hz, double resolution_cycles);

// Measures the cost of one stamp (median of stamped empty ops, in cycles).
double measure_timer_overhead();

// The measuring core's clock while it runs, in Hz: a chain of dependent register adds (one per
// core cycle) timed with the TSC, the best of several tries. The TSC ticks at a fixed rate
// (tsc_hz) while the core may run faster or slower; this converts a time into core cycles, and
// an instruction count per op (callgrind) into instructions per cycle. Meaningless under
// valgrind.
double measure_core_hz(double tsc_hz);

// ratio helper: a.ratios += a.ns / b.ns (by_p50: a.lat.p50 / b.lat.p50, for round-trip tests
// whose means are dominated by the device thread's preemptions; the peer name gets "@p50").
void add_ratio(CaseResult& a, const CaseResult& b, bool by_p50 = false);

}  // namespace rdmx::perf
