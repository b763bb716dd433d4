/* SPDX-License-Identifier: Apache-2.0 */
/* gemm16_params.h -- the parameters of kernels/gemm16.cu, libte's own
 * 16-bit GEMM on Hopper's warpgroup MMAs (the cuda backend's tecore_gemm
 * takes it for the GELU epilogues, libtecore/cuda/cuda_gemm16.c), declared
 * once (kparams.h).
 *
 * D[m][n] = epilogue(alpha * A B): A is [m][k] (row stride lda), B is
 * [n][k] (row stride ldb) or [k][n] (ldb), D and aux [m][n] (row stride
 * ldd) and bias[n], all of the input type; part[m / TE_GEMM16_BM][n] F32,
 * the column sums of D's float values over each block of rows, in a fixed
 * order (the dGELU epilogue's bias gradient, added up by
 * te_gemm16_bgrad). */
#ifndef TE_KERNELS_GEMM16_PARAMS_H
#define TE_KERNELS_GEMM16_PARAMS_H

#include "kparams.h"

#define TE_GEMM16_BM 128     /* rows of D a block computes (two warpgroups of 64) */
#define TE_GEMM16_BN 256     /* columns of D a block computes (one block an SM) */
#define TE_GEMM16_BK 64      /* k a pipeline stage holds */
#define TE_GEMM16_STAGES 4   /* stages in shared memory (two k-tiles loading ahead) */
#define TE_GEMM16_THREADS 256
/* shared memory: the stages and 1 KiB to align them */
#define TE_GEMM16_SMEM \
  (TE_GEMM16_STAGES * (TE_GEMM16_BM + TE_GEMM16_BN) * TE_GEMM16_BK * 2 + 1024)
/* te_gemm16_bgrad: columns a block, lanes adding parts */
#define TE_GEMM16_BG_COLS 32
#define TE_GEMM16_BG_LANES 8

struct te_gemm16_params {
  const void *a, *b;
  void *d;
  const void *bias;   /* 0: none */
  void *aux;          /* GELU: written (the pre-activation); dGELU: read */
  float *part;        /* dGELU: 0 or the column sums of each row block */
  long long lda, ldb, ldd;
  int m, n, k;
  float alpha;
};

/* te_gemm16_<t>_<b>_<epi>: t bf16 | f16; b kn (B [n][k]) | nk (B [k][n]);
 * epi lin (D = alpha A B + bias), gelu (aux = alpha A B + bias, D =
 * gelu(aux's float)), dgelu (D = alpha A B * gelu'(aux), the sums into
 * part) */
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
