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
 * The tanh form is evaluated as x * sigmoid(2u), u = sqrt(2/pi)(x +
 * 0.044715x^3), since 0.5(1 + tanh(u)) = sigmoid(2u); that keeps full
 * relative precision for negative x, where 1 + tanh(u) would cancel.
 * Derivatives use 1 - sigmoid(z) = e^-z * sigmoid(z) for the same reason.
 * Every operation goes through fmath.h, so results do not depend on the
 * compiler or the device. */
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

/* 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715: z = 2u = x*(K1 + K2*x^2). */
#define TE_ACT_GELU_K1 1.59576912161f
#define TE_ACT_GELU_K2 0.0713548162726f
#define TE_ACT_QGELU_K 1.702f

/* e^x for the sigmoid: te_exp_f32's reduction and polynomial with a
 * one-factor scale, x clamped to [-87.33, 88.73]: results below 2^-126
 * come out as about 2^-126 (added to 1, or multiplied by a sigmoid that
 * is then 1, they change nothing) and from x = 88.38 up as infinity (the
 * sigmoid is then 0, as it would be).  Four operations fewer than
 * te_exp_f32, which matters: these kernels are bound by instruction issue.
 * A NaN x gives a finite value (x's NaN reaches the result through x). */
TE_HD float te_act_exp_(float x) {
  x = fminf(fmaxf(x, -87.33f), 88.73f);
  const float shifter = 12582912.0f;
  float t = te_fma_rn(x, 1.44269502163f, shifter);
  float n = te_sub_rn(t, shifter);
  float r = te_fma_rn(n, -0.693145751953125f, x);
  r = te_fma_rn(n, -1.42860676533e-06f, r);
  float p = 1.394110848e-03f;
  p = te_fma_rn(p, r, 8.375125937e-03f);
  p = te_fma_rn(p, r, 4.166635126e-02f);
  p = te_fma_rn(p, r, 1.666641533e-01f);
  p = te_fma_rn(p, r, 0.5f);
  p = te_fma_rn(p, r, 1.0f);
  p = te_fma_rn(p, r, 1.0f);
  /* 2^n from t's low bits (n = bits(t) - bits(1.5*2^23)), n in [-126, 128]:
   * exponent field n + 127, 255 (infinity) for n = 128.  bits(1.5*2^23)
   * << 23 is 0 modulo 2^32, so the field is (bits(t) << 23) + (127 << 23):
   * one shift-and-add. */
  return te_mul_rn(p, te_bits_f32((te_f32_bits(t) << 23) + 0x3f800000u));
}

/* sigmoid(z) = 1/(1 + e^-z); *e_out gets e^-z (for 1 - sigmoid). */
TE_HD float te_act_sigmoid_e(float z, float *e_out) {
  float e = te_act_exp_(-z);
  *e_out = e;
  return te_rcp_rn(te_add_rn(1.0f, e));
}
TE_HD float te_act_sigmoid(float z) {
  float e;
  return te_act_sigmoid_e(z, &e);
}
/* 1 - sigmoid(z) from e = e^-z and s = sigmoid(z), without cancellation;
 * 1 where e overflowed (s is then 0 and e*s would be inf*0). */
TE_HD float te_act_one_minus_sigmoid(float e, float s) { return s > 0.0f ? te_mul_rn(e, s) : 1.0f; }

/* The argument z of the sigmoid in the GELU tanh form. */
TE_HD float te_act_gelu_z(float x) {
  return te_mul_rn(x, te_fma_rn(te_mul_rn(x, x), TE_ACT_GELU_K2, TE_ACT_GELU_K1));
}

TE_HD float te_act_gelu(float x) { return te_mul_rn(x, te_act_sigmoid(te_act_gelu_z(x))); }
TE_HD float te_act_relu(float x) { return (x > 0.0f || x != x) ? x : 0.0f; }
TE_HD float te_act_silu(float x) { return te_mul_rn(x, te_act_sigmoid(x)); }
TE_HD float te_act_qgelu(float x) {
  return te_mul_rn(x, te_act_sigmoid(te_mul_rn(TE_ACT_QGELU_K, x)));
}

/* Derivatives d act / dx. */
/* gelu' = s + x*s*(1-s)*dz/dx,  dz/dx = K1 + 3*K2*x^2. */
TE_HD float te_act_dgelu(float x) {
  float x2 = te_mul_rn(x, x);
  float z = te_mul_rn(x, te_fma_rn(x2, TE_ACT_GELU_K2, TE_ACT_GELU_K1));
  float e, s = te_act_sigmoid_e(z, &e);
  float dz = te_fma_rn(x2, 3.0f * TE_ACT_GELU_K2, TE_ACT_GELU_K1);
  float t = te_mul_rn(te_mul_rn(x, s), te_act_one_minus_sigmoid(e, s));
  return te_fma_rn(t, dz, s);
}
TE_HD float te_act_drelu(float x) { return x > 0.0f ? 1.0f : (x != x ? x : 0.0f); }
/* silu' = s + x*s*(1-s). */
TE_HD float te_act_dsilu(float x) {
  float e, s = te_act_sigmoid_e(x, &e);
  return te_fma_rn(te_mul_rn(x, s), te_act_one_minus_sigmoid(e, s), s);
}
/* qgelu' = s + 1.702*x*s*(1-s), s = sigmoid(1.702x). */
TE_HD float te_act_dqgelu(float x) {
  float z = te_mul_rn(TE_ACT_QGELU_K, x);
  float e, s = te_act_sigmoid_e(z, &e);
  return te_fma_rn(te_mul_rn(z, s), te_act_one_minus_sigmoid(e, s), s);
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
  switch (te_act_base(kind)) {
    case TE_ACT_GELU: {
      float x2 = te_mul_rn(x, x);
      float z = te_mul_rn(x, te_fma_rn(x2, TE_ACT_GELU_K2, TE_ACT_GELU_K1));
      float e, s = te_act_sigmoid_e(z, &e);
      float dz = te_fma_rn(x2, 3.0f * TE_ACT_GELU_K2, TE_ACT_GELU_K1);
      float xs = te_mul_rn(x, s);
      *y = xs;
      *d = te_fma_rn(te_mul_rn(xs, te_act_one_minus_sigmoid(e, s)), dz, s);
      return;
    }
    case TE_ACT_RELU:
      *y = te_act_relu(x);
      *d = te_act_drelu(x);
      return;
    case TE_ACT_SILU: {
      float e, s = te_act_sigmoid_e(x, &e);
      float xs = te_mul_rn(x, s);
      *y = xs;
      *d = te_fma_rn(xs, te_act_one_minus_sigmoid(e, s), s);
      return;
    }
    default: {
      float z = te_mul_rn(TE_ACT_QGELU_K, x);
      float e, s = te_act_sigmoid_e(z, &e);
      *y = te_mul_rn(x, s);
      *d = te_fma_rn(te_mul_rn(z, s), te_act_one_minus_sigmoid(e, s), s);
      return;
    }
  }
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
