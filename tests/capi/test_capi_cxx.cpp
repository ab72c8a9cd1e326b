// rdmx.h from C++ (extern "C", no C++ exception may escape): a port pair, a map through the
// callback poll, and the error path, with the same header the C test uses.
#include <rdmx/rdmx.h>

#include <cstdio>
#include <cstring>
#include <vector>

int main() {
  int failures = 0;
  auto check = [&](bool ok, const char* what) {
    if (!ok) {
      std::fprintf(stderr, "FAILED: %s (last error: %s)\n", what, rdmx_last_error());
      ++failures;
    }
  };
  rdmx_port* bad = nullptr;
  check(rdmx_port_open("mlx5_0", nullptr, &bad) == -RDMX_ENODEV, "mlx5_0 is no device here");
  check(std::strlen(rdmx_last_error()) > 0, "a message for the failure");

  rdmx_port *a = nullptr, *b = nullptr;
  rdmx_core *ca = nullptr, *cb = nullptr;
  check(rdmx_port_open_pair("emu-inline", nullptr, nullptr, &a, &b) == 0, "open pair");
  check(rdmx_core_create(a, nullptr, &ca) == 0 && rdmx_core_create(b, nullptr, &cb) == 0, "cores");
  check(rdmx_core_connect_pair(ca, cb) == 0, "connect");
  uint64_t page = 0;
  check(rdmx_pages_alloc(a, &page, 1) == 0, "page");
  rdmx_mapping m{};
  check(rdmx_map(ca, &page, 1, RDMX_ACCESS_REMOTE_RW, 0, 4096, &m) == 0, "map");
  check(rdmx_core_quiesce(ca, 0) == 0, "quiesce");
  auto* peer = static_cast<uint8_t*>(rdmx_port_arena(b));
  std::memset(peer, 0x31, 4096);
  const rdmx_sge s{reinterpret_cast<uint64_t>(peer), 4096, rdmx_port_lkey(b)};
  check(rdmx_post_write(cb, &s, 1, m.iova, m.rkey, 9, RDMX_POST_SIGNALED) == 0, "write");
  rdmx_flush(cb);
  std::vector<rdmx_completion> got;
  for (int i = 0; i < 100000 && got.empty(); ++i)
    rdmx_poll_cb(
        cb, 8,
        [](void* arg, const rdmx_completion* c) {
          static_cast<std::vector<rdmx_completion>*>(arg)->push_back(*c);
        },
        &got);
  check(got.size() == 1 && got[0].status == 0 && got[0].cookie == 9, "one WRITE completion");
  check(reinterpret_cast<const uint8_t*>(page)[4095] == 0x31, "data arrived");
  check(rdmx_unmap(ca, m.window) == 0, "unmap");
  rdmx_port_close(a);  // closes ca too
  rdmx_port_close(b);
  if (failures) return 1;
  std::printf("test_capi_cxx: ok\n");
  return 0;
}
