// The connection-info codec (rdmx/mlx5/connect_info.hpp): exact bytes, round trip, and the
// refusals (truncated, foreign, wrong version, wrong length, corrupted, out-of-range fields),
// each a kProtocol error whose message says what was wrong.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include <rdmx/mlx5/connect_info.hpp>

using namespace rdmx;
using namespace rdmx::mlx5;

namespace {

ConnectInfo sample() {
  ConnectInfo ci;
  ci.qpn = 0x123456;
  ci.psn = 0xabcdef;
  ci.lid = 0x0102;
  for (int i = 0; i < 16; ++i) ci.gid[i] = static_cast<uint8_t>(0xf0 + i);
  ci.port_token = 0x1122334455667788ull;
  ci.port = 1;
  ci.path_mtu = 3;  // IBV_MTU_1024
  ci.initiator_depth = 16;
  ci.responder_resources = 8;
  return ci;
}

// Re-seals a modified encoding with a correct CRC (bytes 0..51, big-endian at 52), so a test
// reaches the checks after the CRC. Bitwise CRC-32 (reflected polynomial 0xedb88320): an
// independent implementation of what the codec takes from zlib.
void reseal(ConnectInfoBytes& b) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < 52; ++i) {
    c ^= b[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1)));
  }
  c = ~c;
  b[52] = static_cast<uint8_t>(c >> 24);
  b[53] = static_cast<uint8_t>(c >> 16);
  b[54] = static_cast<uint8_t>(c >> 8);
  b[55] = static_cast<uint8_t>(c);
}

void expect_refused(std::span<const uint8_t> in, const std::string& words) {
  auto r = decode_connect_info(in);
  ASSERT_FALSE(r.ok()) << "accepted; expected a refusal mentioning \"" << words << "\"";
  EXPECT_EQ(r.error().code, Errc::kProtocol);
  EXPECT_NE(r.error().message.find(words), std::string::npos) << r.error().message;
  EXPECT_EQ(r.error().message.find('\n'), std::string::npos);
}

}  // namespace

TEST(ConnectInfoCodec, ExactBytes) {
  const ConnectInfoBytes b = encode_connect_info(sample());
  const uint8_t want[52] = {
      'R',  'D',  'X',  'I',  1,    56,   0,    0,     // magic, version, length, reserved
      0x00, 0x12, 0x34, 0x56,                          // qpn
      0x00, 0xab, 0xcd, 0xef,                          // psn
      0xf0, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7,  // gid
      0xf8, 0xf9, 0xfa, 0xfb, 0xfc, 0xfd, 0xfe, 0xff,  //
      0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88,  // wire address
      0x01, 0x02, 1,    3,    16,   8,                 // lid, port, mtu, depths
      0,    0,    0,    0,    0,    0};                // reserved
  EXPECT_EQ(0, std::memcmp(b.data(), want, sizeof want));
  ConnectInfoBytes sealed = b;
  reseal(sealed);  // the CRC is zlib's CRC-32 (IEEE 802.3), big-endian
  EXPECT_EQ(b, sealed);
}

TEST(ConnectInfoCodec, RoundTripWithPadding) {
  const ConnectInfoBytes b = encode_connect_info(sample());
  std::vector<uint8_t> padded(b.begin(), b.end());
  padded.resize(64, 0);  // the C API blob and librdmacm pad with zeros
  for (std::span<const uint8_t> in :
       {std::span<const uint8_t>(b), std::span<const uint8_t>(padded)}) {
    auto r = decode_connect_info(in);
    ASSERT_TRUE(r.ok()) << r.error().message;
    const ConnectInfo& ci = r.value();
    EXPECT_EQ(ci.qpn, 0x123456u);
    EXPECT_EQ(ci.psn, 0xabcdefu);
    EXPECT_EQ(ci.lid, 0x0102);
    EXPECT_EQ(0, std::memcmp(ci.gid, sample().gid, 16));
    EXPECT_EQ(ci.port_token, 0x1122334455667788ull);
    EXPECT_EQ(ci.port, 1);
    EXPECT_EQ(ci.path_mtu, 3);
    EXPECT_EQ(ci.initiator_depth, 16);
    EXPECT_EQ(ci.responder_resources, 8);
  }
  // Zero = not stated survives as zero (QPN 0 is QP0, refused: the first connectable QPN).
  ConnectInfo zero;
  zero.qpn = 2;
  auto z = decode_connect_info(encode_connect_info(zero));
  ASSERT_TRUE(z.ok()) << z.error().message;
  EXPECT_EQ(z.value().path_mtu, 0);
  EXPECT_EQ(z.value().initiator_depth, 0);
}

TEST(ConnectInfoCodec, Hex) {
  const std::string h = encode_connect_info_hex(sample());
  EXPECT_EQ(h.size(), 2 * kConnectInfoBytes);
  EXPECT_EQ(h.substr(0, 12), "524458490138");
  auto r = decode_connect_info_hex(h);
  ASSERT_TRUE(r.ok()) << r.error().message;
  EXPECT_EQ(r.value().qpn, 0x123456u);
  std::string not_hex = h;
  not_hex[20] = 'g';
  auto bad = decode_connect_info_hex(not_hex);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.error().code, Errc::kProtocol);
  EXPECT_FALSE(decode_connect_info_hex(h.substr(0, 111)).ok());
  EXPECT_FALSE(decode_connect_info_hex(h.substr(0, 100)).ok());  // truncated
  EXPECT_FALSE(decode_connect_info_hex(h + "00").ok());
}

TEST(ConnectInfoCodec, RefusesTruncated) {
  const ConnectInfoBytes b = encode_connect_info(sample());
  expect_refused({}, "truncated: 0 bytes");
  for (size_t n : {1u, 3u, 5u}) expect_refused(std::span<const uint8_t>(b.data(), n), "truncated");
  expect_refused(std::span<const uint8_t>(b.data(), 55), "truncated: 55 of 56 bytes");
}

TEST(ConnectInfoCodec, RefusesForeign) {
  ConnectInfoBytes b = encode_connect_info(sample());
  b[0] = 'r';
  expect_refused(b, "foreign");
  const char text[] = "qpn 1234\npsn 5\n";  // the old rendezvous text
  expect_refused(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(text), sizeof text),
                 "not an rdmx endpoint");
  const uint8_t old_dv[8] = {'r', 'x', 1, 0, 0, 0, 0, 0};  // the old 40-byte private data
  expect_refused(old_dv, "foreign");
  expect_refused(std::span<const uint8_t>(old_dv, 2), "foreign");
}

TEST(ConnectInfoCodec, RefusesOtherVersionAndLength) {
  ConnectInfoBytes b = encode_connect_info(sample());
  b[4] = 2;
  reseal(b);
  expect_refused(b, "version 2, this build speaks version 1");
  b = encode_connect_info(sample());
  b[5] = 60;
  reseal(b);
  expect_refused(b, "length 60");
}

TEST(ConnectInfoCodec, RefusesCorrupted) {
  const ConnectInfoBytes good = encode_connect_info(sample());
  for (size_t i = 6; i < kConnectInfoBytes; ++i) {
    ConnectInfoBytes b = good;
    b[i] ^= 0x01;
    expect_refused(b, "corrupted");
  }
}

TEST(ConnectInfoCodec, RefusesOutOfRangeFields) {
  ConnectInfoBytes b = encode_connect_info(sample());
  b[8] = 0x01;  // above the 24-bit QPN
  reseal(b);
  expect_refused(b, "QPN 0x1123456 is wider than 24 bits");
  b = encode_connect_info(sample());
  b[12] = 0x80;
  reseal(b);
  expect_refused(b, "PSN");
  b = encode_connect_info(sample());
  b[43] = 6;
  reseal(b);
  expect_refused(b, "path MTU code 6");
}

// The field rules (connect_info.hpp, "Field rules"), each field at 0, max, max - 1 and where a
// 24-bit or 16-bit value would wrap, through the decoder (what a peer's bytes meet) and through
// check_connect_info (what a hand-made info meets).
namespace {

// The sample with one field changed, encoded without masking and resealed.
ConnectInfoBytes with_be(size_t off, int n, uint64_t v) {
  ConnectInfoBytes b = encode_connect_info(sample());
  for (int i = n - 1; i >= 0; --i, v >>= 8) b[off + i] = static_cast<uint8_t>(v);
  reseal(b);
  return b;
}

void expect_accepted(std::span<const uint8_t> in) {
  auto r = decode_connect_info(in);
  EXPECT_TRUE(r.ok()) << r.error().message;
}

}  // namespace

TEST(ConnectInfoRules, Qpn) {
  for (uint64_t bad : {0ull, 1ull, 0xffffffull, 0x1000000ull, 0xffffffffull})
    expect_refused(with_be(8, 4, bad), "QPN");
  for (uint64_t good : {2ull, 3ull, 0x100ull, 0xfffffdull, 0xfffffeull})
    expect_accepted(with_be(8, 4, good));
  ConnectInfo ci = sample();
  ci.qpn = 0xffffff;
  EXPECT_FALSE(check_connect_info(ci).ok());
  ci.qpn = 0xfffffe;
  EXPECT_TRUE(check_connect_info(ci).ok());
}

TEST(ConnectInfoRules, Psn) {
  for (uint64_t good : {0ull, 1ull, 0xfffffeull, 0xffffffull})
    expect_accepted(with_be(12, 4, good));
  for (uint64_t bad : {0x1000000ull, 0x1000001ull, 0xffffffffull})
    expect_refused(with_be(12, 4, bad), "PSN");
}

TEST(ConnectInfoRules, Lid) {
  for (uint64_t good : {0ull, 1ull, 0xbffeull, 0xbfffull}) expect_accepted(with_be(40, 2, good));
  expect_refused(with_be(40, 2, 0xc000), "multicast LID");
  expect_refused(with_be(40, 2, 0xfffe), "multicast LID");
  expect_refused(with_be(40, 2, 0xffff), "permissive LID");
}

TEST(ConnectInfoRules, Gid) {
  auto gid_bytes = [](std::initializer_list<uint8_t> head, std::initializer_list<uint8_t> tail) {
    ConnectInfoBytes b = encode_connect_info(sample());
    std::memset(&b[16], 0, 16);
    size_t i = 16;
    for (uint8_t x : head) b[i++] = x;
    i = 32 - tail.size();
    for (uint8_t x : tail) b[i++] = x;
    reseal(b);
    return b;
  };
  expect_accepted(gid_bytes({}, {}));                // not stated
  expect_accepted(gid_bytes({0xfe, 0x80}, {0x01}));  // link local
  expect_accepted(gid_bytes({0xfe}, {0xff}));        // ff only at the end
  expect_refused(gid_bytes({0xff}, {}), "multicast GID");
  expect_refused(gid_bytes({0xff, 0x02}, {0x01}), "multicast GID");
  const std::initializer_list<uint8_t> v4 = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  auto mapped = [&](uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
    ConnectInfoBytes x = gid_bytes(v4, {a, b, c, d});
    return x;
  };
  expect_accepted(mapped(10, 47, 0, 1));
  expect_accepted(mapped(0, 0, 0, 1));
  expect_accepted(mapped(223, 255, 255, 255));  // the last unicast class-C address
  expect_accepted(mapped(240, 0, 0, 1));        // 240/4 is not multicast
  expect_accepted(mapped(255, 255, 255, 254));
  expect_refused(mapped(0, 0, 0, 0), "not a unicast IPv4 host");
  expect_refused(mapped(224, 0, 0, 1), "not a unicast IPv4 host");
  expect_refused(mapped(239, 255, 255, 255), "not a unicast IPv4 host");
  expect_refused(mapped(255, 255, 255, 255), "not a unicast IPv4 host");
}

TEST(ConnectInfoRules, MtuPortDepths) {
  for (uint64_t good : {0ull, 1ull, 4ull, 5ull}) expect_accepted(with_be(43, 1, good));
  for (uint64_t bad : {6ull, 0xfeull, 0xffull}) expect_refused(with_be(43, 1, bad), "path MTU");
  // Port and READ depths: any byte (never used but through min() with the local value).
  for (size_t off : {42u, 44u, 45u})
    for (uint64_t v : {0ull, 1ull, 0xfeull, 0xffull}) expect_accepted(with_be(off, 1, v));
  ConnectInfo mine = sample(), peer = sample();
  peer.initiator_depth = peer.responder_resources = 0xff;
  peer.path_mtu = 5;
  const Negotiated n = negotiate(mine, peer);
  EXPECT_EQ(n.max_rd_atomic, mine.initiator_depth);
  EXPECT_EQ(n.max_dest_rd_atomic, mine.responder_resources);
  EXPECT_EQ(n.path_mtu, mine.path_mtu);
}
