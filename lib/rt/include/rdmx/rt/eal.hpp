// EAL start-up wrapper.
//
// rdmx programs take DPDK's command line: EAL arguments first, then `--`, then the program's
// own arguments (`rdmafwd -l 0-1 --no-huge -- --mode=write`). split_args() cuts the command line
// there; plan_eal_args() decides the final EAL argument vector (pure, unit-tested); Eal::init()
// runs rte_eal_init() with it and owns the EAL until the Eal object dies (rte_eal_cleanup()).
//
// Defaults that work on small machines: when no hugepage is free and the user chose no memory
// option, the plan adds `--no-huge -m 256` and says so in a notice line (never a silent
// fallback). DPDK 22.11 refuses `--no-huge` together with `--in-memory`; the plan explains that
// instead of letting rte_eal_init print its usage text.
//
// Threads: everything here is setup path and must be called from the main thread (the thread
// that becomes the EAL main lcore), before any lcore is launched. Nothing here is hot-path.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <rdmx/core/result.hpp>

namespace rdmx::rt {

// A command line cut at the first `--`.
struct EalArgs {
  std::string prog;              // argv[0] (passed to rte_eal_init as its argv[0])
  std::vector<std::string> eal;  // between argv[0] and `--` (all of them when there is no `--`)
  std::vector<std::string> app;  // after `--`
};

// Cuts argv at the first `--`. Fails on argc < 1 or a null argv entry.
Result<EalArgs> split_args(int argc, const char* const* argv);

// Hugepages the kernel has free right now.
struct HugepageSize {
  uint64_t size_kb = 0;
  uint64_t total = 0;
  uint64_t free = 0;
};
struct HugepageInfo {
  std::vector<HugepageSize> sizes;  // one per /sys/kernel/mm/hugepages/hugepages-<N>kB
  uint64_t meminfo_free = 0;        // HugePages_Free of /proc/meminfo (default size only)
  bool any_free() const noexcept;
};

// Reads /proc/meminfo and /sys/kernel/mm/hugepages (paths overridable for tests). Missing files
// count as "no hugepages"; never fails.
HugepageInfo detect_hugepages(const std::string& meminfo_path = "/proc/meminfo",
                              const std::string& sysfs_dir = "/sys/kernel/mm/hugepages");

struct EalOptions {
  // Add `--no-huge -m <no_huge_mem_mb>` when no hugepage is free and the user gave none of
  // --no-huge, -m, --socket-mem.
  bool auto_no_huge = true;
  unsigned no_huge_mem_mb = 256;
  // Add `--no-pci` (no PCI bus scan: right for the emulated device, and for dv, which opens the
  // NIC through verbs, not through a DPDK PCI driver).
  bool no_pci = false;
  // When the user gave no --file-prefix: use this one (empty: DPDK's default "rte").
  std::string file_prefix;
  // Append "-<pid>" to the prefix so concurrent processes (tests) never share a runtime dir;
  // the Eal then removes that runtime directory when it is destroyed.
  bool unique_file_prefix = false;
  // Hugepage state to plan with; detect_hugepages() when not set (tests inject one).
  const HugepageInfo* hugepages = nullptr;
};

// The argument vector rte_eal_init() will get (without argv[0]) and the notices explaining what
// was added or changed. Pure: no EAL, no I/O beyond what is in `hp`.
struct EalPlan {
  std::vector<std::string> argv;
  std::vector<std::string> notices;
  bool no_huge = false;     // the plan runs without hugepages
  std::string file_prefix;  // empty: DPDK's default
  bool owns_runtime_dir = false;
};
Result<EalPlan> plan_eal_args(const std::vector<std::string>& eal, const EalOptions& opts,
                              const HugepageInfo& hp, int pid);

// Whether `args` contains option `name` (as `name`, or `name=value` for long options, or
// `-mVALUE` for short ones).
bool has_option(const std::vector<std::string>& args, std::string_view name) noexcept;

// An lcore as the runtime sees it.
struct LcoreSlot {
  unsigned lcore_id = 0;
  unsigned cpu = 0;  // the first CPU of its cpuset
  int socket = 0;    // rte_lcore_to_socket_id
  bool is_main = false;
};

// Owns the EAL. Move-only. Destruction calls rte_eal_cleanup() (and removes an auto-generated
// runtime directory). The EAL can be initialised once per process: a second init() fails with
// Errc::kState, and so does an init() after a cleanup (DPDK does not support re-init).
class Eal {
 public:
  static Result<Eal> init(const EalArgs& args, const EalOptions& opts = {});

  Eal(Eal&&) noexcept;
  Eal& operator=(Eal&&) noexcept;
  Eal(const Eal&) = delete;
  Eal& operator=(const Eal&) = delete;
  ~Eal();

  const EalPlan& plan() const noexcept;
  // What init() decided for the user (e.g. --no-huge when no hugepage is free): the caller
  // shows them, once, in its own words and prefix; the library does not print them.
  const std::vector<std::string>& notices() const noexcept { return plan().notices; }
  bool no_huge() const noexcept { return plan().no_huge; }
  // Every enabled lcore, main first.
  std::vector<LcoreSlot> lcores() const;
  unsigned main_lcore() const noexcept;

 private:
  struct State;
  explicit Eal(std::unique_ptr<State> s) noexcept;
  void release() noexcept;
  std::unique_ptr<State> s_;
};

// Test helper: initialises the EAL at most once per process with `--no-huge -m 256 --no-pci`
// (the defaults of this file on a machine without hugepages) plus `extra` EAL arguments and a
// unique file prefix, and keeps it until exit. Later calls return the same Eal (their `extra`
// is ignored). Returns nullptr and logs when the EAL cannot start. Main thread only.
Eal* init_eal_once_for_tests(const std::vector<std::string>& extra = {});

}  // namespace rdmx::rt
