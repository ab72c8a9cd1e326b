// emu device profiles: named capability sets modelled on real ConnectX parts and on the HCA caps
// that change what rdmx may put in a WQE. emu enforces each as the device does (see
// doc/guides/emu.md "Device profiles" and doc/guides/mlx5.md "Capabilities").
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace rdmx::emu {

struct Profile {
  const char* name;
  const char* about;  // the part or cap it models, one line
  // HCA caps (cmd_hca_cap, rdma-core providers/mlx5/mlx5_ifc.h):
  uint32_t max_wqe_sz_sq;           // 0x290 (16 b): bytes; a longer send WQE fails
  uint32_t max_klm_list;            // 2^log_max_klm_list_size (0x11a), entries per window
  uint8_t umr_fence;                // 0x20a (2 b): 0 strong, 1 small, 2 none
  bool umr_modify_atomic_disabled;  // 0x208: a UMR may not set mkey_mask bit 21 (A)
  uint32_t max_qp_rd_atom;          // 2^log_max_ra_res_qp: READs a responder accepts in flight
  uint32_t active_mtu;              // port active MTU, bytes (256..4096)
};

// Every profile, "default" first (the idealised emu device rdmx was built on: the CX-6 Dx caps).
std::span<const Profile> profiles() noexcept;
// nullptr when no profile has that name.
const Profile* profile_by_name(std::string_view name) noexcept;
// The profile a device opened with Options::profile = `name` gets: `name` itself, or when it is
// empty the environment's RDMX_EMU_PROFILE (the test matrix runs whole suites on each profile
// with it), else "default".
std::string resolve_profile_name(const std::string& name);
// "default, cx5, ..." for messages and --help.
std::string profile_names();

}  // namespace rdmx::emu
