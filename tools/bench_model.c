/* SPDX-License-Identifier: Apache-2.0 */
/* bench_model.c -- te-bench's model-parts rows: RoPE (in place on the Q
 * and K of a packed BF16 QKV), token-embedding backward (BF16 dy into F32
 * dW), cross-entropy forward and backward (BF16 logits) and LayerNorm's
 * backward with a residual gradient (GPT-2's 32768 x 768 BF16), each as
 * a fraction of the copy floor for the bytes it must move.  On a GPU the
 * shapes are 8192 tokens (Llama-like 32 + 8 + 8 heads of 128; hidden
 * 4096; vocabulary 50304); vdev takes 256 tokens (its figures are not
 * speed). */
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>

struct rope_arg {
  struct tecore_rope_args a;
};
static tecore_result_t rope_body(struct tb_ctx *c, void *p) {
  return tecore_rope_fwd(&((struct rope_arg *)p)->a, c->s);
}

struct emb_arg {
  struct tecore_embedding_args a;
  struct tecore_tensor dy, dw;
};
static tecore_result_t emb_body(struct tb_ctx *c, void *p) {
  struct emb_arg *e = p;
  return tecore_embedding_bwd(&e->a, &e->dy, &e->dw, NULL, c->s);
}

struct xent_arg {
  struct tecore_xent_args a;
  tecore_devptr_t out;
  int bwd;
};
static tecore_result_t xent_body(struct tb_ctx *c, void *p) {
  struct xent_arg *x = p;
  tecore_devptr_t o = x->out;
  size_t T = x->a.logits->shape[0];
  if (!x->bwd) return tecore_xent_fwd(&x->a, o, o + 4 * T, o + 8 * T + 16, c->s);
  if (x->bwd == 2) return tecore_xent_fwd_bwd(&x->a, o, o + 4 * T, 0, o + 8 * T, 0, c->s);
  return tecore_xent_bwd(&x->a, o + 4 * T, o + 8 * T, 0, 0, c->s);
}

static void model_rope(struct tb_ctx *c, size_t T) {
  int H = 32, Hk = 8, D = 128, W = H + 2 * Hk;
  tecore_devptr_t qkv = tb_alloc_random(c, T * W * D, TECORE_DTYPE_BF16);
  if (!qkv) return;
  size_t ts = (size_t)W * D;
  struct rope_arg r = {{.dtype = TECORE_DTYPE_BF16, .tokens = T, .q_heads = H, .k_heads = Hk,
                        .head_dim = D, .seq_len = 4096, .q_in = {qkv, ts, D},
                        .q_out = {qkv, ts, D}, .k_in = {qkv + (size_t)H * D * 2, ts, D},
                        .k_out = {qkv + (size_t)H * D * 2, ts, D}}};
  char shape[64];
  snprintf(shape, sizeof shape, "%zux(%d+%d)x%d bf16", T, H, Hk, D);
  /* Q and K read and written once */
  tb_report(c, "rope fwd in place", shape, tb_time(c, rope_body, &r),
            2.0 * T * (H + Hk) * D * 2, 85);
  tecore_mem_free(qkv);
}

static void model_embedding(struct tb_ctx *c, size_t T) {
  size_t V = 50304, Hd = 4096;
  tecore_devptr_t dy = tb_alloc_random(c, T * Hd, TECORE_DTYPE_BF16);
  tecore_devptr_t dw = tb_alloc_random(c, V * Hd, TECORE_DTYPE_F32), ids = 0;
  int32_t *h = malloc(T * 4);
  unsigned char *seen = calloc(V, 1);
  size_t uniq = 0;
  uint64_t x = 88172645463325252ull;
  for (size_t t = 0; t < T; t++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    h[t] = (int32_t)(x % V);
    uniq += !seen[h[t]]++;
  }
  if (dy && dw && tecore_mem_alloc(T * 4, &ids) == TECORE_SUCCESS &&
      tecore_memcpy(ids, (tecore_devptr_t)(uintptr_t)h, T * 4) == TECORE_SUCCESS) {
    struct emb_arg e = {.a = {.ids = ids, .tokens = T}};
    size_t s1[2] = {T, Hd}, s2[2] = {V, Hd};
    tecore_tensor_init(&e.dy, TECORE_DTYPE_BF16, 2, s1, dy);
    tecore_tensor_init(&e.dw, TECORE_DTYPE_F32, 2, s2, dw);
    char shape[64];
    snprintf(shape, sizeof shape, "%zu ids, %zux%zu f32 dW", T, V, Hd);
    /* dy read; each named row of dW read and written; the ids */
    tb_report(c, "embedding bwd", shape, tb_time(c, emb_body, &e),
              (double)T * Hd * 2 + 2.0 * uniq * Hd * 4 + T * 4.0, 85);
  }
  if (ids) tecore_mem_free(ids);
  if (dy) tecore_mem_free(dy);
  if (dw) tecore_mem_free(dw);
  free(h);
  free(seen);
}

static void model_xent(struct tb_ctx *c, size_t T) {
  size_t V = 50304;
  tecore_devptr_t lg = tb_alloc_random(c, T * V, TECORE_DTYPE_BF16), lab = 0, out = 0;
  int32_t *h = malloc(T * 4);
  for (size_t t = 0; t < T; t++) h[t] = (int32_t)((t * 7919) % V);
  if (lg && tecore_mem_alloc(T * 4, &lab) == TECORE_SUCCESS &&
      tecore_mem_alloc(12 * T + 64, &out) == TECORE_SUCCESS &&
      tecore_memcpy(lab, (tecore_devptr_t)(uintptr_t)h, T * 4) == TECORE_SUCCESS &&
      tecore_memset_d32_async(out + 8 * T, 0x3f800000u, T, c->s) == TECORE_SUCCESS) {
    struct tecore_tensor t;
    size_t s[2] = {T, V};
    tecore_tensor_init(&t, TECORE_DTYPE_BF16, 2, s, lg);
    struct xent_arg x = {.a = {.logits = &t, .labels = lab, .ignore_index = -100}, .out = out};
    char shape[64];
    snprintf(shape, sizeof shape, "%zux%zu bf16", T, V);
    /* forward: the logits read once; backward: read and written (the
     * backward rewrites its own output: a steady state of the same cost) */
    tb_report(c, "xent fwd", shape, tb_time(c, xent_body, &x), (double)T * V * 2, 85);
    x.bwd = 1;
    double tb = tb_time(c, xent_body, &x);
    tb_report(c, "xent bwd in place", shape, tb, 2.0 * T * V * 2, 85);
    /* forward and backward in one pass (training): the same bytes as the
     * backward alone; the two calls' time beside it */
    x.bwd = 2;
    double t1 = tb_time(c, xent_body, &x);
    x.bwd = 0;
    double t0 = tb_time(c, xent_body, &x);
    tb_report(c, "xent fwd+bwd one pass", shape, t1, 2.0 * T * V * 2, 85);
    tb_info(c, "xent fwd+bwd: one pass %.3f ms, the two calls %.3f ms", t1, t0 + tb);
    x.bwd = 1;
    /* into an FP8 gradient (an LM head's, tecore_seq_grad_fp8): the logits
     * read, one byte an element written, delayed scale 1 */
    tecore_devptr_t y = 0, st = 0;
    if (tecore_mem_alloc(T * V, &y) == TECORE_SUCCESS &&
        tecore_mem_alloc(16, &st) == TECORE_SUCCESS &&
        tecore_memset_d32_async(st, 0x3f800000u, 1, c->s) == TECORE_SUCCESS &&
        tecore_memset_d32_async(st + 4, 0, 3, c->s) == TECORE_SUCCESS) {
      struct tecore_tensor yt;
      tecore_tensor_init(&yt, TECORE_DTYPE_E5M2, 2, s, y);
      yt.scaling = TECORE_SCALING_DELAYED;
      yt.scale = st;
      yt.scale_inv = st + 4;
      yt.amax = st + 8;
      x.a.dlogits = &yt;
      snprintf(shape, sizeof shape, "%zux%zu bf16->e5m2", T, V);
      tb_report(c, "xent bwd into fp8", shape, tb_time(c, xent_body, &x), (double)T * V * 3, 85);
      /* the codes over the logits themselves (te-gpt's LM head): the same
       * bytes, in log2(T / 64) + 1 launches and a copy of 64 rows through
       * the workspace (the logits' values no longer matter to the cost) */
      tecore_devptr_t ws = 0;
      if (tecore_mem_alloc(64 * V, &ws) == TECORE_SUCCESS) {
        yt.data = lg;
        x.a.workspace = ws;
        x.a.workspace_bytes = 64 * V;
        tb_report(c, "xent bwd fp8 in place", shape, tb_time(c, xent_body, &x),
                  (double)T * V * 3, 85);
        x.a.workspace = 0;
        x.a.workspace_bytes = 0;
        tecore_mem_free(ws);
      }
      x.a.dlogits = NULL;
    }
    if (y) tecore_mem_free(y);
    if (st) tecore_mem_free(st);
  }
  if (lab) tecore_mem_free(lab);
  if (out) tecore_mem_free(out);
  if (lg) tecore_mem_free(lg);
  free(h);
}

struct norm_arg {
  struct tecore_tensor x, dy, gamma, extra, dx, dgamma, dbeta;
  tecore_devptr_t mu, rsigma, ws;
  size_t ws_bytes;
};
static tecore_result_t norm_body(struct tb_ctx *c, void *p) {
  struct norm_arg *n = p;
  return tecore_layernorm_bwd_add(&n->dy, &n->x, n->mu, n->rsigma, &n->gamma, &n->extra, 0,
                                  &n->dx, &n->dgamma, &n->dbeta, n->ws, n->ws_bytes, c->s);
}

/* LayerNorm's backward with the residual branch's gradient added (a
 * pre-norm block's), BF16 rows of GPT-2's hidden 768: x, dy and the extra
 * gradient read, dx written. */
static void model_norm(struct tb_ctx *c, size_t R, size_t H) {
  struct norm_arg n = {0};
  tecore_devptr_t x = tb_alloc_random(c, R * H, TECORE_DTYPE_BF16),
                  dy = tb_alloc_random(c, R * H, TECORE_DTYPE_BF16),
                  ex = tb_alloc_random(c, R * H, TECORE_DTYPE_BF16),
                  dx = tb_alloc_random(c, R * H, TECORE_DTYPE_BF16),
                  g = tb_alloc_random(c, 3 * H, TECORE_DTYPE_F32),
                  stats = tb_alloc_random(c, 2 * R, TECORE_DTYPE_F32),
                  gb = tb_alloc_random(c, H, TECORE_DTYPE_BF16);
  if (x && dy && ex && dx && g && stats && gb &&
      tecore_norm_bwd_workspace_size(TECORE_NORM_LAYERNORM, R, H, &n.ws_bytes) == TECORE_SUCCESS &&
      tecore_mem_alloc(n.ws_bytes, &n.ws) == TECORE_SUCCESS) {
    size_t rh[2] = {R, H}, h1[1] = {H};
    tecore_tensor_init(&n.x, TECORE_DTYPE_BF16, 2, rh, x);
    tecore_tensor_init(&n.dy, TECORE_DTYPE_BF16, 2, rh, dy);
    tecore_tensor_init(&n.extra, TECORE_DTYPE_BF16, 2, rh, ex);
    tecore_tensor_init(&n.dx, TECORE_DTYPE_BF16, 2, rh, dx);
    tecore_tensor_init(&n.gamma, TECORE_DTYPE_BF16, 1, h1, gb);
    tecore_tensor_init(&n.dgamma, TECORE_DTYPE_F32, 1, h1, g);
    tecore_tensor_init(&n.dbeta, TECORE_DTYPE_F32, 1, h1, g + 4 * H);
    n.mu = stats, n.rsigma = stats + 4 * R;
    char shape[64];
    snprintf(shape, sizeof shape, "%zux%zu bf16 +extra", R, H);
    tb_report(c, "layernorm bwd", shape, tb_time(c, norm_body, &n), 8.0 * R * H, 85);
  }
  tecore_devptr_t bufs[8] = {x, dy, ex, dx, g, stats, gb, n.ws};
  for (int i = 0; i < 8; i++)
    if (bufs[i]) tecore_mem_free(bufs[i]);
}

void tb_model(struct tb_ctx *c) {
  size_t T = c->speed ? 8192 : 256;
  c->section = "model";
  tb_info(c, "model parts: RoPE, embedding backward, cross-entropy, LayerNorm backward; %% of "
             "the copy floor for the bytes each must move");
  model_rope(c, T);
  model_embedding(c, T);
  model_xent(c, T);
  model_norm(c, c->speed ? 32768 : 256, 768);
}
