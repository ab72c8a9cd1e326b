/* blockd's wire protocol and the server's checks of what a client sends, in one place.
 *
 * A request travels in one SEND from the client into a 64-byte receive slot of the server; the
 * reply comes back in one SEND (SEND_WITH_INV of the request's rkey once the server moved data
 * through it). Fields are in the sender's byte order: both ends run the same build here.
 *
 * Every number in a request comes from a peer and is checked before it is used, by
 * blockd_check_request() below and nowhere else. The checks are written so that they cannot
 * wrap: `lba >= blocks || nblk > blocks - lba`, never `lba + nblk > blocks` (with lba = 2^64 - 16
 * and nblk = 16 that sum is 0, and the request would land on another client's blocks). */
#ifndef BLOCKD_PROTO_H
#define BLOCKD_PROTO_H

#include <stdint.h>

#define BLK 4096u /* bytes per block */
#define MSG 64u   /* message slot */
#define MAXQ 64u  /* message slots per side: the queue depth is at most MAXQ - 1 (+1 for STOP) */
enum { OP_READ = 1, OP_WRITE, OP_STOP };

struct req {
  uint32_t op, tag, nblk, rkey;
  uint64_t lba, iova, len;
};
struct rsp {
  uint32_t tag;
  int32_t status;
};

/* What the server allows one client: its part of the volume, the sizes both sides agreed on. */
struct blockd_limits {
  uint64_t blocks; /* blocks of the client's part of the volume */
  uint32_t qd;     /* request tags 0..qd-1; tag qd is the STOP's */
  uint32_t max_io; /* blocks per request at most */
  uint32_t md;     /* metadata bytes per block (0: none) */
  uint64_t busy;   /* bit t: request tag t is in flight (its reply has not left) */
};

/* The verdict on one request. */
enum blockd_verdict {
  BLOCKD_OK = 0,
  BLOCKD_REFUSE = 1, /* answered with -RDMX_ERANGE; the client stays (a wrong range is its bug) */
  BLOCKD_DROP = 2    /* a protocol violation: the reply slot or the request itself is not
                        trustworthy; the client is dropped */
};

/* Checks a request against the limits. *why says what is wrong (static text) unless BLOCKD_OK.
 * Order matters: the tag is checked before anything is indexed by it, nblk before it is
 * multiplied. */
static inline int blockd_check_request(const struct req* q, const struct blockd_limits* l,
                                       const char** why) {
  if (q->op == OP_STOP) {
    if (q->tag != l->qd) return *why = "a STOP whose tag is not the queue depth", BLOCKD_DROP;
    return BLOCKD_OK;
  }
  if (q->op != OP_READ && q->op != OP_WRITE) return *why = "an unknown operation", BLOCKD_DROP;
  if (q->tag >= l->qd) return *why = "a tag outside the queue depth", BLOCKD_DROP;
  if (l->busy >> q->tag & 1) return *why = "a tag whose request is still in flight", BLOCKD_DROP;
  if (q->nblk == 0 || q->nblk > l->max_io)
    return *why = "a block count of 0 or above --max-io", BLOCKD_REFUSE;
  if (q->lba >= l->blocks || q->nblk > l->blocks - q->lba)
    return *why = "blocks outside its part of the volume", BLOCKD_REFUSE;
  /* nblk <= max_io <= 16 and md <= 128 here: the product cannot wrap. */
  if (q->len != (uint64_t)q->nblk * (BLK + l->md))
    return *why = "a length that is not its blocks' (data and metadata)", BLOCKD_REFUSE;
  return BLOCKD_OK;
}

#endif
