/* SPDX-License-Identifier: Apache-2.0
 * check_fuser_ops.c -- libtecomm's operations in libtecore's fuser
 * (tecomm_ops_register, te/comm.h), ranks as forked processes
 * (t/lib/comm_ranks.h), 2 and 4 ranks:
 *   - the tensor-parallel pair and the allreduce, forward and backward,
 *     against float64 sums of every rank's inputs (each rank scales by its
 *     own factor, so a sum that misses a rank or counts one twice shows);
 *   - the forward pattern tp_reduce/allreduce -> add -> make -> rmsnorm:
 *     the plan text names the fused group (and libtecore's own
 *     rmsnorm_bwd_add in the backward: the fused kernel writes the norm's
 *     rsigma, nothing recomputes it), and the fused sequence's
 *     output, new residual, rsigma, input gradient and parameter gradients match
 *     the same sequence run unfused (TECOMM_OP_NO_FUSION), fresh random
 *     inputs, outputs poisoned first; the same bits on every rank;
 *   - two-shot sums a symmetric row-parallel Linear output where it lies
 *     (no staged copy), fused and unfused, against one-shot;
 *   - the delayed-scaling amax reduction (MAX over the ranks), eager and
 *     inside a captured graph replayed with new amaxes each time;
 *   - the fuser's backward overlap (tp_copy's sum on the side stream under
  *     fc1's wgrad GEMM) with fc1's input gradient in symmetric memory
 *     (tecore_seq_set_grad): the same bits as without overlap, eager and
 *     as a replayed step graph; a rank killed before the backward gives a
 *     timeout naming it, not a hang;
 *   - argument errors of the kinds and the registration's idempotence. */
#include "comm_ranks.h"
#include <math.h>
#include <te/profile.h>
#include "common/convert.h"
#include "common/fp8.h"
#include "fuser_vals.h"

/* The forward row blocks (TECORE_OPS_FWD_CHUNKS, te/ops.h "Overlap"; off
 * by default) in 4 blocks at any size, so the overlap tests' 64-row
 * sequences take them; the other tests' 16-row ones are too short for 4
 * blocks of 16. */
__attribute__((constructor)) static void fwd_blocks_everywhere(void) {
  setenv("TECORE_OPS_FWD_CHUNKS", "4", 0);
  setenv("TECORE_OPS_FWD_CHUNK_MIN_KB", "0", 0);
}

static const tecore_dtype_t dtypes[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16};

static void put(tecore_devptr_t d, const void *h, size_t bytes, tecore_stream_t s) {
  RK_CORE(tecore_memcpy_async(d, te_hptr(h), bytes, s));
  RK_CORE(tecore_stream_synchronize(s));
}
static void get(void *h, tecore_devptr_t d, size_t bytes, tecore_stream_t s) {
  RK_CORE(tecore_memcpy_async(te_hptr(h), d, bytes, s));
  RK_CORE(tecore_stream_synchronize(s));
}

/* The rank's communicator with the kinds registered. */
static tecomm_comm_t rank_setup(int rank, int n, tecore_stream_t *s) {
  tecomm_comm_t c = tc_rank_comm(rank, n);
  RK_OK(tecomm_ops_register());
  RK_OK(tecomm_ops_register());   /* idempotent */
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, s));
  return c;
}

/* ---- the pair and the allreduce ---------------------------------------------------- */

enum { PR = 16, PC = 24 };

/* Case k: the kind under test, before or after a CONSTANT_SCALE by
 * rank + 1.  Forward y and backward dx against float64 from every rank's
 * x and dy. */
static void rank_pair(int rank, int n, void *arg) {
  int k = *(const int *)arg;
  static const int kinds[] = {TECORE_OP_TP_COPY, TECORE_OP_TP_REDUCE, TECORE_OP_ALLREDUCE};
  int kind = kinds[k];
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecomm_op_params prm = {.comm = c};
  struct tecore_seq_config cfg = {.rows = PR, .features = PC, .dtype = TECORE_DTYPE_F32,
                                  .seed = 1};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  struct tecore_op_desc scale = {.kind = TECORE_OP_CONSTANT_SCALE, .scale = (float)(rank + 1)};
  struct tecore_op_desc comm = {.kind = kind, .ctx = &prm};
  /* tp_copy first (its sum is backward's), the sums last */
  RK_CORE(tecore_seq_add(q, kind == TECORE_OP_TP_COPY ? &comm : &scale, NULL));
  RK_CORE(tecore_seq_add(q, kind == TECORE_OP_TP_COPY ? &scale : &comm, NULL));
  RK_CORE(tecore_seq_build(q, s));
  enum { N = PR * PC };
  static float xs[TC_MAX_RANKS][N], dys[TC_MAX_RANKS][N], y[N], dx[N];
  for (int p = 0; p < n; p++) {
    make_vals(xs[p], N, TECORE_DTYPE_F32, p, 11);
    make_vals(dys[p], N, TECORE_DTYPE_F32, p, 12);
  }
  tecore_devptr_t dX = dev_alloc(N * 4), dY = dev_alloc(N * 4), dDY = dev_alloc(N * 4),
                  dDX = dev_alloc(N * 4);
  put(dX, xs[rank], N * 4, s);
  put(dDY, dys[rank], N * 4, s);
  RK_CORE(tecore_memset_d32_async(dY, 0x7fc00000u, N, s));    /* NaN: poison */
  RK_CORE(tecore_memset_d32_async(dDX, 0x7fc00000u, N, s));
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, PR, PC, dX), Y = t2(TECORE_DTYPE_F32, PR, PC, dY),
                       DY = t2(TECORE_DTYPE_F32, PR, PC, dDY), DX = t2(TECORE_DTYPE_F32, PR, PC, dDX);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  RK_CORE(tecore_seq_backward(q, &DY, &DX, s));
  get(y, dY, sizeof y, s);
  get(dx, dDX, sizeof dx, s);
  for (size_t i = 0; i < N; i++) {
    /* forward: tp_copy y = (r+1) x; the sums y = sum_p (p+1) x_p
     * backward: tp_copy dx = sum_p (p+1) dy_p; tp_reduce dx = (r+1) dy;
     * allreduce dx = (r+1) sum_p dy_p */
    double fy = 0, fdx = 0, sdy = 0;
    for (int p = 0; p < n; p++) {
      fy += (p + 1) * (double)xs[p][i];
      fdx += (p + 1) * (double)dys[p][i];
      sdy += dys[p][i];
    }
    double wy = kind == TECORE_OP_TP_COPY ? (rank + 1) * (double)xs[rank][i] : fy;
    double wdx = kind == TECORE_OP_TP_COPY    ? fdx
                 : kind == TECORE_OP_TP_REDUCE ? (rank + 1) * (double)dys[rank][i]
                                               : (rank + 1) * sdy;
    /* f32: sums of <= 4 terms of magnitude <= 8 (and one product), a few
     * roundings of values below 64: 1e-5 absolute is ~ 80 ulps of 2^-24 * 64 */
    RK_ASSERT(fabs(y[i] - wy) <= 1e-5, "%s: y[%zu] = %.9g, want %.9g (nan: still the poison)",
              tecore_op_kind_name(kind), i, (double)y[i], wy);
    RK_ASSERT(fabs(dx[i] - wdx) <= 1e-5, "%s: dx[%zu] = %.9g, want %.9g (nan: still the poison)",
              tecore_op_kind_name(kind), i, (double)dx[i], wdx);
  }
  RK_CORE(tecore_seq_destroy(q));
  RK_CORE(tecore_mem_free(dX));
  RK_CORE(tecore_mem_free(dY));
  RK_CORE(tecore_mem_free(dDY));
  RK_CORE(tecore_mem_free(dDX));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(tp_pair_forward_backward) {
  int k = _i % 3, n = _i < 3 ? 2 : 4;
  tc_run_ranks(n, rank_pair, &k, 60);
  tc_shm_release();
}
END_TEST

/* ---- the forward fusion ------------------------------------------------------------ */

enum { FR = 16, FH = 64, FF = 32 };

struct fuse_case {
  int kind;              /* TECORE_OP_TP_REDUCE or TECORE_OP_ALLREDUCE */
  tecore_dtype_t dt;
  int fp8;               /* a delayed-scaling FP8 recipe (the Linears in FP8) */
  int quant;             /* a Quantize op between the norm and the last Linear */
};

/* A delayed-scaling recipe (HYBRID: E4M3 forward, E5M2 gradients) on q. */
static void set_delayed_hybrid(tecore_seq_t *q, tecore_stream_t s) {
  struct tecore_recipe r;
  RK_CORE(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.format = TECORE_FP8_HYBRID;
  RK_CORE(tecore_seq_set_recipe(q, &r, s));
}

/* linear | sum | add_extra_input(0) | make_extra_output(1) | rmsnorm |
 * (quantize |) linear+bias, with an FP8 recipe (delayed, E4M3) or none */
static tecore_seq_t *fuse_seq(const struct fuse_case *fc, struct tecomm_op_params *prm,
                              tecore_stream_t s) {
  struct tecore_seq_config cfg = {.rows = FR, .features = FH, .dtype = fc->dt, .seed = 5};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc d[] = {
      {.kind = TECORE_OP_LINEAR, .features = FH},
      {.kind = fc->kind, .ctx = prm},
      {.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = 0},
      {.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = 1},
      {.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
      {.kind = TECORE_OP_QUANTIZE},
      {.kind = TECORE_OP_LINEAR, .features = FF, .bias = 1},
  };
  for (size_t k = 0; k < sizeof d / sizeof d[0]; k++)
    if (k != 5 || fc->quant) RK_CORE(tecore_seq_add(q, &d[k], NULL));
  if (fc->fp8) set_delayed_hybrid(q, s);
  RK_CORE(tecore_seq_build(q, s));
  /* gamma random (the same in both sequences), so the norm's weight counts */
  struct tecore_op_info info;
  RK_CORE(tecore_seq_op(q, 4, &info));
  uint16_t g[FH * 2];
  make_vals(g, FH, fc->dt, 0, 21);
  put(info.param[0].data, g, FH * tecore_dtype_size(fc->dt), s);
  return q;
}

/* What one run leaves: out, the new residual; dx, the residual input's
 * gradient, every parameter gradient (F32), in host floats. */
struct fuse_out {
  double v[7][FH * FH];
  size_t n[7];
};

static void fetch(struct fuse_out *o, int k, tecore_devptr_t p, size_t n, tecore_dtype_t dt,
                  tecore_stream_t s) {
  static unsigned char h[FH * FH * 4];
  get(h, p, n * tecore_dtype_size(dt), s);
  for (size_t i = 0; i < n; i++) o->v[k][i] = from_dt(h, i, dt);
  o->n[k] = n;
}

static void fuse_run(tecore_seq_t *q, const struct fuse_case *fc, int rank, struct fuse_out *o,
                     tecore_stream_t s) {
  tecore_dtype_t dt = fc->dt;
  size_t es = tecore_dtype_size(dt);
  static unsigned char hx[FR * FH * 4], hr[FR * FH * 4], hdy[FR * FF * 4], hdr[FR * FH * 4];
  make_vals(hx, FR * FH, dt, rank, 31);      /* this rank's partial input */
  make_vals(hr, FR * FH, dt, 0, 32);         /* the residual: replicated */
  make_vals(hdy, FR * FF, dt, 0, 33);
  make_vals(hdr, FR * FH, dt, 0, 34);        /* the new residual's gradient */
  tecore_devptr_t x = dev_alloc(FR * FH * es), y = dev_alloc(FR * FF * es),
                  dy = dev_alloc(FR * FF * es), dx = dev_alloc(FR * FH * es);
  put(x, hx, FR * FH * es, s);
  put(dy, hdy, FR * FF * es, s);
  struct tecore_tensor r_in, r_in_g, r_out, r_out_g;
  RK_CORE(tecore_seq_extra(q, 0, &r_in, &r_in_g));
  RK_CORE(tecore_seq_extra(q, 1, &r_out, &r_out_g));
  put(r_in.data, hr, FR * FH * es, s);
  put(r_out_g.data, hdr, FR * FH * es, s);
  /* poison what the passes write */
  RK_CORE(tecore_memset_d8_async(y, 0xff, FR * FF * es, s));
  RK_CORE(tecore_memset_d8_async(dx, 0xff, FR * FH * es, s));
  RK_CORE(tecore_memset_d8_async(r_out.data, 0xff, FR * FH * es, s));
  RK_CORE(tecore_memset_d8_async(r_in_g.data, 0xff, FR * FH * es, s));
  struct tecore_op_info norm;
  RK_CORE(tecore_seq_op(q, 4, &norm));
  RK_ASSERT(norm.saved[0].data, "the RMSNorm has no rsigma buffer");
  RK_CORE(tecore_memset_d8_async(norm.saved[0].data, 0xff, FR * 4, s));
  RK_CORE(tecore_seq_zero_grad(q, s));
  put(r_out_g.data, hdr, FR * FH * es, s);   /* zero_grad cleared the extra output's */
  struct tecore_tensor X = t2(dt, FR, FH, x), Y = t2(dt, FR, FF, y), DY = t2(dt, FR, FF, dy),
                       DX = t2(dt, FR, FH, dx);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  fetch(o, 0, y, FR * FF, dt, s);
  fetch(o, 1, r_out.data, FR * FH, dt, s);
  fetch(o, 6, norm.saved[0].data, FR, TECORE_DTYPE_F32, s); /* rsigma, before backward reads it */
  RK_CORE(tecore_seq_backward(q, &DY, &DX, s));
  fetch(o, 2, dx, FR * FH, dt, s);
  fetch(o, 3, r_in_g.data, FR * FH, dt, s);
  struct tecore_seq_param p[8];
  size_t np = 0;
  RK_CORE(tecore_seq_params(q, p, 8, &np));
  RK_ASSERT(np == 4, "%zu parameters, want 4 (two weights, gamma, a bias)", np);
  /* first linear's weight, gamma */
  fetch(o, 4, p[0].grad.data, tecore_tensor_numel(&p[0].grad), TECORE_DTYPE_F32, s);
  fetch(o, 5, p[1].grad.data, tecore_tensor_numel(&p[1].grad), TECORE_DTYPE_F32, s);
  RK_CORE(tecore_mem_free(x));
  RK_CORE(tecore_mem_free(y));
  RK_CORE(tecore_mem_free(dy));
  RK_CORE(tecore_mem_free(dx));
}

/* Every value of the fused run within tol * (1 + the largest magnitude of
 * that quantity) of the unfused run's. */
static void compare_runs(const struct fuse_out *of, const struct fuse_out *ou, double tol,
                         const char *label) {
  static const char *const what[7] = {"out", "new residual", "dx", "residual gradient",
                                      "first linear's weight gradient", "gamma gradient",
                                      "rsigma"};
  for (int k = 0; k < 7; k++) {
    double scale = 0;
    for (size_t i = 0; i < ou->n[k]; i++) scale = fmax(scale, fabs(ou->v[k][i]));
    for (size_t i = 0; i < ou->n[k]; i++)
      RK_ASSERT(fabs(of->v[k][i] - ou->v[k][i]) <= tol * (1.0 + scale),
                "%s: %s[%zu] fused %.9g, unfused %.9g (tolerance %g of %g)", label, what[k], i,
                of->v[k][i], ou->v[k][i], tol, 1.0 + scale);
  }
}

static void fuse_teardown(tecore_seq_t *qf, tecore_seq_t *qu, tecore_stream_t s,
                          tecomm_comm_t c) {
  RK_CORE(tecore_seq_destroy(qf));
  RK_CORE(tecore_seq_destroy(qu));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

static void rank_fuse(int rank, int n, void *arg) {
  const struct fuse_case *fc = arg;
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecomm_op_params fused = {.comm = c};
  struct tecomm_op_params plain = {.comm = c, .flags = TECOMM_OP_NO_FUSION};
  tecore_seq_t *qf = fuse_seq(fc, &fused, s), *qu = fuse_seq(fc, &plain, s);
  /* the plans */
  const char *kn = tecore_op_kind_name(fc->kind);
  char plan[512], want[128];
  RK_CORE(tecore_seq_describe(qf, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  snprintf(want, sizeof want, " %s+add+rmsnorm[1-4] |", kn);
  RK_ASSERT(strstr(plan, want), "fused plan \"%s\" lacks \"%s\"", plan, want);
  RK_CORE(tecore_seq_describe(qu, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  snprintf(want, sizeof want, " %s[1] |", kn);
  RK_ASSERT(strstr(plan, want) && !strstr(plan, "+add+rmsnorm"),
            "unfused plan \"%s\": want \"%s\" and no fusion", plan, want);
  /* backward: planned by itself; libtecore's rmsnorm_bwd_add reads the
   * rsigma the fused kernel wrote (no pass recomputes it) */
  char bf[512], bu[512];
  RK_CORE(tecore_seq_describe(qf, TECORE_SEQ_BACKWARD, bf, sizeof bf, NULL));
  RK_CORE(tecore_seq_describe(qu, TECORE_SEQ_BACKWARD, bu, sizeof bu, NULL));
  RK_ASSERT(strstr(bf, "| rmsnorm_bwd_add[3-4]") && !strstr(bf, "rsigma+"),
            "fused backward plan \"%s\": want libtecore's rmsnorm_bwd_add[3-4]", bf);
  RK_ASSERT(strstr(bu, "| rmsnorm_bwd_add[3-4]"), "unfused backward plan \"%s\"", bu);
  static struct fuse_out of, ou;
  fuse_run(qf, fc, rank, &of, s);
  fuse_run(qu, fc, rank, &ou, s);
  /* The fused kernel adds the ranks and normalizes in the order libtecore's
   * unfused kernels use (libtecomm's promise, bit for bit on vdev), but the
   * table may pick another algorithm for the fused call than for the plain
   * sum, which adds the ranks in another order: F32 within 1e-5 of (1 +
   * the largest magnitude), BF16 within 1e-2 of it (an ulp of the norm's
   * output, 2^-8 relative, carried through one GEMM of 64 terms). */
  double tol = fc->dt == TECORE_DTYPE_F32 ? 1e-5 : 1e-2;
  char label[64];
  snprintf(label, sizeof label, "%s %s", kn, tecore_dtype_name(fc->dt));
  compare_runs(&of, &ou, tol, label);
  tc_rank_digest(of.v[0], sizeof of.v[0][0] * of.n[0]);
  tc_rank_digest(of.v[1], sizeof of.v[1][0] * of.n[1]);
  tc_rank_digest(of.v[6], sizeof of.v[6][0] * of.n[6]);
  fuse_teardown(qf, qu, s, c);
}

/* _i: bit 0 the sum's kind, bit 1 the dtype, bit 2 four ranks (else
 * two) */
START_TEST(fused_pattern_vs_unfused) {
  static const int kinds[] = {TECORE_OP_TP_REDUCE, TECORE_OP_ALLREDUCE};
  struct fuse_case fc = {.kind = kinds[_i & 1], .dt = dtypes[(_i >> 1) & 1]};
  int n = _i & 4 ? 4 : 2;
  tc_run_ranks(n, rank_fuse, &fc, 60);
  tc_expect_same_digest(n, "the fused output and new residual");
  tc_shm_release();
}
END_TEST

/* Half the spacing of E4M3 values at |v| (round to nearest): 3 mantissa
 * bits, normal from 2^-6, subnormal spacing 2^-9. */
static double e4m3_half_ulp(double v) {
  double a = fabs(v);
  if (a < 0x1p-6) return 0x1p-10;
  int e;
  frexp(a, &e);
  return ldexp(1.0, e - 4) / 2;
}

/* The FP8 forward fusion: [sum, add, make, rmsnorm (, quantize)] before an
 * FP8 Linear under delayed scaling runs as one tecomm_allreduce_add_rmsnorm
 * call that writes the Linear's FP8 input (the plan names
 * *+add+rmsnorm+quantize or +fp8, and the Linear does not quantize again).
 * Checked: those FP8 codes against float64 (residual_out * rsigma * gamma *
 * scale, within half an E4M3 ulp plus 2^-21 for the kernel's float
 * products) and against the unfused sequence's (libtecore's
 * rmsnorm+quantize: within one E4M3 ulp, as the sums may be added in
 * another order); the output, new residual, rsigma and every gradient
 * against the unfused sequence within 5e-2 of (1 + the largest magnitude)
 * (a code one E4M3 ulp, 2^-3 relative, apart in a 64-term FP8 GEMM).
 * _i: bit 0 the explicit Quantize op, bit 1 the sum's kind, bit 2 four
 * ranks (else two). */
/* The FP8 pattern tests' rank set-up: every Linear in FP8 however small,
 * the communicator, and the op parameters of the fusable and the
 * TECOMM_OP_NO_FUSION sequence. */
static tecomm_comm_t fp8_pair_setup(int rank, int n, tecore_stream_t *s,
                                    struct tecomm_op_params *fused,
                                    struct tecomm_op_params *plain) {
  setenv("TECORE_OPS_FP8_MIN_MNK", "0", 1);
  tecomm_comm_t c = rank_setup(rank, n, s);
  *fused = (struct tecomm_op_params){.comm = c};
  *plain = (struct tecomm_op_params){.comm = c, .flags = TECOMM_OP_NO_FUSION};
  return c;
}

static void rank_fuse8(int rank, int n, void *arg) {
  const struct fuse_case *fc = arg;
  tecore_stream_t s;
  struct tecomm_op_params fused, plain;
  tecomm_comm_t c = fp8_pair_setup(rank, n, &s, &fused, &plain);
  tecore_seq_t *qf = fuse_seq(fc, &fused, s), *qu = fuse_seq(fc, &plain, s);
  const char *kn = tecore_op_kind_name(fc->kind);
  size_t lin = fc->quant ? 6 : 5;
  char plan[512], want[128];
  RK_CORE(tecore_seq_describe(qf, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  snprintf(want, sizeof want, " %s+add+rmsnorm+%s[1-%zu] |", kn, fc->quant ? "quantize" : "fp8",
           lin - 1);
  RK_ASSERT(strstr(plan, want), "fused FP8 plan \"%s\" lacks \"%s\"", plan, want);
  RK_CORE(tecore_seq_describe(qu, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  RK_ASSERT(strstr(plan, "rmsnorm+quantize[4") && !strstr(plan, "+add+rmsnorm"),
            "unfused FP8 plan \"%s\": want libtecore's rmsnorm+quantize and no comm fusion", plan);
  static struct fuse_out of, ou;
  static uint8_t c8f[FR * FH], c8u[FR * FH];
  struct tecore_tensor tf, tu;
  float scf = 0, scu = 0;
  fuse_run(qf, fc, rank, &of, s);
  RK_CORE(tecore_seq_fp8_input(qf, lin, &tf));
  get(c8f, tf.data, sizeof c8f, s);
  get(&scf, tf.scale, 4, s);
  fuse_run(qu, fc, rank, &ou, s);
  RK_CORE(tecore_seq_fp8_input(qu, lin, &tu));
  get(c8u, tu.data, sizeof c8u, s);
  get(&scu, tu.scale, 4, s);
  RK_ASSERT(scf == scu && scf > 0, "FP8 scales: fused %g, unfused %g", (double)scf, (double)scu);
  uint16_t g[FH * 2];
  make_vals(g, FH, fc->dt, 0, 21);
  for (size_t i = 0; i < (size_t)FR * FH; i++) {
    size_t row = i / FH, col = i % FH;
    double ref = of.v[1][i] * of.v[6][row] * from_dt(g, col, fc->dt) * scf;
    double gf = te_e4m3_to_f32(c8f[i]), gu = te_e4m3_to_f32(c8u[i]);
    double tol = e4m3_half_ulp(ref) + 0x1p-21 * fabs(ref);
    RK_ASSERT(fabs(gf - ref) <= tol,
              "%s: FP8 input[%zu] %g (0x%02x), float64 %.9g, tolerance %.3g (half an E4M3 ulp)",
              kn, i, gf, c8f[i], ref, tol);
    RK_ASSERT(fabs(gf - gu) <= 2 * e4m3_half_ulp(gu) * 1.0001,
              "%s: FP8 input[%zu] fused %g (0x%02x), unfused %g (0x%02x): more than an E4M3 ulp",
              kn, i, gf, c8f[i], gu, c8u[i]);
  }
  char label[64];
  snprintf(label, sizeof label, "%s FP8", kn);
  compare_runs(&of, &ou, 5e-2, label);
  tc_rank_digest(c8f, sizeof c8f);
  tc_rank_digest(of.v[0], sizeof of.v[0][0] * of.n[0]);
  fuse_teardown(qf, qu, s, c);
}

START_TEST(fused_fp8_pattern_quantizes_for_the_linear) {
  static const int kinds[] = {TECORE_OP_TP_REDUCE, TECORE_OP_ALLREDUCE};
  struct fuse_case fc = {.kind = kinds[(_i >> 1) & 1], .dt = TECORE_DTYPE_BF16, .fp8 = 1,
                         .quant = _i & 1};
  int n = _i & 4 ? 4 : 2;
  tc_run_ranks(n, rank_fuse8, &fc, 60);
  tc_expect_same_digest(n, "the FP8 input and output");
  tc_shm_release();
}
END_TEST

/* ---- the first block's norm before tp_copy and an FP8 Linear ------------------------ */

/* [norm, tp_copy, linear+bias] under a delayed FP8 recipe.  With the
 * tp_copy fusable the plan names norm+tp_copy+fp8[0-1] and the norm writes
 * the Linear's FP8 input; with TECOMM_OP_NO_FUSION on the tp_copy the norm,
 * the tp_copy and the Linear's own quantize run apart.  Checked: the fused
 * FP8 codes against float64 (the norm of x from its own rsigma (and mean),
 * times gamma (plus beta) and the scale, within half an E4M3 ulp plus 2^-21
 * relative) and against the unfused run's (within one E4M3 ulp: that path
 * rounds the norm to bf16 first); rsigma the same bits; y, dx and every
 * parameter gradient within 5e-2 of (1 + the largest magnitude) of the
 * unfused run's.  _i bit 0: LayerNorm (else RMSNorm); bit 1: four ranks. */
static tecore_seq_t *norm8_seq(int ln, struct tecomm_op_params *prm, tecore_stream_t s) {
  struct tecore_seq_config cfg = {.rows = FR, .features = FH, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 9};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  const struct tecore_op_desc d[] = {
      {.kind = ln ? TECORE_OP_LAYERNORM : TECORE_OP_RMSNORM, .epsilon = 1e-5f},
      {.kind = TECORE_OP_TP_COPY, .ctx = prm},
      {.kind = TECORE_OP_LINEAR, .features = FF, .bias = 1},
  };
  for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) RK_CORE(tecore_seq_add(q, &d[k], NULL));
  set_delayed_hybrid(q, s);
  RK_CORE(tecore_seq_build(q, s));
  struct tecore_op_info info;
  RK_CORE(tecore_seq_op(q, 0, &info));
  uint16_t g[FH];
  for (size_t k = 0; k < info.nparams; k++) {   /* gamma (and beta): the same in both */
    make_vals(g, FH, TECORE_DTYPE_BF16, 0, 51 + k);
    put(info.param[k].data, g, sizeof g, s);
  }
  return q;
}

struct norm8_out {
  struct fuse_out o;            /* y, dx, rsigma, then the parameter gradients */
  double mean[FR];              /* LayerNorm */
  uint8_t c8[FR * FH];          /* the Linear's FP8 input */
  float scale;
};

static void norm8_run(tecore_seq_t *q, int rank, struct norm8_out *r, tecore_stream_t s) {
  const tecore_dtype_t dt = TECORE_DTYPE_BF16;
  static uint16_t hx[FR * FH], hdy[FR * FF];
  make_vals(hx, FR * FH, dt, 0, 41);      /* replicated, as tp_copy's input is */
  make_vals(hdy, FR * FF, dt, rank, 42);  /* each rank's column block's gradient */
  tecore_devptr_t x = dev_alloc(sizeof hx), y = dev_alloc(FR * FF * 2), dy = dev_alloc(sizeof hdy),
                  dx = dev_alloc(sizeof hx);
  put(x, hx, sizeof hx, s);
  put(dy, hdy, sizeof hdy, s);
  RK_CORE(tecore_memset_d8_async(y, 0xff, FR * FF * 2, s));
  RK_CORE(tecore_memset_d8_async(dx, 0xff, sizeof hx, s));
  struct tecore_op_info norm;
  struct tecore_tensor t8;
  RK_CORE(tecore_seq_op(q, 0, &norm));
  RK_CORE(tecore_memset_d8_async(norm.saved[0].data, 0xff, FR * 4, s));
  RK_CORE(tecore_seq_fp8_input(q, 2, &t8));
  RK_CORE(tecore_memset_d8_async(t8.data, 0xff, FR * FH, s));
  RK_CORE(tecore_seq_zero_grad(q, s));
  struct tecore_tensor X = t2(dt, FR, FH, x), Y = t2(dt, FR, FF, y), DY = t2(dt, FR, FF, dy),
                       DX = t2(dt, FR, FH, dx);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  fetch(&r->o, 0, y, FR * FF, dt, s);
  fetch(&r->o, 2, norm.saved[0].data, FR, TECORE_DTYPE_F32, s);
  if (norm.saved[1].data) {
    float m[FR];
    get(m, norm.saved[1].data, sizeof m, s);
    for (size_t i = 0; i < FR; i++) r->mean[i] = m[i];
  }
  get(r->c8, t8.data, sizeof r->c8, s);
  get(&r->scale, t8.scale, 4, s);
  RK_CORE(tecore_seq_backward(q, &DY, &DX, s));
  fetch(&r->o, 1, dx, FR * FH, dt, s);
  struct tecore_seq_param p[4];
  size_t np = 0;
  RK_CORE(tecore_seq_params(q, p, 4, &np));
  RK_ASSERT(np == 3 + (norm.nparams == 2), "%zu parameters, want %zu", np,
            (size_t)(3 + (norm.nparams == 2)));
  for (size_t k = 0; k < np; k++)
    fetch(&r->o, 3 + (int)k, p[k].grad.data, tecore_tensor_numel(&p[k].grad), TECORE_DTYPE_F32,
          s);
  for (int k = 3 + (int)np; k < 7; k++) r->o.n[k] = 0;
  RK_CORE(tecore_mem_free(x));
  RK_CORE(tecore_mem_free(y));
  RK_CORE(tecore_mem_free(dy));
  RK_CORE(tecore_mem_free(dx));
}

static void rank_norm8(int rank, int n, void *arg) {
  const int ln = *(const int *)arg;
  tecore_stream_t s;
  struct tecomm_op_params fused, plain;
  tecomm_comm_t c = fp8_pair_setup(rank, n, &s, &fused, &plain);
  tecore_seq_t *qf = norm8_seq(ln, &fused, s), *qu = norm8_seq(ln, &plain, s);
  const char *nm = ln ? "layernorm" : "rmsnorm";
  char plan[512], want[64];
  RK_CORE(tecore_seq_describe(qf, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  snprintf(want, sizeof want, "%s+tp_copy+fp8[0-1]", nm);
  RK_ASSERT(strstr(plan, want), "fusable plan \"%s\" lacks \"%s\"", plan, want);
  RK_CORE(tecore_seq_describe(qu, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  RK_ASSERT(!strstr(plan, "+tp_copy") && strstr(plan, " tp_copy[1]"),
            "TECOMM_OP_NO_FUSION plan \"%s\": want the tp_copy by itself", plan);
  static struct norm8_out rf, ru;
  norm8_run(qf, rank, &rf, s);
  norm8_run(qu, rank, &ru, s);
  RK_ASSERT(rf.scale == ru.scale && rf.scale > 0, "FP8 scales: fused %g, unfused %g",
            (double)rf.scale, (double)ru.scale);
  for (size_t i = 0; i < FR; i++)
    RK_ASSERT(rf.o.v[2][i] == ru.o.v[2][i], "rsigma[%zu]: fused %.9g, unfused %.9g", i,
              rf.o.v[2][i], ru.o.v[2][i]);
  uint16_t hx[FR * FH], g[FH], b[FH];
  make_vals(hx, FR * FH, TECORE_DTYPE_BF16, 0, 41);
  make_vals(g, FH, TECORE_DTYPE_BF16, 0, 51);
  make_vals(b, FH, TECORE_DTYPE_BF16, 0, 52);
  for (size_t i = 0; i < (size_t)FR * FH; i++) {
    size_t row = i / FH, col = i % FH;
    double xv = from_dt(hx, i, TECORE_DTYPE_BF16);
    double ref = (ln ? (xv - rf.mean[row]) : xv) * rf.o.v[2][row] *
                 from_dt(g, col, TECORE_DTYPE_BF16);
    if (ln) ref += from_dt(b, col, TECORE_DTYPE_BF16);
    ref *= rf.scale;
    double gf = te_e4m3_to_f32(rf.c8[i]), gu = te_e4m3_to_f32(ru.c8[i]);
    double tol = e4m3_half_ulp(ref) + 0x1p-21 * fabs(ref);
    RK_ASSERT(fabs(gf - ref) <= tol,
              "%s: FP8 input[%zu] %g (0x%02x), float64 %.9g, tolerance %.3g (half an E4M3 ulp)",
              nm, i, gf, rf.c8[i], ref, tol);
    RK_ASSERT(fabs(gf - gu) <= 2 * e4m3_half_ulp(gu) * 1.0001,
              "%s: FP8 input[%zu] fused %g (0x%02x), unfused %g (0x%02x): more than an E4M3 ulp",
              nm, i, gf, rf.c8[i], gu, ru.c8[i]);
  }
  static const char *const what[7] = {"y", "dx", "rsigma", "parameter 0's gradient",
                                      "parameter 1's gradient", "parameter 2's gradient",
                                      "parameter 3's gradient"};
  /* The Linear's weight gradient, dW[f][h] = sum over rows of dy[r][f] x[r][h],
   * reads the FP8 input, whose codes may differ by an E4M3 ulp between the
   * two plans (checked above): each such code moves dW[f][h] by |dy[r][f]|
   * (its E5M2 copy: at most 1.25x) times the two codes' difference, added
   * to the element's tolerance. */
  const int kw = 1 + (int)(3 + (ln ? 1 : 0));   /* gamma[, beta], W, b: W is the 2nd last */
  static uint16_t hdy[FR * FF];
  make_vals(hdy, FR * FF, TECORE_DTYPE_BF16, rank, 42);   /* norm8_run's dy */
  for (int k = 0; k < 7; k++) {
    double scale = 0;
    RK_ASSERT(rf.o.n[k] == ru.o.n[k], "%s: %zu values fused, %zu unfused", what[k], rf.o.n[k],
              ru.o.n[k]);
    for (size_t i = 0; i < ru.o.n[k]; i++) scale = fmax(scale, fabs(ru.o.v[k][i]));
    for (size_t i = 0; i < ru.o.n[k]; i++) {
      double tol = 5e-2 * (1.0 + scale);
      if (k == kw && ru.o.n[k] == (size_t)FF * FH) {
        size_t f = i / FH, h = i % FH;
        for (size_t r = 0; r < FR; r++) {
          double dc = fabs(te_e4m3_to_f32(rf.c8[r * FH + h]) - te_e4m3_to_f32(ru.c8[r * FH + h]));
          tol += 1.25 * fabs(from_dt(hdy, r * FF + f, TECORE_DTYPE_BF16)) * dc / rf.scale;
        }
      }
      RK_ASSERT(fabs(rf.o.v[k][i] - ru.o.v[k][i]) <= tol,
                "%s: %s[%zu] fused %.9g, unfused %.9g (tolerance %g)", nm, what[k], i,
                rf.o.v[k][i], ru.o.v[k][i], tol);
    }
  }
  tc_rank_digest(rf.c8, sizeof rf.c8);
  tc_rank_digest(rf.o.v[1], sizeof rf.o.v[1][0] * rf.o.n[1]);
  RK_CORE(tecore_seq_destroy(qf));
  RK_CORE(tecore_seq_destroy(qu));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(norm_before_tp_copy_writes_the_fp8_input) {
  int ln = _i & 1, n = _i & 2 ? 4 : 2;
  tc_run_ranks(n, rank_norm8, &ln, 60);
  tc_expect_same_digest(n, "the FP8 input and dx");
  tc_shm_release();
}
END_TEST

/* ---- two-shot on a symmetric row-parallel output ------------------------------------ */

/* The sum after a Linear reads a dead input: te-demo --tp puts that
 * Linear's output in symmetric memory (tecore_seq_set_saved with
 * tecomm_mem_alloc) so that two-shot reduce-scatters into it where it
 * lies.  It once staged a 64 MiB copy of it per call (two-shot writes its
 * input, and the fuser's sums kept the input intact as the public calls
 * must).  Here: the sequence under test (_i bit 0: fused, else unfused)
 * with two-shot forced and boundary 1 symmetric, against the same model
 * unfused with one-shot (which reads its symmetric input and leaves it); after the
 * passes, boundary 1 must hold partial sums somewhere (it was the
 * two-shot's buffer, no staged copy was) and every output, the new
 * residual, rsigma and every gradient must match the reference within 1e-5
 * of (1 + the largest magnitude) (F32; the ranks added in another order).
 * _i bit 1: four ranks (else two); bit 2: no pool (TECOMM_POOL_MB=0). */
static tecore_devptr_t saved_bnd(tecore_seq_t *q, size_t bnd, size_t *bytes, size_t *index) {
  struct tecore_seq_saved sv[16];
  size_t ns = 0;
  RK_CORE(tecore_seq_get_saved(q, sv, 16, &ns));
  for (size_t i = 0; i < ns && i < 16; i++)
    if (sv[i].bnd == bnd && sv[i].part == TECORE_SEQ_SAVED_DATA) {
      if (bytes) *bytes = sv[i].bytes;
      if (index) *index = i;
      return sv[i].ptr;
    }
  RK_ASSERT(0, "boundary %zu is not among the %zu saved tensors", bnd, ns);
  return 0;
}

static void rank_twoshot_sym(int rank, int n, void *arg) {
  int fusedv = *(const int *)arg & 1;
  /* no pool: tecomm_mem_alloc makes a segment of its own (as te-demo's
   * 64 MiB outputs past the pool), and nothing can be staged: the
   * in-place level runs two-shot only on an input it may write */
  if (*(const int *)arg & 4) setenv("TECOMM_POOL_MB", "0", 1);
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecomm_op_params two = {.comm = c, .algo = TECOMM_ALGO_TWOSHOT,
                                 .flags = fusedv ? 0 : TECOMM_OP_NO_FUSION};
  struct tecomm_op_params one = {.comm = c, .algo = TECOMM_ALGO_ONESHOT,
                                 .flags = TECOMM_OP_NO_FUSION};
  struct fuse_case fc = {.kind = TECORE_OP_TP_REDUCE, .dt = TECORE_DTYPE_F32};
  tecore_seq_t *qt = fuse_seq(&fc, &two, s), *qr = fuse_seq(&fc, &one, s);
  /* both boundaries 1 symmetric (one-shot reads its peers' inputs where
   * they lie, and leaves them) */
  tecore_devptr_t sym[2] = {0, 0};
  tecore_seq_t *qs[2] = {qt, qr};
  for (int k = 0; k < 2; k++) {
    size_t bytes = 0, idx = 0;
    (void)saved_bnd(qs[k], 1, &bytes, &idx);
    RK_OK(tecomm_mem_alloc(c, bytes, &sym[k]));
    RK_CORE(tecore_seq_set_saved(qs[k], idx, sym[k]));
    RK_ASSERT(saved_bnd(qs[k], 1, NULL, NULL) == sym[k],
              "boundary 1 did not move to symmetric memory");
  }
  static struct fuse_out ot, orf;
  fuse_run(qt, &fc, rank, &ot, s);
  fuse_run(qr, &fc, rank, &orf, s);
  /* the reference's boundary 1 is this rank's Linear output, as it was */
  enum { NB = FR * FH };
  static float bt[NB], br[NB];
  get(bt, sym[0], sizeof bt, s);
  get(br, sym[1], sizeof br, s);
  size_t changed = 0;
  for (size_t i = 0; i < NB; i++) changed += bt[i] != br[i];
  RK_ASSERT(changed > 0, "%s two-shot left its symmetric input as the Linear wrote it: it "
            "summed a staged copy", fusedv ? "fused" : "unfused");
  compare_runs(&ot, &orf, 1e-5, fusedv ? "fused two-shot" : "unfused two-shot");
  tc_rank_digest(ot.v[0], sizeof ot.v[0][0] * ot.n[0]);
  RK_CORE(tecore_seq_destroy(qt));   /* before the memory they were given */
  RK_CORE(tecore_seq_destroy(qr));
  RK_OK(tecomm_mem_free(c, sym[1]));   /* in reverse: the pool's first fit */
  RK_OK(tecomm_mem_free(c, sym[0]));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(twoshot_sums_symmetric_linear_output_unstaged) {
  int k = _i;
  int n = _i & 2 ? 4 : 2;
  tc_run_ranks(n, rank_twoshot_sym, &k, 60);
  tc_expect_same_digest(n, "the two-shot run's output");
  tc_shm_release();
}
END_TEST

/* ---- delayed scaling's amax reduction inside a graph --------------------------------- */

/* tecore_delayed_update with recipe.amax_reduce = tecomm_amax_reduce:
 * the first update eager (it also does the allreduce's lazy set-up outside
 * the capture), then captured once and replayed with new amaxes; after
 * each, the scales are 448 / (the MAX over the ranks of that round's
 * amaxes).  (It moved here from t/comm/check_allreduce, which checked the
 * eager update only.) */
static void rank_amax_graph(int rank, int n, void *arg) {
  (void)arg;
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecore_recipe r;
  RK_CORE(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.format = TECORE_FP8_E4M3;
  r.history_len = 1;
  r.amax_algo = TECORE_AMAX_MOST_RECENT;
  r.amax_reduce = tecomm_amax_reduce;
  r.amax_reduce_ctx = c;
  enum { CNT = 7, ROUNDS = 6 };
  struct tecore_delayed_state st;
  RK_CORE(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, CNT, s, &st));
  tecore_graph_t g = NULL;
  tecore_graph_exec_t ge = NULL;
  for (int rep = 0; rep < ROUNDS; rep++) {
    float all[TC_MAX_RANKS][CNT], scale[CNT];
    for (int p = 0; p < n; p++) {
      tc_rank_seed(p, 100 + (uint64_t)rep);
      for (int i = 0; i < CNT; i++) all[p][i] = te_rand_float(0.5f, 100.0f);
    }
    RK_CORE(tecore_memcpy_async(st.amax, te_hptr(all[rank]), sizeof all[rank], s));
    RK_CORE(tecore_memset_d32_async(st.scale, 0x7fc00000u, CNT, s));   /* poison */
    if (rep == 0) {
      RK_CORE(tecore_delayed_update(&r, &st, s));
      RK_CORE(tecore_stream_synchronize(s));
      RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
      RK_CORE(tecore_delayed_update(&r, &st, s));
      RK_CORE(tecore_stream_end_capture(s, &g));
      RK_CORE(tecore_graph_instantiate(&ge, g));
    } else {
      RK_CORE(tecore_graph_launch(ge, s));
    }
    RK_CORE(tecore_memcpy_async(te_hptr(scale), st.scale, sizeof scale, s));
    RK_CORE(tecore_stream_synchronize(s));
    for (int i = 0; i < CNT; i++) {
      float m = 0;
      for (int p = 0; p < n; p++) m = all[p][i] > m ? all[p][i] : m;
      float want = 448.0f / m;
      RK_ASSERT(fabsf(scale[i] - want) <= 1e-6f * want,
                "%s %d: scale[%d] %.9g, want 448 / max %.9g = %.9g",
                rep ? "replay" : "eager update", rep, i, (double)scale[i], (double)m,
                (double)want);
    }
  }
  RK_CORE(tecore_graph_exec_destroy(ge));
  RK_CORE(tecore_graph_destroy(g));
  RK_CORE(tecore_delayed_state_free(&st));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(amax_max_across_ranks_in_graph) {
  tc_run_ranks(_i ? 4 : 2, rank_amax_graph, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- misuse ------------------------------------------------------------------------- */

/* Expects tecore_seq_add to refuse d with code and a detail naming what. */
static void expect_add(tecore_seq_t *q, const struct tecore_op_desc *d, tecore_result_t code,
                       const char *what) {
  tecore_clear_error();
  tecore_result_t r = tecore_seq_add(q, d, NULL);
  RK_ASSERT(r == code && strstr(tecore_last_error(), what),
            "tecore_seq_add(%s): %s \"%s\", want %s naming \"%s\"", tecore_op_kind_name(d->kind),
            tecore_result_name(r), tecore_last_error(), tecore_result_name(code), what);
}

static void rank_misuse(int rank, int n, void *arg) {
  (void)arg;
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecore_seq_config cfg = {.rows = 16, .features = 16, .dtype = TECORE_DTYPE_F32,
                                  .seed = 1};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  struct tecomm_op_params p = {.comm = c};
  struct tecore_op_desc d = {.kind = TECORE_OP_TP_COPY};
  expect_add(q, &d, TECORE_ERR_INVALID, "desc->ctx is NULL");
  p.comm = NULL;
  d.ctx = &p;
  expect_add(q, &d, TECORE_ERR_INVALID, "desc->ctx->comm is NULL");
  p.comm = c;
  p.algo = TECOMM_ALGO_COUNT_;
  d.kind = TECORE_OP_TP_REDUCE;
  expect_add(q, &d, TECORE_ERR_INVALID, "desc->ctx->algo");
  p.algo = TECOMM_ALGO_AUTO;
  p.flags = 0x80;
  d.kind = TECORE_OP_ALLREDUCE;
  expect_add(q, &d, TECORE_ERR_INVALID, "desc->ctx->flags");
  p.flags = 0;
  d.features = 3;
  expect_add(q, &d, TECORE_ERR_INVALID, "desc->features");
  /* unregistered, the slots are empty again; registered, they work */
  RK_OK(tecomm_ops_unregister());
  d.features = 0;
  expect_add(q, &d, TECORE_ERR_NOT_SUPPORTED, "no implementation is registered");
  RK_OK(tecomm_ops_register());
  RK_CORE(tecore_seq_add(q, &d, NULL));
  RK_CORE(tecore_seq_destroy(q));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(kinds_refuse_bad_params) {
  tc_run_ranks(2, rank_misuse, NULL, 60);
  tc_shm_release();
}
END_TEST

/* ---- backward overlap and tp_copy's symmetric gradient -------------------------------- */

/* te-demo's tensor-parallel blocks (tools/lib/demo_tp.c), OL of them, on each
 * rank its own random weights (so a sum that drops or doubles a rank
 * shows), the fuser's backward overlap (te/ops.h) on or off (flags), and
 * tp_copy's gradient (fc1's input gradient, boundary 7b + 3) in the
 * symmetric buffer sym when given (tecore_seq_set_grad): the sum reduces
 * it where fc1's dgrad wrote it, being dead after. */
enum { OR = 64, OH = 64, OF = 64, OL = 2, ONOPS = 8 * OL };

static tecore_seq_t *tp_seq(int rank, int n, struct tecomm_op_params *prm, unsigned flags,
                            int fp8, tecore_devptr_t sym, tecore_stream_t s) {
  struct tecore_seq_config cfg = {.rows = OR, .features = OH, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 3, .flags = flags};
  tecore_seq_t *q;
  RK_CORE(tecore_seq_create(&cfg, &q));
  for (int b = 0; b < OL; b++) {
    const struct tecore_op_desc d[] = {
        {.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = b},
        {.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
        {.kind = TECORE_OP_TP_COPY, .ctx = prm},
        {.kind = TECORE_OP_LINEAR, .features = OF / (size_t)n, .bias = 1},
        {.kind = TECORE_OP_GELU},
        {.kind = TECORE_OP_LINEAR, .features = OH, .bias = rank == 0},
        {.kind = TECORE_OP_TP_REDUCE, .ctx = prm},
        {.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = b},
    };
    for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) RK_CORE(tecore_seq_add(q, &d[k], NULL));
  }
  if (fp8) {
    struct tecore_recipe r;
    RK_CORE(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
    r.amax_reduce = tecomm_amax_reduce;
    r.amax_reduce_ctx = prm->comm;
    RK_CORE(tecore_seq_set_recipe(q, &r, s));
  }
  RK_CORE(tecore_seq_build(q, s));
  struct tecore_seq_param p[8 * OL];
  size_t np = 0;
  RK_CORE(tecore_seq_params(q, p, 8 * OL, &np));
  static uint16_t h[OF * OH];
  for (size_t i = 0; i < np; i++) {
    size_t m = tecore_tensor_numel(&p[i].value);
    /* weights and biases in [-0.25, 0.25), gamma in [0.75, 1.25) and
     * replicated, as tensor parallelism has it */
    int gamma = !strcmp(p[i].name, "gamma");
    uint64_t salt = 40 + 2 * p[i].op + (uint64_t)!strcmp(p[i].name, "bias");
    make_vals(h, m, TECORE_DTYPE_BF16, gamma ? 0 : rank, salt);
    for (size_t j = 0; j < m; j++)
      to_dt(h, j, TECORE_DTYPE_BF16,
            (float)((gamma ? 1.0 : 0.0) + from_dt(h, j, TECORE_DTYPE_BF16) / 8.0));
    put(p[i].value.data, h, m * 2, s);
  }
  for (int b = 0; sym && b < OL; b++) RK_CORE(tecore_seq_set_grad(q, (size_t)(8 * b + 3), sym));
  return q;
}

/* What a step leaves: dx (bf16 as floats) and every parameter gradient. */
struct tp_out {
  float v[1 + 8 * OL][OF * OH];
  size_t n[1 + 8 * OL], np;
};

/* Queues a step (zero_grad, two microbatches forward and backward) on s;
 * x, dy: [2] replicated inputs and output gradients; dx the input
 * gradient. */
static void tp_queue_step(tecore_seq_t *q, const tecore_devptr_t *x, const tecore_devptr_t *dy,
                          tecore_devptr_t y, tecore_devptr_t dx, tecore_stream_t s) {
  RK_CORE(tecore_seq_zero_grad(q, s));
  for (int mb = 0; mb < 2; mb++) {
    struct tecore_tensor X = t2(TECORE_DTYPE_BF16, OR, OH, x[mb]),
                         Y = t2(TECORE_DTYPE_BF16, OR, OH, y),
                         DY = t2(TECORE_DTYPE_BF16, OR, OH, dy[mb]),
                         DX = t2(TECORE_DTYPE_BF16, OR, OH, dx);
    RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
    RK_CORE(tecore_seq_backward(q, &DY, &DX, s));
  }
}

static void tp_fetch(tecore_seq_t *q, tecore_devptr_t dx, struct tp_out *o, tecore_stream_t s) {
  static uint16_t h[OR * OH];
  get(h, dx, sizeof h, s);
  for (size_t i = 0; i < OR * OH; i++) o->v[0][i] = (float)from_dt(h, i, TECORE_DTYPE_BF16);
  o->n[0] = OR * OH;
  struct tecore_seq_param p[8 * OL];
  RK_CORE(tecore_seq_params(q, p, 8 * OL, &o->np));
  for (size_t i = 0; i < o->np; i++) {
    o->n[i + 1] = tecore_tensor_numel(&p[i].grad);
    get(o->v[i + 1], p[i].grad.data, o->n[i + 1] * 4, s);
  }
}

/* tol < 0: bit for bit; else within tol * (1 + the largest magnitude). */
static void tp_compare(const struct tp_out *a, const struct tp_out *b, double tol,
                       const char *what) {
  RK_ASSERT(a->np == b->np, "%s: %zu parameters vs %zu", what, a->np, b->np);
  for (size_t k = 0; k <= a->np; k++) {
    double scale = 0;
    for (size_t i = 0; i < a->n[k]; i++) {
      RK_ASSERT(isfinite(a->v[k][i]), "%s: %s %zu [%zu] is %g", what, k ? "gradient" : "dx",
                k, i, (double)a->v[k][i]);
      scale = fmax(scale, fabs(b->v[k][i]));
    }
    for (size_t i = 0; i < a->n[k]; i++) {
      int ok = tol < 0 ? memcmp(&a->v[k][i], &b->v[k][i], 4) == 0
                       : fabs(a->v[k][i] - b->v[k][i]) <= tol * (1 + scale);
      RK_ASSERT(ok, "%s: %s %zu [%zu]: %.9g vs %.9g (%s)", what, k ? "parameter gradient" : "dx",
                k, i, (double)a->v[k][i], (double)b->v[k][i],
                tol < 0 ? "bit for bit" : "tolerance");
    }
  }
}

/* _i bit 0: FP8 (delayed, amaxes reduced across the ranks); bit 1: four
 * ranks; bit 2 (2 ranks): TECOMM_CE_MIN_KB=1, so every sum on the side
 * stream (the backward's plain ones, the forward row blocks' fused ones)
 * takes the copy-engine one-shot, whose local sum kernel the eager step's
 * profile must list.  Overlap on (the backward sums on the side stream, and fc2's
 * GEMM in 4 row blocks with the fused call on each block there) with
 * tp_copy's gradient symmetric against overlap
 * off with the same (the same algorithms: bit for bit), eager and as a
 * replayed graph of the whole step (the side stream forked and joined in
 * the capture); against overlap off without the symmetric gradient (the
 * sum staged: maybe another algorithm, another order of the ranks: BF16
 * dx within 1e-2 of (1 + its largest magnitude), the F32 gradients of
 * bf16 products the same); dx the same bits on every rank. */
static void rank_overlap(int rank, int n, void *arg) {
  int fp8 = *(const int *)arg & 1, ce = *(const int *)arg & 4;
  if (ce) setenv("TECOMM_CE_MIN_KB", "1", 1);
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecomm_op_params prm = {.comm = c};
  tecore_devptr_t sym = 0;
  RK_OK(tecomm_mem_alloc(c, OR * OH * 2, &sym));
  tecore_seq_t *qa = tp_seq(rank, n, &prm, 0, fp8, sym, s);
  tecore_seq_t *qb = tp_seq(rank, n, &prm, TECORE_SEQ_NO_OVERLAP, fp8, sym, s);
  tecore_seq_t *qc = tp_seq(rank, n, &prm, TECORE_SEQ_NO_OVERLAP, fp8, 0, s);
  tecore_devptr_t x[2], dy[2], y = dev_alloc(OR * OH * 2), dx = dev_alloc(OR * OH * 2);
  static uint16_t h[OR * OH];
  for (int mb = 0; mb < 2; mb++) {
    x[mb] = dev_alloc(sizeof h);
    dy[mb] = dev_alloc(sizeof h);
    make_vals(h, OR * OH, TECORE_DTYPE_BF16, 0, 50 + mb);   /* replicated: rank 0's */
    put(x[mb], h, sizeof h, s);
    make_vals(h, OR * OH, TECORE_DTYPE_BF16, 0, 60 + mb);
    put(dy[mb], h, sizeof h, s);
  }
  /* the plans: overlap runs fc2's GEMM in 4 blocks of 16 rows before the
   * fused call (the last block's sum is not fused) and both tp_copy sums
   * on the side stream */
  char plan[2048];
  RK_CORE(tecore_seq_describe(qa, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  RK_ASSERT(strstr(plan, " linear(x4)[5] |") && !strstr(plan, "linear(x4)[13]"),
            "overlap: forward plan \"%s\": want fc2 of block 0 (op 5) in 4 row blocks", plan);
  RK_CORE(tecore_seq_describe(qa, TECORE_SEQ_BACKWARD, plan, sizeof plan, NULL));
  RK_ASSERT(strstr(plan, " tp_copy(side)[2] |") && strstr(plan, " tp_copy(side)[10] |"),
            "overlap: backward plan \"%s\": want both tp_copy sums on the side stream", plan);
  RK_CORE(tecore_seq_describe(qb, TECORE_SEQ_FORWARD, plan, sizeof plan, NULL));
  RK_ASSERT(!strstr(plan, "(x4)"), "no overlap: forward plan \"%s\"", plan);
  static struct tp_out oa, ob, oc, og;
  tecore_seq_t *qs[3] = {qa, qb, qc};
  struct tp_out *os[3] = {&oa, &ob, &oc};
  for (int k = 0; k < 3; k++) {
    RK_CORE(tecore_memset_d8_async(dx, 0xff, OR * OH * 2, s));   /* poison */
    if (k == 0) RK_CORE(tecore_profile_start());
    tp_queue_step(qs[k], x, dy, y, dx, s);
    RK_CORE(tecore_stream_synchronize(s));
    if (k == 0) {
      /* which kernels the overlapped step ran: the copy-engine sum's
       * exactly when TECOMM_CE_MIN_KB puts the side stream's sums there */
      RK_CORE(tecore_profile_stop());
      FILE *f = tmpfile();
      RK_ASSERT(f, "tmpfile");
      RK_CORE(tecore_profile_report(fileno(f), NULL));
      static char rep[16384];
      rewind(f);
      size_t got = fread(rep, 1, sizeof rep - 1, f);
      rep[got] = 0;
      fclose(f);
      RK_ASSERT(!strstr(rep, "te_comm_ar_ce_reduce") == !ce,
                "overlap%s: the step's kernels %s te_comm_ar_ce_reduce:\n%s",
                ce ? " with TECOMM_CE_MIN_KB=1" : "", ce ? "lack" : "include", rep);
    }
    tp_fetch(qs[k], dx, os[k], s);
  }
  tp_compare(&oa, &ob, -1, "overlap on vs off (symmetric gradient)");
  tp_compare(&oa, &oc, 1e-2, "overlap on (symmetric) vs off (staged)");
  /* the step as a graph, replayed twice */
  tecore_graph_t g;
  tecore_graph_exec_t ge;
  RK_CORE(tecore_stream_begin_capture(s, TECORE_CAPTURE_THREAD_LOCAL));
  tp_queue_step(qa, x, dy, y, dx, s);
  RK_CORE(tecore_stream_end_capture(s, &g));
  RK_CORE(tecore_graph_instantiate(&ge, g));
  for (int rep = 0; rep < 2; rep++) {
    RK_CORE(tecore_memset_d8_async(dx, 0xff, OR * OH * 2, s));
    RK_CORE(tecore_graph_launch(ge, s));
    RK_CORE(tecore_stream_synchronize(s));
    tp_fetch(qa, dx, &og, s);
    tp_compare(&og, &ob, -1, "overlap on, a replayed graph, vs off eager");
  }
  tc_rank_digest(oa.v[0], sizeof oa.v[0][0] * oa.n[0]);
  RK_CORE(tecore_graph_exec_destroy(ge));
  RK_CORE(tecore_graph_destroy(g));
  RK_CORE(tecore_seq_destroy(qa));
  RK_CORE(tecore_seq_destroy(qb));
  RK_CORE(tecore_seq_destroy(qc));
  RK_OK(tecomm_mem_free(c, sym));
  for (int mb = 0; mb < 2; mb++) {
    RK_CORE(tecore_mem_free(x[mb]));
    RK_CORE(tecore_mem_free(dy[mb]));
  }
  RK_CORE(tecore_mem_free(y));
  RK_CORE(tecore_mem_free(dx));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(overlap_same_bits_eager_and_graph) {
  int k = _i;
  int n = _i & 2 ? 4 : 2;   /* 4, 5: 2 ranks, ce */
  tc_run_ranks(n, rank_overlap, &k, 120);
  tc_expect_same_digest(n, "dx with overlap");
  tc_shm_release();
}
END_TEST

/* A rank killed between the forward and the backward: the survivors'
 * backward sum on the side stream times out (TECOMM_TIMEOUT 1 s), the
 * caller's stream still comes back (the join waits for the side stream,
 * which ends), and the communicator reports the timeout naming the dead
 * rank -- an error, not a hang. */
static void rank_overlap_killed(int rank, int n, void *arg) {
  setenv("TECOMM_TIMEOUT", "1000", 1);
  if (*(const int *)arg) setenv("TECOMM_CE_MIN_KB", "1", 1);   /* the sums on ce */
  tecore_stream_t s;
  tecomm_comm_t c = rank_setup(rank, n, &s);
  struct tecomm_op_params prm = {.comm = c};
  tecore_devptr_t sym = 0;
  RK_OK(tecomm_mem_alloc(c, OR * OH * 2, &sym));
  tecore_seq_t *q = tp_seq(rank, n, &prm, 0, 0, sym, s);
  tecore_devptr_t x = dev_alloc(OR * OH * 2), y = dev_alloc(OR * OH * 2);
  static uint16_t h[OR * OH];
  make_vals(h, OR * OH, TECORE_DTYPE_BF16, 0, 70);
  put(x, h, sizeof h, s);
  struct tecore_tensor X = t2(TECORE_DTYPE_BF16, OR, OH, x), Y = t2(TECORE_DTYPE_BF16, OR, OH, y);
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  RK_CORE(tecore_seq_backward(q, &X, NULL, s));   /* one whole step first: set-up done */
  RK_CORE(tecore_seq_forward(q, &X, &Y, 0, s));
  RK_CORE(tecore_stream_synchronize(s));
  RK_ASSERT(tc_shm_barrier(tc_shm) == 0, "barrier");
  if (rank == n - 1) raise(SIGKILL);
  tecore_result_t r = tecore_seq_backward(q, &X, NULL, s);
  RK_ASSERT(r == TECORE_SUCCESS || r == TECORE_ERR_TIMEOUT || r == TECORE_ERR_INTERNAL,
            "backward after a peer died: %s (%s)", tecore_result_name(r), tecore_last_error());
  tecore_result_t w = te_stream_wait(s, 5000);
  RK_ASSERT(w == TECORE_SUCCESS, "the stream did not come back within 5 s: %s",
            tecore_result_name(w));
  int peer = -2;
  tecomm_result_t st = tecomm_comm_status(c, &peer);
  RK_ASSERT(st == TECOMM_ERR_TIMEOUT, "status after a peer died: %s (%s)",
            tecomm_result_name(st), tecomm_last_error());
  RK_ASSERT(peer == n - 1, "status names peer %d, want %d", peer, n - 1);
  RK_CORE(tecore_seq_destroy(q));
  RK_CORE(tecore_mem_free(x));
  RK_CORE(tecore_mem_free(y));
  RK_CORE(tecore_stream_destroy(s));
  (void)tecomm_comm_destroy(c);
}

START_TEST(overlap_killed_rank_times_out) {
  int ce = _i;
  tc_run_ranks_ex(2, rank_overlap_killed, &ce, 30, 1);
  tc_shm_release();
}
END_TEST

static Suite *ops_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  Suite *s = suite_create("comm_ops");
  TCase *tc = te_tcase(s, "pair", 0);
  tcase_add_loop_test(tc, tp_pair_forward_backward, 0, 6);
  tc = te_tcase(s, "fusion", 0);
  tcase_add_loop_test(tc, fused_pattern_vs_unfused, 0, 8);
  tcase_add_loop_test(tc, fused_fp8_pattern_quantizes_for_the_linear, 0, 8);
  tcase_add_loop_test(tc, norm_before_tp_copy_writes_the_fp8_input, 0, 4);
  tcase_add_loop_test(tc, twoshot_sums_symmetric_linear_output_unstaged, 0, 8);
  tc = te_tcase(s, "amax", 0);
  tcase_add_loop_test(tc, amax_max_across_ranks_in_graph, 0, 2);
  tc = te_tcase(s, "overlap", 0);
  tcase_add_loop_test(tc, overlap_same_bits_eager_and_graph, 0, 6);
  tcase_add_loop_test(tc, overlap_killed_rank_times_out, 0, 2);
  tc = te_tcase(s, "misuse", 0);
  tcase_add_test(tc, kinds_refuse_bad_params);
  return s;
}

TE_TEST_MAIN(ops_suite, TE_TEST_DEVICE)
