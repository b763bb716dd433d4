/* SPDX-License-Identifier: Apache-2.0 */
/* rope_vdev.c -- the vdev implementation of kernels/rope.cu: every token,
 * head and pair in turn, with the shared math of kernels/common/rope.h
 * (the GPU's layout changes nothing: each output element is computed on
 * its own).  Runs on the stream's worker thread. */
#include "rope/rope_internal.h"
#include "common/ldst.h"

static void rope_vdev_store(void *y, uint64_t i, int dt, float v, float sc, float *am) {
  *am = te_amax_f32(*am, v);
  te_st(y, i, dt, te_dt_is_fp8(dt) ? te_mul_rn(v, sc) : v);
}

void te_rope_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_rope_args a = te_rope_args_of(args);
  (void)cfg;
  int dx = TE_ROPE_DT(a.dtypes, 0), dy = TE_ROPE_DT(a.dtypes, 1);
  int inter = a.flags & TE_ROPE_INTERLEAVED, inv = (a.flags & TE_ROPE_INVERSE) != 0;
  int half = a.rot_dim / 2;
  float sc = (te_dt_is_fp8(dy) && a.scale) ? *a.scale : 1.0f, am = 0.0f;
  if (a.scale_inv && a.scale) *a.scale_inv = te_fp8_scale_inv(*a.scale);
  for (unsigned long long t = 0; t < a.tokens; t++) {
    long long pos = te_rope_pos(t, a.positions, a.cu_seqlens, a.batch, a.seq_len);
    if (a.status && te_rope_table_miss(a.flags, pos, a.table_len) &&
        __atomic_load_n(a.status, __ATOMIC_RELAXED) == 0)
      __atomic_store_n(a.status, te_rope_status(t, pos), __ATOMIC_RELAXED);
    for (int h = 0; h < a.heads; h++) {
      uint64_t xb = t * a.x_ts + (uint64_t)h * a.x_hs, yb = t * a.y_ts + (uint64_t)h * a.y_hs;
      for (int i = 0; i < half; i++) {
        float c, s, y1, y2;
        if (a.flags & TE_ROPE_TABLE)
          te_rope_cs_table(pos, i, half, (struct te_rope_tab){a.cos_t, a.sin_t, a.table_len}, inv,
                           &c, &s);
        else
          te_rope_cs(pos, te_rope_inv_freq(i, a.rot_dim, a.log2_theta), inv, &c, &s);
        int j1 = inter ? 2 * i : i, j2 = inter ? 2 * i + 1 : i + half;
        te_rope_rot(te_ld(a.x, xb + j1, dx), te_ld(a.x, xb + j2, dx), c, s, &y1, &y2);
        rope_vdev_store(a.y, yb + j1, dy, y1, sc, &am);
        rope_vdev_store(a.y, yb + j2, dy, y2, sc, &am);
      }
      if (a.flags & TE_ROPE_INPLACE) continue;
      for (int j = a.rot_dim; j < a.head_dim; j++)
        rope_vdev_store(a.y, yb + j, dy, te_ld(a.x, xb + j, dx), sc, &am);
    }
  }
  if (a.amax && te_abs_bits(am)) te_vdev_amax_update(a.amax, te_abs_bits(am));
}
