/* SPDX-License-Identifier: Apache-2.0
 * demo_tpprof.c -- te-demo --tp-profile's event timeline (demo_tpprof.h):
 * a list of events recorded on the step's stream -- phase marks from
 * te-demo, every group's begin and end from the sequence's pass hooks --
 * read back after the step.  The events are made once and reused
 * step after step, so the measured steps create none. */
#include "demo_tpprof.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *const demo_tpprof_phase_name[TPP_NPHASES] = {
    "other (zero_grad)", "forward", "loss", "backward", "scale update + AdamW"};

enum { MARK_PHASE, MARK_GROUP_BEGIN, MARK_GROUP_END, MARK_END };

struct mark {
  int kind, phase, group;   /* group: index in the result's groups (-1: past the table) */
};

/* Groups nest at most this deep: under the fuser's backward overlap
 * (te/ops.h) a collective's hooks come between the before and after of
 * the Linear's group (its events on the side stream). */
#define NEST 4

struct demo_tpprof {
  tecore_event_t *ev;
  struct mark *mk;
  size_t n, cap;          /* marks this step; events made */
  int phase;
  int group[NEST], depth;   /* the groups begun by hook_before and not yet ended */
  int steps;
  double phase_ms[TPP_NPHASES], comm_ms[TPP_NPHASES], comm_calls[TPP_NPHASES];
  struct demo_tpprof_result sum;   /* groups: names, and sums over the kept steps */
};

struct demo_tpprof *demo_tpprof_create(void) {
  struct demo_tpprof *p = calloc(1, sizeof *p);
  if (!p) fprintf(stderr, "te-demo: --tp-profile: out of host memory\n");
  return p;
}

void demo_tpprof_destroy(struct demo_tpprof *p) {
  if (!p) return;
  for (size_t i = 0; i < p->cap; i++) (void)tecore_event_destroy(p->ev[i]);
  free(p->ev);
  free(p->mk);
  free(p);
}

/* Records mark (kind, the current phase) on s, making an event when the
 * step has more marks than any step before. */
static tecore_result_t mark(struct demo_tpprof *p, int kind, int group, tecore_stream_t s) {
  if (p->n == p->cap) {
    size_t cap = p->cap ? 2 * p->cap : 256;
    tecore_event_t *ev = realloc(p->ev, cap * sizeof *ev);
    if (!ev) return TECORE_ERR_NOMEM;
    p->ev = ev;
    struct mark *mk = realloc(p->mk, cap * sizeof *mk);
    if (!mk) return TECORE_ERR_NOMEM;
    p->mk = mk;
    for (; p->cap < cap; p->cap++) {
      tecore_result_t r = tecore_event_create(TECORE_EVENT_DEFAULT, &p->ev[p->cap]);
      if (r != TECORE_SUCCESS) return r;
    }
  }
  p->mk[p->n] = (struct mark){.kind = kind, .phase = p->phase, .group = group};
  tecore_result_t r = tecore_event_record(p->ev[p->n], s);
  if (r == TECORE_SUCCESS) p->n++;
  return r;
}

/* The index of the group [first, first + count) of seq in p's table by
 * its name (the pass, then its operations' kinds joined by '+'), added
 * when new; -1 when the table is full. */
static int group_of(struct demo_tpprof *p, tecore_seq_t *seq, tecore_seq_dir_t dir, size_t first,
                    size_t count) {
  char name[TPP_NAME];
  int comm = 0;
  size_t len = (size_t)snprintf(name, sizeof name, "%s ", dir == TECORE_SEQ_FORWARD ? "fwd"
                                                                                    : "bwd");
  for (size_t i = first; i < first + count; i++) {
    struct tecore_op_info info;
    if (tecore_seq_op(seq, i, &info) != TECORE_SUCCESS) continue;
    int k = info.desc.kind;
    comm |= k == TECORE_OP_TP_REDUCE || k == TECORE_OP_TP_COPY || k == TECORE_OP_ALLREDUCE ||
            k == TECORE_OP_ALLGATHER || k == TECORE_OP_REDUCE_SCATTER;   /* --sp's */
    if (len < sizeof name)
      len += (size_t)snprintf(name + len, sizeof name - len, "%s%s", i > first ? "+" : "",
                              tecore_op_kind_name(k));
  }
  struct demo_tpprof_result *r = &p->sum;
  for (size_t g = 0; g < r->ngroups; g++)
    if (!strcmp(r->group[g].name, name)) return (int)g;
  if (r->ngroups == TPP_MAX_GROUPS) return -1;
  struct demo_tpprof_group *g = &r->group[r->ngroups];
  snprintf(g->name, sizeof g->name, "%s", name);
  g->comm = comm;
  return (int)r->ngroups++;
}

static tecore_result_t hook_before(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                   size_t first, size_t count, tecore_stream_t s) {
  struct demo_tpprof *p = ctx;
  int g = group_of(p, seq, dir, first, count);
  if (p->depth == NEST) return TECORE_ERR_INTERNAL;
  p->group[p->depth++] = g;
  return mark(p, MARK_GROUP_BEGIN, g, s);
}

static tecore_result_t hook_after(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                  size_t first, size_t count, tecore_stream_t s) {
  (void)seq, (void)dir, (void)first, (void)count;
  struct demo_tpprof *p = ctx;
  if (p->depth == 0) return TECORE_ERR_INTERNAL;
  return mark(p, MARK_GROUP_END, p->group[--p->depth], s);
}

tecore_result_t demo_tpprof_attach(struct demo_tpprof *p, tecore_seq_t *seq) {
  struct tecore_seq_hooks h = {.before = hook_before, .after = hook_after, .ctx = p};
  return tecore_seq_set_hooks(seq, &h);
}

tecore_result_t demo_tpprof_phase(struct demo_tpprof *p, int phase, tecore_stream_t s) {
  p->phase = phase;
  return mark(p, MARK_PHASE, -1, s);
}

tecore_result_t demo_tpprof_end(struct demo_tpprof *p, tecore_stream_t s) {
  return mark(p, MARK_END, -1, s);
}

tecore_result_t demo_tpprof_collect(struct demo_tpprof *p, int keep) {
  if (!keep) {   /* the warmup: its groups named, not counted */
    p->n = 0;
    return TECORE_SUCCESS;
  }
  size_t last_phase = (size_t)-1, begun[NEST];
  int depth = 0;
  for (size_t i = 0; i < p->n; i++) {
    float ms = 0;
    const struct mark *m = &p->mk[i];
    if (m->kind == MARK_PHASE || m->kind == MARK_END) {
      if (last_phase != (size_t)-1) {
        tecore_result_t r = tecore_event_elapsed(&ms, p->ev[last_phase], p->ev[i]);
        if (r != TECORE_SUCCESS) return r;
        p->phase_ms[p->mk[last_phase].phase] += ms;
      }
      last_phase = i;
    } else if (m->kind == MARK_GROUP_BEGIN) {
      if (depth < NEST) begun[depth] = i;
      depth++;
    } else if (depth > 0) {
      if (--depth >= NEST) continue;
      tecore_result_t r = tecore_event_elapsed(&ms, p->ev[begun[depth]], p->ev[i]);
      if (r != TECORE_SUCCESS) return r;
      if (m->group < 0) continue;
      struct demo_tpprof_group *g = &p->sum.group[m->group];
      g->ms += ms;
      g->calls += 1;
      if (!g->comm) continue;
      p->comm_ms[m->phase] += ms;
      p->comm_calls[m->phase] += 1;
    }
  }
  p->n = 0;
  p->steps++;
  return TECORE_SUCCESS;
}

void demo_tpprof_result(const struct demo_tpprof *p, struct demo_tpprof_result *out) {
  memset(out, 0, sizeof *out);
  out->steps = p->steps;
  if (!p->steps) return;
  out->ngroups = p->sum.ngroups;
  for (size_t g = 0; g < p->sum.ngroups; g++) {
    out->group[g] = p->sum.group[g];
    out->group[g].ms /= p->steps;
    out->group[g].calls /= p->steps;
  }
  for (int k = 0; k < TPP_NPHASES; k++) {
    out->phase_ms[k] = p->phase_ms[k] / p->steps;
    out->comm_ms[k] = p->comm_ms[k] / p->steps;
    out->comm_calls[k] = p->comm_calls[k] / p->steps;
  }
}

const struct demo_tpprof_group *demo_tpprof_find(const struct demo_tpprof_result *r,
                                                 const char *name) {
  for (size_t g = 0; g < r->ngroups; g++)
    if (!strcmp(r->group[g].name, name)) return &r->group[g];
  return NULL;
}
