/* SPDX-License-Identifier: Apache-2.0 */
/* check_security.c -- who may join a communicator (libtecomm(7),
 * SECURITY; issue 28), ranks as forked processes (t/lib/comm_ranks.h):
 *   - SHA-256 against FIPS 180-4's examples, HMAC-SHA256 against RFC
 *     4231's test cases (common/sha256.c, which the proofs use);
 *   - a stranger process (uid 65534 when the suite runs as root, else this
 *     user without the secret) dials the TCP rendezvous and every mesh
 *     socket of the job before, while and after the ranks arrive, one
 *     rank late, with garbage, truncated proofs, replayed (stale-nonce)
 *     proofs, proofs under another key, the old bare rank number, and
 *     silent connections held open: it never gets an answer past the
 *     challenge nor a descriptor, rank 0 logs it at WARN, and the job's
 *     allreduce gives the right sums;
 *   - the TCP listener binds TECOMM_ROOT's address, not every interface;
 *   - a host name with no NUL in its field from the bootstrap fails init
 *     on every rank with a clear error (no read past it); so does a
 *     caller's allgather that fills only its own block (issue 57);
 *   - no secret: the TCP rendezvous refuses to start and says how to make
 *     one; TECOMM_INSECURE=1 lets it start; TECOMM_SECRET_FILE must be
 *     mode 0600 and owned by the user, a short secret is refused, a good
 *     file works; (issue 57) a FIFO is refused at once (init blocked in
 *     open()), so are a file under a directory others may write (or a
 *     link to one), a secret of 32 blanks, a port outside 1..65535.
 * Before the fix (main at 51511b1) every test here fails but the hash
 * vectors (which had no code to test): the strangers take a rank's place
 * or fail init, the listener is on [::], the host name is read past its
 * end and init succeeds, and init runs without a secret. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "comm_ranks.h"
#include "te_sha256.h"
#include "boot/wire.h"
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>

/* ---- the hash --------------------------------------------------------------- */

static void hex(const unsigned char *b, size_t n, char *out) {
  for (size_t i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

static void expect_digest(const unsigned char *got, const char *want, const char *what) {
  char h[65];
  hex(got, 32, h);
  ck_assert_msg(strcmp(h, want) == 0, "%s: %s, want %s", what, h, want);
}

START_TEST(sha256_fips_180_4) {
  static const struct {
    const char *msg, *want;
  } v[] = {
      {"abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqr"
       "lmnopqrsmnopqrstnopqrstu",
       "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1"},
  };
  unsigned char d[32];
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    memset(d, 0xA5, sizeof d);
    te_sha256(v[i].msg, strlen(v[i].msg), d);
    expect_digest(d, v[i].want, v[i].msg);
    /* the same fed in random pieces */
    struct te_sha256 s;
    te_sha256_init(&s);
    size_t n = strlen(v[i].msg), at = 0;
    while (at < n) {
      size_t k = 1 + (size_t)(te_rand_u64() % 70);
      if (k > n - at) k = n - at;
      te_sha256_update(&s, v[i].msg + at, k);
      at += k;
    }
    memset(d, 0xA5, sizeof d);
    te_sha256_final(&s, d);
    expect_digest(d, v[i].want, "in pieces");
  }
  /* a million 'a' */
  struct te_sha256 s;
  te_sha256_init(&s);
  char a[1000];
  memset(a, 'a', sizeof a);
  for (int i = 0; i < 1000; i++) te_sha256_update(&s, a, sizeof a);
  te_sha256_final(&s, d);
  expect_digest(d, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0", "1e6 x a");
}
END_TEST

START_TEST(hmac_sha256_rfc_4231) {
  unsigned char k1[20], k3[20], d3[50], k4[25], d4[50], k6[131];
  memset(k1, 0x0b, sizeof k1);
  memset(k3, 0xaa, sizeof k3);
  memset(d3, 0xdd, sizeof d3);
  for (int i = 0; i < 25; i++) k4[i] = (unsigned char)(i + 1);
  memset(d4, 0xcd, sizeof d4);
  memset(k6, 0xaa, sizeof k6);
  static const char m7[] = "This is a test using a larger than block-size key and a larger than "
                           "block-size data. The key needs to be hashed before being used by the "
                           "HMAC algorithm.";
  static const char m6[] = "Test Using Larger Than Block-Size Key - Hash Key First";
  const struct {
    const void *key;
    size_t kl;
    const void *msg;
    size_t ml;
    const char *want;
  } v[] = {
      {k1, 20, "Hi There", 8, "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {"Jefe", 4, "what do ya want for nothing?", 28,
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {k3, 20, d3, 50, "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {k4, 25, d4, 50, "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {k6, 131, m6, sizeof m6 - 1,
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {k6, 131, m7, sizeof m7 - 1,
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (size_t i = 0; i < sizeof v / sizeof v[0]; i++) {
    unsigned char d[32];
    memset(d, 0xA5, sizeof d);
    te_hmac_sha256(v[i].key, v[i].kl, v[i].msg, v[i].ml, d);
    char what[32];
    snprintf(what, sizeof what, "RFC 4231 case %zu", i < 4 ? i + 1 : i + 2);
    expect_digest(d, v[i].want, what);
  }
  /* the constant-time comparison answers like memcmp == 0 */
  unsigned char x[40], y[40];
  for (int t = 0; t < 200; t++) {
    for (int i = 0; i < 40; i++) x[i] = y[i] = (unsigned char)te_rand_u64();
    if (t % 2) y[te_rand_u64() % 40] ^= (unsigned char)(1u << (te_rand_u64() % 8));
    ck_assert_int_eq(te_ct_equal(x, y, sizeof x), memcmp(x, y, sizeof x) == 0);
  }
}
END_TEST

/* ---- the stranger ----------------------------------------------------------- */

#define SEC_NAMES 32
struct sec_shm {
  atomic_int done;                  /* the job is over: the stranger stops */
  atomic_int ready;                 /* the stranger runs: the ranks may start */
  atomic_int pid[TC_MAX_RANKS];     /* the ranks (the scout finds their sockets) */
  atomic_int tcp_tries, mesh_tries;
  atomic_int answered;              /* connections that got more than a challenge */
  atomic_int fds;                   /* descriptors the stranger received */
  atomic_int nnames;
  int uid;                          /* the stranger's */
  char names[SEC_NAMES][80];        /* the ranks' mesh sockets (abstract, no '@') */
};
static struct sec_shm *sec;
static int sec_port;

static void rand_bytes(void *p, size_t n) {
  unsigned char *b = p;
  for (size_t i = 0; i < n; i++) b[i] = (unsigned char)te_rand_u64();
}

/* The rendezvous key as libtecomm makes it from TECOMM_SECRET (auth.c). */
static void env_key(unsigned char key[32]) {
  static const char label[] = "tecomm rendezvous secret v1";
  const char *s = getenv("TECOMM_SECRET");
  struct te_sha256 h;
  te_sha256_init(&h);
  te_sha256_update(&h, label, sizeof label);
  te_sha256_update(&h, s ? s : "", s ? strlen(s) : 0);
  te_sha256_final(&h, key);
}

/* Reads what comes back within ms: counts descriptors and any byte past
 * a challenge (HELLO) as the listener having answered a stranger. */
static void drain(int s, int ms, unsigned char *hello, size_t *got_hello) {
  size_t got = 0;
  unsigned char buf[512];
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  for (;;) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int left = ms - (int)((t1.tv_sec - t0.tv_sec) * 1000 + (t1.tv_nsec - t0.tv_nsec) / 1000000);
    if (left <= 0) break;
    struct pollfd p = {.fd = s, .events = POLLIN};
    if (poll(&p, 1, left) <= 0) break;
    union {
      struct cmsghdr h;
      char b[CMSG_SPACE(16 * sizeof(int))];
    } u;
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof buf};
    struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b,
                       .msg_controllen = sizeof u.b};
    ssize_t k = recvmsg(s, &m, MSG_DONTWAIT);
    if (k <= 0) break;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
        atomic_fetch_add(&sec->fds, 1);
        int f;
        memcpy(&f, CMSG_DATA(c), sizeof f);
        close(f);
      }
    for (ssize_t i = 0; i < k; i++, got++)
      if (got < TC_WIRE_HDR + TC_WIRE_HELLO_BODY) {
        if (hello) hello[got] = buf[i];
      } else {
        atomic_fetch_add(&sec->answered, 1);
        return;
      }
  }
  if (got_hello) *got_hello = got;
}

/* One attack on a connected socket (mode picks it); keeps silent ones in
 * held[] (the oldest closed when full). */
static void attack(int s, unsigned mode, int tcp, int *held, int nheld) {
  static unsigned char old_nonce[TC_WIRE_NONCE];
  static int have_old;
  unsigned char hello[TC_WIRE_HDR + TC_WIRE_HELLO_BODY], msg[TC_WIRE_HDR + TC_WIRE_PROOF_BODY];
  size_t gh = 0;
  switch (mode % 6) {
  case 0: { /* garbage */
    unsigned char g[300];
    rand_bytes(g, sizeof g);
    (void)send(s, g, 1 + te_rand_u64() % sizeof g, MSG_NOSIGNAL);
    break;
  }
  case 1: { /* a proof cut short */
    drain(s, 30, hello, &gh);
    struct tc_wire_proof pr = {.rank = 1, .nranks = 3};
    rand_bytes(pr.nonce, sizeof pr.nonce);
    rand_bytes(pr.mac, sizeof pr.mac);
    tc_wire_put_proof(msg, &pr);
    (void)send(s, msg, 1 + te_rand_u64() % (sizeof msg - 1), MSG_NOSIGNAL);
    break;
  }
  case 2:   /* replayed: a proof good for an earlier challenge (as if overheard) */
  case 3: { /* a proof under another key */
    drain(s, 30, hello, &gh);
    struct tc_wire_key k;
    memset(&k, 0, sizeof k);
    /* the replay needs an earlier challenge: the first only records one
     * (a proof under the key for this very challenge would be a member's) */
    if (mode % 6 == 2 && tcp && have_old) {
      env_key(k.key);
      uint32_t ctx[4] = {0x00706374u, 3, (uint32_t)sec_port, 0};
      memcpy(k.ctx, ctx, sizeof ctx);
    } else {
      rand_bytes(k.key, sizeof k.key);
    }
    struct tc_wire_proof pr = {.rank = 1 + (uint32_t)(te_rand_u64() % 2), .nranks = 3};
    rand_bytes(pr.nonce, sizeof pr.nonce);
    const unsigned char *nl = have_old ? old_nonce : hello + TC_WIRE_HDR;
    tc_wire_mac(&k, TC_WIRE_PROOF, nl, pr.nonce, pr.rank, pr.nranks, pr.mac);
    tc_wire_put_proof(msg, &pr);
    (void)send(s, msg, sizeof msg, MSG_NOSIGNAL);
    if (gh == sizeof hello) { /* this challenge is the next replay's */
      memcpy(old_nonce, hello + TC_WIRE_HDR, sizeof old_nonce);
      have_old = 1;
    }
    break;
  }
  case 4: /* silent: holds a place */
    if (held[mode % nheld] >= 0) close(held[mode % nheld]);
    held[mode % nheld] = s;
    return;
  default: { /* the old protocol: a bare rank number */
    int32_t r = 1;
    (void)send(s, &r, sizeof r, MSG_NOSIGNAL);
  }
  }
  drain(s, 150, NULL, NULL);
  close(s);
}

/* The scout (with the test's rights) finds the ranks' listening mesh
 * sockets, as anyone can in /proc/net/unix, but only this job's (other
 * jobs may run on the machine). */
static int rank_socket(unsigned long ino) {
  char path[64], link[64];
  for (int r = 0; r < TC_MAX_RANKS; r++) {
    int pid = atomic_load(&sec->pid[r]);
    if (pid <= 0) continue;
    snprintf(path, sizeof path, "/proc/%d/fd", pid);
    DIR *d = opendir(path);
    if (!d) continue;
    struct dirent *e;
    char want[48];
    snprintf(want, sizeof want, "socket:[%lu]", ino);
    while ((e = readdir(d))) {
      char p2[320];
      snprintf(p2, sizeof p2, "%s/%s", path, e->d_name);
      ssize_t k = readlink(p2, link, sizeof link - 1);
      if (k > 0) {
        link[k] = '\0';
        if (strcmp(link, want) == 0) {
          closedir(d);
          return 1;
        }
      }
    }
    closedir(d);
  }
  return 0;
}

static void scout(void) {
  while (!atomic_load(&sec->done)) {
    FILE *f = fopen("/proc/net/unix", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
      unsigned long ino = 0;
      char name[160] = "";
      if (sscanf(line, "%*s %*s %*s %*s %*s %*s %lu %159s", &ino, name) != 2) continue;
      if (strncmp(name, "@tecomm-", 8) != 0 || strlen(name) >= 80) continue;
      int n = atomic_load(&sec->nnames), seen = 0;
      for (int i = 0; i < n; i++) seen |= strcmp(sec->names[i], name + 1) == 0;
      if (seen || n == SEC_NAMES || !rank_socket(ino)) continue;
      memcpy(sec->names[n], name + 1, strlen(name));   /* < 80 with its NUL */
      atomic_store(&sec->nnames, n + 1);
    }
    if (f) fclose(f);
    usleep(1000);
  }
}

static int dial_tcp(void) {
  int s = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)sec_port),
                          .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (s >= 0 && connect(s, (struct sockaddr *)&a, sizeof a) == 0) return s;
  if (s >= 0) close(s);
  return -1;
}

static int dial_unix(const char *name) {
  int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un a;
  memset(&a, 0, sizeof a);
  a.sun_family = AF_UNIX;
  size_t l = strlen(name);
  memcpy(a.sun_path + 1, name, l);
  if (s >= 0 && connect(s, (struct sockaddr *)&a,
                        (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + l)) == 0)
    return s;
  if (s >= 0) close(s);
  return -1;
}

static void stranger(int tcp, int same_uid) {
  pid_t sc = fork();
  if (sc == 0) {
    scout();
    _exit(0);
  }
  te_rng_seed(te_test_seed ^ 0x5157u);
  if (geteuid() == 0 && !same_uid) { /* another user */
    if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
  }
  sec->uid = (int)geteuid();
  atomic_store(&sec->ready, 1);
  int held[4] = {-1, -1, -1, -1};
  for (unsigned mode = 0; !atomic_load(&sec->done); mode++) {
    int s;
    if (tcp && (s = dial_tcp()) >= 0) {
      atomic_fetch_add(&sec->tcp_tries, 1);
      attack(s, mode, 1, held, 4);
    }
    int n = atomic_load(&sec->nnames);
    for (int i = 0; i < n; i++)
      if ((s = dial_unix(sec->names[i])) >= 0) {
        atomic_fetch_add(&sec->mesh_tries, 1);
        attack(s, mode + (unsigned)i, 0, held, 4);
      }
    usleep(500);
  }
  for (int i = 0; i < 4; i++)
    if (held[i] >= 0) close(held[i]);
  waitpid(sc, NULL, 0);
  _exit(0);
}

static pid_t stranger_start(int tcp, int same_uid) {
  sec = mmap(NULL, sizeof *sec, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert(sec != MAP_FAILED);
  memset(sec, 0, sizeof *sec);
  tc_job_secret();   /* the stranger's environment has it too: the replays use it */
  fflush(stdout);
  pid_t p = fork();
  ck_assert_int_ge(p, 0);
  if (p == 0) stranger(tcp, same_uid);
  for (int i = 0; i < 5000 && !atomic_load(&sec->ready); i++) usleep(1000);
  ck_assert_msg(atomic_load(&sec->ready), "the stranger did not start");
  return p;
}

static void stranger_stop(pid_t p, int want_tcp, int want_mesh) {
  atomic_store(&sec->done, 1);
  int st = 0;
  waitpid(p, &st, 0);
  printf("# stranger (uid %d): %d TCP and %d mesh connections on %d mesh socket(s); "
         "%d answered, %d descriptors\n", sec->uid, atomic_load(&sec->tcp_tries),
         atomic_load(&sec->mesh_tries), atomic_load(&sec->nnames), atomic_load(&sec->answered),
         atomic_load(&sec->fds));
  ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the stranger failed (0x%x)", st);
  /* ranks that found too few GPUs never opened a socket (the same rule as
   * every multi-rank suite on a one-GPU machine: vdev runs it in CI) */
  if (tc_ranks_skipped(3)) {
    printf("# the job's ranks did not run here: nothing for the stranger to reach\n");
    want_tcp = want_mesh = 0;
  }
  ck_assert_msg(!want_tcp || atomic_load(&sec->tcp_tries) > 0, "the stranger never reached TCP");
  ck_assert_msg(!want_mesh || atomic_load(&sec->mesh_tries) > 0, "the stranger never reached the mesh");
  ck_assert_msg(atomic_load(&sec->fds) == 0, "the stranger received %d descriptor(s)",
                atomic_load(&sec->fds));
  ck_assert_msg(atomic_load(&sec->answered) == 0,
                "%d stranger connection(s) got an answer past the challenge",
                atomic_load(&sec->answered));
  munmap(sec, sizeof *sec);
  sec = NULL;
}

/* The job's allreduce: random inputs, the sum of every rank's (made again
 * here) within 1e-5 relative (f32 sums of 3 terms in another order). */
static void check_sums(tecomm_comm_t c, int rank, int n) {
  enum { N = 4099 };
  float *mine = malloc(N * sizeof(float)), *got = malloc(N * sizeof(float)),
        *peer = malloc(N * sizeof(float));
  RK_ASSERT(mine && got && peer, "malloc");
  tc_make_input(mine, N, TECORE_DTYPE_F32, rank, 28);
  tecore_devptr_t buf = 0;
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  RK_CORE(tecore_mem_alloc(N * sizeof(float), &buf));
  RK_CORE(tecore_memcpy(buf, te_hptr(mine), N * sizeof(float)));
  RK_OK(tecomm_allreduce(c, buf, buf, N, TECORE_DTYPE_F32, TECOMM_SUM, s));
  RK_CORE(tecore_stream_synchronize(s));
  memset(got, 0xA5, N * sizeof(float));
  RK_CORE(tecore_memcpy(te_hptr(got), buf, N * sizeof(float)));
  double *want = calloc(N, sizeof(double));
  RK_ASSERT(want, "calloc");
  for (int p = 0; p < n; p++) {
    tc_make_input(peer, N, TECORE_DTYPE_F32, p, 28);
    for (int i = 0; i < N; i++) want[i] += peer[i];
  }
  for (int i = 0; i < N; i++)
    RK_ASSERT(fabs(got[i] - want[i]) <= 1e-5 * (fabs(want[i]) + 1.0),
              "element %d: %g, want %g", i, got[i], want[i]);
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_stream_destroy(s));
  free(mine), free(got), free(peer), free(want);
}

static int free_port(void) {
  int s = socket(AF_INET, SOCK_STREAM, 0);
  ck_assert_int_ge(s, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  ck_assert_int_eq(bind(s, (struct sockaddr *)&a, sizeof a), 0);
  socklen_t l = sizeof a;
  ck_assert_int_eq(getsockname(s, (struct sockaddr *)&a, &l), 0);
  close(s);
  return ntohs(a.sin_port);
}

static void tcp_env(int rank, int n) {
  char v[64];
  snprintf(v, sizeof v, "%d", rank);
  setenv("TECOMM_RANK", v, 1);
  snprintf(v, sizeof v, "%d", n);
  setenv("TECOMM_NRANKS", v, 1);
  snprintf(v, sizeof v, "127.0.0.1:%d", sec_port);
  setenv("TECOMM_ROOT", v, 1);
}

/* The log goes to stderr (the test process read TE_DEBUG_FILE before
 * the ranks were forked): a rank sends its stderr to dir/<pid>. */
static void log_to_file(const char *dir) {
  char path[300];
  snprintf(path, sizeof path, "%s/%ld", dir, (long)getpid());
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  RK_ASSERT(fd >= 0 && dup2(fd, 2) == 2, "%s: %s", path, strerror(errno));
  close(fd);
}

/* 1 when this process's log (log_to_file) has what. */
static int log_has(const char *dir, const char *what) {
  char path[300], line[1024];
  snprintf(path, sizeof path, "%s/%ld", dir, (long)getpid());
  FILE *f = fopen(path, "r");
  int found = 0;
  while (f && !found && fgets(line, sizeof line, f)) found = strstr(line, what) != NULL;
  if (f) fclose(f);
  return found;
}

static char log_dir[200];

/* Every address rank 0's rendezvous listens on is 127.0.0.1 (its root),
 * read from /proc/net/tcp{,6} while it waits for a late rank. */
static void expect_listen_loopback_only(int port) {
  static const char *const tabs[] = {"/proc/net/tcp", "/proc/net/tcp6"};
  int found = 0;
  for (int t = 0; t < 2; t++) {
    FILE *f = fopen(tabs[t], "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
      char local[80];
      unsigned st = 0;
      if (sscanf(line, "%*s %79s %*s %x", local, &st) != 2 || st != 0x0A) continue;
      char *colon = strrchr(local, ':');
      if (!colon || (int)strtol(colon + 1, NULL, 16) != port) continue;
      *colon = '\0';
      found++;
      RK_ASSERT(t == 0 && strcmp(local, "0100007F") == 0,
                "the rendezvous listens on %s address %s, not on 127.0.0.1 alone",
                t ? "IPv6" : "IPv4", local);
    }
    if (f) fclose(f);
  }
  RK_ASSERT(found == 1, "%d listening socket(s) on port %d (want 1)", found, port);
}

static void rank_tcp_job(int rank, int n, void *arg) {
  (void)arg;
  atomic_store(&sec->pid[rank], getpid());
  tcp_env(rank, n);
  setenv("TECOMM_TIMEOUT", "20000", 1);
  log_to_file(log_dir);
  if (rank == 2) usleep(1500 * 1000);   /* late: the stranger has the field to itself */
  if (rank == 1) {                       /* rank 0 waits for rank 2 meanwhile */
    usleep(700 * 1000);
    expect_listen_loopback_only(sec_port);
  }
  tecomm_comm_t c = NULL;
  RK_OK(tecomm_comm_init(-1, -1, rank, NULL, &c));
  check_sums(c, rank, n);
  RK_OK(tecomm_comm_destroy(c));
  if (rank == 0)
    RK_ASSERT(log_has(log_dir, "refused a connection from 127.0.0.1:"),
              "rank 0 logged no refused stranger (in %s)", log_dir);
}

START_TEST(stranger_cannot_join_tcp_rendezvous) {
  snprintf(log_dir, sizeof log_dir, "%s/te-sec-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ck_assert(mkdtemp(log_dir));
  sec_port = free_port();
  pid_t s = stranger_start(1, 0);
  usleep(100 * 1000);   /* early: the stranger dials before anyone listens */
  tc_run_ranks(3, rank_tcp_job, NULL, 90);
  stranger_stop(s, 1, 0);
  tc_shm_release();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", log_dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* The mesh: a callbacks bootstrap whose rank 2 comes back late from its
 * second exchange, so ranks 0 and 1 listen for it while the stranger
 * dials their sockets. */
static int late_calls;
static int late_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  int r = tc_shm_allgather(send, recv, bytes, ctx);
  if (++late_calls == 2 && tc_my_rank == 2) usleep(2000 * 1000);
  return r;
}

static void rank_mesh_job(int rank, int n, void *arg) {
  (void)arg;
  atomic_store(&sec->pid[rank], getpid());
  setenv("TECOMM_TIMEOUT", "20000", 1);
  log_to_file(log_dir);
  struct tecomm_bootstrap b = tc_boot_shm();
  b.allgather = late_allgather;
  tecomm_comm_t c = NULL;
  RK_OK(tecomm_comm_init(rank, n, rank, &b, &c));
  check_sums(c, rank, n);
  /* a split child's mesh is keyed too: its sums as well */
  tecomm_comm_t g = NULL;
  RK_OK(tecomm_comm_split(c, 0, rank, &g));
  check_sums(g, rank, n);
  RK_OK(tecomm_comm_destroy(g));
  RK_OK(tecomm_comm_destroy(c));
  if (rank == 0)
    RK_ASSERT(log_has(log_dir, "refused a connection from a local process (uid") &&
                  log_has(log_dir, sec->uid == (int)geteuid() ? "communicator's secret"
                                                              : "another user's process"),
              "rank 0 logged no refused stranger (in %s)", log_dir);
}

/* _i 0: another user's process where the suite runs as root (refused by
 * SO_PEERCRED); 1: this user's, without the secret (refused by the proof). */
START_TEST(stranger_cannot_join_mesh) {
  snprintf(log_dir, sizeof log_dir, "%s/te-sec-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ck_assert(mkdtemp(log_dir));
  pid_t s = stranger_start(0, _i);
  tc_run_ranks(3, rank_mesh_job, NULL, 90);
  stranger_stop(s, 0, 1);
  tc_shm_release();
  char cmd[300];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", log_dir);
  ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ---- the wire's strings ---------------------------------------------------------- */

/* The bootstrap hands back rank 1's first block (its host name first)
 * with 64 bytes and no NUL. */
static int first_call;
static int nonul_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  int r = tc_shm_allgather(send, recv, bytes, ctx);
  if (++first_call == 1 && bytes >= 64) memset((char *)recv + bytes, 'A', 64);
  return r;
}

static void rank_nonul(int rank, int n, void *arg) {
  (void)arg;
  struct tecomm_bootstrap b = tc_boot_shm();
  b.allgather = nonul_allgather;
  tecomm_comm_t c = NULL;
  RK_EXPECT(TECOMM_ERR_BOOTSTRAP, "rank 1's host name is not NUL-terminated",
            tecomm_comm_init(rank, n, rank, &b, &c));
  RK_ASSERT(c == NULL, "a failed init left a communicator");
}

START_TEST(host_name_without_nul) {
  tc_run_ranks(3, rank_nonul, NULL, 60);
  tc_shm_release();
}
END_TEST

/* A caller's allgather that writes only this rank's own block: init must
 * fail on every rank naming the block it did not fill (it returned
 * success on rank 0, which saw zeros for its peers' facts). */
static int own_block_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  (void)ctx;
  memcpy((char *)recv + (size_t)tc_my_rank * bytes, send, bytes);
  return 0;
}

static void rank_own_block(int rank, int n, void *arg) {
  (void)arg;
  struct tecomm_bootstrap b = tc_boot_shm();
  b.allgather = own_block_allgather;
  tecomm_comm_t c = NULL;
  RK_EXPECT(TECOMM_ERR_BOOTSTRAP, "did not fill rank", tecomm_comm_init(rank, n, rank, &b, &c));
  RK_ASSERT(c == NULL, "a failed init left a communicator");
  RK_ASSERT(strstr(tecomm_last_error(), "every rank's block"), "the detail does not say what an "
            "allgather must do: %s", tecomm_last_error());
}

START_TEST(allgather_filling_only_its_own_block) {
  tc_run_ranks(3, rank_own_block, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- secrets --------------------------------------------------------------------- */

static void no_secret_env(void) {
  unsetenv("TECOMM_SECRET");
  unsetenv("TECOMM_SECRET_FILE");
  unsetenv("TECOMM_INSECURE");
  setenv("TECOMM_TIMEOUT", "400", 1);
}

static void rank_no_secret(int rank, int n, void *arg) {
  (void)rank, (void)n, (void)arg;
  no_secret_env();
  char v[64];
  snprintf(v, sizeof v, "127.0.0.1:%d", sec_port);
  struct tecomm_bootstrap b = {.kind = TECOMM_BOOTSTRAP_ENV, .root = v};
  tecomm_comm_t c = NULL;
  RK_EXPECT(TECOMM_ERR_INVALID, "export TECOMM_SECRET=$(head -c 32 /dev/urandom",
            tecomm_comm_init(0, 2, 0, &b, &c));
  RK_ASSERT(c == NULL, "a failed init left a communicator");
}

static void rank_insecure(int rank, int n, void *arg) {
  (void)rank, (void)n, (void)arg;
  no_secret_env();
  setenv("TECOMM_INSECURE", "1", 1);
  char v[64];
  snprintf(v, sizeof v, "127.0.0.1:%d", sec_port);
  struct tecomm_bootstrap b = {.kind = TECOMM_BOOTSTRAP_ENV, .root = v};
  tecomm_comm_t c = NULL;
  /* rank 1 of 2 with no rank 0: it starts, and times out dialling */
  RK_EXPECT(TECOMM_ERR_TIMEOUT, "did not listen", tecomm_comm_init(1, 2, 0, &b, &c));
}

START_TEST(tcp_refuses_to_start_without_secret) {
  sec_port = free_port();
  tc_run_ranks(1, rank_no_secret, NULL, 30);
  tc_shm_release();
  tc_run_ranks(1, rank_insecure, NULL, 30);
  tc_shm_release();
}
END_TEST

static char secret_path[512];

static void rank_secret_file(int rank, int n, void *arg) {
  const char *want = arg;
  no_secret_env();
  setenv("TECOMM_SECRET_FILE", secret_path, 1);
  char v[64];
  snprintf(v, sizeof v, "127.0.0.1:%d", sec_port);
  struct tecomm_bootstrap b = {.kind = TECOMM_BOOTSTRAP_ENV, .root = v};
  tecomm_comm_t c = NULL;
  if (want) {
    RK_EXPECT(TECOMM_ERR_INVALID, want, tecomm_comm_init(rank, 2, rank, &b, &c));
    return;
  }
  setenv("TECOMM_TIMEOUT", "20000", 1);
  RK_OK(tecomm_comm_init(rank, n, rank, &b, &c));
  check_sums(c, rank, n);
  RK_OK(tecomm_comm_destroy(c));
}

static void write_secret(const char *text, mode_t mode) {
  unlink(secret_path);
  int fd = open(secret_path, O_WRONLY | O_CREAT | O_EXCL, 0600);
  ck_assert_int_ge(fd, 0);
  ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
  ck_assert_int_eq(fchmod(fd, mode), 0);
  close(fd);
}

START_TEST(secret_file_must_be_private) {
  snprintf(secret_path, sizeof secret_path, "%s/te-secret-XXXXXX",
           getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  int fd = mkstemp(secret_path);
  ck_assert_int_ge(fd, 0);
  close(fd);
  unsigned char b[32];
  char good[80];
  rand_bytes(b, sizeof b);
  hex(b, sizeof b, good);
  strcat(good, "\n");
  sec_port = free_port();
  write_secret(good, 0644);
  tc_run_ranks(1, rank_secret_file, "has mode 0644: other users may read it", 30);
  tc_shm_release();
  write_secret(good, 0640);
  tc_run_ranks(1, rank_secret_file, "has mode 0640", 30);
  tc_shm_release();
  write_secret("0123456789abcdef\n", 0600);   /* 64 bits */
  tc_run_ranks(1, rank_secret_file, "has 16 characters (at least 32", 30);
  tc_shm_release();
  write_secret(good, 0600);
  tc_run_ranks(2, rank_secret_file, NULL, 60);
  tc_shm_release();
  unlink(secret_path);
}
END_TEST

/* One process as rank 1 of 2 (no rank 0: a secret taken makes it dial
 * and time out, "did not listen"), or as rank 0 of 2 at a root, with the
 * secret from env (TECOMM_SECRET) or file (TECOMM_SECRET_FILE). */
struct secret_case {
  const char *env, *file, *root;
  tecomm_result_t code;
  const char *want;
};

static void rank_secret_case(int rank, int n, void *arg) {
  (void)rank, (void)n;
  const struct secret_case *k = arg;
  no_secret_env();
  if (k->env) setenv("TECOMM_SECRET", k->env, 1);
  if (k->file) setenv("TECOMM_SECRET_FILE", k->file, 1);
  char v[64];
  snprintf(v, sizeof v, "127.0.0.1:%d", sec_port);
  struct tecomm_bootstrap b = {.kind = TECOMM_BOOTSTRAP_ENV, .root = k->root ? k->root : v};
  tecomm_comm_t c = NULL;
  RK_EXPECT(k->code, k->want, tecomm_comm_init(k->code == TECOMM_ERR_TIMEOUT, 2, 0, &b, &c));
  RK_ASSERT(c == NULL, "a failed init left a communicator");
}

static void secret_expect(struct secret_case k, int timeout_s) {
  tc_run_ranks(1, rank_secret_case, &k, timeout_s);
  tc_shm_release();
}

/* A FIFO as TECOMM_SECRET_FILE: refused at once (init blocked in open()
 * for a writer, past TECOMM_TIMEOUT: the run is killed after 15 s). */
START_TEST(secret_file_fifo_refused_at_once) {
  char dir[256], fifo[300];
  snprintf(dir, sizeof dir, "%s/te-fifo-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(dir));
  snprintf(fifo, sizeof fifo, "%s/secret", dir);
  ck_assert_int_eq(mkfifo(fifo, 0600), 0);
  sec_port = free_port();
  secret_expect((struct secret_case){.file = fifo, .code = TECOMM_ERR_INVALID,
                                     .want = "is not a regular file"}, 15);
  unlink(fifo);
  rmdir(dir);
}
END_TEST

/* 32 blanks, or two characters repeated, are at least 32 characters but
 * no secret: refused (were accepted); a random one of 32 hex digits is
 * taken.  A port outside 1..65535 is refused (99999 was taken). */
START_TEST(secret_of_blanks_and_port_out_of_range_refused) {
  sec_port = free_port();
  secret_expect((struct secret_case){.env = "                                ",
                                     .code = TECOMM_ERR_INVALID,
                                     .want = "has only 1 distinct characters"}, 30);
  secret_expect((struct secret_case){.env = "abababababababababababababababababab",
                                     .code = TECOMM_ERR_INVALID,
                                     .want = "has only 2 distinct characters"}, 30);
  unsigned char b[16];
  char good[40];
  rand_bytes(b, sizeof b);
  hex(b, sizeof b, good);
  secret_expect((struct secret_case){.env = good, .code = TECOMM_ERR_TIMEOUT,
                                     .want = "did not listen"}, 30);
  static const char *const roots[] = {"127.0.0.1:99999", "127.0.0.1:0", "127.0.0.1:65536",
                                      "127.0.0.1:-1", "127.0.0.1:http"};
  for (size_t i = 0; i < sizeof roots / sizeof roots[0]; i++)
    secret_expect((struct secret_case){.env = good, .root = roots[i], .code = TECOMM_ERR_INVALID,
                                       .want = "a port is a number in 1..65535"}, 30);
}
END_TEST

/* The directories above TECOMM_SECRET_FILE (where links lead) must be
 * this user's or root's and not writable by others unless sticky: a
 * file under a directory of mode 0777, or reached through a link to one,
 * is refused (only the file itself was checked); a link to a safe
 * directory, and a sticky one (as /tmp), are fine. */
START_TEST(secret_file_under_unsafe_directory_refused) {
  char top[256], safe[300], open_dir[300], link_safe[300], link_open[300], path[400];
  snprintf(top, sizeof top, "%s/te-dirs-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  ck_assert_ptr_nonnull(mkdtemp(top));
  snprintf(safe, sizeof safe, "%s/safe", top);
  snprintf(open_dir, sizeof open_dir, "%s/open", top);
  snprintf(link_safe, sizeof link_safe, "%s/to-safe", top);
  snprintf(link_open, sizeof link_open, "%s/to-open", top);
  ck_assert_int_eq(mkdir(safe, 0700), 0);
  ck_assert_int_eq(mkdir(open_dir, 0700), 0);
  ck_assert_int_eq(chmod(open_dir, 0777), 0);
  ck_assert_int_eq(symlink(safe, link_safe), 0);
  ck_assert_int_eq(symlink(open_dir, link_open), 0);
  unsigned char b[32];
  char good[80];
  rand_bytes(b, sizeof b);
  hex(b, sizeof b, good);
  const char *dirs[] = {safe, open_dir};
  for (int i = 0; i < 2; i++) {
    snprintf(secret_path, sizeof secret_path, "%s/secret", dirs[i]);
    write_secret(good, 0600);
  }
  sec_port = free_port();
  const struct {
    const char *dir;
    tecomm_result_t code;
    const char *want;
  } cases[] = {{safe, TECOMM_ERR_TIMEOUT, "did not listen"},
               {link_safe, TECOMM_ERR_TIMEOUT, "did not listen"},
               {open_dir, TECOMM_ERR_INVALID, "of mode 0777: other users may replace the file"},
               {link_open, TECOMM_ERR_INVALID, "of mode 0777: other users may replace the file"}};
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    snprintf(path, sizeof path, "%s/secret", cases[i].dir);
    printf("# TECOMM_SECRET_FILE=%s\n", path);
    secret_expect((struct secret_case){.file = path, .code = cases[i].code,
                                       .want = cases[i].want}, 30);
  }
  ck_assert_int_eq(chmod(open_dir, 01777), 0);   /* sticky: others cannot replace our files */
  snprintf(path, sizeof path, "%s/secret", link_open);
  secret_expect((struct secret_case){.file = path, .code = TECOMM_ERR_TIMEOUT,
                                     .want = "did not listen"}, 30);
  for (int i = 0; i < 2; i++) {
    snprintf(path, sizeof path, "%s/secret", dirs[i]);
    unlink(path);
    rmdir(dirs[i]);
  }
  unlink(link_safe);
  unlink(link_open);
  rmdir(top);
}
END_TEST

static Suite *security_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_security");
  TCase *tc = te_tcase(s, "hash", 0);
  tcase_add_test(tc, sha256_fips_180_4);
  tcase_add_test(tc, hmac_sha256_rfc_4231);
  tc = te_tcase(s, "stranger", 0);
  tcase_add_test(tc, stranger_cannot_join_tcp_rendezvous);
  tcase_add_loop_test(tc, stranger_cannot_join_mesh, 0, 2);
  tc = te_tcase(s, "wire", 0);
  tcase_add_test(tc, host_name_without_nul);
  tcase_add_test(tc, allgather_filling_only_its_own_block);
  tc = te_tcase(s, "secret", 0);
  tcase_add_test(tc, tcp_refuses_to_start_without_secret);
  tcase_add_test(tc, secret_file_must_be_private);
  tcase_add_test(tc, secret_file_fifo_refused_at_once);
  tcase_add_test(tc, secret_of_blanks_and_port_out_of_range_refused);
  tcase_add_test(tc, secret_file_under_unsafe_directory_refused);
  return s;
}

TE_TEST_MAIN(security_suite, TE_TEST_DEVICE)
