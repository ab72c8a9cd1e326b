// The connection-info codec (format and rules: include/rdmx/mlx5/connect_info.hpp), and
// connecting two QPs of one process through it (device.hpp connect_qps).
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <string>

#include <rdmx/mlx5/connect_info.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::mlx5 {

namespace {

constexpr uint8_t kMagic[4] = {'R', 'D', 'X', 'I'};
constexpr size_t kHeaderBytes = 6;  // magic, version, length
constexpr size_t kCrcOffset = 52;
constexpr uint8_t kMaxMtuCode = 5;              // IBV_MTU_4096
constexpr uint32_t kQpnMask = 0xffffff;         // ib_verbs.h IB_QPN_MASK
constexpr uint32_t kFirstConnectableQpn = 2;    // after QP0 (SMI) and QP1 (GSI)
constexpr uint32_t kMulticastQpn = 0xffffff;    // ib_verbs.h IB_MULTICAST_QPN
constexpr uint16_t kMulticastLidBase = 0xc000;  // ib_verbs.h IB_MULTICAST_LID_BASE

void put_be(uint8_t* p, uint64_t v, int n) noexcept {
  for (int i = n - 1; i >= 0; --i, v >>= 8) p[i] = static_cast<uint8_t>(v);
}
uint64_t get_be(const uint8_t* p, int n) noexcept {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v = (v << 8) | p[i];
  return v;
}
uint32_t crc(const uint8_t* p, size_t n) noexcept {
  return static_cast<uint32_t>(::crc32(::crc32(0L, Z_NULL, 0), p, static_cast<uInt>(n)));
}

std::string hex32(uint64_t v) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s = "0x";
  bool lead = true;
  for (int sh = 28; sh >= 0; sh -= 4) {
    const unsigned d = (v >> sh) & 0xf;
    if (lead && d == 0 && sh) continue;
    lead = false;
    s += kDigits[d];
  }
  return s;
}

Error refuse(const std::string& what) {
  return make_error(Errc::kProtocol, "connect info: " + what);
}

}  // namespace

Negotiated negotiate(const ConnectInfo& local, const ConnectInfo& remote) noexcept {
  auto lesser = [](uint8_t mine, uint8_t theirs) -> uint8_t {
    if (!mine) return theirs;
    if (!theirs) return mine;
    return std::min(mine, theirs);
  };
  Negotiated n;
  n.path_mtu = lesser(local.path_mtu, remote.path_mtu);
  n.max_rd_atomic = lesser(local.initiator_depth, remote.responder_resources);
  n.max_dest_rd_atomic = lesser(local.responder_resources, remote.initiator_depth);
  return n;
}

ConnectInfoBytes encode_connect_info(const ConnectInfo& ci) noexcept {
  ConnectInfoBytes b{};
  uint8_t* p = b.data();
  std::memcpy(p, kMagic, 4);
  p[4] = kConnectInfoVersion;
  p[5] = kConnectInfoBytes;
  put_be(p + 8, ci.qpn & 0xffffff, 4);
  put_be(p + 12, ci.psn & 0xffffff, 4);
  std::memcpy(p + 16, ci.gid, 16);
  put_be(p + 32, ci.port_token, 8);
  put_be(p + 40, ci.lid, 2);
  p[42] = ci.port;
  p[43] = ci.path_mtu;
  p[44] = ci.initiator_depth;
  p[45] = ci.responder_resources;
  put_be(p + kCrcOffset, crc(p, kCrcOffset), 4);
  return b;
}

Result<ConnectInfo> decode_connect_info(std::span<const uint8_t> in) {
  const uint8_t* p = in.data();
  const size_t n = in.size();
  const bool magic = n > 0 && std::memcmp(p, kMagic, std::min<size_t>(n, 4)) == 0;
  if (n > 0 && !magic)
    return refuse("foreign bytes (no \"RDXI\" magic): the peer is not an rdmx endpoint");
  if (n < kHeaderBytes)
    return refuse("truncated: " + std::to_string(n) + " bytes, the header alone is " +
                  std::to_string(kHeaderBytes));
  if (p[4] != kConnectInfoVersion)
    return refuse("version " + std::to_string(p[4]) + ", this build speaks version " +
                  std::to_string(kConnectInfoVersion));
  if (p[5] != kConnectInfoBytes)
    return refuse("length " + std::to_string(p[5]) + " is not version " +
                  std::to_string(kConnectInfoVersion) + "'s " + std::to_string(kConnectInfoBytes));
  if (n < kConnectInfoBytes)
    return refuse("truncated: " + std::to_string(n) + " of " + std::to_string(kConnectInfoBytes) +
                  " bytes");
  const uint32_t stored = static_cast<uint32_t>(get_be(p + kCrcOffset, 4));
  const uint32_t computed = crc(p, kCrcOffset);
  if (stored != computed)
    return refuse("corrupted: CRC-32 " + hex32(stored) + " stored, " + hex32(computed) +
                  " computed");
  ConnectInfo ci;
  ci.qpn = static_cast<uint32_t>(get_be(p + 8, 4));
  ci.psn = static_cast<uint32_t>(get_be(p + 12, 4));
  std::memcpy(ci.gid, p + 16, 16);
  ci.port_token = get_be(p + 32, 8);
  ci.lid = static_cast<uint16_t>(get_be(p + 40, 2));
  ci.port = p[42];
  ci.path_mtu = p[43];
  ci.initiator_depth = p[44];
  ci.responder_resources = p[45];
  RDMX_TRY(check_connect_info(ci));
  return ci;
}

// The field rules (connect_info.hpp, "Field rules"): every comparison on the field's own width,
// nothing computed from a peer's value before it passed.
Status check_connect_info(const ConnectInfo& ci) {
  if (ci.qpn > kQpnMask) return refuse("QPN " + hex32(ci.qpn) + " is wider than 24 bits");
  if (ci.qpn < kFirstConnectableQpn)
    return refuse("QPN " + hex32(ci.qpn) +
                  " is QP0/QP1 (subnet management, general services): no RC peer");
  if (ci.qpn == kMulticastQpn) return refuse("QPN 0xffffff is the multicast QPN: no RC peer");
  if (ci.psn > kQpnMask) return refuse("PSN " + hex32(ci.psn) + " is wider than 24 bits");
  if (ci.lid >= kMulticastLidBase)
    return refuse("LID " + hex32(ci.lid) +
                  (ci.lid == 0xffff ? " is the permissive LID" : " is a multicast LID") +
                  ": no RC peer");
  if (ci.gid[0] == 0xff) return refuse("GID ff..: a multicast GID is no RC peer");
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  if (std::memcmp(ci.gid, kV4Mapped, 12) == 0) {
    const uint8_t* a = ci.gid + 12;
    const bool any = (a[0] | a[1] | a[2] | a[3]) == 0;
    const bool bcast = (a[0] & a[1] & a[2] & a[3]) == 0xff;
    if (any || bcast || (a[0] & 0xf0) == 0xe0)
      return refuse("GID ::ffff:" + std::to_string(a[0]) + "." + std::to_string(a[1]) + "." +
                    std::to_string(a[2]) + "." + std::to_string(a[3]) +
                    " is not a unicast IPv4 host");
  }
  if (ci.path_mtu > kMaxMtuCode)
    return refuse("path MTU code " + std::to_string(ci.path_mtu) +
                  " unknown (1..5 = 256..4096 bytes, 0 = not stated)");
  return {};
}

std::string encode_connect_info_hex(const ConnectInfo& ci) {
  static const char kDigits[] = "0123456789abcdef";
  const ConnectInfoBytes b = encode_connect_info(ci);
  std::string s;
  s.reserve(2 * b.size());
  for (uint8_t x : b) {
    s += kDigits[x >> 4];
    s += kDigits[x & 0xf];
  }
  return s;
}

Result<ConnectInfo> decode_connect_info_hex(std::string_view hex) {
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (hex.size() % 2 != 0 || hex.size() > 2 * kConnectInfoBytes)
    return refuse("hex text of " + std::to_string(hex.size()) + " characters, expected " +
                  std::to_string(2 * kConnectInfoBytes));
  uint8_t b[kConnectInfoBytes];
  for (size_t i = 0; i < hex.size() / 2; ++i) {
    const int hi = nibble(hex[2 * i]), lo = nibble(hex[2 * i + 1]);
    if (hi < 0 || lo < 0) return refuse("not hex text at character " + std::to_string(2 * i));
    b[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return decode_connect_info(std::span<const uint8_t>(b, hex.size() / 2));
}

Status connect_qps(Device& da, QpHandle qa, Device& db, QpHandle qb) {
  const ConnectInfo ia = da.local_info(qa);
  const ConnectInfo ib = db.local_info(qb);
  RDMX_TRY(da.connect(qa, ib), da.name() + ": connect QP " + std::to_string(qa));
  RDMX_TRY(db.connect(qb, ia), db.name() + ": connect QP " + std::to_string(qb));
  return {};
}

}  // namespace rdmx::mlx5

namespace rdmx::mlx5 {

// Defaults of the protection-domain calls (device.hpp): only the default PD.
size_t Device::poll_async_events(std::span<AsyncEvent>) {
  return 0;
}

const char* async_event_name(AsyncEventKind k) noexcept {
  switch (k) {
    case AsyncEventKind::kQpFatal:
      return "qp-fatal";
    case AsyncEventKind::kQpReqErr:
      return "qp-req-err";
    case AsyncEventKind::kQpAccessErr:
      return "qp-access-err";
    case AsyncEventKind::kCommEst:
      return "comm-est";
    case AsyncEventKind::kSqDrained:
      return "sq-drained";
    case AsyncEventKind::kLastWqeReached:
      return "last-wqe-reached";
    case AsyncEventKind::kCqErr:
      return "cq-err";
    case AsyncEventKind::kPortActive:
      return "port-active";
    case AsyncEventKind::kPortErr:
      return "port-err";
    case AsyncEventKind::kDeviceFatal:
      return "device-fatal";
    case AsyncEventKind::kOther:
      break;
  }
  return "other";
}

Status check_rc_timers(const RcTimers& t) {
  auto bad = [](const char* f, unsigned v, unsigned max) {
    return make_error(Errc::kInvalidArgument, std::string("RC timers: ") + f + " " +
                                                  std::to_string(v) + " is above " +
                                                  std::to_string(max));
  };
  if (t.timeout > 31) return bad("timeout", t.timeout, 31);
  if (t.retry_cnt > 7) return bad("retry_cnt", t.retry_cnt, 7);
  if (t.rnr_retry > 7) return bad("rnr_retry", t.rnr_retry, 7);
  if (t.min_rnr_timer > 31) return bad("min_rnr_timer", t.min_rnr_timer, 31);
  return Status{};
}

Result<uint32_t> Device::alloc_pd() {
  return make_error(Errc::kUnsupported, name() + ": no protection domains beyond the default one");
}

Status Device::dealloc_pd(uint32_t pd) {
  return make_error(Errc::kInvalidArgument,
                    name() + ": dealloc_pd: PD " + std::to_string(pd) + " is not one of ours");
}

Result<MrInfo> Device::reg_mr_in_pd(void* addr, size_t len, uint32_t access, uint32_t pd) {
  if (pd != kDefaultPd) return alloc_pd().error();
  return reg_mr(addr, len, access);
}

Result<uint64_t> Device::refused_remote_accesses(QpHandle qp) const {
  return make_error(
      Errc::kUnsupported,
      name() + ": no per-QP count of refused remote accesses (QP " + std::to_string(qp) + ")");
}

Result<uint32_t> Device::alloc_mw(uint32_t pd) {
  return make_error(Errc::kUnsupported,
                    name() + ": no type-2 memory windows (PD " + std::to_string(pd) + ")");
}

Status Device::dealloc_mw(uint32_t rkey) {
  return make_error(Errc::kInvalidArgument,
                    name() + ": dealloc_mw: " + std::to_string(rkey) + " is not one of ours");
}

Result<uint32_t> Device::create_window_mkey_in_pd(uint32_t max_entries, bool remote_invalidate,
                                                  uint32_t pd) {
  if (pd != kDefaultPd) return alloc_pd().error();
  return create_window_mkey(max_entries, remote_invalidate);
}

}  // namespace rdmx::mlx5
