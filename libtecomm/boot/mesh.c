/* SPDX-License-Identifier: Apache-2.0 */
/* mesh.c -- ranks of one host connected pairwise over Unix stream sockets
 * in the abstract namespace (no files to clean up, nothing a crashed rank
 * leaves behind).  The mesh is a communicator's host transport once it is
 * up: allgather and barrier with bounded waits, and the path on which
 * POSIX-fd handles of VMM allocations travel (SCM_RIGHTS; pidfd_getfd is
 * not used: containers refuse it).
 *
 * Abstract sockets have no permissions: any process of the host can find
 * one in /proc/net/unix and dial it.  So a rank's socket name is a keyed
 * hash of the group's secret, its tag and the rank ("\0tecomm-<32 hex>":
 * one rank's name tells nothing of another's), every connection starts
 * with the handshake of auth.c (another user's process is refused by
 * SO_PEERCRED before a byte is read, anyone without the secret by the
 * proof), and every message after it is framed and numbered (wire.h).
 * Rank i connects to every lower rank (dialling again until that rank
 * listens and accepts it, within TECOMM_TIMEOUT) and proves who it is;
 * it accepts the higher ranks. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "boot.h"
#include "te_sha256.h"
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

struct mesh {
  struct tc_boot b;
  int *fd; /* by group rank; -1 for self */
  uint32_t seq;  /* collective exchanges so far (every rank counts the same) */
  struct tc_wire_key k;
  uint64_t tag;
};

static socklen_t mesh_addr(struct sockaddr_un *a, const struct mesh *m, int rank) {
  uint64_t what[2] = {m->tag, (uint64_t)rank};
  unsigned char h[32];
  tc_auth_derive(m->k.key, "tecomm mesh name", what, sizeof what, h);
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "tecomm-");
  for (int i = 0; i < 16; i++)
    n += snprintf(a->sun_path + 1 + n, sizeof a->sun_path - 1 - (size_t)n, "%02x", h[i]);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

/* Waits for fd to be ready for events; 0 ready, -1 timed out or failed. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - tc_now_ms();
    if (left <= 0) return -1;
    struct pollfd p = {.fd = fd, .events = events};
    int k = poll(&p, 1, left > 100 ? 100 : (int)left);
    if (k > 0) return (p.revents & (POLLERR | POLLNVAL)) ? -1 : 0;
    if (k < 0 && errno != EINTR) return -1;
  }
}

/* The exchange of raw bytes under tc_msg_exchange's frames (x: the
 * frames, x->failed not NULL). */
static tecomm_result_t tc_sock_exchange(const int *fds, int n, const struct tc_msg_blocks *x,
                                        int64_t timeout_ms, const char *what) {
  const void *const *sbuf = x->sbuf;
  void *const *rbuf = x->rbuf;
  const size_t slen = x->slen, rlen = x->rlen;
  int *failed = x->failed;
  size_t *soff = calloc((size_t)n, sizeof *soff), *roff = calloc((size_t)n, sizeof *roff);
  struct pollfd *p = calloc((size_t)n, sizeof *p);
  int *idx = calloc((size_t)n, sizeof *idx);
  tecomm_result_t res = TECOMM_SUCCESS;
  if (!soff || !roff || !p || !idx) {
    res = TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", what);
    goto out;
  }
  int64_t deadline = tc_now_ms() + timeout_ms;
  for (;;) {
    int np = 0;
    for (int i = 0; i < n; i++) {
      if (fds[i] < 0) continue;
      short ev = 0;
      if (soff[i] < slen) ev |= POLLOUT;
      if (roff[i] < rlen) ev |= POLLIN;
      if (!ev) continue;
      p[np] = (struct pollfd){.fd = fds[i], .events = ev};
      idx[np++] = i;
    }
    if (np == 0) break;
    int64_t left = deadline - tc_now_ms();
    if (left <= 0) {
      *failed = idx[0];
      res = TC_ERR(TECOMM_ERR_TIMEOUT, "%s: rank %d did not answer within TECOMM_TIMEOUT (%lld ms)",
                   what, idx[0], (long long)timeout_ms);
      goto out;
    }
    int k = poll(p, (nfds_t)np, left > 100 ? 100 : (int)left);
    if (k < 0 && errno != EINTR) {
      res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: poll: %s", what, strerror(errno));
      goto out;
    }
    for (int j = 0; j < np && k > 0; j++) {
      int i = idx[j];
      if ((p[j].revents & POLLOUT) && soff[i] < slen) {
        ssize_t w = send(fds[i], (const unsigned char *)sbuf[i] + soff[i], slen - soff[i],
                         MSG_NOSIGNAL);
        if (w > 0) soff[i] += (size_t)w;
        else if (w < 0 && errno != EAGAIN && errno != EINTR) {
          *failed = i;
          res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d is gone (send: %s)", what, i,
                       strerror(errno));
          goto out;
        }
      }
      if ((p[j].revents & (POLLIN | POLLHUP | POLLERR)) && roff[i] < rlen) {
        ssize_t r = recv(fds[i], (unsigned char *)rbuf[i] + roff[i], rlen - roff[i], 0);
        if (r > 0) roff[i] += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          *failed = i;
          res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d is gone (connection closed)", what, i);
          goto out;
        }
      } else if ((p[j].revents & (POLLHUP | POLLERR)) && soff[i] < slen) {
        *failed = i;
        res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d is gone (connection closed)", what, i);
        goto out;
      }
    }
  }
out:
  free(soff);
  free(roff);
  free(p);
  free(idx);
  return res;
}

tecomm_result_t tc_msg_exchange(const int *fds, int n, uint32_t seq, const struct tc_msg_blocks *x,
                                int64_t timeout_ms, const char *what) {
  const void *const *sbuf = x->sbuf;
  void *const *rbuf = x->rbuf;
  const size_t slen = x->slen, rlen = x->rlen;
  int failed_here = -1, *failed = x->failed ? x->failed : &failed_here;
  *failed = -1;
  if (slen > TC_WIRE_MAX_BODY || rlen > TC_WIRE_MAX_BODY)
    return TC_ERR(TECOMM_ERR_INVALID, "%s: a block of %zu bytes (at most %u)", what,
                  slen > rlen ? slen : rlen, (unsigned)TC_WIRE_MAX_BODY);
  size_t sf = sbuf ? TC_WIRE_HDR + slen : 0, rf = rbuf ? TC_WIRE_HDR + rlen : 0;
  /* the send blocks are all one (every caller sends the same to all) */
  unsigned char *sm = sbuf ? malloc(sf) : NULL, *rm = rbuf ? malloc((size_t)n * rf) : NULL;
  const void **s = malloc((size_t)n * sizeof *s);
  void **r = malloc((size_t)n * sizeof *r);
  tecomm_result_t res = TECOMM_SUCCESS;
  if ((sbuf && !sm) || (rbuf && !rm) || !s || !r) {
    res = TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", what);
    goto out;
  }
  if (sm) {
    for (int i = 0; i < n; i++)
      if (fds[i] >= 0 && sbuf[i] != sbuf[0] && slen) {
        res = TC_ERR(TECOMM_ERR_INVALID, "%s: blocks differ by peer", what);
        goto out;
      }
    tc_wire_put_hdr(sm, TC_WIRE_DATA, (uint32_t)slen, seq);
    if (slen) memcpy(sm + TC_WIRE_HDR, sbuf[0], slen);
  }
  for (int i = 0; i < n; i++) {
    s[i] = sm;
    r[i] = rm ? rm + (size_t)i * rf : NULL;
  }
  const struct tc_msg_blocks frames = {sm ? s : NULL, sf, rm ? r : NULL, rf, failed};
  res = tc_sock_exchange(fds, n, &frames, timeout_ms, what);
  for (int i = 0; res == TECOMM_SUCCESS && rm && i < n; i++) {
    if (fds[i] < 0) continue;
    struct tc_wire_hdr h;
    char why[160];
    if (tc_wire_get_hdr(r[i], rf, &h, why, sizeof why) != 0 ||
        tc_wire_expect(&h, TC_WIRE_DATA, (uint32_t)rlen, seq, why, sizeof why) != 0) {
      *failed = i;
      res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d sent a bad message: %s", what, i, why);
      break;
    }
    if (rlen) memcpy(rbuf[i], (unsigned char *)r[i] + TC_WIRE_HDR, rlen);
  }
out:
  free(sm);
  free(rm);
  free(s);
  free(r);
  return res;
}

static tecomm_result_t mesh_allgather(struct tc_boot *b, const void *send, void *recv,
                                      size_t bytes) {
  struct mesh *m = (struct mesh *)b;
  int n = b->nranks;
  b->failed_peer = -1;
  const void **s = malloc((size_t)n * sizeof *s);
  void **r = malloc((size_t)n * sizeof *r);
  if (!s || !r) {
    free(s);
    free(r);
    return TC_ERR(TECOMM_ERR_NOMEM, "mesh allgather: out of host memory");
  }
  for (int i = 0; i < n; i++) {
    s[i] = send;
    r[i] = (unsigned char *)recv + (size_t)i * bytes;
  }
  memmove(r[b->rank], send, bytes);
  const struct tc_msg_blocks x = {s, bytes, r, bytes, &b->failed_peer};
  tecomm_result_t res = tc_msg_exchange(m->fd, n, m->seq++, &x, tc_timeout_ms(), "host allgather");
  free(s);
  free(r);
  return res;
}

static void mesh_close(struct tc_boot *b) {
  struct mesh *m = (struct mesh *)b;
  for (int i = 0; i < b->nranks; i++)
    if (m->fd[i] >= 0) close(m->fd[i]);
  free(m->fd);
  te_wipe(&m->k, sizeof m->k);
  free(m);
}

/* Dials group rank peer until it listens and accepts this rank's proof,
 * by the deadline; the socket goes to m->fd[peer]. */
static tecomm_result_t mesh_dial(struct mesh *m, int peer, int64_t deadline, const char *fn) {
  struct sockaddr_un a;
  socklen_t alen = mesh_addr(&a, m, peer);
  char why[192] = "it did not listen";
  for (;;) {
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (s < 0) return TC_ERR(TECOMM_ERR_SYSTEM, "%s: socket: %s", fn, strerror(errno));
    if (connect(s, (struct sockaddr *)&a, alen) == 0) {
      if (tc_auth_connect(&m->k, s, 1, m->b.rank, m->b.nranks, deadline, why, sizeof why) == 0) {
        m->fd[peer] = s;
        return TECOMM_SUCCESS;
      }
      TC_INFO("%s: rank %d -> rank %d: %s: dialling again", fn, m->b.rank, peer, why);
    } else {
      int e = errno;
      if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN) {
        close(s);
        return TC_ERR(TECOMM_ERR_SYSTEM, "%s: connect to rank %d: %s", fn, peer, strerror(e));
      }
    }
    close(s);
    if (tc_now_ms() > deadline)
      return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: rank %d did not take this rank within "
                    "TECOMM_TIMEOUT (last: %s)", fn, peer, why);
    usleep(1000);
  }
}

tecomm_result_t tc_mesh_open(const unsigned char secret[32], uint64_t tag, int me, int n,
                             struct tc_boot **out) {
  static const char fn[] = "local mesh";
  struct mesh *m = calloc(1, sizeof *m);
  int *fd = malloc((size_t)n * sizeof *fd);
  int lfd = -1;
  tecomm_result_t res = TECOMM_SUCCESS;
  if (!m || !fd) {
    free(m);
    free(fd);
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  }
  for (int i = 0; i < n; i++) fd[i] = -1;
  m->b = (struct tc_boot){.rank = me, .nranks = n, .kind = "mesh", .failed_peer = -1,
                          .allgather = mesh_allgather,
                          .barrier = tc_boot_barrier, .close = mesh_close};
  m->fd = fd;
  m->tag = tag;
  memcpy(m->k.key, secret, sizeof m->k.key);
  memcpy(m->k.ctx, "mesh", 4);
  memcpy(m->k.ctx + 4, &tag, sizeof tag);
  uint32_t n32 = (uint32_t)n;
  memcpy(m->k.ctx + 12, &n32, sizeof n32);
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  struct sockaddr_un a;
  socklen_t alen;
  if (me < n - 1) { /* someone will connect to us */
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    alen = mesh_addr(&a, m, me);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, alen) != 0 || listen(lfd, n + 16) != 0) {
      res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: cannot listen on @%s: %s", fn, a.sun_path + 1,
                   strerror(errno));
      goto fail;
    }
  }
  for (int peer = 0; peer < me; peer++)
    if ((res = mesh_dial(m, peer, deadline, fn)) != TECOMM_SUCCESS) goto fail;
  if (lfd >= 0) {
    char what[64];
    snprintf(what, sizeof what, "local mesh (rank %d of %d)", me, n);
    struct tc_auth_listen l = {.key = &m->k, .lfd = &lfd, .nlfd = 1, .unix_sock = 1,
                               .nranks = n, .lo = me + 1, .hi = n, .what = what};
    if ((res = tc_auth_accept(&l, fd, deadline)) != TECOMM_SUCCESS) goto fail;
  }
  if (lfd >= 0) close(lfd);
  *out = &m->b;
  return TECOMM_SUCCESS;
fail:
  if (lfd >= 0) close(lfd);
  mesh_close(&m->b);
  return res;
}

/* The descriptor message: a header (TC_WIRE_FD, numbered like the
 * exchanges) with the descriptor in its control message. */
tecomm_result_t tc_mesh_send_fd(struct tc_boot *b, int peer, int fd) {
  struct mesh *m = (struct mesh *)b;
  unsigned char hdr[TC_WIRE_HDR];
  tc_wire_put_hdr(hdr, TC_WIRE_FD, 0, m->seq);
  struct iovec iov = {.iov_base = hdr, .iov_len = sizeof hdr};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                       .msg_controllen = sizeof u.buf};
  struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  memcpy(CMSG_DATA(c), &fd, sizeof(int));
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  size_t sent = 0;
  for (;;) {
    ssize_t k = sendmsg(m->fd[peer], &msg, MSG_NOSIGNAL);
    if (k > 0) {
      sent += (size_t)k;
      if (sent == sizeof hdr) return TECOMM_SUCCESS;
      /* the descriptor went with the first byte; the rest plainly */
      iov.iov_base = hdr + sent;
      iov.iov_len = sizeof hdr - sent;
      msg.msg_control = NULL;
      msg.msg_controllen = 0;
      continue;
    }
    if (k < 0 && errno != EAGAIN && errno != EINTR)
      return TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d is gone (sendmsg: %s)", peer,
                    strerror(errno));
    if (wait_fd(m->fd[peer], POLLOUT, deadline) != 0)
      return TC_ERR(TECOMM_ERR_TIMEOUT, "fd exchange: rank %d did not take a handle in time", peer);
  }
}

/* Takes the descriptors of one control message: the first into *got (if
 * it is still -1), any other closed; 1 when one was more than expected. */
static int take_fds(struct msghdr *msg, int *got) {
  int extra = (msg->msg_flags & MSG_CTRUNC) != 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
    size_t nfd = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
    for (size_t i = 0; i < nfd; i++) {
      int f;
      memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
      if (*got < 0) *got = f;
      else close(f), extra = 1;
    }
  }
  return extra;
}

tecomm_result_t tc_mesh_recv_fd(struct tc_boot *b, int peer, int *fd) {
  struct mesh *m = (struct mesh *)b;
  unsigned char hdr[TC_WIRE_HDR];
  size_t got = 0;
  int rfd = -1, extra = 0;
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  tecomm_result_t res = TECOMM_SUCCESS;
  while (got < sizeof hdr) {
    memset(&u, 0, sizeof u);
    struct iovec iov = {.iov_base = hdr + got, .iov_len = sizeof hdr - got};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    ssize_t k = recvmsg(m->fd[peer], &msg, MSG_CMSG_CLOEXEC);
    if (k > 0) {
      extra |= take_fds(&msg, &rfd);
      got += (size_t)k;
      continue;
    }
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR)) {
      res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d is gone", peer);
      break;
    }
    if (wait_fd(m->fd[peer], POLLIN, deadline) != 0) {
      res = TC_ERR(TECOMM_ERR_TIMEOUT, "fd exchange: rank %d sent no handle within TECOMM_TIMEOUT",
                   peer);
      break;
    }
  }
  struct tc_wire_hdr h;
  char why[160];
  if (res == TECOMM_SUCCESS &&
      (tc_wire_get_hdr(hdr, sizeof hdr, &h, why, sizeof why) != 0 ||
       tc_wire_expect(&h, TC_WIRE_FD, 0, m->seq, why, sizeof why) != 0))
    res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d sent a bad message: %s", peer, why);
  if (res == TECOMM_SUCCESS && (rfd < 0 || extra))
    res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d sent %s", peer,
                 rfd < 0 ? "no descriptor" : "more than one descriptor");
  if (res != TECOMM_SUCCESS) {
    if (rfd >= 0) close(rfd);
    return res;
  }
  *fd = rfd;
  return TECOMM_SUCCESS;
}
