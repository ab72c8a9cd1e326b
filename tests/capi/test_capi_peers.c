/* Two processes (two hosts in the namespace test bed) over the C API only: a server that exposes
 * one window, and a client holding two connections to it, a victim's and an attacker's. Run by
 * tests/functional/twohost (case capi-peers) across the veth pair on emu RoCE v2, and by hand:
 *
 *   test_capi_peers server ADDR:PORT DEVICE ISOLATE GUARD (ISOLATE: 1 = a PD per connection;
 *                                                         GUARD N > 0: rdmx_core_guard, a peer
 *                                                         refused more than N times is cut off)
 *   test_capi_peers client ADDR:PORT DEVICE ATTEMPTS
 *
 * The server makes one core per connection (isolated or not), maps a window for the victim's
 * connection and sends its rkey over the rendezvous connection. The client then
 *   1. WRITEs and READs through it on the victim's connection (must work);
 *   2. makes ATTEMPTS accesses with that exact rkey on the attacker's connection, alternating
 *      WRITE and READ, and after every refusal recovers both ends of that connection (what a
 *      reconnecting attacker does); counts what was accepted and what its READs brought back;
 *      with GUARD, the server refuses to recover the attacker's connection once the policy
 *      fired, and the attack ends there;
 *   3. asks the server whether its memory changed outside the victim's bytes;
 *   4. asks the server to unmap the window, then WRITEs with the now stale rkey on the victim's
 *      connection: refused by the server's device across the network, nothing written;
 *   5. asks the server for its per-connection refusal counts.
 * It prints one line: "peers: isolate=I attempts=N accepted=A changed=C disclosed=D stale=S
 * refused_attacker=R refused_victim=V cut_off_after=K" (K = 0: never) and exits 0 when the run
 * itself worked; the twohost case judges the figures (isolated: A=0, C=0, D=0; not isolated: A=N).
 * Exit 1 on any failure. */
#define _POSIX_C_SOURCE 200809L

#include <rdmx/rdmx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define PAGE 4096u
#define VICTIM_BYTES 64u /* the victim writes the first 64 bytes of its window */
#define SYNDROME_REMOTE_ACCESS 0x13

static void die(const char* what, int rc) {
  fprintf(stderr, "test_capi_peers: %s: %s (%s)\n", what, rdmx_strerror(rc), rdmx_last_error());
  exit(1);
}
#define TRY(call)                 \
  do {                            \
    int rc_ = (call);             \
    if (rc_ < 0) die(#call, rc_); \
  } while (0)

static void say(rdmx_conn* c, const char* fmt, unsigned long long a, unsigned long long b) {
  char m[128];
  snprintf(m, sizeof m, fmt, a, b);
  TRY(rdmx_conn_send(c, m, strlen(m) + 1, 10000, NULL));
}
static void hear(rdmx_conn* c, char* m, size_t cap) {
  int n = rdmx_conn_recv(c, m, cap - 1, 30000, NULL);
  if (n < 0) die("rdmx_conn_recv", n);
  m[n] = 0;
}

/* Both ends of one connection back to RTS after a refusal: the asking side sends its connect
 * info, the other recovers towards it and answers with its own. */
/* 0, or 1 when the server refused: it cut this connection off (rdmx_core_guard). */
static int recover_ask(rdmx_conn* c, rdmx_core* core, char which) {
  rdmx_connect_info mine, theirs;
  char m[2 + sizeof mine];
  int n;
  TRY(rdmx_core_connect_info(core, &mine));
  m[0] = 'R';
  m[1] = which;
  memcpy(m + 2, &mine, sizeof mine);
  TRY(rdmx_conn_send(c, m, sizeof m, 10000, NULL));
  n = rdmx_conn_recv(c, &theirs, sizeof theirs, 30000, NULL);
  if (n == 4 && !memcmp(&theirs, "cut", 4)) return 1;
  if (n != (int)sizeof theirs) die("recover: the server's connect info", -RDMX_EPROTO);
  TRY(rdmx_core_recover(core, &theirs));
  return 0;
}
static void recover_answer(rdmx_conn* c, rdmx_core* core, const char* m) {
  rdmx_connect_info theirs, mine;
  memcpy(&theirs, m + 2, sizeof theirs);
  TRY(rdmx_core_connect_info(core, &mine));
  TRY(rdmx_conn_send(c, &mine, sizeof mine, 10000, NULL));
  TRY(rdmx_core_recover(core, &theirs));
}

/* ---- Server: exposes one window, on the victim's connection ---------------------------------- */
static int server(const char* at, const char* device, int isolate, unsigned guard) {
  rdmx_listener* l;
  rdmx_conn* c;
  rdmx_port* port;
  rdmx_core* cores[2]; /* [0] the victim's connection, [1] the attacker's */
  rdmx_core_opts o;
  rdmx_port_info pi;
  rdmx_mapping m;
  rdmx_core_stats sv, sx;
  uint64_t page, i, changed;
  uint8_t *mem, *want;
  char msg[256];
  TRY(rdmx_listen(at, &l));
  printf("test_capi_peers: server: waiting on %s\n", rdmx_listener_address(l));
  fflush(stdout);
  TRY(rdmx_accept(l, 60000, NULL, &c));
  TRY(rdmx_port_open(device, NULL, &port));
  rdmx_core_opts_init(&o);
  o.isolate = isolate;
  TRY(rdmx_core_create(port, &o, &cores[0]));
  TRY(rdmx_core_create(port, &o, &cores[1]));
  TRY(rdmx_conn_exchange(c, cores, 2, 30000, NULL));
  if (guard) { /* the policy counts from here */
    TRY(rdmx_core_guard(cores[0], guard, 60000, rdmx_conn_peer(c)));
    TRY(rdmx_core_guard(cores[1], guard, 60000, rdmx_conn_peer(c)));
  }
  TRY(rdmx_port_query(port, &pi));
  mem = (uint8_t*)pi.arena_base;
  for (i = 0; i < pi.data_bytes; ++i) mem[i] = (uint8_t)(i * 13 + 5);
  TRY(rdmx_pages_alloc(port, &page, 1));
  TRY(rdmx_map(cores[0], &page, 1, RDMX_ACCESS_REMOTE_RW, 0, PAGE, &m));
  rdmx_flush(cores[0]);
  TRY(rdmx_core_quiesce(cores[0], 0));
  want = (uint8_t*)malloc(pi.data_bytes);
  if (!want) die("malloc", -RDMX_ENOMEM);
  memcpy(want, mem, pi.data_bytes);
  TRY(rdmx_conn_ready(c, 30000, NULL));
  say(c, "window %llu %llu", m.rkey, m.iova);
  for (;;) {
    hear(c, msg, sizeof msg);
    if (msg[0] == 'R') { /* recover a connection: R, which (0 victim, 1 attacker), info */
      rdmx_core* core = cores[msg[1] == 1];
      if (guard) {
        const int g = rdmx_core_guard(core, guard, 60000, rdmx_conn_peer(c));
        if (g < 0) die("rdmx_core_guard", g);
        if (g == 1) { /* over the limit: this connection is not recovered again */
          TRY(rdmx_conn_send(c, "cut", 4, 10000, NULL));
          continue;
        }
      }
      recover_answer(c, core, msg);
    } else if (!strcmp(msg, "victim-wrote")) { /* the victim's bytes are its own */
      memcpy(want + (page - (uint64_t)(uintptr_t)mem), (void*)(uintptr_t)page, VICTIM_BYTES);
    } else if (!strcmp(msg, "check")) {
      for (i = 0, changed = 0; i < pi.data_bytes; ++i) changed += mem[i] != want[i];
      say(c, "changed %llu %llu", changed, 0);
    } else if (!strcmp(msg, "unmap")) {
      TRY(rdmx_unmap(cores[0], m.window));
      rdmx_flush(cores[0]);
      TRY(rdmx_core_quiesce(cores[0], 0));
      say(c, "unmapped %llu %llu", 0, 0);
    } else if (!strcmp(msg, "stats")) {
      TRY(rdmx_core_stats_get(cores[0], &sv, sizeof sv));
      TRY(rdmx_core_stats_get(cores[1], &sx, sizeof sx));
      say(c, "refused %llu %llu", sx.refused_remote_accesses, sv.refused_remote_accesses);
    } else if (!strcmp(msg, "bye")) {
      break;
    } else {
      die(msg, -RDMX_EPROTO);
    }
  }
  TRY(rdmx_port_query(port, &pi));
  if (pi.emu_checker_reports) die("emu PRM checker reports", -RDMX_ESTATE);
  free(want);
  rdmx_conn_close(c);
  rdmx_listener_close(l);
  rdmx_port_close(port);
  printf("test_capi_peers: server: done (isolate=%d)\n", isolate);
  return 0;
}

/* ---- Client: the victim's and the attacker's connection -------------------------------------- */
static uint64_t g_cookie = 1;
static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + (double)t.tv_nsec / 1e9;
}
/* Polls until the completion of `cookie` (5 s at most). */
static int wait_cookie(rdmx_core* core, uint64_t cookie, rdmx_completion* out) {
  const double end = now_s() + 5.0;
  while (now_s() < end) {
    rdmx_completion wc[8];
    int n = rdmx_poll(core, wc, 8), i;
    for (i = 0; i < n; ++i)
      if (wc[i].cookie == cookie) {
        *out = wc[i];
        return 1;
      }
  }
  return 0;
}
/* One one-sided op from `buf` (len bytes of the arena); the completion status. */
static int op(rdmx_core* core, int write, uint8_t* buf, uint32_t len, uint64_t raddr,
              uint32_t rkey) {
  rdmx_sge s = {(uint64_t)(uintptr_t)buf, len, rdmx_core_lkey(core)};
  rdmx_completion wc;
  const uint64_t ck = ++g_cookie;
  if (write)
    TRY(rdmx_post_write(core, &s, 1, raddr, rkey, ck, RDMX_POST_SIGNALED));
  else
    TRY(rdmx_post_read(core, &s, 1, raddr, rkey, ck, RDMX_POST_SIGNALED));
  rdmx_flush(core);
  if (!wait_cookie(core, ck, &wc)) die("no completion within 5 s", -RDMX_ETIMEDOUT);
  return (int)wc.status;
}

static int client(const char* at, const char* device, unsigned long attempts) {
  rdmx_conn* c;
  rdmx_port* port;
  rdmx_core* cores[2];
  uint64_t page;
  uint8_t* buf;
  unsigned long long rkey, iova, changed, changed2, dummy, refused_x, refused_v;
  unsigned long k, accepted = 0, disclosed = 0, i, cut = 0;
  int st, stale;
  char msg[256];
  TRY(rdmx_connect_to(at, 30000, NULL, &c));
  TRY(rdmx_port_open(device, NULL, &port));
  TRY(rdmx_core_create(port, NULL, &cores[0]));
  TRY(rdmx_core_create(port, NULL, &cores[1]));
  TRY(rdmx_conn_exchange(c, cores, 2, 30000, NULL));
  TRY(rdmx_conn_ready(c, 30000, NULL));
  hear(c, msg, sizeof msg);
  if (sscanf(msg, "window %llu %llu", &rkey, &iova) != 2) die(msg, -RDMX_EPROTO);
  TRY(rdmx_pages_alloc(port, &page, 1));
  buf = (uint8_t*)(uintptr_t)page;
  /* 1. The victim's own access. */
  for (i = 0; i < VICTIM_BYTES; ++i) buf[i] = (uint8_t)(0xA0 + i);
  if ((st = op(cores[0], 1, buf, VICTIM_BYTES, iova, (uint32_t)rkey)) != 0)
    die("the victim's WRITE failed", -st);
  say(c, "victim-wrote", 0, 0);
  memset(buf + 1024, 0, VICTIM_BYTES);
  if ((st = op(cores[0], 0, buf + 1024, VICTIM_BYTES, iova, (uint32_t)rkey)) != 0)
    die("the victim's READ failed", -st);
  if (memcmp(buf, buf + 1024, VICTIM_BYTES)) die("the victim read other bytes", -RDMX_ESTATE);
  /* 2. The attacker, with the victim's exact rkey, on its own connection. */
  for (k = 0; k < attempts; ++k) {
    const int write = k % 2 == 0;
    uint8_t* b = buf + 2048;
    memset(b, 0x5A, 512);
    /* WRITEs into the window's second 512 bytes, READs from its last 2 KiB: a READ must bring
     * back the server's bytes, not the attacker's own. */
    st = op(cores[1], write, b, 512, iova + (write ? 512 : 2048), (uint32_t)rkey);
    if (st == 0) {
      ++accepted;
      for (i = 0; !write && i < 512; ++i) disclosed += b[i] != 0x5A;
    } else if (st == SYNDROME_REMOTE_ACCESS) {
      for (i = 0; !write && i < 512; ++i) disclosed += b[i] != 0x5A;
      if (recover_ask(c, cores[1], 1)) {
        cut = k + 1; /* the server cut the attacker off */
        break;
      }
    } else {
      die(rdmx_syndrome_name(st), -RDMX_ESTATE);
    }
  }
  /* 3. What changed on the server beyond the victim's bytes. */
  say(c, "check", 0, 0);
  hear(c, msg, sizeof msg);
  if (sscanf(msg, "changed %llu %llu", &changed, &dummy) != 2) die(msg, -RDMX_EPROTO);
  /* 4. The stale key, across the network. */
  say(c, "unmap", 0, 0);
  hear(c, msg, sizeof msg);
  memset(buf, 0xEE, VICTIM_BYTES);
  stale = op(cores[0], 1, buf, VICTIM_BYTES, iova, (uint32_t)rkey);
  if (stale == SYNDROME_REMOTE_ACCESS && recover_ask(c, cores[0], 0))
    die("the server cut the victim off", -RDMX_ESTATE);
  say(c, "check", 0, 0); /* the stale WRITE must not have changed anything either */
  hear(c, msg, sizeof msg);
  if (sscanf(msg, "changed %llu %llu", &changed2, &dummy) != 2) die(msg, -RDMX_EPROTO);
  if (changed2 != changed) stale = -1; /* it wrote */
  /* 5. The server's counts. */
  say(c, "stats", 0, 0);
  hear(c, msg, sizeof msg);
  if (sscanf(msg, "refused %llu %llu", &refused_x, &refused_v) != 2) die(msg, -RDMX_EPROTO);
  say(c, "bye", 0, 0);
  printf(
      "peers: attempts=%lu accepted=%lu changed=%llu disclosed=%lu stale=%s "
      "refused_attacker=%llu refused_victim=%llu cut_off_after=%lu\n",
      cut ? cut : attempts, accepted, changed, disclosed,
      stale == SYNDROME_REMOTE_ACCESS ? "refused" : "accepted", refused_x, refused_v, cut);
  rdmx_conn_close(c);
  rdmx_port_close(port);
  return 0;
}

int main(int argc, char** argv) {
  if (argc == 6 && !strcmp(argv[1], "server"))
    return server(argv[2], argv[3], atoi(argv[4]), (unsigned)strtoul(argv[5], NULL, 10));
  if (argc == 5 && !strcmp(argv[1], "client"))
    return client(argv[2], argv[3], strtoul(argv[4], NULL, 10));
  fprintf(stderr,
          "usage: test_capi_peers server ADDR:PORT DEVICE ISOLATE GUARD | "
          "client ADDR:PORT DEVICE ATTEMPTS\n");
  return 2;
}
