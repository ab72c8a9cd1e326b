// The forwarding engine table (as testpmd's fwd_engines[]) and the helpers engines share.
#include <cstring>

#include "../rdmafwd.hpp"

namespace rdmafwd {

extern const Engine kUmrEngine;
extern const Engine kWriteEngine;
extern const Engine kReadEngine;
extern const Engine kRpcEngine;
extern const Engine kRelayEngine;

const std::vector<const Engine*>& engines() {
  static const std::vector<const Engine*> table = {&kUmrEngine, &kWriteEngine, &kReadEngine,
                                                   &kRpcEngine, &kRelayEngine};
  return table;
}

const Engine* find_engine(const std::string& name) noexcept {
  for (const Engine* e : engines())
    if (name == e->name) return e;
  return nullptr;
}

std::string engine_names(const char* sep) {
  std::string s;
  for (const Engine* e : engines()) {
    if (!s.empty()) s += sep;
    s += e->name;
  }
  return s;
}

// Fletcher-style over 64-bit words: a = sum of words, b = sum of the running a. Any change of a
// single byte changes a; swapped words change b.
Csum csum_pages(const uint64_t* pages, uint32_t page_size, uint64_t len) noexcept {
  uint64_t a = 0, b = 0;
  uint64_t off = kHdr;
  while (off < len) {
    const uint64_t page = off / page_size;
    const uint64_t in = off % page_size;
    const uint64_t n = std::min<uint64_t>(page_size - in, len - off);
    const auto* w = reinterpret_cast<const uint64_t*>(pages[page] + in);
    for (uint64_t i = 0; i < n / 8; ++i) {
      a += w[i];
      b += a;
    }
    off += n;
  }
  return {a, b};
}

Csum csum_range(uint64_t addr, uint64_t len) noexcept {
  uint64_t a = 0, b = 0;
  const auto* w = reinterpret_cast<const uint64_t*>(addr + kHdr);
  for (uint64_t i = 0; i < (len - kHdr) / 8; ++i) {
    a += w[i];
    b += a;
  }
  return {a, b};
}

void fill_pattern(const uint64_t* pages, uint32_t n, uint32_t page_size, uint64_t seed) noexcept {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (uint32_t p = 0; p < n; ++p) {
    auto* w = reinterpret_cast<uint64_t*>(pages[p]);
    for (uint32_t i = 0; i < page_size / 8; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      w[i] = x;
    }
  }
}

uint8_t* byte_at(const uint64_t* pages, uint32_t page_size, uint64_t off) noexcept {
  return reinterpret_cast<uint8_t*>(pages[off / page_size] + off % page_size);
}

}  // namespace rdmafwd
