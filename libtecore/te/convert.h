/* SPDX-License-Identifier: Apache-2.0
 * te/convert.h -- host conversions between float and libte's 16- and 8-bit
 * element types, for callers that prepare inputs or read results on the
 * CPU: BF16, F16 (IEEE binary16), E4M3 and E5M2 (OCP FP8).  They give the
 * same bits as the kernels because they are the same code: the element
 * math of kernels/common that the GPU kernels and the vdev backend use.
 *
 * float -> BF16: round to nearest, ties to even; not saturating (a value
 *   that rounds past the largest finite BF16 becomes +-infinity; infinity
 *   stays infinity); float subnormals round like any value; a NaN stays a
 *   quiet NaN with its sign and the top 7 payload bits.
 * float -> F16: round to nearest, ties to even; not saturating (|x| >=
 *   65520 becomes +-infinity); F16 subnormals are exact; a NaN becomes
 *   the quiet NaN 0x7E00 with its sign.
 * float -> E4M3 / E5M2: round to nearest, ties to even; saturating, as the
 *   quantize kernels (cvt.rn.satfinite on Hopper): a finite value past the
 *   largest finite, and +-infinity, become +-448 (E4M3) or +-57344 (E5M2),
 *   so E5M2 never holds infinity here; a NaN (either sign) becomes 0x7F;
 *   -0 stays -0; float subnormals become +-0.  No scale is applied: the
 *   kernels store fp8(x * scale), so pass x * scale for their bytes.
 * BF16, F16, E4M3, E5M2 -> float: exact.  BF16 NaNs keep their payload;
 *   F16 NaNs keep sign and payload; an FP8 NaN becomes 0x7FC00000 with its
 *   sign.  E5M2 infinities become float infinities.
 *
 * The scalar forms are plain functions of their argument.  The array forms
 * convert n elements of in to out (caller memory, host addresses), return
 * TECORE_ERR_INVALID naming the argument when in or out is NULL with n > 0
 * or when the two ranges overlap, and touch nothing then; n = 0 succeeds.
 * All are thread-safe and need no tecore_init(). */
#ifndef TE_CONVERT_H
#define TE_CONVERT_H

#include <stddef.h>
#include <stdint.h>
#include <te/result.h>

#ifdef __cplusplus
extern "C" {
#endif

uint16_t tecore_f32_to_bf16(float x);
float tecore_bf16_to_f32(uint16_t h);
uint16_t tecore_f32_to_f16(float x);
float tecore_f16_to_f32(uint16_t h);
uint8_t tecore_f32_to_e4m3(float x);
float tecore_e4m3_to_f32(uint8_t c);
uint8_t tecore_f32_to_e5m2(float x);
float tecore_e5m2_to_f32(uint8_t c);

tecore_result_t tecore_cvt_f32_to_bf16(const float *in, uint16_t *out, size_t n);
tecore_result_t tecore_cvt_bf16_to_f32(const uint16_t *in, float *out, size_t n);
tecore_result_t tecore_cvt_f32_to_f16(const float *in, uint16_t *out, size_t n);
tecore_result_t tecore_cvt_f16_to_f32(const uint16_t *in, float *out, size_t n);
tecore_result_t tecore_cvt_f32_to_e4m3(const float *in, uint8_t *out, size_t n);
tecore_result_t tecore_cvt_e4m3_to_f32(const uint8_t *in, float *out, size_t n);
tecore_result_t tecore_cvt_f32_to_e5m2(const float *in, uint8_t *out, size_t n);
tecore_result_t tecore_cvt_e5m2_to_f32(const uint8_t *in, float *out, size_t n);

#ifdef __cplusplus
}
#endif
#endif
