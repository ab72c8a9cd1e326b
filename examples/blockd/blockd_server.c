/* blockd's server side (blockd_server.h): requests checked in one place (blockd_proto.h), served
 * with RDMA through the client's rkey, and a client that breaks the protocol dropped alone. */
#define _POSIX_C_SOURCE 200809L
#include "blockd_server.h"

#include <stdio.h>
#include <string.h>

rdmx_sge blockd_sge(const struct side* s, void* addr, uint32_t len) {
  rdmx_sge x = {(uint64_t)(uintptr_t)addr, len, rdmx_core_lkey(s->core)}; /* its PD's key */
  return x;
}
int blockd_post_recv(struct side* s, uint32_t slot) {
  rdmx_sge r = blockd_sge(s, s->rx + slot * MSG, MSG);
  return rdmx_post_recv(s->core, &r, 1, COOKIE(K_RECV, slot));
}
int blockd_send(struct side* s, uint32_t i, const void* msg, uint32_t len, int inv, uint32_t rkey) {
  rdmx_sge t = blockd_sge(s, s->tx + i * MSG, len);
  memcpy(s->tx + i * MSG, msg, len);
  return inv ? rdmx_post_send_inv(s->core, &t, 1, rkey, COOKIE(K_SEND, i), 0)
             : rdmx_post_send(s->core, &t, 1, COOKIE(K_SEND, i), 0);
}

void blockd_drop(const struct blockd_server_cfg* c, struct peer* P, const char* why) {
  if (P->state != PEER_READYING && P->state != PEER_RUNNING && P->state != PEER_STOPPED) return;
  snprintf(P->why, sizeof P->why, "%s", why);
  if (!c->quiet)
    fprintf(stderr, "blockd: server: client %s dropped: %s (%llu requests served, %llu refused)\n",
            P->name, P->why, (unsigned long long)P->served, (unsigned long long)P->refused);
  rdmx_core_destroy(P->s.core); /* its windows still mapped are invalidated and returned */
  rdmx_conn_close(P->conn);     /* the client sees its connection end */
  P->s.core = NULL;
  P->conn = NULL;
  P->state = PEER_DROPPED;
}
/* A failed rdmx call on the client's core drops the client; returns rc. */
static int drop_on(const struct blockd_server_cfg* c, struct peer* P, int rc) {
  if (rc < 0) blockd_drop(c, P, rdmx_strerror(rc));
  return rc;
}

int blockd_peer_start(const struct blockd_server_cfg* c, struct peer* P) {
  int rc = 0;
  P->busy = P->served = P->refused = 0;
  P->why[0] = 0;
  P->state = PEER_RUNNING;
  for (uint32_t t = 0; rc >= 0 && t <= c->qd; ++t) rc = blockd_post_recv(&P->s, t);
  if (rc >= 0) rdmx_flush(P->s.core);
  return drop_on(c, P, rc);
}

/* The request's reply: SEND_WITH_INV of its rkey once data moved through it (the client's window
 * is freed on receipt); a plain SEND for a STOP or a refused request, whose rkey is not used. */
static int reply(struct peer* P, const struct req* q, int32_t status, int inv) {
  struct rsp r = {q->tag, status};
  return blockd_send(&P->s, q->tag, &r, sizeof r, inv, q->rkey);
}

/* The reference tag of a block's metadata: its first 4 bytes, the block number (as T10 PI). */
static uint32_t ref_tag(const uint8_t* md) {
  return (uint32_t)md[0] | (uint32_t)md[1] << 8 | (uint32_t)md[2] << 16 | (uint32_t)md[3] << 24;
}

/* The local side of a checked request: the client's blocks, or (--metadata) an interleaved window
 * over them and their metadata, the same layout the client's rkey shows. */
static int volume_sge(const struct blockd_server_cfg* c, struct peer* P, const struct req* q,
                      rdmx_sge* d) {
  rdmx_interleaved_part parts[2];
  rdmx_mapping m;
  int rc;
  if (!c->md) {
    *d = blockd_sge(&P->s, P->vol + q->lba * BLK, (uint32_t)q->len);
    return 0;
  }
  parts[0].addr = (uint64_t)(uintptr_t)(P->vol + q->lba * BLK);
  parts[0].bytes = BLK;
  parts[0].skip = 0;
  parts[1].addr = (uint64_t)(uintptr_t)(P->md + q->lba * c->md);
  parts[1].bytes = c->md;
  parts[1].skip = 0;
  rc = rdmx_map_interleaved(P->s.core, parts, 2, q->nblk, RDMX_ACCESS_LOCAL_WRITE, &m);
  if (rc < 0) return rc;
  P->win[q->tag] = m.window;
  d->addr = m.iova;
  d->length = (uint32_t)m.length;
  d->lkey = m.lkey;
  return 0;
}
/* A client write's data and metadata are in: its reference tags must be its block numbers. */
static int32_t check_written(const struct blockd_server_cfg* c, const struct peer* P,
                             const struct req* q) {
  for (uint32_t b = 0; c->md && b < q->nblk; ++b)
    if (ref_tag(P->md + (q->lba + b) * c->md) != (uint32_t)(q->lba + b)) return -RDMX_EPROTO;
  return 0;
}

/* One request from the client: checked (blockd_check_request), then served. */
static void handle(const struct blockd_server_cfg* c, struct peer* P, const struct req* q) {
  const struct blockd_limits l = {c->blocks, c->qd, c->max_io, c->md, P->busy};
  const char* why = "";
  rdmx_sge d;
  int rc;
  switch (blockd_check_request(q, &l, &why)) {
    case BLOCKD_DROP:
      blockd_drop(c, P, why);
      return;
    case BLOCKD_REFUSE:
      if (++P->refused > c->max_refusals) {
        blockd_drop(c, P, "more refused requests than --max-refusals");
        return;
      }
      if (!c->quiet)
        fprintf(stderr,
                "blockd: server: client %s: request refused: %s (lba %llu, %u blocks, %llu "
                "bytes)\n",
                P->name, why, (unsigned long long)q->lba, q->nblk, (unsigned long long)q->len);
      drop_on(c, P, reply(P, q, -RDMX_ERANGE, 0));
      return;
  }
  if (q->op == OP_STOP) { /* the client is done: it may close its connection from now on */
    P->state = PEER_STOPPED;
    /* Its goodbye: a QP error from now on ends its session (the library's rule). */
    if (P->conn) (void)rdmx_conn_peer_bye(P->conn);
    drop_on(c, P, reply(P, q, 0, 0));
    return;
  }
  if (drop_on(c, P, volume_sge(c, P, q, &d)) < 0) return;
  if (q->op == OP_READ) { /* volume -> client window; the reply is ordered after it */
    rc = rdmx_post_write(P->s.core, &d, 1, q->iova, q->rkey, COOKIE(K_WRITE, q->tag), 0);
    if (rc >= 0) rc = reply(P, q, 0, 1);
    /* The invalidate waits (fenced) for the WRITE that gathers from the window. */
    if (rc >= 0 && c->md) rc = rdmx_unmap(P->s.core, P->win[q->tag]);
  } else { /* client window -> volume; the reply waits for the READ's completion */
    P->pending[q->tag] = *q;
    P->busy |= 1ull << q->tag;
    rc = rdmx_post_read(P->s.core, &d, 1, q->iova, q->rkey, COOKIE(K_READ, q->tag),
                        RDMX_POST_SIGNALED);
  }
  if (drop_on(c, P, rc) >= 0) ++P->served;
}

/* A client write's RDMA READ completed: its data is in the volume. */
static void written(const struct blockd_server_cfg* c, struct peer* P, uint32_t tag) {
  const struct req* q = &P->pending[tag];
  int rc = reply(P, q, check_written(c, P, q), 1);
  if (rc >= 0 && c->md) rc = rdmx_unmap(P->s.core, P->win[tag]); /* its READ completed: no fence */
  P->busy &= ~(1ull << tag);
  drop_on(c, P, rc);
}

int blockd_serve(const struct blockd_server_cfg* c, struct peer* P) {
  rdmx_completion wc[16];
  int n, i;
  if (P->state != PEER_RUNNING && P->state != PEER_STOPPED) return 0;
  if ((n = drop_on(c, P, rdmx_poll(P->s.core, wc, 16))) < 0) return 0;
  for (i = 0; i < n && P->s.core; ++i) {
    const uint32_t k = (uint32_t)(wc[i].cookie >> 32), slot = (uint32_t)wc[i].cookie;
    struct req q;
    if (wc[i].status) { /* e.g. its rkey refused our READ or WRITE: the QP is in error */
      char why[96];
      snprintf(why, sizeof why, "%s failed: %s", rdmx_opcode_name(wc[i].opcode),
               rdmx_syndrome_name(wc[i].status));
      /* After its STOP the client may leave before our reply's ACK: its session ends, it was
       * served to its end (rdmx_conn_qp_error); before, it is dropped. */
      if (P->state == PEER_STOPPED && P->conn && rdmx_conn_qp_error(P->conn, why) == 0) {
        if (!c->quiet)
          printf("blockd: server: client %s left after its STOP (%s): served to its end\n", P->name,
                 why);
        fflush(stdout);
        P->state = PEER_DONE;
        break;
      }
      blockd_drop(c, P, why);
      break;
    }
    if (k == K_SEND && slot == c->qd && P->state == PEER_STOPPED) P->state = PEER_DONE;
    if (k == K_READ) written(c, P, slot);
    if (k != K_RECV) continue;
    memcpy(&q, P->s.rx + slot * MSG, sizeof q);
    if (drop_on(c, P, blockd_post_recv(&P->s, slot)) < 0) break;
    handle(c, P, &q);
  }
  if (n > 0 && P->s.core) rdmx_flush(P->s.core);
  return n;
}
