/* SPDX-License-Identifier: Apache-2.0 */
/* ops_recompute.c -- activation recomputation (tecore_seq_set_recompute):
 * the caller's ranges, cut into units (a FULL range is one; a SELECTIVE
 * range gives one per run of attention-core and activation operations),
 * which the planner keeps whole (no forward group crosses a unit's edge,
 * no backward group the edge between two units), and per
 * unit the forward groups the backward runs again and the backward group
 * before which it runs them.  Where the units' saved tensors lie (the
 * pool) is ops_saved.c's te_rc_layout (the build in ops_seq.c calls it,
 * then te_rc_plan); the runs are ops_exec.c's.
 *
 * Why one pool serves every unit: a unit's forward writes its tensors
 * and only the unit (and the operation right after it) reads them; in the
 * backward the unit's forward runs again right before the first group
 * that reads them, and the unit before it runs its own only after this
 * unit's backward is done (no backward group crosses the edge between
 * them). */
#include "ops/ops_internal.h"

#include <stdlib.h>
#include <string.h>

/* The kinds SELECTIVE recomputes: cheap to run again, and their outputs
 * (attention's O, an activation's) are as large as a GEMM's. */
static int selective_kind(int kind) {
  switch (kind) {
  case TECORE_OP_ROPE: case TECORE_OP_ATTENTION: case TECORE_OP_GELU: case TECORE_OP_RELU:
  case TECORE_OP_SILU: case TECORE_OP_QGELU: case TECORE_OP_SWIGLU: case TECORE_OP_GEGLU:
  case TECORE_OP_REGLU:
    return 1;
  default:
    return 0;
  }
}

/* Is boundary e strictly inside [first, first + count)? */
static int inside(size_t e, size_t first, size_t count) {
  return first < e && e < first + count;
}

static size_t unit_of(const tecore_seq_t *s, size_t i);

/* Forward: the unit runs its own groups again, so none crosses its edges.
 * Backward: a group may cross an edge, except between two units: the
 * later one's recompute and the earlier one's would both come before it,
 * and the second would overwrite the pool the first's operations in the
 * group read. */
int te_rc_splits(const tecore_seq_t *s, tecore_seq_dir_t dir, size_t first, size_t count) {
  for (size_t u = 0; u < s->nrc; u++) {
    size_t a = s->rc[u].first, b = a + s->rc[u].count;
    if (dir == TECORE_SEQ_FORWARD && (inside(a, first, count) || inside(b, first, count)))
      return 1;
    if (dir == TECORE_SEQ_BACKWARD && a > 0 && unit_of(s, a - 1) != SIZE_MAX &&
        inside(a, first, count))
      return 1;
  }
  return 0;
}

/* The unit holding op i, or SIZE_MAX. */
static size_t unit_of(const tecore_seq_t *s, size_t i) {
  for (size_t u = 0; u < s->nrc; u++)
    if (s->rc[u].first <= i && i < s->rc[u].first + s->rc[u].count) return u;
  return SIZE_MAX;
}

int te_rc_reads(const tecore_seq_t *s, size_t b, size_t c) {
  if (!s->nrc || b == 0) return 0;
  size_t u = unit_of(s, c);
  return u != SIZE_MAX && unit_of(s, b - 1) != u;
}

static tecore_result_t add_unit(tecore_seq_t *s, size_t first, size_t count) {
  struct te_rc *n = realloc(s->rc, (s->nrc + 1) * sizeof *n);
  if (!n) return TE_ERR(TECORE_ERR_NOMEM, "tecore_seq_set_recompute: out of host memory");
  s->rc = n;
  memset(&n[s->nrc], 0, sizeof *n);
  n[s->nrc].first = first;
  n[s->nrc].count = count;
  s->nrc++;
  return TECORE_SUCCESS;
}

/* The units of every range, in op order (ranges are kept sorted). */
static tecore_result_t make_units(tecore_seq_t *s) {
  s->nrc = 0;
  for (size_t r = 0; r < s->nrcr; r++) {
    const struct te_rc_range *g = &s->rcr[r];
    if (g->mode == TECORE_SEQ_RECOMPUTE_FULL) {
      TE_CHECK(add_unit(s, g->first, g->count));
      continue;
    }
    for (size_t i = g->first; i < g->first + g->count;) {
      size_t j = i;
      while (j < g->first + g->count && selective_kind(s->ops[j].d.kind)) j++;
      if (j > i) TE_CHECK(add_unit(s, i, j - i));
      i = j > i ? j : i + 1;
    }
  }
  return TECORE_SUCCESS;
}

static tecore_result_t check_range(const tecore_seq_t *s, size_t first, size_t count, int mode,
                                   const char *fn) {
  TE_ARG(!s->built, "%s: the sequence is built: ranges are set before tecore_seq_build (the "
         "plan, the saved tensors' layout and any graph captured of the passes follow them)",
         fn);
  TE_ARG(!te_seq_infer(s), "%s: an inference sequence (TECORE_SEQ_INFERENCE) has no backward "
         "to recompute for", fn);
  TE_ARG(mode == TECORE_SEQ_RECOMPUTE_FULL || mode == TECORE_SEQ_RECOMPUTE_SELECTIVE,
         "%s: mode %d is neither TECORE_SEQ_RECOMPUTE_FULL (1) nor "
         "TECORE_SEQ_RECOMPUTE_SELECTIVE (2)", fn, mode);
  TE_ARG(count >= 1, "%s: count is 0 (a range holds at least one operation)", fn);
  TE_ARG(first < s->nops && count <= s->nops - first,
         "%s: ops [%zu, %zu + %zu) are out of bounds: the sequence has %zu operations", fn,
         first, first, count, s->nops);
  for (size_t r = 0; r < s->nrcr; r++) {
    const struct te_rc_range *g = &s->rcr[r];
    TE_ARG(first + count <= g->first || g->first + g->count <= first,
           "%s: ops [%zu, %zu) overlap the range [%zu, %zu) set before", fn, first,
           first + count, g->first, g->first + g->count);
  }
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_set_recompute(tecore_seq_t *s, size_t first, size_t count,
                                                   tecore_seq_recompute_t mode) {
  static const char fn[] = "tecore_seq_set_recompute";
  TE_CHECK(te_seq_arg(s, fn));
  TE_CHECK(check_range(s, first, count, (int)mode, fn));
  struct te_rc_range *n = realloc(s->rcr, (s->nrcr + 1) * sizeof *n);
  if (!n) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  s->rcr = n;
  size_t at = s->nrcr;
  while (at > 0 && n[at - 1].first > first) {
    n[at] = n[at - 1];
    at--;
  }
  n[at] = (struct te_rc_range){first, count, (int)mode};
  s->nrcr++;
  tecore_result_t r = make_units(s);
  if (r != TECORE_SUCCESS) {   /* back to the ranges before */
    memmove(&n[at], &n[at + 1], (s->nrcr - at - 1) * sizeof *n);
    s->nrcr--;
    (void)make_units(s);
  }
  return r;
}

/* The group of pass dir that holds op i. */
static size_t group_of(const tecore_seq_t *s, tecore_seq_dir_t dir, size_t i) {
  const struct te_group *g = s->plan.groups[dir];
  size_t k = 0;
  while (k + 1 < s->plan.ngroups[dir] && g[k].first + g[k].count <= i) k++;
  return k;
}

void te_rc_plan(tecore_seq_t *s, const size_t *last) {
  for (size_t u = 0; u < s->nrc; u++) {
    struct te_rc *c = &s->rc[u];
    size_t b = c->first + c->count;
    /* the unit's own backward, or the reader after it, whichever is later */
    size_t t = last[u] > b - 1 ? last[u] : b - 1;
    c->trig = group_of(s, TECORE_SEQ_BACKWARD, t);
    c->gf0 = group_of(s, TECORE_SEQ_FORWARD, c->first);
    c->gf1 = group_of(s, TECORE_SEQ_FORWARD, b - 1) + 1;
  }
}

void te_rc_free(tecore_seq_t *s) {
  free(s->rc);
  free(s->rcr);
  s->rc = NULL;
  s->rcr = NULL;
  s->nrc = s->nrcr = 0;
}
