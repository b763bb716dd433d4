/* SPDX-License-Identifier: Apache-2.0 */
/* gemm16_params.h -- the parameters of kernels/gemm16.cu, libte's own
 * 16-bit GEMM on Hopper's warpgroup MMAs (the cuda backend's tecore_gemm
 * takes it for the GELU epilogues, libtecore/cuda/cuda_gemm16.c), declared
 * once (kparams.h).
 *
 * D[m][n] = epilogue(alpha * A B): A is [m][k], B is [n][k] or [k][n]
 * (both read through TMA tensor maps), D and aux [m][n] (row stride ldd)
 * and bias[n], all of the input type; part[m / TE_GEMM16_BM][n] F32,
 * the column sums of D's float values over each block of rows, in a fixed
 * order (the dGELU epilogue's bias gradient, added up by
 * te_gemm16_bgrad). */
#ifndef TE_KERNELS_GEMM16_PARAMS_H
#define TE_KERNELS_GEMM16_PARAMS_H

#include "kparams.h"

#define TE_GEMM16_BM 128     /* rows of D a block computes (two warpgroups of 64) */
#define TE_GEMM16_BN 256     /* columns of D a block computes */
#define TE_GEMM16_BK 64      /* k a pipeline stage holds */
#define TE_GEMM16_STAGES 3   /* stages in shared memory, filled by the TMA */
/* a loading warp and seven epilogue warps, then two MMA warpgroups */
#define TE_GEMM16_THREADS 512
/* the wide product kernels (te_gemm16_<t>_<b>_dmulw, EPI_DMUL): a loading
 * warp and three epilogue warps, then two MMA warpgroups of one
 * m64n256k16 MMA a k-step (168 registers a thread) */
#define TE_GEMM16_THREADS_W 384
/* shared memory: the stages, the output tile (the 16-bit values the
 * epilogue warps take), the epilogue warps' column sums, the bias, the
 * stages' mbarriers, and 1 KiB to align the stages */
#define TE_GEMM16_SMEM                                                              \
  (TE_GEMM16_STAGES * (TE_GEMM16_BM + TE_GEMM16_BN) * TE_GEMM16_BK * 2 +            \
   TE_GEMM16_BM * TE_GEMM16_BN * 2 + 8 * TE_GEMM16_BN * 4 + TE_GEMM16_STAGES * 16 + 1024)
/* the wide kernels: the stages, the output tile (the aux tile first, the
 * TMA's), three warps' column sums, the stages' mbarriers and the aux
 * tile's, 1 KiB to align the stages */
#define TE_GEMM16_SMEM_W                                                            \
  (TE_GEMM16_STAGES * (TE_GEMM16_BM + TE_GEMM16_BN) * TE_GEMM16_BK * 2 +            \
   TE_GEMM16_BM * TE_GEMM16_BN * 2 + 3 * TE_GEMM16_BN * 4 + TE_GEMM16_STAGES * 16 + 8 + 1024)
/* te_gemm16_bgrad: columns a block, lanes adding parts */
#define TE_GEMM16_BG_COLS 32
#define TE_GEMM16_BG_LANES 8

/* A CUtensorMap (the driver's cuTensorMapEncodeTiled fills it): 128 bytes,
 * 64-byte aligned. */
#ifdef __cplusplus
#define TE_GEMM16_ALIGN64 alignas(64)
#else
#define TE_GEMM16_ALIGN64 _Alignas(64)
#endif
typedef struct te_gemm16_tmap {
  TE_GEMM16_ALIGN64 unsigned long long w[16];
} te_gemm16_tmap;

struct te_gemm16_params {
  te_gemm16_tmap ta;  /* A: [m][k], boxes of 128 rows x 64 k, 128-byte swizzle */
  te_gemm16_tmap tb;  /* B [n][k]: 256 rows x 64 k; B [k][n]: 64 k-rows x 64 n */
  te_gemm16_tmap tx;  /* the wide kernels' aux [m][ldd]: 128 rows x 64 columns */
  void *d;
  const void *bias;   /* 0: none */
  void *aux;          /* GELU: written (the pre-activation); dGELU: read */
  float *part;        /* dGELU: 0 or the column sums of each row block */
  long long ldd;
  int m, n, k;
  float alpha;
};

/* te_gemm16_<t>_<b>_<epi>: t bf16 | f16; b kn (B [n][k]) | nk (B [k][n]);
 * epi lin (D = alpha A B + bias), gelu (aux = alpha A B + bias rounded to
 * the type, D = gelu(aux)), dgelu (D = dy gelu'(aux), dy = alpha A B
 * rounded to the type, the sums of D's float values into part), gelud
 * (gelu' as aux), dmul (D = dy aux), dmulw (dmul on the wide kernel: the
 * sums of D's 16-bit values into part) */
#define TE_GEMM16_PARAMS(P) P(struct te_gemm16_params, p, gcblk)
/* te_gemm16_bgrad: out[c] = the sum over parts of part[p][c], lane l adding
 * parts l, l + TE_GEMM16_BG_LANES, ... in order, then the lanes in order;
 * out's type: dtype (a tecore_dtype_t code: F32, BF16 or F16) */
#define TE_GEMM16_BGRAD_PARAMS(P) \
  P(void *, out, nnptr)           \
  P(const float *, part, nnptr)   \
  P(int, dtype, val)              \
  P(int, parts, val)              \
  P(int, cols, val)

#endif
