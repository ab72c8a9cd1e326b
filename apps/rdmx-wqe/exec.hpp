// rdmx-wqe exec: raw send WQEs replayed against an emulated QP pair (exec.cpp).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <rdmx/core/result.hpp>

#include "tool.hpp"

namespace rdmx::wqetool {

struct ExecOptions {
  std::string profile;         // emu device profile ("" = default)
  uint32_t sq_wqe_cnt = 64;    // the local SQ's ring size in WQEBBs
  bool checker_fatal = false;  // a checker report also fails the WQE (emu Options)
};

// The environment every batch runs in, as one JSON line {"env":{...}}.
Result<std::string> exec_env(const ExecOptions& o);

// Runs one batch: {"wqebbs":[hex...], "doorbell_record":N} (an encode output line is one).
// Output: {"cqe":...} and {"report":...} lines, then {"batch":...}; or an error object.
LineResult exec_line(std::string_view line, const ExecOptions& o);

}  // namespace rdmx::wqetool
