// Connect and recover services (the protocol: include/rdmx/endpoint/connect.hpp).
#include <thread>

#include <rdmx/endpoint/connect.hpp>
#include <rdmx/mlx5/device.hpp>
#include <rdmx/win/window_pool.hpp>

namespace rdmx::endpoint {

namespace {

using Clock = std::chrono::steady_clock;

mlx5::Device& device_of(win::PollCore& c) {
  return c.pool().device();
}

// Every WQE posted has completed; receives count once the QP is in error (they are flushed
// then; a healthy QP keeps its receives posted).
bool drained(win::PollCore& c) {
  mlx5::QueuePair& q = c.qp();
  return q.sq().in_flight() == 0 && (!q.in_error() || q.rq().posted_not_completed() == 0);
}

bool poll_until_drained(win::PollCore& c, Clock::time_point deadline,
                        const std::function<void(const mlx5::Completion&)>& on) {
  while (!drained(c)) {
    const uint32_t n = c.poll(64, [&](const mlx5::Completion& x) {
      if (on) on(x);
    });
    if (n == 0) {
      if (Clock::now() >= deadline) return false;
      std::this_thread::yield();  // the device (emu's thread, a NIC) writes the flush CQEs
    }
  }
  return true;
}

}  // namespace

Status connect_cores(win::PollCore& a, win::PollCore& b) {
  return mlx5::connect_qps(device_of(a), a.qp_handle(), device_of(b), b.qp_handle());
}

mlx5::ConnectInfoBytes local_connect_info(win::PollCore& c) {
  return mlx5::encode_connect_info(device_of(c).local_info(c.qp_handle()));
}

Status connect_core(win::PollCore& c, std::span<const uint8_t> remote) {
  RDMX_TRY_ASSIGN(const mlx5::ConnectInfo ci, mlx5::decode_connect_info(remote));
  return device_of(c).connect(c.qp_handle(), ci);
}

Status drain_core(win::PollCore& c, std::chrono::nanoseconds budget,
                  const std::function<void(const mlx5::Completion&)>& on) {
  c.flush();
  const Clock::time_point start = Clock::now();
  if (poll_until_drained(c, start + budget / 2, on)) return {};
  // Still waiting (for a peer that will not answer): to ERR, so that the rest flushes.
  RDMX_TRY(device_of(c).modify_qp(c.qp_handle(), mlx5::QpState::kError), "drain: QP to ERR");
  if (poll_until_drained(c, start + budget, on)) return {};
  return make_error(Errc::kTimeout, "drain: " + std::to_string(c.qp().sq().in_flight()) +
                                        " send WQEBBs and " +
                                        std::to_string(c.qp().rq().posted_not_completed()) +
                                        " receives still outstanding after " +
                                        std::to_string(budget.count() / 1000000) + " ms");
}

Status disconnect_core(win::PollCore& c, std::chrono::nanoseconds budget,
                       const std::function<void(const mlx5::Completion&)>& on) {
  mlx5::Device& dev = device_of(c);
  RDMX_TRY(dev.modify_qp(c.qp_handle(), mlx5::QpState::kError), "disconnect: QP to ERR");
  // Sends and receives alike (drained() counts receives only once the software QP has seen an
  // error CQE; here the flush completions of the receives are the application's too).
  const Clock::time_point deadline = Clock::now() + budget;
  mlx5::QueuePair& q = c.qp();
  while (q.sq().in_flight() != 0 || q.rq().posted_not_completed() != 0) {
    const uint32_t n = c.poll(64, [&](const mlx5::Completion& x) {
      if (on) on(x);
    });
    if (n) continue;
    if (Clock::now() >= deadline)
      return make_error(Errc::kTimeout, "disconnect: " + std::to_string(q.sq().in_flight()) +
                                            " send WQEBBs and " +
                                            std::to_string(q.rq().posted_not_completed()) +
                                            " receives still outstanding after " +
                                            std::to_string(budget.count() / 1000000) + " ms");
    std::this_thread::yield();  // the device writes the flush completions
  }
  RDMX_TRY(dev.modify_qp(c.qp_handle(), mlx5::QpState::kReset), "disconnect: QP to RESET");
  return {};
}

Status recover_core(win::PollCore& c, const mlx5::ConnectInfo& remote) {
  RDMX_TRY(drain_core(c), "recover");
  RDMX_TRY(device_of(c).connect(c.qp_handle(), remote), "recover: reconnect");
  return c.recover();
}

Status recover_cores(win::PollCore& a, win::PollCore& b) {
  RDMX_TRY(drain_core(a), "recover");
  RDMX_TRY(drain_core(b), "recover (peer)");
  RDMX_TRY(connect_cores(a, b), "recover: reconnect");
  RDMX_TRY(a.recover(), "recover");
  RDMX_TRY(b.recover(), "recover (peer)");
  return {};
}

}  // namespace rdmx::endpoint
