// The C API (include/rdmx/rdmx.h): thin glue over the C++ API. Setup entry points catch every
// exception and turn Error/Result into -RDMX_E* plus a thread-local message; hot-path entry
// points forward to noexcept PollCore calls and never touch the message.
#include <rdmx/rdmx.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include <rdmx/core/result.hpp>
#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/cm.hpp>
#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/door.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/endpoint/rendezvous.hpp>
#include <rdmx/endpoint/session.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/mem/page_allocator.hpp>
#include <rdmx/mlx5/prm/cqe.hpp>
#include <rdmx/mlx5/prm/defs.hpp>
#include <rdmx/win/peer_guard.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/stats_registry.hpp>
#include <rdmx/win/window_pool.hpp>

#include "capi_internal.hpp"

namespace {

using rdmx::Errc;
using rdmx::Error;
using rdmx::mlx5::Completion;
using rdmx::mlx5::prm::Sge;
namespace emu = rdmx::emu;
namespace endpoint = rdmx::endpoint;
namespace win = rdmx::win;
namespace mem = rdmx::mem;

// The C codes mirror Errc one to one.
#define RDMX_SAME(c, e) static_assert(int{c} == static_cast<int>(Errc::e), #c)
RDMX_SAME(RDMX_OK, kOk);
RDMX_SAME(RDMX_EINVAL, kInvalidArgument);
RDMX_SAME(RDMX_ERANGE, kOutOfRange);
RDMX_SAME(RDMX_ETOOMANYPAGES, kTooManyPages);
RDMX_SAME(RDMX_ENOTINARENA, kNotInArena);
RDMX_SAME(RDMX_ENOWINDOW, kNoWindow);
RDMX_SAME(RDMX_ENOTMAPPED, kNotMapped);
RDMX_SAME(RDMX_EWRONGCORE, kWrongCore);
RDMX_SAME(RDMX_ENOROOM, kNoRoom);
RDMX_SAME(RDMX_EQPERROR, kQpError);
RDMX_SAME(RDMX_ENODEV, kNoDevice);
RDMX_SAME(RDMX_EDEVICE, kDeviceError);
RDMX_SAME(RDMX_ENOMEM, kNoMemory);
RDMX_SAME(RDMX_ENOTSUP, kUnsupported);
RDMX_SAME(RDMX_EBUSY, kBusy);
RDMX_SAME(RDMX_ETIMEDOUT, kTimeout);
RDMX_SAME(RDMX_ESTATE, kState);
RDMX_SAME(RDMX_EPROTO, kProtocol);
#undef RDMX_SAME
static_assert(win::kNumErrc <= 32, "rdmx_core_stats.rejected is too small");
static_assert(sizeof(rdmx_sge) == sizeof(Sge) && offsetof(rdmx_sge, lkey) == offsetof(Sge, lkey));

constexpr uint32_t kMaxSges = 16;  // what PollCore accepts per data WQE
constexpr size_t kBurstChunk = 32;

int neg(Errc e) noexcept {
  return -static_cast<int>(e);
}

thread_local std::string t_last_error;

int fail(int code, std::string msg) {
  t_last_error = std::move(msg);
  return code < 0 ? code : -code;
}
int fail(const Error& e, const std::string& what) {
  return fail(static_cast<int>(e.code), what.empty() ? e.message : what + ": " + e.message);
}

// Every setup entry point runs its body through this: no exception crosses the C boundary.
template <class F>
int guarded(const char* fn, F&& body) noexcept {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return fail(RDMX_ENOMEM, std::string(fn) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(RDMX_EINTERNAL, std::string(fn) + ": " + e.what());
  } catch (...) {
    return fail(RDMX_EINTERNAL, std::string(fn) + ": unknown exception");
  }
}

// Options structs carry their size: read what the caller has, defaults for the rest.
template <class T>
T read_opts(const T* in, const T& defaults) {
  T out = defaults;
  if (in && in->size > sizeof(size_t))
    std::memcpy(reinterpret_cast<char*>(&out) + sizeof(size_t),
                reinterpret_cast<const char*>(in) + sizeof(size_t),
                std::min(in->size, sizeof(T)) - sizeof(size_t));
  out.size = sizeof(T);
  return out;
}

const rdmx_port_opts kPortDefaults = RDMX_PORT_OPTS_INIT;
const rdmx_core_opts kCoreDefaults = RDMX_CORE_OPTS_INIT;
const rdmx_conn_opts kConnDefaults = RDMX_CONN_OPTS_INIT;

}  // namespace

struct rdmx_core {
  rdmx_port* port = nullptr;
  win::PollCore* pc = nullptr;                // owned by port->ep
  std::unique_ptr<uint64_t[]> scratch_pages;  // rdmx_map_buf
  uint32_t max_pages = 0;
  // Completions a CQE produced beyond what rdmx_poll's array held (one CQE can complete many
  // unsignaled WQEs). Never more than the WQEs that can be in flight.
  std::unique_ptr<rdmx_completion[]> pend;
  uint32_t pend_cap = 0, pend_head = 0, pend_count = 0;
  std::unique_ptr<win::PeerGuard> guard;  // rdmx_core_guard: made on its first call
  // The QP was connected to a peer before (rdmx_core_disconnect): the next exchange recovers it
  // (reconnected, every window invalidated) rather than connecting a fresh QP.
  bool used = false;
};

struct rdmx_port {
  std::mutex mu;
  endpoint::Endpoint ep;                      // device, arena, pool and the cores' PollCores
  std::unique_ptr<mem::PageAllocator> pages;  // made on first rdmx_pages_alloc; before ep's arena
  std::vector<rdmx_core*> cores;

  ~rdmx_port() {
    for (rdmx_core* c : cores) delete c;
    cores.clear();
    pages.reset();
  }
};

win::PollCore* rdmx::capi::poll_core_of(rdmx_core* c) noexcept {
  return c ? c->pc : nullptr;
}

namespace {

win::Window* as_win(rdmx_window* w) noexcept {
  return reinterpret_cast<win::Window*>(w);
}
const win::Window* as_win(const rdmx_window* w) noexcept {
  return reinterpret_cast<const win::Window*>(w);
}
rdmx_window* as_c(win::Window* w) noexcept {
  return reinterpret_cast<rdmx_window*>(w);
}

void fill_mapping(const win::MapResult& m, rdmx_mapping* out) noexcept {
  out->window = as_c(m.window);
  out->rkey = m.rkey;
  out->lkey = m.lkey;
  out->iova = m.iova;
  out->length = m.length;
}
void fill_mapping(win::Window* w, rdmx_mapping* out) noexcept {
  out->window = as_c(w);
  out->rkey = w->rkey();
  out->lkey = w->lkey();
  out->iova = w->iova();
  out->length = w->length();
}

rdmx_completion to_c(const Completion& c) noexcept {
  rdmx_completion o{};
  o.cookie = c.cookie;
  o.bytes = c.byte_len;
  o.status = c.status;
  o.vendor_syndrome = c.vendor_syndrome;
  o.flags = c.signaled ? RDMX_WC_SIGNALED : 0;
  if (c.recv) {
    o.flags |= RDMX_WC_RECV;
    o.opcode = RDMX_OP_RECV;
    switch (c.cqe_opcode) {
      case MLX5_CQE_RESP_SEND_IMM:
        o.flags |= RDMX_WC_IMM;
        break;
      case MLX5_CQE_RESP_SEND_INV:
        o.flags |= RDMX_WC_INVALIDATED;
        break;
      case MLX5_CQE_RESP_WR_IMM:
        o.flags |= RDMX_WC_IMM;
        o.opcode = RDMX_OP_RECV_WRITE_IMM;
        break;
      default:
        break;
    }
    if (o.flags & (RDMX_WC_IMM | RDMX_WC_INVALIDATED)) o.imm = c.imm;
    return o;
  }
  switch (c.wqe_opcode) {
    case MLX5_OPCODE_RDMA_WRITE:
      o.opcode = RDMX_OP_WRITE;
      break;
    case MLX5_OPCODE_RDMA_WRITE_IMM:
      o.opcode = RDMX_OP_WRITE_IMM;
      break;
    case MLX5_OPCODE_RDMA_READ:
      o.opcode = RDMX_OP_READ;
      break;
    case MLX5_OPCODE_SEND:
      o.opcode = RDMX_OP_SEND;
      break;
    case MLX5_OPCODE_SEND_IMM:
      o.opcode = RDMX_OP_SEND_IMM;
      break;
    case MLX5_OPCODE_SEND_INVAL:
      o.opcode = RDMX_OP_SEND_INV;
      break;
    default:
      o.opcode = RDMX_OP_OTHER;
      break;
  }
  return o;
}

void pend_push(rdmx_core* c, const rdmx_completion& x) noexcept {
  RDMX_ASSERT(c->pend_count < c->pend_cap);
  c->pend[(c->pend_head + c->pend_count) % c->pend_cap] = x;
  ++c->pend_count;
}
rdmx_completion pend_pop(rdmx_core* c) noexcept {
  const rdmx_completion x = c->pend[c->pend_head];
  c->pend_head = (c->pend_head + 1) % c->pend_cap;
  --c->pend_count;
  return x;
}

// Copies C SGEs into the C++ type (no type punning); false when there are too many.
bool to_sges(const rdmx_sge* in, uint32_t n, std::array<Sge, kMaxSges>& out) noexcept {
  if (n > kMaxSges || (n && !in)) return false;
  for (uint32_t i = 0; i < n; ++i) out[i] = Sge{in[i].addr, in[i].length, in[i].lkey};
  return true;
}

// rdmx_connect_info holds the codec's bytes, zero-padded.
static_assert(sizeof(rdmx_connect_info::bytes) >= rdmx::mlx5::kConnectInfoBytes);

void encode(const rdmx::mlx5::ConnectInfo& ci, rdmx_connect_info* out) noexcept {
  std::memset(out, 0, sizeof(*out));
  const rdmx::mlx5::ConnectInfoBytes b = rdmx::mlx5::encode_connect_info(ci);
  std::memcpy(out->bytes, b.data(), b.size());
}
rdmx::Result<rdmx::mlx5::ConnectInfo> decode(const rdmx_connect_info* in) {
  return rdmx::mlx5::decode_connect_info(in->bytes);
}

int check_port_opts(const rdmx_port_opts& o) {
  if (o.side != 0 && o.side != 1) return fail(RDMX_EINVAL, "port options: side must be 0 or 1");
  if (o.key_policy != RDMX_KEYS_RANDOM && o.key_policy != RDMX_KEYS_INCREMENT)
    return fail(RDMX_EINVAL,
                "port options: key_policy must be RDMX_KEYS_RANDOM or RDMX_KEYS_INCREMENT");
  if (o.user_buf) {
    if (o.user_buf_len == 0 || o.page_size == 0 || o.user_buf_len % o.page_size != 0)
      return fail(RDMX_EINVAL,
                  "port options: user_buf_len must be a non-zero multiple of page_size");
  } else if (o.arena_bytes == 0) {
    return fail(RDMX_EINVAL, "port options: arena_bytes 0");
  }
  return 0;
}

// A port is an endpoint without cores (rdmx_core_create adds them). arena_bytes is the data
// part: the builder adds what the window pool reserves at the arena's tail.
endpoint::EndpointConfig endpoint_config(const rdmx_port_opts& o) {
  endpoint::EndpointConfig ec;
  ec.arena.page_size = o.page_size;
  if (o.user_buf) {
    ec.arena.source = mem::Source::kUser;
    ec.arena.user_buf = o.user_buf;
    ec.arena.bytes = o.user_buf_len;
  } else {
    ec.arena.source = mem::Source::kHeap;
    ec.arena.bytes = o.arena_bytes;
  }
  ec.pool.n_windows = o.n_windows;
  ec.pool.max_pages = o.max_pages;
  ec.pool.remote_invalidate = o.remote_invalidate != 0;
  ec.pool.max_cores = o.max_cores;
  ec.pool.key_policy =
      o.key_policy == RDMX_KEYS_INCREMENT ? win::KeyPolicy::kIncrement : win::KeyPolicy::kRandom;
  ec.n_cores = 0;
  return ec;
}

int finish_port(rdmx_port* p, endpoint::OpenedDevice&& d, const rdmx_port_opts& o) {
  endpoint::EndpointConfig ec = endpoint_config(o);
  // Memory windows can be bound only to an MR registered with MW_BIND: the arena allows it
  // wherever the device has them (it exposes nothing by itself; rdmx_core_opts.memory_windows).
  if (d.dev && d.dev->caps().memory_windows) ec.arena.access |= rdmx::mlx5::kAccessMwBind;
  auto ep = endpoint::Endpoint::create(std::move(d), ec);
  if (!ep) return fail(ep.error(), "rdmx_port_open");
  p->ep = std::move(ep).value();
  return 0;
}

endpoint::DeviceOptions device_options(const rdmx_port_opts& o) {
  endpoint::DeviceOptions d;
  d.wire = o.wire ? o.wire : "";
  d.side = o.side;
  d.attach_timeout = std::chrono::milliseconds(o.attach_timeout_ms);
  d.ib_port = o.ib_port;
  d.gid_index = o.gid_index;
  return d;
}

}  // namespace

extern "C" {

// ---- Version and errors ----------------------------------------------------------------------

unsigned rdmx_version(void) {
  return RDMX_VERSION;
}

const char* rdmx_version_string(void) {
#define RDMX_STR2(x) #x
#define RDMX_STR(x) RDMX_STR2(x)
  return RDMX_STR(RDMX_VERSION_MAJOR) "." RDMX_STR(RDMX_VERSION_MINOR) "." RDMX_STR(
      RDMX_VERSION_PATCH);
#undef RDMX_STR
#undef RDMX_STR2
}

const char* rdmx_strerror(int err) {
  switch (err < 0 ? -err : err) {
    case RDMX_OK:
      return "success";
    case RDMX_EINVAL:
      return "invalid argument";
    case RDMX_ERANGE:
      return "offset or length out of range";
    case RDMX_ETOOMANYPAGES:
      return "too many chunk pages";
    case RDMX_ENOTINARENA:
      return "memory outside the registered arena or misaligned";
    case RDMX_ENOWINDOW:
      return "no free window";
    case RDMX_ENOTMAPPED:
      return "window not mapped";
    case RDMX_EWRONGCORE:
      return "window belongs to another poll core";
    case RDMX_ENOROOM:
      return "queue full, poll and retry";
    case RDMX_EQPERROR:
      return "queue pair in error state";
    case RDMX_ENODEV:
      return "no such device";
    case RDMX_EDEVICE:
      return "device error";
    case RDMX_ENOMEM:
      return "out of memory";
    case RDMX_ENOTSUP:
      return "not supported";
    case RDMX_EBUSY:
      return "resource busy, poll and retry";
    case RDMX_ETIMEDOUT:
      return "timed out";
    case RDMX_ESTATE:
      return "not allowed in the current state";
    case RDMX_EPROTO:
      return "malformed or foreign bytes from a peer";
    case RDMX_EINTERNAL:
      return "internal error";
    default:
      return "unknown error";
  }
}

const char* rdmx_errname(int err) {
  const int e = err < 0 ? -err : err;
  if (e == RDMX_EINTERNAL) return "internal";
  if (e > RDMX_EPROTO) return "unknown";
  return rdmx::errc_name(static_cast<Errc>(e)).data();  // string literals: NUL-terminated
}

const char* rdmx_last_error(void) {
  return t_last_error.c_str();
}

const char* rdmx_syndrome_name(uint8_t status) {
  return rdmx::mlx5::prm::syndrome_name(status).data();  // string literals
}

const char* rdmx_opcode_name(uint8_t opcode) {
  switch (opcode) {
    case RDMX_OP_WRITE:
      return "WRITE";
    case RDMX_OP_WRITE_IMM:
      return "WRITE_IMM";
    case RDMX_OP_READ:
      return "READ";
    case RDMX_OP_SEND:
      return "SEND";
    case RDMX_OP_SEND_IMM:
      return "SEND_IMM";
    case RDMX_OP_SEND_INV:
      return "SEND_INV";
    case RDMX_OP_RECV:
      return "RECV";
    case RDMX_OP_RECV_WRITE_IMM:
      return "RECV_WRITE_IMM";
    default:
      return "OTHER";
  }
}

// ---- Ports -----------------------------------------------------------------------------------

void rdmx_port_opts_init(rdmx_port_opts* o) {
  if (o) *o = kPortDefaults;
}

int rdmx_port_open(const char* device, const rdmx_port_opts* opts, rdmx_port** out) {
  return guarded("rdmx_port_open", [&]() -> int {
    if (out) *out = nullptr;
    if (!device || !out) return fail(RDMX_EINVAL, "rdmx_port_open: NULL device or out");
    if (opts && opts->size < sizeof(size_t))
      return fail(RDMX_EINVAL, "rdmx_port_open: opts->size not set (use rdmx_port_opts_init)");
    const rdmx_port_opts o = read_opts(opts, kPortDefaults);
    if (int rc = check_port_opts(o)) return rc;
    auto d = endpoint::open_device(device, device_options(o));
    if (!d) return fail(d.error(), "rdmx_port_open");
    auto p = std::make_unique<rdmx_port>();
    if (int rc = finish_port(p.get(), std::move(d).value(), o)) return rc;
    *out = p.release();
    return 0;
  });
}

int rdmx_port_open_pair(const char* device, const rdmx_port_opts* opts_a,
                        const rdmx_port_opts* opts_b, rdmx_port** a, rdmx_port** b) {
  return guarded("rdmx_port_open_pair", [&]() -> int {
    if (a) *a = nullptr;
    if (b) *b = nullptr;
    if (!device || !a || !b) return fail(RDMX_EINVAL, "rdmx_port_open_pair: NULL argument");
    if ((opts_a && opts_a->size < sizeof(size_t)) || (opts_b && opts_b->size < sizeof(size_t)))
      return fail(RDMX_EINVAL, "rdmx_port_open_pair: opts->size not set");
    const rdmx_port_opts oa = read_opts(opts_a, kPortDefaults);
    const rdmx_port_opts ob = read_opts(opts_b, kPortDefaults);
    if (int rc = check_port_opts(oa)) return rc;
    if (int rc = check_port_opts(ob)) return rc;
    auto spec = endpoint::parse_device_spec(device, nullptr);
    if (!spec) return fail(spec.error(), "rdmx_port_open_pair");
    if (spec.value().backend != endpoint::Backend::kEmu)
      return fail(RDMX_ENOTSUP, std::string("rdmx_port_open_pair: \"") + device +
                                    "\" is not an emulated device (emu, emu-threaded, "
                                    "emu-inline, emu-sink)");
    endpoint::DeviceOptions da = device_options(oa), db = device_options(ob);
    da.wire = db.wire = "";  // one in-process wire joins the two
    auto pair = endpoint::open_device_pair(device, da, db);
    if (!pair) return fail(pair.error(), "rdmx_port_open_pair");
    auto pa = std::make_unique<rdmx_port>();
    auto pb = std::make_unique<rdmx_port>();
    if (int rc = finish_port(pa.get(), std::move(pair.value()[0]), oa)) return rc;
    if (int rc = finish_port(pb.get(), std::move(pair.value()[1]), ob)) return rc;
    *a = pa.release();
    *b = pb.release();
    return 0;
  });
}

void rdmx_port_close(rdmx_port* port) {
  if (!port) return;
  guarded("rdmx_port_close", [&]() -> int {
    delete port;
    return 0;
  });
}

int rdmx_port_query(rdmx_port* p, rdmx_port_info* out) {
  return guarded("rdmx_port_query", [&]() -> int {
    if (!p || !out) return fail(RDMX_EINVAL, "rdmx_port_query: NULL argument");
    std::lock_guard lk(p->mu);
    std::memset(out, 0, sizeof(*out));
    std::snprintf(out->device, sizeof(out->device), "%s", p->ep.device().name().c_str());
    // The mode only ("emu-threaded" of "emu-threaded@roce:10.0.0.1"): the field holds 16 bytes.
    const std::string& b = p->ep.backend();
    std::snprintf(out->backend, sizeof(out->backend), "%s", b.substr(0, b.find('@')).c_str());
    const mem::Arena& a = p->ep.arena();
    out->arena_base = a.ptr(a.base());
    out->arena_bytes = a.size();
    out->data_bytes = a.data_end() - a.base();
    out->page_size = a.page_size();
    out->n_pages = a.n_pages();
    out->lkey = a.lkey();
    out->n_windows = p->ep.pool().n_windows();
    out->max_pages = p->ep.pool().max_pages();
    out->depot_windows = p->ep.pool().depot_count();
    out->free_pages = p->pages ? p->pages->n_free() : a.n_pages();
    out->emu_checker_reports = p->ep.emu() ? p->ep.emu()->checker().total() : 0;
    return 0;
  });
}

void* rdmx_port_arena(const rdmx_port* p) {
  return p ? p->ep.arena().ptr(p->ep.arena().base()) : nullptr;
}

uint32_t rdmx_port_lkey(const rdmx_port* p) {
  return p ? p->ep.arena().lkey() : 0;
}

int rdmx_port_check(rdmx_port* p) {
  return guarded("rdmx_port_check", [&]() -> int {
    if (!p) return fail(RDMX_EINVAL, "rdmx_port_check: NULL port");
    std::lock_guard lk(p->mu);
    auto r = p->ep.pool().check_windows();
    if (!r) return fail(r.error(), "rdmx_port_check");
    for (rdmx_core* c : p->cores)  // isolated cores' own windows
      if (win::WindowPool* own = p->ep.core_pool(*c->pc); own != &p->ep.pool())
        if (auto ro = own->check_windows(); !ro) return fail(ro.error(), "rdmx_port_check");
    return 0;
  });
}

int rdmx_port_progress(rdmx_port* p) {
  return guarded("rdmx_port_progress", [&]() -> int {
    if (!p) return fail(RDMX_EINVAL, "rdmx_port_progress: NULL port");
    return p->ep.emu() && p->ep.emu()->progress() ? 1 : 0;
  });
}

// ---- Asynchronous events -----------------------------------------------------------------------
static_assert(RDMX_EVENT_QP_FATAL == int(rdmx::mlx5::AsyncEventKind::kQpFatal) &&
                  RDMX_EVENT_QP_REQ_ERR == int(rdmx::mlx5::AsyncEventKind::kQpReqErr) &&
                  RDMX_EVENT_QP_ACCESS_ERR == int(rdmx::mlx5::AsyncEventKind::kQpAccessErr) &&
                  RDMX_EVENT_COMM_EST == int(rdmx::mlx5::AsyncEventKind::kCommEst) &&
                  RDMX_EVENT_SQ_DRAINED == int(rdmx::mlx5::AsyncEventKind::kSqDrained) &&
                  RDMX_EVENT_LAST_WQE_REACHED == int(rdmx::mlx5::AsyncEventKind::kLastWqeReached) &&
                  RDMX_EVENT_CQ_ERR == int(rdmx::mlx5::AsyncEventKind::kCqErr) &&
                  RDMX_EVENT_PORT_ACTIVE == int(rdmx::mlx5::AsyncEventKind::kPortActive) &&
                  RDMX_EVENT_PORT_ERR == int(rdmx::mlx5::AsyncEventKind::kPortErr) &&
                  RDMX_EVENT_DEVICE_FATAL == int(rdmx::mlx5::AsyncEventKind::kDeviceFatal) &&
                  RDMX_EVENT_OTHER == int(rdmx::mlx5::AsyncEventKind::kOther),
              "rdmx_event_kind follows rdmx::mlx5::AsyncEventKind");

int rdmx_poll_events(rdmx_port* p, rdmx_event* out, uint32_t n) {
  return guarded("rdmx_poll_events", [&]() -> int {
    if (!p || (!out && n)) return fail(RDMX_EINVAL, "rdmx_poll_events: NULL argument");
    n = std::min<uint32_t>(n, 64);
    rdmx::mlx5::AsyncEvent ev[64];
    const size_t got = p->ep.device().poll_async_events({ev, n});
    for (size_t i = 0; i < got; ++i) out[i] = rdmx_event{uint32_t(ev[i].kind), ev[i].qpn};
    return static_cast<int>(got);
  });
}

const char* rdmx_event_name(uint32_t kind) {
  return kind > RDMX_EVENT_OTHER
             ? "other"
             : rdmx::mlx5::async_event_name(static_cast<rdmx::mlx5::AsyncEventKind>(kind));
}

// ---- Chunk pages -----------------------------------------------------------------------------

int rdmx_pages_alloc(rdmx_port* p, uint64_t* pages, uint32_t n) {
  return guarded("rdmx_pages_alloc", [&]() -> int {
    if (!p || (!pages && n)) return fail(RDMX_EINVAL, "rdmx_pages_alloc: NULL argument");
    std::lock_guard lk(p->mu);
    if (!p->pages) p->pages = std::make_unique<mem::PageAllocator>(p->ep.arena());
    const Errc e = p->pages->alloc_bulk({pages, n});
    if (e != Errc::kOk)
      return fail(static_cast<int>(e), "rdmx_pages_alloc: " + std::to_string(n) + " pages asked, " +
                                           std::to_string(p->pages->n_free()) + " free");
    return 0;
  });
}

int rdmx_pages_free(rdmx_port* p, const uint64_t* pages, uint32_t n) {
  return guarded("rdmx_pages_free", [&]() -> int {
    if (!p || (!pages && n)) return fail(RDMX_EINVAL, "rdmx_pages_free: NULL argument");
    std::lock_guard lk(p->mu);
    if (!p->pages) return fail(RDMX_EINVAL, "rdmx_pages_free: no page was allocated");
    const Errc e = p->pages->free_bulk({pages, n});
    if (e != Errc::kOk)
      return fail(static_cast<int>(e), std::string("rdmx_pages_free: ") +
                                           (e == Errc::kNotInArena ? "not a data page of the arena"
                                                                   : "page already free"));
    return 0;
  });
}

int rdmx_buf_pages(const rdmx_port* p, const void* addr, uint64_t len, uint64_t* pages,
                   uint32_t max, uint32_t* first_byte_offset) {
  if (!p || (!pages && max)) return -RDMX_EINVAL;
  const mem::PageSpan s =
      p->ep.arena().to_pages(reinterpret_cast<uint64_t>(addr), len, {pages, size_t{max}});
  if (!s.ok()) return neg(s.errc);
  if (first_byte_offset) *first_byte_offset = s.first_offset;
  return static_cast<int>(s.n_pages);
}

// ---- Poll cores ------------------------------------------------------------------------------

void rdmx_core_opts_init(rdmx_core_opts* o) {
  if (o) *o = kCoreDefaults;
}

int rdmx_core_create(rdmx_port* p, const rdmx_core_opts* opts, rdmx_core** out) {
  return guarded("rdmx_core_create", [&]() -> int {
    if (out) *out = nullptr;
    if (!p || !out) return fail(RDMX_EINVAL, "rdmx_core_create: NULL argument");
    if (opts && opts->size < sizeof(size_t))
      return fail(RDMX_EINVAL, "rdmx_core_create: opts->size not set (use rdmx_core_opts_init)");
    const rdmx_core_opts o = read_opts(opts, kCoreDefaults);
    win::CoreConfig cc;
    cc.cache_size = o.cache_size;
    cc.qp.sq_wqebbs = o.sq_depth;
    cc.qp.rq_wqes = o.rq_depth;
    cc.qp.cq_cqes = o.cq_depth;
    cc.qp.rq_sges = o.rq_sges;
    cc.qp.max_inline_data = o.max_inline;
    cc.signal_every = o.signal_every;
    cc.memory_windows = o.memory_windows;
    auto c = std::make_unique<rdmx_core>();
    c->port = p;
    c->max_pages = p->ep.pool().max_pages();
    c->scratch_pages = std::make_unique<uint64_t[]>(c->max_pages);
    c->pend_cap = o.sq_depth + o.rq_depth + 1;
    c->pend = std::make_unique<rdmx_completion[]>(c->pend_cap);
    std::lock_guard lk(p->mu);
    const uint32_t own = o.own_windows ? o.own_windows : std::max<uint32_t>(2 * o.cache_size, 4);
    auto pc = o.isolate ? p->ep.add_isolated_core(cc, own) : p->ep.add_core(cc);
    if (!pc) return fail(pc.error(), "rdmx_core_create");
    c->pc = pc.value();
    p->cores.push_back(c.get());
    *out = c.release();
    return 0;
  });
}

void rdmx_core_destroy(rdmx_core* c) {
  if (!c) return;
  guarded("rdmx_core_destroy", [&]() -> int {
    rdmx_port* p = c->port;
    std::lock_guard lk(p->mu);
    p->cores.erase(std::remove(p->cores.begin(), p->cores.end(), c), p->cores.end());
    p->ep.remove_core(c->pc);
    delete c;
    return 0;
  });
}

int rdmx_core_connect_info(rdmx_core* c, rdmx_connect_info* out) {
  return guarded("rdmx_core_connect_info", [&]() -> int {
    if (!c || !out) return fail(RDMX_EINVAL, "rdmx_core_connect_info: NULL argument");
    std::lock_guard lk(c->port->mu);
    encode(c->port->ep.device().local_info(c->pc->qp_handle()), out);
    return 0;
  });
}

int rdmx_core_connect(rdmx_core* c, const rdmx_connect_info* remote) {
  return guarded("rdmx_core_connect", [&]() -> int {
    if (!c || !remote) return fail(RDMX_EINVAL, "rdmx_core_connect: NULL argument");
    auto ci = decode(remote);
    if (!ci) return fail(ci.error(), "rdmx_core_connect");
    std::lock_guard lk(c->port->mu);
    auto s = c->port->ep.device().connect(c->pc->qp_handle(), ci.value());
    if (!s) return fail(s.error(), "rdmx_core_connect");
    return 0;
  });
}

int rdmx_core_connect_pair(rdmx_core* a, rdmx_core* b) {
  return guarded("rdmx_core_connect_pair", [&]() -> int {
    if (!a || !b || a == b) return fail(RDMX_EINVAL, "rdmx_core_connect_pair: bad cores");
    auto s = endpoint::connect_cores(*a->pc, *b->pc);
    if (!s) return fail(s.error(), "rdmx_core_connect_pair");
    return 0;
  });
}

rdmx_port* rdmx_core_port(const rdmx_core* c) {
  return c ? c->port : nullptr;
}

uint32_t rdmx_core_qpn(const rdmx_core* c) {
  return c ? c->pc->qp_handle() : 0;
}

uint32_t rdmx_core_lkey(const rdmx_core* c) {
  return c ? c->port->ep.core_lkey(*c->pc) : 0;
}

// ---- Windows ---------------------------------------------------------------------------------

int rdmx_map(rdmx_core* c, const uint64_t* pages, uint32_t n_pages, uint32_t access,
             uint32_t first_byte_offset, uint64_t length, rdmx_mapping* out) {
  if (!c || !out || (!pages && n_pages)) return -RDMX_EINVAL;
  const win::MapResult m = c->pc->map({pages, size_t{n_pages}}, access, first_byte_offset, length);
  if (!m.ok()) return neg(m.errc);
  fill_mapping(m, out);
  return 0;
}

int rdmx_map_buf(rdmx_core* c, const void* addr, uint64_t len, uint32_t access, rdmx_mapping* out) {
  if (!c || !out) return -RDMX_EINVAL;
  uint32_t off = 0;
  const int n = rdmx_buf_pages(c->port, addr, len, c->scratch_pages.get(), c->max_pages, &off);
  if (n < 0) return n;
  return rdmx_map(c, c->scratch_pages.get(), static_cast<uint32_t>(n), access, off, len, out);
}

int rdmx_map_interleaved(rdmx_core* c, const rdmx_interleaved_part* parts, uint32_t n_parts,
                         uint32_t blocks, uint32_t access, rdmx_mapping* out) {
  if (!c || !out || (!parts && n_parts)) return -RDMX_EINVAL;
  std::array<win::InterleavedPart, rdmx::mlx5::prm::kMaxInlineKlm> p;
  if (n_parts >= p.size()) return -RDMX_ETOOMANYPAGES;  // the header takes a slot too
  for (uint32_t i = 0; i < n_parts; ++i) p[i] = {parts[i].addr, parts[i].bytes, parts[i].skip};
  const win::MapResult m = c->pc->map_interleaved({p.data(), size_t{n_parts}}, blocks, access);
  if (!m.ok()) return neg(m.errc);
  fill_mapping(m, out);
  return 0;
}

int rdmx_bind_mw(rdmx_core* c, const void* addr, uint64_t len, uint32_t access, unsigned flags,
                 rdmx_mw_binding* out) {
  if (!c || !out || (flags & ~RDMX_MW_ZERO_BASED)) return -RDMX_EINVAL;
  const win::BindResult b = c->pc->bind_mw(reinterpret_cast<uintptr_t>(addr), len, access,
                                           (flags & RDMX_MW_ZERO_BASED) != 0);
  if (!b.ok()) return neg(b.errc);
  out->mw = reinterpret_cast<rdmx_mw*>(b.mw);
  out->rkey = b.rkey;
  out->iova = b.iova;
  out->length = b.length;
  return 0;
}

int rdmx_invalidate_mw(rdmx_core* c, rdmx_mw* mw) {
  if (!c) return -RDMX_EINVAL;
  const Errc e = c->pc->invalidate_mw(reinterpret_cast<win::MemoryWindow*>(mw));
  return e == Errc::kOk ? 0 : neg(e);
}

size_t rdmx_map_burst(rdmx_core* c, const rdmx_map_req* reqs, size_t n, rdmx_mapping* out,
                      int* err) {
  if (err) *err = 0;
  if (!c || ((!reqs || !out) && n)) {
    if (err) *err = -RDMX_EINVAL;
    return 0;
  }
  std::array<win::MapRequest, kBurstChunk> rq;
  std::array<win::Window*, kBurstChunk> ws;
  size_t done = 0;
  while (done < n) {
    const size_t k = std::min(kBurstChunk, n - done);
    for (size_t i = 0; i < k; ++i) {
      const rdmx_map_req& r = reqs[done + i];
      if (!r.pages && r.n_pages) {
        // Map what precedes the bad request, then stop at it.
        if (i == 0) {
          if (err) *err = -RDMX_EINVAL;
          return done;
        }
        const size_t got = c->pc->map_burst({rq.data(), i}, {ws.data(), i});
        for (size_t j = 0; j < got; ++j) fill_mapping(ws[j], &out[done + j]);
        if (err) *err = got < i ? neg(c->pc->last_error()) : -RDMX_EINVAL;
        return done + got;
      }
      rq[i] =
          win::MapRequest{{r.pages, size_t{r.n_pages}}, r.access, r.first_byte_offset, r.length};
    }
    const size_t got = c->pc->map_burst({rq.data(), k}, {ws.data(), k});
    for (size_t j = 0; j < got; ++j) fill_mapping(ws[j], &out[done + j]);
    done += got;
    if (got < k) {
      if (err) *err = neg(c->pc->last_error());
      return done;
    }
  }
  return done;
}

int rdmx_unmap(rdmx_core* c, rdmx_window* w) {
  if (!c || !w) return -RDMX_EINVAL;
  return neg(c->pc->unmap(as_win(w)));
}

size_t rdmx_unmap_burst(rdmx_core* c, rdmx_window* const* ws, size_t n, int* err) {
  if (err) *err = 0;
  if (!c || (!ws && n)) {
    if (err) *err = -RDMX_EINVAL;
    return 0;
  }
  const size_t got = c->pc->unmap_burst(
      {reinterpret_cast<win::Window* const*>(ws), n});  // rdmx_window* is a Window*
  if (got < n && err) *err = neg(c->pc->last_error());
  return got;
}

uint32_t rdmx_window_rkey(const rdmx_window* w) {
  return w ? as_win(w)->rkey() : 0;
}
uint64_t rdmx_window_length(const rdmx_window* w) {
  return w ? as_win(w)->length() : 0;
}
int rdmx_window_mapped(const rdmx_window* w) {
  return w && as_win(w)->state() == win::WindowState::kMapped ? 1 : 0;
}

// ---- Work requests ---------------------------------------------------------------------------

int rdmx_post_write(rdmx_core* c, const rdmx_sge* local, uint32_t n_sge, uint64_t raddr,
                    uint32_t rkey, uint64_t cookie, unsigned flags) {
  std::array<Sge, kMaxSges> s;
  if (!c || !to_sges(local, n_sge, s)) return -RDMX_EINVAL;
  return neg(c->pc->post_write({s.data(), n_sge}, raddr, rkey, cookie, flags & RDMX_POST_SIGNALED));
}

int rdmx_post_read(rdmx_core* c, const rdmx_sge* local, uint32_t n_sge, uint64_t raddr,
                   uint32_t rkey, uint64_t cookie, unsigned flags) {
  std::array<Sge, kMaxSges> s;
  if (!c || !to_sges(local, n_sge, s)) return -RDMX_EINVAL;
  return neg(c->pc->post_read({s.data(), n_sge}, raddr, rkey, cookie, flags & RDMX_POST_SIGNALED));
}

int rdmx_post_send(rdmx_core* c, const rdmx_sge* local, uint32_t n_sge, uint64_t cookie,
                   unsigned flags) {
  std::array<Sge, kMaxSges> s;
  if (!c || !to_sges(local, n_sge, s)) return -RDMX_EINVAL;
  return neg(c->pc->post_send({s.data(), n_sge}, cookie, flags & RDMX_POST_SIGNALED));
}

int rdmx_post_send_inv(rdmx_core* c, const rdmx_sge* local, uint32_t n_sge,
                       uint32_t invalidate_rkey, uint64_t cookie, unsigned flags) {
  std::array<Sge, kMaxSges> s;
  if (!c || !to_sges(local, n_sge, s)) return -RDMX_EINVAL;
  return neg(
      c->pc->post_send_inv({s.data(), n_sge}, invalidate_rkey, cookie, flags & RDMX_POST_SIGNALED));
}

int rdmx_post_recv(rdmx_core* c, const rdmx_sge* local, uint32_t n_sge, uint64_t cookie) {
  std::array<Sge, kMaxSges> s;
  if (!c || !to_sges(local, n_sge, s)) return -RDMX_EINVAL;
  return neg(c->pc->post_recv({s.data(), n_sge}, cookie));
}

void rdmx_flush(rdmx_core* c) {
  if (c) c->pc->flush();
}

// ---- Completions -----------------------------------------------------------------------------

int rdmx_poll(rdmx_core* c, rdmx_completion* out, int max) {
  if (!c || (!out && max > 0)) return -RDMX_EINVAL;
  int n = 0;
  while (n < max && c->pend_count) out[n++] = pend_pop(c);
  if (n < max) {
    // The pending queue is empty here, and one poll completes at most the WQEs in flight.
    c->pc->poll(static_cast<uint32_t>(max - n), [&](const Completion& x) {
      if (n < max)
        out[n++] = to_c(x);
      else
        pend_push(c, to_c(x));
    });
  }
  return n;
}

int rdmx_poll_cb(rdmx_core* c, uint32_t max_cqes, rdmx_completion_fn fn, void* arg) {
  if (!c || !fn) return -RDMX_EINVAL;
  while (c->pend_count) {
    const rdmx_completion x = pend_pop(c);
    fn(arg, &x);
  }
  const uint32_t n = c->pc->poll(max_cqes, [&](const Completion& x) {
    const rdmx_completion y = to_c(x);
    fn(arg, &y);
  });
  return static_cast<int>(n);
}

// ---- Errors and recovery ---------------------------------------------------------------------

int rdmx_core_in_error(const rdmx_core* c) {
  return c && const_cast<rdmx_core*>(c)->pc->qp().in_error() ? 1 : 0;
}

int rdmx_core_guard(rdmx_core* c, uint32_t max_refused, uint32_t window_ms, const char* peer) {
  return guarded("rdmx_core_guard", [&]() -> int {
    if (!c || !peer) return fail(RDMX_EINVAL, "rdmx_core_guard: NULL argument");
    if (!max_refused || !window_ms)
      return fail(RDMX_EINVAL, "rdmx_core_guard: max_refused and window_ms must be at least 1");
    if (!c->guard)
      c->guard = std::make_unique<win::PeerGuard>(
          c->port->ep.device(), c->pc->qp_handle(), peer,
          win::RefusalPolicy{max_refused, std::chrono::milliseconds(window_ms)});
    auto r = c->guard->check();
    if (!r) return fail(r.error(), "rdmx_core_guard");
    return r.value() ? 1 : 0;
  });
}

int rdmx_core_recover(rdmx_core* c, const rdmx_connect_info* remote) {
  return guarded("rdmx_core_recover", [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_core_recover: NULL core");
    std::lock_guard lk(c->port->mu);
    rdmx::Status s;
    if (remote) {
      auto ci = decode(remote);
      if (!ci) return fail(ci.error(), "rdmx_core_recover");
      s = endpoint::recover_core(*c->pc, ci.value());  // drain, reconnect, re-invalidate
    } else {
      s = c->pc->recover();  // the caller moved the QP back to RTS itself
    }
    c->pend_count = c->pend_head = 0;
    if (!s) return fail(s.error(), "rdmx_core_recover");
    return 0;
  });
}

int rdmx_core_disconnect(rdmx_core* c, uint32_t timeout_ms, rdmx_completion_fn fn, void* arg) {
  return guarded("rdmx_core_disconnect", [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_core_disconnect: NULL core");
    std::lock_guard lk(c->port->mu);
    while (c->pend_count) {
      const rdmx_completion x = pend_pop(c);
      if (fn) fn(arg, &x);
    }
    // Every work request still posted completes once, as flushed (IB spec 10.3.1 "QP Error
    // state"; rdma-core providers/mlx5/cq.c: IBV_WC_WR_FLUSH_ERR); the QP ends in RESET.
    auto s = endpoint::disconnect_core(
        *c->pc, timeout_ms ? std::chrono::milliseconds(timeout_ms) : endpoint::kDefaultDrainBudget,
        [&](const Completion& x) {
          const rdmx_completion y = to_c(x);
          if (fn) fn(arg, &y);
        });
    if (!s) return fail(s.error(), "rdmx_core_disconnect");
    c->used = true;
    return 0;
  });
}

int rdmx_core_recover_pair(rdmx_core* a, rdmx_core* b) {
  return guarded("rdmx_core_recover_pair", [&]() -> int {
    if (!a || !b || a == b) return fail(RDMX_EINVAL, "rdmx_core_recover_pair: bad cores");
    auto s = endpoint::recover_cores(*a->pc, *b->pc);
    a->pend_count = a->pend_head = 0;
    b->pend_count = b->pend_head = 0;
    if (!s) return fail(s.error(), "rdmx_core_recover_pair");
    return 0;
  });
}

int rdmx_core_quiesce(rdmx_core* c, uint64_t timeout_ms) {
  return guarded("rdmx_core_quiesce", [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_core_quiesce: NULL core");
    c->pc->flush();
    const std::chrono::nanoseconds budget =
        timeout_ms ? std::chrono::nanoseconds(std::chrono::milliseconds(
                         std::min<uint64_t>(timeout_ms, uint64_t{1} << 40)))
                   : std::chrono::nanoseconds(win::PollCore::kDefaultQuiesceBudget);
    if (!c->pc->quiesce(budget))
      return fail(RDMX_ETIMEDOUT, "rdmx_core_quiesce: " + std::to_string(c->pc->umrs_in_flight()) +
                                      " UMRs still in flight after " +
                                      std::to_string(budget.count() / 1000000) + " ms");
    return 0;
  });
}

// ---- Statistics ------------------------------------------------------------------------------

int rdmx_core_stats_get(const rdmx_core* c, rdmx_core_stats* out, size_t size) {
  if (!c || !out) return -RDMX_EINVAL;
  rdmx_core_stats s{};
  const win::CoreCounts k = win::snapshot(c->pc->stats());
#define RDMX_COPY_COUNTER(name, type, kind, unit, help) s.name = k.name;
  RDMX_CORE_COUNTERS(RDMX_COPY_COUNTER)
#undef RDMX_COPY_COUNTER
  const auto& q = c->pc->qp().stats();  // any thread: rdmx::Counter
  s.cqes = q.cqes;
  s.completions = q.completions;
  for (uint32_t i = 0; i < win::kNumErrc; ++i) s.rejected[i] = k.errors[i];
  s.umrs_in_flight = c->pc->umrs_in_flight();
  s.cached_windows = c->pc->cache().len();
  if (size >= offsetof(rdmx_core_stats, refused_remote_accesses) + sizeof(uint64_t))
    if (auto n = c->port->ep.device().refused_remote_accesses(c->pc->qp_handle()))
      s.refused_remote_accesses = *n;
  std::memcpy(out, &s, std::min(size, sizeof(s)));
  return 0;
}

int rdmx_stats_snapshot(const rdmx_core* c, rdmx_stat* out, size_t n) {
  if (!out && n) return -RDMX_EINVAL;
  static_assert(sizeof(rdmx_stat) == sizeof(win::NamedValue) &&
                offsetof(rdmx_stat, value) == offsetof(win::NamedValue, value));
  const win::CoreCounts k = c ? win::snapshot(c->pc->stats()) : win::stats_total();
  win::NamedValue v[win::kMaxXstats];
  const size_t total = win::xstats(k, v, win::kMaxXstats);
  for (size_t i = 0; i < n && i < total; ++i) out[i] = {v[i].name, v[i].value};
  return static_cast<int>(total);
}

}  // extern "C"

// ---- Rendezvous over TCP (lib/endpoint/rendezvous) ---------------------------------------------

struct rdmx_listener {
  endpoint::Listener l;
  endpoint::Door door;  // rdmx_accept_hello: admits over l without waiting on one client
  // rdmx_conn_opts.cm: the rdma_cm listener on the same port number, shared with every
  // connection accepted here (their cores are accepted on it).
  std::shared_ptr<endpoint::CmPeer> cm;
};
// A connection is a session (lib/endpoint/session.hpp) whose hello is the application's own
// (rdmx_conn_send/recv): it starts in INFO; the exchange and ready steps are the session's.
struct rdmx_conn {
  endpoint::Session s;
  std::string peer_address;  // rdmx_connect_to's "HOST[:PORT]": where rdmx_conn_reconnect goes
  bool cm = false;           // rdmx_conn_opts.cm: the exchange connects through rdma_cm
  // The server: its listener's rdma_cm listener; the client: its own, made by each exchange.
  std::shared_ptr<endpoint::CmPeer> cm_peer;
  std::vector<uint64_t> cm_ids;  // this connection's rdma_cm connections in cm_peer

  rdmx_conn(endpoint::Session s_, std::string peer = {}, bool cm_ = false,
            std::shared_ptr<endpoint::CmPeer> p = {})
      : s(std::move(s_)), peer_address(std::move(peer)), cm(cm_), cm_peer(std::move(p)) {}
  rdmx_conn(const rdmx_conn&) = delete;
  rdmx_conn& operator=(const rdmx_conn&) = delete;
  // The session is over: its rdma_cm connections go with it (a shared listener's CmPeer would
  // otherwise keep them, and their cm_ids, until the listener closes).
  ~rdmx_conn() { release_cm(); }
  void release_cm() {
    if (cm_peer)
      for (uint64_t id : cm_ids) cm_peer->release(id);
    cm_ids.clear();
  }
};

namespace {

endpoint::Wait c_wait(uint32_t timeout_ms, std::chrono::milliseconds dflt,
                      const volatile int* cancel) {
  endpoint::Wait w;
  w.timeout = timeout_ms ? std::chrono::milliseconds(timeout_ms) : dflt;
  w.cancel_flag = cancel;
  return w;
}

std::vector<rdmx::mlx5::ConnectInfo> local_infos(rdmx_core* const* cores, uint32_t n) {
  std::vector<rdmx::mlx5::ConnectInfo> mine(n);
  for (uint32_t i = 0; i < n; ++i) {
    std::lock_guard lk(cores[i]->port->mu);
    mine[i] = cores[i]->port->ep.device().local_info(cores[i]->pc->qp_handle());
  }
  return mine;
}

// Core i could not be connected: nothing of the refused peer stays connected (the cores
// connected before it back to RESET), and the error names the core.
int refuse_core(rdmx_core* const* cores, uint32_t i, const rdmx::Error& e, const char* what) {
  for (uint32_t j = 0; j < i; ++j) {
    std::lock_guard lj(cores[j]->port->mu);
    (void)cores[j]->port->ep.device().modify_qp(cores[j]->pc->qp_handle(),
                                                rdmx::mlx5::QpState::kReset);
  }
  return fail(e, std::string(what) + ": core " + std::to_string(i));
}

// Connects cores[i] to the peer's i-th; `what` names the caller in errors.
int connect_all(rdmx_core* const* cores, uint32_t n,
                const std::vector<rdmx::mlx5::ConnectInfo>& theirs, const char* what) {
  if (theirs.size() != n)
    return fail(RDMX_EPROTO, std::string(what) + ": the peer exchanged " +
                                 std::to_string(theirs.size()) + " core(s), this side " +
                                 std::to_string(n));
  for (uint32_t i = 0; i < n; ++i) {
    std::unique_lock lk(cores[i]->port->mu);
    // A core that served another peer (rdmx_core_disconnect): drained, reconnected as a new
    // incarnation, its windows invalidated (their mappings belonged to the last peer).
    auto s = cores[i]->used
                 ? endpoint::recover_core(*cores[i]->pc, theirs[i])
                 : cores[i]->port->ep.device().connect(cores[i]->pc->qp_handle(), theirs[i]);
    if (s) cores[i]->used = false;
    if (!s) {
      lk.unlock();
      return refuse_core(cores, i, s.error(), what);
    }
  }
  return 0;
}

bool bad_cores(rdmx_core* const* cores, uint32_t n) {
  if (!cores || n == 0) return true;
  for (uint32_t i = 0; i < n; ++i)
    if (!cores[i]) return true;
  return false;
}

// A session's step budget: timeout_ms, or the default.
std::chrono::milliseconds step_budget(uint32_t timeout_ms) {
  return timeout_ms ? std::chrono::milliseconds(timeout_ms) : endpoint::kDefaultExchangeTimeout;
}

// The exchange's first half, once: this side's infos go (the peer's must be one per core).
int send_infos(rdmx_conn* c, rdmx_core* const* cores, uint32_t n, uint32_t timeout_ms,
               const char* what) {
  if (c->s.info_sent()) return 0;
  c->s.set_step_timeout(step_budget(timeout_ms));
  // The session states (client) or checks first (server) the link of the cores' device.
  c->s.set_link(endpoint::device_link(cores[0]->port->ep.backend()));  // fixed at the port's open
  if (auto st = c->s.send_info(local_infos(cores, n), n); !st) return fail(st.error(), what);
  return 0;
}

// rdmx_conn_opts.cm: cores[i] connected through rdma_cm instead of the INFO frames (the server
// accepts the client's requests in the client's core order; lib/endpoint/cm.hpp); a core that
// served another peer is drained first and its windows invalidated after, as in connect_all.
// A failure puts the cores connected before it back to RESET.
int cm_exchange(rdmx_conn* c, rdmx_core* const* cores, uint32_t n, uint32_t timeout_ms,
                const char* what) {
  if (c->s.have_peer_infos()) return 0;
  c->release_cm();  // this connection's earlier ones (a reconnect): their QPs connect again
  const bool server = c->peer_address.empty();
  endpoint::HostPort to;
  if (server) {
    if (!c->cm_peer) return fail(RDMX_ESTATE, std::string(what) + ": not listening with rdma_cm");
  } else {
    auto hp = endpoint::parse_peer_address(c->peer_address);
    if (!hp) return fail(hp.error(), what);
    to = hp.value();
    c->cm_peer = endpoint::CmPeer::client_any();  // the last exchange's rdma_cm ids disconnect
  }
  const int step_ms = static_cast<int>(step_budget(timeout_ms).count());
  for (uint32_t i = 0; i < n; ++i) {
    rdmx_core* k = cores[i];
    rdmx::mlx5::Device& dev = k->port->ep.device();
    const rdmx::mlx5::QpHandle qp = k->pc->qp_handle();
    rdmx::Status s = endpoint::CmPeer::check_device(dev);
    {
      std::lock_guard lk(k->port->mu);
      if (s && k->used) s = endpoint::drain_core(*k->pc);
    }
    // The handshake waits on the peer (up to step_ms) without the port's lock, so that a slow or
    // silent peer holds up no other connection of this port: its cm_ids are this exchange's own,
    // and the QP's transitions take the device's own lock (DvDevice, whose calls all lock; the
    // core is not running while it is exchanged). Accepts on one listener still go one at a time
    // (CmPeer: one event channel).
    if (s) {
      auto id = server ? c->cm_peer->accept(dev, qp, step_ms) : c->cm_peer->connect(dev, qp, to);
      if (id)
        c->cm_ids.push_back(id.value());
      else
        s = id.error();
    }
    {
      std::lock_guard lk(k->port->mu);
      if (s && k->used) s = k->pc->recover();
      if (s) k->used = false;
    }
    if (!s) return refuse_core(cores, i, s.error(), what);
  }
  if (auto st = c->s.connected_elsewhere(); !st) return fail(st.error(), what);
  return 0;
}

// With cm and a port: whether the port's device can use rdma_cm (emu cannot).
int check_cm_port(const rdmx_conn_opts& o, const char* what) {
  if (!o.cm || !o.port) return 0;
  std::lock_guard lk(o.port->mu);
  if (auto s = endpoint::CmPeer::check_device(o.port->ep.device()); !s)
    return fail(s.error(), what);
  return 0;
}

// The ready step's first half, once the infos are in: this side's ready goes.
int send_ready(rdmx_conn* c, uint32_t timeout_ms, const char* what) {
  if (c->s.state() != endpoint::SessionState::kInfo) return 0;
  c->s.set_step_timeout(step_budget(timeout_ms));
  if (auto st = c->s.ready(); !st) return fail(st.error(), what);
  return 0;
}

}  // namespace

extern "C" {

int rdmx_listen(const char* address, rdmx_listener** out) {
  return guarded("rdmx_listen", [&]() -> int {
    if (!address || !out) return fail(RDMX_EINVAL, "rdmx_listen: NULL argument");
    *out = nullptr;
    auto at = endpoint::parse_listen_address(address);
    if (!at) return fail(at.error(), "rdmx_listen");
    auto l = endpoint::Listener::listen(at.value());
    if (!l) return fail(l.error(), "rdmx_listen");
    *out = new rdmx_listener{std::move(l).value(), {}};
    (*out)->door = endpoint::Door(&(*out)->l);
    return 0;
  });
}

void rdmx_conn_opts_init(rdmx_conn_opts* o) {
  if (o) *o = kConnDefaults;
}

int rdmx_listen_opts(const char* address, const rdmx_conn_opts* opts, rdmx_listener** out) {
  static constexpr const char* kWhat = "rdmx_listen_opts";
  return guarded(kWhat, [&]() -> int {
    if (!address || !out) return fail(RDMX_EINVAL, "rdmx_listen_opts: NULL argument");
    *out = nullptr;
    const rdmx_conn_opts o = read_opts(opts, kConnDefaults);
    if (const int rc = check_cm_port(o, kWhat); rc < 0) return rc;
    if (const int rc = rdmx_listen(address, out); rc < 0) return rc;
    if (!o.cm) return 0;
    // rdma_cm's listener on the same address and port number (port 0: the one TCP bound).
    auto cm = [&]() -> rdmx::Result<std::unique_ptr<endpoint::CmPeer>> {
      RDMX_TRY_ASSIGN(endpoint::HostPort at, endpoint::parse_listen_address(address));
      at.port = static_cast<uint16_t>((*out)->l.port());
      return endpoint::CmPeer::listen_any(at);
    }();
    if (!cm) {
      rdmx_listener_close(*out);
      *out = nullptr;
      return fail(cm.error(), kWhat);
    }
    (*out)->cm = std::move(cm).value();
    return 0;
  });
}

int rdmx_connect_to_opts(const char* peer, uint32_t timeout_ms, const volatile int* cancel,
                         const rdmx_conn_opts* opts, rdmx_conn** out) {
  static constexpr const char* kWhat = "rdmx_connect_to_opts";
  return guarded(kWhat, [&]() -> int {
    if (!peer || !out) return fail(RDMX_EINVAL, "rdmx_connect_to_opts: NULL argument");
    *out = nullptr;
    const rdmx_conn_opts o = read_opts(opts, kConnDefaults);
    if (const int rc = check_cm_port(o, kWhat); rc < 0) return rc;
    if (const int rc = rdmx_connect_to(peer, timeout_ms, cancel, out); rc < 0) return rc;
    (*out)->cm = o.cm != 0;
    return 0;
  });
}

unsigned rdmx_listener_port(const rdmx_listener* l) {
  return l ? l->l.port() : 0;
}

const char* rdmx_listener_address(const rdmx_listener* l) {
  return l ? l->l.address().c_str() : "";
}

int rdmx_accept(rdmx_listener* l, uint32_t timeout_ms, const volatile int* cancel,
                rdmx_conn** out) {
  return guarded("rdmx_accept", [&]() -> int {
    if (!l || !out) return fail(RDMX_EINVAL, "rdmx_accept: NULL argument");
    *out = nullptr;
    auto ch = l->l.accept(c_wait(timeout_ms, endpoint::kDefaultAcceptTimeout, cancel));
    if (!ch) return fail(ch.error(), "rdmx_accept");
    *out = new rdmx_conn{
        endpoint::Session::after_hello(std::move(ch).value()), {}, l->cm != nullptr, l->cm};
    return 0;
  });
}

void rdmx_listener_close(rdmx_listener* l) {
  delete l;
}

int rdmx_connect_to(const char* peer, uint32_t timeout_ms, const volatile int* cancel,
                    rdmx_conn** out) {
  return guarded("rdmx_connect_to", [&]() -> int {
    if (!peer || !out) return fail(RDMX_EINVAL, "rdmx_connect_to: NULL argument");
    *out = nullptr;
    auto to = endpoint::parse_peer_address(peer);
    if (!to) return fail(to.error(), "rdmx_connect_to");
    auto ch = endpoint::Channel::connect(
        to.value(), c_wait(timeout_ms, endpoint::kDefaultConnectTimeout, cancel));
    if (!ch) return fail(ch.error(), "rdmx_connect_to");
    *out = new rdmx_conn{endpoint::Session::after_hello(std::move(ch).value(), {}, true), peer};
    return 0;
  });
}

int rdmx_conn_reconnect(rdmx_conn* c, uint32_t timeout_ms, const volatile int* cancel) {
  return guarded("rdmx_conn_reconnect", [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_conn_reconnect: NULL argument");
    if (c->peer_address.empty())
      return fail(RDMX_ESTATE, "rdmx_conn_reconnect: not a connection made by rdmx_connect_to");
    auto to = endpoint::parse_peer_address(c->peer_address);
    if (!to) return fail(to.error(), "rdmx_conn_reconnect");
    // The old connection ends here (the peer, if alive, sees it closed).
    c->s.drop(Errc::kState, "reconnecting");
    auto ch = endpoint::Channel::connect(
        to.value(), c_wait(timeout_ms, endpoint::kDefaultConnectTimeout, cancel));
    if (!ch) return fail(ch.error(), "rdmx_conn_reconnect");
    c->s = endpoint::Session::after_hello(std::move(ch).value(), {}, true);
    return 0;
  });
}

const char* rdmx_conn_peer(const rdmx_conn* c) {
  return c ? c->s.peer().c_str() : "";
}

int rdmx_conn_exchange(rdmx_conn* c, rdmx_core* const* cores, uint32_t n, uint32_t timeout_ms,
                       const volatile int* cancel) {
  static constexpr const char* kWhat = "rdmx_conn_exchange";
  return guarded(kWhat, [&]() -> int {
    if (!c || bad_cores(cores, n)) return fail(RDMX_EINVAL, "rdmx_conn_exchange: bad arguments");
    if (c->cm) return cm_exchange(c, cores, n, timeout_ms, kWhat);
    if (const int rc = send_infos(c, cores, n, timeout_ms, kWhat); rc < 0) return rc;
    // One info per core, no QPN twice, every field in the codec's rules, all checked by the
    // session before any core is connected.
    if (!c->s.have_peer_infos())
      if (auto st = c->s.await(endpoint::SessionEvent::kInfos,
                               c_wait(timeout_ms, endpoint::kDefaultExchangeTimeout, cancel));
          !st)
        return fail(st.error(), kWhat);
    return connect_all(cores, n, c->s.peer_infos(), kWhat);
  });
}

int rdmx_conn_try_exchange(rdmx_conn* c, rdmx_core* const* cores, uint32_t n, uint32_t timeout_ms) {
  static constexpr const char* kWhat = "rdmx_conn_try_exchange";
  return guarded(kWhat, [&]() -> int {
    if (!c || bad_cores(cores, n))
      return fail(RDMX_EINVAL, "rdmx_conn_try_exchange: bad arguments");
    if (c->cm) {  // the rdma_cm handshakes wait (each bounded by timeout_ms)
      const int rc = cm_exchange(c, cores, n, timeout_ms, kWhat);
      return rc < 0 ? rc : 1;
    }
    if (const int rc = send_infos(c, cores, n, timeout_ms, kWhat); rc < 0) return rc;
    if (!c->s.have_peer_infos()) {
      const endpoint::SessionEvent e = c->s.step();
      if (e == endpoint::SessionEvent::kDropped) return fail(c->s.error(), kWhat);
      if (e != endpoint::SessionEvent::kInfos) return 0;
    }
    const int rc = connect_all(cores, n, c->s.peer_infos(), kWhat);
    return rc < 0 ? rc : 1;
  });
}

int rdmx_conn_try_ready(rdmx_conn* c, uint32_t timeout_ms) {
  static constexpr const char* kWhat = "rdmx_conn_try_ready";
  return guarded(kWhat, [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_conn_try_ready: NULL argument");
    if (const int rc = send_ready(c, timeout_ms, kWhat); rc < 0) return rc;
    if (c->s.state() == endpoint::SessionState::kRunning) return 1;
    const endpoint::SessionEvent e = c->s.step();
    if (e == endpoint::SessionEvent::kDropped) return fail(c->s.error(), kWhat);
    return e == endpoint::SessionEvent::kReady ? 1 : 0;
  });
}

int rdmx_accept_hello(rdmx_listener* l, uint32_t hello_ms, void* buf, size_t cap, size_t* len,
                      rdmx_conn** out) {
  return guarded("rdmx_accept_hello", [&]() -> int {
    if (!l || !out || !len || (!buf && cap))
      return fail(RDMX_EINVAL, "rdmx_accept_hello: NULL argument");
    *out = nullptr;
    *len = 0;
    endpoint::Door::Config cfg = l->door.config();
    cfg.hello_timeout =
        hello_ms ? std::chrono::milliseconds(hello_ms) : endpoint::kDefaultExchangeTimeout;
    l->door.set_config(cfg);
    auto a = l->door.poll();
    if (!a) return fail(a.error(), "");  // "peer ADDR ...": the line the server prints
    if (!a.value()) return 0;
    const auto& p = a.value()->hello.payload;
    if (!p.empty() && cap) std::memcpy(buf, p.data(), std::min(cap, p.size()));
    *len = p.size();
    *out = new rdmx_conn{
        endpoint::Session::after_hello(std::move(a.value()->ch)), {}, l->cm != nullptr, l->cm};
    return 1;
  });
}

int rdmx_conn_ready(rdmx_conn* c, uint32_t timeout_ms, const volatile int* cancel) {
  static constexpr const char* kWhat = "rdmx_conn_ready";
  return guarded(kWhat, [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_conn_ready: NULL argument");
    if (const int rc = send_ready(c, timeout_ms, kWhat); rc < 0) return rc;
    if (c->s.state() == endpoint::SessionState::kRunning) return 0;
    if (auto st = c->s.await(endpoint::SessionEvent::kReady,
                             c_wait(timeout_ms, endpoint::kDefaultExchangeTimeout, cancel));
        !st)
      return fail(st.error(), kWhat);
    return 0;
  });
}

int rdmx_conn_send(rdmx_conn* c, const void* buf, size_t len, uint32_t timeout_ms,
                   const volatile int* cancel) {
  return guarded("rdmx_conn_send", [&]() -> int {
    if (!c || (!buf && len)) return fail(RDMX_EINVAL, "rdmx_conn_send: NULL argument");
    auto s =
        c->s.channel().send(endpoint::FrameType::kHello, {static_cast<const uint8_t*>(buf), len},
                            c_wait(timeout_ms, endpoint::kDefaultExchangeTimeout, cancel));
    if (!s) return fail(s.error(), "rdmx_conn_send");
    return 0;
  });
}

int rdmx_conn_recv(rdmx_conn* c, void* buf, size_t cap, uint32_t timeout_ms,
                   const volatile int* cancel) {
  return guarded("rdmx_conn_recv", [&]() -> int {
    if (!c || (!buf && cap)) return fail(RDMX_EINVAL, "rdmx_conn_recv: NULL argument");
    auto f = c->s.channel().expect(endpoint::FrameType::kHello,
                                   c_wait(timeout_ms, endpoint::kDefaultExchangeTimeout, cancel));
    if (!f) return fail(f.error(), "rdmx_conn_recv");
    const auto& p = f.value().payload;
    if (!p.empty() && cap) std::memcpy(buf, p.data(), std::min(cap, p.size()));
    return static_cast<int>(p.size());
  });
}

int rdmx_conn_peer_gone(const rdmx_conn* c) {
  return !c || c->s.channel().peer_gone() ? 1 : 0;
}

int rdmx_conn_peer_bye(rdmx_conn* c) {
  return guarded("rdmx_conn_peer_bye", [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_conn_peer_bye: NULL argument");
    if (auto s = c->s.peer_bye_in_band(); !s) return fail(s.error(), "rdmx_conn_peer_bye");
    return 0;
  });
}

int rdmx_conn_qp_error(rdmx_conn* c, const char* what) {
  return guarded("rdmx_conn_qp_error", [&]() -> int {
    if (!c) return fail(RDMX_EINVAL, "rdmx_conn_qp_error: NULL argument");
    // The session's rule (session.hpp): after the peer's goodbye the error ends it.
    if (c->s.qp_error(what ? what : "a QP in error") != endpoint::SessionEvent::kDropped &&
        c->s.state() != endpoint::SessionState::kDropped)
      return 0;
    return fail(RDMX_EQPERROR, c->s.error().message);
  });
}

void rdmx_conn_close(rdmx_conn* c) {
  delete c;
}

}  // extern "C"
