#include "roce.hpp"

#include <netinet/in.h>
#include <zlib.h>

#include <rdmx/core/dpdk_include.hpp>

RDMX_DPDK_INCLUDES_BEGIN
#include <rte_byteorder.h>
#include <rte_ip.h>
#include <rte_udp.h>
RDMX_DPDK_INCLUDES_END

#include <cstring>

namespace rdmx::emu::roce {

namespace {

inline void put16(uint8_t* p, uint16_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
inline void put24(uint8_t* p, uint32_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 16);
  p[1] = static_cast<uint8_t>(v >> 8);
  p[2] = static_cast<uint8_t>(v);
}
inline void put32(uint8_t* p, uint32_t v) noexcept {
  put16(p, static_cast<uint16_t>(v >> 16));
  put16(p + 2, static_cast<uint16_t>(v));
}
inline uint16_t get16(const uint8_t* p) noexcept {
  return static_cast<uint16_t>((p[0] << 8) | p[1]);
}
inline uint32_t get24(const uint8_t* p) noexcept {
  return (uint32_t{p[0]} << 16) | (uint32_t{p[1]} << 8) | p[2];
}
inline uint32_t get32(const uint8_t* p) noexcept {
  return (uint32_t{get16(p)} << 16) | get16(p + 2);
}

struct OpInfo {
  uint8_t flags;
  const char* name;
};

// rxe_opcode.c rxe_opcode[] (RC part) and include/rdma/ib_pack.h; names as Wireshark prints
// them.
constexpr uint8_t kReq = kOpKnown | kIsRequest;
constexpr OpInfo kOps[0x18] = {
    {kReq | kHasPayload, "SEND_FIRST"},
    {kReq | kHasPayload, "SEND_MIDDLE"},
    {kReq | kHasPayload, "SEND_LAST"},
    {kReq | kHasPayload | kHasImm, "SEND_LAST_WITH_IMMEDIATE"},
    {kReq | kHasPayload, "SEND_ONLY"},
    {kReq | kHasPayload | kHasImm, "SEND_ONLY_WITH_IMMEDIATE"},
    {kReq | kHasPayload | kHasReth, "RDMA_WRITE_FIRST"},
    {kReq | kHasPayload, "RDMA_WRITE_MIDDLE"},
    {kReq | kHasPayload, "RDMA_WRITE_LAST"},
    {kReq | kHasPayload | kHasImm, "RDMA_WRITE_LAST_WITH_IMMEDIATE"},
    {kReq | kHasPayload | kHasReth, "RDMA_WRITE_ONLY"},
    {kReq | kHasPayload | kHasReth | kHasImm, "RDMA_WRITE_ONLY_WITH_IMMEDIATE"},
    {kReq | kHasReth, "RDMA_READ_REQUEST"},
    {kOpKnown | kHasPayload | kHasAeth, "RDMA_READ_RESPONSE_FIRST"},
    {kOpKnown | kHasPayload, "RDMA_READ_RESPONSE_MIDDLE"},
    {kOpKnown | kHasPayload | kHasAeth, "RDMA_READ_RESPONSE_LAST"},
    {kOpKnown | kHasPayload | kHasAeth, "RDMA_READ_RESPONSE_ONLY"},
    {kOpKnown | kHasAeth, "ACKNOWLEDGE"},
    {0, "ATOMIC_ACKNOWLEDGE"},
    {0, "COMPARE_SWAP"},
    {0, "FETCH_ADD"},
    {0, "RESERVED_15"},
    {kReq | kHasPayload | kHasIeth, "SEND_LAST_WITH_INVALIDATE"},
    {kReq | kHasPayload | kHasIeth, "SEND_ONLY_WITH_INVALIDATE"},
};

// 8 bytes of 1s standing for the LRH that RoCEv2 does not carry (Annex A17; rxe_icrc.c).
constexpr uint8_t kLrhOnes[8] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF};

}  // namespace

uint8_t opcode_flags(uint8_t opcode) noexcept {
  return opcode < sizeof kOps / sizeof kOps[0] ? kOps[opcode].flags : 0;
}

const char* opcode_name(uint8_t opcode) noexcept {
  return opcode < sizeof kOps / sizeof kOps[0] ? kOps[opcode].name : "UNKNOWN";
}

size_t ext_len(uint8_t flags) noexcept {
  return ((flags & kHasReth) ? kRethLen : 0) + ((flags & kHasAeth) ? kAethLen : 0) +
         ((flags & kHasImm) ? kImmLen : 0) + ((flags & kHasIeth) ? kIethLen : 0);
}

size_t wire_len(const Packet& p) noexcept {
  const uint32_t pad = (4 - (p.payload_len & 3)) & 3;
  return kIpv4Len + kUdpLen + kBthLen + ext_len(opcode_flags(p.opcode)) + p.payload_len + pad +
         kIcrcLen;
}

uint32_t icrc(const uint8_t* ip, size_t udp_end) noexcept {
  // Masked copy of the variant fields: IPv4 header, UDP header, BTH (the first 40 bytes).
  constexpr size_t kHead = kIpv4Len + kUdpLen + kBthLen;
  uint8_t head[kHead];
  std::memcpy(head, ip, kHead);
  head[1] = 0xFF;                       // type of service (DSCP + ECN)
  head[8] = 0xFF;                       // time to live
  head[10] = head[11] = 0xFF;           // header checksum
  head[kIpv4Len + 6] = 0xFF;            // UDP checksum
  head[kIpv4Len + 7] = 0xFF;            //
  head[kIpv4Len + kUdpLen + 4] = 0xFF;  // BTH FECN, BECN, reserved
  uLong c = crc32(0L, Z_NULL, 0);
  c = crc32(c, kLrhOnes, sizeof kLrhOnes);
  c = crc32(c, head, kHead);
  c = crc32(c, ip + kHead, static_cast<uInt>(udp_end - kIcrcLen - kHead));
  return static_cast<uint32_t>(c);
}

size_t encode(const Packet& p, uint8_t* out, size_t cap, bool with_icrc) noexcept {
  const uint8_t flags = opcode_flags(p.opcode);
  if (!(flags & kOpKnown)) return 0;
  if (!(flags & kHasPayload) && p.payload_len != 0) return 0;
  const size_t total = wire_len(p);
  if (total > cap || total > 0xFFFF) return 0;
  const uint32_t pad = (4 - (p.payload_len & 3)) & 3;

  auto* ip = reinterpret_cast<rte_ipv4_hdr*>(out);
  ip->version_ihl = RTE_IPV4_VHL_DEF;
  ip->type_of_service = p.tos;
  ip->total_length = rte_cpu_to_be_16(static_cast<uint16_t>(total));
  ip->packet_id = rte_cpu_to_be_16(p.ip_id);
  ip->fragment_offset = rte_cpu_to_be_16(RTE_IPV4_HDR_DF_FLAG);
  ip->time_to_live = p.ttl;
  ip->next_proto_id = IPPROTO_UDP;
  ip->hdr_checksum = 0;
  ip->src_addr = rte_cpu_to_be_32(p.src_ip);
  ip->dst_addr = rte_cpu_to_be_32(p.dst_ip);
  ip->hdr_checksum = rte_ipv4_cksum(ip);

  auto* udp = reinterpret_cast<rte_udp_hdr*>(out + kIpv4Len);
  udp->src_port = rte_cpu_to_be_16(p.sport);
  udp->dst_port = rte_cpu_to_be_16(kUdpPort);
  udp->dgram_len = rte_cpu_to_be_16(static_cast<uint16_t>(total - kIpv4Len));
  udp->dgram_cksum = 0;  // IPv4: no UDP checksum, as rxe (rxe_net.c prepare_udp_hdr)

  // BTH (IBTA vol. 1 9.2; rxe_hdr.h struct rxe_bth)
  uint8_t* b = out + kIpv4Len + kUdpLen;
  b[0] = p.opcode;
  b[1] = static_cast<uint8_t>((p.se ? 0x80 : 0) | (p.mig ? 0x40 : 0) | (pad << 4));  // TVer 0
  put16(b + 2, p.pkey);
  b[4] = 0;  // FECN, BECN, reserved
  put24(b + 5, p.dqpn & kPsnMask);
  b[8] = p.ack_req ? 0x80 : 0;
  put24(b + 9, p.psn & kPsnMask);
  uint8_t* h = b + kBthLen;
  if (flags & kHasReth) {
    put32(h, static_cast<uint32_t>(p.reth_va >> 32));
    put32(h + 4, static_cast<uint32_t>(p.reth_va));
    put32(h + 8, p.reth_rkey);
    put32(h + 12, p.reth_len);
    h += kRethLen;
  }
  if (flags & kHasAeth) {
    h[0] = p.aeth_syndrome;
    put24(h + 1, p.aeth_msn & kPsnMask);
    h += kAethLen;
  }
  if (flags & kHasImm) {
    put32(h, p.imm);
    h += kImmLen;
  }
  if (flags & kHasIeth) {
    put32(h, p.ieth);
    h += kIethLen;
  }
  if (p.payload_len && p.payload) std::memcpy(h, p.payload, p.payload_len);
  h += p.payload_len;
  for (uint32_t i = 0; i < pad; ++i) *h++ = 0;
  const uint32_t crc = with_icrc ? icrc(out, total) : 0;
  // Least-significant byte first (rxe_icrc.c rxe_icrc_generate stores a __le32).
  h[0] = static_cast<uint8_t>(crc);
  h[1] = static_cast<uint8_t>(crc >> 8);
  h[2] = static_cast<uint8_t>(crc >> 16);
  h[3] = static_cast<uint8_t>(crc >> 24);
  return total;
}

Drop decode(const uint8_t* ip, size_t len, Packet* out, bool check_icrc) noexcept {
  if (len < kIpv4Len) return Drop::kNotRoce;
  if (ip[0] != RTE_IPV4_VHL_DEF) return Drop::kNotRoce;  // IPv4, no options
  const size_t total = get16(ip + 2);
  if (total < kIpv4Len + kUdpLen || total > len) return Drop::kNotRoce;
  if (ip[9] != IPPROTO_UDP) return Drop::kNotRoce;
  if ((get16(ip + 6) & (RTE_IPV4_HDR_MF_FLAG | RTE_IPV4_HDR_OFFSET_MASK)) != 0)
    return Drop::kNotRoce;  // a fragment
  const uint8_t* u = ip + kIpv4Len;
  if (get16(u + 2) != kUdpPort) return Drop::kNotRoce;
  const size_t udp_len = get16(u + 4);
  if (udp_len < kUdpLen || kIpv4Len + udp_len > total) return Drop::kNotRoce;
  // Measure from the BTH with the UDP length (rxe "Fix packet length checks").
  if (udp_len < kUdpLen + kBthLen + kIcrcLen) return Drop::kTruncated;
  const size_t end = kIpv4Len + udp_len;
  if (check_icrc) {
    const uint32_t want = icrc(ip, end);
    const uint8_t* c = ip + end - kIcrcLen;
    const uint32_t got =
        uint32_t{c[0]} | (uint32_t{c[1]} << 8) | (uint32_t{c[2]} << 16) | (uint32_t{c[3]} << 24);
    if (want != got) return Drop::kBadIcrc;
  }

  const uint8_t* b = u + kUdpLen;
  Packet& p = *out;
  p = Packet{};
  p.src_ip = get32(ip + 12);
  p.dst_ip = get32(ip + 16);
  p.ip_id = get16(ip + 4);
  p.tos = ip[1];
  p.ttl = ip[8];
  p.sport = get16(u);
  p.opcode = b[0];
  p.se = (b[1] & 0x80) != 0;
  p.mig = (b[1] & 0x40) != 0;
  p.pad = (b[1] >> 4) & 3;
  p.pkey = get16(b + 2);
  p.dqpn = get24(b + 5);
  p.ack_req = (b[8] & 0x80) != 0;
  p.psn = get24(b + 9);
  const uint8_t flags = opcode_flags(p.opcode);  // also rejects non-RC transports (bits 7:5)
  if (!(flags & kOpKnown)) return Drop::kBadOpcode;
  if ((b[1] & 0x0F) != 0) return Drop::kBadHeader;  // TVer (rxe_recv.c hdr_check)
  // P_Key: the default partition, either membership (rxe_verbs.h pkey_match with 0xFFFF).
  if ((p.pkey & 0x7FFF) != 0x7FFF) return Drop::kBadHeader;
  const size_t hdrs = kBthLen + ext_len(flags);
  const size_t body = udp_len - kUdpLen - kIcrcLen;  // BTH .. last pad byte
  if (body < hdrs) return Drop::kTruncated;
  const size_t data = body - hdrs;
  if (data < p.pad) return Drop::kTruncated;
  if (!(flags & kHasPayload) && data != 0) return Drop::kBadHeader;
  const uint8_t* h = b + kBthLen;
  if (flags & kHasReth) {
    p.reth_va = (uint64_t{get32(h)} << 32) | get32(h + 4);
    p.reth_rkey = get32(h + 8);
    p.reth_len = get32(h + 12);
    h += kRethLen;
  }
  if (flags & kHasAeth) {
    p.aeth_syndrome = h[0];
    p.aeth_msn = get24(h + 1);
    h += kAethLen;
  }
  if (flags & kHasImm) {
    p.imm = get32(h);
    h += kImmLen;
  }
  if (flags & kHasIeth) {
    p.ieth = get32(h);
    h += kIethLen;
  }
  p.payload = h;
  p.payload_len = static_cast<uint32_t>(data - p.pad);
  if (p.dqpn < 2) return Drop::kNoQp;  // QP0/QP1 are not RC (rxe_recv.c hdr_check)
  return Drop::kNone;
}

const char* drop_name(Drop d) noexcept {
  switch (d) {
    case Drop::kNone:
      return "none";
    case Drop::kNotRoce:
      return "not_roce";
    case Drop::kTruncated:
      return "truncated";
    case Drop::kBadIcrc:
      return "bad_icrc";
    case Drop::kBadOpcode:
      return "bad_opcode";
    case Drop::kBadHeader:
      return "bad_header";
    case Drop::kNoQp:
      return "no_qp";
    case Drop::kPsnWindow:
      return "psn_window";
    case Drop::kNotPeer:
      return "not_peer";
    case Drop::kCount:
      break;
  }
  return "?";
}

// ---- pcap (https://www.tcpdump.org/manpages/pcap-savefile.5.html; LINKTYPE_RAW = 101) ---------
Pcap::~Pcap() {
  close();
}

bool Pcap::open(const char* path) noexcept {
  close();
  f_ = std::fopen(path, "wb");
  if (!f_) return false;
  // Global header in host byte order (readers detect it from the magic): magic, version 2.4,
  // thiszone, sigfigs, snaplen, link type.
  struct {
    uint32_t magic = 0xa1b2c3d4u;
    uint16_t major = 2, minor = 4;
    int32_t thiszone = 0;
    uint32_t sigfigs = 0, snaplen = 65535, network = 101;
  } h;
  static_assert(sizeof h == 24);
  uint8_t buf[24];
  std::memcpy(buf, &h, sizeof buf);
  if (std::fwrite(buf, 1, sizeof buf, f_) != sizeof buf) {
    close();
    return false;
  }
  return true;
}

bool Pcap::write(const uint8_t* ip, size_t len, uint64_t t_ns) noexcept {
  if (!f_) return false;
  const uint32_t rec[4] = {static_cast<uint32_t>(t_ns / 1000000000u),
                           static_cast<uint32_t>((t_ns % 1000000000u) / 1000u),
                           static_cast<uint32_t>(len), static_cast<uint32_t>(len)};
  return std::fwrite(rec, 1, sizeof rec, f_) == sizeof rec && std::fwrite(ip, 1, len, f_) == len;
}

void Pcap::close() noexcept {
  if (f_) std::fclose(f_);
  f_ = nullptr;
}

}  // namespace rdmx::emu::roce
