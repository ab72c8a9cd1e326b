/* rdmx C API, RPC-over-RDMA version 1 (RFC 8166): the transport header codec and windows as
 * chunks. Installed beside rdmx.h; see doc/guides/rpcrdma.md.
 *
 * CODEC [any, hot]. rdmx_rpcrdma_decode() reads the header at the start of a received message
 * into an rdmx_rpcrdma_header and returns its length (the RPC message of an RDMA_MSG follows);
 * rdmx_rpcrdma_encode() writes one. No allocation, no system call. A refused header returns
 * -RDMX_RPCRDMA_E* (rdmx_rpcrdma_strerror names it), sets *at to the offset of the field refused,
 * and leaves the output untouched.
 *
 *   rdmx_rpcrdma_header h;
 *   int n = rdmx_rpcrdma_decode(buf, len, RDMX_RPCRDMA_ROLE_CALL, 0, &h, &at);
 *   if (n < 0) ... answer RDMA_ERROR (rdmx_rpcrdma_peek_xid gives the xid) ...
 *   else       ... the RPC call is buf[n .. len), h.writes[] are where its results go ...
 *
 * CHUNKS [hot, one core]. An rdmx_rpcrdma_chunks holds the windows of one RPC call (up to
 * RDMX_RPCRDMA_MAX_CALL_WINDOWS) on one core: map the call's pages into a window and get the
 * segment to put in the header; after the reply, retire them (a window the reply's
 * SEND_WITH_INV named is already invalid, the others are invalidated locally); hand the reply
 * to its caller only when rdmx_rpcrdma_chunks_done() says every window is invalid.
 */
#ifndef RDMX_RDMX_RPCRDMA_H
#define RDMX_RDMX_RPCRDMA_H

#include <stddef.h>
#include <stdint.h>

#include <rdmx/rdmx.h>

#ifdef __cplusplus
extern "C" {
#endif

#define RDMX_RPCRDMA_VERSION 1
#define RDMX_RPCRDMA_INLINE_THRESHOLD 1024 /* RFC 8166 default, both directions */
#define RDMX_RPCRDMA_MAX_SEGMENTS 16       /* per Write chunk, and in the Reply chunk */
#define RDMX_RPCRDMA_MAX_READ_SEGMENTS 16  /* in the Read list */
#define RDMX_RPCRDMA_MAX_WRITE_CHUNKS 4    /* in the Write list */
#define RDMX_RPCRDMA_MAX_CALL_WINDOWS 8    /* windows one rdmx_rpcrdma_chunks holds */

/* rdma_proc. RDMA_MSGP (2) and RDMA_DONE (3) are deprecated: refused. */
enum rdmx_rpcrdma_proc { RDMX_RDMA_MSG = 0, RDMX_RDMA_NOMSG = 1, RDMX_RDMA_ERROR = 4 };
enum rdmx_rpcrdma_errcode { RDMX_RPCRDMA_ERR_VERS = 1, RDMX_RPCRDMA_ERR_CHUNK = 2 };
/* Which side's rules apply besides the format's (doc/guides/rpcrdma.md, "Refusals"). */
enum rdmx_rpcrdma_role {
  RDMX_RPCRDMA_ROLE_ANY = 0,
  RDMX_RPCRDMA_ROLE_CALL = 1,
  RDMX_RPCRDMA_ROLE_REPLY = 2
};

/* Codec errors (returned negated). */
enum rdmx_rpcrdma_error {
  RDMX_RPCRDMA_OK = 0,
  RDMX_RPCRDMA_ETRUNCATED = 1,       /* the buffer ends inside a field */
  RDMX_RPCRDMA_EVERSION = 2,         /* rdma_vers != 1 */
  RDMX_RPCRDMA_EPROC = 3,            /* unknown rdma_proc */
  RDMX_RPCRDMA_EDEPRECATED = 4,      /* RDMA_MSGP or RDMA_DONE */
  RDMX_RPCRDMA_EDISCRIMINATOR = 5,   /* a list discriminator neither 0 nor 1 */
  RDMX_RPCRDMA_ETOOMANYSEGMENTS = 6, /* a chunk or the Read list past its capacity */
  RDMX_RPCRDMA_ETOOMANYCHUNKS = 7,   /* the Write list past its capacity */
  RDMX_RPCRDMA_ECOUNT = 8,           /* a segment count past the end of the header */
  RDMX_RPCRDMA_EZEROLENGTH = 9,      /* a zero-length segment where none is allowed */
  RDMX_RPCRDMA_EEMPTYCHUNK = 10,     /* a call's Write or Reply chunk without segments */
  RDMX_RPCRDMA_EPOSITION = 11,       /* a Read position not a multiple of 4 */
  RDMX_RPCRDMA_ENOMSG = 12,          /* RDMA_NOMSG without the chunk carrying its message */
  RDMX_RPCRDMA_ECHUNKSINERROR = 13,  /* chunk lists in an RDMA_ERROR (encode) */
  RDMX_RPCRDMA_EERRCODE = 14,        /* RDMA_ERROR code neither ERR_VERS nor ERR_CHUNK */
  RDMX_RPCRDMA_EVERSRANGE = 15,      /* ERR_VERS with low > high */
  RDMX_RPCRDMA_ETRAILING = 16,       /* bytes after an RDMA_ERROR or RDMA_NOMSG header */
  RDMX_RPCRDMA_ETOOLONG = 17,        /* past the inline threshold */
  RDMX_RPCRDMA_ENOROOM = 18,         /* encode: buffer shorter than the header */
  RDMX_RPCRDMA_EDIRECTION = 19,      /* a Read list in a reply, RDMA_ERROR in a call */
  RDMX_RPCRDMA_EARG = 64             /* a NULL pointer or an unknown role */
};

typedef struct rdmx_rpcrdma_segment {
  uint32_t handle; /* rkey */
  uint32_t length; /* bytes */
  uint64_t offset; /* address under handle (an rdmx window: zero-based) */
} rdmx_rpcrdma_segment;

typedef struct rdmx_rpcrdma_read_segment {
  uint32_t position; /* XDR position in the RPC message; 0 = the whole message */
  uint32_t reserved;
  rdmx_rpcrdma_segment target;
} rdmx_rpcrdma_read_segment;

typedef struct rdmx_rpcrdma_chunk {
  uint32_t n_segments;
  uint32_t reserved;
  rdmx_rpcrdma_segment segments[RDMX_RPCRDMA_MAX_SEGMENTS];
} rdmx_rpcrdma_chunk;

typedef struct rdmx_rpcrdma_header {
  uint32_t xid;
  uint32_t vers; /* 1 */
  uint32_t credits;
  uint32_t proc; /* enum rdmx_rpcrdma_proc */
  /* RDMA_MSG, RDMA_NOMSG */
  uint32_t n_reads;
  uint32_t n_writes;
  uint32_t has_reply; /* 0 or 1 */
  /* RDMA_ERROR */
  uint32_t err; /* enum rdmx_rpcrdma_errcode */
  uint32_t vers_low, vers_high;
  rdmx_rpcrdma_read_segment reads[RDMX_RPCRDMA_MAX_READ_SEGMENTS];
  rdmx_rpcrdma_chunk writes[RDMX_RPCRDMA_MAX_WRITE_CHUNKS];
  rdmx_rpcrdma_chunk reply;
} rdmx_rpcrdma_header;

/* [any] An RDMA_MSG header with no chunk, version 1, everything else 0. */
RDMX_API void rdmx_rpcrdma_header_init(rdmx_rpcrdma_header* h);
/* [any, hot] Decodes the header at the start of msg[0 .. len) (a whole received message, at most
 * `inline_threshold` bytes; 0 = RDMX_RPCRDMA_INLINE_THRESHOLD). Returns the header's length, or
 * -RDMX_RPCRDMA_E* with *at (if not NULL) = the offset of the field refused; *out is untouched
 * then. */
RDMX_API int rdmx_rpcrdma_decode(const void* msg, size_t len, int role, uint32_t inline_threshold,
                                 rdmx_rpcrdma_header* out, uint32_t* at);
/* [any, hot] Encodes h at the start of buf[0 .. cap): returns the header's length (the RPC
 * message of an RDMA_MSG goes there), or -RDMX_RPCRDMA_E* with nothing written. */
RDMX_API int rdmx_rpcrdma_encode(const rdmx_rpcrdma_header* h, int role, uint32_t inline_threshold,
                                 void* buf, size_t cap);
/* [any] The xid of a message whose header was refused (to answer RDMA_ERROR): 0, or
 * -RDMX_RPCRDMA_ETRUNCATED when len < 4, -RDMX_RPCRDMA_EARG for NULL pointers. */
RDMX_API int rdmx_rpcrdma_peek_xid(const void* msg, size_t len, uint32_t* xid);
/* [any] A sentence / a short name for an RDMX_RPCRDMA_E* code (either sign). Never NULL. */
RDMX_API const char* rdmx_rpcrdma_strerror(int err);
RDMX_API const char* rdmx_rpcrdma_errname(int err);

/* ---- Connection private data (RFC 8797) ------------------------------------------------------
 * 8 bytes for rdma_connect/rdma_accept's private_data: magic 0xf6ab0e18, version 1, flags (bit 0:
 * the sender accepts SEND_WITH_INV), inline send and receive thresholds as (bytes / 1024) - 1. */
#define RDMX_RPCRDMA_CM_PRIVATE_BYTES 8
typedef struct rdmx_rpcrdma_cm_private {
  uint32_t present;             /* decode: 1 when the peer sent RFC 8797 data */
  uint32_t remote_invalidation; /* 1: the sender accepts SEND_WITH_INV naming its memory */
  uint32_t inline_send;         /* bytes: a multiple of 1024 in [1024, 262144] */
  uint32_t inline_recv;
} rdmx_rpcrdma_cm_private;
/* [any] Writes p as RDMX_RPCRDMA_CM_PRIVATE_BYTES bytes at out: 0, or -RDMX_RPCRDMA_EARG for a
 * NULL pointer or a size that is not a multiple of 1024 in range (nothing written). */
RDMX_API int rdmx_rpcrdma_cm_private_encode(const rdmx_rpcrdma_cm_private* p, uint8_t* out);
/* [any] Reads a peer's private data (len bytes; NULL/0 for none). Data that is not RFC 8797's
 * gives present = 0, no remote invalidation and 1024-byte thresholds. */
RDMX_API void rdmx_rpcrdma_cm_private_decode(const void* in, size_t len,
                                             rdmx_rpcrdma_cm_private* out);

/* ---- Windows as chunks ---------------------------------------------------------------------- */
typedef struct rdmx_rpcrdma_chunks rdmx_rpcrdma_chunks;

typedef struct rdmx_rpcrdma_chunk_stats {
  uint64_t maps;                          /* windows mapped as chunks */
  uint64_t remote_invalidations;          /* retired by the reply's SEND_WITH_INV: nothing posted */
  uint64_t local_invalidations;           /* retired by a local invalidate */
  uint64_t unagreed_remote_invalidations; /* SEND_WITH_INV although not agreed (peer's error) */
  uint64_t already_invalid;               /* no longer mapped under the call's rkey at retire */
} rdmx_rpcrdma_chunk_stats;

/* [setup] The chunk set of one call slot on `core` (allocate one per call in flight). */
RDMX_API int rdmx_rpcrdma_chunks_create(rdmx_core* core, rdmx_rpcrdma_chunks** out);
/* [setup] Only when done (or nothing mapped): windows still mapped are left to the core. */
RDMX_API void rdmx_rpcrdma_chunks_destroy(rdmx_rpcrdma_chunks* ch);
/* [hot] Maps `length` bytes of the pages (from first_byte_offset into pages[0]) into a window
 * of the core and writes its segment to *out. 0, or -RDMX_ENOROOM (the call holds
 * RDMX_RPCRDMA_MAX_CALL_WINDOWS), -RDMX_ERANGE (length over 4 GiB - 1), -RDMX_ESTATE (retiring),
 * or rdmx_map()'s errors. */
RDMX_API int rdmx_rpcrdma_chunks_map(rdmx_rpcrdma_chunks* ch, const uint64_t* pages,
                                     uint32_t n_pages, uint32_t access, uint32_t first_byte_offset,
                                     uint64_t length, rdmx_rpcrdma_segment* out);
/* [hot] The same for an interleaved layout (rdmx_map_interleaved()'s parts and blocks: data and
 * its metadata behind one rkey), with the same errors and rdmx_map_interleaved()'s. */
RDMX_API int rdmx_rpcrdma_chunks_map_interleaved(rdmx_rpcrdma_chunks* ch,
                                                 const rdmx_interleaved_part* parts,
                                                 uint32_t n_parts, uint32_t blocks, uint32_t access,
                                                 rdmx_rpcrdma_segment* out);
/* [hot] The reply came (`reply`: its receive completion from rdmx_poll; NULL for a call given up):
 * retires every window. A window whose rkey the reply invalidated (RDMX_WC_INVALIDATED) is not
 * touched; the others are invalidated locally (one doorbell). remote_invalidation: whether the
 * peers agreed on it (RFC 8797). 0, or the unmap's -RDMX_E* (-RDMX_ENOROOM: poll, call again). */
RDMX_API int rdmx_rpcrdma_chunks_retire(rdmx_rpcrdma_chunks* ch, const rdmx_completion* reply,
                                        int remote_invalidation);
/* [hot] 1 once every window of the call is invalid on the device (retired, and the core has
 * polled the last local invalidate's completion): hand the reply up then. Else 0. */
RDMX_API int rdmx_rpcrdma_chunks_done(const rdmx_rpcrdma_chunks* ch);
/* [hot] Ready for the next call: 0, or -RDMX_ESTATE when not done. */
RDMX_API int rdmx_rpcrdma_chunks_reset(rdmx_rpcrdma_chunks* ch);
/* [hot] The segments of the windows held (their count). */
RDMX_API uint32_t rdmx_rpcrdma_chunks_count(const rdmx_rpcrdma_chunks* ch);
/* [any] The counters of this chunk set since its creation. -RDMX_EINVAL for NULL. */
RDMX_API int rdmx_rpcrdma_chunks_stats(const rdmx_rpcrdma_chunks* ch,
                                       rdmx_rpcrdma_chunk_stats* out);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RDMX_RDMX_RPCRDMA_H */
