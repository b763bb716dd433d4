/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm_tune.c -- the cuda GEMM's measured algorithm choice for small
 * problems.  cuBLASLt's heuristic ranks algorithms by a model that fits
 * large GEMMs; at a few tokens (m = 16, n = 8192, k = 4096) its first pick
 * can run several times slower than reading the weight once allows (too
 * few CTAs, no split-k).  So for problems whose smallest dimension is at
 * most TECORE_GEMM_TUNE_MAX_DIM, cuda_gemm.c asks the heuristic for
 * TECORE_GEMM_TUNE_ALGOS candidates and this file times each one on the
 * caller's stream on the first call of that problem; the fastest is cached
 * (cuda_gemm_cache.c) under the problem's key like a heuristic answer.
 * The default, 4096, covers the GEMMs of a transformer of hidden size up
 * to 4096: on an H100 the heuristic's first for GPT-2 124M's (hidden 768)
 * was 5-10% slower than the fastest of eight, the language-model head's
 * three 3.2-3.5 ms GEMMs among them (bench/2026-11-26.md, session 30).
 *
 * The timed runs write private scratch (one device buffer per context,
 * grown as needed, freed by tecore_fini), never the caller's D, C, aux,
 * bias gradient or amax: the caller's call then runs once, as always.
 * A measurement needs a host wait for the stream (the first call of a
 * tuned problem returns after the stream's earlier work), so it never runs
 * while the stream captures, nor while another thread measures (the lock
 * is only tried): those calls take the heuristic's first answer, uncached,
 * and a later call measures.  While measuring, the thread's capture mode is
 * relaxed, so the scratch allocation and the event waits do not invalidate
 * another thread's global-mode capture of an unrelated stream. */
#include "cuda/cuda_gemm.h"

#include <pthread.h>
#include <string.h>

TE_PARAM_INT(gemm_tune_algos, "TECORE_GEMM_TUNE_ALGOS", 8, 0, TE_GEMM_TUNE_MAX_ALGOS,
             "cuBLASLt algorithms timed on the first call of a small GEMM problem, the fastest "
             "kept for the process (0 or 1: the heuristic's first, unmeasured)")
TE_PARAM_INT(gemm_tune_max_mn, "TECORE_GEMM_TUNE_MAX_MN", 8388608, 0, (int64_t)1 << 40,
             "GEMMs whose output has at most this many elements (m * n) and a k at least "
             "four times max(m, n) -- a weight gradient's few output tiles over many tokens -- "
             "are measured too, with split-k variants of the heuristic's candidates among them")
TE_PARAM_INT(gemm_tune_max_dim, "TECORE_GEMM_TUNE_MAX_DIM", 4096, 0, 1 << 30,
             "GEMMs whose smallest dimension (of m, n, k) is at most this, or whose epilogue "
             "has an aux tensor, are measured (TECORE_GEMM_TUNE_ALGOS); larger ones take the "
             "heuristic's first algorithm")

enum {
  TUNE_WARM = 2,   /* untimed runs first: clocks, caches, the kernel's first load */
  TUNE_REPS = 5    /* timed runs; their median is the candidate's time */
};
#define TUNE_MAX_CTX 16
/* the heuristic's first keeps its place unless beaten by more than this:
 * timing noise should not flip the choice (and the numerics) between runs */
#define TUNE_MARGIN 0.97f

int te_gemm_tune_count(const struct te_gemm_problem *p) {
  int64_t n = tecore_tunable_int(&gemm_tune_algos);
  size_t lim = (size_t)tecore_tunable_int(&gemm_tune_max_dim);
  size_t d = p->m < p->n ? p->m : p->n;
  if (p->k < d) d = p->k;
  /* an epilogue with an aux tensor (GELU's pre-activation, dGELU) is
   * measured at any size: on an H100 the heuristic's first for a GPT-2
   * fc1 (32768 x 3072 x 768, bias + GELU + aux) ran at 255 TFLOP/s, the
   * same GEMM without the epilogue at 660 (bench/2026-11-23.md, session 13) */
  if (p->aux && n >= 2) return (int)n;
  if (n >= 2 && te_gemm_tune_deep(p)) return (int)n;
  return n >= 2 && d <= lim ? (int)n : 1;
}

/* Few output tiles over a long k (a weight gradient: m x n a Linear's
 * weight, k the tokens), the GEMMs of a step that ran slowest (GPT-2 124M
 * on an H100: 768 x 768 x 32768 at 383 TFLOP/s, 2304 x 768 x 32768 at
 * 468, the step's wide GEMMs at 660-860; bench/2026-11-25.md, session 23, c6).  Such
 * problems are measured, split-k variants among the candidates
 * (cuda_gemm.c); on that H100 the heuristic's first already split k for
 * most of them, and measuring won 4% on 768 x 3072 x 32768
 * (bench/2026-11-25.md, session 24). */
int te_gemm_tune_deep(const struct te_gemm_problem *p) {
  size_t lim = (size_t)tecore_tunable_int(&gemm_tune_max_mn);
  size_t big = p->m > p->n ? p->m : p->n;
  return lim && p->m * p->n <= lim && p->k >= 4 * big;
}

/* ---- the lock, the capture mode, the scratch ------------------------------ */

static pthread_mutex_t tune_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  tecore_ctx_t ctx;
  tecore_devptr_t ptr;
  size_t bytes;
} scratch[TUNE_MAX_CTX];
static int nscratch, fini_registered;
/* this thread's capture mode before te_gemm_tune_begin relaxed it */
static __thread CUstreamCaptureMode saved_mode;
static __thread int mode_saved;

/* tecore_fini hook: hooks run before the backend stops, so the memory can
 * still be given back. */
static void tune_fini(void *arg) {
  (void)arg;
  pthread_mutex_lock(&tune_lock);
  for (int i = 0; i < nscratch; i++)
    if (scratch[i].ptr) (void)tecore_mem_free(scratch[i].ptr);
  memset(scratch, 0, sizeof scratch);
  nscratch = 0;
  pthread_mutex_unlock(&tune_lock);
}

tecore_result_t te_gemm_tune_begin(tecore_stream_t stream) {
  tecore_capture_status_t st = TECORE_CAPTURE_NONE;
  /* no capture query (an old driver): cannot tell, so do not measure */
  if (te_cuda_stream_capture_status(stream, &st) != TECORE_SUCCESS || st != TECORE_CAPTURE_NONE)
    return TECORE_ERR_NOT_READY;
  if (pthread_mutex_trylock(&tune_lock) != 0) return TECORE_ERR_NOT_READY;
  mode_saved = 0;
  if (te_cu.p_cuThreadExchangeStreamCaptureMode) {
    saved_mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    if (te_cu.p_cuThreadExchangeStreamCaptureMode(&saved_mode) == CUDA_SUCCESS) mode_saved = 1;
  }
  return TECORE_SUCCESS;
}

void te_gemm_tune_end(void) {
  if (mode_saved) (void)te_cu.p_cuThreadExchangeStreamCaptureMode(&saved_mode);
  mode_saved = 0;
  pthread_mutex_unlock(&tune_lock);
}

tecore_result_t te_gemm_tune_scratch(size_t bytes, tecore_stream_t stream, tecore_devptr_t *ptr) {
  tecore_ctx_t ctx = NULL;
  TE_CHECK(tecore_ctx_get_current(&ctx));
  int i;
  for (i = 0; i < nscratch && scratch[i].ctx != ctx; i++) {}
  if (i == nscratch) {
    if (nscratch == TUNE_MAX_CTX)
      return TE_ERR(TECORE_ERR_NOMEM, "gemm tuning: scratch for %d contexts already",
                    TUNE_MAX_CTX);
    scratch[nscratch++].ctx = ctx;
  }
  if (scratch[i].bytes < bytes) {
    /* every earlier measurement waited for its runs: the old buffer is idle */
    if (scratch[i].ptr) (void)tecore_mem_free(scratch[i].ptr);
    scratch[i].ptr = 0;
    scratch[i].bytes = 0;
    size_t want = (bytes + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    TE_CHECK(tecore_mem_alloc(want, &scratch[i].ptr));
    scratch[i].bytes = want;
    /* defined values for runs that read their output (beta != 0) */
    TE_CHECK(tecore_memset_d8_async(scratch[i].ptr, 0, want, stream));
    if (!fini_registered && tecore_fini_register(tune_fini, NULL) == TECORE_SUCCESS)
      fini_registered = 1;
    TE_INFO(TECORE_SUBSYS_TUNE, "gemm: %zu KiB of scratch for timing GEMM algorithms",
            want >> 10);
  }
  *ptr = scratch[i].ptr;
  return TECORE_SUCCESS;
}

/* ---- timing ------------------------------------------------------------------ */

static float median(float *v, int n) {
  for (int i = 1; i < n; i++)   /* insertion sort: n is TUNE_REPS */
    for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
      float t = v[j];
      v[j] = v[j - 1];
      v[j - 1] = t;
    }
  return v[n / 2];
}

static cublasStatus_t run_once(const struct te_lt_matmul *mm, const cublasLtMatmulAlgo_t *algo,
                               tecore_stream_t stream) {
  return te_lt.p_cublasLtMatmul(mm->handle, mm->op, &mm->alpha, mm->pa, mm->la, mm->pb, mm->lb,
                                &mm->beta, mm->pc, mm->lc, mm->pd, mm->ld, algo, mm->ws,
                                mm->ws_bytes, stream);
}

/* Candidate's median time in microseconds, or -1. */
static float time_one(const struct te_lt_matmul *mm, const cublasLtMatmulAlgo_t *algo,
                      tecore_stream_t stream, tecore_event_t *ev) {
  for (int w = 0; w < TUNE_WARM; w++)
    if (run_once(mm, algo, stream) != CUBLAS_STATUS_SUCCESS) return -1.0f;
  for (int r = 0; r < TUNE_REPS; r++) {
    if (tecore_event_record(ev[r], stream) != TECORE_SUCCESS) return -1.0f;
    if (run_once(mm, algo, stream) != CUBLAS_STATUS_SUCCESS) return -1.0f;
  }
  if (tecore_event_record(ev[TUNE_REPS], stream) != TECORE_SUCCESS ||
      tecore_event_synchronize(ev[TUNE_REPS]) != TECORE_SUCCESS)
    return -1.0f;
  float t[TUNE_REPS];
  for (int r = 0; r < TUNE_REPS; r++)
    if (tecore_event_elapsed(&t[r], ev[r], ev[r + 1]) != TECORE_SUCCESS) return -1.0f;
  return median(t, TUNE_REPS) * 1000.0f;
}

int te_gemm_tune_time(const struct te_lt_matmul *mm, const cublasLtMatmulHeuristicResult_t *cand,
                      int n, tecore_stream_t stream, float *us) {
  tecore_event_t ev[TUNE_REPS + 1];
  int nev = 0, best = -1, first = -1;
  for (; nev <= TUNE_REPS; nev++)
    if (tecore_event_create(TECORE_EVENT_DEFAULT, &ev[nev]) != TECORE_SUCCESS) break;
  for (int i = 0; i < n; i++) {
    us[i] = nev == TUNE_REPS + 1 ? time_one(mm, &cand[i].algo, stream, ev) : -1.0f;
    if (us[i] < 0) continue;
    if (first < 0) first = i;
    if (best < 0 || us[i] < us[best]) best = i;
  }
  /* a refused candidate may have left queued runs: wait for them, since
   * the scratch may be reallocated by the next measurement */
  (void)tecore_stream_synchronize(stream);
  for (int e = 0; e < nev; e++) (void)tecore_event_destroy(ev[e]);
  if (best >= 0 && us[best] > TUNE_MARGIN * us[first]) best = first;
  return best;
}
