/* SPDX-License-Identifier: Apache-2.0 */
/* te/dtype.h -- element types. */
#ifndef TE_DTYPE_H
#define TE_DTYPE_H

#include <stddef.h>
#include <te/result.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_dtype {
  TECORE_DTYPE_F32 = 0,
  TECORE_DTYPE_F16 = 1,
  TECORE_DTYPE_BF16 = 2,
  TECORE_DTYPE_E4M3 = 3,   /* FP8, 4 exponent bits, max 448, no infinity */
  TECORE_DTYPE_E5M2 = 4,   /* FP8, 5 exponent bits, max 57344 */
  TECORE_DTYPE_E8M0 = 5,   /* power-of-two scale byte (MXFP8) */
  TECORE_DTYPE_I32 = 6,
  TECORE_DTYPE_I64 = 7,
  TECORE_DTYPE_U8 = 8,
  TECORE_DTYPE_F64 = 9,
  TECORE_DTYPE_COUNT_
} tecore_dtype_t;

/* Bytes per element (0 for an unknown type). */
size_t tecore_dtype_size(tecore_dtype_t t);
/* "f32", "bf16", "e4m3", ... ("?" for an unknown type). */
const char *tecore_dtype_name(tecore_dtype_t t);

#ifdef __cplusplus
}
#endif
#endif
