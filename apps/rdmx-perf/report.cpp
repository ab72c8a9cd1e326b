#include "report.hpp"

#include <cinttypes>
#include <cmath>

namespace rdmx::perf {

std::string json_escape(const std::string& s) {
  std::string o;
  o.reserve(s.size() + 2);
  for (char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    switch (c) {
      case '"':
        o += "\\\"";
        break;
      case '\\':
        o += "\\\\";
        break;
      case '\n':
        o += "\\n";
        break;
      case '\t':
        o += "\\t";
        break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          o += b;
        } else {
          o += ch;
        }
    }
  }
  return o;
}

namespace {

// Minimal streaming JSON writer (commas handled by a per-level "first" flag).
class Json {
 public:
  explicit Json(std::FILE* f) : f_(f) {}
  void begin_obj(const char* key = nullptr) { open(key, '{'); }
  void end_obj() { close('}'); }
  void begin_arr(const char* key = nullptr) { open(key, '['); }
  void end_arr() { close(']'); }
  void str(const char* key, const std::string& v) {
    sep(key);
    std::fprintf(f_, "\"%s\"", json_escape(v).c_str());
  }
  void num(const char* key, double v) {
    sep(key);
    if (!std::isfinite(v))
      std::fputs("null", f_);
    else if (v == std::floor(v) && std::fabs(v) < 1e15)
      std::fprintf(f_, "%.0f", v);
    else
      std::fprintf(f_, "%.6g", v);
  }
  void boolean(const char* key, bool v) {
    sep(key);
    std::fputs(v ? "true" : "false", f_);
  }

 private:
  void sep(const char* key) {
    if (!first_.empty()) {
      if (!first_.back()) std::fputc(',', f_);
      first_.back() = false;
    }
    if (key) std::fprintf(f_, "\"%s\":", json_escape(key).c_str());
  }
  void open(const char* key, char c) {
    sep(key);
    std::fputc(c, f_);
    first_.push_back(true);
  }
  void close(char c) {
    first_.pop_back();
    std::fputc(c, f_);
  }
  std::FILE* f_;
  std::vector<bool> first_;
};

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
  std::fprintf(f, "%-34s %5s %8s %8s %8s %8s %8s %9s %9s %8s %7s %6s %5s  %s\n", "case", "pages",
               "ns/op", "min", "p50", "avg", "p99", "p99.9", "max", "ops/s", "cyc/op", "alloc",
               "sys", "ratios (this/peer, by median ns/op)");
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
    std::fprintf(f, "%-34s %5u %8s %8s %8s %8s %8s %9s %9s %8s %7.1f %6.2g %5s  %s\n",
                 c.name.c_str(), c.pages, fmt_ns(c.ns).c_str(), fmt_ns(c.lat.min_ns).c_str(),
                 fmt_ns(c.lat.p50_ns).c_str(), fmt_ns(c.lat.avg_ns).c_str(),
                 fmt_ns(c.lat.p99_ns).c_str(), fmt_ns(c.lat.p999_ns).c_str(),
                 fmt_ns(c.lat.max_ns).c_str(), fmt_rate(c.ops_per_s).c_str(), c.cycles,
                 c.allocs_per_op, sys, ratios.c_str());
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
  Json j(f);
  j.begin_obj();
  j.str("tool", "rdmx-perf");
  j.num("schema", 1);
  j.begin_obj("config");
  for (const auto& c : r.config) {
    if (auto* s = std::get_if<std::string>(&c.value))
      j.str(c.key.c_str(), *s);
    else if (auto* d = std::get_if<double>(&c.value))
      j.num(c.key.c_str(), *d);
    else
      j.boolean(c.key.c_str(), std::get<bool>(c.value));
  }
  j.end_obj();
  j.begin_arr("warnings");
  for (const auto& w : r.warnings) j.str(nullptr, w);
  j.end_arr();
  j.begin_arr("tests");
  for (const auto& t : r.tests) {
    j.begin_obj();
    j.str("test", t.test);
    j.begin_arr("cases");
    for (const auto& c : t.cases) {
      j.begin_obj();
      j.str("name", c.name);
      j.str("unit", c.unit);
      j.str("role", c.role);
      j.num("pages", c.pages);
      j.num("bytes", static_cast<double>(c.bytes));
      j.num("burst", c.burst);
      j.num("ops", static_cast<double>(c.ops));
      j.num("ns_per_op", c.ns);
      j.num("best_round_ns_per_op", c.best_ns);
      j.num("cycles_per_op", c.cycles);
      j.num("ops_per_s", c.ops_per_s);
      j.num("allocs_per_op", c.allocs_per_op);
      j.num("syscalls_per_op", c.syscalls_per_op);
      j.begin_arr("round_ns_per_op");
      for (double x : c.round_ns) j.num(nullptr, x);
      j.end_arr();
      j.begin_obj("latency_ns");
      j.num("samples", static_cast<double>(c.lat.samples));
      j.num("min", c.lat.min_ns);
      j.num("p50", c.lat.p50_ns);
      j.num("avg", c.lat.avg_ns);
      j.num("p99", c.lat.p99_ns);
      j.num("p99_9", c.lat.p999_ns);
      j.num("max", c.lat.max_ns);
      j.end_obj();
      j.begin_obj("ratios");
      for (const auto& x : c.ratios) j.num(x.peer.c_str(), x.value);
      j.end_obj();
      j.begin_obj("extra");
      for (const auto& [k, v] : c.extra) j.num(k.c_str(), v);
      j.end_obj();
      if (!c.note.empty()) j.str("note", c.note);
      // Non-empty histogram buckets: [low_ns, high_ns, count].
      j.begin_arr("histogram");
      const auto& h = c.hist.counts();
      const double ns = 1e9 / r.tsc_hz;
      for (uint32_t i = 0; i < h.size(); ++i) {
        if (!h[i]) continue;
        j.begin_arr();
        j.num(nullptr, static_cast<double>(Histogram::lower(i)) * ns);
        j.num(nullptr, static_cast<double>(Histogram::upper(i)) * ns);
        j.num(nullptr, static_cast<double>(h[i]));
        j.end_arr();
      }
      j.end_arr();
      j.end_obj();
    }
    j.end_arr();
    j.begin_arr("targets");
    for (const auto& g : t.targets) {
      j.begin_obj();
      j.str("name", g.name);
      j.num("value", g.value);
      j.str("cmp", g.cmp);
      j.num("limit", g.limit);
      j.boolean("met", g.met);
      j.str("how", g.how);
      j.end_obj();
    }
    j.end_arr();
    j.begin_arr("notes");
    for (const auto& n : t.notes) j.str(nullptr, n);
    j.end_arr();
    j.end_obj();
  }
  j.end_arr();
  j.end_obj();
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
