// rdmafwd's own DPDK telemetry commands (dpdk-telemetry.py): /rdmafwd/stats (I/Os, latency,
// errors and the window counters per lane, as the final statistics show them), /rdmafwd/config,
// /rdmafwd/windows. The window library registers /rdmx/cores and /rdmx/stats itself, for any
// process that links it (lib/win/stats.cpp). Callbacks run on the telemetry thread and only read
// lock-free counters (and the last window census, taken by the main lcore while no lane runs,
// under a mutex).
#include <rte_telemetry.h>

#include <cinttypes>
#include <cstring>

#include "app.hpp"

namespace rdmafwd {
namespace {

// The rows of the statistics table that have a telemetry key (stats.cpp: stat_fields).
void add_lane(rte_tel_data* d, const LaneSnap& s, double secs) {
  const double ns_per_cycle = 1e9 / static_cast<double>(rte_get_tsc_hz());
  for (const StatField& f : stat_fields()) {
    if (!f.telemetry) continue;
    const double v = f.value(s);
    if (f.kind == StatKind::kLatency)
      rte_tel_data_add_dict_u64(d, f.telemetry, static_cast<uint64_t>(v * ns_per_cycle));
    else
      rte_tel_data_add_dict_u64(d, f.telemetry, f.u ? f.u(s) : static_cast<uint64_t>(v));
    if (f.per_s) {
      const std::string key = std::string(f.telemetry) + "_per_s";
      rte_tel_data_add_dict_u64(d, key.c_str(), secs > 0 ? static_cast<uint64_t>(v / secs) : 0);
    }
  }
}

int cmd_stats(const char*, const char* params, rte_tel_data* d) {
  App& a = app();
  if (!a.published.load(std::memory_order_acquire) || !a.tb) return -1;
  const Snapshot s = a.stats();
  const double secs = a.seconds();
  rte_tel_data_start_dict(d);
  // Optional parameter: a lane number.
  if (params && *params) {
    char* end = nullptr;
    const unsigned long i = std::strtoul(params, &end, 10);
    if (*end || i >= s.lanes.size()) return -1;
    add_lane(d, s.lanes[i], secs);
    return 0;
  }
  add_lane(d, s.total(), secs);
  Labels lb;
  {
    std::lock_guard<std::mutex> g(a.mu);  // the prompt's `set` and `clear stats` write under it
    lb = a.labels();
  }
  rte_tel_data_add_dict_string(d, "bytes_kind", lb.bytes_kind.c_str());
  rte_tel_data_add_dict_string(d, "since", lb.since.c_str());
  rte_tel_data_add_dict_u64(d, "lanes", s.lanes.size());
  rte_tel_data_add_dict_u64(d, "running", a.running ? 1 : 0);
  return 0;
}

int cmd_config(const char*, const char*, rte_tel_data* d) {
  App& a = app();
  if (!a.published.load(std::memory_order_acquire)) return -1;
  std::lock_guard<std::mutex> g(a.mu);  // the prompt's `set` commands write prm under it
  rte_tel_data_start_dict(d);
  rte_tel_data_add_dict_string(d, "fwd", a.prm.fwd.c_str());
  rte_tel_data_add_dict_string(d, "device", a.prm.device.c_str());
  rte_tel_data_add_dict_string(d, "role", role_name(a.prm.role));
  rte_tel_data_add_dict_u64(d, "lanes", a.lcores.size());
  rte_tel_data_add_dict_u64(d, "pages_per_io", a.prm.pages_per_io);
  rte_tel_data_add_dict_u64(d, "page_size", a.prm.page_size);
  rte_tel_data_add_dict_u64(d, "max_pages", a.prm.max_pages);
  rte_tel_data_add_dict_u64(d, "io_depth", a.prm.io_depth);
  rte_tel_data_add_dict_u64(d, "burst", a.prm.burst);
  rte_tel_data_add_dict_u64(d, "windows_per_core", a.prm.windows_per_core);
  rte_tel_data_add_dict_u64(d, "verify", verifies(a.prm) ? 1 : 0);  // what runs
  rte_tel_data_add_dict_u64(d, "running", a.running ? 1 : 0);
  return 0;
}

// The census of the last time no lane ran (it cannot be taken while cores run).
int cmd_windows(const char*, const char*, rte_tel_data* d) {
  App& a = app();
  if (!a.published.load(std::memory_order_acquire)) return -1;
  rte_tel_data_start_dict(d);
  std::lock_guard<std::mutex> g(a.mu);
  for (const Testbed::PoolCensus& pc : a.census) {
    rte_tel_data* c = rte_tel_data_alloc();
    if (!c) return -1;
    rte_tel_data_start_dict(c);
    rte_tel_data_add_dict_u64(c, "ok", pc.ok ? 1 : 0);
    rte_tel_data_add_dict_u64(c, "total", pc.c.total);
    rte_tel_data_add_dict_u64(c, "cache", pc.c.cache);
    rte_tel_data_add_dict_u64(c, "unmapping", pc.c.unmapping);
    rte_tel_data_add_dict_u64(c, "depot", pc.c.depot);
    rte_tel_data_add_dict_u64(c, "mapped", pc.c.mapped);
    rte_tel_data_add_dict_u64(c, "dirty", pc.c.dirty);
    rte_tel_data_add_dict_container(d, ("pool_" + pc.pool).c_str(), c, 0);
  }
  rte_tel_data_add_dict_u64(d, "invariant_ok", a.census_ok ? 1 : 0);
  rte_tel_data_add_dict_u64(d, "taken_while_stopped", 1);
  rte_tel_data_add_dict_u64(d, "running", a.running ? 1 : 0);
  return 0;
}

}  // namespace

void register_telemetry() {
  App& a = app();
  rte_telemetry_register_cmd("/rdmafwd/stats", cmd_stats,
                             "rdmafwd I/O, window and latency statistics. Parameters: [lane]");
  rte_telemetry_register_cmd("/rdmafwd/config", cmd_config, "rdmafwd configuration");
  rte_telemetry_register_cmd("/rdmafwd/windows", cmd_windows,
                             "Window census (cache/unmapping/depot/mapped) of the last stop");
  a.telemetry_path = std::string(rte_eal_get_runtime_dir()) + "/dpdk_telemetry.v2";
}

}  // namespace rdmafwd
