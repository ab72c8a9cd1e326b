// rdmafwd statistics: latency histogram math, snapshots, text and JSON output.
#include "stats.hpp"

#include <cinttypes>
#include <cstdio>

#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/rt/dpdk.hpp>

namespace rdmafwd {

// ---- histogram ---------------------------------------------------------------------------------
uint64_t HistSnapshot::total() const noexcept {
  uint64_t n = 0;
  for (uint64_t c : counts) n += c;
  return n;
}

uint64_t HistSnapshot::quantile(double q) const noexcept {
  const uint64_t n = total();
  if (n == 0) return 0;
  if (q >= 1.0) return max;
  uint64_t rank = static_cast<uint64_t>(q * static_cast<double>(n));
  if (rank >= n) rank = n - 1;
  uint64_t seen = 0;
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) {
    seen += counts[b];
    if (seen > rank) return std::min(LatencyHist::bucket_high(b), max ? max : UINT64_MAX);
  }
  return max;
}

void HistSnapshot::take(const LatencyHist& h) noexcept {
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) counts[b] = h.count(b);
  max = h.max();
}

void HistSnapshot::subtract(const HistSnapshot& base) noexcept {
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) counts[b] -= base.counts[b];
  // The maximum cannot be un-merged: keep it when anything was added since the base.
  if (total() == 0) max = 0;
}

void HistSnapshot::merge(const HistSnapshot& o) noexcept {
  for (uint32_t b = 0; b < LatencyHist::kBuckets; ++b) counts[b] += o.counts[b];
  max = std::max(max, o.max);
}

// ---- snapshots ---------------------------------------------------------------------------------
void LaneSnap::take(const Lane& l) {
  const LaneCounters& c = l.st;
  ios = c.ios.get();
  bytes = c.bytes.get();
  io_errors = c.io_errors.get();
  verify_fail = c.verify_fail.get();
  rejected = c.rejected.get();
  corrupted = c.corrupted.get();
  maps = c.win.maps.get();
  unmaps = c.win.unmaps.get();
  pages_mapped = c.win.pages_mapped.get();
  cache_hits = c.win.cache_hits.get();
  cache_misses = c.win.cache_misses.get();
  remote_inv = c.win.remote_invalidations.get();
  umr_errors = c.win.umr_errors.get();
  wqe_errors = c.win.wqe_errors.get();
  recoveries = c.win.recoveries.get();
  exhausted = c.win.exhausted.get();
  issued = c.issued.get();
  abandoned = c.abandoned.get();
  faults_injected = c.faults_injected.get();
  faults_recovered = c.faults_recovered.get();
  fault_ios = c.fault_ios.get();
  dead = c.failed.get();
  for (uint32_t i = 0; i < 256; ++i) synd[i] = c.win.syndromes[i].get();
  hist.take(c.lat);
}

#define RDMAFWD_FIELDS(X)                                                                  \
  X(ios)                                                                                   \
  X(bytes)                                                                                 \
  X(io_errors)                                                                             \
  X(verify_fail) X(rejected) X(corrupted) X(maps) X(unmaps) X(pages_mapped) X(cache_hits)  \
      X(cache_misses) X(remote_inv) X(umr_errors) X(wqe_errors) X(recoveries) X(exhausted) \
          X(issued) X(abandoned) X(faults_injected) X(faults_recovered) X(fault_ios) X(dead)

void LaneSnap::subtract(const LaneSnap& b) {
#define X(f) f -= b.f;
  RDMAFWD_FIELDS(X)
#undef X
  for (uint32_t i = 0; i < 256; ++i) synd[i] -= b.synd[i];
  hist.subtract(b.hist);
}

void LaneSnap::merge(const LaneSnap& o) {
#define X(f) f += o.f;
  RDMAFWD_FIELDS(X)
#undef X
  for (uint32_t i = 0; i < 256; ++i) synd[i] += o.synd[i];
  hist.merge(o.hist);
}

// Error completions (wqe_errors, by syndrome) are not errors by themselves any more: the lane
// recovers from them; the I/Os they failed are fault_ios. What is left: I/Os that failed
// otherwise, abandoned ones, lanes that could not recover, verification, refused posts.
uint64_t LaneSnap::errors() const noexcept {
  return io_errors + verify_fail + rejected + abandoned + dead + lost();
}

uint64_t LaneSnap::lost() const noexcept {
  const uint64_t accounted = ios + fault_ios + abandoned;
  return issued > accounted ? issued - accounted : 0;
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

// ---- formatting --------------------------------------------------------------------------------
namespace {

double us(uint64_t cycles) {
  return static_cast<double>(cycles) * 1e6 / static_cast<double>(rte_get_tsc_hz());
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

double rate(uint64_t n, double s) {
  return s > 0 ? static_cast<double>(n) / s : 0.0;
}

double hit_rate(const LaneSnap& s) {
  const uint64_t n = s.cache_hits + s.cache_misses;
  return n ? 100.0 * static_cast<double>(s.cache_hits) / static_cast<double>(n) : 0.0;
}

std::string lat_text(const HistSnapshot& h) {
  if (h.total() == 0) return "latency: -";
  char buf[160];
  std::snprintf(buf, sizeof buf, "latency us: p50 %.1f  p99 %.1f  p99.9 %.1f  max %.1f",
                us(h.quantile(0.5)), us(h.quantile(0.99)), us(h.quantile(0.999)), us(h.max));
  return buf;
}

void block(std::string& o, const char* title, const LaneSnap& s, double secs) {
  char buf[1024];
  std::snprintf(buf, sizeof buf,
                "  %s\n"
                "    I/Os %" PRIu64
                " (%.0f/s)   bytes %s (%s/s, %.2f Gbit/s)\n"
                "    maps %" PRIu64 "  unmaps %" PRIu64 "  remote-invalidated %" PRIu64
                "  pages mapped %" PRIu64
                "  cache hit %.1f%%\n"
                "    %s\n",
                title, s.ios, rate(s.ios, secs), human_bytes(static_cast<double>(s.bytes)).c_str(),
                human_bytes(rate(s.bytes, secs)).c_str(), rate(s.bytes, secs) * 8 / 1e9, s.maps,
                s.unmaps, s.remote_inv, s.pages_mapped, hit_rate(s), lat_text(s.hist).c_str());
  o += buf;
  std::snprintf(buf, sizeof buf,
                "    errors: %s  I/O errors %" PRIu64 "  verify failures %" PRIu64
                "  rejected %" PRIu64 "  faults recovered %" PRIu64
                "\n"
                "    faults: injected %" PRIu64 "  recovered %" PRIu64
                "  I/Os failed by faults %" PRIu64 "  abandoned %" PRIu64 "  lost %" PRIu64
                "  (issued %" PRIu64 ")%s\n",
                syndrome_list(s, false).c_str(), s.io_errors, s.verify_fail, s.rejected,
                s.faults_recovered, s.faults_injected, s.faults_recovered, s.fault_ios, s.abandoned,
                s.lost(), s.issued, s.dead ? "  NOT RECOVERED" : "");
  o += buf;
}

}  // namespace

std::string syndrome_list(const LaneSnap& s, bool json) {
  std::string o = json ? "{" : "";
  bool any = false;
  for (uint32_t i = 0; i < 256; ++i) {
    if (!s.synd[i]) continue;
    char buf[96];
    const std::string name(mlx5::prm::syndrome_name(static_cast<uint8_t>(i)));
    std::snprintf(buf, sizeof buf, json ? "%s\"%s\":%" PRIu64 : "%s%s %" PRIu64,
                  any ? (json ? "," : ", ") : "", name.c_str(), s.synd[i]);
    o += buf;
    any = true;
  }
  if (json) return o + "}";
  return any ? o : "none";
}

std::string format_text(const Snapshot& s, double secs, const Labels& lb) {
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "---------------- rdmafwd statistics: fwd %s on %s, %.2f s ----------------\n",
                lb.fwd.c_str(), lb.device.c_str(), secs);
  o += buf;
  for (size_t i = 0; i < s.lanes.size(); ++i) {
    std::snprintf(buf, sizeof buf, "lane %zu (poll lcore %u)", i,
                  i < lb.lcores.size() ? lb.lcores[i] : 0u);
    block(o, buf, s.lanes[i], secs);
  }
  if (s.lanes.size() > 1) block(o, "total", s.total(), secs);
  o += "--------------------------------------------------------------------------------\n";
  return o;
}

namespace {
void json_lane(std::string& o, const LaneSnap& s, double secs) {
  char buf[1024];
  const HistSnapshot& h = s.hist;
  std::snprintf(
      buf, sizeof buf,
      "{\"ios\":%" PRIu64 ",\"ios_per_s\":%.1f,\"bytes\":%" PRIu64
      ",\"bytes_per_s\":%.1f,"
      "\"maps\":%" PRIu64 ",\"unmaps\":%" PRIu64 ",\"remote_invalidations\":%" PRIu64
      ",\"pages_mapped\":%" PRIu64 ",\"cache_hits\":%" PRIu64 ",\"cache_misses\":%" PRIu64
      ",\"cache_hit_rate\":%.4f,\"latency_us\":{\"count\":%" PRIu64
      ",\"p50\":%.3f,\"p99\":%.3f,\"p99_9\":%.3f,\"max\":%.3f},"
      "\"errors\":{\"total\":%" PRIu64 ",\"io\":%" PRIu64 ",\"verify\":%" PRIu64
      ",\"rejected\":%" PRIu64 ",\"wqe\":%" PRIu64 ",\"umr\":%" PRIu64 ",\"by_syndrome\":",
      s.ios, rate(s.ios, secs), s.bytes, rate(s.bytes, secs), s.maps, s.unmaps, s.remote_inv,
      s.pages_mapped, s.cache_hits, s.cache_misses, hit_rate(s) / 100.0, h.total(),
      us(h.quantile(0.5)), us(h.quantile(0.99)), us(h.quantile(0.999)), us(h.max), s.errors(),
      s.io_errors, s.verify_fail, s.rejected, s.wqe_errors, s.umr_errors);
  o += buf;
  o += syndrome_list(s, true);
  std::snprintf(buf, sizeof buf,
                "},\"faults_recovered\":%" PRIu64 ",\"faults\":{\"injected\":%" PRIu64
                ",\"recovered\":%" PRIu64 ",\"failed_ios\":%" PRIu64 ",\"abandoned_ios\":%" PRIu64
                ",\"lost_ios\":%" PRIu64 ",\"issued\":%" PRIu64 ",\"unrecovered_lanes\":%" PRIu64
                ",\"core_recoveries\":%" PRIu64 "},\"corrupted\":%" PRIu64 ",\"exhausted\":%" PRIu64
                "}",
                s.faults_recovered, s.faults_injected, s.faults_recovered, s.fault_ios, s.abandoned,
                s.lost(), s.issued, s.dead, s.recoveries, s.corrupted, s.exhausted);
  o += buf;
}
}  // namespace

std::string format_json(const Snapshot& s, double secs, const Labels& lb, const char* type,
                        int exit_status) {
  std::string o;
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "{\"type\":\"%s\",\"fwd\":\"%s\",\"device\":\"%s\",\"seconds\":%.3f", type,
                lb.fwd.c_str(), lb.device.c_str(), secs);
  o += buf;
  if (exit_status >= 0) o += ",\"exit_status\":" + std::to_string(exit_status);
  o += ",\"lanes\":[";
  for (size_t i = 0; i < s.lanes.size(); ++i) {
    if (i) o += ",";
    json_lane(o, s.lanes[i], secs);
  }
  o += "],\"total\":";
  json_lane(o, s.total(), secs);
  o += "}";
  return o;
}

std::string format_period(const Snapshot& d, double secs, double at, const Labels& lb) {
  std::string o;
  char buf[320];
  auto line = [&](const char* who, const LaneSnap& s) {
    const HistSnapshot& h = s.hist;
    std::snprintf(buf, sizeof buf,
                  "[%8.2f s] %-7s %10.0f I/O/s %10s/s  maps/s %10.0f  p50 %7.1f us  p99 %7.1f us  "
                  "errors %" PRIu64 "\n",
                  at, who, rate(s.ios, secs), human_bytes(rate(s.bytes, secs)).c_str(),
                  rate(s.maps, secs), us(h.quantile(0.5)), us(h.quantile(0.99)), s.errors());
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
