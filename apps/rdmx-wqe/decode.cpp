// rdmx-wqe decode: WQEBBs (hex) -> every segment's fields, through prm::decode_wqe, the
// decoder the emulated device's interpreter and the fuzz targets use. This file only names
// what the decoder returns; it reads no WQE byte itself except to copy inline data through
// prm::copy_from_ring.
#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <infiniband/mlx5dv.h>
#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/mlx5/prm/decode.hpp>
#include <rdmx/mlx5/prm/defs.hpp>
#include <rdmx/mlx5/prm/wqe.hpp>

#include "json_fields.hpp"
#include "tool.hpp"

namespace rdmx::wqetool {

namespace prm = rdmx::mlx5::prm;

namespace {

constexpr size_t kMaxDecodeWqebbs = 1u << 16;

std::string hex(uint64_t v, int width = 0) {
  char b[32];
  std::snprintf(b, sizeof b, "0x%0*llx", width, static_cast<unsigned long long>(v));
  return b;
}

// ---- names -------------------------------------------------------------------------------
const char* ce_name(uint8_t fm_ce_se) {
  switch ((fm_ce_se & prm::kCeMask) >> 2) {
    case 0:
      return "error-only";
    case 1:
      return "first-error-only";
    case 2:
      return "always";  // CQ_UPDATE
    default:
      return "always+eqe";
  }
}

const char* imm_meaning(uint8_t opcode) {
  switch (opcode) {
    case MLX5_OPCODE_UMR:
      return "mkey";
    case MLX5_OPCODE_SEND_INVAL:
      return "invalidate_rkey";
    case MLX5_OPCODE_SEND_IMM:
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      return "imm_data";
    default:
      return "unused";
  }
}

std::vector<std::string> umr_flag_names(uint8_t f) {
  std::vector<std::string> n;
  if (f & MLX5_WQE_UMR_CTRL_FLAG_INLINE) n.push_back("INLINE");
  switch (f & prm::kUmrFlagCheckMask) {
    case prm::kUmrFlagFailIfNotFree:
      n.push_back("CHECK_FREE(fail-if-not-free)");
      break;
    case prm::kUmrFlagFailIfFree:
      n.push_back("CHECK_NOT_FREE(fail-if-free)");
      break;
    case prm::kUmrFlagCheckMask:
      n.push_back("CHECK(reserved 3)");
      break;
    default:
      break;
  }
  if (f & MLX5_WQE_UMR_CTRL_FLAG_TRNSLATION_OFFSET) n.push_back("TRANSLATION_OFFSET");
  if (f & MLX5_WQE_UMR_CTRL_FLAG_CHECK_QPN) n.push_back("CHECK_QPN");
  if (f & 0x07) n.push_back("reserved " + hex(f & 0x07));
  return n;
}

std::vector<std::string> mask_names(uint64_t m) {
  struct Bit {
    int bit;
    const char* name;
  };
  static constexpr Bit kBits[] = {
      {0, "LEN"},
      {1, "PAGE_SIZE"},
      {6, "START_ADDR"},
      {7, "PD"},
      {8, "EN_RINVAL"},
      {9, "SIG_ERR"},
      {12, "BSF_EN"},
      {13, "KEY"},
      {14, "QPN"},
      {17, "LR"},
      {18, "LW"},
      {19, "RR"},
      {20, "RW"},
      {21, "A"},
      {23, "SMALL_FENCE"},
      {25, "RELAXED_ORDERING_WRITE"},
      {29, "FREE"},
      {42, "PAGE_SIZE_5"},
      {47, "RELAXED_ORDERING_READ"},
  };
  std::vector<std::string> n;
  uint64_t known = 0;
  for (const Bit& b : kBits) {
    known |= 1ull << b.bit;
    if (m & (1ull << b.bit)) n.push_back(b.name);
  }
  for (int i = 0; i < 64; ++i)
    if ((m & ~known) & (1ull << i)) n.push_back("bit" + std::to_string(i));
  return n;
}

std::vector<std::string> access_names(uint8_t a) {
  std::vector<std::string> n;
  if (a & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_ATOMIC) n.push_back("A");
  if (a & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_WRITE) n.push_back("RW");
  if (a & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_REMOTE_READ) n.push_back("RR");
  if (a & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_WRITE) n.push_back("LW");
  if (a & MLX5_WQE_MKEY_CONTEXT_ACCESS_FLAGS_LOCAL_READ) n.push_back("LR");
  return n;
}

const char* access_mode_name(uint8_t m) {
  switch (m) {
    case 0:
      return "PA";
    case prm::kAccessModeMtt:
      return "MTT";
    case prm::kAccessModeKlm:
      return "KLM";
    case prm::kAccessModeKsm:
      return "KSM";
    default:
      return "other";
  }
}

std::string join(const std::vector<std::string>& v, const char* sep = "|") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s.empty() ? "-" : s;
}

bool zero_klm(const prm::KlmFields& k) {
  return !k.byte_count && !k.mkey && !k.address;
}

// A repeat block (mlx5dv_wr_mr_interleaved) is recognised in an inline translation whose
// first 16-byte entry carries op 0x400 and a num_ent that matches klm_octowords.
bool is_repeat_block(const prm::DecodedWqe& d) {
  if (!d.has_umr || !d.umr.inline_list() || d.n_klm == 0) return false;
  const prm::KlmFields& h = d.klm[0];
  const uint32_t num_ent = static_cast<uint32_t>(h.address & 0xffff);
  const uint32_t rsvd = static_cast<uint32_t>((h.address >> 16) & 0xffff);
  return h.mkey == prm::kRepeatBlockOp && rsvd == 0 && prm::align4(num_ent + 1) == d.n_klm;
}

// ---- one WQE -> JSON and table -------------------------------------------------------------
class Table {
 public:
  void title(const std::string& t) {
    os_ << t << "\n";
    head();
  }
  void row(uint32_t off, const char* seg, const std::string& field, const std::string& value,
           const std::string& note = "") {
    char b[64];
    std::snprintf(b, sizeof b, "  0x%03x  %-9s ", off, seg);
    os_ << b;
    pad(field, 25);
    pad(value, 22);
    os_ << note;
    // trim trailing spaces
    std::string s = os_.str();
    while (!s.empty() && s.back() == ' ') s.pop_back();
    os_.str("");
    os_ << s << "\n";
  }
  void line(const std::string& s) { os_ << s << "\n"; }
  std::string str() const { return os_.str(); }

 private:
  void head() {
    os_ << "  off    segment   field                     value                  meaning\n";
  }
  void pad(const std::string& s, size_t w) {
    os_ << s;
    for (size_t i = s.size(); i < w; ++i) os_ << ' ';
    os_ << ' ';
  }
  std::ostringstream os_;
};

Json klm_json(const prm::KlmFields& k) {
  return Json{{"byte_count", k.byte_count}, {"mkey", k.mkey}, {"address", k.address}};
}

// The control segment (DS 0).
void describe_ctrl(const prm::DecodedWqe& d, uint32_t pos, Json& j, Table& t) {
  const prm::CtrlFields& c = d.ctrl;
  const std::string opname(prm::wqe_opcode_name(c.opcode));
  j["wqebb"] = pos;
  j["n_wqebb"] = d.n_wqebb;
  j["ctrl"] = Json{{"opcode", opname},
                   {"opcode_value", c.opcode},
                   {"opmod", c.opmod},
                   {"wqe_index", c.wqe_index},
                   {"qpn", c.qpn},
                   {"ds", c.ds},
                   {"signature", c.signature},
                   {"fm_ce_se", c.fm_ce_se},
                   {"fence", std::string(prm::fence_name(c.fm_ce_se))},
                   {"ce", ce_name(c.fm_ce_se)},
                   {"signaled", c.signaled()},
                   {"solicited", c.solicited()},
                   {"imm", c.imm},
                   {"imm_meaning", imm_meaning(c.opcode)}};
  t.title("WQE at WQEBB " + std::to_string(pos) + ": " + opname + ", " + std::to_string(c.ds) +
          " DS, " + std::to_string(d.n_wqebb) + " WQEBB" + (d.n_wqebb == 1 ? "" : "s"));
  t.row(0x00, "ctrl", "opmod", hex(c.opmod, 2));
  t.row(0x01, "ctrl", "wqe_index", std::to_string(c.wqe_index), hex(c.wqe_index, 4));
  t.row(0x03, "ctrl", "opcode", hex(c.opcode, 2), opname);
  t.row(0x04, "ctrl", "qpn", hex(c.qpn, 6), std::to_string(c.qpn));
  t.row(0x07, "ctrl", "ds", std::to_string(c.ds),
        std::to_string(c.ds * 16) + " bytes, " + std::to_string(d.n_wqebb) +
            (d.n_wqebb == 1 ? " WQEBB" : " WQEBBs"));
  t.row(0x08, "ctrl", "signature", hex(c.signature, 2));
  t.row(0x0b, "ctrl", "fm_ce_se", hex(c.fm_ce_se, 2),
        std::string("fence ") + std::string(prm::fence_name(c.fm_ce_se)) + ", completion " +
            ce_name(c.fm_ce_se) + (c.solicited() ? ", solicited" : ""));
  t.row(0x0c, "ctrl", "imm", hex(c.imm, 8), imm_meaning(c.opcode));
}

// A UMR's control segment (DS 1).
void describe_umr_ctrl(const prm::UmrCtrlFields& u, Json& j, Table& t) {
  j["umr_ctrl"] = Json{{"flags", u.flags},
                       {"flag_names", umr_flag_names(u.flags)},
                       {"klm_octowords", u.klm_octowords},
                       {"translation_offset", u.translation_offset},
                       {"mkey_mask", u.mkey_mask},
                       {"mkey_mask_names", mask_names(u.mkey_mask)}};
  t.row(0x10, "umr_ctrl", "flags", hex(u.flags, 2), join(umr_flag_names(u.flags)));
  t.row(0x14, "umr_ctrl", "klm_octowords", std::to_string(u.klm_octowords),
        "translation size " + std::to_string(u.klm_octowords * 16u) + " bytes");
  t.row(0x16, "umr_ctrl", "translation_offset", std::to_string(u.translation_offset));
  t.row(0x18, "umr_ctrl", "mkey_mask", hex(u.mkey_mask, 16), join(mask_names(u.mkey_mask)));
}

// A UMR's mkey context (DS 4-7), each field the mask leaves out marked as ignored.
void describe_mkc(const prm::DecodedWqe& d, Json& j, Table& t) {
  const prm::UmrCtrlFields& u = d.umr;
  const prm::MkcFields& m = d.mkc;
  j["mkey_ctx"] = Json{{"free", m.free},
                       {"access_mode", m.access_mode},
                       {"umr_en", m.umr_en},
                       {"access", m.access},
                       {"access_names", access_names(m.access)},
                       {"qpn", m.qpn},
                       {"key", m.key},
                       {"flags_pd", m.flags_pd},
                       {"start_addr", m.start_addr},
                       {"len", m.len},
                       {"translations_octword_size", m.translations_octword_size},
                       {"log_page_size", m.log_page_size}};
  // Fields the mask does not cover are ignored by the device: say so in the table.
  const auto in = [&](uint64_t bits, std::string note) {
    if (u.mkey_mask & bits) return note;
    return note + (note.empty() ? "" : " ") + "(not in mask: ignored)";
  };
  const uint64_t acc_bits = 0x1full << 17;  // LR LW RR RW A (bits 17-21)
  t.row(0x40, "mkey_ctx", "free", m.free ? "1" : "0",
        in(1ull << 29, m.free ? "mkey invalid" : "mkey valid"));
  t.row(0x40, "mkey_ctx", "access_mode", hex(m.access_mode, 2),
        std::string(access_mode_name(m.access_mode)) + " (set at create)");
  t.row(0x42, "mkey_ctx", "access", hex(m.access, 2),
        in(acc_bits, join(access_names(m.access)) + (m.umr_en ? " umr_en" : "")));
  t.row(0x44, "mkey_ctx", "qpn", hex(m.qpn, 6),
        in(1ull << 14, m.qpn == prm::kMkeyQpnNone ? "no QP" : ""));
  t.row(0x47, "mkey_ctx", "key", hex(m.key, 2), in(1ull << 13, "mkey_7_0 (tag)"));
  t.row(0x4c, "mkey_ctx", "flags_pd", hex(m.flags_pd, 8), in((1ull << 7) | (1ull << 8), ""));
  t.row(0x50, "mkey_ctx", "start_addr", hex(m.start_addr, 16), in(1ull << 6, ""));
  t.row(0x58, "mkey_ctx", "len", std::to_string(m.len), in(1ull << 0, hex(m.len)));
  t.row(0x74, "mkey_ctx", "translations_octword_size", std::to_string(m.translations_octword_size),
        "(set at create)");
  t.row(0x7b, "mkey_ctx", "log_page_size", std::to_string(m.log_page_size), in(1ull << 1, ""));
}

// A repeat-block translation: its header and entries, then the padding.
void describe_repeat_block(const prm::DecodedWqe& d, Json& j, Table& t) {
  const prm::KlmFields& h = d.klm[0];
  const uint32_t num_ent = static_cast<uint32_t>(h.address & 0xffff);
  Json rb{{"byte_count", h.byte_count},
          {"op", h.mkey},
          {"repeat_count", static_cast<uint32_t>(h.address >> 32)},
          {"num_ent", num_ent}};
  t.row(0x80, "repeat", "byte_count", std::to_string(h.byte_count), "bytes per repetition");
  t.row(0x84, "repeat", "op", hex(h.mkey, 8), "repeat block");
  t.row(0x88, "repeat", "repeat_count", std::to_string(h.address >> 32));
  t.row(0x8e, "repeat", "num_ent", std::to_string(num_ent));
  Json ents = Json::array();
  for (uint32_t i = 1; i <= num_ent; ++i) {
    const prm::KlmFields& e = d.klm[i];
    const uint32_t stride = e.byte_count >> 16, bytes = e.byte_count & 0xffff;
    ents.push_back(
        Json{{"stride", stride}, {"byte_count", bytes}, {"mkey", e.mkey}, {"address", e.address}});
    t.row(0x80 + 16 * i, "repeat", "entry " + std::to_string(i - 1),
          std::to_string(bytes) + "/" + std::to_string(stride),
          "bytes/stride, mkey " + hex(e.mkey, 8) + " addr " + hex(e.address, 16));
  }
  rb["entries"] = ents;
  j["repeat_block"] = rb;
  j["translation_pad"] = d.n_klm - 1 - num_ent;
  if (d.n_klm - 1 - num_ent)
    t.row(0x80 + 16 * (num_ent + 1), "repeat", "padding",
          std::to_string(d.n_klm - 1 - num_ent) + " x 16 B");
}

// An inline KLM list: its entries (trailing zero entries, up to 3, as padding).
void describe_klms(const prm::DecodedWqe& d, Json& j, Table& t) {
  uint32_t n = d.n_klm, pad = 0;
  while (n > 0 && pad < 3 && zero_klm(d.klm[n - 1])) --n, ++pad;
  Json klms = Json::array();
  for (uint32_t i = 0; i < n; ++i) {
    klms.push_back(klm_json(d.klm[i]));
    t.row(0x80 + 16 * i, "klm", "entry " + std::to_string(i), std::to_string(d.klm[i].byte_count),
          "bytes, mkey " + hex(d.klm[i].mkey, 8) + " addr " + hex(d.klm[i].address, 16));
  }
  j["klms"] = klms;
  j["translation_pad"] = pad;
  if (pad) t.row(0x80 + 16 * n, "klm", "padding", std::to_string(pad) + " x 16 B");
}

// The data segments: the gather list, or the inline data.
void describe_data(const prm::DecodedWqe& d, const void* ring, uint32_t ring_wqebbs, Json& j,
                   Table& t) {
  if (d.n_sge) {
    const uint32_t first = d.has_raddr ? 2 : 1;
    Json sges = Json::array();
    for (uint32_t i = 0; i < d.n_sge; ++i) {
      sges.push_back(Json{
          {"length", d.sge[i].byte_count}, {"lkey", d.sge[i].mkey}, {"addr", d.sge[i].address}});
      t.row(16 * (first + i), "data", "sge " + std::to_string(i),
            std::to_string(d.sge[i].byte_count),
            "bytes, lkey " + hex(d.sge[i].mkey, 8) + " addr " + hex(d.sge[i].address, 16));
    }
    j["sges"] = sges;
  }
  if (d.has_inline) {
    std::vector<uint8_t> data(d.inline_len);
    if (d.inline_len)
      prm::copy_from_ring(ring, ring_wqebbs, d.inline_ring_offset, data.data(), d.inline_len);
    const std::string h = to_hex(data.data(), data.size());
    j["inline"] = Json{{"byte_count", d.inline_len}, {"data_hex", h}};
    const uint32_t off = 16u * (d.has_raddr ? 2 : 1);
    t.row(off, "inline", "byte_count", std::to_string(d.inline_len), "MLX5_INLINE_SEG set");
    t.row(off + 4, "inline", "data", h.size() > 44 ? h.substr(0, 40) + "..." : h);
  }
}

void describe(const prm::DecodedWqe& d, const void* ring, uint32_t ring_wqebbs, uint32_t pos,
              Json& j, Table& t) {
  describe_ctrl(d, pos, j, t);
  if (d.has_raddr) {
    j["raddr"] = Json{{"remote_addr", d.raddr}, {"rkey", d.rkey}};
    t.row(0x10, "raddr", "remote_addr", hex(d.raddr, 16));
    t.row(0x18, "raddr", "rkey", hex(d.rkey, 8));
  }
  if (d.has_umr) {
    describe_umr_ctrl(d.umr, j, t);
    describe_mkc(d, j, t);
    if (is_repeat_block(d)) {
      describe_repeat_block(d, j, t);
    } else if (d.n_klm) {
      describe_klms(d, j, t);
    }
    if (d.has_klm_ptr) {
      j["klm_pointer"] = klm_json(d.klm_ptr);
      t.row(0x80, "klm_ptr", "byte_count", std::to_string(d.klm_ptr.byte_count));
      t.row(0x84, "klm_ptr", "lkey", hex(d.klm_ptr.mkey, 8));
      t.row(0x88, "klm_ptr", "address", hex(d.klm_ptr.address, 16), "KLM array (2 KiB aligned)");
    }
  }
  describe_data(d, ring, ring_wqebbs, j, t);
}

std::string error_json(const char* rc, const std::string& msg, const Json* wqes = nullptr) {
  Json o;
  o["rc"] = rc;
  o["error"] = msg;
  if (wqes) o["wqes"] = *wqes;
  return o.dump();
}

}  // namespace

LineResult decode_hex(const std::vector<std::string>& hexes, bool pretty) {
  std::vector<uint8_t> bytes, part;
  for (size_t i = 0; i < hexes.size(); ++i) {
    if (!from_hex(hexes[i], part))
      return {false, error_json("EINVAL", "WQEBB argument " + std::to_string(i) +
                                              " is not an even-length hex string")};
    if (part.size() % 64)
      return {false, error_json("EINVAL", "WQEBB argument " + std::to_string(i) + " has " +
                                              std::to_string(part.size()) +
                                              " bytes; a WQEBB is 64 bytes (128 hex digits)")};
    bytes.insert(bytes.end(), part.begin(), part.end());
    if (bytes.size() / 64 > kMaxDecodeWqebbs)
      return {false, error_json("EINVAL", "more than 65536 WQEBBs")};
  }
  const uint32_t n = static_cast<uint32_t>(bytes.size() / 64);
  if (n == 0)
    return {true, pretty ? std::string("(no WQEBBs)\n") : std::string(R"({"rc":0,"wqes":[]})")};
  // The decoder works on a power-of-two ring; the WQEBBs go at slots 0..n-1, in the order given
  // (encode prints them in ring order from sq_pi, so a wrapped WQE reads straight through).
  uint32_t ring_n = 1;
  while (ring_n < n) ring_n <<= 1;
  std::vector<uint64_t> ring(size_t{ring_n} * 8, 0);
  std::memcpy(ring.data(), bytes.data(), bytes.size());

  Json wqes = Json::array();
  Table table;
  uint32_t pos = 0;
  auto d = std::make_unique<prm::DecodedWqe>();
  while (pos < n) {
    const prm::DecodeError e = prm::decode_wqe(ring.data(), ring_n, pos, *d);
    const std::string at = "WQE at WQEBB " + std::to_string(pos);
    if (e == prm::DecodeError::kDsZero || e == prm::DecodeError::kDsBeyondRing ||
        d->n_wqebb > n - pos) {
      const std::string msg =
          at + ": ds " + std::to_string(d->ctrl.ds) + " needs " + std::to_string(d->n_wqebb) +
          " WQEBBs but " + std::to_string(n - pos) + " remain" +
          (e == prm::DecodeError::kDsZero ? " (ds is 0: not a WQE, or a zeroed slot)" : "");
      if (pretty) table.line("error: " + msg);
      return {false, pretty ? table.str() : error_json("EINVAL", msg, &wqes)};
    }
    Json j;
    describe(*d, ring.data(), ring_n, pos, j, table);
    wqes.push_back(j);
    if (e != prm::DecodeError::kOk) {
      const std::string msg =
          at + ": " + std::string(prm::decode_error_name(e)) +
          (e == prm::DecodeError::kUnknownOpcode ? " " + hex(d->ctrl.opcode, 2) : std::string());
      if (pretty) table.line("error: " + msg);
      return {false, pretty ? table.str() : error_json("EINVAL", msg, &wqes)};
    }
    pos += d->n_wqebb;
    if (pretty) table.line("");
  }
  if (pretty) return {true, table.str()};
  Json o;
  o["rc"] = 0;
  o["wqes"] = wqes;
  return {true, o.dump()};
}

LineResult decode_line(std::string_view line, bool pretty) {
  size_t i = 0;
  while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
  std::vector<std::string> hexes;
  if (i < line.size() && (line[i] == '[' || line[i] == '{')) {
    Json j;
    try {
      j = Json::parse(line.begin(), line.end());
    } catch (const Json::exception& e) {
      return {false, error_json("EINVAL", std::string("bad JSON: ") + e.what())};
    }
    const Json* arr = &j;
    if (j.is_object()) {
      auto rc = j.find("rc");
      if (rc != j.end() && !(rc->is_number_integer() && rc->get<int64_t>() == 0)) {
        const std::string why = j.contains("error") && j["error"].is_string()
                                    ? j["error"].get<std::string>()
                                    : std::string("no message");
        return {false, error_json("EINVAL", "input is a rejected encode result: " + why)};
      }
      auto w = j.find("wqebbs");
      if (w == j.end())
        return {false, error_json("EINVAL",
                                  "expected a JSON array of hex WQEBBs or an "
                                  "encode result with \"wqebbs\"")};
      arr = &*w;
    }
    if (!arr->is_array())
      return {false, error_json("EINVAL", "\"wqebbs\" must be an array of hex strings")};
    for (const Json& h : *arr) {
      if (!h.is_string()) return {false, error_json("EINVAL", "every WQEBB must be a hex string")};
      hexes.push_back(h.get<std::string>());
    }
  } else {
    std::istringstream is{std::string(line)};
    std::string tok;
    while (is >> tok) hexes.push_back(tok);
  }
  return decode_hex(hexes, pretty);
}

}  // namespace rdmx::wqetool
