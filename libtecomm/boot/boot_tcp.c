/* SPDX-License-Identifier: Apache-2.0 */
/* boot_tcp.c -- the built-in rendezvous, so tools and plain C codes need
 * no MPI: TECOMM_RANK, TECOMM_NRANKS and TECOMM_ROOT=host:port.  Rank 0
 * listens on the port, at the address of TECOMM_ROOT's host (or of
 * TECOMM_LISTEN), never on every interface unless told; the others
 * connect (dialling again until it listens and accepts them, within
 * TECOMM_TIMEOUT) and prove their rank with the job's secret
 * (TECOMM_SECRET or TECOMM_SECRET_FILE: auth.c); a connection that cannot
 * is closed and logged, and rank 0 goes on waiting.  An allgather is a
 * gather to rank 0 and its answer to everyone, framed (wire.h); a barrier
 * is a one-byte allgather.  Used while a communicator starts (and for
 * ranks on different hosts). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "boot.h"
#include "te_sha256.h"
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

/* The environment bootstrap's tunables (read by tc_boot_tcp_open). */
TECORE_TUNABLE_INT(tc_tun_rank, "TECOMM_RANK", -1, -1, 1048575,
                   "this process's rank, for the environment (TCP) bootstrap")
TECORE_TUNABLE_INT(tc_tun_nranks, "TECOMM_NRANKS", -1, -1, 1048576,
                   "the number of ranks, for the environment (TCP) bootstrap")
TECORE_TUNABLE_STR(tc_tun_root, "TECOMM_ROOT", "", NULL,
                   "host:port where rank 0 listens for the environment (TCP) bootstrap (port "
                   "1..65535)")
TECORE_TUNABLE_STR(tc_tun_listen, "TECOMM_LISTEN", "", NULL,
                   "the address rank 0's TCP rendezvous listens on (its port is TECOMM_ROOT's); "
                   "empty: the address of TECOMM_ROOT's host; \"*\": every interface")

struct tcp_boot {
  struct tc_boot b;
  int *fd;   /* rank 0: by rank (fd[0] = -1); others: fd[0] is rank 0 */
  uint32_t seq;
  struct tc_wire_key k;
};

static tecomm_result_t tcp_allgather(struct tc_boot *b, const void *send, void *recv,
                                     size_t bytes) {
  struct tcp_boot *t = (struct tcp_boot *)b;
  int n = b->nranks;
  int64_t to = tc_timeout_ms();
  b->failed_peer = -1;
  memmove((unsigned char *)recv + (size_t)b->rank * bytes, send, bytes);
  if (n == 1) return TECOMM_SUCCESS;
  uint32_t seq = t->seq++;
  if ((size_t)n * bytes > TC_WIRE_MAX_BODY)
    return TC_ERR(TECOMM_ERR_INVALID, "tcp bootstrap: an allgather of %d x %zu bytes", n, bytes);
  if (b->rank == 0) {
    void **rb = malloc((size_t)n * sizeof *rb);
    const void **sb = malloc((size_t)n * sizeof *sb);
    if (!rb || !sb) {
      free(rb);
      free(sb);
      return TC_ERR(TECOMM_ERR_NOMEM, "tcp bootstrap: out of host memory");
    }
    for (int i = 0; i < n; i++) rb[i] = (unsigned char *)recv + (size_t)i * bytes;
    /* gather first, then answer with the whole: two rounds */
    tecomm_result_t r =
        tc_msg_exchange(t->fd, n, seq, &(struct tc_msg_blocks){NULL, 0, rb, bytes, &b->failed_peer},
                        to, "tcp bootstrap gather");
    for (int i = 0; i < n; i++) sb[i] = recv;
    if (r == TECOMM_SUCCESS)
      r = tc_msg_exchange(t->fd, n, seq,
                          &(struct tc_msg_blocks){sb, (size_t)n * bytes, NULL, 0, &b->failed_peer},
                          to, "tcp bootstrap answer");
    free(rb);
    free(sb);
    return r;
  }
  /* rank 0's answer holds this rank's block too: it must be what was sent */
  unsigned char *mine = malloc(bytes ? bytes : 1);
  if (!mine) return TC_ERR(TECOMM_ERR_NOMEM, "tcp bootstrap: out of host memory");
  memcpy(mine, send, bytes);
  const void *sb[1] = {mine};
  void *rb[1] = {recv};
  /* this rank meets rank 0 alone: fds[0] is rank 0 (failed_peer right as it is) */
  tecomm_result_t r =
      tc_msg_exchange(t->fd, 1, seq, &(struct tc_msg_blocks){sb, bytes, NULL, 0, &b->failed_peer},
                      to, "tcp bootstrap send");
  if (r == TECOMM_SUCCESS)
    r = tc_msg_exchange(t->fd, 1, seq,
                        &(struct tc_msg_blocks){NULL, 0, rb, (size_t)n * bytes, &b->failed_peer},
                        to, "tcp bootstrap receive");
  if (r == TECOMM_SUCCESS && memcmp((unsigned char *)recv + (size_t)b->rank * bytes, mine, bytes))
    r = TC_ERR(TECOMM_ERR_BOOTSTRAP, "tcp bootstrap: rank 0's answer does not hold this rank's block");
  free(mine);
  return r;
}

static void tcp_close(struct tc_boot *b) {
  struct tcp_boot *t = (struct tcp_boot *)b;
  int n = b->rank == 0 ? b->nranks : 1;
  for (int i = 0; i < n; i++)
    if (t->fd[i] >= 0) close(t->fd[i]);
  free(t->fd);
  te_wipe(t, sizeof *t);
  free(t);
}

/* root as host and port: 0, or -1 with why (a phrase after root). */
static int split_hostport(const char *root, char *host, size_t hn, char *port, size_t pn,
                          char *why, size_t wl) {
  const char *colon = strrchr(root, ':');
  snprintf(why, wl, "is not host:port");
  if (!colon || colon == root || !colon[1]) return -1;
  size_t hl = (size_t)(colon - root);
  if (root[0] == '[' && hl >= 2 && root[hl - 1] == ']') { /* [v6]:port */
    root++;
    hl -= 2;
  }
  if (hl >= hn) return -1;
  memcpy(host, root, hl);
  host[hl] = '\0';
  /* a port getaddrinfo would take modulo 65536, or as a service name, is
   * not the one the user meant: only 1..65535 in decimal */
  unsigned long v = 0;
  const char *p = colon + 1;
  for (; *p >= '0' && *p <= '9' && v <= 65535; p++) v = v * 10 + (unsigned long)(*p - '0');
  if (*p || v < 1 || v > 65535) {
    snprintf(why, wl, "has port \"%s\": a port is a number in 1..65535", colon + 1);
    return -1;
  }
  snprintf(port, pn, "%lu", v);
  return 0;
}

#define TCP_MAX_LISTEN 8

/* Rank 0's listening sockets on port: one per address of host (that of
 * TECOMM_ROOT, or TECOMM_LISTEN; "*" every interface), so that ranks
 * dialling any of them find one.  Returns how many (lfd[]), or 0 with
 * the error in *res. */
static int root_listen(const char *host, const char *port, int n, int *lfd, const char *fn,
                       tecomm_result_t *res) {
  const char *l = tecore_tunable_str(&tc_tun_listen);
  if (l && l[0]) host = l;
  int any = strcmp(host, "*") == 0;
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE,
                           .ai_family = any ? AF_INET6 : AF_UNSPEC}, *ai = NULL;
  int e = getaddrinfo(any ? NULL : host, port, &hints, &ai);
  if (e != 0 && any) { /* no IPv6: IPv4 only */
    hints.ai_family = AF_INET;
    e = getaddrinfo(NULL, port, &hints, &ai);
  }
  if (e != 0) {
    *res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank 0 cannot resolve the address to listen on, "
                  "\"%s\" (TECOMM_ROOT's host, or TECOMM_LISTEN): %s", fn, host, gai_strerror(e));
    return 0;
  }
  int nl = 0, err = 0;
  for (struct addrinfo *a = ai; a && nl < TCP_MAX_LISTEN; a = a->ai_next) {
    int s = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
    if (s >= 0 && setsockopt(s, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) == 0 &&
        bind(s, a->ai_addr, a->ai_addrlen) == 0 && listen(s, n + 16) == 0) {
      lfd[nl++] = s;
      continue;
    }
    err = errno;
    if (s >= 0) close(s);
  }
  freeaddrinfo(ai);
  if (nl == 0)
    *res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: rank 0 cannot listen on %s port %s: %s (TECOMM_LISTEN "
                  "names another address)", fn, host, port, strerror(err));
  else
    TC_INFO("%s: rank 0 listens on %d address(es) of %s, port %s", fn, nl, host, port);
  return nl;
}

/* A rank other than 0 connects to host:port (dialling again until rank 0
 * listens and accepts its proof, by the deadline). */
static tecomm_result_t peer_connect(struct tcp_boot *t, const char *host, const char *port,
                                    int64_t deadline, const char *root, const char *fn) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC}, *ai = NULL;
  int e = getaddrinfo(host, port, &hints, &ai);
  if (e != 0)
    return TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: cannot resolve %s: %s", fn, host, gai_strerror(e));
  char why[192] = "nothing listens there";
  for (;;) {
    for (struct addrinfo *a = ai; a && t->fd[0] < 0; a = a->ai_next) {
      int s = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s < 0) continue;
      if (connect(s, a->ai_addr, a->ai_addrlen) == 0) {
        if (tc_auth_connect(&t->k, s, 0, t->b.rank, t->b.nranks, deadline, why, sizeof why) == 0) {
          int one = 1;
          (void)setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
          t->fd[0] = s;
          break;
        }
        TC_INFO("%s: rank %d: %s: dialling again", fn, t->b.rank, why);
      }
      close(s);
    }
    if (t->fd[0] >= 0) break;
    if (tc_now_ms() > deadline) {
      freeaddrinfo(ai);
      return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: rank 0 did not listen on %s and accept this rank "
                    "within TECOMM_TIMEOUT (%lld ms) (last: %s)", fn, root,
                    (long long)tc_timeout_ms(), why);
    }
    usleep(10000);
  }
  freeaddrinfo(ai);
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_boot_tcp_open(const char *root, int *rank, int *nranks, struct tc_boot **out) {
  static const char fn[] = "tecomm_comm_init (TCP bootstrap)";
  if (*rank < 0) *rank = (int)tecore_tunable_int(&tc_tun_rank);
  if (*nranks < 0) *nranks = (int)tecore_tunable_int(&tc_tun_nranks);
  if (!root || !root[0]) root = tecore_tunable_str(&tc_tun_root);
  TC_ARG(*nranks >= 1, "%s: nranks unknown: pass it or set TECOMM_NRANKS", fn);
  TC_ARG(*rank >= 0 && *rank < *nranks, "%s: rank %d is not in [0, %d): pass it or set TECOMM_RANK",
         fn, *rank, *nranks);
  char host[256], port[16], why[128];
  if (*nranks > 1)
    TC_ARG(root && split_hostport(root, host, sizeof host, port, sizeof port, why, sizeof why) == 0,
           "%s: TECOMM_ROOT \"%s\" %s", fn, root ? root : "", root ? why : "is not host:port");
  struct tcp_boot *t = calloc(1, sizeof *t);
  int n = *nranks;
  if (t) t->fd = malloc((size_t)n * sizeof *t->fd);
  if (!t || !t->fd) {
    free(t);
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  }
  for (int i = 0; i < n; i++) t->fd[i] = -1;
  t->b = (struct tc_boot){.rank = *rank, .nranks = n, .kind = "tcp", .failed_peer = -1,
                          .allgather = tcp_allgather,
                          .barrier = tc_boot_barrier, .close = tcp_close};
  tecomm_result_t res = TECOMM_SUCCESS;
  if (n > 1) { /* one rank meets no one: it needs no secret */
    res = tc_auth_env_key(t->b.key, &t->b.keyed, fn);
    memcpy(t->k.key, t->b.key, sizeof t->k.key);
    uint32_t ctx[4] = {0x00706374u /* "tcp" */, (uint32_t)n, (uint32_t)atoi(port), 0};
    memcpy(t->k.ctx, ctx, sizeof t->k.ctx);
  }
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  if (res == TECOMM_SUCCESS && n > 1 && *rank == 0) {
    int lfd[TCP_MAX_LISTEN];
    int nl = root_listen(host, port, n, lfd, fn, &res);
    if (nl > 0) {
      char what[300];
      snprintf(what, sizeof what, "TCP rendezvous on %s", root);
      struct tc_auth_listen l = {.key = &t->k, .lfd = lfd, .nlfd = nl, .unix_sock = 0,
                                 .nranks = n, .lo = 1, .hi = n, .what = what};
      res = tc_auth_accept(&l, t->fd, deadline);
      for (int i = 0; i < nl; i++) close(lfd[i]);
      for (int i = 1; res == TECOMM_SUCCESS && i < n; i++) {
        int one = 1;
        (void)setsockopt(t->fd[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      }
    }
  } else if (res == TECOMM_SUCCESS && n > 1) {
    res = peer_connect(t, host, port, deadline, root, fn);
  }
  if (res != TECOMM_SUCCESS) {
    tcp_close(&t->b);
    return res;
  }
  *out = &t->b;
  return TECOMM_SUCCESS;
}
