/* blockd: a tiny block service over the rdmx C API (rdmx.h only), the NVMe-oF pattern.
 *
 * The server holds a volume of 4 KiB blocks in memory. Per request the client maps its buffer's
 * chunk pages into a window and SENDs (op, blocks, rkey, iova, len); the server moves the data
 * with RDMA WRITE (client reads) or RDMA READ (client writes) through that rkey and replies with
 * SEND_WITH_INV, which frees the client's window on receipt: the client never unmaps.
 *
 *   blockd                                   both sides in one process (two emu ports)
 *   blockd --wire shm:NAME --role server     two processes over a shared-memory wire
 *   blockd --wire shm:NAME --role client
 * Options: --device emu|emu-threaded|mlx5_0  --blocks N  --requests N  --qd N  --max-io BLOCKS
 * Exit: 0 ok, 1 data or protocol error, 2 usage, 3 no device. */
#define _POSIX_C_SOURCE 200809L
#include <rdmx/rdmx.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define BLK 4096u
#define MSG 64u
enum { OP_READ = 1, OP_WRITE = 2, OP_STOP = 3 };
#define COOKIE(kind, slot) (((uint64_t)(kind) << 32) | (slot))

struct req {
  uint32_t op, tag, nblk, rkey;
  uint64_t lba, iova, len;
};
struct rsp {
  uint32_t tag;
  int32_t status;
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}
static int die(const char* what, int rc) {
  fprintf(stderr, "blockd: %s: %s (%s)\n", what, rdmx_strerror(rc), rdmx_last_error());
  exit(rc == -RDMX_ENODEV ? 3 : 1);
}
#define TRY(call)                 \
  do {                            \
    int rc_ = (call);             \
    if (rc_ < 0) die(#call, rc_); \
  } while (0)

static rdmx_sge sge(rdmx_port* p, void* addr, uint32_t len) {
  rdmx_sge s = {(uint64_t)(uintptr_t)addr, len, rdmx_port_lkey(p)};
  return s;
}

/* ---- Server -------------------------------------------------------------------------------- */
struct server {
  rdmx_port* port;
  rdmx_core* core;
  uint8_t* vol;
  uint64_t blocks;
  uint8_t *rx, *tx; /* qd+1 receive slots, qd+1 reply slots (MSG bytes each) */
  uint32_t slots;
  int stopped;
  uint64_t served;
  struct req pending[64]; /* client writes: the READ is in flight */
};

static void server_post_recv(struct server* s, uint32_t i) {
  rdmx_sge r = sge(s->port, s->rx + i * MSG, MSG);
  TRY(rdmx_post_recv(s->core, &r, 1, COOKIE(0, i)));
}
static void server_reply(struct server* s, const struct req* q, int32_t status) {
  struct rsp r = {q->tag, status};
  rdmx_sge t = sge(s->port, s->tx + q->tag * MSG, sizeof r);
  memcpy(s->tx + q->tag * MSG, &r, sizeof r);
  if (q->op == OP_STOP)
    TRY(rdmx_post_send(s->core, &t, 1, COOKIE(2, q->tag), 0));
  else
    TRY(rdmx_post_send_inv(s->core, &t, 1, q->rkey, COOKIE(2, q->tag), 0));
  ++s->served;
}

static void server_step(struct server* s) {
  rdmx_completion wc[16];
  int n = rdmx_poll(s->core, wc, 16), i;
  for (i = 0; i < n; ++i) {
    uint32_t slot = (uint32_t)wc[i].cookie, kind = (uint32_t)(wc[i].cookie >> 32);
    if (wc[i].status) {
      fprintf(stderr, "server: %s failed: %s\n", rdmx_opcode_name(wc[i].opcode),
              rdmx_syndrome_name(wc[i].status));
      exit(1);
    }
    if (kind == 2 && slot == s->slots - 1) s->stopped = 2; /* the STOP reply left */
    if (kind == 1) { /* the READ of a client write landed in the volume: reply */
      server_reply(s, &s->pending[slot], 0);
    } else if (kind == 0) { /* a request */
      struct req q;
      memcpy(&q, s->rx + slot * MSG, sizeof q);
      server_post_recv(s, slot);
      if (q.tag >= s->slots) {
        fprintf(stderr, "server: bad tag\n");
        exit(1);
      }
      if (q.op == OP_STOP) {
        server_reply(s, &q, 0);
        s->stopped = 1;
        continue;
      }
      if (q.lba + q.nblk > s->blocks || q.len != (uint64_t)q.nblk * BLK || q.nblk == 0) {
        server_reply(s, &q, -RDMX_ERANGE);
        continue;
      }
      rdmx_sge d = sge(s->port, s->vol + q.lba * BLK, (uint32_t)q.len);
      if (q.op == OP_READ) { /* volume -> client window, then the reply (ordered after it) */
        TRY(rdmx_post_write(s->core, &d, 1, q.iova, q.rkey, COOKIE(3, q.tag), 0));
        server_reply(s, &q, 0);
      } else { /* client window -> volume; reply once the data is here */
        s->pending[q.tag] = q;
        TRY(rdmx_post_read(s->core, &d, 1, q.iova, q.rkey, COOKIE(1, q.tag), RDMX_POST_SIGNALED));
      }
    }
  }
  if (n) rdmx_flush(s->core);
}

/* ---- Client -------------------------------------------------------------------------------- */
struct slot {
  uint32_t busy, issued, rkey, op, nblk;
  uint64_t lba;
  double t0;
  rdmx_window* w;
};
struct client {
  rdmx_port* port;
  rdmx_core* core;
  uint8_t *bufs, *tx, *rx;
  uint64_t blocks, part, max_io, per_slot_random;
  uint32_t qd, *gen; /* generation of every block's content */
  struct slot s[64];
  uint64_t done, bytes;
  int stop_sent, stopped;
  double* lat;
  uint64_t n_lat;
};

static uint8_t pattern(uint64_t lba, uint32_t gen, uint32_t i) {
  return (uint8_t)(lba * 131 + gen * 31 + i * 7 + (i >> 8));
}

static void client_send(struct client* c, uint32_t t, const struct req* q) {
  rdmx_sge m = sge(c->port, c->tx + t * MSG, sizeof *q);
  memcpy(c->tx + t * MSG, q, sizeof *q);
  TRY(rdmx_post_send(c->core, &m, 1, COOKIE(1, t), 0));
}

/* Per slot: fill its partition with writes, then random reads/writes, then read it all back. */
static int client_issue(struct client* c, uint32_t t) {
  struct slot* s = &c->s[t];
  const uint64_t fill = (c->part + c->max_io - 1) / c->max_io, base = t * c->part;
  uint64_t k = s->issued, off;
  rdmx_mapping m;
  uint8_t* buf = c->bufs + (uint64_t)t * c->max_io * BLK;
  uint32_t i, b;
  struct req q;
  if (k < fill) {
    s->op = OP_WRITE;
    off = k * c->max_io;
  } else if (k < fill + c->per_slot_random) {
    s->op = rand() % 2 ? OP_READ : OP_WRITE;
    off = (uint64_t)rand() % c->part;
  } else if (k < 2 * fill + c->per_slot_random) {
    s->op = OP_READ;
    off = (k - fill - c->per_slot_random) * c->max_io;
  } else
    return 0;
  s->nblk =
      (uint32_t)(k < fill || k >= fill + c->per_slot_random ? c->max_io
                                                            : 1 + (uint64_t)rand() % c->max_io);
  if (off + s->nblk > c->part) s->nblk = (uint32_t)(c->part - off);
  s->lba = base + off;
  if (s->op == OP_WRITE)
    for (b = 0; b < s->nblk; ++b)
      for (i = 0; i < BLK; ++i) buf[b * BLK + i] = pattern(s->lba + b, c->gen[s->lba + b] + 1, i);
  s->t0 = now_us();
  /* The server WRITEs into the window for a read and READs it for a write: grant just that. */
  TRY(rdmx_map_buf(c->core, buf, (uint64_t)s->nblk * BLK,
                   s->op == OP_READ ? RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE
                                    : RDMX_ACCESS_REMOTE_READ,
                   &m));
  q.op = s->op;
  q.tag = t;
  q.nblk = s->nblk;
  q.rkey = m.rkey;
  q.lba = s->lba;
  q.iova = m.iova;
  q.len = m.length;
  client_send(c, t, &q); /* after the map on the same queue: the rkey is valid when it arrives */
  s->rkey = m.rkey;
  s->w = m.window;
  s->busy = 1;
  ++s->issued;
  return 1;
}

static void client_done(struct client* c, struct rsp r, const rdmx_completion* wc) {
  const uint32_t t = r.tag;
  struct slot* s = &c->s[t];
  uint8_t* buf = c->bufs + (uint64_t)t * c->max_io * BLK;
  uint32_t b, i;
  if (r.status || !s->busy) {
    fprintf(stderr, "client: request failed: %d\n", r.status);
    exit(1);
  }
  /* The reply freed our window (SEND_WITH_INV): nothing to unmap. */
  if (!(wc->flags & RDMX_WC_INVALIDATED) || wc->imm != s->rkey || rdmx_window_mapped(s->w)) {
    fprintf(stderr, "client: reply did not invalidate the window\n");
    exit(1);
  }
  for (b = 0; b < s->nblk; ++b) {
    if (s->op == OP_WRITE) {
      ++c->gen[s->lba + b];
      continue;
    }
    for (i = 0; i < BLK; ++i)
      if (buf[b * BLK + i] != pattern(s->lba + b, c->gen[s->lba + b], i)) {
        fprintf(stderr, "client: block %llu byte %u differs\n", (unsigned long long)(s->lba + b),
                i);
        exit(1);
      }
  }
  c->lat[c->n_lat++] = now_us() - s->t0;
  c->bytes += (uint64_t)s->nblk * BLK;
  ++c->done;
  s->busy = 0;
}

static void client_step(struct client* c) {
  rdmx_completion wc[16];
  int n = rdmx_poll(c->core, wc, 16), i, idle = 1;
  uint32_t t;
  for (i = 0; i < n; ++i) {
    if (wc[i].status) {
      fprintf(stderr, "client: %s failed: %s\n", rdmx_opcode_name(wc[i].opcode),
              rdmx_syndrome_name(wc[i].status));
      exit(1);
    }
    if (!(wc[i].flags & RDMX_WC_RECV)) continue;
    /* Replies fill receive buffers in arrival order: the tag names the request. */
    struct rsp r;
    rdmx_sge rb = sge(c->port, c->rx + wc[i].cookie * MSG, MSG);
    memcpy(&r, c->rx + wc[i].cookie * MSG, sizeof r);
    if (r.tag == c->qd) {
      c->stopped = 1;
      continue;
    }
    if (r.tag > c->qd) {
      fprintf(stderr, "client: bad tag\n");
      exit(1);
    }
    client_done(c, r, &wc[i]);
    TRY(rdmx_post_recv(c->core, &rb, 1, wc[i].cookie));
  }
  for (t = 0; t < c->qd; ++t) {
    if (!c->s[t].busy) c->s[t].busy = client_issue(c, t);
    idle &= !c->s[t].busy;
  }
  if (idle && !c->stop_sent) { /* all done: tell the server (reply lands in slot qd) */
    struct req q = {OP_STOP, c->qd, 0, 0, 0, 0, 0};
    client_send(c, 0, &q);
    c->stop_sent = 1;
  }
  rdmx_flush(c->core);
}

static int cmp_d(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

/* ---- Two processes: connect infos through files in /dev/shm ------------------------------- */
struct hello {
  rdmx_connect_info ci;
  uint64_t blocks;
};

static void put_file(const char* wire, const char* who, const struct hello* h) {
  char path[256], tmp[264];
  FILE* f;
  snprintf(path, sizeof path, "/dev/shm/blockd-%s.%s", wire, who);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  if (!(f = fopen(tmp, "wb")) || fwrite(h, sizeof *h, 1, f) != 1 || fclose(f) ||
      rename(tmp, path)) {
    perror(path);
    exit(1);
  }
}
static void get_file(const char* wire, const char* who, struct hello* h) {
  char path[256];
  FILE* f = NULL;
  int i;
  snprintf(path, sizeof path, "/dev/shm/blockd-%s.%s", wire, who);
  struct timespec ms = {0, 1000000};
  for (i = 0; i < 10000 && !(f = fopen(path, "rb")); ++i) nanosleep(&ms, NULL);
  if (!f || fread(h, sizeof *h, 1, f) != 1) {
    fprintf(stderr, "blockd: no %s\n", path);
    exit(1);
  }
  fclose(f);
  unlink(path);
}

int main(int argc, char** argv) {
  const char *device = "emu", *wire = NULL, *role = "both";
  uint64_t blocks = 1024, requests = 20000, max_io = 16;
  uint32_t qd = 8, t;
  int i, is_srv, is_cli;
  struct server s;
  struct client c;
  rdmx_port_opts os, oc;
  for (i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--device"))
      device = argv[i + 1];
    else if (!strcmp(argv[i], "--wire"))
      wire = argv[i + 1];
    else if (!strcmp(argv[i], "--role"))
      role = argv[i + 1];
    else if (!strcmp(argv[i], "--blocks"))
      blocks = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--requests"))
      requests = strtoull(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--qd"))
      qd = (uint32_t)strtoul(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--max-io"))
      max_io = strtoull(argv[i + 1], NULL, 0);
    else
      break;
  }
  is_srv = strcmp(role, "client") != 0;
  is_cli = strcmp(role, "server") != 0;
  if (i < argc || !qd || qd > 63 || !max_io || max_io > 16 || blocks < qd * max_io ||
      (!is_srv && !is_cli) || (wire && strncmp(wire, "shm:", 4)) ||
      (!wire && !(is_srv && is_cli))) {
    fprintf(stderr,
            "usage: blockd [--wire shm:NAME --role server|client] [--device D] "
            "[--blocks N] [--requests N] [--qd 1..63] [--max-io 1..16]\n");
    return 2;
  }
  memset(&s, 0, sizeof s);
  memset(&c, 0, sizeof c);
  rdmx_port_opts_init(&os);
  rdmx_port_opts_init(&oc);
  os.arena_bytes = blocks * BLK + 2 * 64 * MSG;      /* volume + message slots */
  oc.arena_bytes = qd * max_io * BLK + 2 * 64 * MSG; /* I/O buffers + message slots */
  oc.n_windows = os.n_windows = 4 * qd;
  if (!wire) {
    TRY(rdmx_port_open_pair(device, &os, &oc, &s.port, &c.port));
  } else {
    os.wire = oc.wire = wire;
    oc.side = 1;
    TRY(rdmx_port_open(device, is_srv ? &os : &oc, is_srv ? &s.port : &c.port));
  }
  if (is_srv) {
    s.vol = rdmx_port_arena(s.port);
    s.blocks = blocks;
    s.rx = s.vol + blocks * BLK;
    s.tx = s.rx + 64 * MSG;
    s.slots = qd + 1;
    TRY(rdmx_core_create(s.port, NULL, &s.core));
  }
  if (is_cli) {
    c.bufs = rdmx_port_arena(c.port);
    c.tx = c.bufs + qd * max_io * BLK;
    c.rx = c.tx + 64 * MSG;
    c.qd = qd;
    TRY(rdmx_core_create(c.port, NULL, &c.core));
  }
  if (!wire) {
    TRY(rdmx_core_connect_pair(s.core, c.core));
  } else { /* server: its info; client: reads it, connects, answers; server connects, "ready" */
    struct hello h, peer;
    const char* name = wire + 4;
    h.blocks = blocks;
    TRY(rdmx_core_connect_info(is_srv ? s.core : c.core, &h.ci));
    put_file(name, is_srv ? "server" : "client", &h);
    get_file(name, is_srv ? "client" : "server", &peer);
    TRY(rdmx_core_connect(is_srv ? s.core : c.core, &peer.ci));
    if (is_cli) blocks = peer.blocks;
  }
  if (is_srv) {
    for (t = 0; t < s.slots; ++t) server_post_recv(&s, t);
    rdmx_flush(s.core);
  }
  if (wire && is_srv) put_file(wire + 4, "ready", &(struct hello){{{0}}, 0});
  if (wire && is_cli) {
    struct hello r;
    get_file(wire + 4, "ready", &r);
  }
  if (is_cli) {
    rdmx_sge r;
    c.blocks = blocks;
    c.part = blocks / qd;
    c.max_io = max_io;
    c.per_slot_random = requests / qd;
    c.gen = calloc(blocks, sizeof *c.gen);
    c.lat = malloc(sizeof(double) * (2 * blocks + requests + 64));
    for (t = 0; t <= qd; ++t) {
      r = sge(c.port, c.rx + t * MSG, MSG);
      TRY(rdmx_post_recv(c.core, &r, 1, t));
    }
    rdmx_flush(c.core);
  }
  double t0 = now_us();
  while ((is_cli && !c.stopped) || (is_srv && s.stopped != 2)) {
    if (is_srv) server_step(&s);
    if (is_cli) client_step(&c);
  }
  double el = now_us() - t0;
  if (is_cli) {
    rdmx_core_stats st;
    qsort(c.lat, c.n_lat, sizeof(double), cmp_d);
    TRY(rdmx_core_stats_get(c.core, &st, sizeof st));
    printf("blockd: %llu requests (%llu blocks of 4 KiB, qd %u) verified end to end over %s\n",
           (unsigned long long)c.done, (unsigned long long)(c.bytes / BLK), qd, device);
    printf("blockd: %.0f IOPS, %.1f MiB/s; latency us: p50 %.1f  p99 %.1f  max %.1f\n",
           (double)c.done / el * 1e6, (double)c.bytes / el * 1e6 / (1 << 20), c.lat[c.n_lat / 2],
           c.lat[c.n_lat * 99 / 100], c.lat[c.n_lat - 1]);
    printf(
        "blockd: client windows: %llu maps, %llu freed by the server's SEND_WITH_INV, %llu "
        "unmaps\n",
        (unsigned long long)st.maps, (unsigned long long)st.remote_invalidations,
        (unsigned long long)st.unmaps);
    if (st.maps != c.done || st.remote_invalidations != c.done) return 1;
    free(c.gen);
    free(c.lat);
  }
  if (is_srv && !is_cli)
    printf("blockd: server served %llu requests\n", (unsigned long long)s.served);
  rdmx_core_destroy(s.core);
  rdmx_core_destroy(c.core);
  rdmx_port_close(s.port);
  rdmx_port_close(c.port);
  return 0;
}
