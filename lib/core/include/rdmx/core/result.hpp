// Control-path error handling: Errc (data path) and Result<T> (setup path).
//
// The data path returns counts or a bare Errc; the control path returns Result<T>, which
// carries either a value or an Error (code + human-readable message). No exceptions are thrown
// from lib/ or drivers/ (STYLE.md rule 10).
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
  kInvalidArgument,   // a malformed argument (bad flags, zero count, ...)
  kOutOfRange,        // offset/length/index beyond a limit
  kTooManyPages,      // more chunk pages than the window holds
  kNotInArena,        // a page outside the registered arena or misaligned
  kNoWindow,          // window cache and depot exhausted
  kNotMapped,         // unmap of a window that is not mapped
  kWrongCore,         // operation on an object owned by another poll core
  kNoRoom,            // send queue has no room for the WQE (retry after poll)
  kQpError,           // queue pair is in the error state
  kNoDevice,          // no matching RDMA device
  kDeviceError,       // the device or a verbs call failed
  kNoMemory,          // allocation failed at setup
  kUnsupported,       // feature not supported by this device/backend
  kBusy,              // resource in use
  kTimeout,           // a bounded wait expired
  kState,             // operation not allowed in the current state
};

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
  Result(T v) : v_(std::in_place_index<0>, std::move(v)) {}  // NOLINT(implicit)
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

}  // namespace rdmx
