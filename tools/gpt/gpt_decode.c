/* SPDX-License-Identifier: Apache-2.0
 * gpt_decode.c -- te-gpt's decode step with a KV cache: one token at a
 * time through the model's parameters (read from the fuser sequence, in
 * its operations' order), with the plain calls instead of the fuser:
 * embedding, per block the norm, the QKV GEMM (with bias), RoPE at the
 * token's position, the new key and value (adjacent in the QKV output)
 * stored into the layer's cache row pos (tecore_embedding_store), attention
 * of one query against the cache's pos + 1 rows (cu_seqlens {0, pos + 1}:
 * libte's kernels), the output GEMM added into the residual in place
 * (beta 1), the norm, fc1, the activation, fc2 added into the residual;
 * the final norm and the LM head: logits [1][vocab].  BF16 throughout, F32
 * tables.  --tp: the rank's heads and MLP columns (its parameters are
 * slices, tecore_seq_add_transformer(3)); the output Linear and fc2 write
 * partial sums, summed over the ranks (tecomm_allreduce, BF16) and then
 * added into the residual, as the training forward's tp_reduce and add
 * do.  Token and position live in device memory (d->meta), so the
 * step is one graph (libtegraph) captured on its second call and replayed
 * for every later token; only the 16 bytes of {token, pos} are copied
 * before each replay. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt.h"
#include <te/comm.h>
#include <te/graph.h>
#include "gpt_decode.h"

/* the norms' and Linears' parameters, in the sequence's order; an F32
 * weight (FP8 training) is read through a BF16 copy rounded now */
static void find_params(struct gpt_decoder *d, const struct gpt_model *m) {
  size_t nops = 0, nn = 0, nl = 0;
  struct tecore_op_info info;
  tecore_devptr_t one = 0;
  while (tecore_seq_op(m->seq, nops, &info) == TECORE_SUCCESS) nops++;
  for (size_t i = 0; i < nops; i++) {
    GPT_CHECK(tecore_seq_op(m->seq, i, &info));
    int k = info.desc.kind;
    if (k == TECORE_OP_LAYERNORM || k == TECORE_OP_RMSNORM) {
      d->norm[nn].gamma = info.param[0];
      d->norm[nn].beta = info.param[1];
      d->norm[nn++].has_beta = k == TECORE_OP_LAYERNORM;
    } else if (k == TECORE_OP_LINEAR) {
      d->lin[nl].w = info.param[0];
      d->lin[nl].b = info.param[1];
      d->lin[nl].has_b = info.desc.bias;
      if (info.param[0].dtype == TECORE_DTYPE_F32) {
        size_t n = tecore_tensor_numel(&info.param[0]);
        if (!one) {
          one = gpt_dalloc(4, NULL);
          GPT_CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, 0));
        }
        d->lin[nl].w16 = gpt_dalloc(n * 2, NULL);
        struct tecore_tensor *w = &d->lin[nl].w;
        w->dtype = TECORE_DTYPE_BF16;
        w->data = d->lin[nl].w16;
        GPT_CHECK(tecore_unscale_multi(&info.param[0], w, 1, one, 0, 0));
      }
      nl++;
    }
  }
  if (one) {
    GPT_CHECK(tecore_stream_synchronize(0));
    GPT_CHECK(tecore_mem_free(one));
  }
}

/* The attention of layer l's query against the cache (lengths from meta). */
static struct tecore_attention_args attn_args(const struct gpt_decoder *d, int l) {
  const struct gpt_config *c = &d->m->c;
  size_t hd = (size_t)(c->hidden / c->heads), kvw = (size_t)d->kv_heads * hd;
  return (struct tecore_attention_args){
      .batch = 1, .cu_seqlens_q = d->meta + 16, .cu_seqlens_kv = d->meta + 8,
      .max_seqlen_q = 1, .max_seqlen_kv = (size_t)c->seq, .tokens_q = 1,
      .tokens_kv = (size_t)c->seq, .heads = d->heads, .kv_heads = d->kv_heads,
      .head_dim = (int)hd, .scale = 1.0f / sqrtf((float)hd), .flags = TECORE_ATTN_CAUSAL,
      .dtype = TECORE_DTYPE_BF16, .o_dtype = TECORE_DTYPE_BF16,
      .q = {.data = d->qkv, .token_stride = d->qkv_w, .head_stride = hd},
      .k = {.data = d->kvc[l], .token_stride = 2 * kvw, .head_stride = hd},
      .v = {.data = d->kvc[l] + kvw * 2, .token_stride = 2 * kvw, .head_stride = hd},
      .o = {.data = d->o}, .workspace = d->ws, .workspace_bytes = d->wsb};
}

void gpt_decoder_create(struct gpt_decoder *d, const struct gpt_model *m, int use_graph) {
  memset(d, 0, sizeof *d);
  const struct gpt_config *c = &m->c;
  d->m = m;
  d->use_graph = use_graph;
  int tp = m->tp.size > 1 ? m->tp.size : 1;
  d->heads = c->heads / tp, d->kv_heads = c->kv_heads / tp, d->ffn = c->ffn / tp;
  int L = c->layers, kv = d->kv_heads, hd = c->hidden / c->heads;
  int gated = c->act == GPT_SWIGLU || c->act == GPT_GEGLU;
  d->norm = gpt_xalloc((size_t)(2 * L + 1) * sizeof *d->norm);
  d->lin = gpt_xalloc((size_t)(4 * L + 1) * sizeof *d->lin);
  find_params(d, m);
  size_t H = (size_t)c->hidden, T = (size_t)c->seq, kvw = (size_t)kv * hd;
  d->kvc = gpt_xalloc((size_t)L * sizeof *d->kvc);
  for (int l = 0; l < L; l++) d->kvc[l] = gpt_dalloc(T * 2 * kvw * 2, NULL);
  d->qkv_w = (size_t)(d->heads + 2 * kv) * hd;
  d->f1_w = (gated ? 2 : 1) * (size_t)d->ffn;
  d->x = gpt_dalloc(H * 2, NULL);
  d->h = gpt_dalloc(H * 2, NULL);
  d->o = gpt_dalloc(H * 2, NULL);
  d->qkv = gpt_dalloc(d->qkv_w * 2, NULL);
  d->f1 = gpt_dalloc(d->f1_w * 2, NULL);
  d->a = gpt_dalloc((size_t)d->ffn * 2, NULL);
  if (tp > 1) d->part = gpt_dalloc(H * 2, NULL);
  d->logits = gpt_dalloc((size_t)c->vocab * 2, NULL);
  d->meta = gpt_dalloc(32, NULL);
  static const int32_t init[6] = {0, 0, 0, 1, 0, 1};
  GPT_CHECK(tecore_memcpy(d->meta, (tecore_devptr_t)(uintptr_t)init, sizeof init));
  GPT_CHECK(tecore_mem_alloc_host(4 * sizeof(int32_t), (void **)&d->meta_host));
  /* a decode step keeps no softmax statistics (no backward): lse 0 */
  struct tecore_attention_args aa = attn_args(d, 0);
  GPT_CHECK(tecore_attention_workspace_size(&aa, 0, &d->wsb));
  d->ws = d->wsb ? gpt_dalloc(d->wsb, NULL) : 0;
}

void gpt_decoder_destroy(struct gpt_decoder *d) {
  if (d->graph) tegraph_graph_destroy(d->graph);
  for (int l = 0; l < d->m->c.layers; l++) GPT_CHECK(tecore_mem_free(d->kvc[l]));
  for (int i = 0; i < 4 * d->m->c.layers + 1; i++)
    if (d->lin[i].w16) GPT_CHECK(tecore_mem_free(d->lin[i].w16));
  tecore_devptr_t b[] = {d->x, d->h, d->o, d->qkv, d->f1, d->a, d->logits, d->meta, d->ws,
                         d->part};
  for (size_t i = 0; i < sizeof b / sizeof b[0]; i++)
    if (b[i]) GPT_CHECK(tecore_mem_free(b[i]));
  if (d->meta_host) GPT_CHECK(tecore_mem_free_host(d->meta_host));
  free(d->kvc);
  free(d->norm);
  free(d->lin);
}

static void norm(const struct gpt_decoder *d, int i, tecore_devptr_t in, tecore_devptr_t out,
                 tecore_stream_t s) {
  size_t H = (size_t)d->m->c.hidden;
  struct tecore_tensor x = gpt_tensor2(TECORE_DTYPE_BF16, 1, H, in);
  struct tecore_tensor y = gpt_tensor2(TECORE_DTYPE_BF16, 1, H, out);
  if (d->norm[i].has_beta)
    GPT_CHECK(tecore_layernorm_fwd(&x, &d->norm[i].gamma, &d->norm[i].beta, 1e-5f, 0, &y, 0, 0, s));
  else
    GPT_CHECK(tecore_rmsnorm_fwd(&x, &d->norm[i].gamma, 1e-5f, 0, &y, 0, s));
}

/* out[1][n] (=|+=) in[1][k] W^T + b, W [n][k] */
static void linear(const struct gpt_decoder *d, int i, tecore_devptr_t in, size_t k,
                   tecore_devptr_t out, size_t n, int add, tecore_stream_t s) {
  struct tecore_tensor x = gpt_tensor2(TECORE_DTYPE_BF16, 1, k, in);
  struct tecore_tensor y = gpt_tensor2(TECORE_DTYPE_BF16, 1, n, out);
  struct tecore_gemm_opts go = {.epilogue = d->lin[i].has_b ? TECORE_GEMM_EPI_BIAS
                                                             : TECORE_GEMM_EPI_NONE,
                                .bias = d->lin[i].has_b ? &d->lin[i].b : NULL};
  GPT_CHECK(tecore_gemm(&x, TECORE_GEMM_N, &d->lin[i].w, TECORE_GEMM_T, &y, 1.0f,
                        add ? 1.0f : 0.0f, &go, s));
}

/* x += in[1][k] W^T + b of Linear i, a row-parallel one under --tp: its
 * partial sums (the bias on rank 0 alone) summed over the ranks first */
static void residual_linear(const struct gpt_decoder *d, int i, tecore_devptr_t in, size_t k,
                            tecore_stream_t s) {
  const struct gpt_model *m = d->m;
  size_t H = (size_t)m->c.hidden;
  if (!d->part) {
    linear(d, i, in, k, d->x, H, 1, s);
    return;
  }
  linear(d, i, in, k, d->part, H, 0, s);
  tecomm_result_t r = tecomm_allreduce((tecomm_comm_t)m->tp.comm, d->part, d->part, H,
                                       TECORE_DTYPE_BF16, TECOMM_SUM, s);
  if (r != TECOMM_SUCCESS) {
    GPT_ERR("--tp: the decode step's sum: %s (%s)", tecomm_strerror(r), tecomm_last_error());
    exit(1);
  }
  GPT_CHECK(tecore_scale_add(d->x, d->x, 1.0f, d->part, 1.0f, TECORE_DTYPE_BF16, H, s));
}

static void attend(struct gpt_decoder *d, int l, tecore_stream_t s) {
  const struct gpt_config *c = &d->m->c;
  size_t hd = (size_t)(c->hidden / c->heads), kvw = (size_t)d->kv_heads * hd;
  tecore_devptr_t q = d->qkv, k = q + (size_t)d->heads * hd * 2;
  if (c->rope) {
    struct tecore_rope_view qv = {q, d->qkv_w, hd}, kvv = {k, d->qkv_w, hd};
    struct tecore_rope_args ra = {.dtype = TECORE_DTYPE_BF16, .tokens = 1, .q_heads = d->heads,
                                  .k_heads = d->kv_heads, .head_dim = (int)hd,
                                  .style = TECORE_ROPE_HALVES, .theta = c->rope_theta,
                                  .positions = d->meta + 4,
                                  .q_in = qv, .q_out = qv, .k_in = kvv, .k_out = kvv};
    GPT_CHECK(tecore_rope_fwd(&ra, s));
  }
  /* the key and value (adjacent in the QKV output) into cache row pos */
  struct tecore_tensor kv = gpt_tensor2(TECORE_DTYPE_BF16, 1, 2 * kvw, k);
  struct tecore_tensor cache = gpt_tensor2(TECORE_DTYPE_BF16, (size_t)c->seq, 2 * kvw, d->kvc[l]);
  GPT_CHECK(tecore_embedding_store(&kv, d->meta + 4, &cache, NULL, s));
  struct tecore_attention_args aa = attn_args(d, l);
  GPT_CHECK(tecore_attention_fwd(&aa, s));
}

/* The step's work, from d->meta's token and position to d->logits. */
static void queue_step(struct gpt_decoder *d, tecore_stream_t s) {
  const struct gpt_model *m = d->m;
  const struct gpt_config *c = &m->c;
  size_t H = (size_t)c->hidden;
  struct tecore_tensor tok = gpt_tensor2(TECORE_DTYPE_F32, (size_t)c->vocab, H, m->tok), pt;
  if (!c->rope) pt = gpt_tensor2(TECORE_DTYPE_F32, (size_t)c->seq, H, m->pos);
  struct tecore_embedding_args ea = {.weight = &tok, .pos_weight = c->rope ? NULL : &pt,
                                     .ids = d->meta, .tokens = 1,
                                     .positions = c->rope ? 0 : d->meta + 4};
  struct tecore_tensor x = gpt_tensor2(TECORE_DTYPE_BF16, 1, H, d->x);
  GPT_CHECK(tecore_embedding_fwd(&ea, &x, s));
  static const tecore_activation_t acts[] = {TECORE_ACT_GELU, TECORE_ACT_SWIGLU,
                                             TECORE_ACT_GEGLU, TECORE_ACT_RELU};
  size_t ow = (size_t)d->heads * (H / (size_t)c->heads);   /* the attention's output */
  for (int l = 0; l < c->layers; l++) {
    norm(d, 2 * l, d->x, d->h, s);
    linear(d, 4 * l, d->h, H, d->qkv, d->qkv_w, 0, s);
    attend(d, l, s);
    residual_linear(d, 4 * l + 1, d->o, ow, s);
    norm(d, 2 * l + 1, d->x, d->h, s);
    linear(d, 4 * l + 2, d->h, H, d->f1, d->f1_w, 0, s);
    struct tecore_tensor fi = gpt_tensor2(TECORE_DTYPE_BF16, 1, d->f1_w, d->f1);
    struct tecore_tensor fo = gpt_tensor2(TECORE_DTYPE_BF16, 1, (size_t)d->ffn, d->a);
    GPT_CHECK(tecore_act_fwd(acts[c->act], &fi, &fo, 0, s));
    residual_linear(d, 4 * l + 3, d->a, (size_t)d->ffn, s);
  }
  norm(d, 2 * c->layers, d->x, d->h, s);
  linear(d, 4 * c->layers, d->h, H, d->logits, (size_t)c->vocab, 0, s);
}

void gpt_decode_step(struct gpt_decoder *d, int token, int pos, tecore_stream_t s) {
  /* the staging is free again once the last step's copy ran */
  GPT_CHECK(tecore_stream_synchronize(s));
  d->meta_host[0] = token, d->meta_host[1] = pos, d->meta_host[2] = 0, d->meta_host[3] = pos + 1;
  GPT_CHECK(tecore_memcpy_async(d->meta, (tecore_devptr_t)(uintptr_t)d->meta_host,
                                4 * sizeof(int32_t), s));
  if (d->use_graph && !d->graph && d->steps > 0) {
    /* captured after one eager step: lazy choices (GEMM algorithms and
     * workspaces) happen outside the capture */
    GPT_GCHECK(tegraph_graph_create(TEGRAPH_INSTANTIATE_UPLOAD, &d->graph));
    GPT_GCHECK(tegraph_graph_begin_capture(d->graph, s, TECORE_CAPTURE_THREAD_LOCAL, 0));
    queue_step(d, s);
    GPT_GCHECK(tegraph_graph_end_capture(d->graph, NULL));
    GPT_GCHECK(tegraph_graph_instantiate(d->graph, s));
  }
  if (d->graph) GPT_GCHECK(tegraph_graph_launch(d->graph, s));
  else queue_step(d, s);
  d->steps++;
}
