#include <rdmx/endpoint/connect.hpp>
#include <rdmx/endpoint/endpoint.hpp>

#include <algorithm>
#include <utility>

namespace rdmx::endpoint {

size_t arena_bytes_needed(const EndpointConfig& cfg) noexcept {
  const mem::ArenaConfig& a = cfg.arena;
  if (a.source == mem::Source::kUser || a.page_size == 0) return a.bytes;
  const size_t data = (a.bytes + a.page_size - 1) / a.page_size * a.page_size;
  return data + win::WindowPool::arena_tail_bytes(cfg.pool, a.page_size);
}

Result<Endpoint> Endpoint::create(OpenedDevice dev, const EndpointConfig& cfg) {
  if (!dev.dev) return make_error(Errc::kInvalidArgument, "endpoint: no device");
  Endpoint e;
  e.dev_ = std::move(dev);
  mem::ArenaConfig ac = cfg.arena;
  ac.bytes = arena_bytes_needed(cfg);
  RDMX_TRY_ASSIGN(e.arena_, mem::Arena::create(*e.dev_.dev, ac), "arena");
  RDMX_TRY_ASSIGN(e.pool_, win::WindowPool::create(*e.dev_.dev, *e.arena_, cfg.pool),
                  "window pool");
  e.cores_.reserve(cfg.n_cores);
  for (uint32_t i = 0; i < cfg.n_cores; ++i)
    RDMX_TRY(e.add_core(cfg.core), "core " + std::to_string(i));
  return e;
}

Result<win::PollCore*> Endpoint::add_core(const win::CoreConfig& cc) {
  RDMX_TRY_ASSIGN(std::unique_ptr<win::PollCore> c, win::PollCore::create(*pool_, cc));
  cores_.push_back(std::move(c));
  return cores_.back().get();
}

Result<win::PollCore*> Endpoint::add_isolated_core(const win::CoreConfig& cc, uint32_t n_windows) {
  if (!pool_) return make_error(Errc::kState, "isolated core: the endpoint has no pool");
  win::PoolConfig pc = pool_->config();
  pc.n_windows = n_windows;
  pc.max_cores = 1;
  pc.own_pd = true;
  const uint32_t lim = win::WindowPool::inline_limit(dev_.dev->caps(), pc);
  if (pc.max_pages > lim)
    return make_error(Errc::kUnsupported,
                      "isolated core: windows of " + std::to_string(pc.max_pages) +
                          " pages need pointer-mode tables (this device writes at most " +
                          std::to_string(lim) +
                          " translation entries inline); use max_pages <= " + std::to_string(lim));
  RDMX_TRY_ASSIGN(std::unique_ptr<win::WindowPool> pool,
                  win::WindowPool::create(*dev_.dev, *arena_, pc), "isolated core: window pool");
  RDMX_TRY_ASSIGN(std::unique_ptr<win::PollCore> c, win::PollCore::create(*pool, cc),
                  "isolated core");
  own_pools_.push_back({c.get(), std::move(pool)});
  cores_.push_back(std::move(c));
  return cores_.back().get();
}

win::WindowPool* Endpoint::core_pool(const win::PollCore& c) noexcept {
  for (OwnPool& o : own_pools_)
    if (o.core == &c) return o.pool.get();
  return pool_.get();
}

uint32_t Endpoint::core_lkey(const win::PollCore& c) const noexcept {
  for (const OwnPool& o : own_pools_)
    if (o.core == &c) return o.pool->parent_lkey();
  return pool_ ? pool_->parent_lkey() : 0;
}

bool Endpoint::remove_core(win::PollCore* c) noexcept {
  const auto it =
      std::find_if(cores_.begin(), cores_.end(),
                   [c](const std::unique_ptr<win::PollCore>& p) { return p.get() == c; });
  if (it == cores_.end()) return false;
  cores_.erase(it);
  std::erase_if(own_pools_, [c](const OwnPool& o) { return o.core == c; });
  return true;
}

void Endpoint::destroy_cores() noexcept {
  while (!cores_.empty()) cores_.pop_back();
  own_pools_.clear();  // after their cores
}

void Endpoint::destroy() noexcept {
  destroy_cores();
  pool_.reset();
  arena_.reset();
  dev_.emu = nullptr;
  dev_.dev.reset();
  dev_.wire.reset();  // after the device that uses it
}

Endpoint& Endpoint::operator=(Endpoint&& o) noexcept {
  if (this != &o) {
    destroy();
    dev_ = std::move(o.dev_);
    arena_ = std::move(o.arena_);
    pool_ = std::move(o.pool_);
    cores_ = std::move(o.cores_);
    own_pools_ = std::move(o.own_pools_);
  }
  return *this;
}

Endpoint::~Endpoint() {
  destroy();
}

Status connect_endpoints(Endpoint& a, Endpoint& b) {
  const uint32_t n = std::min(a.n_cores(), b.n_cores());
  for (uint32_t i = 0; i < n; ++i)
    RDMX_TRY(connect_cores(a.core(i), b.core(i)), "core " + std::to_string(i));
  return {};
}

}  // namespace rdmx::endpoint
