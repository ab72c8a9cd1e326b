// rdmx-wqe: command line front end (argument parsing and line I/O only).
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "tool.hpp"

namespace {

using rdmx::wqetool::LineResult;

int usage_error(const std::string& msg) {
  std::fprintf(stderr, "rdmx-wqe: %s\n", msg.c_str());
  std::fputs(std::string(rdmx::wqetool::usage_text()).c_str(), stderr);
  return 2;
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
  if (argc < 2) return usage_error("missing subcommand");
  const std::string cmd = argv[1];
  if (cmd == "--help" || cmd == "-h" || cmd == "help") {
    std::fputs(std::string(rdmx::wqetool::usage_text()).c_str(), stdout);
    return 0;
  }
  if (cmd != "encode" && cmd != "decode") return usage_error("unknown subcommand '" + cmd + "'");

  std::string input;
  bool pretty = false;
  std::vector<std::string> hex_args;
  for (int i = 2; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::fputs(std::string(cmd == "encode" ? rdmx::wqetool::encode_help_text()
                                             : rdmx::wqetool::decode_help_text())
                     .c_str(),
                 stdout);
      return 0;
    } else if (a == "--input" || a == "-i") {
      if (i + 1 >= argc) return usage_error("--input needs a file name");
      input = argv[++i];
    } else if (a.rfind("--input=", 0) == 0) {
      input = a.substr(8);
    } else if (a == "--pretty" && cmd == "decode") {
      pretty = true;
    } else if (cmd == "decode" && !a.empty() && a[0] != '-') {
      hex_args.push_back(a);
    } else {
      return usage_error("unknown option '" + a + "' for " + cmd);
    }
  }
  if (!hex_args.empty() && !input.empty())
    return usage_error("give WQEBBs as arguments or with --input, not both");

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
  return run_lines(*in,
                   [&](const std::string& l) { return rdmx::wqetool::decode_line(l, pretty); });
}
