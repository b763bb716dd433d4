/* SPDX-License-Identifier: Apache-2.0 */
/* dp_zero3.c -- ZeRO-3, fully sharded parameters: a bucket of the
 * sequence's parameters keeps only this rank's shard of its values
 * (vshard, where the optimizer updates them); the sequence's parameters
 * point into a ring of two slots (tecore_seq_set_param), and the pass
 * hooks all-gather each bucket into its slot right before the first
 * group that reads it, forward and backward alike.
 *
 * Why a ring of two with fixed slots: a captured graph holds the
 * addresses, so a bucket always lies in the same slot (its forward
 * position mod 2; the backward walks the buckets in reverse, so they
 * alternate there too).  The next bucket is gathered on the
 * communication stream as soon as its slot's previous bucket has been
 * read by every group queued (the after hook of its last group forks the
 * gather from the pass's stream there): one bucket computes while the
 * next is gathered, and the parameters held across a step are the
 * shards plus two buckets.  A group reading three buckets at once would
 * need a third slot: refused in the pass, naming the bucket size to
 * raise.  Tensors no operation of the sequence reads are kept as ZeRO-2
 * keeps them (tecomm_dp_gather). */
#include "dp_priv.h"
#include "te_results.h"
#include <stdlib.h>

#define Z3_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t z3_c_ = (call);                                            \
    if (z3_c_ != TECORE_SUCCESS) return tc_core(z3_c_, (what));                \
  } while (0)

static const char FN[] = "tecomm_dp_create";

static size_t round256(size_t x) { return (x + 255) / 256 * 256; }

static tecore_devptr_t slot_at(const struct tecomm_dp *d, const struct dp_bucket *b) {
  return d->ring + (size_t)b->slot * d->slot_bytes;
}

tecore_devptr_t tc_dp_value_at(const struct tecomm_dp *d, size_t i, size_t first) {
  const struct dp_tensor *t = &d->t[i];
  const struct dp_bucket *b = &d->b[t->bucket];
  size_t es = tecore_dtype_size(t->t.value_dtype);
  if (!b->sharded) return t->t.value + first * es;
  size_t in = t->off + first - (size_t)d->rank * b->shard;   /* the element in the shard */
  return d->vshard + b->vs_off + in * es;
}

/* ---- create: the checks (local, before the ranks compare) ------------------ */

/* Tensor i's parameter of the sequence: the one whose value it names. */
static tecomm_result_t match_one(struct tecomm_dp *d, size_t i, const struct tecore_seq_param *p,
                                 size_t np) {
  struct dp_tensor *t = &d->t[i];
  size_t j = 0;
  while (j < np && p[j].value.data != t->t.value) j++;
  TC_ARG(j < np, "%s: desc->tensors[%zu].value is no parameter's value of desc->seq (ZeRO-3 "
         "points the sequence's parameters into its ring)", FN, i);
  TC_ARG(p[j].op == t->t.op, "%s: desc->tensors[%zu].op %zu: the parameter is operation %zu's",
         FN, i, t->t.op, p[j].op);
  TC_ARG(p[j].value.dtype == t->t.value_dtype && tecore_tensor_numel(&p[j].value) == t->t.count,
         "%s: desc->tensors[%zu]: value_dtype %s and count %zu, but the parameter is %s, %zu "
         "elements", FN, i, tecore_dtype_name(t->t.value_dtype), t->t.count,
         tecore_dtype_name(p[j].value.dtype), tecore_tensor_numel(&p[j].value));
  t->param = j;
  return TECOMM_SUCCESS;
}

static tecomm_result_t match_params(struct tecomm_dp *d) {
  size_t np = 0;
  Z3_CORE(tecore_seq_params(d->seq, NULL, 0, &np), FN);
  struct tecore_seq_param *p = calloc(np ? np : 1, sizeof *p);
  if (!p) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", FN);
  tecomm_result_t r = tc_core(tecore_seq_params(d->seq, p, np, &np), FN);
  for (size_t i = 0; r == TECOMM_SUCCESS && i < d->nt; i++)
    if (d->b[d->t[i].bucket].sharded) r = match_one(d, i, p, np);
  free(p);
  return r;
}

/* Each bucket of the sequence's parameters sharded, its operations. */
static void mark_buckets(struct tecomm_dp *d) {
  for (size_t k = 0; k < d->nb; k++) {
    struct dp_bucket *b = &d->b[k];
    b->sharded = d->t[b->t0].t.op != TECOMM_DP_NO_OP;   /* dp_layout.c keeps them apart */
    b->op_lo = (size_t)-1, b->op_hi = 0;
    for (size_t i = b->t0; b->sharded && i < b->t1; i++) {
      if (d->t[i].t.op < b->op_lo) b->op_lo = d->t[i].t.op;
      if (d->t[i].t.op > b->op_hi) b->op_hi = d->t[i].t.op;
    }
  }
}

/* The sharded buckets in forward order; their operations must not
 * interleave (a pass reads them one after another). */
static tecomm_result_t order_buckets(struct tecomm_dp *d) {
  d->fwd = calloc(d->nb ? d->nb : 1, sizeof *d->fwd);
  if (!d->fwd) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", FN);
  for (size_t k = 0; k < d->nb; k++) {
    if (!d->b[k].sharded) continue;
    size_t f = d->nfwd++;
    for (; f > 0 && d->b[d->fwd[f - 1]].op_lo > d->b[k].op_lo; f--) d->fwd[f] = d->fwd[f - 1];
    d->fwd[f] = k;
  }
  size_t vs = 0;
  for (size_t f = 0; f < d->nfwd; f++) {
    struct dp_bucket *b = &d->b[d->fwd[f]], *n = f + 1 < d->nfwd ? &d->b[d->fwd[f + 1]] : NULL;
    TC_ARG(!n || b->op_hi < n->op_lo, "%s: ZeRO-3: bucket %zu's operations [%zu, %zu] and "
           "bucket %zu's [%zu, %zu] interleave (give each operation's tensors one after "
           "another)", FN, d->fwd[f], b->op_lo, b->op_hi, d->fwd[f + 1], n->op_lo, n->op_hi);
    b->slot = (int)(f % 2);
    b->vs_off = vs;
    vs += round256(b->shard * tecore_dtype_size(b->vdt));
    size_t bytes = round256(b->elems * tecore_dtype_size(b->vdt));
    if (bytes > d->slot_bytes) d->slot_bytes = bytes;
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_zero3_check(struct tecomm_dp *d) {
  d->pass_dir = -1;
  if (d->zero < 3 || !d->seq) return TECOMM_SUCCESS;
  mark_buckets(d);
  struct tecore_op_info info;
  while (tecore_seq_op(d->seq, d->nops, &info) == TECORE_SUCCESS) d->nops++;
  tecore_clear_error();
  TC_CHECK(match_params(d));
  return order_buckets(d);
}

/* ---- create: the device side (collective) ----------------------------------- */

static tecomm_result_t alloc_ring(struct tecomm_dp *d) {
  size_t bytes = 2 * d->slot_bytes;
  tecomm_result_t r = tecomm_mem_alloc(d->comm, bytes, &d->ring);
  if (r != TECOMM_ERR_NOT_SUPPORTED) return r;
  d->ring_plain = 1;   /* the level says so on every rank alike */
  Z3_CORE(tecore_mem_alloc(bytes, &d->ring), "tecomm_dp_create: ZeRO-3's ring");
  return TECOMM_SUCCESS;
}

/* This rank's shard of every sharded value, from the values the
 * sequence holds now (padding zeroed: it is gathered too). */
static tecomm_result_t fill_shards(struct tecomm_dp *d) {
  size_t bytes = 0;
  for (size_t f = 0; f < d->nfwd; f++) {
    const struct dp_bucket *b = &d->b[d->fwd[f]];
    bytes = b->vs_off + round256(b->shard * tecore_dtype_size(b->vdt));
  }
  d->vshard_bytes = bytes;
  Z3_CORE(tecore_mem_alloc(bytes, &d->vshard), "tecomm_dp_create: ZeRO-3's shards");
  Z3_CORE(tecore_memset_d8_async(d->vshard, 0, bytes, d->side), FN);
  for (size_t i = 0; i < d->nt; i++) {
    size_t first, n;
    tc_dp_part(d, i, d->rank, &first, &n);
    if (!n || !d->b[d->t[i].bucket].sharded) continue;
    size_t es = tecore_dtype_size(d->t[i].t.value_dtype);
    Z3_CORE(tecore_memcpy_async(tc_dp_value_at(d, i, first), d->t[i].t.value + first * es,
                                n * es, d->side), "tecomm_dp_create: a shard's value");
  }
  Z3_CORE(tecore_stream_synchronize(d->side), FN);
  return TECOMM_SUCCESS;
}

/* The sequence's parameters into the ring (their own storage freed). */
static tecomm_result_t swap_params(struct tecomm_dp *d) {
  d->swapped = 1;
  for (size_t i = 0; i < d->nt; i++) {
    struct dp_tensor *t = &d->t[i];
    const struct dp_bucket *b = &d->b[t->bucket];
    if (!b->sharded) continue;
    t->t.value = slot_at(d, b) + t->off * tecore_dtype_size(b->vdt);
    Z3_CORE(tecore_seq_set_param(d->seq, t->param, t->t.value),
            "tecomm_dp_create: a parameter into ZeRO-3's ring");
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_zero3_setup(struct tecomm_dp *d) {
  if (!d->nfwd) return TECOMM_SUCCESS;
  TC_CHECK(alloc_ring(d));
  for (size_t f = 0; f < d->nfwd; f++)
    Z3_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &d->b[d->fwd[f]].ready), FN);
  TC_CHECK(fill_shards(d));
  return swap_params(d);
}

/* ---- the passes --------------------------------------------------------------- */

static struct dp_bucket *at_pos(struct tecomm_dp *d, size_t pos) {
  return &d->b[d->fwd[d->pass_dir == TECORE_SEQ_FORWARD ? pos : d->nfwd - 1 - pos]];
}

static int reads(const struct dp_bucket *b, size_t first, size_t count) {
  return b->op_lo < first + count && b->op_hi >= first;
}

/* Every group of the pass that reads b is queued once this one is. */
static int read_out(const struct dp_bucket *b, tecore_seq_dir_t dir, size_t first, size_t count) {
  return dir == TECORE_SEQ_FORWARD ? first + count > b->op_hi : first <= b->op_lo;
}

static void pass_start(struct tecomm_dp *d, tecore_seq_dir_t dir, tecore_stream_t stream) {
  d->pass_dir = (int)dir;
  d->pass_stream = stream;
  d->pass_next = 0;
  for (size_t f = 0; f < d->nfwd; f++) d->b[d->fwd[f]].gathered = d->b[d->fwd[f]].used = 0;
}

/* The gathers whose slots are free: the bucket two positions back read
 * by every group queued on stream (the fork orders the gather after). */
static tecomm_result_t prefetch(struct tecomm_dp *d, tecore_stream_t stream) {
  while (d->pass_next < d->nfwd && (d->pass_next < 2 || at_pos(d, d->pass_next - 2)->used)) {
    struct dp_bucket *b = at_pos(d, d->pass_next++);
    TC_CHECK(tc_dp_fork(d, stream));
    TC_CHECK(tc_dp_gather_to(d, b, d->vshard + b->vs_off, slot_at(d, b), d->side));
    Z3_CORE(tecore_event_record(b->ready, d->side), "tecomm_dp: ZeRO-3's gather");
    b->gathered = 1;
  }
  return TECOMM_SUCCESS;
}

static tecore_result_t to_core(tecomm_result_t r) {
  return r == TECOMM_SUCCESS ? TECORE_SUCCESS : (tecore_result_t)te_result_to_core((int)r);
}

/* The group waits for the buckets it reads. */
static tecomm_result_t wait_reads(struct tecomm_dp *d, size_t first, size_t count,
                                  tecore_stream_t stream) {
  for (size_t pos = 0; pos < d->nfwd; pos++) {
    struct dp_bucket *b = at_pos(d, pos);
    if (!reads(b, first, count)) continue;
    TC_ARG(b->gathered, "tecomm_dp: ZeRO-3: operations [%zu, %zu) read bucket %zu while its "
           "ring slot is still another's: a group reads more than two buckets (raise "
           "desc->bucket_bytes)", first, first + count, (size_t)(b - d->b));
    Z3_CORE(tecore_stream_wait_event(stream, b->ready), "tecomm_dp: ZeRO-3's gather");
  }
  return TECOMM_SUCCESS;
}

tecore_result_t tc_dp_zero3_before(struct tecomm_dp *d, tecore_seq_dir_t dir, size_t first,
                                   size_t count, tecore_stream_t stream) {
  if (!d->nfwd) return TECORE_SUCCESS;
  int start = dir == TECORE_SEQ_FORWARD ? first == 0 : first + count >= d->nops;
  if (start || d->pass_dir != (int)dir) pass_start(d, dir, stream);
  if (stream != d->pass_stream) return TECORE_SUCCESS;   /* nested: the outer group waited */
  tecomm_result_t r = prefetch(d, stream);
  if (r == TECOMM_SUCCESS) r = wait_reads(d, first, count, stream);
  return to_core(r);
}

tecore_result_t tc_dp_zero3_after(struct tecomm_dp *d, tecore_seq_dir_t dir, size_t first,
                                  size_t count, tecore_stream_t stream) {
  if (!d->nfwd || d->pass_dir != (int)dir || stream != d->pass_stream) return TECORE_SUCCESS;
  for (size_t pos = 0; pos < d->pass_next; pos++) {
    struct dp_bucket *b = at_pos(d, pos);
    if (b->gathered && read_out(b, dir, first, count)) b->used = 1;
  }
  return to_core(prefetch(d, stream));
}

/* ---- outside the passes -------------------------------------------------------- */

tecomm_result_t tc_dp_value_whole(struct tecomm_dp *d, size_t i, tecore_devptr_t dst,
                                  tecore_stream_t s) {
  const struct dp_tensor *t = &d->t[i];
  const struct dp_bucket *b = &d->b[t->bucket];
  size_t bytes = t->t.count * tecore_dtype_size(t->t.value_dtype);
  if (!b->sharded) {
    Z3_CORE(tecore_memcpy_async(dst, t->t.value, bytes, s), "tecomm_dp_gather_value");
    return TECOMM_SUCCESS;
  }
  TC_CHECK(tc_dp_join(d, s));   /* a pass's gathers into the slot are done */
  TC_CHECK(tc_dp_gather_to(d, b, d->vshard + b->vs_off, slot_at(d, b), s));
  Z3_CORE(tecore_memcpy_async(dst, t->t.value, bytes, s), "tecomm_dp_gather_value");
  return TECOMM_SUCCESS;
}

/* The sequence's parameters in storage of its own again, holding the
 * gathered values (zeros where the gather fails: a peer gone). */
static void restore(struct tecomm_dp *d) {
  (void)tecore_stream_synchronize(d->side);
  size_t np = 0;
  (void)tecore_seq_params(d->seq, NULL, 0, &np);
  struct tecore_seq_param *p = calloc(np ? np : 1, sizeof *p);
  for (size_t f = 0; f < d->nfwd; f++) {
    struct dp_bucket *b = &d->b[d->fwd[f]];
    tecomm_result_t g = tc_dp_gather_to(d, b, d->vshard + b->vs_off, slot_at(d, b), d->side);
    if (g == TECOMM_SUCCESS && tecore_stream_synchronize(d->side) != TECORE_SUCCESS)
      g = TECOMM_ERR_DEVICE;
    for (size_t i = b->t0; i < b->t1; i++) {
      const struct dp_tensor *t = &d->t[i];
      if (tecore_seq_set_param(d->seq, t->param, 0) != TECORE_SUCCESS || !p || g) continue;
      if (tecore_seq_params(d->seq, p, np, &np) == TECORE_SUCCESS)
        (void)tecore_memcpy(p[t->param].value.data, t->t.value,
                            t->t.count * tecore_dtype_size(t->t.value_dtype));
    }
  }
  free(p);
}

void tc_dp_zero3_free(struct tecomm_dp *d) {
  if (d->swapped) restore(d);
  for (size_t f = 0; f < d->nfwd; f++)
    if (d->b[d->fwd[f]].ready) (void)tecore_event_destroy(d->b[d->fwd[f]].ready);
  if (d->vshard) (void)tecore_mem_free(d->vshard);
  if (d->ring && d->ring_plain) (void)tecore_mem_free(d->ring);
  else if (d->ring) (void)tecomm_mem_free(d->comm, d->ring);
  free(d->fwd);
}
