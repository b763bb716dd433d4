/* SPDX-License-Identifier: Apache-2.0
 * fuser_ops.c -- libtecomm's operations in libtecore's fuser (te/ops.h):
 * the allreduce, the tensor-parallel pair and the sequence-parallel
 * all-gather and reduce-scatter (over rows) as operation kinds, and the
 * forward fusion allreduce -> residual add -> RMSNorm as one
 * tecomm_allreduce_add_rmsnorm call, which also writes the norm's rsigma
 * for libtecore's own backward and, before an FP8 Linear, that Linear's
 * FP8 input (te/comm.h, "the allreduce as fuser operations", says what
 * each one computes).
 *
 * libtecore names the kinds and runs them; this file gives them shapes and
 * executors through the registration tables (tecore_ops_register_kind,
 * tecore_ops_register_fusion), as a libibverbs provider fills its ops.
 * Executors reach the sequence only through libtecore's public API
 * (tecore_seq_op for gamma, rsigma and the residual slot).
 *
 * Shapes: activations [rows][features] of the sequence's dtype; the sums
 * are over rows * features elements; rsigma F32 [rows]. */
#include "base/tc_internal.h"
#include "te_results.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

/* libtecore's result for a libtecomm failure (the detail is already set):
 * the same number where libtecore has the code (common/te_results.h). */
static tecore_result_t core_of(tecomm_result_t r) {
  return (tecore_result_t)te_result_to_core((int)r);
}

/* Propagates a libtecore failure from an executor (libtecore's result). */
#define CORE_CHECK(call)                                                       \
  do {                                                                         \
    tecore_result_t cc_r_ = (call);                                            \
    if (cc_r_ != TECORE_SUCCESS) return cc_r_;                                 \
  } while (0)

static const char add_fn[] = "tecore_seq_add";

/* ---- the kinds ------------------------------------------------------------------------ */

/* desc->ctx must be a usable struct tecomm_op_params. */
static tecore_result_t comm_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                  void *ctx) {
  (void)sh;
  const char *kn = tecore_op_kind_name((int)(uintptr_t)ctx);
  const struct tecomm_op_params *p = d->ctx;
  if (!p)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: %s: desc->ctx is NULL (a struct "
                          "tecomm_op_params, te/comm.h)", add_fn, kn));
  if (!p->comm)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: %s: desc->ctx->comm is NULL", add_fn, kn));
  if ((unsigned)p->algo >= TECOMM_ALGO_COUNT_)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: %s: desc->ctx->algo %d is not a tecomm_algo",
                          add_fn, kn, (int)p->algo));
  if (p->flags & ~TECOMM_OP_NO_FUSION)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: %s: desc->ctx->flags 0x%x has bits other "
                          "than TECOMM_OP_NO_FUSION", add_fn, kn, p->flags));
  return TECORE_SUCCESS;
}

static size_t numel(const struct tecore_tensor *t) { return t->shape[0] * t->shape[1]; }

static const struct tecomm_op_params *params_of(const struct tecore_seq_exec *x, size_t op) {
  struct tecore_op_info info;
  if (tecore_seq_op(x->seq, op, &info) != TECORE_SUCCESS) return NULL;
  return info.desc.ctx;
}

/* 1 when the forward input of the group x (boundary x->first) is dead
 * once the group has read it: a Linear wrote it (inside the sequence, not
 * the caller's input), and a Linear's backward reads its input, not its
 * output; the group's own ops (sums, add, norm) read no input in backward
 * either.  Then the sum may reduce-scatter into it (tc_allreduce_scratch):
 * a symmetric output of a row-parallel Linear (demo_tp_symmetric in
 * te-demo) is summed where it lies, with no staged copy. */
static int input_dead(const struct tecore_seq_exec *x) {
  struct tecore_op_info before;
  return x->first > 0 && tecore_seq_op(x->seq, x->first - 1, &before) == TECORE_SUCCESS &&
         before.desc.kind == TECORE_OP_LINEAR;
}

/* dst = sum over the ranks of src (out of place); scratch: src is dead
 * afterwards (input_dead).  On the sequence's side stream beside a GEMM
 * (TECORE_EXEC_SIDE) the IPC kernels take a narrow grid. */
static tecore_result_t sum(const struct tecore_seq_exec *x, const struct tecore_tensor *src,
                           const struct tecore_tensor *dst, int scratch) {
  const struct tecomm_op_params *p = params_of(x, x->first);
  if (!p) return TECORE_ERR_INVALID;
  unsigned how = (scratch ? TC_AR_SCRATCH : 0u) | (x->flags & TECORE_EXEC_SIDE ? TC_AR_BESIDE : 0u);
  return core_of(tc_allreduce_scratch(p->comm, src->data, dst->data, numel(src), src->dtype,
                                      p->algo, how, x->stream));
}

/* dst = src, unless the fuser aliased them (it does but at the ends). */
static tecore_result_t pass(const struct tecore_seq_exec *x, const struct tecore_tensor *src,
                            const struct tecore_tensor *dst) {
  if (src->data == dst->data) return TECORE_SUCCESS;
  return tecore_memcpy_async(dst->data, src->data, numel(src) * tecore_dtype_size(src->dtype),
                             x->stream);
}

static tecore_result_t sum_fwd(const struct tecore_seq_exec *x) {
  return sum(x, &x->act[0], &x->act[1], input_dead(x));
}
/* The gradient summed is dead after the sum when the fuser says so (the
 * sequence's own, read by no later group: fc1's input gradient): a
 * symmetric one (tecore_seq_set_grad, as te-demo --tp does) is then
 * summed where fc1's dgrad wrote it, with no staged copy. */
static tecore_result_t sum_bwd(const struct tecore_seq_exec *x) {
  return sum(x, &x->grad[1], &x->grad[0], (x->flags & TECORE_EXEC_GRAD_DEAD) != 0);
}
static tecore_result_t pass_fwd(const struct tecore_seq_exec *x) { return pass(x, &x->act[0], &x->act[1]); }
static tecore_result_t pass_bwd(const struct tecore_seq_exec *x) { return pass(x, &x->grad[1], &x->grad[0]); }

/* ---- sequence parallelism: the row shards ------------------------------------------- */

/* The all-gather and the reduce-scatter move row blocks: rank r's shard
 * is rows [r * rows / n, (r + 1) * rows / n) of the full activation,
 * which is NCCL's block order (tecomm_allgather, tecomm_reduce_scatter),
 * so the collectives work on the tensors as they lie.  Only the
 * algorithms those two run are taken (the others would fail at the first
 * pass, not at tecore_seq_add). */
static tecore_result_t sp_shape(const struct tecore_op_desc *d, struct tecore_op_shape *sh,
                                void *ctx) {
  CORE_CHECK(comm_shape(d, sh, ctx));
  int kind = (int)(uintptr_t)ctx, n = 0;
  const char *kn = tecore_op_kind_name(kind);
  const struct tecomm_op_params *p = d->ctx;
  tecomm_algo_t a = p->algo;
  if (a != TECOMM_ALGO_AUTO && a != TECOMM_ALGO_ONESHOT && a != TECOMM_ALGO_CE &&
      a != TECOMM_ALGO_NCCL && a != TECOMM_ALGO_VERBS)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: %s: desc->ctx->algo %d: the all-gather and "
                          "reduce-scatter run TECOMM_ALGO_AUTO, _ONESHOT, _CE, _NCCL or _VERBS",
                          add_fn, kn, (int)a));
  tecomm_result_t r = tecomm_comm_rank(p->comm, NULL, &n, NULL);
  if (r != TECOMM_SUCCESS) return core_of(r);
  if (kind == TECORE_OP_ALLGATHER) {
    sh->out_rows = sh->in_rows * (size_t)n;
    return TECORE_SUCCESS;
  }
  if (sh->in_rows % (size_t)n)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: %s: the input's %zu rows do not split over "
                          "the communicator's %d ranks (rows must be a multiple of the ranks)",
                          add_fn, kn, sh->in_rows, n));
  sh->out_rows = sh->in_rows / (size_t)n;
  return TECORE_SUCCESS;
}

/* full = every rank's shard, in rank order. */
static tecore_result_t gather(const struct tecore_seq_exec *x, const struct tecore_tensor *shard,
                              const struct tecore_tensor *full) {
  const struct tecomm_op_params *p = params_of(x, x->first);
  if (!p) return TECORE_ERR_INVALID;
  return core_of(tecomm_allgather_algo(p->comm, shard->data, full->data, numel(shard),
                                       shard->dtype, p->algo, x->stream));
}

/* shard = this rank's block of the sum over the ranks of full. */
static tecore_result_t scatter(const struct tecore_seq_exec *x, const struct tecore_tensor *full,
                               const struct tecore_tensor *shard) {
  const struct tecomm_op_params *p = params_of(x, x->first);
  if (!p) return TECORE_ERR_INVALID;
  return core_of(tecomm_reduce_scatter_algo(p->comm, full->data, shard->data, numel(shard),
                                            full->dtype, TECOMM_SUM, p->algo, x->stream));
}

/* allgather's adjoint is the reduce-scatter: every rank's copy of the
 * gathered rows feeds a loss term of its own (a column-parallel Linear's
 * weight shard), so a shard's gradient is the sum of the copies'. */
static tecore_result_t ag_fwd(const struct tecore_seq_exec *x) { return gather(x, &x->act[0], &x->act[1]); }
static tecore_result_t ag_bwd(const struct tecore_seq_exec *x) { return scatter(x, &x->grad[1], &x->grad[0]); }
static tecore_result_t rs_fwd(const struct tecore_seq_exec *x) { return scatter(x, &x->act[0], &x->act[1]); }
static tecore_result_t rs_bwd(const struct tecore_seq_exec *x) { return gather(x, &x->grad[1], &x->grad[0]); }

/* None of the five reads an activation in backward.  The pair's identity
 * side aliases (no bytes move); the sums do not: an allreduce in place
 * would leave the boundary before it holding the sum, not what the
 * operation before wrote.  The backward sums touch nothing but their
 * gradients and the communicator, so the fuser may run them on its side
 * stream, under the weight-gradient GEMM of the Linear before them
 * (TECORE_OP_BACKWARD_OVERLAP, te/ops.h "Overlap"). */
static const struct {
  int kind;
  struct tecore_op_kind_def def;
} kinds[] = {
    {TECORE_OP_ALLREDUCE, {.name = "allreduce", .fields = TECORE_OP_FIELD_CTX,
                           .flags = TECORE_OP_BACKWARD_NO_INPUT | TECORE_OP_BACKWARD_OVERLAP,
                           .shape = comm_shape, .forward = sum_fwd, .backward = sum_bwd,
                           .ctx = (void *)(uintptr_t)TECORE_OP_ALLREDUCE}},
    {TECORE_OP_TP_COPY, {.name = "tp_copy", .fields = TECORE_OP_FIELD_CTX,
                         .flags = TECORE_OP_BACKWARD_NO_INPUT | TECORE_OP_ALIAS_FORWARD |
                                  TECORE_OP_BACKWARD_OVERLAP,
                         .shape = comm_shape, .forward = pass_fwd, .backward = sum_bwd,
                         .ctx = (void *)(uintptr_t)TECORE_OP_TP_COPY}},
    {TECORE_OP_TP_REDUCE, {.name = "tp_reduce", .fields = TECORE_OP_FIELD_CTX,
                           .flags = TECORE_OP_BACKWARD_NO_INPUT | TECORE_OP_ALIAS_BACKWARD,
                           .shape = comm_shape, .forward = sum_fwd, .backward = pass_bwd,
                           .ctx = (void *)(uintptr_t)TECORE_OP_TP_REDUCE}},
    /* before a column-parallel Linear in a sequence-parallel block: its
     * backward reduce-scatter may run under that Linear's wgrad GEMM */
    {TECORE_OP_ALLGATHER, {.name = "allgather", .fields = TECORE_OP_FIELD_CTX,
                           .flags = TECORE_OP_BACKWARD_NO_INPUT | TECORE_OP_BACKWARD_OVERLAP,
                           .shape = sp_shape, .forward = ag_fwd, .backward = ag_bwd,
                           .ctx = (void *)(uintptr_t)TECORE_OP_ALLGATHER}},
    {TECORE_OP_REDUCE_SCATTER, {.name = "reduce_scatter", .fields = TECORE_OP_FIELD_CTX,
                                .flags = TECORE_OP_BACKWARD_NO_INPUT, .shape = sp_shape,
                                .forward = rs_fwd, .backward = rs_bwd,
                                .ctx = (void *)(uintptr_t)TECORE_OP_REDUCE_SCATTER}},
};

/* ---- the fusion: [sum, add_extra_input, make_extra_output, rmsnorm] ---------------------- */

enum { F_SUM = 0, F_ADD = 1, F_MAKE = 2, F_NORM = 3, F_NOPS = 4 };

static int fuse_applies(const tecore_seq_t *seq, size_t first, const struct tecore_recipe *r,
                        void *ctx) {
  (void)r, (void)ctx;
  struct tecore_op_info sum_op, norm;
  if (tecore_seq_op(seq, first + F_SUM, &sum_op) != TECORE_SUCCESS ||
      tecore_seq_op(seq, first + F_NORM, &norm) != TECORE_SUCCESS)
    return 0;
  const struct tecomm_op_params *p = sum_op.desc.ctx;
  /* the fused call has no zero-centered gamma */
  return p && !(p->flags & TECOMM_OP_NO_FUSION) && norm.desc.norm_flags == 0;
}

/* The FP8 variants (TECORE_FUSION_WRITES_FP8): the group [sum, add, make,
 * norm] or [sum, add, make, norm, quantize | tp_copy] (ctx: its length)
 * right before a Linear that runs in FP8 under delayed scaling.  The
 * kernel writes that Linear's FP8 input (rowwise, the recipe's scale,
 * amax max-accumulated) instead of the norm's output in the sequence's
 * dtype, which nothing reads then (the quantize and tp_copy alias it and
 * read nothing in backward; the Linear's backward makes its columnwise
 * copy from the rowwise one).  Not under current scaling: the scale
 * would need the amax of the whole output first, a second pass over it
 * (libtecore's rmsnorm+quantize declines it for the same reason). */
static int fuse8_applies(const tecore_seq_t *seq, size_t first, const struct tecore_recipe *r,
                         void *ctx) {
  size_t nops = (size_t)(uintptr_t)ctx;
  struct tecore_op_info lin;
  struct tecore_tensor t;
  if (!r || r->kind != TECORE_RECIPE_DELAYED || !fuse_applies(seq, first, r, NULL) ||
      tecore_seq_op(seq, first + nops, &lin) != TECORE_SUCCESS ||
      lin.desc.kind != TECORE_OP_LINEAR)
    return 0;
  return tecore_seq_fp8_input(seq, first + nops, &t) == TECORE_SUCCESS;
}

static tecore_result_t fuse_run(const struct tecore_seq_exec *x) {
  struct tecore_op_info sum_op, add, norm;
  CORE_CHECK(tecore_seq_op(x->seq, x->first + F_SUM, &sum_op));
  CORE_CHECK(tecore_seq_op(x->seq, x->first + F_ADD, &add));
  CORE_CHECK(tecore_seq_op(x->seq, x->first + F_NORM, &norm));
  const struct tecomm_op_params *p = sum_op.desc.ctx;
  const struct tecore_tensor *res = &x->act[F_ADD + 1];   /* = act[F_MAKE + 1]: an alias */
  /* a block of rows (TECORE_FUSION_ROWS): act[] are cut to it, the rest
   * is offset here; each row's sum, add and norm are its own */
  size_t r0 = x->row0, rows = x->act[F_SUM].shape[0], h = norm.in_features;
  size_t es = tecore_dtype_size(x->act[F_SUM].dtype);
  /* Boundary F_SUM + 1, the bare sum, is not written: nothing reads it
   * (the add's and the sum's backward read no activation).  The kernel
   * writes the norm's rsigma (the bits tecore_rmsnorm_fwd gives), which
   * libtecore's rmsnorm_bwd_add reads in the backward: nothing recomputes
   * it. */
  struct tecomm_add_rmsnorm a = {
      .x = x->act[F_SUM].data, .rows = rows, .hidden = h, .dtype = x->act[F_SUM].dtype,
      .residual_in = add.extra_value.data + r0 * h * es, .residual_out = res->data,
      .gamma = norm.param[0].data, .eps = norm.desc.epsilon, .out = x->act[F_NOPS].data,
      .algo = p->algo, .rsigma = norm.saved[0].data + r0 * sizeof(float)};
  struct tecore_tensor q;
  if ((uintptr_t)x->ctx) { /* an FP8 variant: the next Linear's input instead of out */
    CORE_CHECK(tecore_seq_fp8_input(x->seq, x->first + x->count, &q));
    q.columnwise_data = 0;
    q.data += r0 * h;   /* one byte an element; amax max-accumulates over the blocks */
    q.shape[0] = rows;
    a.fp8_out = &q;
    a.out = 0;
  }
  /* the row-parallel partial sums are dead after the call (input_dead):
   * two-shot may reduce-scatter into them, where they lie; a row block on
   * the side stream runs beside the next block's GEMM */
  unsigned how = (input_dead(x) ? TC_AR_SCRATCH : 0u) |
                 (x->flags & TECORE_EXEC_SIDE ? TC_AR_BESIDE : 0u);
  return core_of(tc_allreduce_add_rmsnorm_scratch(p->comm, &a, how, x->stream));
}

/* ---- the fusion: [norm, tp_copy] before an FP8 Linear ----------------------------------- */

/* A norm that no sum precedes (a model's first block: make_extra_output |
 * norm | tp_copy | Linear) and a tp_copy between it and a Linear that
 * runs in FP8 under delayed scaling: the norm writes that Linear's FP8
 * input (rowwise, the recipe's scale, amax max-accumulated), as
 * libtecore's rmsnorm+quantize does where no tp_copy stands between.
 * tp_copy's forward is an alias that moves no bytes and its backward reads
 * no activation, so leaving its forward out changes nothing but the
 * quantize launch it saves; the norm's output in the sequence's dtype is
 * not written (nothing reads it: the Linear's backward makes its
 * columnwise copy from the rowwise one).  Not when the tp_copy has
 * TECOMM_OP_NO_FUSION, and not under current scaling (the scale would
 * need the whole output's amax first). */
static int norm8_applies(const tecore_seq_t *seq, size_t first, const struct tecore_recipe *r,
                         void *ctx) {
  (void)ctx;
  struct tecore_op_info cp, lin;
  struct tecore_tensor t;
  if (!r || r->kind != TECORE_RECIPE_DELAYED ||
      tecore_seq_op(seq, first + 1, &cp) != TECORE_SUCCESS ||
      tecore_seq_op(seq, first + 2, &lin) != TECORE_SUCCESS || lin.desc.kind != TECORE_OP_LINEAR)
    return 0;
  const struct tecomm_op_params *p = cp.desc.ctx;
  if (!p || (p->flags & TECOMM_OP_NO_FUSION)) return 0;
  return tecore_seq_fp8_input(seq, first + 2, &t) == TECORE_SUCCESS;
}

static tecore_result_t norm8_run(const struct tecore_seq_exec *x) {
  struct tecore_op_info norm;
  struct tecore_tensor q;
  CORE_CHECK(tecore_seq_op(x->seq, x->first, &norm));
  CORE_CHECK(tecore_seq_fp8_input(x->seq, x->first + 2, &q));
  q.columnwise_data = 0;
  if (norm.desc.kind == TECORE_OP_LAYERNORM)
    return tecore_layernorm_fwd(&x->act[0], &norm.param[0], &norm.param[1], norm.desc.epsilon,
                                norm.desc.norm_flags, &q, norm.saved[1].data, norm.saved[0].data,
                                x->stream);
  return tecore_rmsnorm_fwd(&x->act[0], &norm.param[0], norm.desc.epsilon, norm.desc.norm_flags,
                            &q, norm.saved[0].data, x->stream);
}

#define NORM8(nm, normk)                                                                      \
  {.name = nm, .dir = TECORE_SEQ_FORWARD, .nops = 2, .kinds = {normk, TECORE_OP_TP_COPY},    \
   .applies = norm8_applies, .run = norm8_run, .priority = 55,                                \
   .flags = TECORE_FUSION_WRITES_FP8}

#define FUSE8(nm, sumk, k5, n)                                                               \
  {.name = nm, .dir = TECORE_SEQ_FORWARD, .nops = n,                                         \
   .kinds = {sumk, TECORE_OP_ADD_EXTRA_INPUT, TECORE_OP_MAKE_EXTRA_OUTPUT, TECORE_OP_RMSNORM, k5}, \
   .applies = fuse8_applies, .run = fuse_run, .ctx = (void *)(uintptr_t)(n), .priority = 55,  \
   .flags = TECORE_FUSION_WRITES_FP8 | TECORE_FUSION_ROWS}

static const struct tecore_fusion_def fusions[] = {
    FUSE8("allreduce+add+rmsnorm+fp8", TECORE_OP_ALLREDUCE, 0, F_NOPS),
    FUSE8("tp_reduce+add+rmsnorm+fp8", TECORE_OP_TP_REDUCE, 0, F_NOPS),
    FUSE8("allreduce+add+rmsnorm+quantize", TECORE_OP_ALLREDUCE, TECORE_OP_QUANTIZE, F_NOPS + 1),
    FUSE8("tp_reduce+add+rmsnorm+quantize", TECORE_OP_TP_REDUCE, TECORE_OP_QUANTIZE, F_NOPS + 1),
    FUSE8("allreduce+add+rmsnorm+tp_copy+fp8", TECORE_OP_ALLREDUCE, TECORE_OP_TP_COPY,
          F_NOPS + 1),
    FUSE8("tp_reduce+add+rmsnorm+tp_copy+fp8", TECORE_OP_TP_REDUCE, TECORE_OP_TP_COPY,
          F_NOPS + 1),
    NORM8("rmsnorm+tp_copy+fp8", TECORE_OP_RMSNORM),
    NORM8("layernorm+tp_copy+fp8", TECORE_OP_LAYERNORM),
    {.name = "allreduce+add+rmsnorm", .dir = TECORE_SEQ_FORWARD, .nops = F_NOPS,
     .kinds = {TECORE_OP_ALLREDUCE, TECORE_OP_ADD_EXTRA_INPUT, TECORE_OP_MAKE_EXTRA_OUTPUT,
               TECORE_OP_RMSNORM},
     .applies = fuse_applies, .run = fuse_run, .priority = 50, .flags = TECORE_FUSION_ROWS},
    {.name = "tp_reduce+add+rmsnorm", .dir = TECORE_SEQ_FORWARD, .nops = F_NOPS,
     .kinds = {TECORE_OP_TP_REDUCE, TECORE_OP_ADD_EXTRA_INPUT, TECORE_OP_MAKE_EXTRA_OUTPUT,
               TECORE_OP_RMSNORM},
     .applies = fuse_applies, .run = fuse_run, .priority = 50, .flags = TECORE_FUSION_ROWS},
};

/* ---- registration ---------------------------------------------------------------------- */

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static int registered;

/* The i-th pattern tecomm_ops_register adds: this file's, then
 * fuser_sp.c's. */
enum { NFUSIONS = TE_ARRAY_SIZE(fusions) };
static const struct tecore_fusion_def *fusion_at(size_t i) {
  return i < NFUSIONS ? &fusions[i] : &tc_sp_fusions[i - NFUSIONS];
}

/* Removes the first nk kinds and nf fusions (a failed or undone register). */
static void undo(size_t nk, size_t nf) {
  for (size_t i = 0; i < nf; i++) (void)tecore_ops_unregister_fusion(fusion_at(i)->name);
  for (size_t i = 0; i < nk; i++) (void)tecore_ops_register_kind(kinds[i].kind, NULL);
}

TE_EXPORT tecomm_result_t tecomm_ops_register(void) {
  static const char fn[] = "tecomm_ops_register";
  pthread_mutex_lock(&reg_lock);
  tecomm_result_t res = TECOMM_SUCCESS;
  size_t nk = 0, nf = 0;
  if (registered) goto out;
  for (; nk < TE_ARRAY_SIZE(kinds); nk++) {
    tecore_result_t r = tecore_ops_register_kind(kinds[nk].kind, &kinds[nk].def);
    if (r != TECORE_SUCCESS) {
      res = tc_core(r, fn);
      goto fail;
    }
  }
  for (; nf < NFUSIONS + tc_sp_nfusions; nf++) {
    tecore_result_t r = tecore_ops_register_fusion(fusion_at(nf));
    if (r != TECORE_SUCCESS) {
      res = tc_core(r, fn);
      goto fail;
    }
  }
  registered = 1;
  TC_INFO("%s: kinds allreduce, tp_copy, tp_reduce, allgather, reduce_scatter and the "
          "forward fusions "
          "allreduce+add+rmsnorm, tp_reduce+add+rmsnorm and their FP8 variants, "
          "rmsnorm+tp_copy+fp8, layernorm+tp_copy+fp8, allgather+linear and "
          "linear+reduce_scatter registered", fn);
  goto out;
fail:
  undo(nk, nf);
out:
  pthread_mutex_unlock(&reg_lock);
  return res;
}

TE_EXPORT tecomm_result_t tecomm_ops_unregister(void) {
  pthread_mutex_lock(&reg_lock);
  if (registered) undo(TE_ARRAY_SIZE(kinds), NFUSIONS + tc_sp_nfusions);
  registered = 0;
  pthread_mutex_unlock(&reg_lock);
  return TECOMM_SUCCESS;
}
