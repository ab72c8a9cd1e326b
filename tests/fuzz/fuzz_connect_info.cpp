// libFuzzer target: the connection-info decoder (rdmx/mlx5/connect_info.hpp) on any bytes, as a
// peer could send them. It must never read outside the input (ASan: an exact-size heap copy),
// every refusal is one kProtocol line, and whatever it accepts re-encodes to the same bytes.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string_view>

#include <rdmx/mlx5/connect_info.hpp>

using namespace rdmx;
using namespace rdmx::mlx5;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);  // exact size: ASan sees overreads
  if (size) std::memcpy(buf.get(), data, size);
  auto r = decode_connect_info(std::span<const uint8_t>(buf.get(), size));
  if (!r.ok()) {
    if (r.error().code != Errc::kProtocol) __builtin_trap();
    if (r.error().message.find('\n') != std::string::npos) __builtin_trap();
  } else {
    if (size < kConnectInfoBytes) __builtin_trap();
    // Re-encoding gives the same fields. The reserved bytes (6..7, 46..51) are ignored on decode
    // and written 0, so they may differ, and then the CRC too: compare the fields only.
    const ConnectInfoBytes again = encode_connect_info(r.value());
    if (std::memcmp(again.data(), buf.get(), 6) != 0) __builtin_trap();
    if (std::memcmp(again.data() + 8, buf.get() + 8, 46 - 8) != 0) __builtin_trap();
    if (decode_connect_info(again).ok() != true) __builtin_trap();
  }
  // The same bytes as text.
  auto h =
      decode_connect_info_hex(std::string_view(reinterpret_cast<const char*>(buf.get()), size));
  if (!h.ok() && h.error().code != Errc::kProtocol) __builtin_trap();
  return 0;
}
