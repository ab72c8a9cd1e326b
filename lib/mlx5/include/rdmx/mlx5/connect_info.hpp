// What a peer needs to connect to one of our QPs, and the one byte format it crosses a process
// boundary in: the C API's rdmx_connect_info blob, rdmafwd's two-process rendezvous, librdmacm
// private data (drivers/mlx5/dv/cm.cpp), and any out-of-band channel (TCP) an application uses.
//
// Encoding, version 1: 56 bytes, every integer big-endian (network order).
//
//   off size field
//   0   4    magic "RDXI"
//   4   1    version (kConnectInfoVersion)
//   5   1    length: bytes the encoding covers (56 in version 1)
//   6   2    reserved, 0
//   8   4    qpn                 (24 bits used; the top byte is 0)
//   12  4    psn                 (24 bits used; the top byte is 0)
//   16  16   gid                 (as ibv_gid: network order)
//   32  8    wire address        (emu: the port's token on its wire; 0 on a real device)
//   40  2    lid                 (InfiniBand; 0 on RoCE and emu)
//   42  1    port                (HCA port number)
//   43  1    path MTU            (enum ibv_mtu: 1..5 = 256..4096 bytes)
//   44  1    initiator depth     (RDMA READ/atomic this side keeps in flight as requester:
//                                 ibv_qp_attr.max_rd_atomic)
//   45  1    responder resources (incoming RDMA READ/atomic this side serves at once:
//                                 ibv_qp_attr.max_dest_rd_atomic)
//   46  6    reserved, 0
//   52  4    CRC-32 (IEEE 802.3, zlib's crc32) of bytes 0..51
//
// 56 bytes fit the private data a librdmacm REQ carries on RDMA_PS_TCP (rdma_connect(3): 56)
// and the C API's 64-byte rdmx_connect_info.
//
// Unknown/zero rule: port, path MTU and the two READ depths are what the sender states about
// itself; 0 means "not stated" and the receiver uses its own value for that field. A negotiation
// takes, per field, the smaller of the stated values (the IB rule: a path MTU or READ depth
// larger than the peer's cannot be used; IB spec 9.4.4 / ibv_modify_qp(3)). Reserved bytes are
// written 0 and ignored on decode.
//
// The decoder refuses, with Errc::kProtocol and a message naming what was wrong: fewer bytes than
// the header or than `length` (truncated), another magic (foreign), another version, a length
// that is not the version's, a CRC mismatch (corrupted), and any field that breaks the rules of
// check_connect_info() below (every field a peer sends, checked before anyone uses it). Bytes
// after `length` are ignored (librdmacm pads private data with zeros).
//
// Field rules (check_connect_info; a peer that breaks one is refused, not connected to):
//   qpn        2..0xfffffe: 24 bits (IBTA BTH DestQP); not QP0/QP1, the subnet management and
//              general services QPs no RC connection targets; not 0xffffff, the multicast QPN
//              (Linux include/rdma/ib_verbs.h IB_QPN_MASK, IB_MULTICAST_QPN)
//   psn        0..0xffffff (24 bits, IBTA BTH PSN)
//   lid        0 (not stated: RoCE, emu's RoCE wire) or a unicast LID 1..0xbfff; 0xc000..0xfffe
//              are multicast and 0xffff the permissive LID (ib_verbs.h IB_MULTICAST_LID_BASE,
//              IB_LID_PERMISSIVE)
//   gid        not multicast (ff00::/8): an RC QP talks to one port, multicast is for UD QPs
//              only (Linux drivers/infiniband/core/verbs.c ib_attach_mcast refuses other QP
//              types); an IPv4-mapped GID (::ffff:a.b.c.d, RoCE v2) names a unicast host: not
//              0.0.0.0, 224.0.0.0/4 (multicast) or 255.255.255.255. All zero = not stated.
//   path MTU   0 (not stated) or 1..5
//   port, initiator depth, responder resources
//              any byte: the receiver never uses the peer's port (its QP's port is its own),
//              and takes the READ depths only through negotiate()'s min() with its own, so a
//              peer cannot raise them above what this side states.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include <rdmx/core/result.hpp>

namespace rdmx::mlx5 {

struct ConnectInfo {
  uint32_t qpn = 0;
  uint32_t psn = 0;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  uint64_t port_token = 0;      // wire address: emu identifies the emulated port on its wire by it
  uint8_t port = 0;             // HCA port; 0 = not stated
  uint8_t path_mtu = 0;         // enum ibv_mtu (1..5); 0 = not stated
  uint8_t initiator_depth = 0;  // 0 = not stated
  uint8_t responder_resources = 0;  // 0 = not stated
};

// What one side applies to its QP after the exchange: the IB rule of connect_info's
// "Unknown/zero rule" applied to what `local` states about itself and `remote` stated.
//   path_mtu            = min(local, remote)                      (ibv_modify_qp RTR path_mtu)
//   max_rd_atomic       = min(local initiator depth, remote responder resources)   (RTS)
//   max_dest_rd_atomic  = min(local responder resources, remote initiator depth)   (RTR)
// An unstated (0) remote field leaves the local value; an unstated local field takes the remote
// one. The READ pair is the IB CM's swap (Linux drivers/infiniband/core/cm.c cm_req_handler:
// local responder_resources = REQ initiator_depth); the initiator must not exceed the
// responder's resources (ibv_modify_qp(3)), or the responder NAKs with Invalid Request, seen by
// the requester as REMOTE_INVAL_REQ_ERR (observed on a RoCE trace: github.com/spdk/spdk report
// 2261, the 9th outstanding READ against 8 responder resources).
struct Negotiated {
  uint8_t path_mtu = 0;  // enum ibv_mtu; 0 when neither side stated one
  uint8_t max_rd_atomic = 0;
  uint8_t max_dest_rd_atomic = 0;
};
Negotiated negotiate(const ConnectInfo& local, const ConnectInfo& remote) noexcept;

// enum ibv_mtu code (1..5) <-> bytes (256..4096); 0 for anything else.
constexpr uint32_t mtu_bytes(uint8_t code) noexcept {
  return code >= 1 && code <= 5 ? 128u << code : 0;
}
constexpr uint8_t mtu_code(uint32_t bytes) noexcept {
  for (uint8_t c = 5; c >= 1; --c)
    if (bytes >= mtu_bytes(c)) return c;
  return 0;
}

inline constexpr uint8_t kConnectInfoVersion = 1;
inline constexpr size_t kConnectInfoBytes = 56;
using ConnectInfoBytes = std::array<uint8_t, kConnectInfoBytes>;

ConnectInfoBytes encode_connect_info(const ConnectInfo& ci) noexcept;
// The field rules above, on a decoded (or hand-made) ConnectInfo: kProtocol naming the first
// field that breaks them, "connect info: QPN 0x1 is ...". Setup path.
Status check_connect_info(const ConnectInfo& ci);
// Accepts any buffer that holds at least the encoding (see the refusals above).
Result<ConnectInfo> decode_connect_info(std::span<const uint8_t> in);

// The same bytes as lowercase hex (112 characters), for text channels (files, logs, TCP lines).
std::string encode_connect_info_hex(const ConnectInfo& ci);
Result<ConnectInfo> decode_connect_info_hex(std::string_view hex);

}  // namespace rdmx::mlx5
