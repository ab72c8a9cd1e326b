// Pure parts of the real-device backend (see dv_math.hpp for the sources of each rule).
#include <rdmx/dv/dv_math.hpp>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <arpa/inet.h>

namespace rdmx::dv {

namespace {

using mlx5::QpState;

void put_be16(uint8_t* p, uint16_t v) noexcept {
  p[0] = static_cast<uint8_t>(v >> 8);
  p[1] = static_cast<uint8_t>(v);
}
uint32_t get_be32(const uint8_t* p) noexcept {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

// The Access values are chosen equal to ibv_access_flags; keep it so (device.hpp says so).
static_assert(static_cast<int>(mlx5::kAccessLocalWrite) ==
              static_cast<int>(IBV_ACCESS_LOCAL_WRITE));
static_assert(static_cast<int>(mlx5::kAccessRemoteWrite) ==
              static_cast<int>(IBV_ACCESS_REMOTE_WRITE));
static_assert(static_cast<int>(mlx5::kAccessRemoteRead) ==
              static_cast<int>(IBV_ACCESS_REMOTE_READ));
static_assert(static_cast<int>(mlx5::kAccessRemoteAtomic) ==
              static_cast<int>(IBV_ACCESS_REMOTE_ATOMIC));

}  // namespace

std::optional<int> to_ibv_access(uint32_t access) noexcept {
  if (access & ~uint32_t{mlx5::kAccessAll | mlx5::kAccessMwBind}) return std::nullopt;
  int f = 0;
  if (access & mlx5::kAccessMwBind) f |= IBV_ACCESS_MW_BIND;
  if (access & mlx5::kAccessLocalWrite) f |= IBV_ACCESS_LOCAL_WRITE;
  if (access & mlx5::kAccessRemoteWrite) f |= IBV_ACCESS_REMOTE_WRITE;
  if (access & mlx5::kAccessRemoteRead) f |= IBV_ACCESS_REMOTE_READ;
  if (access & mlx5::kAccessRemoteAtomic) f |= IBV_ACCESS_REMOTE_ATOMIC;
  // ibv_reg_mr(3): "If IBV_ACCESS_REMOTE_WRITE or IBV_ACCESS_REMOTE_ATOMIC is set, then
  // IBV_ACCESS_LOCAL_WRITE must be set too."
  if ((f & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(f & IBV_ACCESS_LOCAL_WRITE))
    return std::nullopt;
  return f;
}

uint32_t from_ibv_access(int flags) noexcept {
  uint32_t a = 0;
  if (flags & IBV_ACCESS_LOCAL_WRITE) a |= mlx5::kAccessLocalWrite;
  if (flags & IBV_ACCESS_REMOTE_WRITE) a |= mlx5::kAccessRemoteWrite;
  if (flags & IBV_ACCESS_REMOTE_READ) a |= mlx5::kAccessRemoteRead;
  if (flags & IBV_ACCESS_REMOTE_ATOMIC) a |= mlx5::kAccessRemoteAtomic;
  if (flags & IBV_ACCESS_MW_BIND) a |= mlx5::kAccessMwBind;
  return a;
}

ibv_qp_state to_ibv_qp_state(QpState s) noexcept {
  switch (s) {
    case QpState::kReset:
      return IBV_QPS_RESET;
    case QpState::kInit:
      return IBV_QPS_INIT;
    case QpState::kRtr:
      return IBV_QPS_RTR;
    case QpState::kRts:
      return IBV_QPS_RTS;
    case QpState::kError:
      return IBV_QPS_ERR;
  }
  return IBV_QPS_ERR;
}

std::optional<QpState> from_ibv_qp_state(ibv_qp_state s) noexcept {
  switch (s) {
    case IBV_QPS_RESET:
      return QpState::kReset;
    case IBV_QPS_INIT:
      return QpState::kInit;
    case IBV_QPS_RTR:
      return QpState::kRtr;
    case IBV_QPS_RTS:
      return QpState::kRts;
    case IBV_QPS_SQE:
    case IBV_QPS_ERR:
      return QpState::kError;
    default:
      return std::nullopt;
  }
}

std::optional<ibv_mtu> mtu_from_bytes(uint32_t bytes) noexcept {
  switch (bytes) {
    case 256:
      return IBV_MTU_256;
    case 512:
      return IBV_MTU_512;
    case 1024:
      return IBV_MTU_1024;
    case 2048:
      return IBV_MTU_2048;
    case 4096:
      return IBV_MTU_4096;
    default:
      return std::nullopt;
  }
}

uint32_t mtu_bytes(ibv_mtu m) noexcept {
  // IBV_MTU_256 = 1 ... IBV_MTU_4096 = 5 (verbs.h).
  const int v = static_cast<int>(m);
  return (v >= 1 && v <= 5) ? 128u << v : 0;
}

QpTransition init_transition(const QpParams& p) noexcept {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_INIT;
  t.attr.pkey_index = p.pkey_index;
  t.attr.port_num = p.port;
  t.attr.qp_access_flags = static_cast<unsigned>(p.qp_access);
  t.mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  return t;
}

QpParams with_timers(QpParams p, const mlx5::RcTimers& t) noexcept {
  p.timeout = t.timeout;
  p.retry_cnt = t.retry_cnt;
  p.rnr_retry = t.rnr_retry;
  p.min_rnr_timer = t.min_rnr_timer;
  return p;
}

QpParams negotiated_params(const QpParams& local, const mlx5::ConnectInfo& remote) noexcept {
  mlx5::ConnectInfo mine;
  mine.path_mtu = static_cast<uint8_t>(local.mtu);
  mine.initiator_depth = local.max_rd_atomic;
  mine.responder_resources = local.max_dest_rd_atomic;
  const mlx5::Negotiated n = mlx5::negotiate(mine, remote);
  QpParams p = local;
  if (n.path_mtu) p.mtu = static_cast<ibv_mtu>(n.path_mtu);
  if (n.max_rd_atomic) p.max_rd_atomic = n.max_rd_atomic;
  if (n.max_dest_rd_atomic) p.max_dest_rd_atomic = n.max_dest_rd_atomic;
  return p;
}

mlx5::ConnectInfo fold_cm_depths(mlx5::ConnectInfo remote, uint8_t cm_responder_resources,
                                 uint8_t cm_initiator_depth, uint8_t ours_responder_resources,
                                 uint8_t ours_initiator_depth) noexcept {
  auto lesser = [](uint8_t a, uint8_t b) -> uint8_t { return !a ? b : !b ? a : std::min(a, b); };
  // The peer's initiator depth: how many of its READs we serve at once (our RTR resources).
  remote.initiator_depth =
      lesser(lesser(remote.initiator_depth, cm_responder_resources), ours_responder_resources);
  // The peer's responder resources: how many of our READs it serves (our RTS initiator depth).
  remote.responder_resources =
      lesser(lesser(remote.responder_resources, cm_initiator_depth), ours_initiator_depth);
  return remote;
}

Result<CmRoute> cm_route_from_attrs(const ibv_qp_attr& rtr, int rtr_mask, const ibv_qp_attr& rts,
                                    int rts_mask) {
  auto bad = [](const std::string& what) {
    return make_error(Errc::kDeviceError, "rdma_init_qp_attr: " + what);
  };
  if ((rtr_mask & IBV_QP_STATE) && rtr.qp_state != IBV_QPS_RTR)
    return bad("asked for RTR, answered state " + std::to_string(rtr.qp_state));
  if ((rts_mask & IBV_QP_STATE) && rts.qp_state != IBV_QPS_RTS)
    return bad("asked for RTS, answered state " + std::to_string(rts.qp_state));
  CmRoute r;
  if (rtr_mask & IBV_QP_AV) {
    r.have_av = true;
    r.sl = rtr.ah_attr.sl;
    if (rtr.ah_attr.is_global) {
      r.global = true;
      std::memcpy(r.dgid, rtr.ah_attr.grh.dgid.raw, sizeof r.dgid);
      r.hop_limit = rtr.ah_attr.grh.hop_limit;
      r.traffic_class = rtr.ah_attr.grh.traffic_class;
    }
  }
  if (rtr_mask & IBV_QP_PATH_MTU) {
    if (mtu_bytes(rtr.path_mtu) == 0)
      return bad("path MTU " + std::to_string(rtr.path_mtu) + " is not an ibv_mtu");
    r.mtu = rtr.path_mtu;
  }
  if (rtr_mask & IBV_QP_MIN_RNR_TIMER) r.min_rnr_timer = rtr.min_rnr_timer;
  if (rts_mask & IBV_QP_TIMEOUT) r.timeout = rts.timeout;
  if (rts_mask & IBV_QP_RETRY_CNT) r.retry_cnt = rts.retry_cnt;
  if (rts_mask & IBV_QP_RNR_RETRY) r.rnr_retry = rts.rnr_retry;
  mlx5::RcTimers t;  // the route's timers, each checked against its range
  t.timeout = r.timeout.value_or(0);
  t.retry_cnt = r.retry_cnt.value_or(0);
  t.rnr_retry = r.rnr_retry.value_or(0);
  t.min_rnr_timer = r.min_rnr_timer.value_or(0);
  if (auto s = mlx5::check_rc_timers(t); !s) return bad(s.error().message);
  return r;
}

QpParams apply_cm_route(QpParams p, const CmRoute& r) noexcept {
  if (r.have_av) p.sl = r.sl;
  if (r.global) {
    p.hop_limit = r.hop_limit;
    // A traffic class (DSCP << 2) set in the device options wins: rdma_cm's is the id's ToS or,
    // where the application set none, the device's default_roce_tos (Linux
    // drivers/infiniband/core/cma.c cma_resolve_iboe_route: tos_set ? tos : default_roce_tos),
    // and this QP is not rdma_cm's (rdma_set_option(RDMA_OPTION_ID_TOS) is never called on the
    // id). 0, the option's default, leaves rdma_cm's.
    if (p.traffic_class == 0) p.traffic_class = r.traffic_class;
  }
  if (r.mtu) p.mtu = *r.mtu;
  if (r.min_rnr_timer) p.min_rnr_timer = *r.min_rnr_timer;
  if (r.timeout) p.timeout = *r.timeout;
  if (r.retry_cnt) p.retry_cnt = *r.retry_cnt;
  if (r.rnr_retry) p.rnr_retry = *r.rnr_retry;
  return p;
}

mlx5::ConnectInfo apply_cm_dgid(mlx5::ConnectInfo remote, const CmRoute& r) noexcept {
  if (r.global) std::memcpy(remote.gid, r.dgid, sizeof remote.gid);
  return remote;
}

QpTransition rtr_transition(const QpParams& p, const mlx5::ConnectInfo& remote) noexcept {
  QpTransition t;
  ibv_qp_attr& a = t.attr;
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = p.mtu;
  a.dest_qp_num = remote.qpn & 0xffffff;
  a.rq_psn = remote.psn & 0xffffff;
  a.max_dest_rd_atomic = p.max_dest_rd_atomic;
  a.min_rnr_timer = p.min_rnr_timer;
  a.ah_attr.dlid = remote.lid;
  a.ah_attr.sl = p.sl;
  a.ah_attr.src_path_bits = 0;
  a.ah_attr.port_num = p.port;
  if (p.use_grh) {
    a.ah_attr.is_global = 1;
    std::memcpy(a.ah_attr.grh.dgid.raw, remote.gid, sizeof remote.gid);
    a.ah_attr.grh.sgid_index = p.sgid_index;
    a.ah_attr.grh.hop_limit = p.hop_limit;
    a.ah_attr.grh.traffic_class = p.traffic_class;
    a.ah_attr.grh.flow_label = 0;
  }
  t.mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  return t;
}

QpTransition rts_transition(const QpParams& p, uint32_t local_psn) noexcept {
  QpTransition t;
  t.attr.qp_state = IBV_QPS_RTS;
  t.attr.timeout = p.timeout;
  t.attr.retry_cnt = p.retry_cnt;
  t.attr.rnr_retry = p.rnr_retry;
  t.attr.sq_psn = local_psn & 0xffffff;
  t.attr.max_rd_atomic = p.max_rd_atomic;
  t.mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
  return t;
}

QpTransition state_only_transition(QpState to) noexcept {
  QpTransition t;
  t.attr.qp_state = to_ibv_qp_state(to);
  t.mask = IBV_QP_STATE;
  return t;
}

uint32_t ifc_get(std::span<const uint8_t> buf, uint32_t bit_off, uint32_t bits) noexcept {
  // The dword holding the field, read big-endian; the field ends at bit (off % 32) + bits - 1
  // counted from the dword's most significant bit.
  const uint32_t dw_byte = (bit_off / 32) * 4;
  if (bits == 0 || bits > 32 || dw_byte + 4 > buf.size()) return 0;
  const uint32_t dw = get_be32(buf.data() + dw_byte);
  const uint32_t shift = 32 - (bit_off % 32) - bits;
  const uint32_t mask = bits == 32 ? 0xffffffffu : ((1u << bits) - 1);
  return (dw >> shift) & mask;
}

void encode_query_hca_cap(std::span<uint8_t, hca::kCmdInBytes> in) noexcept {
  std::memset(in.data(), 0, in.size());
  put_be16(in.data(), hca::kQueryHcaCapOpcode);    // opcode, bits 0x00..0x0f
  put_be16(in.data() + 6, hca::kOpModGeneralCur);  // op_mod, bits 0x30..0x3f
}

Result<HcaCaps> decode_query_hca_cap(std::span<const uint8_t> out) {
  if (out.size() < hca::kCmdOutHeaderBytes + 0x60)
    return make_error(Errc::kInvalidArgument, "QUERY_HCA_CAP output too short");
  const uint32_t status = out[0];
  if (status != 0)
    return make_error(
        Errc::kDeviceError,
        "QUERY_HCA_CAP failed: status " + std::to_string(status) + " syndrome 0x" + [&] {
          char b[16];
          std::snprintf(b, sizeof b, "%08x", get_be32(out.data() + 4));
          return std::string(b);
        }());
  const auto cap = out.subspan(hca::kCmdOutHeaderBytes);
  HcaCaps h;
  h.log_max_qp_sz = ifc_get(cap, hca::kLogMaxQpSz, 8) & 0x1f;
  h.log_max_cq_sz = ifc_get(cap, hca::kLogMaxCqSz, 8) & 0x1f;
  h.log_max_klm_list_size = ifc_get(cap, hca::kLogMaxKlmListSize, 6);
  h.umr_modify_atomic_disabled = ifc_get(cap, hca::kUmrModifyAtomicDisabled, 1) != 0;
  h.umr_indirect_mkey_disabled = ifc_get(cap, hca::kUmrIndirectMkeyDisabled, 1) != 0;
  h.umr_fence = ifc_get(cap, hca::kUmrFence, 2);
  h.max_wqe_sz_sq = ifc_get(cap, hca::kMaxWqeSzSq, 16);
  return h;
}

uint8_t umr_fence_bits(uint32_t umr_fence_cap) noexcept {
  return mlx5::prm::umr_fence_bits(umr_fence_cap);
}

void apply_hca_caps(const HcaCaps& h, mlx5::DeviceCaps& caps) noexcept {
  // mlx5dv_mkey_init_attr.max_entries is 16 bits and rdma-core rounds it up to a multiple of 4
  // (verbs.c _mlx5dv_create_mkey), so 65532 is the most a window can ask for.
  uint64_t klm = h.log_max_klm_list_size ? (1ull << h.log_max_klm_list_size) : kDefaultMaxKlmList;
  if (klm > 65532) klm = 65532;
  caps.max_klm_list = static_cast<uint32_t>(klm);
  const uint32_t wqe_sz = h.max_wqe_sz_sq ? h.max_wqe_sz_sq : kDefaultMaxWqeSzSq;
  caps.max_inline_klm = max_inline_klm_for(wqe_sz);
  if (caps.max_inline_klm > caps.max_klm_list) caps.max_inline_klm = caps.max_klm_list;
  caps.umr_fence = static_cast<uint8_t>(h.umr_fence);  // raw cap (DeviceCaps contract)
  // The window layer leaves the atomic bit out of its map mask and refuses atomic maps (the
  // same decision emu makes for its profiles; Linux umr.c umr_check_mkey_mask).
  caps.umr_modify_atomic_disabled = h.umr_modify_atomic_disabled;
  caps.max_wqe_sz_sq = wqe_sz;
}

void apply_default_hca_caps(mlx5::DeviceCaps& caps) noexcept {
  HcaCaps h;
  h.log_max_klm_list_size = 0;  // -> kDefaultMaxKlmList
  h.max_wqe_sz_sq = kDefaultMaxWqeSzSq;
  h.umr_fence = kDefaultUmrFenceCap;
  h.umr_modify_atomic_disabled = true;  // unknown: never put the atomic bit in a UMR mask
  apply_hca_caps(h, caps);
}

std::optional<uint32_t> pick_roce_gid(std::span<const GidEntry> table, uint32_t port) noexcept {
  static constexpr uint8_t kV4Prefix[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  std::optional<uint32_t> first_v2, first_any;
  for (const GidEntry& e : table) {
    if (e.port != port) continue;
    if (!first_any) first_any = e.index;
    if (e.type != IBV_GID_TYPE_ROCE_V2) continue;
    if (std::memcmp(e.gid, kV4Prefix, sizeof kV4Prefix) == 0) return e.index;
    if (!first_v2) first_v2 = e.index;
  }
  return first_v2 ? first_v2 : first_any;
}

std::string no_device_message(const std::string& wanted, std::span<const std::string> found,
                              int list_errno) {
  std::string m = "no RDMA device found: looked for ";
  m += wanted.empty() ? std::string("any mlx5 device") : "\"" + wanted + "\"";
  m += " (ibv_get_device_list returned " + std::to_string(found.size()) + " device";
  if (found.size() != 1) m += "s";
  if (!found.empty()) {
    m += ":";
    for (const auto& n : found) m += " " + n;
  }
  if (list_errno != 0) m += std::string(", errno: ") + std::strerror(list_errno);
  m += "; is the mlx5_ib kernel module loaded and /dev/infiniband present?)";
  return m;
}

std::string trim(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  size_t i = 0;
  while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
  return s.substr(i);
}

int parse_numa_node(const std::string& text) noexcept {
  const std::string t = trim(text);
  if (t.empty()) return -1;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(t.c_str(), &end, 10);
  if (errno != 0 || end == t.c_str() || *end != '\0' || v < -1 || v > 4096) return -1;
  return static_cast<int>(v);
}

uint32_t window_mkey_flags(bool kernel_update_tag, bool remote_invalidate) noexcept {
  uint32_t flags = MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT;
  if (kernel_update_tag) flags |= MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG;
  if (remote_invalidate) flags |= MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE;
  return flags;
}

std::string env_problem() {
  if (std::getenv("MLX5_QP_SIGNATURE"))
    return "MLX5_QP_SIGNATURE is set in the environment: rdma-core then creates every QP with "
           "WQE signatures, which rdmx does not write (the device would reject its WQEs); unset "
           "it (any value, even 0, enables signatures)";
  return "";
}

std::string devx_permission_hint() {
  return "is /dev/infiniband/uverbs* readable and writable by this user? On Linux 4.18-4.20 a "
         "DEVX context also needs CAP_NET_RAW (setcap cap_net_raw+ep, or run as root)";
}

std::string gid_text(const uint8_t gid[16]) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (!inet_ntop(AF_INET6, gid, buf, sizeof buf)) return "?";
  return buf;
}

Status match_route(const PathEnd& route, const PathEnd& qp, int route_gid_index) {
  if (route.device != qp.device)
    return make_error(Errc::kInvalidArgument, "rdma_cm routes this connection through " +
                                                  route.device + " but the QP lives on " +
                                                  qp.device +
                                                  "; open that device or use an "
                                                  "address of " +
                                                  qp.device);
  if (route.port != qp.port)
    return make_error(Errc::kInvalidArgument,
                      "rdma_cm routes this connection through port " + std::to_string(route.port) +
                          " of " + route.device + " but the QP sends from port " +
                          std::to_string(qp.port) + "; open the device on port " +
                          std::to_string(route.port));
  if (std::memcmp(route.gid, qp.gid, 16) != 0)
    return make_error(
        Errc::kInvalidArgument,
        "rdma_cm routes this connection from GID " + gid_text(route.gid) +
            (route_gid_index >= 0 ? " (index " + std::to_string(route_gid_index) + ")"
                                  : std::string()) +
            " of " + route.device + " port " + std::to_string(route.port) +
            " but the QP sends from " + gid_text(qp.gid) +
            (route_gid_index >= 0
                 ? "; open the device with GID index " + std::to_string(route_gid_index)
                 : "; choose the GID index of the address the peer is reached "
                   "from"));
  return {};
}

}  // namespace rdmx::dv
