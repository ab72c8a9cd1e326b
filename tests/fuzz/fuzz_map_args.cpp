// libFuzzer target: PollCore::map()'s argument validator against a real window pool over an
// inline emu device pair (two endpoints from lib/endpoint's builder). Random page lists (arena
// pages, pages +/- a few bytes, the reserved KLM tail, addresses around the arena, raw 64-bit
// values), offsets, lengths and access bits. Must hold for every input:
//   - no crash, no sanitizer report;
//   - a request the reference rules reject is refused, posts nothing (SQ producer unchanged)
//     and takes no window;
//   - a request the rules accept is mapped (unless the SQ/windows are momentarily exhausted),
//     and the device's mkey then holds exactly `length` bytes, not free; after unmap it is free;
//   - the emu PRM checker never reports.
// A quarter of the requests are interleaved layouts (map_interleaved), under the same rules; an
// eighth are type-2 memory window binds (bind_mw: refused exactly when its rules say so, posting
// nothing; else the window holds the range, bound, until invalidate_mw frees it).
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include <rdmx/emu/emu.hpp>
#include <rdmx/endpoint/device.hpp>
#include <rdmx/endpoint/endpoint.hpp>
#include <rdmx/mem/arena.hpp>
#include <rdmx/win/poll_core.hpp>
#include <rdmx/win/window_pool.hpp>

namespace {

using namespace rdmx;

constexpr uint32_t kMaxPages = 64;  // > the inline limit: pointer mode and a reserved KLM tail

struct Harness {
  endpoint::Endpoint a, b;  // a maps; b is the peer (lib/endpoint's builder, inline emu)
  Harness() {
    auto devs = endpoint::open_device_pair("emu-inline");
    if (!devs.ok()) __builtin_trap();
    auto ca = config(kMaxPages);
    ca.arena.access |= mlx5::kAccessMwBind;
    ca.core.memory_windows = 2;
    auto ea = endpoint::Endpoint::create(std::move(devs.value()[0]), ca);
    auto eb = endpoint::Endpoint::create(std::move(devs.value()[1]), config(4));
    if (!ea.ok() || !eb.ok()) __builtin_trap();
    a = std::move(ea).value();
    b = std::move(eb).value();
    if (!endpoint::connect_endpoints(a, b).ok()) __builtin_trap();
  }
  static endpoint::EndpointConfig config(uint32_t max_pages) {
    endpoint::EndpointConfig ec;
    ec.arena.bytes = 128 * 4096;
    ec.pool.n_windows = 8;
    ec.pool.max_pages = max_pages;
    ec.core.cache_size = 4;
    ec.core.qp.sq_wqebbs = 256;
    ec.core.qp.rq_wqes = 4;
    ec.core.qp.cq_cqes = 512;
    return ec;
  }
  void settle() {
    win::PollCore& core = a.core();
    core.flush();
    for (int i = 0; i < 1000 && core.umrs_in_flight(); ++i)
      core.poll(64, [](const mlx5::Completion&) {});
    if (core.umrs_in_flight()) __builtin_trap();
  }
};

// The documented rules of map() (poll_core.hpp), independently: true = must be accepted.
bool valid(const mem::Arena& ar, const std::vector<uint64_t>& pages, uint32_t access, uint32_t off,
           uint64_t len) {
  const uint64_t n = pages.size(), ps = ar.page_size();
  if (n == 0 || n > kMaxPages || len == 0) return false;
  if (access & ~uint32_t{mlx5::kAccessAll}) return false;
  if ((access & (mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteAtomic)) &&
      !(access & mlx5::kAccessLocalWrite))
    return false;
  if (off >= ps) return false;
  // The bytes [off, off + len) lie in the n pages and reach into the last one.
  const unsigned __int128 end = static_cast<unsigned __int128>(off) + len;
  if (end > static_cast<unsigned __int128>(n) * ps) return false;
  if (end <= static_cast<unsigned __int128>(n - 1) * ps) return false;
  for (uint64_t p : pages) {
    if (p < ar.base() || p >= ar.data_end() || (p - ar.base()) % ps != 0) return false;
  }
  return true;
}

// The documented rules of map_interleaved() (poll_core.hpp), independently.
bool valid_il(const mem::Arena& ar, uint32_t inline_limit,
              const std::vector<win::InterleavedPart>& parts, uint32_t blocks, uint32_t access) {
  if (parts.empty() || blocks == 0) return false;
  if (parts.size() + 1 > std::min(kMaxPages, inline_limit)) return false;
  if (access & ~uint32_t{mlx5::kAccessAll}) return false;
  if ((access & (mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteAtomic)) &&
      !(access & mlx5::kAccessLocalWrite))
    return false;
  unsigned __int128 block = 0;
  for (const auto& p : parts) {
    if (p.bytes == 0 || uint64_t{p.bytes} + p.skip > 0xffff) return false;
    block += p.bytes;
  }
  if (block * blocks > static_cast<unsigned __int128>(kMaxPages) * ar.page_size()) return false;
  for (const auto& p : parts) {
    const unsigned __int128 last = static_cast<unsigned __int128>(p.addr) +
                                   static_cast<unsigned __int128>(blocks - 1) * (p.bytes + p.skip) +
                                   p.bytes;
    if (p.addr < ar.base() || last > ar.data_end()) return false;
  }
  return true;
}

// One interleaved map of fuzzed parts: refused exactly when the rules say so (nothing posted),
// else the mkey holds the layout's length and is freed by the unmap.
void interleaved_request(FuzzedDataProvider& fdp, Harness* h) {
  const mem::Arena& ar = h->a.arena();
  win::PollCore& c = h->a.core();
  std::vector<win::InterleavedPart> parts(fdp.ConsumeIntegralInRange<uint32_t>(0, 54));
  for (auto& p : parts) {
    p.addr = fdp.ConsumeBool() ? ar.base() + fdp.ConsumeIntegralInRange<uint64_t>(0, ar.size())
                               : fdp.ConsumeIntegral<uint64_t>();
    p.bytes = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<uint32_t>(0, 4200)
                                : fdp.ConsumeIntegral<uint32_t>();
    p.skip = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<uint32_t>(0, 300)
                               : fdp.ConsumeIntegral<uint32_t>();
  }
  const uint32_t blocks = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<uint32_t>(0, 70)
                                            : fdp.ConsumeIntegral<uint32_t>();
  const uint32_t access =
      fdp.ConsumeBool()
          ? uint32_t{mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead}
          : fdp.ConsumeIntegral<uint32_t>();
  const bool ok_ref = valid_il(ar, h->a.pool().inline_klm_limit(), parts, blocks, access);
  const uint32_t pi = c.qp().sq().pi();
  const uint32_t cached = c.cache().len();
  win::MapResult m = c.map_interleaved(parts, blocks, access);
  if (!m.ok()) {
    if (c.qp().sq().pi() != pi || c.cache().len() != cached) __builtin_trap();  // posted
    if (ok_ref && m.errc != Errc::kNoRoom && m.errc != Errc::kNoWindow) __builtin_trap();
    if (!ok_ref && (m.errc == Errc::kNoRoom || m.errc == Errc::kNoWindow)) __builtin_trap();
    return;
  }
  if (!ok_ref) __builtin_trap();  // an invalid layout was mapped
  h->settle();
  uint64_t block = 0;
  for (const auto& p : parts) block += p.bytes;
  const auto v = h->a.emu()->inspect_mkey(m.rkey);
  if (!v.exists || v.free || v.len != block * blocks || m.length != v.len) __builtin_trap();
  if (c.unmap(m.window) != Errc::kOk) __builtin_trap();
  h->settle();
  if (!h->a.emu()->inspect_mkey(m.rkey).free) __builtin_trap();
}

// The documented rules of bind_mw() (poll_core.hpp), independently.
bool valid_bind(const mem::Arena& ar, uint64_t addr, uint64_t len, uint32_t access) {
  constexpr uint32_t kRemote =
      mlx5::kAccessRemoteRead | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteAtomic;
  if (len == 0 || access == 0 || (access & ~kRemote)) return false;
  if (len > (uint64_t{1} << 31)) return false;
  const unsigned __int128 end = static_cast<unsigned __int128>(addr) + len;
  return addr >= ar.base() && end <= ar.data_end();
}

void bind_request(FuzzedDataProvider& fdp, Harness* h) {
  const mem::Arena& ar = h->a.arena();
  win::PollCore& c = h->a.core();
  const uint64_t addr = fdp.ConsumeBool()
                            ? ar.base() + fdp.ConsumeIntegralInRange<uint64_t>(0, ar.size() + 8)
                            : fdp.ConsumeIntegral<uint64_t>();
  const uint64_t len = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<uint64_t>(0, ar.size())
                                         : fdp.ConsumeIntegral<uint64_t>();
  const uint32_t access = fdp.ConsumeBool()
                              ? uint32_t{mlx5::kAccessRemoteRead | mlx5::kAccessRemoteWrite}
                              : fdp.ConsumeIntegral<uint32_t>() & 0x3f;
  const bool zero_based = fdp.ConsumeBool();
  const bool ok_ref = valid_bind(ar, addr, len, access);
  const uint32_t pi = c.qp().sq().pi();
  const uint32_t free_before = c.free_memory_windows();
  win::BindResult b = c.bind_mw(addr, len, access, zero_based);
  if (!b.ok()) {
    if (c.qp().sq().pi() != pi || c.free_memory_windows() != free_before) __builtin_trap();
    if (ok_ref && b.errc != Errc::kNoRoom && b.errc != Errc::kNoWindow) __builtin_trap();
    if (!ok_ref && (b.errc == Errc::kNoRoom || b.errc == Errc::kNoWindow)) __builtin_trap();
    return;
  }
  if (!ok_ref) __builtin_trap();  // an invalid range was bound
  h->settle();
  const auto v = h->a.emu()->inspect_mkey(b.rkey);
  if (!v.exists || v.free || v.len != len || b.iova != (zero_based ? 0 : addr)) __builtin_trap();
  if (c.invalidate_mw(b.mw) != Errc::kOk) __builtin_trap();
  h->settle();
  if (!h->a.emu()->inspect_mkey(b.rkey).free) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Harness* h = new Harness();
  FuzzedDataProvider fdp(data, size);
  const mem::Arena& ar = h->a.arena();
  win::PollCore& c = h->a.core();
  for (int req = 0; req < 8 && fdp.remaining_bytes() > 0; ++req) {
    const uint8_t kind = fdp.ConsumeIntegral<uint8_t>() % 8;
    if (kind >= 6) {  // a quarter: an interleaved layout
      interleaved_request(fdp, h);
      continue;
    }
    if (kind == 5) {  // an eighth: a memory window bind
      bind_request(fdp, h);
      continue;
    }
    const uint32_t n = fdp.ConsumeIntegralInRange<uint32_t>(0, kMaxPages + 6);
    std::vector<uint64_t> pages(n);
    for (auto& p : pages) {
      const uint64_t some_page = ar.page_addr(fdp.ConsumeIntegral<uint32_t>() % ar.n_pages());
      switch (fdp.ConsumeIntegral<uint8_t>() % 8) {
        case 5:
          p = fdp.ConsumeIntegral<uint64_t>();
          break;
        case 6:
          p = some_page + static_cast<uint64_t>(fdp.ConsumeIntegralInRange<int64_t>(-4097, 4097));
          break;
        case 7: {
          const uint64_t edges[] = {ar.data_end(),         ar.base() + ar.size() - 4096,
                                    ar.base() + ar.size(), ar.base() - 4096,
                                    h->b.arena().base(),   0};
          p = edges[fdp.ConsumeIntegral<uint8_t>() % 6];
          break;
        }
        default:
          p = some_page;
      }
    }
    uint32_t access;
    if (fdp.ConsumeBool()) {
      const uint32_t common[] = {
          mlx5::kAccessRemoteRead,
          mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite,
          mlx5::kAccessLocalWrite | mlx5::kAccessRemoteWrite | mlx5::kAccessRemoteRead,
          mlx5::kAccessRemoteWrite,
          mlx5::kAccessAll,
          0};
      access = common[fdp.ConsumeIntegral<uint8_t>() % 6];
    } else {
      access = fdp.ConsumeIntegral<uint32_t>();
    }
    const uint32_t off = fdp.ConsumeBool() ? fdp.ConsumeIntegralInRange<uint32_t>(0, 4200)
                                           : fdp.ConsumeIntegral<uint32_t>();
    uint64_t len;
    const int64_t delta = fdp.ConsumeIntegralInRange<int64_t>(-2, 2);
    switch (fdp.ConsumeIntegral<uint8_t>() % 4) {
      case 0:
        len = uint64_t{n} * 4096 - off + static_cast<uint64_t>(delta);
        break;
      case 1:
        len = (n ? uint64_t{n - 1} * 4096 : 0) - off + 1 + static_cast<uint64_t>(delta);
        break;
      case 2:
        len = fdp.ConsumeIntegralInRange<uint64_t>(0, uint64_t{kMaxPages + 1} * 4096);
        break;
      default:
        len = fdp.ConsumeIntegral<uint64_t>();
    }

    const bool ok_ref = valid(ar, pages, access, off, len);
    const uint32_t pi = c.qp().sq().pi();
    const uint32_t cached = c.cache().len();
    win::MapResult m = c.map(pages, access, off, len);
    if (!m.ok()) {
      if (c.qp().sq().pi() != pi || c.cache().len() != cached) __builtin_trap();  // posted
      if (ok_ref && m.errc != Errc::kNoRoom && m.errc != Errc::kNoWindow && m.errc != Errc::kBusy)
        __builtin_trap();  // a valid request refused
      if (!ok_ref && (m.errc == Errc::kOk || m.errc == Errc::kNoRoom || m.errc == Errc::kNoWindow ||
                      m.errc == Errc::kBusy))
        __builtin_trap();  // an invalid request refused for the wrong reason
      continue;
    }
    if (!ok_ref) __builtin_trap();  // an invalid request was mapped
    h->settle();
    const auto v = h->a.emu()->inspect_mkey(m.rkey);
    if (!v.exists || v.free || v.len != len || v.tag != static_cast<uint8_t>(m.rkey))
      __builtin_trap();
    if (c.unmap(m.window) != Errc::kOk) __builtin_trap();
    h->settle();
    if (!h->a.emu()->inspect_mkey(m.rkey).free) __builtin_trap();
  }
  if (h->a.emu()->checker().total() != 0) __builtin_trap();
  return 0;
}
