/* SPDX-License-Identifier: Apache-2.0 */
/* elementwise_params.h -- the parameters of kernels/elementwise.cu, declared
 * once (kparams.h): the kernels' signatures, their table entries and the
 * vdev argument structs come from these lists. */
#ifndef TE_KERNELS_ELEMENTWISE_PARAMS_H
#define TE_KERNELS_ELEMENTWISE_PARAMS_H

#include "kparams.h"

/* te_init_uniform: dst[i] = te_ew_uniform(state, i, bound, round) for i
 * in [0, n), stored as dtype (F32/F16/BF16): a parameter's initial values
 * drawn on the device (tecore_seq_build). */
#define TE_INIT_UNIFORM_PARAMS(P)      \
  P(void *, dst, nneptr(1, TE_KP_WHOLE)) \
  P(int, dtype, val)                   \
  P(unsigned long long, n, val)        \
  P(unsigned long long, state, val)    \
  P(double, bound, val)                \
  P(int, round, val)

/* te_fill: dst[0, n) = value, dtype F32/F16/BF16 (TE_EW_*). */
#define TE_FILL_PARAMS(P)   \
  P(void *, dst, nneptr(1, TE_KP_WHOLE)) \
  P(int, dtype, val)        \
  P(unsigned long long, n, val) \
  P(float, value, val)

/* te_scale_add: dst = alpha * a + beta * b over n elements of dtype. */
#define TE_SCALE_ADD_PARAMS(P) \
  P(void *, dst, eptr(5, TE_KP_WHOLE))   \
  P(const void *, a, eptr(5, TE_KP_WHOLE)) \
  P(float, alpha, val)         \
  P(const void *, b, eptr(5, TE_KP_WHOLE)) \
  P(float, beta, val)          \
  P(int, dtype, val)           \
  P(unsigned long long, n, val)

/* te_memset: n elements of elem_size bytes (1, 2 or 4) at dst set to the
 * low elem_size bytes of value: what a memset node does, as a kernel
 * (tecore_graph_memsets_to_kernels puts it where a captured memset was). */
#define TE_MEMSET_PARAMS(P)          \
  P(void *, dst, nnptr)              \
  P(unsigned, value, val)            \
  P(int, elem_size, val)             \
  P(unsigned long long, n, val)

/* te_copy: n bytes from src to dst (device memory, or pinned host memory
 * through its device address): what a small memcpy node does, as a kernel
 * (tecore_graph_copies_to_kernels puts it where a captured copy was). */
#define TE_COPY_PARAMS(P)            \
  P(void *, dst, nnptr)              \
  P(const void *, src, nnptr)        \
  P(unsigned long long, n, val)

/* te_copy2d_u32: a 2-D array of 4-byte elements copied between strides,
 * zeros past the source: for i < drows, j < dcols (the destination's
 * extent, padding included), dst[i * dsi + j * dsj] = i < srows && j <
 * scols ? src[i * ssi + j * ssj] : 0 (strides in elements).  The block-
 * scaled GEMM rearranges its operands' scales with it (cuda_gemm.c). */
#define TE_COPY2D_U32_PARAMS(P)      \
  P(unsigned *, dst, nnptr)          \
  P(const unsigned *, src, nnptr)    \
  P(unsigned long long, drows, val)  \
  P(unsigned long long, dcols, val)  \
  P(unsigned long long, srows, val)  \
  P(unsigned long long, scols, val)  \
  P(unsigned long long, dsi, val)    \
  P(unsigned long long, dsj, val)    \
  P(unsigned long long, ssi, val)    \
  P(unsigned long long, ssj, val)

/* te_colsum_part: the column sums of a [rows][cols] matrix whose rows are
 * ld elements apart (F32, F16 or BF16: dtype, 16-byte aligned, cols and
 * ld % 8 == 0) in parts of rpp rows: ws[part][c] = sum of in[r][c] over
 * the part's rows.  Blocks of
 * TE_COLSUM_VECS x TE_COLSUM_LANES threads: a thread owns 8 columns and a
 * lane of rows (part start + lane, + TE_COLSUM_LANES, ...), added in row
 * order; the lanes' sums are then added in lane order.  grid.x covers
 * the columns (TE_COLSUM_VECS * 8 a block), grid.y the parts. */
#define TE_COLSUM_PART_PARAMS(P)     \
  P(const void *, in, nnptr)         \
  P(float *, ws, nnptr)              \
  P(unsigned long long, rows, val)   \
  P(unsigned long long, cols, val)   \
  P(unsigned long long, ld, val)     \
  P(unsigned long long, rpp, val)    \
  P(int, dtype, val)

/* te_colsum_final: out[c] = the sum over parts of ws[part][c] (F32),
 * plus out[c] when acc: blocks of TE_COLSUM_FCOLS columns x
 * TE_COLSUM_FLANES lanes; lane l adds parts l, l + TE_COLSUM_FLANES, ...
 * in order, then the lanes' sums in lane order, then out's old value. */
#define TE_COLSUM_FINAL_PARAMS(P)    \
  P(const float *, ws, nnptr)        \
  P(float *, out, nnptr)             \
  P(unsigned long long, parts, val)  \
  P(unsigned long long, cols, val)   \
  P(int, acc, val)

/* te_qkv_kv_bias: the key and value parts of a packed QKV Linear's bias
 * gradient from the output Linear's (ops_linear.c, qkv_bias_kv).  out is
 * [2 kv_heads head_dim] (F32): the key part gets 0 (kept when acc), the
 * value part, for head g and element d,
 *   sum over the heads h of g's group (heads / kv_heads of them, in order)
 *   of sum over i of s[i] w[i][h head_dim + d]
 * (plus out's old value when acc): s the output Linear's bias gradient
 * [n_out] (F32), w its weight [n_out][heads head_dim] of dtype (F16 or
 * BF16).  Blocks of TE_QKV_KV_COLS columns x TE_QKV_KV_LANES lanes; lane
 * l adds the products of rows l, l + TE_QKV_KV_LANES, ... (each head in
 * order, each product rounded), then lane 0 the lanes in order. */
#define TE_QKV_KV_BIAS_PARAMS(P)     \
  P(float *, out, nnptr)             \
  P(const float *, s, nnptr)         \
  P(const void *, w, nnptr)          \
  P(unsigned, n_out, val)            \
  P(int, heads, val)                 \
  P(int, kv_heads, val)              \
  P(int, head_dim, val)              \
  P(int, dtype, val)                 \
  P(int, acc, val)
#define TE_QKV_KV_COLS 32
#define TE_QKV_KV_LANES 32

#define TE_COLSUM_VECS 32
#define TE_COLSUM_LANES 8
#define TE_COLSUM_UNROLL 4
#define TE_COLSUM_FCOLS 32
#define TE_COLSUM_FLANES 32

#endif
