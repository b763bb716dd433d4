/* SPDX-License-Identifier: Apache-2.0 */
/* comm_ranks.h -- ranks as forked processes for the libtecomm suites.
 *
 * A test calls tc_run_ranks(n, fn, arg): the test's process (which never
 * touches the device: on cuda a context does not survive fork) forks n
 * ranks; each opens a communicator through a caller-callbacks bootstrap
 * over shared memory (tc_boot_shm: an allgather and a sense-reversing
 * barrier, both bounded, so a dead rank fails the others instead of
 * hanging them), runs fn, and exits.  A rank reports a failure by writing
 * a message to its slot and exiting 1 (RK_ASSERT / RK_OK); the test then
 * fails naming the rank and the message.  Each rank leaves a digest of
 * what it wants compared across ranks in its slot (tc_rank_digest), so
 * the test can assert identical bits everywhere.
 *
 * Devices: rank r uses device r (vdev shows 8: the suites set
 * TECORE_VDEV_DEVICES; on cuda with fewer GPUs than ranks every rank
 * skips, and the test says so on its TAP output).
 * TE_T_RANKS_LOCK names a file: each multi-rank case then holds an
 * exclusive lock on it while its ranks run, so that the cases of suites
 * run in parallel (make -j) take the GPUs one at a time.  On GPUs a
 * case's ranks spin in their kernels waiting for each other; cases of
 * several suites time-slicing the same GPUs make every collective wait
 * until all of its ranks are scheduled at once.  Time spent waiting for
 * the lock counts against the test's Check timeout
 * (CK_TIMEOUT_MULTIPLIER). 
 * Every rank draws from its own stream seeded by (seed, rank), and can
 * regenerate any peer's inputs from (seed, peer) for the reference
 * (tc_make_input: rank r's elements of one case, in F32, BF16 or F16). */
#ifndef TE_T_COMM_RANKS_H
#define TE_T_COMM_RANKS_H

#include "tests.h"
#include <fcntl.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <te/comm.h>
#include "common/convert.h"

#define TC_MAX_RANKS 8
#define TC_SLOT 4096

struct tc_shm {
  atomic_int arrived;
  atomic_int sense;
  int n;
  int dead_rank;                    /* a rank the test killed: waits give up on it */
  char msg[TC_MAX_RANKS][1024];
  uint64_t digest[TC_MAX_RANKS];
  int skipped[TC_MAX_RANKS];
  double value[TC_MAX_RANKS][4];    /* numbers a rank reports to the test */
  int turn[TC_MAX_RANKS];            /* a rank's step in an ordered sequence (the test's) */
  unsigned char slot[TC_MAX_RANKS][TC_SLOT];
};

static struct tc_shm *tc_shm;
static int tc_my_rank = -1;

/* Bounded sense-reversing barrier over the shared page (20 s). */
static TE_T_UNUSED int tc_shm_barrier(void *ctx) {
  struct tc_shm *s = ctx;
  int my_sense = !atomic_load(&s->sense);
  if (atomic_fetch_add(&s->arrived, 1) == s->n - 1) {
    atomic_store(&s->arrived, 0);
    atomic_store(&s->sense, my_sense);
    return 0;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&s->sense) != my_sense) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > 20) return -1;
    usleep(50);
  }
  return 0;
}

static TE_T_UNUSED int tc_shm_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  struct tc_shm *s = ctx;
  if (bytes > TC_SLOT) return -2;
  if (tc_shm_barrier(s)) return -1; /* everyone has read the previous round */
  memcpy(s->slot[tc_my_rank], send, bytes);
  if (tc_shm_barrier(s)) return -1;
  for (int r = 0; r < s->n; r++) memcpy((char *)recv + (size_t)r * bytes, s->slot[r], bytes);
  return 0;
}

static TE_T_UNUSED struct tecomm_bootstrap tc_boot_shm(void) {
  struct tecomm_bootstrap b;
  memset(&b, 0, sizeof b);
  b.kind = TECOMM_BOOTSTRAP_CALLBACKS;
  b.allgather = tc_shm_allgather;
  b.barrier = tc_shm_barrier;
  b.ctx = tc_shm;
  return b;
}

/* ---- failing a rank ---------------------------------------------------------- */
static TE_T_UNUSED void tc_rank_fail(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
static TE_T_UNUSED void tc_rank_fail(const char *file, int line, const char *fmt, ...) {
  char *m = tc_shm->msg[tc_my_rank];
  int k = snprintf(m, sizeof tc_shm->msg[0], "%s:%d: ", file, line);
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(m + k, sizeof tc_shm->msg[0] - (size_t)k, fmt, ap);
  va_end(ap);
  _exit(1);
}
#define RK_ASSERT(cond, ...)                                                   \
  do {                                                                         \
    if (!(cond)) tc_rank_fail(__FILE__, __LINE__, __VA_ARGS__);                \
  } while (0)
#define RK_OK(call)                                                            \
  do {                                                                         \
    tecomm_result_t rk_r_ = (tecomm_result_t)(call);                           \
    RK_ASSERT(rk_r_ == TECOMM_SUCCESS, "%s returned %d: %s", #call, (int)rk_r_, \
              tecomm_last_error());                                            \
  } while (0)
#define RK_CORE(call)                                                          \
  do {                                                                         \
    tecore_result_t rk_c_ = (call);                                            \
    RK_ASSERT(rk_c_ == TECORE_SUCCESS, "%s returned %s: %s", #call,            \
              tecore_result_name(rk_c_), tecore_last_error());                 \
  } while (0)
/* Asserts a libtecomm call fails with code and a detail naming what. */
#define RK_EXPECT(code, what, call)                                            \
  do {                                                                         \
    tecore_clear_error();                                                      \
    tecomm_result_t rk_r_ = (call);                                            \
    const char *rk_d_ = tecomm_last_error();                                   \
    RK_ASSERT(rk_r_ == (code), "%s returned %s, expected %s (detail: %s)", #call, \
              tecomm_result_name(rk_r_), tecomm_result_name(code), rk_d_);     \
    RK_ASSERT(!(what) || strstr(rk_d_, (what)), "%s: detail \"%s\" lacks \"%s\"", \
              #call, rk_d_, (what) ? (what) : "");                             \
  } while (0)

/* Folds bytes into this rank's digest (FNV-1a). */
static TE_T_UNUSED void tc_rank_digest(const void *p, size_t n) {
  const unsigned char *b = p;
  uint64_t h = tc_shm->digest[tc_my_rank] ? tc_shm->digest[tc_my_rank] : 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  tc_shm->digest[tc_my_rank] = h;
}

/* ---- inputs ------------------------------------------------------------------------ */
/* Elements of F32, BF16 or F16 buffers as numbers. */
static TE_T_UNUSED double tc_from_dt(const void *p, size_t i, tecore_dtype_t dt) {
  if (dt == TECORE_DTYPE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == TECORE_DTYPE_BF16 ? te_bf16_to_f32(h) : te_f16_to_f32(h);
}
static TE_T_UNUSED void tc_to_dt(void *p, size_t i, tecore_dtype_t dt, float v) {
  if (dt == TECORE_DTYPE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = dt == TECORE_DTYPE_BF16 ? te_f32_to_bf16(v) : te_f32_to_f16(v);
}

/* Rank r's input for one case: random in [-2, 2), in dtype; the same on
 * every rank that regenerates it. */
static TE_T_UNUSED void tc_make_input(void *p, size_t count, tecore_dtype_t dt, int r, uint64_t salt) {
  uint64_t x = te_test_seed ^ ((uint64_t)(r + 1) << 40) ^ (salt * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < count; i++) {
    uint64_t u = te_splitmix64(&x);
    float v = (float)((double)(u >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    if (v == 0.0f) v = 0.5f; /* never exact zeros (and so no -0.0: Lamport's sentinel) */
    tc_to_dt(p, i, dt, v);
  }
}

/* ---- running ranks ------------------------------------------------------------ */
typedef void (*tc_rank_fn)(int rank, int nranks, void *arg);

/* The rank's own random stream: (test seed, rank, salt). */
static TE_T_UNUSED void tc_rank_seed(int rank, uint64_t salt) {
  te_rng_seed(te_test_seed ^ (0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1)) ^ (salt << 17));
}

/* 1 when this rank's device does not exist (cuda with fewer GPUs). */
static TE_T_UNUSED int tc_rank_no_device(int rank) {
  int count = 0;
  if (tecore_device_count(&count) != TECORE_SUCCESS) return 1;
  return rank >= count;
}

/* The job's secret for the TCP rendezvous (libtecomm(7), SECURITY), as a
 * launcher makes one: 32 random bytes as hex in TECOMM_SECRET, unless
 * the environment has one.  The ranks inherit it. */
static TE_T_UNUSED void tc_job_secret(void) {
  if (getenv("TECOMM_SECRET") || getenv("TECOMM_SECRET_FILE")) return;
  unsigned char b[32];
  char hex[65];
  FILE *f = fopen("/dev/urandom", "rb");
  ck_assert_msg(f && fread(b, 1, sizeof b, f) == sizeof b, "/dev/urandom");
  fclose(f);
  for (int i = 0; i < 32; i++) snprintf(hex + 2 * i, 3, "%02x", b[i]);
  setenv("TECOMM_SECRET", hex, 1);
}

/* After tc_run_ranks: 1 when its ranks did not run (on cuda with fewer
 * GPUs than ranks; the TAP output says so): what they would have left in
 * tc_shm is not there to check. */
static TE_T_UNUSED int tc_ranks_skipped(int n) {
  int skipped = 0;
  for (int r = 0; r < n; r++) skipped |= tc_shm->skipped[r];
  return skipped;
}

/* TE_T_RANKS_LOCK (above): the lock held (its descriptor; closing it,
 * or the process's end, lets the next case go), or -1 without one. */
static TE_T_UNUSED int tc_ranks_lock(int n) {
  const char *path = getenv("TE_T_RANKS_LOCK");
  if (n < 2 || !path || !*path) return -1;
  int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  ck_assert_msg(fd >= 0, "TE_T_RANKS_LOCK %s: %s", path, strerror(errno));
  while (flock(fd, LOCK_EX) != 0)
    ck_assert_msg(errno == EINTR, "TE_T_RANKS_LOCK %s: flock: %s", path, strerror(errno));
  return fd;
}

/* Forks n ranks running fn; asserts every one exited 0 within timeout_s.
 * kill_rank >= 0: that rank is expected to die of SIGKILL (it kills
 * itself); the others must still exit 0. */
static TE_T_UNUSED void tc_run_ranks_ex(int n, tc_rank_fn fn, void *arg, int timeout_s,
                                        int kill_rank) {
  ck_assert_int_le(n, TC_MAX_RANKS);
  const int lock = tc_ranks_lock(n);
  tc_shm = mmap(NULL, sizeof *tc_shm, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_msg(tc_shm != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(tc_shm, 0, sizeof *tc_shm);
  tc_shm->n = n;
  tc_shm->dead_rank = kill_rank;
  tc_job_secret();
  pid_t pid[TC_MAX_RANKS], parent = getpid();
  fflush(stdout);
  fflush(stderr);
  for (int r = 0; r < n; r++) {
    pid[r] = fork();
    ck_assert_msg(pid[r] >= 0, "fork: %s", strerror(errno));
    if (pid[r] == 0) {
      /* a test process Check kills (its timeout) takes its ranks along */
      (void)prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (getppid() != parent) _exit(1);
      tc_my_rank = r;
      tc_rank_seed(r, 0);
      /* every rank needs its own device: with fewer GPUs than ranks all
       * ranks skip together (decided after a barrier, so none waits) */
      tc_shm->skipped[r] = tc_rank_no_device(r);
      if (tc_shm_barrier(tc_shm) != 0) tc_rank_fail(__FILE__, __LINE__, "start barrier");
      for (int k = 0; k < n; k++)
        if (tc_shm->skipped[k]) _exit(0);
      fn(r, n, arg);
      _exit(0);
    }
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  int status[TC_MAX_RANKS], done = 0, left = n;
  for (int r = 0; r < n; r++) status[r] = -1;
  while (left > 0) {
    for (int r = 0; r < n; r++) {
      if (status[r] != -1) continue;
      int st = 0;
      if (waitpid(pid[r], &st, WNOHANG) == pid[r]) {
        status[r] = st;
        left--;
      }
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (left > 0 && t1.tv_sec - t0.tv_sec > timeout_s) {
      for (int r = 0; r < n; r++)
        if (status[r] == -1) kill(pid[r], SIGKILL);
      for (int r = 0; r < n; r++)
        if (status[r] == -1) waitpid(pid[r], &status[r], 0);
      if (lock >= 0) close(lock);
      ck_abort_msg("ranks still running after %d s (a hang)", timeout_s);
    }
    if (left > 0) usleep(2000);
  }
  (void)done;
  if (lock >= 0) close(lock);   /* the ranks are gone: the next case may run */
  const int skipped = tc_ranks_skipped(n);
  if (skipped) printf("# %d ranks need %d devices: not run here\n", n, n);
  /* every failed rank says why (a rank that fails first can make the
   * others fail later, waiting for it: the first message is not always
   * the cause) */
  for (int r = 0; r < n; r++)
    if (r != kill_rank && !(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0))
      printf("# rank %d failed (status 0x%x): %s\n", r, status[r],
             tc_shm->msg[r][0] ? tc_shm->msg[r] : "(no message: crashed?)");
  for (int r = 0; r < n; r++) {
    if (r == kill_rank && !skipped) { /* a skipped run kills no one */
      ck_assert_msg(WIFSIGNALED(status[r]) && WTERMSIG(status[r]) == SIGKILL,
                    "rank %d was to die of SIGKILL (status 0x%x)", r, status[r]);
      continue;
    }
    ck_assert_msg(WIFEXITED(status[r]) && WEXITSTATUS(status[r]) == 0,
                  "rank %d of %d failed (status 0x%x): %s", r, n, status[r],
                  tc_shm->msg[r][0] ? tc_shm->msg[r] : "(no message: crashed?)");
  }
}

static TE_T_UNUSED void tc_run_ranks(int n, tc_rank_fn fn, void *arg, int timeout_s) {
  tc_run_ranks_ex(n, fn, arg, timeout_s, -1);
}

/* After tc_run_ranks: every rank's digest is the same. */
static TE_T_UNUSED void tc_expect_same_digest(int n, const char *what) {
  for (int r = 1; r < n; r++)
    ck_assert_msg(tc_shm->digest[r] == tc_shm->digest[0],
                  "%s: rank %d's bits differ from rank 0's (digest %016llx vs %016llx)", what, r,
                  (unsigned long long)tc_shm->digest[r], (unsigned long long)tc_shm->digest[0]);
}

static TE_T_UNUSED void tc_shm_release(void) {
  if (tc_shm) munmap(tc_shm, sizeof *tc_shm);
  tc_shm = NULL;
}

/* Opens the rank's communicator on device rank with the shared-memory
 * bootstrap; exits the rank quietly when its device does not exist. */
/* 1 when the ranks run on vdev: probed once in a child of the test
 * process (which never opens the device itself: on cuda a context does
 * not survive fork), before any rank is forked; tc_run_backend names
 * the backend. */
static int tc_vdev_run = -1;
static char tc_run_backend[32];
static TE_T_UNUSED int tc_on_vdev(void) {
  if (tc_vdev_run < 0) {
    char detail[512];
    tc_vdev_run = te_probe_init(detail, sizeof detail, tc_run_backend, sizeof tc_run_backend) ==
                      TECORE_SUCCESS &&
                  strcmp(tc_run_backend, "vdev") == 0;
  }
  return tc_vdev_run;
}

static TE_T_UNUSED tecomm_comm_t tc_rank_comm(int rank, int nranks) {
  struct tecomm_bootstrap b = tc_boot_shm();
  tecomm_comm_t c = NULL;
  RK_OK(tecomm_comm_init(rank, nranks, rank, &b, &c));
  RK_ASSERT(c, "tecomm_comm_init gave no communicator");
  return c;
}

#endif
