/* SPDX-License-Identifier: Apache-2.0 */
/* dp_zero3_fp8.c -- ZeRO-3 under delayed scaling: an FP8 Linear's weight
 * is all-gathered as its E4M3 codes (one byte an element) instead of its
 * values, straight into the FP8 weight the sequence's forward reads
 * (tecore_seq_fp8_weight), which then quantizes nothing for it
 * (tecore_seq_set_fp8_weight_given).
 *
 * Why delayed scaling only: the scale is the one tecore_seq_update_scales
 * wrote after the last step, known before the values, and the same on
 * every rank; each rank quantizes its shard with it, and the bytes are
 * those quantizing the whole weight gives (the quantize is elementwise).
 * A current or block recipe takes the scale from the whole weight: there
 * tecore_seq_fp8_weight refuses and the values are gathered as before.
 *
 * The amax the next scale comes from must be the whole weight's: each
 * rank max-accumulates its shard's |x| into the weight's amax, then the
 * ranks' amaxes are reduced with MAX.  Every rank held the same amax
 * before (the same reductions since the last update), so the result is
 * max(before, max |whole weight|), what ZeRO-0's forward quantize leaves.
 *
 * Where the codes lie: in the bucket's own space of its unit's ring slot
 * (a byte an element of the two its BF16 values take), all-gathered in
 * place, and the sequence's FP8 weight points there
 * (tecore_seq_set_fp8_weight_data): no rank keeps a layer's codes across
 * a step (a byte a weight: 7 GB at Llama-3 8B).  So they are gathered
 * before the backward too (its dgrad reads their byte transpose), the
 * amax only in the forwards (the backward's codes are the forward's).
 * The space still holds the values where the group gathers them outside
 * the passes (tecomm_dp_gather_value, destroy; the next pass gathers the
 * codes again), and in the passes after a recipe change that leaves the
 * weight no FP8 copy to hand out (current scaling: the sequence's own
 * codes storage again): each forward asks again (refresh).
 * TECOMM_DP_FP8_KEEP=1 (d->fp8_keep) keeps the sequence's own copies
 * instead, gathered in the forwards only and copied out of the slot: a
 * byte a weight held for one all-gather a backward less. */
#include "dp_priv.h"

TECORE_TUNABLE_INT(tc_tun_dp_fp8_keep, "TECOMM_DP_FP8_KEEP", 0, 0, 1,
                   "ZeRO-3 under delayed FP8 scaling: 0 (default) gathers each Linear's E4M3 "
                   "codes into the ring before each forward and backward, none kept across a "
                   "step; 1 keeps them in the sequence's own copy (a byte a weight on every "
                   "rank), gathered once a forward, for the backward to read.  Every rank must "
                   "use the same value (it is compared)")

#define F8_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t f8_c_ = (call);                                            \
    if (f8_c_ != TECORE_SUCCESS) return tc_core(f8_c_, (what));                \
  } while (0)

/* Is tensor i the weight of an FP8 Linear whose codes the caller may
 * write (t->w8 filled)? */
static int fp8_weight(struct tecomm_dp *d, struct dp_tensor *t) {
  struct tecore_op_info info;
  if (t->t.op == TECOMM_DP_NO_OP || tecore_seq_op(d->seq, t->t.op, &info) != TECORE_SUCCESS)
    return 0;
  if (info.desc.kind != TECORE_OP_LINEAR || info.param[0].data != t->t.value) return 0;
  if (tecore_seq_fp8_weight(d->seq, t->t.op, &t->w8) != TECORE_SUCCESS) return 0;
  return tecore_tensor_numel(&t->w8) == t->t.count;
}

void tc_dp_zero3_fp8_mark(struct tecomm_dp *d) {
  if (d->zero < 3 || !d->seq) return;
  d->fp8_keep = tecore_tunable_int(&tc_tun_dp_fp8_keep);
  for (size_t i = 0; i < d->nt; i++) d->t[i].fp8 = fp8_weight(d, &d->t[i]);
  tecore_clear_error();   /* the refusals only said "values" */
}

/* Bucket b's codes still gathered (b->codes): every weight still an FP8
 * one the sequence hands out, told given again (a new recipe clears it);
 * else the forwards quantize the values, which are gathered then. */
/* Tensor i's codes: given, in its bucket's slot space (t->w8 says so;
 * TECOMM_DP_FP8_KEEP: in the sequence's own copy). */
static int codes_in_ring(struct tecomm_dp *d, size_t i) {
  struct dp_tensor *t = &d->t[i];
  tecore_devptr_t at = tc_dp_slot_at(d, &d->b[t->bucket]) + t->off;
  if (tecore_seq_set_fp8_weight_given(d->seq, t->t.op, 1) != TECORE_SUCCESS) return 0;
  if (d->fp8_keep) return 1;
  if (tecore_seq_set_fp8_weight_data(d->seq, t->t.op, at) != TECORE_SUCCESS) return 0;
  t->w8.data = at;
  return 1;
}

static void refresh(struct tecomm_dp *d, struct dp_bucket *b) {
  int ok = 1;
  for (size_t i = b->t0; i < b->t1 && ok; i++) ok = fp8_weight(d, &d->t[i]) && codes_in_ring(d, i);
  for (size_t i = b->t0; i < b->t1 && !ok; i++)
    (void)tecore_seq_set_fp8_weight_given(d->seq, d->t[i].t.op, 0);
  if (b->codes != ok)
    TC_INFO("tecomm_dp: ZeRO-3: the weights of operations [%zu, %zu] gathered as %s from now "
            "on (the recipe changed)", b->op_lo, b->op_hi, ok ? "FP8 codes" : "values");
  b->codes = ok;
}

void tc_dp_zero3_fp8_refresh(struct tecomm_dp *d) {
  for (size_t k = 0; d->nfp8 && k < d->nb; k++)
    if (d->b[k].fp8) refresh(d, &d->b[k]);
  tecore_clear_error();
}

tecomm_result_t tc_dp_zero3_fp8_setup(struct tecomm_dp *d) {
  for (size_t k = 0; k < d->nb; k++) {
    struct dp_bucket *b = &d->b[k];
    if (!b->fp8) continue;
    b->codes = 1;
    for (size_t i = b->t0; i < b->t1; i++)
      TC_ARG(codes_in_ring(d, i), "tecomm_dp_create: ZeRO-3's FP8 gather: %s",
             tecore_last_error());
  }
  if (d->nfp8) F8_CORE(tecore_mem_alloc(256, &d->f8_dummy), "tecomm_dp_create");
  if (d->nfp8) F8_CORE(tecore_memset_d8_async(d->f8_dummy, 0, 256, d->side), "tecomm_dp_create");
  return TECOMM_SUCCESS;
}

/* Tensor i's part of this rank's shard quantized into the codes at dst
 * (its scale_inv written, with amax its amax max-accumulated).  A rank
 * holding none of the tensor quantizes one zero, so that it writes
 * scale_inv too (the same 1 / scale every rank writes). */
static tecomm_result_t quantize_part(struct tecomm_dp *d, size_t i, tecore_devptr_t dst,
                                     int amax) {
  const struct dp_tensor *t = &d->t[i];
  size_t first, n;
  tc_dp_part(d, i, d->rank, &first, &n);
  tecore_devptr_t src = n ? tc_dp_value_at(d, i, first) : d->f8_dummy;
  struct tecore_tensor in, out;
  size_t sh[1] = {n ? n : 1};
  F8_CORE(tecore_tensor_init(&in, t->t.value_dtype, 1, sh, src), "tecomm_dp: ZeRO-3's FP8 gather");
  F8_CORE(tecore_tensor_init(&out, t->w8.dtype, 1, sh, n ? dst : d->f8_dummy + 128),
          "tecomm_dp: ZeRO-3's FP8 gather");
  out.scaling = t->w8.scaling;
  out.scale = t->w8.scale;
  out.scale_inv = t->w8.scale_inv;
  out.amax = n && amax ? t->w8.amax : 0;
  F8_CORE(tecore_quantize(&in, &out, 0, d->side), "tecomm_dp: ZeRO-3's FP8 gather");
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_zero3_fp8_gather(struct tecomm_dp *d, const struct dp_bucket *b) {
  const int fwd = d->pass_dir == TECORE_SEQ_FORWARD;
  if (d->fp8_keep && !fwd) return TECOMM_SUCCESS;   /* the backward reads the kept copies */
  tecore_devptr_t all = tc_dp_slot_at(d, b), mine = all + (size_t)d->rank * b->shard;
  F8_CORE(tecore_memset_d8_async(mine, 0, b->shard, d->side), "tecomm_dp: ZeRO-3's FP8 gather");
  for (size_t i = b->t0; i < b->t1; i++) {
    size_t first, n;
    tc_dp_part(d, i, d->rank, &first, &n);
    TC_CHECK(quantize_part(d, i, mine + d->t[i].off + first - (size_t)d->rank * b->shard, fwd));
  }
  TC_CHECK(tecomm_allgather(d->comm, mine, all, b->shard, TECORE_DTYPE_E4M3, d->side));
  d->gathered_bytes += b->elems;
  for (size_t i = b->t0; i < b->t1 && fwd; i++)
    TC_CHECK(tecomm_allreduce(d->comm, d->t[i].w8.amax, d->t[i].w8.amax, 1, TECORE_DTYPE_F32,
                              TECOMM_MAX, d->side));
  for (size_t i = b->t0; i < b->t1 && d->fp8_keep; i++)
    F8_CORE(tecore_memcpy_async(d->t[i].w8.data, all + d->t[i].off, d->t[i].t.count, d->side),
            "tecomm_dp: ZeRO-3's FP8 gather");
  return TECOMM_SUCCESS;
}

/* The forwards quantize the weights again (the sequence outlives the
 * group), where the recipe still has them given. */
void tc_dp_zero3_fp8_free(struct tecomm_dp *d) {
  for (size_t i = 0; d->seq && d->nfp8 && i < d->nt; i++)
    if (d->t[i].fp8) (void)tecore_seq_set_fp8_weight_given(d->seq, d->t[i].t.op, 0);
  tecore_clear_error();
  if (d->f8_dummy) (void)tecore_mem_free(d->f8_dummy);
}
