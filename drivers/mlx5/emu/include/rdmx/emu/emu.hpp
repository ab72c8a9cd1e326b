// rdmx::emu — the emulated mlx5 device: a strict software NIC that executes the real WQE bytes.
//
// It implements rdmx::mlx5::Device (the control path) and lays out SQ/RQ/CQ rings, doorbell
// records and a doorbell register exactly as the CPU side (rdmx::mlx5::QueuePair) expects from
// real hardware. The device side reads posted WQEs from the SQ bytes (prm::decode_wqe), keeps an
// mkey table (direct MRs and indirect KLM "windows"), moves data between two emulated ports over
// a Wire, and writes CQE64s. It is stricter than hardware: a PRM checker reports rule violations
// (missing fence after a UMR, doorbell misuse, CQ overrun, ...). See doc/guides/emu.md.
//
// Threading: every public method may be called from any thread; the device serialises them
// with one mutex per device. In threaded mode a device runs on its own thread (EmuDevice::start)
// or on a DeviceThread shared with other devices and pinned to a chosen CPU. None of this is
// hot-path code of the application: the hot path is the QueuePair writing rings, exactly as on
// hardware.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/emu/profile.hpp>
#include <rdmx/mlx5/device.hpp>

namespace rdmx::emu {

enum class Mode {
  kInline,    // the doorbell processes synchronously (and pumps an in-process peer): deterministic
  kThreaded,  // one device thread per EmuDevice polls doorbell records like a NIC
  kSink,      // every WQE completes successfully with no data effect (CPU-side cost only)
};
const char* mode_name(Mode m) noexcept;

struct Options {
  Mode mode = Mode::kInline;
  std::string name = "emu0";
  bool prm_checker = true;     // keep PRM rule reports (counters are always on)
  bool checker_fatal = false;  // a report turns the offending WQE into an error CQE + QP error
  // Device profile (profile.hpp; profiles() lists them): the HCA caps the device reports and
  // enforces. open() fails with kInvalidArgument naming the known profiles for an unknown name.
  // Empty: RDMX_EMU_PROFILE from the environment if set, else "default".
  std::string profile;
  uint32_t max_klm_list = 1024;  // most translation entries per window (at most the profile's)
  uint32_t max_inline_klm = 52;  // most KLMs an inline UMR may carry (at most the profile's)
  int numa_node = 0;
  // Transport (RC) model. The RC timers of every QP whose QpConfig::timers is unset (rdma_cm's
  // RoCE defaults: 1.07 s ACK timeout, 7 retries). On every wire the link retransmits on each
  // timeout and completes a request with TRANSPORT_RETRY_EXC_ERR after retry_cnt + 1 of them;
  // inline mode fires a stalled exchange's timers at once. rnr_retry counts RNR retries (7 is
  // NOT infinite here).
  mlx5::RcTimers timers;
  uint32_t rnr_timer_us = 50;  // threaded mode: wait before an RNR retry (inline: none)
  // NOT hardware behaviour, for key-guessing statistics only: a responder that refuses a remote
  // access or an invalid request NAKs and stays in RTS (no error state, no async event), so one
  // connection can be hammered with thousands of bad keys. A real responder goes to error
  // (class C, see doc/guides/emu.md "Responder errors"); leave this false everywhere else.
  bool responder_keeps_rts = false;
  // Threaded mode: idle polls before the device thread starts sleeping idle_sleep_us per poll.
  uint32_t idle_spin = 256;
  uint32_t idle_sleep_us = 20;
  // Threaded mode, the device's own thread (EmuDevice::start(); see DeviceThread for a thread
  // that serves several devices):
  int cpu = -1;              // >= 0: pin the thread to this CPU (open()/start() fail if it can't)
  bool start_thread = true;  // open() starts the own thread; false: a DeviceThread (or your
                             // progress() calls) drives the device
  bool idle_yield = true;    // spin with sched_yield() (a thread sharing its CPU); false: pause
};

// ---- Device threads ------------------------------------------------------------------------
class EmuDevice;
namespace detail {
class Runner;
}

// How a device thread polls. Idle backoff: while a round (one progress() of every device) does
// work, or any device still waits for something that needs no new doorbell (a response, a read
// to stream, a delayed completion, an RNR back-off), the thread polls again at once: it never
// sleeps with work pending. After `idle_spin` consecutive empty rounds it sleeps idle_sleep_us
// (plus the kernel's timer slack, 50 us by default) between rounds until a round finds work.
// Spinning costs a CPU; sleeping adds up to idle_sleep_us + slack to the first doorbell after an
// idle period. Between rounds the busy loop makes no system call (a pause instruction; no
// yield unless idle_yield).
struct ThreadOptions {
  int cpu = -1;                   // >= 0: pin with pthread_setaffinity_np (start fails if not)
  std::string name = "rdmx-emu";  // thread name (the kernel keeps 15 characters)
  uint32_t idle_spin = 4096;      // empty rounds before sleeping (0: sleep at once)
  uint32_t idle_sleep_us = 20;    // sleep per empty round after idle_spin (0: never sleep)
  bool idle_yield = false;        // spin with sched_yield() instead of pause (CPU shared with
                                  // other busy threads)
};

struct DeviceThreadStats {
  uint64_t rounds = 0;          // polls of every device
  uint64_t busy_rounds = 0;     // rounds that did work
  uint64_t pending_rounds = 0;  // empty rounds with work pending (no sleep allowed)
  uint64_t sleeps = 0;          // idle sleeps
};

// One thread that runs several threaded-mode EmuDevices: each round calls progress() on every
// device (round robin, starting one device later each round). The devices must be kThreaded and
// run by no other thread: open them with Options::start_thread = false (or stop() them first).
// EmuDevice::stop() on a served device takes it off this thread (after the current round); its
// destructor does the same, so devices and the DeviceThread may go in any order. Control path.
class DeviceThread {
 public:
  // Starts the thread (pinned first when opt.cpu >= 0). Errors: kInvalidArgument (no devices,
  // a device twice, a device not in kThreaded mode, a CPU it cannot be pinned to), kBusy (a
  // device already run by a thread).
  static Result<std::unique_ptr<DeviceThread>> start(std::span<EmuDevice* const> devs,
                                                     const ThreadOptions& opt = ThreadOptions{});
  ~DeviceThread();  // stops the thread and releases the devices (EmuDevice::start() works again)
  DeviceThread(const DeviceThread&) = delete;
  DeviceThread& operator=(const DeviceThread&) = delete;

  // Stops and joins the thread; the devices stay bound to it and do not run (their doorbells
  // wait; a request outstanding longer than its QP's timeout x (retry_cnt + 1) fails on
  // restart, and the log says the emu thread did not run).
  void stop();
  // Runs the thread again after stop() (same devices, same options, pinned again).
  Status restart();
  bool running() const noexcept;
  // Devices still served (EmuDevice::stop() or destruction takes one off).
  size_t size() const;
  const ThreadOptions& options() const noexcept;
  DeviceThreadStats stats() const noexcept;
  // The running thread (for pthread_getaffinity_np and the like); undefined when not running.
  std::thread::native_handle_type native_handle();

 private:
  explicit DeviceThread(std::unique_ptr<detail::Runner> r);
  std::unique_ptr<detail::Runner> r_;
};

// Joins two emulated ports (side 0 and side 1). Opaque; see wire.hpp in the sources.
class Wire;
// In one process.
std::shared_ptr<Wire> make_wire();
// Across two processes through a shared mapping (a file under /dev/shm named "rdmx-emu-<name>").
// Side 0 creates (and unlinks the name when its Wire goes away), side 1 attaches. The device on
// a shared-memory wire must run in kThreaded (or kSink) mode.
Result<std::shared_ptr<Wire>> create_shm_wire(const std::string& name);
Result<std::shared_ptr<Wire>> attach_shm_wire(const std::string& name);

// Over a real network as RoCE v2 (doc/guides/emu.md, "RoCEv2 wire"): IPv4/UDP port 4791 packets
// with the InfiniBand RC transport headers and ICRC, sent and received by the device thread on a
// raw IPv4 socket (needs CAP_NET_RAW). One device per wire (side 0, threaded mode); its peer is
// whatever RoCE v2 device owns the address in the remote QP's GID. Loss, reordering and
// duplication of sent packets can be injected (seeded), for tests on kernels without netem.
struct RoceOptions {
  uint32_t local_ipv4 = 0;  // host order; the device GID is its IPv4-mapped form
  double loss = 0;          // fraction of sent packets dropped
  double reorder = 0;       // fraction of sent packets held back behind the next one
  double duplicate = 0;     // fraction of sent packets sent twice
  uint64_t seed = 1;
  std::string pcap;  // non-empty: every packet put on the network goes to this pcap
  // The retransmission timer (go-back-N) and the retries of each QP are its RC timers
  // (QpConfig::timers, else Options::timers): timeout, then retry_cnt timeouts in a row before
  // TRANSPORT_RETRY_EXC_ERR.
  uint32_t window = 64;  // unacknowledged request packets per QP
  uint32_t mtu = 1024;   // path MTU of every QP (bytes): 1024 fits a 1500-byte Ethernet MTU
};
Result<std::shared_ptr<Wire>> make_roce_wire(const RoceOptions& opt);
// Parses "A.B.C.D" (host order result) for the device opener and tests.
Result<uint32_t> parse_ipv4(const std::string& s);

// ---- PRM checker ------------------------------------------------------------------------------
enum class Rule : uint8_t {
  kMissingFenceAfterUmr,    // a WQE uses (lkey) a mkey changed by a not-yet-ordered UMR of its SQ
  kRemoteUseBeforeOrdered,  // a peer request's rkey names a mkey whose UMR is not yet ordered
  kUmrNotFree,              // UMR with "fail if not free" (0x20) on a mkey that is not free
  kUmrFree,                 // UMR with "fail if free" (0x40) on a free mkey
  kTooManyEntries,          // UMR writes more translation entries than the window holds
  kDoorbellBackwards,       // a doorbell record moved backwards
  kDoorbellPastWritten,     // a doorbell record covers slots holding no (complete) posted WQE
  kCqOverrun,               // the device had to write a CQE into a slot software still owns
  kMalformedWqe,            // bytes the PRM does not allow (bad ds, opcode, octowords, ...)
  kUnknownMaskBits,         // UMR mkey_mask bits the device does not implement
  kKlmPtrAlign,             // pointer-mode KLM array not 2 KiB aligned
  kWqeTooLarge,             // a send WQE longer than the profile's max_wqe_sz_sq
  kUmrMaskForbidden,        // UMR mkey_mask bits the profile's caps forbid (umr_modify_*_disabled)
  kMwBindRefused,           // a type-2 window bind the IBTA rules forbid (MR, rights, range, QP)
  kKlmListNotPadded,      // UMR klm_octowords not a multiple of 4 (translation not 64-byte padded)
  kReservedField,         // a reserved ctrl / UMR ctrl field or flag bit set, or a non-zero opmod
  kXltOffsetUnaligned,    // UMR translation offset not a multiple of 4 octowords (64 bytes)
  kRepeatStride,          // repeat-block entry whose stride is below its byte count
  kRepeatHeaderNotFirst,  // repeat-block header under a translation offset (not the first entry)
  kWqeQpnMismatch,        // ctrl segment names another QP than the one whose doorbell rang
  kMissingFenceBeforeInvalidate,  // invalidate of an mkey an unfinished earlier WQE still uses
  kCount,
};
const char* rule_name(Rule r) noexcept;

struct Report {
  uint32_t qpn = 0;
  uint16_t wqe_index = 0;  // ctrl wqe_index of the offending WQE (RQ: receive counter)
  Rule rule = Rule::kCount;
  std::string text;
};

namespace detail {
class Engine;
}

class Checker {
 public:
  static constexpr size_t kMaxReports = 4096;  // reports kept; counters never saturate
  uint64_t count(Rule r) const noexcept;
  uint64_t total() const noexcept;
  std::vector<Report> reports() const;
  // Clears reports and counters.
  void clear() noexcept;
  // Human-readable summary, one line per report.
  std::string dump() const;

 private:
  friend class detail::Engine;
  void add(bool keep, uint32_t qpn, uint16_t wqe_index, Rule r, std::string text);
  mutable std::mutex mu_;
  std::array<uint64_t, static_cast<size_t>(Rule::kCount)> counts_{};
  std::vector<Report> reports_;
};

// ---- Fault injection ---------------------------------------------------------------------------
class Faults {
 public:
  // The n-th WQE (1-based, counted from now) the device executes on qp's SQ completes with an
  // error CQE carrying `syndrome` (and the QP goes to error), without any data effect.
  Status error_on_nth_wqe(mlx5::QpHandle qp, uint64_t n, uint8_t syndrome);
  // Moves qp to the error state now (outstanding and posted WQEs flush).
  Status qp_to_error(mlx5::QpHandle qp);
  // Requests from this device get no response: they fail with TRANSPORT_RETRY_EXC_ERR after the
  // retry count.
  void set_peer_unreachable(bool on);
  // Holds every completion of qp for `polls` device polls (EmuDevice::progress() calls or device
  // thread iterations) after it is ready. 0 = off.
  Status delay_completions(mlx5::QpHandle qp, uint32_t polls);
  // The next k create_window_mkey / reg_mr calls fail with Errc::kDeviceError.
  void fail_mkey_creations(uint32_t k);
  // The next response qp receives is treated as malformed (BAD_RESP_ERR on the WQE it answers).
  Status corrupt_next_response(mlx5::QpHandle qp);

 private:
  friend class EmuDevice;
  detail::Engine* eng_ = nullptr;
};

struct EmuStats {
  uint64_t polls = 0;       // device poll iterations
  uint64_t busy_polls = 0;  // polls that did work
  uint64_t doorbells = 0;   // SQ/RQ doorbell-record advances seen
  uint64_t wqes = 0;        // send WQEs executed
  uint64_t umrs = 0;
  uint64_t recvs = 0;       // receive WQEs consumed
  uint64_t cqes = 0;        // CQEs written
  uint64_t error_cqes = 0;  // error CQEs written (flushes included)
  uint64_t flushed = 0;     // WR_FLUSH_ERR CQEs
  uint64_t tx_packets = 0;
  uint64_t rx_packets = 0;
  uint64_t tx_bytes = 0;            // payload bytes sent
  uint64_t rnr_naks = 0;            // RNR NAKs sent (responder)
  uint64_t retries = 0;             // the link's resends (after an RNR wait or a timeout)
  uint64_t cqes_dropped = 0;        // CQEs lost to a CQ overrun
  uint64_t mtu_drops = 0;           // packets longer than the QP's path MTU, dropped (link)
  uint64_t stale_requests = 0;      // requests before this incarnation's first, dropped (responder)
  uint64_t remote_access_naks = 0;  // remote accesses refused (responder: bad key, state,
                                    // rights, bounds or another PD's mkey)
  uint64_t pd_refusals = 0;         // ... of them because the mkey is in another PD
  uint64_t qp_binding_refusals =
      0;                           // ... because the mkey (a type-2 window) is bound to another QP
  uint64_t read_depth_naks = 0;    // READs beyond the responder's max_dest_rd_atomic, NAKed
  uint64_t responder_errors = 0;   // class C errors that moved a responder QP to error
  uint64_t async_events = 0;       // asynchronous events raised (poll_async_events)
  uint64_t async_dropped = 0;      // ... lost because nobody polled (the queue keeps 256)
  uint64_t retry_exceeded = 0;     // requests that ran out of transport retries (either wire)
  uint64_t starved_retry_exc = 0;  // ... of them while the emu thread itself had not run for
                                   // longer than the QP's timeout (the log says so)
  uint64_t max_poll_gap_us = 0;    // the longest time the device was not polled (threaded)
  // The RC link's counters, on every wire (each side's link speaks RoCE v2 packets, over UDP
  // or over the in-process and shared-memory wires' packet rings).
  struct Roce {
    uint64_t tx_packets = 0, rx_packets = 0;
    uint64_t retransmits = 0;  // packets sent again (go-back-N after a timeout or a PSN NAK)
    uint64_t timeouts = 0;     // retransmission timer expiries
    uint64_t rnr_retries = 0;  // RNR NAKs waited out, then the message sent again
    uint64_t seq_naks_sent = 0, seq_naks_rcvd = 0;  // NAK PSN sequence error
    uint64_t duplicates = 0;   // request packets received behind the expected PSN
    uint64_t out_of_seq = 0;   // request packets ahead of it: dropped, the first NAKed
    uint64_t stale_resps = 0;  // responses behind the oldest outstanding PSN: ignored
    uint64_t acks_sent = 0;
    uint64_t rx_dropped[10] = {};  // per roce::Drop reason (index = reason)
    uint64_t rx_full = 0;          // dropped because the device had no room (the peer retransmits)
    uint64_t rx_waits = 0;  // receive bursts stopped at a packet the engine could not take yet
                            // (a packet ring keeps it; a socket drops it)
    uint64_t over_window =
        0;  // WRITE/SEND messages of more packets than the window (acked in parts)
    uint64_t injected_loss = 0, injected_reorder = 0, injected_dup = 0;
    uint64_t ring_full = 0;  // packet-ring carrier: packets refused, no free slot (resent later)
    // Engine request packets continuing no message the link has open (a MIDDLE or LAST with no
    // FIRST, or of another message): an engine bug, never sent, the QP's message fails by timeout
    uint64_t orphan_pkts = 0;
    // Retransmissions not sent: the engine no longer had the message or could not gather its
    // payload again (the QP flushed or reset, the memory gone); the retry timer runs on
    uint64_t regather_fails = 0;
    // Received payloads the engine had not read when the link needed their packet-ring slots
    // back (it holds few): copied into the engine's ring instead of read in place
    uint64_t rx_unpinned = 0;
  } roce;
};

// ---- The device
// ----------------------------------------------------------------------------------
class EmuDevice final : public mlx5::Device {
 public:
  // Opens side `side` (0 or 1) of `wire`. Fails if that side is already open, or when the mode
  // does not suit the wire (inline needs an in-process wire; both sides of an in-process wire
  // in the same non-sink mode).
  static Result<std::unique_ptr<EmuDevice>> open(std::shared_ptr<Wire> wire, int side,
                                                 const Options& opt);
  ~EmuDevice() override;

  const std::string& name() const noexcept override;
  const mlx5::DeviceCaps& caps() const noexcept override;
  Result<mlx5::MrInfo> reg_mr(void* addr, size_t len, uint32_t access) override;
  Status dereg_mr(const mlx5::MrInfo& mr) override;
  Result<uint32_t> create_window_mkey(uint32_t max_entries, bool remote_invalidate) override;
  Status destroy_mkey(uint32_t mkey) override;
  Result<uint32_t> alloc_pd() override;
  Status dealloc_pd(uint32_t pd) override;
  Result<uint32_t> create_window_mkey_in_pd(uint32_t max_entries, bool remote_invalidate,
                                            uint32_t pd) override;
  Result<uint32_t> alloc_mw(uint32_t pd) override;
  Status dealloc_mw(uint32_t rkey) override;
  Result<mlx5::QpDesc> create_qp(const mlx5::QpConfig& cfg) override;
  Status destroy_qp(mlx5::QpHandle qp) override;
  mlx5::ConnectInfo local_info(mlx5::QpHandle qp) override;
  Status connect(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote) override;
  Status modify_qp(mlx5::QpHandle qp, mlx5::QpState to) override;
  Result<mlx5::QpState> query_qp(mlx5::QpHandle qp) override;
  size_t poll_async_events(std::span<mlx5::AsyncEvent> out) override;

  Mode mode() const noexcept;
  Faults& faults() noexcept { return faults_; }
  const Checker& checker() const noexcept;
  Checker& checker() noexcept;
  EmuStats stats() const;

  // One device poll: reads doorbell records, executes WQEs, exchanges wire packets, writes
  // CQEs. Returns whether it did work. Threaded mode does this on its own thread; inline mode on
  // every doorbell; call it yourself to release delayed completions or to drive an inline device
  // on a shared-memory wire.
  bool progress();
  // Threaded mode: start/stop the device's own thread (open() starts it unless
  // Options::start_thread is false; the destructor stops it). A stopped device does not run and
  // burns no CPU; doorbells wait until start(). stop() on a device a DeviceThread serves takes
  // it off that thread; start() on it fails with kBusy.
  Status start();
  void stop();

  // Test helpers (control path): the mkey's state as the device sees it.
  struct MkeyView {
    bool exists = false;
    bool indirect = false;
    bool free = true;
    uint8_t tag = 0;
    uint8_t access = 0;  // mkc access bits
    uint32_t pd = 0;     // protection domain
    uint64_t start = 0;
    uint64_t len = 0;
    uint32_t n_entries = 0;
    uint32_t max_entries = 0;
  };
  MkeyView inspect_mkey(uint32_t mkey) const;
  // reg_mr in protection domain `pd`. Tests may name any PD number here (no alloc_pd needed):
  // an MR with a PD nothing else uses is "another PD's" memory, so a window whose KLM entry
  // names it fails translation (see doc/guides/emu.md, "Indirect mkeys").
  Result<mlx5::MrInfo> reg_mr_in_pd(void* addr, size_t len, uint32_t access, uint32_t pd) override;
  // Remote accesses this QP's responder refused (NAK remote access error), since creation.
  Result<uint64_t> refused_remote_accesses(mlx5::QpHandle qp) const override;

 private:
  friend class DeviceThread;
  explicit EmuDevice(std::unique_ptr<detail::Engine> eng);
  std::unique_ptr<detail::Engine> eng_;
  Faults faults_;
};

// Two devices joined by an in-process wire (side 0 = a, side 1 = b).
struct DevicePair {
  std::unique_ptr<EmuDevice> a, b;
};
Result<DevicePair> make_pair(const Options& opt_a, const Options& opt_b);
inline Result<DevicePair> make_pair(const Options& opt = Options{}) {
  return make_pair(opt, opt);
}

}  // namespace rdmx::emu
