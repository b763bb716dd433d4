/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_seq.c -- tegraph_callable_from_seq: a graphed callable made
 * from an operation-fuser sequence against the same sequence run eagerly.
 *
 * The model is te-demo's MLP block, BF16 [32][64] -> [32][64]: residual
 * fork (MakeExtraOutput), RMSNorm, Linear(64->128, bias), GELU,
 * Linear(128->64, bias), residual add (AddExtraInput); once without FP8 and
 * once with a delayed-scaling FP8 recipe.  Two sequences are built from one
 * seed (the same parameters): one becomes the callable, the other runs the
 * same microbatches eagerly (after the same warmup, so FP8 amaxes match).
 * Two steps of 3 microbatches, fresh random inputs and output gradients
 * each, the first of a step with is_first_microbatch (FP8 weights
 * re-quantized), delayed scales updated between steps.  Before each
 * microbatch both get the same fresh Linear weights, so the FP8 case shows
 * whether a later microbatch reused the cached FP8 weights (it must, like
 * the eager run with the no-op flag set) and the BF16 case whether the
 * graphs read the parameters in place.
 *
 * Tolerance: exact, bit for bit, for the output, dx and every parameter
 * gradient: the graphs run the same kernels on the same data in the same
 * order as the eager calls (check_ops' capture test asserts the same).
 * Gradients are poisoned (1.0) before creation and must be exactly zero
 * after it (warmup leaves nothing behind).  Misuse: every argument of
 * tegraph_callable_from_seq is checked with a detail naming it; a replay
 * with a wrong shape fails and the callable keeps working. */
#include "check_graph_common.h"
#include "common/convert.h"

enum { ROWS = 32, HIDDEN = 64, FFN = 128, NMB = 3, NSTEPS = 2, MAXP = 16 };
static const uint64_t SEQ_SEED = 20261121;

static tecore_stream_t S(void) { return te_stream; }

/* ---- helpers -------------------------------------------------------------------- */

/* got and want, BF16 tensors of n elements, bit for bit. */
static void expect_bf16_same(tecore_devptr_t got, tecore_devptr_t want, size_t n,
                             const char *what) {
  uint16_t *g = malloc(n * 2), *w = malloc(n * 2);
  te_d2h(g, got, n * 2);
  te_d2h(w, want, n * 2);
  te_expect_half_bits(g, w, n, 8, te_bf16_to_f32, what);
  free(g);
  free(w);
}

/* The block as a sequence, built from SEQ_SEED (recipe NULL: no FP8). */
static tecore_seq_t *make_seq(const struct tecore_recipe *recipe) {
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HIDDEN, .dtype = TECORE_DTYPE_BF16,
                                  .seed = SEQ_SEED};
  tecore_seq_t *q = NULL;
  TE_OK(tecore_seq_create(&cfg, &q));
  struct tecore_op_desc d[6];
  memset(d, 0, sizeof d);
  d[0].kind = TECORE_OP_MAKE_EXTRA_OUTPUT;
  d[0].slot = 0;
  d[1].kind = TECORE_OP_RMSNORM;
  d[1].epsilon = 1e-5f;
  d[2].kind = TECORE_OP_LINEAR;
  d[2].features = FFN;
  d[2].bias = 1;
  d[3].kind = TECORE_OP_GELU;
  d[4].kind = TECORE_OP_LINEAR;
  d[4].features = HIDDEN;
  d[4].bias = 1;
  d[5].kind = TECORE_OP_ADD_EXTRA_INPUT;
  d[5].slot = 0;
  for (int k = 0; k < 6; k++) TE_OK(tecore_seq_add(q, &d[k], NULL));
  if (recipe) TE_OK(tecore_seq_set_recipe(q, recipe, S()));
  TE_OK(tecore_seq_build(q, S()));
  return q;
}

static size_t params_of(tecore_seq_t *q, struct tecore_seq_param *p) {
  size_t n = 0;
  TE_OK(tecore_seq_params(q, p, MAXP, &n));
  ck_assert(n > 0 && n <= MAXP);
  return n;
}

/* Fresh random weights for every Linear, the same in a and b (as an
 * optimizer would write them; here between microbatches, so that a
 * forward reusing the cached FP8 weight differs from one that
 * re-quantizes). */
static void new_weights(tecore_seq_t *a, tecore_seq_t *b) {
  struct tecore_seq_param pa[MAXP], pb[MAXP];
  size_t n = params_of(a, pa);
  ck_assert_uint_eq(n, params_of(b, pb));
  for (size_t i = 0; i < n; i++) {
    if (strcmp(pa[i].name, "weight") != 0) continue;
    float w = 1.0f / sqrtf((float)pa[i].value.shape[1]);
    tgt_rand_bf16(&pa[i].value, -w, w);
    TE_OK(tecore_memcpy_async(pb[i].value.data, pa[i].value.data,
                              tecore_tensor_numel(&pa[i].value) * 2, S()));
  }
  TE_OK(tecore_stream_synchronize(S()));
}

/* Every parameter gradient of a and b, bit for bit, and not all zero. */
static void expect_grads_same(tecore_seq_t *a, tecore_seq_t *b, const char *when) {
  struct tecore_seq_param pa[MAXP], pb[MAXP];
  size_t na = params_of(a, pa), nb = params_of(b, pb);
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++) {
    size_t n = tecore_tensor_numel(&pa[i].grad);
    float *g = tgt_get(pa[i].grad.data, n), *w = tgt_get(pb[i].grad.data, n);
    char what[128];
    snprintf(what, sizeof what, "%s: gradient of op %zu's %s", when, pa[i].op, pa[i].name);
    te_expect_f32_bits(g, w, n, what);
    size_t nz = 0;
    for (size_t k = 0; k < n; k++) nz += g[k] != 0.0f;
    ck_assert_msg(nz > 0, "%s: all zero (the comparison would prove nothing)", what);
    free(g);
    free(w);
  }
}

/* Fills every parameter gradient of q with 1.0f. */
static void poison_grads(tecore_seq_t *q) {
  struct tecore_seq_param p[MAXP];
  size_t n = params_of(q, p);
  for (size_t i = 0; i < n; i++)
    TE_OK(tecore_memset_d32_async(p[i].grad.data, 0x3f800000u, tecore_tensor_numel(&p[i].grad),
                                  S()));
  TE_OK(tecore_stream_synchronize(S()));
}

static void expect_grads_zero(tecore_seq_t *q) {
  struct tecore_seq_param p[MAXP];
  size_t n = params_of(q, p);
  for (size_t i = 0; i < n; i++) {
    size_t k = tecore_tensor_numel(&p[i].grad);
    float *g = tgt_get(p[i].grad.data, k);
    for (size_t j = 0; j < k; j++)
      ck_assert_msg(te_f32_bits_of(g[j]) == 0, "after creation: gradient of op %zu's %s[%zu] "
                    "is %g, want 0 (warmup left it behind)", p[i].op, p[i].name, j, (double)g[j]);
    free(g);
  }
}

/* What the callable's warmup does, eagerly on q: forward of the sample,
 * backward of a zero output gradient, then the gradients cleared. */
static void eager_warmup(tecore_seq_t *q, const struct tecore_tensor *sample, int num_warmup,
                         tecore_devptr_t flag) {
  struct tecore_tensor y = tgt_bf16_tensor(ROWS, HIDDEN), dy = tgt_bf16_tensor(ROWS, HIDDEN),
                       dx = tgt_bf16_tensor(ROWS, HIDDEN);
  TE_OK(tecore_memset_d8_async(dy.data, 0, ROWS * HIDDEN * 2, S()));
  TE_OK(tecore_memset_d32_async(flag, 0, 1, S()));
  for (int w = 0; w < num_warmup; w++) {
    TE_OK(tecore_seq_forward(q, sample, &y, flag, S()));
    TE_OK(tecore_seq_backward(q, &dy, &dx, S()));
  }
  TE_OK(tecore_seq_zero_grad(q, S()));
  TE_OK(tecore_stream_synchronize(S()));
  TE_OK(tecore_mem_free(y.data));
  TE_OK(tecore_mem_free(dy.data));
  TE_OK(tecore_mem_free(dx.data));
}

/* ---- graphed against eager ------------------------------------------------------- */

static void graphed_vs_eager(const struct tecore_recipe *recipe, const char *name) {
  tecore_seq_t *a = make_seq(recipe), *b = make_seq(recipe);
  /* same seed, same parameters */
  struct tecore_seq_param pa[MAXP], pb[MAXP];
  size_t np = params_of(a, pa);
  ck_assert_uint_eq(np, params_of(b, pb));
  for (size_t i = 0; i < np; i++)
    expect_bf16_same(pa[i].value.data, pb[i].value.data, tecore_tensor_numel(&pa[i].value),
                     "parameters of two sequences built from one seed");

  struct tecore_tensor sample = tgt_bf16_tensor(ROWS, HIDDEN);
  tgt_rand_bf16(&sample, -1.5f, 1.5f);
  poison_grads(a);
  const int num_warmup = 2;
  struct tegraph_seq_callable_desc d = {.seq = a, .sample_input = &sample, .need_dx = 1,
                                        .num_warmup = num_warmup,
                                        .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_from_seq(&d, NULL, &c));
  expect_grads_zero(a);
  tecore_devptr_t flag = te_dalloc(4);
  eager_warmup(b, &sample, num_warmup, flag);

  struct tecore_tensor x[NMB], dy[NMB];
  for (int mb = 0; mb < NMB; mb++) {
    x[mb] = tgt_bf16_tensor(ROWS, HIDDEN);
    dy[mb] = tgt_bf16_tensor(ROWS, HIDDEN);
  }
  struct tecore_tensor ya = tgt_bf16_tensor(ROWS, HIDDEN), yb = tgt_bf16_tensor(ROWS, HIDDEN);
  struct tecore_tensor dxa = tgt_bf16_tensor(ROWS, HIDDEN), dxb = tgt_bf16_tensor(ROWS, HIDDEN);
  size_t n = ROWS * HIDDEN;
  for (int st = 0; st < NSTEPS; st++) {
    TE_OK(tecore_seq_zero_grad(a, S()));
    TE_OK(tecore_seq_zero_grad(b, S()));
    for (int mb = 0; mb < NMB; mb++) {
      char what[128];
      tgt_rand_bf16(&x[mb], -1.5f, 1.5f);
      tgt_rand_bf16(&dy[mb], -0.1f, 0.1f);
      new_weights(a, b);
      te_poison_dev(ya.data, n * 2);
      te_poison_dev(yb.data, n * 2);
      te_poison_dev(dxa.data, n * 2);
      te_poison_dev(dxb.data, n * 2);
      struct tegraph_replay_opts ro = {.stream = S(), .is_first_microbatch = mb == 0};
      TG_OK(tegraph_callable_forward(c, &x[mb], 1, NULL, NULL, 0, &ya, 1, &ro));
      TG_OK(tegraph_callable_backward(c, &dy[mb], 1, &dxa, 1, &ro));
      TE_OK(tecore_memset_d32_async(flag, mb == 0 ? 0u : 1u, 1, S()));
      TE_OK(tecore_seq_forward(b, &x[mb], &yb, flag, S()));
      TE_OK(tecore_seq_backward(b, &dy[mb], &dxb, S()));
      TE_OK(tecore_stream_synchronize(S()));
      snprintf(what, sizeof what, "%s: step %d microbatch %d: y", name, st, mb);
      expect_bf16_same(ya.data, yb.data, n, what);
      snprintf(what, sizeof what, "%s: step %d microbatch %d: dx", name, st, mb);
      expect_bf16_same(dxa.data, dxb.data, n, what);
    }
    char when[64];
    snprintf(when, sizeof when, "%s: step %d", name, st);
    expect_grads_same(a, b, when);
    TE_OK(tecore_seq_update_scales(a, S()));
    TE_OK(tecore_seq_update_scales(b, S()));
  }
  printf("# %s: %d steps x %d microbatches graphed = eager, bit for bit\n", name, NSTEPS, NMB);
  TG_OK(tegraph_callable_destroy(c));
  for (int mb = 0; mb < NMB; mb++) {
    TE_OK(tecore_mem_free(x[mb].data));
    TE_OK(tecore_mem_free(dy[mb].data));
  }
  TE_OK(tecore_mem_free(ya.data));
  TE_OK(tecore_mem_free(yb.data));
  TE_OK(tecore_mem_free(dxa.data));
  TE_OK(tecore_mem_free(dxb.data));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
}

START_TEST(test_seq_bf16) { graphed_vs_eager(NULL, "bf16"); }
END_TEST

START_TEST(test_seq_fp8_delayed) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  graphed_vs_eager(&r, "fp8 delayed, bf16");
}
END_TEST

/* ---- misuse ---------------------------------------------------------------------- */

START_TEST(test_seq_misuse) {
  tecore_seq_t *a = make_seq(NULL), *b = make_seq(NULL);
  struct tecore_tensor sample = tgt_bf16_tensor(ROWS, HIDDEN);
  tgt_rand_bf16(&sample, -1.5f, 1.5f);
  struct tegraph_seq_callable_desc d = {.seq = a, .sample_input = &sample,
                                        .num_warmup = 1,
                                        .capture_mode = TECORE_CAPTURE_THREAD_LOCAL};
  tegraph_callable_t *c = NULL;

  TG_EXPECT(TEGRAPH_ERR_INVALID, "d is NULL", tegraph_callable_from_seq(NULL, NULL, &c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "out", tegraph_callable_from_seq(&d, NULL, NULL));
  struct tegraph_seq_callable_desc e = d;
  e.seq = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "d->seq is NULL", tegraph_callable_from_seq(&e, NULL, &c));
  /* a sequence that was never built */
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HIDDEN, .dtype = TECORE_DTYPE_BF16};
  tecore_seq_t *unbuilt = NULL;
  TE_OK(tecore_seq_create(&cfg, &unbuilt));
  struct tecore_op_desc gelu = {.kind = TECORE_OP_GELU};
  TE_OK(tecore_seq_add(unbuilt, &gelu, NULL));
  e = d;
  e.seq = unbuilt;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tecore_seq_build", tegraph_callable_from_seq(&e, NULL, &c));
  TE_OK(tecore_seq_destroy(unbuilt));
  e = d;
  e.sample_input = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "d->sample_input", tegraph_callable_from_seq(&e, NULL, &c));
  /* the input's shape and dtype against the sequence's */
  struct tecore_tensor bad = sample;
  bad.shape[1] = HIDDEN / 2;
  e.sample_input = &bad;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "[32][32]", tegraph_callable_from_seq(&e, NULL, &c));
  bad = sample;
  bad.dtype = TECORE_DTYPE_F16;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "dtype", tegraph_callable_from_seq(&e, NULL, &c));
  /* a 3-D input with the same 2-D view is the sequence's input */
  bad = sample;
  bad.ndim = 3;
  bad.shape[0] = 4;
  bad.shape[1] = ROWS / 4;
  bad.shape[2] = HIDDEN;
  struct tecore_tensor out3 = bad;
  out3.data = 0;
  e.sample_input = &bad;
  e.output = &out3;
  TG_OK(tegraph_callable_from_seq(&e, NULL, &c));
  TG_OK(tegraph_callable_destroy(c));
  c = NULL;
  /* the output's */
  e = d;
  struct tecore_tensor badout = sample;
  badout.data = 0;
  badout.shape[0] = ROWS + 1;
  e.output = &badout;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "d->output", tegraph_callable_from_seq(&e, NULL, &c));
  e = d;
  e.num_warmup = -1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "num_warmup", tegraph_callable_from_seq(&e, NULL, &c));
  e = d;
  e.flags = 0x80u;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "d->flags", tegraph_callable_from_seq(&e, NULL, &c));
  e = d;
  e.instantiate_flags = 0x4000u;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "instantiate_flags", tegraph_callable_from_seq(&e, NULL, &c));
  e = d;
  e.capture_mode = (tecore_capture_mode_t)77;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "capture_mode", tegraph_callable_from_seq(&e, NULL, &c));
  ck_assert_ptr_null(c);

  /* a good one, without dx */
  TG_OK(tegraph_callable_from_seq(&d, NULL, &c));
  tecore_devptr_t flag = te_dalloc(4);
  eager_warmup(b, &sample, 1, flag);
  struct tecore_tensor x = tgt_bf16_tensor(ROWS, HIDDEN), dy = tgt_bf16_tensor(ROWS, HIDDEN);
  struct tecore_tensor ya = tgt_bf16_tensor(ROWS, HIDDEN), yb = tgt_bf16_tensor(ROWS, HIDDEN);
  tgt_rand_bf16(&x, -1.5f, 1.5f);
  tgt_rand_bf16(&dy, -0.1f, 0.1f);
  te_poison_dev(ya.data, ROWS * HIDDEN * 2);
  te_poison_dev(yb.data, ROWS * HIDDEN * 2);
  struct tegraph_replay_opts ro = {.stream = S(), .is_first_microbatch = 1};
  /* a replay with the wrong input shape, then the wrong output gradient */
  struct tecore_tensor xbad = x;
  xbad.shape[0] = ROWS / 2;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "shape",
            tegraph_callable_forward(c, &xbad, 1, NULL, NULL, 0, &ya, 1, &ro));
  TG_OK(tegraph_callable_forward(c, &x, 1, NULL, NULL, 0, &ya, 1, &ro));
  struct tecore_tensor dybad = dy;
  dybad.dtype = TECORE_DTYPE_F16;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "dtype", tegraph_callable_backward(c, &dybad, 1, NULL, 0, &ro));
  TG_OK(tegraph_callable_backward(c, &dy, 1, NULL, 0, &ro));
  /* still right: against the eager sequence */
  TE_OK(tecore_memset_d32_async(flag, 0, 1, S()));
  TE_OK(tecore_seq_forward(b, &x, &yb, flag, S()));
  TE_OK(tecore_seq_backward(b, &dy, NULL, S()));
  TE_OK(tecore_stream_synchronize(S()));
  expect_bf16_same(ya.data, yb.data, ROWS * HIDDEN, "y after a refused replay");
  expect_grads_same(a, b, "after a refused replay");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(x.data));
  TE_OK(tecore_mem_free(dy.data));
  TE_OK(tecore_mem_free(ya.data));
  TE_OK(tecore_mem_free(yb.data));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_seq_destroy(a));
  TE_OK(tecore_seq_destroy(b));
}
END_TEST

static Suite *seq_suite(void) {
  Suite *s = suite_create("graph_seq");
  TCase *tc = tgt_tcase(s, "graphed_vs_eager");
  tcase_add_test(tc, test_seq_bf16);
  tcase_add_test(tc, test_seq_fp8_delayed);
  tc = tgt_tcase(s, "misuse");
  tcase_add_test(tc, test_seq_misuse);
  return s;
}

TE_TEST_MAIN(seq_suite, TE_TEST_DEVICE)
