// libFuzzer target: rdmx's WQE decoder (prm::decode_wqe) on arbitrary send-queue bytes. It must
// never read outside the ring (ASan: the ring is an exact-size heap block), never report a WQE
// longer than the ring, and every field it returns must stay inside its own arrays and the ring.
//
// Input layout: byte 0 = log2 of the ring size in WQEBBs (mod 7: 1..64 WQEBBs), bytes 1-2 = the
// slot to decode (any value: the decoder takes it modulo the ring), the rest = ring bytes (the
// ring is zero-filled past them).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include <rdmx/mlx5/prm/decode.hpp>

using namespace rdmx::mlx5;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 3) return 0;
  const uint32_t n_wqebb = 1u << (data[0] % 7);
  const uint32_t slot = static_cast<uint32_t>(data[1]) | (static_cast<uint32_t>(data[2]) << 8);
  const size_t ring_bytes = size_t{n_wqebb} * MLX5_SEND_WQE_BB;
  std::unique_ptr<uint8_t[]> ring(new uint8_t[ring_bytes]);  // exact size: ASan sees overreads
  const size_t n = std::min(size - 3, ring_bytes);
  std::memcpy(ring.get(), data + 3, n);
  std::memset(ring.get() + n, 0, ring_bytes - n);

  static prm::DecodedWqe w;  // large: keep it off the stack
  w = prm::DecodedWqe{};
  const prm::DecodeError e = prm::decode_wqe(ring.get(), n_wqebb, slot, w);
  (void)prm::decode_error_name(e);
  if (e != prm::DecodeError::kOk) return 0;
  if (w.n_wqebb == 0 || w.n_wqebb > n_wqebb) __builtin_trap();
  if (w.ctrl.ds == 0) __builtin_trap();
  if (w.n_klm > prm::kMaxDecodedKlm || w.n_sge > prm::kMaxDecodedSges) __builtin_trap();
  if (w.has_inline) {
    // Inline bytes lie inside the WQE, which lies inside the ring.
    if (w.inline_len > w.n_wqebb * MLX5_SEND_WQE_BB) __builtin_trap();
    if (w.inline_ring_offset >= ring_bytes) __builtin_trap();
    std::unique_ptr<uint8_t[]> buf(new uint8_t[w.inline_len + 1]);
    prm::copy_from_ring(ring.get(), n_wqebb, w.inline_ring_offset, buf.get(), w.inline_len);
  }
  // Decoding the same slot twice gives the same answer (pure function).
  static prm::DecodedWqe w2;
  w2 = prm::DecodedWqe{};
  if (prm::decode_wqe(ring.get(), n_wqebb, slot, w2) != e || w2.n_wqebb != w.n_wqebb ||
      w2.n_sge != w.n_sge || w2.n_klm != w.n_klm || w2.inline_len != w.inline_len)
    __builtin_trap();
  return 0;
}
