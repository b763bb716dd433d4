/* SPDX-License-Identifier: Apache-2.0 */
/* perf_gemm.h -- te-allreduce-perf -C ag-gemm | gemm-rs (perf_gemm.c). */
#ifndef TE_TOOLS_PERF_GEMM_H
#define TE_TOOLS_PERF_GEMM_H

#include <te/comm.h>
#include "out.h"

struct perf_gemm_opts {
  int rs;                 /* 0: all-gather + GEMM, 1: GEMM + reduce-scatter */
  size_t m, n, k;         /* m: every rank's rows together (tokens) */
  tecore_dtype_t dtype;   /* BF16, F16, or E4M3 (factors 1, d in BF16) */
  int warmup, iters, graph_ops, check;
  int nccl;               /* time the pair with NCCL itself too (cuda) */
  int chunks;             /* the chunks row's row blocks (0: the ranks) */
  struct te_out *out;     /* rank 0 writes */
};

/* Times the overlapped call, the GEMM alone, the collective then the GEMM
 * (or the GEMM then the collective; and with NCCL's collective), and the
 * collective alone, on comm;
 * rank 0 prints.  Returns the tool's exit status (TE_EXIT_FAIL when the
 * overlapped result differs from the unoverlapped pair's). */
int perf_gemm_run(tecomm_comm_t comm, const struct perf_gemm_opts *o);

#endif
