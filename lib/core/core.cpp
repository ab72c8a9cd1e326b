#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include <rdmx/core/assert.hpp>
#include <rdmx/core/log.hpp>
#include <rdmx/core/result.hpp>

namespace rdmx {

namespace detail {
void assert_fail(const char* expr, const char* file, int line) noexcept {
  std::fprintf(stderr, "rdmx: assertion failed: %s (%s:%d)\n", expr, file, line);
  std::abort();
}
}  // namespace detail

std::string_view errc_name(Errc e) noexcept {
  switch (e) {
    case Errc::kOk:
      return "ok";
    case Errc::kInvalidArgument:
      return "invalid-argument";
    case Errc::kOutOfRange:
      return "out-of-range";
    case Errc::kTooManyPages:
      return "too-many-pages";
    case Errc::kNotInArena:
      return "not-in-arena";
    case Errc::kNoWindow:
      return "no-window";
    case Errc::kNotMapped:
      return "not-mapped";
    case Errc::kWrongCore:
      return "wrong-core";
    case Errc::kNoRoom:
      return "no-room";
    case Errc::kQpError:
      return "qp-error";
    case Errc::kNoDevice:
      return "no-device";
    case Errc::kDeviceError:
      return "device-error";
    case Errc::kNoMemory:
      return "no-memory";
    case Errc::kUnsupported:
      return "unsupported";
    case Errc::kBusy:
      return "busy";
    case Errc::kTimeout:
      return "timeout";
    case Errc::kState:
      return "bad-state";
    case Errc::kProtocol:
      return "protocol";
  }
  return "unknown";
}

Error make_error(Errc code, std::string message) {
  return Error{code, std::move(message)};
}

Error add_context(Error e, std::string_view what) {
  if (what.empty()) return e;
  std::string m;
  m.reserve(what.size() + 2 + e.message.size());
  m.append(what).append(": ").append(e.message);
  e.message = std::move(m);
  return e;
}

namespace {
std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::atomic<const LogSink*> g_sink{nullptr};
}  // namespace

void set_log_level(LogLevel l) noexcept {
  g_level.store(l, std::memory_order_relaxed);
}
LogLevel log_level() noexcept {
  return g_level.load(std::memory_order_relaxed);
}
void set_log_sink(const LogSink* sink) noexcept {
  g_sink.store(sink, std::memory_order_release);
}

bool log_enabled(LogLevel l) noexcept {
  if (const LogSink* s = g_sink.load(std::memory_order_acquire)) return s->enabled(l);
  return static_cast<int>(l) <= static_cast<int>(log_level());
}

void log(LogLevel l, const char* fmt, ...) noexcept {
  const LogSink* sink = g_sink.load(std::memory_order_acquire);
  if (sink ? !sink->enabled(l) : static_cast<int>(l) > static_cast<int>(log_level())) return;
  char line[1024];
  va_list ap;
  va_start(ap, fmt);
  std::vsnprintf(line, sizeof line, fmt, ap);
  va_end(ap);
  if (sink) {
    sink->write(l, line);
    return;
  }
  static const char* const kNames[] = {"ERR", "WARN", "INFO", "DEBUG"};
  std::fprintf(stderr, "rdmx %s: %s\n", kNames[static_cast<int>(l)], line);
}

}  // namespace rdmx
