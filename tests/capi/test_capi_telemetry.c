/* A DPDK program embedding rdmx through the C API sees the library's statistics over DPDK
 * telemetry without registering anything: it starts the EAL (its own, with the telemetry
 * socket), maps and unmaps through the C API, then talks to its own telemetry socket as
 * usertools/dpdk-telemetry.py does (SOCK_SEQPACKET under the runtime directory, a JSON greeting,
 * then one JSON reply per command) and checks /rdmx/cores, /rdmx/stats and /rdmx/stats,N against
 * rdmx_stats_snapshot(). Over the emulated device. Exit status 0 = pass, 77 = skipped (no
 * telemetry socket: an EAL without telemetry). */
#define _GNU_SOURCE

#include <rdmx/rdmx.h>

#include <dirent.h>
#include <limits.h>
#include <rte_eal.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "check.h"

/* The value of "key": N in a telemetry JSON reply; -1 when absent. */
static long long json_u64(const char* json, const char* key) {
  char pat[96];
  snprintf(pat, sizeof pat, "\"%s\":", key);
  const char* p = strstr(json, pat);
  return p ? strtoll(p + strlen(pat), NULL, 10) : -1;
}

static uint64_t snap_value(const rdmx_stat* s, int n, const char* name) {
  for (int i = 0; i < n; ++i)
    if (strcmp(s[i].name, name) == 0) return s[i].value;
  return UINT64_MAX;
}

static int ask(int fd, const char* cmd, char* buf, size_t cap) {
  if (send(fd, cmd, strlen(cmd), 0) < 0) return -1;
  const ssize_t n = recv(fd, buf, cap - 1, 0);
  if (n <= 0) return -1;
  buf[n] = '\0';
  return 0;
}

static void remove_dir(const char* path) {
  DIR* d = opendir(path);
  if (!d) return;
  char f[PATH_MAX + 256];
  for (struct dirent* e; (e = readdir(d)) != NULL;) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    snprintf(f, sizeof f, "%s/%s", path, e->d_name);
    unlink(f);
  }
  closedir(d);
  rmdir(path);
}

int main(void) {
  char prefix[64];
  snprintf(prefix, sizeof prefix, "--file-prefix=rdmx-tel-%d", (int)getpid());
  char* eal_argv[] = {
      "test_capi_telemetry",       "-l", "0", "--no-huge", "-m", "256", "--no-pci", prefix,
      "--log-level=lib.eal:error", NULL};
  REQUIRE(rte_eal_init(9, eal_argv) >= 0);

  rdmx_port *pa, *pb;
  rdmx_core *ca, *cb;
  REQUIRE(rdmx_port_open_pair("emu-inline", NULL, NULL, &pa, &pb) == 0);
  REQUIRE(rdmx_core_create(pa, NULL, &ca) == 0);
  REQUIRE(rdmx_core_create(pb, NULL, &cb) == 0);
  REQUIRE(rdmx_core_connect_pair(ca, cb) == 0);
  uint8_t* mem = (uint8_t*)rdmx_port_arena(pa);
  enum { kPairs = 25 };
  for (int i = 0; i < kPairs; ++i) {
    rdmx_mapping m;
    CHECK_RC(rdmx_map_buf(ca, mem + 4096 * (i % 8), 3 * 4096, RDMX_ACCESS_REMOTE_RW, &m), 0);
    CHECK_RC(rdmx_unmap(ca, m.window), 0);
    rdmx_flush(ca);
    CHECK_RC(rdmx_core_quiesce(ca, 0), 0);
  }

  /* The snapshot through the C API: sizing call, then the pairs. */
  const int n = rdmx_stats_snapshot(ca, NULL, 0);
  REQUIRE(n > 0);
  rdmx_stat* core_snap = calloc((size_t)n, sizeof *core_snap);
  REQUIRE(core_snap != NULL);
  CHECK_RC(rdmx_stats_snapshot(ca, core_snap, (size_t)n), n);
  CHECK(snap_value(core_snap, n, "maps") == kPairs);
  CHECK(snap_value(core_snap, n, "unmaps") == kPairs);
  CHECK(snap_value(core_snap, n, "pages_mapped") == 3 * kPairs);
  CHECK_RC(rdmx_stats_snapshot(ca, NULL, 5), -RDMX_EINVAL);
  rdmx_stat all[512];
  const int na = rdmx_stats_snapshot(NULL, all, 512);
  CHECK(na > 0 && snap_value(all, na, "maps") == kPairs); /* cb mapped nothing */

  /* The telemetry socket of this process. */
  struct sockaddr_un sun;
  memset(&sun, 0, sizeof sun);
  sun.sun_family = AF_UNIX;
  snprintf(sun.sun_path, sizeof sun.sun_path, "%s/dpdk_telemetry.v2", rte_eal_get_runtime_dir());
  if (access(sun.sun_path, F_OK) != 0) {
    fprintf(stderr, "SKIP no telemetry socket at %s\n", sun.sun_path);
    return 77;
  }
  const int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
  REQUIRE(fd >= 0);
  struct timeval tv = {5, 0}; /* a reply that never comes fails in seconds, not at a timeout */
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  REQUIRE(connect(fd, (struct sockaddr*)&sun, sizeof sun) == 0);
  static char buf[65536];
  REQUIRE(recv(fd, buf, sizeof buf - 1, 0) > 0); /* the greeting */

  REQUIRE(ask(fd, "/rdmx/cores", buf, sizeof buf) == 0);
  printf("%s\n", buf);
  CHECK(strstr(buf, "\"/rdmx/cores\":[") != NULL);
  /* Core indices: ca was created first in this process. */
  const char* list = strchr(buf, '[');
  const long long first = list ? strtoll(list + 1, NULL, 10) : -1;
  CHECK(first >= 0);

  REQUIRE(ask(fd, "/rdmx/stats", buf, sizeof buf) == 0);
  printf("%s\n", buf);
  CHECK(json_u64(buf, "maps") == (long long)snap_value(all, na, "maps"));
  CHECK(json_u64(buf, "unmaps") == (long long)snap_value(all, na, "unmaps"));
  CHECK(json_u64(buf, "pages_mapped") == (long long)snap_value(all, na, "pages_mapped"));
  CHECK(json_u64(buf, "umr_completions") == (long long)snap_value(all, na, "umr_completions"));
  CHECK(json_u64(buf, "rejected_no_window") == 0);

  char cmd[64];
  snprintf(cmd, sizeof cmd, "/rdmx/stats,%lld", first);
  REQUIRE(ask(fd, cmd, buf, sizeof buf) == 0);
  printf("%s\n", buf);
  CHECK(json_u64(buf, "maps") == kPairs && json_u64(buf, "pages_mapped") == 3 * kPairs);
  /* A core that does not exist: an error reply (null), not a crash. */
  REQUIRE(ask(fd, "/rdmx/stats,999999", buf, sizeof buf) == 0);
  CHECK(json_u64(buf, "maps") == -1);

  REQUIRE(ask(fd, "/rdmx/stats_info", buf, sizeof buf) == 0);
  CHECK(strstr(buf, "\"pages_mapped\":\"counter, pages: ") != NULL);
  close(fd);

  free(core_snap);
  rdmx_core_destroy(ca);
  rdmx_core_destroy(cb);
  rdmx_port_close(pa);
  rdmx_port_close(pb);
  // DPDK leaves its runtime directory behind (rte_eal_cleanup keeps it): remove it, so the
  // suite leaves nothing in /var/run/dpdk (scripts/check-leftovers.sh).
  char dir[PATH_MAX];
  snprintf(dir, sizeof dir, "%s", rte_eal_get_runtime_dir());
  rte_eal_cleanup();
  remove_dir(dir);
  if (g_failures) fprintf(stderr, "%d check(s) failed\n", g_failures);
  return g_failures ? 1 : 0;
}
