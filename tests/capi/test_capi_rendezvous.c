/* The C API's TCP rendezvous from C (-std=c99 -Wall -Wextra -Werror): a server thread listens,
 * accepts, exchanges connect info and says ready; the main thread connects to it, does the same,
 * then SENDs a message the server receives and checks byte for byte; the application's own
 * messages; and the bad cases: nobody listening (bounded, -RDMX_ETIMEDOUT), a cancel flag
 * (-RDMX_ESTATE), a bad address (-RDMX_EINVAL), a core count that differs (-RDMX_EPROTO); and
 * the same exchange through the calls that never wait (rdmx_accept_hello, rdmx_conn_try_*) with
 * an idle connection in front of the client (taken past it, the idle one refused after 300 ms).
 * Over the emulated device (two ports of one in-process wire), TCP over loopback. Exit status
 * 0 = pass. */
#define _POSIX_C_SOURCE 200809L

#include <rdmx/rdmx.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "check.h"

struct server {
  rdmx_listener* l;
  rdmx_port* port;
  rdmx_core* core;
  int mismatch; /* second round: exchange 2 cores where the client gives 1 */
  int door;     /* third round: rdmx_accept_hello, rdmx_conn_try_exchange/_try_ready, with an
                   idle connection in front of the client */
  int link;     /* link round: the client's core is on a network (emu@roce), this one's not */
};

/* The non-blocking server side: the client's hello taken past an idle connection, the exchange
 * and ready a step at a time, each step bounded by `end`. */
static rdmx_conn* door_join(struct server* s, double end) {
  rdmx_conn* c = NULL;
  char msg[64];
  size_t len = 0;
  int rc;
  while ((rc = rdmx_accept_hello(s->l, 300, msg, sizeof msg, &len, &c)) != 1 && now_s() < end)
    CHECK(rc == 0); /* the idle connection has 300 ms: the client's hello comes first */
  CHECK(rc == 1 && len == 6 && memcmp(msg, "hello", 6) == 0);
  if (rc != 1) return NULL;
  CHECK_RC(rdmx_conn_send(c, "welcome", 8, 5000, NULL), 0);
  while ((rc = rdmx_conn_try_exchange(c, &s->core, 1, 5000)) == 0 && now_s() < end) {
  }
  CHECK_RC(rc, 1);
  return c;
}
static void door_ready(struct server* s, rdmx_conn* c, double end) {
  int rc;
  while ((rc = rdmx_conn_try_ready(c, 5000)) == 0 && now_s() < end) {
  }
  CHECK_RC(rc, 1);
  /* The idle connection is refused once its 300 ms are up: one error naming it. */
  while ((rc = rdmx_accept_hello(s->l, 300, NULL, 0, &(size_t){0}, &c)) == 0 && now_s() < end) {
  }
  CHECK_RC(rc, -RDMX_ETIMEDOUT);
  CHECK(strstr(rdmx_last_error(), "sent no hello within 300 ms") != NULL);
}

/* rdmx_core_disconnect's on_done: counts the completions, and those that did not succeed. */
struct flushed {
  int n, failed;
  uint64_t cookie;
};
static void count_flushed(void* arg, const rdmx_completion* x) {
  struct flushed* f = (struct flushed*)arg;
  f->n++;
  f->failed += x->status != 0;
  f->cookie = x->cookie;
}

/* The reconnect round's server: serves a client to READY with a receive posted, then "dies" (its
 * connection closed without a goodbye), disconnects its core (the receive completes once, as
 * flushed), serves the client that comes back on the same core, and checks its SEND. */
static void* server_reconnect(void* arg) {
  struct server* s = (struct server*)arg;
  rdmx_conn* c = NULL;
  uint64_t page;
  rdmx_sge sg;
  rdmx_completion wc = {0};
  struct flushed f = {0, 0, 0};
  char msg[64];
  int round, n;
  CHECK_RC(rdmx_pages_alloc(s->port, &page, 1), 0);
  sg.addr = page;
  sg.length = 4096;
  sg.lkey = rdmx_port_lkey(s->port);
  for (round = 0; round < 2; ++round) {
    CHECK_RC(rdmx_accept(s->l, 10000, NULL, &c), 0);
    if (!c) return NULL;
    n = rdmx_conn_recv(c, msg, sizeof msg, 5000, NULL);
    CHECK(n == 6 && memcmp(msg, "hello", 6) == 0);
    CHECK_RC(rdmx_conn_send(c, "welcome", 8, 5000, NULL), 0);
    CHECK_RC(rdmx_conn_exchange(c, &s->core, 1, 5000, NULL), 0);
    memset((void*)(uintptr_t)page, 0, 4096);
    CHECK_RC(rdmx_post_recv(s->core, &sg, 1, 40 + (uint64_t)round), 0);
    rdmx_flush(s->core);
    CHECK_RC(rdmx_conn_ready(c, 5000, NULL), 0);
    if (round == 0) {
      CHECK_RC(rdmx_conn_reconnect(c, 100, NULL), -RDMX_ESTATE); /* accepted: not ours */
      rdmx_conn_close(c);                                        /* "dies" */
      CHECK_RC(rdmx_core_disconnect(s->core, 0, count_flushed, &f), 0);
      CHECK(f.n == 1 && f.failed == 1 && f.cookie == 40);
      continue;
    }
    CHECK(wait_cookie(s->core, 41, &wc));
    CHECK(wc.status == 0 && wc.bytes == 1000);
    for (n = 0; n < 1000; ++n)
      if (((const unsigned char*)(uintptr_t)page)[n] != (unsigned char)(n * 3 + 2)) {
        CHECK(!"received bytes differ after the reconnect");
        break;
      }
    {
      const double end = now_s() + 10.0;
      while (!rdmx_conn_peer_gone(c) && now_s() < end) {
      }
    }
    rdmx_conn_close(c);
  }
  return NULL;
}

static void* server_main(void* arg) {
  struct server* s = (struct server*)arg;
  rdmx_conn* c = NULL;
  uint64_t page;
  rdmx_sge sg;
  rdmx_completion wc = {0};
  char msg[64];
  int n;
  const double end = now_s() + 10.0;
  if (s->door) {
    c = door_join(s, end);
  } else {
    CHECK_RC(rdmx_accept(s->l, 10000, NULL, &c), 0);
  }
  if (!c) return NULL;
  if (s->link) { /* refused first, before any info of ours goes */
    n = rdmx_conn_recv(c, msg, sizeof msg, 5000, NULL);
    CHECK(n == 6 && memcmp(msg, "hello", 6) == 0);
    CHECK_RC(rdmx_conn_exchange(c, &s->core, 1, 5000, NULL), -RDMX_EINVAL);
    CHECK(strstr(rdmx_last_error(),
                 "the client runs link network, this server shm: start both "
                 "on one link") != NULL);
    rdmx_conn_close(c);
    return NULL;
  }
  if (s->mismatch) {
    rdmx_core* two[2] = {s->core, s->core};
    CHECK_RC(rdmx_conn_exchange(c, two, 2, 5000, NULL), -RDMX_EPROTO);
    rdmx_conn_close(c);
    return NULL;
  }
  if (!s->door) {
    n = rdmx_conn_recv(c, msg, sizeof msg, 5000, NULL);
    CHECK(n == 6 && memcmp(msg, "hello", 6) == 0);
    CHECK_RC(rdmx_conn_send(c, "welcome", 8, 5000, NULL), 0);
    CHECK_RC(rdmx_conn_exchange(c, &s->core, 1, 5000, NULL), 0);
  }
  CHECK_RC(rdmx_pages_alloc(s->port, &page, 1), 0);
  memset((void*)(uintptr_t)page, 0, 4096);
  sg.addr = page;
  sg.length = 4096;
  sg.lkey = rdmx_port_lkey(s->port);
  CHECK_RC(rdmx_post_recv(s->core, &sg, 1, 42), 0);
  rdmx_flush(s->core);
  if (s->door)
    door_ready(s, c, end);
  else
    CHECK_RC(rdmx_conn_ready(c, 5000, NULL), 0);
  CHECK(wait_cookie(s->core, 42, &wc));
  CHECK(wc.status == 0 && wc.bytes == 1000);
  for (n = 0; n < 1000; ++n) {
    if (((const unsigned char*)(uintptr_t)page)[n] != (unsigned char)(n * 7 + 1)) {
      CHECK(!"received bytes differ");
      break;
    }
  }
  /* The client closes: seen without waiting (bounded loop). */
  {
    const double end = now_s() + 10.0;
    while (!rdmx_conn_peer_gone(c) && now_s() < end) {
    }
    CHECK(rdmx_conn_peer_gone(c));
  }
  rdmx_conn_close(c);
  return NULL;
}

int main(void) {
  rdmx_port *a = NULL, *b = NULL;
  rdmx_core *ca = NULL, *cb = NULL;
  rdmx_listener* l = NULL;
  rdmx_conn* c = NULL;
  struct server srv;
  pthread_t t;
  char addr[64];
  char msg[64];
  uint64_t page;
  rdmx_sge sg;
  rdmx_completion wc = {0};
  int i, round;
  volatile int cancel = 1;
  double t0;

  if (rdmx_port_open_pair("emu", NULL, NULL, &a, &b) != 0 || rdmx_core_create(a, NULL, &ca) ||
      rdmx_core_create(b, NULL, &cb)) {
    fprintf(stderr, "setup: %s\n", rdmx_last_error());
    return 1;
  }

  /* Bad addresses and nobody listening. */
  CHECK_RC(rdmx_listen("1.2.3.4:99999", &l), -RDMX_EINVAL);
  CHECK_RC(rdmx_listen("203.0.113.9:7471", &l), -RDMX_EINVAL);
  CHECK(strstr(rdmx_last_error(), "not an address of this host") != NULL);
  CHECK_RC(rdmx_connect_to("no-such-host.invalid:1", 100, NULL, &c), -RDMX_EINVAL);
  CHECK_RC(rdmx_listen("127.0.0.1:0", &l), 0);
  snprintf(addr, sizeof addr, "127.0.0.1:%u", rdmx_listener_port(l));
  rdmx_listener_close(l);
  t0 = now_s();
  CHECK_RC(rdmx_connect_to(addr, 200, NULL, &c), -RDMX_ETIMEDOUT);
  CHECK(strstr(rdmx_last_error(), "no server at") != NULL);
  CHECK(now_s() - t0 < 30.0);
  CHECK_RC(rdmx_connect_to(addr, 60000, &cancel, &c), -RDMX_ESTATE);
  CHECK(strstr(rdmx_last_error(), "interrupted") != NULL);

  /* A good exchange, then data over the connected QPs. */
  CHECK_RC(rdmx_listen("127.0.0.1:0", &l), 0);
  if (!l) return 1;
  CHECK(strncmp(rdmx_listener_address(l), "127.0.0.1:", 10) == 0);
  snprintf(addr, sizeof addr, "127.0.0.1:%u", rdmx_listener_port(l));
  srv.l = l;
  srv.port = b;
  srv.core = cb;
  srv.mismatch = 0;
  srv.door = 0;
  srv.link = 0;
  for (round = 0; round < 2; ++round) {
    rdmx_conn* idle = NULL;
    srv.door = round;
    if (round) CHECK_RC(rdmx_connect_to(addr, 10000, NULL, &idle), 0); /* sends nothing */
    pthread_create(&t, NULL, server_main, &srv);
    CHECK_RC(rdmx_connect_to(addr, 10000, NULL, &c), 0);
    if (c) {
      CHECK(strcmp(rdmx_conn_peer(c), addr) == 0);
      CHECK_RC(rdmx_conn_send(c, "hello", 6, 5000, NULL), 0);
      CHECK_RC(rdmx_conn_recv(c, msg, sizeof msg, 5000, NULL), 8);
      CHECK_RC(rdmx_conn_exchange(c, &ca, 1, 5000, NULL), 0);
      CHECK_RC(rdmx_conn_ready(c, 5000, NULL), 0);
      CHECK_RC(rdmx_pages_alloc(a, &page, 1), 0);
      for (i = 0; i < 1000; ++i) ((unsigned char*)(uintptr_t)page)[i] = (unsigned char)(i * 7 + 1);
      sg.addr = page;
      sg.length = 1000;
      sg.lkey = rdmx_port_lkey(a);
      CHECK_RC(rdmx_post_send(ca, &sg, 1, 7, RDMX_POST_SIGNALED), 0);
      rdmx_flush(ca);
      CHECK(wait_cookie(ca, 7, &wc) && wc.status == 0);
      rdmx_conn_close(c);
      c = NULL;
    }
    pthread_join(t, NULL);
    rdmx_conn_close(idle);
  }

  /* A connection that fails and is made again: the server goes away after READY (the client's
   * receive in flight); the client disconnects its core (the receive completes once, flushed),
   * reconnects to the same address, exchanges again (the cores recovered: new incarnations)
   * and its SEND arrives intact. */
  {
    struct flushed f = {0, 0, 0};
    const double end = now_s() + 10.0;
    /* Fresh cores (the rounds before connected theirs to other peers). */
    rdmx_core* const cb_before = srv.core;
    rdmx_core *ca2 = NULL, *cb2 = NULL;
    REQUIRE(rdmx_core_create(a, NULL, &ca2) == 0 && rdmx_core_create(b, NULL, &cb2) == 0);
    srv.core = cb2;
    pthread_create(&t, NULL, server_reconnect, &srv);
    CHECK_RC(rdmx_connect_to(addr, 10000, NULL, &c), 0);
    if (c) {
      CHECK_RC(rdmx_conn_send(c, "hello", 6, 5000, NULL), 0);
      CHECK_RC(rdmx_conn_recv(c, msg, sizeof msg, 5000, NULL), 8);
      CHECK_RC(rdmx_conn_exchange(c, &ca2, 1, 5000, NULL), 0);
      CHECK_RC(rdmx_pages_alloc(a, &page, 1), 0);
      sg.addr = page;
      sg.length = 4096;
      sg.lkey = rdmx_port_lkey(a);
      CHECK_RC(rdmx_post_recv(ca2, &sg, 1, 99), 0);
      rdmx_flush(ca2);
      CHECK_RC(rdmx_conn_ready(c, 5000, NULL), 0);
      while (!rdmx_conn_peer_gone(c) && now_s() < end) {
      }
      CHECK(rdmx_conn_peer_gone(c));
      CHECK_RC(rdmx_core_disconnect(ca2, 0, count_flushed, &f), 0);
      CHECK(f.n == 1 && f.failed == 1 && f.cookie == 99);
      CHECK_RC(rdmx_conn_reconnect(c, 10000, NULL), 0);
      CHECK_RC(rdmx_conn_send(c, "hello", 6, 5000, NULL), 0);
      CHECK_RC(rdmx_conn_recv(c, msg, sizeof msg, 5000, NULL), 8);
      CHECK_RC(rdmx_conn_exchange(c, &ca2, 1, 5000, NULL), 0);
      CHECK_RC(rdmx_conn_ready(c, 5000, NULL), 0);
      for (i = 0; i < 1000; ++i) ((unsigned char*)(uintptr_t)page)[i] = (unsigned char)(i * 3 + 2);
      sg.length = 1000;
      CHECK_RC(rdmx_post_send(ca2, &sg, 1, 8, RDMX_POST_SIGNALED), 0);
      rdmx_flush(ca2);
      CHECK(wait_cookie(ca2, 8, &wc) && wc.status == 0);
      rdmx_conn_close(c);
      c = NULL;
    }
    pthread_join(t, NULL);
    rdmx_core_destroy(ca2);
    rdmx_core_destroy(cb2);
    srv.core = cb_before;
  }

  /* Links that differ: a client whose core is on emu@roce (RoCE v2 from 127.0.0.1: raw sockets,
   * skipped without them) against this server's emu shared-memory core is refused at its
   * exchange, in one line naming both links, within a second. */
  {
    rdmx_port* r = NULL;
    rdmx_core* cr = NULL;
    if (rdmx_port_open("emu@roce:127.0.0.1", NULL, &r) == 0 &&
        rdmx_core_create(r, NULL, &cr) == 0) {
      srv.door = 0;
      srv.link = 1;
      pthread_create(&t, NULL, server_main, &srv);
      CHECK_RC(rdmx_connect_to(addr, 10000, NULL, &c), 0);
      if (c) {
        CHECK_RC(rdmx_conn_send(c, "hello", 6, 5000, NULL), 0);
        t0 = now_s();
        CHECK_RC(rdmx_conn_exchange(c, &cr, 1, 5000, NULL), -RDMX_EINVAL);
        CHECK(now_s() - t0 < 1.0);
        CHECK(strstr(rdmx_last_error(), "refused by ") != NULL &&
              strstr(rdmx_last_error(), "the client runs link network, this server shm") != NULL);
        rdmx_conn_close(c);
        c = NULL;
      }
      pthread_join(t, NULL);
      srv.link = 0;
    } else {
      printf("link round skipped: %s\n", rdmx_last_error());
    }
    rdmx_core_destroy(cr);
    rdmx_port_close(r);
  }

  /* Core counts that differ: both sides refuse. */
  srv.door = 0;
  srv.mismatch = 1;
  pthread_create(&t, NULL, server_main, &srv);
  CHECK_RC(rdmx_connect_to(addr, 10000, NULL, &c), 0);
  if (c) {
    CHECK_RC(rdmx_conn_exchange(c, &ca, 1, 5000, NULL), -RDMX_EPROTO);
    CHECK(strstr(rdmx_last_error(), "sent 2 connection info(s) for 1 QP(s)") != NULL);
    rdmx_conn_close(c);
  }
  pthread_join(t, NULL);
  rdmx_listener_close(l);

  rdmx_core_destroy(ca);
  rdmx_core_destroy(cb);
  rdmx_port_close(a);
  rdmx_port_close(b);
  if (g_failures) {
    fprintf(stderr, "%d check(s) failed\n", g_failures);
    return 1;
  }
  printf("rendezvous C API: ok\n");
  return 0;
}
