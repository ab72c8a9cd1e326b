// The real mlx5 device through rdma-core's mlx5dv API (doc/guides/mlx5.md).
//
// DvDevice implements rdmx::mlx5::Device: it opens an mlx5 device with a DEVX context, creates
// the protection domain, registers the parent MR, creates windows (indirect KLM mkeys with
// mlx5dv_create_mkey) and RC queue pairs whose rings it hands out as a QpDesc (from
// mlx5dv_init_obj). The CPU side then owns those rings completely: QueuePair writes the WQEs,
// rings the doorbell and polls the CQ; rdma-core's own post/poll functions are never called.
//
// Everything here is control path: it allocates, makes system calls and returns Result/Status.
// A DvDevice may be used from several threads; its methods serialise on an internal mutex.
// Nothing here is called on the data path.
//
// On a machine without an RDMA device, open() fails with Errc::kNoDevice and a message naming
// the device asked for (apps exit with status 3 then; doc/guides/mlx5.md).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/device.hpp>

struct ibv_context;
struct ibv_pd;

namespace rdmx::dv {

// One mlx5 device as probe() sees it.
struct DeviceInfo {
  std::string name;        // verbs name, e.g. "mlx5_0"
  int numa_node = -1;      // /sys/class/infiniband/<name>/device/numa_node; -1 = unknown
  std::string pci_addr;    // e.g. "0000:3b:00.0" (basename of the sysfs device link); "" = unknown
  uint64_t node_guid = 0;  // host order
};

// Lists the mlx5 devices (ibv_get_device_list + mlx5dv_is_supported). An empty list when there
// are none or when the kernel has no verbs support. Control path, any thread.
std::vector<DeviceInfo> probe();

// Run-time options, parsed once at open (the defaults are tied together in one place). Defaults
// suit one RC connection per poll core on InfiniBand or RoCE v2.
struct DvOptions {
  uint8_t port = 1;           // HCA port
  int gid_index = -1;         // GID table index; -1 = RoCE: first RoCE v2 IPv4 GID, IB: none
  bool force_grh = false;     // InfiniBand: use a GRH even inside the subnet
  uint32_t mtu = 0;           // path MTU bytes (256..4096); 0 = the port's active MTU
  uint8_t sl = 0;             // service level
  uint8_t traffic_class = 0;  // RoCE: DSCP << 2
  uint8_t hop_limit = 64;     // GRH hop limit
  // RC timers of every QP whose QpConfig::timers is unset (ibv_modify_qp RTR min_rnr_timer, RTS
  // timeout, retry_cnt, rnr_retry): rdma_cm's RoCE defaults (mlx5::RcTimers: 1.07 s, 7, 7).
  mlx5::RcTimers timers;
  uint8_t max_rd_atomic = 16;         // outstanding RDMA READs (clamped to the device's limit)
  uint32_t max_inline_klm = 0;        // KLMs per inline UMR the QPs are sized for; 0 = device max
  bool require_thread_domain = true;  // fail when ibv_alloc_td fails instead of sharing a UAR
  bool allow_fixed_tag = false;       // no effect (kept for source compatibility): windows are
                                      // created without UPDATE_TAG where the kernel lacks it, and
                                      // keys rotate either way (dv_math.hpp window_mkey_flags)
  bool relaxed_ordering = false;      // IBV_ACCESS_RELAXED_ORDERING on reg_mr
};

struct CmRoute;

class DvDevice final : public mlx5::Device {
 public:
  // Opens `name` ("" = the first mlx5 device). Errors: kNoDevice (no such device: the message
  // names it and says what verbs reported), kUnsupported (not an mlx5 device, no DEVX),
  // kDeviceError (a verbs call failed: the message names the call and errno).
  static Result<std::unique_ptr<DvDevice>> open(const std::string& name, const DvOptions& opts);
  ~DvDevice() override;

  const std::string& name() const noexcept override { return name_; }
  const mlx5::DeviceCaps& caps() const noexcept override { return caps_; }
  const DvOptions& options() const noexcept { return opts_; }
  // Whether QUERY_HCA_CAP could be read (false: caps() holds the documented defaults).
  bool hca_caps_read() const noexcept { return hca_caps_read_; }
  bool roce() const noexcept { return roce_; }

  Result<mlx5::MrInfo> reg_mr(void* addr, size_t len, uint32_t access) override;
  Status dereg_mr(const mlx5::MrInfo& mr) override;

  // mlx5dv_create_mkey(INDIRECT | UPDATE_TAG [| REMOTE_INVALIDATE]). The returned key has tag 0;
  // destroy_mkey accepts it with any tag (the window layer rotates bits 7:0).
  Result<uint32_t> create_window_mkey(uint32_t max_entries, bool remote_invalidate) override;
  Status destroy_mkey(uint32_t mkey) override;

  // More protection domains (ibv_alloc_pd on the same context); handles 1, 2, ...
  Result<uint32_t> alloc_pd() override;
  Status dealloc_pd(uint32_t pd) override;
  Result<mlx5::MrInfo> reg_mr_in_pd(void* addr, size_t len, uint32_t access, uint32_t pd) override;
  Result<uint32_t> create_window_mkey_in_pd(uint32_t max_entries, bool remote_invalidate,
                                            uint32_t pd) override;
  // ibv_alloc_mw(IBV_MW_TYPE_2) / ibv_dealloc_mw; the rkey names the window (any tag).
  Result<uint32_t> alloc_mw(uint32_t pd) override;
  Status dealloc_mw(uint32_t rkey) override;

  // CQ + thread domain + parent domain + RC QP (mlx5dv_create_qp), all owned by the returned QPN.
  Result<mlx5::QpDesc> create_qp(const mlx5::QpConfig& cfg) override;
  Status destroy_qp(mlx5::QpHandle qp) override;
  mlx5::ConnectInfo local_info(mlx5::QpHandle qp) override;
  // RESET (when not already there) -> INIT -> RTR -> RTS towards `remote`.
  Status connect(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote) override;
  // connect() with what rdma_cm resolved for the connection (dv_math.hpp CmRoute, from
  // rdma_init_qp_attr) in place of the options: DGID, hop limit, traffic class, SL, path MTU
  // and RC timers; a QP's own QpConfig::timers still win. recover_qp keeps the route; a plain
  // connect() drops it.
  Status connect_routed(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote, const CmRoute& route);
  // One step: to RESET / ERR from anywhere, RESET -> INIT, INIT -> RTR and RTR -> RTS (the last
  // two need a remote from an earlier connect/recover_qp).
  Status modify_qp(mlx5::QpHandle qp, mlx5::QpState to) override;
  Result<mlx5::QpState> query_qp(mlx5::QpHandle qp) override;
  // ibv_get_async_event on the context's async fd (non-blocking since open), each event acked.
  size_t poll_async_events(std::span<mlx5::AsyncEvent> out) override;

  // Recovery after a QP error (doc/guides/mlx5-facts.md §4, §8.6). The caller
  // first drains: it posts nothing more and polls until the CQE of the last posted WQE (a flush
  // error) has been seen, so no flushed CQE is still in flight when the QP is reset. Then this
  // moves the QP ERR -> RESET -> INIT -> RTR -> RTS towards `remote` (the peer must have reset
  // its QP too and sent its current ConnectInfo). After it returns, the caller resets its
  // QueuePair's send and receive rings to index 0 (QueuePair::reset) — the device restarts its
  // WQE counters at 0 and rdma-core clears both doorbell records — but NOT its CQ consumer index:
  // the CQ is not reset. Windows mapped before the error are in an unknown state and must be
  // re-mapped or invalidated before reuse.
  Status recover_qp(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote);

  // The verbs context (for librdmacm checks and tests). Owned by the device.
  ibv_context* verbs_context() const noexcept;

 private:
  struct Impl;
  explicit DvDevice(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  std::string name_;
  mlx5::DeviceCaps caps_;
  DvOptions opts_;
  bool hca_caps_read_ = false;
  bool roce_ = false;
};

}  // namespace rdmx::dv
