/* SPDX-License-Identifier: Apache-2.0 */
/* check_norm.c -- LayerNorm and RMSNorm (te/norm.h) against a float64
 * reference computed here: forward (y in f32/bf16/f16/e4m3/e5m2, mu,
 * rsigma, amax, scale_inv, zero-centered gamma), backward (dx, dgamma,
 * dbeta) and rmsnorm_bwd_add (also with extra_grad aliasing dx), over
 * shapes that take every kernel path: 1 row, hidden 1, 7, 33, 1000, 8191,
 * 65536 (rows reread from L2), warp-per-row and block-per-row layouts,
 * more row groups than workspace parts; fresh random inputs, poisoned
 * outputs and workspace; argument checks.
 *
 * Tolerances (t/lib/act_ref.h): outputs within their dtype's unit roundoff
 * plus c*m, c = 2^-17 = 128 float32 roundoffs, m the magnitude of the
 * terms.  Why 128: a row sum is added by each thread over at most 64
 * elements and then by a tree of at most 10 levels, so its float32 error
 * is at most about 80u times the sum of |terms| (forward and backward
 * row sums, and the dgamma/dbeta column sums over at most a few rows per
 * part plus 32 groups); mean and rsigma carry that error into every
 * element.  m is, for y: (|xhat| + mean|x|*rsigma)*|g| + |beta|; for dx:
 * rsigma*(|dy g| + mean|dy g| + |xhat|*mean|dy g xhat|) (+ |extra|); for
 * dgamma/dbeta: the column's sum of |dy xhat| / |dy|.  FP8 outputs must
 * equal the reference's FP8 byte except next to a tie (see act_ref.h). */
#include "tests.h"
#include "act_ref.h"
#include "common/norm.h"

#define C_NORM (1.0 / 131072.0) /* 2^-17 */

struct nshape {
  size_t rows, hidden;
};
static const struct nshape nshapes[] = {
    {1, 1},   {3, 7},    {5, 33},   {4, 1000}, {2, 8191}, {1, 65536}, {7, 4096},
    {9, 1024}, {5, 2048}, {3000, 16}, {300, 64}, {2, 24576}};
static const tecore_dtype_t hp[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
static const tecore_dtype_t outs[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16,
                                      TECORE_DTYPE_E4M3, TECORE_DTYPE_E5M2};

static int is_fp8(tecore_dtype_t d) { return d == TECORE_DTYPE_E4M3 || d == TECORE_DTYPE_E5M2; }

/* A host copy of a device tensor's data with its float64 values. */
struct hbuf {
  void *h;
  double *v;
  tecore_devptr_t d;
  size_t n;
  tecore_dtype_t dt;
};

static void hbuf_rand(struct hbuf *b, size_t n, tecore_dtype_t dt, float lo, float hi) {
  b->n = n;
  b->dt = dt;
  b->h = malloc(n * 4 + 4);
  b->v = malloc(n * sizeof(double) + 8);
  ck_assert(b->h && b->v);
  ref_fill(b->h, b->v, n, dt, lo, hi);
  b->d = te_dalloc(n * ref_esize(dt) + 16);
  te_h2d(b->d, b->h, n * ref_esize(dt));
}
static void hbuf_free(struct hbuf *b) {
  free(b->h);
  free(b->v);
  TE_OK(tecore_mem_free(b->d));
}

/* ---- forward ----------------------------------------------------------------------- */

/* current (FP8 outputs only): current scaling, the kernel's own amax and
 * scale; pow2 power-of-two scales. */
static void run_fwd_mode(int ln, size_t rows, size_t hidden, tecore_dtype_t dx, tecore_dtype_t dw,
                         tecore_dtype_t dy, unsigned flags, int current, int pow2) {
  size_t n = rows * hidden;
  struct hbuf x, g, b;
  /* an offset mean, so LayerNorm's centering matters */
  hbuf_rand(&x, n, dx, -2.0f, 3.0f);
  hbuf_rand(&g, hidden, dw, (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? -0.5f : 0.5f, 1.5f);
  hbuf_rand(&b, hidden, dw, -1.0f, 1.0f);
  const float eps = 1e-5f;
  double *ref = malloc(n * sizeof(double)), *mag = malloc(n * sizeof(double));
  double *rmu = malloc(rows * sizeof(double)), *rrs = malloc(rows * sizeof(double));
  double *mumag = malloc(rows * sizeof(double));
  ck_assert(ref && mag && rmu && rrs && mumag);
  double amax_ref = 0;
  for (size_t r = 0; r < rows; r++) {
    const double *xr = x.v + r * hidden;
    double s = 0, sa = 0, q = 0;
    for (size_t c = 0; c < hidden; c++) {
      s += xr[c];
      sa += fabs(xr[c]);
      q += xr[c] * xr[c];
    }
    double mean = ln ? s / hidden : 0.0, var = 0;
    if (ln)
      for (size_t c = 0; c < hidden; c++) var += (xr[c] - mean) * (xr[c] - mean);
    var = ln ? var / hidden : q / hidden;
    double rs = 1.0 / sqrt(var + (double)eps);
    rmu[r] = mean;
    rrs[r] = rs;
    mumag[r] = sa / hidden;
    for (size_t c = 0; c < hidden; c++) {
      double gg = (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? 1.0 + g.v[c] : g.v[c];
      double xh = (xr[c] - mean) * rs;
      double y = xh * gg + (ln ? b.v[c] : 0.0);
      ref[r * hidden + c] = y;
      mag[r * hidden + c] =
          (fabs(xh) + (ln ? sa / hidden * rs : 0.0)) * fabs(gg) + (ln ? fabs(b.v[c]) : 0.0);
      if (fabs(y) > amax_ref) amax_ref = fabs(y);
    }
  }
  /* outputs, poisoned */
  tecore_devptr_t ym = te_dalloc(n * ref_esize(dy) + 16), mu = te_dalloc(rows * 4 + 16),
                  rs = te_dalloc(rows * 4 + 16), amax = te_dalloc(16), scale = te_dalloc(16),
                  sinv = te_dalloc(16);
  te_poison_dev(ym, n * ref_esize(dy) + 16);
  te_poison_dev_nan(mu, rows);
  te_poison_dev_nan(rs, rows);
  te_poison_dev_nan(sinv, 1);
  /* delayed: accumulated into; current: overwritten */
  float amax0 = current ? 1e30f : (float)(amax_ref * 0.5), scale_h = 1.0f;
  te_h2d(amax, &amax0, 4);
  struct tecore_tensor tx = ref_tensor2(dx, rows, hidden, x.d);
  struct tecore_tensor tg = ref_tensor1(dw, hidden, g.d), tb = ref_tensor1(dw, hidden, b.d);
  struct tecore_tensor ty = ref_tensor2(dy, rows, hidden, ym);
  ty.amax = amax;
  if (is_fp8(dy)) {
    double fmax = dy == TECORE_DTYPE_E4M3 ? 448.0 : 57344.0;
    scale_h = (float)(fmax / amax_ref * te_rand_float(0.5f, 1.3f));
    te_h2d(scale, &scale_h, 4);
    ty.scaling = TECORE_SCALING_DELAYED;
    ty.scale = scale;
    ty.scale_inv = sinv;
    if (current) {
      ty.scaling = TECORE_SCALING_CURRENT;
      if (pow2) ty.flags |= TECORE_TENSOR_POW2_SCALES;
      te_poison_dev_nan(scale, 1);
    }
  }
  if (ln)
    TE_OK(tecore_layernorm_fwd(&tx, &tg, &tb, eps, flags, &ty, mu, rs, te_stream));
  else
    TE_OK(tecore_rmsnorm_fwd(&tx, &tg, eps, flags, &ty, rs, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));

  char what[160];
  snprintf(what, sizeof what, "%s fwd %zux%zu x %s gamma %s -> %s%s%s%s",
           ln ? "layernorm" : "rmsnorm", rows, hidden, tecore_dtype_name(dx),
           tecore_dtype_name(dw), tecore_dtype_name(dy),
           (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? " zero-centered" : "",
           current ? " current" : "", pow2 ? " pow2" : "");
  float gam;
  te_d2h(&gam, amax, 4);
  if (current) {
    /* the scale the kernels derived from their amax: fp8_max / amax,
     * rounded down to a power of two with pow2 */
    double fmax = dy == TECORE_DTYPE_E4M3 ? 448.0 : 57344.0;
    float want = gam > 0 ? (float)fmax / gam : 1.0f;
    if (pow2 && want > 0) want = (float)ldexp(1.0, ilogb(want));
    te_d2h(&scale_h, scale, 4);
    ck_assert_msg(te_f32_bits_of(scale_h) == te_f32_bits_of(want),
                  "%s: scale %.9g, want %.9g from amax %.9g", what, (double)scale_h,
                  (double)want, (double)gam);
  }
  void *got = malloc(n * 4 + 4);
  float *gmu = malloc(rows * 4), *grs = malloc(rows * 4);
  ck_assert(got && gmu && grs);
  te_d2h(got, ym, n * ref_esize(dy));
  if (is_fp8(dy))
    ref_check_fp8(got, dy, ref, mag, n, scale_h, C_NORM, what, NULL);
  else
    ref_check_hp(got, dy, ref, mag, n, C_NORM, what);
  te_d2h(grs, rs, rows * 4);
  for (size_t r = 0; r < rows; r++)
    ck_assert_msg(fabs(grs[r] - rrs[r]) <= C_NORM * rrs[r], "%s: rsigma[%zu] %.9g, want %.9g",
                  what, r, (double)grs[r], rrs[r]);
  if (ln) {
    te_d2h(gmu, mu, rows * 4);
    for (size_t r = 0; r < rows; r++)
      ck_assert_msg(fabs(gmu[r] - rmu[r]) <= C_NORM * mumag[r], "%s: mu[%zu] %.9g, want %.9g",
                    what, r, (double)gmu[r], rmu[r]);
  }
  ck_assert_msg(fabs(gam - amax_ref) <= C_NORM * amax_ref * 4, "%s: amax %.9g, want %.9g", what,
                (double)gam, amax_ref);
  if (is_fp8(dy)) {
    float si;
    te_d2h(&si, sinv, 4);
    ck_assert_msg(si == 1.0f / scale_h, "%s: scale_inv %.9g, want %.9g", what, (double)si,
                  (double)(1.0f / scale_h));
  }
  free(got);
  free(gmu);
  free(grs);
  free(ref);
  free(mag);
  free(rmu);
  free(rrs);
  free(mumag);
  hbuf_free(&x);
  hbuf_free(&g);
  hbuf_free(&b);
  TE_OK(tecore_mem_free(ym));
  TE_OK(tecore_mem_free(mu));
  TE_OK(tecore_mem_free(rs));
  TE_OK(tecore_mem_free(amax));
  TE_OK(tecore_mem_free(scale));
  TE_OK(tecore_mem_free(sinv));
}

static void run_fwd(int ln, size_t rows, size_t hidden, tecore_dtype_t dx, tecore_dtype_t dw,
                    tecore_dtype_t dy, unsigned flags) {
  run_fwd_mode(ln, rows, hidden, dx, dw, dy, flags, 0, 0);
}

/* _i: shape index.  Output dtypes rotate with the input dtypes; LN and RMS
 * each, plain and zero-centered gamma; FP8 outputs also with current
 * scaling. */
START_TEST(test_norm_fwd) {
  const struct nshape *s = &nshapes[_i];
  for (int k = 0; k < 5; k++) {
    tecore_dtype_t dx = hp[(size_t)(_i + k) % 3], dw = hp[(size_t)(_i + 2 * k) % 3];
    unsigned fl = (k & 1) ? TECORE_NORM_ZERO_CENTERED_GAMMA : 0;
    run_fwd(1, s->rows, s->hidden, dx, dw, outs[k], fl);
    run_fwd(0, s->rows, s->hidden, dx, dw, outs[(k + 2) % 5], fl ^ TECORE_NORM_ZERO_CENTERED_GAMMA);
    if (is_fp8(outs[k]))
      run_fwd_mode(k & 1, s->rows, s->hidden, dx, dw, outs[k], fl, 1, (int)((_i + k) & 1));
  }
}
END_TEST

/* BF16 rows that fill 4 vectors of every thread (hidden 4096: 128 threads a
 * row, 8192: 256) or 3 of a warp (768), gamma as stored: the kernels
 * without per-vector tests (te_norm_fwd_full16, te_norm_fwd_warp16 on a
 * GPU; 37 rows leave a block of four rows of 768 with three slots past the
 * end), LayerNorm and RMSNorm, BF16 and FP8
 * outputs, delayed and current scaling; and more rows than its grid of one
 * wave of resident blocks (132 SMs x 10 blocks of 128 threads, x 5 of
 * 256), so each block loops over rows.  Zero-centered gamma at the same
 * shape takes the other kernel (te_norm_fwd_fast16). */
START_TEST(test_norm_fwd_whole_rows) {
  static const size_t hid[3] = {4096, 8192, 768}, many[3] = {1400, 700, 6000};
  const tecore_dtype_t bf = TECORE_DTYPE_BF16;
  for (int i = 0; i < 3; i++) {
    run_fwd(1, 37, hid[i], bf, bf, TECORE_DTYPE_BF16, 0);
    run_fwd(0, 37, hid[i], bf, bf, TECORE_DTYPE_E5M2, 0);
    run_fwd_mode(1, 37, hid[i], bf, bf, TECORE_DTYPE_E4M3, 0, 1, i);
    run_fwd_mode(0, 37, hid[i], bf, bf, TECORE_DTYPE_E4M3, 0, 1, 1 - i);
    run_fwd(1, many[i], hid[i], bf, bf, TECORE_DTYPE_E4M3, 0);
    run_fwd(i, 37, hid[i], bf, bf, TECORE_DTYPE_E4M3, TECORE_NORM_ZERO_CENTERED_GAMMA);
  }
}
END_TEST

/* The forward grid capped at one wave (TECORE_NORM_FWD_WAVES=1; the
 * default gives each row group a block): on a GPU the resident blocks
 * then loop over more row groups than they are; the same reference holds.
 * Check forks a process per test, so the tunable is read afresh here. */
START_TEST(test_norm_fwd_one_wave_loops) {
  ck_assert_int_eq(setenv("TECORE_NORM_FWD_WAVES", "1", 1), 0);
  const tecore_dtype_t bf = TECORE_DTYPE_BF16;
  run_fwd(1, 1400, 4096, bf, bf, TECORE_DTYPE_E4M3, 0);
  run_fwd(0, 700, 8192, bf, bf, TECORE_DTYPE_E4M3, 0);
  run_fwd(0, 1500, 1024, bf, bf, TECORE_DTYPE_BF16, 0);
  run_fwd(1, 6001, 768, bf, bf, TECORE_DTYPE_BF16, 0);
  ck_assert_int_eq(unsetenv("TECORE_NORM_FWD_WAVES"), 0);
}
END_TEST

/* Which kernel the forward of 8 rows of `hidden` (x, gamma, beta and y
 * of dtype dt) launches, as the profile names it: the host's choice, the
 * same on vdev as on a GPU. */
static void fwd_kernel_is(int ln, size_t hidden, tecore_dtype_t dt, unsigned flags,
                          const char *want) {
  const size_t rows = 8, n = rows * hidden;
  struct hbuf x, g, b;
  hbuf_rand(&x, n, dt, -2.0f, 3.0f);
  hbuf_rand(&g, hidden, dt, 0.5f, 1.5f);
  hbuf_rand(&b, hidden, dt, -1.0f, 1.0f);
  tecore_devptr_t y = te_dalloc(n * ref_esize(dt) + 16), st = te_dalloc(8 * rows);
  struct tecore_tensor tx = ref_tensor2(dt, rows, hidden, x.d), ty = ref_tensor2(dt, rows, hidden, y);
  struct tecore_tensor tg = ref_tensor1(dt, hidden, g.d), tb = ref_tensor1(dt, hidden, b.d);
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_profile_start());
  if (ln)
    TE_OK(tecore_layernorm_fwd(&tx, &tg, &tb, 1e-5f, flags, &ty, st, st + 4 * rows, te_stream));
  else
    TE_OK(tecore_rmsnorm_fwd(&tx, &tg, 1e-5f, flags, &ty, st, te_stream));
  char *prof = te_profile_text();
  ck_assert_msg(strstr(prof, want), "%s [%zu] %s flags %u: want %s, the profile says:\n%s",
                ln ? "LayerNorm" : "RMSNorm", hidden, tecore_dtype_name(dt), flags, want, prof);
  free(prof);
  hbuf_free(&x);
  hbuf_free(&g);
  hbuf_free(&b);
  TE_OK(tecore_mem_free(y));
  TE_OK(tecore_mem_free(st));
}

/* The 16-bit forward's kernels: BF16 rows of 768 with gamma as stored
 * take te_norm_fwd_warp16; zero-centered gamma, F16 and 1024 the general
 * te_norm_fwd_fast16; 4096 te_norm_fwd_full16. */
START_TEST(test_norm_fwd_kernel_choice) {
  const tecore_dtype_t bf = TECORE_DTYPE_BF16;
  fwd_kernel_is(1, 768, bf, 0, "te_norm_fwd_warp16");
  fwd_kernel_is(0, 768, bf, 0, "te_norm_fwd_warp16");
  fwd_kernel_is(1, 768, bf, TECORE_NORM_ZERO_CENTERED_GAMMA, "te_norm_fwd_fast16");
  fwd_kernel_is(0, 768, TECORE_DTYPE_F16, 0, "te_norm_fwd_fast16");
  fwd_kernel_is(1, 1024, bf, 0, "te_norm_fwd_fast16");
  fwd_kernel_is(0, 4096, bf, 0, "te_norm_fwd_full16");
}
END_TEST

/* ---- backward ---------------------------------------------------------------------- */

/* mode: 0 LayerNorm, 1 RMSNorm, 2 rmsnorm_bwd_add, 3 rmsnorm_bwd_add with
 * extra_grad in dx's memory, 4 layernorm_bwd_add, 5 layernorm_bwd_add with
 * extra_grad in dx's memory.  all16: every tensor in dx_t (the one-dtype
 * kernel te_norm_bwd_fast when it is 16-bit and hidden % 8 == 0). */
#define NBWD_MODES 6
static void run_bwd_dt(int mode, size_t rows, size_t hidden, tecore_dtype_t dx_t,
                       tecore_dtype_t dw, tecore_dtype_t dgrad, unsigned flags, int all16) {
  int ln = mode == 0 || mode >= 4, add = mode >= 2, alias = mode == 3 || mode == 5;
  size_t n = rows * hidden;
  tecore_dtype_t ddy = dx_t == TECORE_DTYPE_F16 && !all16 ? TECORE_DTYPE_F32 : dx_t;
  tecore_dtype_t dext = alias || all16 ? dgrad : TECORE_DTYPE_BF16;
  struct hbuf x, dy, g, ex;
  hbuf_rand(&x, n, dx_t, -2.0f, 3.0f);
  hbuf_rand(&dy, n, ddy, -1.0f, 1.0f);
  hbuf_rand(&g, hidden, dw, (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? -0.5f : 0.5f, 1.5f);
  if (add) hbuf_rand(&ex, n, dext, -1.0f, 1.0f);
  /* the per-row statistics the forward would have saved (float) */
  float *hmu = malloc(rows * 4 + 4), *hrs = malloc(rows * 4 + 4);
  ck_assert(hmu && hrs);
  for (size_t r = 0; r < rows; r++) {
    double s = 0, q = 0;
    for (size_t c = 0; c < hidden; c++) s += x.v[r * hidden + c];
    double mean = ln ? s / hidden : 0.0;
    for (size_t c = 0; c < hidden; c++) q += (x.v[r * hidden + c] - mean) * (x.v[r * hidden + c] - mean);
    hmu[r] = (float)mean;
    hrs[r] = (float)(1.0 / sqrt(q / hidden + 1e-5));
  }
  double *rdx = malloc(n * sizeof(double)), *mdx = malloc(n * sizeof(double));
  double *rdg = calloc(hidden, sizeof(double)), *mdg = calloc(hidden, sizeof(double));
  double *rdb = calloc(hidden, sizeof(double)), *mdb = calloc(hidden, sizeof(double));
  ck_assert(rdx && mdx && rdg && mdg && rdb && mdb);
  for (size_t r = 0; r < rows; r++) {
    double m = ln ? hmu[r] : 0.0, rs = hrs[r], s1 = 0, s2 = 0, a1 = 0, a2 = 0;
    for (size_t c = 0; c < hidden; c++) {
      size_t i = r * hidden + c;
      double gg = (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? 1.0 + g.v[c] : g.v[c];
      double xh = (x.v[i] - m) * rs, dyg = dy.v[i] * gg;
      s1 += dyg;
      s2 += dyg * xh;
      a1 += fabs(dyg);
      a2 += fabs(dyg * xh);
      rdg[c] += dy.v[i] * xh;
      mdg[c] += fabs(dy.v[i] * xh);
      rdb[c] += dy.v[i];
      mdb[c] += fabs(dy.v[i]);
    }
    double m1 = ln ? s1 / hidden : 0.0, m2 = s2 / hidden;
    for (size_t c = 0; c < hidden; c++) {
      size_t i = r * hidden + c;
      double gg = (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? 1.0 + g.v[c] : g.v[c];
      double xh = (x.v[i] - m) * rs, dyg = dy.v[i] * gg;
      rdx[i] = rs * (dyg - m1 - xh * m2);
      mdx[i] = rs * (fabs(dyg) + (ln ? a1 / hidden : 0.0) + fabs(xh) * a2 / hidden);
      if (add) {
        rdx[i] += ex.v[i];
        mdx[i] += fabs(ex.v[i]);
      }
    }
  }
  tecore_devptr_t mu = te_dalloc(rows * 4 + 16), rs = te_dalloc(rows * 4 + 16);
  te_h2d(mu, hmu, rows * 4);
  te_h2d(rs, hrs, rows * 4);
  tecore_devptr_t dxm = alias ? ex.d : te_dalloc(n * ref_esize(dgrad) + 16);
  tecore_devptr_t dgm = te_dalloc(hidden * 4 + 16), dbm = te_dalloc(hidden * 4 + 16);
  if (!alias) te_poison_dev(dxm, n * ref_esize(dgrad) + 16);
  te_poison_dev(dgm, hidden * 4 + 16);
  te_poison_dev(dbm, hidden * 4 + 16);
  size_t wsb = 0;
  TE_OK(tecore_norm_bwd_workspace_size(ln ? TECORE_NORM_LAYERNORM : TECORE_NORM_RMSNORM, rows,
                                       hidden, &wsb));
  ck_assert_msg(wsb >= hidden * 4, "workspace size %zu for %zu x %zu", wsb, rows, hidden);
  tecore_devptr_t ws = te_dalloc(wsb);
  te_poison_dev(ws, wsb);
  struct tecore_tensor tdy = ref_tensor2(ddy, rows, hidden, dy.d);
  struct tecore_tensor tx = ref_tensor2(dx_t, rows, hidden, x.d);
  struct tecore_tensor tg = ref_tensor1(dw, hidden, g.d);
  struct tecore_tensor tdx = ref_tensor2(dgrad, rows, hidden, dxm);
  struct tecore_tensor tdg = ref_tensor1(dw, hidden, dgm), tdb = ref_tensor1(dw, hidden, dbm);
  struct tecore_tensor tex;
  if (add) tex = ref_tensor2(dext, rows, hidden, ex.d);
  if (mode == 0)
    TE_OK(tecore_layernorm_bwd(&tdy, &tx, mu, rs, &tg, flags, &tdx, &tdg, &tdb, ws, wsb, te_stream));
  else if (mode == 1)
    TE_OK(tecore_rmsnorm_bwd(&tdy, &tx, rs, &tg, flags, &tdx, &tdg, ws, wsb, te_stream));
  else if (mode <= 3)
    TE_OK(tecore_rmsnorm_bwd_add(&tdy, &tx, rs, &tg, &tex, flags, &tdx, &tdg, ws, wsb, te_stream));
  else
    TE_OK(tecore_layernorm_bwd_add(&tdy, &tx, mu, rs, &tg, &tex, flags, &tdx, &tdg, &tdb, ws, wsb,
                                   te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));

  static const char *const names[NBWD_MODES] = {
      "layernorm_bwd", "rmsnorm_bwd", "rmsnorm_bwd_add", "rmsnorm_bwd_add (extra_grad = dx)",
      "layernorm_bwd_add", "layernorm_bwd_add (extra_grad = dx)"};
  char what[200];
  snprintf(what, sizeof what, "%s %zux%zu x %s dy %s gamma %s -> %s%s", names[mode], rows, hidden,
           tecore_dtype_name(dx_t), tecore_dtype_name(ddy), tecore_dtype_name(dw),
           tecore_dtype_name(dgrad), (flags & TECORE_NORM_ZERO_CENTERED_GAMMA) ? " zero-centered" : "");
  void *got = malloc(n * 4 + 4), *gg = malloc(hidden * 4 + 4);
  ck_assert(got && gg);
  te_d2h(got, dxm, n * ref_esize(dgrad));
  char w2[240];
  snprintf(w2, sizeof w2, "%s: dx", what);
  ref_check_hp(got, dgrad, rdx, mdx, n, C_NORM, w2);
  te_d2h(gg, dgm, hidden * ref_esize(dw));
  snprintf(w2, sizeof w2, "%s: dgamma", what);
  ref_check_hp(gg, dw, rdg, mdg, hidden, C_NORM, w2);
  if (ln) {
    te_d2h(gg, dbm, hidden * ref_esize(dw));
    snprintf(w2, sizeof w2, "%s: dbeta", what);
    ref_check_hp(gg, dw, rdb, mdb, hidden, C_NORM, w2);
  } else {
    te_d2h(gg, dbm, 4);
    te_expect_bytes_eq(gg, TE_POISON_BYTE, 4, "dbeta memory (RMSNorm writes none)");
  }
  free(got);
  free(gg);
  free(hmu);
  free(hrs);
  free(rdx);
  free(mdx);
  free(rdg);
  free(mdg);
  free(rdb);
  free(mdb);
  hbuf_free(&x);
  hbuf_free(&dy);
  hbuf_free(&g);
  if (add) hbuf_free(&ex);
  if (!alias) TE_OK(tecore_mem_free(dxm));
  TE_OK(tecore_mem_free(mu));
  TE_OK(tecore_mem_free(rs));
  TE_OK(tecore_mem_free(dgm));
  TE_OK(tecore_mem_free(dbm));
  TE_OK(tecore_mem_free(ws));
}

static void run_bwd(int mode, size_t rows, size_t hidden, tecore_dtype_t dx_t, tecore_dtype_t dw,
                    tecore_dtype_t dgrad, unsigned flags) {
  run_bwd_dt(mode, rows, hidden, dx_t, dw, dgrad, flags, 0);
}

START_TEST(test_norm_bwd) {
  const struct nshape *s = &nshapes[_i];
  for (int mode = 0; mode < NBWD_MODES; mode++) {
    tecore_dtype_t dx = hp[(size_t)(_i + mode) % 3], dw = hp[(size_t)(_i + 2 * mode + 1) % 3];
    tecore_dtype_t dg = hp[(size_t)(_i + mode + 2) % 3];
    unsigned fl = (mode + _i) & 1 ? TECORE_NORM_ZERO_CENTERED_GAMMA : 0;
    run_bwd(mode, s->rows, s->hidden, dx, dw, dg, fl);
  }
}
END_TEST

/* Every mode with one 16-bit dtype for all tensors and hidden % 8 == 0:
 * the cuda backend's te_norm_bwd_fast, which has a case per (dtype,
 * LayerNorm or not, extra gradient or not); a case it lacked would leave
 * the poisoned dx. */
START_TEST(test_norm_bwd_one_dtype) {
  static const size_t shp[][2] = {{3, 64}, {37, 1024}, {5, 2048}};
  const tecore_dtype_t dt = _i & 1 ? TECORE_DTYPE_F16 : TECORE_DTYPE_BF16;
  for (int mode = 0; mode < NBWD_MODES; mode++) {
    const size_t *sh = shp[(size_t)(mode + _i) % 3];
    run_bwd_dt(mode, sh[0], sh[1], dt, dt, dt, (mode + _i) & 2 ? TECORE_NORM_ZERO_CENTERED_GAMMA : 0,
               1);
  }
}
END_TEST

/* ---- arguments ----------------------------------------------------------------------- */

START_TEST(test_norm_args) {
  tecore_devptr_t a = te_dalloc(1 << 16), b = te_dalloc(1 << 16), w = te_dalloc(4096);
  /* defined contents: the calls below that pass their checks do run */
  te_poison_dev(a, 1 << 16);
  te_poison_dev(b, 1 << 16);
  te_poison_dev(w, 4096);
  struct tecore_tensor x = ref_tensor2(TECORE_DTYPE_BF16, 8, 64, a);
  struct tecore_tensor y = ref_tensor2(TECORE_DTYPE_BF16, 8, 64, b);
  struct tecore_tensor g = ref_tensor1(TECORE_DTYPE_F32, 64, w);
  struct tecore_tensor g32 = ref_tensor1(TECORE_DTYPE_F32, 32, w);
  struct tecore_tensor gbf = ref_tensor1(TECORE_DTYPE_BF16, 64, w);
  struct tecore_tensor y2 = ref_tensor2(TECORE_DTYPE_BF16, 4, 128, b);
  tecore_devptr_t st = w + 1024;
  const char *fwd = "tecore_layernorm_fwd";
  TE_EXPECT_INVALID("x", tecore_layernorm_fwd(NULL, &g, &g, 1e-5f, 0, &y, st, st, te_stream));
  TE_EXPECT_INVALID("gamma", tecore_layernorm_fwd(&x, NULL, &g, 1e-5f, 0, &y, st, st, te_stream));
  TE_EXPECT_INVALID("beta", tecore_layernorm_fwd(&x, &g, NULL, 1e-5f, 0, &y, st, st, te_stream));
  TE_EXPECT_INVALID("y", tecore_layernorm_fwd(&x, &g, &g, 1e-5f, 0, NULL, st, st, te_stream));
  TE_EXPECT_INVALID("gamma", tecore_layernorm_fwd(&x, &g32, &g, 1e-5f, 0, &y, st, st, te_stream));
  TE_EXPECT_INVALID("beta", tecore_layernorm_fwd(&x, &g, &gbf, 1e-5f, 0, &y, st, st, te_stream));
  TE_EXPECT_INVALID("y", tecore_layernorm_fwd(&x, &g, &g, 1e-5f, 0, &y2, st, st, te_stream));
  TE_EXPECT_INVALID("epsilon", tecore_layernorm_fwd(&x, &g, &g, -1.0f, 0, &y, st, st, te_stream));
  TE_EXPECT_INVALID("epsilon", tecore_rmsnorm_fwd(&x, &g, NAN, 0, &y, st, te_stream));
  TE_EXPECT_INVALID("flags", tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0x10, &y, st, te_stream));
  TE_EXPECT_INVALID("mu", tecore_layernorm_fwd(&x, &g, &g, 1e-5f, 0, &y, st + 2, st, te_stream));
  TE_EXPECT_INVALID("rsigma", tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0, &y, st + 1, te_stream));
  TE_EXPECT_INVALID(fwd, tecore_layernorm_fwd(&x, &g, &g, 1e-5f, 0, &y, st + 2, st, te_stream));
  struct tecore_tensor bad = y;
  bad.scaling = TECORE_SCALING_CURRENT;
  bad.dtype = TECORE_DTYPE_E4M3;
  bad.scale = st;
  bad.scale_inv = st + 4;
  bad.amax = 0;   /* current scaling writes the amax: needed */
  TE_EXPECT_INVALID("amax", tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0, &bad, 0, te_stream));
  bad.scaling = TECORE_SCALING_MXFP8;
  bad.scale = 0;
  bad.scale_inv = st;
  TE_EXPECT_INVALID("mxfp8", tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0, &bad, 0, te_stream));
  bad = x;
  bad.dtype = TECORE_DTYPE_I32;
  TE_EXPECT_INVALID("x", tecore_rmsnorm_fwd(&bad, &g, 1e-5f, 0, &y, 0, te_stream));
  /* forward with no row statistics is allowed (inference) */
  TE_OK(tecore_layernorm_fwd(&x, &g, &g, 1e-5f, 0, &y, 0, 0, te_stream));
  TE_OK(tecore_rmsnorm_fwd(&x, &g, 1e-5f, 0, &y, 0, te_stream));

  size_t need;
  TE_EXPECT_INVALID("kind", tecore_norm_bwd_workspace_size((tecore_norm_t)5, 8, 64, &need));
  TE_EXPECT_INVALID("bytes", tecore_norm_bwd_workspace_size(TECORE_NORM_RMSNORM, 8, 64, NULL));
  TE_OK(tecore_norm_bwd_workspace_size(TECORE_NORM_LAYERNORM, 8, 64, &need));
  ck_assert_uint_eq(need, 2 * 8 * 64 * 4);
  TE_OK(tecore_norm_bwd_workspace_size(TECORE_NORM_RMSNORM, 100000, 64, &need));
  ck_assert_uint_le(need, 396 * 64 * 4);
  TE_OK(tecore_norm_bwd_workspace_size(TECORE_NORM_RMSNORM, 8, 64, &need));
  tecore_devptr_t ws = te_dalloc(need);
  struct tecore_tensor dg = ref_tensor1(TECORE_DTYPE_F32, 64, w + 2048);
  TE_EXPECT_INVALID("workspace_bytes",
                    tecore_rmsnorm_bwd(&y, &x, st, &g, 0, &y, &dg, ws, need - 1, te_stream));
  TE_EXPECT_INVALID("workspace", tecore_rmsnorm_bwd(&y, &x, st, &g, 0, &y, &dg, 0, need, te_stream));
  TE_EXPECT_INVALID("workspace",
                    tecore_rmsnorm_bwd(&y, &x, st, &g, 0, &y, &dg, ws + 4, need, te_stream));
  TE_EXPECT_INVALID("rsigma", tecore_rmsnorm_bwd(&y, &x, 0, &g, 0, &y, &dg, ws, need, te_stream));
  TE_EXPECT_INVALID("mu", tecore_layernorm_bwd(&y, &x, 0, st, &g, 0, &y, &dg, &dg, ws, need, te_stream));
  TE_EXPECT_INVALID("dy", tecore_rmsnorm_bwd(&y2, &x, st, &g, 0, &y, &dg, ws, need, te_stream));
  TE_EXPECT_INVALID("dgamma", tecore_rmsnorm_bwd(&y, &x, st, &g, 0, &y, &g32, ws, need, te_stream));
  TE_EXPECT_INVALID("dbeta",
                    tecore_layernorm_bwd(&y, &x, st, st, &g, 0, &y, &dg, NULL, ws, 2 * need, te_stream));
  TE_EXPECT_INVALID("extra_grad",
                    tecore_rmsnorm_bwd_add(&y, &x, st, &g, NULL, 0, &y, &dg, ws, need, te_stream));
  TE_EXPECT_INVALID("extra_grad",
                    tecore_rmsnorm_bwd_add(&y, &x, st, &g, &y2, 0, &y, &dg, ws, need, te_stream));
  size_t need_ln = 0;
  TE_OK(tecore_norm_bwd_workspace_size(TECORE_NORM_LAYERNORM, 8, 64, &need_ln));
  tecore_devptr_t ws_ln = te_dalloc(need_ln);
  struct tecore_tensor db = ref_tensor1(TECORE_DTYPE_F32, 64, w + 3072);
  TE_EXPECT_INVALID("extra_grad", tecore_layernorm_bwd_add(&y, &x, st + 512, st, &g, NULL, 0, &y,
                                                           &dg, &db, ws_ln, need_ln, te_stream));
  TE_EXPECT_INVALID("extra_grad", tecore_layernorm_bwd_add(&y, &x, st + 512, st, &g, &y2, 0, &y,
                                                           &dg, &db, ws_ln, need_ln, te_stream));
  TE_EXPECT_INVALID("mu", tecore_layernorm_bwd_add(&y, &x, 0, st, &g, &x, 0, &y, &dg, &db, ws_ln,
                                                   need_ln, te_stream));
  TE_EXPECT_INVALID("workspace_bytes",
                    tecore_layernorm_bwd_add(&y, &x, st + 512, st, &g, &x, 0, &y, &dg, &db, ws_ln,
                                             need_ln - 1, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(ws_ln));
  bad = y;
  bad.dtype = TECORE_DTYPE_E4M3;
  bad.scaling = TECORE_SCALING_DELAYED;
  bad.scale = st;
  bad.scale_inv = st + 4;
  TE_EXPECT_INVALID("dx", tecore_rmsnorm_bwd(&y, &x, st, &g, 0, &bad, &dg, ws, need, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(ws));
  TE_OK(tecore_mem_free(a));
  TE_OK(tecore_mem_free(b));
  TE_OK(tecore_mem_free(w));
}
END_TEST

/* Forward and backward of a graph-captured pair replayed: the same bits
 * as the direct launches (the kernels are pure functions of their inputs). */
START_TEST(test_norm_deterministic) {
  size_t rows = 37, hidden = 4096, n = rows * hidden;
  struct hbuf x, g;
  hbuf_rand(&x, n, TECORE_DTYPE_BF16, -2.0f, 3.0f);
  hbuf_rand(&g, hidden, TECORE_DTYPE_BF16, 0.5f, 1.5f);
  tecore_devptr_t y1 = te_dalloc(n * 2), y2 = te_dalloc(n * 2), rs = te_dalloc(rows * 4);
  struct tecore_tensor tx = ref_tensor2(TECORE_DTYPE_BF16, rows, hidden, x.d);
  struct tecore_tensor tg = ref_tensor1(TECORE_DTYPE_BF16, hidden, g.d);
  struct tecore_tensor t1 = ref_tensor2(TECORE_DTYPE_BF16, rows, hidden, y1);
  struct tecore_tensor t2 = ref_tensor2(TECORE_DTYPE_BF16, rows, hidden, y2);
  te_poison_dev(y1, n * 2);
  te_poison_dev(y2, n * 2);
  TE_OK(tecore_rmsnorm_fwd(&tx, &tg, 1e-6f, 0, &t1, rs, te_stream));
  tecore_graph_t graph;
  tecore_graph_exec_t exec;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_rmsnorm_fwd(&tx, &tg, 1e-6f, 0, &t2, rs, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &graph));
  TE_OK(tecore_graph_instantiate(&exec, graph));
  TE_OK(tecore_graph_launch(exec, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  uint16_t *h1 = malloc(n * 2), *h2 = malloc(n * 2);
  ck_assert(h1 && h2);
  te_d2h(h1, y1, n * 2);
  te_d2h(h2, y2, n * 2);
  te_expect_mem_eq(h2, h1, n * 2, "rmsnorm output replayed from a graph");
  TE_OK(tecore_graph_exec_destroy(exec));
  TE_OK(tecore_graph_destroy(graph));
  free(h1);
  free(h2);
  hbuf_free(&x);
  hbuf_free(&g);
  TE_OK(tecore_mem_free(y1));
  TE_OK(tecore_mem_free(y2));
  TE_OK(tecore_mem_free(rs));
}
END_TEST

/* te_norm_inv_pow2 builds 1/h from h's exponent bits (no division): for
 * every power of two a row length can be it must equal the correctly
 * rounded 1.0f / h, and every other length must give 0 (the kernels then
 * divide).  Lengths: all powers 2^0 .. 2^32 and 10^5 random others. */
START_TEST(test_norm_inv_pow2_bits) {
  for (int k = 0; k <= 32; k++) {
    float h = ldexpf(1.0f, k);
    float want = 1.0f / h, got = te_norm_inv_pow2(h);
    ck_assert_msg(te_f32_bits_of(got) == te_f32_bits_of(want), "1/2^%d: %a, want %a", k,
                  (double)got, (double)want);
  }
  for (int i = 0; i < 100000; i++) {
    uint32_t n = te_rand_u32() >> (te_rand_u32() & 31); /* lengths of every magnitude */
    if (n == 0 || (n & (n - 1)) == 0) continue;
    float h = (float)n;
    int pow2 = (te_f32_bits_of(h) & 0x7fffffu) == 0;
    float got = te_norm_inv_pow2(h);
    if (pow2) /* n rounded up to a power of two as a float */
      ck_assert_msg(got == 1.0f / h, "n %u: %a", n, (double)got);
    else
      ck_assert_msg(got == 0.0f, "n %u (not a power of two): %a, want 0", n, (double)got);
  }
}
END_TEST

static Suite *norm_suite(void) {
  Suite *s = suite_create("norm");
  TCase *tc = te_tcase(s, "fwd", 1);
  tcase_add_loop_test(tc, test_norm_fwd, 0, (int)TE_ARRAY_N(nshapes));
  tcase_add_test(tc, test_norm_fwd_whole_rows);
  tcase_add_test(tc, test_norm_fwd_one_wave_loops);
  tcase_add_test(tc, test_norm_fwd_kernel_choice);
  tc = te_tcase(s, "bwd", 1);
  tcase_add_loop_test(tc, test_norm_bwd, 0, (int)TE_ARRAY_N(nshapes));
  tcase_add_loop_test(tc, test_norm_bwd_one_dtype, 0, 2);
  tc = te_tcase(s, "misc", 1);
  tcase_add_test(tc, test_norm_args);
  tcase_add_test(tc, test_norm_deterministic);
  tcase_add_test(tc, test_norm_inv_pow2_bits);
  return s;
}

TE_TEST_MAIN(norm_suite, TE_TEST_DEVICE)
