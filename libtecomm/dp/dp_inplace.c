/* SPDX-License-Identifier: Apache-2.0 */
/* dp_inplace.c -- which buckets the data-parallel group reduces where
 * their gradients lie: under ZeRO-0 and ZeRO-1 a bucket whose gradients
 * all sit in one symmetric allocation of the communicator (this rank's
 * slot) and tile one span, each after the one before at the next
 * multiple of 256 bytes from the span's start (tecore_seq_set_grad_region
 * lays a sequence's gradients out so), is allreduced over that span in
 * place: no copy into the bucket buffer and back.  The padding in the
 * span is summed too (the region's owner zeroed it).  A pure function of
 * the layout: the ranks compare the outcome (dp_agree.c). */
#include "dp_priv.h"
#include "comm_priv.h"
#include <stdlib.h>

#define DP_SPAN_ALIGN 256   /* bytes: the padding a gradient may have after it */

TECORE_TUNABLE_INT(tc_tun_dp_inplace, "TECOMM_DP_INPLACE", 1, 0, 1,
                   "1: a data-parallel bucket whose gradients lie in symmetric memory as one "
                   "span is reduced where it lies (tecomm_dp_create); 0: every bucket is packed "
                   "into the group's buffer (the reference to measure against).  Every rank "
                   "must use the same value")

static const char *const why_text[] = {
    [DP_PACKED_ZERO2] = "ZeRO-2 and 3 reduce-scatter",
    [DP_PACKED_ONE_RANK] = "one rank",
    [DP_PACKED_NOT_SYMMETRIC] = "not in one symmetric allocation",
    [DP_PACKED_NOT_CONTIGUOUS] = "gradients not contiguous",
    [DP_PACKED_OFF] = "TECOMM_DP_INPLACE=0",
};

const char *tc_dp_packed_why(int why) {
  return why > 0 && why < DP_PACKED_COUNT_ ? why_text[why] : "in place";
}

static size_t grad_bytes(const struct dp_tensor *t) {
  return t->t.count * tecore_dtype_size(t->t.grad_dtype);
}

/* Tensors [t0, t1) sorted by their gradient's address (a bucket holds
 * few; the caller's order is the backward's, usually the reverse). */
static void sort_by_grad(const struct tecomm_dp *d, size_t *ix, size_t n) {
  for (size_t i = 1; i < n; i++)
    for (size_t j = i; j > 0 && d->t[ix[j]].t.grad < d->t[ix[j - 1]].t.grad; j--) {
      size_t x = ix[j];
      ix[j] = ix[j - 1], ix[j - 1] = x;
    }
}

/* Bucket b's gradients as one span (sorted ix): 0, or the reason not. */
static int tile(struct tecomm_dp *d, struct dp_bucket *b, const size_t *ix, size_t n) {
  tecore_devptr_t lo = d->t[ix[0]].t.grad, end = lo;
  for (size_t i = 0; i < n; i++) {
    struct dp_tensor *t = &d->t[ix[i]];
    size_t at = (size_t)(end - lo);
    if (i) at = (at + DP_SPAN_ALIGN - 1) / DP_SPAN_ALIGN * DP_SPAN_ALIGN;
    if (t->t.grad != lo + at) return DP_PACKED_NOT_CONTIGUOUS;
    t->span_off = at;
    end = t->t.grad + grad_bytes(t);
  }
  struct tc_seg *s = NULL;
  size_t off = 0, room = 0, bytes = (size_t)(end - lo);
  if (!tc_seg_find(d->comm, lo, bytes, &off) || !tc_sym_room(d->comm, lo, &s, &off, &room) ||
      s->internal || room < bytes)
    return DP_PACKED_NOT_SYMMETRIC;
  b->span = lo;
  b->span_elems = bytes / tecore_dtype_size(b->gdt);
  b->seg_off = off;
  return 0;
}

static int bucket_why(struct tecomm_dp *d, struct dp_bucket *b, size_t *ix) {
  if (d->zero >= 2) return DP_PACKED_ZERO2;
  if (d->nranks < 2) return DP_PACKED_ONE_RANK;
  if (!tecore_tunable_int(&tc_tun_dp_inplace)) return DP_PACKED_OFF;
  size_t n = b->t1 - b->t0;
  for (size_t i = 0; i < n; i++) ix[i] = b->t0 + i;
  sort_by_grad(d, ix, n);
  return tile(d, b, ix, n);
}

tecomm_result_t tc_dp_inplace(struct tecomm_dp *d) {
  size_t most = 1;
  for (size_t k = 0; k < d->nb; k++)
    if (d->b[k].t1 - d->b[k].t0 > most) most = d->b[k].t1 - d->b[k].t0;
  size_t *ix = malloc(most * sizeof *ix);
  if (!ix) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  for (size_t k = 0; k < d->nb; k++) {
    struct dp_bucket *b = &d->b[k];
    b->why = bucket_why(d, b, ix);
    b->inplace = b->why == 0;
    for (size_t i = b->t0; i < b->t1 && !b->inplace; i++) d->t[i].span_off = 0;
  }
  free(ix);
  return TECOMM_SUCCESS;
}
