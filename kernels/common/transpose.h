/* SPDX-License-Identifier: Apache-2.0 */
/* transpose.h -- what the cast-transpose kernels (kernels/transpose.cu) and
 * their vdev implementation (libtecore/transpose/transpose_vdev.c) must
 * agree on: the tile geometry and launch shape, the packed flags word, the
 * value each element becomes (input, or dy * act'(x)), and the order in
 * which dbias partial sums are added (so both backends give the same bits).
 *
 * Work decomposition.  The input's 2-D view [rows][cols] is cut in tiles of
 * TE_CT_TILE x TE_CT_TILE elements.  Block (bx, by) of the grid owns column
 * tile bx and the row tiles by*tpb .. by*tpb+tpb-1 (tpb "tiles per block"),
 * visited top to bottom.  Inside a tile, thread t (of TE_CT_THREADS) holds
 * row t/4 and the 16 columns 16*(t%4) .. 16*(t%4)+15 (the per-tensor dact
 * kernels with 16-bit input: rows 2(t/4) and 2(t/4)+1 of TE_CT_THREADS_PT2
 * threads).
 *
 * dbias order.  In each tile, the 8 values of a column in a warp's 8 rows
 * r0..r0+7 are combined as ((a0+a1)+(a2+a3))+((a4+a5)+(a6+a7)) (a
 * reduction over lanes); each warp adds these tile sums, tile by tile, to
 * an accumulator per column that starts at +0; the block's partial is
 * s0+s1+...+s7 over the 8 warps' accumulators, left to right.  Partial sums go to the
 * workspace as float [grid_y][cols]; the second stage adds the grid_y
 * partials of a column in the order te_ct_red_chunk gives, then rounds to
 * dbias's dtype. */
#ifndef TE_KERNELS_TRANSPOSE_H
#define TE_KERNELS_TRANSPOSE_H

#include "act.h"
#include "fp8.h"

#define TE_CT_TILE 64
#define TE_CT_THREADS 256
#define TE_CT_CHUNK 16           /* elements a thread holds of one tile row */
#define TE_CT_WARPS (TE_CT_THREADS / 32)
/* The per-tensor dact kernels with 16-bit input
 * (te_ct_pt_{gelu,relu,silu,qgelu}_{f16,bf16}*): half the threads, thread
 * t with tile rows 2(t/4) and 2(t/4)+1 (kernels/transpose.cu,
 * ct_body_pt2); the dbias order below is the same. */
#define TE_CT_THREADS_PT2 128
/* The grid aims at about this many blocks: more tiles per block only when
 * there are more tiles.  Many short blocks keep the last, partial wave
 * short (16384 blocks are ~25 waves of 660 resident blocks on an H100;
 * 2048 blocks of 8 tiles lost a fifth of the time to the last wave), at
 * the price of more dbias partial sums (at most about 16384 x 64 floats,
 * 4 MB).  A constant rather than the device's SM count, so the workspace
 * size and the dbias bits do not depend on the device. */
#define TE_CT_TARGET_BLOCKS 16384u
#define TE_CT_MAX_GRID_Y 65535u
#define TE_CT_MX_BLOCK 32        /* MXFP8 block length */
/* te_ct_byte_transpose: TE_CT_TILE x TE_CT_TILE byte tiles, TE_CT_THREADS
 * threads a block; any grid (the blocks stride over the tiles), the launch
 * code takes one block a tile up to TE_CT_MAX_GRID_Y row tiles. */

/* The flags word (kernel parameter "flags"). */
#define TE_CT_F_IN(dt) ((unsigned)(dt) & 0xfu)          /* input dtype (te_dtype code) */
#define TE_CT_F_OUT(dt) (((unsigned)(dt) & 0xfu) << 4)  /* FP8 output dtype */
#define TE_CT_F_ACT(a) ((((unsigned)(a) + 1u) & 0xfu) << 8)  /* act kind + 1; 0: none */
#define TE_CT_F_MX 0x1000u          /* MXFP8 (else per-tensor scale) */
#define TE_CT_F_AMAX_ONLY 0x2000u   /* first pass of current scaling: amax only */
#define TE_CT_F_VEC_IN 0x4000u      /* inputs: 16-byte aligned rows */
#define TE_CT_F_VEC_ROW 0x8000u     /* rowwise output: 16-byte aligned rows */
#define TE_CT_F_VEC_COL 0x10000u    /* columnwise output: 16-byte aligned rows */

#define TE_CT_IN_OF(f) ((int)((f) & 0xfu))
#define TE_CT_OUT_OF(f) ((int)(((f) >> 4) & 0xfu))
#define TE_CT_ACT_OF(f) ((int)(((f) >> 8) & 0xfu) - 1)   /* -1: no activation */

#define TE_CT_ACT_NONE (-1)

/* Threads a block for the kernel that the flags word names. */
TE_HD unsigned te_ct_threads(unsigned flags) {
  const int pt2 = !(flags & TE_CT_F_MX) && TE_CT_ACT_OF(flags) >= 0 &&
                  TE_CT_IN_OF(flags) != TE_FP8_DT_F32;
  return pt2 ? TE_CT_THREADS_PT2 : TE_CT_THREADS;
}

/* Launch shape for a [rows][cols] input (rows, cols > 0). */
struct te_ct_shape {
  unsigned grid_x, grid_y;   /* column tiles; row groups (dbias partials) */
  unsigned tpb;              /* row tiles per block */
};

TE_HD uint64_t te_ct_cdiv(uint64_t a, uint64_t b) { return (a + b - 1u) / b; }

TE_HD struct te_ct_shape te_ct_shape_of(uint64_t rows, uint64_t cols) {
  struct te_ct_shape s;
  uint64_t rt = te_ct_cdiv(rows, TE_CT_TILE), ct = te_ct_cdiv(cols, TE_CT_TILE);
  uint64_t tpb = te_ct_cdiv(rt * ct, TE_CT_TARGET_BLOCKS);
  uint64_t min_tpb = te_ct_cdiv(rt, TE_CT_MAX_GRID_Y);
  if (tpb < min_tpb) tpb = min_tpb;
  if (tpb > rt) tpb = rt;
  if (tpb == 0) tpb = 1;
  s.grid_x = (unsigned)ct;
  s.grid_y = (unsigned)te_ct_cdiv(rt, tpb);
  s.tpb = (unsigned)tpb;
  return s;
}

/* The value an element becomes: the input itself, or dx = dy * act'(x). */
TE_HD float te_ct_value(int act, float in, float x) {
  return act < 0 ? in : te_act_bwd(act, x, in);
}

/* Quantization of a value with its multiplier (the per-tensor scale, or an
 * MXFP8 block's 2^(127-e8)).  A NaN product becomes 0x7F whatever its
 * sign: the GPU's multiply returns the canonical (positive) NaN and its
 * conversion instruction gives 0x7F for it, while a CPU keeps the sign of
 * a NaN operand; the kernels write 0x7F so both backends agree. */
TE_HD uint8_t te_ct_q(float v, float mult, int out_dt) {
  float p = te_mul_rn(v, mult);
  return p != p ? (uint8_t)TE_FP8_NAN : te_f32_to_fp8(p, out_dt);
}

/* dbias, second stage: the partial sums of a column, parts of them, are
 * added in TE_CT_RED_CHUNKS chunks of te_ct_red_chunk(parts) consecutive
 * partials (each left to right from its first), then the chunk sums left
 * to right; empty chunks are skipped. */
#define TE_CT_RED_CHUNKS 8
#define TE_CT_RED_COLS 32   /* columns per block of the reduction */
TE_HD unsigned te_ct_red_chunk(unsigned parts) {
  return (parts + TE_CT_RED_CHUNKS - 1) / TE_CT_RED_CHUNKS;
}

#endif
