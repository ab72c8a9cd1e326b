// Per-core window statistics. Written only by the owning poll core (plain counters, no atomics);
// readers on other cores see slightly stale values, sum them per core as DPDK does.
#pragma once

#include <array>
#include <cstdint>

#include <rdmx/core/result.hpp>

namespace rdmx::win {

inline constexpr uint32_t kNumErrc = static_cast<uint32_t>(kNumErrcValues);

// The scalar counters of CoreStats, in declaration order: X(name, meaning). One list, so that
// whatever shows them iterates it instead of typing the fields out again (the C API's
// rdmx_core_stats is filled from it, and fails to compile when it lacks one of them).
#define RDMX_CORE_COUNTERS(X)                                                                \
  X(maps, "successful maps")                                                                 \
  X(inline_maps, "... with the translation list inline in the WQE")                          \
  X(pointer_maps, "... with the list in the window's KLM array (pointer mode)")              \
  X(unmaps, "invalidate UMRs posted by unmap()")                                             \
  X(fenced_unmaps, "... that waited for a READ/WRITE/SEND still using the window")           \
  X(pages_mapped, "sum of pages over all maps")                                              \
  X(cache_hits, "map served from the core's cache without a refill")                         \
  X(cache_misses, "cache was empty (a depot refill was tried)")                              \
  X(depot_refills, "bursts taken from the depot")                                            \
  X(depot_flushes, "bursts given to the depot")                                              \
  X(windows_from_depot, "windows taken from the depot")                                      \
  X(windows_to_depot, "windows given to the depot")                                          \
  X(exhausted, "map found no free window (kNoWindow)")                                       \
  X(klm_waits, "pointer-mode map found only windows whose KLM array the device still reads") \
  X(remote_invalidations, "windows freed by a peer's SEND_WITH_INV")                         \
  X(stale_invalidations, "SEND_WITH_INV for a key no longer mapped here (ignored)")          \
  X(foreign_invalidations, "SEND_WITH_INV naming a window of another core")                  \
  X(umr_completions, "map/unmap UMRs seen completed")                                        \
  X(umr_errors, "map/unmap UMRs completed in error (flushed included)")                      \
  X(wqe_errors, "error completions of any kind")                                             \
  X(recoveries, "recover() calls that succeeded")                                            \
  X(mw_binds, "type-2 memory window binds posted by bind_mw()")                              \
  X(mw_invalidates, "memory window invalidates posted by invalidate_mw()")                   \
  X(mw_remote_invalidations, "memory windows freed by a peer's SEND_WITH_INV")

struct alignas(64) CoreStats {
#define RDMX_CORE_COUNTER_FIELD(name, meaning) uint64_t name = 0;
  RDMX_CORE_COUNTERS(RDMX_CORE_COUNTER_FIELD)
#undef RDMX_CORE_COUNTER_FIELD
  std::array<uint64_t, kNumErrc> errors{};  // rejected calls by Errc (bad input, no room, ...)
  std::array<uint64_t, 256> syndromes{};    // error completions by CQE syndrome

  uint64_t error_count(Errc e) const noexcept {
    return errors[static_cast<uint32_t>(e)];
  }
};

}  // namespace rdmx::win
