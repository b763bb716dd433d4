/* SPDX-License-Identifier: Apache-2.0 */
/* dp_table.c -- TECOMM_DP_TABLE_SHARDS (te/comm_dp.h): embedding tables
 * held as shards.  A table is a bucket of its own (dp_layout.c), so this
 * rank's part of it is one window of the row-major table, its elements
 * [rank * shard, (rank + 1) * shard) clipped to its count, and
 * libtecore's embedding runs against that window
 * (tecore_embedding_args.shard_first, shard_count).
 *
 * Why not gather the table as ZeRO-3 gathers a layer: the rows a step
 * reads are a few of the table's (Llama-3 8B: 8,192 tokens of a 128,256
 * row vocabulary), and the gradient is zero elsewhere.  Moving the
 * tokens' rows costs nranks * tokens * cols elements a pass; moving the
 * table, vocab * cols each way (2 GiB at 8B).
 *
 * Forward: the ids all-gathered into the scratch, every rank embeds all
 * nranks * tokens of them from its window (zeros outside it), and the
 * rows are reduce-scattered to the ranks whose tokens they are: each
 * element has one nonzero term, so the sum is exact.  Backward: the ids
 * and dout all-gathered, added into the window's gradient in token order
 * (rank 0's tokens first).  Both run on the communication stream, so
 * the communicator's collectives keep the order the ranks call them in
 * (the buckets' reductions are queued there too), and the caller's stream
 * then waits for it: the forward's rows are read next, and the backward's
 * ids and dout may be overwritten by the next microbatch. */
#include "dp_priv.h"
#include <te/embedding.h>

#define TB_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t tb_c_ = (call);                                            \
    if (tb_c_ != TECORE_SUCCESS) return tc_core(tb_c_, (what));                \
  } while (0)

static size_t round256(size_t x) { return (x + 255) / 256 * 256; }

void tc_dp_table_layout(struct tecomm_dp *d) {
  size_t v = 0, g = 0;
  for (size_t k = 0; d->tshards && k < d->nb; k++) {
    struct dp_bucket *b = &d->b[k];
    if (!d->t[b->t0].t.rows) continue;
    b->table = 1;
    b->tv_off = v, b->tg_off = g;
    v += round256(b->shard * tecore_dtype_size(b->vdt));
    g += round256(b->shard * tecore_dtype_size(b->gdt));
  }
  d->tval_bytes = v, d->tgrad_bytes = g;
}

tecomm_result_t tc_dp_table_setup(struct tecomm_dp *d) {
  const char *fn = "tecomm_dp_create";
  if (!d->tval_bytes) return TECOMM_SUCCESS;
  TB_CORE(tecore_mem_alloc(d->tval_bytes, &d->tval), "tecomm_dp_create: the tables' shards");
  TB_CORE(tecore_mem_alloc(d->tgrad_bytes, &d->tgrad), "tecomm_dp_create: the tables' gradients");
  TB_CORE(tecore_memset_d8_async(d->tval, 0, d->tval_bytes, d->side), fn);
  TB_CORE(tecore_memset_d8_async(d->tgrad, 0, d->tgrad_bytes, d->side), fn);
  for (size_t i = 0; i < d->nt; i++) {
    size_t first, n;
    tc_dp_part(d, i, d->rank, &first, &n);
    if (!n || !d->b[d->t[i].bucket].table) continue;
    size_t es = tecore_dtype_size(d->t[i].t.value_dtype);
    TB_CORE(tecore_memcpy_async(tc_dp_value_at(d, i, first), d->t[i].t.value + first * es,
                                n * es, d->side), "tecomm_dp_create: a table's shard");
  }
  TB_CORE(tecore_stream_synchronize(d->side), fn);
  return TECOMM_SUCCESS;
}

/* elems elements of dtype at p times d->scale (when not 1), on s. */
static tecomm_result_t scale_part(struct tecomm_dp *d, tecore_dtype_t dt, tecore_devptr_t p,
                                  size_t elems, tecore_stream_t s) {
  if (d->scale == 1.0f || !elems) return TECOMM_SUCCESS;
  struct tecore_tensor v;
  size_t sh[1] = {elems};
  TB_CORE(tecore_tensor_init(&v, dt, 1, sh, p), "tecomm_dp_finish: a table's scale");
  TB_CORE(tecore_unscale_multi(&v, &v, 1, d->scale_dev, 0, s), "tecomm_dp_finish: a table's scale");
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_dp_table_finish(struct tecomm_dp *d, tecore_stream_t stream) {
  tecomm_result_t r = TECOMM_SUCCESS;
  for (size_t i = 0; i < d->nt; i++) {
    struct dp_bucket *b = &d->b[d->t[i].bucket];
    size_t first, n;
    tc_dp_part(d, i, d->rank, &first, &n);
    if (!b->table || !n || r != TECOMM_SUCCESS) continue;
    tecore_devptr_t g = tc_dp_grad_at(d, i, first);
    size_t bytes = n * tecore_dtype_size(b->gdt);
    if (!b->tacc) {   /* no embedding backward this step: a zero gradient */
      tecore_result_t c = tecore_memset_d8_async(g, 0, bytes, stream);
      if (c != TECORE_SUCCESS) r = tc_core(c, "tecomm_dp_finish: a table's gradient");
    } else {
      r = scale_part(d, b->gdt, g, n, stream);
    }
  }
  for (size_t k = 0; k < d->nb; k++) d->b[k].tacc = 0;
  return r;
}

tecomm_result_t tc_dp_table_whole(struct tecomm_dp *d, size_t i, tecore_devptr_t dst,
                                  tecore_stream_t s) {
  const struct dp_bucket *b = &d->b[d->t[i].bucket];
  size_t es = tecore_dtype_size(b->vdt);
  tecore_devptr_t all = 0;
  TB_CORE(tecore_mem_alloc(b->elems * es, &all), "tecomm_dp_gather_value: a table");
  tecomm_result_t r = tc_dp_gather_to(d, b, d->tval + b->tv_off, all, s);
  tecore_result_t c = TECORE_SUCCESS;
  if (r == TECOMM_SUCCESS) c = tecore_memcpy_async(dst, all + d->t[i].off * es,
                                                   d->t[i].t.count * es, s);
  if (c == TECORE_SUCCESS) c = tecore_stream_synchronize(s);   /* before the free */
  (void)tecore_mem_free(all);
  if (r == TECOMM_SUCCESS && c != TECORE_SUCCESS) r = tc_core(c, "tecomm_dp_gather_value");
  return r;
}

void tc_dp_table_free(struct tecomm_dp *d) {
  if (d->tval) (void)tecore_mem_free(d->tval);
  if (d->tgrad) (void)tecore_mem_free(d->tgrad);
  tc_dp_sym_free(d, d->tscr, d->tscr_plain);
  d->tval = d->tgrad = d->tscr = 0;
}

/* ---- the embedding's passes ------------------------------------------------------ */

struct tb_call {
  const char *fn;
  size_t index, tokens, cols, first, n;   /* the window: [first, first + n) of the table */
  const struct dp_tensor *t;
  struct dp_bucket *b;
  tecore_devptr_t ids_all, rows_all;
};

/* The scratch: every rank's ids, then their rows in the call's dtype
 * (es bytes).  Sized by the first call that needs more (symmetric memory:
 * collective; all ranks call with the same tokens and dtype), never while
 * capturing. */
static tecomm_result_t scratch(struct tecomm_dp *d, struct tb_call *c, size_t es,
                               tecore_stream_t stream) {
  size_t N = (size_t)d->nranks, idb = round256(N * c->tokens * 4);
  size_t need = idb + N * c->tokens * c->cols * es;
  if (need > d->tscr_bytes) {
    tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
    TB_CORE(tecore_stream_capture_status(stream, &cs), c->fn);
    TC_ARG(cs == TECORE_CAPTURE_NONE, "%s: %zu tokens need %zu bytes of scratch, the group has "
           "%zu: call it once outside a capture first", c->fn, c->tokens, need, d->tscr_bytes);
    TB_CORE(tecore_ctx_synchronize(), c->fn);   /* no work may use the old one */
    tc_dp_sym_free(d, d->tscr, d->tscr_plain);
    d->tscr = 0, d->tscr_bytes = 0;
    TC_CHECK(tc_dp_sym_alloc(d, need, &d->tscr, &d->tscr_plain, c->fn));
    TB_CORE(tecore_stream_synchronize(d->side), c->fn);   /* zeroed there */
    d->tscr_bytes = need;
  }
  c->ids_all = d->tscr;
  c->rows_all = d->tscr + idb;
  return TECOMM_SUCCESS;
}

static int emb_dtype(tecore_dtype_t dt) { return dt == TECORE_DTYPE_F32 || dt == TECORE_DTYPE_BF16; }

/* The checks both passes share; the window, the scratch and every
 * rank's ids in it. */
static tecomm_result_t prepare(tecomm_dp_t dp, size_t index, tecore_devptr_t ids, size_t tokens,
                               const struct tecore_tensor *x, const char *xname,
                               struct tb_call *c, tecore_stream_t stream) {
  const char *fn = c->fn;
  TC_ARG(dp->tshards, "%s: the group holds no table shards (desc.flags "
         "TECOMM_DP_TABLE_SHARDS)", fn);
  TC_ARG(index < dp->nt, "%s: index %zu: the group has %zu tensors", fn, index, dp->nt);
  c->t = &dp->t[index];
  c->b = &dp->b[c->t->bucket];
  TC_ARG(c->b->table, "%s: tensor %zu (%s) is not an embedding table (rows 0)", fn, index,
         c->t->name);
  TC_ARG(ids, "%s: ids is 0", fn);
  TC_ARG(ids % 4 == 0, "%s: ids (0x%llx) is not aligned to 4 bytes", fn, (unsigned long long)ids);
  TC_ARG(tokens > 0 && tokens <= ((size_t)1 << 30) / (size_t)dp->nranks,
         "%s: tokens %zu: 1 to 2^30 / %d ranks", fn, tokens, dp->nranks);
  c->index = index, c->tokens = tokens, c->cols = c->t->t.count / c->t->t.rows;
  TC_ARG(x && x->data, "%s: %s is %s", fn, xname, x ? "empty (data 0)" : "NULL");
  TC_ARG(emb_dtype(x->dtype), "%s: %s: dtype %s: F32 or BF16", fn, xname,
         tecore_dtype_name(x->dtype));
  TC_ARG(x->scaling == TECORE_SCALING_NONE, "%s: %s: scaling %s: none", fn, xname,
         tecore_scaling_name(x->scaling));
  TC_ARG(tecore_tensor_numel(x) == tokens * c->cols, "%s: %s holds %zu elements, tokens %zu x "
         "%zu columns", fn, xname, tecore_tensor_numel(x), tokens, c->cols);
  tc_dp_part(dp, index, dp->rank, &c->first, &c->n);
  TC_CHECK(scratch(dp, c, tecore_dtype_size(x->dtype), stream));
  TC_CHECK(tc_dp_fork(dp, stream));
  return tecomm_allgather(dp->comm, ids, c->ids_all, tokens, TECORE_DTYPE_F32, dp->side);
}

/* The table's [rows][cols] shape over the window's storage at p. */
static struct tecore_tensor window(const struct tb_call *c, tecore_dtype_t dt, tecore_devptr_t p) {
  struct tecore_tensor w;
  size_t sh[2] = {c->t->t.rows, c->cols};
  (void)tecore_tensor_init(&w, dt, 2, sh, p);
  return w;
}

static struct tecore_tensor all_rows(const struct tecomm_dp *d, const struct tb_call *c,
                                     tecore_dtype_t dt) {
  struct tecore_tensor a;
  size_t sh[2] = {(size_t)d->nranks * c->tokens, c->cols};
  (void)tecore_tensor_init(&a, dt, 2, sh, c->rows_all);
  return a;
}

TE_EXPORT tecomm_result_t tecomm_dp_embedding_fwd(tecomm_dp_t dp, size_t index,
                                                 tecore_devptr_t ids, size_t tokens,
                                                 const struct tecore_tensor *out,
                                                 tecore_stream_t stream) {
  struct tb_call c = {.fn = "tecomm_dp_embedding_fwd"};
  DP_LIVE(dp, c.fn);
  TC_CHECK(prepare(dp, index, ids, tokens, out, "out", &c, stream));
  size_t N = (size_t)dp->nranks;
  struct tecore_tensor rows = all_rows(dp, &c, out->dtype);
  if (c.n) {
    struct tecore_tensor w = window(&c, c.b->vdt, tc_dp_value_at(dp, index, c.first));
    struct tecore_embedding_args a = {.weight = &w, .ids = c.ids_all, .tokens = N * tokens,
                                      .shard_first = c.first, .shard_count = c.n};
    TB_CORE(tecore_embedding_fwd(&a, &rows, dp->side), c.fn);
  } else {   /* a rank without elements of the table adds zeros */
    TB_CORE(tecore_memset_d8_async(c.rows_all, 0, N * tokens * c.cols *
                                   tecore_dtype_size(out->dtype), dp->side), c.fn);
  }
  TC_CHECK(tecomm_reduce_scatter(dp->comm, c.rows_all, out->data, tokens * c.cols, out->dtype,
                                 TECOMM_SUM, dp->side));
  return tc_dp_join(dp, stream);
}

TE_EXPORT tecomm_result_t tecomm_dp_embedding_bwd(tecomm_dp_t dp, size_t index,
                                                 tecore_devptr_t ids, size_t tokens,
                                                 const struct tecore_tensor *dout,
                                                 tecore_stream_t stream) {
  struct tb_call c = {.fn = "tecomm_dp_embedding_bwd"};
  DP_LIVE(dp, c.fn);
  TC_CHECK(prepare(dp, index, ids, tokens, dout, "dout", &c, stream));
  size_t N = (size_t)dp->nranks;
  TC_CHECK(tecomm_allgather(dp->comm, dout->data, c.rows_all, tokens * c.cols, dout->dtype,
                            dp->side));
  if (c.n) {
    tecore_devptr_t g = tc_dp_grad_at(dp, index, c.first);
    if (!c.b->tacc)   /* the step's first: the microbatches add to zero */
      TB_CORE(tecore_memset_d8_async(g, 0, c.n * tecore_dtype_size(c.b->gdt), dp->side), c.fn);
    struct tecore_tensor dy = all_rows(dp, &c, dout->dtype);
    struct tecore_tensor dw = window(&c, c.b->gdt, g);
    struct tecore_embedding_args a = {.ids = c.ids_all, .tokens = N * tokens,
                                      .shard_first = c.first, .shard_count = c.n};
    TB_CORE(tecore_embedding_bwd(&a, &dy, &dw, NULL, dp->side), c.fn);
  }
  c.b->tacc++;
  return tc_dp_join(dp, stream);
}
