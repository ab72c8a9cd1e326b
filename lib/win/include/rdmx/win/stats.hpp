// Per-core window statistics. Written only by the owning poll core (plain counters, no atomics);
// readers on other cores see slightly stale values, sum them per core as DPDK does.
#pragma once

#include <array>
#include <cstdint>

#include <rdmx/core/result.hpp>

namespace rdmx::win {

inline constexpr uint32_t kNumErrc = static_cast<uint32_t>(kNumErrcValues);

struct alignas(64) CoreStats {
  uint64_t maps = 0;           // successful maps
  uint64_t inline_maps = 0;    // ... with the translation list inline in the WQE
  uint64_t pointer_maps = 0;   // ... with the list in the window's KLM array (pointer mode)
  uint64_t unmaps = 0;         // invalidate UMRs posted by unmap()
  uint64_t fenced_unmaps = 0;  // ... that waited for a READ/WRITE/SEND still using the window
  uint64_t pages_mapped = 0;   // sum of pages over all maps
  uint64_t cache_hits = 0;     // map served from the core's cache without a refill
  uint64_t cache_misses = 0;   // cache was empty (a depot refill was tried)
  uint64_t depot_refills = 0;  // bursts taken from the depot
  uint64_t depot_flushes = 0;  // bursts given to the depot
  uint64_t windows_from_depot = 0;
  uint64_t windows_to_depot = 0;
  uint64_t exhausted = 0;              // map found no free window (kNoWindow)
  uint64_t klm_waits = 0;              // pointer-mode map found only windows whose KLM array was
                                       // still in use by the device (kBusy)
  uint64_t remote_invalidations = 0;   // windows freed by a peer's SEND_WITH_INV
  uint64_t stale_invalidations = 0;    // SEND_WITH_INV for a key no longer mapped here (ignored)
  uint64_t foreign_invalidations = 0;  // SEND_WITH_INV naming a window of another core
  uint64_t umr_completions = 0;        // map/unmap UMRs seen completed
  uint64_t umr_errors = 0;             // map/unmap UMRs completed in error (flushed included)
  uint64_t wqe_errors = 0;             // error completions of any kind
  uint64_t recoveries = 0;             // recover() calls that succeeded
  std::array<uint64_t, kNumErrc> errors{};  // rejected calls by Errc (bad input, no room, ...)
  std::array<uint64_t, 256> syndromes{};    // error completions by CQE syndrome

  uint64_t error_count(Errc e) const noexcept { return errors[static_cast<uint32_t>(e)]; }
};

}  // namespace rdmx::win
