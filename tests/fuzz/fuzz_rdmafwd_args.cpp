// libFuzzer target: rdmafwd's command-line parser (apps/rdmafwd/params.cpp: parse_params and
// check_params). The input is split into argv words at NUL bytes (a word may hold anything
// else: '=', spaces, UTF-8, numbers out of range). Must hold for every input:
//   - no crash, no sanitizer report, no exception escaping;
//   - the outcome is help, an error (one line, non-empty), or parameters that pass
//     check_params() again (the parser's own defaults complete them).
// The interactive prompt (cmdline.cpp) is DPDK cmdline tables clang does not compile; its
// `set` commands end in check_params(), which this target covers.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "rdmafwd.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  std::vector<std::string> args;
  std::string cur;
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty()) args.push_back(cur);
  rdmafwd::Params p;
  const rdmafwd::ParseOutcome o = rdmafwd::parse_params(args, p);
  if (o.help) return 0;
  if (!o.error.empty()) {
    if (o.error.find('\n') != std::string::npos) std::abort();  // one line, before the usage
    return 0;
  }
  if (!rdmafwd::check_params(p).empty()) std::abort();
  if (p.pages_per_io == 0 || p.pages_per_io > p.max_pages || p.windows_per_core < 2 * p.io_depth ||
      p.burst == 0 || p.io_depth == 0)
    std::abort();
  (void)rdmafwd::usage_text(args.empty() ? "rdmafwd" : args[0]);
  return 0;
}
