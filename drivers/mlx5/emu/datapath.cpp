// The device's poll: one round of the RoCE link, responses, READ streams, requests and every
// QP's send queue (requester.cpp, responder.cpp, completer.cpp, wqe.cpp). Runs under
// Engine::mu_.
#include "engine.hpp"
#include "roce_link.hpp"

namespace rdmx::emu::detail {

// ---- one poll -----------------------------------------------------------------------------------
bool Engine::progress() {
  bool pending = false;
  std::lock_guard<std::mutex> g(mu_);
  return poll_locked(&pending);
}

bool Engine::poll(bool* pending) {
  std::lock_guard<std::mutex> g(mu_);
  return poll_locked(pending);
}

bool Engine::poll_locked(bool* pending) {
  note_poll_time();
  ++poll_count_;
  ++st_.polls;
  bool work = false;
  bool wait = false;
  RoceLink* link = opt_.mode == Mode::kSink ? nullptr : wire_->link(side_);
  Rings& rings = wire_->rings(side_);
  // The link: packets in before, the engine's messages out after this poll.
  if (link) work |= link->pump(rings, now_ns(), &wait);
  if (opt_.mode != Mode::kSink) {
    work |= rx_responses();
    work |= stream_reads();
    work |= rx_requests();
  }
  for (auto& [qpn, q] : qps_) {
    work |= poll_sq(*q);
    wait |= !q->inflight.empty() || !q->reads.empty() || q->recv_active;
  }
  if (link) work |= link->pump(rings, now_ns(), &wait);
  if (work) ++st_.busy_polls;
  *pending |= wait;
  return work;
}

void Engine::note_poll_time() noexcept {
  if (opt_.mode != Mode::kThreaded) return;
  const uint64_t now = now_ns();
  if (last_poll_ns_ && now - last_poll_ns_ >= 1000000) {
    const uint64_t gap = now - last_poll_ns_;
    gaps_[gap_next_++ % gaps_.size()] = Gap{now, gap};
    st_.max_poll_gap_us = std::max<uint64_t>(st_.max_poll_gap_us, gap / 1000);
  }
  last_poll_ns_ = now;
}

uint64_t Engine::gap_since(uint64_t since) const noexcept {
  uint64_t m = 0;
  for (const Gap& g : gaps_)
    if (g.end_ns > since) m = std::max(m, g.len_ns);
  return m;
}

}  // namespace rdmx::emu::detail
