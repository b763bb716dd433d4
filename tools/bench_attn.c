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
 * names it.  vdev takes one tiny shape (its figures are not speed).
 *
 * Every buffer holds its own random data (a seed each).
 *
 * E4M3 forward: Q, K, V quantized from the BF16 forward's inputs with
 * current scaling (tecore_quantize, a scale per tensor from its amax, not
 * a power of two), causal, two rows: O in BF16 (on Hopper cuDNN writes
 * E4M3 that a kernel widens), and O in E4M3 at half V's scale (what the
 * fuser's attention+quantize takes; dequantized for the error); TFLOP/s
 * counted as the BF16 forward's.  Its row gives the speed-up over the
 * BF16 forward of the same shape in this run (issue 29's target: >= 1.3x
 * at 4 16 8192 128) and the error max |O8 - O16| / max |O16| against that
 * forward's O (P and O pass through E4M3: a few percent, te/attention.h),
 * with max |O8| and max |O16| beside it (a wrong scale shows there). */
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

/* The row's time in ms (<= 0: not measured). */
static double attn_row(struct tb_ctx *c, struct attn_arg *x, const char *what,
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
    return ms;
  }
  snprintf(note, sizeof note, "peer: bench/attn_peer.py in the same call; floor: bf16 gemm %.0f "
           "TFLOP/s", gemm_tf);
  struct tb_row r = {.name = name, .shape = shape, .time = ms,
                     .rate = flops / (ms * 1e-3) / 1e12, .rate_unit = "TFLOP/s",
                     .peer = gemm_tf > 0 ? "same FLOPs at the bf16 GEMM rate" : NULL,
                     .peer_time = gemm_tf > 0 ? flops / (gemm_tf * 1e12) * 1e3 : 0,
                     .note = note};
  tb_row(c, &r);
  return ms;
}

/* max |a - b|, max |a| and max |b| over n BF16 elements: the error and
 * what tells a wrong scale (|a| far from |b|) from noise. */
struct rel_err {
  float diff, a, b;
};

/* *e of a against b (scratch: n BF16 and 3 floats on the device). */
static tecore_result_t rel_err(struct tb_ctx *c, tecore_devptr_t a, tecore_devptr_t b, size_t n,
                               tecore_devptr_t scratch, tecore_devptr_t am, struct rel_err *e) {
  struct tecore_tensor t;
  size_t shape[1] = {n};
  float h[3] = {0, 0, 0};
  tecore_result_t r = tecore_scale_add(scratch, a, 1.0f, b, -1.0f, TECORE_DTYPE_BF16, n, c->s);
  if (r == TECORE_SUCCESS) r = tecore_tensor_init(&t, TECORE_DTYPE_BF16, 1, shape, scratch);
  if (r == TECORE_SUCCESS) r = tecore_amax(&t, am, 0, 0, c->s);
  if (r == TECORE_SUCCESS) t.data = a, r = tecore_amax(&t, am + 4, 0, 0, c->s);
  if (r == TECORE_SUCCESS) t.data = b, r = tecore_amax(&t, am + 8, 0, 0, c->s);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(c->s);
  if (r == TECORE_SUCCESS) r = tecore_memcpy((tecore_devptr_t)(uintptr_t)h, am, sizeof h);
  *e = (struct rel_err){h[0], h[1], h[2]};
  return r;
}

/* E4M3 copies of q, k, v (one buffer of 3 n bytes) with current scaling:
 * sc holds amax, scale, scale_inv of each (9 floats; the scale_inv at 8,
 * 20 and 32 bytes: only 4-byte aligned, which te/attention.h allows). */
static tecore_result_t quantize_qkv(struct tb_ctx *c, const tecore_devptr_t in[3], size_t n,
                                    tecore_devptr_t q8, tecore_devptr_t sc) {
  size_t shape[1] = {n};
  for (int i = 0; i < 3; i++) {
    struct tecore_tensor a, o;
    TB_CHECK(tecore_tensor_init(&a, TECORE_DTYPE_BF16, 1, shape, in[i]));
    TB_CHECK(tecore_tensor_init(&o, TECORE_DTYPE_E4M3, 1, shape, q8 + (size_t)i * n));
    o.scaling = TECORE_SCALING_CURRENT;
    o.amax = sc + 12 * (size_t)i, o.scale = o.amax + 4, o.scale_inv = o.amax + 8;
    TB_CHECK(tecore_quantize(&a, &o, 0, c->s));
  }
  return TECORE_SUCCESS;
}

/* O of an E4M3 forward as BF16 in out: a BF16/F16 O as it is; an E4M3 O
 * dequantized with the scale_inv the forward wrote. */
static tecore_result_t o_as_bf16(struct tb_ctx *c, const struct attn_arg *f, size_t n,
                                 tecore_devptr_t *out, tecore_devptr_t scratch) {
  if (f->a.o_dtype != TECORE_DTYPE_E4M3) {
    *out = f->a.o.data;
    return TECORE_SUCCESS;
  }
  struct tecore_tensor a, b;
  size_t shape[1] = {n};
  TB_CHECK(tecore_tensor_init(&a, TECORE_DTYPE_E4M3, 1, shape, f->a.o.data));
  a.scaling = TECORE_SCALING_DELAYED, a.scale_inv = f->a.o.scale_inv;
  TB_CHECK(tecore_tensor_init(&b, TECORE_DTYPE_BF16, 1, shape, scratch));
  TB_CHECK(tecore_dequantize(&a, &b, c->s));
  *out = scratch;
  return TECORE_SUCCESS;
}

/* The E4M3 forward of x's problem beside its BF16 forward (bf16_ms, O in
 * x->a.o), O in o_dt (BF16, or E4M3 at half V's scale); needs 3 n + 6 n
 * bytes and a workspace of its own. */
static void attn_fp8_row(struct tb_ctx *c, const struct attn_arg *x, const struct attn_shape *sh,
                         double flops, double bf16_ms, tecore_dtype_t o_dt) {
  size_t n = sh->b * sh->s * sh->h * sh->d, wbytes = 0;
  tecore_devptr_t q8 = 0, o8 = 0, diff = 0, deq = 0, sc = 0, ws = 0;
  struct attn_arg f = {.a = x->a};
  if (tecore_mem_alloc(3 * n, &q8) != TECORE_SUCCESS ||
      tecore_mem_alloc(2 * n, &o8) != TECORE_SUCCESS ||
      tecore_mem_alloc(2 * n, &diff) != TECORE_SUCCESS ||
      tecore_mem_alloc(2 * n, &deq) != TECORE_SUCCESS ||
      tecore_mem_alloc(256, &sc) != TECORE_SUCCESS) {
    tb_info(c, "attention fwd e4m3: no memory for the E4M3 copies: %s", tecore_last_error());
    goto out;
  }
  /* recycled memory: o.amax and s_amax are max-accumulated, so they start
   * at 0 (the rest of sc is written before it is read) */
  if (tecore_memset_d32_async(sc, 0, 64, c->s) != TECORE_SUCCESS) {
    tb_info(c, "attention fwd e4m3: %s", tecore_last_error());
    c->failed = 1;
    goto out;
  }
  const tecore_devptr_t in[3] = {x->a.q.data, x->a.k.data, x->a.v.data};
  if (quantize_qkv(c, in, n, q8, sc) != TECORE_SUCCESS) {
    tb_info(c, "attention fwd e4m3: quantize: %s", tecore_last_error());
    c->failed = 1;
    goto out;
  }
  f.a.dtype = TECORE_DTYPE_E4M3, f.a.o_dtype = o_dt;
  f.a.q = (struct tecore_attn_view){.data = q8, .scale_inv = sc + 8};
  f.a.k = (struct tecore_attn_view){.data = q8 + n, .scale_inv = sc + 20};
  f.a.v = (struct tecore_attn_view){.data = q8 + 2 * n, .scale_inv = sc + 32};
  f.a.o = (struct tecore_attn_view){.data = o8, .amax = sc + 48};
  f.a.s_amax = sc + 52;
  if (o_dt == TECORE_DTYPE_E4M3) { /* |O| <= max |V|: half V's scale keeps O * scale <= 224 */
    float vs[3];
    if (tecore_stream_synchronize(c->s) != TECORE_SUCCESS ||
        tecore_memcpy((tecore_devptr_t)(uintptr_t)vs, sc + 24, sizeof vs) != TECORE_SUCCESS)
      goto out;
    float os = 0.5f * vs[1];
    if (tecore_memcpy(sc + 56, (tecore_devptr_t)(uintptr_t)&os, sizeof os) != TECORE_SUCCESS)
      goto out;
    f.a.o.scale = sc + 56, f.a.o.scale_inv = sc + 60;
  }
  if (tecore_attention_workspace_size(&f.a, 0, &wbytes) == TECORE_SUCCESS && wbytes &&
      tecore_mem_alloc(wbytes, &ws) != TECORE_SUCCESS)
    goto out;
  f.a.workspace = ws, f.a.workspace_bytes = wbytes;
  char desc[512], be[32] = "none", name[96], shape[64], note[256];
  if (tecore_attention_describe(&f.a, 0, desc, sizeof desc) != TECORE_SUCCESS)
    snprintf(desc, sizeof desc, "backend ?");
  (void)sscanf(desc, "backend %31s", be);
  snprintf(name, sizeof name, "attention fwd e4m3%s (%s)",
           o_dt == TECORE_DTYPE_E4M3 ? " O e4m3" : "", be);
  snprintf(shape, sizeof shape, "B%zu H%zu S%zu D%zu e4m3 causal", sh->b, sh->h, sh->s, sh->d);
  if (!strcmp(be, "none")) {   /* refused by every allowed backend: a note, not a failure */
    tb_info(c, "%s: %s", name, desc);
    goto out;
  }
  double ms = tb_time(c, attn_body, &f);
  if (ms <= 0) {
    tb_info(c, "%s: %s", name, desc);
    goto out;
  }
  tecore_devptr_t o16 = 0;
  struct rel_err e = {-1, -1, -1};
  if (o_as_bf16(c, &f, n, &o16, deq) != TECORE_SUCCESS ||
      rel_err(c, o16, x->a.o.data, n, diff, sc + 64, &e) != TECORE_SUCCESS) {
    tb_info(c, "attention fwd e4m3: error against bf16: %s", tecore_last_error());
    c->failed = 1;
  }
  snprintf(note, sizeof note, "O %s; vs the bf16 fwd's O: max|diff|/max|O| = %.4f "
           "(max|O| %.3g e4m3, %.3g bf16)", o_dt == TECORE_DTYPE_E4M3 ? "e4m3 (dequantized)" : "bf16",
           e.b > 0 ? (double)e.diff / e.b : -1.0, (double)e.a, (double)e.b);
  int judged = c->speed && sh->b == 4 && sh->s == 8192 && bf16_ms > 0;
  struct tb_row r = {.name = name, .shape = shape, .time = ms,
                     .rate = flops / (ms * 1e-3) / 1e12, .rate_unit = "TFLOP/s",
                     .peer = bf16_ms > 0 ? "the bf16 fwd of this run" : NULL,
                     .peer_time = bf16_ms, .target = judged ? ">= 1.3x bf16 fwd" : NULL,
                     .met = judged && bf16_ms / ms >= 1.3, .note = note};
  tb_row(c, &r);
out:;
  tecore_devptr_t all[] = {q8, o8, diff, deq, sc, ws};
  for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
    if (all[i]) tecore_mem_free(all[i]);
}

static void attn_shape_rows(struct tb_ctx *c, const struct attn_shape *sh, double gemm_tf) {
  size_t T = sh->b * sh->s, n = T * sh->h * sh->d;
  /* a seed each: tb_alloc_random's values depend on the count alone, so Q,
   * K and V (and every other buffer of n) held the same data */
  const tecore_dtype_t B = TECORE_DTYPE_BF16;
  tecore_devptr_t q = tb_alloc_random_seeded(c, n, B, 1);
  tecore_devptr_t k = tb_alloc_random_seeded(c, n, B, 2);
  tecore_devptr_t v = tb_alloc_random_seeded(c, n, B, 3);
  tecore_devptr_t o = tb_alloc_random_seeded(c, n, B, 4);
  tecore_devptr_t dout = tb_alloc_random_seeded(c, n, B, 5);
  tecore_devptr_t dq = tb_alloc_random_seeded(c, n, B, 6);
  tecore_devptr_t dk = tb_alloc_random_seeded(c, n, B, 7);
  tecore_devptr_t dv = tb_alloc_random_seeded(c, n, B, 8);
  tecore_devptr_t lse = tb_alloc_random_seeded(c, T * sh->h, TECORE_DTYPE_F32, 9), ws = 0;
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
  double fwd_ms = attn_row(c, &x, "fwd", sh, fwd_flops, gemm_tf);
  x.bwd = 1;
  attn_row(c, &x, "fwd+bwd", sh, 3.5 * fwd_flops, gemm_tf);
  /* O of the BF16 forward again (the backward leaves it as it was), then
   * the E4M3 forward beside it */
  x.bwd = 0;
  if (tecore_attention_fwd(&x.a, c->s) == TECORE_SUCCESS) {
    attn_fp8_row(c, &x, sh, fwd_flops, fwd_ms, TECORE_DTYPE_BF16);
    attn_fp8_row(c, &x, sh, fwd_flops, fwd_ms, TECORE_DTYPE_E4M3);
  }
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
             "floor: the same FLOPs at the BF16 GEMM rate of this run; fwd e4m3: Q, K, V in "
             "E4M3 (current scaling), O bf16, then O e4m3");
  double gemm_tf = gemm_rate(c);
  const struct attn_shape *list = c->speed ? gpu : tiny;
  size_t n = c->speed ? sizeof gpu / sizeof gpu[0] : 1;
  for (size_t i = 0; i < n; i++) attn_shape_rows(c, &list[i], gemm_tf);
}
