// lib/endpoint's TCP rendezvous over loopback (suite 'endpoint'): the exchange, every refusal
// (foreign bytes, another version, a peer that closes mid-frame, a refusal frame), the bounded
// waits and the cancel flag. Every wait in these tests is bounded by a budget of its own.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include <rdmx/endpoint/rendezvous.hpp>

namespace {

using namespace rdmx;
using namespace rdmx::endpoint;
using namespace std::chrono_literals;

template <class T>
T take(Result<T>&& r) {
  if (!r.ok()) throw std::runtime_error(r.error().message);
  return std::move(r).value();
}

Listener loopback_listener() {
  return take(Listener::listen(take(parse_listen_address("127.0.0.1:0"))));
}

HostPort to(const Listener& l) {
  return HostPort{"127.0.0.1", l.port()};
}

// A raw client that writes `bytes` then closes (what a broken or foreign peer does).
void raw_client(uint16_t port, std::string bytes) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0)
    (void)!::write(fd, bytes.data(), bytes.size());
  ::close(fd);
}

TEST(Rendezvous, Addresses) {
  auto l = take(parse_listen_address("7471"));
  EXPECT_EQ(l.host, "0.0.0.0");
  EXPECT_EQ(l.port, 7471);
  l = take(parse_listen_address("10.0.0.1:9"));
  EXPECT_EQ(l.host, "10.0.0.1");
  EXPECT_EQ(l.port, 9);
  l = take(parse_listen_address("[::1]:80"));
  EXPECT_EQ(l.host, "::1");
  EXPECT_EQ(l.str(), "[::1]:80");
  auto p = take(parse_peer_address("server"));
  EXPECT_EQ(p.port, kDefaultRendezvousPort);
  p = take(parse_peer_address("10.0.0.1:8000"));
  EXPECT_EQ(p.str(), "10.0.0.1:8000");
  for (const char* bad : {"", "host", "1.2.3.4:x", "1.2.3.4:70000", "::1:80", "[::1"})
    EXPECT_EQ(parse_listen_address(bad).error().code, Errc::kInvalidArgument) << bad;
  for (const char* bad : {"", ":80", "h:0", "h:-1", "[::1]x"})
    EXPECT_EQ(parse_peer_address(bad).error().code, Errc::kInvalidArgument) << bad;
}

TEST(Rendezvous, ExchangeInfoBothWays) {
  Listener l = loopback_listener();
  mlx5::ConnectInfo ci;
  ci.qpn = 0x123456;
  ci.psn = 0xabcdef;
  ci.port_token = 0x1122334455667788ull;
  ci.path_mtu = 5;
  std::thread client([&] {
    Channel c = take(Channel::connect(to(l), {2s}));
    ASSERT_TRUE(c.send_text(FrameType::kHello, "depth 32\n").ok());
    Frame w = take(c.expect(FrameType::kWelcome));
    EXPECT_EQ(w.text(), "wire shm:x\n");
    auto infos = take(c.recv_info());
    ASSERT_EQ(infos.size(), 2u);
    EXPECT_EQ(infos[1].qpn, 0x123456u);
    EXPECT_EQ(infos[1].port_token, 0x1122334455667788ull);
    uint8_t gid[16];
    ASSERT_TRUE(c.local_ipv4_gid(gid));
    EXPECT_EQ(gid[10], 0xff);
    EXPECT_EQ(gid[12], 127);
    mlx5::ConnectInfo mine = infos[0];
    mine.qpn = 7;
    ASSERT_TRUE(c.send_info({&mine, 1}).ok());
    take(c.expect(FrameType::kReady));
  });
  Channel s = take(l.accept({5s}));
  EXPECT_EQ(take(s.expect(FrameType::kHello)).text(), "depth 32\n");
  ASSERT_TRUE(s.send_text(FrameType::kWelcome, "wire shm:x\n").ok());
  mlx5::ConnectInfo first;
  first.qpn = 0x100;
  const mlx5::ConnectInfo two[2] = {first, ci};
  ASSERT_TRUE(s.send_info(two).ok());
  auto theirs = take(s.recv_info());
  ASSERT_EQ(theirs.size(), 1u);
  EXPECT_EQ(theirs[0].qpn, 7u);
  ASSERT_TRUE(s.send(FrameType::kReady, {}).ok());
  client.join();
  // The client has gone: the server sees it without waiting.
  for (int i = 0; i < 200 && !s.peer_gone(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(s.peer_gone());
}

TEST(Rendezvous, RefusalCarriesItsCode) {
  Listener l = loopback_listener();
  std::thread server([&] {
    Channel s = take(l.accept({5s}));
    take(s.expect(FrameType::kHello));
    ASSERT_TRUE(s.refuse(Errc::kInvalidArgument, "page-size 65536 differs from 4096").ok());
  });
  Channel c = take(Channel::connect(to(l), {2s}));
  ASSERT_TRUE(c.send_text(FrameType::kHello, "x").ok());
  auto r = c.expect(FrameType::kWelcome);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kInvalidArgument);
  EXPECT_NE(r.error().message.find("refused by 127.0.0.1:"), std::string::npos);
  EXPECT_NE(r.error().message.find("page-size 65536 differs"), std::string::npos);
  server.join();
}

struct BadPeer {
  const char* bytes;
  size_t n;
  const char* says;
};

TEST(Rendezvous, BadPeersAreRefusedInOneLine) {
  const BadPeer cases[] = {
      {"GET / HTTP/1.0\r\n\r\n", 18, "does not speak the rdmx rendezvous"},
      {"RDXR\x09\x01\x00\x00", 8, "speaks rendezvous version 9, this program speaks 1"},
      {"RDX", 3, "closed the connection in the middle of a rendezvous message (3 of 8 bytes)"},
      {"RDXR\x01\x01\x00\x10"
       "abc",
       11, "closed the connection in the middle of hello"},
      {"", 0, "closed the connection before sending a rendezvous message"},
      {"RDXR\x01\x03\x00\x02"
       "ab",
       10, "connection info of 2 bytes"},
  };
  for (const BadPeer& b : cases) {
    Listener l = loopback_listener();
    std::thread t(raw_client, l.port(), std::string(b.bytes, b.n));
    Channel s = take(l.accept({5s}));
    t.join();
    const bool info = b.bytes[0] && b.n > 5 && b.bytes[5] == 3;
    const Error e = info ? s.recv_info({2s}).error() : s.recv({2s}).error();
    EXPECT_EQ(e.code, Errc::kProtocol) << e.message;
    EXPECT_NE(e.message.find(b.says), std::string::npos) << e.message;
    EXPECT_EQ(e.message.find('\n'), std::string::npos) << e.message;
  }
}

TEST(Rendezvous, CorruptedConnectInfoIsRefused) {
  Listener l = loopback_listener();
  std::thread client([&] {
    Channel c = take(Channel::connect(to(l), {2s}));
    mlx5::ConnectInfoBytes b = mlx5::encode_connect_info(mlx5::ConnectInfo{});
    b[20] ^= 1;  // under the CRC
    ASSERT_TRUE(c.send(FrameType::kInfo, b).ok());
    std::this_thread::sleep_for(10ms);
  });
  Channel s = take(l.accept({5s}));
  const Error e = s.recv_info({2s}).error();
  client.join();
  EXPECT_EQ(e.code, Errc::kProtocol);
  EXPECT_NE(e.message.find("connection info 0"), std::string::npos) << e.message;
}

TEST(Rendezvous, WaitsAreBoundedAndInterruptible) {
  Listener l = loopback_listener();
  // Nobody connects: the accept budget ends the wait.
  auto a = l.accept({100ms});
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.error().code, Errc::kTimeout);
  EXPECT_NE(a.error().message.find("no client on 127.0.0.1:"), std::string::npos);
  // The cancel flag (a signal handler's) ends it well before its 60 s budget.
  std::atomic<bool> stop{false};
  std::thread t([&] {
    std::this_thread::sleep_for(20ms);
    stop = true;
  });
  const auto t0 = std::chrono::steady_clock::now();
  auto b = l.accept({60s, &stop});
  t.join();
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.error().code, Errc::kState);
  EXPECT_NE(b.error().message.find("interrupted while waiting for a client"), std::string::npos);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 30s);
  // A connected peer that says nothing: the exchange budget ends the wait.
  std::thread quiet([&] {
    Channel c = take(Channel::connect(to(l), {2s}));
    std::this_thread::sleep_for(300ms);
  });
  Channel s = take(l.accept({5s}));
  auto r = s.recv({50ms});
  quiet.join();
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kTimeout);
}

TEST(Rendezvous, NoServerIsATimeoutNamingTheAddress) {
  uint16_t port;
  {
    Listener l = loopback_listener();
    port = l.port();
  }  // closed: nobody listens there now
  auto c = Channel::connect({"127.0.0.1", port}, {150ms});
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.error().code, Errc::kTimeout);
  EXPECT_NE(c.error().message.find("no server at 127.0.0.1:" + std::to_string(port)),
            std::string::npos)
      << c.error().message;
  EXPECT_NE(c.error().message.find("refused"), std::string::npos) << c.error().message;
  auto h = Channel::connect({"no-such-host.invalid", 7471}, {150ms});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.error().code, Errc::kInvalidArgument);
  EXPECT_NE(h.error().message.find("cannot resolve 'no-such-host.invalid'"), std::string::npos);
}

TEST(Rendezvous, ListenRefusals) {
  Listener l = loopback_listener();
  auto busy = Listener::listen({"127.0.0.1", l.port()});
  ASSERT_FALSE(busy.ok());
  EXPECT_EQ(busy.error().code, Errc::kBusy);
  // TEST-NET-3 (RFC 5737) is no address of this host.
  auto foreign = Listener::listen({"203.0.113.9", 7471});
  ASSERT_FALSE(foreign.ok());
  EXPECT_EQ(foreign.error().code, Errc::kInvalidArgument);
  EXPECT_NE(foreign.error().message.find("not an address of this host"), std::string::npos);
}

}  // namespace

// The one check of a peer's connection info list: the count the receiver connects, no QPN
// twice, every field in the codec's rules.
TEST(Rendezvous, CheckPeerInfos) {
  std::vector<mlx5::ConnectInfo> v(3);
  for (size_t i = 0; i < v.size(); ++i) v[i].qpn = 0x100 + static_cast<uint32_t>(i);
  EXPECT_TRUE(check_peer_infos(v, 3).ok());
  for (size_t want : {size_t{0}, size_t{2}, size_t{4}, SIZE_MAX}) {
    const Status st = check_peer_infos(v, want);
    ASSERT_FALSE(st.ok()) << want;
    EXPECT_EQ(st.error().code, Errc::kProtocol);
    EXPECT_NE(st.error().message.find("sent 3 connection info(s)"), std::string::npos)
        << st.error().message;
  }
  EXPECT_TRUE(check_peer_infos({}, 0).ok());
  v[2].qpn = v[0].qpn;  // a second info for one QP
  Status st = check_peer_infos(v, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("connection info 2 names QPN 256 again (info 0)"),
            std::string::npos)
      << st.error().message;
  v[2].qpn = 0x102;
  v[1].qpn = 1;  // a field rule (QP1)
  st = check_peer_infos(v, 3);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.error().message.find("connection info 1: connect info: QPN 0x1"), std::string::npos)
      << st.error().message;
}
