// The RC link's loss recovery: the local ACK timeout and the RNR timer of each QP, go-back-N from
// the oldest unacknowledged packet, and "retry exceeded" when the peer is gone (IBTA vol. 1
// 9.7.6.1.3; rxe_req.c req_retry, rxe_comp.c retransmit_timer).
#include <rdmx/mlx5/prm/cqe.hpp>

#include "roce_link.hpp"
#include "wire.hpp"

namespace rdmx::emu::detail {

// Go-back-N from the oldest unacknowledged packet, each one rebuilt from its header and its
// payload gathered again from memory by the engine (as an mlx5 requester re-reads the WQE and
// its gather list: rxe_req.c req_retry rewinds the WQE; IBTA vol. 1 9.7.5). A message the engine
// no longer has (its QP flushed or reset meanwhile) or whose memory is gone is not sent: its
// timer runs on. On a packet ring the window may be larger than the room the ring has: what
// does not fit goes on the next pumps (resend_some), before any new packet of the QP, so that a
// lossless link never refuses one.
void RoceLink::retransmit(Qp& q) noexcept {
  q.resend = 0;
  resend_some(q);
  q.timer_ns = q.tx_count ? now_ : 0;
}

bool RoceLink::resend_some(Qp& q) noexcept {
  if (q.resend == kNoResend) return false;
  bool work = false;
  while (q.resend < q.tx_count && carrier_->tx_room() >= kHeadroom) {
    TxPkt& t = q.tx[(q.tx_head + q.resend) % q.tx.size()];
    t.h.flags |= kPktInMemory;
    send_req(q, t, nullptr);
    ++st_.retransmits;
    ++q.resend;
    work = true;
  }
  if (q.resend >= q.tx_count) q.resend = kNoResend;
  return work;
}

void RoceLink::timers(Rings& w, Qp& q) noexcept {
  if (stalled_only_) return;  // inline: fire_stalled() is the clock
  if (q.rnr_until) {  // the RNR timer: when it ran out, everything unacknowledged goes again
    if (now_ < q.rnr_until) return;
    rnr_expired(q);
    return;
  }
  // The QP's local ACK timeout (4.096 us x 2^timeout, IBTA 9.7.6.1.3); 0 never expires.
  if (!q.tx_count || !q.timer_ns || !q.ack_ns || now_ - q.timer_ns < q.ack_ns) return;
  ack_expired(w, q);
}

void RoceLink::rnr_expired(Qp& q) noexcept {
  q.rnr_until = 0;
  ++retries_;
  retransmit(q);
}

void RoceLink::ack_expired(Rings& w, Qp& q) noexcept {
  ++st_.timeouts;
  if (q.retry_left == 0) {  // the peer is gone: TRANSPORT_RETRY_EXC_ERR (rxe_comp.c)
    kill(w, q, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
    return;
  }
  --q.retry_left;
  ++retries_;
  retransmit(q);
}

bool RoceLink::fire_stalled(Rings& w, uint64_t now_ns) noexcept {
  now_ = now_ns;
  bool fired = false;
  for (auto& [qpn, qp] : qps_) {
    Qp& q = *qp;
    if (q.dead) continue;
    if (q.rnr_until) {
      rnr_expired(q);
      fired = true;
    } else if (q.tx_count && q.ack_ns) {
      ack_expired(w, q);
      fired = true;
    }
  }
  carrier_->flush(now_);
  return fired;
}

}  // namespace rdmx::emu::detail
