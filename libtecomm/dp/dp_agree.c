/* SPDX-License-Identifier: Apache-2.0 */
/* dp_agree.c -- ranks whose models differ are refused when the group is
 * made, with the first difference named: a rank that trained another
 * shape (or dtype, or recipe) would otherwise reduce its gradients into
 * the wrong places, silently.  One host allgather of a summary (the
 * stage, bucket size, recipe and a hash of every tensor's count, dtypes,
 * operation and in-place layout, dp_inplace.c); only when a hash differs, the tensors' records in
 * rounds of DP_ROUND, to name the first tensor and field that differ.
 * Every rank sees every rank's records, so all of them fail alike. */
#include "dp_priv.h"
#include "comm_priv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define DP_ROUND 64

struct dp_wire {
  uint64_t ntensors, bucket_bytes, hash;
  int32_t zero, has_recipe, kind, format, margin, history, amax_algo, flags;
};

struct dp_rec {
  uint64_t count, op, rows;
  int32_t gdt, vdt, has_value, inplace;
  uint64_t sym_off;    /* in place: the gradient's offset in its symmetric allocation */
};

static uint64_t fnv(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

static struct dp_rec rec_of(const struct tecomm_dp *d, const struct dp_tensor *t) {
  struct dp_rec r;
  memset(&r, 0, sizeof r);
  r.count = t->t.count;
  r.op = t->t.op == TECOMM_DP_NO_OP ? UINT64_MAX : (uint64_t)t->t.op;
  r.rows = t->t.rows;
  r.gdt = (int32_t)t->t.grad_dtype;
  r.vdt = t->t.value ? (int32_t)t->t.value_dtype : -1;
  r.has_value = t->t.value != 0;
  r.inplace = d->b[t->bucket].inplace;
  r.sym_off = r.inplace ? d->b[t->bucket].seg_off + t->span_off : 0;
  return r;
}

static struct dp_wire wire_of(const struct tecomm_dp *d, const struct tecore_recipe *rc) {
  struct dp_wire w;
  memset(&w, 0, sizeof w);
  w.ntensors = d->nt, w.bucket_bytes = d->bucket_bytes, w.zero = d->zero;
  w.flags = (d->gshards ? (int32_t)TECOMM_DP_GRAD_SHARDS : 0) |
            (d->tshards ? (int32_t)TECOMM_DP_TABLE_SHARDS : 0) |
            (d->fp8_keep ? 0x100 : 0);   /* TECOMM_DP_FP8_KEEP */
  w.hash = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < d->nt; i++) {
    struct dp_rec r = rec_of(d, &d->t[i]);
    w.hash = fnv(&r, sizeof r, w.hash);
  }
  if (rc) {
    w.has_recipe = 1, w.kind = (int32_t)rc->kind, w.format = (int32_t)rc->format;
    w.margin = rc->margin, w.history = rc->history_len, w.amax_algo = (int32_t)rc->amax_algo;
  }
  return w;
}

/* The first summary field where a differs from b: its name, both values. */
static const char *wire_diff(const struct dp_wire *a, const struct dp_wire *b, long long *va,
                             long long *vb) {
#define DP_FIELD(f, name)                                                      \
  if (a->f != b->f) return *va = (long long)a->f, *vb = (long long)b->f, name
  DP_FIELD(ntensors, "the number of tensors");
  DP_FIELD(zero, "the ZeRO stage");
  DP_FIELD(bucket_bytes, "the bucket size (bytes)");
  DP_FIELD(flags, "desc->flags (0x100: TECOMM_DP_FP8_KEEP)");
  DP_FIELD(has_recipe, "an FP8 recipe (1) or none (0)");
  DP_FIELD(kind, "the recipe's kind");
  DP_FIELD(format, "the recipe's FP8 format");
  DP_FIELD(margin, "the recipe's margin");
  DP_FIELD(history, "the recipe's amax history length");
  DP_FIELD(amax_algo, "the recipe's amax algorithm");
#undef DP_FIELD
  return NULL;
}

static const char *rec_diff(const struct dp_rec *a, const struct dp_rec *b, long long *va,
                            long long *vb) {
#define DP_FIELD(f, name)                                                      \
  if (a->f != b->f) return *va = (long long)a->f, *vb = (long long)b->f, name
  DP_FIELD(count, "count (elements)");
  DP_FIELD(gdt, "grad_dtype");
  DP_FIELD(has_value, "value given (1) or not (0)");
  DP_FIELD(vdt, "value_dtype");
  DP_FIELD(op, "op (the writing operation)");
  DP_FIELD(rows, "rows (an embedding table's)");
  DP_FIELD(inplace, "its bucket reduced in place (1) or packed (0): the gradients' layout");
  DP_FIELD(sym_off, "its gradient's offset in the symmetric allocation (in place)");
#undef DP_FIELD
  return NULL;
}

static tecomm_result_t xchg(struct tecomm_dp *d, const void *me, void *all, size_t bytes) {
  struct tecomm_comm *c = d->comm;
  tecomm_result_t r = c->xchg->allgather(c->xchg, me, all, bytes);
  if (r != TECOMM_SUCCESS)
    return TC_ERR(r, "tecomm_dp_create: the ranks' models could not be compared: %s",
                  tecomm_last_error());
  return TECOMM_SUCCESS;
}

/* Round k of the tensors' records: the first tensor and field where a
 * peer differs, named; TECOMM_SUCCESS when none does in this round. */
static tecomm_result_t rec_round(struct tecomm_dp *d, size_t k, struct dp_rec *all) {
  struct dp_rec me[DP_ROUND];
  size_t i0 = k * DP_ROUND, n = d->nt - i0 < DP_ROUND ? d->nt - i0 : DP_ROUND;
  memset(me, 0, sizeof me);
  for (size_t i = 0; i < n; i++) me[i] = rec_of(d, &d->t[i0 + i]);
  TC_CHECK(xchg(d, me, all, sizeof me));
  for (size_t i = 0; i < n; i++)
    for (int p = 0; p < d->nranks; p++) {
      long long va, vb;
      const char *f = rec_diff(&me[i], &all[(size_t)p * DP_ROUND + i], &va, &vb);
      if (f)
        return TC_ERR(TECOMM_ERR_MISMATCH, "tecomm_dp_create: tensor %zu (%s): %s is %lld here, "
                      "%lld on rank %d: the ranks' models differ", i0 + i, d->t[i0 + i].name, f,
                      va, vb, p);
    }
  return TECOMM_SUCCESS;
}

static tecomm_result_t records(struct tecomm_dp *d) {
  struct dp_rec *all = malloc((size_t)d->nranks * DP_ROUND * sizeof *all);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  tecomm_result_t r = TECOMM_SUCCESS;
  for (size_t k = 0; r == TECOMM_SUCCESS && k * DP_ROUND < d->nt; k++) r = rec_round(d, k, all);
  free(all);
  if (r == TECOMM_SUCCESS)   /* the hashes differ, the records not: a collision of FNV */
    r = TC_ERR(TECOMM_ERR_MISMATCH, "tecomm_dp_create: the ranks' models differ (hash)");
  return r;
}

tecomm_result_t tc_dp_agree(struct tecomm_dp *d, const struct tecore_recipe *recipe) {
  if (d->nranks < 2) return TECOMM_SUCCESS;
  struct dp_wire me = wire_of(d, recipe);
  struct dp_wire *all = malloc((size_t)d->nranks * sizeof *all);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  tecomm_result_t r = xchg(d, &me, all, sizeof me);
  for (int p = 0; r == TECOMM_SUCCESS && p < d->nranks; p++) {
    long long va, vb;
    const char *f = wire_diff(&me, &all[p], &va, &vb);
    if (f)
      r = TC_ERR(TECOMM_ERR_MISMATCH, "tecomm_dp_create: %s is %lld here, %lld on rank %d: the "
                 "ranks' models differ", f, va, vb, p);
  }
  /* every rank decides alike: it saw every summary */
  int any_hash = 0;
  for (int p = 1; r == TECOMM_SUCCESS && p < d->nranks; p++) any_hash |= all[p].hash != all[0].hash;
  free(all);
  if (r == TECOMM_SUCCESS && any_hash) r = records(d);
  return r;
}
