/* SPDX-License-Identifier: Apache-2.0
 * gpt_dp.c -- te-gpt's data parallelism (--dp, --zero) over libtecomm's
 * data-parallel group (te/comm_dp.h): every trained tensor handed to the
 * group in the order the backward finishes them (the sequence's
 * parameters by their operations, last first; then the embedding tables,
 * whose gradients the embedding's backward writes after the sequence's),
 * each parameter's shard recorded for AdamW (--zero 1, 2 and 3 keep
 * masters and moments for the shard only; --zero 3 the sequence's BF16
 * values too, which the passes gather), the sums of the ranks' losses, a
 * sharded tensor made whole for --save, and a rank's slice of a batch.
 *
 * Under --zero 0 and 1 the gradients lie in the dp communicator's
 * symmetric memory (gpt_dp_gsym_*: the sequence's region and the
 * tables'), so the group reduces every bucket where it lies.  Under
 * --zero 2 and 3 (but with --sp, whose replicated gradients are summed
 * whole over the tp ranks after the step's backward, or --grad-shards
 * 0) no rank keeps the sequence's whole gradients
 * (TECOMM_DP_GRAD_SHARDS): each layer's are reduce-scattered out of the
 * group's ring into this rank's shard as the backward writes them.
 *
 * The mean over the ranks is te-gpt's loss scale: dloss is 1 / (accum *
 * dp) (te-gpt.c), so the group sums (desc.scale 1). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/comm_dp.h>
#include "gpt.h"

static void dp_fail(const char *what, tecomm_result_t r) {
  GPT_ERR("--dp: %s: %s (%s)", what, tecomm_strerror(r), tecomm_last_error());
  exit(1);
}

/* The group's order: the sequence's parameters by operation, the last
 * first (stable: a weight before its bias), then the tables. */
static size_t *dp_order(const struct gpt_model *m) {
  size_t *ord = gpt_xalloc(m->np * sizeof *ord), k = 0;
  for (size_t i = m->np; i-- > 0;)
    if (!m->p[i].table) ord[k++] = i;
  for (size_t i = 0; i < m->np; i++)
    if (m->p[i].table) ord[k++] = i;
  return ord;
}

/* table: the token table held as shards (TECOMM_DP_TABLE_SHARDS) */
static struct tecomm_dp_tensor dp_tensor(const struct gpt_param *p, int table) {
  return (struct tecomm_dp_tensor){
      .name = p->name, .grad = p->grad, .grad_dtype = p->grad_dtype, .value = p->value,
      .value_dtype = p->bf16 ? TECORE_DTYPE_BF16 : TECORE_DTYPE_F32, .count = p->rows * p->cols,
      .op = p->table ? TECOMM_DP_NO_OP : p->op, .rows = table ? p->rows : 0};
}

/* --table-shards: the token table lies in the group now (its whole value
 * and gradient freed); with a position table, the buffers that add it
 * (gpt_dp_embed_fwd). */
static void tables_sharded(struct gpt_model *m, size_t k) {
  struct gpt_param *p = &m->p[0];
  size_t bytes = p->rows * p->cols * 4;
  GPT_CHECK(tecore_mem_free(m->tok));
  GPT_CHECK(tecore_mem_free(m->tok_grad));
  m->dev_bytes -= 2 * bytes;
  m->tok = m->tok_grad = 0;
  p->value = 0, p->grad = p->dp_grad;
  p->dp_z3 = 1;
  tecomm_result_t r = tecomm_dp_value_shard((tecomm_dp_t)m->dp.group, k, &p->dp_value);
  if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_value_shard", r);
  m->dp.tok_index = k;
  if (m->c.rope) return;
  size_t R = m->rows, S = (size_t)m->c.seq;
  int32_t *h = gpt_xalloc(R * sizeof *h);
  m->dp.xf = gpt_dalloc(R * (size_t)m->c.hidden * 4, &m->dev_bytes);
  m->dp.iota = gpt_dalloc(R * 4, &m->dev_bytes);
  m->dp.posids = gpt_dalloc(R * 4, &m->dev_bytes);
  for (size_t t = 0; t < R; t++) h[t] = (int32_t)t;
  GPT_CHECK(tecore_memcpy(m->dp.iota, (tecore_devptr_t)(uintptr_t)h, R * 4));
  for (size_t t = 0; t < R; t++) h[t] = (int32_t)(t % S);
  GPT_CHECK(tecore_memcpy(m->dp.posids, (tecore_devptr_t)(uintptr_t)h, R * 4));
  free(h);
}

/* --zero 3: the sequence's parameters now lie in the group's ring (their
 * own storage freed): p->value follows them there; with gradient shards
 * (--zero 2 too) p->grad into the gradient ring. */
static void dp_ring_values(struct gpt_model *m) {
  size_t ns = 0, ntab = m->c.rope ? 1 : 2;
  GPT_CHECK(tecore_seq_params(m->seq, NULL, 0, &ns));
  struct tecore_seq_param *sp = gpt_xalloc((ns ? ns : 1) * sizeof *sp);
  GPT_CHECK(tecore_seq_params(m->seq, sp, ns, &ns));
  for (size_t i = 0; i < ns && ntab + i < m->np; i++) {
    m->p[ntab + i].value = sp[i].value.data;
    m->p[ntab + i].grad = sp[i].grad.data;
  }
  free(sp);
}

void gpt_dp_create(struct gpt_model *m, const struct tecore_recipe *recipe, tecore_stream_t s) {
  size_t *ord = dp_order(m);
  struct tecomm_dp_tensor *t = gpt_xalloc(m->np * sizeof *t);
  /* --table-shards: not with --tp, whose ranks each hold the table */
  const int tabs = m->dp.zero >= 2 && m->dp.tshards && m->tp.size <= 1;
  for (size_t k = 0; k < m->np; k++) t[k] = dp_tensor(&m->p[ord[k]], tabs && ord[k] == 0);
  const int gring = m->dp.zero >= 2 && m->dp.gshards && !m->tp.sp;
  struct tecomm_dp_desc desc = {.comm = m->dp.comm, .tensors = t, .ntensors = m->np,
                                .seq = m->seq, .zero = m->dp.zero, .scale = 1.0f,
                                .recipe = recipe,
                                .flags = (gring ? TECOMM_DP_GRAD_SHARDS : 0u) |
                                         (tabs ? TECOMM_DP_TABLE_SHARDS : 0u)};
  tecomm_dp_t g = NULL;
  tecomm_result_t r = tecomm_dp_create(&desc, &g);
  if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_create", r);
  m->dp.group = g;
  for (size_t k = 0; k < m->np; k++) {
    struct gpt_param *p = &m->p[ord[k]];
    r = tecomm_dp_shard(g, k, &p->dp_first, &p->dp_count);
    if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_shard", r);
    p->dp_sharded = m->dp.zero > 0;
    p->dp_z3 = m->dp.zero == 3 && !p->table;
    p->dp_gring = gring && !p->table;
    if (p->dp_z3 && (r = tecomm_dp_value_shard(g, k, &p->dp_value)) != TECOMM_SUCCESS)
      dp_fail("tecomm_dp_value_shard", r);
    if ((r = tecomm_dp_grad_shard(g, k, &p->dp_grad)) != TECOMM_SUCCESS)
      dp_fail("tecomm_dp_grad_shard", r);
  }
  if (m->dp.zero == 3 || gring) dp_ring_values(m);
  for (size_t k = 0; k < m->np && tabs; k++)
    if (ord[k] == 0) tables_sharded(m, k);
  m->dp.tshards = tabs;
  if (tabs) {   /* sizes the group's scratch outside any capture (and for the memory count) */
    GPT_CHECK(tecore_memset_d32_async(m->ids, 0, m->rows, s));
    struct tecore_tensor x = gpt_tensor2(TECORE_DTYPE_BF16, m->rows, (size_t)m->c.hidden, m->x);
    gpt_dp_embed_fwd(m, &x, s);
  }
  free(t);
  free(ord);
  GPT_CHECK(tecore_stream_synchronize(s));
}

void gpt_dp_summary(const struct gpt_model *m, char *buf, size_t len) {
  size_t need = 0;
  tecomm_result_t r = tecomm_dp_describe((tecomm_dp_t)m->dp.group, buf, len, &need);
  char *end = r == TECOMM_SUCCESS ? strstr(buf, "):") : NULL;   /* the buckets' list after it */
  if (end) end[1] = '\0';
  else snprintf(buf, len, "no description: %s", tecomm_last_error());
}

/* The group's whole description (tecomm_dp_describe; freed by the
 * caller), from key on, or NULL without the key. */
static char *describe_from(const struct gpt_model *m, const char *key, char **line) {
  size_t need = 0;
  (void)tecomm_dp_describe((tecomm_dp_t)m->dp.group, NULL, 0, &need);
  *line = gpt_xalloc(need + 1);
  **line = '\0';
  (void)tecomm_dp_describe((tecomm_dp_t)m->dp.group, *line, need + 1, NULL);
  return strstr(*line, key);
}

size_t gpt_dp_value_bytes(const struct gpt_model *m) {
  if (!m->dp.group || m->dp.zero != 3) return 0;
  char *line;
  const char *v = describe_from(m, "; values: ", &line);
  size_t nb = 0, nu = 0, shards = 0, s0 = 0, s1 = 0;
  if (!v || sscanf(v, "; values: %zu sharded buckets in %zu units, shards %zu bytes, ring %zu "
                   "+ %zu bytes", &nb, &nu, &shards, &s0, &s1) != 5)
    shards = s0 = s1 = 0;
  free(line);
  return shards + s0 + s1;
}

size_t gpt_dp_grad_bytes(const struct gpt_model *m) {
  if (!m->dp.group || m->dp.zero < 2) return 0;
  char *line;
  const char *g = describe_from(m, "; gradients: ", &line);
  size_t shards = 0, s0 = 0, s1 = 0;
  if (!g || sscanf(g, "; gradients: shards %zu bytes, ring %zu + %zu bytes", &shards, &s0, &s1)
                != 3)
    shards = s0 = s1 = 0;
  free(line);
  return shards + s0 + s1;
}

size_t gpt_dp_table_bytes(const struct gpt_model *m) {
  if (!m->dp.group || !m->dp.tshards) return 0;
  char *line;
  const char *at = describe_from(m, "; tables: ", &line);
  size_t v = 0, g = 0, scr = 0;
  if (!at || sscanf(at, "; tables: shards %zu + %zu bytes, scratch %zu bytes", &v, &g, &scr) != 3)
    v = g = scr = 0;
  free(line);
  return v + g + scr;
}

void gpt_dp_embed_fwd(struct gpt_model *m, struct tecore_tensor *x, tecore_stream_t s) {
  tecomm_dp_t g = (tecomm_dp_t)m->dp.group;
  size_t H = (size_t)m->c.hidden;
  if (m->c.rope) {
    tecomm_result_t r = tecomm_dp_embedding_fwd(g, m->dp.tok_index, m->ids, m->rows, x, s);
    if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_embedding_fwd", r);
    return;
  }
  /* the token rows in F32, then the positions added as one process adds
   * them (one rounding to BF16): the bits of the whole table's forward */
  struct tecore_tensor xf = gpt_tensor2(TECORE_DTYPE_F32, m->rows, H, m->dp.xf);
  tecomm_result_t r = tecomm_dp_embedding_fwd(g, m->dp.tok_index, m->ids, m->rows, &xf, s);
  if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_embedding_fwd", r);
  struct tecore_tensor pos = gpt_tensor2(TECORE_DTYPE_F32, (size_t)m->c.seq, H, m->pos);
  struct tecore_embedding_args a = {.weight = &xf, .pos_weight = &pos, .ids = m->dp.iota,
                                    .tokens = m->rows, .seq_len = (size_t)m->c.seq};
  GPT_CHECK(tecore_embedding_fwd(&a, x, s));
}

void gpt_dp_embed_bwd(struct gpt_model *m, const struct tecore_tensor *dx, tecore_stream_t s) {
  tecomm_result_t r = tecomm_dp_embedding_bwd((tecomm_dp_t)m->dp.group, m->dp.tok_index, m->ids,
                                              m->rows, dx, s);
  if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_embedding_bwd", r);
  if (m->c.rope) return;
  /* the position table's gradient from this rank's rows (the group
   * reduces it): its rows named explicitly, the same bits as implied */
  struct tecore_tensor dpos =
      gpt_tensor2(TECORE_DTYPE_F32, (size_t)m->c.seq, (size_t)m->c.hidden, m->pos_grad);
  struct tecore_embedding_args a = {.ids = m->dp.posids, .tokens = m->rows};
  GPT_CHECK(tecore_embedding_bwd(&a, dx, &dpos, NULL, s));
}

void gpt_dp_table_whole(struct gpt_model *m, tecore_stream_t s) {
  if (!m->dp.tshards || m->tok) return;
  struct gpt_param *p = &m->p[0];
  m->tok = gpt_dalloc(p->rows * p->cols * 4, &m->dev_bytes);
  tecomm_result_t r = tecomm_dp_gather_value((tecomm_dp_t)m->dp.group, m->dp.tok_index, m->tok, s);
  if (r != TECOMM_SUCCESS) dp_fail("tecomm_dp_gather_value", r);
  GPT_CHECK(tecore_stream_synchronize(s));
  p->value = m->tok;
}

/* --zero 3: the sequence goes first, so that the group gives nothing
 * back into it (whole values and gradients gathered and allocated at
 * exit: on one H200 two ranks of a 16-layer Llama-3 8B peaked 10 GB
 * above their steady state there). */
void gpt_dp_destroy(struct gpt_model *m) {
  if (m->dp.group && m->dp.zero == 3 && m->seq) {
    GPT_CHECK(tecore_seq_destroy(m->seq));
    m->seq = NULL;
  }
  if (m->dp.group) (void)tecomm_dp_destroy((tecomm_dp_t)m->dp.group);
  m->dp.group = NULL;
  tecore_devptr_t *b[] = {&m->dp.xf, &m->dp.iota, &m->dp.posids};
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
    if (*b[i]) GPT_CHECK(tecore_mem_free(*b[i]));
  m->dp.xf = m->dp.iota = m->dp.posids = 0;
}

/* ---- the gradients in symmetric memory ---- */

struct gpt_gsym {
  tecomm_comm_t comm;
  int plain;   /* no symmetric memory: plain device memory (every rank alike) */
};

void *gpt_dp_gsym_new(const struct gpt_dp *dp) {
  if (!dp || dp->size <= 1 || dp->zero >= 2 || !dp->comm) return NULL;
  struct gpt_gsym *g = gpt_xalloc(sizeof *g);
  g->comm = (tecomm_comm_t)dp->comm;
  return g;
}

/* Collective: tecomm_mem_alloc compares every rank's bytes, so ranks
 * whose models differ fail here, the rank named, instead of hanging. */
tecore_result_t gpt_dp_gsym_alloc(void *ctx, size_t bytes, tecore_devptr_t *p) {
  struct gpt_gsym *g = ctx;
  if (!g->plain) {
    tecomm_result_t r = tecomm_mem_alloc(g->comm, bytes, p);
    if (r == TECOMM_SUCCESS) return TECORE_SUCCESS;
    if (r != TECOMM_ERR_NOT_SUPPORTED) {
      tecore_set_error("--dp: %zu bytes of gradients in symmetric memory: %s (%s)", bytes,
                       tecomm_strerror(r), tecomm_last_error());
      return r == TECOMM_ERR_NOMEM ? TECORE_ERR_NOMEM : TECORE_ERR_INVALID;
    }
    g->plain = 1;   /* the level says so on every rank */
  }
  return tecore_mem_alloc(bytes, p);
}

tecore_result_t gpt_dp_gsym_release(void *ctx, tecore_devptr_t p) {
  struct gpt_gsym *g = ctx;
  if (g->plain) return tecore_mem_free(p);
  /* symmetric memory goes back to the pool at once: no work may use it */
  tecore_result_t c = tecore_ctx_synchronize();
  if (c != TECORE_SUCCESS) return c;
  tecomm_result_t r = tecomm_mem_free(g->comm, p);
  if (r == TECOMM_SUCCESS) return TECORE_SUCCESS;
  tecore_set_error("--dp: the gradients' symmetric memory: %s (%s)", tecomm_strerror(r),
                   tecomm_last_error());
  return TECORE_ERR_INVALID;
}

void gpt_dp_sum(const struct gpt_model *m, tecore_devptr_t buf, size_t n, tecore_stream_t s) {
  tecomm_result_t r = tecomm_allreduce((tecomm_comm_t)m->dp.comm, buf, buf, n, TECORE_DTYPE_F32,
                                       TECOMM_SUM, s);
  if (r != TECOMM_SUCCESS) dp_fail("the losses' sum", r);
}

/* Every rank's shard in its place, zeros elsewhere, summed: the whole
 * tensor (x + 0 is x). */
tecore_devptr_t gpt_dp_whole(const struct gpt_model *m, const struct gpt_param *p, tecore_devptr_t shard,
                             tecore_stream_t s) {
  size_t n = p->rows * p->cols;
  tecore_devptr_t w = gpt_dalloc(n * 4, NULL);
  GPT_CHECK(tecore_memset_d32_async(w, 0, n, s));
  if (p->dp_count)
    GPT_CHECK(tecore_memcpy_async(w + p->dp_first * 4, shard, p->dp_count * 4, s));
  gpt_dp_sum(m, w, n, s);
  GPT_CHECK(tecore_stream_synchronize(s));
  return w;
}

void gpt_dp_slice(const struct gpt_model *m, const int32_t *all, int32_t *mine) {
  memcpy(mine, all + (size_t)m->dp.rank * m->rows, m->rows * sizeof *mine);
}
