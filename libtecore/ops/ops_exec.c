/* SPDX-License-Identifier: Apache-2.0 */
/* ops_exec.c -- tecore_seq_forward and tecore_seq_backward: check the
 * caller's tensors, bind them to the sequence's first and last boundaries,
 * then run the planned groups of the pass (forward in order, backward in
 * reverse), each through its executor: a fusion pattern's or the
 * operation's kind's (ops_kinds.c for libtecore's own, or registered). */
#include "ops/ops_internal.h"
#include "fp8/fp8_internal.h"
#include "ksupport/ksupport.h"

#include <stdio.h>
#include <string.h>

static tecore_result_t check_act(const tecore_seq_t *s, const struct tecore_tensor *t,
                                 const char *fn, const char *arg, size_t b) {
  TE_ARG(t, "%s: %s is NULL", fn, arg);
  TE_CHECK(te_tensor_check(t, TECORE_TENSOR_ROWWISE, fn, arg));
  TE_ARG(t->scaling == TECORE_SCALING_NONE, "%s: %s: scaling is %s; the sequence takes plain "
         "tensors (scaling none)", fn, arg, tecore_scaling_name(t->scaling));
  TE_ARG(t->dtype == s->cfg.dtype, "%s: %s: dtype %s, but the sequence's dtype is %s", fn, arg,
         tecore_dtype_name(t->dtype), tecore_dtype_name(s->cfg.dtype));
  size_t r, c;
  te_tensor_view(t, &r, &c);
  TE_ARG(r == s->bnd[b].rows && c == s->bnd[b].cols,
         "%s: %s: its 2-D view is [%zu][%zu], the sequence's %s is [%zu][%zu]", fn, arg, r, c,
         b == 0 ? "input" : "output", s->bnd[b].rows, s->bnd[b].cols);
  return TECORE_SUCCESS;
}

/* te/ops.h's rule, on the caller's tensors (the sequence's own buffers are
 * apart by construction): forward's out shares no byte with in; backward's
 * dx none with dy, nor with the last forward's input, which that
 * backward still reads (a Linear's weight gradient) and which the caller
 * keeps unchanged until the backward ran. */
static size_t bnd_bytes(const tecore_seq_t *s, size_t b) {
  return s->bnd[b].rows * s->bnd[b].cols * tecore_dtype_size(s->cfg.dtype);
}

/* A caller's tensor at boundary bnd of the sequence. */
struct seq_arg {
  const char *name;
  tecore_devptr_t p;
  size_t bnd;
};

static tecore_result_t seq_alias(const tecore_seq_t *s, const struct seq_arg *w,
                                 const struct seq_arg *r, tecore_devptr_t fwd_in, const char *fn) {
  const struct te_span sp[] = {
      {w->name, w->p, bnd_bytes(s, w->bnd), TE_ACCESS_WRITE, 0, NULL, 0},
      {r->name, r->p, bnd_bytes(s, r->bnd), TE_ACCESS_READ, 0, NULL, 0},
      {"the last forward's in (this backward reads it)", fwd_in, bnd_bytes(s, 0), TE_ACCESS_READ,
       0, NULL, 0},
  };
  return te_check_spans(sp, fwd_in ? 3 : 2, fn);
}

/* A backward's dy given in FP8: the tensor tecore_seq_grad_fp8 gives (its
 * data, scale, amax, scale_inv the sequence's), with columnwise_data the
 * sequence's or, where that has none, the caller's scratch of rows * cols
 * bytes, which the backward overwrites and dx must not share a byte with. */
static tecore_result_t check_grad8(const tecore_seq_t *s, const struct tecore_tensor *dy,
                                   const struct tecore_tensor *dx, const char *fn) {
  struct tecore_tensor ref;
  TE_CHECK(te_tensor_check(dy, TECORE_TENSOR_ROWWISE, fn, "dy"));
  TE_CHECK(te_seq_grad_fp8(s, &ref, fn));
  TE_ARG(dy->dtype == ref.dtype && dy->scaling == ref.scaling &&
             (dy->data == ref.data || s->grad8_given) && dy->scale == ref.scale &&
             dy->amax == ref.amax && dy->scale_inv == ref.scale_inv &&
             dy->columnwise_scale_inv == 0,
         "%s: dy is %s (scaling %s) at 0x%llx, not the FP8 gradient tecore_seq_grad_fp8 gives "
         "(%s at 0x%llx, with its scale, amax and scale_inv)", fn, tecore_dtype_name(dy->dtype),
         tecore_scaling_name(dy->scaling), (unsigned long long)dy->data,
         tecore_dtype_name(ref.dtype), (unsigned long long)ref.data);
  size_t r, c, rows = s->bnd[s->nops].rows, cols = s->bnd[s->nops].cols;
  te_tensor_view(dy, &r, &c);
  TE_ARG(r == rows && c == cols, "%s: dy: its 2-D view is [%zu][%zu], the sequence's output is "
         "[%zu][%zu]", fn, r, c, rows, cols);
  /* TECORE_SEQ_GRAD_FP8_GIVEN: the rowwise codes are the caller's too */
  TE_ARG(!s->grad8_given || (dy->data && dy->data % 16 == 0),
         "%s: dy->data (0x%llx) is 0 or not aligned to 16 bytes: the sequence was created "
         "with TECORE_SEQ_GRAD_FP8_GIVEN, so the last Linear's rowwise FP8 gradient is the "
         "caller's, %zu bytes", fn, (unsigned long long)dy->data, rows * cols);
  if (s->grad8_given && te_dev_checks_on())
    TE_CHECK(te_dev_check_range(dy->data, rows * cols, fn, "dy->data"));
  if (ref.columnwise_data) {
    TE_ARG(dy->columnwise_data == ref.columnwise_data,
           "%s: dy->columnwise_data (0x%llx) is not the sequence's (0x%llx) that "
           "tecore_seq_grad_fp8 gave", fn, (unsigned long long)dy->columnwise_data,
           (unsigned long long)ref.columnwise_data);
    return TECORE_SUCCESS;
  }
  TE_ARG(dy->columnwise_data && dy->columnwise_data % 16 == 0,
         "%s: dy->columnwise_data (0x%llx) is 0 or not aligned to 16 bytes: the last Linear's "
         "gradient needs the caller's scratch of %zu bytes for its columnwise copy", fn,
         (unsigned long long)dy->columnwise_data, rows * cols);
  if (te_dev_checks_on())
    TE_CHECK(te_dev_check_range(dy->columnwise_data, rows * cols, fn, "dy->columnwise_data"));
  const struct te_span sp[] = {
      {"dy->columnwise_data (scratch the backward writes)", dy->columnwise_data, rows * cols,
       TE_ACCESS_WRITE, 0, NULL, 0},
      {"dx", dx ? dx->data : 0, dx ? bnd_bytes(s, 0) : 0, TE_ACCESS_WRITE, 0, NULL, 0},
      {"the last forward's in (this backward reads it)", s->run_in, bnd_bytes(s, 0),
       TE_ACCESS_READ, 0, NULL, 0},
      {"dy (the sequence's FP8 gradient)", dy->data, rows * cols, TE_ACCESS_READ, 0, NULL, 0},
  };
  return te_check_spans(sp, 4, fn);
}

/* The sequence's 16-bit gradient path cannot run where the last Linear's
 * FP8 gradient scratch was left to the caller. */
static tecore_result_t check_grad16(const tecore_seq_t *s, const char *fn) {
  TE_ARG(!s->grad8_given, "%s: dy is 16-bit, but the sequence was created with "
         "TECORE_SEQ_GRAD_FP8_GIVEN and its recipe lets the last Linear take an FP8 gradient: "
         "it keeps no scratch of that size, so dy must be the FP8 gradient "
         "(tecore_seq_grad_fp8, with the caller's rowwise and columnwise buffers)", fn);
  return TECORE_SUCCESS;
}

/* The executor and context of group gr in pass dir: the fusion's, or the
 * operation's kind's (built in or registered alike). */
static void group_fn(const tecore_seq_t *s, const struct te_group *gr, tecore_seq_dir_t dir,
                     tecore_seq_exec_fn *fnp, void **ctx) {
  if (gr->f) {
    *fnp = gr->f->def.run;
    *ctx = gr->f->def.ctx;
    return;
  }
  const struct te_op *o = &s->ops[gr->first];
  *fnp = dir == TECORE_SEQ_FORWARD ? o->def.forward : o->def.backward;
  *ctx = o->def.ctx;
}

/* Prefixes the group's place to the last error. */
static tecore_result_t group_error(const struct te_group *gr, tecore_seq_dir_t dir,
                                   tecore_result_t r) {
  if (r == TECORE_SUCCESS) return r;
  char keep[768];
  snprintf(keep, sizeof keep, "%s", tecore_last_error());
  const char *pass = dir == TECORE_SEQ_FORWARD    ? "forward"
                     : dir == TECORE_SEQ_BACKWARD ? "backward"
                                                  : "recomputed forward";
  if (gr->count == 1)
    tecore_set_error("%s of op %zu (%s): %s", pass, gr->first, gr->name, keep);
  else
    tecore_set_error("%s of ops %zu-%zu (%s): %s", pass, gr->first, gr->first + gr->count - 1,
                     gr->name, keep);
  return r;
}

/* The executor of group gr on stream; rows > 0 (forward,
 * TECORE_FUSION_ROWS): on rows row0 .. row0 + rows of its boundaries. */
static tecore_result_t group_exec(tecore_seq_t *s, const struct te_group *gr,
                                  tecore_seq_dir_t dir, tecore_devptr_t noop,
                                  tecore_stream_t stream, size_t row0, size_t rows) {
  struct tecore_tensor act[TECORE_FUSION_MAX_OPS + 1], grad[TECORE_FUSION_MAX_OPS + 1];
  size_t es = tecore_dtype_size(s->cfg.dtype);
  for (size_t k = 0; k <= gr->count; k++) {
    const struct te_bnd *bd = &s->bnd[gr->first + k];
    if (rows)
      te_t2d(&act[k], s->cfg.dtype, rows, bd->cols,
             te_bnd_hp(s, gr->first + k) + row0 * bd->cols * es);
    else
      te_t2d(&act[k], s->cfg.dtype, bd->rows, bd->cols, te_bnd_hp(s, gr->first + k));
    if (dir == TECORE_SEQ_BACKWARD)
      te_t2d(&grad[k], s->cfg.dtype, bd->rows, bd->cols, te_bnd_grad(s, gr->first + k));
  }
  struct tecore_seq_exec x = {
      .seq = s, .dir = dir, .first = gr->first, .count = gr->count, .act = act,
      .grad = dir == TECORE_SEQ_BACKWARD ? grad : NULL, .noop_flag = noop,
      .recipe = s->fp8_run ? &s->recipe : NULL, .stream = stream, .workspace = s->ws,
      .workspace_bytes = s->ws_bytes,
      .flags = (dir == TECORE_SEQ_BACKWARD && gr->grad_dead ? TECORE_EXEC_GRAD_DEAD : 0u) |
               (s->side && stream == s->side ? TECORE_EXEC_SIDE : 0u),
      .row0 = row0};
  tecore_seq_exec_fn fn = NULL;
  group_fn(s, gr, dir, &fn, &x.ctx);
  return group_error(gr, dir, fn(&x));
}

/* The before hook of group gr (the pass hooks, te/ops.h: an offload
 * schedule's hand-offs). */
static tecore_result_t group_hook_before(tecore_seq_t *s, const struct te_group *gr,
                                         tecore_seq_dir_t dir, tecore_stream_t stream) {
  if (!s->hooks.before) return TECORE_SUCCESS;
  return group_error(gr, dir,
                     s->hooks.before(s->hooks.ctx, s, dir, gr->first, gr->count, stream));
}

/* The before hook and the executor of group gr on stream. */
static tecore_result_t group_begin(tecore_seq_t *s, const struct te_group *gr,
                                   tecore_seq_dir_t dir, tecore_devptr_t noop,
                                   tecore_stream_t stream) {
  TE_CHECK(group_hook_before(s, gr, dir, stream));
  return group_exec(s, gr, dir, noop, stream, 0, 0);
}

/* The after hook of group gr. */
static tecore_result_t group_end(tecore_seq_t *s, const struct te_group *gr, tecore_seq_dir_t dir,
                                 tecore_stream_t stream) {
  if (!s->hooks.after) return TECORE_SUCCESS;
  return group_error(gr, dir,
                     s->hooks.after(s->hooks.ctx, s, dir, gr->first, gr->count, stream));
}

static tecore_result_t run_group(tecore_seq_t *s, const struct te_group *gr, tecore_seq_dir_t dir,
                                 tecore_devptr_t noop, tecore_stream_t stream) {
  TE_CHECK(group_begin(s, gr, dir, noop, stream));
  return group_end(s, gr, dir, stream);
}

/* A forward Linear in row blocks (te_group.chunks; ops_overlap.c) and the
 * pattern after it: te_linear_fwd calls chunk_done after each block's
 * GEMM, which forks the side stream at that point and runs the pattern on
 * the block there.  The hooks nest: the Linear's before, the pattern's
 * before and after (side stream), the Linear's after once joined. */
struct chunk_run {
  const struct te_group *gr;      /* the pattern */
  tecore_devptr_t noop;
  tecore_stream_t stream;         /* the caller's */
  int forked;
};

static tecore_result_t chunk_done(tecore_seq_t *s, size_t row0, size_t rows) {
  struct chunk_run *c = s->chunk_arg;
  TE_CHECK(tecore_event_record(s->ev_fork, c->stream));
  TE_CHECK(tecore_stream_wait_event(s->side, s->ev_fork));
  if (!c->forked) {
    c->forked = 1;
    TE_CHECK(group_hook_before(s, c->gr, TECORE_SEQ_FORWARD, s->side));
  }
  return group_exec(s, c->gr, TECORE_SEQ_FORWARD, c->noop, s->side, row0, rows);
}

static tecore_result_t run_chunked(tecore_seq_t *s, const struct te_group *lin,
                                   const struct te_group *pat, tecore_devptr_t noop,
                                   tecore_stream_t stream) {
  const tecore_seq_dir_t fwd = TECORE_SEQ_FORWARD;
  TE_CHECK(group_hook_before(s, lin, fwd, stream));
  struct chunk_run c = {.gr = pat, .noop = noop, .stream = stream};
  s->chunk_op = lin->first;
  s->chunk_n = lin->chunks;
  s->chunk_done = chunk_done;
  s->chunk_arg = &c;
  tecore_result_t r = group_exec(s, lin, fwd, noop, stream, 0, 0);
  s->chunk_op = SIZE_MAX;
  s->chunk_arg = NULL;
  if (!c.forked) {   /* the GEMM ran whole (an epilogue the blocks do not take): in order */
    if (r == TECORE_SUCCESS) r = run_group(s, pat, fwd, noop, stream);
  } else {
    /* joined whatever failed (no side stream left outside a capture) */
    if (r == TECORE_SUCCESS) r = group_end(s, pat, fwd, s->side);
    tecore_result_t rj = tecore_event_record(s->ev_join, s->side);
    if (rj == TECORE_SUCCESS) rj = tecore_stream_wait_event(stream, s->ev_join);
    if (r == TECORE_SUCCESS) r = group_error(pat, fwd, rj);
  }
  if (r != TECORE_SUCCESS) return r;
  return group_end(s, lin, fwd, stream);
}

/* Activation recomputation (ops_recompute.c): before backward group k,
 * the forward groups of every unit whose trigger it is, as the last
 * forward ran them (its noop_flag: the FP8 weights it quantized are read
 * again, not quantized anew).  The hooks see them as TECORE_SEQ_RECOMPUTE:
 * a data-parallel group must not take them for a forward (nor its after
 * for gradients written), but ZeRO-3 gathers the weights they read. */
static tecore_result_t recompute_before(tecore_seq_t *s, size_t k, tecore_stream_t stream) {
  const struct te_group *g = s->plan.groups[TECORE_SEQ_FORWARD];
  const tecore_seq_dir_t rc = TECORE_SEQ_RECOMPUTE;
  for (size_t u = s->nrc; u-- > 0;) {
    const struct te_rc *c = &s->rc[u];
    if (c->trig != k) continue;
    for (size_t f = c->gf0; f < c->gf1; f++) {
      TE_CHECK(group_hook_before(s, &g[f], rc, stream));
      TE_CHECK(group_exec(s, &g[f], TECORE_SEQ_FORWARD, s->run_noop, stream, 0, 0));
      TE_CHECK(group_end(s, &g[f], rc, stream));
    }
  }
  return TECORE_SUCCESS;
}

/* Backward groups k (a Linear first) and k - 1 (a collective) overlapped
 * (te/ops.h, "Overlap"; ops_overlap.c): group k with the Linear's wgrad
 * held back; fork: the side stream waits for what the caller's stream
 * queued (the dgrad wrote the collective's input); group k - 1 on the
 * side stream; the held wgrad on the caller's stream; join: the caller's
 * stream waits for the side stream, before any later group and before
 * the pass returns.  Once forked, the join is queued whatever failed, so
 * a capture is never left with a side stream outside it; the first error
 * is returned. */
static tecore_result_t run_overlapped(tecore_seq_t *s, const struct te_group *lin,
                                      const struct te_group *coll, tecore_stream_t stream) {
  const tecore_seq_dir_t bwd = TECORE_SEQ_BACKWARD;
  s->defer_op = lin->first;
  s->pend.valid = 0;
  tecore_result_t r = group_begin(s, lin, bwd, 0, stream);
  s->defer_op = SIZE_MAX;
  if (r != TECORE_SUCCESS) {
    s->pend.valid = 0;
    return r;
  }
  if (!s->pend.valid) {   /* nothing held back (a plan without te_linear_bwd): in order */
    TE_CHECK(group_end(s, lin, bwd, stream));
    return run_group(s, coll, bwd, 0, stream);
  }
  r = tecore_event_record(s->ev_fork, stream);
  if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(s->side, s->ev_fork);
  if (r != TECORE_SUCCESS) {   /* not forked: everything on the caller's stream */
    s->pend.valid = 0;
    return group_error(lin, bwd, r);
  }
  r = run_group(s, coll, bwd, 0, s->side);
  tecore_result_t rj = tecore_event_record(s->ev_join, s->side);
  tecore_result_t rw = te_linear_wgrad_pending(s, stream);
  s->pend.valid = 0;
  if (rw == TECORE_SUCCESS) rw = group_end(s, lin, bwd, stream);
  else rw = group_error(lin, bwd, rw);
  if (rj == TECORE_SUCCESS) rj = tecore_stream_wait_event(stream, s->ev_join);
  if (r != TECORE_SUCCESS) return r;
  if (rw != TECORE_SUCCESS) return rw;
  return group_error(coll, bwd, rj);
}

/* Inference (te/ops.h): a forward that would quantize the weights is not
 * captured -- the graph would replay the quantize every time, for nothing.
 * One eager forward first; graphs captured later read the cached copies. */
static tecore_result_t check_w8_capture(const tecore_seq_t *s, tecore_stream_t stream,
                                        const char *fn) {
  if (!te_seq_infer(s) || !s->fp8_run) return TECORE_SUCCESS;
  size_t stale = SIZE_MAX;
  for (size_t i = 0; i < s->nops && stale == SIZE_MAX; i++)
    if (te_op_fp8(s, i) && !s->ops[i].w8_cached) stale = i;
  if (stale == SIZE_MAX) return TECORE_SUCCESS;
  tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
  TE_CHECK(tecore_stream_capture_status(stream, &cs));
  if (cs == TECORE_CAPTURE_NONE) return TECORE_SUCCESS;
  return TE_ERR(TECORE_ERR_CAPTURE, "%s: an inference sequence's forward quantizes the FP8 "
                "weights (op %zu's first) after tecore_seq_build, tecore_seq_set_recipe, "
                "tecore_seq_update_scales or tecore_seq_weights_changed; a capture would "
                "replay that quantize every time: run one forward outside the capture first",
                fn, stale);
}

TE_EXPORT tecore_result_t tecore_seq_forward(tecore_seq_t *s, const struct tecore_tensor *in,
                                             const struct tecore_tensor *out,
                                             tecore_devptr_t noop_flag, tecore_stream_t stream) {
  static const char fn[] = "tecore_seq_forward";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  TE_CHECK(check_act(s, in, fn, "in", 0));
  TE_CHECK(check_act(s, out, fn, "out", s->nops));
  TE_ARG(noop_flag % 4 == 0, "%s: noop_flag 0x%llx is not 4-byte aligned", fn,
         (unsigned long long)noop_flag);
  TE_CHECK(seq_alias(s, &(struct seq_arg){"out", out->data, s->nops},
                     &(struct seq_arg){"in", in->data, 0}, 0, fn));
  TE_CHECK(check_w8_capture(s, stream, fn));
  if (s->cfg.flags & TECORE_SEQ_DEFER_SAVED) {
    size_t pending = 0;
    TE_CHECK(te_saved_settle(s, &pending));
    TE_ARG(pending == 0, "%s: %zu saved tensors the backward never reads have no storage yet "
           "(TECORE_SEQ_DEFER_SAVED): give each one with tecore_seq_set_saved (ptr 0: the "
           "sequence's own)", fn, pending);
  }
  s->run_in = in->data;
  s->run_out = out->data;
  s->run_noop = noop_flag;
  s->have_forward = 0;
  const struct te_plan *p = &s->plan;
  const struct te_group *g = p->groups[TECORE_SEQ_FORWARD];
  for (size_t k = 0; k < p->ngroups[TECORE_SEQ_FORWARD]; k++) {
    tecore_result_t r;
    if (g[k].chunks > 1 && s->side) {
      r = run_chunked(s, &g[k], &g[k + 1], noop_flag, stream);
      k++;   /* the pattern ran too */
    } else {
      r = run_group(s, &g[k], TECORE_SEQ_FORWARD, noop_flag, stream);
    }
    if (r != TECORE_SUCCESS) return r;
  }
  s->have_forward = 1;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_backward(tecore_seq_t *s, const struct tecore_tensor *dy,
                                              const struct tecore_tensor *dx,
                                              tecore_stream_t stream) {
  static const char fn[] = "tecore_seq_backward";
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build)", fn);
  TE_ARG(!te_seq_infer(s), "%s: seq %p is an inference sequence (TECORE_SEQ_INFERENCE): it "
         "runs forward only, and keeps nothing a backward would read", fn, (const void *)s);
  TE_ARG(s->have_forward, "%s: no forward ran since the sequence was built or its recipe "
         "changed (tecore_seq_forward first)", fn);
  TE_ARG(dy, "%s: dy is NULL", fn);
  const int given8 = dy->dtype == TECORE_DTYPE_E4M3 || dy->dtype == TECORE_DTYPE_E5M2;
  if (given8) {
    TE_CHECK(check_grad8(s, dy, dx, fn));
  } else {
    TE_CHECK(check_act(s, dy, fn, "dy", s->nops));
    TE_CHECK(check_grad16(s, fn));
  }
  if (dx) TE_CHECK(check_act(s, dx, fn, "dx", 0));
  if (dx && !given8)
    TE_CHECK(seq_alias(s, &(struct seq_arg){"dx", dx->data, 0},
                       &(struct seq_arg){"dy", dy->data, s->nops}, s->run_in, fn));
  TE_CHECK(te_grad_fresh_check(s, stream));
  s->run_dy = given8 ? 0 : dy->data;
  s->run_dy8_col = given8 ? dy->columnwise_data : 0;
  s->run_dy8_row = given8 && s->grad8_given ? dy->data : 0;
  s->run_dx = dx ? dx->data : s->g0;
  s->cs_op = SIZE_MAX;
  s->kvb_op = SIZE_MAX;
  const struct te_plan *p = &s->plan;
  const struct te_group *g = p->groups[TECORE_SEQ_BACKWARD];
  for (size_t k = p->ngroups[TECORE_SEQ_BACKWARD]; k-- > 0;) {
    const int pair = g[k].overlap && s->side;
    tecore_result_t r = recompute_before(s, k, stream);
    if (r == TECORE_SUCCESS && pair) r = recompute_before(s, k - 1, stream);
    if (r != TECORE_SUCCESS) {
      s->run_dy8_col = s->run_dy8_row = 0;
      return r;
    }
    if (pair) {
      r = run_overlapped(s, &g[k], &g[k - 1], stream);
      k--;   /* the collective ran too */
    } else {
      r = run_group(s, &g[k], TECORE_SEQ_BACKWARD, 0, stream);
    }
    if (r != TECORE_SUCCESS) {
      s->run_dy8_col = s->run_dy8_row = 0;
      return r;
    }
  }
  s->run_dy8_col = s->run_dy8_row = 0;
  /* a marked gradient no writer took (none in libtecore's own kinds):
   * zeros, as a fill in zero_grad would have left */
  return te_grad_fill_fresh(s, stream);
}
