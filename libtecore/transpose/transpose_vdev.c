/* SPDX-License-Identifier: Apache-2.0 */
/* transpose_vdev.c -- the vdev implementation of kernels/transpose.cu: the
 * same grid of blocks, each over its column tile and its row tiles, with
 * the same element math (kernels/common/transpose.h, act.h, fp8.h), so the
 * FP8 bytes, the scales, the amax and the dbias partial sums (added in the
 * GPU's order) are bit for bit those of the GPU kernels.  Runs the whole
 * grid on the stream's worker thread. */
#include "transpose/transpose_internal.h"
#include "common/transpose.h"
#include "common/ldst.h"
#include <string.h>

#define T TE_CT_TILE
#define MXB TE_CT_MX_BLOCK

struct ct_job {
  const void *in, *x;
  uint8_t *orow, *ocol;
  uint8_t *sinv_mx, *csinv_mx;
  uint64_t rows, cols;
  int in_dt, out_dt, act;
  float mult;
};

/* The tile's values (0 outside the tensor), as the GPU threads load them. */
static void ct_vdev_load(const struct ct_job *j, uint64_t row0, uint64_t col0, float v[T][T]) {
  for (int rr = 0; rr < T; rr++) {
    uint64_t r = row0 + (uint64_t)rr;
    for (int cc = 0; cc < T; cc++) {
      uint64_t c = col0 + (uint64_t)cc;
      if (r >= j->rows || c >= j->cols) {
        v[rr][cc] = 0.0f;
        continue;
      }
      uint64_t i = r * j->cols + c;
      float a = te_ld(j->in, i, j->in_dt);
      float b = j->act >= 0 ? te_ld(j->x, i, j->in_dt) : 0.0f;
      v[rr][cc] = te_ct_value(j->act, a, b);
    }
  }
}

/* Per-tensor: both outputs from one quantization. */
static void ct_vdev_store_pt(const struct ct_job *j, uint64_t row0, uint64_t col0,
                             float v[T][T]) {
  for (int rr = 0; rr < T && row0 + (uint64_t)rr < j->rows; rr++) {
    uint64_t r = row0 + (uint64_t)rr;
    for (int cc = 0; cc < T && col0 + (uint64_t)cc < j->cols; cc++) {
      uint64_t c = col0 + (uint64_t)cc;
      uint8_t q = te_ct_q(v[rr][cc], j->mult, j->out_dt);
      if (j->orow) j->orow[r * j->cols + c] = q;
      if (j->ocol) j->ocol[c * j->rows + r] = q;
    }
  }
}

/* MXFP8: 1x32 blocks along rows, 32x1 blocks along columns. */
static void ct_vdev_store_mx(const struct ct_job *j, uint64_t row0, uint64_t col0,
                             float v[T][T]) {
  const uint64_t scols = te_ct_cdiv(j->cols, MXB);
  if (j->orow) {
    for (int rr = 0; rr < T && row0 + (uint64_t)rr < j->rows; rr++) {
      uint64_t r = row0 + (uint64_t)rr;
      for (int b = 0; b < T / MXB && col0 + (uint64_t)(b * MXB) < j->cols; b++) {
        uint32_t m = 0;
        for (int k = 0; k < MXB; k++) m = te_max_u32(m, te_abs_bits(v[rr][b * MXB + k]));
        uint8_t e8 = te_e8m0_from_amax(te_bits_f32(m), j->out_dt);
        float mult = te_e8m0_quant_mult(e8);
        uint64_t c0 = col0 + (uint64_t)(b * MXB);
        j->sinv_mx[r * scols + c0 / MXB] = e8;
        for (int k = 0; k < MXB && c0 + (uint64_t)k < j->cols; k++)
          j->orow[r * j->cols + c0 + (uint64_t)k] = te_ct_q(v[rr][b * MXB + k], mult, j->out_dt);
      }
    }
  }
  if (j->ocol) {
    for (int h = 0; h < T / MXB && row0 + (uint64_t)(h * MXB) < j->rows; h++) {
      uint64_t r0 = row0 + (uint64_t)(h * MXB);
      for (int cc = 0; cc < T && col0 + (uint64_t)cc < j->cols; cc++) {
        uint64_t c = col0 + (uint64_t)cc;
        uint32_t m = 0;
        for (int k = 0; k < MXB; k++) m = te_max_u32(m, te_abs_bits(v[h * MXB + k][cc]));
        uint8_t e8 = te_e8m0_from_amax(te_bits_f32(m), j->out_dt);
        float mult = te_e8m0_quant_mult(e8);
        j->csinv_mx[(r0 / MXB) * j->cols + c] = e8;
        for (int k = 0; k < MXB && r0 + (uint64_t)k < j->rows; k++)
          j->ocol[(r0 + (uint64_t)k) * j->cols + c] = te_ct_q(v[h * MXB + k][cc], mult, j->out_dt);
      }
    }
  }
}

/* The tile sum of column cc over warp w's 8 rows, in the GPU's order
 * (kernels/common/transpose.h). */
static float ct_vdev_warp_tree(float v[T][T], int w, int cc) {
  const float *a[8];
  for (int i = 0; i < 8; i++) a[i] = &v[w * 8 + i][cc];
  return ((*a[0] + *a[1]) + (*a[2] + *a[3])) + ((*a[4] + *a[5]) + (*a[6] + *a[7]));
}

void te_ct_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_ct_args a = te_ct_args_of(args);
  const unsigned flags = a.flags;
  const int mx = (flags & TE_CT_F_MX) != 0, amax_only = (flags & TE_CT_F_AMAX_ONLY) != 0;
  const float *scale = a.scale;
  unsigned *amax = a.amax;
  void *sinv = a.sinv, *csinv = a.csinv;
  float *ws = amax_only ? NULL : a.ws;
  const unsigned tpb = a.tpb;
  struct ct_job j = {
      .in = a.in, .x = a.x,
      .orow = amax_only ? NULL : a.orow, .ocol = amax_only ? NULL : a.ocol,
      .sinv_mx = mx ? sinv : NULL, .csinv_mx = mx ? csinv : NULL,
      .rows = a.rows, .cols = a.cols,
      .in_dt = TE_CT_IN_OF(flags), .out_dt = TE_CT_OUT_OF(flags), .act = TE_CT_ACT_OF(flags),
      .mult = 1.0f};
  if (!mx && !amax_only) {
    j.mult = *scale;
    float si = te_fp8_scale_inv(j.mult);
    if (sinv) *(float *)sinv = si;
    if (csinv) *(float *)csinv = si;
  }
  /* 32 KB of tile state on the worker's stack (default-sized threads):
   * static storage would race between streams. */
  float v[T][T], acc[TE_CT_WARPS][T];
  uint32_t am = 0;
  const uint64_t rtiles = te_ct_cdiv(j.rows, T);
  for (unsigned by = 0; by < cfg->grid[1]; by++) {
    for (unsigned bx = 0; bx < cfg->grid[0]; bx++) {
      const uint64_t col0 = (uint64_t)bx * T;
      if (ws) memset(acc, 0, sizeof acc);
      uint64_t rt1 = (uint64_t)by * tpb + tpb;
      if (rt1 > rtiles) rt1 = rtiles;
      for (uint64_t rt = (uint64_t)by * tpb; rt < rt1; rt++) {
        const uint64_t row0 = rt * T;
        ct_vdev_load(&j, row0, col0, v);
        for (int rr = 0; rr < T; rr++)
          for (int cc = 0; cc < T; cc++) am = te_max_u32(am, te_abs_bits(v[rr][cc]));
        if (ws)
          for (int w = 0; w < TE_CT_WARPS; w++)
            for (int cc = 0; cc < T; cc++) acc[w][cc] += ct_vdev_warp_tree(v, w, cc);
        if (amax_only) continue;
        if (mx)
          ct_vdev_store_mx(&j, row0, col0, v);
        else
          ct_vdev_store_pt(&j, row0, col0, v);
      }
      if (ws)
        for (int cc = 0; cc < T && col0 + (uint64_t)cc < j.cols; cc++) {
          float s = acc[0][cc];
          for (int w = 1; w < TE_CT_WARPS; w++) s += acc[w][cc];
          ws[(uint64_t)by * j.cols + col0 + (uint64_t)cc] = s;
        }
    }
  }
  if (amax && am) te_vdev_amax_update(amax, am);
}

void te_ct_vdev_dbias_reduce(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_ctr_args a = te_ctr_args_of(args);
  const float *ws = a.ws;
  void *dbias = a.dbias;
  const unsigned parts = a.parts;
  const unsigned long long cols = a.cols;
  const int dtype = a.dtype;
  (void)cfg;
  const unsigned chunk = te_ct_red_chunk(parts);
  for (uint64_t c = 0; c < cols; c++) {
    float s = 0.0f;
    for (unsigned j = 0; j < TE_CT_RED_CHUNKS && j * chunk < parts; j++) {
      unsigned p0 = j * chunk, p1 = p0 + chunk < parts ? p0 + chunk : parts;
      float cs = ws[(uint64_t)p0 * cols + c];
      for (unsigned p = p0 + 1; p < p1; p++) cs += ws[(uint64_t)p * cols + c];
      s = j == 0 ? cs : s + cs;
    }
    te_st(dbias, c, dtype, s);
  }
}

/* The byte transpose: the codes copied, tile by tile (cache-friendly on
 * the host, the result is the same whatever the order). */
void te_ct_vdev_byte_transpose(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_ctb_args a = te_ctb_args_of(args);
  const uint64_t rows = a.rows, cols = a.cols;
  (void)cfg;
  for (uint64_t r0 = 0; r0 < rows; r0 += T)
    for (uint64_t c0 = 0; c0 < cols; c0 += T)
      for (uint64_t r = r0; r < r0 + T && r < rows; r++)
        for (uint64_t c = c0; c < c0 + T && c < cols; c++) a.out[c * rows + r] = a.in[r * cols + c];
}
