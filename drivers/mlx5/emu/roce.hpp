// RoCE v2 packet codec for the emulated device: IPv4 + UDP (destination port 4791) + the
// InfiniBand transport headers of the RC service (BTH, RETH, AETH, ImmDt, IETH) + the invariant
// CRC. Encoding writes the whole IPv4 packet (no Ethernet header), because the ICRC covers the IP
// header and only the writer of the exact header can compute it (doc/guides/emu.md, "RoCEv2
// wire"). Decoding validates everything a NIC checks before the QP state is consulted and says
// why a packet is dropped; nothing here allocates, locks or makes a system call.
//
// Sources: IBTA InfiniBand Architecture Specification vol. 1, chapter 9 (transport headers,
// 9.2-9.3), Annex A17 "RoCEv2" (UDP port 4791, ICRC over the masked IP/UDP headers); Linux
// drivers/infiniband/sw/rxe/rxe_hdr.h (header layouts), rxe_opcode.c (headers per opcode),
// rxe_icrc.c (ICRC), rxe_recv.c (hdr_check); include/rdma/ib_pack.h (opcodes); Wireshark
// epan/dissectors/packet-infiniband.c (decoding used to check our output).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>

namespace rdmx::emu::roce {

inline constexpr uint16_t kUdpPort = 4791;  // IBTA Annex A17 (ROCE_V2_UDP_DPORT in rxe)
inline constexpr size_t kIpv4Len = 20;      // IHL 5: no IP options are sent or accepted
inline constexpr size_t kUdpLen = 8;
inline constexpr size_t kBthLen = 12;
inline constexpr size_t kRethLen = 16;
inline constexpr size_t kAethLen = 4;
inline constexpr size_t kImmLen = 4;
inline constexpr size_t kIethLen = 4;
inline constexpr size_t kIcrcLen = 4;
// Most header bytes of one packet (WRITE_ONLY_WITH_IMMEDIATE) plus the ICRC.
inline constexpr size_t kMaxOverhead = kIpv4Len + kUdpLen + kBthLen + kRethLen + kImmLen + kIcrcLen;
inline constexpr uint16_t kDefaultPkey = 0xFFFF;
inline constexpr uint32_t kPsnMask = 0xFFFFFF;

// RC opcodes (transport bits 7:5 = 000); include/rdma/ib_pack.h, IBTA vol. 1 9.2.1 (Table 35).
// Atomics are not modelled by emu and decode as unsupported.
enum Opcode : uint8_t {
  kSendFirst = 0x00,
  kSendMiddle = 0x01,
  kSendLast = 0x02,
  kSendLastImm = 0x03,
  kSendOnly = 0x04,
  kSendOnlyImm = 0x05,
  kWriteFirst = 0x06,
  kWriteMiddle = 0x07,
  kWriteLast = 0x08,
  kWriteLastImm = 0x09,
  kWriteOnly = 0x0A,
  kWriteOnlyImm = 0x0B,
  kReadRequest = 0x0C,
  kReadRespFirst = 0x0D,
  kReadRespMiddle = 0x0E,
  kReadRespLast = 0x0F,
  kReadRespOnly = 0x10,
  kAcknowledge = 0x11,
  kSendLastInv = 0x16,
  kSendOnlyInv = 0x17,
};

// Which headers follow the BTH, in wire order RETH, AETH, ImmDt, IETH (rxe_opcode.c).
enum : uint8_t {
  kHasReth = 1,
  kHasAeth = 2,
  kHasImm = 4,
  kHasIeth = 8,
  kHasPayload = 16,  // the opcode may carry data
  kIsRequest = 32,   // requester -> responder
  kOpKnown = 128,
};
// 0 for an opcode emu does not speak.
uint8_t opcode_flags(uint8_t opcode) noexcept;
const char* opcode_name(uint8_t opcode) noexcept;
size_t ext_len(uint8_t flags) noexcept;  // bytes of RETH/AETH/ImmDt/IETH for these flags

// AETH syndrome (IBTA vol. 1 9.3.5, Table 43; rxe_hdr.h enum aeth_syndrome): bits 6:5 type.
inline constexpr uint8_t kAethAck = 0x1F;  // ACK, credit field "unlimited" as rxe sends
inline constexpr uint8_t kAethRnr = 0x20;  // | 5-bit RNR timer code
inline constexpr uint8_t kAethNakPsn = 0x60;
inline constexpr uint8_t kAethNakInvReq = 0x61;
inline constexpr uint8_t kAethNakRemAccess = 0x62;
inline constexpr uint8_t kAethNakRemOp = 0x63;
inline constexpr uint8_t aeth_type(uint8_t s) noexcept {
  return static_cast<uint8_t>((s >> 5) & 3);  // 0 ACK, 1 RNR NAK, 3 NAK
}

// One packet, headers in host order. The payload is not copied: encode() reads `payload`,
// decode() points it into the received bytes.
struct Packet {
  // IPv4 / UDP
  uint32_t src_ip = 0;  // host order
  uint32_t dst_ip = 0;
  uint16_t ip_id = 0;  // as sent: covered by the ICRC
  uint8_t tos = 0;
  uint8_t ttl = 64;
  uint16_t sport = 0xC000;
  // BTH
  uint8_t opcode = 0;
  bool se = false;
  bool mig = false;
  uint8_t pad = 0;  // decode: pad count received; encode: derived from payload_len
  uint16_t pkey = kDefaultPkey;
  uint32_t dqpn = 0;
  bool ack_req = false;
  uint32_t psn = 0;
  // extension headers (valid per opcode_flags)
  uint64_t reth_va = 0;
  uint32_t reth_rkey = 0;
  uint32_t reth_len = 0;  // DMA length: the whole (remaining) message
  uint8_t aeth_syndrome = 0;
  uint32_t aeth_msn = 0;
  uint32_t imm = 0;   // ImmDt, host order of the big-endian wire value
  uint32_t ieth = 0;  // R_Key to invalidate
  const uint8_t* payload = nullptr;
  uint32_t payload_len = 0;  // without pad
};

// Bytes of the IPv4 packet encode() writes for `p`.
size_t wire_len(const Packet& p) noexcept;
// Where encode() puts the payload of `p`.
inline size_t payload_offset(const Packet& p) noexcept {
  return wire_len(p) - kIcrcLen - ((4 - (p.payload_len & 3)) & 3) - p.payload_len;
}
// Writes the IPv4 packet (IP + UDP + BTH + headers + payload + zero pad + ICRC) into out and
// returns its length, or 0 when cap is too small or the opcode is unknown. The IP header
// checksum is filled (rte_ipv4_cksum), the UDP checksum is 0 as rxe sends over IPv4. Without
// `with_icrc` the ICRC field is left 0 (a carrier with no medium to corrupt: Carrier::icrc).
// A null `payload` leaves the payload bytes as they are in `out` (put there before, at
// payload_offset()).
size_t encode(const Packet& p, uint8_t* out, size_t cap, bool with_icrc = true) noexcept;

// ICRC of the IPv4 packet `ip` whose UDP datagram ends at `udp_end` bytes from its start (the
// last 4 bytes of the datagram are the ICRC itself and are not covered). IBTA Annex A17
// (A17.4.1.1 / rxe_icrc.c): 8 bytes of 1s for the absent LRH, then the IPv4 header with TOS, TTL
// and header checksum set to 1s, the UDP header with its checksum set to 1s, the BTH with byte 4
// (FECN/BECN/reserved) set to 1s, then everything else up to the ICRC; CRC-32 (IEEE 802.3, zlib)
// stored least-significant byte first.
uint32_t icrc(const uint8_t* ip, size_t udp_end) noexcept;

// Why a received packet was dropped (counted per reason, never delivered).
enum class Drop : uint8_t {
  kNone = 0,
  kNotRoce,    // not IPv4 / UDP / port 4791, fragment, IP options, lengths inconsistent
  kTruncated,  // shorter than the BTH + the opcode's headers + ICRC, or pad beyond payload
  kBadIcrc,    // ICRC mismatch
  kBadOpcode,  // not RC, or an opcode emu does not speak
  kBadHeader,  // TVer != 0, P_Key mismatch, payload/pad on an opcode without data
  kNoQp,       // destination QP does not exist (or is QP0/QP1)
  kPsnWindow,  // a response (ACK/NAK/READ response) for a PSN the requester has not sent
  kNotPeer,    // source address not the QP's peer, or destination not this device's address
  kCount
};
const char* drop_name(Drop d) noexcept;

// Parses the IPv4 packet [ip, ip+len) (trailing bytes beyond the IP total length, such as
// Ethernet padding, are ignored). kNone: *out holds the packet. Without `check_icrc` the ICRC
// field is not read (a carrier with no medium to corrupt: Carrier::icrc).
Drop decode(const uint8_t* ip, size_t len, Packet* out, bool check_icrc = true) noexcept;

// 24-bit PSN arithmetic (IBTA vol. 1 9.7.1; rxe_verbs.h psn_compare): a - b as a signed value in
// [-2^23, 2^23).
inline int32_t psn_diff(uint32_t a, uint32_t b) noexcept {
  return static_cast<int32_t>((a - b) << 8) >> 8;
}
inline uint32_t psn_add(uint32_t a, int32_t d) noexcept {
  return (a + static_cast<uint32_t>(d)) & kPsnMask;
}

// Where a request's PSN falls against the responder's expected PSN (ePSN): the PSN space is split
// in half around it (rxe_verbs.h psn_compare; rxe_resp.c check_psn). Every PSN is one of these;
// none is "too far" to answer: a requester never has 2^23 PSNs outstanding.
enum class PsnClass : uint8_t {
  kExpected,   // = ePSN
  kDuplicate,  // 1 .. 2^23 behind: not executed again; SEND/WRITE re-ACKed, READ replayed
  kAhead,      // 1 .. 2^23 - 1 ahead: a packet was lost (one NAK PSN sequence error), dropped
};
inline PsnClass classify_psn(uint32_t psn, uint32_t epsn) noexcept {
  const int32_t d = psn_diff(psn, epsn);
  if (d == 0) return PsnClass::kExpected;
  return d < 0 ? PsnClass::kDuplicate : PsnClass::kAhead;
}

// pcap writer (LINKTYPE_RAW: each record is one IPv4 packet, exactly the bytes encode() wrote).
class Pcap {
 public:
  Pcap() = default;
  ~Pcap();
  Pcap(const Pcap&) = delete;
  Pcap& operator=(const Pcap&) = delete;
  bool open(const char* path) noexcept;  // false with errno set
  bool write(const uint8_t* ip, size_t len, uint64_t t_ns) noexcept;
  void close() noexcept;
  bool is_open() const noexcept { return f_ != nullptr; }

 private:
  std::FILE* f_ = nullptr;
};

}  // namespace rdmx::emu::roce
