// rdmafwd fault handling on the poll lcore: QP error recovery and --fault-every (faults.cpp).
#pragma once

#include "rdmafwd.hpp"
#include "setup.hpp"

namespace rdmafwd {

// Some QP of the lane has seen an error completion.
bool lane_in_error(const Lane& l) noexcept;
// Start of a run: seeds the injector (first run) and schedules the first fault.
void fault_start(Lane& l) noexcept;
// Injects the next fault when its time has come; ends timed faults (counted as survived).
void fault_inject(Lane& l, Testbed& tb, uint64_t now) noexcept;
// After a QP error: drains (bounded), counts what did not complete, recovers both ends and
// restarts the engine. False when the lane could not be recovered (it is dead).
bool recover_lane(Lane& l, Testbed& tb);
// At stop, once idle: resolves a fault still pending. True when it recovered the lane (the
// engine must go idle again).
bool fault_settle(Lane& l, Testbed& tb);

}  // namespace rdmafwd
