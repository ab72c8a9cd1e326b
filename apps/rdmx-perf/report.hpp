// rdmx-perf output: the configuration block, the per-test tables (with ratios to the peers), the
// JSON document and the histogram file.
#pragma once

#include <cstdio>
#include <string>
#include <variant>
#include <vector>

#include "harness.hpp"

namespace rdmx::perf {

// One configuration entry: printed as "key: value" and written to JSON as a string, number or
// boolean.
struct ConfigItem {
  std::string key;
  std::variant<std::string, double, bool> value;
};

struct Report {
  std::vector<ConfigItem> config;
  std::vector<std::string> warnings;
  std::vector<TestResult> tests;
  double tsc_hz = 0;
};

// Whether a case's p50 is at or below the timer's resolution (the op is too short to time
// alone: its ns/op is the figure).
bool at_resolution(const CaseResult& c);

// When a case's means (ns/op, a mean over ~2048-op chunks; avg, of the stamped ops) and its
// median (p50) differ by more than kSlowFactor either way: by how much and why, in one line.
// factor 0: they agree (or p50 is at the timer's resolution).
struct Spread {
  double factor = 0;
  std::string reason;
};
Spread mean_vs_median(const CaseResult& c);

void print_config(std::FILE* f, const Report& r);
void print_test(std::FILE* f, const TestResult& t);
// The whole report as one JSON object.
void write_json(std::FILE* f, const Report& r);
// Every case's histogram: "case bucket_low_ns bucket_high_ns count cumulative_fraction".
void write_histograms(std::FILE* f, const Report& r);

}  // namespace rdmx::perf
