/* SPDX-License-Identifier: Apache-2.0 */
/* check_transpose.c -- the cast-transpose family (te/transpose.h) against
 * a float64 reference, independent of kernels/common:
 *   - FP8 bytes bit for bit: the reference takes the exact product
 *     x * scale in double, rounds it once to float (the defined
 *     semantics, q = fp8(float(x * scale))), then converts to E4M3/E5M2
 *     with t/lib/act_ref.h's round-to-nearest-even and saturation; NaN inputs must
 *     give some NaN code (its sign follows the platform's NaN products);
 *   - for the dact kernels, where the kernel computes dx in float and the
 *     reference in double, a code must be one of the codes of the scaled
 *     reference value moved by +-(1e-5 |s| + 1e-6 scale |dy|): exact
 *     except within that distance of a rounding boundary;
 *   - MXFP8 E8M0 scales from the OCP rule floor(log2 amax) - emax + 127;
 *   - amax exact (cast) or within 1e-5 relative + 1e-6 max|dy| (dact);
 *     scale_inv = 1/scale bit for bit;
 *   - dbias within 1e-5 sum|v| + 1e-6 sum|dy| + half an ulp of its
 *     dtype (2^-8 |ref| for bf16, 2^-11 for f16, 0 for f32);
 *   - outputs poisoned first, with poisoned guard bytes around each output
 *     that must stay untouched; fresh random inputs every run;
 *   - the byte transpose of FP8 codes (te_ct_byte_transpose, through the
 *     kernel table) byte for byte against the host's transpose;
 *   - shapes 1x1, 1xN, Nx1, 7x33, 129x257, 3x100000, tile multiples,
 *     a tall one with 3125 blocks per column; misaligned pointers
 *     (element paths); every scaling mode this family takes; the argument
 *     checks. */
#include "tests.h"
#include "act_ref.h"

#define GUARD 64   /* poisoned bytes before and after each output */

/* ---- independent reference conversions -------------------------------------- */

/* double -> E4M3 (e4m3 = 1) or E5M2, nearest even, saturating, NaN -> 0x7F|sign
 * (t/lib/act_ref.h's rounding, shared with the activation suites). */
static uint8_t ref_fp8(double v, int e4m3) {
  tecore_dtype_t dt = e4m3 ? TECORE_DTYPE_E4M3 : TECORE_DTYPE_E5M2;
  return ref_fp8_bits(ref_round_dtype(v, dt), dt);
}

static int fp8_is_nan(uint8_t c, int e4m3) {
  return e4m3 ? (c & 0x7f) == 0x7f : (c & 0x7c) == 0x7c && (c & 3);
}

/* E8M0 scale of a block with absolute maximum amax (OCP MX v1.0, 6.3). */
static uint8_t ref_e8m0(double amax, int e4m3) {
  if (isnan(amax) || isinf(amax)) return 0xff;
  if (amax < ldexp(1.0, -126)) return 0;   /* zero or below float's normal range */
  int e;
  frexp(amax, &e);
  int v = (e - 1) - (e4m3 ? 8 : 15) + 127;
  return (uint8_t)(v < 0 ? 0 : v > 254 ? 254 : v);
}

static double f16_value(uint16_t h) { return ref_f16_value(h); }
static double bf16_value(uint16_t h) { return te_f32_from_bits((uint32_t)h << 16); }

START_TEST(reference_self_check) {
  ck_assert_uint_eq(ref_fp8(1.0, 1), 0x38);
  ck_assert_uint_eq(ref_fp8(448.0, 1), 0x7e);
  ck_assert_uint_eq(ref_fp8(1e9, 1), 0x7e);
  ck_assert_uint_eq(ref_fp8(-INFINITY, 1), 0xfe);
  ck_assert_uint_eq(ref_fp8(NAN, 1), 0x7f);
  ck_assert_uint_eq(ref_fp8(ldexp(1, -9), 1), 0x01);     /* min subnormal */
  ck_assert_uint_eq(ref_fp8(ldexp(1, -10), 1), 0x00);    /* tie to even: 0 */
  ck_assert_uint_eq(ref_fp8(ldexp(3, -10), 1), 0x02);    /* tie to even: 2 */
  ck_assert_uint_eq(ref_fp8(ldexp(15, -10), 1), 0x08);   /* rounds up to the min normal */
  ck_assert_uint_eq(ref_fp8(1.0625, 1), 0x38);           /* tie to even (down) */
  ck_assert_uint_eq(ref_fp8(1.1875, 1), 0x3a);           /* tie to even (up) */
  ck_assert_uint_eq(ref_fp8(-0.0, 1), 0x80);
  ck_assert_uint_eq(ref_fp8(1.0, 0), 0x3c);
  ck_assert_uint_eq(ref_fp8(57344.0, 0), 0x7b);
  ck_assert_uint_eq(ref_fp8(INFINITY, 0), 0x7b);
  ck_assert_uint_eq(ref_fp8(ldexp(1, -16), 0), 0x01);
  ck_assert_uint_eq(ref_fp8(1.125, 0), 0x3c);            /* tie to even (down) */
  ck_assert_uint_eq(ref_fp8(1.375, 0), 0x3e);            /* tie to even (up) */
  ck_assert_uint_eq(ref_e8m0(1.0, 1), 127 - 8);
  ck_assert_uint_eq(ref_e8m0(448.0, 1), 127);
  ck_assert_uint_eq(ref_e8m0(0.0, 1), 0);
  ck_assert_uint_eq(ref_e8m0(INFINITY, 0), 0xff);
  ck_assert(fp8_is_nan(0xff, 0) && !fp8_is_nan(0xfc, 0) && fp8_is_nan(0x7f, 1));
  ck_assert(f16_value(0x3c00) == 1.0 && f16_value(0x0001) == ldexp(1, -24));
}
END_TEST

/* ---- reference activation derivatives (double) ---------------------------- */

static double ref_dact(int act, double x) {
  switch (act) {
    case TECORE_ACT_GELU: {
      /* 0.5(1 + tanh u) = sigmoid(2u) and 1 - tanh^2 u = 4 s (1 - s), in the
       * form that keeps precision for negative x (1 + tanh u cancels) */
      const double k0 = 0.79788456080286535588, k1 = 0.044715;
      double u = k0 * (x + k1 * x * x * x), e = exp(-2 * u);
      if (isinf(e)) return 0.0;   /* s = 0 and x s (1 - s) below any double */
      double s = 1 / (1 + e), oms = e / (1 + e);
      return s + x * s * oms * 2 * k0 * (1 + 3 * k1 * x * x);
    }
    case TECORE_ACT_RELU:
      return x > 0 ? 1.0 : 0.0;
    case TECORE_ACT_SILU: {
      double e = exp(-x);
      if (isinf(e)) return 0.0;
      double s = 1 / (1 + e);
      return s + x * s * (e / (1 + e));
    }
    default: {   /* QGELU */
      double e = exp(-1.702 * x);
      if (isinf(e)) return 0.0;
      double s = 1 / (1 + e);
      return s + 1.702 * x * s * (e / (1 + e));
    }
  }
}

/* ---- device buffers with guards ---------------------------------------------- */

struct dbuf {
  tecore_devptr_t base, p;   /* p = base + GUARD + off */
  size_t bytes, off;
};

static struct dbuf dbuf_new(size_t bytes, size_t off) {
  struct dbuf b = {0, 0, bytes, off};
  b.base = te_dalloc(bytes + off + 2 * GUARD);
  te_poison_dev(b.base, bytes + off + 2 * GUARD);
  b.p = b.base + GUARD + off;
  return b;
}

/* Copies the buffer back and checks that the guards are untouched. */
static void *dbuf_get(const struct dbuf *b, const char *what) {
  size_t total = b->bytes + b->off + 2 * GUARD;
  unsigned char *h = malloc(total);
  ck_assert(h);
  te_d2h(h, b->base, total);
  char msg[128];
  snprintf(msg, sizeof msg, "%s: guard before", what);
  te_expect_bytes_eq(h, TE_POISON_BYTE, GUARD + b->off, msg);
  snprintf(msg, sizeof msg, "%s: guard after", what);
  te_expect_bytes_eq(h + GUARD + b->off + b->bytes, TE_POISON_BYTE, GUARD, msg);
  memmove(h, h + GUARD + b->off, b->bytes);
  return h;
}

static void dbuf_free(struct dbuf *b) {
  if (b->base) TE_OK(tecore_mem_free(b->base));
  b->base = 0;
}

/* ---- random inputs -------------------------------------------------------------- */

/* Random element of dtype: bits in *raw (dtype size), exact value returned.
 * Magnitudes spread over 2^-8 .. 2^4 (f16/bf16/f32) so that scales move
 * values through FP8's normal, subnormal and saturating ranges. */
static double rand_elem(tecore_dtype_t dt, void *raw) {
  int e = (int)te_rand_below(13) - 8;
  if (dt == TECORE_DTYPE_F16) {
    uint16_t h = (uint16_t)(((te_rand_u32() & 1) << 15) | ((uint32_t)(e + 15) << 10) |
                            (te_rand_u32() & 1023));
    memcpy(raw, &h, 2);
    return f16_value(h);
  }
  float f = te_rand_float(1.0f, 2.0f) * (float)ldexp(1.0, e) * ((te_rand_u32() & 1) ? -1.0f : 1.0f);
  if (dt == TECORE_DTYPE_BF16) {
    uint16_t h = (uint16_t)(te_f32_bits_of(f) >> 16);
    memcpy(raw, &h, 2);
    return bf16_value(h);
  }
  memcpy(raw, &f, 4);
  return f;
}

/* Writes special value k into element raw of dtype; returns its value. */
static double special_elem(tecore_dtype_t dt, void *raw, int k) {
  static const float sp[] = {NAN, INFINITY, -INFINITY, 3.0e38f, -0.0f, 1e-40f, -65000.0f, 0.0f};
  float f = sp[k % (int)(sizeof sp / sizeof sp[0])];
  if (dt == TECORE_DTYPE_F32) {
    memcpy(raw, &f, 4);
    return f;
  }
  if (dt == TECORE_DTYPE_BF16) {
    uint16_t h = (uint16_t)(te_f32_bits_of(f) >> 16);
    memcpy(raw, &h, 2);
    return bf16_value(h);
  }
  static const uint16_t hs[] = {0x7e00, 0x7c00, 0xfc00, 0x7bff, 0x8000, 0x0001, 0xfbf0, 0x0000};
  uint16_t h = hs[k % 8];
  memcpy(raw, &h, 2);
  return f16_value(h);
}

/* ---- one case -------------------------------------------------------------------- */

struct ct_case {
  size_t rows, cols;
  tecore_dtype_t in_dt, out_dt;
  tecore_scaling_mode_t mode;
  int act;                  /* -1: cast; else a tecore_activation_t */
  int dbias_dt;             /* -1: no dbias; else a tecore_dtype_t */
  int rowwise, colwise;     /* outputs to ask for */
  int misalign;             /* offset every pointer off its 16-byte alignment */
  int specials;             /* sprinkle NaN, inf, huge, -0, subnormal inputs */
};

static const char *case_name(const struct ct_case *c, char *buf, size_t n) {
  snprintf(buf, n, "%zux%zu %s->%s %s act=%s dbias=%s%s%s%s%s", c->rows, c->cols,
           tecore_dtype_name(c->in_dt), tecore_dtype_name(c->out_dt),
           tecore_scaling_name(c->mode), c->act < 0 ? "none" : tecore_activation_name(c->act),
           c->dbias_dt < 0 ? "none" : tecore_dtype_name(c->dbias_dt), c->rowwise ? " row" : "",
           c->colwise ? " col" : "", c->misalign ? " misaligned" : "",
           c->specials ? " specials" : "");
  return buf;
}

/* The allowed codes of a scaled reference value s (tol: its uncertainty):
 * the code of s, or any code between those of s - tol and s + tol (the
 * window may hold 0, and then codes of both signs). */
static int code_ok(uint8_t got, double s, double tol, int e4m3) {
  if (isnan(s)) return fp8_is_nan(got, e4m3);
  if (got == ref_fp8(s, e4m3)) return 1;
  if (tol == 0) return 0;
  uint8_t lo = ref_fp8(s - tol, e4m3), hi = ref_fp8(s + tol, e4m3);
  if (got == lo || got == hi) return 1;
  if (fp8_is_nan(got, e4m3)) return 0;
  if (s - tol < 0 && s + tol > 0)
    return (got & 0x80) ? (got & 0x7f) <= (lo & 0x7f) : got <= hi;
  /* one sign: the codes grow with the magnitude, so any code between */
  if ((got & 0x80) != (lo & 0x80) || (got & 0x80) != (hi & 0x80)) return 0;
  uint8_t a = lo & 0x7f, b = hi & 0x7f, g = got & 0x7f;
  return a <= b ? g >= a && g <= b : g >= b && g <= a;
}

/* The product x * mult rounded once to float, as the kernel's definition. */
static double scaled(double v, double mult, int exact) {
  double p = v * mult;
  return exact ? (double)(float)p : p;
}

static void run_case(const struct ct_case *c) {
  char name[256];
  case_name(c, name, sizeof name);
  const size_t rows = c->rows, cols = c->cols, n = rows * cols;
  const size_t isz = tecore_dtype_size(c->in_dt);
  const int e4m3 = c->out_dt == TECORE_DTYPE_E4M3;
  const int mx = c->mode == TECORE_SCALING_MXFP8;
  const int dact = c->act >= 0;
  const double fp8max = e4m3 ? 448.0 : 57344.0;

  /* inputs */
  unsigned char *hin = malloc(n * isz + 1), *hx = malloc(n * isz + 1);
  double *vin = malloc(n * sizeof(double)), *vx = malloc(n * sizeof(double));
  double *v = malloc(n * sizeof(double));   /* the reference values */
  ck_assert(hin && hx && vin && vx && v);
  for (size_t i = 0; i < n; i++) {
    vin[i] = rand_elem(c->in_dt, hin + i * isz);
    vx[i] = rand_elem(c->in_dt, hx + i * isz);
  }
  if (c->specials)
    for (int k = 0; k < 16 && (size_t)k < n; k++) {
      size_t i = te_rand_below(n);
      vin[i] = special_elem(c->in_dt, hin + i * isz, k);
    }
  double amax_ref = 0, dy_max = 0;
  int any_nan = 0;
  for (size_t i = 0; i < n; i++) {
    v[i] = dact ? vin[i] * ref_dact(c->act, vx[i]) : vin[i];
    if (isnan(v[i])) any_nan = 1;
    else if (fabs(v[i]) > amax_ref) amax_ref = fabs(v[i]);
    if (fabs(vin[i]) > dy_max) dy_max = fabs(vin[i]);
  }
  /* dact: the kernel's float math is off from the double reference by
   * about 1e-6 * |dy| absolute (the derivative's rounding) plus 1e-5
   * relative; amax and block scales take the largest |dy| */
  const double dtol_rel = dact ? 1e-5 : 0, dtol_abs = dact ? 1e-6 * dy_max : 0;

  /* scale: about fp8max / amax, times 1/4 .. 4 so some values saturate */
  /* (a tiny amax, e.g. dgelu far left of 0 on a 1x1 input, would give an
   * infinite scale: keep 1 there) */
  float scale_h = (float)(fp8max / (amax_ref > 1e-30 ? amax_ref : fp8max) *
                          ldexp(1.0, (int)te_rand_below(5) - 2) * te_rand_float(1.0f, 2.0f));
  if (c->specials) scale_h = 1.0f;
  const float amax0 = (float)(amax_ref * 0.25);   /* delayed: accumulated into */

  /* device */
  const size_t off_in = c->misalign ? isz : 0, off_out = c->misalign ? 1 : 0;
  struct dbuf din = dbuf_new(n * isz, off_in), dx = {0};
  if (dact) dx = dbuf_new(n * isz, off_in);
  struct dbuf drow = {0}, dcol = {0}, dsinv = {0}, dcsinv = {0}, dscale = {0}, damax = {0},
              ddb = {0}, dws = {0};
  te_h2d(din.p, hin, n * isz);
  if (dact) te_h2d(dx.p, hx, n * isz);
  const size_t srow_cols = (cols + 31) / 32, scol_rows = (rows + 31) / 32;
  if (c->rowwise) drow = dbuf_new(n, off_out);
  if (c->colwise) dcol = dbuf_new(n, off_out);
  if (mx) {
    if (c->rowwise) dsinv = dbuf_new(rows * srow_cols, 0);
    if (c->colwise) dcsinv = dbuf_new(scol_rows * cols, 0);
  } else {
    dsinv = dbuf_new(4, 0);
    dcsinv = dbuf_new(4, 0);
    dscale = dbuf_new(4, 0);
    te_h2d(dscale.p, &scale_h, 4);
  }
  damax = dbuf_new(4, 0);
  te_h2d(damax.p, &amax0, 4);

  size_t shape[2] = {rows, cols};
  struct tecore_tensor tin, tx, tout, tdb;
  TE_OK(tecore_tensor_init(&tin, c->in_dt, 2, shape, din.p));
  TE_OK(tecore_tensor_init(&tx, c->in_dt, 2, shape, dx.p));
  TE_OK(tecore_tensor_init(&tout, c->out_dt, 2, shape, drow.p));
  tout.scaling = c->mode;
  tout.columnwise_data = dcol.p;
  tout.scale = dscale.p;
  tout.scale_inv = dsinv.p;
  tout.columnwise_scale_inv = dcsinv.p;
  tout.amax = damax.p;
  size_t dbn = cols;
  if (c->dbias_dt >= 0) {
    ddb = dbuf_new(cols * tecore_dtype_size(c->dbias_dt),
                   c->misalign ? tecore_dtype_size(c->dbias_dt) : 0);
    TE_OK(tecore_tensor_init(&tdb, (tecore_dtype_t)c->dbias_dt, 1, &dbn, ddb.p));
    size_t wsb = 0;
    TE_OK(tecore_cast_transpose_dbias_workspace_size(&tin, &wsb));
    if (wsb) dws = dbuf_new(wsb, 0);
    if (dact)
      TE_OK(
          tecore_dact_dbias_cast_transpose(c->act, &tin, &tx, &tout, &tdb, dws.p, wsb, te_stream));
    else
      TE_OK(tecore_cast_transpose_dbias(&tin, &tout, &tdb, dws.p, wsb, te_stream));
  } else if (dact) {
    TE_OK(tecore_dact_dbias_cast_transpose(c->act, &tin, &tx, &tout, NULL, 0, 0, te_stream));
  } else {
    TE_OK(tecore_cast_transpose(&tin, &tout, te_stream));
  }
  TE_OK(tecore_stream_synchronize(te_stream));

  /* amax */
  float *gamax = dbuf_get(&damax, "amax");
  double want_amax = c->mode == TECORE_SCALING_DELAYED || mx ? fmax(amax_ref, amax0) : amax_ref;
  if (any_nan) {
    ck_assert_msg(isnan(*gamax), "%s: amax %g, want NaN (a NaN input)", name, (double)*gamax);
  } else {
    double tol = dtol_rel * want_amax + dtol_abs;
    ck_assert_msg(*gamax == want_amax || fabs(*gamax - want_amax) <= tol,
                  "%s: amax %.9g, want %.9g (tolerance %g)", name, (double)*gamax, want_amax, tol);
  }

  /* per-tensor scale (current scaling computes it) and its inverse */
  float scale_used = scale_h;
  if (!mx) {
    float *gs = dbuf_get(&dscale, "scale");
    if (c->mode == TECORE_SCALING_CURRENT && !any_nan) {
      float want = *gamax > 0 ? (float)fp8max / *gamax : 1.0f;
      ck_assert_msg(te_f32_bits_of(*gs) == te_f32_bits_of(want),
                    "%s: current scale %.9g, want fp8_max/amax = %.9g", name, (double)*gs,
                    (double)want);
    } else if (c->mode == TECORE_SCALING_DELAYED) {
      ck_assert_msg(*gs == scale_h, "%s: scale changed to %g", name, (double)*gs);
    }
    scale_used = *gs;
    float *gsi = dbuf_get(&dsinv, "scale_inv"), *gcsi = dbuf_get(&dcsinv, "columnwise_scale_inv");
    float want_si = 1.0f / scale_used;
    ck_assert_msg(te_f32_bits_of(*gsi) == te_f32_bits_of(want_si), "%s: scale_inv %.9g, want %.9g",
                  name, (double)*gsi, (double)want_si);
    ck_assert_msg(te_f32_bits_of(*gcsi) == te_f32_bits_of(want_si),
                  "%s: columnwise_scale_inv %.9g, want %.9g", name, (double)*gcsi, (double)want_si);
    free(gs);
    free(gsi);
    free(gcsi);
  }
  free(gamax);

  /* FP8 data */
  size_t near = 0;
  if (!mx) {
    uint8_t *grow = c->rowwise ? dbuf_get(&drow, "data") : NULL;
    uint8_t *gcol = c->colwise ? dbuf_get(&dcol, "columnwise_data") : NULL;
    for (size_t r = 0; r < rows; r++)
      for (size_t k = 0; k < cols; k++) {
        size_t i = r * cols + k;
        double s = scaled(v[i], scale_used, !dact);
        double tol = dtol_rel * fabs(s) + (dact ? 1e-6 * fabs(vin[i]) : 0) * scale_used;
        if (grow) {
          int ok = code_ok(grow[i], s, tol, e4m3);
          ck_assert_msg(
              ok, "%s: data[%zu][%zu] = 0x%02x, want 0x%02x (v %.9g * scale %.9g = %.9g, tol %g)",
              name, r, k, grow[i], ref_fp8(s, e4m3), v[i], (double)scale_used, s, tol);
          /* count differences other than the sign of a zero (a value
           * below float's range underflows with either sign) */
          if ((grow[i] & 0x7f) != (ref_fp8(s, e4m3) & 0x7f)) near++;
        }
        if (gcol) {
          uint8_t g = gcol[k * rows + r];
          ck_assert_msg(code_ok(g, s, tol, e4m3),
                        "%s: columnwise_data[%zu][%zu] = 0x%02x, want 0x%02x (v %.9g, scaled %.9g)",
                        name, k, r, g, ref_fp8(s, e4m3), v[i], s);
        }
      }
    free(grow);
    free(gcol);
  } else {
    if (c->rowwise) {
      uint8_t *grow = dbuf_get(&drow, "data"), *gs = dbuf_get(&dsinv, "scale_inv");
      for (size_t r = 0; r < rows; r++)
        for (size_t b = 0; b < srow_cols; b++) {
          double am = 0;
          int nan = 0;
          for (size_t k = b * 32; k < cols && k < b * 32 + 32; k++) {
            double a = fabs(v[r * cols + k]);
            if (isnan(a)) nan = 1;
            else if (a > am) am = a;
          }
          double amt = dtol_rel * am + dtol_abs;
          uint8_t e8 = gs[r * srow_cols + b];
          uint8_t w0 = nan ? 0xff : ref_e8m0(am - amt, e4m3),
                  w1 = nan ? 0xff : ref_e8m0(am + amt, e4m3);
          ck_assert_msg(e8 >= w0 && e8 <= w1,
                        "%s: scale_inv[%zu][%zu] = %u, want %u (block amax %.9g)", name, r, b, e8,
                        ref_e8m0(am, e4m3), am);
          double mult = e8 == 0xff ? NAN : ldexp(1.0, 127 - e8);
          for (size_t k = b * 32; k < cols && k < b * 32 + 32; k++) {
            size_t i = r * cols + k;
            double s = scaled(v[i], mult, !dact);
            double tol = dtol_rel * fabs(s) + (dact ? 1e-6 * fabs(vin[i]) : 0) * mult;
            ck_assert_msg(code_ok(grow[i], s, tol, e4m3),
                          "%s: mx data[%zu][%zu] = 0x%02x, want 0x%02x (v %.9g, e8 %u)", name, r, k,
                          grow[i], ref_fp8(s, e4m3), v[i], e8);
          }
        }
      free(grow);
      free(gs);
    }
    if (c->colwise) {
      uint8_t *gcol = dbuf_get(&dcol, "columnwise_data"),
              *gs = dbuf_get(&dcsinv, "columnwise_scale_inv");
      for (size_t b = 0; b < scol_rows; b++)
        for (size_t k = 0; k < cols; k++) {
          double am = 0;
          int nan = 0;
          for (size_t r = b * 32; r < rows && r < b * 32 + 32; r++) {
            double a = fabs(v[r * cols + k]);
            if (isnan(a)) nan = 1;
            else if (a > am) am = a;
          }
          double amt = dtol_rel * am + dtol_abs;
          uint8_t e8 = gs[b * cols + k];
          uint8_t w0 = nan ? 0xff : ref_e8m0(am - amt, e4m3),
                  w1 = nan ? 0xff : ref_e8m0(am + amt, e4m3);
          ck_assert_msg(e8 >= w0 && e8 <= w1,
                        "%s: columnwise_scale_inv[%zu][%zu] = %u, want %u (block amax %.9g)", name,
                        b, k, e8, ref_e8m0(am, e4m3), am);
          double mult = e8 == 0xff ? NAN : ldexp(1.0, 127 - e8);
          for (size_t r = b * 32; r < rows && r < b * 32 + 32; r++) {
            size_t i = r * cols + k;
            double s = scaled(v[i], mult, !dact);
            double tol = dtol_rel * fabs(s) + (dact ? 1e-6 * fabs(vin[i]) : 0) * mult;
            ck_assert_msg(code_ok(gcol[i], s, tol, e4m3),
                          "%s: mx columnwise_data[%zu][%zu] = 0x%02x, want 0x%02x (v %.9g, e8 %u)",
                          name, r, k, gcol[i], ref_fp8(s, e4m3), v[i], e8);
          }
        }
      free(gcol);
      free(gs);
    }
  }
  if (near) printf("# %s: %zu rowwise codes off by the float-vs-double tolerance\n", name, near);

  /* dbias */
  if (c->dbias_dt >= 0) {
    void *g = dbuf_get(&ddb, "dbias");
    double half_ulp = ref_unit_roundoff((tecore_dtype_t)c->dbias_dt);
    double tiny = ref_tiny((tecore_dtype_t)c->dbias_dt);
    for (size_t k = 0; k < cols; k++) {
      double want = 0, sabs = 0, sdy = 0;
      for (size_t r = 0; r < rows; r++) {
        want += v[r * cols + k];
        sabs += fabs(v[r * cols + k]);
        sdy += fabs(vin[r * cols + k]);
      }
      double got = c->dbias_dt == TECORE_DTYPE_F32 ? ((float *)g)[k]
                   : c->dbias_dt == TECORE_DTYPE_BF16 ? bf16_value(((uint16_t *)g)[k])
                                                      : f16_value(((uint16_t *)g)[k]);
      double tol = 1e-5 * sabs + (dact ? 1e-6 * sdy : 0) + half_ulp * fabs(want) + tiny;
      if (isnan(want) || isinf(sabs)) {
        ck_assert_msg(isnan(got) || isinf(got), "%s: dbias[%zu] = %g, want non-finite", name, k,
                      got);
        continue;
      }
      ck_assert_msg(fabs(got - want) <= tol, "%s: dbias[%zu] = %.9g, want %.9g (tolerance %g)",
                    name, k, got, want, tol);
    }
    free(g);
  }

  struct dbuf *all[] = {&din, &dx, &drow, &dcol, &dsinv, &dcsinv, &dscale, &damax, &ddb, &dws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) dbuf_free(all[i]);
  free(hin);
  free(hx);
  free(vin);
  free(vx);
  free(v);
}

/* ---- the tests ---------------------------------------------------------------------- */

static const size_t shapes[][2] = {{1, 1},   {1, 100}, {100, 1},   {7, 33},  {64, 64},
                                   {129, 257}, {96, 48}, {3, 100000}, {256, 512}, {65, 16}};
#define NSHAPES (sizeof shapes / sizeof shapes[0])
static const tecore_dtype_t in_dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_F16, TECORE_DTYPE_BF16};

START_TEST(cast_transpose_delayed) {
  /* every input dtype x both formats x every shape; both outputs */
  for (size_t s = 0; s < NSHAPES; s++)
    for (int d = 0; d < 3; d++) {
      struct ct_case c = {shapes[s][0], shapes[s][1], in_dts[d],
                          (s + (size_t)d) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                          TECORE_SCALING_DELAYED, -1, -1, 1, 1, 0, 0};
      run_case(&c);
    }
}
END_TEST

START_TEST(cast_transpose_misaligned) {
  /* pointers off their 16-byte alignment: the element paths everywhere */
  for (size_t s = 0; s < NSHAPES; s++) {
    struct ct_case c = {shapes[s][0], shapes[s][1], in_dts[s % 3], TECORE_DTYPE_E4M3,
                        TECORE_SCALING_DELAYED, -1, (int)in_dts[(s + 1) % 3], 1, 1, 1, 0};
    run_case(&c);
  }
}
END_TEST

START_TEST(cast_transpose_one_output) {
  struct ct_case c = {129, 257, TECORE_DTYPE_BF16, TECORE_DTYPE_E4M3, TECORE_SCALING_DELAYED,
                      -1, -1, 1, 0, 0, 0};
  run_case(&c);
  c.rowwise = 0;
  c.colwise = 1;
  run_case(&c);
  c.mode = TECORE_SCALING_MXFP8;
  run_case(&c);
  c.rowwise = 1;
  c.colwise = 0;
  run_case(&c);
}
END_TEST

START_TEST(cast_transpose_current) {
  for (size_t s = 0; s < NSHAPES; s += 2) {
    struct ct_case c = {shapes[s][0], shapes[s][1], in_dts[s % 3],
                        s % 4 ? TECORE_DTYPE_E4M3 : TECORE_DTYPE_E5M2, TECORE_SCALING_CURRENT,
                        -1, s % 3 ? (int)TECORE_DTYPE_F32 : -1, 1, 1, 0, 0};
    run_case(&c);
  }
}
END_TEST

START_TEST(cast_transpose_mxfp8) {
  for (size_t s = 0; s < NSHAPES; s++)
    for (int d = 0; d < 3; d += 1 + (int)(s % 2)) {
      struct ct_case c = {shapes[s][0], shapes[s][1], in_dts[d],
                          (s + (size_t)d) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                          TECORE_SCALING_MXFP8, -1, -1, 1, 1, (int)(s % 3 == 1), 0};
      run_case(&c);
    }
}
END_TEST

START_TEST(cast_transpose_specials) {
  /* NaN, infinities, huge values, -0, subnormals: saturation, NaN amax,
   * NaN blocks (E8M0 0xFF) */
  for (int d = 0; d < 3; d++)
    for (int m = 0; m < 2; m++) {
      struct ct_case c = {129, 96, in_dts[d], m ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                          m ? TECORE_SCALING_MXFP8 : TECORE_SCALING_DELAYED, -1, -1, 1, 1, 0, 1};
      run_case(&c);
    }
}
END_TEST

START_TEST(cast_transpose_dbias) {
  for (size_t s = 0; s < NSHAPES; s++) {
    struct ct_case c = {shapes[s][0], shapes[s][1], in_dts[s % 3],
                        s % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                        s % 3 == 2 ? TECORE_SCALING_MXFP8 : TECORE_SCALING_DELAYED, -1,
                        (int)in_dts[(s + 2) % 3], 1, 1, 0, 0};
    run_case(&c);
  }
}
END_TEST

START_TEST(cast_transpose_dbias_many_blocks) {
  /* 3125 row tiles, one block each: the dbias partials of 3125 blocks per
   * column are added.  (Blocks walk several row tiles only past 16384
   * tiles, TE_CT_TARGET_BLOCKS, 16.8M elements at 16 columns: too slow
   * here; t/gpu/transpose_gpu.cu runs such shapes on both backends.) */
  struct ct_case c = {200000, 16, TECORE_DTYPE_BF16, TECORE_DTYPE_E4M3, TECORE_SCALING_DELAYED,
                      -1, TECORE_DTYPE_F32, 1, 1, 0, 0};
  run_case(&c);
  c.mode = TECORE_SCALING_MXFP8;
  c.in_dt = TECORE_DTYPE_F32;
  c.dbias_dt = TECORE_DTYPE_BF16;
  run_case(&c);
}
END_TEST

static const int acts[] = {TECORE_ACT_GELU, TECORE_ACT_RELU, TECORE_ACT_SILU, TECORE_ACT_QGELU};

START_TEST(dact_dbias_cast_transpose) {
  for (int a = 0; a < 4; a++)
    for (size_t s = 0; s < NSHAPES; s += 1 + (size_t)(a % 2)) {
      struct ct_case c = {shapes[s][0], shapes[s][1], in_dts[(s + (size_t)a) % 3],
                          (s + (size_t)a) % 2 ? TECORE_DTYPE_E5M2 : TECORE_DTYPE_E4M3,
                          s % 3 == 1 ? TECORE_SCALING_MXFP8 : TECORE_SCALING_DELAYED, acts[a],
                          s % 4 == 3 ? -1 : (int)in_dts[s % 3], 1, 1, (int)(s % 5 == 4), 0};
      run_case(&c);
    }
}
END_TEST

START_TEST(dact_current) {
  for (int a = 0; a < 4; a++) {
    struct ct_case c = {129, 257, TECORE_DTYPE_BF16, TECORE_DTYPE_E5M2, TECORE_SCALING_CURRENT,
                        acts[a], TECORE_DTYPE_BF16, 1, 1, 0, 0};
    run_case(&c);
  }
}
END_TEST

START_TEST(dbias_deterministic) {
  /* the same input twice gives the same dbias bits */
  const size_t rows = 1000, cols = 72;
  size_t shape[2] = {rows, cols}, wsb;
  float *h = malloc(rows * cols * 4), *o1 = malloc(cols * 4), *o2 = malloc(cols * 4);
  te_rand_floats(h, rows * cols, -3.0f, 3.0f);
  tecore_devptr_t in = te_dalloc(rows * cols * 4), q = te_dalloc(rows * cols),
                  qt = te_dalloc(rows * cols), f = te_dalloc(16), db = te_dalloc(cols * 4);
  te_h2d(in, h, rows * cols * 4);
  float one = 1.0f;
  te_h2d(f, &one, 4);
  struct tecore_tensor tin, tout, tdb;
  TE_OK(tecore_tensor_init(&tin, TECORE_DTYPE_F32, 2, shape, in));
  TE_OK(tecore_tensor_init(&tout, TECORE_DTYPE_E4M3, 2, shape, q));
  tout.columnwise_data = qt;
  tout.scaling = TECORE_SCALING_DELAYED;
  tout.scale = f;
  tout.scale_inv = f + 4;
  TE_OK(tecore_tensor_init(&tdb, TECORE_DTYPE_F32, 1, &shape[1], db));
  TE_OK(tecore_cast_transpose_dbias_workspace_size(&tin, &wsb));
  tecore_devptr_t ws = te_dalloc(wsb);
  for (int run = 0; run < 2; run++) {
    te_poison_dev(db, cols * 4);
    TE_OK(tecore_cast_transpose_dbias(&tin, &tout, &tdb, ws, wsb, te_stream));
    te_d2h(run ? o2 : o1, db, cols * 4);
  }
  te_expect_mem_eq(o2, o1, cols * 4, "dbias of the second run");
  tecore_devptr_t bufs[] = {in, q, qt, f, db, ws};
  for (size_t i = 0; i < 6; i++) TE_OK(tecore_mem_free(bufs[i]));
  free(h);
  free(o1);
  free(o2);
}
END_TEST

START_TEST(empty_input) {
  /* 0 rows: nothing to cast, dbias becomes 0 */
  size_t shape[2] = {0, 40}, cols = 40, wsb = 1;
  tecore_devptr_t db = te_dalloc(cols * 2), f = te_dalloc(16), q = te_dalloc(16);
  te_poison_dev(db, cols * 2);
  float one = 1.0f;
  te_h2d(f, &one, 4);
  struct tecore_tensor tin, tout, tdb;
  TE_OK(tecore_tensor_init(&tin, TECORE_DTYPE_BF16, 2, shape, 0));
  TE_OK(tecore_tensor_init(&tout, TECORE_DTYPE_E4M3, 2, shape, q));
  tout.scaling = TECORE_SCALING_DELAYED;
  tout.scale = f;
  tout.scale_inv = f + 4;
  TE_OK(tecore_tensor_init(&tdb, TECORE_DTYPE_BF16, 1, &cols, db));
  TE_OK(tecore_cast_transpose_dbias_workspace_size(&tin, &wsb));
  ck_assert_uint_eq(wsb, 0);
  TE_OK(tecore_cast_transpose_dbias(&tin, &tout, &tdb, 0, 0, te_stream));
  TE_OK(tecore_cast_transpose(&tin, &tout, te_stream));
  uint16_t h[40];
  te_d2h(h, db, sizeof h);
  te_expect_bytes_eq(h, 0, sizeof h, "dbias of an empty input");
  TE_OK(tecore_mem_free(db));
  TE_OK(tecore_mem_free(f));
  TE_OK(tecore_mem_free(q));
}
END_TEST

START_TEST(argument_checks) {
  size_t shape[2] = {64, 32}, tshape[2] = {32, 64}, cols = 32, wsb;
  tecore_devptr_t buf = te_dalloc(1 << 16);
  tecore_devptr_t in = buf, q = buf + 8192, qt = buf + 12288, f = buf + 16384, db = buf + 16448,
                  ws = buf + 20480;
  struct tecore_tensor tin, tx, tout, tdb, t;
  TE_OK(tecore_tensor_init(&tin, TECORE_DTYPE_BF16, 2, shape, in));
  TE_OK(tecore_tensor_init(&tx, TECORE_DTYPE_BF16, 2, shape, buf + 4096));
  TE_OK(tecore_tensor_init(&tout, TECORE_DTYPE_E4M3, 2, shape, q));
  tout.columnwise_data = qt;
  tout.scaling = TECORE_SCALING_DELAYED;
  tout.scale = f;
  tout.scale_inv = f + 4;
  TE_OK(tecore_tensor_init(&tdb, TECORE_DTYPE_F32, 1, &cols, db));
  TE_OK(tecore_cast_transpose_dbias_workspace_size(&tin, &wsb));
  ck_assert(wsb > 0 && wsb <= 65536 - 20480);
  TE_OK(tecore_cast_transpose(&tin, &tout, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));

  TE_EXPECT_INVALID("in", tecore_cast_transpose(NULL, &tout, te_stream));
  TE_EXPECT_INVALID("out", tecore_cast_transpose(&tin, NULL, te_stream));
  t = tin;
  t.dtype = TECORE_DTYPE_E4M3;
  TE_EXPECT_INVALID("in", tecore_cast_transpose(&t, &tout, te_stream));
  t = tin;
  t.data = in + 1;   /* misaligned for bf16 */
  TE_EXPECT_INVALID("data", tecore_cast_transpose(&t, &tout, te_stream));
  t = tout;
  t.scaling = TECORE_SCALING_NONE;
  TE_EXPECT_INVALID("out", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.dtype = TECORE_DTYPE_BF16;
  TE_EXPECT_INVALID("out", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.scale = 0;
  TE_EXPECT_INVALID("scale", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.scale_inv = 0;
  TE_EXPECT_INVALID("scale_inv", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.data = 0;
  t.columnwise_data = 0;
  TE_EXPECT_INVALID("out", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  memcpy(t.shape, tshape, sizeof tshape);
  TE_EXPECT_INVALID("2-D view", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.scaling = TECORE_SCALING_CURRENT;   /* needs amax */
  TE_EXPECT_INVALID("amax", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.scaling = TECORE_SCALING_MXFP8;     /* needs E8M0 scales for both */
  t.columnwise_scale_inv = 0;
  TE_EXPECT_INVALID("columnwise_scale_inv", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.scaling = TECORE_SCALING_BLOCK_1X128;
  t.columnwise_scale_inv = f + 8;
  TE_EXPECT_ERR(TECORE_ERR_NOT_SUPPORTED, "block", tecore_cast_transpose(&tin, &t, te_stream));
  t = tout;
  t.data = in;   /* output over the input */
  TE_EXPECT_INVALID("overlaps", tecore_cast_transpose(&tin, &t, te_stream));

  /* dbias */
  TE_EXPECT_INVALID("dbias", tecore_cast_transpose_dbias(&tin, &tout, NULL, ws, wsb, te_stream));
  TE_EXPECT_INVALID("workspace", tecore_cast_transpose_dbias(&tin, &tout, &tdb, 0, wsb, te_stream));
  TE_EXPECT_INVALID("workspace_bytes",
                    tecore_cast_transpose_dbias(&tin, &tout, &tdb, ws, wsb - 4, te_stream));
  TE_EXPECT_INVALID("workspace",
                    tecore_cast_transpose_dbias(&tin, &tout, &tdb, ws + 2, wsb, te_stream));
  t = tdb;
  t.shape[0] = cols + 1;
  TE_EXPECT_INVALID("dbias", tecore_cast_transpose_dbias(&tin, &tout, &t, ws, wsb, te_stream));
  t = tdb;
  t.dtype = TECORE_DTYPE_E5M2;
  TE_EXPECT_INVALID("dbias", tecore_cast_transpose_dbias(&tin, &tout, &t, ws, wsb, te_stream));
  t = tdb;
  t.data = q;   /* dbias over the rowwise output */
  TE_EXPECT_INVALID("overlaps", tecore_cast_transpose_dbias(&tin, &tout, &t, ws, wsb, te_stream));
  TE_EXPECT_INVALID("bytes", tecore_cast_transpose_dbias_workspace_size(&tin, NULL));
  TE_EXPECT_INVALID("in", tecore_cast_transpose_dbias_workspace_size(NULL, &wsb));

  /* dact */
  TE_EXPECT_INVALID("act", tecore_dact_dbias_cast_transpose(TECORE_ACT_SWIGLU, &tin, &tx, &tout,
                                                            &tdb, ws, wsb, te_stream));
  TE_EXPECT_INVALID("act", tecore_dact_dbias_cast_transpose((tecore_activation_t)99, &tin, &tx,
                                                            &tout, &tdb, ws, wsb, te_stream));
  TE_EXPECT_INVALID("x", tecore_dact_dbias_cast_transpose(TECORE_ACT_GELU, &tin, NULL, &tout,
                                                          &tdb, ws, wsb, te_stream));
  TE_EXPECT_INVALID("dy", tecore_dact_dbias_cast_transpose(TECORE_ACT_GELU, NULL, &tx, &tout,
                                                           &tdb, ws, wsb, te_stream));
  t = tx;
  t.dtype = TECORE_DTYPE_F16;
  TE_EXPECT_INVALID("x", tecore_dact_dbias_cast_transpose(TECORE_ACT_GELU, &tin, &t, &tout,
                                                          &tdb, ws, wsb, te_stream));
  t = tx;
  memcpy(t.shape, tshape, sizeof tshape);
  TE_EXPECT_INVALID("x", tecore_dact_dbias_cast_transpose(TECORE_ACT_GELU, &tin, &t, &tout,
                                                          &tdb, ws, wsb, te_stream));
  TE_OK(tecore_dact_dbias_cast_transpose(TECORE_ACT_SILU, &tin, &tx, &tout, NULL, 0, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(buf));
}
END_TEST


/* ---- the byte transpose (te_ct_byte_transpose) -------------------------------
 * libtecore's internal columnwise copy of a rowwise-only FP8 tensor
 * (ops_linear.c), launched here through the kernel table: out [cols][rows]
 * must be in^T byte for byte (codes copied, never converted), for any
 * shape, 16-byte aligned (vector paths) or not (element paths), whatever
 * the grid (the blocks stride over the tiles), with the guard bytes
 * around the output untouched. */
static void byte_transpose_case(size_t rows, size_t cols, size_t off, unsigned gx, unsigned gy) {
  const size_t n = rows * cols;
  int id = -1;
  TE_OK(tecore_kernel_find("te_ct_byte_transpose", &id));
  tecore_devptr_t in = te_dalloc(n + 16), out = te_dalloc(n + 2 * GUARD + 16);
  uint8_t *h = malloc(n), *got = malloc(n + 2 * GUARD);
  ck_assert(h && got);
  te_rand_bytes(h, n);
  te_h2d(in + off, h, n);
  te_poison_dev(out, n + 2 * GUARD + 16);
  const tecore_devptr_t o = out + GUARD + off;
  if (!gx) gx = (unsigned)((cols + 63) / 64);
  if (!gy) gy = (unsigned)((rows + 63) / 64);
  struct tecore_launch_cfg cfg = {.grid = {gx, gy, 1}, .block = {256, 1, 1}};
  const void *pin = (const void *)(uintptr_t)(in + off);
  void *pout = (void *)(uintptr_t)o;
  unsigned long long r = rows, c = cols;
  void *args[] = {&pin, &pout, &r, &c};
  TE_OK(tecore_kernel_launch(id, &cfg, args, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, o - GUARD, n + 2 * GUARD);
  te_expect_bytes_eq(got, TE_POISON_BYTE, GUARD, "byte transpose: guard before out");
  te_expect_bytes_eq(got + GUARD + n, TE_POISON_BYTE, GUARD, "byte transpose: guard after out");
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < cols; j++)
      if (got[GUARD + j * rows + i] != h[i * cols + j])
        ck_abort_msg("byte transpose %zux%zu (offset %zu, grid %ux%u): out[%zu][%zu] = 0x%02x, "
                     "in[%zu][%zu] = 0x%02x",
                     rows, cols, off, gx, gy, j, i, got[GUARD + j * rows + i], i, j,
                     h[i * cols + j]);
  free(h);
  free(got);
  TE_OK(tecore_mem_free(in));
  TE_OK(tecore_mem_free(out));
}

START_TEST(byte_transpose_shapes) {
  static const size_t bt[][2] = {{1, 1},   {1, 4099}, {4099, 1}, {17, 4099}, {4096, 64},
                                 {64, 64}, {128, 96}, {65, 129}, {16, 48},   {33, 16}};
  for (size_t s = 0; s < sizeof bt / sizeof bt[0]; s++) {
    byte_transpose_case(bt[s][0], bt[s][1], 0, 0, 0);
    byte_transpose_case(bt[s][0], bt[s][1], 1 + s % 15, 0, 0);   /* element paths */
  }
}
END_TEST

START_TEST(byte_transpose_any_grid) {
  /* fewer blocks than tiles: each block strides over several */
  byte_transpose_case(200, 330, 0, 1, 1);
  byte_transpose_case(200, 330, 0, 2, 3);
  byte_transpose_case(4096, 64, 0, 1, 5);
  byte_transpose_case(97, 4099, 3, 7, 1);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("transpose");
  tcase_add_test(te_tcase(s, "reference", 0), reference_self_check);
  TCase *tc = te_tcase(s, "cast_transpose", 1);
  tcase_add_test(tc, cast_transpose_delayed);
  tcase_add_test(tc, cast_transpose_misaligned);
  tcase_add_test(tc, cast_transpose_one_output);
  tcase_add_test(tc, cast_transpose_current);
  tcase_add_test(tc, cast_transpose_mxfp8);
  tcase_add_test(tc, cast_transpose_specials);
  tc = te_tcase(s, "dbias", 1);
  tcase_add_test(tc, cast_transpose_dbias);
  tcase_add_test(tc, cast_transpose_dbias_many_blocks);
  tcase_add_test(tc, dbias_deterministic);
  tcase_add_test(tc, empty_input);
  tc = te_tcase(s, "dact", 1);
  tcase_add_test(tc, dact_dbias_cast_transpose);
  tcase_add_test(tc, dact_current);
  tc = te_tcase(s, "args", 1);
  tcase_add_test(tc, argument_checks);
  tc = te_tcase(s, "byte_transpose", 1);
  tcase_add_test(tc, byte_transpose_shapes);
  tcase_add_test(tc, byte_transpose_any_grid);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
