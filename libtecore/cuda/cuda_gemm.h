/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm.h -- private to the cuda backend's GEMM (cuda_gemm*.c): the
 * cuBLASLt entry points (dlopen'ed by cuda_gemm_load.c, typed from the
 * build toolkit's <cublasLt.h>), the process's one handle, the status
 * mapping, and the algorithm cache.
 *
 * Nothing links -lcublasLt: the library loads on machines without it, and
 * the first GEMM on the cuda backend says why it cannot run. */
#ifndef TECORE_CUDA_GEMM_H
#define TECORE_CUDA_GEMM_H

/* The toolkit's header declares one function with () in C: not ours to fix. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop

#include "cuda/cuda_backend.h"
#include "gemm/gemm_problem.h"

/* X(name, required) -- required = 0: used for messages, or for the tuner's
 * split-k candidates (skipped without them). */
#define TE_LT_SYMBOLS(X)                                                       \
  X(cublasLtGetVersion, 1)                                                     \
  X(cublasLtCreate, 1)                                                         \
  X(cublasLtMatmulDescCreate, 1)                                               \
  X(cublasLtMatmulDescSetAttribute, 1)                                         \
  X(cublasLtMatmulDescDestroy, 1)                                              \
  X(cublasLtMatrixLayoutCreate, 1)                                             \
  X(cublasLtMatrixLayoutSetAttribute, 1)                                       \
  X(cublasLtMatrixLayoutDestroy, 1)                                            \
  X(cublasLtMatmulPreferenceCreate, 1)                                         \
  X(cublasLtMatmulPreferenceSetAttribute, 1)                                   \
  X(cublasLtMatmulPreferenceDestroy, 1)                                        \
  X(cublasLtMatmulAlgoGetHeuristic, 1)                                         \
  X(cublasLtMatmul, 1)                                                         \
  X(cublasLtGetStatusName, 0)                                                  \
  X(cublasLtMatmulAlgoConfigGetAttribute, 0)                                   \
  X(cublasLtGetStatusString, 0)                                                \
  X(cublasLtMatmulAlgoConfigSetAttribute, 0)                                   \
  X(cublasLtMatmulAlgoCheck, 0)

struct te_lt_api {
#define TE_LT_FIELD_(name, req) __typeof__(&name) p_##name;
  TE_LT_SYMBOLS(TE_LT_FIELD_)
#undef TE_LT_FIELD_
};
extern struct te_lt_api te_lt;

/* Loads cuBLASLt (once) and creates the process's handle (once it
 * succeeds).  TECORE_ERR_NO_LIBRARY with the reason when the library or
 * one of its entry points is missing; every later call repeats it. */
tecore_result_t te_lt_ready(cublasLtHandle_t *handle);
/* cublasLtGetVersion() of the loaded library (0 before te_lt_ready). */
size_t te_lt_version(void);

/* Maps a cublasStatus_t; on failure the detail reads
 * "<fn> failed: CUBLAS_STATUS_<X> (<n>): <text>[: <what>]". */
tecore_result_t te_lt_result(cublasStatus_t s, const char *fn, const char *what,
                             const char *file, int line);
#define TE_LT(fn, ...)                                                         \
  te_lt_result(te_lt.p_##fn(__VA_ARGS__), #fn, NULL, __FILE__, __LINE__)

/* The algorithm cache (cuda_gemm_cache.c): a small thread-safe hash table
 * from a GEMM's key (shape, types, layouts, epilogue, alignments, workspace,
 * device) to an opaque value (cuBLASLt's cublasLtMatmulAlgo_t, 64 bytes).
 * Full tables stop caching (lookups then miss; correctness is unchanged). */
#define TE_GEMM_KEY_WORDS 30
#define TE_GEMM_ALGO_BYTES 64
struct te_gemm_key {
  int64_t w[TE_GEMM_KEY_WORDS];
};
/* 1 and *val filled when key is cached, else 0. */
int te_gemm_cache_get(const struct te_gemm_key *key, void *val);
/* Stores key -> val (replacing an existing value); 0, or -1 when full. */
int te_gemm_cache_put(const struct te_gemm_key *key, const void *val);

/* libte's own 16-bit GEMM (cuda_gemm16.c, kernels/gemm16.cu).
 * te_gemm16_takes: 1 when it runs p on a device of compute capability cc
 * (major * 10 + minor), its dGELU column sums fitting the workspace ws of
 * ws_bytes (TECORE_GEMM_OWN, the shape, types, layouts and alignments);
 * te_gemm16_run then queues it on stream. */
int te_gemm16_takes(const struct te_gemm_problem *p, int cc, tecore_devptr_t ws,
                    size_t ws_bytes);
tecore_result_t te_gemm16_run(const struct te_gemm_problem *p, tecore_devptr_t ws,
                              size_t ws_bytes, tecore_stream_t stream);

/* Measured choice for small problems (cuda_gemm_tune.c).
 *
 * te_gemm_tune_count: how many heuristic candidates to ask for p: 1 (take
 * the heuristic's first, as always) unless TECORE_GEMM_TUNE_ALGOS >= 2 and
 * the smallest of m, n, k is at most TECORE_GEMM_TUNE_MAX_DIM, the epilogue
 * has an aux tensor, or te_gemm_tune_deep(p).
 * te_gemm_tune_deep: 1 when p has few output tiles over a long k (at most
 * TECORE_GEMM_TUNE_MAX_MN outputs, k >= 4 max(m, n)): measured, with
 * split-k variants of the heuristic's candidates added (cuda_gemm.c). */
#define TE_GEMM_TUNE_MAX_ALGOS 32
int te_gemm_tune_count(const struct te_gemm_problem *p);
int te_gemm_tune_deep(const struct te_gemm_problem *p);

/* One cublasLtMatmul's arguments but the algorithm: what a timed run
 * repeats.  Its pointers are private scratch (te_gemm_tune_scratch), never
 * the caller's outputs. */
struct te_lt_matmul {
  cublasLtHandle_t handle;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  const void *pa, *pb, *pc;
  void *pd;
  float alpha, beta;
  void *ws;
  size_t ws_bytes;
};

/* Begins a measurement on stream: TECORE_ERR_NOT_READY (and no error
 * text) when one cannot run now -- another thread is measuring, or the
 * stream captures or cannot tell -- so the caller takes the heuristic's
 * first answer without caching it.  On success the tuner's lock is held
 * and this thread's capture mode relaxed until te_gemm_tune_end. */
tecore_result_t te_gemm_tune_begin(tecore_stream_t stream);
void te_gemm_tune_end(void);
/* Scratch device memory of at least bytes for the current context, zeroed
 * in stream order when (re)allocated; between begin and end only.  Freed
 * by tecore_fini. */
tecore_result_t te_gemm_tune_scratch(size_t bytes, tecore_stream_t stream, tecore_devptr_t *ptr);
/* Times the n candidates with mm on stream (between begin and end):
 * us[i] is candidate i's median time in microseconds, or -1 when
 * cublasLtMatmul refused it or its timing failed.
 * Returns the index chosen (the fastest, but the heuristic's first
 * unless another beats it by more than 3%), or -1 when none ran. */
int te_gemm_tune_time(const struct te_lt_matmul *mm,
                      const cublasLtMatmulHeuristicResult_t *cand, int n,
                      tecore_stream_t stream, float *us);

#endif
