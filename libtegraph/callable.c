/* SPDX-License-Identifier: Apache-2.0 */
/* callable.c -- graphed callables: creation (static buffers from the pool,
 * warmup between the hooks, capture of every pass in the schedule's order,
 * instantiation), the analysis that decides which buffers can be rebound
 * in place, reset (with an optional re-capture and in-place update),
 * destroy and the queries.  Replays are in replay.c. */
#include "callable.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__thread int tg_thread_capturing;

static const char *pass_name(int p) {
  static const char *names[] = {"forward", "backward", "backward_dw"};
  return p >= 0 && p < TG_NPASS ? names[p] : "?";
}

static const char *kind_name(tegraph_slot_kind_t k) {
  switch (k) {
  case TEGRAPH_SLOT_INPUT: return "input";
  case TEGRAPH_SLOT_KEYWORD: return "keyword tensor";
  case TEGRAPH_SLOT_OUTPUT: return "output";
  case TEGRAPH_SLOT_GRAD_OUTPUT: return "output gradient";
  case TEGRAPH_SLOT_GRAD_INPUT: return "input gradient";
  }
  return "?";
}

/* Fails with TEGRAPH_ERR_STATE during the capture of a callable. */
static tegraph_result_t tg_callable_usable(struct tegraph_callable *c, const char *fn) {
  if (c->capturing || tg_thread_capturing)
    return TG_ERR(TEGRAPH_ERR_STATE,
                  "%s: illegal during the capture of a callable (called from one of its "
                  "functions?)", fn);
  return TEGRAPH_SUCCESS;
}

tegraph_result_t tg_callable_replayable(struct tegraph_callable *c, const char *fn) {
  TG_CHECK(tg_callable_usable(c, fn));
  return c->user_alive ? c->user_alive(c->user, fn) : TEGRAPH_SUCCESS;
}

struct tg_slot *tg_slot_find(struct tegraph_callable *c, tegraph_slot_kind_t kind, size_t index) {
  for (size_t i = 0; i < c->nslots; i++)
    if (c->slots[i].kind == kind && c->slots[i].index == index) return &c->slots[i];
  return NULL;
}

/* ---- validation ----------------------------------------------------------------- */

/* A tensor that can describe a slot: plain, known dtype, sane shape. */
static tegraph_result_t check_plain(const struct tecore_tensor *t, const char *fn,
                                    const char *what) {
  TG_ARG(tecore_dtype_size(t->dtype) > 0, "%s: %s: unknown dtype %d", fn, what, (int)t->dtype);
  TG_ARG(t->scaling == TECORE_SCALING_NONE,
         "%s: %s: scaling mode %s; graphed callables take plain tensors (TECORE_SCALING_NONE)",
         fn, what, tecore_scaling_name(t->scaling));
  TG_ARG(t->ndim >= 0 && t->ndim <= TECORE_TENSOR_MAX_DIMS, "%s: %s: ndim %d outside 0..%d", fn,
         what, t->ndim, TECORE_TENSOR_MAX_DIMS);
  TG_ARG(!t->columnwise_data, "%s: %s: columnwise_data is set; only rowwise data is captured",
         fn, what);
  /* the slot's bytes: a product that wrapped gave a tiny pool buffer that
   * the forward then wrote past */
  size_t bytes = tecore_dtype_size(t->dtype);
  for (int d = 0; d < t->ndim; d++)
    TG_ARG(!__builtin_mul_overflow(bytes, t->shape[d], &bytes) && bytes <= SIZE_MAX / 2,
           "%s: %s: the shape's byte count overflows", fn, what);
  TG_ARG(t->data % tecore_dtype_size(t->dtype) == 0,
         "%s: %s: data 0x%llx is not aligned to its %zu-byte elements", fn, what,
         (unsigned long long)t->data, tecore_dtype_size(t->dtype));
  return TEGRAPH_SUCCESS;
}

/* dn: the descriptor as the caller wrote it ("desc" for
 * tegraph_callable_create, "descs[2]" for tegraph_callables_create) */
static tegraph_result_t check_desc(const struct tegraph_callable_desc *d, const char *dn,
                                   const char *fn) {
  char what[96];
  TG_ARG(d->forward, "%s: %s.forward is NULL", fn, dn);
  TG_ARG(!d->backward_dw || d->backward, "%s: %s: backward_dw without backward", fn, dn);
  TG_ARG(d->ninputs == 0 || d->sample_inputs, "%s: %s.sample_inputs is NULL", fn, dn);
  TG_ARG(d->nkw == 0 || (d->kw_names && d->sample_kw),
         "%s: %s: nkw is %zu but kw_names or sample_kw is NULL", fn, dn, d->nkw);
  TG_ARG(d->noutputs > 0 && d->outputs, "%s: %s: a callable needs at least one output",
         fn, dn);
  TG_ARG(d->num_warmup >= 0, "%s: %s.num_warmup %d is negative", fn, dn, d->num_warmup);
  TG_ARG(d->capture_mode >= TECORE_CAPTURE_GLOBAL && d->capture_mode <= TECORE_CAPTURE_RELAXED,
         "%s: %s.capture_mode %d is unknown", fn, dn, (int)d->capture_mode);
  unsigned inst = TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH | TEGRAPH_INSTANTIATE_UPLOAD |
                  TEGRAPH_INSTANTIATE_USE_NODE_PRIORITY;
  TG_ARG(!(d->instantiate_flags & ~inst), "%s: %s.instantiate_flags 0x%x unknown", fn, dn,
         d->instantiate_flags & ~inst);
  TG_ARG(!(d->flags & ~TEGRAPH_CALLABLE_NO_REBIND), "%s: %s.flags 0x%x unknown", fn, dn,
         d->flags & ~TEGRAPH_CALLABLE_NO_REBIND);
  for (size_t k = 0; k < d->ninputs; k++) {
    snprintf(what, sizeof what, "%s.sample_inputs[%zu]", dn, k);
    TG_CHECK(check_plain(&d->sample_inputs[k], fn, what));
  }
  for (size_t k = 0; k < d->nkw; k++) {
    TG_ARG(d->kw_names[k] && d->kw_names[k][0], "%s: %s.kw_names[%zu] is NULL or empty",
           fn, dn, k);
    for (size_t j = 0; j < k; j++)
      TG_ARG(strcmp(d->kw_names[j], d->kw_names[k]) != 0,
             "%s: %s: keyword tensor name '%s' is given twice", fn, dn, d->kw_names[k]);
    snprintf(what, sizeof what, "%s.sample_kw[%zu] ('%s')", dn, k, d->kw_names[k]);
    TG_CHECK(check_plain(&d->sample_kw[k], fn, what));
  }
  for (size_t k = 0; k < d->noutputs; k++) {
    snprintf(what, sizeof what, "%s.outputs[%zu]", dn, k);
    TG_CHECK(check_plain(&d->outputs[k], fn, what));
  }
  return TEGRAPH_SUCCESS;
}

static int has_pass(const struct tegraph_callable_desc *d, int p) {
  return p == TEGRAPH_PASS_FORWARD ? 1 : p == TEGRAPH_PASS_BACKWARD ? d->backward != NULL
                                                                     : d->backward_dw != NULL;
}

static tegraph_result_t check_order(const struct tegraph_callable_desc *d, size_t n,
                                    const struct tegraph_schedule_entry *order, size_t norder,
                                    const char *fn) {
  size_t want = 0;
  for (size_t i = 0; i < n; i++)
    for (int p = 0; p < TG_NPASS; p++) want += (size_t)has_pass(&d[i], p);
  TG_ARG(norder == want, "%s: order has %zu entries; the callables have %zu passes", fn, norder,
         want);
  long *pos = malloc(n * TG_NPASS * sizeof *pos);
  if (!pos) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  for (size_t i = 0; i < n * TG_NPASS; i++) pos[i] = -1;
  tegraph_result_t res = TEGRAPH_SUCCESS;
  for (size_t e = 0; e < norder && res == TEGRAPH_SUCCESS; e++) {
    size_t ci = order[e].callable;
    int p = (int)order[e].pass;
    if (ci >= n) res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: order[%zu].callable %zu outside [0, %zu)",
                              fn, e, ci, n);
    else if (p < 0 || p >= TG_NPASS)
      res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: order[%zu].pass %d is unknown", fn, e, p);
    else if (!has_pass(&d[ci], p))
      res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: order[%zu]: callable %zu has no %s function", fn, e,
                   ci, pass_name(p));
    else if (pos[ci * TG_NPASS + (size_t)p] >= 0)
      res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: order[%zu]: callable %zu's %s is scheduled twice",
                   fn, e, ci, pass_name(p));
    else if (p > 0 && pos[ci * TG_NPASS + (size_t)p - 1] < 0)
      res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: order[%zu]: callable %zu's %s comes before its %s",
                   fn, e, ci, pass_name(p), pass_name(p - 1));
    else pos[ci * TG_NPASS + (size_t)p] = (long)e;
  }
  free(pos);
  return res;
}

/* ---- building one callable -------------------------------------------------------- */

static tegraph_result_t slot_buffer(struct tegraph_callable *c, struct tg_slot *s,
                                    tegraph_slot_kind_t kind, size_t index, struct tecore_tensor *t,
                                    const struct tecore_tensor *like, const char *fn) {
  s->kind = kind;
  s->index = index;
  *t = *like;
  t->data = 0;
  t->amax = t->scale = t->scale_inv = t->columnwise_scale_inv = 0;
  s->t = t;
  s->bytes = tg_tensor_bytes(t);
  TG_CHECK(tegraph_mempool_alloc(c->pool, s->bytes ? s->bytes : 1, &t->data));
  s->bound = t->data;
  s->rebindable = 1;
  if (like->data && s->bytes) {
    /* the sample's values, for warmup and capture */
    TG_CORE(tecore_memcpy_async(t->data, like->data, s->bytes, c->stream), fn);
  } else if (s->bytes) {
    TG_CORE(tecore_memset_d8_async(t->data, 0, s->bytes, c->stream), fn);
  }
  return TEGRAPH_SUCCESS;
}

static void callable_free(struct tegraph_callable *c) {
  if (!c) return;
  for (int p = 0; p < TG_NPASS; p++) {
    tg_nodes_free(c->pass[p].nodes);
    if (c->pass[p].exec) (void)tecore_graph_exec_destroy(c->pass[p].exec);
    if (c->pass[p].graph) (void)tecore_graph_destroy(c->pass[p].graph);
    if (c->pass[p].inst) (void)tecore_graph_destroy(c->pass[p].inst);
  }
  if (c->stream) (void)tecore_stream_synchronize(c->stream);
  for (size_t i = 0; i < c->nslots; i++) {
    if (c->slots[i].t && c->slots[i].t->data) (void)tegraph_mempool_free(c->pool, c->slots[i].t->data);
    free(c->slots[i].refs);
  }
  if (c->noop) (void)tegraph_mempool_free(c->pool, c->noop);
  free(c->slots);
  for (size_t i = 0; i < c->nkw; i++) free(c->kw_names[i]);
  free(c->kw_names);
  free(c->in);
  free(c->kw);
  free(c->out);
  free(c->gout);
  free(c->gin);
  free(c->needs_grad);
  if (c->ev_fork) (void)tecore_event_destroy(c->ev_fork);
  if (c->ev_done) (void)tecore_event_destroy(c->ev_done);
  if (c->stream) (void)tecore_stream_destroy(c->stream);
  if (c->pool) tg_mempool_use(c->pool, -1); /* the last user frees a pool of its own */
  te_handle_del(c);
  free(c);
}

static tegraph_result_t callable_new(const struct tegraph_callable_desc *d, size_t idx,
                                     tegraph_mempool_t *pool, struct tegraph_callable **out,
                                     const char *fn) {
  struct tegraph_callable *c = calloc(1, sizeof *c);
  if (!c) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  c->fn[TEGRAPH_PASS_FORWARD] = d->forward;
  c->fn[TEGRAPH_PASS_BACKWARD] = d->backward;
  c->fn[TEGRAPH_PASS_BACKWARD_DW] = d->backward_dw;
  c->user = d->user;
  c->user_free = d->user_free;
  c->pre_warmup = d->pre_warmup;
  c->post_warmup = d->post_warmup;
  c->num_warmup = d->num_warmup;
  c->mode = d->capture_mode;
  c->inst_flags = d->instantiate_flags;
  c->flags = d->flags;
  c->index = idx;
  c->pool = pool;
  tg_mempool_use(pool, +1);
  c->nin = d->ninputs;
  c->nkw = d->nkw;
  c->nout = d->noutputs;
  int bwd = d->backward != NULL;
  c->nslots = c->nin + c->nkw + c->nout + (bwd ? c->nout + c->nin : 0);
  c->in = calloc(c->nin ? c->nin : 1, sizeof *c->in);
  c->kw = calloc(c->nkw ? c->nkw : 1, sizeof *c->kw);
  c->out = calloc(c->nout, sizeof *c->out);
  c->gout = calloc(c->nout, sizeof *c->gout);
  c->gin = calloc(c->nin ? c->nin : 1, sizeof *c->gin);
  c->needs_grad = calloc(c->nin ? c->nin : 1, 1);
  c->kw_names = calloc(c->nkw ? c->nkw : 1, sizeof *c->kw_names);
  c->slots = calloc(c->nslots, sizeof *c->slots);
  if (!c->in || !c->kw || !c->out || !c->gout || !c->gin || !c->needs_grad || !c->kw_names ||
      !c->slots)
    goto nomem;
  for (size_t k = 0; k < c->nkw; k++)
    if (!(c->kw_names[k] = strdup(d->kw_names[k]))) goto nomem;
  for (size_t k = 0; k < c->nin; k++)
    c->needs_grad[k] = d->input_needs_grad ? d->input_needs_grad[k] != 0 : 1;
  TG_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &c->stream), fn);
  TG_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &c->ev_fork), fn);
  TG_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &c->ev_done), fn);

  size_t s = 0;
#define SLOT_OR_FAIL(call)                                                     \
  do {                                                                         \
    res = (call);                                                              \
    if (res != TEGRAPH_SUCCESS) goto fail;                                     \
  } while (0)
  for (size_t k = 0; k < c->nin; k++, s++)
    SLOT_OR_FAIL(slot_buffer(c, &c->slots[s], TEGRAPH_SLOT_INPUT, k, &c->in[k],
                             &d->sample_inputs[k], fn));
  for (size_t k = 0; k < c->nkw; k++, s++) {
    c->slots[s].name = c->kw_names[k];
    SLOT_OR_FAIL(slot_buffer(c, &c->slots[s], TEGRAPH_SLOT_KEYWORD, k, &c->kw[k],
                             &d->sample_kw[k], fn));
  }
  for (size_t k = 0; k < c->nout; k++, s++) {
    struct tecore_tensor like = d->outputs[k];
    like.data = 0;
    SLOT_OR_FAIL(slot_buffer(c, &c->slots[s], TEGRAPH_SLOT_OUTPUT, k, &c->out[k], &like, fn));
  }
  if (bwd) {
    for (size_t k = 0; k < c->nout; k++, s++)
      SLOT_OR_FAIL(slot_buffer(c, &c->slots[s], TEGRAPH_SLOT_GRAD_OUTPUT, k, &c->gout[k],
                               &c->out[k], fn));
    for (size_t k = 0; k < c->nin; k++, s++) {
      if (c->needs_grad[k]) {
        SLOT_OR_FAIL(slot_buffer(c, &c->slots[s], TEGRAPH_SLOT_GRAD_INPUT, k, &c->gin[k],
                                 &c->in[k], fn));
      } else { /* no buffer: data 0 tells the backward function so */
        c->slots[s].kind = TEGRAPH_SLOT_GRAD_INPUT;
        c->slots[s].index = k;
        c->gin[k] = c->in[k];
        c->gin[k].data = 0;
        c->slots[s].t = &c->gin[k];
        c->slots[s].rebindable = 1;
      }
    }
  }
#undef SLOT_OR_FAIL
  res = tegraph_mempool_alloc(c->pool, 4, &c->noop);
  if (res != TEGRAPH_SUCCESS) goto fail;
  TG_CORE(tecore_memset_d32_async(c->noop, 0, 1, c->stream), fn);
  TG_CORE(tecore_stream_synchronize(c->stream), fn);
  *out = c;
  return TEGRAPH_SUCCESS;
nomem:
  res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
fail:
  callable_free(c);
  return res;
}

/* The io a pass of c sees (pointing at the static buffers). */
static void io_for(const struct tegraph_callable *c, int pass, tegraph_phase_t phase,
                   struct tegraph_io *io) {
  memset(io, 0, sizeof *io);
  io->phase = phase;
  io->inputs = c->in;
  io->ninputs = c->nin;
  io->kw_names = (const char *const *)c->kw_names;
  io->kw = c->kw;
  io->nkw = c->nkw;
  io->outputs = c->out;
  io->noutputs = c->nout;
  io->noop_flag = c->noop;
  if (pass != TEGRAPH_PASS_FORWARD) io->grad_outputs = c->gout;
  if (pass == TEGRAPH_PASS_BACKWARD) io->grad_inputs = c->gin;
}

/* Calls the function of pass; a failure keeps the function's detail. */
static tegraph_result_t call_pass(struct tegraph_callable *c, int pass, tegraph_phase_t phase,
                                  const char *fn) {
  struct tegraph_io io;
  io_for(c, pass, phase, &io);
  if (pass == TEGRAPH_PASS_FORWARD) {
    /* the no-op flag is 0 in warmup and at capture: quantize for real; in
     * the graph this memset is the node replays update */
    tecore_result_t r = tecore_memset_d32_async(c->noop, 0, 1, c->stream);
    if (r != TECORE_SUCCESS) return tg_core(r, fn);
  }
  tecore_result_t r = c->fn[pass](c->user, c->stream, &io);
  if (r != TECORE_SUCCESS) {
    char what[160];
    snprintf(what, sizeof what, "%s: callable %zu's %s function failed during %s", fn, c->index,
             pass_name(pass), phase == TEGRAPH_PHASE_WARMUP ? "warmup" : "capture");
    tegraph_result_t res = tg_core(r, what);
    return phase == TEGRAPH_PHASE_CAPTURE && res != TEGRAPH_ERR_NOMEM ? TEGRAPH_ERR_CAPTURE : res;
  }
  return TEGRAPH_SUCCESS;
}

/* Captures pass of c into a new graph. */
/* 1 when g has a node that computes or moves data (not only the library's
 * own: event and empty nodes, the memset of the no-op flag); 1 too when it
 * cannot be told. */
static int does_work(tecore_graph_t g, tecore_devptr_t noop) {
  size_t n = 0;
  if (tecore_graph_node_count(g, &n) != TECORE_SUCCESS || n == 0) return n != 0;
  struct tecore_graph_node_desc *d = malloc(n * sizeof *d);
  if (!d) return 1;
  size_t got = 0;
  int work = 1;
  if (tecore_graph_nodes(g, d, n, &got) == TECORE_SUCCESS) {
    work = 0;
    for (size_t i = 0; i < got && !work; i++)
      work = d[i].type != TECORE_GRAPH_NODE_EMPTY && d[i].type != TECORE_GRAPH_NODE_WAIT_EVENT &&
             d[i].type != TECORE_GRAPH_NODE_EVENT_RECORD &&
             !(d[i].type == TECORE_GRAPH_NODE_MEMSET && d[i].dst == noop);
  }
  free(d);
  return work;
}

static tegraph_result_t capture_pass(struct tegraph_callable *c, int pass, tecore_graph_t *graph,
                                     const char *fn) {
  *graph = NULL;
  TG_CORE(tecore_stream_begin_capture(c->stream, c->mode), fn);
  c->capturing = 1;
  tg_thread_capturing = 1;
  tegraph_result_t res = call_pass(c, pass, TEGRAPH_PHASE_CAPTURE, fn);
  tg_thread_capturing = 0;
  c->capturing = 0;
  char saved[512] = "";
  if (res != TEGRAPH_SUCCESS) snprintf(saved, sizeof saved, "%s", tecore_last_error());
  tecore_graph_t g = NULL;
  tecore_result_t r = tecore_stream_end_capture(c->stream, &g);
  if (res != TEGRAPH_SUCCESS) {
    if (g) (void)tecore_graph_destroy(g);
    tecore_set_error("%s", saved);
    return res;
  }
  if (r != TECORE_SUCCESS) {
    char what[128];
    snprintf(what, sizeof what, "%s: capturing callable %zu's %s", fn, c->index, pass_name(pass));
    (void)tg_core(r, what);
    return TEGRAPH_ERR_CAPTURE;
  }
  /* A forward produces its outputs: a forward graph with no node means the
   * work went to a stream that was not capturing (it ran eagerly, now, and
   * replays would do nothing). */
  if (pass == TEGRAPH_PASS_FORWARD && !does_work(g, c->noop)) {
    (void)tecore_graph_destroy(g);
    return TG_ERR(TEGRAPH_ERR_CAPTURE,
                  "%s: callable %zu's forward captured nothing: it must enqueue its work on the "
                  "stream it is given (or on streams forked from it through events and joined "
                  "back); work on another stream ran eagerly instead of being captured",
                  fn, c->index);
  }
  /* after the check above, which tells the no-op flag's memset from work */
  tegraph_result_t mres = tg_graph_to_kernels(g, fn);
  if (mres != TEGRAPH_SUCCESS) {
    (void)tecore_graph_destroy(g);
    return mres;
  }
  *graph = g;
  return TEGRAPH_SUCCESS;
}

/* ---- analysis: which slots can be rebound ------------------------------------------ */

static int add_ref(struct tg_slot *s, struct tg_ref r) {
  if (s->nrefs == s->capref) {
    size_t ncap = s->capref ? s->capref * 2 : 8;
    struct tg_ref *nr = realloc(s->refs, ncap * sizeof *nr);
    if (!nr) return -1;
    s->refs = nr;
    s->capref = ncap;
  }
  s->refs[s->nrefs++] = r;
  return 0;
}

static void not_rebindable(struct tg_slot *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void not_rebindable(struct tg_slot *s, const char *fmt, ...) {
  if (!s->rebindable) return; /* keep the first reason */
  s->rebindable = 0;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(s->why, sizeof s->why, fmt, ap);
  va_end(ap);
}

/* Range [a, a+n) against [lo, lo+len): 0 apart, 1 inside, 2 partly. */
static int overlap(uint64_t a, uint64_t n, uint64_t lo, uint64_t len) {
  if (!len || !n || a + n <= lo || a >= lo + len) return 0;
  return a >= lo && a + n <= lo + len ? 1 : 2;
}

static tegraph_result_t analyze_slot(struct tegraph_callable *c, struct tg_slot *s,
                                     const char *fn) {
  s->nrefs = 0;
  s->rebindable = 1;
  s->why[0] = '\0';
  if (!s->t->data) return TEGRAPH_SUCCESS;
  uint64_t lo = s->t->data, len = s->bytes;
  for (int p = 0; p < TG_NPASS; p++) {
    struct tg_nodes *n = c->pass[p].nodes;
    if (!c->pass[p].present || !n) continue;
    if (n->opaque)
      not_rebindable(s, "the %s graph has %zu opaque node(s) (%s)", pass_name(p), n->opaque,
                     n->opaque_why);
    for (size_t k = 0; k < n->nk; k++) {
      const struct tg_knode *kn = &n->k[k];
      for (unsigned q = 0; q < kn->def->nparams; q++) {
        const unsigned char *v = kn->vals + kn->off[q];
        size_t size = kn->def->param_size[q];
        if (kn->def->param_is_ptr[q] && size == 8) {
          uint64_t a;
          memcpy(&a, v, 8);
          if (overlap(a, 1, lo, len) &&
              add_ref(s, (struct tg_ref){.pass = (unsigned char)p, .kind = TG_REF_KPARAM,
                                         .param = q, .item = k, .offset = a - lo}) != 0)
            return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
          continue;
        }
        /* an address inside a value the registry does not call a pointer
         * (a struct holding pointers): it could not be rewritten safely */
        for (size_t w = 0; w + 8 <= size; w += 8) {
          uint64_t a;
          memcpy(&a, v + w, 8);
          if (overlap(a, 1, lo, len))
            not_rebindable(s, "kernel %s (%s graph, node %zu) holds its address in parameter %u, "
                           "which is not a pointer parameter", kn->def->name, pass_name(p),
                           kn->node, q);
        }
      }
    }
    for (size_t i = 0; i < n->count; i++) {
      const struct tecore_graph_node_desc *d = &n->desc[i];
      if (d->type == TECORE_GRAPH_NODE_MEMCPY && d->bytes) {
        int os = overlap(d->src, d->bytes, lo, len), od = overlap(d->dst, d->bytes, lo, len);
        if (os == 2 || od == 2)
          not_rebindable(s, "a memcpy (%s graph, node %zu) covers it only in part", pass_name(p), i);
        if ((os == 1 && add_ref(s, (struct tg_ref){.pass = (unsigned char)p,
                                                   .kind = TG_REF_COPY_SRC, .item = i,
                                                   .offset = d->src - lo}) != 0) ||
            (od == 1 && add_ref(s, (struct tg_ref){.pass = (unsigned char)p,
                                                   .kind = TG_REF_COPY_DST, .item = i,
                                                   .offset = d->dst - lo}) != 0))
          return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
      } else if (d->type == TECORE_GRAPH_NODE_MEMSET && d->count) {
        int o = overlap(d->dst, (uint64_t)d->count * d->elem_size, lo, len);
        if (o == 2)
          not_rebindable(s, "a memset (%s graph, node %zu) covers it only in part", pass_name(p), i);
        if (o == 1 && add_ref(s, (struct tg_ref){.pass = (unsigned char)p, .kind = TG_REF_MEMSET,
                                                 .item = i, .offset = d->dst - lo}) != 0)
          return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
      }
    }
  }
  if (c->flags & TEGRAPH_CALLABLE_NO_REBIND)
    not_rebindable(s, "the callable was created with TEGRAPH_CALLABLE_NO_REBIND");
  return TEGRAPH_SUCCESS;
}

/* Loads the node tables, finds the no-op flag's node, analyzes the slots. */
static tegraph_result_t analyze(struct tegraph_callable *c, const char *fn) {
  for (int p = 0; p < TG_NPASS; p++) {
    if (!c->pass[p].present) continue;
    tg_nodes_free(c->pass[p].nodes);
    c->pass[p].nodes = NULL;
    TG_CHECK(tg_nodes_load(c->pass[p].graph, &c->pass[p].nodes, fn));
    if (c->pass[p].inst) TG_CHECK(tg_nodes_rehandle(c->pass[p].nodes, c->pass[p].inst, fn));
  }
  const struct tg_nodes *f = c->pass[TEGRAPH_PASS_FORWARD].nodes;
  size_t i = 0;
  while (i < f->count && !(f->desc[i].type == TECORE_GRAPH_NODE_MEMSET &&
                           f->desc[i].dst == c->noop && f->desc[i].count == 1))
    i++;
  c->noop_knode = -1;
  if (i < f->count) {
    c->noop_node = i;
    c->noop_value = f->desc[i].value;
  } else {
    /* the memset became a te_memset kernel node: dst, value, elem_size, n
     * (kernels/common/elementwise_params.h) */
    int id = -1;
    (void)tecore_kernel_find("te_memset", &id);
    for (size_t k = 0; k < f->nk && c->noop_knode < 0; k++) {
      const struct tg_knode *kn = &f->k[k];
      tecore_devptr_t dst;
      unsigned long long cnt;
      if (kn->kernel_id != id || kn->def->nparams != 4) continue;
      memcpy(&dst, kn->vals + kn->off[0], sizeof dst);
      memcpy(&cnt, kn->vals + kn->off[3], sizeof cnt);
      if (dst != c->noop || cnt != 1) continue;
      c->noop_knode = (long)k;
      c->noop_node = kn->node;
      memcpy(&c->noop_value, kn->vals + kn->off[1], sizeof c->noop_value);
    }
    if (c->noop_knode < 0)
      return TG_ERR(TEGRAPH_ERR_DEVICE, "%s: callable %zu: the forward graph has no memset (or "
                    "te_memset kernel) node for the no-op flag", fn, c->index);
  }
  for (size_t s = 0; s < c->nslots; s++) TG_CHECK(analyze_slot(c, &c->slots[s], fn));
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t instantiate_pass(struct tegraph_callable *c, int p, const char *fn) {
  TG_CORE(tecore_graph_instantiate_with_flags(&c->pass[p].exec, c->pass[p].graph, c->inst_flags,
                                              c->stream),
          fn);
  return TEGRAPH_SUCCESS;
}

/* ---- rebinding ---------------------------------------------------------------------- */

static tegraph_result_t ref_point(struct tegraph_callable *c, const struct tg_ref *r,
                                  tecore_devptr_t base, const char *fn) {
  struct tg_pass *p = &c->pass[r->pass];
  tecore_devptr_t a = base + r->offset;
  switch (r->kind) {
  case TG_REF_KPARAM:
    return tg_knode_set(p->exec, &p->nodes->k[r->item], r->param, &a, fn);
  case TG_REF_COPY_SRC:
    return tg_copy_set(p->exec, p->nodes, r->item, p->nodes->desc[r->item].dst, a, fn);
  case TG_REF_COPY_DST:
    return tg_copy_set(p->exec, p->nodes, r->item, a, p->nodes->desc[r->item].src, fn);
  default:
    return tg_memset_set(p->exec, p->nodes, r->item, a, p->nodes->desc[r->item].value, fn);
  }
}

tegraph_result_t tg_slot_rebind(struct tegraph_callable *c, struct tg_slot *s,
                                tecore_devptr_t addr, const char *fn) {
  if (addr == s->bound) return TEGRAPH_SUCCESS;
  for (size_t i = 0; i < s->nrefs; i++) {
    tegraph_result_t res = ref_point(c, &s->refs[i], addr, fn);
    if (res != TEGRAPH_SUCCESS) {
      char saved[400];
      snprintf(saved, sizeof saved, "%s", tecore_last_error());
      for (size_t j = 0; j < i; j++) (void)ref_point(c, &s->refs[j], s->bound, fn);
      not_rebindable(s, "a per-node update failed: %.120s", saved);
      tecore_set_error("%s", saved);
      return res;
    }
  }
  s->bound = addr;
  return TEGRAPH_SUCCESS;
}

/* Every slot back to its static buffer. */
static tegraph_result_t unbind_all(struct tegraph_callable *c, const char *fn) {
  for (size_t i = 0; i < c->nslots; i++)
    if (c->slots[i].t->data && c->slots[i].bound != c->slots[i].t->data)
      TG_CHECK(tg_slot_rebind(c, &c->slots[i], c->slots[i].t->data, fn));
  return TEGRAPH_SUCCESS;
}

/* ---- creation --------------------------------------------------------------------------- */

static tegraph_result_t run_hooks(struct tegraph_callable **cs, size_t n, int post,
                                  const char *fn) {
  for (size_t i = 0; i < n; i++) {
    tegraph_hook h = post ? cs[i]->post_warmup : cs[i]->pre_warmup;
    if (!h) continue;
    tecore_result_t r = h(cs[i]->user);
    if (r != TECORE_SUCCESS) {
      char what[96];
      snprintf(what, sizeof what, "%s: callable %zu's %s-warmup hook failed", fn, i,
               post ? "post" : "pre");
      return tg_core(r, what);
    }
  }
  return TEGRAPH_SUCCESS;
}

/* Both public entry points, fn naming the one the caller called and arg
 * its descriptor argument ("desc": one, "descs": an array). */
static tegraph_result_t callables_create(const struct tegraph_callable_desc *descs, size_t n,
                                         const struct tegraph_schedule_entry *order, size_t norder,
                                         tegraph_mempool_t *pool, tegraph_callable_t **out,
                                         const char *fn, const char *arg) {
  TG_ARG(descs, "%s: descs is NULL", fn);
  TG_ARG(n > 0, "%s: n is 0", fn);
  TG_ARG(out, "%s: out is NULL", fn);
  TG_ARG(order || norder == 0, "%s: order is NULL but norder is %zu", fn, norder);
  /* a destroyed pool is not read (fuzz-api: its lock was taken in freed
   * memory, and the call hung) */
  TG_ARG(!pool || te_handle_live(pool), "%s: pool %p is not a live pool (destroyed?)", fn,
         (void *)pool);
  if (tg_thread_capturing)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: illegal during the capture of a callable (called from "
                  "one of its functions?)", fn);
  for (size_t i = 0; i < n; i++) {
    char dn[32];
    /* one callable: the caller wrote desc, not descs[0] */
    if (strcmp(arg, "desc") == 0) snprintf(dn, sizeof dn, "desc");
    else snprintf(dn, sizeof dn, "%s[%zu]", arg, i);
    TG_CHECK(check_desc(&descs[i], dn, fn));
  }
  struct tegraph_schedule_entry *dflt = NULL;
  if (!order) {
    dflt = malloc(n * TG_NPASS * sizeof *dflt);
    if (!dflt) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    norder = 0;
    for (size_t i = 0; i < n; i++) dflt[norder++] = (struct tegraph_schedule_entry){i, 0};
    for (size_t i = n; i-- > 0;)
      if (descs[i].backward) dflt[norder++] = (struct tegraph_schedule_entry){i, 1};
    for (size_t i = 0; i < n; i++)
      if (descs[i].backward_dw) dflt[norder++] = (struct tegraph_schedule_entry){i, 2};
    order = dflt;
  }
  tegraph_result_t res = check_order(descs, n, order, norder, fn);
  struct tegraph_callable **cs = NULL;
  int own_pool = 0;
  if (res != TEGRAPH_SUCCESS) goto out;
  /* Warmup and capture run on streams of the library's and read what the
   * caller's earlier work may still be writing (weights, FP8 scales and
   * amaxes, the samples): wait for the whole device first, once. */
  {
    tecore_result_t r = tecore_ctx_synchronize();
    if (r != TECORE_SUCCESS) {
      res = tg_core(r, fn);
      goto out;
    }
  }
  cs = calloc(n, sizeof *cs);
  if (!cs) {
    res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    goto out;
  }
  if (!pool) {
    res = tegraph_mempool_create(0, &pool);
    if (res != TEGRAPH_SUCCESS) goto out;
    own_pool = 1;
  }
  for (size_t i = 0; i < n && res == TEGRAPH_SUCCESS; i++) {
    res = callable_new(&descs[i], i, pool, &cs[i], fn);
    /* from the first user on, a pool made here goes with its last user */
    if (res == TEGRAPH_SUCCESS && i == 0 && own_pool) {
      tg_mempool_autofree(pool);
      own_pool = 0;
    }
  }
  if (res != TEGRAPH_SUCCESS) goto out;

  /* warmup, in schedule order, between the hooks */
  int max_warm = 0;
  for (size_t i = 0; i < n; i++)
    if (cs[i]->num_warmup > max_warm) max_warm = cs[i]->num_warmup;
  if (max_warm > 0) {
    res = run_hooks(cs, n, 0, fn);
    for (int w = 0; w < max_warm && res == TEGRAPH_SUCCESS; w++)
      for (size_t e = 0; e < norder && res == TEGRAPH_SUCCESS; e++) {
        struct tegraph_callable *c = cs[order[e].callable];
        if (w < c->num_warmup) res = call_pass(c, (int)order[e].pass, TEGRAPH_PHASE_WARMUP, fn);
      }
    for (size_t i = 0; i < n && res == TEGRAPH_SUCCESS; i++) {
      tecore_result_t r = tecore_stream_synchronize(cs[i]->stream);
      if (r != TECORE_SUCCESS) res = tg_core(r, fn);
    }
    if (res == TEGRAPH_SUCCESS) res = run_hooks(cs, n, 1, fn);
    if (res != TEGRAPH_SUCCESS) goto out;
  }
  /* capture, in schedule order */
  for (size_t e = 0; e < norder && res == TEGRAPH_SUCCESS; e++) {
    struct tegraph_callable *c = cs[order[e].callable];
    int p = (int)order[e].pass;
    res = capture_pass(c, p, &c->pass[p].graph, fn);
    if (res == TEGRAPH_SUCCESS) c->pass[p].present = 1;
  }
  for (size_t i = 0; i < n && res == TEGRAPH_SUCCESS; i++) {
    for (int p = 0; p < TG_NPASS && res == TEGRAPH_SUCCESS; p++)
      if (cs[i]->pass[p].present) res = instantiate_pass(cs[i], p, fn);
    if (res == TEGRAPH_SUCCESS) res = analyze(cs[i], fn);
    if (res == TEGRAPH_SUCCESS) {
      tecore_result_t r = tecore_stream_synchronize(cs[i]->stream);
      if (r != TECORE_SUCCESS) res = tg_core(r, fn);
    }
  }
out:
  if (res != TEGRAPH_SUCCESS) {
    char saved[512];
    snprintf(saved, sizeof saved, "%s", tecore_last_error());
    if (cs)
      for (size_t i = 0; i < n; i++) callable_free(cs[i]);
    if (own_pool && pool) (void)tegraph_mempool_destroy(pool); /* no callable took it */
    tecore_set_error("%s", saved);
  } else {
    for (size_t i = 0; i < n && res == TEGRAPH_SUCCESS; i++)
      if (te_handle_add(cs[i]) != 0) res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    if (res != TEGRAPH_SUCCESS)
      for (size_t i = 0; i < n; i++) callable_free(cs[i]);
    else
      for (size_t i = 0; i < n; i++) out[i] = cs[i];
  }
  free(cs);
  free(dflt);
  return res;
}

TE_EXPORT tegraph_result_t tegraph_callables_create(const struct tegraph_callable_desc *descs,
                                                    size_t n,
                                                    const struct tegraph_schedule_entry *order,
                                                    size_t norder, tegraph_mempool_t *pool,
                                                    tegraph_callable_t **out) {
  return callables_create(descs, n, order, norder, pool, out, "tegraph_callables_create",
                          "descs");
}

TE_EXPORT tegraph_result_t tegraph_callable_create(const struct tegraph_callable_desc *desc,
                                                   tegraph_mempool_t *pool,
                                                   tegraph_callable_t **out) {
  TG_ARG(desc, "tegraph_callable_create: desc is NULL");
  TG_ARG(out, "tegraph_callable_create: out is NULL");
  return callables_create(desc, 1, NULL, 0, pool, out, "tegraph_callable_create", "desc");
}

/* Waits for the last replay of c. */
static tegraph_result_t wait_replays(struct tegraph_callable *c, const char *fn) {
  if (c->replayed) TG_CORE(tecore_event_synchronize(c->ev_done), fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_callable_destroy(tegraph_callable_t *c) {
  static const char fn[] = "tegraph_callable_destroy";
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_CHECK(tg_callable_usable(c, fn));
  tegraph_result_t res = wait_replays(c, fn);
  void (*user_free)(void *) = c->user_free;
  void *user = c->user;
  callable_free(c);
  if (user_free) user_free(user); /* the context outlives every use by the graphs */
  return res;
}

TE_EXPORT tegraph_result_t tegraph_callable_reset(tegraph_callable_t *c, unsigned flags) {
  static const char fn[] = "tegraph_callable_reset";
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_ARG(!(flags & ~TEGRAPH_RESET_RECAPTURE), "%s: unknown flags 0x%x", fn,
         flags & ~TEGRAPH_RESET_RECAPTURE);
  TG_CHECK(tg_callable_usable(c, fn));
  TG_CHECK(wait_replays(c, fn));
  TG_CHECK(unbind_all(c, fn));
  c->fwd_done = c->need_dw = 0;
  for (size_t i = 0; i < c->nslots; i++) c->slots[i].last = TEGRAPH_PATH_NONE;
  if (!(flags & TEGRAPH_RESET_RECAPTURE)) return TEGRAPH_SUCCESS;
  /* capture every pass again; update each executable in place where the
   * driver accepts the new graph, else instantiate it anew */
  for (int p = 0; p < TG_NPASS; p++) {
    if (!c->pass[p].present) continue;
    tecore_graph_t g = NULL;
    TG_CHECK(capture_pass(c, p, &g, fn));
    tecore_graph_update_result_t why;
    tecore_result_t r = tecore_graph_exec_update(c->pass[p].exec, g, &why);
    int updated = r == TECORE_SUCCESS;
    if (r == TECORE_ERR_GRAPH_UPDATE) {
      tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_GRAPH, __FILE__, __LINE__,
                 "%s: callable %zu's %s graph: update refused (%s); instantiating anew", fn,
                 c->index, pass_name(p), tecore_graph_update_result_name(why));
      tecore_graph_exec_t fresh = NULL;
      r = tecore_graph_instantiate_with_flags(&fresh, g, c->inst_flags, c->stream);
      if (r == TECORE_SUCCESS) {
        (void)tecore_graph_exec_destroy(c->pass[p].exec);
        c->pass[p].exec = fresh;
      }
    }
    if (r != TECORE_SUCCESS) {
      (void)tecore_graph_destroy(g);
      return tg_core(r, fn);
    }
    /* an updated exec still names its nodes by the graph it was
     * instantiated from: keep that one */
    if (updated && !c->pass[p].inst) {
      c->pass[p].inst = c->pass[p].graph;
    } else {
      (void)tecore_graph_destroy(c->pass[p].graph);
      if (!updated && c->pass[p].inst) {
        (void)tecore_graph_destroy(c->pass[p].inst);
        c->pass[p].inst = NULL;
      }
    }
    c->pass[p].graph = g;
  }
  TG_CHECK(analyze(c, fn));
  TG_CORE(tecore_stream_synchronize(c->stream), fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_callable_slot(tegraph_callable_t *c, tegraph_slot_kind_t kind,
                                                 size_t index, const char *name,
                                                 struct tegraph_slot_info *info) {
  static const char fn[] = "tegraph_callable_slot";
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_ARG(info, "%s: info is NULL", fn);
  TG_ARG(kind >= TEGRAPH_SLOT_INPUT && kind <= TEGRAPH_SLOT_GRAD_INPUT, "%s: unknown kind %d", fn,
         (int)kind);
  if (kind == TEGRAPH_SLOT_KEYWORD) {
    TG_ARG(name, "%s: name is NULL (keyword tensors are found by name)", fn);
    size_t k = 0;
    while (k < c->nkw && strcmp(c->kw_names[k], name) != 0) k++;
    TG_ARG(k < c->nkw, "%s: the callable has no keyword tensor named '%s'", fn, name);
    index = k;
  }
  struct tg_slot *s = tg_slot_find(c, kind, index);
  TG_ARG(s, "%s: the callable has no %s %zu", fn, kind_name(kind), index);
  memset(info, 0, sizeof *info);
  info->tensor = *s->t;
  info->rebindable = s->rebindable;
  info->uses = s->nrefs;
  info->bound = s->bound;
  info->last_path = s->last;
  snprintf(info->why, sizeof info->why, "%s", s->why);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_callable_dot(tegraph_callable_t *c, tegraph_pass_t pass,
                                                const char *path) {
  static const char fn[] = "tegraph_callable_dot";
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_ARG(path && path[0], "%s: path is NULL or empty", fn);
  TG_ARG((int)pass >= 0 && (int)pass < TG_NPASS, "%s: unknown pass %d", fn, (int)pass);
  TG_ARG(c->pass[pass].present, "%s: the callable has no %s graph", fn, pass_name((int)pass));
  TG_CORE(tecore_graph_dot(c->pass[pass].graph, path), fn);
  return TEGRAPH_SUCCESS;
}
