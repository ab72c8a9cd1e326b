// The C API for RPC-over-RDMA (include/rdmx/rdmx_rpcrdma.h): the codec and windows as chunks,
// over rdmx::rpcrdma. The C header structs are converted field by field (only the entries the
// counts use), so their layout is the C header's own.
#include <rdmx/rdmx_rpcrdma.h>

#include <array>
#include <cstring>
#include <new>

#include <infiniband/mlx5dv.h>

#include <rdmx/rpcrdma/chunks.hpp>
#include <rdmx/rpcrdma/cm_private.hpp>
#include <rdmx/rpcrdma/codec.hpp>

#include "capi_internal.hpp"

namespace rpc = rdmx::rpcrdma;
using rdmx::Errc;

namespace {

#define RDMX_SAME(c, e) static_assert(int{c} == static_cast<int>(rpc::Error::e), #c)
RDMX_SAME(RDMX_RPCRDMA_OK, kOk);
RDMX_SAME(RDMX_RPCRDMA_ETRUNCATED, kTruncated);
RDMX_SAME(RDMX_RPCRDMA_EVERSION, kBadVersion);
RDMX_SAME(RDMX_RPCRDMA_EPROC, kBadProc);
RDMX_SAME(RDMX_RPCRDMA_EDEPRECATED, kDeprecatedProc);
RDMX_SAME(RDMX_RPCRDMA_EDISCRIMINATOR, kBadDiscriminator);
RDMX_SAME(RDMX_RPCRDMA_ETOOMANYSEGMENTS, kTooManySegments);
RDMX_SAME(RDMX_RPCRDMA_ETOOMANYCHUNKS, kTooManyChunks);
RDMX_SAME(RDMX_RPCRDMA_ECOUNT, kCountPastBuffer);
RDMX_SAME(RDMX_RPCRDMA_EZEROLENGTH, kZeroLengthSegment);
RDMX_SAME(RDMX_RPCRDMA_EEMPTYCHUNK, kEmptyChunk);
RDMX_SAME(RDMX_RPCRDMA_EPOSITION, kMisalignedPosition);
RDMX_SAME(RDMX_RPCRDMA_ENOMSG, kNoMsgWithoutChunks);
RDMX_SAME(RDMX_RPCRDMA_ECHUNKSINERROR, kChunksInError);
RDMX_SAME(RDMX_RPCRDMA_EERRCODE, kBadErrorCode);
RDMX_SAME(RDMX_RPCRDMA_EVERSRANGE, kBadVersionRange);
RDMX_SAME(RDMX_RPCRDMA_ETRAILING, kTrailingBytes);
RDMX_SAME(RDMX_RPCRDMA_ETOOLONG, kTooLong);
RDMX_SAME(RDMX_RPCRDMA_ENOROOM, kNoRoom);
RDMX_SAME(RDMX_RPCRDMA_EDIRECTION, kWrongDirection);
#undef RDMX_SAME
static_assert(rpc::kNumErrors == RDMX_RPCRDMA_EDIRECTION + 1, "an Error without a C code");
static_assert(RDMX_RPCRDMA_MAX_SEGMENTS == rpc::kMaxSegments &&
              RDMX_RPCRDMA_MAX_READ_SEGMENTS == rpc::kMaxReadSegments &&
              RDMX_RPCRDMA_MAX_WRITE_CHUNKS == rpc::kMaxWriteChunks &&
              RDMX_RPCRDMA_MAX_CALL_WINDOWS == rpc::kMaxCallWindows &&
              RDMX_RPCRDMA_INLINE_THRESHOLD == rpc::kDefaultInlineThreshold);
static_assert(RDMX_RPCRDMA_ROLE_ANY == static_cast<int>(rpc::Role::kAny) &&
              RDMX_RPCRDMA_ROLE_CALL == static_cast<int>(rpc::Role::kCall) &&
              RDMX_RPCRDMA_ROLE_REPLY == static_cast<int>(rpc::Role::kReply));

bool role_of(int role, rpc::Role* out) noexcept {
  if (role < RDMX_RPCRDMA_ROLE_ANY || role > RDMX_RPCRDMA_ROLE_REPLY) return false;
  *out = static_cast<rpc::Role>(role);
  return true;
}
uint32_t threshold_of(uint32_t t) noexcept {
  return t ? t : rpc::kDefaultInlineThreshold;
}

rpc::Segment from_c(const rdmx_rpcrdma_segment& s) noexcept {
  return {s.handle, s.length, s.offset};
}
rdmx_rpcrdma_segment to_c(const rpc::Segment& s) noexcept {
  rdmx_rpcrdma_segment c;
  c.handle = s.handle;
  c.length = s.length;
  c.offset = s.offset;
  return c;
}
// Counts beyond the capacities are kept as they are (so encode refuses them), entries clamped.
void from_c(const rdmx_rpcrdma_chunk& c, rpc::Chunk* out) noexcept {
  out->n_segments = c.n_segments;
  for (uint32_t i = 0; i < c.n_segments && i < rpc::kMaxSegments; ++i)
    out->segments[i] = from_c(c.segments[i]);
}
void to_c(const rpc::Chunk& c, rdmx_rpcrdma_chunk* out) noexcept {
  out->n_segments = c.n_segments;
  out->reserved = 0;
  for (uint32_t i = 0; i < c.n_segments; ++i) out->segments[i] = to_c(c.segments[i]);
}

}  // namespace

struct rdmx_rpcrdma_chunks {
  rdmx::win::PollCore* pc = nullptr;
  rpc::CallChunks chunks;
  rpc::ChunkStats stats;
};

extern "C" {

void rdmx_rpcrdma_header_init(rdmx_rpcrdma_header* h) {
  if (!h) return;
  std::memset(h, 0, sizeof(*h));
  h->vers = RDMX_RPCRDMA_VERSION;
  h->proc = RDMX_RDMA_MSG;
}

int rdmx_rpcrdma_decode(const void* msg, size_t len, int role, uint32_t inline_threshold,
                        rdmx_rpcrdma_header* out, uint32_t* at) {
  rpc::Role r;
  if ((!msg && len) || !out || !role_of(role, &r)) return -RDMX_RPCRDMA_EARG;
  rpc::Header h;
  const rpc::CodecResult res =
      rpc::decode({static_cast<const uint8_t*>(msg), len}, h, r, threshold_of(inline_threshold));
  if (!res.ok()) {
    if (at) *at = res.length;
    return -static_cast<int>(res.error);
  }
  out->xid = h.xid;
  out->vers = h.vers;
  out->credits = h.credits;
  out->proc = static_cast<uint32_t>(h.proc);
  out->n_reads = h.n_reads;
  out->n_writes = h.n_writes;
  out->has_reply = h.has_reply;
  out->err = h.proc == rpc::Proc::kError ? static_cast<uint32_t>(h.err) : 0;
  out->vers_low = h.proc == rpc::Proc::kError ? h.vers_low : 0;
  out->vers_high = h.proc == rpc::Proc::kError ? h.vers_high : 0;
  for (uint32_t i = 0; i < h.n_reads; ++i) {
    out->reads[i].position = h.reads[i].position;
    out->reads[i].reserved = 0;
    out->reads[i].target = to_c(h.reads[i].target);
  }
  for (uint32_t i = 0; i < h.n_writes; ++i) to_c(h.writes[i], &out->writes[i]);
  if (h.has_reply)
    to_c(h.reply, &out->reply);
  else
    out->reply.n_segments = 0;
  return static_cast<int>(res.length);
}

int rdmx_rpcrdma_encode(const rdmx_rpcrdma_header* in, int role, uint32_t inline_threshold,
                        void* buf, size_t cap) {
  rpc::Role r;
  if (!in || (!buf && cap) || !role_of(role, &r)) return -RDMX_RPCRDMA_EARG;
  if (in->has_reply > 1) return -RDMX_RPCRDMA_EDISCRIMINATOR;
  rpc::Header h;
  h.xid = in->xid;
  h.vers = in->vers;
  h.credits = in->credits;
  h.proc = static_cast<rpc::Proc>(in->proc);
  if (h.proc == rpc::Proc::kError) {
    h.err = static_cast<rpc::ErrCode>(in->err);
    h.vers_low = in->vers_low;
    h.vers_high = in->vers_high;
  }
  h.n_reads = in->n_reads;
  for (uint32_t i = 0; i < in->n_reads && i < rpc::kMaxReadSegments; ++i)
    h.reads[i] = {in->reads[i].position, from_c(in->reads[i].target)};
  h.n_writes = in->n_writes;
  for (uint32_t i = 0; i < in->n_writes && i < rpc::kMaxWriteChunks; ++i)
    from_c(in->writes[i], &h.writes[i]);
  h.has_reply = in->has_reply == 1;
  if (h.has_reply) from_c(in->reply, &h.reply);
  const rpc::CodecResult res =
      rpc::encode(h, {static_cast<uint8_t*>(buf), cap}, r, threshold_of(inline_threshold));
  return res.ok() ? static_cast<int>(res.length) : -static_cast<int>(res.error);
}

int rdmx_rpcrdma_peek_xid(const void* msg, size_t len, uint32_t* xid) {
  if ((!msg && len) || !xid) return -RDMX_RPCRDMA_EARG;
  return rpc::peek_xid({static_cast<const uint8_t*>(msg), len}, xid) ? 0 : -RDMX_RPCRDMA_ETRUNCATED;
}

const char* rdmx_rpcrdma_strerror(int err) {
  const int e = err < 0 ? -err : err;
  if (e == RDMX_RPCRDMA_EARG) return "a NULL pointer or an unknown role";
  if (e >= static_cast<int>(rpc::kNumErrors)) return "unknown error";
  return rpc::error_text(static_cast<rpc::Error>(e));
}

const char* rdmx_rpcrdma_errname(int err) {
  const int e = err < 0 ? -err : err;
  if (e == RDMX_RPCRDMA_EARG) return "bad-argument";
  if (e >= static_cast<int>(rpc::kNumErrors)) return "unknown";
  return rpc::error_name(static_cast<rpc::Error>(e));
}

int rdmx_rpcrdma_cm_private_encode(const rdmx_rpcrdma_cm_private* p, uint8_t* out) {
  if (!p || !out) return -RDMX_RPCRDMA_EARG;
  rpc::CmPrivate c;
  c.remote_invalidation = p->remote_invalidation != 0;
  c.inline_send = p->inline_send;
  c.inline_recv = p->inline_recv;
  static_assert(RDMX_RPCRDMA_CM_PRIVATE_BYTES == rpc::kCmPrivateBytes);
  return rpc::encode_cm_private(c,
                                std::span<uint8_t, rpc::kCmPrivateBytes>(out, rpc::kCmPrivateBytes))
             ? 0
             : -RDMX_RPCRDMA_EARG;
}

void rdmx_rpcrdma_cm_private_decode(const void* in, size_t len, rdmx_rpcrdma_cm_private* out) {
  if (!out) return;
  const rpc::CmPrivate c = rpc::decode_cm_private({static_cast<const uint8_t*>(in), in ? len : 0});
  out->present = c.present;
  out->remote_invalidation = c.remote_invalidation;
  out->inline_send = c.inline_send;
  out->inline_recv = c.inline_recv;
}

int rdmx_rpcrdma_chunks_create(rdmx_core* core, rdmx_rpcrdma_chunks** out) {
  if (!core || !out) return -RDMX_EINVAL;
  auto* ch = new (std::nothrow) rdmx_rpcrdma_chunks;
  if (!ch) return -RDMX_ENOMEM;
  ch->pc = rdmx::capi::poll_core_of(core);
  *out = ch;
  return 0;
}

void rdmx_rpcrdma_chunks_destroy(rdmx_rpcrdma_chunks* ch) {
  delete ch;
}

int rdmx_rpcrdma_chunks_map(rdmx_rpcrdma_chunks* ch, const uint64_t* pages, uint32_t n_pages,
                            uint32_t access, uint32_t first_byte_offset, uint64_t length,
                            rdmx_rpcrdma_segment* out) {
  if (!ch || (!pages && n_pages) || !out) return -RDMX_EINVAL;
  rpc::Segment s;
  const Errc e =
      ch->chunks.map(*ch->pc, {pages, n_pages}, access, first_byte_offset, length, &s, ch->stats);
  if (e != Errc::kOk) return -static_cast<int>(e);
  *out = to_c(s);
  return 0;
}

int rdmx_rpcrdma_chunks_map_interleaved(rdmx_rpcrdma_chunks* ch, const rdmx_interleaved_part* parts,
                                        uint32_t n_parts, uint32_t blocks, uint32_t access,
                                        rdmx_rpcrdma_segment* out) {
  if (!ch || (!parts && n_parts) || !out) return -RDMX_EINVAL;
  std::array<rdmx::win::InterleavedPart, rdmx::mlx5::prm::kMaxInlineKlm> p;
  if (n_parts >= p.size()) return -RDMX_ETOOMANYPAGES;  // as rdmx_map_interleaved
  for (uint32_t i = 0; i < n_parts; ++i) p[i] = {parts[i].addr, parts[i].bytes, parts[i].skip};
  rpc::Segment s;
  const Errc e = ch->chunks.map_interleaved(*ch->pc, {p.data(), size_t{n_parts}}, blocks, access,
                                            &s, ch->stats);
  if (e != Errc::kOk) return -static_cast<int>(e);
  *out = to_c(s);
  return 0;
}

int rdmx_rpcrdma_chunks_retire(rdmx_rpcrdma_chunks* ch, const rdmx_completion* reply,
                               int remote_invalidation) {
  if (!ch) return -RDMX_EINVAL;
  rdmx::mlx5::Completion c;
  if (reply) {
    c.cookie = reply->cookie;
    c.byte_len = reply->bytes;
    c.imm = reply->imm;
    c.status = reply->status;
    c.recv = (reply->flags & RDMX_WC_RECV) != 0;
    c.cqe_opcode =
        (reply->flags & RDMX_WC_INVALIDATED) ? MLX5_CQE_RESP_SEND_INV : MLX5_CQE_RESP_SEND;
  }
  const Errc e =
      ch->chunks.retire(*ch->pc, reply ? &c : nullptr, remote_invalidation != 0, ch->stats);
  return -static_cast<int>(e);
}

int rdmx_rpcrdma_chunks_done(const rdmx_rpcrdma_chunks* ch) {
  return ch && ch->chunks.done(*ch->pc) ? 1 : 0;
}

int rdmx_rpcrdma_chunks_reset(rdmx_rpcrdma_chunks* ch) {
  if (!ch) return -RDMX_EINVAL;
  return -static_cast<int>(ch->chunks.reset(*ch->pc));
}

uint32_t rdmx_rpcrdma_chunks_count(const rdmx_rpcrdma_chunks* ch) {
  return ch ? ch->chunks.n_windows() : 0;
}

int rdmx_rpcrdma_chunks_stats(const rdmx_rpcrdma_chunks* ch, rdmx_rpcrdma_chunk_stats* out) {
  if (!ch || !out) return -RDMX_EINVAL;
  out->maps = ch->stats.maps;
  out->remote_invalidations = ch->stats.remote_invalidations;
  out->local_invalidations = ch->stats.local_invalidations;
  out->unagreed_remote_invalidations = ch->stats.unagreed_remote_invalidations;
  out->already_invalid = ch->stats.already_invalid;
  return 0;
}

}  // extern "C"
