// Strict mode over windows and the threaded emu: the zero-system-call proof.
//
// A poll lcore runs >= 1,000,000 iterations of the architecture's hot path under the seccomp
// filter (Action::kKill):
//
//   map    two chunk pages of the local arena into a window (one UMR WQE)
//   WRITE  from the window (its lkey as the WRITE's local key) to the peer's window (its rkey)
//   unmap  the window (one invalidate UMR WQE)
//   flush  (one doorbell for the three WQEs), then poll the CQ
//
// Fences: the WRITE reads through a mapping made by a UMR of the same SQ, so the SQ writer's
// INITIATOR_SMALL_FENCE on the WQE after a UMR is all it needs (emu's checker rule
// kMissingFenceAfterUmr verifies it). kRemoteUseBeforeOrdered does not apply to the local
// window: the peer never sees its rkey. The peer's window is mapped once at setup and its UMR
// has completed before the run starts (that is the rule for handing an rkey to a peer). The
// unmap gets STRONG_ORDERING from PollCore because the WRITE gathered from the window (it may
// re-read it on a retransmission), so at most one iteration is executing on the device at a
// time; the loop therefore keeps one iteration in flight.
//
// The device is emu in threaded mode: its threads (one per port) execute the WQE bytes like a
// NIC, on placement.device_thread_cpu, while the poll lcore only writes rings and reads CQEs.
//
// Every case runs in a forked child (a violation under kKill ends the process; a filter can never
// be removed). The child starts its own EAL and tears everything down in reverse order, EAL
// last; under ASan it then runs LeakSanitizer itself (the child leaves with _exit, which would
// skip the exit-time check).
#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/rt/eal.hpp>
#include <rdmx/rt/launcher.hpp>
#include <rdmx/rt/placement.hpp>
#include <rdmx/rt/syscall_guard.hpp>
#include <rdmx/rt/topology.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>
#include "child.hpp"

#if defined(__SANITIZE_ADDRESS__)
#define RDMX_TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define RDMX_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define RDMX_TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMX_TEST_TSAN 1
#endif
#endif
#ifdef RDMX_TEST_ASAN
#include <sanitizer/lsan_interface.h>
#endif

namespace rt = rdmx::rt;
namespace win = rdmx::win;
namespace emu = rdmx::emu;
namespace mem = rdmx::mem;
namespace endpoint = rdmx::endpoint;
using rdmx::Errc;

namespace {

// ---- sizes ---------------------------------------------------------------------------------
constexpr uint32_t kPage = 4096;
constexpr uint32_t kLocalPages = 64;  // local arena: what the windows map
constexpr uint32_t kWriteLen = 4096;  // bytes per WRITE: the tail of one page + head of another
constexpr uint32_t kSlots = 8;        // peer buffer: kSlots slots of 2 pages, round robin
constexpr uint32_t kSlotBytes = 2 * kPage;
constexpr uint32_t kPeerPages = kSlots * kSlotBytes / kPage;
constexpr uint64_t kGetpidAt = 1000;  // the deliberate system call (second case)

uint64_t iterations_wanted() {
  if (const char* e = std::getenv("RDMX_STRICT_WINDOWS_ITERATIONS")) {
    const uint64_t v = std::strtoull(e, nullptr, 10);
    if (v > 0) return v;
  }
#if defined(RDMX_TEST_ASAN) || defined(RDMX_TEST_TSAN)
  return 200000;  // sanitizer builds: the same proof, scaled down
#else
  return 1000000;
#endif
}

// ---- the loop's data -------------------------------------------------------------------------
// Iteration i maps pages page_a(i) and page_b(i) (never adjacent, so the window really stitches
// two pages) starting offset(i) bytes into the first one, and WRITEs kWriteLen bytes from the
// window to peer slot i % kSlots.
uint32_t page_a(uint64_t i) {
  return static_cast<uint32_t>(i % kLocalPages);
}
uint32_t page_b(uint64_t i) {
  return static_cast<uint32_t>((i * 7 + 29) % kLocalPages);
}
uint32_t offset(uint64_t i) {
  return 1 + static_cast<uint32_t>((i * 40) % (kPage - 64));
}
uint8_t pattern(uint32_t page, uint32_t byte) {
  return static_cast<uint8_t>((page * 131u) ^ (byte * 7u) ^ (byte >> 8));
}
uint64_t fnv1a(const uint8_t* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}
// What iteration i's WRITE carried.
void expected_bytes(uint64_t i, uint8_t* out) {
  const uint32_t off = offset(i);
  for (uint32_t k = 0; k < kWriteLen; ++k) {
    const uint32_t x = off + k;
    out[k] = x < kPage ? pattern(page_a(i), x) : pattern(page_b(i), x - kPage);
  }
}

template <class T>
bool take(rdmx::Result<T>&& r, T& out, const char* what) {
  if (!r.ok()) {
    std::fprintf(stderr, "%s: %s\n", what, r.error().message.c_str());
    return false;
  }
  out = std::move(r).value();
  return true;
}

// One side: device, arena, window pool and one poll core (lib/endpoint's builder).
endpoint::EndpointConfig side_config(uint32_t data_pages, uint32_t n_windows, uint32_t max_pages,
                                     uint32_t cache_size, mem::Source source, int socket,
                                     const char* name) {
  endpoint::EndpointConfig ec;
  ec.arena.bytes = size_t{data_pages} * kPage;
  ec.arena.source = source;
  ec.arena.numa_node = socket;
  ec.arena.name = name;
  ec.pool.n_windows = n_windows;
  ec.pool.max_pages = max_pages;
  ec.core.cache_size = cache_size;
  ec.core.qp.sq_wqebbs = 256;
  ec.core.qp.rq_wqes = 16;
  ec.core.qp.cq_cqes = 1024;
  return ec;
}

// Polls a core (setup/teardown path) until its UMRs completed.
bool settle(win::PollCore& c) {
  c.flush();
  for (int spin = 0; spin < 50'000'000 && c.umrs_in_flight(); ++spin)
    c.poll(64, [](const rdmx::mlx5::Completion&) {});
  return c.umrs_in_flight() == 0;
}

bool census_clean(win::WindowPool& pool, const char* who, uint32_t mapped_expected,
                  std::string& line) {
  auto c = pool.check_windows();
  if (!c.ok()) {
    std::fprintf(stderr, "check_windows (%s): %s\n", who, c.error().message.c_str());
    return false;
  }
  const win::Census& n = c.value();
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "census %s: total %u cache %u unmapping %u depot %u mapped %u dirty %u", who,
                n.total, n.cache, n.unmapping, n.depot, n.mapped, n.dirty);
  line = buf;
  return n.total == pool.n_windows() && n.mapped == mapped_expected && n.unmapping == 0 &&
         n.dirty == 0 && n.cache + n.depot + n.mapped == n.total;
}

// What the poll lcore owns and the main lcore destroys after wait().
struct LocalCore {
  endpoint::Endpoint side;
  // Loop state: written by the poll lcore only; read by main after wait() (or `done` while it
  // runs, for progress and the watchdog).
  uint64_t started = 0;
  std::atomic<uint64_t> done{0};
  uint64_t write_errors = 0;
  uint64_t post_errors = 0;
  Errc first_post_error = Errc::kOk;
  uint64_t tsc_run_begin = 0;
  uint64_t tsc_run_end = 0;
  pid_t tid = 0;
};

// The poller: one iteration (map -> WRITE -> unmap, one doorbell) when none is in flight and the
// target is not reached, then one CQ poll. The system call of the second case is a hook of this
// test's poller, not of the library.
struct Poller {
  LocalCore& lc;
  rt::Launcher& launcher;
  rt::CoreContext& ctx;
  uint64_t n_iters;
  uint32_t peer_rkey;
  bool add_getpid;

  bool operator()() noexcept {
    win::PollCore& core = lc.side.core();
    mem::Arena& arena = lc.side.arena();
    bool busy = false;
    if (lc.started == lc.done.load(std::memory_order_relaxed) && lc.started < n_iters) {
      const uint64_t i = lc.started;
      if (add_getpid && i == kGetpidAt) syscall(SYS_getpid);  // the deliberate system call
      const uint64_t pages[2] = {arena.page_addr(page_a(i)), arena.page_addr(page_b(i))};
      win::MapResult m = core.map(pages, rdmx::mlx5::kAccessLocalWrite, offset(i), kWriteLen);
      if (!m.ok()) return note_error(m.errc);
      const rdmx::mlx5::prm::Sge sge{m.iova, kWriteLen, m.lkey};
      const uint64_t raddr = uint64_t{i % kSlots} * kSlotBytes;
      Errc e = core.post_write({&sge, 1}, raddr, peer_rkey, i, true);
      if (e != Errc::kOk) return note_error(e);
      e = core.unmap(m.window);
      if (e != Errc::kOk) return note_error(e);
      core.flush();
      ++lc.started;
      busy = true;
      if ((i & 0x3ffff) == 0)
        RDMX_HOT_LOG(ctx.log(), rdmx::LogLevel::kInfo, "strict windows: iteration %" PRIu64, i);
    }
    const uint32_t n = core.poll(32, [&](const rdmx::mlx5::Completion& c) {
      if (c.wqe_opcode != MLX5_OPCODE_RDMA_WRITE) return;
      if (!c.ok()) ++lc.write_errors;
      lc.done.store(lc.done.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    });
    if (n && lc.done.load(std::memory_order_relaxed) == n_iters) {
      lc.tsc_run_end = rte_rdtsc();
      launcher.request_stop();  // one atomic store
    }
    return busy || n != 0;
  }
  bool note_error(Errc e) noexcept {
    // A map/post refused (never expected with one iteration in flight): the run fails at the
    // end. Ring what was posted (so the drain can finish) and stop.
    if (lc.post_errors++ == 0) lc.first_post_error = e;
    lc.side.core().flush();
    launcher.request_stop();
    return false;
  }
};

// Pins the threads emu is about to create: they inherit the creating thread's affinity.
// (emu::Options has no CPU field yet; see the report in doc/guides/runtime.md.)
struct InheritedAffinity {
  cpu_set_t saved;
  bool active = false;
  explicit InheritedAffinity(int cpu) {
    if (cpu < 0) return;
    CPU_ZERO(&saved);
    if (pthread_getaffinity_np(pthread_self(), sizeof saved, &saved) != 0) return;
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    active = pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0;
  }
  ~InheritedAffinity() {
    if (active) pthread_setaffinity_np(pthread_self(), sizeof saved, &saved);
  }
};

int windows_child(bool add_getpid) {
  const uint64_t n_iters = iterations_wanted();
  // ---- EAL (owned by this child, destroyed last) ----
  rt::EalArgs args;
  args.prog = "rdmx-test-strict-windows";
  rt::EalOptions eo;
  eo.no_pci = true;
  eo.file_prefix = "rdmx-test";
  eo.unique_file_prefix = true;
  std::unique_ptr<rt::Eal> eal;
  {
    auto e = rt::Eal::init(args, eo);
    if (!e.ok()) {
      std::fprintf(stderr, "EAL: %s\n", e.error().message.c_str());
      return 10;
    }
    eal = std::make_unique<rt::Eal>(std::move(e).value());
  }
  // ---- placement: one poll core and the emu device thread ----
  auto topo = rt::discover_topology();
  if (!topo.ok()) {
    std::fprintf(stderr, "topology: %s\n", topo.error().message.c_str());
    return 11;
  }
  const std::vector<rt::LcoreSlot> slots = eal->lcores();
  auto pl = rt::plan(topo.value(), 1, true, 0, slots);
  if (!pl.ok()) {
    std::fprintf(stderr, "placement: %s\n", pl.error().message.c_str());
    return 77;  // fewer than 2 lcores
  }
  const rt::Placement placement = pl.value();
  const unsigned poll_lcore = placement.poll[0].lcore_id;
  std::fprintf(stderr, "placement: poll lcore %u on cpu %u, emu device threads on cpu %d\n",
               poll_lcore, placement.poll[0].cpu, placement.device_thread_cpu);

  // ---- devices: a threaded emu pair (device threads pinned by inheritance) ----
  std::array<endpoint::OpenedDevice, 2> pair;
  {
    InheritedAffinity pin(placement.device_thread_cpu);
    if (!take(endpoint::open_device_pair("emu-threaded"), pair, "emu pair")) return 12;
  }
  // ---- peer side (main lcore): arena, pool, its QP. Its window over the slots is mapped once
  // the QPs are connected (a QP executes nothing before), and handed to the poll lcore only
  // after its UMR completed (emu rule kRemoteUseBeforeOrdered).
  endpoint::Endpoint peer;
  if (!take(endpoint::Endpoint::create(std::move(pair[1]),
                                       side_config(kPeerPages + 16, 4, kPeerPages, 4,
                                                   mem::Source::kHeap, -1, "strict_peer")),
            peer, "peer endpoint"))
    return 13;
  std::memset(peer.arena().ptr(peer.arena().base()), 0, size_t{kPeerPages} * kPage);

  // ---- launcher: strict mode, kKill ----
  rt::LauncherConfig lc_cfg;
  lc_cfg.lcores = {poll_lcore};
  lc_cfg.strict.enabled = true;
  lc_cfg.strict.action = rt::Action::kKill;
  std::unique_ptr<rt::Launcher> launcher;
  if (!take(rt::Launcher::create(lc_cfg), launcher, "launcher")) return 15;

  LocalCore local;
  // Setup handshake: the lcore connects (1) or fails (-1); main maps the peer window and
  // publishes its rkey (1) or fails (-1).
  std::atomic<int> connected{0}, peer_ready{0};
  uint32_t peer_rkey = 0;
  rdmx::Status st = launcher->start([&](rt::CoreContext& ctx) -> int {
    // Setup phase (system calls allowed): arena on this core's node, pool, PollCore (QP, CQ,
    // SQ writer, window cache), connection, source pages.
    local.tid = static_cast<pid_t>(syscall(SYS_gettid));
    if (!take(endpoint::Endpoint::create(std::move(pair[0]),
                                         side_config(kLocalPages, 16, 2, 8, mem::Source::kDpdk,
                                                     ctx.socket(), "strict_local")),
              local.side, "local endpoint"))
      return 20;
    if (!endpoint::connect_cores(local.side.core(), peer.core()).ok()) {
      connected = -1;
      return 21;
    }
    connected = 1;
    auto* base = static_cast<uint8_t*>(local.side.arena().ptr(local.side.arena().base()));
    for (uint32_t p = 0; p < kLocalPages; ++p)
      for (uint32_t b = 0; b < kPage; ++b) base[size_t{p} * kPage + b] = pattern(p, b);
    while (peer_ready.load() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (peer_ready.load() < 0) return 22;
    std::fprintf(stderr, "poll lcore %u: thread %d, setup done, entering the run phase\n",
                 ctx.lcore_id(), static_cast<int>(local.tid));
    Poller poller{local, *launcher, ctx, n_iters, peer_rkey, add_getpid};
    local.tsc_run_begin = rte_rdtsc();
    // Run + drain phases: strict. Drained = nothing in flight (no WRITE, no UMR).
    return rt::run_poll_loop(ctx, poller, [&] {
      return local.started == local.done.load(std::memory_order_relaxed) &&
             local.side.core().umrs_in_flight() == 0;
    });
  });
  if (!st.ok()) {
    std::fprintf(stderr, "launch: %s\n", st.error().message.c_str());
    return 16;
  }
  while (connected.load() == 0 && launcher->stats(0).phase != rt::Phase::kDone)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  win::MapResult peer_win;
  if (connected.load() == 1) {
    std::vector<uint64_t> peer_pages(kPeerPages);
    for (uint32_t p = 0; p < kPeerPages; ++p) peer_pages[p] = peer.arena().page_addr(p);
    peer_win =
        peer.core().map(peer_pages, rdmx::mlx5::kAccessLocalWrite | rdmx::mlx5::kAccessRemoteWrite,
                        0, uint64_t{kPeerPages} * kPage);
    if (peer_win.ok() && settle(peer.core())) {
      peer_rkey = peer_win.rkey;
      peer_ready = 1;
    } else {
      std::fprintf(stderr, "peer window: %s\n",
                   std::string(rdmx::errc_name(peer_win.errc)).c_str());
      peer_ready = -1;
    }
  }
  // Watchdog: the run must make progress (a stuck device would otherwise hang the test).
  {
    uint64_t last = 0;
    auto last_change = std::chrono::steady_clock::now();
    while (launcher->stats(0).phase != rt::Phase::kDone &&
           launcher->stats(0).phase != rt::Phase::kTeardown) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      const uint64_t d = local.done.load(std::memory_order_relaxed);
      if (d != last) {
        last = d;
        last_change = std::chrono::steady_clock::now();
      } else if (std::chrono::steady_clock::now() - last_change > std::chrono::seconds(30)) {
        std::fprintf(stderr, "no progress for 30 s at %" PRIu64 " iterations\n", d);
        std::fflush(stderr);
        _exit(17);
      }
      if (launcher->stats(0).phase == rt::Phase::kNotStarted ||
          launcher->stats(0).phase == rt::Phase::kSetup)
        last_change = std::chrono::steady_clock::now();
    }
  }
  const std::vector<int> rets = launcher->wait();
  for (rt::HotLogRing* ring : launcher->log_rings()) ring->drain();
  int rc = 0;
  if (rets.size() != 1 || rets[0] != 0) {
    std::fprintf(stderr, "poll lcore returned %d\n", rets.empty() ? -999 : rets[0]);
    rc = 30;
  }
  if (rt::strict_violations() != 0) rc = 31;

  // ---- verification (main lcore, the poll lcore has returned) ----
  const double secs = static_cast<double>(local.tsc_run_end - local.tsc_run_begin) /
                      static_cast<double>(rte_get_tsc_hz());
  const uint64_t done = local.done.load();
  const win::CoreCounts cs = win::snapshot(local.side.core().stats());
  std::fprintf(stderr,
               "counts: iterations %" PRIu64 " writes_ok %" PRIu64 " write_errors %" PRIu64
               " post_errors %" PRIu64 " maps %" PRIu64 " unmaps %" PRIu64
               " umr_completions %" PRIu64 " strict_violations %" PRIu64 "\n",
               local.started, done - local.write_errors, local.write_errors, local.post_errors,
               cs.maps, cs.unmaps, cs.umr_completions, rt::strict_violations());
  if (local.post_errors)
    std::fprintf(stderr, "first refused call: %s\n",
                 std::string(rdmx::errc_name(local.first_post_error)).c_str());
  if (local.started != n_iters || done != n_iters || local.write_errors || local.post_errors ||
      cs.maps != n_iters || cs.unmaps != n_iters || cs.umr_completions != 2 * n_iters ||
      cs.wqe_errors != 0)
    rc = rc ? rc : 32;
  if (rc == 0)
    std::fprintf(stderr,
                 "rate: %" PRIu64
                 " map->WRITE->unmap iterations in %.2f s = %.0f iterations/s "
                 "(%.2f us each)\n",
                 n_iters, secs, static_cast<double>(n_iters) / secs,
                 secs * 1e6 / static_cast<double>(n_iters));
  // The data of the last kSlots WRITEs, as the peer holds it.
  {
    std::vector<uint8_t> want(kWriteLen);
    uint64_t sum_want = 0, sum_got = 0;
    const auto* peer_base = static_cast<const uint8_t*>(peer.arena().ptr(peer.arena().base()));
    for (uint64_t i = n_iters >= kSlots ? n_iters - kSlots : 0; i < n_iters; ++i) {
      expected_bytes(i, want.data());
      const uint8_t* got = peer_base + (i % kSlots) * kSlotBytes;
      sum_want ^= fnv1a(want.data(), kWriteLen) + i;
      sum_got ^= fnv1a(got, kWriteLen) + i;
    }
    std::fprintf(stderr,
                 "data: last %u WRITEs on the peer: checksum %016" PRIx64 ", expected %016" PRIx64
                 " %s\n",
                 kSlots, sum_got, sum_want, sum_got == sum_want ? "ok" : "MISMATCH");
    if (sum_got != sum_want) rc = rc ? rc : 33;
  }
  const emu::EmuDevice* emu_a = local.side.emu();  // null when the lcore's setup failed
  const emu::EmuDevice* emu_b = peer.emu();
  if ((emu_a && emu_a->checker().total() != 0) || emu_b->checker().total() != 0) {
    std::fprintf(stderr, "emu PRM checker:\n%s%s", emu_a ? emu_a->checker().dump().c_str() : "",
                 emu_b->checker().dump().c_str());
    rc = rc ? rc : 34;
  }
  // ---- clean shutdown, reverse order of creation ----
  // The poll lcore drained before it left the run phase; every window must be back.
  std::string line;
  if (local.side.core().umrs_in_flight() != 0 || !settle(local.side.core())) rc = rc ? rc : 35;
  if (!census_clean(local.side.pool(), "local", 0, line)) rc = rc ? rc : 36;
  std::fprintf(stderr, "%s\n", line.c_str());
  local.side.destroy_cores();  // PollCore (QP)
  if (!peer_win.ok() || peer.core().unmap(peer_win.window) != Errc::kOk || !settle(peer.core()))
    rc = rc ? rc : 37;
  if (!census_clean(peer.pool(), "peer", 0, line)) rc = rc ? rc : 38;
  std::fprintf(stderr, "%s\n", line.c_str());
  peer.destroy_cores();
  launcher.reset();
  peer = endpoint::Endpoint{};        // pool (mkeys), arena (MR), device: its thread joins
  local.side = endpoint::Endpoint{};  // the same, the arena's memzone too
  eal.reset();                        // rte_eal_cleanup
#ifdef RDMX_TEST_ASAN
  if (__lsan_do_recoverable_leak_check() != 0) {
    std::fprintf(stderr, "LeakSanitizer: leaks after shutdown\n");
    rc = rc ? rc : 39;
  } else {
    std::fprintf(stderr, "LeakSanitizer: no leak after shutdown\n");
  }
#endif
  if (rc == 0) std::fprintf(stderr, "shutdown: clean\n");
  return rc;
}

using rdmx::test::ChildResult;
ChildResult run_child(const std::function<int()>& body) {
  return rdmx::test::run_child(body, /*echo=*/true);
}

// The value after `key` in the child's "counts:" line, or UINT64_MAX.
uint64_t count_of(const std::string& err, const std::string& key) {
  const size_t line = err.find("counts:");
  if (line == std::string::npos) return UINT64_MAX;
  const size_t k = err.find(" " + key + " ", line);
  if (k == std::string::npos) return UINT64_MAX;
  return std::strtoull(err.c_str() + k + key.size() + 2, nullptr, 10);
}

}  // namespace

TEST(StrictWindows, MillionMapWriteUnmapIterationsOverThreadedEmu) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan's runtime makes its own system calls (futex) on the poll thread, which "
                  "strict mode rightly reports; the normal and ASan builds make the proof";
#endif
  const uint64_t n = iterations_wanted();
  auto r = run_child([] { return windows_child(false); });
  if (r.skipped()) GTEST_SKIP() << "needs 2 lcores";
  ASSERT_TRUE(r.exited_ok()) << r.describe();
#if !defined(RDMX_TEST_ASAN) && !defined(RDMX_TEST_TSAN)
  if (std::getenv("RDMX_STRICT_WINDOWS_ITERATIONS") == nullptr) {
    EXPECT_GE(n, 1000000u);
  }
#endif
  EXPECT_EQ(count_of(r.err, "iterations"), n) << r.err;
  EXPECT_EQ(count_of(r.err, "writes_ok"), n) << r.err;
  EXPECT_EQ(count_of(r.err, "maps"), n) << r.err;
  EXPECT_EQ(count_of(r.err, "unmaps"), n) << r.err;
  EXPECT_EQ(count_of(r.err, "write_errors"), 0u) << r.err;
  EXPECT_EQ(count_of(r.err, "strict_violations"), 0u) << r.err;
  EXPECT_NE(r.err.find("checksum"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(" ok\n"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("census local: total 16 cache"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("shutdown: clean"), std::string::npos) << r.err;
}

// The same loop with one syscall(SYS_getpid) at iteration 1000: the kernel stops it. This is
// what makes the first case a proof: had the hot path (map, WRITE, unmap, flush, poll, the
// stats, the hot log) made a system call, that case would end like this one.
TEST(StrictWindows, GetpidInTheLoopIsKilled) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "TSan's runtime makes its own system calls (futex) on the poll thread, which "
                  "strict mode rightly reports; the normal and ASan builds make the proof";
#endif
  auto r = run_child([] { return windows_child(true); });
  if (r.skipped()) GTEST_SKIP() << "needs 2 lcores";
  EXPECT_TRUE(r.killed_by_sigsys()) << r.describe();
  EXPECT_NE(r.err.find("system call 39 (getpid) on lcore"), std::string::npos) << r.describe();
  EXPECT_NE(r.err.find("entering the run phase"), std::string::npos) << r.describe();
  EXPECT_EQ(r.err.find("counts:"), std::string::npos) << r.describe();
}
