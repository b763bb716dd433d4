/* SPDX-License-Identifier: Apache-2.0 */
/* fmath.h -- float (and double) arithmetic that gives the same bits on the GPU and in
 * the vdev C implementations: every operation is one IEEE operation with
 * round-to-nearest-even, written out so that neither compiler fuses a
 * multiply into a following add (nvcc contracts by default; gcc does too
 * when the target has FMA), and exp is computed here from those
 * operations instead of by the device's approximate instructions or the
 * host's libm, which disagree in the last bits (act.h builds exp2 that
 * way).  The vdev C code also builds with -ffp-contract=off.
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

/* max and min where a NaN operand wins (clamps that must carry a NaN
 * argument through).  One max.NaN / min.NaN instruction on the GPU; the
 * two sides differ only in NaN payloads and in which zero max(-0, +0)
 * returns, which no caller asks. */
TE_HD float te_fmax_nan2(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || a > b) ? a : b;
#endif
}
TE_HD float te_fmin_nan2(float a, float b) {
#ifdef __CUDA_ARCH__
  float r;
  asm("min.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
#else
  return (a != a || a < b) ? a : b;
#endif
}
/* x limited to [lo, hi] (lo < 0 < hi); a NaN x stays NaN. */
TE_HD float te_clamp_nan(float x, float lo, float hi) {
  return te_fmin_nan2(te_fmax_nan2(x, lo), hi);
}

/* 1/d correctly rounded, for d in [1, 2^126) only (the sigmoids' 1 + e).
 * On the GPU: the hardware reciprocal (MUFU.RCP, within 1 ulp) and one
 * Newton step with fma, which is what rcp.rn compiles to once its check
 * for operands whose reciprocal is subnormal, zero or infinite has
 * passed; here the range makes the check and its branch unneeded, and
 * the result is the correctly rounded 1/d, as the host's division gives.
 * Outside the range the GPU's result may differ from the host's (the
 * callers only get there with a NaN argument, whose result is NaN). */
TE_HD float te_rcp_rn_1_2p126(float d) {
#ifdef __CUDA_ARCH__
  float r0, e, r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r0) : "f"(d));
  e = __fmaf_rn(-d, r0, 1.0f);
  r = __fmaf_rn(r0, e, r0);
  return r;
#else
  return 1.0f / d;
#endif
}

#endif
