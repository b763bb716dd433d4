/* SPDX-License-Identifier: Apache-2.0 */
/* auth.c -- who may join a communicator (libtecomm(7), SECURITY): the
 * secrets, and the handshake that opens every connection of the TCP
 * rendezvous and of the local mesh (wire.h has the messages).
 *
 * Secrets.  A communicator's secret (32 bytes) comes from rank 0: a seed
 * it draws from the kernel, carried to the others by the bootstrap in use
 * (comm.c).  The TCP rendezvous needs one before any rank has spoken:
 * TECOMM_SECRET, or the file TECOMM_SECRET_FILE names (mode 0600 or
 * stricter, owned by this user, under directories no one else can write
 * to); its key is SHA-256 of that text, and the
 * communicator's secret is then an HMAC of rank 0's seed under it, so the
 * seed crossing the network tells an eavesdropper nothing.
 *
 * The listener's side (tc_auth_accept) is a poll loop over the listening
 * sockets and every connection that has not proved itself yet, so no
 * stranger can hold it up: a stranger that sends nothing keeps a slot
 * until slots run out, then the oldest is dropped (a real rank whose
 * connection was dropped dials again).  A stranger is closed and logged
 * at WARN with its address; the loop goes on until the real ranks have
 * come or TECOMM_TIMEOUT is up.  Unix-socket peers of another user are
 * refused by SO_PEERCRED before a byte of theirs is read. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "boot.h"
#include "wire.h"
#include "te_sha256.h"
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

TECORE_TUNABLE_STR(tc_tun_secret, "TECOMM_SECRET", "", NULL,
                   "the TCP rendezvous's shared secret (text, at least 32 characters, 6 of them "
                   "distinct: e.g. 64 hex digits from /dev/urandom); every rank of the job must "
                   "have the same; "
                   "te-info shows only whether it is set")
TECORE_TUNABLE_STR(tc_tun_secret_file, "TECOMM_SECRET_FILE", "", NULL,
                   "a file holding the TCP rendezvous's secret (a regular file of mode 0600, owned "
                   "by the user, under directories of the user or root that others cannot write); "
                   "read when TECOMM_SECRET is unset")
TECORE_TUNABLE_INT(tc_tun_insecure, "TECOMM_INSECURE", 0, 0, 1,
                   "1: the TCP rendezvous may run without a secret (any process that reaches its "
                   "port can join: only on a network and host whose every user is trusted)")

#define TC_SECRET_MIN 32    /* characters of TECOMM_SECRET (128 bits as hex) */
#define TC_SECRET_DISTINCT 6 /* distinct bytes in it: 32 random hex digits have fewer in
                              * about one draw in 3e12; 32 blanks have 1 */
#define TC_SECRET_MAX 4096
#define TC_PENDING_MAX 32   /* connections proving themselves at once */
#define TC_WARN_MAX 20      /* strangers logged per listener, then a count */

static const char how[] =
    "set one secret for every rank, e.g. export TECOMM_SECRET=$(head -c 32 /dev/urandom | od -An "
    "-tx1 | tr -d ' \\n') in the launching shell (or TECOMM_SECRET_FILE=a file of mode 0600), or "
    "TECOMM_INSECURE=1 on a network and host whose every user is trusted";

int tc_random_bytes(void *p, size_t n) {
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  unsigned char *b = p;
  size_t got = 0;
  while (got < n) {
    ssize_t k = read(fd, b + got, n - got);
    if (k <= 0 && !(k < 0 && errno == EINTR)) break;
    if (k > 0) got += (size_t)k;
  }
  close(fd);
  return got == n ? 0 : -1;
}

/* A directory above the secret file: this user's or root's, and not
 * writable by others unless sticky (as /tmp is), so that no one else can
 * put another file or directory in the secret's place (the rule ssh
 * applies to its key files).  0, or -1 with why. */
static int dir_safe(int dfd, const char *name, char *why, size_t wl) {
  struct stat st;
  if (fstat(dfd, &st) != 0) {
    snprintf(why, wl, "directory %s: %s", name, strerror(errno));
    return -1;
  }
  if (st.st_uid != 0 && st.st_uid != geteuid()) {
    snprintf(why, wl, "lies under directory %s of uid %u (neither this user nor root)", name,
             (unsigned)st.st_uid);
    return -1;
  }
  if ((st.st_mode & 022) && !(st.st_mode & S_ISVTX)) {
    snprintf(why, wl, "lies under directory %s of mode %04o: other users may replace the file",
             name, (unsigned)(st.st_mode & 07777));
    return -1;
  }
  return 0;
}

/* The directory real (an absolute path without links) opened from "/"
 * one component at a time with O_NOFOLLOW, each checked (dir_safe) on
 * its own descriptor: a link swapped in after realpath is refused, not
 * followed.  An O_PATH descriptor (search permission is enough), or -1
 * with why. */
static int walk_dirs(char *real, char *why, size_t wl) {
  int dfd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) return snprintf(why, wl, "cannot be reached: /: %s", strerror(errno)), -1;
  if (dir_safe(dfd, "/", why, wl) != 0) return close(dfd), -1;
  char *c = real + 1;
  while (*c) {
    char *end = strchr(c, '/');
    if (!end) end = c + strlen(c);
    char was = *end;
    *end = '\0';   /* real up to here names this directory in messages */
    int nfd = openat(dfd, c, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    close(dfd);
    if (nfd < 0) snprintf(why, wl, "lies under directory %s, which cannot be opened: %s", real,
                          strerror(errno));
    else if (dir_safe(nfd, real, why, wl) != 0) close(nfd), nfd = -1;
    *end = was;
    if (nfd < 0) return -1;
    dfd = nfd;
    c = was ? end + 1 : end;
  }
  return dfd;
}

/* Opens the file path names without blocking (a FIFO's open would wait
 * for a writer, and TECOMM_TIMEOUT would not apply) and without
 * following a link of its own; the directories above it may be links,
 * but where they lead must be safe (dir_safe, on the real path).  The
 * descriptor, or -1 with why (a phrase after the file's name). */
static int open_secret(const char *path, char *why, size_t wl) {
  const char *slash = strrchr(path, '/'), *base = slash ? slash + 1 : path;
  char dir[PATH_MAX], real[PATH_MAX];
  if (!base[0]) return snprintf(why, wl, "names a directory, not a file"), -1;
  if (!slash) snprintf(dir, sizeof dir, ".");
  else snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
  if (!realpath(dir, real))
    return snprintf(why, wl, "lies under directory %s, which cannot be resolved: %s", dir,
                    strerror(errno)), -1;
  int dfd = walk_dirs(real, why, wl);
  if (dfd < 0) return -1;
  int fd = openat(dfd, base, O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0 && errno == ELOOP) snprintf(why, wl, "is a symbolic link (name the file itself)");
  else if (fd < 0) snprintf(why, wl, "cannot be opened: %s", strerror(errno));
  close(dfd);
  return fd;
}

/* The secret's text from TECOMM_SECRET_FILE: its type, owner and mode
 * checked on the open file (no race with a rename), trailing white space
 * cut. */
static tecomm_result_t secret_file(const char *path, char *text, size_t cap, const char *fn) {
  char why[PATH_MAX + 128];
  int fd = open_secret(path, why, sizeof why);
  if (fd < 0)
    return TC_ERR(TECOMM_ERR_INVALID, "%s: TECOMM_SECRET_FILE \"%s\" %s", fn, path, why);
  struct stat st;
  tecomm_result_t r = TECOMM_SUCCESS;
  if (fstat(fd, &st) != 0)
    r = TC_ERR(TECOMM_ERR_INVALID, "%s: TECOMM_SECRET_FILE \"%s\": %s", fn, path, strerror(errno));
  else if (!S_ISREG(st.st_mode))
    r = TC_ERR(TECOMM_ERR_INVALID, "%s: TECOMM_SECRET_FILE \"%s\" is not a regular file", fn, path);
  else if (st.st_uid != geteuid())
    r = TC_ERR(TECOMM_ERR_INVALID,
               "%s: TECOMM_SECRET_FILE \"%s\" belongs to uid %u, not to this user (uid %u)", fn,
               path, (unsigned)st.st_uid, (unsigned)geteuid());
  else if (st.st_mode & 077)
    r = TC_ERR(TECOMM_ERR_INVALID,
               "%s: TECOMM_SECRET_FILE \"%s\" has mode %04o: other users may read it (chmod 600)",
               fn, path, (unsigned)(st.st_mode & 07777));
  ssize_t k = 0;
  if (r == TECOMM_SUCCESS) {
    k = read(fd, text, cap - 1);
    if (k < 0)
      r = TC_ERR(TECOMM_ERR_INVALID, "%s: TECOMM_SECRET_FILE \"%s\": %s", fn, path,
                 strerror(errno));
    else if ((size_t)k == cap - 1)
      r = TC_ERR(TECOMM_ERR_INVALID, "%s: TECOMM_SECRET_FILE \"%s\" is longer than %zu bytes", fn,
                 path, cap - 2);
  }
  close(fd);
  if (r != TECOMM_SUCCESS) return r;
  while (k > 0 && (text[k - 1] == '\n' || text[k - 1] == '\r' || text[k - 1] == ' ' ||
                   text[k - 1] == '\t'))
    k--;
  text[k] = '\0';
  return TECOMM_SUCCESS;
}

/* How many different byte values s[0..n) holds. */
static int distinct_bytes(const char *s, size_t n) {
  unsigned char seen[256] = {0};
  int d = 0;
  for (size_t i = 0; i < n; i++)
    if (!seen[(unsigned char)s[i]]) seen[(unsigned char)s[i]] = 1, d++;
  return d;
}

tecomm_result_t tc_auth_env_key(unsigned char key[32], int *keyed, const char *fn) {
  char text[TC_SECRET_MAX];
  const char *s = tecore_tunable_str(&tc_tun_secret), *path = tecore_tunable_str(&tc_tun_secret_file);
  const char *from = "TECOMM_SECRET";
  *keyed = 0;
  memset(key, 0, 32);
  if (s && s[0]) {
    snprintf(text, sizeof text, "%s", s);
  } else if (path && path[0]) {
    TC_CHECK(secret_file(path, text, sizeof text, fn));
    from = "TECOMM_SECRET_FILE";
  } else if (tecore_tunable_int(&tc_tun_insecure)) {
    TC_WARN("%s: no secret, TECOMM_INSECURE=1: any process that reaches the rendezvous port can "
            "join this job", fn);
    return TECOMM_SUCCESS;
  } else {
    return TC_ERR(TECOMM_ERR_INVALID,
                  "%s: the TCP rendezvous needs a secret, so that no other process can join "
                  "the job: %s", fn, how);
  }
  size_t len = strlen(text);
  int distinct = distinct_bytes(text, len);
  if (len < TC_SECRET_MIN || distinct < TC_SECRET_DISTINCT) {
    te_wipe(text, sizeof text);
    if (len < TC_SECRET_MIN)
      return TC_ERR(TECOMM_ERR_INVALID,
                    "%s: the secret in %s has %zu characters (at least %d: 128 random bits as "
                    "hex): %s", fn, from, len, TC_SECRET_MIN, how);
    return TC_ERR(TECOMM_ERR_INVALID,
                  "%s: the secret in %s has only %d distinct characters (at least %d: a secret "
                  "drawn at random has many; one character repeated, or blanks, is a mistake): "
                  "%s", fn, from, distinct, TC_SECRET_DISTINCT, how);
  }
  static const char label[] = "tecomm rendezvous secret v1";
  struct te_sha256 h;
  te_sha256_init(&h);
  te_sha256_update(&h, label, sizeof label);
  te_sha256_update(&h, text, len);
  te_sha256_final(&h, key);
  te_wipe(text, sizeof text);
  *keyed = 1;
  return TECOMM_SUCCESS;
}

void tc_auth_derive(const unsigned char key[32], const char *label, const void *data, size_t n,
                    unsigned char out[32]) {
  struct te_hmac h;
  te_hmac_init(&h, key, 32);
  te_hmac_update(&h, label, strlen(label) + 1);
  te_hmac_update(&h, data, n);
  te_hmac_final(&h, out);
}

/* ---- the listener ------------------------------------------------------- */

struct pending {
  int fd;
  size_t got;
  unsigned char nonce[TC_WIRE_NONCE];
  unsigned char msg[TC_WIRE_HDR + TC_WIRE_PROOF_BODY];
  char who[128];    /* address, uid and pid where known */
};

struct listener {
  const struct tc_wire_key *k;
  const char *what;
  int nwarn;
  int refused;
};

static void refuse(struct listener *l, const char *who, const char *why) {
  l->refused++;
  if (l->nwarn < TC_WARN_MAX)
    TC_WARN("%s: refused a connection from %s: %s; still waiting for the ranks", l->what, who, why);
  else if (l->nwarn == TC_WARN_MAX)
    TC_WARN("%s: more connections refused; no more are logged", l->what);
  l->nwarn++;
}

/* The peer's address (and uid, pid on a Unix socket: *uid -1 elsewhere). */
static void peer_name(int fd, char *who, size_t wl, long *uid) {
  struct sockaddr_storage ss;
  socklen_t sl = sizeof ss;
  *uid = -1;
  if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) {
    snprintf(who, wl, "an unknown address");
    return;
  }
  char a[INET6_ADDRSTRLEN] = "?";
  if (ss.ss_family == AF_INET) {
    struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
    inet_ntop(AF_INET, &s4->sin_addr, a, sizeof a);
    snprintf(who, wl, "%s:%u", a, (unsigned)ntohs(s4->sin_port));
  } else if (ss.ss_family == AF_INET6) {
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
    inet_ntop(AF_INET6, &s6->sin6_addr, a, sizeof a);
    snprintf(who, wl, "[%s]:%u", a, (unsigned)ntohs(s6->sin6_port));
  } else if (ss.ss_family == AF_UNIX) {
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) == 0) {
      snprintf(who, wl, "a local process (uid %u, pid %d)", (unsigned)cr.uid, (int)cr.pid);
      *uid = (long)cr.uid;
    } else {
      snprintf(who, wl, "a local process (credentials unknown)");
      *uid = -2;
    }
  } else {
    snprintf(who, wl, "address family %d", (int)ss.ss_family);
  }
}

/* Sends all of a short message on a nonblocking socket whose buffer is
 * empty (a fresh connection): 0, or -1 (the peer is gone or not reading). */
static int send_short(int fd, const void *p, size_t n) {
  ssize_t k;
  do k = send(fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
  while (k < 0 && errno == EINTR);
  return k == (ssize_t)n ? 0 : -1;
}

/* A new connection: the user checked (Unix), then the challenge sent. */
static void take(struct listener *l, int s, int unix_sock, struct pending *p, int *np) {
  long uid;
  char who[128];
  peer_name(s, who, sizeof who, &uid);
  if (unix_sock && uid != (long)geteuid()) {
    refuse(l, who, uid == -2 ? "its credentials cannot be read" : "another user's process");
    close(s);
    return;
  }
  if (*np == TC_PENDING_MAX) { /* the oldest has had the longest to prove itself */
    refuse(l, p[0].who, "it sent no proof while others waited");
    close(p[0].fd);
    memmove(p, p + 1, (size_t)(*np - 1) * sizeof *p);
    (*np)--;
  }
  struct pending *q = &p[*np];
  memset(q, 0, sizeof *q);
  q->fd = s;
  snprintf(q->who, sizeof q->who, "%s", who);
  unsigned char hello[TC_WIRE_HDR + TC_WIRE_HELLO_BODY];
  if (tc_random_bytes(q->nonce, sizeof q->nonce) != 0) {
    refuse(l, who, "no random bytes for its challenge (/dev/urandom)");
    close(s);
    return;
  }
  tc_wire_put_hdr(hello, TC_WIRE_HELLO, TC_WIRE_HELLO_BODY, 0);
  memcpy(hello + TC_WIRE_HDR, q->nonce, TC_WIRE_NONCE);
  if (send_short(s, hello, sizeof hello) != 0) {
    refuse(l, who, "it did not take the challenge");
    close(s);
    return;
  }
  (*np)++;
}

/* Reads what a pending connection sent; 1 done (it proved rank *rank, or
 * was refused: *rank -1), 0 more to come. */
static int progress(struct listener *l, struct pending *q, uint32_t nranks, int lo, int hi,
                    const int *fd, int *rank) {
  *rank = -1;
  ssize_t k;
  do k = recv(q->fd, q->msg + q->got, sizeof q->msg - q->got, MSG_DONTWAIT);
  while (k < 0 && errno == EINTR);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return 0;
  if (k <= 0) {
    char why[96];
    snprintf(why, sizeof why, "it closed the connection after %zu of %zu bytes of its proof",
             q->got, sizeof q->msg);
    refuse(l, q->who, why);
    return 1;
  }
  q->got += (size_t)k;
  if (q->got >= TC_WIRE_HDR) { /* a wrong header is refused before the rest comes */
    struct tc_wire_hdr h;
    char why[160];
    if (tc_wire_get_hdr(q->msg, q->got, &h, why, sizeof why) != 0 ||
        tc_wire_expect(&h, TC_WIRE_PROOF, TC_WIRE_PROOF_BODY, 0, why, sizeof why) != 0) {
      refuse(l, q->who, why);
      return 1;
    }
  }
  if (q->got < sizeof q->msg) return 0;
  struct tc_wire_proof pr;
  char why[160];
  const struct tc_wire_ranks want = {(uint32_t)nranks, (uint32_t)lo, (uint32_t)hi};
  if (tc_wire_check_proof(l->k, q->nonce, q->msg, q->got, &want, &pr, why, sizeof why) != 0) {
    refuse(l, q->who, why);
    return 1;
  }
  if (fd[pr.rank] >= 0) {
    /* only a holder of the secret gets here: a rank that dialled twice */
    snprintf(why, sizeof why, "rank %u is already connected", (unsigned)pr.rank);
    refuse(l, q->who, why);
    return 1;
  }
  unsigned char acc[TC_WIRE_HDR + TC_WIRE_ACCEPT_BODY];
  tc_wire_put_hdr(acc, TC_WIRE_ACCEPT, TC_WIRE_ACCEPT_BODY, 0);
  tc_wire_mac(l->k, TC_WIRE_ACCEPT, q->nonce, pr.nonce, pr.rank, pr.nranks, acc + TC_WIRE_HDR);
  if (send_short(q->fd, acc, sizeof acc) != 0) {
    refuse(l, q->who, "it went away before the answer");
    return 1;
  }
  *rank = (int)pr.rank;
  return 1;
}

tecomm_result_t tc_auth_accept(const struct tc_auth_listen *a, int *fd, int64_t deadline) {
  struct listener l = {.k = a->key, .what = a->what};
  struct pending p[TC_PENDING_MAX];
  struct pollfd pf[TC_PENDING_MAX + 8];
  int np = 0, missing = 0;
  tecomm_result_t res = TECOMM_SUCCESS;
  for (int r = a->lo; r < a->hi; r++) missing += fd[r] < 0;
  while (missing > 0) {
    int64_t left = deadline - tc_now_ms();
    if (left <= 0) {
      res = TC_ERR(TECOMM_ERR_TIMEOUT,
                   "%s: %d rank(s) did not connect and prove membership within TECOMM_TIMEOUT "
                   "(%d other connection(s) refused%s)", a->what, missing, l.refused,
                   l.refused ? ": see the log; do all ranks have the same secret?" : "");
      break;
    }
    int n = 0;
    for (int i = 0; i < a->nlfd && i < 8; i++) pf[n++] = (struct pollfd){.fd = a->lfd[i], .events = POLLIN};
    for (int i = 0; i < np; i++) pf[n++] = (struct pollfd){.fd = p[i].fd, .events = POLLIN};
    int k = poll(pf, (nfds_t)n, left > 100 ? 100 : (int)left);
    if (k < 0 && errno != EINTR) {
      res = TC_ERR(TECOMM_ERR_SYSTEM, "%s: poll: %s", a->what, strerror(errno));
      break;
    }
    if (k <= 0) continue;
    int nl = a->nlfd < 8 ? a->nlfd : 8;
    /* the pending first (their pollfds are indexed as they stand now) */
    for (int i = np - 1; i >= 0; i--) {
      if (!(pf[nl + i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      int rank = -1;
      if (!progress(&l, &p[i], (uint32_t)a->nranks, a->lo, a->hi, fd, &rank)) continue;
      if (rank >= 0) {
        fd[rank] = p[i].fd;
        missing--;
      } else {
        close(p[i].fd);
      }
      memmove(p + i, p + i + 1, (size_t)(np - i - 1) * sizeof *p);
      np--;
    }
    for (int i = 0; i < nl; i++) {
      if (!(pf[i].revents & POLLIN)) continue;
      for (;;) {
        int s = accept4(a->lfd[i], NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
        if (s < 0) break;
        take(&l, s, a->unix_sock, p, &np);
      }
    }
  }
  for (int i = 0; i < np; i++) close(p[i].fd);
  te_wipe(p, sizeof p);
  return res;
}

/* ---- the connector ------------------------------------------------------ */

/* Reads exactly n bytes from a nonblocking socket by deadline. */
static int read_full(int fd, unsigned char *b, size_t n, int64_t deadline) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = recv(fd, b + got, n - got, MSG_DONTWAIT);
    if (k > 0) {
      got += (size_t)k;
      continue;
    }
    if (k == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) return -1;
    int64_t left = deadline - tc_now_ms();
    if (left <= 0) return -2;
    struct pollfd p = {.fd = fd, .events = POLLIN};
    (void)poll(&p, 1, left > 100 ? 100 : (int)left);
  }
  return 0;
}

int tc_auth_connect(const struct tc_wire_key *k, int s, int unix_sock, int rank, int nranks,
                    int64_t deadline, char *why, size_t wl) {
  if (unix_sock) { /* whoever listens on a rank's name must be this user */
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(s, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.uid != geteuid()) {
      snprintf(why, wl, "the listener is not this user's process");
      return -1;
    }
  }
  int fl = fcntl(s, F_GETFL);
  if (fl >= 0) (void)fcntl(s, F_SETFL, fl | O_NONBLOCK);
  unsigned char hello[TC_WIRE_HDR + TC_WIRE_HELLO_BODY], nonce_l[TC_WIRE_NONCE];
  int rr = read_full(s, hello, sizeof hello, deadline);
  if (rr != 0) {
    snprintf(why, wl, rr == -2 ? "the listener sent no challenge in time"
                               : "the listener closed the connection before its challenge");
    return -1;
  }
  if (tc_wire_check_hello(hello, sizeof hello, nonce_l, why, wl) != 0) return -1;
  struct tc_wire_proof pr = {.rank = (uint32_t)rank, .nranks = (uint32_t)nranks};
  if (tc_random_bytes(pr.nonce, sizeof pr.nonce) != 0) {
    snprintf(why, wl, "no random bytes (/dev/urandom)");
    return -1;
  }
  tc_wire_mac(k, TC_WIRE_PROOF, nonce_l, pr.nonce, pr.rank, pr.nranks, pr.mac);
  unsigned char msg[TC_WIRE_HDR + TC_WIRE_PROOF_BODY];
  tc_wire_put_proof(msg, &pr);
  if (send_short(s, msg, sizeof msg) != 0) {
    snprintf(why, wl, "the listener went away before the proof");
    return -1;
  }
  unsigned char acc[TC_WIRE_HDR + TC_WIRE_ACCEPT_BODY];
  rr = read_full(s, acc, sizeof acc, deadline);
  if (rr != 0) {
    snprintf(why, wl, rr == -2 ? "the listener did not answer the proof in time"
                               : "the listener refused this rank's proof (do all ranks have the "
                                 "same secret?)");
    return -1;
  }
  return tc_wire_check_accept(k, acc, sizeof acc, nonce_l, &pr, why, wl);
}
