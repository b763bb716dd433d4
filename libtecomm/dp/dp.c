/* SPDX-License-Identifier: Apache-2.0 */
/* dp.c -- the data-parallel group's public calls (te/comm_dp.h) and the
 * sequence's pass hooks that launch each bucket once the backward wrote
 * its last gradient: the after hook of a backward group marks the
 * tensors its operations write; a bucket whose tensors are all marked is
 * reduced on the communication stream right away (dp_run.c), so the
 * reduction runs while the backward goes on.  Only the armed backward
 * (the step's last microbatch) launches: the earlier ones accumulate;
 * but the buckets of a gradient ring (TECOMM_DP_GRAD_SHARDS,
 * dp_zero3_grad.c) launch in every backward. */
#include "dp_priv.h"
#include "comm_priv.h"
#include "te_handles.h"
#include "te_results.h"
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TECORE_TUNABLE_INT(tc_tun_dp_bucket_mb, "TECOMM_DP_BUCKET_MB", 25, 1, 65536,
                   "MiB of gradients a data-parallel bucket holds (tecomm_dp_create, "
                   "desc.bucket_bytes 0): smaller buckets start reducing earlier in the "
                   "backward, larger ones make fewer collective calls.  Every rank must use the "
                   "same value")

/* The sequence destroyed before the group: nothing to unhook or give
 * back (ZeRO-3 then gathers nothing and allocates nothing at teardown). */
static int seq_live(tecore_seq_t *seq) {
  size_t n = 0;
  int live = seq && tecore_seq_params(seq, NULL, 0, &n) == TECORE_SUCCESS;
  tecore_clear_error();
  return live;
}

static void dp_free(struct tecomm_dp *d) {
  if (!d) return;
  te_handle_del(d);
  if (d->seq && !seq_live(d->seq)) d->seq = NULL, d->hooked = 0;
  if (d->hooked) (void)tecore_seq_set_hooks(d->seq, NULL);
  if (d->side) (void)tecore_stream_synchronize(d->side);
  tc_dp_zero3_free(d);
  tc_dp_table_free(d);
  tc_dp_sym_free(d, d->buf, d->buf_plain);
  if (d->scale_dev) (void)tecore_mem_free(d->scale_dev);
  if (d->normvec) (void)tecore_mem_free(d->normvec);
  if (d->l2ws) (void)tecore_mem_free(d->l2ws);
  if (d->fork) (void)tecore_event_destroy(d->fork);
  if (d->join) (void)tecore_event_destroy(d->join);
  if (d->side) (void)tecore_stream_destroy(d->side);
  free(d->views);
  free(d->t);
  free(d->b);
  free(d);
}

static int dtype_ok(tecore_dtype_t dt) { return dt == TECORE_DTYPE_F32 || dt == TECORE_DTYPE_BF16; }

/* Tensor i of the description, checked against the sequence. */
static tecomm_result_t check_tensor(const struct tecomm_dp_desc *desc, size_t i) {
  const struct tecomm_dp_tensor *t = &desc->tensors[i];
  const char *fn = "tecomm_dp_create";
  TC_ARG(t->grad, "%s: desc->tensors[%zu].grad is 0", fn, i);
  TC_ARG(t->count > 0, "%s: desc->tensors[%zu].count is 0", fn, i);
  TC_ARG(dtype_ok(t->grad_dtype), "%s: desc->tensors[%zu].grad_dtype %s: F32 or BF16", fn, i,
         tecore_dtype_name(t->grad_dtype));
  TC_ARG(!t->value || dtype_ok(t->value_dtype),
         "%s: desc->tensors[%zu].value_dtype %s: F32 or BF16", fn, i,
         tecore_dtype_name(t->value_dtype));
  TC_ARG(t->value || desc->zero == 0,
         "%s: desc->tensors[%zu].value is 0 under ZeRO-%d (the gather needs it)", fn, i,
         desc->zero);
  TC_ARG(!t->rows || (t->op == TECOMM_DP_NO_OP && t->count % t->rows == 0 &&
                      t->rows <= INT32_MAX),
         "%s: desc->tensors[%zu].rows %zu: an embedding table's rows (op TECOMM_DP_NO_OP, "
         "count %zu a multiple of them, at most 2^31 - 1)", fn, i, t->rows, t->count);
  TC_ARG(!t->rows || !(desc->flags & TECOMM_DP_TABLE_SHARDS) || t->value,
         "%s: desc->tensors[%zu] (a table) has no value to shard", fn, i);
  if (t->op == TECOMM_DP_NO_OP) return TECOMM_SUCCESS;
  TC_ARG(desc->seq, "%s: desc->tensors[%zu].op %zu without desc->seq", fn, i, t->op);
  struct tecore_op_info info;
  if (tecore_seq_op(desc->seq, t->op, &info) != TECORE_SUCCESS) {
    tecore_clear_error();
    return TC_ERR(TECOMM_ERR_INVALID, "%s: desc->tensors[%zu].op %zu: no such operation in "
                  "desc->seq", fn, i, t->op);
  }
  return TECOMM_SUCCESS;
}

static tecomm_result_t check_desc(const struct tecomm_dp_desc *desc, tecomm_dp_t *dp) {
  const char *fn = "tecomm_dp_create";
  TC_ARG(dp, "%s: dp is NULL", fn);
  *dp = NULL;
  TC_ARG(desc, "%s: desc is NULL", fn);
  TC_COMM(desc->comm, fn);
  TC_ARG(desc->tensors && desc->ntensors, "%s: desc->tensors is %s", fn,
         desc->tensors ? "empty (ntensors 0)" : "NULL");
  TC_ARG(desc->zero >= 0 && desc->zero <= 3, "%s: desc->zero %d: 0, 1, 2 or 3", fn, desc->zero);
  TC_ARG(isfinite(desc->scale) && desc->scale >= 0, "%s: desc->scale %g: finite, >= 0", fn,
         (double)desc->scale);
  const unsigned known = TECOMM_DP_GRAD_SHARDS | TECOMM_DP_TABLE_SHARDS;
  TC_ARG(!(desc->flags & ~known), "%s: desc->flags 0x%x: unknown bits 0x%x", fn, desc->flags,
         desc->flags & ~known);
  TC_ARG(!(desc->flags & TECOMM_DP_GRAD_SHARDS) || (desc->zero >= 2 && desc->seq),
         "%s: TECOMM_DP_GRAD_SHARDS needs ZeRO-2 or 3 and desc->seq (desc->zero %d, seq %s)", fn,
         desc->zero, desc->seq ? "given" : "NULL");
  TC_ARG(!(desc->flags & TECOMM_DP_TABLE_SHARDS) || desc->zero >= 2,
         "%s: TECOMM_DP_TABLE_SHARDS needs ZeRO-2 or 3 (desc->zero %d)", fn, desc->zero);
  for (size_t i = 0; i < desc->ntensors; i++) TC_CHECK(check_tensor(desc, i));
  return TECOMM_SUCCESS;
}

/* The tensors copied in, their names kept. */
static tecomm_result_t copy_in(struct tecomm_dp *d, const struct tecomm_dp_desc *desc) {
  d->t = calloc(desc->ntensors, sizeof *d->t);
  if (!d->t) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  d->nt = desc->ntensors;
  for (size_t i = 0; i < d->nt; i++) {
    d->t[i].t = desc->tensors[i];
    d->t[i].t.name = NULL;
    snprintf(d->t[i].name, sizeof d->t[i].name, "%s",
             desc->tensors[i].name ? desc->tensors[i].name : "unnamed");
  }
  return TECOMM_SUCCESS;
}

/* The largest bucket's bytes, gradient (a packed bucket's) or value
 * (ZeRO-1/2's gather); 0 when no bucket needs the buffer. */
static size_t buffer_bytes(const struct tecomm_dp *d) {
  size_t most = 0;
  for (size_t k = 0; k < d->nb; k++) {
    if (d->b[k].table) continue;   /* never reduced nor gathered (dp_table.c) */
    size_t g = d->b[k].inplace || tc_dp_zg_owns(d, &d->b[k]) ? 0 : tecore_dtype_size(d->b[k].gdt);
    size_t v = d->zero > 0 && !d->b[k].sharded ? tecore_dtype_size(d->b[k].vdt) : 0;
    size_t n = d->b[k].elems * (g > v ? g : v);
    if (n > most) most = n;
  }
  return most;
}

static tecore_result_t dp_hook_after(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                     size_t first, size_t count, tecore_stream_t stream);

/* ZeRO-3's only: the group's buckets gathered (dp_zero3.c). */
static tecore_result_t dp_hook_before(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                      size_t first, size_t count, tecore_stream_t stream) {
  (void)seq;
  return tc_dp_zero3_before(ctx, dir, first, count, stream);
}


/* The device side: the buffer (collective), the scale, the stream and
 * events, the norm's views; then the hooks. */
static tecomm_result_t setup(struct tecomm_dp *d) {
  d->buf_bytes = buffer_bytes(d);
  TC_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &d->side),
          "tecomm_dp_create: the communication stream");
  /* every rank agreed on the layout: all of them skip it alike */
  /* zeroed: the padding between tensors is summed too */
  if (d->buf_bytes)
    TC_CHECK(tc_dp_sym_alloc(d, d->buf_bytes, &d->buf, &d->buf_plain,
                             "tecomm_dp_create: the bucket buffer"));
  TC_CORE(tecore_mem_alloc(4, &d->scale_dev), "tecomm_dp_create: the scale");
  TC_CORE(tecore_memcpy(d->scale_dev, (tecore_devptr_t)(uintptr_t)&d->scale, 4),
          "tecomm_dp_create: the scale");
  TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &d->fork), "tecomm_dp_create");
  TC_CORE(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &d->join), "tecomm_dp_create");
  TC_CORE(tecore_stream_synchronize(d->side), "tecomm_dp_create");
  TC_CHECK(tc_dp_zero3_setup(d));
  TC_CHECK(tc_dp_table_setup(d));
  TC_CHECK(tc_dp_norm_setup(d));   /* its views: in the gradient shards (gshards, tables) */
  if (!d->seq) return TECOMM_SUCCESS;
  struct tecore_seq_hooks h = {.before = d->nu ? dp_hook_before : NULL,
                               .after = dp_hook_after, .ctx = d};
  TC_CORE(tecore_seq_set_hooks(d->seq, &h), "tecomm_dp_create: the sequence's hooks");
  d->hooked = 1;
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_dp_create(const struct tecomm_dp_desc *desc, tecomm_dp_t *dp) {
  TC_CHECK(check_desc(desc, dp));
  struct tecomm_dp *d = calloc(1, sizeof *d);
  if (!d) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory");
  d->comm = desc->comm;
  d->zero = desc->zero;
  d->gshards = (desc->flags & TECOMM_DP_GRAD_SHARDS) != 0;
  d->tshards = (desc->flags & TECOMM_DP_TABLE_SHARDS) != 0;
  d->bucket_bytes = desc->bucket_bytes ? desc->bucket_bytes
                    : (size_t)tecore_tunable_int(&tc_tun_dp_bucket_mb) << 20;
  tecomm_result_t r = tecomm_comm_rank(d->comm, &d->rank, &d->nranks, NULL);
  d->scale = desc->scale > 0 ? desc->scale : 1.0f / (float)d->nranks;
  if (r == TECOMM_SUCCESS) r = copy_in(d, desc);
  d->seq = desc->seq;   /* dp_free takes ZeRO-3's ring out of it */
  if (r == TECOMM_SUCCESS) tc_dp_zero3_fp8_mark(d);
  if (r == TECOMM_SUCCESS) r = tc_dp_layout(d);
  if (r == TECOMM_SUCCESS) tc_dp_table_layout(d);
  if (r == TECOMM_SUCCESS) r = tc_dp_inplace(d);
  if (r == TECOMM_SUCCESS) r = tc_dp_zero3_check(d);
  if (r == TECOMM_SUCCESS) r = tc_dp_agree(d, desc->recipe);
  if (r == TECOMM_SUCCESS) r = setup(d);
  if (r != TECOMM_SUCCESS) {
    char text[512];
    snprintf(text, sizeof text, "%s", tecomm_last_error());
    dp_free(d);
    tecore_set_error("%s", text);
    return r;
  }
  size_t nin = 0;
  for (size_t k = 0; k < d->nb; k++) nin += d->b[k].inplace != 0;
  TC_INFO("tecomm_dp_create: rank %d of %d, ZeRO-%d, %zu tensors in %zu buckets of at most %zu "
          "bytes (%zu reduced in place), scale %g", d->rank, d->nranks, d->zero, d->nt, d->nb,
          d->bucket_bytes, nin, (double)d->scale);
  if (te_handle_add(d) != 0) {
    dp_free(d);
    return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_dp_create: out of host memory (handle registry)");
  }
  *dp = d;
  return TECOMM_SUCCESS;
}

/* Appends to buf at *at (snprintf's rules: *at may pass len). */
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t len, size_t *at, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf && *at < len ? buf + *at : NULL, *at < len ? len - *at : 0, fmt, ap);
  va_end(ap);
  if (n > 0) *at += (size_t)n;
}

TE_EXPORT tecomm_result_t tecomm_dp_describe(tecomm_dp_t dp, char *buf, size_t len,
                                             size_t *needed) {
  DP_LIVE(dp, "tecomm_dp_describe");
  TC_ARG(buf || len == 0, "tecomm_dp_describe: buf is NULL with len %zu", len);
  size_t at = 0, nin = 0;
  for (size_t k = 0; k < dp->nb; k++) nin += dp->b[k].inplace != 0;
  put(buf, len, &at, "ZeRO-%d, %d ranks, %zu tensors in %zu buckets (%zu in place, %zu packed; "
      "buffer %zu bytes", dp->zero, dp->nranks, dp->nt, dp->nb, nin, dp->nb - nin,
      dp->buf_bytes);
  if (dp->nu && dp->zero == 3)   /* ZeRO-3: the values held across a step */
    put(buf, len, &at, "; values: %zu sharded buckets in %zu units, shards %zu bytes, ring %zu "
        "+ %zu bytes, %zu buckets of FP8 codes, %zu bytes gathered", dp->nfwd, dp->nu,
        dp->vshard_bytes, dp->slot_size[0], dp->slot_size[1], dp->nfp8, dp->gathered_bytes);
  if (dp->gring)   /* TECOMM_DP_GRAD_SHARDS: the gradients held across a step */
    put(buf, len, &at, "; gradients: shards %zu bytes, ring %zu + %zu bytes", dp->gshard_bytes,
        dp->gslot_size[0], dp->gslot_size[1]);
  if (dp->tval_bytes)   /* TECOMM_DP_TABLE_SHARDS */
    put(buf, len, &at, "; tables: shards %zu + %zu bytes, scratch %zu bytes", dp->tval_bytes,
        dp->tgrad_bytes, dp->tscr_bytes);
  put(buf, len, &at, "):");
  for (size_t k = 0; k < dp->nb; k++) {
    const struct dp_bucket *b = &dp->b[k];
    const int ring = dp->gring && tc_dp_zg_owns(dp, b);
    put(buf, len, &at, " %zu %s [%zu,%zu) %zu %s", k,
        b->table ? "table" : b->inplace ? "in-place" : ring ? "ring" : "packed", b->t0, b->t1,
        b->inplace ? b->span_elems : b->elems, tecore_dtype_name(b->gdt));
    if (!b->inplace && !ring && !b->table) put(buf, len, &at, " (%s)", tc_dp_packed_why(b->why));
    put(buf, len, &at, ";");
  }
  if (buf && len) buf[at < len ? at : len - 1] = '\0';
  if (needed) *needed = at;
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_dp_destroy(tecomm_dp_t dp) {
  if (!dp) return TECOMM_SUCCESS;
  DP_LIVE(dp, "tecomm_dp_destroy");
  dp_free(dp);
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_dp_arm(tecomm_dp_t dp) {
  DP_LIVE(dp, "tecomm_dp_arm");
  dp->armed = 1;
  return TECOMM_SUCCESS;
}

/* Bucket k reduced: out of the gradient ring (dp_zero3_grad.c), or
 * packed or in place (dp_run.c). */
static tecomm_result_t launch(struct tecomm_dp *d, size_t k, tecore_stream_t stream) {
  if (d->b[k].table) return d->b[k].launched = 1, TECOMM_SUCCESS;   /* never reduced */
  if (d->gring && tc_dp_zg_owns(d, &d->b[k])) return tc_dp_zg_launch(d, k, stream);
  return tc_dp_launch(d, k, stream);
}

/* Marks tensor i written; launches its bucket when it was the last. */
static tecomm_result_t written(struct tecomm_dp *d, size_t i, tecore_stream_t stream) {
  struct dp_bucket *b = &d->b[d->t[i].bucket];
  if (b->launched || b->pending == 0) return TECOMM_SUCCESS;
  if (--b->pending) return TECOMM_SUCCESS;
  return launch(d, d->t[i].bucket, stream);
}

static tecore_result_t dp_hook_after(void *ctx, tecore_seq_t *seq, tecore_seq_dir_t dir,
                                     size_t first, size_t count, tecore_stream_t stream) {
  struct tecomm_dp *d = ctx;
  (void)seq;
  tecore_result_t z = tc_dp_zero3_after(d, dir, first, count, stream);
  if (z != TECORE_SUCCESS) return z;
  if (dir != TECORE_SEQ_BACKWARD || d->hook_err) return TECORE_SUCCESS;
  tecomm_result_t r = TECOMM_SUCCESS;
  /* unarmed, only the gradient ring's buckets (every backward) */
  for (size_t i = 0; r == TECOMM_SUCCESS && i < d->nt; i++)
    if (d->t[i].t.op != TECOMM_DP_NO_OP && d->t[i].t.op >= first && d->t[i].t.op < first + count &&
        (d->armed || tc_dp_zg_owns(d, &d->b[d->t[i].bucket])))
      r = written(d, i, stream);
  if (r == TECOMM_SUCCESS) return TECORE_SUCCESS;
  d->hook_err = r;
  return (tecore_result_t)te_result_to_core((int)r);
}

TE_EXPORT tecomm_result_t tecomm_dp_finish(tecomm_dp_t dp, tecore_stream_t stream) {
  DP_LIVE(dp, "tecomm_dp_finish");
  tecomm_result_t r = dp->hook_err;
  if (r != TECOMM_SUCCESS)
    r = TC_ERR(r, "tecomm_dp_finish: a bucket's reduction failed in the backward: %s",
               tecomm_last_error());
  for (size_t k = 0; r == TECOMM_SUCCESS && k < dp->nb; k++)
    if (!dp->b[k].launched) r = launch(dp, k, stream);
  tecomm_result_t j = tc_dp_join(dp, stream);
  tc_dp_zg_finish(dp);
  tecomm_result_t tb = tc_dp_table_finish(dp, stream);
  if (j == TECOMM_SUCCESS) j = tb;
  for (size_t k = 0; k < dp->nb; k++)
    dp->b[k].launched = 0, dp->b[k].pending = dp->b[k].t1 - dp->b[k].t0;
  dp->armed = 0;
  dp->hook_err = TECOMM_SUCCESS;
  return r != TECOMM_SUCCESS ? r : j;
}

TE_EXPORT tecomm_result_t tecomm_dp_shard(tecomm_dp_t dp, size_t index, size_t *first, size_t *count) {
  DP_LIVE(dp, "tecomm_dp_shard");
  TC_ARG(first && count, "tecomm_dp_shard: %s is NULL", first ? "count" : "first");
  TC_ARG(index < dp->nt, "tecomm_dp_shard: index %zu: the group has %zu tensors", index, dp->nt);
  tc_dp_part(dp, index, dp->rank, first, count);
  return TECOMM_SUCCESS;
}

/* Where this rank's part of tensor index lies, by at (tc_dp_grad_at or
 * tc_dp_value_at); 0 for an empty part. */
static tecomm_result_t part_at(tecomm_dp_t dp, size_t index, tecore_devptr_t *ptr,
                               const char *fn,
                               tecore_devptr_t (*at)(const struct tecomm_dp *, size_t, size_t)) {
  DP_LIVE(dp, fn);
  TC_ARG(ptr, "%s: ptr is NULL", fn);
  TC_ARG(index < dp->nt, "%s: index %zu: the group has %zu tensors", fn, index, dp->nt);
  size_t first, n;
  tc_dp_part(dp, index, dp->rank, &first, &n);
  *ptr = n ? at(dp, index, first) : 0;
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_dp_grad_shard(tecomm_dp_t dp, size_t index,
                                              tecore_devptr_t *ptr) {
  return part_at(dp, index, ptr, "tecomm_dp_grad_shard", tc_dp_grad_at);
}

TE_EXPORT tecomm_result_t tecomm_dp_value_shard(tecomm_dp_t dp, size_t index,
                                               tecore_devptr_t *ptr) {
  return part_at(dp, index, ptr, "tecomm_dp_value_shard", tc_dp_value_at);
}

TE_EXPORT tecomm_result_t tecomm_dp_gather_value(tecomm_dp_t dp, size_t index,
                                                tecore_devptr_t dst, tecore_stream_t stream) {
  DP_LIVE(dp, "tecomm_dp_gather_value");
  TC_ARG(index < dp->nt, "tecomm_dp_gather_value: index %zu: the group has %zu tensors", index,
         dp->nt);
  TC_ARG(dst, "tecomm_dp_gather_value: dst is 0");
  TC_ARG(dp->t[index].t.value, "tecomm_dp_gather_value: tensor %zu (%s) has no value", index,
         dp->t[index].name);
  if (dp->b[dp->t[index].bucket].table) return tc_dp_table_whole(dp, index, dst, stream);
  return tc_dp_value_whole(dp, index, dst, stream);
}

TE_EXPORT tecomm_result_t tecomm_dp_gather(tecomm_dp_t dp, tecore_stream_t stream) {
  DP_LIVE(dp, "tecomm_dp_gather");
  TC_ARG(dp->zero > 0, "tecomm_dp_gather: ZeRO-0 keeps every value on every rank (nothing to "
         "gather)");
  return tc_dp_gather_all(dp, stream);
}

TE_EXPORT tecomm_result_t tecomm_dp_norm_parts(tecomm_dp_t dp, struct tecore_tensor *vec,
                                     tecore_stream_t stream) {
  DP_LIVE(dp, "tecomm_dp_norm_parts");
  TC_ARG(vec, "tecomm_dp_norm_parts: vec is NULL");
  TC_CHECK(tc_dp_norm(dp, stream));
  size_t sh[1] = {(size_t)dp->nranks};
  TC_CORE(tecore_tensor_init(vec, TECORE_DTYPE_F32, 1, sh, dp->normvec), "tecomm_dp_norm_parts");
  return TECOMM_SUCCESS;
}
