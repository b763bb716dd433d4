/* SPDX-License-Identifier: Apache-2.0 */
/* parts_util.h -- what check_rope.c, check_embedding.c and check_xent.c
 * share beyond tests.h: device arrays of a dtype to and from host floats. */
#ifndef TE_T_PARTS_UTIL_H
#define TE_T_PARTS_UTIL_H

#include "tests.h"

static TE_T_UNUSED float pu_round(float v, tecore_dtype_t dt) {
  if (dt == TECORE_DTYPE_BF16) return tecore_bf16_to_f32(tecore_f32_to_bf16(v));
  if (dt == TECORE_DTYPE_F16) return tecore_f16_to_f32(tecore_f32_to_f16(v));
  return v;
}

/* n floats as dtype dt into new device memory (also rounds h in place, so
 * a reference sees what the device holds). */
static TE_T_UNUSED tecore_devptr_t pu_upload(float *h, size_t n, tecore_dtype_t dt) {
  size_t es = tecore_dtype_size(dt);
  unsigned char *b = malloc(n * es + 1);
  for (size_t i = 0; i < n; i++) {
    h[i] = pu_round(h[i], dt);
    if (dt == TECORE_DTYPE_F32) memcpy(b + 4 * i, &h[i], 4);
    else {
      uint16_t u = dt == TECORE_DTYPE_BF16 ? tecore_f32_to_bf16(h[i]) : tecore_f32_to_f16(h[i]);
      memcpy(b + 2 * i, &u, 2);
    }
  }
  tecore_devptr_t d = te_dalloc(n * es + 16);
  te_h2d(d, b, n * es);
  free(b);
  return d;
}

/* n elements of dtype dt at d, as floats. */
static TE_T_UNUSED void pu_download(float *h, tecore_devptr_t d, size_t n, tecore_dtype_t dt) {
  size_t es = tecore_dtype_size(dt);
  unsigned char *b = malloc(n * es + 1);
  te_d2h(b, d, n * es);
  for (size_t i = 0; i < n; i++) {
    if (dt == TECORE_DTYPE_F32) memcpy(&h[i], b + 4 * i, 4);
    else if (dt == TECORE_DTYPE_E4M3) h[i] = tecore_e4m3_to_f32(b[i]);
    else {
      uint16_t u;
      memcpy(&u, b + 2 * i, 2);
      h[i] = dt == TECORE_DTYPE_BF16 ? tecore_bf16_to_f32(u) : tecore_f16_to_f32(u);
    }
  }
  free(b);
}

static TE_T_UNUSED tecore_devptr_t pu_upload_i32(const int32_t *h, size_t n) {
  tecore_devptr_t d = te_dalloc(n * 4 + 16);
  te_h2d(d, h, n * 4);
  return d;
}

static TE_T_UNUSED struct tecore_tensor pu_tensor2(tecore_dtype_t dt, size_t rows, size_t cols,
                                                   tecore_devptr_t data) {
  struct tecore_tensor t;
  size_t shape[2] = {rows, cols};
  TE_OK(tecore_tensor_init(&t, dt, 2, shape, data));
  return t;
}

#endif
