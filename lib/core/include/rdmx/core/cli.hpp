// The command-line convention every rdmx tool follows (rdmafwd, rdmx-perf, rdmx-wqe; the C
// example blockd keeps the same rules in C): options are parsed with getopt_long, so
// `--opt value` and `--opt=value` are both accepted; bad arguments are one line on stderr,
// "TOOL: error: WHAT", and exit status 2. The exit statuses below are documented on each tool's
// doc/guides page.
#pragma once

#include <getopt.h>

#include <cstdio>
#include <string>
#include <string_view>

namespace rdmx::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;        // runtime failure (errors, verification)
inline constexpr int kExitUsage = 2;          // bad arguments
inline constexpr int kExitNoDevice = 3;       // the device named does not exist
inline constexpr int kExitInterrupted = 130;  // SIGINT (128 + 2, as shells report it)

// Prints "TOOL: error: WHAT" on stderr; returns kExitUsage.
inline int usage_error(std::string_view tool, std::string_view what) {
  std::fprintf(stderr, "%.*s: error: %.*s\n", static_cast<int>(tool.size()), tool.data(),
               static_cast<int>(what.size()), what.data());
  return kExitUsage;
}

// What getopt_long complained of, as one phrase, after it returned `c` ('?' or ':'). Parse with
// opterr = 0 and an optstring that starts with ':' (a missing value is then ':'); `argv` is the
// vector given to getopt_long.
inline std::string getopt_problem(int c, char* const* argv) {
  std::string tok = optind >= 1 ? argv[optind - 1] : "";
  const bool is_long = tok.rfind("--", 0) == 0;
  if (!is_long && optopt > 0 && optopt < 128) tok = std::string("-") + static_cast<char>(optopt);
  if (c == ':') return "option '" + tok + "' needs a value";
  const size_t eq = tok.find('=');
  if (is_long && optopt != 0 && eq != std::string::npos)
    return "option '" + tok.substr(0, eq) + "' takes no value";
  return "unknown option '" + tok + "'";
}

// getopt keeps a pointer into the last argv it parsed (the rest of a cluster of short options);
// a tool that parses a temporary argv and then lets someone else call getopt (the DPDK EAL does,
// setting optind = 1, which does not re-initialise glibc's state) would have it read freed
// memory. Call this once parsing is done: it re-initialises getopt on a harmless argv.
inline void getopt_reset() {
  static char prog[] = "rdmx";
  char* av[] = {prog, nullptr};
  optind = 0;  // glibc: re-initialise (forgets the pointer)
  opterr = 0;
  (void)getopt(1, av, "");
  optind = 1;
}

}  // namespace rdmx::cli
