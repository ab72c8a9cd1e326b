// rdmafwd statistics: snapshots of the lanes' counters (main and telemetry threads), and their
// text and JSON forms.
#pragma once

#include <string>
#include <vector>

#include "rdmafwd.hpp"

namespace rdmafwd {

struct LaneSnap {
  uint64_t ios = 0, bytes = 0, io_errors = 0, verify_fail = 0, rejected = 0, corrupted = 0;
  uint64_t maps = 0, unmaps = 0, pages_mapped = 0, cache_hits = 0, cache_misses = 0;
  uint64_t remote_inv = 0, umr_errors = 0, wqe_errors = 0, recoveries = 0, exhausted = 0;
  uint64_t issued = 0, abandoned = 0, faults_injected = 0, faults_recovered = 0, fault_ios = 0;
  uint64_t dead = 0;  // lanes that could not recover
  std::array<uint64_t, 256> synd{};
  HistSnapshot hist;

  void take(const Lane& l);
  void subtract(const LaneSnap& base);
  void merge(const LaneSnap& o);
  uint64_t errors() const noexcept;  // everything that makes the exit status 1
  // I/Os issued and neither completed nor counted as failed (fault, abandoned): always 0 unless
  // rdmafwd has a bug. 0 where nothing is issued (two-process server).
  uint64_t lost() const noexcept;
};

struct Snapshot {
  uint64_t tsc = 0;
  std::vector<LaneSnap> lanes;
  LaneSnap total() const;
};

Snapshot take_snapshot(const std::vector<std::unique_ptr<Lane>>& lanes);
// cur - base, lane by lane.
Snapshot diff(const Snapshot& cur, const Snapshot& base);

struct Labels {
  std::string fwd;
  std::string device;
  std::vector<unsigned> lcores;
};

// Final / `show stats` block. `seconds`: forwarding time the counters cover.
std::string format_text(const Snapshot& s, double seconds, const Labels& lb);
std::string format_json(const Snapshot& s, double seconds, const Labels& lb, const char* type,
                        int exit_status = -1);
// One periodic line per lane (+ total when more than one lane).
std::string format_period(const Snapshot& delta, double seconds, double at, const Labels& lb);

std::string syndrome_list(const LaneSnap& s, bool json);

}  // namespace rdmafwd
