// rdma_cm through the library (include/rdmx/endpoint/cm.hpp).
#include <mutex>
#include <vector>

#include <rdmx/dv/cm.hpp>
#include <rdmx/dv/dv_device.hpp>
#include <rdmx/endpoint/cm.hpp>

namespace rdmx::endpoint {

struct CmPeer::Impl {
  dv::DvDevice* dev = nullptr;
  std::unique_ptr<dv::CmListener> listener;
  mutable std::mutex mu;  // conns only
  // One accept at a time on the listener: its requests come on one event channel, which two
  // waiting threads would both see ready and then one would block in rdma_get_cm_event
  // (drivers/mlx5/dv/cm.cpp wait_event) past its timeout. Held across the wait for a request.
  std::mutex accept_mu;
  CmConnections<dv::CmConnection> conns;

  uint64_t add(mlx5::QpHandle qp, std::unique_ptr<dv::CmConnection> c) {
    std::lock_guard lk(mu);
    return conns.add(qp, std::move(c));
  }
};

namespace {
Result<dv::DvDevice*> dv_of(mlx5::Device& d) {
  auto* dv = dynamic_cast<dv::DvDevice*>(&d);
  if (!dv)
    return make_error(Errc::kUnsupported, "rdma_cm needs a real mlx5 device, and " + d.name() +
                                              " is not one (emu has no rdma_cm)");
  return dv;
}
}  // namespace

Status CmPeer::check_device(mlx5::Device& dev) {
  RDMX_TRY(dv_of(dev));
  return {};
}

Result<std::unique_ptr<CmPeer>> CmPeer::listen_any(const HostPort& at) {
  auto impl = std::make_unique<Impl>();
  RDMX_TRY_ASSIGN(impl->listener, dv::CmListener::listen(at.host, at.port),
                  "rdma_cm listen on " + at.str());
  return std::unique_ptr<CmPeer>(new CmPeer(std::move(impl)));
}

std::unique_ptr<CmPeer> CmPeer::client_any() {
  return std::unique_ptr<CmPeer>(new CmPeer(std::make_unique<Impl>()));
}

Result<uint64_t> CmPeer::accept(mlx5::Device& dev, mlx5::QpHandle qp, int timeout_ms) {
  if (!impl_->listener) return make_error(Errc::kState, "rdma_cm accept: not listening");
  RDMX_TRY_ASSIGN(dv::DvDevice * d, dv_of(dev), "rdma_cm accept");
  std::unique_lock one(impl_->accept_mu);
  RDMX_TRY_ASSIGN(auto c, impl_->listener->accept(*d, qp, timeout_ms), "rdma_cm accept");
  one.unlock();
  return impl_->add(qp, std::move(c));
}

Result<uint64_t> CmPeer::connect(mlx5::Device& dev, mlx5::QpHandle qp, const HostPort& to) {
  RDMX_TRY_ASSIGN(dv::DvDevice * d, dv_of(dev), "rdma_cm connect to " + to.str());
  RDMX_TRY_ASSIGN(auto c, dv::cm_connect(*d, qp, to.host, to.port),
                  "rdma_cm connect to " + to.str());
  return impl_->add(qp, std::move(c));
}

bool CmPeer::release(uint64_t id) {
  std::lock_guard lk(impl_->mu);
  return impl_->conns.release(id);
}

CmPeer::CmPeer(std::unique_ptr<Impl> impl) noexcept : impl_(std::move(impl)) {}

CmPeer::~CmPeer() {
  if (impl_) {
    impl_->conns.clear();  // each disconnects (no other user is left: no lock)
    impl_->listener.reset();
  }
}

Result<std::unique_ptr<CmPeer>> CmPeer::listen(mlx5::Device& dev, const HostPort& at) {
  auto impl = std::make_unique<Impl>();
  RDMX_TRY_ASSIGN(impl->dev, dv_of(dev));
  RDMX_TRY_ASSIGN(impl->listener, dv::CmListener::listen(at.host, at.port),
                  "rdma_cm listen on " + at.str());
  return std::unique_ptr<CmPeer>(new CmPeer(std::move(impl)));
}

Result<std::unique_ptr<CmPeer>> CmPeer::client(mlx5::Device& dev) {
  auto impl = std::make_unique<Impl>();
  RDMX_TRY_ASSIGN(impl->dev, dv_of(dev));
  return std::unique_ptr<CmPeer>(new CmPeer(std::move(impl)));
}

Status CmPeer::accept(mlx5::QpHandle qp) {
  if (!impl_->listener) return make_error(Errc::kState, "rdma_cm accept: not listening");
  std::unique_lock one(impl_->accept_mu);
  RDMX_TRY_ASSIGN(auto c, impl_->listener->accept(*impl_->dev, qp), "rdma_cm accept");
  one.unlock();
  impl_->add(qp, std::move(c));
  return {};
}

Status CmPeer::connect(mlx5::QpHandle qp, const HostPort& to) {
  RDMX_TRY_ASSIGN(auto c, dv::cm_connect(*impl_->dev, qp, to.host, to.port),
                  "rdma_cm connect to " + to.str());
  impl_->add(qp, std::move(c));
  return {};
}

size_t CmPeer::connections() const {
  std::lock_guard lk(impl_->mu);
  return impl_->conns.size();
}

}  // namespace rdmx::endpoint
