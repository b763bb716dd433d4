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

/* The host model of one update of a state laid out as te/recipe.h says,
 * amax[count] | history[len][count] | scale[count] | scale_inv[count],
 * in place: history shifted, amax into row 0, the scale from the window
 * (float-bit max) or the step's amax, scale_inv = 1 / scale, amax 0. */
static void ref_update(float *b, size_t count, int len, tecore_amax_algo_t algo, int margin,
                       int pow2, float fmax) {
  float *amax = b, *hist = b + count, *scale = b + (size_t)(len + 1) * count,
        *inv = b + (size_t)(len + 2) * count;
  for (size_t i = 0; i < count; i++) {
    float win = amax[i];
    for (int k = len - 1; k >= 1; k--) {
      hist[(size_t)k * count + i] = hist[(size_t)(k - 1) * count + i];
      win = bits_max(win, hist[(size_t)k * count + i]);
    }
    hist[i] = amax[i];
    float use = algo == TECORE_AMAX_MOST_RECENT ? bits_max(amax[i], 0.0f) : win;
    scale[i] = ref_delayed(use, scale[i], fmax, margin, pow2);
    inv[i] = 1.0f / scale[i];
    amax[i] = 0.0f;
  }
}

/* An amax as a step may leave it: mostly a float of any exponent, now and
 * then 0, inf or NaN. */
static float rand_amax(void) {
  unsigned pick = (unsigned)te_rand_below(20);
  return pick == 0 ? 0.0f : pick == 1 ? INFINITY : pick == 2 ? NAN
         : ldexpf(te_rand_float(1.0f, 2.0f), (int)te_rand_below(60) - 30);
}

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
  size_t words = ((size_t)len + 3) * COUNT;
  float *want = calloc(words, 4), *g = malloc(words * 4);
  for (size_t i = 0; i < 2 * COUNT; i++) want[(size_t)(len + 1) * COUNT + i] = 1.0f;
  char what[160];
  for (int step = 0; step < steps; step++) {
    for (int i = 0; i < COUNT; i++) want[i] = rand_amax();
    te_h2d(st.amax, want, COUNT * 4);
    TE_OK(tecore_delayed_update(&r, &st, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    ref_update(want, COUNT, len, algo, margin, pow2, fmax);
    te_d2h(g, st.base, words * 4);
    snprintf(what, sizeof what, "len %d %s margin %d pow2 %d step %d", len,
             algo == TECORE_AMAX_MAX ? "max" : "most_recent", margin, pow2, step);
    te_expect_f32_bits(g, want, COUNT, "amax after the update (reset)");
    te_expect_f32_bits(g + COUNT, want + COUNT, words - COUNT, what);
  }
  free(want);
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

/* ---- several states in one launch (tecore_delayed_update_multi) ------------ */

/* How many launches of kernel the profile recorded since it started (and
 * stops it); 0 when none. */
static int profiled_launches(const char *kernel) {
  TE_OK(tecore_profile_stop());
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  TE_OK(tecore_profile_report(fileno(f), NULL));
  rewind(f);
  char line[512], name[128];
  int calls = 0, c;
  while (fgets(line, sizeof line, f))
    if (sscanf(line, "%127s %d", name, &c) == 2 && strcmp(name, kernel) == 0) calls = c;
  fclose(f);
  return calls;
}

/* A group of n tensors made twice (a for the multi update, b for one
 * update per state) with the same fresh random contents: history and
 * scale of any exponent (some 0), this step's amaxes, scale_inv poisoned
 * (the update writes all of it).  n == 0: an empty group, zeroed. */
struct group {
  size_t n;
  tecore_fp8_role_t role;
  struct tecore_delayed_state a, b;
  float *want;   /* the host model's state */
};

static void group_make(struct group *g, const struct tecore_recipe *r) {
  memset(&g->a, 0, sizeof g->a);
  memset(&g->b, 0, sizeof g->b);
  g->want = NULL;
  if (!g->n) return;
  TE_OK(tecore_delayed_state_create(r, g->role, g->n, te_stream, &g->a));
  TE_OK(tecore_delayed_state_create(r, g->role, g->n, te_stream, &g->b));
  size_t len = (size_t)r->history_len, words = (len + 3) * g->n;
  g->want = malloc(words * 4);
  ck_assert_ptr_nonnull(g->want);
  for (size_t k = 0; k < (len + 2) * g->n; k++)
    g->want[k] = te_rand_below(8) == 0 ? 0.0f
                 : ldexpf(te_rand_float(1.0f, 2.0f), (int)te_rand_below(40) - 20);
  te_poison_host_nan(g->want + (len + 2) * g->n, g->n);
  te_h2d(g->a.base, g->want, words * 4);
  te_h2d(g->b.base, g->want, words * 4);
}

static void group_free(struct group *g) {
  if (!g->n) return;
  TE_OK(tecore_delayed_state_free(&g->a));
  TE_OK(tecore_delayed_state_free(&g->b));
  free(g->want);
}

/* One case: groups of the sizes given (0: an empty group), steps updates
 * of all of them with fresh amaxes, through one tecore_delayed_update_multi
 * (states a) and through tecore_delayed_update on each (states b); after
 * each step both must be the host model's bits, so each other's too, and
 * the multi call must have been ceil(groups / 16) launches. */
static void multi_case(const size_t *sizes, size_t ngroups, int len, int steps) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = len;
  r.format = (tecore_fp8_format_t)te_rand_below(3);
  r.amax_algo = te_rand_below(3) == 0 ? TECORE_AMAX_MOST_RECENT : TECORE_AMAX_MAX;
  r.margin = (int)te_rand_below(4);
  r.flags = te_rand_below(2) ? TECORE_RECIPE_POW2_SCALES : 0;
  struct group *g = calloc(ngroups, sizeof *g);
  struct tecore_delayed_state *sa = calloc(ngroups ? ngroups : 1, sizeof *sa);
  size_t live = 0;
  for (size_t k = 0; k < ngroups; k++) {
    g[k].n = sizes[k];
    g[k].role = (tecore_fp8_role_t)te_rand_below(3);
    group_make(&g[k], &r);
    sa[k] = g[k].a;
    live += sizes[k] != 0;
  }
  char what[200];
  for (int step = 0; step < steps; step++) {
    for (size_t k = 0; k < ngroups; k++) {
      if (!g[k].n) continue;
      size_t n = g[k].n;
      for (size_t i = 0; i < n; i++) g[k].want[i] = rand_amax();
      te_h2d(g[k].a.amax, g[k].want, n * 4);
      te_h2d(g[k].b.amax, g[k].want, n * 4);
      /* scale_inv is written whole: poison it again every step */
      te_poison_dev_nan(g[k].a.scale_inv, n);
      te_poison_dev_nan(g[k].b.scale_inv, n);
    }
    TE_OK(tecore_stream_synchronize(te_stream));
    TE_OK(tecore_profile_start());
    TE_OK(tecore_delayed_update_multi(&r, sa, ngroups, te_stream));
    int launches = profiled_launches("te_fp8_delayed_update");
    ck_assert_msg(launches == (int)((live + 15) / 16),
                  "%zu groups (%zu not empty) took %d launches, want %zu", ngroups, live,
                  launches, (live + 15) / 16);
    for (size_t k = 0; k < ngroups; k++)
      if (g[k].n) TE_OK(tecore_delayed_update(&r, &g[k].b, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    for (size_t k = 0; k < ngroups; k++) {
      if (!g[k].n) continue;
      size_t n = g[k].n, words = ((size_t)len + 3) * n;
      ref_update(g[k].want, n, len, r.amax_algo, r.margin,
                 (r.flags & TECORE_RECIPE_POW2_SCALES) != 0, fp8max(g[k].a.dtype));
      float *ga = malloc(words * 4), *gb = malloc(words * 4);
      te_d2h(ga, g[k].a.base, words * 4);
      te_d2h(gb, g[k].b.base, words * 4);
      snprintf(what, sizeof what, "group %zu of %zu (%zu tensors, len %d, %s, margin %d%s), "
               "step %d: multi update vs the host model", k, ngroups, n, len,
               r.amax_algo == TECORE_AMAX_MAX ? "max" : "most_recent", r.margin,
               r.flags ? ", pow2" : "", step);
      te_expect_f32_bits(ga, g[k].want, words, what);
      snprintf(what, sizeof what, "group %zu of %zu (%zu tensors, len %d), step %d: one update "
               "per state vs the multi update", k, ngroups, n, len, step);
      te_expect_mem_eq(gb, ga, words * 4, what);
      free(ga);
      free(gb);
    }
  }
  for (size_t k = 0; k < ngroups; k++) group_free(&g[k]);
  free(g);
  free(sa);
}

/* The fuser's three roles, a single tensor, empty groups among full ones,
 * more groups than one launch takes; histories of one row, a few, the
 * default 1024 and longer than one pass of the GPU kernel's block. */
START_TEST(multi_update_matches_per_state_updates) {
  static const size_t one[] = {1}, roles[] = {24, 24, 24}, mixed[] = {37, 0, 1, 300, 0, 9},
                      empty_first[] = {0, 5};
  multi_case(one, 1, 1, 3);
  multi_case(one, 1, 1024, 2);
  multi_case(roles, 3, 1024, 3);
  multi_case(roles, 3, 16, 4);
  multi_case(mixed, 6, 7, 4);
  multi_case(mixed, 6, 1500, 2);
  multi_case(empty_first, 2, 2, 3);
  size_t many[19];
  for (size_t k = 0; k < 19; k++) many[k] = 1 + te_rand_below(40);
  many[te_rand_below(19)] = 0;
  multi_case(many, 19, 5, 3);
  multi_case(many, 17, 33, 2);
  /* every group empty, and no group: nothing is launched */
  static const size_t none[] = {0, 0, 0};
  multi_case(none, 3, 4, 1);
  multi_case(none, 0, 4, 1);
}
END_TEST

/* The hook: once per non-empty state, in order, before the kernel, which
 * then uses what it wrote. */
START_TEST(multi_update_reduction_hook) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 3;
  r.format = TECORE_FP8_E4M3;
  struct hook_ctx h = {.ret = TECORE_SUCCESS};
  r.amax_reduce = reduce_hook;
  r.amax_reduce_ctx = &h;
  struct tecore_delayed_state st[3];
  memset(&st[1], 0, sizeof st[1]);
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, 2, te_stream, &st[0]));
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_WEIGHT, 2, te_stream, &st[2]));
  h.other = te_dalloc(8);
  float mine[2] = {1.0f, 2.0f}, theirs[2] = {4.0f, 8.0f};
  te_h2d(st[0].amax, mine, 8);
  te_h2d(st[2].amax, mine, 8);
  te_h2d(h.other, theirs, 8);
  TE_OK(tecore_delayed_update_multi(&r, st, 3, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  ck_assert_int_eq(h.calls, 2);
  ck_assert(h.seen == st[2].amax);   /* the last call: the third state */
  float s[2];
  for (int k = 0; k < 3; k += 2) {
    te_d2h(s, st[k].scale, 8);
    ck_assert_msg(s[0] == 112.0f && s[1] == 56.0f, "state %d: scales %g %g use the reduced "
                  "amaxes 4 8", k, (double)s[0], (double)s[1]);
  }
  /* a failing hook: its error, and no update queued */
  h.ret = TECORE_ERR_SYSTEM;
  float before[12], after[12];   /* (3 + 3) x 2 floats */
  te_d2h(before, st[0].base, sizeof before);
  TE_EXPECT_ERR(TECORE_ERR_SYSTEM, "amax_reduce", tecore_delayed_update_multi(&r, st, 3, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(after, st[0].base, sizeof after);
  te_expect_f32_bits(after, before, 12, "state 0 after a failed hook");
  TE_OK(tecore_mem_free(h.other));
  TE_OK(tecore_delayed_state_free(&st[0]));
  TE_OK(tecore_delayed_state_free(&st[2]));
}
END_TEST

/* Refused calls name the argument and queue nothing: the states keep
 * their bits. */
START_TEST(multi_update_arguments) {
  struct tecore_recipe r, cur;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 4;
  TE_OK(tecore_recipe_init(&cur, TECORE_RECIPE_CURRENT));
  struct tecore_delayed_state st[2];
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_ACTIVATION, 3, te_stream, &st[0]));
  TE_OK(tecore_delayed_state_create(&r, TECORE_FP8_GRADIENT, 5, te_stream, &st[1]));
  float amax[5] = {1, 2, 3, 4, 5};
  te_h2d(st[1].amax, amax, 20);
  float before[35], after[35];   /* (4 + 3) x 5 floats */
  te_d2h(before, st[1].base, sizeof before);
  TE_EXPECT_INVALID("r", tecore_delayed_update_multi(NULL, st, 2, te_stream));
  TE_EXPECT_INVALID("delayed", tecore_delayed_update_multi(&cur, st, 2, te_stream));
  TE_EXPECT_INVALID("states", tecore_delayed_update_multi(&r, NULL, 2, te_stream));
  TE_EXPECT_INVALID("count", tecore_delayed_update_multi(&r, st, ((size_t)1 << 20) + 1, te_stream));
  struct tecore_recipe r5 = r;
  r5.history_len = 5;
  TE_EXPECT_INVALID("history_len", tecore_delayed_update_multi(&r5, st, 2, te_stream));
  struct tecore_delayed_state bad[3] = {st[1], st[0], st[0]};
  bad[1].base = 0;   /* count set, no allocation: not a created state */
  TE_EXPECT_INVALID("states[1]", tecore_delayed_update_multi(&r, bad, 2, te_stream));
  bad[1] = st[0];
  bad[1].scale += 2;
  TE_EXPECT_INVALID("states[1]->scale", tecore_delayed_update_multi(&r, bad, 2, te_stream));
  bad[1] = st[0];
  TE_EXPECT_INVALID("overlaps", tecore_delayed_update_multi(&r, bad, 3, te_stream));
  bad[1] = st[1];   /* the same state twice */
  TE_EXPECT_INVALID("overlaps", tecore_delayed_update_multi(&r, bad, 2, te_stream));
  bad[1] = st[0];
  bad[1].amax = st[1].history;   /* created, moved onto another state's history */
  TE_EXPECT_INVALID("overlaps", tecore_delayed_update_multi(&r, bad, 2, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(after, st[1].base, sizeof after);
  te_expect_f32_bits(after, before, 35, "a state after refused updates");
  /* count 0 with no array: a valid no-op */
  TE_OK(tecore_delayed_update_multi(&r, NULL, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_delayed_state_free(&st[0]));
  TE_OK(tecore_delayed_state_free(&st[1]));
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
  tc = te_tcase(s, "multi", 1);
  tcase_add_test(tc, multi_update_matches_per_state_updates);
  tcase_add_test(tc, multi_update_reduction_hook);
  tcase_add_test(tc, multi_update_arguments);
  tc = te_tcase(s, "current", 1);
  tcase_add_test(tc, current_scaling_rules);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
