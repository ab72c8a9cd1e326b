/* Shared by the C API tests (C99): failure counting (safe from several threads), checks that
 * name rdmx's last error, and a bounded wait for one completion. */
#ifndef RDMX_TESTS_CAPI_CHECK_H
#define RDMX_TESTS_CAPI_CHECK_H

#include <rdmx/rdmx.h>

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static int g_failures = 0;
#define FAILED() __atomic_add_fetch(&g_failures, 1, __ATOMIC_RELAXED)

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              rdmx_last_error());                                                              \
      FAILED();                                                                                \
    }                                                                                          \
  } while (0)
#define CHECK_RC(expr, want)                                                                     \
  do {                                                                                           \
    int rc_ = (expr);                                                                            \
    if (rc_ != (want)) {                                                                         \
      fprintf(stderr, "%s:%d: %s = %d (%s), want %d (%s); last error: %s\n", __FILE__, __LINE__, \
              #expr, rc_, rdmx_errname(rc_), (want), rdmx_errname(want), rdmx_last_error());     \
      FAILED();                                                                                  \
    }                                                                                            \
  } while (0)
#define REQUIRE(cond)                                                                            \
  do {                                                                                           \
    if (!(cond)) {                                                                               \
      fprintf(stderr, "%s:%d: REQUIRE failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              rdmx_last_error());                                                                \
      exit(1);                                                                                   \
    }                                                                                            \
  } while (0)

static inline double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Polls `c` until the completion with `cookie` arrives (others are dropped); its copy in *out. */
static inline int wait_cookie(rdmx_core* c, uint64_t cookie, rdmx_completion* out) {
  const double end = now_s() + 5.0;
  while (now_s() < end) {
    rdmx_completion wc[8];
    int n = rdmx_poll(c, wc, 8);
    int i;
    for (i = 0; i < n; ++i) {
      if (wc[i].cookie == cookie) {
        *out = wc[i];
        return 1;
      }
    }
    if (n == 0) rdmx_port_progress(rdmx_core_port(c));
  }
  return 0;
}

#endif
