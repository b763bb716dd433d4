/* SPDX-License-Identifier: Apache-2.0 */
/* check_act.c -- tecore_act_fwd / tecore_act_bwd (te/activation.h) against
 * a float64 reference computed here: every kind, input dtypes f32/bf16/f16,
 * outputs f32/bf16/f16/e4m3/e5m2, odd shapes (1 element, 7, 33, 1000, 8191,
 * 65536 per row, misaligned pointers), fresh random inputs, poisoned
 * outputs; amax, scale_inv and the no-op flag; argument checks.
 *
 * Tolerances (see t/lib/act_ref.h): high-precision outputs within the output's
 * unit roundoff plus the float32 error bound c*m; FP8 outputs equal to the
 * float64 reference's FP8 byte, with a 1-ulp difference allowed only where
 * the pre-rounding value lies within float32 error of a tie.  The float32
 * error of an activation grows with its sigmoid argument z (exp's
 * condition number): |dy|/|y| <= (4 + 3|z|)u for y, about twice that for
 * act', u = 2^-24.  So m = |y|(1 + |z|) with c = 2^-22 for outputs, and
 * m = (|s| + |x s (1-s) z'|)(1 + |z|) with c = 2^-21 for derivatives. */
#include "tests.h"
#include "act_ref.h"

#define C_FWD (1.0 / 4194304.0)  /* 2^-22 */
#define C_BWD (1.0 / 2097152.0)  /* 2^-21 */

/* act(x), act'(x) and their magnitudes, in float64; sigmoids in the
 * stable forms so the reference itself does not cancel. */
static void ref_act(int base, double x, double *y, double *d, double *ym, double *dm) {
  if (base == TECORE_ACT_RELU) {
    *y = x > 0 ? x : 0.0;
    *d = x > 0 ? 1.0 : 0.0;
    *ym = fabs(*y);
    *dm = fabs(*d);
    return;
  }
  double az, dsum;
  ref_act_sig(base, x, y, d, &az, &dsum);
  *ym = fabs(*y) * (1.0 + az);
  *dm = dsum * (1.0 + az);
}

static int act_base(int kind) {
  return kind == TECORE_ACT_SWIGLU ? TECORE_ACT_SILU
         : kind == TECORE_ACT_GEGLU ? TECORE_ACT_GELU
         : kind == TECORE_ACT_REGLU ? TECORE_ACT_RELU
                                    : kind;
}

struct shape {
  size_t rows, cols;
};
static const struct shape shapes[] = {{1, 1},  {1, 7},  {3, 33},   {4, 1000},
                                      {2, 8191}, {1, 65536}, {16, 256}};
static const tecore_dtype_t in_types[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};
static const tecore_dtype_t out_types[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16,
                                           TECORE_DTYPE_E4M3, TECORE_DTYPE_E5M2};

static int is_fp8(tecore_dtype_t d) { return d == TECORE_DTYPE_E4M3 || d == TECORE_DTYPE_E5M2; }

/* An output tensor with its scale buffers; scale is chosen so the largest
 * value maps to about fmax * spread (spread > 1 exercises saturation). */
struct outbuf {
  struct tecore_tensor t;
  tecore_devptr_t mem, amax, scale, scale_inv;
  float scale_h, amax0;
  int current;   /* FP8 with current scaling: amax and scale are the kernels' */
};

/* current: an FP8 output takes current scaling (amax poisoned with a huge
 * value that must be overwritten, scale poisoned). */
static void out_setup(struct outbuf *o, tecore_dtype_t dt, size_t rows, size_t cols,
                      size_t offset, double amax_ref, int current) {
  memset(o, 0, sizeof *o);
  size_t bytes = rows * cols * ref_esize(dt) + offset;
  o->mem = te_dalloc(bytes + 16);
  o->amax = te_dalloc(16);
  o->scale = te_dalloc(16);
  o->scale_inv = te_dalloc(16);
  o->t = ref_tensor2(dt, rows, cols, o->mem + offset);
  te_poison_dev(o->mem, bytes + 16);
  te_poison_dev_nan(o->scale_inv, 1);
  /* amax is max-accumulated: start below the result */
  o->amax0 = (float)(amax_ref * 0.25);
  te_h2d(o->amax, &o->amax0, 4);
  o->t.amax = o->amax;
  o->scale_h = 1.0f;
  if (is_fp8(dt)) {
    double fmax = dt == TECORE_DTYPE_E4M3 ? 448.0 : 57344.0;
    o->scale_h = (float)(fmax / (amax_ref > 0 ? amax_ref : 1.0) * te_rand_float(0.5f, 1.3f));
    te_h2d(o->scale, &o->scale_h, 4);
    o->t.scaling = TECORE_SCALING_DELAYED;
    o->t.scale = o->scale;
    o->t.scale_inv = o->scale_inv;
    if (current) {
      o->current = 1;
      o->t.scaling = TECORE_SCALING_CURRENT;
      o->amax0 = 1e30f;
      te_h2d(o->amax, &o->amax0, 4);
      te_poison_dev_nan(o->scale, 1);
    }
  }
}

static void out_free(struct outbuf *o) {
  TE_OK(tecore_mem_free(o->mem));
  TE_OK(tecore_mem_free(o->amax));
  TE_OK(tecore_mem_free(o->scale));
  TE_OK(tecore_mem_free(o->scale_inv));
}

/* Checks data, amax and scale_inv of an output. */
static void out_check(struct outbuf *o, const double *ref, const double *mag, size_t n, double c,
                      const char *what) {
  tecore_dtype_t dt = o->t.dtype;
  void *got = malloc(n * ref_esize(dt) + 1);
  ck_assert_ptr_nonnull(got);
  te_d2h(got, o->t.data, n * ref_esize(dt));
  if (o->current) {
    /* the scale the kernels derived from their amax (checked below) */
    float am;
    te_d2h(&am, o->amax, 4);
    float want = am > 0 ? (float)(dt == TECORE_DTYPE_E4M3 ? 448.0 : 57344.0) / am : 1.0f;
    te_d2h(&o->scale_h, o->scale, 4);
    ck_assert_msg(te_f32_bits_of(o->scale_h) == te_f32_bits_of(want),
                  "%s: current scale %.9g, want fp8_max/amax = %.9g (amax %.9g)", what,
                  (double)o->scale_h, (double)want, (double)am);
  }
  if (is_fp8(dt))
    ref_check_fp8(got, dt, ref, mag, n, o->scale_h, c, what, NULL);
  else
    ref_check_hp(got, dt, ref, mag, n, c, what);
  free(got);
  double amax_ref = 0, amax_tol = 0;
  for (size_t i = 0; i < n; i++) {
    if (fabs(ref[i]) > amax_ref) amax_ref = fabs(ref[i]);
    if (c * mag[i] > amax_tol) amax_tol = c * mag[i];
  }
  if (!o->current && amax_ref < o->amax0) amax_ref = o->amax0;
  float amax;
  te_d2h(&amax, o->amax, 4);
  ck_assert_msg(fabs(amax - amax_ref) <= amax_tol + ldexp(1.0, -140),
                "%s: amax %.9g, want %.9g (tolerance %.3g)", what, (double)amax, amax_ref,
                amax_tol);
  if (is_fp8(dt)) {
    float si;
    te_d2h(&si, o->scale_inv, 4);
    ck_assert_msg(si == 1.0f / o->scale_h, "%s: scale_inv %.9g, want 1/%.9g = %.9g", what,
                  (double)si, (double)o->scale_h, (double)(1.0f / o->scale_h));
  }
}

/* One forward case; offset shifts every pointer by one element so the
 * kernels take their element path. */
static void run_fwd(int kind, size_t rows, size_t cols, tecore_dtype_t din, tecore_dtype_t dout,
                    int misalign, int current) {
  int gated = tecore_activation_is_gated(kind);
  size_t icols = gated ? 2 * cols : cols, nin = rows * icols, n = rows * cols;
  size_t ioff = misalign ? ref_esize(din) : 0, ooff = misalign ? ref_esize(dout) : 0;
  void *hin = malloc(nin * 4);
  double *xin = malloc(nin * sizeof(double)), *ref = malloc(n * sizeof(double)),
         *mag = malloc(n * sizeof(double));
  ck_assert(hin && xin && ref && mag);
  ref_fill(hin, xin, nin, din, -6.0f, 6.0f);
  double amax_ref = 0;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      double a = xin[r * icols + c], y, d, ym, dm;
      ref_act(act_base(kind), a, &y, &d, &ym, &dm);
      if (gated) {
        double b = xin[r * icols + cols + c];
        y *= b;
        ym *= fabs(b);
      }
      ref[r * cols + c] = y;
      mag[r * cols + c] = ym;
      if (fabs(y) > amax_ref) amax_ref = fabs(y);
    }
  tecore_devptr_t dmem = te_dalloc(nin * ref_esize(din) + ioff + 16);
  te_h2d(dmem + ioff, hin, nin * ref_esize(din));
  struct tecore_tensor in = ref_tensor2(din, rows, icols, dmem + ioff);
  struct outbuf o;
  out_setup(&o, dout, rows, cols, ooff, amax_ref, current);
  TE_OK(tecore_act_fwd(kind, &in, &o.t, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  char what[160];
  snprintf(what, sizeof what, "%s fwd %zux%zu %s->%s%s%s", tecore_activation_name(kind), rows,
           cols, tecore_dtype_name(din), tecore_dtype_name(dout), misalign ? " misaligned" : "",
           current ? " current" : "");
  out_check(&o, ref, mag, n, C_FWD, what);
  out_free(&o);
  TE_OK(tecore_mem_free(dmem));
  free(hin);
  free(xin);
  free(ref);
  free(mag);
}

static void run_bwd(int kind, size_t rows, size_t cols, tecore_dtype_t din, tecore_dtype_t dout,
                    int misalign, int current) {
  int gated = tecore_activation_is_gated(kind);
  size_t xcols = gated ? 2 * cols : cols, nx = rows * xcols, ny = rows * cols;
  size_t ioff = misalign ? ref_esize(din) : 0, ooff = misalign ? ref_esize(dout) : 0;
  /* dy's dtype differs from x's where it can, to cover mixed inputs */
  tecore_dtype_t ddy = din == TECORE_DTYPE_F32 ? TECORE_DTYPE_BF16 : din;
  void *hx = malloc(nx * 4), *hdy = malloc(ny * 4);
  double *x = malloc(nx * sizeof(double)), *g = malloc(ny * sizeof(double)),
         *ref = malloc(nx * sizeof(double)), *mag = malloc(nx * sizeof(double));
  ck_assert(hx && hdy && x && g && ref && mag);
  ref_fill(hx, x, nx, din, -6.0f, 6.0f);
  ref_fill(hdy, g, ny, ddy, -1.0f, 1.0f);
  double amax_ref = 0;
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      double a = x[r * xcols + c], dy = g[r * cols + c], y, d, ym, dm;
      ref_act(act_base(kind), a, &y, &d, &ym, &dm);
      if (!gated) {
        ref[r * cols + c] = dy * d;
        mag[r * cols + c] = fabs(dy) * dm;
      } else {
        double b = x[r * xcols + cols + c];
        ref[r * xcols + c] = dy * b * d;
        mag[r * xcols + c] = fabs(dy * b) * dm;
        ref[r * xcols + cols + c] = dy * y;
        mag[r * xcols + cols + c] = fabs(dy) * ym;
      }
    }
  for (size_t i = 0; i < nx; i++)
    if (fabs(ref[i]) > amax_ref) amax_ref = fabs(ref[i]);
  tecore_devptr_t dxm = te_dalloc(nx * ref_esize(din) + ioff + 16);
  tecore_devptr_t dym = te_dalloc(ny * ref_esize(ddy) + 32);
  size_t yoff = misalign ? ref_esize(ddy) : 0;
  te_h2d(dxm + ioff, hx, nx * ref_esize(din));
  te_h2d(dym + yoff, hdy, ny * ref_esize(ddy));
  struct tecore_tensor tx = ref_tensor2(din, rows, xcols, dxm + ioff);
  struct tecore_tensor tdy = ref_tensor2(ddy, rows, cols, dym + yoff);
  struct outbuf o;
  out_setup(&o, dout, rows, xcols, ooff, amax_ref, current);
  TE_OK(tecore_act_bwd(kind, &tdy, &tx, &o.t, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  char what[160];
  snprintf(what, sizeof what, "%s bwd %zux%zu x %s dy %s -> %s%s%s", tecore_activation_name(kind),
           rows, cols, tecore_dtype_name(din), tecore_dtype_name(ddy), tecore_dtype_name(dout),
           misalign ? " misaligned" : "", current ? " current" : "");
  out_check(&o, ref, mag, nx, C_BWD, what);
  out_free(&o);
  TE_OK(tecore_mem_free(dxm));
  TE_OK(tecore_mem_free(dym));
  free(hx);
  free(hdy);
  free(x);
  free(g);
  free(ref);
  free(mag);
}

/* _i: the activation kind.  Every shape x every output dtype, input dtypes
 * rotating; the last shape once more with misaligned pointers. */
START_TEST(test_act_fwd) {
  size_t ns = TE_ARRAY_N(shapes), no = TE_ARRAY_N(out_types);
  for (size_t s = 0; s < ns; s++)
    for (size_t o = 0; o < no; o++)
      run_fwd(_i, shapes[s].rows, shapes[s].cols, in_types[(s + o) % 3], out_types[o], 0, 0);
  for (size_t o = 0; o < no; o++) {
    run_fwd(_i, 16, 256, in_types[o % 3], out_types[o], 1, 0);
    /* FP8 with current scaling: two passes, the kernels' own scale */
    if (is_fp8(out_types[o])) {
      run_fwd(_i, 3, 33, in_types[(o + 1) % 3], out_types[o], 0, 1);
      run_fwd(_i, 16, 256, in_types[o % 3], out_types[o], 1, 1);
    }
  }
}
END_TEST

START_TEST(test_act_bwd) {
  size_t ns = TE_ARRAY_N(shapes), no = TE_ARRAY_N(out_types);
  for (size_t s = 0; s < ns; s++)
    for (size_t o = 0; o < no; o++)
      run_bwd(_i, shapes[s].rows, shapes[s].cols, in_types[(s + o) % 3], out_types[o], 0, 0);
  for (size_t o = 0; o < no; o++) {
    run_bwd(_i, 16, 256, in_types[o % 3], out_types[o], 1, 0);
    if (is_fp8(out_types[o])) {
      run_bwd(_i, 3, 33, in_types[(o + 1) % 3], out_types[o], 0, 1);
      run_bwd(_i, 16, 256, in_types[o % 3], out_types[o], 1, 1);
    }
  }
}
END_TEST

/* A nonzero no-op flag: nothing is written (data, amax, scale_inv, and
 * with current scaling the scale); zero: the kernel runs.  _i: 1 for
 * current scaling. */
START_TEST(test_act_noop_flag) {
  size_t n = 4096;
  float *h = malloc(n * 4);
  double *x = malloc(n * sizeof(double));
  ck_assert(h && x);
  ref_fill(h, x, n, TECORE_DTYPE_F32, -3.0f, 3.0f);
  tecore_devptr_t in = te_dalloc(n * 4), flag = te_dalloc(4);
  te_h2d(in, h, n * 4);
  struct tecore_tensor ti = ref_tensor2(TECORE_DTYPE_F32, 1, n, in);
  struct outbuf o;
  out_setup(&o, TECORE_DTYPE_E4M3, 1, n, 0, 3.0, _i);
  int32_t one = 1, zero = 0;
  te_h2d(flag, &one, 4);
  TE_OK(tecore_act_fwd(TECORE_ACT_GELU, &ti, &o.t, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  uint8_t *got = malloc(n);
  ck_assert_ptr_nonnull(got);
  te_d2h(got, o.mem, n);
  te_expect_bytes_eq(got, TE_POISON_BYTE, n, "output under a set no-op flag");
  float amax, si;
  te_d2h(&amax, o.amax, 4);
  te_d2h(&si, o.scale_inv, 4);
  ck_assert_msg(amax == o.amax0, "amax changed under a set no-op flag: %g", (double)amax);
  ck_assert_msg(te_f32_bits_of(si) == TE_NAN_F32_BITS, "scale_inv written under a set no-op flag");
  if (_i) {
    float sc;
    te_d2h(&sc, o.scale, 4);
    ck_assert_msg(te_f32_bits_of(sc) == TE_NAN_F32_BITS, "scale written under a set no-op flag");
  }
  te_h2d(flag, &zero, 4);
  TE_OK(tecore_act_fwd(TECORE_ACT_GELU, &ti, &o.t, flag, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, o.mem, n);
  size_t poisoned = 0;
  for (size_t i = 0; i < n; i++) poisoned += got[i] == TE_POISON_BYTE;
  ck_assert_msg(poisoned < n / 16, "%zu of %zu bytes still poisoned with the flag cleared",
                poisoned, n);
  out_free(&o);
  TE_OK(tecore_mem_free(in));
  TE_OK(tecore_mem_free(flag));
  free(got);
  free(h);
  free(x);
}
END_TEST

/* Special values: NaN propagates (amax NaN), +-inf and huge inputs. */
START_TEST(test_act_special_values) {
  const float vals[] = {NAN, 0.0f, -0.0f, 1e30f, -1e30f, 100.0f, -100.0f, 1e-30f, -1e-30f,
                        INFINITY};
  size_t n = TE_ARRAY_N(vals);
  tecore_devptr_t in = te_dalloc(64), out = te_dalloc(64), amax = te_dalloc(4);
  te_h2d(in, vals, sizeof vals);
  struct tecore_tensor ti = ref_tensor1(TECORE_DTYPE_F32, n, in);
  struct tecore_tensor to = ref_tensor1(TECORE_DTYPE_F32, n, out);
  to.amax = amax;
  for (int k = 0; k < 4; k++) {
    float zero = 0.0f, got[16], am;
    te_h2d(amax, &zero, 4);
    te_poison_dev(out, 64);
    TE_OK(tecore_act_fwd(k, &ti, &to, 0, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    te_d2h(got, out, sizeof vals);
    te_d2h(&am, amax, 4);
    const char *nm = tecore_activation_name(k);
    ck_assert_msg(isnan(got[0]), "%s(NaN) = %g, want NaN", nm, (double)got[0]);
    ck_assert_msg(isnan(am), "%s: amax %g with a NaN output, want NaN", nm, (double)am);
    ck_assert_msg(got[1] == 0.0f && got[2] == 0.0f, "%s(+-0) = %g, %g", nm, (double)got[1],
                  (double)got[2]);
    ck_assert_msg(got[3] == 1e30f, "%s(1e30) = %g", nm, (double)got[3]);
    ck_assert_msg(got[4] == 0.0f, "%s(-1e30) = %g, want 0", nm, (double)got[4]);
    ck_assert_msg(got[5] == 100.0f, "%s(100) = %.9g", nm, (double)got[5]);
    ck_assert_msg(fabsf(got[6]) < 1e-30f || k == TECORE_ACT_QGELU,
                  "%s(-100) = %g, want about 0", nm, (double)got[6]);
    ck_assert_msg(got[9] == INFINITY, "%s(inf) = %g", nm, (double)got[9]);
  }
  TE_OK(tecore_mem_free(in));
  TE_OK(tecore_mem_free(out));
  TE_OK(tecore_mem_free(amax));
}
END_TEST

START_TEST(test_act_args) {
  tecore_devptr_t a = te_dalloc(4096), b = te_dalloc(4096);
  te_poison_dev(a, 4096); /* defined contents for the one call that runs */
  struct tecore_tensor in = ref_tensor2(TECORE_DTYPE_BF16, 4, 16, a);
  struct tecore_tensor out = ref_tensor2(TECORE_DTYPE_BF16, 4, 16, b);
  struct tecore_tensor half = ref_tensor2(TECORE_DTYPE_BF16, 4, 8, b);
  TE_EXPECT_INVALID("act", tecore_act_fwd((tecore_activation_t)7, &in, &out, 0, te_stream));
  TE_EXPECT_INVALID("act", tecore_act_fwd((tecore_activation_t)-1, &in, &out, 0, te_stream));
  TE_EXPECT_INVALID("in", tecore_act_fwd(TECORE_ACT_GELU, NULL, &out, 0, te_stream));
  TE_EXPECT_INVALID("out", tecore_act_fwd(TECORE_ACT_GELU, &in, NULL, 0, te_stream));
  TE_EXPECT_INVALID("in", tecore_act_fwd(TECORE_ACT_GELU, &in, &half, 0, te_stream));
  TE_EXPECT_INVALID("out", tecore_act_fwd(TECORE_ACT_SWIGLU, &in, &out, 0, te_stream));
  TE_OK(tecore_act_fwd(TECORE_ACT_SWIGLU, &in, &half, 0, te_stream));
  TE_EXPECT_INVALID("noop_flag", tecore_act_fwd(TECORE_ACT_GELU, &in, &out, a + 2, te_stream));
  struct tecore_tensor bad = in;
  bad.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("in", tecore_act_fwd(TECORE_ACT_GELU, &bad, &out, 0, te_stream));
  bad = out;
  bad.dtype = TECORE_DTYPE_E4M3; /* FP8 without delayed scaling */
  TE_EXPECT_INVALID("out", tecore_act_fwd(TECORE_ACT_GELU, &in, &bad, 0, te_stream));
  bad.scaling = TECORE_SCALING_DELAYED; /* no scale */
  TE_EXPECT_INVALID("scale", tecore_act_fwd(TECORE_ACT_GELU, &in, &bad, 0, te_stream));
  bad.scale = a;
  bad.scale_inv = a + 4;
  bad.scaling = TECORE_SCALING_CURRENT;   /* current scaling writes the amax */
  bad.amax = 0;
  TE_EXPECT_INVALID("amax", tecore_act_fwd(TECORE_ACT_GELU, &in, &bad, 0, te_stream));
  bad.scaling = TECORE_SCALING_MXFP8;
  TE_EXPECT_INVALID("mxfp8", tecore_act_fwd(TECORE_ACT_GELU, &in, &bad, 0, te_stream));
  bad.scaling = TECORE_SCALING_DELAYED;
  bad.columnwise_data = b;
  TE_EXPECT_INVALID("columnwise", tecore_act_fwd(TECORE_ACT_GELU, &in, &bad, 0, te_stream));
  bad = out;
  bad.data = b + 1; /* misaligned for bf16 */
  TE_EXPECT_INVALID("out", tecore_act_fwd(TECORE_ACT_GELU, &in, &bad, 0, te_stream));
  TE_EXPECT_INVALID("act", tecore_act_bwd((tecore_activation_t)9, &in, &in, &out, te_stream));
  TE_EXPECT_INVALID("dy", tecore_act_bwd(TECORE_ACT_GELU, NULL, &in, &out, te_stream));
  TE_EXPECT_INVALID("x", tecore_act_bwd(TECORE_ACT_GELU, &in, NULL, &out, te_stream));
  TE_EXPECT_INVALID("dx", tecore_act_bwd(TECORE_ACT_GELU, &in, &in, NULL, te_stream));
  TE_EXPECT_INVALID("dx", tecore_act_bwd(TECORE_ACT_GELU, &in, &in, &half, te_stream));
  TE_EXPECT_INVALID("x", tecore_act_bwd(TECORE_ACT_GEGLU, &in, &in, &out, te_stream));
  ck_assert_str_eq(tecore_activation_name(TECORE_ACT_QGELU), "qgelu");
  ck_assert_str_eq(tecore_activation_name((tecore_activation_t)99), "?");
  ck_assert_int_eq(tecore_activation_is_gated(TECORE_ACT_REGLU), 1);
  ck_assert_int_eq(tecore_activation_is_gated(TECORE_ACT_SILU), 0);
  ck_assert_int_eq(tecore_activation_is_gated((tecore_activation_t)99), 0);
  /* empty tensors: success, nothing launched */
  struct tecore_tensor e0 = ref_tensor2(TECORE_DTYPE_F32, 0, 16, 0);
  TE_OK(tecore_act_fwd(TECORE_ACT_GELU, &e0, &e0, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(a));
  TE_OK(tecore_mem_free(b));
}
END_TEST

static Suite *act_suite(void) {
  Suite *s = suite_create("act");
  TCase *tc = te_tcase(s, "fwd", 1);
  tcase_add_loop_test(tc, test_act_fwd, 0, TECORE_ACT_COUNT_);
  tc = te_tcase(s, "bwd", 1);
  tcase_add_loop_test(tc, test_act_bwd, 0, TECORE_ACT_COUNT_);
  tc = te_tcase(s, "flags", 1);
  tcase_add_loop_test(tc, test_act_noop_flag, 0, 2);
  tcase_add_test(tc, test_act_special_values);
  tcase_add_test(tc, test_act_args);
  return s;
}

TE_TEST_MAIN(act_suite, TE_TEST_DEVICE)
