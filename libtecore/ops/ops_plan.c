/* SPDX-License-Identifier: Apache-2.0 */
/* ops_plan.c -- the fusion planner: covers each pass (forward, backward)
 * of a sequence with groups, each one operation by itself or a fusion
 * pattern that matches there, and records what the forward groups do to
 * the boundaries (an FP8-only norm output, a Quantize's FP8 copy).  Also
 * tecore_seq_groups and tecore_seq_describe, which report the plan.
 *
 * The cover.  Patterns come from the registration table (first) and the
 * built-in table.  A dynamic program over positions picks, for each pass
 * separately, the cover with the fewest groups; among those the largest
 * sum of (priority + 1) over fused groups (so a one-operation fusion such
 * as rmsnorm+quantize beats the operation alone); among those the first
 * found, registered patterns being tried before built-in ones.  The passes
 * are independent, which is why their groups differ. */
#include "ops/ops_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

TE_PARAM_INT_RENAMED(ops_fusion, "TECORE_OPS_FUSION", "TE_OPS_FUSION", 1, 0, 1,
                     "1: the operation fuser uses fusion patterns; 0: every operation runs by "
                     "itself (as TECORE_SEQ_NO_FUSION)")

static tecore_result_t grad_layout(tecore_seq_t *s);

/* Drops the patterns TECORE_OPS_FUSION_OFF names from the plan's table;
 * a name that neither a built-in pattern nor one registered by then (the
 * table before the drop: libtecomm's, a caller's) has is reported once at
 * WARN (a typo would otherwise change nothing, silently). */
static void drop_fusions_off(struct te_plan *pl) {
  const char *list = te_fusion_off_list();
  if (!list || !*list) return;
  static int warned;
  size_t len;
  for (const char *p = list, *q; !__atomic_load_n(&warned, __ATOMIC_RELAXED) &&
                                 (q = te_fusion_off_next(&p, &len));) {
    /* grad_fp8, weight_fp8: tecore_seq_grad_fp8 and tecore_seq_fp8_weight
     * (a caller's kernel writes the FP8 tensor), no patterns of the plan */
    int known = len == 0 || (len == 8 && memcmp(q, "grad_fp8", 8) == 0) ||
                (len == 10 && memcmp(q, "weight_fp8", 10) == 0);
    for (size_t i = 0; i < te_builtin_fusion_count && !known; i++) {
      const char *nm = te_builtin_fusions[i].def.name;
      known = strlen(nm) == len && memcmp(nm, q, len) == 0;
    }
    for (size_t i = 0; i < pl->nfusions && !known; i++) {
      const char *nm = pl->fusions[i].def.name;
      known = nm && strlen(nm) == len && memcmp(nm, q, len) == 0;
    }
    if (!known && !__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
      TE_WARN(TECORE_SUBSYS_KERNEL, "TECORE_OPS_FUSION_OFF: '%.*s' is the name of no fusion "
              "pattern, built in or registered", (int)len, q);
  }
  size_t k = 0;
  for (size_t i = 0; i < pl->nfusions; i++) {
    const char *nm = pl->fusions[i].def.name;
    if (!te_fusion_named_off(nm)) pl->fusions[k++] = pl->fusions[i];
  }
  pl->nfusions = k;
}

void te_plan_free(struct te_plan *p) {
  free(p->fusions);
  free(p->groups[0]);
  free(p->groups[1]);
  memset(p, 0, sizeof *p);
}

static int pattern_matches(const tecore_seq_t *s, const struct te_fusion *f, size_t i,
                           tecore_seq_dir_t dir, const struct tecore_recipe *rc) {
  const struct tecore_fusion_def *d = &f->def;
  if (d->dir != dir || d->nops > s->nops - i) return 0;
  if (te_rc_splits(s, dir, i, d->nops)) return 0;   /* recomputed units (ops_recompute.c) */
  for (size_t k = 0; k < d->nops; k++)
    if (s->ops[i + k].d.kind != d->kinds[k]) return 0;
  /* a registered pattern writing the next Linear's rowwise FP8 input
   * leaves its columnwise copy to the backward, a byte transpose, which
   * 1x128 blocks do not allow (te/ops.h) */
  if (f->builtin_id < 0 && (d->flags & (TECORE_FUSION_WRITES_FP8 | TECORE_FUSION_QUANTIZES_INPUT)) &&
      te_seq_block(s) && !te_seq_infer(s))
    return 0;
  if (f->builtin_id < 0 && (d->flags & TECORE_FUSION_GELU_EPILOGUE) && !te_gelu_epilogue(s))
    return 0;
  return !d->applies || d->applies(s, i, rc, d->ctx);
}

static tecore_result_t plan_pass(tecore_seq_t *s, tecore_seq_dir_t dir, int fuse) {
  size_t n = s->nops;
  const struct tecore_recipe *rc = s->fp8_run ? &s->recipe : NULL;
  size_t *ngr = calloc(n + 1, sizeof *ngr);
  long *prio = calloc(n + 1, sizeof *prio);
  long *pick = calloc(n + 1, sizeof *pick);
  struct te_group *g = calloc(n, sizeof *g);
  if (!ngr || !prio || !pick || !g) {
    free(ngr);
    free(prio);
    free(pick);
    free(g);
    return TE_ERR(TECORE_ERR_NOMEM, "fusion planning: out of host memory");
  }
  for (size_t ii = n; ii-- > 0;) {
    ngr[ii] = 1 + ngr[ii + 1];
    prio[ii] = prio[ii + 1];
    pick[ii] = -1;
    if (!fuse) continue;
    for (size_t p = 0; p < s->plan.nfusions; p++) {
      const struct te_fusion *f = &s->plan.fusions[p];
      if (!pattern_matches(s, f, ii, dir, rc)) continue;
      size_t gcount = 1 + ngr[ii + f->def.nops];
      long pr = f->def.priority + 1 + prio[ii + f->def.nops];
      if (gcount < ngr[ii] || (gcount == ngr[ii] && pr > prio[ii])) {
        ngr[ii] = gcount;
        prio[ii] = pr;
        pick[ii] = (long)p;
      }
    }
  }
  size_t ng = 0;
  for (size_t i = 0; i < n;) {
    struct te_group *gr = &g[ng++];
    gr->first = i;
    if (pick[i] >= 0) {
      gr->f = &s->plan.fusions[pick[i]];
      gr->count = gr->f->def.nops;
      gr->name = gr->f->def.name;
    } else {
      gr->f = NULL;
      gr->count = 1;
      gr->name = s->ops[i].def.name;
    }
    i += gr->count;
  }
  s->plan.groups[dir] = g;
  s->plan.ngroups[dir] = ng;
  free(ngr);
  free(prio);
  free(pick);
  return TECORE_SUCCESS;
}

/* rope+quantize writes FP8 Q/K/V only the FP8 attention right after it
 * reads: a group of either without the other (a registered pattern took
 * its partner) runs unfused. */
static void pair_rope_attn(tecore_seq_t *s) {
  struct te_group *g = s->plan.groups[TECORE_SEQ_FORWARD];
  size_t ng = s->plan.ngroups[TECORE_SEQ_FORWARD];
  for (int pass = 0; pass < 2; pass++)
    for (size_t k = 0; k < ng; k++) {
      int id = g[k].f ? g[k].f->builtin_id : -1, ok = 1;
      if (pass == 0 && id == TE_FUSE_ROPE_Q)
        ok = k + 1 < ng && g[k + 1].f && g[k + 1].f->builtin_id == TE_FUSE_ATTN_Q;
      else if (pass == 1 && id == TE_FUSE_ATTN_Q)
        ok = k > 0 && g[k - 1].f && g[k - 1].f->builtin_id == TE_FUSE_ROPE_Q;
      if (ok) continue;
      g[k].f = NULL;
      g[k].name = s->ops[g[k].first].def.name;
    }
}

/* Grows the workspace to what the planned patterns ask for; the old one
 * stays allocated (a graph captured before may use it). */
static tecore_result_t fit_workspace(tecore_seq_t *s) {
  size_t need = s->ws_bytes;
  for (int dir = 0; dir < 2; dir++)
    for (size_t k = 0; k < s->plan.ngroups[dir]; k++) {
      const struct te_group *gr = &s->plan.groups[dir][k];
      if (!gr->f || !gr->f->def.workspace) continue;
      size_t w = 0;
      tecore_result_t r = gr->f->def.workspace(s, gr->first, &w, gr->f->def.ctx);
      if (r != TECORE_SUCCESS) {
        te_error_hop(__func__, __FILE__, __LINE__);
        return r;
      }
      if (w > need) need = w;
    }
  if (need > s->ws_bytes) {
    tecore_devptr_t ws = 0;
    TE_CHECK(te_seq_alloc(s, need, 0, &ws));
    s->ws = ws;
    s->ws_bytes = need;
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_plan_build(tecore_seq_t *s) {
  te_plan_free(&s->plan);
  int fuse = !(s->cfg.flags & TECORE_SEQ_NO_FUSION) && tecore_tunable_int(&ops_fusion) != 0;
  struct te_fusion *reg = NULL;
  size_t nreg = 0;
  if (fuse) TE_CHECK(te_fusions_snapshot(&reg, &nreg));
  size_t total = fuse ? nreg + te_builtin_fusion_count : 0;
  if (total) {
    s->plan.fusions = malloc(total * sizeof *s->plan.fusions);
    if (!s->plan.fusions) {
      free(reg);
      return TE_ERR(TECORE_ERR_NOMEM, "fusion planning: out of host memory");
    }
    if (nreg) memcpy(s->plan.fusions, reg, nreg * sizeof *reg);
    memcpy(s->plan.fusions + nreg, te_builtin_fusions,
           te_builtin_fusion_count * sizeof *te_builtin_fusions);
    s->plan.nfusions = total;
    drop_fusions_off(&s->plan);
  }
  free(reg);
  tecore_result_t r = plan_pass(s, TECORE_SEQ_FORWARD, fuse);
  if (r == TECORE_SUCCESS) r = plan_pass(s, TECORE_SEQ_BACKWARD, fuse);
  if (r != TECORE_SUCCESS) {
    te_plan_free(&s->plan);
    return r;
  }
  pair_rope_attn(s);
  r = fit_workspace(s);
  if (r != TECORE_SUCCESS) {
    te_plan_free(&s->plan);
    return r;
  }
  te_overlap_plan(s);
  /* what the forward groups leave at the boundaries */
  for (size_t b = 0; b <= s->nops; b++) {
    s->bnd[b].f8_ready = s->bnd[b].f8_rowonly = 0;
    s->bnd[b].hp_valid = 1;
  }
  for (size_t k = 0; k < s->plan.ngroups[TECORE_SEQ_FORWARD]; k++) {
    const struct te_group *gr = &s->plan.groups[TECORE_SEQ_FORWARD][k];
    if (gr->f && (gr->f->builtin_id == TE_FUSE_NORM_QUANTIZE ||
                  gr->f->builtin_id == TE_FUSE_ACT_QUANTIZE)) {
      struct te_bnd *bd = &s->bnd[gr->first + 1];
      bd->f8_ready = bd->f8_rowonly = 1;
      bd->hp_valid = 0;
    } else if (gr->f && gr->f->builtin_id == TE_FUSE_NORM_Q_QUANTIZE) {
      struct te_bnd *bd = &s->bnd[gr->first + 2];
      bd->f8_ready = bd->f8_rowonly = 1;
      bd->hp_valid = 0;
      s->bnd[gr->first + 1].hp_valid = 0;
    } else if (gr->f && gr->f->builtin_id == TE_FUSE_ROPE_Q) {
      s->bnd[gr->first + 1].hp_valid = 0;   /* FP8 Q/K/V in the attention's buffer instead */
    } else if (gr->f && gr->f->builtin_id == TE_FUSE_ATTN_Q && gr->f->def.ctx) {
      struct te_bnd *bd = &s->bnd[gr->first + 1];   /* O as the next Linear's FP8 input */
      bd->f8_ready = bd->f8_rowonly = 1;
      bd->hp_valid = 0;
    } else if (gr->f && gr->f->builtin_id < 0 && (gr->f->def.flags & TECORE_FUSION_WRITES_FP8) &&
               s->fp8_run && gr->first + gr->count < s->nops &&
               s->bnd[gr->first + gr->count].f8 >= 0) {
      /* a registered pattern writes the next Linear's FP8 input (rowwise)
       * instead of its output, and so of every boundary aliasing that */
      size_t b = gr->first + gr->count;
      s->bnd[b].f8_ready = s->bnd[b].f8_rowonly = 1;
      s->bnd[b].hp_valid = 0;
      while (b > gr->first + 1 && s->bnd[b].alias == (int)(b - 1)) s->bnd[--b].hp_valid = 0;
    } else if (!gr->f && s->fp8_run && (s->ops[gr->first].fp8 & TE_KIND_FP8_COPY)) {
      s->bnd[gr->first + 1].f8_ready = 1;
    }
    if (gr->f && gr->f->builtin_id < 0 && (gr->f->def.flags & TECORE_FUSION_QUANTIZES_INPUT) &&
        s->fp8_run) {
      /* the pattern quantizes its Linear's input (rowwise) itself; with
       * INPUT_FP8_ONLY instead of writing that boundary (and those of
       * the group aliasing it) */
      for (size_t j = 1; j < gr->count; j++) {
        size_t b = gr->first + j;
        if (s->ops[b].d.kind != TECORE_OP_LINEAR || s->bnd[b].f8 < 0) continue;
        s->bnd[b].f8_ready = s->bnd[b].f8_rowonly = 1;
        if (!(gr->f->def.flags & TECORE_FUSION_INPUT_FP8_ONLY)) continue;
        s->bnd[b].hp_valid = 0;
        while (b > gr->first + 1 && s->bnd[b].alias == (int)(b - 1)) s->bnd[--b].hp_valid = 0;
      }
    }
  }
  /* inference: no backward, so no FP8 copy is made columnwise */
  if (te_seq_infer(s))
    for (size_t b = 0; b <= s->nops; b++)
      if (s->bnd[b].f8 >= 0) s->bnd[b].f8_rowonly = 1;
  s->have_forward = 0;
  return grad_layout(s);
}

/* ---- shared activation gradients ------------------------------------------------------ */

/* The boundary whose storage b's gradient is (te_bnd_grad's resolution). */
static size_t grad_owner(const tecore_seq_t *s, size_t b) {
  while (s->bnd[b].galias >= 0) b = (size_t)s->bnd[b].galias;
  return b;
}

/* A gradient buffer's lifetime in backward groups: a group touches the
 * gradients of all its boundaries (first .. first + count), so a shared
 * gradient lives from the group that writes it to the group that reads it,
 * [lo, hi] in group indices.  Buffers whose lifetimes do not overlap share
 * storage: owners sorted by lo go to the first buffer whose members all
 * ended before (interval partitioning: as few buffers as the most
 * gradients alive at once); a buffer is as large as its largest member. */
static tecore_result_t grad_layout(tecore_seq_t *s) {
  size_t n = s->nops, ng = s->plan.ngroups[TECORE_SEQ_BACKWARD];
  const struct te_group *grp = s->plan.groups[TECORE_SEQ_BACKWARD];
  size_t es = tecore_dtype_size(s->cfg.dtype);
  size_t *lo = malloc((n + 1) * sizeof *lo), *hi = malloc((n + 1) * sizeof *hi);
  size_t *order = malloc((n + 1) * sizeof *order), *color = malloc((n + 1) * sizeof *color);
  size_t *cend = malloc((n + 1) * sizeof *cend), *csize = malloc((n + 1) * sizeof *csize);
  tecore_result_t r = TECORE_SUCCESS;
  if (!lo || !hi || !order || !color || !cend || !csize) {
    r = TE_ERR(TECORE_ERR_NOMEM, "fusion planning: out of host memory");
    goto out;
  }
  for (size_t b = 0; b <= n; b++) lo[b] = SIZE_MAX, hi[b] = 0;
  for (size_t k = 0; k < ng; k++)
    for (size_t b = grp[k].first; b <= grp[k].first + grp[k].count; b++) {
      size_t o = grad_owner(s, b);
      /* an overlapped group's gradients (its deferred wgrad GEMM reads
       * them) live on while the next group runs on the side stream */
      size_t from = grp[k].overlap ? k - 1 : k;
      if (lo[o] > from) lo[o] = from;
      if (hi[o] < k) hi[o] = k;
    }
  /* a residual slot's gradient (the adder's output's) is read again by
   * its maker's backward, later: its life runs to the maker's group */
  for (size_t i = 0; i < s->npairs; i++) {
    const struct te_slot *sl = &s->pairs[i];
    if (sl->maker < 0 || sl->adder < 0) continue;
    size_t o = grad_owner(s, (size_t)sl->adder + 1);
    for (size_t k = 0; k < ng; k++)
      if ((size_t)sl->maker >= grp[k].first && (size_t)sl->maker < grp[k].first + grp[k].count) {
        if (hi[o] < k) hi[o] = k;
        if (lo[o] > k) lo[o] = k;
      }
  }
  size_t nown = 0;
  for (size_t b = 1; b < n; b++) {
    if (!s->bnd[b].gshared) continue;
    if (lo[b] == SIZE_MAX) lo[b] = 0, hi[b] = ng;   /* untouched: a buffer of its own */
    /* insertion by lo: a few hundred boundaries at most */
    size_t i = nown++;
    while (i > 0 && lo[order[i - 1]] > lo[b]) {
      order[i] = order[i - 1];
      i--;
    }
    order[i] = b;
  }
  size_t ncolors = 0;
  for (size_t i = 0; i < nown; i++) {
    size_t b = order[i], bytes = s->bnd[b].rows * s->bnd[b].cols * es, c = 0;
    while (c < ncolors && cend[c] >= lo[b]) c++;
    if (c == ncolors) csize[ncolors++] = 0;
    cend[c] = hi[b];
    if (csize[c] < bytes) csize[c] = bytes;
    color[b] = c;
  }
  /* the invariant, checked apart from the assignment above: within one
   * buffer, the members' lifetimes (in lo order) never overlap; the
   * member fits */
  for (size_t c = 0; c < ncolors; c++) cend[c] = SIZE_MAX;   /* no member yet */
  for (size_t i = 0; i < nown; i++) {
    size_t b = order[i], c = color[b];
    if ((cend[c] != SIZE_MAX && lo[b] <= cend[c]) ||
        csize[c] < s->bnd[b].rows * s->bnd[b].cols * es) {
      r = TE_ERR(TECORE_ERR_INTERNAL, "fusion planning: shared gradient buffer %zu would hold "
                 "boundary %zu alive in backward groups %zu..%zu over another", c, b, lo[b], hi[b]);
      goto out;
    }
    cend[c] = hi[b];
  }
  /* the arena: buffer c at the sum of the earlier buffers' sizes, each
   * 256-byte aligned (what the kernels' vector paths and cuBLASLt like) */
  size_t total = 0;
  for (size_t c = 0; c < ncolors; c++) {
    size_t sz = (csize[c] + 255) & ~(size_t)255;
    csize[c] = total;   /* now the offset */
    total += sz;
  }
  if (total > s->garena_bytes) {
    /* grow: the old arena stays allocated (a captured graph may hold it) */
    r = te_seq_alloc(s, total, 0, &s->garena);
    if (r != TECORE_SUCCESS) goto out;
    s->garena_bytes = total;
  }
  for (size_t i = 0; i < nown; i++) s->bnd[order[i]].g = s->garena + csize[color[order[i]]];
out:
  free(lo), free(hi), free(order), free(color), free(cend), free(csize);
  return r;
}

/* ---- reports -------------------------------------------------------------------------- */

static tecore_result_t check_plan(const tecore_seq_t *s, tecore_seq_dir_t dir, const char *fn) {
  TE_CHECK(te_seq_arg(s, fn));
  TE_ARG(dir == TECORE_SEQ_FORWARD || dir == TECORE_SEQ_BACKWARD,
         "%s: dir is %d, not TECORE_SEQ_FORWARD or TECORE_SEQ_BACKWARD (TECORE_SEQ_RECOMPUTE "
         "is the pass hooks' only: the recomputed forward runs the forward's groups)", fn,
         (int)dir);
  TE_ARG(s->built, "%s: the sequence is not built (tecore_seq_build plans the passes)", fn);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_groups(const tecore_seq_t *s, tecore_seq_dir_t dir,
                                            struct tecore_seq_group *groups, size_t max,
                                            size_t *count) {
  static const char fn[] = "tecore_seq_groups";
  TE_CHECK(check_plan(s, dir, fn));
  TE_ARG(count, "%s: count is NULL", fn);
  TE_ARG(groups || max == 0, "%s: groups is NULL but max is %zu", fn, max);
  size_t ng = s->plan.ngroups[dir];
  for (size_t k = 0; k < ng && k < max; k++) {
    const struct te_group *gr = &s->plan.groups[dir][k];
    groups[k].name = gr->name;
    groups[k].first = gr->first;
    groups[k].count = gr->count;
  }
  *count = ng;
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_seq_describe(const tecore_seq_t *s, tecore_seq_dir_t dir,
                                              char *buf, size_t len, size_t *needed) {
  static const char fn[] = "tecore_seq_describe";
  TE_CHECK(check_plan(s, dir, fn));
  TE_ARG(buf || len == 0, "%s: buf is NULL but len is %zu", fn, len);
  size_t pos = 0;
  char item[256];
  /* an inference sequence says so, and what its forward leaves out */
  const int infer = te_seq_infer(s);
  int k0;
  if (!infer)
    k0 = snprintf(item, sizeof item, "%s:", dir == TECORE_SEQ_FORWARD ? "forward" : "backward");
  else if (dir == TECORE_SEQ_BACKWARD)
    k0 = snprintf(item, sizeof item, "backward: none (inference)");
  else
    k0 = snprintf(item, sizeof item, "forward (inference%s):",
                  s->fp8_run ? ", FP8 weights quantized once, rowwise only" : "");
  size_t total = 0;
  for (size_t k = 0;; k++) {
    if (k > 0) {
      if (infer && dir == TECORE_SEQ_BACKWARD) break;
      if (k > s->plan.ngroups[dir]) break;
      const struct te_group *gr = &s->plan.groups[dir][k - 1];
      /* a Linear an FP8 sequence runs in its own dtype says so; so does
       * a collective the backward runs on the side stream (the group
       * after it in forward order overlaps it) */
      const char *hp = "";
      for (size_t i = gr->first; i < gr->first + gr->count; i++)
        if (s->fp8 && s->ops[i].hp) hp = s->cfg.dtype == TECORE_DTYPE_F16 ? "(f16)" : "(bf16)";
      if (dir == TECORE_SEQ_BACKWARD && k < s->plan.ngroups[dir] &&
          s->plan.groups[dir][k].overlap)
        hp = "(side)";
      /* and a forward GEMM in row blocks, the pattern after it on the
       * side stream */
      char blocks[32];
      if (dir == TECORE_SEQ_FORWARD && gr->chunks > 1) {
        snprintf(blocks, sizeof blocks, "(x%zu)", gr->chunks);
        hp = blocks;
      }
      if (gr->count == 1)
        k0 = snprintf(item, sizeof item, "%s %s%s[%zu]", k > 1 ? " |" : "", gr->name, hp,
                      gr->first);
      else
        k0 = snprintf(item, sizeof item, "%s %s%s[%zu-%zu]", k > 1 ? " |" : "", gr->name, hp,
                      gr->first, gr->first + gr->count - 1);
    }
    size_t il = k0 < 0 ? 0 : (size_t)k0;
    if (il >= sizeof item) il = sizeof item - 1;
    total += il;
    if (len) {
      size_t room = len - 1 - pos;
      size_t c = il < room ? il : room;
      memcpy(buf + pos, item, c);
      pos += c;
    }
  }
  if (len) buf[pos] = '\0';
  if (needed) *needed = total;
  return TECORE_SUCCESS;
}
