// libFuzzer target: the RPC-over-RDMA header decoder (rdmx/rpcrdma/codec.hpp) on any bytes, as a
// peer could send them, under each Role. It must never read outside the input (ASan: an
// exact-size heap copy), a refusal leaves the output untouched and names an offset inside the
// input, and whatever it accepts re-encodes to the same header bytes and decodes to the same
// Header.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <rdmx/rpcrdma/codec.hpp>

using namespace rdmx::rpcrdma;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  // The first byte picks the role and whether the threshold is the default or larger.
  const Role role = static_cast<Role>(data[0] % 3);
  const uint32_t threshold = (data[0] & 0x80) ? 4096 : kDefaultInlineThreshold;
  ++data;
  --size;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);  // exact size: ASan sees overreads
  if (size) std::memcpy(buf.get(), data, size);
  const std::span<const uint8_t> msg(buf.get(), size);

  static Header h, before;
  std::memset(static_cast<void*>(&h), 0x5a, sizeof(h));
  std::memcpy(static_cast<void*>(&before), &h, sizeof(h));
  const CodecResult r = decode(msg, h, role, threshold);
  if (!r.ok()) {
    if (std::memcmp(&before, &h, sizeof(h)) != 0) __builtin_trap();  // output touched
    if (r.error == Error::kTooLong ? size <= threshold : r.length > size) __builtin_trap();
    if (r.error == Error::kNoRoom || r.error == Error::kChunksInError) __builtin_trap();
    return 0;
  }
  if (r.length > size || r.length % 4) __builtin_trap();
  // decode(encode(x)) == x, and encode(decode(bytes)) == bytes (XDR has one encoding).
  static uint8_t out[4096];
  const CodecResult e = encode(h, out, role, threshold);
  if (!e.ok() || e.length != r.length || e.length != encoded_size(h)) __builtin_trap();
  if (std::memcmp(out, buf.get(), r.length) != 0) __builtin_trap();
  static Header again;
  const CodecResult d = decode({out, e.length}, again, role, threshold);
  if (!d.ok() || d.length != e.length || !(again == h)) __builtin_trap();
  return 0;
}
