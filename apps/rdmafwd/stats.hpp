// rdmafwd statistics: snapshots of the lanes' counters (main and telemetry threads), the one
// table of what is shown (stat_fields), and the text, JSON and telemetry forms made from it.
#pragma once

#include <string>
#include <vector>

#include "rdmafwd.hpp"

namespace rdmafwd {

struct LaneSnap {
  uint64_t ios = 0, bytes = 0, io_errors = 0, verify_fail = 0, rejected = 0, corrupted = 0;
  uint64_t issued = 0, abandoned = 0, faults_injected = 0, faults_recovered = 0, fault_ios = 0;
  uint64_t dead = 0;  // lanes that could not recover
  // Remote accesses the lane's QPs refused as responders (a bad or foreign rkey, another PD, out
  // of bounds): the peer's doing, so not counted in errors(). 0 on a device that does not count.
  uint64_t refused = 0;
  // Client requests the server refused for breaking the protocol (engines/peer_checks.hpp; its
  // client is then dropped): the peer's doing too, not in errors().
  uint64_t refused_requests = 0;
  // rpc: calls the server answered NFS3ERR_BADHANDLE (the peer's doing, not in errors()), and
  // replies the client handed on before their windows were invalid (in errors()).
  uint64_t bad_handles = 0, early_replies = 0;
  uint64_t local_invalidations = 0;  // rpc client: chunk windows it invalidated itself
  // rpc server: calls that waited for their slot's previous reply to be sent (not an error).
  uint64_t calls_waited = 0;
  // Gauges (the lane's state when the snapshot was taken; not subtracted by diff()): I/Os issued
  // and neither completed nor counted as failed (fault, abandoned). While the lane runs they are
  // in flight; once its drain ended they are lost (always 0 unless rdmafwd has a bug). 0 where
  // nothing is issued (two-process server).
  uint64_t in_flight = 0, lost = 0;
  // The library's window counters of the lane's PollCores, summed (rdmx/win/stats.hpp).
  win::CoreCounts win;
  HistSnapshot hist;

  void take(const Lane& l);
  void subtract(const LaneSnap& base);
  void merge(const LaneSnap& o);
  uint64_t errors() const noexcept;  // everything that makes the exit status 1
};

struct Snapshot {
  uint64_t tsc = 0;
  std::vector<LaneSnap> lanes;
  LaneSnap total() const;
};

Snapshot take_snapshot(const std::vector<std::unique_ptr<Lane>>& lanes);
// cur - base, lane by lane (counters; gauges stay cur's).
Snapshot diff(const Snapshot& cur, const Snapshot& base);

struct Labels {
  std::string fwd;
  std::string device;
  std::vector<unsigned> lcores;
  // What the byte counters count: "moved" (payload carried by the device), "mapped" (umr mode:
  // bytes made reachable through windows, nothing moved), "posted" (emu-sink: nothing moved).
  std::string bytes_kind = "moved";
  std::string since = "start";  // "start" or "clear stats"
};

// How a statistic is read and shown.
enum class StatKind {
  kCounter,  // events since the base; JSON and telemetry print a rate too when per_s is set
  kGauge,    // state now (in flight, lost)
  kBytes,    // a counter of bytes (text: human units)
  kRatio,    // derived 0..1 (text: percent)
  kLatency,  // TSC cycles (JSON: microseconds, telemetry: nanoseconds, text: microseconds)
};

// One row of the statistics table. Text output, JSON and DPDK telemetry all iterate this table.
struct StatField {
  const char* json;       // JSON pointer inside a lane object ("/errors/io")
  const char* per_s;      // JSON pointer of its rate, or nullptr
  const char* telemetry;  // key in /rdmafwd/stats, or nullptr
  const char* text;       // label in the text block, or nullptr
  const char* group;      // text line: "io", "windows", "latency", "errors", "faults"
  StatKind kind;
  uint64_t (*u)(const LaneSnap&);  // integer rows (counters, gauges, bytes, latency cycles)
  double (*d)(const LaneSnap&);    // derived rows (ratios, mean and stdev in cycles)
  double value(const LaneSnap& s) const { return u ? static_cast<double>(u(s)) : d(s); }
};
const std::vector<StatField>& stat_fields();

// Final / `show stats` block. `seconds`: forwarding time the counters cover.
std::string format_text(const Snapshot& s, double seconds, const Labels& lb);
// `excused`: the total's errors a reconnect excused (App::excused_errors), as errors.excused:
// errors.total - errors.excused are the errors the exit status counts.
std::string format_json(const Snapshot& s, double seconds, const Labels& lb, const char* type,
                        int exit_status = -1, uint64_t excused = 0);
// One periodic line per lane (+ total when more than one lane).
std::string format_period(const Snapshot& delta, double seconds, double at, const Labels& lb);

std::string syndrome_list(const LaneSnap& s, bool json);

}  // namespace rdmafwd
