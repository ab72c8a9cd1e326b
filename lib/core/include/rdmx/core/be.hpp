// Strong big-endian field types: a Be32 cannot be assigned from or read as a
// host-order integer without an explicit conversion, so a missing byte swap does not compile.
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace rdmx {

namespace detail {
// Byte swap by size, for any unsigned integer type (mlx5dv.h's __be64 is unsigned long long,
// uint64_t is unsigned long: both must work).
template <class T>
constexpr T bswap(T v) noexcept {
  static_assert(std::is_unsigned_v<T>);
  if constexpr (sizeof(T) == 1) {
    return v;
  } else if constexpr (sizeof(T) == 2) {
    return __builtin_bswap16(v);
  } else if constexpr (sizeof(T) == 4) {
    return __builtin_bswap32(v);
  } else {
    static_assert(sizeof(T) == 8);
    return __builtin_bswap64(v);
  }
}
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "rdmx assumes a little-endian host");
}  // namespace detail

template <class T>
class Be {
 public:
  constexpr Be() noexcept = default;
  // From a host-order value.
  static constexpr Be from_host(T host) noexcept { return Be(detail::bswap(host), 0); }
  // From the raw (already big-endian) bits, e.g. read out of a WQE.
  static constexpr Be from_raw(T raw) noexcept { return Be(raw, 0); }
  constexpr T host() const noexcept { return detail::bswap(raw_); }
  constexpr T raw() const noexcept { return raw_; }
  friend constexpr bool operator==(Be a, Be b) noexcept { return a.raw_ == b.raw_; }

 private:
  constexpr Be(T raw, int) noexcept : raw_(raw) {}
  T raw_ = 0;
};

using Be16 = Be<uint16_t>;
using Be32 = Be<uint32_t>;
using Be64 = Be<uint64_t>;
static_assert(sizeof(Be64) == 8 && sizeof(Be32) == 4 && sizeof(Be16) == 2);

// Store/load a host value as big-endian into a field of the mlx5dv.h structs (whose __be types
// are plain integers). These are the only places the project swaps bytes for the wire.
template <class T>
inline void store_be(T* field, std::type_identity_t<T> host) noexcept {
  *field = detail::bswap(host);
}
template <class T, class U>
requires(sizeof(T) == sizeof(U)) inline void store_be(T* field, Be<U> v) noexcept {
  *field = v.raw();
}
template <class T>
inline T load_be(const T* field) noexcept {
  return detail::bswap(*field);
}

}  // namespace rdmx
