/* SPDX-License-Identifier: Apache-2.0 */
/* offload_seq.c -- offload as a property of a fuser sequence
 * (te/offload.h): the ring that the blocks' saved tensors share, the host
 * copies' placement, and the schedule the sequence's pass hooks queue.
 *
 * With K = prefetch + 1 slots, block j's saved tensors live in slot
 * j mod K.  Per pass, on the compute stream s:
 *   forward, before block j's first group (j >= K): s waits out_done[j-K]
 *            (block j - K's copy out has finished reading the slot);
 *   forward, after block j's last group (copied blocks): record ev_fwd[j]
 *            on s; D2H waits it, copies block j out, records out_done[j];
 *   forward, after the last group: s waits for the D2H stream (join);
 *   backward, after block j's first group (its backward is done, slot
 *            j mod K is free): record ev_bwd[j] on s; H2D waits it, brings
 *            block j - K back, records in_done[j-K];
 *   backward, before block j's last group (copied blocks): s waits
 *            in_done[j] (issued now if no later block freed the slot);
 *   backward, after the last group: s waits for the H2D stream (join).
 * Every side-stream fork starts from an event of s and joins back into s,
 * so a capture of either pass holds the whole schedule, and replays of the
 * captured forward and backward keep it.  Blocks K from the end are never
 * copied: nothing overwrites their slot before their backward.
 * Saved tensors the backward does not read share the ring without being
 * copied at all. */
#include "offload_internal.h"
#include "te_results.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t round256(size_t v) { return (v + 255) & ~(size_t)255; }

static int block_of(const struct ol_seq *q, size_t op) {
  for (size_t j = 0; j < q->nb; j++)
    if (op >= q->b[j].first && op < q->b[j].end) return (int)j;
  return -1;
}

/* ---- the hooks -------------------------------------------------------------------- */

/* Whether this pass queued a copy out (reload 0) or a reload (1): only
 * then is the side stream forked from the compute stream, and joined. */
static int any_issued(const struct ol_seq *q, int reload) {
  for (size_t j = 0; j < q->nb; j++)
    if (reload ? q->b[j].reload_issued : q->b[j].out_issued) return 1;
  return 0;
}

static tecore_result_t fail_core(tegraph_offload_t *c, const char *what) {
  tecore_set_error("activation offload: %s: %s", what, c->failmsg);
  return TECORE_ERR_SYSTEM;
}

static tecore_result_t reload(tegraph_offload_t *c, struct ol_block *b, tecore_stream_t s,
                              tecore_event_t after) {
  tecore_result_t r = tecore_event_record(after, s);
  if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(c->h2d, after);
  if (r != TECORE_SUCCESS) return r;
  if (ol_in(c, &b->x, "activation offload (reload)") != TEGRAPH_SUCCESS)
    return TECORE_ERR_SYSTEM;   /* the detail is set */
  r = tecore_event_record(b->in_done, c->h2d);
  b->reload_issued = 1;
  return r;
}

static tecore_result_t hook_before(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                   size_t first, size_t count, tecore_stream_t s) {
  (void)seq;
  tegraph_offload_t *c = ctx;
  struct ol_seq *q = c->sq;
  if (!q || !q->enabled || dir == TECORE_SEQ_RECOMPUTE) return TECORE_SUCCESS;
  tecore_result_t r = TECORE_SUCCESS;
  if (dir == TECORE_SEQ_FORWARD) {
    if (first == 0) {
      q->pending = 1;   /* the ring holds this forward's tensors until its backward */
      /* a new pass: the previous one's failures fail this step's next call */
      if (ol_seq_check(c) != TEGRAPH_SUCCESS) return fail_core(c, "an earlier step failed");
      for (size_t j = 0; j < q->nb; j++)
        q->b[j].fwd_waited = q->b[j].out_issued = q->b[j].reload_issued = q->b[j].bwd_waited = 0;
    }
    for (size_t op = first; op < first + count && r == TECORE_SUCCESS; op++) {
      int j = block_of(q, op);
      if (j < q->K || q->b[j].fwd_waited) continue;
      q->b[j].fwd_waited = 1;
      struct ol_block *prev = &q->b[j - q->K];
      if (prev->copied && prev->out_issued) r = tecore_stream_wait_event(s, prev->out_done);
    }
    return r;
  }
  for (size_t op = first + count; op-- > first && r == TECORE_SUCCESS;) {
    int j = block_of(q, op);
    if (j < 0 || !q->b[j].copied || q->b[j].bwd_waited) continue;
    struct ol_block *b = &q->b[j];
    if (!b->reload_issued) r = reload(c, b, s, b->ev_bwd);
    if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(s, b->in_done);
    b->bwd_waited = 1;
  }
  return r;
}

static tecore_result_t hook_after(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                  size_t first, size_t count, tecore_stream_t s) {
  (void)seq;
  tegraph_offload_t *c = ctx;
  struct ol_seq *q = c->sq;
  if (!q || !q->enabled || dir == TECORE_SEQ_RECOMPUTE) return TECORE_SUCCESS;
  tecore_result_t r = TECORE_SUCCESS;
  if (dir == TECORE_SEQ_FORWARD) {
    for (size_t j = 0; j < q->nb && r == TECORE_SUCCESS; j++) {
      struct ol_block *b = &q->b[j];
      if (!b->copied || b->out_issued || b->end - 1 < first || b->end - 1 >= first + count)
        continue;
      r = tecore_event_record(b->ev_fwd, s);
      if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(c->d2h, b->ev_fwd);
      if (r != TECORE_SUCCESS) break;
      if (ol_out(c, &b->x, "activation offload (copy out)") != TEGRAPH_SUCCESS)
        return TECORE_ERR_SYSTEM;
      r = tecore_event_record(b->out_done, c->d2h);
      b->out_issued = 1;
    }
    /* join the D2H stream, when this pass forked it (with no block copied
     * it never waited on s: a join would make a capture wait on work
     * recorded outside it) */
    if (r == TECORE_SUCCESS && first + count == q->nops && any_issued(q, 0)) {
      r = tecore_event_record(c->tail, c->d2h);
      if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(s, c->tail);
    }
    return r;
  }
  for (size_t j = 0; j < q->nb && r == TECORE_SUCCESS; j++) {
    struct ol_block *b = &q->b[j];
    if (b->first < first || b->first >= first + count) continue;
    /* block j's backward is done: its slot takes block j - K */
    if (j >= (size_t)q->K) {
      struct ol_block *o = &q->b[j - (size_t)q->K];
      if (o->copied && !o->reload_issued) r = reload(c, o, s, b->ev_bwd);
    }
  }
  if (r == TECORE_SUCCESS && first == 0 && any_issued(q, 1)) {   /* join the H2D stream */
    r = tecore_event_record(c->tail, c->h2d);
    if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(s, c->tail);
  }
  if (r == TECORE_SUCCESS && first == 0) q->pending = 0;   /* the backward has ended */
  return r;
}

/* ---- attach / detach / enable --------------------------------------------------- */

tegraph_result_t ol_seq_idle(const tegraph_offload_t *c, const char *fn) {
  /* a failed context has failed its step already (tegraph_offload_check):
   * nothing can be trusted to come back, so it may go */
  if (!c->sq || !c->sq->pending || c->failed != TEGRAPH_SUCCESS) return TEGRAPH_SUCCESS;
  return TG_ERR(TEGRAPH_ERR_STATE,
                "%s: a forward pass's saved tensors are out (in the ring or host copies) and its "
                "backward has not ended: the backward would read memory that is gone.  Run the "
                "backward first (or drop the forward with tegraph_offload_reset when no backward "
                "will run)", fn);
}

tegraph_result_t ol_seq_check(tegraph_offload_t *c) {
  if (!c->sq) return c->failed;
  for (size_t j = 0; j < c->sq->nb && c->failed == TEGRAPH_SUCCESS; j++)
    (void)ol_xfer_check(c, &c->sq->b[j].x);
  return c->failed;
}

static void seq_free(struct ol_seq *q) {
  if (!q) return;
  for (size_t j = 0; j < q->nb; j++) {
    struct ol_block *b = &q->b[j];
    ol_xfer_free(&b->x);
    if (b->ev_fwd) (void)tecore_event_destroy(b->ev_fwd);
    if (b->out_done) (void)tecore_event_destroy(b->out_done);
    if (b->ev_bwd) (void)tecore_event_destroy(b->ev_bwd);
    if (b->in_done) (void)tecore_event_destroy(b->in_done);
  }
  if (q->ring) (void)tecore_mem_free(q->ring);
  free(q->b);
  free(q->ring_idx);
  free(q->ring_ptr);
  free(q);
}

static const char *part_name(tecore_seq_saved_part_t p) {
  switch (p) {
  case TECORE_SEQ_SAVED_DATA: return "data";
  case TECORE_SEQ_SAVED_FP8_ROW: return "fp8 rowwise";
  case TECORE_SEQ_SAVED_FP8_COL: return "fp8 columnwise";
  case TECORE_SEQ_SAVED_BF16: return "bf16 copy";
  }
  return "?";
}

static tegraph_result_t set_storage(tegraph_offload_t *c, int on, const char *fn) {
  struct ol_seq *q = c->sq;
  for (size_t i = 0; i < q->nring; i++)
    TG_CORE(tecore_seq_set_saved(q->seq, q->ring_idx[i], on ? q->ring_ptr[i] : 0), fn);
  q->enabled = on;
  return TEGRAPH_SUCCESS;
}

/* The sequence's op count, after the checks of c and d that need no
 * allocation (the blocks in order, inside the sequence). */
static tegraph_result_t attach_check(tegraph_offload_t *c, const struct tegraph_offload_seq_desc *d,
                                     size_t *nops_out, const char *fn) {
  TG_CHECK(ol_live(c, fn));
  TG_ARG(d, "%s: d is NULL", fn);
  TG_ARG(d->seq, "%s: d->seq is NULL", fn);
  TG_ARG(d->blocks && d->nblocks >= 1, "%s: d->blocks is NULL or d->nblocks is 0", fn);
  TG_ARG(d->nkeep == 0 || d->keep, "%s: d->keep is NULL but d->nkeep is %zu", fn, d->nkeep);
  TG_ARG(!c->sq, "%s: a sequence is already attached (tegraph_offload_detach first)", fn);
  if (c->nsaves)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: tensor saves are live (tegraph_offload_reset first)",
                  fn);
  size_t ng = 0;
  TG_CORE(tecore_seq_groups(d->seq, TECORE_SEQ_FORWARD, NULL, 0, &ng), fn);
  size_t nops = 0;
  for (;; nops++) {
    struct tecore_op_info oi;
    if (tecore_seq_op(d->seq, nops, &oi) != TECORE_SUCCESS) break;
  }
  tecore_clear_error();
  for (size_t j = 0; j < d->nblocks; j++) {
    const struct tegraph_offload_block *b = &d->blocks[j];
    TG_ARG(b->count >= 1 && b->first + b->count <= nops,
           "%s: d->blocks[%zu] = ops [%zu, %zu) is empty or past the sequence's %zu ops", fn, j,
           b->first, b->first + b->count, nops);
    TG_ARG(j == 0 || b->first >= d->blocks[j - 1].first + d->blocks[j - 1].count,
           "%s: d->blocks[%zu] overlaps or precedes d->blocks[%zu]", fn, j, j - 1);
  }
  *nops_out = nops;
  return TEGRAPH_SUCCESS;
}

/* What attach works from: the sequence's saved tensors and, per saved
 * tensor, its block in the ring (-1: not in the ring) and its offset in
 * the block's slot. */
struct attach_work {
  size_t ns;
  struct tecore_seq_saved *sv;
  size_t *off;
  int *blk;
};

/* Lays the blocks' saved tensors over the ring: each block's tensors at
 * offsets of its own, the slot as big as the biggest block.  What is kept,
 * too small, read outside its block, external, or (without spill files)
 * past the host pool stays where the sequence puts it. */
static tegraph_result_t plan_ring(tegraph_offload_t *c, const struct tegraph_offload_seq_desc *d,
                                  struct ol_seq *q, struct attach_work *w, const char *fn) {
  const struct tecore_seq_saved *sv = w->sv;
  size_t *bsize = calloc(q->nb, sizeof *bsize);
  if (!bsize) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  size_t host_sim = c->host_used;
  for (size_t i = 0; i < w->ns; i++) {
    w->blk[i] = -1;
    int jb = block_of(q, sv[i].op_first);
    int kept = 0;
    for (size_t k = 0; k < d->nkeep; k++) kept |= d->keep[k] == i;
    size_t elems = sv[i].rows * sv[i].cols;
    int fits = 1;
    if (jb >= 0 && q->b[jb].copied && sv[i].read_back && !c->spill) {
      /* without spill files, what the pool cannot hold stays where it is */
      size_t at = round256(host_sim);
      fits = at + sv[i].bytes <= c->host_cap;
      if (fits) host_sim = at + sv[i].bytes;
    }
    if (jb < 0 || block_of(q, sv[i].op_last) != jb || kept || elems < c->min_elems ||
        sv[i].external || !fits) {
      if (sv[i].read_back) q->kept++;
      continue;
    }
    w->blk[i] = jb;
    w->off[i] = bsize[jb];
    bsize[jb] += round256(sv[i].bytes);
    q->ring_idx[q->nring] = i;
    q->nring++;
  }
  for (size_t j = 0; j < q->nb; j++)
    if (bsize[j] > q->slot_bytes) q->slot_bytes = bsize[j];
  free(bsize);
  if (q->nring == 0)
    return TG_ERR(TEGRAPH_ERR_INVALID, "%s: no saved tensor of the blocks can be offloaded "
                  "(each has fewer than min_elems = %zu elements, is marked keep, or is read "
                  "outside its block)", fn, c->min_elems);
  tecore_result_t r = tecore_mem_alloc((size_t)q->K * q->slot_bytes, &q->ring);
  if (r != TECORE_SUCCESS) return tg_core(r, "tegraph_offload_attach: the ring");
  for (size_t n = 0; n < q->nring; n++) {
    size_t i = q->ring_idx[n];
    q->ring_ptr[n] = q->ring + (size_t)(w->blk[i] % q->K) * q->slot_bytes + w->off[i];
  }
  return TEGRAPH_SUCCESS;
}

/* Block by block: the schedule's events and the host copies of the
 * copied blocks' tensors that backward reads (a block not copied keeps
 * them in its slot until its backward). */
static tegraph_result_t plan_copies(tegraph_offload_t *c, struct ol_seq *q,
                                    const struct attach_work *w, const char *fn) {
  const struct tecore_seq_saved *sv = w->sv;
  tegraph_result_t res = TEGRAPH_SUCCESS;
  for (size_t j = 0; j < q->nb && res == TEGRAPH_SUCCESS; j++) {
    struct ol_block *b = &q->b[j];
    tecore_result_t r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &b->ev_fwd);
    if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &b->out_done);
    if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &b->ev_bwd);
    if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &b->in_done);
    if (r != TECORE_SUCCESS) return tg_core(r, fn);
    for (size_t n = 0; n < q->nring && res == TEGRAPH_SUCCESS; n++) {
      size_t i = q->ring_idx[n];
      if (w->blk[i] != (int)j || !sv[i].read_back) continue;
      if (!b->copied) {
        q->kept++;   /* stays in its slot until its backward */
        continue;
      }
      char name[96];
      snprintf(name, sizeof name, "block %zu saved[%zu] (boundary %zu %s, %s [%zu][%zu])", j, i,
               sv[i].bnd, part_name(sv[i].part), tecore_dtype_name(sv[i].dtype), sv[i].rows,
               sv[i].cols);
      res = ol_add_part(c, &b->x, q->ring_ptr[n], sv[i].bytes, name, fn);
      q->offloaded++;
    }
    q->pass_host += ol_xfer_bytes(&b->x, OL_HOST);
    q->pass_files += ol_xfer_bytes(&b->x, OL_FILE);
  }
  return res;
}

/* Makes q the context's plan: the sequence's hooks, its saved tensors
 * pointed into the ring.  On failure both are undone and c has no plan. */
static tegraph_result_t install(tegraph_offload_t *c, tecore_seq_t *seq, struct ol_seq *q,
                                const char *fn) {
  c->sq = q;
  struct tecore_seq_hooks h = {.before = hook_before, .after = hook_after, .ctx = c};
  tegraph_result_t res = TEGRAPH_SUCCESS;
  tecore_result_t r = tecore_seq_set_hooks(seq, &h);
  if (r != TECORE_SUCCESS) res = tg_core(r, fn);
  if (res == TEGRAPH_SUCCESS) res = set_storage(c, 1, fn);
  if (res != TEGRAPH_SUCCESS) {
    (void)set_storage(c, 0, fn);
    (void)tecore_seq_set_hooks(seq, NULL);
    c->sq = NULL;
  }
  return res;
}

/* Offload moves the saved tensors a recomputed forward rewrites in the
 * backward (tecore_seq_set_recompute): the two do not combine. */
static tegraph_result_t refuse_recompute(const struct attach_work *w, const char *fn) {
  for (size_t i = 0; i < w->ns; i++)
    if (w->sv[i].external == TECORE_SEQ_SAVED_RECOMPUTED)
      return TG_ERR(TEGRAPH_ERR_NOT_SUPPORTED, "%s: d->seq recomputes activations "
                    "(tecore_seq_set_recompute): offload and recomputation do not combine",
                    fn);
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_attach(tegraph_offload_t *c,
                                                  const struct tegraph_offload_seq_desc *d) {
  static const char fn[] = "tegraph_offload_attach";
  size_t nops = 0;
  TG_CHECK(attach_check(c, d, &nops, fn));
  size_t ns = 0;
  TG_CORE(tecore_seq_get_saved(d->seq, NULL, 0, &ns), fn);
  struct attach_work w = {.ns = ns};
  w.sv = calloc(ns ? ns : 1, sizeof *w.sv);
  struct ol_seq *q = calloc(1, sizeof *q);
  if (q) {
    q->b = calloc(d->nblocks, sizeof *q->b);
    q->ring_idx = calloc(ns ? ns : 1, sizeof *q->ring_idx);
    q->ring_ptr = calloc(ns ? ns : 1, sizeof *q->ring_ptr);
  }
  w.off = calloc(ns ? ns : 1, sizeof *w.off);
  w.blk = calloc(ns ? ns : 1, sizeof *w.blk);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  size_t host0 = c->host_used;
  uint64_t file0 = c->file_used;
  if (!w.sv || !q || !q->b || !q->ring_idx || !q->ring_ptr || !w.off || !w.blk) {
    res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    goto out;
  }
  for (size_t i = 0; i < d->nkeep; i++)
    if (d->keep[i] >= ns) {
      res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: d->keep[%zu] = %zu is not a saved tensor (the "
                   "sequence saves %zu)", fn, i, d->keep[i], ns);
      goto out;
    }
  tecore_result_t r = tecore_seq_get_saved(d->seq, w.sv, ns, &w.ns);
  if (r == TECORE_SUCCESS) r = tecore_seq_memory(d->seq, NULL, &q->before);
  if (r != TECORE_SUCCESS) {
    res = tg_core(r, fn);
    goto out;
  }
  res = refuse_recompute(&w, fn);
  if (res != TEGRAPH_SUCCESS) goto out;
  q->seq = d->seq;
  q->nops = nops;
  q->nb = d->nblocks;
  q->K = c->prefetch + 1;
  for (size_t j = 0; j < q->nb; j++) {
    q->b[j].first = d->blocks[j].first;
    q->b[j].end = d->blocks[j].first + d->blocks[j].count;
    q->b[j].copied = j + (size_t)q->K < q->nb;
  }
  res = plan_ring(c, d, q, &w, fn);
  if (res == TEGRAPH_SUCCESS) res = plan_copies(c, q, &w, fn);
  if (res == TEGRAPH_SUCCESS) {
    q->host_end = c->host_used;
    q->file_end = c->file_used;
    res = install(c, d->seq, q, fn);
  }
  if (res == TEGRAPH_SUCCESS) {
    r = tecore_seq_memory(d->seq, NULL, &q->after);
    q = NULL;   /* the context's now */
    if (r != TECORE_SUCCESS) res = tg_core(r, fn);
  } else {
    c->host_used = host0;
    c->file_used = file0;
  }
out:
  seq_free(q);
  free(w.sv);
  free(w.off);
  free(w.blk);
  return res;
}

int ol_seq_forget_gone(tegraph_offload_t *c, const char *fn) {
  size_t total = 0;
  if (!c->sq || tecore_seq_memory(c->sq->seq, NULL, &total) == TECORE_SUCCESS) return 0;
  tecore_clear_error();
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_OFFLOAD, __FILE__, __LINE__,
             "%s: the attached sequence %p was destroyed first; its plan is dropped without "
             "calling it", fn, (void *)c->sq->seq);
  seq_free(c->sq);
  c->sq = NULL;
  if (!c->nsaves) {
    c->host_used = 0;
    c->file_used = 0;
  }
  return 1;
}

void ol_seq_drop(tegraph_offload_t *c) {
  if (!c->sq) return;
  (void)set_storage(c, 0, "tegraph_offload_destroy");
  (void)tecore_seq_set_hooks(c->sq->seq, NULL);
  seq_free(c->sq);
  c->sq = NULL;
  tecore_clear_error();
}

TE_EXPORT tegraph_result_t tegraph_offload_detach(tegraph_offload_t *c) {
  static const char fn[] = "tegraph_offload_detach";
  TG_CHECK(ol_live(c, fn));
  TG_ARG(c->sq, "%s: no sequence is attached", fn);
  if (ol_seq_forget_gone(c, fn)) return TEGRAPH_SUCCESS;
  TG_CHECK(ol_seq_idle(c, fn));
  TG_CORE(tecore_stream_synchronize(c->d2h), fn);
  TG_CORE(tecore_stream_synchronize(c->h2d), fn);
  if (c->failed == TEGRAPH_SUCCESS) (void)ol_seq_check(c);
  TG_CHECK(set_storage(c, 0, fn));
  TG_CORE(tecore_seq_set_hooks(c->sq->seq, NULL), fn);
  if (!c->nsaves) {   /* the plan's pool and file space are free again */
    c->host_used = 0;
    c->file_used = 0;
  }
  seq_free(c->sq);
  c->sq = NULL;
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_enable(tegraph_offload_t *c, int on) {
  static const char fn[] = "tegraph_offload_enable";
  TG_CHECK(ol_live(c, fn));
  TG_ARG(c->sq, "%s: no sequence is attached", fn);
  if ((on != 0) == c->sq->enabled) return TEGRAPH_SUCCESS;
  TG_CHECK(ol_seq_idle(c, fn));
  TG_CORE(tecore_stream_synchronize(c->d2h), fn);
  TG_CORE(tecore_stream_synchronize(c->h2d), fn);
  return set_storage(c, on != 0, fn);
}

TE_EXPORT tecore_result_t tegraph_offload_hook_off(void *ctx) {
  tegraph_result_t r = tegraph_offload_enable(ctx, 0);
  return (tecore_result_t)te_result_to_core((int)r);
}

TE_EXPORT tecore_result_t tegraph_offload_hook_on(void *ctx) {
  tegraph_result_t r = tegraph_offload_enable(ctx, 1);
  return (tecore_result_t)te_result_to_core((int)r);
}
