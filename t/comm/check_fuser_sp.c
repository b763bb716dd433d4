/* SPDX-License-Identifier: Apache-2.0
 * check_fuser_sp.c -- the sequence-parallel operations libtecomm puts in
 * libtecore's fuser (tecomm_ops_register, te/comm.h): allgather (rows
 * gathered forward, the gradient reduce-scattered back) and
 * reduce_scatter (the mirror), ranks as forked processes
 * (t/lib/comm_ranks.h), 2 and 4 ranks, F32 and BF16:
 *   - forward and backward against float64 from every rank's inputs (each
 *     rank scales its input by rank + 1 first, so a block that lands at
 *     the wrong rank, misses a rank or counts one twice shows), outputs
 *     poisoned, eager and then as a captured graph replayed on fresh
 *     inputs (the collectives are captured with the pass);
 *   - refusals: rows that do not split over the ranks, an algorithm the
 *     collectives do not run. */
#include "comm_ranks.h"
#include <math.h>
#include "common/convert.h"

#include "fuser_vals.h"

/* ---- forward and backward ----------------------------------------------------------- */

/* SR rows a shard (odd: the all-gather takes any), SC features. */
enum { SR = 5, SC = 24, MAXN = SR * SC * TC_MAX_RANKS };

struct sp_case {
  int kind;              /* TECORE_OP_ALLGATHER or TECORE_OP_REDUCE_SCATTER */
  tecore_dtype_t dt;
};

/* One rank's device buffers: x and dx [in_rows][SC], y and dy [out_rows][SC]. */
struct sp_bufs {
  size_t in, out;        /* elements */
  tecore_devptr_t x, y, dy, dx;
};

/* Host copies of every rank's inputs for iteration it, this rank's
 * uploaded, its outputs poisoned (all ones: NaN in F32 and BF16). */
static void sp_inputs(const struct sp_case *c, int rank, int n, int it, const struct sp_bufs *b,
                      void *xs, void *dys, tecore_stream_t s) {
  size_t es = tecore_dtype_size(c->dt);
  for (int p = 0; p < n; p++) {
    make_vals((char *)xs + p * b->in * es, b->in, c->dt, p, 20 + 2 * (uint64_t)it);
    make_vals((char *)dys + p * b->out * es, b->out, c->dt, p, 21 + 2 * (uint64_t)it);
  }
  RK_CORE(tecore_memcpy_async(b->x, te_hptr((char *)xs + rank * b->in * es), b->in * es, s));
  RK_CORE(tecore_memcpy_async(b->dy, te_hptr((char *)dys + rank * b->out * es), b->out * es, s));
  RK_CORE(tecore_memset_d8_async(b->y, 0xff, b->out * es, s));
  RK_CORE(tecore_memset_d8_async(b->dx, 0xff, b->in * es, s));
  RK_CORE(tecore_stream_synchronize(s));
}

/* Bound of the rounding of a value made of terms of magnitude sum_abs: a
 * few roundings (the scale, the sum, the dtype) of 2^-8 (BF16) or 2^-24. */
static double tol_of(tecore_dtype_t dt, double sum_abs) {
  return 4.0 * sum_abs * (dt == TECORE_DTYPE_F32 ? 0x1p-24 : 0x1p-8) + 1e-30;
}

/* The float64 value of y[i] (out) or dx[i] (!out) on rank r; *mag the
 * sum of the terms' magnitudes.  allgather: y[p-th block] = (p+1) x_p,
 * dx = (r+1) sum_p dy_p[r-th block]; reduce_scatter: y = sum_p (p+1)
 * x_p[r-th block], dx[p-th block] = (r+1) dy_p. */
static double sp_want(const struct sp_case *c, int r, int n, const struct sp_bufs *b,
                      const void *xs, const void *dys, int out, size_t i, double *mag) {
  int ag = c->kind == TECORE_OP_ALLGATHER;
  double v = 0;
  *mag = 0;
  if (ag == out) {   /* one term: block p's element of one rank */
    size_t blk = ag ? b->in : b->out, p = i / blk;
    const void *src = out ? xs : dys;
    double t = (double)((out ? p : (size_t)r) + 1) * from_dt(src, p * blk + i % blk, c->dt);
    *mag = fabs(t);
    return t;
  }
  size_t blk = ag ? b->out / (size_t)n : b->in / (size_t)n;
  for (int p = 0; p < n; p++) {
    const void *src = out ? xs : dys;
    size_t len = out ? b->in : b->out;
    double t = (out ? p + 1 : r + 1) * from_dt(src, (size_t)p * len + (size_t)r * blk + i, c->dt);
    v += t;
    *mag += fabs(t);
  }
  return v;
}

static void sp_check(const struct sp_case *c, int rank, int n, const struct sp_bufs *b,
                     const void *xs, const void *dys, int it, tecore_stream_t s) {
  size_t es = tecore_dtype_size(c->dt);
  static char got[MAXN * 4];
  for (int out = 0; out < 2; out++) {
    size_t len = out ? b->out : b->in;
    RK_CORE(tecore_memcpy_async(te_hptr(got), out ? b->y : b->dx, len * es, s));
    RK_CORE(tecore_stream_synchronize(s));
    for (size_t i = 0; i < len; i++) {
      double mag, want = sp_want(c, rank, n, b, xs, dys, out, i, &mag), v = from_dt(got, i, c->dt);
      RK_ASSERT(fabs(v - want) <= tol_of(c->dt, mag),
                "%s %s, pass %d: %s[%zu] = %.9g, want %.9g (nan: still the poison)",
                tecore_op_kind_name(c->kind), tecore_dtype_name(c->dt), it, out ? "y" : "dx", i,
                v, want);
    }
  }
}

/* [constant_scale by rank + 1, kind]: SR rows a shard. */
static tecore_seq_t *sp_seq(const struct sp_case *c, int n, int rank,
                            struct tecomm_op_params *prm, tecore_stream_t s) {
  size_t rows = c->kind == TECORE_OP_ALLGATHER ? SR : (size_t)SR * (size_t)n;
  struct tecore_seq_config cfg = {.rows = rows, .features = SC, .dtype = c->dt, .seed = 1};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  struct tecore_op_desc d[] = {
      {.kind = TECORE_OP_CONSTANT_SCALE, .scale = (float)(rank + 1)},
      {.kind = c->kind, .ctx = prm},
  };
  for (size_t k = 0; k < 2; k++) RK_CORE(tecore_seq_add(q, &d[k], NULL));
  RK_CORE(tecore_seq_build(q, s));
  return q;
}

static void sp_pass(tecore_seq_t *q, const struct sp_case *c, const struct sp_bufs *b,
                    tecore_stream_t s) {
  size_t in_rows = b->in / SC, out_rows = b->out / SC;
  struct tecore_tensor X = t2(c->dt, in_rows, SC, b->x), Y = t2(c->dt, out_rows, SC, b->y),
                       DY = t2(c->dt, out_rows, SC, b->dy), DX = t2(c->dt, in_rows, SC, b->dx);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  RK_CORE(tecore_seq_backward(q, &DY, &DX, s));
}

/* Pass 0 eager; then the passes captured once, replayed on passes 1 and 2
 * with fresh inputs in the same buffers. */
static void rank_sp(int rank, int n, void *arg) {
  const struct sp_case *c = arg;
  tecore_stream_t s;
  tecomm_comm_t comm = tc_rank_comm(rank, n);
  RK_OK(tecomm_ops_register());
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct tecomm_op_params prm = {.comm = comm};
  tecore_seq_t *q = sp_seq(c, n, rank, &prm, s);
  struct sp_bufs b;
  size_t es = tecore_dtype_size(c->dt), shard = (size_t)SR * SC;
  b.in = c->kind == TECORE_OP_ALLGATHER ? shard : shard * (size_t)n;
  b.out = c->kind == TECORE_OP_ALLGATHER ? shard * (size_t)n : shard;
  b.x = dev_alloc(b.in * es), b.dx = dev_alloc(b.in * es);
  b.y = dev_alloc(b.out * es), b.dy = dev_alloc(b.out * es);
  static char xs[MAXN * TC_MAX_RANKS * 4], dys[MAXN * TC_MAX_RANKS * 4];
  tecore_graph_t g = NULL;
  tecore_graph_exec_t ge = NULL;
  for (int it = 0; it < 3; it++) {
    sp_inputs(c, rank, n, it, &b, xs, dys, s);
    if (it == 0) sp_pass(q, c, &b, s);
    if (it == 1) {
      RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
      sp_pass(q, c, &b, s);
      RK_CORE(tecore_stream_end_capture(s, &g));
      RK_CORE(tecore_graph_instantiate(&ge, g));
    }
    if (it > 0) RK_CORE(tecore_graph_launch(ge, s));
    RK_CORE(tecore_stream_synchronize(s));
    sp_check(c, rank, n, &b, xs, dys, it, s);
  }
  RK_CORE(tecore_graph_exec_destroy(ge));
  RK_CORE(tecore_graph_destroy(g));
  RK_CORE(tecore_seq_destroy(q));
  tecore_devptr_t all[] = {b.x, b.y, b.dy, b.dx};
  for (size_t k = 0; k < 4; k++) RK_CORE(tecore_mem_free(all[k]));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(comm));
}

START_TEST(sp_ops_forward_backward_vs_float64) {
  struct sp_case c = {.kind = _i & 1 ? TECORE_OP_REDUCE_SCATTER : TECORE_OP_ALLGATHER,
                      .dt = _i & 2 ? TECORE_DTYPE_BF16 : TECORE_DTYPE_F32};
  tc_run_ranks(_i & 4 ? 4 : 2, rank_sp, &c, 60);
  tc_shm_release();
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------ */

static void expect_refused(tecomm_comm_t comm, size_t rows, int kind, tecomm_algo_t algo,
                           const char *what) {
  struct tecore_seq_config cfg = {.rows = rows, .features = 8, .dtype = TECORE_DTYPE_F32,
                                  .seed = 1};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  struct tecomm_op_params p = {.comm = comm, .algo = algo};
  struct tecore_op_desc d = {.kind = kind, .ctx = &p};
  tecore_clear_error();
  tecore_result_t r = tecore_seq_add(q, &d, NULL);
  RK_ASSERT(r == TECORE_ERR_INVALID && strstr(tecore_last_error(), what),
            "%s, %zu rows, algo %d: %s \"%s\", want TECORE_ERR_INVALID naming \"%s\"",
            tecore_op_kind_name(kind), rows, (int)algo, tecore_result_name(r),
            tecore_last_error(), what);
  RK_CORE(tecore_seq_destroy(q));
}

static void rank_refusals(int rank, int n, void *arg) {
  (void)arg;
  tecomm_comm_t comm = tc_rank_comm(rank, n);
  RK_OK(tecomm_ops_register());
  /* odd rows: 2 ranks get 17, 4 ranks 30 (even, yet not a multiple) */
  size_t odd = n == 2 ? 17 : 30;
  char what[96];
  snprintf(what, sizeof what, "%zu rows do not split over the communicator's %d ranks", odd, n);
  expect_refused(comm, odd, TECORE_OP_REDUCE_SCATTER, TECOMM_ALGO_AUTO, what);
  expect_refused(comm, 16, TECORE_OP_ALLGATHER, TECOMM_ALGO_TWOSHOT, "desc->ctx->algo 2");
  expect_refused(comm, 16, TECORE_OP_REDUCE_SCATTER, TECOMM_ALGO_LAMPORT, "desc->ctx->algo 3");
  /* the all-gather takes any shard, odd too: its output is n shards */
  struct tecore_seq_config cfg = {.rows = odd, .features = 8, .dtype = TECORE_DTYPE_F32, .seed = 1};
  tecore_seq_t *q;
  struct tecore_op_info info;
  struct tecomm_op_params p = {.comm = comm};
  struct tecore_op_desc d = {.kind = TECORE_OP_ALLGATHER, .ctx = &p};
  RK_CORE(tecore_seq_create(&cfg, &q));
  RK_CORE(tecore_seq_add(q, &d, NULL));
  RK_CORE(tecore_seq_op(q, 0, &info));
  RK_ASSERT(info.out_rows == odd * (size_t)n, "allgather of %zu rows over %d ranks gave %zu rows",
            odd, n, info.out_rows);
  RK_CORE(tecore_seq_destroy(q));
  RK_OK(tecomm_comm_destroy(comm));
}

START_TEST(sp_ops_refuse_rows_not_divisible_by_ranks) {
  tc_run_ranks(_i ? 4 : 2, rank_refusals, NULL, 60);
  tc_shm_release();
}
END_TEST

static Suite *sp_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_sp_ops");
  TCase *tc = te_tcase(s, "passes", 0);
  tcase_add_loop_test(tc, sp_ops_forward_backward_vs_float64, 0, 8);
  tc = te_tcase(s, "misuse", 0);
  tcase_add_loop_test(tc, sp_ops_refuse_rows_not_divisible_by_ranks, 0, 2);
  return s;
}

TE_TEST_MAIN(sp_suite, TE_TEST_DEVICE)
