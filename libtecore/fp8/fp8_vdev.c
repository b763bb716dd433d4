/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_vdev.c -- the vdev twins of the FP8 family's kernels
 * (kernels/quantize.cu, kernels/fp8_recipe.cu), from the same
 * kernels/common/quantize.h and fp8.h math: quantize.c's and recipe.c's
 * tables name them.  Plain loops over the whole tensor: every element's
 * result depends only on its value and its block's amax, and a max does
 * not depend on order, so the bytes agree with the GPU's. */
#include <string.h>
#include "fp8/fp8_kernels.h"

/* ---- quantize, amax, dequantize (kernels/quantize.cu) ---- */

static int vdev_noop(const int *noop) { return noop && *noop; }

/* One per-tensor quantization, described as a multi-tensor entry (the
 * flat kernel fills one; its block0 and nblocks are not read). */
static void vdev_quant_pt(const struct te_qmulti_entry *e, int current) {
  float s = te_q_tensor_scale(current, e->scale, e->amax, e->eps, e->out_dt, e->pow2);
  float si = te_fp8_scale_inv(s);
  uint8_t *out = e->out;
  if (current) *e->scale = s;
  if (e->scale_inv) *e->scale_inv = si;
  if (e->scale_inv_col) *e->scale_inv_col = si;
  uint32_t m = 0;
  for (uint64_t i = 0; i < e->n; i++) {
    float x = te_q_load(e->in, i, e->in_dt);
    m = te_max_u32(m, te_abs_bits(x));
    out[i] = te_f32_to_fp8(x * s, e->out_dt);
  }
  if (!current && e->amax) te_vdev_amax_update(e->amax, m);
}

void te_fp8_vdev_quantize_pt(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_quantize_pt_args a = te_quantize_pt_args_of(args);
  (void)cfg;
  if (vdev_noop(a.noop)) return;
  const struct te_qmulti_entry e = {
      .in = a.in, .out = a.out, .scale = a.scale, .scale_inv = a.scale_inv,
      .scale_inv_col = a.scale_inv_col, .amax = a.amax, .n = a.n, .in_dt = a.in_dt,
      .out_dt = a.out_dt, .eps = a.eps, .pow2 = a.pow2};
  vdev_quant_pt(&e, a.current);
}

static uint32_t vdev_amax_of(const void *in, uint64_t n, int dt) {
  uint32_t m = 0;
  for (uint64_t i = 0; i < n; i++) m = te_max_u32(m, te_abs_bits(te_q_load(in, i, dt)));
  return m;
}

void te_fp8_vdev_amax(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_amax_args a = te_amax_args_of(args);
  (void)cfg;
  if (vdev_noop(a.noop)) return;
  te_vdev_amax_update(a.amax, vdev_amax_of(a.in, a.n, a.dt));
}

void te_fp8_vdev_quantize_multi(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_qmulti_params *p = te_qmulti_args_of(args).p;
  (void)cfg;
  if (vdev_noop(p->noop)) return;
  for (int t = 0; t < p->count; t++) {
    vdev_quant_pt(&p->e[t], p->current);
  }
}

void te_fp8_vdev_amax_multi(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_qmulti_params *p = te_qmulti_args_of(args).p;
  (void)cfg;
  if (vdev_noop(p->noop)) return;
  for (int t = 0; t < p->count; t++)
    te_vdev_amax_update(p->e[t].amax, vdev_amax_of(p->e[t].in, p->e[t].n, p->e[t].in_dt));
}

void te_fp8_vdev_amax_init_multi(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_qmulti_params *p = te_qmulti_args_of(args).p;
  (void)cfg;
  if (vdev_noop(p->noop)) return;
  for (int t = 0; t < p->count; t++) __atomic_store_n(p->e[t].amax, 0u, __ATOMIC_RELAXED);
}

/* MXFP8: rowwise blocks of 32 along each row, columnwise blocks of 32 down
 * each column; both outputs [rows][cols]. */
void te_fp8_vdev_quantize_mx(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_quantize_mx_args a = te_quantize_mx_args_of(args);
  const void *in = a.in;
  int in_dt = a.in_dt;
  uint64_t rows = a.rows, cols = a.cols;
  uint8_t *out_row = a.out_row, *out_col = a.out_col;
  uint8_t *s_row = a.s_row, *s_col = a.s_col;
  int out_dt = a.out_dt;
  unsigned *amax = a.amax;
  (void)cfg;
  if (vdev_noop(a.noop)) return;
  const uint64_t nrb = (cols + 31) / 32;
  uint32_t m_all = 0;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t b = 0; b < nrb; b++) {
      uint64_t c0 = b * 32, c1 = c0 + 32 < cols ? c0 + 32 : cols;
      uint32_t m = 0;
      for (uint64_t c = c0; c < c1; c++) m = te_max_u32(m, te_abs_bits(te_q_load(in, r * cols + c, in_dt)));
      m_all = te_max_u32(m_all, m);
      if (!out_row) continue;
      uint8_t e8 = te_e8m0_from_amax(te_bits_f32(m), out_dt);
      float mult = te_e8m0_quant_mult(e8);
      s_row[r * nrb + b] = e8;
      for (uint64_t c = c0; c < c1; c++)
        out_row[r * cols + c] = te_f32_to_fp8(te_q_load(in, r * cols + c, in_dt) * mult, out_dt);
    }
  if (out_col)
    for (uint64_t rb = 0; rb * 32 < rows; rb++) {
      uint64_t r0 = rb * 32, r1 = r0 + 32 < rows ? r0 + 32 : rows;
      for (uint64_t c = 0; c < cols; c++) {
        uint32_t m = 0;
        for (uint64_t r = r0; r < r1; r++) m = te_max_u32(m, te_abs_bits(te_q_load(in, r * cols + c, in_dt)));
        uint8_t e8 = te_e8m0_from_amax(te_bits_f32(m), out_dt);
        float mult = te_e8m0_quant_mult(e8);
        s_col[rb * cols + c] = e8;
        for (uint64_t r = r0; r < r1; r++)
          out_col[r * cols + c] = te_f32_to_fp8(te_q_load(in, r * cols + c, in_dt) * mult, out_dt);
      }
    }
  if (amax) te_vdev_amax_update(amax, m_all);
}

/* Block scaling (1x128, 128x128) and per-tensor with transposed output. */
void te_fp8_vdev_quantize_blk(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_quantize_blk_args a = te_quantize_blk_args_of(args);
  const void *in = a.in;
  int in_dt = a.in_dt;
  uint64_t rows = a.rows, cols = a.cols;
  uint8_t *out_row = a.out_row, *out_col = a.out_col;
  float *s_row = a.s_row, *s_col = a.s_col;
  int out_dt = a.out_dt, mode = a.mode;
  const float *scale = a.scale;
  float eps = a.eps;
  int pow2 = a.pow2;
  unsigned *amax = a.amax;
  (void)cfg;
  if (vdev_noop(a.noop)) return;
  const float fmax = te_fp8_max(out_dt);
  const uint64_t T = TE_BLK_TILE, ntr = (rows + T - 1) / T, ntc = (cols + T - 1) / T;
#define X(r, c) te_q_load(in, (r) * cols + (c), in_dt)
  uint32_t m_all = 0;
  for (uint64_t i = 0; i < rows * cols; i++) m_all = te_max_u32(m_all, te_abs_bits(te_q_load(in, i, in_dt)));
  if (mode == TE_BLK_TENSOR) {
    float s = *scale, si = te_fp8_scale_inv(s);
    if (s_row) *s_row = si;
    if (s_col) *s_col = si;
    for (uint64_t r = 0; r < rows; r++)
      for (uint64_t c = 0; c < cols; c++) {
        uint8_t q = te_f32_to_fp8(X(r, c) * s, out_dt);
        if (out_row) out_row[r * cols + c] = q;
        if (out_col) out_col[c * rows + r] = q;
      }
  } else if (mode == TE_BLK_1X128) {
    if (out_row)
      for (uint64_t r = 0; r < rows; r++)
        for (uint64_t b = 0; b < ntc; b++) {
          uint64_t c0 = b * T, c1 = c0 + T < cols ? c0 + T : cols;
          uint32_t m = 0;
          for (uint64_t c = c0; c < c1; c++) m = te_max_u32(m, te_abs_bits(X(r, c)));
          float s = te_fp8_current_scale(te_bits_f32(m), eps, fmax, pow2);
          s_row[r * ntc + b] = te_fp8_scale_inv(s);
          for (uint64_t c = c0; c < c1; c++) out_row[r * cols + c] = te_f32_to_fp8(X(r, c) * s, out_dt);
        }
    if (out_col)
      for (uint64_t c = 0; c < cols; c++)
        for (uint64_t b = 0; b < ntr; b++) {
          uint64_t r0 = b * T, r1 = r0 + T < rows ? r0 + T : rows;
          uint32_t m = 0;
          for (uint64_t r = r0; r < r1; r++) m = te_max_u32(m, te_abs_bits(X(r, c)));
          float s = te_fp8_current_scale(te_bits_f32(m), eps, fmax, pow2);
          s_col[c * ntr + b] = te_fp8_scale_inv(s);
          for (uint64_t r = r0; r < r1; r++) out_col[c * rows + r] = te_f32_to_fp8(X(r, c) * s, out_dt);
        }
  } else {
    for (uint64_t tr = 0; tr < ntr; tr++)
      for (uint64_t tc = 0; tc < ntc; tc++) {
        uint64_t r0 = tr * T, r1 = r0 + T < rows ? r0 + T : rows;
        uint64_t c0 = tc * T, c1 = c0 + T < cols ? c0 + T : cols;
        uint32_t m = 0;
        for (uint64_t r = r0; r < r1; r++)
          for (uint64_t c = c0; c < c1; c++) m = te_max_u32(m, te_abs_bits(X(r, c)));
        float s = te_fp8_current_scale(te_bits_f32(m), eps, fmax, pow2), si = te_fp8_scale_inv(s);
        if (out_row) s_row[tr * ntc + tc] = si;
        if (out_col) s_col[tc * ntr + tr] = si;
        for (uint64_t r = r0; r < r1; r++)
          for (uint64_t c = c0; c < c1; c++) {
            uint8_t q = te_f32_to_fp8(X(r, c) * s, out_dt);
            if (out_row) out_row[r * cols + c] = q;
            if (out_col) out_col[c * rows + r] = q;
          }
      }
  }
#undef X
  if (amax) te_vdev_amax_update(amax, m_all);
}

void te_fp8_vdev_dequantize(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_dequantize_args a = te_dequantize_args_of(args);
  const uint8_t *q = a.in;
  const uint64_t rows = a.rows, cols = a.cols;
  (void)cfg;
  for (uint64_t r = 0; r < rows; r++)
    for (uint64_t c = 0; c < cols; c++)
      te_q_store(a.out, r * cols + c, a.out_dt,
                 te_fp8_to_f32(q[r * cols + c], a.in_dt) *
                     te_dq_scale(a.mode, a.scale_inv, r, c, rows, cols));
}

/* ---- the delayed-scaling update (kernels/fp8_recipe.cu) ---- */

/* One group, one tensor at a time: kernels/fp8_recipe.cu's bits. */
static void vdev_delayed_update_state(const struct te_du_params *p, const struct te_du_state *st) {
  float *amax = st->amax, *hist = st->history, *scale = st->scale, *scale_inv = st->scale_inv;
  uint64_t count = st->count;
  int len = p->len;
  for (uint64_t i = 0; i < count; i++) {
    float v = amax[i];
    uint32_t win = te_abs_bits(v);
    for (int k = len - 1; k >= 1; k--) {
      float h = hist[(uint64_t)(k - 1) * count + i];
      hist[(uint64_t)k * count + i] = h;
      win = te_max_u32(win, te_abs_bits(h));
    }
    hist[i] = v;
    float s = te_fp8_delayed_scale(te_bits_f32(p->most_recent ? te_abs_bits(v) : win), scale[i],
                                   st->fp8_max, p->margin_mult, p->pow2);
    scale[i] = s;
    scale_inv[i] = te_fp8_scale_inv(s);
    amax[i] = 0.0f;
  }
}

void te_fp8_vdev_delayed_update(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_delayed_update_args a = te_delayed_update_args_of(args);
  (void)cfg;
  for (int g = 0; g < a.p->nstates && g < TE_DU_MAX; g++)
    vdev_delayed_update_state(a.p, &a.p->st[g]);
}
