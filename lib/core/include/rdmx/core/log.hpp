// Setup-path logging. Goes to stderr (and to rte_log's stream when the EAL is up, through the
// runtime layer). Never used on the hot path: the data path counts, it does not print.
#pragma once

#include <cstdarg>

namespace rdmx {

enum class LogLevel : int { kError = 0, kWarn = 1, kInfo = 2, kDebug = 3 };

void set_log_level(LogLevel l) noexcept;
LogLevel log_level() noexcept;
[[gnu::format(printf, 2, 3)]] void log(LogLevel l, const char* fmt, ...) noexcept;

}  // namespace rdmx

#define RDMX_LOG_ERR(...) ::rdmx::log(::rdmx::LogLevel::kError, __VA_ARGS__)
#define RDMX_LOG_WARN(...) ::rdmx::log(::rdmx::LogLevel::kWarn, __VA_ARGS__)
#define RDMX_LOG_INFO(...) ::rdmx::log(::rdmx::LogLevel::kInfo, __VA_ARGS__)
#define RDMX_LOG_DEBUG(...) ::rdmx::log(::rdmx::LogLevel::kDebug, __VA_ARGS__)
