// RoCE v2 codec: bytes derived by hand from the header layouts of IBTA vol. 1 9.2-9.3 and Annex
// A17 (see the comments per field), round trips of every RC opcode emu speaks, the ICRC masking
// rules, and every drop reason of the parser.
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "roce.hpp"

namespace roce = rdmx::emu::roce;

namespace {

// RC SEND_ONLY, AckReq, P_Key 0xFFFF, DestQP 0x11, PSN 0x123456, payload "ABCD";
// IPv4 192.168.1.1 -> 192.168.1.2, ID 0x1234, DF, TTL 64; UDP 0xC123 -> 4791.
roce::Packet example() {
  roce::Packet p;
  p.src_ip = 0xC0A80101;
  p.dst_ip = 0xC0A80102;
  p.ip_id = 0x1234;
  p.ttl = 64;
  p.sport = 0xC123;
  p.opcode = roce::kSendOnly;
  p.ack_req = true;
  p.dqpn = 0x11;
  p.psn = 0x123456;
  static const uint8_t kAbcd[4] = {'A', 'B', 'C', 'D'};
  p.payload = kAbcd;
  p.payload_len = 4;
  return p;
}

uint32_t le32(const uint8_t* p) {
  return uint32_t{p[0]} | (uint32_t{p[1]} << 8) | (uint32_t{p[2]} << 16) | (uint32_t{p[3]} << 24);
}

std::vector<uint8_t> enc(const roce::Packet& p) {
  std::vector<uint8_t> v(roce::wire_len(p));
  const size_t n = roce::encode(p, v.data(), v.size());
  EXPECT_EQ(n, v.size());
  v.resize(n);
  return v;
}

TEST(RoceCodec, SendOnlyBytesByHand) {
  const std::vector<uint8_t> got = enc(example());
  // IPv4 (RFC 791): version 4 / IHL 5, TOS 0, total length 48 = 20 + 8 + 12 + 4 + 4, ID 0x1234,
  // flags DF, TTL 64, protocol 17, checksum = ~(0x4500 + 0x0030 + 0x1234 + 0x4000 + 0x4011 +
  // 0xC0A8 + 0x0101 + 0xC0A8 + 0x0102 folded) = ~0x5ACA = 0xA535.
  const std::vector<uint8_t> want_head = {
      0x45, 0x00, 0x00, 0x30, 0x12, 0x34, 0x40, 0x00, 0x40, 0x11, 0xA5, 0x35, 0xC0, 0xA8, 0x01,
      0x01, 0xC0, 0xA8, 0x01, 0x02,
      // UDP: sport 0xC123, dport 4791 = 0x12B7, length 28 = 8 + 12 + 4 + 4, checksum 0.
      0xC1, 0x23, 0x12, 0xB7, 0x00, 0x1C, 0x00, 0x00,
      // BTH (IBTA 9.2): opcode 0x04 SEND_ONLY; SE 0, M 0, PadCnt 0, TVer 0; P_Key 0xFFFF;
      // FECN/BECN/resv 0; DestQP 0x000011; AckReq 1 + resv7; PSN 0x123456.
      0x04, 0x00, 0xFF, 0xFF, 0x00, 0x00, 0x00, 0x11, 0x80, 0x12, 0x34, 0x56,
      // payload
      0x41, 0x42, 0x43, 0x44};
  ASSERT_EQ(got.size(), want_head.size() + 4);
  EXPECT_EQ(std::vector<uint8_t>(got.begin(), got.end() - 4), want_head);
  // ICRC input written out by hand from Annex A17: 8 bytes of 1s (no LRH), the IP header with
  // TOS, TTL and checksum as 1s, UDP with checksum as 1s, BTH byte 4 as 1s, the rest as sent.
  const uint8_t masked[] = {0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x45, 0xFF, 0x00,
                            0x30, 0x12, 0x34, 0x40, 0x00, 0xFF, 0x11, 0xFF, 0xFF, 0xC0, 0xA8,
                            0x01, 0x01, 0xC0, 0xA8, 0x01, 0x02, 0xC1, 0x23, 0x12, 0xB7, 0x00,
                            0x1C, 0xFF, 0xFF, 0x04, 0x00, 0xFF, 0xFF, 0xFF, 0x00, 0x00, 0x11,
                            0x80, 0x12, 0x34, 0x56, 0x41, 0x42, 0x43, 0x44};
  const uint32_t crc = static_cast<uint32_t>(crc32(0, masked, sizeof masked));
  // Stored least-significant byte first.
  EXPECT_EQ(le32(&got[got.size() - 4]), crc);
  // The same value Scapy's RoCE layer and Linux rxe produce for this packet (wire 7e 28 e1 3b).
  EXPECT_EQ(crc, 0x3BE1287Eu);
}

TEST(RoceCodec, ExtensionHeaderLayouts) {
  static const uint8_t data[5] = {1, 2, 3, 4, 5};
  roce::Packet p = example();
  // RDMA WRITE ONLY with immediate: BTH, RETH (VA 8, R_Key 4, DMA length 4), ImmDt; pad 3.
  p.opcode = roce::kWriteOnlyImm;
  p.se = true;
  p.reth_va = 0x0102030405060708ull;
  p.reth_rkey = 0xA1B2C3D4;
  p.reth_len = 5;
  p.imm = 0xDEADBEEF;
  p.payload = data;
  p.payload_len = 5;
  std::vector<uint8_t> v = enc(p);
  ASSERT_EQ(v.size(), 20u + 8 + 12 + 16 + 4 + 5 + 3 + 4);
  const uint8_t* b = &v[28];
  EXPECT_EQ(b[0], 0x0B);
  EXPECT_EQ(b[1], 0x80 | (3 << 4));  // SE, PadCnt 3
  const uint8_t reth[16] = {1, 2, 3, 4, 5, 6, 7, 8, 0xA1, 0xB2, 0xC3, 0xD4, 0, 0, 0, 5};
  EXPECT_EQ(0, std::memcmp(b + 12, reth, 16));
  const uint8_t imm[4] = {0xDE, 0xAD, 0xBE, 0xEF};
  EXPECT_EQ(0, std::memcmp(b + 28, imm, 4));
  EXPECT_EQ(0, std::memcmp(b + 32, data, 5));
  EXPECT_EQ(b[37], 0);
  EXPECT_EQ(b[38], 0);
  EXPECT_EQ(b[39], 0);

  // ACKNOWLEDGE: BTH + AETH (syndrome 1 byte, MSN 3 bytes); NAK remote access = 0x62.
  p = example();
  p.opcode = roce::kAcknowledge;
  p.ack_req = false;
  p.payload = nullptr;
  p.payload_len = 0;
  p.aeth_syndrome = roce::kAethNakRemAccess;
  p.aeth_msn = 0xABCDEF;
  v = enc(p);
  ASSERT_EQ(v.size(), 20u + 8 + 12 + 4 + 4);
  const uint8_t aeth[4] = {0x62, 0xAB, 0xCD, 0xEF};
  EXPECT_EQ(0, std::memcmp(&v[40], aeth, 4));
  EXPECT_EQ(v[36], 0x00);  // AckReq clear in responses

  // SEND ONLY WITH INVALIDATE: BTH + IETH (R_Key 4 bytes).
  p = example();
  p.opcode = roce::kSendOnlyInv;
  p.ieth = 0x00123401;
  v = enc(p);
  const uint8_t ieth[4] = {0x00, 0x12, 0x34, 0x01};
  EXPECT_EQ(v[28], 0x17);
  EXPECT_EQ(0, std::memcmp(&v[40], ieth, 4));
  EXPECT_EQ(0, std::memcmp(&v[44], "ABCD", 4));

  // A payload on an opcode without data, or an unknown opcode, is not encoded.
  p = example();
  p.opcode = roce::kAcknowledge;
  std::vector<uint8_t> buf(256);
  EXPECT_EQ(roce::encode(p, buf.data(), buf.size()), 0u);
  p.opcode = 0x13;  // COMPARE_SWAP: not modelled
  p.payload_len = 0;
  EXPECT_EQ(roce::encode(p, buf.data(), buf.size()), 0u);
  p.opcode = roce::kSendOnly;
  EXPECT_EQ(roce::encode(p, buf.data(), 10), 0u);  // no room
}

TEST(RoceCodec, EveryOpcodeRoundTrips) {
  std::mt19937 g(7);
  std::vector<uint8_t> data(300);
  for (auto& x : data) x = uint8_t(g());
  int known = 0;
  for (int op = 0; op < 256; ++op) {
    const uint8_t f = roce::opcode_flags(uint8_t(op));
    if (!(f & roce::kOpKnown)) continue;
    ++known;
    for (uint32_t len : {0u, 1u, 2u, 3u, 4u, 255u, 300u}) {
      if (!(f & roce::kHasPayload) && len) continue;
      roce::Packet p = example();
      p.opcode = uint8_t(op);
      p.psn = 0xFFFFFF;
      p.dqpn = 0xABCDEF;
      p.reth_va = 0x1122334455667788ull;
      p.reth_rkey = 0x99AABBCC;
      p.reth_len = 12345;
      p.aeth_syndrome = roce::kAethRnr | 14;
      p.aeth_msn = 77;
      p.imm = 0x01020304;
      p.ieth = 0x0A0B0C0D;
      p.payload = data.data();
      p.payload_len = len;
      const std::vector<uint8_t> v = enc(p);
      roce::Packet q;
      ASSERT_EQ(roce::decode(v.data(), v.size(), &q), roce::Drop::kNone) << op << " " << len;
      EXPECT_EQ(q.opcode, op);
      EXPECT_EQ(q.psn, 0xFFFFFFu);
      EXPECT_EQ(q.dqpn, 0xABCDEFu);
      EXPECT_EQ(q.ack_req, true);
      EXPECT_EQ(q.src_ip, p.src_ip);
      EXPECT_EQ(q.dst_ip, p.dst_ip);
      EXPECT_EQ(q.ip_id, p.ip_id);
      EXPECT_EQ(q.pad, (4 - len % 4) % 4);
      ASSERT_EQ(q.payload_len, len);
      EXPECT_EQ(0, std::memcmp(q.payload, data.data(), len));
      if (f & roce::kHasReth) {
        EXPECT_EQ(q.reth_va, p.reth_va);
        EXPECT_EQ(q.reth_rkey, p.reth_rkey);
        EXPECT_EQ(q.reth_len, p.reth_len);
      }
      if (f & roce::kHasAeth) {
        EXPECT_EQ(q.aeth_syndrome, p.aeth_syndrome);
        EXPECT_EQ(q.aeth_msn, 77u);
      }
      if (f & roce::kHasImm) {
        EXPECT_EQ(q.imm, p.imm);
      }
      if (f & roce::kHasIeth) {
        EXPECT_EQ(q.ieth, p.ieth);
      }
    }
  }
  EXPECT_EQ(known, 20);  // 0x00-0x11 and 0x16-0x17
}

TEST(RoceCodec, IcrcCoversAllButTheMaskedFields) {
  const std::vector<uint8_t> v = enc(example());
  roce::Packet q;
  // Masked fields (Annex A17): TOS (1), TTL (8), IP checksum (10, 11), UDP checksum (26, 27),
  // BTH byte 4 (32). Changing them keeps the ICRC valid.
  for (size_t i : {1u, 8u, 10u, 11u, 26u, 27u}) {
    std::vector<uint8_t> w = v;
    w[i] ^= 0x5A;
    EXPECT_EQ(roce::decode(w.data(), w.size(), &q), roce::Drop::kNone) << i;
  }
  {
    std::vector<uint8_t> w = v;
    w[32] = 0xC0;  // FECN + BECN as a switch may set them
    EXPECT_EQ(roce::decode(w.data(), w.size(), &q), roce::Drop::kNone);
  }
  // Every other byte from the IP ID to the payload is covered (IP ID at 4-5 included). Fields the
  // parser reads before the ICRC (version, lengths, protocol, dport, fragment bits) are excluded:
  // changing them makes the packet "not RoCE" first.
  const size_t covered[] = {4,  5,  12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 28, 29, 30, 31,
                            33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47};
  for (size_t i : covered) {
    std::vector<uint8_t> w = v;
    w[i] ^= 0x01;
    EXPECT_EQ(roce::decode(w.data(), w.size(), &q), roce::Drop::kBadIcrc) << i;
  }
}

// A carrier with no medium (the packet ring: Carrier::icrc false) neither writes nor checks
// the ICRC: the field stays 0, the packet parses the same, and only a check would refuse it.
TEST(RoceCodec, WithoutIcrcTheFieldIsZeroAndNotChecked) {
  const roce::Packet p = example();
  std::vector<uint8_t> v(roce::wire_len(p));
  ASSERT_EQ(roce::encode(p, v.data(), v.size(), false), v.size());
  EXPECT_EQ(std::vector<uint8_t>(v.end() - 4, v.end()), std::vector<uint8_t>(4, 0));
  const std::vector<uint8_t> with = enc(p);
  EXPECT_TRUE(std::equal(v.begin(), v.end() - 4, with.begin()));  // the rest is the same
  roce::Packet q;
  ASSERT_EQ(roce::decode(v.data(), v.size(), &q, false), roce::Drop::kNone);
  EXPECT_EQ(q.psn, p.psn);
  EXPECT_EQ(q.payload_len, p.payload_len);
  EXPECT_EQ(roce::decode(v.data(), v.size(), &q), roce::Drop::kBadIcrc);
}

// Re-seals a modified packet with a valid ICRC so the check after it is reached.
void reseal(std::vector<uint8_t>& w) {
  const size_t end = 20 + ((size_t{w[24]} << 8) | w[25]);
  const uint32_t c = roce::icrc(w.data(), end);
  for (int i = 0; i < 4; ++i) w[end - 4 + i] = uint8_t(c >> (8 * i));
}

TEST(RoceCodec, DropReasons) {
  const std::vector<uint8_t> v = enc(example());
  roce::Packet q;
  auto drop = [&](std::vector<uint8_t> w) { return roce::decode(w.data(), w.size(), &q); };
  std::vector<uint8_t> w;
  EXPECT_EQ(roce::decode(v.data(), 10, &q), roce::Drop::kNotRoce);  // runt
  w = v, w[0] = 0x46;                                               // IP options
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[0] = 0x65;  // IPv6 version nibble
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[9] = 6;  // TCP
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[6] = 0x20;  // more fragments
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[23] = 0xB8;  // dport 4792
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[3] = 0x40;  // IP total length beyond the buffer
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[25] = 0x40;  // UDP length beyond the IP packet
  EXPECT_EQ(drop(w), roce::Drop::kNotRoce);
  w = v, w[25] = 8 + 12;  // no room for the ICRC
  EXPECT_EQ(drop(w), roce::Drop::kTruncated);
  w = v, w[47] ^= 0xFF;  // payload corrupted
  EXPECT_EQ(drop(w), roce::Drop::kBadIcrc);
  w = v, w[v.size() - 1] ^= 0x80;  // ICRC corrupted
  EXPECT_EQ(drop(w), roce::Drop::kBadIcrc);
  w = v, w[28] = 0x13, reseal(w);  // COMPARE_SWAP: not modelled
  EXPECT_EQ(drop(w), roce::Drop::kBadOpcode);
  w = v, w[28] = 0x64, reseal(w);  // UD SEND_ONLY: not RC
  EXPECT_EQ(drop(w), roce::Drop::kBadOpcode);
  w = v, w[28] = 0x15, reseal(w);  // reserved
  EXPECT_EQ(drop(w), roce::Drop::kBadOpcode);
  w = v, w[29] = 0x01, reseal(w);  // TVer 1
  EXPECT_EQ(drop(w), roce::Drop::kBadHeader);
  w = v, w[30] = 0x00, w[31] = 0x01, reseal(w);  // P_Key 0x0001
  EXPECT_EQ(drop(w), roce::Drop::kBadHeader);
  w = v, w[28] = roce::kAcknowledge, reseal(w);  // 4 bytes: AETH, no payload: decodes
  EXPECT_EQ(drop(w), roce::Drop::kNone);
  w = v, w[28] = roce::kWriteOnly, reseal(w);  // needs a 16-byte RETH
  EXPECT_EQ(drop(w), roce::Drop::kTruncated);
  w = v, w[29] = 0x30, w[28] = roce::kAcknowledge, reseal(w);  // pad beyond the data
  EXPECT_EQ(drop(w), roce::Drop::kTruncated);
  w = v, w[28] = roce::kReadRequest, reseal(w);  // 4 bytes: too short for a RETH
  EXPECT_EQ(drop(w), roce::Drop::kTruncated);
  w = v, w[28] = roce::kAcknowledge, w[29] = 0, reseal(w);
  EXPECT_EQ(drop(w), roce::Drop::kNone);
  w = v, w[35] = 0x00, reseal(w);  // DestQP 0
  EXPECT_EQ(drop(w), roce::Drop::kNoQp);
  w = v, w[35] = 0x01, reseal(w);  // DestQP 1 (GSI)
  EXPECT_EQ(drop(w), roce::Drop::kNoQp);
  // Trailing bytes after the IP total length (Ethernet padding) are ignored.
  w = v, w.resize(w.size() + 10, 0);
  EXPECT_EQ(drop(w), roce::Drop::kNone);
  EXPECT_STREQ(roce::drop_name(roce::Drop::kBadIcrc), "bad_icrc");
}

TEST(RoceCodec, AckWithPayloadIsABadHeader) {
  roce::Packet p = example();
  p.opcode = roce::kAcknowledge;
  p.payload_len = 0;
  std::vector<uint8_t> v = enc(p);
  // Grow the datagram by 4 zero bytes before the ICRC and re-seal: an ACK carrying data.
  v.insert(v.end() - 4, 4, 0);
  v[3] = uint8_t(v.size()), v[25] = uint8_t(v.size() - 20);
  reseal(v);
  roce::Packet q;
  EXPECT_EQ(roce::decode(v.data(), v.size(), &q), roce::Drop::kBadHeader);
}

TEST(RoceCodec, PsnArithmeticWraps) {
  EXPECT_EQ(roce::psn_diff(0, 0xFFFFFF), 1);
  EXPECT_EQ(roce::psn_diff(0xFFFFFF, 0), -1);
  EXPECT_EQ(roce::psn_diff(5, 3), 2);
  EXPECT_EQ(roce::psn_diff(0x7FFFFF, 0), 0x7FFFFF);
  EXPECT_EQ(roce::psn_diff(0x800000, 0), -0x800000);
  EXPECT_EQ(roce::psn_add(0xFFFFFE, 3), 1u);
  EXPECT_EQ(roce::psn_add(1, -2), 0xFFFFFFu);
}

}  // namespace
