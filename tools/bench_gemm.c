/* SPDX-License-Identifier: Apache-2.0 */
/* bench_gemm.c -- te-bench's GEMM section (--gemm): libte's tecore_gemm
 * beside cuBLASLt called directly, in the same run, on the same buffers,
 * with the same descriptors (so the same heuristic algorithm) and the same
 * workspace: the ratio is libte's overhead (target >= 97%).
 *   FP8 E4M3 x E4M3 -> BF16, 4096^3 and 8192^3 (fast accumulation on and off)
 *   BF16 x BF16 -> BF16, 4096^3 and 8192^3
 *   small m (16, 64, 128 tokens) x 8192 x 4096, FP8 (fast accumulation)
 *     and BF16: libte measures its algorithm there (cuda_gemm_tune.c), the
 *     direct call takes the heuristic's first; the floor is the bytes over
 *     the copy bandwidth
 *   Linear+Bias+GELU forward (FP8, tokens 8192, in 4096, out 16384; and
 *     BF16 at GPT-2 124M's fc1, tokens 32768, in 768, out 3072, which
 *     libte's own GEMM takes on Hopper, TECORE_GEMM_OWN): the
 *     BIAS_GELU_AUX epilogue against the GEMM with the bias epilogue
 *     followed by a separate GELU kernel (tecore_act_fwd).  libtecore has
 *     no bias-add+GELU kernel, so the bias rides in the unfused GEMM's
 *     epilogue; what the fusion saves is then the GELU kernel's extra read
 *     of the pre-activation (its write of D is the fused GEMM's too), and
 *     the floor printed is those bytes over the copy bandwidth.
 * Layout: row-major D[m][n] = A[m][k] B[n][k]^T (te/gemm.h's TN case),
 * which is cuBLASLt's column-major D' = B'^T A' with op(A') = T.
 * Needs the cuda backend; on vdev it says so and returns. */
#include "config.h"
#include "bench.h"
#include <te/activation.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef TE_HAVE_CUDA
#include <dlfcn.h>
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <cublasLt.h>
#pragma GCC diagnostic pop
#include "cuda/cuda_gemm_algo.h"

/* The direct path loads cuBLASLt itself, as an application would. */
struct lt_fns {
  void *lib;
  __typeof__(&cublasLtCreate) create;
  __typeof__(&cublasLtDestroy) destroy;
  __typeof__(&cublasLtGetVersion) version;
  __typeof__(&cublasLtMatmulDescCreate) desc_create;
  __typeof__(&cublasLtMatmulDescSetAttribute) desc_set;
  __typeof__(&cublasLtMatmulDescDestroy) desc_destroy;
  __typeof__(&cublasLtMatrixLayoutCreate) layout_create;
  __typeof__(&cublasLtMatrixLayoutDestroy) layout_destroy;
  __typeof__(&cublasLtMatmulPreferenceCreate) pref_create;
  __typeof__(&cublasLtMatmulPreferenceSetAttribute) pref_set;
  __typeof__(&cublasLtMatmulPreferenceDestroy) pref_destroy;
  __typeof__(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  __typeof__(&cublasLtMatmul) matmul;
  te_lt_algo_get_fn algo_get;   /* optional: for the algorithm's description */
  cublasLtHandle_t handle;
};

static int lt_open(struct lt_fns *f) {
  const char *env = getenv("TECORE_CUBLASLT_LIB");
  const char *names[] = {env && env[0] ? env : "libcublasLt.so.13", "libcublasLt.so.12",
                         "/usr/local/cuda/lib64/libcublasLt.so.13",
                         "/usr/local/cuda/lib64/libcublasLt.so.12"};
  for (size_t i = 0; i < 4 && !f->lib; i++) f->lib = dlopen(names[i], RTLD_NOW | RTLD_LOCAL);
  if (!f->lib) return -1;
#define LT_SYM(field, name)                                           \
  if (!(f->field = (__typeof__(f->field))dlsym(f->lib, #name))) return -1;
  LT_SYM(create, cublasLtCreate)
  LT_SYM(destroy, cublasLtDestroy)
  LT_SYM(version, cublasLtGetVersion)
  LT_SYM(desc_create, cublasLtMatmulDescCreate)
  LT_SYM(desc_set, cublasLtMatmulDescSetAttribute)
  LT_SYM(desc_destroy, cublasLtMatmulDescDestroy)
  LT_SYM(layout_create, cublasLtMatrixLayoutCreate)
  LT_SYM(layout_destroy, cublasLtMatrixLayoutDestroy)
  LT_SYM(pref_create, cublasLtMatmulPreferenceCreate)
  LT_SYM(pref_set, cublasLtMatmulPreferenceSetAttribute)
  LT_SYM(pref_destroy, cublasLtMatmulPreferenceDestroy)
  LT_SYM(heuristic, cublasLtMatmulAlgoGetHeuristic)
  LT_SYM(matmul, cublasLtMatmul)
#undef LT_SYM
  f->algo_get = (te_lt_algo_get_fn)dlsym(f->lib, "cublasLtMatmulAlgoConfigGetAttribute");
  return f->create(&f->handle) == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

/* One problem: D[m][n] (BF16) = A[m][k] B[n][k]^T; FP8 or BF16 operands. */
struct gemm_prob {
  size_t m, n, k;
  tecore_dtype_t in;
  int fast;
  tecore_devptr_t a, b, d, sa, sb, ws;
  size_t ws_bytes;
  struct tecore_tensor A, B, D;
  struct tecore_gemm_opts opts;
  /* the direct call's descriptors, built once (its best case) */
  struct lt_fns *lt;
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, ld;
  cublasLtMatmulAlgo_t algo;
};

static cudaDataType_t cu_type(tecore_dtype_t d) {
  return d == TECORE_DTYPE_E4M3 ? CUDA_R_8F_E4M3 : d == TECORE_DTYPE_BF16 ? CUDA_R_16BF : CUDA_R_32F;
}

/* The descriptors libte builds for this problem, built here by hand. */
static int direct_setup(struct gemm_prob *p) {
  struct lt_fns *f = p->lt;
  int fp8 = p->in == TECORE_DTYPE_E4M3;
  int32_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  uint32_t epi = CUBLASLT_EPILOGUE_DEFAULT;
  if (f->desc_create(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F)) return -1;
  f->desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta);
  f->desc_set(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb);
  if (fp8) {
    int8_t fast = (int8_t)p->fast;
    const void *sa = (const void *)(uintptr_t)p->sb, *sb = (const void *)(uintptr_t)p->sa;
    f->desc_set(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
    f->desc_set(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof sa);
    f->desc_set(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof sb);
  }
  f->desc_set(p->op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof epi);
  if (f->layout_create(&p->la, cu_type(p->in), p->k, p->n, (int64_t)p->k) ||
      f->layout_create(&p->lb, cu_type(p->in), p->k, p->m, (int64_t)p->k) ||
      f->layout_create(&p->ld, CUDA_R_16BF, p->n, p->m, (int64_t)p->n))
    return -1;
  cublasLtMatmulPreference_t pref;
  uint64_t wsb = p->ws_bytes;
  uint32_t al = 256;
  if (f->pref_create(&pref)) return -1;
  f->pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
  f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al, sizeof al);
  f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al, sizeof al);
  f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al, sizeof al);
  f->pref_set(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al, sizeof al);
  cublasLtMatmulHeuristicResult_t res;
  int found = 0;
  memset(&res, 0, sizeof res);
  cublasStatus_t s = f->heuristic(f->handle, p->op, p->la, p->lb, p->ld, p->ld, pref, 1, &res,
                                  &found);
  f->pref_destroy(pref);
  if (s != CUBLAS_STATUS_SUCCESS || found == 0) return -1;
  p->algo = res.algo;
  return 0;
}

static void direct_free(struct gemm_prob *p) {
  struct lt_fns *f = p->lt;
  if (p->la) f->layout_destroy(p->la);
  if (p->lb) f->layout_destroy(p->lb);
  if (p->ld) f->layout_destroy(p->ld);
  if (p->op) f->desc_destroy(p->op);
}

static tecore_result_t direct_body(struct tb_ctx *c, void *arg) {
  struct gemm_prob *p = arg;
  float one = 1.0f, zero = 0.0f;
  void *d = (void *)(uintptr_t)p->d;
  cublasStatus_t s = p->lt->matmul(p->lt->handle, p->op, &one, (const void *)(uintptr_t)p->b,
                                   p->la, (const void *)(uintptr_t)p->a, p->lb, &zero, d, p->ld,
                                   d, p->ld, &p->algo, (void *)(uintptr_t)p->ws, p->ws_bytes,
                                   c->s);
  if (s != CUBLAS_STATUS_SUCCESS) {
    fprintf(stderr, "te-bench: cublasLtMatmul: status %d\n", (int)s);
    return TECORE_ERR_DRIVER;
  }
  return TECORE_SUCCESS;
}

static tecore_result_t libte_body(struct tb_ctx *c, void *arg) {
  struct gemm_prob *p = arg;
  return tecore_gemm(&p->A, TECORE_GEMM_N, &p->B, TECORE_GEMM_T, &p->D, 1.0f, 0.0f, &p->opts,
                     c->s);
}

/* Host microseconds to queue one call, over c->iters calls queued back
 * to back (the stream drained after).  A GEMM of 1.4 ms hides any host
 * cost below that unless something in the call waits for the device: a
 * queue time near the GPU time per call says the call synchronizes. */
static double host_us_per_call(struct tb_ctx *c, tb_body body, struct gemm_prob *p) {
  double t0 = tb_now_us();
  tecore_result_t r = TECORE_SUCCESS;
  for (int i = 0; i < c->iters && r == TECORE_SUCCESS; i++) r = body(c, p);
  double t1 = tb_now_us();
  if (tecore_stream_synchronize(c->s) != TECORE_SUCCESS || r != TECORE_SUCCESS) return -1;
  return (t1 - t0) / c->iters;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

/* The two sides call by call: direct (dbody), libte (lbody), libte,
 * direct, ... (the order flips every pair, so neither is always first),
 * each call between two events of its own, 2 * c->iters calls a side
 * after 3 warm-ups each; the median of each side over per (the GEMMs a
 * call queues: 1, or a graph's).  At 8192^3 BF16 an H100 reaches its power
 * limit within a few rounds and lowers its clock (nvidia-smi: SW power
 * cap): timed in blocks, the side measured first ran cool and the other
 * hot (95% and 93% in one run, 99.7% in the next, with the same kernel);
 * interleaved, both sides see the same clocks. */
static void interleaved(struct tb_ctx *c, tb_body dbody, void *darg, tb_body lbody, void *larg,
                        int per, double *t_direct, double *t_libte) {
  const int n = 2 * (c->iters > 0 ? c->iters : 1);
  tecore_event_t *ev = calloc((size_t)(2 * n + 1), sizeof *ev);
  double *td = calloc((size_t)n, sizeof *td), *tl = calloc((size_t)n, sizeof *tl);
  tecore_result_t r = ev && td && tl ? TECORE_SUCCESS : TECORE_ERR_NOMEM;
  int made = 0;
  for (; r == TECORE_SUCCESS && made < 2 * n + 1; made++) r = tecore_event_create(0, &ev[made]);
  for (int i = 0; i < 3 && r == TECORE_SUCCESS; i++) {
    r = dbody(c, darg);
    if (r == TECORE_SUCCESS) r = lbody(c, larg);
  }
  if (r == TECORE_SUCCESS) r = tecore_event_record(ev[0], c->s);
  for (int k = 0; k < 2 * n && r == TECORE_SUCCESS; k++) {
    /* pairs alternate D L, L D: call k is the direct one when k % 4 is 0 or 3 */
    int direct = (k % 4 == 0) || (k % 4 == 3);
    r = direct ? dbody(c, darg) : lbody(c, larg);
    if (r == TECORE_SUCCESS) r = tecore_event_record(ev[k + 1], c->s);
  }
  if (r == TECORE_SUCCESS) r = tecore_event_synchronize(ev[2 * n]);
  int nd = 0, nl = 0;
  for (int k = 0; k < 2 * n && r == TECORE_SUCCESS; k++) {
    float ms = 0;
    r = tecore_event_elapsed(&ms, ev[k], ev[k + 1]);
    if ((k % 4 == 0) || (k % 4 == 3)) td[nd++] = ms;
    else tl[nl++] = ms;
  }
  if (r == TECORE_SUCCESS && nd > 0 && nl > 0) {
    qsort(td, (size_t)nd, sizeof *td, cmp_double);
    qsort(tl, (size_t)nl, sizeof *tl, cmp_double);
    *t_direct = td[nd / 2] / per;
    *t_libte = tl[nl / 2] / per;
  } else {
    fprintf(stderr, "te-bench: gemm timing failed: %s (%s)\n", tecore_strerror(r),
            tecore_last_error());
    c->failed = 1;
  }
  for (int k = 0; k < made; k++) tecore_event_destroy(ev[k]);
  free(ev);
  free(td);
  free(tl);
}

/* A GEMM of a few tokens takes about as long on the device (about 10 us
 * on an H100 or H200) as a call takes to queue on the host (8-16 us):
 * between eager calls the device waits for the host, the events around a
 * call hold that wait too, and the side with the slower host path looks
 * slower (libte 0.81x the direct call in one H200 run, 1.00x in the next,
 * the same algorithm).  Such rows are timed on graphs instead: each
 * side's calls captured, GRAPH_CALLS to a graph, the two graphs launched
 * in turn as interleaved() launches calls, per call the launch's time
 * over GRAPH_CALLS -- device time only.  The calls of a graph read one
 * weight, which a 50-60 MB L2 holds from call to call: on an H100 the
 * FP8 16x8192x4096 call took 8 us against the 11.3 us HBM floor the row
 * notes.  Both sides alike; a decode step's layers each read their own. */
enum { GRAPH_CALLS = 20 };

static tecore_result_t graph_body(struct tb_ctx *c, void *arg) {
  return tecore_graph_launch(*(tecore_graph_exec_t *)arg, c->s);
}

static tecore_result_t capture_calls(struct tb_ctx *c, tb_body body, void *arg,
                                     tecore_graph_exec_t *x) {
  tecore_graph_t g = NULL;
  tecore_result_t r = tecore_stream_begin_capture(c->s, TECORE_CAPTURE_THREAD_LOCAL);
  if (r != TECORE_SUCCESS) return r;
  for (int i = 0; i < GRAPH_CALLS && r == TECORE_SUCCESS; i++) r = body(c, arg);
  tecore_result_t re = tecore_stream_end_capture(c->s, &g);
  if (r == TECORE_SUCCESS) r = re;
  if (r == TECORE_SUCCESS) r = tecore_graph_instantiate(x, g);
  if (g) tecore_graph_destroy(g);
  return r;
}

static void interleaved_graphs(struct tb_ctx *c, struct gemm_prob *p, double *t_direct,
                               double *t_libte) {
  tecore_graph_exec_t xd = NULL, xl = NULL;
  /* eager calls first: libte measures its algorithm on the first one,
   * never during a capture */
  tecore_result_t r = direct_body(c, p);
  if (r == TECORE_SUCCESS) r = libte_body(c, p);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(c->s);
  if (r == TECORE_SUCCESS) r = capture_calls(c, direct_body, p, &xd);
  if (r == TECORE_SUCCESS) r = capture_calls(c, libte_body, p, &xl);
  if (r == TECORE_SUCCESS)
    interleaved(c, graph_body, &xd, graph_body, &xl, GRAPH_CALLS, t_direct, t_libte);
  else {
    fprintf(stderr, "te-bench: gemm graphs: %s (%s)\n", tecore_strerror(r), tecore_last_error());
    c->failed = 1;
  }
  if (xd) tecore_graph_exec_destroy(xd);
  if (xl) tecore_graph_exec_destroy(xl);
}

static int prob_alloc(struct tb_ctx *c, struct gemm_prob *p) {
  size_t sa[2] = {p->m, p->k}, sb[2] = {p->n, p->k}, sd[2] = {p->m, p->n};
  float one = 1.0f;
  p->a = tb_alloc_random(c, p->m * p->k, p->in);
  p->b = tb_alloc_random(c, p->n * p->k, p->in);
  p->d = tb_alloc_random(c, p->m * p->n, TECORE_DTYPE_BF16);
  if (!p->a || !p->b || !p->d || tecore_mem_alloc(4, &p->sa) || tecore_mem_alloc(4, &p->sb) ||
      tecore_memcpy(p->sa, (tecore_devptr_t)(uintptr_t)&one, 4) ||
      tecore_memcpy(p->sb, (tecore_devptr_t)(uintptr_t)&one, 4))
    return -1;
  /* FP8 operands are random bytes (a few NaN codes among them): the
   * tensor cores' speed does not depend on the values */
  tecore_tensor_init(&p->A, p->in, 2, sa, p->a);
  tecore_tensor_init(&p->B, p->in, 2, sb, p->b);
  tecore_tensor_init(&p->D, TECORE_DTYPE_BF16, 2, sd, p->d);
  if (p->in == TECORE_DTYPE_E4M3) {
    p->A.scaling = p->B.scaling = TECORE_SCALING_DELAYED;
    p->A.scale_inv = p->sa;
    p->B.scale_inv = p->sb;
  }
  p->opts.fast_accum = p->fast;
  p->opts.workspace = p->ws;
  p->opts.workspace_bytes = p->ws_bytes;
  return 0;
}

static void prob_free(struct gemm_prob *p) {
  tecore_mem_free(p->a);
  tecore_mem_free(p->b);
  tecore_mem_free(p->d);
  tecore_mem_free(p->sa);
  tecore_mem_free(p->sb);
}

/* One GEMM row: TFLOP/s beside a peer (cuBLASLt called directly, or the
 * unfused pair); target judged on a GPU only (tb_row). */
static void report_flops(struct tb_ctx *c, struct tb_row r, double flops) {
  r.unit = "ms";
  r.rate = flops / (r.time * 1e-3) / 1e12;
  r.rate_unit = "TFLOP/s";
  tb_row(c, &r);
}

/* m x n x k (m the tokens): libte beside the direct call with the
 * heuristic's first algorithm.  At m <= TECORE_GEMM_TUNE_MAX_DIM libte
 * measures its candidates on the first call (cuda_gemm_tune.c), so the
 * ratio there is what measuring wins; the note then also gives the floor,
 * the operands' and D's bytes over the copy bandwidth. */
static void bench_pair(struct tb_ctx *c, const struct gemm_prob *where, tecore_dtype_t in,
                       size_t m, size_t n, size_t k, int fast) {
  struct gemm_prob p = {.m = m, .n = n, .k = k, .in = in, .fast = fast, .ws = where->ws,
                        .ws_bytes = where->ws_bytes, .lt = where->lt};
  char shape[48], name[64];
  snprintf(shape, sizeof shape, "%zux%zux%zu", m, n, k);
  if (prob_alloc(c, &p) || direct_setup(&p)) {
    fprintf(stderr, "te-bench: gemm %s %s: set-up failed: %s\n", tecore_dtype_name(in), shape,
            tecore_last_error());
    c->failed = 1;
  } else {
    double flops = 2.0 * (double)m * (double)n * (double)k;
    double t_lt = -1, t_te = -1;
    if (m < n && m < k)   /* a few tokens: device time about the host's */
      interleaved_graphs(c, &p, &t_lt, &t_te);
    else
      interleaved(c, direct_body, &p, libte_body, &p, 1, &t_lt, &t_te);
    const char *kind = in == TECORE_DTYPE_E4M3 ? (fast ? "e4m3 fast-acc" : "e4m3") : "bf16";
    /* the direct call's algorithm; libte logs its own at TE_DEBUG=INFO
     * TE_DEBUG_SUBSYS=TUNE ("gemm: heuristic for ..."): equal lines, the
     * same kernel */
    char algo[160];
    te_lt_algo_describe(p.lt->algo_get, &p.algo, algo, sizeof algo);
    snprintf(name, sizeof name, "gemm %s cuBLASLt direct", kind);
    report_flops(c, (struct tb_row){.name = name, .shape = shape, .time = t_lt, .note = algo}, flops);
    if (t_lt > 0 && t_te > 0) {
      double h_lt = host_us_per_call(c, direct_body, &p), h_te = host_us_per_call(c, libte_body, &p);
      char note[160];
      int at = snprintf(note, sizeof note, "host to queue a call: %.1f us libte, %.1f us direct",
                        h_te, h_lt);
      if (m < n && m < k && c->copy_gbs > 0) {
        double bytes = (double)(m + n) * k * tecore_dtype_size(in) + 2.0 * m * n;
        snprintf(note + at, sizeof note - (size_t)at, "; floor %.1f us (%.1f MB over copy "
                 "bandwidth)", bytes / (c->copy_gbs * 1e9) * 1e6, bytes / 1e6);
      }
      snprintf(name, sizeof name, "gemm %s libte", kind);
      report_flops(c, (struct tb_row){.name = name, .shape = shape, .time = t_te,
                       .peer = "cuBLASLt direct", .peer_time = t_lt,
                       .target = ">= 97% of cuBLASLt", .met = 100.0 * t_lt / t_te >= 97.0, .note = note}, flops);
    }
  }
  direct_free(&p);
  prob_free(&p);
}

/* A fused call and its unfused peer on the same arguments, each timed
 * twice in turn (a clock the power limit lowers slows both alike), the
 * better of each kept (a failed timing, <= 0, never wins). */
static void time_pair(struct tb_ctx *c, tb_body fused, tb_body unfused, void *arg, double *tf,
                      double *tu) {
  *tf = tb_time(c, fused, arg);
  *tu = tb_time(c, unfused, arg);
  double tf2 = tb_time(c, fused, arg), tu2 = tb_time(c, unfused, arg);
  if (tf2 > 0 && tf2 < *tf) *tf = tf2;
  if (tu2 > 0 && tu2 < *tu) *tu = tu2;
}

/* A variant of a fused row (another epilogue on the same arguments),
 * timed and reported beside the row's own time, or why it did not run
 * (an epilogue only some GEMM libraries have). */
struct variant {
  const char *name, *peer, *note, *epi;
};
static void report_variant(struct tb_ctx *c, const struct variant *v, tb_body body, void *arg,
                           const char *shape, double flops, double peer_t) {
  double t = tb_time(c, body, arg);
  if (t > 0)
    report_flops(c, (struct tb_row){.name = v->name, .shape = shape, .time = t, .peer = v->peer,
                     .peer_time = peer_t, .note = v->note}, flops);
  else
    tb_info(c, "gemm: %s not run here: %s", v->epi, tecore_last_error());
}

/* ---- Linear + Bias + GELU ---- */

struct mlp_arg {
  struct tecore_tensor X, W, pre, out, bias;
  struct tecore_gemm_opts fused, biased, daux;
};

static tecore_result_t mlp_fused(struct tb_ctx *c, void *arg) {
  struct mlp_arg *a = arg;
  return tecore_gemm(&a->X, TECORE_GEMM_N, &a->W, TECORE_GEMM_T, &a->out, 1, 0, &a->fused, c->s);
}

/* the same, gelu' saved as aux instead of the pre-activation */
static tecore_result_t mlp_daux(struct tb_ctx *c, void *arg) {
  struct mlp_arg *a = arg;
  return tecore_gemm(&a->X, TECORE_GEMM_N, &a->W, TECORE_GEMM_T, &a->out, 1, 0, &a->daux, c->s);
}

static tecore_result_t mlp_gemm(struct tb_ctx *c, void *arg) {
  struct mlp_arg *a = arg;
  return tecore_gemm(&a->X, TECORE_GEMM_N, &a->W, TECORE_GEMM_T, &a->pre, 1, 0, &a->biased, c->s);
}

static tecore_result_t mlp_unfused(struct tb_ctx *c, void *arg) {
  struct mlp_arg *a = arg;
  TB_CHECK(tecore_gemm(&a->X, TECORE_GEMM_N, &a->W, TECORE_GEMM_T, &a->pre, 1, 0, &a->biased,
                       c->s));
  return tecore_act_fwd(TECORE_ACT_GELU, &a->pre, &a->out, 0, c->s);
}

/* m tokens through a Linear of n outputs, k inputs (inputs of type it:
 * E4M3 with per-tensor scales, or BF16), with bias and GELU: the fused
 * epilogue against GEMM+bias then the GELU kernel.  At a few tokens (a
 * decode step) both are bound by reading the weight: the floor printed is
 * its bytes over copy bandwidth. */
static void bench_mlp(struct tb_ctx *c, tecore_devptr_t ws, size_t ws_bytes, tecore_dtype_t it,
                      size_t m, size_t n, size_t k) {
  struct mlp_arg a;
  memset(&a, 0, sizeof a);
  size_t sx[2] = {m, k}, sw[2] = {n, k}, sd[2] = {m, n};
  float one = 1.0f;
  const int f8 = it == TECORE_DTYPE_E4M3;
  tecore_devptr_t x = tb_alloc_random(c, m * k, it);
  tecore_devptr_t w = tb_alloc_random(c, n * k, it);
  tecore_devptr_t pre = tb_alloc_random(c, m * n, TECORE_DTYPE_BF16);
  tecore_devptr_t out = tb_alloc_random(c, m * n, TECORE_DTYPE_BF16);
  tecore_devptr_t bias = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t s1 = 0;
  if (!x || !w || !pre || !out || !bias || tecore_mem_alloc(4, &s1) ||
      tecore_memcpy(s1, (tecore_devptr_t)(uintptr_t)&one, 4)) {
    fprintf(stderr, "te-bench: linear+bias+gelu: set-up failed: %s\n", tecore_last_error());
    c->failed = 1;
    goto out;
  }
  tecore_tensor_init(&a.X, it, 2, sx, x);
  tecore_tensor_init(&a.W, it, 2, sw, w);
  if (f8) {
    a.X.scaling = a.W.scaling = TECORE_SCALING_DELAYED;
    a.X.scale_inv = a.W.scale_inv = s1;
  }
  tecore_tensor_init(&a.pre, TECORE_DTYPE_BF16, 2, sd, pre);
  tecore_tensor_init(&a.out, TECORE_DTYPE_BF16, 2, sd, out);
  tecore_tensor_init(&a.bias, TECORE_DTYPE_BF16, 1, &n, bias);
  a.fused = (struct tecore_gemm_opts){.epilogue = TECORE_GEMM_EPI_BIAS_GELU_AUX, .bias = &a.bias,
                                      .aux = &a.pre, .fast_accum = f8, .workspace = ws,
                                      .workspace_bytes = ws_bytes};
  a.biased = (struct tecore_gemm_opts){.epilogue = TECORE_GEMM_EPI_BIAS, .bias = &a.bias,
                                       .fast_accum = f8, .workspace = ws,
                                       .workspace_bytes = ws_bytes};
  a.daux = a.fused;
  a.daux.epilogue = TECORE_GEMM_EPI_BIAS_GELU_DAUX;
  char shape[48], note[160];
  snprintf(shape, sizeof shape, "%s %zux%zux%zu", tecore_dtype_name(it), m, n, k);
  double flops = 2.0 * m * n * k;
  double tf, tu;
  time_pair(c, mlp_fused, mlp_unfused, &a, &tf, &tu);
  if (m <= 512) {   /* a decode step: both read the weight once */
    double wfloor = (double)n * k * tecore_dtype_size(it) / (c->copy_gbs * 1e9) * 1e3;
    snprintf(note, sizeof note, "floor %.1f us (the %.1f MB weight over copy bandwidth)",
             wfloor * 1e3, (double)n * k * tecore_dtype_size(it) / 1e6);
    report_flops(c, (struct tb_row){.name = "linear+bias+gelu unfused", .shape = shape, .time = tu,
                     .note = note}, flops);
    report_flops(c, (struct tb_row){.name = "linear+bias+gelu fused epilogue", .shape = shape,
                     .time = tf, .peer = "unfused", .peer_time = tu, .note = note}, flops);
    goto out;
  }
  report_flops(c, (struct tb_row){.name = "linear+bias+gelu unfused", .shape = shape, .time = tu,
                   .note = "gemm+bias then tecore_act_fwd gelu: no bias+gelu kernel exists"},
                   flops);
  if (tf > 0 && tu > 0) {
    double saved_bytes = 2.0 * (double)m * n;   /* the GELU kernel's read of pre (bf16) */
    double floor_ms = saved_bytes / (c->copy_gbs * 1e9) * 1e3;
    char target[64];
    snprintf(target, sizeof target, "saves >= %.3f ms", floor_ms);
    snprintf(note, sizeof note, "saves %.3f ms; floor: %.0f MB over copy bandwidth; the "
             "GEMM+bias alone %.3f ms", tu - tf, saved_bytes / 1e6, tb_time(c, mlp_gemm, &a));
    report_flops(c, (struct tb_row){.name = "linear+bias+gelu fused epilogue", .shape = shape,
                     .time = tf, .peer = "unfused", .peer_time = tu, .target = target,
                     .met = tu - tf >= floor_ms, .note = note}, flops);
  }
  /* the derivative-aux forward, where the GEMM library runs it (BF16 on
   * libte's own Hopper GEMM): beside the pre-activation one */
  if (!f8) {
    static const struct variant v = {"linear+bias+gelu fused, gelu' as aux",
                                     "pre-activation as aux",
                                     "BIAS_GELU_DAUX: the backward then multiplies (DAUX_BGRAD)",
                                     "bias_gelu_daux"};
    report_variant(c, &v, mlp_daux, &a, shape, flops, tf);
  }
out:
  tecore_mem_free(x);
  tecore_mem_free(w);
  tecore_mem_free(pre);
  tecore_mem_free(out);
  tecore_mem_free(bias);
  tecore_mem_free(s1);
}

/* The backward of that Linear's GELU at GPT-2's fc2 dgrad: dh = dY W2
 * (W2 [k][n] read as is) times gelu'(pre), with the bias gradient (column
 * sums of dh): the fused dGELU + bias-gradient epilogue against the GEMM
 * then tecore_act_bwd (which leaves the bias gradient out: the fused row
 * does more). */
struct dgelu_arg {
  struct tecore_tensor dY, W, pre, dh, g, dbias;
  struct tecore_gemm_opts fused, plain, daux;
};

/* the product with a saved gelu' (pre holds it), with the bias gradient */
static tecore_result_t dgelu_daux(struct tb_ctx *c, void *arg) {
  struct dgelu_arg *a = arg;
  return tecore_gemm(&a->dY, TECORE_GEMM_N, &a->W, TECORE_GEMM_N, &a->dh, 1, 0, &a->daux, c->s);
}

static tecore_result_t dgelu_fused(struct tb_ctx *c, void *arg) {
  struct dgelu_arg *a = arg;
  return tecore_gemm(&a->dY, TECORE_GEMM_N, &a->W, TECORE_GEMM_N, &a->dh, 1, 0, &a->fused, c->s);
}

static tecore_result_t dgelu_gemm(struct tb_ctx *c, void *arg) {
  struct dgelu_arg *a = arg;
  return tecore_gemm(&a->dY, TECORE_GEMM_N, &a->W, TECORE_GEMM_N, &a->g, 1, 0, &a->plain, c->s);
}

static tecore_result_t dgelu_unfused(struct tb_ctx *c, void *arg) {
  struct dgelu_arg *a = arg;
  TB_CHECK(tecore_gemm(&a->dY, TECORE_GEMM_N, &a->W, TECORE_GEMM_N, &a->g, 1, 0, &a->plain, c->s));
  return tecore_act_bwd(TECORE_ACT_GELU, &a->g, &a->pre, &a->dh, c->s);
}

static void bench_dgelu(struct tb_ctx *c, tecore_devptr_t ws, size_t ws_bytes, size_t m, size_t n,
                        size_t k) {
  struct dgelu_arg a;
  memset(&a, 0, sizeof a);
  const tecore_dtype_t t = TECORE_DTYPE_BF16;
  size_t sy[2] = {m, k}, sw[2] = {k, n}, sd[2] = {m, n};
  tecore_devptr_t dy = tb_alloc_random(c, m * k, t), w = tb_alloc_random(c, k * n, t);
  tecore_devptr_t pre = tb_alloc_random(c, m * n, t), dh = tb_alloc_random(c, m * n, t);
  tecore_devptr_t g = tb_alloc_random(c, m * n, t), db = tb_alloc_random(c, n, t);
  if (!dy || !w || !pre || !dh || !g || !db) {
    fprintf(stderr, "te-bench: linear dgelu: set-up failed: %s\n", tecore_last_error());
    c->failed = 1;
    goto out;
  }
  tecore_tensor_init(&a.dY, t, 2, sy, dy);
  tecore_tensor_init(&a.W, t, 2, sw, w);
  tecore_tensor_init(&a.pre, t, 2, sd, pre);
  tecore_tensor_init(&a.dh, t, 2, sd, dh);
  tecore_tensor_init(&a.g, t, 2, sd, g);
  tecore_tensor_init(&a.dbias, t, 1, &n, db);
  a.fused = (struct tecore_gemm_opts){.epilogue = TECORE_GEMM_EPI_DGELU_BGRAD, .bias = &a.dbias,
                                      .aux = &a.pre, .workspace = ws, .workspace_bytes = ws_bytes};
  a.plain = (struct tecore_gemm_opts){.workspace = ws, .workspace_bytes = ws_bytes};
  a.daux = a.fused;
  a.daux.epilogue = TECORE_GEMM_EPI_DAUX_BGRAD;
  char shape[48], note[160];
  snprintf(shape, sizeof shape, "bf16 %zux%zux%zu", m, n, k);
  double flops = 2.0 * m * n * k;
  double tf, tu;
  time_pair(c, dgelu_fused, dgelu_unfused, &a, &tf, &tu);
  double tg = tb_time(c, dgelu_gemm, &a);
  report_flops(c, (struct tb_row){.name = "linear dgelu unfused", .shape = shape, .time = tu,
                   .note = "gemm then tecore_act_bwd gelu (no bias gradient)"}, flops);
  if (tf > 0 && tu > 0) {
    /* what fusing saves: the GEMM's write of dh and its read back (bf16) */
    double saved_bytes = 4.0 * (double)m * n;
    snprintf(note, sizeof note, "saves %.3f ms and adds the bias gradient; floor: %.0f MB over "
             "copy bandwidth; the GEMM alone %.3f ms", tu - tf, saved_bytes / 1e6, tg);
    report_flops(c, (struct tb_row){.name = "linear dgelu+dbias fused epilogue", .shape = shape,
                     .time = tf, .peer = "unfused", .peer_time = tu, .note = note}, flops);
    static const struct variant v = {
        "linear dgelu+dbias from gelu' as aux", "dgelu from the pre-activation",
        "DAUX_BGRAD: dh = dY W2 times the saved gelu', with the bias gradient", "daux_bgrad"};
    report_variant(c, &v, dgelu_daux, &a, shape, flops, tf);
  }
out:
  tecore_mem_free(dy);
  tecore_mem_free(w);
  tecore_mem_free(pre);
  tecore_mem_free(dh);
  tecore_mem_free(g);
  tecore_mem_free(db);
}
#endif /* TE_HAVE_CUDA */

void tb_gemm(struct tb_ctx *c) {
  c->section = "gemm";
  tb_progress(c, "GEMMs beside cuBLASLt");
  if (c->backend != TECORE_BACKEND_CUDA) {
    tb_info(c, "gemm: the GEMM section needs the cuda backend (backend is %s); skipped",
            tecore_backend_name(c->backend));
    return;
  }
#ifndef TE_HAVE_CUDA
  tb_info(c, "gemm: built without CUDA; skipped");
#else
  struct lt_fns lt;
  memset(&lt, 0, sizeof lt);
  if (lt_open(&lt)) {
    fprintf(stderr, "te-bench: gemm: cuBLASLt cannot be loaded for the direct calls; skipped\n");
    c->failed = 1;
    return;
  }
  size_t v = lt.version();
  tb_info(c, "gemm: cuBLASLt %zu.%zu.%zu (direct calls and libte share descriptors, heuristic "
          "algorithm and a 32 MiB workspace; at a few tokens libte measures its algorithm: "
          "TECORE_GEMM_TUNE_ALGOS)", v / 10000, v / 100 % 100, v % 100);
  const size_t ws_bytes = (size_t)32 << 20;
  tecore_devptr_t ws = 0;
  if (tecore_mem_alloc(ws_bytes, &ws)) {
    fprintf(stderr, "te-bench: gemm workspace: %s\n", tecore_last_error());
    c->failed = 1;
    return;
  }
  /* where every bench_pair runs: the library's functions and workspace */
  const struct gemm_prob at = {.lt = &lt, .ws = ws, .ws_bytes = ws_bytes};
  static const size_t sizes[] = {4096, 8192};
  for (int i = 0; i < 2; i++) {
    size_t z = sizes[i];
    bench_pair(c, &at, TECORE_DTYPE_E4M3, z, z, z, 0);
    bench_pair(c, &at, TECORE_DTYPE_E4M3, z, z, z, 1);
    bench_pair(c, &at, TECORE_DTYPE_BF16, z, z, z, 0);
  }
  /* a few tokens through a tensor-parallel rank's FFN weight (hidden
   * 4096, ffn 16384 over 2 ranks): bound by reading the weight once */
  static const size_t tokens[] = {16, 64, 128};
  for (int i = 0; i < 3; i++) {
    bench_pair(c, &at, TECORE_DTYPE_E4M3, tokens[i], 8192, 4096, 1);
    bench_pair(c, &at, TECORE_DTYPE_BF16, tokens[i], 8192, 4096, 0);
  }
  bench_mlp(c, ws, ws_bytes, TECORE_DTYPE_E4M3, 8192, 16384, 4096);
  /* GPT-2 124M's step without epilogue (batch 32 x 1024 tokens): the
   * attention projection (k 768), fc2 (k 3072), QKV and its dgrad; under
   * TECORE_GEMM_OWN=2 the libte rows are libte's own kernel */
  static const size_t gpt2[][2] = {{768, 768}, {768, 3072}, {2304, 768}, {768, 2304}};
  for (int i = 0; i < 4; i++)
    bench_pair(c, &at, TECORE_DTYPE_BF16, 32768, gpt2[i][0], gpt2[i][1], 0);
  /* GPT-2 124M's fc1 (batch 32 x 1024 tokens): on Hopper libte's own
   * GEMM runs the fused row (TECORE_GEMM_OWN) */
  bench_mlp(c, ws, ws_bytes, TECORE_DTYPE_BF16, 32768, 3072, 768);
  bench_dgelu(c, ws, ws_bytes, 32768, 3072, 768);
  /* a decode step's fc1 on a tensor-parallel rank (hidden 4096, ffn
   * 16384 over 2 ranks) */
  bench_mlp(c, ws, ws_bytes, TECORE_DTYPE_E4M3, 16, 8192, 4096);
  bench_mlp(c, ws, ws_bytes, TECORE_DTYPE_E4M3, 64, 8192, 4096);
  tecore_ctx_synchronize();
  tecore_mem_free(ws);
  lt.destroy(lt.handle);
#endif
}
