#include "report.hpp"

#include <cinttypes>
#include <cmath>

#include <nlohmann/json.hpp>

namespace rdmx::perf {

namespace {

// A latency figure; below the timer's resolution, "<resolution" (e.g. "<8.2").
std::string fmt_ns(double v, double resolution = 0) {
  char b[32];
  if (resolution > 0 && v < resolution) {
    std::snprintf(b, sizeof b, "<%.2g", resolution);
    return b;
  }
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

std::string fmt_rate(double v) {
  char b[32];
  if (v >= 1e6)
    std::snprintf(b, sizeof b, "%.2fM", v / 1e6);
  else if (v >= 1e3)
    std::snprintf(b, sizeof b, "%.1fk", v / 1e3);
  else
    std::snprintf(b, sizeof b, "%.0f", v);
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

void print_test(std::FILE* f, const TestResult& t) {
  std::fprintf(f, "== %s ==\n", t.test.c_str());
  std::fprintf(f, "%-34s %5s %8s %8s %8s %8s %8s %8s %9s %9s %8s %7s %6s %5s  %s\n", "case",
               "pages", "ns/op", "min", "p50", "avg", "stdev", "p99", "p99.9", "max", "ops/s",
               "cyc/op", "alloc", "sys", "ratios (this/peer, by median ns/op)");
  for (const auto& c : t.cases) {
    std::string ratios;
    for (const auto& x : c.ratios) {
      char b[96];
      std::snprintf(b, sizeof b, "%s%.3gx %s", ratios.empty() ? "" : ", ", x.value, x.peer.c_str());
      ratios += b;
    }
    char sys[16];
    if (c.syscalls_per_op < 0)
      std::snprintf(sys, sizeof sys, "?");
    else
      std::snprintf(sys, sizeof sys, "%.2g", c.syscalls_per_op);
    const double res = c.lat.resolution_ns;
    std::fprintf(f, "%-34s %5u %8s %8s %8s %8s %8s %8s %9s %9s %8s %7.1f %6.2g %5s  %s\n",
                 c.name.c_str(), c.pages, fmt_ns(c.ns).c_str(), fmt_ns(c.lat.min_ns, res).c_str(),
                 fmt_ns(c.lat.p50_ns, res).c_str(), fmt_ns(c.lat.avg_ns, res).c_str(),
                 fmt_ns(c.lat.stdev_ns).c_str(), fmt_ns(c.lat.p99_ns, res).c_str(),
                 fmt_ns(c.lat.p999_ns, res).c_str(), fmt_ns(c.lat.max_ns, res).c_str(),
                 fmt_rate(c.ops_per_s).c_str(), c.cycles, c.allocs_per_op, sys, ratios.c_str());
    if (!c.note.empty()) std::fprintf(f, "%-34s   note: %s\n", "", c.note.c_str());
  }
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
  j["schema"] = 1;
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
      jc["ops"] = c.ops;
      jc["ns_per_op"] = num(c.ns);
      jc["best_round_ns_per_op"] = num(c.best_ns);
      jc["cycles_per_op"] = num(c.cycles);
      jc["ops_per_s"] = num(c.ops_per_s);
      jc["allocs_per_op"] = num(c.allocs_per_op);
      jc["syscalls_per_op"] = num(c.syscalls_per_op);
      jc["round_ns_per_op"] = c.round_ns;
      jc["latency_ns"] = {{"samples", c.lat.samples},
                          {"min", num(c.lat.min_ns)},
                          {"p50", num(c.lat.p50_ns)},
                          {"avg", num(c.lat.avg_ns)},
                          {"stdev", num(c.lat.stdev_ns)},
                          {"p99", num(c.lat.p99_ns)},
                          {"p99_9", num(c.lat.p999_ns)},
                          {"max", num(c.lat.max_ns)},
                          {"resolution", num(c.lat.resolution_ns)}};
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
