/* SPDX-License-Identifier: Apache-2.0 */
/* check_attention_bounds.c -- what hostile input does to attention
 * (te/attention.h), issue 57: views whose byte extent wraps, E4M3 scale
 * pointers that are not device memory, and device-resident cu_seqlens out
 * of bounds (past the tokens, negative, longer than max_seqlen), forward
 * and backward, with the status word that reports them.
 *
 * Every caller buffer sits between 256-byte guards of poison (0xA5) that
 * must be unchanged after the call, so a write outside it is seen even
 * where ASan cannot see device memory (TE_DEVICE=cuda); inputs must be
 * unchanged entirely.  A clamped call is checked against the same call
 * with the lengths the kernels clamp to (the valid path is checked against
 * a float64 reference in check_attention.c): equal within 2^-6 (1 + |x|),
 * which covers the order of the GPU backward's dQ atomics (vdev gives the
 * same bits).  Fresh random inputs every run. */
#include "tests.h"
#include <te/attention.h>

#define GUARD 256u
enum { H = 2, KH = 1, D = 64 };

/* ---- guarded buffers ------------------------------------------------------------------ */

struct gbuf {
  tecore_devptr_t base, d; /* d: the caller's buffer, GUARD bytes past base */
  size_t n;
  unsigned char *host;     /* what base should hold: guards, then the payload */
};

static uint16_t bf16_of(float f) { return (uint16_t)(te_f32_bits_of(f) >> 16); }
static float f_of_bf16(uint16_t h) { return te_f32_from_bits((uint32_t)h << 16); }

/* n bytes between guards; random BF16 values in [-1, 1] when rnd, else poison. */
static void gb_new(struct gbuf *g, size_t n, int rnd) {
  g->n = n;
  g->host = malloc(n + 2 * GUARD);
  ck_assert_ptr_nonnull(g->host);
  te_poison_host(g->host, n + 2 * GUARD);
  uint16_t *v = (uint16_t *)(g->host + GUARD);
  for (size_t i = 0; rnd && i < n / 2; i++) v[i] = bf16_of(te_rand_float(-1.0f, 1.0f));
  g->base = te_dalloc(n + 2 * GUARD);
  g->d = g->base + GUARD;
  te_h2d(g->base, g->host, n + 2 * GUARD);
}

static void gb_free(struct gbuf *g) {
  TE_OK(tecore_mem_free(g->base));
  free(g->host);
}

/* The guards hold their poison (all = 1: and the payload what it held). */
static void gb_expect(const struct gbuf *g, int all, const char *what) {
  size_t n = g->n + 2 * GUARD;
  unsigned char *got = malloc(n);
  te_d2h(got, g->base, n);
  if (all) te_expect_mem_eq(got, g->host, n, what);
  te_expect_bytes_eq(got, TE_POISON_BYTE, GUARD, what);
  te_expect_bytes_eq(got + GUARD + g->n, TE_POISON_BYTE, GUARD, what);
  free(got);
}

static void gb_payload(const struct gbuf *g, void *out) { te_d2h(out, g->d, g->n); }
static void gb_repoison(struct gbuf *g) { te_h2d(g->base, g->host, g->n + 2 * GUARD); }

/* ---- the problem ------------------------------------------------------------------------ */

struct bp {
  size_t tq, tk, max_q, max_kv;
  struct gbuf q, k, v, o, lse, dout, dq, dk, dv, ws;
  tecore_devptr_t cu; /* cu_q then cu_kv, int32 [2][2] */
  uint64_t *status;
};

static void bp_new(struct bp *p, size_t tq, size_t tk, size_t max_q, size_t max_kv) {
  memset(p, 0, sizeof *p);
  p->tq = tq, p->tk = tk, p->max_q = max_q, p->max_kv = max_kv;
  gb_new(&p->q, tq * H * D * 2, 1);
  gb_new(&p->k, tk * KH * D * 2, 1);
  gb_new(&p->v, tk * KH * D * 2, 1);
  gb_new(&p->dout, tq * H * D * 2, 1);
  gb_new(&p->o, tq * H * D * 2, 0);
  gb_new(&p->lse, H * tq * 4, 0);
  gb_new(&p->dq, tq * H * D * 2, 0);
  gb_new(&p->dk, tk * KH * D * 2, 0);
  gb_new(&p->dv, tk * KH * D * 2, 0);
  p->cu = te_dalloc(4 * sizeof(int));
  void *h = NULL;
  TE_OK(tecore_mem_alloc_host(8, &h));
  p->status = h;
  *p->status = 0;
}

static void bp_free(struct bp *p) {
  struct gbuf *g[] = {&p->q, &p->k, &p->v, &p->dout, &p->o, &p->lse, &p->dq, &p->dk, &p->dv};
  for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) gb_free(g[i]);
  if (p->ws.host) gb_free(&p->ws);
  TE_OK(tecore_mem_free(p->cu));
  TE_OK(tecore_mem_free_host(p->status));
}

static struct tecore_attention_args bp_args(struct bp *p) {
  return (struct tecore_attention_args){
      .batch = 1, .cu_seqlens_q = p->cu, .cu_seqlens_kv = p->cu + 2 * sizeof(int),
      .max_seqlen_q = p->max_q, .max_seqlen_kv = p->max_kv, .tokens_q = p->tq,
      .tokens_kv = p->tk, .heads = H, .kv_heads = KH, .head_dim = D,
      .scale = 0.125f, .flags = TECORE_ATTN_CAUSAL, .dtype = TECORE_DTYPE_BF16,
      .o_dtype = TECORE_DTYPE_BF16, .q = {.data = p->q.d}, .k = {.data = p->k.d},
      .v = {.data = p->v.d}, .o = {.data = p->o.d}, .lse = p->lse.d, .d_o = {.data = p->dout.d},
      .dq = {.data = p->dq.d}, .dk = {.data = p->dk.d}, .dv = {.data = p->dv.d},
      .status = p->status};
}

/* The workspace args needs (both directions), guarded. */
static void bp_workspace(struct bp *p, struct tecore_attention_args *a) {
  size_t f = 0, b = 0;
  TE_OK(tecore_attention_workspace_size(a, 0, &f));
  if (a->dtype != TECORE_DTYPE_E4M3) TE_OK(tecore_attention_workspace_size(a, 1, &b));
  if (!p->ws.host) gb_new(&p->ws, (f > b ? f : b) + 256, 0);
  a->workspace = p->ws.d;
  a->workspace_bytes = p->ws.n;
}

/* The forward (and the backward) with cu_seqlens cq, ck ({start, end}):
 * the backward reports into the word what the forward did. */
static void bp_run(struct bp *p, const int cq[2], const int ck[2], int backward) {
  int cu[4] = {cq[0], cq[1], ck[0], ck[1]};
  te_h2d(p->cu, cu, sizeof cu);
  struct tecore_attention_args a = bp_args(p);
  bp_workspace(p, &a);
  TE_OK(tecore_attention_fwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  if (!backward) return;
  uint64_t fwd = *p->status;
  *p->status = 0;
  TE_OK(tecore_attention_bwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_uint_eq(*p->status, fwd);
}

/* Nothing outside the caller's buffers changed; the inputs not at all. */
static void bp_expect_inside(const struct bp *p) {
  gb_expect(&p->q, 1, "q"), gb_expect(&p->k, 1, "k"), gb_expect(&p->v, 1, "v");
  gb_expect(&p->dout, 1, "d_o");
  gb_expect(&p->o, 0, "o"), gb_expect(&p->lse, 0, "lse"), gb_expect(&p->dq, 0, "dq");
  gb_expect(&p->dk, 0, "dk"), gb_expect(&p->dv, 0, "dv"), gb_expect(&p->ws, 0, "workspace");
}

/* BF16 payloads (or float ones, f32) equal within 2^-6 (1 + |want|). */
static void expect_close(const void *got, const void *want, size_t n, int f32,
                         const char *what) {
  for (size_t i = 0; i < n; i++) {
    float g = f32 ? ((const float *)got)[i] : f_of_bf16(((const uint16_t *)got)[i]);
    float w = f32 ? ((const float *)want)[i] : f_of_bf16(((const uint16_t *)want)[i]);
    if (g == w) continue; /* -inf lse of rows that see no key */
    ck_assert_msg(fabsf(g - w) <= 0x1p-6f * (1.0f + fabsf(w)), "%s[%zu]: %g, want %g", what,
                  i, (double)g, (double)w);
  }
}

/* The outputs of a run, to compare with another. */
struct outs {
  void *b[5];
};
static void outs_take(struct bp *p, struct outs *o, int backward) {
  struct gbuf *g[5] = {&p->o, &p->lse, &p->dq, &p->dk, &p->dv};
  for (int i = 0; i < 5; i++) {
    o->b[i] = NULL;
    if (i >= 2 && !backward) continue;
    o->b[i] = malloc(g[i]->n);
    gb_payload(g[i], o->b[i]);
    gb_repoison(g[i]);
  }
}
static void outs_expect(const struct bp *p, const struct outs *got, const struct outs *want) {
  const struct gbuf *g[5] = {&p->o, &p->lse, &p->dq, &p->dk, &p->dv};
  const char *name[5] = {"o", "lse", "dq", "dk", "dv"};
  for (int i = 0; i < 5; i++) {
    if (!got->b[i]) continue;
    expect_close(got->b[i], want->b[i], i == 1 ? g[i]->n / 4 : g[i]->n / 2, i == 1, name[i]);
    free(got->b[i]);
    free(want->b[i]);
  }
}

/* The status word names entry `entry`; reading it clears it. */
static void expect_status(struct bp *p, const char *entry) {
  TE_EXPECT_INVALID(entry, tecore_attention_check(p->status, te_stream));
  ck_assert_uint_eq(*p->status, 0);
  TE_OK(tecore_attention_check(p->status, te_stream));
}

/* A call with lengths bad = {start, end} of Q (which = 0) or K/V (1) stays
 * inside the buffers, reports entry, and gives what the clamped lengths
 * give. */
static void clamp_case(struct bp *p, const int bq[2], const int bk[2], const int gq[2],
                       const int gk[2], int backward, const char *entry) {
  struct outs bad, good;
  bp_run(p, bq, bk, backward);
  bp_expect_inside(p);
  expect_status(p, entry);
  outs_take(p, &bad, backward);
  bp_run(p, gq, gk, backward);
  ck_assert_uint_eq(*p->status, 0);
  outs_take(p, &good, backward);
  outs_expect(p, &bad, &good);
}

/* ---- extents ------------------------------------------------------------------------------ */

/* o.token_stride or k.token_stride 2^61: ((tokens - 1) stride + ...) * 2
 * wrapped, the span checks passed and the kernel ran off the address
 * space (SEGV); refused now, naming the view, nothing written. */
START_TEST(attention_refuses_token_stride_wrapping_extent) {
  struct bp p;
  bp_new(&p, 16, 16, 16, 16);
  const int c[2] = {0, 16};
  te_h2d(p.cu, (int[4]){c[0], c[1], c[0], c[1]}, 4 * sizeof(int));
  struct tecore_attention_args a = bp_args(&p);
  bp_workspace(&p, &a);
  struct tecore_attention_args b = a;
  b.o.token_stride = (size_t)1 << 61;
  TE_EXPECT_INVALID("o: 16 tokens at token_stride", tecore_attention_fwd(&b, te_stream));
  b = a;
  b.k.token_stride = (size_t)1 << 61;
  TE_EXPECT_INVALID("k: 16 tokens at token_stride", tecore_attention_fwd(&b, te_stream));
  b = a;
  b.dv.token_stride = (size_t)1 << 60; /* the elements fit, the bytes wrap */
  TE_EXPECT_INVALID("dv: 16 tokens", tecore_attention_bwd(&b, te_stream));
  b = a;
  b.o.token_stride = (size_t)1 << 61;
  size_t ws = 0;
  TE_EXPECT_INVALID("o: 16 tokens", tecore_attention_workspace_size(&b, 0, &ws));
  TE_OK(tecore_stream_synchronize(te_stream));
  bp_expect_inside(&p);
  gb_expect(&p.o, 1, "o");
  bp_free(&p);
}
END_TEST

/* E4M3 with q.scale_inv 0x3000 (aligned, not memory): accepted, SEGV in
 * the kernel.  Each scale pointer must be device memory of a float (the
 * registry's answer: vdev by default, cuda with TECORE_CUDA_CHECK=1). */
START_TEST(attention_fp8_refuses_scale_inv_outside_device_memory) {
  if (te_backend_kind != TECORE_BACKEND_VDEV) return; /* cuda: only with TECORE_CUDA_CHECK=1 */
  struct bp p;
  bp_new(&p, 16, 16, 16, 16);
  te_h2d(p.cu, (int[4]){0, 16, 0, 16}, 4 * sizeof(int));
  tecore_devptr_t si = te_dalloc(16);
  float one[4] = {1.0f, 1.0f, 1.0f, 1.0f};
  te_h2d(si, one, sizeof one);
  struct tecore_attention_args a = bp_args(&p);
  a.dtype = TECORE_DTYPE_E4M3;
  a.q.scale_inv = a.k.scale_inv = a.v.scale_inv = si;
  bp_workspace(&p, &a);
  struct tecore_attention_args b = a;
  b.q.scale_inv = 0x3000;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "q.scale_inv", tecore_attention_fwd(&b, te_stream));
  b = a;
  b.v.scale_inv = si + 16; /* one past the allocation */
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "v.scale_inv", tecore_attention_fwd(&b, te_stream));
  b = a;
  b.o.amax = 0x4000;
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "o.amax", tecore_attention_fwd(&b, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  bp_expect_inside(&p);
  gb_expect(&p.o, 1, "o");
  TE_OK(tecore_attention_fwd(&a, te_stream)); /* the legal neighbour runs */
  TE_OK(tecore_stream_synchronize(te_stream));
  bp_expect_inside(&p);
  TE_OK(tecore_mem_free(si));
  bp_free(&p);
}
END_TEST

/* ---- device-resident lengths ------------------------------------------------------------- */

/* cu_seqlens_kv {0, 2^20} over 16 keys (max_seqlen_kv 16): the kernel read
 * keys far past K.  Clamped to the 16 keys, reported as entry 1. */
START_TEST(attention_clamps_cu_seqlens_kv_past_k) {
  struct bp p;
  bp_new(&p, 16, 16, 16, 16);
  clamp_case(&p, (int[2]){0, 16}, (int[2]){0, 1 << 20}, (int[2]){0, 16}, (int[2]){0, 16}, 0,
             "cu_seqlens_kv[1] = 1048576");
  bp_free(&p);
}
END_TEST

/* cu_seqlens_q {0, 64} over 32 rows (max_seqlen_q 64): O and lse written
 * past their end.  Clamped to the 32 rows. */
START_TEST(attention_clamps_cu_seqlens_q_past_o) {
  struct bp p;
  bp_new(&p, 32, 32, 64, 32);
  clamp_case(&p, (int[2]){0, 64}, (int[2]){0, 32}, (int[2]){0, 32}, (int[2]){0, 32}, 0,
             "cu_seqlens_q[1] = 64");
  bp_free(&p);
}
END_TEST

/* cu_seqlens_q {-32, 16}: O and lse written before their start.  The
 * start clamped to 0. */
START_TEST(attention_clamps_negative_cu_seqlens_q) {
  struct bp p;
  bp_new(&p, 16, 16, 16, 16);
  clamp_case(&p, (int[2]){-32, 16}, (int[2]){0, 16}, (int[2]){0, 16}, (int[2]){0, 16}, 0,
             "cu_seqlens_q[0] = -32");
  bp_free(&p);
}
END_TEST

/* A sequence longer than max_seqlen_kv (8 of 16 keys allowed): clamped
 * to its first 8 keys. */
START_TEST(attention_clamps_sequence_longer_than_max_seqlen) {
  struct bp p;
  bp_new(&p, 8, 16, 8, 8);
  clamp_case(&p, (int[2]){0, 8}, (int[2]){0, 16}, (int[2]){0, 8}, (int[2]){0, 8}, 0,
             "cu_seqlens_kv[1] = 16, which ends a sequence longer than max_seqlen");
  bp_free(&p);
}
END_TEST

/* Backward, cu_seqlens {0, 48} over 16 tokens (max_seqlen 48): dQ, dK, dV
 * (and O, lse in the forward before it) written past their end. */
START_TEST(attention_bwd_clamps_cu_seqlens_past_gradients) {
  struct bp p;
  bp_new(&p, 16, 16, 48, 48);
  clamp_case(&p, (int[2]){0, 48}, (int[2]){0, 48}, (int[2]){0, 16}, (int[2]){0, 16}, 1,
             "cu_seqlens_q[1] = 48");
  bp_free(&p);
}
END_TEST

/* The next call given a word that holds a report fails with it (and
 * clears it); a word that is not mapped host memory is refused before
 * anything reads or writes it. */
START_TEST(attention_status_word_fails_next_call) {
  struct bp p;
  bp_new(&p, 16, 16, 16, 16);
  te_h2d(p.cu, (int[4]){0, 16, 0, 1 << 20}, 4 * sizeof(int));
  struct tecore_attention_args a = bp_args(&p);
  bp_workspace(&p, &a);
  TE_OK(tecore_attention_fwd(&a, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_uint_ne(*p.status, 0);
  TE_EXPECT_INVALID("an earlier call met cu_seqlens_kv[1]", tecore_attention_fwd(&a, te_stream));
  ck_assert_uint_eq(*p.status, 0);
  uint64_t *plain = malloc(16);
  plain[0] = plain[1] = 0x5a5a5a5a5a5a5a5aull;
  a.status = plain;
  TE_EXPECT_INVALID("args->status is not mapped host memory", tecore_attention_fwd(&a, te_stream));
  a.status = (uint64_t *)((char *)p.status + 4);
  TE_EXPECT_INVALID("args->status", tecore_attention_fwd(&a, te_stream));
  ck_assert_uint_eq(plain[0], 0x5a5a5a5a5a5a5a5aull);
  TE_EXPECT_INVALID("status", tecore_attention_check(plain, te_stream));
  TE_EXPECT_INVALID("status", tecore_attention_check(NULL, te_stream));
  ck_assert_uint_eq(plain[0], 0x5a5a5a5a5a5a5a5aull);
  free(plain);
  bp_expect_inside(&p);
  bp_free(&p);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("attention_bounds");
  TCase *tc = te_tcase(s, "extents", 1);
  tcase_add_test(tc, attention_refuses_token_stride_wrapping_extent);
  tcase_add_test(tc, attention_fp8_refuses_scale_inv_outside_device_memory);
  tc = te_tcase(s, "cu_seqlens", 1);
  tcase_add_test(tc, attention_clamps_cu_seqlens_kv_past_k);
  tcase_add_test(tc, attention_clamps_cu_seqlens_q_past_o);
  tcase_add_test(tc, attention_clamps_negative_cu_seqlens_q);
  tcase_add_test(tc, attention_clamps_sequence_longer_than_max_seqlen);
  tcase_add_test(tc, attention_bwd_clamps_cu_seqlens_past_gradients);
  tcase_add_test(tc, attention_status_word_fails_next_call);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
