/* check_alias.c -- SPDX-License-Identifier: Apache-2.0
 * Issue 9's aliasing findings: calls whose outputs overlapped an input (or
 * another output) were accepted and gave garbage.  Each test is named
 * after what was accepted and checks, on fresh random inputs with the
 * outputs poisoned, that
 *   - the call fails with TECORE_ERR_INVALID (TEGRAPH_ERR_INVALID) and a
 *     detail naming both buffers;
 *   - nothing was written: every buffer involved holds what it held before
 *     (outputs their poison);
 *   - a legal neighbour -- the same call with the buffers adjacent but not
 *     overlapping, or exactly in place where the header allows it --
 *     succeeds and matches a float64 host reference (tolerances stated at
 *     each compare).
 * The rule itself is libtecore/ksupport/span.h's. */
#include "check_graph_common.h"
#include <te/ops.h>

/* ---- helpers -------------------------------------------------------------------------- */

/* The call was refused for aliasing, the detail naming a and b. */
#define EXPECT_ALIAS(a, b, call)                                                                 \
  do {                                                                                           \
    TE_EXPECT_INVALID(a, call);                                                                  \
    ck_assert_msg(strstr(tecore_last_error(), (b)), "%s: detail \"%s\" does not name %s", #call, \
                  tecore_last_error(), (b));                                                     \
  } while (0)
#define TG_EXPECT_ALIAS(a, b, call)                                                               \
  do {                                                                                            \
    TG_EXPECT(TEGRAPH_ERR_INVALID, a, call);                                                      \
    ck_assert_msg(strstr(tegraph_last_error(), (b)), "%s: detail \"%s\" does not name %s", #call, \
                  tegraph_last_error(), (b));                                                     \
  } while (0)

/* n random floats in [lo, hi) at d (device), also returned in host memory
 * (the caller frees it). */
static float *rand_at(tecore_devptr_t d, size_t n, float lo, float hi) {
  float *h = malloc(n * 4);
  te_rand_floats(h, n, lo, hi);
  te_h2d(d, h, n * 4);
  return h;
}

static float *get_f32(tecore_devptr_t d, size_t n) {
  float *h = malloc(n * 4);
  te_d2h(h, d, n * 4);
  return h;
}

static struct tecore_tensor t2(tecore_dtype_t dt, size_t r, size_t c, tecore_devptr_t d) {
  size_t shape[2] = {r, c};
  struct tecore_tensor t;
  TE_OK(tecore_tensor_init(&t, dt, 2, shape, d));
  return t;
}

/* ---- GEMM ------------------------------------------------------------------------------ */

/* bf16 operands holding k/8 for |k| <= 16 (exact in bf16, and every
 * product and sum of the small GEMMs here exact in float). */
static void bf16_rand(uint16_t *h, float *f, size_t n) {
  for (size_t i = 0; i < n; i++) {
    f[i] = (float)((int)te_rand_below(33) - 16) / 8.0f;
    h[i] = (uint16_t)(te_f32_bits_of(f[i]) >> 16);
  }
}

struct gemm_case {
  size_t m, n, k;
  float *a, *b; /* host copies: A [m][k], B [n][k] */
};

/* D = A B^T (transa N, transb T) into an f32 D; the reference is exact. */
static void gemm_expect(const struct gemm_case *g, tecore_devptr_t d, const float *c, float beta,
                        const char *what) {
  float *got = get_f32(d, g->m * g->n), *want = malloc(g->m * g->n * 4);
  for (size_t i = 0; i < g->m; i++)
    for (size_t j = 0; j < g->n; j++) {
      double acc = 0;
      for (size_t kk = 0; kk < g->k; kk++) acc += (double)g->a[i * g->k + kk] * g->b[j * g->k + kk];
      want[i * g->n + j] = (float)(acc + (c ? beta * c[i * g->n + j] : 0.0));
    }
  te_expect_f32_near(got, want, g->m * g->n, 0, 0, what); /* tolerance: exact */
  free(got);
  free(want);
}

/* A and B in buf at offsets oa, ob (bytes), random. */
static void gemm_operands(struct gemm_case *g, tecore_devptr_t buf, size_t oa, size_t ob,
                          struct tecore_tensor *A, struct tecore_tensor *B) {
  size_t na = g->m * g->k, nb = g->n * g->k;
  uint16_t *h = malloc((na + nb) * 2);
  g->a = malloc(na * 4);
  g->b = malloc(nb * 4);
  bf16_rand(h, g->a, na);
  bf16_rand(h + na, g->b, nb);
  te_h2d(buf + oa, h, na * 2);
  te_h2d(buf + ob, h + na, nb * 2);
  free(h);
  *A = t2(TECORE_DTYPE_BF16, g->m, g->k, buf + oa);
  *B = t2(TECORE_DTYPE_BF16, g->n, g->k, buf + ob);
}

static void gemm_case_free(struct gemm_case *g) {
  free(g->a);
  free(g->b);
}

/* D written over A (or B) was accepted: the GEMM read what it wrote. */
static void gemm_d_over(int over_b) {
  struct gemm_case g = {.m = 8 + te_rand_below(8), .n = 16, .k = 16};
  size_t abytes = g.m * g.k * 2, bbytes = g.n * g.k * 2, dbytes = g.m * g.n * 4;
  size_t total = abytes + bbytes + dbytes + 256;
  tecore_devptr_t buf = te_dalloc(total);
  te_poison_dev(buf, total);
  struct tecore_tensor A, B;
  /* layout: [A][B][D...]: the bad D starts inside the operand */
  gemm_operands(&g, buf, 0, abytes, &A, &B);
  size_t inside = over_b ? abytes + 16 : 16;
  struct tecore_tensor D = t2(TECORE_DTYPE_F32, g.m, g.n, buf + inside);
  struct snap s = snap_take(buf, total);
  if (over_b)
    EXPECT_ALIAS(
        "D->data", "B->data",
        tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 0.0f, NULL, te_stream));
  else
    EXPECT_ALIAS(
        "D->data", "A->data",
        tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 0.0f, NULL, te_stream));
  snap_expect(&s, "A, B and the poisoned D after the refused GEMM");
  /* the neighbour: D right after B (16-byte aligned, not overlapping) */
  D.data = buf + abytes + bbytes;
  TE_OK(tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 0.0f, NULL, te_stream));
  gemm_expect(&g, D.data, NULL, 0, "D adjacent to B");
  gemm_case_free(&g);
  TE_OK(tecore_mem_free(buf));
}

START_TEST(test_gemm_rejects_d_over_a) { gemm_d_over(0); }
END_TEST

START_TEST(test_gemm_rejects_d_over_b) { gemm_d_over(1); }
END_TEST

/* D may be C itself (accumulation in place, te/gemm.h), but a D that
 * starts inside C reads rows it has already written. */
START_TEST(test_gemm_rejects_d_partly_over_c) {
  struct gemm_case g = {.m = 16, .n = 16, .k = 16};
  size_t dn = g.m * g.n, dbytes = dn * 4;
  tecore_devptr_t ab = te_dalloc(2 * g.m * g.k * 2 + 256), cd = te_dalloc(2 * dbytes);
  struct tecore_tensor A, B;
  gemm_operands(&g, ab, 0, g.m * g.k * 2, &A, &B);
  float *c = rand_at(cd, dn, -4, 4);
  for (size_t i = 0; i < dn; i++) c[i] = (float)(int)(c[i] * 8) / 8; /* exact sums */
  te_h2d(cd, c, dbytes);
  te_poison_dev(cd + dbytes, dbytes);
  struct tecore_tensor C = t2(TECORE_DTYPE_F32, g.m, g.n, cd);
  struct tecore_tensor D = t2(TECORE_DTYPE_F32, g.m, g.n, cd + 16 * 4);
  struct tecore_gemm_opts o = {.C = &C};
  struct snap s = snap_take(cd, 2 * dbytes);
  EXPECT_ALIAS("D->data", "opts->C->data",
               tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 1.0f, &o, te_stream));
  ck_assert_msg(strstr(tecore_last_error(), "very same range"),
                "detail \"%s\" does not say "
                "that only the same range is allowed",
                tecore_last_error());
  snap_expect(&s, "C and the poisoned D after the refused GEMM");
  /* neighbours: D right after C, then D == C (in place) */
  D.data = cd + dbytes;
  TE_OK(tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 1.0f, &o, te_stream));
  gemm_expect(&g, D.data, c, 1.0f, "D adjacent to C");
  D.data = cd;
  TE_OK(tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 1.0f, &o, te_stream));
  gemm_expect(&g, D.data, c, 1.0f, "D == C, in place");
  free(c);
  gemm_case_free(&g);
  TE_OK(tecore_mem_free(ab));
  TE_OK(tecore_mem_free(cd));
}
END_TEST

/* A caller's workspace over D was accepted (cuBLASLt scribbles on it). */
START_TEST(test_gemm_rejects_workspace_over_d) {
  struct gemm_case g = {.m = 16, .n = 16, .k = 32};
  size_t dbytes = g.m * g.n * 4;
  tecore_devptr_t ab = te_dalloc(2 * g.m * g.k * 2 + 256), dw = te_dalloc(2048 + 4096);
  struct tecore_tensor A, B;
  gemm_operands(&g, ab, 0, g.m * g.k * 2, &A, &B);
  te_poison_dev(dw, 2048 + 4096);
  struct tecore_tensor D = t2(TECORE_DTYPE_F32, g.m, g.n, dw);
  struct tecore_gemm_opts o = {.workspace = dw + 256, .workspace_bytes = 4096};
  struct snap s = snap_take(dw, 2048 + 4096);
  EXPECT_ALIAS("opts->workspace", "D->data",
               tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 0.0f, &o, te_stream));
  snap_expect(&s, "the poisoned D and workspace after the refused GEMM");
  o.workspace = dw + 2048; /* D is 1 KiB: the next 256-byte boundary past it would do too */
  ck_assert_uint_le(dbytes, 2048);
  TE_OK(tecore_gemm(&A, TECORE_GEMM_N, &B, TECORE_GEMM_T, &D, 1.0f, 0.0f, &o, te_stream));
  gemm_expect(&g, D.data, NULL, 0, "D next to the workspace");
  gemm_case_free(&g);
  TE_OK(tecore_mem_free(ab));
  TE_OK(tecore_mem_free(dw));
}
END_TEST

/* ---- optimizers ------------------------------------------------------------------------- */

/* Adam's reference, one element (float64 from the float inputs; the
 * kernels compute in float: tolerance 2e-6 relative + 1e-7). */
static void adam_ref(float *p, float g, float *m, float *v, const struct tecore_adam_config *c) {
  double gg = g + c->weight_decay * *p;
  double mm = c->beta1 * *m + (1 - c->beta1) * gg, vv = c->beta2 * *v + (1 - c->beta2) * gg * gg;
  double bc1 = 1 - pow(c->beta1, (double)c->step), bc2 = 1 - pow(c->beta2, (double)c->step);
  double denom = sqrt(vv) / sqrt(bc2) + c->eps;
  *p = (float)(*p - c->lr / bc1 * mm / denom);
  *m = (float)mm;
  *v = (float)vv;
}

/* count tensors of n floats, each [param | grad | exp_avg | exp_avg_sq]
 * back to back in buf (adjacent, legal). */
static void optim_layout(struct tecore_optim_tensor *t, size_t count, size_t n,
                         tecore_devptr_t buf) {
  for (size_t i = 0; i < count; i++) {
    tecore_devptr_t b = buf + i * 4 * n * 4;
    t[i] = (struct tecore_optim_tensor){.param = b,
                                        .grad = b + n * 4,
                                        .exp_avg = b + 2 * n * 4,
                                        .exp_avg_sq = b + 3 * n * 4,
                                        .numel = n,
                                        .grad_dtype = TECORE_DTYPE_F32};
  }
}

/* Tensors of one Adam step overlapping (a param over another tensor's
 * moment) were accepted: the step read values another thread had written. */
START_TEST(test_adam_rejects_overlapping_tensors) {
  size_t n = 64 + te_rand_below(64), count = 3, total = count * 4 * n;
  tecore_devptr_t buf = te_dalloc(total * 4);
  float *h = rand_at(buf, total, 0.01f, 1.0f); /* exp_avg_sq >= 0 */
  struct tecore_optim_tensor t[3];
  optim_layout(t, count, n, buf);
  struct tecore_adam_config cfg = {
      .lr = 1e-2, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .step = 3};
  struct tecore_optim_tensor bad[3] = {t[0], t[1], t[2]};
  bad[2].param = t[1].exp_avg + 8; /* partly over tensor 1's first moment */
  struct snap s = snap_take(buf, total * 4);
  EXPECT_ALIAS("tensors[1].exp_avg", "tensors[2].param",
               tecore_adam_step(bad, count, &cfg, 0, 0, te_stream));
  snap_expect(&s, "every tensor after the refused Adam step");
  bad[2] = t[2];
  bad[2].grad = t[0].param; /* a gradient read where a param is written */
  s = snap_take(buf, total * 4);
  EXPECT_ALIAS("tensors[0].param", "tensors[2].grad",
               tecore_adam_step(bad, count, &cfg, 0, 0, te_stream));
  snap_expect(&s, "every tensor after the refused Adam step");
  /* the neighbour: the adjacent layout */
  TE_OK(tecore_adam_step(t, count, &cfg, 0, 0, te_stream));
  float *got = get_f32(buf, total);
  for (size_t i = 0; i < count; i++) {
    float *b = h + i * 4 * n;
    for (size_t j = 0; j < n; j++) adam_ref(&b[j], b[n + j], &b[2 * n + j], &b[3 * n + j], &cfg);
  }
  te_expect_f32_near(got, h, total, 1e-7, 2e-6, "Adam on adjacent tensors");
  free(got);
  free(h);
  TE_OK(tecore_mem_free(buf));
}
END_TEST

/* The same for SGD with momentum: a momentum buffer over a gradient. */
START_TEST(test_sgd_rejects_overlapping_tensors) {
  size_t n = 64 + te_rand_below(64), count = 2, total = count * 4 * n;
  tecore_devptr_t buf = te_dalloc(total * 4);
  float *h = rand_at(buf, total, -1.0f, 1.0f);
  struct tecore_optim_tensor t[2];
  optim_layout(t, count, n, buf);
  struct tecore_sgd_config cfg = {.lr = 0.05, .momentum = 0.9, .dampening = 0.1, .step = 2};
  struct tecore_optim_tensor bad[2] = {t[0], t[1]};
  bad[1].exp_avg = t[0].grad + 4 * (n / 2);
  struct snap s = snap_take(buf, total * 4);
  EXPECT_ALIAS("tensors[1].exp_avg", "tensors[0].grad",
               tecore_sgd_step(bad, count, &cfg, 0, 0, te_stream));
  snap_expect(&s, "every tensor after the refused SGD step");
  TE_OK(tecore_sgd_step(t, count, &cfg, 0, 0, te_stream));
  float *got = get_f32(buf, total);
  for (size_t i = 0; i < count; i++) {
    float *b = h + i * 4 * n;
    for (size_t j = 0; j < n; j++) {
      double d = b[n + j], buf_m = cfg.momentum * b[2 * n + j] + (1 - cfg.dampening) * d;
      b[2 * n + j] = (float)buf_m;
      b[j] = (float)(b[j] - cfg.lr * buf_m);
    }
  }
  te_expect_f32_near(got, h, total, 1e-7, 2e-6, "SGD on adjacent tensors");
  free(got);
  free(h);
  TE_OK(tecore_mem_free(buf));
}
END_TEST

/* An FP8 model copy whose scale and scale_inv were one float: the step
 * wrote 1/scale where it read the scale. */
START_TEST(test_adam_rejects_model_scale_equal_scale_inv) {
  size_t n = 32 + te_rand_below(32), total = 4 * n, ns = (n + 15) & ~(size_t)15;
  tecore_devptr_t buf = te_dalloc(total * 4), w = te_dalloc(ns + 64);
  float *h = rand_at(buf, total, 0.01f, 1.0f);
  te_poison_dev(w, ns + 64);
  float sc[3] = {2.0f, 0, 0};
  te_h2d(w + ns, sc, 4);
  struct tecore_optim_tensor t;
  optim_layout(&t, 1, n, buf);
  t.model = w;
  t.model_dtype = TECORE_DTYPE_E4M3;
  t.model_scale = t.model_scale_inv = w + ns;
  struct tecore_adam_config cfg = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .step = 1};
  struct snap s = snap_take(buf, total * 4), sw = snap_take(w, ns + 64);
  EXPECT_ALIAS("tensors[0].model_scale_inv", "tensors[0].model_scale",
               tecore_adam_step(&t, 1, &cfg, 0, 0, te_stream));
  snap_expect(&s, "the tensors after the refused step");
  snap_expect(&sw, "the poisoned model copy and its scale after the refused step");
  t.model_scale_inv = w + ns + 4; /* the neighbour */
  TE_OK(tecore_adam_step(&t, 1, &cfg, 0, 0, te_stream));
  float inv = 0;
  te_d2h(&inv, t.model_scale_inv, 4);
  ck_assert_msg(inv == 0.5f, "model_scale_inv is %g, want 0.5 (exact)", (double)inv);
  float *got = get_f32(buf, n);
  for (size_t j = 0; j < n; j++) adam_ref(&h[j], h[n + j], &h[2 * n + j], &h[3 * n + j], &cfg);
  te_expect_f32_near(got, h, n, 1e-7, 2e-6, "param next to the model copy");
  free(got);
  free(h);
  TE_OK(tecore_mem_free(buf));
  TE_OK(tecore_mem_free(w));
}
END_TEST

/* unscale_multi's out[i] may be in[i] itself, but out[1] over in[0] was
 * accepted: tensor 0 read values already scaled. */
START_TEST(test_unscale_rejects_out_over_another_input) {
  /* [in[0]: 2n][in[1]: n][out[1]: n][out[0]: 2n] */
  size_t n = 100 + te_rand_below(100);
  tecore_devptr_t buf = te_dalloc(6 * n * 4), sc = te_dalloc(4);
  float *h = rand_at(buf, 3 * n, -8, 8), s4 = 0.25f;
  te_poison_dev(buf + 3 * n * 4, 3 * n * 4);
  te_h2d(sc, &s4, 4);
  struct tecore_tensor in[2] = {t2(TECORE_DTYPE_F32, 1, 2 * n, buf),
                                t2(TECORE_DTYPE_F32, 1, n, buf + 2 * n * 4)};
  struct tecore_tensor out[2] = {t2(TECORE_DTYPE_F32, 1, 2 * n, buf + 4 * n * 4),
                                 t2(TECORE_DTYPE_F32, 1, n, buf + 8)};
  struct snap s = snap_take(buf, 6 * n * 4);
  EXPECT_ALIAS("out[1]", "in[0]", tecore_unscale_multi(in, out, 2, sc, 0, te_stream));
  snap_expect(&s, "inputs and the poisoned outputs after the refused unscale");
  out[1].data = buf + 3 * n * 4; /* adjacent to in[1] */
  out[0] = in[0];                /* in place */
  TE_OK(tecore_unscale_multi(in, out, 2, sc, 0, te_stream));
  float *got = get_f32(buf, 4 * n), *want = malloc(4 * n * 4);
  for (size_t i = 0; i < 2 * n; i++) want[i] = h[i] * 0.25f;
  for (size_t i = 0; i < n; i++) {
    want[2 * n + i] = h[2 * n + i];
    want[3 * n + i] = h[2 * n + i] * 0.25f;
  }
  te_expect_f32_near(got, want, 4 * n, 0, 0, "unscaled in place and adjacent (exact)");
  free(got);
  free(want);
  free(h);
  TE_OK(tecore_mem_free(buf));
  TE_OK(tecore_mem_free(sc));
}
END_TEST

/* l2norm's result inside its own workspace: the final sum overwrote a
 * partial it had not read yet. */
START_TEST(test_l2norm_rejects_norm_inside_workspace) {
  size_t n = 20000 + te_rand_below(20000), ws = 0;
  tecore_devptr_t x = te_dalloc(n * 4);
  float *h = rand_at(x, n, -1, 1);
  struct tecore_tensor t = t2(TECORE_DTYPE_F32, 1, n, x);
  TE_OK(tecore_l2norm_multi_workspace_size(&t, 1, &ws));
  ck_assert_uint_ge(ws, 16);
  tecore_devptr_t w = te_dalloc(ws + 16);
  te_poison_dev(w, ws + 16);
  struct snap s = snap_take(w, ws + 16);
  EXPECT_ALIAS("norm", "workspace", tecore_l2norm_multi(&t, 1, w, ws, w + 8, 0, te_stream));
  snap_expect(&s, "the poisoned workspace and norm after the refused call");
  TE_OK(tecore_l2norm_multi(&t, 1, w, ws, w + ws, 0, te_stream));
  float got = 0;
  te_d2h(&got, w + ws, 4);
  double ss = 0;
  for (size_t i = 0; i < n; i++) ss += (double)h[i] * h[i];
  ck_assert_msg(fabs(got - sqrt(ss)) <= 1e-6 * sqrt(ss),
                "norm next to the workspace: %.9g, want "
                "%.9g (tolerance 1e-6 relative)",
                (double)got, sqrt(ss));
  free(h);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(w));
}
END_TEST

/* ---- activations ------------------------------------------------------------------------- */

static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
}
static double dgelu_d(double x) {
  double u = 0.7978845608028654 * (x + 0.044715 * x * x * x), t = tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * 0.7978845608028654 * (1 + 3 * 0.044715 * x * x);
}
/* float GELU against float64: 4e-6 relative + 1e-6 (tanh in float). */
static void gelu_expect(tecore_devptr_t d, const float *x, size_t n, const char *what) {
  float *got = get_f32(d, n), *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) want[i] = (float)gelu_d(x[i]);
  te_expect_f32_near(got, want, n, 1e-6, 4e-6, what);
  free(got);
  free(want);
}

/* An activation output that started inside its input (not in place)
 * was accepted: later elements read outputs. */
START_TEST(test_act_fwd_rejects_out_partly_over_in) {
  size_t n = 1000 + te_rand_below(1000);
  tecore_devptr_t buf = te_dalloc(2 * n * 4 + 64);
  float *x = rand_at(buf, n, -3, 3);
  te_poison_dev(buf + n * 4, n * 4 + 64);
  struct tecore_tensor in = t2(TECORE_DTYPE_F32, 1, n, buf);
  struct tecore_tensor out = t2(TECORE_DTYPE_F32, 1, n, buf + 16);
  struct snap s = snap_take(buf, 2 * n * 4 + 64);
  EXPECT_ALIAS("out->data", "in->data", tecore_act_fwd(TECORE_ACT_GELU, &in, &out, 0, te_stream));
  snap_expect(&s, "the input and poisoned output after the refused call");
  out.data = buf + n * 4; /* adjacent */
  TE_OK(tecore_act_fwd(TECORE_ACT_GELU, &in, &out, 0, te_stream));
  gelu_expect(out.data, x, n, "GELU next to its input");
  out.data = buf; /* exactly in place: allowed (te/activation.h) */
  TE_OK(tecore_act_fwd(TECORE_ACT_GELU, &in, &out, 0, te_stream));
  gelu_expect(out.data, x, n, "GELU in place");
  free(x);
  TE_OK(tecore_mem_free(buf));
}
END_TEST

/* dx partly over dy was accepted. */
START_TEST(test_act_bwd_rejects_dx_partly_over_dy) {
  size_t n = 500 + te_rand_below(1000);
  tecore_devptr_t buf = te_dalloc(3 * n * 4);
  float *x = rand_at(buf, n, -3, 3), *dy = rand_at(buf + n * 4, n, -1, 1);
  te_poison_dev(buf + 2 * n * 4, n * 4);
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, 1, n, buf),
                       DY = t2(TECORE_DTYPE_F32, 1, n, buf + n * 4);
  struct tecore_tensor DX = t2(TECORE_DTYPE_F32, 1, n, buf + n * 4 + 4 * (n / 2));
  struct snap s = snap_take(buf, 3 * n * 4);
  EXPECT_ALIAS("dx->data", "dy->data", tecore_act_bwd(TECORE_ACT_GELU, &DY, &X, &DX, te_stream));
  snap_expect(&s, "x, dy and the poisoned dx after the refused call");
  DX.data = buf + 2 * n * 4;
  TE_OK(tecore_act_bwd(TECORE_ACT_GELU, &DY, &X, &DX, te_stream));
  float *got = get_f32(DX.data, n), *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) want[i] = (float)(dy[i] * dgelu_d(x[i]));
  te_expect_f32_near(got, want, n, 1e-6, 8e-6, "dGELU next to dy"); /* float tanh, 8e-6 rel */
  free(got);
  free(want);
  free(x);
  free(dy);
  TE_OK(tecore_mem_free(buf));
}
END_TEST

/* An FP8 output whose scale and scale_inv were one float. */
START_TEST(test_act_fwd_rejects_scale_equal_scale_inv) {
  size_t n = 256 + 16 * te_rand_below(16);
  tecore_devptr_t x = te_dalloc(n * 4), q = te_dalloc(n + 16);
  float *hx = rand_at(x, n, -2, 2), one[2] = {1.0f, 0};
  te_poison_dev(q, n + 16);
  te_h2d(q + n, one, 4);
  struct tecore_tensor in = t2(TECORE_DTYPE_F32, 1, n, x), out = t2(TECORE_DTYPE_E4M3, 1, n, q);
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = out.scale_inv = q + n;
  struct snap s = snap_take(q, n + 16);
  EXPECT_ALIAS("out->scale_inv", "out->scale",
               tecore_act_fwd(TECORE_ACT_RELU, &in, &out, 0, te_stream));
  snap_expect(&s, "the poisoned output and its scale after the refused call");
  out.scale_inv = q + n + 4;
  TE_OK(tecore_act_fwd(TECORE_ACT_RELU, &in, &out, 0, te_stream));
  /* scale 1: e4m3 of relu(x); x in [-2, 2) rounds within e4m3's 2^-3 steps */
  unsigned char *b = malloc(n);
  te_d2h(b, q, n);
  for (size_t i = 0; i < n; i++) {
    float r = hx[i] > 0 ? hx[i] : 0.0f;
    /* decode e4m3 (positive values only here) */
    int e = (b[i] >> 3) & 15, m = b[i] & 7;
    double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
    ck_assert_msg(!(b[i] & 0x80) && fabs(v - r) <= ldexp(fmax(fabs(r), 1.0 / 64), -4),
                  "q[%zu] = 0x%02x (%g), relu(x) = %g (tolerance: half an e4m3 step)", i, b[i], v,
                  (double)r);
  }
  free(b);
  free(hx);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(q));
}
END_TEST

/* e4m3 byte to its value (finite codes). */
static double e4m3_value(unsigned char b) {
  int e = (b >> 3) & 15, m = b & 7;
  double v = e ? ldexp(1.0 + m / 8.0, e - 7) : ldexp(m / 8.0, -6);
  return (b & 0x80) ? -v : v;
}

/* A cast-transpose whose output's scale and scale_inv were one float:
 * the kernel wrote 1/scale where it read the scale. */
START_TEST(test_cast_transpose_rejects_scale_equal_scale_inv) {
  size_t rows = 16 + 16 * te_rand_below(3), cols = 32, n = rows * cols;
  tecore_devptr_t x = te_dalloc(n * 4), q = te_dalloc(2 * n + 16);
  float *hx = malloc(n * 4), one = 1.0f;
  for (size_t i = 0; i < n; i++) hx[i] = (float)((int)te_rand_below(33) - 16) / 8.0f; /* exact in e4m3 */
  te_h2d(x, hx, n * 4);
  te_poison_dev(q, 2 * n + 16);
  te_h2d(q + 2 * n, &one, 4);
  struct tecore_tensor in = t2(TECORE_DTYPE_F32, rows, cols, x);
  struct tecore_tensor out = t2(TECORE_DTYPE_E4M3, rows, cols, q);
  out.columnwise_data = q + n;
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = out.scale_inv = q + 2 * n;
  struct snap s = snap_take(q, 2 * n + 16);
  EXPECT_ALIAS("out->scale_inv", "out->scale", tecore_cast_transpose(&in, &out, te_stream));
  snap_expect(&s, "the poisoned copies and the scale after the refused call");
  out.scale_inv = q + 2 * n + 4; /* the neighbour */
  TE_OK(tecore_cast_transpose(&in, &out, te_stream));
  unsigned char *b = malloc(2 * n);
  float inv = 0;
  te_d2h(b, q, 2 * n);
  te_d2h(&inv, out.scale_inv, 4);
  ck_assert_msg(inv == 1.0f, "out->scale_inv is %g, want 1 (exact)", (double)inv);
  for (size_t r = 0; r < rows; r++)
    for (size_t c = 0; c < cols; c++) {
      double want = hx[r * cols + c];
      ck_assert_msg(e4m3_value(b[r * cols + c]) == want && e4m3_value(b[n + c * rows + r]) == want,
                    "[%zu][%zu]: rowwise %g, columnwise %g, want %g (exact)", r, c,
                    e4m3_value(b[r * cols + c]), e4m3_value(b[n + c * rows + r]), want);
    }
  free(b);
  free(hx);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(q));
}
END_TEST

/* ---- norms ----------------------------------------------------------------------------- */

struct nref {
  size_t rows, h;
  float *x, *g, *b, *dy; /* host inputs */
  double *mu, *rs;       /* per row */
};

static void nref_stats(struct nref *r, int ln, float eps) {
  r->mu = calloc(r->rows, sizeof(double));
  r->rs = calloc(r->rows, sizeof(double));
  for (size_t i = 0; i < r->rows; i++) {
    double s = 0, ss = 0;
    for (size_t j = 0; j < r->h; j++) s += r->x[i * r->h + j];
    double mu = ln ? s / (double)r->h : 0;
    for (size_t j = 0; j < r->h; j++) {
      double d = r->x[i * r->h + j] - mu;
      ss += d * d;
    }
    r->mu[i] = mu;
    r->rs[i] = 1.0 / sqrt(ss / (double)r->h + eps);
  }
}

static void nref_free(struct nref *r) {
  free(r->x);
  free(r->g);
  free(r->b);
  free(r->dy);
  free(r->mu);
  free(r->rs);
}

/* LayerNorm with mu == rsigma was accepted: one vector of two results. */
START_TEST(test_layernorm_rejects_mu_equal_rsigma) {
  struct nref r = {.rows = 4 + te_rand_below(8), .h = 64};
  size_t nx = r.rows * r.h;
  tecore_devptr_t xb = te_dalloc(nx * 4), wb = te_dalloc(2 * r.h * 4), yb = te_dalloc(nx * 4),
                  st = te_dalloc(2 * r.rows * 4);
  r.x = rand_at(xb, nx, -2, 2);
  r.g = rand_at(wb, r.h, 0.5f, 1.5f);
  r.b = rand_at(wb + r.h * 4, r.h, -0.5f, 0.5f);
  te_poison_dev(yb, nx * 4);
  te_poison_dev(st, 2 * r.rows * 4);
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, r.rows, r.h, xb),
                       Y = t2(TECORE_DTYPE_F32, r.rows, r.h, yb);
  struct tecore_tensor G = t2(TECORE_DTYPE_F32, 1, r.h, wb),
                       B = t2(TECORE_DTYPE_F32, 1, r.h, wb + r.h * 4);
  float eps = 1e-5f;
  struct snap sy = snap_take(yb, nx * 4), ss = snap_take(st, 2 * r.rows * 4);
  EXPECT_ALIAS("mu", "rsigma", tecore_layernorm_fwd(&X, &G, &B, eps, 0, &Y, st, st, te_stream));
  snap_expect(&sy, "the poisoned y after the refused call");
  snap_expect(&ss, "the poisoned mu/rsigma after the refused call");
  /* the neighbour: rsigma right after mu */
  TE_OK(tecore_layernorm_fwd(&X, &G, &B, eps, 0, &Y, st, st + r.rows * 4, te_stream));
  nref_stats(&r, 1, eps);
  float *y = get_f32(yb, nx), *s2 = get_f32(st, 2 * r.rows), *wy = malloc(nx * 4),
        *ws = malloc(2 * r.rows * 4);
  for (size_t i = 0; i < r.rows; i++) {
    ws[i] = (float)r.mu[i];
    ws[r.rows + i] = (float)r.rs[i];
    for (size_t j = 0; j < r.h; j++)
      wy[i * r.h + j] = (float)((r.x[i * r.h + j] - r.mu[i]) * r.rs[i] * r.g[j] + r.b[j]);
  }
  te_expect_f32_near(y, wy, nx, 1e-5, 1e-5, "y (float sums: 1e-5)");
  te_expect_f32_near(s2, ws, 2 * r.rows, 1e-6, 1e-5, "mu and rsigma side by side");
  free(y);
  free(s2);
  free(wy);
  free(ws);
  nref_free(&r);
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(wb));
  TE_OK(tecore_mem_free(yb));
  TE_OK(tecore_mem_free(st));
}
END_TEST

/* RMSNorm's statistics written over its output. */
START_TEST(test_rmsnorm_rejects_rsigma_over_y) {
  struct nref r = {.rows = 4 + te_rand_below(8), .h = 32};
  size_t nx = r.rows * r.h;
  tecore_devptr_t xb = te_dalloc(nx * 4), wb = te_dalloc(r.h * 4),
                  yb = te_dalloc(nx * 4 + r.rows * 4);
  r.x = rand_at(xb, nx, -2, 2);
  r.g = rand_at(wb, r.h, 0.5f, 1.5f);
  te_poison_dev(yb, nx * 4 + r.rows * 4);
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, r.rows, r.h, xb),
                       Y = t2(TECORE_DTYPE_F32, r.rows, r.h, yb);
  struct tecore_tensor G = t2(TECORE_DTYPE_F32, 1, r.h, wb);
  float eps = 1e-6f;
  struct snap s = snap_take(yb, nx * 4 + r.rows * 4);
  EXPECT_ALIAS("y->data", "rsigma",
               tecore_rmsnorm_fwd(&X, &G, eps, 0, &Y, yb + 4 * r.h, te_stream));
  snap_expect(&s, "the poisoned y and rsigma after the refused call");
  TE_OK(tecore_rmsnorm_fwd(&X, &G, eps, 0, &Y, yb + nx * 4, te_stream));
  nref_stats(&r, 0, eps);
  float *y = get_f32(yb, nx + r.rows), *w = malloc((nx + r.rows) * 4);
  for (size_t i = 0; i < r.rows; i++) {
    w[nx + i] = (float)r.rs[i];
    for (size_t j = 0; j < r.h; j++) w[i * r.h + j] = (float)(r.x[i * r.h + j] * r.rs[i] * r.g[j]);
  }
  te_expect_f32_near(y, w, nx + r.rows, 1e-6, 1e-5, "y and rsigma adjacent (float sums: 1e-5)");
  free(y);
  free(w);
  nref_free(&r);
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(wb));
  TE_OK(tecore_mem_free(yb));
}
END_TEST

/* The backward of one norm with the host reference's statistics: inputs
 * x, dy, gamma random; mu and rsigma from the reference (uploaded). */
struct nbwd {
  struct nref r;
  int ln;
  tecore_devptr_t x, dy, g, mu, rs, out; /* out: dx | dgamma | dbeta | workspace (poisoned) */
  size_t ws, out_bytes;
  struct tecore_tensor X, DY, G, DX, DG, DB;
};

static void nbwd_new(struct nbwd *b, int ln) {
  memset(b, 0, sizeof *b);
  b->ln = ln;
  b->r.rows = 8 + te_rand_below(8);
  b->r.h = 64;
  size_t nx = b->r.rows * b->r.h, h = b->r.h, rows = b->r.rows;
  b->x = te_dalloc(nx * 4);
  b->dy = te_dalloc(nx * 4);
  b->g = te_dalloc(h * 4);
  b->mu = te_dalloc(rows * 4);
  b->rs = te_dalloc(rows * 4);
  b->r.x = rand_at(b->x, nx, -2, 2);
  b->r.dy = rand_at(b->dy, nx, -1, 1);
  b->r.g = rand_at(b->g, h, 0.5f, 1.5f);
  nref_stats(&b->r, ln, 1e-5f);
  float *m = malloc(rows * 4), *s = malloc(rows * 4);
  for (size_t i = 0; i < rows; i++) {
    m[i] = (float)b->r.mu[i];
    s[i] = (float)b->r.rs[i];
    b->r.mu[i] = m[i]; /* the reference uses what the kernel reads */
    b->r.rs[i] = s[i];
  }
  te_h2d(b->mu, m, rows * 4);
  te_h2d(b->rs, s, rows * 4);
  free(m);
  free(s);
  TE_OK(tecore_norm_bwd_workspace_size(ln ? TECORE_NORM_LAYERNORM : TECORE_NORM_RMSNORM, rows, h,
                                       &b->ws));
  b->out_bytes = nx * 4 + 2 * h * 4 + b->ws + 16;
  b->out = te_dalloc(b->out_bytes + 256);
  te_poison_dev(b->out, b->out_bytes + 256);
  b->X = t2(TECORE_DTYPE_F32, rows, h, b->x);
  b->DY = t2(TECORE_DTYPE_F32, rows, h, b->dy);
  b->G = t2(TECORE_DTYPE_F32, 1, h, b->g);
  b->DX = t2(TECORE_DTYPE_F32, rows, h, b->out);
  b->DG = t2(TECORE_DTYPE_F32, 1, h, b->out + nx * 4);
  b->DB = t2(TECORE_DTYPE_F32, 1, h, b->out + nx * 4 + h * 4);
}

/* The workspace of the legal layout: 16-byte aligned, right after dbeta. */
static tecore_devptr_t nbwd_ws(const struct nbwd *b) {
  return b->out + b->r.rows * b->r.h * 4 + 2 * b->r.h * 4;
}

static tecore_result_t nbwd_run(struct nbwd *b, tecore_devptr_t ws,
                                const struct tecore_tensor *extra) {
  if (b->ln && extra)
    return tecore_layernorm_bwd_add(&b->DY, &b->X, b->mu, b->rs, &b->G, extra, 0, &b->DX, &b->DG,
                                    &b->DB, ws, b->ws, te_stream);
  if (b->ln)
    return tecore_layernorm_bwd(&b->DY, &b->X, b->mu, b->rs, &b->G, 0, &b->DX, &b->DG, &b->DB, ws,
                                b->ws, te_stream);
  if (extra)
    return tecore_rmsnorm_bwd_add(&b->DY, &b->X, b->rs, &b->G, extra, 0, &b->DX, &b->DG, ws, b->ws,
                                  te_stream);
  return tecore_rmsnorm_bwd(&b->DY, &b->X, b->rs, &b->G, 0, &b->DX, &b->DG, ws, b->ws, te_stream);
}

/* dx, dgamma (and dbeta) against float64; extra (host) added to dx when
 * given.  Tolerance 2e-5 relative to the terms' magnitude (float sums). */
static void nbwd_expect(struct nbwd *b, const float *extra) {
  size_t rows = b->r.rows, h = b->r.h, nx = rows * h;
  float *dx = get_f32(b->DX.data, nx), *dg = get_f32(b->DG.data, h);
  double *wdg = calloc(h, sizeof(double)), *wdb = calloc(h, sizeof(double));
  for (size_t i = 0; i < rows; i++) {
    const float *x = b->r.x + i * h, *dy = b->r.dy + i * h;
    double a = 0, c = 0, mag = 0;
    for (size_t j = 0; j < h; j++) {
      double xh = (x[j] - b->r.mu[i]) * b->r.rs[i], gd = dy[j] * (double)b->r.g[j];
      a += gd;
      c += gd * xh;
      mag += fabs(gd) * (1 + fabs(xh));
      wdg[j] += dy[j] * xh;
      wdb[j] += dy[j];
    }
    a /= (double)h;
    c /= (double)h;
    for (size_t j = 0; j < h; j++) {
      double xh = (x[j] - b->r.mu[i]) * b->r.rs[i], gd = dy[j] * (double)b->r.g[j];
      double want = b->r.rs[i] * (gd - (b->ln ? a : 0) - xh * c) + (extra ? extra[i * h + j] : 0);
      double tol = 2e-5 * (b->r.rs[i] * (fabs(gd) + mag / (double)h) +
                           (extra ? fabs(extra[i * h + j]) : 0)) +
                   1e-6;
      ck_assert_msg(fabs(dx[i * h + j] - want) <= tol,
                    "dx[%zu][%zu] = %.9g, want %.9g (tolerance %g)", i, j, (double)dx[i * h + j],
                    want, tol);
    }
  }
  for (size_t j = 0; j < h; j++)
    ck_assert_msg(fabs(dg[j] - wdg[j]) <= 2e-5 * (double)rows * 4 + 1e-6,
                  "dgamma[%zu] = %.9g, want %.9g", j, (double)dg[j], wdg[j]);
  if (b->ln) {
    float *db = get_f32(b->DB.data, h);
    for (size_t j = 0; j < h; j++)
      ck_assert_msg(fabs(db[j] - wdb[j]) <= 2e-5 * (double)rows + 1e-6,
                    "dbeta[%zu] = %.9g, want %.9g", j, (double)db[j], wdb[j]);
    free(db);
  }
  free(dx);
  free(dg);
  free(wdg);
  free(wdb);
}

static void nbwd_free(struct nbwd *b) {
  nref_free(&b->r);
  tecore_devptr_t p[] = {b->x, b->dy, b->g, b->mu, b->rs, b->out};
  for (size_t i = 0; i < 6; i++) TE_OK(tecore_mem_free(p[i]));
}

/* LayerNorm backward with dgamma == dbeta: two sums into one vector. */
START_TEST(test_layernorm_bwd_rejects_dgamma_equal_dbeta) {
  struct nbwd b;
  nbwd_new(&b, 1);
  struct tecore_tensor db = b.DB;
  b.DB = b.DG;
  struct snap s = snap_take(b.out, b.out_bytes);
  EXPECT_ALIAS("dgamma->data", "dbeta->data", nbwd_run(&b, nbwd_ws(&b), NULL));
  snap_expect(&s, "the poisoned dx, dgamma, dbeta, workspace after the refused call");
  b.DB = db; /* adjacent */
  TE_OK(nbwd_run(&b, nbwd_ws(&b), NULL));
  nbwd_expect(&b, NULL);
  nbwd_free(&b);
}
END_TEST

/* A workspace over dx: the partial sums and the gradient in one place. */
static void norm_ws_over_dx(int ln) {
  struct nbwd b;
  nbwd_new(&b, ln);
  struct snap s = snap_take(b.out, b.out_bytes);
  EXPECT_ALIAS("workspace", "dx->data", nbwd_run(&b, b.out + 16 * (b.r.h / 4), NULL));
  snap_expect(&s, "the poisoned outputs after the refused call");
  TE_OK(nbwd_run(&b, nbwd_ws(&b), NULL));
  nbwd_expect(&b, NULL);
  nbwd_free(&b);
}
START_TEST(test_layernorm_bwd_rejects_workspace_over_dx) { norm_ws_over_dx(1); }
END_TEST
START_TEST(test_rmsnorm_bwd_rejects_workspace_over_dx) { norm_ws_over_dx(0); }
END_TEST

/* a _bwd_add call's extra gradient may be dx itself (te/norm.h), but one
 * that started inside dx was accepted. */
static void norm_add_extra_partly_over_dx(int ln) {
  struct nbwd b;
  nbwd_new(&b, ln);
  size_t nx = b.r.rows * b.r.h;
  tecore_devptr_t e = te_dalloc(nx * 4 + 64);
  float *he = rand_at(e, nx + 16, -1, 1);
  struct tecore_tensor E = t2(TECORE_DTYPE_F32, b.r.rows, b.r.h, e);
  b.DX.data = e + 64; /* dx starts inside extra_grad */
  struct snap s = snap_take(e, nx * 4 + 64), so = snap_take(b.out, b.out_bytes);
  EXPECT_ALIAS("dx->data", "extra_grad->data", nbwd_run(&b, nbwd_ws(&b), &E));
  ck_assert_msg(strstr(tecore_last_error(), "very same range"),
                "detail \"%s\" does not say "
                "that only the same range is allowed",
                tecore_last_error());
  snap_expect(&s, "extra_grad after the refused call");
  snap_expect(&so, "the poisoned dgamma and workspace after the refused call");
  /* the neighbours: dx adjacent to extra_grad, then dx == extra_grad */
  b.DX.data = b.out;
  TE_OK(nbwd_run(&b, nbwd_ws(&b), &E));
  nbwd_expect(&b, he);
  b.DX.data = e;
  TE_OK(nbwd_run(&b, nbwd_ws(&b), &E));
  nbwd_expect(&b, he);
  free(he);
  TE_OK(tecore_mem_free(e));
  nbwd_free(&b);
}
START_TEST(test_rmsnorm_bwd_add_rejects_extra_grad_partly_over_dx) {
  norm_add_extra_partly_over_dx(0);
}
END_TEST
START_TEST(test_layernorm_bwd_add_rejects_extra_grad_partly_over_dx) {
  norm_add_extra_partly_over_dx(1);
}
END_TEST

/* An FP8 y of layernorm whose scale and scale_inv were one float. */
START_TEST(test_layernorm_rejects_scale_equal_scale_inv) {
  size_t rows = 4, h = 32, nx = rows * h;
  tecore_devptr_t xb = te_dalloc(nx * 4), wb = te_dalloc(2 * h * 4), q = te_dalloc(nx + 16);
  float *x = rand_at(xb, nx, -2, 2), *g = rand_at(wb, 2 * h, 0.5f, 1.0f), one = 1.0f;
  te_poison_dev(q, nx + 16);
  te_h2d(q + nx, &one, 4);
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, rows, h, xb), G = t2(TECORE_DTYPE_F32, 1, h, wb);
  struct tecore_tensor B = t2(TECORE_DTYPE_F32, 1, h, wb + h * 4),
                       Y = t2(TECORE_DTYPE_E4M3, rows, h, q);
  Y.scaling = TECORE_SCALING_DELAYED;
  Y.scale = Y.scale_inv = q + nx;
  struct snap s = snap_take(q, nx + 16);
  EXPECT_ALIAS("y->scale_inv", "y->scale",
               tecore_layernorm_fwd(&X, &G, &B, 1e-5f, 0, &Y, 0, 0, te_stream));
  snap_expect(&s, "the poisoned y and its scale after the refused call");
  Y.scale_inv = q + nx + 4;
  TE_OK(tecore_layernorm_fwd(&X, &G, &B, 1e-5f, 0, &Y, 0, 0, te_stream));
  float inv = 0;
  te_d2h(&inv, Y.scale_inv, 4);
  ck_assert_msg(inv == 1.0f, "y->scale_inv is %g, want 1 (exact)", (double)inv);
  free(x);
  free(g);
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(wb));
  TE_OK(tecore_mem_free(q));
}
END_TEST

/* ---- the fuser ---------------------------------------------------------------------------- */

/* A Linear sequence [rows][in] -> [rows][out] with bias, built. */
static tecore_seq_t *lin_seq(size_t rows, size_t in, size_t out) {
  struct tecore_seq_config cfg = {
      .rows = rows, .features = in, .dtype = TECORE_DTYPE_F32, .seed = te_rand_u64()};
  tecore_seq_t *s = NULL;
  TE_OK(tecore_seq_create(&cfg, &s));
  struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = out, .bias = 1};
  TE_OK(tecore_seq_add(s, &lin, NULL));
  TE_OK(tecore_seq_build(s, te_stream));
  return s;
}

/* f rounded to bf16, nearest even (finite inputs): an F32 sequence's
 * Linear runs its GEMMs on bf16 copies of x, W and dy (te/ops.h). */
static double bf16r(float f) {
  uint32_t u = te_f32_bits_of(f);
  u += 0x7fffu + ((u >> 16) & 1u);
  return te_f32_from_bits(u & 0xffff0000u);
}

/* The weight [out][in] of the sequence's Linear, on the host. */
static float *lin_weight(tecore_seq_t *s) {
  struct tecore_seq_param p[2];
  size_t n = 0;
  TE_OK(tecore_seq_params(s, p, 2, &n));
  ck_assert_uint_eq(n, 2);
  return get_f32(p[0].value.data, tecore_tensor_numel(&p[0].value));
}

/* seq_backward writing dx into the forward's input, which the weight
 * gradient of that same backward still reads (and te/ops.h says stays
 * unchanged until that backward ran). */
START_TEST(test_seq_backward_rejects_dx_over_forward_input) {
  size_t rows = 8, in = 16, out = 24;
  tecore_seq_t *s = lin_seq(rows, in, out);
  tecore_devptr_t xb = te_dalloc(2 * rows * in * 4), yb = te_dalloc(rows * out * 4),
                  dyb = te_dalloc(rows * out * 4);
  float *x = rand_at(xb, rows * in, -1, 1), *dy = rand_at(dyb, rows * out, -1, 1);
  te_poison_dev(xb + rows * in * 4, rows * in * 4);
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, rows, in, xb),
                       Y = t2(TECORE_DTYPE_F32, rows, out, yb);
  struct tecore_tensor DY = t2(TECORE_DTYPE_F32, rows, out, dyb);
  struct tecore_tensor DX = t2(TECORE_DTYPE_F32, rows, in, xb + 4 * in); /* over rows 1.. of x */
  TE_OK(tecore_seq_forward(s, &X, &Y, 0, te_stream));
  struct snap sx = snap_take(xb, 2 * rows * in * 4);
  EXPECT_ALIAS("dx", "forward's in", tecore_seq_backward(s, &DY, &DX, te_stream));
  snap_expect(&sx, "x and the poisoned dx after the refused backward");
  DX.data = xb + rows * in * 4; /* adjacent */
  TE_OK(tecore_seq_backward(s, &DY, &DX, te_stream));
  float *w = lin_weight(s), *got = get_f32(DX.data, rows * in), *want = malloc(rows * in * 4);
  for (size_t i = 0; i < rows; i++)
    for (size_t j = 0; j < in; j++) {
      double acc = 0;
      for (size_t o = 0; o < out; o++) acc += bf16r(dy[i * out + o]) * bf16r(w[o * in + j]);
      want[i * in + j] = (float)acc;
    }
  te_expect_f32_near(got, want, rows * in, 1e-6, 1e-5,
                     "dx = dy W (bf16 operands) next to x (float sums)");
  free(w);
  free(got);
  free(want);
  free(x);
  free(dy);
  TE_OK(tecore_seq_destroy(s));
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(yb));
  TE_OK(tecore_mem_free(dyb));
}
END_TEST

/* seq_forward refused only out == in exactly; an out starting inside in
 * was accepted. */
START_TEST(test_seq_forward_rejects_out_partly_over_in) {
  size_t rows = 8, in = 16, out = 16;
  tecore_seq_t *s = lin_seq(rows, in, out);
  tecore_devptr_t xb = te_dalloc(2 * rows * in * 4);
  float *x = rand_at(xb, rows * in, -1, 1);
  te_poison_dev(xb + rows * in * 4, rows * in * 4);
  struct tecore_tensor X = t2(TECORE_DTYPE_F32, rows, in, xb);
  struct tecore_tensor Y = t2(TECORE_DTYPE_F32, rows, out, xb + 4 * in);
  struct snap sx = snap_take(xb, 2 * rows * in * 4);
  EXPECT_ALIAS("out", "in", tecore_seq_forward(s, &X, &Y, 0, te_stream));
  snap_expect(&sx, "x and the poisoned y after the refused forward");
  Y.data = xb + rows * in * 4;
  TE_OK(tecore_seq_forward(s, &X, &Y, 0, te_stream));
  struct tecore_seq_param p[2];
  size_t n = 0;
  TE_OK(tecore_seq_params(s, p, 2, &n));
  float *w = get_f32(p[0].value.data, out * in), *bias = get_f32(p[1].value.data, out);
  float *got = get_f32(Y.data, rows * out), *want = malloc(rows * out * 4);
  for (size_t i = 0; i < rows; i++)
    for (size_t o = 0; o < out; o++) {
      double acc = bias[o];
      for (size_t j = 0; j < in; j++) acc += bf16r(x[i * in + j]) * bf16r(w[o * in + j]);
      want[i * out + o] = (float)acc;
    }
  te_expect_f32_near(got, want, rows * out, 1e-6, 1e-5,
                     "y = x W^T + b (bf16 operands) next to x (float sums)");
  free(w);
  free(bias);
  free(got);
  free(want);
  free(x);
  TE_OK(tecore_seq_destroy(s));
  TE_OK(tecore_mem_free(xb));
}
END_TEST

/* ---- graphed callables -------------------------------------------------------------------- */

/* A replay whose output started inside its input was accepted: the copy
 * out (or the rebound graph) overwrote the input the backward reads. */
START_TEST(test_callable_forward_rejects_output_partly_over_input) {
  size_t n = 256 + 16 * te_rand_below(64);
  struct tecore_tensor sample;
  tegraph_callable_t *c = dbl_callable(&n, &sample);
  tecore_devptr_t buf = te_dalloc(2 * n * 4);
  float *x = rand_at(buf, n, -4, 4);
  te_poison_dev(buf + n * 4, n * 4);
  struct tecore_tensor in = tgt_vec(buf, n), out = tgt_vec(buf + 64, n);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  struct snap s = snap_take(buf, 2 * n * 4);
  TG_EXPECT_ALIAS("outputs[0]", "inputs[0]",
                  tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  snap_expect(&s, "the input and poisoned output after the refused replay");
  out.data = buf + n * 4;
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  expect_scaled(out.data, x, 2.0f, n, "y = 2x next to x");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(buf));
  free(x);
}
END_TEST

/* A backward replay whose input gradient was written over the output
 * gradient it reads. */
START_TEST(test_callable_backward_rejects_grad_input_over_grad_output) {
  size_t n = 256 + 16 * te_rand_below(64);
  struct tecore_tensor sample;
  tegraph_callable_t *c = dbl_callable(&n, &sample);
  tecore_devptr_t xb = tgt_rand_dev(n, -1, 1), buf = te_dalloc(2 * n * 4);
  float *gy = rand_at(buf, n, -4, 4);
  te_poison_dev(buf + n * 4, n * 4);
  struct tecore_tensor in = tgt_vec(xb, n), go = tgt_vec(buf, n),
                       gi = tgt_vec(buf + 4 * (n / 2), n);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, &o));
  struct snap s = snap_take(buf, 2 * n * 4);
  TG_EXPECT_ALIAS("grad_inputs[0]", "grad_outputs[0]",
                  tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  snap_expect(&s, "grad_outputs and the poisoned grad_inputs after the refused replay");
  /* and over the input the backward may read in place (rebound) */
  struct tecore_tensor gi_x = tgt_vec(xb, n);
  struct snap sx = snap_take(xb, n * 4);
  struct tegraph_slot_info si;
  TG_OK(tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 0, NULL, &si));
  if (si.bound == xb) {
    TG_EXPECT_ALIAS("grad_inputs[0]", "inputs[0]",
                    tegraph_callable_backward(c, &go, 1, &gi_x, 1, &o));
    snap_expect(&sx, "the rebound input after the refused replay");
  } else {
    free(sx.h);
    printf("# input copied (not rebound) on %s: grad_inputs over it is legal\n",
           tecore_backend_name(te_backend_kind));
  }
  gi.data = buf + n * 4;
  TG_OK(tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  expect_scaled(gi.data, gy, 3.0f, n, "dx = 3dy next to dy");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(buf));
  free(gy);
}
END_TEST

static Suite *alias_suite(void) {
  Suite *s = suite_create("alias");
  TCase *tc = te_tcase(s, "gemm", 1);
  tcase_add_test(tc, test_gemm_rejects_d_over_a);
  tcase_add_test(tc, test_gemm_rejects_d_over_b);
  tcase_add_test(tc, test_gemm_rejects_d_partly_over_c);
  tcase_add_test(tc, test_gemm_rejects_workspace_over_d);
  tc = te_tcase(s, "optim", 1);
  tcase_add_test(tc, test_adam_rejects_overlapping_tensors);
  tcase_add_test(tc, test_sgd_rejects_overlapping_tensors);
  tcase_add_test(tc, test_adam_rejects_model_scale_equal_scale_inv);
  tcase_add_test(tc, test_unscale_rejects_out_over_another_input);
  tcase_add_test(tc, test_l2norm_rejects_norm_inside_workspace);
  tc = te_tcase(s, "act", 1);
  tcase_add_test(tc, test_act_fwd_rejects_out_partly_over_in);
  tcase_add_test(tc, test_act_bwd_rejects_dx_partly_over_dy);
  tcase_add_test(tc, test_act_fwd_rejects_scale_equal_scale_inv);
  tcase_add_test(tc, test_cast_transpose_rejects_scale_equal_scale_inv);
  tc = te_tcase(s, "norm", 1);
  tcase_add_test(tc, test_layernorm_rejects_mu_equal_rsigma);
  tcase_add_test(tc, test_rmsnorm_rejects_rsigma_over_y);
  tcase_add_test(tc, test_layernorm_bwd_rejects_dgamma_equal_dbeta);
  tcase_add_test(tc, test_layernorm_bwd_rejects_workspace_over_dx);
  tcase_add_test(tc, test_rmsnorm_bwd_rejects_workspace_over_dx);
  tcase_add_test(tc, test_rmsnorm_bwd_add_rejects_extra_grad_partly_over_dx);
  tcase_add_test(tc, test_layernorm_bwd_add_rejects_extra_grad_partly_over_dx);
  tcase_add_test(tc, test_layernorm_rejects_scale_equal_scale_inv);
  tc = te_tcase(s, "seq", 1);
  tcase_add_test(tc, test_seq_backward_rejects_dx_over_forward_input);
  tcase_add_test(tc, test_seq_forward_rejects_out_partly_over_in);
  tc = tgt_tcase(s, "callable");
  tcase_add_test(tc, test_callable_forward_rejects_output_partly_over_input);
  tcase_add_test(tc, test_callable_backward_rejects_grad_input_over_grad_output);
  return s;
}

TE_TEST_MAIN(alias_suite, TE_TEST_DEVICE)
