/* SPDX-License-Identifier: Apache-2.0
 * convert.c -- the host conversions of te/convert.h.  Each is a call of
 * the element math the kernels use (kernels/common/convert.h for BF16 and
 * F16, kernels/common/fp8.h for E4M3 and E5M2), so there is one
 * implementation of every rounding rule and the host helpers cannot drift
 * from the device.  The array forms check their arguments, then loop. */
#include "internal.h"
#include "common/convert.h"
#include "common/fp8.h"

TE_EXPORT uint16_t tecore_f32_to_bf16(float x) { return te_f32_to_bf16(x); }
TE_EXPORT float tecore_bf16_to_f32(uint16_t h) { return te_bf16_to_f32(h); }
TE_EXPORT uint16_t tecore_f32_to_f16(float x) { return te_f32_to_f16(x); }
TE_EXPORT float tecore_f16_to_f32(uint16_t h) { return te_f16_to_f32(h); }
TE_EXPORT uint8_t tecore_f32_to_e4m3(float x) { return te_f32_to_e4m3(x); }
TE_EXPORT float tecore_e4m3_to_f32(uint8_t c) { return te_e4m3_to_f32(c); }
TE_EXPORT uint8_t tecore_f32_to_e5m2(float x) { return te_f32_to_e5m2(x); }
TE_EXPORT float tecore_e5m2_to_f32(uint8_t c) { return te_e5m2_to_f32(c); }

/* in and out given when n > 0, their byte ranges apart (a conversion in
 * place would read elements it already overwrote), no size overflow. */
static tecore_result_t check_arrays(const void *in, size_t in_size, const void *out,
                                    size_t out_size, size_t n, const char *fn) {
  if (n == 0) return TECORE_SUCCESS;
  TE_ARG(in, "%s: in is NULL (n = %zu)", fn, n);
  TE_ARG(out, "%s: out is NULL (n = %zu)", fn, n);
  TE_ARG(n <= SIZE_MAX / 4, "%s: n = %zu elements overflow the address space", fn, n);
  uintptr_t a = (uintptr_t)in, b = (uintptr_t)out;
  size_t ab = n * in_size, bb = n * out_size;
  TE_ARG(a + ab > a && b + bb > b, "%s: in or out wraps the address space (n = %zu)", fn, n);
  TE_ARG(a + ab <= b || b + bb <= a, "%s: in [%p, +%zu) and out [%p, +%zu) overlap", fn, in, ab,
         out, bb);
  return TECORE_SUCCESS;
}

/* One array form: name, element types, the element function. */
#define TE_CVT_ARRAY(name, tin, tout, elem)                                    \
  TE_EXPORT tecore_result_t name(const tin *in, tout *out, size_t n) {         \
    TE_CHECK(check_arrays(in, sizeof(tin), out, sizeof(tout), n, #name));     \
    for (size_t i = 0; i < n; i++) out[i] = elem(in[i]);                       \
    return TECORE_SUCCESS;                                                     \
  }

TE_CVT_ARRAY(tecore_cvt_f32_to_bf16, float, uint16_t, te_f32_to_bf16)
TE_CVT_ARRAY(tecore_cvt_bf16_to_f32, uint16_t, float, te_bf16_to_f32)
TE_CVT_ARRAY(tecore_cvt_f32_to_f16, float, uint16_t, te_f32_to_f16)
TE_CVT_ARRAY(tecore_cvt_f16_to_f32, uint16_t, float, te_f16_to_f32)
TE_CVT_ARRAY(tecore_cvt_f32_to_e4m3, float, uint8_t, te_f32_to_e4m3)
TE_CVT_ARRAY(tecore_cvt_e4m3_to_f32, uint8_t, float, te_e4m3_to_f32)
TE_CVT_ARRAY(tecore_cvt_f32_to_e5m2, float, uint8_t, te_f32_to_e5m2)
TE_CVT_ARRAY(tecore_cvt_e5m2_to_f32, uint8_t, float, te_e5m2_to_f32)
