// lib/endpoint's Session and SessionServer over loopback (suite 'endpoint'): a connection's life
// from hello to goodbye, stepped without waiting, against a real session and against a fake
// peer (raw frames) that disagrees, stalls, sends junk, closes mid-handshake or breaks the rules
// during the run. Every wait is bounded: step deadlines of 200 ms, test budgets of seconds.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <rdmx/endpoint/session.hpp>

#include "fake_peer.hpp"

namespace {

using namespace rdmx;
using namespace rdmx::endpoint;
using namespace rdmx::endpoint::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr SessionConfig kFast{200ms};

mlx5::ConnectInfo info(uint32_t qpn) {
  mlx5::ConnectInfo ci;
  ci.qpn = qpn;
  ci.psn = 0x1234;
  ci.path_mtu = 3;
  return ci;
}

std::string info_frame(std::initializer_list<uint32_t> qpns) {
  std::string p;
  for (uint32_t q : qpns) {
    const auto b = mlx5::encode_connect_info(info(q));
    p.append(reinterpret_cast<const char*>(b.data()), b.size());
  }
  return frame(FrameType::kInfo, p);
}

// Steps `s` until an event, or `budget` passes (kNone then).
SessionEvent next(Session& s, std::chrono::milliseconds budget = 3s) {
  const auto end = Clock::now() + budget;
  for (;;) {
    const SessionEvent e = s.step();
    if (e != SessionEvent::kNone || Clock::now() > end) return e;
    std::this_thread::sleep_for(1ms);
  }
}

struct SessionTest : ::testing::Test {
  Listener l = take(Listener::listen(take(parse_listen_address("127.0.0.1:0"))));
  std::vector<std::string> log;
  SessionServer srv{&l,
                    {2s, 64},
                    kFast,
                    [](void* a, const std::string& peer, const std::string& line) {
                      EXPECT_NE(line.find(peer), std::string::npos);
                      static_cast<SessionTest*>(a)->log.push_back(line);
                    },
                    this};
  HostPort to() const { return {"127.0.0.1", l.port()}; }
  // The next admitted session, within `budget`.
  std::optional<Session> admit(std::chrono::milliseconds budget = 3s) {
    const auto end = Clock::now() + budget;
    for (;;) {
      auto s = take(srv.try_admit());
      if (s || Clock::now() > end) return s;
      std::this_thread::sleep_for(1ms);
    }
  }
  // A server session in INFO for a fake client that sent `hello`, welcomed, its info sent.
  Session server_in_info(Raw& c, size_t expected = 1) {
    c.put(frame(FrameType::kHello, "io-depth 8\n"));
    std::optional<Session> s = admit();
    if (!s) throw std::runtime_error("not admitted");
    if (!s->welcome({{"io-depth", "8"}}).ok()) throw std::runtime_error("welcome");
    const mlx5::ConnectInfo mine = info(0x100);
    if (!s->send_info({&mine, 1}, expected).ok()) throw std::runtime_error("send_info");
    return std::move(*s);
  }
};

// Both ends real, in one thread: every state and event in order, the goodbye both ways.
TEST_F(SessionTest, HelloToGoodbye) {
  Channel ch = take(Channel::connect(to(), {2s}));
  Session c = take(Session::client(std::move(ch), {{"io-depth", "8"}, {"fwd", "rpc"}}, kFast));
  EXPECT_EQ(c.state(), SessionState::kHello);
  std::optional<Session> s = admit();
  ASSERT_TRUE(s);
  EXPECT_EQ(*field(s->hello_fields(), "fwd"), "rpc");
  ASSERT_TRUE(s->welcome({{"io-depth", "8"}}, {{"wire", "w1"}}).ok());
  ASSERT_EQ(next(c), SessionEvent::kWelcome);
  EXPECT_EQ(*field(c.welcome_fields(), "wire"), "w1");
  // The infos cross: the server's two QPs, the client's two.
  const mlx5::ConnectInfo srv_qps[2] = {info(0x10), info(0x11)};
  const mlx5::ConnectInfo cli_qps[2] = {info(0x20), info(0x21)};
  ASSERT_TRUE(s->send_info(srv_qps, 2).ok());
  ASSERT_TRUE(c.send_info(cli_qps, 2).ok());
  ASSERT_EQ(next(c), SessionEvent::kInfos);
  ASSERT_EQ(next(*s), SessionEvent::kInfos);
  EXPECT_EQ(c.peer_infos().at(1).qpn, 0x11u);
  EXPECT_EQ(s->peer_infos().at(0).qpn, 0x20u);
  ASSERT_TRUE(s->ready("lane 0 rkeys 1 2").ok());
  ASSERT_TRUE(c.ready().ok());
  ASSERT_EQ(next(c), SessionEvent::kReady);
  ASSERT_EQ(next(*s), SessionEvent::kReady);
  EXPECT_EQ(c.peer_ready_text(), "lane 0 rkeys 1 2");
  EXPECT_EQ(c.state(), SessionState::kRunning);
  EXPECT_EQ(s->state(), SessionState::kRunning);
  EXPECT_EQ(s->step(), SessionEvent::kNone);  // nothing during the run: nothing happens
  ASSERT_TRUE(c.close("ios 42").ok());
  EXPECT_EQ(c.state(), SessionState::kClosing);
  ASSERT_EQ(next(*s), SessionEvent::kBye);
  EXPECT_EQ(s->bye_text(), "ios 42");
  EXPECT_EQ(s->state(), SessionState::kClosing);
  ASSERT_TRUE(s->close().ok());
  EXPECT_EQ(s->state(), SessionState::kClosed);
  ASSERT_EQ(next(c), SessionEvent::kClosed);
  EXPECT_EQ(c.state(), SessionState::kClosed);
}

// The blocking forms, the client in a thread of its own.
TEST_F(SessionTest, BlockingClientAgainstSteppedServer) {
  std::thread cli([&] {
    Session c = take(Session::client(take(Channel::connect(to(), {2s})), {{"io-depth", "8"}}));
    ASSERT_TRUE(c.await(SessionEvent::kWelcome, {3s}).ok());
    const mlx5::ConnectInfo mine = info(0x20);
    ASSERT_TRUE(c.send_info({&mine, 1}, 1).ok());
    ASSERT_TRUE(c.await(SessionEvent::kInfos, {3s}).ok());
    ASSERT_TRUE(c.ready().ok());
    ASSERT_TRUE(c.await(SessionEvent::kReady, {3s}).ok());
    ASSERT_TRUE(c.close().ok());
    ASSERT_TRUE(c.await(SessionEvent::kClosed, {3s}).ok());
  });
  std::optional<Session> s = admit();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->welcome({{"io-depth", "8"}}).ok());
  const mlx5::ConnectInfo mine = info(0x10);
  ASSERT_TRUE(s->send_info({&mine, 1}, 1).ok());
  ASSERT_EQ(next(*s), SessionEvent::kInfos);
  ASSERT_TRUE(s->ready().ok());
  ASSERT_EQ(next(*s), SessionEvent::kReady);
  ASSERT_EQ(next(*s), SessionEvent::kBye);
  ASSERT_TRUE(s->close().ok());
  cli.join();
}

// The sizes both run with are checked once, at the welcome: a client that differs is refused
// with the one line that says what differs, and sees that line as its error.
TEST_F(SessionTest, DisagreementRefusesTheClient) {
  Session c =
      take(Session::client(take(Channel::connect(to(), {2s})), {{"io-depth", "16"}}, kFast));
  std::optional<Session> s = admit();
  ASSERT_TRUE(s);
  Status w = s->welcome({{"io-depth", "8"}, {"page-size", "4096"}});
  ASSERT_FALSE(w.ok());
  EXPECT_EQ(w.error().code, Errc::kInvalidArgument);
  EXPECT_EQ(w.error().message, "the client runs io-depth 16, this server 8");
  EXPECT_EQ(s->state(), SessionState::kDropped);
  ASSERT_EQ(next(c), SessionEvent::kDropped);
  EXPECT_EQ(c.error().code, Errc::kInvalidArgument);
  EXPECT_NE(c.error().message.find("the client runs io-depth 16, this server 8"),
            std::string::npos);
  // With the application's explanation of the field.
  Session c2 =
      take(Session::client(take(Channel::connect(to(), {2s})), {{"io-depth", "16"}}, kFast));
  std::optional<Session> s2 = admit();
  ASSERT_TRUE(s2);
  w = s2->welcome({{"io-depth", "8"}}, {},
                  [](const Field& f) { return "start both with the same --" + f.key; });
  EXPECT_EQ(w.error().message,
            "the client runs io-depth 16, this server 8: start both with the same --io-depth");
  // A field the client does not state differs too.
  EXPECT_EQ(disagreement({{"io-depth", "8"}}, {{"io-depth", "8"}, {"page-size", "4096"}}),
            "the peer runs page-size (not stated), this side 4096");
}

// A peer that stalls after its hello: dropped when its step deadline passes, not before, and
// the blocking form returns at that deadline rather than its own budget.
TEST_F(SessionTest, StallingPeerIsDroppedAtItsDeadline) {
  Raw c(l.port());
  Session s = server_in_info(c);
  const auto t0 = Clock::now();
  auto e = s.wait_event({2s});
  const auto took = Clock::now() - t0;
  ASSERT_TRUE(e.ok()) << e.error().message;
  EXPECT_EQ(e.value(), SessionEvent::kDropped);
  EXPECT_EQ(s.error().code, Errc::kTimeout);
  EXPECT_NE(s.error().message.find("sent no connection info within 200 ms"), std::string::npos)
      << s.error().message;
  EXPECT_GE(took, 150ms);
  EXPECT_LT(took, 3s);
}

// A client that never answers the welcome: dropped by its own step() too.
TEST_F(SessionTest, ServerThatNeverWelcomesIsDropped) {
  Session c = take(Session::client(take(Channel::connect(to(), {2s})), {{"io-depth", "8"}}, kFast));
  ASSERT_TRUE(admit());  // admitted, never answered (the session is gone with the optional)
  EXPECT_EQ(next(c), SessionEvent::kDropped);
  EXPECT_TRUE(c.error().code == Errc::kTimeout || c.error().code == Errc::kProtocol)
      << c.error().message;
}

TEST_F(SessionTest, JunkInPlaceOfInfoIsDropped) {
  Raw c(l.port());
  Session s = server_in_info(c);
  c.put("GET / HTTP/1.1\r\n\r\n");
  ASSERT_EQ(next(s), SessionEvent::kDropped);
  EXPECT_EQ(s.error().code, Errc::kProtocol);
  EXPECT_NE(s.error().message.find("does not speak the rdmx rendezvous"), std::string::npos);
  EXPECT_FALSE(s.channel().valid());  // the socket is closed with the session
}

TEST_F(SessionTest, PeerClosingMidHandshakeIsDropped) {
  Raw c(l.port());
  Session s = server_in_info(c);
  c.put(info_frame({7}).substr(0, 20));  // part of its info, then gone
  c.shut();
  ASSERT_EQ(next(s), SessionEvent::kDropped);
  EXPECT_EQ(s.error().code, Errc::kProtocol);
  EXPECT_NE(s.error().message.find("closed the connection in the middle of connection info"),
            std::string::npos)
      << s.error().message;
}

// The peer's infos are checked (check_peer_infos) before the application sees any.
TEST_F(SessionTest, BadInfosAreDroppedBeforeUse) {
  {
    Raw c(l.port());
    Session s = server_in_info(c, 2);
    c.put(info_frame({7, 7}));  // one QP named twice
    ASSERT_EQ(next(s), SessionEvent::kDropped);
    EXPECT_NE(s.error().message.find("names QPN 7 again"), std::string::npos);
    EXPECT_TRUE(s.peer_infos().empty());
    // The peer is told why: after the welcome and the server's info, a refusal naming it.
    const std::string got = c.drain();
    const std::string refusal = frame(FrameType::kRefuse, "");
    const size_t at = got.find(refusal.substr(0, 6));
    ASSERT_NE(at, std::string::npos);
    EXPECT_NE(got.find("names QPN 7 again", at), std::string::npos);
  }
  {
    Raw c(l.port());
    Session s = server_in_info(c, 2);
    c.put(info_frame({7}));  // one for two QPs
    ASSERT_EQ(next(s), SessionEvent::kDropped);
    EXPECT_NE(s.error().message.find("sent 1 connection info(s) for 2 QP(s)"), std::string::npos);
  }
}

// During the run: nothing but a goodbye; a peer that leaves without one is seen at once.
TEST_F(SessionTest, RunningPeerBreakingTheRulesIsDropped) {
  auto running = [&](Raw& c) {
    Session s = server_in_info(c);
    c.put(info_frame({7}));
    EXPECT_EQ(next(s), SessionEvent::kInfos);
    EXPECT_TRUE(s.ready().ok());
    c.put(frame(FrameType::kReady, ""));
    EXPECT_EQ(next(s), SessionEvent::kReady);
    return s;
  };
  {
    Raw c(l.port());
    Session s = running(c);
    c.put(info_frame({8}));  // a second connection info
    ASSERT_EQ(next(s), SessionEvent::kDropped);
    EXPECT_NE(s.error().message.find("sent connection info (frame type 3) during the run"),
              std::string::npos)
        << s.error().message;
  }
  {
    Raw c(l.port());
    Session s = running(c);
    c.shut();
    ASSERT_EQ(next(s), SessionEvent::kDropped);
    EXPECT_NE(s.error().message.find("went away without a goodbye"), std::string::npos)
        << s.error().message;
  }
  {
    Raw c(l.port());
    Session s = running(c);
    c.put(frame(FrameType::kBye, "ios 1"));
    c.shut();  // a goodbye followed at once by the close is a goodbye
    ASSERT_EQ(next(s), SessionEvent::kBye);
    EXPECT_EQ(s.bye_text(), "ios 1");
    ASSERT_TRUE(s.close().ok());
    EXPECT_EQ(s.state(), SessionState::kClosed);
  }
}

// rdma_cm connected the QPs: no INFO either way, straight to READY.
TEST_F(SessionTest, ConnectedElsewhereSkipsTheInfos) {
  Session c = take(Session::client(take(Channel::connect(to(), {2s})), {}, kFast));
  std::optional<Session> s = admit();
  ASSERT_TRUE(s);
  ASSERT_TRUE(s->welcome({}).ok());
  ASSERT_EQ(next(c), SessionEvent::kWelcome);
  ASSERT_TRUE(c.connected_elsewhere().ok());
  ASSERT_TRUE(s->connected_elsewhere().ok());
  EXPECT_EQ(c.connected_elsewhere().error().code, Errc::kState);  // once
  ASSERT_TRUE(c.ready().ok());
  ASSERT_TRUE(s->ready().ok());
  ASSERT_EQ(next(c), SessionEvent::kReady);
  ASSERT_EQ(next(*s), SessionEvent::kReady);
}

// Each move is refused out of its state (no frame goes).
TEST_F(SessionTest, MovesOutOfStateAreRefused) {
  Raw c(l.port());
  Session s = server_in_info(c);
  EXPECT_EQ(s.ready().error().code, Errc::kState);  // the peer's infos have not come
  EXPECT_EQ(s.close().error().code, Errc::kState);
  const mlx5::ConnectInfo again = info(1);
  EXPECT_EQ(s.send_info({&again, 1}, 1).error().code, Errc::kState);
  EXPECT_EQ(s.welcome({}).error().code, Errc::kState);
  EXPECT_EQ(s.state(), SessionState::kInfo);
  // Waiting while the next move is this side's returns at once.
  Session idle = Session::after_hello(Channel(), kFast);
  EXPECT_EQ(idle.wait_event({5s}).error().code, Errc::kState);
}

// Admission never waits on one peer: silent and foreign connections do not delay a hello; each
// refused one is one line.
TEST_F(SessionTest, ServerAdmitsPastSilentAndForeignPeers) {
  SessionServer quick(
      &l, {300ms, 64}, kFast,
      [](void* a, const std::string& peer, const std::string& line) {
        EXPECT_NE(line.find(peer), std::string::npos);
        static_cast<SessionTest*>(a)->log.push_back(line);
      },
      this);
  std::vector<std::unique_ptr<Raw>> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(std::make_unique<Raw>(l.port()));
  Raw foreign(l.port());
  foreign.put("SSH-2.0-OpenSSH\r\n");
  Raw good(l.port());
  good.put(frame(FrameType::kHello, "io-depth 8\n"));
  const auto t0 = Clock::now();
  std::optional<Session> s;
  while (!s && Clock::now() - t0 < 3s) s = take(quick.try_admit());
  ASSERT_TRUE(s);
  EXPECT_LT(Clock::now() - t0, 250ms);  // before the silent ones' deadline
  EXPECT_EQ(*field(s->hello_fields(), "io-depth"), "8");
  // The silent ones, once their hello deadline passes: one line each.
  while (quick.refused() < 6 && Clock::now() - t0 < 3s) {
    EXPECT_FALSE(take(quick.try_admit()));
    std::this_thread::sleep_for(5ms);
  }
  EXPECT_EQ(quick.refused(), 6u);
  ASSERT_EQ(log.size(), 6u);
  size_t foreign_lines = 0, silent_lines = 0;
  for (const std::string& line : log) {
    foreign_lines += line.find("does not speak the rdmx rendezvous") != std::string::npos;
    silent_lines += line.find("sent no hello within 300 ms") != std::string::npos;
  }
  EXPECT_EQ(foreign_lines, 1u);
  EXPECT_EQ(silent_lines, 5u);
}

TEST(SessionFields, TextRoundTrip) {
  const Fields f = {{"fwd", "rpc"}, {"lanes", "2"}, {"cm", "off"}};
  EXPECT_EQ(fields_text(f), "fwd rpc\nlanes 2\ncm off\n");
  const Fields g = parse_fields("fwd rpc\nnospace\nlanes 2\ncm off");
  ASSERT_EQ(g.size(), 3u);
  EXPECT_EQ(g[2].key, "cm");
  EXPECT_EQ(g[2].value, "off");
  EXPECT_EQ(field(g, "absent"), nullptr);
  EXPECT_EQ(disagreement(g, f), "");
}

}  // namespace

namespace {

SessionConfig with_link(const char* link) {
  SessionConfig c = kFast;
  c.link = link;
  return c;
}

// The link rule: a client on a network against a server on shared memory is refused at the door
// (the application never sees its hello), in one line naming both links; a client on the same
// link is admitted, its link the hello's first field.
TEST_F(SessionTest, LinkMismatchRefusedFirst) {
  SessionServer shm(
      &l, {2s, 64}, with_link("shm"),
      [](void* a, const std::string&, const std::string& line) {
        static_cast<SessionTest*>(a)->log.push_back(line);
      },
      this);
  Session c = take(Session::client(take(Channel::connect(to(), {2s})), {{"io-depth", "16"}},
                                   with_link("network")));
  const auto end = Clock::now() + 3s;
  while (log.empty() && Clock::now() < end) {
    auto s = take(shm.try_admit());
    EXPECT_FALSE(s) << "a client on another link was admitted";
    std::this_thread::sleep_for(1ms);
  }
  ASSERT_EQ(log.size(), 1u);
  // The link comes before the other fields: io-depth differs too, the link is named.
  EXPECT_EQ(log[0],
            "the client runs link network, this server shm: start both on one link: --device emu "
            "on both (shared memory, one host), or emu@roce:ADDR or mlx5 on both (RoCE v2)");
  EXPECT_EQ(shm.refused(), 1u);
  ASSERT_EQ(next(c), SessionEvent::kDropped);
  EXPECT_EQ(c.error().code, Errc::kInvalidArgument);
  EXPECT_NE(c.error().message.find("the client runs link network, this server shm"),
            std::string::npos)
      << c.error().message;

  Session ok = take(
      Session::client(take(Channel::connect(to(), {2s})), {{"io-depth", "8"}}, with_link("shm")));
  std::optional<Session> s;
  for (const auto e2 = Clock::now() + 3s; !s && Clock::now() < e2;) s = take(shm.try_admit());
  ASSERT_TRUE(s);
  ASSERT_FALSE(s->hello_fields().empty());
  EXPECT_EQ(s->hello_fields()[0].key, "link");
  EXPECT_EQ(s->hello_fields()[0].value, "shm");
  EXPECT_TRUE(s->welcome({{"io-depth", "8"}}).ok());
  EXPECT_EQ(next(ok), SessionEvent::kWelcome);
}

// after_hello() (the C API: the application's own hello): the client's link goes before its
// infos; a server on another link refuses it before sending any info of its own.
TEST_F(SessionTest, LinkAfterHello) {
  for (const char* client_link : {"network", "shm"}) {
    SCOPED_TRACE(client_link);
    Channel cc = take(Channel::connect(to(), {2s}));
    Channel sc = take(l.accept({2s}));
    Session c = Session::after_hello(std::move(cc), with_link(client_link), true);
    Session s = Session::after_hello(std::move(sc), with_link("shm"), false);
    const mlx5::ConnectInfo ci = info(0x30), si = info(0x40);
    ASSERT_TRUE(s.send_info({&si, 1}, 1).ok());  // waits for the client's link
    ASSERT_TRUE(c.send_info({&ci, 1}, 1).ok());
    if (std::string(client_link) == "network") {
      ASSERT_EQ(next(s), SessionEvent::kDropped);
      EXPECT_EQ(s.error().message.rfind("the client runs link network, this server shm", 0), 0u)
          << s.error().message;
      ASSERT_EQ(next(c), SessionEvent::kDropped);  // refused, no info of the server's first
      EXPECT_EQ(c.error().code, Errc::kInvalidArgument);
      EXPECT_NE(c.error().message.find("refused by"), std::string::npos) << c.error().message;
    } else {
      ASSERT_EQ(next(s), SessionEvent::kInfos);
      EXPECT_EQ(s.peer_infos().at(0).qpn, 0x30u);
      ASSERT_EQ(next(c), SessionEvent::kInfos);
      EXPECT_EQ(c.peer_infos().at(0).qpn, 0x40u);
    }
  }
}

// An application message the server did not read before its exchange is not the client's link
// statement: the refusal says so instead of "link (not stated)".
TEST_F(SessionTest, LinkAfterHelloUnreadMessage) {
  Channel cc = take(Channel::connect(to(), {2s}));
  Channel sc = take(l.accept({2s}));
  const std::string app = "application bytes";
  ASSERT_TRUE(
      cc.send(FrameType::kHello, {reinterpret_cast<const uint8_t*>(app.data()), app.size()}, {2s})
          .ok());
  Session c = Session::after_hello(std::move(cc), with_link("shm"), true);
  Session s = Session::after_hello(std::move(sc), with_link("shm"), false);
  const mlx5::ConnectInfo ci = info(0x30), si = info(0x40);
  ASSERT_TRUE(s.send_info({&si, 1}, 1).ok());
  ASSERT_TRUE(c.send_info({&ci, 1}, 1).ok());
  ASSERT_EQ(next(s), SessionEvent::kDropped);
  EXPECT_NE(s.error().message.find("states no link (an application message not read"),
            std::string::npos)
      << s.error().message;
}

}  // namespace
