#include <rdmx/rt/eal.hpp>

#include <fcntl.h>
#include <getopt.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <sstream>
#include <vector>

#include <rdmx/core/log.hpp>
#include <rdmx/rt/dpdk.hpp>

#include <rte_log.h>

namespace rdmx::rt {

namespace {

std::atomic<bool> g_eal_used{false};  // rte_eal_init was called (successfully or not)

bool parse_u64(std::string_view s, uint64_t* out) {
  if (s.empty()) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  *out = v;
  return true;
}

uint64_t read_u64_file(const std::filesystem::path& p) {
  std::ifstream f(p);
  uint64_t v = 0;
  if (f >> v) return v;
  return 0;
}

// The value of option `name` if present ("--file-prefix=x" or "--file-prefix x").
bool option_value(const std::vector<std::string>& args, std::string_view name, std::string* out) {
  for (size_t i = 0; i < args.size(); ++i) {
    std::string_view a = args[i];
    if (a == name) {
      if (i + 1 < args.size()) *out = args[i + 1];
      return true;
    }
    if (a.size() > name.size() && a.substr(0, name.size()) == name && a[name.size()] == '=') {
      *out = std::string(a.substr(name.size() + 1));
      return true;
    }
  }
  return false;
}

}  // namespace

Result<EalArgs> split_args(int argc, const char* const* argv) {
  if (argc < 1 || argv == nullptr || argv[0] == nullptr) {
    return make_error(Errc::kInvalidArgument, "split_args: argc must be >= 1 with argv[0] set");
  }
  EalArgs out;
  out.prog = argv[0];
  bool app = false;
  for (int i = 1; i < argc; ++i) {
    if (argv[i] == nullptr) {
      return make_error(Errc::kInvalidArgument,
                        "split_args: argv[" + std::to_string(i) + "] is null before argc");
    }
    std::string_view a = argv[i];
    if (!app && a == "--") {
      app = true;
      continue;
    }
    (app ? out.app : out.eal).emplace_back(a);
  }
  return out;
}

bool HugepageInfo::any_free() const noexcept {
  if (meminfo_free > 0) return true;
  for (const auto& s : sizes) {
    if (s.free > 0) return true;
  }
  return false;
}

HugepageInfo detect_hugepages(const std::string& meminfo_path, const std::string& sysfs_dir) {
  HugepageInfo hp;
  std::ifstream mi(meminfo_path);
  std::string line;
  while (std::getline(mi, line)) {
    constexpr std::string_view kKey = "HugePages_Free:";
    if (line.rfind(kKey, 0) == 0) {
      std::string_view rest = std::string_view(line).substr(kKey.size());
      while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
      uint64_t v = 0;
      if (parse_u64(rest, &v)) hp.meminfo_free = v;
    }
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(sysfs_dir, ec)) {
    std::string name = e.path().filename().string();  // hugepages-2048kB
    constexpr std::string_view kPre = "hugepages-";
    if (name.rfind(kPre, 0) != 0 || name.size() < kPre.size() + 3) continue;
    std::string_view num = std::string_view(name).substr(kPre.size());
    if (num.substr(num.size() - 2) != "kB") continue;
    HugepageSize s;
    if (!parse_u64(num.substr(0, num.size() - 2), &s.size_kb)) continue;
    s.total = read_u64_file(e.path() / "nr_hugepages");
    s.free = read_u64_file(e.path() / "free_hugepages");
    hp.sizes.push_back(s);
  }
  return hp;
}

bool has_option(const std::vector<std::string>& args, std::string_view name) noexcept {
  bool is_short = name.size() == 2 && name[0] == '-' && name[1] != '-';
  for (const auto& s : args) {
    std::string_view a = s;
    if (a == name) return true;
    if (a.size() > name.size() && a.substr(0, name.size()) == name) {
      if (is_short) return true;               // -m256
      if (a[name.size()] == '=') return true;  // --socket-mem=...
    }
  }
  return false;
}

Result<EalPlan> plan_eal_args(const std::vector<std::string>& eal, const EalOptions& opts,
                              const HugepageInfo& hp, int pid) {
  EalPlan plan;
  plan.argv = eal;
  const bool user_no_huge = has_option(eal, "--no-huge");
  const bool user_in_memory = has_option(eal, "--in-memory");
  const bool user_mem = has_option(eal, "-m") || has_option(eal, "--socket-mem");

  if (user_no_huge && user_in_memory) {
    return make_error(Errc::kInvalidArgument,
                      "--no-huge cannot be combined with --in-memory in DPDK 22.11 (it "
                      "rejects the pair as 'legacy-mem'); drop --in-memory: with --no-huge the "
                      "memory is already private to the process (add --no-shconf to also skip "
                      "the shared config files)");
  }
  plan.no_huge = user_no_huge;
  if (!user_no_huge && !user_mem && opts.auto_no_huge && !hp.any_free()) {
    plan.argv.emplace_back("--no-huge");
    plan.argv.emplace_back("-m");
    plan.argv.push_back(std::to_string(opts.no_huge_mem_mb));
    plan.no_huge = true;
    plan.notices.push_back(
        "no free hugepages (HugePages_Free is 0): starting EAL with --no-huge -m " +
        std::to_string(opts.no_huge_mem_mb) +
        " (plain 4 KiB pages; reserve hugepages, e.g. dpdk-hugepages.py -r 1G, to use them)");
    if (user_in_memory) {
      std::erase(plan.argv, std::string("--in-memory"));
      plan.argv.emplace_back("--no-shconf");
      plan.notices.push_back(
          "--in-memory replaced by --no-shconf: DPDK 22.11 refuses --in-memory with --no-huge");
    }
  }
  if (opts.no_pci && !has_option(plan.argv, "--no-pci")) {
    plan.argv.emplace_back("--no-pci");
  }
  std::string prefix;
  if (option_value(eal, "--file-prefix", &prefix)) {
    plan.file_prefix = prefix;
  } else if (!opts.file_prefix.empty() || opts.unique_file_prefix) {
    prefix = opts.file_prefix.empty() ? std::string("rdmx") : opts.file_prefix;
    if (opts.unique_file_prefix) prefix += "-" + std::to_string(pid);
    plan.argv.push_back("--file-prefix=" + prefix);
    plan.file_prefix = prefix;
    plan.owns_runtime_dir = opts.unique_file_prefix;
  }
  return plan;
}

namespace {

// A process killed outright (SIGKILL, a crash) cannot remove its per-process runtime directory
// (PREFIX-PID beside ours). The next start removes those whose process is gone: kill(pid, 0)
// failing with ESRCH. A live process with that pid, ours or another's, keeps its directory.
void sweep_stale_runtime_dirs(const std::string& own_dir) {
  namespace fs = std::filesystem;
  const fs::path own(own_dir);
  const std::string name = own.filename().string();
  const size_t dash = name.rfind('-');
  if (dash == std::string::npos) return;
  const std::string stem = name.substr(0, dash + 1);
  std::error_code ec;
  unsigned removed = 0;
  for (const auto& e : fs::directory_iterator(own.parent_path(), ec)) {
    const std::string n = e.path().filename().string();
    if (n == name || n.size() <= stem.size() || n.compare(0, stem.size(), stem) != 0) continue;
    const std::string digits = n.substr(stem.size());
    if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 9) continue;
    const pid_t pid = static_cast<pid_t>(std::stol(digits));
    if (pid <= 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    std::error_code rm;
    fs::remove_all(e.path(), rm);
    removed += !rm;
  }
  if (removed)
    RDMX_LOG_INFO("EAL: removed %u runtime director%s left by processes that no longer exist (%s*)",
                  removed, removed == 1 ? "y" : "ies", (own.parent_path() / stem).c_str());
}

}  // namespace

struct Eal::State {
  EalPlan plan;
  std::vector<std::string> storage;  // argv strings handed to rte_eal_init
  std::vector<char*> argv;
  std::string runtime_dir;
};

Eal::Eal(std::unique_ptr<State> s) noexcept : s_(std::move(s)) {}
Eal::Eal(Eal&&) noexcept = default;
Eal& Eal::operator=(Eal&& o) noexcept {
  if (this != &o) {
    release();
    s_ = std::move(o.s_);
  }
  return *this;
}

namespace {

// rdmx's log lines through DPDK's logging once the EAL runs: log type "rdmx.lib", registered
// with rte_log_register_type_and_pick_level so that an EAL `--log-level=rdmx.*:LEVEL` given on
// the command line applies (lib/eal/common/eal_common_log.c). The lines keep rdmx's own format.
int g_logtype = -1;

uint32_t rte_level(LogLevel l) noexcept {
  switch (l) {
    case LogLevel::kError:
      return RTE_LOG_ERR;
    case LogLevel::kWarn:
      return RTE_LOG_WARNING;
    case LogLevel::kInfo:
      return RTE_LOG_INFO;
    case LogLevel::kDebug:
      break;
  }
  return RTE_LOG_DEBUG;
}

bool dpdk_log_enabled(LogLevel l) noexcept {
  return rte_log_can_log(static_cast<uint32_t>(g_logtype), rte_level(l));
}

void dpdk_log_write(LogLevel l, const char* line) noexcept {
  static const char* const kNames[] = {"ERR", "WARN", "INFO", "DEBUG"};
  rte_log(rte_level(l), static_cast<uint32_t>(g_logtype), "rdmx %s: %s\n",
          kNames[static_cast<int>(l)], line);
}

const LogSink kDpdkLogSink{dpdk_log_enabled, dpdk_log_write};

void route_log_through_dpdk() {
  if (g_logtype < 0) g_logtype = rte_log_register_type_and_pick_level("rdmx.lib", RTE_LOG_INFO);
  if (g_logtype >= 0) set_log_sink(&kDpdkLogSink);
}

}  // namespace

Eal::~Eal() {
  release();
}

void Eal::release() noexcept {
  if (!s_) return;
  set_log_sink(nullptr);  // back to plain stderr: DPDK's logging goes with the EAL
  int rc = rte_eal_cleanup();
  if (rc != 0) RDMX_LOG_WARN("rte_eal_cleanup failed: %s", rte_strerror(-rc));
  if (s_->plan.owns_runtime_dir && !s_->runtime_dir.empty()) {
    // Our own per-process prefix: nobody else can use this directory; do not leave it behind.
    std::error_code ec;
    std::filesystem::remove_all(s_->runtime_dir, ec);
  }
  s_.reset();
}

const EalPlan& Eal::plan() const noexcept {
  return s_->plan;
}

unsigned Eal::main_lcore() const noexcept {
  return rte_get_main_lcore();
}

std::vector<LcoreSlot> Eal::lcores() const {
  std::vector<LcoreSlot> out;
  auto slot = [](unsigned id, bool is_main) {
    LcoreSlot s;
    s.lcore_id = id;
    s.is_main = is_main;
    s.socket = static_cast<int>(rte_lcore_to_socket_id(id));
    rte_cpuset_t set = rte_lcore_cpuset(id);
    for (unsigned c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &set)) {
        s.cpu = c;
        break;
      }
    }
    return s;
  };
  out.push_back(slot(rte_get_main_lcore(), true));
  unsigned id = 0;
  RTE_LCORE_FOREACH_WORKER(id) {
    out.push_back(slot(id, false));
  }
  return out;
}

namespace {

// The process holding DPDK's config file of a runtime directory (the primary process of that
// --file-prefix keeps a write lock on it: lib/eal/linux/eal.c, rte_config_init), or 0.
pid_t config_lock_holder(const char* runtime_dir) {
  if (!runtime_dir || !*runtime_dir) return 0;
  const std::string path = std::string(runtime_dir) + "/config";
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return 0;
  struct flock fl {};
  fl.l_type = F_WRLCK;
  fl.l_whence = SEEK_SET;
  const pid_t holder = ::fcntl(fd, F_GETLK, &fl) == 0 && fl.l_type != F_UNLCK ? fl.l_pid : 0;
  ::close(fd);
  return holder;
}

// What rte_eal_init prints while it runs, held back: for one bad argument DPDK 22.11 prints its
// whole usage text on stdout (lib/eal/common/eal_common_options.c, eal_usage) between its log
// lines and a "FATAL" alert on stderr (lib/eal/linux/eal.c, rte_eal_init_alert). On success, or
// a failure other than a bad argument, it is passed on as it was; for a bad argument only DPDK's
// reason is kept, in the error. Setup path, main thread, before any lcore runs.
class HeldConsole {
 public:
  HeldConsole() {
    for (int i = 0; i < 2; ++i) {
      std::fflush(i ? stderr : stdout);
      fd_[i].tmp = ::memfd_create("rdmx-eal-console", MFD_CLOEXEC);
      fd_[i].saved = fd_[i].tmp >= 0 ? ::dup(i + 1) : -1;
      if (fd_[i].saved < 0 || ::dup2(fd_[i].tmp, i + 1) < 0) release(i, nullptr);
    }
  }
  ~HeldConsole() { pass_on(); }
  // Ends the hold; `text[i]` gets what was written to stdout (0) and stderr (1).
  void end(std::string text[2]) {
    for (int i = 0; i < 2; ++i) release(i, &text[i]);
  }
  // Ends the hold and writes what was held where it was going.
  void pass_on() {
    std::string text[2];
    end(text);
    for (int i = 0; i < 2; ++i)
      if (!text[i].empty()) (void)!::write(i + 1, text[i].data(), text[i].size());
  }

 private:
  void release(int i, std::string* text) {
    Fd& f = fd_[i];
    std::fflush(i ? stderr : stdout);
    if (f.saved >= 0) {
      (void)::dup2(f.saved, i + 1);
      ::close(f.saved);
    }
    if (f.tmp >= 0) {
      char buf[4096];
      ssize_t n;
      for (off_t at = 0; text && (n = ::pread(f.tmp, buf, sizeof buf, at)) > 0; at += n)
        text->append(buf, static_cast<size_t>(n));
      ::close(f.tmp);
    }
    f = Fd{};
  }
  struct Fd {
    int tmp = -1, saved = -1;
  } fd_[2];
};

// DPDK's reason for refusing the arguments, from what it printed on stderr: its lines without
// the "EAL: " prefix, less those that say nothing about the arguments (rte_eal_cpu_init's
// "Detected ..." lines come before the parse; the "Invalid 'command line' arguments." alert
// follows every refusal) and with getopt's "PROG: " prefix removed. A line said twice is kept
// once: DPDK 22.11 runs getopt_long over the arguments twice (eal_log_level_parse, then
// eal_parse_args, both in lib/eal/linux/eal.c), so getopt reports an unknown option twice.
std::string eal_reason(const std::string& err, const std::string& prog) {
  std::string out;
  std::vector<std::string> kept;
  std::istringstream in(err);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("EAL: ", 0) == 0) line.erase(0, 5);
    if (line.rfind(prog + ": ", 0) == 0) line.erase(0, prog.size() + 2);
    if (line.empty() || line.rfind("Detected ", 0) == 0 ||
        line.find("Invalid 'command line' arguments.") != std::string::npos ||
        std::find(kept.begin(), kept.end(), line) != kept.end())
      continue;
    out += (out.empty() ? "" : "; ") + line;
    kept.push_back(line);
  }
  return out.empty() ? "DPDK gave no reason" : out;
}

// rte_eal_init's failure as one message (the caller prefixes "EAL: " once). EINVAL (a bad EAL
// argument, `reason` says which) is a usage error. Some failures leave rte_errno at 0 (DPDK
// 22.11's "Cannot init config" among them): say what is known rather than strerror(0).
Error eal_init_error(int err, bool hugepages_ok, const std::string& reason) {
  if (err == EINVAL) return make_error(Errc::kInvalidArgument, "invalid EAL arguments: " + reason);
  std::string msg = "rte_eal_init failed";
  if (err != 0) msg += std::string(": ") + rte_strerror(err);
  if (const pid_t holder = config_lock_holder(rte_eal_get_runtime_dir()))
    msg += ": its --file-prefix is in use by process " + std::to_string(holder) +
           " (give each process its own --file-prefix)";
  else if (err == 0)
    msg += " (DPDK gave no error code; its last 'EAL:' line above says why)";
  if (!hugepages_ok) msg += " (no free hugepages: add --no-huge -m 256, or reserve hugepages)";
  return make_error(err == EALREADY ? Errc::kState : Errc::kDeviceError, std::move(msg));
}

}  // namespace

Result<Eal> Eal::init(const EalArgs& args, const EalOptions& opts) {
  HugepageInfo detected;
  const HugepageInfo* hp = opts.hugepages;
  if (hp == nullptr) {
    detected = detect_hugepages();
    hp = &detected;
  }
  auto plan = plan_eal_args(args.eal, opts, *hp, static_cast<int>(::getpid()));
  if (!plan) return std::move(plan).error();
  if (g_eal_used.exchange(true)) {
    return make_error(Errc::kState,
                      "rte_eal_init already ran in this process (DPDK allows one init per "
                      "process, and none after rte_eal_cleanup)");
  }
  auto st = std::make_unique<State>();
  st->plan = std::move(plan).value();
  st->storage.push_back(args.prog.empty() ? std::string("rdmx") : args.prog);
  for (const auto& a : st->plan.argv) st->storage.push_back(a);
  for (auto& s : st->storage) st->argv.push_back(s.data());
  st->argv.push_back(nullptr);
  std::string joined;
  for (const auto& s : st->storage) joined += " " + s;
  RDMX_LOG_DEBUG("EAL: rte_eal_init(%s )", joined.c_str());

  // Held unless the arguments ask DPDK to print something and exit (-h, --log-level=help).
  std::optional<HeldConsole> held;
  if (std::none_of(args.eal.begin(), args.eal.end(), [](const std::string& a) {
        return a == "-h" || (a.size() >= 4 && a.compare(a.size() - 4, 4, "help") == 0);
      }))
    held.emplace();
  const int old_opterr = opterr;
  opterr = 1;  // getopt names the option DPDK does not know (its own parse says nothing)
  rte_errno = 0;
  int rc = rte_eal_init(static_cast<int>(st->storage.size()), st->argv.data());
  opterr = old_opterr;
  if (rc < 0) {
    const int err = rte_errno;
    std::string text[2];
    if (held && err == EINVAL)
      held->end(text);  // DPDK's usage text (text[0]) is dropped
    else if (held)
      held->pass_on();
    return eal_init_error(err, st->plan.no_huge || hp->any_free(),
                          eal_reason(text[1], st->storage[0]));
  }
  if (held) held->pass_on();
  route_log_through_dpdk();
  st->runtime_dir = rte_eal_get_runtime_dir();
  if (st->plan.owns_runtime_dir) sweep_stale_runtime_dirs(st->runtime_dir);
  return Eal(std::move(st));
}

Eal* init_eal_once_for_tests(const std::vector<std::string>& extra) {
  static std::once_flag once;
  static Eal* eal = nullptr;
  std::call_once(once, [&] {
    EalArgs a;
    a.prog = "rdmx-test";
    a.eal = extra;
    EalOptions o;
    o.no_pci = true;
    o.file_prefix = "rdmx-test";
    o.unique_file_prefix = true;
    auto r = Eal::init(a, o);
    if (!r) {
      RDMX_LOG_ERR("%s", r.error().message.c_str());
      return;
    }
    // Lives until exit: static destructors run rte_eal_cleanup() after main() returns.
    static Eal kept = std::move(r).value();
    eal = &kept;
  });
  return eal;
}

}  // namespace rdmx::rt
