// lib/endpoint: the emu RoCE v2 wire in the device-name grammar ("emu@roce:A.B.C.D,loss=PCT,...")
// and opening it (raw sockets: skipped without CAP_NET_RAW).
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include <rdmx/endpoint/device.hpp>

#include "../loopback_net.hpp"

namespace {

using namespace rdmx;
using namespace rdmx::endpoint;

TEST(RoceSpec, WireAndOptions) {
  DeviceOptions o;
  auto s = parse_device_spec(
      "emu@roce:127.0.9.1,loss=1,reorder=0.5,dup=2,seed=7,mtu=2048,ack_timeout=13,retry_cnt=3", &o);
  ASSERT_TRUE(s.ok()) << s.error().message;
  EXPECT_EQ(s.value().wire, "roce:127.0.9.1");
  EXPECT_EQ(o.wire, "roce:127.0.9.1");
  EXPECT_DOUBLE_EQ(o.roce.loss, 0.01);
  EXPECT_DOUBLE_EQ(o.roce.reorder, 0.005);
  EXPECT_DOUBLE_EQ(o.roce.duplicate, 0.02);
  EXPECT_EQ(o.roce.seed, 7u);
  EXPECT_EQ(o.roce.mtu, 2048u);
  EXPECT_EQ(o.emu.timers.timeout, 13);  // the QPs' RC timers (rdma_cm's 18 and 7 unless given)
  EXPECT_EQ(o.emu.timers.retry_cnt, 3);
}

// The questions applications ask of a spec (rdmafwd's option checks) come from the grammar,
// never from searching the string.
TEST(RoceSpec, NetworkAndSink) {
  EXPECT_TRUE(device_on_network("emu@roce:127.0.9.1"));
  EXPECT_TRUE(device_on_network("emu-sink@roce:127.0.9.1,mtu=2048"));
  EXPECT_TRUE(device_on_network("mlx5"));
  EXPECT_TRUE(device_on_network("mlx5_3,port=2"));
  EXPECT_FALSE(device_on_network("emu"));
  EXPECT_FALSE(device_on_network("emu@shm:roce"));
  EXPECT_FALSE(device_on_network("emu-inline"));
  EXPECT_FALSE(device_on_network("mlx5_0@roce:127.0.9.1"));        // malformed: emu only
  EXPECT_FALSE(device_on_network("emu@roce:127.0.9.1,loss=100"));  // malformed option
  EXPECT_TRUE(device_is_sink("emu-sink"));
  EXPECT_TRUE(device_is_sink("emu-sink:wqe512"));
  EXPECT_TRUE(device_is_sink("emu-sink@roce:127.0.9.1"));
  EXPECT_FALSE(device_is_sink("emu"));
  EXPECT_FALSE(device_is_sink("mlx5"));
  EXPECT_FALSE(device_is_sink("emu-sink,bogus=1"));
}

TEST(RoceSpec, Refusals) {
  const struct {
    const char* spec;
    const char* words;
  } cases[] = {
      {"emu@roce:127.0.9.1,loss=100", "loss=100: not a percentage"},
      {"emu@roce:127.0.9.1,dup=-1", "dup=-1"},
      {"emu@roce:127.0.9.1,mtu=1000", "not a power of two"},
      {"emu@roce:127.0.9.1,pcap=", "pcap= needs a file"},
      {"emu@roce:127.0.9.1,ack_timeout=32", "ack_timeout=32: not a number in 0..31"},
      {"emu,retry_cnt=8", "retry_cnt=8: not a number in 0..7"},
      {"mlx5_0@roce:127.0.9.1", "emu only"},
  };
  for (const auto& c : cases) {
    auto s = parse_device_spec(c.spec, nullptr);
    ASSERT_FALSE(s.ok()) << c.spec;
    EXPECT_EQ(s.error().code, Errc::kInvalidArgument) << c.spec;
    EXPECT_NE(s.error().message.find(c.words), std::string::npos) << s.error().message;
  }
  auto bad = open_device("emu@roce:127.0.9");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("not an IPv4 address"), std::string::npos)
      << bad.error().message;
  auto side = open_device("emu@roce:127.0.9.1,side=1");
  ASSERT_FALSE(side.ok());
  EXPECT_NE(side.error().message.find("no sides"), std::string::npos) << side.error().message;
}

TEST(RoceSpec, OpensWithIpv4MappedGid) {
  // This process's own loopback address (tests/loopback_net.hpp): another test run on the host
  // at the same time holds another.
  const std::string ip = rdmx::test::loopback_text(9, 1);
  auto d = open_device("emu-inline@roce:" + ip);
  if (!d.ok() && d.error().message.find("CAP_NET_RAW") != std::string::npos)
    GTEST_SKIP() << d.error().message;
  ASSERT_TRUE(d.ok()) << d.error().message;
  // The network needs the device thread; the name says the wire too.
  EXPECT_EQ(d.value().backend, "emu-threaded@roce:" + ip);
  mlx5::QpConfig cfg;
  auto qp = d.value().dev->create_qp(cfg);
  ASSERT_TRUE(qp.ok()) << qp.error().message;
  const mlx5::ConnectInfo ci = d.value().dev->local_info(qp.value().qpn);
  const uint8_t want[16] = {
      0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 127, rdmx::test::loopback_net(), 9, 1};
  EXPECT_EQ(0, std::memcmp(ci.gid, want, 16));
  // The address is taken while the device is open.
  auto again = open_device("emu@roce:" + ip);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.error().code, Errc::kBusy) << again.error().message;
  ASSERT_TRUE(d.value().dev->destroy_qp(qp.value().qpn).ok());
}

}  // namespace
