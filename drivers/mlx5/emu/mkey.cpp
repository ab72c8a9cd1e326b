// mkeys: the table lookup and the access check; the translation walk itself (walk, xlat) is a
// template in datapath.hpp. Runs under Engine::mu_.
#include "datapath.hpp"

namespace rdmx::emu::detail {

// ---- mkeys --------------------------------------------------------------------------------------
Mkey* Engine::lookup(uint32_t key) noexcept {
  const uint32_t idx = key >> 8;
  if (idx < 2 || idx >= mkeys_.size()) return nullptr;
  Mkey& m = mkeys_[idx];
  if (m.kind == Mkey::Kind::kNone || m.tag != static_cast<uint8_t>(key)) return nullptr;
  return &m;
}

XlateErr Engine::check(uint32_t key, uint64_t iova, uint64_t len, uint8_t access, uint32_t pd,
                       uint32_t qpn) noexcept {
  return walk(
      key, iova, len, access, [](uint8_t*, uint64_t) {}, pd, qpn);
}

}  // namespace rdmx::emu::detail
