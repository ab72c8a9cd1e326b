/* rdmx_core_stats_get from another thread while the core maps and unmaps (rdmx.h: "any thread"):
 * every value a reader gets is one the core stored (its gauges umrs_in_flight and cached_windows
 * included), counters never go backwards. Run under the TSan build (-Dsanitize=thread) it also
 * shows that no field is a plain read of what the core writes. Exit status 0 = pass. */
#define _POSIX_C_SOURCE 200809L

#include <rdmx/rdmx.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>

#include "check.h"

enum { kMaps = 20000, kWindows = 64 };

static rdmx_core* g_core;
static atomic_int g_done;

struct seen {
  uint64_t reads, max_in_flight, max_cached, backwards;
};

static void* reader(void* arg) {
  struct seen* s = (struct seen*)arg;
  uint64_t last_maps = 0, last_completions = 0;
  while (!atomic_load(&g_done)) {
    rdmx_core_stats st;
    if (rdmx_core_stats_get(g_core, &st, sizeof st) != 0) break;
    ++s->reads;
    if (st.umrs_in_flight > s->max_in_flight) s->max_in_flight = st.umrs_in_flight;
    if (st.cached_windows > s->max_cached) s->max_cached = st.cached_windows;
    if (st.maps < last_maps || st.umr_completions < last_completions) ++s->backwards;
    last_maps = st.maps;
    last_completions = st.umr_completions;
  }
  return NULL;
}

int main(void) {
  rdmx_port *pa = NULL, *pb = NULL;
  rdmx_core* cb = NULL;
  rdmx_port_opts o;
  rdmx_completion wc[16];
  rdmx_core_stats st;
  struct seen s;
  pthread_t t;
  rdmx_port_opts_init(&o);
  o.n_windows = kWindows;
  REQUIRE(rdmx_port_open_pair("emu-inline", &o, NULL, &pa, &pb) == 0);
  REQUIRE(rdmx_core_create(pa, NULL, &g_core) == 0);
  REQUIRE(rdmx_core_create(pb, NULL, &cb) == 0);
  REQUIRE(rdmx_core_connect_pair(g_core, cb) == 0);
  uint8_t* mem = (uint8_t*)rdmx_port_arena(pa);
  memset(&s, 0, sizeof s);
  REQUIRE(pthread_create(&t, NULL, reader, &s) == 0);
  for (int i = 0; i < kMaps; ++i) {
    rdmx_mapping m;
    CHECK_RC(rdmx_map_buf(g_core, mem + (size_t)(i % 8) * 4096, 4096, RDMX_ACCESS_REMOTE_RW, &m),
             0);
    CHECK_RC(rdmx_unmap(g_core, m.window), 0);
    if (i % 8 == 7) {
      rdmx_flush(g_core);
      (void)rdmx_poll(g_core, wc, 16);
    }
  }
  rdmx_flush(g_core);
  CHECK_RC(rdmx_core_quiesce(g_core, 0), 0);
  atomic_store(&g_done, 1);
  pthread_join(t, NULL);
  CHECK_RC(rdmx_core_stats_get(g_core, &st, sizeof st), 0);
  CHECK(st.maps == kMaps && st.unmaps == kMaps && st.umrs_in_flight == 0);
  CHECK(s.reads > 0 && s.backwards == 0);
  CHECK(s.max_cached <= kWindows);
  CHECK(s.max_in_flight <= 2 * kWindows);
  printf("stats_thread: %llu reads beside %d maps+unmaps: in flight <= %llu, cached <= %llu\n",
         (unsigned long long)s.reads, kMaps, (unsigned long long)s.max_in_flight,
         (unsigned long long)s.max_cached);
  rdmx_core_destroy(g_core);
  rdmx_core_destroy(cb);
  rdmx_port_close(pa);
  rdmx_port_close(pb);
  if (g_failures) return 1;
  return 0;
}
