// rdmx-perf tests. Each returns one TestResult whose cases hold the rdmx figure and the peers
// measured in the same run, with ratios and the targets filled in.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"

namespace rdmx::perf {

struct Ctx {
  RunConfig rc;
  std::vector<uint32_t> pages;  // --pages (umr sweep, io sizes)
  uint32_t batch = 8;           // umr: map+unmap pairs per doorbell
  int measure_cpu = -1;         // CPU of the measuring (main) lcore
  int device_cpu = -1;          // CPU the emulated device thread is pinned to (threaded tests)
  std::string device = "emu";   // --device: umr_lat, io_lat, io_bw (umr runs on emu-sink)
  bool bad_rkey = false;        // hidden --bad-rkey (tests): io WRITEs/READs complete in error
  std::string corrupt;          // hidden --corrupt write|read (tests): one payload byte wrong
  std::vector<std::string>* warnings = nullptr;
  std::vector<std::string>* notices = nullptr;
};

TestResult test_cache(Ctx& ctx);
TestResult test_umr(Ctx& ctx);
TestResult test_umr_lat(Ctx& ctx);
TestResult test_io(Ctx& ctx, bool bw);   // io_lat (depth 1) or io_bw (depth 32)
TestResult test_rpc(Ctx& ctx, bool bw);  // rpc_lat (depth 1) or rpc_bw (depth 32)

// The syscall+pin floor for `bytes`: one system call + mlock + munlock of the same bytes.
std::unique_ptr<Bench> make_floor_bench(uint32_t pages, uint64_t bytes, void* buf);

// Pins the calling thread to `cpu`. Threads it creates inherit the mask: this is how the
// emulated device thread is placed (pin to the device CPU, open the device, pin back).
bool set_affinity(int cpu);
int current_affinity_single();  // the only CPU in the mask, or -1

}  // namespace rdmx::perf
