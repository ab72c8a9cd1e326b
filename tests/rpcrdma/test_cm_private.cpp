// RFC 8797 connection private data against bytes written out by hand from the format Linux uses
// (struct rpcrdma_connect_private: magic 0xf6ab0e18, version 1, flags, send and receive sizes as
// (bytes / 1024) - 1).
#include <gtest/gtest.h>

#include <array>
#include <vector>

#include <rdmx/rpcrdma/cm_private.hpp>

using namespace rdmx::rpcrdma;

TEST(RpcRdmaCmPrivate, LinuxClientBytes) {
  // A Linux client: remote invalidation accepted, 4 KiB send, 4 KiB receive thresholds.
  const std::vector<uint8_t> b = {0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03};
  const CmPrivate p = decode_cm_private(b);
  EXPECT_TRUE(p.present);
  EXPECT_TRUE(p.remote_invalidation);
  EXPECT_EQ(p.inline_send, 4096u);
  EXPECT_EQ(p.inline_recv, 4096u);
  std::array<uint8_t, kCmPrivateBytes> out{};
  ASSERT_TRUE(encode_cm_private(p, out));
  EXPECT_EQ(std::vector<uint8_t>(out.begin(), out.end()), b);
}

TEST(RpcRdmaCmPrivate, SizesAndFlags) {
  // Extremes: 1 KiB (0) and 256 KiB (255); other flag bits are ignored; extra bytes too.
  const std::vector<uint8_t> b = {0xf6, 0xab, 0x0e, 0x18, 0x01, 0xfe, 0x00, 0xff, 0x77};
  const CmPrivate p = decode_cm_private(b);
  EXPECT_TRUE(p.present);
  EXPECT_FALSE(p.remote_invalidation);
  EXPECT_EQ(p.inline_send, 1024u);
  EXPECT_EQ(p.inline_recv, 256u * 1024);
  std::array<uint8_t, kCmPrivateBytes> out{};
  CmPrivate bad = p;
  bad.inline_send = 1500;  // not a multiple of 1024
  out.fill(0xee);
  EXPECT_FALSE(encode_cm_private(bad, out));
  EXPECT_EQ(out[0], 0xee);
  bad.inline_send = 512 * 1024;  // past what 8 bits hold
  EXPECT_FALSE(encode_cm_private(bad, out));
  bad.inline_send = 0;
  EXPECT_FALSE(encode_cm_private(bad, out));
}

TEST(RpcRdmaCmPrivate, ForeignDataMeansDefaults) {
  for (const std::vector<uint8_t>& b : std::vector<std::vector<uint8_t>>{
           {},                                                   // none
           {0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03},           // short
           {0xf6, 0xab, 0x0e, 0x19, 0x01, 0x01, 0x03, 0x03},     // another magic
           {0xf6, 0xab, 0x0e, 0x18, 0x02, 0x01, 0x03, 0x03}}) {  // another version
    const CmPrivate p = decode_cm_private(b);
    EXPECT_FALSE(p.present);
    EXPECT_FALSE(p.remote_invalidation);
    EXPECT_EQ(p.inline_send, kDefaultInlineThreshold);
    EXPECT_EQ(p.inline_recv, kDefaultInlineThreshold);
  }
}

TEST(RpcRdmaCmPrivate, Agreement) {
  CmPrivate client, server;
  client.remote_invalidation = true;
  client.inline_send = 4096;
  client.inline_recv = 8192;
  server.inline_send = 2048;
  server.inline_recv = 65536;
  server.present = true;
  const CmAgreement c = agree(client, server);
  EXPECT_EQ(c.inline_send, 4096u);  // min(client send, server receive)
  EXPECT_EQ(c.inline_recv, 2048u);  // min(client receive, server send)
  EXPECT_TRUE(c.peer_may_invalidate);
  EXPECT_FALSE(c.may_invalidate_peer);  // the server offered nothing
  const CmAgreement s = agree(server, client);
  EXPECT_EQ(s.inline_send, 2048u);
  EXPECT_EQ(s.inline_recv, 4096u);
  EXPECT_FALSE(s.peer_may_invalidate);  // the server did not offer its memory to invalidation
  EXPECT_TRUE(s.may_invalidate_peer);   // the client did: the server replies SEND_WITH_INV
  client.remote_invalidation = false;   // a client that does not: plain SENDs
  EXPECT_FALSE(agree(server, client).may_invalidate_peer);
  // A peer without private data: RFC 8166's 1024 bytes.
  const CmAgreement d = agree(client, decode_cm_private({}));
  EXPECT_EQ(d.inline_send, 1024u);
  EXPECT_EQ(d.inline_recv, 1024u);
}
