/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn.c -- the "cudnn" row of the attention backends
 * (attn_backend.h): fused attention through cuDNN 9's backend API, loaded
 * at run time (attn_cudnn_load.c), one graph and plan per shape
 * (attn_cudnn_graph.c, attn_cudnn_plan.c).
 *
 * What it takes: BF16 or F16 Q, K, V and O of one type; fixed sequence
 * lengths (the caller's host lengths: p->fixed_seqlen_q/kv) or variable
 * ones (device cu_seqlens); causal or not, bottom-right aligned, with a
 * query length not above the key length for fixed lengths (so that every
 * row sees a key; with variable lengths the kernel that copies the stats
 * writes O = 0 and lse = -inf for rows that see no key, and the backward
 * reads their stats as 0, so they add nothing); an optional sliding
 * window; grouped-query attention; 16-byte aligned addresses and strides.
 * It refuses, saying why, whatever cuDNN's heuristics refuse; the next
 * row (libte's kernel) then runs.
 *
 * E4M3 forward (fixed lengths, head_dim a multiple of 16, no window, a
 * causal mask only with equal query and key lengths: the FP8 engines of
 * Hopper have no bottom-right diagonal): the graph of the frontend's FP8
 * pattern (attn_cudnn_graph.c), with P rounded to E4M3 at the fixed scale
 * 448 (the API has no scale for P; P <= 1).  A BF16/F16 O is written by
 * the graph where cuDNN takes that (Blackwell); Hopper's FP8 engines write
 * only E4M3 O, so there it is staged: E4M3 at scale 0.5 / v.scale_inv
 * (rounded down to a power of two) in the workspace, widened after
 * (kernels/attn_cudnn.cu), as vdev does.  Every scalar the graph reads
 * (the dequantize factors, the O scale, P's constants) is a 16-byte
 * aligned workspace slot that a kernel fills first.  cuDNN overwrites its
 * amaxes: they land in workspace slots that a kernel max-accumulates into
 * s_amax and o.amax.  The statistics go straight into lse, or (where cuDNN wants
 * the frontend's packed [b][h][s]) into the workspace and then lse.
 * plan_get tries these variants in that order.  No E4M3 backward.
 *
 * Variable lengths.  The graph (attn_cudnn_graph.c) is built for the
 * maximum lengths with ragged Q, K, V, O (dO, dQ, dK, dV) and a padding
 * mask; before each run a kernel (kernels/attn_cudnn.cu) turns cu_seqlens
 * into the per-sequence lengths and the element offsets (cu_seqlens[b]
 * times each tensor's token stride) in the workspace: no host reads, so
 * the calls capture.
 *
 * Softmax statistics.  cuDNN's stats tensor is [b][h][s][1]; with fixed
 * lengths token b*s+i of head h is lse[h][b*s+i], so the stats tensor
 * takes the strides {s, total_q, 1, 1} and cuDNN writes and reads the
 * caller's lse directly: nothing is kept between forward and backward.
 * With variable lengths the stats are padded [b][h][max_q] in the
 * workspace: the forward copies them into lse after cuDNN, the backward
 * from lse before (kernels/attn_cudnn.cu).
 *
 * Workspace, each region at a 256-byte boundary: (backward) rowsum(dO * O)
 * (float [b][h][s]) and a float accumulator of dQ ([b][h][s][d]);
 * (variable lengths) the lengths and offsets, and the padded stats; (E4M3)
 * the scalar slots (constants, the caller's factors, amaxes), and a
 * staged O; then the engine's.  The
 * caller's workspace is used; nothing is allocated per call.
 *
 * Capture.  supports() and workspace() build the plan (with the thread's
 * capture mode relaxed, so that another stream's capture survives cuDNN's
 * allocations); fwd()/bwd() on a capturing stream use a cached plan and
 * refuse (TECORE_ERR_CAPTURE) to build one. */
#include "attn/attn_backend.h"
#include "internal.h"
#include "profile_hook.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#ifdef TE_HAVE_CUDA

#include "attn/attn_cudnn_api.h"
#include "attn/attn_cudnn_kern.h"

#include "cuda/cuda_backend.h"

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static int refuse(char *why, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int refuse(char *why, size_t len, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  if (why && len) vsnprintf(why, len, fmt, ap);
  va_end(ap);
  return 0;
}

/* es: bytes of an element. */
static int aligned(const struct te_attn_view *v, const char *name, size_t es, char *why,
                   size_t len) {
  if (v->ptr % 16 || v->token_stride * es % 16 || v->head_stride * es % 16)
    return refuse(why, len, "%s is not 16-byte aligned (address 0x%llx, strides %zu, %zu "
                  "elements): cuDNN takes 16-byte aligned rows", name,
                  (unsigned long long)v->ptr, v->token_stride, v->head_stride);
  return 1;
}

/* What cuDNN's FP8 forward takes beyond the BF16 graph's rules (the
 * frontend's support surface for Hopper); 0 with the reason. */
static int fp8_ok(const struct te_attn_problem *p, int backward, char *why, size_t len) {
  if (backward)
    return refuse(why, len, "no E4M3 backward: te/attention.h's backward takes BF16/F16 "
                  "tensors (cuDNN's FP8 backward needs FP8 dO and O with their scales)");
  if (p->o_dtype != TECORE_DTYPE_E4M3 && p->o_dtype != TECORE_DTYPE_BF16 &&
      p->o_dtype != TECORE_DTYPE_F16)
    return refuse(why, len, "O's type %s: the E4M3 forward writes E4M3, BF16 or F16",
                  tecore_dtype_name(p->o_dtype));
  if (!p->q_scale_inv || !p->k_scale_inv || !p->v_scale_inv)
    return refuse(why, len, "E4M3 Q, K, V without their scale_inv");
  if (p->o_dtype == TECORE_DTYPE_E4M3 && !p->o_scale)
    return refuse(why, len, "E4M3 O without its scale");
  if (p->head_dim % 16 || p->head_dim > 256)
    return refuse(why, len, "head_dim %d: cuDNN's FP8 attention takes multiples of 16 up to "
                  "256", p->head_dim);
  /* the frontend's FP8 pattern has a causal mask and no window; libte
   * does not hand cuDNN a graph no engine was checked against */
  if (p->window_left >= 0)
    return refuse(why, len, "window_left %ld with E4M3: cuDNN's FP8 forward has no sliding "
                  "window", (long)p->window_left);
  /* bottom-right diagonals are Blackwell-only in the FP8 engines; libte's
   * graph is one for every GPU */
  if (p->causal && p->fixed_seqlen_q != p->fixed_seqlen_kv)
    return refuse(why, len, "causal E4M3 with %zu queries and %zu keys: cuDNN's FP8 forward "
                  "aligns the diagonal bottom-right only on Blackwell; libte asks for equal "
                  "lengths", p->fixed_seqlen_q, p->fixed_seqlen_kv);
  return te_dnn_fp8_causal_fits(p, why, len);
}

/* The problem as the graph's shape; 0 with the reason when the graph
 * cannot express it. */
/* variant (the E4M3 forward's choices, tried in order by plan_get):
 * TE_DNN_V_STAGED: a BF16/F16 O staged through E4M3 (else the graph writes
 * it); TE_DNN_V_PACKED: the statistics packed in the workspace (else
 * strided into lse). */
enum { TE_DNN_V_STAGED = 1, TE_DNN_V_PACKED = 2 };

static int shape_of(const struct te_attn_problem *p, int backward, struct te_dnn_shape *s,
                    char *why, size_t len, int variant) {
  tecore_backend_t be;
  if (tecore_backend(&be) != TECORE_SUCCESS)
    return refuse(why, len, "no device backend: %s", tecore_last_error());
  if (be != TECORE_BACKEND_CUDA) return refuse(why, len, "vdev has no cuDNN");
  int fp8 = p->qkv_dtype == TECORE_DTYPE_E4M3;
  if (fp8 && !fp8_ok(p, backward, why, len)) return 0;
  if (!fp8 && p->qkv_dtype != TECORE_DTYPE_BF16 && p->qkv_dtype != TECORE_DTYPE_F16)
    return refuse(why, len, "cuDNN attention takes BF16 or F16, not %s",
                  tecore_dtype_name(p->qkv_dtype));
  if (!fp8 && p->o_dtype != p->qkv_dtype)
    return refuse(why, len, "O's type %s differs from Q's %s", tecore_dtype_name(p->o_dtype),
                  tecore_dtype_name(p->qkv_dtype));
  int varlen = !p->fixed_seqlen_q || !p->fixed_seqlen_kv;
  if (!varlen &&
      (p->total_q != p->batch * p->fixed_seqlen_q || p->total_kv != p->batch * p->fixed_seqlen_kv))
    return refuse(why, len, "total tokens %zu/%zu are not batch %zu x lengths %zu/%zu",
                  p->total_q, p->total_kv, p->batch, p->fixed_seqlen_q, p->fixed_seqlen_kv);
  if (varlen) {
    if (!p->batch || !p->max_seqlen_q || !p->max_seqlen_kv)
      return refuse(why, len, "variable lengths with batch %zu, maximum lengths %zu/%zu: "
                    "nothing for cuDNN to run", p->batch, p->max_seqlen_q, p->max_seqlen_kv);
    /* element offsets are int32: every token's offset must fit */
    size_t ts = 0;
    const struct te_attn_view *vs[8] = {&p->q, &p->k, &p->v, &p->o,
                                        &p->d_o, &p->dq, &p->dk, &p->dv};
    for (int i = 0; i < (backward ? 8 : 4); i++)
      if (vs[i]->token_stride > ts) ts = vs[i]->token_stride;
    size_t tmax = p->total_q > p->total_kv ? p->total_q : p->total_kv;
    if (tmax && ts > (size_t)INT32_MAX / tmax)
      return refuse(why, len, "variable lengths: %zu tokens of stride %zu exceed cuDNN's int32 "
                    "element offsets", tmax, ts);
    /* On the H100 the variable-length graph was wrong twice: statistics
     * off by 0.4 under a sliding window (call e2), and one dQ element of
     * the GQA causal case off by 27% in one run of two (call e3).  Until
     * it holds, libte's kernels run variable lengths (their results
     * matched float64 in every call). */
    return refuse(why, len, "variable lengths through cuDNN are disabled: its graph gave a "
                  "wrong dQ and wrong statistics on the H100 (bench/2026-11-23.md, session 11)");
  }
  if (!varlen && p->causal && p->fixed_seqlen_q > p->fixed_seqlen_kv)
    return refuse(why, len, "causal with more queries (%zu) than keys (%zu): rows that see no "
                  "key", p->fixed_seqlen_q, p->fixed_seqlen_kv);
  if (p->head_dim % 8 || p->head_dim > 256)
    return refuse(why, len, "head_dim %d: cuDNN takes multiples of 8 up to 256", p->head_dim);
  if (p->lse % 16) return refuse(why, len, "lse is not 16-byte aligned");
  size_t es = fp8 ? 1 : 2, oes = p->o_dtype == TECORE_DTYPE_E4M3 ? 1 : 2;
  if (!aligned(&p->q, "q", es, why, len) || !aligned(&p->k, "k", es, why, len) ||
      !aligned(&p->v, "v", es, why, len) || !aligned(&p->o, "o", oes, why, len))
    return 0;
  if (backward && (!aligned(&p->d_o, "d_o", 2, why, len) || !aligned(&p->dq, "dq", 2, why, len) ||
                   !aligned(&p->dk, "dk", 2, why, len) || !aligned(&p->dv, "dv", 2, why, len)))
    return 0;
  memset(s, 0, sizeof *s); /* the cache compares whole structs */
  s->b = (int64_t)p->batch;
  s->hq = p->heads, s->hk = p->kv_heads, s->d = p->head_dim;
  s->varlen = varlen;
  s->sq = (int64_t)(varlen ? p->max_seqlen_q : p->fixed_seqlen_q);
  s->skv = (int64_t)(varlen ? p->max_seqlen_kv : p->fixed_seqlen_kv);
  s->total_q = varlen ? 0 : (int64_t)p->total_q; /* varlen graphs do not use it */
  s->dtype = fp8 ? TE_DNN_DATA_FP8_E4M3
                : p->qkv_dtype == TECORE_DTYPE_BF16 ? TE_DNN_DATA_BFLOAT16 : TE_DNN_DATA_HALF;
  s->o_staged = fp8 && p->o_dtype != TECORE_DTYPE_E4M3 && (variant & TE_DNN_V_STAGED);
  if (fp8)
    s->o_dt = p->o_dtype == TECORE_DTYPE_E4M3 || s->o_staged ? TE_DNN_DATA_FP8_E4M3
              : p->o_dtype == TECORE_DTYPE_BF16              ? TE_DNN_DATA_BFLOAT16
                                                             : TE_DNN_DATA_HALF;
  s->causal = p->causal != 0;
  s->window_left = p->window_left < 0 ? -1 : p->window_left;
  s->mask = te_dnn_mask_choice();
  /* no lse: the workspace's stats.  E4M3, where cuDNN wants them packed
   * (the frontend's layout): in the workspace, copied into lse after */
  s->stats_direct = !varlen && p->lse != 0 && !(fp8 && (variant & TE_DNN_V_PACKED));
  s->q_ts = (int64_t)p->q.token_stride, s->q_hs = (int64_t)p->q.head_stride;
  s->k_ts = (int64_t)p->k.token_stride, s->k_hs = (int64_t)p->k.head_stride;
  s->v_ts = (int64_t)p->v.token_stride, s->v_hs = (int64_t)p->v.head_stride;
  s->o_ts = (int64_t)p->o.token_stride, s->o_hs = (int64_t)p->o.head_stride;
  if (s->o_staged) /* the graph's E4M3 O, packed in the workspace */
    s->o_ts = s->hq * s->d, s->o_hs = s->d;
  if (backward) {
    s->do_ts = (int64_t)p->d_o.token_stride, s->do_hs = (int64_t)p->d_o.head_stride;
    s->dq_ts = (int64_t)p->dq.token_stride, s->dq_hs = (int64_t)p->dq.head_stride;
    s->dk_ts = (int64_t)p->dk.token_stride, s->dk_hs = (int64_t)p->dk.head_stride;
    s->dv_ts = (int64_t)p->dv.token_stride, s->dv_hs = (int64_t)p->dv.head_stride;
  }
  return 1;
}

/* The plan for p (te_dnn_plan_get: held under the cache lock), or NULL
 * with the reason and its result code.  The E4M3 forward tries its variants, cheapest first: a
 * BF16/F16 O written by the graph (cuDNN 9.19 on Hopper refuses it: its
 * FP8 engines write E4M3 O only), then staged; statistics strided into
 * lse, then packed.  Refusals are cached, so the order costs a build once
 * per shape. */
static struct te_dnn_plan *plan_get(const struct te_attn_problem *p, int backward, int build,
                                    char *why, size_t len, tecore_result_t *code) {
  static const int order[] = {0, TE_DNN_V_PACKED, TE_DNN_V_STAGED,
                              TE_DNN_V_STAGED | TE_DNN_V_PACKED};
  int fp8 = p->qkv_dtype == TECORE_DTYPE_E4M3 && !backward;
  *code = TECORE_ERR_NOT_SUPPORTED;
  for (int k = 0; k < (fp8 ? 4 : 1); k++) {
    int v = order[k];
    if ((v & TE_DNN_V_STAGED) && p->o_dtype == TECORE_DTYPE_E4M3) continue;
    if ((v & TE_DNN_V_PACKED) && !p->lse) continue;
    struct te_dnn_shape s;
    if (!shape_of(p, backward, &s, why, len, v)) return NULL;
    struct te_dnn_plan *plan = te_dnn_plan_get(&s, backward, build, why, len, code);
    if (plan || *code == TECORE_ERR_CAPTURE) return plan;
  }
  return NULL;
}

static int cudnn_supports(const struct te_attn_problem *p, int backward, char *why,
                          size_t why_len) {
  tecore_result_t code;
  char buf[512];
  struct te_dnn_plan *plan = plan_get(p, backward, 1, buf, sizeof buf, &code);
  if (!plan) return refuse(why, why_len, "%s", buf);
  te_dnn_plan_release();
  return 1;
}

static size_t cudnn_workspace(const struct te_attn_problem *p, int backward) {
  tecore_result_t code;
  char buf[512];
  struct te_dnn_plan *plan = plan_get(p, backward, 1, buf, sizeof buf, &code);
  if (!plan) return 0;
  size_t n = plan->ws_bytes;
  te_dnn_plan_release();
  return n;
}

#define TE_DNN_PACK_MAX (TE_DNN_ROLES + TE_DNN_MAX_BYVAL)

/* Runs plan on stream with the role pointers (NULL: role absent). */
static tecore_result_t execute(struct te_dnn_plan *plan, void *const ptrs[TE_DNN_ROLES],
                               void *ws, tecore_stream_t stream, const char *who) {
  const struct te_dnn_graph *g = &plan->graph;
  int64_t uids[TE_DNN_PACK_MAX];
  void *data[TE_DNN_PACK_MAX];
  int n = 0;
  for (int r = 0; r < TE_DNN_ROLES; r++)
    if (g->role_uid[r]) {
      if (!ptrs[r]) return TE_ERR(TECORE_ERR_INTERNAL, "%s: cuDNN tensor role %d unset", who, r);
      uids[n] = g->role_uid[r];
      data[n++] = ptrs[r];
    }
  for (int i = 0; i < g->nbyval; i++) {
    uids[n] = g->byval_uid[i];
    data[n++] = (void *)&g->byval[i];
  }
  char buf[384];
  te_dnn_status_t s = te_dnn.p_cudnnSetStream(plan->handle, stream);
  const char *fn = "cudnnSetStream";
  te_dnn_desc_t pack = NULL;
  if (s == 0) {
    fn = "cudnnBackendCreateDescriptor(variant pack)";
    s = te_dnn.p_cudnnBackendCreateDescriptor(TE_DNN_VARIANT_PACK_DESCRIPTOR, &pack);
  }
  if (s == 0) {
    fn = "variant pack";
    s = te_dnn.p_cudnnBackendSetAttribute(pack, TE_DNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                          TE_DNN_TYPE_INT64, n, uids);
  }
  if (s == 0)
    s = te_dnn.p_cudnnBackendSetAttribute(pack, TE_DNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                          TE_DNN_TYPE_VOID_PTR, n, data);
  if (s == 0)
    s = te_dnn.p_cudnnBackendSetAttribute(pack, TE_DNN_ATTR_VARIANT_PACK_WORKSPACE,
                                          TE_DNN_TYPE_VOID_PTR, 1, &ws);
  if (s == 0) s = te_dnn.p_cudnnBackendFinalize(pack);
  if (s == 0) {
    fn = "cudnnBackendExecute";
    s = te_dnn.p_cudnnBackendExecute(plan->handle, plan->plan, pack);
  }
  if (pack) (void)te_dnn.p_cudnnBackendDestroyDescriptor(pack);
  if (s == 0) return TECORE_SUCCESS;
  te_dnn_describe(s, fn, buf, sizeof buf);
  return TE_ERR(te_dnn_result(s), "%s (cudnn): %s", who, buf);
}

#define DEV(x) ((void *)(uintptr_t)(x))

/* execute, timed by tecore_profile (te/profile.h) as one row per pass and
 * shape: the engine's kernels run inside cuDNN, out of libtecore's launch
 * path, and were missing from te-gpt --profile. */
static tecore_result_t execute_p(struct te_dnn_plan *plan, void *const ptrs[TE_DNN_ROLES],
                                 void *ws, tecore_stream_t stream, const char *who,
                                 const struct te_attn_problem *p, int backward) {
  struct te_prof_mark pm;
  te_prof_begin(&pm, stream);
  tecore_result_t r = execute(plan, ptrs, ws, stream, who);
  const char *name = backward ? "cudnn_sdpa_bwd" : "cudnn_sdpa_fwd";
  if (pm.on) {
    char label[64];
    snprintf(label, sizeof label, "%s b%zu h%d/%d s%zu d%d", tecore_dtype_name(p->qkv_dtype),
             p->batch, p->heads, p->kv_heads, p->fixed_seqlen_q, p->head_dim);
    te_prof_end(&pm, name, label, r);
  } else {
    te_prof_end(&pm, name, NULL, r);
  }
  return r;
}

/* The plan for p on stream: built unless the stream captures.  Holds the
 * cache lock on success (te_dnn_plan_release). */
static tecore_result_t plan_for(const struct te_attn_problem *p, int backward,
                                tecore_stream_t stream, const char *who,
                                struct te_dnn_plan **out) {
  char why[512];
  struct te_dnn_shape s; /* what the graph cannot express, before any driver call */
  if (!shape_of(p, backward, &s, why, sizeof why, 0))
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s (cudnn): %s", who, why);
  tecore_capture_status_t st = TECORE_CAPTURE_NONE;
  TE_CHECK(te_cuda_stream_capture_status(stream, &st));
  tecore_result_t code;
  *out = plan_get(p, backward, st == TECORE_CAPTURE_NONE, why, sizeof why, &code);
  if (!*out) return TE_ERR(code, "%s (cudnn): %s", who, why);
  if (p->workspace_bytes < (*out)->ws_bytes || (p->workspace % 256 && (*out)->ws_bytes)) {
    size_t need = (*out)->ws_bytes;
    te_dnn_plan_release();
    return TE_ERR(TECORE_ERR_INVALID, "%s (cudnn): workspace of %zu bytes at 0x%llx; this "
                  "shape needs %zu, 256-byte aligned", who, p->workspace_bytes,
                  (unsigned long long)p->workspace, need);
  }
  return TECORE_SUCCESS;
}

/* Where each workspace region of g starts (attn_cudnn_api.h's order). */
struct ws_at {
  size_t sum, acc, ragged, stats, slots, o8, engine;
};
static struct ws_at ws_layout(const struct te_dnn_graph *g) {
  struct ws_at w;
  w.sum = 0;
  w.acc = w.sum + align256(g->ws_sum_bytes);
  w.ragged = w.acc + align256(g->ws_dqacc_bytes);
  w.stats = w.ragged + align256(g->ws_ragged_bytes);
  w.slots = w.stats + align256(g->ws_stats_bytes);
  w.o8 = w.slots + align256(g->ws_slots_bytes);
  w.engine = w.o8 + align256(g->ws_o8_bytes);
  return w;
}

/* Variable lengths: lengths and offsets into the workspace, and their
 * roles' pointers. */
static tecore_result_t ragged_prep(const struct te_attn_problem *p, int backward,
                                   const struct ws_at *w, void *ptrs[TE_DNN_ROLES],
                                   tecore_stream_t stream) {
  const struct te_attn_view *vs[TE_ACD_ROLES] = {&p->q, &p->k, &p->v, &p->o,
                                                 &p->d_o, &p->dq, &p->dk, &p->dv};
  long long mult[TE_ACD_ROLES] = {0};
  for (int r = 0; r < (backward ? TE_ACD_ROLES : 4); r++) mult[r] = (long long)vs[r]->token_stride;
  tecore_devptr_t at = p->workspace + w->ragged;
  size_t stride = te_acd_ragged_stride(p->batch) * sizeof(int32_t);
  ptrs[TE_DNN_SEQ_Q] = DEV(at), ptrs[TE_DNN_SEQ_KV] = DEV(at + stride);
  for (int r = 0; r < TE_ACD_ROLES; r++)
    ptrs[TE_DNN_OFF_Q + r] = DEV(at + (size_t)(2 + r) * stride);
  ptrs[TE_DNN_STATS] = DEV(p->workspace + w->stats);
  return te_acd_launch_ragged(p, at, mult, stream);
}

/* Stats between the workspace and lse; the forward also writes O = 0 and
 * lse = -inf for rows that see no key. */
static tecore_result_t stats_move(const struct te_attn_problem *p, const struct ws_at *w, int dir,
                                  tecore_stream_t stream) {
  struct te_acd_stats_call c = {
      .cu_q = p->cu_seqlens_q, .cu_kv = p->cu_seqlens_kv, .padded = p->workspace + w->stats,
      .lse = p->lse, .o = dir == TE_ACD_TO_LSE ? p->o.ptr : 0, .o_ts = p->o.token_stride,
      .o_hs = p->o.head_stride, .batch = p->batch, .heads = (size_t)p->heads,
      .max_q = p->max_seqlen_q, .total_q = p->total_q, .d = p->head_dim, .causal = p->causal != 0};
  return te_acd_launch_stats(&c, dir, stream);
}

/* The E4M3 forward: the constants and copies of the caller's scalars into
 * the workspace's slots, the graph, then the amaxes folded into the
 * caller's (cuDNN overwrites its own) and a staged O widened into the
 * caller's BF16/F16 O.  The graph reads only slots: it declares every
 * tensor 16-byte aligned, and te/attention.h asks only 4 of the caller's
 * scale_inv and scale (te-bench passed them at 4 and 8 past 16). */
static tecore_result_t fwd_fp8(const struct te_attn_problem *p, struct te_dnn_plan *plan,
                               void *ptrs[TE_DNN_ROLES], tecore_stream_t stream, const char *who) {
  const struct te_dnn_graph *g = &plan->graph;
  struct ws_at w = ws_layout(g);
  tecore_devptr_t slots = p->workspace + w.slots, o8 = g->ws_o8_bytes ? p->workspace + w.o8 : 0;
#define SLOT(k) DEV(slots + (k) * sizeof(float))
  ptrs[TE_DNN_DESCALE_Q] = SLOT(TE_ACD_SLOT_DESCALE_Q);
  ptrs[TE_DNN_DESCALE_K] = SLOT(TE_ACD_SLOT_DESCALE_K);
  ptrs[TE_DNN_DESCALE_V] = SLOT(TE_ACD_SLOT_DESCALE_V);
  ptrs[TE_DNN_DESCALE_S] = SLOT(TE_ACD_SLOT_DESCALE_S);
  ptrs[TE_DNN_SCALE_S] = SLOT(TE_ACD_SLOT_SCALE_S);
  ptrs[TE_DNN_SCALE_O] = SLOT(TE_ACD_SLOT_SCALE_O);
  ptrs[TE_DNN_AMAX_S] = SLOT(TE_ACD_SLOT_AMAX_S);
  ptrs[TE_DNN_AMAX_O] = SLOT(TE_ACD_SLOT_AMAX_O);
#undef SLOT
  if (o8) ptrs[TE_DNN_O] = DEV(o8);
  struct te_acd_fp8_call c = {
      .slots = slots, .q_si = p->q_scale_inv, .k_si = p->k_scale_inv,
      .v_si = p->v_scale_inv, .o8 = o8, .o = o8 ? p->o.ptr : 0,
      .s_amax = p->s_amax, .o_amax = p->o_amax, .o_scale = o8 ? 0 : p->o_scale,
      .o_scale_inv = o8 ? 0 : p->o_scale_inv, .o_ts = p->o.token_stride,
      .o_hs = p->o.head_stride, .total_q = p->total_q, .heads = (size_t)p->heads,
      .d = p->head_dim, .o_dt = (int)p->o_dtype};
  tecore_result_t r = te_acd_launch_fp8(&c, TE_ACD_FP8_PRE, stream);
  if (r == TECORE_SUCCESS)
    r = execute_p(plan, ptrs, DEV(p->workspace + w.engine), stream, who, p, 0);
  if (r == TECORE_SUCCESS) r = te_acd_launch_fp8(&c, TE_ACD_FP8_POST, stream);
  if (r == TECORE_SUCCESS && p->lse && g->ws_stats_bytes) { /* packed [b][h][s] stats into lse */
    struct te_acd_stats_call sc = {
        .cu_q = p->cu_seqlens_q, .cu_kv = p->cu_seqlens_kv, .padded = p->workspace + w.stats,
        .lse = p->lse, .batch = p->batch, .heads = (size_t)p->heads,
        .max_q = p->fixed_seqlen_q, .total_q = p->total_q, .d = p->head_dim,
        .causal = p->causal != 0};
    r = te_acd_launch_stats(&sc, TE_ACD_TO_LSE, stream);
  }
  return r;
}

static tecore_result_t cudnn_fwd(const struct te_attn_problem *p, tecore_stream_t stream) {
  static const char who[] = "tecore_attention_fwd";
  struct te_dnn_plan *plan;
  TE_CHECK(plan_for(p, 0, stream, who, &plan));
  const struct te_dnn_graph *g = &plan->graph;
  struct ws_at w = ws_layout(g);
  int varlen = g->ws_ragged_bytes != 0;
  float scale = p->scale;
  void *ptrs[TE_DNN_ROLES] = {0};
  ptrs[TE_DNN_Q] = DEV(p->q.ptr), ptrs[TE_DNN_K] = DEV(p->k.ptr);
  ptrs[TE_DNN_V] = DEV(p->v.ptr), ptrs[TE_DNN_O] = DEV(p->o.ptr);
  ptrs[TE_DNN_STATS] = DEV(g->ws_stats_bytes ? p->workspace + w.stats : p->lse);
  ptrs[TE_DNN_SCALE] = &scale;
  tecore_result_t r = TECORE_SUCCESS;
  if (varlen) r = ragged_prep(p, 0, &w, ptrs, stream);
  if (r == TECORE_SUCCESS && g->ws_slots_bytes)
    r = fwd_fp8(p, plan, ptrs, stream, who);
  else if (r == TECORE_SUCCESS)
    r = execute_p(plan, ptrs, DEV(p->workspace + w.engine), stream, who, p, 0);
  te_dnn_plan_release();
  if (r == TECORE_SUCCESS && varlen) r = stats_move(p, &w, TE_ACD_TO_LSE, stream);
  return r;
}

static tecore_result_t cudnn_bwd(const struct te_attn_problem *p, tecore_stream_t stream) {
  static const char who[] = "tecore_attention_bwd";
  struct te_dnn_plan *plan;
  TE_CHECK(plan_for(p, 1, stream, who, &plan));
  const struct te_dnn_graph *g = &plan->graph;
  struct ws_at w = ws_layout(g);
  int varlen = g->ws_ragged_bytes != 0;
  float scale = p->scale;
  void *ptrs[TE_DNN_ROLES] = {0};
  ptrs[TE_DNN_Q] = DEV(p->q.ptr), ptrs[TE_DNN_K] = DEV(p->k.ptr);
  ptrs[TE_DNN_V] = DEV(p->v.ptr), ptrs[TE_DNN_O] = DEV(p->o.ptr);
  ptrs[TE_DNN_STATS] = DEV(p->lse), ptrs[TE_DNN_SCALE] = &scale;
  ptrs[TE_DNN_DO] = DEV(p->d_o.ptr), ptrs[TE_DNN_DQ] = DEV(p->dq.ptr);
  ptrs[TE_DNN_DK] = DEV(p->dk.ptr), ptrs[TE_DNN_DV] = DEV(p->dv.ptr);
  ptrs[TE_DNN_WS_SUM] = DEV(p->workspace + w.sum);
  ptrs[TE_DNN_WS_DQACC] = DEV(p->workspace + w.acc);
  tecore_result_t r = TECORE_SUCCESS;
  if (varlen) {
    r = ragged_prep(p, 1, &w, ptrs, stream);
    if (r == TECORE_SUCCESS) r = stats_move(p, &w, TE_ACD_FROM_LSE, stream);
  }
  /* before cuDNN 9.6 the engines add into the dQ accumulator */
  if (r == TECORE_SUCCESS && te_dnn_version() < 90600)
    r = TE_CU(cuMemsetD32Async, (CUdeviceptr)(p->workspace + w.acc), 0,
              g->ws_dqacc_bytes / sizeof(float), (CUstream)stream);
  if (r == TECORE_SUCCESS)
    r = execute_p(plan, ptrs, DEV(p->workspace + w.engine), stream, who, p, 1);
  te_dnn_plan_release();
  return r;
}

#else /* no CUDA in this build */

static int cudnn_supports(const struct te_attn_problem *p, int backward, char *why,
                          size_t why_len) {
  (void)p, (void)backward;
  if (why && why_len) snprintf(why, why_len, "libte was built without CUDA: no cuDNN");
  return 0;
}
static size_t cudnn_workspace(const struct te_attn_problem *p, int backward) {
  (void)p, (void)backward;
  return 0;
}
static tecore_result_t cudnn_fwd(const struct te_attn_problem *p, tecore_stream_t stream) {
  (void)p, (void)stream;
  return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_attention_fwd (cudnn): built without CUDA");
}
static tecore_result_t cudnn_bwd(const struct te_attn_problem *p, tecore_stream_t stream) {
  (void)p, (void)stream;
  return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "tecore_attention_bwd (cudnn): built without CUDA");
}

#endif

/* With fixed lengths only the E4M3 forward's packed statistics read the
 * prefix sums (te_acd_launch_stats); the ragged graphs are variable lengths'. */
static int cudnn_fixed_seqlens(const struct te_attn_problem *p, int backward) {
  return p->qkv_dtype == TECORE_DTYPE_E4M3 && !backward;
}

const struct te_attn_backend te_attn_backend_cudnn = {
    .name = "cudnn",
    .supports = cudnn_supports,
    .workspace = cudnn_workspace,
    .fwd = cudnn_fwd,
    .bwd = cudnn_bwd,
    .fixed_seqlens = cudnn_fixed_seqlens,
};
