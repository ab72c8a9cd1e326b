// rdmx-perf: per-core latency and throughput microbenchmarks of rdmx, each figure beside a peer
// measured in the same run (doc/guides/rdmx-perf.md).
#include <getopt.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>
#include <vector>

#include <rdmx/core/cli.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/rt/dpdk.hpp>
#include <rdmx/rt/eal.hpp>

#include "harness.hpp"
#include "report.hpp"
#include "tests.hpp"

namespace {

using namespace rdmx::perf;

const char kHelp[] = R"(Usage: rdmx-perf [EAL args] -- --test NAME [options]

Per-core microbenchmarks of rdmx. Every rdmx figure is printed beside peers measured in the same
process run, as a ratio (this / peer, by median ns per op over interleaved rounds).

Tests (--test NAME):
  cache    window cache (rdmx::win::WindowCache) get+put on one core, no device work, single
           and burst of 32. Peers: rte_mempool get+put with the per-lcore cache (single,
           bulk 32), rte_ring SP/SC and MP/MC dequeue+enqueue (single, bulk 32).
  umr      map+unmap of a window on the emu SINK device (CPU-side cost only: window cache, key
           rotation, UMR WQE build, SQ bookkeeping, unsignaled batching, doorbell, completion
           processing; the sink completes WQEs in the doorbell call, so its cost is included).
           Sweeps --pages (default 1,2,4,...,256); windows hold 256 pages, so lists above the
           inline limit use pointer mode: both regimes are reported. Peers: rte_mempool get+put
           (same run), the syscall+pin floor for the same bytes, register-once (no per-I/O work).
  umr_lat  post-to-completion latency of one map (UMR) over the THREADED emu, device thread on
           the other CPU; then the unmap. Peer: syscall+pin floor for the same bytes.
  io_lat   per I/O: map -> RDMA WRITE (and READ) -> unmap over threaded emu, depth 1 (latency).
           Peer: register-once (the same WRITE/READ with the arena's key; no per-I/O
           registration: the insecure ceiling), and the syscall+pin floor.
  io_bw    the same at depth 32 (throughput).
  rpc_lat  per RPC: an NFSv3 WRITE (data in a Read chunk the server RDMA READs) or READ (a Write
           chunk the server RDMA WRITEs) over RPC-over-RDMA version 1, client and server each
           one poll core (both on the measuring lcore) over the threaded emu, depth 1. The
           client maps a window over the RPC's pages per call; the server replies with
           SEND_WITH_INV naming it; the RPC completes when the chunk is retired and the payload
           checked. Peer: register-once (the chunk is the client arena's own MR: no map, no
           invalidation, a plain SEND reply), alternated round by round.
  rpc_bw   the same at depth 32 (throughput).
  all      every test above, in that order.

Options (a bad one is one error line and exit status 2, before anything runs):
  --test NAME         test to run (required)
  --iterations N      operations per case in the timed (bulk) phase, over all rounds
                      (1..10^12, at least --rounds; default 200000; ~2000 under valgrind)
  --warmup N          operations before every round, discarded (0..10^12, default 10000)
  --rounds N          interleaved rounds per case (1..1000, default 7)
  --stamped N         operations in the per-op stamped phase (1..10^8; default
                      min(iterations, 1M))
  --pages LIST        page counts, each 1..256 (a window holds 256 pages), e.g. 1,16,256
                      (umr sweep; umr_lat, io and rpc sizes; default depends on the test)
  --batch N           umr: map+unmap pairs per doorbell (1..128, default 8)
  --device SPEC       device of umr_lat, io_* and rpc_*: an emulated one, named as
                      rdmafwd(1) --device names them (default emu, the emulated mlx5 with
                      its own device thread; emu-inline; emu:PROFILE); umr always measures
                      on emu-sink
  --device-cpu N      CPU for the threaded emu's device thread (default: a CPU other than the
                      measuring lcore's)
  --json FILE|-       write every figure as JSON (- = stdout; the tables then go to stderr);
                      the file is created before the run, so a bad path fails at once
  --histogram FILE    write every case's latency histogram (log-linear buckets; created
                      before the run too)
  --quiet             no progress line (by default a run prints one line on stderr every
                      10 s: elapsed time, case and round)
  --callgrind         wrap only the timed loops in CALLGRIND_START/STOP_INSTRUMENTATION (on by
                      itself under valgrind; one dump file per case and round)
  --help              this text

Measurement: TSC (rte_rdtsc, rte_get_tsc_hz), measuring thread = EAL main lcore (pinned). The
configuration block says where everything ran. allocs/op: a malloc/calloc/realloc/memalign
interposer counts the measuring thread's heap allocations. syscalls/op: the kernel counts the
measuring thread's system calls (perf tracepoint raw_syscalls:sys_enter) around every round.

Tables: ns/op is the median of ~2048-op chunks timed whole (the bulk phase); min..max are per
op, each op timed alone (the stamped phase); every column names its unit. When the means and
the median are more than 2x apart a note under the row says why. The method, the peers and
the JSON keys are described in the rdmx-perf guide (rdmx-perf.md, installed with rdmx's
guides).

Exit status:
  0    the run finished (a missed target is a figure, not a failure)
  1    a test failed, the EAL did not start, or --json/--histogram could not be written
  2    a usage error: one line "rdmx-perf: error: ..." on stderr, before anything runs
  3    --device names no device
)";

// The benchmarks drive an emulated device (statistics, pinned device threads): a name that names
// no device is exit 3 (one line); another existing device, exit 2.
int check_device(const std::string& spec) {
  auto s = rdmx::endpoint::parse_device_spec(spec, nullptr);
  if (s && s.value().backend == rdmx::endpoint::Backend::kMlx5) {
    auto d = rdmx::endpoint::open_device(spec);
    if (!d) s = std::move(d).error();
  }
  if (!s) {
    std::fprintf(stderr, "rdmx-perf: error: --device %s: %s\n", spec.c_str(),
                 s.error().message.c_str());
    return s.error().code == rdmx::Errc::kNoDevice ? 3 : 2;
  }
  if (s.value().backend != rdmx::endpoint::Backend::kEmu) {
    std::fprintf(stderr, "rdmx-perf: error: --device %s: the benchmarks run on emu devices\n",
                 spec.c_str());
    return 2;
  }
  return 0;
}

// A decimal number, digits only: strtoull would take "-1" as 2^64-1 and " 5" as 5.
bool parse_u64(const char* s, uint64_t* v) {
  if (*s < '0' || *s > '9') return false;
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(s, &end, 10);
  if (errno || !end || *end) return false;
  *v = x;
  return true;
}

// Windows are created for the largest page count asked for, up to this many pages (the default
// sweep's top; the guide's "windows hold 256").
constexpr uint64_t kMaxPages = 256;

// "--pages LIST": comma-separated page counts, each 1..kMaxPages. Empty on success, else why not.
std::string parse_pages(const std::string& s, std::vector<uint32_t>* out) {
  out->clear();
  size_t i = 0;
  while (i <= s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    const std::string item = s.substr(i, j - i);
    uint64_t v;
    if (!parse_u64(item.c_str(), &v))
      return "--pages '" + s + "': not a comma-separated list of page counts";
    if (v < 1 || v > kMaxPages)
      return "--pages " + item + ": out of range 1.." + std::to_string(kMaxPages) +
             " (a window holds " + std::to_string(kMaxPages) + " pages)";
    out->push_back(static_cast<uint32_t>(v));
    i = j + 1;
  }
  return {};
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown";
}

std::string kernel_flag(const char* path) {
  std::ifstream f(path);
  std::string s;
  std::getline(f, s);
  return s;
}

// The tests, in the order `--test all` runs them; adding one is one line here and one in kHelp.
struct TestEntry {
  const char* name;
  TestResult (*run)(Ctx&);
  bool threaded;  // drives the threaded emu (a device thread on its own CPU)
};
constexpr TestEntry kTests[] = {
    {"cache", test_cache, false},
    {"umr", test_umr, false},
    {"umr_lat", test_umr_lat, true},
    {"io_lat", [](Ctx& c) { return test_io(c, false); }, true},
    {"io_bw", [](Ctx& c) { return test_io(c, true); }, true},
    {"rpc_lat", [](Ctx& c) { return test_rpc(c, false); }, true},
    {"rpc_bw", [](Ctx& c) { return test_rpc(c, true); }, true},
};

std::string test_names() {
  std::string s;
  for (const TestEntry& t : kTests) s += std::string(t.name) + ", ";
  return s + "all";
}

struct Options {
  std::string test, json_path, hist_path;
  // Opened while the arguments are checked, before anything runs: a path that cannot be written
  // is a usage error at once, not results lost at the end of a long run.
  std::FILE* json = nullptr;
  std::FILE* hist = nullptr;
  bool callgrind = false;
  int device_cpu = -1;
};

enum : int {
  kTest = 256,
  kIterations,
  kWarmup,
  kRounds,
  kStamped,
  kBatch,
  kDevice,
  kDeviceCpu,
  kPages,
  kJson,
  kHistogram,
  kCallgrind,
  kBadRkey,
  kCorrupt,
  kQuiet,
  kProgressPeriod
};
const option kOptions[] = {
    {"help", no_argument, nullptr, 'h'},
    {"test", required_argument, nullptr, kTest},
    {"iterations", required_argument, nullptr, kIterations},
    {"warmup", required_argument, nullptr, kWarmup},
    {"rounds", required_argument, nullptr, kRounds},
    {"stamped", required_argument, nullptr, kStamped},
    {"batch", required_argument, nullptr, kBatch},
    {"device", required_argument, nullptr, kDevice},
    {"device-cpu", required_argument, nullptr, kDeviceCpu},
    {"pages", required_argument, nullptr, kPages},
    {"json", required_argument, nullptr, kJson},
    {"histogram", required_argument, nullptr, kHistogram},
    {"callgrind", no_argument, nullptr, kCallgrind},
    {"bad-rkey", no_argument, nullptr, kBadRkey},       // hidden: tests of the failure path
    {"corrupt", required_argument, nullptr, kCorrupt},  // hidden: rpc's data check (tests)
    {"quiet", no_argument, nullptr, kQuiet},
    {"progress-period", required_argument, nullptr, kProgressPeriod},  // hidden (tests): ms
    {nullptr, 0, nullptr, 0}};

// The ranges of the numeric options (the help text states them).
constexpr uint64_t kMaxIterations = 1000000000000;  // 10^12
constexpr uint64_t kMaxRounds = 1000;
constexpr uint64_t kMaxStamped = 100000000;  // 10^8 stamps: 800 MB per case of a group
// Every pair of a batch holds its window until the doorbell's completions are polled: more
// than half the test's 256 windows per doorbell and maps start failing for want of one.
constexpr uint64_t kMaxBatch = 128;

// rdmx-perf's own long option that `arg` spells (--name or --name=value), or nullptr. None of
// them is an EAL option (DPDK 22.11 lib/eal/common/eal_common_options.c, eal_long_options).
const char* own_option(const std::string& arg) {
  if (arg.rfind("--", 0) != 0) return nullptr;
  const std::string name = arg.substr(2, arg.find('=') - 2);
  for (const option& o : kOptions)
    if (o.name && name == o.name && o.val != 'h') return o.name;
  return nullptr;
}

int usage(const std::string& what) {
  return rdmx::cli::usage_error("rdmx-perf", what + " (see --help)");
}

// --help, or one of rdmx-perf's options, among the EAL's arguments: the exit status (0 after
// printing the help, 2 after a usage line), else -1.
int check_eal_args(const std::vector<std::string>& eal) {
  // --help may also come before `--` when there are no EAL arguments.
  for (const auto& a : eal)
    if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
  // rdmx-perf's options before `--` (or with no `--` at all) would go to the EAL, which knows
  // none of them: say where they belong.
  for (const auto& a : eal)
    if (const char* name = own_option(a))
      return usage(std::string("--") + name +
                   " is an rdmx-perf option: put it after '--', as in rdmx-perf [EAL args] -- "
                   "--test NAME");
  return -1;
}

// optarg as a number of [lo, hi] for --what; on a bad value `bad` (when still empty) says why.
uint64_t num_arg(const char* what, uint64_t lo, uint64_t hi, std::string& bad) {
  uint64_t v = lo;
  if (!bad.empty()) return v;
  if (!parse_u64(optarg, &v))
    bad = std::string("--") + what + " '" + optarg + "': not a number";
  else if (v < lo || v > hi)
    bad = std::string("--") + what + " " + optarg + ": out of range " + std::to_string(lo) + ".." +
          std::to_string(hi);
  return v;
}

// One option getopt_long returned (not 'h', '?' or ':'), into o and ctx; `bad` says why a value
// is refused.
void apply_option(int opt, Options& o, Ctx& ctx, std::string& bad) {
  switch (opt) {
    case kTest:
      o.test = optarg;
      break;
    case kIterations:
      ctx.rc.iterations = num_arg("iterations", 1, kMaxIterations, bad);
      break;
    case kWarmup:
      ctx.rc.warmup = num_arg("warmup", 0, kMaxIterations, bad);
      break;
    case kRounds:
      ctx.rc.rounds = static_cast<uint32_t>(num_arg("rounds", 1, kMaxRounds, bad));
      break;
    case kStamped:
      ctx.rc.stamped = num_arg("stamped", 1, kMaxStamped, bad);
      break;
    case kBatch:
      ctx.batch = static_cast<uint32_t>(num_arg("batch", 1, kMaxBatch, bad));
      break;
    case kDevice:
      ctx.device = optarg;
      break;
    case kDeviceCpu:
      o.device_cpu = static_cast<int>(num_arg("device-cpu", 0, CPU_SETSIZE - 1, bad));
      break;
    case kPages:
      if (bad.empty()) bad = parse_pages(optarg, &ctx.pages);
      break;
    case kJson:
      o.json_path = optarg;
      break;
    case kHistogram:
      o.hist_path = optarg;
      break;
    case kCallgrind:
      o.callgrind = true;
      break;
    case kBadRkey:
      ctx.bad_rkey = true;
      break;
    case kCorrupt:
      ctx.corrupt = optarg;
      if (ctx.corrupt != "write" && ctx.corrupt != "read")
        bad = "--corrupt '" + ctx.corrupt + "': write or read";
      break;
    case kQuiet:
      ctx.rc.progress_period_s = 0;
      break;
    case kProgressPeriod:
      ctx.rc.progress_period_s =
          static_cast<double>(num_arg("progress-period", 1, 3600000, bad)) / 1000.0;
      break;
  }
}

// The checks across options once all are read, then the output files opened: the exit status of
// the first problem, else -1.
int check_options(Options& o, const Ctx& ctx) {
  const bool known =
      o.test == "all" || std::any_of(std::begin(kTests), std::end(kTests),
                                     [&](const TestEntry& t) { return o.test == t.name; });
  if (o.test.empty()) return usage("--test NAME is required: one of " + test_names());
  if (!known) return usage("--test " + o.test + ": no such test (one of " + test_names() + ")");
  if (ctx.rc.iterations < ctx.rc.rounds)
    return usage("--iterations " + std::to_string(ctx.rc.iterations) + " is fewer than --rounds " +
                 std::to_string(ctx.rc.rounds) + ": every round needs at least one op");
  if (const int dev = check_device(ctx.device)) return dev;
  auto open_out = [](const std::string& path, const char* name, std::FILE** f) {
    if (path.empty()) return -1;
    if (path == "-" && std::string(name) == "json") {
      *f = stdout;
      return -1;
    }
    *f = std::fopen(path.c_str(), "w");
    if (*f) return -1;
    return usage(std::string("--") + name + " " + path + ": " + std::strerror(errno));
  };
  if (const int rc = open_out(o.json_path, "json", &o.json); rc >= 0) return rc;
  if (const int rc = open_out(o.hist_path, "histogram", &o.hist); rc >= 0) return rc;
  return -1;
}

// getopt_long over the application arguments, as the other tools (--opt VALUE and --opt=VALUE).
// Returns -1 to go on, else the exit status (0 after --help, 2 for a usage error, 3 for a device
// that does not exist): every error is one "rdmx-perf: error:" line, before the EAL starts.
int parse_options(const std::vector<std::string>& app, const std::vector<std::string>& eal,
                  Options& o, Ctx& ctx) {
  if (const int rc = check_eal_args(eal); rc >= 0) return rc;
  std::vector<std::string> args = {"rdmx-perf"};
  args.insert(args.end(), app.begin(), app.end());
  std::vector<char*> av;
  for (auto& x : args) av.push_back(x.data());
  av.push_back(nullptr);
  const int argc = static_cast<int>(av.size()) - 1;
  std::string bad;  // the first bad value
  struct Reset {
    ~Reset() { rdmx::cli::getopt_reset(); }  // av dies with this function; the EAL parses next
  } reset;
  opterr = 0;
  optind = 1;
  int opt;
  while ((opt = getopt_long(argc, av.data(), ":h", kOptions, nullptr)) != -1) {
    if (opt == 'h') {
      std::fputs(kHelp, stdout);
      return 0;
    }
    if (opt == '?' || opt == ':') return usage(rdmx::cli::getopt_problem(opt, av.data()));
    apply_option(opt, o, ctx, bad);
    if (!bad.empty()) return usage(bad);
  }
  if (optind < argc) return usage(std::string("unexpected argument '") + av[optind] + "'");
  return check_options(o, ctx);
}

std::vector<int> usable_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  sched_getaffinity(0, sizeof set, &set);
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

// The configuration block every report starts with: where everything ran, and how it was
// measured.
void describe_config(Report& rep, const Ctx& ctx, const std::string& test, bool threaded,
                     const rdmx::rt::Eal& eal, const std::vector<int>& cpus,
                     const SyscallCounter& sc) {
  using V = decltype(ConfigItem::value);
  auto cfg = [&](const char* k, V v) { rep.config.push_back(ConfigItem{k, std::move(v)}); };
  std::string eal_line;
  for (const auto& a : eal.plan().argv) eal_line += (eal_line.empty() ? "" : " ") + a;
  cfg("test", test);
  cfg("cpu_model", cpu_model());
  cfg("online_cpus", static_cast<double>(sysconf(_SC_NPROCESSORS_ONLN)));
  cfg("usable_cpus", static_cast<double>(cpus.size()));
  cfg("tsc_hz", rep.tsc_hz);
  cfg("core_hz", ctx.rc.core_hz);
  cfg("hugepages", !eal.no_huge());
  cfg("eal_args", eal_line);
  cfg("measure_lcore", static_cast<double>(rte_get_main_lcore()));
  cfg("measure_cpu", static_cast<double>(ctx.measure_cpu));
  cfg("device_thread_cpu", threaded ? static_cast<double>(ctx.device_cpu) : -1.0);
  cfg("cores_used", std::string("measuring loop on the EAL main lcore (pinned); ") +
                        (threaded ? "threaded emu device thread pinned to its own CPU"
                                  : "no device thread (sink/none)"));
  cfg("iterations", static_cast<double>(ctx.rc.iterations));
  cfg("warmup", static_cast<double>(ctx.rc.warmup));
  cfg("rounds", static_cast<double>(ctx.rc.rounds));
  cfg("timer_overhead_cycles", ctx.rc.timer_overhead);
  cfg("allocs_check", "malloc-family interposer (measuring thread)");
  cfg("syscalls_check", sc.available()
                            ? std::string("perf tracepoint raw_syscalls:sys_enter on the "
                                          "measuring thread, around every timed round")
                            : "unavailable (" + sc.why_not() + "): use strace -c -f");
  cfg("callgrind", ctx.rc.callgrind);
  // No cpufreq directory (a VM, or a kernel without it): say so rather than print nothing.
  const char* const kGovernor = "/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor";
  std::string governor = kernel_flag(kGovernor);
  cfg("governor", governor.empty() ? std::string("unknown (") + kGovernor +
                                         " not readable: no frequency scaling exposed, e.g. a VM)"
                                   : governor);
}

// Writes the JSON report and the histograms asked for, into the files parse_options opened;
// false (after one line) when a write fails.
bool write_outputs(const Options& o, const Report& rep) {
  bool ok = true;
  auto finish = [&](std::FILE* f, const std::string& path) {
    if (f == stdout) return;
    if (std::ferror(f) | std::fclose(f)) {
      std::fprintf(stderr, "rdmx-perf: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
      ok = false;
    }
  };
  if (o.json) {
    write_json(o.json, rep);
    finish(o.json, o.json_path);
  }
  if (o.hist) {
    write_histograms(o.hist, rep);
    finish(o.hist, o.hist_path);
  }
  return ok;
}

// A device thread pinned to a CPU the process may not use would never run (the threaded tests
// then waited forever): refuse it before anything starts. 2 after one line, else -1.
int check_device_cpu(int device_cpu, const std::vector<int>& cpus) {
  if (device_cpu < 0 || std::find(cpus.begin(), cpus.end(), device_cpu) != cpus.end()) return -1;
  std::string usable;
  for (int c : cpus) {
    if (!usable.empty()) usable += ',';
    usable += std::to_string(c);
  }
  std::fprintf(stderr,
               "rdmx-perf: error: --device-cpu %d: not a CPU this process may run on (%s)\n",
               device_cpu, usable.c_str());
  return 2;
}

// Placement: the measuring loop on the main lcore, the emu device thread on another CPU (the
// last usable one but the measuring one, unless --device-cpu says). Returns whether the tests
// run a device thread; warns when it shares the measuring CPU.
bool place_threads(const Options& o, const std::vector<int>& cpus, Ctx& ctx, Report& rep) {
  ctx.measure_cpu = current_affinity_single();
  ctx.device_cpu = o.device_cpu;
  if (ctx.device_cpu < 0) {
    for (int c : cpus)
      if (c != ctx.measure_cpu) ctx.device_cpu = c;
    if (ctx.device_cpu < 0) ctx.device_cpu = ctx.measure_cpu;
  }
  const bool threaded =
      o.test == "all" || std::any_of(std::begin(kTests), std::end(kTests), [&](const TestEntry& t) {
        return t.threaded && o.test == t.name;
      });
  if (threaded && ctx.device_cpu == ctx.measure_cpu)
    rep.warnings.push_back("the emu device thread shares CPU " + std::to_string(ctx.measure_cpu) +
                           " with the measuring lcore: threaded figures measure time sharing, "
                           "not the device");
  if (ctx.measure_cpu < 0)
    rep.warnings.push_back("the measuring lcore is not pinned to a single CPU");
  return threaded;
}

// Runs the tests `test` names (or all), printing each: 1 when one failed, else 0.
int run_tests(const std::string& test, Ctx& ctx, Report& rep, std::FILE* out) {
  int rc = 0;
  for (const TestEntry& t : kTests) {
    if (test != "all" && test != t.name) continue;
    try {
      TestResult r = t.run(ctx);
      print_test(out, r);
      rep.tests.push_back(std::move(r));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmx-perf: test %s failed: %s\n", t.name, e.what());
      rc = 1;
    }
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  auto split = rdmx::rt::split_args(argc, argv);
  if (!split) {
    return rdmx::cli::usage_error("rdmx-perf", split.error().message);
  }
  Options o;
  Ctx ctx;
  if (int rc = parse_options(split->app, split->eal, o, ctx); rc >= 0) return rc;
  std::FILE* out = o.json == stdout ? stderr : stdout;

  // EAL: no PCI (emu), a unique file prefix, no-hugepage fallback.
  rdmx::rt::EalOptions eo;
  eo.no_pci = true;
  eo.unique_file_prefix = true;
  // Which CPUs the process may use, before the EAL pins the main thread.
  const std::vector<int> cpus = usable_cpus();
  if (!rdmx::rt::has_option(split->eal, "-l") && !rdmx::rt::has_option(split->eal, "-c") &&
      !rdmx::rt::has_option(split->eal, "--lcores")) {
    // Measure on the last CPU we may use; the device thread goes on another one.
    split->eal.push_back("-l");
    split->eal.push_back(std::to_string(cpus.empty() ? 0 : cpus.back()));
  }
  if (const int rc = check_device_cpu(o.device_cpu, cpus); rc >= 0) return rc;
  auto eal = rdmx::rt::Eal::init(*split, eo);
  if (!eal) {
    // A bad EAL argument is a usage error like the others: one line (Eal::init holds back
    // DPDK's usage text and keeps its reason).
    if (eal.error().code == rdmx::Errc::kInvalidArgument)
      return rdmx::cli::usage_error("rdmx-perf", "EAL: " + eal.error().message);
    std::fprintf(stderr, "rdmx-perf: EAL: %s\n", eal.error().message.c_str());
    return rdmx::cli::kExitFailure;
  }
  for (const auto& n : eal->notices()) std::fprintf(stderr, "rdmx-perf: %s\n", n.c_str());

  Report rep;
  rep.tsc_hz = static_cast<double>(rte_get_tsc_hz());
  ctx.rc.tsc_hz = rep.tsc_hz;
  ctx.rc.timer_overhead = measure_timer_overhead();
  ctx.rc.core_hz = measure_core_hz(rep.tsc_hz);
  ctx.rc.callgrind = o.callgrind || on_valgrind();
  SyscallCounter sc;
  ctx.rc.syscalls = &sc;
  ctx.warnings = &rep.warnings;

  const bool threaded = place_threads(o, cpus, ctx, rep);
  describe_config(rep, ctx, o.test, threaded, *eal, cpus, sc);
  print_config(out, rep);

  const int rc = run_tests(o.test, ctx, rep, out);
  for (const auto& w : rep.warnings) std::fprintf(out, "WARNING: %s\n", w.c_str());
  return write_outputs(o, rep) ? rc : 1;
}
