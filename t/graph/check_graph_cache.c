/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_cache.c -- FP8 weight caching in graphed callables: the
 * replay's is_first_microbatch sets the forward graph's no-op flag, and the
 * captured weight-quantize kernels that read it
 *   - run exactly on the microbatches where is_first_microbatch is nonzero
 *     (a counting quantize kernel of this suite: vdev), and
 *   - are skipped otherwise, so the cached weights are used even when the
 *     weights changed since (they are quantized again on the next first
 *     microbatch);
 * and the outputs equal an eager run that re-quantizes every microbatch
 * (weights being constant within a step).  Two quantizers: the suite's
 * counting kernel (y = q(w) * x, vdev) and libtecore's tecore_quantize /
 * tecore_dequantize, E4M3 with delayed scaling (y = x + dq(q(w)), every
 * backend).  n floats, n random in [500, 3000); values random; outputs
 * poisoned; comparisons bit for bit (tolerance exact: the same kernels on
 * the same values). */
#include "check_graph_common.h"

#define WAIT_MS 20000

struct cache_model {
  size_t n;
  float scale;
  tecore_devptr_t w, q, count;   /* the caller's weight, FP8 cache and counter */
  tecore_devptr_t q8, qscale, qscale_inv, wd; /* tecore_quantize variant */
  int lib;                       /* 1: tecore_quantize */
};

/* The weight "quantize" of the model, honouring the no-op flag. */
static tecore_result_t quantize_w(struct cache_model *m, tecore_devptr_t noop,
                                  tecore_stream_t s) {
  if (!m->lib) return tgt_quant(m->q, m->w, m->scale, m->n, noop, m->count, s);
  struct tecore_tensor in = tgt_vec(m->w, m->n), out;
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 1, &m->n, m->q8));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = m->qscale;
  out.scale_inv = m->qscale_inv;
  tecore_result_t r = tecore_quantize(&in, &out, noop, s);
  if (r) return r;
  struct tecore_tensor deq = tgt_vec(m->wd, m->n);
  return tecore_dequantize(&out, &deq, s);
}

static tecore_result_t cache_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct cache_model *m = u;
  tecore_result_t r = quantize_w(m, io->noop_flag, s);
  if (r) return r;
  tecore_devptr_t x = io->inputs[0].data, y = io->outputs[0].data;
  if (!m->lib) return tgt_mul(y, m->q, x, m->n, s);
  return tecore_scale_add(y, x, 1.0f, m->wd, 1.0f, TECORE_DTYPE_F32, m->n, s);
}

static int32_t read_count(const struct cache_model *m) {
  int32_t c = -1;
  te_d2h(&c, m->count, 4);
  return c;
}

static void cache_model_new(struct cache_model *m, size_t n, int lib) {
  memset(m, 0, sizeof *m);
  m->n = n;
  m->lib = lib;
  m->scale = 16.0f;
  m->w = tgt_rand_dev(n, -4, 4);
  m->q = te_dalloc(n * 4);
  m->count = te_dalloc(4);
  TE_OK(tecore_memset_d32_async(m->count, 0, 1, te_stream));
  m->q8 = te_dalloc(n);
  m->qscale = te_dalloc(4);
  m->qscale_inv = te_dalloc(4);
  m->wd = te_dalloc(n * 4);
  float sc = te_rand_float(8, 32);
  te_h2d(m->qscale, &sc, 4);
}

static void cache_model_free(struct cache_model *m) {
  tecore_devptr_t p[] = {m->w, m->q, m->count, m->q8, m->qscale, m->qscale_inv, m->wd};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) TE_OK(tecore_mem_free(p[i]));
}

/* Steps of 4 microbatches: new weights each step (the optimizer), fresh
 * inputs each microbatch; the graphed model (cache g) against the eager one
 * (cache e) that quantizes every time.  Between microbatches 1 and 2 of
 * each step the graphed model's weights change behind its back: the cache
 * must hide that until the next first microbatch. */
static void run_cache_case(int lib) {
  size_t n = 500 + (size_t)te_rand_below(2500);
  struct cache_model g, e;
  cache_model_new(&g, n, lib);
  cache_model_new(&e, n, lib);
  TE_OK(tecore_memcpy_async(e.qscale, g.qscale, 4, te_stream));
  struct tecore_tensor xs = tgt_vec(0, n), ys = tgt_vec(0, n);
  struct tegraph_callable_desc d = {.forward = cache_fwd, .user = &g, .sample_inputs = &xs,
                                    .ninputs = 1, .outputs = &ys, .noutputs = 1,
                                    .num_warmup = 1};
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&d, NULL, &c));
  int32_t base = lib ? 0 : read_count(&g);
  if (!lib) ck_assert_int_eq(base, 1); /* warmup quantized once; capture ran nothing */
  tecore_devptr_t x = te_dalloc(n * 4), y = te_dalloc(n * 4), y_ref = te_dalloc(n * 4);
  tecore_devptr_t noop0 = te_dalloc(4);
  TE_OK(tecore_memset_d32_async(noop0, 0, 1, te_stream));
  float *h = malloc(n * 4);
  for (int step = 0; step < 3; step++) {
    te_rand_floats(h, n, -4, 4);
    te_h2d(g.w, h, n * 4);
    te_h2d(e.w, h, n * 4);
    for (int mb = 0; mb < 4; mb++) {
      te_rand_floats(h, n, -2, 2);
      te_h2d(x, h, n * 4);
      te_poison_dev_nan(y, n);
      struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n);
      struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = mb == 0};
      TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
      /* eager: quantizes every microbatch (its weights never change mid-step) */
      struct tecore_tensor ein = tgt_vec(x, n), eout = tgt_vec(y_ref, n);
      struct tegraph_io io = {.phase = TEGRAPH_PHASE_EAGER, .inputs = &ein, .ninputs = 1,
                              .outputs = &eout, .noutputs = 1, .noop_flag = noop0};
      TE_OK(cache_fwd(&e, te_stream, &io));
      TE_OK(te_stream_wait(te_stream, WAIT_MS));
      char what[96];
      snprintf(what, sizeof what, "%s: y, step %d microbatch %d", lib ? "tecore_quantize" : "counter",
               step, mb);
      tgt_expect_same(y, y_ref, n, what);
      if (!lib)
        ck_assert_msg(read_count(&g) == base + step + 1,
                      "step %d microbatch %d: %d quantizations, want %d", step, mb,
                      read_count(&g) - base, step + 1);
      if (mb == 1) {
        /* the weights change behind the cache: later microbatches must not see it */
        te_rand_floats(h, n, 5, 9);
        te_h2d(g.w, h, n * 4);
      }
    }
  }
  free(h);
  TG_OK(tegraph_callable_destroy(c));
  tecore_devptr_t fr[] = {x, y, y_ref, noop0};
  for (size_t i = 0; i < 4; i++) TE_OK(tecore_mem_free(fr[i]));
  cache_model_free(&g);
  cache_model_free(&e);
}

START_TEST(cache_counts_quantizations) {
  if (!tgt_available("cache_counts_quantizations")) return;
  run_cache_case(0);
}
END_TEST

START_TEST(cache_with_tecore_quantize) { run_cache_case(1); }
END_TEST

/* No options: every replay is a first microbatch (quantize every time). */
START_TEST(default_is_first) {
  if (!tgt_available("default_is_first")) return;
  size_t n = 777;
  struct cache_model g;
  cache_model_new(&g, n, 0);
  struct tecore_tensor xs = tgt_vec(0, n), ys = tgt_vec(0, n);
  struct tegraph_callable_desc d = {.forward = cache_fwd, .user = &g, .sample_inputs = &xs,
                                    .ninputs = 1, .outputs = &ys, .noutputs = 1};
  tegraph_callable_t *c = NULL;
  TG_OK(tegraph_callable_create(&d, NULL, &c));
  ck_assert_int_eq(read_count(&g), 0);
  tecore_devptr_t x = tgt_rand_dev(n, -1, 1);
  struct tecore_tensor in = tgt_vec(x, n);
  for (int i = 0; i < 3; i++) TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, NULL));
  TE_OK(tecore_ctx_synchronize());
  ck_assert_int_eq(read_count(&g), 3);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 0};
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, &o));
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  ck_assert_int_eq(read_count(&g), 3);
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(x));
  cache_model_free(&g);
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("graph_cache");
  TCase *tc = tgt_tcase(s, "fp8_weight_cache");
  tcase_add_test(tc, cache_counts_quantizations);
  tcase_add_test(tc, cache_with_tecore_quantize);
  tcase_add_test(tc, default_is_first);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
