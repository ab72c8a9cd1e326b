// The RingCarrier (drivers/mlx5/emu/carrier.hpp): lossless, in order, bytes intact (ICRC and
// all), a full ring refuses and counts instead of overwriting, and one sender and one receiver
// on two threads see every packet once, in order.
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "carrier.hpp"
#include "roce.hpp"

using namespace rdmx::emu;
using namespace rdmx::emu::detail;

namespace {

struct Pair {
  std::unique_ptr<PktRing> r[2]{std::make_unique<PktRing>(), std::make_unique<PktRing>()};
  RingCarrier a{r[0].get(), r[1].get()};
  RingCarrier b{r[1].get(), r[0].get()};
  Pair() {
    init_pkt_ring(r[0].get());
    init_pkt_ring(r[1].get());
  }
};

// A WRITE_ONLY of `len` payload bytes numbered by `psn` (the payload repeats the PSN's low byte).
std::vector<uint8_t> packet(uint32_t psn, uint32_t len) {
  std::vector<uint8_t> payload(len, static_cast<uint8_t>(psn));
  roce::Packet p;
  p.src_ip = 0x7F000001;
  p.dst_ip = 0x7F000002;
  p.opcode = roce::kWriteOnly;
  p.dqpn = 0x123;
  p.psn = psn & roce::kPsnMask;
  p.reth_len = len;
  p.payload = payload.data();
  p.payload_len = len;
  std::vector<uint8_t> out(len + roce::kMaxOverhead);
  out.resize(roce::encode(p, out.data(), out.size()));
  return out;
}

}  // namespace

TEST(RingCarrier, InOrderBytesIntactBothWays) {
  Pair w;
  for (uint32_t i = 0; i < 40; ++i) {
    const auto pk = packet(i, i % 2 ? kWireMtu : i);
    (i % 4 == 3 ? w.b : w.a).send(pk.data(), pk.size(), 0x7F000002, 0);
  }
  RxPkt rx[Carrier::kRxBatch];
  uint32_t next_a = 0, next_b = 0, got = 0;
  for (int round = 0; round < 10; ++round) {
    for (RingCarrier* c : {&w.b, &w.a}) {
      const unsigned n = c->recv_burst(rx, Carrier::kRxBatch);
      for (unsigned i = 0; i < n; ++i, ++got) {
        roce::Packet p;
        ASSERT_EQ(roce::decode(rx[i].data, rx[i].len, &p), roce::Drop::kNone);  // ICRC intact
        uint32_t& next = c == &w.b ? next_a : next_b;
        while (next % 4 == 3 ? c == &w.b : c == &w.a) ++next;  // the other direction's PSNs
        EXPECT_EQ(p.psn, next);
        EXPECT_EQ(p.payload_len, next % 2 ? kWireMtu : next);
        if (p.payload_len) {
          EXPECT_EQ(p.payload[p.payload_len - 1], static_cast<uint8_t>(next));
        }
        ++next;
      }
      c->rx_release(n);
    }
  }
  EXPECT_EQ(got, 40u);
  EXPECT_EQ(w.a.stats().tx_packets + w.b.stats().tx_packets, 40u);
}

TEST(RingCarrier, FullRingRefusesAndCounts) {
  Pair w;
  const auto pk = packet(7, 64);
  for (uint32_t i = 0; i < kPktSlots + 5; ++i) w.a.send(pk.data(), pk.size(), 1, 0);
  EXPECT_EQ(w.a.tx_room(), 0u);
  EXPECT_EQ(w.a.stats().tx_packets, kPktSlots);
  EXPECT_EQ(w.a.stats().ring_full, 5u);
  RxPkt rx[Carrier::kRxBatch];
  uint32_t got = 0;
  while (unsigned n = w.b.recv_burst(rx, Carrier::kRxBatch)) got += n;
  EXPECT_EQ(got, kPktSlots);
  EXPECT_EQ(w.a.tx_room(), 0u);                          // received, still held in place
  EXPECT_EQ(w.b.recv_burst(rx, Carrier::kRxBatch), 0u);  // and not received again
  w.b.rx_release(kPktSlots - 3);
  EXPECT_EQ(w.a.tx_room(), kPktSlots - 3);  // the oldest first
  w.b.rx_release(kPktSlots);                // no more than were held
  EXPECT_EQ(w.a.tx_room(), kPktSlots);
}

// A sender encodes straight into the ring's free slot (tx_buf, send_buf); a full ring gives
// none and counts it.
TEST(RingCarrier, ProducerSlotInPlace) {
  Pair w;
  const auto pk = packet(9, 100);
  size_t cap = 0;
  for (uint32_t i = 0; i < kPktSlots; ++i) {
    uint8_t* b = w.a.tx_buf(&cap);
    ASSERT_NE(b, nullptr);
    ASSERT_GE(cap, kWireMtu + roce::kMaxOverhead);
    std::memcpy(b, pk.data(), pk.size());
    w.a.send_buf(pk.size(), 1, 0);
  }
  EXPECT_EQ(w.a.tx_buf(&cap), nullptr);
  EXPECT_EQ(w.a.stats().ring_full, 1u);
  EXPECT_EQ(w.a.stats().tx_packets, kPktSlots);
  RxPkt rx[Carrier::kRxBatch];
  ASSERT_EQ(w.b.recv_burst(rx, 1), 1u);
  ASSERT_EQ(rx[0].len, pk.size());
  EXPECT_EQ(0, std::memcmp(rx[0].data, pk.data(), pk.size()));
}

TEST(RingCarrier, TwoThreadsEveryPacketOnceInOrder) {
  Pair w;
  constexpr uint32_t kN = 20000;
  std::thread tx([&] {
    for (uint32_t i = 0; i < kN; ++i) {
      const auto pk = packet(i, 8 + i % 200);
      while (w.a.tx_room() == 0) std::this_thread::yield();
      w.a.send(pk.data(), pk.size(), 1, 0);
    }
  });
  RxPkt rx[Carrier::kRxBatch];
  uint32_t next = 0;
  while (next < kN) {
    const unsigned n = w.b.recv_burst(rx, Carrier::kRxBatch);
    if (!n) std::this_thread::yield();
    for (unsigned i = 0; i < n; ++i, ++next) {
      roce::Packet p;
      ASSERT_EQ(roce::decode(rx[i].data, rx[i].len, &p), roce::Drop::kNone);
      ASSERT_EQ(p.psn, next);
      ASSERT_EQ(p.payload_len, 8 + next % 200);
    }
    w.b.rx_release(n);
  }
  tx.join();
  EXPECT_EQ(w.a.stats().ring_full, 0u);
}
