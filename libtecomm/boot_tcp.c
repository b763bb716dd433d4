/* SPDX-License-Identifier: Apache-2.0 */
/* boot_tcp.c -- the built-in rendezvous, so tools and plain C codes need
 * no MPI: TECOMM_RANK, TECOMM_NRANKS and TECOMM_ROOT=host:port.  Rank 0
 * listens on the port; the others connect (retrying until it listens,
 * within TECOMM_TIMEOUT) and say their rank.  An allgather is a gather to
 * rank 0 and its answer to everyone; a barrier is a one-byte allgather.
 * Used while a communicator starts (and for ranks on different hosts). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "boot.h"
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
                   "host:port where rank 0 listens for the environment (TCP) bootstrap")

struct tcp_boot {
  struct tc_boot b;
  int *fd;   /* rank 0: by rank (fd[0] = -1); others: fd[0] is rank 0 */
};

static tecomm_result_t tcp_allgather(struct tc_boot *b, const void *send, void *recv,
                                     size_t bytes) {
  struct tcp_boot *t = (struct tcp_boot *)b;
  int n = b->nranks;
  int64_t to = tc_timeout_ms();
  memmove((unsigned char *)recv + (size_t)b->rank * bytes, send, bytes);
  if (n == 1) return TECOMM_SUCCESS;
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
    tecomm_result_t r = tc_sock_exchange(t->fd, n, NULL, 0, rb, bytes, to, "tcp bootstrap gather");
    for (int i = 0; i < n; i++) sb[i] = recv;
    if (r == TECOMM_SUCCESS)
      r = tc_sock_exchange(t->fd, n, sb, (size_t)n * bytes, NULL, 0, to, "tcp bootstrap answer");
    free(rb);
    free(sb);
    return r;
  }
  const void *sb[1] = {send};
  void *rb[1] = {recv};
  TC_CHECK(tc_sock_exchange(t->fd, 1, sb, bytes, NULL, 0, to, "tcp bootstrap send"));
  return tc_sock_exchange(t->fd, 1, NULL, 0, rb, (size_t)n * bytes, to, "tcp bootstrap receive");
}

static tecomm_result_t tcp_barrier(struct tc_boot *b) {
  unsigned char one = 1, *all = malloc((size_t)b->nranks);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tcp bootstrap: out of host memory");
  tecomm_result_t r = tcp_allgather(b, &one, all, 1);
  free(all);
  return r;
}

static void tcp_close(struct tc_boot *b) {
  struct tcp_boot *t = (struct tcp_boot *)b;
  int n = b->rank == 0 ? b->nranks : 1;
  for (int i = 0; i < n; i++)
    if (t->fd[i] >= 0) close(t->fd[i]);
  free(t->fd);
  free(t);
}

static int split_hostport(const char *root, char *host, size_t hn, char *port, size_t pn) {
  const char *colon = strrchr(root, ':');
  if (!colon || colon == root || !colon[1]) return -1;
  size_t hl = (size_t)(colon - root);
  if (root[0] == '[' && hl >= 2 && root[hl - 1] == ']') { /* [v6]:port */
    root++;
    hl -= 2;
  }
  if (hl >= hn || strlen(colon + 1) >= pn) return -1;
  memcpy(host, root, hl);
  host[hl] = '\0';
  snprintf(port, pn, "%s", colon + 1);
  for (const char *p = port; *p; p++)
    if (*p < '0' || *p > '9') return -1;
  return 0;
}

/* Rank 0's listening socket on port, on every address (the root name may
 * resolve differently here): IPv6, or IPv4 only where there is no IPv6.
 * Returns the socket, or -1 with the error in *res. */
static int root_listen(const char *port, int n, const char *fn, tecomm_result_t *res) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE,
                           .ai_family = AF_INET6}, *ai = NULL;
  int lfd = -1;
  int e = getaddrinfo(NULL, port, &hints, &ai);
  if (e == 0) lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0) { /* no IPv6: IPv4 only */
    if (ai) freeaddrinfo(ai);
    ai = NULL;
    hints.ai_family = AF_INET;
    e = getaddrinfo(NULL, port, &hints, &ai);
    if (e == 0) lfd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  }
  int one = 1;
  if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) != 0 ||
      bind(lfd, ai->ai_addr, ai->ai_addrlen) != 0 || listen(lfd, n) != 0) {
    *res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: rank 0 cannot listen on port %s: %s", fn, port,
                  strerror(errno));
    if (lfd >= 0) close(lfd);
    lfd = -1;
  }
  if (ai) freeaddrinfo(ai);
  return lfd;
}

/* Rank 0 takes one connection from each other rank by the deadline; each
 * says its rank first, and its socket goes to t->fd[rank]. */
static tecomm_result_t root_accept(struct tcp_boot *t, int lfd, int64_t deadline,
                                   const char *root, const char *fn) {
  int n = t->b.nranks, one = 1;
  for (int k = 1; k < n; k++) {
    struct pollfd p = {.fd = lfd, .events = POLLIN};
    int64_t left = deadline - tc_now_ms();
    int pr = left > 0 ? poll(&p, 1, (int)left) : 0;
    if (pr <= 0) {
      if (pr < 0 && errno == EINTR) {
        k--;
        continue;
      }
      return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: %d rank(s) did not connect to %s within TECOMM_TIMEOUT",
                    fn, n - k, root);
    }
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) {
      k--;
      continue;
    }
    int32_t who = -1;
    void *rb[1] = {&who};
    int fds[1] = {s};
    if (tc_sock_exchange(fds, 1, NULL, 0, rb, sizeof who, deadline - tc_now_ms(),
                         "tcp bootstrap hello") != TECOMM_SUCCESS ||
        who <= 0 || who >= n || t->fd[who] >= 0) {
      close(s);
      return TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: a connection to %s did not name a new rank (%d)",
                    fn, root, (int)who);
    }
    (void)setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    t->fd[who] = s;
  }
  return TECOMM_SUCCESS;
}

/* A rank other than 0 connects to host:port (retrying until rank 0
 * listens, by the deadline) and says its rank. */
static tecomm_result_t peer_connect(struct tcp_boot *t, const char *host, const char *port,
                                    int64_t deadline, const char *root, const char *fn) {
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_family = AF_UNSPEC}, *ai = NULL;
  int e = getaddrinfo(host, port, &hints, &ai);
  if (e != 0)
    return TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: cannot resolve %s: %s", fn, host, gai_strerror(e));
  for (;;) {
    int s = -1;
    for (struct addrinfo *a = ai; a; a = a->ai_next) {
      s = socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s >= 0 && connect(s, a->ai_addr, a->ai_addrlen) == 0) break;
      if (s >= 0) close(s);
      s = -1;
    }
    if (s >= 0) {
      int one = 1;
      (void)setsockopt(s, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      int fl = fcntl(s, F_GETFL);
      (void)fcntl(s, F_SETFL, fl | O_NONBLOCK);
      t->fd[0] = s;
      break;
    }
    if (tc_now_ms() > deadline) {
      freeaddrinfo(ai);
      return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: rank 0 did not listen on %s within TECOMM_TIMEOUT",
                    fn, root);
    }
    usleep(10000);
  }
  freeaddrinfo(ai);
  int32_t who = t->b.rank;
  const void *sb[1] = {&who};
  return tc_sock_exchange(t->fd, 1, sb, sizeof who, NULL, 0, deadline - tc_now_ms(),
                          "tcp bootstrap hello");
}

tecomm_result_t tc_boot_tcp_open(const char *root, int *rank, int *nranks, struct tc_boot **out) {
  static const char fn[] = "tecomm_comm_init (TCP bootstrap)";
  if (*rank < 0) *rank = (int)tecore_tunable_int(&tc_tun_rank);
  if (*nranks < 0) *nranks = (int)tecore_tunable_int(&tc_tun_nranks);
  if (!root || !root[0]) root = tecore_tunable_str(&tc_tun_root);
  TC_ARG(*nranks >= 1, "%s: nranks unknown: pass it or set TECOMM_NRANKS", fn);
  TC_ARG(*rank >= 0 && *rank < *nranks, "%s: rank %d is not in [0, %d): pass it or set TECOMM_RANK",
         fn, *rank, *nranks);
  char host[256], port[16];
  if (*nranks > 1)
    TC_ARG(root && split_hostport(root, host, sizeof host, port, sizeof port) == 0,
           "%s: TECOMM_ROOT \"%s\" is not host:port", fn, root ? root : "");
  struct tcp_boot *t = calloc(1, sizeof *t);
  int n = *nranks;
  if (t) t->fd = malloc((size_t)n * sizeof *t->fd);
  if (!t || !t->fd) {
    free(t);
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  }
  for (int i = 0; i < n; i++) t->fd[i] = -1;
  t->b = (struct tc_boot){.rank = *rank, .nranks = n, .kind = "tcp", .allgather = tcp_allgather,
                          .barrier = tcp_barrier, .close = tcp_close};
  tecomm_result_t res = TECOMM_SUCCESS;
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  if (n > 1 && *rank == 0) {
    int lfd = root_listen(port, n, fn, &res);
    if (lfd >= 0) {
      res = root_accept(t, lfd, deadline, root, fn);
      close(lfd);
    }
  } else if (n > 1) {
    res = peer_connect(t, host, port, deadline, root, fn);
  }
  if (res != TECOMM_SUCCESS) {
    tcp_close(&t->b);
    return res;
  }
  *out = &t->b;
  return TECOMM_SUCCESS;
}
