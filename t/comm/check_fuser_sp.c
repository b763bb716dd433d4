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
 *     collectives do not run;
 *   - the forward overlap fusions (allgather+linear[+gelu],
 *     linear+reduce_scatter[+add+rmsnorm], libtecomm/fuser_sp.c), with
 *     and without biases, SiLU or GELU between the Linears: planned
 *     where they apply, the same bits as the plain path eager and
 *     graphed, declined on every rank alike, a rank killed between steps
 *     reported by the others within TECOMM_TIMEOUT; the backward's
 *     allgather+dgrad (the gradient's all-gather inside the row-parallel
 *     Linear's data-gradient GEMM, its weight gradient after; under
 *     delayed FP8 allgather+dgrad8, the codes themselves gathered, or
 *     with a bias on some rank allgather+dgrad8+dbias, each rank's
 *     column sums summed over the ranks: the bias gradient within
 *     2^-12, the rest the same bits) planned; under delayed FP8
 *     linear+reduce_scatter on the E4M3 codes and allgather+linear on
 *     the codes it makes as the rows land, the same bits, and under
 *     current scaling declined. */
#include "comm_ranks.h"
#include <math.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>
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

/* ---- the overlapped block: allgather+linear, linear+reduce_scatter ----------------------- */

/* BR rows a shard, BH hidden, BF the column-parallel width (multiples of
 * 16: the overlapped GEMMs' alignment). */
enum { BR = 8, BH = 32, BF = 48, BMAX = BR * BH * TC_MAX_RANKS };

/* Two pre-norm sequence-parallel MLP blocks, BF16:
 *   make(0) rmsnorm allgather linear(BH -> BF) act linear(BF -> BH)
 *   reduce_scatter add(0)  (twice), act SiLU or GELU
 * seeded by rank (each rank its own weight shards, the same in both
 * sequences); the norms' gamma random, the same on every rank.  With
 * bias, as te-demo and tecore_seq_add_transformer lay them out: the
 * column-parallel Linears' slices on every rank, the row-parallel ones'
 * on rank 0 alone. */
enum { OV_NOPS = 16 };
struct ov_kind {
  int bias, gelu;
  int apart;   /* TECORE_SEQ_NO_GELU_EPILOGUE */
  int fp8;     /* the delayed-scaling recipe, every GEMM in FP8 */
};
static tecore_seq_t *ov_seq(int rank, const struct ov_kind *v, struct tecomm_op_params *prm,
                            tecore_stream_t s) {
  const int bias = v->bias;
  struct tecore_seq_config cfg = {.rows = BR, .features = BH, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 7 + (uint64_t)rank,
                                  .flags = v->apart ? TECORE_SEQ_NO_GELU_EPILOGUE : 0};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc d[] = {
      {.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = 0},
      {.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
      {.kind = TECORE_OP_ALLGATHER, .ctx = prm},
      {.kind = TECORE_OP_LINEAR, .features = BF, .bias = bias},
      {.kind = v->gelu ? TECORE_OP_GELU : TECORE_OP_SILU},
      {.kind = TECORE_OP_LINEAR, .features = BH, .bias = bias && rank == 0},
      {.kind = TECORE_OP_REDUCE_SCATTER, .ctx = prm},
      {.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = 0},
  };
  for (size_t k = 0; k < OV_NOPS; k++) RK_CORE(tecore_seq_add(q, &d[k % 8], NULL));
  if (v->fp8) {
    struct tecore_recipe r;
    RK_CORE(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
    RK_CORE(tecore_seq_set_recipe(q, &r, s));
  }
  RK_CORE(tecore_seq_build(q, s));
  RK_CORE(tecore_seq_zero_grad(q, s));   /* the passes add to them */
  static uint16_t g[BH];
  for (size_t op = 1; op < OV_NOPS; op += 8) {
    struct tecore_op_info info;
    RK_CORE(tecore_seq_op(q, op, &info));
    make_vals(g, BH, TECORE_DTYPE_BF16, 0, 30 + op);
    RK_CORE(tecore_memcpy_async(info.param[0].data, te_hptr(g), sizeof g, s));
    RK_CORE(tecore_stream_synchronize(s));
  }
  return q;
}

/* want: whether seq's forward plan has the overlap groups (with GELU,
 * the all-gather's takes it in its GEMM's epilogue; under FP8 too). */
static void ov_expect_plan(tecore_seq_t *q, const struct ov_kind *v, int want, const char *what) {
  char buf[2048];
  const int gelu = v->gelu && !v->apart;
  RK_CORE(tecore_seq_describe(q, TECORE_SEQ_FORWARD, buf, sizeof buf, NULL));
  const char *ag1 = gelu ? "| allgather+linear+gelu[2-4] |" : "| allgather+linear[2-3] |";
  const char *ag2 = gelu ? "| allgather+linear+gelu[10-12] |" : "| allgather+linear[10-11] |";
  int ag = strstr(buf, ag1) && strstr(buf, ag2);
  int rs = strstr(buf, "| linear+reduce_scatter+add+rmsnorm[5-9] |") &&
           strstr(buf, "| linear+reduce_scatter[13-14] |");
  RK_ASSERT(rs == want && ag == want, "%s: forward plan \"%s\", want the overlap groups %s%s",
            what, buf, want ? "in it" : "out of it", v->fp8 ? " (FP8)" : "");
  /* the backward's all-gather of dy inside the row-parallel Linears'
   * data gradient (under FP8 the codes gathered: allgather+dgrad8, or
   * with rank 0's bias allgather+dgrad8+dbias; where the 16-bit GELU's
   * backward runs in that GEMM's epilogue allgather+dgrad+dgelu, from
   * the GELU on, where libtecore's dgrad+dgelu+dbias would take the
   * Linears on both sides of it) */
  RK_CORE(tecore_seq_describe(q, TECORE_SEQ_BACKWARD, buf, sizeof buf, NULL));
  const int dgelu = gelu && !v->fp8;
  const char *dgn = dgelu     ? "allgather+dgrad+dgelu"
                    : !v->fp8 ? "allgather+dgrad"
                    : v->bias ? "allgather+dgrad8+dbias" : "allgather+dgrad8";
  char at1[64], at2[64];
  snprintf(at1, sizeof at1, "%s[%d-6]", dgn, dgelu ? 4 : 5);
  snprintf(at2, sizeof at2, "%s[%d-14]", dgn, dgelu ? 12 : 13);
  const int dg = strstr(buf, at1) && strstr(buf, at2);
  const int dg_any = strstr(buf, "allgather+dgrad") != NULL;
  RK_ASSERT(want ? dg : !dg_any, "%s: backward plan \"%s\", want %s %s", what, buf, dgn,
            want ? "at the row-parallel Linears" : "nowhere");
}

/* Under FP8 whether seq's forward writes the 16-bit gathered input of
 * the Linears after the all-gathers (boundaries 3 and 11): the overlap
 * gathers their codes instead (TECORE_FUSION_INPUT_FP8_ONLY), the plain
 * path the rows; the FP8 rowwise copy is written either way. */
static void ov_expect_gathered(tecore_seq_t *q, int want16, const char *what) {
  struct tecore_seq_saved sv[64];
  size_t n = 0;
  RK_CORE(tecore_seq_get_saved(q, sv, 64, &n));
  RK_ASSERT(n <= 64, "%s: %zu saved tensors, the test lists 64", what, n);
  for (size_t b = 3; b <= 11; b += 8) {
    int data = 0, row = 0;
    for (size_t i = 0; i < n; i++) {
      if (sv[i].bnd != b) continue;
      if (sv[i].part == TECORE_SEQ_SAVED_DATA) data = sv[i].written ? 1 : -1;
      if (sv[i].part == TECORE_SEQ_SAVED_FP8_ROW) row = sv[i].written;
    }
    RK_ASSERT(want16 ? data == 1 : data != 1, "%s: boundary %zu's 16-bit rows %s, want %s",
              what, b, data == 1 ? "written" : data ? "not written" : "not listed",
              want16 ? "written" : "not written (the codes gathered)");
    RK_ASSERT(row == 1, "%s: boundary %zu's FP8 rowwise copy is not written", what, b);
  }
}

/* One pass of seq on x, dy into poisoned y, dx; then y, dx and the
 * parameter gradients to host out (in that order). */
struct ov_io {
  tecore_devptr_t x, dy, y, dx;
};
static void ov_pass(tecore_seq_t *q, const struct ov_io *b, tecore_stream_t s) {
  struct tecore_tensor X = t2(TECORE_DTYPE_BF16, BR, BH, b->x),
                       Y = t2(TECORE_DTYPE_BF16, BR, BH, b->y),
                       DY = t2(TECORE_DTYPE_BF16, BR, BH, b->dy),
                       DX = t2(TECORE_DTYPE_BF16, BR, BH, b->dx);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  RK_CORE(tecore_seq_backward(q, &DY, &DX, s));
}

/* y, dx and every parameter gradient of q, end to end, into out; bytes. */
static size_t ov_fetch(tecore_seq_t *q, const struct ov_io *b, char *out, tecore_stream_t s) {
  size_t off = 0, act = (size_t)BR * BH * 2;
  RK_CORE(tecore_memcpy_async(te_hptr(out), b->y, act, s));
  RK_CORE(tecore_memcpy_async(te_hptr(out + act), b->dx, act, s));
  off = 2 * act;
  struct tecore_seq_param prm[16];
  size_t np = 0;
  RK_CORE(tecore_seq_params(q, prm, 16, &np));
  for (size_t i = 0; i < np; i++) {
    size_t bytes = tecore_tensor_numel(&prm[i].grad) * 4;
    RK_CORE(tecore_memcpy_async(te_hptr(out + off), prm[i].grad.data, bytes, s));
    off += bytes;
  }
  RK_CORE(tecore_stream_synchronize(s));
  return off;
}

/* The bytes of ov_fetch's dump that hold the bias gradients of the
 * Linears at op % 8 == at (two blocks: ops at and 8 + at) into lo, hi;
 * how many. */
static size_t ov_bias_ranges(tecore_seq_t *q, size_t act, size_t at, size_t lo[2],
                             size_t hi[2]) {
  struct tecore_seq_param prm[16];
  size_t np = 0, off = 2 * act, nr = 0;
  RK_CORE(tecore_seq_params(q, prm, 16, &np));
  for (size_t i = 0; i < np && i < 16; i++) {
    size_t bytes = tecore_tensor_numel(&prm[i].grad) * 4;
    if (prm[i].op % 8 == at && !strcmp(prm[i].name, "bias") && nr < 2)
      lo[nr] = off, hi[nr++] = off + bytes;
    off += bytes;
  }
  return nr;
}

/* got (overlapped) against want (plain): y | dx (BF16, act bytes each),
 * then the parameter gradients (F32); bit for bit on vdev, else within
 * 2^-6 of (1 + the largest magnitude of want's part).  Two kinds of bias
 * gradient are summed otherwise by the overlap, so held to a tolerance on
 * vdev too (v, q: the overlapped sequence):
 *  - under FP8, the row-parallel Linears' (ops 5 and 13, rank 0's):
 *    allgather+dgrad8+dbias sums each rank's rows, then the ranks, where
 *    the plain path sums the gathered rows: within 2^-12 of (1 + the
 *    largest), far above F32 rounding in two orders, far below a rank's
 *    rows missed or counted twice;
 *  - with the 16-bit GELU in the epilogues, the column-parallel Linears'
 *    (ops 3 and 11): the plain path's dgrad+dgelu+dbias sums the float
 *    products in the GEMM's epilogue and rounds the sums to BF16 (its
 *    output's type), while after allgather+dgrad+dgelu the Linear sums
 *    the BF16-rounded products in F32: the two differ by a BF16 rounding
 *    of each (2^-9 relative): within 2^-7 of (1 + the largest), where a
 *    wrong row, a missing gelu' or a rank's rows twice move a sum by a
 *    whole term. */
static void ov_compare(const char *got, const char *want, size_t nb, size_t act, int it,
                       const struct ov_kind *v, tecore_seq_t *q) {
  const int vdev = tc_on_vdev();
  const int dbias8 = v->fp8 && v->bias, dgelu = v->gelu && !v->apart && !v->fp8 && v->bias;
  size_t lo[2], hi[2], nr = 0;
  if (dbias8 || dgelu) nr = ov_bias_ranges(q, act, dbias8 ? 5 : 3, lo, hi);
  const double loose_tol = dbias8 ? 0x1p-12 : 0x1p-7;
  double big[2] = {0, 0};
  for (int pass = 0; pass < 2; pass++)
    for (size_t i = 0; i < nb;) {
      const int bf = i < 2 * act;
      const size_t w = bf ? 2 : 4;
      double g = bf ? from_dt(got, i / 2, TECORE_DTYPE_BF16) : *(const float *)(got + i);
      double x = bf ? from_dt(want, i / 2, TECORE_DTYPE_BF16) : *(const float *)(want + i);
      if (pass == 0 && fabs(x) > big[!bf]) big[!bf] = fabs(x);
      int loose = 0;
      for (size_t r = 0; r < nr; r++) loose |= i >= lo[r] && i < hi[r];
      const int exact = vdev && !loose;
      const double tol = vdev ? loose_tol : 0x1p-6;
      if (pass == 1)
        RK_ASSERT(exact ? !memcmp(got + i, want + i, w) : fabs(g - x) <= tol * (1 + big[!bf]),
                  "pass %d: byte %zu of y | dx | parameter gradients: overlapped %.9g, plain "
                  "%.9g (%s; y and dx: %zu bytes each; nan: still the poison)", it, i, g, x,
                  exact ? "bit for bit on vdev" : vdev ? "a bias gradient summed otherwise: "
                  "within the stated fraction of the largest" : "within 2^-6 of the largest",
                  act);
      i += w;
    }
}

/* The blocks with the overlap groups and with TECOMM_OP_NO_FUSION on the
 * same weights and inputs: pass 0 eager, pass 1 captured and replayed,
 * pass 2 replayed on fresh inputs; y, dx and the parameter gradients
 * (summed over the passes) the same bits each time.  Both GEMMs are cut
 * in row blocks that each multiply alone as in the whole GEMM, and
 * tecomm_gemm_rs folds the partials in rank order in float, then adds
 * the residual and normalizes, in the order and roundings of the plain
 * reduce-scatter, add and rmsnorm: on vdev, bit-identical.  On cuda the
 * chunked GEMMs may take other kernels than the whole one (other bits):
 * there the comparison is the sequences' tolerance, 2^-6 relative to the
 * largest magnitude. */
static void rank_ov(int rank, int n, void *arg) {
  const struct ov_kind *kind = arg;
  if (kind->fp8) setenv("TECORE_OPS_FP8_MIN_MNK", "0", 1);   /* these small GEMMs in FP8 too */
  tecore_stream_t s;
  tecomm_comm_t comm = tc_rank_comm(rank, n);
  RK_OK(tecomm_ops_register());
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct tecomm_op_params pf = {.comm = comm}, pp = {.comm = comm, .flags = TECOMM_OP_NO_FUSION};
  tecore_seq_t *q[2] = {ov_seq(rank, kind, &pf, s), ov_seq(rank, kind, &pp, s)};
  ov_expect_plan(q[0], kind, 1, "fused");
  ov_expect_plan(q[1], kind, 0, "TECOMM_OP_NO_FUSION");
  if (kind->fp8) {
    ov_expect_gathered(q[0], 0, "fused");
    ov_expect_gathered(q[1], 1, "TECOMM_OP_NO_FUSION");
  }
  struct ov_io b[2];
  size_t act = (size_t)BR * BH * 2;
  for (int v = 0; v < 2; v++) {
    b[v].x = dev_alloc(act), b[v].dy = dev_alloc(act);
    b[v].y = dev_alloc(act), b[v].dx = dev_alloc(act);
  }
  static char host[2][BR * BH * 4 + 4 * (BH * BF * 4 + BH * 4 + BF * 4 + BH * 4)];
  static char xv[BMAX * 2], dyv[BMAX * 2];   /* apart: the uploads read them later */
  tecore_graph_exec_t ge[2] = {NULL, NULL};
  tecore_graph_t g[2] = {NULL, NULL};
  for (int it = 0; it < 3; it++) {
    make_vals(xv, (size_t)BR * BH, TECORE_DTYPE_BF16, rank, 40 + 2 * (uint64_t)it);
    make_vals(dyv, (size_t)BR * BH, TECORE_DTYPE_BF16, rank, 41 + 2 * (uint64_t)it);
    for (int v = 0; v < 2; v++) {
      RK_CORE(tecore_memcpy_async(b[v].x, te_hptr(xv), act, s));
      RK_CORE(tecore_memcpy_async(b[v].dy, te_hptr(dyv), act, s));
      RK_CORE(tecore_memset_d8_async(b[v].y, 0xff, act, s));
      RK_CORE(tecore_memset_d8_async(b[v].dx, 0xff, act, s));
      if (it == 0) ov_pass(q[v], &b[v], s);
      if (it == 1) {
        RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
        ov_pass(q[v], &b[v], s);
        RK_CORE(tecore_stream_end_capture(s, &g[v]));
        RK_CORE(tecore_graph_instantiate(&ge[v], g[v]));
      }
      if (it > 0) RK_CORE(tecore_graph_launch(ge[v], s));
      /* the next pass's scales from this one's amaxes: the input's, the
       * weight's and the gradient's differ from then on */
      if (kind->fp8) RK_CORE(tecore_seq_update_scales(q[v], s));
    }
    size_t nb = ov_fetch(q[0], &b[0], host[0], s);
    RK_ASSERT(ov_fetch(q[1], &b[1], host[1], s) == nb, "the two sequences' gradients differ in size");
    ov_compare(host[0], host[1], nb, act, it, kind, q[0]);
  }
  for (int v = 0; v < 2; v++) {
    RK_CORE(tecore_graph_exec_destroy(ge[v]));
    RK_CORE(tecore_graph_destroy(g[v]));
    RK_CORE(tecore_seq_destroy(q[v]));
    tecore_devptr_t all[] = {b[v].x, b[v].y, b[v].dy, b[v].dx};
    for (size_t k = 0; k < 4; k++) RK_CORE(tecore_mem_free(all[k]));
  }
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(comm));
}

START_TEST(sp_overlap_block_matches_plain_bitwise) {
  static const struct ov_kind v = {0, 0, 0, 0};
  tc_run_ranks(_i ? 4 : 2, rank_ov, (void *)&v, 90);
  tc_shm_release();
}
END_TEST

/* The Linears with biases (the overlap declined them before, so te-demo
 * --sp never overlapped): the bias in every chunk's GEMM, rank 0's row-
 * parallel one in its partials once; the same bits as the plain path. */
START_TEST(sp_overlap_with_biases_matches_plain_bitwise) {
  static const struct ov_kind v = {1, 0, 0, 0};
  tc_run_ranks(_i ? 4 : 2, rank_ov, (void *)&v, 90);
  tc_shm_release();
}
END_TEST

/* GELU after the column-parallel Linear (te-demo's and GPT's MLPs): the
 * plain path runs it in the GEMM's epilogue on the float pre-activation;
 * allgather+linear alone left it a kernel of its own on the rounded one
 * (other bits: te-demo --tp 2 --sp's losses moved 2e-4).  With
 * allgather+linear+gelu the same epilogue: the plain path's bits. */
START_TEST(sp_overlap_keeps_gelu_epilogue_bitwise) {
  static const struct ov_kind v = {1, 1, 0, 0};
  tc_run_ranks(_i ? 4 : 2, rank_ov, (void *)&v, 90);
  tc_shm_release();
}
END_TEST

/* A sequence that keeps GELU apart (TECORE_SEQ_NO_GELU_EPILOGUE, as te-gpt
 * makes it where cuBLASLt's epilogues are slower): allgather+linear and
 * the GELU's own kernel, as its plain path; the same bits. */
/* Delayed FP8: linear+reduce_scatter[+add+rmsnorm] multiplies the E4M3
 * codes libtecore's own quantize wrote (the Linear's, or act+quantize's
 * before it, which leaves the 16-bit input unwritten) with fast
 * accumulation as the plain FP8 Linear; allgather+linear[+gelu]
 * gathers the codes each rank makes of its rows with the Linear's scale
 * (the ranks' amaxes reduced, so their scales agree), leaves the 16-bit
 * gathered rows unwritten, and the backward transposes the codes; the
 * same bits on vdev (the forward's outputs, dx and every weight
 * gradient, over steps whose scales follow the amaxes).  _i bit 0:
 * 4 ranks; bit 1: biases and GELU in the column-parallel GEMM's epilogue
 * (the row-parallel Linear then quantizes its own input), else SiLU
 * (act+quantize writes it). */
START_TEST(sp_overlap_fp8_delayed_matches_plain) {
  const struct ov_kind v = {_i & 2 ? 1 : 0, _i & 2 ? 1 : 0, 0, 1};
  tc_run_ranks(_i & 1 ? 4 : 2, rank_ov, (void *)&v, 90);
  tc_shm_release();
}
END_TEST

START_TEST(sp_overlap_gelu_apart_when_the_sequence_asks) {
  static const struct ov_kind v = {1, 1, 1, 0};
  tc_run_ranks(2, rank_ov, (void *)&v, 90);
  tc_shm_release();
}
END_TEST

/* how 0: TECOMM_SP_OVERLAP=0: the plain collectives; 1: a bias on rank
 * 0's row-parallel Linear alone (as te-demo and
 * tecore_seq_add_transformer place it): both groups on every rank, the
 * bias in rank 0's partials; 2: delayed FP8: both groups on every rank
 * (the all-gather's quantizing the rows it gathers); 3: current FP8
 * scaling: the plain collectives on every rank. */
static void rank_ov_declines(int rank, int n, void *arg) {
  const int how = *(const int *)arg;
  if (how == 0) setenv("TECOMM_SP_OVERLAP", "0", 1);
  if (how >= 2) setenv("TECORE_OPS_FP8_MIN_MNK", "0", 1);   /* these small GEMMs in FP8 too */
  tecore_stream_t s;
  tecomm_comm_t comm = tc_rank_comm(rank, n);
  RK_OK(tecomm_ops_register());
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct tecomm_op_params prm = {.comm = comm};
  struct tecore_seq_config cfg = {.rows = BR, .features = BH, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 3};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc d[] = {
      {.kind = TECORE_OP_ALLGATHER, .ctx = &prm},
      {.kind = TECORE_OP_LINEAR, .features = BF},
      {.kind = TECORE_OP_LINEAR, .features = BH, .bias = rank == 0},
      {.kind = TECORE_OP_REDUCE_SCATTER, .ctx = &prm},
  };
  for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) RK_CORE(tecore_seq_add(q, &d[k], NULL));
  if (how >= 2) {
    struct tecore_recipe r;
    RK_CORE(tecore_recipe_init(&r, how == 2 ? TECORE_RECIPE_DELAYED : TECORE_RECIPE_CURRENT));
    RK_CORE(tecore_seq_set_recipe(q, &r, s));
  }
  RK_CORE(tecore_seq_build(q, s));
  char buf[512];
  RK_CORE(tecore_seq_describe(q, TECORE_SEQ_FORWARD, buf, sizeof buf, NULL));
  static const char *const why[] = {"under TECOMM_SP_OVERLAP=0",
                                    "(rank 0's row-parallel bias stops nothing)",
                                    "under delayed FP8", "under current FP8 scaling"};
  const int rs = how == 1 || how == 2, ag = rs;
  RK_ASSERT(!strstr(buf, "linear+reduce_scatter") == !rs,
            "rank %d: forward plan \"%s\": linear+reduce_scatter %s %s", rank, buf,
            rs ? "missing" : "planned", why[how]);
  RK_ASSERT(!strstr(buf, "allgather+linear") == !ag,
            "rank %d: forward plan \"%s\": allgather+linear %s %s", rank, buf,
            ag ? "missing" : "planned", why[how]);
  RK_CORE(tecore_seq_describe(q, TECORE_SEQ_BACKWARD, buf, sizeof buf, NULL));
  /* under delayed FP8 the codes gathered, rank 0's bias's gradient summed
   * from every rank's rows: every rank plans allgather+dgrad8+dbias */
  const char *dg = how == 2 ? "allgather+dgrad8+dbias[2-3]" : "allgather+dgrad[2-3]";
  RK_ASSERT(!strstr(buf, dg) == !rs, "rank %d: backward plan \"%s\": %s %s %s", rank, buf, dg,
            rs ? "missing" : "planned", why[how]);
  struct tecore_tensor t8;
  RK_ASSERT(how < 2 || tecore_seq_fp8_input(q, 1, &t8) == TECORE_SUCCESS,
            "rank %d: forward plan \"%s\": the Linear does not run in FP8", rank, buf);
  RK_CORE(tecore_seq_destroy(q));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(comm));
}

START_TEST(sp_overlap_declined_on_every_rank_alike) {
  int how = _i;
  tc_run_ranks(2, rank_ov_declines, &how, 60);
  tc_shm_release();
}
END_TEST

/* A rank killed between two steps of the overlapped block: the others'
 * next forward fails with TECOMM_ERR_TIMEOUT naming it within
 * TECOMM_TIMEOUT + 1 s. */
static void rank_ov_killed(int rank, int n, void *arg) {
  (void)arg;
  setenv("TECOMM_TIMEOUT", "1000", 1);
  tecore_stream_t s;
  tecomm_comm_t comm = tc_rank_comm(rank, n);
  RK_OK(tecomm_ops_register());
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  struct tecomm_op_params prm = {.comm = comm};
  static const struct ov_kind v = {0, 0, 0, 0};
  tecore_seq_t *q = ov_seq(rank, &v, &prm, s);
  ov_expect_plan(q, &v, 1, "killed-rank block");
  struct ov_io b;
  size_t act = (size_t)BR * BH * 2;
  b.x = dev_alloc(act), b.dy = dev_alloc(act), b.y = dev_alloc(act), b.dx = dev_alloc(act);
  RK_CORE(tecore_memset_d8_async(b.x, 0x3c, act, s));
  RK_CORE(tecore_memset_d8_async(b.dy, 0x3c, act, s));
  ov_pass(q, &b, s);
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL);
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  struct tecore_tensor X = t2(TECORE_DTYPE_BF16, BR, BH, b.x), Y = t2(TECORE_DTYPE_BF16, BR, BH, b.y);
  (void)tecore_seq_forward(q, &X, &Y, 0, s);
  RK_ASSERT(te_stream_wait(s, 5000) == TECORE_SUCCESS, "the stream did not come back in 5 s");
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(comm, &peer);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  double secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT && peer == n - 1,
            "status after rank %d died in the overlapped forward: %s, peer %d (%s)", n - 1,
            tecomm_result_name(st), peer, tecomm_last_error());
  RK_ASSERT(secs <= 2.0, "TIMEOUT after %.2f s, want <= TECOMM_TIMEOUT + 1 s = 2 s", secs);
  _exit(0);   /* the communicator is broken: nothing more to free collectively */
}

START_TEST(sp_overlap_killed_rank_times_out) {
  tc_run_ranks_ex(3, rank_ov_killed, NULL, 30, 2);
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
  tc = te_tcase(s, "overlap", 0);
  tcase_add_loop_test(tc, sp_overlap_block_matches_plain_bitwise, 0, 2);
  tcase_add_loop_test(tc, sp_overlap_with_biases_matches_plain_bitwise, 0, 2);
  tcase_add_loop_test(tc, sp_overlap_keeps_gelu_epilogue_bitwise, 0, 2);
  tcase_add_test(tc, sp_overlap_gelu_apart_when_the_sequence_asks);
  tcase_add_loop_test(tc, sp_overlap_fp8_delayed_matches_plain, 0, 4);
  tcase_add_loop_test(tc, sp_overlap_declined_on_every_rank_alike, 0, 4);
  tcase_add_test(tc, sp_overlap_killed_rank_times_out);
  tc = te_tcase(s, "misuse", 0);
  tcase_add_loop_test(tc, sp_ops_refuse_rows_not_divisible_by_ranks, 0, 2);
  return s;
}

TE_TEST_MAIN(sp_suite, TE_TEST_DEVICE)
