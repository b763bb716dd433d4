/* SPDX-License-Identifier: Apache-2.0 */
/* check_protocols.c -- the allreduce protocols (libtecomm/base/ar_kernels.h)
 * without the communicator layer: each test forks N rank processes; each
 * makes one exportable VMM allocation (its pool: workspace, then input
 * region), sends its POSIX fd to the test process over a SOCK_SEQPACKET
 * socketpair (SCM_RIGHTS), gets every rank's fd back and maps the peers'
 * pools.  On vdev the pools are memfds, so the ranks run the protocols
 * concurrently on shared memory; with TE_DEVICE=cuda rank r uses GPU r
 * (a test needing more GPUs than the machine has says so and passes).
 *
 * Each rank draws every rank's inputs from the printed seed (so it knows
 * the whole reduction), poisons its outputs, and checks its result two
 * ways: bit for bit against the fold over ranks 0 .. n-1 in float rounded
 * to the dtype (the protocols' promise; Lamport's sentinel substitutions
 * applied), and against a float64 sum within (n-1) f32 roundings of the
 * sum of magnitudes plus half an ulp of the dtype.  Each rank sends a hash
 * of all its outputs; the test asserts every rank's is the same (the same
 * bits on every rank).  The fused add + RMSNorm (+ FP8) is compared bit for
 * bit with the unfused path: the plain allreduce, tecore_scale_add and
 * tecore_rmsnorm_fwd.  lamport_stress_skewed_ranks_* runs batches of
 * Lamport calls back to back, with new data and changing sizes, on ranks
 * of deliberately different speeds (the races of the buffer rotation). */
#include "tests.h"
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <te/elementwise.h>
#include <te/norm.h>
#include "base/ar_kernels.h"
#include "common/comm_ar.h"

#define MAXN TC_AR_MAX_RANKS
#define CALL_TIMEOUT_NS 20000000000ull /* a protocol bug fails, it never hangs */

/* ---- messages between the test process and its ranks ---- */

enum { MSG_FD = 'F', MSG_BARRIER = 'B', MSG_GO = 'G', MSG_DONE = 'D' };
struct msg {
  char type;
  char text[400];
  uint64_t hash;
  int64_t t_ns;
  int code, peer;
};

static int sendmsg_fds(int sock, const struct msg *m, const int *fds, int nfds) {
  struct iovec iov = {.iov_base = (void *)m, .iov_len = sizeof *m};
  union {
    char buf[CMSG_SPACE(sizeof(int) * MAXN)];
    struct cmsghdr align;
  } u;
  memset(&u, 0, sizeof u);
  struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1};
  if (nfds) {
    h.msg_control = u.buf;
    h.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
    struct cmsghdr *c = CMSG_FIRSTHDR(&h);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(c), fds, sizeof(int) * (size_t)nfds);
  }
  return sendmsg(sock, &h, MSG_NOSIGNAL) == (ssize_t)sizeof *m ? 0 : -1;
}

/* Returns the number of fds received (0 .. MAXN), -1 on error or EOF. */
static int recvmsg_fds(int sock, struct msg *m, int *fds) {
  struct iovec iov = {.iov_base = m, .iov_len = sizeof *m};
  union {
    char buf[CMSG_SPACE(sizeof(int) * MAXN)];
    struct cmsghdr align;
  } u;
  struct msghdr h = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                     .msg_controllen = sizeof u.buf};
  if (recvmsg(sock, &h, 0) != (ssize_t)sizeof *m) return -1;
  int n = 0;
  for (struct cmsghdr *c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
    if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
      n = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
      memcpy(fds, CMSG_DATA(c), sizeof(int) * (size_t)n);
    }
  return n;
}

static int64_t mono_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* ---- one rank ---- */

struct rank {
  int r, n, sock;
  tecore_stream_t s;
  size_t pool_bytes, ws_bytes, ws_max, in_bytes;
  tecore_vmm_handle_t h[MAXN];
  tecore_devptr_t base[MAXN]; /* every rank's pool, mapped here */
  uint64_t hash;
  struct msg done; /* what the rank reports (code, peer, t_ns) */
};

static tecore_devptr_t ws_of(const struct rank *k, int s) { return k->base[s]; }
static tecore_devptr_t in_of(const struct rank *k, int s) { return k->base[s] + k->ws_bytes; }

static void rank_say(struct rank *k, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void rank_say(struct rank *k, const char *fmt, ...) {
  struct msg m;
  memset(&m, 0, sizeof m);
  m.type = MSG_DONE;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m.text, sizeof m.text, fmt, ap);
  va_end(ap);
  m.hash = k->hash;
  m.t_ns = k->done.t_ns;
  m.code = k->done.code;
  m.peer = k->done.peer;
  sendmsg_fds(k->sock, &m, NULL, 0);
}

/* A failed check in a rank: say what and leave. */
#define RFAIL(k, ...)          \
  do {                         \
    rank_say((k), __VA_ARGS__); \
    _exit(1);                  \
  } while (0)
#define RCHECK(k, cond, ...)                          \
  do {                                                \
    if (!(cond)) RFAIL((k), "rank %d: " __VA_ARGS__); \
  } while (0)
#define ROK(k, call)                                                                         \
  do {                                                                                       \
    tecore_result_t rok_ = (call);                                                           \
    if (rok_ != TECORE_SUCCESS)                                                              \
      RFAIL((k), "rank %d: %s: %s: %s", (k)->r, #call, tecore_result_name(rok_),             \
            tecore_last_error());                                                            \
  } while (0)

static void rank_barrier(struct rank *k) {
  struct msg m = {.type = MSG_BARRIER};
  int fds[MAXN];
  if (sendmsg_fds(k->sock, &m, NULL, 0) || recvmsg_fds(k->sock, &m, fds) < 0 || m.type != MSG_GO)
    _exit(3);
}

static void hash_bytes(struct rank *k, const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = k->hash ? k->hash : 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  k->hash = h;
}

static void h2d(struct rank *k, tecore_devptr_t d, const void *h, size_t n) {
  ROK(k, tecore_memcpy_async(d, te_hptr(h), n, k->s));
  ROK(k, tecore_stream_synchronize(k->s));
}
static void d2h(struct rank *k, void *h, tecore_devptr_t d, size_t n) {
  ROK(k, tecore_memcpy_async(te_hptr(h), d, n, k->s));
  ROK(k, tecore_stream_synchronize(k->s));
}

/* Device set-up, fd exchange, mapping, workspace init, a barrier. */
static void rank_setup(struct rank *k) {
  ROK(k, tecore_init());
  tecore_backend_t be;
  ROK(k, tecore_backend(&be));
  int ndev = 0;
  ROK(k, tecore_device_count(&ndev));
  int dev = be == TECORE_BACKEND_CUDA ? k->r : 0;
  RCHECK(k, dev < ndev, "device %d of %d", k->r, dev, ndev);
  tecore_ctx_t ctx;
  ROK(k, tecore_ctx_create(dev, &ctx));
  ROK(k, tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &k->s));
  size_t g = 0;
  ROK(k, tecore_vmm_granularity(&g, 0));
  k->ws_bytes = (tc_ar_workspace_bytes(k->n, k->ws_max) + 4095) / 4096 * 4096;
  k->pool_bytes = (k->ws_bytes + k->in_bytes + g - 1) / g * g;
  ROK(k, tecore_vmm_create(k->pool_bytes, TECORE_VMM_EXPORT_POSIX_FD, &k->h[k->r]));
  int fd = -1;
  ROK(k, tecore_vmm_export_fd(k->h[k->r], &fd));
  struct msg m = {.type = MSG_FD};
  if (sendmsg_fds(k->sock, &m, &fd, 1)) _exit(3);
  close(fd);
  int fds[MAXN];
  int got = recvmsg_fds(k->sock, &m, fds);
  RCHECK(k, got == k->n, "received %d fds, want %d", k->r, got, k->n);
  for (int s = 0; s < k->n; s++) {
    if (s != k->r) ROK(k, tecore_vmm_import_fd(fds[s], &k->h[s]));
    close(fds[s]);
    ROK(k, tecore_vmm_reserve(k->pool_bytes, 0, &k->base[s]));
    ROK(k, tecore_vmm_map(k->base[s], k->pool_bytes, k->h[s], 0));
    ROK(k, tecore_vmm_set_access(k->base[s], k->pool_bytes, dev));
  }
  /* the input region starts poisoned: a protocol reading it early shows */
  ROK(k, tecore_memset_d8_async(in_of(k, k->r), TE_POISON_BYTE, k->in_bytes, k->s));
  ROK(k, tc_ar_workspace_init(ws_of(k, k->r), k->n, k->ws_max, k->s));
  ROK(k, tecore_stream_synchronize(k->s));
  rank_barrier(k); /* no peer writes a flag here before it is initialised */
}

static void rank_teardown(struct rank *k) {
  ROK(k, tecore_stream_synchronize(k->s));
  rank_barrier(k); /* no peer still writes into these mappings */
  for (int s = 0; s < k->n; s++) {
    ROK(k, tecore_vmm_unmap(k->base[s], k->pool_bytes));
    ROK(k, tecore_vmm_free_va(k->base[s], k->pool_bytes));
    ROK(k, tecore_vmm_release(k->h[s]));
  }
}

/* ---- the test process's side ---- */

struct job {
  int n;
  size_t in_bytes, ws_max;
  void (*body)(struct rank *k);
  int victim;          /* kill test: the rank to SIGKILL, else -1 */
  int kill_after_ms;
  int64_t t_kill;
  struct msg done[MAXN];
  int status[MAXN];
};

/* The backend and its device count, probed in a child (the test process
 * itself never touches the device: a cuda context does not survive fork). */
static int probe_devices(int *is_cuda) {
  static int cached = -1, cuda = 0;
  if (cached < 0) {
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(stdout);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
      int v[2] = {0, 0};
      tecore_backend_t b = TECORE_BACKEND_NONE;
      if (tecore_init() == TECORE_SUCCESS && tecore_backend(&b) == TECORE_SUCCESS)
        tecore_device_count(&v[0]);
      v[1] = b == TECORE_BACKEND_CUDA;
      if (write(fds[1], v, sizeof v) != (ssize_t)sizeof v) _exit(1);
      _exit(0);
    }
    close(fds[1]);
    int v[2] = {0, 0};
    ssize_t got = read(fds[0], v, sizeof v);
    close(fds[0]);
    waitpid(pid, NULL, 0);
    ck_assert_msg(got == (ssize_t)sizeof v, "the device probe said nothing");
    cached = v[0];
    cuda = v[1];
  }
  *is_cuda = cuda;
  return cached;
}

/* Fewer GPUs than ranks on cuda: the test says so and passes. */
static int gpus_short(int n) {
  int cuda = 0, cnt = probe_devices(&cuda);
  if (!cuda || cnt >= n) return 0;
  printf("# skip: %d ranks need %d GPUs, this machine has %d\n", n, n, cnt);
  fflush(stdout);
  return 1;
}

static void run_job(struct job *j) {
  int sv[MAXN][2];
  pid_t pid[MAXN];
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < j->n; r++) {
    ck_assert_int_eq(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv[r]), 0);
    pid[r] = fork();
    ck_assert_int_ge(pid[r], 0);
    if (pid[r] == 0) {
      for (int q = 0; q <= r; q++) close(sv[q][0]);
      struct rank k;
      memset(&k, 0, sizeof k);
      k.r = r;
      k.n = j->n;
      k.sock = sv[r][1];
      k.in_bytes = j->in_bytes;
      k.ws_max = j->ws_max;
      rank_setup(&k);
      j->body(&k);
      rank_teardown(&k);
      rank_say(&k, "ok");
      _exit(0);
    }
    close(sv[r][1]);
  }
  /* fds: one from each rank, then all of them to each */
  int fds[MAXN];
  for (int r = 0; r < j->n; r++) {
    struct msg m;
    int f[MAXN];
    int got = recvmsg_fds(sv[r][0], &m, f);
    if (got != 1 || m.type != MSG_FD) {
      /* a rank failed before its fd: its message says why */
      for (int q = 0; q < j->n; q++) kill(pid[q], SIGKILL);
      for (int q = 0; q < j->n; q++) waitpid(pid[q], NULL, 0);
      ck_abort_msg("rank %d: no fd (%s)", r, got >= 0 ? m.text : "closed");
    }
    fds[r] = f[0];
  }
  for (int r = 0; r < j->n; r++) {
    struct msg m = {.type = MSG_FD};
    ck_assert_int_eq(sendmsg_fds(sv[r][0], &m, fds, j->n), 0);
  }
  for (int r = 0; r < j->n; r++) close(fds[r]);
  /* serve barriers until every rank is done */
  int alive = j->n, waiting = 0, finished[MAXN] = {0}, at_barrier[MAXN] = {0};
  int64_t start = mono_ns(), deadline = start + 100ll * 1000000000ll, released = 0;
  int killed = 0;
  while (alive > 0) {
    /* the victim dies kill_after_ms after the set-up barrier let everyone go */
    if (j->victim >= 0 && !killed && released &&
        mono_ns() - released > (int64_t)j->kill_after_ms * 1000000) {
      /* the victim's pending barrier, if any, no longer counts */
      j->t_kill = mono_ns();
      kill(pid[j->victim], SIGKILL);
      killed = 1;
      if (!finished[j->victim]) {
        finished[j->victim] = 1;
        alive--;
        if (at_barrier[j->victim]) waiting--;
      }
    }
    struct pollfd pf[MAXN];
    for (int r = 0; r < j->n; r++) {
      pf[r].fd = finished[r] ? -1 : sv[r][0];
      pf[r].events = POLLIN;
      pf[r].revents = 0;
    }
    int pr = poll(pf, (nfds_t)j->n, 20);
    if (mono_ns() > deadline) {
      for (int q = 0; q < j->n; q++) kill(pid[q], SIGKILL);
      for (int q = 0; q < j->n; q++) waitpid(pid[q], NULL, 0);
      ck_abort_msg("ranks did not finish in 100 s (a hang)");
    }
    if (pr <= 0) continue;
    for (int r = 0; r < j->n; r++) {
      if (finished[r] || !(pf[r].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      struct msg m;
      int f[MAXN];
      if (recvmsg_fds(sv[r][0], &m, f) < 0) {
        snprintf(j->done[r].text, sizeof j->done[r].text, "rank %d: exited without a report", r);
        finished[r] = 1;
        alive--;
        continue;
      }
      if (m.type == MSG_BARRIER) {
        at_barrier[r] = 1;
        waiting++;
      } else if (m.type == MSG_DONE) {
        j->done[r] = m;
        finished[r] = 1;
        alive--;
      }
    }
    if (waiting > 0 && waiting == alive) {
      for (int r = 0; r < j->n; r++)
        if (at_barrier[r] && !finished[r]) {
          struct msg g = {.type = MSG_GO};
          sendmsg_fds(sv[r][0], &g, NULL, 0);
          at_barrier[r] = 0;
        }
      waiting = 0;
      if (!released) released = mono_ns();
    }
  }
  for (int r = 0; r < j->n; r++) {
    waitpid(pid[r], &j->status[r], 0);
    close(sv[r][0]);
  }
}

/* Every rank but the victim reported "ok", with the same hash. */
static void expect_all_ok(const struct job *j) {
  for (int r = 0; r < j->n; r++) {
    if (r == j->victim) continue;
    ck_assert_msg(strcmp(j->done[r].text, "ok") == 0, "%s", j->done[r].text);
  }
  for (int r = 0; r < j->n; r++)
    if (r != j->victim && j->done[r].hash != j->done[0].hash)
      ck_abort_msg("rank %d's outputs differ from rank 0's (hash %016llx vs %016llx)", r,
                   (unsigned long long)j->done[r].hash, (unsigned long long)j->done[0].hash);
}

/* ---- inputs and references ---- */

static uint64_t mix(uint64_t a, uint64_t b) {
  uint64_t x = a ^ (b * 0x9e3779b97f4a7c15ull);
  return te_splitmix64(&x);
}

static size_t esz(tecore_dtype_t dt) { return dt == TECORE_DTYPE_F32 ? 4 : 2; }

/* Rank s's input of call id: values of magnitude 2^-10 .. 8 rounded to dt, a few exact
 * -0.0 (Lamport's sentinel value) and, for f32, the armed word itself. */
static void gen_input(void *dst, tecore_dtype_t dt, size_t count, uint64_t id, int s) {
  uint64_t st = mix(mix(te_test_seed, id), (uint64_t)s + 1);
  for (size_t i = 0; i < count; i++) {
    uint64_t u = te_splitmix64(&st);
    /* a full 23-bit mantissa and exponents over 2^-10 .. 2^2: sums round,
     * so the order of a fold shows in its bits */
    float v = te_bits_f32((uint32_t)((u >> 63) << 31) | ((uint32_t)(117 + (u >> 40) % 13) << 23) |
                          (uint32_t)((u >> 8) & 0x7fffffu));
    if ((u & 0xff) == 7) v = -0.0f;
    if (dt == TECORE_DTYPE_F32) {
      uint32_t b = te_f32_bits(v);
      if ((u & 0xff) == 9) b = TE_AR_LAM_ARM;
      memcpy((char *)dst + 4 * i, &b, 4);
    } else {
      te_st(dst, i, (int)dt, v);
    }
  }
}

/* The value a protocol reduces for rank s's stored input element. */
static float in_value(const void *p, size_t i, tecore_dtype_t dt, int algo) {
  if (algo == TC_AR_LAMPORT) {
    if (dt == TECORE_DTYPE_F32) {
      uint32_t w;
      memcpy(&w, (const char *)p + 4 * i, 4);
      return te_bits_f32(te_ar_lam_fix(w, (int)dt));
    }
    uint16_t h;
    memcpy(&h, (const char *)p + 2 * i, 2);
    if (h == 0x8000u) h = 0;
    return te_ld(&h, 0, (int)dt);
  }
  return te_ld(p, i, (int)dt);
}

/* Checks got[0 .. count-1] (dtype dt) against the exact fold and float64. */
static void check_result(struct rank *k, const void *got, void *const *ins, size_t count,
                         tecore_dtype_t dt, int op, int algo, const char *what) {
  int n = k->n;
  double ulp = dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
  for (size_t i = 0; i < count; i++) {
    float acc = in_value(ins[0], i, dt, algo);
    double ref = acc, mag = fabs(acc);
    for (int s = 1; s < n; s++) {
      float v = in_value(ins[s], i, dt, algo);
      acc = te_ar_op(acc, v, op);
      ref = op == TC_AR_SUM ? ref + v : (v > ref ? v : ref);
      mag += fabs(v);
    }
    unsigned char want[4], have[4];
    te_st(want, 0, (int)dt, acc);
    memcpy(have, (const char *)got + i * esz(dt), esz(dt));
    float g = te_ld(have, 0, (int)dt);
    RCHECK(k, memcmp(want, have, esz(dt)) == 0,
           "%s[%zu] of %zu: got %.9g (0x%x), want %.9g (0x%x) (the fold over ranks in order)",
           k->r, what, i, count, (double)g, dt == TECORE_DTYPE_F32 ? te_f32_bits(g) : (unsigned)*(uint16_t *)have,
           (double)te_ld(want, 0, (int)dt),
           dt == TECORE_DTYPE_F32 ? te_f32_bits(te_ld(want, 0, (int)dt)) : (unsigned)*(uint16_t *)want);
    double tol = (n - 1) * 0x1p-24 * mag + ulp * fabs(ref) + 1e-30;
    RCHECK(k, fabs((double)g - ref) <= tol, "%s[%zu]: got %.9g, float64 %.12g, tolerance %g",
           k->r, what, i, (double)g, ref, tol);
  }
}

static const char *algo_name(int a) {
  return a == TC_AR_ONESHOT ? "one-shot" : a == TC_AR_TWOSHOT ? "two-shot" : "Lamport";
}
static const char *dt_name(tecore_dtype_t dt) { return tecore_dtype_name(dt); }

static void call_init(struct rank *k, struct tc_ar_call *c, int algo, tecore_dtype_t dt, int op,
                      size_t count, size_t in_off, tecore_devptr_t out) {
  memset(c, 0, sizeof *c);
  c->algo = (tc_ar_algo_t)algo;
  c->op = (tc_ar_op_t)op;
  c->dtype = dt;
  c->count = count;
  c->rank = k->r;
  c->nranks = k->n;
  for (int s = 0; s < k->n; s++) {
    c->ws[s] = ws_of(k, s);
    c->in[s] = in_of(k, s) + in_off;
  }
  c->out = out;
  c->timeout_ns = CALL_TIMEOUT_NS;
  c->ws_max_bytes = k->ws_max;
}

/* One allreduce: fresh inputs, poisoned output, the call, the checks.
 * in_off / out_off shift the buffers (by whole elements) to take the
 * unaligned paths; inplace reduces into in[rank]. */
static void one_call(struct rank *k, tecore_devptr_t outbuf, void **ins, void *got, int algo,
                     tecore_dtype_t dt, int op, size_t count, size_t in_off, size_t out_off,
                     int inplace, uint64_t id) {
  size_t bytes = count * esz(dt);
  for (int s = 0; s < k->n; s++) gen_input(ins[s], dt, count, id, s);
  h2d(k, in_of(k, k->r) + in_off, ins[k->r], bytes);
  tecore_devptr_t out = inplace ? in_of(k, k->r) + in_off : outbuf + out_off;
  if (!inplace) ROK(k, tecore_memset_d8_async(out, TE_POISON_BYTE, bytes, k->s));
  struct tc_ar_call c;
  call_init(k, &c, algo, dt, op, count, in_off, out);
  ROK(k, tc_ar_launch(&c, k->s));
  memset(got, TE_POISON_BYTE, bytes);
  d2h(k, got, out, bytes);
  int code, peer;
  ROK(k, tc_ar_error(ws_of(k, k->r), &code, &peer, 0));
  RCHECK(k, code == 0, "%s %s %s count %zu: error word %d (peer %d)", k->r, algo_name(algo),
         dt_name(dt), op ? "max" : "sum", count, code, peer);
  char what[128];
  snprintf(what, sizeof what, "%s %s %s count %zu%s%s", algo_name(algo), dt_name(dt),
           op ? "max" : "sum", count, in_off || out_off ? " unaligned" : "", inplace ? " in place" : "");
  check_result(k, got, (void *const *)ins, count, dt, op, algo, what);
  hash_bytes(k, got, bytes);
}

/* ---- tests ---- */

#define BIG_BYTES (2u << 20)

static void *xmalloc(size_t n) {
  void *p = malloc(n ? n : 1);
  ck_assert_ptr_nonnull(p);
  return p;
}

/* Every algorithm x dtype x op over sizes from 1 element to BIG_BYTES /
 * nranks-scaled, back to back (no host barrier between calls). */
static void body_matrix(struct rank *k) {
  static const size_t counts[] = {1, 2, 3, 7, 9, 31, 33, 127, 1000, 4097, 65537};
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
  size_t big = (k->n <= 4 ? BIG_BYTES : BIG_BYTES / 4);
  void *ins[MAXN];
  for (int s = 0; s < k->n; s++) ins[s] = malloc(big + 64);
  void *got = malloc(big + 64);
  tecore_devptr_t out;
  ROK(k, tecore_mem_alloc(big + 64, &out));
  uint64_t id = 0;
  /* the IPC protocols; NVLS needs a multicast object: t/comm/check_nvls */
  for (int algo = 0; algo <= TC_AR_LAMPORT; algo++)
    for (int d = 0; d < 3; d++)
      for (int op = 0; op < 2; op++) {
        tecore_dtype_t dt = dts[d];
        size_t ncounts = sizeof counts / sizeof counts[0];
        for (size_t i = 0; i <= ncounts; i++) {
          size_t count = i < ncounts ? counts[i] : big / esz(dt) - 3; /* odd, not 16-byte sized */
          if (algo == TC_AR_LAMPORT && count * esz(dt) > k->ws_max) continue;
          one_call(k, out, ins, got, algo, dt, op, count, 0, 0, 0, id++);
        }
        /* unaligned input and output (element paths), and in place */
        one_call(k, out, ins, got, algo, dt, op, 1001, esz(dt), esz(dt), 0, id++);
        one_call(k, out, ins, got, algo, dt, op, 333, 0, esz(dt), 0, id++);
        one_call(k, out, ins, got, algo, dt, op, 5000, 0, 0, 1, id++);
      }
  ROK(k, tecore_mem_free(out));
  for (int s = 0; s < k->n; s++) free(ins[s]);
  free(got);
}

static void matrix(int n) {
  if (gpus_short(n)) return;
  struct job j = {.n = n, .in_bytes = BIG_BYTES + 4096, .ws_max = 256u << 10, .body = body_matrix,
                  .victim = -1};
  run_job(&j);
  expect_all_ok(&j);
}

START_TEST(matrix_2) { matrix(2); }
END_TEST
START_TEST(matrix_3) { matrix(3); }
END_TEST
START_TEST(matrix_4) { matrix(4); }
END_TEST
START_TEST(matrix_8) { matrix(8); }
END_TEST

/* Many calls of changing algorithm, size and dtype: Lamport's buffer
 * rotation and re-arming after bigger and smaller calls, the barrier
 * counters of blocks that some calls do not use. */
static void body_mixed(struct rank *k) {
  void *ins[MAXN];
  size_t maxb = 64u << 10;
  for (int s = 0; s < k->n; s++) ins[s] = malloc(maxb);
  void *got = malloc(maxb);
  tecore_devptr_t out;
  ROK(k, tecore_mem_alloc(maxb, &out));
  for (uint64_t id = 0; id < 400; id++) {
    uint64_t st = mix(te_test_seed, 1000000 + id); /* the same draw on every rank */
    uint64_t u = te_splitmix64(&st);
    int algo = (int)(u % 3);
    tecore_dtype_t dt = (tecore_dtype_t)((u >> 8) % 3);
    int op = (int)((u >> 16) & 1);
    size_t count = 1 + (size_t)((u >> 20) % (maxb / esz(dt) - 1));
    if ((u >> 40) % 4 == 0) count = 1 + (size_t)((u >> 44) % 40);
    one_call(k, out, ins, got, algo, dt, op, count, 0, 0, 0, 2000000 + id);
  }
  ROK(k, tecore_mem_free(out));
  for (int s = 0; s < k->n; s++) free(ins[s]);
  free(got);
}

START_TEST(mixed_back_to_back) {
  int n = 3;
  if (gpus_short(2)) return;
  int cuda = 0;
  if (probe_devices(&cuda) < 3 && cuda) n = 2;
  struct job j = {.n = n, .in_bytes = 64u << 10, .ws_max = 64u << 10, .body = body_mixed,
                  .victim = -1};
  run_job(&j);
  expect_all_ok(&j);
}
END_TEST

/* Lamport under stress, the shape of the 2026-11-22 GPU failure and of the
 * races a three-buffer rotation invites: batches of back-to-back calls with
 * no host wait between them, each with new data in an input and an output
 * of its own; sizes that change from call to call (one element to several
 * blocks' worth, so the buffer a call re-arms is sometimes larger and
 * sometimes smaller than the next call's); and ranks of deliberately
 * different speeds (each batch, one drawn rank sleeps up to 300 us before
 * each enqueue, the others up to 20 us), so fast ranks run a call ahead of
 * slow ones, the window where a stale, half-written or re-armed granule
 * would be taken.  Every result is checked bit for bit. */
#define STRESS_BATCH 16
#define STRESS_BATCHES 12
/* bytes of a call at most: 16 KiB on vdev (three blocks' worth there), 512
 * KiB on a GPU (64 blocks of 512 threads, the size that failed) */
static size_t stress_slot;
static void body_lamport_stress(struct rank *k) {
  const size_t slot = stress_slot;
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F16, TECORE_DTYPE_F32};
  void *ins[STRESS_BATCH][MAXN], *got = malloc(slot);
  RCHECK(k, got, "malloc", k->r);
  for (int b = 0; b < STRESS_BATCH; b++)
    for (int s = 0; s < k->n; s++) RCHECK(k, (ins[b][s] = malloc(slot)) != NULL, "malloc", k->r);
  tecore_devptr_t out;
  ROK(k, tecore_mem_alloc((size_t)STRESS_BATCH * slot, &out));
  size_t count[STRESS_BATCH];
  tecore_dtype_t dt[STRESS_BATCH];
  for (uint64_t round = 0; round < STRESS_BATCHES; round++) {
    uint64_t st = mix(te_test_seed, 7000000 + round); /* the same draws on every rank */
    int slow = (int)(te_splitmix64(&st) % (uint64_t)k->n);
    uint64_t mine = mix(te_test_seed ^ 0x5157u, round * MAXN + (uint64_t)k->r);
    for (int b = 0; b < STRESS_BATCH; b++) {
      uint64_t u = te_splitmix64(&st), id = 7100000 + round * STRESS_BATCH + (uint64_t)b;
      dt[b] = dts[u % 3];
      size_t maxc = slot / esz(dt[b]);
      count[b] = (u >> 8) % 4 == 0 ? 1 + (size_t)((u >> 12) % 40) : 1 + (size_t)((u >> 12) % maxc);
      for (int s = 0; s < k->n; s++) gen_input(ins[b][s], dt[b], count[b], id, s);
      size_t bytes = count[b] * esz(dt[b]), off = (size_t)b * slot;
      /* no waits: the copy, the poison and the call queue behind the
       * previous calls (the host buffer lives until the batch is checked) */
      ROK(k, tecore_memcpy_async(in_of(k, k->r) + off, te_hptr(ins[b][k->r]), bytes, k->s));
      ROK(k, tecore_memset_d8_async(out + off, TE_POISON_BYTE, bytes, k->s));
      struct tc_ar_call c;
      call_init(k, &c, TC_AR_LAMPORT, dt[b], TC_AR_SUM, count[b], off, out + off);
      ROK(k, tc_ar_launch(&c, k->s));
      unsigned most = k->r == slow ? 300 : 20;
      usleep((useconds_t)(te_splitmix64(&mine) % (most + 1)));
    }
    ROK(k, tecore_stream_synchronize(k->s));
    int code, peer;
    ROK(k, tc_ar_error(ws_of(k, k->r), &code, &peer, 0));
    RCHECK(k, code == 0, "stress batch %llu: error word %d (peer %d)", k->r, (unsigned long long)round,
           code, peer);
    for (int b = 0; b < STRESS_BATCH; b++) {
      size_t bytes = count[b] * esz(dt[b]);
      memset(got, TE_POISON_BYTE, bytes);
      d2h(k, got, out + (size_t)b * slot, bytes);
      char what[96];
      snprintf(what, sizeof what, "stress batch %llu call %d (%s, count %zu, slow rank %d)",
               (unsigned long long)round, b, dt_name(dt[b]), count[b], slow);
      check_result(k, got, (void *const *)ins[b], count[b], dt[b], TC_AR_SUM,
                   TC_AR_LAMPORT, what);
      hash_bytes(k, got, bytes);
    }
  }
  ROK(k, tecore_mem_free(out));
  for (int b = 0; b < STRESS_BATCH; b++)
    for (int s = 0; s < k->n; s++) free(ins[b][s]);
  free(got);
}

static void lamport_stress(int n) {
  if (gpus_short(n)) return;
  int cuda = 0;
  probe_devices(&cuda);
  stress_slot = cuda ? 512u << 10 : 16u << 10;
  struct job j = {.n = n, .in_bytes = (size_t)STRESS_BATCH * stress_slot, .ws_max = stress_slot,
                  .body = body_lamport_stress, .victim = -1};
  run_job(&j);
  expect_all_ok(&j);
}
START_TEST(lamport_stress_skewed_ranks_2) { lamport_stress(2); }
END_TEST
START_TEST(lamport_stress_skewed_ranks_3) { lamport_stress(3); }
END_TEST
START_TEST(lamport_stress_skewed_ranks_8) { lamport_stress(8); }
END_TEST
/* The same with 32-thread blocks (TECOMM_LAMPORT_THREADS; the ranks read
 * it after the fork): more blocks a call, so the last-block counter
 * advance (ar_lam_rearm) runs on most calls, and the one-block calls get
 * a single warp. */
START_TEST(lamport_stress_one_warp_blocks_3) {
  ck_assert_int_eq(setenv("TECOMM_LAMPORT_THREADS", "32", 1), 0);
  lamport_stress(3);
  unsetenv("TECOMM_LAMPORT_THREADS");
}
END_TEST

/* A graph of the three algorithms (each after a captured copy of new data
 * into the pool) replayed 1000 times with new data: the epochs and the
 * Lamport counter come from device memory, so every replay is a new call. */
#define REPLAYS 1000
static void run_job_pdl(struct job *j, int pdl);
static void body_graph(struct rank *k) {
  const size_t count = 301;
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  size_t bytes = count * 2;
  tecore_devptr_t stage, out[3];
  ROK(k, tecore_mem_alloc(bytes, &stage));
  for (int a = 0; a < 3; a++) ROK(k, tecore_mem_alloc(bytes, &out[a]));
  ROK(k, tecore_stream_begin_capture(k->s, TECORE_CAPTURE_THREAD_LOCAL));
  for (int a = 0; a < 3; a++) {
    struct tc_ar_call c;
    call_init(k, &c, a, dt, TC_AR_SUM, count, 4096u * (unsigned)a, out[a]);
    ROK(k, tecore_memcpy_async(c.in[k->r], stage, bytes, k->s));
    ROK(k, tc_ar_launch(&c, k->s));
  }
  tecore_graph_t g;
  ROK(k, tecore_stream_end_capture(k->s, &g));
  tecore_graph_exec_t ge;
  ROK(k, tecore_graph_instantiate(&ge, g));
  void *ins[MAXN], *got = malloc(bytes);
  for (int s = 0; s < k->n; s++) ins[s] = malloc(bytes);
  for (int it = 0; it < REPLAYS; it++) {
    for (int s = 0; s < k->n; s++) gen_input(ins[s], dt, count, 3000000 + (uint64_t)it, s);
    h2d(k, stage, ins[k->r], bytes);
    for (int a = 0; a < 3; a++) ROK(k, tecore_memset_d8_async(out[a], TE_POISON_BYTE, bytes, k->s));
    ROK(k, tecore_graph_launch(ge, k->s));
    ROK(k, tecore_stream_synchronize(k->s));
    for (int a = 0; a < 3; a++) {
      memset(got, TE_POISON_BYTE, bytes);
      d2h(k, got, out[a], bytes);
      char what[64];
      snprintf(what, sizeof what, "replay %d %s", it, algo_name(a));
      check_result(k, got, (void *const *)ins, count, dt, TC_AR_SUM, a, what);
      hash_bytes(k, got, bytes);
    }
  }
  ROK(k, tecore_graph_exec_destroy(ge));
  ROK(k, tecore_graph_destroy(g));
  ROK(k, tecore_mem_free(stage));
  for (int a = 0; a < 3; a++) ROK(k, tecore_mem_free(out[a]));
  for (int s = 0; s < k->n; s++) free(ins[s]);
  free(got);
}

START_TEST(graph_replays_1000) {
  if (gpus_short(2)) return;
  struct job j = {.n = 2, .in_bytes = 16384, .ws_max = 4096, .body = body_graph, .victim = -1};
  run_job_pdl(&j, 1); /* programmatic launches (the default) over 1000 replays */
  expect_all_ok(&j);
}
END_TEST

/* ---- fused residual add + RMSNorm (+ FP8) ---- */

/* rows x hidden of dt, the fused call against the unfused kernels. */
enum { Q_NONE, Q_DELAYED, Q_CURRENT };
static void fused_case(struct rank *k, int algo, tecore_dtype_t dt, size_t rows, size_t hidden,
                       int qmode, int with_out, uint64_t id) {
  size_t count = rows * hidden, bytes = count * esz(dt);
  const float eps = 1e-5f;
  void *ins[MAXN];
  for (int s = 0; s < k->n; s++) {
    ins[s] = xmalloc(bytes);
    gen_input(ins[s], dt, count, id, s);
  }
  void *res = xmalloc(bytes), *gam = xmalloc(hidden * esz(dt));
  gen_input(res, dt, count, id, 100); /* the same residual and gamma on every rank */
  gen_input(gam, dt, hidden, id, 101);
  /* device buffers: fused outputs, then the unfused path's */
  tecore_devptr_t d_res, d_gam, f_res, f_out, f_q, u_ar, u_res, u_out, u_q, d_sc;
  ROK(k, tecore_mem_alloc(bytes, &d_res));
  ROK(k, tecore_mem_alloc(hidden * esz(dt), &d_gam));
  ROK(k, tecore_mem_alloc(bytes, &f_res));
  ROK(k, tecore_mem_alloc(bytes, &f_out));
  ROK(k, tecore_mem_alloc(count, &f_q));
  ROK(k, tecore_mem_alloc(bytes, &u_ar));
  ROK(k, tecore_mem_alloc(bytes, &u_res));
  ROK(k, tecore_mem_alloc(bytes, &u_out));
  ROK(k, tecore_mem_alloc(count, &u_q));
  ROK(k, tecore_mem_alloc(64, &d_sc)); /* [0..2] fused amax, scale, scale_inv; [4..6] unfused */
  h2d(k, d_res, res, bytes);
  h2d(k, d_gam, gam, hidden * esz(dt));
  float sc[8] = {0.0f, 0.5f, -1.0f, 0.0f, 0.0f, 0.5f, -1.0f, 0.0f};
  if (qmode == Q_CURRENT) sc[1] = sc[5] = -7.0f; /* written by the call */
  h2d(k, d_sc, sc, sizeof sc);
  ROK(k, tecore_memset_d8_async(f_res, TE_POISON_BYTE, bytes, k->s));
  ROK(k, tecore_memset_d8_async(f_out, TE_POISON_BYTE, bytes, k->s));
  ROK(k, tecore_memset_d8_async(f_q, TE_POISON_BYTE, count, k->s));
  ROK(k, tecore_memset_d8_async(u_q, TE_POISON_BYTE, count, k->s));

  struct tecore_tensor q[2];
  size_t shape[2] = {rows, hidden};
  for (int w = 0; w < 2; w++) {
    ROK(k, tecore_tensor_init(&q[w], TECORE_DTYPE_E4M3, 2, shape, w ? u_q : f_q));
    q[w].scaling = qmode == Q_CURRENT ? TECORE_SCALING_CURRENT : TECORE_SCALING_DELAYED;
    q[w].amax = d_sc + 16u * (unsigned)w;
    q[w].scale = d_sc + 16u * (unsigned)w + 4;
    q[w].scale_inv = d_sc + 16u * (unsigned)w + 8;
  }
  /* the fused call */
  h2d(k, in_of(k, k->r), ins[k->r], bytes);
  struct tc_ar_fused f = {.hidden = hidden, .eps = eps, .residual_in = d_res,
                              .residual_out = f_res, .gamma = d_gam,
                              .out = with_out ? f_out : 0,
                              .fp8_out = qmode != Q_NONE ? &q[0] : NULL};
  struct tc_ar_call c;
  call_init(k, &c, algo, dt, TC_AR_SUM, count, 0, 0);
  c.fused = &f;
  ROK(k, tc_ar_launch(&c, k->s));
  ROK(k, tecore_stream_synchronize(k->s));
  /* the unfused path: allreduce (a fresh copy of the input: two-shot
   * consumed it), add, norm */
  h2d(k, in_of(k, k->r), ins[k->r], bytes);
  call_init(k, &c, algo, dt, TC_AR_SUM, count, 0, u_ar);
  ROK(k, tc_ar_launch(&c, k->s));
  ROK(k, tecore_scale_add(u_res, u_ar, 1.0f, d_res, 1.0f, dt, count, k->s));
  struct tecore_tensor x, g, y;
  ROK(k, tecore_tensor_init(&x, dt, 2, shape, u_res));
  ROK(k, tecore_tensor_init(&g, dt, 1, &shape[1], d_gam));
  ROK(k, tecore_tensor_init(&y, dt, 2, shape, u_out));
  if (with_out) ROK(k, tecore_rmsnorm_fwd(&x, &g, eps, 0, &y, 0, k->s));
  if (qmode != Q_NONE) ROK(k, tecore_rmsnorm_fwd(&x, &g, eps, 0, &q[1], 0, k->s));
  ROK(k, tecore_stream_synchronize(k->s));
  int code, peer;
  ROK(k, tc_ar_error(ws_of(k, k->r), &code, &peer, 0));
  RCHECK(k, code == 0, "fused: error word %d (peer %d)", k->r, code, peer);

  char what[160];
  snprintf(what, sizeof what, "fused %s %s %zu x %zu%s%s", algo_name(algo), dt_name(dt), rows,
           hidden, qmode == Q_DELAYED ? " fp8 delayed" : qmode == Q_CURRENT ? " fp8 current" : "",
           with_out ? "" : " (fp8 only)");
  unsigned char *a = xmalloc(bytes), *b = xmalloc(bytes);
  d2h(k, a, f_res, bytes);
  d2h(k, b, u_res, bytes);
  for (size_t i = 0; i < bytes; i++)
    RCHECK(k, a[i] == b[i], "%s: residual_out byte %zu of %zu is 0x%02x, unfused 0x%02x", k->r,
           what, i, bytes, a[i], b[i]);
  hash_bytes(k, a, bytes);
  if (with_out) {
    d2h(k, a, f_out, bytes);
    d2h(k, b, u_out, bytes);
    for (size_t i = 0; i < bytes; i++)
      RCHECK(k, a[i] == b[i], "%s: out byte %zu of %zu is 0x%02x, unfused 0x%02x", k->r, what, i,
             bytes, a[i], b[i]);
    hash_bytes(k, a, bytes);
  }
  if (qmode != Q_NONE) {
    d2h(k, a, f_q, count);
    d2h(k, b, u_q, count);
    for (size_t i = 0; i < count; i++)
      RCHECK(k, a[i] == b[i], "%s: fp8 byte %zu of %zu is 0x%02x, unfused 0x%02x", k->r, what, i,
             count, a[i], b[i]);
    hash_bytes(k, a, count);
    float s2[8];
    d2h(k, s2, d_sc, sizeof s2);
    RCHECK(k, memcmp(&s2[0], &s2[4], 12) == 0,
           "%s: amax/scale/scale_inv %g %g %g, unfused %g %g %g", k->r, what, (double)s2[0],
           (double)s2[1], (double)s2[2], (double)s2[4], (double)s2[5], (double)s2[6]);
    RCHECK(k, s2[0] > 0.0f, "%s: amax %g not written", k->r, what, (double)s2[0]);
  }
  /* the residual against float64: the add of the allreduce, to half an ulp */
  d2h(k, a, f_res, bytes);
  for (size_t i = 0; i < count; i += 1 + count / 97) {
    double ref = te_ld(res, i, (int)dt);
    double sum = 0.0, mag = 0.0;
    for (int s = 0; s < k->n; s++) {
      sum += te_ld(ins[s], i, (int)dt);
      mag += fabs(te_ld(ins[s], i, (int)dt));
    }
    ref += sum;
    double ulp = dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
    double tol = 2 * ulp * (fabs(ref) + mag + fabs(te_ld(res, i, (int)dt))) + 1e-6;
    double got = te_ld(a, i, (int)dt);
    RCHECK(k, fabs(got - ref) <= tol, "%s: residual_out[%zu] %.9g, float64 %.9g (tolerance %g)",
           k->r, what, i, got, ref, tol);
  }
  free(a);
  free(b);
  tecore_devptr_t bufs[] = {d_res, d_gam, f_res, f_out, f_q, u_ar, u_res, u_out, u_q, d_sc};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ROK(k, tecore_mem_free(bufs[i]));
  for (int s = 0; s < k->n; s++) free(ins[s]);
  free(res);
  free(gam);
}

static void body_fused(struct rank *k) {
  static const tecore_dtype_t dts[] = {TECORE_DTYPE_BF16, TECORE_DTYPE_F16, TECORE_DTYPE_F32};
  /* 16384 and 2050 take the kernels built for blocks of more than 256
   * threads (vectors of 8 and of 1) */
  static const size_t shapes[][2] = {{1, 64},  {3, 1024}, {17, 256}, {2, 4096},
                                     {5, 100}, {4, 33},   {1, 16384}, {2, 2050}};
  uint64_t id = 5000000;
  for (int algo = 0; algo <= TC_AR_LAMPORT; algo++) /* IPC (NVLS: check_nvls) */
    for (int d = 0; d < 3; d++)
      for (size_t sh = 0; sh < sizeof shapes / sizeof shapes[0]; sh++) {
        size_t rows = shapes[sh][0], hidden = shapes[sh][1];
        if (algo == TC_AR_LAMPORT && hidden % 8) continue; /* refused: below */
        int qmode = (int)((sh + (size_t)d) % 3);
        fused_case(k, algo, dts[d], rows, hidden, qmode, 1, id++);
        if (sh == 1) fused_case(k, algo, dts[d], rows, hidden, Q_DELAYED, 0, id++);
      }
  /* Lamport's fused kernel needs 8-element rows: a clear refusal */
  tecore_devptr_t buf;
  ROK(k, tecore_mem_alloc(4096, &buf));
  struct tc_ar_fused f = {.hidden = 33, .eps = 1e-5f, .residual_in = buf,
                              .residual_out = buf + 1024, .gamma = buf + 2048, .out = buf + 3072};
  struct tc_ar_call c;
  call_init(k, &c, TC_AR_LAMPORT, TECORE_DTYPE_BF16, TC_AR_SUM, 66, 0, 0);
  c.fused = &f;
  tecore_result_t r = tc_ar_launch(&c, k->s);
  RCHECK(k, r == TECORE_ERR_NOT_SUPPORTED && strstr(tecore_last_error(), "hidden"),
         "fused Lamport with hidden 33: %s (%s)", k->r, tecore_result_name(r), tecore_last_error());
  ROK(k, tecore_mem_free(buf));
}

static void fused(int n) {
  if (gpus_short(n)) return;
  struct job j = {.n = n, .in_bytes = 1u << 20, .ws_max = 256u << 10, .body = body_fused,
                  .victim = -1};
  run_job(&j);
  expect_all_ok(&j);
}

START_TEST(fused_add_rmsnorm_2) { fused(2); }
END_TEST
START_TEST(fused_add_rmsnorm_4) { fused(4); }
END_TEST

/* ---- programmatic dependent launch ---- */

/* A chain of allreduce kernels, each reading what the one before it wrote
 * (the case programmatic dependent launch changes: on an sm_90 GPU with
 * TECOMM_PDL=1 each kernel starts while the previous one ends, and only
 * its griddepcontrol.wait keeps it from reading stale data), captured in
 * one graph in two parts -- the second appended with
 * tecore_stream_begin_capture_to_graph and holding a memset node that
 * tecore_graph_memsets_to_kernels replaces, both of which rebuild edges
 * next to programmatic ones on cuda -- and replayed with new data:
 *   copy stage -> R0;  Lamport R0 -> R1;  two-shot R1 -> R2;
 *   fused Lamport x = R2, residual res -> F1, out -> R3;
 *   fused one-shot x = R3, residual F1 -> F2, out -> R4;      (part 1)
 *   memset R6 (poison);  one-shot R4 -> R5;  Lamport R5 -> R6  (part 2)
 * Every stage is checked bit for bit: the plain ones against the fold over
 * ranks of the stage before (computed on the host: two-shot clobbers R1),
 * the fused ones against libtecore's unfused add and RMSNorm of that fold.
 * Run with TECOMM_PDL=0 and 1 (and the spread fused kernel off and on):
 * the outputs' hashes must be the same on every rank and in every run. */
#define PDL_ROWS 8
#define PDL_HIDDEN 1024
#define PDL_REGIONS 7
#define PDL_REPLAYS 300
static int pdl_mode;
static void fold_ref(void *want, void *const *ins, size_t count, tecore_dtype_t dt, int op,
                     int algo, int n) {
  for (size_t i = 0; i < count; i++) {
    float acc = in_value(ins[0], i, dt, algo);
    for (int s = 1; s < n; s++) acc = te_ar_op(acc, in_value(ins[s], i, dt, algo), op);
    te_st(want, i, (int)dt, acc);
  }
}

/* The unfused add + RMSNorm of the allreduce result ar (host bytes) and
 * the residual res (device), compared byte for byte with the fused
 * kernel's residual_out f_res and out f_out (device). */
static void pdl_check_fused(struct rank *k, const void *ar, tecore_devptr_t res,
                            tecore_devptr_t gamma, tecore_devptr_t f_res, tecore_devptr_t f_out,
                            tecore_devptr_t scratch, const char *what) {
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  size_t count = (size_t)PDL_ROWS * PDL_HIDDEN, bytes = count * 2;
  tecore_devptr_t u_ar = scratch, u_res = scratch + bytes, u_out = scratch + 2 * bytes;
  h2d(k, u_ar, ar, bytes);
  ROK(k, tecore_scale_add(u_res, u_ar, 1.0f, res, 1.0f, dt, count, k->s));
  size_t shape[2] = {PDL_ROWS, PDL_HIDDEN};
  struct tecore_tensor x, g, y;
  ROK(k, tecore_tensor_init(&x, dt, 2, shape, u_res));
  ROK(k, tecore_tensor_init(&g, dt, 1, &shape[1], gamma));
  ROK(k, tecore_tensor_init(&y, dt, 2, shape, u_out));
  ROK(k, tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0, &y, 0, k->s));
  unsigned char *a = xmalloc(bytes), *b = xmalloc(bytes);
  const tecore_devptr_t got[2] = {f_res, f_out}, want[2] = {u_res, u_out};
  for (int w = 0; w < 2; w++) {
    d2h(k, a, got[w], bytes);
    d2h(k, b, want[w], bytes);
    for (size_t i = 0; i < bytes; i++)
      RCHECK(k, a[i] == b[i], "%s: %s byte %zu of %zu is 0x%02x, unfused 0x%02x (TECOMM_PDL=%d)",
             k->r, what, w ? "out" : "residual_out", i, bytes, a[i], b[i], pdl_mode);
    hash_bytes(k, a, bytes);
  }
  free(a);
  free(b);
}

static void body_pdl_chain(struct rank *k) {
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  const size_t count = (size_t)PDL_ROWS * PDL_HIDDEN, bytes = count * 2, slot = 16384;
  RCHECK(k, bytes <= slot && bytes <= k->ws_max, "chain sizes", k->r);
  struct tecore_tunable_info ti;
  ROK(k, tecore_tunable_find("TECOMM_PDL", &ti));
  RCHECK(k, ti.value_int == pdl_mode && ti.set_in_env, "TECOMM_PDL reads %lld, want %d",
         k->r, (long long)ti.value_int, pdl_mode);
  tecore_devptr_t stage, res, gam, f1, f2, scratch;
  ROK(k, tecore_mem_alloc(bytes, &stage));
  ROK(k, tecore_mem_alloc(bytes, &res));
  ROK(k, tecore_mem_alloc(PDL_HIDDEN * 2, &gam));
  ROK(k, tecore_mem_alloc(bytes, &f1));
  ROK(k, tecore_mem_alloc(bytes, &f2));
  ROK(k, tecore_mem_alloc(3 * bytes, &scratch));
  void *hres = xmalloc(bytes), *hgam = xmalloc(PDL_HIDDEN * 2);
  gen_input(hres, dt, count, 8100000, 100); /* the same on every rank */
  gen_input(hgam, dt, PDL_HIDDEN, 8100000, 101);
  h2d(k, res, hres, bytes);
  h2d(k, gam, hgam, PDL_HIDDEN * 2);
#define R(i) (in_of(k, k->r) + (size_t)(i) * slot)
  struct tc_ar_call c;
  struct tc_ar_fused fa = {.hidden = PDL_HIDDEN, .eps = 1e-5f, .residual_in = res,
                               .residual_out = f1, .gamma = gam, .out = R(3)};
  struct tc_ar_fused fb = {.hidden = PDL_HIDDEN, .eps = 1e-5f, .residual_in = f1,
                               .residual_out = f2, .gamma = gam, .out = R(4)};
  tecore_graph_t g = NULL;
  ROK(k, tecore_stream_begin_capture(k->s, TECORE_CAPTURE_THREAD_LOCAL));
  ROK(k, tecore_memcpy_async(R(0), stage, bytes, k->s));
  call_init(k, &c, TC_AR_LAMPORT, dt, TC_AR_SUM, count, 0, R(1));
  ROK(k, tc_ar_launch(&c, k->s));
  call_init(k, &c, TC_AR_TWOSHOT, dt, TC_AR_SUM, count, slot, R(2));
  ROK(k, tc_ar_launch(&c, k->s));
  call_init(k, &c, TC_AR_LAMPORT, dt, TC_AR_SUM, count, 2 * slot, 0);
  c.fused = &fa;
  ROK(k, tc_ar_launch(&c, k->s));
  call_init(k, &c, TC_AR_ONESHOT, dt, TC_AR_SUM, count, 3 * slot, 0);
  c.fused = &fb;
  ROK(k, tc_ar_launch(&c, k->s));
  ROK(k, tecore_stream_end_capture(k->s, &g));
  ROK(k, tecore_stream_begin_capture_to_graph(k->s, g, TECORE_CAPTURE_THREAD_LOCAL));
  ROK(k, tecore_memset_d8_async(R(6), TE_POISON_BYTE, bytes, k->s));
  call_init(k, &c, TC_AR_ONESHOT, dt, TC_AR_SUM, count, 4 * slot, R(5));
  ROK(k, tc_ar_launch(&c, k->s));
  call_init(k, &c, TC_AR_LAMPORT, dt, TC_AR_SUM, count, 5 * slot, R(6));
  ROK(k, tc_ar_launch(&c, k->s));
  tecore_graph_t g2 = NULL;
  ROK(k, tecore_stream_end_capture(k->s, &g2));
  RCHECK(k, g2 == g, "capture to graph returned another graph", k->r);
  size_t replaced = 0;
  ROK(k, tecore_graph_memsets_to_kernels(g, &replaced));
  RCHECK(k, replaced == 1, "%zu memset nodes replaced, want 1", k->r, replaced);
  tecore_graph_exec_t ge;
  ROK(k, tecore_graph_instantiate(&ge, g));

  void *ins[MAXN], *same[MAXN], *e1 = xmalloc(bytes), *want = xmalloc(bytes);
  void *got[PDL_REGIONS];
  for (int s = 0; s < k->n; s++) ins[s] = xmalloc(bytes);
  for (int i = 0; i < PDL_REGIONS; i++) got[i] = xmalloc(bytes);
  for (int it = 0; it < PDL_REPLAYS; it++) {
    for (int s = 0; s < k->n; s++) gen_input(ins[s], dt, count, 8200000 + (uint64_t)it, s);
    h2d(k, stage, ins[k->r], bytes);
    for (int i = 1; i < PDL_REGIONS; i++)
      ROK(k, tecore_memset_d8_async(R(i), TE_POISON_BYTE, bytes, k->s));
    ROK(k, tecore_memset_d8_async(f1, TE_POISON_BYTE, bytes, k->s));
    ROK(k, tecore_memset_d8_async(f2, TE_POISON_BYTE, bytes, k->s));
    ROK(k, tecore_graph_launch(ge, k->s));
    ROK(k, tecore_stream_synchronize(k->s));
    int code, peer;
    ROK(k, tc_ar_error(ws_of(k, k->r), &code, &peer, 0));
    RCHECK(k, code == 0, "chain replay %d: error word %d (peer %d)", k->r, it, code, peer);
    for (int i = 2; i < PDL_REGIONS; i++) d2h(k, got[i], R(i), bytes);
    char what[96];
    /* two-shot's input R1 is gone: its expected value is the Lamport fold */
    fold_ref(e1, (void *const *)ins, count, dt, TC_AR_SUM, TC_AR_LAMPORT, k->n);
    for (int s = 0; s < k->n; s++) same[s] = e1;
    snprintf(what, sizeof what, "chain replay %d two-shot R2 (TECOMM_PDL=%d)", it, pdl_mode);
    check_result(k, got[2], (void *const *)same, count, dt, TC_AR_SUM, TC_AR_TWOSHOT, what);
    hash_bytes(k, got[2], bytes);
    for (int s = 0; s < k->n; s++) same[s] = got[2];
    fold_ref(want, (void *const *)same, count, dt, TC_AR_SUM, TC_AR_LAMPORT, k->n);
    snprintf(what, sizeof what, "chain replay %d fused Lamport", it);
    pdl_check_fused(k, want, res, gam, f1, R(3), scratch, what);
    for (int s = 0; s < k->n; s++) same[s] = got[3];
    fold_ref(want, (void *const *)same, count, dt, TC_AR_SUM, TC_AR_ONESHOT, k->n);
    snprintf(what, sizeof what, "chain replay %d fused one-shot", it);
    pdl_check_fused(k, want, f1, gam, f2, R(4), scratch, what);
    for (int i = 5; i < PDL_REGIONS; i++) {
      for (int s = 0; s < k->n; s++) same[s] = got[i - 1];
      int algo = i == 5 ? TC_AR_ONESHOT : TC_AR_LAMPORT;
      snprintf(what, sizeof what, "chain replay %d %s R%d (TECOMM_PDL=%d)", it, algo_name(algo), i,
               pdl_mode);
      check_result(k, got[i], (void *const *)same, count, dt, TC_AR_SUM, algo, what);
      hash_bytes(k, got[i], bytes);
    }
  }
#undef R
  ROK(k, tecore_graph_exec_destroy(ge));
  ROK(k, tecore_graph_destroy(g));
  tecore_devptr_t bufs[] = {stage, res, gam, f1, f2, scratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ROK(k, tecore_mem_free(bufs[i]));
  for (int s = 0; s < k->n; s++) free(ins[s]);
  for (int i = 0; i < PDL_REGIONS; i++) free(got[i]);
  free(e1);
  free(want);
  free(hres);
  free(hgam);
}

/* job j with TECOMM_PDL=pdl in its ranks (they read it after the fork;
 * the test process never does) */
static void run_job_pdl(struct job *j, int pdl) {
  pdl_mode = pdl;
  ck_assert_int_eq(setenv("TECOMM_PDL", pdl ? "1" : "0", 1), 0);
  run_job(j);
  unsetenv("TECOMM_PDL");
}

/* The chain with TECOMM_PDL and TECOMM_FUSED_SPREAD (the fused Lamport
 * kernel over 2-4x the plan's threads: hidden 1024 takes it) off, both on,
 * and PDL alone: the same bits every time. */
static void pdl_chain(int n) {
  if (gpus_short(n)) return;
  static const int modes[3][2] = {{0, 0}, {1, 1}, {1, 0}}; /* pdl, spread */
  uint64_t hash[3];
  for (int m = 0; m < 3; m++) {
    struct job j = {.n = n, .in_bytes = PDL_REGIONS * 16384, .ws_max = 16384,
                    .body = body_pdl_chain, .victim = -1};
    ck_assert_int_eq(setenv("TECOMM_FUSED_SPREAD", modes[m][1] ? "1" : "0", 1), 0);
    run_job_pdl(&j, modes[m][0]);
    unsetenv("TECOMM_FUSED_SPREAD");
    expect_all_ok(&j);
    hash[m] = j.done[0].hash;
    ck_assert_msg(hash[m] == hash[0],
                  "the chain's outputs with TECOMM_PDL=%d TECOMM_FUSED_SPREAD=%d differ from "
                  "those with both 0 (hash %016llx vs %016llx)",
                  modes[m][0], modes[m][1], (unsigned long long)hash[m],
                  (unsigned long long)hash[0]);
  }
}

START_TEST(pdl_chain_same_bits_2) { pdl_chain(2); }
END_TEST
START_TEST(pdl_chain_same_bits_3) { pdl_chain(3); }
END_TEST

/* ---- a rank killed mid-collective ---- */

#define KILL_TIMEOUT_NS 1000000000ull
/* 0: the victim dies during plain one-shot, two-shot and Lamport calls in
 * turn; 1: during fused two-shot calls (rows of 250 bf16). */
static int kill_fused;
static void body_kill(struct rank *k) {
  size_t count = 20000;
  tecore_devptr_t out; /* plain: the output; fused: residual_in, _out, out, gamma */
  ROK(k, tecore_mem_alloc(count * 8, &out));
  struct tc_ar_fused f = {.hidden = 250, .eps = 1e-5f, .residual_in = out,
                              .residual_out = out + count * 2, .out = out + count * 4,
                              .gamma = out + count * 6};
  if (kill_fused) ROK(k, tecore_memset_d32_async(out, 0x3f803f80u, count * 2, k->s)); /* 1.0 */
  for (uint64_t i = 0;; i++) {
    struct tc_ar_call c;
    if (kill_fused) {
      /* fresh inputs: the call sums over them */
      ROK(k, tecore_memset_d32_async(in_of(k, k->r), 0x3f003f00u, count / 2, k->s));
      call_init(k, &c, TC_AR_TWOSHOT, TECORE_DTYPE_BF16, TC_AR_SUM, count, 0, 0);
      c.fused = &f;
    } else {
      call_init(k, &c, (int)(i % 3), TECORE_DTYPE_F32, TC_AR_SUM, count, 0, out);
    }
    c.timeout_ns = KILL_TIMEOUT_NS;
    ROK(k, tc_ar_launch(&c, k->s));
    tecore_result_t r = te_stream_wait(k->s, 30000);
    RCHECK(k, r == TECORE_SUCCESS, "call %llu: the stream did not finish in 30 s: %s", k->r,
           (unsigned long long)i, tecore_result_name(r));
    int code, peer;
    ROK(k, tc_ar_error(ws_of(k, k->r), &code, &peer, 0));
    if (code) {
      k->done.t_ns = mono_ns();
      k->done.code = code;
      k->done.peer = peer;
      /* later calls return at once: the rank has failed */
      int64_t t0 = mono_ns();
      ROK(k, tc_ar_launch(&c, k->s));
      ROK(k, tecore_stream_synchronize(k->s));
      RCHECK(k, mono_ns() - t0 < 500000000, "a call after the timeout took %lld ms", k->r,
             (long long)((mono_ns() - t0) / 1000000));
      break;
    }
  }
  ROK(k, tecore_mem_free(out));
  rank_say(k, "ok");
  _exit(0); /* no teardown barrier: the victim is gone */
}

/* Rank 2 of 3 killed 400 ms in: ranks 0 and 1 return TC_AR_ERR_TIMEOUT
 * naming it within the timeout + 1 s, and nothing hangs. */
static void killed_rank(int fused) {
  if (gpus_short(3)) return;
  struct job j = {.n = 3, .in_bytes = 1u << 20, .ws_max = 256u << 10, .body = body_kill,
                  .victim = 2, .kill_after_ms = 400};
  kill_fused = fused;
  run_job(&j);
  ck_assert_msg(WIFSIGNALED(j.status[2]) && WTERMSIG(j.status[2]) == SIGKILL,
                "the victim's status 0x%x", j.status[2]);
  for (int r = 0; r < 2; r++) {
    ck_assert_msg(strcmp(j.done[r].text, "ok") == 0, "%s", j.done[r].text);
    ck_assert_msg(j.done[r].code == TC_AR_ERR_TIMEOUT, "rank %d: error code %d, want timeout",
                  r, j.done[r].code);
    ck_assert_msg(j.done[r].peer == 2, "rank %d: the timeout names peer %d, want 2", r,
                  j.done[r].peer);
    int64_t late = j.done[r].t_ns - j.t_kill;
    ck_assert_msg(late <= (int64_t)KILL_TIMEOUT_NS + 1000000000ll,
                  "rank %d saw the timeout %lld ms after the kill (timeout 1000 ms + 1 s)", r,
                  (long long)(late / 1000000));
  }
}

START_TEST(killed_rank_times_out) { killed_rank(0); }
END_TEST

/* ---- the fused two-shot by rows (TECOMM_FUSED_TWOSHOT) ---- */

/* The fused two-shot (kernels/common/comm_ar.h: reduce-scatter by rows,
 * the epilogue from each row's owner) on the shapes its row split makes
 * hard: rows not divisible by the ranks, one row, fewer rows than ranks,
 * row groups that a chunk boundary cuts (hidden 64: groups of 16 rows, 3
 * blocks on vdev), hidden not a multiple of 8 (vectors of 1), the fast
 * kernel's shape (4096), the wide build (2050: 1024 threads a row), f32,
 * FP8 delayed and current; each bit for bit against the unfused kernels
 * and the residual against float64 (fused_case).  fused_rows_variant is
 * the TECOMM_FUSED_TWOSHOT the job runs under. */
static int fused_rows_variant;
static void body_fused_rows(struct rank *k) {
  static const struct {
    size_t rows, hidden;
    tecore_dtype_t dt;
    int q, with_out;
  } cases[] = {
      {1, 4096, TECORE_DTYPE_BF16, Q_NONE, 1},    {2, 256, TECORE_DTYPE_F16, Q_DELAYED, 1},
      {7, 1024, TECORE_DTYPE_BF16, Q_CURRENT, 1}, {100, 64, TECORE_DTYPE_BF16, Q_DELAYED, 1},
      {37, 64, TECORE_DTYPE_F16, Q_NONE, 1},      {9, 33, TECORE_DTYPE_BF16, Q_CURRENT, 1},
      {5, 100, TECORE_DTYPE_F32, Q_DELAYED, 1},   {3, 2050, TECORE_DTYPE_F16, Q_NONE, 1},
      {6, 4096, TECORE_DTYPE_F32, Q_NONE, 1},     {11, 128, TECORE_DTYPE_BF16, Q_DELAYED, 0},
      {3, 16384, TECORE_DTYPE_BF16, Q_NONE, 1},
  };
  const char *v = tc_ar_fused_twoshot_variant();
  RCHECK(k, strncmp(v, fused_rows_variant ? "rows" : "gather", 4) == 0,
         "TECOMM_FUSED_TWOSHOT=%d runs \"%s\"", k->r, fused_rows_variant, v);
  uint64_t id = 9100000;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    fused_case(k, TC_AR_TWOSHOT, cases[i].dt, cases[i].rows, cases[i].hidden, cases[i].q,
               cases[i].with_out, id++);
}

/* Both variants: each against the unfused kernels, every rank the same
 * bits, and the two variants the same bits. */
static void fused_rows(int n) {
  if (gpus_short(n)) return;
  uint64_t hash[2];
  for (int v = 0; v < 2; v++) {
    struct job j = {.n = n, .in_bytes = 1u << 20, .ws_max = 64u << 10, .body = body_fused_rows,
                    .victim = -1};
    fused_rows_variant = v;
    ck_assert_int_eq(setenv("TECOMM_FUSED_TWOSHOT", v ? "1" : "0", 1), 0);
    run_job(&j);
    unsetenv("TECOMM_FUSED_TWOSHOT");
    expect_all_ok(&j);
    hash[v] = j.done[0].hash;
  }
  ck_assert_msg(hash[0] == hash[1],
                "the fused two-shot's outputs differ between TECOMM_FUSED_TWOSHOT=0 and 1 "
                "(hash %016llx vs %016llx)",
                (unsigned long long)hash[0], (unsigned long long)hash[1]);
}

START_TEST(fused_twoshot_rows_2) { fused_rows(2); }
END_TEST
START_TEST(fused_twoshot_rows_3) { fused_rows(3); }
END_TEST
START_TEST(fused_twoshot_rows_4) { fused_rows(4); }
END_TEST

/* The fused two-shot captured once and replayed with new data: the
 * graph's copy of the input into the symmetric slot, then the kernel
 * (its three barriers take their phases from device memory, so every
 * replay runs fresh ones).  Each replay against the unfused kernels. */
#define ROWS_REPLAYS 40
static void body_fused_rows_graph(struct rank *k) {
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  const size_t count = (size_t)PDL_ROWS * PDL_HIDDEN, bytes = count * 2;
  tecore_devptr_t stage, res, gam, f1, scratch;
  ROK(k, tecore_mem_alloc(bytes, &stage));
  ROK(k, tecore_mem_alloc(bytes, &res));
  ROK(k, tecore_mem_alloc(PDL_HIDDEN * 2, &gam));
  ROK(k, tecore_mem_alloc(bytes, &f1));
  ROK(k, tecore_mem_alloc(3 * bytes, &scratch));
  void *hres = xmalloc(bytes), *hgam = xmalloc(PDL_HIDDEN * 2);
  gen_input(hres, dt, count, 9300000, 100);
  gen_input(hgam, dt, PDL_HIDDEN, 9300000, 101);
  h2d(k, res, hres, bytes);
  h2d(k, gam, hgam, PDL_HIDDEN * 2);
  const tecore_devptr_t x = in_of(k, k->r), out = in_of(k, k->r) + bytes;
  struct tc_ar_fused f = {.hidden = PDL_HIDDEN, .eps = 1e-5f, .residual_in = res,
                              .residual_out = f1, .gamma = gam, .out = out};
  struct tc_ar_call c;
  call_init(k, &c, TC_AR_TWOSHOT, dt, TC_AR_SUM, count, 0, 0);
  c.fused = &f;
  tecore_graph_t g = NULL;
  tecore_graph_exec_t ge;
  ROK(k, tecore_stream_begin_capture(k->s, TECORE_CAPTURE_THREAD_LOCAL));
  ROK(k, tecore_memcpy_async(x, stage, bytes, k->s));
  ROK(k, tc_ar_launch(&c, k->s));
  ROK(k, tecore_stream_end_capture(k->s, &g));
  ROK(k, tecore_graph_instantiate(&ge, g));
  void *ins[MAXN], *want = xmalloc(bytes);
  for (int s = 0; s < k->n; s++) ins[s] = xmalloc(bytes);
  for (int it = 0; it < ROWS_REPLAYS; it++) {
    for (int s = 0; s < k->n; s++) gen_input(ins[s], dt, count, 9400000 + (uint64_t)it, s);
    h2d(k, stage, ins[k->r], bytes);
    ROK(k, tecore_memset_d8_async(f1, TE_POISON_BYTE, bytes, k->s));
    ROK(k, tecore_memset_d8_async(out, TE_POISON_BYTE, bytes, k->s));
    ROK(k, tecore_graph_launch(ge, k->s));
    ROK(k, tecore_stream_synchronize(k->s));
    int code, peer;
    ROK(k, tc_ar_error(ws_of(k, k->r), &code, &peer, 0));
    RCHECK(k, code == 0, "fused two-shot replay %d: error word %d (peer %d)", k->r, it, code, peer);
    fold_ref(want, (void *const *)ins, count, dt, TC_AR_SUM, TC_AR_TWOSHOT, k->n);
    char what[96];
    snprintf(what, sizeof what, "fused two-shot replay %d", it);
    pdl_check_fused(k, want, res, gam, f1, out, scratch, what);
  }
  ROK(k, tecore_graph_exec_destroy(ge));
  ROK(k, tecore_graph_destroy(g));
  tecore_devptr_t bufs[] = {stage, res, gam, f1, scratch};
  for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) ROK(k, tecore_mem_free(bufs[i]));
  for (int s = 0; s < k->n; s++) free(ins[s]);
  free(want);
  free(hres);
  free(hgam);
}

START_TEST(fused_twoshot_graph_replays) {
  if (gpus_short(3)) return;
  struct job j = {.n = 3, .in_bytes = 2 * PDL_ROWS * PDL_HIDDEN * 2, .ws_max = 16384,
                  .body = body_fused_rows_graph, .victim = -1};
  run_job_pdl(&j, 1);
  expect_all_ok(&j);
}
END_TEST

/* The kill test with the victim dying during fused two-shot calls: the
 * kernel's three barriers are bounded like every other protocol's wait. */
START_TEST(fused_twoshot_killed_rank_times_out) {
  ck_assert_int_eq(setenv("TECOMM_FUSED_TWOSHOT", "1", 1), 0);
  killed_rank(1);
  unsetenv("TECOMM_FUSED_TWOSHOT");
}
END_TEST

/* ---- abort releases waiters (own workspace, and a peer's) ---- */

static void body_abort(struct rank *k) {
  size_t count = 1000;
  tecore_devptr_t out;
  ROK(k, tecore_mem_alloc(count * 2, &out));
  struct tc_ar_call c;
  call_init(k, &c, TC_AR_ONESHOT, TECORE_DTYPE_BF16, TC_AR_SUM, count, 0, out);
  c.timeout_ns = 0; /* unbounded: only the abort ends the wait */
  if (k->r == 0) {
    /* rank 1 never joins: abort our own waiters */
    ROK(k, tc_ar_launch(&c, k->s));
    te_sleep_ms(300);
    int64_t t0 = mono_ns();
    ROK(k, tc_ar_abort(ws_of(k, 0)));
    tecore_result_t r = te_stream_wait(k->s, 5000);
    RCHECK(k, r == TECORE_SUCCESS, "abort did not release the waiter in 5 s (%s)", k->r,
           tecore_result_name(r));
    RCHECK(k, mono_ns() - t0 < 1000000000, "abort took %lld ms", k->r,
           (long long)((mono_ns() - t0) / 1000000));
    int code, peer;
    ROK(k, tc_ar_error(ws_of(k, 0), &code, &peer, 1));
    RCHECK(k, code == TC_AR_ERR_ABORTED && peer == 1, "error %d peer %d, want aborted, 1",
           k->r, code, peer);
    ROK(k, tc_ar_error(ws_of(k, 0), &code, &peer, 0));
    RCHECK(k, code == 0, "the error word was not cleared (%d)", k->r, code);
  }
  rank_barrier(k);
  if (k->r == 1) {
    /* now rank 1 waits alone, and rank 0 aborts it through the mapping */
    ROK(k, tc_ar_launch(&c, k->s));
    tecore_result_t r = te_stream_wait(k->s, 5000);
    RCHECK(k, r == TECORE_SUCCESS, "the peer's abort did not release the waiter (%s)", k->r,
           tecore_result_name(r));
    int code, peer;
    ROK(k, tc_ar_error(ws_of(k, 1), &code, &peer, 0));
    RCHECK(k, code == TC_AR_ERR_ABORTED && peer == 0, "error %d peer %d, want aborted, 0",
           k->r, code, peer);
  } else {
    te_sleep_ms(300);
    ROK(k, tc_ar_abort(ws_of(k, 1)));
  }
  ROK(k, tecore_mem_free(out));
}

START_TEST(abort_releases_waiters) {
  if (gpus_short(2)) return;
  struct job j = {.n = 2, .in_bytes = 4096, .ws_max = 4096, .body = body_abort, .victim = -1};
  run_job(&j);
  expect_all_ok(&j);
}
END_TEST

/* ---- argument checks (one process) ---- */

START_TEST(bad_arguments) {
  size_t wsb = tc_ar_workspace_bytes(2, 4096);
  ck_assert_uint_gt(wsb, 4096);
  ck_assert_uint_eq(tc_ar_workspace_bytes(0, 4096), 0);
  ck_assert_uint_eq(tc_ar_workspace_bytes(9, 4096), 0);
  ck_assert_uint_eq(tc_ar_max_bytes(TC_AR_LAMPORT, 2, 4096), 4096);
  ck_assert_int_eq(tc_ar_clobbers_input(TC_AR_TWOSHOT), 1);
  ck_assert_int_eq(tc_ar_clobbers_input(TC_AR_ONESHOT), 0);
  tecore_devptr_t ws = te_dalloc(wsb), buf = te_dalloc(8192);
  TE_EXPECT_INVALID("ws", tc_ar_workspace_init(0, 2, 4096, te_stream));
  TE_EXPECT_INVALID("aligned", tc_ar_workspace_init(ws + 4, 2, 4096, te_stream));
  TE_EXPECT_INVALID("nranks", tc_ar_workspace_init(ws, 0, 4096, te_stream));
  TE_OK(tc_ar_workspace_init(ws, 2, 4096, te_stream));
  struct tc_ar_call c = {.algo = TC_AR_ONESHOT, .op = TC_AR_SUM,
                             .dtype = TECORE_DTYPE_BF16, .count = 100, .rank = 0, .nranks = 2,
                             .ws = {ws, ws}, .in = {buf, buf + 1024}, .out = buf + 4096,
                             .ws_max_bytes = 4096};
  struct tc_ar_call b;
  TE_EXPECT_INVALID("call", tc_ar_launch(NULL, te_stream));
  b = c; b.algo = (tc_ar_algo_t)7;
  TE_EXPECT_INVALID("algo", tc_ar_launch(&b, te_stream));
  b = c; b.op = (tc_ar_op_t)5;
  TE_EXPECT_INVALID("op", tc_ar_launch(&b, te_stream));
  b = c; b.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("dtype", tc_ar_launch(&b, te_stream));
  b = c; b.nranks = 9;
  TE_EXPECT_INVALID("nranks", tc_ar_launch(&b, te_stream));
  b = c; b.rank = 2;
  TE_EXPECT_INVALID("rank", tc_ar_launch(&b, te_stream));
  b = c; b.ws[1] = 0;
  TE_EXPECT_INVALID("ws[1]", tc_ar_launch(&b, te_stream));
  b = c; b.ws[1] = ws + 8;
  TE_EXPECT_INVALID("ws[1]", tc_ar_launch(&b, te_stream));
  b = c; b.in[1] = 0;
  TE_EXPECT_INVALID("in[1]", tc_ar_launch(&b, te_stream));
  b = c; b.out = 0;
  TE_EXPECT_INVALID("out", tc_ar_launch(&b, te_stream));
  b = c; b.algo = TC_AR_LAMPORT; b.count = 4000;
  TE_EXPECT_INVALID("Lamport", tc_ar_launch(&b, te_stream));
  b = c; b.algo = TC_AR_LAMPORT; b.ws_max_bytes = 0;
  TE_EXPECT_INVALID("ws_max_bytes", tc_ar_launch(&b, te_stream));
  /* the copy-engine one-shot: its scratch, 2 ranks at least */
  ck_assert_int_eq(tc_ar_clobbers_input(TC_AR_CE), 0);
  ck_assert_uint_eq(tc_ar_ce_scratch_bytes(2, 100, TECORE_DTYPE_BF16), 208);
  ck_assert_uint_eq(tc_ar_ce_scratch_bytes(4, 100, TECORE_DTYPE_F32), 3 * 400);
  ck_assert_uint_eq(tc_ar_ce_scratch_bytes(1, 100, TECORE_DTYPE_BF16), 0);
  ck_assert_uint_eq(tc_ar_ce_scratch_bytes(9, 100, TECORE_DTYPE_BF16), 0);
  ck_assert_uint_eq(tc_ar_ce_scratch_bytes(2, SIZE_MAX / 2, TECORE_DTYPE_BF16), 0);
  b = c; b.algo = TC_AR_CE;
  TE_EXPECT_INVALID("scratch", tc_ar_launch(&b, te_stream));
  b.scratch = buf + 5120; b.scratch_bytes = 207;
  TE_EXPECT_INVALID("208 bytes", tc_ar_launch(&b, te_stream));
  b.scratch_bytes = 208; b.scratch = buf + 5128;
  TE_EXPECT_INVALID("aligned scratch", tc_ar_launch(&b, te_stream));
  b.scratch = buf + 5120; b.nranks = 1; b.in[1] = 0;
  TE_EXPECT_INVALID("2 or more ranks", tc_ar_launch(&b, te_stream));
  struct tc_ar_fused f = {.hidden = 30, .eps = 1e-5f, .residual_in = buf,
                              .residual_out = buf + 4096, .gamma = buf + 6000, .out = buf + 7000};
  b = c; b.fused = &f;
  TE_EXPECT_INVALID("hidden", tc_ar_launch(&b, te_stream));
  f.hidden = 50; f.gamma = 0;
  TE_EXPECT_INVALID("gamma", tc_ar_launch(&b, te_stream));
  f.gamma = buf + 6000; f.out = 0;
  TE_EXPECT_INVALID("fp8_out", tc_ar_launch(&b, te_stream));
  struct tecore_tensor q;
  size_t shape[2] = {2, 50};
  TE_OK(tecore_tensor_init(&q, TECORE_DTYPE_BF16, 2, shape, buf));
  f.fp8_out = &q;
  TE_EXPECT_INVALID("E4M3", tc_ar_launch(&b, te_stream));
  f.fp8_out = NULL; f.out = buf + 7000; f.eps = -1.0f;
  TE_EXPECT_INVALID("eps", tc_ar_launch(&b, te_stream));
  int code, peer;
  TE_EXPECT_INVALID("code", tc_ar_error(ws, NULL, &peer, 0));
  TE_EXPECT_INVALID("ws", tc_ar_error(0, &code, &peer, 0));
  TE_EXPECT_INVALID("ws", tc_ar_abort(0));
  TE_OK(tc_ar_error(ws, &code, &peer, 0));
  ck_assert_int_eq(code, 0);
  ck_assert_int_eq(peer, -1);
  /* count 0 is a no-op */
  b = c; b.count = 0;
  TE_OK(tc_ar_launch(&b, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(buf));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("comm_ar");
  TCase *tc = te_tcase(s, "args", 1);
  tcase_add_test(tc, bad_arguments);
  tc = te_tcase(s, "protocols", 0);
  tcase_add_test(tc, matrix_2);
  tcase_add_test(tc, matrix_3);
  tcase_add_test(tc, matrix_4);
  tcase_add_test(tc, matrix_8);
  tcase_add_test(tc, mixed_back_to_back);
  tcase_add_test(tc, graph_replays_1000);
  tc = te_tcase(s, "stress", 0); /* CK_RUN_CASE=stress runs these alone */
  tcase_add_test(tc, lamport_stress_skewed_ranks_2);
  tcase_add_test(tc, lamport_stress_skewed_ranks_3);
  tcase_add_test(tc, lamport_stress_skewed_ranks_8);
  tcase_add_test(tc, lamport_stress_one_warp_blocks_3);
  tc = te_tcase(s, "fused", 0);
  tcase_add_test(tc, fused_add_rmsnorm_2);
  tcase_add_test(tc, fused_add_rmsnorm_4);
  tc = te_tcase(s, "fused_twoshot", 0); /* CK_RUN_CASE=fused_twoshot runs these alone */
  tcase_add_test(tc, fused_twoshot_rows_2);
  tcase_add_test(tc, fused_twoshot_rows_3);
  tcase_add_test(tc, fused_twoshot_rows_4);
  tcase_add_test(tc, fused_twoshot_graph_replays);
  tcase_add_test(tc, fused_twoshot_killed_rank_times_out);
  tc = te_tcase(s, "pdl", 0);
  tcase_add_test(tc, pdl_chain_same_bits_2);
  tcase_add_test(tc, pdl_chain_same_bits_3);
  tc = te_tcase(s, "failures", 0);
  tcase_add_test(tc, killed_rank_times_out);
  tcase_add_test(tc, abort_releases_waiters);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
