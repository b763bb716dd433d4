/* SPDX-License-Identifier: Apache-2.0 */
/* check_recipe.c -- FP8 scaling recipes (te/recipe.h) on the selected
 * backend: recipe defaults and checks, formats per role (HYBRID), the
 * delayed-scaling state and its one-launch update (history rotation, max
 * and most_recent, margin, amax 0 / inf / NaN keeping the old scale, power-
 * of-two scales), the cross-rank reduction hook, and the current-scaling
 * rule (epsilon floor, power-of-two, overflow to FLT_MAX).
 * The reference keeps the history on the host and computes each scale in
 * float64 rounded once (fp8_max / amax), then times 2^-margin (exact).
 * Tolerance: exact bits for history, scale and scale_inv. */
#include "tests.h"
#include <float.h>
#include "common/fp8.h"

static float fp8max(tecore_dtype_t d) { return d == TECORE_DTYPE_E4M3 ? 448.0f : 57344.0f; }

static float pow2_floor(float s) {
  int k;
  frexpf(s, &k);
  return ldexpf(1.0f, k - 1);
}

/* The delayed rule of te/recipe.h. */
static float ref_delayed(float amax, float old, float fmax, int margin, int pow2) {
  if (!(amax > 0.0f) || isinf(amax) || isnan(amax)) return old;
  double q = (double)fmax / (double)amax;
  float s = q > FLT_MAX ? INFINITY : (float)q;
  s = ldexpf(s, -margin);
  if (isinf(s)) s = FLT_MAX;
  if (pow2) s = pow2_floor(s);
  return s == 0.0f ? old : s;
}

/* max over |values| as float bits (a NaN wins) */
static float bits_max(float a, float b) {
  uint32_t x = te_f32_bits_of(a) & 0x7fffffffu, y = te_f32_bits_of(b) & 0x7fffffffu;
  return te_f32_from_bits(x > y ? x : y);
}

START_TEST(recipe_defaults_and_checks) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  ck_assert_int_eq(r.format, TECORE_FP8_HYBRID);
  ck_assert_int_eq(r.history_len, 1024);
  ck_assert_int_eq(r.margin, 0);
  ck_assert_int_eq(r.amax_algo, TECORE_AMAX_MAX);
  TE_OK(tecore_recipe_validate(&r));
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_BLOCK));
  ck_assert_int_eq(r.format, TECORE_FP8_E4M3);
  ck_assert_uint_eq(r.flags, TECORE_RECIPE_POW2_SCALES);
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_MXFP8));
  ck_assert_int_eq(r.format, TECORE_FP8_E4M3);
  TE_EXPECT_INVALID("kind", tecore_recipe_init(&r, (tecore_recipe_kind_t)9));
  TE_EXPECT_INVALID("r", tecore_recipe_init(NULL, TECORE_RECIPE_DELAYED));

  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  struct tecore_recipe b = r;
  b.margin = -1;
  TE_EXPECT_INVALID("margin", tecore_recipe_validate(&b));
  b = r, b.history_len = 0;
  TE_EXPECT_INVALID("history_len", tecore_recipe_validate(&b));
  b = r, b.format = (tecore_fp8_format_t)3;
  TE_EXPECT_INVALID("format", tecore_recipe_validate(&b));
  b = r, b.amax_epsilon = NAN;
  TE_EXPECT_INVALID("amax_epsilon", tecore_recipe_validate(&b));
  b = r, b.flags = 0x80;
  TE_EXPECT_INVALID("flags", tecore_recipe_validate(&b));
  b = r, b.amax_algo = (tecore_amax_algo_t)2;
  TE_EXPECT_INVALID("amax_algo", tecore_recipe_validate(&b));
}
END_TEST

START_TEST(formats_and_roles) {
  struct tecore_recipe r;
  tecore_dtype_t d;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_CURRENT));   /* HYBRID */
  TE_OK(tecore_recipe_dtype(&r, TECORE_FP8_ACTIVATION, &d));
  ck_assert_int_eq(d, TECORE_DTYPE_E4M3);
  TE_OK(tecore_recipe_dtype(&r, TECORE_FP8_WEIGHT, &d));
  ck_assert_int_eq(d, TECORE_DTYPE_E4M3);
  TE_OK(tecore_recipe_dtype(&r, TECORE_FP8_GRADIENT, &d));
  ck_assert_int_eq(d, TECORE_DTYPE_E5M2);
  r.format = TECORE_FP8_E5M2;
  TE_OK(tecore_recipe_dtype(&r, TECORE_FP8_ACTIVATION, &d));
  ck_assert_int_eq(d, TECORE_DTYPE_E5M2);
  r.format = TECORE_FP8_E4M3;
  TE_OK(tecore_recipe_dtype(&r, TECORE_FP8_GRADIENT, &d));
  ck_assert_int_eq(d, TECORE_DTYPE_E4M3);
  TE_EXPECT_INVALID("role", tecore_recipe_dtype(&r, (tecore_fp8_role_t)5, &d));

  struct tecore_tensor t;
  size_t shape[2] = {256, 256};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_BF16, 2, shape, 0));
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_BLOCK));
  r.amax_epsilon = 1e-6f;
  TE_OK(tecore_recipe_apply(&r, TECORE_FP8_WEIGHT, &t));
  ck_assert_int_eq(t.scaling, TECORE_SCALING_BLOCK_128X128);
  ck_assert_int_eq(t.dtype, TECORE_DTYPE_E4M3);
  ck_assert_uint_eq(t.flags, TECORE_TENSOR_POW2_SCALES);
  ck_assert(t.amax_epsilon == 1e-6f);
  TE_OK(tecore_recipe_apply(&r, TECORE_FP8_ACTIVATION, &t));
  ck_assert_int_eq(t.scaling, TECORE_SCALING_BLOCK_1X128);
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_MXFP8));
  TE_OK(tecore_recipe_apply(&r, TECORE_FP8_GRADIENT, &t));
  ck_assert_int_eq(t.scaling, TECORE_SCALING_MXFP8);
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  TE_OK(tecore_recipe_apply(&r, TECORE_FP8_GRADIENT, &t));
  ck_assert_int_eq(t.scaling, TECORE_SCALING_DELAYED);
  ck_assert_int_eq(t.dtype, TECORE_DTYPE_E5M2);
}
END_TEST

/* Drives count tensors through steps of the update with chosen amaxes and
 * compares the whole state with a host model after every step. */
static void run_delayed(int len, tecore_amax_algo_t algo, int margin, int pow2,
                        tecore_fp8_role_t role, int steps) {
  enum { COUNT = 37 };
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = len;
  r.amax_algo = algo;
  r.margin = margin;
  r.flags = pow2 ? TECORE_RECIPE_POW2_SCALES : 0;
  struct tecore_delayed_state st;
  TE_OK(tecore_delayed_state_create(&r, role, COUNT, te_stream, &st));
  const float fmax = fp8max(st.dtype);
  float *hist = calloc((size_t)len * COUNT, 4), scale[COUNT], amax[COUNT];
  for (int i = 0; i < COUNT; i++) scale[i] = 1.0f;
  float *g = malloc(((size_t)len + 3) * COUNT * 4);
  char what[160];
  for (int step = 0; step < steps; step++) {
    for (int i = 0; i < COUNT; i++) {
      unsigned pick = (unsigned)te_rand_below(20);
      amax[i] = pick == 0 ? 0.0f : pick == 1 ? INFINITY : pick == 2 ? NAN
                : ldexpf(te_rand_float(1.0f, 2.0f), (int)te_rand_below(60) - 30);
    }
    te_h2d(st.amax, amax, sizeof amax);
    TE_OK(tecore_delayed_update(&r, &st, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    /* host model */
    for (int i = 0; i < COUNT; i++) {
      float win = amax[i];
      for (int k = len - 1; k >= 1; k--) {
        hist[(size_t)k * COUNT + i] = hist[(size_t)(k - 1) * COUNT + i];
        win = bits_max(win, hist[(size_t)k * COUNT + i]);
      }
      hist[i] = amax[i];
      float use = algo == TECORE_AMAX_MOST_RECENT ? bits_max(amax[i], 0.0f) : bits_max(win, amax[i]);
      scale[i] = ref_delayed(use, scale[i], fmax, margin, pow2);
    }
    te_d2h(g, st.base, ((size_t)len + 3) * COUNT * 4);
    snprintf(what, sizeof what, "len %d %s margin %d pow2 %d step %d", len,
             algo == TECORE_AMAX_MAX ? "max" : "most_recent", margin, pow2, step);
    float zeros[COUNT] = {0}, inv[COUNT];
    for (int i = 0; i < COUNT; i++) inv[i] = 1.0f / scale[i];
    te_expect_f32_bits(g, zeros, COUNT, "amax after the update (reset)");
    te_expect_f32_bits(g + COUNT, hist, (size_t)len * COUNT, what);
    te_expect_f32_bits(g + (size_t)(len + 1) * COUNT, scale, COUNT, what);
    te_expect_f32_bits(g + (size_t)(len + 2) * COUNT, inv, COUNT, what);
  }
  free(hist);
  free(g);
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_delayed_state_free(&st));
  ck_assert(st.base == 0);
}

START_TEST(history_rotation_max) {
  run_delayed(1, TECORE_AMAX_MAX, 0, 0, TECORE_FP8_ACTIVATION, 4);
  run_delayed(4, TECORE_AMAX_MAX, 0, 0, TECORE_FP8_ACTIVATION, 12);
  run_delayed(16, TECORE_AMAX_MAX, 2, 0, TECORE_FP8_GRADIENT, 40);
}
END_TEST
START_TEST(most_recent_and_margin) {
  run_delayed(8, TECORE_AMAX_MOST_RECENT, 0, 0, TECORE_FP8_ACTIVATION, 10);
  run_delayed(8, TECORE_AMAX_MOST_RECENT, 3, 0, TECORE_FP8_GRADIENT, 10);
  run_delayed(3, TECORE_AMAX_MAX, 126, 0, TECORE_FP8_ACTIVATION, 6);
}
END_TEST
START_TEST(pow2_scales_delayed) {
  run_delayed(5, TECORE_AMAX_MAX, 1, 1, TECORE_FP8_ACTIVATION, 10);
  run_delayed(2, TECORE_AMAX_MOST_RECENT, 0, 1, TECORE_FP8_GRADIENT, 10);
}
END_TEST

/* amax 0, inf and NaN keep the old scale, named cases. */
START_TEST(bad_amax_keeps_scale) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 1;
  r.format = TECORE_FP8_E4M3;
  struct tecore_delayed_state st;
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, 4, te_stream, &st));
  float a[4] = {2.0f, 7.0f, 0.5f, 448.0f};
  te_h2d(st.amax, a, 16);
  TE_OK(tecore_delayed_update(&r, &st, te_stream));
  float s1[4], s2[4];
  te_d2h(s1, st.scale, 16);
  ck_assert(s1[0] == 224.0f && s1[1] == 64.0f && s1[2] == 896.0f && s1[3] == 1.0f);
  float b[4] = {0.0f, INFINITY, NAN, -0.0f};
  te_h2d(st.amax, b, 16);
  TE_OK(tecore_delayed_update(&r, &st, te_stream));
  te_d2h(s2, st.scale, 16);
  te_expect_f32_bits(s2, s1, 4, "scale after amax 0, inf, NaN, -0");
  float tiny[4] = {1e-45f, 1e-40f, 3e38f, 1.0f};   /* overflowing quotients -> FLT_MAX */
  te_h2d(st.amax, tiny, 16);
  TE_OK(tecore_delayed_update(&r, &st, te_stream));
  te_d2h(s2, st.scale, 16);
  ck_assert_msg(s2[0] == FLT_MAX && s2[1] == FLT_MAX, "overflow: %g %g", (double)s2[0], (double)s2[1]);
  ck_assert(s2[2] == (float)(448.0 / 3e38) && s2[3] == 448.0f);
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_delayed_state_free(&st));
}
END_TEST

/* The reduction hook: called once per update, before the kernel, with the
 * state's amax array; what it writes is what the update uses. */
struct hook_ctx {
  int calls;
  tecore_devptr_t seen;
  size_t count;
  tecore_devptr_t other;   /* "the other rank's" amaxes */
  tecore_result_t ret;
};

static tecore_result_t reduce_hook(tecore_devptr_t amax, size_t count, tecore_stream_t stream,
                                   void *ctx) {
  struct hook_ctx *h = ctx;
  h->calls++;
  h->seen = amax;
  h->count = count;
  if (h->ret != TECORE_SUCCESS) {
    tecore_set_error("reduce_hook: simulated failure");
    return h->ret;
  }
  /* a stand-in for an allreduce(MAX) with one other rank whose amaxes are
   * all larger: the result is theirs */
  return tecore_memcpy_async(amax, h->other, count * 4, stream);
}

START_TEST(reduction_hook_called) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 2;
  r.format = TECORE_FP8_E4M3;
  struct hook_ctx h = {.ret = TECORE_SUCCESS};
  r.amax_reduce = reduce_hook;
  r.amax_reduce_ctx = &h;
  struct tecore_delayed_state st;
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, 3, te_stream, &st));
  h.other = te_dalloc(16);
  float mine[3] = {1.0f, 2.0f, 3.0f}, theirs[3] = {4.0f, 8.0f, 16.0f};
  te_h2d(st.amax, mine, 12);
  te_h2d(h.other, theirs, 12);
  TE_OK(tecore_delayed_update(&r, &st, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_int_eq(h.calls, 1);
  ck_assert(h.seen == st.amax);
  ck_assert_uint_eq(h.count, 3);
  float s[3];
  te_d2h(s, st.scale, 12);
  ck_assert_msg(s[0] == 112.0f && s[1] == 56.0f && s[2] == 28.0f,
                "scales %g %g %g use the reduced amaxes 4 8 16", (double)s[0], (double)s[1],
                (double)s[2]);
  /* a failing hook: its error comes back, and the state is not updated */
  h.ret = TECORE_ERR_SYSTEM;
  float before[9], after[9];
  te_d2h(before, st.base, 36);
  TE_EXPECT_ERR(TECORE_ERR_SYSTEM, "amax_reduce", tecore_delayed_update(&r, &st, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_int_eq(h.calls, 2);
  te_d2h(after, st.base, 36);
  te_expect_f32_bits(after, before, 9, "state after a failed hook");
  TE_OK(tecore_mem_free(h.other));
  TE_OK(tecore_delayed_state_free(&st));
}
END_TEST

/* The state's tensors, quantized, feed the next update (the step loop). */
START_TEST(delayed_quantize_step) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 3;
  struct tecore_delayed_state st;
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, 2, te_stream, &st));
  const size_t n = 5000;
  float *x = malloc(n * 4);
  tecore_devptr_t din = te_dalloc(n * 4), dq = te_dalloc(n);
  size_t shape[1] = {n};
  float prev_scale = 1.0f;
  for (int step = 0; step < 4; step++) {
    float range = ldexpf(1.0f, step * 3 - 2);
    te_rand_floats(x, n, -range, range);
    te_h2d(din, x, n * 4);
    struct tecore_tensor in, out;
    TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 1, shape, din));
    TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 1, shape, dq));
    TE_OK(tecore_delayed_state_tensor(&st, 1, &out));
    ck_assert_int_eq(out.scaling, TECORE_SCALING_DELAYED);
    TE_OK(tecore_quantize(&in, &out, 0, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    uint8_t *q = malloc(n);
    te_d2h(q, dq, n);
    for (size_t i = 0; i < n; i++) {
      uint8_t want = te_f32_to_e4m3(x[i] * prev_scale);   /* last step's scale */
      ck_assert_msg(q[i] == want, "step %d element %zu: 0x%02x, want 0x%02x", step, i, q[i], want);
    }
    free(q);
    float m = 0;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    float got_amax;
    te_d2h(&got_amax, st.amax + 4, 4);
    ck_assert_msg(got_amax == m, "step %d: amax %g, want %g", step, (double)got_amax, (double)m);
    TE_OK(tecore_delayed_update(&r, &st, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    float s;
    te_d2h(&s, st.scale + 4, 4);
    /* window max of this and the last two steps: ranges grow, so it is m */
    ck_assert_msg(s == (float)(448.0 / m), "step %d: scale %g, want %g", step, (double)s,
                  448.0 / m);
    prev_scale = s;
  }
  free(x);
  TE_OK(tecore_mem_free(din));
  TE_OK(tecore_mem_free(dq));
  TE_OK(tecore_delayed_state_free(&st));
}
END_TEST

/* Current scaling: epsilon floor, power of two, overflow, non-finite amax,
 * through tecore_compute_scale on the device. */
START_TEST(current_scaling_rules) {
  const struct {
    float amax, eps;
    int pow2;
    tecore_dtype_t dt;
    float want;
  } cases[] = {
      {2.0f, 0.0f, 0, TECORE_DTYPE_E4M3, 224.0f},
      {3.0f, 0.0f, 0, TECORE_DTYPE_E4M3, (float)(448.0 / 3.0)},
      {3.0f, 0.0f, 1, TECORE_DTYPE_E4M3, 128.0f},
      {0.0f, 0.0f, 0, TECORE_DTYPE_E4M3, 1.0f},
      {0.0f, 0.5f, 0, TECORE_DTYPE_E4M3, 896.0f},
      {0.25f, 1.0f, 0, TECORE_DTYPE_E5M2, 57344.0f},
      {INFINITY, 1.0f, 0, TECORE_DTYPE_E4M3, 1.0f},
      {NAN, 0.0f, 1, TECORE_DTYPE_E4M3, 1.0f},
      {1e-45f, 0.0f, 0, TECORE_DTYPE_E4M3, FLT_MAX},
      {1e-45f, 0.0f, 1, TECORE_DTYPE_E4M3, 0x1p127f},
      {1e-45f, 1e-12f, 0, TECORE_DTYPE_E4M3, (float)(448.0 / (double)1e-12f)},
      {1000.0f, 0.0f, 1, TECORE_DTYPE_E5M2, 32.0f},
  };
  tecore_devptr_t d = te_dalloc(16);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    struct tecore_tensor t;
    size_t shape[1] = {1};
    TE_OK(tecore_tensor_init(&t, cases[i].dt, 1, shape, 0));
    t.scaling = TECORE_SCALING_CURRENT;
    t.amax = d, t.scale = d + 4, t.scale_inv = d + 8;
    t.amax_epsilon = cases[i].eps;
    t.flags = cases[i].pow2 ? TECORE_TENSOR_POW2_SCALES : 0;
    float a = cases[i].amax;
    te_h2d(d, &a, 4);
    TE_OK(tecore_compute_scale(&t, 0, te_stream));
    float got[3];
    te_d2h(got, d, 12);
    ck_assert_msg(te_f32_bits_of(got[1]) == te_f32_bits_of(cases[i].want),
                  "case %zu (amax %g eps %g pow2 %d): scale %a, want %a", i, (double)a,
                  (double)cases[i].eps, cases[i].pow2, (double)got[1], (double)cases[i].want);
    ck_assert_msg(got[2] == 1.0f / cases[i].want, "case %zu: scale_inv %a", i, (double)got[2]);
  }
  TE_OK(tecore_mem_free(d));
}
END_TEST

START_TEST(state_arguments) {
  struct tecore_recipe r;
  struct tecore_delayed_state st;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_CURRENT));
  TE_EXPECT_INVALID("delayed", tecore_delayed_state_create(&r, TECORE_FP8_WEIGHT, 4, te_stream, &st));
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  TE_EXPECT_INVALID("count", tecore_delayed_state_create(&r, TECORE_FP8_WEIGHT, 0, te_stream, &st));
  TE_EXPECT_INVALID("st", tecore_delayed_state_create(&r, TECORE_FP8_WEIGHT, 4, te_stream, NULL));
  r.history_len = 8;
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_WEIGHT, 4, te_stream, &st));
  struct tecore_tensor t;
  TE_EXPECT_INVALID("index", tecore_delayed_state_tensor(&st, 4, &t));
  struct tecore_recipe r2 = r;
  r2.history_len = 9;
  TE_EXPECT_INVALID("history_len", tecore_delayed_update(&r2, &st, te_stream));
  struct tecore_delayed_state none = {0};
  TE_EXPECT_INVALID("st", tecore_delayed_update(&r, &none, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_delayed_state_free(&st));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("recipe");
  TCase *tc = te_tcase(s, "recipe", 0);
  tcase_add_test(tc, recipe_defaults_and_checks);
  tcase_add_test(tc, formats_and_roles);
  tc = te_tcase(s, "delayed", 1);
  tcase_add_test(tc, history_rotation_max);
  tcase_add_test(tc, most_recent_and_margin);
  tcase_add_test(tc, pow2_scales_delayed);
  tcase_add_test(tc, bad_amax_keeps_scale);
  tcase_add_test(tc, reduction_hook_called);
  tcase_add_test(tc, delayed_quantize_step);
  tcase_add_test(tc, state_arguments);
  tc = te_tcase(s, "current", 1);
  tcase_add_test(tc, current_scaling_rules);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
