/* check_nvls.c -- the NVLS level (simple and Lamport) and the whole fallback
 * chain, ranks as forked processes (t/lib/comm_ranks.h), 2, 4 and 8 ranks.
 * SPDX-License-Identifier: Apache-2.0
 *
 *   - NVLS simple and NVLS Lamport (vdev's emulated multicast object)
 *     against a float64 reference: F32, BF16, F16, odd counts, counts
 *     that are not a multiple of 16 bytes; the tolerance is (n - 1) f32
 *     roundings of the sum of magnitudes plus half an ulp of the dtype of
 *     the result (one reduction in f32, one rounding to the dtype, as
 *     multimem.ld_reduce .acc::f32 does); the same bits on every rank;
 *   - their fused residual add + RMSNorm (+ FP8 E4M3, delayed scaling):
 *     residual_out against float64 (as above, plus half an ulp for the
 *     add), out against float64 RMSNorm of the residual_out the call
 *     returned (2 ulps of the dtype; the norm's f32 sums), the FP8 bytes
 *     against the same value times the scale (one E4M3 step, 2^-3
 *     relative, or the subnormal step); the same bits on every rank;
 *   - every link of the chain forced to fail on one rank
 *     (TECOMM_TEST_FAIL): every rank lands on the same next link (the
 *     same describe text on every rank) and an allreduce there is right;
 *   - NCCL_NVLS_ENABLE=0 or TECOMM_NVLS_ENABLE=0 on one rank refuses NVLS
 *     on every rank before any multicast call, the reason in describe.
 * On cuda (TE_DEVICE=cuda; the test harness sets NCCL_NVLS_ENABLE=0 and
 * never lifts it there) the NVLS cases check the refusal and that the
 * allreduce runs on IPC; the vdev node ids mean nothing there (the
 * chain's MNNVL links are skipped and say so).  MNNVL's own cases:
 * t/comm/check_mnnvl.c; the checks both share: t/lib/link_checks.h. */
#include "link_checks.h"

static void allow_nvls_on_vdev(void) {
  /* tests.h puts NCCL_NVLS_ENABLE=0 in every suite's environment: lifted
   * only on vdev, where the multicast object is emulated */
  if (tc_on_vdev()) unsetenv("NCCL_NVLS_ENABLE");
}

/* ---- NVLS ------------------------------------------------------------------------ */

static void rank_nvls(int rank, int n, void *arg) {
  (void)arg;
  allow_nvls_on_vdev();
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  char d[4096];
  describe(c, 0, d, sizeof d);
  if (!tc_on_vdev()) {
    /* cuda: the machine's NCCL_NVLS_ENABLE=0 holds; IPC serves */
    RK_ASSERT(strstr(d, "nvls: refused (NCCL_NVLS_ENABLE=0)"), "describe: %s", d);
    RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "NVLS is off",
              tecomm_allreduce_algo(c, 64, 64, 1, TECORE_DTYPE_F32, TECOMM_SUM, TECOMM_ALGO_NVLS, s));
    plain_case(c, s, rank, n, TECOMM_ALGO_AUTO, TECORE_DTYPE_BF16, TECOMM_SUM, 1001, 1);
    RK_OK(tecomm_comm_destroy(c));
    return;
  }
  RK_ASSERT(strstr(d, "nvls: on"), "describe: %s", d);
  /* the table: NVLS Lamport when small, NVLS simple above the Lamport edge */
  RK_ASSERT(chosen(c, 1000, TECORE_DTYPE_BF16, 0) == TECOMM_ALGO_NVLS_LAMPORT, "small: %s",
            tecomm_algo_name(chosen(c, 1000, TECORE_DTYPE_BF16, 0)));
  RK_ASSERT(chosen(c, 1 << 20, TECORE_DTYPE_F32, 0) == TECOMM_ALGO_NVLS, "4 MiB: %s",
            tecomm_algo_name(chosen(c, 1 << 20, TECORE_DTYPE_F32, 0)));
  static const size_t counts[] = {1, 7, 1001, 20000};
  uint64_t salt = 10;
  for (int a = 0; a < 2; a++)
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++)
      for (size_t i = 0; i < sizeof counts / sizeof counts[0]; i++, salt++)
        plain_case(c, s, rank, n, a ? TECOMM_ALGO_NVLS_LAMPORT : TECOMM_ALGO_NVLS, dtypes[k],
                   TECOMM_SUM, counts[i], salt);
  /* MAX is not a multimem reduction: refused, and the table takes IPC */
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "SUM only",
            tecomm_allreduce_algo(c, 64, 64, 1, TECORE_DTYPE_F32, TECOMM_MAX, TECOMM_ALGO_NVLS, s));
  plain_case(c, s, rank, n, TECOMM_ALGO_AUTO, TECORE_DTYPE_F32, TECOMM_MAX, 1001, salt++);
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(nvls_simple_and_lamport_vs_float64) {
  static const int ranks[] = {2, 4, 8};
  tc_run_ranks(ranks[_i], rank_nvls, NULL, 110);
  tc_expect_same_digest(ranks[_i], "NVLS results");
  tc_shm_release();
}
END_TEST

static void rank_nvls_fused(int rank, int n, void *arg) {
  (void)arg;
  allow_nvls_on_vdev();
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  int on = tc_on_vdev();
  tecomm_algo_t algos[] = {TECOMM_ALGO_NVLS, TECOMM_ALGO_NVLS_LAMPORT};
  uint64_t salt = 500;
  for (int a = 0; a < 2; a++)
    for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++, salt++)
      fused_case(c, s, rank, n, on ? algos[a] : TECOMM_ALGO_AUTO, dtypes[k], 3, 264, salt);
  /* a row length the Lamport kernel cannot take (hidden % 8): NVLS simple */
  fused_case(c, s, rank, n, on ? TECOMM_ALGO_NVLS : TECOMM_ALGO_AUTO, TECORE_DTYPE_BF16, 2, 101,
             salt++);
  if (on)
    RK_ASSERT(chosen(c, 3 * 264, TECORE_DTYPE_BF16, 1) == TECOMM_ALGO_NVLS_LAMPORT, "fused: %s",
              tecomm_algo_name(chosen(c, 3 * 264, TECORE_DTYPE_BF16, 1)));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(nvls_fused_add_rmsnorm_fp8_vs_float64) {
  static const int ranks[] = {2, 4, 8};
  tc_run_ranks(ranks[_i], rank_nvls_fused, NULL, 110);
  tc_expect_same_digest(ranks[_i], "fused NVLS results");
  tc_shm_release();
}
END_TEST

/* ---- the chain: each link fails on one rank --------------------------------------- */

struct link_case {
  const char *fail;     /* TECOMM_TEST_FAIL */
  int nodes;            /* 1: ranks on vdev nodes of their own (MNNVL) */
  const char *expect[3]; /* lines every rank's describe must hold */
  int verbs;            /* 1: the soft verbs device is there for the last link (vdev) */
  const char *env;      /* NAME=VALUE for the ranks, or NULL */
};

/* ipc:1 fails the pool and the workspace on rank 1, so every rank goes
 * down to NCCL; nccl:1 has rank 1 report no NCCL, nccl-init:1 has rank 1
 * stall inside its (vdev) NCCL init: every rank gives up after
 * TECOMM_TIMEOUT (or sooner, seeing a peer that gave up leave), aborts,
 * and all take verbs together.  Across vdev nodes the chain is mnnvl ->
 * nccl -> verbs, walked the same way.  Without verbs after that, no link
 * is left: every call is refused, saying why. */
static const struct link_case links[] = {
    {"nvls:1", 0, {"nvls: off (rank 1: TECOMM_TEST_FAIL)", "level: pool", NULL}, 0, NULL},
    {"nvls-bind:1", 0, {"nvls: off (rank 1: bind: TECOMM_TEST_FAIL)", "level: pool", NULL}, 0,
     NULL},
    {"ipc:1", 0, {"could not allocate", "nvls: off (rank 0: no IPC workspace", "level: nccl ("}, 0,
     NULL},
    {"ipc:1", 0, {"level: nccl (", "nccl: on (", "blocking init)"}, 0, "TECOMM_NCCL_BLOCKING=1"},
    {"ipc:1,nccl:1", 0, {"pool 2/3", "nccl: off (NCCL on 2 of 3 ranks)", "level: verbs ("},
     1, NULL},
    {"ipc:1,nccl-init:1", 0,
     /* rank 0 timed out, or saw a peer that timed out first leave */
     {"nccl: off (ncclCommInitRank failed on 3 of 3 ranks; rank 0: ", "level: verbs (", NULL},
     1, NULL},
    {"mnnvl:1", 1, {"mnnvl: off (rank 1: fabric export: TECOMM_TEST_FAIL)", "level: nccl (", NULL},
     0, NULL},
    {"mnnvl:1,nccl-init:2", 1,
     {"mnnvl: off (rank 1: fabric export: TECOMM_TEST_FAIL)",
      "nccl: off (ncclCommInitRank failed on 3 of 3 ranks; rank 0: ", "level: verbs ("},
     1, NULL},
    {"mnnvl-hang:1", 1, {"mnnvl: off (rank 1: importing the peers' fabric handles took more", NULL,
                         NULL}, 0, NULL},
    /* no link left: the refusal names the place, why verbs is off and
     * NCCL's why (the level table's why_in) */
    {"ipc:1,nccl:1", 0,
     {"level: none (", "choice for 4096 bytes: none (no algorithm for 4096 bytes: level none (",
      "; no verbs: TECOMM_VERBS=0); NCCL: off (NCCL on 2 of 3 ranks))\n"},
     0, "TECOMM_VERBS=0"},
};

static void rank_link(int rank, int n, void *arg) {
  const struct link_case *k = arg;
  allow_nvls_on_vdev();
  setenv("TECOMM_TEST_FAIL", k->fail, 1);
  setenv("TECOMM_MNNVL_TIMEOUT", "300", 1);
  if (strstr(k->fail, "nccl-init")) setenv("TECOMM_NCCL_INIT_TIMEOUT", "1500", 1);
  if (k->env) {
    char name[64];
    const char *eq = strchr(k->env, '=');
    snprintf(name, sizeof name, "%.*s", (int)(eq - k->env), k->env);
    setenv(name, eq + 1, 1);
  }
  if (k->verbs && tc_on_vdev()) setenv("TECOMM_VERBS_LIB", "soft", 1);
  if (k->nodes) {
    char v[16];
    snprintf(v, sizeof v, "%d", rank);
    setenv("TECOMM_VDEV_NODE", v, 1);
  }
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  describe(c, 4096, d, sizeof d);
  for (int i = 0; i < 3; i++) {
    const char *want = k->expect[i];
    /* cuda: the machine's NCCL_NVLS_ENABLE=0 refuses NVLS before any link
     * can fail, and NCCL takes over where IPC fails */
    if (want && !tc_on_vdev() && strncmp(want, "nvls:", 5) == 0) want = "nvls: refused";
    if (want && !tc_on_vdev() && k->verbs && strncmp(want, "level: verbs", 12) == 0) continue;
    RK_ASSERT(!want || strstr(d, want), "TECOMM_TEST_FAIL=%s: no \"%s\" in: %s", k->fail, want, d);
  }
  /* every rank landed on the same link: the same text everywhere */
  tc_rank_digest(d, strlen(d));
  /* and the link works where one is left */
  tecomm_algo_t a = TECOMM_ALGO_AUTO;
  if (tecomm_comm_choose(c, 1001, TECORE_DTYPE_BF16, 0, &a) == TECOMM_SUCCESS) {
    RK_ASSERT(a != TECOMM_ALGO_NVLS && a != TECOMM_ALGO_NVLS_LAMPORT && a != TECOMM_ALGO_MNNVL,
              "TECOMM_TEST_FAIL=%s: the failed link still chosen (%s)", k->fail,
              tecomm_algo_name(a));
    tecore_stream_t s;
    RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
    plain_case(c, s, rank, n, TECOMM_ALGO_AUTO, TECORE_DTYPE_BF16, TECOMM_SUM, 1001, 77);
    RK_CORE(tecore_stream_destroy(s));
  } else {
    RK_ASSERT(strstr(d, "choice for 4096 bytes: none"), "choose failed but describe: %s", d);
  }
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(fallback_link_fails_on_one_rank_all_take_next) {
  const struct link_case *k = &links[_i];
  if (k->nodes && !tc_on_vdev()) {
    printf("# %s: vdev nodes only; not run on %s\n", k->fail, tc_run_backend);
    return;
  }
  if (!k->nodes && !tc_on_vdev() && strncmp(k->fail, "nvls", 4) == 0) {
    printf("# %s: NVLS is refused on this machine already; not run\n", k->fail);
    return;
  }
  if (!tc_on_vdev() && strstr(k->fail, "nccl-init")) {
    printf("# %s: a stalled NCCL init is injected in vdev's NCCL; not run on %s\n", k->fail,
           tc_run_backend);
    return;
  }
  tc_run_ranks(3, rank_link, (void *)k, 60);
  tc_expect_same_digest(3, k->fail);
  tc_shm_release();
}
END_TEST

/* ---- the operator's switch ----------------------------------------------------------- */

static void rank_refused(int rank, int n, void *arg) {
  int which = *(const int *)arg;
  allow_nvls_on_vdev();
  /* set on one rank only: every rank must still refuse */
  if (rank == n - 1) setenv(which ? "TECOMM_NVLS_ENABLE" : "NCCL_NVLS_ENABLE", "0", 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  char d[4096];
  describe(c, 4096, d, sizeof d);
  const char *want = which ? "nvls: refused (TECOMM_NVLS_ENABLE=0)" : "nvls: refused (NCCL_NVLS_ENABLE=0)";
  /* cuda: the machine's NCCL_NVLS_ENABLE=0 is on every rank already */
  if (!tc_on_vdev()) want = "nvls: refused (NCCL_NVLS_ENABLE=0)";
  RK_ASSERT(strstr(d, want), "want \"%s\" in: %s", want, d);
  RK_ASSERT(!strstr(d, "choice for 4096 bytes: nvls"), "NVLS chosen: %s", d);
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "refused",
            tecomm_allreduce_algo(c, 64, 64, 1, TECORE_DTYPE_F32, TECOMM_SUM, TECOMM_ALGO_NVLS, NULL));
  tc_rank_digest(d, strlen(d));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(nvls_enable_0_refuses_on_every_rank) {
  static const int which[] = {0, 1};
  tc_run_ranks(2, rank_refused, (void *)&which[_i], 60);
  tc_expect_same_digest(2, "describe under NVLS_ENABLE=0");
  tc_shm_release();
}
END_TEST

static Suite *nvls_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  (void)tc_on_vdev();
  Suite *s = suite_create("comm_nvls");
  TCase *tc = te_tcase(s, "nvls", 0);
  tcase_add_loop_test(tc, nvls_simple_and_lamport_vs_float64, 0, 3);
  tcase_add_loop_test(tc, nvls_fused_add_rmsnorm_fp8_vs_float64, 0, 3);
  tc = te_tcase(s, "chain", 0);
  tcase_add_loop_test(tc, fallback_link_fails_on_one_rank_all_take_next, 0,
                      (int)(sizeof links / sizeof links[0]));
  tcase_add_loop_test(tc, nvls_enable_0_refuses_on_every_rank, 0, 2);
  return s;
}

TE_TEST_MAIN(nvls_suite, TE_TEST_DEVICE)
