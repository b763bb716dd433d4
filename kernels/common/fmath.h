/* fmath.h -- float (and double) arithmetic that gives the same bits on the GPU and in
 * the vdev C implementations: every operation is one IEEE operation with
 * round-to-nearest-even, written out so that neither compiler fuses a
 * multiply into a following add (nvcc contracts by default; gcc does too
 * when the target has FMA), and exp is computed here from those
 * operations instead of by the device's approximate instructions or the
 * host's libm, which disagree in the last bits.
 *
 * Used by kernels/common/act.h, norm.h and optim.h.  Values
 * only: no memory access, no launch shapes. */
#ifndef TE_KERNELS_FMATH_H
#define TE_KERNELS_FMATH_H

#include "te_hd.h"
#ifndef __CUDACC__
#include <math.h>
#endif

/* An empty asm on the host keeps the product in a register as a rounded
 * float, so a later add cannot be fused with it into an fma. */
#if !defined(__CUDA_ARCH__) && (defined(__GNUC__) || defined(__clang__))
#if defined(__x86_64__) || defined(__i386__)
#define TE_FMATH_BARRIER_(v) __asm__("" : "+x"(v))
#elif defined(__aarch64__)
#define TE_FMATH_BARRIER_(v) __asm__("" : "+w"(v))
#else
#define TE_FMATH_BARRIER_(v) __asm__("" : "+r"(v))
#endif
#else
#define TE_FMATH_BARRIER_(v) ((void)0)
#endif

TE_HD float te_mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  float r = a * b;
  TE_FMATH_BARRIER_(r);
  return r;
#endif
}
TE_HD float te_add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TE_HD float te_sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
/* a*b + c with one rounding. */
TE_HD float te_fma_rn(float a, float b, float c) {
#ifdef __CUDA_ARCH__
  return __fmaf_rn(a, b, c);
#else
  return fmaf(a, b, c);
#endif
}
TE_HD float te_div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
/* 1/a, correctly rounded (cheaper than a division on the GPU). */
TE_HD float te_rcp_rn(float a) {
#ifdef __CUDA_ARCH__
  return __frcp_rn(a);
#else
  return 1.0f / a;
#endif
}
TE_HD float te_sqrt_rn(float a) {
#ifdef __CUDA_ARCH__
  return __fsqrt_rn(a);
#else
  return sqrtf(a);
#endif
}
/* The same for doubles (the optimizers' bias corrections). */
TE_HD double te_dmul_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dmul_rn(a, b);
#else
  double r = a * b;
  TE_FMATH_BARRIER_(r);
  return r;
#endif
}
TE_HD double te_dsub_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
TE_HD double te_ddiv_rn(double a, double b) {
#ifdef __CUDA_ARCH__
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
TE_HD double te_dsqrt_rn(double a) {
#ifdef __CUDA_ARCH__
  return __dsqrt_rn(a);
#else
  return sqrt(a);
#endif
}

/* |a| and max without NaN games: both sides agree on these bit for bit. */
TE_HD float te_fabs(float a) { return te_bits_f32(te_f32_bits(a) & 0x7fffffffu); }
/* max(a, b) where a NaN b wins (so a NaN reaches amax and shows there). */
TE_HD float te_fmax_nan(float a, float b) { return (b > a || b != b) ? b : a; }

/* max(a, |v|) where a NaN wins: the amax update of the kernels (a >= 0 or
 * NaN).  On the GPU one max.NaN instruction (with |v| as a free operand
 * modifier); NaN results may differ in payload between the backends. */
TE_HD float te_amax_f32(float a, float v) {
#ifdef __CUDA_ARCH__
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(fabsf(v)));
  return r;
#else
  return te_fmax_nan(a, te_fabs(v));
#endif
}

/* e^x in float, within 1.1 ulp for normal results (0.34 ulp from the
 * polynomial plus the roundings of its evaluation), the same bits on both
 * sides.  Cody-Waite reduction x = n*ln2 + r with |r| <= ln2/2, a degree-6
 * polynomial for e^r interpolating it at the Chebyshev nodes of that
 * interval (relative error 2e-8), and a scale by 2^n split in two factors
 * so subnormal results round once and large ones overflow to infinity.
 * x is first clamped to [-104, 89] (beyond: 0 and infinity) with
 * fminf/fmaxf, so a NaN argument gives a finite value: the activations
 * that call this carry a NaN input through their other factor (x * s). */
TE_HD float te_exp_f32(float x) {
  x = fminf(fmaxf(x, -104.0f), 89.0f);
  /* n = rint(x * log2(e)): the product is added to 1.5*2^23, where the
   * float spacing is 1, in one rounding; the low bits of t are then n. */
  const float shifter = 12582912.0f;
  float t = te_fma_rn(x, 1.44269502163f, shifter);
  float n = te_sub_rn(t, shifter);
  int ni = (int)(te_f32_bits(t) - 0x4b400000u);
  float r = te_fma_rn(n, -0.693145751953125f, x);   /* ln2 high part: 16 bits */
  r = te_fma_rn(n, -1.42860676533e-06f, r);          /* ln2 low part */
  float p = 1.394110848e-03f;
  p = te_fma_rn(p, r, 8.375125937e-03f);
  p = te_fma_rn(p, r, 4.166635126e-02f);
  p = te_fma_rn(p, r, 1.666641533e-01f);
  p = te_fma_rn(p, r, 0.5f);
  p = te_fma_rn(p, r, 1.0f);
  p = te_fma_rn(p, r, 1.0f);
  /* 2^n as 2^a * 2^b, a = floor(n/2): both factors are normal floats for
   * n in [-150, 128]; p * 2^a is exact, the second product rounds once. */
  int a = ni >> 1, b = ni - a;
  float sa = te_bits_f32((uint32_t)(a + 127) << 23);
  float sb = te_bits_f32((uint32_t)(b + 127) << 23);
  return te_mul_rn(te_mul_rn(p, sa), sb);
}

#endif
