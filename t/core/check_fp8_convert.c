/* SPDX-License-Identifier: Apache-2.0 */
/* check_fp8_convert.c -- the FP8 element math of kernels/common/fp8.h (the
 * oracle of every FP8 kernel, shared with the CUDA kernels) against an
 * independent float64 reference written here: float -> E4M3/E5M2 for all
 * 65536 bf16 values, all 65536 f16 values, every tie and every boundary
 * between adjacent FP8 values, the special cases and random float bit
 * patterns; FP8 -> float for all 256 codes of both formats; the E8M0 block
 * scale rule.  Tolerance: exact (bit for bit) everywhere. */
#include "tests.h"
#include <float.h>
#include "common/fp8.h"

/* ---- the float64 reference ---------------------------------------------------- */

struct fmt {
  const char *name;
  int e4m3;
  unsigned mbits, bias, maxcode;
};
static const struct fmt E4M3 = {"e4m3", 1, 3, 7, 0x7e};
static const struct fmt E5M2 = {"e5m2", 0, 2, 15, 0x7b};

/* The value of a code from the format's definition (NaN / inf by code). */
static double ref_decode(const struct fmt *f, unsigned code) {
  unsigned mag = code & 0x7f;
  double s = (code & 0x80) ? -1.0 : 1.0;
  unsigned e = mag >> f->mbits, m = mag & ((1u << f->mbits) - 1);
  if (f->e4m3 && mag == 0x7f) return NAN;
  if (!f->e4m3 && e == 31) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp((double)m, 1 - (int)f->bias - (int)f->mbits);
  return s * ldexp(1.0 + (double)m / (double)(1u << f->mbits), (int)e - (int)f->bias);
}

/* Nearest code to x, ties to the even code, saturating at the max finite,
 * NaN to the canonical 0x7f. */
static unsigned ref_encode(const struct fmt *f, double x) {
  unsigned sign = signbit(x) ? 0x80u : 0u;
  if (isnan(x)) return 0x7fu;
  double ax = fabs(x);
  if (ax >= ref_decode(f, f->maxcode)) return sign | f->maxcode;
  unsigned lo = 0, hi = f->maxcode;  /* largest code with value <= ax: binary search */
  while (lo < hi) {
    unsigned mid = (lo + hi + 1) / 2;
    if (ref_decode(f, mid) <= ax) lo = mid;
    else hi = mid - 1;
  }
  double vlo = ref_decode(f, lo);
  if (vlo == ax) return sign | lo;
  double vhi = ref_decode(f, lo + 1);
  double dlo = ax - vlo, dhi = vhi - ax;
  unsigned c = dlo < dhi ? lo : dhi < dlo ? lo + 1 : ((lo & 1) ? lo + 1 : lo);
  return sign | c;
}

static unsigned ours(const struct fmt *f, float x) {
  return f->e4m3 ? te_f32_to_e4m3(x) : te_f32_to_e5m2(x);
}
static float ours_dec(const struct fmt *f, uint8_t c) {
  return f->e4m3 ? te_e4m3_to_f32(c) : te_e5m2_to_f32(c);
}

static void expect_encode(const struct fmt *f, float x, const char *what) {
  unsigned got = ours(f, x), want = ref_encode(f, (double)x);
  ck_assert_msg(got == want, "%s: %s(%a = %.9g, bits 0x%08x) = 0x%02x, want 0x%02x", what,
                f->name, (double)x, (double)x, te_f32_bits_of(x), got, want);
}

static float f16_value(unsigned h) {   /* independent decode of binary16 */
  unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000) ? -1.0 : 1.0;
  if (e == 31) return m ? (float)NAN : (float)(s * INFINITY);
  if (e == 0) return (float)(s * ldexp((double)m, -24));
  return (float)(s * ldexp(1.0 + m / 1024.0, (int)e - 15));
}

/* ---- tests ------------------------------------------------------------------- */

START_TEST(all_bf16_values) {
  for (unsigned h = 0; h < 65536; h++) {
    float x = te_f32_from_bits((uint32_t)h << 16);
    expect_encode(&E4M3, x, "bf16");
    expect_encode(&E5M2, x, "bf16");
  }
}
END_TEST

START_TEST(all_f16_values) {
  for (unsigned h = 0; h < 65536; h++) {
    float x = f16_value(h);
    if (isnan(x)) x = te_f32_from_bits(((h & 0x8000u) << 16) | 0x7fc00000u);
    expect_encode(&E4M3, x, "f16");
    expect_encode(&E5M2, x, "f16");
  }
}
END_TEST

/* Every midpoint between adjacent values (the ties) and the floats either
 * side of it, for both signs; plus each value and its neighbours. */
START_TEST(ties_and_boundaries) {
  const struct fmt *fs[] = {&E4M3, &E5M2};
  for (int k = 0; k < 2; k++) {
    const struct fmt *f = fs[k];
    for (unsigned c = 0; c < f->maxcode; c++) {
      double mid = (ref_decode(f, c) + ref_decode(f, c + 1)) / 2;   /* exact in float */
      float m = (float)mid;
      ck_assert_msg((double)m == mid, "midpoint %a not a float", mid);
      float pts[] = {m, nextafterf(m, 0), nextafterf(m, INFINITY), (float)ref_decode(f, c),
                     nextafterf((float)ref_decode(f, c), INFINITY)};
      for (size_t i = 0; i < (sizeof(pts) / sizeof(pts[0])); i++) {
        expect_encode(f, pts[i], "boundary");
        expect_encode(f, -pts[i], "boundary");
      }
    }
  }
}
END_TEST

START_TEST(special_cases) {
  const float sp[] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, -NAN, 448.0f, 449.0f, 463.999f,
                      464.0f, 465.0f, 480.0f, 57344.0f, 57345.0f, 61439.0f, 61440.0f, 65504.0f,
                      1e30f, FLT_MAX, -FLT_MAX, FLT_MIN, 1e-45f /* float subnormal */,
                      0x1p-9f, 0x1p-10f, 0x1.0p-10f * 1.0000001f, 0x3p-11f, 0x1p-6f,
                      0x1.ep-7f, 0x1.fp-7f, 0x1p-16f, 0x1p-17f, 0x1.000002p-17f, 0x3p-18f,
                      0x1p-14f, 0x1.cp-15f, 0x1.ep-15f, 1.0f, -1.0f, 1.0625f, 1.1875f,
                      1.125f, 240.0f, 248.0f, 256.0f, 0x1.3p0f};
  for (size_t i = 0; i < (sizeof(sp) / sizeof(sp[0])); i++) {
    expect_encode(&E4M3, sp[i], "special");
    expect_encode(&E5M2, sp[i], "special");
  }
  /* the documented encodings, spelled out */
  ck_assert_uint_eq(te_f32_to_e4m3(INFINITY), 0x7e);
  ck_assert_uint_eq(te_f32_to_e4m3(-INFINITY), 0xfe);
  ck_assert_uint_eq(te_f32_to_e5m2(INFINITY), 0x7b);
  ck_assert_uint_eq(te_f32_to_e5m2(-1e30f), 0xfb);
  ck_assert_uint_eq(te_f32_to_e4m3(NAN), 0x7f);
  ck_assert_uint_eq(te_f32_to_e4m3(-NAN), 0x7f);
  ck_assert_uint_eq(te_f32_to_e5m2(te_f32_from_bits(0xff800001u)), 0x7f);
  ck_assert_uint_eq(te_f32_to_e5m2(NAN), 0x7f);
  ck_assert_uint_eq(te_f32_to_e4m3(-0.0f), 0x80);
  ck_assert_uint_eq(te_f32_to_e4m3(0x1p-10f), 0x00);   /* tie at half the min subnormal: even */
  ck_assert_uint_eq(te_f32_to_e4m3(0x3p-11f), 0x01);   /* 0.75 units: up to 1 */
  ck_assert_uint_eq(te_f32_to_e4m3(0x3p-10f), 0x02);   /* 1.5 units: tie to even 2 */
  ck_assert_uint_eq(te_f32_to_e4m3(464.0f), 0x7e);     /* tie between 448 and 480: saturates */
  ck_assert_uint_eq(te_f32_to_e5m2(0x1p-17f), 0x00);
}
END_TEST

START_TEST(random_float_bits) {
  for (int i = 0; i < 2000000; i++) {
    float x = te_f32_from_bits(te_rand_u32());
    expect_encode(&E4M3, x, "random");
    expect_encode(&E5M2, x, "random");
  }
  /* and uniformly in the FP8 range, where the rounding is busy */
  for (int i = 0; i < 2000000; i++) {
    float x = te_rand_float(-600.0f, 600.0f) * ldexpf(1.0f, (int)te_rand_below(28) - 24);
    expect_encode(&E4M3, x, "random-range");
    expect_encode(&E5M2, x * 64.0f, "random-range");
  }
}
END_TEST

START_TEST(decode_all_codes) {
  const struct fmt *fs[] = {&E4M3, &E5M2};
  for (int k = 0; k < 2; k++) {
    const struct fmt *f = fs[k];
    for (unsigned c = 0; c < 256; c++) {
      double want = ref_decode(f, c);
      float got = ours_dec(f, (uint8_t)c);
      if (isnan(want)) {
        ck_assert_msg(te_f32_bits_of(got) == (((c & 0x80u) << 24) | 0x7fc00000u),
                      "%s decode 0x%02x = 0x%08x, want the quiet NaN with its sign", f->name, c,
                      te_f32_bits_of(got));
        continue;
      }
      ck_assert_msg((double)got == want && !signbit(got) == !signbit(want),
                    "%s decode 0x%02x = %a, want %a", f->name, c, (double)got, want);
      /* round trip: every finite code encodes back to itself */
      if (!isinf(want))
        ck_assert_msg(ours(f, got) == c, "%s round trip of 0x%02x gives 0x%02x", f->name, c,
                      ours(f, got));
    }
  }
}
END_TEST

/* E8M0: e8 = clamp(floor(log2(amax)) - emax + 127, 0, 254), 0xFF for inf/NaN. */
static unsigned ref_e8m0(double amax, int emax) {
  if (isnan(amax) || isinf(amax)) return 0xff;
  if (amax == 0) return 0;
  int k;
  frexp(amax, &k);   /* amax = f * 2^k, f in [0.5, 1) */
  int e = (k - 1) - emax + 127;
  return e < 0 ? 0 : e > 254 ? 254 : (unsigned)e;
}

START_TEST(e8m0_rule) {
  const float sp[] = {0.0f, FLT_MIN, 1e-45f, 1.0f, 448.0f, 447.9f, 449.0f, 896.0f, 0.5f,
                      57344.0f, FLT_MAX, INFINITY, NAN, 0x1p-119f, 0x1p-118f, 0x1.fffffep-120f};
  for (int i = 0; i < 200000 + (int)(sizeof(sp) / sizeof(sp[0])); i++) {
    float a = i < (int)(sizeof(sp) / sizeof(sp[0])) ? sp[i] : fabsf(te_f32_from_bits(te_rand_u32()));
    unsigned g4 = te_e8m0_from_amax(a, TE_FP8_DT_E4M3), g5 = te_e8m0_from_amax(a, TE_FP8_DT_E5M2);
    ck_assert_msg(g4 == ref_e8m0(a, 8), "e8m0(e4m3, %a) = %u, want %u", (double)a, g4,
                  ref_e8m0(a, 8));
    ck_assert_msg(g5 == ref_e8m0(a, 15), "e8m0(e5m2, %a) = %u, want %u", (double)a, g5,
                  ref_e8m0(a, 15));
  }
  for (unsigned e = 0; e < 256; e++) {
    float s = te_e8m0_to_f32((uint8_t)e), m = te_e8m0_quant_mult((uint8_t)e);
    if (e == 255) {
      ck_assert(isnan(s) && isnan(m));
      continue;
    }
    ck_assert_msg((double)s == ldexp(1.0, (int)e - 127), "e8m0_to_f32(%u) = %a", e, (double)s);
    ck_assert_msg((double)m == ldexp(1.0, 127 - (int)e), "e8m0_quant_mult(%u) = %a", e, (double)m);
  }
  /* the block's largest element lands in the format's top binade: |amax*mult| in [2^emax, 2^(emax+1)) */
  for (int i = 0; i < 10000; i++) {
    float a = ldexpf(te_rand_float(1.0f, 2.0f), (int)te_rand_below(200) - 100);
    float y = a * te_e8m0_quant_mult(te_e8m0_from_amax(a, TE_FP8_DT_E4M3));
    ck_assert_msg(y >= 256.0f && y < 512.0f, "amax %a scaled to %a", (double)a, (double)y);
  }
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("fp8_convert");
  TCase *tc = te_tcase(s, "convert", 0);
  tcase_add_test(tc, all_bf16_values);
  tcase_add_test(tc, all_f16_values);
  tcase_add_test(tc, ties_and_boundaries);
  tcase_add_test(tc, special_cases);
  tcase_add_test(tc, random_float_bits);
  tcase_add_test(tc, decode_all_codes);
  tcase_add_test(tc, e8m0_rule);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_NODEVICE)
