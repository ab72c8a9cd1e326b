// rdmx-wqe encode: one JSON batch of verbs work requests -> the WQEBBs an mlx5 RC QP's send
// queue holds afterwards, built by prm's builders through an SqWriter on a plain memory ring.
//
// Semantics follow rdma-core providers/mlx5/qp.c (the ibv_wr_* / mlx5dv_wr_* API on an RC QP):
// the first error of a batch is latched and the whole batch is rolled back (no bytes), as
// ibv_wr_complete does. Differences rdmx makes on purpose are listed in the help text.
#include <algorithm>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <infiniband/mlx5dv.h>
#include <rdmx/mlx5/prm/defs.hpp>
#include <rdmx/mlx5/prm/wqe.hpp>
#include <rdmx/mlx5/sq.hpp>

#include "json_fields.hpp"
#include "tool.hpp"

namespace rdmx::wqetool {

namespace prm = rdmx::mlx5::prm;

namespace {

// ibv_access_flags bits mlx5dv_wr_set_mkey_access_flags accepts (qp.c): LOCAL_WRITE,
// REMOTE_WRITE, REMOTE_READ, REMOTE_ATOMIC.
constexpr uint32_t kIbvAccessLocalWrite = 1u << 0;
constexpr uint32_t kIbvAccessRemoteWrite = 1u << 1;
constexpr uint32_t kIbvAccessRemoteRead = 1u << 2;
constexpr uint32_t kIbvAccessRemoteAtomic = 1u << 3;
constexpr uint32_t kIbvAccessUmrAllowed =
    kIbvAccessLocalWrite | kIbvAccessRemoteWrite | kIbvAccessRemoteRead | kIbvAccessRemoteAtomic;
constexpr uint32_t kIbvAccessZeroBased = 1u << 5;  // IBV_ACCESS_ZERO_BASED
constexpr uint32_t kIbvAccessBindAllowed = kIbvAccessUmrAllowed | kIbvAccessZeroBased;

// Largest ring the tool accepts (bounds its memory; mlx5 SQs are at most 32K WQEBBs).
constexpr uint64_t kMaxRingWqebbs = 1u << 16;

std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "%x", v);
  return b;
}

uint8_t mkc_access(uint32_t ibv) {
  uint8_t a = 0;  // as qp.c get_umr_mr_flags: local read is not written
  if (ibv & kIbvAccessRemoteAtomic) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC;
  if (ibv & kIbvAccessRemoteWrite) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE;
  if (ibv & kIbvAccessRemoteRead) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ;
  if (ibv & kIbvAccessLocalWrite) a |= MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE;
  return a;
}

struct Queue {
  uint32_t qpn = 0;
  uint32_t wqe_cnt = 0;
  uint32_t pi = 0;
  uint8_t fm_cache = 0;
  uint32_t max_inline_data = 0;
  uint32_t max_send_sge = 0;  // 0: bounded only by the 63-DS WQE size
  bool mkey_update_tag = true;
  bool rdmx_signal_last = false;
};

enum class Op {
  kMrList,
  kMrInterleaved,
  kWrite,
  kWriteImm,
  kRead,
  kSend,
  kSendImm,
  kSendInv,
  kLocalInv,
  kBindMw
};

struct OpInfo {
  const char* name;
  Op op;
  uint8_t opcode;
};
constexpr OpInfo kOps[] = {
    {"mr_list", Op::kMrList, MLX5_OPCODE_UMR},
    {"mr_interleaved", Op::kMrInterleaved, MLX5_OPCODE_UMR},
    {"rdma_write", Op::kWrite, MLX5_OPCODE_RDMA_WRITE},
    {"rdma_write_imm", Op::kWriteImm, MLX5_OPCODE_RDMA_WRITE_IMM},
    {"rdma_read", Op::kRead, MLX5_OPCODE_RDMA_READ},
    {"send", Op::kSend, MLX5_OPCODE_SEND},
    {"send_imm", Op::kSendImm, MLX5_OPCODE_SEND_IMM},
    {"send_inv", Op::kSendInv, MLX5_OPCODE_SEND_INVAL},
    {"local_inv", Op::kLocalInv, MLX5_OPCODE_UMR},
    {"bind_mw", Op::kBindMw, MLX5_OPCODE_UMR},
};

// One parsed work request, ready for a prm builder.
struct Wr {
  const OpInfo* info = nullptr;
  bool signaled = false, fence = false, solicited = false, inline_flag = false;
  // UMR
  uint32_t mkey = 0;
  uint8_t access = 0;
  uint32_t repeat_count = 0;
  std::vector<prm::Klm> klms;
  std::vector<prm::RepeatEntry> repeat;
  prm::BindMw bind;  // bind_mw (qpn, index and fm filled at build time)
  // data ops
  uint64_t raddr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;  // imm_data / invalidate key (host order; written big-endian)
  std::vector<prm::Sge> sges;
  bool has_inline = false;
  std::vector<uint8_t> inline_data;
  uint32_t ds = 0;
};

Queue parse_queue(Fields& f) {
  Queue q;
  q.qpn = static_cast<uint32_t>(f.u64("qpn", 0xffffff));
  const uint64_t cnt = f.u64("sq_wqe_cnt", kMaxRingWqebbs);
  if (cnt == 0 || (cnt & (cnt - 1)) != 0)
    reject("EINVAL", "sq_wqe_cnt = " + std::to_string(cnt) + " is not a power of two");
  q.wqe_cnt = static_cast<uint32_t>(cnt);
  q.pi = static_cast<uint32_t>(f.u64("sq_pi", UINT32_MAX));
  const uint64_t fm = f.u64_or("fm_cache", 0xff, 0);
  if (fm & ~uint64_t{prm::kFenceMask})
    reject("EINVAL", "fm_cache = " + std::to_string(fm) +
                         " is not a fence mode (0, 32 after a UMR, 64, 96, 128)");
  q.fm_cache = static_cast<uint8_t>(fm);
  q.max_inline_data = static_cast<uint32_t>(f.u64("max_inline_data", UINT32_MAX));
  q.max_send_sge = static_cast<uint32_t>(f.u64_or("max_send_sge", UINT32_MAX, 0));
  q.mkey_update_tag = f.flag("mkey_update_tag", true);
  q.rdmx_signal_last = f.flag("rdmx_signal_last", false);
  return q;
}

std::string wr_where(size_t i) {
  return "wrs[" + std::to_string(i) + "]";
}

// Data of WRITE/READ/SEND: "sges" or "inline_data_hex" (none = an empty gather list).
void parse_data(Fields& f, const Queue& q, Wr& w, bool allow_inline) {
  const bool has_sges = f.has("sges"), has_inl = f.has("inline_data_hex");
  if (has_sges && has_inl)
    reject("EINVAL", f.where() + ": give either \"sges\" or \"inline_data_hex\", not both");
  if (has_inl) {
    if (!allow_inline)
      reject("EINVAL", f.where() + ": inline data is only valid for writes and sends");
    const std::string hex = f.str("inline_data_hex");
    if (!from_hex(hex, w.inline_data))
      reject("EINVAL", f.where() + ": \"inline_data_hex\" is not an even-length hex string");
    // qp.c _mlx5_send_wr_set_inline_data: longer than the QP's max_inline_data -> ENOMEM.
    if (w.inline_data.size() > q.max_inline_data)
      reject("ENOMEM", f.where() + ": " + std::to_string(w.inline_data.size()) +
                           " inline bytes exceed max_inline_data " +
                           std::to_string(q.max_inline_data));
    w.has_inline = true;
    return;
  }
  if (!has_sges) return;
  const Json& arr = f.array("sges");
  // qp.c _mlx5_send_wr_set_sge_list: more than the QP's max_send_sge -> ENOMEM.
  if (q.max_send_sge && arr.size() > q.max_send_sge)
    reject("ENOMEM", f.where() + ": " + std::to_string(arr.size()) + " sges exceed max_send_sge " +
                         std::to_string(q.max_send_sge));
  for (size_t i = 0; i < arr.size(); ++i) {
    Fields s(arr[i], f.where() + ".sges[" + std::to_string(i) + "]");
    prm::Sge g;
    g.lkey = static_cast<uint32_t>(s.u64("lkey", UINT32_MAX));
    g.addr = s.u64("addr", UINT64_MAX);
    g.length = static_cast<uint32_t>(s.u64("length", UINT32_MAX));
    s.finish();
    // qp.c skips zero-length entries: they take no data segment.
    if (g.length) w.sges.push_back(g);
  }
}

// Common part of mr_list / mr_interleaved (qp.c mlx5_send_wr_mkey_configure and
// mlx5_send_wr_set_mkey_access_flags), checks in rdma-core's order.
void parse_umr_head(Fields& f, const Queue& q, Wr& w) {
  w.mkey = static_cast<uint32_t>(f.u64("mkey", UINT32_MAX));
  const uint32_t acc = static_cast<uint32_t>(f.u64("access_flags", UINT32_MAX));
  if (!w.inline_flag)
    reject("EOPNOTSUPP", f.where() + ": " + w.info->name +
                             " needs \"inline\": true (IBV_SEND_INLINE; the translation is "
                             "always inline)");
  if ((w.mkey & 0xff) && !q.mkey_update_tag)
    reject("EOPNOTSUPP", f.where() +
                             ": mkey tag (low byte) is not 0 and mkey_update_tag is "
                             "false");
  if (acc & ~kIbvAccessUmrAllowed)
    reject("EINVAL", f.where() + ": access_flags 0x" + hex32(acc) +
                         " has bits other than LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|"
                         "REMOTE_ATOMIC (0xf)");
  w.access = mkc_access(acc);
}

// ibv_wr_bind_mw(qp, mw, rkey, bind_info): mw_rkey (the window's rkey now), rkey (after the
// bind), mw_type (1 or 2, default 2), lkey/addr/length (bind_info's MR and range; length 0
// unbinds), mw_access_flags. rdma-core's checks that need the MR object itself (range inside the
// MR, IBV_ACCESS_MW_BIND) are the device's here: rdmx-wqe has no MR.
void parse_bind_mw(Fields& f, Wr& w) {
  prm::BindMw& b = w.bind;
  b.mw_rkey = static_cast<uint32_t>(f.u64("mw_rkey", UINT32_MAX));
  b.new_rkey = static_cast<uint32_t>(f.u64("rkey", UINT32_MAX));
  const uint64_t type = f.u64_or("mw_type", 2, 2);
  if (type != 1 && type != 2)
    reject("EINVAL", f.where() + ": mw_type " + std::to_string(type) + " is not 1 or 2");
  b.type2 = type == 2;
  b.mr_lkey = static_cast<uint32_t>(f.u64("lkey", UINT32_MAX));
  b.addr = f.u64("addr", UINT64_MAX);
  b.length = f.u64("length", UINT64_MAX);
  const uint32_t acc = static_cast<uint32_t>(f.u64("mw_access_flags", UINT32_MAX));
  // qp.c set_bind_wr: "check that len > 2GB because KLM support only 2GB".
  if (b.length > prm::kMaxBindMwLength)
    reject("EOPNOTSUPP", f.where() + ": length " + std::to_string(b.length) +
                             " is over 2 GiB (the bind's single KLM)");
  if (acc & ~kIbvAccessBindAllowed)
    reject("EINVAL", f.where() + ": mw_access_flags 0x" + hex32(acc) +
                         " has bits other than LOCAL_WRITE|REMOTE_WRITE|REMOTE_READ|"
                         "REMOTE_ATOMIC|ZERO_BASED (0x2f)");
  b.access = mkc_access(acc & kIbvAccessUmrAllowed);
  b.zero_based = (acc & kIbvAccessZeroBased) != 0;
  w.ds = prm::kUmrHeaderDs + (b.length ? 4 : 0);
}

// ibv_wr_set_mkey_layout_list: the UMR head, then the inline KLM list.
void parse_mr_list(Fields& f, const Queue& q, Wr& w) {
  parse_umr_head(f, q, w);
  const Json& arr = f.array("entries");
  const uint64_t desc = f.u64_or("mkey_max_entries", UINT16_MAX, UINT16_MAX);
  // qp.c mlx5_send_wr_set_mkey_layout: min((max_inline_data + 4) / 16, num_desc).
  const uint64_t cap = std::min<uint64_t>((uint64_t{q.max_inline_data} + 4) / 16, desc);
  if (arr.size() > cap)
    reject("ENOMEM", f.where() + ": " + std::to_string(arr.size()) +
                         " entries exceed the inline capacity of " + std::to_string(cap) +
                         " (min((max_inline_data + 4) / 16, mkey_max_entries))");
  for (size_t i = 0; i < arr.size(); ++i) {
    Fields e(arr[i], f.where() + ".entries[" + std::to_string(i) + "]");
    prm::Klm k;
    k.mkey = static_cast<uint32_t>(e.u64("lkey", UINT32_MAX));
    k.address = e.u64("addr", UINT64_MAX);
    k.byte_count = static_cast<uint32_t>(e.u64("length", UINT32_MAX));
    e.finish();
    w.klms.push_back(k);
  }
  w.ds = prm::kUmrHeaderDs + prm::klm_list_octowords(static_cast<uint32_t>(w.klms.size()));
}

// ibv_wr_set_mkey_layout_interleaved: the UMR head, then the repeat block's entries.
void parse_mr_interleaved(Fields& f, const Queue& q, Wr& w) {
  parse_umr_head(f, q, w);
  w.repeat_count = static_cast<uint32_t>(f.u64("repeat_count", UINT32_MAX));
  const Json& arr = f.array("interleaved");
  const uint64_t desc = f.u64_or("mkey_max_entries", UINT16_MAX, UINT16_MAX);
  // qp.c: min((max_inline_data + 4) / 16 - 1, num_desc): the header takes one entry.
  const uint64_t fit = (uint64_t{q.max_inline_data} + 4) / 16;
  const uint64_t cap = std::min<uint64_t>(fit ? fit - 1 : 0, desc);
  if (arr.size() > cap)
    reject("ENOMEM", f.where() + ": " + std::to_string(arr.size()) +
                         " interleaved entries exceed the inline capacity of " +
                         std::to_string(cap) +
                         " (min((max_inline_data + 4) / 16 - 1, mkey_max_entries))");
  for (size_t i = 0; i < arr.size(); ++i) {
    Fields e(arr[i], f.where() + ".interleaved[" + std::to_string(i) + "]");
    prm::RepeatEntry r;
    r.mkey = static_cast<uint32_t>(e.u64("lkey", UINT32_MAX));
    r.address = e.u64("addr", UINT64_MAX);
    const uint64_t bytes = e.u64("bytes_count", UINT32_MAX);
    const uint64_t skip = e.u64("bytes_skip", UINT32_MAX);
    e.finish();
    // The entry's byte_count and stride are 16-bit fields; rdma-core truncates silently,
    // rdmx rejects.
    if (bytes > 0xffff || bytes + skip > 0xffff)
      reject("EINVAL", e.where() + ": bytes_count " + std::to_string(bytes) +
                           " / stride (bytes_count + bytes_skip) " + std::to_string(bytes + skip) +
                           " do not fit 16 bits");
    r.byte_count = static_cast<uint16_t>(bytes);
    r.stride = static_cast<uint16_t>(bytes + skip);
    w.repeat.push_back(r);
  }
  w.ds = prm::kUmrHeaderDs + prm::repeat_block_octowords(static_cast<uint32_t>(w.repeat.size()));
}

// The DS of a WRITE/READ/SEND: its header segments, then the gather list or the inline data.
uint32_t data_wr_ds(const Wr& w) {
  const uint32_t hdr =
      (w.info->op == Op::kSend || w.info->op == Op::kSendImm || w.info->op == Op::kSendInv) ? 1 : 2;
  const uint32_t n_inl = static_cast<uint32_t>(w.inline_data.size());
  // qp.c: zero inline bytes add no segment; otherwise ceil((4 + len) / 16) DS.
  return hdr + (w.has_inline ? (n_inl ? (4 + n_inl + 15) / 16 : 0)
                             : static_cast<uint32_t>(w.sges.size()));
}

Wr parse_wr(const Json& j, size_t idx, const Queue& q) {
  Fields f(j, wr_where(idx));
  Wr w;
  const std::string op = f.str("op");
  for (const OpInfo& o : kOps)
    if (op == o.name) w.info = &o;
  if (!w.info) reject("EOPNOTSUPP", f.where() + ": unknown op \"" + op + "\"");
  w.signaled = f.flag("signaled", false);
  w.fence = f.flag("fence", false);
  w.solicited = f.flag("solicited", false);
  w.inline_flag = f.flag("inline", false);
  (void)f.get("wr_id");  // accepted for verbs familiarity; not part of the WQE
  const uint32_t max_wqe_ds = prm::kMaxWqeDs;
  switch (w.info->op) {
    case Op::kMrList:
      parse_mr_list(f, q, w);
      break;
    case Op::kMrInterleaved:
      parse_mr_interleaved(f, q, w);
      break;
    case Op::kWrite:
    case Op::kWriteImm:
    case Op::kRead: {
      w.raddr = f.u64("remote_addr", UINT64_MAX);
      w.rkey = static_cast<uint32_t>(f.u64("rkey", UINT32_MAX));
      if (w.info->op == Op::kWriteImm) w.imm = static_cast<uint32_t>(f.u64("imm_data", UINT32_MAX));
      parse_data(f, q, w, w.info->op != Op::kRead);
      w.ds = data_wr_ds(w);
      break;
    }
    case Op::kSend:
    case Op::kSendImm:
    case Op::kSendInv: {
      if (w.info->op == Op::kSendImm) w.imm = static_cast<uint32_t>(f.u64("imm_data", UINT32_MAX));
      if (w.info->op == Op::kSendInv)
        w.imm = static_cast<uint32_t>(f.u64("invalidate_rkey", UINT32_MAX));
      parse_data(f, q, w, true);
      w.ds = data_wr_ds(w);
      break;
    }
    case Op::kLocalInv:
      w.imm = static_cast<uint32_t>(f.u64("invalidate_rkey", UINT32_MAX));
      w.ds = prm::kUmrHeaderDs;
      break;
    case Op::kBindMw:
      parse_bind_mw(f, w);
      break;
  }
  if (w.ds > max_wqe_ds)
    reject("ENOMEM", f.where() + ": the WQE would be " + std::to_string(w.ds) +
                         " DS; the ds field allows at most 63");
  f.finish();
  return w;
}

// Builds one WQE at the writer's cursor with the project's prm builders; returns its DS.
uint32_t build(mlx5::SqWriter& sq, const Queue& q, const Wr& w) {
  prm::RingCursor cur = sq.cursor();
  const uint8_t fm =
      sq.next_fm_ce_se(w.signaled, w.fence ? prm::kFenceSmallAndFence : 0, w.solicited);
  const uint16_t idx = sq.wqe_index();
  const uint8_t opc = w.info->opcode;
  switch (w.info->op) {
    case Op::kMrList:
      return prm::build_umr_klm_list(cur, prm::UmrVerbsHead{q.qpn, idx, fm, w.mkey, w.access},
                                     w.klms);
    case Op::kMrInterleaved:
      return prm::build_umr_interleaved(cur, prm::UmrVerbsHead{q.qpn, idx, fm, w.mkey, w.access},
                                        w.repeat_count, w.repeat);
    case Op::kLocalInv:
      return prm::build_local_inv(cur, q.qpn, idx, fm, w.imm);
    case Op::kBindMw: {
      prm::BindMw b = w.bind;
      b.qpn = q.qpn;
      b.wqe_index = idx;
      b.fm_ce_se = fm;
      return prm::build_bind_mw(cur, b);
    }
    case Op::kWrite:
    case Op::kWriteImm:
    case Op::kRead: {
      const Be32 imm = w.info->op == Op::kWriteImm ? Be32::from_host(w.imm) : Be32{};
      if (w.has_inline && !w.inline_data.empty())
        return prm::build_inline(cur, opc, q.qpn, idx, fm, w.raddr, w.rkey, w.inline_data.data(),
                                 static_cast<uint32_t>(w.inline_data.size()), imm);
      return prm::build_rdma(cur, opc, q.qpn, idx, fm, w.raddr, w.rkey, w.sges, imm);
    }
    case Op::kSend:
    case Op::kSendImm:
    case Op::kSendInv: {
      const Be32 imm = w.info->op == Op::kSend ? Be32{} : Be32::from_host(w.imm);
      if (w.has_inline && !w.inline_data.empty())
        return prm::build_inline(cur, opc, q.qpn, idx, fm, 0, 0, w.inline_data.data(),
                                 static_cast<uint32_t>(w.inline_data.size()), imm);
      return prm::build_send(cur, opc, q.qpn, idx, fm, w.sges, imm);
    }
  }
  return 0;
}

std::string error_line(const Reject& r) {
  Json o;
  o["rc"] = r.rc;
  o["error"] = r.message;
  return o.dump();
}

}  // namespace

LineResult encode_line(std::string_view line) {
  try {
    Json req;
    try {
      req = Json::parse(line.begin(), line.end());
    } catch (const Json::exception& e) {
      reject("EINVAL", std::string("bad JSON: ") + e.what());
    }
    Fields top(req, "request");
    const Queue q = parse_queue(top);
    const Json& wrs = top.array("wrs");
    top.finish();

    // Parse and check the whole batch first (rdma-core latches the first error and rolls the
    // batch back at ibv_wr_complete: the caller sees the error and no WQE).
    std::vector<Wr> batch;
    batch.reserve(wrs.size());
    uint64_t total_wqebbs = 0;
    for (size_t i = 0; i < wrs.size(); ++i) {
      batch.push_back(parse_wr(wrs[i], i, q));
      total_wqebbs += prm::ds_to_wqebbs(batch.back().ds);
    }
    if (total_wqebbs > q.wqe_cnt)
      reject("ENOMEM", "the batch needs " + std::to_string(total_wqebbs) +
                           " WQEBBs; the ring holds " + std::to_string(q.wqe_cnt) +
                           " (work queue overflow)");

    // A plain memory ring, doorbell record and doorbell register for the SqWriter.
    std::vector<uint64_t> ring(size_t{q.wqe_cnt} * 8, 0);
    uint32_t dbrec = 0xffffffffu;  // not written unless a doorbell is rung
    uint64_t reg = 0;
    mlx5::SqDesc d;
    d.buf = ring.data();
    d.wqe_cnt = q.wqe_cnt;
    d.dbrec = &dbrec;
    d.reg = &reg;
    mlx5::SqWriter sq;
    sq.init(d, q.qpn, UINT32_MAX);  // signal exactly what was asked (no unsignaled budget)
    sq.restart_at(q.pi, q.fm_cache);

    for (const Wr& w : batch) {
      if (!sq.has_room(w.ds)) reject("ENOMEM", "work queue overflow");  // checked above
      const uint32_t ds = build(sq, q, w);
      sq.commit(ds, w.info->opcode, 0);
    }
    const uint32_t n = sq.pi() - q.pi;
    auto* bytes = reinterpret_cast<const uint8_t*>(ring.data());
    const auto snapshot = [&] {
      std::vector<std::string> out;
      for (uint32_t i = 0; i < n; ++i)
        out.push_back(to_hex(bytes + size_t{(q.pi + i) & (q.wqe_cnt - 1)} * 64, 64));
      return out;
    };
    // rdmx's SqWriter::ring_doorbell also sets CQ_UPDATE on an unsignaled last WQE (every
    // WQE covered by a CQE). rdma-core does not: show the verbs bytes unless asked.
    std::vector<std::string> wqebbs = snapshot();
    sq.ring_doorbell();
    if (q.rdmx_signal_last) wqebbs = snapshot();

    Json o;
    o["rc"] = 0;
    o["sq_pi_after"] = sq.pi();
    o["wqebbs"] = wqebbs;
    if (n)
      o["doorbell_record"] = detail::bswap(dbrec);
    else
      o["doorbell_record"] = nullptr;  // empty batch: rdma-core rings no doorbell either
    return LineResult{true, o.dump()};
  } catch (const Reject& r) {
    return LineResult{false, error_line(r)};
  } catch (const std::exception& e) {
    return LineResult{false, error_line(Reject{"EINVAL", std::string("internal: ") + e.what()})};
  }
}

std::string to_hex(const uint8_t* p, size_t n) {
  static const char kDigits[] = "0123456789abcdef";
  std::string s(n * 2, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = kDigits[p[i] >> 4];
    s[2 * i + 1] = kDigits[p[i] & 0xf];
  }
  return s;
}

bool from_hex(std::string_view s, std::vector<uint8_t>& out) {
  if (s.size() % 2) return false;
  out.clear();
  out.reserve(s.size() / 2);
  const auto nib = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (size_t i = 0; i < s.size(); i += 2) {
    const int hi = nib(s[i]), lo = nib(s[i + 1]);
    if (hi < 0 || lo < 0) return false;
    out.push_back(static_cast<uint8_t>(hi << 4 | lo));
  }
  return true;
}

}  // namespace rdmx::wqetool
