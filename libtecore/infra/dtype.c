/* SPDX-License-Identifier: Apache-2.0 */
/* dtype.c -- element type sizes and names. */
#include "internal.h"

static const struct {
  size_t size;
  const char *name;
} dtypes[TECORE_DTYPE_COUNT_] = {
    [TECORE_DTYPE_F32] = {4, "f32"},  [TECORE_DTYPE_F16] = {2, "f16"},
    [TECORE_DTYPE_BF16] = {2, "bf16"}, [TECORE_DTYPE_E4M3] = {1, "e4m3"},
    [TECORE_DTYPE_E5M2] = {1, "e5m2"}, [TECORE_DTYPE_E8M0] = {1, "e8m0"},
    [TECORE_DTYPE_I32] = {4, "i32"},  [TECORE_DTYPE_I64] = {8, "i64"},
    [TECORE_DTYPE_U8] = {1, "u8"},    [TECORE_DTYPE_F64] = {8, "f64"},
};

TE_EXPORT size_t tecore_dtype_size(tecore_dtype_t t) {
  return (unsigned)t < TECORE_DTYPE_COUNT_ ? dtypes[t].size : 0;
}

TE_EXPORT const char *tecore_dtype_name(tecore_dtype_t t) {
  return (unsigned)t < TECORE_DTYPE_COUNT_ ? dtypes[t].name : "?";
}
