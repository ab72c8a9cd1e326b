#include "report.hpp"

#include <algorithm>
#include <cinttypes>
#include <cmath>

#include <nlohmann/json.hpp>

namespace rdmx::perf {

namespace {

// A time in ns: two decimals below 100, one below 10000, none above.
std::string fmt_ns(double v) {
  char b[32];
  if (v < 0)
    std::snprintf(b, sizeof b, "-");
  else if (v < 100)
    std::snprintf(b, sizeof b, "%.2f", v);
  else if (v < 10000)
    std::snprintf(b, sizeof b, "%.1f", v);
  else
    std::snprintf(b, sizeof b, "%.0f", v);
  return b;
}

// A per-op latency figure; below the timer's resolution, "<resolution" in the same format
// (e.g. "<10.04"), not a number that looks measured.
std::string fmt_lat(double v, double resolution) {
  if (resolution > 0 && v < resolution) return "<" + fmt_ns(resolution);
  return fmt_ns(v);
}

// A ratio such as 1.44 or 166 (never an exponent).
std::string fmt_x(double v) {
  char b[32];
  std::snprintf(b, sizeof b, v >= 100 ? "%.0f" : "%.3g", v);
  return b;
}

// Millions of ops per second, without an exponent.
std::string fmt_mops(double ops_per_s) {
  const double v = ops_per_s / 1e6;
  char b[32];
  std::snprintf(b, sizeof b, v >= 100 ? "%.0f" : v >= 1 ? "%.2f" : "%.4f", v);
  return b;
}

}  // namespace

void print_config(std::FILE* f, const Report& r) {
  std::fprintf(f, "rdmx-perf configuration\n");
  for (const auto& c : r.config) {
    if (auto* s = std::get_if<std::string>(&c.value))
      std::fprintf(f, "  %-22s %s\n", c.key.c_str(), s->c_str());
    else if (auto* d = std::get_if<double>(&c.value))
      std::fprintf(f, "  %-22s %.10g\n", c.key.c_str(), *d);
    else
      std::fprintf(f, "  %-22s %s\n", c.key.c_str(), std::get<bool>(c.value) ? "yes" : "no");
  }
  for (const auto& w : r.warnings) std::fprintf(f, "  WARNING: %s\n", w.c_str());
  std::fputc('\n', f);
}

bool at_resolution(const CaseResult& c) {
  return c.lat.samples > 0 && c.lat.p50_ns <= c.lat.resolution_ns * 1.001;
}

Spread mean_vs_median(const CaseResult& c) {
  const Latency& l = c.lat;
  Spread s;
  if (l.samples == 0 || c.ns <= 0) return s;
  // Below the resolution p50 says only "less than R": compare with R, and a p50 above ns/op
  // there is the timer's, not the op's.
  const double med = std::max(l.p50_ns, l.resolution_ns);
  const double hi = std::max(c.ns, l.avg_ns) / med;
  const double lo = at_resolution(c) ? 0 : l.p50_ns / c.ns;
  if (hi <= kSlowFactor && lo <= kSlowFactor) return s;
  char b[400];
  const std::string p50 = fmt_lat(l.p50_ns, l.resolution_ns), ns = fmt_ns(c.ns),
                    avg = fmt_lat(l.avg_ns, l.resolution_ns);
  s.factor = std::max(hi, lo);
  const std::string x = fmt_x(s.factor);
  if (lo > kSlowFactor) {
    std::snprintf(b, sizeof b,
                  "p50 %s ns is %sx ns/op %s: one op timed alone (a stamp after each) costs more "
                  "than in a stream, where consecutive ops overlap",
                  p50.c_str(), x.c_str(), ns.c_str());
  } else if (c.depth > 1) {
    std::snprintf(b, sizeof b,
                  "mean up to %sx the median (ns/op %s, avg %s, p50 %s): at depth %u most ops "
                  "find a free slot and return at once, the others wait for a completion; ns/op "
                  "is the time per op of the stream",
                  x.c_str(), ns.c_str(), avg.c_str(), p50.c_str(), c.depth);
  } else if (l.avg_ns > kSlowFactor * med) {
    std::snprintf(b, sizeof b,
                  "mean up to %sx the median (ns/op %s, avg %s, p50 %s): %.2g%% of the ops took "
                  "over %gx p50 (max %s ns) and hold %.0f%% of the time (stalls, e.g. preemption "
                  "on a busy machine): the means carry them, p50 is the typical op",
                  x.c_str(), ns.c_str(), avg.c_str(), p50.c_str(), 100 * l.slow_fraction,
                  kSlowFactor, fmt_ns(l.max_ns).c_str(), 100 * l.slow_time_share);
  } else {
    std::snprintf(b, sizeof b,
                  "ns/op %s is %sx p50 %s while avg is %s: the bulk phase (~2048-op chunks) met "
                  "stalls the stamped phase did not (its best round: %s ns/op)",
                  ns.c_str(), x.c_str(), p50.c_str(), avg.c_str(), fmt_ns(c.best_ns).c_str());
  }
  s.reason = b;
  return s;
}

void print_test(std::FILE* f, const TestResult& t) {
  std::fprintf(f, "== %s ==\n", t.test.c_str());
  std::fprintf(f, "%-34s %5s %8s %8s %8s %8s %9s %8s %9s %9s %8s", "case", "pages", "ns/op",
               "min[ns]", "p50[ns]", "avg[ns]", "stdev[ns]", "p99[ns]", "p99.9[ns]", "max[ns]",
               "Mops/s");
  if (t.bandwidth) std::fprintf(f, " %9s", "BW[MB/s]");
  std::fprintf(f, " %9s %9s %6s  %s\n", "cyc/op", "allocs/op", "sys/op",
               "ratios (this/peer, by median ns/op)");
  bool below_res = false;  // some figure printed as "<R"
  for (const auto& c : t.cases) {
    std::string ratios;
    for (const auto& r : c.ratios)
      ratios += (ratios.empty() ? "" : ", ") + fmt_x(r.value) + "x " + r.peer;
    char sys[16];
    if (c.syscalls_per_op < 0)
      std::snprintf(sys, sizeof sys, "?");
    else
      std::snprintf(sys, sizeof sys, "%.2g", c.syscalls_per_op);
    const double res = c.lat.resolution_ns;
    below_res |= c.lat.samples > 0 && c.lat.min_ns < res;
    std::fprintf(f, "%-34s %5u %8s %8s %8s %8s %9s %8s %9s %9s %8s", c.name.c_str(), c.pages,
                 fmt_ns(c.ns).c_str(), fmt_lat(c.lat.min_ns, res).c_str(),
                 fmt_lat(c.lat.p50_ns, res).c_str(), fmt_lat(c.lat.avg_ns, res).c_str(),
                 fmt_ns(c.lat.stdev_ns).c_str(), fmt_lat(c.lat.p99_ns, res).c_str(),
                 fmt_lat(c.lat.p999_ns, res).c_str(), fmt_lat(c.lat.max_ns, res).c_str(),
                 fmt_mops(c.ops_per_s).c_str());
    if (t.bandwidth) {
      char bw[32] = "-";
      if (c.bw_mb_s >= 0) std::snprintf(bw, sizeof bw, "%.2f", c.bw_mb_s);
      std::fprintf(f, " %9s", bw);
    }
    std::fprintf(f, " %9.1f %9.2g %6s  %s\n", c.cycles, c.allocs_per_op, sys, ratios.c_str());
    if (!c.note.empty()) std::fprintf(f, "%-34s   note: %s\n", "", c.note.c_str());
    if (const Spread sp = mean_vs_median(c); sp.factor > 0)
      std::fprintf(f, "%-34s   note: %s\n", "", sp.reason.c_str());
  }
  if (below_res)
    std::fprintf(f,
                 "<R: below the timer's resolution R (one TSC stamp; in a burst, shared by its "
                 "ops): too short to time alone, ns/op (timed over ~2048-op chunks) is the "
                 "figure\n");
  if (t.bandwidth)
    std::fprintf(f,
                 "BW[MB/s]: bytes per I/O x ops per s at ns/op, MB = 2^20 bytes (perftest's "
                 "BW average[MB/sec])\n");
  if (!t.targets.empty()) {
    std::fprintf(f, "targets:\n");
    for (const auto& g : t.targets)
      std::fprintf(f, "  [%s] %-58s %10.4g %s %-8.4g %s\n", g.met ? "MET " : "MISS", g.name.c_str(),
                   g.value, g.cmp.c_str(), g.limit, g.how.c_str());
  }
  for (const auto& n : t.notes) std::fprintf(f, "note: %s\n", n.c_str());
  std::fputc('\n', f);
}

void write_json(std::FILE* f, const Report& r) {
  using nlohmann::ordered_json;
  // Not-a-number (a ratio over nothing) is written as null, as JSON has no NaN.
  auto num = [](double v) -> ordered_json { return std::isfinite(v) ? ordered_json(v) : nullptr; };
  ordered_json j;
  j["tool"] = "rdmx-perf";
  j["schema"] = 2;
  ordered_json& cfg = j["config"] = ordered_json::object();
  for (const auto& c : r.config) std::visit([&](const auto& v) { cfg[c.key] = v; }, c.value);
  j["warnings"] = r.warnings;
  j["tests"] = ordered_json::array();
  const double ns = 1e9 / r.tsc_hz;
  for (const auto& t : r.tests) {
    ordered_json jt;
    jt["test"] = t.test;
    jt["cases"] = ordered_json::array();
    for (const auto& c : t.cases) {
      ordered_json jc;
      jc["name"] = c.name;
      jc["unit"] = c.unit;
      jc["role"] = c.role;
      jc["pages"] = c.pages;
      jc["bytes"] = c.bytes;
      jc["burst"] = c.burst;
      jc["depth"] = c.depth;
      jc["ops"] = c.ops;
      jc["ns_per_op"] = num(c.ns);
      jc["best_round_ns_per_op"] = num(c.best_ns);
      jc["cycles_per_op"] = num(c.cycles);
      jc["ops_per_s"] = num(c.ops_per_s);
      jc["allocs_per_op"] = num(c.allocs_per_op);
      jc["syscalls_per_op"] = num(c.syscalls_per_op);
      jc["bw_MB_per_s"] = c.bw_mb_s >= 0 ? num(c.bw_mb_s) : nullptr;
      jc["round_ns_per_op"] = c.round_ns;
      jc["latency_ns"] = {{"samples", c.lat.samples},
                          {"min", num(c.lat.min_ns)},
                          {"p50", num(c.lat.p50_ns)},
                          {"avg", num(c.lat.avg_ns)},
                          {"stdev", num(c.lat.stdev_ns)},
                          {"p99", num(c.lat.p99_ns)},
                          {"p99_9", num(c.lat.p999_ns)},
                          {"max", num(c.lat.max_ns)},
                          {"resolution", num(c.lat.resolution_ns)},
                          {"slow_fraction", num(c.lat.slow_fraction)},
                          {"slow_time_share", num(c.lat.slow_time_share)}};
      jc["at_resolution"] = at_resolution(c);
      const Spread sp = mean_vs_median(c);
      jc["mean_vs_median"] = sp.factor > 0
                                 ? ordered_json{{"factor", num(sp.factor)}, {"reason", sp.reason}}
                                 : ordered_json(nullptr);
      ordered_json& ratios = jc["ratios"] = ordered_json::object();
      for (const auto& x : c.ratios) ratios[x.peer] = num(x.value);
      ordered_json& extra = jc["extra"] = ordered_json::object();
      for (const auto& [k, v] : c.extra) extra[k] = num(v);
      if (!c.note.empty()) jc["note"] = c.note;
      // Non-empty histogram buckets: [low_ns, high_ns, count].
      ordered_json& hist = jc["histogram"] = ordered_json::array();
      const auto& h = c.hist.counts();
      for (uint32_t i = 0; i < h.size(); ++i) {
        if (!h[i]) continue;
        hist.push_back({static_cast<double>(Histogram::lower(i)) * ns,
                        static_cast<double>(Histogram::upper(i)) * ns, h[i]});
      }
      jt["cases"].push_back(std::move(jc));
    }
    jt["targets"] = ordered_json::array();
    for (const auto& g : t.targets)
      jt["targets"].push_back({{"name", g.name},
                               {"value", num(g.value)},
                               {"cmp", g.cmp},
                               {"limit", num(g.limit)},
                               {"met", g.met},
                               {"how", g.how}});
    jt["notes"] = t.notes;
    j["tests"].push_back(std::move(jt));
  }
  const std::string out = j.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  std::fputs(out.c_str(), f);
  std::fputc('\n', f);
}

void write_histograms(std::FILE* f, const Report& r) {
  const double ns = 1e9 / r.tsc_hz;
  std::fprintf(f, "# rdmx-perf latency histograms (log-linear, <= 1.6%% bucket width)\n");
  std::fprintf(f, "# test case low_ns high_ns count cumulative_fraction\n");
  for (const auto& t : r.tests) {
    for (const auto& c : t.cases) {
      const auto& h = c.hist.counts();
      uint64_t cum = 0;
      for (uint32_t i = 0; i < h.size(); ++i) {
        if (!h[i]) continue;
        cum += h[i];
        std::fprintf(f, "%s %s %.3f %.3f %" PRIu64 " %.6f\n", t.test.c_str(), c.name.c_str(),
                     static_cast<double>(Histogram::lower(i)) * ns,
                     static_cast<double>(Histogram::upper(i)) * ns, h[i],
                     static_cast<double>(cum) / static_cast<double>(c.hist.total()));
      }
    }
  }
}

}  // namespace rdmx::perf
