// Connecting and recovering poll cores: the setup-path services every entry point shares (the C
// API, rdmafwd, the test rigs), so the recovery order is written once.
//
// Recovery after a QP error (a failed completion; PollCore then refuses new work with kQpError):
//   1. drain: flush, then poll until every WQE posted to the core's queues has completed, which
//      after an error means its flush-error CQE has been read (mlx5: once a QP is in the error
//      state every outstanding WQE completes with a flush error, IB spec 10.3.1 "QP Error
//      state"; rdma-core providers/mlx5/cq.c maps them to IBV_WC_WR_FLUSH_ERR). A healthy QP
//      that still waits for a peer that will not answer is moved to ERR so that it flushes too.
//      Only then may the QP be reset: a CQE written after the reset would belong to nothing.
//   2. reconnect: RESET -> INIT -> RTR -> RTS towards the peer (Device::connect; the peer
//      recovers too and sends its current connect info).
//   3. PollCore::recover(): rings restart at index 0, every window of the core whose device
//      state is unknown is invalidated again (mapped windows return to the cache: mappings are
//      gone), and the core's `recoveries` counter is incremented.
// Every wait is bounded in time.
#pragma once

#include <chrono>
#include <functional>
#include <span>

#include <rdmx/core/result.hpp>
#include <rdmx/mlx5/connect_info.hpp>
#include <rdmx/win/poll_core.hpp>

namespace rdmx::endpoint {

inline constexpr std::chrono::milliseconds kDefaultDrainBudget{5000};

// Two cores of this process, each QP to RTS towards the other (any backend).
Status connect_cores(win::PollCore& a, win::PollCore& b);

// Across processes: this core's connect info as the codec's bytes, and connecting to a peer's
// bytes (Errc::kProtocol when they are not connect info).
mlx5::ConnectInfoBytes local_connect_info(win::PollCore& c);
Status connect_core(win::PollCore& c, std::span<const uint8_t> remote);

// Step 1 above. Application completions read meanwhile go to `on` (may be empty: dropped).
// kTimeout when WQEs are still outstanding after `budget` (half of it before the QP is moved to
// ERR, half after).
Status drain_core(win::PollCore& c, std::chrono::nanoseconds budget = kDefaultDrainBudget,
                  const std::function<void(const mlx5::Completion&)>& on = {});

// Ending a connection whose peer went away, so the core can serve the next one: the QP to the
// error state (every WQE still posted completes once, flushed: IB spec 10.3.1), polled until
// every send and receive has completed (application completions go to `on`), then to RESET: a
// new incarnation (emu's RoCE v2 link draws a new initial PSN for its next connect info). The
// next connect must be recover_core (reconnected, every window invalidated). kTimeout past
// `budget`.
Status disconnect_core(win::PollCore& c, std::chrono::nanoseconds budget = kDefaultDrainBudget,
                       const std::function<void(const mlx5::Completion&)>& on = {});

// Steps 1-3 for one core towards `remote` (the peer recovers on its side). When the peer keeps
// its connection instead (stays in RTS), it must have no request outstanding towards this core:
// its connect info states the next PSN it will send, so this core answers its retransmissions
// of earlier PSNs as duplicates, with an ACK that completes them unexecuted (IBTA C9-105).
Status recover_core(win::PollCore& c, const mlx5::ConnectInfo& remote);
// Steps 1-3 for two connected cores of this process: both drained before either is reset.
Status recover_cores(win::PollCore& a, win::PollCore& b);

}  // namespace rdmx::endpoint
