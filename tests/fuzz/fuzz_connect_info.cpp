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
    const ConnectInfoBytes again = encode_connect_info(r.value());
    if (std::memcmp(again.data(), buf.get(), 46) != 0) __builtin_trap();  // reserved may differ
  }
  // The same bytes as text.
  auto h =
      decode_connect_info_hex(std::string_view(reinterpret_cast<const char*>(buf.get()), size));
  if (!h.ok() && h.error().code != Errc::kProtocol) __builtin_trap();
  return 0;
}
