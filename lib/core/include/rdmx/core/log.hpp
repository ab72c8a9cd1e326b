// Setup-path logging. Without the EAL (the C API, unit tests): plain stderr, filtered by
// set_log_level. Where the EAL runs, the runtime layer installs a sink that sends every line
// through DPDK's log type "rdmx.lib" (lib/rt/eal.cpp), so `--log-level=rdmx.*:debug` and
// rte_log's stream apply to it. Never used on the hot path: the data path counts, it does not
// print.
#pragma once

#include <cstdarg>

namespace rdmx {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel l) noexcept;
LogLevel log_level() noexcept;

// Where log lines go instead of stderr. Both functions may be called from any thread.
struct LogSink {
  bool (*enabled)(LogLevel l) noexcept;
  void (*write)(LogLevel l, const char* line) noexcept;  // one line, no newline
};
// nullptr: back to plain stderr. The sink must outlive its installation.
void set_log_sink(const LogSink* sink) noexcept;
// Whether a line at level l would be printed (the sink's filter, or set_log_level's).
bool log_enabled(LogLevel l) noexcept;
[[gnu::format(printf, 2, 3)]] void log(LogLevel l, const char* fmt, ...) noexcept;

}  // namespace rdmx

#define RDMX_LOG_ERR(...) ::rdmx::log(::rdmx::LogLevel::kError, __VA_ARGS__)
#define RDMX_LOG_WARN(...) ::rdmx::log(::rdmx::LogLevel::kWarn, __VA_ARGS__)
#define RDMX_LOG_INFO(...) ::rdmx::log(::rdmx::LogLevel::kInfo, __VA_ARGS__)
#define RDMX_LOG_DEBUG(...) ::rdmx::log(::rdmx::LogLevel::kDebug, __VA_ARGS__)
