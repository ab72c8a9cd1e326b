// rdmx-wqe: command line front end (argument parsing and line I/O only). Options follow the
// tools' convention (rdmx/core/cli.hpp): getopt_long, one-line usage errors, exit status 2.
#include <getopt.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include <rdmx/core/cli.hpp>

#include "exec.hpp"
#include "tool.hpp"

namespace {

using rdmx::wqetool::LineResult;

constexpr const char* kTool = "rdmx-wqe";

// One line "rdmx-wqe: error: ..." and a pointer to the help, never the whole usage; exit 2.
int usage_error(const std::string& msg) {
  const int rc = rdmx::cli::usage_error(kTool, msg);
  std::fputs("try 'rdmx-wqe --help' for the options\n", stderr);
  return rc;
}

struct Args {
  bool decode = false;
  bool exec = false;
  rdmx::wqetool::ExecOptions ex;
  std::string input;  // "" or "-" = standard input
  bool pretty = false;
  std::vector<std::string> hex;  // decode: WQEBBs given as arguments
};

// The subcommand's options (argv[0] is the subcommand) with getopt_long: `--input FILE` and
// `--input=FILE` alike. Returns an exit status when the tool is done (help, usage error),
// -1 to go on.
int parse_args(int argc, char** argv, Args& a) {
  enum { kOptPretty = 256, kOptProfile, kOptSqWqeCnt, kOptCheckerFatal };
  static const option kLong[] = {{"input", required_argument, nullptr, 'i'},
                                 {"help", no_argument, nullptr, 'h'},
                                 {"pretty", no_argument, nullptr, kOptPretty},
                                 {"profile", required_argument, nullptr, kOptProfile},
                                 {"sq-wqe-cnt", required_argument, nullptr, kOptSqWqeCnt},
                                 {"checker-fatal", no_argument, nullptr, kOptCheckerFatal},
                                 {nullptr, 0, nullptr, 0}};
  const std::string cmd = argv[0];
  opterr = 0;
  optind = 1;
  for (int c; (c = getopt_long(argc, argv, ":i:h", kLong, nullptr)) != -1;) {
    switch (c) {
      case 'i':
        a.input = optarg;
        break;
      case 'h':
        std::fputs(std::string(a.exec     ? rdmx::wqetool::exec_help_text()
                               : a.decode ? rdmx::wqetool::decode_help_text()
                                          : rdmx::wqetool::encode_help_text())
                       .c_str(),
                   stdout);
        return 0;
      case kOptProfile:
      case kOptSqWqeCnt:
      case kOptCheckerFatal:
        if (!a.exec)
          return usage_error(cmd + ": option '" + argv[optind - 1] + "' is for exec only");
        if (c == kOptProfile) a.ex.profile = optarg;
        if (c == kOptCheckerFatal) a.ex.checker_fatal = true;
        if (c == kOptSqWqeCnt) {
          char* end = nullptr;
          const unsigned long v = std::strtoul(optarg, &end, 0);
          if (*optarg == '\0' || *end != '\0' || v < 1 || v > 32768 || (v & (v - 1)))
            return usage_error(cmd + ": --sq-wqe-cnt: '" + optarg +
                               "' is not a power of two in 1..32768");
          a.ex.sq_wqe_cnt = static_cast<uint32_t>(v);
        }
        break;
      case kOptPretty:
        if (!a.decode) return usage_error(cmd + ": option '--pretty' is for decode only");
        a.pretty = true;
        break;
      default:
        return usage_error(cmd + ": " + rdmx::cli::getopt_problem(c, argv));
    }
  }
  for (int i = optind; i < argc; ++i) {
    if (!a.decode)
      return usage_error(cmd + " takes no arguments ('" + argv[i] +
                         "'): requests come on standard input or --input");
    a.hex.push_back(argv[i]);
  }
  if (!a.hex.empty() && !a.input.empty())
    return usage_error("give WQEBBs as arguments or with --input, not both");
  return -1;
}

bool is_blank(const std::string& s) {
  for (char c : s)
    if (c != ' ' && c != '\t' && c != '\r') return false;
  return true;
}

template <class F>
int run_lines(std::istream& in, F&& f) {
  int rc = 0;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (is_blank(line)) continue;
    const LineResult r = f(line);
    std::fputs(r.text.c_str(), stdout);
    if (r.text.empty() || r.text.back() != '\n') std::fputc('\n', stdout);
    if (!r.ok) rc = 1;
  }
  std::fflush(stdout);
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage_error("missing subcommand: encode, decode or exec");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(std::string(rdmx::wqetool::usage_text()).c_str(), stdout);
    return 0;
  }
  if (cmd != "encode" && cmd != "decode" && cmd != "exec")
    return usage_error(cmd.rfind('-', 0) == 0
                           ? "unknown option '" + cmd + "': options follow a subcommand " +
                                 "(encode, decode or exec)"
                           : "unknown subcommand '" + cmd + "' (encode, decode or exec)");
  Args a;
  a.decode = cmd == "decode";
  a.exec = cmd == "exec";
  if (const int rc = parse_args(argc - 1, argv + 1, a); rc >= 0) return rc;
  const std::string& input = a.input;
  const bool pretty = a.pretty;
  const std::vector<std::string>& hex_args = a.hex;

  if (!hex_args.empty()) {
    const LineResult r = rdmx::wqetool::decode_hex(hex_args, pretty);
    std::fputs(r.text.c_str(), stdout);
    if (r.text.empty() || r.text.back() != '\n') std::fputc('\n', stdout);
    return r.ok ? 0 : 1;
  }

  std::ifstream file;
  std::istream* in = &std::cin;
  if (!input.empty() && input != "-") {
    file.open(input);
    if (!file) return usage_error("cannot open '" + input + "': " + std::strerror(errno));
    in = &file;
  }
  if (cmd == "encode")
    return run_lines(*in, [](const std::string& l) { return rdmx::wqetool::encode_line(l); });
  if (a.exec) {
    // The environment first: it names the QPNs, keys and addresses batches can use. A profile
    // that does not exist fails here (exit 2: a bad argument).
    auto env = rdmx::wqetool::exec_env(a.ex);
    if (!env) return usage_error("exec: " + env.error().message);
    std::printf("%s\n", env.value().c_str());
    return run_lines(*in, [&](const std::string& l) { return rdmx::wqetool::exec_line(l, a.ex); });
  }
  return run_lines(*in,
                   [&](const std::string& l) { return rdmx::wqetool::decode_line(l, pretty); });
}
