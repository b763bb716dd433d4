/* SPDX-License-Identifier: Apache-2.0 */
/* act.h -- activation functions and their derivatives, in float, shared
 * by the activation kernels (kernels/act.cu), the cast-transpose family's
 * dact kernels and the vdev implementations, so they agree bit for bit.
 *
 * Kinds (te_act_kind values; the public tecore_activation_t has the same
 * numbers):
 *   GELU   x * Phi(x), tanh form: 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715x^3)))
 *   RELU   max(x, 0) (NaN passes)
 *   SILU   x * sigmoid(x)
 *   QGELU  x * sigmoid(1.702x)
 *   gated (input row [a | b], two halves of cols each):
 *   SWIGLU silu(a) * b,  GEGLU gelu(a) * b,  REGLU relu(a) * b
 *
 * The tanh form is evaluated as x * sigmoid(z), z = 2 sqrt(2/pi)(x +
 * 0.044715x^3), since 0.5(1 + tanh(z/2)) = sigmoid(z); that keeps full
 * relative precision for negative x, where 1 + tanh would cancel.
 * Derivatives use 1 - sigmoid(z) = e^-z * sigmoid(z) for the same reason.
 * Every operation goes through fmath.h, so results do not depend on the
 * compiler or the device: the GPU and vdev give the same bits (below:
 * how, and the error bounds against float64). */
#ifndef TE_KERNELS_ACT_H
#define TE_KERNELS_ACT_H

#include "fmath.h"

#define TE_ACT_GELU 0
#define TE_ACT_RELU 1
#define TE_ACT_SILU 2
#define TE_ACT_QGELU 3
#define TE_ACT_SWIGLU 4
#define TE_ACT_GEGLU 5
#define TE_ACT_REGLU 6
#define TE_ACT_COUNT 7

/* 1 for the gated kinds (input row twice as wide as the output row). */
TE_HD int te_act_is_gated(int kind) { return kind >= TE_ACT_SWIGLU && kind <= TE_ACT_REGLU; }
/* The elementwise activation a gated kind applies to its first half. */
TE_HD int te_act_base(int kind) {
  return kind == TE_ACT_SWIGLU ? TE_ACT_SILU
         : kind == TE_ACT_GEGLU ? TE_ACT_GELU
         : kind == TE_ACT_REGLU ? TE_ACT_RELU
                                : kind;
}

/* ---- how the sigmoid is computed ------------------------------------------
 *
 * Every activation but RELU is x * s with s = sigmoid(z) = 1 / (1 + e^-z).
 * The sigmoid is built from operations that round the same on both sides
 * (fmath.h): fma, mul and add with round-to-nearest-even, integer
 * operations on the bits, and a correctly rounded reciprocal; no library
 * calls and no hardware approximations.
 *
 *   u = z * log2(e), with the log2(e) folded into the constants of z:
 *       GELU  u = x * (A1 + A2 x^2)       (A1 = K1 log2 e, A2 = K2 log2 e)
 *       SILU  u = x * L2E                 (L2E as a float pair hi + lo)
 *       QGELU u = x * 1.702 log2(e)       (as a float pair hi + lo)
 *   x is first clamped (NaN kept) to [-C, C], C the largest value with
 *   |u| <= 125 (GELU 9.96875, SILU 86.5, QGELU 50.75); beyond it the
 *   sigmoid is 1 or below 2^-124 and the results are x and about 0.
 *   n = rint(-u) (adding 1.5*2^23 in the fma that forms -u), r = -u - n
 *   in one rounding (|r| <= 1/2), then a second fma with the low part of
 *   the constant for SILU and QGELU, whose argument is exact.
 *   2^r: p(r) = 1 + r(c1 + r(c2 + r(c3 + r(c4 + r c5)))), the relative
 *   minimax polynomial on [-1/2, 1/2] with p(0) = 1 (5 fmas): relative
 *   error 9.1e-8 (1.53 * 2^-24) in real arithmetic.
 *   e = 2^-u = p * 2^n by adding n to p's exponent field (integer add: n in
 *   [-125, 125] keeps e normal, so the scaling is exact).
 *   Below -C the output is x * s with x taken as 0 (one compare and select).
 *   s = 1 / (1 + e), correctly rounded (1 + e is in [1, 2^126): fmath.h's
 *   te_rcp_rn_1_2p126, three instructions on the GPU, no branch).
 *   1 - s = e * s (no cancellation where s -> 1).
 *
 * GELU, 18 operations an element on the GPU against 33 for the previous
 * e^x with its 2-term reduction, degree-6 polynomial, scale by multiply
 * and range-checked reciprocal.
 *
 * ---- error bounds (against float64; u = 2^-24) ------------------------------
 *
 * Measured over every BF16 input (t/core/check_act_exact.c asserts these) and
 * derived from the operation count (each rounding <= u/2 relative; the
 * polynomial's 1.53u; the argument u carries the rounding of z, whose
 * effect on e^-z grows with |z|):
 *   act(x), x >= -C:   |err| <= (4 + 2|z|) u |act(x)|
 *   act'(x), x >= -C:  |err| <= (6 + 3|z|) u (|s| + |x s (1-s) z'|)
 *   x < -C:            act(x) = 0 (+0); |act'(x)| and the errors below 2^-115.
 * The bounds are the ones t/core/check_act.c has tested the kernels against
 * since the first version of the math. */

/* 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715: z = x*(K1 + K2*x^2). */
#define TE_ACT_GELU_K1 1.59576912161f
#define TE_ACT_GELU_K2 0.0713548162726f
#define TE_ACT_GELU_K2X3 0.214064449f            /* 3*K2: z' = K1 + 3*K2*x^2 */
#define TE_ACT_GELU_A1 2.30220818520f            /* K1 * log2(e) */
#define TE_ACT_GELU_A2 0.102943241596f           /* K2 * log2(e) */
#define TE_ACT_GELU_C 9.96875f
#define TE_ACT_QGELU_K 1.702f
#define TE_ACT_QGELU_L2 2.45546698570f            /* 1.702 * log2(e), high part */
#define TE_ACT_QGELU_L2LO (-2.61094986e-08f)      /* and the rest */
#define TE_ACT_QGELU_C 50.75f
#define TE_ACT_L2E 1.44269502163f                 /* log2(e), high part */
#define TE_ACT_L2ELO 1.92596303e-08f              /* and the rest */
#define TE_ACT_SILU_C 86.5f

/* 2^-(a*k + a*klo) for |a*k| <= 125.4 (a NaN gives some value: the callers
 * carry a NaN x to their result through x itself). */
TE_HD float te_act_exp2m_(float a, float k, float klo) {
  const float shifter = 12582912.0f;                /* 1.5 * 2^23 */
  float t = te_fma_rn(-a, k, shifter);              /* low bits: n = rint(-a*k) */
  float n = te_sub_rn(t, shifter);
  float r = te_fma_rn(-a, k, -n);
  if (klo != 0.0f) r = te_fma_rn(-a, klo, r);
  float p = 1.3264727313e-03f;
  p = te_fma_rn(p, r, 9.6715129912e-03f);
  p = te_fma_rn(p, r, 5.5507335812e-02f);
  p = te_fma_rn(p, r, 2.4022242427e-01f);
  p = te_fma_rn(p, r, 6.9314700365e-01f);
  p = te_fma_rn(p, r, 1.0f);
  /* bits(t) = bits(1.5*2^23) + n and bits(1.5*2^23) << 23 is 0 mod 2^32,
   * so bits(t) << 23 is n << 23: one shift-and-add (LEA) on the GPU. */
  return te_bits_f32(te_f32_bits(p) + (te_f32_bits(t) << 23));
}

/* The parts of one activation at x: xc (x clamped, NaN kept), xm (x, or 0
 * below -C: the factor of the output), s = sigmoid(z), e = e^-z (so
 * 1 - s = e*s). */
struct te_act_sig {
  float xc, xm, s, e;
};

/* x, or 0 where x < lo (NaN kept): one compare and one select. */
TE_HD float te_act_xm_(float x, float lo) { return x < lo ? 0.0f : x; }

/* The sigmoid of kind base at x.  deriv: the caller needs xc for act'
 * (x clamped on both sides); otherwise only s and xm are used, and xc is
 * clamped from xm (0 below -C: one operation fewer, the same s where
 * x >= -C). */
TE_HD struct te_act_sig te_act_sig_of(int base, float x, int deriv) {
  struct te_act_sig g;
  const float c = base == TE_ACT_GELU ? TE_ACT_GELU_C
                  : base == TE_ACT_SILU ? TE_ACT_SILU_C : TE_ACT_QGELU_C;
  g.xm = te_act_xm_(x, -c);
  g.xc = deriv ? te_clamp_nan(x, -c, c) : te_fmin_nan2(g.xm, c);
  if (base == TE_ACT_GELU) {
    float k = te_fma_rn(te_mul_rn(g.xc, g.xc), TE_ACT_GELU_A2, TE_ACT_GELU_A1);
    g.e = te_act_exp2m_(g.xc, k, 0.0f);
  } else if (base == TE_ACT_SILU) {
    g.e = te_act_exp2m_(g.xc, TE_ACT_L2E, TE_ACT_L2ELO);
  } else {
    g.e = te_act_exp2m_(g.xc, TE_ACT_QGELU_L2, TE_ACT_QGELU_L2LO);
  }
  g.s = te_rcp_rn_1_2p126(te_add_rn(1.0f, g.e));
  return g;
}

/* x * s, and 0 where x < -C: there s stays about 2^-125 (the clamp) while
 * the true product is below 2^-115, and x * s would be far from it (-inf
 * * s is -inf).  act(-huge) = 0 as before. */
TE_HD float te_act_xs_(const struct te_act_sig *g) { return te_mul_rn(g->xm, g->s); }

/* d/dx (x s(z)) = s + x z' s (1 - s), z' = dz/dx, 1 - s = e*s; the
 * clamped x keeps inf * 0 out (and is x where it matters). */
TE_HD float te_act_d_(int base, const struct te_act_sig *g) {
  float dz = base == TE_ACT_GELU
                 ? te_fma_rn(te_mul_rn(g->xc, g->xc), TE_ACT_GELU_K2X3, TE_ACT_GELU_K1)
                 : base == TE_ACT_SILU ? 1.0f : TE_ACT_QGELU_K;
  float xdz = base == TE_ACT_SILU ? g->xc : te_mul_rn(g->xc, dz);
  return te_fma_rn(xdz, te_mul_rn(g->s, te_mul_rn(g->e, g->s)), g->s);
}

TE_HD float te_act_relu(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }
TE_HD float te_act_drelu(float x) { return x > 0.0f ? 1.0f : (x != x ? x : 0.0f); }

TE_HD float te_act_gelu(float x) {
  struct te_act_sig g = te_act_sig_of(TE_ACT_GELU, x, 0);
  return te_act_xs_(&g);
}
TE_HD float te_act_silu(float x) {
  struct te_act_sig g = te_act_sig_of(TE_ACT_SILU, x, 0);
  return te_act_xs_(&g);
}
TE_HD float te_act_qgelu(float x) {
  struct te_act_sig g = te_act_sig_of(TE_ACT_QGELU, x, 0);
  return te_act_xs_(&g);
}
TE_HD float te_act_dgelu(float x) {
  struct te_act_sig g = te_act_sig_of(TE_ACT_GELU, x, 1);
  return te_act_d_(TE_ACT_GELU, &g);
}
TE_HD float te_act_dsilu(float x) {
  struct te_act_sig g = te_act_sig_of(TE_ACT_SILU, x, 1);
  return te_act_d_(TE_ACT_SILU, &g);
}
TE_HD float te_act_dqgelu(float x) {
  struct te_act_sig g = te_act_sig_of(TE_ACT_QGELU, x, 1);
  return te_act_d_(TE_ACT_QGELU, &g);
}

/* act(x) for a base kind (GELU, RELU, SILU, QGELU); a gated kind maps to
 * its base.  With kind a compile-time constant the switch folds away. */
TE_HD float te_act_fwd(int kind, float x) {
  switch (te_act_base(kind)) {
    case TE_ACT_GELU: return te_act_gelu(x);
    case TE_ACT_RELU: return te_act_relu(x);
    case TE_ACT_SILU: return te_act_silu(x);
    default: return te_act_qgelu(x);
  }
}
/* act'(x) for a base kind (gated kinds map to their base). */
TE_HD float te_act_dact(int kind, float x) {
  switch (te_act_base(kind)) {
    case TE_ACT_GELU: return te_act_dgelu(x);
    case TE_ACT_RELU: return te_act_drelu(x);
    case TE_ACT_SILU: return te_act_dsilu(x);
    default: return te_act_dqgelu(x);
  }
}
/* act(x) and act'(x) together, sharing the one exp (gated backward). */
TE_HD void te_act_fwd_dact(int kind, float x, float *y, float *d) {
  int base = te_act_base(kind);
  if (base == TE_ACT_RELU) {
    *y = te_act_relu(x);
    *d = te_act_drelu(x);
    return;
  }
  struct te_act_sig g = te_act_sig_of(base, x, 1);
  *y = te_act_xs_(&g);
  *d = te_act_d_(base, &g);
}

/* Backward of an elementwise activation: dx = dy * act'(x).  (The dact
 * kernels of the cast-transpose family use this same product.) */
TE_HD float te_act_bwd(int kind, float x, float dy) { return te_mul_rn(dy, te_act_dact(kind, x)); }

/* Gated forward: act(a) * b. */
TE_HD float te_act_gated_fwd(int kind, float a, float b) { return te_mul_rn(te_act_fwd(kind, a), b); }
/* Gated backward: da = dy * b * act'(a) (as (dy*b)*act'(a)), db = dy * act(a). */
TE_HD void te_act_gated_bwd(int kind, float a, float b, float dy, float *da, float *db) {
  float y, d;
  te_act_fwd_dact(kind, a, &y, &d);
  *da = te_mul_rn(te_mul_rn(dy, b), d);
  *db = te_mul_rn(dy, y);
}

#endif
