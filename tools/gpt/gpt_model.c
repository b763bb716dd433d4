/* SPDX-License-Identifier: Apache-2.0
 * gpt_model.c -- te-gpt's model: the token embedding (te/embedding.h,
 * F32 tables; a learned position table when there is no RoPE), then one
 * fuser sequence (te/ops.h) of `layers` pre-norm blocks
 * (tecore_seq_add_transformer, te/transformer.h), the final norm
 * and the LM head (a Linear hidden -> vocab without bias, NOT tied to the
 * embedding), then cross-entropy (te/loss.h) on the BF16 logits: its
 * backward in place, or (FP8, per-tensor scaling) straight into the LM
 * head's FP8 gradient (tecore_seq_grad_fp8): its rowwise codes over the
 * logits' first half, its columnwise copy in their second
 * (TECORE_SEQ_GRAD_FP8_GIVEN; TECORE_OPS_FUSION_OFF=grad_fp8_given: the
 * rowwise codes in the sequence's buffer, the columnwise in the logits).
 * The parameters get PyTorch-style names (gpt_name_params) in the order
 * the sequence lists them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "gpt.h"

/* the rows of the cross-entropy's in-place FP8 backward that go through a
 * workspace first (tecore_xent_bwd): 64 rows, then slices of 64, 128, ...
 * rows, log2(rows / 64) + 1 launches */
#define GPT_XENT_WS_ROWS 64

void gpt_die_call(const char *what, tecore_result_t r) {
  GPT_ERR("%s failed: %s (%s)", what, tecore_strerror(r), tecore_last_error());
  exit(1);
}

void *gpt_xalloc(size_t bytes) {
  void *p = calloc(1, bytes ? bytes : 1);
  if (!p) {
    GPT_ERR("out of host memory (%zu bytes)", bytes);
    exit(1);
  }
  return p;
}

tecore_devptr_t gpt_dalloc(size_t bytes, size_t *counter) {
  tecore_devptr_t p;
  GPT_CHECK(tecore_mem_alloc(bytes ? bytes : 16, &p));
  if (counter) *counter += bytes;
  return p;
}

struct tecore_tensor gpt_tensor2(tecore_dtype_t dt, size_t rows, size_t cols, tecore_devptr_t p) {
  struct tecore_tensor t;
  size_t sh[2] = {rows, cols};
  GPT_CHECK(tecore_tensor_init(&t, dt, 2, sh, p));
  return t;
}

double gpt_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t gpt_splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* An F32 table of n values, uniform in +-bound from seed (the draws of
 * gpt_splitmix from seed, one a value), drawn on the device and ready on
 * return. */
static void fill_table(tecore_devptr_t p, size_t n, double bound, uint64_t seed) {
  GPT_CHECK(tecore_fill_uniform(p, TECORE_DTYPE_F32, n, bound, seed, 0, NULL));
  GPT_CHECK(tecore_stream_synchronize(NULL));
}

/* The blocks, the final norm, the LM head. */
static void add_ops(struct gpt_model *m) {
  const struct gpt_config *c = &m->c;
  for (int l = 0; l < c->layers; l++) {
    struct tecore_transformer_desc b = {
        .hidden = (size_t)c->hidden, .heads = c->heads, .kv_heads = c->kv_heads,
        .ffn = (size_t)c->ffn,
        .norm = c->norm == GPT_RMSNORM ? TECORE_OP_RMSNORM : TECORE_OP_LAYERNORM,
        .activation = c->act == GPT_SWIGLU ? TECORE_OP_SWIGLU : c->act == GPT_GEGLU ? TECORE_OP_GEGLU
                      : c->act == GPT_RELU ? TECORE_OP_RELU : TECORE_OP_GELU,
        .qkv_bias = c->bias, .proj_bias = c->bias, .mlp_bias = c->bias, .rope = c->rope,
        .rope_style = TECORE_ROPE_HALVES, .rope_theta = c->rope_theta,
        .attn_flags = TECORE_ATTN_CAUSAL,
        .batch = m->batch, .max_seqlen = (size_t)c->seq, .slot = 0,
        .tp_size = m->tp.size > 1 ? m->tp.size : 0, .tp_rank = m->tp.size > 1 ? m->tp.rank : 0,
        .tp_ctx = m->tp.size > 1 ? m->tp.ctx : NULL, .sequence_parallel = m->tp.sp};
    GPT_CHECK(tecore_seq_add_transformer(m->seq, &b));
  }
  struct tecore_op_desc d = {.kind = c->norm == GPT_RMSNORM ? TECORE_OP_RMSNORM : TECORE_OP_LAYERNORM,
                             .epsilon = 1e-5f};
  GPT_CHECK(tecore_seq_add(m->seq, &d, NULL));
  struct tecore_op_desc head = {.kind = TECORE_OP_LINEAR, .features = (size_t)c->vocab};
  GPT_CHECK(tecore_seq_add(m->seq, &head, NULL));
}

/* PyTorch-style names from the operations' order: per block two norms
 * (attn_norm, mlp_norm) and four Linears (attn.qkv, attn.proj, mlp.fc1,
 * mlp.fc2), then norm and lm_head; gamma/beta are weight/bias. */
static void name_param(struct gpt_model *m, struct gpt_param *gp, const struct tecore_seq_param *sp,
                       int kind, int nnorm, int nlin) {
  static const char *const lin[4] = {"attn.qkv", "attn.proj", "mlp.fc1", "mlp.fc2"};
  static const char *const nrm[2] = {"attn_norm", "mlp_norm"};
  const char *what = !strcmp(sp->name, "gamma") ? "weight" : !strcmp(sp->name, "beta") ? "bias"
                     : sp->name;
  int L = m->c.layers;
  if (kind == TECORE_OP_LINEAR && nlin < 4 * L)
    snprintf(gp->name, sizeof gp->name, "layers.%d.%s.%s", nlin / 4, lin[nlin % 4], what);
  else if (kind == TECORE_OP_LINEAR)
    snprintf(gp->name, sizeof gp->name, "lm_head.%s", what);
  else if (nnorm < 2 * L)
    snprintf(gp->name, sizeof gp->name, "layers.%d.%s.%s", nnorm / 2, nrm[nnorm % 2], what);
  else
    snprintf(gp->name, sizeof gp->name, "norm.%s", what);
}

static void collect_params(struct gpt_model *m, int inference) {
  size_t ns = 0;
  GPT_CHECK(tecore_seq_params(m->seq, NULL, 0, &ns));
  struct tecore_seq_param *sp = gpt_xalloc(ns * sizeof *sp);
  GPT_CHECK(tecore_seq_params(m->seq, sp, ns, &ns));
  size_t ntab = m->c.rope ? 1 : 2;
  m->np = ntab + ns;
  m->p = gpt_xalloc(m->np * sizeof *m->p);
  size_t H = (size_t)m->c.hidden;
  struct gpt_param *t = &m->p[0];
  snprintf(t->name, sizeof t->name, "tok_embeddings.weight");
  t->rows = (size_t)m->c.vocab, t->cols = H, t->value = m->tok, t->grad = m->tok_grad, t->decay = 1;
  t->table = 1;
  t->grad_dtype = TECORE_DTYPE_F32;
  if (!m->c.rope) {
    t = &m->p[1];
    snprintf(t->name, sizeof t->name, "pos_embeddings.weight");
    t->rows = (size_t)m->c.seq, t->cols = H, t->value = m->pos, t->grad = m->pos_grad, t->decay = 1;
    t->table = 1;
    t->grad_dtype = TECORE_DTYPE_F32;
  }
  int nnorm = -1, nlin = -1;
  size_t last_op = (size_t)-1;
  for (size_t i = 0; i < ns; i++) {
    struct tecore_op_info info;
    GPT_CHECK(tecore_seq_op(m->seq, sp[i].op, &info));
    int kind = info.desc.kind;
    if (sp[i].op != last_op) {
      if (kind == TECORE_OP_LINEAR) nlin++;
      else nnorm++;
      last_op = sp[i].op;
    }
    struct gpt_param *g = &m->p[ntab + i];
    name_param(m, g, &sp[i], kind, nnorm, nlin);
    g->rows = sp[i].value.ndim == 2 ? sp[i].value.shape[0] : 1;
    g->cols = tecore_tensor_numel(&sp[i].value) / g->rows;
    g->value = sp[i].value.data;
    g->grad = inference ? 0 : sp[i].grad.data;
    g->grad_dtype = sp[i].grad.dtype;
    g->bf16 = sp[i].value.dtype == TECORE_DTYPE_BF16;   /* else F32: its own master */
    g->decay = kind == TECORE_OP_LINEAR && !strcmp(sp[i].name, "weight");
    g->sharded = m->tp.size > 1 && kind == TECORE_OP_LINEAR && nlin < 4 * m->c.layers;
    g->op = sp[i].op;
    g->lin_weight = kind == TECORE_OP_LINEAR && !strcmp(sp[i].name, "weight");
  }
  m->nparams = 0;
  for (size_t i = 0; i < m->np; i++) m->nparams += m->p[i].rows * m->p[i].cols;
  free(sp);
}

/* A table's gradient: in the gradients' symmetric memory under --dp. */
static tecore_devptr_t grad_dalloc(struct gpt_model *m, size_t bytes) {
  if (!m->gsym) return gpt_dalloc(bytes, &m->dev_bytes);
  tecore_devptr_t p = 0;
  GPT_CHECK(gpt_dp_gsym_alloc(m->gsym, bytes, &p));
  m->dev_bytes += bytes;
  return p;
}

/* --dp, --zero 0/1: the sequence's parameter gradients in one region of
 * symmetric memory (tecore_seq_set_grad_region), before its build. */
static void grad_region(struct gpt_model *m, const struct gpt_dp *dp, int inference) {
  m->gsym = inference ? NULL : gpt_dp_gsym_new(dp);
  if (!m->gsym) return;
  const struct tecore_seq_grad_region g = {.alloc = gpt_dp_gsym_alloc,
                                           .release = gpt_dp_gsym_release, .ctx = m->gsym};
  GPT_CHECK(tecore_seq_set_grad_region(m->seq, &g));
}

static void create(struct gpt_model *m, const struct gpt_config *c, size_t batch, int max_mb,
                   const struct tecore_recipe *recipe, uint64_t seed,
                   const struct gpt_ranks *ranks, tecore_stream_t s) {
  const struct gpt_tp *tp = ranks ? ranks->tp : NULL;
  const struct gpt_dp *dp = ranks ? ranks->dp : NULL;
  memset(m, 0, sizeof *m);
  m->c = *c;
  if (tp) m->tp = *tp;
  m->batch = batch;
  m->rows = m->srows = batch * (size_t)c->seq;
  m->max_mb = max_mb;
  int inference = max_mb == 0;   /* generation: forward only, no table gradients */
  /* --sp: training only (a generation twin takes the same parameters
   * whole-rowed); te-gpt checks that the rows split */
  m->tp.sp = tp && tp->sp && tp->size > 1 && !inference;
  if (m->tp.sp) m->srows = m->rows / (size_t)tp->size, m->row0 = m->srows * (size_t)tp->rank;
  struct tecore_seq_config cfg = {.rows = m->srows, .features = (size_t)c->hidden,
                                  .dtype = TECORE_DTYPE_BF16, .seed = seed,
                                  .flags = inference ? TECORE_SEQ_INFERENCE : 0u};
  /* FP8 training: the Linears' weights are their own F32 masters (no BF16
   * copy: 2 bytes a weight, 2.6 GiB at 1.3B); not under --zero 3, whose
   * passes gather the values: BF16 ones are half the bytes (the F32
   * masters are AdamW's shards) */
  if (recipe && !inference && !(dp && dp->zero == 3)) cfg.flags |= TECORE_SEQ_F32_WEIGHTS;
  /* --share-saved: the never-read saved tensors get no storage of their
   * own first, so the build's peak is not the shared layout's plus them */
  if (c->share_saved && !inference) cfg.flags |= TECORE_SEQ_DEFER_SAVED;
  /* --wgrad bf16: the Linears' weight gradients as the GEMMs write them,
   * rounded to BF16 (what autocast's BF16 weight copies give PyTorch) */
  if (c->wgrad_bf16 && !inference) cfg.flags |= TECORE_SEQ_BF16_WGRAD;
  if (c->gelu_apart) cfg.flags |= TECORE_SEQ_NO_GELU_EPILOGUE;
  /* FP8 training under delayed scaling: the LM head's two FP8 gradient
   * copies fill the dead BF16 logits exactly (rows * vocab bytes each,
   * the second 16-byte aligned), so the sequence keeps no buffer of that
   * size (llama-1b: 1 GiB).  Current scaling's amax pass would read the
   * logits after the codes overwrote them: its codes in the sequence's
   * buffer, as before. */
  const size_t RV = m->srows * (size_t)c->vocab;
  if (recipe && recipe->kind == TECORE_RECIPE_DELAYED && !inference && RV % 16 == 0)
    cfg.flags |= TECORE_SEQ_GRAD_FP8_GIVEN;
  GPT_CHECK(tecore_seq_create(&cfg, &m->seq));
  add_ops(m);
  gpt_recompute_blocks(m, inference);
  if (recipe) GPT_CHECK(tecore_seq_set_recipe(m->seq, recipe, s));
  grad_region(m, dp, inference);
  GPT_CHECK(tecore_seq_build(m->seq, s));
  size_t H = (size_t)c->hidden, V = (size_t)c->vocab, R = m->rows, SR = m->srows;
  size_t *db = &m->dev_bytes;
  m->tok = gpt_dalloc(V * H * 4, db);
  fill_table(m->tok, V * H, 0.1, seed ^ 0x746f6bull);
  if (!inference) m->tok_grad = grad_dalloc(m, V * H * 4);
  if (!c->rope) {
    m->pos = gpt_dalloc((size_t)c->seq * H * 4, db);
    fill_table(m->pos, (size_t)c->seq * H, 0.1, seed ^ 0x706f73ull);
    if (!inference) m->pos_grad = grad_dalloc(m, (size_t)c->seq * H * 4);
  }
  m->ids = gpt_dalloc(R * 4, db);
  m->labels = gpt_dalloc(R * 4, db);
  m->x = gpt_dalloc(R * H * 2, db);
  m->dx = gpt_dalloc(R * H * 2, db);
  m->logits = gpt_dalloc(SR * V * 2, db);
  m->loss = gpt_dalloc(SR * 4, db);
  m->lse = gpt_dalloc(SR * 4, db);
  if (m->tp.sp) {
    m->dx_sh = gpt_dalloc(SR * H * 2, db);
    m->sp_sum = gpt_dalloc(8, db);
  }
  m->means = gpt_dalloc(8 * (size_t)(max_mb ? max_mb : 1), db);
  m->dloss = gpt_dalloc(4, db);
  m->noop = gpt_dalloc(8, db);
  static const int32_t first_rest[2] = {0, 1};
  GPT_CHECK(tecore_memcpy(m->noop, (tecore_devptr_t)(uintptr_t)first_rest, sizeof first_rest));
  /* --sp: each rank's loss is the mean over its rows, the model's the
   * mean of the ranks' (rows the same for each) */
  float dl = 1.0f / (float)(max_mb ? max_mb : 1) / (float)(m->tp.sp ? m->tp.size : 1);
  GPT_CHECK(tecore_memcpy(m->dloss, (tecore_devptr_t)(uintptr_t)&dl, 4));
  collect_params(m, inference);
  /* TECORE_OPS_FUSION_OFF=grad_fp8 (or the block recipe, or a fused head)
   * leaves the BF16 dlogits */
  if (recipe && !inference) {
    if (tecore_seq_grad_fp8(m->seq, &m->g8) == TECORE_SUCCESS) {
      m->dlogits8 = 1;
      if (!m->g8.data) {
        /* in place: tecore_xent_bwd slices the rows so that none is
         * overwritten before it is read, the first XENT_WS_ROWS through
         * a workspace of their own */
        m->g8.data = m->logits;
        m->g8.columnwise_data = m->logits + SR * V;
        size_t wr = SR < GPT_XENT_WS_ROWS ? SR : GPT_XENT_WS_ROWS;
        m->xent_ws_bytes = wr * V;
        m->xent_ws = gpt_dalloc(m->xent_ws_bytes, db);
        m->dlogits8 = 2;
      }
      if (!m->g8.columnwise_data) m->g8.columnwise_data = m->logits;
    } else {
      tecore_clear_error();
    }
  }
}

void gpt_model_create(struct gpt_model *m, const struct gpt_config *c, size_t batch, int max_mb,
                      const struct tecore_recipe *recipe, uint64_t seed, tecore_stream_t s) {
  create(m, c, batch, max_mb, recipe, seed, NULL, s);
}

void gpt_model_create_tp(struct gpt_model *m, const struct gpt_config *c, size_t batch,
                         int max_mb, const struct tecore_recipe *recipe, uint64_t seed,
                         const struct gpt_tp *tp, tecore_stream_t s) {
  gpt_model_create_dp(m, c, batch, max_mb, recipe, seed, &(struct gpt_ranks){.tp = tp}, s);
}

void gpt_model_create_dp(struct gpt_model *m, const struct gpt_config *c, size_t batch,
                         int max_mb, const struct tecore_recipe *recipe, uint64_t seed,
                         const struct gpt_ranks *ranks, tecore_stream_t s) {
  create(m, c, batch, max_mb, recipe, seed, ranks, s);
  const struct gpt_tp *tp = ranks ? ranks->tp : NULL;
  if (!tp || tp->size <= 1) return;
  /* the whole model for its values alone: a generation twin of one
   * sequence (no gradients, no saved tensors), whose build draws the same
   * values (the draws follow the operations, not the rows) */
  struct gpt_model full;
  create(&full, c, 1, 0, NULL, seed, NULL, s);
  for (size_t i = 0; i < m->np; i++) {
    struct gpt_param *p = &m->p[i];
    if (p->table) continue;   /* the same seed, the same values */
    const struct gpt_param *q = NULL;
    for (size_t j = 0; j < full.np && !q; j++)
      if (!strcmp(full.p[j].name, p->name)) q = &full.p[j];
    if (!q) {
      GPT_ERR("--tp: rank %d's %s has no counterpart in the whole model", tp->rank, p->name);
      exit(1);
    }
    /* the whole model's BF16 values, this rank's slice in p's dtype (an
     * F32 weight holds the same values widened) */
    size_t nf = q->rows * q->cols, n = p->rows * p->cols, es = p->bf16 ? 2 : 4;
    uint16_t *hf = gpt_xalloc(nf * 2);
    unsigned char *hp = gpt_xalloc(n * es);
    GPT_CHECK(tecore_memcpy((tecore_devptr_t)(uintptr_t)hf, q->value, nf * 2));
    for (size_t r = 0, len; r < p->rows; r++)
      for (size_t k = 0; k < p->cols; k += len) {
        const uint16_t *h = hf + gpt_tp_whole_run(c, p->name, tp->size, tp->rank, r, k,
                                                  p->cols, &len);
        size_t at = r * p->cols + k;
        if (es == 2) {
          memcpy(hp + at * 2, h, len * 2);
        } else {
          for (size_t e = 0; e < len; e++) {
            float f = tecore_bf16_to_f32(h[e]);
            memcpy(hp + (at + e) * 4, &f, 4);
          }
        }
      }
    GPT_CHECK(tecore_memcpy(p->value, (tecore_devptr_t)(uintptr_t)hp, n * es));
    free(hf);
    free(hp);
  }
  gpt_model_destroy(&full);
}

void gpt_model_destroy(struct gpt_model *m) {
  if (m->gsym) {   /* the tables' gradients: symmetric memory */
    if (m->tok_grad) GPT_CHECK(gpt_dp_gsym_release(m->gsym, m->tok_grad));
    if (m->pos_grad) GPT_CHECK(gpt_dp_gsym_release(m->gsym, m->pos_grad));
    m->tok_grad = m->pos_grad = 0;
  }
  tecore_devptr_t *b[] = {&m->tok, &m->tok_grad, &m->pos, &m->pos_grad, &m->ids, &m->labels,
                          &m->x, &m->dx, &m->logits, &m->loss, &m->lse, &m->means, &m->dloss,
                          &m->noop, &m->xent_ws, &m->dx_sh, &m->sp_sum};
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
    if (*b[i]) GPT_CHECK(tecore_mem_free(*b[i]));
  if (m->seq) GPT_CHECK(tecore_seq_destroy(m->seq));   /* its region back too */
  free(m->gsym);
  if (m->scratch) gpt_share_free(m);
  free(m->p);
  memset(m, 0, sizeof *m);
}

static struct tecore_embedding_args emb_args(const struct gpt_model *m, struct tecore_tensor *tok,
                                             struct tecore_tensor *pos) {
  size_t H = (size_t)m->c.hidden;
  *tok = gpt_tensor2(TECORE_DTYPE_F32, (size_t)m->c.vocab, H, m->tok);
  if (!m->c.rope) *pos = gpt_tensor2(TECORE_DTYPE_F32, (size_t)m->c.seq, H, m->pos);
  return (struct tecore_embedding_args){.weight = tok, .pos_weight = m->c.rope ? NULL : pos,
                                        .ids = m->ids, .tokens = m->rows,
                                        .seq_len = (size_t)m->c.seq};
}

/* --sp: this rank's rows' labels */
static struct tecore_xent_args xent_args(struct gpt_model *m, struct tecore_tensor *lg) {
  *lg = gpt_tensor2(TECORE_DTYPE_BF16, m->srows, (size_t)m->c.vocab, m->logits);
  return (struct tecore_xent_args){.logits = lg, .labels = m->labels + m->row0 * 4,
                                   .ignore_index = -100};
}

/* embedding and the sequence: the logits of the ids on the device.  --sp:
 * every rank embeds every row (the positions are the rows' own), the
 * sequence reads this rank's */
void gpt_logits(struct gpt_model *m, int reuse_fp8, tecore_stream_t s) {
  struct tecore_tensor tok, pos;
  struct tecore_embedding_args ea = emb_args(m, &tok, &pos);
  size_t H = (size_t)m->c.hidden;
  struct tecore_tensor x = gpt_tensor2(TECORE_DTYPE_BF16, m->rows, H, m->x);
  struct tecore_tensor lg = gpt_tensor2(TECORE_DTYPE_BF16, m->srows, (size_t)m->c.vocab, m->logits);
  if (m->dp.tshards) gpt_dp_embed_fwd(m, &x, s);   /* the group's shards of the table */
  else GPT_CHECK(tecore_embedding_fwd(&ea, &x, s));
  struct tecore_tensor xs = gpt_tensor2(TECORE_DTYPE_BF16, m->srows, H, m->x + m->row0 * H * 2);
  GPT_CHECK(tecore_seq_forward(m->seq, &xs, &lg, m->noop + (reuse_fp8 ? 4 : 0), s));
}

void gpt_forward(struct gpt_model *m, int mb, int reuse_fp8, tecore_stream_t s) {
  gpt_logits(m, reuse_fp8, s);
  struct tecore_tensor lg;
  struct tecore_xent_args xa = xent_args(m, &lg);
  GPT_CHECK(tecore_xent_fwd(&xa, m->loss, m->lse, m->means + 8 * (size_t)mb, s));
}

void gpt_backward(struct gpt_model *m, int mb, int with_loss, tecore_stream_t s) {
  struct tecore_tensor lg, tok, pos;
  struct tecore_xent_args xa = xent_args(m, &lg);
  struct tecore_tensor row = m->g8;   /* the rowwise codes: the backward transposes them */
  row.columnwise_data = 0;
  if (m->dlogits8) xa.dlogits = &row;
  if (m->dlogits8 == 2) {
    xa.workspace = m->xent_ws;
    xa.workspace_bytes = m->xent_ws_bytes;
  }
  /* with the loss: its forward and the gradient in one pass over the logits */
  if (with_loss)
    GPT_CHECK(tecore_xent_fwd_bwd(&xa, m->loss, m->lse, m->means + 8 * (size_t)mb, m->dloss,
                                  TECORE_XENT_DLOSS_MEAN, s));
  else
    GPT_CHECK(tecore_xent_bwd(&xa, m->lse, m->dloss, m->means + 8 * (size_t)mb,
                              TECORE_XENT_DLOSS_MEAN, s));
  size_t H = (size_t)m->c.hidden;
  /* --sp: this rank's rows' gradient, gathered: the tables' gradients of
   * every row on every rank, the same as without --sp (no sum) */
  struct tecore_tensor dx = gpt_tensor2(TECORE_DTYPE_BF16, m->srows, H, m->tp.sp ? m->dx_sh : m->dx);
  GPT_CHECK(tecore_seq_backward(m->seq, m->dlogits8 ? &m->g8 : &lg, &dx, s));
  if (m->tp.sp) gpt_sp_gather_dx(m, s);
  dx = gpt_tensor2(TECORE_DTYPE_BF16, m->rows, H, m->dx);
  if (m->dp.tshards) {
    gpt_dp_embed_bwd(m, &dx, s);
    return;
  }
  struct tecore_embedding_args ea = emb_args(m, &tok, &pos);
  struct tecore_tensor dtok = gpt_tensor2(TECORE_DTYPE_F32, (size_t)m->c.vocab, H, m->tok_grad);
  struct tecore_tensor dpos;
  if (!m->c.rope) dpos = gpt_tensor2(TECORE_DTYPE_F32, (size_t)m->c.seq, H, m->pos_grad);
  GPT_CHECK(tecore_embedding_bwd(&ea, &dx, &dtok, m->c.rope ? NULL : &dpos, s));
}

char *gpt_describe(const struct gpt_model *m, tecore_seq_dir_t dir) {
  size_t need = 0;
  GPT_CHECK(tecore_seq_describe(m->seq, dir, NULL, 0, &need));
  char *buf = gpt_xalloc(need + 1);
  GPT_CHECK(tecore_seq_describe(m->seq, dir, buf, need + 1, NULL));
  return buf;
}
