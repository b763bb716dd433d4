/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm.c -- the cuda backend's gemm op (te_cuda_gemm): one
 * cublasLtMatmul on the caller's stream (captured into the graph when the
 * stream captures).
 *
 * Row-major to cuBLASLt's column-major.  D[m][n] row-major is the
 * column-major n x m matrix D' = op(B)^T op(A)^T, so cuBLASLt's "A" is our
 * b operand (op(B)^T, n x k), its "B" is our a operand (op(A)^T, k x m),
 * its m, n are our n, m, and its leading dimensions are our row lengths:
 *   our b stored [n][k] (k-major): cuBLASLt A = col-major k x n, ld k, op T
 *   our b stored [k][n]:           cuBLASLt A = col-major n x k, ld n, op N
 *   our a stored [m][k] (k-major): cuBLASLt B = col-major k x m, ld k, op N
 *   our a stored [k][m]:           cuBLASLt B = col-major m x k, ld m, op T
 *   C, D, aux: col-major n x m, ld n.
 * FP8 operands are always k-major (gemm.c selected the columnwise copy
 * where needed), which is cuBLASLt's "TN", the layout Hopper's FP8 GEMMs
 * take.  In the same swap, cuBLASLt's A scale is our B's scale_inv and
 * its B scale our A's; its bias over "rows of D" is our bias[n] and its
 * BGRADB (bias gradient of its B, over k) is our bias[m] = sum_k op(A).
 *
 * Per call: descriptors are created and destroyed (a few microseconds of
 * host time, overlapped with the GPU's work); the heuristic's algorithm
 * comes from the cache (cuda_gemm_cache.c), keyed by everything the heuristic
 * looks at; the workspace is the caller's or the (context, stream)'s
 * internal buffer. */
#include "cuda/cuda_gemm.h"
#include "cuda/cuda_gemm_algo.h"
#include <te/fp8.h>

#include <pthread.h>
#include <stdio.h>
#include <string.h>

TE_PARAM_INT(gemm_workspace_mb, "TECORE_GEMM_WORKSPACE_MB", 32, 0, 4096,
             "cuBLASLt workspace in MiB that each (context, stream) gets for GEMMs without a "
             "caller workspace (0: none)")

/* ---- internal workspaces, one per (context, stream) ------------------------- */

#define TE_GEMM_MAX_WORKSPACES 64

static pthread_mutex_t ws_lock = PTHREAD_MUTEX_INITIALIZER;
static struct {
  tecore_ctx_t ctx;
  tecore_stream_t stream;
  tecore_devptr_t ptr;
  size_t bytes;
} ws_table[TE_GEMM_MAX_WORKSPACES];
static int ws_count, ws_full_logged;

/* The internal workspace of the current context's stream: allocated on the
 * first GEMM there, kept for the process.  When the table is full the GEMM
 * runs without a workspace (slower, logged once). */
static tecore_result_t internal_workspace(tecore_stream_t stream, tecore_devptr_t *ptr,
                                          size_t *bytes) {
  size_t want = (size_t)tecore_tunable_int(&gemm_workspace_mb) << 20;
  *ptr = 0;
  *bytes = 0;
  if (want == 0) return TECORE_SUCCESS;
  tecore_ctx_t ctx = NULL;
  TE_CHECK(tecore_ctx_get_current(&ctx));
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&ws_lock);
  for (int i = 0; i < ws_count; i++) {
    if (ws_table[i].ctx == ctx && ws_table[i].stream == stream) {
      *ptr = ws_table[i].ptr;
      *bytes = ws_table[i].bytes;
      goto out;
    }
  }
  if (ws_count == TE_GEMM_MAX_WORKSPACES) {
    if (!ws_full_logged) {
      ws_full_logged = 1;
      TE_WARN(TECORE_SUBSYS_KERNEL, "gemm: %d streams have internal GEMM workspaces; GEMMs on "
              "further streams run without one (pass opts->workspace)", ws_count);
    }
    goto out;
  }
  tecore_devptr_t p = 0;
  r = tecore_mem_alloc(want, &p);
  if (r != TECORE_SUCCESS) {
    char prev[384];
    snprintf(prev, sizeof prev, "%s", tecore_last_error());
    r = TE_ERR(r, "tecore_gemm: cannot allocate the stream's %zu MiB GEMM workspace (%s); in "
               "a global-mode stream capture run one GEMM on the stream before capturing, or "
               "pass opts->workspace", want >> 20, prev);
    goto out;
  }
  ws_table[ws_count].ctx = ctx;
  ws_table[ws_count].stream = stream;
  ws_table[ws_count].ptr = p;
  ws_table[ws_count].bytes = want;
  ws_count++;
  *ptr = p;
  *bytes = want;
  TE_INFO(TECORE_SUBSYS_KERNEL, "gemm: %zu MiB workspace for stream %p", want >> 20,
          (void *)stream);
out:
  pthread_mutex_unlock(&ws_lock);
  return r;
}

/* ---- descriptors ------------------------------------------------------- */

static cudaDataType_t lt_type(tecore_dtype_t d) {
  switch (d) {
  case TECORE_DTYPE_F32: return CUDA_R_32F;
  case TECORE_DTYPE_F16: return CUDA_R_16F;
  case TECORE_DTYPE_BF16: return CUDA_R_16BF;
  case TECORE_DTYPE_E4M3: return CUDA_R_8F_E4M3;
  case TECORE_DTYPE_E5M2: return CUDA_R_8F_E5M2;
  default: return CUDA_R_32F;   /* unreachable: gemm.c validated the types */
  }
}

static cublasLtEpilogue_t lt_epilogue(tecore_gemm_epilogue_t e) {
  switch (e) {
  case TECORE_GEMM_EPI_BIAS: return CUBLASLT_EPILOGUE_BIAS;
  case TECORE_GEMM_EPI_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX;
  case TECORE_GEMM_EPI_BIAS_GELU_AUX: return CUBLASLT_EPILOGUE_GELU_AUX_BIAS;
  case TECORE_GEMM_EPI_DGELU: return CUBLASLT_EPILOGUE_DGELU;
  case TECORE_GEMM_EPI_DGELU_BGRAD: return CUBLASLT_EPILOGUE_DGELU_BGRAD;
  case TECORE_GEMM_EPI_BGRAD: return CUBLASLT_EPILOGUE_BGRADB;
  case TECORE_GEMM_EPI_GELU: return CUBLASLT_EPILOGUE_GELU;
  case TECORE_GEMM_EPI_BIAS_GELU: return CUBLASLT_EPILOGUE_GELU_BIAS;
  default: return CUBLASLT_EPILOGUE_DEFAULT;
  }
}

/* cuBLASLt's scale mode for a block-scaled operand (gemm_problem.h). */
static cublasLtMatmulMatrixScale_t lt_scale_mode(enum te_gemm_scale k) {
  return k == TE_GEMM_SCALE_BLK2D ? CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F
                                  : CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
}

/* The largest power of two (<= 256) dividing p: what the heuristic may
 * assume of a pointer.  0 counts as 256 (an unused pointer). */
static uint32_t ptr_align(tecore_devptr_t p) {
  uint32_t a = 256;
  while (a > 1 && p % a) a >>= 1;
  return a;
}

/* Everything one cublasLtMatmul needs, built from a problem. */
struct lt_call {
  cublasLtMatmulDesc_t op;
  cublasLtMatrixLayout_t la, lb, lc, ld;
  cublasLtMatmulPreference_t pref;
  const void *pa, *pb, *pc;   /* cuBLASLt's A, B, C */
  void *pd;
  tecore_devptr_t ws;
  size_t ws_bytes;
  struct te_gemm_key key;
};

static void lt_call_free(struct lt_call *c) {
  if (c->pref) te_lt.p_cublasLtMatmulPreferenceDestroy(c->pref);
  if (c->la) te_lt.p_cublasLtMatrixLayoutDestroy(c->la);
  if (c->lb) te_lt.p_cublasLtMatrixLayoutDestroy(c->lb);
  if (c->lc) te_lt.p_cublasLtMatrixLayoutDestroy(c->lc);
  if (c->ld) te_lt.p_cublasLtMatrixLayoutDestroy(c->ld);
  if (c->op) te_lt.p_cublasLtMatmulDescDestroy(c->op);
}

#define DESC_SET(c, attr, val)                                                          \
  TE_LT(cublasLtMatmulDescSetAttribute, (c)->op, attr, &(val), sizeof(val))

static tecore_result_t lt_call_build(const struct te_gemm_problem *p, int device,
                                     struct lt_call *c) {
  const struct te_gemm_operand *ob = &p->b, *oa = &p->a;
  /* cuBLASLt's A = our b (n x k after op), B = our a (k x m after op) */
  cublasOperation_t ta = ob->kmajor ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t tb = oa->kmajor ? CUBLAS_OP_N : CUBLAS_OP_T;
  uint64_t a_rows = ob->kmajor ? p->k : p->n, a_cols = ob->kmajor ? p->n : p->k;
  uint64_t b_rows = oa->kmajor ? p->k : p->m, b_cols = oa->kmajor ? p->m : p->k;
  int64_t lda = (int64_t)a_rows, ldb = (int64_t)b_rows, ldd = (int64_t)p->n;
  cublasLtEpilogue_t epi = lt_epilogue(p->epilogue);
  int d_fp8 = p->d_dtype == TECORE_DTYPE_E4M3 || p->d_dtype == TECORE_DTYPE_E5M2;

  c->pa = (const void *)(uintptr_t)ob->data;
  c->pb = (const void *)(uintptr_t)oa->data;
  c->pd = (void *)(uintptr_t)p->d;
  /* beta == 0: C is not read; NULL where its type differs from D's (an FP8
   * D), since C == D promises cuBLASLt identical layouts */
  c->pc = p->c ? (const void *)(uintptr_t)p->c
               : (p->c_dtype == p->d_dtype ? (const void *)c->pd : NULL);

  TE_CHECK(TE_LT(cublasLtMatmulDescCreate, &c->op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  int32_t ta32 = (int32_t)ta, tb32 = (int32_t)tb;
  TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_TRANSA, ta32));
  TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_TRANSB, tb32));
  if (p->fp8) {
    int8_t fast = (int8_t)p->fast_accum;
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_FAST_ACCUM, fast));
    const void *sa = (const void *)(uintptr_t)ob->scale_inv;   /* cuBLASLt's A is our B */
    const void *sb = (const void *)(uintptr_t)oa->scale_inv;
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, sa));
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, sb));
    if (ob->scale_kind == TE_GEMM_SCALE_BLK1D || ob->scale_kind == TE_GEMM_SCALE_BLK2D) {
      /* the scales were rearranged into cuBLASLt's layout (block_scales) */
      int32_t ma = (int32_t)lt_scale_mode(ob->scale_kind), mb = (int32_t)lt_scale_mode(oa->scale_kind);
      TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, ma));
      TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, mb));
    }
    if (d_fp8) {
      const void *sd = (const void *)(uintptr_t)p->d_scale;
      TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_D_SCALE_POINTER, sd));
      if (p->d_amax) {
        void *am = (void *)(uintptr_t)p->d_amax;
        TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_AMAX_D_POINTER, am));
      }
    }
  }
  uint32_t epi32 = (uint32_t)epi;
  TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_EPILOGUE, epi32));
  if (p->bias) {
    void *bp = (void *)(uintptr_t)p->bias;
    int32_t bt = (int32_t)lt_type(p->bias_dtype);
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_BIAS_POINTER, bp));
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, bt));
  }
  if (p->aux) {
    void *xp = (void *)(uintptr_t)p->aux;
    int64_t xld = (int64_t)p->n;
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, xp));
    TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, xld));
    if (p->fp8) {
      /* default: D's type, which an FP8 D cannot be for a 16-bit aux */
      int32_t xt = (int32_t)lt_type(p->aux_dtype);
      TE_CHECK(DESC_SET(c, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE, xt));
    }
  }

  TE_CHECK(TE_LT(cublasLtMatrixLayoutCreate, &c->la, lt_type(ob->dtype), a_rows, a_cols, lda));
  TE_CHECK(TE_LT(cublasLtMatrixLayoutCreate, &c->lb, lt_type(oa->dtype), b_rows, b_cols, ldb));
  TE_CHECK(TE_LT(cublasLtMatrixLayoutCreate, &c->lc, lt_type(p->c_dtype), p->n, p->m, ldd));
  TE_CHECK(TE_LT(cublasLtMatrixLayoutCreate, &c->ld, lt_type(p->d_dtype), p->n, p->m, ldd));

  uint32_t al_a = ptr_align(ob->data), al_b = ptr_align(oa->data);
  uint32_t al_c = ptr_align((tecore_devptr_t)(uintptr_t)c->pc), al_d = ptr_align(p->d);
  uint64_t wsb = c->ws_bytes;
  TE_CHECK(TE_LT(cublasLtMatmulPreferenceCreate, &c->pref));
  TE_CHECK(TE_LT(cublasLtMatmulPreferenceSetAttribute, c->pref,
                 CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb));
  TE_CHECK(TE_LT(cublasLtMatmulPreferenceSetAttribute, c->pref,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof al_a));
  TE_CHECK(TE_LT(cublasLtMatmulPreferenceSetAttribute, c->pref,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof al_b));
  TE_CHECK(TE_LT(cublasLtMatmulPreferenceSetAttribute, c->pref,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof al_c));
  TE_CHECK(TE_LT(cublasLtMatmulPreferenceSetAttribute, c->pref,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_d, sizeof al_d));

  /* the cache key: everything the heuristic sees */
  int64_t *w = c->key.w;
  memset(&c->key, 0, sizeof c->key);
  int i = 0;
  w[i++] = (int64_t)p->m;
  w[i++] = (int64_t)p->n;
  w[i++] = (int64_t)p->k;
  w[i++] = ob->dtype;
  w[i++] = oa->dtype;
  w[i++] = p->c_dtype;
  w[i++] = p->d_dtype;
  w[i++] = p->bias ? (int64_t)p->bias_dtype : -1;
  w[i++] = p->aux ? (int64_t)p->aux_dtype : -1;
  w[i++] = ta;
  w[i++] = tb;
  w[i++] = lda;
  w[i++] = ldb;
  w[i++] = ldd;
  w[i++] = epi;
  w[i++] = p->fast_accum;
  w[i++] = al_a;
  w[i++] = al_b;
  w[i++] = al_c;
  w[i++] = al_d;
  w[i++] = p->bias ? ptr_align(p->bias) : 0;
  w[i++] = p->aux ? ptr_align(p->aux) : 0;
  w[i++] = (int64_t)wsb;
  w[i++] = device;
  w[i++] = p->d_amax != 0;
  w[i++] = c->pc == NULL;
  w[i++] = p->fp8;
  w[i++] = ob->scale_kind;
  w[i++] = oa->scale_kind;
  return TECORE_SUCCESS;
}

/* "e4m3 x e4m3 -> bf16, m n k, epilogue": for messages. */
static void describe(const struct te_gemm_problem *p, char *buf, size_t n) {
  snprintf(buf, n, "%s x %s -> %s (C %s, bias/aux %s), m=%zu n=%zu k=%zu, op(A) %s, op(B) %s, "
           "epilogue %s%s", tecore_dtype_name(p->a.dtype), tecore_dtype_name(p->b.dtype),
           tecore_dtype_name(p->d_dtype), tecore_dtype_name(p->c_dtype),
           tecore_dtype_name(p->bias_dtype), p->m, p->n, p->k,
           p->a.kmajor ? "k-major" : "m-major", p->b.kmajor ? "k-major" : "n-major",
           tecore_gemm_epilogue_name(p->epilogue), p->fast_accum ? ", fast accumulation" : "");
}

/* Bytes at the head of the workspace for re-aligned FP8 scalars (keeps
 * the rest 256-byte aligned, as cuBLASLt likes its workspace). */
#define TE_LT_SCALAR_SLOTS 256

/* What the GPU (sm_<cc>) and libte's use of cuBLASLt can run. */
static tecore_result_t check_arch(const struct te_gemm_problem *p, int cc) {
  if (p->fp8 && cc < 89)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: FP8 GEMMs need an sm_89 or newer GPU "
                  "(this one is sm_%d)", cc);
  if (p->a.scale_kind == TE_GEMM_SCALE_MX) {
    if (cc < 100)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: MXFP8 GEMMs need cuBLASLt's "
                    "block-scaled kernels, which run on sm_100 and newer (this GPU is sm_%d); "
                    "use per-tensor scaling here", cc);
    /* cuBLASLt reads VEC32_UE8M0 scales in its tiled (128 x 4) layout, not
     * the compact layout of te/tensor.h; without that conversion the
     * result would be wrong, so refuse rather than guess. */
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: MXFP8 GEMMs on the cuda backend need "
                  "the E8M0 scales rearranged into cuBLASLt's tiled layout, which libte does not "
                  "do yet (sm_%d)", cc);
  }
  if (p->a.scale_kind == TE_GEMM_SCALE_BLK1D || p->a.scale_kind == TE_GEMM_SCALE_BLK2D) {
    /* cuBLASLt's VEC128_32F / BLK128x128_32F kernels: Hopper only (newer
     * GPUs take MXFP8 instead), from cuBLASLt 12.9 */
    if (cc != 90)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: block-scaled (1x128 / 128x128) FP8 "
                    "GEMMs run on cuBLASLt's sm_90 kernels only (this GPU is sm_%d); use "
                    "per-tensor scaling here", cc);
    if (te_lt_version() < 120900)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: block-scaled FP8 GEMMs need "
                    "cuBLASLt 12.9 or newer (loaded: %zu); set TECORE_CUBLASLT_LIB to a newer "
                    "one", te_lt_version());
  }
  return TECORE_SUCCESS;
}

/* Block-scaled operands keep their FP32 scales in te/tensor.h's compact
 * layout; cuBLASLt reads them in its own (gemm_problem.h).  Each
 * operand's scales are copied into that layout at the head of the
 * workspace, 256-byte aligned, in stream order (te_copy2d_u32: a kernel,
 * so a capture records it), and the problem's scale pointers move there
 * (tecore_gemm(3) gives the bytes). */
static tecore_result_t block_scales(const struct te_gemm_problem **pp,
                                    struct te_gemm_problem *moved, struct lt_call *c,
                                    tecore_stream_t stream) {
  const struct te_gemm_problem *p = *pp;
  if (p->a.scale_kind != TE_GEMM_SCALE_BLK1D && p->a.scale_kind != TE_GEMM_SCALE_BLK2D)
    return TECORE_SUCCESS;
  size_t ba = te_gemm_blk_lt_bytes(p->a.scale_kind, p->m, p->k);
  size_t bb = te_gemm_blk_lt_bytes(p->b.scale_kind, p->n, p->k);
  if (c->ws % 256 || c->ws_bytes < ba + bb)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: a block-scaled GEMM (m=%zu n=%zu "
                  "k=%zu) rearranges its scales into the workspace: it needs %zu bytes at a "
                  "256-byte aligned opts->workspace (got %zu at %s alignment)", p->m, p->n,
                  p->k, ba + bb, c->ws_bytes, c->ws % 256 ? "less than 256-byte" : "256-byte");
  *moved = *p;
  struct te_copy2d ca = te_gemm_blk_lt_copy(&p->a, p->m, p->k, c->ws);
  struct te_copy2d cb = te_gemm_blk_lt_copy(&p->b, p->n, p->k, c->ws + ba);
  TE_CHECK(te_copy2d_u32(&ca, stream));
  moved->a.scale_inv = c->ws;
  TE_CHECK(te_copy2d_u32(&cb, stream));
  moved->b.scale_inv = c->ws + ba;
  c->ws += ba + bb;
  c->ws_bytes -= ba + bb;
  *pp = moved;
  return TECORE_SUCCESS;
}

/* cuBLASLt on Hopper refuses FP8 scale and amax pointers that are not
 * 16-byte aligned (CUBLAS_STATUS_NOT_SUPPORTED at cublasLtMatmul, seen
 * with 13.1 on an H100), and packed per-tensor arrays (a delayed-scaling
 * state, the fuser's) have them at 4-byte steps.  Such scalars go through
 * 16-byte slots at the head of the workspace, copied in stream order:
 * *pp becomes aligned (a copy of the problem pointing at the slots), and
 * *amax_back the caller's amax that the slot's value goes back to. */
static tecore_result_t align_scalars(const struct te_gemm_problem **pp,
                                     struct te_gemm_problem *aligned, struct lt_call *c,
                                     tecore_devptr_t *amax_back, tecore_stream_t stream) {
  const struct te_gemm_problem *p = *pp;
  *amax_back = 0;
  if (!p->fp8 || !(p->a.scale_inv % 16 || p->b.scale_inv % 16 || p->d_scale % 16 ||
                   p->d_amax % 16))
    return TECORE_SUCCESS;
  if (c->ws_bytes < 2 * TE_LT_SCALAR_SLOTS)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: FP8 scale or amax pointers that are "
                  "not 16-byte aligned need a workspace of at least %d bytes (got %zu)",
                  2 * TE_LT_SCALAR_SLOTS, c->ws_bytes);
  tecore_devptr_t slot = c->ws;
  c->ws += TE_LT_SCALAR_SLOTS;
  c->ws_bytes -= TE_LT_SCALAR_SLOTS;
  *aligned = *p;
  if (p->a.scale_inv % 16) {
    TE_CHECK(tecore_memcpy_async(slot, p->a.scale_inv, 4, stream));
    aligned->a.scale_inv = slot;
  }
  if (p->b.scale_inv % 16) {
    TE_CHECK(tecore_memcpy_async(slot + 16, p->b.scale_inv, 4, stream));
    aligned->b.scale_inv = slot + 16;
  }
  if (p->d_scale % 16) {
    TE_CHECK(tecore_memcpy_async(slot + 32, p->d_scale, 4, stream));
    aligned->d_scale = slot + 32;
  }
  if (p->d_amax % 16) { /* cuBLASLt sets D's amax: copied back after */
    aligned->d_amax = slot + 48;
    *amax_back = p->d_amax;
  }
  *pp = aligned;
  return TECORE_SUCCESS;
}

/* The scratch layout of a measurement (cuda_gemm_tune.c): D, aux, the
 * bias gradient and amax at 256-byte offsets. */
static size_t round256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The heuristic's candidates a measurement times, and what it found:
 * pick, the index to use (-1 when none ran), and us[i], each one's time. */
struct tune_set {
  const cublasLtMatmulHeuristicResult_t *cand;
  int n;
  int pick;
  float *us;
};

/* The bytes [lo, hi) that operand o of rows x k elements can reach. */
static void operand_extent(const struct te_gemm_operand *o, size_t rows, size_t k,
                           uintptr_t *lo, uintptr_t *hi) {
  size_t last = (rows - 1) * (size_t)(o->si < 0 ? -o->si : o->si) +
                (k - 1) * (size_t)(o->sk < 0 ? -o->sk : o->sk);
  *lo = (uintptr_t)o->data;
  *hi = *lo + (last + 1) * tecore_dtype_size(o->dtype);
}

/* 1 when the timed runs may write the caller's D itself: D is all the
 * call writes (no aux, bias gradient or amax), nothing reads it (beta 0),
 * and it shares no byte with A or B, so the runs before the real call
 * leave nothing the real call does not overwrite.  The large outputs are
 * the common case (a language model's logits, 32768 x 50304 BF16: 3.1 GiB
 * that a scratch copy would add to the process's peak). */
static int time_in_d(const struct te_gemm_problem *p) {
  if (p->beta != 0.0f || p->d_amax || te_gemm_epi_has_aux_out(p->epilogue) ||
      te_gemm_epi_has_bias_out(p->epilogue) || !p->m || !p->n || !p->k)
    return 0;
  uintptr_t d0 = (uintptr_t)p->d, d1 = d0 + p->m * p->n * tecore_dtype_size(p->d_dtype);
  uintptr_t lo, hi;
  operand_extent(&p->a, p->m, p->k, &lo, &hi);
  if (lo < d1 && d0 < hi) return 0;
  operand_extent(&p->b, p->n, p->k, &lo, &hi);
  return !(lo < d1 && d0 < hi);
}

/* Times the candidates of ts on a copy of p whose outputs are scratch, so
 * the caller's D, C, aux, bias gradient and amax are neither read as
 * outputs nor written -- except D where time_in_d allows it; inputs (A,
 * B, a separate C, a dGELU aux, bias, scales) are only read.  ts->pick
 * -1: none ran (the caller then takes the first).  TECORE_ERR_NOT_READY:
 * no measurement now (capture, another thread measuring): take the first,
 * uncached. */
static tecore_result_t measure(cublasLtHandle_t handle, const struct lt_call *c,
                               const struct te_gemm_problem *p, int device,
                               tecore_stream_t stream, struct tune_set *ts) {
  ts->pick = -1;
  if (te_gemm_tune_begin(stream) != TECORE_SUCCESS) return TECORE_ERR_NOT_READY;
  size_t mn = p->m * p->n;
  const int in_d = time_in_d(p);
  size_t d_bytes = in_d ? 0 : round256(mn * tecore_dtype_size(p->d_dtype));
  size_t x_bytes =
      te_gemm_epi_has_aux_out(p->epilogue) ? round256(mn * tecore_dtype_size(p->aux_dtype)) : 0;
  size_t b_bytes = te_gemm_epi_has_bias_out(p->epilogue)
                       ? round256((p->m > p->n ? p->m : p->n) * tecore_dtype_size(p->bias_dtype))
                       : 0;
  tecore_devptr_t s = 0;
  struct lt_call t;
  memset(&t, 0, sizeof t);
  tecore_result_t r = te_gemm_tune_scratch(d_bytes + x_bytes + b_bytes + 256, stream, &s);
  if (r == TECORE_SUCCESS) {
    struct te_gemm_problem tp = *p;
    if (!in_d) tp.d = s;
    if (p->c == p->d && !in_d) tp.c = s;   /* accumulating in place: in the scratch D */
    if (x_bytes) tp.aux = s + d_bytes;
    if (b_bytes) tp.bias = s + d_bytes + x_bytes;
    if (p->d_amax) tp.d_amax = s + d_bytes + x_bytes + b_bytes;
    t.ws = c->ws;   /* the stream's workspace: the real call's, in stream order */
    t.ws_bytes = c->ws_bytes;
    r = lt_call_build(&tp, device, &t);
  }
  if (r == TECORE_SUCCESS) {
    /* the real call's layouts (equal to t's); t's descriptor and pointers */
    struct te_lt_matmul mm = {.handle = handle, .op = t.op, .la = c->la, .lb = c->lb,
                              .lc = c->lc, .ld = c->ld, .pa = t.pa, .pb = t.pb, .pc = t.pc,
                              .pd = t.pd, .alpha = p->alpha, .beta = p->beta,
                              .ws = (void *)(uintptr_t)t.ws, .ws_bytes = t.ws_bytes};
    ts->pick = te_gemm_tune_time(&mm, ts->cand, ts->n, stream, ts->us);
  }
  te_gemm_tune_end();
  lt_call_free(&t);
  return r;
}

/* Split-k variants of the heuristic's first candidates for a problem of
 * few output tiles over a long k (te_gemm_tune_deep): k cut into 2 .. 8
 * parts that run as more CTAs, the parts summed in float in the workspace
 * (CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE).  Each variant cuBLASLt
 * accepts for these descriptors (cublasLtMatmulAlgoCheck) within the
 * call's workspace is appended to res (up to TE_GEMM_TUNE_MAX_ALGOS) for
 * the measurement to time beside the others.  Returns the new count. */
static int add_split_k(cublasLtHandle_t handle, const struct lt_call *c,
                       cublasLtMatmulHeuristicResult_t *res, int n) {
  if (!te_lt.p_cublasLtMatmulAlgoConfigSetAttribute || !te_lt.p_cublasLtMatmulAlgoCheck ||
      !te_lt.p_cublasLtMatmulAlgoConfigGetAttribute)
    return n;
  static const uint32_t splits[] = {2, 3, 4, 6, 8};
  const int base = n < 3 ? n : 3;
  for (int i = 0; i < base; i++) {
    uint32_t have = 1;
    size_t got = 0;
    if (te_lt.p_cublasLtMatmulAlgoConfigGetAttribute(&res[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                     &have, sizeof have, &got) !=
            CUBLAS_STATUS_SUCCESS || have > 1)
      continue;
    for (size_t k = 0; k < sizeof splits / sizeof splits[0] && n < TE_GEMM_TUNE_MAX_ALGOS; k++) {
      cublasLtMatmulHeuristicResult_t v = res[i];
      uint32_t sk = splits[k], red = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
      if (te_lt.p_cublasLtMatmulAlgoConfigSetAttribute(&v.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM,
                                                       &sk, sizeof sk) != CUBLAS_STATUS_SUCCESS ||
          te_lt.p_cublasLtMatmulAlgoConfigSetAttribute(
              &v.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red) !=
              CUBLAS_STATUS_SUCCESS)
        break;
      if (te_lt.p_cublasLtMatmulAlgoCheck(handle, c->op, c->la, c->lb, c->lc, c->ld, &v.algo,
                                          &v) != CUBLAS_STATUS_SUCCESS ||
          v.workspaceSize > c->ws_bytes)
        continue;
      v.state = CUBLAS_STATUS_SUCCESS;
      res[n++] = v;
    }
  }
  return n;
}

/* The algorithm for c: from the cache, else from the heuristic (then
 * cached); for a small problem (te_gemm_tune_count) the fastest of the
 * heuristic's candidates, timed on stream (cuda_gemm_tune.c). */
static tecore_result_t find_algo(cublasLtHandle_t handle, struct lt_call *c,
                                 const struct te_gemm_problem *p, int cc, int device,
                                 tecore_stream_t stream, cublasLtMatmulAlgo_t *algo) {
  _Static_assert(sizeof *algo == TE_GEMM_ALGO_BYTES, "cublasLtMatmulAlgo_t is 64 bytes");
  if (te_gemm_cache_get(&c->key, algo)) return TECORE_SUCCESS;
  cublasLtMatmulHeuristicResult_t res[TE_GEMM_TUNE_MAX_ALGOS];
  int want = te_gemm_tune_count(p), found = 0;
  memset(res, 0, sizeof res);
  cublasStatus_t s = te_lt.p_cublasLtMatmulAlgoGetHeuristic(handle, c->op, c->la, c->lb, c->lc,
                                                            c->ld, c->pref, want, res, &found);
  /* keep the candidates the heuristic says can run, in its order */
  int n = 0;
  for (int i = 0; s == CUBLAS_STATUS_SUCCESS && i < found && i < want; i++)
    if (res[i].state == CUBLAS_STATUS_SUCCESS) res[n++] = res[i];
  if (s != CUBLAS_STATUS_SUCCESS || n == 0) {
    char what[256];
    describe(p, what, sizeof what);
    /* the arguments passed gemm.c's checks: a refusal here (including an
     * INVALID_VALUE for an epilogue this cuBLASLt lacks for the shape) is
     * a combination it does not implement */
    if (s == CUBLAS_STATUS_SUCCESS || s == CUBLAS_STATUS_NOT_SUPPORTED ||
        s == CUBLAS_STATUS_INVALID_VALUE)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: cuBLASLt %zu has no algorithm for "
                    "%s on sm_%d", te_lt_version(), what, cc);
    return te_lt_result(s, "cublasLtMatmulAlgoGetHeuristic", what, __FILE__, __LINE__);
  }
  if (want > 1 && te_gemm_tune_deep(p)) n = add_split_k(handle, c, res, n);
  int pick = 0;
  float us[TE_GEMM_TUNE_MAX_ALGOS];
  if (n > 1) {
    struct tune_set ts = {.cand = res, .n = n, .us = us};
    tecore_result_t r = measure(handle, c, p, device, stream, &ts);
    pick = ts.pick;
    if (r == TECORE_ERR_NOT_READY) {
      /* capturing, or another thread measures: the first, and a later
       * eager call measures */
      TE_TRACE(TECORE_SUBSYS_TUNE, "gemm: m=%zu n=%zu k=%zu not measured now (stream capturing "
               "or another thread measuring): the heuristic's first algorithm, uncached",
               p->m, p->n, p->k);
      *algo = res[0].algo;
      return TECORE_SUCCESS;
    }
    if (r != TECORE_SUCCESS || pick < 0) {
      TE_WARN(TECORE_SUBSYS_TUNE, "gemm: timing %d algorithms for m=%zu n=%zu k=%zu failed "
              "(%s); the heuristic's first is kept", n, p->m, p->n, p->k,
              r != TECORE_SUCCESS ? tecore_last_error() : "every candidate was refused");
      pick = 0;
      n = 1;
    }
  }
  *algo = res[pick].algo;
  te_gemm_cache_put(&c->key, algo);
  /* once per problem (then cached): which kernel runs, so a benchmark
   * record can show that libte and a direct cuBLASLt call with the same
   * descriptors (te-bench --gemm) run the same one, or what measuring won */
  char cfg[160];
  te_lt_algo_describe(te_lt.p_cublasLtMatmulAlgoConfigGetAttribute, algo, cfg, sizeof cfg);
  if (n == 1) {
    TE_INFO(TECORE_SUBSYS_TUNE, "gemm: heuristic for m=%zu n=%zu k=%zu (%s x %s -> %s): %s; "
            "workspace %zu of %zu bytes, waves %.2f", p->m, p->n, p->k,
            tecore_dtype_name(p->a.dtype), tecore_dtype_name(p->b.dtype),
            tecore_dtype_name(p->d_dtype), cfg, res[0].workspaceSize, c->ws_bytes,
            (double)res[0].wavesCount);
    return TECORE_SUCCESS;
  }
  char times[TE_GEMM_TUNE_MAX_ALGOS * 12 + 1];
  size_t at = 0;
  times[0] = 0;
  for (int i = 0; i < n && at < sizeof times; i++)
    at += (size_t)snprintf(times + at, sizeof times - at, us[i] < 0 ? " -" : " %.1f",
                           (double)us[i]);
  TE_INFO(TECORE_SUBSYS_TUNE, "gemm: measured %d algorithms for m=%zu n=%zu k=%zu (%s x %s -> "
          "%s): #%d, %s, %.1f us (heuristic's first %.1f us); workspace %zu of %zu bytes; "
          "times in the heuristic's order (us):%s", n, p->m, p->n, p->k,
          tecore_dtype_name(p->a.dtype), tecore_dtype_name(p->b.dtype),
          tecore_dtype_name(p->d_dtype), pick, cfg, (double)us[pick], (double)us[0],
          res[pick].workspaceSize, c->ws_bytes, times);
  return TECORE_SUCCESS;
}

/* cuBLASLt's amax of an FP8 D with a bias epilogue counts the columns of
 * its last tile past cuBLAS's n (our m): epi(bias_j) of an all-zero
 * product.  Seen with cuBLASLt 13.1 on H200s: m 1, n 16, k 16, BIAS_GELU,
 * E4M3 and E5M2 D: amax 0.831157 = gelu(the largest bias, 0.99072), where
 * max |D| was 0.609 (check_gemm).  Such a GEMM (m not a multiple of 256,
 * the widest tile) runs through D in the bias's type instead: rows in
 * chunks into the workspace, each quantized into D by tecore_quantize with
 * D's scale, the amax zeroed first and max-accumulated over the chunks
 * (set, as te/gemm.h says; the padded columns never reach it).  Needs
 * per-tensor operand scales, beta 0 and a workspace of 2 MiB; else the
 * direct call, as before. */
#define TE_AMAX_PAD_WS (2u << 20)
/* Rows of D a chunk holds: half the workspace, less the quantizer's
 * scale_inv slot (the other half is the chunk's GEMM's own). */
static size_t amax_pad_rows(const struct te_gemm_problem *p, size_t ws_bytes) {
  const size_t half = (ws_bytes / 2) & ~(size_t)255;
  const size_t r = (half - 256) / (p->n * tecore_dtype_size(p->bias_dtype));
  return r < p->m ? r : p->m;
}
static int amax_pad_hazard(const struct te_gemm_problem *p, size_t ws_bytes) {
  if (!(p->fp8 && p->d_amax &&
        (p->d_dtype == TECORE_DTYPE_E4M3 || p->d_dtype == TECORE_DTYPE_E5M2) &&
        te_gemm_epi_has_bias_in(p->epilogue) && p->m % 256 != 0 && p->beta == 0.0f &&
        (p->bias_dtype == TECORE_DTYPE_BF16 || p->bias_dtype == TECORE_DTYPE_F16) &&
        p->a.scale_kind == TE_GEMM_SCALE_TENSOR && p->b.scale_kind == TE_GEMM_SCALE_TENSOR &&
        ws_bytes >= TE_AMAX_PAD_WS))
    return 0;
  /* chunks of rows need A stored [m][k] (its leading dimension is k; an
   * A stored [k][m] has m's, so it runs as one chunk or not at all) */
  const size_t rows = amax_pad_rows(p, ws_bytes);
  return rows >= p->m || (p->a.kmajor && p->a.si > 0 && rows > 0);
}

tecore_result_t te_cuda_gemm(const struct te_gemm_problem *p, tecore_stream_t stream);

static tecore_result_t amax_pad_run(const struct te_gemm_problem *p, tecore_devptr_t ws,
                                    size_t ws_bytes, tecore_stream_t stream) {
  const size_t bsz = tecore_dtype_size(p->bias_dtype), asz = tecore_dtype_size(p->a.dtype);
  const size_t half = (ws_bytes / 2) & ~(size_t)255, rows = amax_pad_rows(p, ws_bytes);
  const tecore_devptr_t chunk = ws, slot = ws + ((rows * p->n * bsz + 255) & ~(size_t)255);
  TE_CHECK(tecore_memset_d32_async(p->d_amax, 0, 1, stream));
  for (size_t r0 = 0; r0 < p->m; r0 += rows) {
    const size_t mr = p->m - r0 < rows ? p->m - r0 : rows;
    struct te_gemm_problem q = *p;
    q.m = mr;
    q.a.data = p->a.data + (tecore_devptr_t)(r0 * (size_t)p->a.si * asz);
    q.d = chunk;
    q.d_dtype = q.c_dtype = p->bias_dtype;
    q.c = 0;
    q.d_scale = q.d_amax = 0;
    if (p->aux) q.aux = p->aux + (tecore_devptr_t)(r0 * p->n * tecore_dtype_size(p->aux_dtype));
    q.workspace = ws + half;
    q.workspace_bytes = ws_bytes - half;
    TE_CHECK(te_cuda_gemm(&q, stream));
    struct tecore_tensor in, out;
    size_t shape[2] = {mr, p->n};
    TE_CHECK(tecore_tensor_init(&in, p->bias_dtype, 2, shape, chunk));
    TE_CHECK(tecore_tensor_init(&out, p->d_dtype, 2, shape, p->d + (tecore_devptr_t)(r0 * p->n)));
    out.scaling = TECORE_SCALING_DELAYED;
    out.scale = p->d_scale;
    out.scale_inv = slot;
    out.amax = p->d_amax;
    TE_CHECK(tecore_quantize(&in, &out, 0, stream));
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_gemm(const struct te_gemm_problem *p, tecore_stream_t stream) {
  cublasLtHandle_t handle;
  TE_CHECK(te_lt_ready(&handle));
  TE_CHECK(te_cuda_need_ctx());
  CUdevice dev;
  int cc = 0;
  TE_CHECK(te_cuda_current_device(&dev));
  TE_CHECK(te_cuda_device_cc(dev, &cc));
  TE_CHECK(check_arch(p, cc));

  /* Hopper FP8 kernels refuse C != D with beta != 0 at cublasLtMatmul
   * (CUBLAS_STATUS_NOT_SUPPORTED, seen with cuBLASLt 13.1 on an H100),
   * though the heuristic offers them: copy C into D in stream order and
   * accumulate in place, which they do support. */
  struct te_gemm_problem inplace;
  if (p->fp8 && p->c && p->c != p->d && p->beta != 0.0f && p->c_dtype == p->d_dtype) {
    TE_CHECK(tecore_memcpy_async(p->d, p->c, p->m * p->n * tecore_dtype_size(p->d_dtype), stream));
    inplace = *p;
    inplace.c = p->d;
    p = &inplace;
  }

  struct lt_call c;
  memset(&c, 0, sizeof c);
  if (p->workspace) {
    c.ws = p->workspace;
    c.ws_bytes = p->workspace_bytes;
  } else {
    TE_CHECK(internal_workspace(stream, &c.ws, &c.ws_bytes));
  }
  if (amax_pad_hazard(p, c.ws_bytes)) return amax_pad_run(p, c.ws, c.ws_bytes, stream);
  /* the GELU epilogues on Hopper: libte's own kernel (cuda_gemm16.c) */
  if (te_gemm16_takes(p, cc, c.ws, c.ws_bytes)) return te_gemm16_run(p, c.ws, c.ws_bytes, stream);
  if (te_gemm_epi_daux(p->epilogue)) {
    char what[256];
    describe(p, what, sizeof what);
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: %s: the derivative-aux epilogues run on "
                  "libte's own GEMM only (compute capability 9.0, a build with sm_90a, "
                  "TECORE_GEMM_OWN >= 1, m %% 128, n %% 256, k %% 64 == 0, beta 0), and cuBLASLt "
                  "has none; this is sm_%d", what, cc);
  }
  struct te_gemm_problem moved, aligned;
  tecore_devptr_t amax_back;
  TE_CHECK(block_scales(&p, &moved, &c, stream));
  TE_CHECK(align_scalars(&p, &aligned, &c, &amax_back, stream));

  tecore_result_t r;
  cublasLtMatmulAlgo_t algo;
  TE_CHECK_GOTO(lt_call_build(p, (int)dev, &c), r, out);
  TE_CHECK_GOTO(find_algo(handle, &c, p, cc, (int)dev, stream, &algo), r, out);

  float alpha = p->alpha, beta = p->beta;
  cublasStatus_t s = te_lt.p_cublasLtMatmul(handle, c.op, &alpha, c.pa, c.la, c.pb, c.lb, &beta,
                                            c.pc, c.lc, c.pd, c.ld, &algo,
                                            (void *)(uintptr_t)c.ws, c.ws_bytes, stream);
  if (s != CUBLAS_STATUS_SUCCESS) {
    char what[256];
    describe(p, what, sizeof what);
    r = te_lt_result(s, "cublasLtMatmul", what, __FILE__, __LINE__);
    /* the arguments passed gemm.c's checks, so an invalid value here is a
     * combination this cuBLASLt does not implement (an FP8 D with a C to
     * accumulate, say): say so as such */
    if (r == TECORE_ERR_INVALID) {
      char prev[512];
      snprintf(prev, sizeof prev, "%s", tecore_last_error());
      r = TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_gemm: cuBLASLt %zu refuses this combination "
                 "on sm_%d: %s", te_lt_version(), cc, prev);
    }
    goto out;
  }
  if (amax_back) TE_CHECK_GOTO(tecore_memcpy_async(amax_back, p->d_amax, 4, stream), r, out);
  r = TECORE_SUCCESS;
out:
  lt_call_free(&c);
  return r;
}
