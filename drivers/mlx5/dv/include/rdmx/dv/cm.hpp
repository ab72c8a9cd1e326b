// Connecting DvDevice queue pairs with librdmacm (rdma_cm), the fabric's own control plane
// (ARCHITECTURE.md "Scale": no home-made control plane).
//
// How: the QP is created by DvDevice (it needs mlx5dv extensions rdma_cm cannot ask for), so the
// cm_id carries no QP. rdma_connect/rdma_accept pass our QPN in rdma_conn_param.qp_num and our
// ConnectInfo (rdmx/mlx5/connect_info.hpp: the versioned 56-byte encoding, which fits the 56
// bytes of private data a REQ carries on RDMA_PS_TCP) as private data; each side reads the peer's
// ConnectInfo from the CM event and moves its own QP RESET -> INIT -> RTR -> RTS with
// DvDevice::connect_routed: QPN, PSN and READ depths from the connect info, the path (DGID, hop
// limit, traffic class, SL, path MTU) and the RC timers (timeout, retry_cnt, rnr_retry,
// min_rnr_timer) from rdma_init_qp_attr, as librdmacm applies them to a QP it manages (cma.c
// ucma_modify_qp_rtr / ucma_modify_qp_rts; dv_math.hpp CmRoute). The active side then completes the
// handshake with rdma_establish (rdma_establish(3): "should be called by the active side to
// complete the connection, after getting connect response event" when the id has no QP).
//
// The route rdma_cm resolves must go through the same device the QP lives on; a mismatch is an
// error naming both devices. Control path only; every call may block up to CmOptions::timeout_ms.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/device.hpp>

struct rdma_cm_id;
struct rdma_event_channel;

namespace rdmx::dv {

class DvDevice;

struct CmOptions {
  int timeout_ms = 5000;             // address/route resolution and each handshake step
  int accept_timeout_ms = -1;        // CmListener::accept: wait for a request; -1 = for ever
  uint8_t responder_resources = 16;  // incoming RDMA READs (CM REQ/REP fields)
  uint8_t initiator_depth = 16;      // outgoing RDMA READs
  uint8_t retry_count = 7;
  uint8_t rnr_retry_count = 7;
  int backlog = 16;
};

// One established connection. Owns its cm_id and event channel; the destructor disconnects.
// The QP stays owned by the DvDevice.
class CmConnection {
 public:
  ~CmConnection();
  CmConnection(const CmConnection&) = delete;
  CmConnection& operator=(const CmConnection&) = delete;

  const mlx5::ConnectInfo& remote() const noexcept { return remote_; }
  mlx5::QpHandle qp() const noexcept { return qp_; }
  // rdma_disconnect, then waits (up to timeout_ms) for RDMA_CM_EVENT_DISCONNECTED. The QP moves
  // to the error state; recover it with DvDevice::recover_qp after a new handshake.
  Status disconnect();

 private:
  friend Result<std::unique_ptr<CmConnection>> cm_connect(DvDevice&, mlx5::QpHandle,
                                                          const std::string&, uint16_t,
                                                          const CmOptions&);
  friend class CmListener;
  CmConnection() = default;

  rdma_event_channel* ch_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  mlx5::ConnectInfo remote_;
  mlx5::QpHandle qp_ = 0;
  int timeout_ms_ = 5000;
  bool connected_ = false;
};

// Active side: resolves host:port, sends our ConnectInfo, connects `qp` (in any state; it is
// reset first) to the peer's. Errors: kTimeout, kDeviceError (rdma_* call failed, rejected,
// unreachable: the message names the CM event), kInvalidArgument (bad peer private data, route
// on another device).
Result<std::unique_ptr<CmConnection>> cm_connect(DvDevice& dev, mlx5::QpHandle qp,
                                                 const std::string& host, uint16_t port,
                                                 const CmOptions& opts = {});

// Passive side.
class CmListener {
 public:
  // Binds to bind_host ("" = every address) and port (0 = any; see port()) and listens.
  static Result<std::unique_ptr<CmListener>> listen(const std::string& bind_host, uint16_t port,
                                                    const CmOptions& opts = {});
  ~CmListener();
  CmListener(const CmListener&) = delete;
  CmListener& operator=(const CmListener&) = delete;

  uint16_t port() const noexcept { return port_; }
  // Waits for one connection request, connects `qp` to the requester and accepts with our
  // ConnectInfo. A request that cannot be served (bad private data, other device, QP transition
  // failed) is rejected and reported as an error; the listener stays usable.
  // accept_timeout_ms: how long to wait for the request (unset: CmOptions::accept_timeout_ms).
  Result<std::unique_ptr<CmConnection>> accept(DvDevice& dev, mlx5::QpHandle qp,
                                               std::optional<int> accept_timeout_ms = {});

 private:
  CmListener() = default;
  rdma_event_channel* ch_ = nullptr;
  rdma_cm_id* id_ = nullptr;
  uint16_t port_ = 0;
  CmOptions opts_;
};

}  // namespace rdmx::dv
