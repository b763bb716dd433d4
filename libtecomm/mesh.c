/* SPDX-License-Identifier: Apache-2.0 */
/* mesh.c -- ranks of one host connected pairwise over Unix stream sockets
 * in the abstract namespace (no files to clean up, nothing a crashed rank
 * leaves behind).  The mesh is a communicator's host transport once it is
 * up: allgather and barrier with bounded waits, and the path on which
 * POSIX-fd handles of VMM allocations travel (SCM_RIGHTS; pidfd_getfd is
 * not used: containers refuse it).
 *
 * Socket names: "\0tecomm-<tag>-<rank>", where tag is unique per
 * communicator on the host (a random nonce of rank 0, mixed with the split
 * sequence for children).  Rank i connects to every lower rank (retrying
 * until that rank listens, within TECOMM_TIMEOUT) and says who it is;
 * it accepts the higher ranks. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "boot.h"
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
};

static void set_nonblock(int fd) {
  int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) (void)fcntl(fd, F_SETFL, fl | O_NONBLOCK);
}

static socklen_t mesh_addr(struct sockaddr_un *a, uint64_t tag, int rank) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "tecomm-%016llx-%d",
                   (unsigned long long)tag, rank);
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

/* Reads or writes exactly len bytes on a nonblocking socket by deadline. */
static int io_full(int fd, void *buf, size_t len, int wr, int64_t deadline) {
  unsigned char *p = buf;
  while (len) {
    ssize_t k = wr ? send(fd, p, len, MSG_NOSIGNAL) : recv(fd, p, len, 0);
    if (k > 0) {
      p += k;
      len -= (size_t)k;
      continue;
    }
    if (k == 0 && !wr) return -1; /* peer closed */
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (wait_fd(fd, wr ? POLLOUT : POLLIN, deadline) != 0) return -1;
  }
  return 0;
}

tecomm_result_t tc_sock_exchange(const int *fds, int n, const void *const *sbuf, size_t slen,
                                 void *const *rbuf, size_t rlen, int64_t timeout_ms,
                                 const char *what) {
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
          res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d is gone (send: %s)", what, i,
                       strerror(errno));
          goto out;
        }
      }
      if ((p[j].revents & (POLLIN | POLLHUP | POLLERR)) && roff[i] < rlen) {
        ssize_t r = recv(fds[i], (unsigned char *)rbuf[i] + roff[i], rlen - roff[i], 0);
        if (r > 0) roff[i] += (size_t)r;
        else if (r == 0 || (errno != EAGAIN && errno != EINTR)) {
          res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d is gone (connection closed)", what, i);
          goto out;
        }
      } else if ((p[j].revents & (POLLHUP | POLLERR)) && soff[i] < slen) {
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

static tecomm_result_t mesh_allgather(struct tc_boot *b, const void *send, void *recv,
                                      size_t bytes) {
  struct mesh *m = (struct mesh *)b;
  int n = b->nranks;
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
  tecomm_result_t res = tc_sock_exchange(m->fd, n, s, bytes, r, bytes, tc_timeout_ms(),
                                         "host allgather");
  free(s);
  free(r);
  return res;
}

static tecomm_result_t mesh_barrier(struct tc_boot *b) {
  unsigned char one = 1, *all = malloc((size_t)b->nranks);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "mesh barrier: out of host memory");
  tecomm_result_t r = mesh_allgather(b, &one, all, 1);
  free(all);
  return r;
}

static void mesh_close(struct tc_boot *b) {
  struct mesh *m = (struct mesh *)b;
  for (int i = 0; i < b->nranks; i++)
    if (m->fd[i] >= 0) close(m->fd[i]);
  free(m->fd);
  free(m);
}

tecomm_result_t tc_mesh_open(uint64_t tag, int me, int n, struct tc_boot **out) {
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
  m->b = (struct tc_boot){.rank = me, .nranks = n, .kind = "mesh", .allgather = mesh_allgather,
                          .barrier = mesh_barrier, .close = mesh_close};
  m->fd = fd;
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  struct sockaddr_un a;
  socklen_t alen;
  if (me < n - 1) { /* someone will connect to us */
    lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    alen = mesh_addr(&a, tag, me);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, alen) != 0 || listen(lfd, n) != 0) {
      res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: cannot listen on @%s: %s", fn, a.sun_path + 1,
                   strerror(errno));
      goto fail;
    }
  }
  for (int peer = 0; peer < me; peer++) {
    alen = mesh_addr(&a, tag, peer);
    for (;;) {
      int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
      if (s < 0) {
        res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: socket: %s", fn, strerror(errno));
        goto fail;
      }
      if (connect(s, (struct sockaddr *)&a, alen) == 0) {
        fd[peer] = s;
        break;
      }
      int e = errno;
      close(s);
      if (e != ECONNREFUSED && e != ENOENT && e != EAGAIN) {
        res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: connect to rank %d: %s", fn, peer, strerror(e));
        goto fail;
      }
      if (tc_now_ms() > deadline) {
        res = TC_ERR(TECOMM_ERR_TIMEOUT, "%s: rank %d did not listen within TECOMM_TIMEOUT", fn,
                     peer);
        goto fail;
      }
      usleep(1000);
    }
    set_nonblock(fd[peer]);
    int32_t who = me;
    if (io_full(fd[peer], &who, sizeof who, 1, deadline) != 0) {
      res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d closed the connection", fn, peer);
      goto fail;
    }
  }
  for (int k = me + 1; k < n; k++) {
    if (wait_fd(lfd, POLLIN, deadline) != 0) {
      res = TC_ERR(TECOMM_ERR_TIMEOUT, "%s: %d higher rank(s) did not connect within TECOMM_TIMEOUT",
                   fn, n - k);
      goto fail;
    }
    int s = accept4(lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (s < 0) {
      if (errno == EAGAIN || errno == EINTR) {
        k--;
        continue;
      }
      res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: accept: %s", fn, strerror(errno));
      goto fail;
    }
    int32_t who = -1;
    if (io_full(s, &who, sizeof who, 0, deadline) != 0 || who <= me || who >= n || fd[who] >= 0) {
      close(s);
      res = TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: a connection did not name a new higher rank", fn);
      goto fail;
    }
    fd[who] = s;
  }
  if (lfd >= 0) close(lfd);
  *out = &m->b;
  return TECOMM_SUCCESS;
fail:
  if (lfd >= 0) close(lfd);
  mesh_close(&m->b);
  return res;
}

tecomm_result_t tc_mesh_send_fd(struct tc_boot *b, int peer, int fd) {
  struct mesh *m = (struct mesh *)b;
  unsigned char byte = 'F';
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
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
  for (;;) {
    ssize_t k = sendmsg(m->fd[peer], &msg, MSG_NOSIGNAL);
    if (k == 1) return TECOMM_SUCCESS;
    if (k < 0 && errno != EAGAIN && errno != EINTR)
      return TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d is gone (sendmsg: %s)", peer,
                    strerror(errno));
    if (wait_fd(m->fd[peer], POLLOUT, deadline) != 0)
      return TC_ERR(TECOMM_ERR_TIMEOUT, "fd exchange: rank %d did not take a handle in time", peer);
  }
}

tecomm_result_t tc_mesh_recv_fd(struct tc_boot *b, int peer, int *fd) {
  struct mesh *m = (struct mesh *)b;
  unsigned char byte = 0;
  struct iovec iov = {.iov_base = &byte, .iov_len = 1};
  union {
    struct cmsghdr h;
    char buf[CMSG_SPACE(sizeof(int))];
  } u;
  int64_t deadline = tc_now_ms() + tc_timeout_ms();
  for (;;) {
    memset(&u, 0, sizeof u);
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof u.buf};
    ssize_t k = recvmsg(m->fd[peer], &msg, MSG_CMSG_CLOEXEC);
    if (k == 1) {
      struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
      if (byte != 'F' || !c || c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
        return TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d sent no descriptor", peer);
      memcpy(fd, CMSG_DATA(c), sizeof(int));
      return TECOMM_SUCCESS;
    }
    if (k == 0 || (k < 0 && errno != EAGAIN && errno != EINTR))
      return TC_ERR(TECOMM_ERR_BOOTSTRAP, "fd exchange: rank %d is gone", peer);
    if (wait_fd(m->fd[peer], POLLIN, deadline) != 0)
      return TC_ERR(TECOMM_ERR_TIMEOUT, "fd exchange: rank %d sent no handle within TECOMM_TIMEOUT",
                    peer);
  }
}
