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

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/rendezvous.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::endpoint {

// The rdma_cm connections a CmPeer holds, one per QP, each under an id. A QP connected again (its
// peer reconnected, or its core serves the next client) gives its previous connection back at
// once; a session that ends gives back its own (release). Without this a long-running server
// kept every connection it ever accepted (each a cm_id, an event channel and a DREQ still to
// send) until the listener closed. Giving one back destroys its cm_id: rdma_disconnect(3) sends
// the DREQ to that connection's peer; the cm_id carries no QP (drivers/mlx5/dv/cm.hpp), so the
// QP, now someone else's or being drained, is not touched (librdmacm cma.c rdma_disconnect moves
// only id->qp to the error state). Generic over the connection so that the rule is tested without
// an RDMA device. Not thread-safe (CmPeer holds its lock around it).
template <class Conn>
class CmConnections {
 public:
  // Holds `c` for `qp`, giving back the connection `qp` had; returns c's id (never 0).
  uint64_t add(uint32_t qp, std::unique_ptr<Conn> c) {
    std::erase_if(v_, [qp](const Entry& e) { return e.qp == qp; });
    v_.push_back({qp, ++last_, std::move(c)});
    return last_;
  }
  // Gives back connection `id`; false when it is not held (its QP was connected again since, or
  // it was given back already).
  bool release(uint64_t id) {
    return std::erase_if(v_, [id](const Entry& e) { return e.id == id; });
  }
  size_t size() const noexcept { return v_.size(); }
  void clear() noexcept { v_.clear(); }

 private:
  struct Entry {
    uint32_t qp;
    uint64_t id;
    std::unique_ptr<Conn> c;
  };
  std::vector<Entry> v_;
  uint64_t last_ = 0;
};

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

  // Server: the next connection request, onto `qp`. A connection `qp` had before is given back
  // (CmConnections): one connection per QP.
  Status accept(mlx5::QpHandle qp);
  // The same onto a QP of `dev`, waiting at most timeout_ms for the request (-1: for ever);
  // returns the connection's id (release()).
  Result<uint64_t> accept(mlx5::Device& dev, mlx5::QpHandle qp, int timeout_ms);
  // Client: `qp` to the server at `to` (the same rule).
  Status connect(mlx5::QpHandle qp, const HostPort& to);
  Result<uint64_t> connect(mlx5::Device& dev, mlx5::QpHandle qp, const HostPort& to);
  // The session that owned connection `id` ended: its cm_id goes (see CmConnections). false when
  // it was given back already.
  bool release(uint64_t id);
  // Connections held now. Any thread: a CmPeer may be shared by sessions on several threads (the
  // C API's listener); the waits of accept() and connect() hold no lock of the CmPeer.
  size_t connections() const;

 private:
  struct Impl;
  explicit CmPeer(std::unique_ptr<Impl> impl) noexcept;
  std::unique_ptr<Impl> impl_;
};

}  // namespace rdmx::endpoint
