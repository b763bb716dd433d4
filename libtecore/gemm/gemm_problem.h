/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_problem.h -- a GEMM after validation, reduced to what a backend
 * needs (addresses, types, element strides, epilogue): what gemm.c fills
 * and the device ops table's gemm entry takes (cuda/cuda_gemm.c: cuBLASLt;
 * gemm/gemm_vdev.c: the reference GEMM).
 *
 * Orientation.  Both backends see the operands k-major where they can:
 *   a: op(A) as [m][k], element (i, kk) at a.data + (i * a.si + kk * a.sk)
 *   b: op(B)^T as [n][k], element (j, kk) at b.data + (j * b.si + kk * b.sk)
 * (strides in elements).  For per-tensor FP8 operands the selection of
 * rowwise/columnwise data always gives sk == 1 (the TN layout cuBLASLt's
 * FP8 GEMM needs); BF16/F16 operands keep their rowwise data and may have
 * si == 1 instead; an MXFP8 operand read from its columnwise data (same
 * layout as the rowwise data, blocks along columns) has si == 1 too.
 * Block-scaled operands (1x128 / 128x128) are k-major like per-tensor
 * ones; their FP32 scales, in te/tensor.h's compact layout, are
 * [rows][cdiv(k,128)] (1x128) or [cdiv(rows,128)][cdiv(k,128)] (128x128)
 * for the copy read, so s_si = cdiv(k,128) and s_sk = 1 (rows counted in
 * blocks for 128x128).
 * C, D and aux are row-major [m][n] with leading dimension n. */
#ifndef TECORE_GEMM_PROBLEM_H
#define TECORE_GEMM_PROBLEM_H

#include "internal.h"

/* How an operand's elements are scaled back to real values. */
enum te_gemm_scale {
  TE_GEMM_SCALE_NONE = 0,     /* BF16/F16: no scale */
  TE_GEMM_SCALE_TENSOR = 1,   /* one float: *scale_inv */
  TE_GEMM_SCALE_MX = 2,       /* E8M0 per 32 elements along k */
  TE_GEMM_SCALE_BLK1D = 3,    /* FP32 per 128 elements along k (1x128 blocks) */
  TE_GEMM_SCALE_BLK2D = 4     /* FP32 per 128x128 block */
};

struct te_gemm_operand {
  tecore_devptr_t data;
  tecore_dtype_t dtype;
  enum te_gemm_scale scale_kind;
  tecore_devptr_t scale_inv;   /* TENSOR: float[1]; MX: E8M0 array */
  int64_t si, sk;              /* element strides of (row, k) */
  /* MX: the E8M0 of element (i, kk) is at scale_inv + i * s_si + (kk / 32) * s_sk;
   * BLK1D: the float at index i * s_si + (kk / 128) * s_sk; BLK2D: (i / 128) * s_si +
   * (kk / 128) * s_sk */
  int64_t s_si, s_sk;
  int columnwise;              /* 1 when columnwise data was selected */
  int kmajor;                  /* 1: stored [rows][k] (sk == 1); 0: stored [k][rows] (si == 1) */
};

struct te_gemm_problem {
  size_t m, n, k;
  struct te_gemm_operand a, b;
  float alpha, beta;
  tecore_gemm_epilogue_t epilogue;
  int fast_accum;
  int fp8;                     /* the operands are FP8 */
  /* C: read when beta != 0 (c == d when the caller accumulates into D) */
  tecore_devptr_t c;
  tecore_dtype_t c_dtype;      /* also the "companion" type cuBLASLt calls Ctype */
  tecore_devptr_t d;
  tecore_dtype_t d_dtype;
  tecore_devptr_t d_scale;     /* FP8 D: float[1] */
  tecore_devptr_t d_amax;      /* FP8 D: float[1] or 0 */
  tecore_devptr_t bias;        /* 0 unless the epilogue uses it */
  tecore_dtype_t bias_dtype;
  tecore_devptr_t aux;         /* 0 unless the epilogue uses it */
  tecore_dtype_t aux_dtype;
  tecore_devptr_t workspace;   /* 0: the backend's own */
  size_t workspace_bytes;
};

/* ---- block scales in cuBLASLt's layout -----------------------------------
 * The compact layout above is te/tensor.h's; cuBLASLt's Hopper kernels
 * (VEC128_32F, BLK128x128_32F) read an operand of `rows` rows as
 *   BLK1D: [cdiv(k,128)][pad4(rows)] floats, rows fastest;
 *   BLK2D: [cdiv(rows,128)][pad4(cdiv(k,128))],
 * zeros in the padding (pad4: up to a multiple of 4).  The cuda backend
 * copies each operand's scales into that layout (te_gemm_blk_lt_copy, run
 * by te_copy2d_u32); the vdev backend makes the same copy on the host and
 * reads it through te_gemm_blk_lt_index, so the copy's parameters and the
 * index rule are exercised on every backend. */
static inline size_t te_gemm_blk_pad4(size_t x) { return (x + 3) & ~(size_t)3; }

/* Bytes of the copy, rounded up to 256 (the next one's alignment). */
static inline size_t te_gemm_blk_lt_bytes(enum te_gemm_scale kind, size_t rows, size_t k) {
  size_t kb = (k + 127) / 128, rb = (rows + 127) / 128;
  size_t n = kind == TE_GEMM_SCALE_BLK2D ? rb * te_gemm_blk_pad4(kb) : kb * te_gemm_blk_pad4(rows);
  return (n * sizeof(float) + 255) & ~(size_t)255;
}

/* Index in that layout of the scale of element (r, kk). */
static inline size_t te_gemm_blk_lt_index(enum te_gemm_scale kind, size_t rows, size_t k,
                                          size_t r, size_t kk) {
  if (kind == TE_GEMM_SCALE_BLK2D) return (r / 128) * te_gemm_blk_pad4((k + 127) / 128) + kk / 128;
  return (kk / 128) * te_gemm_blk_pad4(rows) + r;
}

/* The 2-D copy (internal.h's struct te_copy2d) from o's compact scales
 * to dst in that layout. */
static inline struct te_copy2d te_gemm_blk_lt_copy(const struct te_gemm_operand *o, size_t rows,
                                                   size_t k, tecore_devptr_t dst) {
  size_t kb = (k + 127) / 128;
  struct te_copy2d c = {.dst = dst, .src = o->scale_inv, .ssi = (size_t)o->s_si,
                        .ssj = (size_t)o->s_sk};
  if (o->scale_kind == TE_GEMM_SCALE_BLK2D) {
    c.drows = c.srows = (rows + 127) / 128;
    c.dcols = c.dsi = te_gemm_blk_pad4(kb);
    c.scols = kb;
    c.dsj = 1;
  } else {
    c.drows = c.dsj = te_gemm_blk_pad4(rows);
    c.srows = rows;
    c.dcols = c.scols = kb;
    c.dsi = 1;
  }
  return c;
}

static inline int te_gemm_epi_has_bias_in(tecore_gemm_epilogue_t e) {
  return e == TECORE_GEMM_EPI_BIAS || e == TECORE_GEMM_EPI_BIAS_GELU_AUX ||
         e == TECORE_GEMM_EPI_BIAS_GELU || e == TECORE_GEMM_EPI_BIAS_GELU_DAUX;
}
static inline int te_gemm_epi_has_bias_out(tecore_gemm_epilogue_t e) {
  return e == TECORE_GEMM_EPI_DGELU_BGRAD || e == TECORE_GEMM_EPI_BGRAD ||
         e == TECORE_GEMM_EPI_DAUX_BGRAD;
}
/* the forward pair that saves gelu' (aux out) and the backward pair that
 * multiplies by it (aux in): te/gemm.h */
static inline int te_gemm_epi_daux(tecore_gemm_epilogue_t e) {
  return e == TECORE_GEMM_EPI_GELU_DAUX || e == TECORE_GEMM_EPI_BIAS_GELU_DAUX ||
         e == TECORE_GEMM_EPI_DAUX || e == TECORE_GEMM_EPI_DAUX_BGRAD;
}
/* The shapes every backend runs the DAUX epilogues on: the tiles of
 * libte's own GEMM (kernels/gemm16.cu: blocks of 128 x 256, k-tiles of
 * 64), the only GEMM with them on a GPU; vdev keeps to the same rule. */
static inline int te_gemm_daux_shapes(size_t m, size_t n, size_t k) {
  return m % 128 == 0 && n % 256 == 0 && k % 64 == 0 && k > 0;
}
static inline int te_gemm_epi_has_aux_out(tecore_gemm_epilogue_t e) {
  return e == TECORE_GEMM_EPI_GELU_AUX || e == TECORE_GEMM_EPI_BIAS_GELU_AUX ||
         e == TECORE_GEMM_EPI_GELU_DAUX || e == TECORE_GEMM_EPI_BIAS_GELU_DAUX;
}
/* D = gelu(...): the aux epilogues and the ones without aux */
static inline int te_gemm_epi_gelu(tecore_gemm_epilogue_t e) {
  return e == TECORE_GEMM_EPI_GELU_AUX || e == TECORE_GEMM_EPI_BIAS_GELU_AUX ||
         e == TECORE_GEMM_EPI_GELU || e == TECORE_GEMM_EPI_BIAS_GELU ||
         e == TECORE_GEMM_EPI_GELU_DAUX || e == TECORE_GEMM_EPI_BIAS_GELU_DAUX;
}
static inline int te_gemm_epi_has_aux_in(tecore_gemm_epilogue_t e) {
  return e == TECORE_GEMM_EPI_DGELU || e == TECORE_GEMM_EPI_DGELU_BGRAD ||
         e == TECORE_GEMM_EPI_DAUX || e == TECORE_GEMM_EPI_DAUX_BGRAD;
}

#endif
