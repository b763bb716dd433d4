/* SPDX-License-Identifier: Apache-2.0 */
/* convert.h -- float <-> bf16 / f16 conversions, round to nearest even,
 * done in integer arithmetic so the GPU kernel and the vdev reference
 * produce the same bits (no reliance on the host's or device's
 * conversion instructions and their flush/rounding modes). */
#ifndef TE_KERNELS_CONVERT_H
#define TE_KERNELS_CONVERT_H

#include "te_hd.h"

/* bf16 is the top half of a float; round the dropped half to nearest even. */
TE_HD uint16_t te_f32_to_bf16(float f) {
  uint32_t u = te_f32_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* quiet NaN */
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
TE_HD float te_bf16_to_f32(uint16_t h) { return te_bits_f32((uint32_t)h << 16); }

/* IEEE binary16: 5 exponent bits (bias 15), 10 mantissa bits. */
TE_HD uint16_t te_f32_to_f16(float f) {
  uint32_t u = te_f32_bits(f);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return (uint16_t)(sign | 0x7e00u);      /* NaN */
  if (a >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);     /* >= 65520 rounds to inf */
  if (a < 0x38800000u) {                                        /* below 2^-14: subnormal */
    if (a < 0x33000000u) return (uint16_t)sign;                 /* below half of 2^-24 */
    uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - e;                                  /* value = m * 2^(e-150) = q units of 2^-24 */
    /* value = m * 2^(e-150); in units of 2^-24: m >> (126 - e) */
    uint32_t q = m >> shift, rem = m & ((1u << shift) - 1u), half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (q & 1u))) q++;
    return (uint16_t)(sign | q);
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);                   /* round mantissa to 10 bits */
  return (uint16_t)(sign | ((r - 0x38000000u) >> 13));
}
TE_HD float te_f16_to_f32(uint16_t h) {
  uint32_t sign = ((uint32_t)h & 0x8000u) << 16;
  uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0x1fu) return te_bits_f32(sign | 0x7f800000u | (m << 13));
  if (e == 0) {
    if (m == 0) return te_bits_f32(sign);
    /* subnormal: m * 2^-24, exact in float */
    float v = (float)m * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return te_bits_f32(sign | ((e + 112u) << 23) | (m << 13));
}

#endif
