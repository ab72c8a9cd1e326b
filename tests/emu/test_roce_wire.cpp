// Two emulated devices in one process speaking RoCE v2 to each other over the loopback
// interface (127.N.x.y addresses, N this process's alone: tests/loopback_net.hpp; raw IPv4
// sockets, so the test skips without CAP_NET_RAW):
// every operation with its data verified, the same under injected loss, reordering and
// duplication (nothing lost or duplicated, retransmission counters nonzero), "retry exceeded"
// when the peer is gone, and a capture of what each device sent for tshark/Scapy
// (RDMX_ROCE_CAPTURE_DIR; see roce_capture_check.sh).
#include <fcntl.h>
#include <sched.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <random>
#include <string>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "../loopback_net.hpp"
#include "emu_util.hpp"
#include "roce.hpp"
#include "roce_link.hpp"
#include "wire.hpp"

namespace rdmx::emu::test {
namespace {

namespace roce = ::rdmx::emu::roce;
using ::rdmx::test::loopback_ip;
using ::rdmx::test::loopback_net;

constexpr uint32_t ip4(uint8_t a, uint8_t b, uint8_t c, uint8_t d) {
  return (uint32_t{a} << 24) | (uint32_t{b} << 16) | (uint32_t{c} << 8) | d;
}

// Two network namespaces joined by a veth pair (10.77.0.1/24 and 10.77.0.2/24, addresses inside
// the namespaces only), removed again by the destructor (deleting a namespace deletes its veth
// end). Names carry the pid so parallel runs do not collide.
class NetnsPair {
 public:
  NetnsPair() {
    const std::string id = std::to_string(getpid());
    a_ = "rdmx-roce-a-" + id;
    b_ = "rdmx-roce-b-" + id;
    const std::string va = "rdmxa" + id.substr(0, 9), vb = "rdmxb" + id.substr(0, 9);
    // Fixed MACs and static neighbour entries: no ARP exchange the test would have to wait for.
    ok_ = run("ip netns add " + a_) && run("ip netns add " + b_) &&
          run("ip link add " + va + " address 02:00:0a:4d:00:01 netns " + a_ +
              " type veth peer name " + vb + " address 02:00:0a:4d:00:02 netns " + b_) &&
          run("ip -n " + a_ + " addr add 10.77.0.1/24 dev " + va) &&
          run("ip -n " + b_ + " addr add 10.77.0.2/24 dev " + vb) &&
          run("ip -n " + a_ + " neigh add 10.77.0.2 lladdr 02:00:0a:4d:00:02 dev " + va) &&
          run("ip -n " + b_ + " neigh add 10.77.0.1 lladdr 02:00:0a:4d:00:01 dev " + vb) &&
          run("ip -n " + a_ + " link set " + va + " up") &&
          run("ip -n " + b_ + " link set " + vb + " up");
    // Both ends report carrier (state UP) before any packet goes: bounded wait.
    for (int i = 0; ok_ && i < 200; ++i) {
      if (run("ip -n " + a_ + " -o link show " + va + " | grep -q 'state UP'") &&
          run("ip -n " + b_ + " -o link show " + vb + " | grep -q 'state UP'"))
        return;
      usleep(10000);
    }
    ok_ = false;
  }
  ~NetnsPair() {
    run("ip netns del " + a_);
    run("ip netns del " + b_);
  }
  bool ok() const { return ok_; }
  // make_roce_wire with its sockets created inside namespace `ns` (this thread enters it and
  // comes back; the sockets stay in the namespace they were made in).
  static Result<std::shared_ptr<Wire>> wire_in(const std::string& ns, const RoceOptions& r) {
    const int self = ::open("/proc/self/ns/net", O_RDONLY | O_CLOEXEC);
    const int fd = ::open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
    Result<std::shared_ptr<Wire>> w = make_error(Errc::kDeviceError, "cannot enter " + ns);
    if (self >= 0 && fd >= 0 && setns(fd, CLONE_NEWNET) == 0) {
      w = make_roce_wire(r);
      if (setns(self, CLONE_NEWNET) != 0) std::abort();  // never continue in the wrong namespace
    }
    if (fd >= 0) ::close(fd);
    if (self >= 0) ::close(self);
    return w;
  }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }

 private:
  static bool run(const std::string& cmd) {
    return std::system((cmd + " >/dev/null 2>&1").c_str()) == 0;
  }
  std::string a_, b_;
  bool ok_ = false;
};

class RoceWire : public EmuTest {
 protected:
  void long_messages(bool lossy);
  // Opens one device on each given wire, QPs connected.
  void open_on(std::shared_ptr<Wire> wa, std::shared_ptr<Wire> wb, bool connect = true,
               Options o = {}) {
    o.mode = Mode::kThreaded;
    o.name = "roce-a";
    auto a = EmuDevice::open(std::move(wa), 0, o);
    o.name = "roce-b";
    auto b = EmuDevice::open(std::move(wb), 0, o);
    ASSERT_TRUE(a.ok() && b.ok());
    pair_.a = std::move(a.value());
    pair_.b = std::move(b.value());
    a_.dev = pair_.a.get();
    b_.dev = pair_.b.get();
    for (Side* s : {&a_, &b_}) {
      auto d = s->dev->create_qp(small_cfg());
      ASSERT_TRUE(d.ok());
      s->desc = d.value();
      s->qp.init(s->desc, 1);
    }
    if (!connect) return;
    const Status st = mlx5::connect_qps(*a_.dev, a_.desc.qpn, *b_.dev, b_.desc.qpn);
    ASSERT_TRUE(st.ok()) << st.error().message;
  }

  // Opens devices on 127.N.<net>.1 and 127.N.<net>.2 (N: loopback_net()); false (test skipped)
  // without raw sockets. Each test its own <net>.
  // Injected loss: a lost tail packet waits one ACK timeout, so lossy tests ask for 33.5 ms
  // (exponent 13) instead of rdma_cm's 1.07 s; a slow (sanitized, loaded) peer then only
  // causes retransmissions, 7 in a row before the connection would fail.
  static Options lossy_timers() {
    Options o;
    o.timers.timeout = 13;
    o.timers.retry_cnt = 7;
    return o;
  }

  uint8_t write_across_stall(const Options& o, uint8_t net);

  // Two devices whose links meet on a pair of packet rings (10.0.0.1 and 10.0.0.2, the default
  // window and MTU), QPs connected, with `o`'s timers.
  void open_ring_pair(Options o = {}) {
    RoceOptions ra, rb;
    ra.local_ipv4 = ip4(10, 0, 0, 1);
    rb.local_ipv4 = ip4(10, 0, 0, 2);
    auto w = Wire::make_roce_ring_pair(ra, rb);
    ASSERT_TRUE(w.ok()) << w.error().message;
    open_on(w.value().first, w.value().second, true, o);
  }

  bool open_roce(uint8_t net, RoceOptions ra = {}, RoceOptions rb = {}, bool connect = true,
                 Options o = {}) {
    ra.local_ipv4 = loopback_ip(net, 1);
    rb.local_ipv4 = loopback_ip(net, 2);
    auto wa = make_roce_wire(ra);
    if (!wa.ok() && wa.error().message.find("CAP_NET_RAW") != std::string::npos) return false;
    EXPECT_TRUE(wa.ok()) << wa.error().message;
    auto wb = make_roce_wire(rb);
    EXPECT_TRUE(wb.ok()) << wb.error().message;
    if (!wa.ok() || !wb.ok()) return false;
    open_on(wa.value(), wb.value(), connect, o);
    return !HasFatalFailure();
  }

  // WRITE, READ back, SEND, SEND with immediate, WRITE with immediate, SEND with invalidate;
  // `rounds` times, every byte checked.
  void all_ops(int rounds) {
    Buf src, dst, back, rbuf, arena;
    src.alloc(*a_.dev, 3 * 4096, 1);
    dst.alloc(*b_.dev, 3 * 4096, 2);
    back.alloc(*a_.dev, 3 * 4096, 3);
    rbuf.alloc(*b_.dev, 8192, 4);
    arena.alloc(*b_.dev, 4096, 5);
    auto w = b_.dev->create_window_mkey(4, true);
    ASSERT_TRUE(w.ok());
    for (int r = 0; r < rounds; ++r) {
      auto data = random_bytes(src.len, 100 + r);
      std::memcpy(src.p, data.data(), src.len);
      const uint32_t len = 1000 + 97 * (r % 97);  // 1..10 packets of 1024
      rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey,
           {{src.addr(), len, src.mr.lkey}});
      auto cw = wait(a_, 1);
      ASSERT_TRUE(cw[0].ok()) << "round " << r << " status " << int(cw[0].status) << " timeouts "
                              << a_.dev->stats().roce.timeouts;
      ASSERT_EQ(0, std::memcmp(dst.p, src.p, len)) << "round " << r;
      rdma(a_, MLX5_OPCODE_RDMA_READ, 2, dst.addr(7), dst.mr.rkey,
           {{back.addr(), len - 7, back.mr.lkey}});
      ASSERT_TRUE(wait(a_, 1)[0].ok());
      ASSERT_EQ(0, std::memcmp(back.p, src.p + 7, len - 7)) << "round " << r;
      recv(b_, 10, {{rbuf.addr(), 8192, rbuf.mr.lkey}});
      send(a_, MLX5_OPCODE_SEND, 3, {{src.addr(100), len, src.mr.lkey}});
      ASSERT_TRUE(wait(a_, 1)[0].ok());
      auto cb = wait(b_, 1);
      ASSERT_TRUE(cb[0].ok());
      EXPECT_EQ(cb[0].byte_len, len);
      ASSERT_EQ(0, std::memcmp(rbuf.p, src.p + 100, len)) << "round " << r;
      recv(b_, 11, {{rbuf.addr(), 8192, rbuf.mr.lkey}});
      send(a_, MLX5_OPCODE_SEND_IMM, 4, {{src.addr(5), 33, src.mr.lkey}}, 0xABC000 + r);
      ASSERT_TRUE(wait(a_, 1)[0].ok());
      cb = wait(b_, 1);
      ASSERT_TRUE(cb[0].ok());
      EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_SEND_IMM);
      EXPECT_EQ(cb[0].byte_len, 33u);
      ASSERT_EQ(0, std::memcmp(rbuf.p, src.p + 5, 33));
      recv(b_, 12, {{rbuf.addr(), 8192, rbuf.mr.lkey}});
      rdma(a_, MLX5_OPCODE_RDMA_WRITE_IMM, 5, dst.addr(), dst.mr.rkey,
           {{src.addr(9), 2100, src.mr.lkey}}, 0x5150 + r);
      ASSERT_TRUE(wait(a_, 1)[0].ok());
      cb = wait(b_, 1);
      ASSERT_TRUE(cb[0].ok());
      EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_WR_IMM);
      ASSERT_EQ(0, std::memcmp(dst.p, src.p + 9, 2100));
      // SEND with invalidate frees the window at the receiver.
      const uint32_t win = w.value() | uint32_t((r + 1) & 0xFF);
      umr_map(b_, 13, win, arena.mr.lkey, {arena.addr(0)}, 4096, 4096, kAccRW);
      ASSERT_TRUE(wait(b_, 1)[0].ok());
      recv(b_, 14, {{rbuf.addr(), 8192, rbuf.mr.lkey}});
      send(a_, MLX5_OPCODE_SEND_INVAL, 6, {{src.addr(), 1500, src.mr.lkey}}, win);
      ASSERT_TRUE(wait(a_, 1)[0].ok());
      cb = wait(b_, 1);
      ASSERT_TRUE(cb[0].ok());
      EXPECT_EQ(cb[0].cqe_opcode, MLX5_CQE_RESP_SEND_INV);
      EXPECT_EQ(cb[0].imm, win);
      ASSERT_EQ(0, std::memcmp(rbuf.p, src.p, 1500));
      EXPECT_TRUE(b_.dev->inspect_mkey(win).free);
    }
  }
};

TEST_F(RoceWire, EveryOperationDataVerified) {
  if (!open_roce(1)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  all_ops(3);
  const EmuStats sa = a_.dev->stats(), sb = b_.dev->stats();
  EXPECT_GT(sa.roce.tx_packets, 0u);
  EXPECT_GT(sb.roce.rx_packets, 0u);
  EXPECT_GT(sb.roce.acks_sent, 0u);
  for (uint64_t d : sa.roce.rx_dropped) EXPECT_EQ(d, 0u);
  for (uint64_t d : sb.roce.rx_dropped) EXPECT_EQ(d, 0u);
}

TEST_F(RoceWire, LossReorderDuplicationNothingLostOrDoubled) {
  RoceOptions r;
  r.loss = 0.01;
  r.reorder = 0.01;
  r.duplicate = 0.01;
  RoceOptions ra = r, rb = r;
  ra.seed = 11;
  rb.seed = 22;
  if (!open_roce(2, ra, rb, true, lossy_timers()))
    GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  all_ops(40);
  // Exactly the completions asked for: nothing duplicated on either side.
  expect_quiet(a_);
  expect_quiet(b_);
  const EmuStats sa = a_.dev->stats(), sb = b_.dev->stats();
  EXPECT_GT(sa.roce.injected_loss + sb.roce.injected_loss, 0u);
  EXPECT_GT(sa.roce.injected_dup + sb.roce.injected_dup, 0u);
  EXPECT_GT(sa.roce.injected_reorder + sb.roce.injected_reorder, 0u);
  EXPECT_GT(sa.roce.retransmits, 0u);
  EXPECT_GT(sb.roce.duplicates, 0u);
  std::printf("a sent %" PRIu64 " (lost %" PRIu64 ", reordered %" PRIu64 ", doubled %" PRIu64
              "), retransmits %" PRIu64 ", timeouts %" PRIu64 ", seq NAKs %" PRIu64
              "; b sent %" PRIu64 ", duplicates received %" PRIu64 "\n",
              sa.roce.tx_packets, sa.roce.injected_loss, sa.roce.injected_reorder,
              sa.roce.injected_dup, sa.roce.retransmits, sa.roce.timeouts, sa.roce.seq_naks_rcvd,
              sb.roce.tx_packets, sb.roce.duplicates);
}

// Messages of more packets than the requester's window (64): the requester asks for an ACK every
// half window inside a message and the responder acknowledges what arrived, so a 200-packet WRITE
// and a 150-packet SEND complete, every byte checked. Before the mid-message AckReq such a
// message could never be acknowledged (retry exceeded).
void RoceWire::long_messages(bool lossy) {
  constexpr uint32_t kLen = 200 * 1024, kSend = 150 * 1024;
  Buf src, dst, rbuf;
  src.alloc(*a_.dev, kLen, 31);
  dst.alloc(*b_.dev, kLen, 32);
  rbuf.alloc(*b_.dev, kLen, 33);
  for (int round = 0; round < 3; ++round) {
    auto data = random_bytes(kLen, 40 + round);
    std::memcpy(src.p, data.data(), kLen);
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), kLen, src.mr.lkey}});
    auto cw = wait(a_, 1);
    ASSERT_TRUE(cw[0].ok()) << "status " << int(cw[0].status) << (lossy ? " (lossy)" : "");
    ASSERT_EQ(0, std::memcmp(dst.p, src.p, kLen));
    recv(b_, 2, {{rbuf.addr(), kLen, rbuf.mr.lkey}});
    send(a_, MLX5_OPCODE_SEND, 3, {{src.addr(1000), kSend, src.mr.lkey}});
    ASSERT_TRUE(wait(a_, 1)[0].ok());
    auto cb = wait(b_, 1);
    ASSERT_TRUE(cb[0].ok());
    EXPECT_EQ(cb[0].byte_len, kSend);
    ASSERT_EQ(0, std::memcmp(rbuf.p, src.p + 1000, kSend));
  }
  expect_quiet(a_);
  expect_quiet(b_);
  const EmuStats sa = a_.dev->stats();
  EXPECT_EQ(sa.roce.over_window, 6u);
  if (lossy) {
    EXPECT_GT(sa.roce.retransmits, 0u);
  }
}

TEST_F(RoceWire, MessagesLongerThanTheWindow) {
  if (!open_roce(10)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  long_messages(false);
}

TEST_F(RoceWire, MessagesLongerThanTheWindowWithLoss) {
  RoceOptions r;
  r.loss = 0.01;
  r.reorder = 0.01;
  r.duplicate = 0.01;
  RoceOptions ra = r, rb = r;
  ra.seed = 5;
  rb.seed = 6;
  if (!open_roce(11, ra, rb, true, lossy_timers()))
    GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  long_messages(true);
}

// The same across a veth pair between two network namespaces, with 1 % loss, reordering and
// duplication: a real interface (MTU 1500, ARP) instead of loopback.
TEST_F(RoceWire, NetnsVethPairWithLoss) {
  if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
  NetnsPair ns;
  if (!ns.ok()) GTEST_SKIP() << "cannot create network namespaces / veth here";
  RoceOptions ra, rb;
  ra.local_ipv4 = ip4(10, 77, 0, 1);
  rb.local_ipv4 = ip4(10, 77, 0, 2);
  for (RoceOptions* r : {&ra, &rb}) {
    r->loss = r->reorder = r->duplicate = 0.01;
  }
  ra.seed = 5;
  rb.seed = 6;
  auto wa = NetnsPair::wire_in(ns.a(), ra);
  auto wb = NetnsPair::wire_in(ns.b(), rb);
  if (!wa.ok() && wa.error().message.find("CAP_NET_RAW") != std::string::npos)
    GTEST_SKIP() << wa.error().message;
  ASSERT_TRUE(wa.ok()) << wa.error().message;
  ASSERT_TRUE(wb.ok()) << wb.error().message;
  open_on(wa.value(), wb.value(), true, lossy_timers());
  all_ops(20);
  expect_quiet(a_);
  expect_quiet(b_);
  const EmuStats sa = a_.dev->stats(), sb = b_.dev->stats();
  EXPECT_GT(sa.roce.injected_loss + sb.roce.injected_loss, 0u);
  EXPECT_GT(sa.roce.retransmits, 0u);
  for (uint64_t d : sb.roce.rx_dropped) EXPECT_EQ(d, 0u);
  pair_.a.reset();  // sockets closed before the namespaces go
  pair_.b.reset();
  a_.dev = b_.dev = nullptr;
}

TEST_F(RoceWire, PeerGoneIsRetryExceeded) {
  Options o;
  o.timers.timeout = 9;  // 2.1 ms
  o.timers.retry_cnt = 3;
  if (!open_roce(3, {}, {}, true, o)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  Buf src;
  src.alloc(*a_.dev, 4096, 1);
  pair_.b.reset();  // the peer's device (and its socket) is gone
  b_.dev = nullptr;
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, 0x1000, 0x1234, {{src.addr(), 3000, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  EXPECT_EQ(a_.dev->stats().roce.timeouts, 4u);  // the first send and retry_cnt retries
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
  pair_.a.reset();
  a_.dev = nullptr;
}

// The same RC links over lossless packet rings (RingCarrier) instead of sockets: every operation
// with its bytes checked, nothing dropped, resent or timed out; needs no CAP_NET_RAW.
TEST_F(RoceWire, OverPacketRingsEveryOperation) {
  open_ring_pair();
  ASSERT_FALSE(HasFatalFailure());
  all_ops(3);
  const EmuStats sa = a_.dev->stats(), sb = b_.dev->stats();
  EXPECT_GT(sa.roce.tx_packets, 0u);
  EXPECT_EQ(sb.roce.rx_packets, sa.roce.tx_packets);
  EXPECT_EQ(sa.roce.rx_packets, sb.roce.tx_packets);
  EXPECT_GT(sb.roce.acks_sent, 0u);
  for (const EmuStats* s : {&sa, &sb}) {
    EXPECT_EQ(s->roce.retransmits, 0u);
    EXPECT_EQ(s->roce.timeouts, 0u);
    for (uint64_t d : s->roce.rx_dropped) EXPECT_EQ(d, 0u);
  }
}

// Over the rings a peer that is gone is found by the requester link's timer, as on a network:
// timeout x (retry_cnt + 1), then TRANSPORT_RETRY_EXC_ERR. Impairments belong to the UDP carrier.
TEST_F(RoceWire, OverPacketRingsPeerGoneIsRetryExceeded) {
  RoceOptions ra, rb;
  ra.local_ipv4 = ip4(10, 0, 0, 1);
  rb.local_ipv4 = ip4(10, 0, 0, 2);
  rb.loss = 0.01;
  EXPECT_FALSE(Wire::make_roce_ring_pair(ra, rb).ok());
  Options o;
  o.timers.timeout = 9;  // 2.1 ms
  o.timers.retry_cnt = 3;
  open_ring_pair(o);
  ASSERT_FALSE(HasFatalFailure());
  Buf src;
  src.alloc(*a_.dev, 4096, 1);
  pair_.b.reset();
  b_.dev = nullptr;
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, 0x1000, 0x1234, {{src.addr(), 3000, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  EXPECT_EQ(a_.dev->stats().roce.timeouts, 4u);  // the first send and retry_cnt retries
  pair_.a.reset();
  a_.dev = nullptr;
}

// After a connection carried requests, the PSN a QP states for a reconnect without RESET is the
// one after the last it sent: 3000 bytes at a 1024-byte MTU take 3 PSNs.
TEST_F(RoceWire, OverPacketRingsReconnectStatesTheNextPsn) {
  RoceOptions ra, rb;
  ra.local_ipv4 = ip4(10, 0, 0, 1);
  rb.local_ipv4 = ip4(10, 0, 0, 2);
  auto w = Wire::make_roce_ring_pair(ra, rb);
  ASSERT_TRUE(w.ok()) << w.error().message;
  open_on(w.value().first, w.value().second);
  ASSERT_FALSE(HasFatalFailure());
  const uint32_t psn0 = a_.dev->local_info(a_.desc.qpn).psn;
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 1);
  dst.alloc(*b_.dev, 4096, 2);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), 3000, src.mr.lkey}});
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  EXPECT_EQ(a_.dev->local_info(a_.desc.qpn).psn, (psn0 + 3) & roce::kPsnMask);
  ASSERT_TRUE(a_.dev->modify_qp(a_.desc.qpn, mlx5::QpState::kReset).ok());
  const uint32_t drawn = a_.dev->local_info(a_.desc.qpn).psn;
  EXPECT_NE(drawn, (psn0 + 3) & roce::kPsnMask) << "a RESET draws anew (2^-24 to collide)";
}

// A packet ring whose receiver does not run fills up, and the link puts nothing on it that it
// would refuse: the retransmissions of the 64-packet window stop at the ring's headroom (16
// slots kept for ACKs) and wait, so nothing is counted ring_full; the timeouts still end the
// connection (retry_cnt 7: eight timeouts, then TRANSPORT_RETRY_EXC). Before, the go-backs that
// did not fit were put on the full ring and refused (ring_full): on a lossless link, a loss.
TEST_F(RoceWire, OverPacketRingsAFullRingRefusesNothing) {
  Options o;
  o.timers.timeout = 9;    // 2.1 ms
  o.timers.retry_cnt = 7;  // 8 sends of the window: twice the ring
  open_ring_pair(o);
  ASSERT_FALSE(HasFatalFailure());
  const RoceOptions ra;
  static_assert(8 * RoceOptions{}.window == 2 * detail::kPktSlots);
  const uint32_t len = ra.window * ra.mtu;  // one full window of packets
  Buf src, dst;
  src.alloc(*a_.dev, len, 1);
  dst.alloc(*b_.dev, len, 2);
  pair_.b->stop();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), len, src.mr.lkey}});
  EXPECT_EQ(wait(a_, 1)[0].status, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  const EmuStats sa = a_.dev->stats();
  EXPECT_EQ(sa.roce.ring_full, 0u);
  EXPECT_EQ(sa.roce.tx_packets, detail::kPktSlots - 16u + 1u);  // less the headroom, plus one
  EXPECT_EQ(sa.roce.timeouts, 8u);  // the first send and retry_cnt retries
  pair_.a->stop();
}

// One receive burst of ACKs can complete more messages than the engine's response ring (64
// slots) has room for: four QPs of 20 one-byte WRITEs each, the responder held until all 80
// went out and the requester held until every ACK waits in its packet ring, so that one burst
// brings them all. What did not fit is owed and handed on by the next pumps: every WRITE
// completes. Before, the link dropped those completions and the ACKed packets with them; the
// WRITEs never completed (no timer, nothing to resend).
TEST_F(RoceWire, OverPacketRingsAckBurstBeyondTheEnginesRingCompletesAll) {
  open_ring_pair();
  ASSERT_FALSE(HasFatalFailure());
  constexpr int kQps = 4, kWrites = 20;
  std::vector<Side> as(kQps), bs(kQps);
  as[0].dev = a_.dev;
  as[0].desc = a_.desc;
  as[0].qp.init(a_.desc, 1);
  for (int i = 1; i < kQps; ++i) {
    for (auto [s, dev] : {std::pair{&as[i], a_.dev}, std::pair{&bs[i], b_.dev}}) {
      auto d = dev->create_qp(small_cfg());
      ASSERT_TRUE(d.ok()) << d.error().message;
      s->dev = dev;
      s->desc = d.value();
      s->qp.init(s->desc, 1);
    }
    ASSERT_TRUE(mlx5::connect_qps(*a_.dev, as[i].desc.qpn, *b_.dev, bs[i].desc.qpn).ok());
  }
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 1);
  dst.alloc(*b_.dev, 4096, 2);
  pair_.b->stop();
  for (int i = 0; i < kQps; ++i)
    for (int k = 0; k < kWrites; ++k)
      rdma(as[i], MLX5_OPCODE_RDMA_WRITE, k, dst.addr(i * kWrites + k), dst.mr.rkey,
           {{src.addr(i * kWrites + k), 1, src.mr.lkey}});
  const auto until = [](auto done) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!done() && std::chrono::steady_clock::now() < end)
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return done();
  };
  ASSERT_TRUE(until([&] { return a_.dev->stats().roce.tx_packets == kQps * kWrites; }));
  pair_.a->stop();
  ASSERT_TRUE(pair_.b->start().ok());
  ASSERT_TRUE(until([&] { return b_.dev->stats().roce.rx_packets == kQps * kWrites; }));
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // b's last ACKs leave
  ASSERT_LE(b_.dev->stats().roce.acks_sent, 16u) << "the ACKs need more than one burst";
  ASSERT_TRUE(pair_.a->start().ok());
  for (int i = 0; i < kQps; ++i)
    for (const Completion& c : wait(as[i], kWrites)) EXPECT_TRUE(c.ok());
  EXPECT_EQ(std::memcmp(dst.p, src.p, kQps * kWrites), 0);
  pair_.a->stop();
  pair_.b->stop();
}

// The engine hands its link a message's packets in order, FIRST first: a MIDDLE or LAST with no
// message open, or of another message than the open one, is an engine bug. The link counts it
// (roce.orphan_pkts), never sends it, and goes on with the next one. The link runs by hand on an
// in-process wire with no device.
TEST(RoceLinkUnit, APacketOfNoOpenMessageIsCountedNotSent) {
  auto w = Wire::make_local();
  detail::RoceLink* l = w->link(0);
  ASSERT_NE(l, nullptr);
  l->connect(5, 6, Wire::ring_ip(1), kWireMtu, 0, 0, mlx5::RcTimers{}, 0);
  Rings& r = w->rings(0);
  auto push = [&](uint8_t flags, uint32_t msn, uint64_t off) {
    WireSlot* s = r.tx_slot(0, WireClass::kReq);
    ASSERT_NE(s, nullptr);
    s->h = PktHdr{};
    s->h.op = PktOp::kWrite;
    s->h.flags = flags;
    s->h.src_qpn = 5;
    s->h.dst_qpn = 6;
    s->h.msn = msn;
    s->h.len = kWireMtu;
    s->h.offset = off;
    s->h.msg_len = 2 * kWireMtu;
    r.tx_commit(0, WireClass::kReq);
  };
  push(kPktLast, 0, kWireMtu);  // a LAST with nothing open
  push(kPktFirst, 1, 0);        // message 1 opens...
  push(kPktLast, 2, kWireMtu);  // ...a LAST of message 2
  push(kPktLast, 1, kWireMtu);  // message 1 ends
  bool pending = false;
  l->pump(r, 1, &pending);
  EXPECT_EQ(r.rx_slot(1, WireClass::kReq), nullptr);  // every packet taken
  const EmuStats::Roce st = l->stats();
  EXPECT_EQ(st.orphan_pkts, 2u);
  EXPECT_EQ(st.tx_packets, 2u);  // message 1's two packets only
}

// The QP's RC timers drive the link's retransmission: a responder whose device does not run for
// 300 ms (its thread stopped; the packets wait in its socket) is survived with rdma_cm's
// defaults and kills the connection with a 4.2 ms timeout and 3 retries.
uint8_t RoceWire::write_across_stall(const Options& o, uint8_t net) {
  if (!open_roce(net, {}, {}, true, o)) return 0xff;
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 1);
  dst.alloc(*b_.dev, 4096, 2);
  pair_.b->stop();
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), 64, src.mr.lkey}});
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  EXPECT_TRUE(pair_.b->start().ok());
  const uint8_t st = wait(a_, 1, 20000)[0].status;
  if (st == 0) {
    EXPECT_EQ(0, std::memcmp(dst.p, src.p, 64));
  }
  // A WRITE the requester gave up on may still wait in b's socket and land in dst after this
  // returns, as a late packet does on a fabric: both threads stop before the buffers go.
  pair_.a->stop();
  pair_.b->stop();
  return st;
}

TEST_F(RoceWire, DefaultTimersSurviveAStalledResponder) {
  const uint8_t st = write_across_stall(Options{}, 15);
  if (st == 0xff) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  EXPECT_EQ(st, 0);
  EXPECT_EQ(a_.dev->stats().roce.timeouts, 0u);
}

TEST_F(RoceWire, ShortTimeoutFailsAcrossTheSameStall) {
  Options o;
  o.timers.timeout = 10;
  o.timers.retry_cnt = 3;
  const uint8_t st = write_across_stall(o, 16);
  if (st == 0xff) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  EXPECT_EQ(st, MLX5_CQE_SYNDROME_TRANSPORT_RETRY_EXC_ERR);
  EXPECT_EQ(a_.dev->stats().roce.timeouts, 4u);  // the first send and 3 retries
}

// No receive posted: every SEND is answered with an RNR NAK; after rnr_retry retries the WQE
// fails with RNR_RETRY_EXC_ERR.
TEST_F(RoceWire, RnrNakRetriesThenFails) {
  Options o;
  o.timers.rnr_retry = 3;
  if (!open_roce(8, {}, {}, true, o)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  Buf src;
  src.alloc(*a_.dev, 4096, 1);
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), 3000, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_RNR_RETRY_EXC_ERR);
  EXPECT_EQ(b_.dev->stats().rnr_naks, 4u);  // the first try and 3 retries
  // The link waited out and resent them; the engine handed the message over once (3000 bytes:
  // 3 packets of 1024), and the device's retries are the link's retransmission rounds.
  EXPECT_EQ(a_.dev->stats().roce.rnr_retries, 3u);
  EXPECT_EQ(a_.dev->stats().retries, 3u);
  EXPECT_EQ(a_.dev->stats().tx_packets, 3u);
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kError);
}

// An RNR NAK on a SEND with a WRITE posted behind it: the link sends nothing new while it waits
// out the RNR timer, then both again with their PSNs; each completes once, in order, and the
// engine (whose wire's link owns loss) resends nothing itself.
TEST_F(RoceWire, RnrNakHoldsLaterMessagesAndTheLinkResends) {
  Options o;
  o.rnr_timer_us = 100000;
  if (!open_roce(14, {}, {}, true, o)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  Buf src, rbuf, dst;
  src.alloc(*a_.dev, 8192, 1);
  rbuf.alloc(*b_.dev, 4096, 2);
  dst.alloc(*b_.dev, 8192, 3);
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), 3000, src.mr.lkey}});
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 2, dst.addr(), dst.mr.rkey,
       {{src.addr(4096), 4000, src.mr.lkey}});
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (b_.dev->stats().rnr_naks == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  ASSERT_GE(b_.dev->stats().rnr_naks, 1u);
  recv(b_, 7, {{rbuf.addr(), 4096, rbuf.mr.lkey}});
  auto ca = wait(a_, 2);
  ASSERT_TRUE(ca[0].ok());
  ASSERT_TRUE(ca[1].ok());
  EXPECT_EQ(ca[0].cookie, 1u);  // in order: the SEND, then the WRITE behind it
  EXPECT_EQ(ca[1].cookie, 2u);
  auto cb = wait(b_, 1);
  ASSERT_TRUE(cb[0].ok());
  EXPECT_EQ(0, std::memcmp(rbuf.p, src.p, 3000));
  EXPECT_EQ(0, std::memcmp(dst.p, src.p + 4096, 4000));
  EXPECT_GE(a_.dev->stats().roce.rnr_retries, 1u);
  EXPECT_EQ(a_.dev->stats().retries, a_.dev->stats().roce.rnr_retries);  // no timeout
}

// An RNR NAK, then a receive is posted: the SEND is sent again with the same PSNs and lands.
TEST_F(RoceWire, RnrNakThenReceivePostedDelivers) {
  Options o;
  o.rnr_timer_us = 100000;  // long enough to post the receive before the retry, usually
  if (!open_roce(9, {}, {}, true, o)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  Buf src, rbuf;
  src.alloc(*a_.dev, 4096, 1);
  rbuf.alloc(*b_.dev, 4096, 2);
  send(a_, MLX5_OPCODE_SEND, 1, {{src.addr(), 3000, src.mr.lkey}});
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (b_.dev->stats().rnr_naks == 0 && std::chrono::steady_clock::now() < end)
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  ASSERT_GE(b_.dev->stats().rnr_naks, 1u);
  recv(b_, 7, {{rbuf.addr(), 4096, rbuf.mr.lkey}});
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  auto cb = wait(b_, 1);
  ASSERT_TRUE(cb[0].ok());
  EXPECT_EQ(cb[0].byte_len, 3000u);
  EXPECT_EQ(0, std::memcmp(rbuf.p, src.p, 3000));
  EXPECT_EQ(b_.dev->stats().roce.rx_dropped[static_cast<int>(roce::Drop::kPsnWindow)], 0u);
}

TEST_F(RoceWire, RemoteAccessErrorIsNakedNotExecuted) {
  if (!open_roce(4)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  Buf src, dst;
  src.alloc(*a_.dev, 4096, 1);
  dst.alloc(*b_.dev, 4096, 2);
  const auto before = std::vector<uint8_t>(dst.p, dst.p + dst.len);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(100), dst.mr.rkey,
       {{src.addr(), 4000, src.mr.lkey}});
  auto c = wait(a_, 1);
  EXPECT_EQ(c[0].status, MLX5_CQE_SYNDROME_REMOTE_ACCESS_ERR);
  EXPECT_EQ(0, std::memcmp(dst.p, before.data(), dst.len));
}

// Packets a NIC must refuse, sent from a raw socket of the test to device B: each is dropped and
// counted by reason, and none touches memory.
TEST_F(RoceWire, BadPacketsAreDroppedAndCounted) {
  if (!open_roce(7)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  Buf dst;
  dst.alloc(*b_.dev, 4096, 2);
  const std::vector<uint8_t> before(dst.p, dst.p + dst.len);
  const int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(loopback_ip(7, 2));
  static const uint8_t data[64] = {0xEE};
  roce::Packet p;  // a WRITE_ONLY from A's address and QP that would land in dst
  p.src_ip = loopback_ip(7, 1);
  p.dst_ip = loopback_ip(7, 2);
  p.ip_id = 0x4242;
  p.opcode = roce::kWriteOnly;
  p.ack_req = true;
  p.dqpn = b_.desc.qpn;
  // A has sent nothing yet: B expects A's initial send PSN, which A's connect info stated.
  p.psn = a_.dev->local_info(a_.desc.qpn).psn;
  p.reth_va = dst.addr();
  p.reth_rkey = dst.mr.rkey;
  p.reth_len = sizeof data;
  p.payload = data;
  p.payload_len = sizeof data;
  auto send_pkt = [&](const roce::Packet& q, auto&& mangle) {
    std::vector<uint8_t> v(roce::wire_len(q));
    ASSERT_EQ(roce::encode(q, v.data(), v.size()), v.size());
    mangle(v);
    ASSERT_EQ(sendto(fd, v.data(), v.size(), 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(v.size()));
  };
  auto none = [](std::vector<uint8_t>&) {};
  send_pkt(p, [](std::vector<uint8_t>& v) { v[v.size() - 1] ^= 1; });  // bad ICRC
  roce::Packet q = p;
  q.psn = roce::psn_add(p.psn, 1 << 21);  // ahead: one NAK PSN sequence error, not executed
  send_pkt(q, none);
  q = p;
  q.dqpn = 0xABCDE;  // no such QP
  send_pkt(q, none);
  q = p;
  q.src_ip = loopback_ip(7, 9);  // not the QP's peer
  send_pkt(q, none);
  q = p;
  q.opcode = roce::kWriteOnly;
  send_pkt(q, [](std::vector<uint8_t>& v) {  // another UDP port: not RoCE
    v[23] = 0x35;
  });
  close(fd);
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  EmuStats sb;
  auto dropped = [&](roce::Drop d) { return sb.roce.rx_dropped[static_cast<int>(d)]; };
  do {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    sb = b_.dev->stats();
  } while ((dropped(roce::Drop::kBadIcrc) < 1 || sb.roce.out_of_seq < 1 ||
            dropped(roce::Drop::kNoQp) < 1 || dropped(roce::Drop::kNotPeer) < 1 ||
            dropped(roce::Drop::kNotRoce) < 1) &&
           std::chrono::steady_clock::now() < end);
  EXPECT_EQ(dropped(roce::Drop::kBadIcrc), 1u);
  EXPECT_EQ(sb.roce.out_of_seq, 1u);
  EXPECT_EQ(sb.roce.seq_naks_sent, 1u);
  EXPECT_EQ(dropped(roce::Drop::kNoQp), 1u);
  EXPECT_EQ(dropped(roce::Drop::kNotPeer), 1u);
  EXPECT_EQ(dropped(roce::Drop::kNotRoce), 1u);
  EXPECT_EQ(sb.roce.rx_packets, 1u);  // only the PSN ahead got past the parser and QP checks
  EXPECT_EQ(0, std::memcmp(dst.p, before.data(), dst.len));
  // The real peer still gets through afterwards.
  Buf src;
  src.alloc(*a_.dev, 4096, 3);
  rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst.addr(), dst.mr.rkey, {{src.addr(), 4096, src.mr.lkey}});
  ASSERT_TRUE(wait(a_, 1)[0].ok());
  EXPECT_EQ(0, std::memcmp(dst.p, src.p, 4096));
}

// The test itself is the requester: one device B on 127.N.13.2, and raw sockets of the test on
// 127.N.13.1 that send hand-made request packets and read B's answers, to check the responder
// rules as Linux rxe has them (rxe_resp.c), PSN by PSN, across the 24-bit wrap.
class Peer {
 public:
  explicit Peer(uint32_t ip) : ip_(ip) {
    tx_ = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_RAW);
    rx_ = socket(AF_INET, SOCK_RAW | SOCK_CLOEXEC, IPPROTO_UDP);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(ip);
    if (rx_ >= 0 && bind(rx_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0)
      ::close(rx_), rx_ = -1;
  }
  ~Peer() {
    for (int fd : {tx_, rx_})
      if (fd >= 0) ::close(fd);
  }
  bool ok() const { return tx_ >= 0 && rx_ >= 0; }
  void send(roce::Packet p, uint32_t to_ip) {
    p.src_ip = ip_;
    p.dst_ip = to_ip;
    p.ip_id = ++id_;
    uint8_t v[4096 + roce::kMaxOverhead];
    const size_t n = roce::encode(p, v, sizeof v);
    sockaddr_in to{};
    to.sin_family = AF_INET;
    to.sin_addr.s_addr = htonl(to_ip);
    ASSERT_EQ(sendto(tx_, v, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(n));
  }
  // The next RoCE packet to us within `ms`, or false. Its payload is copied into `data`.
  bool next(roce::Packet* p, std::vector<uint8_t>* data, int ms) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
    while (std::chrono::steady_clock::now() < end) {
      const ssize_t n = recv(rx_, buf_, sizeof buf_, MSG_DONTWAIT);
      if (n <= 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
        continue;
      }
      if (roce::decode(buf_, static_cast<size_t>(n), p) != roce::Drop::kNone) continue;
      if (data) data->assign(p->payload, p->payload + p->payload_len);
      return true;
    }
    return false;
  }

 private:
  uint32_t ip_;
  int tx_ = -1, rx_ = -1;
  uint16_t id_ = 0;
  uint8_t buf_[9216];
};

TEST_F(RoceWire, ResponderRulesAsRxe) {
  RoceOptions rb;
  rb.local_ipv4 = loopback_ip(13, 2);
  auto wb = make_roce_wire(rb);
  if (!wb.ok() && wb.error().message.find("CAP_NET_RAW") != std::string::npos)
    GTEST_SKIP() << wb.error().message;
  ASSERT_TRUE(wb.ok()) << wb.error().message;
  Options o;
  o.mode = Mode::kThreaded;
  o.name = "roce-b";
  auto b = EmuDevice::open(wb.value(), 0, o);
  ASSERT_TRUE(b.ok());
  pair_.b = std::move(b.value());
  b_.dev = pair_.b.get();
  Peer t(loopback_ip(13, 1));
  ASSERT_TRUE(t.ok());
  // Initial PSNs: random per QP, stated in the connect info, new for each incarnation.
  auto d = b_.dev->create_qp(small_cfg());
  auto d2 = b_.dev->create_qp(small_cfg());
  ASSERT_TRUE(d.ok() && d2.ok());
  b_.desc = d.value();
  b_.qp.init(b_.desc, 1);
  const uint32_t b_psn = b_.dev->local_info(b_.desc.qpn).psn;
  EXPECT_EQ(b_.dev->local_info(b_.desc.qpn).psn, b_psn);  // stable until connected
  EXPECT_NE(b_.dev->local_info(d2.value().qpn).psn, b_psn);
  EXPECT_LE(b_psn, roce::kPsnMask);
  constexpr uint32_t kTq = 0x77, kP0 = 0xFFFFFE;  // the test's QP and send PSN: wraps at +2
  mlx5::ConnectInfo ci;
  ci.qpn = kTq;
  ci.psn = kP0;
  ci.gid[10] = ci.gid[11] = 0xFF;
  ci.gid[12] = 127;
  ci.gid[13] = loopback_net();
  ci.gid[14] = 13;
  ci.gid[15] = 1;
  ASSERT_TRUE(b_.dev->connect(b_.desc.qpn, ci).ok());
  EXPECT_EQ(b_.dev->local_info(b_.desc.qpn).psn, b_psn);  // stated while connected

  Buf mem;
  mem.alloc(*b_.dev, 8192, 7);
  const uint32_t to = loopback_ip(13, 2);
  auto P = [](int k) { return roce::psn_add(kP0, k); };
  std::vector<uint8_t> w1(512, 0x11), w2(512, 0x22), got;
  roce::Packet r, q;
  q.dqpn = b_.desc.qpn;
  q.opcode = roce::kWriteOnly;
  q.ack_req = true;
  q.psn = P(0);
  q.reth_va = mem.addr();
  q.reth_rkey = mem.mr.rkey;
  q.reth_len = 512;
  q.payload = w1.data();
  q.payload_len = 512;
  t.send(q, to);
  ASSERT_TRUE(t.next(&r, nullptr, 2000));
  EXPECT_EQ(r.opcode, roce::kAcknowledge);
  EXPECT_EQ(r.dqpn, kTq);
  EXPECT_EQ(r.psn, P(0));
  EXPECT_EQ(r.aeth_syndrome, roce::kAethAck);
  EXPECT_EQ(r.aeth_msn, 1u);  // MSN from 0 at connect; one message executed
  // A duplicate WRITE without AckReq: not executed again, ACKed again (C9-105).
  q.ack_req = false;
  q.payload = w2.data();
  t.send(q, to);
  ASSERT_TRUE(t.next(&r, nullptr, 2000)) << "a duplicate WRITE is acknowledged, AckReq or not";
  EXPECT_EQ(r.aeth_syndrome, roce::kAethAck);
  EXPECT_EQ(r.psn, P(0));
  EXPECT_EQ(r.aeth_msn, 1u);
  EXPECT_EQ(0, std::memcmp(mem.p, w1.data(), 512));
  // Two packets ahead (P(1) lost): one NAK PSN sequence error with the expected PSN, then none.
  q.ack_req = true;
  q.psn = P(5);
  t.send(q, to);
  q.psn = P(6);
  t.send(q, to);
  ASSERT_TRUE(t.next(&r, nullptr, 2000));
  EXPECT_EQ(r.aeth_syndrome, roce::kAethNakPsn);
  EXPECT_EQ(r.psn, P(1));
  EXPECT_EQ(r.aeth_msn, 1u);
  EXPECT_FALSE(t.next(&r, nullptr, 100)) << "a second NAK for the same gap";
  EXPECT_EQ(0, std::memcmp(mem.p, w1.data(), 512));
  // The expected PSN (across the wrap: P(1) = 0xFFFFFF) is executed and clears the NAK state.
  q.psn = P(1);
  q.reth_va = mem.addr(512);
  t.send(q, to);
  ASSERT_TRUE(t.next(&r, nullptr, 2000));
  EXPECT_EQ(r.aeth_syndrome, roce::kAethAck);
  EXPECT_EQ(r.psn, P(1));
  EXPECT_EQ(r.aeth_msn, 2u);
  EXPECT_EQ(0, std::memcmp(mem.p + 512, w2.data(), 512));
  q.psn = P(7);
  t.send(q, to);
  ASSERT_TRUE(t.next(&r, nullptr, 2000)) << "a new gap is NAKed again";
  EXPECT_EQ(r.aeth_syndrome, roce::kAethNakPsn);
  EXPECT_EQ(r.psn, P(2));
  // A READ of 3000 bytes at P(2) = 0 takes P(2)..P(4): FIRST, MIDDLE, LAST with the data.
  roce::Packet rd;
  rd.dqpn = b_.desc.qpn;
  rd.opcode = roce::kReadRequest;
  rd.ack_req = true;
  rd.psn = P(2);
  rd.reth_va = mem.addr(100);
  rd.reth_rkey = mem.mr.rkey;
  rd.reth_len = 3000;
  t.send(rd, to);
  const uint8_t want_op[3] = {roce::kReadRespFirst, roce::kReadRespMiddle, roce::kReadRespLast};
  for (int k = 0; k < 3; ++k) {
    ASSERT_TRUE(t.next(&r, &got, 2000)) << "response " << k;
    EXPECT_EQ(r.opcode, want_op[k]);
    EXPECT_EQ(r.psn, P(2 + k));
    ASSERT_EQ(got.size(), k < 2 ? 1024u : 952u);
    EXPECT_EQ(0, std::memcmp(got.data(), mem.p + 100 + 1024 * k, got.size())) << k;
    if (k != 1) {
      EXPECT_EQ(r.aeth_msn, 3u);  // AETH on FIRST and LAST
    }
  }
  // A duplicate READ from its middle PSN for the rest (a requester's retry): answered from there.
  rd.psn = P(3);
  rd.reth_va = mem.addr(100 + 1024);
  rd.reth_len = 3000 - 1024;
  t.send(rd, to);
  for (int k = 0; k < 2; ++k) {
    ASSERT_TRUE(t.next(&r, &got, 2000)) << "replayed response " << k;
    EXPECT_EQ(r.opcode, k == 0 ? roce::kReadRespFirst : roce::kReadRespLast);
    EXPECT_EQ(r.psn, P(3 + k));
    EXPECT_EQ(0, std::memcmp(got.data(), mem.p + 100 + 1024 * (k + 1), got.size())) << k;
  }
  // ... but not with another R_Key or outside the original range: dropped silently.
  rd.reth_rkey = mem.mr.rkey ^ 0x100;
  t.send(rd, to);
  rd.reth_rkey = mem.mr.rkey;
  rd.reth_va = mem.addr(0);
  t.send(rd, to);
  EXPECT_FALSE(t.next(&r, nullptr, 100)) << "a READ that is not a part of the served one";
  // A READ refused (wrong R_Key) at ePSN = P(5): NAK remote access error with its PSN; its
  // repeat gets nothing (the refusal put the QP in error, which takes no packet at all).
  rd.psn = P(5);
  rd.reth_va = mem.addr(0);
  rd.reth_len = 1000;
  rd.reth_rkey = mem.mr.rkey ^ 0x100;
  t.send(rd, to);
  ASSERT_TRUE(t.next(&r, nullptr, 2000));
  EXPECT_EQ(r.opcode, roce::kAcknowledge);
  EXPECT_EQ(r.aeth_syndrome, roce::kAethNakRemAccess);
  EXPECT_EQ(r.psn, P(5));
  t.send(rd, to);
  EXPECT_FALSE(t.next(&r, nullptr, 100)) << "a refused READ executed again";
  // The refusal is a class C error (rxe_resp.c: RESPST_ERR_RKEY_VIOLATION on RC goes through
  // do_class_ac_error to the error state): B's QP is in error and raised IBV_EVENT_QP_ACCESS_ERR;
  // the next READ, valid or not, gets no answer at all.
  expect_responder_error(b_, mlx5::AsyncEventKind::kQpAccessErr);
  rd.psn = P(6);
  rd.reth_rkey = mem.mr.rkey;
  t.send(rd, to);
  EXPECT_FALSE(t.next(&r, nullptr, 100)) << "a responder in error answered";
  const EmuStats sb = b_.dev->stats();
  EXPECT_EQ(sb.roce.out_of_seq, 3u);
  EXPECT_EQ(sb.roce.seq_naks_sent, 2u);
  EXPECT_EQ(sb.roce.duplicates, 4u);     // the WRITE and three READs behind ePSN
  EXPECT_EQ(sb.remote_access_naks, 1u);  // the refused READ once
  EXPECT_EQ(sb.responder_errors, 1u);
  // A connection that carried requests states, for the next connect without RESET (as
  // endpoint::recover_core does), the PSN after the last request it sent, stable until then: B
  // sent none, so its initial one. A RESET draws a new one.
  const uint32_t next_psn = b_.dev->local_info(b_.desc.qpn).psn;
  EXPECT_EQ(next_psn, b_psn);
  EXPECT_EQ(b_.dev->local_info(b_.desc.qpn).psn, next_psn);
  ASSERT_TRUE(b_.dev->modify_qp(b_.desc.qpn, mlx5::QpState::kReset).ok());
  EXPECT_NE(b_.dev->local_info(b_.desc.qpn).psn, next_psn);
}

// A blind attacker on the path's edges: 10,000 forged packets at B's QP while A and B move data
// both ways. Half carry A's source address (the victim's), half another; all the right QPN and a
// random PSN; WRITE_ONLY and READ_REQUEST with a wrong R_Key, SEND_ONLY (would take a receive),
// and NAK remote-access responses (would fail B's requester). None may change a byte, complete
// anything or disturb either QP: wrong-source packets are dropped before their PSN is looked at,
// request PSNs ahead get at most one NAK PSN sequence error per gap (A goes back N), behind are
// duplicates (re-ACKed, not executed), responses for PSNs B has not sent are dropped. The forged
// PSNs avoid the 2^16 after each side's initial PSN, which this run's traffic stays inside (an
// exact hit is the 2^-24 case doc/guides/security.md describes). Fixed seed; bounded waits.
TEST_F(RoceWire, BlindForgeriesDoNotDisturbTheConnection) {
  if (!open_roce(12)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  constexpr int kRounds = 400, kPerRound = 25;  // 10,000 forgeries
  constexpr uint32_t kLen = 3000;               // 3 packets of 1024
  const uint32_t isn_a = a_.dev->local_info(a_.desc.qpn).psn;
  const uint32_t isn_b = b_.dev->local_info(b_.desc.qpn).psn;
  Buf src_a, dst_b, rbuf_b, back_a, src_b, dst_a;
  src_a.alloc(*a_.dev, 4096, 1);
  back_a.alloc(*a_.dev, 4096, 2);
  dst_a.alloc(*a_.dev, 4096, 3);
  dst_b.alloc(*b_.dev, 4096, 4);
  rbuf_b.alloc(*b_.dev, 4096, 5);
  src_b.alloc(*b_.dev, 4096, 6);

  const int fd = socket(AF_INET, SOCK_RAW, IPPROTO_RAW);
  ASSERT_GE(fd, 0);
  sockaddr_in to{};
  to.sin_family = AF_INET;
  to.sin_addr.s_addr = htonl(loopback_ip(12, 2));
  std::mt19937 rng(20261205);
  static const uint8_t junk[64] = {0xEE, 0xEE, 0xEE, 0xEE};
  const uint32_t bad_rkey = dst_b.mr.rkey ^ 0x00ABCD00;
  auto in_use = [](uint32_t psn, uint32_t isn) {
    return static_cast<uint32_t>(roce::psn_diff(psn, isn)) < (1u << 16);
  };
  uint64_t n_wrong_src = 0, n_requests = 0, n_responses = 0;
  auto forge = [&](int i) {
    roce::Packet p;
    p.src_ip = (i & 1) ? loopback_ip(12, 9) : loopback_ip(12, 1);
    p.dst_ip = loopback_ip(12, 2);
    p.ip_id = static_cast<uint16_t>(i + 1);
    p.dqpn = b_.desc.qpn;
    do p.psn = rng() & roce::kPsnMask;
    while (in_use(p.psn, isn_a) || in_use(p.psn, isn_b));
    p.ack_req = true;
    p.reth_va = dst_b.addr();
    p.reth_rkey = bad_rkey;
    switch ((i >> 1) & 3) {
      case 0:
        p.opcode = roce::kWriteOnly;
        p.reth_len = sizeof junk;
        p.payload = junk;
        p.payload_len = sizeof junk;
        break;
      case 1:
        p.opcode = roce::kSendOnly;
        p.payload = junk;
        p.payload_len = sizeof junk;
        break;
      case 2:
        p.opcode = roce::kReadRequest;
        p.reth_len = 1024;
        break;
      default:
        p.opcode = roce::kAcknowledge;
        p.ack_req = false;
        p.aeth_syndrome = roce::kAethNakRemAccess;
        break;
    }
    if (i & 1)
      ++n_wrong_src;
    else if (p.opcode == roce::kAcknowledge)
      ++n_responses;
    else
      ++n_requests;
    uint8_t v[256];
    const size_t n = roce::encode(p, v, sizeof v);
    ASSERT_EQ(sendto(fd, v, n, 0, reinterpret_cast<sockaddr*>(&to), sizeof to),
              static_cast<ssize_t>(n));
  };

  const auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < kRounds; ++r) {
    auto data = random_bytes(4096, 1000 + r);
    std::memcpy(src_a.p, data.data(), 4096);
    std::memcpy(src_b.p, data.data() + 77, 4096 - 77);
    // Work in flight both ways, then the forgeries, then the completions.
    recv(b_, 10, {{rbuf_b.addr(), 4096, rbuf_b.mr.lkey}});
    rdma(a_, MLX5_OPCODE_RDMA_WRITE, 1, dst_b.addr(), dst_b.mr.rkey,
         {{src_a.addr(), kLen, src_a.mr.lkey}});
    send(a_, MLX5_OPCODE_SEND, 2, {{src_a.addr(500), kLen, src_a.mr.lkey}});
    rdma(b_, MLX5_OPCODE_RDMA_WRITE, 3, dst_a.addr(), dst_a.mr.rkey,
         {{src_b.addr(), kLen, src_b.mr.lkey}});
    for (int i = 0; i < kPerRound; ++i) forge(r * kPerRound + i);
    ASSERT_FALSE(HasFatalFailure());
    auto ca = wait(a_, 2);
    ASSERT_EQ(ca.size(), 2u);
    ASSERT_TRUE(ca[0].ok() && ca[1].ok())
        << "round " << r << " status " << int(ca[0].status) << "/" << int(ca[1].status);
    auto cb = wait(b_, 2);  // B's WRITE and the receive of A's SEND, in either order
    ASSERT_EQ(cb.size(), 2u) << "round " << r;
    ASSERT_TRUE(cb[0].ok() && cb[1].ok())
        << "round " << r << " status " << int(cb[0].status) << "/" << int(cb[1].status);
    ASSERT_EQ(0, std::memcmp(dst_b.p, src_a.p, kLen)) << "round " << r;
    ASSERT_EQ(0, std::memcmp(rbuf_b.p, src_a.p + 500, kLen)) << "round " << r;
    ASSERT_EQ(0, std::memcmp(dst_a.p, src_b.p, kLen)) << "round " << r;
    rdma(a_, MLX5_OPCODE_RDMA_READ, 4, dst_b.addr(9), dst_b.mr.rkey,
         {{back_a.addr(), kLen - 9, back_a.mr.lkey}});
    ASSERT_TRUE(wait(a_, 1)[0].ok()) << "round " << r;
    ASSERT_EQ(0, std::memcmp(back_a.p, src_a.p + 9, kLen - 9)) << "round " << r;
  }
  close(fd);
  // Every forgery is accounted for at B (the last ones may still be in its socket).
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  EmuStats sb;
  auto dropped = [&](roce::Drop d) { return sb.roce.rx_dropped[static_cast<int>(d)]; };
  auto responses = [&] { return dropped(roce::Drop::kPsnWindow) + sb.roce.stale_resps; };
  do {
    sb = b_.dev->stats();
    if (dropped(roce::Drop::kNotPeer) >= n_wrong_src && responses() >= n_responses &&
        sb.roce.duplicates + sb.roce.out_of_seq >= n_requests)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  } while (std::chrono::steady_clock::now() < end);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  expect_quiet(a_);
  expect_quiet(b_);
  EXPECT_EQ(a_.dev->query_qp(a_.desc.qpn).value(), mlx5::QpState::kRts);
  EXPECT_EQ(b_.dev->query_qp(b_.desc.qpn).value(), mlx5::QpState::kRts);
  EXPECT_EQ(n_wrong_src + n_requests + n_responses, uint64_t{kRounds * kPerRound});
  EXPECT_EQ(dropped(roce::Drop::kNotPeer), n_wrong_src);  // nothing else has another source
  EXPECT_GE(responses(), n_responses);
  EXPECT_GT(dropped(roce::Drop::kPsnWindow), 0u);
  EXPECT_GE(sb.roce.duplicates + sb.roce.out_of_seq, n_requests);
  EXPECT_GT(sb.roce.duplicates, 0u);
  EXPECT_GT(sb.roce.out_of_seq, 0u);
  EXPECT_LE(sb.roce.seq_naks_sent, sb.roce.out_of_seq);
  EXPECT_EQ(b_.dev->stats().remote_access_naks, 0u);  // no forged R_Key reached the engine
  const EmuStats sa = a_.dev->stats();
  std::printf("%d forgeries (%" PRIu64 " wrong source, %" PRIu64 " requests, %" PRIu64
              " responses) in %.2f s: B dropped %" PRIu64 " not_peer, %" PRIu64
              " psn_window, %" PRIu64 " stale responses, %" PRIu64
              " duplicates (re-ACKed), %" PRIu64 " ahead (%" PRIu64
              " seq NAKs); A retransmitted %" PRIu64 "\n",
              kRounds * kPerRound, n_wrong_src, n_requests, n_responses, secs,
              dropped(roce::Drop::kNotPeer), dropped(roce::Drop::kPsnWindow), sb.roce.stale_resps,
              sb.roce.duplicates, sb.roce.out_of_seq, sb.roce.seq_naks_sent, sa.roce.retransmits);
}

TEST_F(RoceWire, DeviceGidIsIpv4Mapped) {
  if (!open_roce(5, {}, {}, false)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  const mlx5::ConnectInfo ci = a_.dev->local_info(a_.desc.qpn);
  const uint8_t want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xFF, 0xFF, 127, loopback_net(), 5, 1};
  EXPECT_EQ(0, std::memcmp(ci.gid, want, 16));
  EXPECT_EQ(ci.path_mtu, 3);  // IBV_MTU_1024
  mlx5::ConnectInfo bad = b_.dev->local_info(b_.desc.qpn);
  bad.gid[10] = 0;
  EXPECT_FALSE(a_.dev->connect(a_.desc.qpn, bad).ok());
  // A second device on the same address is refused in one line.
  RoceOptions r;
  r.local_ipv4 = loopback_ip(5, 1);
  auto w = make_roce_wire(r);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.error().message.find("in use"), std::string::npos) << w.error().message;
}

// With RDMX_ROCE_CAPTURE_DIR set: each device writes a pcap of what it sent, and the opcodes
// expected in it (one message at a time, no loss: the order is fixed).
TEST_F(RoceWire, Capture) {
  const char* dir = std::getenv("RDMX_ROCE_CAPTURE_DIR");
  if (!dir) GTEST_SKIP() << "RDMX_ROCE_CAPTURE_DIR not set (roce_capture_check.sh sets it)";
  RoceOptions ra, rb;
  ra.pcap = std::string(dir) + "/a.pcap";
  rb.pcap = std::string(dir) + "/b.pcap";
  if (!open_roce(6, ra, rb)) GTEST_SKIP() << "no raw IPv4 sockets (CAP_NET_RAW) here";
  all_ops(1);
  // all_ops(1): len 1000: WRITE_ONLY, READ_REQUEST, SEND_ONLY, SEND_ONLY_IMM, WRITE 2100 with
  // immediate (FIRST, MIDDLE, LAST_IMM), SEND_WITH_INV 1500 (FIRST, LAST_INV).
  std::ofstream(std::string(dir) + "/a.ops") << "10\n12\n4\n5\n6\n7\n9\n0\n22\n";
  // Responses: ACK, READ_RESPONSE_ONLY (993 bytes), then one ACK per message.
  std::ofstream(std::string(dir) + "/b.ops") << "17\n16\n17\n17\n17\n17\n";
  pair_.a.reset();  // closes the captures
  pair_.b.reset();
  a_.dev = b_.dev = nullptr;
}

}  // namespace
}  // namespace rdmx::emu::test
