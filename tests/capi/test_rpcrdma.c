/* The RPC-over-RDMA C API (rdmx_rpcrdma.h) from C99: the codec against XDR words written out by
 * hand, its refusals, and whole calls over emu whose Write chunk is an rdmx window, retired after
 * a SEND_WITH_INV reply (nothing to invalidate) and after a plain SEND reply (a local invalidate
 * that rdmx_rpcrdma_chunks_done() waits for). Exit status 0 = pass. */
#define _POSIX_C_SOURCE 200809L

#include <rdmx/rdmx.h>
#include <rdmx/rdmx_rpcrdma.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

/* XDR words (big-endian) to bytes; returns the byte count. */
static size_t xdr(uint8_t* out, const uint32_t* words, size_t n) {
  size_t i;
  for (i = 0; i < n; ++i) {
    out[4 * i] = (uint8_t)(words[i] >> 24);
    out[4 * i + 1] = (uint8_t)(words[i] >> 16);
    out[4 * i + 2] = (uint8_t)(words[i] >> 8);
    out[4 * i + 3] = (uint8_t)words[i];
  }
  return 4 * n;
}

#define XID 0x0badcafeu

static void test_codec(void) {
  /* RDMA_MSG: no Read list, one Write chunk of one segment, no Reply chunk; then the RPC call. */
  static const uint32_t call[] = {XID, 1, 16, 0, 0, 1, 1, 0x4401, 8192, 0, 0x1000, 0, 0, XID};
  static const uint32_t bad_vers[] = {XID, 2, 16, 0, 0, 0, 0};
  static const uint32_t nomsg_bare[] = {XID, 1, 16, 1, 0, 0, 0};
  static const uint32_t err_vers[] = {XID, 1, 4, 4, 1, 1, 1};
  uint8_t buf[256], out[256];
  rdmx_rpcrdma_header h, untouched;
  uint32_t at = 0, xid = 0;
  size_t len = xdr(buf, call, sizeof(call) / 4);
  int n;

  n = rdmx_rpcrdma_decode(buf, len, RDMX_RPCRDMA_ROLE_CALL, 0, &h, &at);
  CHECK_RC(n, 52);
  CHECK(h.xid == XID && h.vers == 1 && h.credits == 16 && h.proc == RDMX_RDMA_MSG);
  CHECK(h.n_reads == 0 && h.n_writes == 1 && h.has_reply == 0);
  CHECK(h.writes[0].n_segments == 1 && h.writes[0].segments[0].handle == 0x4401);
  CHECK(h.writes[0].segments[0].length == 8192 && h.writes[0].segments[0].offset == 0x1000);
  /* Re-encoded: the same header bytes. */
  memset(out, 0xee, sizeof(out));
  CHECK_RC(rdmx_rpcrdma_encode(&h, RDMX_RPCRDMA_ROLE_CALL, 0, out, sizeof(out)), 52);
  CHECK(memcmp(out, buf, 52) == 0 && out[52] == 0xee);
  /* Too small a buffer: nothing written. */
  memset(out, 0xee, sizeof(out));
  CHECK_RC(rdmx_rpcrdma_encode(&h, RDMX_RPCRDMA_ROLE_CALL, 0, out, 51), -RDMX_RPCRDMA_ENOROOM);
  CHECK(out[0] == 0xee);

  /* Refusals: the code, the offset, the output untouched. */
  memset(&h, 0x5a, sizeof(h));
  memcpy(&untouched, &h, sizeof(h));
  len = xdr(buf, bad_vers, sizeof(bad_vers) / 4);
  CHECK_RC(rdmx_rpcrdma_decode(buf, len, RDMX_RPCRDMA_ROLE_ANY, 0, &h, &at),
           -RDMX_RPCRDMA_EVERSION);
  CHECK(at == 4);
  CHECK(memcmp(&h, &untouched, sizeof(h)) == 0);
  CHECK_RC(rdmx_rpcrdma_peek_xid(buf, len, &xid), 0);
  CHECK(xid == XID);
  CHECK_RC(rdmx_rpcrdma_peek_xid(buf, 3, &xid), -RDMX_RPCRDMA_ETRUNCATED);
  len = xdr(buf, nomsg_bare, sizeof(nomsg_bare) / 4);
  CHECK_RC(rdmx_rpcrdma_decode(buf, len, RDMX_RPCRDMA_ROLE_ANY, 0, &h, &at), -RDMX_RPCRDMA_ENOMSG);
  CHECK_RC(rdmx_rpcrdma_decode(buf, 10, RDMX_RPCRDMA_ROLE_ANY, 0, &h, &at),
           -RDMX_RPCRDMA_ETRUNCATED);
  CHECK(at == 8);
  CHECK(memcmp(&h, &untouched, sizeof(h)) == 0);
  CHECK_RC(rdmx_rpcrdma_decode(buf, len, 3, 0, &h, &at), -RDMX_RPCRDMA_EARG);
  CHECK_RC(rdmx_rpcrdma_decode(buf, len, RDMX_RPCRDMA_ROLE_ANY, 0, NULL, &at), -RDMX_RPCRDMA_EARG);
  CHECK(strcmp(rdmx_rpcrdma_errname(-RDMX_RPCRDMA_ENOMSG), "nomsg-without-chunks") == 0);
  CHECK(strstr(rdmx_rpcrdma_strerror(RDMX_RPCRDMA_EVERSION), "version") != NULL);
  CHECK(strcmp(rdmx_rpcrdma_errname(1000), "unknown") == 0);

  /* RDMA_ERROR ERR_VERS, built from an initialised header. */
  rdmx_rpcrdma_header_init(&h);
  h.xid = XID;
  h.credits = 4;
  h.proc = RDMX_RDMA_ERROR;
  h.err = RDMX_RPCRDMA_ERR_VERS;
  h.vers_low = h.vers_high = 1;
  len = xdr(buf, err_vers, sizeof(err_vers) / 4);
  CHECK_RC(rdmx_rpcrdma_encode(&h, RDMX_RPCRDMA_ROLE_REPLY, 0, out, sizeof(out)), (int)len);
  CHECK(memcmp(out, buf, len) == 0);
  h.n_writes = 1;
  CHECK_RC(rdmx_rpcrdma_encode(&h, RDMX_RPCRDMA_ROLE_REPLY, 0, out, sizeof(out)),
           -RDMX_RPCRDMA_ECHUNKSINERROR);
}

static void test_cm_private(void) {
  static const uint8_t linux_client[8] = {0xf6, 0xab, 0x0e, 0x18, 0x01, 0x01, 0x03, 0x03};
  rdmx_rpcrdma_cm_private p;
  uint8_t out[RDMX_RPCRDMA_CM_PRIVATE_BYTES];
  rdmx_rpcrdma_cm_private_decode(linux_client, sizeof(linux_client), &p);
  CHECK(p.present == 1 && p.remote_invalidation == 1);
  CHECK(p.inline_send == 4096 && p.inline_recv == 4096);
  CHECK_RC(rdmx_rpcrdma_cm_private_encode(&p, out), 0);
  CHECK(memcmp(out, linux_client, sizeof(out)) == 0);
  p.inline_recv = 1000;
  CHECK_RC(rdmx_rpcrdma_cm_private_encode(&p, out), -RDMX_RPCRDMA_EARG);
  rdmx_rpcrdma_cm_private_decode(NULL, 0, &p);
  CHECK(p.present == 0 && p.remote_invalidation == 0 && p.inline_send == 1024);
}

/* One call whose Write chunk is a window of A; B writes into it and replies with SEND_WITH_INV
 * naming it (`invalidate`) or with SEND. */
static void test_call(const char* device, int invalidate) {
  rdmx_port *pa, *pb;
  rdmx_core *ca, *cb;
  rdmx_rpcrdma_chunks* ch = NULL;
  rdmx_rpcrdma_segment seg;
  rdmx_rpcrdma_header h, got;
  rdmx_rpcrdma_chunk_stats st;
  rdmx_sge s;
  rdmx_completion wc, reply;
  rdmx_port_info info;
  uint64_t pages[4];
  uint8_t* b_mem;
  uint32_t b_lkey, lkey_a, at = 0;
  int n, i;
  double end;

  REQUIRE(rdmx_port_open_pair(device, NULL, NULL, &pa, &pb) == 0);
  REQUIRE(rdmx_core_create(pa, NULL, &ca) == 0);
  REQUIRE(rdmx_core_create(pb, NULL, &cb) == 0);
  REQUIRE(rdmx_core_connect_pair(ca, cb) == 0);
  b_mem = (uint8_t*)rdmx_port_arena(pb);
  b_lkey = rdmx_port_lkey(pb);
  lkey_a = rdmx_port_lkey(pa);
  REQUIRE(rdmx_pages_alloc(pa, pages, 4) == 0);

  /* Receives: A's reply in page 3, B's call at 64 KiB into its arena. */
  s.addr = pages[3];
  s.length = 1024;
  s.lkey = lkey_a;
  CHECK_RC(rdmx_post_recv(ca, &s, 1, 42), 0);
  s.addr = (uint64_t)(uintptr_t)(b_mem + 65536);
  s.lkey = b_lkey;
  CHECK_RC(rdmx_post_recv(cb, &s, 1, 50), 0);
  rdmx_flush(cb);

  /* A: the Write chunk, then the call. */
  REQUIRE(rdmx_rpcrdma_chunks_create(ca, &ch) == 0);
  CHECK_RC(rdmx_rpcrdma_chunks_map(ch, pages, 2, RDMX_ACCESS_REMOTE_RW, 0, 8192, &seg), 0);
  CHECK(seg.length == 8192 && seg.offset == 0 && rdmx_rpcrdma_chunks_count(ch) == 1);
  rdmx_flush(ca);
  CHECK_RC(rdmx_core_quiesce(ca, 0), 0);
  rdmx_rpcrdma_header_init(&h);
  h.xid = XID;
  h.credits = 8;
  h.n_writes = 1;
  h.writes[0].n_segments = 1;
  h.writes[0].segments[0] = seg;
  n = rdmx_rpcrdma_encode(&h, RDMX_RPCRDMA_ROLE_CALL, 0, (void*)(uintptr_t)pages[2], 1024);
  REQUIRE(n > 0);
  s.addr = pages[2];
  s.length = (uint32_t)n;
  s.lkey = lkey_a;
  CHECK_RC(rdmx_post_send(ca, &s, 1, 43, RDMX_POST_SIGNALED), 0);
  rdmx_flush(ca);

  /* B: decode, write through the chunk, reply. */
  REQUIRE(wait_cookie(cb, 50, &wc));
  n = rdmx_rpcrdma_decode(b_mem + 65536, wc.bytes, RDMX_RPCRDMA_ROLE_CALL, 0, &got, &at);
  CHECK(n > 0);
  REQUIRE(got.n_writes == 1);
  memset(b_mem, 0x5a, 8192);
  s.addr = (uint64_t)(uintptr_t)b_mem;
  s.length = got.writes[0].segments[0].length;
  s.lkey = b_lkey;
  CHECK_RC(rdmx_post_write(cb, &s, 1, got.writes[0].segments[0].offset,
                           got.writes[0].segments[0].handle, 51, RDMX_POST_SIGNALED),
           0);
  rdmx_rpcrdma_header_init(&h);
  h.xid = XID;
  h.credits = 8;
  n = rdmx_rpcrdma_encode(&h, RDMX_RPCRDMA_ROLE_REPLY, 0, b_mem + 131072, 1024);
  REQUIRE(n > 0);
  s.addr = (uint64_t)(uintptr_t)(b_mem + 131072);
  s.length = (uint32_t)n;
  if (invalidate)
    CHECK_RC(
        rdmx_post_send_inv(cb, &s, 1, got.writes[0].segments[0].handle, 52, RDMX_POST_SIGNALED), 0);
  else
    CHECK_RC(rdmx_post_send(cb, &s, 1, 52, RDMX_POST_SIGNALED), 0);
  rdmx_flush(cb);

  /* A: the reply; retire the chunk; hand the reply up only when done. */
  REQUIRE(wait_cookie(ca, 42, &reply));
  CHECK(reply.status == 0);
  CHECK(((reply.flags & RDMX_WC_INVALIDATED) != 0) == (invalidate != 0));
  CHECK(rdmx_rpcrdma_chunks_done(ch) == 0);
  CHECK_RC(rdmx_rpcrdma_chunks_retire(ch, &reply, 1), 0);
  CHECK_RC(rdmx_rpcrdma_chunks_stats(ch, &st), 0);
  CHECK(st.maps == 1);
  if (invalidate) {
    CHECK(st.remote_invalidations == 1 && st.local_invalidations == 0);
    CHECK(rdmx_rpcrdma_chunks_done(ch) == 1);
  } else {
    CHECK(st.remote_invalidations == 0 && st.local_invalidations == 1);
    /* The invalidate's completion has not been polled yet. */
    CHECK(rdmx_rpcrdma_chunks_done(ch) == 0);
    CHECK_RC(rdmx_rpcrdma_chunks_reset(ch), -RDMX_ESTATE);
    end = now_s() + 5.0;
    while (!rdmx_rpcrdma_chunks_done(ch) && now_s() < end) {
      rdmx_completion x[4];
      if (rdmx_poll(ca, x, 4) == 0) rdmx_port_progress(pa);
    }
    CHECK(rdmx_rpcrdma_chunks_done(ch) == 1);
  }
  CHECK_RC(rdmx_rpcrdma_chunks_reset(ch), 0);
  CHECK(rdmx_rpcrdma_chunks_count(ch) == 0);
  {
    /* An interleaved chunk (2 blocks of 512 + 8 bytes), given up without a reply. */
    rdmx_interleaved_part parts[2];
    rdmx_rpcrdma_segment iseg;
    parts[0].addr = pages[0];
    parts[0].bytes = 512;
    parts[0].skip = 0;
    parts[1].addr = pages[1];
    parts[1].bytes = 8;
    parts[1].skip = 0;
    CHECK_RC(rdmx_rpcrdma_chunks_map_interleaved(ch, parts, 2, 2, RDMX_ACCESS_REMOTE_RW, &iseg), 0);
    CHECK(iseg.length == 2 * 520 && rdmx_rpcrdma_chunks_count(ch) == 1);
    CHECK_RC(rdmx_rpcrdma_chunks_retire(ch, NULL, 1), 0);
    end = now_s() + 5.0;
    while (!rdmx_rpcrdma_chunks_done(ch) && now_s() < end) {
      rdmx_completion x[4];
      if (rdmx_poll(ca, x, 4) == 0) rdmx_port_progress(pa);
    }
    CHECK_RC(rdmx_rpcrdma_chunks_reset(ch), 0);
  }
  for (i = 0; i < 8192; ++i) {
    const uint8_t* a = (const uint8_t*)(uintptr_t)pages[i / 4096];
    if (a[i % 4096] != 0x5a) {
      CHECK(a[i % 4096] == 0x5a);
      break;
    }
  }
  /* The responder can no longer reach the chunk. */
  s.addr = (uint64_t)(uintptr_t)b_mem;
  s.length = 16;
  CHECK_RC(rdmx_post_write(cb, &s, 1, seg.offset, seg.handle, 53, RDMX_POST_SIGNALED), 0);
  rdmx_flush(cb);
  REQUIRE(wait_cookie(cb, 53, &wc));
  CHECK(wc.status == 0x13);
  CHECK_RC(rdmx_core_recover_pair(ca, cb), 0);

  rdmx_rpcrdma_chunks_destroy(ch);
  CHECK_RC(rdmx_port_query(pa, &info), 0);
  CHECK(info.emu_checker_reports == 0);
  CHECK_RC(rdmx_port_query(pb, &info), 0);
  CHECK(info.emu_checker_reports == 0);
  rdmx_core_destroy(ca);
  rdmx_core_destroy(cb);
  rdmx_port_close(pa);
  rdmx_port_close(pb);
}

int main(void) {
  test_codec();
  test_cm_private();
  test_call("emu-inline", 1);
  test_call("emu-inline", 0);
  test_call("emu-threaded", 1);
  test_call("emu-threaded", 0);
  if (g_failures) {
    fprintf(stderr, "test_rpcrdma: %d check(s) failed\n", g_failures);
    return 1;
  }
  printf("test_rpcrdma: all checks passed\n");
  return 0;
}
