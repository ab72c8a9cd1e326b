// --fwd umr: map chunk pages into a window and unmap it again, nothing else (registration rate).
// One I/O = one map UMR + one invalidate UMR on the client core's SQ; it is complete when its
// invalidate UMR completed. UMRs complete in SQ order, so the I/O count follows from the core's
// UMR completion counter (two per I/O) and the issue TSCs live in a ring indexed by I/O number.
#include "common.hpp"

namespace rdmafwd {
namespace {

bool start(Lane& l) {
  reset_slots(l);
  l.umr_base = l.c->stats().umr_completions;
  return true;
}

bool fwd(Lane& l) {
  win::PollCore& c = *l.c;
  bool busy = c.poll(l.cfg.burst * 4, [&](const mlx5::Completion& x) {
    if (!x.ok()) io_failed(l);
  }) > 0;
  if (c.qp().in_error() && !l.failed) io_failed(l);
  const uint64_t now = rte_rdtsc();
  const uint64_t done = (c.stats().umr_completions - l.umr_base) / 2;
  const uint32_t len = io_len(l);
  while (l.completed < done && l.completed < l.issued)
    io_done(l, l.ring[l.completed % l.depth], now, len);
  retry_unmaps(c, l);
  if (l.unmap_n == 0 && may_issue(l)) {
    uint32_t n = 0;
    while (n < l.cfg.burst && l.issued - l.completed < l.depth && may_issue(l)) {
      const uint32_t slot = static_cast<uint32_t>(l.issued % l.depth);
      const win::MapResult m = c.map(std::span<const uint64_t>(l.c_src.slot(slot), l.cfg.pages),
                                     mlx5::kAccessLocalWrite, 0, len);
      if (!m.ok()) {
        note_reject(l, m.errc);
        break;
      }
      l.ring[slot] = now;
      ++l.issued;
      ++n;
      unmap_or_queue(c, l, m.window);
      if (l.unmap_n) break;
    }
    busy |= n > 0;
  }
  c.flush();
  return busy;
}

bool idle(Lane& l) {
  if (l.failed) return true;  // the runner counts what never completed
  return l.completed == l.issued && l.unmap_n == 0;
}

}  // namespace

extern const Engine kUmrEngine = {
    "umr", "map + unmap only (registration rate)", false, false, start, fwd, idle};

}  // namespace rdmafwd
