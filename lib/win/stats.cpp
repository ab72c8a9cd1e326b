// Window statistics: the table, snapshots, xstats names, the process-wide registry of poll
// cores and the /rdmx/* DPDK telemetry commands over it.
#include <rte_common.h>
#include <rte_telemetry.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/win/stats.hpp>
#include <rdmx/win/stats_registry.hpp>

namespace rdmx::win {

// ---- the table -----------------------------------------------------------------------------
namespace {

#define RDMX_STAT_ROW(name_, type_, kind_, unit_, help_)                                       \
  StatDesc{#name_, static_cast<uint32_t>(offsetof(CoreCounts, name_)), StatKind::kind_, unit_, \
           help_},
constexpr StatDesc kAllRows[] = {RDMX_CORE_COUNTERS(RDMX_STAT_ROW)};
#undef RDMX_STAT_ROW

#define RDMX_STAT_COUNTS(name_, type_, kind_, unit_, help_) type_::kCounts,
constexpr bool kRowCounts[] = {RDMX_CORE_COUNTERS(RDMX_STAT_COUNTS)};
#undef RDMX_STAT_COUNTS

constexpr size_t kNumRows = std::size(kAllRows);
static_assert(kNumRows <= 64, "kMaxXstats leaves room for 64 scalars");

// The rows that count in this build (all of them unless -Dstats=false).
struct Table {
  StatDesc rows[kNumRows];
  size_t n = 0;
};
constexpr Table kTable = [] {
  Table t{};
  for (size_t i = 0; i < kNumRows; ++i)
    if (kRowCounts[i]) t.rows[t.n++] = kAllRows[i];
  return t;
}();

// Static names of the array entries: "rejected_<errc name>", "syndrome_<syndrome name>".
struct ArrayNames {
  std::string rejected[kNumErrc];
  std::string syndrome[256];
  ArrayNames() {
    for (uint32_t i = 0; i < kNumErrc; ++i)
      rejected[i] = "rejected_" + std::string(errc_name(static_cast<Errc>(i)));
    for (uint32_t i = 0; i < 256; ++i) {
      const std::string_view n = mlx5::prm::syndrome_name(static_cast<uint8_t>(i));
      char buf[32];
      std::snprintf(buf, sizeof buf, "0x%02x", i);
      syndrome[i] = "syndrome_" + (n == "unknown" ? std::string(buf) : std::string(n));
    }
    // DPDK telemetry refuses a dict name with a '-' in it (lib/telemetry/telemetry_data.c,
    // valid_name: rte_tel_data_add_dict_u64 fails and the entry is missing): '_' instead.
    for (std::string* v : {rejected, syndrome})
      for (size_t k = 0; k < (v == rejected ? kNumErrc : 256u); ++k)
        for (char& ch : v[k])
          if (ch == '-' || ch == ' ') ch = '_';
  }
};
// Never destroyed: DPDK's telemetry thread may still be answering a /rdmx/stats request while
// the process runs its exit-time destructors (there is no way to unregister a command).
const ArrayNames& array_names() {
  static const ArrayNames& n = *new ArrayNames;
  return n;
}

}  // namespace

bool library_stats_enabled() noexcept {
  return kStatsEnabled;
}

std::span<const StatDesc> core_stat_table() noexcept {
  return {kTable.rows, kTable.n};
}

CoreCounts snapshot(const CoreStats& s) noexcept {
  CoreCounts c;
  // Arrays first (their events follow the scalars'), then the scalars last to first.
  for (uint32_t i = 256; i-- > 0;) c.syndromes[i] = s.syndromes[i].get();
  for (uint32_t i = kNumErrc; i-- > 0;) c.errors[i] = s.errors[i].get();
    // clang-format off
#define RDMX_STAT_PTR(name_, type_, kind_, unit_, help_) +[](const CoreStats& x, CoreCounts& y) { y.name_ = x.name_.get(); },
  using Copy = void (*)(const CoreStats&, CoreCounts&);
  static constexpr Copy kCopy[] = {RDMX_CORE_COUNTERS(RDMX_STAT_PTR)};
#undef RDMX_STAT_PTR
  // clang-format on
  for (size_t i = std::size(kCopy); i-- > 0;) kCopy[i](s, c);
  return c;
}

uint64_t CoreCounts::rejected() const noexcept {
  uint64_t n = 0;
  for (uint64_t e : errors) n += e;
  return n;
}

CoreCounts& CoreCounts::operator+=(const CoreCounts& o) noexcept {
#define RDMX_STAT_ADD(name_, type_, kind_, unit_, help_) name_ += o.name_;
  RDMX_CORE_COUNTERS(RDMX_STAT_ADD)
#undef RDMX_STAT_ADD
  for (uint32_t i = 0; i < kNumErrc; ++i) errors[i] += o.errors[i];
  for (uint32_t i = 0; i < 256; ++i) syndromes[i] += o.syndromes[i];
  return *this;
}

CoreCounts& CoreCounts::operator-=(const CoreCounts& b) noexcept {
#define RDMX_STAT_SUB(name_, type_, kind_, unit_, help_) \
  if (StatKind::kind_ == StatKind::kCounter) name_ -= b.name_;
  RDMX_CORE_COUNTERS(RDMX_STAT_SUB)
#undef RDMX_STAT_SUB
  for (uint32_t i = 0; i < kNumErrc; ++i) errors[i] -= b.errors[i];
  for (uint32_t i = 0; i < 256; ++i) syndromes[i] -= b.syndromes[i];
  return *this;
}

size_t xstats(const CoreCounts& c, NamedValue* out, size_t n) noexcept {
  size_t k = 0;
  auto put = [&](const char* name, uint64_t v) {
    if (k < n) out[k] = {name, v};
    ++k;
  };
  for (const StatDesc& d : core_stat_table()) put(d.name, d.value(c));
  if (!kStatsEnabled) return k;
  const ArrayNames& an = array_names();
  for (uint32_t i = 0; i < kNumErrc; ++i) put(an.rejected[i].c_str(), c.errors[i]);
  for (uint32_t i = 0; i < 256; ++i)
    if (c.syndromes[i]) put(an.syndrome[i].c_str(), c.syndromes[i]);
  return k;
}

// ---- the registry ---------------------------------------------------------------------------
namespace {

struct Registry {
  std::mutex mu;
  struct Entry {
    uint32_t index;
    const CoreStats* stats;
  };
  std::vector<Entry> live;  // in index order
  uint32_t next = 0;
  CoreCounts retired;  // the cores that were destroyed
};
Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: telemetry may ask during exit
  return *r;
}

}  // namespace

uint32_t stats_register(const CoreStats* s) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  const uint32_t i = r.next++;
  r.live.push_back({i, s});
  return i;
}

void stats_unregister(uint32_t index) noexcept {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (size_t k = 0; k < r.live.size(); ++k) {
    if (r.live[k].index != index) continue;
    r.retired += snapshot(*r.live[k].stats);
    r.live.erase(r.live.begin() + static_cast<std::ptrdiff_t>(k));
    return;
  }
}

std::vector<uint32_t> stats_cores() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  std::vector<uint32_t> v;
  v.reserve(r.live.size());
  for (const auto& e : r.live) v.push_back(e.index);
  return v;
}

bool stats_of_core(uint32_t index, CoreCounts* out) {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  for (const auto& e : r.live)
    if (e.index == index) {
      *out = snapshot(*e.stats);
      return true;
    }
  return false;
}

CoreCounts stats_total() {
  Registry& r = registry();
  std::lock_guard<std::mutex> g(r.mu);
  CoreCounts t = r.retired;
  for (const auto& e : r.live) t += snapshot(*e.stats);
  return t;
}

// ---- DPDK telemetry ---------------------------------------------------------------------------
// Registered by a constructor, as DPDK's own libraries register theirs (lib/ethdev
// rte_ethdev_telemetry.c, RTE_INIT(ethdev_init_telemetry)): every process that links the window
// library has the commands, and rte_eal_init's telemetry socket serves them. The callbacks run
// on DPDK's telemetry thread: they take the registry's mutex (never the hot path's) and read
// the counters as any reader does.
namespace {

int tel_cores(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_array(d, RTE_TEL_U64_VAL);
  for (uint32_t i : stats_cores()) rte_tel_data_add_array_u64(d, i);
  return 0;
}

int tel_stats(const char*, const char* params, rte_tel_data* d) {
  CoreCounts c;
  if (params && *params) {
    char* end = nullptr;
    const unsigned long i = std::strtoul(params, &end, 10);
    if (*end || i > UINT32_MAX || !stats_of_core(static_cast<uint32_t>(i), &c)) return -1;
  } else {
    c = stats_total();
  }
  NamedValue v[kMaxXstats];
  const size_t n = xstats(c, v, kMaxXstats);
  rte_tel_data_start_dict(d);
  for (size_t i = 0; i < n && i < kMaxXstats; ++i)
    rte_tel_data_add_dict_u64(d, v[i].name, v[i].value);
  return 0;
}

int tel_stats_info(const char*, const char*, rte_tel_data* d) {
  rte_tel_data_start_dict(d);
  for (const StatDesc& s : core_stat_table()) {
    const std::string t = std::string(s.kind == StatKind::kGauge ? "gauge" : "counter") + ", " +
                          s.unit + ": " + s.help;
    rte_tel_data_add_dict_string(d, s.name, t.c_str());
  }
  rte_tel_data_add_dict_u64(d, "stats_enabled", kStatsEnabled ? 1 : 0);
  return 0;
}

}  // namespace

}  // namespace rdmx::win

RTE_INIT(rdmx_win_telemetry) {
  using namespace rdmx::win;
  rte_telemetry_register_cmd("/rdmx/cores", tel_cores,
                             "Poll cores of the window library (indices for /rdmx/stats)");
  rte_telemetry_register_cmd(
      "/rdmx/stats", tel_stats,
      "Window counters: of every poll core the process had, or of one. Parameters: [core]");
  rte_telemetry_register_cmd("/rdmx/stats_info", tel_stats_info,
                             "What each /rdmx/stats counter counts: kind, unit, meaning");
}
