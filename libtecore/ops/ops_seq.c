/* SPDX-License-Identifier: Apache-2.0 */
/* ops_seq.c -- a fuser sequence's life: create, add operations (shape
 * inference and checks), build (every device buffer, parameter
 * initialization), recipe changes, zero_grad, scale updates, destroy, and
 * the accessors (params, op info, residual slots, memory).
 *
 * Memory.  Everything is allocated by build (and, for FP8 buffers, by the
 * first recipe that needs them; te_seq_alloc, ops_store.c) and freed by
 * destroy; forward and backward never allocate, so they can be captured
 * into graphs. */
#include "ops/ops_internal.h"
#include "elementwise/elementwise_internal.h"
#include "gemm/gemm_problem.h"
#include "common/convert.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TE_PARAM_INT_RENAMED(ops_gemm_workspace_mb, "TECORE_OPS_GEMM_WORKSPACE_MB",
                     "TE_OPS_GEMM_WORKSPACE_MB", 32, 0, 4096,
                     "MiB of GEMM workspace each fuser sequence owns on the cuda backend (so "
                     "captured graphs of a sequence never share the per-stream workspace); 0: the "
                     "per-stream internal one")

/* Inference sequences: every Linear's FP8 weight copy is stale (new
 * values, new scales, or none), so the next forward quantizes it. */
static void w8_invalidate(tecore_seq_t *s) {
  for (size_t i = 0; i < s->nops; i++) s->ops[i].w8_cached = 0;
}

/* ---- create / destroy ----------------------------------------------------------------- */

static int float_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 || d == TECORE_DTYPE_F16 || d == TECORE_DTYPE_BF16;
}

TE_EXPORT tecore_result_t tecore_seq_create(const struct tecore_seq_config *cfg, tecore_seq_t **seq) {
  static const char fn[] = "tecore_seq_create";
  TE_ARG(seq, "%s: seq is NULL", fn);
  *seq = NULL;
  TE_ARG(cfg, "%s: cfg is NULL", fn);
  TE_ARG(cfg->rows >= 1, "%s: cfg->rows is 0 (the tokens of a microbatch, >= 1)", fn);
  TE_ARG(cfg->features >= 1, "%s: cfg->features is 0 (the input's last dimension, >= 1)", fn);
  TE_ARG(cfg->rows <= ((size_t)1 << 40) / cfg->features,
         "%s: cfg->rows * cfg->features (%zu x %zu) is too large", fn, cfg->rows, cfg->features);
  TE_ARG(float_dtype(cfg->dtype), "%s: cfg->dtype is %s, not f32, f16 or bf16", fn,
         tecore_dtype_name(cfg->dtype));
  TE_ARG((cfg->flags & ~(TECORE_SEQ_NO_FUSION | TECORE_SEQ_NO_GRAD_SHARING |
                         TECORE_SEQ_NO_OVERLAP | TECORE_SEQ_INFERENCE |
                         TECORE_SEQ_F32_WEIGHTS | TECORE_SEQ_DEFER_SAVED |
                         TECORE_SEQ_GRAD_FP8_GIVEN | TECORE_SEQ_BF16_WGRAD |
                         TECORE_SEQ_NO_GELU_EPILOGUE)) == 0,
         "%s: cfg->flags 0x%x has unknown bits (TECORE_SEQ_NO_FUSION 0x%x, "
         "TECORE_SEQ_NO_GRAD_SHARING 0x%x, TECORE_SEQ_NO_OVERLAP 0x%x, "
         "TECORE_SEQ_INFERENCE 0x%x, TECORE_SEQ_F32_WEIGHTS 0x%x, TECORE_SEQ_DEFER_SAVED "
         "0x%x, TECORE_SEQ_GRAD_FP8_GIVEN 0x%x, TECORE_SEQ_BF16_WGRAD 0x%x, "
         "TECORE_SEQ_NO_GELU_EPILOGUE 0x%x)", fn, cfg->flags,
         TECORE_SEQ_NO_FUSION, TECORE_SEQ_NO_GRAD_SHARING, TECORE_SEQ_NO_OVERLAP,
         TECORE_SEQ_INFERENCE, TECORE_SEQ_F32_WEIGHTS, TECORE_SEQ_DEFER_SAVED,
         TECORE_SEQ_GRAD_FP8_GIVEN, TECORE_SEQ_BF16_WGRAD, TECORE_SEQ_NO_GELU_EPILOGUE);
  TE_ARG(!(cfg->flags & TECORE_SEQ_BF16_WGRAD) || cfg->dtype != TECORE_DTYPE_F32,
         "%s: cfg->flags has TECORE_SEQ_BF16_WGRAD, but cfg->dtype is f32: BF16 weight "
         "gradients are for 16-bit sequences", fn);
  tecore_seq_t *s = calloc(1, sizeof *s);
  if (!s) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  s->cfg = *cfg;
  s->defer_op = s->chunk_op = SIZE_MAX;
  for (int i = 0; i < TECORE_SEQ_MAX_SLOTS; i++) s->slot_last[i] = -1;
  if (te_handle_add(s) != 0) {
    free(s);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *seq = s;
  return TECORE_SUCCESS;
}

static void free_state(tecore_seq_t *s) {
  if (!s->have_state) return;
  if (s->st_act.base) (void)tecore_delayed_state_free(&s->st_act);
  if (s->st_w.base) (void)tecore_delayed_state_free(&s->st_w);
  if (s->st_g.base) (void)tecore_delayed_state_free(&s->st_g);
  if (s->st_qkv.base) (void)tecore_delayed_state_free(&s->st_qkv);
  s->have_state = 0;
}

TE_EXPORT tecore_result_t tecore_seq_hold(tecore_seq_t *s, int hold) {
  static const char fn[] = "tecore_seq_hold";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(hold == 0 || hold == 1, "%s: hold is %d, not 0 or 1", fn, hold);
  TE_ARG(!hold || !s->held, "%s: seq %p is already held (by a graphed callable?)", fn,
         (const void *)s);
  TE_ARG(hold || s->held, "%s: seq %p is not held", fn, (const void *)s);
  s->held = hold;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_destroy(tecore_seq_t *s) {
  TE_CHECK(te_seq_arg(s, "tecore_seq_destroy"));
  TE_ARG(!s->held,
         "tecore_seq_destroy: seq %p is held (a graphed callable replays it: destroy that first)",
         (const void *)s);
  /* Queued work may still use the buffers: tecore_mem_free keeps the
   * driver's promise on both backends (the memory goes back after that
   * work).  A free is refused during a capture that forbids it: the first
   * one is the probe, so a refused destroy leaves the sequence whole. */
  tecore_devptr_t *probe = NULL;
  if (s->nallocs) probe = &s->allocs[0].p;
  else if (s->have_state && s->st_act.base) probe = &s->st_act.base;
  if (probe && *probe) {
    tecore_result_t r = tecore_mem_free(*probe);
    if (r != TECORE_SUCCESS) return r;
    *probe = 0;
    if (probe == &s->st_act.base) memset(&s->st_act, 0, sizeof s->st_act);
  }
  tecore_result_t res = TECORE_SUCCESS;
  free_state(s);
  te_overlap_release(s);
  for (size_t i = 0; i < s->nallocs; i++) {
    tecore_result_t r = tecore_mem_free(s->allocs[i].p);
    if (r != TECORE_SUCCESS && res == TECORE_SUCCESS) res = r;
  }
  tecore_result_t gr = te_gregion_close(s);
  if (gr != TECORE_SUCCESS && res == TECORE_SUCCESS) res = gr;
  te_handle_del(s);
  te_plan_free(&s->plan);
  te_rc_free(s);
  free(s->allocs);
  free(s->bnd);
  free(s->ops);
  free(s->pairs);
  free(s);
  return res;
}

/* ---- add ----------------------------------------------------------------------------- */

/* Copies kind k's definition (built in or registered) into op. */
static tecore_result_t find_kind(const tecore_seq_t *s, int k, struct te_op *op, const char *fn) {
  struct te_kind kd;
  if (!te_kind_lookup(k, &kd)) {
    if (k < TECORE_OP_BUILTIN_COUNT_)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                    "%s: desc->kind %s (op %zu): no implementation is registered for this "
                    "communication operation (libtecomm registers it; "
                    "tecore_ops_register_kind)", fn, tecore_op_kind_name(k), s->nops);
    return TE_ERR(TECORE_ERR_INVALID, "%s: desc->kind %d (op %zu) is not registered "
                  "(tecore_ops_register_kind)", fn, k, s->nops);
  }
  op->def = kd.def;
  op->fp8 = kd.fp8;
  if (kd.ctx_bytes) {   /* a parameter struct: copied, the caller's may go */
    TE_ARG(op->d.ctx, "%s: desc->ctx is NULL; %s takes its parameters there (a struct "
           "tecore_op_%s_args, te/ops.h)", fn, kd.def.name, kd.def.name);
    memcpy(&op->prm, op->d.ctx, kd.ctx_bytes);
    op->own_ctx = 1;
  }
  return TECORE_SUCCESS;
}

/* The desc fields the kind does not read must be 0. */
static tecore_result_t check_fields(const struct te_op *op, const char *fn) {
  const struct tecore_op_desc *d = &op->d;
  const char *kn = op->def.name;
  unsigned f = op->def.fields;
  TE_ARG((f & TECORE_OP_FIELD_FEATURES) || d->features == 0, "%s: desc->features is %zu; %s "
         "does not take it (must be 0)", fn, d->features, kn);
  TE_ARG((f & TECORE_OP_FIELD_BIAS) || d->bias == 0, "%s: desc->bias is %d; %s does not take "
         "it (must be 0)", fn, d->bias, kn);
  TE_ARG((f & TECORE_OP_FIELD_EPSILON) || (d->epsilon == 0.0f && d->norm_flags == 0),
         "%s: desc->epsilon / norm_flags are set; %s does not take them (must be 0)", fn, kn);
  TE_ARG((f & TECORE_OP_FIELD_SCALE) || d->scale == 0.0f, "%s: desc->scale is %g; %s does not "
         "take it (must be 0)", fn, (double)d->scale, kn);
  TE_ARG((f & TECORE_OP_FIELD_SLOT) || d->slot == 0, "%s: desc->slot is %d; %s does not take it "
         "(must be 0)", fn, d->slot, kn);
  TE_ARG((f & TECORE_OP_FIELD_CTX) || d->ctx == NULL, "%s: desc->ctx is set; %s does not take "
         "it (must be NULL)", fn, kn);
  return TECORE_SUCCESS;
}

/* Runs the kind's shape function on op's input shape and checks what it
 * gives: the output shape, the parameters and the saved vectors. */
static tecore_result_t op_shape(const tecore_seq_t *s, struct te_op *op, const char *fn) {
  size_t n = s->nops;
  struct tecore_op_shape sh;
  memset(&sh, 0, sizeof sh);
  op->in_rows = sh.in_rows = sh.out_rows = n ? s->ops[n - 1].out_rows : s->cfg.rows;
  op->in_cols = sh.in_features = sh.out_features = n ? s->ops[n - 1].out_cols : s->cfg.features;
  if (op->def.shape) {
    tecore_result_t res = op->def.shape(&op->d, &sh, op->def.ctx);
    if (res != TECORE_SUCCESS) {
      te_error_hop(fn, __FILE__, __LINE__);
      return res;
    }
  }
  const char *kn = op->def.name;
  TE_ARG(sh.out_rows >= 1 && sh.out_features >= 1, "%s: kind %s: its shape function gave "
         "[%zu][%zu]", fn, kn, sh.out_rows, sh.out_features);
  TE_ARG(sh.out_rows <= ((size_t)1 << 40) / sh.out_features, "%s: kind %s: its output "
         "[%zu][%zu] is too large", fn, kn, sh.out_rows, sh.out_features);
  TE_ARG(!(op->def.flags & TECORE_OP_ALIAS_FORWARD) ||
         sh.out_rows * sh.out_features == op->in_rows * op->in_cols,
         "%s: kind %s aliases its input but its shape function gave [%zu][%zu] for [%zu][%zu]",
         fn, kn, sh.out_rows, sh.out_features, op->in_rows, op->in_cols);
  TE_ARG(sh.nparams <= TECORE_OP_MAX_PARAMS && sh.nsaved <= TECORE_OP_MAX_SAVED,
         "%s: kind %s: its shape function gave %zu parameters and %zu saved vectors (at most "
         "%d and %d)", fn, kn, sh.nparams, sh.nsaved, TECORE_OP_MAX_PARAMS, TECORE_OP_MAX_SAVED);
  for (size_t p = 0; p < sh.nparams; p++) {
    const struct tecore_op_param_def *pd = &sh.param[p];
    TE_ARG(pd->name && pd->rows >= 1 && pd->cols >= 1 &&
           pd->rows <= ((size_t)1 << 40) / pd->cols && pd->init >= TECORE_OP_INIT_ZERO &&
           pd->init <= TECORE_OP_INIT_UNIFORM && isfinite(pd->bound),
           "%s: kind %s: parameter %zu from its shape function (%s [%zu][%zu], init %d) is "
           "not valid", fn, kn, p, pd->name ? pd->name : "(no name)", pd->rows, pd->cols,
           (int)pd->init);
    op->pdef[p] = *pd;
    op->plen[p] = pd->rows * pd->cols;
  }
  op->out_rows = sh.out_rows;
  op->out_cols = sh.out_features;
  op->nparams = sh.nparams;
  op->nsaved = sh.nsaved;
  return TECORE_SUCCESS;
}

/* A slot role's pairing rules: a slot is made, then added once (with one
 * shape), and may then be made again. */
static tecore_result_t check_slot(const tecore_seq_t *s, const struct te_op *op, const char *fn) {
  unsigned role = op->def.flags & (TECORE_OP_SLOT_MAKE | TECORE_OP_SLOT_ADD);
  if (!role) return TECORE_SUCCESS;
  int slot = op->d.slot;
  const char *kn = op->def.name;
  TE_ARG(slot >= 0 && slot < TECORE_SEQ_MAX_SLOTS, "%s: desc->slot is %d, not in 0..%d", fn,
         slot, TECORE_SEQ_MAX_SLOTS - 1);
  /* the slot's latest use: a complete pair (made, then added) frees it */
  static const struct te_slot unused = {.maker = -1, .adder = -1};
  int last = s->slot_last[slot];
  const struct te_slot *sl = last >= 0 ? &s->pairs[last] : &unused;
  if (role == TECORE_OP_SLOT_MAKE) {
    TE_ARG(!(sl->maker >= 0 && sl->adder < 0), "%s: slot %d is already made by op %d and not "
           "added yet", fn, slot, sl->maker);
    TE_ARG(!(sl->maker < 0 && sl->adder >= 0), "%s: slot %d was added by op %d before this "
           "%s: make a slot before adding it", fn, slot, sl->adder, kn);
    return TECORE_SUCCESS;
  }
  TE_ARG(sl->adder < 0, "%s: slot %d is already added by op %d (make it again first to use it "
         "again)", fn, slot, sl->adder);
  if (sl->maker >= 0) {
    const struct te_op *m = &s->ops[sl->maker];
    TE_ARG(m->in_rows == op->in_rows && m->in_cols == op->in_cols,
           "%s: slot %d holds [%zu][%zu] (made by op %d) but this %s's input is [%zu][%zu]", fn,
           slot, m->in_rows, m->in_cols, sl->maker, kn, op->in_rows, op->in_cols);
  }
  return TECORE_SUCCESS;
}

/* Records op n's use of its slot: it completes the slot's open pair (an
 * add after a make) or opens a pair. */
static tecore_result_t bind_slot(tecore_seq_t *s, struct te_op *op, size_t n, const char *fn) {
  unsigned role = op->def.flags & (TECORE_OP_SLOT_MAKE | TECORE_OP_SLOT_ADD);
  op->pair = -1;
  if (!role) return TECORE_SUCCESS;
  int last = s->slot_last[op->d.slot];
  if (role == TECORE_OP_SLOT_ADD && last >= 0 && s->pairs[last].adder < 0) {
    op->pair = last;
  } else {
    if (s->npairs == s->cap_pairs) {
      size_t cap = s->cap_pairs ? 2 * s->cap_pairs : 16;
      struct te_slot *p = realloc(s->pairs, cap * sizeof *p);
      if (!p) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
      s->pairs = p;
      s->cap_pairs = cap;
    }
    op->pair = (int)s->npairs++;
    s->pairs[op->pair] = (struct te_slot){.slot = op->d.slot, .maker = -1, .adder = -1};
    s->slot_last[op->d.slot] = op->pair;
  }
  if (role == TECORE_OP_SLOT_MAKE) s->pairs[op->pair].maker = (int)n;
  else s->pairs[op->pair].adder = (int)n;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_add(tecore_seq_t *s, const struct tecore_op_desc *d,
                                         size_t *index) {
  static const char fn[] = "tecore_seq_add";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(d, "%s: desc is NULL", fn);
  TE_ARG(!s->built, "%s: the sequence is built; operations are added before tecore_seq_build",
         fn);
  TE_ARG(d->kind >= 0 && d->kind < TECORE_OP_KIND_MAX, "%s: desc->kind is %d, not an operation "
         "kind", fn, d->kind);
  struct te_op op;
  memset(&op, 0, sizeof op);
  op.d = *d;
  TE_CHECK(find_kind(s, d->kind, &op, fn));
  TE_CHECK(check_fields(&op, fn));
  TE_CHECK(op_shape(s, &op, fn));
  TE_CHECK(check_slot(s, &op, fn));
  size_t n = s->nops;
  if (n == s->cap) {
    size_t cap = s->cap ? 2 * s->cap : 16;
    struct te_op *p = realloc(s->ops, cap * sizeof *p);
    if (!p) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    s->ops = p;
    s->cap = cap;
  }
  TE_CHECK(bind_slot(s, &op, n, fn));
  if (op.fp8 & TE_KIND_GEMM) op.lin = s->nlinear++;
  s->ops[n] = op;
  s->nops = n + 1;
  if (index) *index = n;
  return TECORE_SUCCESS;
}

/* ---- build ----------------------------------------------------------------------------- */

/* The parameters' initial values come from one splitmix64 generator per
 * sequence, seeded with cfg.seed and advanced by one step a value, in the
 * operations' and parameters' order: drawn on the device
 * (te_init_uniform), each parameter from the state its first value's draw
 * follows. */
static tecore_result_t init_params(tecore_seq_t *s, size_t i, uint64_t *rng,
                                   tecore_stream_t stream) {
  struct te_op *op = &s->ops[i];
  for (size_t p = 0; p < op->nparams; p++) {
    tecore_dtype_t dt = te_param_dtype(s, op, p);
    size_t n = op->plen[p];
    TE_CHECK(te_seq_alloc(s, n * tecore_dtype_size(dt), 1, &op->param[p]));
    /* inference: no backward, no gradient (op->grad[p] stays 0) */
    const tecore_dtype_t gdt = te_grad_dtype(s, op, p);
    if (!te_seq_infer(s)) TE_CHECK(te_gregion_take(s, op, p, &op->grad[p]));
    const struct tecore_op_param_def *pd = &op->pdef[p];
    if (pd->init == TECORE_OP_INIT_UNIFORM) {
      /* an F32 weight starts from the values the sequence's dtype would
       * hold: the same seed, the same model, with or without the flag */
      TE_CHECK(te_init_uniform(op->param[p], dt, n, *rng, pd->bound,
                               dt != s->cfg.dtype ? s->cfg.dtype : TECORE_DTYPE_F32, stream));
      *rng += (uint64_t)n * TE_SPLITMIX_STEP;
    } else {
      TE_CHECK(tecore_fill(op->param[p], dt, n, pd->init == TECORE_OP_INIT_ONE ? 1.0 : 0.0,
                           stream));
    }
    if (op->grad[p])
      TE_CHECK(tecore_memset_d8_async(op->grad[p], 0, n * tecore_dtype_size(gdt), stream));
  }
  for (size_t k = 0; k < op->nsaved; k++)
    TE_CHECK(te_seq_alloc(s, op->in_rows * 4, 0, &op->saved[k]));
  if (op->fp8 & TE_KIND_ATTN) TE_CHECK(te_attn_op_alloc(s, i));
  return TECORE_SUCCESS;
}

static tecore_result_t prepare_fp8(tecore_seq_t *s, tecore_stream_t stream);

/* The boundaries' shapes and aliases (host memory only). */
static tecore_result_t layout_boundaries(tecore_seq_t *s, const char *fn) {
  size_t n = s->nops;
  s->bnd = calloc(n + 1, sizeof *s->bnd);
  if (!s->bnd) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  for (size_t b = 0; b <= n; b++) {
    struct te_bnd *bd = &s->bnd[b];
    bd->rows = b < n ? s->ops[b].in_rows : s->ops[n - 1].out_rows;
    bd->cols = b < n ? s->ops[b].in_cols : s->ops[n - 1].out_cols;
    bd->alias = bd->galias = bd->f8 = -1;
    bd->hp_valid = 1;
  }
  for (size_t i = 0; i < n; i++) {
    unsigned fl = s->ops[i].def.flags;
    if ((fl & TECORE_OP_ALIAS_FORWARD) && i + 1 != n) s->bnd[i + 1].alias = (int)i;
    if ((fl & TECORE_OP_ALIAS_BACKWARD) && i != 0) s->bnd[i].galias = (int)(i + 1);
  }
  return TECORE_SUCCESS;
}

/* The inner boundaries that own storage; the largest shapes (scratch). */
static tecore_result_t alloc_activations(tecore_seq_t *s, size_t *max_rows) {
  size_t n = s->nops, es = tecore_dtype_size(s->cfg.dtype);
  s->max_elems = 0;
  s->max_cols = 0;
  *max_rows = 0;
  for (size_t b = 0; b <= n; b++) {
    struct te_bnd *bd = &s->bnd[b];
    size_t elems = bd->rows * bd->cols;
    if (elems > s->max_elems) s->max_elems = elems;
    if (bd->cols > s->max_cols) s->max_cols = bd->cols;
    if (bd->rows > *max_rows) *max_rows = bd->rows;
    if (b > 0 && b < n && bd->alias < 0) TE_CHECK(te_saved_alloc(s, elems * es, &bd->hp));
  }
  return TECORE_SUCCESS;
}

/* Activation gradients: the slots' own (read after the backward through
 * tecore_seq_extra), the others shared by lifetime once planned; the
 * unwanted dx; the slots' value and gradient buffers, zeroed.  An
 * inference sequence gets the extra inputs' values only. */
static tecore_result_t alloc_grads(tecore_seq_t *s, tecore_stream_t stream) {
  size_t n = s->nops, es = tecore_dtype_size(s->cfg.dtype);
  const int grads = !te_seq_infer(s);
  for (size_t b = 1; b < n && grads; b++) {
    struct te_bnd *bd = &s->bnd[b];
    if (bd->galias >= 0) continue;
    /* a slot's latest pair keeps its gradient (tecore_seq_extra reads it
     * after the backward); an earlier pair's is shared like any other,
     * living until its maker's backward (grad_layout) */
    int slot_grad = 0;
    for (size_t i = 0; i < s->npairs; i++) {
      const struct te_slot *sl = &s->pairs[i];
      if (sl->maker < 0 || sl->adder < 0 || s->slot_last[sl->slot] != (int)i) continue;
      size_t o = (size_t)sl->adder + 1;   /* te_slot_grad's boundary, resolved */
      while (s->bnd[o].galias >= 0) o = (size_t)s->bnd[o].galias;
      if (o == b) slot_grad = 1;
    }
    if (slot_grad || (s->cfg.flags & TECORE_SEQ_NO_GRAD_SHARING))
      TE_CHECK(te_seq_alloc(s, bd->rows * bd->cols * es, 0, &bd->g));
    else
      bd->gshared = 1;
  }
  if (grads) TE_CHECK(te_seq_alloc(s, s->bnd[0].rows * s->bnd[0].cols * es, 0, &s->g0));
  for (size_t i = 0; i < s->npairs; i++) {
    struct te_slot *sl = &s->pairs[i];
    const struct te_op *o = &s->ops[sl->maker >= 0 ? sl->maker : sl->adder];
    size_t bytes = o->in_rows * o->in_cols * es;
    if (sl->maker < 0) TE_CHECK(te_seq_alloc(s, bytes, 0, &sl->value));
    if (grads && (sl->maker < 0 || sl->adder < 0)) {
      TE_CHECK(te_seq_alloc(s, bytes, 0, &sl->grad));
      TE_CHECK(tecore_memset_d8_async(sl->grad, 0, bytes, stream));
    }
    if (sl->maker < 0) TE_CHECK(tecore_memset_d8_async(sl->value, 0, bytes, stream));
  }
  return TECORE_SUCCESS;
}

/* The columnwise FP8 gradient's scratch.  When the last operation is a
 * Linear without bias whose output is more than twice any other Linear's
 * (an LM head's logits), its backward makes the two FP8 copies one after
 * the other in the rowwise buffer (te_linear_bwd), and this one only
 * needs the others' size: at 16384 tokens and a vocabulary of 50304 that
 * is 0.8 GB less.  Else every Linear's size. */
TE_PARAM_INT(ops_dy8_one_copy, "TECORE_OPS_DY8_ONE_COPY", 1, 0, 1,
             "1: an FP8 LM head's gradient (a last Linear without bias, more than twice "
             "any other Linear's output) makes its columnwise and rowwise FP8 copies one "
             "after the other in one buffer (a logits-sized buffer less, one more read of "
             "the gradient); 0: both at once")

TE_PARAM_INT(ops_w8_col_keep, "TECORE_OPS_W8_COL_KEEP", 0, 0, 1,
             "1: a training sequence's forward writes each FP8 Linear's weight both ways and "
             "keeps the columnwise copy for the backward (a copy of every weight more); 0 "
             "(the default): the forward writes the rowwise copy only and the backward makes "
             "the columnwise one, the same bits, right before each dgrad GEMM in one buffer "
             "shared by all Linears")
TE_PARAM_INT(ops_zero_grad_fill, "TECORE_OPS_ZERO_GRAD_FILL", 0, 0, 1,
             "1: tecore_seq_zero_grad fills the parameter gradients with zeros and every "
             "backward adds to them; 0 (the default): queued into a stream capture, it marks "
             "them, and the next backward of that capture writes each one's first "
             "contribution (beta 0, a store), the same values without the fill pass (queued "
             "eagerly it fills)")

static size_t dy8_col_elems(const tecore_seq_t *s) {
  if (!tecore_tunable_int(&ops_dy8_one_copy)) return s->max_elems;
  size_t n = s->nops, other = 16, last = 0;
  for (size_t i = 0; i < n; i++) {
    const struct te_op *o = &s->ops[i];
    if (!(o->fp8 & TE_KIND_GEMM)) continue;
    size_t e = o->out_rows * o->out_cols;
    if (i + 1 == n && !o->d.bias) last = e;
    else if (e > other) other = e;
  }
  return last > 2 * other ? other : s->max_elems;
}

/* The FP8 gradient scratch (dy8_row, dy8_col) and the weights' columnwise
 * scratch (w8_col) of a training sequence with FP8 Linears, sized for
 * this recipe's plan; grown (never shrunk: a graph captured before may
 * read the old buffers, which stay allocated) when a recipe needs more.
 * TECORE_SEQ_GRAD_FP8_GIVEN where the plan lets the last Linear take an
 * FP8 gradient: that gradient's copies are the caller's, so both scratch
 * buffers are sized for the other Linears, and a last Linear larger than
 * them (an LM head) puts its weight's columnwise copy in the caller's
 * columnwise gradient copy (te_w8_in_given). */
static tecore_result_t alloc_grad8(tecore_seq_t *s) {
  s->grad8_given = 0;
  if (!s->fp8_run || !s->nlinear || te_seq_infer(s)) return TECORE_SUCCESS;
  size_t n = s->nops, other = 16;
  for (size_t i = 0; i + 1 < n; i++) {
    const struct te_op *o = &s->ops[i];
    if ((o->fp8 & TE_KIND_GEMM) && o->out_rows * o->out_cols > other)
      other = o->out_rows * o->out_cols;
  }
  size_t row = s->max_elems, col = dy8_col_elems(s);
  if ((s->cfg.flags & TECORE_SEQ_GRAD_FP8_GIVEN) && !te_fusion_named_off("grad_fp8_given") &&
      te_seq_grad8_plan_ok(s, "tecore_seq_build") == TECORE_SUCCESS) {
    s->grad8_given = 1;
    row = col = other;
  }
  tecore_clear_error();
  if (row > s->dy8_row_elems) {
    TE_CHECK(te_seq_alloc(s, row, 0, &s->dy8_row));
    s->dy8_row_elems = row;
  }
  if (col > s->dy8_col_elems || !s->dy8_col) {
    TE_CHECK(te_seq_alloc(s, col, 0, &s->dy8_col));
    s->dy8_col_elems = col;
  }
  if (tecore_tunable_int(&ops_w8_col_keep)) return TECORE_SUCCESS;
  size_t wmax = 0;
  for (size_t i = 0; i < n; i++) {
    const struct te_op *o = &s->ops[i];
    if ((o->fp8 & TE_KIND_GEMM) && o->plen[0] > wmax && !te_w8_in_dy8(s, i) &&
        !te_w8_in_given(s, i))
      wmax = o->plen[0];
  }
  if (wmax > s->w8_col_bytes) {
    TE_CHECK(te_seq_alloc(s, wmax, 0, &s->w8_col));
    s->w8_col_bytes = wmax;
  }
  return TECORE_SUCCESS;
}

/* The scratch the executors share (one stream runs them in order). */
static tecore_result_t alloc_scratch(tecore_seq_t *s, size_t max_rows, tecore_stream_t stream) {
  TE_CHECK(te_seq_alloc(s, 4, 0, &s->one_f32));
  TE_CHECK(tecore_memset_d32_async(s->one_f32, 0x3f800000u, 1, stream));
  s->zeros_rows = max_rows > s->max_cols ? max_rows : s->max_cols;
  TE_CHECK(te_seq_alloc(s, s->zeros_rows * 16 * 2, 0, &s->zeros16));
  TE_CHECK(tecore_memset_d8_async(s->zeros16, 0, s->zeros_rows * 32, stream));
  /* te_bias_grad's thrown-away FP8 output: the largest gradient a bias
   * (a Bias operation, or an F32 sequence's biased Linear) sums */
  size_t bias_elems = 16;
  for (size_t i = 0; i < s->nops; i++) {
    const struct te_op *o = &s->ops[i];
    if (o->d.kind == TECORE_OP_BIAS || (o->d.kind == TECORE_OP_LINEAR && o->d.bias))
      if (o->out_rows * o->out_cols > bias_elems) bias_elems = o->out_rows * o->out_cols;
  }
  TE_CHECK(te_seq_alloc(s, bias_elems, 0, &s->f8_dummy));
  TE_CHECK(te_seq_alloc(s, s->max_cols * 4, 0, &s->dvec));
  TE_CHECK(te_seq_alloc(s, s->max_cols * 4, 0, &s->dvec2));
  TE_CHECK(te_seq_alloc(s, s->max_cols * 4, 0, &s->dvec16));
  TE_CHECK(te_seq_alloc(s, s->max_cols * 4, 0, &s->dvec_tmp));
  TE_CHECK(te_seq_alloc(s, 16, 0, &s->junk_f32));
  return TECORE_SUCCESS;
}

/* The backward workspace (the largest a bias gradient at any boundary or
 * any operation's kind needs) and, on cuda, the sequence's own GEMM
 * workspace. */
static tecore_result_t alloc_workspaces(tecore_seq_t *s, const char *fn) {
  size_t n = s->nops, ws = 0;
  for (size_t b = 0; b <= n; b++) {
    struct tecore_tensor t;
    size_t w = 0;
    te_t2d(&t, s->cfg.dtype, s->bnd[b].rows, s->bnd[b].cols, 0);
    TE_CHECK(tecore_cast_transpose_dbias_workspace_size(&t, &w));
    if (w > ws) ws = w;
  }
  for (size_t i = 0; i < n; i++) {
    const struct te_op *o = &s->ops[i];
    if (!o->def.workspace) continue;
    size_t w = 0;
    /* the kind's ctx as copied: the caller's struct may be gone by now */
    struct tecore_op_desc d = o->d;
    if (o->own_ctx) d.ctx = (void *)&o->prm;
    tecore_result_t res = o->def.workspace(&d, o->in_rows, o->in_cols, &w, o->def.ctx);
    if (res != TECORE_SUCCESS) {
      te_error_hop(fn, __FILE__, __LINE__);
      return res;
    }
    if (w > ws) ws = w;
  }
  s->ws_bytes = ws ? ws : 16;
  TE_CHECK(te_seq_alloc(s, s->ws_bytes, 0, &s->ws));
  tecore_backend_t be = TECORE_BACKEND_NONE;
  TE_CHECK(tecore_backend(&be));
  int64_t mb = tecore_tunable_int(&ops_gemm_workspace_mb);
  if (be == TECORE_BACKEND_CUDA && mb > 0) {   /* Linear and Bias both run GEMMs */
    s->gemm_ws_bytes = (size_t)mb << 20;
    TE_CHECK(te_seq_alloc(s, s->gemm_ws_bytes, 0, &s->gemm_ws));
  }
  s->cws_bytes = te_linear_cws_bytes(s);
  s->cs_op = SIZE_MAX;
  s->kvb_op = SIZE_MAX;
  if (s->cws_bytes) TE_CHECK(te_seq_alloc(s, s->cws_bytes, 0, &s->cws));
  if (s->cws_bytes) TE_CHECK(te_seq_alloc(s, s->max_cols * 4, 0, &s->kvb));
  return TECORE_SUCCESS;
}

/* A failed build: leaves the sequence as before it, freeing what was
 * allocated. */
static void unbuild(tecore_seq_t *s) {
  s->built = 0;
  free_state(s);
  te_overlap_release(s);
  for (size_t i = 0; i < s->nallocs; i++) (void)tecore_mem_free(s->allocs[i].p);
  (void)te_gregion_close(s);
  s->nallocs = 0;
  s->bytes_total = s->bytes_param = 0;
  for (size_t i = 0; i < s->nops; i++) {
    struct te_op *o = &s->ops[i];
    memset(o->param, 0, sizeof o->param);
    memset(o->grad, 0, sizeof o->grad);
    memset(o->saved, 0, sizeof o->saved);
    o->w16 = o->x16 = o->w8_row = o->w8_col = o->w8_srow = o->w8_scol = 0;
    o->w8_ext = 0;
    o->grad_fresh = 0;
    o->lse = o->qkv16 = o->o16 = o->do16 = o->dqkv16 = 0;
    o->rc = 0;
  }
  s->rc_pool = 0;
  s->rc_pool_bytes = 0;
  for (size_t i = 0; i < s->npairs; i++) s->pairs[i].value = s->pairs[i].grad = 0;
  s->dy16 = s->dy8_row = s->dy8_col = s->w8_col = s->gemm_ws = 0;
  s->dy8_srow = s->dy8_scol = s->w8_scol = 0;
  s->dy8_col_elems = s->dy8_row_elems = s->w8_col_bytes = 0;
  s->grad8_given = 0;
  s->gemm_ws_bytes = 0;
  s->cws = 0;
  s->cws_bytes = 0;
  s->kvb = 0;
  s->nfresh = 0;
  te_plan_free(&s->plan);
  free(s->bnd);
  s->bnd = NULL;
}

TE_EXPORT tecore_result_t tecore_seq_build(tecore_seq_t *s, tecore_stream_t stream) {
  static const char fn[] = "tecore_seq_build";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(!s->built, "%s: the sequence is already built", fn);
  TE_ARG(s->nops >= 1, "%s: the sequence has no operations (tecore_seq_add)", fn);
  TE_CHECK(layout_boundaries(s, fn));
  tecore_result_t res = TECORE_SUCCESS;
  uint64_t rng = s->cfg.seed;
  size_t max_rows = 0;
  TE_CHECK_GOTO(te_gregion_open(s, stream), res, fail);
  for (size_t i = 0; i < s->nops; i++) TE_CHECK_GOTO(init_params(s, i, &rng, stream), res, fail);
  TE_CHECK_GOTO(alloc_activations(s, &max_rows), res, fail);
  TE_CHECK_GOTO(alloc_grads(s, stream), res, fail);
  TE_CHECK_GOTO(alloc_scratch(s, max_rows, stream), res, fail);
  TE_CHECK_GOTO(alloc_workspaces(s, fn), res, fail);
  TE_CHECK_GOTO(te_overlap_setup(s), res, fail);
  s->built = 1;
  TE_CHECK_GOTO(prepare_fp8(s, stream), res, fail);
  TE_CHECK_GOTO(tecore_stream_synchronize(stream), res, fail);
  return TECORE_SUCCESS;
fail:
  unbuild(s);
  return res;
}

/* ---- FP8 buffers and plan ---------------------------------------------------------------- */

static tecore_result_t check_fp8_shapes(const tecore_seq_t *s, const char *fn) {
  for (size_t i = 0; i < s->nops; i++) {
    const struct te_op *o = &s->ops[i];
    if (!(o->fp8 & TE_KIND_GEMM)) continue;
    if (o->in_cols % 16 || o->out_cols % 16 || o->in_rows % 16)
      return TE_ERR(TECORE_ERR_INVALID, "%s: op %zu (linear [%zu][%zu] -> [%zu][%zu]): FP8 GEMMs "
                    "need in_features, out_features and rows (tokens, the k of the weight "
                    "gradient) to be multiples of 16", fn, i, o->in_rows, o->in_cols, o->out_rows,
                    o->out_cols);
  }
  return TECORE_SUCCESS;
}

static tecore_result_t make_state(tecore_seq_t *s, tecore_fp8_role_t role, size_t count,
                                  tecore_stream_t stream, struct tecore_delayed_state *st) {
  memset(st, 0, sizeof *st);
  if (count == 0) return TECORE_SUCCESS;
  /* the delayed state is the storage of every per-tensor mode: current
   * scaling uses its amax, scale and scale_inv entries too */
  struct tecore_recipe r = s->recipe;
  r.kind = TECORE_RECIPE_DELAYED;
  if (s->recipe.kind != TECORE_RECIPE_DELAYED) {
    r.history_len = 1;
    r.margin = 0;
    r.amax_algo = TECORE_AMAX_MOST_RECENT;
  }
  TE_CHECK(tecore_delayed_state_create(&r, role, count, stream, st));
  return TECORE_SUCCESS;
}

/* Which Linears of an FP8 sequence stay in its dtype.  An FP8 Linear
 * adds kernels a high-precision one does not have (the input's and the
 * gradient's quantize and transposes, the weight's quantize, the scaling
 * update): a few microseconds each, whatever the size.  Below some GEMM
 * size m * n * k those cost more than the faster FP8 GEMM saves: on an
 * H100, te-demo at hidden 256, 64 tokens ran its FP8 step at 0.41x the
 * speed of BF16; on an H200, te-demo --tp 2 at hidden 4096, 128 tokens
 * (m*n*k 8.6e9) ran FP8 at 0.93x, at 8192 tokens at 1.63x.  -1: the
 * backend's default, 2^34 on a GPU (a GEMM of 34 GFLOP, about 50 us in
 * BF16) and 0 on vdev, which has no speed to gain or lose, so its tests
 * keep every Linear in FP8. */
TE_PARAM_INT(ops_fp8_min_mnk, "TECORE_OPS_FP8_MIN_MNK", -1, -1, INT64_MAX,
             "an FP8 sequence runs a Linear whose forward GEMM has m*n*k below this in the "
             "sequence's own dtype (the FP8 bookkeeping kernels cost more than the GEMM "
             "saves); 0: every Linear in FP8; -1: 2^34 on cuda, 0 on vdev")

static void choose_hp(tecore_seq_t *s) {
  int64_t min = tecore_tunable_int(&ops_fp8_min_mnk);
  /* inference: the weights' quantize and the transposes are gone, what is
   * left (the input's quantize) costs less than the FP8 GEMM saves */
  if (te_seq_infer(s)) min = 0;
  if (min < 0) {
    tecore_backend_t be = TECORE_BACKEND_NONE;
    min = tecore_backend(&be) == TECORE_SUCCESS && be == TECORE_BACKEND_CUDA ? (int64_t)1 << 34 : 0;
  }
  for (size_t i = 0; i < s->nops; i++) {
    struct te_op *o = &s->ops[i];
    o->hp = 0;
    if (!s->fp8 || !(o->fp8 & TE_KIND_GEMM) || s->cfg.dtype == TECORE_DTYPE_F32) continue;
    double mnk = (double)o->in_rows * (double)o->out_cols * (double)o->in_cols;
    o->hp = mnk < (double)min;
  }
  /* Linears, none in FP8: nothing would read an FP8 copy, an amax or a
   * scale, so none is made (the BF16 plan's kernels, launch for launch) */
  size_t f8 = 0, gemms = 0;
  for (size_t i = 0; i < s->nops; i++) {
    gemms += (s->ops[i].fp8 & TE_KIND_GEMM) != 0;
    f8 += te_op_fp8(s, i) != 0;
  }
  s->fp8_run = s->fp8 && (f8 > 0 || gemms == 0);
}

/* Bytes of the scale_inv array of 1x128 blocks over [rows][cols]. */
static size_t blk1d_bytes(size_t rows, size_t cols) {
  return rows * ((cols + 127) / 128) * sizeof(float);
}
/* ... of 128x128 blocks (either copy: the same count). */
static size_t blk2d_bytes(size_t rows, size_t cols) {
  return ((rows + 127) / 128) * ((cols + 127) / 128) * sizeof(float);
}

/* Workspace bytes a block-scaled GEMM on cuda takes for its operands'
 * scales in cuBLASLt's layout (gemm/gemm_problem.h, tecore_gemm(3)). */
static size_t blk_ws(int two_d, size_t r, size_t k) {
  return te_gemm_blk_lt_bytes(two_d ? TE_GEMM_SCALE_BLK2D : TE_GEMM_SCALE_BLK1D, r, k);
}
/* ... the largest of a Linear's three GEMMs (x 1x128, W 128x128, dy 1x128). */
static size_t te_gemm_block_ws_linear(size_t rows, size_t in, size_t out) {
  size_t fwd = blk_ws(0, rows, in) + blk_ws(1, out, in);
  size_t dgrad = blk_ws(0, rows, out) + blk_ws(1, in, out);
  size_t wgrad = blk_ws(0, out, rows) + blk_ws(0, in, rows);
  size_t m = fwd > dgrad ? fwd : dgrad;
  return m > wgrad ? m : wgrad;
}

/* The block recipe's weight and gradient scale arrays (the activations'
 * are the boundaries'): each Linear's rowwise weight scales (and the
 * columnwise ones, TECORE_OPS_W8_COL_KEEP), and the scratch of the
 * backward's weight and gradient copies, sized for the largest.  The
 * GEMM on cuda rearranges these into its workspace (te/gemm.h): the
 * sequence's workspace grows by what the largest Linear's GEMMs need. */
static tecore_result_t alloc_block_scales(tecore_seq_t *s, int both, int keep) {
  size_t wcol = 0, drow = 0, dcol = 0, gemm = 0;
  for (size_t i = 0; i < s->nops; i++) {
    struct te_op *o = &s->ops[i];
    if (!(o->fp8 & TE_KIND_GEMM)) continue;
    size_t w = blk2d_bytes(o->out_cols, o->in_cols);
    if (!o->w8_srow) TE_CHECK(te_seq_alloc(s, w, 0, &o->w8_srow));
    if (keep && !o->w8_scol) TE_CHECK(te_seq_alloc(s, w, 0, &o->w8_scol));
    size_t r = blk1d_bytes(o->out_rows, o->out_cols), c = blk1d_bytes(o->out_cols, o->out_rows);
    if (w > wcol) wcol = w;
    if (r > drow) drow = r;
    if (c > dcol) dcol = c;
    size_t g = te_gemm_block_ws_linear(o->in_rows, o->in_cols, o->out_cols);
    if (g > gemm) gemm = g;
  }
  if (both && !s->dy8_srow) {
    TE_CHECK(te_seq_alloc(s, drow, 0, &s->dy8_srow));
    TE_CHECK(te_seq_alloc(s, dcol, 0, &s->dy8_scol));
    if (!keep) TE_CHECK(te_seq_alloc(s, wcol, 0, &s->w8_scol));
  }
  size_t need = ((size_t)tecore_tunable_int(&ops_gemm_workspace_mb) << 20) + gemm;
  if (s->gemm_ws && s->gemm_ws_bytes < need) {
    /* the old workspace stays allocated: a graph captured before may use it */
    s->gemm_ws_bytes = need;
    TE_CHECK(te_seq_alloc(s, s->gemm_ws_bytes, 0, &s->gemm_ws));
  }
  return TECORE_SUCCESS;
}

/* Allocates what the recipe needs (FP8 copies, scaling state) and plans. */
static tecore_result_t prepare_fp8(tecore_seq_t *s, tecore_stream_t stream) {
  size_t n = s->nops;
  tecore_dtype_t dt = s->cfg.dtype;
  /* inference: no backward reads a columnwise copy or an FP8 gradient */
  const int both = !te_seq_infer(s);
  free_state(s);
  choose_hp(s);
  w8_invalidate(s);   /* new scales (or none): quantize the weights again */
  /* tecore_seq_fp8_weight's hand-off is valid until the recipe changes;
   * codes in the caller's storage go with it (allocated again below) */
  for (size_t i = 0; i < n; i++) {
    if (s->ops[i].w8_ext) s->ops[i].w8_row = 0;
    s->ops[i].w8_given = s->ops[i].w8_ext = 0;
  }
  /* new operand types: the GEMM library may take the GELU epilogue without aux now */
  for (size_t i = 0; i < n; i++) s->ops[i].gelu_aux_only = s->ops[i].gelu_daux_off = 0;
  for (size_t b = 0; b <= n; b++) s->bnd[b].f8 = -1;
  for (size_t i = 0; i < n; i++) s->ops[i].qkv8 = 0;
  s->nf8 = 0;
  if (s->fp8) TE_CHECK(check_fp8_shapes(s, "tecore_seq_build"));
  if (s->fp8_run) {
    for (size_t b = 0; b <= n; b++) {
      int need = (b < n && (s->ops[b].fp8 & TE_KIND_GEMM)) ||
                 (b >= 1 && (s->ops[b - 1].fp8 & TE_KIND_FP8_COPY));
      if (!need) continue;
      struct te_bnd *bd = &s->bnd[b];
      bd->f8 = (int)s->nf8++;
      if (!bd->f8_row) {
        TE_CHECK(te_saved_alloc(s, bd->rows * bd->cols, &bd->f8_row));
        if (both) TE_CHECK(te_saved_alloc(s, bd->rows * bd->cols, &bd->f8_col));
      }
      if (te_seq_block(s) && !bd->f8_srow) {
        TE_CHECK(te_seq_alloc(s, blk1d_bytes(bd->rows, bd->cols), 0, &bd->f8_srow));
        if (both) TE_CHECK(te_seq_alloc(s, blk1d_bytes(bd->cols, bd->rows), 0, &bd->f8_scol));
      }
    }
    /* inference, delayed scaling: attention after RoPE takes FP8 Q/K/V
     * (rope+quantize), three entries of st_qkv */
    s->nqkv8 = 0;
    const int qkv8 = s->recipe.kind == TECORE_RECIPE_DELAYED &&
                     !(s->cfg.flags & TECORE_SEQ_NO_FUSION);
    for (size_t i = 1; i < n && qkv8; i++) {
      struct te_op *o = &s->ops[i];
      if (!te_attn_fp8_takes(s, i, 0)) continue;
      o->qkv8 = 1;
      o->qkv8_entry = s->nqkv8;
      s->nqkv8 += 3;
      if (!o->qkv8_buf) TE_CHECK(te_seq_alloc(s, o->in_rows * o->in_cols, 0, &o->qkv8_buf));
    }
    /* the weights' columnwise copies: none kept between the passes, one
     * made at a time in s->w8_col by the backward (ops_linear.c); or,
     * TECORE_OPS_W8_COL_KEEP, each Linear's own written by the forward */
    const int keep = both && tecore_tunable_int(&ops_w8_col_keep);
    for (size_t i = 0; i < n; i++) {
      struct te_op *o = &s->ops[i];
      if (!(o->fp8 & TE_KIND_GEMM)) continue;
      if (!o->w8_row) TE_CHECK(te_seq_alloc(s, o->plen[0], 0, &o->w8_row));
      if (keep && !o->w8_col) TE_CHECK(te_seq_alloc(s, o->plen[0], 0, &o->w8_col));
    }
    /* dy8_row, dy8_col and w8_col: after the plan (alloc_grad8) */
    if (te_seq_block(s)) TE_CHECK(alloc_block_scales(s, both, keep));
    TE_CHECK(make_state(s, TECORE_FP8_ACTIVATION, s->nf8, stream, &s->st_act));
    TE_CHECK(make_state(s, TECORE_FP8_WEIGHT, s->nlinear, stream, &s->st_w));
    TE_CHECK(make_state(s, TECORE_FP8_GRADIENT, s->nlinear, stream, &s->st_g));
    TE_CHECK(make_state(s, TECORE_FP8_ACTIVATION, s->nqkv8, stream, &s->st_qkv));
    s->have_state = 1;
  } else if (dt == TECORE_DTYPE_F32) {
    for (size_t i = 0; i < n; i++) {
      struct te_op *o = &s->ops[i];
      if (!(o->fp8 & TE_KIND_GEMM) || o->w16) continue;
      TE_CHECK(te_seq_alloc(s, o->plen[0] * 2, 0, &o->w16));
      TE_CHECK(te_seq_alloc(s, o->in_rows * o->in_cols * 2, 0, &o->x16));
    }
    if (!s->dy16 && s->nlinear && both)
      TE_CHECK(te_seq_alloc(s, s->max_elems * 2, 0, &s->dy16));
  }
  /* TECORE_SEQ_F32_WEIGHTS: the 16-bit weights of the Linears not in FP8 */
  for (size_t i = 0; i < n; i++)
    if (te_w16_cast(s, i) && !s->ops[i].w16)
      TE_CHECK(te_seq_alloc(s, s->ops[i].plen[0] * 2, 0, &s->ops[i].w16));
  TE_CHECK(te_plan_build(s));
  TE_CHECK(alloc_grad8(s));
  if (s->nrc) {
    size_t *last = calloc(s->nrc, sizeof *last);
    if (!last) return TE_ERR(TECORE_ERR_NOMEM, "tecore_seq_build: out of host memory");
    tecore_result_t r = te_rc_layout(s, last);
    if (r == TECORE_SUCCESS) te_rc_plan(s, last);
    free(last);
    TE_CHECK(r);
  }
  return te_saved_settle(s, NULL);
}

TE_EXPORT tecore_result_t tecore_seq_set_recipe(tecore_seq_t *s, const struct tecore_recipe *r,
                                                tecore_stream_t stream) {
  static const char fn[] = "tecore_seq_set_recipe";
  TE_CHECK(te_seq_arg(s, fn));
  if (r) {
    TE_CHECK(tecore_recipe_validate(r));
    /* a limit of the fuser, not of the device: the recipe named, not numbered */
    if (r->kind == TECORE_RECIPE_MXFP8)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: recipe->kind TECORE_RECIPE_MXFP8: a limit of "
                    "the fuser (not of the backend or device): its sequences take the delayed, "
                    "current and block recipes; MXFP8 runs through the plain calls "
                    "(tecore_quantize, tecore_gemm), not yet in a sequence", fn);
    if (r->format == TECORE_FP8_E5M2)
      return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: recipe->format E5M2: the forward GEMM would "
                    "be e5m2 x e5m2, which FP8 GEMMs do not take; use E4M3 or HYBRID", fn);
    TE_CHECK(check_fp8_shapes(s, fn));
  }
  int old_fp8 = s->fp8;
  struct tecore_recipe old = s->recipe;
  s->fp8 = r != NULL;
  if (r) s->recipe = *r;
  if (!s->built) return TECORE_SUCCESS;
  tecore_result_t res = tecore_stream_synchronize(stream);
  /* the new plan may give an operation another writer: marked gradients
   * become zeros now */
  if (res == TECORE_SUCCESS) res = te_grad_fill_fresh(s, stream);
  if (res == TECORE_SUCCESS) res = prepare_fp8(s, stream);
  if (res == TECORE_SUCCESS) res = tecore_stream_synchronize(stream);
  if (res != TECORE_SUCCESS) {
    te_error_hop(fn, __FILE__, __LINE__);
    s->fp8 = old_fp8;
    s->recipe = old;
    /* best effort back to the old plan; the first error is what we return */
    char keep[512];
    snprintf(keep, sizeof keep, "%s", tecore_last_error());
    (void)prepare_fp8(s, stream);
    tecore_set_error("%s", keep);
  }
  return res;
}

TE_EXPORT tecore_result_t tecore_seq_weights_changed(tecore_seq_t *s) {
  static const char fn[] = "tecore_seq_weights_changed";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(te_seq_infer(s), "%s: seq %p is a training sequence (its forward quantizes the "
         "weights unless the noop flag says not to); only TECORE_SEQ_INFERENCE sequences cache "
         "them", fn, (const void *)s);
  w8_invalidate(s);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_fp8_state(const tecore_seq_t *s, tecore_fp8_role_t role,
                                               struct tecore_delayed_state *st) {
  static const char fn[] = "tecore_seq_fp8_state";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(st, "%s: st is NULL", fn);
  TE_ARG(role == TECORE_FP8_ACTIVATION || role == TECORE_FP8_WEIGHT ||
         role == TECORE_FP8_GRADIENT, "%s: role is %d, not TECORE_FP8_ACTIVATION, "
         "TECORE_FP8_WEIGHT or TECORE_FP8_GRADIENT", fn, (int)role);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  memset(st, 0, sizeof *st);
  if (!s->have_state) return TECORE_SUCCESS;
  *st = role == TECORE_FP8_ACTIVATION ? s->st_act : role == TECORE_FP8_WEIGHT ? s->st_w : s->st_g;
  return TECORE_SUCCESS;
}

/* ---- gradients and scales --------------------------------------------------------------------- */

/* Zeros count elements of dtype at p with the fill kernel, not a memset:
 * captured into a step graph, a memset is a memset node, which keeps the
 * graph's launch off the driver's path for a straight line of kernel nodes
 * (te-bench --graph measures both).  +0.0 is all zero bits, as the memset
 * wrote. */
static tecore_result_t zero_kernel(tecore_devptr_t p, tecore_dtype_t dtype, size_t count,
                                   tecore_stream_t stream) {
  if (dtype == TECORE_DTYPE_F32 || dtype == TECORE_DTYPE_BF16 || dtype == TECORE_DTYPE_F16)
    return tecore_fill(p, dtype, count, 0.0, stream);
  return tecore_memset_d8_async(p, 0, count * tecore_dtype_size(dtype), stream);
}

/* Do libtecore's own executors write op i's parameter gradients in
 * backward (the wgrad GEMM and te_accum_f32, which honour the mark)?  A
 * registered pattern or kind accumulates its own way: its operations'
 * gradients are filled. */
static int writes_own_grads(const tecore_seq_t *s, size_t i) {
  const struct te_plan *p = &s->plan;
  const struct te_group *g = p->groups[TECORE_SEQ_BACKWARD];
  int k = s->ops[i].d.kind;
  if (k != TECORE_OP_LINEAR && k != TECORE_OP_BIAS && k != TECORE_OP_LAYERNORM &&
      k != TECORE_OP_RMSNORM)
    return 0;
  for (size_t j = 0; j < p->ngroups[TECORE_SEQ_BACKWARD]; j++)
    if (i >= g[j].first && i < g[j].first + g[j].count) return !g[j].f || g[j].f->builtin_id >= 0;
  return 0;
}

/* Parameter gradients.  Queued into a stream capture, each is marked to
 * be overwritten by its first writer in the next backward of that capture
 * (no fill pass), unless another writer accumulates it
 * (writes_own_grads): the mark is host state, set and taken when the work
 * is queued, so the graph holds the beta-0 GEMMs and stores and replays
 * them.  Queued eagerly, they are filled as before: a backward captured
 * later and replayed several times (microbatches accumulated by a graph
 * of one) must add to zeros every time.  Residual slot gradients read by
 * the caller are filled. */
TE_EXPORT tecore_result_t tecore_seq_zero_grad(tecore_seq_t *s, tecore_stream_t stream) {
  TE_CHECK(te_seq_arg(s, "tecore_seq_zero_grad"));
  TE_ARG(s->built, "tecore_seq_zero_grad: the sequence is not built (tecore_seq_build)");
  if (te_seq_infer(s)) return TECORE_SUCCESS;   /* no gradients to zero */
  tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
  TE_CHECK(tecore_stream_capture_status(stream, &cs));
  const int capt = cs == TECORE_CAPTURE_ACTIVE && !tecore_tunable_int(&ops_zero_grad_fill);
  if (capt) s->fresh_stream = stream;
  for (size_t i = 0; i < s->nops; i++) {
    struct te_op *o = &s->ops[i];
    const int mark = capt && writes_own_grads(s, i);
    for (size_t p = 0; p < o->nparams; p++) {
      if (mark) {
        if (!(o->grad_fresh & (1u << p))) s->nfresh++;
        o->grad_fresh |= 1u << p;
      } else {
        TE_CHECK(zero_kernel(o->grad[p], te_grad_dtype(s, o, p), o->plen[p], stream));
      }
    }
  }
  for (size_t i = 0; i < s->npairs; i++) {
    const struct te_slot *sl = &s->pairs[i];
    if (sl->maker >= 0 && sl->adder < 0) {
      const struct te_op *o = &s->ops[sl->maker];
      TE_CHECK(zero_kernel(sl->grad, s->cfg.dtype, o->in_rows * o->in_cols, stream));
    }
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_grad_fresh_check(tecore_seq_t *s, tecore_stream_t stream) {
  if (!s->nfresh) return TECORE_SUCCESS;
  tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
  TE_CHECK(tecore_stream_capture_status(stream, &cs));
  if (cs == TECORE_CAPTURE_ACTIVE && stream == s->fresh_stream) return TECORE_SUCCESS;
  return te_grad_fill_fresh(s, stream);
}

tecore_result_t te_grad_fill_fresh(tecore_seq_t *s, tecore_stream_t stream) {
  for (size_t i = 0; i < s->nops && s->nfresh; i++) {
    struct te_op *o = &s->ops[i];
    for (size_t p = 0; p < o->nparams; p++)
      if (o->grad_fresh & (1u << p)) {
        TE_CHECK(zero_kernel(o->grad[p], te_grad_dtype(s, o, p), o->plen[p], stream));
        o->grad_fresh &= ~(1u << p);
        s->nfresh--;
      }
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_update_scales(tecore_seq_t *s, tecore_stream_t stream) {
  TE_CHECK(te_seq_arg(s, "tecore_seq_update_scales"));
  TE_ARG(s->built, "tecore_seq_update_scales: the sequence is not built (tecore_seq_build)");
  if (!s->fp8_run || s->recipe.kind != TECORE_RECIPE_DELAYED || !s->have_state)
    return TECORE_SUCCESS;
  /* the three roles' states and FP8 Q/K/V's in one launch (a state
   * without tensors is zeroed, which the update skips): one kernel of the step's
   * bookkeeping instead of three, side by side on the device */
  const struct tecore_delayed_state st[4] = {s->st_act, s->st_w, s->st_g, s->st_qkv};
  TE_CHECK(tecore_delayed_update_multi(&s->recipe, st, 4, stream));
  /* the cached weight copies were quantized at the old scales */
  w8_invalidate(s);
  return TECORE_SUCCESS;
}

/* ---- accessors ----------------------------------------------------------------------------------- */

static void param_tensors(const tecore_seq_t *s, const struct te_op *o, size_t p,
                          struct tecore_tensor *v, struct tecore_tensor *g) {
  size_t r = o->pdef[p].rows, c = o->pdef[p].cols;
  if (v) {
    te_t2d(v, te_param_dtype(s, o, p), r, c, o->param[p]);
    if (r == 1) {
      v->ndim = 1;
      v->shape[0] = c;
      v->shape[1] = 0;
    }
  }
  if (g) {
    te_t2d(g, te_grad_dtype(s, o, p), r, c, o->grad[p]);
    if (r == 1) {
      g->ndim = 1;
      g->shape[0] = c;
      g->shape[1] = 0;
    }
  }
}

TE_EXPORT tecore_result_t tecore_seq_params(const tecore_seq_t *s, struct tecore_seq_param *params,
                                            size_t max, size_t *count) {
  static const char fn[] = "tecore_seq_params";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(count, "%s: count is NULL", fn);
  TE_ARG(params || max == 0, "%s: params is NULL but max is %zu", fn, max);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  size_t k = 0;
  for (size_t i = 0; i < s->nops; i++) {
    const struct te_op *o = &s->ops[i];
    for (size_t p = 0; p < o->nparams; p++, k++) {
      if (k >= max) continue;
      params[k].op = i;
      params[k].name = o->pdef[p].name;
      param_tensors(s, o, p, &params[k].value, &params[k].grad);
    }
  }
  *count = k;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_op(const tecore_seq_t *s, size_t index,
                                        struct tecore_op_info *info) {
  static const char fn[] = "tecore_seq_op";
  TE_CHECK(te_seq_op_arg(s, index, fn));
  TE_ARG(info, "%s: info is NULL", fn);
  const struct te_op *o = &s->ops[index];
  memset(info, 0, sizeof *info);
  info->desc = o->d;
  info->name = o->def.name;
  info->in_rows = o->in_rows;
  info->in_features = o->in_cols;
  info->out_rows = o->out_rows;
  info->out_features = o->out_cols;
  info->nparams = o->nparams;
  if (s->built) {
    for (size_t p = 0; p < o->nparams; p++)
      param_tensors(s, o, p, &info->param[p], &info->grad[p]);
    for (int k = 0; k < 2; k++)
      if (o->saved[k]) {
        te_t2d(&info->saved[k], TECORE_DTYPE_F32, 1, o->in_rows, o->saved[k]);
        info->saved[k].ndim = 1;
        info->saved[k].shape[0] = o->in_rows;
        info->saved[k].shape[1] = 0;
      }
    if (o->pair >= 0) {
      te_t2d(&info->extra_value, s->cfg.dtype, o->in_rows, o->in_cols, te_slot_value(s, o->pair));
      te_t2d(&info->extra_grad, s->cfg.dtype, o->in_rows, o->in_cols, te_slot_grad(s, o->pair));
    }
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_extra(const tecore_seq_t *s, int slot,
                                           struct tecore_tensor *value,
                                           struct tecore_tensor *grad) {
  static const char fn[] = "tecore_seq_extra";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(slot >= 0 && slot < TECORE_SEQ_MAX_SLOTS, "%s: slot %d is not in 0..%d", fn, slot,
         TECORE_SEQ_MAX_SLOTS - 1);
  int p = s->slot_last[slot];   /* a slot used again: its latest use */
  TE_ARG(p >= 0, "%s: slot %d is not used by the sequence", fn, slot);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  const struct te_slot *sl = &s->pairs[p];
  const struct te_op *o = &s->ops[sl->maker >= 0 ? sl->maker : sl->adder];
  if (value) te_t2d(value, s->cfg.dtype, o->in_rows, o->in_cols, te_slot_value(s, p));
  if (grad) te_t2d(grad, s->cfg.dtype, o->in_rows, o->in_cols, te_slot_grad(s, p));
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_dtype(const tecore_seq_t *s, tecore_dtype_t *dtype) {
  TE_CHECK(te_seq_arg(s, "tecore_seq_dtype"));
  TE_ARG(dtype, "tecore_seq_dtype: dtype is NULL");
  *dtype = s->cfg.dtype;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_memory(const tecore_seq_t *s, size_t *param_bytes,
                                            size_t *total_bytes) {
  TE_CHECK(te_seq_arg(s, "tecore_seq_memory"));
  if (param_bytes) *param_bytes = s->bytes_param;
  if (total_bytes) *total_bytes = s->bytes_total;
  return TECORE_SUCCESS;
}
