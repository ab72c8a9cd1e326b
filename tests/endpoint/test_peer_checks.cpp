// rdmafwd's server-side checks of a client's calls (apps/rdmafwd/engines/peer_checks.hpp): each
// field at 0, its limit, limit - 1, limit + 1 and the top of its width (where a sum or a product
// of a careless check would wrap). The calls are bytes, encoded as the client encodes them and
// decoded as the server decodes them (rpcrdma::decode, then check_rpc_call).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>
#include <limits>
#include <vector>

#include <rdmx/rpcrdma/codec.hpp>

#include "engines/peer_checks.hpp"

using namespace rdmafwd;
namespace rr = rdmx::rpcrdma;

namespace {

constexpr uint32_t kIo = 16 * 4096;
// The file handle the server handed out (8 bytes here; rdmafwd's server makes 32 at random).
constexpr uint8_t kFh[8] = {'r', 'd', 'm', 'x', 'f', 'i', 'l', 'e'};
constexpr uint32_t kPos = nfs::write_data_position(sizeof kFh);
constexpr RpcLimits kLim{32, kIo, 4096, 0, 32, kFh};
constexpr RpcLimits kLimMd{32, kIo, 4096, 8, 32, kFh};
constexpr uint32_t kXid = 0x01020304;

// A call as the client builds it: the header with `h`'s chunks, the RPC message of `c`.
struct Msg {
  rr::Header h;
  nfs::Call c;
};

Msg good(uint32_t proc = nfs::kProcRead, const RpcLimits& lim = kLim) {
  Msg m;
  m.h.xid = kXid;
  m.h.credits = 32;
  m.c.xid = kXid;
  m.c.proc = proc;
  m.c.fh = kFh;
  m.c.offset = 3ull * lim.max_len;
  m.c.count = lim.max_len;
  const rr::Segment seg{0x1234, static_cast<uint32_t>(rpc_wire_bytes(lim.max_len, lim)), 0};
  if (proc == nfs::kProcRead) {
    m.h.n_writes = 1;
    m.h.writes[0].n_segments = 1;
    m.h.writes[0].segments[0] = seg;
  } else if (proc == nfs::kProcWrite) {
    m.c.data_len = m.c.count;
    m.h.n_reads = 1;
    m.h.reads[0] = {kPos, seg};
  }
  return m;
}

std::vector<uint8_t> bytes(const Msg& m) {
  std::vector<uint8_t> b(1024);
  const rr::CodecResult r = rr::encode(m.h, b, rr::Role::kCall);
  EXPECT_TRUE(r.ok()) << rr::error_name(r.error);
  const uint32_t n = nfs::encode_call(m.c, std::span<uint8_t>(b).subspan(r.length));
  EXPECT_NE(n, 0u);
  b.resize(r.length + n);
  return b;
}

// What the server does with the bytes: decode the header, check the rest.
RpcVerdict check_bytes(const std::vector<uint8_t>& b, const RpcLimits& lim = kLim,
                       uint32_t busy_slot = UINT32_MAX, uint32_t outstanding = 0,
                       uint32_t* slot_out = nullptr) {
  rr::Header h;
  const rr::CodecResult r = rr::decode(b, h, rr::Role::kCall);
  EXPECT_TRUE(r.ok()) << rr::error_name(r.error);
  nfs::Call c;
  uint32_t slot = UINT32_MAX;
  const RpcVerdict v = check_rpc_call(
      h, std::span<const uint8_t>(b).subspan(r.length), lim, outstanding,
      [&](uint32_t s) { return s == busy_slot; }, c, slot);
  if (slot_out) *slot_out = slot;
  return v;
}
RpcVerdict check(const Msg& m, const RpcLimits& lim = kLim, uint32_t busy_slot = UINT32_MAX,
                 uint32_t outstanding = 0) {
  return check_bytes(bytes(m), lim, busy_slot, outstanding);
}

// Big-endian word i of the RPC message (after the transport header) of `b`.
void poke(std::vector<uint8_t>& b, uint32_t rpc_word, uint32_t v) {
  rr::Header h;
  const uint32_t at = rr::decode(b, h, rr::Role::kCall).length + 4 * rpc_word;
  b[at] = uint8_t(v >> 24);
  b[at + 1] = uint8_t(v >> 16);
  b[at + 2] = uint8_t(v >> 8);
  b[at + 3] = uint8_t(v);
}

}  // namespace

// kSmall (engines/common.hpp) holds every message --fwd rpc sends: measured here.
TEST(PeerChecks, RpcMessageSizes) {
  EXPECT_EQ(bytes(good(nfs::kProcRead)).size(), 116u);
  EXPECT_EQ(bytes(good(nfs::kProcWrite)).size(), 124u);
  EXPECT_EQ(bytes(good(nfs::kProcNull)).size(), 28u + nfs::kCallHeaderBytes);
  for (uint32_t proc : {nfs::kProcRead, nfs::kProcWrite}) {
    rr::Header h;
    if (proc == nfs::kProcRead) {
      h.n_writes = 1;
      h.writes[0].n_segments = 1;
    }
    std::array<uint8_t, kSmall> buf{};
    const rr::CodecResult r = rr::encode(h, buf, rr::Role::kReply);
    ASSERT_TRUE(r.ok());
    const uint32_t n = nfs::encode_reply(proc, nfs::Reply{}, std::span(buf).subspan(r.length));
    ASSERT_NE(n, 0u);
    EXPECT_EQ(r.length + n, proc == nfs::kProcRead ? 96u : 80u);
    nfs::Reply back;
    EXPECT_TRUE(nfs::decode_reply(proc, std::span(buf).subspan(r.length, n), back));
  }
  EXPECT_LE(bytes(good(nfs::kProcWrite)).size(), kSmall);
  // The handles rdmafwd's server hands out are 32 bytes; RFC 1813's largest is 64.
  std::array<uint8_t, nfs::kFhMaxBytes> big{};
  for (uint32_t len : {32u, nfs::kFhMaxBytes}) {
    Msg m = good(nfs::kProcWrite);
    m.c.fh = std::span<const uint8_t>(big.data(), len);
    m.h.reads[0].position = nfs::write_data_position(len);
    EXPECT_EQ(bytes(m).size(), 124u - 8 + len) << len;
    EXPECT_LE(bytes(m).size(), kSmall);
  }
  // A handle longer than NFS3_FHSIZE is not encoded.
  std::array<uint8_t, nfs::kFhMaxBytes + 1> huge{};
  nfs::Call c = good().c;
  c.fh = huge;
  std::array<uint8_t, 512> out{};
  EXPECT_EQ(nfs::encode_call(c, out), 0u);
}

// The answer to another handle (engines/rpc.cpp, server_bad_handle): the accepted RPC reply with
// the procedure's failed result, NFS3ERR_BADHANDLE (RFC 1813: READ3resfail is the status and
// post_op_attr, WRITE3resfail the status and wcc_data), which the client decodes.
TEST(PeerChecks, RpcBadHandleReply) {
  for (uint32_t proc : {nfs::kProcRead, nfs::kProcWrite}) {
    std::array<uint8_t, kSmall> buf{};
    nfs::Reply rep;
    rep.xid = kXid;
    rep.status = nfs::kNfs3ErrBadHandle;
    const uint32_t n = nfs::encode_reply(proc, rep, buf);
    EXPECT_EQ(n, nfs::kReplyHeaderBytes + (proc == nfs::kProcRead ? 8u : 12u));
    nfs::Reply back;
    ASSERT_TRUE(nfs::decode_reply(proc, std::span(buf).first(n), back));
    EXPECT_EQ(back.xid, kXid);
    EXPECT_EQ(back.status, 10001u);
  }
}

TEST(PeerChecks, RpcGoodAndBye) {
  uint32_t slot = 0;
  EXPECT_EQ(check_bytes(bytes(good()), kLim, UINT32_MAX, 0, &slot), RpcVerdict::kOk);
  EXPECT_EQ(slot, 3u);
  EXPECT_EQ(check(good(nfs::kProcWrite)), RpcVerdict::kOk);
  EXPECT_EQ(check(good(nfs::kProcRead, kLimMd), kLimMd), RpcVerdict::kOk);
  EXPECT_EQ(check(good(nfs::kProcWrite, kLimMd), kLimMd), RpcVerdict::kOk);
  // The goodbye: an NFSv3 NULL call, nothing else read; rpc_goodbye recognises it alone.
  EXPECT_EQ(check(good(nfs::kProcNull)), RpcVerdict::kBye);
  EXPECT_TRUE(rpc_goodbye(bytes(good(nfs::kProcNull))));
  EXPECT_FALSE(rpc_goodbye(bytes(good(nfs::kProcRead))));
  std::vector<uint8_t> b = bytes(good(nfs::kProcNull));
  b.pop_back();
  EXPECT_FALSE(rpc_goodbye(b));
}

TEST(PeerChecks, RpcCredits) {
  EXPECT_EQ(check(good(), kLim, UINT32_MAX, kLim.credits - 1), RpcVerdict::kOk);
  for (uint32_t n : {kLim.credits, kLim.credits + 1, UINT32_MAX})
    EXPECT_EQ(check(good(), kLim, UINT32_MAX, n), RpcVerdict::kCredits) << n;
  RpcLimits none = kLim;
  none.credits = 0;
  EXPECT_EQ(check(good(), none), RpcVerdict::kCredits);
}

TEST(PeerChecks, RpcHeader) {
  // Word by word: msg_type, rpcvers, prog, vers, then cred/verf flavors and lengths.
  const std::array<std::pair<uint32_t, uint32_t>, 8> bad = {
      {{1, nfs::kMsgReply}, {2, 3}, {3, 100005}, {4, 4}, {6, 1}, {7, 4}, {8, 6}, {9, 1}}};
  for (auto [word, v] : bad) {
    std::vector<uint8_t> b = bytes(good());
    poke(b, word, v);
    EXPECT_EQ(check_bytes(b), RpcVerdict::kRpc) << word;
  }
  Msg m = good();
  m.c.xid = kXid + 1;  // RFC 8166 4.1: the transport header's xid is the RPC message's
  EXPECT_EQ(check(m), RpcVerdict::kRpc);
  std::vector<uint8_t> b = bytes(good(nfs::kProcWrite));
  b.pop_back();  // cut short
  EXPECT_EQ(check_bytes(b), RpcVerdict::kRpc);
  b = bytes(good(nfs::kProcWrite));
  b.insert(b.end(), {0, 0, 0, 0});  // the WRITE data inline: it belongs in the Read chunk
  EXPECT_EQ(check_bytes(b), RpcVerdict::kRpc);
}

TEST(PeerChecks, RpcProcAndHandle) {
  for (uint32_t proc : {1u, 5u, 8u, 21u, 22u, UINT32_MAX}) {
    Msg m = good(proc);
    EXPECT_EQ(check(m), RpcVerdict::kOp) << proc;
  }
  std::vector<uint8_t> b = bytes(good());
  poke(b, 11, 0x72646d79);  // "rdmy": another handle of the same length
  EXPECT_EQ(check_bytes(b), RpcVerdict::kHandle);
  b = bytes(good());
  poke(b, 10, 4);  // a 4-byte handle: the server's is 8
  EXPECT_NE(check_bytes(b), RpcVerdict::kOk);
  // Handles of other lengths, the server's bytes among them: the bytes and the length must be
  // the server's (RFC 1813 handles are opaque: compared whole).
  const uint8_t longer[12] = {'r', 'd', 'm', 'x', 'f', 'i', 'l', 'e', 0, 0, 0, 0};
  for (std::span<const uint8_t> fh :
       {std::span<const uint8_t>(kFh, 7), std::span<const uint8_t>(longer),
        std::span<const uint8_t>()}) {
    Msg m = good();
    m.c.fh = fh;
    EXPECT_EQ(check(m), RpcVerdict::kHandle) << fh.size();
  }
  EXPECT_EQ(check(good(), RpcLimits{32, kIo, 4096, 0, 32, {}}), RpcVerdict::kHandle);
  b = bytes(good());
  poke(b, 10, 65);  // past NFS3_FHSIZE
  EXPECT_EQ(check_bytes(b), RpcVerdict::kRpc);
  b = bytes(good());
  poke(b, 10, UINT32_MAX);  // a length that wraps a careless pad
  EXPECT_EQ(check_bytes(b), RpcVerdict::kRpc);
}

TEST(PeerChecks, RpcOffset) {
  Msg m = good();
  for (uint64_t s : {uint64_t{0}, uint64_t{1}, uint64_t{kLim.depth} - 1}) {
    m.c.offset = s * kIo;
    EXPECT_EQ(check(m), RpcVerdict::kOk) << s;
  }
  for (uint64_t off : {uint64_t{1}, uint64_t{kIo} - 1, uint64_t{kIo} + 4096,
                       uint64_t{kLim.depth} * kIo, uint64_t{kLim.depth + 1} * kIo,
                       (uint64_t{1} << 32) * kIo, ~uint64_t{0}, ~uint64_t{0} - kIo + 1}) {
    m.c.offset = off;
    EXPECT_EQ(check(m), RpcVerdict::kSlot) << off;
  }
  // A slot still serving an earlier WRITE: refused; the others are not.
  m = good();
  EXPECT_EQ(check(m, kLim, 3), RpcVerdict::kSlotBusy);
  EXPECT_EQ(check(m, kLim, 4), RpcVerdict::kOk);
  // No slot at all (depth 0, or a slot of no bytes): every offset is beyond.
  EXPECT_EQ(check(good(), RpcLimits{0, kIo, 4096, 0, 32, kFh}), RpcVerdict::kSlot);
  EXPECT_EQ(check(good(), RpcLimits{32, 0, 4096, 0, 32, kFh}), RpcVerdict::kSlot);
}

TEST(PeerChecks, RpcCount) {
  for (uint32_t proc : {nfs::kProcRead, nfs::kProcWrite}) {
    Msg m = good(proc);
    for (uint32_t n : {1u, 64u, kIo - 1, kIo}) {
      m.c.count = n;
      m.c.data_len = proc == nfs::kProcWrite ? n : 0;
      if (proc == nfs::kProcWrite) m.h.reads[0].target.length = n;
      EXPECT_EQ(check(m), RpcVerdict::kOk) << n;
    }
    for (uint32_t n : {0u, kIo + 1, UINT32_MAX - kIo + 1, UINT32_MAX}) {
      m.c.count = n;
      m.c.data_len = proc == nfs::kProcWrite ? n : 0;
      EXPECT_EQ(check(m), RpcVerdict::kLen) << n;
    }
  }
  // With metadata a count is whole blocks: its block count sizes the metadata the server moves.
  Msg m = good(nfs::kProcRead, kLimMd);
  for (uint32_t n : {1u, 4095u, 4097u, kIo - 1}) {
    m.c.count = n;
    EXPECT_EQ(check(m, kLimMd), RpcVerdict::kLen) << n;
  }
  // A page size of 0 cannot divide: refused, not a crash.
  EXPECT_EQ(check(good(nfs::kProcRead, kLimMd), RpcLimits{32, kIo, 0, 8, 32, kFh}),
            RpcVerdict::kLen);
}

TEST(PeerChecks, RpcChunks) {
  // READ: one Write chunk of one segment, long enough for data and metadata.
  Msg m = good();
  m.h.writes[0].segments[0].length = kIo - 1;
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m.h.writes[0].segments[0].length = UINT32_MAX;  // longer is fine: the server writes count
  EXPECT_EQ(check(m), RpcVerdict::kOk);
  m = good(nfs::kProcRead, kLimMd);
  m.h.writes[0].segments[0].length = kIo;  // without the metadata
  EXPECT_EQ(check(m, kLimMd), RpcVerdict::kChunk);
  m = good();
  m.h.writes[0].n_segments = 2;
  m.h.writes[0].segments[1] = m.h.writes[0].segments[0];
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m = good();
  m.h.n_writes = 2;
  m.h.writes[1] = m.h.writes[0];
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m = good();
  m.h.has_reply = true;
  m.h.reply = m.h.writes[0];
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m = good();
  m.h.n_reads = 1;
  m.h.reads[0] = {kPos, m.h.writes[0].segments[0]};
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m = good();
  m.h.n_writes = 0;  // no chunk for the data
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  // WRITE: one Read segment at the data's position, exactly the bytes to move.
  for (uint32_t pos : {0u, kPos - 4, kPos + 4}) {
    m = good(nfs::kProcWrite);
    m.h.reads[0].position = pos;
    EXPECT_EQ(check(m), RpcVerdict::kChunk) << pos;
  }
  for (uint32_t len : {kIo - 1, kIo + 1, UINT32_MAX}) {
    m = good(nfs::kProcWrite);
    m.h.reads[0].target.length = len;
    EXPECT_EQ(check(m), RpcVerdict::kChunk) << len;
  }
  m = good(nfs::kProcWrite);
  m.c.data_len = kIo - 4;
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m = good(nfs::kProcWrite);
  m.h.n_reads = 2;
  m.h.reads[1] = {kPos, {0x99, 4096, 0}};
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
  m = good(nfs::kProcWrite);
  m.h.n_writes = 1;
  m.h.writes[0].n_segments = 1;
  m.h.writes[0].segments[0] = m.h.reads[0].target;
  EXPECT_EQ(check(m), RpcVerdict::kChunk);
}

TEST(PeerChecks, RelayMessage) {
  const uint32_t slot = 16 * 4096;
  EXPECT_FALSE(check_relay_message(0, slot));
  EXPECT_TRUE(check_relay_message(1, slot));
  EXPECT_TRUE(check_relay_message(slot - 1, slot));
  EXPECT_TRUE(check_relay_message(slot, slot));
  EXPECT_FALSE(check_relay_message(slot + 1, slot));
  EXPECT_FALSE(check_relay_message(UINT32_MAX, slot));
  EXPECT_FALSE(check_relay_message(1, 0));
}

TEST(PeerChecks, VerdictNames) {
  for (int v = 0; v <= static_cast<int>(RpcVerdict::kChunk); ++v)
    EXPECT_STRNE(rpc_verdict_name(static_cast<RpcVerdict>(v)), "unknown") << v;
}
