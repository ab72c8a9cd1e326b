/* blockd's server side: one client's requests served on that client's core, and a client that
 * breaks the protocol dropped alone (its core destroyed, its rendezvous connection closed), so
 * the server goes on serving the others. Used by blockd.c and by the hostile-client fuzzer
 * (tests/fuzz/fuzz_blockd_server.c). */
#ifndef BLOCKD_SERVER_H
#define BLOCKD_SERVER_H

#include <rdmx/rdmx.h>

#include <stdint.h>

#include "blockd_proto.h"

#ifdef __cplusplus
extern "C" {
#endif

/* What a cookie's upper half says. */
enum { K_RECV, K_READ, K_SEND, K_WRITE };
#define COOKIE(k, i) (((uint64_t)(k) << 32) | (i))

struct side {
  rdmx_port* port;
  rdmx_core* core;
  uint8_t *mem, *rx, *tx; /* the arena; MAXQ receive slots, then MAXQ send slots */
};

/* The sizes every client of the server runs with, and the server's policy. */
struct blockd_server_cfg {
  uint64_t blocks; /* blocks per client */
  uint32_t qd, max_io, md;
  uint32_t max_refusals; /* a client with more refused requests than this is dropped */
  int quiet;             /* no log lines (the fuzzer) */
};

enum peer_state {
  PEER_FREE,     /* no client in this slot */
  PEER_JOINING,  /* its hello was taken; connect info being exchanged (blockd.c door_step) */
  PEER_READYING, /* connected, its receives posted; its ready awaited (blockd.c door_step) */
  PEER_RUNNING,  /* serving */
  PEER_STOPPED,  /* its STOP came; the reply to it has not left yet */
  PEER_DONE,     /* the reply to its STOP has left: served to the end */
  PEER_DROPPED   /* dropped (why says why); the slot may take another client */
};

struct peer { /* one client of the server: its core, message slots and part of the volume */
  struct side s;
  rdmx_conn* conn;          /* TCP: the rendezvous connection (closed when the client goes) */
  char name[80];            /* for log lines: the client's address, or "the client" */
  uint8_t *vol, *md;        /* its part of the volume, and of the metadata array (--metadata) */
  struct req pending[MAXQ]; /* its writes whose RDMA READ is in flight */
  rdmx_window* win[MAXQ];   /* --metadata: the volume window of each request in flight */
  uint64_t busy;            /* bit t: request tag t's reply has not left */
  uint64_t served, refused; /* requests served; refused (out of range) */
  int state;                /* enum peer_state */
  char why[128];            /* PEER_DROPPED: what the client did */
};

/* The message helpers both sides use (negative rdmx error on failure). */
rdmx_sge blockd_sge(const struct side* s, void* addr, uint32_t len);
int blockd_post_recv(struct side* s, uint32_t slot);
/* Sends `len` bytes from send slot i; with `inv`, as SEND_WITH_INV of the peer's window `rkey`. */
int blockd_send(struct side* s, uint32_t i, const void* msg, uint32_t len, int inv, uint32_t rkey);

/* Posts one receive per request slot and one for the STOP, and flushes. 0, or the client is
 * dropped (a negative rdmx error). */
int blockd_peer_start(const struct blockd_server_cfg* c, struct peer* P);
/* Polls the client's core once and serves what came. Never exits: a client that breaks the
 * protocol, or whose RDMA fails, is dropped (state PEER_DROPPED, one log line). Returns the
 * completions handled. */
int blockd_serve(const struct blockd_server_cfg* c, struct peer* P);
/* Drops the client: one log line naming it and why, its core destroyed (its windows invalidated
 * and returned), its connection closed. */
void blockd_drop(const struct blockd_server_cfg* c, struct peer* P, const char* why);

#ifdef __cplusplus
}
#endif

#endif
