// RPC-over-RDMA version 1 header codec (rdmx/rpcrdma/codec.hpp). One walker does both passes of
// decode: a checking pass that writes nothing, then a filling pass over bytes known to be good,
// so a refused header leaves the caller's Header untouched. Encode validates the Header first
// with the same rules, then writes.
#include <rdmx/rpcrdma/codec.hpp>

#include <cstring>

namespace rdmx::rpcrdma {

namespace {

uint32_t load32(const uint8_t* p) noexcept {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return __builtin_bswap32(v);
}
void store32(uint8_t* p, uint32_t v) noexcept {
  v = __builtin_bswap32(v);
  std::memcpy(p, &v, 4);
}

// A cursor over the received bytes. Every get() is bounds-checked.
struct Reader {
  const uint8_t* p;
  uint32_t size;
  uint32_t off = 0;
  bool get(uint32_t* v) noexcept {
    if (size - off < 4) return false;
    *v = load32(p + off);
    off += 4;
    return true;
  }
  uint32_t left() const noexcept { return size - off; }
};

CodecResult refuse_at(Error e, uint32_t at) noexcept {
  return CodecResult{e, at};
}

// The four fixed words: xid, vers, credits, proc (RFC 8166 section 4.2.1).
template <bool kFill>
CodecResult walk_fixed(Reader& r, Header& h, uint32_t* proc_out) noexcept {
  uint32_t xid, vers, credits, proc;
  if (!r.get(&xid)) return refuse_at(Error::kTruncated, r.off);
  if (!r.get(&vers)) return refuse_at(Error::kTruncated, r.off);
  if (vers != kVersion) return refuse_at(Error::kBadVersion, 4);
  if (!r.get(&credits)) return refuse_at(Error::kTruncated, r.off);
  if (!r.get(&proc)) return refuse_at(Error::kTruncated, r.off);
  if (proc == static_cast<uint32_t>(Proc::kMsgp) || proc == static_cast<uint32_t>(Proc::kDone))
    return refuse_at(Error::kDeprecatedProc, 12);
  if (proc != static_cast<uint32_t>(Proc::kMsg) && proc != static_cast<uint32_t>(Proc::kNoMsg) &&
      proc != static_cast<uint32_t>(Proc::kError))
    return refuse_at(Error::kBadProc, 12);
  if constexpr (kFill) {
    h.xid = xid;
    h.vers = vers;
    h.credits = credits;
    h.proc = static_cast<Proc>(proc);
  }
  *proc_out = proc;
  return {Error::kOk, r.off};
}

// The body of an RDMA_ERROR (a reply only): the error code, the version range of ERR_VERS.
template <bool kFill>
CodecResult walk_error(Reader& r, Header& h, Role role) noexcept {
  if (role == Role::kCall) return refuse_at(Error::kWrongDirection, 12);
  uint32_t err;
  const uint32_t at = r.off;
  if (!r.get(&err)) return refuse_at(Error::kTruncated, at);
  if (err == static_cast<uint32_t>(ErrCode::kVers)) {
    uint32_t low, high;
    if (!r.get(&low)) return refuse_at(Error::kTruncated, r.off);
    if (!r.get(&high)) return refuse_at(Error::kTruncated, r.off);
    if (low > high) return refuse_at(Error::kBadVersionRange, at + 4);
    if constexpr (kFill) {
      h.vers_low = low;
      h.vers_high = high;
    }
  } else if (err != static_cast<uint32_t>(ErrCode::kChunk)) {
    return refuse_at(Error::kBadErrorCode, at);
  }
  // RDMA_ERROR carries nothing after its body: no chunk lists, no RPC message.
  if (r.left()) return refuse_at(Error::kTrailingBytes, r.off);
  if constexpr (kFill) {
    h.err = static_cast<ErrCode>(err);
    h.n_reads = h.n_writes = 0;
    h.has_reply = false;
  }
  return {Error::kOk, r.off};
}

// Reads a segment's three fields (the offset as an XDR hyper: high word first).
bool get_segment(Reader& r, Segment* s) noexcept {
  uint32_t hi, lo;
  if (!r.get(&s->handle) || !r.get(&s->length) || !r.get(&hi) || !r.get(&lo)) return false;
  s->offset = (uint64_t{hi} << 32) | lo;
  return true;
}

// An optional-data discriminator: RFC 4506 section 4.4 (a boolean is 0 or 1, nothing else).
Error get_more(Reader& r, bool* more) noexcept {
  uint32_t d;
  if (!r.get(&d)) return Error::kTruncated;
  if (d > 1) return Error::kBadDiscriminator;
  *more = d == 1;
  return Error::kOk;
}

// A counted array of segments: a Write chunk or the Reply chunk.
template <bool kFill>
CodecResult get_chunk(Reader& r, Chunk* c, bool call) noexcept {
  uint32_t n;
  const uint32_t at = r.off;
  if (!r.get(&n)) return refuse_at(Error::kTruncated, at);
  if (n > r.left() / kSegmentBytes) return refuse_at(Error::kCountPastBuffer, at);
  if (n > kMaxSegments) return refuse_at(Error::kTooManySegments, at);
  if (n == 0 && call) return refuse_at(Error::kEmptyChunk, at);
  for (uint32_t i = 0; i < n; ++i) {
    Segment s;
    const uint32_t seg_at = r.off;
    get_segment(r, &s);  // cannot fail: n segments fit (checked above)
    if (s.length == 0 && call) return refuse_at(Error::kZeroLengthSegment, seg_at + 4);
    if constexpr (kFill) c->segments[i] = s;
  }
  if constexpr (kFill) c->n_segments = n;
  return {};
}

// The Read list (calls only): its count and whether a segment is at position zero.
template <bool kFill>
CodecResult walk_read_list(Reader& r, Header& h, Role role, uint32_t* n_out,
                           bool* position_zero) noexcept {
  uint32_t n_reads = 0;
  const uint32_t list_at = r.off;
  for (;;) {
    bool more;
    const uint32_t at = r.off;
    if (Error e = get_more(r, &more); e != Error::kOk) return refuse_at(e, at);
    if (!more) break;
    if (role == Role::kReply) return refuse_at(Error::kWrongDirection, list_at);
    if (n_reads == kMaxReadSegments) return refuse_at(Error::kTooManySegments, at);
    ReadSegment rs;
    if (!r.get(&rs.position)) return refuse_at(Error::kTruncated, r.off);
    // XDR items are 4-byte aligned (RFC 4506 section 3), so is every position in the stream.
    if (rs.position % 4) return refuse_at(Error::kMisalignedPosition, at + 4);
    const uint32_t seg_at = r.off;
    if (!get_segment(r, &rs.target)) return refuse_at(Error::kTruncated, seg_at);
    if (rs.target.length == 0) return refuse_at(Error::kZeroLengthSegment, seg_at + 4);
    *position_zero |= rs.position == 0;
    if constexpr (kFill) h.reads[n_reads] = rs;
    ++n_reads;
  }
  *n_out = n_reads;
  return {};
}

// The Write list: its count.
template <bool kFill>
CodecResult walk_write_list(Reader& r, Header& h, bool call, uint32_t* n_out) noexcept {
  uint32_t n_writes = 0;
  for (;;) {
    bool more;
    const uint32_t at = r.off;
    if (Error e = get_more(r, &more); e != Error::kOk) return refuse_at(e, at);
    if (!more) break;
    if (n_writes == kMaxWriteChunks) return refuse_at(Error::kTooManyChunks, at);
    if (CodecResult c = get_chunk<kFill>(r, kFill ? &h.writes[n_writes] : nullptr, call); !c.ok())
      return c;
    ++n_writes;
  }
  *n_out = n_writes;
  return {};
}

// The decode walk. kFill false: check only (h is not written); true: the bytes passed the
// check, fill h.
template <bool kFill>
CodecResult walk(Reader& r, Header& h, Role role) noexcept {
  uint32_t proc;
  if (CodecResult c = walk_fixed<kFill>(r, h, &proc); !c.ok()) return c;
  if (proc == static_cast<uint32_t>(Proc::kError)) return walk_error<kFill>(r, h, role);

  const bool call = role == Role::kCall;
  uint32_t n_reads = 0, n_writes = 0;
  bool position_zero = false;
  if (CodecResult c = walk_read_list<kFill>(r, h, role, &n_reads, &position_zero); !c.ok())
    return c;
  if (CodecResult c = walk_write_list<kFill>(r, h, call, &n_writes); !c.ok()) return c;

  // Reply chunk
  bool has_reply;
  const uint32_t reply_at = r.off;
  if (Error e = get_more(r, &has_reply); e != Error::kOk) return refuse_at(e, reply_at);
  if (has_reply) {
    if (CodecResult c = get_chunk<kFill>(r, kFill ? &h.reply : nullptr, call); !c.ok()) return c;
  }

  if (proc == static_cast<uint32_t>(Proc::kNoMsg)) {
    // RDMA_NOMSG conveys its RPC message in a chunk, never inline (RFC 8166 section 3.5.3): a
    // call's in a Position-Zero Read chunk, a reply's in the Reply chunk.
    const bool carried = role == Role::kCall    ? position_zero
                         : role == Role::kReply ? has_reply
                                                : position_zero || has_reply;
    if (!carried) return refuse_at(Error::kNoMsgWithoutChunks, 12);
    if (r.left()) return refuse_at(Error::kTrailingBytes, r.off);
  }
  if constexpr (kFill) {
    h.n_reads = n_reads;
    h.n_writes = n_writes;
    h.has_reply = has_reply;
    if (!has_reply) h.reply.n_segments = 0;
  }
  return {Error::kOk, r.off};
}

// The decode rules applied to a Header to encode (encode's check pass): what walk() would refuse
// in its bytes, without the byte-level errors encode cannot produce.
CodecResult check(const Header& h, Role role) noexcept {
  auto refuse = [](Error e) noexcept { return CodecResult{e, 0}; };
  if (h.vers != kVersion) return refuse(Error::kBadVersion);
  if (h.proc == Proc::kMsgp || h.proc == Proc::kDone) return refuse(Error::kDeprecatedProc);
  if (h.proc != Proc::kMsg && h.proc != Proc::kNoMsg && h.proc != Proc::kError)
    return refuse(Error::kBadProc);
  if (h.proc == Proc::kError) {
    if (role == Role::kCall) return refuse(Error::kWrongDirection);
    if (h.n_reads || h.n_writes || h.has_reply) return refuse(Error::kChunksInError);
    if (h.err == ErrCode::kVers) {
      if (h.vers_low > h.vers_high) return refuse(Error::kBadVersionRange);
    } else if (h.err != ErrCode::kChunk) {
      return refuse(Error::kBadErrorCode);
    }
    return {};
  }
  const bool call = role == Role::kCall;
  if (h.n_reads > kMaxReadSegments) return refuse(Error::kTooManySegments);
  if (h.n_reads && role == Role::kReply) return refuse(Error::kWrongDirection);
  bool position_zero = false;
  for (uint32_t i = 0; i < h.n_reads; ++i) {
    if (h.reads[i].position % 4) return refuse(Error::kMisalignedPosition);
    if (h.reads[i].target.length == 0) return refuse(Error::kZeroLengthSegment);
    position_zero |= h.reads[i].position == 0;
  }
  auto check_chunk = [&](const Chunk& c) noexcept -> Error {
    if (c.n_segments > kMaxSegments) return Error::kTooManySegments;
    if (c.n_segments == 0 && call) return Error::kEmptyChunk;
    if (call)
      for (const Segment& s : c.view())
        if (s.length == 0) return Error::kZeroLengthSegment;
    return Error::kOk;
  };
  if (h.n_writes > kMaxWriteChunks) return refuse(Error::kTooManyChunks);
  for (uint32_t i = 0; i < h.n_writes; ++i)
    if (Error e = check_chunk(h.writes[i]); e != Error::kOk) return refuse(e);
  if (h.has_reply)
    if (Error e = check_chunk(h.reply); e != Error::kOk) return refuse(e);
  if (h.proc == Proc::kNoMsg) {
    const bool carried = role == Role::kCall    ? position_zero
                         : role == Role::kReply ? h.has_reply
                                                : position_zero || h.has_reply;
    if (!carried) return refuse(Error::kNoMsgWithoutChunks);
  }
  return {};
}

struct Writer {
  uint8_t* p;
  uint32_t off = 0;
  void put(uint32_t v) noexcept {
    store32(p + off, v);
    off += 4;
  }
  void put(const Segment& s) noexcept {
    put(s.handle);
    put(s.length);
    put(static_cast<uint32_t>(s.offset >> 32));
    put(static_cast<uint32_t>(s.offset));
  }
  void put(const Chunk& c) noexcept {
    put(c.n_segments);
    for (const Segment& s : c.view()) put(s);
  }
};

}  // namespace

uint64_t Chunk::bytes() const noexcept {
  uint64_t n = 0;
  for (const Segment& s : view()) n += s.length;
  return n;
}

bool Chunk::operator==(const Chunk& o) const noexcept {
  if (n_segments != o.n_segments || n_segments > kMaxSegments) return false;
  for (uint32_t i = 0; i < n_segments; ++i)
    if (!(segments[i] == o.segments[i])) return false;
  return true;
}

bool Header::operator==(const Header& o) const noexcept {
  if (xid != o.xid || vers != o.vers || credits != o.credits || proc != o.proc) return false;
  if (proc == Proc::kError) {
    if (err != o.err) return false;
    return err != ErrCode::kVers || (vers_low == o.vers_low && vers_high == o.vers_high);
  }
  if (n_reads != o.n_reads || n_writes != o.n_writes || has_reply != o.has_reply) return false;
  if (n_reads > kMaxReadSegments || n_writes > kMaxWriteChunks) return false;
  for (uint32_t i = 0; i < n_reads; ++i)
    if (!(reads[i] == o.reads[i])) return false;
  for (uint32_t i = 0; i < n_writes; ++i)
    if (!(writes[i] == o.writes[i])) return false;
  return !has_reply || reply == o.reply;
}

CodecResult decode(std::span<const uint8_t> msg, Header& out, Role role,
                   uint32_t inline_threshold) noexcept {
  if (msg.size() > inline_threshold) return {Error::kTooLong, inline_threshold};
  Reader r{msg.data(), static_cast<uint32_t>(msg.size())};
  if (CodecResult c = walk<false>(r, out, role); !c.ok()) return c;
  Reader again{msg.data(), static_cast<uint32_t>(msg.size())};
  return walk<true>(again, out, role);
}

uint32_t encoded_size(const Header& h) noexcept {
  if (h.proc == Proc::kError) return kFixedBytes + 4 + (h.err == ErrCode::kVers ? 8 : 0);
  auto chunk = [](const Chunk& c) noexcept {
    return 4 + (c.n_segments < kMaxSegments ? c.n_segments : kMaxSegments) * kSegmentBytes;
  };
  uint32_t n = kFixedBytes;
  const uint32_t reads = h.n_reads < kMaxReadSegments ? h.n_reads : kMaxReadSegments;
  n += reads * (8 + kSegmentBytes) + 4;
  const uint32_t writes = h.n_writes < kMaxWriteChunks ? h.n_writes : kMaxWriteChunks;
  for (uint32_t i = 0; i < writes; ++i) n += 4 + chunk(h.writes[i]);
  n += 4;  // the Write list's end
  n += 4 + (h.has_reply ? chunk(h.reply) : 0);
  return n;
}

CodecResult encode(const Header& h, std::span<uint8_t> buf, Role role,
                   uint32_t inline_threshold) noexcept {
  if (CodecResult c = check(h, role); !c.ok()) return c;
  const uint32_t size = encoded_size(h);
  if (size > inline_threshold) return {Error::kTooLong, inline_threshold};
  if (size > buf.size()) return {Error::kNoRoom, static_cast<uint32_t>(buf.size())};
  Writer w{buf.data()};
  w.put(h.xid);
  w.put(h.vers);
  w.put(h.credits);
  w.put(static_cast<uint32_t>(h.proc));
  if (h.proc == Proc::kError) {
    w.put(static_cast<uint32_t>(h.err));
    if (h.err == ErrCode::kVers) {
      w.put(h.vers_low);
      w.put(h.vers_high);
    }
    return {Error::kOk, w.off};
  }
  for (uint32_t i = 0; i < h.n_reads; ++i) {
    w.put(1);
    w.put(h.reads[i].position);
    w.put(h.reads[i].target);
  }
  w.put(0);
  for (uint32_t i = 0; i < h.n_writes; ++i) {
    w.put(1);
    w.put(h.writes[i]);
  }
  w.put(0);
  w.put(h.has_reply ? 1 : 0);
  if (h.has_reply) w.put(h.reply);
  return {Error::kOk, w.off};
}

bool peek_xid(std::span<const uint8_t> msg, uint32_t* xid) noexcept {
  if (msg.size() < 4) return false;
  *xid = load32(msg.data());
  return true;
}

Header error_reply(uint32_t xid, uint32_t credits, ErrCode err) noexcept {
  Header h;
  h.xid = xid;
  h.credits = credits;
  h.proc = Proc::kError;
  h.err = err;
  h.vers_low = h.vers_high = kVersion;
  return h;
}

const char* error_name(Error e) noexcept {
  switch (e) {
    case Error::kOk:
      return "ok";
    case Error::kTruncated:
      return "truncated";
    case Error::kBadVersion:
      return "bad-version";
    case Error::kBadProc:
      return "bad-proc";
    case Error::kDeprecatedProc:
      return "deprecated-proc";
    case Error::kBadDiscriminator:
      return "bad-discriminator";
    case Error::kTooManySegments:
      return "too-many-segments";
    case Error::kTooManyChunks:
      return "too-many-chunks";
    case Error::kCountPastBuffer:
      return "count-past-buffer";
    case Error::kZeroLengthSegment:
      return "zero-length-segment";
    case Error::kEmptyChunk:
      return "empty-chunk";
    case Error::kMisalignedPosition:
      return "misaligned-position";
    case Error::kNoMsgWithoutChunks:
      return "nomsg-without-chunks";
    case Error::kChunksInError:
      return "chunks-in-error";
    case Error::kBadErrorCode:
      return "bad-error-code";
    case Error::kBadVersionRange:
      return "bad-version-range";
    case Error::kTrailingBytes:
      return "trailing-bytes";
    case Error::kTooLong:
      return "too-long";
    case Error::kNoRoom:
      return "no-room";
    case Error::kWrongDirection:
      return "wrong-direction";
  }
  return "unknown";
}

const char* error_text(Error e) noexcept {
  switch (e) {
    case Error::kOk:
      return "no error";
    case Error::kTruncated:
      return "the header ends inside a field";
    case Error::kBadVersion:
      return "rdma_vers is not 1 (RPC-over-RDMA version 1)";
    case Error::kBadProc:
      return "rdma_proc is not RDMA_MSG, RDMA_NOMSG or RDMA_ERROR";
    case Error::kDeprecatedProc:
      return "RDMA_MSGP and RDMA_DONE are deprecated in version 1";
    case Error::kBadDiscriminator:
      return "a list discriminator is neither 0 nor 1";
    case Error::kTooManySegments:
      return "a chunk or the Read list has more segments than held";
    case Error::kTooManyChunks:
      return "the Write list has more chunks than held";
    case Error::kCountPastBuffer:
      return "a segment count runs past the end of the header";
    case Error::kZeroLengthSegment:
      return "a segment of length 0 where none is allowed";
    case Error::kEmptyChunk:
      return "a call's Write or Reply chunk has no segment";
    case Error::kMisalignedPosition:
      return "a Read segment's XDR position is not 4-byte aligned";
    case Error::kNoMsgWithoutChunks:
      return "RDMA_NOMSG without the chunk that carries its RPC message";
    case Error::kChunksInError:
      return "an RDMA_ERROR carries no chunk list";
    case Error::kBadErrorCode:
      return "RDMA_ERROR's code is neither ERR_VERS nor ERR_CHUNK";
    case Error::kBadVersionRange:
      return "ERR_VERS names a lowest version above its highest";
    case Error::kTrailingBytes:
      return "bytes follow an RDMA_ERROR or RDMA_NOMSG header";
    case Error::kTooLong:
      return "longer than the inline threshold";
    case Error::kNoRoom:
      return "the buffer is shorter than the header";
    case Error::kWrongDirection:
      return "a Read list in a reply, or RDMA_ERROR in a call";
  }
  return "unknown error";
}

}  // namespace rdmx::rpcrdma
