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

void print_config(std::FILE* f, const Report& r);
void print_test(std::FILE* f, const TestResult& t);
// The whole report as one JSON object.
void write_json(std::FILE* f, const Report& r);
// Every case's histogram: "case bucket_low_ns bucket_high_ns count cumulative_fraction".
void write_histograms(std::FILE* f, const Report& r);

}  // namespace rdmx::perf
