// lib/endpoint's Door over loopback (suite 'endpoint'): admission that never waits on one peer.
// Idle connections do not delay a client whose hello is there; each half-open connection has its
// own deadline; the cap holds; foreign bytes and a frame other than a hello are refused at once;
// a hello that arrives in pieces is assembled. Every wait is bounded by a budget of its own.

#include <gtest/gtest.h>

#include <chrono>
#include <rdmx/endpoint/door.hpp>
#include <string>
#include <thread>
#include <vector>
#include "fake_peer.hpp"
namespace {
using namespace rdmx;
using namespace rdmx::endpoint;
using namespace rdmx::endpoint::test;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
// Polls the door until it returns something (a hello or a refusal), or `budget` passes.
Result<std::optional<Door::Arrival>> next(Door& d, std::chrono::milliseconds budget) {
  const auto end = Clock::now() + budget;
  for (;;) {
    auto r = d.poll();
    if (!r.ok() || r.value() || Clock::now() > end) return r;
    std::this_thread::sleep_for(1ms);
  }
}
struct DoorTest : ::testing::Test {
  Listener l = take(Listener::listen(take(parse_listen_address("127.0.0.1:0"))));
};
TEST_F(DoorTest, FiftyIdleConnectionsDoNotDelayAHello) {
  Door d(&l, {10s, 64});
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 50; ++i) {
    idle.push_back(std::make_unique<Raw>(l.port()));
    ASSERT_TRUE(d.poll().ok());  // a server polls its door as they come
  }
  Raw real(l.port());
  real.put(frame(FrameType::kHello, "sizes 1 2 3"));
  const auto t0 = Clock::now();
  auto a = next(d, 2s);
  ASSERT_TRUE(a.ok()) << a.error().message;
  ASSERT_TRUE(a.value().has_value()) << "no hello within 2 s";
  EXPECT_EQ(a.value()->hello.text(), "sizes 1 2 3");
  EXPECT_LT(Clock::now() - t0, 1s);
  EXPECT_EQ(d.half_open(), 50u);  // the idle ones are still held, each with its deadline
}
TEST_F(DoorTest, EachConnectionHasItsOwnDeadline) {
  Door d(&l, {300ms, 64});
  Raw idle(l.port());
  auto first = next(d, 50ms);  // accepted, held
  ASSERT_TRUE(first.ok());
  EXPECT_FALSE(first.value().has_value());
  Raw late(l.port());
  const auto t0 = Clock::now();
  auto r = next(d, 2s);
  ASSERT_FALSE(r.ok()) << "an idle connection outlived its deadline";
  EXPECT_EQ(r.error().code, Errc::kTimeout);
  EXPECT_NE(r.error().message.find("sent no hello within 300 ms"), std::string::npos)
      << r.error().message;
  EXPECT_GE(Clock::now() - t0, 200ms);
  // The later connection still has time: a hello now is taken.
  late.put(frame(FrameType::kHello, "x"));
  auto a = next(d, 1s);
  ASSERT_TRUE(a.ok()) << a.error().message;
  EXPECT_TRUE(a.value().has_value());
}

TEST_F(DoorTest, TheCapHolds) {
  Door d(&l, {10s, 4});
  std::vector<std::unique_ptr<Raw>> idle;
  for (int i = 0; i < 4; ++i) idle.push_back(std::make_unique<Raw>(l.port()));
  EXPECT_FALSE(next(d, 100ms).value().has_value());
  EXPECT_EQ(d.half_open(), 4u);
  Raw fifth(l.port());
  auto r = next(d, 2s);
  ASSERT_FALSE(r.ok()) << "a fifth connection was held";
  EXPECT_EQ(r.error().code, Errc::kBusy);
  EXPECT_EQ(d.half_open(), 4u);
}
TEST_F(DoorTest, ForeignBytesAndOtherFramesAreRefusedAtOnce) {
  Door d(&l, {10s, 64});
  Raw http(l.port());
  http.put("GET / HTTP/1.0\r\n\r\n");
  auto r = next(d, 2s);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code, Errc::kProtocol);
  EXPECT_NE(r.error().message.find("does not speak the rdmx rendezvous"), std::string::npos);
  Raw info(l.port());
  info.put(frame(FrameType::kInfo, std::string(56, '\0')));
  r = next(d, 2s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("where its hello was due"), std::string::npos)
      << r.error().message;
  EXPECT_EQ(d.half_open(), 0u);
}

TEST_F(DoorTest, AHelloInPiecesIsAssembled) {
  Door d(&l, {10s, 64});
  Raw c(l.port());
  const std::string f = frame(FrameType::kHello, std::string(3000, 'h'));
  std::optional<Door::Arrival> got;
  for (size_t off = 0; off < f.size() && !got; off += 7) {
    c.put(f.substr(off, 7));
    std::this_thread::sleep_for(100us);
    auto r = d.poll();
    ASSERT_TRUE(r.ok()) << r.error().message;
    if (r.value()) {
      ASSERT_GE(off + 7, f.size()) << "a hello taken before its end";
      got = std::move(r.value());
    }
  }
  auto a = got ? Result<std::optional<Door::Arrival>>(std::move(got)) : next(d, 1s);
  ASSERT_TRUE(a.ok() && a.value().has_value());
  EXPECT_EQ(a.value()->hello.payload.size(), 3000u);
}

TEST_F(DoorTest, APeerThatClosesIsOneRefusal) {
  Door d(&l, {10s, 64});
  {
    Raw c(l.port());
    c.put(frame(FrameType::kHello, "abc").substr(0, 5));
  }
  auto r = next(d, 2s);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.error().message.find("closed the connection in the middle of a rendezvous message"),
            std::string::npos)
      << r.error().message;
  EXPECT_EQ(d.half_open(), 0u);
}

}  // namespace
