// libFuzzer target: emu's RoCE v2 parser (drivers/mlx5/emu/roce.hpp) on any bytes, as the network
// could deliver them. It must never read outside the input (ASan: an exact-size heap copy), a
// packet it accepts lies inside the input and re-encodes to a packet that decodes to the same
// fields, and the PSN classification is total. Input byte 0 bit 0 set: the rest gets a valid
// ICRC before parsing, so the header checks behind the ICRC are explored too.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>

#include "roce.hpp"

namespace roce = rdmx::emu::roce;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const bool seal = data[0] & 1;
  ++data, --size;
  std::unique_ptr<uint8_t[]> buf(new uint8_t[size ? size : 1]);  // exact size: ASan sees overreads
  if (size) std::memcpy(buf.get(), data, size);
  if (seal && size >= roce::kIpv4Len + roce::kUdpLen + roce::kBthLen + roce::kIcrcLen) {
    const size_t udp = (size_t{buf[24]} << 8) | buf[25];
    const size_t end = roce::kIpv4Len + udp;
    if (udp >= roce::kUdpLen + roce::kBthLen + roce::kIcrcLen && end <= size) {
      const uint32_t c = roce::icrc(buf.get(), end);
      for (int i = 0; i < 4; ++i) buf[end - 4 + i] = uint8_t(c >> (8 * i));
    }
  }
  roce::Packet p;
  const roce::Drop d = roce::decode(buf.get(), size, &p);
  if (d >= roce::Drop::kCount) __builtin_trap();
  if (d != roce::Drop::kNone) return 0;
  if (p.payload < buf.get() || p.payload + p.payload_len + p.pad > buf.get() + size)
    __builtin_trap();
  const uint8_t f = roce::opcode_flags(p.opcode);
  if (!(f & roce::kOpKnown) || (!(f & roce::kHasPayload) && p.payload_len)) __builtin_trap();
  (void)roce::classify_psn(p.psn, 0xFFFFF0);
  // Re-encode what was understood and decode it again.
  uint8_t out[4096 + roce::kMaxOverhead];
  if (roce::wire_len(p) > sizeof out) return 0;
  const size_t n = roce::encode(p, out, sizeof out);
  if (n != roce::wire_len(p)) __builtin_trap();
  roce::Packet q;
  if (roce::decode(out, n, &q) != roce::Drop::kNone) __builtin_trap();
  if (q.opcode != p.opcode || q.psn != p.psn || q.dqpn != p.dqpn || q.se != p.se ||
      q.ack_req != p.ack_req || q.payload_len != p.payload_len || q.reth_va != p.reth_va ||
      q.reth_rkey != p.reth_rkey || q.reth_len != p.reth_len || q.aeth_msn != p.aeth_msn ||
      q.aeth_syndrome != p.aeth_syndrome || q.imm != p.imm || q.ieth != p.ieth ||
      q.src_ip != p.src_ip || q.dst_ip != p.dst_ip || q.ip_id != p.ip_id || q.sport != p.sport ||
      std::memcmp(q.payload, p.payload, p.payload_len) != 0)
    __builtin_trap();
  return 0;
}
