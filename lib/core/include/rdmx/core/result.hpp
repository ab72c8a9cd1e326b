// Control-path error handling: Errc (data path) and Result<T> (setup path).
//
// The data path returns counts or a bare Errc; the control path returns Result<T>, which
// carries either a value or an Error (code + human-readable message). No exceptions are thrown
// from lib/ or drivers/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

#include <rdmx/core/assert.hpp>

namespace rdmx {

// Error codes shared by every layer. Keep names stable: they appear in stats and in the C API.
enum class Errc : int {
  kOk = 0,
  kInvalidArgument,  // a malformed argument (bad flags, zero count, ...)
  kOutOfRange,       // offset/length/index beyond a limit
  kTooManyPages,     // more chunk pages than the window holds
  kNotInArena,       // a page outside the registered arena or misaligned
  kNoWindow,         // window cache and depot exhausted
  kNotMapped,        // unmap of a window that is not mapped
  kWrongCore,        // operation on an object owned by another poll core
  kNoRoom,           // send queue has no room for the WQE (retry after poll)
  kQpError,          // queue pair is in the error state
  kNoDevice,         // no matching RDMA device
  kDeviceError,      // the device or a verbs call failed
  kNoMemory,         // allocation failed at setup
  kUnsupported,      // feature not supported by this device/backend
  kBusy,             // resource in use
  kTimeout,          // a bounded wait expired
  kState,            // operation not allowed in the current state
  kProtocol,         // bytes from a peer (connect info, rendezvous) malformed or foreign
};
inline constexpr int kNumErrcValues = static_cast<int>(Errc::kProtocol) + 1;

// Short stable name of an Errc, e.g. "too-many-pages".
std::string_view errc_name(Errc e) noexcept;

struct Error {
  Errc code = Errc::kOk;
  std::string message;
};

[[gnu::cold]] Error make_error(Errc code, std::string message);

// Minimal expected-like type (std::expected is C++23; we target C++20).
template <class T>
class [[nodiscard]] Result {
 public:
  Result(T v) : v_(std::in_place_index<0>, std::move(v)) {}      // NOLINT(implicit)
  Result(Error e) : v_(std::in_place_index<1>, std::move(e)) {}  // NOLINT(implicit)

  bool ok() const noexcept { return v_.index() == 0; }
  explicit operator bool() const noexcept { return ok(); }

  T& value() & {
    RDMX_ASSERT(ok());
    return std::get<0>(v_);
  }
  T&& value() && {
    RDMX_ASSERT(ok());
    return std::get<0>(std::move(v_));
  }
  const T& value() const& {
    RDMX_ASSERT(ok());
    return std::get<0>(v_);
  }
  T* operator->() { return &value(); }
  T& operator*() & { return value(); }

  const Error& error() const& {
    RDMX_ASSERT(!ok());
    return std::get<1>(v_);
  }
  Error&& error() && {
    RDMX_ASSERT(!ok());
    return std::get<1>(std::move(v_));
  }

 private:
  std::variant<T, Error> v_;
};

// Result of an operation with no value.
class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(Error e) : err_(std::move(e)) {}  // NOLINT(implicit)
  static Status ok_status() { return Status(); }
  bool ok() const noexcept { return err_.code == Errc::kOk; }
  explicit operator bool() const noexcept { return ok(); }
  const Error& error() const { return err_; }

 private:
  Error err_;
};

// ---- Context and propagation (the one spelling for setup-path errors) ----------------------
//
//   return add_context(r.error(), "arena " + name);   // "arena a: <what went wrong>"
//   RDMX_TRY(dev.connect(qp, remote));                  // a failed Status/Result returns
//   RDMX_TRY(dev.connect(qp, remote), "connect c-p");  // ... with "connect c-p: " in front
//   RDMX_TRY_ASSIGN(auto arena, mem::Arena::create(dev, ac), "arena");
//
// The code is kept; context reads outermost first, like a call chain.

[[gnu::cold]] Error add_context(Error e, std::string_view what);

namespace detail {
[[gnu::cold]] inline Error try_error(const Status& s) {
  return s.error();
}
[[gnu::cold]] inline Error try_error(const Status& s, std::string_view what) {
  return add_context(s.error(), what);
}
template <class T>
[[gnu::cold]] Error try_error(Result<T>&& r) {
  return std::move(r).error();
}
template <class T>
[[gnu::cold]] Error try_error(Result<T>&& r, std::string_view what) {
  return add_context(std::move(r).error(), what);
}
}  // namespace detail

}  // namespace rdmx

#define RDMX_CAT2_(a, b) a##b
#define RDMX_CAT_(a, b) RDMX_CAT2_(a, b)

// Evaluates a Status or Result expression; on failure returns its Error (with optional context,
// a std::string_view-convertible expression evaluated only on failure) from the enclosing
// function, whose return type is Status, Result<U> or Error.
#define RDMX_TRY(expr, ...)                                                                \
  do {                                                                                     \
    auto&& rdmx_try_r_ = (expr);                                                           \
    if (!rdmx_try_r_.ok())                                                                 \
      return ::rdmx::detail::try_error(std::move(rdmx_try_r_) __VA_OPT__(, ) __VA_ARGS__); \
  } while (0)

// `lhs = value of expr` for a Result expression, or returns its Error as RDMX_TRY does. lhs may
// declare (`auto x`, `std::unique_ptr<T> p`) or assign (`p`). It expands to several statements
// (a declaration among them): write it in a block, never as the body of an unbraced if/for.
#define RDMX_TRY_ASSIGN(lhs, expr, ...) \
  RDMX_TRY_ASSIGN_(RDMX_CAT_(rdmx_try_v_, __LINE__), lhs, expr __VA_OPT__(, ) __VA_ARGS__)
#define RDMX_TRY_ASSIGN_(tmp, lhs, expr, ...)                                                 \
  auto tmp = (expr);                                                                          \
  if (!tmp.ok()) return ::rdmx::detail::try_error(std::move(tmp) __VA_OPT__(, ) __VA_ARGS__); \
  lhs = std::move(tmp).value()
