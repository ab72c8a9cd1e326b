// `cache`: the per-core window cache (rdmx::win::WindowCache) get+put against rte_mempool's
// per-lcore cache and rte_ring, single and burst of 32, on one core, no device work.
#include <rdmx/win/window.hpp>
#include <rdmx/win/window_cache.hpp>

#include <cstdio>
#include <memory>
#include <stdexcept>

#include "dpdk_peers.hpp"
#include "tests.hpp"

// The peers dequeue into uninitialised locals on purpose (as DPDK's own perf tests do: the
// dequeue fills them); GCC cannot see through rte_ring's inlined copy loop.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace rdmx::perf {

namespace {
constexpr uint32_t kBurst = 32;
constexpr uint32_t kMempoolObjs = 8191;
constexpr uint32_t kMempoolCache = 256;
constexpr uint32_t kRingSize = 1024;

void fail(const char* what) {
  throw std::runtime_error(std::string(what) + ": " + rte_strerror(rte_errno));
}

CaseResult meta(const char* name, const char* role, uint32_t burst) {
  CaseResult c;
  c.name = name;
  c.role = role;
  c.unit = "get+put";
  c.burst = burst;
  return c;
}
// The peers: an rte_mempool with a per-lcore cache, an SP/SC and an MP/MC rte_ring, the rings
// half full like the window cache.
struct CachePeers {
  rte_mempool* mp;
  rte_ring* spsc;
  rte_ring* mpmc;
};

// get+put of one object: the window cache, then each peer.
void add_single_cases(win::WindowCache& cache, const CachePeers& p,
                      std::vector<std::unique_ptr<Bench>>& g) {
  rte_mempool* mp = p.mp;
  rte_ring* spsc = p.spsc;
  rte_ring* mpmc = p.mpmc;
  // -- single --
  g.push_back(make_bench(meta("window_cache.single", "rdmx", 1), [&cache] {
    win::Window* w = cache.pop();
    keep(w);
    cache.push(w);
  }));
  g.push_back(make_bench(meta("rte_mempool.single", "peer", 1), [mp] {
    void* o;
    (void)rte_mempool_get(mp, &o);
    keep(o);
    rte_mempool_put(mp, o);
  }));
  g.push_back(make_bench(meta("rte_ring.spsc.single", "peer", 1), [spsc] {
    void* o;
    (void)rte_ring_sc_dequeue(spsc, &o);
    keep(o);
    (void)rte_ring_sp_enqueue(spsc, o);
  }));
  g.push_back(make_bench(meta("rte_ring.mpmc.single", "peer", 1), [mpmc] {
    void* o;
    (void)rte_ring_mc_dequeue(mpmc, &o);
    keep(o);
    (void)rte_ring_mp_enqueue(mpmc, o);
  }));
}

// The same with bursts of kBurst objects (figures per object).
void add_burst_cases(win::WindowCache& cache, const CachePeers& p,
                     std::vector<std::unique_ptr<Bench>>& g) {
  rte_mempool* mp = p.mp;
  rte_ring* spsc = p.spsc;
  rte_ring* mpmc = p.mpmc;
  // -- burst of 32 (figures per object) --
  g.push_back(make_bench(meta("window_cache.burst32", "rdmx", kBurst), [&cache] {
    win::Window* w[kBurst];
    (void)cache.pop_burst(w, kBurst);
    keep(w);
    cache.push_burst(w, kBurst);
  }));
  g.push_back(make_bench(meta("rte_mempool.burst32", "peer", kBurst), [mp] {
    void* o[kBurst];
    (void)rte_mempool_get_bulk(mp, o, kBurst);
    keep(o);
    rte_mempool_put_bulk(mp, o, kBurst);
  }));
  g.push_back(make_bench(meta("rte_ring.spsc.burst32", "peer", kBurst), [spsc] {
    void* o[kBurst];
    (void)rte_ring_sc_dequeue_bulk(spsc, o, kBurst, nullptr);
    keep(o);
    (void)rte_ring_sp_enqueue_bulk(spsc, o, kBurst, nullptr);
  }));
  g.push_back(make_bench(meta("rte_ring.mpmc.burst32", "peer", kBurst), [mpmc] {
    void* o[kBurst];
    (void)rte_ring_mc_dequeue_bulk(mpmc, o, kBurst, nullptr);
    keep(o);
    (void)rte_ring_mp_enqueue_bulk(mpmc, o, kBurst, nullptr);
  }));
}

// The cache against the cached rte_mempool (single and burst), and no allocation or system call.
void add_cache_targets(TestResult& t, const CaseResult* ws, const CaseResult* wb) {
  Target tg;
  tg.name = "window cache get+put <= 0.5 x rte_mempool cached get+put (single)";
  tg.value = ws->ratios[0].value;
  tg.limit = 0.5;
  tg.cmp = "<=";
  tg.met = tg.value <= tg.limit;
  tg.how = "median ns/op ratio, same run, interleaved rounds";
  t.targets.push_back(tg);
  Target tb = tg;
  tb.name = "window cache get+put <= 0.5 x rte_mempool cached get+put (burst 32)";
  tb.value = wb->ratios[0].value;
  tb.met = tb.value <= tb.limit;
  t.targets.push_back(tb);
  Target za;
  za.name = "window cache allocs/op == 0";
  za.value = ws->allocs_per_op + wb->allocs_per_op;
  za.limit = 0;
  za.cmp = "<=";
  za.met = za.value <= 0;
  za.how = "malloc-family interposer, measuring thread";
  t.targets.push_back(za);
  if (ws->syscalls_per_op >= 0) {
    Target zs = za;
    zs.name = "window cache syscalls/op == 0";
    zs.value = ws->syscalls_per_op + wb->syscalls_per_op;
    zs.met = zs.value <= 0;
    zs.how = "perf tracepoint raw_syscalls:sys_enter, measuring thread";
    t.targets.push_back(zs);
  }
}

}  // namespace

TestResult test_cache(Ctx& ctx) {
  TestResult t;
  t.test = "cache";

  // The window cache, as a poll core holds it: nominal size 64, half full.
  constexpr uint32_t kWindows = 256;
  auto windows = std::make_unique<win::Window[]>(kWindows);
  win::WindowCache cache;
  cache.init(64, kWindows);
  for (uint32_t i = 0; i < 32; ++i) cache.push(&windows[i]);

  rte_mempool* mp = rte_mempool_create("perf_mp", kMempoolObjs, sizeof(win::Window), kMempoolCache,
                                       0, nullptr, nullptr, nullptr, nullptr, SOCKET_ID_ANY, 0);
  if (!mp) fail("rte_mempool_create");
  rte_ring* spsc =
      rte_ring_create("perf_spsc", kRingSize, SOCKET_ID_ANY, RING_F_SP_ENQ | RING_F_SC_DEQ);
  rte_ring* mpmc = rte_ring_create("perf_mpmc", kRingSize, SOCKET_ID_ANY, 0);
  if (!spsc || !mpmc) fail("rte_ring_create");
  // Rings half full, like the cache.
  for (uint32_t i = 0; i < kRingSize / 2; ++i) {
    rte_ring_enqueue(spsc, &windows[i % kWindows]);
    rte_ring_enqueue(mpmc, &windows[i % kWindows]);
  }

  std::vector<std::unique_ptr<Bench>> g;
  const CachePeers peers{mp, spsc, mpmc};
  add_single_cases(cache, peers, g);
  add_burst_cases(cache, peers, g);
  t.cases = run_group(ctx.rc, g);

  // Sanity: every object went back.
  if (cache.len() != 32) t.notes.push_back("window cache length changed during the run");
  if (rte_mempool_avail_count(mp) != kMempoolObjs)
    t.notes.push_back("mempool lost objects during the run");

  const char* singles[] = {"rte_mempool.single", "rte_ring.spsc.single", "rte_ring.mpmc.single"};
  const char* bursts[] = {"rte_mempool.burst32", "rte_ring.spsc.burst32", "rte_ring.mpmc.burst32"};
  CaseResult* ws = t.find("window_cache.single");
  CaseResult* wb = t.find("window_cache.burst32");
  for (const char* p : singles) add_ratio(*ws, *t.find(p));
  for (const char* p : bursts) add_ratio(*wb, *t.find(p));
  add_cache_targets(t, ws, wb);

  rte_ring_free(spsc);
  rte_ring_free(mpmc);
  rte_mempool_free(mp);
  return t;
}

}  // namespace rdmx::perf
