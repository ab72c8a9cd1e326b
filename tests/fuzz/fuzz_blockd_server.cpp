// libFuzzer target: blockd's server (examples/blockd/blockd_server.c) against a hostile client.
// One process, the C API on emu in inline mode (every step done when the doorbell rings): a server
// port whose volume holds two clients' parts (a victim's, blocks 0..31, and the attacker's,
// blocks 32..63) and an attacker port. Each input is a sequence of requests the attacker sends
// through its own core (any op, tag, block number, count and length; its real window's rkey or any
// other), served by blockd_serve.
//
// The model of what the attacker may touch is independent of the server's checks: every byte of
// the victim's part is 0xA5 and stays so; every byte of the attacker's part and of its buffer is
// 0x3C (the only value it ever writes), so a byte of any other value in its buffer is a
// disclosure; the victim's message slots stay zero. A change there, a crash or a server exit is
// a failure; a request the checks call a protocol violation must drop the client.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include <rdmx/rdmx.h>

#include "blockd_server.h"

namespace {

constexpr uint64_t kBlocks = 32;  // per client
constexpr uint32_t kQd = 8, kMaxIo = 16;
constexpr uint64_t kVolBytes = 2 * kBlocks * BLK;
constexpr uint64_t kMsgBytes = 2 * MAXQ * MSG;  // one client's receive and send slots
constexpr uint8_t kVictim = 0xA5, kMine = 0x3C;

struct Bed {
  rdmx_port* s = nullptr;  // server
  rdmx_port* a = nullptr;  // attacker
  struct peer p = {};      // the server's slot 1: the attacker
  struct side atk = {};
  blockd_server_cfg cfg = {kBlocks, kQd, kMaxIo, 0, UINT32_MAX, 1};
  uint8_t* smem = nullptr;
};

[[noreturn]] void failure(const char* what) {
  fprintf(stderr, "fuzz_blockd_server: %s\n", what);
  __builtin_trap();
}

void make_cores(Bed& b) {
  rdmx_core_opts o;
  rdmx_core_opts_init(&o);
  b.p.s.port = b.s;
  b.p.s.mem = b.smem;
  b.p.s.rx = b.smem + kVolBytes + kMsgBytes;  // slot 1's messages
  b.p.s.tx = b.p.s.rx + MAXQ * MSG;
  b.p.vol = b.smem + kBlocks * BLK;
  b.p.md = nullptr;
  snprintf(b.p.name, sizeof b.p.name, "attacker");
  if (rdmx_core_create(b.s, &o, &b.p.s.core) < 0 || rdmx_core_create(b.a, &o, &b.atk.core) < 0 ||
      rdmx_core_connect_pair(b.p.s.core, b.atk.core) < 0)
    failure(rdmx_last_error());
  if (blockd_peer_start(&b.cfg, &b.p) < 0) failure("the server could not start its client");
  for (uint32_t t = 0; t <= kQd; ++t)
    if (blockd_post_recv(&b.atk, t) < 0) failure("attacker receives");
  rdmx_flush(b.atk.core);
}

Bed& bed() {
  static Bed* b = [] {
    auto* x = new Bed;
    rdmx_port_opts os, oa;
    rdmx_port_opts_init(&os);
    rdmx_port_opts_init(&oa);
    os.arena_bytes = kVolBytes + 2 * kMsgBytes;
    oa.arena_bytes = kMaxIo * BLK + kMsgBytes;
    os.max_cores = 2;
    oa.side = 1;
    if (rdmx_port_open_pair("emu-inline", &os, &oa, &x->s, &x->a) < 0) failure(rdmx_last_error());
    x->smem = static_cast<uint8_t*>(rdmx_port_arena(x->s));
    x->atk.port = x->a;
    x->atk.mem = static_cast<uint8_t*>(rdmx_port_arena(x->a));
    x->atk.rx = x->atk.mem + kMaxIo * BLK;
    x->atk.tx = x->atk.rx + MAXQ * MSG;
    std::memset(x->smem, kVictim, kBlocks * BLK);
    std::memset(x->smem + kBlocks * BLK, kMine, kBlocks * BLK);
    std::memset(x->atk.mem, kMine, kMaxIo * BLK);
    make_cores(*x);
    return x;
  }();
  return *b;
}

bool all(const uint8_t* p, uint64_t n, uint8_t v) {
  for (uint64_t i = 0; i < n; ++i)
    if (p[i] != v) return false;
  return true;
}

// The model's invariants.
void check(const Bed& b) {
  if (!all(b.smem, kBlocks * BLK, kVictim)) failure("the victim's blocks changed");
  if (!all(b.smem + kBlocks * BLK, kBlocks * BLK, kMine))
    failure("the attacker's part holds bytes it never wrote");
  if (!all(b.smem + kVolBytes, kMsgBytes, 0)) failure("the victim's message slots changed");
  if (!all(b.atk.mem, kMaxIo * BLK, kMine)) failure("the attacker saw bytes that are not its own");
}

// Attacker and server take turns until nothing moves.
void exchange(Bed& b) {
  rdmx_completion wc[16];
  for (int round = 0; round < 16; ++round) {
    int moved = blockd_serve(&b.cfg, &b.p);
    const int n = rdmx_poll(b.atk.core, wc, 16);
    for (int i = 0; i < n; ++i) {
      if (!(wc[i].flags & RDMX_WC_RECV) || wc[i].status) continue;
      blockd_post_recv(&b.atk, static_cast<uint32_t>(wc[i].cookie));
    }
    if (n > 0) rdmx_flush(b.atk.core);
    if (!moved && n <= 0) return;
  }
}

// One request record of the input: 24 bytes.
struct Record {
  uint8_t op, tag, flags, pad;
  uint32_t nblk;
  uint64_t lba, len;
};

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  Bed& b = bed();
  if (b.p.state != PEER_RUNNING || rdmx_core_in_error(b.atk.core)) {  // the last input's end
    rdmx_core_destroy(b.atk.core);
    if (b.p.state == PEER_RUNNING || b.p.state == PEER_STOPPED) blockd_drop(&b.cfg, &b.p, "reset");
    rdmx_core_destroy(b.p.s.core);  // a client served to its STOP keeps its core (NULL: no-op)
    b.p.s.core = nullptr;
    b.p.state = PEER_FREE;
    make_cores(b);
  }
  for (size_t off = 0; off + sizeof(Record) <= size && off < 16 * sizeof(Record);
       off += sizeof(Record)) {
    Record r;
    std::memcpy(&r, data + off, sizeof r);
    rdmx_mapping m = {};
    const bool real = r.flags & 1;
    if (real &&
        rdmx_map_buf(b.atk.core, b.atk.mem, kMaxIo * BLK,
                     RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE | RDMX_ACCESS_REMOTE_READ,
                     &m) < 0)
      break;
    struct req q = {r.op,
                    r.flags & 2 ? kQd : r.tag % (r.flags & 4 ? 256u : kQd + 1),
                    r.nblk,
                    real ? m.rkey : static_cast<uint32_t>(r.len >> 32),
                    r.lba,
                    real ? m.iova : r.lba ^ r.len,
                    r.flags & 8 ? static_cast<uint64_t>(r.nblk) * BLK : r.len};
    const bool was_running = b.p.state == PEER_RUNNING;
    struct blockd_limits l = {kBlocks, kQd, kMaxIo, 0, b.p.busy};
    const char* why = "";
    const int verdict = blockd_check_request(&q, &l, &why);
    if (blockd_send(&b.atk, q.tag % MAXQ, &q, sizeof q, 0, 0) < 0) break;
    rdmx_flush(b.atk.core);
    exchange(b);
    if (real && rdmx_window_mapped(m.window) == 1) {
      rdmx_unmap(b.atk.core, m.window);
      rdmx_flush(b.atk.core);
      exchange(b);
    }
    check(b);
    if (was_running && verdict == BLOCKD_DROP && b.p.state != PEER_DROPPED)
      failure("a protocol violation did not drop the client");
    if (b.p.state != PEER_RUNNING || rdmx_core_in_error(b.atk.core)) break;
  }
  return 0;
}
