// PeerGuard (peer_guard.hpp): refused remote accesses of one peer and the disconnect policy.
#include <rdmx/core/log.hpp>
#include <rdmx/win/peer_guard.hpp>

namespace rdmx::win {

PeerGuard::PeerGuard(mlx5::Device& dev, mlx5::QpHandle qp, std::string peer, RefusalPolicy policy)
    : dev_(dev), qp_(qp), peer_(std::move(peer)), policy_(policy) {}

Result<bool> PeerGuard::check(Clock::time_point now) {
  RDMX_TRY_ASSIGN(const uint64_t n, dev_.refused_remote_accesses(qp_), "peer guard " + peer_);
  if (!started_) {
    started_ = true;
    base_ = n;
  }
  total_ = n - base_;
  if (disconnected_ || policy_.max_refused == 0) return disconnected_;
  samples_.emplace_back(now, total_);
  while (samples_.size() > 1 && now - samples_.front().first > policy_.window) samples_.pop_front();
  // Refusals since the oldest sample still inside the window (the sample before the window's
  // start bounds it from below: a burst right at its edge still counts).
  const uint64_t in_window = total_ - samples_.front().second;
  if (in_window <= policy_.max_refused && !(samples_.size() == 1 && total_ > policy_.max_refused))
    return false;
  RDMX_TRY(dev_.modify_qp(qp_, mlx5::QpState::kError), "peer guard: disconnect " + peer_);
  disconnected_ = true;
  RDMX_LOG_WARN("peer %s disconnected: %llu remote accesses refused within %lld ms (limit %u)",
                peer_.c_str(), static_cast<unsigned long long>(in_window ? in_window : total_),
                static_cast<long long>(policy_.window.count()), policy_.max_refused);
  return true;
}

}  // namespace rdmx::win
