// DvDevice: bring-up of a real mlx5 device through rdma-core's mlx5dv API.
//
// Every step cites the fact behind it in doc/guides/mlx5-facts.md ("facts §N") or the
// rdma-core source it relies on. The data path never comes here: it is setup and recovery only.
#include <rdmx/dv/dv_device.hpp>

#include <endian.h>
#include <fcntl.h>
#include <infiniband/mlx5dv.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <unordered_map>

#include <rdmx/core/log.hpp>
#include <rdmx/dv/dv_math.hpp>

#include "dv_raii.hpp"

namespace rdmx::dv {

namespace {

using mlx5::ConnectInfo;
using mlx5::QpState;

// errno of a verbs call: the functions returning int give the error number (ibv_modify_qp, ...)
// or -1 with errno set; the ones returning a pointer set errno.
int err_of(int rc) noexcept {
  return rc > 0 ? rc : (errno ? errno : EIO);
}
int last_errno() noexcept {
  return errno ? errno : EIO;
}

[[gnu::cold]] Error verbs_error(const std::string& call, int err, const std::string& hint = {}) {
  std::string m = call + " failed: " + std::strerror(err) + " (errno " + std::to_string(err) + ")";
  if (!hint.empty()) m += "; " + hint;
  return make_error(err == ENOMEM ? Errc::kNoMemory : Errc::kDeviceError, std::move(m));
}

std::string hex(uint64_t v) {
  char b[24];
  std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
  return b;
}

std::string read_sysfs(const std::string& path) {
  std::ifstream f(path);
  if (!f) return {};
  std::stringstream ss;
  ss << f.rdbuf();
  return trim(ss.str());
}

std::string pci_addr_of(const std::string& ibdev_path) {
  char buf[512];
  const std::string link = ibdev_path + "/device";
  const ssize_t n = ::readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  buf[n] = '\0';
  std::string s(buf);
  const auto slash = s.rfind('/');
  return slash == std::string::npos ? s : s.substr(slash + 1);
}

DeviceInfo info_of(ibv_device* dev) {
  DeviceInfo d;
  d.name = ibv_get_device_name(dev);
  const std::string path = dev->ibdev_path;
  d.numa_node = parse_numa_node(read_sysfs(path + "/device/numa_node"));
  d.pci_addr = pci_addr_of(path);
  d.node_guid = be64toh(ibv_get_device_guid(dev));
  return d;
}

const char* state_name(QpState s) {
  return mlx5::qp_state_name(s);
}

}  // namespace

std::vector<DeviceInfo> probe() {
  int n = 0;
  detail::DeviceListPtr list(ibv_get_device_list(&n));
  std::vector<DeviceInfo> out;
  if (!list) return out;
  for (int i = 0; i < n; ++i)
    if (mlx5dv_is_supported(list.get()[i])) out.push_back(info_of(list.get()[i]));
  return out;
}

// One queue pair and what it owns. Members are destroyed bottom-up: QP, CQ, parent domain, TD
// (the reverse of creation; verbs refuses to free a CQ or a domain still in use).
struct QpRec {
  detail::TdPtr td;
  detail::PdPtr parent;
  detail::CqPtr cq;
  detail::QpPtr qp;
  uint32_t psn = 0;
  ConnectInfo remote;
  bool have_remote = false;
  std::optional<mlx5::RcTimers> timers;  // QpConfig::timers (unset: the device's)
  std::optional<CmRoute> route;          // connect_routed: what rdma_cm resolved (kept by recover)
};

struct DvDevice::Impl {
  detail::ContextPtr ctx;
  detail::PdPtr pd;
  std::unordered_map<uint32_t, detail::PdPtr> pds;  // alloc_pd (handle -> PD), freed after
                                                    // the MRs, mkeys and QPs below
  uint32_t next_pd = 1;
  // The PD of a handle (kDefaultPd: the device's own), or nullptr. Under mu.
  ibv_pd* pd_of(uint32_t h) {
    if (h == mlx5::kDefaultPd) return pd.get();
    auto it = pds.find(h);
    return it == pds.end() ? nullptr : it->second.get();
  }
  std::unordered_map<uint32_t, detail::MrPtr> mrs;           // by lkey
  std::unordered_map<uint32_t, detail::MkeyPtr> mkeys;       // by mkey index (key >> 8)
  std::unordered_map<uint32_t, detail::MwPtr> mws;           // type-2 windows, by index
  std::unordered_map<uint32_t, std::unique_ptr<QpRec>> qps;  // by QPN
  std::mutex mu;
  ibv_device_attr_ex attr{};
  ibv_port_attr port{};
  QpParams params;
  uint16_t lid = 0;
  uint8_t gid[16] = {};
  std::mt19937 rng{std::random_device{}()};

  // DvDevice::open's steps, in bring-up order (defined after open).
  static Result<ibv_device*> find_device(const std::string& name, detail::DeviceListPtr& list);
  Status open_context(ibv_device* dev, const DeviceInfo& info);
  Status query_device_and_port(const DvOptions& opts, const DeviceInfo& info,
                               mlx5dv_context& dvctx);
  Result<int> choose_gid(const DvOptions& opts, const DeviceInfo& info, bool roce);
  Result<ibv_mtu> choose_mtu(const DvOptions& opts) const;
  Status set_qp_params(const DvOptions& opts, ibv_mtu mtu, int gid_index, bool roce);
  mlx5::DeviceCaps verbs_caps(const DeviceInfo& info) const;
  Result<bool> read_hca_caps(const DeviceInfo& info, mlx5::DeviceCaps& caps);
  Status alloc_pd(const DeviceInfo& info);
  Status probe_mkey_flags(const DeviceInfo& info, mlx5::DeviceCaps& caps);

  ~Impl() {
    qps.clear();
    mws.clear();
    mkeys.clear();
    mrs.clear();
    pd.reset();
    ctx.reset();
  }

  QpRec* find_qp(uint32_t qpn) {
    auto it = qps.find(qpn);
    return it == qps.end() ? nullptr : it->second.get();
  }

  Result<QpState> query(QpRec& r) {
    ibv_qp_attr a{};
    ibv_qp_init_attr ia{};
    const int rc = ibv_query_qp(r.qp.get(), &a, IBV_QP_STATE, &ia);
    if (rc) return verbs_error("ibv_query_qp(qpn " + hex(r.qp->qp_num) + ")", err_of(rc));
    auto s = from_ibv_qp_state(a.qp_state);
    if (!s)
      return make_error(Errc::kState, "QP " + hex(r.qp->qp_num) + " is in verbs state " +
                                          std::to_string(a.qp_state) + ", which rdmx does not use");
    return *s;
  }

  Status modify(QpRec& r, const QpTransition& t, const char* step) {
    ibv_qp_attr a = t.attr;
    const int rc = ibv_modify_qp(r.qp.get(), &a, t.mask);
    if (rc == 0) return {};
    const int e = err_of(rc);
    std::string hint;
    if (std::strcmp(step, "INIT->RTR") == 0)
      hint = params.use_grh
                 ? "check the GID index (DvOptions.gid_index " + std::to_string(params.sgid_index) +
                       ") and that the peer's GID is reachable from port " +
                       std::to_string(params.port)
                 : "check the peer's LID and QPN and that port " + std::to_string(params.port) +
                       " is ACTIVE";
    return verbs_error("ibv_modify_qp(qpn " + hex(r.qp->qp_num) + ", " + step + ")", e, hint);
  }

  // The device's transition attributes, with what rdma_cm resolved for the QP's connection in
  // their place, and the QP's own RC timers (QpConfig::timers) over both.
  QpParams params_of(const QpRec& r) const noexcept {
    const QpParams p = r.route ? apply_cm_route(params, *r.route) : params;
    return r.timers ? with_timers(p, *r.timers) : p;
  }

  // RESET (if needed) -> INIT -> RTR -> RTS towards `remote`.
  Status bring_up(QpRec& r, const ConnectInfo& remote) {
    auto cur = query(r);
    if (!cur.ok()) return cur.error();
    if (cur.value() != QpState::kReset) {
      if (auto s = modify(r, state_only_transition(QpState::kReset), "->RESET"); !s) return s;
    }
    if (auto s = modify(r, init_transition(params), "RESET->INIT"); !s) return s;
    r.remote = remote;
    r.have_remote = true;
    // Path MTU and READ depths: the smaller of ours and what the peer stated; the QP's timers.
    const QpParams np = negotiated_params(params_of(r), remote);
    if (auto s = modify(r, rtr_transition(np, remote), "INIT->RTR"); !s) return s;
    return modify(r, rts_transition(np, r.psn), "RTR->RTS");
  }
};

DvDevice::DvDevice(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DvDevice::~DvDevice() = default;

ibv_context* DvDevice::verbs_context() const noexcept {
  return impl_->ctx.get();
}

// ---- Bring-up ----------------------------------------------------------------------------------
//
// DvDevice::open runs the steps below it in order (Impl's bring-up members); each returns the
// error that stops the bring-up, and what it finds is kept in the Impl.

Result<std::unique_ptr<DvDevice>> DvDevice::open(const std::string& name, const DvOptions& opts) {
  // An environment that would make rdma-core create QPs rdmx cannot drive.
  if (std::string why = env_problem(); !why.empty()) return make_error(Errc::kUnsupported, why);
  detail::DeviceListPtr list;
  RDMX_TRY_ASSIGN(ibv_device* const dev, Impl::find_device(name, list));
  const DeviceInfo info = info_of(dev);
  auto impl = std::make_unique<Impl>();
  RDMX_TRY(impl->open_context(dev, info));
  mlx5dv_context dvctx{};
  RDMX_TRY(impl->query_device_and_port(opts, info, dvctx));
  const bool roce = impl->port.link_layer == IBV_LINK_LAYER_ETHERNET;
  RDMX_TRY_ASSIGN(const int gid_index, impl->choose_gid(opts, info, roce));
  RDMX_TRY_ASSIGN(const ibv_mtu mtu, impl->choose_mtu(opts));
  RDMX_TRY(impl->set_qp_params(opts, mtu, gid_index, roce));
  mlx5::DeviceCaps caps = impl->verbs_caps(info);
  RDMX_TRY_ASSIGN(const bool hca_read, impl->read_hca_caps(info, caps));
  RDMX_TRY(impl->alloc_pd(info));
  RDMX_TRY(impl->probe_mkey_flags(info, caps));

  auto d = std::unique_ptr<DvDevice>(new DvDevice(std::move(impl)));
  d->name_ = info.name;
  d->caps_ = caps;
  d->opts_ = opts;
  d->hca_caps_read_ = hca_read;
  d->roce_ = roce;
  RDMX_LOG_INFO(
      "dv: opened %s (%s, NUMA %d, %s port %u, MTU %u, %s, dyn bfregs %u): %u KLMs "
      "per window, %u inline, update_tag %d, remote_invalidate %d",
      info.name.c_str(), info.pci_addr.c_str(), info.numa_node, roce ? "RoCE" : "IB", opts.port,
      mtu_bytes(mtu), hca_read ? "HCA caps read" : "default caps", dvctx.max_dynamic_bfregs,
      caps.max_klm_list, caps.max_inline_klm, caps.mkey_update_tag, caps.remote_invalidate);
  return d;
}

// Step 1: the verbs device by name ("" = the first mlx5 one: ibv_get_device_list,
// mlx5dv_is_supported). `list` keeps the device list alive for the caller.
Result<ibv_device*> DvDevice::Impl::find_device(const std::string& name,
                                                detail::DeviceListPtr& list) {
  int n = 0;
  errno = 0;
  list.reset(ibv_get_device_list(&n));
  const int list_err = list ? 0 : last_errno();
  if (!list) n = 0;
  std::vector<std::string> names;
  ibv_device* dev = nullptr;
  for (int i = 0; i < n; ++i) {
    ibv_device* d = list.get()[i];
    names.emplace_back(ibv_get_device_name(d));
    if (dev) continue;
    if (name.empty() ? mlx5dv_is_supported(d) : names.back() == name) dev = d;
  }
  if (!dev) return make_error(Errc::kNoDevice, no_device_message(name, names, list_err));
  if (!mlx5dv_is_supported(dev))
    return make_error(Errc::kUnsupported, "device \"" + name +
                                              "\" is not an mlx5 device (mlx5dv_is_supported is "
                                              "false); rdmx's real backend drives mlx5 NICs only");
  return dev;
}

// Step 2: open with a DEVX context: mlx5dv_create_mkey issues CREATE_MKEY through DEVX (facts
// §3.1).
Status DvDevice::Impl::open_context(ibv_device* dev, const DeviceInfo& info) {
  mlx5dv_context_attr dvattr{};
  dvattr.flags = MLX5DV_CONTEXT_FLAGS_DEVX;
  errno = 0;
  ctx.reset(mlx5dv_open_device(dev, &dvattr));
  if (ctx) {
    // The async event fd, non-blocking: poll_async_events never waits (ibv_get_async_event(3),
    // "the caller may change the blocking mode of the async_fd with fcntl").
    const int fl = ::fcntl(ctx->async_fd, F_GETFL);
    if (fl < 0 || ::fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
      return verbs_error("fcntl(async_fd, O_NONBLOCK) on " + info.name, last_errno(), "");
    return {};
  }
  const int e = last_errno();
  if (e == EOPNOTSUPP || e == EPROTONOSUPPORT)
    return make_error(Errc::kUnsupported,
                      "mlx5dv_open_device(" + info.name + ", DEVX) failed: " + std::strerror(e) +
                          "; rdmx needs a DEVX context for indirect mkeys (mlx5_ib with "
                          "user-context support and firmware that allows DEVX)");
  return verbs_error("mlx5dv_open_device(" + info.name + ", DEVX)", e, devx_permission_hint());
}

// Step 3: what verbs and mlx5dv say of the device, and the port's attributes.
Status DvDevice::Impl::query_device_and_port(const DvOptions& opts, const DeviceInfo& info,
                                             mlx5dv_context& dvctx) {
  if (int rc = ibv_query_device_ex(ctx.get(), nullptr, &attr); rc)
    return verbs_error("ibv_query_device_ex(" + info.name + ")", err_of(rc));
  dvctx.comp_mask = MLX5DV_CONTEXT_MASK_DYN_BFREGS;
  if (int rc = mlx5dv_query_device(ctx.get(), &dvctx); rc)
    return verbs_error("mlx5dv_query_device(" + info.name + ")", err_of(rc));
  if (opts.port == 0 || opts.port > attr.orig_attr.phys_port_cnt)
    return make_error(Errc::kInvalidArgument,
                      "port " + std::to_string(opts.port) + " does not exist on " + info.name +
                          " (it has " + std::to_string(attr.orig_attr.phys_port_cnt) + " port(s))");
  if (int rc = ibv_query_port(ctx.get(), opts.port, &port); rc)
    return verbs_error("ibv_query_port(" + info.name + ", " + std::to_string(opts.port) + ")",
                       err_of(rc));
  if (port.state != IBV_PORT_ACTIVE)
    RDMX_LOG_WARN("dv: %s port %u is not ACTIVE (state %d); connections will fail until it is",
                  info.name.c_str(), opts.port, static_cast<int>(port.state));
  lid = port.lid;
  return {};
}

// Step 4: the GID index and its GID. RoCE needs one on every packet (GRH); InfiniBand only across
// subnets (force_grh). -1: none.
Result<int> DvDevice::Impl::choose_gid(const DvOptions& opts, const DeviceInfo& info, bool roce) {
  int gid_index = opts.gid_index;
  if (gid_index < 0 && roce) {
    std::vector<ibv_gid_entry> raw(std::max(port.gid_tbl_len, 1));
    const ssize_t got = ibv_query_gid_table(ctx.get(), raw.data(), raw.size(), 0);
    std::vector<GidEntry> table;
    for (ssize_t i = 0; i < got; ++i) {
      GidEntry g;
      g.index = raw[i].gid_index;
      g.port = raw[i].port_num;
      g.type = raw[i].gid_type;
      std::memcpy(g.gid, raw[i].gid.raw, 16);
      table.push_back(g);
    }
    auto pick = pick_roce_gid(table, opts.port);
    if (!pick)
      return make_error(Errc::kDeviceError,
                        info.name + " port " + std::to_string(opts.port) +
                            " is RoCE but has no GID (no IP address on its netdev?); set "
                            "DvOptions.gid_index");
    gid_index = static_cast<int>(*pick);
  }
  if (gid_index < 0) return gid_index;
  if (gid_index >= port.gid_tbl_len)
    return make_error(Errc::kInvalidArgument, "GID index " + std::to_string(gid_index) +
                                                  " is past the GID table of " + info.name +
                                                  " port " + std::to_string(opts.port) + " (" +
                                                  std::to_string(port.gid_tbl_len) + " entries)");
  ibv_gid g{};
  if (int rc = ibv_query_gid(ctx.get(), opts.port, gid_index, &g); rc)
    return verbs_error("ibv_query_gid(" + info.name + ", index " + std::to_string(gid_index) + ")",
                       err_of(rc));
  std::memcpy(gid, g.raw, 16);
  return gid_index;
}

// Step 5: the MTU a QP uses: the port's active MTU, or DvOptions.mtu when that is smaller.
Result<ibv_mtu> DvDevice::Impl::choose_mtu(const DvOptions& opts) const {
  if (opts.mtu == 0) return port.active_mtu;
  auto m = mtu_from_bytes(opts.mtu);
  if (!m)
    return make_error(Errc::kInvalidArgument, "DvOptions.mtu " + std::to_string(opts.mtu) +
                                                  " is not one of 256, 512, 1024, 2048, 4096");
  return std::min(*m, port.active_mtu);
}

// Step 6: the attributes every QP of the device is brought up with (rtr/rts_transition).
Status DvDevice::Impl::set_qp_params(const DvOptions& opts, ibv_mtu mtu, int gid_index, bool roce) {
  QpParams& p = params;
  p.port = opts.port;
  p.qp_access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                (attr.orig_attr.atomic_cap != IBV_ATOMIC_NONE ? IBV_ACCESS_REMOTE_ATOMIC : 0);
  p.mtu = mtu;
  p.max_dest_rd_atomic = static_cast<uint8_t>(
      std::min<int>(opts.max_rd_atomic, std::max(attr.orig_attr.max_qp_rd_atom, 1)));
  p.max_rd_atomic = static_cast<uint8_t>(
      std::min<int>(opts.max_rd_atomic, std::max(attr.orig_attr.max_qp_init_rd_atom, 1)));
  p = with_timers(p, opts.timers);
  p.sl = opts.sl;
  p.use_grh = roce || opts.force_grh;
  p.sgid_index = static_cast<uint8_t>(gid_index < 0 ? 0 : gid_index);
  p.hop_limit = opts.hop_limit;
  p.traffic_class = opts.traffic_class;
  if (p.use_grh && gid_index < 0)
    return make_error(Errc::kInvalidArgument, "DvOptions.force_grh needs DvOptions.gid_index");
  return {};
}

// Step 7: the capabilities verbs reports (queue depths) and the NUMA node.
mlx5::DeviceCaps DvDevice::Impl::verbs_caps(const DeviceInfo& info) const {
  mlx5::DeviceCaps caps;
  caps.max_sq_wqebbs = static_cast<uint32_t>(attr.orig_attr.max_qp_wr);
  caps.max_cq_cqes = static_cast<uint32_t>(attr.orig_attr.max_cqe) + 1;
  caps.numa_node = info.numa_node < 0 ? 0 : info.numa_node;
  caps.memory_windows = (attr.orig_attr.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B) != 0;
  return caps;
}

// Step 8: QUERY_HCA_CAP (general, current) through DEVX, as SPDK does for its UMR caps (facts
// §2.7). A refusal is not fatal: conservative defaults, documented in doc/guides/mlx5.md.
// Returns whether the caps were read.
Result<bool> DvDevice::Impl::read_hca_caps(const DeviceInfo& info, mlx5::DeviceCaps& caps) {
  uint8_t in[hca::kCmdInBytes];
  encode_query_hca_cap(std::span<uint8_t, hca::kCmdInBytes>(in, sizeof in));
  std::vector<uint8_t> out(hca::kCmdOutHeaderBytes + hca::kCapBytes);
  const int rc = mlx5dv_devx_general_cmd(ctx.get(), in, sizeof in, out.data(), out.size());
  auto h = rc == 0 ? decode_query_hca_cap(out)
                   : Result<HcaCaps>(make_error(Errc::kDeviceError, std::strerror(err_of(rc))));
  if (!h.ok()) {
    apply_default_hca_caps(caps);
    RDMX_LOG_WARN(
        "dv: %s: QUERY_HCA_CAP through DEVX failed (%s); using conservative "
        "defaults: %u KLMs per window, %u inline KLMs, strongest UMR fence, no atomic maps",
        info.name.c_str(), h.error().message.c_str(), caps.max_klm_list, caps.max_inline_klm);
    return false;
  }
  apply_hca_caps(h.value(), caps);
  if (h.value().umr_indirect_mkey_disabled)
    return make_error(Errc::kUnsupported, info.name +
                                              " reports umr_indirect_mkey_disabled: a UMR may not "
                                              "modify indirect mkeys, so windows cannot be mapped");
  if (h.value().umr_modify_atomic_disabled)
    RDMX_LOG_INFO(
        "dv: %s forbids changing atomic access by UMR (umr_modify_atomic_disabled): map "
        "UMRs leave the atomic bit out of their mask; atomic maps are refused",
        info.name.c_str());
  return true;
}

// Step 9: the protection domain: the parent MR, every window and every QP live in it.
Status DvDevice::Impl::alloc_pd(const DeviceInfo& info) {
  errno = 0;
  pd.reset(ibv_alloc_pd(ctx.get()));
  if (!pd) return verbs_error("ibv_alloc_pd(" + info.name + ")", last_errno());
  return {};
}

// Step 10: probe the mkey flags the windows need (facts §3.1, §8.4): INDIRECT is required;
// UPDATE_TAG is only accepted when the kernel advertised MKEY_UPDATE_TAG; REMOTE_INVALIDATE
// needs a newer rdma-core and kernel.
Status DvDevice::Impl::probe_mkey_flags(const DeviceInfo& info, mlx5::DeviceCaps& caps) {
  auto probe_mkey = [&](uint32_t flags) -> int {
    mlx5dv_mkey_init_attr a{};
    a.pd = pd.get();
    a.create_flags = flags;
    a.max_entries = 4;
    errno = 0;
    detail::MkeyPtr k(mlx5dv_create_mkey(&a));
    return k ? 0 : last_errno();
  };
  if (int e = probe_mkey(MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT); e != 0)
    return make_error(e == EOPNOTSUPP ? Errc::kUnsupported : Errc::kDeviceError,
                      "mlx5dv_create_mkey(INDIRECT) on " + info.name +
                          " failed: " + std::strerror(e) + " (errno " + std::to_string(e) +
                          "); rdmx windows are indirect mkeys and cannot be created");
  caps.mkey_update_tag = probe_mkey(MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                                    MLX5DV_MKEY_INIT_ATTR_FLAGS_UPDATE_TAG) == 0;
  caps.remote_invalidate = probe_mkey(MLX5DV_MKEY_INIT_ATTR_FLAGS_INDIRECT |
                                      MLX5DV_MKEY_INIT_ATTR_FLAGS_REMOTE_INVALIDATE) == 0;
  if (!caps.mkey_update_tag)
    RDMX_LOG_INFO(
        "dv: %s: the kernel does not advertise MKEY_UPDATE_TAG; windows are created without "
        "rdma-core's UPDATE_TAG flag (it gates only rdma-core's own UMRs: rdmx's UMRs still "
        "rotate the key)",
        info.name.c_str());
  return {};
}

// ---- Memory -------------------------------------------------------------------------------------

Result<mlx5::MrInfo> DvDevice::reg_mr(void* addr, size_t len, uint32_t access) {
  return reg_mr_in_pd(addr, len, access, mlx5::kDefaultPd);
}

Result<uint32_t> DvDevice::alloc_pd() {
  std::lock_guard<std::mutex> g(impl_->mu);
  errno = 0;
  detail::PdPtr p(ibv_alloc_pd(impl_->ctx.get()));
  if (!p) return verbs_error("ibv_alloc_pd(" + name_ + ")", last_errno());
  const uint32_t h = impl_->next_pd++;
  impl_->pds.emplace(h, std::move(p));
  return h;
}

Status DvDevice::dealloc_pd(uint32_t pd) {
  std::lock_guard<std::mutex> g(impl_->mu);
  auto it = impl_->pds.find(pd);
  if (it == impl_->pds.end())
    return make_error(Errc::kInvalidArgument,
                      "dealloc_pd: PD " + std::to_string(pd) + " was not allocated by alloc_pd");
  if (int rc = ibv_dealloc_pd(it->second.get()); rc)
    return verbs_error("ibv_dealloc_pd", err_of(rc), "something made in the PD still exists");
  (void)it->second.release();
  impl_->pds.erase(it);
  return {};
}

Result<uint32_t> DvDevice::create_window_mkey(uint32_t max_entries, bool remote_invalidate) {
  return create_window_mkey_in_pd(max_entries, remote_invalidate, mlx5::kDefaultPd);
}

Result<mlx5::MrInfo> DvDevice::reg_mr_in_pd(void* addr, size_t len, uint32_t access, uint32_t pd) {
  if (!addr || len == 0) return make_error(Errc::kInvalidArgument, "reg_mr: empty range");
  auto flags = to_ibv_access(access);
  if (!flags)
    return make_error(Errc::kInvalidArgument,
                      "reg_mr: access " + hex(access) +
                          " is invalid (unknown bits, or remote write/atomic without local write)");
  int f = *flags;
  if (opts_.relaxed_ordering) f |= IBV_ACCESS_RELAXED_ORDERING;
  std::lock_guard<std::mutex> g(impl_->mu);
  ibv_pd* ipd = impl_->pd_of(pd);
  if (!ipd) return make_error(Errc::kInvalidArgument, "reg_mr: no PD " + std::to_string(pd));
  errno = 0;
  detail::MrPtr mr(ibv_reg_mr(ipd, addr, len, f));
  if (!mr)
    return verbs_error("ibv_reg_mr(" + std::to_string(len) + " bytes)", last_errno(),
                       "is `ulimit -l` (locked memory) large enough?");
  mlx5::MrInfo info;
  info.addr = reinterpret_cast<uint64_t>(addr);
  info.length = len;
  info.lkey = mr->lkey;
  info.rkey = mr->rkey;
  info.access = access;
  impl_->mrs.emplace(mr->lkey, std::move(mr));
  return info;
}

Status DvDevice::dereg_mr(const mlx5::MrInfo& mr) {
  std::lock_guard<std::mutex> g(impl_->mu);
  auto it = impl_->mrs.find(mr.lkey);
  if (it == impl_->mrs.end())
    return make_error(Errc::kInvalidArgument, "dereg_mr: lkey " + hex(mr.lkey) + " is not ours");
  if (int rc = ibv_dereg_mr(it->second.get()); rc)
    return verbs_error("ibv_dereg_mr(lkey " + hex(mr.lkey) + ")", err_of(rc));
  (void)it->second.release();
  impl_->mrs.erase(it);
  return {};
}

// ---- Windows ------------------------------------------------------------------------------------

Result<uint32_t> DvDevice::create_window_mkey_in_pd(uint32_t max_entries, bool remote_invalidate,
                                                    uint32_t pd) {
  if (max_entries == 0 || max_entries > caps_.max_klm_list)
    return make_error(Errc::kOutOfRange, "create_window_mkey: " + std::to_string(max_entries) +
                                             " entries; " + name_ + " allows 1.." +
                                             std::to_string(caps_.max_klm_list));
  if (remote_invalidate && !caps_.remote_invalidate)
    return make_error(Errc::kUnsupported,
                      name_ +
                          ": mlx5dv_create_mkey refuses REMOTE_INVALIDATE (rdma-core or "
                          "kernel too old); create windows without remote invalidation");
  const uint32_t flags = window_mkey_flags(caps_.mkey_update_tag, remote_invalidate);

  std::lock_guard<std::mutex> g(impl_->mu);
  mlx5dv_mkey_init_attr a{};
  a.pd = impl_->pd_of(pd);
  if (!a.pd)
    return make_error(Errc::kInvalidArgument, "create_window_mkey: no PD " + std::to_string(pd));
  a.create_flags = flags;
  a.max_entries = static_cast<uint16_t>(max_entries);
  errno = 0;
  detail::MkeyPtr k(mlx5dv_create_mkey(&a));
  if (!k) {
    const int e = last_errno();
    return verbs_error("mlx5dv_create_mkey(" + std::to_string(max_entries) + " entries)", e,
                       e == ENOMEM ? "out of mkeys? (ref: ucx #6264)" : "");
  }
  const uint32_t key = k->lkey;
  impl_->mkeys.emplace(key >> 8, std::move(k));
  return key;
}

Status DvDevice::destroy_mkey(uint32_t mkey) {
  std::lock_guard<std::mutex> g(impl_->mu);
  auto it = impl_->mkeys.find(mkey >> 8);
  if (it == impl_->mkeys.end())
    return make_error(Errc::kInvalidArgument, "destroy_mkey: " + hex(mkey) + " is not a window");
  if (int rc = mlx5dv_destroy_mkey(it->second.get()); rc)
    return verbs_error("mlx5dv_destroy_mkey(" + hex(mkey) + ")", err_of(rc));
  (void)it->second.release();
  impl_->mkeys.erase(it);
  return {};
}

Result<uint32_t> DvDevice::alloc_mw(uint32_t pd) {
  if (!caps_.memory_windows)
    return make_error(Errc::kUnsupported,
                      name_ + ": no type-2 memory windows (IBV_DEVICE_MEM_WINDOW_TYPE_2B unset)");
  std::lock_guard<std::mutex> g(impl_->mu);
  ibv_pd* ipd = impl_->pd_of(pd);
  if (!ipd) return make_error(Errc::kInvalidArgument, "alloc_mw: no PD " + std::to_string(pd));
  errno = 0;
  detail::MwPtr mw(ibv_alloc_mw(ipd, IBV_MW_TYPE_2));
  if (!mw) return verbs_error("ibv_alloc_mw(TYPE_2)", last_errno());
  const uint32_t rkey = mw->rkey;
  impl_->mws.emplace(rkey >> 8, std::move(mw));
  return rkey;
}

Status DvDevice::dealloc_mw(uint32_t rkey) {
  std::lock_guard<std::mutex> g(impl_->mu);
  auto it = impl_->mws.find(rkey >> 8);
  if (it == impl_->mws.end())
    return make_error(Errc::kInvalidArgument,
                      "dealloc_mw: " + hex(rkey) + " is not a memory window of ours");
  if (int rc = ibv_dealloc_mw(it->second.get()); rc)
    return verbs_error("ibv_dealloc_mw(" + hex(rkey) + ")", err_of(rc));
  (void)it->second.release();
  impl_->mws.erase(it);
  return {};
}

// ---- Queue pairs --------------------------------------------------------------------------------

namespace {

// The ring sizes are the caller's promise to QueuePair: refused here, before any verb.
Status check_qp_config(const mlx5::QpConfig& cfg, const mlx5::DeviceCaps& caps) {
  if (cfg.timers) RDMX_TRY(mlx5::check_rc_timers(*cfg.timers));
  if (!is_pow2(cfg.sq_wqebbs) || cfg.sq_wqebbs > caps.max_sq_wqebbs)
    return make_error(Errc::kInvalidArgument,
                      "create_qp: sq_wqebbs " + std::to_string(cfg.sq_wqebbs) +
                          " must be a power of two <= " + std::to_string(caps.max_sq_wqebbs));
  if (cfg.rq_wqes != 0 && (!is_pow2(cfg.rq_wqes) || cfg.rq_sges == 0))
    return make_error(Errc::kInvalidArgument,
                      "create_qp: rq_wqes must be 0 or a power of two, with rq_sges >= 1");
  if (!is_pow2(cfg.cq_cqes) || cfg.cq_cqes > caps.max_cq_cqes)
    return make_error(Errc::kInvalidArgument,
                      "create_qp: cq_cqes " + std::to_string(cfg.cq_cqes) +
                          " must be a power of two <= " + std::to_string(caps.max_cq_cqes));
  return {};
}

// What the SQ is asked for in rdma-core's terms (facts §3.2, §2.7): room for an inline UMR of
// n_klm KLMs per WQE.
struct SqSizing {
  uint32_t n_klm, max_inline, wqe_bytes, max_send_wr;
};
Result<SqSizing> size_sq(const mlx5::QpConfig& cfg, uint32_t n_klm) {
  SqSizing z{};
  z.n_klm = n_klm;
  z.max_inline = std::max(cfg.max_inline_data, max_inline_data_for_klm(n_klm));
  z.wqe_bytes = rdma_core_wqe_bytes(z.max_inline, 1);
  z.max_send_wr = max_send_wr_for(cfg.sq_wqebbs, z.wqe_bytes);
  if (z.max_send_wr == 0)
    return make_error(Errc::kInvalidArgument,
                      "create_qp: an SQ of " + std::to_string(cfg.sq_wqebbs) +
                          " WQEBBs cannot hold two " + std::to_string(z.wqe_bytes) +
                          "-byte WQEs (inline UMR of " + std::to_string(n_klm) + " KLMs)");
  return z;
}

// Thread domain: a dedicated UAR/BlueFlame register for this QP, so its poll core rings the
// doorbell without a lock (facts §3.8, §8.7; ibv_alloc_td(3)); the parent domain joins it to
// the QP's PD.
Status alloc_domains(ibv_context* ctx, ibv_pd* pd, bool require_td, QpRec& rec) {
  ibv_td_init_attr tda{};
  errno = 0;
  rec.td.reset(ibv_alloc_td(ctx, &tda));
  if (!rec.td) {
    const int e = last_errno();
    if (require_td)
      return verbs_error("ibv_alloc_td", e,
                         "no dedicated doorbell register left for this QP (one per poll core); "
                         "use fewer QPs or set DvOptions.require_thread_domain=false to share");
    RDMX_LOG_WARN("dv: ibv_alloc_td failed (%s); QP shares a doorbell register", strerror(e));
  }
  ibv_parent_domain_init_attr pda{};
  pda.pd = pd;
  pda.td = rec.td.get();
  errno = 0;
  rec.parent.reset(ibv_alloc_parent_domain(ctx, &pda));
  if (!rec.parent) return verbs_error("ibv_alloc_parent_domain", last_errno());
  return {};
}

// CQ: 64-byte CQEs (our poller's format), no compression, single-threaded (only its poll core
// touches it; the CPU side owns it after mlx5dv_init_obj).
Status create_cq(ibv_context* ctx, uint32_t cqes, QpRec& rec) {
  ibv_cq_init_attr_ex cqa{};
  cqa.cqe = static_cast<uint32_t>(ibv_cqe_arg_for(cqes));
  cqa.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD;
  cqa.flags = IBV_CREATE_CQ_ATTR_SINGLE_THREADED;
  cqa.parent_domain = rec.parent.get();
  mlx5dv_cq_init_attr dcqa{};
  dcqa.comp_mask = MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE;
  dcqa.cqe_size = 64;
  errno = 0;
  rec.cq.reset(mlx5dv_create_cq(ctx, &cqa, &dcqa));
  if (!rec.cq)
    return verbs_error("mlx5dv_create_cq(" + std::to_string(cqes) + " CQEs)", last_errno());
  return {};
}

// RC QP: scatter-to-CQE off (indirect mkeys do not support it, mlx5dv_create_mkey(3), facts
// §3.1); MKEY_CONFIGURE | MR_LIST so rdma-core sizes WQEs with the 192-byte UMR overhead; inline
// data sized so the largest inline UMR fits; no sq_sig_all (we choose per WQE).
Status create_rc_qp(ibv_context* ctx, const mlx5::QpConfig& cfg, const SqSizing& z, QpRec& rec) {
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = ibv_cq_ex_to_cq(rec.cq.get());
  qa.recv_cq = qa.send_cq;
  qa.cap.max_send_wr = z.max_send_wr;
  qa.cap.max_recv_wr = cfg.rq_wqes;
  qa.cap.max_send_sge = 1;
  qa.cap.max_recv_sge = cfg.rq_wqes ? cfg.rq_sges : 0;
  qa.cap.max_inline_data = z.max_inline;
  qa.sq_sig_all = 0;
  qa.pd = rec.parent.get();
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                      IBV_QP_EX_WITH_RDMA_READ | IBV_QP_EX_WITH_SEND |
                      IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_SEND_WITH_INV |
                      IBV_QP_EX_WITH_LOCAL_INV;
  mlx5dv_qp_init_attr dqa{};
  dqa.comp_mask =
      MLX5DV_QP_INIT_ATTR_MASK_QP_CREATE_FLAGS | MLX5DV_QP_INIT_ATTR_MASK_SEND_OPS_FLAGS;
  dqa.create_flags = MLX5DV_QP_CREATE_DISABLE_SCATTER_TO_CQE;
  dqa.send_ops_flags = MLX5DV_QP_EX_WITH_MKEY_CONFIGURE | MLX5DV_QP_EX_WITH_MR_LIST;
  errno = 0;
  rec.qp.reset(mlx5dv_create_qp(ctx, &qa, &dqa));
  if (!rec.qp) {
    const int e = last_errno();
    return verbs_error("mlx5dv_create_qp(RC, " + std::to_string(z.max_send_wr) + " send WRs of " +
                           std::to_string(z.wqe_bytes) + " B, max_inline_data " +
                           std::to_string(z.max_inline) + ")",
                       e,
                       e == EINVAL ? "the WQE size may exceed the device's max_wqe_sz_sq; lower "
                                     "DvOptions.max_inline_klm"
                                   : "");
  }
  return {};
}

// mlx5dv_init_obj: the rings as the hardware sees them (mlx5dv_init_obj(3)), checked against
// the layout the queue code assumes. From here on the CQ is "DV owned": rdma-core no longer
// cleans it on QP reset (cq.c __mlx5_cq_clean).
Result<mlx5::QpDesc> describe_rings(const mlx5::QpConfig& cfg, QpRec& rec) {
  mlx5dv_qp dqp{};
  mlx5dv_cq dcq{};
  mlx5dv_obj obj{};
  obj.qp.in = rec.qp.get();
  obj.qp.out = &dqp;
  obj.cq.in = ibv_cq_ex_to_cq(rec.cq.get());
  obj.cq.out = &dcq;
  if (int rc = mlx5dv_init_obj(&obj, MLX5DV_OBJ_QP | MLX5DV_OBJ_CQ); rc)
    return verbs_error("mlx5dv_init_obj(QP|CQ)", err_of(rc));
  if (dqp.sq.stride != MLX5_SEND_WQE_BB || !is_pow2(dqp.sq.wqe_cnt) || dcq.cqe_size != 64 ||
      !is_pow2(dcq.cqe_cnt))
    return make_error(Errc::kUnsupported,
                      "mlx5dv_init_obj returned an unexpected layout: SQ stride " +
                          std::to_string(dqp.sq.stride) + ", " + std::to_string(dqp.sq.wqe_cnt) +
                          " WQEBBs, CQE size " + std::to_string(dcq.cqe_size) + ", " +
                          std::to_string(dcq.cqe_cnt) + " CQEs");
  if (dqp.sq.wqe_cnt != cfg.sq_wqebbs || dcq.cqe_cnt != cfg.cq_cqes)
    RDMX_LOG_WARN("dv: QP %#x: asked for %u WQEBBs / %u CQEs, rdma-core made %u / %u",
                  rec.qp->qp_num, cfg.sq_wqebbs, cfg.cq_cqes, dqp.sq.wqe_cnt, dcq.cqe_cnt);
  mlx5::QpDesc d;
  d.qpn = rec.qp->qp_num;
  d.sq.buf = dqp.sq.buf;
  d.sq.wqe_cnt = dqp.sq.wqe_cnt;
  d.sq.dbrec = reinterpret_cast<volatile uint32_t*>(&dqp.dbrec[MLX5_SND_DBR]);
  d.sq.reg = reinterpret_cast<volatile uint64_t*>(dqp.bf.reg);
  d.sq.bf_size = dqp.bf.size;
  d.rq.buf = dqp.rq.buf;
  d.rq.wqe_cnt = dqp.rq.wqe_cnt;
  d.rq.stride = dqp.rq.stride;
  d.rq.dbrec = reinterpret_cast<volatile uint32_t*>(&dqp.dbrec[MLX5_RCV_DBR]);
  d.cq.buf = dcq.buf;
  d.cq.cqe_cnt = dcq.cqe_cnt;
  d.cq.dbrec = reinterpret_cast<volatile uint32_t*>(dcq.dbrec);
  d.cq.cqn = dcq.cqn;
  return d;
}

}  // namespace

// CQ + thread domain + parent domain + RC QP, all owned by the returned QPN.
Result<mlx5::QpDesc> DvDevice::create_qp(const mlx5::QpConfig& cfg) {
  RDMX_TRY(check_qp_config(cfg, caps_));
  uint32_t n_klm = caps_.max_inline_klm;
  if (opts_.max_inline_klm) n_klm = std::min(n_klm, opts_.max_inline_klm);
  RDMX_TRY_ASSIGN(const SqSizing z, size_sq(cfg, n_klm));

  std::lock_guard<std::mutex> g(impl_->mu);
  ibv_context* ctx = impl_->ctx.get();
  ibv_pd* qp_pd = impl_->pd_of(cfg.pd);
  if (!qp_pd)
    return make_error(Errc::kInvalidArgument, "create_qp: no PD " + std::to_string(cfg.pd));
  auto rec = std::make_unique<QpRec>();
  RDMX_TRY(alloc_domains(ctx, qp_pd, opts_.require_thread_domain, *rec));
  RDMX_TRY(create_cq(ctx, cfg.cq_cqes, *rec));
  RDMX_TRY(create_rc_qp(ctx, cfg, z, *rec));
  RDMX_TRY_ASSIGN(const mlx5::QpDesc d, describe_rings(cfg, *rec));
  rec->psn = impl_->rng() & 0xffffff;
  rec->timers = cfg.timers;
  impl_->qps.emplace(d.qpn, std::move(rec));
  return d;
}

Status DvDevice::destroy_qp(mlx5::QpHandle qp) {
  std::lock_guard<std::mutex> g(impl_->mu);
  auto it = impl_->qps.find(qp);
  if (it == impl_->qps.end())
    return make_error(Errc::kInvalidArgument, "destroy_qp: QP " + hex(qp) + " is not ours");
  QpRec& r = *it->second;
  if (int rc = ibv_destroy_qp(r.qp.get()); rc)
    return verbs_error("ibv_destroy_qp(" + hex(qp) + ")", err_of(rc));
  (void)r.qp.release();
  if (int rc = ibv_destroy_cq(ibv_cq_ex_to_cq(r.cq.get())); rc) {
    Error e = verbs_error("ibv_destroy_cq(QP " + hex(qp) + ")", err_of(rc));
    impl_->qps.erase(it);  // the deleters retry what is left
    return e;
  }
  (void)r.cq.release();
  impl_->qps.erase(it);
  return {};
}

mlx5::ConnectInfo DvDevice::local_info(mlx5::QpHandle qp) {
  std::lock_guard<std::mutex> g(impl_->mu);
  ConnectInfo ci;
  QpRec* r = impl_->find_qp(qp);
  if (!r) {
    RDMX_LOG_ERR("dv: local_info: QP %#x is not ours", qp);
    return ci;
  }
  ci.qpn = qp;
  ci.psn = r->psn;
  ci.lid = impl_->lid;
  std::memcpy(ci.gid, impl_->gid, 16);
  // What this side brings to the negotiation (connect_info.hpp negotiate; applied in bring_up).
  ci.port = impl_->params.port;
  ci.path_mtu = static_cast<uint8_t>(impl_->params.mtu);
  ci.initiator_depth = impl_->params.max_rd_atomic;
  ci.responder_resources = impl_->params.max_dest_rd_atomic;
  return ci;
}

Status DvDevice::connect(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote) {
  std::lock_guard<std::mutex> g(impl_->mu);
  QpRec* r = impl_->find_qp(qp);
  if (!r) return make_error(Errc::kInvalidArgument, "connect: QP " + hex(qp) + " is not ours");
  r->route.reset();
  return impl_->bring_up(*r, remote);
}

Status DvDevice::connect_routed(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote,
                                const CmRoute& route) {
  std::lock_guard<std::mutex> g(impl_->mu);
  QpRec* r = impl_->find_qp(qp);
  if (!r) return make_error(Errc::kInvalidArgument, "connect: QP " + hex(qp) + " is not ours");
  r->route = route;
  const mlx5::ConnectInfo routed = apply_cm_dgid(remote, route);
  if (std::memcmp(routed.gid, remote.gid, sizeof remote.gid) != 0)
    RDMX_LOG_INFO("dv: QP %#x: rdma_cm routes to GID %s, the peer stated %s; using the route", qp,
                  gid_text(routed.gid).c_str(), gid_text(remote.gid).c_str());
  return impl_->bring_up(*r, routed);
}

Status DvDevice::recover_qp(mlx5::QpHandle qp, const mlx5::ConnectInfo& remote) {
  std::lock_guard<std::mutex> g(impl_->mu);
  QpRec* r = impl_->find_qp(qp);
  if (!r) return make_error(Errc::kInvalidArgument, "recover_qp: QP " + hex(qp) + " is not ours");
  auto cur = impl_->query(*r);
  if (!cur.ok()) return cur.error();
  RDMX_LOG_INFO("dv: recovering QP %#x from %s", qp, state_name(cur.value()));
  // ERR -> RESET drops the QP's remaining WQEs; the caller has seen the last flush CQE, so none
  // is lost (CVE-2025-21892: resetting before the flush completed lost CQEs; facts §4).
  if (auto s = impl_->modify(*r, state_only_transition(QpState::kReset), "->RESET"); !s) return s;
  return impl_->bring_up(*r, remote);
}

Status DvDevice::modify_qp(mlx5::QpHandle qp, mlx5::QpState to) {
  std::lock_guard<std::mutex> g(impl_->mu);
  QpRec* r = impl_->find_qp(qp);
  if (!r) return make_error(Errc::kInvalidArgument, "modify_qp: QP " + hex(qp) + " is not ours");
  if (to == QpState::kError) return impl_->modify(*r, state_only_transition(to), "->ERR");
  if (to == QpState::kReset) {
    // A new incarnation: a new initial PSN (local_info states it from now on), so that a late
    // packet of the previous connection cannot fall into the next one's sequence.
    auto s = impl_->modify(*r, state_only_transition(to), "->RESET");
    if (s) r->psn = impl_->rng() & 0xffffff;
    return s;
  }
  auto cur = impl_->query(*r);
  if (!cur.ok()) return cur.error();
  const QpState from = cur.value();
  auto bad = [&] {
    return make_error(Errc::kState, std::string("modify_qp: ") + state_name(from) + " -> " +
                                        state_name(to) + " is not a step rdmx takes");
  };
  switch (to) {
    case QpState::kInit:
      if (from != QpState::kReset) return bad();
      return impl_->modify(*r, init_transition(impl_->params), "RESET->INIT");
    case QpState::kRtr:
      if (from != QpState::kInit) return bad();
      if (!r->have_remote)
        return make_error(Errc::kState, "modify_qp: RTR needs the peer; call connect() first");
      return impl_->modify(
          *r, rtr_transition(negotiated_params(impl_->params_of(*r), r->remote), r->remote),
          "INIT->RTR");
    case QpState::kRts:
      if (from != QpState::kRtr) return bad();
      return impl_->modify(
          *r, rts_transition(negotiated_params(impl_->params_of(*r), r->remote), r->psn),
          "RTR->RTS");
    default:
      return bad();
  }
}

// ibv_event_type -> the library's kinds; the QP kinds carry the QPN, CQ_ERR the CQN, the port
// kinds the port number.
namespace {
constexpr struct {
  ibv_event_type type;
  mlx5::AsyncEventKind kind;
} kEventKinds[] = {
    {IBV_EVENT_QP_FATAL, mlx5::AsyncEventKind::kQpFatal},
    {IBV_EVENT_QP_REQ_ERR, mlx5::AsyncEventKind::kQpReqErr},
    {IBV_EVENT_QP_ACCESS_ERR, mlx5::AsyncEventKind::kQpAccessErr},
    {IBV_EVENT_COMM_EST, mlx5::AsyncEventKind::kCommEst},
    {IBV_EVENT_SQ_DRAINED, mlx5::AsyncEventKind::kSqDrained},
    {IBV_EVENT_QP_LAST_WQE_REACHED, mlx5::AsyncEventKind::kLastWqeReached},
    {IBV_EVENT_CQ_ERR, mlx5::AsyncEventKind::kCqErr},
    {IBV_EVENT_PORT_ACTIVE, mlx5::AsyncEventKind::kPortActive},
    {IBV_EVENT_PORT_ERR, mlx5::AsyncEventKind::kPortErr},
    {IBV_EVENT_DEVICE_FATAL, mlx5::AsyncEventKind::kDeviceFatal},
};
}  // namespace

size_t DvDevice::poll_async_events(std::span<mlx5::AsyncEvent> out) {
  size_t n = 0;
  ibv_context* ctx = impl_->ctx.get();
  while (n < out.size()) {
    ibv_async_event ev;
    if (ibv_get_async_event(ctx, &ev) != 0) break;  // EAGAIN: nothing pending
    mlx5::AsyncEvent a;
    for (const auto& e : kEventKinds)
      if (e.type == ev.event_type) a.kind = e.kind;
    switch (ev.event_type) {
      case IBV_EVENT_QP_FATAL:
      case IBV_EVENT_QP_REQ_ERR:
      case IBV_EVENT_QP_ACCESS_ERR:
      case IBV_EVENT_COMM_EST:
      case IBV_EVENT_SQ_DRAINED:
      case IBV_EVENT_PATH_MIG:
      case IBV_EVENT_PATH_MIG_ERR:
      case IBV_EVENT_QP_LAST_WQE_REACHED:
        a.qpn = ev.element.qp ? ev.element.qp->qp_num : 0;
        break;
      case IBV_EVENT_CQ_ERR:
        a.qpn = ev.element.cq ? ev.element.cq->handle : 0;
        break;
      case IBV_EVENT_PORT_ACTIVE:
      case IBV_EVENT_PORT_ERR:
      case IBV_EVENT_LID_CHANGE:
      case IBV_EVENT_PKEY_CHANGE:
      case IBV_EVENT_SM_CHANGE:
      case IBV_EVENT_CLIENT_REREGISTER:
      case IBV_EVENT_GID_CHANGE:
        a.qpn = static_cast<uint32_t>(ev.element.port_num);
        break;
      default:
        break;
    }
    ibv_ack_async_event(&ev);  // every event is acknowledged (destroying its object waits)
    out[n++] = a;
  }
  return n;
}

Result<mlx5::QpState> DvDevice::query_qp(mlx5::QpHandle qp) {
  std::lock_guard<std::mutex> g(impl_->mu);
  QpRec* r = impl_->find_qp(qp);
  if (!r) return make_error(Errc::kInvalidArgument, "query_qp: QP " + hex(qp) + " is not ours");
  return impl_->query(*r);
}

}  // namespace rdmx::dv
