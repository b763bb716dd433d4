/* SPDX-License-Identifier: Apache-2.0 */
/* check_agree.c -- ranks that make different allreduce calls, at
 * each level of the chain that t/comm/check_misuse.c does not cover
 * (issue 28): ranks as forked processes (t/lib/comm_ranks.h), each level
 * forced:
 *   - nccl: tecomm_allreduce_algo(..., TECOMM_ALGO_NCCL) on vdev's NCCL
 *     emulation (libtecomm/nccl/nccl_vdev.c), 2 ranks, at the pool level and
 *     at the NCCL level itself (TECOMM_TEST_FAIL=ipc:1), where a rank
 *     whose communicator failed is also named at once by the peers that
 *     wait for it;
 *   - verbs flat: the soft verbs device (TECOMM_VERBS_LIB=soft), ranks of
 *     two "nodes" (TECOMM_NODE_MAP=0,1), TECOMM_ALGO=verbs;
 *   - verbs hierarchical: 2 nodes x 2 ranks (TECOMM_NODE_MAP=0,0,1,1);
 *   - the fused Lamport kernel (IPC, allreduce + add + RMSNorm), whose
 *     vdev twin compares the descriptor granule of its slots.
 * The last rank makes a different call (count, dtype, op, or the fused
 * call's eps or hidden): every rank must get TECOMM_ERR_MISMATCH naming
 * the field and both values (the call itself at the NCCL and verbs
 * levels, which agree on the host before enqueueing; status for the
 * kernels), within TECOMM_TIMEOUT, with every output still holding its
 * poison, and the error sticky.  A matching call at each level still sums
 * right against a float64 reference (before, a mismatch there was a
 * timeout on some ranks and SUCCESS on others, or an NCCL hang). */
#include "comm_ranks.h"
#include <math.h>
#include <signal.h>
#include <stdint.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

enum level { L_NCCL, L_NCCL_LEVEL, L_VERBS_FLAT, L_VERBS_HIER, L_LAMPORT };
enum kind { K_MATCH, K_COUNT, K_DTYPE, K_OP, K_EPS, K_HIDDEN, K_GONE, K_KILLED };

struct acase {
  const char *name;
  enum level level;
  enum kind kind;
  const char *field, *val, *odd_val; /* in the detail: the field, rank 0's and the odd rank's */
};

static const struct acase cases[] = {
    {"nccl: match", L_NCCL, K_MATCH, NULL, NULL, NULL},
    {"nccl: count", L_NCCL, K_COUNT, "count", "3000", "3001"},
    {"nccl: dtype", L_NCCL, K_DTYPE, "dtype", "f32", "bf16"},
    {"nccl: op", L_NCCL, K_OP, "op", "SUM", "MAX"},
    {"nccl: fused eps", L_NCCL, K_EPS, "eps (fused)", "1e-05", "1e-06"},
    {"nccl: fused hidden", L_NCCL, K_HIDDEN, "hidden (fused)", "512", "1024"},
    {"nccl level: match", L_NCCL_LEVEL, K_MATCH, NULL, NULL, NULL},
    {"nccl level: count", L_NCCL_LEVEL, K_COUNT, "count", "3000", "3001"},
    {"nccl level: a failed rank is named at once", L_NCCL_LEVEL, K_GONE, NULL, NULL, NULL},
    {"nccl level: a killed rank is found before NCCL", L_NCCL_LEVEL, K_KILLED, NULL, NULL, NULL},
    {"verbs flat: match", L_VERBS_FLAT, K_MATCH, NULL, NULL, NULL},
    {"verbs flat: count", L_VERBS_FLAT, K_COUNT, "count", "3000", "3001"},
    {"verbs flat: dtype", L_VERBS_FLAT, K_DTYPE, "dtype", "f32", "bf16"},
    {"verbs flat: fused eps", L_VERBS_FLAT, K_EPS, "eps (fused)", "1e-05", "1e-06"},
    {"verbs hier: match", L_VERBS_HIER, K_MATCH, NULL, NULL, NULL},
    {"verbs hier: count", L_VERBS_HIER, K_COUNT, "count", "3000", "3001"},
    {"verbs hier: op", L_VERBS_HIER, K_OP, "op", "SUM", "MAX"},
    {"verbs hier: a failed rank is named at once", L_VERBS_HIER, K_GONE, NULL, NULL, NULL},
    {"fused lamport: eps", L_LAMPORT, K_EPS, "eps (fused)", "1e-05", "1e-06"},
};

static int case_ranks(const struct acase *k) { return k->level == L_VERBS_HIER ? 4 : 2; }

/* The level, forced (as t/comm/check_verbs.c forces verbs: the links
 * ahead of it off). */
static void set_level_env(enum level l) {
  setenv("TECOMM_TIMEOUT", "2000", 1);
  /* the NCCL level itself: the pool and the workspace fail on rank 1, so
   * every rank takes the next link (libtecomm(7), Fallback chain) */
  if (l == L_NCCL_LEVEL) setenv("TECOMM_TEST_FAIL", "ipc:1", 1);
  if (l == L_VERBS_FLAT || l == L_VERBS_HIER) {
    setenv("TECOMM_VERBS_LIB", "soft", 1);
    setenv("TECOMM_NODE_MAP", l == L_VERBS_FLAT ? "0,1" : "0,0,1,1", 1);
    setenv("TECOMM_POOL_MB", "16", 1);
    setenv("TECOMM_NCCL", "0", 1);
    setenv("TECOMM_MNNVL_ENABLE", "0", 1);
    setenv("TECOMM_ALGO", "verbs", 1);
  }
}

static tecomm_algo_t level_algo(enum level l) {
  return l == L_NCCL ? TECOMM_ALGO_NCCL : l == L_LAMPORT ? TECOMM_ALGO_LAMPORT : TECOMM_ALGO_AUTO;
}

/* One rank's call, as the case makes it. */
struct call {
  size_t count, rows, hidden;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  float eps;
  int fused;
};

static struct call my_call(const struct acase *k, int odd) {
  struct call c = {3000, 0, 0, TECORE_DTYPE_F32, TECOMM_SUM, 1e-5f, 0};
  if (k->kind == K_EPS || k->kind == K_HIDDEN || k->level == L_LAMPORT) {
    c = (struct call){2048, 4, 512, TECORE_DTYPE_BF16, TECOMM_SUM, 1e-5f, 1};
    if (odd && k->kind == K_EPS) c.eps = 1e-6f;
    if (odd && k->kind == K_HIDDEN) c.rows = 2, c.hidden = 1024;
    return c;
  }
  if (odd && k->kind == K_COUNT) c.count = 3001;
  if (odd && k->kind == K_DTYPE) c.dtype = TECORE_DTYPE_BF16;
  if (odd && k->kind == K_OP) c.op = TECOMM_MAX;
  return c;
}

/* A poisoned device buffer of bytes, and a check that it still is. */
static tecore_devptr_t poisoned(size_t bytes) {
  tecore_devptr_t d = 0;
  RK_CORE(tecore_mem_alloc(bytes, &d));
  RK_CORE(tecore_memset_d8_async(d, 0x5a, bytes, NULL));
  return d;
}
static void still_poisoned(tecore_devptr_t d, size_t bytes, const char *what, const char *name) {
  unsigned char *h = malloc(bytes);
  RK_ASSERT(h, "out of host memory");
  RK_CORE(tecore_memcpy(te_hptr(h), d, bytes));
  for (size_t i = 0; i < bytes; i++)
    RK_ASSERT(h[i] == 0x5a, "%s: byte %zu of %s was written (0x%02x)", name, i, what, h[i]);
  free(h);
}

/* The fused call on this rank: every output poisoned, the call's result. */
static tecomm_result_t fused_call(tecomm_comm_t c, const struct call *m, tecomm_algo_t algo,
                                  int rank, tecore_devptr_t *outs) {
  size_t n = m->rows * m->hidden, es = tecore_dtype_size(m->dtype), bytes = n * es;
  void *h = malloc(bytes);
  RK_ASSERT(h, "out of host memory");
  tecore_devptr_t x = 0, rin = 0, g = 0;
  RK_CORE(tecore_mem_alloc(bytes, &x));
  RK_CORE(tecore_mem_alloc(bytes, &rin));
  RK_CORE(tecore_mem_alloc(m->hidden * es, &g));
  tc_make_input(h, n, m->dtype, rank, 3);
  RK_CORE(tecore_memcpy(x, te_hptr(h), bytes));
  tc_make_input(h, n, m->dtype, rank, 4);
  RK_CORE(tecore_memcpy(rin, te_hptr(h), bytes));
  tc_make_input(h, m->hidden, m->dtype, 0, 5);
  RK_CORE(tecore_memcpy(g, te_hptr(h), m->hidden * es));
  outs[0] = poisoned(bytes); /* residual_out */
  outs[1] = poisoned(bytes); /* out */
  RK_CORE(tecore_ctx_synchronize());
  struct tecomm_add_rmsnorm a = {.x = x, .rows = m->rows, .hidden = m->hidden,
                                 .dtype = m->dtype, .residual_in = rin, .residual_out = outs[0],
                                 .gamma = g, .eps = m->eps, .out = outs[1], .algo = algo};
  tecomm_result_t r = tecomm_allreduce_add_rmsnorm(c, &a, NULL);
  free(h);
  return r;
}

/* SUM tolerance against the float64 sum, mag the sum of magnitudes: every
 * path folds n F32 inputs with at most n - 1 F32 additions (NCCL's
 * emulation, one-shot inside a node, the verbs ring or recursive
 * doubling), each off by at most half an ulp of a partial sum <= mag, so
 * (n - 1) 2^-24 mag bounds the error; twice that is the tolerance.
 * Observed over 200 seeds (TE_TEST_SEED=1..200), in 2^-24 mag: nccl and
 * verbs flat (n 2) 1.000 (the bound is reached: a sum at a power of
 * two), verbs hierarchical (n 4) 1.89 (the tolerances: 2 and 6). */
static double sum_tol(int n, double mag) { return 2.0 * (n - 1) * 0x1p-24 * mag + 1e-30; }

static void rank_match(const struct acase *k, tecomm_comm_t c, int rank, int n) {
  const size_t count = 3000, bytes = count * 4;
  float *in = malloc(bytes), *peer = malloc(bytes), *got = malloc(bytes);
  double *ref = calloc(count, sizeof *ref), *mag = calloc(count, sizeof *mag);
  RK_ASSERT(in && peer && got && ref && mag, "out of host memory");
  tc_make_input(in, count, TECORE_DTYPE_F32, rank, 11);
  for (int r = 0; r < n; r++) {
    tc_make_input(peer, count, TECORE_DTYPE_F32, r, 11);
    for (size_t i = 0; i < count; i++) ref[i] += peer[i], mag[i] += fabs(peer[i]);
  }
  tecore_devptr_t send = 0, recv = poisoned(bytes);
  RK_CORE(tecore_mem_alloc(bytes, &send));
  RK_CORE(tecore_memcpy(send, te_hptr(in), bytes));
  for (int rep = 0; rep < 3; rep++) { /* the sequence numbers move on alike */
    RK_CORE(tecore_memset_d8_async(recv, 0xff, bytes, NULL));
    RK_OK(tecomm_allreduce_algo(c, send, recv, count, TECORE_DTYPE_F32, TECOMM_SUM,
                                level_algo(k->level), NULL));
    RK_CORE(tecore_ctx_synchronize());
    RK_CORE(tecore_memcpy(te_hptr(got), recv, bytes));
    double worst = 0.0;
    for (size_t i = 0; i < count; i++) {
      double e = fabs((double)got[i] - ref[i]), tol = sum_tol(n, mag[i]);
      RK_ASSERT(e <= tol, "%s: element %zu: %.9g, float64 %.9g (tolerance %.3g)", k->name, i,
                (double)got[i], ref[i], tol);
      if (mag[i] > 0 && e / (mag[i] * 0x1p-24) > worst) worst = e / (mag[i] * 0x1p-24);
    }
    if (rank == 0 && rep == 0) {
      printf("# %s: worst error %.3f x 2^-24 x magnitude\n", k->name, worst);
      fflush(stdout);
    }
  }
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_mem_free(send));
  RK_CORE(tecore_mem_free(recv));
  free(in), free(peer), free(got), free(ref), free(mag);
}

/* Destroy after a failure, rank by rank in rank order: each rank waits
 * until every rank before it, but the dead rank skip, has returned from
 * its destroy.  A failed communicator's destroy must not wait for its
 * peers: were it to enter the closing barrier, the peers (still holding
 * their communicators, waiting their turn) would never come, and it would
 * fail with TECOMM_ERR_TIMEOUT.  That, not a wall-clock bound, is the
 * check: on a GPU the driver's unmapping of the pool alone took 2.3 s
 * beside nine other suites (4 H200s), more than TECOMM_TIMEOUT.  The
 * bound of 20 s only keeps a hang from passing.  The caller has freed its
 * buffers: the communicator may hold the context's last reference. */
static void destroy_in_turn(tecomm_comm_t c, int rank, int skip, const char *name) {
  for (int r = 0; r < rank; r++) {
    if (r == skip) continue;
    double t0 = now_s();
    while (__atomic_load_n(&tc_shm->turn[r], __ATOMIC_ACQUIRE) != 1) {
      RK_ASSERT(now_s() - t0 < 30.0, "%s: rank %d never returned from its destroy", name, r);
      usleep(200);
    }
  }
  double t0 = now_s();
  tecore_clear_error();
  tecomm_result_t r = tecomm_comm_destroy(c);
  RK_ASSERT(r == TECOMM_SUCCESS, "%s: destroy after the failure, the ranks after this one "
            "still holding theirs: %s (%s)", name, tecomm_result_name(r), tecomm_last_error());
  RK_ASSERT(now_s() - t0 < 20.0, "%s: destroy after the failure took %.2f s", name, now_s() - t0);
  __atomic_store_n(&tc_shm->turn[rank], 1, __ATOMIC_RELEASE);
}

/* The last rank's communicator fails (an abort) and it refuses its next
 * call; the others, waiting in the host agreement of that call, return
 * TECOMM_ERR_TIMEOUT naming it at once, not after TECOMM_TIMEOUT (2 s),
 * with recv still poisoned (before: a bootstrap error naming no rank,
 * after the whole timeout). */
static void rank_gone(const struct acase *k, tecomm_comm_t c, int rank, int n) {
  const size_t count = 1000, bytes = count * 4;
  tecore_devptr_t send = poisoned(bytes), recv = poisoned(bytes);
  RK_CORE(tecore_ctx_synchronize());
  RK_OK(tecomm_allreduce(c, send, recv, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_CORE(tecore_ctx_synchronize());
  RK_CORE(tecore_memset_d8_async(recv, 0x5a, bytes, NULL));
  RK_CORE(tecore_ctx_synchronize());
  double t0 = now_s();
  if (rank == n - 1) {
    RK_OK(tecomm_comm_abort(c));
    RK_EXPECT(TECOMM_ERR_ABORTED, "aborted",
              tecomm_allreduce(c, send, recv, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  } else {
    char gone[64];
    snprintf(gone, sizeof gone, "rank %d cannot make this call", n - 1);
    const char *want = gone;
    RK_EXPECT(TECOMM_ERR_TIMEOUT, want,
              tecomm_allreduce(c, send, recv, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
    int peer = -2;
    RK_EXPECT(TECOMM_ERR_TIMEOUT, want, tecomm_comm_status(c, &peer));
    RK_ASSERT(peer == n - 1, "%s: status named peer %d", k->name, peer);
    RK_ASSERT(now_s() - t0 < 1.0, "%s: told after %.2f s (TECOMM_TIMEOUT 2 s)", k->name,
              now_s() - t0);
  }
  RK_CORE(tecore_ctx_synchronize());
  still_poisoned(recv, bytes, "recv", k->name);
  RK_CORE(tecore_mem_free(send));
  RK_CORE(tecore_mem_free(recv));
  destroy_in_turn(c, rank, -1, k->name);
}

/* The last rank dies between two calls: the others' next call finds it
 * gone in the host agreement and returns TECOMM_ERR_TIMEOUT at once
 * (nothing enqueued, recv still poisoned), not NCCL's error after
 * TECOMM_TIMEOUT. */
static void rank_killed(const struct acase *k, tecomm_comm_t c, int rank, int n) {
  const size_t count = 1000, bytes = count * 4;
  tecore_devptr_t buf = poisoned(bytes), recv = poisoned(bytes);
  RK_CORE(tecore_ctx_synchronize());
  RK_OK(tecomm_allreduce(c, buf, recv, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_CORE(tecore_ctx_synchronize());
  RK_CORE(tecore_memset_d8_async(recv, 0x5a, bytes, NULL));
  RK_CORE(tecore_ctx_synchronize());
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL);
  double t0 = now_s();
  RK_EXPECT(TECOMM_ERR_TIMEOUT, "not every rank came to the host agreement",
            tecomm_allreduce(c, buf, recv, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_ASSERT(now_s() - t0 < 2.5, "%s: found after %.2f s (TECOMM_TIMEOUT 2 s)", k->name,
            now_s() - t0);
  RK_EXPECT(TECOMM_ERR_TIMEOUT, "host agreement", tecomm_comm_status(c, NULL));
  RK_CORE(tecore_ctx_synchronize());
  still_poisoned(recv, bytes, "recv", k->name);
  RK_CORE(tecore_mem_free(buf));
  RK_CORE(tecore_mem_free(recv));
  destroy_in_turn(c, rank, n - 1, k->name);
}

static void rank_agree(int rank, int n, void *arg) {
  const struct acase *k = arg;
  set_level_env(k->level);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  if (k->level != L_NCCL && k->level != L_LAMPORT) {
    const char *want = k->level == L_NCCL_LEVEL ? "level: nccl" : "level: verbs";
    char d[4096];
    RK_OK(tecomm_comm_describe(c, 4096, d, sizeof d));
    RK_ASSERT(strstr(d, want), "%s: not at the %s:\n%s", k->name, want, d);
  }
  if (k->kind == K_GONE || k->kind == K_KILLED) {
    (k->kind == K_GONE ? rank_gone : rank_killed)(k, c, rank, n);
    return;
  }
  if (k->kind == K_MATCH) {
    rank_match(k, c, rank, n);
    RK_OK(tecomm_comm_destroy(c));
    return;
  }
  /* the rank's own hold on its context: the destroy timed below then
   * releases the communicator's reference only, not the driver's
   * teardown of the last one (1.1 s on an H100; with it, destroy after a
   * verbs mismatch took 2.2-2.4 s on 2 H200s), as check_misuse does */
  tecore_ctx_t own = NULL;
  RK_CORE(tecore_ctx_create(rank, &own));
  const int odd = rank == n - 1;
  const struct call m = my_call(k, odd);
  tecore_devptr_t outs[2] = {0, 0}, send = 0;
  size_t bytes = (m.fused ? m.rows * m.hidden : m.count) * tecore_dtype_size(m.dtype);
  double t0 = now_s();
  tecomm_result_t r;
  if (m.fused) {
    r = fused_call(c, &m, level_algo(k->level), rank, outs);
  } else {
    void *h = malloc(bytes);
    RK_ASSERT(h, "out of host memory");
    tc_make_input(h, m.count, m.dtype, rank, 7);
    RK_CORE(tecore_mem_alloc(bytes, &send));
    RK_CORE(tecore_memcpy(send, te_hptr(h), bytes));
    outs[0] = poisoned(bytes);
    RK_CORE(tecore_ctx_synchronize());
    free(h);
    r = tecomm_allreduce_algo(c, send, outs[0], m.count, m.dtype, m.op, level_algo(k->level),
                              NULL);
  }
  char first[1024];
  snprintf(first, sizeof first, "%s", tecomm_last_error());
  /* the host agreement answers in the call; the kernels' through status */
  if (k->level == L_LAMPORT)
    RK_ASSERT(r == TECOMM_SUCCESS || r == TECOMM_ERR_MISMATCH, "%s: the call: %s (%s)", k->name,
              tecomm_result_name(r), first);
  else
    RK_ASSERT(r == TECOMM_ERR_MISMATCH, "%s: the call: %s (%s)", k->name, tecomm_result_name(r),
              first);
  RK_CORE(tecore_ctx_synchronize());
  int peer = -2;
  tecore_clear_error();
  r = tecomm_comm_status(c, &peer);
  snprintf(first, sizeof first, "%s", tecomm_last_error());
  double secs = now_s() - t0;
  RK_ASSERT(r == TECOMM_ERR_MISMATCH, "%s: status %s (%s)", k->name, tecomm_result_name(r), first);
  RK_ASSERT(peer == (odd ? 0 : n - 1) || (k->level == L_LAMPORT && peer == 1 - rank),
            "%s: status named peer %d (%s)", k->name, peer, first);
  RK_ASSERT(strstr(first, k->field), "%s: detail \"%s\" lacks \"%s\"", k->name, first, k->field);
  RK_ASSERT(strstr(first, k->val) && strstr(first, k->odd_val),
            "%s: detail \"%s\" lacks %s and %s", k->name, first, k->val, k->odd_val);
  RK_ASSERT(secs < 2.0, "%s: the mismatch took %.2f s (TECOMM_TIMEOUT 2 s)", k->name, secs);
  still_poisoned(outs[0], bytes, m.fused ? "residual_out" : "recv", k->name);
  if (outs[1]) still_poisoned(outs[1], bytes, "out", k->name);
  /* sticky: later calls are refused with the first error's text */
  RK_EXPECT(TECOMM_ERR_MISMATCH, k->field,
            tecomm_allreduce(c, outs[0], outs[0], 16, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  for (int i = 0; i < 2; i++)
    if (outs[i]) RK_CORE(tecore_mem_free(outs[i]));
  if (send) RK_CORE(tecore_mem_free(send));
  destroy_in_turn(c, rank, -1, k->name);
  RK_CORE(tecore_ctx_destroy(own));
}

static int have_verbs(void) {
  setenv("TECOMM_VERBS_LIB", "soft", 1);
  int n = 0;
  char names[2][64];
  return tecomm_verbs_devices(&n, names, 2) == TECOMM_SUCCESS;
}

START_TEST(ranks_that_disagree_all_get_mismatch) {
  const struct acase *k = &cases[_i];
  printf("# %s\n", k->name);
  if ((k->level == L_VERBS_FLAT || k->level == L_VERBS_HIER) && !have_verbs()) {
    printf("# skipped: no verbs in this build\n");
    return;
  }
  if ((k->level == L_NCCL || k->level == L_NCCL_LEVEL) && !tc_on_vdev()) {
    printf("# skipped: vdev's NCCL only (a GPU host's needs a GPU a rank)\n");
    return;
  }
  tc_run_ranks_ex(case_ranks(k), rank_agree, (void *)k, 60,
                  k->kind == K_KILLED ? case_ranks(k) - 1 : -1);
  tc_shm_release();
}
END_TEST

static Suite *comm_agree_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_agree");
  TCase *tc = te_tcase(s, "agreement", 0);
  tcase_add_loop_test(tc, ranks_that_disagree_all_get_mismatch, 0,
                      (int)(sizeof cases / sizeof cases[0]));
  return s;
}

TE_TEST_MAIN(comm_agree_suite, TE_TEST_DEVICE)
