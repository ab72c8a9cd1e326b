// Writes a pcap (LINKTYPE_RAW) of RoCE v2 SENDs, encoded by emu's RoCE codec, whose payloads are
// RPC-over-RDMA messages encoded by rdmx::rpcrdma (each RDMA_MSG followed by an NFSv3 NULL call
// or reply), and prints, one line per packet, the rpcordma fields Wireshark's dissector must
// read from it (tests/rpcrdma/rpcrdma_pcap_check.sh compares them):
//   xid version credits proc reads writes reply handles lengths offsets positions errcode low high
// (tab-separated, lists comma-separated, "-" for none), so a decoder nobody here wrote checks
// the codec's bytes.
//   rpcrdma_pcap_gen OUT.pcap
#include <cinttypes>
#include <cstdio>
#include <string>
#include <vector>

#include <rdmx/rpcrdma/codec.hpp>

#include "roce.hpp"

namespace roce = rdmx::emu::roce;
using namespace rdmx::rpcrdma;

namespace {

void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) b.push_back(static_cast<uint8_t>(v >> s));
}

// ONC RPC (RFC 5531) NFSv3 NULL: a call, or an accepted-success reply; AUTH_NONE.
std::vector<uint8_t> nfs_null(uint32_t xid, bool reply) {
  std::vector<uint8_t> b;
  put32(b, xid);
  if (!reply) {
    for (uint32_t w : {0u, 2u, 100003u, 3u, 0u, 0u, 0u, 0u, 0u}) put32(b, w);
  } else {
    for (uint32_t w : {1u, 0u, 0u, 0u, 0u}) put32(b, w);
  }
  return b;
}

std::string join(const std::vector<std::string>& v) {
  if (v.empty()) return "-";
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : ",") + x;
  return s;
}
std::string hex32(uint32_t v) {
  char b[16];
  std::snprintf(b, sizeof b, "0x%08x", v);
  return b;
}
std::string hex64(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%016" PRIx64, v);
  return b;
}

// The expected line for h, from the Header (not from the bytes).
void expect(const Header& h) {
  std::vector<std::string> handles, lengths, offsets, positions;
  auto seg = [&](const Segment& s) {
    handles.push_back(hex32(s.handle));
    lengths.push_back(std::to_string(s.length));
    offsets.push_back(hex64(s.offset));
  };
  std::string reads = "-", writes = "-", reply = "-", err = "-", low = "-", high = "-";
  if (h.proc == Proc::kError) {
    err = std::to_string(static_cast<uint32_t>(h.err));
    if (h.err == ErrCode::kVers) {
      low = std::to_string(h.vers_low);
      high = std::to_string(h.vers_high);
    }
  } else {
    reads = std::to_string(h.n_reads);
    writes = std::to_string(h.n_writes);
    reply = std::to_string(h.has_reply ? 1 : 0);
    for (uint32_t i = 0; i < h.n_reads; ++i) {
      positions.push_back(std::to_string(h.reads[i].position));
      seg(h.reads[i].target);
    }
    for (uint32_t i = 0; i < h.n_writes; ++i)
      for (const Segment& s : h.writes[i].view()) seg(s);
    if (h.has_reply)
      for (const Segment& s : h.reply.view()) seg(s);
  }
  std::printf("%s\t%u\t%u\t%u\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", hex32(h.xid).c_str(),
              h.vers, h.credits, static_cast<uint32_t>(h.proc), reads.c_str(), writes.c_str(),
              reply.c_str(), join(handles).c_str(), join(lengths).c_str(), join(offsets).c_str(),
              join(positions).c_str(), err.c_str(), low.c_str(), high.c_str());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: rpcrdma_pcap_gen OUT.pcap\n");
    return 2;
  }
  roce::Pcap pcap;
  if (!pcap.open(argv[1])) {
    std::perror(argv[1]);
    return 1;
  }
  std::vector<uint8_t> wire(4096 + roce::kMaxOverhead);
  uint16_t ip_id[2] = {1, 1};
  uint32_t psn[2] = {100, 900};
  uint64_t t = 1'700'000'000'000'000'000ull;
  int bad = 0;
  // One RPC-over-RDMA message as one SEND (SEND_ONLY, or SEND_ONLY_WITH_INVALIDATE naming `inv`).
  auto send = [&](bool from_server, const Header& h, bool rpc, uint32_t inv = 0) {
    std::vector<uint8_t> msg(kDefaultInlineThreshold);
    const CodecResult e = encode(h, msg, from_server ? Role::kReply : Role::kCall);
    if (!e.ok()) {
      std::fprintf(stderr, "encode: %s\n", error_text(e.error));
      ++bad;
      return;
    }
    msg.resize(e.length);
    if (rpc) {
      const auto body = nfs_null(h.xid, from_server);
      msg.insert(msg.end(), body.begin(), body.end());
    }
    roce::Packet p;
    p.src_ip = from_server ? 0x0A000002 : 0x0A000001;
    p.dst_ip = from_server ? 0x0A000001 : 0x0A000002;
    p.ip_id = ip_id[from_server]++;
    p.sport = from_server ? 0xC0B2 : 0xC0A1;
    p.dqpn = from_server ? 0x100 : 0x101;
    p.opcode = inv ? roce::kSendOnlyInv : roce::kSendOnly;
    p.ieth = inv;
    p.psn = psn[from_server]++;
    p.ack_req = true;
    p.payload = msg.data();
    p.payload_len = static_cast<uint32_t>(msg.size());
    const size_t n = roce::encode(p, wire.data(), wire.size());
    if (n == 0 || !pcap.write(wire.data(), n, t += 1000)) ++bad;
    expect(h);
  };

  // A call whose result goes to a Write chunk of two segments (an NFSv3 READ's shape).
  Header call;
  call.xid = 0x8a3c5e01;
  call.credits = 32;
  call.n_writes = 1;
  call.writes[0].n_segments = 2;
  call.writes[0].segments[0] = {0x00012a07, 8192, 0};
  call.writes[0].segments[1] = {0x00012b31, 4096, 0x2000};
  send(false, call, true);
  // Its reply: the Write chunk back with the bytes written, SEND_WITH_INV naming the first.
  Header reply = call;
  reply.credits = 16;
  reply.writes[0].segments[1].length = 1000;
  send(true, reply, true, 0x00012a07);
  // A call with data in a Read chunk at the end of its 40-byte RPC message (position 40: the shape
  // of an NFSv3 WRITE, whose data follows its arguments) and a Reply chunk.
  Header wr;
  wr.xid = 0x8a3c5e02;
  wr.credits = 32;
  wr.n_reads = 2;
  wr.reads[0] = {40, {0x00013301, 4096, 0x0000000100000000ull}};
  wr.reads[1] = {40, {0x00013302, 100, 0x1000}};
  wr.has_reply = true;
  wr.reply.n_segments = 1;
  wr.reply.segments[0] = {0x00013400, 2048, 0};
  send(false, wr, true);
  // A long call: RDMA_NOMSG, the call in a Position-Zero Read chunk, a Reply chunk.
  Header nomsg;
  nomsg.xid = 0x8a3c5e03;
  nomsg.credits = 8;
  nomsg.proc = Proc::kNoMsg;
  nomsg.n_reads = 1;
  nomsg.reads[0] = {0, {0x00014001, 3000, 0}};
  nomsg.has_reply = true;
  nomsg.reply.n_segments = 1;
  nomsg.reply.segments[0] = {0x00014002, 65536, 0};
  send(false, nomsg, false);
  // Errors.
  send(true, error_reply(0x8a3c5e04, 1, ErrCode::kVers), false);
  send(true, error_reply(0x8a3c5e05, 1, ErrCode::kChunk), false);
  return bad ? 1 : 0;
}
