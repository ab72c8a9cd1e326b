// rdmafwd setup (control path: allocates, may block, returns Result).
//
// Single process: two devices joined by a wire — emu: side 0 (A) and side 1 (B) of an
// in-process wire, both run by ONE device thread (endpoint::SharedDeviceThread) pinned to the
// placement's device CPU
// (--emu-threads per-port: a thread per port, placed by the kernel); dv: the named device opened
// twice (two contexts, loopback) — one arena + window pool per side, and per lane four PollCores:
// c (A) <-> p (B) and r (B) <-> s (A). Two-process mode: the server opens side 0 of a
// shared-memory wire (mlx5: its own device) and has p only, the client attaches side 1 and has
// c only; they meet over the TCP rendezvous (--listen/--peer; on one host, loopback) as a
// lib/endpoint session: the sizes agreed once in the hello, one QP per lane (two for a relay
// client) in the crossing INFO frames, READY both ways, the client's goodbye at the end.
#include "setup.hpp"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <thread>

#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/rpcrdma/cm_private.hpp>

#include "engines/common.hpp"
#include "engines/peer_checks.hpp"

namespace rdmafwd {

std::atomic<bool> g_signal{false};

namespace {

uint32_t pow2_at_least(uint64_t v) {
  uint32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}

// Page-granular bump allocation over an arena's data part.
struct Carver {
  mem::Arena* arena;
  uint32_t next = 0;
  Result<uint64_t> take(uint32_t n) {
    if (next + n > arena->n_pages())
      return make_error(Errc::kNoMemory, "arena too small (internal sizing error)");
    const uint64_t a = arena->page_addr(next);
    next += n;
    return a;
  }
};

// Contiguous slot buffers.
Status carve_contig(Carver& cv, SlotBufs& b, uint32_t slots, uint32_t per_slot) {
  b.per_slot = per_slot;
  b.pages.resize(size_t{slots} * per_slot);
  for (uint32_t i = 0; i < slots; ++i) {
    auto r = cv.take(per_slot);
    if (!r) return r.error();
    for (uint32_t j = 0; j < per_slot; ++j)
      b.pages[size_t{i} * per_slot + j] = r.value() + uint64_t{j} * cv.arena->page_size();
  }
  return {};
}

// Scattered chunk pages: a block of pages handed out in shuffled order, so a slot's pages are
// not contiguous (what a window exists for).
Status carve_scattered(Carver& cv, SlotBufs& a, SlotBufs& b, uint32_t slots, uint32_t per_slot,
                       uint64_t seed) {
  const uint32_t n = 2 * slots * per_slot;
  auto r = cv.take(n);
  if (!r) return r.error();
  std::vector<uint64_t> pages(n);
  for (uint32_t i = 0; i < n; ++i) pages[i] = r.value() + uint64_t{i} * cv.arena->page_size();
  std::mt19937_64 rng(seed);
  std::shuffle(pages.begin(), pages.end(), rng);
  a.per_slot = b.per_slot = per_slot;
  a.pages.assign(pages.begin(), pages.begin() + n / 2);
  b.pages.assign(pages.begin() + n / 2, pages.end());
  return {};
}

struct SideSizes {
  uint32_t pages = 0;  // data pages
};

// Pages of one side for `lanes` lanes.
uint32_t side_pages(const Params& p, uint32_t recv_pages, unsigned lanes) {
  const uint32_t small = (kSmallPerSlot * p.io_depth * kSmall + p.page_size - 1) / p.page_size;
  // A server's p has twice the receive slots (a relay client: see Lane::p_recv_n).
  const uint32_t recv = (p.role == Role::kServer ? 2 : 1) * recv_pages;
  const uint32_t md = 2 * metadata_pages(p.pages_per_io, p.metadata, p.page_size);
  return lanes * (p.io_depth * (2 * p.max_pages + recv + md) + small);
}

win::PoolConfig pool_config(const Params& p, uint32_t n_windows) {
  win::PoolConfig pc;
  pc.n_windows = n_windows;
  pc.max_pages = p.max_pages;
  pc.remote_invalidate = true;
  pc.key_policy = p.keys;
  return pc;
}

win::CoreConfig core_config(const Params& p, uint32_t recv_pages) {
  win::CoreConfig cc;
  cc.cache_size = p.windows_per_core;
  cc.initial_windows = p.windows_per_core / 2;
  // Per slot in flight: a map (<= 4 WQEBBs inline for 52 KLMs... plus margin), a data WQE, an
  // unmap, a reply: 16 WQEBBs per slot is generous.
  cc.qp.sq_wqebbs = std::max<uint32_t>(1024, pow2_at_least(uint64_t{p.io_depth} * 16));
  // A server's p may hold 2 x io-depth receives (a relay client: Lane::p_recv_n).
  const uint32_t recvs = (p.role == Role::kServer ? 2 : 1) * p.io_depth;
  cc.qp.rq_wqes = pow2_at_least(std::max<uint32_t>(recvs, 16));
  cc.qp.rq_sges = recv_pages;
  cc.qp.cq_cqes =
      pow2_at_least(uint64_t{cc.qp.sq_wqebbs} + cc.qp.rq_wqes + 1);  // + the spare entry
  return cc;
}

std::string errc_str(Errc e) {
  return std::string(errc_name(e));
}

}  // namespace

Testbed::~Testbed() {
  // Cores quiesce while the device (thread) still runs; then the shared emu thread stops before
  // the endpoints destroy pools, arenas and devices. rdma_cm connections first (they
  // disconnect while their QPs exist).
  cm.reset();
  lanes.clear();
  side_a.destroy_cores();
  side_b.destroy_cores();
  emu_thread.reset();
  side_a = endpoint::Endpoint();
  side_b = endpoint::Endpoint();
  open_a = endpoint::OpenedDevice();
  open_b = endpoint::OpenedDevice();
  wire.reset();
}

uint64_t Testbed::checker_reports(std::string* dump) const {
  uint64_t n = 0;
  for (const endpoint::EmuControl& d : {emu_a, emu_b}) n += d.checker_reports(dump);
  return n;
}

std::string Testbed::census(bool& ok, std::vector<PoolCensus>* out) {
  ok = true;
  std::string text;
  const struct {
    const char* name;
    win::WindowPool* pool;
  } pools[] = {{"A", pool_a}, {"B", pool_b}};
  for (const auto& e : pools) {
    if (!e.pool) continue;
    PoolCensus pc;
    pc.pool = e.name;
    auto r = e.pool->check_windows();
    char buf[512];
    if (!r) {
      ok = pc.ok = false;
      pc.error = r.error().message;
      std::snprintf(buf, sizeof buf, "  pool %s: INVARIANT VIOLATED: %s\n", e.name,
                    pc.error.c_str());
    } else {
      pc.c = r.value();
      std::snprintf(buf, sizeof buf,
                    "  pool %s (%s): %u windows: cache %u, unmapping %u, depot %u, mapped %u, "
                    "dirty %u - every window in exactly one place: ok\n",
                    e.name, e.pool->device().name().c_str(), pc.c.total, pc.c.cache, pc.c.unmapping,
                    pc.c.depot, pc.c.mapped, pc.c.dirty);
    }
    text += buf;
    if (out) out->push_back(pc);
  }
  return text;
}

Status post_lane_recvs(Lane& l) {
  for (uint32_t k = l.depth; l.p && k < l.p_recv_n; ++k)
    if (Errc e = post_slot_recv(*l.p, l.p_recv, k, l.page_size, l.lkey_b, kCkReqRecv);
        e != Errc::kOk)
      return make_error(e, "posting receives: " + errc_str(e));
  for (uint32_t k = 0; k < l.depth; ++k) {
    if (l.c) {
      const mlx5::prm::Sge sg = sge(l.c_small + uint64_t{l.depth + k} * kSmall, kSmall, l.lkey_a);
      if (Errc e = l.c->post_recv({&sg, 1}, cookie(kCkReplyRecv, k)); e != Errc::kOk)
        return make_error(e, "posting receives: " + errc_str(e));
    }
    if (l.p) {
      if (Errc e = post_slot_recv(*l.p, l.p_recv, k, l.page_size, l.lkey_b, kCkReqRecv);
          e != Errc::kOk)
        return make_error(e, "posting receives: " + errc_str(e));
    }
    if (l.s) {
      if (Errc e = post_slot_recv(*l.s, l.s_recv, k, l.page_size, l.lkey_a, kCkSinkRecv);
          e != Errc::kOk)
        return make_error(e, "posting receives: " + errc_str(e));
    }
  }
  for (win::PollCore* k : {l.c, l.p, l.r, l.s})
    if (k) k->flush();
  return {};
}

Status reconnect_lane(Testbed& tb, Lane& l) {
  if (l.remote_peer || l.remote_client || !tb.dev_a || !tb.dev_b)
    return make_error(Errc::kState, "two-process mode: the other end cannot be recovered here");
  // The library's recovery protocol: drain (the engine already polled what it accounts for),
  // reconnect, re-invalidate every window of the cores.
  if (l.c && l.p) RDMX_TRY(endpoint::recover_cores(*l.c, *l.p), "lane c-p");
  if (l.r && l.s) RDMX_TRY(endpoint::recover_cores(*l.r, *l.s), "lane r-s");
  return post_lane_recvs(l);
}

// Devices through lib/endpoint's opener: single process, two ends that reach each other (emu:
// both sides of one in-process wire; mlx5: the device opened twice, loopback); two processes,
// one side of a shared-memory wire each (the server creates it, the client waits for it).
Status open_devices(const Params& p, Testbed& tb) {
  endpoint::DeviceOptions oa, ob;
  RDMX_TRY_ASSIGN(const endpoint::DeviceSpec spec, endpoint::parse_device_spec(p.device, &oa));
  if (spec.backend == endpoint::Backend::kMlx5 && p.role != Role::kBoth) {
    // Two hosts: this side's device only; the peer's QP is reached through the fabric.
    RDMX_TRY_ASSIGN(auto d, endpoint::open_device(p.device));
    (p.role == Role::kServer ? tb.dev_b : tb.dev_a) = d.dev.get();
    (p.role == Role::kServer ? tb.open_b : tb.open_a) = std::move(d);
    tb.notes.push_back("device: " + p.device + " (mlx5dv)");
    return {};
  }
  if (spec.backend == endpoint::Backend::kMlx5) {
    RDMX_TRY_ASSIGN(auto pair, endpoint::open_device_pair(p.device));
    tb.dev_a = pair[0].dev.get();
    tb.dev_b = pair[1].dev.get();
    tb.open_a = std::move(pair[0]);
    tb.open_b = std::move(pair[1]);
    tb.notes.push_back("device: " + p.device + " (mlx5dv), opened twice: loopback RC");
    return {};
  }
  const endpoint::DeviceKind kind = endpoint::device_kind(p.device);
  const bool threaded = kind == endpoint::DeviceKind::kEmuThreaded;
  const bool shared_thread = threaded && !p.emu_thread_per_port;
  oa.start_thread = ob.start_thread = !shared_thread;
  oa.emu_name = "emu0";
  ob.emu_name = "emu1";
  if (p.role == Role::kBoth) {
    RDMX_TRY_ASSIGN(auto pair, endpoint::open_device_pair(p.device, oa, ob));
    tb.wire = pair[0].wire;
    tb.emu_a = endpoint::EmuControl(pair[0]);
    tb.emu_b = endpoint::EmuControl(pair[1]);
    tb.dev_a = pair[0].dev.get();
    tb.dev_b = pair[1].dev.get();
    tb.open_a = std::move(pair[0]);
    tb.open_b = std::move(pair[1]);
  } else {
    const bool server = p.role == Role::kServer;
    endpoint::DeviceOptions& o = server ? ob : oa;
    // A device with a wire of its own (emu@roce:ADDR: RoCE v2 on this host's network) reaches
    // the peer's device by the GID in the connect info; otherwise both processes share the
    // shared-memory wire the server named.
    const bool own_wire = !oa.wire.empty();  // the spec's wire (parse_device_spec filled oa)
    if (!own_wire) {
      o.wire = "shm:" + p.wire;
      o.side = server ? 0 : 1;
      o.attach_timeout = std::chrono::seconds(30);  // TCP: the server has made it already
      o.cancel = &g_signal;
    }
    auto d = endpoint::open_device(p.device, o);
    if (!d && d.error().code == Errc::kTimeout)
      return add_context(std::move(d).error(), "is the server running?");
    RDMX_TRY(d, own_wire ? "device " + p.device : "shared-memory wire '" + p.wire + "'");
    tb.wire = d.value().wire;
    (server ? tb.emu_b : tb.emu_a) = endpoint::EmuControl(d.value());
    (server ? tb.dev_b : tb.dev_a) = d.value().dev.get();
    (server ? tb.open_b : tb.open_a) = std::move(d).value();
  }
  std::string threads;
  if (shared_thread) {
    const endpoint::EmuControl devs[] = {tb.emu_a, tb.emu_b};
    RDMX_TRY_ASSIGN(tb.emu_thread,
                    endpoint::SharedDeviceThread::start(devs, p.device_cpu, p.emu_idle_spin),
                    "emu device thread");
    threads =
        tb.emu_thread->size() == 2 ? ", one device thread for both ports" : ", one device thread";
  } else if (threaded) {
    threads = p.role == Role::kBoth ? ", one device thread per port" : ", one device thread";
  }
  const std::string& own = oa.wire;  // the spec's own wire, if any
  tb.notes.push_back(std::string("device: emulated mlx5 (") + endpoint::device_kind_name(kind) +
                     (p.role == Role::kBoth ? "), two ports joined by an in-process wire" + threads
                      : own.rfind("roce:", 0) == 0
                          ? "), RoCE v2 on this host's network from " + own.substr(5) + threads
                          : "), shared-memory wire /dev/shm/rdmx-emu-" + p.wire + threads));
  return {};
}

namespace {

// One side: lib/endpoint's builder takes the opened device and makes its arena (the data
// pages, plus the tail the pool reserves) and window pool; the lanes add the cores.
Status make_side(const Params& p, endpoint::OpenedDevice& dev, uint32_t data_pages,
                 uint32_t windows, endpoint::Endpoint& side, mem::Arena*& arena,
                 win::WindowPool*& pool, const char* name) {
  endpoint::EndpointConfig ec;
  ec.arena.bytes = size_t{data_pages} * p.page_size;
  ec.arena.page_size = p.page_size;
  ec.arena.source = mem::Source::kHeap;
  ec.arena.name = name;
  ec.pool = pool_config(p, windows);
  ec.n_cores = 0;
  RDMX_TRY_ASSIGN(side, endpoint::Endpoint::create(std::move(dev), ec),
                  std::string("side ") + name);
  arena = &side.arena();
  pool = &side.pool();
  return {};
}

// Builds lanes: their poll cores and their buffers carved out of both arenas.
struct LaneBuilder {
  Testbed& tb;
  const Params& p;
  uint32_t recv_pages;
  win::CoreConfig cc;
  Carver cva, cvb;

  Result<win::PollCore*> new_core(endpoint::Endpoint& side, const char* what,
                                  bool isolated = false) {
    RDMX_TRY_ASSIGN(win::PollCore * c,
                    isolated ? side.add_isolated_core(cc, p.windows_per_core) : side.add_core(cc),
                    std::string("poll core ") + what);
    return c;
  }
  Result<uint64_t> small_bufs(Carver& cv, const Lane& l) {
    return cv.take((kSmallPerSlot * l.depth * kSmall + p.page_size - 1) / p.page_size);
  }
  // Side A: client c (and sink s in one process): scattered source/destination pages.
  Status side_a(Lane& l, unsigned i) {
    RDMX_TRY_ASSIGN(l.c, new_core(tb.side_a, "c"));
    l.lkey_a = tb.side_a.core_lkey(*l.c);
    // The sink: in one process, and on a relay client (the server's relay-out sends to it).
    if (p.role == Role::kBoth || p.fwd == "relay") {
      RDMX_TRY_ASSIGN(l.s, new_core(tb.side_a, "s"));
    }
    // --metadata: a slot's data is one contiguous run (a repeat block strides from one
    // address), its metadata an array of its own.
    const uint32_t mdp = metadata_pages(p.pages_per_io, p.metadata, p.page_size);
    if (mdp) {
      RDMX_TRY(carve_contig(cva, l.c_src, l.depth, l.max_pages));
      RDMX_TRY(carve_contig(cva, l.c_dst, l.depth, l.max_pages));
      RDMX_TRY(carve_contig(cva, l.c_md_src, l.depth, mdp));
      RDMX_TRY(carve_contig(cva, l.c_md_dst, l.depth, mdp));
    } else {
      RDMX_TRY(carve_scattered(cva, l.c_src, l.c_dst, l.depth, l.max_pages, 1000 + i));
    }
    RDMX_TRY(carve_contig(cva, l.s_recv, l.depth, recv_pages));
    RDMX_TRY_ASSIGN(l.c_small, small_bufs(cva, l));
    fill_pattern(l.c_src.pages.data(), static_cast<uint32_t>(l.c_src.pages.size()), p.page_size,
                 11 + i);
    return {};
  }
  // Side B: peer p (and relay r in one process).
  Status side_b(Lane& l, unsigned i) {
    RDMX_TRY_ASSIGN(l.p, new_core(tb.side_b, "p", p.isolate));
    l.lkey_b = tb.side_b.core_lkey(*l.p);
    // Relay-out: in one process, and on a server (a client may run relay: its QP then connects
    // to that client's sink). With --isolate peer in the PD of its own too.
    if (p.role == Role::kBoth || p.role == Role::kServer) {
      RDMX_TRY_ASSIGN(l.r, new_core(tb.side_b, "r", p.isolate));
    }
    const uint32_t recv_slots = (p.role == Role::kServer ? 2 : 1) * l.depth;
    RDMX_TRY(carve_contig(cvb, l.p_src, l.depth, l.max_pages));
    RDMX_TRY(carve_contig(cvb, l.p_dst, l.depth, l.max_pages));
    if (const uint32_t mdp = metadata_pages(p.pages_per_io, p.metadata, p.page_size)) {
      RDMX_TRY(carve_contig(cvb, l.p_md_src, l.depth, mdp));
      RDMX_TRY(carve_contig(cvb, l.p_md_dst, l.depth, mdp));
    }
    RDMX_TRY(carve_contig(cvb, l.p_recv, recv_slots, recv_pages));
    RDMX_TRY_ASSIGN(l.p_small, small_bufs(cvb, l));
    fill_pattern(l.p_src.pages.data(), static_cast<uint32_t>(l.p_src.pages.size()), p.page_size,
                 77 + i);
    return {};
  }
  Status lane(unsigned i, unsigned lcore) {
    auto ln = std::make_unique<Lane>();
    Lane& l = *ln;
    l.index = i;
    l.lcore = lcore;
    l.page_size = p.page_size;
    l.depth = p.io_depth;
    l.max_pages = p.max_pages;
    l.recv_pages = recv_pages;
    l.arena_a = tb.arena_a;
    l.arena_b = tb.arena_b;
    l.dev_a = tb.pool_a ? tb.dev_a : nullptr;
    l.dev_b = tb.pool_b ? tb.dev_b : nullptr;
    l.remote_peer = !tb.pool_b;
    l.remote_client = !tb.pool_a;
    if (tb.pool_a) RDMX_TRY(side_a(l, i));
    if (tb.pool_b) RDMX_TRY(side_b(l, i));
    // Engine state, preallocated.
    l.slots.resize(l.depth);
    l.srv.resize(l.depth);
    l.onesided.targets.resize(l.depth);
    l.umr.issue_tsc.resize(l.depth);
    l.free_slots.resize(l.depth);
    l.unmaps.q.resize(size_t{l.depth} * 2 + 4);
    l.p_recv_n = l.depth;
    // Indexed by relay-in slot (up to 2 x depth).
    l.relay.relay_w.assign(size_t{l.depth} * 2, nullptr);
    l.srv.resize(size_t{l.depth} * 2);
    l.relay.backlog.resize(size_t{l.depth} * 2);
    l.csums.resize(size_t{l.depth} * 2);
    if (p.role == Role::kBoth) {
      RDMX_TRY(endpoint::connect_cores(*l.c, *l.p), "connect c-p");
      RDMX_TRY(endpoint::connect_cores(*l.r, *l.s), "connect r-s");
    }
    tb.lanes.push_back(std::move(ln));
    return {};
  }
};

// Receives (posted once the QPs are connected) stay posted for the whole run, in a layout every
// engine shares.
Status post_all_recvs(Testbed& tb) {
  for (auto& lp : tb.lanes) RDMX_TRY(post_lane_recvs(*lp));
  return {};
}

// ---- Two-process mode: a lib/endpoint session per peer over the TCP rendezvous ----------------
//
//   client                                   server (listening, everything built)
//   HELLO   fields: fwd, lanes, sizes, cm  ->
//                                            <- WELCOME "wire NAME" (emu) | REFUSE (sizes differ)
//   (opens its device on the wire, builds)   <- INFO    its QPs, one per lane (two: relay)
//   INFO    its QPs                         ->
//   each side checks the other's infos, connects its QPs, posts its receives (--cm: rdma_cm
//   connects them instead, no INFO frames), then
//   READY                                   ->
//                                            <- READY   the target windows (write/read)
//   forwards; at the end the client's BYE (the server answers it).
// The session stays open for the run: a peer that goes away is seen at once.

endpoint::Wait wait_for(const Params& p, std::chrono::milliseconds dflt) {
  const auto ms = p.rendezvous_timeout > 0
                      ? std::chrono::milliseconds(static_cast<int64_t>(p.rendezvous_timeout * 1000))
                      : dflt;
  return endpoint::Wait{ms, &g_signal};
}
const endpoint::Wait kStep = {endpoint::kDefaultExchangeTimeout, &g_signal};

// What both sides must run with, negotiated once at the welcome (--metadata before the window
// sizes it changes: its message is the one that explains). The engine is the client's choice.
// The link (shared memory or a network) is the session's own first field: session_config().
endpoint::Fields sizes_fields(const Params& p, unsigned lanes) {
  return {{"lanes", std::to_string(lanes)},
          {"io-depth", std::to_string(p.io_depth)},
          {"metadata", std::to_string(p.metadata)},
          {"max-pages", std::to_string(p.max_pages)},
          {"pages-per-io", std::to_string(p.pages_per_io)},
          {"page-size", std::to_string(p.page_size)},
          {"cm", p.cm ? "on" : "off"}};
}
std::string same_option(const endpoint::Field& f) {
  return "start both with the same " +
         (f.key == "lanes" ? std::string("--nb-cores") : "--" + f.key);
}
// Either side's session: its hello states, and its server checks first, the device's link.
endpoint::SessionConfig session_config(const Params& p) {
  endpoint::SessionConfig c;
  c.link = endpoint::device_link(p.device);
  return c;
}

// ---- rpc: what the session carries for RPC-over-RDMA ------------------------------------------
// RFC 8797's private data travels in the session instead of rdma_cm's REQ/REP (the QPs may be
// connected by INFO frames): the hello's "rpcrdma" field is the client's 8 bytes, the welcome's
// the server's, each as hex; the welcome's "fh" is the file handle the server hands out (RFC
// 1813: an NFS client learns it from MOUNT or LOOKUP, never makes it up), hex too. Each side
// computes rpcrdma::agree() from the two and the rpc engine runs with that (Lane::rpc).
namespace rr = rdmx::rpcrdma;

std::string to_hex(std::span<const uint8_t> b) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s;
  for (uint8_t c : b) {
    s += kDigits[c >> 4];
    s += kDigits[c & 15];
  }
  return s;
}
// Empty unless `s` is an even number of hex digits.
std::vector<uint8_t> from_hex(const std::string& s) {
  auto nib = [](char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
  };
  std::vector<uint8_t> b;
  if (s.size() % 2) return b;
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = nib(s[i]), lo = nib(s[i + 1]);
    if (hi < 0 || lo < 0) return {};
    b.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return b;
}

// The client offers remote invalidation unless --rpc-remote-invalidate off (Linux's client
// offers it whenever it registers with FRWR: xprtrdma/verbs.c, rpcrdma_ep_create); the server
// offers none of its own memory (svc_rdma_accept sends cp_flags 0). RFC 8166's 1024-byte
// inline thresholds both ways: every rdmafwd message fits (engines/common.hpp, kSmall).
rr::CmPrivate rpc_private(const Params& p, bool client) {
  rr::CmPrivate c;
  c.present = true;
  c.remote_invalidation = client && p.rpc_remote_invalidate;
  return c;
}
endpoint::Field private_field(const rr::CmPrivate& c) {
  std::array<uint8_t, rr::kCmPrivateBytes> b{};
  (void)rr::encode_cm_private(c, b);  // the default sizes always encode
  return {"rpcrdma", to_hex(b)};
}
// The peer's private data from its hello or welcome; none (an older peer): RFC 8797's defaults,
// no remote invalidation.
rr::CmPrivate peer_private(const endpoint::Fields& f) {
  const std::string* v = endpoint::field(f, "rpcrdma");
  return rr::decode_cm_private(v ? from_hex(*v) : std::vector<uint8_t>{});
}

// Lane `l`'s view as `server` or client, with the peer's private data and the file handle.
void adopt_rpc(const Params& p, Lane& l, bool server, const rr::CmPrivate& peer,
               std::span<const uint8_t> fh) {
  const rr::CmPrivate mine = rpc_private(p, !server);
  (server ? l.rpc.server : l.rpc.client) = rr::agree(mine, peer);
  l.rpc.fh_len = static_cast<uint32_t>(std::min(fh.size(), l.rpc.fh.size()));
  std::copy_n(fh.begin(), l.rpc.fh_len, l.rpc.fh.begin());
}

// Server: a new random file handle (32 bytes of the kernel's randomness; RFC 1813 allows 64).
std::vector<uint8_t> make_file_handle() {
  std::random_device rd;
  std::vector<uint8_t> fh(32);
  for (size_t i = 0; i < fh.size(); i += 4) {
    const uint32_t r = rd();
    std::memcpy(fh.data() + i, &r, 4);
  }
  return fh;
}

// Server: empty when a server answers the engine the client runs, else why not.
std::string fwd_refusal(const endpoint::Fields& hello) {
  const std::string* fwd = endpoint::field(hello, "fwd");
  const std::string v = fwd ? *fwd : "(not stated)";
  if (v != "rpc" && v != "umr" && v != "write" && v != "read" && v != "relay")
    return "the client runs --fwd " + v +
           "; a server answers rpc, umr, write, read and relay clients";
  return "";
}

// "peer ADDR sent ..." -> "sent ...": the app's line names the client itself.
std::string without_peer(const std::string& msg, const std::string& name) {
  const std::string lead = "peer " + name + " ";
  return msg.rfind(lead, 0) == 0 ? msg.substr(lead.size()) : msg;
}

// The lanes [first, first + n) that serve one peer.
struct LaneRange {
  unsigned first = 0, n = 0;
};
LaneRange all_lanes(const Testbed& tb) {
  return {0, static_cast<unsigned>(tb.lanes.size())};
}

// The QPs of a lane that connect to the peer: p (server) or c (client); with a relay client
// also the server's relay-out r and the client's sink s (a second connection per lane).
std::vector<win::PollCore*> lane_qps(const Lane& l, bool server, bool relay) {
  std::vector<win::PollCore*> v{server ? l.p : l.c};
  if (relay) v.push_back(server ? l.r : l.s);
  return v;
}

std::vector<mlx5::ConnectInfo> lane_infos(Testbed& tb, bool server, const endpoint::Channel& ch,
                                          LaneRange r, bool relay = false) {
  std::vector<mlx5::ConnectInfo> v;
  mlx5::Device& dev = server ? *tb.dev_b : *tb.dev_a;
  for (unsigned i = r.first; i < r.first + r.n; ++i)
    for (win::PollCore* k : lane_qps(*tb.lanes[i], server, relay)) {
      mlx5::ConnectInfo ci = dev.local_info(k->qp_handle());
      // A device that states no GID (emu) is reached at this end's address: RoCE v2's GID for
      // IPv4 (IBTA Annex A17), what a wire across hosts addresses its packets with.
      bool zero = true;
      for (uint8_t b : ci.gid) zero = zero && b == 0;
      if (zero) (void)ch.local_ipv4_gid(ci.gid);
      v.push_back(ci);
    }
  return v;
}

Status connect_lanes(Testbed& tb, bool server, const std::vector<mlx5::ConnectInfo>& remote,
                     LaneRange r, bool relay = false) {
  const size_t per = relay ? 2 : 1;
  if (remote.size() != r.n * per)
    return make_error(Errc::kProtocol, "the peer sent " + std::to_string(remote.size()) +
                                           " QP(s) for " + std::to_string(r.n) + " lane(s)" +
                                           (relay ? " of two QPs each" : ""));
  size_t j = 0;
  for (unsigned i = r.first; i < r.first + r.n; ++i)
    for (win::PollCore* k : lane_qps(*tb.lanes[i], server, relay)) {
      // A QP that served a client before: drained, RESET and reconnected, its windows
      // invalidated (their mappings belonged to the last client) and back in the cache.
      if (tb.lanes_used)
        RDMX_TRY(endpoint::recover_core(*k, remote[j++]),
                 "lane " + std::to_string(i) + ": recover for the next peer");
      else
        RDMX_TRY((server ? *tb.dev_b : *tb.dev_a).connect(k->qp_handle(), remote[j++]),
                 "lane " + std::to_string(i) + ": connect to the peer");
    }
  return {};
}

// A refused client's lanes: every QP of the range back to RESET (those connect_lanes reached
// and the rest alike), so nothing of the refused peer stays connected.
void unconnect_lanes(Testbed& tb, LaneRange r, bool relay) {
  for (unsigned i = r.first; i < r.first + r.n; ++i)
    for (win::PollCore* k : lane_qps(*tb.lanes[i], true, relay))
      (void)tb.dev_b->modify_qp(k->qp_handle(), mlx5::QpState::kReset);
}

// --cm: each lane's QPs connected through rdma_cm (lib/endpoint/cm.hpp: the connect info in
// the REQ/REP private data; the route must go through the lane's device). Server: one request
// per QP, in the client's lane order.
Status cm_accept_lanes(Testbed& tb, LaneRange r, bool relay) {
  if (!tb.cm) return make_error(Errc::kInvalidArgument, "--cm: not listening");
  for (unsigned i = r.first; i < r.first + r.n; ++i)
    for (win::PollCore* k : lane_qps(*tb.lanes[i], true, relay))
      RDMX_TRY(tb.cm->accept(k->qp_handle()), "lane " + std::to_string(i));
  return {};
}
Status cm_connect_lanes(Testbed& tb, const endpoint::HostPort& hp, bool relay) {
  RDMX_TRY_ASSIGN(tb.cm, endpoint::CmPeer::client(*tb.dev_a), "--cm");
  for (auto& lp : tb.lanes)
    for (win::PollCore* k : lane_qps(*lp, false, relay))
      RDMX_TRY(tb.cm->connect(k->qp_handle(), hp), "lane " + std::to_string(lp->index));
  return {};
}

// Server of a write/read client: per lane, a window over each slot of its destination (write)
// or source (read) buffers, mapped here before the lanes run (the core is not polled yet) and
// kept for the run; their keys (and for read the checksum of each slot) go to the client in
// READY: "lane L rkeys K0 K1 ...", "lane L csums A0:B0 ...".
Result<std::string> map_targets(const Params& p, Testbed& tb, bool write, LaneRange r) {
  const uint32_t len = p.pages_per_io * p.page_size;
  std::ostringstream o;
  for (unsigned li = r.first; li < r.first + r.n; ++li) {
    Lane& l = *tb.lanes[li];
    const unsigned index = li - r.first;  // the lane's number at the client
    win::PollCore& core = *l.p;
    const SlotBufs& b = write ? l.p_dst : l.p_src;
    o << "lane " << index << " rkeys";
    for (uint32_t i = 0; i < l.depth; ++i) {
      for (;;) {
        const win::MapResult m = core.map(
            std::span<const uint64_t>(b.slot(i), p.pages_per_io),
            mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead, 0, len);
        if (m.ok()) {
          l.onesided.targets[i] = m.window;
          o << ' ' << m.window->rkey();
          break;
        }
        if (m.errc != Errc::kNoRoom && m.errc != Errc::kBusy)
          return make_error(m.errc, "lane " + std::to_string(l.index) + ": mapping the " +
                                        (write ? "write" : "read") +
                                        " targets: " + errc_str(m.errc));
        core.flush();
        (void)core.quiesce();
      }
    }
    core.flush();
    if (!core.quiesce())
      return make_error(Errc::kTimeout, "lane " + std::to_string(l.index) +
                                            ": the target windows were not mapped in time");
    o << "\n";
    if (!write) {
      o << "lane " << index << " csums";
      for (uint32_t i = 0; i < l.depth; ++i) {
        const Csum c = csum_range(l.p_src.slot(i)[0], len);
        o << ' ' << c.a << ':' << c.b;
      }
      o << "\n";
      // --corrupt-every (tests): a byte of slot 0 changes after its checksum went out, so the
      // client's check must fail.
      if (p.corrupt_every) reinterpret_cast<uint8_t*>(l.p_src.slot(0)[0])[len / 2] ^= 0x5a;
    }
  }
  tb.notes.push_back(std::string("server: ") + std::to_string(r.n * p.io_depth) +
                     " windows over its " + (write ? "destination" : "source") +
                     " slots mapped for the client's RDMA " + (write ? "WRITEs" : "READs") +
                     " (at setup: the statistics count the run's maps)");
  return o.str();
}

// Client: the server's target keys (and checksums) from READY.
Status adopt_targets(Testbed& tb, const std::string& text) {
  std::istringstream in(text);
  std::string word, what;
  unsigned lane = 0;
  while (in >> word >> lane >> what) {
    if (word != "lane" || lane >= tb.lanes.size())
      return make_error(Errc::kProtocol, "the server's target list is malformed");
    Lane& l = *tb.lanes[lane];
    for (uint32_t i = 0; i < l.depth; ++i) {
      if (what == "rkeys") {
        uint32_t k = 0;
        if (!(in >> k)) return make_error(Errc::kProtocol, "the server sent too few keys");
        l.onesided.remote_rkeys.push_back(k);
      } else {
        Csum c;
        char colon = 0;
        if (!(in >> c.a >> colon >> c.b) || colon != ':')
          return make_error(Errc::kProtocol, "the server sent too few checksums");
        l.onesided.remote_csums.push_back(c);
      }
    }
  }
  return {};
}

// Server: one client's session, admitted and not yet running, on the lanes of slot `slot`.
struct Pending {
  Testbed::Peer pr;
  unsigned slot = 0;
  bool connected = false;  // its lanes' QPs are connected: a failure from here is fatal
};

// The client's hello: the engine it runs and the sizes it runs with (refused otherwise), then
// this server's infos (or rdma_cm). An error is this client's refusal (the session told it).
Status greet(const Params& p, Testbed& tb, Pending& pd) {
  endpoint::Session& s = pd.pr.s;
  if (std::string why = fwd_refusal(s.hello_fields()); !why.empty()) {
    s.refuse(Errc::kInvalidArgument, why);
    return make_error(Errc::kInvalidArgument, why);
  }
  pd.pr.fwd = *endpoint::field(s.hello_fields(), "fwd");
  endpoint::Fields offer;
  if (tb.emu_b) offer.push_back({"wire", p.wire});
  offer.push_back(private_field(rpc_private(p, false)));
  offer.push_back({"fh", to_hex(tb.file_handle)});
  RDMX_TRY(s.welcome(sizes_fields(p, pd.pr.n_lanes), offer, same_option));
  const LaneRange r{pd.pr.first_lane, pd.pr.n_lanes};
  const rr::CmPrivate client = peer_private(s.hello_fields());
  for (unsigned i = r.first; i < r.first + r.n; ++i)
    adopt_rpc(p, *tb.lanes[i], true, client, tb.file_handle);
  const bool relay = pd.pr.fwd == "relay";
  if (!p.cm)
    return s.send_info(lane_infos(tb, true, s.channel(), r, relay), size_t{r.n} * (relay ? 2 : 1));
  // Each lane's QPs (two for relay) in the client's order: c then s.
  pd.connected = true;
  RDMX_TRY(cm_accept_lanes(tb, r, relay));
  return s.connected_elsewhere();
}

// The client's infos came (checked by the session): its lanes connected, their receives posted,
// the target windows mapped; READY. A connect that fails refuses this client only: the QPs
// connected so far go back to RESET, ready for the next client.
Status serve(const Params& p, Testbed& tb, Pending& pd) {
  endpoint::Session& s = pd.pr.s;
  const LaneRange r{pd.pr.first_lane, pd.pr.n_lanes};
  const bool relay = pd.pr.fwd == "relay";
  if (!pd.connected) {
    if (Status st = connect_lanes(tb, true, s.peer_infos(), r, relay); !st) {
      unconnect_lanes(tb, r, relay);
      s.refuse(Errc::kProtocol, st.error().message);
      return make_error(Errc::kProtocol, st.error().message);
    }
    pd.connected = true;
  }
  for (unsigned i = r.first; i < r.first + r.n; ++i) {
    Lane& l = *tb.lanes[i];
    l.p_recv_n = relay ? 2 * l.depth : l.depth;
    RDMX_TRY(post_lane_recvs(l));
  }
  std::string targets;
  if (pd.pr.fwd == "write" || pd.pr.fwd == "read") {
    RDMX_TRY_ASSIGN(targets, map_targets(p, tb, pd.pr.fwd == "write", r));
  }
  return s.ready(targets);
}

// What tcp_server's steps share: the clients being admitted and the lane slots they take.
struct Admission {
  const Params& p;
  Testbed& tb;
  const Say& say;
  const Say& warn;
  unsigned n_clients;
  unsigned per;  // lanes per client
  size_t first;  // --serve-clients: the clients served before
  std::vector<Pending> pending;
  std::vector<bool> slot_busy;

  void refused(Pending& pd, const std::string& why) {
    tb.refused_clients.push_back({pd.pr.name, why});
    if (warn) warn("server: client " + pd.pr.name + " not served: " + why);
    slot_busy[pd.slot] = false;
  }
};

// A session the server admitted: a free slot of lanes and the greeting, or refused (busy).
Status admit(Admission& ad, endpoint::Session&& in) {
  Pending pd;
  pd.pr.name = in.peer();
  pd.pr.s = std::move(in);
  const auto free_slot = std::find(ad.slot_busy.begin(), ad.slot_busy.end(), false);
  if (free_slot == ad.slot_busy.end()) {
    const std::string why =
        "this server serves " + std::to_string(ad.n_clients) + " client(s), all being admitted now";
    pd.pr.s.refuse(Errc::kBusy, why);
    ad.tb.refused_clients.push_back({pd.pr.name, why});
    if (ad.warn) ad.warn("server: client " + pd.pr.name + " not served: " + why);
    return {};
  }
  pd.slot = static_cast<unsigned>(free_slot - ad.slot_busy.begin());
  *free_slot = true;
  pd.pr.first_lane = pd.slot * ad.per;
  pd.pr.n_lanes = ad.per;
  if (Status st = greet(ad.p, ad.tb, pd); !st) {
    if (pd.connected) return add_context(st.error(), "client " + pd.pr.name);
    ad.refused(pd, without_peer(st.error().message, pd.pr.name));
  } else {
    ad.pending.push_back(std::move(pd));
  }
  return {};
}

// A client ready: its note, its lanes, one line, and it joins the peers.
void client_ready(Admission& ad, Pending& pd) {
  Testbed& tb = ad.tb;
  const unsigned k = static_cast<unsigned>(tb.peers.size() - ad.first);
  const std::string lanes = ad.n_clients == 1
                                ? ""
                                : ", lanes " + std::to_string(pd.pr.first_lane) + ".." +
                                      std::to_string(pd.pr.first_lane + ad.per - 1);
  tb.notes.push_back("server: client " + pd.pr.name + " over TCP from " +
                     pd.pr.s.channel().local_address() + ", running --fwd " + pd.pr.fwd + lanes +
                     (pd.pr.fwd == "umr" ? " (nothing to serve but its goodbye)" : ""));
  for (unsigned li = pd.pr.first_lane; li < pd.pr.first_lane + ad.per; ++li)
    tb.lanes[li]->client = static_cast<unsigned>(tb.peers.size());
  if (ad.say && ad.n_clients > 1)
    ad.say("server: client " + std::to_string(k + 1) + " of " + std::to_string(ad.n_clients) +
           " (" + pd.pr.name + ") connected" +
           (k + 1 < ad.n_clients ? "; waiting for the next" : ""));
  tb.peers.push_back(std::move(pd.pr));
}

// One step of each session being admitted; `busy` is set when any moved.
Status step_pending(Admission& ad, bool& busy) {
  for (size_t i = 0; i < ad.pending.size();) {
    Pending& pd = ad.pending[i];
    const endpoint::SessionEvent e = pd.pr.s.step();
    Status st;
    if (e == endpoint::SessionEvent::kInfos) st = serve(ad.p, ad.tb, pd);
    if (e == endpoint::SessionEvent::kDropped) st = pd.pr.s.error();
    busy = busy || e != endpoint::SessionEvent::kNone;
    if (!st) {
      if (pd.connected || st.error().code == Errc::kState)
        return add_context(st.error(), "client " + pd.pr.name);
      ad.refused(pd, without_peer(st.error().message, pd.pr.name));
      ad.pending.erase(ad.pending.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    if (e == endpoint::SessionEvent::kReady) {
      client_ready(ad, pd);
      ad.pending.erase(ad.pending.begin() + static_cast<std::ptrdiff_t>(i));
      continue;
    }
    ++i;
  }
  return {};
}

// Every client admitted without waiting on any (SessionServer over the Door): a slow, silent or
// broken one is refused alone, one line each, and its lanes go to the next.
Status tcp_server(const Params& p, Testbed& tb, endpoint::Listener& lis, const Say& say,
                  const Say& warn) {
  const endpoint::Wait total = wait_for(p, endpoint::kDefaultAcceptTimeout);
  const auto deadline = std::chrono::steady_clock::now() + total.timeout;
  const unsigned n_clients = p.clients ? p.clients : 1;
  Admission ad{p,
               tb,
               say,
               warn,
               n_clients,
               static_cast<unsigned>(tb.lanes.size()) / n_clients,
               tb.peers.size(),
               {},
               std::vector<bool>(n_clients, false)};
  if (say)
    say("server: waiting for " +
        (n_clients == 1 ? std::string(ad.first ? "the next client" : "a client")
                        : std::to_string(n_clients) + " clients") +
        " on " + lis.address() + " (up to " + std::to_string((total.timeout.count() + 999) / 1000) +
        " s), Ctrl-C to stop");
  struct LogCtx {
    Testbed& tb;
    const Say& warn;
  } ctx{tb, warn};
  endpoint::SessionServer srv(
      &lis, {endpoint::kDefaultExchangeTimeout, 64}, session_config(ad.p),
      [](void* a, const std::string& peer, const std::string& line) {
        auto& c = *static_cast<LogCtx*>(a);
        c.tb.refused_clients.push_back({peer, line});
        if (c.warn) c.warn("server: client " + peer + " not served: " + line);
      },
      &ctx);
  while (tb.peers.size() < ad.first + n_clients) {
    if (g_signal.load())
      return make_error(Errc::kState, "interrupted while waiting for a client on " + lis.address());
    if (std::chrono::steady_clock::now() >= deadline)
      return make_error(Errc::kTimeout, "no client on " + lis.address() + " within " +
                                            std::to_string((total.timeout.count() + 999) / 1000) +
                                            " s");
    bool busy = false;
    RDMX_TRY_ASSIGN(std::optional<endpoint::Session> in, srv.try_admit());
    if (in) {
      busy = true;
      RDMX_TRY(admit(ad, std::move(*in)));
    }
    RDMX_TRY(step_pending(ad, busy));
    if (!busy) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return {};
}

// Client, before its device exists: reaches the server, agrees the sizes and learns the wire.
Result<endpoint::Session> tcp_client_hello(Params& p, unsigned lanes, const Say& say) {
  RDMX_TRY_ASSIGN(const endpoint::HostPort hp, endpoint::parse_peer_address(p.peer));
  const endpoint::Wait w = wait_for(p, endpoint::kDefaultConnectTimeout);
  if (say)
    say("client: connecting to " + hp.str() + " (up to " +
        std::to_string((w.timeout.count() + 999) / 1000) + " s), Ctrl-C to stop");
  RDMX_TRY_ASSIGN(endpoint::Channel ch, endpoint::Channel::connect(hp, w));
  endpoint::Fields hello = sizes_fields(p, lanes);
  hello.insert(hello.begin(), {"fwd", p.fwd});
  hello.push_back(private_field(rpc_private(p, true)));
  RDMX_TRY_ASSIGN(endpoint::Session s,
                  endpoint::Session::client(std::move(ch), hello, session_config(p)));
  RDMX_TRY(s.await(endpoint::SessionEvent::kWelcome, kStep));
  if (const std::string* wire = endpoint::field(s.welcome_fields(), "wire")) p.wire = *wire;
  if (endpoint::device_kind(p.device) != endpoint::DeviceKind::kMlx5 && p.wire.empty())
    return make_error(Errc::kProtocol,
                      "server " + s.peer() + " named no emu wire (is it running on --device emu?)");
  return s;
}

Status tcp_client_finish(const Params& p, Testbed& tb) {
  endpoint::Session& s = tb.peers.at(0).s;
  const bool relay = p.fwd == "relay";
  // rpc: the server's private data and the file handle it handed out (1..64 bytes, RFC 1813).
  const std::string* fh_hex = endpoint::field(s.welcome_fields(), "fh");
  const std::vector<uint8_t> fh = fh_hex ? from_hex(*fh_hex) : std::vector<uint8_t>{};
  if (p.fwd == "rpc" && (fh.empty() || fh.size() > 64))
    return make_error(Errc::kProtocol, "server " + s.peer() +
                                           " handed out no usable file handle (is it an older "
                                           "rdmafwd?)");
  for (auto& lp : tb.lanes) adopt_rpc(p, *lp, false, peer_private(s.welcome_fields()), fh);
  if (p.cm) {
    RDMX_TRY_ASSIGN(const endpoint::HostPort hp, endpoint::parse_peer_address(p.peer));
    RDMX_TRY(cm_connect_lanes(tb, hp, relay));
    RDMX_TRY(s.connected_elsewhere());
  } else {
    RDMX_TRY(s.send_info(lane_infos(tb, false, s.channel(), all_lanes(tb), relay),
                         tb.lanes.size() * (relay ? 2 : 1)));
    RDMX_TRY(s.await(endpoint::SessionEvent::kInfos, kStep));
    RDMX_TRY(connect_lanes(tb, false, s.peer_infos(), all_lanes(tb), relay));
  }
  RDMX_TRY(post_all_recvs(tb));
  RDMX_TRY(s.ready());
  // The server's receives are posted once it says so: only then may requests go.
  RDMX_TRY(s.await(endpoint::SessionEvent::kReady, kStep));
  RDMX_TRY(adopt_targets(tb, s.peer_ready_text()));
  for (auto& lp : tb.lanes)
    if (((p.fwd == "write" || p.fwd == "read") && lp->onesided.remote_rkeys.size() != lp->depth) ||
        (p.fwd == "read" && lp->onesided.remote_csums.size() != lp->depth))
      return make_error(Errc::kProtocol, "the server sent no windows for --fwd " + p.fwd +
                                             " (is it an older rdmafwd?)");
  tb.notes.push_back("client: server " + s.peer() + " over TCP from " +
                     s.channel().local_address());
  return {};
}

}  // namespace

std::string Testbed::peer_name(const Lane& l) const {
  return l.client < peers.size() ? peers[l.client].name : std::string();
}

bool Testbed::any_client_runs(const std::string& fwd) const {
  for (const Peer& pr : peers)
    if (!pr.retired && (fwd.empty() ? !pr.fwd.empty() : pr.fwd == fwd)) return true;
  return false;
}

void drop_peer(Testbed& tb, size_t i) {
  Testbed::Peer& pr = tb.peers.at(i);
  if (pr.dropped) return;
  pr.dropped = true;
  for (unsigned li = pr.first_lane; li < pr.first_lane + pr.n_lanes && li < tb.lanes.size(); ++li) {
    Lane& l = *tb.lanes[li];
    l.peer_dropped.store(true, std::memory_order_release);
    for (win::PollCore* k : {l.p, l.r})
      if (k && tb.dev_b) (void)tb.dev_b->modify_qp(k->qp_handle(), mlx5::QpState::kError);
  }
  // The client sees the server gone (its socket closes).
  if (pr.s.state() != endpoint::SessionState::kDropped &&
      pr.s.state() != endpoint::SessionState::kClosed)
    pr.s.drop(Errc::kState, "dropped by this server");
}

unsigned police_peers(Testbed& tb, const Say& warn) {
  unsigned n = 0;
  const std::string others = tb.peers.size() > 1 ? "; the other clients are served on" : "";
  for (size_t i = 0; i < tb.peers.size(); ++i) {
    Testbed::Peer& pr = tb.peers[i];
    if (pr.dropped || pr.retired) continue;
    if (pr.lost || !pr.violation.empty()) {
      const std::string why = pr.lost ? "went away during the run (connection closed without a "
                                        "goodbye)"
                                      : pr.violation;
      if (warn) warn("server: client " + pr.name + " dropped: " + why + others);
      drop_peer(tb, i);
      ++n;
      continue;
    }
    for (unsigned li = pr.first_lane; li < pr.first_lane + pr.n_lanes && li < tb.lanes.size();
         ++li) {
      const Lane& l = *tb.lanes[li];
      const uint64_t refused = l.st.refused_requests.get();
      if (!refused) continue;
      const auto why = static_cast<RpcVerdict>(l.st.refused_why.get());
      if (warn)
        warn("server: client " + pr.name + " dropped: lane " + std::to_string(li) +
             " refused its request (" + rpc_verdict_name(why) + ")" + others);
      drop_peer(tb, i);
      ++n;
      break;
    }
  }
  return n;
}

namespace {
// One peer, without waiting: its session stepped (a goodbye is answered at once).
PeerState watch_one(Testbed::Peer& pr) {
  if (pr.dropped || pr.retired)
    return PeerState::kBye;  // done with: it ends nothing for the others
  using S = endpoint::SessionState;
  if (pr.s.step() == endpoint::SessionEvent::kBye) (void)pr.s.close();
  switch (pr.s.state()) {
    case S::kClosing:
    case S::kClosed:
      return PeerState::kBye;
    case S::kDropped:
      if (pr.s.peer_went_away()) return PeerState::kGone;
      // During the run a client sends nothing but its goodbye: anything else (a second
      // connection info, a hello...) breaks the protocol, and police_peers drops it.
      if (pr.violation.empty()) pr.violation = without_peer(pr.s.error().message, pr.name);
      return PeerState::kHere;
    default:
      return PeerState::kHere;
  }
}
}  // namespace

// Every peer: kGone as soon as one went away without a goodbye (lost_peer names it), unless a
// server still serves another client (then that one is marked lost, for police_peers to drop
// alone); kBye once all said it.
PeerState watch_peer(Testbed& tb) {
  if (tb.peers.empty()) return PeerState::kHere;
  bool all_bye = true;
  for (size_t i = 0; i < tb.peers.size(); ++i) {
    if (tb.peers[i].lost) continue;  // police_peers drops it
    const PeerState s = watch_one(tb.peers[i]);
    bool others = false;
    for (size_t j = 0; j < tb.peers.size(); ++j)
      others =
          others || (j != i && !tb.peers[j].dropped && !tb.peers[j].lost && !tb.peers[j].retired &&
                     tb.peers[j].s.state() == endpoint::SessionState::kRunning);
    if (s == PeerState::kGone && others && tb.peers.size() > 1) {
      tb.peers[i].lost = true;
      all_bye = false;
      continue;
    }
    if (s == PeerState::kGone) {
      tb.lost_peer = static_cast<int>(i);
      return PeerState::kGone;
    }
    all_bye = all_bye && s == PeerState::kBye;
  }
  return all_bye ? PeerState::kBye : PeerState::kHere;
}

bool await_bye(Testbed& tb, std::chrono::milliseconds within) {
  const auto end = std::chrono::steady_clock::now() + within;
  bool all = !tb.peers.empty();
  for (Testbed::Peer& pr : tb.peers) {
    if (pr.retired || pr.s.peer_said_bye()) continue;
    if (pr.dropped || pr.s.state() != endpoint::SessionState::kRunning) {
      all = false;
      continue;
    }
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        end - std::chrono::steady_clock::now());
    auto e = pr.s.wait_event({std::max(left, std::chrono::milliseconds(1)), &g_signal});
    if (e && e.value() == endpoint::SessionEvent::kBye) {
      (void)pr.s.close();
      continue;
    }
    all = false;
  }
  return all;
}

void say_bye(Testbed& tb, const Params& p, uint64_t ios) {
  if (tb.peers.empty() || tb.peers[0].s.state() != endpoint::SessionState::kRunning) return;
  std::ostringstream o;
  o << "ios " << ios << "\n";
  // --fwd write: what the last write of each slot carried, for the server to check; only slots
  // whose last write completed (one that failed may have written nothing, or part: unknown).
  if (p.fwd == "write")
    for (auto& lp : tb.lanes)
      for (uint32_t i = 0; i < lp->depth; ++i)
        if (lp->slots[i].seq && lp->slots[i].done_seq == lp->slots[i].seq)
          o << "slot " << lp->index << ' ' << i << ' ' << lp->slots[i].seq << ' ' << lp->csums[i].a
            << ' ' << lp->csums[i].b << "\n";
  (void)tb.peers[0].s.close(o.str());
}

namespace {
// One client's goodbye against the slots of its lanes.
void check_writes_of(Testbed& tb, const Params& p, const Testbed::Peer& pr, uint64_t& checked,
                     uint64_t& bad) {
  std::istringstream in(pr.s.bye_text());
  std::string word;
  const uint32_t len = p.pages_per_io * p.page_size;
  while (in >> word) {
    if (word != "slot") {
      std::getline(in, word);
      continue;
    }
    unsigned lane = 0, slot = 0;
    uint64_t seq = 0;
    Csum want;
    if (!(in >> lane >> slot >> seq >> want.a >> want.b) || lane >= pr.n_lanes ||
        slot >= tb.lanes[pr.first_lane + lane]->depth) {
      ++bad;
      break;
    }
    Lane& l = *tb.lanes[pr.first_lane + lane];  // the client's lane number, on our lanes
    const uint64_t a = l.p_dst.slot(slot)[0];
    if (p.corrupt_every && checked == 0) reinterpret_cast<uint8_t*>(a)[len / 2] ^= 0x5a;  // tests
    const bool ok =
        reinterpret_cast<const PayloadHdr*>(a)->seq == seq && csum_range(a, len) == want;
    ++checked;
    if (!ok) {
      ++bad;
      l.st.verify_fail.add(1);  // the lanes have stopped: no other writer
    }
  }
}
}  // namespace

uint64_t check_client_writes(Testbed& tb, const Params& p, std::string& note) {
  uint64_t checked = 0, bad = 0;
  for (const Testbed::Peer& pr : tb.peers)
    if (!pr.retired && pr.fwd == "write") check_writes_of(tb, p, pr, checked, bad);
  note = "server: checked the last write of " + std::to_string(checked) +
         " slot(s) against the client's goodbye: " +
         (bad ? std::to_string(bad) + " differ" : std::string("all match"));
  return bad;
}

Status release_lanes(Testbed& tb) {
  for (Testbed::Peer& pr : tb.peers) {
    if (pr.retired) continue;
    pr.retired = true;
    if (pr.s.state() != endpoint::SessionState::kDropped &&
        pr.s.state() != endpoint::SessionState::kClosed)
      pr.s.drop(Errc::kState, "served");
  }
  for (auto& lp : tb.lanes) {
    Lane& l = *lp;
    // Whatever the last client left posted completes now (flushed); RESET before the next
    // client's INFO goes out: a new incarnation, with a new initial PSN.
    for (win::PollCore* k : {l.p, l.r})
      if (k) RDMX_TRY(endpoint::disconnect_core(*k), "lane " + std::to_string(l.index));
    l.failed = l.dead = l.refusing = false;
    l.peer_dropped.store(false, std::memory_order_release);
    l.st.peer_bye.set(0);
    l.st.failed.set(0);
    l.onesided.targets_unmapped = false;
  }
  tb.lanes_used = true;
  tb.lost_peer = -1;
  return {};
}

Status reconnect_client(Params& p, Testbed& tb, const Say& say, std::chrono::milliseconds budget) {
  if (tb.peers.empty()) return make_error(Errc::kState, "no server to reconnect to");
  Testbed::Peer& pr = tb.peers[0];
  if (pr.s.state() != endpoint::SessionState::kDropped &&
      pr.s.state() != endpoint::SessionState::kClosed)
    pr.s.drop(Errc::kState, "reconnecting");
  // The lanes' QPs: to the error state (whatever is still posted completes as flushed), drained,
  // to RESET: a new incarnation whose connect info carries a new initial PSN; recover_core at the
  // connect reconnects them and invalidates every window (back in the cache).
  for (auto& lp : tb.lanes) {
    Lane& l = *lp;
    for (win::PollCore* k : {l.c, l.s})
      if (k) RDMX_TRY(endpoint::disconnect_core(*k), "lane " + std::to_string(l.index));
    l.failed = l.dead = false;
    l.st.failed.set(0);
    l.onesided.remote_rkeys.clear();
    l.onesided.remote_csums.clear();
  }
  tb.lanes_used = true;
  tb.lost_peer = -1;
  Params q = p;
  q.rendezvous_timeout =
      std::max(0.001, std::chrono::duration<double>(budget).count());  // the whole bound
  RDMX_TRY_ASSIGN(pr.s, tcp_client_hello(q, static_cast<unsigned>(tb.lanes.size()), say));
  pr.name = pr.s.peer();
  return tcp_client_finish(p, tb);
}

Status next_client(const Params& p, Testbed& tb, const Say& say, const Say& warn) {
  return tcp_server(p, tb, tb.listener, say, warn);
}

// Devices, then per side an arena and a pool, then the lanes with their cores and buffers, then
// connections (two processes: the sessions) and receives.
Result<std::unique_ptr<Testbed>> make_testbed(Params& p, const std::vector<unsigned>& lcores,
                                              const Say& say, const Say& warn) {
  auto tb = std::make_unique<Testbed>();
  const unsigned n_lanes = static_cast<unsigned>(lcores.size());
  // Two processes: the server listens first (a bad address fails before any device work) and names
  // the wire; the client meets the server first, to learn the wire its device attaches to.
  endpoint::Listener lis;
  if (!p.listen.empty()) {
    RDMX_TRY_ASSIGN(const endpoint::HostPort at, endpoint::parse_listen_address(p.listen),
                    "rendezvous");
    RDMX_TRY_ASSIGN(lis, endpoint::Listener::listen(at), "rendezvous");
    if (p.wire.empty()) p.wire = "rdmafwd-" + std::to_string(::getpid());
  }
  if (!p.peer.empty()) {
    tb->peers.emplace_back();
    RDMX_TRY_ASSIGN(tb->peers[0].s, tcp_client_hello(p, n_lanes, say), "rendezvous");
    tb->peers[0].name = tb->peers[0].s.peer();
    tb->peers[0].n_lanes = n_lanes;
  }
  RDMX_TRY(open_devices(p, *tb));
  if (p.cm && !p.listen.empty()) {
    // The same port, in rdma_cm's port space (RDMA_PS_TCP), for the lanes' QPs.
    RDMX_TRY_ASSIGN(const endpoint::HostPort at, endpoint::parse_listen_address(p.listen));
    RDMX_TRY_ASSIGN(tb->cm, endpoint::CmPeer::listen(*tb->dev_b, at), "--cm");
  }

  if (p.clients > 1 && n_lanes % p.clients != 0)
    return make_error(Errc::kInvalidArgument,
                      "--nb-cores " + std::to_string(n_lanes) + " is not a multiple of --clients " +
                          std::to_string(p.clients) + " (each client gets as many lanes)");
  const uint32_t recv_pages = std::min<uint32_t>(p.max_pages, 16);
  const uint32_t cores_per_side = 2 * n_lanes;
  const uint32_t windows = p.windows_per_core * cores_per_side;
  const uint32_t data_pages = side_pages(p, recv_pages, n_lanes);
  if (p.role != Role::kServer)
    RDMX_TRY(make_side(p, tb->open_a, data_pages, windows, tb->side_a, tb->arena_a, tb->pool_a,
                       "rdmafwd_a"));
  if (p.role != Role::kClient)
    RDMX_TRY(make_side(p, tb->open_b, data_pages, windows, tb->side_b, tb->arena_b, tb->pool_b,
                       "rdmafwd_b"));

  LaneBuilder lb{
      *tb, p, recv_pages, core_config(p, recv_pages), Carver{tb->arena_a}, Carver{tb->arena_b}};
  for (unsigned i = 0; i < n_lanes; ++i) RDMX_TRY(lb.lane(i, lcores[i]));
  if (p.role != Role::kClient) tb->file_handle = make_file_handle();
  if (p.role == Role::kBoth) {
    // One process: both offers are at hand, each side agrees from the other's.
    for (auto& lp : tb->lanes) {
      adopt_rpc(p, *lp, false, rpc_private(p, false), tb->file_handle);
      adopt_rpc(p, *lp, true, rpc_private(p, true), tb->file_handle);
    }
    RDMX_TRY(post_all_recvs(*tb));
  } else if (!p.listen.empty()) {
    tb->listener = std::move(lis);
    RDMX_TRY(tcp_server(p, *tb, tb->listener, say, warn), "rendezvous");
  } else
    RDMX_TRY(tcp_client_finish(p, *tb), "rendezvous");

  if (p.isolate)
    tb->notes.push_back(
        "server: --isolate peer: each lane's QP and its " + std::to_string(p.windows_per_core) +
        " windows in a protection domain of its own (the arena registered once more per lane)");
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "windows: %u per pool (%u per core x %u cores, 2 per lane), %u translation entries "
                "each; "
                "chunk pages of %u bytes",
                windows, p.windows_per_core, cores_per_side, p.max_pages, p.page_size);
  tb->notes.push_back(buf);
  return tb;
}

}  // namespace rdmafwd
