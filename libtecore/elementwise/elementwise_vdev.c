/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise_vdev.c -- the vdev twins of kernels/elementwise.cu: fill,
 * uniform initialization,
 * scale-add and memset over the whole grid on the stream's worker, from
 * the same kernels/common/elementwise.h math (elementwise.c's table names
 * them). */
#include "elementwise/elementwise_internal.h"
#include "common/colsum.h"

#include <string.h>

/* ---- vdev implementations (run the whole grid on the stream's worker) ---- */

void te_ew_vdev_fill(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_fill_args a = te_fill_args_of(args);
  (void)cfg;
  for (unsigned long long i = 0; i < a.n; i++) te_ew_store(a.dst, i, a.dtype, a.value);
}

void te_ew_vdev_init_uniform(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_init_uniform_args a = te_init_uniform_args_of(args);
  (void)cfg;
  for (unsigned long long i = 0; i < a.n; i++)
    te_ew_store(a.dst, i, a.dtype, te_ew_uniform(a.state, i, a.bound, a.round));
}

void te_ew_vdev_scale_add(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_scale_add_args k = te_scale_add_args_of(args);
  (void)cfg;
  for (unsigned long long i = 0; i < k.n; i++)
    te_ew_store(k.dst, i, k.dtype,
                te_ew_scale_add(te_ew_load(k.a, i, k.dtype), k.alpha, te_ew_load(k.b, i, k.dtype),
                                k.beta));
}

void te_ew_vdev_memset(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_memset_args a = te_memset_args_of(args);
  (void)cfg;
  for (unsigned long long i = 0; i < a.n; i++) {
    if (a.elem_size == 1) ((uint8_t *)a.dst)[i] = (uint8_t)a.value;
    else if (a.elem_size == 2) ((uint16_t *)a.dst)[i] = (uint16_t)a.value;
    else ((uint32_t *)a.dst)[i] = a.value;
  }
}

void te_ew_vdev_copy(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_copy_args a = te_copy_args_of(args);
  (void)cfg;
  te_host_move(a.dst, a.src, a.n);
}

void te_ew_vdev_copy2d_u32(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_copy2d_u32_args a = te_copy2d_u32_args_of(args);
  (void)cfg;
  const struct te_copy2d c = {.dst = (tecore_devptr_t)(uintptr_t)a.dst,
                              .src = (tecore_devptr_t)(uintptr_t)a.src, .drows = a.drows,
                              .dcols = a.dcols, .srows = a.srows, .scols = a.scols,
                              .dsi = a.dsi, .dsj = a.dsj, .ssi = a.ssi, .ssj = a.ssj};
  te_copy2d_on_host(&c);
}

/* te_colsum_part's sums in the kernel's order: per column, lane l adds
 * rows r0 + l, r0 + l + TE_COLSUM_LANES, ... of the part; then the lanes
 * in order. */
static float colsum_in(void *ctx, uint64_t i) {
  const struct te_colsum_part_args *a = ctx;
  return te_ew_load(a->in, i / a->cols * a->ld + i % a->cols, a->dtype);
}

void te_ew_vdev_colsum_part(const struct tecore_launch_cfg *cfg, void *const *args) {
  struct te_colsum_part_args a = te_colsum_part_args_of(args);
  (void)cfg;
  te_colsum_parts_host(a.ws, a.rows, a.cols, a.rpp, colsum_in, &a);
}

/* te_colsum_final's sums in the kernel's order. */
void te_ew_vdev_colsum_final(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_colsum_final_args a = te_colsum_final_args_of(args);
  (void)cfg;
  for (unsigned long long c = 0; c < a.cols; c++) {
    float t = 0.0f;
    for (unsigned l = 0; l < TE_COLSUM_FLANES; l++) {
      float s = 0.0f;
      for (unsigned long long p = l; p < a.parts; p += TE_COLSUM_FLANES)
        s = te_add_rn(s, a.ws[p * a.cols + c]);
      t = l == 0 ? s : te_add_rn(t, s);
    }
    a.out[c] = a.acc ? te_add_rn(a.out[c], t) : t;
  }
}

/* te_qkv_kv_bias in the kernel's order. */
void te_ew_vdev_qkv_kv_bias(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_qkv_kv_bias_args a = te_qkv_kv_bias_args_of(args);
  (void)cfg;
  const unsigned kvd = (unsigned)(a.kv_heads * a.head_dim), n_in = (unsigned)(a.heads * a.head_dim);
  const unsigned rep = (unsigned)(a.heads / a.kv_heads);
  for (unsigned c = 0; c < kvd; c++)
    if (!a.acc) a.out[c] = 0.0f;
  for (unsigned c = kvd; c < 2 * kvd; c++) {
    const unsigned g = (c - kvd) / (unsigned)a.head_dim, d = (c - kvd) % (unsigned)a.head_dim;
    float t = 0.0f;
    for (unsigned l = 0; l < TE_QKV_KV_LANES; l++) {
      float s = 0.0f;
      for (unsigned r = 0; r < rep; r++) {
        const unsigned j = (g * rep + r) * (unsigned)a.head_dim + d;
        for (unsigned i = l; i < a.n_out; i += TE_QKV_KV_LANES)
          s = te_add_rn(s, te_mul_rn(a.s[i], te_ew_load(a.w, (uint64_t)i * n_in + j, a.dtype)));
      }
      t = l == 0 ? s : te_add_rn(t, s);
    }
    a.out[c] = a.acc ? te_add_rn(a.out[c], t) : t;
  }
}
