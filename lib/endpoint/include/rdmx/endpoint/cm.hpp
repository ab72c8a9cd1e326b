// rdma_cm for an application that opened its device by name: the QPs of a real mlx5 device
// connected through librdmacm (drivers/mlx5/dv/cm.hpp: the connect info in the CM REQ/REP
// private data, the route resolved to the device's port and GID), without the application
// reaching into the driver. A session then skips its INFO frames (Session::connected_elsewhere).
//
//   server: auto cm = CmPeer::listen(dev, at);  ... cm->accept(qp) per QP, in the client's order
//   client: auto cm = CmPeer::client(dev);      ... cm->connect(qp, server) per QP
//
// Errors: kUnsupported when the device is not a real mlx5 (emu has no rdma_cm; its QPs meet
// over the session's INFO frames); what librdmacm reports otherwise, naming the QP's step.
// Setup path; every wait is bounded by the driver's CM timeouts (5 s per step).
#pragma once

#include <memory>

#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/rendezvous.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::endpoint {

class CmPeer {
 public:
  // Listens in rdma_cm's port space (RDMA_PS_TCP) on `at` for QPs of `dev`.
  static Result<std::unique_ptr<CmPeer>> listen(mlx5::Device& dev, const HostPort& at);
  // Connects QPs of `dev` to a listening server.
  static Result<std::unique_ptr<CmPeer>> client(mlx5::Device& dev);
  ~CmPeer();  // disconnects every connection (while their QPs exist: destroy this first)
  CmPeer(const CmPeer&) = delete;
  CmPeer& operator=(const CmPeer&) = delete;

  // Listens without a device: each accept names the device of its QP (rdma_cm picks the device
  // by the route; the accept refuses a route through another one). Fails at once where rdma_cm
  // has no device (kNoDevice).
  static Result<std::unique_ptr<CmPeer>> listen_any(const HostPort& at);
  // A client without a device: each connect names the device of its QP.
  static std::unique_ptr<CmPeer> client_any();
  // Whether QPs of `dev` can be connected through rdma_cm: kUnsupported naming the device when
  // it is not a real mlx5 device (emu has no rdma_cm).
  static Status check_device(mlx5::Device& dev);

  // Server: the next connection request, onto `qp`.
  Status accept(mlx5::QpHandle qp);
  // The same onto a QP of `dev`, waiting at most timeout_ms for the request (-1: for ever).
  Status accept(mlx5::Device& dev, mlx5::QpHandle qp, int timeout_ms);
  // Client: `qp` to the server at `to`.
  Status connect(mlx5::QpHandle qp, const HostPort& to);
  Status connect(mlx5::Device& dev, mlx5::QpHandle qp, const HostPort& to);
  size_t connections() const noexcept;

 private:
  struct Impl;
  explicit CmPeer(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdmx::endpoint
