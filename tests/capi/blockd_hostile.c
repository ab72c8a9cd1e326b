/* A hostile blockd client (the twohost suite's blockd-hostile cases): it speaks blockd's protocol
 * (examples/blockd/blockd_proto.h) through the C API only and sends what a careless or malicious
 * client would, checking what the server does with it.
 *
 *   blockd_hostile MODE HOST:PORT DEVICE BLOCKS
 *
 * DEVICE is the client's (emu, or emu@roce:ADDR); BLOCKS the server's --blocks (the hello must
 * match it; the server runs --qd 8 --max-io 16 --metadata 0). MODE:
 *   junk-hello  the server's exact hello with junk after its NUL: refused ("no ..." answer)
 *   silent      a good hello, then nothing: the server closes the connection (within 20 s)
 *   bad-info    a good hello, then an application message where the connect info belongs: the
 *               server closes the connection
 *   ranges      every out-of-range request (a wrapped block number, blocks - 1 with 2 blocks,
 *               0 and max-io + 1 blocks, a wrong length, ...): each answered -RDMX_ERANGE, our
 *               window left mapped (the server does not use a refused request's rkey) and our
 *               buffer untouched; then a write and a read of our own first 16 blocks, served
 *               and verified; then we leave without a STOP
 *   bad-tag     a good write, then a request with tag 99: the server closes the connection
 *   forged-write  a good write, then an RDMA WRITE of our own into the server with a key it
 *               never gave out: our WRITE completes with a remote access error, the server's QP
 *               (the responder) goes to the error state with an async event (which blockd
 *               prints), and the server closes the connection
 *   bye-leave   a STOP with no receive posted for its reply, then we leave: the server's reply
 *               can never be taken (received nor ACKed: its SEND fails, RNR retries exceeded on
 *               emu), a QP error after our goodbye, which ends our session on the server rather
 *               than failing it; the server closes the connection
 * Prints one line "blockd_hostile MODE: ok ..." and exits 0; or "blockd_hostile MODE: FAIL ..."
 * and exits 1. */
#define _POSIX_C_SOURCE 200809L
#include <rdmx/rdmx.h>

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "blockd_server.h"

#define QD 8u
#define MAX_IO 16u

static const char* g_mode;
static struct side C;
static rdmx_conn* g_conn;
static uint64_t g_blocks;
static const char* g_server; /* HOST:PORT */

static void die(const char* fmt, ...) {
  va_list ap;
  printf("blockd_hostile %s: FAIL ", g_mode);
  va_start(ap, fmt);
  vprintf(fmt, ap);
  va_end(ap);
  printf("\n");
  exit(1);
}
static void try_rc(int rc, const char* what) {
  if (rc < 0) die("%s: %s (%s)", what, rdmx_strerror(rc), rdmx_last_error());
}
#define TRY(call) try_rc((call), #call)

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}

/* Sends `len` bytes of hello, returns the server's answer (NUL-terminated in ans[300]), or -1
 * when it closed the connection instead. */
static int say_hello(const void* hello, size_t len, char* ans) {
  int n;
  TRY(rdmx_connect_to(g_server, 0, NULL, &g_conn));
  TRY(rdmx_conn_send(g_conn, hello, len, 0, NULL));
  n = rdmx_conn_recv(g_conn, ans, 299, 0, NULL);
  if (n < 0) return -1;
  ans[n < 299 ? n : 299] = 0;
  return n;
}
/* Waits up to `seconds` for the server to close our connection. */
static int closed_within(double seconds) {
  const double end = now_s() + seconds;
  struct timespec ms = {0, 10000000};
  while (now_s() < end) {
    if (rdmx_conn_peer_gone(g_conn) == 1) return 1;
    nanosleep(&ms, NULL);
  }
  return 0;
}

/* Waits (5 s at most) for the reply to `tag`; returns its status, *inv = SEND_WITH_INV. */
static int32_t await_reply(uint32_t tag, int* inv) {
  const double end = now_s() + 5;
  rdmx_completion wc[16];
  while (now_s() < end) {
    int n = rdmx_poll(C.core, wc, 16), i;
    for (i = 0; i < n; ++i) {
      struct rsp r;
      const uint32_t slot = (uint32_t)wc[i].cookie;
      if (wc[i].status)
        die("%s failed: %s", rdmx_opcode_name(wc[i].opcode), rdmx_syndrome_name(wc[i].status));
      if (!(wc[i].flags & RDMX_WC_RECV)) continue;
      memcpy(&r, C.rx + slot * MSG, sizeof r);
      TRY(blockd_post_recv(&C, slot));
      rdmx_flush(C.core);
      if (r.tag != tag) die("a reply to tag %u where %u was asked", r.tag, tag);
      *inv = (wc[i].flags & RDMX_WC_INVALIDATED) != 0;
      return r.status;
    }
  }
  die("no reply to tag %u within 5 s", tag);
  return 0;
}
static int32_t request(uint32_t op, uint32_t tag, uint64_t lba, uint32_t nblk, uint64_t len,
                       const rdmx_mapping* m, int* inv) {
  struct req q = {op, tag, nblk, m->rkey, lba, m->iova, len};
  TRY(blockd_send(&C, tag, &q, sizeof q, 0, 0));
  rdmx_flush(C.core);
  return await_reply(tag, inv);
}

static uint8_t pattern(uint64_t i) {
  return (uint8_t)(i * 7 + (i >> 12) * 13 + 1);
}
/* A write of our first 16 blocks and a read back, both served. */
static void own_blocks(void) {
  rdmx_mapping m;
  int inv;
  uint64_t i;
  for (i = 0; i < MAX_IO * BLK; ++i) C.mem[i] = pattern(i);
  TRY(rdmx_map_buf(C.core, C.mem, MAX_IO * BLK, RDMX_ACCESS_REMOTE_READ, &m));
  if (request(OP_WRITE, 1, 0, MAX_IO, MAX_IO * BLK, &m, &inv) || !inv)
    die("a write of our own blocks was not served");
  memset(C.mem, 0, MAX_IO * BLK);
  TRY(rdmx_map_buf(C.core, C.mem, MAX_IO * BLK, RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE,
                   &m));
  if (request(OP_READ, 2, 0, MAX_IO, MAX_IO * BLK, &m, &inv) || !inv)
    die("a read of our own blocks was not served");
  for (i = 0; i < MAX_IO * BLK; ++i)
    if (C.mem[i] != pattern(i))
      die("our own blocks read back wrong at byte %llu", (unsigned long long)i);
}

/* Every request outside our part of the volume: refused, nothing moved. */
static unsigned out_of_range(void) {
  const struct {
    uint32_t op;
    uint64_t lba;
    uint32_t nblk;
    uint64_t len;
  } bad[] = {
      {OP_READ, UINT64_MAX - 15, 16, 16 * BLK},     /* wraps onto the part before ours */
      {OP_WRITE, UINT64_MAX - 15, 16, 16 * BLK},    /* and overwrites it */
      {OP_READ, g_blocks - 1, 2, 2 * BLK},          /* one block past the end */
      {OP_READ, g_blocks, 1, BLK},                  /* just past the end */
      {OP_READ, UINT64_MAX, 1, BLK},                /* the largest block number */
      {OP_WRITE, (uint64_t)1 << 52, 16, 16 * BLK},  /* lba x 4096 wraps to 0 */
      {OP_READ, 0, 0, 0},                           /* no blocks */
      {OP_READ, 0, MAX_IO + 1, (MAX_IO + 1) * BLK}, /* more than --max-io */
      {OP_READ, 0, UINT32_MAX, 0},                  /* nblk x 4096 wraps in 32 bits */
      {OP_READ, 0, 1, BLK + 1},                     /* a length that is not its blocks' */
      {OP_READ, 0, 1, UINT64_MAX},
  };
  rdmx_mapping m;
  unsigned i, k;
  int inv;
  memset(C.mem, 0xEE, MAX_IO * BLK);
  TRY(rdmx_map_buf(C.core, C.mem, MAX_IO * BLK,
                   RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE | RDMX_ACCESS_REMOTE_READ,
                   &m));
  for (i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
    const int32_t st = request(bad[i].op, 3, bad[i].lba, bad[i].nblk, bad[i].len, &m, &inv);
    if (st != -RDMX_ERANGE || inv)
      die("request %u (op %u, lba %llu, %u blocks, %llu bytes): status %d%s, not a refusal", i,
          bad[i].op, (unsigned long long)bad[i].lba, bad[i].nblk, (unsigned long long)bad[i].len,
          st, inv ? " with our window invalidated" : "");
    for (k = 0; k < MAX_IO * BLK; ++k)
      if (C.mem[k] != 0xEE) die("request %u was refused but wrote into our window", i);
  }
  if (rdmx_window_mapped(m.window) != 1) die("a refused request's rkey was used");
  TRY(rdmx_unmap(C.core, m.window));
  rdmx_flush(C.core);
  return i;
}

/* Port, core, connection to the server, receives posted (recvs: not), ready. */
static void connect_client_recvs(const char* device, int recvs) {
  char hello[160], ans[300];
  rdmx_port_opts o;
  rdmx_core_opts co;
  snprintf(hello, sizeof hello, "blockd qd %u max-io %u metadata 0 blocks %llu", QD, MAX_IO,
           (unsigned long long)g_blocks);
  if (say_hello(hello, strlen(hello) + 1, ans) < 0 || strncmp(ans, "ok ", 3))
    die("the server did not take a good hello");
  rdmx_port_opts_init(&o);
  o.arena_bytes = MAX_IO * BLK + 2 * MAXQ * MSG;
  o.wire = strcmp(ans + 3, "-") ? ans + 3 : NULL;
  o.side = 1;
  TRY(rdmx_port_open(device, &o, &C.port));
  rdmx_core_opts_init(&co);
  C.mem = rdmx_port_arena(C.port);
  C.rx = C.mem + MAX_IO * BLK;
  C.tx = C.rx + MAXQ * MSG;
  TRY(rdmx_core_create(C.port, &co, &C.core));
  TRY(rdmx_conn_exchange(g_conn, &C.core, 1, 0, NULL));
  for (uint32_t t = 0; recvs && t <= QD; ++t) TRY(blockd_post_recv(&C, t));
  rdmx_flush(C.core);
  TRY(rdmx_conn_ready(g_conn, 0, NULL));
}
static void connect_client(const char* device) {
  connect_client_recvs(device, 1);
}

int main(int argc, char** argv) {
  char hello[160], ans[300];
  if (argc != 5) {
    fprintf(stderr, "usage: blockd_hostile MODE HOST:PORT DEVICE BLOCKS\n");
    return 2;
  }
  g_mode = argv[1];
  g_server = argv[2];
  g_blocks = strtoull(argv[4], NULL, 0);
  snprintf(hello, sizeof hello, "blockd qd %u max-io %u metadata 0 blocks %llu", QD, MAX_IO,
           (unsigned long long)g_blocks);
  if (!strcmp(g_mode, "junk-hello")) {
    const size_t n = strlen(hello) + 1;
    memcpy(hello + n, "junk", 5); /* the hello, its NUL, then more */
    if (say_hello(hello, n + 5, ans) >= 0 && !strncmp(ans, "ok ", 3))
      die("a hello with junk after its NUL was taken");
    printf("blockd_hostile %s: ok, refused\n", g_mode);
  } else if (!strcmp(g_mode, "silent") || !strcmp(g_mode, "bad-info")) {
    if (say_hello(hello, strlen(hello) + 1, ans) < 0 || strncmp(ans, "ok ", 3))
      die("the server did not take a good hello");
    if (!strcmp(g_mode, "bad-info")) TRY(rdmx_conn_send(g_conn, "not a connect info", 19, 0, NULL));
    const double t0 = now_s();
    if (!closed_within(20)) die("the server kept the connection for 20 s");
    printf("blockd_hostile %s: ok, closed by the server after %.1f s\n", g_mode, now_s() - t0);
  } else if (!strcmp(g_mode, "ranges")) {
    connect_client(argv[3]);
    const unsigned n = out_of_range();
    own_blocks();
    printf(
        "blockd_hostile %s: ok, %u out-of-range requests refused, nothing moved; own blocks "
        "served\n",
        g_mode, n);
  } else if (!strcmp(g_mode, "bad-tag")) {
    rdmx_mapping m;
    connect_client(argv[3]);
    own_blocks();
    TRY(rdmx_map_buf(C.core, C.mem, BLK, RDMX_ACCESS_REMOTE_READ, &m));
    struct req q = {OP_WRITE, 99, 1, m.rkey, 0, m.iova, BLK};
    TRY(blockd_send(&C, 3, &q, sizeof q, 0, 0));
    rdmx_flush(C.core);
    if (!closed_within(10)) die("a request with tag 99 did not end our connection");
    printf("blockd_hostile %s: ok, dropped\n", g_mode);
  } else if (!strcmp(g_mode, "forged-write")) {
    rdmx_completion wc;
    rdmx_sge sge;
    const double end = now_s() + 5;
    int n = 0;
    connect_client(argv[3]);
    own_blocks();
    sge.addr = (uint64_t)(uintptr_t)C.mem, sge.length = BLK, sge.lkey = rdmx_core_lkey(C.core);
    TRY(rdmx_post_write(C.core, &sge, 1, 0x10000, 0x00c0de00u, 7, RDMX_POST_SIGNALED));
    rdmx_flush(C.core);
    while (now_s() < end && (n = rdmx_poll(C.core, &wc, 1)) == 0) {
    }
    TRY(n);
    if (n != 1 || wc.cookie != 7 || strcmp(rdmx_syndrome_name(wc.status), "remote-access"))
      die("the forged WRITE did not fail with a remote access error (%s, cookie %llu, %s)",
          n == 1 ? rdmx_syndrome_name(wc.status) : "none within 5 s", (unsigned long long)wc.cookie,
          rdmx_opcode_name(wc.opcode));
    if (!closed_within(10)) die("the server kept our connection after its QP failed");
    printf("blockd_hostile %s: ok, refused with %s, dropped\n", g_mode,
           rdmx_syndrome_name(wc.status));
  } else if (!strcmp(g_mode, "bye-leave")) {
    struct req q = {OP_STOP, QD, 0, 0, 0, 0, 0};
    rdmx_sge sge;
    rdmx_completion wc;
    const double end = now_s() + 5;
    int n = 0;
    connect_client_recvs(argv[3], 0);
    memcpy(C.tx, &q, sizeof q);
    sge = blockd_sge(&C, C.tx, sizeof q);
    TRY(rdmx_post_send(C.core, &sge, 1, 9, RDMX_POST_SIGNALED));
    rdmx_flush(C.core);
    while (now_s() < end && (n = rdmx_poll(C.core, &wc, 1)) == 0) {
    }
    TRY(n);
    if (n != 1 || wc.status) die("our STOP was not delivered");
    if (!closed_within(10)) die("the server kept our connection after its reply failed");
    printf("blockd_hostile %s: ok, STOP delivered, its reply left untaken\n", g_mode);
  } else {
    fprintf(stderr, "blockd_hostile: unknown mode '%s'\n", g_mode);
    return 2;
  }
  rdmx_conn_close(g_conn);
  rdmx_port_close(C.port);
  return 0;
}
