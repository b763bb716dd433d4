/* SPDX-License-Identifier: Apache-2.0 */
/* embed.c -- token embedding (te/embedding.h): the kernel table of
 * kernels/embedding.cu and its vdev implementation (embed_vdev.c), the
 * status word's protocol, argument checks and the entry points (the
 * gather, its reverse the store, and the backward). */
#include "embed/embed_internal.h"
#include <inttypes.h>
#include <te/embedding.h>

/* ---- the table ---------------------------------------------------------------------- */

/* K_BWD: the element path; K_BWD_VEC + 3 * dy + dW: the vector path's
 * kernel for those dtypes (TE_EMB_BWD_VEC_LIST), all with the one vdev
 * twin; K_BWD_POS: the position table's, positions implied. */
enum { K_FWD, K_BWD, K_BWD_POS, K_BWD_VEC };
#define EMB_VEC_DEF(name, dy, dw) TE_KDEF(#name, te_emb_vdev_bwd, TE_EMB_BWD_PARAMS),
#define EMB_VEC_ALIGN(name, dy, dw) TE_KALIGN(TE_EMB_BWD_PARAMS),
static const struct tecore_kernel_def emb_kernels[] = {
    [K_FWD] = TE_KDEF("te_emb_fwd", te_emb_vdev_fwd, TE_EMB_FWD_PARAMS),
    [K_BWD] = TE_KDEF("te_emb_bwd", te_emb_vdev_bwd, TE_EMB_BWD_PARAMS),
    [K_BWD_POS] = TE_KDEF("te_emb_bwd_pos", te_emb_vdev_bwd_pos, TE_EMB_BWD_PARAMS),
    TE_EMB_BWD_VEC_LIST(EMB_VEC_DEF)};
static const struct te_kalign emb_align[] = {
    [K_FWD] = TE_KALIGN(TE_EMB_FWD_PARAMS),
    [K_BWD] = TE_KALIGN(TE_EMB_BWD_PARAMS),
    [K_BWD_POS] = TE_KALIGN(TE_EMB_BWD_PARAMS),
    TE_EMB_BWD_VEC_LIST(EMB_VEC_ALIGN)};
_Static_assert(TE_ARRAY_SIZE(emb_kernels) == K_BWD_VEC + 9, "emb_kernels: 9 vector kernels");
TE_KERNEL_TABLE_FATBIN_ALIGNED(emb_first_id, "libtecore/embed", emb_kernels, emb_align, embedding)

#define EMB_MAX_TOKENS (1ull << 30)

TE_PARAM_INT(emb_pos_kernel, "TECORE_EMB_POS_KERNEL", 1, 0, 1,
             "1: the position table's backward, positions implied (t % seq_len, all inside "
             "the table), runs a thread a vector of a position (te_emb_bwd_pos); 0: the "
             "token table's kernel, a block for 64 rows.  The same bits either way");

/* ---- the status word -------------------------------------------------------------------- */

/* An error naming what a status word holds, or success for 0. */
static tecore_result_t emb_status_err(uint64_t w, const char *fn, const char *when) {
  if (!w) return TECORE_SUCCESS;
  return TE_ERR(TECORE_ERR_INVALID, "%s: status: %s met %s %" PRId32 " at token %" PRIu64
                " outside its table", fn, when, (w & TE_EMB_STATUS_POS) ? "position" : "id",
                (int32_t)(uint32_t)w, (w >> 32) & 0x3fffffffu);
}

TE_EXPORT tecore_result_t tecore_embedding_check(uint64_t *status, tecore_stream_t stream) {
  return te_status_word_check(status, stream, emb_status_err, __func__);
}

/* ---- checks ------------------------------------------------------------------------------ */

static tecore_result_t emb_check_ids(tecore_devptr_t p, size_t tokens, int required,
                                     const char *fn, const char *arg) {
  TE_ARG(p || !required || !tokens, "%s: %s is 0", fn, arg);
  TE_ARG(p % 4 == 0, "%s: %s (0x%llx) is not aligned to 4 bytes", fn, arg, (unsigned long long)p);
  if (p && tokens && te_dev_checks_on()) TE_CHECK(te_dev_check_range(p, tokens * 4, fn, arg));
  return TECORE_SUCCESS;
}

/* t, checked, is [rows][hidden]; *rows gets its rows. */
static tecore_result_t emb_check_cols(const struct tecore_tensor *t, size_t hidden, size_t *rows,
                                      const char *fn, const char *arg) {
  size_t c;
  te_tensor_view(t, rows, &c);
  TE_ARG(c == hidden, "%s: %s has %zu columns, hidden is %zu", fn, arg, c, hidden);
  TE_ARG(*rows <= INT32_MAX, "%s: %s: %zu rows exceed %d", fn, arg, *rows, INT32_MAX);
  return TECORE_SUCCESS;
}

/* t is a plain [rows][hidden] table or activation; *rows gets its rows. */
static tecore_result_t emb_check_2d(const struct tecore_tensor *t, size_t hidden, size_t *rows,
                                    const char *fn, const char *arg) {
  TE_ARG(t, "%s: %s is NULL", fn, arg);
  TE_CHECK(te_check_hp_input(t, fn, arg));
  return emb_check_cols(t, hidden, rows, fn, arg);
}

/* The token table t (weight or dweight) and the window of it the kernel
 * reads or writes: *view is t, or, with a shard, a 1-D view of the
 * shard_count elements at t->data, so that the range and overlap checks
 * cover the shard's bytes, not the shape's (which stays the whole
 * table's). */
static tecore_result_t emb_check_table(const struct tecore_embedding_args *a,
                                       const struct tecore_tensor *t, struct tecore_tensor *view,
                                       const char *fn, const char *arg) {
  TE_ARG(t, "%s: %s is NULL", fn, arg);
  if (!a->shard_count) {
    TE_ARG(!a->shard_first, "%s: args->shard_first %zu is set with args->shard_count 0", fn,
           a->shard_first);
    *view = *t;
    return te_check_hp_input(t, fn, arg);
  }
  TE_CHECK(te_tensor_check_desc(t, TECORE_TENSOR_ROWWISE, fn, arg));
  size_t n = te_tensor_count(t);
  TE_ARG(a->shard_first <= n && a->shard_count <= n - a->shard_first,
         "%s: args->shard_first %zu + args->shard_count %zu run past %s's %zu elements", fn,
         a->shard_first, a->shard_count, arg, n);
  *view = *t;
  view->ndim = 1;
  view->shape[0] = a->shard_count;
  return te_check_hp_input(view, fn, arg);
}

/* The window of a table of n elements the kernels take: the shard, or all. */
static void emb_window(const struct tecore_embedding_args *a, size_t n, unsigned long long *first,
                       unsigned long long *count) {
  *first = a->shard_count ? a->shard_first : 0;
  *count = a->shard_count ? a->shard_count : n;
}

static tecore_result_t emb_check_common(const struct tecore_embedding_args *a, const char *fn) {
  TE_ARG(a, "%s: args is NULL", fn);
  TE_ARG(a->tokens <= EMB_MAX_TOKENS, "%s: args->tokens %zu exceeds 2^30", fn, a->tokens);
  TE_CHECK(emb_check_ids(a->ids, a->tokens, 1, fn, "args->ids"));
  TE_CHECK(emb_check_ids(a->positions, a->tokens, 0, fn, "args->positions"));
  TE_ARG(!a->positions || !a->seq_len, "%s: args->seq_len %zu is set with args->positions", fn,
         a->seq_len);
  return TECORE_SUCCESS;
}

/* The vector path's 16-byte loads (a window's bounds must be multiples of
 * 8 elements as well: each vector wholly inside or outside it). */
static int emb_vec(size_t hidden, const struct tecore_tensor *a, const struct tecore_tensor *b,
                   const struct tecore_tensor *c) {
  const struct tecore_tensor *t[3] = {a, b, c};
  if (hidden % 8) return 0;
  for (int i = 0; i < 3; i++)
    if (t[i] && (t[i]->data % 16 || (hidden * tecore_dtype_size(t[i]->dtype)) % 16)) return 0;
  return 1;
}

/* ---- forward ------------------------------------------------------------------------------ */

TE_EXPORT tecore_result_t tecore_embedding_fwd(const struct tecore_embedding_args *args,
                                               struct tecore_tensor *out,
                                               tecore_stream_t stream) {
  const char *fn = __func__;
  TE_CHECK(emb_check_common(args, fn));
  struct tecore_tensor wv;
  TE_CHECK(emb_check_table(args, args->weight, &wv, fn, "args->weight"));
  size_t vocab, hidden, rows, max_pos = 0;
  te_tensor_view(args->weight, &vocab, &hidden);
  TE_ARG(vocab <= INT32_MAX, "%s: args->weight: %zu rows exceed %d", fn, vocab, INT32_MAX);
  TE_ARG(!args->pos_weight || !args->shard_count,
         "%s: args->pos_weight is set with a shard of the token table (args->shard_count %zu): "
         "a shard's forward takes the token table alone",
         fn, args->shard_count);
  if (args->pos_weight)
    TE_CHECK(emb_check_2d(args->pos_weight, hidden, &max_pos, fn, "args->pos_weight"));
  TE_ARG(out, "%s: out is NULL", fn);
  TE_CHECK(te_check_fused_output(out, fn, "out"));
  TE_ARG(out->scaling == TECORE_SCALING_NONE, "%s: out: scaling %s: the output is f32, f16 or bf16",
         fn, tecore_scaling_name(out->scaling));
  TE_CHECK(emb_check_2d(out, hidden, &rows, fn, "out"));
  TE_ARG(rows == args->tokens, "%s: out has %zu rows, args->tokens is %zu", fn, rows, args->tokens);
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_tensor_spans(out, "out", TE_SPAN_DATA, &l);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(&wv, "args->weight", TE_SPAN_DATA, &l);
  if (args->pos_weight) te_tensor_spans(args->pos_weight, "args->pos_weight", TE_SPAN_DATA, &l);
  te_span_add(&l, "args->ids", args->ids, args->tokens * 4);
  te_span_add(&l, "args->positions", args->positions, args->positions ? args->tokens * 4 : 0);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  tecore_devptr_t st;
  TE_CHECK(te_status_word_arg(args->status, emb_status_err, &st, fn));
  if (!args->tokens || !hidden) return TECORE_SUCCESS;
  int id = emb_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the embedding kernels did not register", fn);
  unsigned warps = TE_EMB_THREADS / 32;
  unsigned long long blocks = te_cdiv(args->tokens, warps), cap = te_sm_count() * 64ull;
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)(blocks < cap ? blocks : cap), 1, 1},
                                  .block = {TE_EMB_THREADS, 1, 1}};
  const struct tecore_tensor *p = args->pos_weight;
  unsigned long long wfirst, wcount;
  emb_window(args, vocab * hidden, &wfirst, &wcount);
  struct te_emb_fwd_args k = {
      .w = TE_DPTR(args->weight->data), .p = p ? TE_DPTR(p->data) : NULL,
      .out = TE_DPTR(out->data), .ids = TE_DPTR(args->ids), .positions = TE_DPTR(args->positions),
      .status = TE_DPTR(st), .tokens = args->tokens, .hidden = hidden, .vocab = (long long)vocab,
      .max_pos = (long long)max_pos, .seq_len = (long long)args->seq_len,
      .wfirst = wfirst, .wcount = wcount,
      .flags = (emb_vec(hidden, args->weight, p, out) && wfirst % 8 == 0 && wcount % 8 == 0)
                   ? TE_EMB_VEC
                   : 0,
      .dtypes = (int)args->weight->dtype | (p ? (int)p->dtype : 0) << 4 | (int)out->dtype << 8};
  void *kargs[TE_KNPARAMS(TE_EMB_FWD_PARAMS)];
  te_emb_fwd_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(id + K_FWD, &cfg, kargs, stream);
}

/* ---- store: the gather's reverse --------------------------------------------------------- */

TE_EXPORT tecore_result_t tecore_embedding_store(const struct tecore_tensor *in,
                                                 tecore_devptr_t ids, struct tecore_tensor *table,
                                                 uint64_t *status, tecore_stream_t stream) {
  const char *fn = __func__;
  TE_ARG(in, "%s: in is NULL", fn);
  TE_CHECK(te_check_hp_input(in, fn, "in"));
  size_t tokens, hidden, rows;
  te_tensor_view(in, &tokens, &hidden);
  TE_ARG(tokens <= EMB_MAX_TOKENS, "%s: in has %zu rows, more than 2^30", fn, tokens);
  TE_ARG(table, "%s: table is NULL", fn);
  TE_CHECK(te_check_fused_output(table, fn, "table"));
  TE_ARG(table->scaling == TECORE_SCALING_NONE,
         "%s: table: scaling %s: the table is f32, f16 or bf16", fn,
         tecore_scaling_name(table->scaling));
  TE_CHECK(emb_check_2d(table, hidden, &rows, fn, "table"));
  TE_CHECK(emb_check_ids(ids, tokens, 1, fn, "ids"));
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_tensor_spans(table, "table", TE_SPAN_DATA, &l);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(in, "in", TE_SPAN_DATA, &l);
  te_span_add(&l, "ids", ids, tokens * 4);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  tecore_devptr_t st;
  TE_CHECK(te_status_word_arg(status, emb_status_err, &st, fn));
  if (!tokens || !hidden) return TECORE_SUCCESS;
  int id = emb_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the embedding kernels did not register", fn);
  unsigned warps = TE_EMB_THREADS / 32;
  unsigned long long blocks = te_cdiv(tokens, warps), cap = te_sm_count() * 64ull;
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)(blocks < cap ? blocks : cap), 1, 1},
                                  .block = {TE_EMB_THREADS, 1, 1}};
  struct te_emb_fwd_args k = {
      .w = TE_DPTR(in->data), .out = TE_DPTR(table->data), .ids = TE_DPTR(ids),
      .status = TE_DPTR(st), .tokens = tokens, .hidden = hidden, .vocab = (long long)rows,
      .wfirst = 0, .wcount = tokens * hidden,   /* all of in */
      .flags = TE_EMB_STORE | (emb_vec(hidden, in, table, NULL) ? TE_EMB_VEC : 0),
      .dtypes = (int)in->dtype | (int)table->dtype << 8};
  void *kargs[TE_KNPARAMS(TE_EMB_FWD_PARAMS)];
  te_emb_fwd_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(id + K_FWD, &cfg, kargs, stream);
}

/* ---- backward ----------------------------------------------------------------------------- */

/* What the backward's launches share: the call, dout [tokens][hidden],
 * the status word, the first kernel id. */
struct emb_bwd_call {
  const struct tecore_embedding_args *a;
  const struct tecore_tensor *dout;
  tecore_devptr_t st;
  size_t hidden;
  int id;
};

/* One table's gradient: dw [rows][hidden], summed at ids, its elements
 * [first, first + count) at dw->data (emb_window); pos: the position
 * table (ids are positions within sequences of seq_len). */
struct emb_grad {
  struct tecore_tensor *dw;
  tecore_devptr_t ids;
  size_t rows, seq_len;
  unsigned long long first, count;
  int pos;
};

/* The vector path takes 8 columns at a time in 16-byte loads and counts
 * columns in 32 bits. */
static int emb_bwd_vec(size_t hidden, const struct tecore_tensor *dout,
                       const struct tecore_tensor *dw) {
  return hidden < (1u << 30) && emb_vec(hidden, dout, dw, NULL);
}

/* The position table with its positions implied, all inside it: a thread
 * a vector of a position (te_emb_bwd_pos), not a block for 64 rows of it
 * (GPT-2's 1024 positions: 16 blocks). */
static int emb_bwd_pos(const struct emb_bwd_call *c, const struct emb_grad *g, int vec,
                       struct tecore_launch_cfg *cfg) {
  if (!g->pos || g->ids || !vec || !g->seq_len || g->seq_len > g->rows ||
      !tecore_tunable_int(&emb_pos_kernel))
    return 0;
  size_t np = c->a->tokens < g->seq_len ? c->a->tokens : g->seq_len;
  size_t blocks = te_cdiv(np * (c->hidden / 8), TE_EMB_THREADS);
  if (blocks > 0x7fffffffu) return 0;
  *cfg = (struct tecore_launch_cfg){.grid = {(unsigned)blocks, 1, 1},
                                    .block = {TE_EMB_THREADS, 1, 1}};
  return 1;
}

static tecore_result_t emb_bwd_one(const struct emb_bwd_call *c, const struct emb_grad *g,
                                   tecore_stream_t stream) {
  /* blocks for the rows the window touches, [row0, row1) */
  const size_t row0 = g->first / c->hidden, row1 = te_cdiv(g->first + g->count, c->hidden);
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)te_cdiv(row1 - row0, TE_EMB_ROWS), 1, 1},
                                  .block = {TE_EMB_THREADS, 1, 1}};
  const int vec =
      emb_bwd_vec(c->hidden, c->dout, g->dw) && g->first % 8 == 0 && g->count % 8 == 0;
  int kid = vec ? K_BWD_VEC + 3 * (int)c->dout->dtype + (int)g->dw->dtype : K_BWD;
  if (emb_bwd_pos(c, g, vec, &cfg)) kid = K_BWD_POS;
  struct te_emb_bwd_args k = {
      .dy = TE_DPTR(c->dout->data), .dw = TE_DPTR(g->dw->data), .ids = TE_DPTR(g->ids),
      .status = TE_DPTR(c->st), .tokens = c->a->tokens, .hidden = c->hidden,
      .vocab = (long long)g->rows, .seq_len = (long long)g->seq_len, .wfirst = g->first,
      .wcount = g->count, .row0 = (long long)row0,
      .flags = (vec ? TE_EMB_VEC : 0) |
               (g->pos ? TE_EMB_POS : 0),
      .dtypes = (int)c->dout->dtype | (int)g->dw->dtype << 4};
  void *kargs[TE_KNPARAMS(TE_EMB_BWD_PARAMS)];
  te_emb_bwd_args_ptrs(&k, kargs);
  return te_kernel_launch_pdl(c->id + kid, &cfg, kargs, stream);
}

TE_EXPORT tecore_result_t tecore_embedding_bwd(const struct tecore_embedding_args *args,
                                               const struct tecore_tensor *dout,
                                               struct tecore_tensor *dweight,
                                               struct tecore_tensor *dpos_weight,
                                               tecore_stream_t stream) {
  const char *fn = __func__;
  TE_CHECK(emb_check_common(args, fn));
  TE_ARG(dout, "%s: dout is NULL", fn);
  TE_CHECK(te_check_hp_input(dout, fn, "dout"));
  size_t rows, hidden, vocab, max_pos = 0;
  te_tensor_view(dout, &rows, &hidden);
  TE_ARG(rows == args->tokens, "%s: dout has %zu rows, args->tokens is %zu", fn, rows, args->tokens);
  struct tecore_tensor dwv;
  TE_CHECK(emb_check_table(args, dweight, &dwv, fn, "dweight"));
  TE_CHECK(emb_check_cols(dweight, hidden, &vocab, fn, "dweight"));
  TE_ARG(!dpos_weight || !args->shard_count,
         "%s: dpos_weight is set with a shard of the token table (args->shard_count %zu): "
         "a shard's backward takes the token table alone",
         fn, args->shard_count);
  if (dpos_weight) TE_CHECK(emb_check_2d(dpos_weight, hidden, &max_pos, fn, "dpos_weight"));
  struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
  te_tensor_spans(&dwv, "dweight", TE_SPAN_DATA, &l);
  if (dpos_weight) te_tensor_spans(dpos_weight, "dpos_weight", TE_SPAN_DATA, &l);
  l.access = TE_ACCESS_READ;
  te_tensor_spans(dout, "dout", TE_SPAN_DATA, &l);
  te_span_add(&l, "args->ids", args->ids, args->tokens * 4);
  te_span_add(&l, "args->positions", args->positions, args->positions ? args->tokens * 4 : 0);
  TE_CHECK(te_check_spans(l.span, l.n, fn));
  tecore_devptr_t st;
  TE_CHECK(te_status_word_arg(args->status, emb_status_err, &st, fn));
  if (!args->tokens || !hidden) return TECORE_SUCCESS;
  int id = emb_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "%s: the embedding kernels did not register", fn);
  const struct emb_bwd_call c = {.a = args, .dout = dout, .st = st, .hidden = hidden, .id = id};
  unsigned long long first, count;
  emb_window(args, vocab * hidden, &first, &count);
  if (vocab)
    TE_CHECK(emb_bwd_one(&c, &(struct emb_grad){.dw = dweight, .ids = args->ids, .rows = vocab,
                                                .first = first, .count = count},
                         stream));
  if (dpos_weight && max_pos)
    TE_CHECK(emb_bwd_one(&c, &(struct emb_grad){.dw = dpos_weight, .ids = args->positions,
                                                .rows = max_pos, .seq_len = args->seq_len,
                                                .count = max_pos * hidden, .pos = 1},
                         stream));
  return TECORE_SUCCESS;
}
