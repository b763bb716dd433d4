/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_graph.c -- the operation graphs of fused attention in cuDNN's
 * backend API: matmul, pointwise, reduction and reshape operations that
 * cuDNN's fused flash-attention engines recognize as one kernel.  The
 * unified SDPA operations (CUDNN_BACKEND_OPERATION_SDPA_FWD/BWD, cuDNN 9.13
 * and 9.17) take neither a causal mask nor a sliding window before cuDNN
 * 9.21's score-modifier subgraphs, so libte states attention as this graph,
 * which every cuDNN 9 takes.
 *
 * Tensors are [b][h][s][d] in cuDNN's dims; libte's packed-token layout
 * ("THD" with fixed lengths) becomes strides: token t = b * s + i of a
 * view with token stride ts and head stride hs is element
 *   b * (s * ts) + h * hs + i * ts + d.
 * K enters the first matmul as K^T (dims [b][h][d][s], the last two
 * strides swapped); the backward also takes V^T.
 *
 * Forward:  S = Q K^T * scale; masks (causal: row + skv - sq >= col;
 *           window: col + window + 1 - (skv - sq) > row) select -inf;
 *           M = rowmax S; E = exp(S - M); Z = rowsum E;
 *           stats = M + log Z;  O = (E / Z) V.
 * Backward: sum = rowsum(dO * O) (workspace); S as above; E = exp(S - stats);
 *           dV = E^T dO; dS = E * (dO V^T - sum) * scale; dK = dS^T Q;
 *           dQ = dS K, accumulated in float in the workspace, then cast.
 * E4M3 forward: build_fwd_fp8 below.
 * Grouped-query attention: K and V carry hk heads, the matmuls broadcast
 * them; dK and dV are computed per query head and summed over each group.
 *
 * Variable lengths (shape varlen): s is the maximum length; every view of
 * Q, K, V, O (dO, dQ, dK, dV) is ragged -- an int32 [b + 1] tensor of
 * element offsets says where batch b starts -- and int32 [b] tensors of
 * lengths mask the padding (row >= lq or col >= lk select the lowest
 * float, the pattern cuDNN's engines take as the padding mask, which also
 * bounds their reads and writes of ragged rows); every matmul takes the
 * lengths as its per-batch M/N/K overrides; the causal diagonal and the
 * window use each sequence's lk - lq.  Those tensors and the padded
 * stats [b][h][s] live in the workspace (kernels/attn_cudnn.cu fills them;
 * the stats stay padded, which every cuDNN 9 takes, rather than ragged,
 * which only newer ones do, and lse's [h][total] layout is not cuDNN's). */
#include "attn/attn_cudnn_api.h"
#include "attn/attn_cudnn_kern.h"

#include <float.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* ---- descriptors -------------------------------------------------------- */

static void fail(struct te_dnn_graph *g, te_dnn_status_t s, const char *what) {
  if (g->status) return;
  g->status = s;
  te_dnn_describe(s, what, g->failed, sizeof g->failed);
}

static te_dnn_desc_t make(struct te_dnn_graph *g, int type) {
  if (g->status) return NULL;
  if (g->ndescs == TE_DNN_MAX_DESCS) {
    g->status = 4000;
    snprintf(g->failed, sizeof g->failed, "attention graph: more than %d descriptors",
             TE_DNN_MAX_DESCS);
    return NULL;
  }
  te_dnn_desc_t d = NULL;
  te_dnn_status_t s = te_dnn.p_cudnnBackendCreateDescriptor(type, &d);
  if (s != TE_DNN_SUCCESS) {
    fail(g, s, "cudnnBackendCreateDescriptor");
    return NULL;
  }
  g->descs[g->ndescs++] = d;
  return d;
}

static void set_(struct te_dnn_graph *g, te_dnn_desc_t d, int name, int type, int64_t n,
                 const void *v, const char *what) {
  if (g->status) return;
  te_dnn_status_t s = te_dnn.p_cudnnBackendSetAttribute(d, name, type, n, v);
  if (s != TE_DNN_SUCCESS) fail(g, s, what);
}
#define SET(g, d, name, type, n, v) set_((g), (d), TE_DNN_ATTR_##name, (type), (n), (v), \
                                         "cudnnBackendSetAttribute(" #name ")")

static void finalize_(struct te_dnn_graph *g, te_dnn_desc_t d, const char *what) {
  if (g->status) return;
  te_dnn_status_t s = te_dnn.p_cudnnBackendFinalize(d);
  if (s != TE_DNN_SUCCESS) fail(g, s, what);
}

/* ---- tensors ------------------------------------------------------------ */

struct tn {
  te_dnn_desc_t d;
  int64_t uid;
  int64_t dim[4], str[4];
  int dtype;
};

/* rag: the ragged-offset tensor whose entry b is the element offset of
 * batch b (NULL: batch b starts at b * str[0]). */
static struct tn tensor_r(struct te_dnn_graph *g, int dtype, const int64_t dim[4],
                          const int64_t str[4], int virt, int byval, te_dnn_desc_t rag) {
  struct tn t = {.dtype = dtype, .uid = ++g->next_uid};
  memcpy(t.dim, dim, sizeof t.dim);
  memcpy(t.str, str, sizeof t.str);
  int64_t align = 16;
  bool v = virt != 0, bv = byval != 0;
  t.d = make(g, TE_DNN_TENSOR_DESCRIPTOR);
  SET(g, t.d, TENSOR_DATA_TYPE, TE_DNN_TYPE_DATA_TYPE, 1, &dtype);
  SET(g, t.d, TENSOR_DIMENSIONS, TE_DNN_TYPE_INT64, 4, t.dim);
  SET(g, t.d, TENSOR_STRIDES, TE_DNN_TYPE_INT64, 4, t.str);
  SET(g, t.d, TENSOR_UNIQUE_ID, TE_DNN_TYPE_INT64, 1, &t.uid);
  SET(g, t.d, TENSOR_BYTE_ALIGNMENT, TE_DNN_TYPE_INT64, 1, &align);
  SET(g, t.d, TENSOR_IS_VIRTUAL, TE_DNN_TYPE_BOOLEAN, 1, &v);
  if (bv) SET(g, t.d, TENSOR_IS_BY_VALUE, TE_DNN_TYPE_BOOLEAN, 1, &bv);
  if (rag) SET(g, t.d, TENSOR_RAGGED_OFFSET_DESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &rag);
  finalize_(g, t.d, "cudnnBackendFinalize(tensor)");
  return t;
}

static struct tn tensor(struct te_dnn_graph *g, int dtype, const int64_t dim[4],
                        const int64_t str[4], int virt, int byval) {
  return tensor_r(g, dtype, dim, str, virt, byval, NULL);
}

/* A virtual tensor shaped like `like`, of type dtype. */
static struct tn virt_like(struct te_dnn_graph *g, const struct tn *like, int dtype) {
  return tensor(g, dtype, like->dim, like->str, 1, 0);
}

static struct tn virt4(struct te_dnn_graph *g, int dtype, int64_t a, int64_t b, int64_t c,
                       int64_t d) {
  int64_t dim[4] = {a, b, c, d}, str[4] = {b * c * d, c * d, d, 1};
  return tensor(g, dtype, dim, str, 1, 0);
}

static const int64_t one4[4] = {1, 1, 1, 1};

/* A host scalar passed by value; its value travels in every variant pack. */
static struct tn scalar(struct te_dnn_graph *g, int dtype, float f, int32_t i) {
  struct tn t = tensor(g, dtype, one4, one4, 0, 1);
  if (g->status) return t;
  if (g->nbyval == TE_DNN_MAX_BYVAL) {
    g->status = 4000;
    snprintf(g->failed, sizeof g->failed, "attention graph: more than %d constants",
             TE_DNN_MAX_BYVAL);
    return t;
  }
  g->byval_uid[g->nbyval] = t.uid;
  if (dtype == TE_DNN_DATA_FLOAT)
    g->byval[g->nbyval].f = f;
  else
    g->byval[g->nbyval].i = i;
  g->nbyval++;
  return t;
}

/* An int32 [n][1][1][1] tensor of the workspace (lengths, offsets) for
 * role r. */
static struct tn ints(struct te_dnn_graph *g, int64_t n, int role) {
  int64_t dim[4] = {n, 1, 1, 1};
  struct tn t = tensor(g, TE_DNN_DATA_INT32, dim, one4, 0, 0);
  g->role_uid[role] = t.uid;
  return t;
}

/* One attention tensor as a graph sees it: its heads and length, its
 * token and head strides, whether it enters transposed, and the role
 * that holds its ragged offsets (variable lengths). */
struct tview {
  int64_t h, s, ts, hs;
  int transposed, off_role;
};

/* A [b][h][s][d] view of an attention tensor of type dt;
 * transposed: [b][h][d][s].
 * Variable lengths: ragged, batch b at the offset role off_role holds. */
static struct tn view_dt(struct te_dnn_graph *g, const struct te_dnn_shape *sh,
                         const struct tview *v, int dt) {
  int64_t h = v->h, s = v->s, ts = v->ts, hs = v->hs;
  int64_t b = sh->b, d = sh->d;
  int64_t dim[4] = {b, h, s, d}, str[4] = {s * ts, hs, ts, 1};
  if (v->transposed) {
    dim[2] = d, dim[3] = s;
    str[2] = 1, str[3] = ts;
  }
  te_dnn_desc_t rag = NULL;
  if (sh->varlen) rag = ints(g, b + 1, v->off_role).d;
  return tensor_r(g, dt, dim, str, 0, 0, rag);
}

static struct tn view(struct te_dnn_graph *g, const struct te_dnn_shape *sh,
                      const struct tview *v) {
  return view_dt(g, sh, v, sh->dtype);
}

/* ---- operations --------------------------------------------------------- */

/* name: what the operation is (the plan's log lists them in order). */
static void add_op_(struct te_dnn_graph *g, te_dnn_desc_t op, const char *what, const char *name) {
  char at[96]; /* which operation of the graph failed, for the message */
  snprintf(at, sizeof at, "%s, operation %d (%s)", what, g->nops, name);
  finalize_(g, op, at);
  if (g->status) return;
  if (g->nops == TE_DNN_MAX_OPS) {
    g->status = 4000;
    snprintf(g->failed, sizeof g->failed, "attention graph: more than %d operations",
             TE_DNN_MAX_OPS);
    return;
  }
  snprintf(g->opnames[g->nops], sizeof g->opnames[0], "%s", name);
  g->ops[g->nops++] = op;
}
#define add_op(g, op, what) add_op_((g), (op), (what), op_name_)

/* y = mode(x[, b[, t]]) computed in prec; axis >= 0 for GEN_INDEX. */
static const char *pw_name(int mode) {
  switch (mode) {
  case TE_DNN_PW_ADD: return "add";
  case TE_DNN_PW_MUL: return "mul";
  case TE_DNN_PW_DIV: return "div";
  case TE_DNN_PW_SUB: return "sub";
  case TE_DNN_PW_EXP: return "exp";
  case TE_DNN_PW_LOG: return "log";
  case TE_DNN_PW_IDENTITY: return "identity";
  case TE_DNN_PW_GEN_INDEX: return "index";
  case TE_DNN_PW_BINARY_SELECT: return "select";
  case TE_DNN_PW_LOGICAL_AND: return "and";
  default: return "compare";
  }
}

static void pw(struct te_dnn_graph *g, int mode, int prec, const struct tn *x, const struct tn *b,
               const struct tn *t, const struct tn *y, int64_t axis) {
  const char *op_name_ = pw_name(mode);
  te_dnn_desc_t p = make(g, TE_DNN_POINTWISE_DESCRIPTOR);
  SET(g, p, POINTWISE_MODE, TE_DNN_TYPE_POINTWISE_MODE, 1, &mode);
  SET(g, p, POINTWISE_MATH_PREC, TE_DNN_TYPE_DATA_TYPE, 1, &prec);
  if (axis >= 0) SET(g, p, POINTWISE_AXIS, TE_DNN_TYPE_INT64, 1, &axis);
  finalize_(g, p, "cudnnBackendFinalize(pointwise)");
  te_dnn_desc_t op = make(g, TE_DNN_OPERATION_POINTWISE_DESCRIPTOR);
  SET(g, op, OPERATION_POINTWISE_PW_DESCRIPTOR, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &p);
  SET(g, op, OPERATION_POINTWISE_XDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d);
  if (b) SET(g, op, OPERATION_POINTWISE_BDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d);
  if (t) SET(g, op, OPERATION_POINTWISE_TDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &t->d);
  SET(g, op, OPERATION_POINTWISE_YDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d);
  add_op(g, op, "cudnnBackendFinalize(pointwise operation)");
}

/* A virtual y shaped like x (type dtype) = mode(x, b) in prec. */
static struct tn pw2(struct te_dnn_graph *g, int mode, int prec, int dtype, const struct tn *x,
                     const struct tn *b) {
  struct tn y = virt_like(g, x, dtype);
  pw(g, mode, prec, x, b, NULL, &y, -1);
  return y;
}

/* c = a b; m, n, k (NULL: none): per-batch [b][1][1][1] lengths that
 * override the rows, columns and contraction of each batch's product
 * (variable lengths). */
static void matmul_ov(struct te_dnn_graph *g, const struct tn *a, const struct tn *b,
                      const struct tn *c, const struct tn *m, const struct tn *n,
                      const struct tn *k) {
  const char *op_name_ = "matmul";
  int comp = TE_DNN_DATA_FLOAT;
  te_dnn_desc_t md = make(g, TE_DNN_MATMUL_DESCRIPTOR);
  SET(g, md, MATMUL_COMP_TYPE, TE_DNN_TYPE_DATA_TYPE, 1, &comp);
  finalize_(g, md, "cudnnBackendFinalize(matmul)");
  te_dnn_desc_t op = make(g, TE_DNN_OPERATION_MATMUL_DESCRIPTOR);
  SET(g, op, OPERATION_MATMUL_ADESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &a->d);
  SET(g, op, OPERATION_MATMUL_BDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &b->d);
  SET(g, op, OPERATION_MATMUL_CDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &c->d);
  SET(g, op, OPERATION_MATMUL_DESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &md);
  if (m) SET(g, op, OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &m->d);
  if (n) SET(g, op, OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &n->d);
  if (k) SET(g, op, OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &k->d);
  add_op(g, op, "cudnnBackendFinalize(matmul operation)");
}

static void reduce(struct te_dnn_graph *g, int mode, const struct tn *x, const struct tn *y) {
  const char *op_name_ = mode == TE_DNN_REDUCE_ADD ? "rowsum" : mode == TE_DNN_REDUCE_MAX ? "rowmax"
                                                                                    : "amax";
  int comp = TE_DNN_DATA_FLOAT;
  te_dnn_desc_t r = make(g, TE_DNN_REDUCTION_DESCRIPTOR);
  SET(g, r, REDUCTION_OPERATOR, TE_DNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
  SET(g, r, REDUCTION_COMP_TYPE, TE_DNN_TYPE_DATA_TYPE, 1, &comp);
  finalize_(g, r, "cudnnBackendFinalize(reduction)");
  te_dnn_desc_t op = make(g, TE_DNN_OPERATION_REDUCTION_DESCRIPTOR);
  SET(g, op, OPERATION_REDUCTION_XDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d);
  SET(g, op, OPERATION_REDUCTION_YDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d);
  SET(g, op, OPERATION_REDUCTION_DESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &r);
  add_op(g, op, "cudnnBackendFinalize(reduction operation)");
}

static void reshape(struct te_dnn_graph *g, const struct tn *x, const struct tn *y) {
  const char *op_name_ = "reshape";
  te_dnn_desc_t op = make(g, TE_DNN_OPERATION_RESHAPE_DESCRIPTOR);
  SET(g, op, OPERATION_RESHAPE_XDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &x->d);
  SET(g, op, OPERATION_RESHAPE_YDESC, TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &y->d);
  add_op(g, op, "cudnnBackendFinalize(reshape operation)");
}

/* ---- masks -------------------------------------------------------------- */

/* The score of a masked position (TECORE_CUDNN_MASK_VALUE, in the shape
 * so that a plan keeps its value): by default -inf, but cuDNN before 9.10
 * wants the lowest finite float. */
static float neg_inf(const struct te_dnn_shape *s) {
  int lowest = s->mask == TE_DNN_MASK_LOWEST ||
               (s->mask == TE_DNN_MASK_AUTO && te_dnn_version() < 91000);
  return lowest ? -FLT_MAX : -INFINITY;
}

/* y = x where vis, else the constant c. */
static struct tn select_(struct te_dnn_graph *g, const struct tn *x, const struct tn *vis, float c) {
  struct tn k = scalar(g, TE_DNN_DATA_FLOAT, c, 0);
  struct tn y = virt_like(g, x, TE_DNN_DATA_FLOAT);
  pw(g, TE_DNN_PW_BINARY_SELECT, TE_DNN_DATA_FLOAT, x, &k, vis, &y, -1);
  return y;
}

/* The row (axis 2) or column (axis 3) index of each score, int32. */
static struct tn index_(struct te_dnn_graph *g, const struct tn *x, int64_t axis) {
  struct tn i = virt_like(g, x, TE_DNN_DATA_INT32);
  pw(g, TE_DNN_PW_GEN_INDEX, TE_DNN_DATA_FLOAT, x, NULL, NULL, &i, axis);
  return i;
}

static struct tn iop(struct te_dnn_graph *g, int mode, const struct tn *a, const struct tn *b) {
  return pw2(g, mode, TE_DNN_DATA_INT32, TE_DNN_DATA_INT32, a, b);
}

/* Variable lengths (lens: the [b][1][1][1] lengths of Q and KV): rows and
 * columns past the sequence's lengths are padding (the lowest float, so
 * that a padding row stays finite); the causal diagonal and the window
 * follow each sequence's lq and lk. */
static struct tn masks_varlen(struct te_dnn_graph *g, const struct te_dnn_shape *s, struct tn x,
                              const struct tn lens[2]) {
  const int B = TE_DNN_DATA_BOOLEAN;
  struct tn row = index_(g, &x, 2), col = index_(g, &x, 3);
  struct tn rin = pw2(g, TE_DNN_PW_CMP_LT, B, B, &row, &lens[0]);
  struct tn cin = pw2(g, TE_DNN_PW_CMP_LT, B, B, &col, &lens[1]);
  struct tn in = pw2(g, TE_DNN_PW_LOGICAL_AND, B, B, &rin, &cin);
  x = select_(g, &x, &in, -FLT_MAX);
  if (s->causal) {
    /* visible: row + lk - lq >= col */
    struct tn r = index_(g, &x, 2), c = index_(g, &x, 3);
    r = iop(g, TE_DNN_PW_ADD, &r, &lens[1]);
    r = iop(g, TE_DNN_PW_SUB, &r, &lens[0]);
    struct tn vis = pw2(g, TE_DNN_PW_CMP_GE, B, B, &r, &c);
    x = select_(g, &x, &vis, neg_inf(s));
  }
  if (s->window_left >= 0) {
    /* visible: col + window + 1 + lq - lk > row */
    struct tn r = index_(g, &x, 2), c = index_(g, &x, 3);
    c = iop(g, TE_DNN_PW_ADD, &c, &lens[0]);
    c = iop(g, TE_DNN_PW_SUB, &c, &lens[1]);
    struct tn w = scalar(g, TE_DNN_DATA_INT32, 0, (int32_t)(s->window_left + 1));
    c = iop(g, TE_DNN_PW_ADD, &c, &w);
    struct tn vis = pw2(g, TE_DNN_PW_CMP_GT, B, B, &c, &r);
    x = select_(g, &x, &vis, neg_inf(s));
  }
  return x;
}

/* Scores that a query may not see become -inf: causal (bottom-right
 * aligned), then the sliding window. */
static struct tn masks(struct te_dnn_graph *g, const struct te_dnn_shape *s, struct tn x,
                       const struct tn *lens) {
  if (lens) return masks_varlen(g, s, x, lens);
  if (s->causal) {
    struct tn row = virt_like(g, &x, TE_DNN_DATA_INT32);
    pw(g, TE_DNN_PW_GEN_INDEX, TE_DNN_DATA_FLOAT, &x, NULL, NULL, &row, 2);
    struct tn col = virt_like(g, &x, TE_DNN_DATA_INT32);
    pw(g, TE_DNN_PW_GEN_INDEX, TE_DNN_DATA_FLOAT, &x, NULL, NULL, &col, 3);
    if (s->sq != s->skv) {
      struct tn skv = scalar(g, TE_DNN_DATA_INT32, 0, (int32_t)s->skv);
      row = pw2(g, TE_DNN_PW_ADD, TE_DNN_DATA_INT32, TE_DNN_DATA_INT32, &row, &skv);
      struct tn sq = scalar(g, TE_DNN_DATA_INT32, 0, (int32_t)s->sq);
      row = pw2(g, TE_DNN_PW_SUB, TE_DNN_DATA_INT32, TE_DNN_DATA_INT32, &row, &sq);
    }
    struct tn vis = pw2(g, TE_DNN_PW_CMP_GE, TE_DNN_DATA_BOOLEAN, TE_DNN_DATA_BOOLEAN, &row, &col);
    struct tn ninf = scalar(g, TE_DNN_DATA_FLOAT, neg_inf(s), 0);
    struct tn y = virt_like(g, &x, TE_DNN_DATA_FLOAT);
    pw(g, TE_DNN_PW_BINARY_SELECT, TE_DNN_DATA_FLOAT, &x, &ninf, &vis, &y, -1);
    x = y;
  }
  if (s->window_left >= 0) {
    struct tn row = virt_like(g, &x, TE_DNN_DATA_INT32);
    pw(g, TE_DNN_PW_GEN_INDEX, TE_DNN_DATA_FLOAT, &x, NULL, NULL, &row, 2);
    struct tn col = virt_like(g, &x, TE_DNN_DATA_INT32);
    pw(g, TE_DNN_PW_GEN_INDEX, TE_DNN_DATA_FLOAT, &x, NULL, NULL, &col, 3);
    /* visible: col + window + 1 - (skv - sq) > row */
    struct tn lb = scalar(g, TE_DNN_DATA_FLOAT, (float)(s->window_left + 1 - (s->skv - s->sq)), 0);
    col = pw2(g, TE_DNN_PW_ADD, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &col, &lb);
    struct tn vis = pw2(g, TE_DNN_PW_CMP_GT, TE_DNN_DATA_BOOLEAN, TE_DNN_DATA_BOOLEAN, &col, &row);
    struct tn ninf = scalar(g, TE_DNN_DATA_FLOAT, neg_inf(s), 0);
    struct tn y = virt_like(g, &x, TE_DNN_DATA_FLOAT);
    pw(g, TE_DNN_PW_BINARY_SELECT, TE_DNN_DATA_FLOAT, &x, &ninf, &vis, &y, -1);
    x = y;
  }
  return x;
}

/* Stats [b][h][sq][1]: straight into lse float [h][total_q] (token b*sq+i),
 * or cuDNN's packed layout in the workspace. */
static struct tn stats_tensor(struct te_dnn_graph *g, const struct te_dnn_shape *s) {
  int64_t dim[4] = {s->b, s->hq, s->sq, 1};
  int64_t direct[4] = {s->sq, s->total_q, 1, 1}, packed[4] = {s->hq * s->sq, s->sq, 1, 1};
  struct tn t = tensor(g, TE_DNN_DATA_FLOAT, dim, s->stats_direct ? direct : packed, 0, 0);
  g->role_uid[TE_DNN_STATS] = t.uid;
  /* fixed lengths without the caller's lse (a forward for inference):
   * the engines still write stats, into the workspace */
  if (!s->varlen && !s->stats_direct)
    g->ws_stats_bytes = (size_t)(s->b * s->hq * s->sq) * sizeof(float);
  return t;
}

/* The per-batch lengths of Q and KV (variable lengths), or NULL. */
#define LQ(lens) ((lens) ? &(lens)[0] : NULL)
#define LK(lens) ((lens) ? &(lens)[1] : NULL)

/* S = Q K^T * scale (the caller applies the masks); *scale: the by-value
 * scale tensor, which the backward uses again for dS. */
static struct tn scores(struct te_dnn_graph *g, const struct te_dnn_shape *s, const struct tn *q,
                        const struct tn *kt, struct tn *scale, const struct tn *lens) {
  struct tn sc = virt4(g, TE_DNN_DATA_FLOAT, s->b, s->hq, s->sq, s->skv);
  matmul_ov(g, q, kt, &sc, LQ(lens), LK(lens), NULL);
  *scale = tensor(g, TE_DNN_DATA_FLOAT, one4, one4, 0, 1);
  g->role_uid[TE_DNN_SCALE] = scale->uid;
  return pw2(g, TE_DNN_PW_MUL, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &sc, scale);
}

/* ---- the graphs --------------------------------------------------------- */

/* Variable lengths: the length tensors, and the workspace regions of the
 * lengths and offsets and of the padded stats. */
static const struct tn *lengths(struct te_dnn_graph *g, const struct te_dnn_shape *s,
                                struct tn lens[2]) {
  if (!s->varlen) return NULL;
  lens[0] = ints(g, s->b, TE_DNN_SEQ_Q);
  lens[1] = ints(g, s->b, TE_DNN_SEQ_KV);
  g->ws_ragged_bytes = te_acd_ragged_bytes((size_t)s->b);
  g->ws_stats_bytes = (size_t)(s->b * s->hq * s->sq) * sizeof(float);
  return lens;
}

static void build_fwd(struct te_dnn_graph *g, const struct te_dnn_shape *s) {
  const int dt = s->dtype;
  struct tn q = view(g, s, &(struct tview){s->hq, s->sq, s->q_ts, s->q_hs, 0, TE_DNN_OFF_Q});
  struct tn kt = view(g, s, &(struct tview){s->hk, s->skv, s->k_ts, s->k_hs, 1, TE_DNN_OFF_K});
  struct tn v = view(g, s, &(struct tview){s->hk, s->skv, s->v_ts, s->v_hs, 0, TE_DNN_OFF_V});
  struct tn o = view(g, s, &(struct tview){s->hq, s->sq, s->o_ts, s->o_hs, 0, TE_DNN_OFF_O});
  g->role_uid[TE_DNN_Q] = q.uid, g->role_uid[TE_DNN_K] = kt.uid;
  g->role_uid[TE_DNN_V] = v.uid, g->role_uid[TE_DNN_O] = o.uid;
  struct tn lbuf[2];
  const struct tn *lens = lengths(g, s, lbuf);
  struct tn scale;
  struct tn x = scores(g, s, &q, &kt, &scale, lens);
  x = masks(g, s, x, lens);
  /* softmax with its statistics */
  struct tn m = virt4(g, TE_DNN_DATA_FLOAT, s->b, s->hq, s->sq, 1);
  reduce(g, TE_DNN_REDUCE_MAX, &x, &m);
  struct tn xm = pw2(g, TE_DNN_PW_SUB, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &x, &m);
  struct tn e = virt_like(g, &xm, TE_DNN_DATA_FLOAT);
  pw(g, TE_DNN_PW_EXP, TE_DNN_DATA_FLOAT, &xm, NULL, NULL, &e, -1);
  struct tn z = virt4(g, TE_DNN_DATA_FLOAT, s->b, s->hq, s->sq, 1);
  reduce(g, TE_DNN_REDUCE_ADD, &e, &z);
  struct tn lz = virt_like(g, &z, TE_DNN_DATA_FLOAT);
  pw(g, TE_DNN_PW_LOG, TE_DNN_DATA_FLOAT, &z, NULL, NULL, &lz, -1);
  struct tn st = stats_tensor(g, s);
  pw(g, TE_DNN_PW_ADD, TE_DNN_DATA_FLOAT, &m, &lz, NULL, &st, -1);
  /* P in the input type, as the engines take it for the second matmul */
  struct tn p = pw2(g, TE_DNN_PW_DIV, TE_DNN_DATA_FLOAT, dt, &e, &z);
  matmul_ov(g, &p, &v, &o, LQ(lens), NULL, LK(lens));
}

/* A float [1][1][1][1] tensor in device memory for role r (E4M3 scales,
 * dequantize factors, amaxes). */
static struct tn dev_scalar(struct te_dnn_graph *g, int role) {
  struct tn t = tensor(g, TE_DNN_DATA_FLOAT, one4, one4, 0, 0);
  g->role_uid[role] = t.uid;
  return t;
}

/* The E4M3 forward, in the shape of the FP8 pattern cuDNN's fused engines
 * take (the frontend's SDPA FP8 forward): S = (Q K^T) * scale * descale_q
 * * descale_k in float; the masks; softmax with its statistics; amax_s =
 * max |P|; P * scale_s rounded to E4M3; O' = (P8 V) * descale_s *
 * descale_v; O = O' * scale_o in E4M3 and amax_o = max |O'|.  Every
 * scale, dequantize factor and amax is a device float in a 16-byte
 * aligned slot of the workspace (attn_cudnn.c fills and reads them: the
 * caller's own scale_inv and scale may be only 4-byte aligned). */
static void build_fwd_fp8(struct te_dnn_graph *g, const struct te_dnn_shape *s) {
  const int F = TE_DNN_DATA_FLOAT;
  struct tn q = view(g, s, &(struct tview){s->hq, s->sq, s->q_ts, s->q_hs, 0, TE_DNN_OFF_Q});
  struct tn kt = view(g, s, &(struct tview){s->hk, s->skv, s->k_ts, s->k_hs, 1, TE_DNN_OFF_K});
  struct tn v = view(g, s, &(struct tview){s->hk, s->skv, s->v_ts, s->v_hs, 0, TE_DNN_OFF_V});
  struct tn o = view_dt(g, s, &(struct tview){s->hq, s->sq, s->o_ts, s->o_hs, 0, TE_DNN_OFF_O},
                        s->o_dt);
  g->role_uid[TE_DNN_Q] = q.uid, g->role_uid[TE_DNN_K] = kt.uid;
  g->role_uid[TE_DNN_V] = v.uid, g->role_uid[TE_DNN_O] = o.uid;
  struct tn dq = dev_scalar(g, TE_DNN_DESCALE_Q), dk = dev_scalar(g, TE_DNN_DESCALE_K);
  struct tn dv = dev_scalar(g, TE_DNN_DESCALE_V), ds = dev_scalar(g, TE_DNN_DESCALE_S);
  struct tn ss = dev_scalar(g, TE_DNN_SCALE_S);
  /* a BF16/F16 O written directly takes no scale: 1, by value */
  int o8 = s->o_dt == TE_DNN_DATA_FP8_E4M3;
  struct tn so = o8 ? dev_scalar(g, TE_DNN_SCALE_O) : scalar(g, F, 1.0f, 0);
  struct tn as = dev_scalar(g, TE_DNN_AMAX_S), ao = dev_scalar(g, TE_DNN_AMAX_O);
  g->ws_slots_bytes = TE_ACD_SLOTS * sizeof(float);
  if (s->o_staged) g->ws_o8_bytes = (size_t)(s->b * s->sq * s->hq * s->d);
  struct tn scale;
  struct tn x = scores(g, s, &q, &kt, &scale, NULL);
  x = pw2(g, TE_DNN_PW_MUL, F, F, &x, &dq);
  x = pw2(g, TE_DNN_PW_MUL, F, F, &x, &dk);
  x = masks(g, s, x, NULL);
  struct tn m = virt4(g, F, s->b, s->hq, s->sq, 1);
  reduce(g, TE_DNN_REDUCE_MAX, &x, &m);
  struct tn xm = pw2(g, TE_DNN_PW_SUB, F, F, &x, &m);
  struct tn e = virt_like(g, &xm, F);
  pw(g, TE_DNN_PW_EXP, F, &xm, NULL, NULL, &e, -1);
  struct tn z = virt4(g, F, s->b, s->hq, s->sq, 1);
  reduce(g, TE_DNN_REDUCE_ADD, &e, &z);
  struct tn lz = virt_like(g, &z, F);
  pw(g, TE_DNN_PW_LOG, F, &z, NULL, NULL, &lz, -1);
  struct tn st = stats_tensor(g, s);
  pw(g, TE_DNN_PW_ADD, F, &m, &lz, NULL, &st, -1);
  struct tn p = pw2(g, TE_DNN_PW_DIV, F, F, &e, &z);
  reduce(g, TE_DNN_REDUCE_AMAX, &p, &as);
  struct tn p8 = pw2(g, TE_DNN_PW_MUL, F, TE_DNN_DATA_FP8_E4M3, &p, &ss);
  struct tn ov = virt4(g, F, s->b, s->hq, s->sq, s->d);
  matmul_ov(g, &p8, &v, &ov, NULL, NULL, NULL);
  ov = pw2(g, TE_DNN_PW_MUL, F, F, &ov, &ds);
  ov = pw2(g, TE_DNN_PW_MUL, F, F, &ov, &dv);
  pw(g, TE_DNN_PW_MUL, F, &ov, &so, NULL, &o, -1);
  reduce(g, TE_DNN_REDUCE_AMAX, &ov, &ao);
}

/* out = x^T-products summed over each group of hq / hk query heads (GQA),
 * or straight into out when every query head has its own. */
static void matmul_grouped(struct te_dnn_graph *g, const struct te_dnn_shape *s,
                           const struct tn *a, const struct tn *b, const struct tn *out,
                           const struct tn *lens) {
  if (s->hq == s->hk) {
    matmul_ov(g, a, b, out, LK(lens), NULL, LQ(lens));
    return;
  }
  struct tn full = virt4(g, s->dtype, s->b, s->hq, s->skv, s->d);
  matmul_ov(g, a, b, &full, LK(lens), NULL, LQ(lens));
  reduce(g, TE_DNN_REDUCE_ADD, &full, out);
}

static void build_bwd(struct te_dnn_graph *g, const struct te_dnn_shape *s) {
  const int dt = s->dtype;
  struct tn q = view(g, s, &(struct tview){s->hq, s->sq, s->q_ts, s->q_hs, 0, TE_DNN_OFF_Q});
  struct tn kt = view(g, s, &(struct tview){s->hk, s->skv, s->k_ts, s->k_hs, 1, TE_DNN_OFF_K});
  struct tn vt = view(g, s, &(struct tview){s->hk, s->skv, s->v_ts, s->v_hs, 1, TE_DNN_OFF_V});
  struct tn o = view(g, s, &(struct tview){s->hq, s->sq, s->o_ts, s->o_hs, 0, TE_DNN_OFF_O});
  struct tn dO = view(g, s, &(struct tview){s->hq, s->sq, s->do_ts, s->do_hs, 0, TE_DNN_OFF_DO});
  struct tn dq = view(g, s, &(struct tview){s->hq, s->sq, s->dq_ts, s->dq_hs, 0, TE_DNN_OFF_DQ});
  struct tn dk = view(g, s, &(struct tview){s->hk, s->skv, s->dk_ts, s->dk_hs, 0, TE_DNN_OFF_DK});
  struct tn dv = view(g, s, &(struct tview){s->hk, s->skv, s->dv_ts, s->dv_hs, 0, TE_DNN_OFF_DV});
  g->role_uid[TE_DNN_Q] = q.uid, g->role_uid[TE_DNN_K] = kt.uid;
  g->role_uid[TE_DNN_V] = vt.uid, g->role_uid[TE_DNN_O] = o.uid;
  g->role_uid[TE_DNN_DO] = dO.uid, g->role_uid[TE_DNN_DQ] = dq.uid;
  g->role_uid[TE_DNN_DK] = dk.uid, g->role_uid[TE_DNN_DV] = dv.uid;
  struct tn st = stats_tensor(g, s);
  struct tn lbuf[2];
  const struct tn *lens = lengths(g, s, lbuf);

  /* sum = rowsum(dO * O), kept in the workspace */
  struct tn doo = virt4(g, TE_DNN_DATA_FLOAT, s->b, s->hq, s->sq, s->d);
  pw(g, TE_DNN_PW_MUL, TE_DNN_DATA_FLOAT, &dO, &o, NULL, &doo, -1);
  struct tn rs = virt4(g, TE_DNN_DATA_FLOAT, s->b, s->hq, s->sq, 1);
  reduce(g, TE_DNN_REDUCE_ADD, &doo, &rs);
  int64_t rdim[4] = {s->b, s->hq, s->sq, 1}, rstr[4] = {s->hq * s->sq, s->sq, 1, 1};
  struct tn sum = tensor(g, TE_DNN_DATA_FLOAT, rdim, rstr, 0, 0);
  g->role_uid[TE_DNN_WS_SUM] = sum.uid;
  g->ws_sum_bytes = (size_t)(s->b * s->hq * s->sq) * sizeof(float);
  struct tn one = scalar(g, TE_DNN_DATA_FLOAT, 1.0f, 0);
  pw(g, TE_DNN_PW_MUL, TE_DNN_DATA_FLOAT, &rs, &one, NULL, &sum, -1);

  /* E = exp(S - stats), the probabilities again */
  struct tn scale;
  struct tn x = scores(g, s, &q, &kt, &scale, lens);
  if (lens) {
    /* variable lengths: the masks before the subtraction, the order the
     * padding-mask pattern of cuDNN's engines has */
    x = masks(g, s, x, lens);
    x = pw2(g, TE_DNN_PW_SUB, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &x, &st);
  } else {
    x = pw2(g, TE_DNN_PW_SUB, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &x, &st);
    x = masks(g, s, x, lens);
  }
  struct tn e = virt_like(g, &x, TE_DNN_DATA_FLOAT);
  pw(g, TE_DNN_PW_EXP, TE_DNN_DATA_FLOAT, &x, NULL, NULL, &e, -1);

  /* dV = E^T dO */
  int64_t tdim[4] = {s->b, s->hq, s->skv, s->sq};
  int64_t tstr[4] = {s->hq * s->sq * s->skv, s->sq * s->skv, 1, s->skv};
  struct tn et = tensor(g, dt, tdim, tstr, 1, 0);
  reshape(g, &e, &et);
  matmul_grouped(g, s, &et, &dO, &dv, lens);

  /* dS = E * (dO V^T - sum) * scale */
  struct tn dp = virt4(g, TE_DNN_DATA_FLOAT, s->b, s->hq, s->sq, s->skv);
  matmul_ov(g, &dO, &vt, &dp, LQ(lens), LK(lens), NULL);
  dp = pw2(g, TE_DNN_PW_SUB, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &dp, &sum);
  dp = pw2(g, TE_DNN_PW_MUL, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &dp, &e);
  struct tn ds = pw2(g, TE_DNN_PW_MUL, TE_DNN_DATA_FLOAT, TE_DNN_DATA_FLOAT, &dp, &scale);

  /* dK = dS^T Q */
  struct tn dst = tensor(g, dt, tdim, tstr, 1, 0);
  reshape(g, &ds, &dst);
  matmul_grouped(g, s, &dst, &q, &dk, lens);

  /* dQ = dS K, in float in the workspace, then cast into dQ */
  int64_t kdim[4] = {s->b, s->hk, s->skv, s->d};
  int64_t kstr[4] = {s->skv * s->k_ts, s->k_hs, s->k_ts, 1};
  struct tn k = tensor(g, dt, kdim, kstr, 1, 0);
  reshape(g, &kt, &k);
  int64_t qdim[4] = {s->b, s->hq, s->sq, s->d};
  int64_t qstr[4] = {s->hq * s->sq * s->d, s->sq * s->d, s->d, 1};
  struct tn acc = tensor(g, TE_DNN_DATA_FLOAT, qdim, qstr, 0, 0);
  g->role_uid[TE_DNN_WS_DQACC] = acc.uid;
  g->ws_dqacc_bytes = (size_t)(s->b * s->hq * s->sq * s->d) * sizeof(float);
  matmul_ov(g, &ds, &k, &acc, LQ(lens), NULL, LK(lens));
  pw(g, TE_DNN_PW_IDENTITY, TE_DNN_DATA_FLOAT, &acc, NULL, NULL, &dq, -1);
}

int te_dnn_graph_build(struct te_dnn_graph *g, te_dnn_handle_t h, const struct te_dnn_shape *s,
                       int backward) {
  if (backward)
    build_bwd(g, s);
  else if (s->dtype == TE_DNN_DATA_FP8_E4M3)
    build_fwd_fp8(g, s);
  else
    build_fwd(g, s);
  if (!g->status) {
    te_dnn_desc_t og = make(g, TE_DNN_OPERATIONGRAPH_DESCRIPTOR);
    SET(g, og, OPERATIONGRAPH_OPS, TE_DNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    SET(g, og, OPERATIONGRAPH_HANDLE, TE_DNN_TYPE_HANDLE, 1, &h);
    finalize_(g, og, "cudnnBackendFinalize(operation graph)");
    g->opgraph = og;
  }
  return g->status ? -1 : 0;
}

void te_dnn_graph_free(struct te_dnn_graph *g) {
  for (int i = g->ndescs - 1; i >= 0; i--) (void)te_dnn.p_cudnnBackendDestroyDescriptor(g->descs[i]);
  g->ndescs = 0;
  g->nops = 0;
  g->opgraph = NULL;
}
