// Every poll core of the process, for the readers that do not own one: DPDK telemetry (/rdmx/cores,
// /rdmx/stats; lib/win/stats.cpp registers them for any process that links the library) and the
// C API's process-wide snapshot. Setup path: PollCore::create adds its CoreStats, ~PollCore takes
// them out (folding its last counts into the process's total). A mutex guards the list; the hot
// path never takes it.
#pragma once

#include <cstdint>
#include <vector>

#include <rdmx/win/stats.hpp>

namespace rdmx::win {

// A core's process-wide index (0, 1, ... in creation order; never reused).
uint32_t stats_register(const CoreStats* s);
void stats_unregister(uint32_t index) noexcept;
// The indices of the cores alive now.
std::vector<uint32_t> stats_cores();
// A snapshot of one live core; false when no live core has that index.
bool stats_of_core(uint32_t index, CoreCounts* out);
// Every core the process had: the live ones now plus the last counts of the destroyed ones.
CoreCounts stats_total();

}  // namespace rdmx::win
