/* SPDX-License-Identifier: Apache-2.0 */
/* fuser_vals.h -- what check_fuser_ops.c, check_fuser_sp.c and check_dp_fp8.c share:
 * F32/BF16 host values, each rank's seeded inputs (any rank regenerates a
 * peer's), device buffers and 2-D tensors inside a forked rank
 * (comm_ranks.h's RK_CORE). */
#ifndef TE_T_FUSER_VALS_H
#define TE_T_FUSER_VALS_H

#include "comm_ranks.h"
#include "common/convert.h"

static inline double from_dt(const void *p, size_t i, tecore_dtype_t dt) {
  if (dt == TECORE_DTYPE_F32) return ((const float *)p)[i];
  return te_bf16_to_f32(((const uint16_t *)p)[i]);
}
static inline void to_dt(void *p, size_t i, tecore_dtype_t dt, float v) {
  if (dt == TECORE_DTYPE_F32) ((float *)p)[i] = v;
  else ((uint16_t *)p)[i] = te_f32_to_bf16(v);
}

/* Rank r's values for salt: uniform in [-2, 2) without zeros; any rank
 * regenerates any peer's. */
static inline void make_vals(void *p, size_t n, tecore_dtype_t dt, int r, uint64_t salt) {
  uint64_t x = te_test_seed ^ ((uint64_t)(r + 1) << 40) ^ (salt * 0x9e3779b97f4a7c15ull);
  for (size_t i = 0; i < n; i++) {
    float v = (float)((double)(te_splitmix64(&x) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    to_dt(p, i, dt, v == 0.0f ? 0.5f : v);
  }
}

static inline tecore_devptr_t dev_alloc(size_t bytes) {
  tecore_devptr_t p = 0;
  RK_CORE(tecore_mem_alloc(bytes, &p));
  return p;
}

static inline struct tecore_tensor t2(tecore_dtype_t dt, size_t r, size_t c, tecore_devptr_t p) {
  struct tecore_tensor t;
  size_t sh[2] = {r, c};
  RK_CORE(tecore_tensor_init(&t, dt, 2, sh, p));
  return t;
}

#endif
