// Helpers shared by the tests: CPU affinity, and the syscall+pin floor peer.
#include <sched.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "tests.hpp"

namespace rdmx::perf {

bool set_affinity(int cpu) {
  cpu_set_t s;
  CPU_ZERO(&s);
  CPU_SET(cpu, &s);
  return sched_setaffinity(0, sizeof s, &s) == 0;
}

int current_affinity_single() {
  cpu_set_t s;
  CPU_ZERO(&s);
  if (sched_getaffinity(0, sizeof s, &s) != 0 || CPU_COUNT(&s) != 1) return -1;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &s)) return c;
  return -1;
}

// The least a system-call registration (ibv_reg_mr + ibv_dereg_mr) must do for `bytes`: enter
// the kernel once, and pin then unpin the same pages. mlock/munlock pin and unpin (they walk the
// page tables and the VMAs exactly as pin_user_pages must), getppid stands for the one ioctl
// of the registration. A real registration also writes the device's translation table, takes
// an mmap lock, allocates an mkey and needs a second ioctl to deregister: all of that is left
// out, so the floor flatters the syscall path.
std::unique_ptr<Bench> make_floor_bench(uint32_t pages, uint64_t bytes, void* buf) {
  CaseResult m;
  m.name = "syscall+pin.floor";
  m.role = "peer";
  m.unit = "syscall+mlock+munlock";
  m.pages = pages;
  m.bytes = bytes;
  // Touch the pages so the floor never counts page faults.
  auto* p = static_cast<volatile char*>(buf);
  for (uint64_t i = 0; i < bytes; i += 4096) p[i] = p[i];
  return make_bench(std::move(m), [buf, bytes] {
    (void)syscall(SYS_getppid);
    (void)mlock(buf, bytes);
    (void)munlock(buf, bytes);
  });
}

}  // namespace rdmx::perf
