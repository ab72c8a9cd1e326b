// Pure arithmetic and translations of the real-device backend: queue sizing, attribute and state
// translation, HCA capability parsing. No verbs calls, no device, no state: everything here is
// unit-tested on this machine (tests/dv/test_dv_math.cpp).
//
// Sources for every rule are cited beside it; "facts §N" is section N of doc/guides/mlx5-facts.md.
// All functions are control-path (setup) code, callable from any thread.
#pragma once

#include <infiniband/verbs.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/device.hpp>
#include <rdmx/mlx5/prm/defs.hpp>

namespace rdmx::dv {

// ---- Ring arithmetic ---------------------------------------------------------------------------

// Smallest power of two >= n (1 for n <= 1). n must be <= 2^31.
constexpr uint32_t next_pow2(uint32_t n) noexcept {
  uint32_t p = 1;
  while (p < n) p <<= 1;
  return p;
}
constexpr bool is_pow2(uint32_t n) noexcept {
  return n != 0 && (n & (n - 1)) == 0;
}

// WQEBBs of an inline KLM UMR carrying n_klm entries: ceil((8 + align4(n)) / 4)
// (facts §2.7: N = 1..4 -> 3, 8 -> 4, 16 -> 6, 52 -> 15).
constexpr uint32_t umr_wqebbs(uint32_t n_klm) noexcept {
  return mlx5::prm::ds_to_wqebbs(mlx5::prm::umr_inline_ds(n_klm));
}

// SQ ring size (WQEBBs, a power of two) that holds `depth` inline UMRs of n_klm entries each,
// i.e. the worst case of `depth` maps in flight.
constexpr uint32_t sq_wqebbs_for(uint32_t depth, uint32_t n_klm) noexcept {
  return next_pow2(depth * umr_wqebbs(n_klm));
}

// Bytes rdma-core reserves in front of inline data on a QP created with
// MLX5DV_QP_EX_WITH_MKEY_CONFIGURE / MR_LIST (or LOCAL_INV): ctrl 16 + UMR ctrl 48 + mkey
// context 64 + max(KLM 16, 64) = 192 (rdma-core providers/mlx5/verbs.c _sq_overhead; facts
// section 3 "QP sizing").
inline constexpr uint32_t kUmrSqOverhead = 192;
// The inline-data segment header counted by rdma-core (struct mlx5_wqe_inl_data_seg).
inline constexpr uint32_t kInlineHeaderBytes = 4;

// cap.max_inline_data that lets an inline UMR with n_klm entries fit. rdma-core caps the KLM
// count of an inline UMR at (max_inline_data + 4) / 16 (qp.c mlx5_send_wr_set_mkey_layout;
// §2.7), and our WQE is 128 + 16 * align4(n) bytes; 16 * align4(n) - 4 satisfies
// both. 0 for n == 0.
constexpr uint32_t max_inline_data_for_klm(uint32_t n_klm) noexcept {
  return n_klm == 0 ? 0 : 16 * mlx5::prm::align4(n_klm) - kInlineHeaderBytes;
}

// The send WQE stride rdma-core will compute for an RC QP with our send_ops_flags (verbs.c
// mlx5_calc_send_wqe): max(overhead + 16 * max_send_sge, overhead + align16(4 + inline)),
// rounded up to 64 bytes.
constexpr uint32_t rdma_core_wqe_bytes(uint32_t max_inline_data, uint32_t max_send_sge) noexcept {
  const uint32_t gather = kUmrSqOverhead + 16 * max_send_sge;
  const uint32_t inl =
      max_inline_data ? kUmrSqOverhead + ((kInlineHeaderBytes + max_inline_data + 15) & ~15u) : 0;
  const uint32_t tot = gather > inl ? gather : inl;
  return (tot + 63) & ~63u;
}

// cap.max_send_wr that makes rdma-core allocate exactly `sq_wqebbs` WQEBBs (sq_wqebbs a power of
// two): it allocates roundup_pow2(max_send_wr * wqe_bytes) bytes (verbs.c mlx5_calc_sq_size).
// floor(S / w) * w lies in (S - w, S], which rounds up to S when w <= S / 2. 0 when the ring
// cannot hold two WQEs of that stride.
constexpr uint32_t max_send_wr_for(uint32_t sq_wqebbs, uint32_t wqe_bytes) noexcept {
  const uint64_t s = uint64_t{sq_wqebbs} * 64;
  if (wqe_bytes == 0 || s < 2ull * wqe_bytes) return 0;
  return static_cast<uint32_t>(s / wqe_bytes);
}

// Most inline KLMs one UMR may carry on a QP whose WQEs are limited to max_wqe_bytes (HCA cap
// max_wqe_sz_sq, which rdma-core enforces as max_sq_desc_sz): the largest multiple of 4, at most
// prm::kMaxInlineKlm (the 6-bit DS field, facts §8.1), with 192 + 16 * n <= max_wqe_bytes.
// The same function emu uses for its device profiles (prm::max_inline_klm_for).
constexpr uint32_t max_inline_klm_for(uint32_t max_wqe_bytes) noexcept {
  static_assert(kUmrSqOverhead == mlx5::prm::kUmrQpWqeOverhead);
  return mlx5::prm::max_inline_klm_for(max_wqe_bytes);
}

// CQ entries for `signaled` signaled send WQEs in flight plus `recvs` posted receives: every one
// may complete before the poller runs, so the CQ holds them all, plus the spare entry (a CQ of
// 2^n entries holds 2^n - 1: verbs max_cqe, Linux hw/mlx5/main.c mlx5_ib_query_device).
// A power of two, at least 2.
constexpr uint32_t cq_cqes_for(uint32_t signaled, uint32_t recvs) noexcept {
  const uint32_t n = next_pow2(signaled + recvs + 1);
  return n < 2 ? 2 : n;
}

// The `cqe` argument that makes rdma-core allocate exactly cqe_cnt entries: it allocates
// roundup_pow2(cqe + 1) (verbs.c mlx5_create_cq: ncqe = align_queue_size(cqe + 1)).
constexpr int ibv_cqe_arg_for(uint32_t cqe_cnt) noexcept {
  return static_cast<int>(cqe_cnt) - 1;
}

// ---- Translations -----------------------------------------------------------------------------

// rdmx::mlx5::Access bits -> ibv_access_flags. Unknown bits -> nullopt. Verbs requires
// LOCAL_WRITE whenever REMOTE_WRITE or REMOTE_ATOMIC is set (ibv_reg_mr(3)); such a request also
// -> nullopt, so the caller can say why.
std::optional<int> to_ibv_access(uint32_t access) noexcept;
// ibv_access_flags -> Access bits; flags outside the four we model are dropped.
uint32_t from_ibv_access(int flags) noexcept;

ibv_qp_state to_ibv_qp_state(mlx5::QpState s) noexcept;
// IBV_QPS_SQE (send-queue error) -> kError; SQD and UNKNOWN -> nullopt (rdmx never uses them).
std::optional<mlx5::QpState> from_ibv_qp_state(ibv_qp_state s) noexcept;

// ibv_mtu for a byte count (256..4096); nullopt for anything else.
std::optional<ibv_mtu> mtu_from_bytes(uint32_t bytes) noexcept;
uint32_t mtu_bytes(ibv_mtu m) noexcept;

// ---- QP state transitions (IB spec 11.2.4.2 / ibv_modify_qp(3) required attributes) -----------

// What the transitions need that is not in ConnectInfo; copied from DvOptions.
struct QpParams {
  uint8_t port = 1;
  uint16_t pkey_index = 0;
  int qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  ibv_mtu mtu = IBV_MTU_1024;
  uint8_t max_dest_rd_atomic = 16;  // responder resources (RTR)
  uint8_t max_rd_atomic = 16;       // initiator depth (RTS)
  uint8_t min_rnr_timer = 12;       // 0.64 ms
  uint8_t timeout = 18;             // 4.096 us * 2^18 = 1.07 s (mlx5::RcTimers)
  uint8_t retry_cnt = 7;
  uint8_t rnr_retry = 7;  // 7 = infinite
  uint8_t sl = 0;
  bool use_grh = false;  // RoCE: always (the port's link layer is Ethernet)
  uint8_t sgid_index = 0;
  uint8_t hop_limit = 64;
  uint8_t traffic_class = 0;
};

struct QpTransition {
  ibv_qp_attr attr{};
  int mask = 0;
};

// The parameters one QP uses towards `remote`: path MTU and the two READ depths negotiated
// (connect_info.hpp negotiate: the smaller of what each side stated; an unstated field keeps the
// local value). Before this, dv used its local active_mtu and max_rd_atomic whatever the peer.
QpParams negotiated_params(const QpParams& local, const mlx5::ConnectInfo& remote) noexcept;
// `p` with a QP's own RC timers (QpConfig::timers) in place of the device's.
QpParams with_timers(QpParams p, const mlx5::RcTimers& t) noexcept;

// rdma_cm: the READ depths the CM exchanged (REQ/REP) bound what the peer's connect info
// states. The event's values are already from our side (Linux core/cm.c cm_req_handler and
// cm_rep_handler swap them): cm_responder_resources = READs the peer will send us,
// cm_initiator_depth = READs we may send; `ours_*` are what we gave the CM. The result is
// passed to DvDevice::connect, which negotiates it with the QP's own limits. 0 = unstated.
mlx5::ConnectInfo fold_cm_depths(mlx5::ConnectInfo remote, uint8_t cm_responder_resources,
                                 uint8_t cm_initiator_depth, uint8_t ours_responder_resources,
                                 uint8_t ours_initiator_depth) noexcept;

// rdma_cm's route parameters for one connection, as rdma_init_qp_attr(3) states them for the
// RTR and RTS transitions (librdmacm cma.c rdma_init_qp_attr: the kernel's answer to
// UCMA_CMD_INIT_QP_ATTR; Linux drivers/infiniband/core/cma.c rdma_init_qp_attr, which asks the
// IB CM, core/cm.c cm_init_qp_rtr_attr / cm_init_qp_rts_attr, once the connection has a CM id,
// and cma_ib_init_qp_attr before it, whose mask holds only the INIT fields). Each field is
// valid only where its attr_mask bit is set; an unset one leaves the device's value. rdmx adopts
// the path (DGID, hop limit, traffic class, SL, path MTU) and the transport timers (timeout,
// retry_cnt, rnr_retry, min_rnr_timer); QPN, PSNs and READ depths come from the connect info
// (the QP is created outside rdma_cm, so the CM's PSN is not the QP's).
struct CmRoute {
  bool have_av = false;  // IBV_QP_AV (RTR): sl valid
  uint8_t sl = 0;
  bool global = false;  // and ah_attr.is_global: dgid, hop_limit, traffic_class valid
  uint8_t dgid[16] = {};
  uint8_t hop_limit = 0;
  uint8_t traffic_class = 0;
  std::optional<ibv_mtu> mtu;            // IBV_QP_PATH_MTU (RTR)
  std::optional<uint8_t> min_rnr_timer;  // IBV_QP_MIN_RNR_TIMER (RTR)
  std::optional<uint8_t> timeout;        // IBV_QP_TIMEOUT (RTS)
  std::optional<uint8_t> retry_cnt;      // IBV_QP_RETRY_CNT (RTS)
  std::optional<uint8_t> rnr_retry;      // IBV_QP_RNR_RETRY (RTS)
};
// Reads the two answers of rdma_init_qp_attr (asked with qp_state IBV_QPS_RTR and IBV_QPS_RTS).
// Errors (kDeviceError, naming the field): an answer for another state, a path MTU that is no
// ibv_mtu, a timer outside its range (mlx5::check_rc_timers).
Result<CmRoute> cm_route_from_attrs(const ibv_qp_attr& rtr, int rtr_mask, const ibv_qp_attr& rts,
                                    int rts_mask);
// `p` with what the route states in place of the device's options (DvOptions), except a
// non-zero traffic class of the options: a DSCP set there wins over rdma_cm's.
QpParams apply_cm_route(QpParams p, const CmRoute& r) noexcept;
// The peer's connect info with the route's DGID (when the route is global): the address the CM
// resolved, rather than the GID the peer wrote into its private data.
mlx5::ConnectInfo apply_cm_dgid(mlx5::ConnectInfo remote, const CmRoute& r) noexcept;

// One end of a connection as the QP sends from it: device, HCA port and source GID.
struct PathEnd {
  std::string device;
  uint8_t port = 0;
  uint8_t gid[16] = {};
};
// The QP must send from the device, port and GID that rdma_cm resolved the route through
// (librdmacm: id->verbs, id->port_num, id->route.addr.addr.ibaddr.sgid); the peer's CM and
// its path record name that GID. Refused with what to change otherwise; `route_gid_index` is
// the route's GID's index in the port's table (-1: not found), for the message.
Status match_route(const PathEnd& route, const PathEnd& qp, int route_gid_index);
std::string gid_text(const uint8_t gid[16]);  // "fe80::..." / "::ffff:10.0.0.1"

// RESET -> INIT: state, pkey index, port, remote access rights of the responder.
QpTransition init_transition(const QpParams& p) noexcept;
// INIT -> RTR: state, address vector (LID or GRH with the peer's GID), path MTU, peer QPN, the
// peer's send PSN as our receive PSN, responder resources, RNR timer.
QpTransition rtr_transition(const QpParams& p, const mlx5::ConnectInfo& remote) noexcept;
// RTR -> RTS: state, ack timeout, retry counts, our send PSN, initiator depth.
QpTransition rts_transition(const QpParams& p, uint32_t local_psn) noexcept;
// Any state -> RESET or ERR: the state alone.
QpTransition state_only_transition(mlx5::QpState to) noexcept;

// ---- HCA capabilities (QUERY_HCA_CAP, general device caps, current values) ---------------------
//
// Big-endian PRM bit addressing as in rdma-core mlx5_ifc.h: bit offset 0 is the most significant
// bit of byte 0; a field of `bits` bits at offset `off` lies within one 32-bit big-endian dword.
uint32_t ifc_get(std::span<const uint8_t> buf, uint32_t bit_off, uint32_t bits) noexcept;

// Offsets inside cmd_hca_cap (computed from rdma-core providers/mlx5/mlx5_ifc.h; facts §2.7).
namespace hca {
inline constexpr uint32_t kLogMaxQpSz = 0x88;                // 8 bits (value in bits 4:0)
inline constexpr uint32_t kLogMaxCqSz = 0xc8;                // 8 bits
inline constexpr uint32_t kLogMaxKlmListSize = 0x11a;        // 6 bits
inline constexpr uint32_t kUmrModifyAtomicDisabled = 0x208;  // 1 bit
inline constexpr uint32_t kUmrIndirectMkeyDisabled = 0x209;  // 1 bit
inline constexpr uint32_t kUmrFence = 0x20a;                 // 2 bits: 0 strong, 1 small, 2 none
inline constexpr uint32_t kMaxWqeSzSq = 0x290;               // 16 bits, bytes
// QUERY_HCA_CAP command (mlx5_ifc.h): opcode 0x100, op_mod = (MLX5_CAP_GENERAL << 1) | current.
inline constexpr uint16_t kQueryHcaCapOpcode = 0x100;
inline constexpr uint16_t kOpModGeneralCur = (0 << 1) | 1;
inline constexpr size_t kCmdInBytes = 16;
inline constexpr size_t kCmdOutHeaderBytes = 16;  // status, syndrome, reserved
inline constexpr size_t kCapBytes = 4096;         // union hca_cap_union
}  // namespace hca

struct HcaCaps {
  uint32_t log_max_klm_list_size = 0;
  uint32_t max_wqe_sz_sq = 0;
  uint32_t umr_fence = 0;  // raw cap: 0 strong, 1 small, 2 none
  bool umr_modify_atomic_disabled = false;
  bool umr_indirect_mkey_disabled = false;
  uint32_t log_max_qp_sz = 0;
  uint32_t log_max_cq_sz = 0;
};

// Writes the 16-byte QUERY_HCA_CAP input mailbox.
void encode_query_hca_cap(std::span<uint8_t, hca::kCmdInBytes> in) noexcept;
// Parses the output mailbox (header + capability). Errors: short buffer, non-zero status
// (the message carries status and syndrome).
Result<HcaCaps> decode_query_hca_cap(std::span<const uint8_t> out);

// fm_ce_se fence bits the UMR itself must carry for a raw umr_fence cap (kernel main.c
// mlx5_get_umr_fence: 0 strong -> STRONG_ORDERING 0x60, 1 small -> INITIATOR_SMALL 0x20,
// 2 none -> 0); unknown values -> the strongest.
uint8_t umr_fence_bits(uint32_t umr_fence_cap) noexcept;

// Conservative capabilities used when QUERY_HCA_CAP cannot be read (DEVX general commands
// refused, e.g. a VF or an older kernel). Documented in doc/guides/mlx5.md.
inline constexpr uint32_t kDefaultMaxKlmList = 128;  // DPDK regex / SPDK pool use 128 KLMs
inline constexpr uint32_t kDefaultMaxWqeSzSq = 512;  // -> 20 inline KLMs
inline constexpr uint32_t kDefaultUmrFenceCap = 0;   // strong ordering

// DeviceCaps fields derivable from HcaCaps (the rest come from ibv_query_device_ex).
void apply_hca_caps(const HcaCaps& h, mlx5::DeviceCaps& caps) noexcept;
void apply_default_hca_caps(mlx5::DeviceCaps& caps) noexcept;

// ---- Device discovery --------------------------------------------------------------------------

// One GID table entry as ibv_query_gid_table reports it, reduced to what the choice needs.
struct GidEntry {
  uint32_t index = 0;
  uint32_t port = 0;
  uint32_t type = 0;  // IBV_GID_TYPE_IB / _ROCE_V1 / _ROCE_V2
  uint8_t gid[16] = {};
};
// GID index to use on a RoCE port when none was configured: the first RoCE v2 entry holding an
// IPv4-mapped address (::ffff:a.b.c.d), else the first RoCE v2 entry, else the first entry of the
// port; nullopt when the port has none.
std::optional<uint32_t> pick_roce_gid(std::span<const GidEntry> table, uint32_t port) noexcept;

// The kNoDevice message: names the device asked for ("" = any mlx5 device), how many devices
// verbs reported and which, and what to check.
std::string no_device_message(const std::string& wanted, std::span<const std::string> found,
                              int list_errno);

// Trims a sysfs value ("0\n" -> "0").
std::string trim(std::string s);
// NUMA node from the text of /sys/.../numa_node; -1 (the kernel's "no node") stays -1; garbage ->
// -1.
int parse_numa_node(const std::string& text) noexcept;

// mlx5dv_create_mkey flags of a window. UPDATE_TAG only where the kernel advertised
// MKEY_UPDATE_TAG: rdma-core refuses the flag otherwise (providers/mlx5/verbs.c
// _mlx5dv_create_mkey), but the flag only gates rdma-core's own UMR builder
// (qp.c mkey_configure); rdmx writes its UMRs itself and the device changes the 8-bit key
// (mask bit 13) on any indirect mkey, as the kernel's own REG_MR has always done (Linux wr.c
// set_reg_umr_seg). So keys rotate either way and an older kernel is no reason to fail.
uint32_t window_mkey_flags(bool kernel_update_tag, bool remote_invalidate) noexcept;

// rdma-core's mlx5 provider reads MLX5_QP_SIGNATURE from the environment: when it is set, to any
// value ("0" too), every QP is created with WQE signatures (providers/mlx5/verbs.c, the
// MLX5_QP_FLAG_SIGNATURE create flag) and the device then checks a signature byte rdmx never
// writes. Returns why the environment cannot be used, or "" (DvDevice::open fails with it).
std::string env_problem();

// Hint for a refused DEVX context open (EPERM/EACCES): the device files' permissions, and on
// Linux 4.18-4.20 CAP_NET_RAW (creating a DEVX context required it before the CREATE_UCTX
// command of v5.0, drivers/infiniband/hw/mlx5/devx.c).
std::string devx_permission_hint();

}  // namespace rdmx::dv
