/* blockd: a tiny block service over the rdmx C API (rdmx.h only), the NVMe-oF pattern.
 *
 * The server holds a volume of 4 KiB blocks in memory. Per request the client maps its buffer's
 * chunk pages into a window and SENDs (op, blocks, rkey, iova, len); the server moves the data
 * with RDMA WRITE (client reads) or RDMA READ (client writes) through that rkey and replies with
 * SEND_WITH_INV, which frees the client's window on receipt: the client never unmaps.
 *
 *   blockd                                   both sides in one process (two emu ports)
 *   blockd --wire shm:NAME --role server     two processes over a shared-memory wire
 *   blockd --wire shm:NAME --role client     (same --blocks/--qd/--max-io on both sides)
 *   blockd --role server --listen [ADDR:]PORT   two processes (or hosts) meeting over TCP
 *   blockd --role client --peer HOST[:PORT]     (rdmx_listen/rdmx_connect_to; over emu the
 *                                               server names its shm wire to the client)
 * Options: --device emu|emu-threaded|emu@roce:ADDR|mlx5_0  --blocks N  --requests N  --qd N
 * --max-io BLOCKS; server: --clients N (serve N clients at once, each on its own core and its
 * own part of the volume; needs a device on a network: emu@roce:ADDR or mlx5), --isolate peer
 * (each client's core in a protection domain of its own: rdmx_core_opts.isolate),
 * --metadata BYTES (4..128, both sides alike: every block carries BYTES of metadata kept in an
 * array of its own, as protection information is; the client maps data and metadata into one
 * interleaved window, rdmx_map_interleaved, the server moves both through that one rkey into
 * its own interleaved window over its volume and metadata arrays; the server checks each
 * written block's reference tag (its first 4 metadata bytes = its block number), the client
 * checks data and metadata it reads back),
 * --max-refusals N (server: a client whose out-of-range requests exceed N is dropped; default 16),
 * --cm (with --listen/--peer, mlx5 only: the queue pairs are connected through rdma_cm,
 * rdmx_conn_opts.cm; the hello and the ready step stay on the TCP connection).
 * Both sides print one line per asynchronous event of their device (rdmx_poll_events, read on
 * the control path: "blockd: server: async event qp-access-err on QP 0x1c (client 1, ADDR)").
 * (getopt_long: --qd 8 or --qd=8; a bad argument is one line, "blockd: error: ...", and a
 * pointer to --help).
 *
 * A server never trusts what a client sends (blockd_proto.h checks every request in one place):
 * a request outside the client's part of the volume is refused (-RDMX_ERANGE in the reply,
 * nothing moved); a protocol violation (a bad tag or operation), a failed RDMA through the
 * client's rkey, a client that goes away before its STOP, or more than --max-refusals refusals
 * drop that client alone, with one line; the TCP server then waits for the next client in that
 * slot and ends once --clients clients were served to their STOP. A client refused during its
 * rendezvous (other sizes, a hello that is not exactly the server's, another link: a device on
 * shared memory against one on a network, silence, bad connect info) takes no slot.
 * Exit: 0 ok, 1 data or protocol error (also: no peer in time, the peer went away, a server
 * without TCP whose one client was dropped), 2 usage (also: the client's --qd/--max-io/
 * --metadata/--blocks or its link, emu or emu@roce/mlx5, differ from the server's), 3 no device,
 * 130 Ctrl-C. */
#define _POSIX_C_SOURCE 200809L
#include <rdmx/rdmx.h>

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "blockd_server.h"

static uint64_t g_blocks = 1024, g_requests = 20000, g_max_io = 16;
static uint32_t g_qd = 8;
static uint32_t g_md;                /* --metadata: bytes of metadata per block (0: none) */
static uint64_t g_max_refusals = 16; /* --max-refusals */

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}
static volatile sig_atomic_t g_stop; /* SIGINT/SIGTERM: ends a rendezvous wait, or the run */
static void on_signal(int sig) {
  (void)sig;
  g_stop = 1;
}
static void close_all(void);
/* Exits when rc < 0: with rdmx's message, or with `why`. Exit 3 when there is no such device,
 * 130 when a wait was interrupted. */
static void check(int rc, const char* what, const char* why) {
  if (rc >= 0) return;
  close_all(); /* the shm wire and sockets go with their handles */
  if (g_stop) {
    fprintf(stderr, "blockd: interrupted while waiting for the peer\n");
    exit(130);
  }
  if (*rdmx_last_error())
    fprintf(stderr, "blockd: %s: %s (%s)\n", what, why ? why : rdmx_strerror(rc),
            rdmx_last_error());
  else
    fprintf(stderr, "blockd: %s: %s\n", what, why ? why : rdmx_strerror(rc));
  exit(rc == -RDMX_ENODEV ? 3 : 1);
}
/* A device that does not open: the user's --device and rdmx's reason, without the C API call
 * (exit 3 when the name names no device). */
static void check_open(int rc, const char* device) {
  if (rc >= 0 || g_stop) {
    check(rc, "opening the device", NULL);
    return;
  }
  const char* why = *rdmx_last_error() ? rdmx_last_error() : rdmx_strerror(rc);
  if (!strncmp(why, "rdmx_", 5) && strstr(why, ": ")) why = strstr(why, ": ") + 2;
  fprintf(stderr, "blockd: --device %s: %s\n", device, why);
  close_all();
  exit(rc == -RDMX_ENODEV ? 3 : 1);
}
/* The rendezvous: an address that does not parse or resolve is a usage error (exit 2). */
static void check_rdv(int rc, const char* what) {
  if (rc == -RDMX_EINVAL && !g_stop) {
    fprintf(stderr, "blockd: %s\n", rdmx_last_error());
    close_all();
    exit(2);
  }
  check(rc, what, NULL);
}
#define TRY_RDV(call) check_rdv((call), #call)
#define TRY(call) check((call), #call, NULL)
#define fatal(who, why) check(-1, (who), (why))

static int poll_ok(struct side* s, rdmx_completion* wc) {
  int n = rdmx_poll(s->core, wc, 16), i;
  for (i = 0; i < n; ++i)
    if (wc[i].status) fatal(rdmx_opcode_name(wc[i].opcode), rdmx_syndrome_name(wc[i].status));
  return n;
}

/* ---- Server: blockd_server.c serves each client; here its slots are filled and watched ------ */
#define MAXC 8u /* clients one server serves at once */
static struct peer g_peer[MAXC];
static struct blockd_server_cfg g_cfg;
static uint32_t g_clients = 1, g_dropped;
static int g_isolate; /* --isolate peer */
static int g_cm;      /* --cm: the queue pairs meet through rdma_cm */
/* The QP number of each slot's last client: an async event may be read after its client was
 * dropped and its core destroyed (report_events still names the client). */
static uint32_t g_qpn[MAXC];
static rdmx_port* g_sport;

/* ---- Client -------------------------------------------------------------------------------- */
static struct side C;
static struct slot {
  int busy;
  uint32_t op, nblk, rkey;
  uint64_t lba, issued;
  double t0;
  rdmx_window* w;
} g_slot[MAXQ];
static uint32_t* g_gen; /* per block: how many times the client wrote it */
static double* g_lat;
static uint64_t g_done, g_bytes, g_md_bytes;
static int g_cli_state; /* 1: STOP sent, 2: its reply arrived */

static uint8_t pattern(uint64_t lba, uint32_t gen, uint32_t i) {
  return (uint8_t)(lba * 131 + gen * 31 + i * 7 + (i >> 8));
}
#define buf_of(t) (C.mem + (uint64_t)(t)*g_max_io * BLK) /* slot t's I/O buffer */
/* --metadata: slot t's metadata buffer, after all the I/O buffers */
#define md_of(t) (C.mem + (uint64_t)g_qd * g_max_io * BLK + (uint64_t)(t)*g_max_io * g_md)
/* Metadata byte i of block lba at generation gen: the reference tag, then a pattern. */
static uint8_t md_byte(uint64_t lba, uint32_t gen, uint32_t i) {
  return i < 4 ? (uint8_t)((uint32_t)lba >> (8 * i)) : pattern(lba, gen, BLK + i);
}

/* Slot t owns one part of the volume: it fills it, does random reads and writes, then reads it
 * all back. Returns 0 when the slot is done. */
static int issue(uint32_t t) {
  struct slot* s = &g_slot[t];
  const uint64_t part = g_blocks / g_qd, fill = (part + g_max_io - 1) / g_max_io;
  const uint64_t rnd = g_requests / g_qd, k = s->issued++;
  const int seq = k < fill || k >= fill + rnd;
  uint64_t off = k < fill ? k * g_max_io : (k - fill - rnd) * g_max_io;
  uint32_t b, i;
  rdmx_mapping m;
  if (k >= 2 * fill + rnd) return 0;
  s->op = k < fill ? OP_WRITE : !seq && rand() % 2 ? OP_WRITE : OP_READ;
  s->nblk = seq ? (uint32_t)g_max_io : 1 + (uint32_t)((uint64_t)rand() % g_max_io);
  if (!seq) off = (uint64_t)rand() % part;
  if (off + s->nblk > part) s->nblk = (uint32_t)(part - off);
  s->lba = t * part + off;
  for (b = 0; s->op == OP_WRITE && b < s->nblk; ++b) {
    for (i = 0; i < BLK; ++i)
      buf_of(t)[b * BLK + i] = pattern(s->lba + b, g_gen[s->lba + b] + 1, i);
    for (i = 0; i < g_md; ++i)
      md_of(t)[b * g_md + i] = md_byte(s->lba + b, g_gen[s->lba + b] + 1, i);
  }
  s->t0 = now_us();
  /* The server WRITEs into the window for a read and READs it for a write: grant only that. */
  const uint32_t acc = s->op == OP_READ ? RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE
                                        : RDMX_ACCESS_REMOTE_READ;
  if (g_md) { /* block b of the window: its 4 KiB, then its metadata */
    rdmx_interleaved_part parts[2] = {{(uint64_t)(uintptr_t)buf_of(t), BLK, 0},
                                      {(uint64_t)(uintptr_t)md_of(t), g_md, 0}};
    TRY(rdmx_map_interleaved(C.core, parts, 2, s->nblk, acc, &m));
  } else {
    TRY(rdmx_map_buf(C.core, buf_of(t), (uint64_t)s->nblk * BLK, acc, &m));
  }
  struct req q = {s->op, t, s->nblk, m.rkey, s->lba, m.iova, m.length};
  TRY(blockd_send(&C, t, &q, sizeof q, 0, 0)); /* after the map on this queue: valid on arrival */
  s->rkey = m.rkey;
  s->w = m.window;
  return 1;
}

static void complete(const rdmx_completion* wc, const struct rsp* r) {
  struct slot* s = &g_slot[r->tag];
  uint32_t b, i;
  if (r->status || !s->busy) fatal("client", "request failed");
  /* The reply was a SEND_WITH_INV of our rkey: the window is already free, nothing to unmap. */
  if (!(wc->flags & RDMX_WC_INVALIDATED) || wc->imm != s->rkey || rdmx_window_mapped(s->w))
    fatal("client", "the reply did not free the window");
  for (b = 0; b < s->nblk; ++b) {
    const uint64_t lba = s->lba + b;
    if (s->op == OP_WRITE) ++g_gen[lba];
    for (i = 0; s->op == OP_READ && i < BLK; ++i)
      if (buf_of(r->tag)[b * BLK + i] != pattern(lba, g_gen[lba], i))
        fatal("client", "a read returned wrong data");
    for (i = 0; s->op == OP_READ && i < g_md; ++i)
      if (md_of(r->tag)[b * g_md + i] != md_byte(lba, g_gen[lba], i))
        fatal("client", "a read returned wrong metadata");
  }
  g_lat[g_done++] = now_us() - s->t0;
  g_bytes += (uint64_t)s->nblk * BLK;
  g_md_bytes += (uint64_t)s->nblk * g_md;
  s->busy = 0;
}

static void client_step(void) {
  rdmx_completion wc[16];
  int n = poll_ok(&C, wc), i, busy = 0;
  for (i = 0; i < n; ++i) {
    const uint32_t slot = (uint32_t)wc[i].cookie;
    struct rsp r;
    if (!(wc[i].flags & RDMX_WC_RECV)) continue;
    /* Replies fill the receives in arrival order: the tag names the request. */
    memcpy(&r, C.rx + slot * MSG, sizeof r);
    TRY(blockd_post_recv(&C, slot));
    if (r.tag > g_qd) fatal("client", "bad tag");
    if (r.tag < g_qd) complete(&wc[i], &r);
    if (r.tag == g_qd) g_cli_state = 2;
  }
  for (uint32_t t = 0; t < g_qd; ++t) {
    if (!g_slot[t].busy) g_slot[t].busy = issue(t);
    busy |= g_slot[t].busy;
  }
  if (!busy && !g_cli_state) { /* all done: stop the server */
    struct req q = {OP_STOP, g_qd, 0, 0, 0, 0, 0};
    TRY(blockd_send(&C, g_qd, &q, sizeof q, 0, 0));
    g_cli_state = 1;
  }
  rdmx_flush(C.core);
}

/* ---- Setup ---------------------------------------------------------------------------------- */
/* Two processes: write ours to /dev/shm/blockd-NAME.MINE, read theirs from .THEIRS. */
static void rendezvous(const char* name, const char* mine, const char* theirs, const void* data,
                       void* peer, size_t len) {
  char path[256], tmp[300];
  struct timespec ms = {0, 1000000};
  FILE* f;
  int i;
  snprintf(path, sizeof path, "/dev/shm/blockd-%s.%s", name, mine);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (!(f = fopen(tmp, "wb")) || fwrite(data, len, 1, f) != 1 || fclose(f) || rename(tmp, path))
    fatal(path, "cannot write");
  snprintf(path, sizeof path, "/dev/shm/blockd-%s.%s", name, theirs);
  for (i = 0; i < 10000 && !(f = fopen(path, "rb")); ++i) nanosleep(&ms, NULL);
  if (!f || fread(peer, len, 1, f) != 1) fatal(path, "the peer did not answer");
  fclose(f);
  remove(path);
}

/* A core on `port` with message slots set k after the data (the server: one set per client). */
static void setup(struct side* s, rdmx_port* port, uint64_t data_bytes, uint32_t k, int isolate) {
  rdmx_core_opts o;
  rdmx_core_opts_init(&o);
  o.isolate = isolate;
  o.own_windows = 2 * MAXQ; /* isolated: every request in flight may hold one (--metadata) */
  s->port = port;
  s->mem = rdmx_port_arena(port);
  s->rx = s->mem + data_bytes + (uint64_t)k * 2 * MAXQ * MSG;
  s->tx = s->rx + MAXQ * MSG;
  TRY(rdmx_core_create(port, &o, &s->core));
}

/* The server's core for client slot k, and that slot's part of the volume and metadata. */
static void setup_peer(uint32_t k) {
  struct peer* P = &g_peer[k];
  setup(&P->s, g_sport, g_clients * g_blocks * (BLK + g_md), k, g_isolate);
  P->vol = P->s.mem + (uint64_t)k * g_blocks * BLK;
  P->md = P->s.mem + (uint64_t)g_clients * g_blocks * BLK + (uint64_t)k * g_blocks * g_md;
  g_qpn[k] = rdmx_core_qpn(P->s.core);
}

/* Two processes over TCP (rdmx_listen/rdmx_connect_to): the client says its sizes, the server
 * answers "ok WIRE" (its shm wire, "-" on a NIC) or "no REASON". */
static rdmx_listener* g_lis;
static rdmx_conn* g_conn;
static char g_wire[300];
static void close_all(void) {
  uint32_t k;
  rdmx_conn_close(g_conn);
  for (k = 0; k < MAXC; ++k) rdmx_conn_close(g_peer[k].conn), g_peer[k].conn = NULL;
  rdmx_listener_close(g_lis);
  g_conn = NULL, g_lis = NULL;
  rdmx_port_close(g_sport);
  rdmx_port_close(C.port);
  g_sport = C.port = NULL;
}
static void sizes_text(char* out, size_t n) {
  snprintf(out, n, "blockd qd %u max-io %llu metadata %u blocks %llu", g_qd,
           (unsigned long long)g_max_io, g_md, (unsigned long long)g_blocks);
}
static void waiting_line(uint32_t k) {
  if (g_clients > 1)
    printf("blockd: server: waiting for client %u of %u on %s (up to 120 s), Ctrl-C to stop\n",
           k + 1, g_clients, rdmx_listener_address(g_lis));
  else
    printf("blockd: server: waiting for a client on %s (up to 120 s), Ctrl-C to stop\n",
           rdmx_listener_address(g_lis));
  fflush(stdout);
}
/* ---- TCP server: the door. Clients are admitted in the run loop, never waiting on one: -------
 * rdmx_accept_hello holds every connection whose hello has not come (10 s each, 64 at most),
 * and a joining client's exchange and ready are taken a step at a time (10 s each). A client
 * that is slow, silent, foreign or has other sizes is one line and takes no slot. */
/* A joining client refused: one line, its core and connection gone, its slot free again. */
static void refuse_join(struct peer* P, const char* why) {
  fprintf(stderr, "blockd: server: client %s not served: %s\n", P->name, why);
  rdmx_core_destroy(P->s.core);
  rdmx_conn_close(P->conn);
  P->s.core = NULL;
  P->conn = NULL;
  P->state = PEER_FREE;
}
/* A new client's hello (n bytes): exactly our sizes and their NUL, nothing after? Then it takes
 * slot k, its core is created and the exchange starts; otherwise it is answered "no ...". */
static void take_hello(uint32_t k, rdmx_conn* conn, const char* got, size_t n) {
  struct peer* P = &g_peer[k];
  char want[128], ok[310];
  sizes_text(want, sizeof want);
  snprintf(P->name, sizeof P->name, "%s", rdmx_conn_peer(conn));
  if (n != strlen(want) + 1 || memcmp(got, want, n)) {
    char no[300];
    snprintf(no, sizeof no,
             "no this server runs \"%s\": give the client the same "
             "--qd/--max-io/--metadata/--blocks",
             want);
    rdmx_conn_send(conn, no, strlen(no) + 1, 1000, &g_stop);
    fprintf(stderr,
            "blockd: server: client %s not served: its hello is not this server's sizes "
            "(--qd/--max-io/--metadata/--blocks)\n",
            P->name);
    rdmx_conn_close(conn);
    return;
  }
  snprintf(ok, sizeof ok, "ok %s", g_wire[0] ? g_wire : "-");
  if (rdmx_conn_send(conn, ok, strlen(ok) + 1, 1000, &g_stop) < 0) {
    fprintf(stderr, "blockd: server: client %s not served: %s\n", P->name, rdmx_last_error());
    rdmx_conn_close(conn);
    return;
  }
  setup_peer(k);
  P->conn = conn;
  P->state = PEER_JOINING;
}
static uint32_t slots_in(int state) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < g_clients; ++k) n += g_peer[k].state == state;
  return n;
}
/* Clients joining or served now (not a free slot, one served to its end or one dropped). */
static uint32_t clients_here(void) {
  uint32_t n = 0;
  for (uint32_t k = 0; k < g_clients; ++k)
    n += g_peer[k].state >= PEER_JOINING && g_peer[k].state <= PEER_STOPPED;
  return n;
}
/* Moves the joining clients a step and takes new hellos while a slot is free. */
static void door_step(void) {
  char got[128];
  size_t len;
  rdmx_conn* conn;
  int rc;
  for (uint32_t k = 0; k < g_clients; ++k) {
    struct peer* P = &g_peer[k];
    if (P->state == PEER_JOINING) {
      rc = rdmx_conn_try_exchange(P->conn, &P->s.core, 1, 0);
      if (rc < 0) refuse_join(P, rdmx_last_error());
      if (rc == 1 && blockd_peer_start(&g_cfg, P) >= 0) P->state = PEER_READYING;
    } else if (P->state == PEER_READYING && (rc = rdmx_conn_try_ready(P->conn, 0)) != 0) {
      if (rc < 0) blockd_drop(&g_cfg, P, rdmx_last_error());
      if (rc == 1) P->state = PEER_RUNNING;
      if (rc == 1 && slots_in(PEER_FREE)) waiting_line(g_clients - slots_in(PEER_FREE));
    }
  }
  for (;;) { /* the first free slot takes the next hello */
    uint32_t k = 0;
    while (k < g_clients && g_peer[k].state != PEER_FREE) ++k;
    if (k == g_clients || !(rc = rdmx_accept_hello(g_lis, 0, got, sizeof got, &len, &conn))) break;
    if (rc == -RDMX_EDEVICE) check(rc, "rdmx_accept_hello", NULL);
    if (rc < 0)
      fprintf(stderr, "blockd: server: client not served: %s\n", rdmx_last_error());
    else
      take_hello(k, conn, got, len);
  }
}

/* Client: reaches the server and learns its wire (before any port exists here). */
static const char* tcp_connect(const char* peer) {
  char hello[128], ans[300];
  int n;
  printf("blockd: client: connecting to %s (up to 30 s), Ctrl-C to stop\n", peer);
  fflush(stdout);
  rdmx_conn_opts co;
  rdmx_conn_opts_init(&co);
  co.cm = g_cm;
  TRY_RDV(rdmx_connect_to_opts(peer, 0, &g_stop, &co, &g_conn));
  sizes_text(hello, sizeof hello);
  TRY(rdmx_conn_send(g_conn, hello, strlen(hello) + 1, 0, &g_stop));
  TRY(n = rdmx_conn_recv(g_conn, ans, sizeof ans - 1, 0, &g_stop));
  ans[n < (int)sizeof ans ? n : (int)sizeof ans - 1] = 0;
  if (strncmp(ans, "ok ", 3)) {
    fprintf(stderr, "blockd: refused by %s: %s\n", rdmx_conn_peer(g_conn),
            strncmp(ans, "no ", 3) ? "(no reason)" : ans + 3);
    close_all();
    exit(2);
  }
  memcpy(g_wire, ans + 3, strlen(ans + 3) + 1); /* ans holds < 300 bytes */
  return strcmp(g_wire, "-") ? g_wire : NULL;
}

/* Client: one receive per request slot, one for the STOP; flushed. */
static void post_recvs(struct side* s) {
  for (uint32_t t = 0; t <= g_qd; ++t) TRY(blockd_post_recv(s, t));
  rdmx_flush(s->core);
}
static int server_done(void) {
  for (uint32_t k = 0; k < g_clients; ++k)
    if (g_peer[k].state != PEER_DONE) return 0;
  return 1;
}
/* Server, now and then while serving: a client that went away before its STOP is dropped; a
 * dropped client's slot is free for the next (door_step). Without TCP there is no next client: a
 * dropped one ends the server (exit 1). */
static void watch_clients(int tcp) {
  for (uint32_t k = 0; k < g_clients; ++k) {
    struct peer* P = &g_peer[k];
    if (P->state == PEER_RUNNING && P->conn && rdmx_conn_peer_gone(P->conn) == 1)
      blockd_drop(&g_cfg, P, "it went away before its STOP");
    if (P->state != PEER_DROPPED) continue;
    if (!tcp) {
      close_all();
      exit(1);
    }
    ++g_dropped;
    P->state = PEER_FREE;
    printf("blockd: server: slot %u waits for the next client\n", k + 1);
    fflush(stdout);
  }
}

/* The control path's look at the devices' asynchronous events (rdmx_poll_events never waits):
 * one line per event, naming the QP's owner. A QP in error after such an event shows up on the
 * data path too (its work completes in error), where the client or the server acts on it. */
static void report_events(rdmx_port* port, const char* who) {
  rdmx_event ev[16];
  int n, i;
  uint32_t k;
  if (!port) return;
  while ((n = rdmx_poll_events(port, ev, 16)) > 0) {
    for (i = 0; i < n; ++i) {
      char owner[160] = "";
      for (k = 0; port == g_sport && k < g_clients; ++k)
        if (g_qpn[k] && g_qpn[k] == ev[i].qpn)
          snprintf(owner, sizeof owner, " (client %u, %s)", k + 1, g_peer[k].name);
      if (port == C.port && C.core && rdmx_core_qpn(C.core) == ev[i].qpn)
        snprintf(owner, sizeof owner, " (the client's core)");
      printf("blockd: %s: async event %s on QP %#x%s\n", who, rdmx_event_name(ev[i].kind),
             ev[i].qpn, owner);
    }
    fflush(stdout);
    if (n < 16) break;
  }
}

/* "@roce:ADDR" of a device on a RoCE wire ("emu@roce:ADDR"), "" otherwise: rdmx_port_info's
 * backend names the mode only. */
static const char* on_wire(const char* device) {
  const char* at = strchr(device, '@');
  return at ? at : "";
}

static int cmp(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* The command line, by the convention of every rdmx tool: getopt_long (`--qd 8` and `--qd=8`
 * alike); a bad argument is one line on stderr, "blockd: error: ...", then a pointer to
 * `blockd --help` (never the whole usage), and exit status 2. */
struct args {
  const char *device, *wire, *role, *listen_at, *peer, *isolate;
  int cm;
};
static const char kUsage[] =
    "usage: blockd [--role server --listen [ADDR:]PORT | --role client --peer HOST[:PORT]\n"
    "              | --wire shm:NAME --role server|client] [--device D] [--blocks N]\n"
    "              [--requests N] [--qd 1..63] [--max-io 1..16] [--clients 1..8]\n"
    "              [--isolate peer|none] [--metadata 0|4..128] [--max-refusals N] [--cm]\n"
    "  --device D   emu (the default: emu-threaded), emu-inline, emu@roce:ADDR (emulated mlx5\n"
    "               speaking RoCE v2 over UDP from this host's IPv4 address ADDR: two hosts\n"
    "               without RDMA NICs), mlx5 or mlx5_N\n"
    "  --cm         with --listen/--peer on mlx5: connect the queue pairs through rdma_cm\n"
    "               (route-resolved device, GID, path MTU and timers); emu has no rdma_cm\n"
    "exit status: 0 ok, 1 data, protocol or peer failure, 2 bad arguments (one line\n"
    "             \"blockd: error: ...\"), 3 no such device, 130 interrupted\n";
static int usage_error(const char* fmt, ...) {
  va_list ap;
  fputs("blockd: error: ", stderr);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fputs("\ntry 'blockd --help' for the options\n", stderr);
  return 2;
}
/* A whole number in [lo, hi] for --opt, or a usage error. */
static int number(const char* opt, const char* s, uint64_t lo, uint64_t hi, uint64_t* out) {
  char* end;
  unsigned long long v;
  errno = 0;
  v = strtoull(s, &end, 0);
  if (!*s || *s == '-' || *end || errno || v < lo || v > hi)
    return usage_error("--%s '%s': a whole number from %llu to %llu", opt, s,
                       (unsigned long long)lo, (unsigned long long)hi);
  *out = v;
  return 0;
}
/* What the options say together. */
static int check_args(const struct args* a) {
  const int srv = strcmp(a->role, "client") != 0, cli = strcmp(a->role, "server") != 0;
  if (strcmp(a->role, "both") && strcmp(a->role, "server") && strcmp(a->role, "client"))
    return usage_error("--role '%s': server or client (both sides in one process: no --role)",
                       a->role);
  if (g_blocks < g_qd * g_max_io)
    return usage_error("--blocks %llu: at least --qd x --max-io (%llu)",
                       (unsigned long long)g_blocks, (unsigned long long)(g_qd * g_max_io));
  if (a->wire && strncmp(a->wire, "shm:", 4)) return usage_error("--wire '%s': shm:NAME", a->wire);
  if (srv && cli && (a->wire || a->listen_at || a->peer))
    return usage_error("--wire, --listen and --peer join two processes: add --role server|client");
  if (!(srv && cli) && !a->wire && !a->listen_at && !a->peer)
    return usage_error("--role %s needs --wire shm:NAME, --listen or --peer", a->role);
  if (a->listen_at && cli) return usage_error("--listen is for --role server");
  if (strcmp(a->isolate, "peer") && strcmp(a->isolate, "none"))
    return usage_error("--isolate '%s': peer or none", a->isolate);
  if (g_clients > 1 && !a->listen_at)
    return usage_error("--clients %u: for --role server --listen", g_clients);
  /* An emu shm wire joins two processes: several clients need a device on a network. */
  if (g_clients > 1 && !strncmp(a->device, "emu", 3) && !strstr(a->device, "@roce:"))
    return usage_error(
        "--clients %u needs a device on a network (emu@roce:ADDR or mlx5): the "
        "shared-memory wire of --device %s joins two processes",
        g_clients, a->device);
  if (a->peer && srv) return usage_error("--peer is for --role client");
  if (a->peer && a->wire) return usage_error("--peer and --wire: the server names the wire");
  if (a->cm && !a->listen_at && !a->peer)
    return usage_error("--cm connects two processes through rdma_cm: with --listen or --peer");
  if (a->cm && !strncmp(a->device, "emu", 3))
    return usage_error(
        "--cm connects the queue pairs through rdma_cm: an mlx5 device only (--device "
        "mlx5_N); --device %s is emulated and emu has no rdma_cm",
        a->device);
  return -1;
}
/* Returns -1 to go on, or the exit status (--help, a usage error). */
static int parse_args(int argc, char** argv, struct args* a) {
  static const struct option opts[] = {{"device", required_argument, NULL, 'd'},
                                       {"wire", required_argument, NULL, 'w'},
                                       {"role", required_argument, NULL, 'r'},
                                       {"blocks", required_argument, NULL, 'b'},
                                       {"requests", required_argument, NULL, 'n'},
                                       {"qd", required_argument, NULL, 'q'},
                                       {"max-io", required_argument, NULL, 'm'},
                                       {"listen", required_argument, NULL, 'l'},
                                       {"peer", required_argument, NULL, 'p'},
                                       {"clients", required_argument, NULL, 'c'},
                                       {"isolate", required_argument, NULL, 'i'},
                                       {"metadata", required_argument, NULL, 'M'},
                                       {"max-refusals", required_argument, NULL, 'R'},
                                       {"cm", no_argument, NULL, 'C'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
  uint64_t qd = g_qd, clients = 1, md = 0;
  int c, rc = 0;
  a->device = "emu", a->role = "both", a->wire = a->listen_at = a->peer = NULL;
  a->isolate = "none";
  a->cm = 0;
  opterr = 0;
  while (!rc && (c = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
    switch (c) {
      case 'd':
        a->device = optarg;
        break;
      case 'w':
        a->wire = optarg;
        break;
      case 'r':
        a->role = optarg;
        break;
      case 'l':
        a->listen_at = optarg;
        break;
      case 'p':
        a->peer = optarg;
        break;
      case 'b':
        rc = number("blocks", optarg, 1, 1u << 24, &g_blocks);
        break;
      case 'n':
        rc = number("requests", optarg, 0, UINT32_MAX, &g_requests);
        break;
      case 'q':
        rc = number("qd", optarg, 1, MAXQ - 1, &qd);
        break;
      case 'm':
        rc = number("max-io", optarg, 1, 16, &g_max_io);
        break;
      case 'c':
        rc = number("clients", optarg, 1, MAXC, &clients);
        break;
      case 'i':
        a->isolate = optarg;
        break;
      case 'M': /* a reference tag needs 4 bytes */
        rc = number("metadata", optarg, 0, 128, &md);
        if (!rc && md && md < 4) rc = usage_error("--metadata %llu: 0 or 4 to 128", md);
        break;
      case 'R':
        rc = number("max-refusals", optarg, 0, UINT32_MAX, &g_max_refusals);
        break;
      case 'C':
        a->cm = 1;
        break;
      case 'h':
        fputs(kUsage, stdout);
        return 0;
      case ':':
        return usage_error("option '%s' needs a value", argv[optind - 1]);
      default:
        return usage_error("unknown option '%s'", argv[optind - 1]);
    }
  }
  if (rc) return rc;
  if (optind < argc) return usage_error("unexpected argument '%s'", argv[optind]);
  g_qd = (uint32_t)qd;
  g_clients = (uint32_t)clients;
  g_md = (uint32_t)md;
  g_isolate = !strcmp(a->isolate, "peer");
  g_cm = a->cm;
  return check_args(a);
}

int main(int argc, char** argv) {
  struct args a;
  const char *device, *wire, *role, *listen_at, *peer;
  rdmx_port_opts os, oc;
  rdmx_port_info info;
  struct sigaction sa;
  int rc, srv, cli, tcp;
  uint32_t k;
  if ((rc = parse_args(argc, argv, &a)) >= 0) return rc;
  device = a.device, wire = a.wire, role = a.role, listen_at = a.listen_at, peer = a.peer;
  srv = strcmp(role, "client") != 0;
  cli = strcmp(role, "server") != 0;
  tcp = listen_at || peer;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_signal;
  sigaction(SIGINT, &sa, NULL);
  sigaction(SIGTERM, &sa, NULL);
  if (listen_at) {
    rdmx_conn_opts lo;
    rdmx_conn_opts_init(&lo);
    lo.cm = g_cm; /* also listens in rdma_cm's port space on the same port */
    TRY_RDV(rdmx_listen_opts(listen_at, &lo, &g_lis));
    /* The server names the shm wire (emu@roce has none: a client on emu finds no wire to wait
     * for, and the session's link rule refuses it at the exchange). */
    if (!wire && !strncmp(device, "emu", 3) && !*on_wire(device)) {
      snprintf(g_wire, sizeof g_wire, "shm:blockd-%ld", (long)getpid());
      wire = g_wire;
    }
  }
  if (peer) wire = tcp_connect(peer);
  rdmx_port_opts_init(&os);
  rdmx_port_opts_init(&oc);
  /* volumes (and their metadata), messages */
  os.arena_bytes = g_clients * (g_blocks * (BLK + g_md) + 2 * MAXQ * MSG);
  /* I/O buffers (and their metadata), messages */
  oc.arena_bytes = g_qd * g_max_io * (BLK + g_md) + 2 * MAXQ * MSG;
  /* An interleaved window of max-io blocks holds max-io x (4 KiB + metadata) bytes. */
  if (g_md) os.max_pages = oc.max_pages = (uint32_t)g_max_io + 1;
  os.n_windows = 4 * g_qd * g_clients; /* --metadata: the server maps too, per request */
  oc.n_windows = 4 * g_qd;
  os.max_cores = g_clients;
  os.wire = oc.wire = wire; /* emu; NULL: one process, the pair's own wire */
  oc.side = 1;
  if (!wire && !tcp && !strncmp(device, "emu", 3))
    check_open(rdmx_port_open_pair(device, &os, &oc, &g_sport, &C.port), device);
  if (wire || tcp || strncmp(device, "emu", 3)) { /* one side here; or a NIC: two ports on it */
    if (srv) check_open(rdmx_port_open(device, &os, &g_sport), device);
    if (cli) check_open(rdmx_port_open(device, &oc, &C.port), device);
  }
  g_cfg.blocks = g_blocks, g_cfg.qd = g_qd, g_cfg.max_io = (uint32_t)g_max_io, g_cfg.md = g_md;
  g_cfg.max_refusals = (uint32_t)g_max_refusals;
  if (srv && !listen_at) {
    setup_peer(0);
    snprintf(g_peer[0].name, sizeof g_peer[0].name, "%s", wire ? "over the wire" : "in-process");
  }
  if (cli) setup(&C, C.port, (uint64_t)g_qd * g_max_io * (BLK + g_md), 0, 0);
  if (!wire && !tcp) TRY(rdmx_core_connect_pair(g_peer[0].s.core, C.core));
  /* A refusal (-RDMX_EINVAL: another link) is one line, exit 2, as the hello's. */
  if (peer) TRY_RDV(rdmx_conn_exchange(g_conn, &C.core, 1, 0, &g_stop));
  if (wire && !tcp) {
    rdmx_connect_info mine, theirs;
    rdmx_core* me = srv ? g_peer[0].s.core : C.core;
    TRY(rdmx_core_connect_info(me, &mine));
    rendezvous(wire + 4, role, srv ? "client" : "server", &mine, &theirs, sizeof mine);
    TRY(rdmx_core_connect(me, &theirs));
  }
  g_gen = calloc(g_blocks, sizeof *g_gen); /* the client's model of the volume */
  g_lat = malloc(sizeof(double) * (2 * g_blocks + g_requests + MAXQ));
  if (!g_gen || !g_lat) fatal("client", "out of memory");
  if (srv && !listen_at && blockd_peer_start(&g_cfg, &g_peer[0]) < 0) fatal("server", "start");
  if (cli) post_recvs(&C);
  if (peer) { /* both sides' receives are posted: the server serves this client from now on */
    TRY(rdmx_conn_ready(g_conn, 0, &g_stop));
    /* What issue() will run: each slot fills its part, does --requests/qd random requests,
     * reads its part back. */
    const uint64_t part = g_blocks / g_qd, fill = (part + g_max_io - 1) / g_max_io;
    printf(
        "blockd: client: running %llu requests at qd %u on %s (%llu random, the rest fill "
        "the volume and read it back)\n",
        (unsigned long long)(g_qd * (2 * fill + g_requests / g_qd)), g_qd, rdmx_conn_peer(g_conn),
        (unsigned long long)(g_requests / g_qd * g_qd));
    fflush(stdout);
  }
  /* TCP server: each client in turn gets its core (isolated: its own PD and windows), is
   * connected, and runs as soon as it is ready; the next is accepted meanwhile (its requests
   * wait in its receive queue until the loop below polls it). A client refused on the way
   * (one line) does not take a slot. */
  if (listen_at) waiting_line(0); /* the clients are admitted in the loop below */
  if (wire && !tcp) {             /* both sides' receives are posted before the first request */
    char me = 1, them;
    rendezvous(wire + 4, srv ? "server-ready" : "client-ready",
               srv ? "client-ready" : "server-ready", &me, &them, 1);
  }
  const double t0 = now_us();
  double idle_since = t0; /* TCP server: since when no client runs or joins */
  for (uint64_t it = 1; (cli && g_cli_state != 2) || (srv && !server_done()); ++it) {
    for (k = 0; srv && k < g_clients; ++k) blockd_serve(&g_cfg, &g_peer[k]);
    if (cli) client_step();
    /* Housekeeping: every 64 Ki turns while a client runs; with nobody to serve, every 1 ms
     * (the server then waits at the door without spinning). */
    const int busy = listen_at && clients_here();
    if (listen_at && !busy) {
      struct timespec ms = {0, 1000000};
      nanosleep(&ms, NULL);
    }
    /* Events first: they name the slot's client before the door gives the slot to another. */
    if (srv && (!busy || !(it & 0xffff))) report_events(g_sport, "server");
    if (listen_at && (!busy || !(it & 0xff))) door_step();
    if (srv && (!busy || !(it & 0xffff))) watch_clients(listen_at != NULL);
    if (cli && !(it & 0xffff)) report_events(C.port, "client");
    if (listen_at && (!busy || !(it & 0xffff))) {
      if (busy) idle_since = now_us();
      if (!busy && now_us() - idle_since > 120e6) {
        fprintf(stderr, "blockd: server: no client within 120 s\n");
        close_all();
        exit(1);
      }
    }
    if (g_stop) { /* the last line says whether a client was running */
      const int ran = !listen_at || slots_in(PEER_RUNNING) || slots_in(PEER_STOPPED);
      fprintf(stderr, "blockd: interrupted%s\n", ran ? "" : " while waiting for the peer");
      close_all();
      exit(130);
    }
  }
  const double el = now_us() - t0;
  if (srv) report_events(g_sport, "server"); /* what came since the last look */
  if (cli) report_events(C.port, "client");
  TRY(rdmx_port_query(srv ? g_sport : C.port, &info));
  if (cli) {
    /* The library's window counters by name (rdmx_stats_snapshot): every one that moved. */
    rdmx_stat st[512];
    const int n_st = rdmx_stats_snapshot(C.core, st, 512);
    TRY(n_st < 0 ? n_st : 0);
    uint64_t maps = 0, freed = 0;
    qsort(g_lat, g_done, sizeof(double), cmp);
    printf("blockd: %llu requests, %llu blocks of 4 KiB, qd %u, verified end to end over %s%s\n",
           (unsigned long long)g_done, (unsigned long long)(g_bytes / BLK), g_qd, info.backend,
           on_wire(device));
    printf("blockd: %.0f IOPS, %.1f MiB/s; latency us: p50 %.1f  p99 %.1f  max %.1f\n",
           (double)g_done / el * 1e6, (double)g_bytes / el * 1e6 / (1 << 20), g_lat[g_done / 2],
           g_lat[g_done * 99 / 100], g_lat[g_done - 1]);
    if (g_md)
      printf(
          "blockd: metadata: %u bytes per block, %llu bytes moved in the same operations as "
          "the data (interleaved windows), reference tags and contents verified\n",
          g_md, (unsigned long long)g_md_bytes);
    printf("blockd: windows:");
    for (k = 0; k < (unsigned)n_st && k < 512; ++k) {
      if (!strcmp(st[k].name, "maps")) maps = st[k].value;
      if (!strcmp(st[k].name, "remote_invalidations")) freed = st[k].value;
      if (st[k].value) printf(" %s %llu", st[k].name, (unsigned long long)st[k].value);
    }
    printf("\n");
    if (maps != g_done || freed != g_done) fatal("client", "window count");
  } else {
    for (k = 0; listen_at && (g_clients > 1 || g_dropped) && k < g_clients; ++k)
      printf("blockd: server: client %u (%s): %llu requests served, %llu refused\n", k + 1,
             g_peer[k].name, (unsigned long long)g_peer[k].served,
             (unsigned long long)g_peer[k].refused);
    printf("blockd: server done over %s%s: %u client(s)%s", info.backend, on_wire(device),
           g_clients, g_isolate ? ", each core in a protection domain of its own" : "");
    if (g_dropped) printf("; %u dropped", g_dropped);
    printf("\n");
  }
  close_all(); /* ports (their cores too), the rendezvous connection */
  free(g_gen);
  free(g_lat);
  return 0;
}
