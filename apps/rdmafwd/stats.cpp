// rdmafwd statistics: latency histogram math, snapshots, text and JSON output.
#include "stats.hpp"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include <nlohmann/json.hpp>

#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/rt/dpdk.hpp>

namespace rdmafwd {

// ---- histogram ---------------------------------------------------------------------------------
uint64_t HistSnapshot::total() const noexcept {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

HistSummary HistSnapshot::summary() const noexcept {
  return summarize_hist<LatencyHist::Buckets>(counts.data(), min, max, sum);
}

void HistSnapshot::take(const LatencyHist& h) noexcept {
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) counts[b] = h.count(b);
  max = h.max();
  min = h.min();
  sum = h.sum();
}

void HistSnapshot::subtract(const HistSnapshot& base) noexcept {
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) counts[b] -= base.counts[b];
  sum -= base.sum;
  // The extremes cannot be un-merged. The all-time ones hold for the period only when they fell
  // in it: bound them by the lowest and highest bucket the period has samples in (exact when the
  // extreme was in the period, within the bucket's width otherwise), so that a `start` or
  // `clear stats` does not carry an earlier run's maximum into the next run's figures.
  uint32_t lo = LatencyHist::kBuckets, hi = 0;
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b)
    if (counts[b]) {
      if (lo == LatencyHist::kBuckets) lo = b;
      hi = b;
    }
  if (lo == LatencyHist::kBuckets) {
    max = 0;
    min = UINT64_MAX;
    return;
  }
  max = std::min(max, LatencyHist::Buckets::upper(hi) - 1);
  min = std::max(min, LatencyHist::Buckets::lower(lo));
}

void HistSnapshot::merge(const HistSnapshot& o) noexcept {
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) counts[b] += o.counts[b];
  max = std::max(max, o.max);
  min = std::min(min, o.min);
  sum += o.sum;
}

// ---- snapshots ---------------------------------------------------------------------------------
void LaneSnap::take(const Lane& l) {
  const LaneCounters& c = l.st;
  // Read first: once it says the drain ended (acquire), every counter the lane wrote is visible.
  const bool running = c.active.load(std::memory_order_acquire);
  ios = c.ios.get();
  bytes = c.bytes.get();
  io_errors = c.io_errors.get();
  verify_fail = c.verify_fail.get();
  rejected = c.rejected.get();
  corrupted = c.corrupted.get();
  issued = c.issued.get();
  abandoned = c.abandoned.get();
  faults_injected = c.faults_injected.get();
  faults_recovered = c.faults_recovered.get();
  fault_ios = c.fault_ios.get();
  dead = c.failed.get();
  refused_requests = c.refused_requests.get();
  bad_handles = c.bad_handles.get();
  early_replies = c.early_replies.get();
  local_invalidations = c.local_invalidations.get();
  calls_waited = c.calls_waited.get();
  refused = 0;
  win = {};
  for (auto [dev, k] : {std::pair{l.dev_a, l.c}, std::pair{l.dev_a, l.s}, std::pair{l.dev_b, l.p},
                        std::pair{l.dev_b, l.r}}) {
    if (!k) continue;
    win += win::snapshot(k->stats());
    if (dev)
      if (auto n = dev->refused_remote_accesses(k->qp_handle())) refused += *n;
  }
  // After the drain, whatever is unaccounted is lost; before, it is in flight. st.issued is
  // published every 64 loop iterations, so ios may run ahead of it for a moment: clamp.
  const uint64_t accounted = ios + fault_ios + abandoned;
  const uint64_t open = issued > accounted ? issued - accounted : 0;
  in_flight = running ? open : 0;
  lost = running ? 0 : open;
  hist.take(c.lat);
}

// clang-format off
#define RDMAFWD_FIELDS(X)                                                                       \
  X(ios) X(bytes) X(io_errors) X(verify_fail) X(rejected) X(corrupted) X(issued) X(abandoned)  \
  X(faults_injected) X(faults_recovered) X(fault_ios) X(dead) X(refused) X(refused_requests)   \
  X(bad_handles) X(early_replies) X(local_invalidations) X(calls_waited)
// clang-format on

#define RDMAFWD_GAUGES(X) X(in_flight) X(lost)

void LaneSnap::subtract(const LaneSnap& b) {
#define X(f) f -= b.f;
  RDMAFWD_FIELDS(X)
#undef X
  win -= b.win;
  hist.subtract(b.hist);
}

void LaneSnap::merge(const LaneSnap& o) {
#define X(f) f += o.f;
  RDMAFWD_FIELDS(X)
  RDMAFWD_GAUGES(X)
#undef X
  win += o.win;
  hist.merge(o.hist);
}

// Error completions (wqe_errors, by syndrome) are not errors by themselves any more: the lane
// recovers from them; the I/Os they failed are fault_ios. What is left: I/Os that failed
// otherwise, abandoned ones, lanes that could not recover, verification, refused posts.
uint64_t LaneSnap::errors() const noexcept {
  return io_errors + verify_fail + rejected + abandoned + dead + lost + early_replies;
}

LaneSnap Snapshot::total() const {
  LaneSnap t;
  for (const LaneSnap& l : lanes) t.merge(l);
  return t;
}

Snapshot take_snapshot(const std::vector<std::unique_ptr<Lane>>& lanes) {
  Snapshot s;
  s.tsc = rte_rdtsc();
  s.lanes.resize(lanes.size());
  for (size_t i = 0; i < lanes.size(); ++i) s.lanes[i].take(*lanes[i]);
  return s;
}

Snapshot diff(const Snapshot& cur, const Snapshot& base) {
  Snapshot d = cur;
  for (size_t i = 0; i < d.lanes.size() && i < base.lanes.size(); ++i)
    d.lanes[i].subtract(base.lanes[i]);
  return d;
}

// ---- the table --------------------------------------------------------------------------------
namespace {

using K = StatKind;
#define U(expr) [](const LaneSnap& s) -> uint64_t { return expr; }, nullptr
#define D(expr) nullptr, [](const LaneSnap& s) -> double { return expr; }

// NaN when the lane mapped nothing: text "-", JSON null (there is no rate of nothing).
double hit_rate(const LaneSnap& s) {
  const uint64_t n = s.win.cache_hits + s.win.cache_misses;
  return n ? static_cast<double>(s.win.cache_hits) / static_cast<double>(n)
           : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

const std::vector<StatField>& stat_fields() {
  static const std::vector<StatField> t = {
      // json path, rate path, telemetry key, text label, text line, kind, value
      {"/ios", "/ios_per_s", "ios", "I/Os", "io", K::kCounter, U(s.ios)},
      {"/in_flight", nullptr, "in_flight", "in flight", "io", K::kGauge, U(s.in_flight)},
      {"/bytes", "/bytes_per_s", "bytes", "bytes", "io", K::kBytes, U(s.bytes)},
      {"/maps", nullptr, "maps", "maps", "windows", K::kCounter, U(s.win.maps)},
      {"/unmaps", nullptr, "unmaps", "unmaps", "windows", K::kCounter, U(s.win.unmaps)},
      {"/remote_invalidations", nullptr, "remote_invalidations", "remote-invalidated", "windows",
       K::kCounter, U(s.win.remote_invalidations)},
      {"/local_invalidations", nullptr, "local_invalidations", "local-invalidated", "windows",
       K::kCounter, U(s.local_invalidations)},
      {"/pages_mapped", nullptr, "pages_mapped", "pages mapped", "windows", K::kCounter,
       U(s.win.pages_mapped)},
      {"/cache_hits", nullptr, "cache_hits", nullptr, "windows", K::kCounter, U(s.win.cache_hits)},
      {"/cache_misses", nullptr, "cache_misses", nullptr, "windows", K::kCounter,
       U(s.win.cache_misses)},
      {"/cache_hit_rate", nullptr, nullptr, "cache hit", "windows", K::kRatio, D(hit_rate(s))},
      {"/exhausted", nullptr, nullptr, nullptr, "windows", K::kCounter, U(s.win.exhausted)},
      {"/latency_us/count", nullptr, "latency_samples", nullptr, "latency", K::kCounter,
       U(s.hist.total())},
      {"/latency_us/min", nullptr, "latency_min_ns", "min", "latency", K::kLatency,
       U(s.hist.summary().min)},
      {"/latency_us/avg", nullptr, "latency_avg_ns", "avg", "latency", K::kLatency,
       D(s.hist.summary().mean)},
      {"/latency_us/stdev", nullptr, "latency_stdev_ns", "stdev", "latency", K::kLatency,
       D(s.hist.summary().stdev)},
      {"/latency_us/p50", nullptr, "latency_p50_ns", "p50", "latency", K::kLatency,
       U(s.hist.summary().p50)},
      {"/latency_us/p99", nullptr, "latency_p99_ns", "p99", "latency", K::kLatency,
       U(s.hist.summary().p99)},
      {"/latency_us/p99_9", nullptr, "latency_p99_9_ns", "p99.9", "latency", K::kLatency,
       U(s.hist.summary().p999)},
      {"/latency_us/max", nullptr, "latency_max_ns", "max", "latency", K::kLatency,
       U(s.hist.summary().max)},
      {"/errors/total", nullptr, "errors", "total", "errors", K::kCounter, U(s.errors())},
      {"/errors/io", nullptr, nullptr, "I/O", "errors", K::kCounter, U(s.io_errors)},
      {"/errors/verify", nullptr, "verify_failures", "verify", "errors", K::kCounter,
       U(s.verify_fail)},
      {"/errors/rejected", nullptr, nullptr, "rejected", "errors", K::kCounter, U(s.rejected)},
      {"/errors/wqe", nullptr, "error_cqes", "error CQEs", "errors", K::kCounter,
       U(s.win.wqe_errors)},
      {"/errors/umr", nullptr, nullptr, "UMR", "errors", K::kCounter, U(s.win.umr_errors)},
      {"/errors/refused_remote", nullptr, "refused_remote_accesses", "refused remote", "errors",
       K::kCounter, U(s.refused)},
      {"/errors/refused_requests", nullptr, "refused_requests", "refused requests", "errors",
       K::kCounter, U(s.refused_requests)},
      {"/errors/bad_handles", nullptr, "bad_handles", "bad handles", "errors", K::kCounter,
       U(s.bad_handles)},
      {"/errors/early_replies", nullptr, "early_replies", "early replies", "errors", K::kCounter,
       U(s.early_replies)},
      {"/faults_recovered", nullptr, "faults_recovered", nullptr, "faults", K::kCounter,
       U(s.faults_recovered)},
      {"/faults/injected", nullptr, "faults_injected", "injected", "faults", K::kCounter,
       U(s.faults_injected)},
      {"/faults/recovered", nullptr, nullptr, "recovered", "faults", K::kCounter,
       U(s.faults_recovered)},
      {"/faults/failed_ios", nullptr, nullptr, "I/Os failed by faults", "faults", K::kCounter,
       U(s.fault_ios)},
      {"/faults/abandoned_ios", nullptr, "abandoned_ios", "abandoned", "faults", K::kCounter,
       U(s.abandoned)},
      {"/faults/lost_ios", nullptr, "lost_ios", "lost", "faults", K::kGauge, U(s.lost)},
      {"/faults/issued", nullptr, "issued", "issued", "faults", K::kCounter, U(s.issued)},
      {"/faults/unrecovered_lanes", nullptr, "unrecovered_lanes", "lanes not recovered", "faults",
       K::kCounter, U(s.dead)},
      {"/faults/core_recoveries", nullptr, nullptr, nullptr, "faults", K::kCounter,
       U(s.win.recoveries)},
      {"/corrupted", nullptr, nullptr, nullptr, "faults", K::kCounter, U(s.corrupted)},
      {"/calls_waited", nullptr, "calls_waited", nullptr, "io", K::kCounter, U(s.calls_waited)},
  };
  return t;
}
#undef U
#undef D

// ---- formatting --------------------------------------------------------------------------------
namespace {

double us(double cycles) {
  return cycles * 1e6 / static_cast<double>(rte_get_tsc_hz());
}

std::string human_bytes(double b) {
  const char* u[] = {"B", "KB", "MB", "GB", "TB"};
  int i = 0;
  while (b >= 1000.0 && i < 4) {
    b /= 1000.0;
    ++i;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f %s", b, u[i]);
  return buf;
}

double rate(double n, double s) {
  return s > 0 ? n / s : 0.0;
}

// One text row: "label value" in the unit its kind says.
std::string text_cell(const StatField& f, const LaneSnap& s, double secs, const Labels& lb) {
  const double v = f.value(s);
  char buf[160];
  switch (f.kind) {
    case StatKind::kCounter:
    case StatKind::kGauge:
      if (f.per_s)
        std::snprintf(buf, sizeof buf, "%s %.0f (%.0f/s)", f.text, v, rate(v, secs));
      else
        std::snprintf(buf, sizeof buf, "%s %.0f", f.text, v);
      break;
    case StatKind::kBytes:
      // Only bytes the device carried are a wire rate.
      if (lb.bytes_kind == "moved")
        std::snprintf(buf, sizeof buf, "%s moved %s (%s/s, %.2f Gbit/s)", f.text,
                      human_bytes(v).c_str(), human_bytes(rate(v, secs)).c_str(),
                      rate(v, secs) * 8 / 1e9);
      else
        std::snprintf(buf, sizeof buf, "%s %s %s (%s/s; no data moved)", f.text,
                      lb.bytes_kind.c_str(), human_bytes(v).c_str(),
                      human_bytes(rate(v, secs)).c_str());
      break;
    case StatKind::kRatio:
      if (std::isnan(v))
        std::snprintf(buf, sizeof buf, "%s -", f.text);
      else
        std::snprintf(buf, sizeof buf, "%s %.1f%%", f.text, 100.0 * v);
      break;
    case StatKind::kLatency:
      std::snprintf(buf, sizeof buf, "%s %.1f", f.text, us(v));
      break;
  }
  return buf;
}

void block(std::string& o, const std::string& title, const LaneSnap& s, double secs,
           const Labels& lb) {
  o += "  " + title + "\n";
  static const char* const kLines[][2] = {{"io", ""},
                                          {"windows", ""},
                                          {"latency", "latency us: "},
                                          {"errors", "errors: "},
                                          {"faults", "faults: "}};
  for (const auto& line : kLines) {
    const std::string group = line[0];
    if (group == "latency" && s.hist.total() == 0) {
      o += "    latency: -\n";
      continue;
    }
    std::string row = std::string("    ") + line[1];
    bool first = true;
    for (const StatField& f : stat_fields()) {
      if (!f.text || group != f.group) continue;
      row += (first ? "" : "  ") + text_cell(f, s, secs, lb);
      first = false;
    }
    if (group == "errors") row += "  by syndrome: " + syndrome_list(s, false);
    if (group == "faults" && s.dead) row += "  NOT RECOVERED";
    o += row + "\n";
  }
}

nlohmann::ordered_json json_lane(const LaneSnap& s, double secs) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const StatField& f : stat_fields()) {
    const nlohmann::ordered_json::json_pointer at(f.json);
    if (f.kind == StatKind::kLatency)
      j[at] = us(f.value(s));
    else if (f.u)
      j[at] = f.u(s);
    else
      j[at] = f.d(s);
    if (f.per_s) j[nlohmann::ordered_json::json_pointer(f.per_s)] = rate(f.value(s), secs);
  }
  nlohmann::ordered_json by = nlohmann::ordered_json::object();
  for (uint32_t i = 0; i < 256; ++i)
    if (s.win.syndromes[i])
      by[std::string(mlx5::prm::syndrome_name(static_cast<uint8_t>(i)))] = s.win.syndromes[i];
  j["errors"]["by_syndrome"] = std::move(by);
  return j;
}

}  // namespace

std::string syndrome_list(const LaneSnap& s, bool json) {
  if (json) return json_lane(s, 0)["errors"]["by_syndrome"].dump();
  std::string o;
  for (uint32_t i = 0; i < 256; ++i) {
    if (!s.win.syndromes[i]) continue;
    if (!o.empty()) o += ", ";
    o += std::string(mlx5::prm::syndrome_name(static_cast<uint8_t>(i))) + " " +
         std::to_string(s.win.syndromes[i]);
  }
  return o.empty() ? "none" : o;
}

std::string format_text(const Snapshot& s, double secs, const Labels& lb) {
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "---------------- rdmafwd statistics since %s: fwd %s on %s, %.2f s "
                "----------------\n",
                lb.since.c_str(), lb.fwd.c_str(), lb.device.c_str(), secs);
  o += buf;
  for (size_t i = 0; i < s.lanes.size(); ++i) {
    std::snprintf(buf, sizeof buf, "lane %zu (poll lcore %u)", i,
                  i < lb.lcores.size() ? lb.lcores[i] : 0u);
    block(o, buf, s.lanes[i], secs, lb);
  }
  if (s.lanes.size() > 1) block(o, "total", s.total(), secs, lb);
  o += "--------------------------------------------------------------------------------\n";
  return o;
}

std::string format_json(const Snapshot& s, double secs, const Labels& lb, const char* type,
                        int exit_status, uint64_t excused) {
  nlohmann::ordered_json j;
  j["type"] = type;
  j["fwd"] = lb.fwd;
  j["device"] = lb.device;
  j["seconds"] = secs;
  j["since"] = lb.since;
  j["bytes_kind"] = lb.bytes_kind;
  if (exit_status >= 0) j["exit_status"] = exit_status;
  j["lanes"] = nlohmann::ordered_json::array();
  for (const LaneSnap& l : s.lanes) j["lanes"].push_back(json_lane(l, secs));
  j["total"] = json_lane(s.total(), secs);
  j["total"]["errors"]["excused"] = excused;
  // Labels come from the command line: never let a byte there break the line.
  return j.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

std::string format_period(const Snapshot& d, double secs, double at, const Labels& lb) {
  std::string o;
  char buf[360];
  auto line = [&](const char* who, const LaneSnap& s) {
    const HistSummary h = s.hist.summary();
    std::snprintf(buf, sizeof buf,
                  "[%8.2f s] %-7s %10.0f I/O/s %10s/s  maps/s %10.0f  p50 %7.1f us  p99 %7.1f us  "
                  "in flight %" PRIu64 "  errors %" PRIu64 "\n",
                  at, who, rate(static_cast<double>(s.ios), secs),
                  human_bytes(rate(static_cast<double>(s.bytes), secs)).c_str(),
                  rate(static_cast<double>(s.win.maps), secs), us(static_cast<double>(h.p50)),
                  us(static_cast<double>(h.p99)), s.in_flight, s.errors());
    o += buf;
  };
  for (size_t i = 0; i < d.lanes.size(); ++i) {
    char who[32];
    std::snprintf(who, sizeof who, "lane %zu", i);
    line(who, d.lanes[i]);
  }
  if (d.lanes.size() > 1) line("total", d.total());
  (void)lb;
  return o;
}

}  // namespace rdmafwd
