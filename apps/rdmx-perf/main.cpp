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

const char kHelp[] = R"(usage: rdmx-perf [EAL args] -- --test NAME [options]

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
  all      every test above, in that order.

Options:
  --test NAME         test to run (required)
  --iterations N      operations per case in the timed (bulk) phase, over all rounds
                      (default 200000; use ~2000 under valgrind)
  --warmup N          operations before every round, discarded (default 10000)
  --rounds N          interleaved rounds per case (default 7); the figure is their median
  --stamped N         operations in the per-op stamped phase (default min(iterations, 1M))
  --pages LIST        page counts, e.g. 1,16,256 (umr sweep; umr_lat/io size; default depends)
  --batch N           umr: map+unmap pairs per doorbell (default 8)
  --device SPEC       device of umr_lat, io_lat and io_bw (default emu; the names of
                      doc/guides/embedding.md; umr always measures on emu-sink)
  --device-cpu N      CPU for the threaded emu's device thread (default: a CPU other than the
                      measuring lcore's)
  --json FILE|-       write every figure as JSON (- = stdout; the tables then go to stderr)
  --histogram FILE    write every case's latency histogram (log-linear buckets)
  --quiet             no progress line (by default a run prints one line on stderr every
                      10 s: elapsed time, case and round)
  --callgrind         wrap only the timed loops in CALLGRIND_START/STOP_INSTRUMENTATION (on by
                      itself under valgrind); see doc/guides/rdmx-perf.md
  --help              this text

Measurement: TSC (rte_rdtsc, rte_get_tsc_hz), measuring thread = EAL main lcore (pinned). The
configuration block says where everything ran. allocs/op: a malloc/calloc/realloc/memalign
interposer counts the measuring thread's heap allocations. syscalls/op: the kernel counts the
measuring thread's system calls (perf tracepoint raw_syscalls:sys_enter) around every round.
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

bool parse_u64(const char* s, uint64_t* v) {
  char* end = nullptr;
  errno = 0;
  unsigned long long x = std::strtoull(s, &end, 10);
  if (errno || !end || *end || end == s) return false;
  *v = x;
  return true;
}

bool parse_list(const std::string& s, std::vector<uint32_t>* out) {
  out->clear();
  size_t i = 0;
  while (i < s.size()) {
    size_t j = s.find(',', i);
    if (j == std::string::npos) j = s.size();
    uint64_t v;
    if (!parse_u64(s.substr(i, j - i).c_str(), &v) || v == 0 || v > 65536) return false;
    out->push_back(static_cast<uint32_t>(v));
    i = j + 1;
  }
  return !out->empty();
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
};

std::string test_names() {
  std::string s;
  for (const TestEntry& t : kTests) s += std::string(t.name) + ", ";
  return s + "all";
}

struct Options {
  std::string test, json_path, hist_path;
  bool callgrind = false;
  int device_cpu = -1;
};

// getopt_long over the application arguments, as the other tools (--opt VALUE and --opt=VALUE).
// Returns -1 to go on, else the exit status (0 after --help, 2 for a usage error).
int parse_options(const std::vector<std::string>& app, const std::vector<std::string>& eal,
                  Options& o, Ctx& ctx) {
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
    kQuiet,
    kProgressPeriod
  };
  static const option kOptions[] = {
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
      {"bad-rkey", no_argument, nullptr, kBadRkey},  // hidden: tests of the failure path
      {"quiet", no_argument, nullptr, kQuiet},
      {"progress-period", required_argument, nullptr, kProgressPeriod},  // hidden (tests): ms
      {nullptr, 0, nullptr, 0}};
  std::vector<std::string> args = {"rdmx-perf"};
  args.insert(args.end(), app.begin(), app.end());
  std::vector<char*> av;
  for (auto& x : args) av.push_back(x.data());
  av.push_back(nullptr);
  const int argc = static_cast<int>(av.size()) - 1;
  auto usage = [](const std::string& msg) {
    std::fprintf(stderr, "rdmx-perf: error: %s (see --help)\n", msg.c_str());
    return 2;
  };
  std::string bad;  // the first bad number's option
  auto num = [&](const char* what) {
    uint64_t v = 0;
    if (!parse_u64(optarg, &v) && bad.empty())
      bad = std::string("bad number '") + optarg + "' for --" + what;
    return v;
  };
  struct Reset {
    ~Reset() { rdmx::cli::getopt_reset(); }  // av dies with this function; the EAL parses next
  } reset;
  opterr = 0;
  optind = 1;
  int opt;
  while ((opt = getopt_long(argc, av.data(), ":h", kOptions, nullptr)) != -1) {
    switch (opt) {
      case 'h':
        std::fputs(kHelp, stdout);
        return 0;
      case kTest:
        o.test = optarg;
        break;
      case kIterations:
        ctx.rc.iterations = std::max<uint64_t>(1, num("iterations"));
        break;
      case kWarmup:
        ctx.rc.warmup = num("warmup");
        break;
      case kRounds:
        ctx.rc.rounds = static_cast<uint32_t>(std::max<uint64_t>(1, num("rounds")));
        break;
      case kStamped:
        ctx.rc.stamped = num("stamped");
        break;
      case kBatch:
        ctx.batch = static_cast<uint32_t>(std::max<uint64_t>(1, num("batch")));
        break;
      case kDevice:
        ctx.device = optarg;
        break;
      case kDeviceCpu:
        o.device_cpu = static_cast<int>(num("device-cpu"));
        break;
      case kPages:
        if (!parse_list(optarg, &ctx.pages)) return usage("bad --pages list");
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
      case kQuiet:
        ctx.rc.progress_period_s = 0;
        break;
      case kProgressPeriod:
        ctx.rc.progress_period_s = static_cast<double>(num("progress-period")) / 1000.0;
        break;
      case ':':
        return usage(std::string(av[optind - 1]) + " needs a value");
      default:
        return usage(std::string("unknown option '") + av[optind - 1] + "'");
    }
    if (!bad.empty()) return usage(bad);
  }
  if (optind < argc) return usage(std::string("unexpected argument '") + av[optind] + "'");
  // --help may also come before `--` when there are no EAL arguments.
  for (const auto& a : eal)
    if (a == "--help" || a == "-h") {
      std::fputs(kHelp, stdout);
      return 0;
    }
  const bool known =
      o.test == "all" || std::any_of(std::begin(kTests), std::end(kTests),
                                     [&](const TestEntry& t) { return o.test == t.name; });
  if (!known) {
    std::fprintf(stderr, "rdmx-perf: --test must be one of %s (see --help)\n",
                 test_names().c_str());
    return 2;
  }
  const int dev = check_device(ctx.device);
  return dev ? dev : -1;
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
  cfg("governor", kernel_flag("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor"));
}

// Writes the JSON report and the histograms asked for; false (after one line) when a file
// cannot be written.
bool write_outputs(const Options& o, const Report& rep) {
  auto open_or_complain = [](const std::string& path) {
    std::FILE* f = std::fopen(path.c_str(), "w");
    if (!f)
      std::fprintf(stderr, "rdmx-perf: cannot write %s: %s\n", path.c_str(), std::strerror(errno));
    return f;
  };
  if (!o.json_path.empty()) {
    std::FILE* f = o.json_path == "-" ? stdout : open_or_complain(o.json_path);
    if (!f) return false;
    write_json(f, rep);
    if (f != stdout) std::fclose(f);
  }
  if (!o.hist_path.empty()) {
    std::FILE* f = open_or_complain(o.hist_path);
    if (!f) return false;
    write_histograms(f, rep);
    std::fclose(f);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  auto split = rdmx::rt::split_args(argc, argv);
  if (!split) {
    std::fprintf(stderr, "rdmx-perf: %s\n", split.error().message.c_str());
    return 2;
  }
  Options o;
  Ctx ctx;
  if (int rc = parse_options(split->app, split->eal, o, ctx); rc >= 0) return rc;
  std::FILE* out = o.json_path == "-" ? stderr : stdout;

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
  // A device thread pinned to a CPU the process may not use would never run (the threaded
  // tests then waited forever): refuse it before anything starts.
  if (o.device_cpu >= 0 && std::find(cpus.begin(), cpus.end(), o.device_cpu) == cpus.end()) {
    std::string usable;
    for (int c : cpus) usable += (usable.empty() ? "" : ",") + std::to_string(c);
    std::fprintf(stderr,
                 "rdmx-perf: error: --device-cpu %d: not a CPU this process may run on (%s)\n",
                 o.device_cpu, usable.c_str());
    return 2;
  }
  auto eal = rdmx::rt::Eal::init(*split, eo);
  if (!eal) {
    std::fprintf(stderr, "rdmx-perf: EAL: %s\n", eal.error().message.c_str());
    return eal.error().code == rdmx::Errc::kInvalidArgument ? 2 : 1;
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

  // Placement: the measuring loop on the main lcore, the emu device thread on another CPU.
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
  describe_config(rep, ctx, o.test, threaded, *eal, cpus, sc);
  print_config(out, rep);

  int rc = 0;
  for (const TestEntry& t : kTests) {
    if (o.test != "all" && o.test != t.name) continue;
    try {
      TestResult r = t.run(ctx);
      print_test(out, r);
      rep.tests.push_back(std::move(r));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "rdmx-perf: test %s failed: %s\n", t.name, e.what());
      rc = 1;
    }
  }
  for (const auto& w : rep.warnings) std::fprintf(out, "WARNING: %s\n", w.c_str());
  return write_outputs(o, rep) ? rc : 1;
}
