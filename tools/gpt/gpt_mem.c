/* SPDX-License-Identifier: Apache-2.0
 * gpt_mem.c -- te-gpt's saved tensors that the backward never reads, laid
 * over shared scratch by lifetime.
 *
 * A fuser sequence keeps storage for every tensor between its operations
 * (tecore_seq_get_saved lists them).  Some are only read later in the same
 * forward (the output of a Linear that a fused residual add consumes, the
 * GELU output whose FP8 copy the next Linear reads) and some are not
 * written at all by the current plan (a norm's 16-bit output when the
 * norm+quantize fusion writes its FP8 copy instead): in an FP8 GPT block
 * that is about a third of the bytes.  Those whose forward lives [op_first,
 * op_last] do not overlap can share memory; tecore_seq_set_saved gives
 * them that memory and frees the sequence's own.  Parts the backward makes
 * itself (the columnwise FP8 copy behind a norm+quantize, written = 0 but
 * filled during the backward) keep their own storage.  The FP8 weights'
 * columnwise copies are no saved tensors: the fuser keeps none, making each
 * in the backward in one buffer of its own (counted with the FP8 copies
 * and workspaces). */
#include <stdlib.h>
#include <string.h>
#include "gpt.h"

struct arena {
  size_t bytes;
  size_t last_op;     /* the last operation that reads what it holds now */
  int used;           /* holds something */
  tecore_devptr_t p;
};

/* Does part x qualify: not read back, and either written in the forward
 * or a 16-bit activation nothing writes (never a backward-made copy)? */
static int shareable(const struct tecore_seq_saved *x) {
  if (x->read_back || x->external) return 0;
  return x->written || x->part == TECORE_SEQ_SAVED_DATA;
}

/* group[i]: the forward group of operation i (tecore_seq_groups):
 * operations fused into one kernel run at once, so lifetimes are compared
 * group by group. */
size_t *gpt_forward_groups(const struct gpt_model *m, size_t *nops) {
  size_t ng = 0, n = 0;
  GPT_CHECK(tecore_seq_groups(m->seq, TECORE_SEQ_FORWARD, NULL, 0, &ng));
  struct tecore_seq_group *g = gpt_xalloc((ng ? ng : 1) * sizeof *g);
  GPT_CHECK(tecore_seq_groups(m->seq, TECORE_SEQ_FORWARD, g, ng, &ng));
  for (size_t k = 0; k < ng; k++)
    if (g[k].first + g[k].count > n) n = g[k].first + g[k].count;
  size_t *grp = gpt_xalloc((n ? n : 1) * sizeof *grp);
  for (size_t k = 0; k < n; k++) grp[k] = (size_t)-1;   /* not in the plan */
  for (size_t k = 0; k < ng; k++)
    for (size_t i = g[k].first; i < g[k].first + g[k].count; i++) grp[i] = k;
  free(g);
  *nops = n;
  return grp;
}

static int by_first(const void *a, const void *b) {
  const struct tecore_seq_saved *x = a, *y = b;
  return x->op_first < y->op_first ? -1 : x->op_first > y->op_first;
}

void gpt_share_saved(struct gpt_model *m, size_t *shared_bytes, size_t *arena_bytes) {
  *shared_bytes = *arena_bytes = 0;
  size_t n = 0;
  GPT_CHECK(tecore_seq_get_saved(m->seq, NULL, 0, &n));
  struct tecore_seq_saved *sv = gpt_xalloc(n * sizeof *sv);
  size_t *idx = gpt_xalloc(n * sizeof *idx);
  GPT_CHECK(tecore_seq_get_saved(m->seq, sv, n, &n));
  /* order by the first writer; remember each part's index in the list */
  struct tecore_seq_saved *cand = gpt_xalloc(n * sizeof *cand);
  size_t nc = 0;
  for (size_t i = 0; i < n; i++)
    if (shareable(&sv[i])) {
      cand[nc] = sv[i];
      cand[nc].ptr = (tecore_devptr_t)i;   /* the list index rides in ptr while sorting */
      nc++;
    }
  qsort(cand, nc, sizeof *cand, by_first);
  size_t nops = 0, *grp = gpt_forward_groups(m, &nops);
  struct arena *ar = gpt_xalloc((nc + 1) * sizeof *ar);   /* + the backward-made copies' */
  size_t na = 0;
  for (size_t k = 0; k < nc; k++) {
    const struct tecore_seq_saved *x = &cand[k];
    /* free again: what an arena held is read for the last time in a group
     * before the one that writes x (an operation the plan does not list
     * keeps everything: no sharing across it) */
    for (size_t a = 0; a < na; a++)
      if (ar[a].used && ar[a].last_op < nops && x->op_first < nops &&
          grp[ar[a].last_op] != (size_t)-1 && grp[x->op_first] != (size_t)-1 &&
          grp[ar[a].last_op] < grp[x->op_first])
        ar[a].used = 0;
    /* the smallest free arena that fits, else the largest free one grown */
    size_t best = na;
    for (size_t a = 0; a < na; a++)
      if (!ar[a].used && ar[a].bytes >= x->bytes && (best == na || ar[a].bytes < ar[best].bytes))
        best = a;
    if (best == na) {
      for (size_t a = 0; a < na; a++)
        if (!ar[a].used && (best == na || ar[a].bytes > ar[best].bytes)) best = a;
      if (best == na) ar[na++] = (struct arena){0};
      ar[best].bytes = x->bytes > ar[best].bytes ? x->bytes : ar[best].bytes;
    }
    ar[best].used = 1;
    ar[best].last_op = x->op_last;
    idx[k] = best;
    *shared_bytes += x->bytes;
  }
  /* the columnwise FP8 copies the backward makes itself (behind a
   * norm+quantize: written and read by one Linear's weight gradient, on
   * one stream) share one more arena; not with --tp, whose overlapped
   * weight gradients run a group later */
  size_t nb = 0, bmax = 0;
  for (size_t i = 0; i < n && m->tp.size <= 1; i++)
    if (!sv[i].read_back && !sv[i].external && !sv[i].written &&
        sv[i].part == TECORE_SEQ_SAVED_FP8_COL) {
      nb++;
      if (sv[i].bytes > bmax) bmax = sv[i].bytes;
    }
  if (nb > 1) {
    ar[na] = (struct arena){.bytes = bmax, .used = 1};
    na++;
  }
  for (size_t a = 0; a < na; a++) {
    /* 256-byte aligned, as tecore_seq_set_saved asks (tecore_mem_alloc gives that) */
    ar[a].p = gpt_dalloc(ar[a].bytes, &m->dev_bytes);
    *arena_bytes += ar[a].bytes;
  }
  for (size_t k = 0; k < nc; k++)
    GPT_CHECK(tecore_seq_set_saved(m->seq, (size_t)cand[k].ptr, ar[idx[k]].p));
  for (size_t i = 0; i < n && nb > 1; i++)
    if (!sv[i].read_back && !sv[i].external && !sv[i].written &&
        sv[i].part == TECORE_SEQ_SAVED_FP8_COL) {
      GPT_CHECK(tecore_seq_set_saved(m->seq, i, ar[na - 1].p));
      *shared_bytes += sv[i].bytes;
    }
  /* TECORE_SEQ_DEFER_SAVED: what is still without storage (not shared:
   * the backward-made copies under --tp, copies nothing writes) gets the
   * sequence's own */
  GPT_CHECK(tecore_seq_get_saved(m->seq, sv, n, &n));
  for (size_t i = 0; i < n; i++)
    if (!sv[i].ptr && !sv[i].external) GPT_CHECK(tecore_seq_set_saved(m->seq, i, 0));
  m->scratch = ar;
  m->nscratch = na;
  free(grp);
  free(cand);
  free(idx);
  free(sv);
}

void gpt_share_free(struct gpt_model *m) {
  struct arena *ar = m->scratch;
  for (size_t a = 0; a < m->nscratch; a++) GPT_CHECK(tecore_mem_free(ar[a].p));
  free(ar);
  m->scratch = NULL;
  m->nscratch = 0;
}

void gpt_mem_count(const struct gpt_model *m, const struct gpt_train *t, struct gpt_mem *g) {
  memset(g, 0, sizeof *g);
  size_t seq_total = 0, n = 0;
  size_t param_grad = 0;   /* the sequence counts its parameters' gradients with them */
  GPT_CHECK(tecore_seq_memory(m->seq, &param_grad, &seq_total));
  size_t ntab = m->c.rope ? 1 : 2;
  for (size_t i = 0; i < m->np; i++) {
    size_t e = m->p[i].rows * m->p[i].cols;
    if (i < ntab) g->tables += m->p[i].dp_z3 ? 0 : e * 4 * (m->p[i].grad ? 2 : 1);
    else if (m->p[i].grad && !m->p[i].dp_gring) g->grads += e * tecore_dtype_size(m->p[i].grad_dtype);
    /* --zero 1, 2: the masters and moments of the shard only */
    size_t eo = m->p[i].dp_sharded ? m->p[i].dp_count : e;
    if (t && t->ot) g->optim += eo * 4 * (m->p[i].bf16 ? 3 : 2);
  }
  g->params = param_grad > g->grads ? param_grad - g->grads : 0;
  size_t z3 = gpt_dp_value_bytes(m);   /* --zero 3: the values live in the group */
  g->params += z3;
  size_t zg = gpt_dp_grad_bytes(m);    /* and with gradient shards the gradients */
  size_t zt = gpt_dp_table_bytes(m);   /* --table-shards: the token table's shards */
  g->tables += zt;
  size_t seq_grads = g->grads;
  g->grads += zg;
  GPT_CHECK(tecore_seq_get_saved(m->seq, NULL, 0, &n));
  struct tecore_seq_saved *sv = gpt_xalloc((n ? n : 1) * sizeof *sv);
  GPT_CHECK(tecore_seq_get_saved(m->seq, sv, n, &n));
  size_t own_saved = 0;
  for (size_t i = 0; i < n; i++) {
    if (!sv[i].external) own_saved += sv[i].bytes;
    if (sv[i].read_back && !sv[i].external) g->saved_back += sv[i].bytes;
    else if (!sv[i].external) g->saved_other += sv[i].bytes;
  }
  free(sv);
  const struct arena *ar = m->scratch;
  for (size_t a = 0; a < m->nscratch; a++) g->saved_other += ar[a].bytes;
  size_t in_seq = g->params - z3 + seq_grads + own_saved;
  g->fp8_other = seq_total > in_seq ? seq_total - in_seq : 0;
  g->logits = m->srows * (size_t)m->c.vocab * 2;   /* --sp: the rank's rows */
  g->total = seq_total + m->dev_bytes + z3 + zg + zt;
  size_t known = g->params + g->grads + g->optim + g->tables + g->saved_back + g->saved_other +
                 g->fp8_other + g->logits;
  g->rest = g->total > known ? g->total - known : 0;
}
