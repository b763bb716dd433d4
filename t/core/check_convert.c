/* SPDX-License-Identifier: Apache-2.0
 * check_convert.c -- the host conversions of te/convert.h against
 *   - an independent float64 rule, written here from the formats'
 *     definitions (sign, exponent, mantissa; round to nearest even on an
 *     unbounded exponent range, then the format's overflow rule), not from
 *     the integer code the library shares with the kernels;
 *   - the kernels themselves: the quantize kernel's E4M3/E5M2 bytes
 *     (DELAYED, scale 1), the dequantize kernel's floats for all 256 FP8
 *     codes, and BF16/F16 from the cast-transpose kernel's dbias (a column
 *     sum over one row is the value itself, rounded to dbias's dtype).
 * Decoding is exhaustive (all 2^16 BF16 and F16 codes, all 256 codes of
 * each FP8 format); encoding takes random floats of every class: random
 * bit patterns, each format's rounding ties and their neighbours, values
 * around each format's largest finite and smallest subnormal, float
 * subnormals, +-0, +-inf, NaNs of both signs with random payloads, +-FLT_MAX.
 * Tolerance: exact bits everywhere.  Kernel comparisons treat any NaN as
 * matching any NaN for BF16/F16, whose path goes through a float sum (a
 * GPU returns the canonical NaN there); FP8 NaN is one code, compared
 * exactly.  The array forms must equal the scalar forms, leave poisoned
 * memory past n alone, and refuse NULL and overlapping arguments. */
#include "tests.h"
#include <float.h>
#include <te/convert.h>

/* ---- the float64 reference ---------------------------------------------------
 * A binary format: mbits fraction bits, exponent bias, the largest biased
 * exponent of a finite value and the largest finite value, and what
 * overflow does. */
struct fmt {
  const char *name;
  int bits, ebits, mbits, bias;
  double max;          /* largest finite */
  int saturate;        /* 1: past max -> max (FP8 satfinite); 0: -> infinity */
  int has_inf;         /* the all-ones exponent with mantissa 0 is infinity */
  int e4m3_nan;        /* E4M3: only S.1111.111 is NaN; other all-ones codes are values */
};
static const struct fmt F_BF16 = {"bf16", 16, 8, 7, 127, 0, 0, 1, 0};
static const struct fmt F_F16 = {"f16", 16, 5, 10, 15, 65504.0, 0, 1, 0};
static const struct fmt F_E4M3 = {"e4m3", 8, 4, 3, 7, 448.0, 1, 0, 1};
static const struct fmt F_E5M2 = {"e5m2", 8, 5, 2, 15, 57344.0, 1, 1, 0};

static double fmt_max(const struct fmt *f) {
  if (f->max > 0) return f->max;
  /* bf16: (2 - 2^-mbits) * 2^(emax) with emax = 2^ebits - 2 - bias */
  return (2.0 - ldexp(1.0, -f->mbits)) * ldexp(1.0, (1 << f->ebits) - 2 - f->bias);
}

/* The value of code c (NaN for NaN codes), from its fields. */
static double ref_decode(const struct fmt *f, uint32_t c) {
  uint32_t sign = c >> (f->bits - 1) & 1u;
  uint32_t e = c >> f->mbits & ((1u << f->ebits) - 1u);
  uint32_t m = c & ((1u << f->mbits) - 1u);
  uint32_t eall = (1u << f->ebits) - 1u;
  double v;
  if (f->e4m3_nan && e == eall && m == ((1u << f->mbits) - 1u)) return NAN;
  if (!f->e4m3_nan && e == eall) {
    if (m != 0 || !f->has_inf) return NAN;
    v = INFINITY;
  } else if (e == 0) {
    v = ldexp((double)m, 1 - f->bias - f->mbits);
  } else {
    v = ldexp(1.0 + ldexp((double)m, -f->mbits), (int)e - f->bias);
  }
  return sign ? -v : v;
}

/* x rounded to the format (nearest even; subnormals on the fixed grid of
 * the smallest exponent), then overflow as the format says.  NaN -> NaN. */
static double ref_round(const struct fmt *f, double x) {
  if (isnan(x)) return NAN;
  double a = fabs(x), r;
  if (isinf(a)) {
    r = f->saturate ? fmt_max(f) : INFINITY;
  } else if (a == 0) {
    r = 0;
  } else {
    int e;
    (void)frexp(a, &e);           /* a = m * 2^e, m in [0.5, 1) */
    e -= 1;                        /* a in [2^e, 2^(e+1)) */
    int emin = 1 - f->bias;
    if (e < emin) e = emin;
    double ulp = ldexp(1.0, e - f->mbits);
    double q = a / ulp;            /* exact: a has 24 significant bits */
    double fl = floor(q), frac = q - fl;
    if (frac > 0.5 || (frac == 0.5 && fmod(fl, 2.0) != 0)) fl += 1;
    r = fl * ulp;
    if (r > fmt_max(f)) r = f->saturate ? fmt_max(f) : INFINITY;
  }
  return signbit(x) ? -r : r;
}

/* The NaN code each encoder documents for NaN input u (float bits). */
static uint32_t nan_code(const struct fmt *f, uint32_t u) {
  if (f == &F_BF16) return (u >> 16) | 0x40u;
  if (f == &F_F16) return ((u >> 16) & 0x8000u) | 0x7e00u;
  return 0x7fu;
}

static uint32_t enc(const struct fmt *f, float x) {
  if (f == &F_BF16) return tecore_f32_to_bf16(x);
  if (f == &F_F16) return tecore_f32_to_f16(x);
  if (f == &F_E4M3) return tecore_f32_to_e4m3(x);
  return tecore_f32_to_e5m2(x);
}
static float dec(const struct fmt *f, uint32_t c) {
  if (f == &F_BF16) return tecore_bf16_to_f32((uint16_t)c);
  if (f == &F_F16) return tecore_f16_to_f32((uint16_t)c);
  if (f == &F_E4M3) return tecore_e4m3_to_f32((uint8_t)c);
  return tecore_e5m2_to_f32((uint8_t)c);
}

/* ---- decoding: every code ---------------------------------------------------- */

static void decode_all(const struct fmt *f) {
  uint32_t ncodes = 1u << f->bits;
  for (uint32_t c = 0; c < ncodes; c++) {
    float got = dec(f, c);
    double want = ref_decode(f, c);
    uint32_t gb = te_f32_bits_of(got);
    if (isnan(want)) {
      ck_assert_msg(isnan(got), "%s 0x%x: got %g, want NaN", f->name, c, (double)got);
      uint32_t sign = (c >> (f->bits - 1)) << 31;
      uint32_t wb = f == &F_BF16  ? c << 16   /* payload kept */
                    : f == &F_F16 ? sign | 0x7f800000u | ((c & 0x3ffu) << 13)
                                  : sign | 0x7fc00000u;
      ck_assert_msg(gb == wb, "%s NaN 0x%x: got 0x%08x, want 0x%08x", f->name, c, gb, wb);
      continue;
    }
    uint32_t wb = te_f32_bits_of((float)want);   /* exact: every code fits a float */
    ck_assert_msg((double)(float)want == want, "%s 0x%x: reference %a not a float", f->name, c,
                  want);
    ck_assert_msg(gb == wb, "%s 0x%x: got 0x%08x (%a), want 0x%08x (%a)", f->name, c, gb,
                  (double)got, wb, want);
  }
  /* the array form, on poisoned floats with a guard element past n */
  size_t esz = f->bits / 8;
  unsigned char *in = malloc(ncodes * esz);
  float *out = malloc((ncodes + 1) * sizeof(float));
  for (uint32_t c = 0; c < ncodes; c++) {
    if (esz == 2) ((uint16_t *)in)[c] = (uint16_t)c;
    else in[c] = (unsigned char)c;
  }
  te_poison_host_nan(out, ncodes + 1);
  if (f == &F_BF16) TE_OK(tecore_cvt_bf16_to_f32((uint16_t *)in, out, ncodes));
  if (f == &F_F16) TE_OK(tecore_cvt_f16_to_f32((uint16_t *)in, out, ncodes));
  if (f == &F_E4M3) TE_OK(tecore_cvt_e4m3_to_f32(in, out, ncodes));
  if (f == &F_E5M2) TE_OK(tecore_cvt_e5m2_to_f32(in, out, ncodes));
  for (uint32_t c = 0; c < ncodes; c++) {
    uint32_t g = te_f32_bits_of(out[c]), w = te_f32_bits_of(dec(f, c));
    ck_assert_msg(g == w, "%s array[%u]: 0x%08x, scalar 0x%08x", f->name, c, g, w);
  }
  ck_assert_msg(te_f32_bits_of(out[ncodes]) == TE_NAN_F32_BITS, "%s: array wrote past n",
                f->name);
  free(in);
  free(out);
}

START_TEST(bf16_decode_all_codes) { decode_all(&F_BF16); }
END_TEST
START_TEST(f16_decode_all_codes) { decode_all(&F_F16); }
END_TEST
START_TEST(e4m3_decode_all_codes) { decode_all(&F_E4M3); }
END_TEST
START_TEST(e5m2_decode_all_codes) { decode_all(&F_E5M2); }
END_TEST

/* ---- encoding: random floats of every class ----------------------------------- */

/* A random code of the format that is a finite value. */
static double random_finite_value(const struct fmt *f) {
  for (;;) {
    uint32_t c = (uint32_t)te_rand_below(1u << f->bits);
    double v = ref_decode(f, c);
    if (!isnan(v) && !isinf(v)) return v;
  }
}

/* n floats: a share of each class (see the file comment). */
static float *make_inputs(size_t n) {
  const struct fmt *fs[4] = {&F_BF16, &F_F16, &F_E4M3, &F_E5M2};
  float *x = malloc(n * sizeof *x);
  for (size_t i = 0; i < n; i++) {
    const struct fmt *f = fs[te_rand_below(4)];
    float v;
    switch (te_rand_below(10)) {
    case 0: case 1: /* any bit pattern */
      v = te_f32_from_bits(te_rand_u32());
      break;
    case 2: case 3: case 4: { /* a tie between two neighbours of f, or one float ulp off it */
      double a = random_finite_value(f);
      int e;
      (void)frexp(fabs(a) > 0 ? fabs(a) : 1e-30, &e);
      e -= 1;
      if (e < 1 - f->bias) e = 1 - f->bias;
      double tie = a + copysign(ldexp(1.0, e - f->mbits - 1), a == 0 ? 1.0 : a);
      v = (float)tie;
      int k = (int)te_rand_below(3) - 1;
      if (k) v = nextafterf(v, k > 0 ? INFINITY : -INFINITY);
      break;
    }
    case 5: { /* around the largest finite and the overflow point */
      double m = fmt_max(f), up = m + ldexp(m, -f->mbits - 1);
      double pick[4] = {m, up, up * 1.5, m * 0.999};
      v = (float)pick[te_rand_below(4)];
      if (isinf(v)) v = FLT_MAX;
      v = nextafterf(v, te_rand_below(2) ? INFINITY : 0.0f);
      if (te_rand_below(2)) v = -v;
      break;
    }
    case 6: { /* around the format's smallest subnormal and half of it */
      double s = ldexp(1.0, 1 - f->bias - f->mbits);
      double pick[4] = {s, s / 2, s * 1.5, s * 0.75};
      v = (float)pick[te_rand_below(4)];
      v = nextafterf(v, te_rand_below(2) ? INFINITY : 0.0f);
      if (te_rand_below(2)) v = -v;
      break;
    }
    case 7: /* a float subnormal */
      v = te_f32_from_bits((te_rand_u32() & 0x807fffffu) | 1u);
      break;
    case 8: { /* specials */
      float sp[6] = {0.0f, -0.0f, INFINITY, -INFINITY, FLT_MAX, -FLT_MAX};
      v = sp[te_rand_below(6)];
      break;
    }
    default: /* NaN, either sign, random payload */
      v = te_f32_from_bits(0x7f800001u | (te_rand_u32() & 0x803fffffu) |
                           (te_rand_below(2) ? 0x00400000u : 0));
      break;
    }
    x[i] = v;
  }
  return x;
}

/* The reference's code for x: NaN by the documented rule, otherwise the
 * encoding of the rounded value, found by decoding (every code's value is
 * checked exhaustively above). */
static void expect_encoding(const struct fmt *f, float x, uint32_t got, const char *who) {
  uint32_t u = te_f32_bits_of(x);
  if (isnan(x)) {
    ck_assert_msg(got == nan_code(f, u), "%s %s(NaN 0x%08x) = 0x%x, want 0x%x", who, f->name, u,
                  got, nan_code(f, u));
    return;
  }
  double want = ref_round(f, (double)x);
  double g = ref_decode(f, got);
  ck_assert_msg(!isnan(g) && g == want && signbit(g) == signbit(want),
                "%s %s(%a = 0x%08x) = 0x%x (%a), want %a; tolerance: exact", who, f->name,
                (double)x, u, got, g, want);
}

static void encode_random(const struct fmt *f) {
  size_t n = 1u << 16;
  float *x = make_inputs(n);
  for (size_t i = 0; i < n; i++) expect_encoding(f, x[i], enc(f, x[i]), "scalar");
  /* the array form: equal to the scalar form, nothing written past n */
  size_t esz = f->bits / 8;
  unsigned char *out = malloc((n + 1) * esz);
  te_poison_host(out, (n + 1) * esz);
  if (f == &F_BF16) TE_OK(tecore_cvt_f32_to_bf16(x, (uint16_t *)out, n));
  if (f == &F_F16) TE_OK(tecore_cvt_f32_to_f16(x, (uint16_t *)out, n));
  if (f == &F_E4M3) TE_OK(tecore_cvt_f32_to_e4m3(x, out, n));
  if (f == &F_E5M2) TE_OK(tecore_cvt_f32_to_e5m2(x, out, n));
  for (size_t i = 0; i < n; i++) {
    uint32_t g = esz == 2 ? ((uint16_t *)out)[i] : out[i];
    ck_assert_msg(g == enc(f, x[i]), "%s array[%zu] 0x%x != scalar 0x%x", f->name, i, g,
                  enc(f, x[i]));
  }
  te_expect_bytes_eq(out + n * esz, TE_POISON_BYTE, esz, "past n");
  free(out);
  free(x);
}

START_TEST(bf16_encode_random_vs_reference) { encode_random(&F_BF16); }
END_TEST
START_TEST(f16_encode_random_vs_reference) { encode_random(&F_F16); }
END_TEST
START_TEST(e4m3_encode_random_vs_reference) { encode_random(&F_E4M3); }
END_TEST
START_TEST(e5m2_encode_random_vs_reference) { encode_random(&F_E5M2); }
END_TEST

/* ---- against the kernels ----------------------------------------------------------- */

/* The quantize kernel's bytes for x (DELAYED, scale 1: q = fp8(x * 1)). */
static void kernel_fp8(const float *x, size_t n, tecore_dtype_t dt, uint8_t *q) {
  tecore_devptr_t dx = te_dalloc(n * 4), dq = te_dalloc(n), ds = te_dalloc(16);
  te_h2d(dx, x, n * 4);
  te_poison_dev(dq, n);
  float sc[4] = {0.0f, 1.0f, 0.0f, 0.0f};   /* amax, scale, scale_inv */
  te_h2d(ds, sc, sizeof sc);
  size_t shape[2] = {n / 256, 256};
  struct tecore_tensor in, out;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, dx));
  TE_OK(tecore_tensor_init(&out, dt, 2, shape, dq));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = ds + 4;
  out.scale_inv = ds + 8;
  TE_OK(tecore_quantize(&in, &out, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(q, dq, n);
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dq));
  TE_OK(tecore_mem_free(ds));
}

START_TEST(fp8_encode_matches_quantize_kernel) {
  size_t n = 1u << 14;
  float *x = make_inputs(n);
  uint8_t *q = malloc(n), *h = malloc(n);
  const tecore_dtype_t dts[2] = {TECORE_DTYPE_E4M3, TECORE_DTYPE_E5M2};
  for (int k = 0; k < 2; k++) {
    kernel_fp8(x, n, dts[k], q);
    if (dts[k] == TECORE_DTYPE_E4M3) TE_OK(tecore_cvt_f32_to_e4m3(x, h, n));
    else TE_OK(tecore_cvt_f32_to_e5m2(x, h, n));
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(h[i] == q[i], "%s(%a = 0x%08x): host 0x%02x, quantize kernel 0x%02x",
                    tecore_dtype_name(dts[k]), (double)x[i], te_f32_bits_of(x[i]), h[i], q[i]);
  }
  free(q);
  free(h);
  free(x);
}
END_TEST

/* BF16 / F16 of x from the cast-transpose kernel: dbias of a [1][n] input
 * is each value summed from +0, rounded to dbias's dtype.  (-0 + +0 is +0,
 * so -0 inputs are left out of this comparison; the reference covers them.) */
static void kernel_half(const float *x, size_t n, tecore_dtype_t dt, uint16_t *h) {
  tecore_devptr_t dx = te_dalloc(n * 4), dq = te_dalloc(n), ds = te_dalloc(16),
                  db = te_dalloc(n * 2);
  te_h2d(dx, x, n * 4);
  te_poison_dev(db, n * 2);
  float sc[4] = {0.0f, 1.0f, 0.0f, 0.0f};
  te_h2d(ds, sc, sizeof sc);
  size_t shape[2] = {1, n}, dshape[1] = {n};
  struct tecore_tensor in, out, dbias;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, dx));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 2, shape, dq));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = ds + 4;
  out.scale_inv = ds + 8;
  TE_OK(tecore_tensor_init(&dbias, dt, 1, dshape, db));
  size_t wsb = 0;
  TE_OK(tecore_cast_transpose_dbias_workspace_size(&in, &wsb));
  tecore_devptr_t ws = te_dalloc(wsb ? wsb : 4);
  TE_OK(tecore_cast_transpose_dbias(&in, &out, &dbias, ws, wsb, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(h, db, n * 2);
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dq));
  TE_OK(tecore_mem_free(ds));
  TE_OK(tecore_mem_free(db));
  TE_OK(tecore_mem_free(ws));
}

START_TEST(half_encode_matches_dbias_kernel) {
  size_t n = 1u << 13;
  float *x = make_inputs(n);
  for (size_t i = 0; i < n; i++)
    if (te_f32_bits_of(x[i]) == 0x80000000u) x[i] = 0.0f;
  uint16_t *k16 = malloc(n * 2), *h16 = malloc(n * 2);
  kernel_half(x, n, TECORE_DTYPE_BF16, k16);
  TE_OK(tecore_cvt_f32_to_bf16(x, h16, n));
  te_expect_half_bits(k16, h16, n, 8, tecore_bf16_to_f32, "bf16: dbias kernel vs host");
  kernel_half(x, n, TECORE_DTYPE_F16, k16);
  TE_OK(tecore_cvt_f32_to_f16(x, h16, n));
  te_expect_half_bits(k16, h16, n, 5, tecore_f16_to_f32, "f16: dbias kernel vs host");
  free(k16);
  free(h16);
  free(x);
}
END_TEST

/* All 256 codes through the dequantize kernel (scale_inv 1) into F32. */
START_TEST(fp8_decode_matches_dequantize_kernel) {
  const tecore_dtype_t dts[2] = {TECORE_DTYPE_E4M3, TECORE_DTYPE_E5M2};
  uint8_t codes[256];
  for (int c = 0; c < 256; c++) codes[c] = (uint8_t)c;
  for (int k = 0; k < 2; k++) {
    tecore_devptr_t dq = te_dalloc(256), dy = te_dalloc(1024), ds = te_dalloc(4);
    te_h2d(dq, codes, 256);
    te_poison_dev_nan(dy, 256);
    float one = 1.0f;
    te_h2d(ds, &one, 4);
    size_t shape[2] = {1, 256};
    struct tecore_tensor in, out;
    TE_OK(tecore_tensor_init(&in, dts[k], 2, shape, dq));
    in.scaling = TECORE_SCALING_DELAYED;
    in.scale_inv = ds;
    TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_F32, 2, shape, dy));
    TE_OK(tecore_dequantize(&in, &out, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    float got[256], host[256];
    te_d2h(got, dy, sizeof got);
    if (dts[k] == TECORE_DTYPE_E4M3) TE_OK(tecore_cvt_e4m3_to_f32(codes, host, 256));
    else TE_OK(tecore_cvt_e5m2_to_f32(codes, host, 256));
    te_expect_f32_bits(got, host, 256, tecore_dtype_name(dts[k]));
    TE_OK(tecore_mem_free(dq));
    TE_OK(tecore_mem_free(dy));
    TE_OK(tecore_mem_free(ds));
  }
}
END_TEST

/* ---- arguments ------------------------------------------------------------------ */

START_TEST(array_args_are_checked) {
  float f[8];
  uint16_t h[8];
  uint8_t b[8];
  te_poison_host(h, sizeof h);
  TE_OK(tecore_cvt_f32_to_bf16(NULL, NULL, 0));   /* n = 0: nothing to do */
  TE_EXPECT_INVALID("in is NULL", tecore_cvt_f32_to_bf16(NULL, h, 4));
  TE_EXPECT_INVALID("out is NULL", tecore_cvt_f32_to_f16(f, NULL, 4));
  TE_EXPECT_INVALID("in is NULL", tecore_cvt_e4m3_to_f32(NULL, f, 1));
  TE_EXPECT_INVALID("out is NULL", tecore_cvt_f32_to_e5m2(f, NULL, 1));
  te_expect_bytes_eq(h, TE_POISON_BYTE, sizeof h, "h after refused calls");
  /* overlapping ranges: in place, and partly */
  TE_EXPECT_INVALID("overlap", tecore_cvt_f32_to_bf16(f, (uint16_t *)(void *)f, 8));
  TE_EXPECT_INVALID("overlap", tecore_cvt_bf16_to_f32(h, (float *)(void *)(h + 1), 2));
  TE_EXPECT_INVALID("overlap", tecore_cvt_e5m2_to_f32(b + 3, (float *)(void *)b, 2));
  TE_EXPECT_INVALID("overflow", tecore_cvt_f32_to_e4m3(f, b, SIZE_MAX / 2));
  /* adjacent is fine */
  for (int i = 0; i < 4; i++) f[i] = (float)i - 1.5f;
  TE_OK(tecore_cvt_f32_to_bf16(f, (uint16_t *)(void *)(f + 4), 4));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("convert");
  TCase *tc = te_tcase(s, "decode", 0);
  tcase_add_test(tc, bf16_decode_all_codes);
  tcase_add_test(tc, f16_decode_all_codes);
  tcase_add_test(tc, e4m3_decode_all_codes);
  tcase_add_test(tc, e5m2_decode_all_codes);
  tc = te_tcase(s, "encode", 0);
  tcase_add_test(tc, bf16_encode_random_vs_reference);
  tcase_add_test(tc, f16_encode_random_vs_reference);
  tcase_add_test(tc, e4m3_encode_random_vs_reference);
  tcase_add_test(tc, e5m2_encode_random_vs_reference);
  tc = te_tcase(s, "kernels", 1);
  tcase_add_test(tc, fp8_encode_matches_quantize_kernel);
  tcase_add_test(tc, half_encode_matches_dbias_kernel);
  tcase_add_test(tc, fp8_decode_matches_dequantize_kernel);
  tc = te_tcase(s, "args", 0);
  tcase_add_test(tc, array_args_are_checked);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
