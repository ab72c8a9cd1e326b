// Control path of the emulated device: open, memory registration, windows, QPs, state
// transitions, the device thread, faults and the checker store.
#include <algorithm>
#include <bit>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "engine.hpp"
#include "roce_link.hpp"

namespace rdmx::emu {

using detail::Engine;
using detail::Mkey;
using detail::QpCtx;

const char* mode_name(Mode m) noexcept {
  switch (m) {
    case Mode::kInline:
      return "inline";
    case Mode::kThreaded:
      return "threaded";
    case Mode::kSink:
      return "sink";
  }
  return "unknown";
}

const char* rule_name(Rule r) noexcept {
  switch (r) {
    case Rule::kMissingFenceAfterUmr:
      return "missing-fence-after-umr";
    case Rule::kRemoteUseBeforeOrdered:
      return "remote-use-before-umr-ordered";
    case Rule::kUmrNotFree:
      return "umr-on-non-free-mkey";
    case Rule::kUmrFree:
      return "umr-on-free-mkey";
    case Rule::kTooManyEntries:
      return "too-many-translation-entries";
    case Rule::kDoorbellBackwards:
      return "doorbell-backwards";
    case Rule::kDoorbellPastWritten:
      return "doorbell-past-written";
    case Rule::kCqOverrun:
      return "cq-overrun";
    case Rule::kMalformedWqe:
      return "malformed-wqe";
    case Rule::kUnknownMaskBits:
      return "unknown-mkey-mask-bits";
    case Rule::kKlmPtrAlign:
      return "klm-pointer-alignment";
    case Rule::kMwBindRefused:
      return "mw-bind-refused";
    case Rule::kWqeTooLarge:
      return "wqe-larger-than-max-wqe-sz-sq";
    case Rule::kUmrMaskForbidden:
      return "umr-mask-forbidden-by-caps";
    case Rule::kKlmListNotPadded:
      return "klm-list-not-padded";
    case Rule::kReservedField:
      return "reserved-field-set";
    case Rule::kXltOffsetUnaligned:
      return "translation-offset-unaligned";
    case Rule::kRepeatStride:
      return "repeat-stride-below-bytes";
    case Rule::kRepeatHeaderNotFirst:
      return "repeat-header-not-first";
    case Rule::kWqeQpnMismatch:
      return "wqe-qpn-mismatch";
    case Rule::kMissingFenceBeforeInvalidate:
      return "missing-fence-before-invalidate";
    case Rule::kCount:
      break;
  }
  return "unknown";
}

// ---- Checker ----------------------------------------------------------------------------------
uint64_t Checker::count(Rule r) const noexcept {
  std::lock_guard<std::mutex> g(mu_);
  return r < Rule::kCount ? counts_[static_cast<size_t>(r)] : 0;
}
uint64_t Checker::total() const noexcept {
  std::lock_guard<std::mutex> g(mu_);
  uint64_t t = 0;
  for (uint64_t c : counts_) t += c;
  return t;
}
std::vector<Report> Checker::reports() const {
  std::lock_guard<std::mutex> g(mu_);
  return reports_;
}
void Checker::clear() noexcept {
  std::lock_guard<std::mutex> g(mu_);
  counts_.fill(0);
  reports_.clear();
}
std::string Checker::dump() const {
  std::lock_guard<std::mutex> g(mu_);
  std::string s;
  char buf[96];
  for (const Report& r : reports_) {
    std::snprintf(buf, sizeof(buf), "qp 0x%x wqe 0x%04x %s: ", r.qpn, r.wqe_index,
                  rule_name(r.rule));
    s += buf;
    s += r.text;
    s += '\n';
  }
  return s;
}
void Checker::add(bool keep, uint32_t qpn, uint16_t wqe_index, Rule r, std::string text) {
  std::lock_guard<std::mutex> g(mu_);
  ++counts_[static_cast<size_t>(r)];
  if (keep && reports_.size() < kMaxReports)
    reports_.push_back(Report{qpn, wqe_index, r, std::move(text)});
}

// ---- Faults -----------------------------------------------------------------------------------
Status Faults::error_on_nth_wqe(mlx5::QpHandle qp, uint64_t n, uint8_t syndrome) {
  return eng_->fault_nth(qp, n, syndrome);
}
Status Faults::qp_to_error(mlx5::QpHandle qp) {
  return eng_->fault_qp_error(qp);
}
void Faults::set_peer_unreachable(bool on) {
  eng_->fault_unreachable(on);
}
Status Faults::delay_completions(mlx5::QpHandle qp, uint32_t polls) {
  return eng_->fault_delay(qp, polls);
}
void Faults::fail_mkey_creations(uint32_t k) {
  eng_->fault_fail_mkeys(k);
}
Status Faults::corrupt_next_response(mlx5::QpHandle qp) {
  return eng_->fault_corrupt(qp);
}

namespace detail {

namespace {

bool is_pow2(uint32_t v) {
  return v && !(v & (v - 1));
}

uint8_t* alloc_zeroed(size_t bytes) {
  const size_t sz = (bytes + 4095) & ~size_t{4095};
  void* p = std::aligned_alloc(4096, sz);
  if (p) std::memset(p, 0, sz);
  return static_cast<uint8_t*>(p);
}

Error no_qp(uint32_t qpn) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "emu: no QP 0x%x", qpn);
  return make_error(Errc::kInvalidArgument, buf);
}

}  // namespace

Engine::Engine(std::shared_ptr<Wire> wire, int side, const Options& opt)
    : wire_(std::move(wire)), side_(side), opt_(opt) {
  prof_ = profile_by_name(resolve_profile_name(opt.profile));
  if (!prof_) prof_ = &profiles()[0];  // open() refuses unknown names before this
  caps_.max_klm_list = std::min(opt.max_klm_list, prof_->max_klm_list);
  // What dv computes from the same cap (prm::max_inline_klm_for), and never above the option.
  caps_.max_inline_klm =
      std::min(opt.max_inline_klm, mlx5::prm::max_inline_klm_for(prof_->max_wqe_sz_sq));
  caps_.max_sq_wqebbs = 1u << 15;  // the 16-bit doorbell counter must stay unambiguous
  caps_.max_cq_cqes = 1u << 22;
  caps_.umr_fence = prof_->umr_fence;  // raw HCA cap: 0 strong, 1 small, 2 none
  caps_.umr_modify_atomic_disabled = prof_->umr_modify_atomic_disabled;
  caps_.max_wqe_sz_sq = prof_->max_wqe_sz_sq;
  caps_.mkey_update_tag = true;
  caps_.remote_invalidate = true;
  caps_.memory_windows = true;  // every ConnectX since ConnectX-4 (imaicl; doc/guides/emu.md)
  caps_.numa_node = opt.numa_node;
  mkeys_.resize(2);  // indices 0 and 1 reserved: MLX5_INVALID_LKEY (0x100) never resolves
}

Engine::~Engine() {
  stop();
  if (attached_) {
    if (RoceLink* l = wire_->link(side_)) l->set_engine(nullptr);
    wire_->detach(side_);
  }
  for (auto& [qpn, q] : qps_) {
    std::free(q->sq_buf);
    std::free(q->rq_buf);
    std::free(q->cq_buf);
    std::free(q->db_page);
  }
}

Status Engine::attach() {
  Status s = wire_->attach(side_, this, opt_.mode);
  if (!s.ok()) return s;
  attached_ = true;
  if (RoceLink* l = wire_->link(side_)) {
    l->set_stalled_only(opt_.mode != Mode::kThreaded);
    l->set_engine(opt_.mode == Mode::kSink ? nullptr : this);
  }
  return Status{};
}

uint64_t Engine::now_ns() const noexcept {
  return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                   std::chrono::steady_clock::now().time_since_epoch())
                                   .count());
}

void Engine::report(QpCtx* q, uint16_t wqe_index, Rule r, std::string text) {
  checker_.add(opt_.prm_checker, q ? q->qpn : 0, wqe_index, r, std::move(text));
}

QpCtx* Engine::find_qp(uint32_t qpn) noexcept {
  auto it = qps_.find(qpn);
  return it == qps_.end() ? nullptr : it->second.get();
}

uint32_t Engine::alloc_mkey_index() {
  if (!free_idx_.empty()) {
    const uint32_t i = free_idx_.back();
    free_idx_.pop_back();
    return i;
  }
  if (mkeys_.size() >= (1u << 24)) return 0;
  // Index 4 is never used: its key 0x400 would read as a repeat block's op (0x400) in the
  // first translation entry, so no KLM can name it (the device tells the two apart by it).
  if (mkeys_.size() == 4) mkeys_.emplace_back();
  mkeys_.emplace_back();
  return static_cast<uint32_t>(mkeys_.size() - 1);
}

Result<mlx5::MrInfo> Engine::reg_mr(void* addr, size_t len, uint32_t access, uint32_t pd) {
  std::lock_guard<std::mutex> g(mu_);
  if (fail_mkeys_) {
    --fail_mkeys_;
    return make_error(Errc::kDeviceError, "emu: reg_mr failed (injected fault)");
  }
  if (!addr || len == 0) return make_error(Errc::kInvalidArgument, "emu: reg_mr of an empty range");
  if (access & ~uint32_t{mlx5::kAccessAll | mlx5::kAccessMwBind})
    return make_error(Errc::kInvalidArgument, "emu: reg_mr: unknown access bits");
  const uint32_t idx = alloc_mkey_index();
  if (!idx) return make_error(Errc::kNoMemory, "emu: mkey table full");
  Mkey& m = mkeys_[idx];
  m = Mkey{};
  m.kind = Mkey::Kind::kDirect;
  m.tag = next_variant_++;
  m.free = false;
  m.access = static_cast<uint8_t>(MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ |
                                  mlx5::mkc_access_bits(access));
  m.mw_bind = (access & mlx5::kAccessMwBind) != 0;
  m.pd = pd;
  m.start = reinterpret_cast<uint64_t>(addr);
  m.len = len;
  m.host = static_cast<uint8_t*>(addr);
  mlx5::MrInfo mr;
  mr.addr = m.start;
  mr.length = len;
  mr.lkey = mr.rkey = (idx << 8) | m.tag;
  mr.access = access;
  return mr;
}

Status Engine::dereg_mr(const mlx5::MrInfo& mr) {
  std::lock_guard<std::mutex> g(mu_);
  Mkey* m = lookup(mr.lkey);
  if (!m || m->kind != Mkey::Kind::kDirect)
    return make_error(Errc::kInvalidArgument, "emu: dereg_mr: not a registered MR key");
  const uint32_t idx = mr.lkey >> 8;
  for (const Mkey& w : mkeys_) {
    if (w.kind != Mkey::Kind::kIndirect || w.free) continue;
    for (const detail::Klm& k : w.klm)
      if (k.byte_count && (k.mkey >> 8) == idx)
        return make_error(Errc::kBusy, "emu: dereg_mr: the MR is mapped by a valid window");
  }
  *m = Mkey{};
  free_idx_.push_back(idx);
  return Status{};
}

Result<uint32_t> Engine::alloc_pd() {
  std::lock_guard<std::mutex> g(mu_);
  pds_.push_back(next_pd_++);
  return pds_.back();
}

Status Engine::dealloc_pd(uint32_t pd) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = std::find(pds_.begin(), pds_.end(), pd);
  if (it == pds_.end())
    return make_error(Errc::kInvalidArgument,
                      "emu: dealloc_pd: PD " + std::to_string(pd) + " was not allocated");
  // ibv_dealloc_pd(3): EBUSY while an MR, mkey or QP of the PD exists.
  for (const Mkey& m : mkeys_)
    if (m.kind != Mkey::Kind::kNone && m.pd == pd)
      return make_error(Errc::kBusy,
                        "emu: dealloc_pd: PD " + std::to_string(pd) + " still has mkeys");
  for (const auto& [qpn, q] : qps_)
    if (q->pd == pd)
      return make_error(Errc::kBusy,
                        "emu: dealloc_pd: PD " + std::to_string(pd) + " still has QPs");
  pds_.erase(it);
  return {};
}

Result<uint64_t> Engine::refused_remote_accesses(uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return make_error(Errc::kInvalidArgument, "emu: no QP " + std::to_string(qpn));
  return q->remote_access_refused;
}

Result<uint32_t> Engine::create_window_mkey(uint32_t max_entries, bool remote_invalidate,
                                            uint32_t pd) {
  std::lock_guard<std::mutex> g(mu_);
  if (fail_mkeys_) {
    --fail_mkeys_;
    return make_error(Errc::kDeviceError, "emu: CREATE_MKEY failed (injected fault)");
  }
  if (max_entries == 0 || max_entries > opt_.max_klm_list)
    return make_error(Errc::kInvalidArgument, "emu: window max_entries " +
                                                  std::to_string(max_entries) + " outside 1.." +
                                                  std::to_string(opt_.max_klm_list));
  const uint32_t idx = alloc_mkey_index();
  if (!idx) return make_error(Errc::kNoMemory, "emu: mkey table full");
  Mkey& m = mkeys_[idx];
  m = Mkey{};
  m.kind = Mkey::Kind::kIndirect;
  m.tag = 0;
  m.free = true;
  m.umr_en = true;
  m.en_rinval = remote_invalidate;
  m.pd = pd;
  m.access = MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ;  // lr=1, as rdma-core creates it
  m.max_entries = max_entries;
  m.capacity = prm::align4(max_entries);
  return idx << 8;
}

// A type-2 memory window is an indirect mkey of one translation entry that only bind WQEs
// (rdma-core set_bind_wr: CHECK_FREE, the QPN mask bit) may change, with remote invalidation
// (the kernel's mlx5_ib_alloc_mw creates it with en_rinval and free). Allocated free.
Result<uint32_t> Engine::alloc_mw(uint32_t pd) {
  auto k = create_window_mkey(1, true, pd);
  if (!k) return k;
  std::lock_guard<std::mutex> g(mu_);
  mkeys_[k.value() >> 8].mw = true;
  return k;
}

Status Engine::dealloc_mw(uint32_t rkey) {
  {
    std::lock_guard<std::mutex> g(mu_);
    const uint32_t idx = rkey >> 8;
    if (idx < 2 || idx >= mkeys_.size() || !mkeys_[idx].mw)
      return make_error(Errc::kInvalidArgument, "emu: dealloc_mw: not a memory window");
    mkeys_[idx].free = true;  // ibv_dealloc_mw of a bound window invalidates it
    mkeys_[idx].mw = false;
  }
  return destroy_mkey(rkey);
}

Status Engine::destroy_mkey(uint32_t key) {
  std::lock_guard<std::mutex> g(mu_);
  const uint32_t idx = key >> 8;
  if (idx < 2 || idx >= mkeys_.size() || mkeys_[idx].kind != Mkey::Kind::kIndirect)
    return make_error(Errc::kInvalidArgument, "emu: destroy_mkey: not a window mkey");
  if (mkeys_[idx].mw)
    return make_error(Errc::kInvalidArgument, "emu: destroy_mkey: a memory window (dealloc_mw)");
  Mkey& m = mkeys_[idx];
  if (!m.free) return make_error(Errc::kBusy, "emu: destroy_mkey: the window is mapped (valid)");
  for (auto& [qpn, q] : qps_)
    for (HotMkey& h : q->hot)
      if (h.index == idx && hot_live(*q, h))
        return make_error(Errc::kBusy, "emu: destroy_mkey: a UMR on it is still in flight");
  m = Mkey{};
  free_idx_.push_back(idx);
  return Status{};
}

Result<mlx5::QpDesc> Engine::create_qp(const mlx5::QpConfig& cfg) {
  if (!is_pow2(cfg.sq_wqebbs) || cfg.sq_wqebbs > caps_.max_sq_wqebbs)
    return make_error(Errc::kInvalidArgument, "emu: sq_wqebbs must be a power of two <= 32768");
  if (cfg.rq_wqes && (!is_pow2(cfg.rq_wqes) || cfg.rq_wqes > (1u << 15)))
    return make_error(Errc::kInvalidArgument, "emu: rq_wqes must be 0 or a power of two <= 32768");
  if (!is_pow2(cfg.cq_cqes) || cfg.cq_cqes > caps_.max_cq_cqes)
    return make_error(Errc::kInvalidArgument, "emu: cq_cqes must be a power of two <= 2^22");
  if (cfg.rq_wqes && (cfg.rq_sges == 0 || cfg.rq_sges > 64))
    return make_error(Errc::kInvalidArgument, "emu: rq_sges must be 1..64");
  if (cfg.timers)
    if (Status t = mlx5::check_rc_timers(*cfg.timers); !t.ok())
      return make_error(t.error().code, "emu: create_qp: " + t.error().message);
  if (cfg.pd != 0) {
    std::lock_guard<std::mutex> g(mu_);
    if (std::find(pds_.begin(), pds_.end(), cfg.pd) == pds_.end())
      return make_error(Errc::kInvalidArgument,
                        "emu: create_qp: PD " + std::to_string(cfg.pd) + " was not allocated");
  }
  auto q = std::make_unique<QpCtx>();
  q->eng = this;
  q->cfg = cfg;
  q->pd = cfg.pd;
  q->sq_n = cfg.sq_wqebbs;
  q->rq_n = cfg.rq_wqes;
  uint32_t stride = 16;
  while (stride < cfg.rq_sges * 16u) stride <<= 1;
  q->rq_stride = cfg.rq_wqes ? stride : 0;
  q->cq_n = cfg.cq_cqes;
  q->sq_buf = alloc_zeroed(size_t{q->sq_n} * 64);
  q->rq_buf = q->rq_n ? alloc_zeroed(size_t{q->rq_n} * q->rq_stride) : nullptr;
  q->cq_buf = alloc_zeroed(size_t{q->cq_n} * 64);
  q->db_page = alloc_zeroed(4096);
  if (!q->sq_buf || !q->cq_buf || !q->db_page || (q->rq_n && !q->rq_buf)) {
    std::free(q->sq_buf);
    std::free(q->rq_buf);
    std::free(q->cq_buf);
    std::free(q->db_page);
    return make_error(Errc::kNoMemory, "emu: cannot allocate QP rings");
  }
  // Every CQE starts invalid (rdma-core mlx5 CQ init): software never reads garbage.
  for (uint32_t i = 0; i < q->cq_n; ++i)
    reinterpret_cast<mlx5_cqe64*>(q->cq_buf)[i].op_own = MLX5_CQE_INVALID << 4;
  // Doorbell page: [0] RQ record, [4] SQ record (mlx5 layout: MLX5_RCV_DBR, MLX5_SND_DBR),
  // [64] CQ record, [128] the 8-byte doorbell register.
  q->rq_db = reinterpret_cast<volatile uint32_t*>(q->db_page + 0);
  q->sq_db = reinterpret_cast<volatile uint32_t*>(q->db_page + 4);
  q->cq_db = reinterpret_cast<volatile uint32_t*>(q->db_page + 64);
  q->reg = reinterpret_cast<volatile uint64_t*>(q->db_page + 128);

  std::lock_guard<std::mutex> g(mu_);
  q->next_msn = first_msn();  // under mu_: the generator is the engine's
  q->qpn = next_qpn_++;
  mlx5::QpDesc d;
  d.qpn = q->qpn;
  d.sq.buf = q->sq_buf;
  d.sq.wqe_cnt = q->sq_n;
  d.sq.dbrec = q->sq_db;
  d.sq.reg = q->reg;
  d.sq.bf_size = 0;
  d.rq.buf = q->rq_buf;
  d.rq.wqe_cnt = q->rq_n;
  d.rq.stride = q->rq_stride;
  d.rq.dbrec = q->rq_db;
  d.cq.buf = q->cq_buf;
  d.cq.cqe_cnt = q->cq_n;
  d.cq.dbrec = q->cq_db;
  d.cq.cqn = q->qpn;
  if (opt_.mode != Mode::kThreaded) {
    d.sq.hook = mlx5::DoorbellHook{&Engine::doorbell_hook, q.get()};
    d.rq.hook = mlx5::DoorbellHook{&Engine::doorbell_hook, q.get()};
  }
  qps_.emplace(q->qpn, std::move(q));
  return d;
}

Status Engine::destroy_qp(uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  auto it = qps_.find(qpn);
  if (it == qps_.end()) return no_qp(qpn);
  QpCtx& q = *it->second;
  std::free(q.sq_buf);
  std::free(q.rq_buf);
  std::free(q.cq_buf);
  std::free(q.db_page);
  wire_->link(side_)->forget(qpn);
  qps_.erase(it);
  ++inflight_gen_;
  return Status{};
}

mlx5::ConnectInfo Engine::local_info(uint32_t qpn) {
  mlx5::ConnectInfo ci;
  ci.qpn = qpn;
  {
    std::lock_guard<std::mutex> g(mu_);
    QpCtx* q = find_qp(qpn);
    // The initial PSN of the QP's send queue, drawn by its link at random for each incarnation
    // (the peer's expected PSN; ibv_modify_qp sq_psn / rq_psn).
    ci.psn = q ? wire_->link(side_)->sq_psn(qpn) : 0;
  }
  ci.lid = static_cast<uint16_t>(side_ + 1);
  ci.port_token = wire_->token() ^ static_cast<uint64_t>(side_);
  if (wire_->roce()) {  // RoCE v2: the GID is the IPv4-mapped address (::ffff:a.b.c.d)
    ci.lid = 0;
    ci.port_token = 0;
    ci.gid[10] = ci.gid[11] = 0xFF;
    const uint32_t ip = wire_->link(side_)->local_ip();
    for (int i = 0; i < 4; ++i) ci.gid[12 + i] = static_cast<uint8_t>(ip >> (24 - 8 * i));
  }
  stated(ci);
  return ci;
}

// What this device states for the negotiation: port 1, its port MTU, the profile's READ depth
// both ways (max_qp_rd_atom; emu has no separate max_qp_init_rd_atom).
void Engine::stated(mlx5::ConnectInfo& ci) const noexcept {
  ci.port = 1;
  ci.path_mtu = mlx5::mtu_code(path_mtu());
  ci.initiator_depth = ci.responder_resources =
      static_cast<uint8_t>(std::min<uint32_t>(prof_->max_qp_rd_atom, 255));
}

// The peer's link address: on a RoCE wire its GID (IPv4-mapped, and its port's MTU must be
// ours), on the other wires the other side of this wire (by its port token; nominal address).
Result<uint32_t> Engine::peer_address(const mlx5::ConnectInfo& remote) const {
  if (!wire_->roce()) {
    if (remote.port_token != (wire_->token() ^ static_cast<uint64_t>(1 - side_)))
      return make_error(Errc::kInvalidArgument,
                        "emu: connect: the remote QP is not on the other side of this wire");
    return Wire::ring_ip(1 - side_);
  }
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF};
  if (std::memcmp(remote.gid, kV4Mapped, 12) != 0)
    return make_error(Errc::kInvalidArgument,
                      "emu: connect: the remote GID is not an IPv4-mapped address (RoCE v2 "
                      "over IPv4 needs ::ffff:A.B.C.D)");
  if (remote.path_mtu && (128u << remote.path_mtu) != path_mtu())
    return make_error(Errc::kInvalidArgument, "emu: connect: the peer's path MTU " +
                                                  std::to_string(128u << remote.path_mtu) +
                                                  " differs from ours (" +
                                                  std::to_string(path_mtu()) + ")");
  return (uint32_t{remote.gid[12]} << 24) | (uint32_t{remote.gid[13]} << 16) |
         (uint32_t{remote.gid[14]} << 8) | remote.gid[15];
}

Status Engine::connect(uint32_t qpn, const mlx5::ConnectInfo& remote) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  auto peer_ip = peer_address(remote);
  if (!peer_ip) return std::move(peer_ip).error();
  const uint32_t msn = q->next_msn;
  reset_qp_locked(*q);
  // A reconnect without RESET (endpoint::recover_cores) starts clean as one through RESET:
  // what the old connection queued between engine and link is not carried by the new one.
  wire_->rings(side_).cancel(qpn);
  q->next_msn = msn;
  // The engine numbers the messages it is handed from the peer's PSN on (any start does; the
  // link translates PSNs and the wire's MSN).
  q->epsn = q->epsn0 = remote.psn;
  q->peer_qpn = remote.qpn;
  mlx5::ConnectInfo mine;
  stated(mine);
  const mlx5::Negotiated n = mlx5::negotiate(mine, remote);
  if (!wire_->roce()) q->mtu = mlx5::mtu_bytes(n.path_mtu);
  // The READ depths (the link remembers the READs a responder serves, for their responses and
  // duplicates: at most what it states, the profile's max_qp_rd_atom).
  q->max_rd_atomic = n.max_rd_atomic;
  q->max_dest_rd_atomic = n.max_dest_rd_atomic;
  apply_timers(*q);
  q->connected = true;
  q->state = QpState::kRts;
  wire_->link(side_)->connect(qpn, remote.qpn, peer_ip.value(), path_mtu(*q), remote.psn, q->epsn,
                              q->tm, uint64_t{opt_.rnr_timer_us} * 1000);
  return Status{};
}

// RTR/RTS: the QP's own timers, else the device's (ibv_modify_qp(3) timeout, retry_cnt,
// rnr_retry, min_rnr_timer).
void Engine::apply_timers(QpCtx& q) noexcept {
  q.tm = q.cfg.timers.value_or(opt_.timers);
  q.ack_ns = mlx5::ack_timeout_ns(q.tm.timeout);
}

void Engine::reset_qp_locked(QpCtx& q) {
  // Back to index 0 on both sides: the CPU side's QueuePair::reset() matches (rdma-core also
  // clears the doorbell records on the transition to RESET).
  __atomic_store_n(q.sq_db, 0u, __ATOMIC_RELEASE);
  __atomic_store_n(q.rq_db, 0u, __ATOMIC_RELEASE);
  q.sq_ci = q.sq_pi = 0;
  q.sq_db_seen = 0;
  q.sq_halt = false;
  q.inflight.clear();
  ++inflight_gen_;
  q.tx_next = 0;
  q.next_msn = first_msn();
  q.hot.clear();
  q.rq_ci = q.rq_pi = 0;
  q.rq_db_seen = 0;
  q.epsn = q.epsn0 = 0;
  q.recv_active = false;
  q.recv_failed = false;
  q.reads.clear();
  q.discard_msn_valid = false;
  q.connected = false;
  q.state = QpState::kReset;
}

Status Engine::modify_qp(uint32_t qpn, QpState to) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  const QpState from = q->state;
  bool ok = false;
  switch (to) {
    case QpState::kReset:
      ok = true;
      break;
    case QpState::kInit:
      ok = from == QpState::kReset || from == QpState::kInit;
      break;
    case QpState::kRtr:
      ok = from == QpState::kInit;
      break;
    case QpState::kRts:
      ok = from == QpState::kRtr || from == QpState::kRts;
      break;
    case QpState::kError:
      ok = true;
      break;
  }
  if (!ok)
    return make_error(Errc::kState, std::string("emu: modify_qp ") + mlx5::qp_state_name(from) +
                                        " -> " + mlx5::qp_state_name(to) + " not allowed");
  if (to == QpState::kReset) {
    const bool keep_peer = q->connected;
    const uint32_t peer = q->peer_qpn;
    reset_qp_locked(*q);
    // The old incarnation's transport goes with it (a QP in RESET sends nothing: no
    // retransmission of what the old one had in flight may reach a new peer at the same address
    // and QPN), and the next connect draws a new initial PSN.
    wire_->link(side_)->forget(qpn);
    wire_->rings(side_).cancel(qpn);
    // The peer stays remembered so that reset -> init -> rtr -> rts reconnects to it.
    q->connected = keep_peer;
    q->peer_qpn = peer;
  } else if (to == QpState::kError) {
    if (from != QpState::kError) enter_error(*q);
    // A QP in error sends nothing more (its work requests flush): its transport stops too.
    wire_->link(side_)->stop(qpn);
  } else {
    q->state = to;
  }
  return Status{};
}

Result<QpState> Engine::query_qp(uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  return q->state;
}

EmuDevice::MkeyView Engine::inspect_mkey(uint32_t key) {
  std::lock_guard<std::mutex> g(mu_);
  EmuDevice::MkeyView v;
  const uint32_t idx = key >> 8;
  if (idx < 2 || idx >= mkeys_.size() || mkeys_[idx].kind == Mkey::Kind::kNone) return v;
  const Mkey& m = mkeys_[idx];
  v.exists = true;
  v.indirect = m.kind == Mkey::Kind::kIndirect;
  v.free = m.free;
  v.tag = m.tag;
  v.access = m.access;
  v.pd = m.pd;
  v.start = m.start;
  v.len = m.len;
  for (const detail::Klm& k : m.klm) v.n_entries += k.byte_count ? 1 : 0;
  v.max_entries = m.max_entries;
  return v;
}

EmuStats Engine::stats() {
  std::lock_guard<std::mutex> g(mu_);
  EmuStats s = st_;
  const RoceLink* l = wire_->link(side_);
  // Every wire's RC transport is its link, so its counters (retransmissions, timeouts, NAKs,
  // duplicates, a packet ring's ring_full) are reported on every wire, not only on RoCE.
  s.roce = l->stats();
  s.retries += l->retries();
  s.mtu_drops += l->mtu_drops();
  return s;
}

Status Engine::fault_nth(uint32_t qpn, uint64_t n, uint8_t synd) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  if (n == 0 || synd == 0) return make_error(Errc::kInvalidArgument, "emu: n and syndrome > 0");
  q->fault_nth = q->sq_seq + n;
  q->fault_synd = synd;
  return Status{};
}

Status Engine::fault_qp_error(uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  if (q->state != QpState::kError) enter_error(*q);
  return Status{};
}

Status Engine::fault_delay(uint32_t qpn, uint32_t polls) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  q->cqe_delay = polls;
  return Status{};
}

void Engine::fault_fail_mkeys(uint32_t k) {
  std::lock_guard<std::mutex> g(mu_);
  fail_mkeys_ = k;
}

Status Engine::fault_corrupt(uint32_t qpn) {
  std::lock_guard<std::mutex> g(mu_);
  QpCtx* q = find_qp(qpn);
  if (!q) return no_qp(qpn);
  q->corrupt_resp = true;
  return Status{};
}

// ---- threads and pumping ----------------------------------------------------------------------
Status Engine::start() {
  if (opt_.mode != Mode::kThreaded) return Status{};
  std::lock_guard<std::mutex> g(bind_mu());
  if (runner_ && runner_ != own_.get())
    return make_error(Errc::kBusy, "emu: " + opt_.name +
                                       " is served by a DeviceThread (stop() the device to take "
                                       "it off that thread first)");
  if (own_) return Status{};
  ThreadOptions to;
  to.cpu = opt_.cpu;
  to.name = "emu:" + opt_.name;
  to.idle_spin = opt_.idle_spin;
  to.idle_sleep_us = opt_.idle_sleep_us;
  to.idle_yield = opt_.idle_yield;
  auto r = std::make_unique<Runner>(std::vector<Engine*>{this}, to);
  if (Status s = r->run(); !s.ok()) return s;
  own_ = std::move(r);
  runner_ = own_.get();
  return Status{};
}

void Engine::stop() {
  std::lock_guard<std::mutex> g(bind_mu());
  if (!runner_) return;
  if (runner_ == own_.get()) {
    own_.reset();  // stops and joins
  } else {
    runner_->remove(this);
  }
  runner_ = nullptr;
}

void Engine::doorbell_hook(void* ctx) noexcept {
  auto* q = static_cast<QpCtx*>(ctx);
  q->eng->pump_inline();
}

void Engine::pump_inline() noexcept {
  if (opt_.mode == Mode::kSink) {
    progress();
    return;
  }
  // Inline: run this device and an in-process inline peer until neither has work, so one
  // doorbell finishes the whole exchange. Lock order: wire registry, then one device at a time.
  // When a round (both devices, each with its link) does no work, nothing more arrives: the
  // timers of the requesters still waiting fire at once (RoceLink::fire_stalled), the
  // deterministic stand-in for the wall-clock timers of threaded mode.
  std::lock_guard<std::mutex> g(wire_->reg_mu());
  Engine* peer = wire_->engine(1 - side_);
  if (peer && peer->opt_.mode != Mode::kInline) peer = nullptr;
  for (int rounds = 0; rounds < 1000000; ++rounds) {
    bool work = progress();
    if (peer) work |= peer->progress();
    if (!work) {  // both sides' timers, not only the first one's (no short circuit)
      const bool mine = fire_stalled();
      const bool theirs = peer && peer->fire_stalled();
      work = mine || theirs;
    }
    if (!work) break;
  }
}

bool Engine::fire_stalled() noexcept {
  std::lock_guard<std::mutex> g(mu_);
  return wire_->link(side_)->fire_stalled(wire_->rings(side_), now_ns());
}

}  // namespace detail

// ---- EmuDevice --------------------------------------------------------------------------------
EmuDevice::EmuDevice(std::unique_ptr<Engine> eng) : eng_(std::move(eng)) {
  faults_.eng_ = eng_.get();
}
EmuDevice::~EmuDevice() {
  eng_->stop();
}

Result<std::unique_ptr<EmuDevice>> EmuDevice::open(std::shared_ptr<Wire> wire, int side,
                                                   const Options& opt) {
  if (!wire) return make_error(Errc::kInvalidArgument, "emu: open needs a wire");
  if (side != 0 && side != 1) return make_error(Errc::kInvalidArgument, "emu: side must be 0 or 1");
  if (opt.mode == Mode::kInline && wire->shared_memory())
    return make_error(Errc::kInvalidArgument,
                      "emu: inline mode needs an in-process wire (use kThreaded on shared "
                      "memory)");
  if (opt.max_klm_list == 0 || opt.max_inline_klm == 0 ||
      opt.max_inline_klm > mlx5::prm::kMaxInlineKlm)
    return make_error(Errc::kInvalidArgument, "emu: bad max_klm_list / max_inline_klm");
  if (Status t = mlx5::check_rc_timers(opt.timers); !t.ok())
    return make_error(t.error().code, "emu: open: " + t.error().message);
  const std::string profile = resolve_profile_name(opt.profile);
  if (!profile_by_name(profile))
    return make_error(Errc::kInvalidArgument,
                      "emu: unknown device profile \"" + profile + "\"" +
                          (opt.profile.empty() ? " (from RDMX_EMU_PROFILE)" : "") +
                          " (known: " + profile_names() + ")");
  auto eng = std::make_unique<Engine>(wire, side, opt);
  Status s = eng->attach();
  if (!s.ok()) return s.error();
  std::unique_ptr<EmuDevice> d(new EmuDevice(std::move(eng)));
  if (opt.start_thread) {
    s = d->start();
    if (!s.ok()) return s.error();
  }
  return d;
}

const std::string& EmuDevice::name() const noexcept {
  return eng_->name();
}
const mlx5::DeviceCaps& EmuDevice::caps() const noexcept {
  return eng_->caps();
}
Result<mlx5::MrInfo> EmuDevice::reg_mr(void* addr, size_t len, uint32_t access) {
  return eng_->reg_mr(addr, len, access);
}
Result<mlx5::MrInfo> EmuDevice::reg_mr_in_pd(void* addr, size_t len, uint32_t access, uint32_t pd) {
  return eng_->reg_mr(addr, len, access, pd);
}
Status EmuDevice::dereg_mr(const mlx5::MrInfo& mr) {
  return eng_->dereg_mr(mr);
}
Result<uint32_t> EmuDevice::create_window_mkey(uint32_t max_entries, bool remote_invalidate) {
  return eng_->create_window_mkey(max_entries, remote_invalidate);
}
Result<uint32_t> EmuDevice::create_window_mkey_in_pd(uint32_t max_entries, bool remote_invalidate,
                                                     uint32_t pd) {
  return eng_->create_window_mkey(max_entries, remote_invalidate, pd);
}
Result<uint32_t> EmuDevice::alloc_mw(uint32_t pd) {
  return eng_->alloc_mw(pd);
}
Status EmuDevice::dealloc_mw(uint32_t rkey) {
  return eng_->dealloc_mw(rkey);
}
Result<uint32_t> EmuDevice::alloc_pd() {
  return eng_->alloc_pd();
}
Status EmuDevice::dealloc_pd(uint32_t pd) {
  return eng_->dealloc_pd(pd);
}
Result<uint64_t> EmuDevice::refused_remote_accesses(mlx5::QpHandle qp) const {
  return eng_->refused_remote_accesses(qp);
}
Status EmuDevice::destroy_mkey(uint32_t mkey) {
  return eng_->destroy_mkey(mkey);
}
Result<mlx5::QpDesc> EmuDevice::create_qp(const mlx5::QpConfig& cfg) {
  return eng_->create_qp(cfg);
}
Status EmuDevice::destroy_qp(mlx5::QpHandle qp) {
  return eng_->destroy_qp(qp);
}
mlx5::ConnectInfo EmuDevice::local_info(mlx5::QpHandle qp) {
  return eng_->local_info(qp);
}
Status EmuDevice::connect(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote) {
  return eng_->connect(qp, remote);
}
Status EmuDevice::modify_qp(mlx5::QpHandle qp, mlx5::QpState to) {
  return eng_->modify_qp(qp, to);
}
Result<mlx5::QpState> EmuDevice::query_qp(mlx5::QpHandle qp) {
  return eng_->query_qp(qp);
}
size_t EmuDevice::poll_async_events(std::span<mlx5::AsyncEvent> out) {
  return eng_->poll_events(out);
}
Mode EmuDevice::mode() const noexcept {
  return eng_->opt().mode;
}
const Checker& EmuDevice::checker() const noexcept {
  return eng_->checker();
}
Checker& EmuDevice::checker() noexcept {
  return eng_->checker();
}
EmuStats EmuDevice::stats() const {
  return eng_->stats();
}
bool EmuDevice::progress() {
  return eng_->progress();
}
Status EmuDevice::start() {
  return eng_->start();
}
void EmuDevice::stop() {
  eng_->stop();
}
EmuDevice::MkeyView EmuDevice::inspect_mkey(uint32_t mkey) const {
  return eng_->inspect_mkey(mkey);
}

Result<DevicePair> make_pair(const Options& opt_a, const Options& opt_b) {
  auto w = make_wire();
  Options oa = opt_a, ob = opt_b;
  if (oa.name == ob.name) {
    oa.name += "a";
    ob.name += "b";
  }
  auto a = EmuDevice::open(w, 0, oa);
  if (!a) return std::move(a).error();
  auto b = EmuDevice::open(w, 1, ob);
  if (!b) return std::move(b).error();
  return DevicePair{std::move(a.value()), std::move(b.value())};
}

}  // namespace rdmx::emu
