// Noticing attacks: refused remote accesses per peer, and an optional policy that disconnects a
// peer after N refusals within a time window (off by default). See doc/guides/security.md.
//
// A wrong rkey (bad index or key byte, a window of another peer's PD, out of bounds, missing
// rights) is refused by the responder NIC; the device counts the refusals per QP
// (Device::refused_remote_accesses). One QP = one peer, so the guard of a server core watches
// the peer behind it. check() is control path (it asks the device, which may lock): call it from
// the server's housekeeping loop, not per I/O.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <string>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::win {

struct RefusalPolicy {
  uint32_t max_refused = 0;  // disconnect after more than this many in `window` (0 = never)
  std::chrono::milliseconds window{1000};
};

class PeerGuard {
 public:
  using Clock = std::chrono::steady_clock;
  // `peer`: how the log line names the peer (address, client id, ...).
  PeerGuard(mlx5::Device& dev, mlx5::QpHandle qp, std::string peer, RefusalPolicy policy = {});

  // Reads the device's count. Returns true when the policy says the peer must go: the QP is
  // then moved to the error state (the peer's next request fails; a reconnect needs the server)
  // and one warning names the peer, the count and the window. kUnsupported from a device that
  // cannot count per QP.
  Result<bool> check(Clock::time_point now = Clock::now());

  uint64_t refused() const noexcept { return total_; }  // as of the last check()
  bool disconnected() const noexcept { return disconnected_; }
  const std::string& peer() const noexcept { return peer_; }

 private:
  mlx5::Device& dev_;
  mlx5::QpHandle qp_;
  std::string peer_;
  RefusalPolicy policy_;
  uint64_t total_ = 0;
  uint64_t base_ = 0;  // the count when the guard was made (QP history before it is not ours)
  bool started_ = false;
  bool disconnected_ = false;
  std::deque<std::pair<Clock::time_point, uint64_t>> samples_;  // (when, count) in the window
};

}  // namespace rdmx::win
