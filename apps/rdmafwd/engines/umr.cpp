// --fwd umr: map chunk pages into a window and unmap it again, nothing else (registration rate).
// One I/O = one map UMR + one invalidate UMR on the client core's SQ; it is complete when its
// invalidate UMR completed. UMRs complete in SQ order, so the I/O count follows from the core's
// UMR completion counter (two per I/O) and the issue TSCs live in a ring indexed by I/O number
// (UmrState, engines/state.hpp).
#include "common.hpp"

namespace rdmafwd {
namespace {

bool start(Lane& l) {
  reset_slots(l);
  l.umr.umr_base = l.c->stats().umr_completions;
  return true;
}

// The core's completions: an error one fails the lane (the runner recovers it).
bool poll_umrs(Lane& l, win::PollCore& c) {
  const bool busy = c.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (!x.ok()) io_failed(l);
  }) > 0;
  if (c.qp().in_error() && !l.failed) io_failed(l);
  return busy;
}

// The I/Os whose invalidate UMR completed, timed from their issue.
void complete_ios(Lane& l, const win::PollCore& c, uint64_t now) {
  const uint64_t done = (c.stats().umr_completions - l.umr.umr_base) / 2;
  const uint32_t len = io_len(l);
  while (l.completed < done && l.completed < l.issued)
    io_done(l, l.umr.issue_tsc[l.completed % l.depth], now, len);
}

// Up to a burst of map + unmap pairs while the depth allows; stops at the first refusal or an
// unmap left queued (no SQ room). Returns how many were issued.
uint32_t issue_maps(Lane& l, win::PollCore& c, uint64_t now) {
  const uint32_t len = io_len(l);
  uint32_t n = 0;
  while (n < l.cfg.burst && l.issued - l.completed < l.depth && may_issue(l)) {
    const uint32_t slot = static_cast<uint32_t>(l.issued % l.depth);
    const win::MapResult m = c.map(std::span<const uint64_t>(l.c_src.slot(slot), l.cfg.pages),
                                   mlx5::kAccessLocalWrite, 0, len);
    if (!m.ok()) {
      note_reject(l, m.errc);
      break;
    }
    l.umr.issue_tsc[slot] = now;
    ++l.issued;
    ++n;
    unmap_or_queue(c, l.unmaps, m.window);
    if (l.unmaps.n) break;
  }
  return n;
}

bool fwd(Lane& l) {
  win::PollCore& c = *l.c;
  bool busy = poll_umrs(l, c);
  const uint64_t now = rte_rdtsc();
  complete_ios(l, c, now);
  retry_unmaps(c, l.unmaps);
  if (l.unmaps.n == 0 && may_issue(l)) busy |= issue_maps(l, c, now) > 0;
  c.flush();
  return busy;
}

bool idle(Lane& l) {
  if (l.failed) return true;  // the runner counts what never completed
  return l.completed == l.issued && l.unmaps.n == 0;
}

// After a recovery the I/O count carries on: completions count from the core's UMR counter (two
// per I/O) as if I/O number 0 had been issued at its present value less the I/Os so far.
void recovered(Lane& l) {
  l.umr.umr_base = l.c->stats().umr_completions - 2 * l.issued;
}

}  // namespace

extern const Engine kUmrEngine = {
    "umr",    "map + unmap only (registration rate)", false, false, start, fwd, idle, nullptr,
    recovered};

}  // namespace rdmafwd
