/* SPDX-License-Identifier: Apache-2.0 */
/* fp8.h -- FP8 element math shared byte for byte by the CUDA kernels
 * (kernels/quantize.cu, cast-transpose, activations, norms) and the vdev C
 * implementations: float <-> E4M3 / E5M2, E8M0 block scales (MXFP8), the
 * per-tensor and per-block scale rules, and amax as integer bits.
 *
 * Everything is integer arithmetic or single IEEE operations (one multiply,
 * one divide) whose result is correctly rounded on both sides, so a CPU and
 * a GPU give identical bytes.  Kernels must be built without fast math and
 * without flush-to-zero (nvcc's defaults), because some products below may
 * be float subnormals.
 *
 * Formats (OCP 8-bit floating point, v1.0):
 *   E4M3 ("e4m3fn"): bias 7, 3 mantissa bits, no infinity; S.1111.111 is
 *        NaN; max finite 448 (0x7E); min normal 2^-6; min subnormal 2^-9.
 *   E5M2: bias 15, 2 mantissa bits, IEEE-like; max finite 57344 (0x7B);
 *        S.11111.00 is infinity; min normal 2^-14; min subnormal 2^-16.
 *   E8M0: an exponent byte, value 2^(e-127); 0xFF is NaN; no zero, no sign.
 *
 * float -> FP8 (te_f32_to_e4m3, te_f32_to_e5m2):
 *   - round to nearest, ties to even, subnormals exact (no flush);
 *   - saturating: a finite value beyond the max finite, and +-infinity,
 *     become +-max finite (E5M2 never produces infinity);
 *   - NaN becomes the canonical NaN 0x7F in both formats, whatever its
 *     sign and payload (for E5M2 that is 0.11111.11, a quiet NaN);
 *   - -0 stays -0 (0x80); float subnormals become +-0.
 * FP8 -> float is exact; an FP8 NaN becomes 0x7FC00000 with its sign.
 *
 * These are exactly the rules of Hopper's cvt.rn.satfinite.{e4m3,e5m2}x2.f32:
 * t/gpu/fp8_convert_exhaustive.cu checks all 2^32 floats on an H100 (the
 * integer code on the device = the integer code on the host = the hardware
 * instruction), so the CUDA kernels convert pairs with the instruction
 * (te_f32x2_to_fp8x2) and the vdev uses the integer code. */
#ifndef TE_KERNELS_FP8_H
#define TE_KERNELS_FP8_H

#include "te_hd.h"

/* Element type codes: tecore_dtype_t values (te/dtype.h). */
#define TE_FP8_DT_F32 0
#define TE_FP8_DT_F16 1
#define TE_FP8_DT_BF16 2
#define TE_FP8_DT_E4M3 3
#define TE_FP8_DT_E5M2 4

#define TE_E4M3_MAX 448.0f
#define TE_E5M2_MAX 57344.0f
#define TE_E4M3_MAX_BITS 0x43e00000u   /* 448 as float bits */
#define TE_E5M2_MAX_BITS 0x47600000u   /* 57344 as float bits */
#define TE_E4M3_EMAX 8                 /* floor(log2(448)) */
#define TE_E5M2_EMAX 15                /* floor(log2(57344)) */
#define TE_FP8_NAN 0x7fu               /* canonical NaN of both formats */
#define TE_F32_MAX_BITS 0x7f7fffffu    /* FLT_MAX */

/* ---- float -> FP8 ---------------------------------------------------------
 * One routine for both formats: mbits mantissa bits, exponent bias, the
 * float bits of the max finite and its code. */
TE_HD uint8_t te_f32_to_fp8_(float f, uint32_t mbits, uint32_t bias, uint32_t max_bits,
                             uint32_t max_code) {
  uint32_t u = te_f32_bits(f);
  uint32_t sign = (u >> 24) & 0x80u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint8_t)TE_FP8_NAN;
  if (a >= max_bits) return (uint8_t)(sign | max_code);   /* saturate, infinity included */
  uint32_t e = a >> 23;
  if (e >= 128u - bias) {
    /* normal in FP8: round the float's mantissa to mbits bits (nearest even);
     * a carry into the exponent is the right answer, and below max_bits the
     * result cannot pass max_code */
    uint32_t drop = 23u - mbits;
    uint32_t r = a + ((1u << (drop - 1u)) - 1u) + ((a >> drop) & 1u);
    return (uint8_t)(sign | ((r >> drop) - ((127u - bias) << mbits)));
  }
  if (e == 0) return (uint8_t)sign;   /* float zero or subnormal: far below FP8's range */
  /* FP8 subnormal: the value m * 2^(e-150) in units of 2^(1-bias-mbits) is
   * m >> shift, rounded to nearest even.  shift > 24 leaves less than half
   * a unit (m < 2^24), which rounds to zero. */
  uint32_t m = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 151u - bias - mbits - e;
  if (shift > 24u) return (uint8_t)sign;
  uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
  if (rem > half || (rem == half && (q & 1u))) q++;   /* q == 1<<mbits is the min normal */
  return (uint8_t)(sign | q);
}

TE_HD uint8_t te_f32_to_e4m3(float f) { return te_f32_to_fp8_(f, 3u, 7u, TE_E4M3_MAX_BITS, 0x7eu); }
TE_HD uint8_t te_f32_to_e5m2(float f) { return te_f32_to_fp8_(f, 2u, 15u, TE_E5M2_MAX_BITS, 0x7bu); }

/* dtype: TE_FP8_DT_E4M3 or TE_FP8_DT_E5M2. */
TE_HD uint8_t te_f32_to_fp8(float f, int dtype) {
  return dtype == TE_FP8_DT_E4M3 ? te_f32_to_e4m3(f) : te_f32_to_e5m2(f);
}

/* Two floats to two FP8 bytes, lo in bits 0-7 and hi in bits 8-15: the
 * hardware instruction on sm_89+ (bit-identical, see above), the integer
 * code elsewhere.  dtype is a compile-time constant in the kernels. */
TE_HD uint16_t te_f32x2_to_fp8x2(float lo, float hi, int dtype) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  uint16_t r;
  if (dtype == TE_FP8_DT_E4M3)
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
  return r;
#else
  return (uint16_t)(te_f32_to_fp8(lo, dtype) | ((uint32_t)te_f32_to_fp8(hi, dtype) << 8));
#endif
}

/* ---- FP8 -> float (exact) ------------------------------------------------ */
TE_HD float te_fp8_to_f32_(uint8_t c, uint32_t mbits, uint32_t bias, int has_inf) {
  uint32_t sign = ((uint32_t)c & 0x80u) << 24;
  uint32_t mag = (uint32_t)c & 0x7fu;
  uint32_t e = mag >> mbits, m = mag & ((1u << mbits) - 1u);
  uint32_t emask = (1u << (7u - mbits)) - 1u;
  if (has_inf) {
    if (e == emask) return te_bits_f32(sign | (m ? 0x7fc00000u : 0x7f800000u));
  } else if (mag == 0x7fu) {
    return te_bits_f32(sign | 0x7fc00000u);
  }
  if (e == 0) {
    if (m == 0) return te_bits_f32(sign);
    /* subnormal m * 2^(1-bias-mbits): normalize so the top set bit of m
     * becomes the implicit one */
    uint32_t p = 0;   /* index of m's top set bit */
    while ((m >> (p + 1u)) != 0) p++;
    uint32_t exp = 127u + 1u - bias - mbits + p;
    return te_bits_f32(sign | (exp << 23) | ((m << (23u - p)) & 0x7fffffu));
  }
  return te_bits_f32(sign | ((e + 127u - bias) << 23) | (m << (23u - mbits)));
}

TE_HD float te_e4m3_to_f32(uint8_t c) { return te_fp8_to_f32_(c, 3u, 7u, 0); }
TE_HD float te_e5m2_to_f32(uint8_t c) { return te_fp8_to_f32_(c, 2u, 15u, 1); }
TE_HD float te_fp8_to_f32(uint8_t c, int dtype) {
  return dtype == TE_FP8_DT_E4M3 ? te_e4m3_to_f32(c) : te_e5m2_to_f32(c);
}

/* Max finite of a format, and floor(log2) of it (the OCP "emax_elem"). */
TE_HD float te_fp8_max(int dtype) { return dtype == TE_FP8_DT_E4M3 ? TE_E4M3_MAX : TE_E5M2_MAX; }
TE_HD int te_fp8_emax(int dtype) { return dtype == TE_FP8_DT_E4M3 ? TE_E4M3_EMAX : TE_E5M2_EMAX; }

/* ---- amax ------------------------------------------------------------------
 * |x| as float bits.  Non-negative floats (and NaN with the sign cleared)
 * order like their bits as unsigned integers, so amax is an integer max —
 * one atomicMax on the GPU — and NaN wins over every number: a tensor with
 * a NaN has a NaN amax (bits of the largest |NaN| payload seen). */
TE_HD uint32_t te_abs_bits(float x) { return te_f32_bits(x) & 0x7fffffffu; }
TE_HD uint32_t te_max_u32(uint32_t a, uint32_t b) { return a > b ? a : b; }

TE_HD int te_f32_is_finite(float x) { return (te_f32_bits(x) & 0x7f800000u) != 0x7f800000u; }

/* ---- per-tensor and per-block scale rules ---------------------------------
 * The quantized value is q = fp8(x * scale); dequantization is
 * fp8_to_f32(q) * scale_inv with scale_inv = 1 / scale. */

/* Largest power of two <= s (s > 0, finite): the mantissa is dropped; a
 * subnormal keeps its top set bit. */
TE_HD float te_pow2_floor(float s) {
  uint32_t u = te_f32_bits(s) & 0x7fffffffu;
  if (u >= 0x00800000u) return te_bits_f32(u & 0x7f800000u);
  if (u == 0) return 0.0f;
  uint32_t p = 0;
  while ((u >> (p + 1u)) != 0) p++;
  return te_bits_f32(1u << p);
}

/* Delayed scaling: scale = fp8_max / amax * 2^-margin (margin_mult is
 * 2^-margin, an exact power of two, so multiplying equals dividing by
 * 2^margin).  When amax is 0, negative or not finite the old scale is kept
 * unchanged.  A quotient that overflows becomes FLT_MAX.  pow2 rounds the
 * new scale down to a power of two. */
TE_HD float te_fp8_delayed_scale(float amax, float old_scale, float fp8_max, float margin_mult,
                                 int pow2) {
  if (!(amax > 0.0f) || !te_f32_is_finite(amax)) return old_scale;
  float s = (fp8_max / amax) * margin_mult;
  if (!te_f32_is_finite(s)) s = te_bits_f32(TE_F32_MAX_BITS);
  if (pow2) s = te_pow2_floor(s);
  if (s == 0.0f) return old_scale;   /* only with an absurd margin: never store scale 0 */
  return s;
}

/* Current scaling (and each block of the 1x128 / 128x128 modes):
 * a = max(amax, epsilon); scale = fp8_max / a; 1.0 when amax is not finite
 * or a is 0; FLT_MAX when the quotient overflows; pow2 rounds the scale
 * down to a power of two. */
TE_HD float te_fp8_current_scale(float amax, float epsilon, float fp8_max, int pow2) {
  if (!te_f32_is_finite(amax)) return 1.0f;
  float a = amax < epsilon ? epsilon : amax;
  if (!(a > 0.0f)) return 1.0f;
  float s = fp8_max / a;
  if (!te_f32_is_finite(s)) s = te_bits_f32(TE_F32_MAX_BITS);
  if (pow2) s = te_pow2_floor(s);
  return s;
}

TE_HD float te_fp8_scale_inv(float scale) { return 1.0f / scale; }

/* ---- E8M0 block scales (MXFP8) ---------------------------------------------
 * The rule (OCP Microscaling Formats v1.0, section 6.3): a block of 32
 * elements with absolute maximum amax gets the shared scale
 *     X = 2^(floor(log2(amax)) - emax_elem)
 * (emax_elem = 8 for E4M3, 15 for E5M2), stored as the E8M0 byte
 *     e8 = clamp(floor(log2(amax)) - emax_elem + 127, 0, 254).
 * floor(log2(amax)) is read from amax's exponent field, so e8 is
 * (biased exponent of amax) - emax_elem, clamped below at 0 (amax zero or
 * float-subnormal gives 0, i.e. X = 2^-127).  amax infinite or NaN gives
 * 0xFF (NaN).  Elements are q = fp8(x * 2^(127-e8)) with saturation: values
 * up to 2^(emax_elem+1) * X - ulp exceed the format's max in the top binade
 * of a block and saturate, as the spec allows.  For e8 = 0xFF the multiplier
 * is NaN, so every element of such a block is NaN.  Dequantization is
 * fp8_to_f32(q) * 2^(e8-127). */
TE_HD uint8_t te_e8m0_from_amax(float amax, int dtype) {
  uint32_t a = te_abs_bits(amax);
  if (a >= 0x7f800000u) return 0xffu;
  int e = (int)(a >> 23) - te_fp8_emax(dtype);
  return (uint8_t)(e < 0 ? 0 : e);
}

/* 2^(e8-127) (the dequantization factor); NaN for 0xFF. */
TE_HD float te_e8m0_to_f32(uint8_t e8) {
  if (e8 == 0xffu) return te_bits_f32(0x7fc00000u);
  if (e8 == 0) return te_bits_f32(0x00400000u);          /* 2^-127, subnormal */
  return te_bits_f32((uint32_t)e8 << 23);
}

/* 2^(127-e8) (the quantization multiplier); NaN for 0xFF. */
TE_HD float te_e8m0_quant_mult(uint8_t e8) {
  if (e8 == 0xffu) return te_bits_f32(0x7fc00000u);
  if (e8 == 254u) return te_bits_f32(0x00400000u);        /* 2^-127 */
  return te_bits_f32((254u - (uint32_t)e8) << 23);
}

#endif
