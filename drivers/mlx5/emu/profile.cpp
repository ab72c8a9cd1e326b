// The emu device profiles. Values from public sources only; where a part's value is not public,
// the profile says so and keeps the CX-6 Dx value (doc/guides/emu.md "Device profiles").
#include <rdmx/emu/profile.hpp>

#include <cstdlib>

namespace rdmx::emu {

namespace {

// name, about, max_wqe_sz_sq, max_klm_list, umr_fence, umr_modify_atomic_disabled,
// max_qp_rd_atom, active_mtu
// One line each in rdmafwd --help; doc/guides/emu.md "Device profiles" gives the sources.
constexpr Profile kProfiles[] = {
    {"default", "= cx6dx: the device rdmx is developed against", 1024, 65536, 1, false, 16, 4096},
    {"cx6dx", "ConnectX-6 Dx PF (public QUERY_HCA_CAP dump)", 1024, 65536, 1, false, 16, 4096},
    {"cx5", "ConnectX-5 PF (UMR caps not public: CX-6 Dx values)", 1024, 65536, 1, false, 16, 4096},
    {"cx7", "ConnectX-7 (CX-6 Dx feature set per NVIDIA FW notes)", 1024, 65536, 1, false, 16,
     4096},
    {"atomic-umr-off", "umr_modify_atomic_disabled: no atomic bit in a UMR", 1024, 65536, 1, true,
     16, 4096},
    {"wqe512", "max_wqe_sz_sq 512: 20 inline KLMs per UMR", 512, 65536, 1, false, 16, 4096},
    {"fence-strong", "umr_fence 0: the UMR carries STRONG_ORDERING", 1024, 65536, 0, false, 16,
     4096},
    {"fence-small", "umr_fence 1: the UMR carries INITIATOR_SMALL (= default)", 1024, 65536, 1,
     false, 16, 4096},
    {"fence-none", "umr_fence 2: the UMR carries no fence", 1024, 65536, 2, false, 16, 4096},
    {"mtu1024", "port MTU 1024 (1500-byte Ethernet)", 1024, 65536, 1, false, 16, 1024},
    {"rd-atom4", "4 READs per responder QP (max_qp_rd_atom 4)", 1024, 65536, 1, false, 4, 4096},
};

}  // namespace

std::span<const Profile> profiles() noexcept {
  return kProfiles;
}

const Profile* profile_by_name(std::string_view name) noexcept {
  for (const Profile& p : kProfiles)
    if (name == p.name) return &p;
  return nullptr;
}

std::string resolve_profile_name(const std::string& name) {
  if (!name.empty()) return name;
  const char* env = std::getenv("RDMX_EMU_PROFILE");
  return env && *env ? std::string(env) : std::string("default");
}

std::string profile_names() {
  std::string s;
  for (const Profile& p : kProfiles) {
    if (!s.empty()) s += ", ";
    s += p.name;
  }
  return s;
}

}  // namespace rdmx::emu
