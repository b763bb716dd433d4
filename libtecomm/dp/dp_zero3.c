/* SPDX-License-Identifier: Apache-2.0 */
/* dp_zero3.c -- ZeRO-3, fully sharded parameters: a bucket of the
 * sequence's parameters keeps only this rank's shard of its values
 * (vshard, where the optimizer updates them); the sequence's parameters
 * point into a ring of two slots (tecore_seq_set_param), and the pass
 * hooks all-gather each bucket into its unit's slot right before the
 * first group that reads it, forward and backward alike.
 *
 * The gather unit is a bucket, or buckets whose operations overlap (an
 * operation's weight and bias apart by their gradient dtypes): a unit
 * is gathered whole into one slot.  Units a group of the plan reads
 * three or more of (a fusion across a separate Bias op) are made one.
 * Each slot is as large as the largest unit of its parity (a model's
 * LM head, much larger than a layer, widens one slot only).
 * Why a ring of two with fixed slots:
 * a captured graph holds the addresses, so a unit always lies in the
 * same slot (its forward position mod 2; the backward walks the units in
 * reverse, so they alternate there too).  The next unit is gathered on
 * the communication stream as soon as its slot's previous unit has been
 * read by every group queued (the after hook of its last group forks the
 * gather from the pass's stream there): one unit computes while the next
 * is gathered, and the parameters held across a step are the shards
 * plus two units.  A group reading three units at once would need a
 * third slot: units are merged at create so that none of the plan's
 * groups does; a later plan (a recipe change) that does fails its pass,
 * naming the bucket size to raise.
 * A recomputed forward inside the backward (its groups' hooks say
 * TECORE_SEQ_RECOMPUTE) reads its units in forward order: each is
 * gathered into its slot when a group needs it and is not there, and
 * after each group the next unit (unless the backward read it out: past
 * the range); the units it evicts are gathered again by the backward's
 * prefetch, which knows what a slot holds (occ), not only what it
 * gathered itself.
 * Tensors no operation of the sequence reads are kept as ZeRO-2 keeps
 * them (tecomm_dp_gather). */
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
    if (d->b[d->t[i].bucket].seq) r = match_one(d, i, p, np);
  free(p);
  return r;
}

/* Each bucket of the sequence's parameters marked (ZeRO-3: sharded), its
 * operations. */
static void mark_buckets(struct tecomm_dp *d) {
  for (size_t k = 0; k < d->nb; k++) {
    struct dp_bucket *b = &d->b[k];
    b->seq = d->t[b->t0].t.op != TECOMM_DP_NO_OP;   /* dp_layout.c keeps them apart */
    b->sharded = b->seq && d->zero == 3;
    b->op_lo = (size_t)-1, b->op_hi = 0;
    for (size_t i = b->t0; b->seq && i < b->t1; i++) {
      if (d->t[i].t.op < b->op_lo) b->op_lo = d->t[i].t.op;
      if (d->t[i].t.op > b->op_hi) b->op_hi = d->t[i].t.op;
    }
  }
}

/* The sequence's buckets in forward order (by their first operation,
 * then their last). */
static tecomm_result_t order_buckets(struct tecomm_dp *d) {
  d->fwd = calloc(d->nb ? d->nb : 1, sizeof *d->fwd);
  if (!d->fwd) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", FN);
  for (size_t k = 0; k < d->nb; k++) {
    const struct dp_bucket *b = &d->b[k];
    if (!b->seq) continue;
    size_t f = d->nfwd++;
    for (; f > 0; f--) {
      const struct dp_bucket *a = &d->b[d->fwd[f - 1]];
      if (a->op_lo < b->op_lo || (a->op_lo == b->op_lo && a->op_hi <= b->op_hi)) break;
      d->fwd[f] = d->fwd[f - 1];
    }
    d->fwd[f] = k;
  }
  return TECOMM_SUCCESS;
}

/* Bucket f (forward order) into the open unit, or a new one. */
static void unit_take(struct tecomm_dp *d, size_t f, int fresh) {
  struct dp_bucket *b = &d->b[d->fwd[f]];
  struct dp_unit *u = d->nu ? &d->u[d->nu - 1] : NULL;
  if (!u || fresh) {
    u = &d->u[d->nu++];
    *u = (struct dp_unit){.f0 = f, .op_lo = b->op_lo, .op_hi = b->op_hi,
                          .slot = (int)((d->nu - 1) % 2)};
  }
  if (b->op_hi > u->op_hi) u->op_hi = b->op_hi;
  u->f1 = f + 1;
  b->unit = (size_t)(u - d->u);
  b->ring_off = u->bytes;
  u->bytes += round256(b->elems * tecore_dtype_size(b->vdt));
  if (u->bytes > d->slot_size[u->slot]) d->slot_size[u->slot] = u->bytes;
}

/* The units: buckets whose operations overlap together; with merge (the
 * final pass), the units of the overlap alone marked to join the one
 * before, and a unit smaller than the bucket size joined by the next:
 * a norm's few kilobytes between two Linears would otherwise be a unit
 * whose work cannot hide the next big unit's gather (nor, with gradient
 * shards, the reduce-scatter its slot waits for).  Joining neighbours
 * never makes a group read more units. */
static void build_units(struct tecomm_dp *d, const unsigned char *merge) {
  size_t ou = 0, ou_hi = 0;   /* the overlap unit and its last operation */
  d->nu = 0, d->slot_size[0] = d->slot_size[1] = 0;
  for (size_t f = 0; f < d->nfwd; f++) {
    const struct dp_bucket *b = &d->b[d->fwd[f]];
    int fresh = f == 0 || b->op_lo > ou_hi;
    if (fresh && f) ou++;
    if (fresh || b->op_hi > ou_hi) ou_hi = b->op_hi;
    int small = merge && d->nu && d->u[d->nu - 1].bytes < d->bucket_bytes;
    unit_take(d, f, fresh && !(merge && merge[ou]) && !small);
  }
}

/* merge[k]: unit k joins k - 1, for each group of dir reading three or
 * more units (a ring of two could not hold them). */
static tecomm_result_t mark_merges(struct tecomm_dp *d, tecore_seq_dir_t dir,
                                   unsigned char *merge) {
  size_t n = 0;
  Z3_CORE(tecore_seq_groups(d->seq, dir, NULL, 0, &n), FN);
  struct tecore_seq_group *g = calloc(n ? n : 1, sizeof *g);
  if (!g) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", FN);
  tecore_result_t r = tecore_seq_groups(d->seq, dir, g, n, &n);
  for (size_t k = 0; r == TECORE_SUCCESS && k < n; k++) {
    size_t lo = d->nu, hi = 0;
    for (size_t i = 0; i < d->nu; i++)
      if (d->u[i].op_lo < g[k].first + g[k].count && d->u[i].op_hi >= g[k].first)
        lo = i < lo ? i : lo, hi = i;
    for (size_t i = lo + 1; lo < d->nu && hi >= lo + 2 && i <= hi; i++) merge[i] = 1;
  }
  free(g);
  Z3_CORE(r, FN);
  return TECOMM_SUCCESS;
}

/* The units and the shards' places. */
static tecomm_result_t make_units(struct tecomm_dp *d) {
  size_t vs = 0;
  for (size_t f = 0; f < d->nfwd; f++) {
    struct dp_bucket *b = &d->b[d->fwd[f]];
    b->vs_off = vs;
    vs += round256(b->shard * tecore_dtype_size(b->vdt));
  }
  d->vshard_bytes = vs;
  d->u = calloc(d->nfwd ? d->nfwd : 1, sizeof *d->u);
  unsigned char *merge = calloc(d->nfwd ? d->nfwd : 1, 1);
  tecomm_result_t r = TECOMM_SUCCESS;
  if (!d->u || !merge) r = TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", FN);
  if (r == TECOMM_SUCCESS) build_units(d, NULL);
  if (r == TECOMM_SUCCESS) r = mark_merges(d, TECORE_SEQ_FORWARD, merge);
  if (r == TECOMM_SUCCESS) r = mark_merges(d, TECORE_SEQ_BACKWARD, merge);
  if (r == TECOMM_SUCCESS) build_units(d, merge);
  free(merge);
  return r;
}

tecomm_result_t tc_dp_zero3_check(struct tecomm_dp *d) {
  d->pass_dir = -1;
  d->occ[0] = d->occ[1] = SIZE_MAX;
  if (!d->seq || (d->zero < 3 && !d->gshards)) return TECOMM_SUCCESS;
  mark_buckets(d);
  for (size_t k = 0; k < d->nb; k++) d->nfp8 += d->b[k].sharded && d->b[k].fp8;
  struct tecore_op_info info;
  while (tecore_seq_op(d->seq, d->nops, &info) == TECORE_SUCCESS) d->nops++;
  tecore_clear_error();
  TC_CHECK(match_params(d));
  TC_CHECK(order_buckets(d));
  TC_CHECK(make_units(d));
  return tc_dp_zg_layout(d);
}

/* ---- create: the device side (collective) ----------------------------------- */

/* This rank's shard of every sharded value, from the values the
 * sequence holds now (padding zeroed: it is gathered too). */
static tecomm_result_t fill_shards(struct tecomm_dp *d) {
  size_t bytes = d->vshard_bytes;
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
    t->t.value = tc_dp_slot_at(d, b) + t->off * tecore_dtype_size(b->vdt);
    Z3_CORE(tecore_seq_set_param(d->seq, t->param, t->t.value),
            "tecomm_dp_create: a parameter into ZeRO-3's ring");
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_zero3_setup(struct tecomm_dp *d) {
  if (!d->nu) return TECOMM_SUCCESS;
  if (d->zero < 3) return tc_dp_zg_setup(d);   /* ZeRO-2: the gradient ring alone */
  TC_CHECK(tc_dp_sym_alloc(d, d->slot_size[0] + d->slot_size[1], &d->ring, &d->ring_plain,
                           "tecomm_dp_create: ZeRO-3's ring"));
  for (size_t k = 0; k < d->nu; k++)
    Z3_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &d->u[k].ready), FN);
  TC_CHECK(fill_shards(d));
  TC_CHECK(tc_dp_zero3_fp8_setup(d));
  TC_CHECK(tc_dp_zg_setup(d));
  return swap_params(d);
}

/* ---- the passes --------------------------------------------------------------- */

static struct dp_unit *at_pos(struct tecomm_dp *d, size_t pos) {
  return &d->u[d->pass_dir == TECORE_SEQ_FORWARD ? pos : d->nu - 1 - pos];
}

static int reads(const struct dp_unit *u, size_t first, size_t count) {
  return u->op_lo < first + count && u->op_hi >= first;
}

/* Every group of the pass that reads u is queued once this one is. */
static int read_out(const struct dp_unit *u, tecore_seq_dir_t dir, size_t first, size_t count) {
  return dir == TECORE_SEQ_FORWARD ? first + count > u->op_hi : first <= u->op_lo;
}

/* A backward right after a whole forward reads first the units the
 * forward read last: they still lie in their slots (no gather between),
 * so they stay gathered, their events as recorded then. */
static void pass_start(struct tecomm_dp *d, tecore_seq_dir_t dir, tecore_stream_t stream) {
  int keep = dir == TECORE_SEQ_BACKWARD && d->fwd_done;
  d->fwd_done = 0;
  d->pass_dir = (int)dir;
  d->pass_stream = stream;
  if (dir == TECORE_SEQ_FORWARD) tc_dp_zero3_fp8_refresh(d);
  else tc_dp_zg_pass(d);   /* a backward: the gradient ring's buckets launch again */
  for (size_t k = 0; k < d->nu; k++) d->u[k].used = 0, d->u[k].gathered &= keep;
  if (!keep) d->occ[0] = d->occ[1] = SIZE_MAX;
}

/* Unit u gathered into its slot on the side stream, forked from stream
 * (so after every read of the slot's unit before queued there). */
static tecomm_result_t gather_unit(struct tecomm_dp *d, struct dp_unit *u,
                                   tecore_stream_t stream) {
  TC_CHECK(tc_dp_fork(d, stream));
  for (size_t f = u->f0; f < u->f1; f++) {
    const struct dp_bucket *b = &d->b[d->fwd[f]];
    if (b->fp8 && b->codes) {   /* the codes, into the bucket's slot space */
      TC_CHECK(tc_dp_zero3_fp8_gather(d, b));
      continue;
    }
    TC_CHECK(tc_dp_gather_to(d, b, d->vshard + b->vs_off, tc_dp_slot_at(d, b), d->side));
    d->gathered_bytes += b->elems * tecore_dtype_size(b->vdt);
  }
  Z3_CORE(tecore_event_record(u->ready, d->side), "tecomm_dp: ZeRO-3's gather");
  size_t *o = &d->occ[u->slot], k = (size_t)(u - d->u);
  if (*o != SIZE_MAX && *o != k) d->u[*o].gathered = 0;   /* evicted */
  *o = k;
  u->gathered = 1;
  return TECOMM_SUCCESS;
}

/* The pass's next two units gathered: the first whose groups are not all
 * queued and the one after (a unit read out frees its slot: the groups of
 * a pass read the units in its order, so the read-out ones come first). */
static tecomm_result_t prefetch(struct tecomm_dp *d, tecore_stream_t stream) {
  size_t p = 0;
  while (p < d->nu && at_pos(d, p)->used) p++;
  for (size_t q = p; q < p + 2 && q < d->nu; q++)
    if (!at_pos(d, q)->gathered) TC_CHECK(gather_unit(d, at_pos(d, q), stream));
  return TECOMM_SUCCESS;
}

static tecore_result_t to_core(tecomm_result_t r) {
  return r == TECOMM_SUCCESS ? TECORE_SUCCESS : (tecore_result_t)te_result_to_core((int)r);
}

/* The group waits for the units it reads; with fetch, a unit not in its
 * slot is gathered first. */
static tecomm_result_t wait_reads(struct tecomm_dp *d, size_t first, size_t count, int fetch,
                                  tecore_stream_t stream) {
  for (size_t pos = 0; pos < d->nu; pos++) {
    struct dp_unit *u = at_pos(d, pos);
    if (!reads(u, first, count)) continue;
    if (fetch && !u->gathered) TC_CHECK(gather_unit(d, u, stream));
    TC_ARG(u->gathered, "tecomm_dp: ZeRO-3: operations [%zu, %zu) read the values of "
           "operations [%zu, %zu] while their ring slot is still another's: the group reads "
           "three gather units, which a plan made since create may (raise "
           "desc->bucket_bytes)", first, first + count,
           u->op_lo, u->op_hi);
    Z3_CORE(tecore_stream_wait_event(stream, u->ready), "tecomm_dp: ZeRO-3's gather");
  }
  return TECOMM_SUCCESS;
}

/* A recomputed forward group (tecore_seq_set_recompute) inside the
 * backward: its units gathered where they are not (evicting what the
 * backward held; its prefetch gathers that again), no unit marked read
 * out.  The first recomputation of a backward starts the pass. */
static tecore_result_t recompute_before(struct tecomm_dp *d, size_t first, size_t count,
                                        tecore_stream_t stream) {
  if (d->pass_dir != TECORE_SEQ_BACKWARD) {
    pass_start(d, TECORE_SEQ_BACKWARD, stream);
    d->rc_started = 1;
  }
  if (stream != d->pass_stream || d->zero < 3) return TECORE_SUCCESS;   /* ZeRO-2: no values */
  return to_core(wait_reads(d, first, count, 1, stream));
}

tecore_result_t tc_dp_zero3_before(struct tecomm_dp *d, tecore_seq_dir_t dir, size_t first,
                                   size_t count, tecore_stream_t stream) {
  if (!d->nu) return TECORE_SUCCESS;
  if (dir == TECORE_SEQ_RECOMPUTE) return recompute_before(d, first, count, stream);
  int start = dir == TECORE_SEQ_FORWARD ? first == 0 : first + count >= d->nops;
  if (d->rc_started) start = 0;   /* the recomputation before began this backward */
  d->rc_started = 0;
  if (start || d->pass_dir != (int)dir) pass_start(d, dir, stream);
  if (stream != d->pass_stream) return TECORE_SUCCESS;   /* nested: the outer group waited */
  tecomm_result_t r = TECOMM_SUCCESS;
  if (d->zero == 3) r = prefetch(d, stream);   /* ZeRO-2 (gradient shards): no values */
  if (r == TECOMM_SUCCESS && d->zero == 3) r = wait_reads(d, first, count, 0, stream);
  if (r == TECOMM_SUCCESS && dir == TECORE_SEQ_BACKWARD) r = tc_dp_zg_before(d, first, count, stream);
  return to_core(r);
}

/* After a recomputed group: the unit after the last it read, gathered
 * while the next group computes, unless the backward has read it out
 * (then it lies past the recomputed range: the range ends before the
 * operations of the backward's groups queued). */
static tecore_result_t recompute_after(struct tecomm_dp *d, size_t first, size_t count,
                                       tecore_stream_t stream) {
  if (d->pass_dir != TECORE_SEQ_BACKWARD || stream != d->pass_stream) return TECORE_SUCCESS;
  size_t h = d->nu;
  for (size_t k = 0; k < d->nu; k++)
    if (reads(&d->u[k], first, count)) h = k;
  if (h + 1 >= d->nu || d->u[h + 1].used || d->u[h + 1].gathered) return TECORE_SUCCESS;
  return to_core(gather_unit(d, &d->u[h + 1], stream));
}

tecore_result_t tc_dp_zero3_after(struct tecomm_dp *d, tecore_seq_dir_t dir, size_t first,
                                  size_t count, tecore_stream_t stream) {
  if (d->zero < 3) return TECORE_SUCCESS;   /* ZeRO-2 (gradient shards): nothing to gather */
  if (d->nu && dir == TECORE_SEQ_RECOMPUTE) return recompute_after(d, first, count, stream);
  if (!d->nu || d->pass_dir != (int)dir || stream != d->pass_stream) return TECORE_SUCCESS;
  for (size_t pos = 0; pos < d->nu; pos++) {
    struct dp_unit *u = at_pos(d, pos);
    if (read_out(u, dir, first, count)) u->used = 1;
  }
  if (dir == TECORE_SEQ_FORWARD && first + count >= d->nops) d->fwd_done = 1;
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
  TC_CHECK(tc_dp_gather_to(d, b, d->vshard + b->vs_off, tc_dp_slot_at(d, b), s));
  d->fwd_done = 0;   /* the slot's unit is no longer whole: a backward gathers anew */
  Z3_CORE(tecore_memcpy_async(dst, t->t.value, bytes, s), "tecomm_dp_gather_value");
  return TECOMM_SUCCESS;
}

/* The sequence's parameters in storage of its own again, holding the
 * gathered values (zeros where the gather fails; none tried on a
 * communicator that failed already: a peer gone would make each one wait
 * out TECOMM_TIMEOUT). */
static void restore(struct tecomm_dp *d) {
  (void)tecore_stream_synchronize(d->side);
  int healthy = tecomm_comm_status(d->comm, NULL) == TECOMM_SUCCESS;
  tecore_clear_error();
  size_t np = 0;
  (void)tecore_seq_params(d->seq, NULL, 0, &np);
  struct tecore_seq_param *p = calloc(np ? np : 1, sizeof *p);
  for (size_t f = 0; f < d->nfwd; f++) {
    struct dp_bucket *b = &d->b[d->fwd[f]];
    tecomm_result_t g = TECOMM_ERR_ABORTED;
    if (healthy) g = tc_dp_gather_to(d, b, d->vshard + b->vs_off, tc_dp_slot_at(d, b), d->side);
    if (g == TECOMM_SUCCESS && tecore_stream_synchronize(d->side) != TECORE_SUCCESS)
      g = TECOMM_ERR_DEVICE;
    healthy = healthy && g == TECOMM_SUCCESS;
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
  tc_dp_zero3_fp8_free(d);
  tc_dp_zg_free(d);
  if (d->swapped && d->seq) restore(d);   /* NULL: the sequence went first (dp_free) */
  for (size_t k = 0; k < d->nu; k++)
    if (d->u[k].ready) (void)tecore_event_destroy(d->u[k].ready);
  if (d->vshard) (void)tecore_mem_free(d->vshard);
  tc_dp_sym_free(d, d->ring, d->ring_plain);
  tc_dp_zg_own(d);   /* last: the most memory free for it */
  free(d->fwd);
  free(d->u);
}
