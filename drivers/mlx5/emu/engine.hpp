// The emulated device's internals: mkey table, per-QP device state, and the engine that executes
// WQEs and speaks the wire. Everything here runs under Engine::mu_.
#pragma once

#include <algorithm>
#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/mlx5/prm/decode.hpp>

#include "wire.hpp"

namespace rdmx::emu::detail {

namespace prm = ::rdmx::mlx5::prm;
using mlx5::QpState;

// ---- mkeys -------------------------------------------------------------------------------------
struct Klm {
  uint32_t byte_count = 0;
  uint32_t mkey = 0;
  uint64_t addr = 0;
};

struct Mkey {
  enum class Kind : uint8_t { kNone, kDirect, kIndirect };
  Kind kind = Kind::kNone;
  uint8_t tag = 0;
  bool free = true;
  bool umr_en = false;
  bool en_rinval = false;
  bool mw = false;       // indirect: a type-2 memory window (alloc_mw), bound by bind WQEs
  bool mw_bind = false;  // direct: registered with MW_BIND (windows may be bound to it)
  uint8_t access = 0;    // mkc access bits (LR/LW/RR/RW/A)
  uint32_t pd = 0;       // protection domain (everything the device makes itself is in PD 0)
  uint8_t log_page_size = 0;
  uint32_t bound_qpn = prm::kMkeyQpnNone;
  uint64_t start = 0;  // IOVA of byte 0 (direct: the host VA)
  uint64_t len = 0;
  uint8_t* host = nullptr;       // direct: host memory of byte 0
  uint32_t max_entries = 0;      // indirect: asked at create
  uint32_t capacity = 0;         // indirect: translation slots (align4(max_entries))
  std::vector<Klm> klm;          // indirect: translation list (zero entries = padding)
  std::vector<uint64_t> prefix;  // indirect: offset of each entry's first byte
  uint64_t xlat_bytes = 0;       // indirect: bytes the list covers
  // Indirect, repeat block (an interleaved layout): klm[0] is the header {block bytes, op 0x400,
  // repeat count << 32 | entries}, klm[1..entries] the entries {stride << 16 | bytes, mkey,
  // address}; prefix[i] is entry i's offset inside a block. Byte o of the mkey is byte
  // o % block of repetition o / block: entry i's repetition r starts at address + r * stride.
  bool repeat = false;
  uint64_t block = 0;
};

// Errors translation reports (mapped to a syndrome by the caller).
enum class XlateErr : uint8_t { kOk, kBadKey, kState, kAccess, kBounds, kPd, kQp };
inline constexpr uint32_t kAnyPd = UINT32_MAX;   // walk(): no PD check
inline constexpr uint32_t kAnyQpn = UINT32_MAX;  // walk(): no QP-binding check (local use)

// ---- queues ------------------------------------------------------------------------------------
struct SendEntry {
  enum class St : uint8_t { kDone, kWait, kError };
  uint32_t counter = 0;  // free-running WQEBB index of the WQE (its wqe_index is the low 16)
  uint16_t n_wqebb = 1;
  uint8_t opcode = 0;
  bool signaled = false;
  bool remote = false;
  St st = St::kDone;
  uint8_t syndrome = 0;
  uint32_t byte_cnt = 0;
  uint64_t seq = 0;  // device execution sequence number on this SQ
  uint64_t ready_poll = 0;
  // remote messages
  uint32_t msn = 0;
  uint64_t len = 0;     // message length
  uint64_t tx_off = 0;  // bytes handed to the link
  bool tx_done = false;
  uint64_t rx_bytes = 0;  // read-response bytes received
  uint64_t sent_ns = 0;   // when it went to the link (threaded: retry_exceeded's starvation)
};

struct HotMkey {
  uint32_t index = 0;  // mkey index changed by the UMR
  uint16_t umr_wqe = 0;
  uint64_t seq = 0;      // execution sequence of the UMR
  bool covered = false;  // a CQE covering the UMR has been written...
  uint32_t cqe_pos = 0;  // ...at this CQ producer position
};

struct PendingRead {
  uint32_t msn = 0;
  uint32_t src_qpn = 0;
  uint32_t rkey = 0;
  uint64_t raddr = 0;
  uint64_t len = 0;
  uint64_t off = 0;
  uint8_t nak = 0;  // nonzero: a refused READ queued behind earlier ones; a NAK with this syndrome
  bool replay = false;  // a duplicate READ answered again (holds no new responder resource)
};

struct QpCtx {
  uint32_t qpn = 0;
  uint32_t pd = 0;                     // protection domain (QpConfig::pd)
  uint64_t remote_access_refused = 0;  // responder NAKs with a remote access error
  QpState state = QpState::kReset;
  Engine* eng = nullptr;
  mlx5::QpConfig cfg;
  // memory (owned)
  uint8_t* sq_buf = nullptr;
  uint8_t* rq_buf = nullptr;
  uint8_t* cq_buf = nullptr;
  uint8_t* db_page = nullptr;
  uint32_t sq_n = 0, rq_n = 0, rq_stride = 0, cq_n = 0;
  volatile uint32_t* sq_db = nullptr;
  volatile uint32_t* rq_db = nullptr;
  volatile uint32_t* cq_db = nullptr;
  volatile uint64_t* reg = nullptr;
  // device SQ
  uint32_t sq_ci = 0;  // next WQEBB to execute (free-running)
  uint32_t sq_pi = 0;  // producer per the doorbell record (free-running)
  uint16_t sq_db_seen = 0;
  bool sq_halt = false;  // stopped behind an erroring WQE
  uint64_t sq_seq = 0;   // WQEs executed
  std::deque<SendEntry> inflight;
  size_t tx_next = 0;  // first inflight entry with packets still to send
  uint32_t next_msn = 0;
  std::vector<HotMkey> hot;
  // device RQ
  uint32_t rq_ci = 0, rq_pi = 0;
  uint16_t rq_db_seen = 0;
  // responder
  uint32_t epsn = 0;         // next expected message
  uint32_t epsn0 = 0;        // the first message this incarnation expected (the peer's psn)
  bool recv_active = false;  // a multi-packet SEND is being received
  uint32_t recv_counter = 0;
  uint64_t recv_off = 0;
  bool recv_failed = false;
  std::deque<PendingRead> reads;
  bool discard_msn_valid = false;
  uint32_t discard_msn = 0;
  // CQ
  uint32_t cq_pi = 0;
  bool cq_overrun = false;
  // peer
  bool connected = false;
  uint32_t peer_qpn = 0;
  // Negotiated at connect (mlx5::negotiate over both sides' connect info): path MTU in bytes,
  // RDMA READs this QP keeps in flight as requester (ibv max_rd_atomic) and serves at once as
  // responder (max_dest_rd_atomic). 0 = the device's own value.
  uint32_t mtu = 0;
  uint32_t max_rd_atomic = 0;
  uint32_t max_dest_rd_atomic = 0;
  // RC timers applied at connect (QpConfig::timers, else Options::timers).
  mlx5::RcTimers tm;
  uint64_t ack_ns = 0;  // mlx5::ack_timeout_ns(tm.timeout); 0 = infinite
  // faults
  uint64_t fault_nth = 0;
  uint8_t fault_synd = 0;
  uint32_t cqe_delay = 0;
  bool corrupt_resp = false;
};

class Engine {
 public:
  Engine(std::shared_ptr<Wire> wire, int side, const Options& opt);
  ~Engine();

  // control path (public methods of EmuDevice forward here)
  Status attach();
  Result<mlx5::MrInfo> reg_mr(void* addr, size_t len, uint32_t access, uint32_t pd = 0);
  Status dereg_mr(const mlx5::MrInfo& mr);
  Result<uint32_t> create_window_mkey(uint32_t max_entries, bool remote_invalidate,
                                      uint32_t pd = 0);
  Result<uint32_t> alloc_pd();
  Status dealloc_pd(uint32_t pd);
  Result<uint32_t> alloc_mw(uint32_t pd);
  Status dealloc_mw(uint32_t rkey);
  Result<uint64_t> refused_remote_accesses(uint32_t qpn);
  Status destroy_mkey(uint32_t mkey);
  Result<mlx5::QpDesc> create_qp(const mlx5::QpConfig& cfg);
  Status destroy_qp(uint32_t qpn);
  mlx5::ConnectInfo local_info(uint32_t qpn);
  Status connect(uint32_t qpn, const mlx5::ConnectInfo& remote);
  Status modify_qp(uint32_t qpn, QpState to);
  Result<QpState> query_qp(uint32_t qpn);
  EmuDevice::MkeyView inspect_mkey(uint32_t key);
  EmuStats stats();
  Status start();
  void stop();

  // faults
  Status fault_nth(uint32_t qpn, uint64_t n, uint8_t synd);
  Status fault_qp_error(uint32_t qpn);
  void fault_unreachable(bool on) { unreachable_.store(on, std::memory_order_relaxed); }
  Status fault_delay(uint32_t qpn, uint32_t polls);
  void fault_fail_mkeys(uint32_t k);
  Status fault_corrupt(uint32_t qpn);

  // data path
  bool progress();  // one poll, under mu_
  // One poll; *pending |= this device waits for something no new doorbell brings (a response,
  // a read to stream, a multi-packet receive, a delayed completion, an RNR back-off).
  bool poll(bool* pending);
  static void doorbell_hook(void* ctx) noexcept;
  // The link's retransmission (device thread, under mu_): bytes [off, off + n) of the message
  // numbered `msn` of QP `qpn` gathered again from memory through its WQE, as the NIC's
  // requester re-reads the WQE of the PSN it goes back to. False when that message is no longer
  // outstanding or its gather fails now (nothing is sent; the retry timer runs on).
  bool regather(uint32_t qpn, uint32_t msn, uint64_t off, uint8_t* dst, uint32_t n) noexcept;

  const Options& opt() const noexcept { return opt_; }
  const std::string& name() const noexcept { return opt_.name; }
  const mlx5::DeviceCaps& caps() const noexcept { return caps_; }
  Checker& checker() noexcept { return checker_; }

 private:
  // --- control helpers
  QpCtx* find_qp(uint32_t qpn) noexcept;
  uint32_t alloc_mkey_index();
  void reset_qp_locked(QpCtx& q);
  void apply_timers(QpCtx& q) noexcept;
  void pump_inline() noexcept;
  bool fire_stalled() noexcept;  // inline: the link's timers of stalled requesters
  Result<uint32_t> peer_address(const mlx5::ConnectInfo& remote) const;

  // --- mkeys (mkey.cpp; walk and xlat in datapath.hpp)
  Mkey* lookup(uint32_t key) noexcept;
  // Walks [iova, iova+len) of `key` needing `access` (mkc bits); calls on(host_ptr, n) per piece.
  // `pd` (kAnyPd: unchecked) is the PD of the QP the access comes through: an mkey of another
  // PD fails with kPd.
  template <class F>
  XlateErr walk(uint32_t key, uint64_t iova, uint64_t len, uint8_t access, F&& on,
                uint32_t pd = kAnyPd, uint32_t qpn = kAnyQpn) noexcept;
  XlateErr check(uint32_t key, uint64_t iova, uint64_t len, uint8_t access, uint32_t pd = kAnyPd,
                 uint32_t qpn = kAnyQpn) noexcept;
  // The translation of bytes [off, off+len) of indirect mkey `m` (the range already inside its
  // registration), `depth` indirect levels below the mkey the request named.
  template <class F>
  XlateErr xlat(const Mkey& m, uint64_t off, uint64_t len, F& on, uint32_t depth) noexcept;

  // --- the WQE interpreter (wqe.cpp)
  bool execute(QpCtx& q) noexcept;  // the WQE at sq_ci; false = stop for now
  // Its steps: the form, the fence, then the operation (0 or a syndrome, reported).
  uint8_t check_wqe_form(QpCtx& q, const prm::DecodedWqe& w, prm::DecodeError de, uint32_t avail,
                         uint32_t* nbb) noexcept;
  bool fence_waits(const QpCtx& q, uint8_t fence) const noexcept;
  uint8_t check_fence(QpCtx& q, const prm::DecodedWqe& w) noexcept;
  uint8_t run_wqe(QpCtx& q, const prm::DecodedWqe& w, SendEntry& e) noexcept;
  uint8_t exec_local_inval(QpCtx& q, const prm::DecodedWqe& w) noexcept;
  // The control segment's and UMR control segment's reserved bits: 0 or a syndrome (reported).
  uint8_t check_reserved(QpCtx& q, const prm::DecodedWqe& w, const uint8_t* bb0) noexcept;
  uint8_t check_local_sges(QpCtx& q, const prm::DecodedWqe& w, uint8_t access,
                           uint64_t* total) noexcept;
  void check_hot_local(QpCtx& q, const prm::DecodedWqe& w, bool* fatal) noexcept;
  bool hot_live(QpCtx& q, HotMkey& h) noexcept;
  // An invalidating UMR or LOCAL_INVAL while an earlier WQE of this SQ that uses the mkey as a
  // local key has not completed (its fence did not wait for it): reported at the invalidate.
  void check_invalidate_fence(QpCtx& q, const prm::DecodedWqe& w, bool* fatal) noexcept;

  // --- UMR (umr.cpp)
  uint8_t exec_umr(QpCtx& q, const prm::DecodedWqe& w) noexcept;
  // The repeat-block header of a new translation (tmp[0] carries op 0x400): 0 or a syndrome.
  uint8_t umr_check_repeat(QpCtx& q, const prm::DecodedWqe& w, const Klm* tmp,
                           uint32_t n_oct) noexcept;
  uint8_t umr_check_ctrl(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m) noexcept;
  uint8_t umr_read_entries(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m,
                           const Klm*& src) noexcept;
  uint8_t umr_read_ptr_list(QpCtx& q, const prm::DecodedWqe& w, uint32_t n_oct, Klm* tmp) noexcept;
  uint8_t umr_check_scalars(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m) noexcept;
  // `e`: the bind's translation entry, null when the UMR writes none.
  uint8_t umr_check_bind(QpCtx& q, const prm::DecodedWqe& w, const Mkey& m, const Klm* e) noexcept;
  // The translation offset of a UMR in octowords (0 without the TRANSLATION_OFFSET flag): the
  // 16-bit field joined with the UMR control bytes 16-19 (the kernel's xlt_offset_47_16).
  uint64_t umr_xlt_offset(const QpCtx& q, const prm::DecodedWqe& w) const noexcept;
  uint8_t umr_commit(QpCtx& q, const prm::DecodedWqe& w, Mkey& m, const Klm* src) noexcept;
  uint8_t umr_set_entries(QpCtx& q, const prm::DecodedWqe& w, Mkey& m, const Klm* src, uint32_t off,
                          uint32_t n_oct) noexcept;

  // --- requester (requester.cpp): doorbells, transmit
  bool poll_sq(QpCtx& q) noexcept;
  bool poll_rq_doorbell(QpCtx& q) noexcept;
  [[gnu::cold, gnu::noinline]] void bad_doorbell(QpCtx& q, const char* ring, uint16_t v,
                                                 uint16_t pi, uint32_t ahead, uint32_t n,
                                                 const char* what) noexcept;
  void sink_sq(QpCtx& q) noexcept;
  bool transmit(QpCtx& q) noexcept;
  bool reads_at_limit(const QpCtx& q) const noexcept;
  uint8_t gather(QpCtx& q, const prm::DecodedWqe& w, uint64_t off, uint8_t* dst,
                 uint32_t n) noexcept;
  // A WQE whose link ran out of transport retries: counted, and when the device itself was not
  // polled for longer than the QP's timeout while it waited, logged as such.
  [[gnu::cold]] void retry_exceeded(const QpCtx& q, const SendEntry& e) noexcept;

  // --- responder (responder.cpp): requests in, READ responses out, responder errors
  void raise(uint32_t qpn, mlx5::AsyncEventKind k) noexcept;
  // A class C error at the responder (IBTA vol. 1 9.9.3; Linux rxe_resp.c rxe_responder: the
  // RC cases of RESPST_ERR_RKEY_VIOLATION, _LENGTH, _UNSUPPORTED_OPCODE, ... go through
  // do_class_ac_error and rxe_qp_error): the NAK leaves (the requester completes with the
  // matching error as before), then this QP goes to error and an async event is raised.
  // `consumed_receive`: a receive WQE completed in error first (that QP goes to error even
  // under Options::responder_keeps_rts).
  void responder_error(QpCtx& q, uint8_t nak_synd, bool consumed_receive = false) noexcept;
  bool rx_requests() noexcept;
  bool stream_reads() noexcept;
  // Returns false when the request could not be consumed yet (no response-ring space).
  bool handle_request(const WireSlot& s) noexcept;
  void req_nak(QpCtx& q, const PktHdr& h, PktOp op, uint8_t synd, bool advance) noexcept;
  bool remote_use_unordered(QpCtx& q, const PktHdr& h, uint32_t rkey) noexcept;
  void req_write(QpCtx& q, const WireSlot& s) noexcept;
  void req_send(QpCtx& q, const WireSlot& s) noexcept;
  void req_read(QpCtx& q, const PktHdr& h) noexcept;
  // Counts a remote access the responder of q refuses (NAK remote access error).
  void refused(QpCtx& q, XlateErr why) noexcept {
    ++q.remote_access_refused;
    ++st_.remote_access_naks;
    if (why == XlateErr::kPd) ++st_.pd_refusals;
    if (why == XlateErr::kQp) ++st_.qp_binding_refusals;
  }
  bool respond(uint32_t dst_qpn, uint32_t src_qpn, PktOp op, uint32_t msn, uint8_t synd) noexcept;
  bool rq_take(QpCtx& q, uint32_t* counter) noexcept;
  uint8_t scatter_recv(QpCtx& q, uint32_t counter, uint64_t off, const uint8_t* data, uint32_t len,
                       uint64_t msg_len) noexcept;

  // --- completer (completer.cpp): responses in, send completions, flushes, CQE writers
  bool rx_responses() noexcept;
  void handle_response(const WireSlot& s) noexcept;
  void read_response(QpCtx& q, SendEntry& e, const WireSlot& s) noexcept;
  void finish_entry(QpCtx& q, SendEntry& e, uint8_t synd) noexcept;
  bool emit_send(QpCtx& q) noexcept;
  void enter_error(QpCtx& q) noexcept;
  bool flush_new(QpCtx& q) noexcept;
  bool write_cqe(QpCtx& q, const prm::CqeFields& f) noexcept;
  void send_cqe(QpCtx& q, const SendEntry& e, uint8_t synd) noexcept;
  void recv_cqe(QpCtx& q, uint32_t counter, uint8_t cqe_op, uint32_t bytes, uint32_t imm,
                bool solicited, uint8_t synd) noexcept;

  // --- the poll (datapath.cpp)
  // The longest poll gap that ended after `since` (ns; 0 when none was recorded).
  uint64_t gap_since(uint64_t since) const noexcept;
  void note_poll_time() noexcept;
  void report(QpCtx* q, uint16_t wqe_index, Rule r, std::string text);
  uint64_t now_ns() const noexcept;
  // The port's MTU: the profile's active MTU, at most the wire's packet size.
  uint32_t path_mtu() const noexcept {
    return std::min({kWireMtu, prof_->active_mtu, wire_->mtu_cap()});
  }
  void stated(mlx5::ConnectInfo& ci) const noexcept;
  // A QP's path MTU: negotiated at connect (the smaller of both ports'), else the port's.
  uint32_t path_mtu(const QpCtx& q) const noexcept {
    return q.mtu ? std::min(q.mtu, path_mtu()) : path_mtu();
  }

  friend class rdmx::emu::EmuDevice;
  friend class rdmx::emu::Faults;
  friend class rdmx::emu::DeviceThread;
  friend class Runner;

  std::shared_ptr<Wire> wire_;
  int side_;
  Options opt_;
  const Profile* prof_ = nullptr;
  mlx5::DeviceCaps caps_;
  Checker checker_;
  mutable std::mutex mu_;
  bool attached_ = false;

  std::vector<Mkey> mkeys_;  // index -> mkey (0 and 1 reserved)
  std::vector<uint32_t> free_idx_;
  uint8_t next_variant_ = 1;
  std::vector<uint32_t> pds_;  // allocated PDs (alloc_pd), besides the default PD 0
  uint32_t next_pd_ = 0x100;   // above the small numbers tests pass to reg_mr_in_pd
  uint32_t fail_mkeys_ = 0;
  std::atomic<bool> unreachable_{false};

  std::map<uint32_t, std::unique_ptr<QpCtx>> qps_;
  uint32_t next_qpn_ = 0x100;
  // The first message number of each QP incarnation (create, and every RESET): random 24 bits,
  // so that a late message of an earlier incarnation does not fit the next one's numbering.
  // The link maps messages to PSNs it draws itself (RoceLink::sq_psn).
  std::mt19937 msn_rng_{std::random_device{}()};
  uint32_t first_msn() noexcept { return static_cast<uint32_t>(msn_rng_()) & 0xffffffu; }

  EmuStats st_;
  uint64_t poll_count_ = 0;
  // Asynchronous events not yet polled (the newest kMaxEvents).
  static constexpr size_t kMaxEvents = 256;
  std::deque<mlx5::AsyncEvent> events_;
  // Threaded mode: the last poll's time and the recent gaps (>= 1 ms) between two polls.
  uint64_t last_poll_ns_ = 0;
  struct Gap {
    uint64_t end_ns = 0, len_ns = 0;
  };
  std::array<Gap, 8> gaps_{};
  uint32_t gap_next_ = 0;
  size_t poll_events(std::span<mlx5::AsyncEvent> out);
  prm::DecodedWqe dw_;   // scratch decode buffer (one per device)
  prm::DecodedWqe dw2_;  // second scratch (transmit / response paths)
  // regather(): the last message's decoded WQE; inflight_gen_ counts entries leaving an SQ.
  struct RegatherCache {
    uint64_t gen = ~uint64_t{0};
    uint32_t qpn = 0, msn = 0;
    uint64_t len = 0;
    QpCtx* q = nullptr;
    prm::DecodedWqe w;
  } rg_;
  uint64_t inflight_gen_ = 0;
  // A UMR's new translation entries, read and checked before the commit (umr.cpp): room for
  // the largest any window takes (create_window_mkey: capacity <= align4(max_klm_list)), so
  // no UMR allocates.
  std::vector<Klm> umr_xlt_ = std::vector<Klm>(prm::align4(opt_.max_klm_list));

  bool poll_locked(bool* pending);

  // threaded mode: the thread that runs this device (bind_mu() guards both)
  std::unique_ptr<Runner> own_;  // the device's own thread (EmuDevice::start)
  Runner* runner_ = nullptr;     // own_ or a DeviceThread's runner; nullptr: none
};

// ---- device threads (thread.cpp) ---------------------------------------------------------------
// Guards Engine::own_/runner_ and the binding of engines to runners (control path only).
std::mutex& bind_mu() noexcept;

class Runner {
 public:
  Runner(std::vector<Engine*> engs, const ThreadOptions& opt);
  ~Runner();
  // Starts the thread; when opt.cpu >= 0 the thread pins itself before its first poll and the
  // pinning result comes back here (on failure the thread exits and this returns the error).
  Status run();
  void stop();  // joins
  // Takes `e` off the list; when the thread runs, waits for the current round to end.
  void remove(Engine* e);
  bool running() const noexcept { return run_.load(std::memory_order_acquire); }
  size_t size();
  std::vector<Engine*> engines();
  const ThreadOptions& opt() const noexcept { return opt_; }
  DeviceThreadStats stats() const noexcept;
  std::thread::native_handle_type native_handle() { return thr_.native_handle(); }

 private:
  void loop();
  static void bump(std::atomic<uint64_t>& c) noexcept {
    c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
  }

  ThreadOptions opt_;
  std::mutex list_mu_;  // held by the thread for one round; control path edits the list
  std::vector<Engine*> engs_;
  std::atomic<uint32_t> waiters_{0};  // control-path threads waiting for list_mu_
  std::thread thr_;
  std::atomic<bool> run_{false};
  std::atomic<uint64_t> rounds_{0}, busy_{0}, pending_{0}, sleeps_{0};
};

}  // namespace rdmx::emu::detail
