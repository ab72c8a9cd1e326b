/* blockd's request checks (examples/blockd/blockd_proto.h), field by field at 0, the largest
 * value, one below it and the wrap points: what a client may send and what it may not. Pure C,
 * no device. */
#include <stdint.h>
#include <stdio.h>

#include "blockd_proto.h"

static int g_failed, g_checked;

static void expect(int line, const struct req* q, const struct blockd_limits* l, int want) {
  const char* why = "";
  const int got = blockd_check_request(q, l, &why);
  ++g_checked;
  if (got == want && (got == BLOCKD_OK || *why)) return;
  ++g_failed;
  printf("line %d: op %u tag %u nblk %u lba %llu len %llu: verdict %d (%s), expected %d\n", line,
         q->op, q->tag, q->nblk, (unsigned long long)q->lba, (unsigned long long)q->len, got, why,
         want);
}
#define EXPECT(q, l, want) expect(__LINE__, &(q), &(l), (want))

/* A request of nblk blocks at lba with the right length for the limits. */
static struct req rq(uint32_t op, uint32_t tag, uint64_t lba, uint32_t nblk,
                     const struct blockd_limits* l) {
  struct req q = {op, tag, nblk, 0x1234, lba, 0x10000, (uint64_t)nblk * (BLK + l->md)};
  return q;
}

int main(void) {
  struct blockd_limits l = {1024, 8, 16, 0, 0};
  struct req q;
  uint32_t md;

  /* op: READ and WRITE served, STOP with the STOP's tag; anything else breaks the protocol. */
  q = rq(OP_READ, 0, 0, 1, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_WRITE, 0, 0, 1, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(0, 0, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_STOP + 1, 0, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(UINT32_MAX, 0, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_STOP, 8, 0, 0, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_STOP, 7, 0, 0, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_STOP, 9, 0, 0, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_STOP, UINT32_MAX, 0, 0, &l), EXPECT(q, l, BLOCKD_DROP);

  /* tag: 0..qd-1; qd is the STOP's; above it, and one whose request is in flight, drop. */
  q = rq(OP_READ, 7, 0, 1, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 8, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_READ, 9, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_READ, 63, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_READ, 64, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP); /* a shift by 64 is undefined */
  q = rq(OP_READ, UINT32_MAX, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  l.busy = 1u << 3;
  q = rq(OP_WRITE, 3, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_WRITE, 2, 0, 1, &l), EXPECT(q, l, BLOCKD_OK);
  l.busy = 0;

  /* nblk: 1..max_io. */
  q = rq(OP_READ, 0, 0, 0, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, 16, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 0, 0, 15, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 0, 0, 17, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, UINT32_MAX, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, UINT32_MAX - 1, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, 1u << 20, &l), EXPECT(q, l, BLOCKD_REFUSE); /* x 4096 wraps 32 bits */

  /* lba: the blocks lba..lba+nblk-1 inside 0..blocks-1, whatever the sum would wrap to. */
  q = rq(OP_READ, 0, 0, 1, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 0, 1023, 1, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 0, 1023, 2, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 1008, 16, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 0, 1009, 16, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 1024, 1, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 1025, 1, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_WRITE, 0, UINT64_MAX - 15, 16, &l), EXPECT(q, l, BLOCKD_REFUSE); /* sum wraps to 0 */
  q = rq(OP_READ, 0, UINT64_MAX - 15, 16, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, UINT64_MAX, 1, &l), EXPECT(q, l, BLOCKD_REFUSE); /* sum wraps to 0 */
  q = rq(OP_READ, 0, UINT64_MAX - 1, 2, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, UINT64_MAX - 1, 1, &l), EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, (uint64_t)1 << 52, 1, &l), EXPECT(q, l, BLOCKD_REFUSE); /* x 4096 wraps */
  q = rq(OP_READ, 0, (uint64_t)1 << 63, 1, &l), EXPECT(q, l, BLOCKD_REFUSE);

  /* len: exactly nblk x (4096 + metadata). */
  q = rq(OP_READ, 0, 0, 2, &l), q.len += 1, EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, 2, &l), q.len -= 1, EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, 2, &l), q.len = 0, EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, 2, &l), q.len = UINT64_MAX, EXPECT(q, l, BLOCKD_REFUSE);
  q = rq(OP_READ, 0, 0, 2, &l), q.len = (uint64_t)2 * BLK + ((uint64_t)1 << 32), /* low 32 */
      EXPECT(q, l, BLOCKD_REFUSE);
  for (md = 4; md <= 128; md *= 2) { /* with metadata the length counts it too */
    l.md = md;
    q = rq(OP_WRITE, 1, 1008, 16, &l), EXPECT(q, l, BLOCKD_OK);
    q = rq(OP_WRITE, 1, 1008, 16, &l), q.len = 16 * BLK, EXPECT(q, l, BLOCKD_REFUSE);
  }
  l.md = 0;

  /* The largest volume and depth the server takes (--blocks 2^24, --qd 63, --max-io 16). */
  l.blocks = (uint64_t)1 << 24, l.qd = MAXQ - 1;
  q = rq(OP_READ, 62, l.blocks - 16, 16, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 63, l.blocks - 16, 16, &l), EXPECT(q, l, BLOCKD_DROP);
  q = rq(OP_STOP, 63, 0, 0, &l), EXPECT(q, l, BLOCKD_OK);
  q = rq(OP_READ, 0, l.blocks - 15, 16, &l), EXPECT(q, l, BLOCKD_REFUSE);
  l.busy = UINT64_MAX >> 1; /* tags 0..62 in flight */
  q = rq(OP_READ, 62, 0, 1, &l), EXPECT(q, l, BLOCKD_DROP);

  printf("blockd_proto: %d of %d checks failed\n", g_failed, g_checked);
  return g_failed ? 1 : 0;
}
