// The control-path interface of a device (DPDK eth_dev_ops style): opening, registering memory,
// creating windows (indirect mkeys) and queue pairs, moving QPs between states. It may allocate
// and returns Result/Status. The data path never goes through it: a poll core drives the
// queues of its QpDesc directly with QueuePair (the same code for dv and emu).
//
// Backends: rdmx::dv::DvDevice (real mlx5 through mlx5dv) and rdmx::emu::EmuDevice (software
// mlx5). Both are linked into every binary; open_device() picks one by name at run time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/connect_info.hpp>
#include <rdmx/mlx5/queue_desc.hpp>

namespace rdmx::mlx5 {

// Access rights (values of ibv_access_flags, so a verbs user reads them at once).
enum Access : uint32_t {
  kAccessLocalWrite = 1u << 0,    // IBV_ACCESS_LOCAL_WRITE
  kAccessRemoteWrite = 1u << 1,   // IBV_ACCESS_REMOTE_WRITE
  kAccessRemoteRead = 1u << 2,    // IBV_ACCESS_REMOTE_READ
  kAccessRemoteAtomic = 1u << 3,  // IBV_ACCESS_REMOTE_ATOMIC
  kAccessAll = 0xf,
  // Registration only (reg_mr): type-2 memory windows may be bound to this MR
  // (IBV_ACCESS_MW_BIND; IBTA C10-71: binding a window to an MR without it is an MW bind error).
  kAccessMwBind = 1u << 4,
};

// The mkc access byte (MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_*) for a set of Access bits.
uint8_t mkc_access_bits(uint32_t access) noexcept;

enum class QpState { kReset, kInit, kRtr, kRts, kError };
const char* qp_state_name(QpState s) noexcept;

struct DeviceCaps {
  uint32_t max_klm_list = 0;    // most translation entries one window may hold
  uint32_t max_inline_klm = 0;  // most KLMs an inline UMR carries on this device's QPs
  uint32_t max_sq_wqebbs = 0;
  uint32_t max_cq_cqes = 0;
  uint8_t umr_fence = 0;  // raw HCA cap umr_fence: 0 strong, 1 small, 2 none; the
                          // UMR's own fence bits are prm::umr_fence_bits(umr_fence)
  bool umr_modify_atomic_disabled = false;  // HCA cap 0x208: a UMR may not write mkey_mask
                                            // bit 21 (atomic access); windows get no atomics
  uint32_t max_wqe_sz_sq = 0;      // HCA cap 0x290: longest send WQE in bytes (0 = not known)
  bool mkey_update_tag = false;    // a UMR may change the 8-bit key
  bool remote_invalidate = false;  // SEND_WITH_INV can free a window
  bool memory_windows = false;     // type-2 memory windows (IBV_DEVICE_MEM_WINDOW_TYPE_2B)
  int numa_node = 0;
};

struct MrInfo {
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t lkey = 0;
  uint32_t rkey = 0;
  uint32_t access = 0;
};

// Protection domains (ibv_alloc_pd(3)): a QP reaches only memory keys of its own PD, locally and
// remotely; a remote access naming an mkey of another PD is refused like a bad key (remote
// access error at the requester). Handle 0 is the PD every device makes at open; reg_mr,
// create_window_mkey and a QpConfig without `pd` use it.
inline constexpr uint32_t kDefaultPd = 0;

// The RC transport timers of a QP (ibv_modify_qp(3): RTS timeout, retry_cnt, rnr_retry; RTR
// min_rnr_timer), applied when the QP is connected. The defaults are what rdma_cm gives a RoCE
// connection:
//   timeout 18: Linux drivers/infiniband/core/cma.c routes RoCE with CMA_IBOE_PACKET_LIFETIME
//     (16) and drivers/infiniband/core/cm.c cm_ack_timeout() turns that packet life time and the
//     HCA's local_ca_ack_delay (16 on mlx5) into the local ACK timeout: 16 + 1, rounded up once
//     = 18, 4.096 us x 2^18 = 1.07 s (rdma_set_ack_timeout(3) overrides it);
//   retry_cnt 7, rnr_retry 7: rdma_connect(3)'s conn_param as librdmacm's examples and most
//     users (UCX, SPDK) fill it; rnr_retry 7 means "for ever" on hardware (IBTA 9.7.5.2.8);
//   min_rnr_timer 12 (0.64 ms, IBTA table 45), what rdma-core's ibv_rc_pingpong states.
// A requester waits `timeout` for an ACK, sends again, and after retry_cnt retries in a row
// (retry_cnt + 1 timeouts, about 8.6 s with the defaults) completes the WQE with
// TRANSPORT_RETRY_EXC_ERR. Tests that want a dead peer noticed fast set small values.
struct RcTimers {
  uint8_t timeout = 18;        // local ACK timeout exponent: 4.096 us x 2^timeout; 0 = infinite
  uint8_t retry_cnt = 7;       // transport retries, 0..7
  uint8_t rnr_retry = 7;       // receiver-not-ready retries, 0..7 (7: infinite on hardware)
  uint8_t min_rnr_timer = 12;  // responder: RNR NAK timer code, 0..31 (IBTA table 45)
};
// The local ACK timeout in nanoseconds (0: infinite, exponent 0); exponents above 31 are 31.
constexpr uint64_t ack_timeout_ns(uint8_t timeout) noexcept {
  return timeout ? 4096ull << (timeout > 31 ? 31 : timeout) : 0;
}
// The smallest exponent whose timeout is at least `ns` (1..31).
constexpr uint8_t ack_timeout_exp(uint64_t ns) noexcept {
  uint8_t t = 1;
  while (t < 31 && ack_timeout_ns(t) < ns) ++t;
  return t;
}
// Checks the ranges above: kInvalidArgument naming the field. Setup path.
Status check_rc_timers(const RcTimers& t);

struct QpConfig {
  uint32_t sq_wqebbs = 1024;     // power of two
  uint32_t rq_wqes = 256;        // power of two; 0 = no receive queue
  uint32_t rq_sges = 1;          // scatter entries per receive
  uint32_t cq_cqes = 4096;       // power of two; >= every signaled WQE + receive in flight
  uint32_t max_inline_data = 0;  // bytes; also bounds inline UMR translation lists
  int numa_node = -1;            // -1: the device's node
  uint32_t pd = kDefaultPd;      // protection domain of the QP (Device::alloc_pd)
  // The QP's RC timers, applied by Device::connect; unset: the device's default (the backend's
  // options: dv::DvOptions::timers, emu::Options::timers), rdma_cm's unless changed there.
  std::optional<RcTimers> timers;
};

// Asynchronous events (ibv_get_async_event(3)): what the device tells the control path outside
// any completion. A responder that meets a class C error (IBTA 9.9.3, a remote access error or
// an invalid request) moves its QP to the error state and raises kQpAccessErr / kQpReqErr on
// ITS side; the requester only sees the NAK's error CQE.
enum class AsyncEventKind : uint8_t {
  kQpFatal,         // IBV_EVENT_QP_FATAL: the QP went to error (catastrophic / remote op error)
  kQpReqErr,        // IBV_EVENT_QP_REQ_ERR: invalid request (the responder went to error)
  kQpAccessErr,     // IBV_EVENT_QP_ACCESS_ERR: remote access violation (responder to error)
  kCommEst,         // IBV_EVENT_COMM_EST
  kSqDrained,       // IBV_EVENT_SQ_DRAINED
  kLastWqeReached,  // IBV_EVENT_QP_LAST_WQE_REACHED
  kCqErr,           // IBV_EVENT_CQ_ERR (qpn holds the CQ number)
  kPortActive,      // IBV_EVENT_PORT_ACTIVE (qpn holds the port)
  kPortErr,         // IBV_EVENT_PORT_ERR (qpn holds the port)
  kDeviceFatal,     // IBV_EVENT_DEVICE_FATAL
  kOther,           // any other ibv_event_type
};
const char* async_event_name(AsyncEventKind k) noexcept;

struct AsyncEvent {
  AsyncEventKind kind = AsyncEventKind::kOther;
  uint32_t qpn = 0;  // the QP (CQ or port for those kinds; 0 for device events)
};

// Opaque per-backend QP handle.
using QpHandle = uint32_t;  // the QPN

class Device {
 public:
  virtual ~Device() = default;
  Device() = default;
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;

  virtual const std::string& name() const noexcept = 0;
  virtual const DeviceCaps& caps() const noexcept = 0;

  // Registers [addr, addr+len) as a direct mkey (the parent MR).
  virtual Result<MrInfo> reg_mr(void* addr, size_t len, uint32_t access) = 0;
  virtual Status dereg_mr(const MrInfo& mr) = 0;

  // Creates a window: an indirect (KLM) mkey, free, with room for max_entries translations,
  // key byte 0, start address 0. Returns its mkey (index << 8).
  virtual Result<uint32_t> create_window_mkey(uint32_t max_entries, bool remote_invalidate) = 0;
  virtual Status destroy_mkey(uint32_t mkey) = 0;

  // Protection domains beyond the default one (setup path). kUnsupported on a backend without
  // them. A PD may be deallocated only once nothing made in it is left.
  virtual Result<uint32_t> alloc_pd();
  virtual Status dealloc_pd(uint32_t pd);
  // reg_mr / create_window_mkey in protection domain `pd` (kDefaultPd: the plain calls).
  virtual Result<MrInfo> reg_mr_in_pd(void* addr, size_t len, uint32_t access, uint32_t pd);
  virtual Result<uint32_t> create_window_mkey_in_pd(uint32_t max_entries, bool remote_invalidate,
                                                    uint32_t pd);
  // Type-2 memory windows (ibv_alloc_mw(3), IBV_MW_TYPE_2), allocated free in `pd`: a bind work
  // request posted on a QP of the same PD (prm::build_bind_mw) gives one a range of an MR
  // registered with kAccessMwBind and binds it to that QP. Returns its rkey (index << 8 | key).
  // kUnsupported on a device without them (DeviceCaps::memory_windows).
  virtual Result<uint32_t> alloc_mw(uint32_t pd);
  virtual Status dealloc_mw(uint32_t rkey);
  // Remote accesses the responder of `qp` refused with a remote access error since the QP was
  // created (bad key, state, rights, bounds, another PD): the peer behind that QP tried memory
  // it may not touch. Control path (may lock). kUnsupported where the backend cannot count
  // per QP.
  virtual Result<uint64_t> refused_remote_accesses(QpHandle qp) const;

  // Up to out.size() asynchronous events, oldest first; returns how many. Never blocks (dv reads
  // the context's non-blocking async fd and acks each event; emu hands over its own queue,
  // which keeps the latest 256 and counts what it dropped). Control thread only, not hot path.
  // The default (a backend without events) returns 0.
  virtual size_t poll_async_events(std::span<AsyncEvent> out);

  // Creates an RC QP and its CQ in the reset state; the descriptor is what QueuePair::init takes.
  virtual Result<QpDesc> create_qp(const QpConfig& cfg) = 0;
  virtual Status destroy_qp(QpHandle qp) = 0;
  virtual ConnectInfo local_info(QpHandle qp) = 0;
  // Brings the QP to RTS connected to `remote` (reset -> init -> rtr -> rts).
  virtual Status connect(QpHandle qp, const ConnectInfo& remote) = 0;
  virtual Status modify_qp(QpHandle qp, QpState to) = 0;
  virtual Result<QpState> query_qp(QpHandle qp) = 0;
};

// Connects qa on da with qb on db, both in this process and on any backend: each QP to RTS
// towards the other (local_info exchanged). Across processes, exchange the connect-info codec's
// bytes (connect_info.hpp) and call Device::connect on each side.
Status connect_qps(Device& da, QpHandle qa, Device& db, QpHandle qb);

}  // namespace rdmx::mlx5
