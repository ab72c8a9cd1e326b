// rdmafwd: the testpmd-like application of rdmx. Shared declarations of its parts:
//
//   params.cpp     command line (Params, usage, parse_params)
//   setup.cpp      devices, arenas, window pools, poll cores, QP connections (Testbed, Lane)
//   engines/*.cpp  forwarding engines, one table entry each (engines.cpp holds the table)
//   stats.cpp      latency histogram, counters, snapshots, text and JSON output
//   telemetry.cpp  /rdmafwd/stats, /rdmafwd/config, /rdmafwd/windows (the library adds /rdmx/*)
//   cmdline.cpp    the interactive prompt (DPDK cmdline)
//   main.cpp       EAL start, run control (start/stop), signals, exit codes
//
// Threads: the main lcore parses, sets up, prints and runs the prompt; each poll lcore runs the
// forwarding loop of one Lane (its client and peer PollCores) and is the only writer of that
// Lane's counters (relaxed atomics, read lock-free by the main and telemetry threads).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/core/counter.hpp>
#include <rdmx/core/histogram.hpp>
#include <rdmx/core/result.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mlx5/device.hpp>
#include <rdmx/rpcrdma/chunks.hpp>
#include <rdmx/rpcrdma/cm_private.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

#include "engines/state.hpp"

namespace rdmafwd {

using namespace rdmx;

// ---- Exit codes (doc/guides/rdmafwd.md) ----------------------------------------------------
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntime = 1;        // errors during the run, verification failure
inline constexpr int kExitUsage = 2;          // bad or missing arguments
inline constexpr int kExitNoDevice = 3;       // the device asked for does not exist
inline constexpr int kExitInterrupted = 130;  // SIGINT/SIGTERM before forwarding started

// ---- Parameters ------------------------------------------------------------------------------
enum class Role { kBoth, kServer, kClient };
const char* role_name(Role r) noexcept;

struct Params {
  std::string device = "emu";  // a device spec (lib/endpoint: emu, emu-sink, mlx5_0, ...)
  std::string fwd = "rpc";
  unsigned nb_cores = 1;
  uint32_t pages_per_io = 16;
  uint32_t max_pages = 0;  // window size (translation entries); 0 = max(pages_per_io, 16)
  uint32_t metadata = 0;   // --metadata BYTES (rpc): bytes of metadata per page-sized block
  win::KeyPolicy keys = win::KeyPolicy::kRandom;  // --keys (increment: debugging only)
  uint32_t page_size = 4096;
  uint32_t windows_per_core = 0;  // 0 = 2 * io_depth + 16
  uint32_t burst = 16;
  uint32_t io_depth = 32;
  double stats_period = 0;      // seconds; 0 = no periodic lines (but see kStatusPeriod)
  bool quiet = false;           // --quiet: no default status line on long runs
  double status_period = 10.0;  // hidden --status-period (tests): seconds between status lines
  double duration = 0;          // seconds; 0 = until io_count, Ctrl-C or `stop`
  uint64_t io_count = 0;        // total I/Os; 0 = no limit
  bool json = false;
  bool interactive = false;
  bool auto_start = false;
  std::string cmdline_file;
  Role role = Role::kBoth;
  std::string wire;  // two-process mode: shared-memory wire name
  // Two-process mode over TCP (lib/endpoint rendezvous): the server listens on [ADDR:]PORT, the
  // client connects to HOST[:PORT]; over emu the data still flows on the shm wire, whose name
  // the server picks (unless --wire) and tells the client.
  std::string listen;
  std::string peer;
  double rendezvous_timeout = 0;  // --rendezvous-timeout SEC; 0 = the library's defaults
  // --max-refusals N/SEC (server): more than N remote accesses refused within SEC seconds on one
  // lane's QP disconnect the client (win::PeerGuard). 0 = off.
  uint32_t max_refusals = 0;
  double refusal_window = 1.0;
  // --clients N (server over TCP): serve N clients at once, --nb-cores / N lanes each (one QP
  // per lane). --isolate peer (server): each lane's QP and windows in a protection domain of
  // its own (endpoint::Endpoint::add_isolated_core), so no client's rkey works on another's QP.
  uint32_t clients = 1;
  // --serve-clients N (server of one client at a time): N clients one after the other, each
  // lane recovered (QP to RESET and reconnected, windows invalidated) between them; 0 = until
  // Ctrl-C. 1 (the default): the first client's end ends the server.
  uint32_t serve_clients = 1;
  // --reconnect-for SEC (client over TCP on a network device: emu@roce or mlx5): when the
  // connection fails during the run (the server went away, a QP error), meet the server again
  // within SEC seconds (new session, QPs recovered) and carry on. -1 = the default: 10 s for such
  // a client, off otherwise; 0 = off.
  double reconnect_for = -1;
  bool isolate = false;
  // --cm (mlx5, with --listen/--peer): the lanes' QPs are connected through rdma_cm (a
  // route-resolved device, port and GID; drivers/mlx5/dv/cm.hpp) on the rendezvous port of the
  // RDMA port space, instead of connect infos over the TCP socket.
  bool cm = false;
  bool verify = true;
  bool show_topology = false;
  bool strict = false;              // --strict-no-syscalls
  uint64_t corrupt_every = 0;       // hidden (tests): the server flips a payload byte every N RPCs
  uint64_t forge_rkey_every = 0;    // hidden (tests): a two-process write/read client flips the
                                    // key byte of the server's rkey every N one-sided ops
  uint64_t forge_handle_every = 0;  // hidden (tests): an rpc client flips a byte of the file
                                    // handle the server handed out in every N-th call
  uint64_t forge_twin_every = 0;    // hidden (tests): an rpc client sends every N-th READ call
                                    // twice for its slot (a second xid) in one burst
  bool forge_credits = false;       // hidden (tests): an rpc client ignores its credits
  // --rpc-remote-invalidate on|off (rpc client): offer remote invalidation in the RFC 8797
  // private data of the hello (off: the server replies with plain SENDs and the client
  // invalidates each call's windows itself).
  bool rpc_remote_invalidate = true;
  bool emu_thread_per_port = false;  // --emu-threads per-port: each emu port its own thread
  uint32_t emu_idle_spin = 4096;     // --emu-idle-spin: shared device thread's empty rounds
  int device_cpu = -1;               // not an option: the placement's CPU for the emu device thread
  // --fault-every N (tests, emu): a fault every N I/Os on average (random in [N/2, 3N/2]).
  uint64_t fault_every = 0;
  uint32_t fault_kinds = 0xf;  // --fault-kinds: bit (1 << FaultKind)
  uint64_t fault_seed = 1;     // --fault-seed
};

// Faults --fault-every injects (bit positions of Params::fault_kinds).
enum FaultKind : uint32_t {
  kFaultErrorCqe = 0,     // the n-th next WQE of the client QP completes in error (mid-burst)
  kFaultQpError = 1,      // the client or the peer QP goes to error with WQEs in flight
  kFaultUnreachable = 2,  // side A's requests get no response for a while (retry exceeded)
  kFaultDelay = 3,        // the client QP's completions are held back for a while
  kFaultKinds = 4,
};
const char* fault_kind_name(uint32_t k) noexcept;
// "error-cqe,qp-error" -> bit mask; 0 on a bad name.
uint32_t parse_fault_kinds(const std::string& list) noexcept;

// What parse_params() decided: run, print help and exit 0, or fail with exit 2.
struct ParseOutcome {
  bool help = false;
  std::string error;  // non-empty: one line (usage_error_text())
};
ParseOutcome parse_params(const std::vector<std::string>& args, Params& p);
std::string usage_text(const std::string& prog);
// What a usage error prints on stderr (exit 2): "rdmafwd: error: MSG" and a line pointing at
// `PROG --help`, never the whole usage.
std::string usage_error_text(const std::string& prog, const std::string& msg);
// Checks that hold between options (also after `set ...`). Empty when fine.
std::string check_params(const Params& p);

// Whether the lanes verify payloads: --verify (the default), and a device that moves them (a
// sink completes WQEs without effect: nothing to check). What `show config`, telemetry's
// /rdmafwd/config and the lanes use.
bool verifies(const Params& p);

// ---- Counters written by one poll lcore ------------------------------------------------------
// One writer (its poll lcore: relaxed load + store, a plain mov on x86), any number of readers.
using Counter = rdmx::Counter;

// Latency histogram in TSC cycles (rdmx/core/histogram.hpp, 16 sub-buckets per power of two:
// ~6 % resolution), preallocated; add() is a few instructions, no allocation. Also the exact
// minimum, maximum and sum (the mean).
class LatencyHist {
 public:
  using Buckets = LogLinearBuckets<5>;
  static constexpr uint32_t kBuckets = Buckets::kBuckets;

  LatencyHist() noexcept { min_.set(UINT64_MAX); }
  void add(uint64_t cycles) noexcept {
    counts_[Buckets::index(cycles)].add(1);
    sum_.add(cycles);
    if (cycles > max_.get()) max_.set(cycles);
    if (cycles < min_.get()) min_.set(cycles);
  }
  uint64_t count(uint32_t b) const noexcept { return counts_[b].get(); }
  uint64_t max() const noexcept { return max_.get(); }
  uint64_t min() const noexcept { return min_.get(); }  // UINT64_MAX when empty
  uint64_t sum() const noexcept { return sum_.get(); }

 private:
  std::array<Counter, kBuckets> counts_{};
  Counter max_, sum_, min_;
};

// A plain copy of a histogram (main thread).
struct HistSnapshot {
  std::array<uint64_t, LatencyHist::kBuckets> counts{};
  uint64_t max = 0, min = UINT64_MAX, sum = 0;
  uint64_t total() const noexcept;
  HistSummary summary() const noexcept;
  void take(const LatencyHist& h) noexcept;
  void subtract(const HistSnapshot& base) noexcept;
  void merge(const HistSnapshot& o) noexcept;
};

struct alignas(64) LaneCounters {
  Counter ios;          // completed I/Os (RPCs, messages relayed, map+unmap pairs, ...)
  Counter bytes;        // payload bytes of the completed I/Os
  Counter io_errors;    // other I/O errors (a reply that did not invalidate its window...)
  Counter verify_fail;  // payload checks that failed
  Counter rejected;     // posts refused by the window layer for another reason than no room
  Counter corrupted;    // bytes flipped on purpose (--corrupt-every)
  Counter runs;         // start/stop cycles
  Counter failed;       // 1 once the lane stopped after a QP error it could not recover
  Counter peer_bye;     // two-process server: the client said goodbye
  // Server: client requests refused for breaking the protocol (engines/peer_checks.hpp), and
  // the RpcVerdict of the last one. The peer's doing: not an error of this process.
  Counter refused_requests;
  Counter refused_why;
  // Server (rpc): calls answered NFS3ERR_BADHANDLE (another file handle than the one this
  // server handed out); the client is served on. The peer's doing: not an error here.
  Counter bad_handles;
  // Server (rpc): calls for a slot whose previous reply was still being sent, held until that
  // SEND completed and then served (two calls for one slot at once: a client ignoring the
  // protocol; a lost acknowledgement on a lossy link). Not an error.
  Counter calls_waited;
  // Client (rpc): replies handed on before every window of their call was invalid on the device
  // (engines/rpc.cpp, finish_call). Always 0 unless the engine has a bug.
  Counter early_replies;
  // Client (rpc): windows its calls invalidated themselves (rpcrdma::ChunkStats, published).
  Counter local_invalidations;
  Counter issuing;  // 1 while the lane may still issue I/Os
  // True from the start of a run until its drain ended (release by the poll lcore after its last
  // counter update; acquire by readers): I/Os unaccounted while true are in flight, after it lost.
  std::atomic<bool> active{false};
  Counter issued;           // I/Os posted (all runs)
  Counter abandoned;        // I/Os that never completed by the drain deadline at stop
  Counter faults_injected;  // --fault-every
  // QP errors recovered (both ends back to RTS), and injected faults survived without an error.
  Counter faults_recovered;
  Counter fault_ios;  // I/Os that failed because of a recovered fault (counted, not lost)
  LatencyHist lat;
  // The window counters are the lane's PollCores' own (win::CoreStats, read with win::snapshot
  // from any thread): nothing to copy here.
};

// ---- Testbed ---------------------------------------------------------------------------------
// One Lane per poll lcore. Single process: both RC endpoints of every connection live here:
//   c  client / source       pool A (device side 0)   QP c <-> p
//   p  peer / server / relay-in pool B (device side 1)
//   r  relay-out             pool B                   QP r <-> s
//   s  sink                  pool A
// Two-process mode: the client process has only c, the server process only p.
struct SlotBufs {
  std::vector<uint64_t> pages;  // page addresses, slot i at [i * per_slot, (i+1) * per_slot)
  uint32_t per_slot = 0;
  const uint64_t* slot(uint32_t i) const noexcept { return pages.data() + size_t{i} * per_slot; }
};

struct Lane;
struct Engine;

struct RunConfig {
  const Engine* engine = nullptr;
  uint32_t burst = 16;
  uint32_t pages = 16;
  uint32_t depth = 32;
  bool verify = true;
  uint64_t corrupt_every = 0;
  uint64_t forge_rkey_every = 0;
  uint64_t forge_handle_every = 0;
  uint64_t forge_twin_every = 0;
  bool forge_credits = false;
  uint64_t io_limit = 0;  // this lane's share of --io-count; 0 = none
  uint64_t fault_every = 0;
  uint32_t fault_kinds = 0;
  uint64_t fault_seed = 1;
  uint32_t lanes = 1;
  uint32_t metadata = 0;  // bytes of metadata per page-sized block (rpc --metadata); 0 = none
};

// --metadata: chunk pages per slot that hold `pages` blocks' metadata.
inline uint32_t metadata_pages(uint32_t pages, uint32_t metadata, uint32_t page_size) noexcept {
  return static_cast<uint32_t>((uint64_t{pages} * metadata + page_size - 1) / page_size);
}

// rpc: what the client and the server agreed at setup (setup.cpp: in the session's hello and
// welcome; in one process from both offers directly). Each side's RFC 8797 view (agree(its
// own private data, the peer's)) and the file handle the server handed out (RFC 1813 nfs_fh3,
// opaque, at most 64 bytes).
struct RpcAgreed {
  rpcrdma::CmAgreement client, server;
  std::array<uint8_t, 64> fh{};
  uint32_t fh_len = 0;
};

struct Lane {
  unsigned index = 0;
  unsigned lcore = 0;
  win::PollCore* c = nullptr;
  win::PollCore* p = nullptr;
  win::PollCore* r = nullptr;
  win::PollCore* s = nullptr;
  mem::Arena* arena_a = nullptr;
  mem::Arena* arena_b = nullptr;
  // The devices of side A (c, s) and side B (p, r); nullptr for a side in the other process.
  // Control path only (statistics ask them for the refused remote accesses of the lane's QPs).
  mlx5::Device* dev_a = nullptr;
  mlx5::Device* dev_b = nullptr;
  uint32_t page_size = 4096;
  uint32_t depth = 0;       // slots (io-depth)
  uint32_t max_pages = 0;   // pages per slot
  uint32_t recv_pages = 0;  // pages per receive slot (<= 16: one scatter entry each)
  // Side A (client).
  SlotBufs c_src, c_dst;  // scattered chunk pages: what the client maps
  SlotBufs s_recv;        // sink receive slots
  uint64_t c_small = 0;   // depth x 64 B request headers, then depth x 64 B reply receives
  // Side B (peer).
  SlotBufs p_src, p_dst;  // contiguous per slot (registered buffers of the server)
  SlotBufs p_recv;        // peer receive slots
  // --metadata: each slot's blocks' metadata, an array of its own beside the data (client: of
  // c_src / c_dst; server: of p_src / p_dst).
  SlotBufs c_md_src, c_md_dst, p_md_src, p_md_dst;
  uint64_t p_small = 0;  // depth x 64 B reply headers
  unsigned client = 0;   // two-process server: which of its clients the lane serves
  // Receive slots of p posted (io-depth; a server lane serving a relay client: 2 x io-depth,
  // so the relay-in queue cannot run dry while relay-out completions are being polled).
  uint32_t p_recv_n = 0;
  // The arena's local key for SGEs on side A's cores (c, s) and side B's (p, r): the arena's
  // own, or an isolated core's (--isolate peer: the arena registered in the core's own PD).
  uint32_t lkey_a = 0, lkey_b = 0;
  bool remote_peer = false;    // two-process client: p lives in the other process
  bool remote_client = false;  // two-process server: c lives in the other process

  RunConfig cfg;
  LaneCounters st;
  // Engine state (preallocated at setup, reset by the engine's start()).
  struct Slot {
    uint64_t tsc = 0;
    uint64_t seq = 0;
    uint64_t done_seq = 0;  // the last seq that completed without error (write: the goodbye)
    win::Window* w = nullptr;
    uint32_t rkey = 0;
    uint32_t len = 0;
    uint8_t op = 0;
    bool busy = false;
    uint64_t expect_a = 0, expect_b = 0;
    // rpc client: the rkey the reply's SEND_WITH_INV named (0: none), the local invalidations
    // counted before the call's retire, and once its windows were retired (inv_posted) the SQ
    // producer past their invalidates (0: none posted) and whether one of them was left mapped
    // under the call's rkey (finish_call's check).
    uint32_t inv_rkey = 0;
    uint64_t inv_base = 0;
    bool inv_posted = false, left_mapped = false;
    bool forged = false;  // --forge-handle-every: the call carries a forged file handle
    // --forge-twin-every: the second call's xid (0: none), whether its reply and the first
    // call's are still due, and whether the second's reply was bad.
    uint32_t twin_xid = 0;
    bool twin_due = false, first_due = false, twin_bad = false;
    uint64_t inv_fence = 0;
  };
  std::vector<Slot> slots;  // client side
  std::vector<Slot> srv;    // server side (by client slot)
  std::vector<uint32_t> free_slots;
  uint32_t n_free = 0;
  uint64_t issued = 0, completed = 0, seq = 0;
  UnmapQueue unmaps;        // the client core's unmaps refused for lack of SQ room
  std::vector<Csum> csums;  // per slot checksums computed at start
  // Each engine's own state (engines/state.hpp).
  UmrState umr;
  OneSidedState onesided;  // write, read
  RelayState relay;
  RpcClientState rpc_client;
  RpcServerState rpc_server;
  RpcAgreed rpc;  // rpc: what the client and the server agreed at setup
  bool draining = false;
  bool failed = false;  // a QP went to error: issue nothing more until recovered
  bool dead = false;    // recovery impossible or failed: the lane stays stopped
  // Server: a request of the client broke the protocol: the lane reads nothing more of it (poll
  // lcore). peer_dropped: the main thread cut the client off (its QP to the error state); the
  // lane's end is then not a failure of this process.
  bool refusing = false;
  std::atomic<bool> peer_dropped{false};
  uint64_t issued_base = 0;  // st.issued at the start of this run
  // Fault injection (--fault-every; poll lcore only).
  struct FaultState {
    uint64_t rng = 0;
    uint64_t next_at = 0;    // inject when l.issued reaches this
    int pending = -1;        // FaultKind in effect, -1 = none
    uint64_t until_tsc = 0;  // unreachable / delay: cleared at this TSC
    // A timed fault has been cleared; it counts as survived once the I/Os issued before the
    // clear (settle_mark) have completed with no error (their error CQEs may still be on the way).
    bool settling = false;
    uint64_t settle_mark = 0;
  } fault;
  uint64_t drain_deadline = 0;
  uint64_t iter = 0;
};

// ---- Engines ---------------------------------------------------------------------------------
struct Engine {
  const char* name;
  const char* what;
  bool needs_data;   // moves payload (not possible on emu-sink)
  bool two_process;  // runs with --role server/client
  // Poll lcore, before the loop (may wait for setup UMRs; no allocation).
  bool (*start)(Lane&);
  // One iteration: poll, complete, issue, flush. Returns whether it did work.
  bool (*fwd)(Lane&);
  // After stop: true once nothing is in flight (the engine's persistent windows unmapped).
  bool (*idle)(Lane&);
  // Recovery of the lane after a QP error (faults.cpp, recover_lane); nullptr when the engine
  // needs nothing. before_reconnect: nothing is in flight any more and every window is about to
  // be invalidated (the engine forgets the ones it held, undoes what it changed in place).
  // recovered: after start(), with l.issued and l.completed restored to the counts before the
  // error (the engine rebases what it derives from them).
  void (*before_reconnect)(Lane&);
  void (*recovered)(Lane&);
};
const Engine* find_engine(const std::string& name) noexcept;
const std::vector<const Engine*>& engines();
std::string engine_names(const char* sep);

// Helpers shared by the engines (engines/common.cpp).
// Checksum of bytes [kHdr, len) of a buffer spread over pages of page_size bytes.
inline constexpr uint32_t kHdr = 64;
Csum csum_pages(const uint64_t* pages, uint32_t page_size, uint64_t len) noexcept;
Csum csum_range(uint64_t addr, uint64_t len) noexcept;
void fill_pattern(const uint64_t* pages, uint32_t n, uint32_t page_size, uint64_t seed) noexcept;
uint8_t* byte_at(const uint64_t* pages, uint32_t page_size, uint64_t off) noexcept;

// Cookies: bit 63 belongs to the window layer.
inline constexpr uint64_t cookie(uint8_t kind, uint32_t slot) noexcept {
  return (uint64_t{kind} << 32) | slot;
}
inline constexpr uint8_t cookie_kind(uint64_t c) noexcept {
  return static_cast<uint8_t>(c >> 32);
}
inline constexpr uint32_t cookie_slot(uint64_t c) noexcept {
  return static_cast<uint32_t>(c);
}

}  // namespace rdmafwd
