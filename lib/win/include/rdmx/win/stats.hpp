// Per-core window statistics, described once.
//
// CoreStats is written only by the owning poll core and read by any thread (the prompt, a
// statistics thread, DPDK telemetry). RDMX_CORE_COUNTERS below is the one description of its
// counters (name, kind, unit, help); the struct, its plain snapshot (CoreCounts), the table
// (core_stat_table: name, offset, kind, unit, help), the xstats-style iteration, the C API and
// the /rdmx/stats telemetry command are all made from it, as DPDK's ethdev describes its basic
// stats once in a name/offset table (rte_ethdev.c eth_dev_stats_strings) and mempool its
// per-lcore stats in one struct (rte_mempool.h rte_mempool_debug_stats).
//
// Reading from another thread: every counter is a single-writer atomic. The writer adds with a
// relaxed load and a release store (no lock prefix: a plain load, add, store on x86, where a
// release store is a plain mov); a reader loads with acquire. Why not a seqcount: it would cost
// two more stores per hot-path call (map, unmap, poll) and make a reader spin while its core
// works, and it only gives a cut across all counters if every hot call brackets all of its
// updates. What readers need are the relations between counters, and those hold without it:
// CoreStats declares a counter after the counters of the events that come before its own (an
// unmap after the map it undoes, a UMR completion after its post), snapshot() reads them last
// to first, and each acquire load sees everything the writer did before the release store it
// reads. So a snapshot never shows an effect without its cause (unmaps + remote invalidations
// <= maps, umr_completions <= UMRs posted), each value is one the writer stored, and two
// snapshots taken in turn never go backwards. A snapshot of a core that stopped (its lcore
// joined) is exact.
//
// Compile-out: meson -Dstats=false (RDMX_STATS 0) turns every counter into a no-op that reads 0,
// as DPDK's RTE_LIBRTE_MEMPOOL_STATS does for the mempool's, except the AlwaysStat ones: `maps`
// and `mw_binds` (the key generator numbers its draws with them) and `umr_completions`.
// kStatsEnabled says which build this is; core_stat_table() lists only the counters that count.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <span>

#include <rdmx/core/counter.hpp>
#include <rdmx/core/result.hpp>

#ifndef RDMX_STATS
#define RDMX_STATS 1
#endif

namespace rdmx::win {

inline constexpr uint32_t kNumErrc = static_cast<uint32_t>(kNumErrcValues);
inline constexpr bool kStatsEnabled = RDMX_STATS != 0;
// What the library itself was built with: equal to kStatsEnabled in a program compiled with the
// library's flags (pkg-config --cflags rdmx-cpp carries -DRDMX_STATS=0 from a -Dstats=false build).
bool library_stats_enabled() noexcept;

// A counter with one writer (its poll core): rdmx::SingleWriter with release stores and acquire
// loads (the snapshot's order, above). kAlways: counts even with -Dstats=false.
template <bool kAlways>
class StatCounter {
 public:
  static constexpr bool kCounts = kAlways || kStatsEnabled;
  // Writer (owning core) only. Hot path.
  void add(uint64_t d) noexcept {
    if constexpr (kCounts) v_.add(d);
  }
  StatCounter& operator+=(uint64_t d) noexcept {
    add(d);
    return *this;
  }
  StatCounter& operator++() noexcept {
    add(1);
    return *this;
  }
  // Any thread.
  uint64_t get() const noexcept {
    if constexpr (kCounts)
      return v_.get();
    else
      return 0;
  }
  operator uint64_t() const noexcept { return get(); }  // NOLINT: reads as the number it is

 private:
  SingleWriter<std::memory_order_release, std::memory_order_acquire> v_;
};
using Stat = StatCounter<false>;
// Never compiled out: maps and mw_binds number the key generator's draws; umr_completions is how
// a caller that posts UMRs without waiting on each learns how many completed (rdmafwd's umr).
using AlwaysStat = StatCounter<true>;

enum class StatKind : uint8_t {
  kCounter,  // events since the core was created; readers subtract a base for a period
  kGauge,    // a level now (not subtracted)
};

// The scalar counters of CoreStats, in declaration order: X(name, type, kind, unit, help).
// Each is declared after the counters of the events that precede its own (see above).
#define RDMX_CORE_COUNTERS(X)                                                                   \
  X(maps, AlwaysStat, kCounter, "maps", "successful maps")                                      \
  X(inline_maps, Stat, kCounter, "maps", "... with the translation list inline in the WQE")     \
  X(pointer_maps, Stat, kCounter, "maps",                                                       \
    "... with the list in the window's KLM array (pointer mode)")                               \
  X(unmaps, Stat, kCounter, "unmaps", "invalidate UMRs posted by unmap()")                      \
  X(fenced_unmaps, Stat, kCounter, "unmaps",                                                    \
    "... that waited for a READ/WRITE/SEND still using the window")                             \
  X(pages_mapped, Stat, kCounter, "pages",                                                      \
    "sum of pages over all maps (interleaved: length in pages, rounded up)")                    \
  X(cache_hits, Stat, kCounter, "maps", "map served from the core's cache without a refill")    \
  X(cache_misses, Stat, kCounter, "maps", "cache was empty (a depot refill was tried)")         \
  X(depot_refills, Stat, kCounter, "bursts", "bursts taken from the depot")                     \
  X(depot_flushes, Stat, kCounter, "bursts", "bursts given to the depot")                       \
  X(windows_from_depot, Stat, kCounter, "windows", "windows taken from the depot")              \
  X(windows_to_depot, Stat, kCounter, "windows", "windows given to the depot")                  \
  X(exhausted, Stat, kCounter, "maps", "map found no free window (kNoWindow)")                  \
  X(klm_waits, Stat, kCounter, "maps",                                                          \
    "pointer-mode map found only windows whose KLM array the device still reads")               \
  X(remote_invalidations, Stat, kCounter, "windows", "windows freed by a peer's SEND_WITH_INV") \
  X(stale_invalidations, Stat, kCounter, "messages",                                            \
    "SEND_WITH_INV for a key no longer mapped here (ignored)")                                  \
  X(foreign_invalidations, Stat, kCounter, "messages",                                          \
    "SEND_WITH_INV naming a window of another core")                                            \
  X(umr_completions, AlwaysStat, kCounter, "UMRs", "map/unmap UMRs seen completed")             \
  X(umr_errors, Stat, kCounter, "UMRs", "map/unmap UMRs completed in error (flushed included)") \
  X(wqe_errors, Stat, kCounter, "completions", "error completions of any kind")                 \
  X(recoveries, Stat, kCounter, "calls", "recover() calls that succeeded")                      \
  X(mw_binds, AlwaysStat, kCounter, "binds", "type-2 memory window binds posted by bind_mw()")  \
  X(mw_invalidates, Stat, kCounter, "invalidates",                                              \
    "memory window invalidates posted by invalidate_mw()")                                      \
  X(mw_remote_invalidations, Stat, kCounter, "windows",                                         \
    "memory windows freed by a peer's SEND_WITH_INV")

struct alignas(64) CoreStats {
#define RDMX_CORE_COUNTER_FIELD(name, type, kind, unit, help) type name;
  RDMX_CORE_COUNTERS(RDMX_CORE_COUNTER_FIELD)
#undef RDMX_CORE_COUNTER_FIELD
  std::array<Stat, kNumErrc> errors{};  // rejected calls by Errc (bad input, no room, ...)
  std::array<Stat, 256> syndromes{};    // error completions by CQE syndrome

  uint64_t error_count(Errc e) const noexcept {
    return errors[static_cast<uint32_t>(e)].get();
  }
};

// A plain copy of a core's counters (any thread), summed over cores, subtracted for a period.
struct CoreCounts {
#define RDMX_CORE_COUNT_FIELD(name, type, kind, unit, help) uint64_t name = 0;
  RDMX_CORE_COUNTERS(RDMX_CORE_COUNT_FIELD)
#undef RDMX_CORE_COUNT_FIELD
  std::array<uint64_t, kNumErrc> errors{};
  std::array<uint64_t, 256> syndromes{};

  uint64_t error_count(Errc e) const noexcept {
    return errors[static_cast<uint32_t>(e)];
  }
  uint64_t rejected() const noexcept;  // sum of errors[]
  CoreCounts& operator+=(const CoreCounts& o) noexcept;
  // Counters only (gauges keep their value): this - base.
  CoreCounts& operator-=(const CoreCounts& base) noexcept;
};

// Any thread. Reads every counter of `s` (last to first, acquire: see the top of this file).
CoreCounts snapshot(const CoreStats& s) noexcept;

// One row of the table: a scalar of CoreCounts.
struct StatDesc {
  const char* name;  // snake_case, as in CoreStats, the C API and telemetry
  uint32_t offset;   // of the uint64_t in CoreCounts
  StatKind kind;
  const char* unit;
  const char* help;
  uint64_t value(const CoreCounts& c) const noexcept {
    return *reinterpret_cast<const uint64_t*>(reinterpret_cast<const char*>(&c) + offset);
  }
};

// The scalar counters that count in this build (all of them unless -Dstats=false), in
// declaration order. Static storage; any thread.
std::span<const StatDesc> core_stat_table() noexcept;

// xstats-style (rte_eth_xstats_get_names + rte_eth_xstats_get in one): the scalars of the
// table, then "rejected_<errname>" for every Errc and "syndrome_<name>" for every CQE syndrome
// with a non-zero count, in that order. Writes min(n, total) entries to out and returns the
// total (call with n = 0 to size the array). Names are static strings. Any thread.
struct NamedValue {
  const char* name;
  uint64_t value;
};
size_t xstats(const CoreCounts& c, NamedValue* out, size_t n) noexcept;
// The most xstats() can return.
inline constexpr size_t kMaxXstats = 64 + kNumErrc + 256;

}  // namespace rdmx::win
