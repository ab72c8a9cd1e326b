// librdmacm connection management for DvDevice queue pairs (see cm.hpp for the protocol).
#include <rdmx/dv/cm.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <rdma/rdma_cma.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include <rdmx/core/log.hpp>
#include <rdmx/dv/dv_device.hpp>
#include <rdmx/dv/dv_math.hpp>

#include "dv_raii.hpp"

namespace rdmx::dv {

namespace {

int last_errno() noexcept {
  return errno ? errno : EIO;
}

// ENODEV is what librdmacm reports when the machine has no RDMA device (ucma_init finds no
// verbs device, or /dev/infiniband/rdma_cm is missing): kNoDevice, saying so.
[[gnu::cold]] Error cm_error(const std::string& call, int err) {
  return make_error(err == ENODEV ? Errc::kNoDevice : Errc::kDeviceError,
                    call + " failed: " + std::strerror(err) + " (errno " + std::to_string(err) +
                        ")" + (err == ENODEV ? ": no RDMA device for rdma_cm on this host" : ""));
}

struct AckEvent {
  void operator()(rdma_cm_event* e) const noexcept {
    if (e) (void)rdma_ack_cm_event(e);
  }
};
using EventPtr = std::unique_ptr<rdma_cm_event, AckEvent>;

// Waits for the next event on `ch` and requires it to be `want`.
Result<EventPtr> wait_event(rdma_event_channel* ch, rdma_cm_event_type want, int timeout_ms,
                            const std::string& what) {
  pollfd pfd{ch->fd, POLLIN, 0};
  int rc;
  do {
    rc = ::poll(&pfd, 1, timeout_ms);
  } while (rc < 0 && errno == EINTR);
  if (rc < 0) return cm_error("poll(rdma_cm event channel)", last_errno());
  if (rc == 0)
    return make_error(Errc::kTimeout, what + ": no " + rdma_event_str(want) + " within " +
                                          std::to_string(timeout_ms) + " ms");
  rdma_cm_event* raw = nullptr;
  if (rdma_get_cm_event(ch, &raw)) return cm_error("rdma_get_cm_event", last_errno());
  EventPtr ev(raw);
  if (ev->event != want)
    return make_error(ev->event == RDMA_CM_EVENT_REJECTED ? Errc::kBusy : Errc::kDeviceError,
                      what + ": expected " + rdma_event_str(want) + ", got " +
                          rdma_event_str(ev->event) + " (status " + std::to_string(ev->status) +
                          ")");
  return ev;
}

// The route rdma_cm resolved against the device, port and GID the QP sends from (match_route).
Status check_route(rdma_cm_id* id, DvDevice& dev, mlx5::QpHandle qp) {
  if (!id->verbs) return make_error(Errc::kDeviceError, "rdma_cm id is bound to no RDMA device");
  PathEnd route;
  route.device = ibv_get_device_name(id->verbs->device);
  route.port = id->port_num;
  std::memcpy(route.gid, id->route.addr.addr.ibaddr.sgid.raw, 16);
  const mlx5::ConnectInfo mine = dev.local_info(qp);
  PathEnd ours;
  ours.device = dev.name();
  ours.port = dev.options().port;
  std::memcpy(ours.gid, mine.gid, 16);
  int index = -1;  // the route's GID in the port's table, for the message
  ibv_port_attr pa{};
  if (route.device == ours.device && ibv_query_port(id->verbs, route.port, &pa) == 0) {
    for (int i = 0; i < pa.gid_tbl_len && index < 0; ++i) {
      ibv_gid g{};
      if (ibv_query_gid(id->verbs, route.port, i, &g) == 0 &&
          std::memcmp(g.raw, route.gid, 16) == 0)
        index = i;
    }
  }
  return match_route(route, ours, index);
}

// The route parameters rdma_cm states for this connection's QP (dv_math.hpp CmRoute):
// rdma_init_qp_attr asked for RTR, then RTS (librdmacm cma.c rdma_init_qp_attr; Linux
// drivers/infiniband/core/cma.c rdma_init_qp_attr answers from the IB CM id, core/cm.c
// cm_init_qp_rtr_attr / cm_init_qp_rts_attr: the path record's address vector and MTU, the
// ack timeout the CM computed, the REQ's retry counts, min_rnr_timer 0 unless
// rdma_set_option(RDMA_OPTION_ID_ACK_TIMEOUT / RDMA_OPTION_ID_RNR_TIMEOUT) changed them). The IB
// CM id exists once a REQ was sent or received: ask after CONNECT_RESPONSE (active) or
// CONNECT_REQUEST (passive); at ROUTE_RESOLVED cma_ib_init_qp_attr answers INIT fields only.
Result<CmRoute> route_params(rdma_cm_id* id) {
  ibv_qp_attr rtr{};
  int rtr_mask = 0;
  rtr.qp_state = IBV_QPS_RTR;
  if (rdma_init_qp_attr(id, &rtr, &rtr_mask))
    return cm_error("rdma_init_qp_attr(RTR)", last_errno());
  ibv_qp_attr rts{};
  int rts_mask = 0;
  rts.qp_state = IBV_QPS_RTS;
  if (rdma_init_qp_attr(id, &rts, &rts_mask))
    return cm_error("rdma_init_qp_attr(RTS)", last_errno());
  return cm_route_from_attrs(rtr, rtr_mask, rts, rts_mask);
}

rdma_conn_param conn_param(const CmOptions& o, const mlx5::ConnectInfoBytes& pd, uint32_t qpn) {
  rdma_conn_param cp{};
  cp.private_data = pd.data();
  cp.private_data_len = static_cast<uint8_t>(pd.size());
  cp.responder_resources = o.responder_resources;
  cp.initiator_depth = o.initiator_depth;
  cp.retry_count = o.retry_count;
  cp.rnr_retry_count = o.rnr_retry_count;
  cp.qp_num = qpn;
  return cp;
}

Result<mlx5::ConnectInfo> peer_info(const rdma_cm_event& ev) {
  const auto* p = static_cast<const uint8_t*>(ev.param.conn.private_data);
  if (!p) return make_error(Errc::kProtocol, "connect info: the peer sent no private data");
  return mlx5::decode_connect_info(std::span<const uint8_t>(p, ev.param.conn.private_data_len));
}

// What both sides start from: an event channel, a TCP-port-space cm_id on it, and the address
// of host:port (passive: the local address to bind; host nullptr = any).
struct Endpoint {
  detail::EventChannelPtr ch;
  detail::CmIdPtr id;
  detail::AddrInfoPtr ai;
};
Result<Endpoint> open_endpoint(const char* host, uint16_t port, bool passive,
                               const std::string& where) {
  Endpoint e;
  e.ch.reset(rdma_create_event_channel());
  if (!e.ch) return cm_error("rdma_create_event_channel", last_errno());
  rdma_cm_id* raw_id = nullptr;
  if (rdma_create_id(e.ch.get(), &raw_id, nullptr, RDMA_PS_TCP))
    return cm_error("rdma_create_id", last_errno());
  e.id.reset(raw_id);
  rdma_addrinfo hints{};
  if (passive) hints.ai_flags = RAI_PASSIVE;
  hints.ai_port_space = RDMA_PS_TCP;
  hints.ai_qp_type = IBV_QPT_RC;
  rdma_addrinfo* raw_ai = nullptr;
  const std::string port_s = std::to_string(port);
  if (int rc = rdma_getaddrinfo(host, port_s.c_str(), &hints, &raw_ai); rc)
    return make_error(Errc::kInvalidArgument,
                      "rdma_getaddrinfo(" + where +
                          ") failed: " + (rc == -1 ? std::strerror(errno) : gai_strerror(rc)));
  e.ai.reset(raw_ai);
  return e;
}

}  // namespace

// ---- CmConnection -------------------------------------------------------------------------------

CmConnection::~CmConnection() {
  if (connected_ && id_) (void)rdma_disconnect(id_);
  if (id_) (void)rdma_destroy_id(id_);
  if (ch_) rdma_destroy_event_channel(ch_);
}

Status CmConnection::disconnect() {
  if (!connected_) return {};
  connected_ = false;
  if (rdma_disconnect(id_)) return cm_error("rdma_disconnect", last_errno());
  auto ev = wait_event(ch_, RDMA_CM_EVENT_DISCONNECTED, timeout_ms_, "disconnect");
  if (!ev.ok()) return ev.error();
  return {};
}

// ---- Active side --------------------------------------------------------------------------------

Result<std::unique_ptr<CmConnection>> cm_connect(DvDevice& dev, mlx5::QpHandle qp,
                                                 const std::string& host, uint16_t port,
                                                 const CmOptions& opts) {
  const std::string where = host + ":" + std::to_string(port);
  auto ep = open_endpoint(host.c_str(), port, false, where);
  if (!ep.ok()) return std::move(ep).error();
  auto& [ch, id, ai] = ep.value();

  if (rdma_resolve_addr(id.get(), ai->ai_src_addr, ai->ai_dst_addr, opts.timeout_ms))
    return cm_error("rdma_resolve_addr(" + where + ")", last_errno());
  if (auto ev =
          wait_event(ch.get(), RDMA_CM_EVENT_ADDR_RESOLVED, opts.timeout_ms, "resolving " + where);
      !ev.ok())
    return ev.error();
  if (rdma_resolve_route(id.get(), opts.timeout_ms))
    return cm_error("rdma_resolve_route(" + where + ")", last_errno());
  if (auto ev =
          wait_event(ch.get(), RDMA_CM_EVENT_ROUTE_RESOLVED, opts.timeout_ms, "route to " + where);
      !ev.ok())
    return ev.error();
  if (auto s = check_route(id.get(), dev, qp); !s) return s.error();

  const mlx5::ConnectInfoBytes pd = mlx5::encode_connect_info(dev.local_info(qp));
  rdma_conn_param cp = conn_param(opts, pd, qp);
  if (rdma_connect(id.get(), &cp)) return cm_error("rdma_connect(" + where + ")", last_errno());
  auto ev = wait_event(ch.get(), RDMA_CM_EVENT_CONNECT_RESPONSE, opts.timeout_ms,
                       "connecting to " + where);
  if (!ev.ok()) return ev.error();
  auto remote = peer_info(*ev.value());
  const rdma_conn_param rep = ev.value()->param.conn;
  ev.value().reset();
  if (!remote.ok()) {
    (void)rdma_disconnect(id.get());
    return remote.error();
  }
  // The READ depths the CM agreed bound the QP's (librdmacm cma.c ucma_modify_qp_rtr/_rts
  // apply them to a CM-managed QP; ours is created outside the CM, so rdmx applies them).
  remote.value() = fold_cm_depths(remote.value(), rep.responder_resources, rep.initiator_depth,
                                  opts.responder_resources, opts.initiator_depth);
  auto route = route_params(id.get());
  if (!route.ok()) {
    (void)rdma_disconnect(id.get());
    return route.error();
  }
  if (auto s = dev.connect_routed(qp, remote.value(), route.value()); !s) {
    (void)rdma_disconnect(id.get());
    return s.error();
  }
  if (rdma_establish(id.get())) return cm_error("rdma_establish(" + where + ")", last_errno());

  auto c = std::unique_ptr<CmConnection>(new CmConnection());
  c->remote_ = remote.value();
  c->qp_ = qp;
  c->timeout_ms_ = opts.timeout_ms;
  c->connected_ = true;
  c->id_ = id.release();  // destroyed before its channel (~CmConnection)
  c->ch_ = ch.release();
  RDMX_LOG_INFO("dv: QP %#x connected to %s (peer QP %#x)", qp, where.c_str(), c->remote_.qpn);
  return c;
}

// ---- Passive side -------------------------------------------------------------------------------

CmListener::~CmListener() {
  if (id_) (void)rdma_destroy_id(id_);
  if (ch_) rdma_destroy_event_channel(ch_);
}

Result<std::unique_ptr<CmListener>> CmListener::listen(const std::string& bind_host, uint16_t port,
                                                       const CmOptions& opts) {
  const std::string where = (bind_host.empty() ? "*" : bind_host) + ":" + std::to_string(port);
  auto ep = open_endpoint(bind_host.empty() ? nullptr : bind_host.c_str(), port, true, where);
  if (!ep.ok()) return std::move(ep).error();
  auto& [ch, id, ai] = ep.value();
  if (rdma_bind_addr(id.get(), ai->ai_src_addr))
    return cm_error("rdma_bind_addr(" + where + ")", last_errno());
  if (rdma_listen(id.get(), opts.backlog))
    return cm_error("rdma_listen(" + where + ")", last_errno());

  auto l = std::unique_ptr<CmListener>(new CmListener());
  l->port_ = ntohs(rdma_get_src_port(id.get()));
  l->opts_ = opts;
  l->id_ = id.release();
  l->ch_ = ch.release();
  return l;
}

Result<std::unique_ptr<CmConnection>> CmListener::accept(DvDevice& dev, mlx5::QpHandle qp,
                                                         std::optional<int> accept_timeout_ms) {
  // The connection's own channel; declared before the child id so the id is destroyed first.
  detail::EventChannelPtr ch(rdma_create_event_channel());
  if (!ch) return cm_error("rdma_create_event_channel", last_errno());
  auto ev = wait_event(ch_, RDMA_CM_EVENT_CONNECT_REQUEST,
                       accept_timeout_ms.value_or(opts_.accept_timeout_ms),
                       "listening on port " + std::to_string(port_));
  if (!ev.ok()) return ev.error();
  rdma_cm_id* child = ev.value()->id;
  auto remote = peer_info(*ev.value());
  const rdma_conn_param req = ev.value()->param.conn;
  ev.value().reset();  // ack before migrating the id (rdma_migrate_id waits for acks)
  detail::CmIdPtr child_id(child);

  auto reject = [&](const Error& e) -> Error {
    (void)rdma_reject(child, nullptr, 0);
    return e;
  };
  if (!remote.ok()) return reject(remote.error());
  if (auto s = check_route(child, dev, qp); !s) return reject(s.error());

  if (rdma_migrate_id(child, ch.get())) return reject(cm_error("rdma_migrate_id", last_errno()));

  // As on the active side: the CM's READ depths (the REQ's, swapped to our view) bound the QP's.
  remote.value() = fold_cm_depths(remote.value(), req.responder_resources, req.initiator_depth,
                                  opts_.responder_resources, opts_.initiator_depth);
  auto route = route_params(child);
  if (!route.ok()) return reject(route.error());
  if (auto s = dev.connect_routed(qp, remote.value(), route.value()); !s) return reject(s.error());
  const mlx5::ConnectInfoBytes pd = mlx5::encode_connect_info(dev.local_info(qp));
  rdma_conn_param cp = conn_param(opts_, pd, qp);
  if (rdma_accept(child, &cp)) return reject(cm_error("rdma_accept", last_errno()));
  auto est = wait_event(ch.get(), RDMA_CM_EVENT_ESTABLISHED, opts_.timeout_ms, "accepting");
  if (!est.ok()) return est.error();

  auto c = std::unique_ptr<CmConnection>(new CmConnection());
  c->remote_ = remote.value();
  c->qp_ = qp;
  c->timeout_ms_ = opts_.timeout_ms;
  c->connected_ = true;
  c->id_ = child_id.release();
  c->ch_ = ch.release();
  RDMX_LOG_INFO("dv: QP %#x accepted peer QP %#x", qp, c->remote_.qpn);
  return c;
}

}  // namespace rdmx::dv
