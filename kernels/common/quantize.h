/* SPDX-License-Identifier: Apache-2.0 */
/* quantize.h -- what kernels/quantize.cu and the vdev implementations in
 * libtecore/fp8/quantize.c share besides the element math of fp8.h: the
 * element loads and stores of the high-precision types, the per-tensor
 * scale choice, the tile shapes, the dequantization modes and the
 * multi-tensor parameter block (passed by value as one kernel parameter,
 * so its layout is the same for the host compiler and nvcc: 64-bit
 * pointers and naturally aligned fields only). */
#ifndef TE_KERNELS_QUANTIZE_H
#define TE_KERNELS_QUANTIZE_H

#include "fp8.h"
#include "convert.h"

/* Element i of an F32 / F16 / BF16 array as float (exact). */
TE_HD float te_q_load(const void *p, uint64_t i, int dt) {
  if (dt == TE_FP8_DT_F32) return ((const float *)p)[i];
  if (dt == TE_FP8_DT_BF16) return te_bf16_to_f32(((const uint16_t *)p)[i]);
  return te_f16_to_f32(((const uint16_t *)p)[i]);
}
/* Stores v rounded to dt (nearest even). */
TE_HD void te_q_store(void *p, uint64_t i, int dt, float v) {
  if (dt == TE_FP8_DT_F32) ((float *)p)[i] = v;
  else if (dt == TE_FP8_DT_BF16) ((uint16_t *)p)[i] = te_f32_to_bf16(v);
  else ((uint16_t *)p)[i] = te_f32_to_f16(v);
}

/* The scale a per-tensor quantization uses: current scaling derives it from
 * the amax already in *amax_bits; delayed scaling reads *scale. */
TE_HD float te_q_tensor_scale(int current, const float *scale, const unsigned *amax_bits,
                              float eps, int out_dt, int pow2) {
  if (current) return te_fp8_current_scale(te_bits_f32(*amax_bits), eps, te_fp8_max(out_dt), pow2);
  return *scale;
}

/* Tiles: MXFP8 32 rows x 128 columns (one per warp); block scaling 128 x 128. */
#define TE_MX_TILE_R 32
#define TE_MX_TILE_C 128
#define TE_BLK_TILE 128

/* Block-scaling kernel modes. */
#define TE_BLK_TENSOR 0     /* per-tensor scale read from *scale */
#define TE_BLK_1X128 1
#define TE_BLK_128X128 2

/* Dequantization modes (which scale_inv an element at (r, c) uses). */
#define TE_DQ_TENSOR 0      /* scale_inv[0] */
#define TE_DQ_MX_ROW 1      /* E8M0 [rows][cdiv(cols,32)] */
#define TE_DQ_MX_COL 2      /* E8M0 [cdiv(rows,32)][cols] */
#define TE_DQ_1X128 3       /* f32 [rows][cdiv(cols,128)] */
#define TE_DQ_128X128 4     /* f32 [cdiv(rows,128)][cdiv(cols,128)] */

TE_HD float te_dq_scale(int mode, const void *s, uint64_t r, uint64_t c, uint64_t rows,
                        uint64_t cols) {
  switch (mode) {
  case TE_DQ_MX_ROW: return te_e8m0_to_f32(((const uint8_t *)s)[r * ((cols + 31) / 32) + c / 32]);
  case TE_DQ_MX_COL: return te_e8m0_to_f32(((const uint8_t *)s)[(r / 32) * cols + c]);
  case TE_DQ_1X128: return ((const float *)s)[r * ((cols + 127) / 128) + c / 128];
  case TE_DQ_128X128: return ((const float *)s)[(r / 128) * ((cols + 127) / 128) + c / 128];
  default: (void)rows; return ((const float *)s)[0];
  }
}

/* ---- multi-tensor quantize (per-tensor modes) ------------------------------ */
#define TE_QMULTI_MAX 32

struct te_qmulti_entry {
  const void *in;
  void *out;                  /* FP8, [n] */
  float *scale;               /* delayed: read; current: written */
  float *scale_inv;
  float *scale_inv_col;       /* or NULL */
  unsigned *amax;             /* delayed: max-accumulated when not NULL; current: read */
  unsigned long long n;
  unsigned block0, nblocks;   /* the grid blocks that work on this tensor */
  int in_dt, out_dt;
  float eps;
  int pow2;
};

struct te_qmulti_params {
  const int *noop;            /* or NULL */
  int count;
  int current;                /* 1: current scaling (amax already computed) */
  struct te_qmulti_entry e[TE_QMULTI_MAX];
};

#endif
