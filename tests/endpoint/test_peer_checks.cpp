// rdmafwd's server-side checks of a client's requests (apps/rdmafwd/engines/peer_checks.hpp):
// each field at 0, its limit, limit - 1, limit + 1 and the top of its width (where a sum or a
// product of a careless check would wrap).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>

#include "engines/peer_checks.hpp"

using namespace rdmafwd;

namespace {

constexpr RpcLimits kLim{32, 16 * 4096, 4096, 0};
constexpr RpcLimits kLimMd{32, 16 * 4096, 4096, 8};

RpcReq good() {
  RpcReq q{};
  q.magic = kReqMagic;
  q.op = kOpRead;
  q.slot = 3;
  q.len = 16 * 4096;
  return q;
}

RpcVerdict check(const RpcReq& q, const RpcLimits& lim = kLim, uint32_t byte_len = kSmall,
                 uint32_t busy_slot = UINT32_MAX) {
  return check_rpc_request(q, byte_len, lim, [&](uint32_t s) { return s == busy_slot; });
}

}  // namespace

TEST(PeerChecks, RpcGoodAndBye) {
  EXPECT_EQ(check(good()), RpcVerdict::kOk);
  RpcReq q = good();
  q.op = kOpWrite;
  EXPECT_EQ(check(q), RpcVerdict::kOk);
  // A goodbye: nothing but the magic is read (its slot and length are zero).
  RpcReq bye{};
  bye.magic = kReqMagic;
  bye.op = kOpBye;
  bye.slot = UINT32_MAX;
  EXPECT_EQ(check(bye), RpcVerdict::kBye);
}

TEST(PeerChecks, RpcByteLen) {
  for (uint32_t n : {0u, 1u, uint32_t(sizeof(RpcReq)) - 1})
    EXPECT_EQ(check(good(), kLim, n), RpcVerdict::kShort) << n;
  for (uint32_t n : {uint32_t(sizeof(RpcReq)), kSmall, UINT32_MAX})
    EXPECT_EQ(check(good(), kLim, n), RpcVerdict::kOk) << n;
}

TEST(PeerChecks, RpcMagicAndOp) {
  RpcReq q = good();
  for (uint64_t m : {uint64_t{0}, kReqMagic - 1, kReqMagic + 1, ~uint64_t{0}, kReplyMagic}) {
    q.magic = m;
    EXPECT_EQ(check(q), RpcVerdict::kMagic);
  }
  q = good();
  for (int op = 0; op < 256; ++op) {
    q.op = static_cast<uint8_t>(op);
    const RpcVerdict v = check(q);
    if (op == kOpRead || op == kOpWrite)
      EXPECT_EQ(v, RpcVerdict::kOk) << op;
    else if (op == kOpBye)
      EXPECT_EQ(v, RpcVerdict::kBye);
    else
      EXPECT_EQ(v, RpcVerdict::kOp) << op;
  }
}

TEST(PeerChecks, RpcSlot) {
  RpcReq q = good();
  for (uint32_t s : {0u, 1u, kLim.depth - 1}) {
    q.slot = s;
    EXPECT_EQ(check(q), RpcVerdict::kOk) << s;
  }
  for (uint32_t s : {kLim.depth, kLim.depth + 1, UINT32_MAX - 1, UINT32_MAX}) {
    q.slot = s;
    EXPECT_EQ(check(q), RpcVerdict::kSlot) << s;
  }
  // A slot still serving an earlier write request: refused; the others are not.
  q.slot = 5;
  EXPECT_EQ(check(q, kLim, kSmall, 5), RpcVerdict::kSlotBusy);
  EXPECT_EQ(check(q, kLim, kSmall, 4), RpcVerdict::kOk);
  // No slot at all (depth 0): every slot is beyond.
  q.slot = 0;
  EXPECT_EQ(check(q, RpcLimits{0, 4096, 4096, 0}), RpcVerdict::kSlot);
}

TEST(PeerChecks, RpcLen) {
  RpcReq q = good();
  for (uint32_t n : {1u, 64u, kLim.max_len - 1, kLim.max_len}) {
    q.len = n;
    EXPECT_EQ(check(q), RpcVerdict::kOk) << n;
  }
  for (uint32_t n : {0u, kLim.max_len + 1, UINT32_MAX - kLim.max_len + 1, UINT32_MAX}) {
    q.len = n;
    EXPECT_EQ(check(q), RpcVerdict::kLen) << n;
  }
}

TEST(PeerChecks, RpcMetadata) {
  RpcReq q = good();
  q.md = 8;
  EXPECT_EQ(check(q, kLimMd), RpcVerdict::kOk);
  for (uint16_t md : {uint16_t{0}, uint16_t{7}, uint16_t{9}, uint16_t{0xffff}}) {
    q.md = md;
    EXPECT_EQ(check(q, kLimMd), RpcVerdict::kMetadata) << md;
  }
  q = good();
  q.md = 1;
  EXPECT_EQ(check(q), RpcVerdict::kMetadata);  // metadata to a server without
  // With metadata a length is whole blocks: its block count sizes the metadata the server moves.
  q.md = 8;
  for (uint32_t n : {4096u, 8192u, kLimMd.max_len}) {
    q.len = n;
    EXPECT_EQ(check(q, kLimMd), RpcVerdict::kOk) << n;
  }
  for (uint32_t n : {1u, 4095u, 4097u, kLimMd.max_len - 1}) {
    q.len = n;
    EXPECT_EQ(check(q, kLimMd), RpcVerdict::kLen) << n;
  }
  // A page size of 0 cannot divide: refused, not a crash.
  q.len = 4096;
  EXPECT_EQ(check(q, RpcLimits{32, 65536, 0, 8}), RpcVerdict::kLen);
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
  for (int v = 0; v <= static_cast<int>(RpcVerdict::kMetadata); ++v)
    EXPECT_STRNE(rpc_verdict_name(static_cast<RpcVerdict>(v)), "unknown") << v;
}
