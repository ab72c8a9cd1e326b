// Writes a pcap (LINKTYPE_RAW) of RC conversations encoded by emu's RoCE v2 codec: every opcode
// emu speaks, multi-packet messages, pads 0-3, a PSN wrap, ACK/NAK syndromes. Prints the opcode
// of each packet, one per line, so tests/emu/roce_pcap_check.sh can compare what tshark decodes.
//   roce_pcap_gen OUT.pcap
#include <cstdio>
#include <random>
#include <vector>

#include "roce.hpp"

namespace roce = rdmx::emu::roce;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: roce_pcap_gen OUT.pcap\n");
    return 2;
  }
  roce::Pcap pcap;
  if (!pcap.open(argv[1])) {
    std::perror(argv[1]);
    return 1;
  }
  std::mt19937 g(4791);
  std::vector<uint8_t> data(4096);
  for (auto& x : data) x = uint8_t(g());
  std::vector<uint8_t> buf(4096 + roce::kMaxOverhead);
  uint16_t ip_id[2] = {1, 1};
  uint32_t psn = 0xFFFFFA;  // requests wrap through 0xFFFFFF -> 0
  uint64_t t = 1'700'000'000'000'000'000ull;
  const uint32_t mtu = 1024;
  int bad = 0;
  auto emit = [&](bool from_b, uint8_t op, uint32_t len, auto&& fill) {
    roce::Packet p;
    p.src_ip = from_b ? 0x0A000002 : 0x0A000001;
    p.dst_ip = from_b ? 0x0A000001 : 0x0A000002;
    p.ip_id = ip_id[from_b]++;
    p.sport = from_b ? 0xC0B2 : 0xC0A1;
    p.dqpn = from_b ? 0x100 : 0x101;
    p.opcode = op;
    p.payload = data.data() + (g() % 64) * 4;
    p.payload_len = len;
    fill(p);
    const size_t n = roce::encode(p, buf.data(), buf.size());
    if (n == 0 || !pcap.write(buf.data(), n, t += 1000)) ++bad;
    std::printf("%u\n", op);
  };
  auto ack = [&](uint32_t psn_, uint8_t synd, uint32_t msn) {
    emit(true, roce::kAcknowledge, 0, [&](roce::Packet& p) {
      p.psn = psn_;
      p.aeth_syndrome = synd;
      p.aeth_msn = msn;
    });
  };
  uint32_t msn = 0;
  // Messages split by the path MTU (rxe_req.c next_opcode_rc): FIRST / MIDDLE* / LAST or ONLY.
  auto message = [&](uint8_t first, uint8_t middle, uint8_t last, uint8_t only, uint32_t len,
                     bool reth_on_first) {
    uint32_t off = 0;
    while (true) {
      const uint32_t left = len - off;
      const bool fits = left <= mtu;
      const uint8_t op = off == 0 ? (fits ? only : first) : (fits ? last : middle);
      const uint32_t n = fits ? left : mtu;
      emit(false, op, n, [&](roce::Packet& p) {
        p.psn = psn;
        p.ack_req = fits;
        if (reth_on_first && off == 0) {
          p.reth_va = 0x7F0000001000ull;
          p.reth_rkey = 0x1234;
          p.reth_len = len;
        }
        p.imm = 0xCAFE0000 | n;
        p.ieth = 0x5678;
        p.se = fits;
      });
      psn = (psn + 1) & roce::kPsnMask;
      off += n;
      if (fits) break;
    }
    ack((psn - 1) & roce::kPsnMask, roce::kAethAck, ++msn);
  };
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLast, roce::kSendOnly, 0, false);
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLast, roce::kSendOnly, 33, false);
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLast, roce::kSendOnly, 2 * mtu + 5,
          false);
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLastImm, roce::kSendOnlyImm, 1030, false);
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLastImm, roce::kSendOnlyImm, 18, false);
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLastInv, roce::kSendOnlyInv, 2050, false);
  message(roce::kSendFirst, roce::kSendMiddle, roce::kSendLastInv, roce::kSendOnlyInv, 20, false);
  message(roce::kWriteFirst, roce::kWriteMiddle, roce::kWriteLast, roce::kWriteOnly, 3 * mtu, true);
  message(roce::kWriteFirst, roce::kWriteMiddle, roce::kWriteLast, roce::kWriteOnly, 7, true);
  message(roce::kWriteFirst, roce::kWriteMiddle, roce::kWriteLastImm, roce::kWriteOnlyImm, mtu + 2,
          true);
  message(roce::kWriteFirst, roce::kWriteMiddle, roce::kWriteLastImm, roce::kWriteOnlyImm, 64,
          true);
  // RDMA READ of 2.5 MTU: one request reserving 3 PSNs, answered FIRST / MIDDLE / LAST.
  const uint32_t rlen = 2 * mtu + mtu / 2;
  emit(false, roce::kReadRequest, 0, [&](roce::Packet& p) {
    p.psn = psn;
    p.ack_req = true;
    p.reth_va = 0x7F0000002000ull;
    p.reth_rkey = 0x4321;
    p.reth_len = rlen;
  });
  ++msn;
  const uint8_t rops[3] = {roce::kReadRespFirst, roce::kReadRespMiddle, roce::kReadRespLast};
  for (uint32_t i = 0; i < 3; ++i)
    emit(true, rops[i], i < 2 ? mtu : rlen - 2 * mtu, [&](roce::Packet& p) {
      p.psn = (psn + i) & roce::kPsnMask;
      p.aeth_syndrome = roce::kAethAck;
      p.aeth_msn = msn;
    });
  psn = (psn + 3) & roce::kPsnMask;
  emit(false, roce::kReadRequest, 0, [&](roce::Packet& p) {
    p.psn = psn;
    p.ack_req = true;
    p.reth_va = 0x7F0000003000ull;
    p.reth_rkey = 0x4321;
    p.reth_len = 100;
  });
  ++msn;
  emit(true, roce::kReadRespOnly, 100, [&](roce::Packet& p) {
    p.psn = psn;
    p.aeth_syndrome = roce::kAethAck;
    p.aeth_msn = msn;
  });
  psn = (psn + 1) & roce::kPsnMask;
  // NAKs: RNR (timer code 14), PSN sequence error, invalid request, remote access error.
  ack(psn, roce::kAethRnr | 14, msn);
  ack(psn, roce::kAethNakPsn, msn);
  ack(psn, roce::kAethNakInvReq, msn);
  ack(psn, roce::kAethNakRemAccess, msn);
  pcap.close();
  if (bad) std::fprintf(stderr, "roce_pcap_gen: %d packets not written\n", bad);
  return bad ? 1 : 0;
}
