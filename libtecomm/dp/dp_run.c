/* SPDX-License-Identifier: Apache-2.0 */
/* dp_run.c -- what the data-parallel group queues: a bucket's reduction
 * on the communication stream (forked from the pass's stream with an
 * event, joined back by tecomm_dp_finish), the values' all-gather and the
 * norm's parts.  A bucket's tensors are packed into the symmetric buffer
 * (so the collective reads it where it lies), reduced there in place,
 * scaled, and copied back: under ZeRO-0/1 all of the bucket, under
 * ZeRO-2 and 3 (reduce-scatter) this rank's shard only.  A bucket whose
 * gradients already lie in symmetric memory as one span (dp_inplace.c)
 * is allreduced and scaled there, with no copy. */
#include "dp_priv.h"
#include <stdlib.h>
#include <string.h>

#define DP_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t dp_c_ = (call);                                            \
    if (dp_c_ != TECORE_SUCCESS) return tc_core(dp_c_, (what));                \
  } while (0)

static tecore_devptr_t at(tecore_devptr_t base, size_t elems, tecore_dtype_t dt) {
  return base + elems * tecore_dtype_size(dt);
}

/* The two collectives ZeRO-2 and the gather take, as one rank's block
 * of count elements (NCCL's convention), in place in the buffer. */
static tecomm_result_t dp_reduce_scatter(struct tecomm_dp *d, size_t count, tecore_dtype_t dt,
                                         tecore_stream_t s) {
  tecore_devptr_t mine = at(d->buf, (size_t)d->rank * count, dt);
  return tecomm_reduce_scatter(d->comm, d->buf, mine, count, dt, TECOMM_SUM, s);
}
static tecomm_result_t dp_allgather(struct tecomm_dp *d, size_t count, tecore_dtype_t dt,
                                    tecore_stream_t s) {
  tecore_devptr_t mine = at(d->buf, (size_t)d->rank * count, dt);
  return tecomm_allgather(d->comm, mine, d->buf, count, dt, s);
}

/* Bucket b's gradients into the buffer (pack 1) or back (pack 0: the
 * elements of shard r only when r >= 0). */
static tecomm_result_t move_grads(struct tecomm_dp *d, const struct dp_bucket *b, int pack, int r,
                                  tecore_stream_t s) {
  for (size_t i = b->t0; i < b->t1; i++) {
    const struct dp_tensor *t = &d->t[i];
    size_t first = 0, n = t->t.count;
    if (r >= 0) tc_dp_part(d, i, r, &first, &n);
    if (!n) continue;
    tecore_devptr_t g = at(t->t.grad, first, b->gdt), u = at(d->buf, t->off + first, b->gdt);
    size_t bytes = n * tecore_dtype_size(b->gdt);
    DP_CORE(tecore_memcpy_async(pack ? u : g, pack ? g : u, bytes, s), "tecomm_dp: a bucket's copy");
  }
  return TECOMM_SUCCESS;
}

/* elems elements from p times d->scale (when not 1). */
static tecomm_result_t scale_at(struct tecomm_dp *d, const struct dp_bucket *b, tecore_devptr_t p,
                                size_t elems, tecore_stream_t s) {
  if (d->scale == 1.0f) return TECOMM_SUCCESS;
  struct tecore_tensor v;
  size_t sh[1] = {elems};
  DP_CORE(tecore_tensor_init(&v, b->gdt, 1, sh, p), "tecomm_dp: scale");
  DP_CORE(tecore_unscale_multi(&v, &v, 1, d->scale_dev, 0, s), "tecomm_dp: scale");
  return TECOMM_SUCCESS;
}

/* elems elements of the buffer from first times d->scale (when not 1). */
static tecomm_result_t scale(struct tecomm_dp *d, const struct dp_bucket *b, size_t first,
                             size_t elems, tecore_stream_t s) {
  return scale_at(d, b, at(d->buf, first, b->gdt), elems, s);
}

/* An in-place bucket (dp_inplace.c): its span allreduced where it lies. */
static tecomm_result_t reduce_span(struct tecomm_dp *d, const struct dp_bucket *b,
                                   tecore_stream_t s) {
  TC_CHECK(tecomm_allreduce(d->comm, b->span, b->span, b->span_elems, b->gdt, TECOMM_SUM, s));
  return scale_at(d, b, b->span, b->span_elems, s);
}

/* The bucket's sum: allreduce (ZeRO-0/1) or reduce-scatter into this
 * rank's shard (ZeRO-2), in place in the buffer. */
static tecomm_result_t reduce(struct tecomm_dp *d, const struct dp_bucket *b, tecore_stream_t s) {
  if (d->zero < 2) {
    TC_CHECK(tecomm_allreduce(d->comm, d->buf, d->buf, b->elems, b->gdt, TECOMM_SUM, s));
    return scale(d, b, 0, b->elems, s);
  }
  TC_CHECK(dp_reduce_scatter(d, b->shard, b->gdt, s));
  return scale(d, b, (size_t)d->rank * b->shard, b->shard, s);
}

tecomm_result_t tc_dp_sym_alloc(struct tecomm_dp *d, size_t bytes, tecore_devptr_t *p, int *plain,
                                const char *what) {
  tecomm_result_t r = tecomm_mem_alloc(d->comm, bytes, p);
  *plain = r == TECOMM_ERR_NOT_SUPPORTED;
  if (*plain) DP_CORE(tecore_mem_alloc(bytes, p), what);
  else TC_CHECK(r);
  DP_CORE(tecore_memset_d8_async(*p, 0, bytes, d->side), what);
  return TECOMM_SUCCESS;
}

void tc_dp_sym_free(struct tecomm_dp *d, tecore_devptr_t p, int plain) {
  if (p && plain) (void)tecore_mem_free(p);
  else if (p) (void)tecomm_mem_free(d->comm, p);
}

tecomm_result_t tc_dp_fork(struct tecomm_dp *d, tecore_stream_t stream) {
  DP_CORE(tecore_event_record(d->fork, stream), "tecomm_dp: the fork");
  DP_CORE(tecore_stream_wait_event(d->side, d->fork), "tecomm_dp: the fork");
  d->forked = 1;
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_launch(struct tecomm_dp *d, size_t k, tecore_stream_t stream) {
  struct dp_bucket *b = &d->b[k];
  TC_CHECK(tc_dp_fork(d, stream));
  b->launched = 1;
  if (b->inplace) return reduce_span(d, b, d->side);
  TC_CHECK(move_grads(d, b, 1, -1, d->side));
  TC_CHECK(reduce(d, b, d->side));
  return move_grads(d, b, 0, d->zero < 2 ? -1 : d->rank, d->side);
}

tecomm_result_t tc_dp_join(struct tecomm_dp *d, tecore_stream_t stream) {
  if (!d->forked) return TECOMM_SUCCESS;
  DP_CORE(tecore_event_record(d->join, d->side), "tecomm_dp: the join");
  DP_CORE(tecore_stream_wait_event(stream, d->join), "tecomm_dp: the join");
  d->forked = 0;
  return TECOMM_SUCCESS;
}

/* Bucket b's values: this rank's shard into the buffer (pack 1), or all
 * of them back (pack 0). */
static tecomm_result_t move_values(struct tecomm_dp *d, const struct dp_bucket *b, int pack,
                                   tecore_stream_t s) {
  for (size_t i = b->t0; i < b->t1; i++) {
    const struct dp_tensor *t = &d->t[i];
    size_t first = 0, n = t->t.count;
    if (pack) tc_dp_part(d, i, d->rank, &first, &n);
    if (!n || !t->t.value) continue;
    tecore_devptr_t v = at(t->t.value, first, b->vdt), u = at(d->buf, t->off + first, b->vdt);
    size_t bytes = n * tecore_dtype_size(b->vdt);
    DP_CORE(tecore_memcpy_async(pack ? u : v, pack ? v : u, bytes, s), "tecomm_dp_gather: a copy");
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_gather_all(struct tecomm_dp *d, tecore_stream_t stream) {
  for (size_t k = 0; k < d->nb; k++) {
    const struct dp_bucket *b = &d->b[k];
    if (b->sharded || b->table) continue;   /* ZeRO-3: gathered by the passes; tables: never */
    TC_CHECK(move_values(d, b, 1, stream));
    TC_CHECK(dp_allgather(d, b->shard, b->vdt, stream));
    TC_CHECK(move_values(d, b, 0, stream));
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_gather_to(struct tecomm_dp *d, const struct dp_bucket *b,
                                tecore_devptr_t src, tecore_devptr_t dst, tecore_stream_t s) {
  tecore_devptr_t mine = at(dst, (size_t)d->rank * b->shard, b->vdt);
  DP_CORE(tecore_memcpy_async(mine, src, b->shard * tecore_dtype_size(b->vdt), s),
          "tecomm_dp: a shard into the ring");
  return tecomm_allgather(d->comm, mine, dst, b->shard, b->vdt, s);
}

tecomm_result_t tc_dp_norm_setup(struct tecomm_dp *d) {
  d->views = calloc(d->nt ? d->nt : 1, sizeof *d->views);
  if (!d->views) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  for (size_t i = 0; i < d->nt; i++) {
    size_t first, n;
    tc_dp_part(d, i, d->rank, &first, &n);
    if (!n) continue;
    size_t sh[1] = {n};
    DP_CORE(tecore_tensor_init(&d->views[d->nviews++], d->t[i].t.grad_dtype, 1, sh,
                               tc_dp_grad_at(d, i, first)),
            "tecomm_dp_create: the norm's views");
  }
  d->l2wsb = 0;
  if (d->nviews)
    DP_CORE(tecore_l2norm_multi_workspace_size(d->views, d->nviews, &d->l2wsb),
            "tecomm_dp_create: the norm's workspace");
  if (d->l2wsb) DP_CORE(tecore_mem_alloc(d->l2wsb, &d->l2ws), "tecomm_dp_create: workspace");
  DP_CORE(tecore_mem_alloc(4 * (size_t)d->nranks, &d->normvec), "tecomm_dp_create: norm vector");
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_norm(struct tecomm_dp *d, tecore_stream_t s) {
  DP_CORE(tecore_memset_d32_async(d->normvec, 0, (size_t)d->nranks, s), "tecomm_dp_norm_parts");
  tecore_devptr_t mine = d->normvec + 4 * (size_t)d->rank;
  if (d->nviews)
    DP_CORE(tecore_l2norm_multi(d->views, d->nviews, d->l2ws, d->l2wsb, mine, 0, s),
            "tecomm_dp_norm_parts: the shard's norm");
  return tecomm_allreduce(d->comm, d->normvec, d->normvec, (size_t)d->nranks, TECORE_DTYPE_F32,
                          TECOMM_SUM, s);
}
