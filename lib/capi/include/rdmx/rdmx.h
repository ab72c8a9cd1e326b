/* rdmx C API: poll-mode RDMA windows for mlx5, for C and C++ daemons.
 *
 * A thin, stable layer over the C++ API (rdmx::win::PollCore and friends). Three opaque handles:
 *
 *   rdmx_port    one device endpoint: the device (emu or mlx5), its registered arena (rdmx's
 *                memory or the caller's buffer) and its window pool.
 *   rdmx_core    one poll core on a port: a queue pair (SQ, RQ, CQ) and the core's window cache.
 *   rdmx_window  one window (an indirect mkey), handed out by rdmx_map().
 *
 *   rdmx_port* port;  rdmx_core* core;  rdmx_mapping m;
 *   rdmx_port_open("mlx5_0", NULL, &port);            -- or rdmx_port_open_pair("emu", ...)
 *   rdmx_core_create(port, NULL, &core);  ... connect it ...
 *   rdmx_map_buf(core, buf, len, RDMX_ACCESS_REMOTE_RW, &m);   -- give the peer m.rkey, m.iova
 *   ... rdmx_post_send(...); rdmx_flush(core); rdmx_poll(core, wc, 16); ...
 *   rdmx_unmap(core, m.window); rdmx_flush(core);
 *
 * ERRORS. Functions returning int return 0 (or a count) on success and a negative code
 * -RDMX_E* on failure; rdmx_strerror() names it. Setup functions also leave a message
 * (what failed and why) in a thread-local buffer read by rdmx_last_error(). No C++ exception
 * ever leaves the library.
 *
 * THREAD RULES (every function says which applies):
 *   [setup]    control path: may allocate and make system calls. Thread-safe with respect to other
 *              setup calls on the same port, but not with hot-path calls on a core being
 *              created, connected, recovered or destroyed.
 *   [hot]      data path: no allocation, no lock, no system call (over an mlx5 device).
 *              A core's hot-path calls must come from one thread at a time (the core's poll
 *              thread); different cores may run on different threads in parallel.
 *   [any]      pure functions, callable from any thread at any time.
 *
 * Nothing posted reaches the device before rdmx_flush() rings the doorbell (once per burst).
 */
#ifndef RDMX_RDMX_H
#define RDMX_RDMX_H

#include <stddef.h>
#include <stdint.h>

#if defined(_WIN32)
#error "rdmx runs on Linux only"
#endif
#if defined(RDMX_BUILDING_LIBRARY)
#define RDMX_API __attribute__((visibility("default")))
#else
#define RDMX_API
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ---------------------------------------------------------------------------------
 * RDMX_VERSION is the version of the header; rdmx_version() that of the library at run time.
 * Within one major version the API and ABI only grow (new functions, new fields at the end of
 * option structs, which carry their own size). */
#define RDMX_VERSION_MAJOR 0
#define RDMX_VERSION_MINOR 1
#define RDMX_VERSION_PATCH 0
#define RDMX_MAKE_VERSION(major, minor, patch) (((major) << 16) | ((minor) << 8) | (patch))
#define RDMX_VERSION RDMX_MAKE_VERSION(RDMX_VERSION_MAJOR, RDMX_VERSION_MINOR, RDMX_VERSION_PATCH)

/* [any] RDMX_VERSION of the library that is loaded. */
RDMX_API unsigned rdmx_version(void);
/* [any] The same as "MAJOR.MINOR.PATCH". */
RDMX_API const char* rdmx_version_string(void);

/* ---- Errors ----------------------------------------------------------------------------------
 * Returned negated (-RDMX_ENOWINDOW). The values mirror rdmx::Errc one to one. */
enum rdmx_errc {
  RDMX_OK = 0,
  RDMX_EINVAL = 1,        /* a malformed argument (NULL handle, bad flags, zero count, ...) */
  RDMX_ERANGE = 2,        /* offset/length/index beyond a limit */
  RDMX_ETOOMANYPAGES = 3, /* more chunk pages than a window holds (or than the output holds) */
  RDMX_ENOTINARENA = 4,   /* a page or buffer outside the registered arena, or misaligned */
  RDMX_ENOWINDOW = 5,     /* no free window in the core's cache nor in the port's depot */
  RDMX_ENOTMAPPED = 6,    /* the window is not mapped (unmapped, or freed by the peer) */
  RDMX_EWRONGCORE = 7,    /* the window belongs to another core */
  RDMX_ENOROOM = 8,       /* the send/receive queue is full: poll, then retry */
  RDMX_EQPERROR = 9,      /* the queue pair is in the error state: rdmx_core_recover() */
  RDMX_ENODEV = 10,       /* no such device */
  RDMX_EDEVICE = 11,      /* the device or a driver call failed */
  RDMX_ENOMEM = 12,       /* out of memory (setup), or no free chunk page */
  RDMX_ENOTSUP = 13,      /* not supported by this device or backend */
  RDMX_EBUSY = 14,        /* resource in use (pointer-mode window still read by the device) */
  RDMX_ETIMEDOUT = 15,    /* a bounded wait expired */
  RDMX_ESTATE = 16,       /* not allowed in the current state */
  RDMX_EPROTO = 17,   /* bytes from a peer (rdmx_connect_info) malformed, foreign or corrupted */
  RDMX_EINTERNAL = 64 /* an unexpected internal failure (C API only); see rdmx_last_error */
};

/* [any] A short sentence for a code; accepts RDMX_E* and -RDMX_E*. Never NULL. */
RDMX_API const char* rdmx_strerror(int err);
/* [any] The stable short name ("no-window", ...) as used in rdmx stats and logs. Never NULL. */
RDMX_API const char* rdmx_errname(int err);
/* [any] The message of the last failed setup call on this thread ("" when none failed yet).
 * Valid until the next setup call on this thread. Hot-path calls do not touch it. */
RDMX_API const char* rdmx_last_error(void);

/* ---- Access rights of a mapping (values of ibv_access_flags) ------------------------------- */
#define RDMX_ACCESS_LOCAL_WRITE 0x1u
#define RDMX_ACCESS_REMOTE_WRITE 0x2u /* needs RDMX_ACCESS_LOCAL_WRITE */
#define RDMX_ACCESS_REMOTE_READ 0x4u
#define RDMX_ACCESS_REMOTE_ATOMIC 0x8u /* needs RDMX_ACCESS_LOCAL_WRITE */
#define RDMX_ACCESS_REMOTE_RW \
  (RDMX_ACCESS_LOCAL_WRITE | RDMX_ACCESS_REMOTE_WRITE | RDMX_ACCESS_REMOTE_READ)

/* ---- Handles -------------------------------------------------------------------------------- */
typedef struct rdmx_port rdmx_port;
typedef struct rdmx_core rdmx_core;
typedef struct rdmx_window rdmx_window;

/* ---- Ports -----------------------------------------------------------------------------------
 * Device names (one grammar for every rdmx entry point; doc/guides/embedding.md):
 *   "emu"           the emulated mlx5 device with its own device thread, like a NIC
 *                   (the same as "emu-threaded").
 *   "emu-inline"    the emulated device executing work on the doorbell (and pumping an
 *                   in-process peer): deterministic; on a "shm:" wire it runs threaded.
 *   "emu-sink"      every work request completes successfully and moves no data.
 *   "mlx5"          the first mlx5 device; "mlx5_0" or any other word: that verbs device.
 *   Suffixes: "@shm:NAME" (wire), ",port=N", ",gid=N", ",side=0|1", ",timeout=MS" override the
 *   matching options. A name that names no device: -RDMX_ENODEV, rdmx_last_error() lists them.
 *
 * Options: fill with rdmx_port_opts_init() (or RDMX_PORT_OPTS_INIT), then change fields.
 * NULL = all defaults. `size` lets the struct grow: the library reads only `size` bytes. */
typedef struct rdmx_port_opts {
  size_t size; /* sizeof(rdmx_port_opts) of the caller */
  /* emu wiring (ignored for mlx5): NULL or "" = a private in-process wire (rdmx_port_open_pair
   * joins its two ports with one); "shm:NAME" = a wire shared by two processes through
   * /dev/shm/rdmx-emu-NAME: side 0 creates it (and removes the name when it closes), side 1
   * attaches (retried for up to attach_timeout_ms). */
  const char* wire;
  int side;                   /* 0 or 1 */
  uint32_t attach_timeout_ms; /* default 5000 */
  /* Memory. Default: rdmx allocates arena_bytes of mappable memory (rounded up to whole pages)
   * plus what the windows' tables need at its tail (rdmx_port_info.arena_bytes tells the
   * total). With user_buf set, the caller's buffer is registered instead: page_size aligned,
   * user_buf_len bytes, kept alive by the caller until rdmx_port_close(); the tables then come
   * out of it (rdmx_port_info.data_bytes tells what stays mappable). */
  size_t arena_bytes; /* the data part; default 16 MiB */
  void* user_buf;
  size_t user_buf_len;
  uint32_t page_size; /* chunk page: 4096 (default), 65536 or 2 MiB */
  /* Windows. */
  uint32_t n_windows;    /* all windows of the port, shared by its cores; default 256 */
  uint32_t max_pages;    /* chunk pages per window (per mapping); default 16 */
  int remote_invalidate; /* windows may be freed by the peer's SEND_WITH_INV; default 1 */
  uint32_t max_cores;    /* default 64 */
  /* mlx5 only. */
  uint8_t ib_port; /* HCA port; default 1 */
  int gid_index;   /* -1 (default): RoCE v2 IPv4 GID / none on InfiniBand */
  /* The key each map gives a window (doc/guides/security.md): RDMX_KEYS_RANDOM (default) or
   * RDMX_KEYS_INCREMENT (previous + 1: predictable, for debugging only). */
  int key_policy;
} rdmx_port_opts;

#define RDMX_KEYS_RANDOM 0
#define RDMX_KEYS_INCREMENT 1

#define RDMX_PORT_OPTS_INIT                                                                        \
  {                                                                                                \
    sizeof(rdmx_port_opts), NULL, 0, 5000, (size_t)16 << 20, NULL, 0, 4096, 256, 16, 1, 64, 1, -1, \
        RDMX_KEYS_RANDOM                                                                           \
  }

/* [any] Fills *o with the defaults (and o->size). */
RDMX_API void rdmx_port_opts_init(rdmx_port_opts* o);

/* [setup] Opens one port. Errors: -RDMX_EINVAL (bad options), -RDMX_ENODEV (no such device;
 * rdmx_last_error() names it), -RDMX_EDEVICE, -RDMX_ENOMEM, -RDMX_ENOTSUP, -RDMX_ETIMEDOUT
 * (shm side 1: no side 0 appeared). */
RDMX_API int rdmx_port_open(const char* device, const rdmx_port_opts* opts, rdmx_port** out);

/* [setup] emu only: two ports joined by one in-process wire (a = side 0, b = side 1), in the
 * same mode. Options may differ per side (NULL = defaults); their wire/side fields are
 * ignored. -RDMX_ENOTSUP for an mlx5 device name. */
RDMX_API int rdmx_port_open_pair(const char* device, const rdmx_port_opts* opts_a,
                                 const rdmx_port_opts* opts_b, rdmx_port** a, rdmx_port** b);

/* [setup] Destroys the port's cores that are still open (their handles become invalid; no
 * thread may be using them), its windows, its arena registration and the device. NULL is a
 * no-op. Ports joined by a wire may be closed in any order. */
RDMX_API void rdmx_port_close(rdmx_port* port);

/* What a port is (rdmx_port_query). */
typedef struct rdmx_port_info {
  char device[64];    /* device name ("emu0", "mlx5_0", ...) */
  char backend[16];   /* "emu-inline", "emu-threaded", "emu-sink" or "mlx5" (emu@roce:ADDR is
                       * "emu-threaded": the wire is the device name's business) */
  void* arena_base;   /* the registered memory */
  size_t arena_bytes; /* registered bytes */
  size_t data_bytes;  /* the mappable part from arena_base; the rest holds window tables */
  uint32_t page_size;
  uint32_t n_pages; /* chunk pages in the data part */
  uint32_t lkey;    /* local key of the whole arena, for SGEs */
  uint32_t n_windows;
  uint32_t max_pages;           /* most pages one mapping may hold */
  uint32_t depot_windows;       /* windows in the shared depot now (not in any core's cache) */
  uint32_t free_pages;          /* chunk pages rdmx_pages_alloc() can still hand out */
  uint64_t emu_checker_reports; /* emu: PRM rule violations reported by the device (0 = clean) */
} rdmx_port_info;

/* [setup] Describes the port. -RDMX_EINVAL for NULL. */
RDMX_API int rdmx_port_query(rdmx_port* port, rdmx_port_info* out);
/* [any] The arena's base address / local key (for SGEs over arena memory). */
RDMX_API void* rdmx_port_arena(const rdmx_port* port);
RDMX_API uint32_t rdmx_port_lkey(const rdmx_port* port);

/* [setup] Proves that every window of the port is in exactly one place (a core's cache, the
 * depot, or mapped) and that none is lost. Only while no core of the port is running.
 * -RDMX_ESTATE with the inconsistency in rdmx_last_error(). */
RDMX_API int rdmx_port_check(rdmx_port* port);

/* [setup] emu: runs one device poll by hand (inline devices on their own run on every doorbell;
 * this releases delayed work). Returns 1 if it did work, 0 if not; 0 on mlx5. */
RDMX_API int rdmx_port_progress(rdmx_port* port);

/* ---- Asynchronous events -----------------------------------------------------------------------
 * What the port's device reports outside any completion (ibv_get_async_event(3) on mlx5, emu's
 * own). Above all: a peer's request this side refused (a wrong, stale or foreign rkey: QP_ACCESS
 * _ERR; an invalid request: QP_REQ_ERR) moved this side's QP, the responder, to the error state
 * as on any RC device; the core must be recovered (rdmx_core_recover_pair) or the peer dropped. */
enum rdmx_event_kind {
  RDMX_EVENT_QP_FATAL = 0,     /* IBV_EVENT_QP_FATAL */
  RDMX_EVENT_QP_REQ_ERR,       /* IBV_EVENT_QP_REQ_ERR */
  RDMX_EVENT_QP_ACCESS_ERR,    /* IBV_EVENT_QP_ACCESS_ERR */
  RDMX_EVENT_COMM_EST,         /* IBV_EVENT_COMM_EST */
  RDMX_EVENT_SQ_DRAINED,       /* IBV_EVENT_SQ_DRAINED */
  RDMX_EVENT_LAST_WQE_REACHED, /* IBV_EVENT_QP_LAST_WQE_REACHED */
  RDMX_EVENT_CQ_ERR,           /* IBV_EVENT_CQ_ERR (qpn: the CQ number) */
  RDMX_EVENT_PORT_ACTIVE,      /* IBV_EVENT_PORT_ACTIVE (qpn: the port) */
  RDMX_EVENT_PORT_ERR,         /* IBV_EVENT_PORT_ERR (qpn: the port) */
  RDMX_EVENT_DEVICE_FATAL,     /* IBV_EVENT_DEVICE_FATAL */
  RDMX_EVENT_OTHER             /* any other event */
};
typedef struct rdmx_event {
  uint32_t kind; /* enum rdmx_event_kind */
  uint32_t qpn;  /* the QP (rdmx_core_qpn); the CQ or the port for those kinds */
} rdmx_event;
/* [setup] Up to n events of the port's device, oldest first; returns how many (0: none). Never
 * waits (mlx5: the async fd is non-blocking; every event read is acknowledged). -RDMX_EINVAL for
 * NULL. Call it from the control thread, e.g. after rdmx_poll reported an error. */
RDMX_API int rdmx_poll_events(rdmx_port* port, rdmx_event* out, uint32_t n);
/* [any] "qp-access-err", "qp-req-err", "qp-fatal", ...; "other" for an unknown kind. */
RDMX_API const char* rdmx_event_name(uint32_t kind);

/* ---- Chunk pages -----------------------------------------------------------------------------
 * A chunk page is named by its address (uint64_t, page_size aligned, inside the data part).
 * The port's page allocator hands out pages of the whole data part: use it, or carve the arena
 * yourself (rdmx_port_query), not both. */

/* [setup] All-or-nothing: n pages into pages[], or -RDMX_ENOMEM and nothing taken.
 * Thread-safe (a lock); not for the hot path. */
RDMX_API int rdmx_pages_alloc(rdmx_port* port, uint64_t* pages, uint32_t n);
/* [setup] Returns pages. -RDMX_ENOTINARENA (not a data page), -RDMX_EINVAL (already free);
 * pages before the bad one are freed. */
RDMX_API int rdmx_pages_free(rdmx_port* port, const uint64_t* pages, uint32_t n);
/* [hot][any thread] The chunk pages under the buffer [addr, addr+len) of the arena's data part:
 * writes them to pages[] (at most max) and the offset of addr in the first page. Returns the
 * page count, or -RDMX_EINVAL (len 0), -RDMX_ENOTINARENA, -RDMX_ETOOMANYPAGES (max too small). */
RDMX_API int rdmx_buf_pages(const rdmx_port* port, const void* addr, uint64_t len, uint64_t* pages,
                            uint32_t max, uint32_t* first_byte_offset);

/* ---- Poll cores ------------------------------------------------------------------------------ */
typedef struct rdmx_core_opts {
  size_t size;           /* sizeof(rdmx_core_opts) of the caller */
  uint32_t cache_size;   /* windows cached per core; default 64 */
  uint32_t sq_depth;     /* send queue, 64-byte slots, power of two; default 1024 */
  uint32_t rq_depth;     /* receive queue entries, power of two (0 = none); default 256 */
  uint32_t cq_depth;     /* completion queue entries, power of two; default 4096 */
  uint32_t rq_sges;      /* scatter entries per receive; default 1 */
  uint32_t max_inline;   /* inline data bytes; default 0 */
  uint32_t signal_every; /* request a CQE every N unsignaled WQEs; default 16 */
  /* Isolation between peers (doc/guides/security.md): with isolate = 1 the core gets a
   * protection domain of its own and own_windows windows of its own (0 = 2 x cache_size, at
   * least 4), instead of the port's shared windows. Give each connected peer such a core: a
   * remote access arriving on its QP through any other core's window, and on any other core's
   * QP through its windows, is refused by the device whatever the key. Local SGEs on it use
   * rdmx_core_lkey(). The port's max_pages must not exceed the device's inline translation
   * limit (-RDMX_ENOTSUP otherwise; 16 always fits). Default 0. */
  int isolate;
  uint32_t own_windows;
  /* Type-2 memory windows of this core (rdmx_bind_mw), allocated at create in the core's
   * protection domain; -RDMX_ENOTSUP on a device without them. Default 0. */
  uint32_t memory_windows;
} rdmx_core_opts;

#define RDMX_CORE_OPTS_INIT \
  { sizeof(rdmx_core_opts), 64, 1024, 256, 4096, 1, 0, 16, 0, 0, 0 }

/* [any] Fills *o with the defaults (and o->size). */
RDMX_API void rdmx_core_opts_init(rdmx_core_opts* o);

/* [setup] Creates a poll core on the port (its queue pair, not yet connected, and its window
 * cache filled from the depot). Then connect it: rdmx_core_connect_pair() in one process, or
 * rdmx_core_connect_info() + rdmx_core_connect() across processes. */
RDMX_API int rdmx_core_create(rdmx_port* port, const rdmx_core_opts* opts, rdmx_core** out);

/* [setup] Quiesces the core (windows still mapped are invalidated), returns its windows to the
 * depot and destroys its queue pair. Completions not yet polled are dropped. NULL is a no-op. */
RDMX_API void rdmx_core_destroy(rdmx_core* core);

/* What a peer needs to connect to a core: plain bytes, to be sent over any channel (a socket, a
 * file, a pipe). Endianness independent. The first 56 bytes are rdmx's versioned connect-info
 * encoding (magic "RDXI", version, length, big-endian fields, CRC-32; the same bytes rdmx sends
 * over librdmacm and rdmafwd's rendezvous: rdmx/mlx5/connect_info.hpp); the last 8 are zero. */
typedef struct rdmx_connect_info {
  uint8_t bytes[64];
} rdmx_connect_info;

/* [setup] Fills *out with this core's connect information. */
RDMX_API int rdmx_core_connect_info(rdmx_core* core, rdmx_connect_info* out);
/* [setup] Connects this core's queue pair to the peer core described by *remote (to RTS).
 * -RDMX_EPROTO for bytes that are not an rdmx_connect_info (truncated, foreign, another version,
 * corrupted): rdmx_last_error() says which. */
RDMX_API int rdmx_core_connect(rdmx_core* core, const rdmx_connect_info* remote);
/* [setup] Connects two cores of one process (each to the other). */
RDMX_API int rdmx_core_connect_pair(rdmx_core* a, rdmx_core* b);

/* ---- Meeting a peer over TCP (rendezvous) ---------------------------------------------------
 * So that an application does not hand-roll sockets to exchange rdmx_connect_info: a server
 * listens, a client connects, and both exchange the connect info of their cores (one QP each)
 * in rdmx's framed, versioned rendezvous (the one rdmafwd --listen/--peer uses; see
 * doc/guides/two-hosts.md). Plain kernel TCP, on the setup path only.
 *
 *   server                                      client
 *   rdmx_listen("7471", &l);
 *   rdmx_accept(l, 0, NULL, &c);                rdmx_connect_to("host:7471", 0, NULL, &c);
 *   rdmx_conn_exchange(c, cores, n, 0, NULL);   rdmx_conn_exchange(c, cores, n, 0, NULL);
 *   ... post the receives ...                   ... post the receives ...
 *   rdmx_conn_ready(c, 0, NULL);                rdmx_conn_ready(c, 0, NULL);
 *   ... traffic; rdmx_conn_send/recv for the application's own messages ...
 *
 * Every wait is bounded: timeout_ms, or when 0 the default (rdmx_accept 120000, rdmx_connect_to
 * 30000: a refused connection is retried until then; every other exchange 10000), and stops
 * early, with -RDMX_ESTATE ("interrupted"), once *cancel (may be NULL; e.g. a flag a SIGINT
 * handler sets) is nonzero: it is looked at every 50 ms. Errors: -RDMX_EINVAL (an address that
 * does not parse or resolve, or is not this host's), -RDMX_EBUSY (port in use), -RDMX_ETIMEDOUT,
 * -RDMX_EPROTO (the peer is not an rdmx rendezvous, speaks another version, closed the
 * connection, or sent bad connect info), -RDMX_ESTATE; rdmx_last_error() says which in one
 * line. The exchange states the link of the cores' device ("shm": emu's shared memory;
 * "network": emu@roce, mlx5) and a server on the other link refuses the client before any
 * connect info goes: both exchanges return -RDMX_EINVAL ("the client runs link shm, this server
 * network: start both on one link: ..."). Bad connect info is answered with a refusal naming the
 * fault (the peer's exchange returns -RDMX_EPROTO, "refused by ADDR: ..."); after an error of the
 * exchange or ready steps the connection is over (its socket closed): close it. Handles are closed
 * by rdmx_listener_close/rdmx_conn_close (NULL is a no-op). */
typedef struct rdmx_listener rdmx_listener;
typedef struct rdmx_conn rdmx_conn;

/* [setup] Listens on "[ADDR:]PORT" ("7471" = 0.0.0.0:7471, "10.0.0.1:7471", "[::1]:7471";
 * port 0 picks a free one, see rdmx_listener_port). */
RDMX_API int rdmx_listen(const char* address, rdmx_listener** out);
/* [setup] The bound port, and the address as "ADDR:PORT" (for the "waiting on" line). */
RDMX_API unsigned rdmx_listener_port(const rdmx_listener* l);
RDMX_API const char* rdmx_listener_address(const rdmx_listener* l);
/* [setup] The next client. */
RDMX_API int rdmx_accept(rdmx_listener* l, uint32_t timeout_ms, const volatile int* cancel,
                         rdmx_conn** out);
RDMX_API void rdmx_listener_close(rdmx_listener* l);
/* [setup] Connects to "HOST[:PORT]" (port 7471 when none). */
RDMX_API int rdmx_connect_to(const char* peer, uint32_t timeout_ms, const volatile int* cancel,
                             rdmx_conn** out);
/* [setup] "HOST:PORT" of the other end. */
RDMX_API const char* rdmx_conn_peer(const rdmx_conn* c);

/* ---- The rendezvous with rdma_cm (mlx5) -----------------------------------------------------
 * With rdmx_conn_opts.cm = 1 the two sides still meet over TCP for what the application says
 * (rdmx_conn_send/recv, the ready step), but rdmx_conn_exchange connects the cores' queue pairs
 * through rdma_cm (librdmacm) instead of sending their connect info over the socket: the server
 * also listens in rdma_cm's port space (RDMA_PS_TCP) on the same address and port number, and
 * the client's exchange connects core i to the server's core i there, each REQ/REP carrying the
 * 56-byte connect info as private data. rdma_cm resolves the route: a core must live on the
 * device, port and GID the route goes through (refused otherwise, naming the GID index to use),
 * and each queue pair takes the route's parameters (DGID, hop limit, traffic class, SL, path
 * MTU and the RC timers rdma_cm states: doc/guides/two-hosts.md). Both sides must use the same
 * choice. The exchange then waits for the rdma_cm handshakes (also rdmx_conn_try_exchange: at
 * most timeout_ms, 0 = 10000, per core); rdmx_conn_reconnect reconnects through rdma_cm again.
 * Errors beyond the rendezvous's: -RDMX_ENOTSUP for a port that is not a real mlx5 device (emu
 * has no rdma_cm: meet over the rendezvous without cm), -RDMX_ENODEV where rdma_cm finds no RDMA
 * device (librdmacm's "No such device"), -RDMX_EDEVICE for another librdmacm failure. */
typedef struct rdmx_conn_opts {
  size_t size;     /* sizeof(rdmx_conn_opts) of the caller */
  int cm;          /* 1: connect the cores through rdma_cm; 0 (default): the TCP rendezvous */
  rdmx_port* port; /* with cm: the port whose cores the connection(s) will carry, checked at
                    * once (NULL: checked by the exchange, on each core's port) */
} rdmx_conn_opts;

#define RDMX_CONN_OPTS_INIT \
  { sizeof(rdmx_conn_opts), 0, NULL }

/* [any] Fills *o with the defaults (and o->size). */
RDMX_API void rdmx_conn_opts_init(rdmx_conn_opts* o);
/* [setup] rdmx_listen with options (NULL = rdmx_listen). With cm the rdma_cm listener is made
 * here too. */
RDMX_API int rdmx_listen_opts(const char* address, const rdmx_conn_opts* opts, rdmx_listener** out);
/* [setup] rdmx_connect_to with options (NULL = rdmx_connect_to). With cm and a port, the port is
 * checked before any connection is made. */
RDMX_API int rdmx_connect_to_opts(const char* peer, uint32_t timeout_ms, const volatile int* cancel,
                                  const rdmx_conn_opts* opts, rdmx_conn** out);
/* [setup] Sends the connect info of cores[0..n), receives the peer's and connects cores[i] to
 * the peer's i-th (both sides call it with the same n: -RDMX_EPROTO otherwise). The peer's
 * list is checked before any core is connected (-RDMX_EPROTO: another count, a QPN twice, a
 * field outside the codec's rules such as QP0/QP1 or a multicast GID); a core the device then
 * refuses puts the cores connected before it back to RESET, so nothing of a refused peer stays
 * connected. */
RDMX_API int rdmx_conn_exchange(rdmx_conn* c, rdmx_core* const* cores, uint32_t n,
                                uint32_t timeout_ms, const volatile int* cancel);
/* [setup] Says "my receives are posted" and waits for the peer to say so: after it, sends may
 * start on both sides. */
RDMX_API int rdmx_conn_ready(rdmx_conn* c, uint32_t timeout_ms, const volatile int* cancel);
/* [setup] The application's own messages (at most 16384 bytes each). rdmx_conn_recv returns
 * the message's length (the bytes beyond cap are dropped) and -RDMX_EPROTO when the peer
 * closed the connection. */
RDMX_API int rdmx_conn_send(rdmx_conn* c, const void* buf, size_t len, uint32_t timeout_ms,
                            const volatile int* cancel);
RDMX_API int rdmx_conn_recv(rdmx_conn* c, void* buf, size_t cap, uint32_t timeout_ms,
                            const volatile int* cancel);
/* ---- Serving many clients: the same rendezvous without waiting on any one client -------------
 * rdmx_accept + rdmx_conn_recv wait on one connection: a client that connects and sends nothing
 * holds every other client at the door. A server that must not wait (it serves other clients
 * meanwhile) calls these from its loop instead; each returns at once:
 *
 *   n = rdmx_accept_hello(l, 0, buf, sizeof buf, &len, &c);   1: c's hello is in buf
 *   ... check it, answer with rdmx_conn_send, create the client's core ...
 *   rdmx_conn_try_exchange(c, &core, 1, 0)    until 1 (0: not yet)
 *   ... post the core's receives ...
 *   rdmx_conn_try_ready(c, 0)                 until 1; then the client runs
 *
 * The listener holds every connection whose hello has not come yet (at most 64), each with
 * hello_ms (0 = 10000) from its accept; try_exchange/try_ready give the peer timeout_ms (0 =
 * 10000) from their first call. A connection that misses its time, sends foreign bytes, another
 * frame or closes is refused: the call returns a negative code (-RDMX_ETIMEDOUT, -RDMX_EPROTO,
 * -RDMX_EBUSY beyond the 64) and rdmx_last_error() is one line naming the peer. For
 * rdmx_accept_hello the listener already closed that connection (call again for the others);
 * for the try_ calls, close it (rdmx_conn_close). -RDMX_EDEVICE: the listening socket failed.
 * Setup path, one thread per listener. */
RDMX_API int rdmx_accept_hello(rdmx_listener* l, uint32_t hello_ms, void* buf, size_t cap,
                               size_t* len, rdmx_conn** out);
RDMX_API int rdmx_conn_try_exchange(rdmx_conn* c, rdmx_core* const* cores, uint32_t n,
                                    uint32_t timeout_ms);
RDMX_API int rdmx_conn_try_ready(rdmx_conn* c, uint32_t timeout_ms);

/* [setup] Without waiting: 1 once the peer closed the connection (it ended or died). */
RDMX_API int rdmx_conn_peer_gone(const rdmx_conn* c);
/* [setup] The peer's goodbye came on the data path (the application's own last message, such as
 * blockd's STOP): from now on a QP error of the connection's cores ends the connection rather
 * than failing it (rdmx_conn_qp_error). 0, or -RDMX_ESTATE when the connection is not running
 * (rdmx_conn_ready not done, or already ended). */
RDMX_API int rdmx_conn_peer_bye(rdmx_conn* c);
/* [setup] A core of the connection completed work in error (its QP is in the error state; `what`
 * names it, e.g. "SEND failed: transport-retry-exceeded"). After the peer's goodbye
 * (rdmx_conn_peer_bye) this ends the connection and is not a failure: the peer may leave as soon
 * as it has this side's last reply, before that reply's ACK comes, and this side's retransmission
 * then fails; returns 0. Before it: -RDMX_EQPERROR, rdmx_last_error() naming the peer and `what`
 * (the connection is dropped). */
RDMX_API int rdmx_conn_qp_error(rdmx_conn* c, const char* what);
RDMX_API void rdmx_conn_close(rdmx_conn* c);

/* [hot] The core's port. */
RDMX_API rdmx_port* rdmx_core_port(const rdmx_core* core);
/* [any] The number of the core's queue pair: what rdmx_event.qpn names. */
RDMX_API uint32_t rdmx_core_qpn(const rdmx_core* core);
/* [any] The local key of the port's arena for SGEs posted on this core: rdmx_port_lkey() of its
 * port, or, for an isolated core (rdmx_core_opts.isolate), the arena's key in the core's own
 * protection domain (the port's key there is a local protection error). */
RDMX_API uint32_t rdmx_core_lkey(const rdmx_core* core);

/* ---- Windows (hot path) ---------------------------------------------------------------------- */
typedef struct rdmx_mapping {
  rdmx_window* window; /* for rdmx_unmap() */
  uint32_t rkey;       /* give the peer rkey, iova and length */
  uint32_t lkey;       /* the same key, for local SGEs over the window */
  uint64_t iova;       /* address of the first mapped byte in the window (0: zero-based) */
  uint64_t length;
} rdmx_mapping;

/* [hot] Maps n_pages chunk pages of the port's arena into a free window of this core (one UMR
 * WQE on the core's send queue; nothing is sent before rdmx_flush()). Bytes 0..length-1 of the
 * window are `length` bytes starting first_byte_offset into pages[0]. The mapping may be used
 * at once by work requests posted after it on this core, and by the peer once it received the
 * rkey in a message this core posted after the map. Each map gives the window a new key, so a
 * peer holding an older rkey is refused by the device.
 * Errors (nothing posted): -RDMX_EINVAL (no pages, length 0, bad access bits, remote write or
 * atomic without local write), -RDMX_ETOOMANYPAGES, -RDMX_ERANGE (offset not in the first page
 * or length not ending in the last one), -RDMX_ENOTINARENA, -RDMX_EQPERROR, -RDMX_ENOROOM
 * (poll, retry), -RDMX_ENOWINDOW, -RDMX_EBUSY (poll, retry). */
RDMX_API int rdmx_map(rdmx_core* core, const uint64_t* pages, uint32_t n_pages, uint32_t access,
                      uint32_t first_byte_offset, uint64_t length, rdmx_mapping* out);

/* [hot] rdmx_buf_pages() + rdmx_map(): maps the arena buffer [addr, addr+len). */
RDMX_API int rdmx_map_buf(rdmx_core* core, const void* addr, uint64_t len, uint32_t access,
                          rdmx_mapping* out);

/* One part of every block of an interleaved layout: `bytes` bytes of the port's arena at `addr`
 * in block 0, `bytes + skip` further on in each next block (bytes + skip <= 65535). */
typedef struct rdmx_interleaved_part {
  uint64_t addr;
  uint32_t bytes;
  uint32_t skip;
} rdmx_interleaved_part;

/* [hot] Maps an interleaved layout into a free window of this core (one repeat-block UMR, the
 * translation mlx5dv_wr_mr_interleaved builds): window bytes are part 0 of block 0, part 1 of
 * block 0, ..., part 0 of block 1, ... for `blocks` blocks, so a peer's WRITE or READ of the
 * window moves data and metadata kept in separate arrays (sectors and their protection
 * information, say) in one operation; length = blocks * the sum of the parts' bytes. Key
 * rotation, rdmx_unmap() and stats as for rdmx_map(). At most the window's page count (and the
 * inline limit) - 1 parts. Errors (nothing posted): -RDMX_EINVAL (no parts, blocks 0, a part of
 * 0 bytes, bad access bits), -RDMX_ETOOMANYPAGES (too many parts), -RDMX_ERANGE (bytes + skip
 * over 65535, length over the window's), -RDMX_ENOTINARENA (some block's bytes outside the
 * arena), -RDMX_EQPERROR, -RDMX_ENOROOM, -RDMX_ENOWINDOW, -RDMX_ENOTSUP (atomic access on a
 * device that cannot grant it by UMR). */
RDMX_API int rdmx_map_interleaved(rdmx_core* core, const rdmx_interleaved_part* parts,
                                  uint32_t n_parts, uint32_t blocks, uint32_t access,
                                  rdmx_mapping* out);

/* ---- Type-2 memory windows (doc/guides/windows.md, "Windows or memory windows?") --------------
 * A memory window exposes one contiguous range of the port's arena through an rkey that the
 * device honours on this core's QP only: a peer on any other connection is refused whatever the
 * key, without a protection domain per peer. Each bind gives it a new key. */
typedef struct rdmx_mw rdmx_mw;
typedef struct rdmx_mw_binding {
  rdmx_mw* mw;
  uint32_t rkey; /* for the peer */
  uint64_t iova; /* the peer's address of the first byte: addr, or 0 (RDMX_MW_ZERO_BASED) */
  uint64_t length;
} rdmx_mw_binding;
#define RDMX_MW_ZERO_BASED 1u /* rdmx_bind_mw flag: the peer addresses the range from 0 */

/* [hot] Binds a free memory window of this core (rdmx_core_opts.memory_windows) to `len` bytes
 * of the arena at `addr` (one bind WQE on the core's send queue; rdmx_flush() sends it). access:
 * RDMX_ACCESS_REMOTE_READ / _WRITE (and _ATOMIC) only. Usable by the peer once it received the
 * rkey in a message this core posted after the bind. Errors (nothing posted): -RDMX_EINVAL
 * (len 0, other access bits, or none; unknown flags), -RDMX_ERANGE (len over 2 GiB),
 * -RDMX_ENOTINARENA, -RDMX_ENOTSUP (atomic on a device that cannot grant it), -RDMX_EQPERROR,
 * -RDMX_ENOROOM, -RDMX_ENOWINDOW (every memory window of the core is bound). */
RDMX_API int rdmx_bind_mw(rdmx_core* core, const void* addr, uint64_t len, uint32_t access,
                          unsigned flags, rdmx_mw_binding* out);
/* [hot] Invalidates a bound memory window of this core (one WQE): the peer's accesses that
 * arrive after it executed are refused; the window is free for the next bind at once. A
 * peer's SEND_WITH_INV naming its rkey frees it too (seen while polling). Errors (nothing
 * posted): -RDMX_EINVAL (not one of this core's), -RDMX_ENOTMAPPED (not bound), -RDMX_EQPERROR,
 * -RDMX_ENOROOM. */
RDMX_API int rdmx_invalidate_mw(rdmx_core* core, rdmx_mw* mw);

typedef struct rdmx_map_req {
  const uint64_t* pages;
  uint32_t n_pages;
  uint32_t access;
  uint64_t length;
  uint32_t first_byte_offset;
  uint32_t reserved; /* 0 */
} rdmx_map_req;

/* [hot] Maps reqs[0..n) in order until one fails; out[i] for i < the returned count. *err (may
 * be NULL) is 0, or the -RDMX_E* of the request that stopped the burst. */
RDMX_API size_t rdmx_map_burst(rdmx_core* core, const rdmx_map_req* reqs, size_t n,
                               rdmx_mapping* out, int* err);

/* [hot] Unmaps a window this core mapped: one invalidate UMR (after the work requests that used
 * it); the window is reusable by this core at once, and the old rkey is dead for the peer once
 * the UMR executed. Errors (nothing posted): -RDMX_EINVAL (not a window of the port),
 * -RDMX_EWRONGCORE, -RDMX_ENOTMAPPED (already unmapped, or freed by the peer's SEND_WITH_INV),
 * -RDMX_EQPERROR, -RDMX_ENOROOM. */
RDMX_API int rdmx_unmap(rdmx_core* core, rdmx_window* w);
/* [hot] Unmaps in order until one fails; returns how many were unmapped; *err as for bursts. */
RDMX_API size_t rdmx_unmap_burst(rdmx_core* core, rdmx_window* const* ws, size_t n, int* err);

/* [hot][any thread] The current mapping's values (valid while the window is mapped). */
RDMX_API uint32_t rdmx_window_rkey(const rdmx_window* w);
RDMX_API uint64_t rdmx_window_length(const rdmx_window* w);
/* [hot] 1 while the window is mapped (not unmapped, not freed by the peer). */
RDMX_API int rdmx_window_mapped(const rdmx_window* w);

/* ---- Work requests (hot path) ----------------------------------------------------------------
 * Local memory is a list of SGEs over the arena (lkey = rdmx_port_lkey()) or over a window
 * (lkey = rdmx_mapping.lkey, addr = the window offset). Cookies are the caller's; bit 63 is
 * reserved for rdmx (-RDMX_EINVAL). Every work request posted yields exactly one completion
 * (RDMX_WC_SIGNALED tells whether the device reported it or a later one covered it).
 * Errors (nothing posted): -RDMX_EINVAL (cookie bit 63, too many SGEs), -RDMX_EQPERROR,
 * -RDMX_ENOROOM (poll, then retry). */
typedef struct rdmx_sge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
} rdmx_sge;

#define RDMX_POST_SIGNALED 0x1u /* ask the device for a CQE for this WQE */

/* [hot] RDMA WRITE of the local SGEs to the peer's (raddr, rkey). */
RDMX_API int rdmx_post_write(rdmx_core* core, const rdmx_sge* local, uint32_t n_sge, uint64_t raddr,
                             uint32_t rkey, uint64_t cookie, unsigned flags);
/* [hot] RDMA READ of the peer's (raddr, rkey) into the local SGEs. */
RDMX_API int rdmx_post_read(rdmx_core* core, const rdmx_sge* local, uint32_t n_sge, uint64_t raddr,
                            uint32_t rkey, uint64_t cookie, unsigned flags);
/* [hot] SEND (consumes one receive the peer posted). */
RDMX_API int rdmx_post_send(rdmx_core* core, const rdmx_sge* local, uint32_t n_sge, uint64_t cookie,
                            unsigned flags);
/* [hot] SEND_WITH_INV: also frees the peer's window `invalidate_rkey` on receipt (the peer's
 * completion has RDMX_WC_INVALIDATED and imm = that rkey; the peer must not unmap it). */
RDMX_API int rdmx_post_send_inv(rdmx_core* core, const rdmx_sge* local, uint32_t n_sge,
                                uint32_t invalidate_rkey, uint64_t cookie, unsigned flags);
/* [hot] Posts one receive buffer (its completion: RDMX_WC_RECV). */
RDMX_API int rdmx_post_recv(rdmx_core* core, const rdmx_sge* local, uint32_t n_sge,
                            uint64_t cookie);
/* [hot] Rings the doorbell(s) once for everything posted (maps and unmaps included). */
RDMX_API void rdmx_flush(rdmx_core* core);

/* ---- Completions (hot path) ------------------------------------------------------------------ */
enum rdmx_opcode {
  RDMX_OP_WRITE = 1,
  RDMX_OP_WRITE_IMM = 2,
  RDMX_OP_READ = 3,
  RDMX_OP_SEND = 4,
  RDMX_OP_SEND_IMM = 5,
  RDMX_OP_SEND_INV = 6,
  RDMX_OP_RECV = 7,           /* a receive (any kind; see flags) */
  RDMX_OP_RECV_WRITE_IMM = 8, /* a receive consumed by the peer's WRITE_WITH_IMM */
  RDMX_OP_OTHER = 15
};

#define RDMX_WC_RECV 0x1u        /* completion of a receive */
#define RDMX_WC_SIGNALED 0x2u    /* the device wrote a CQE for it (else covered by a later one) */
#define RDMX_WC_IMM 0x4u         /* imm holds immediate data */
#define RDMX_WC_INVALIDATED 0x8u /* imm holds the rkey the peer's SEND_WITH_INV freed */

typedef struct rdmx_completion {
  uint64_t cookie; /* as posted */
  uint32_t bytes;  /* receive: bytes received; READ: bytes read; else as reported */
  uint32_t imm;    /* immediate data or invalidated rkey (host order), see flags */
  uint8_t status;  /* 0 = success, else the CQE syndrome: rdmx_syndrome_name(status) */
  uint8_t vendor_syndrome;
  uint8_t opcode; /* enum rdmx_opcode */
  uint8_t flags;  /* RDMX_WC_* */
  uint32_t reserved;
} rdmx_completion;

/* [any] "success", "remote-access", "flushed", ... ("unknown" for other values). Never NULL. */
RDMX_API const char* rdmx_syndrome_name(uint8_t status);
/* [any] "WRITE", "READ", "SEND", "SEND_INV", "RECV", ... Never NULL. */
RDMX_API const char* rdmx_opcode_name(uint8_t opcode);

/* [hot] Reads completions into out[0..max): returns how many were written (0 = none ready).
 * rdmx's own completions (window maps/unmaps) are consumed here and never reported: poll
 * regularly, or windows stay busy. A failed completion (status != 0) puts the core's queue pair
 * in error: later posts return -RDMX_EQPERROR until rdmx_core_recover(). -RDMX_EINVAL for a
 * NULL core/out. */
RDMX_API int rdmx_poll(rdmx_core* core, rdmx_completion* out, int max);

typedef void (*rdmx_completion_fn)(void* arg, const rdmx_completion* c);
/* [hot] Reads up to max_cqes completion queue entries and calls fn(arg, c) once per completion
 * (one entry may complete several unsignaled work requests). Returns the number of entries
 * read. fn must not call setup functions on this core; it may post (and flush). */
RDMX_API int rdmx_poll_cb(rdmx_core* core, uint32_t max_cqes, rdmx_completion_fn fn, void* arg);

/* ---- Errors and recovery (setup path) -------------------------------------------------------- */
/* [hot] 1 once the core saw a failed completion (its queue pair is in error). */
RDMX_API int rdmx_core_in_error(const rdmx_core* core);
/* [setup] After a queue-pair error: poll what you want first (the rest is dropped), then this
 * drains the core's flush completions, moves the queue pair back to RTS towards *remote (the peer
 * recovers too and sends its current connect info; NULL = the caller already did it) and frees
 * every window of the core (mappings are gone: map again). */
RDMX_API int rdmx_core_recover(rdmx_core* core, const rdmx_connect_info* remote);
/* [setup] Noticing attacks (doc/guides/security.md): the server's policy for the peer behind
 * this core's QP. Counts the remote accesses the core's QP refused (wrong key, another PD's
 * window, out of bounds, missing rights) from the first call on; once more than max_refused
 * fell within window_ms, moves the QP to the error state, logs one line naming `peer`
 * ("peer NAME disconnected: 11 remote accesses refused within 1000 ms (limit 10)") and returns
 * 1 (on that call and every later one): do not recover that core for this peer again. 0 while
 * the peer is within the policy. The first call's policy holds. A device that cannot count per
 * QP: -RDMX_ENOTSUP. Control path (it asks the device): call it from housekeeping, for
 * instance before recovering a core after an error, not per I/O. */
RDMX_API int rdmx_core_guard(rdmx_core* core, uint32_t max_refused, uint32_t window_ms,
                             const char* peer);
/* [setup] Both cores of one process: reconnects them and recovers both. */
RDMX_API int rdmx_core_recover_pair(rdmx_core* a, rdmx_core* b);
/* [setup] Re-establishing a connection that failed (the peer went away: rdmx_conn_peer_gone; or
 * a core's queue pair failed, e.g. transport retry exceeded):
 *
 *   rdmx_core_disconnect(core, 0, on_done, arg)   each core of the connection: every work request
 *                                                 still posted completes once, to on_done, as
 *                                                 flushed; the QP ends in RESET (a new
 *                                                 incarnation: a new initial PSN)
 *   rdmx_conn_reconnect(c, 10000, &stop)          a client: the same peer again (a refused
 *                                                 connect is retried until timeout_ms, 0 = 30000)
 *   ... your hello again (rdmx_conn_send) ...
 *   rdmx_conn_exchange(c, cores, n, 0, NULL)      a disconnected core is recovered towards the
 *                                                 peer's new info: reconnected, every window
 *                                                 freed (mappings are gone: map again)
 *   ... post the receives, rdmx_conn_ready ...
 *
 * A server disconnects its client's cores the same way and gives them to the next client it
 * accepts. rdmx_core_disconnect: timeout_ms bounds the drain (0 = 5000; -RDMX_ETIMEDOUT past
 * it); on_done may be NULL (the completions are dropped) and must not call setup functions.
 * rdmx_conn_reconnect: only for a connection made by rdmx_connect_to (-RDMX_ESTATE otherwise);
 * the old socket is closed first; on success c is a new connection in the exchange step; on an
 * error (the rdmx_connect_to errors) close it. */
RDMX_API int rdmx_core_disconnect(rdmx_core* core, uint32_t timeout_ms, rdmx_completion_fn on_done,
                                  void* arg);
RDMX_API int rdmx_conn_reconnect(rdmx_conn* c, uint32_t timeout_ms, const volatile int* cancel);
/* [setup] Waits (by polling rdmx's own completions only; application completions read meanwhile
 * are dropped) until none of this core's window operations is in flight. 0, or
 * -RDMX_ETIMEDOUT when timeout_ms milliseconds (steady clock; 0 = the default, 5000) passed
 * first. */
RDMX_API int rdmx_core_quiesce(rdmx_core* core, uint64_t timeout_ms);

/* ---- Statistics ------------------------------------------------------------------------------
 * Per core, written only by its poll thread and readable from any thread: each value is one the
 * poll thread stored, a snapshot never shows an effect without its cause (unmaps and remote
 * invalidations never exceed maps), and snapshots taken in turn never go backwards. Built with
 * -Dstats=false, every counter but maps, mw_binds and umr_completions reads 0. The same counters
 * are served to dpdk-telemetry.py as /rdmx/stats (doc/guides/embedding.md "Statistics"). */
typedef struct rdmx_core_stats {
  uint64_t maps, inline_maps, pointer_maps, unmaps, pages_mapped;
  uint64_t cache_hits, cache_misses, depot_refills, depot_flushes;
  uint64_t windows_from_depot, windows_to_depot;
  uint64_t exhausted;            /* maps that found no free window */
  uint64_t klm_waits;            /* pointer-mode maps that found only busy windows */
  uint64_t remote_invalidations; /* windows freed by the peer's SEND_WITH_INV */
  uint64_t stale_invalidations, foreign_invalidations;
  uint64_t umr_completions, umr_errors;
  uint64_t wqe_errors; /* failed completions of any kind */
  uint64_t recoveries;
  uint64_t cqes, completions; /* completion queue entries read, work requests completed */
  uint64_t rejected[32];      /* calls refused, by RDMX_E* code (index 1..17) */
  uint32_t umrs_in_flight;    /* map/unmap UMRs not yet completed */
  uint32_t cached_windows;    /* windows in the core's cache now */
  /* Added later (a caller built with an older header passes a smaller size and gets the fields
   * above only): */
  uint64_t fenced_unmaps; /* unmaps that waited for a READ/WRITE/SEND still using the window */
  /* Remote accesses this core's QP refused as the responder (a wrong, stale or foreign rkey, a
   * window of another protection domain, out of bounds, missing rights): what the peer behind the
   * QP attempted. Read from the device (control path: it may take a lock); 0 on a device that
   * does not count them per QP (mlx5 today). See doc/guides/security.md. */
  uint64_t refused_remote_accesses;
  /* Type-2 memory windows of the core (rdmx_bind_mw): binds and invalidates posted, and windows
   * freed by the peer's SEND_WITH_INV. */
  uint64_t mw_binds, mw_invalidates, mw_remote_invalidations;
} rdmx_core_stats;

/* [any thread; see above] Copies the core's counters into *out; `size` = sizeof(*out) of the
 * caller (fields past it are not written). */
RDMX_API int rdmx_core_stats_get(const rdmx_core* core, rdmx_core_stats* out, size_t size);

/* One counter by name (xstats, as DPDK's rte_eth_xstat_name + rte_eth_xstat). */
typedef struct rdmx_stat {
  const char* name; /* static: valid while the library is loaded */
  uint64_t value;
} rdmx_stat;

/* [any] A snapshot of the window counters as name/value pairs: of `core`, or with core NULL the
 * sum over every core the process had (destroyed ones included). The names are those of
 * rdmx_core_stats ("maps", "pages_mapped", "cache_hits", ...), then "rejected_<errname>" (with "_"
 * for "-") per RDMX_E* code, then "syndrome_<name>" for each CQE syndrome seen. Writes min(n,
 * count) pairs to out and returns count (call with n = 0 to size the array); -RDMX_EINVAL when out
 * is NULL and n is not 0. Not hot-path (with core NULL it takes a lock shared with core creation).
 */
RDMX_API int rdmx_stats_snapshot(const rdmx_core* core, rdmx_stat* out, size_t n);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* RDMX_RDMX_H */
