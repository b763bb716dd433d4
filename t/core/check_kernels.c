/* SPDX-License-Identifier: Apache-2.0 */
/* check_kernels.c -- tecore_fill, tecore_fill_uniform and tecore_scale_add
 * (te/elementwise.h) against a host reference:
 *   - f32 bit for bit; f16 and bf16 bit for bit against the rounding this
 *     file implements on its own (round to nearest, ties to even, done in
 *     double arithmetic with nearbyint, independent of kernels/common);
 *   - sizes 1, 7, 1000003 and a random one, with poisoned guard elements
 *     after the end that must stay untouched;
 *   - special values: ties, subnormals, overflow to infinity, -0, inf, NaN
 *     (a NaN matches any NaN: payloads differ between CPU and GPU);
 *   - dst aliasing a or b;
 *   - the same launches captured into a graph give the same bits.
 * fill_uniform's reference draws with t/lib/rng.h's splitmix64 (stepped
 * draw by draw for small offsets) and rounds double -> float -> dtype with
 * the conversions above; splits of a range by offset give the same bits,
 * and bad arguments write nothing.
 * scale_add's reference is fmaf(alpha, a, beta * b) in float: one rounding
 * for beta*b and one for the fused multiply-add. */
#include "tests.h"

#define GUARD 64 /* poisoned elements after each output */

/* ---- the reference conversions ---- */

static float ref_f16_to_f32(uint16_t h) {
  int e = (h >> 10) & 31, m = h & 1023;
  double v;
  if (e == 31) v = m ? NAN : INFINITY;
  else if (e == 0) v = ldexp(m, -24);
  else v = ldexp(1024 + m, e - 25);
  return (float)((h & 0x8000) ? -v : v);
}
static float ref_bf16_to_f32(uint16_t h) { return te_f32_from_bits((uint32_t)h << 16); }

/* Rounds |x| (finite, > 0) to a multiple of 2^(max(exp(x), min_exp) - mant_bits),
 * ties to even: the value of x in a format with mant_bits stored bits. */
static double ref_round(double a, int min_exp, int mant_bits) {
  int e;
  frexp(a, &e); /* a in [2^(e-1), 2^e) */
  int exp = e - 1 < min_exp ? min_exp : e - 1;
  double q = ldexp(1.0, exp - mant_bits);
  return nearbyint(a / q) * q; /* a / q is exact: a power-of-two scaling */
}

/* double -> f16, rounded once. */
static uint16_t ref_f16(double x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return 0x7e00;
  if (isinf(x)) return sign | 0x7c00;
  double a = fabs(x);
  if (a == 0) return sign;
  double r = ref_round(a, -14, 10);
  if (r >= 65536.0) return sign | 0x7c00;
  if (r < ldexp(1.0, -14)) return sign | (uint16_t)(r * ldexp(1.0, 24)); /* subnormal */
  int e;
  double m = frexp(r, &e); /* r = m * 2^e, m in [0.5, 1) */
  return (uint16_t)(sign | ((e - 1 + 15) << 10) | (uint16_t)((2 * m - 1) * 1024));
}

/* double -> bf16, rounded once. */
static uint16_t ref_bf16(double x) {
  uint16_t sign = signbit(x) ? 0x8000 : 0;
  if (isnan(x)) return 0x7fc0;
  if (isinf(x)) return sign | 0x7f80;
  double a = fabs(x);
  if (a == 0) return sign;
  double r = ref_round(a, -126, 7);
  if (r >= ldexp(1.0, 128)) return sign | 0x7f80;
  return (uint16_t)(sign | (te_f32_bits_of((float)r) >> 16)); /* r is exact in float */
}

START_TEST(reference_self_check) {
  /* known values, so the oracle itself is tested */
  ck_assert_uint_eq(ref_f16(1.0), 0x3c00);
  ck_assert_uint_eq(ref_f16(-2.0), 0xc000);
  ck_assert_uint_eq(ref_f16(65504.0), 0x7bff);
  ck_assert_uint_eq(ref_f16(65519.0), 0x7bff);
  ck_assert_uint_eq(ref_f16(65520.0), 0x7c00);
  ck_assert_uint_eq(ref_f16(ldexp(1, -24)), 0x0001);
  ck_assert_uint_eq(ref_f16(ldexp(1, -25)), 0x0000);      /* tie to even (0) */
  ck_assert_uint_eq(ref_f16(ldexp(3, -25)), 0x0002);      /* tie to even (2) */
  ck_assert_uint_eq(ref_f16(1.0 + ldexp(1, -11)), 0x3c00); /* tie to even */
  ck_assert_uint_eq(ref_f16(1.0 + ldexp(3, -11)), 0x3c02); /* tie to even (up) */
  ck_assert_uint_eq(ref_f16(ldexp(1, -14)), 0x0400);
  ck_assert_uint_eq(ref_f16(-0.0), 0x8000);
  ck_assert_uint_eq(ref_f16(0.1), 0x2e66);
  ck_assert_uint_eq(ref_bf16(1.0), 0x3f80);
  ck_assert_uint_eq(ref_bf16(1.0 + ldexp(1, -8)), 0x3f80); /* tie to even */
  ck_assert_uint_eq(ref_bf16(1.0 + ldexp(3, -8)), 0x3f82);
  ck_assert_uint_eq(ref_bf16(3.0e38), 0x7f62);
  ck_assert_uint_eq(ref_bf16(3.4e38), 0x7f80);              /* above bf16's max: inf */
  ck_assert_uint_eq(ref_bf16(0.1), 0x3dcd);
  ck_assert_uint_eq(ref_bf16(ldexp(1, -133)), 0x0001);
  for (uint32_t h = 0; h < 0x10000; h++) {
    /* every finite f16 and bf16 converts to float and back unchanged */
    float f = ref_f16_to_f32((uint16_t)h);
    if (!isnan(f)) ck_assert_uint_eq(ref_f16(f), h);
    float b = ref_bf16_to_f32((uint16_t)h);
    if (!isnan(b)) ck_assert_uint_eq(ref_bf16(b), h);
  }
}
END_TEST

/* ---- inputs ---- */

/* Mostly moderate values, some raw bit patterns (subnormals, inf, NaN). */
static float rand_input_f32(void) {
  if (te_rand_below(10) == 0) return te_f32_from_bits(te_rand_u32());
  return te_rand_float(-1000.0f, 1000.0f);
}
static uint16_t rand_input_half(int bf16) {
  if (te_rand_below(5) == 0) return (uint16_t)te_rand_u32();
  float f = te_rand_float(-100.0f, 100.0f);
  return bf16 ? ref_bf16(f) : ref_f16(f);
}

/* Values fill must round right: ties, around overflow, subnormal, signs. */
static double special_value(tecore_dtype_t dt, int k) {
  switch (k) {
  case 0: return dt == TECORE_DTYPE_BF16 ? 1.0 + ldexp(1, -8) : 1.0 + ldexp(1, -11); /* ties */
  case 1: return dt == TECORE_DTYPE_BF16 ? 1.0 + ldexp(3, -8) : 1.0 + ldexp(3, -11);
  case 2: return dt == TECORE_DTYPE_F16 ? 65519.0 : 3.0e38;
  case 3: return dt == TECORE_DTYPE_F16 ? 65520.0 : 3.4e38;
  case 4: return dt == TECORE_DTYPE_F16 ? ldexp(3, -25) : ldexp(3, -134);
  case 5: return -0.0;
  case 6: return -INFINITY;
  case 7: return NAN;
  case 8: return 1.0e-45; /* float's smallest subnormal */
  default: return -te_rand_float(0.001f, 1000.0f);
  }
}
#define NSPECIAL 10

static size_t elem(tecore_dtype_t dt) { return dt == TECORE_DTYPE_F32 ? 4 : 2; }
static const char *dname(tecore_dtype_t dt) { return tecore_dtype_name(dt); }

/* Expected bits of float v stored as dt. */
static uint32_t store_bits(tecore_dtype_t dt, float v) {
  if (dt == TECORE_DTYPE_F32) return te_f32_bits_of(v);
  return dt == TECORE_DTYPE_F16 ? ref_f16(v) : ref_bf16(v);
}
static float load_val(tecore_dtype_t dt, const void *p, size_t i) {
  if (dt == TECORE_DTYPE_F32) return ((const float *)p)[i];
  uint16_t h = ((const uint16_t *)p)[i];
  return dt == TECORE_DTYPE_F16 ? ref_f16_to_f32(h) : ref_bf16_to_f32(h);
}

/* got vs want for n elements of dt, then GUARD poisoned elements. */
static void expect_elems(tecore_dtype_t dt, const void *got, const void *want, size_t n,
                         const char *what) {
  if (dt == TECORE_DTYPE_F32)
    te_expect_f32_bits(got, want, n, what);
  else if (dt == TECORE_DTYPE_F16)
    te_expect_half_bits(got, want, n, 5, ref_f16_to_f32, what);
  else
    te_expect_half_bits(got, want, n, 8, ref_bf16_to_f32, what);
  char g[160];
  snprintf(g, sizeof g, "%s: guard after the end", what);
  te_expect_bytes_eq((const unsigned char *)got + n * elem(dt), TE_POISON_BYTE, GUARD * elem(dt),
                     g);
}

static void put_elem(tecore_dtype_t dt, void *p, size_t i, uint32_t bits) {
  if (dt == TECORE_DTYPE_F32) memcpy((char *)p + 4 * i, &bits, 4);
  else ((uint16_t *)p)[i] = (uint16_t)bits;
}

static const tecore_dtype_t dtypes[] = {TECORE_DTYPE_F32, TECORE_DTYPE_F16, TECORE_DTYPE_BF16};

static size_t test_size(int k) {
  static const size_t fixed[] = {1, 7, 1000003};
  return k < 3 ? fixed[k] : 1 + te_rand_below(100000);
}

/* ---- fill ---- */

/* tecore_fill_uniform's element for generator state x after its draw. */
static uint32_t uniform_bits(tecore_dtype_t dt, uint64_t z, double bound) {
  double v = bound * ((double)(z >> 11) / 4503599627370496.0 - 1.0);   /* x / 2^52 - 1 */
  return store_bits(dt, (float)v);
}

/* n values at offset off after seed, bound b, against the reference; the
 * guard after them untouched */
static void fill_uniform_case(tecore_dtype_t dt, size_t n, double b, uint64_t seed, uint64_t off) {
  size_t bytes = (n + GUARD) * elem(dt);
  tecore_devptr_t d = te_dalloc(bytes);
  void *got = malloc(bytes), *want = malloc(n * elem(dt));
  te_poison_dev(d, bytes);
  TE_OK(tecore_fill_uniform(d, dt, n, b, seed, off, te_stream));
  uint64_t x = seed;
  if (off < 4096)
    for (uint64_t k = 0; k < off; k++) (void)te_splitmix64(&x);
  else
    x = seed + off * 0x9e3779b97f4a7c15ull;   /* the generator's state after off draws */
  for (size_t i = 0; i < n; i++) put_elem(dt, want, i, uniform_bits(dt, te_splitmix64(&x), b));
  te_poison_host(got, bytes);
  te_d2h(got, d, bytes);
  char what[160];
  snprintf(what, sizeof what, "fill_uniform %s n=%zu bound=%.17g seed=%llu offset=%llu",
           dname(dt), n, b, (unsigned long long)seed, (unsigned long long)off);
  expect_elems(dt, got, want, n, what);
  /* in [-b, b] (where dt holds b) */
  for (size_t i = 0; i < n && b < 60000; i++)
    ck_assert_msg(fabs((double)load_val(dt, got, i)) <= b * (1 + 1e-2), "%s: element %zu = %g",
                  what, i, (double)load_val(dt, got, i));
  TE_OK(tecore_mem_free(d));
  free(got);
  free(want);
}

START_TEST(fill_uniform_values) {
  for (size_t t = 0; t < 3; t++)
    for (int k = 0; k < 4; k++) {
      uint64_t off = te_rand_below(2) ? te_rand_below(4096) : te_rand_u64();
      fill_uniform_case(dtypes[t], test_size(k), te_rand_float(0.001f, 10.0f), te_rand_u64(), off);
    }
  fill_uniform_case(TECORE_DTYPE_BF16, 1000, 0.0, te_rand_u64(), 0);   /* all +-0 */
  fill_uniform_case(TECORE_DTYPE_F16, 1000, 1e6, te_rand_u64(), 7);    /* infinities */
}
END_TEST

/* a range in three calls by offset is the range in one */
START_TEST(fill_uniform_splits) {
  for (size_t t = 0; t < 3; t++) {
    tecore_dtype_t dt = dtypes[t];
    size_t n = 3 + te_rand_below(20000), a = 1 + te_rand_below(n - 2);
    size_t b = a + 1 + te_rand_below(n - a - 1), es = elem(dt);
    uint64_t seed = te_rand_u64(), off = te_rand_u64();
    double bound = te_rand_float(0.01f, 2.0f);
    tecore_devptr_t one = te_dalloc(n * es), three = te_dalloc(n * es);
    te_poison_dev(one, n * es);
    te_poison_dev(three, n * es);
    TE_OK(tecore_fill_uniform(one, dt, n, bound, seed, off, te_stream));
    TE_OK(tecore_fill_uniform(three + b * es, dt, n - b, bound, seed, off + b, te_stream));
    TE_OK(tecore_fill_uniform(three, dt, a, bound, seed, off, te_stream));
    TE_OK(tecore_fill_uniform(three + a * es, dt, b - a, bound, seed, off + a, te_stream));
    void *g1 = malloc(n * es), *g3 = malloc(n * es);
    te_d2h(g1, one, n * es);
    te_d2h(g3, three, n * es);
    te_expect_mem_eq(g3, g1, n * es, "fill_uniform: three calls by offset vs one");
    TE_OK(tecore_mem_free(one));
    TE_OK(tecore_mem_free(three));
    free(g1);
    free(g3);
  }
}
END_TEST

/* refused before anything is written */
START_TEST(fill_uniform_refuses) {
  tecore_devptr_t d = te_dalloc(64);
  te_poison_dev(d, 64);
  TE_EXPECT_INVALID("bound", tecore_fill_uniform(d, TECORE_DTYPE_F32, 4, NAN, 1, 0, te_stream));
  TE_EXPECT_INVALID("bound", tecore_fill_uniform(d, TECORE_DTYPE_F32, 4, -1, 1, 0, te_stream));
  TE_EXPECT_INVALID("bound",
                    tecore_fill_uniform(d, TECORE_DTYPE_F32, 4, INFINITY, 1, 0, te_stream));
  TE_EXPECT_INVALID("dtype", tecore_fill_uniform(d, TECORE_DTYPE_E4M3, 4, 1, 1, 0, te_stream));
  TE_EXPECT_INVALID("dst", tecore_fill_uniform(0, TECORE_DTYPE_F32, 4, 1, 1, 0, te_stream));
  TE_EXPECT_INVALID("dst", tecore_fill_uniform(d + 2, TECORE_DTYPE_F32, 4, 1, 1, 0, te_stream));
  if (te_backend_kind == TECORE_BACKEND_VDEV)   /* vdev checks the extent (tecore_fill(3)) */
    TE_EXPECT_FAIL(tecore_fill_uniform(d, TECORE_DTYPE_F32, 17, 1, 1, 0, te_stream));
  TE_EXPECT_INVALID("count",
                    tecore_fill_uniform(d, TECORE_DTYPE_F32, SIZE_MAX / 2, 1, 1, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  unsigned char b[64];
  te_d2h(b, d, 64);
  te_expect_bytes_eq(b, TE_POISON_BYTE, 64, "after refused fill_uniform calls");
  TE_OK(tecore_mem_free(d));
}
END_TEST

static void fill_case(tecore_dtype_t dt, size_t n, double value) {
  size_t bytes = (n + GUARD) * elem(dt);
  tecore_devptr_t d = te_dalloc(bytes);
  void *got = malloc(bytes), *want = malloc(n * elem(dt));
  te_poison_dev(d, bytes);
  TE_OK(tecore_fill(d, dt, n, value, te_stream));
  /* value in dt, rounded once from the double (te/elementwise.h) */
  uint32_t bits = dt == TECORE_DTYPE_F32  ? te_f32_bits_of((float)value)
                  : dt == TECORE_DTYPE_F16 ? ref_f16(value)
                                           : ref_bf16(value);
  for (size_t i = 0; i < n; i++) put_elem(dt, want, i, bits);
  te_poison_host(got, bytes);
  te_d2h(got, d, bytes);
  char what[128];
  snprintf(what, sizeof what, "fill %s n=%zu value=%.17g", dname(dt), n, value);
  expect_elems(dt, got, want, n, what);
  TE_OK(tecore_mem_free(d));
  free(got);
  free(want);
}

START_TEST(fill_sizes) {
  for (size_t t = 0; t < 3; t++)
    for (int k = 0; k < 4; k++) fill_case(dtypes[t], test_size(k), te_rand_float(-50, 50));
}
END_TEST

START_TEST(fill_special_values) {
  for (size_t t = 0; t < 3; t++)
    for (int k = 0; k < NSPECIAL; k++) fill_case(dtypes[t], 33, special_value(dtypes[t], k));
}
END_TEST

/* A double just above a 16-bit tie must round up: rounding it to float
 * first lands exactly on the tie, which then goes to even (down). */
START_TEST(fill_rounds_double_once) {
  fill_case(TECORE_DTYPE_F16, 5, 1.0 + ldexp(1, -11) + ldexp(1, -40));
  fill_case(TECORE_DTYPE_BF16, 5, 1.0 + ldexp(1, -8) + ldexp(1, -40));
}
END_TEST

/* ---- scale_add ---- */

struct sa_case {
  tecore_dtype_t dt;
  size_t n;
  void *a, *b;              /* host inputs (dt elements) */
  float alpha, beta;
};

static void sa_inputs(struct sa_case *c, tecore_dtype_t dt, size_t n) {
  c->dt = dt;
  c->n = n;
  c->a = malloc(n * elem(dt));
  c->b = malloc(n * elem(dt));
  for (size_t i = 0; i < n; i++) {
    uint32_t ba = dt == TECORE_DTYPE_F32 ? te_f32_bits_of(rand_input_f32())
                                         : rand_input_half(dt == TECORE_DTYPE_BF16);
    uint32_t bb = dt == TECORE_DTYPE_F32 ? te_f32_bits_of(rand_input_f32())
                                         : rand_input_half(dt == TECORE_DTYPE_BF16);
    put_elem(dt, c->a, i, ba);
    put_elem(dt, c->b, i, bb);
  }
  c->alpha = te_rand_float(-3, 3);
  c->beta = te_rand_float(-3, 3);
}
static void sa_free(struct sa_case *c) {
  free(c->a);
  free(c->b);
}
static void *sa_reference(const struct sa_case *c) {
  void *want = malloc(c->n * elem(c->dt));
  for (size_t i = 0; i < c->n; i++) {
    float a = load_val(c->dt, c->a, i), b = load_val(c->dt, c->b, i);
    float bb = c->beta * b;
    put_elem(c->dt, want, i, store_bits(c->dt, fmaf(c->alpha, a, bb)));
  }
  return want;
}

/* alias: 0 separate dst, 1 dst == a, 2 dst == b */
static void scale_add_case(tecore_dtype_t dt, size_t n, int alias) {
  struct sa_case c;
  sa_inputs(&c, dt, n);
  size_t es = elem(dt), bytes = (n + GUARD) * es;
  tecore_devptr_t da = te_dalloc(bytes), db = te_dalloc(bytes), dd = te_dalloc(bytes);
  te_poison_dev(da, bytes);
  te_poison_dev(db, bytes);
  te_poison_dev(dd, bytes);
  te_h2d(da, c.a, n * es);
  te_h2d(db, c.b, n * es);
  tecore_devptr_t dst = alias == 1 ? da : alias == 2 ? db : dd;
  TE_OK(tecore_scale_add(dst, da, c.alpha, db, c.beta, dt, n, te_stream));
  void *want = sa_reference(&c), *got = malloc(bytes);
  te_poison_host(got, bytes);
  te_d2h(got, dst, bytes);
  char what[160];
  snprintf(what, sizeof what, "scale_add %s n=%zu alpha=%a beta=%a%s", dname(dt), n,
           (double)c.alpha, (double)c.beta,
           alias == 1 ? " dst==a" : alias == 2 ? " dst==b" : "");
  expect_elems(dt, got, want, n, what);
  if (alias == 0) {
    /* inputs unchanged */
    te_d2h(got, da, n * es);
    te_expect_mem_eq(got, c.a, n * es, "scale_add input a afterwards");
    te_d2h(got, db, n * es);
    te_expect_mem_eq(got, c.b, n * es, "scale_add input b afterwards");
  }
  TE_OK(tecore_mem_free(da));
  TE_OK(tecore_mem_free(db));
  TE_OK(tecore_mem_free(dd));
  free(want);
  free(got);
  sa_free(&c);
}

START_TEST(scale_add_sizes) {
  for (size_t t = 0; t < 3; t++)
    for (int k = 0; k < 4; k++) scale_add_case(dtypes[t], test_size(k), 0);
}
END_TEST

START_TEST(scale_add_aliasing) {
  for (size_t t = 0; t < 3; t++) {
    size_t n = 1 + te_rand_below(50000);
    scale_add_case(dtypes[t], n, 1);
    scale_add_case(dtypes[t], n, 2);
  }
}
END_TEST

/* Coefficients that expose the evaluation order: alpha*a and beta*b
 * cancel, so only a fused multiply-add keeps the low bits. */
START_TEST(scale_add_is_fused) {
  size_t n = 4096;
  float *a = malloc(n * 4), *b = malloc(n * 4), *got = malloc((n + GUARD) * 4),
        *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) {
    a[i] = 1.0f + (float)te_rand_below(1u << 20) * 0x1p-23f;
    b[i] = -a[i];
  }
  float alpha = 1.0f + 0x1p-12f, beta = 1.0f;
  for (size_t i = 0; i < n; i++) want[i] = fmaf(alpha, a[i], beta * b[i]);
  tecore_devptr_t da = te_dalloc(n * 4), db = te_dalloc(n * 4), dd = te_dalloc((n + GUARD) * 4);
  te_h2d(da, a, n * 4);
  te_h2d(db, b, n * 4);
  te_poison_dev(dd, (n + GUARD) * 4);
  TE_OK(tecore_scale_add(dd, da, alpha, db, beta, TECORE_DTYPE_F32, n, te_stream));
  te_d2h(got, dd, (n + GUARD) * 4);
  expect_elems(TECORE_DTYPE_F32, got, want, n, "scale_add rounding order");
  TE_OK(tecore_mem_free(da));
  TE_OK(tecore_mem_free(db));
  TE_OK(tecore_mem_free(dd));
  free(a);
  free(b);
  free(got);
  free(want);
}
END_TEST

/* ---- captured ---- */

START_TEST(captured_same_bits) {
  for (size_t t = 0; t < 3; t++) {
    tecore_dtype_t dt = dtypes[t];
    size_t n = 1000 + te_rand_below(20000), es = elem(dt), bytes = (n + GUARD) * es;
    struct sa_case c;
    sa_inputs(&c, dt, n);
    double v = te_rand_float(-10, 10);
    tecore_devptr_t da = te_dalloc(bytes), db = te_dalloc(bytes), dd = te_dalloc(bytes),
                    df = te_dalloc(bytes);
    te_h2d(da, c.a, n * es);
    te_h2d(db, c.b, n * es);
    void *eager_d = malloc(bytes), *eager_f = malloc(bytes), *got = malloc(bytes);
    /* eager */
    te_poison_dev(dd, bytes);
    te_poison_dev(df, bytes);
    TE_OK(tecore_fill(df, dt, n, v, te_stream));
    TE_OK(tecore_scale_add(dd, da, c.alpha, db, c.beta, dt, n, te_stream));
    te_d2h(eager_d, dd, bytes);
    te_d2h(eager_f, df, bytes);
    void *want = sa_reference(&c);
    expect_elems(dt, eager_d, want, n, "eager scale_add");
    /* captured, then launched on poisoned outputs */
    te_poison_dev(dd, bytes);
    te_poison_dev(df, bytes);
    tecore_graph_t g = NULL;
    tecore_graph_exec_t x = NULL;
    TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
    TE_OK(tecore_fill(df, dt, n, v, te_stream));
    TE_OK(tecore_scale_add(dd, da, c.alpha, db, c.beta, dt, n, te_stream));
    TE_OK(tecore_stream_end_capture(te_stream, &g));
    TE_OK(tecore_graph_instantiate(&x, g));
    te_d2h(got, dd, bytes);
    te_expect_bytes_eq(got, TE_POISON_BYTE, bytes, "scale_add output before the graph ran");
    TE_OK(tecore_graph_launch(x, te_stream));
    ck_assert_int_eq(te_stream_wait(te_stream, 20000), TECORE_SUCCESS);
    te_d2h(got, dd, bytes);
    te_expect_mem_eq(got, eager_d, bytes, "graph scale_add vs eager");
    te_d2h(got, df, bytes);
    te_expect_mem_eq(got, eager_f, bytes, "graph fill vs eager");
    TE_OK(tecore_graph_exec_destroy(x));
    TE_OK(tecore_graph_destroy(g));
    tecore_devptr_t p[] = {da, db, dd, df};
    for (int i = 0; i < 4; i++) TE_OK(tecore_mem_free(p[i]));
    free(eager_d);
    free(eager_f);
    free(got);
    free(want);
    sa_free(&c);
  }
}
END_TEST

START_TEST(zero_count_is_noop) {
  tecore_devptr_t d = te_dalloc(64);
  te_poison_dev(d, 64);
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, 0, 1.0, te_stream));
  TE_OK(tecore_scale_add(d, d, 1, d, 1, TECORE_DTYPE_F16, 0, te_stream));
  unsigned char b[64];
  te_d2h(b, d, 64);
  te_expect_bytes_eq(b, TE_POISON_BYTE, 64, "after count-0 kernels");
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* te_copy2d_u32 (the block-scaled GEMM's scale rearrangement on cuda):
 * the two patterns it serves, on random extents -- a transpose into
 * [cols][pad4(rows)] and a row padding to pad4(cols) -- launched by name
 * through the public kernel table; zeros in the padding, every element
 * checked against a copy made here, and the poisoned words past the
 * destination's extent untouched. */
START_TEST(copy2d_u32_layouts) {
  int id = -1;
  TE_OK(tecore_kernel_find("te_copy2d_u32", &id));
  for (int rep = 0; rep < 8; rep++) {
    int transpose = rep & 1;
    unsigned long long rows = 1 + te_rand_below(300), cols = 1 + te_rand_below(9);
    unsigned long long r4 = (rows + 3) & ~3ull, c4 = (cols + 3) & ~3ull;
    /* dst index (i, j) at i*dsi + j*dsj over the destination's extent */
    unsigned long long drows = transpose ? r4 : rows, dcols = transpose ? cols : c4;
    unsigned long long dsi = transpose ? 1 : c4, dsj = transpose ? r4 : 1;
    unsigned long long ssi = cols, ssj = 1, nd = drows * dcols, tail = 5;
    uint32_t *src = malloc(rows * cols * 4), *want = malloc((nd + tail) * 4);
    uint32_t *got = malloc((nd + tail) * 4);
    for (unsigned long long i = 0; i < rows * cols; i++) src[i] = (uint32_t)te_rand_u64() | 1u;
    memset(want, TE_POISON_BYTE, (nd + tail) * 4);
    for (unsigned long long i = 0; i < drows; i++)
      for (unsigned long long j = 0; j < dcols; j++)
        want[i * dsi + j * dsj] = i < rows && j < cols ? src[i * ssi + j * ssj] : 0u;
    tecore_devptr_t ds = te_dalloc(rows * cols * 4), dd = te_dalloc((nd + tail) * 4);
    te_h2d(ds, src, rows * cols * 4);
    te_poison_dev(dd, (nd + tail) * 4);
    void *pd = (void *)(uintptr_t)dd, *ps = (void *)(uintptr_t)ds;
    unsigned long long srows = rows, scols = cols;
    void *args[] = {&pd, &ps, &drows, &dcols, &srows, &scols, &dsi, &dsj, &ssi, &ssj};
    struct tecore_launch_cfg cfg = {.grid = {1 + te_rand_below(3), 1, 1}, .block = {64, 1, 1}};
    TE_OK(tecore_kernel_launch(id, &cfg, args, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    te_d2h(got, dd, (nd + tail) * 4);
    for (unsigned long long e = 0; e < nd + tail; e++)
      ck_assert_msg(got[e] == want[e], "%s %llux%llu: word %llu is %#x, want %#x",
                    transpose ? "transpose" : "pad", rows, cols, e, got[e], want[e]);
    TE_OK(tecore_mem_free(ds));
    TE_OK(tecore_mem_free(dd));
    free(src);
    free(want);
    free(got);
  }
}
END_TEST

static Suite *kernels_suite(void) {
  Suite *s = suite_create("kernels");
  TCase *tc = te_tcase(s, "reference", 0);
  tcase_add_test(tc, reference_self_check);
  tc = te_tcase(s, "fill", 1);
  tcase_add_test(tc, fill_sizes);
  tcase_add_test(tc, fill_special_values);
  tcase_add_test(tc, fill_rounds_double_once);
  tcase_add_test(tc, fill_uniform_values);
  tcase_add_test(tc, fill_uniform_splits);
  tcase_add_test(tc, fill_uniform_refuses);
  tc = te_tcase(s, "scale_add", 1);
  tcase_add_test(tc, scale_add_sizes);
  tcase_add_test(tc, scale_add_aliasing);
  tcase_add_test(tc, scale_add_is_fused);
  tc = te_tcase(s, "copy2d", 1);
  tcase_add_test(tc, copy2d_u32_layouts);
  tc = te_tcase(s, "graph", 1);
  tcase_add_test(tc, captured_same_bits);
  tcase_add_test(tc, zero_count_is_noop);
  return s;
}

TE_TEST_MAIN(kernels_suite, TE_TEST_DEVICE)
