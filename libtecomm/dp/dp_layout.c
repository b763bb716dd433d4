/* SPDX-License-Identifier: Apache-2.0 */
/* dp_layout.c -- the data-parallel group's buckets and shards (dp_priv.h
 * says the rules): computed from the tensors alone, so every rank of a
 * group with the same model (tc_dp_agree) lays them out alike. */
#include "dp_priv.h"
#include <stdlib.h>

static size_t round_up(size_t x, size_t m) { return (x + m - 1) / m * m; }

/* Tensor t joins bucket b (prev its last tensor), at element at.  Under
 * ZeRO-3 (and with gradient shards) an operation's parameters are
 * gathered (reduced) together, never split by the size, and a bucket
 * holds either the sequence's parameters or tensors no operation reads,
 * never both; FP8 weights whose codes are
 * gathered (dp_zero3_fp8.c) are buckets of their own. */
static int joins(const struct tecomm_dp *d, const struct dp_bucket *b, const struct dp_tensor *prev,
                 const struct dp_tensor *t, size_t at) {
  if (!b || b->gdt != t->t.grad_dtype || b->vdt != t->t.value_dtype || b->fp8 != t->fp8) return 0;
  if (d->tshards && (t->t.rows || prev->t.rows)) return 0;   /* a table: alone (dp_table.c) */
  size_t esz = tecore_dtype_size(t->t.grad_dtype);
  int fits = (at + t->t.count) * esz <= d->bucket_bytes;
  if (d->zero < 3 && !d->gshards) return fits;   /* gradient shards: in units too */
  if ((prev->t.op == TECOMM_DP_NO_OP) != (t->t.op == TECOMM_DP_NO_OP)) return 0;
  return fits || (t->t.op != TECOMM_DP_NO_OP && t->t.op == prev->t.op);
}

/* Bucket k's padding and shard, once its last tensor is in. */
static void close_bucket(struct tecomm_dp *d, struct dp_bucket *b, size_t used) {
  b->elems = round_up(used ? used : 1, (size_t)DP_ALIGN * (size_t)d->nranks);
  b->shard = b->elems / (size_t)d->nranks;
  b->pending = b->t1 - b->t0;
}

tecomm_result_t tc_dp_layout(struct tecomm_dp *d) {
  d->b = calloc(d->nt ? d->nt : 1, sizeof *d->b);
  if (!d->b) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  size_t used = 0;
  struct dp_bucket *b = NULL;
  for (size_t i = 0; i < d->nt; i++) {
    struct dp_tensor *t = &d->t[i];
    size_t at = round_up(used, DP_ALIGN);
    if (!joins(d, b, i ? &d->t[i - 1] : NULL, t, at)) {
      if (b) close_bucket(d, b, used);
      b = &d->b[d->nb++];
      *b = (struct dp_bucket){.t0 = i, .t1 = i, .gdt = t->t.grad_dtype, .vdt = t->t.value_dtype,
                              .fp8 = t->fp8};
      at = 0;
    }
    t->bucket = (size_t)(b - d->b);
    t->off = at;
    used = at + t->t.count;
    b->t1 = i + 1;
  }
  if (b) close_bucket(d, b, used);
  return TECOMM_SUCCESS;
}

void tc_dp_part(const struct tecomm_dp *d, size_t i, int r, size_t *first, size_t *n) {
  const struct dp_tensor *t = &d->t[i];
  const struct dp_bucket *b = &d->b[t->bucket];
  size_t lo = (size_t)r * b->shard, hi = lo + b->shard;
  size_t a = t->off > lo ? t->off : lo, e = t->off + t->t.count < hi ? t->off + t->t.count : hi;
  *first = a < e ? a - t->off : 0;
  *n = a < e ? e - a : 0;
}

tecore_devptr_t tc_dp_grad_at(const struct tecomm_dp *d, size_t i, size_t first) {
  const struct dp_tensor *t = &d->t[i];
  const struct dp_bucket *b = &d->b[t->bucket];
  size_t es = tecore_dtype_size(t->t.grad_dtype);
  if (b->table) return d->tgrad + b->tg_off + (t->off + first - (size_t)d->rank * b->shard) * es;
  if (!tc_dp_zg_owns(d, b)) return t->t.grad + first * es;
  size_t in = t->off + first - (size_t)d->rank * b->shard;   /* the element in the shard */
  return d->gshard + b->gs_off + in * es;   /* dp_zero3_grad.c's */
}

tecore_devptr_t tc_dp_value_at(const struct tecomm_dp *d, size_t i, size_t first) {
  const struct dp_tensor *t = &d->t[i];
  const struct dp_bucket *b = &d->b[t->bucket];
  size_t es = tecore_dtype_size(t->t.value_dtype);
  if (b->table) return d->tval + b->tv_off + (t->off + first - (size_t)d->rank * b->shard) * es;
  if (!b->sharded) return t->t.value + first * es;
  size_t in = t->off + first - (size_t)d->rank * b->shard;   /* the element in the shard */
  return d->vshard + b->vs_off + in * es;
}
