// `io_lat` / `io_bw`: map -> RDMA WRITE (or READ) -> unmap per I/O over the threaded emu, one
// poll core, depth 1 (latency) or 32 (throughput), beside register-once (the same WRITE/READ
// with the arena's key: no per-I/O registration, every byte exposed for as long as it lives).
#include <cstdlib>
#include <span>

#include <rdmx/mlx5/prm/cqe.hpp>

#include "node.hpp"
#include "tests.hpp"

namespace rdmx::perf {

namespace {

constexpr uint32_t kAccess =
    mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead;

struct Peer {
  std::unique_ptr<emu::EmuDevice> dev;
  std::unique_ptr<mem::Arena> arena;
  uint32_t qpn = 0;
  bool qp = false;
  ~Peer() {
    if (qp && dev) (void)dev->destroy_qp(qpn);
    arena.reset();
    dev.reset();
  }
};

// The two sides of the io tests and the state every case of a group shares: A (a Node: device,
// arena, pool, one poll core) WRITEs/READs B's arena by B's own rkey.
class IoRig {
 public:
  IoRig(Ctx& ctx, uint32_t depth, uint32_t max_pages) : depth_(depth) {
    endpoint::DeviceOptions oa, ob;
    oa.emu.prm_checker = ob.emu.prm_checker = false;
    oa.emu.idle_spin = ob.emu.idle_spin = 1u << 30;  // device threads poll like a NIC
    oa.emu_name = "perf_io_a";
    ob.emu_name = "perf_io_b";
    // Both device threads inherit the CPU mask of the thread that opens the devices.
    set_affinity(ctx.device_cpu);
    auto pair = endpoint::open_device_pair(ctx.device, oa, ob);
    set_affinity(ctx.measure_cpu);
    auto devs = need(std::move(pair), ctx.device.c_str());
    open_peer(std::move(devs[1]), ctx.device.c_str(), max_pages);

    NodeConfig nc;
    nc.max_pages = max_pages;
    nc.data_bytes = std::max<size_t>(nc.data_bytes, size_t{max_pages} * 4096 * 2);
    a_ = std::make_unique<Node>(std::move(devs[0]), nc);
    need(mlx5::connect_qps(a_->ep.device(), a_->core().qp_handle(), *b_.dev, b_.qpn), "connect");
    raddr_ = b_.arena->base();
    // --bad-rkey (tests): a key the peer never gave out, so every WRITE/READ completes in error.
    rkey_ = b_.arena->mr().rkey ^ (ctx.bad_rkey ? 0xff00u : 0u);
    arena_lkey_ = a_->ep.arena().lkey();
  }
  Node& a() { return *a_; }
  win::PollCore& core() { return a_->core(); }
  const std::string& broken() const { return broken_; }
  uint64_t app_errors() const { return app_errors_; }
  uint64_t map_errors() const { return map_errors_; }

  // One I/O through a window: map, WRITE/READ, unmap at its completion (reap()).
  void map_unmap_io(std::span<const uint64_t> pg, uint64_t bytes, bool read) {
    wait_slot();
    if (!broken_.empty()) return;
    win::PollCore& c = core();
    win::MapResult r;
    for (;;) {
      r = c.map(pg, kAccess, 0, bytes);
      if (r.ok()) break;
      if (r.errc != Errc::kNoRoom && r.errc != Errc::kBusy) {
        fail_once("map refused: " + std::string(errc_name(r.errc)));
        return;
      }
      ++map_errors_;  // kNoRoom / kBusy: reap and retry
      reap();
      if (!broken_.empty()) return;
    }
    mlx5::prm::Sge sge{0, static_cast<uint32_t>(bytes), r.lkey};
    const Errc e = post(sge, read);
    if (e == Errc::kOk) {
      ++inflight_;
      slot_win_[cookie_ % kSlots] = r.window;  // unmapped by reap() at its completion
    } else {
      (void)c.unmap(r.window);
      fail_once("post refused: " + std::string(errc_name(e)));
    }
    c.flush();
    if (depth_ == 1) drain();
  }

  // The same I/O with the arena's own key (register once: nothing per I/O).
  void register_once_io(std::span<const uint64_t> pg, uint64_t bytes, bool read) {
    wait_slot();
    if (!broken_.empty()) return;
    mlx5::prm::Sge sge{pg[0], static_cast<uint32_t>(bytes), arena_lkey_};
    Errc e;
    while ((e = post(sge, read)) == Errc::kNoRoom && broken_.empty()) reap();
    if (e == Errc::kOk)
      ++inflight_;
    else if (e != Errc::kNoRoom)
      fail_once("post refused: " + std::string(errc_name(e)));
    core().flush();
    if (depth_ == 1) drain();
  }

  // Until nothing is in flight or waiting to be unmapped (or the connection broke).
  void drain() {
    while ((inflight_ > 0 || n_later_ > 0) && broken_.empty()) reap();
  }

 private:
  // The window of each I/O in flight, by cookie: it is unmapped once its WRITE/READ completed,
  // as the NFS client invalidates after the reply. The unmap then needs no ordering fence (an
  // unmap posted right behind the WRITE is strongly ordered after it and stalls the SQ until
  // the WRITE is acknowledged: depth 32 would become depth 1). Unmaps refused for lack of SQ
  // room wait in `later_` for the next reap.
  static constexpr uint32_t kSlots = 64;

  void open_peer(endpoint::OpenedDevice d, const char* what, uint32_t max_pages) {
    b_.dev = need(endpoint::take_emu(std::move(d)), what);
    mem::ArenaConfig bac;
    bac.bytes = size_t{max_pages} * 4096 * 2;
    bac.access = mlx5::kAccessAll;  // the I/O target: A READs/WRITEs it by the arena's own rkey
    b_.arena = need(mem::Arena::create(*b_.dev, bac), "peer arena");
    auto bq = need(b_.dev->create_qp(mlx5::QpConfig{}), "peer qp");
    b_.qpn = bq.qpn;
    b_.qp = true;
  }
  Errc post(const mlx5::prm::Sge& sge, bool read) {
    return read ? core().post_read({&sge, 1}, raddr_, rkey_, ++cookie_, true)
                : core().post_write({&sge, 1}, raddr_, rkey_, ++cookie_, true);
  }
  // The first error completion (or a refused map/post) breaks the connection: every later call
  // of the cases returns at once and the test fails after run_group, instead of waiting forever
  // for completions an errored QP will not produce in the expected way.
  void fail_once(std::string why) {
    if (broken_.empty()) broken_ = std::move(why);
  }
  void reap() {
    win::PollCore& c = core();
    uint32_t k = 0;
    if (n_later_) c.flush();  // ring what reap() posted, so that it completes and frees room
    for (uint32_t i = 0; i < n_later_; ++i)
      if (c.unmap(later_[i]) == Errc::kNoRoom) later_[k++] = later_[i];
    n_later_ = k;
    c.poll(32, [&](const mlx5::Completion& cq) {
      if (!cq.ok()) {
        ++app_errors_;
        fail_once("a WRITE/READ completed in error (" +
                  std::string(mlx5::prm::syndrome_name(cq.status)) + ")");
      }
      if (!cq.signaled) return;
      --inflight_;
      win::Window*& w = slot_win_[cq.cookie % kSlots];
      if (w) {
        if (c.unmap(w) == Errc::kNoRoom) later_[n_later_++] = w;
        w = nullptr;
      }
    });
  }
  void wait_slot() {
    while (inflight_ >= depth_ && broken_.empty()) reap();
  }

  const uint32_t depth_;
  Peer b_;
  std::unique_ptr<Node> a_;  // declared after b_: destroyed before it
  uint64_t raddr_ = 0;
  uint32_t rkey_ = 0;
  uint32_t arena_lkey_ = 0;
  // Shared by every case of a group: completions of any of them free a slot.
  uint32_t inflight_ = 0;
  uint64_t app_errors_ = 0, map_errors_ = 0;
  std::string broken_;
  uint64_t cookie_ = 0;
  win::Window* slot_win_[kSlots] = {};
  win::Window* later_[kSlots] = {};
  uint32_t n_later_ = 0;
};

// One size's group: WRITE then READ, each through a window and with the arena's key, then the
// syscall+pin floor.
std::vector<std::unique_ptr<Bench>> io_group(IoRig& rig, uint32_t pages, uint32_t depth,
                                             void* floor_buf) {
  const uint64_t bytes = uint64_t{pages} * 4096;
  std::span<const uint64_t> pg(rig.a().pages.data(), pages);
  std::vector<std::unique_ptr<Bench>> g;
  auto meta = [&](std::string name, const char* role) {
    CaseResult m;
    m.name = std::move(name) + ".p" + std::to_string(pages);
    m.role = role;
    m.unit = "I/O";
    m.pages = pages;
    m.bytes = bytes;
    m.depth = depth;
    return m;
  };
  for (int read = 0; read < 2; ++read) {
    const char* op = read ? "read" : "write";
    g.push_back(make_bench(meta(std::string("io.") + op + ".map_unmap", "rdmx"),
                           [&rig, pg, bytes, read] { rig.map_unmap_io(pg, bytes, read); }));
    g.push_back(make_bench(meta(std::string("io.") + op + ".register_once", "peer"),
                           [&rig, pg, bytes, read] { rig.register_once_io(pg, bytes, read); }));
  }
  g.push_back(make_floor_bench(pages, bytes, floor_buf));
  return g;
}

// res: write.map_unmap, write.register_once, read.map_unmap, read.register_once, floor. Adds the
// ratios, the window's overhead and (bw) the bandwidths to the map_unmap cases.
void add_io_figures(std::vector<CaseResult>& res, uint64_t bytes, uint32_t depth, bool bw) {
  for (int k : {0, 2}) {
    // Depth 1: round trips, compared at p50 (means carry the device threads' preemptions);
    // depth 32: throughput, compared by the median of the rounds' means.
    const bool p50 = depth == 1;
    add_ratio(res[k], res[k + 1], p50);
    add_ratio(res[k], res[4], p50);
    const double ov = p50 ? res[k].lat.p50_ns - res[k + 1].lat.p50_ns : res[k].ns - res[k + 1].ns;
    res[k].extra.push_back({"window_overhead_ns", ov});
    res[k].extra.push_back(
        {"floor_over_window_overhead", ov > 0 ? (p50 ? res[4].lat.p50_ns : res[4].ns) / ov : 0});
    if (bw)  // MB as perftest's ib_write_bw counts them: 2^20 bytes
      for (CaseResult* c : {&res[k], &res[k + 1]})
        c->bw_mb_s = static_cast<double>(bytes) * c->ops_per_s / (1 << 20);
  }
}

}  // namespace

TestResult test_io(Ctx& ctx, bool bw) {
  TestResult t;
  t.test = bw ? "io_bw" : "io_lat";
  t.bandwidth = bw;
  const uint32_t depth = bw ? 32 : 1;
  const std::vector<uint32_t> sizes = ctx.pages.empty() ? std::vector<uint32_t>{1, 16} : ctx.pages;
  uint32_t max_pages = 16;
  for (uint32_t p : sizes) max_pages = std::max(max_pages, p);

  IoRig rig(ctx, depth, max_pages);
  for (uint32_t pages : sizes) {
    const uint64_t bytes = uint64_t{pages} * 4096;
    void* fbuf = std::aligned_alloc(4096, bytes);
    auto g = io_group(rig, pages, depth, fbuf);
    RunConfig rc = ctx.rc;
    rc.iterations = std::max<uint64_t>(1, rc.iterations / 10);
    rc.warmup = std::max<uint64_t>(1, rc.warmup / 10);
    auto res = run_group(rc, g);
    rig.drain();
    std::free(fbuf);
    if (!rig.broken().empty())
      throw std::runtime_error(rig.broken() + " (" + std::to_string(rig.app_errors()) +
                               " error completion(s)); no figure is reported");
    add_io_figures(res, bytes, depth, bw);
    for (auto& c : res) t.cases.push_back(std::move(c));
  }
  win::PollCore& core = rig.core();
  core.quiesce();
  const auto es = rig.a().emu->stats();
  const win::CoreCounts cs = win::snapshot(core.stats());
  t.notes.push_back("depth " + std::to_string(depth) +
                    "; device threads (both sides) pinned to "
                    "CPU " +
                    std::to_string(ctx.device_cpu) + ", measuring lcore on CPU " +
                    std::to_string(ctx.measure_cpu) + "; app completion errors " +
                    std::to_string(rig.app_errors()) + ", map retries " +
                    std::to_string(rig.map_errors()) + ", fenced unmaps " +
                    std::to_string(cs.fenced_unmaps) + " of " + std::to_string(cs.unmaps) +
                    ", device WQEs " + std::to_string(es.wqes));
  t.notes.push_back(
      "window_overhead_ns = map_unmap - register_once (per I/O); the emulated "
      "device moves bytes with memcpy on another CPU, so absolute I/O times are "
      "the emulator's, the difference is rdmx's");
  return t;
}

}  // namespace rdmx::perf
