/* SPDX-License-Identifier: Apache-2.0
 * fuser_sp.c -- the forward fusions of sequence parallelism: the
 * all-gather before a column-parallel Linear and the reduce-scatter
 * after a row-parallel one, each run inside the Linear's GEMM
 * (tecomm_ag_gemm, tecomm_gemm_rs: the chunks' copies on the copy engines
 * while the previous chunk multiplies), registered by tecomm_ops_register
 * beside fuser_ops.c's patterns:
 *   "allgather+linear"       [ALLGATHER, LINEAR]
 *   "allgather+linear+gelu"  [ALLGATHER, LINEAR, GELU]: with the GELU in the
 *        GEMM's epilogue where libtecore's linear+gelu would take it
 *        (TECORE_FUSION_GELU_EPILOGUE; the pre-activation written as aux,
 *        the GELU's input boundary, which its backward reads)
 *   "linear+reduce_scatter"  [LINEAR, REDUCE_SCATTER]
 *   "linear+reduce_scatter+add+rmsnorm"  [LINEAR, REDUCE_SCATTER,
 *        ADD_EXTRA_INPUT, MAKE_EXTRA_OUTPUT, RMSNORM]: the fold fused with
 *        the residual add and the next norm (tecomm_gemm_rs's norm)
 * and the backward's, the output gradient's all-gather inside a
 * row-parallel Linear's data-gradient GEMM (tecomm_ag_gemm, b as it lies):
 *   "allgather+dgrad"        [LINEAR, REDUCE_SCATTER]; under delayed FP8
 *        "allgather+dgrad8" and "allgather+dgrad8+dbias" (the codes gathered)
 *   "allgather+dgrad+dgelu"  [GELU, LINEAR, REDUCE_SCATTER]: 16-bit, the
 *        GELU's backward in the GEMM's dGELU epilogue (TECOMM_AG_GEMM_DGELU)
 *
 * Shapes (n ranks, R a rank's rows, k in, m out features, all of the
 * sequence's dtype, BF16 or F16, the GEMM's operands E4M3 under FP8): allgather+linear: act[0] the shard
 * [R][k], act[1] the gathered input [nR][k] (the Linear's backward reads
 * it; under FP8 not written, the codes instead), act[2] = act[1] W^T
 * [nR][m].  linear+reduce_scatter: act[0] [nR][k],
 * act[2] this rank's rows of the sum of act[0] W^T [R][m]; act[1], the
 * partial product, is not written (the reduce-scatter's backward reads
 * no input, the Linear's reads its input).
 *
 * Both calls want symmetric memory: the shard is copied into a staging
 * buffer of the communicator's pool, and the partial products go to
 * another; both are made at plan time (growing, an outgrown one kept:
 * a graph captured before may name it) and go with the communicator.
 * One of each serves every group: the calls on one communicator are
 * ordered (each ends with a barrier after which no peer reads them).
 *
 * Under FP8 (delayed scaling only: the current recipe's scale follows
 * from the tensor, which the all-gather would need agreed first),
 * linear+reduce_scatter multiplies E4M3 codes into 16-bit partials: the
 * input's and the weight's, quantized where the plain Linear would
 * quantize them by libtecore's own code (tecore_seq_linear_fp8_operands:
 * an act+quantize before may have written the input's codes and left
 * its 16-bit input unwritten; an F32 weight, TECORE_SEQ_F32_WEIGHTS, is
 * quantized from F32 as the Linear does), fast accumulation as its GEMM.
 * allgather+linear gathers E4M3 codes, half the bytes of the rows: each
 * rank quantizes its shard with the Linear's input scale into the
 * staging buffer (|x| max-accumulated into the input's amax),
 * tecomm_ag_gemm gathers the codes into the Linear's FP8 input and
 * multiplies them as they land, then the ranks' amaxes are reduced
 * (MAX; equal before the call, every call ends so).  So the codes and amax are
 * those of the plain Linear quantizing the gathered input whole, and
 * the scale, which follows from the amax history, is the same on every
 * rank from the first step on.  The patterns say
 * TECORE_FUSION_QUANTIZES_INPUT (the Linear's backward makes the
 * columnwise copy, a byte transpose) and TECORE_FUSION_INPUT_FP8_ONLY
 * (act[1], the 16-bit gathered rows, is not written).
 *
 * A Linear's bias goes into every chunk's GEMM (the bias epilogue, as
 * the plain Linear adds it): a column-parallel Linear's slice on every
 * rank, a row-parallel one's on rank 0 alone, into that rank's partial
 * products, so the fold sums the same partials as the plain path.
 *
 * Every rank must take the same cover (a rank running the plain
 * collective would wait for peers inside an overlapped call), yet what a
 * rank sees may differ (a norm's flags, a TECOMM_OP_NO_FUSION of its
 * own): the predicate ANDs its answer over the ranks by a host exchange.
 * The planner asks in the same order on every rank (it walks the same
 * kinds); a rank that never asks (its fusions turned off alone) makes its
 * peers' exchange fail within TECOMM_TIMEOUT, and they decline. */
#include "base/tc_internal.h"
#include "comm_priv.h"
#include "overlap/ov.h"
#include "te_results.h"

TECORE_TUNABLE_INT(tc_tun_sp_overlap, "TECOMM_SP_OVERLAP", 1, 0, 1,
                   "1: the fuser runs a sequence-parallel all-gather before a Linear and a "
                   "reduce-scatter after one inside the Linear's GEMM (allgather+linear, "
                   "linear+reduce_scatter) where it can; 0: the collective, then the GEMM")

static const char sp_fn[] = "tecomm_ops_register: sequence-parallel overlap";

/* the pattern (the registration's ctx); SP_AG_DGRAD, SP_AG_DGRAD8,
 * SP_AG_DGRAD8_DBIAS and SP_AG_DGRAD_DGELU are the backward's */
enum {
  SP_AG_LIN = 0, SP_LIN_RS = 1, SP_LIN_RS_NORM = 2, SP_AG_LIN_GELU = 3, SP_AG_DGRAD = 4,
  SP_AG_DGRAD8 = 5, SP_AG_DGRAD8_DBIAS = 6, SP_AG_DGRAD_DGELU = 7
};

static int sp_is_ag(int which) {
  return which == SP_AG_LIN || which == SP_AG_LIN_GELU;
}
static int sp_is_bwd(int which) {
  return which == SP_AG_DGRAD || which == SP_AG_DGRAD8 || which == SP_AG_DGRAD8_DBIAS ||
         which == SP_AG_DGRAD_DGELU;
}
/* The group's Linear: after the all-gather, or after the GELU of
 * allgather+dgrad+dgelu [GELU, LINEAR, REDUCE_SCATTER] */
static size_t sp_lin(size_t first, int which) {
  return first + (sp_is_ag(which) || which == SP_AG_DGRAD_DGELU ? 1 : 0);
}
/* linear+reduce_scatter+add+rmsnorm: the operations after the Linear */
enum { N_RS = 1, N_ADD = 2, N_MAKE = 3, N_NORM = 4, N_NOPS = 5 };

/* One place of a pattern, as the predicate and the executor read it. */
struct sp_place {
  struct tecomm_comm *c;
  const struct tecomm_op_params *p;   /* the collective's */
  struct tecore_op_info lin;
  size_t rows, k, m;                   /* one rank's rows; the Linear's in and out features */
  tecore_dtype_t dt;
};

static tecore_result_t core_of(tecomm_result_t r) {
  return (tecore_result_t)te_result_to_core((int)r);
}

/* The collective and the Linear of the group at first. */
static int sp_find(const tecore_seq_t *seq, size_t first, int which, struct sp_place *pl) {
  struct tecore_op_info coll;
  const int ag = sp_is_ag(which);
  const size_t lin = sp_lin(first, which);
  if (tecore_seq_op(seq, ag ? first : lin + 1, &coll) != TECORE_SUCCESS ||
      tecore_seq_op(seq, lin, &pl->lin) != TECORE_SUCCESS || !coll.desc.ctx)
    return 0;
  pl->p = coll.desc.ctx;
  pl->c = pl->p->comm;
  pl->k = pl->lin.in_features;
  pl->m = pl->lin.out_features;
  pl->rows = ag ? coll.in_rows : coll.out_rows;
  /* the activations' dtype, the GEMMs' output (an F32 weight, under
   * TECORE_SEQ_F32_WEIGHTS, is quantized under FP8; outside FP8 neither
   * call takes it) */
  if (tecore_seq_dtype(seq, &pl->dt) != TECORE_SUCCESS) return 0;
  return pl->c != NULL;
}

/* Why this rank's group cannot run overlapped, or NULL. */
static const char *sp_why_not(const tecore_seq_t *seq, size_t lin, int ag,
                              const struct sp_place *pl, const struct tecore_recipe *r) {
  struct tecore_tensor t;
  if (pl->p->flags & TECOMM_OP_NO_FUSION) return "TECOMM_OP_NO_FUSION";
  if (!tecore_tunable_int(&tc_tun_sp_overlap)) return "TECOMM_SP_OVERLAP=0";
  if (pl->dt != TECORE_DTYPE_BF16 && pl->dt != TECORE_DTYPE_F16)
    return "the sequence is not BF16 or F16";
  const int f8 = r && tecore_seq_fp8_input(seq, lin, &t) == TECORE_SUCCESS;
  if (f8 && r->kind != TECORE_RECIPE_DELAYED)
    return "the Linear runs in FP8 under current or block scaling (delayed only)";
  if (!f8 && pl->lin.param[0].dtype != pl->dt)
    return "the Linear's weight is not of the sequence's dtype (F32 weights: only in FP8)";
  if (pl->lin.desc.bias && pl->lin.param[1].dtype != pl->dt)
    return "the Linear's bias is not of the sequence's dtype";
  if (pl->c->nranks < 2) return "one rank";
  struct tc_ov_shape sh = {.rows = pl->rows, .n = pl->m, .k = pl->k,
                           .dtype = f8 ? TECORE_DTYPE_E4M3 : pl->dt,
                           .d_dtype = pl->dt, .fn = sp_fn};
  /* the scales the check wants set: the input's stands for both here (the
   * weight's is of the same state, aligned alike; the executor passes
   * each its own) */
  if (f8) sh.a_scale_inv = sh.b_scale_inv = t.scale_inv;
  if (tc_ov_check_shape(&sh) != TECOMM_SUCCESS || tc_ov_check_level(pl->c, sp_fn) != TECOMM_SUCCESS)
    return tecomm_last_error();
  return NULL;
}

/* 1 when every rank's ok is 1 (a host exchange over the communicator). */
static int sp_agree(struct tecomm_comm *c, int ok) {
  int32_t me = ok, all[TC_AR_MAX_RANKS];
  if (c->nranks > TC_AR_MAX_RANKS) return 0;   /* every rank: no IPC level for it */
  if (c->xchg->allgather(c->xchg, &me, all, sizeof me) != TECOMM_SUCCESS) return 0;
  for (int i = 0; i < c->nranks; i++) ok &= all[i] != 0;
  return ok;
}

/* A symmetric buffer of at least bytes in *buf (grown by powers of two
 * from 1 MiB; collective: every rank grows alike, at plan time). */
static tecomm_result_t sp_grow(struct tecomm_comm *c, tecore_devptr_t *buf, size_t *have,
                               size_t bytes) {
  if (*have >= bytes) return TECOMM_SUCCESS;
  size_t want = (size_t)1 << 20;
  while (want < bytes) want *= 2;
  tecore_devptr_t p = 0;
  TC_CHECK(tecomm_mem_alloc(c, want, &p));
  *buf = p;   /* the old one stays in the pool: a captured graph may name it */
  *have = want;
  return TECOMM_SUCCESS;
}

/* What the calls need, made now, outside any capture: the symmetric
 * buffer and the overlap state (side stream, events, staging). */
static tecomm_result_t sp_prepare(struct tecomm_comm *c, int which, const struct sp_place *pl) {
  const size_t es = tecore_dtype_size(pl->dt), n = (size_t)c->nranks;
  struct tc_ov *ov;
  const int bwd = sp_is_bwd(which);
  if (sp_is_ag(which) || bwd) {
    /* the shard's rows (under FP8 its codes, half as many bytes); the
     * backward's: the shard of the output's gradient */
    const size_t cols = bwd ? pl->m : pl->k;
    TC_CHECK(sp_grow(c, &c->sp_stage, &c->sp_stage_bytes, pl->rows * cols * es));
    return tc_ov_get(c, 0, 0, sp_fn, &ov);
  }
  TC_CHECK(sp_grow(c, &c->sp_parts, &c->sp_parts_bytes, n * pl->rows * pl->m * es));
  return tc_ov_get(c, (n - 1) * pl->rows * pl->m * es, 0, sp_fn, &ov);
}

/* The norm of linear+reduce_scatter+add+rmsnorm: the fused fold has no
 * zero-centered gamma, and writes the norm's output in the sequence's
 * dtype only (an FP8 Linear after it quantizes it as ever). */
static const char *sp_norm_why_not(const tecore_seq_t *seq, size_t first) {
  struct tecore_op_info norm;
  if (tecore_seq_op(seq, first + N_NORM, &norm) != TECORE_SUCCESS) return "no norm";
  return norm.desc.norm_flags ? "the RMSNorm's gamma is zero-centered" : NULL;
}

/* The GELU of allgather+linear+gelu in the GEMM's epilogue (the
 * sequence's choice of epilogues is TECORE_FUSION_GELU_EPILOGUE's). */
static const char *sp_gelu_why_not(const struct sp_place *pl) {
  return pl->m % 8 ? "the Linear's out features are not a multiple of 8 (the aux's rows)" : NULL;
}

/* allgather+dgrad: the GEMM's shape, a 16-bit Linear's with the weight
 * as it lies ([out][in]: TECOMM_AG_GEMM_B_KN), an FP8 one's (delayed
 * scaling: sp_why_not) on E5M2 codes of the gradient by the weight's
 * transposed E4M3 codes. */
static const char *sp_dgrad_why_not(const tecore_seq_t *seq, size_t lin,
                                    const struct sp_place *pl, const struct tecore_recipe *r) {
  struct tecore_tensor t;
  const int f8 = r && tecore_seq_fp8_input(seq, lin, &t) == TECORE_SUCCESS;
  tecore_clear_error();
  struct tc_ov_shape sh = {.rows = pl->rows, .n = pl->k, .k = pl->m, .dtype = pl->dt,
                           .d_dtype = pl->dt, .b_kn = !f8, .fn = sp_fn};
  if (f8) {
    /* the input's scale stands for both (the executor passes each its own) */
    sh.dtype = TECORE_DTYPE_E4M3, sh.grad8 = 1;
    sh.a_scale_inv = sh.b_scale_inv = t.scale_inv;
  }
  return tc_ov_check_shape(&sh) != TECOMM_SUCCESS ? tecomm_last_error() : NULL;
}

/* allgather+dgrad8 (without a bias on any rank) and allgather+dgrad8+dbias
 * (with one on some rank; sp_applies has the ranks agree which): that, on
 * a Linear running in FP8, whose gradient's codes are gathered as they
 * are.  The 16-bit rows are then not moved: a bias's gradient is summed
 * from each rank's own rows. */
static const char *sp_dgrad8_why_not(const tecore_seq_t *seq, size_t lin,
                                     const struct sp_place *pl, const struct tecore_recipe *r) {
  struct tecore_tensor t;
  if (!r || tecore_seq_fp8_input(seq, lin, &t) != TECORE_SUCCESS) {
    tecore_clear_error();
    return "the Linear does not run in FP8";
  }
  return sp_dgrad_why_not(seq, lin, pl, r);
}

/* allgather+dgrad+dgelu: that on a 16-bit Linear after a GELU, the
 * GELU's backward in the GEMM's dGELU epilogue (the pattern says
 * TECORE_FUSION_GELU_EPILOGUE: planned where libtecore's dgrad+dgelu would
 * be).  An FP8 Linear's gradient goes to the GELU's dgelu+cast_transpose
 * instead. */
static const char *sp_dgelu_why_not(const tecore_seq_t *seq, size_t lin,
                                    const struct sp_place *pl, const struct tecore_recipe *r) {
  struct tecore_tensor t;
  if (r && tecore_seq_fp8_input(seq, lin, &t) == TECORE_SUCCESS)
    return "the Linear runs in FP8 (the GELU's backward quantizes for the Linear before)";
  tecore_clear_error();
  if (pl->k % 8) return "the Linear's in features are not a multiple of 8 (the aux's rows)";
  return sp_dgrad_why_not(seq, lin, pl, r);
}

static int sp_applies(const tecore_seq_t *seq, size_t first, const struct tecore_recipe *r,
                      void *ctx) {
  const int which = (int)(uintptr_t)ctx, ag = sp_is_ag(which);
  struct sp_place pl;
  if (!sp_find(seq, first, which, &pl)) return 0;
  const size_t lin = sp_lin(first, which);
  const char *why = sp_why_not(seq, lin, ag, &pl, r);
  if (!why && which == SP_LIN_RS_NORM) why = sp_norm_why_not(seq, first);
  if (!why && which == SP_AG_LIN_GELU) why = sp_gelu_why_not(&pl);
  if (!why && which == SP_AG_DGRAD) why = sp_dgrad_why_not(seq, lin, &pl, r);
  if (!why && which == SP_AG_DGRAD_DGELU) why = sp_dgelu_why_not(seq, lin, &pl, r);
  const int dg8 = which == SP_AG_DGRAD8 || which == SP_AG_DGRAD8_DBIAS;
  if (!why && dg8) why = sp_dgrad8_why_not(seq, lin, &pl, r);
  int ok = sp_agree(pl.c, why == NULL);
  /* the two differ in whether some rank has the bias (then every rank
   * sums its rows' share of its gradient) */
  if (ok && dg8) {
    const int none = sp_agree(pl.c, !pl.lin.desc.bias);
    if (none != (which == SP_AG_DGRAD8))
      why = none ? "no rank's Linear has a bias" : "a rank's Linear has a bias", ok = 0;
  }
  if (ok && sp_prepare(pl.c, which, &pl) != TECOMM_SUCCESS)
    why = tecomm_last_error(), ok = 0;
  if (!ok)
    TC_INFO("%s: op %zu runs apart from its Linear: %s", sp_fn, first,
            why ? why : "a peer declines");
  return ok;
}

/* ---- the executors ---------------------------------------------------------------------- */

static tecore_result_t sp_place_of(const struct tecore_seq_exec *x, int which,
                                   struct sp_place *pl) {
  if (sp_find(x->seq, x->first, which, pl)) return TECORE_SUCCESS;
  return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: op %zu is not the planned group", sp_fn,
                        x->first));
}

/* The Linear's bias (the sequence's dtype, as the weight), or 0. */
static tecore_devptr_t sp_bias(const struct sp_place *pl) {
  return pl->lin.desc.bias ? pl->lin.param[1].data : 0;
}

/* FP8: this rank's shard src ([rows][cols] of the sequence's dtype)
 * quantized into the staging buffer with T's scale (the Linear's input,
 * E4M3, or its output gradient, E5M2), |src| max-accumulated into T's
 * amax; the codes gathered into T's rows as they land and multiplied
 * (a's other fields the caller's); then the amax reduced (MAX) over the
 * ranks, whose amaxes were equal before the call (every call ends so),
 * as ZeRO-3's FP8 gather does: the codes and amax of quantizing the
 * gathered rows whole, at half the bytes of the rows. */
static tecore_result_t ag_codes_gather(const struct tecore_seq_exec *x, const struct sp_place *pl,
                                       const struct tecore_tensor *T,
                                       struct tecomm_ag_gemm_args *a);

/* The shard src as a tensor, and T's FP8 view of it: [rows][cols], the
 * codes into the staging buffer, no columnwise copy. */
static tecore_result_t ag_shard(const struct sp_place *pl, tecore_devptr_t src, size_t cols,
                                const struct tecore_tensor *T, struct tecore_tensor *in,
                                struct tecore_tensor *y) {
  const size_t sh[2] = {pl->rows, cols};
  *y = *T;
  y->ndim = 2, y->shape[0] = pl->rows, y->shape[1] = cols;
  y->data = pl->c->sp_stage;
  y->columnwise_data = 0, y->columnwise_scale_inv = 0;
  return tecore_tensor_init(in, pl->dt, 2, sh, src);
}

static tecore_result_t ag_codes(const struct tecore_seq_exec *x, const struct sp_place *pl,
                                tecore_devptr_t src, size_t cols, const struct tecore_tensor *T,
                                struct tecomm_ag_gemm_args *a) {
  struct tecore_tensor in, y;
  tecore_result_t e = ag_shard(pl, src, cols, T, &in, &y);
  if (e == TECORE_SUCCESS) e = tecore_quantize(&in, &y, 0, x->stream);
  return e == TECORE_SUCCESS ? ag_codes_gather(x, pl, T, a) : e;
}

/* ag_codes' second half: the staged codes gathered into T's rows and
 * multiplied as they land, then the amax reduced. */
static tecore_result_t ag_codes_gather(const struct tecore_seq_exec *x, const struct sp_place *pl,
                                       const struct tecore_tensor *T,
                                       struct tecomm_ag_gemm_args *a) {
  a->a = pl->c->sp_stage, a->a_all = T->data, a->dtype = T->dtype;
  a->a_scale_inv = T->scale_inv;
  tecomm_result_t r = tecomm_ag_gemm(pl->c, a, x->stream);
  if (r == TECOMM_SUCCESS && T->amax)
    r = tecomm_allreduce(pl->c, T->amax, T->amax, 1, TECORE_DTYPE_F32, TECOMM_MAX, x->stream);
  return core_of(r);
}

/* The shard into the staging buffer (the peers pull it from there), then
 * the gathered rows multiplied as they land into d (and aux, the GELU's
 * pre-activation, when set); under FP8 the shard's codes instead
 * (ag_codes; act[1] is then not written: INPUT_FP8_ONLY). */
static tecore_result_t ag_lin_call(const struct tecore_seq_exec *x, tecore_devptr_t d,
                                   tecore_devptr_t aux) {
  struct sp_place pl;
  tecore_result_t e = sp_place_of(x, SP_AG_LIN, &pl);
  if (e != TECORE_SUCCESS) return e;
  struct tecomm_ag_gemm_args a = {
      .a = pl.c->sp_stage, .a_all = x->act[1].data, .b = pl.lin.param[0].data, .d = d,
      .rows = pl.rows, .n = pl.m, .k = pl.k, .dtype = pl.dt, .d_dtype = pl.dt,
      .bias = sp_bias(&pl), .gelu_aux = aux};
  /* FP8 (delayed scaling, the predicate's condition): the weight's codes
   * as the Linear makes them, the input's made here (the plan counts them
   * written: TECORE_FUSION_QUANTIZES_INPUT) */
  struct tecore_tensor A, W;
  if (x->recipe && tecore_seq_fp8_input(x->seq, x->first + 1, &A) == TECORE_SUCCESS) {
    e = tecore_seq_linear_fp8_operands(x->seq, x->first + 1, NULL, x->noop_flag, x->stream, &A,
                                       &W);
    if (e != TECORE_SUCCESS) return e;
    a.b = W.data, a.b_scale_inv = W.scale_inv;
    return ag_codes(x, &pl, x->act[0].data, pl.k, &A, &a);
  }
  tecore_clear_error();
  e = tecore_memcpy_async(pl.c->sp_stage, x->act[0].data,
                          pl.rows * pl.k * tecore_dtype_size(pl.dt), x->stream);
  return e == TECORE_SUCCESS ? core_of(tecomm_ag_gemm(pl.c, &a, x->stream)) : e;
}

static tecore_result_t ag_lin_run(const struct tecore_seq_exec *x) {
  return ag_lin_call(x, x->act[2].data, 0);
}

static tecore_result_t ag_lin_gelu_run(const struct tecore_seq_exec *x) {
  return ag_lin_call(x, x->act[3].data, x->act[2].data);
}

/* The GEMM's operands of linear+reduce_scatter[+...] into a: the
 * Linear's input and weight, or under FP8 (delayed scaling, the
 * predicate's condition) their E4M3 copies, quantized now where the
 * plain Linear would quantize them (libtecore's own code, so the same
 * codes, scales and amaxes; a group before may have written the input's
 * codes and left act[0] unwritten). */
static tecore_result_t lin_rs_operands(const struct tecore_seq_exec *x, const struct sp_place *pl,
                                       struct tecomm_gemm_rs_args *a) {
  struct tecore_tensor A, W;
  a->a = x->act[0].data, a->b = pl->lin.param[0].data, a->dtype = pl->dt;
  if (!x->recipe || tecore_seq_fp8_input(x->seq, x->first, &A) != TECORE_SUCCESS) {
    tecore_clear_error();
    return TECORE_SUCCESS;
  }
  tecore_result_t e = tecore_seq_linear_fp8_operands(x->seq, x->first, &x->act[0], x->noop_flag,
                                                     x->stream, &A, &W);
  if (e != TECORE_SUCCESS) return e;
  a->a = A.data, a->b = W.data, a->dtype = TECORE_DTYPE_E4M3;
  a->a_scale_inv = A.scale_inv, a->b_scale_inv = W.scale_inv;
  return TECORE_SUCCESS;
}

/* The products into the symmetric partials, this rank's rows folded in
 * rank order (the bits do not depend on timing). */
static tecore_result_t lin_rs_run(const struct tecore_seq_exec *x) {
  struct sp_place pl;
  tecore_result_t e = sp_place_of(x, SP_LIN_RS, &pl);
  if (e != TECORE_SUCCESS) return e;
  struct tecomm_gemm_rs_args a = {
      .d = x->act[2].data, .partials = pl.c->sp_parts, .rows = pl.rows, .n = pl.m, .k = pl.k,
      .d_dtype = pl.dt, .bias = sp_bias(&pl)};
  e = lin_rs_operands(x, &pl, &a);
  if (e != TECORE_SUCCESS) return e;
  return core_of(tecomm_gemm_rs(pl.c, &a, x->stream));
}

/* The same, the fold fused with the residual add and the next RMSNorm
 * (tecomm_gemm_rs's norm, as fuser_ops.c's allreduce+add+rmsnorm): the
 * bare sum (boundary N_RS + 1) is not written, nothing reads it; the
 * kernel writes the norm's rsigma, which libtecore's rmsnorm_bwd_add
 * reads in the backward. */
static tecore_result_t lin_rs_norm_run(const struct tecore_seq_exec *x) {
  struct sp_place pl;
  struct tecore_op_info add, norm;
  tecore_result_t e = sp_place_of(x, SP_LIN_RS, &pl);
  if (e == TECORE_SUCCESS) e = tecore_seq_op(x->seq, x->first + N_ADD, &add);
  if (e == TECORE_SUCCESS) e = tecore_seq_op(x->seq, x->first + N_NORM, &norm);
  if (e != TECORE_SUCCESS) return e;
  const struct tecomm_rs_add_rmsnorm nm = {
      .residual_in = add.extra_value.data, .residual_out = x->act[N_ADD + 1].data,
      .gamma = norm.param[0].data, .eps = norm.desc.epsilon, .out = x->act[N_NOPS].data,
      .rsigma = norm.saved[0].data};
  struct tecomm_gemm_rs_args a = {
      .partials = pl.c->sp_parts, .rows = pl.rows, .n = pl.m, .k = pl.k, .d_dtype = pl.dt,
      .norm = &nm, .bias = sp_bias(&pl)};
  e = lin_rs_operands(x, &pl, &a);
  if (e != TECORE_SUCCESS) return e;
  return core_of(tecomm_gemm_rs(pl.c, &a, x->stream));
}

/* The 16-bit data-gradient GEMM's call: the gathered output gradient into
 * a_all, times the weight as it lies, into d. */
static struct tecomm_ag_gemm_args dgrad_args(const struct sp_place *pl, tecore_devptr_t a_all,
                                             tecore_devptr_t d) {
  return (struct tecomm_ag_gemm_args){
      .a = pl->c->sp_stage, .a_all = a_all, .b = pl->lin.param[0].data, .d = d,
      .rows = pl->rows, .n = pl->k, .k = pl->m, .dtype = pl->dt, .d_dtype = pl->dt,
      .flags = TECOMM_AG_GEMM_B_KN};
}

/* This rank's gradient rows (shard, [rows][m]) into the staging buffer,
 * then the call. */
static tecore_result_t dgrad_gather(const struct tecore_seq_exec *x, const struct sp_place *pl,
                                    const struct tecomm_ag_gemm_args *a, tecore_devptr_t shard) {
  tecore_result_t e = tecore_memcpy_async(pl->c->sp_stage, shard,
                                          pl->rows * pl->m * tecore_dtype_size(pl->dt),
                                          x->stream);
  return e == TECORE_SUCCESS ? core_of(tecomm_ag_gemm(pl->c, a, x->stream)) : e;
}

/* The backward of a row-parallel Linear and its reduce-scatter: the
 * gradient's shard into the staging buffer, gathered into grad[1] (the
 * partial product's gradient, which the plain reduce-scatter's backward
 * writes) while the gathered rows' data gradient multiplies as they land
 * (dx = dy W, the weight as it lies), then the weight and bias gradients
 * from the gathered rows as the Linear's own backward makes them
 * (tecore_seq_linear_wgrad): the plain path's kernels on the same bytes.
 * Under FP8 each rank's rows are quantized as they land into the
 * gradient's E5M2 codes (tecomm_ag_gemm's a8: with the recipe's scale,
 * the amax of every row seen on every rank: no agreement needed), which
 * multiply the weight's transposed codes, and the weight gradient takes
 * those codes (tecore_seq_linear_fp8_dgrad_operands). */
static tecore_result_t ag_dgrad_run(const struct tecore_seq_exec *x) {
  struct sp_place pl;
  tecore_result_t e = sp_place_of(x, SP_AG_DGRAD, &pl);
  if (e != TECORE_SUCCESS) return e;
  struct tecomm_ag_gemm_args a = dgrad_args(&pl, x->grad[1].data, x->grad[0].data);
  struct tecore_tensor dy8, w;
  if (x->recipe && tecore_seq_fp8_input(x->seq, x->first, &w) == TECORE_SUCCESS) {
    e = tecore_seq_linear_fp8_dgrad_operands(x->seq, x->first, x->stream, &dy8, &w);
    if (e != TECORE_SUCCESS) return e;
    a.b = w.columnwise_data, a.b_scale_inv = w.scale_inv, a.a8 = &dy8, a.flags = 0;
  }
  tecore_clear_error();
  e = dgrad_gather(x, &pl, &a, x->grad[2].data);
  if (e != TECORE_SUCCESS) return e;
  /* under FP8 the input's codes, not its 16-bit rows (which a group
   * before may leave unwritten) */
  return tecore_seq_linear_wgrad(x->seq, x->first, a.a8 ? NULL : &x->act[0], &x->grad[1],
                                 x->stream);
}

/* allgather+dgrad+dgelu [GELU, LINEAR, REDUCE_SCATTER], 16-bit: as
 * allgather+dgrad, the gathered rows (grad[2]) multiplied by the weight as
 * they land, each chunk's product times gelu' of the GELU's input (act[0],
 * the pre-activation the forward saved) in the GEMM's epilogue into the
 * GELU's input gradient (grad[0]): the Linear's input gradient (grad[1])
 * is never written.  Then the Linear's weight gradient from the gathered
 * rows.  The Linear before the GELU sums its bias's gradient from grad[0]
 * itself (libtecore's dgrad+dgelu+dbias sums it in the epilogue, before
 * rounding: another rounding of the same sums). */
static tecore_result_t ag_dgrad_dgelu_run(const struct tecore_seq_exec *x) {
  struct sp_place pl;
  tecore_result_t e = sp_place_of(x, SP_AG_DGRAD_DGELU, &pl);
  if (e != TECORE_SUCCESS) return e;
  struct tecomm_ag_gemm_args a = dgrad_args(&pl, x->grad[2].data, x->grad[0].data);
  a.gelu_aux = x->act[0].data;
  a.flags |= TECOMM_AG_GEMM_DGELU;
  e = dgrad_gather(x, &pl, &a, x->grad[3].data);
  if (e != TECORE_SUCCESS) return e;
  return tecore_seq_linear_wgrad(x->seq, x->first + 1, &x->act[1], &x->grad[2], x->stream);
}

/* allgather+dgrad under FP8 for a Linear without a bias: the gradient's
 * shard quantized by each rank and its E5M2 codes gathered (ag_codes)
 * into the gradient's scratch, half the bytes of the 16-bit rows, while
 * the landed ones multiply the weight's transposed codes.  The 16-bit
 * gathered rows (grad[1]) are not written; the weight gradient reads the
 * codes alone. */
static tecore_result_t ag_dgrad8_run(const struct tecore_seq_exec *x) {
  struct sp_place pl;
  tecore_result_t e = sp_place_of(x, SP_AG_DGRAD8, &pl);
  if (e != TECORE_SUCCESS) return e;
  struct tecore_tensor dy8, w;
  e = tecore_seq_linear_fp8_dgrad_operands(x->seq, x->first, x->stream, &dy8, &w);
  if (e != TECORE_SUCCESS) return e;
  struct tecomm_ag_gemm_args a = {
      .b = w.columnwise_data, .d = x->grad[0].data, .rows = pl.rows, .n = pl.k, .k = pl.m,
      .d_dtype = pl.dt, .b_scale_inv = w.scale_inv};
  e = ag_codes(x, &pl, x->grad[2].data, pl.m, &dy8, &a);
  if (e != TECORE_SUCCESS) return e;
  return tecore_seq_linear_wgrad(x->seq, x->first, NULL, NULL, x->stream);
}

/* allgather+dgrad8+dbias's workspace: the column sums of this rank's
 * gradient rows (F32 [m], summed over the ranks in place), then the
 * cast+dbias's own. */
static size_t sp_dbias_sums_bytes(size_t m) {
  return (m * 4 + 255) / 256 * 256;
}

static tecore_result_t sp_dbias_ws(const tecore_seq_t *seq, size_t first, size_t *bytes,
                                   void *ctx) {
  struct sp_place pl;
  *bytes = 0;
  if (!sp_find(seq, first, (int)(uintptr_t)ctx, &pl)) return TECORE_SUCCESS;
  const size_t sh[2] = {pl.rows, pl.m};
  struct tecore_tensor in;
  size_t ct = 0;
  tecore_result_t e = tecore_tensor_init(&in, pl.dt, 2, sh, 0);
  if (e == TECORE_SUCCESS) e = tecore_cast_transpose_dbias_workspace_size(&in, &ct);
  *bytes = sp_dbias_sums_bytes(pl.m) + ct;
  return e;
}

/* allgather+dgrad8 where some rank's Linear has a bias (te-demo's and
 * tecore_seq_add_transformer's row-parallel Linears: rank 0's alone):
 * each rank quantizes its gradient rows and sums their columns in one
 * pass (cast+dbias), the codes are gathered as allgather+dgrad8 gathers
 * them, the ranks' column sums are summed (allreduce, rank order) and a
 * rank with the bias adds them to its gradient (tecore_seq_linear_bgrad).
 * The bias's gradient sums in another order than the plain path's
 * column sums over the gathered rows (the same value to F32 rounding);
 * everything else is the same bits. */
static tecore_result_t ag_dgrad8_dbias_run(const struct tecore_seq_exec *x) {
  struct sp_place pl;
  tecore_result_t e = sp_place_of(x, SP_AG_DGRAD8_DBIAS, &pl);
  if (e != TECORE_SUCCESS) return e;
  size_t need = 0;
  e = sp_dbias_ws(x->seq, x->first, &need, (void *)(uintptr_t)SP_AG_DGRAD8_DBIAS);
  if (e != TECORE_SUCCESS) return e;
  if (!x->workspace || x->workspace_bytes < need)
    return core_of(TC_ERR(TECOMM_ERR_INVALID, "%s: op %zu: %zu bytes of workspace, %zu needed",
                          sp_fn, x->first, x->workspace_bytes, need));
  struct tecore_tensor dy8, w, in, y, db;
  e = tecore_seq_linear_fp8_dgrad_operands(x->seq, x->first, x->stream, &dy8, &w);
  if (e == TECORE_SUCCESS) e = ag_shard(&pl, x->grad[2].data, pl.m, &dy8, &in, &y);
  const size_t sb = sp_dbias_sums_bytes(pl.m);
  if (e == TECORE_SUCCESS) e = tecore_tensor_init(&db, TECORE_DTYPE_F32, 1, &pl.m, x->workspace);
  if (e == TECORE_SUCCESS)
    e = tecore_cast_transpose_dbias(&in, &y, &db, x->workspace + sb, x->workspace_bytes - sb,
                                    x->stream);
  if (e != TECORE_SUCCESS) return e;
  struct tecomm_ag_gemm_args a = {
      .b = w.columnwise_data, .d = x->grad[0].data, .rows = pl.rows, .n = pl.k, .k = pl.m,
      .d_dtype = pl.dt, .b_scale_inv = w.scale_inv};
  e = ag_codes_gather(x, &pl, &dy8, &a);
  if (e != TECORE_SUCCESS) return e;
  e = core_of(tecomm_allreduce(pl.c, db.data, db.data, pl.m, TECORE_DTYPE_F32, TECOMM_SUM,
                               x->stream));
  if (e == TECORE_SUCCESS && pl.lin.desc.bias)
    e = tecore_seq_linear_bgrad(x->seq, x->first, db.data, x->stream);
  return e == TECORE_SUCCESS ? tecore_seq_linear_wgrad(x->seq, x->first, NULL, NULL, x->stream)
                             : e;
}

/* Above libtecore's Linear+activation epilogues (priority 10-30) where
 * both cover the pass in as many groups. */
const struct tecore_fusion_def tc_sp_fusions[] = {
    {.name = "allgather+linear", .dir = TECORE_SEQ_FORWARD, .nops = 2,
     .kinds = {TECORE_OP_ALLGATHER, TECORE_OP_LINEAR}, .applies = sp_applies,
     .run = ag_lin_run, .ctx = (void *)(uintptr_t)SP_AG_LIN, .priority = 60,
     .flags = TECORE_FUSION_QUANTIZES_INPUT | TECORE_FUSION_INPUT_FP8_ONLY},
    {.name = "allgather+linear+gelu", .dir = TECORE_SEQ_FORWARD, .nops = 3,
     .kinds = {TECORE_OP_ALLGATHER, TECORE_OP_LINEAR, TECORE_OP_GELU}, .applies = sp_applies,
     .run = ag_lin_gelu_run, .ctx = (void *)(uintptr_t)SP_AG_LIN_GELU, .priority = 60,
     .flags = TECORE_FUSION_GELU_EPILOGUE | TECORE_FUSION_QUANTIZES_INPUT |
              TECORE_FUSION_INPUT_FP8_ONLY},
    {.name = "linear+reduce_scatter", .dir = TECORE_SEQ_FORWARD, .nops = 2,
     .kinds = {TECORE_OP_LINEAR, TECORE_OP_REDUCE_SCATTER}, .applies = sp_applies,
     .run = lin_rs_run, .ctx = (void *)(uintptr_t)SP_LIN_RS, .priority = 60},
    {.name = "linear+reduce_scatter+add+rmsnorm", .dir = TECORE_SEQ_FORWARD, .nops = N_NOPS,
     .kinds = {TECORE_OP_LINEAR, TECORE_OP_REDUCE_SCATTER, TECORE_OP_ADD_EXTRA_INPUT,
               TECORE_OP_MAKE_EXTRA_OUTPUT, TECORE_OP_RMSNORM},
     .applies = sp_applies, .run = lin_rs_norm_run,
     .ctx = (void *)(uintptr_t)SP_LIN_RS_NORM, .priority = 60},
    {.name = "allgather+dgrad", .dir = TECORE_SEQ_BACKWARD, .nops = 2,
     .kinds = {TECORE_OP_LINEAR, TECORE_OP_REDUCE_SCATTER}, .applies = sp_applies,
     .run = ag_dgrad_run, .ctx = (void *)(uintptr_t)SP_AG_DGRAD, .priority = 60},
    /* beside libtecore's dgrad+dgelu+dbias [LINEAR, GELU, LINEAR] (priority
     * 20) the two cover an MLP's backward in as many groups: this one's
     * priority takes it, and the gather is overlapped */
    {.name = "allgather+dgrad+dgelu", .dir = TECORE_SEQ_BACKWARD, .nops = 3,
     .kinds = {TECORE_OP_GELU, TECORE_OP_LINEAR, TECORE_OP_REDUCE_SCATTER},
     .applies = sp_applies, .run = ag_dgrad_dgelu_run,
     .ctx = (void *)(uintptr_t)SP_AG_DGRAD_DGELU, .priority = 60,
     .flags = TECORE_FUSION_GELU_EPILOGUE},
    /* asked first: where it applies, the codes move instead of the rows */
    {.name = "allgather+dgrad8", .dir = TECORE_SEQ_BACKWARD, .nops = 2,
     .kinds = {TECORE_OP_LINEAR, TECORE_OP_REDUCE_SCATTER}, .applies = sp_applies,
     .run = ag_dgrad8_run, .ctx = (void *)(uintptr_t)SP_AG_DGRAD8, .priority = 61},
    {.name = "allgather+dgrad8+dbias", .dir = TECORE_SEQ_BACKWARD, .nops = 2,
     .kinds = {TECORE_OP_LINEAR, TECORE_OP_REDUCE_SCATTER}, .applies = sp_applies,
     .run = ag_dgrad8_dbias_run, .ctx = (void *)(uintptr_t)SP_AG_DGRAD8_DBIAS, .priority = 61,
     .workspace = sp_dbias_ws},
};
const size_t tc_sp_nfusions = sizeof tc_sp_fusions / sizeof tc_sp_fusions[0];
