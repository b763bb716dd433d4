/* SPDX-License-Identifier: Apache-2.0 */
/* act_ref.h -- what t/core/check_act.c and t/core/check_norm.c share: element types
 * on the host written independently of the library (rounding a double to
 * bf16, f16, e4m3 or e5m2 to nearest even, with saturation for FP8), and
 * the compares of device outputs against a float64 reference.
 *
 * Tolerances.  The kernels compute in float32; a reference value r in
 * float64 comes with a magnitude m (the sum of the absolute values of the
 * terms that make it up, so cancellation is covered) and the caller's
 * float32 error bound c (relative to m).  A high-precision output must
 * then satisfy |got - r| <= u_out*|r| + c*m + tiny, u_out being the output
 * type's unit roundoff (2^-8 bf16, 2^-11 f16, 0 f32) and tiny half the
 * smallest subnormal step of the output type.  An FP8 output must equal
 * the reference's FP8 byte, fp8(r * scale) rounded in float64, or a byte
 * that some value within float32's own error c*m*scale of r*scale rounds
 * to (one step next to a tie; several where the terms cancel and c*m is
 * large next to r). */
#ifndef TE_T_ACT_REF_H
#define TE_T_ACT_REF_H

#include "tests.h"

#define TE_ARRAY_N(a) (sizeof(a) / sizeof((a)[0]))

static TE_T_UNUSED size_t ref_esize(tecore_dtype_t dt) { return tecore_dtype_size(dt); }

/* Rounds v to a binary format with mbits mantissa bits and minimum normal
 * exponent emin, nearest even; above maxf: maxf when sat, else infinity.
 * *q_out (optional) gets v/ulp before rounding, for tie checks; *ulp_out
 * the spacing used. */
static TE_T_UNUSED double ref_round_fmt(double v, int mbits, int emin, double maxf, int sat,
                                        double *q_out, double *ulp_out) {
  if (isnan(v) || v == 0.0) {
    if (q_out) *q_out = 0.0;
    if (ulp_out) *ulp_out = ldexp(1.0, emin - mbits);
    return v;
  }
  double a = fabs(v);
  int e;
  if (isinf(a)) {
    double r = sat ? maxf : INFINITY;
    if (q_out) *q_out = INFINITY;
    if (ulp_out) *ulp_out = 1.0;
    return v < 0 ? -r : r;
  }
  frexp(a, &e);
  e -= 1; /* a in [2^e, 2^(e+1)) */
  if (e < emin) e = emin;
  double ulp = ldexp(1.0, e - mbits);
  double q = a / ulp; /* exact: a scaled by a power of two */
  double r = rint(q) * ulp;
  if (r > maxf) r = sat ? maxf : INFINITY;
  if (q_out) *q_out = q;
  if (ulp_out) *ulp_out = ulp;
  return v < 0 ? -r : r;
}

static TE_T_UNUSED double ref_round_dtype(double v, tecore_dtype_t dt) {
  switch (dt) {
    case TECORE_DTYPE_F32: return (double)(float)v;
    case TECORE_DTYPE_BF16: return ref_round_fmt(v, 7, -126, 3.3895313892515355e38, 0, NULL, NULL);
    case TECORE_DTYPE_F16: return ref_round_fmt(v, 10, -14, 65504.0, 0, NULL, NULL);
    case TECORE_DTYPE_E4M3: return ref_round_fmt(v, 3, -6, 448.0, 1, NULL, NULL);
    default: return ref_round_fmt(v, 2, -14, 57344.0, 1, NULL, NULL);
  }
}

/* The bits of a value already representable in bf16 / f16. */
static TE_T_UNUSED uint16_t ref_bf16_bits(double r) {
  return (uint16_t)(te_f32_bits_of((float)r) >> 16);
}
static TE_T_UNUSED uint16_t ref_f16_bits(double r) {
  uint16_t s = signbit(r) ? 0x8000u : 0;
  double a = fabs(r);
  if (isnan(r)) return 0x7e00u;
  if (isinf(a)) return s | 0x7c00u;
  if (a < ldexp(1.0, -14)) return s | (uint16_t)(a / ldexp(1.0, -24));
  int e;
  double f = frexp(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  uint16_t m = (uint16_t)((f * 2.0 - 1.0) * 1024.0);
  return s | (uint16_t)((e - 1 + 15) << 10) | m;
}
/* FP8 code of a representable value (mbits 3 bias 7, or mbits 2 bias 15). */
static TE_T_UNUSED uint8_t ref_fp8_bits(double r, tecore_dtype_t dt) {
  int mbits = dt == TECORE_DTYPE_E4M3 ? 3 : 2, bias = dt == TECORE_DTYPE_E4M3 ? 7 : 15;
  uint8_t s = signbit(r) ? 0x80u : 0;
  double a = fabs(r);
  if (isnan(r)) return s | 0x7fu;
  if (a < ldexp(1.0, 1 - bias)) return s | (uint8_t)(a / ldexp(1.0, 1 - bias - mbits));
  int e;
  double f = frexp(a, &e);
  uint8_t m = (uint8_t)((f * 2.0 - 1.0) * (double)(1 << mbits));
  return s | (uint8_t)(((e - 1 + bias) << mbits) | m);
}

/* Stores v (rounded to dt, nearest even) as element i of a host buffer
 * and returns the stored value. */
static TE_T_UNUSED double ref_store(void *buf, size_t i, tecore_dtype_t dt, double v) {
  double r = ref_round_dtype(v, dt);
  switch (dt) {
    case TECORE_DTYPE_F32: ((float *)buf)[i] = (float)r; break;
    case TECORE_DTYPE_BF16: ((uint16_t *)buf)[i] = ref_bf16_bits(r); break;
    case TECORE_DTYPE_F16: ((uint16_t *)buf)[i] = ref_f16_bits(r); break;
    default: ((uint8_t *)buf)[i] = ref_fp8_bits(r, dt); break;
  }
  return r;
}

static TE_T_UNUSED double ref_f16_value(uint16_t h) {
  int e = (h >> 10) & 0x1f, m = h & 0x3ff;
  double s = (h & 0x8000u) ? -1.0 : 1.0;
  if (e == 0x1f) return m ? NAN : s * INFINITY;
  if (e == 0) return s * ldexp((double)m, -24);
  return s * ldexp(1024.0 + m, e - 25);
}

/* Element i of a host copy of device data, as a double. */
static TE_T_UNUSED double ref_load(const void *buf, size_t i, tecore_dtype_t dt) {
  switch (dt) {
    case TECORE_DTYPE_F32: return ((const float *)buf)[i];
    case TECORE_DTYPE_BF16: return te_f32_from_bits((uint32_t)((const uint16_t *)buf)[i] << 16);
    case TECORE_DTYPE_F16: return ref_f16_value(((const uint16_t *)buf)[i]);
    default: {
      uint8_t c = ((const uint8_t *)buf)[i];
      int mbits = dt == TECORE_DTYPE_E4M3 ? 3 : 2, bias = dt == TECORE_DTYPE_E4M3 ? 7 : 15;
      int e = (c & 0x7f) >> mbits, m = c & ((1 << mbits) - 1);
      double s = (c & 0x80) ? -1.0 : 1.0;
      if (dt == TECORE_DTYPE_E4M3 && (c & 0x7f) == 0x7f) return NAN;
      if (dt == TECORE_DTYPE_E5M2 && e == 31) return m ? NAN : s * INFINITY;
      if (e == 0) return s * ldexp((double)m, 1 - bias - mbits);
      return s * ldexp((double)((1 << mbits) + m), e - bias - mbits);
    }
  }
}

/* Fills n elements of dt with uniform values in [lo, hi) and keeps the
 * stored (rounded) values in ref. */
static TE_T_UNUSED void ref_fill(void *buf, double *ref, size_t n, tecore_dtype_t dt, float lo,
                                 float hi) {
  for (size_t i = 0; i < n; i++) ref[i] = ref_store(buf, i, dt, te_rand_float(lo, hi));
}

static TE_T_UNUSED double ref_unit_roundoff(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_BF16 ? ldexp(1.0, -8) : dt == TECORE_DTYPE_F16 ? ldexp(1.0, -11) : 0.0;
}
static TE_T_UNUSED double ref_tiny(tecore_dtype_t dt) {
  return dt == TECORE_DTYPE_F16 ? ldexp(1.0, -25) : dt == TECORE_DTYPE_BF16 ? ldexp(1.0, -134)
                                                                             : ldexp(1.0, -150);
}

/* Checks a high-precision output (see the file comment). */
static TE_T_UNUSED void ref_check_hp(const void *got, tecore_dtype_t dt, const double *ref,
                                     const double *mag, size_t n, double c, const char *what) {
  double u = ref_unit_roundoff(dt), tiny = ref_tiny(dt);
  for (size_t i = 0; i < n; i++) {
    double g = ref_load(got, i, dt), r = ref[i];
    if (isnan(r) && isnan(g)) continue;
    double tol = u * fabs(r) + c * mag[i] + tiny;
    ck_assert_msg(fabs(g - r) <= tol,
                  "%s[%zu] of %zu (%s): got %.9g, want %.9g (float64); |diff| %.3g > tolerance "
                  "%.3g = %g*|want| + %g*%.3g (float32 error) + %g",
                  what, i, n, tecore_dtype_name(dt), g, r, fabs(g - r), tol, u, c, mag[i], tiny);
  }
}

/* Checks FP8 output bytes against fp8(ref * scale) (see the file comment). */
static TE_T_UNUSED void ref_check_fp8(const uint8_t *got, tecore_dtype_t dt, const double *ref,
                                      const double *mag, size_t n, float scale, double c,
                                      const char *what, size_t *ties) {
  int e4 = dt == TECORE_DTYPE_E4M3;
  for (size_t i = 0; i < n; i++) {
    double v = ref[i] * (double)scale, q, ulp;
    double r = e4 ? ref_round_fmt(v, 3, -6, 448.0, 1, &q, &ulp)
                  : ref_round_fmt(v, 2, -14, 57344.0, 1, &q, &ulp);
    uint8_t want = ref_fp8_bits(r, dt);
    if (got[i] == want) continue;
    /* a 1-ulp difference, allowed only next to a tie */
    double tie = floor(q) + 0.5;
    int near_tie = isfinite(q) && fabs(q - tie) * ulp <= c * mag[i] * (double)scale;
    int one_ulp = (got[i] & 0x80) == (want & 0x80) &&
                  ((got[i] & 0x7f) == (want & 0x7f) + 1 || (got[i] & 0x7f) + 1 == (want & 0x7f));
    /* +0 against -0 where float32's error cannot tell the sign */
    int zero_sign = (got[i] & 0x7f) == 0 && (want & 0x7f) == 0 &&
                    fabs(v) <= c * mag[i] * (double)scale;
    /* where the terms cancel (silu' near its minimum, say), float32's error
     * c*m can span several FP8 steps: any byte that some value within it
     * rounds to is right */
    double err = c * mag[i] * (double)scale, gv = ref_load(got, i, dt); /* scaled, as v */
    double lo = e4 ? ref_round_fmt(v - err, 3, -6, 448.0, 1, NULL, NULL)
                   : ref_round_fmt(v - err, 2, -14, 57344.0, 1, NULL, NULL);
    double hi = e4 ? ref_round_fmt(v + err, 3, -6, 448.0, 1, NULL, NULL)
                   : ref_round_fmt(v + err, 2, -14, 57344.0, 1, NULL, NULL);
    int in_range = isfinite(v) && !isnan(gv) && gv >= lo && gv <= hi;
    ck_assert_msg((near_tie && one_ulp) || zero_sign || in_range,
                  "%s[%zu] of %zu (%s, scale %.9g): got 0x%02x (%.9g), want 0x%02x (%.9g) = "
                  "fp8(%.12g); not within float32 error (%.3g) of a tie",
                  what, i, n, tecore_dtype_name(dt), (double)scale, got[i],
                  ref_load(got, i, dt), want, r, v, c * mag[i] * (double)scale);
    if (ties) (*ties)++;
  }
}

/* Device buffer helpers. */
/* The sigmoid activations (base kinds GELU, SILU, QGELU; numbers as in
 * te/activation.h) in float64, in the stable forms so the reference does
 * not cancel: act(x), act'(x), |z| (the sigmoid's argument) and the
 * magnitude |s| + |x s (1-s) z'| of act'(x)'s terms. */
static TE_T_UNUSED void ref_act_sig(int base, double x, double *y, double *d, double *az,
                                    double *dsum) {
  const double k = sqrt(2.0 / M_PI);
  double z, dz;
  if (base == TECORE_ACT_GELU) {
    z = 2.0 * k * (x + 0.044715 * x * x * x);
    dz = 2.0 * k * (1.0 + 3.0 * 0.044715 * x * x);
  } else if (base == TECORE_ACT_SILU) {
    z = x;
    dz = 1.0;
  } else {
    z = 1.702 * x;
    dz = 1.702;
  }
  double s = 1.0 / (1.0 + exp(-z)), oms = 1.0 / (1.0 + exp(z));
  *y = x * s;
  *d = s + x * s * oms * dz;
  *az = fabs(z);
  *dsum = fabs(s) + fabs(x * s * oms * dz);
}

static TE_T_UNUSED struct tecore_tensor ref_tensor2(tecore_dtype_t dt, size_t rows, size_t cols,
                                                    tecore_devptr_t data) {
  struct tecore_tensor t;
  size_t shape[2] = {rows, cols};
  TE_OK(tecore_tensor_init(&t, dt, 2, shape, data));
  return t;
}
static TE_T_UNUSED struct tecore_tensor ref_tensor1(tecore_dtype_t dt, size_t n,
                                                    tecore_devptr_t data) {
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, dt, 1, &n, data));
  return t;
}

#endif
