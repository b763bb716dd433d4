/* SPDX-License-Identifier: Apache-2.0 */
/* check_misuse.c -- libtecomm misused, ranks as forked processes
 * (t/lib/comm_ranks.h); each test is named after what broke (issue 28) and
 * failed before the fix (a use-after-free, a silent wrong sum, a success):
 *   - handles: destroy twice, any call after destroy: INVALID naming the
 *     function (was a use-after-free);
 *   - a forked child of a rank calls the parent's communicator: refused;
 *   - tecomm_mem_alloc(SIZE_MAX): refused (was a 0-byte block);
 *   - an allreduce on symmetric memory past its block, or past the pool:
 *     refused (was out-of-bounds reads and writes of peers' memory);
 *     tecomm_mem_peer_ptr of freed memory: refused;
 *   - agreement: rank 0 one-shot and rank 1 two-shot, TECOMM_ALGO that
 *     differs, counts or dtypes that differ (two-shot and Lamport): every
 *     rank gets TECOMM_ERR_MISMATCH naming the field and both values, and
 *     the output keeps its poison (was SUCCESS and a wrong sum, or a
 *     timeout on one rank only);
 *   - sticky errors: after a timeout, status keeps saying TIMEOUT, later
 *     calls are refused with the first error's text, and destroy returns
 *     within one TECOMM_TIMEOUT; a lonely rank's timeout (its peer never
 *     made the call) names that peer in status at every level (was -1
 *     where a host exchange timed out);
 *   - a stream's error from another call (a copy past its source) is not
 *     the communicator's: its allreduces sum right, destroy succeeds (was
 *     TECOMM_ERR_DEVICE with an empty detail). */
#include "comm_ranks.h"
#include <math.h>
#include <stdint.h>
#include <sys/wait.h>

static double now_s(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* ---- handles -------------------------------------------------------------------- */
static void rank_destroy_twice(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  RK_OK(tecomm_comm_destroy(c));
  RK_EXPECT(TECOMM_ERR_INVALID, "tecomm_comm_destroy: comm", tecomm_comm_destroy(c));
  tecore_devptr_t p = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "tecomm_mem_alloc: comm", tecomm_mem_alloc(c, 256, &p));
  RK_EXPECT(TECOMM_ERR_INVALID, "tecomm_comm_status: comm", tecomm_comm_status(c, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "tecomm_allreduce: comm",
            tecomm_allreduce(c, 256, 256, 4, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  int r = -1;
  RK_EXPECT(TECOMM_ERR_INVALID, "not a live communicator", tecomm_comm_rank(c, &r, NULL, NULL));
  RK_EXPECT(TECOMM_ERR_INVALID, "tecomm_comm_abort", tecomm_comm_abort(c));
}

START_TEST(comm_destroy_twice_and_use_after_destroy) {
  tc_run_ranks(2, rank_destroy_twice, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- a forked child ---------------------------------------------------------------- */
static void rank_fork(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  const size_t count = 1024;
  tecore_devptr_t buf = 0;
  RK_OK(tecomm_mem_alloc(c, count * 4, &buf));
  if (rank == 0) {
    pid_t pid = fork();
    RK_ASSERT(pid >= 0, "fork");
    if (pid == 0) {
      tecore_clear_error();
      tecomm_result_t r = tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL);
      int ok = r == TECOMM_ERR_INVALID && strstr(tecomm_last_error(), "fork") &&
               tecomm_comm_status(c, NULL) == TECOMM_ERR_INVALID &&
               tecomm_comm_destroy(c) == TECOMM_ERR_INVALID;
      _exit(ok ? 0 : 1);
    }
    int st = 0;
    RK_ASSERT(waitpid(pid, &st, 0) == pid, "waitpid");
    RK_ASSERT(WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the forked child's call on the parent's communicator was not refused (0x%x)", st);
  }
  /* the parent's communicator still works, with the right sums */
  float *h = malloc(count * 4), *got = malloc(count * 4), *peer = malloc(count * 4);
  tc_make_input(h, count, TECORE_DTYPE_F32, rank, 3);
  RK_CORE(tecore_memcpy(buf, te_hptr(h), count * 4));
  RK_OK(tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_CORE(tecore_memcpy(te_hptr(got), buf, count * 4));
  for (size_t i = 0; i < count; i++) {
    float want = 0.0f;
    for (int p = 0; p < n; p++) {
      tc_make_input(peer, count, TECORE_DTYPE_F32, p, 3);
      want = p == 0 ? peer[i] : want + peer[i];
    }
    RK_ASSERT(got[i] == want, "element %zu: %g, want %g", i, (double)got[i], (double)want);
  }
  free(h);
  free(got);
  free(peer);
  RK_OK(tecomm_mem_free(c, buf));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(forked_child_is_refused) {
  tc_run_ranks(2, rank_fork, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- sizes and bounds --------------------------------------------------------------- */
static void rank_bounds(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_POOL_MB", "4", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_devptr_t p = 0, q = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "bytes", tecomm_mem_alloc(c, SIZE_MAX, &p));
  RK_EXPECT(TECOMM_ERR_INVALID, "bytes", tecomm_mem_alloc(c, SIZE_MAX - 255, &p));
  RK_ASSERT(p == 0, "a refused allocation gave 0x%llx", (unsigned long long)p);
  RK_OK(tecomm_mem_alloc(c, 4096, &p));
  RK_OK(tecomm_mem_alloc(c, 4096, &q));
  RK_ASSERT(p != q, "two allocations share 0x%llx", (unsigned long long)p);
  /* a count past the block: 2048 floats in 4096 bytes */
  RK_EXPECT(TECOMM_ERR_INVALID, "past its symmetric allocation",
            tecomm_allreduce(c, p, p, 2048, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  /* past the whole pool (4 MiB) */
  RK_EXPECT(TECOMM_ERR_INVALID, "past its symmetric allocation",
            tecomm_allreduce(c, q, q, (size_t)2 << 20, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  /* recv past its block */
  tecore_devptr_t big = 0;
  RK_CORE(tecore_mem_alloc(16384, &big));
  RK_EXPECT(TECOMM_ERR_INVALID, "recv",
            tecomm_allreduce(c, big, q, 4096, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  /* freed memory and free pool space */
  RK_OK(tecomm_mem_free(c, q));
  tecore_devptr_t pp = 0;
  RK_EXPECT(TECOMM_ERR_INVALID, "free pool space", tecomm_mem_peer_ptr(c, q, 1 - rank, &pp));
  RK_EXPECT(TECOMM_ERR_INVALID, "free symmetric pool space",
            tecomm_allreduce(c, q, q, 16, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  /* the block itself still works */
  RK_OK(tecomm_mem_peer_ptr(c, p, 1 - rank, &pp));
  RK_OK(tecomm_allreduce(c, p, p, 1024, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  RK_CORE(tecore_ctx_synchronize());
  RK_OK(tecomm_comm_status(c, NULL));
  RK_CORE(tecore_mem_free(big));
  RK_OK(tecomm_mem_free(c, p));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(symmetric_bounds_and_sizes) {
  tc_run_ranks(2, rank_bounds, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- agreement -------------------------------------------------------------------- */
/* What each rank of a mismatch case calls. */
struct side {
  tecomm_algo_t algo;
  size_t count;
  tecore_dtype_t dtype;
};
struct mismatch_case {
  const char *name;
  struct side s[2];
  const char *env0, *env1; /* TECOMM_ALGO of rank 0 and 1, or NULL */
  const char *field;       /* in the detail */
  const char *val0, *val1; /* both values, in the detail of rank 0 */
};
static const struct mismatch_case mcases[] = {
    {"oneshot vs twoshot",
     {{TECOMM_ALGO_ONESHOT, 4096, TECORE_DTYPE_F32}, {TECOMM_ALGO_TWOSHOT, 4096, TECORE_DTYPE_F32}},
     NULL, NULL, "algorithm", "oneshot", "twoshot"},
    {"TECOMM_ALGO differs",
     {{TECOMM_ALGO_AUTO, 4096, TECORE_DTYPE_F32}, {TECOMM_ALGO_AUTO, 4096, TECORE_DTYPE_F32}},
     "twoshot", "oneshot", "algorithm", "twoshot", "oneshot"},
    {"count differs (twoshot)",
     {{TECOMM_ALGO_TWOSHOT, 4096, TECORE_DTYPE_F32}, {TECOMM_ALGO_TWOSHOT, 8192, TECORE_DTYPE_F32}},
     NULL, NULL, "count", "4096", "8192"},
    {"count differs (lamport)",
     {{TECOMM_ALGO_LAMPORT, 1024, TECORE_DTYPE_BF16}, {TECOMM_ALGO_LAMPORT, 2048, TECORE_DTYPE_BF16}},
     NULL, NULL, "count", "1024", "2048"},
    {"dtype differs (oneshot)",
     {{TECOMM_ALGO_ONESHOT, 2048, TECORE_DTYPE_F32}, {TECOMM_ALGO_ONESHOT, 2048, TECORE_DTYPE_BF16}},
     NULL, NULL, "dtype", "f32", "bf16"},
    {"dtype differs (lamport)",
     {{TECOMM_ALGO_LAMPORT, 2048, TECORE_DTYPE_F16}, {TECOMM_ALGO_LAMPORT, 2048, TECORE_DTYPE_BF16}},
     NULL, NULL, "dtype", "f16", "bf16"},
};

static void rank_mismatch(int rank, int n, void *arg) {
  const struct mismatch_case *k = arg;
  (void)n;
  setenv("TECOMM_TIMEOUT", "2000", 1);
  /* the IPC levels' agreement is what these cases judge; NCCL's own
   * teardown is not libte's: on 2 H100s (NCCL 2.28) its ncclCommAbort took
   * 1.0 s of destroy after a mismatch (TE_DEBUG=INFO: "level nccl closed
   * in 1002 ms"), vdev's emulation none, so the destroy bound below holds
   * for libte's levels only (tecomm_comm_destroy(3) says what NCCL adds) */
  setenv("TECOMM_NCCL", "0", 1);
  if (k->env0) setenv("TECOMM_ALGO", rank == 0 ? k->env0 : k->env1, 1);
  /* the rank's own hold on its context: destroy then releases the
   * communicator's reference only, and its time is libte's, not the
   * driver's teardown of the last reference (1.1 s on an H100) */
  tecore_ctx_t own = NULL;
  RK_CORE(tecore_ctx_create(rank, &own));
  tecomm_comm_t c = tc_rank_comm(rank, n);
  const struct side *me = &k->s[rank];
  size_t esz = tecore_dtype_size(me->dtype), bytes = me->count * esz;
  tecore_devptr_t send = 0, recv = 0;
  RK_CORE(tecore_mem_alloc(bytes, &send));
  RK_CORE(tecore_mem_alloc(bytes, &recv));
  unsigned char *h = malloc(bytes), *got = malloc(bytes);
  tc_make_input(h, me->count, me->dtype, rank, 7);
  RK_CORE(tecore_memcpy(send, te_hptr(h), bytes));
  RK_CORE(tecore_memset_d8_async(recv, 0x5a, bytes, NULL)); /* poison: nothing may be written */
  RK_CORE(tecore_ctx_synchronize());
  double t0 = now_s();
  tecomm_result_t r =
      tecomm_allreduce_algo(c, send, recv, me->count, me->dtype, TECOMM_SUM, me->algo, NULL);
  RK_ASSERT(r == TECOMM_SUCCESS || r == TECOMM_ERR_MISMATCH, "%s: the call: %s (%s)", k->name,
            tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_ctx_synchronize());
  int peer = -2;
  tecore_clear_error();
  r = tecomm_comm_status(c, &peer);
  double secs = now_s() - t0;
  char first[1024];
  snprintf(first, sizeof first, "%s", tecomm_last_error());
  RK_ASSERT(r == TECOMM_ERR_MISMATCH, "%s: status %s (%s)", k->name, tecomm_result_name(r), first);
  RK_ASSERT(peer == 1 - rank, "%s: status named peer %d", k->name, peer);
  RK_ASSERT(strstr(first, k->field), "%s: detail \"%s\" lacks \"%s\"", k->name, first, k->field);
  const char *mine = rank == 0 ? k->val0 : k->val1, *theirs = rank == 0 ? k->val1 : k->val0;
  RK_ASSERT(strstr(first, mine) && strstr(first, theirs), "%s: detail \"%s\" lacks %s and %s",
            k->name, first, mine, theirs);
  RK_ASSERT(secs < 2.0, "%s: the mismatch took %.2f s (TECOMM_TIMEOUT 2 s)", k->name, secs);
  RK_CORE(tecore_memcpy(te_hptr(got), recv, bytes));
  for (size_t i = 0; i < bytes; i++)
    RK_ASSERT(got[i] == 0x5a, "%s: byte %zu of the output was written (0x%02x)", k->name, i,
              got[i]);
  /* sticky: later calls are refused with the first error's text */
  RK_EXPECT(TECOMM_ERR_MISMATCH, k->field,
            tecomm_allreduce_algo(c, send, recv, me->count, me->dtype, TECOMM_SUM, me->algo, NULL));
  RK_EXPECT(TECOMM_ERR_MISMATCH, "failed earlier", tecomm_comm_status(c, NULL));
  /* freed first: on cuda the buffers live in the primary context that the
   * communicator's reference (the last one without NCCL's) keeps alive */
  RK_CORE(tecore_mem_free(send));
  RK_CORE(tecore_mem_free(recv));
  t0 = now_s();
  (void)tecomm_comm_destroy(c);
  RK_ASSERT(now_s() - t0 < 1.0, "%s: destroy after a mismatch took %.2f s", k->name, now_s() - t0);
  RK_CORE(tecore_ctx_destroy(own));
  free(h);
  free(got);
}

START_TEST(mismatched_calls_fail_on_every_rank) {
  const struct mismatch_case *k = &mcases[_i];
  printf("# %s\n", k->name);
  tc_run_ranks(2, rank_mismatch, (void *)k, 60);
  tc_shm_release();
}
END_TEST

/* ---- sticky errors ------------------------------------------------------------------ */
static void rank_timeout(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  setenv("TECOMM_NCCL", "0", 1);   /* libte's levels' teardown (rank_mismatch says why) */
  tecore_ctx_t own = NULL;          /* and the context held (rank_mismatch) */
  RK_CORE(tecore_ctx_create(rank, &own));
  tecomm_comm_t c = tc_rank_comm(rank, n);
  const size_t count = 4096;
  tecore_devptr_t buf = 0;
  RK_OK(tecomm_mem_alloc(c, count * 4, &buf));
  if (rank == 0) {
    /* rank 1 never joins: a device-side wait times out */
    RK_OK(tecomm_allreduce_algo(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM,
                                TECOMM_ALGO_ONESHOT, NULL));
    RK_CORE(tecore_ctx_synchronize());
    int peer = -2;
    RK_EXPECT(TECOMM_ERR_TIMEOUT, "rank 1", tecomm_comm_status(c, &peer));
    RK_ASSERT(peer == 1, "status named peer %d", peer);
    char first[512];
    snprintf(first, sizeof first, "%s", tecomm_last_error());
    /* still in error: status, and the next call refused with that text */
    RK_EXPECT(TECOMM_ERR_TIMEOUT, "TECOMM_TIMEOUT", tecomm_comm_status(c, &peer));
    RK_EXPECT(TECOMM_ERR_TIMEOUT, "failed earlier",
              tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
    RK_EXPECT(TECOMM_ERR_TIMEOUT, "failed earlier", tecomm_mem_alloc(c, 64, &buf));
    double t0 = now_s();
    (void)tecomm_comm_destroy(c);
    double secs = now_s() - t0;
    RK_ASSERT(secs < 1.0, "destroy after a timeout took %.2f s (TECOMM_TIMEOUT 1 s)", secs);
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  } else {
    RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
    double t0 = now_s();
    (void)tecomm_comm_destroy(c);   /* its peer is gone: bounded */
    RK_ASSERT(now_s() - t0 < 1.5, "destroy took %.2f s", now_s() - t0);
  }
  RK_CORE(tecore_ctx_destroy(own));
}

START_TEST(timeout_is_sticky_and_destroy_bounded) {
  tc_run_ranks(2, rank_timeout, NULL, 60);
  tc_shm_release();
}
END_TEST

/* A lonely rank: rank 0 makes a collective call that rank 1 never makes,
 * at each level.  TIMEOUT, and status names rank 1, the one that did
 * not come (it named peer -1 where the host agreement's exchange timed
 * out: the NCCL level). */
struct lonely {
  const char *name;
  tecomm_algo_t algo;
  const char *test_fail;   /* TECOMM_TEST_FAIL: the level forced, or NULL */
};
static const struct lonely lonely_cases[] = {
    {"one-shot (IPC)", TECOMM_ALGO_ONESHOT, NULL},
    {"NCCL, at the pool level", TECOMM_ALGO_NCCL, NULL},
    {"NCCL level", TECOMM_ALGO_AUTO, "ipc:1"},
};

static void rank_lonely(int rank, int n, void *arg) {
  const struct lonely *k = arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  if (k->test_fail) setenv("TECOMM_TEST_FAIL", k->test_fail, 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  const size_t count = 4096;
  tecore_devptr_t buf = 0;
  RK_CORE(tecore_mem_alloc(count * 4, &buf));
  if (rank == 0) {
    tecomm_result_t r =
        tecomm_allreduce_algo(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, k->algo, NULL);
    RK_ASSERT(r == TECOMM_SUCCESS || r == TECOMM_ERR_TIMEOUT, "%s: the call: %s (%s)", k->name,
              tecomm_result_name(r), tecomm_last_error());
    (void)tecore_ctx_synchronize();
    int peer = -2;
    r = tecomm_comm_status(c, &peer);
    RK_ASSERT(r == TECOMM_ERR_TIMEOUT, "%s: status %s (%s)", k->name, tecomm_result_name(r),
              tecomm_last_error());
    RK_ASSERT(peer == 1, "%s: status named peer %d, not rank 1, the one that did not come (%s)",
              k->name, peer, tecomm_last_error());
  }
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  (void)tecomm_comm_destroy(c);
  RK_CORE(tecore_mem_free(buf));
}

START_TEST(lonely_rank_status_names_the_missing_peer) {
  const struct lonely *k = &lonely_cases[_i];
  printf("# %s\n", k->name);
  if (k->algo == TECOMM_ALGO_NCCL || k->test_fail) {
    if (!tc_on_vdev()) {
      printf("# skipped: vdev's NCCL only (a GPU host's needs a GPU a rank)\n");
      return;
    }
  }
  tc_run_ranks(2, rank_lonely, (void *)k, 60);
  tc_shm_release();
}
END_TEST

/* ---- another call's device error ------------------------------------------------------ */
/* A copy one byte past its source's allocation, on a stream of the rank's
 * own, leaves that stream a sticky error on vdev (on cuda an error, or
 * none where the driver's rounding covers the byte).  It is not the
 * communicator's: allreduces on another stream still sum right, and
 * destroy succeeds (it returned DEVICE with an empty detail, found by
 * fuzz-api: t/fuzz/corpus/api/13-memcpy-past-end.txt). */
static void rank_stream_error(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t c = tc_rank_comm(rank, n);
  const size_t count = 1000;
  tecore_devptr_t buf = 0, src = 0, dst = 0;
  tecore_stream_t bad = NULL, st = NULL;
  RK_OK(tecomm_mem_alloc(c, count * 4, &buf));
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &bad));
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st));
  RK_CORE(tecore_mem_alloc(1000, &src));
  RK_CORE(tecore_mem_alloc(2000, &dst));
  tecore_result_t cr = tecore_memcpy_async(dst, src, 1001, bad);
  if (cr == TECORE_SUCCESS) cr = tecore_stream_synchronize(bad);
  /* vdev checks every copy's ranges; the CUDA driver may not (its
   * allocations are rounded up), and then there is no error to keep */
  RK_ASSERT(cr != TECORE_SUCCESS || !tc_on_vdev(), "a copy past its source's allocation succeeded");
  float *h = malloc(count * 4), *got = malloc(count * 4), *peer = malloc(count * 4);
  RK_ASSERT(h && got && peer, "out of host memory");
  for (int call = 0; call < 2; call++) {
    tc_make_input(h, count, TECORE_DTYPE_F32, rank, 11 + (uint64_t)call);
    for (size_t i = 0; i < count; i++) got[i] = NAN;
    RK_CORE(tecore_memcpy_async(buf, te_hptr(h), count * 4, st));
    RK_OK(tecomm_allreduce(c, buf, buf, count, TECORE_DTYPE_F32, TECOMM_SUM, st));
    RK_CORE(tecore_memcpy_async(te_hptr(got), buf, count * 4, st));
    RK_CORE(tecore_stream_synchronize(st));
    RK_OK(tecomm_comm_status(c, NULL));
    for (size_t i = 0; i < count; i++) {
      float want = 0.0f;
      for (int p = 0; p < n; p++) {
        tc_make_input(peer, count, TECORE_DTYPE_F32, p, 11 + (uint64_t)call);
        want = p == 0 ? peer[i] : want + peer[i];
      }
      RK_ASSERT(got[i] == want, "call %d, element %zu: %g, want %g", call, i, (double)got[i],
                (double)want);
    }
  }
  free(h);
  free(got);
  free(peer);
  RK_OK(tecomm_mem_free(c, buf));
  /* the bad stream still holds its error: destroy waits, and succeeds */
  RK_OK(tecomm_comm_destroy(c));
  (void)tecore_stream_destroy(bad);
  RK_CORE(tecore_stream_destroy(st));
  (void)tecore_mem_free(src);
  (void)tecore_mem_free(dst);
}

START_TEST(another_streams_error_does_not_fail_the_communicator) {
  tc_run_ranks(2, rank_stream_error, NULL, 60);
  tc_shm_release();
}
END_TEST

static Suite *comm_misuse_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_misuse");
  TCase *tc = te_tcase(s, "handles", 0);
  tcase_add_test(tc, comm_destroy_twice_and_use_after_destroy);
  tcase_add_test(tc, forked_child_is_refused);
  tc = te_tcase(s, "bounds", 0);
  tcase_add_test(tc, symmetric_bounds_and_sizes);
  tc = te_tcase(s, "agreement", 0);
  tcase_add_loop_test(tc, mismatched_calls_fail_on_every_rank, 0,
                      (int)(sizeof mcases / sizeof mcases[0]));
  tc = te_tcase(s, "sticky", 0);
  tcase_add_test(tc, timeout_is_sticky_and_destroy_bounded);
  tcase_add_loop_test(tc, lonely_rank_status_names_the_missing_peer, 0,
                      (int)(sizeof lonely_cases / sizeof lonely_cases[0]));
  tcase_add_test(tc, another_streams_error_does_not_fail_the_communicator);
  return s;
}

TE_TEST_MAIN(comm_misuse_suite, TE_TEST_DEVICE)
