// `umr` (map+unmap on the sink device, swept over pages per window) and `umr_lat`
// (post-to-completion latency of a map over the threaded emu).
#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <span>

#include "dpdk_peers.hpp"
#include "node.hpp"
#include "tests.hpp"

namespace rdmx::perf {

namespace {

constexpr uint32_t kAccess =
    mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead;

constexpr uint32_t kMwAccess = mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead;

// The umr test's unit of work: `batch` map+unmap pairs (map() returns the MapResult), then one
// doorbell and one poll. (The memory-window case below repeats its shape rather than sharing a
// generic version: that one was not inlined into the measured loop, which moved the guarded
// instruction counts by the harness's own cost.)
template <class Map>
void map_unmap_batch(win::PollCore& core, uint32_t batch, uint64_t& errors, Map&& map) {
  for (uint32_t i = 0; i < batch; ++i) {
    win::MapResult r = map();
    if (!r.ok()) [[unlikely]] {
      ++errors;
      continue;
    }
    (void)core.unmap(r.window);
  }
  core.flush();
  core.poll(64, [](const mlx5::Completion&) {});
}

struct Floorbuf {
  void* p = nullptr;
  explicit Floorbuf(size_t bytes) {
    p = std::aligned_alloc(4096, bytes);
    if (!p) throw std::runtime_error("floor buffer");
  }
  ~Floorbuf() { std::free(p); }
};

std::vector<uint32_t> default_sweep(uint32_t max) {
  std::vector<uint32_t> v;
  for (uint32_t p = 1; p <= max; p *= 2) v.push_back(p);
  return v;
}

CaseResult mempool_meta() {
  CaseResult c;
  c.name = "rte_mempool.single";
  c.role = "peer";
  c.unit = "get+put";
  return c;
}

Target target(std::string name, double value, const char* cmp, double limit, std::string how) {
  Target t;
  t.name = std::move(name);
  t.value = value;
  t.cmp = cmp;
  t.limit = limit;
  t.met = std::string(cmp) == "<=" ? value <= limit : value >= limit;
  t.how = std::move(how);
  return t;
}

// What every umr group measures with: the node under test (random keys), its peer with
// increment keys, the rte_mempool peer, the floor's buffer.
struct UmrSides {
  Node& n;
  Node& ni;
  rte_mempool* mp;
  void* floor_buf;
  uint32_t max_pages;
  uint32_t batch;
  uint32_t inline_limit;
  uint64_t& map_errors;
};

// One page count's group and what its cases capture by reference (so it is filled in place).
struct UmrGroup {
  std::vector<std::unique_ptr<Bench>> g;
  std::vector<win::MapRequest> reqs;
  std::vector<win::Window*> ws;
  bool il = false;  // the interleaved case is in the group (res[4])
  size_t mw_at = 0, burst_at = 0;
};

// res[0..3]: map+unmap (random keys), the same with increment keys, rte_mempool get+put, the
// syscall+pin floor.
void add_umr_klm_cases(const UmrSides& s, uint32_t pages, const CaseResult& m, UmrGroup& out) {
  win::PollCore& core = s.n.core();
  win::PollCore& core_inc = s.ni.core();
  uint64_t& map_errors = s.map_errors;
  const uint32_t batch = s.batch;
  const uint64_t bytes = m.bytes;
  std::span<const uint64_t> pg(s.n.pages.data(), pages);
  std::vector<std::unique_ptr<Bench>>& g = out.g;
  g.push_back(make_bench(m, [&core, pg, bytes, batch, &map_errors] {
    map_unmap_batch(core, batch, map_errors, [&] { return core.map(pg, kAccess, 0, bytes); });
  }));
  CaseResult mi = m;
  mi.name = "umr.map_unmap_inckey.p" + std::to_string(pages);
  mi.role = "peer";
  mi.note = "increment keys (debugging policy), same map+unmap";
  std::span<const uint64_t> pgi(s.ni.pages.data(), pages);
  g.push_back(make_bench(mi, [&core_inc, pgi, bytes, batch, &map_errors] {
    map_unmap_batch(core_inc, batch, map_errors,
                    [&] { return core_inc.map(pgi, kAccess, 0, bytes); });
  }));
  rte_mempool* mp = s.mp;
  g.push_back(make_bench(mempool_meta(), [mp] {
    void* obj;
    (void)rte_mempool_get(mp, &obj);
    keep(obj);
    rte_mempool_put(mp, obj);
  }));
  g.push_back(make_floor_bench(pages, bytes, s.floor_buf));
}

// The other shapes of window over as much data: interleaved (while the layout fits a window), a
// type-2 memory window, the burst calls.
void add_umr_shape_cases(const UmrSides& s, uint32_t pages, const CaseResult& m, UmrGroup& out) {
  win::PollCore& core = s.n.core();
  uint64_t& map_errors = s.map_errors;
  const uint32_t batch = s.batch;
  const uint64_t bytes = m.bytes;
  std::span<const uint64_t> pg(s.n.pages.data(), pages);
  std::vector<std::unique_ptr<Bench>>& g = out.g;
  // The same data as `pages` 4 KiB blocks, each followed by its 8 bytes of metadata from a
  // separate array (one repeat-block UMR of two entries, whatever the block count), while the
  // layout fits a window.
  const uint64_t il_bytes = uint64_t{pages} * (4096 + 8);
  out.il = il_bytes <= uint64_t{s.max_pages} * 4096;
  const uint64_t abase = s.n.ep.arena().page_addr(0);
  const std::array<win::InterleavedPart, 2> parts = {
      win::InterleavedPart{abase, 4096, 0},
      win::InterleavedPart{s.n.ep.arena().page_addr(s.max_pages), 8, 0}};
  if (out.il) {
    CaseResult mv = m;
    mv.name = "umr.interleaved.p" + std::to_string(pages);
    mv.note = "interleaved window: 4 KiB data + 8 B metadata per block (repeat-block UMR)";
    mv.bytes = il_bytes;
    g.push_back(make_bench(mv, [&core, parts, pages, batch, &map_errors] {
      map_unmap_batch(core, batch, map_errors,
                      [&] { return core.map_interleaved(parts, pages, kAccess); });
    }));
  }
  // A type-2 memory window bound to the same number of contiguous arena bytes (one bind WQE
  // with one translation entry, whatever the length), then invalidated.
  CaseResult mw = m;
  mw.name = "umr.mw_bind.p" + std::to_string(pages);
  mw.unit = "bind+invalidate";
  mw.note = "type-2 memory window over contiguous bytes (one entry), bind + invalidate";
  g.push_back(make_bench(mw, [&core, abase, bytes, batch, &map_errors] {
    for (uint32_t i = 0; i < batch; ++i) {
      win::BindResult r = core.bind_mw(abase, bytes, kMwAccess);
      if (!r.ok()) [[unlikely]] {
        ++map_errors;
        continue;
      }
      (void)core.invalidate_mw(r.mw);
    }
    core.flush();
    core.poll(64, [](const mlx5::Completion&) {});
  }));
  out.mw_at = g.size() - 1;
  // The same pairs through the burst calls: `batch` maps in one map_burst (the SQ producer,
  // the cache top and the key draw kept in registers across the burst), then one unmap_burst.
  CaseResult mb = m;
  mb.name = "umr.map_unmap_burst.p" + std::to_string(pages);
  mb.note = "map_burst of " + std::to_string(batch) + " then unmap_burst of them";
  out.reqs.assign(batch, win::MapRequest{pg, kAccess, 0, bytes});
  out.ws.assign(batch, nullptr);
  std::vector<win::MapRequest>& reqs = out.reqs;
  std::vector<win::Window*>& ws = out.ws;
  g.push_back(make_bench(mb, [&core, &reqs, &ws, &map_errors] {
    const size_t k = core.map_burst(reqs, ws);
    map_errors += reqs.size() - k;
    (void)core.unmap_burst(std::span<win::Window* const>(ws.data(), k));
    core.flush();
    core.poll(64, [](const mlx5::Completion&) {});
  }));
  out.burst_at = g.size() - 1;
}

// The same-run ratios of one group's results, the peers named after their page count.
void add_umr_ratios(std::vector<CaseResult>& res, const UmrGroup& grp, uint32_t pages,
                    uint32_t inline_limit) {
  add_ratio(res[grp.burst_at], res[2]);   // burst pair / rte_mempool get+put
  add_ratio(res[grp.burst_at], res[0]);   // burst pair / single-call pair
  if (grp.il) add_ratio(res[4], res[0]);  // interleaved / KLM window of the same data pages
  add_ratio(res[grp.mw_at], res[0]);      // memory window / KLM window of as many bytes
  res[0].extra.push_back({"inline", pages <= inline_limit ? 1.0 : 0.0});
  add_ratio(res[0], res[2]);
  add_ratio(res[0], res[3]);
  add_ratio(res[0], res[1]);  // random keys / increment keys
  res[2].name += ".p" + std::to_string(pages);
  res[2].ratios.clear();
  res[1].ratios.clear();
  res[0].ratios[0].peer = res[2].name;
  res[grp.burst_at].ratios[0].peer = res[2].name;
  res[3].name += ".p" + std::to_string(pages);
  res[0].ratios[1].peer = res[3].name;
  res[0].extra.push_back({"floor_over_umr", res[3].ns / res[0].ns});
  res[0].extra.push_back({"random_over_increment_keys", res[0].ns / res[1].ns});
}

// The umr test's targets: cost against rte_mempool and the floor, per extra page, and no
// allocation or system call per op.
void add_umr_targets(TestResult& t, uint64_t map_errors) {
  const CaseResult* u16 = t.find("umr.map_unmap.p16");
  if (u16) {
    const CaseResult* mp16 = t.find("rte_mempool.single.p16");
    const CaseResult* f16 = t.find("syscall+pin.floor.p16");
    t.targets.push_back(target("map+unmap 16 pages (sink) <= 2.5 x rte_mempool get+put",
                               u16->ns / mp16->ns, "<=", 2.5, "median ns/op, same group"));
    if (const CaseResult* b16 = t.find("umr.map_unmap_burst.p16"))
      t.targets.push_back(target("map_burst+unmap_burst 16 pages (sink) <= 2.5 x rte_mempool",
                                 b16->ns / mp16->ns, "<=", 2.5, "median ns/op, same group"));
    t.targets.push_back(target("syscall+pin floor (64 KiB) / map+unmap 16 pages >= 200",
                               f16->ns / u16->ns, ">=", 200, "median ns/op, same group"));
  }
  const CaseResult* u256 = t.find("umr.map_unmap.p256");
  if (u16 && u256) {
    const double per_page = (u256->ns - u16->ns) / 240.0;
    t.targets.push_back(target("cost per extra page, 16 -> 256 pages (ns)", per_page, "<=", 0.5,
                               "(ns(256) - ns(16)) / 240"));
  }
  // Inline regime slope as well (both regimes reported).
  const CaseResult* u1 = t.find("umr.map_unmap.p1");
  if (u1 && u16)
    t.notes.push_back("inline regime: " + std::to_string((u16->ns - u1->ns) / 15.0) +
                      " ns per extra page from 1 to 16 pages");
  double allocs = 0, sys = 0;
  bool sys_ok = true;
  for (const auto& c : t.cases) {
    if (c.role != "rdmx") continue;
    allocs += c.allocs_per_op;
    if (c.syscalls_per_op < 0) sys_ok = false;
    sys += std::max(0.0, c.syscalls_per_op);
  }
  t.targets.push_back(target("map+unmap allocs/op == 0 (all page counts)", allocs, "<=", 0,
                             "malloc-family interposer, measuring thread"));
  if (sys_ok)
    t.targets.push_back(target("map+unmap syscalls/op == 0 (all page counts)", sys, "<=", 0,
                               "perf tracepoint raw_syscalls:sys_enter, measuring thread"));
  if (map_errors) t.notes.push_back("map errors seen: the figures include failed maps");
}

// Waits until every UMR posted completed (unsignaled UMRs are reported when a later CQE covers
// them). The core's in-flight count, not its statistics: those read 0 with -Dstats=false.
void wait_posted(win::PollCore& core) {
  while (core.umrs_in_flight()) core.poll(16, [](const mlx5::Completion&) {});
}

// A map, rung and waited for, then its unmap posted; with wait_unmap the unmap is rung and waited
// for too (else it rides with the next map's doorbell).
void map_round_trip(win::PollCore& core, std::span<const uint64_t> pg, uint64_t bytes,
                    uint64_t& errors, bool wait_unmap) {
  win::MapResult r = core.map(pg, kAccess, 0, bytes);
  if (!r.ok()) [[unlikely]] {
    ++errors;
    return;
  }
  core.flush();
  wait_posted(core);
  (void)core.unmap(r.window);
  if (!wait_unmap) return;
  core.flush();
  wait_posted(core);
}

// umr_lat's two round trips: map to completion (the unmap rides with the next map's doorbell),
// and map then unmap, each to completion.
void add_umr_lat_cases(win::PollCore& core, std::span<const uint64_t> pg, uint64_t bytes,
                       uint64_t& errors, std::vector<std::unique_ptr<Bench>>& g) {
  const uint32_t pages = static_cast<uint32_t>(pg.size());
  CaseResult m;
  m.name = "umr_lat.map.p" + std::to_string(pages);
  m.role = "rdmx";
  m.unit = "map post->completion";
  m.pages = pages;
  m.bytes = bytes;
  // One op: map + doorbell, spin until its completion, then post the unmap without waiting
  // (it rides with the next map's doorbell; the wait then covers both).
  g.push_back(make_bench(
      m, [&core, &errors, pg, bytes] { map_round_trip(core, pg, bytes, errors, false); }));
  CaseResult m2 = m;
  m2.name = "umr_lat.map_unmap.p" + std::to_string(pages);
  m2.unit = "map->completion + unmap->completion";
  g.push_back(make_bench(
      m2, [&core, &errors, pg, bytes] { map_round_trip(core, pg, bytes, errors, true); }));
}

}  // namespace

TestResult test_umr(Ctx& ctx) {
  TestResult t;
  t.test = "umr";
  endpoint::DeviceOptions o;
  o.emu_name = "perf_sink";
  o.emu.prm_checker = false;  // counters only: the checker's reports are not the CPU side's cost
  NodeConfig nc;
  nc.memory_windows = 4;
  std::vector<uint32_t> sweep = ctx.pages.empty() ? default_sweep(256) : ctx.pages;
  for (uint32_t p : sweep) nc.max_pages = std::max(nc.max_pages, p);
  nc.data_bytes = std::max<size_t>(nc.data_bytes, size_t{nc.max_pages} * 4096 * 2);
  Node n(need(endpoint::open_device("emu-sink", o), "emu-sink"), nc);
  n.to_rts_unconnected();
  win::PollCore& core = n.core();
  const uint32_t inline_limit = n.ep.pool().inline_klm_limit();
  // The same map+unmap with increment keys (the debugging policy) on a second sink device, in
  // the same group: what the random keys cost, as a same-run ratio.
  endpoint::DeviceOptions oi = o;
  oi.emu_name = "perf_sink_inc";
  NodeConfig nci = nc;
  nci.key_policy = win::KeyPolicy::kIncrement;
  Node ni(need(endpoint::open_device("emu-sink", oi), "emu-sink"), nci);
  ni.to_rts_unconnected();

  rte_mempool* mp = rte_mempool_create("perf_umr_mp", 8191, 64, 256, 0, nullptr, nullptr, nullptr,
                                       nullptr, SOCKET_ID_ANY, 0);
  if (!mp) throw std::runtime_error("rte_mempool_create");
  Floorbuf fb(size_t{nc.max_pages} * 4096);

  uint64_t map_errors = 0;
  const uint32_t batch = ctx.batch;
  const UmrSides sides{n, ni, mp, fb.p, nc.max_pages, batch, inline_limit, map_errors};
  for (uint32_t pages : sweep) {
    CaseResult m;
    m.name = "umr.map_unmap.p" + std::to_string(pages);
    m.role = "rdmx";
    m.unit = "map+unmap";
    m.pages = pages;
    m.bytes = uint64_t{pages} * n.ep.arena().page_size();
    m.burst = batch;
    m.note =
        pages > inline_limit ? "pointer mode (KLM list in the window's array)" : "inline KLM list";
    UmrGroup grp;
    add_umr_klm_cases(sides, pages, m, grp);
    add_umr_shape_cases(sides, pages, m, grp);
    auto res = run_group(ctx.rc, grp.g);
    add_umr_ratios(res, grp, pages, inline_limit);
    for (auto& c : res) t.cases.push_back(std::move(c));
  }
  core.quiesce();
  ni.core().quiesce();
  rte_mempool_free(mp);

  const win::CoreCounts st = win::snapshot(core.stats());
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "inline KLM limit %u pages; maps %llu (inline %llu, pointer %llu), map errors "
                "%llu, klm waits %llu; %u map+unmap pairs per doorbell; register-once does no "
                "per-I/O work (0 ns here): see io_lat/io_bw",
                inline_limit, (unsigned long long)st.maps, (unsigned long long)st.inline_maps,
                (unsigned long long)st.pointer_maps, (unsigned long long)map_errors,
                (unsigned long long)st.klm_waits, batch);
  t.notes.push_back(buf);
  t.notes.push_back(std::string("KLM list writer: ") +
                    mlx5::prm::klm_variant_name(core.klm_variant()) +
                    " (AVX-512 only with the EAL option --force-max-simd-bitwidth=512)");
  add_umr_targets(t, map_errors);
  return t;
}

TestResult test_umr_lat(Ctx& ctx) {
  TestResult t;
  t.test = "umr_lat";
  const uint32_t pages = ctx.pages.empty() ? 16 : ctx.pages.front();
  endpoint::DeviceOptions o;
  o.emu_name = "perf_umr_lat";
  o.emu.prm_checker = false;
  o.emu.idle_spin = 1u << 30;  // poll like a NIC: never sleep between doorbells
  // The device thread inherits the CPU mask of the thread that opens the device.
  set_affinity(ctx.device_cpu);
  auto dev = endpoint::open_device(ctx.device, o);
  set_affinity(ctx.measure_cpu);
  NodeConfig nc;
  nc.max_pages = std::max<uint32_t>(pages, 16);
  nc.data_bytes = std::max<size_t>(nc.data_bytes, size_t{nc.max_pages} * 4096 * 2);
  Node n(need(std::move(dev), ctx.device.c_str()), nc);
  n.to_rts_unconnected();
  win::PollCore& core = n.core();
  const uint64_t bytes = uint64_t{pages} * 4096;
  std::span<const uint64_t> pg(n.pages.data(), pages);
  uint64_t errors = 0;

  core.quiesce();
  std::vector<std::unique_ptr<Bench>> g;
  add_umr_lat_cases(core, pg, bytes, errors, g);
  Floorbuf fb(bytes);
  g.push_back(make_floor_bench(pages, bytes, fb.p));
  RunConfig rc = ctx.rc;
  rc.iterations = std::max<uint64_t>(1, rc.iterations / 10);  // round trips are ~100x an op
  rc.warmup = std::max<uint64_t>(1, rc.warmup / 10);
  t.cases = run_group(rc, g);
  core.quiesce();
  add_ratio(t.cases[0], t.cases[2], true);
  add_ratio(t.cases[1], t.cases[2], true);
  const auto es = n.emu->stats();
  t.notes.push_back("device thread pinned to CPU " + std::to_string(ctx.device_cpu) +
                    ", measuring lcore on CPU " + std::to_string(ctx.measure_cpu) +
                    "; device polls " + std::to_string(es.polls) + ", UMRs " +
                    std::to_string(es.umrs) + ", map errors " + std::to_string(errors));
  t.notes.push_back(
      "the emulated device is software: this is the CPU-to-CPU round trip through "
      "the rings (cache-line transfer + device thread scheduling), not NIC latency");
  return t;
}

}  // namespace rdmx::perf
