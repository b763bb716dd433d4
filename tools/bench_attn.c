/* SPDX-License-Identifier: Apache-2.0 */
/* bench_attn.c -- te-bench's attention rows: BF16 causal attention,
 * forward and forward + backward, on the shapes (batch, heads, sequence,
 * head dim) 16 16 2048 128, 4 16 8192 128 and 32 12 1024 64, with Q, K, V
 * and O as separate [tokens][heads][dim] tensors.  TFLOP/s count
 * 2 * 2 * B * H * S^2 * D / 2 for a causal forward and 3.5 times that for
 * forward + backward.  The floor beside each figure is the same FLOPs at
 * the BF16 GEMM rate measured in the same run (tecore_gemm, 4096^3);
 * PyTorch's scaled_dot_product_attention is the peer, measured in the same
 * GPU call by bench/attn_peer.py.  The backend is the one the library
 * picks (TECORE_ATTN_BACKEND: run te-bench once per backend); the row
 * names it.  vdev takes one tiny shape (its figures are not speed). */
#include "bench.h"
#include <math.h>
#include <stdio.h>
#include <string.h>

struct attn_arg {
  struct tecore_attention_args a;
  int bwd;
};

static tecore_result_t attn_body(struct tb_ctx *c, void *p) {
  struct attn_arg *x = p;
  tecore_result_t r = tecore_attention_fwd(&x->a, c->s);
  if (r == TECORE_SUCCESS && x->bwd) r = tecore_attention_bwd(&x->a, c->s);
  return r;
}

struct gemm_arg {
  struct tecore_tensor a, b, d;
};
static tecore_result_t gemm_body(struct tb_ctx *c, void *p) {
  struct gemm_arg *g = p;
  return tecore_gemm(&g->a, TECORE_GEMM_N, &g->b, TECORE_GEMM_T, &g->d, 1.0f, 0.0f, NULL,
                     c->s);
}

/* TFLOP/s of a 4096^3 BF16 GEMM (0 when it could not run). */
static double gemm_rate(struct tb_ctx *c) {
  size_t n = c->speed ? 4096 : 128, s[2] = {n, n};
  tecore_devptr_t a = tb_alloc_random(c, n * n, TECORE_DTYPE_BF16);
  tecore_devptr_t b = tb_alloc_random(c, n * n, TECORE_DTYPE_BF16);
  tecore_devptr_t d = tb_alloc_random(c, n * n, TECORE_DTYPE_BF16);
  double tf = 0;
  if (a && b && d) {
    struct gemm_arg g;
    tecore_tensor_init(&g.a, TECORE_DTYPE_BF16, 2, s, a);
    tecore_tensor_init(&g.b, TECORE_DTYPE_BF16, 2, s, b);
    tecore_tensor_init(&g.d, TECORE_DTYPE_BF16, 2, s, d);
    double ms = tb_time(c, gemm_body, &g);
    if (ms > 0) tf = 2.0 * n * n * n / (ms * 1e-3) / 1e12;
  }
  if (a) tecore_mem_free(a);
  if (b) tecore_mem_free(b);
  if (d) tecore_mem_free(d);
  return tf;
}

struct attn_shape {
  size_t b, h, s, d;
};

static void attn_row(struct tb_ctx *c, struct attn_arg *x, const char *what,
                     const struct attn_shape *sh, double flops, double gemm_tf) {
  char desc[512], name[96], shape[64], note[128];
  if (tecore_attention_describe(&x->a, x->bwd, desc, sizeof desc) != TECORE_SUCCESS)
    snprintf(desc, sizeof desc, "backend ?");
  /* "backend NAME (...)": the name alone */
  char be[32] = "?";
  if (sscanf(desc, "backend %31s", be) != 1) snprintf(be, sizeof be, "none");
  snprintf(name, sizeof name, "attention %s (%s)", what, be);
  snprintf(shape, sizeof shape, "B%zu H%zu S%zu D%zu bf16 causal", sh->b, sh->h, sh->s, sh->d);
  double ms = tb_time(c, attn_body, x);
  if (ms <= 0) {
    tb_info(c, "%s: %s", name, desc);
    return;
  }
  snprintf(note, sizeof note, "peer: bench/attn_peer.py in the same call; floor: bf16 gemm %.0f "
           "TFLOP/s", gemm_tf);
  struct tb_row r = {.name = name, .shape = shape, .time = ms,
                     .rate = flops / (ms * 1e-3) / 1e12, .rate_unit = "TFLOP/s",
                     .peer = gemm_tf > 0 ? "same FLOPs at the bf16 GEMM rate" : NULL,
                     .peer_time = gemm_tf > 0 ? flops / (gemm_tf * 1e12) * 1e3 : 0,
                     .note = note};
  tb_row(c, &r);
}

static void attn_shape_rows(struct tb_ctx *c, const struct attn_shape *sh, double gemm_tf) {
  size_t T = sh->b * sh->s, n = T * sh->h * sh->d;
  tecore_devptr_t q = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t k = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t v = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t o = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t dout = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t dq = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t dk = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t dv = tb_alloc_random(c, n, TECORE_DTYPE_BF16);
  tecore_devptr_t lse = tb_alloc_random(c, T * sh->h, TECORE_DTYPE_F32), ws = 0;
  if (!q || !k || !v || !o || !dout || !dq || !dk || !dv || !lse) goto out;
  /* inputs of a realistic scale: random in [-2, 2) divided down so the
   * softmax is not one-hot (1/sqrt(d) keeps scores O(1)) */
  struct attn_arg x = {.a = {.batch = sh->b, .max_seqlen_q = sh->s, .max_seqlen_kv = sh->s,
                             .heads = (int)sh->h, .kv_heads = (int)sh->h, .head_dim = (int)sh->d,
                             .scale = 0.25f / sqrtf((float)sh->d), .flags = TECORE_ATTN_CAUSAL,
                             .dtype = TECORE_DTYPE_BF16, .o_dtype = TECORE_DTYPE_BF16,
                             .q = {.data = q}, .k = {.data = k}, .v = {.data = v},
                             .o = {.data = o}, .lse = lse, .d_o = {.data = dout},
                             .dq = {.data = dq}, .dk = {.data = dk}, .dv = {.data = dv}}};
  size_t wf = 0, wb = 0;
  if (tecore_attention_workspace_size(&x.a, 0, &wf) != TECORE_SUCCESS ||
      tecore_attention_workspace_size(&x.a, 1, &wb) != TECORE_SUCCESS) {
    tb_info(c, "attention: workspace size: %s", tecore_last_error());
    c->failed = 1;
    goto out;
  }
  size_t wbytes = wf > wb ? wf : wb;
  if (wbytes && tecore_mem_alloc(wbytes, &ws) != TECORE_SUCCESS) goto out;
  x.a.workspace = ws;
  x.a.workspace_bytes = wbytes;
  double fwd_flops = 2.0 * 2.0 * sh->b * sh->h * (double)sh->s * sh->s * sh->d / 2.0;
  attn_row(c, &x, "fwd", sh, fwd_flops, gemm_tf);
  x.bwd = 1;
  attn_row(c, &x, "fwd+bwd", sh, 3.5 * fwd_flops, gemm_tf);
out:
  if (ws) tecore_mem_free(ws);
  tecore_devptr_t all[] = {q, k, v, o, dout, dq, dk, dv, lse};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) tecore_mem_free(all[i]);
}

void tb_attention(struct tb_ctx *c) {
  static const struct attn_shape gpu[] = {{16, 16, 2048, 128}, {4, 16, 8192, 128},
                                          {32, 12, 1024, 64}};
  static const struct attn_shape tiny[] = {{2, 2, 64, 64}};
  c->section = "attention";
  tb_info(c, "attention: BF16 causal, TFLOP/s as 2*2*B*H*S^2*D/2 (fwd) and 3.5x (fwd+bwd); "
             "floor: the same FLOPs at the BF16 GEMM rate of this run");
  double gemm_tf = gemm_rate(c);
  const struct attn_shape *list = c->speed ? gpu : tiny;
  size_t n = c->speed ? sizeof gpu / sizeof gpu[0] : 1;
  for (size_t i = 0; i < n; i++) attn_shape_rows(c, &list[i], gemm_tf);
}
