// rdmx-wqe exec: raw send WQEs, as a real SQ would hold them, executed by emu. Each input line
// is one batch on a fresh pair of connected QPs of an inline emu device pair (the chosen
// profile): the WQEBBs are copied into the local SQ ring from slot 0, the doorbell record is
// written with the value given, the doorbell register gets the first 8 bytes of the last WQE,
// and the device runs. Out come the CQEs both QPs' CQs hold and the PRM checker's reports.
//
// The environment (QPNs, keys, buffer addresses) is the same for every batch and is printed
// first, so requests can be encoded against it (rdmx-wqe encode) or planted violations built.
#include <sys/mman.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/mlx5/device.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/mlx5/prm/wqe.hpp>
#include <rdmx/mlx5/qp.hpp>

#include "exec.hpp"
#include "json_fields.hpp"
#include "tool.hpp"

namespace rdmx::wqetool {
namespace {

namespace prm = mlx5::prm;

constexpr size_t kBufBytes = 1 << 20;
constexpr uint32_t kWindows = 4;
constexpr uint32_t kWindowEntries = 16;
constexpr uint32_t kBigWindowEntries = 64;
constexpr uint32_t kRecvs = 16;
// Memory-window set-up: MRs registered with chosen access inside the local buffer, so a batch can
// break each bind rule (IBTA C10-71..76 as Linux rxe_mw.c rxe_check_bind_mw applies them).
constexpr size_t kBindMrOff = 512 << 10;    // MW_BIND + every right
constexpr size_t kBindRoMrOff = 576 << 10;  // MW_BIND + remote read only (no local write)
constexpr size_t kPd2MrOff = 640 << 10;     // MW_BIND + every right, in a second PD
constexpr size_t kMwMrLen = 64 << 10;

// The two buffers live at a fixed address, so the environment is the same in every run and a
// corpus of batches can name addresses (QPNs and keys are deterministic in a fresh emu).
// 1 GiB: application memory under ASan (low memory) and TSan too, and in any address space.
constexpr uint64_t kFixedBase = 0x40000000ull;

Result<uint8_t*> fixed_buffers() {
  static uint8_t* base = nullptr;
  if (base) return base;
  void* p = ::mmap(reinterpret_cast<void*>(kFixedBase), 2 * kBufBytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p == MAP_FAILED || p != reinterpret_cast<void*>(kFixedBase))
    return make_error(Errc::kNoMemory, "exec: cannot map the buffers at 0x40000000: " +
                                           std::string(std::strerror(errno)));
  base = static_cast<uint8_t*>(p);
  return base;
}

// One pair of connected QPs: `local` executes the batch, `peer` is its remote end (receives
// posted, memory registered for remote access).
struct Pair {
  std::array<endpoint::OpenedDevice, 2> dev;
  uint8_t* local_buf = nullptr;  // kBufBytes each, at the fixed addresses
  uint8_t* peer_buf = nullptr;
  mlx5::MrInfo local_mr{}, peer_mr{};
  std::vector<uint32_t> windows;
  uint32_t big_window = 0;
  mlx5::MrInfo bind_mr{}, bind_ro_mr{}, pd2_mr{};
  uint32_t mw = 0, mw2 = 0, pd2_mw = 0;  // type-2 memory windows (alloc_mw), free
  mlx5::QpDesc local{}, peer{};
  uint32_t peer_cq_ci = 0, local_cq_ci = 0;
};

Result<std::unique_ptr<Pair>> make_pair(const ExecOptions& o) {
  auto p = std::make_unique<Pair>();
  endpoint::DeviceOptions dopt;
  dopt.emu.checker_fatal = o.checker_fatal;
  const std::string spec = o.profile.empty() ? "emu-inline" : "emu-inline:" + o.profile;
  RDMX_TRY_ASSIGN(p->dev, endpoint::open_device_pair(spec, dopt, dopt));
  mlx5::Device& a = *p->dev[0].dev;
  mlx5::Device& b = *p->dev[1].dev;
  RDMX_TRY_ASSIGN(p->local_buf, fixed_buffers());
  p->peer_buf = p->local_buf + kBufBytes;
  std::memset(p->local_buf, 0, 2 * kBufBytes);  // every batch starts from zeroes
  RDMX_TRY_ASSIGN(p->local_mr, a.reg_mr(p->local_buf, kBufBytes, mlx5::kAccessAll));
  RDMX_TRY_ASSIGN(p->peer_mr, b.reg_mr(p->peer_buf, kBufBytes, mlx5::kAccessAll));
  for (uint32_t i = 0; i < kWindows; ++i) {
    RDMX_TRY_ASSIGN(const uint32_t k, a.create_window_mkey(kWindowEntries, true));
    p->windows.push_back(k);
  }
  RDMX_TRY_ASSIGN(p->big_window, a.create_window_mkey(kBigWindowEntries, true));
  RDMX_TRY_ASSIGN(p->bind_mr, a.reg_mr(p->local_buf + kBindMrOff, kMwMrLen,
                                       mlx5::kAccessAll | mlx5::kAccessMwBind));
  RDMX_TRY_ASSIGN(p->bind_ro_mr, a.reg_mr(p->local_buf + kBindRoMrOff, kMwMrLen,
                                          mlx5::kAccessRemoteRead | mlx5::kAccessMwBind));
  RDMX_TRY_ASSIGN(p->mw, a.alloc_mw(0));
  RDMX_TRY_ASSIGN(p->mw2, a.alloc_mw(0));
  RDMX_TRY_ASSIGN(const uint32_t pd2, a.alloc_pd());
  RDMX_TRY_ASSIGN(p->pd2_mr, a.reg_mr_in_pd(p->local_buf + kPd2MrOff, kMwMrLen,
                                            mlx5::kAccessAll | mlx5::kAccessMwBind, pd2));
  RDMX_TRY_ASSIGN(p->pd2_mw, a.alloc_mw(pd2));
  mlx5::QpConfig qc;
  qc.sq_wqebbs = o.sq_wqe_cnt;
  qc.rq_wqes = kRecvs;
  qc.cq_cqes = 256;
  qc.max_inline_data = 512;
  RDMX_TRY_ASSIGN(p->local, a.create_qp(qc));
  RDMX_TRY_ASSIGN(p->peer, b.create_qp(qc));
  RDMX_TRY(mlx5::connect_qps(a, p->local.qpn, b, p->peer.qpn), "exec: connect");
  // The peer's receives: 4 KiB each, from the start of its buffer.
  mlx5::RqWriter rq;
  rq.init(p->peer.rq);
  for (uint32_t i = 0; i < kRecvs; ++i) {
    const prm::Sge s{reinterpret_cast<uint64_t>(p->peer_buf) + i * 4096, 4096, p->peer_mr.lkey};
    rq.post({&s, 1}, i);
  }
  rq.ring_doorbell();
  return p;
}

Json env_json(const Pair& p, const ExecOptions& o) {
  Json e;
  e["profile"] = o.profile.empty() ? "default" : o.profile;
  e["qpn"] = p.local.qpn;
  e["peer_qpn"] = p.peer.qpn;
  e["sq_wqe_cnt"] = p.local.sq.wqe_cnt;
  e["max_inline_data"] = 512;
  e["lkey"] = p.local_mr.lkey;
  e["buf"] = reinterpret_cast<uint64_t>(p.local_buf);
  e["buf_len"] = kBufBytes;
  e["windows"] = p.windows;
  e["window_entries"] = kWindowEntries;
  e["big_window"] = p.big_window;
  e["big_window_entries"] = kBigWindowEntries;
  e["mw"] = p.mw;
  e["mw2"] = p.mw2;
  e["pd2_mw"] = p.pd2_mw;
  e["bind_lkey"] = p.bind_mr.lkey;
  e["bind_buf"] = reinterpret_cast<uint64_t>(p.local_buf) + kBindMrOff;
  e["bind_ro_lkey"] = p.bind_ro_mr.lkey;
  e["bind_ro_buf"] = reinterpret_cast<uint64_t>(p.local_buf) + kBindRoMrOff;
  e["pd2_lkey"] = p.pd2_mr.lkey;
  e["pd2_buf"] = reinterpret_cast<uint64_t>(p.local_buf) + kPd2MrOff;
  e["mw_mr_len"] = kMwMrLen;
  e["peer_rkey"] = p.peer_mr.rkey;
  e["peer_buf"] = reinterpret_cast<uint64_t>(p.peer_buf);
  e["peer_recvs"] = kRecvs;
  return Json{{"env", e}};
}

// The CQEs of one CQ from `ci` on, as JSON lines.
void drain_cq(const mlx5::CqDesc& cq, uint32_t& ci, const char* side, std::string& out,
              uint32_t& n) {
  for (;;) {
    const auto* c = reinterpret_cast<const mlx5_cqe64*>(cq.buf) + (ci & (cq.cqe_cnt - 1));
    if (!prm::cqe_is_sw_owned(c, ci, cq.cqe_cnt)) return;
    Json j;
    j["qp"] = side;
    const uint8_t op = prm::cqe_opcode(c);
    j["opcode"] = std::string(prm::cqe_opcode_name(op));
    j["wqe_counter"] = prm::cqe_wqe_counter(c);
    j["qpn"] = prm::cqe_qpn(c);
    if (prm::cqe_is_error(c)) {
      j["syndrome"] = prm::cqe_syndrome(c);
      j["syndrome_name"] = std::string(prm::syndrome_name(prm::cqe_syndrome(c)));
    } else {
      j["byte_cnt"] = prm::cqe_byte_cnt(c);
      if (op == MLX5_CQE_REQ)
        j["wqe_opcode"] = std::string(prm::wqe_opcode_name(prm::cqe_send_opcode(c)));
    }
    out += Json{{"cqe", j}}.dump() + "\n";
    ++ci;
    ++n;
  }
}

// Brings the local SQ's producer counter from 0 to `sq_pi`: one-WQEBB unsignaled NOPs, rung a
// ring at a time, so the batch starts at the slot and WQE index a real SQ would be at. The NOPs
// leave no CQE; the checker's reports are cleared after them (the batch's alone are printed).
void advance_sq(Pair& p, uint32_t sq_pi) {
  const mlx5::SqDesc& sq = p.local.sq;
  for (uint32_t pi = 0; pi < sq_pi;) {
    const uint32_t end = std::min(sq_pi, pi + sq.wqe_cnt);
    for (; pi < end; ++pi) {
      prm::RingCursor cur(sq.buf, sq.wqe_cnt, pi);
      prm::build_nop(cur, p.local.qpn, static_cast<uint16_t>(pi), 0, 1);
    }
    __atomic_store_n(sq.dbrec, detail::bswap(pi & 0xffffu), __ATOMIC_RELEASE);
    sq.hook();
    for (int i = 0; i < 64 && p.dev[0].emu->progress(); ++i) {
    }
  }
  p.dev[0].emu->checker().clear();
}

// Runs one batch; the result lines (no trailing newline after the last), or an error.
Result<std::string> run_batch(const ExecOptions& o, const std::vector<std::vector<uint8_t>>& wqebbs,
                              uint32_t sq_pi, uint32_t dbrec) {
  RDMX_TRY_ASSIGN(std::unique_ptr<Pair> p, make_pair(o));
  const mlx5::SqDesc& sq = p->local.sq;
  if (wqebbs.size() > sq.wqe_cnt)
    return make_error(Errc::kInvalidArgument, std::to_string(wqebbs.size()) +
                                                  " WQEBBs do not fit the ring of " +
                                                  std::to_string(sq.wqe_cnt));
  advance_sq(*p, sq_pi);
  for (size_t i = 0; i < wqebbs.size(); ++i)  // ring order from slot sq_pi, wrapping
    std::memcpy(static_cast<uint8_t*>(sq.buf) + ((sq_pi + i) & (sq.wqe_cnt - 1)) * 64,
                wqebbs[i].data(), 64);
  // The doorbell sequence of a real SQ: WQEs, then the record, then the register.
  __atomic_store_n(sq.dbrec, detail::bswap(dbrec & 0xffffu), __ATOMIC_RELEASE);
  if (!wqebbs.empty()) {
    // The register gets the first 8 bytes of the last WQE's control segment: walk the WQEs by
    // their DS counts (qpn_ds, low 6 bits) to find where the last one starts.
    size_t last = 0;
    for (size_t i = 0; i < wqebbs.size();) {
      last = i;
      const uint32_t ds = wqebbs[i][7] & 0x3f;
      i += std::max<size_t>(1, (size_t{ds} * 16 + 63) / 64);
    }
    uint64_t first8 = 0;
    std::memcpy(&first8, wqebbs[last].data(), 8);
    *sq.reg = first8;
  }
  sq.hook();
  for (int i = 0; i < 64; ++i) {  // inline devices: let both finish what the batch started
    p->dev[0].emu->progress();
    p->dev[1].emu->progress();
  }
  std::string out;
  uint32_t n = 0;
  drain_cq(p->local.cq, p->local_cq_ci, "local", out, n);
  drain_cq(p->peer.cq, p->peer_cq_ci, "peer", out, n);
  uint32_t reports = 0;
  for (endpoint::OpenedDevice* d : {&p->dev[0], &p->dev[1]}) {
    for (const emu::Report& r : d->emu->checker().reports()) {
      Json j;
      j["qp"] = r.qpn == p->local.qpn ? "local" : "peer";
      j["rule"] = emu::rule_name(r.rule);
      j["wqe_index"] = r.wqe_index;
      j["text"] = r.text;
      out += Json{{"report", j}}.dump() + "\n";
      ++reports;
    }
  }
  const auto st = p->dev[0].dev->query_qp(p->local.qpn);
  Json b;
  b["wqebbs"] = wqebbs.size();
  b["sq_pi"] = sq_pi;
  b["doorbell_record"] = dbrec & 0xffffu;
  b["cqes"] = n;
  b["reports"] = reports;
  b["qp_state"] = st ? std::string(st.value() == mlx5::QpState::kRts     ? "RTS"
                                   : st.value() == mlx5::QpState::kError ? "ERR"
                                                                         : "other")
                     : std::string("?");
  out += Json{{"batch", b}}.dump();
  return out;
}

}  // namespace

Result<std::string> exec_env(const ExecOptions& o) {
  RDMX_TRY_ASSIGN(std::unique_ptr<Pair> p, make_pair(o));
  return env_json(*p, o).dump();
}

LineResult exec_line(std::string_view line, const ExecOptions& o) {
  auto fail = [](const std::string& msg) {
    return LineResult{false, Json{{"rc", "EINVAL"}, {"error", msg}}.dump()};
  };
  Json j;
  try {
    j = Json::parse(line);
  } catch (const std::exception& e) {
    return fail(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object()) return fail("a batch is a JSON object");
  if (j.contains("rc") && j["rc"] != 0) return fail("an encode error, not a batch");
  const Json* w = j.contains("wqebbs") ? &j["wqebbs"] : nullptr;
  if (!w || !w->is_array()) return fail("'wqebbs': an array of 128-digit hex strings is needed");
  std::vector<std::vector<uint8_t>> bbs;
  for (const Json& h : *w) {
    std::vector<uint8_t> b;
    if (!h.is_string() || !from_hex(h.get<std::string>(), b) || b.size() != 64)
      return fail("'wqebbs': every entry is one WQEBB, 128 hex digits");
    bbs.push_back(std::move(b));
  }
  uint32_t sq_pi = 0;
  if (j.contains("sq_pi")) {
    if (!j["sq_pi"].is_number_unsigned() || j["sq_pi"] > 0xffffu)
      return fail("'sq_pi': a number 0..65535");
    sq_pi = j["sq_pi"].get<uint32_t>();
  } else if (j.contains("sq_pi_after") && j["sq_pi_after"].is_number_unsigned()) {
    // An encode result: the batch started sq_pi_after - (its WQEBBs) (low 16 bits: the WQE
    // index and the doorbell record hold no more).
    sq_pi = (j["sq_pi_after"].get<uint32_t>() - static_cast<uint32_t>(bbs.size())) & 0xffffu;
  }
  uint32_t dbrec = (sq_pi + static_cast<uint32_t>(bbs.size())) & 0xffffu;
  if (j.contains("doorbell_record")) {
    if (!j["doorbell_record"].is_number_unsigned() || j["doorbell_record"] > 0xffffu)
      return fail("'doorbell_record': a number 0..65535");
    dbrec = j["doorbell_record"].get<uint32_t>();
  }
  auto r = run_batch(o, bbs, sq_pi, dbrec);
  if (!r) return LineResult{false, Json{{"rc", "EIO"}, {"error", r.error().message}}.dump()};
  return LineResult{true, std::move(r).value()};
}

}  // namespace rdmx::wqetool
