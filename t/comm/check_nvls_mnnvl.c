/* check_nvls_mnnvl.c -- the links above IPC and the whole fallback chain,
 * ranks as forked processes (t/lib/comm_ranks.h), 2, 4 and 8 ranks.
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
 *   - MNNVL: ranks given different vdev node ids (TECOMM_VDEV_NODE), the
 *     Lamport allreduce over workspaces imported from fabric handles, SUM
 *     and MAX, plain and fused, the same checks;
 *   - every link of the chain forced to fail on one rank
 *     (TECOMM_TEST_FAIL): every rank lands on the same next link (the
 *     same describe text on every rank) and an allreduce there is right;
 *   - NCCL_NVLS_ENABLE=0 or TECOMM_NVLS_ENABLE=0 on one rank refuses NVLS
 *     on every rank before any multicast call, the reason in describe.
 * On cuda (TE_DEVICE=cuda; the test harness sets NCCL_NVLS_ENABLE=0 and
 * never lifts it there) the NVLS cases check the refusal and that the
 * allreduce runs on IPC; the vdev node ids mean nothing there (MNNVL
 * cases are skipped and say so). */
#include "comm_ranks.h"
#include "common/convert.h"
#include "common/fp8.h"

static const tecore_dtype_t dtypes[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};

/* Half an ulp of dt, relative to a value's magnitude. */
static double half_ulp(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F32 ? 0x1p-24 : dt == TECORE_DTYPE_BF16 ? 0x1p-8 : 0x1p-11;
}

/* The float64 reduction of every rank's input and the sum of magnitudes. */
static void reference(double *ref, double *mag, size_t count, tecore_dtype_t dt, tecomm_op_t op,
                      int n, uint64_t salt) {
  unsigned char *in = malloc(count * tecore_dtype_size(dt));
  RK_ASSERT(in, "malloc");
  for (int r = 0; r < n; r++) {
    tc_make_input(in, count, dt, r, salt);
    for (size_t i = 0; i < count; i++) {
      double v = tc_from_dt(in, i, dt);
      if (r == 0) ref[i] = v, mag[i] = fabs(v);
      else ref[i] = op == TECOMM_SUM ? ref[i] + v : (v > ref[i] ? v : ref[i]), mag[i] += fabs(v);
    }
  }
  free(in);
}

/* libtecomm's kernels fold in f32 and round once; NCCL and verbs (where a
 * link fell back to them) round partial sums to the dtype
 * (check_allreduce's sum_tol says more). */
static double sum_tol_of(int n, tecore_dtype_t dt, double mag, double ref, int nccl) {
  if (nccl) return (n - 1) * 0x1p-24 * mag + n * half_ulp(dt) * mag * 1.0001;
  return (n - 1) * 0x1p-24 * mag + half_ulp(dt) * fabs(ref) * 1.0001;
}
static double sum_tol(int n, tecore_dtype_t dt, double mag, double ref) {
  return sum_tol_of(n, dt, mag, ref, 0);
}

static void allow_nvls_on_vdev(void) {
  /* tests.h puts NCCL_NVLS_ENABLE=0 in every suite's environment: lifted
   * only on vdev, where the multicast object is emulated */
  if (tc_on_vdev()) unsetenv("NCCL_NVLS_ENABLE");
}

/* The algorithm a call ran, resolved as the table does. */
static tecomm_algo_t chosen(tecomm_comm_t c, size_t count, tecore_dtype_t dt, int fused) {
  tecomm_algo_t a = TECOMM_ALGO_AUTO;
  RK_OK(tecomm_comm_choose(c, count, dt, fused, &a));
  return a;
}

/* One plain allreduce of algo, checked against float64, folded into the
 * rank's digest. */
static void plain_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, tecomm_algo_t algo,
                       tecore_dtype_t dt, tecomm_op_t op, size_t count, uint64_t salt) {
  size_t bytes = count * tecore_dtype_size(dt);
  unsigned char *h = malloc(bytes), *got = malloc(bytes);
  double *ref = malloc(count * sizeof *ref), *mag = malloc(count * sizeof *mag);
  RK_ASSERT(h && got && ref && mag, "malloc");
  tc_make_input(h, count, dt, rank, salt);
  tecore_devptr_t send = 0, recv = 0;
  RK_CORE(tecore_mem_alloc(bytes, &send));
  RK_CORE(tecore_mem_alloc(bytes, &recv));
  RK_CORE(tecore_memcpy_async(send, te_hptr(h), bytes, s));
  RK_CORE(tecore_memset_d8_async(recv, 0xA5, bytes, s)); /* poison */
  tecomm_result_t r = tecomm_allreduce_algo(c, send, recv, count, dt, op, algo, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "%d ranks, %s, %s, count %zu: %s: %s", n, tecomm_algo_name(algo),
            tecore_dtype_name(dt), count, tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_memcpy_async(te_hptr(got), recv, bytes, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  reference(ref, mag, count, dt, op, n, salt);
  tecomm_algo_t ran = algo == TECOMM_ALGO_AUTO ? chosen(c, count, dt, 0) : algo;
  int nccl = ran == TECOMM_ALGO_NCCL || ran == TECOMM_ALGO_VERBS;
  for (size_t i = 0; i < count; i++) {
    double g = tc_from_dt(got, i, dt);
    double tol = op == TECOMM_MAX ? 0.0 : sum_tol_of(n, dt, mag[i], ref[i], nccl);
    RK_ASSERT(fabs(g - ref[i]) <= tol,
              "%d ranks, %s, %s, %s, count %zu: element %zu: got %.9g, want %.9g (float64), "
              "tolerance %.3g", n, tecomm_algo_name(algo), tecore_dtype_name(dt),
              op == TECOMM_SUM ? "sum" : "max", count, i, g, ref[i], tol);
  }
  tc_rank_digest(got, bytes);
  RK_CORE(tecore_mem_free(send));
  RK_CORE(tecore_mem_free(recv));
  free(h);
  free(got);
  free(ref);
  free(mag);
}

/* One fused call of algo (rows x hidden of dt, FP8 E4M3 copy with delayed
 * scaling), checked against float64. */
static void fused_case(tecomm_comm_t c, tecore_stream_t s, int rank, int n, tecomm_algo_t algo,
                       tecore_dtype_t dt, size_t rows, size_t hidden, uint64_t salt) {
  size_t count = rows * hidden, esz = tecore_dtype_size(dt), bytes = count * esz;
  unsigned char *hx = malloc(bytes), *hres = malloc(bytes), *hg = malloc(hidden * esz);
  unsigned char *ro = malloc(bytes), *out = malloc(bytes), *q = malloc(count);
  double *ref = malloc(count * sizeof *ref), *mag = malloc(count * sizeof *mag);
  RK_ASSERT(hx && hres && hg && ro && out && q && ref && mag, "malloc");
  tc_make_input(hx, count, dt, rank, salt);
  tc_make_input(hres, count, dt, 1000, salt); /* the same residual on every rank */
  tc_make_input(hg, hidden, dt, 1001, salt);
  tecore_devptr_t x, res, rout, g, o, q8, scale, sinv;
  RK_CORE(tecore_mem_alloc(bytes, &x));
  RK_CORE(tecore_mem_alloc(bytes, &res));
  RK_CORE(tecore_mem_alloc(bytes, &rout));
  RK_CORE(tecore_mem_alloc(hidden * esz, &g));
  RK_CORE(tecore_mem_alloc(bytes, &o));
  RK_CORE(tecore_mem_alloc(count, &q8));
  RK_CORE(tecore_mem_alloc(4, &scale));
  RK_CORE(tecore_mem_alloc(4, &sinv));
  float sc = 8.0f;
  RK_CORE(tecore_memcpy_async(x, te_hptr(hx), bytes, s));
  RK_CORE(tecore_memcpy_async(res, te_hptr(hres), bytes, s));
  RK_CORE(tecore_memcpy_async(g, te_hptr(hg), hidden * esz, s));
  RK_CORE(tecore_memcpy_async(scale, te_hptr(&sc), 4, s));
  RK_CORE(tecore_memset_d8_async(rout, 0xA5, bytes, s));
  RK_CORE(tecore_memset_d8_async(o, 0xA5, bytes, s));
  RK_CORE(tecore_memset_d8_async(q8, 0xA5, count, s));
  size_t shape[2] = {rows, hidden};
  struct tecore_tensor t8;
  RK_CORE(tecore_tensor_init(&t8, TECORE_DTYPE_E4M3, 2, shape, q8));
  t8.scaling = TECORE_SCALING_DELAYED;
  t8.scale = scale;
  t8.scale_inv = sinv;
  const float eps = 1e-5f;
  struct tecomm_add_rmsnorm a = {.x = x, .rows = rows, .hidden = hidden, .dtype = dt,
                                 .residual_in = res, .residual_out = rout, .gamma = g, .eps = eps,
                                 .out = o, .fp8_out = &t8, .algo = algo};
  tecomm_result_t r = tecomm_allreduce_add_rmsnorm(c, &a, s);
  RK_ASSERT(r == TECOMM_SUCCESS, "fused %s %s %zux%zu: %s: %s", tecomm_algo_name(algo),
            tecore_dtype_name(dt), rows, hidden, tecomm_result_name(r), tecomm_last_error());
  RK_CORE(tecore_memcpy_async(te_hptr(ro), rout, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(out), o, bytes, s));
  RK_CORE(tecore_memcpy_async(te_hptr(q), q8, count, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_OK(tecomm_comm_status(c, NULL));
  reference(ref, mag, count, dt, TECOMM_SUM, n, salt);
  for (size_t row = 0; row < rows; row++) {
    double ss = 0.0;
    for (size_t k = 0; k < hidden; k++) {
      size_t i = row * hidden + k;
      double want = ref[i] + tc_from_dt(hres, i, dt), got = tc_from_dt(ro, i, dt);
      double tol = sum_tol(n, dt, mag[i], ref[i]) + half_ulp(dt) * (fabs(want) + fabs(ref[i])) * 1.0001;
      RK_ASSERT(fabs(got - want) <= tol,
                "fused %s %s: residual_out[%zu][%zu] = %.9g, want %.9g (float64), tolerance %.3g",
                tecomm_algo_name(algo), tecore_dtype_name(dt), row, k, got, want, tol);
      ss += got * got;
    }
    double rs = 1.0 / sqrt(ss / (double)hidden + eps);
    for (size_t k = 0; k < hidden; k++) {
      size_t i = row * hidden + k;
      double want = tc_from_dt(ro, i, dt) * rs * tc_from_dt(hg, k, dt), got = tc_from_dt(out, i, dt);
      double tol = 4 * half_ulp(dt) * fabs(want) + 1e-6;
      RK_ASSERT(fabs(got - want) <= tol, "fused %s %s: out[%zu][%zu] = %.9g, want %.9g, tolerance %.3g",
                tecomm_algo_name(algo), tecore_dtype_name(dt), row, k, got, want, tol);
      double w8 = got * sc, g8 = te_e4m3_to_f32(q[i]);
      RK_ASSERT(fabs(g8 - w8) <= 0.0625 * fabs(w8) + 0x1p-9,
                "fused %s %s: fp8_out[%zu][%zu] = %.6g, want %.6g (out x scale)",
                tecomm_algo_name(algo), tecore_dtype_name(dt), row, k, g8, w8);
    }
  }
  tc_rank_digest(ro, bytes);
  tc_rank_digest(out, bytes);
  tc_rank_digest(q, count);
  tecore_devptr_t all[] = {x, res, rout, g, o, q8, scale, sinv};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) RK_CORE(tecore_mem_free(all[i]));
  free(hx);
  free(hres);
  free(hg);
  free(ro);
  free(out);
  free(q);
  free(ref);
  free(mag);
}

static void describe(tecomm_comm_t c, size_t bytes, char *d, size_t len) {
  RK_OK(tecomm_comm_describe(c, bytes, d, len));
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

/* ---- MNNVL ------------------------------------------------------------------------ */

static void rank_mnnvl(int rank, int n, void *arg) {
  (void)arg;
  char v[16];
  snprintf(v, sizeof v, "%d", rank); /* every rank on a node of its own */
  setenv("TECOMM_VDEV_NODE", v, 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  char d[4096];
  describe(c, 4096, d, sizeof d);
  RK_ASSERT(strstr(d, "several hosts") && strstr(d, "mnnvl: on") &&
                strstr(d, "choice for 4096 bytes: mnnvl"),
            "describe: %s", d);
  uint64_t salt = 900;
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++, salt += 2) {
    plain_case(c, s, rank, n, TECOMM_ALGO_AUTO, dtypes[k], TECOMM_SUM, 1001, salt);
    plain_case(c, s, rank, n, TECOMM_ALGO_MNNVL, dtypes[k], TECOMM_MAX, 37, salt + 1);
  }
  fused_case(c, s, rank, n, TECOMM_ALGO_MNNVL, TECORE_DTYPE_BF16, 2, 512, salt++);
  /* past the Lamport buffers nothing else runs here (no NCCL on vdev) */
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "larger than the Lamport buffers",
            tecomm_allreduce_algo(c, 64, 64, (size_t)64 << 20, TECORE_DTYPE_F32, TECOMM_SUM,
                                  TECOMM_ALGO_MNNVL, s));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(mnnvl_lamport_across_vdev_nodes) {
  static const int ranks[] = {2, 4, 8};
  if (!tc_on_vdev()) {
    printf("# MNNVL needs several nodes: vdev plays them; not run on %s\n",
           tc_run_backend);
    return;
  }
  tc_run_ranks(ranks[_i], rank_mnnvl, NULL, 110);
  tc_expect_same_digest(ranks[_i], "MNNVL results");
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
 * nccl -> verbs, walked the same way. */
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
  tc = te_tcase(s, "mnnvl", 0);
  tcase_add_loop_test(tc, mnnvl_lamport_across_vdev_nodes, 0, 3);
  tc = te_tcase(s, "chain", 0);
  tcase_add_loop_test(tc, fallback_link_fails_on_one_rank_all_take_next, 0,
                      (int)(sizeof links / sizeof links[0]));
  tcase_add_loop_test(tc, nvls_enable_0_refuses_on_every_rank, 0, 2);
  return s;
}

TE_TEST_MAIN(nvls_suite, TE_TEST_DEVICE)
