/* rdma_cm through the C API (rdmx_conn_opts.cm): what this machine can check without a NIC.
 *   - An emu port is refused with one line (emu has no rdma_cm): by rdmx_listen_opts and
 *     rdmx_connect_to_opts before anything is made, and by the exchange for a connection made
 *     without a port to check.
 *   - Where rdma_cm has no RDMA device, rdmx_listen_opts fails with -RDMX_ENODEV and librdmacm's
 *     own words (skipped on a host with /dev/infiniband/rdma_cm).
 *   - cm = 0 and NULL options are the plain rendezvous. */
#define _POSIX_C_SOURCE 200809L

#include <rdmx/rdmx.h>

#include <string.h>
#include <unistd.h>

#include "check.h"

static int one_line(const char* s) {
  return s[0] != '\0' && strchr(s, '\n') == NULL;
}

int main(void) {
  rdmx_port* p = NULL;
  REQUIRE(rdmx_port_open("emu-inline", NULL, &p) == 0);
  rdmx_core* core = NULL;
  REQUIRE(rdmx_core_create(p, NULL, &core) == 0);

  rdmx_conn_opts o;
  rdmx_conn_opts_init(&o);
  CHECK(o.size == sizeof o && o.cm == 0 && o.port == NULL);
  o.cm = 1;
  o.port = p;

  /* The emu port, checked before any socket or rdma_cm call. */
  rdmx_listener* l = (rdmx_listener*)1;
  CHECK_RC(rdmx_listen_opts("127.0.0.1:0", &o, &l), -RDMX_ENOTSUP);
  CHECK(l == NULL);
  CHECK(strstr(rdmx_last_error(), "emu has no rdma_cm") != NULL);
  CHECK(one_line(rdmx_last_error()));
  rdmx_conn* c = (rdmx_conn*)1;
  /* Port 1 on loopback refuses: without the check this would retry for the whole second. */
  CHECK_RC(rdmx_connect_to_opts("127.0.0.1:1", 1000, NULL, &o, &c), -RDMX_ENOTSUP);
  CHECK(c == NULL);
  CHECK(strstr(rdmx_last_error(), "emu has no rdma_cm") != NULL);
  CHECK(one_line(rdmx_last_error()));

  /* No port given: the exchange refuses the emu core (the TCP connection itself is made). */
  rdmx_listener* plain = NULL;
  REQUIRE(rdmx_listen_opts("127.0.0.1:0", NULL, &plain) == 0);
  char addr[64];
  snprintf(addr, sizeof addr, "127.0.0.1:%u", rdmx_listener_port(plain));
  o.port = NULL;
  REQUIRE(rdmx_connect_to_opts(addr, 5000, NULL, &o, &c) == 0);
  CHECK_RC(rdmx_conn_exchange(c, &core, 1, 1000, NULL), -RDMX_ENOTSUP);
  CHECK(strstr(rdmx_last_error(), "emu has no rdma_cm") != NULL);
  CHECK(one_line(rdmx_last_error()));
  CHECK_RC(rdmx_conn_try_exchange(c, &core, 1, 1000), -RDMX_ENOTSUP);
  rdmx_conn_close(c);

  /* cm = 0 is the plain rendezvous: the server's accept meets this client. */
  o.cm = 0;
  rdmx_conn* cc = NULL;
  rdmx_conn* sc = NULL;
  REQUIRE(rdmx_connect_to_opts(addr, 5000, NULL, &o, &cc) == 0);
  CHECK_RC(rdmx_accept(plain, 5000, NULL, &sc), 0);
  rdmx_conn_close(sc);
  rdmx_conn_close(cc);
  rdmx_listener_close(plain);

  /* rdma_cm with no RDMA device on the host: librdmacm's "No such device", as -RDMX_ENODEV. */
  if (access("/dev/infiniband/rdma_cm", F_OK) == 0) {
    printf("SKIP: this host has rdma_cm; the no-device case needs a host without one\n");
  } else {
    o.cm = 1;
    o.port = NULL;
    l = (rdmx_listener*)1;
    CHECK_RC(rdmx_listen_opts("127.0.0.1:0", &o, &l), -RDMX_ENODEV);
    CHECK(l == NULL);
    CHECK(strstr(rdmx_last_error(), "No such device") != NULL);
    CHECK(strstr(rdmx_last_error(), "rdma_cm") != NULL);
    CHECK(one_line(rdmx_last_error()));
  }

  rdmx_core_destroy(core);
  rdmx_port_close(p);
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("capi_cm: ok\n");
  return 0;
}
