/* SPDX-License-Identifier: Apache-2.0 */
/* replay.c -- replaying a graphed callable: argument checks (everything is
 * checked before anything is queued or rewritten, so a refused call leaves
 * the callable as it was; each caller's buffer must hold its captured
 * tensor), the binding of each buffer (nothing, rebind in
 * place, or copy), the no-op flag of FP8 weight caching, the side-stream
 * fork and join, and the order-of-use rules. */
#include "callable.h"
#include "ksupport/span.h"
#include <stdio.h>
#include <string.h>

/* A caller's tensor for slot s, and what the replay does with it. */
struct bind {
  struct tg_slot *s;
  tecore_devptr_t user;   /* 0: the static buffer (outputs only) */
  int copy;               /* 1: copy in (before) or out (after) */
};

static const char *path_name(tegraph_bind_path_t p) {
  switch (p) {
  case TEGRAPH_PATH_STATIC: return "static";
  case TEGRAPH_PATH_REBOUND: return "rebound";
  case TEGRAPH_PATH_COPIED: return "copied";
  default: return "none";
  }
}

/* The caller's buffer at data must hold the captured tensor's bytes: the
 * graphs read or write all of them, in place when the slot is rebound and
 * through a copy otherwise, and a short buffer is overrun on the device.
 * The device layer's allocation registry (tecore_mem_range) says where
 * data's allocation ends.  An address it does not know (pageable host
 * memory reached through unified addressing, or a pointer the backend
 * cannot see) is accepted unchecked: the launch's own checks apply. */
static tegraph_result_t check_fits(tecore_devptr_t data, size_t need, const char *fn,
                                   const char *what) {
  tecore_devptr_t base = 0;
  size_t bytes = 0;
  if (tecore_mem_range(data, &base, &bytes) != TECORE_SUCCESS) {
    tecore_clear_error();
    return TEGRAPH_SUCCESS;
  }
  size_t left = bytes - (size_t)(data - base);
  TG_ARG(need <= left,
         "%s: %s: data 0x%llx has %zu bytes left in its allocation [0x%llx, +%zu); the "
         "captured tensor needs %zu",
         fn, what, (unsigned long long)data, left, (unsigned long long)base, bytes, need);
  return TEGRAPH_SUCCESS;
}

/* t must describe the same dtype and shape as the slot's static tensor. */
static tegraph_result_t check_match(const struct tecore_tensor *t, const struct tecore_tensor *st,
                                    int need_data, const char *fn, const char *what) {
  char a[96], b[96];
  TG_ARG(t->scaling == TECORE_SCALING_NONE, "%s: %s: scaling mode %s; a plain tensor is needed",
         fn, what, tecore_scaling_name(t->scaling));
  TG_ARG(t->dtype == st->dtype, "%s: %s: dtype %s differs from the captured %s", fn, what,
         tecore_dtype_name(t->dtype), tecore_dtype_name(st->dtype));
  TG_ARG(t->ndim >= 0 && t->ndim <= TECORE_TENSOR_MAX_DIMS, "%s: %s: ndim %d outside 0..%d", fn,
         what, t->ndim, TECORE_TENSOR_MAX_DIMS);
  int same = t->ndim == st->ndim;
  for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == st->shape[d];
  TG_ARG(same, "%s: %s: shape %s differs from the captured %s", fn, what,
         tg_shape_str(t, a, sizeof a), tg_shape_str(st, b, sizeof b));
  TG_ARG(!need_data || t->data, "%s: %s: data is 0", fn, what);
  TG_ARG(!t->data || t->data % tecore_dtype_size(t->dtype) == 0,
         "%s: %s: data 0x%llx is not aligned to its %zu-byte elements", fn, what,
         (unsigned long long)t->data, tecore_dtype_size(t->dtype));
  /* the callable's own static buffer fits by construction: no lookup (a
   * driver query under cuda) on the replay path that passes it back */
  if (t->data && t->data != st->data)
    TG_CHECK(check_fits(t->data, tecore_tensor_numel(st) * tecore_dtype_size(st->dtype), fn,
                        what));
  return TEGRAPH_SUCCESS;
}

/* 1 when addr may be written into s's nodes: s rebindable, addr 16-byte
 * aligned (a captured kernel may have picked a vector path on the static
 * buffer's alignment), and addr not inside another buffer of the callable
 * (the graph would then read and write the same memory). */
static int can_rebind(struct tegraph_callable *c, const struct tg_slot *s, tecore_devptr_t addr) {
  if (!s->rebindable || addr % 16) return 0;
  for (size_t i = 0; i < c->nslots; i++) {
    const struct tg_slot *o = &c->slots[i];
    if (o == s || !o->t->data) continue;
    if (addr < o->t->data + (o->bytes ? o->bytes : 1) && addr + (s->bytes ? s->bytes : 1) > o->t->data)
      return 0;
  }
  return 1;
}

/* Decides and applies the binding of b (rebinds happen here, on the host;
 * copies are queued later).  Inputs: user != 0.  Outputs: 0 = static. */
static tegraph_result_t bind_slot(struct tegraph_callable *c, struct bind *b, const char *fn) {
  struct tg_slot *s = b->s;
  tecore_devptr_t st = s->t->data;
  b->copy = 0;
  if (!st) return TEGRAPH_SUCCESS; /* an input that needs no gradient */
  tecore_devptr_t want = b->user ? b->user : st;
  if (want == st) {
    TG_CHECK(tg_slot_rebind(c, s, st, fn));
    s->last = TEGRAPH_PATH_STATIC;
    return TEGRAPH_SUCCESS;
  }
  if (want == s->bound) {
    s->last = TEGRAPH_PATH_REBOUND;
    return TEGRAPH_SUCCESS;
  }
  if (can_rebind(c, s, want) && tg_slot_rebind(c, s, want, fn) == TEGRAPH_SUCCESS) {
    s->last = TEGRAPH_PATH_REBOUND;
    return TEGRAPH_SUCCESS;
  }
  /* copying: the graphs must use the static buffer again */
  TG_CHECK(tg_slot_rebind(c, s, st, fn));
  b->copy = 1;
  s->last = TEGRAPH_PATH_COPIED;
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t bind_all(struct tegraph_callable *c, struct bind *b, size_t n,
                                 const char *fn) {
  for (size_t i = 0; i < n; i++) TG_CHECK(bind_slot(c, &b[i], fn));
  if (tecore_log_level() >= TECORE_LOG_TRACE)
    for (size_t i = 0; i < n; i++)
      tecore_log(TECORE_LOG_TRACE, TECORE_SUBSYS_GRAPH, __FILE__, __LINE__,
                 "%s: callable %zu slot %d/%zu: %s", fn, c->index, (int)b[i].s->kind,
                 b[i].s->index, path_name(b[i].s->last));
  return TEGRAPH_SUCCESS;
}

/* libte's aliasing rule (libtecore/ksupport/span.h) on the caller's
 * tensors of one replay: b[0 .. nread) are read (forward: inputs and
 * keyword tensors; backward: grad_outputs), the rest written (outputs,
 * grad_inputs); a backward also reads the inputs that the last forward
 * rebound (the graphs read them in place).  Nothing written may share a
 * byte with anything else: an output over an input, copied out after the
 * graph or written by it in place, destroys what the backward reads. */
static const char *slot_word(tegraph_slot_kind_t k) {
  switch (k) {
  case TEGRAPH_SLOT_INPUT: return "inputs";
  case TEGRAPH_SLOT_OUTPUT: return "outputs";
  case TEGRAPH_SLOT_GRAD_OUTPUT: return "grad_outputs";
  case TEGRAPH_SLOT_GRAD_INPUT: return "grad_inputs";
  default: return "keyword tensor";
  }
}

static tegraph_result_t replay_alias(struct tegraph_callable *c, const struct bind *b, size_t nb,
                                     size_t nread, int backward, const char *fn) {
  size_t n = 0, cap = nb + (backward ? c->nslots : 0);
  struct te_span sp[cap ? cap : 1];
  char kwname[cap ? cap : 1][96];
  for (size_t i = 0; i < nb; i++) {
    const struct tg_slot *s = b[i].s;
    unsigned acc = i < nread ? TE_ACCESS_READ : TE_ACCESS_WRITE;
    if (s->kind == TEGRAPH_SLOT_KEYWORD) {
      snprintf(kwname[n], sizeof kwname[n], "keyword tensor '%s'", s->name);
      sp[n++] = (struct te_span){kwname[n], b[i].user, s->bytes, acc, 0, NULL, 0};
    } else {
      sp[n++] = (struct te_span){slot_word(s->kind), b[i].user, s->bytes, acc, 0, "", s->index};
    }
  }
  for (size_t i = 0; backward && i < c->nslots; i++) {
    const struct tg_slot *s = &c->slots[i];
    if ((s->kind != TEGRAPH_SLOT_INPUT && s->kind != TEGRAPH_SLOT_KEYWORD) || !s->t->data ||
        s->bound == s->t->data)
      continue;
    if (s->kind == TEGRAPH_SLOT_KEYWORD)
      snprintf(kwname[n], sizeof kwname[n], "keyword tensor '%s' (rebound: the backward reads "
               "it in place)", s->name);
    else
      snprintf(kwname[n], sizeof kwname[n], "inputs[%zu] (rebound: the backward reads it in "
               "place)", s->index);
    sp[n++] = (struct te_span){kwname[n], s->bound, s->bytes, TE_ACCESS_READ, 0, NULL, 0};
  }
  char msg[256];
  if (te_span_conflict(sp, n, msg, sizeof msg))
    return TG_ERR(TEGRAPH_ERR_INVALID, "%s: %s", fn, msg);
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t copies(struct bind *b, size_t n, int in, tecore_stream_t s,
                               const char *fn) {
  for (size_t i = 0; i < n; i++) {
    if (!b[i].copy || !b[i].s->bytes) continue;
    tecore_devptr_t st = b[i].s->t->data;
    TG_CORE(tecore_memcpy_async(in ? st : b[i].user, in ? b[i].user : st, b[i].s->bytes, s), fn);
  }
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t check_opts(const struct tegraph_replay_opts *o, const char *fn) {
  if (!o) return TEGRAPH_SUCCESS;
  /* a replay rewrites nodes on the host: it cannot itself be captured */
  tecore_stream_t ss[2] = {o->stream, o->replay_stream};
  for (int i = 0; i < 2; i++) {
    if (i == 1 && !ss[i]) continue;
    tecore_capture_status_t st = TECORE_CAPTURE_NONE;
    TG_CORE(tecore_stream_capture_status(ss[i], &st), fn);
    if (st != TECORE_CAPTURE_NONE)
      return TG_ERR(TEGRAPH_ERR_STATE, "%s: opts->%s %p is capturing; a callable replays "
                    "outside stream capture", fn, i ? "replay_stream" : "stream", (void *)ss[i]);
  }
  return TEGRAPH_SUCCESS;
}

/* Forks to the replay stream (if any): the stream the graph runs on.  A
 * replay on another stream than the last one also waits for the last one,
 * so copies into the static buffers never overtake a replay reading them
 * (the way launches of one executable run one after another). */
static tegraph_result_t fork_run(struct tegraph_callable *c, const struct tegraph_replay_opts *o,
                                 tecore_stream_t *run, const char *fn) {
  *run = o ? o->stream : NULL;
  if (o && o->replay_stream && o->replay_stream != o->stream) {
    TG_CORE(tecore_event_record(c->ev_fork, o->stream), fn);
    TG_CORE(tecore_stream_wait_event(o->replay_stream, c->ev_fork), fn);
    *run = o->replay_stream;
  }
  if (c->replayed && *run != c->last_run) TG_CORE(tecore_stream_wait_event(*run, c->ev_done), fn);
  return TEGRAPH_SUCCESS;
}

/* Marks the end of the replay on run: ev_done (destroy and reset wait on
 * it), the caller's event, or the join back into the caller's stream. */
static tegraph_result_t finish(struct tegraph_callable *c, const struct tegraph_replay_opts *o,
                               tecore_stream_t run, const char *fn) {
  TG_CORE(tecore_event_record(c->ev_done, run), fn);
  c->replayed = 1;
  c->last_run = run;
  if (o && o->done) TG_CORE(tecore_event_record(o->done, run), fn);
  else if (o && run != o->stream) TG_CORE(tecore_stream_wait_event(o->stream, c->ev_done), fn);
  return TEGRAPH_SUCCESS;
}

/* Fills the descriptors the caller asked for: static slots' where data 0. */
static void report(struct tecore_tensor *t, size_t n, const struct tecore_tensor *st) {
  for (size_t i = 0; t && i < n; i++)
    if (!t[i].data) t[i] = st[i];
}

TE_EXPORT tegraph_result_t tegraph_callable_forward(tegraph_callable_t *c,
                                                    const struct tecore_tensor *inputs,
                                                    size_t ninputs, const char *const *kw_names,
                                                    const struct tecore_tensor *kw, size_t nkw,
                                                    struct tecore_tensor *outputs, size_t noutputs,
                                                    const struct tegraph_replay_opts *opts) {
  static const char fn[] = "tegraph_callable_forward";
  char what[96];
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_CHECK(tg_callable_replayable(c, fn));
  TG_ARG(ninputs == c->nin, "%s: ninputs is %zu; the callable was captured with %zu", fn, ninputs,
         c->nin);
  TG_ARG(!ninputs || inputs, "%s: inputs is NULL", fn);
  TG_ARG(nkw == c->nkw, "%s: nkw is %zu; the callable was captured with %zu keyword tensor(s)",
         fn, nkw, c->nkw);
  TG_ARG(!nkw || (kw_names && kw), "%s: kw_names or kw is NULL", fn);
  TG_ARG(noutputs == 0 || noutputs == c->nout,
         "%s: noutputs is %zu; pass 0 or the callable's %zu", fn, noutputs, c->nout);
  TG_ARG(!noutputs || outputs, "%s: outputs is NULL", fn);
  struct bind b[c->nslots ? c->nslots : 1];
  size_t nb = 0, nin_b;
  for (size_t i = 0; i < c->nin; i++) {
    snprintf(what, sizeof what, "inputs[%zu]", i);
    TG_CHECK(check_match(&inputs[i], &c->in[i], 1, fn, what));
    b[nb++] = (struct bind){tg_slot_find(c, TEGRAPH_SLOT_INPUT, i), inputs[i].data, 0};
  }
  /* keyword tensors: the same names as at capture, in any order */
  for (size_t i = 0; i < nkw; i++) {
    TG_ARG(kw_names[i] && kw_names[i][0], "%s: kw_names[%zu] is NULL or empty", fn, i);
    for (size_t j = 0; j < i; j++)
      TG_ARG(strcmp(kw_names[i], kw_names[j]) != 0, "%s: keyword tensor '%s' is given twice", fn,
             kw_names[i]);
    size_t k = 0;
    while (k < c->nkw && strcmp(c->kw_names[k], kw_names[i]) != 0) k++;
    TG_ARG(k < c->nkw, "%s: unknown keyword tensor '%s' (the callable was captured without it)",
           fn, kw_names[i]);
    snprintf(what, sizeof what, "keyword tensor '%s'", kw_names[i]);
    TG_CHECK(check_match(&kw[i], &c->kw[k], 1, fn, what));
    b[nb++] = (struct bind){tg_slot_find(c, TEGRAPH_SLOT_KEYWORD, k), kw[i].data, 0};
  }
  /* (distinct known names, as many as captured: none is missing) */
  nin_b = nb;
  for (size_t i = 0; i < c->nout; i++) {
    tecore_devptr_t d = 0;
    if (noutputs) {
      snprintf(what, sizeof what, "outputs[%zu]", i);
      TG_CHECK(check_match(&outputs[i], &c->out[i], 0, fn, what));
      d = outputs[i].data;
    }
    b[nb++] = (struct bind){tg_slot_find(c, TEGRAPH_SLOT_OUTPUT, i), d, 0};
  }
  TG_CHECK(check_opts(opts, fn));
  if (c->need_dw)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: callable %zu: backward_dw of the previous microbatch "
                  "has not been replayed (its buffers would be overwritten)", fn, c->index);
  TG_CHECK(replay_alias(c, b, nb, nin_b, 0, fn));

  TG_CHECK(bind_all(c, b, nb, fn));
  struct tg_pass *p = &c->pass[TEGRAPH_PASS_FORWARD];
  uint32_t noop = opts && !opts->is_first_microbatch ? 1u : 0u;
  if (noop != c->noop_value) {
    if (c->noop_knode >= 0) /* a te_memset node: its value, parameter 1 */
      TG_CHECK(tg_knode_set(p->exec, &p->nodes->k[c->noop_knode], 1, &noop, fn));
    else
      TG_CHECK(tg_memset_set(p->exec, p->nodes, c->noop_node, c->noop, noop, fn));
    c->noop_value = noop;
  }
  tecore_stream_t run;
  TG_CHECK(fork_run(c, opts, &run, fn));
  TG_CHECK(copies(b, nin_b, 1, run, fn));
  TG_CORE(tecore_graph_launch(p->exec, run), fn);
  TG_CHECK(copies(b + nin_b, nb - nin_b, 0, run, fn));
  TG_CHECK(finish(c, opts, run, fn));
  if (noutputs) report(outputs, noutputs, c->out);
  c->fwd_done = 1;
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_callable_backward(tegraph_callable_t *c,
                                                     const struct tecore_tensor *grad_outputs,
                                                     size_t noutputs,
                                                     struct tecore_tensor *grad_inputs,
                                                     size_t ninputs,
                                                     const struct tegraph_replay_opts *opts) {
  static const char fn[] = "tegraph_callable_backward";
  char what[96];
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_CHECK(tg_callable_replayable(c, fn));
  if (!c->pass[TEGRAPH_PASS_BACKWARD].present)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: callable %zu has no backward function", fn, c->index);
  TG_ARG(noutputs == c->nout, "%s: noutputs is %zu; the callable has %zu output(s)", fn, noutputs,
         c->nout);
  TG_ARG(grad_outputs, "%s: grad_outputs is NULL", fn);
  TG_ARG(ninputs == 0 || ninputs == c->nin, "%s: ninputs is %zu; pass 0 or the callable's %zu",
         fn, ninputs, c->nin);
  TG_ARG(!ninputs || grad_inputs, "%s: grad_inputs is NULL", fn);
  struct bind b[c->nslots ? c->nslots : 1];
  size_t nb = 0, nin_b;
  for (size_t i = 0; i < c->nout; i++) {
    snprintf(what, sizeof what, "grad_outputs[%zu]", i);
    TG_CHECK(check_match(&grad_outputs[i], &c->gout[i], 1, fn, what));
    b[nb++] = (struct bind){tg_slot_find(c, TEGRAPH_SLOT_GRAD_OUTPUT, i), grad_outputs[i].data, 0};
  }
  nin_b = nb;
  for (size_t i = 0; i < c->nin; i++) {
    tecore_devptr_t d = 0;
    if (ninputs) {
      snprintf(what, sizeof what, "grad_inputs[%zu]", i);
      TG_CHECK(check_match(&grad_inputs[i], &c->in[i], 0, fn, what));
      TG_ARG(c->gin[i].data || !grad_inputs[i].data,
             "%s: grad_inputs[%zu]: input %zu needs no gradient (input_needs_grad); pass data 0",
             fn, i, i);
      d = grad_inputs[i].data;
    }
    b[nb++] = (struct bind){tg_slot_find(c, TEGRAPH_SLOT_GRAD_INPUT, i), d, 0};
  }
  TG_CHECK(check_opts(opts, fn));
  if (!c->fwd_done)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: callable %zu: no forward since the last backward", fn,
                  c->index);
  TG_CHECK(replay_alias(c, b, nb, nin_b, 1, fn));

  TG_CHECK(bind_all(c, b, nb, fn));
  tecore_stream_t run;
  TG_CHECK(fork_run(c, opts, &run, fn));
  TG_CHECK(copies(b, nin_b, 1, run, fn));
  TG_CORE(tecore_graph_launch(c->pass[TEGRAPH_PASS_BACKWARD].exec, run), fn);
  TG_CHECK(copies(b + nin_b, nb - nin_b, 0, run, fn));
  TG_CHECK(finish(c, opts, run, fn));
  if (ninputs) report(grad_inputs, ninputs, c->gin);
  c->fwd_done = 0;
  c->need_dw = c->pass[TEGRAPH_PASS_BACKWARD_DW].present;
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_callable_backward_dw(tegraph_callable_t *c,
                                                        const struct tegraph_replay_opts *opts) {
  static const char fn[] = "tegraph_callable_backward_dw";
  TG_ARG(c, "%s: c is NULL", fn);
  TG_ARG(te_handle_live(c), "%s: c %p is not a live callable (destroyed?)", fn, (void *)c);
  TG_CHECK(tg_callable_replayable(c, fn));
  if (!c->pass[TEGRAPH_PASS_BACKWARD_DW].present)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: callable %zu has no backward_dw function", fn, c->index);
  TG_CHECK(check_opts(opts, fn));
  if (!c->need_dw)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: callable %zu: no backward since the last backward_dw",
                  fn, c->index);
  tecore_stream_t run;
  TG_CHECK(fork_run(c, opts, &run, fn));
  TG_CORE(tecore_graph_launch(c->pass[TEGRAPH_PASS_BACKWARD_DW].exec, run), fn);
  TG_CHECK(finish(c, opts, run, fn));
  c->need_dw = 0;
  return TEGRAPH_SUCCESS;
}
