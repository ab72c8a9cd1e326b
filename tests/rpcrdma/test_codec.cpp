// The RPC-over-RDMA version 1 header codec against byte vectors assembled by hand from RFC 8166's
// XDR (section 5): every expected message below is a list of XDR words written out here, never
// produced by the encoder. One refusal test per rule; each checks the error, the offset named and
// that the output was not touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <random>
#include <vector>

#include <rdmx/rpcrdma/codec.hpp>

using namespace rdmx::rpcrdma;

namespace {

// XDR words (RFC 4506 section 4.2: big-endian, 4 bytes each) to bytes.
std::vector<uint8_t> xdr(std::initializer_list<uint32_t> words) {
  std::vector<uint8_t> b;
  for (uint32_t w : words) {
    b.push_back(static_cast<uint8_t>(w >> 24));
    b.push_back(static_cast<uint8_t>(w >> 16));
    b.push_back(static_cast<uint8_t>(w >> 8));
    b.push_back(static_cast<uint8_t>(w));
  }
  return b;
}
std::vector<uint8_t> cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

constexpr uint32_t kXid = 0x8a3c5e01;
constexpr uint32_t MSG = 0, NOMSG = 1, MSGP = 2, DONE = 3, ERROR = 4;

// An RDMA_MSG call with every list used (offsets in the comment are bytes):
//   0 xid | 4 vers 1 | 8 credits 32 | 12 RDMA_MSG
//   Read list: 16 [1, pos 148, seg(0x1201, 8192, 0x0000000100002000)]
//              40 [1, pos 148, seg(0x1302, 100, 0x10)]  64 [0]
//   Write list: 68 [1, count 2, seg(0x2201, 4096, 0), seg(0x2202, 512, 0xfffffffffffffe00)]
//               108 [0]
//   Reply chunk: 112 [1, count 1, seg(0x3301, 1024, 0x40)]  -> header length 136
// clang-format off
std::vector<uint8_t> full_call() {
  return xdr({kXid, 1, 32, MSG,
              1, 148, 0x1201, 8192, 0x00000001, 0x00002000,
              1, 148, 0x1302, 100, 0, 0x10,
              0,
              1, 2, 0x2201, 4096, 0, 0, 0x2202, 512, 0xffffffff, 0xfffffe00,
              0,
              1, 1, 0x3301, 1024, 0, 0x40});
}
// clang-format on
constexpr uint32_t kFullCallLen = 136;

// The Header full_call() describes, written field by field.
Header full_call_header() {
  Header h;
  h.xid = kXid;
  h.credits = 32;
  h.proc = Proc::kMsg;
  h.n_reads = 2;
  h.reads[0] = {148, {0x1201, 8192, 0x100002000ull}};
  h.reads[1] = {148, {0x1302, 100, 0x10}};
  h.n_writes = 1;
  h.writes[0].n_segments = 2;
  h.writes[0].segments[0] = {0x2201, 4096, 0};
  h.writes[0].segments[1] = {0x2202, 512, 0xfffffffffffffe00ull};
  h.has_reply = true;
  h.reply.n_segments = 1;
  h.reply.segments[0] = {0x3301, 1024, 0x40};
  return h;
}

// Decode must refuse with `e` at `at` and leave the output as it was.
void expect_refused(const std::vector<uint8_t>& m, Error e, uint32_t at, Role role = Role::kAny,
                    uint32_t threshold = kDefaultInlineThreshold) {
  Header out;
  std::memset(static_cast<void*>(&out), 0xa5, sizeof(out));
  std::vector<uint8_t> before(sizeof(out));
  std::memcpy(before.data(), &out, sizeof(out));
  const CodecResult r = decode(m, out, role, threshold);
  EXPECT_EQ(r.error, e) << "got " << error_name(r.error) << " (" << error_text(r.error) << ")";
  EXPECT_EQ(r.length, at) << error_name(r.error);
  EXPECT_EQ(std::memcmp(before.data(), &out, sizeof(out)), 0) << "output touched";
}

Header decoded(const std::vector<uint8_t>& m, Role role = Role::kAny, uint32_t* len = nullptr) {
  Header h;
  const CodecResult r = decode(m, h, role);
  EXPECT_TRUE(r.ok()) << error_name(r.error) << " at " << r.length;
  if (len) *len = r.length;
  return h;
}

}  // namespace

// ---- Decoding what RFC 8166's XDR says ------------------------------------------------------

TEST(RpcRdmaDecode, ShortMessage) {
  // RDMA_MSG, no chunks, then the RPC call inline (its first word: the RPC xid).
  const auto m = cat(xdr({kXid, 1, 128, MSG, 0, 0, 0}), xdr({kXid, 0, 2}));
  uint32_t len = 0;
  const Header h = decoded(m, Role::kCall, &len);
  EXPECT_EQ(len, 28u);
  EXPECT_EQ(h.xid, kXid);
  EXPECT_EQ(h.vers, 1u);
  EXPECT_EQ(h.credits, 128u);
  EXPECT_EQ(h.proc, Proc::kMsg);
  EXPECT_EQ(h.n_reads, 0u);
  EXPECT_EQ(h.n_writes, 0u);
  EXPECT_FALSE(h.has_reply);
}

TEST(RpcRdmaDecode, EveryList) {
  const auto m = cat(full_call(), xdr({kXid}));
  uint32_t len = 0;
  const Header h = decoded(m, Role::kCall, &len);
  EXPECT_EQ(len, kFullCallLen);
  EXPECT_TRUE(h == full_call_header());
  EXPECT_EQ(h.reads[0].target.offset, 0x100002000ull);  // the hyper: high word first
  EXPECT_EQ(h.writes[0].segments[1].offset, 0xfffffffffffffe00ull);
  EXPECT_EQ(h.writes[0].bytes(), 4608u);
}

TEST(RpcRdmaDecode, LongCallAndLongReply) {
  // RDMA_NOMSG call: the RPC call in a Position-Zero Read chunk, a Reply chunk for the reply.
  const auto call = xdr({kXid, 1, 8, NOMSG, 1, 0, 0x51, 2048, 0, 0, 0, 0, 1, 1, 0x52, 65536, 0, 0});
  uint32_t len = 0;
  Header h = decoded(call, Role::kCall, &len);
  EXPECT_EQ(len, call.size());
  EXPECT_EQ(h.proc, Proc::kNoMsg);
  ASSERT_EQ(h.n_reads, 1u);
  EXPECT_EQ(h.reads[0].position, 0u);
  // RDMA_NOMSG reply: the Reply chunk comes back with the bytes written.
  const auto reply = xdr({kXid, 1, 8, NOMSG, 0, 0, 1, 1, 0x52, 3000, 0, 0});
  h = decoded(reply, Role::kReply, &len);
  EXPECT_EQ(len, reply.size());
  ASSERT_TRUE(h.has_reply);
  EXPECT_EQ(h.reply.segments[0].length, 3000u);
}

TEST(RpcRdmaDecode, Errors) {
  Header h = decoded(xdr({kXid, 1, 1, ERROR, 1, 1, 1}), Role::kReply);
  EXPECT_EQ(h.proc, Proc::kError);
  EXPECT_EQ(h.err, ErrCode::kVers);
  EXPECT_EQ(h.vers_low, 1u);
  EXPECT_EQ(h.vers_high, 1u);
  uint32_t len = 0;
  h = decoded(xdr({kXid, 1, 1, ERROR, 2}), Role::kReply, &len);
  EXPECT_EQ(h.err, ErrCode::kChunk);
  EXPECT_EQ(len, 20u);
}

// A reply may return an unused Write chunk with its segment lengths set to 0 (RFC 8166 section
// 3.4.6), or with no segment: a call may not.
TEST(RpcRdmaDecode, ReplyMayReturnEmptyWriteChunks) {
  const auto zero_len = xdr({kXid, 1, 1, MSG, 0, 1, 1, 0x61, 0, 0, 0, 0, 0});
  (void)decoded(zero_len, Role::kReply);
  expect_refused(zero_len, Error::kZeroLengthSegment, 32, Role::kCall);
  const auto empty = xdr({kXid, 1, 1, MSG, 0, 1, 0, 0, 0});
  (void)decoded(empty, Role::kReply);
  expect_refused(empty, Error::kEmptyChunk, 24, Role::kCall);
}

// ---- Encoding to the same bytes -------------------------------------------------------------

TEST(RpcRdmaEncode, GoldenBytes) {
  std::vector<uint8_t> buf(1024, 0xee);
  CodecResult r = encode(full_call_header(), buf, Role::kCall);
  ASSERT_TRUE(r.ok()) << error_name(r.error);
  EXPECT_EQ(r.length, kFullCallLen);
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + r.length), full_call());
  EXPECT_EQ(buf[r.length], 0xee) << "wrote past the header";
  EXPECT_EQ(encoded_size(full_call_header()), kFullCallLen);

  r = encode(error_reply(kXid, 3, ErrCode::kVers), buf, Role::kReply);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + r.length),
            xdr({kXid, 1, 3, ERROR, 1, 1, 1}));
  r = encode(error_reply(kXid, 3, ErrCode::kChunk), buf, Role::kReply);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + r.length), xdr({kXid, 1, 3, ERROR, 2}));
  Header nomsg;
  nomsg.xid = kXid;
  nomsg.credits = 8;
  nomsg.proc = Proc::kNoMsg;
  nomsg.has_reply = true;
  nomsg.reply.n_segments = 1;
  nomsg.reply.segments[0] = {0x52, 3000, 0};
  r = encode(nomsg, buf, Role::kReply);
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(std::vector<uint8_t>(buf.begin(), buf.begin() + r.length),
            xdr({kXid, 1, 8, NOMSG, 0, 0, 1, 1, 0x52, 3000, 0, 0}));
}

TEST(RpcRdmaEncode, RoundTrips) {
  std::mt19937_64 rng(11);
  std::vector<uint8_t> buf(kDefaultInlineThreshold);
  int done = 0;
  for (int i = 0; i < 2000; ++i) {
    Header h;
    h.xid = static_cast<uint32_t>(rng());
    h.credits = static_cast<uint32_t>(rng() % 256);
    h.proc = rng() % 4 == 0 ? Proc::kError : (rng() % 2 ? Proc::kMsg : Proc::kNoMsg);
    if (h.proc == Proc::kError) {
      h.err = rng() % 2 ? ErrCode::kVers : ErrCode::kChunk;
      h.vers_low = 1;
      h.vers_high = 1 + static_cast<uint32_t>(rng() % 3);
    } else {
      h.n_reads = static_cast<uint32_t>(rng() % 5);
      for (uint32_t k = 0; k < h.n_reads; ++k)
        h.reads[k] = {
            static_cast<uint32_t>(rng() % 64) * 4,
            {static_cast<uint32_t>(rng()), 1 + static_cast<uint32_t>(rng() % 9000), rng()}};
      h.n_writes = static_cast<uint32_t>(rng() % 3);
      for (uint32_t k = 0; k < h.n_writes; ++k) {
        h.writes[k].n_segments = 1 + static_cast<uint32_t>(rng() % 4);
        for (uint32_t s = 0; s < h.writes[k].n_segments; ++s)
          h.writes[k].segments[s] = {static_cast<uint32_t>(rng()),
                                     static_cast<uint32_t>(rng() % 70000), rng()};
      }
      h.has_reply = rng() % 2;
      h.reply.n_segments = h.has_reply ? 1 + static_cast<uint32_t>(rng() % 3) : 0;
      for (uint32_t s = 0; s < h.reply.n_segments; ++s)
        h.reply.segments[s] = {static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()), rng()};
    }
    const CodecResult e = encode(h, buf);
    if (!e.ok()) {
      // Only what the generator can produce by chance: a NOMSG without its chunk.
      ASSERT_EQ(e.error, Error::kNoMsgWithoutChunks) << error_name(e.error);
      continue;
    }
    ASSERT_EQ(e.length, encoded_size(h));
    Header back;
    const CodecResult d = decode({buf.data(), e.length}, back);
    ASSERT_TRUE(d.ok()) << error_name(d.error) << " at " << d.length;
    ASSERT_EQ(d.length, e.length);
    ASSERT_TRUE(back == h) << "iteration " << i;
    ++done;
  }
  EXPECT_GT(done, 1500);
}

TEST(RpcRdmaEncode, RefusesAndWritesNothing) {
  std::vector<uint8_t> buf(64, 0xee);
  auto untouched = [&] {
    for (uint8_t b : buf)
      if (b != 0xee) return false;
    return true;
  };
  // Too small a buffer for the header.
  CodecResult r = encode(full_call_header(), buf);
  EXPECT_EQ(r.error, Error::kNoRoom);
  EXPECT_TRUE(untouched());
  // A header over the inline threshold.
  std::vector<uint8_t> big(4096, 0xee);
  Header h = full_call_header();
  h.n_writes = kMaxWriteChunks;
  for (auto& c : h.writes) {
    c.n_segments = kMaxSegments;
    for (auto& s : c.segments) s = {1, 1, 1};
  }
  r = encode(h, big);
  EXPECT_EQ(r.error, Error::kTooLong);
  EXPECT_EQ(big[0], 0xee);
  EXPECT_TRUE(encode(h, big, Role::kAny, 4096).ok());
  std::fill(big.begin(), big.end(), 0xee);
  // Chunk lists in an RDMA_ERROR.
  Header e = error_reply(kXid, 1, ErrCode::kChunk);
  e.has_reply = true;
  e.reply.n_segments = 1;
  EXPECT_EQ(encode(e, buf).error, Error::kChunksInError);
  e = error_reply(kXid, 1, ErrCode::kChunk);
  e.n_writes = 1;
  e.writes[0].n_segments = 1;
  EXPECT_EQ(encode(e, buf).error, Error::kChunksInError);
  // The decode rules, on the Header.
  h = full_call_header();
  h.vers = 2;
  EXPECT_EQ(encode(h, big).error, Error::kBadVersion);
  h = full_call_header();
  h.proc = Proc::kDone;
  EXPECT_EQ(encode(h, big).error, Error::kDeprecatedProc);
  h = full_call_header();
  h.reads[1].position = 150;
  EXPECT_EQ(encode(h, big).error, Error::kMisalignedPosition);
  h = full_call_header();
  h.reads[0].target.length = 0;
  EXPECT_EQ(encode(h, big).error, Error::kZeroLengthSegment);
  h = full_call_header();
  h.n_reads = kMaxReadSegments + 1;
  EXPECT_EQ(encode(h, big).error, Error::kTooManySegments);
  h = full_call_header();
  h.n_writes = kMaxWriteChunks + 1;
  EXPECT_EQ(encode(h, big).error, Error::kTooManyChunks);
  h = full_call_header();
  h.proc = Proc::kNoMsg;  // its Read list is at position 148: no Position-Zero chunk
  EXPECT_EQ(encode(h, big, Role::kCall).error, Error::kNoMsgWithoutChunks);
  EXPECT_EQ(encode(full_call_header(), big, Role::kReply).error, Error::kWrongDirection);
  for (uint8_t b : big) ASSERT_EQ(b, 0xee);
}

// Encode applies decode's rules to the Header, one by one.
TEST(RpcRdmaEncode, RefusesWhatDecodeRefuses) {
  std::vector<uint8_t> buf(1024, 0xee);
  Header h = full_call_header();
  h.proc = static_cast<Proc>(7);
  EXPECT_EQ(encode(h, buf).error, Error::kBadProc);
  h = error_reply(kXid, 1, ErrCode::kChunk);
  EXPECT_EQ(encode(h, buf, Role::kCall).error, Error::kWrongDirection);
  h = error_reply(kXid, 1, ErrCode::kVers);
  h.vers_low = 3;
  h.vers_high = 2;
  EXPECT_EQ(encode(h, buf).error, Error::kBadVersionRange);
  h.err = static_cast<ErrCode>(9);
  EXPECT_EQ(encode(h, buf).error, Error::kBadErrorCode);
  h = full_call_header();
  h.writes[0].n_segments = kMaxSegments + 1;
  EXPECT_EQ(encode(h, buf).error, Error::kTooManySegments);
  h = full_call_header();
  h.reply.n_segments = 0;
  EXPECT_EQ(encode(h, buf, Role::kCall).error, Error::kEmptyChunk);
  EXPECT_TRUE(encode(h, buf, Role::kAny).ok());  // a reply may return it empty
  std::fill(buf.begin(), buf.end(), 0xee);
  h = full_call_header();
  h.writes[0].segments[1].length = 0;
  EXPECT_EQ(encode(h, buf, Role::kCall).error, Error::kZeroLengthSegment);
  for (uint8_t b : buf) ASSERT_EQ(b, 0xee);
}

TEST(RpcRdmaHeader, EqualityLooksAtWhatProcUses) {
  Header a = error_reply(kXid, 1, ErrCode::kVers), b = a;
  b.vers_high = 2;
  EXPECT_FALSE(a == b);
  b = a;
  b.n_writes = 1;  // not part of an RDMA_ERROR
  EXPECT_TRUE(a == b);
  a = full_call_header();
  b = a;
  b.writes[0].segments[5].length = 77;  // past the count
  EXPECT_TRUE(a == b);
  b.writes[0].segments[1].length = 77;
  EXPECT_FALSE(a == b);
}

// ---- Refusals: one test per rule --------------------------------------------------------------

TEST(RpcRdmaRefuse, TruncatedAtEveryField) {
  // Every cut inside the header: the field being read is truncated, or (inside a counted
  // array's segments) its count runs past the buffer. Never read past the cut.
  const auto m = full_call();
  for (uint32_t cut = 0; cut < kFullCallLen; ++cut) {
    const std::vector<uint8_t> part(m.begin(), m.begin() + cut);
    const bool in_array = (cut >= 76 && cut < 108) || (cut >= 120 && cut < 136);
    SCOPED_TRACE("cut at " + std::to_string(cut));
    Header out;
    const CodecResult r = decode(part, out);
    EXPECT_EQ(r.error, in_array ? Error::kCountPastBuffer : Error::kTruncated)
        << error_name(r.error);
    EXPECT_LE(r.length, cut);
    if (cut < 16) {
      EXPECT_EQ(r.length, cut / 4 * 4);
    }
  }
  expect_refused(xdr({kXid, 1, 1}), Error::kTruncated, 12);
  expect_refused(xdr({kXid, 1, 1, ERROR}), Error::kTruncated, 16);
  expect_refused(xdr({kXid, 1, 1, ERROR, 1, 1}), Error::kTruncated, 24);
  expect_refused(xdr({kXid, 1, 1, MSG, 1, 8, 0x1, 4}), Error::kTruncated, 24);  // in a segment
}

TEST(RpcRdmaRefuse, BadVersion) {
  const auto m = xdr({kXid, 2, 1, MSG, 0, 0, 0});
  expect_refused(m, Error::kBadVersion, 4);
  uint32_t xid = 0;
  ASSERT_TRUE(peek_xid(m, &xid));  // enough to answer ERR_VERS
  EXPECT_EQ(xid, kXid);
  EXPECT_FALSE(peek_xid({m.data(), 3}, &xid));
}

TEST(RpcRdmaRefuse, UnknownProc) {
  expect_refused(xdr({kXid, 1, 1, 5, 0, 0, 0}), Error::kBadProc, 12);
  expect_refused(xdr({kXid, 1, 1, 0x80000000, 0, 0, 0}), Error::kBadProc, 12);
}

TEST(RpcRdmaRefuse, DeprecatedProc) {
  expect_refused(xdr({kXid, 1, 1, MSGP, 0, 0, 0, 4, 0}), Error::kDeprecatedProc, 12);
  expect_refused(xdr({kXid, 1, 1, DONE}), Error::kDeprecatedProc, 12);
}

TEST(RpcRdmaRefuse, Discriminator) {
  expect_refused(xdr({kXid, 1, 1, MSG, 2, 0, 0}), Error::kBadDiscriminator, 16);
  expect_refused(xdr({kXid, 1, 1, MSG, 0, 7, 0}), Error::kBadDiscriminator, 20);
  expect_refused(xdr({kXid, 1, 1, MSG, 0, 0, 0xffffffff}), Error::kBadDiscriminator, 24);
}

TEST(RpcRdmaRefuse, ReadListPastCapacity) {
  std::vector<uint8_t> m = xdr({kXid, 1, 1, MSG});
  for (uint32_t i = 0; i <= kMaxReadSegments; ++i) m = cat(m, xdr({1, 8, i + 1, 16, 0, 0}));
  m = cat(m, xdr({0, 0, 0}));
  expect_refused(m, Error::kTooManySegments, 16 + kMaxReadSegments * 24);
}

TEST(RpcRdmaRefuse, ChunkPastCapacity) {
  std::vector<uint8_t> m = xdr({kXid, 1, 1, MSG, 0, 1, kMaxSegments + 1});
  for (uint32_t i = 0; i <= kMaxSegments; ++i) m = cat(m, xdr({i + 1, 16, 0, 0}));
  m = cat(m, xdr({0, 0}));
  expect_refused(m, Error::kTooManySegments, 24);
  // The Reply chunk too.
  m = xdr({kXid, 1, 1, MSG, 0, 0, 1, kMaxSegments + 1});
  for (uint32_t i = 0; i <= kMaxSegments; ++i) m = cat(m, xdr({i + 1, 16, 0, 0}));
  expect_refused(m, Error::kTooManySegments, 28);
}

TEST(RpcRdmaRefuse, WriteListPastCapacity) {
  std::vector<uint8_t> m = xdr({kXid, 1, 1, MSG, 0});
  for (uint32_t i = 0; i <= kMaxWriteChunks; ++i) m = cat(m, xdr({1, 1, i + 1, 16, 0, 0}));
  m = cat(m, xdr({0, 0}));
  expect_refused(m, Error::kTooManyChunks, 20 + kMaxWriteChunks * 24);
}

TEST(RpcRdmaRefuse, CountPastBuffer) {
  expect_refused(xdr({kXid, 1, 1, MSG, 0, 1, 2, 0x1, 16, 0, 0, 0, 0}), Error::kCountPastBuffer, 24);
  expect_refused(xdr({kXid, 1, 1, MSG, 0, 1, 0xffffffff, 0, 0}), Error::kCountPastBuffer, 24);
  expect_refused(xdr({kXid, 1, 1, MSG, 0, 0, 1, 0x40000000}), Error::kCountPastBuffer, 28);
}

TEST(RpcRdmaRefuse, ZeroLengthReadSegment) {
  expect_refused(xdr({kXid, 1, 1, MSG, 1, 8, 0x1, 0, 0, 0, 0, 0, 0}), Error::kZeroLengthSegment,
                 28);
}

TEST(RpcRdmaRefuse, MisalignedPosition) {
  expect_refused(xdr({kXid, 1, 1, MSG, 1, 6, 0x1, 16, 0, 0, 0, 0, 0}), Error::kMisalignedPosition,
                 20);
}

TEST(RpcRdmaRefuse, NoMsgWithoutChunks) {
  expect_refused(xdr({kXid, 1, 1, NOMSG, 0, 0, 0}), Error::kNoMsgWithoutChunks, 12);
  // A call's RPC message is in a Position-Zero Read chunk: a Reply chunk alone does not carry it.
  const auto reply_only = xdr({kXid, 1, 1, NOMSG, 0, 0, 1, 1, 0x9, 64, 0, 0});
  expect_refused(reply_only, Error::kNoMsgWithoutChunks, 12, Role::kCall);
  (void)decoded(reply_only, Role::kReply);
  const auto read_at_8 = xdr({kXid, 1, 1, NOMSG, 1, 8, 0x9, 64, 0, 0, 0, 0, 0});
  expect_refused(read_at_8, Error::kNoMsgWithoutChunks, 12, Role::kCall);
}

TEST(RpcRdmaRefuse, NothingAfterErrorOrNoMsg) {
  // An RDMA_ERROR followed by a Write list and a Reply chunk, as a confused sender might.
  expect_refused(xdr({kXid, 1, 1, ERROR, 2, 0, 1, 1, 0x9, 64, 0, 0}), Error::kTrailingBytes, 20);
  expect_refused(xdr({kXid, 1, 1, ERROR, 1, 1, 1, 0}), Error::kTrailingBytes, 28);
  expect_refused(xdr({kXid, 1, 1, NOMSG, 0, 0, 1, 1, 0x9, 64, 0, 0, kXid}), Error::kTrailingBytes,
                 48);
}

TEST(RpcRdmaRefuse, BadErrorCode) {
  expect_refused(xdr({kXid, 1, 1, ERROR, 3}), Error::kBadErrorCode, 16);
  expect_refused(xdr({kXid, 1, 1, ERROR, 0}), Error::kBadErrorCode, 16);
}

TEST(RpcRdmaRefuse, BadVersionRange) {
  expect_refused(xdr({kXid, 1, 1, ERROR, 1, 2, 1}), Error::kBadVersionRange, 20);
}

TEST(RpcRdmaRefuse, WrongDirection) {
  expect_refused(full_call(), Error::kWrongDirection, 16, Role::kReply);
  expect_refused(xdr({kXid, 1, 1, ERROR, 2}), Error::kWrongDirection, 12, Role::kCall);
}

TEST(RpcRdmaRefuse, PastInlineThreshold) {
  std::vector<uint8_t> m = cat(xdr({kXid, 1, 1, MSG, 0, 0, 0}), std::vector<uint8_t>(1000, 0));
  expect_refused(m, Error::kTooLong, kDefaultInlineThreshold);
  Header h;
  EXPECT_TRUE(decode(m, h, Role::kAny, 4096).ok());
}

TEST(RpcRdmaErrors, NamesAndTexts) {
  for (uint32_t i = 0; i < kNumErrors; ++i) {
    const auto e = static_cast<Error>(i);
    EXPECT_STRNE(error_name(e), "unknown") << i;
    EXPECT_STRNE(error_text(e), "unknown error") << i;
  }
}
