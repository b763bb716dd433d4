/* SPDX-License-Identifier: Apache-2.0 */
/* dp_zero3_grad.c -- TECOMM_DP_GRAD_SHARDS: under ZeRO-3 no rank keeps
 * the whole gradient of the sequence's parameters either.  A unit's
 * gradients (the same gather units as the values, dp_zero3.c) lie in a
 * ring of two slots, its slot its forward position mod 2 (the backward
 * walks the units in reverse, so they alternate there too, and a
 * captured graph finds them at the same addresses every replay).  Each
 * bucket is laid out in its slot as in the bucket buffer (tensors at
 * their bucket offsets, padding zero), so the reduce-scatter reads it
 * where it lies, with no copy, into this rank's gradient shard (gshard):
 * written by the step's first reduction of the bucket; the later
 * microbatches' reduce in place in the slot (this rank's block of it)
 * and are added from there, so no scratch of a shard's size is kept.
 *
 * (Each slot as large as its parity's largest unit, as the values'.)
 * A slot is zero whenever a unit starts writing it: zeroed at create,
 * and on the communication stream right after the reduce-scatters of the
 * unit that left it, off the backward's critical path; the event gfree
 * recorded there is what the slot's next writer waits for (before its
 * first group).  The backward adds into its gradients as always, so a
 * slot must be zero, not merely free.  Every backward reduces every
 * bucket, armed or not: a slot cannot keep a microbatch's gradients
 * while the next one runs. */
#include "dp_priv.h"
#include <stdlib.h>

#define ZG_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t zg_c_ = (call);                                            \
    if (zg_c_ != TECORE_SUCCESS) return tc_core(zg_c_, (what));                \
  } while (0)

static size_t round256(size_t x) { return (x + 255) / 256 * 256; }

/* Bucket b's gradients in its unit's slot. */
static tecore_devptr_t gslot_at(const struct tecomm_dp *d, const struct dp_bucket *b) {
  return d->gring + (d->u[b->unit].slot ? d->gslot_size[0] : 0) + b->gring_off;
}

tecomm_result_t tc_dp_zg_layout(struct tecomm_dp *d) {
  d->gocc[0] = d->gocc[1] = SIZE_MAX;
  if (!d->gshards) return TECOMM_SUCCESS;
  size_t gs = 0;
  for (size_t k = 0; k < d->nu; k++) {
    struct dp_unit *u = &d->u[k];
    u->gbytes = 0;
    for (size_t f = u->f0; f < u->f1; f++) {
      struct dp_bucket *b = &d->b[d->fwd[f]];
      size_t es = tecore_dtype_size(b->gdt);
      b->gring_off = u->gbytes;
      u->gbytes += round256(b->elems * es);
      b->gs_off = gs;
      gs += round256(b->shard * es);
    }
    if (u->gbytes > d->gslot_size[u->slot]) d->gslot_size[u->slot] = u->gbytes;
  }
  d->gshard_bytes = gs;
  return TECOMM_SUCCESS;
}

/* The sequence's gradients into the ring (their own storage freed). */
static tecomm_result_t point_grads(struct tecomm_dp *d) {
  for (size_t i = 0; i < d->nt; i++) {
    struct dp_tensor *t = &d->t[i];
    const struct dp_bucket *b = &d->b[t->bucket];
    if (!tc_dp_zg_owns(d, b)) continue;
    t->t.grad = gslot_at(d, b) + t->off * tecore_dtype_size(b->gdt);
    ZG_CORE(tecore_seq_set_param_grad(d->seq, t->param, t->t.grad),
            "tecomm_dp_create: a gradient into the gradient ring");
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_zg_setup(struct tecomm_dp *d) {
  if (!d->gshards || !d->nu) return TECOMM_SUCCESS;
  TC_CHECK(tc_dp_sym_alloc(d, d->gslot_size[0] + d->gslot_size[1], &d->gring, &d->gring_plain,
                           "tecomm_dp_create: the gradient ring"));
  ZG_CORE(tecore_mem_alloc(d->gshard_bytes, &d->gshard), "tecomm_dp_create: gradient shards");
  ZG_CORE(tecore_memset_d8_async(d->gshard, 0, d->gshard_bytes, d->side), "tecomm_dp_create");
  for (int s = 0; s < 2; s++)
    ZG_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &d->gfree[s]), "tecomm_dp_create");
  ZG_CORE(tecore_stream_synchronize(d->side), "tecomm_dp_create");
  return point_grads(d);
}

void tc_dp_zg_pass(struct tecomm_dp *d) {
  if (!d->gshards) return;
  d->gocc[0] = d->gocc[1] = SIZE_MAX;   /* the last pass's units are reduced (or queued) */
  for (size_t k = 0; k < d->nu; k++) d->u[k].gready = 0, d->u[k].gpending = d->u[k].f1 - d->u[k].f0;
  for (size_t f = 0; f < d->nfwd; f++) {
    struct dp_bucket *b = &d->b[d->fwd[f]];
    b->launched = 0, b->pending = b->t1 - b->t0;
  }
}

tecomm_result_t tc_dp_zg_before(struct tecomm_dp *d, size_t first, size_t count,
                                tecore_stream_t stream) {
  if (!d->gshards) return TECOMM_SUCCESS;
  for (size_t k = 0; k < d->nu; k++) {
    struct dp_unit *u = &d->u[k];
    if (u->gready || !(u->op_lo < first + count && u->op_hi >= first)) continue;
    size_t *o = &d->gocc[u->slot];
    TC_ARG(*o == SIZE_MAX || *o == k || d->u[*o].gpending == 0,
           "tecomm_dp: ZeRO-3: operations [%zu, %zu) write the gradients of operations [%zu, "
           "%zu] while their ring slot still holds those of operations [%zu, %zu], not yet "
           "reduced: the group writes three gather units, which a plan made since create may "
           "(raise desc->bucket_bytes)", first, first + count, u->op_lo, u->op_hi,
           d->u[*o].op_lo, d->u[*o].op_hi);
    if (d->gfree_rec[u->slot])
      ZG_CORE(tecore_stream_wait_event(stream, d->gfree[u->slot]), "tecomm_dp: the gradient ring");
    *o = k;
    u->gready = 1;
  }
  return TECOMM_SUCCESS;
}

/* This rank's shard of bucket b, reduced out of the ring on d->side:
 * straight into gshard (scaled there), or in place in the slot (this
 * rank's block) and added. */
static tecomm_result_t reduce_out(struct tecomm_dp *d, struct dp_bucket *b) {
  tecore_devptr_t mine = d->gshard + b->gs_off, slot = gslot_at(d, b);
  tecore_devptr_t out = b->gacc ? slot + (size_t)d->rank * b->shard * tecore_dtype_size(b->gdt)
                                : mine;
  TC_CHECK(tecomm_reduce_scatter(d->comm, slot, out, b->shard, b->gdt, TECOMM_SUM, d->side));
  if (!b->gacc++) {
    if (d->scale == 1.0f) return TECOMM_SUCCESS;
    struct tecore_tensor v;
    size_t sh[1] = {b->shard};
    ZG_CORE(tecore_tensor_init(&v, b->gdt, 1, sh, out), "tecomm_dp: scale");
    ZG_CORE(tecore_unscale_multi(&v, &v, 1, d->scale_dev, 0, d->side), "tecomm_dp: scale");
    return TECOMM_SUCCESS;
  }
  ZG_CORE(tecore_scale_add(mine, mine, 1.0f, out, d->scale, b->gdt, b->shard, d->side),
          "tecomm_dp: a microbatch's gradients added to the shard");
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_zg_launch(struct tecomm_dp *d, size_t k, tecore_stream_t stream) {
  struct dp_bucket *b = &d->b[k];
  struct dp_unit *u = &d->u[b->unit];
  TC_CHECK(tc_dp_fork(d, stream));
  b->launched = 1;
  TC_CHECK(reduce_out(d, b));
  if (u->gpending && --u->gpending) return TECOMM_SUCCESS;
  /* the unit's gradients are reduced: its slot zero again for the next */
  tecore_devptr_t slot = d->gring + (u->slot ? d->gslot_size[0] : 0);
  ZG_CORE(tecore_memset_d8_async(slot, 0, u->gbytes, d->side), "tecomm_dp: the gradient ring");
  ZG_CORE(tecore_event_record(d->gfree[u->slot], d->side), "tecomm_dp: the gradient ring");
  d->gfree_rec[u->slot] = 1;
  return TECOMM_SUCCESS;
}

void tc_dp_zg_finish(struct tecomm_dp *d) {
  if (!d->gshards) return;
  for (size_t f = 0; f < d->nfwd; f++) d->b[d->fwd[f]].gacc = 0;
  d->gfree_rec[0] = d->gfree_rec[1] = 0;   /* joined: the caller's stream is past them */
  d->gocc[0] = d->gocc[1] = SIZE_MAX;
}

/* The ring and the shards freed first (no work of the group is queued:
 * the sequence's gradient addresses dangle until tc_dp_zg_own, and
 * nothing reads them in between), so that the values' restore and the
 * gradients' own storage find that memory free. */
void tc_dp_zg_free(struct tecomm_dp *d) {
  for (int s = 0; s < 2; s++)
    if (d->gfree[s]) (void)tecore_event_destroy(d->gfree[s]);
  if (d->gshard) (void)tecore_mem_free(d->gshard);
  tc_dp_sym_free(d, d->gring, d->gring_plain);
  d->gowed = d->gring != 0;
  d->gring = d->gshard = 0;
}

/* The sequence's gradients in storage of its own again (zeroed). */
void tc_dp_zg_own(struct tecomm_dp *d) {
  if (!d->gowed || !d->seq) return;
  for (size_t i = 0; i < d->nt; i++)
    if (tc_dp_zg_owns(d, &d->b[d->t[i].bucket]))
      (void)tecore_seq_set_param_grad(d->seq, d->t[i].param, 0);
  tecore_clear_error();
  d->gowed = 0;
}
