/* SPDX-License-Identifier: Apache-2.0 */
/* check_attn_cudnn.c -- the cudnn row of the attention backends
 * (libtecore/attn/attn_cudnn.c), called directly with a struct
 * te_attn_problem (this suite links libtecore's objects, so the private row
 * is reachable):
 *   - on vdev it refuses, saying "vdev has no cuDNN", asks no workspace, and
 *     fwd/bwd fail with TECORE_ERR_NOT_SUPPORTED;
 *   - on cuda it refuses, with the reason, the E4M3 backward, E4M3 head
 *     dims not a multiple of 16, E4M3 with a window, E4M3 causal with more
 *     keys than queries,
 *     E4M3 without scale_inv, and variable lengths with no maximum length; where cuDNN loads, BF16 causal grouped-query
 *     attention on a packed QKV layout (b 2, heads 4 over 2 KV heads, s 128,
 *     d 64; b 1 s 96/160 causal with a window, forward and backward; and
 *     variable lengths from device cu_seqlens: 3 sequences of different
 *     lengths, causal GQA, and 3 with an empty one, more keys than
 *     queries and a window) runs forward and backward, checked against a
 *     float64 reference on fresh random inputs with poisoned outputs.
 *     Where cuDNN does not load the value checks print the reason and pass
 *     (the lead's H100 run sets TECORE_CUDNN_LIB);
 *   - on every device the row's helper kernels (kernels/attn_cudnn.cu, and
 *     their vdev twins): lengths and element offsets from cu_seqlens, and
 *     the statistics moved between cuDNN's padded [b][h][max_q] and lse
 *     [h][total_q] both ways, checked exactly (empty sequences, tokens past
 *     the last sequence left alone, rows that see no key: lse -inf and O
 *     zeros forward, -inf read back as 0);
 *   - the two steps around the E4M3 graph (constants and 16-byte aligned
 *     copies of the caller's scalars; amaxes folded, a staged O widened),
 *     exactly;
 *   - TECORE_CUDNN_LIB is registered in every build (te-info -e lists it).
 *
 * E4M3 forward (on cuda, where cuDNN loads; printed and passed where it
 * does not): Q, K, V quantized from [-1, 1] with scales 64, 32, 128, GQA
 * and MHA, 128 to 2048 tokens (long ones checked on a sample of rows),
 * head dims 64 and 128, causal and not, more keys than queries, O in
 * BF16 and F16 (staged through E4M3 on Hopper) and in E4M3 (scale 16),
 * against the float64 attention of the dequantized inputs; s_amax,
 * o.amax, o.scale_inv too.
 * Its tolerance, per element of O (see fp8_tol): P rounded to E4M3 at
 * scale 448 (2^-4 of sum_j p_j |v_j|, plus the subnormal half-step
 * 2^-10 / 448 of sum_j |v_j|), O rounded to E4M3 (2^-4 |o| plus its
 * subnormal half-step), BF16 O's own rounding (2^-8 |o|), float sums
 * (2^-12 of the magnitude).  It is the bound, not a fit: on vdev, which
 * rounds the same way, 200 seeds used at most 0.90 of it
 * (check_attention.c's fp8 cases); each row prints the share it used.
 *
 * Tolerances.  O: 2^-7 max|V| (P and O rounded to bf16); lse: 2^-9 of
 * 1 + |lse|; dQ, dK, dV: 2^-6 of the magnitude sum of their terms (dS and
 * P rounded to bf16 before the matmuls) + 2^-12. */
#include "config.h"
#include "tests.h"

#include <math.h>

#include "attn/attn_backend.h"
#include "attn/attn_cudnn_kern.h"
#ifdef TE_HAVE_CUDA
#define TE_T_BUILT_WITH_CUDA 1
#else
#define TE_T_BUILT_WITH_CUDA 0
#endif

static int on_cuda(void) { return te_backend_kind == TECORE_BACKEND_CUDA; }

/* A problem with every pointer 256-aligned and nonzero (not run on vdev). */
static struct te_attn_problem fake_problem(void) {
  struct te_attn_problem p = {0};
  p.batch = 2, p.fixed_seqlen_q = p.fixed_seqlen_kv = p.max_seqlen_q = p.max_seqlen_kv = 64;
  p.total_q = p.total_kv = 128;
  p.heads = p.kv_heads = 2, p.head_dim = 64;
  p.scale = 0.125f, p.causal = 1, p.window_left = -1;
  p.qkv_dtype = p.o_dtype = TECORE_DTYPE_BF16;
  struct te_attn_view v = {.ptr = 0x100000, .token_stride = 128, .head_stride = 64};
  p.q = p.k = p.v = p.o = p.d_o = p.dq = p.dk = p.dv = v;
  p.lse = 0x200000, p.cu_seqlens_q = p.cu_seqlens_kv = 0x300000;
  return p;
}

/* cuDNN 9.19's causal E4M3 forward wrote wrong O past 256 query tiles of
 * 128 rows on an H100 (B16 H8 S512; check_attn_fp8): such calls are
 * refused naming the limit; 256 tiles, no mask, or BF16 are not. */
START_TEST(fp8_causal_past_tile_limit_refused) {
  struct te_attn_problem p = fake_problem();
  char why[512] = "";
  p.qkv_dtype = TECORE_DTYPE_E4M3, p.causal = 1;
  p.batch = 16, p.heads = 8, p.max_seqlen_q = 512;
  ck_assert_int_eq(te_dnn_fp8_causal_fits(&p, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "512 query tiles") && strstr(why, "TECORE_CUDNN_FP8_CAUSAL_MAX_TILES"),
                "why: %s", why);
  p.batch = 4, p.max_seqlen_q = 1024;   /* 256 tiles: computed right */
  ck_assert_int_eq(te_dnn_fp8_causal_fits(&p, why, sizeof why), 1);
  p.max_seqlen_q = 1025;                /* a partial tile counts */
  ck_assert_int_eq(te_dnn_fp8_causal_fits(&p, why, sizeof why), 0);
  p.batch = 16, p.max_seqlen_q = 512, p.causal = 0;
  ck_assert_int_eq(te_dnn_fp8_causal_fits(&p, why, sizeof why), 1);
  p.causal = 1, p.qkv_dtype = TECORE_DTYPE_BF16;
  ck_assert_int_eq(te_dnn_fp8_causal_fits(&p, why, sizeof why), 1);
}
END_TEST

START_TEST(cudnn_refuses_on_vdev) {
  if (on_cuda()) {
    printf("# cuda backend: the vdev refusal is checked under TE_DEVICE=vdev\n");
    return;
  }
  struct te_attn_problem p = fake_problem();
  char why[256] = "";
  for (int bwd = 0; bwd < 2; bwd++) {
    why[0] = '\0';
    ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, bwd, why, sizeof why), 0);
    /* a build with CUDA runs on vdev here; one without says so first */
    ck_assert_msg(strstr(why, "vdev has no cuDNN") || strstr(why, "built without CUDA"), "why: %s",
                  why);
    ck_assert_uint_eq(te_attn_backend_cudnn.workspace(&p, bwd), 0);
  }
  const char *no = TE_T_BUILT_WITH_CUDA ? "vdev" : "without CUDA";
  TE_EXPECT_ERR(TECORE_ERR_NOT_SUPPORTED, no, te_attn_backend_cudnn.fwd(&p, te_stream));
  TE_EXPECT_ERR(TECORE_ERR_NOT_SUPPORTED, no, te_attn_backend_cudnn.bwd(&p, te_stream));
}
END_TEST

START_TEST(cudnn_refuses_what_it_cannot_express) {
  if (!on_cuda()) {
    printf("# vdev: refused before any shape check (cudnn_refuses_on_vdev)\n");
    return;
  }
  char why[256];
  struct te_attn_problem p = fake_problem();
  p.qkv_dtype = TECORE_DTYPE_E4M3;
  p.q_scale_inv = p.k_scale_inv = p.v_scale_inv = 0x400000;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 1, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "no E4M3 backward"), "why: %s", why);
  p.head_dim = 40, p.q.head_stride = p.k.head_stride = p.v.head_stride = p.o.head_stride = 48;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 0, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "multiples of 16"), "why: %s", why);
  p = fake_problem();
  p.qkv_dtype = TECORE_DTYPE_E4M3;
  p.q_scale_inv = p.k_scale_inv = p.v_scale_inv = 0x400000;
  p.window_left = 8;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 0, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "window_left 8"), "why: %s", why);
  p.window_left = -1;
  p.fixed_seqlen_kv = p.max_seqlen_kv = 96, p.total_kv = 192;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 0, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "bottom-right"), "why: %s", why);
  p.q_scale_inv = 0;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 0, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "scale_inv"), "why: %s", why);
  p = fake_problem();
  p.fixed_seqlen_q = p.fixed_seqlen_kv = 0;
  p.max_seqlen_q = 0;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 0, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "nothing for cuDNN to run"), "why: %s", why);
  p = fake_problem();
  p.q.ptr += 2;
  ck_assert_int_eq(te_attn_backend_cudnn.supports(&p, 0, why, sizeof why), 0);
  ck_assert_msg(strstr(why, "q is not 16-byte aligned"), "why: %s", why);
}
END_TEST

/* ---- values against float64 --------------------------------------------- */

struct shape {
  int b, hq, hk, sq, skv, d, causal;
  long window;
  int varlen, lq[4], lk[4]; /* varlen: each sequence's lengths (sq, skv: the maxima) */
  const char *refused;      /* NULL: cuDNN must take it; else the refusal must say this */
};

static float bf(float x) { return tecore_bf16_to_f32(tecore_f32_to_bf16(x)); }

static int visible(const struct shape *s, int b, int i, int j) {
  int off = s->lk[b] - s->lq[b];
  if (s->causal && j > i + off) return 0;
  if (s->window >= 0 && j < i + off - s->window) return 0;
  return 1;
}

/* Host copies as float (bf16 values) in the packed layouts of the test:
 * q [tokens][hq][d] inside a QKV row of (hq + 2 hk) d, k and v after it. */
struct host {
  float *q, *k, *v, *dO;
  size_t row;    /* elements per token of the packed QKV */
};

#define QAT(h, s, t, hh, dd) ((h)->q[(size_t)(t) * (h)->row + (size_t)(hh) * (s)->d + (dd)])
#define KAT(h, s, t, hh, dd) \
  ((h)->q[(size_t)(t) * (h)->row + (size_t)((s)->hq + (hh)) * (s)->d + (dd)])
#define VAT(h, s, t, hh, dd) \
  ((h)->q[(size_t)(t) * (h)->row + (size_t)((s)->hq + (s)->hk + (hh)) * (s)->d + (dd)])

static void run_values(const struct shape *s0) {
  struct shape sh = *s0, *s = &sh;
  int cq[5] = {0}, ck[5] = {0};
  for (int b = 0; b < s->b; b++) {
    if (!s->varlen) s->lq[b] = s->sq, s->lk[b] = s->skv;
    cq[b + 1] = cq[b] + s->lq[b], ck[b + 1] = ck[b] + s->lk[b];
  }
  const int g = s->hq / s->hk, d = s->d;
  const size_t tq = (size_t)cq[s->b], tk = (size_t)ck[s->b];
  /* Q and KV tokens share one packed buffer when sq == skv; otherwise the
   * K/V rows live in a second buffer with the same row layout. */
  const size_t row = (size_t)(s->hq + 2 * s->hk) * d;
  const size_t nq = tq * row, nk = tk * row;
  float *hq = malloc(nq * sizeof(float)), *hk = malloc(nk * sizeof(float));
  float *hdo = malloc(tq * s->hq * d * sizeof(float));
  uint16_t *bq = malloc(nq * 2), *bk = malloc(nk * 2), *bdo = malloc(tq * s->hq * d * 2);
  for (size_t i = 0; i < nq; i++) hq[i] = bf(te_rand_float(-1, 1)), bq[i] = tecore_f32_to_bf16(hq[i]);
  for (size_t i = 0; i < nk; i++) hk[i] = bf(te_rand_float(-1, 1)), bk[i] = tecore_f32_to_bf16(hk[i]);
  for (size_t i = 0; i < tq * s->hq * d; i++)
    hdo[i] = bf(te_rand_float(-1, 1)), bdo[i] = tecore_f32_to_bf16(hdo[i]);
  struct host hQ = {.q = hq, .row = row}, hK = {.q = hk, .row = row};
  float scale = 1.0f / sqrtf((float)d);

  tecore_devptr_t dq = te_dalloc(nq * 2), dk = te_dalloc(nk * 2);
  tecore_devptr_t dout = te_dalloc(tq * s->hq * d * 2), dlse = te_dalloc(tq * s->hq * 4);
  tecore_devptr_t ddo = te_dalloc(tq * s->hq * d * 2);
  tecore_devptr_t dgq = te_dalloc(nq * 2), dgk = te_dalloc(nk * 2);
  te_h2d(dq, bq, nq * 2);
  te_h2d(dk, bk, nk * 2);
  te_h2d(ddo, bdo, tq * s->hq * d * 2);
  te_poison_dev(dout, tq * s->hq * d * 2);
  te_poison_dev_nan(dlse, tq * s->hq);
  te_poison_dev(dgq, nq * 2);
  te_poison_dev(dgk, nk * 2);

  tecore_devptr_t dcu = te_dalloc(10 * sizeof(int));
  te_h2d(dcu, cq, 5 * sizeof(int));
  te_h2d(dcu + 5 * sizeof(int), ck, 5 * sizeof(int));
  struct te_attn_problem p = {0};
  p.batch = s->b, p.total_q = tq, p.total_kv = tk;
  p.max_seqlen_q = s->sq, p.max_seqlen_kv = s->skv;
  p.fixed_seqlen_q = s->varlen ? 0 : s->sq, p.fixed_seqlen_kv = s->varlen ? 0 : s->skv;
  p.cu_seqlens_q = dcu, p.cu_seqlens_kv = dcu + 5 * sizeof(int);
  p.heads = s->hq, p.kv_heads = s->hk, p.head_dim = d;
  p.scale = scale, p.causal = s->causal, p.window_left = s->window;
  p.qkv_dtype = p.o_dtype = TECORE_DTYPE_BF16;
  p.q = (struct te_attn_view){dq, row, d};
  p.k = (struct te_attn_view){dk + (size_t)s->hq * d * 2, row, d};
  p.v = (struct te_attn_view){dk + (size_t)(s->hq + s->hk) * d * 2, row, d};
  p.o = (struct te_attn_view){dout, (size_t)s->hq * d, d};
  p.lse = dlse;
  p.d_o = (struct te_attn_view){ddo, (size_t)s->hq * d, d};
  p.dq = (struct te_attn_view){dgq, row, d};
  p.dk = (struct te_attn_view){dgk + (size_t)s->hq * d * 2, row, d};
  p.dv = (struct te_attn_view){dgk + (size_t)(s->hq + s->hk) * d * 2, row, d};

  char why[512] = "";
  if (!te_attn_backend_cudnn.supports(&p, 1, why, sizeof why) ||
      !te_attn_backend_cudnn.supports(&p, 0, why, sizeof why)) {
    printf("# cudnn refuses b %d h %d/%d s %d/%d d %d%s: %s\n", s->b, s->hq, s->hk, s->sq,
           s->skv, d, s->varlen ? " varlen" : "", why);
    /* a refusal is a failure unless the case expects it (then it is the
     * case's whole point: nothing wrong is computed) */
    ck_assert_msg(s->refused && strstr(why, s->refused), "cuDNN refused: %s", why);
    goto out;
  }
  ck_assert_msg(!s->refused, "cuDNN took a problem it should refuse (%s)",
                s->refused ? s->refused : "");
  size_t ws = te_attn_backend_cudnn.workspace(&p, 1);
  size_t wsf = te_attn_backend_cudnn.workspace(&p, 0);
  if (wsf > ws) ws = wsf;
  p.workspace = ws ? te_dalloc(ws) : 0;
  p.workspace_bytes = ws;
  TE_OK(te_attn_backend_cudnn.fwd(&p, te_stream));
  TE_OK(te_attn_backend_cudnn.bwd(&p, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));

  uint16_t *go = malloc(tq * s->hq * d * 2), *ggq = malloc(nq * 2), *ggk = malloc(nk * 2);
  float *glse = malloc(tq * s->hq * 4);
  te_d2h(go, dout, tq * s->hq * d * 2);
  te_d2h(glse, dlse, tq * s->hq * 4);
  te_d2h(ggq, dgq, nq * 2);
  te_d2h(ggk, dgk, nk * 2);

  /* float64 reference, one (sequence, head) at a time */
  double *P = malloc((size_t)s->sq * s->skv * sizeof(double));
  double *dS = malloc((size_t)s->sq * s->skv * sizeof(double));
  double *dkr = calloc(nk, sizeof(double)), *dkm = calloc(nk, sizeof(double));
  double vmax = 0;
  for (size_t i = 0; i < nk; i++) vmax = fmax(vmax, fabs(hk[i]));
  for (int b = 0; b < s->b; b++)
    for (int h = 0; h < s->hq; h++) {
      int kh = h / g;
      const int lq = s->lq[b], lk = s->lk[b];
      for (int i = 0; i < lq; i++) {
        size_t ti = (size_t)cq[b] + i;
        double m = -INFINITY, z = 0;
        for (int j = 0; j < lk; j++) {
          size_t tj = (size_t)ck[b] + j;
          double acc = 0;
          for (int e = 0; e < d; e++) acc += (double)QAT(&hQ, s, ti, h, e) * KAT(&hK, s, tj, kh, e);
          P[(size_t)i * s->skv + j] = visible(s, b, i, j) ? acc * scale : -INFINITY;
          m = fmax(m, P[(size_t)i * s->skv + j]);
        }
        for (int j = 0; j < lk; j++) z += exp(P[(size_t)i * s->skv + j] - m);
        double lse = m + log(z);
        float gl = glse[(size_t)h * tq + ti];
        ck_assert_msg(fabs(gl - lse) <= ldexp(1 + fabs(lse), -9), "lse[%d][%zu] %g, want %g", h,
                      ti, gl, lse);
        for (int j = 0; j < lk; j++) P[(size_t)i * s->skv + j] = exp(P[(size_t)i * s->skv + j] - lse);
        /* dP = dO V^T; O, and D = rowsum(dO * O) of the BF16 O the backward
         * reads (not sum_j P dP of the exact O: in a row of few keys dS is
         * small and O's rounding in D alone broke 2^-6 of dQ's magnitude,
         * H100 2026-11-24, dQ off by 5.7e-4 at a row of 2 keys) */
        double Dsum = 0;
        double dP[1024];
        for (int j = 0; j < lk; j++) {
          size_t tj = (size_t)ck[b] + j;
          double acc = 0;
          for (int e = 0; e < d; e++)
            acc += (double)hdo[(ti * s->hq + h) * d + e] * VAT(&hK, s, tj, kh, e);
          dP[j] = acc;
        }
        for (int e = 0; e < d; e++) {
          double o = 0;
          for (int j = 0; j < lk; j++)
            o += P[(size_t)i * s->skv + j] * VAT(&hK, s, (size_t)ck[b] + j, kh, e);
          float got = tecore_bf16_to_f32(go[(ti * s->hq + h) * d + e]);
          ck_assert_msg(fabs(got - o) <= ldexp(vmax, -7), "O[%zu][%d][%d] %g, want %g", ti, h, e,
                        got, o);
          Dsum += (double)hdo[(ti * s->hq + h) * d + e] * got;
        }
        for (int j = 0; j < lk; j++)
          dS[(size_t)i * s->skv + j] = P[(size_t)i * s->skv + j] * (dP[j] - Dsum);
      }
      /* dQ = scale dS K; dK += scale dS^T Q; dV += P^T dO */
      for (int i = 0; i < lq; i++) {
        size_t ti = (size_t)cq[b] + i;
        for (int e = 0; e < d; e++) {
          double acc = 0, mag = 0;
          for (int j = 0; j < lk; j++) {
            double t = scale * dS[(size_t)i * s->skv + j] * KAT(&hK, s, (size_t)ck[b] + j, kh, e);
            acc += t, mag += fabs(t);
          }
          float got = tecore_bf16_to_f32(ggq[ti * row + (size_t)h * d + e]);
          ck_assert_msg(fabs(got - acc) <= ldexp(mag, -6) + ldexp(1, -12),
                        "dQ[%zu][%d][%d] %g, want %g", ti, h, e, got, acc);
        }
      }
      for (int j = 0; j < lk; j++) {
        size_t tj = (size_t)ck[b] + j;
        for (int e = 0; e < d; e++) {
          size_t ik = tj * row + (size_t)(s->hq + kh) * d + e;
          size_t iv = tj * row + (size_t)(s->hq + s->hk + kh) * d + e;
          for (int i = 0; i < lq; i++) {
            size_t ti = (size_t)cq[b] + i;
            double tk_ = scale * dS[(size_t)i * s->skv + j] * QAT(&hQ, s, ti, h, e);
            double tv = P[(size_t)i * s->skv + j] * hdo[(ti * s->hq + h) * d + e];
            dkr[ik] += tk_, dkm[ik] += fabs(tk_);
            dkr[iv] += tv, dkm[iv] += fabs(tv);
          }
        }
      }
    }
  for (size_t t = 0; t < tk; t++)
    for (size_t c = (size_t)s->hq * d; c < row; c++) {
      size_t i = t * row + c;
      float got = tecore_bf16_to_f32(ggk[i]);
      ck_assert_msg(fabs(got - dkr[i]) <= ldexp(dkm[i], -6) + ldexp(1, -12),
                    "d%s[%zu] col %zu: %g, want %g", c < (size_t)(s->hq + s->hk) * d ? "K" : "V",
                    t, c, got, dkr[i]);
    }
  printf("# cudnn b %d h %d/%d s %d/%d d %d%s%s window %ld: O, lse, dQ, dK, dV within "
         "tolerance\n", s->b, s->hq, s->hk, s->sq, s->skv, d, s->varlen ? " varlen" : "",
         s->causal ? " causal" : "", s->window);
  free(P), free(dS), free(dkr), free(dkm), free(go), free(ggq), free(ggk), free(glse);
  if (p.workspace) TE_OK(tecore_mem_free(p.workspace));
out:
  TE_OK(tecore_mem_free(dcu));
  TE_OK(tecore_mem_free(dq));
  TE_OK(tecore_mem_free(dk));
  TE_OK(tecore_mem_free(dout));
  TE_OK(tecore_mem_free(dlse));
  TE_OK(tecore_mem_free(ddo));
  TE_OK(tecore_mem_free(dgq));
  TE_OK(tecore_mem_free(dgk));
  free(hq), free(hk), free(hdo), free(bq), free(bk), free(bdo);
}

/* ---- E4M3 forward against float64 --------------------------------------- */

struct fp8_shape {
  int b, hq, hk, s, skv, d, causal; /* skv: keys per sequence (0: s) */
  tecore_dtype_t o_dt;
  int row_step; /* O and lse checked on every row_step-th row and the last (0: all); the
                  softmax amax's reference takes every row */
};

/* What one E4M3 forward gave against float64. */
struct fp8_res {
  int refused, bad;            /* refused: why holds the reason; bad: elements past tolerance */
  char why[512], first[200];   /* first: the first element past tolerance */
  double worst;                /* largest |err| / tolerance */
  double lse_err;              /* largest |lse - want| / (1 + |want|) */
  double lse_abs;              /* largest |lse - want| */
  double s_amax, s_amax_want, o_amax, o_amax_want, o_amax_tol, o_scale_inv;
};

/* The bound on |O - O_ref| (check_attention.c states the same one): omag
 * = sum_j p_j |v_j|, vsum = sum_j |v_j|, o_step: O's E4M3 subnormal
 * half-step in O's units. */
static double fp8_tol(double o, double omag, double vsum, double o_step, int bf16_out) {
  double t = ldexp(omag, -4) + ldexp(vsum, -10) / 448;  /* P in E4M3 */
  t += ldexp(fabs(o) + ldexp(omag, -4), -4) + o_step;   /* O in E4M3 */
  if (bf16_out) t += ldexp(fabs(o), -8);
  return t + ldexp(omag, -12);
}

static uint8_t *fp8_rand(size_t n, float scale, float *deq) {
  uint8_t *b = malloc(n);
  for (size_t i = 0; i < n; i++) {
    b[i] = tecore_f32_to_e4m3(te_rand_float(-1, 1) * scale);
    deq[i] = tecore_e4m3_to_f32(b[i]) / scale;
  }
  return b;
}

/* One E4M3 forward through the cudnn row against the float64 attention
 * of the dequantized inputs, judged by run_fp8.  Q, K, V quantized from
 * [-1, 1) at scales 64, 32, 128; O in E4M3 at scale 16 or staged. */
static void fp8_case(const struct fp8_shape *s, struct fp8_res *r) {
  const int d = s->d, hq = s->hq, hk = s->hk, g = hq / hk, skv = s->skv ? s->skv : s->s;
  const size_t t = (size_t)s->b * s->s, tk = (size_t)s->b * skv, nq = t * hq * d;
  const size_t nk = tk * hk * d;
  const int e4 = s->o_dt == TECORE_DTYPE_E4M3;
  memset(r, 0, sizeof *r);
  float *fq = malloc(nq * 4), *fk = malloc(nk * 4), *fv = malloc(nk * 4);
  uint8_t *bq = fp8_rand(nq, 64, fq), *bk = fp8_rand(nk, 32, fk), *bv = fp8_rand(nk, 128, fv);
  /* scales: scale_inv q k v, o.scale, then o.scale_inv, o.amax, s_amax */
  float sc[8] = {1.0f / 64, 1.0f / 32, 1.0f / 128, 16.0f, 0, 0, 0, 0};
  memset(&sc[4], 0xff, 4); /* o.scale_inv poisoned */
  tecore_devptr_t dq = te_dalloc(nq), dk = te_dalloc(nk), dv = te_dalloc(nk);
  tecore_devptr_t dsc = te_dalloc(sizeof sc), dlse = te_dalloc(t * hq * 4);
  size_t ob = nq * (e4 ? 1 : 2);
  tecore_devptr_t dout = te_dalloc(ob);
  te_h2d(dq, bq, nq), te_h2d(dk, bk, nk), te_h2d(dv, bv, nk), te_h2d(dsc, sc, sizeof sc);
  te_poison_dev(dout, ob);
  te_poison_dev_nan(dlse, t * hq);
  struct te_attn_problem p = {0};
  p.batch = s->b, p.total_q = t, p.total_kv = tk;
  p.max_seqlen_q = p.fixed_seqlen_q = s->s;
  p.max_seqlen_kv = p.fixed_seqlen_kv = skv;
  /* fixed lengths: the prefix sums attn.c would write (the stats copy reads them) */
  int *cu = malloc(2 * sizeof(int) * (size_t)(s->b + 1));
  for (int b = 0; b <= s->b; b++) cu[b] = b * s->s, cu[s->b + 1 + b] = b * skv;
  tecore_devptr_t dcu = te_dalloc(2 * sizeof(int) * (size_t)(s->b + 1));
  te_h2d(dcu, cu, 2 * sizeof(int) * (size_t)(s->b + 1));
  p.cu_seqlens_q = dcu, p.cu_seqlens_kv = dcu + sizeof(int) * (size_t)(s->b + 1);
  p.heads = hq, p.kv_heads = hk, p.head_dim = d;
  p.scale = 1.0f / sqrtf((float)d), p.causal = s->causal, p.window_left = -1;
  p.qkv_dtype = TECORE_DTYPE_E4M3, p.o_dtype = s->o_dt;
  p.q = (struct te_attn_view){dq, (size_t)hq * d, d};
  p.k = (struct te_attn_view){dk, (size_t)hk * d, d};
  p.v = (struct te_attn_view){dv, (size_t)hk * d, d};
  p.o = (struct te_attn_view){dout, (size_t)hq * d, d};
  p.lse = dlse;
  p.q_scale_inv = dsc, p.k_scale_inv = dsc + 4, p.v_scale_inv = dsc + 8;
  if (e4) p.o_scale = dsc + 12, p.o_scale_inv = dsc + 16;
  p.o_amax = dsc + 20, p.s_amax = dsc + 24;
  const struct te_attn_backend *be = &te_attn_backend_cudnn;
  if (!be->supports(&p, 0, r->why, sizeof r->why)) {
    r->refused = 1;
    goto out;
  }
  size_t ws = be->workspace(&p, 0);
  p.workspace = ws ? te_dalloc(ws) : 0;
  p.workspace_bytes = ws;
  if (p.workspace) te_poison_dev(p.workspace, ws);
  TE_OK(be->fwd(&p, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  uint8_t *go = malloc(ob);
  float *glse = malloc(t * hq * 4), gsc[8];
  te_d2h(go, dout, ob), te_d2h(glse, dlse, t * hq * 4), te_d2h(gsc, dsc, sizeof gsc);
  double *P = malloc((size_t)skv * sizeof(double)), smax = 0, amax = 0, amax_tol = 0;
  double o_step = e4 ? ldexp(1, -10) / 16 : ldexp(1, -10) / (0.5 * 128);
  for (int b = 0; b < s->b; b++)
    for (int h = 0; h < hq; h++)
      for (int i = 0; i < s->s; i++) {
        /* unchecked rows still count toward the softmax's amax, which
         * cuDNN takes over every row */
        const int checked = !s->row_step || i % s->row_step == 0 || i == s->s - 1;
        size_t ti = (size_t)b * s->s + i;
        int hi = s->causal ? i + 1 : skv;
        double m = -INFINITY, z = 0;
        for (int j = 0; j < hi; j++) {
          size_t tj = (size_t)b * skv + j;
          double acc = 0;
          for (int e = 0; e < d; e++)
            acc += (double)fq[(ti * hq + h) * d + e] * fk[(tj * hk + h / g) * d + e];
          P[j] = acc * p.scale;
          m = fmax(m, P[j]);
        }
        for (int j = 0; j < hi; j++) z += exp(P[j] - m);
        double lse = m + log(z);
        for (int j = 0; j < hi; j++) P[j] = exp(P[j] - lse), smax = fmax(smax, P[j]);
        if (!checked) continue;
        float gl = glse[(size_t)h * t + ti];
        double le = fabs(gl - lse) / (1 + fabs(lse));
        if (!(le <= r->lse_err)) r->lse_err = isnan(le) ? INFINITY : le;
        r->lse_abs = isnan(le) ? INFINITY : fmax(r->lse_abs, le * (1 + fabs(lse)));
        for (int e = 0; e < d; e++) {
          double o = 0, om = 0, vs = 0;
          for (int j = 0; j < hi; j++) {
            double v = fv[(((size_t)b * skv + j) * hk + h / g) * d + e];
            o += P[j] * v, om += P[j] * fabs(v), vs += fabs(v);
          }
          size_t io = (ti * hq + h) * d + e;
          /* O of the case's type: E4M3 at scale 16, BF16 or F16 */
          double got = e4 ? tecore_e4m3_to_f32(go[io]) / 16.0
                       : s->o_dt == TECORE_DTYPE_F16 ? tecore_f16_to_f32(((uint16_t *)go)[io])
                                                     : tecore_bf16_to_f32(((uint16_t *)go)[io]);
          double tol = fp8_tol(o, om, vs, o_step, !e4), err = fabs(got - o);
          if (!(err <= tol) && !r->bad++)
            snprintf(r->first, sizeof r->first, "O[%zu][%d][%d] %g, want %g (tolerance %g)",
                     ti, h, e, got, o, tol);
          r->worst = fmax(r->worst, isnan(err) ? INFINITY : err / tol);
          amax = fmax(amax, fabs(o));
          amax_tol = fmax(amax_tol, ldexp(om, -4) + ldexp(vs, -10) / 448 + ldexp(om, -12));
        }
      }
  r->s_amax = gsc[6], r->s_amax_want = smax;
  r->o_amax = gsc[5], r->o_amax_want = amax, r->o_amax_tol = amax_tol;
  r->o_scale_inv = gsc[4];
  free(P), free(go), free(glse);
  if (p.workspace) TE_OK(tecore_mem_free(p.workspace));
out:
  tecore_devptr_t bufs[7] = {dq, dk, dv, dsc, dlse, dout, dcu};
  for (int i = 0; i < 7; i++) TE_OK(tecore_mem_free(bufs[i]));
  free(fq), free(fk), free(fv), free(bq), free(bk), free(bv), free(cu);
}

static void run_fp8(const struct fp8_shape *s) {
  struct fp8_res r;
  fp8_case(s, &r);
  int skv = s->skv ? s->skv : s->s;
  if (r.refused) {
    printf("# cudnn refuses E4M3 b %d h %d/%d s %d/%d d %d: %s\n", s->b, s->hq, s->hk, s->s, skv,
           s->d, r.why);
    /* skipped only where cuDNN is absent; any other refusal fails */
    ck_assert_msg(strstr(r.why, "cuDNN not loaded"), "cuDNN refused E4M3: %s", r.why);
    return;
  }
  ck_assert_msg(r.bad == 0, "b %d h %d/%d s %d/%d d %d%s O %s: %d elements of O past "
                "tolerance; the first: %s", s->b, s->hq, s->hk, s->s, skv, s->d,
                s->causal ? " causal" : "", tecore_dtype_name(s->o_dt), r.bad, r.first);
  ck_assert_msg(r.lse_err <= ldexp(1, -9), "lse off by %g of 1 + |lse|", r.lse_err);
  /* P = exp(S - lse): the kernel's own lse error e (bounded above) scales
   * every probability, the largest included, by exp(-e) */
  ck_assert_msg(fabs(r.s_amax - r.s_amax_want) <=
                    r.s_amax_want * (ldexp(1, -10) + expm1(r.lse_abs)),
                "b %d h %d/%d s %d/%d d %d: s_amax %g, want %g", s->b, s->hq, s->hk, s->s, skv,
                s->d, r.s_amax, r.s_amax_want);
  ck_assert_msg(fabs(r.o_amax - r.o_amax_want) <= r.o_amax_tol, "o.amax %g, want %g (tolerance %g)",
                r.o_amax, r.o_amax_want, r.o_amax_tol);
  if (s->o_dt == TECORE_DTYPE_E4M3)
    ck_assert_msg(r.o_scale_inv == 1.0 / 16, "o.scale_inv %g, want 1/16", r.o_scale_inv);
  printf("# cudnn E4M3 b %d h %d/%d s %d/%d d %d%s O %s: within tolerance; largest |err| / "
         "tolerance %.4g\n", s->b, s->hq, s->hk, s->s, skv, s->d, s->causal ? " causal" : "",
         tecore_dtype_name(s->o_dt), r.worst);
}

/* The cases of last session's H100 failure (the F16 O case was read back
 * as BF16 by this test: 0.1406 in F16 bits is 2^-30 in BF16), and the
 * shapes the diagnostic of 2026-11-24 ran: MHA and GQA, 128 to 2048
 * tokens, every O type, more keys than queries without a mask. */
START_TEST(cudnn_fp8_forward_values) {
  const tecore_dtype_t B = TECORE_DTYPE_BF16, E = TECORE_DTYPE_E4M3, F = TECORE_DTYPE_F16;
  const struct fp8_shape cases[] = {
      {2, 4, 2, 128, 0, 64, 1, B, 0},    {2, 4, 2, 128, 0, 128, 1, E, 0},
      {2, 4, 2, 128, 0, 64, 0, E, 0},    {2, 4, 2, 128, 0, 128, 0, B, 0},
      {1, 2, 1, 256, 0, 128, 1, F, 0},   {2, 4, 4, 128, 0, 64, 1, B, 0},
      {1, 4, 2, 1024, 0, 64, 1, B, 7},   {1, 4, 4, 1024, 0, 128, 0, F, 7},
      {1, 2, 2, 2048, 0, 128, 1, B, 61}, {2, 4, 2, 128, 256, 64, 0, B, 0},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_fp8(&cases[i]);
}
END_TEST

START_TEST(cudnn_values_causal_gqa) {
  if (!on_cuda()) {
    printf("# vdev: no cuDNN, no values to check\n");
    return;
  }
  run_values(&(struct shape){.b = 2, .hq = 4, .hk = 2, .sq = 128, .skv = 128, .d = 64,
                             .causal = 1, .window = -1});
}
END_TEST

START_TEST(cudnn_values_window_uneven) {
  if (!on_cuda()) {
    printf("# vdev: no cuDNN, no values to check\n");
    return;
  }
  run_values(&(struct shape){.b = 1, .hq = 2, .hk = 2, .sq = 96, .skv = 160, .d = 128,
                             .causal = 1, .window = 40});
}
END_TEST

START_TEST(cudnn_values_varlen_causal_gqa) {
  if (!on_cuda()) {
    printf("# vdev: no cuDNN, no values to check\n");
    return;
  }
  run_values(&(struct shape){.b = 3, .hq = 4, .hk = 2, .sq = 100, .skv = 100, .d = 64,
                             .causal = 1, .window = -1, .varlen = 1,
                             .lq = {100, 37, 64}, .lk = {100, 37, 64},
                             .refused = "variable lengths through cuDNN are disabled"});
}
END_TEST

START_TEST(cudnn_values_varlen_empty_uneven) {
  if (!on_cuda()) {
    printf("# vdev: no cuDNN, no values to check\n");
    return;
  }
  run_values(&(struct shape){.b = 3, .hq = 2, .hk = 2, .sq = 70, .skv = 90, .d = 128,
                             .causal = 1, .window = -1, .varlen = 1,
                             .lq = {40, 0, 70}, .lk = {90, 0, 70},
                             .refused = "variable lengths through cuDNN are disabled"});
}
END_TEST

/* Variable lengths are refused by the cudnn row (its graph gave a wrong
 * dQ in call e3 and wrong statistics here, lse off by 0.4, in call e2):
 * these cases hold it to that until the graph is fixed. */
START_TEST(cudnn_refuses_varlen_window) {
  if (!on_cuda()) {
    printf("# vdev: no cuDNN, no values to check\n");
    return;
  }
  run_values(&(struct shape){.b = 3, .hq = 2, .hk = 2, .sq = 70, .skv = 90, .d = 128,
                             .causal = 1, .window = 32, .varlen = 1,
                             .lq = {40, 0, 70}, .lk = {90, 0, 70},
                             .refused = "variable lengths through cuDNN are disabled"});
}
END_TEST

/* ---- the helper kernels (kernels/attn_cudnn.cu and vdev twins) ---------- */

/* Random lengths in [0, max], lens[zero] forced to 0; cu: prefix sums. */
static void rand_lens(int *cu, int batch, int max, int zero) {
  cu[0] = 0;
  for (int b = 0; b < batch; b++)
    cu[b + 1] = cu[b] + (b == zero ? 0 : 1 + (int)te_rand_below((uint64_t)max));
}

START_TEST(ragged_lengths_and_offsets_exact) {
  enum { B = 5 };
  int cq[B + 1], ck[B + 1];
  rand_lens(cq, B, 300, 1);
  rand_lens(ck, B, 300, 3);
  long long mult[TE_ACD_ROLES];
  for (int r = 0; r < TE_ACD_ROLES; r++) mult[r] = 8 * (1 + (long long)te_rand_below(256));
  mult[5] = 0; /* an absent role writes zeros */
  size_t stride = te_acd_ragged_stride(B), bytes = te_acd_ragged_bytes(B);
  ck_assert_uint_eq(stride % 4, 0);
  ck_assert_uint_ge(stride, B + 1);
  tecore_devptr_t dcu = te_dalloc(2 * (B + 1) * sizeof(int)), dout = te_dalloc(bytes);
  te_h2d(dcu, cq, sizeof cq);
  te_h2d(dcu + sizeof cq, ck, sizeof ck);
  te_poison_dev(dout, bytes);
  struct te_attn_problem pr = {.batch = B, .cu_seqlens_q = dcu, .cu_seqlens_kv = dcu + sizeof cq,
                               .total_q = (size_t)cq[B], .total_kv = (size_t)ck[B],
                               .max_seqlen_q = 300, .max_seqlen_kv = 300};
  TE_OK(te_acd_launch_ragged(&pr, dout, mult, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  int *out = malloc(bytes);
  te_d2h(out, dout, bytes);
  for (int b = 0; b < B; b++) {
    ck_assert_int_eq(out[b], cq[b + 1] - cq[b]);
    ck_assert_int_eq(out[stride + b], ck[b + 1] - ck[b]);
  }
  for (int r = 0; r < TE_ACD_ROLES; r++) {
    const int *cu = te_acd_role_kv(r) ? ck : cq;
    for (int i = 0; i <= B; i++)
      ck_assert_msg((long long)out[(2 + r) * stride + i] == cu[i] * mult[r],
                    "role %d offset %d: %d, want %lld", r, i, out[(2 + r) * stride + i],
                    cu[i] * mult[r]);
  }
  free(out);
  TE_OK(tecore_mem_free(dcu));
  TE_OK(tecore_mem_free(dout));
}
END_TEST

/* cu_seqlens out of bounds (issue 57: cuDNN was handed lengths and
 * offsets past K): every sequence clamped to start in [0, tokens], end
 * in [start, tokens] and hold at most max_seqlen rows. */
START_TEST(ragged_clamps_cu_seqlens_out_of_bounds) {
  enum { B = 4, T = 16, M = 8 };
  const int cq[B + 1] = {-32, 4, 1 << 20, 2, 12}, ck[B + 1] = {0, 8, 6, 40, 16};
  const int lq[B] = {4, 8, 0, 8}, oq[B + 1] = {0, 4, 16, 2, 10};
  const int lk[B] = {8, 0, 8, 0}, ok[B + 1] = {0, 8, 6, 16, 16};
  long long mult[TE_ACD_ROLES];
  for (int r = 0; r < TE_ACD_ROLES; r++) mult[r] = 8 * (1 + (long long)te_rand_below(256));
  size_t stride = te_acd_ragged_stride(B), bytes = te_acd_ragged_bytes(B);
  tecore_devptr_t dcu = te_dalloc(2 * (B + 1) * sizeof(int)), dout = te_dalloc(bytes);
  te_h2d(dcu, cq, sizeof cq);
  te_h2d(dcu + sizeof cq, ck, sizeof ck);
  te_poison_dev(dout, bytes);
  struct te_attn_problem pr = {.batch = B, .cu_seqlens_q = dcu, .cu_seqlens_kv = dcu + sizeof cq,
                               .total_q = T, .total_kv = T, .max_seqlen_q = M,
                               .max_seqlen_kv = M};
  TE_OK(te_acd_launch_ragged(&pr, dout, mult, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  int *out = malloc(bytes);
  te_d2h(out, dout, bytes);
  for (int b = 0; b < B; b++) {
    ck_assert_int_eq(out[b], lq[b]);
    ck_assert_int_eq(out[stride + b], lk[b]);
  }
  for (int r = 0; r < TE_ACD_ROLES; r++) {
    const int *o = te_acd_role_kv(r) ? ok : oq;
    for (int i = 0; i <= B; i++) {
      long long off = out[(2 + r) * stride + i];
      ck_assert_msg(off == o[i] * mult[r], "role %d offset %d: %lld, want %lld", r, i, off,
                    o[i] * mult[r]);
    }
  }
  free(out);
  TE_OK(tecore_mem_free(dcu));
  TE_OK(tecore_mem_free(dout));
}
END_TEST

START_TEST(stats_to_and_from_lse_exact) {
  enum { B = 4, H = 3, D = 8 };
  int cq[B + 1], ck[B + 1], maxq = 0;
  rand_lens(cq, B, 50, 2);
  /* keys: sequence 0 has none, sequence 3 fewer than its queries (causal:
   * its first rows see no key) */
  int lk[B] = {0, 1 + (int)te_rand_below(60), 1 + (int)te_rand_below(60), 0};
  lk[3] = (cq[4] - cq[3]) / 2;
  ck[0] = 0;
  for (int b = 0; b < B; b++) ck[b + 1] = ck[b] + lk[b];
  for (int b = 0; b < B; b++)
    if (cq[b + 1] - cq[b] > maxq) maxq = cq[b + 1] - cq[b];
  maxq += 2; /* rows past every length */
  const size_t total = (size_t)cq[B] + 3; /* tokens past the last sequence */
  const size_t np = (size_t)B * H * maxq, nl = (size_t)H * total;
  float *pad = malloc(np * sizeof(float)), *lse = malloc(nl * sizeof(float));
  float *got = malloc((np > nl ? np : nl) * sizeof(float));
  for (size_t i = 0; i < np; i++) pad[i] = te_rand_float(-20, 20);
  for (size_t i = 0; i < nl; i++) lse[i] = te_rand_float(-20, 20);
  const size_t no = total * H * D;
  tecore_devptr_t dcu = te_dalloc(sizeof cq + sizeof ck), dpad = te_dalloc(np * 4);
  tecore_devptr_t dlse = te_dalloc(nl * 4), dout = te_dalloc(no * 2);
  uint16_t *ho = malloc(no * 2);
  te_h2d(dcu, cq, sizeof cq);
  te_h2d(dcu + sizeof cq, ck, sizeof ck);
  struct te_acd_stats_call c = {
      .cu_q = dcu, .cu_kv = dcu + sizeof cq, .padded = dpad, .lse = dlse, .o = dout,
      .o_ts = H * D, .o_hs = D, .batch = B, .heads = H, .max_q = (size_t)maxq,
      .total_q = total, .d = D, .causal = 1};
  /* padded -> lse, rows that see no key: lse -inf, O zeros */
  te_h2d(dpad, pad, np * 4);
  te_poison_dev_nan(dlse, nl);
  te_poison_dev(dout, no * 2);
  TE_OK(te_acd_launch_stats(&c, TE_ACD_TO_LSE, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, dlse, nl * 4);
  te_d2h(ho, dout, no * 2);
  int blind_rows = 0;
  for (int h = 0; h < H; h++)
    for (size_t t = 0; t < total; t++) {
      float g = got[(size_t)h * total + t];
      const uint16_t *orow = ho + t * H * D + (size_t)h * D;
      if (t >= (size_t)cq[B]) {
        ck_assert_msg(isnan(g), "lse[%d][%zu] past the tokens was written: %g", h, t, g);
        continue;
      }
      int b = 0;
      while ((size_t)cq[b + 1] <= t) b++;
      long long r = (long long)(t - (size_t)cq[b]), lq = cq[b + 1] - cq[b];
      int blind = lk[b] == 0 || r + lk[b] - lq < 0;
      for (int e = 0; e < D; e++)
        ck_assert_msg(orow[e] == (blind ? 0 : (uint16_t)(TE_POISON_BYTE * 0x101)),
                      "O[%zu][%d][%d] 0x%04x (row %s a key)", t, h, e, orow[e],
                      blind ? "sees no" : "sees");
      if (blind) {
        blind_rows++;
        ck_assert_msg(g == -INFINITY, "lse[%d][%zu] %g, want -inf (no key)", h, t, g);
        continue;
      }
      float want = pad[((size_t)b * H + h) * maxq + r];
      ck_assert_msg(memcmp(&g, &want, 4) == 0, "lse[%d][%zu] %g, want %g", h, t, g, want);
    }
  ck_assert_int_gt(blind_rows, 0);
  /* lse -> padded; -inf (a row that saw no key) reads as 0 */
  lse[1] = -INFINITY; /* head 0, token 1 */
  te_h2d(dlse, lse, nl * 4);
  te_poison_dev_nan(dpad, np);
  TE_OK(te_acd_launch_stats(&c, TE_ACD_FROM_LSE, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(got, dpad, np * 4);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < H; h++)
      for (int i = 0; i < maxq; i++) {
        float g = got[((size_t)b * H + h) * maxq + i];
        float want = i < cq[b + 1] - cq[b] ? lse[(size_t)h * total + cq[b] + i] : 0.0f;
        if (want == -INFINITY) want = 0.0f;
        ck_assert_msg(memcmp(&g, &want, 4) == 0, "padded[%d][%d][%d] %g, want %g", b, h, i, g,
                      want);
      }
  free(pad), free(lse), free(got), free(ho);
  TE_OK(tecore_mem_free(dout));
  TE_OK(tecore_mem_free(dcu));
  TE_OK(tecore_mem_free(dpad));
  TE_OK(tecore_mem_free(dlse));
}
END_TEST

START_TEST(cudnn_lib_tunable_registered) {
  struct tecore_tunable_info info;
  tecore_result_t r = tecore_tunable_find("TECORE_CUDNN_LIB", &info);
  ck_assert_msg(r == TECORE_SUCCESS, "TECORE_CUDNN_LIB is not registered: %s", tecore_last_error());
  ck_assert_int_eq(info.type, TECORE_TUNABLE_STRING);
  ck_assert_msg(info.help && strstr(info.help, "cuDNN"), "help: %s", info.help ? info.help : "");
  ck_assert_msg(info.def_str && !info.def_str[0], "default: %s", info.def_str ? info.def_str : "");
}
END_TEST

/* The two steps around the E4M3 graph: constants in, then amaxes folded
 * (max-accumulated, not overwritten) and a staged O widened, exactly:
 * loop 0 into a strided BF16 O (the 8-element path), 1 into a packed BF16
 * O with V's factor 1/96 (scale_o 48 rounded down to 32; the GPU's
 * 16-element path), 2 into a packed F16 O, 3 a packed O of 4M elements,
 * more items than the GPU's grid has threads (the fold must still run). */
START_TEST(fp8_bracket_exact) {
  static const struct {
    size_t t, h, d, ots, ohs;
    float vsi, so; /* so: 0.5 / vsi rounded down to a power of two */
    tecore_dtype_t dt;
  } lay[] = {{3, 2, 16, 40, 20, 1.0f / 128, 64.0f, TECORE_DTYPE_BF16},
             {3, 2, 16, 32, 16, 1.0f / 96, 32.0f, TECORE_DTYPE_BF16},
             {3, 2, 16, 32, 16, 1.0f / 128, 64.0f, TECORE_DTYPE_F16},
             {16384, 2, 128, 256, 128, 1.0f / 128, 64.0f, TECORE_DTYPE_BF16}};
  const size_t T = lay[_i].t, H = lay[_i].h, D = lay[_i].d, N = T * H * D;
  const size_t OTS = lay[_i].ots, OHS = lay[_i].ohs;
  float vsi = lay[_i].vsi, init[4] = {0.5f, 9.0f, 0, 0}, so = lay[_i].so;
  uint8_t *o8 = malloc(N);
  for (size_t i = 0; i < N; i++) o8[i] = (uint8_t)te_rand_below(0x7f) | (i & 1 ? 0x80 : 0);
  const size_t SB = TE_ACD_SLOTS * sizeof(float);
  tecore_devptr_t slots = te_dalloc(SB), v = te_dalloc(16), am = te_dalloc(16);
  tecore_devptr_t d8 = te_dalloc(N), dout = te_dalloc(T * OTS * 2);
  te_h2d(v, &vsi, 4), te_h2d(am, init, sizeof init), te_h2d(d8, o8, N);
  te_poison_dev(slots, SB);
  te_poison_dev(dout, T * OTS * 2);
  /* Q's and K's factors at 4 and 8 bytes past a 16-byte boundary, as
   * te-bench passed them: the slots hold 16-byte aligned copies */
  float qk[4] = {0, 1.0f / 223.5f, 1.0f / 97.25f, 0};
  tecore_devptr_t dqk = te_dalloc(sizeof qk);
  te_h2d(dqk, qk, sizeof qk);
  struct te_acd_fp8_call c = {.slots = slots, .q_si = dqk + 4, .k_si = dqk + 8, .v_si = v,
                              .o8 = d8, .o = dout, .s_amax = am, .o_amax = am + 4,
                              .o_ts = OTS, .o_hs = OHS, .total_q = T, .heads = H, .d = (int)D,
                              .o_dt = lay[_i].dt};
  TE_OK(te_acd_launch_fp8(&c, TE_ACD_FP8_PRE, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float sl[TE_ACD_SLOTS];
  te_d2h(sl, slots, SB);
  ck_assert(sl[TE_ACD_SLOT_DESCALE_S] == 1.0f / 448 && sl[TE_ACD_SLOT_SCALE_S] == 448.0f);
  ck_assert_msg(sl[TE_ACD_SLOT_DESCALE_Q] == qk[1] && sl[TE_ACD_SLOT_DESCALE_K] == qk[2] &&
                sl[TE_ACD_SLOT_DESCALE_V] == vsi, "descale slots %g %g %g, want %g %g %g",
                sl[TE_ACD_SLOT_DESCALE_Q], sl[TE_ACD_SLOT_DESCALE_K], sl[TE_ACD_SLOT_DESCALE_V],
                qk[1], qk[2], vsi);
  ck_assert_msg(sl[TE_ACD_SLOT_SCALE_O] == so, "staged scale %g, want %g",
                sl[TE_ACD_SLOT_SCALE_O], so);
  ck_assert(sl[TE_ACD_SLOT_AMAX_S] == 0.0f && sl[TE_ACD_SLOT_AMAX_O] == 0.0f);
  sl[TE_ACD_SLOT_AMAX_S] = 0.75f, sl[TE_ACD_SLOT_AMAX_O] = 30.0f; /* as cuDNN would write */
  te_h2d(slots, sl, SB);
  TE_OK(te_acd_launch_fp8(&c, TE_ACD_FP8_POST, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float got[2];
  uint16_t *o = malloc(T * OTS * 2);
  te_d2h(got, am, 8), te_d2h(o, dout, T * OTS * 2);
  ck_assert_msg(got[0] == 0.75f && got[1] == 30.0f, "amaxes %g %g, want 0.75 30", got[0],
                got[1]);
  int f16 = lay[_i].dt == TECORE_DTYPE_F16;
  for (size_t t = 0; t < T; t++)
    for (size_t h = 0; h < H; h++)
      for (size_t x = 0; x < D; x++) {
        float w = tecore_e4m3_to_f32(o8[(t * H + h) * D + x]) / so; /* exact: so = 2^k */
        uint16_t want = f16 ? tecore_f32_to_f16(w) : tecore_f32_to_bf16(w);
        uint16_t g = o[t * OTS + h * OHS + x];
        ck_assert_msg(g == want, "O[%zu][%zu][%zu] 0x%04x, want 0x%04x (%g)", t, h, x, g, want,
                      w);
      }
  free(o8), free(o);
  tecore_devptr_t bufs[6] = {slots, v, am, d8, dout, dqk};
  for (int i = 0; i < 6; i++) TE_OK(tecore_mem_free(bufs[i]));
}
END_TEST

/* An E4M3 O: its scale (at 4 past a 16-byte boundary) is copied into the
 * O-scale slot the graph reads, not replaced by the staged one. */
START_TEST(fp8_pre_copies_o_scale) {
  float h[4] = {0, 111.75f, 1.0f / 223.5f, 0};
  tecore_devptr_t d = te_dalloc(sizeof h), slots = te_dalloc(TE_ACD_SLOTS * sizeof(float));
  te_h2d(d, h, sizeof h);
  te_poison_dev(slots, TE_ACD_SLOTS * sizeof(float));
  struct te_acd_fp8_call c = {.slots = slots, .v_si = d + 8, .o_scale = d + 4, .total_q = 1,
                              .heads = 1, .d = 16, .o_dt = TECORE_DTYPE_E4M3};
  TE_OK(te_acd_launch_fp8(&c, TE_ACD_FP8_PRE, te_stream));
  float sl[TE_ACD_SLOTS];
  te_d2h(sl, slots, sizeof sl);
  ck_assert_msg(sl[TE_ACD_SLOT_SCALE_O] == 111.75f, "O scale slot %g, want 111.75",
                sl[TE_ACD_SLOT_SCALE_O]);
  ck_assert_msg(sl[TE_ACD_SLOT_DESCALE_Q] == 1.0f && sl[TE_ACD_SLOT_DESCALE_K] == 1.0f &&
                sl[TE_ACD_SLOT_DESCALE_V] == h[2], "descale slots %g %g %g",
                sl[TE_ACD_SLOT_DESCALE_Q], sl[TE_ACD_SLOT_DESCALE_K], sl[TE_ACD_SLOT_DESCALE_V]);
  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_mem_free(slots));
}
END_TEST

static Suite *attn_cudnn_suite(void) {
  Suite *s = suite_create("attn_cudnn");
  TCase *tc = te_tcase(s, "refusals", 1);
  tcase_add_test(tc, cudnn_refuses_on_vdev);
  tcase_add_test(tc, fp8_causal_past_tile_limit_refused);
  tcase_add_test(tc, cudnn_refuses_what_it_cannot_express);
  /* values only where cuDNN can run: on vdev they would pass having
   * checked nothing, so they are not registered there */
  const char *dev = getenv("TE_DEVICE");
  if (dev && !strcmp(dev, "cuda")) {
    tc = te_tcase(s, "values", 1);
    tcase_add_test(tc, cudnn_values_causal_gqa);
    tcase_add_test(tc, cudnn_values_window_uneven);
    tcase_add_test(tc, cudnn_values_varlen_causal_gqa);
    tcase_add_test(tc, cudnn_values_varlen_empty_uneven);
    tcase_add_test(tc, cudnn_refuses_varlen_window);
    tcase_add_test(tc, cudnn_fp8_forward_values);
  }
  tc = te_tcase(s, "kernels", 1);
  tcase_add_test(tc, ragged_lengths_and_offsets_exact);
  tcase_add_test(tc, ragged_clamps_cu_seqlens_out_of_bounds);
  tcase_add_test(tc, stats_to_and_from_lse_exact);
  tcase_add_loop_test(tc, fp8_bracket_exact, 0, 4);
  tcase_add_test(tc, fp8_pre_copies_o_scale);
  tc = te_tcase(s, "tunable", 0);
  tcase_add_test(tc, cudnn_lib_tunable_registered);
  return s;
}

TE_TEST_MAIN(attn_cudnn_suite, TE_TEST_DEVICE)
