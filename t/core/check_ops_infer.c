/* SPDX-License-Identifier: Apache-2.0 */
/* check_ops_infer.c -- inference sequences (TECORE_SEQ_INFERENCE, te/ops.h):
 * a forward-only twin of a training sequence, its parameters and FP8
 * scales copied in (tecore_seq_params, tecore_seq_fp8_state), computes the
 * training forward's bits (FP8 delayed and current scaling, BF16); its
 * FP8 weights are quantized by the first forward only (launches counted
 * with te/profile.h), again after tecore_seq_weights_changed and a scale
 * update, never in a capture (refused), and graphs captured after the
 * first forward see refreshed weights; its plan says so, keeps every
 * Linear in FP8 whatever TECORE_OPS_FP8_MIN_MNK says, and saves no
 * columnwise copy; its Linear+GELU GEMMs write no pre-activation; it
 * allocates no gradients; backward and bad arguments are refused.
 *
 * Shapes: te-demo's MLP block (residual fork, RMSNorm, Linear+bias, GELU,
 * Linear+bias, residual add), two of them, hidden 64, ffn 128, 32 tokens,
 * BF16.
 *
 * Tolerance.  vdev: the output bit for bit (the same kernels on the same
 * bytes: a rowwise quantize writes what cast+transpose writes rowwise).
 * cuda: the same kernels too, but a GEMM library may pick another
 * algorithm where the plans differ, and one FP8 code that flips moves a
 * value by up to 2^-3 of itself: ||a - b|| / ||b|| <= 0.15 (the bound
 * check_ops uses between FP8 plans), and the test says whether the bits
 * matched. */
#include "tests.h"
#include "common/convert.h"

/* On cuda the training twin would keep these small Linears in BF16
 * (TECORE_OPS_FP8_MIN_MNK's default there) while the inference one runs
 * FP8: the same bits need the same kernels.  A test that wants the
 * default's effect sets it. */
__attribute__((constructor)) static void fp8_everywhere(void) {
  setenv("TECORE_OPS_FP8_MIN_MNK", "0", 0);
}

enum { HID = 64, FFN = 128, ROWS = 32, NBLK = 2, NOPS = 6 * NBLK, NLIN = 2 * NBLK, MAXP = 64 };
#define NY ((size_t)ROWS * HID)

static tecore_stream_t S(void) { return te_stream; }

/* ---- building ---------------------------------------------------------------- */

static tecore_seq_t *mlp(unsigned flags, const struct tecore_recipe *r) {
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_BF16,
                                  .seed = 7, .flags = flags};
  tecore_seq_t *s = NULL;
  TE_OK(tecore_seq_create(&cfg, &s));
  for (int b = 0; b < NBLK; b++) {
    const struct tecore_op_desc d[6] = {
        {.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = b},
        {.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
        {.kind = TECORE_OP_LINEAR, .features = FFN, .bias = 1},
        {.kind = TECORE_OP_GELU},
        {.kind = TECORE_OP_LINEAR, .features = HID, .bias = 1},
        {.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = b}};
    for (int k = 0; k < 6; k++) TE_OK(tecore_seq_add(s, &d[k], NULL));
  }
  if (r) TE_OK(tecore_seq_set_recipe(s, r, S()));
  TE_OK(tecore_seq_build(s, S()));
  return s;
}

/* n random bf16 values in [lo, hi) written at p. */
static void put_bf16(tecore_devptr_t p, size_t n, float lo, float hi) {
  uint16_t *h = malloc(n * 2);
  ck_assert_ptr_nonnull(h);
  for (size_t i = 0; i < n; i++) h[i] = te_f32_to_bf16(te_rand_float(lo, hi));
  te_h2d(p, h, n * 2);
  free(h);
}

/* A fresh device input [ROWS][HID] (the caller frees its data). */
static struct tecore_tensor new_act(void) {
  struct tecore_tensor t;
  size_t sh[2] = {ROWS, HID};
  TE_OK(tecore_tensor_init(&t, TECORE_DTYPE_BF16, 2, sh, te_dalloc(NY * 2)));
  return t;
}

/* Every parameter of s drawn anew (gammas around 1, weights in
 * +-1/sqrt(in), biases small), not the build's values. */
static void draw_params(tecore_seq_t *s) {
  struct tecore_seq_param p[MAXP];
  size_t n = 0;
  TE_OK(tecore_seq_params(s, p, MAXP, &n));
  ck_assert_uint_le(n, MAXP);
  for (size_t i = 0; i < n; i++) {
    size_t m = tecore_tensor_numel(&p[i].value);
    if (strcmp(p[i].name, "gamma") == 0) {
      put_bf16(p[i].value.data, m, 0.5f, 1.5f);
    } else if (strcmp(p[i].name, "weight") == 0) {
      float a = 1.0f / sqrtf((float)p[i].value.shape[1]);
      put_bf16(p[i].value.data, m, -a, a);
    } else {
      put_bf16(p[i].value.data, m, -0.2f, 0.2f);
    }
  }
}

/* from's parameters and FP8 scaling state into to (same operations). */
static void copy_model(tecore_seq_t *from, tecore_seq_t *to) {
  struct tecore_seq_param a[MAXP], b[MAXP];
  size_t na = 0, nb = 0;
  TE_OK(tecore_seq_params(from, a, MAXP, &na));
  TE_OK(tecore_seq_params(to, b, MAXP, &nb));
  ck_assert_uint_eq(na, nb);
  for (size_t i = 0; i < na; i++)
    TE_OK(tecore_memcpy_async(b[i].value.data, a[i].value.data,
                              tecore_tensor_numel(&a[i].value) * 2, S()));
  for (int role = 0; role < 3; role++) {
    struct tecore_delayed_state sa, sb;
    TE_OK(tecore_seq_fp8_state(from, (tecore_fp8_role_t)role, &sa));
    TE_OK(tecore_seq_fp8_state(to, (tecore_fp8_role_t)role, &sb));
    ck_assert_uint_eq(sa.count, sb.count);
    ck_assert_int_eq(sa.history_len, sb.history_len);
    if (sa.count)
      TE_OK(tecore_memcpy_async(sb.base, sa.base,
                                (3 + (size_t)sa.history_len) * sa.count * sizeof(float), S()));
  }
  TE_OK(tecore_stream_synchronize(S()));
}

/* One forward of s on x; y poisoned first, read back into h. */
static void fwd(tecore_seq_t *s, const struct tecore_tensor *x, const struct tecore_tensor *y,
                tecore_devptr_t noop, uint16_t *h) {
  te_poison_dev(y->data, NY * 2);
  TE_OK(tecore_seq_forward(s, x, y, noop, S()));
  te_d2h(h, y->data, NY * 2);
}

/* A training step's worth of work on s (forward, backward, scale update)
 * so that its delayed scales and histories are no longer the initial 1. */
static void train_step(tecore_seq_t *s) {
  struct tecore_tensor x = new_act(), y = new_act(), dy = new_act();
  put_bf16(x.data, NY, -1.5f, 1.5f);
  put_bf16(dy.data, NY, -0.05f, 0.05f);
  TE_OK(tecore_seq_forward(s, &x, &y, 0, S()));
  TE_OK(tecore_seq_backward(s, &dy, NULL, S()));
  TE_OK(tecore_seq_update_scales(s, S()));
  TE_OK(tecore_stream_synchronize(S()));
  TE_OK(tecore_mem_free(x.data));
  TE_OK(tecore_mem_free(y.data));
  TE_OK(tecore_mem_free(dy.data));
}

static double rel_l2(const uint16_t *a, const uint16_t *b, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double d = (double)te_bf16_to_f32(a[i]) - te_bf16_to_f32(b[i]);
    num += d * d;
    den += (double)te_bf16_to_f32(b[i]) * te_bf16_to_f32(b[i]);
  }
  return den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
}

static int all_finite(const uint16_t *a, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (!isfinite(te_bf16_to_f32(a[i]))) return 0;
  return 1;
}

/* got == want: bit for bit on vdev; within the header's tolerance on cuda. */
static void expect_same_y(const uint16_t *got, const uint16_t *want, const char *what) {
  ck_assert_msg(all_finite(want, NY), "%s: the reference is not finite (poison left?)", what);
  int same = memcmp(got, want, NY * 2) == 0;
  if (te_backend_kind == TECORE_BACKEND_VDEV) {
    te_expect_mem_eq(got, want, NY * 2, what);
    return;
  }
  double e = rel_l2(got, want, NY);
  printf("# %s: %s (||a - b|| / ||b|| %.3g)\n", what, same ? "same bits" : "bits differ", e);
  ck_assert_msg(all_finite(got, NY) && e <= 0.15, "%s: ||a - b|| / ||b|| = %.3g > 0.15", what, e);
}

/* ---- the same bits as training ------------------------------------------------- */

/* Training twin after two steps (scales measured), inference twin with
 * its parameters and scales: the inference forward equals the training
 * forward that quantizes the weights (noop 0) and the one that reuses
 * them (noop set), on fresh inputs. */
static void same_bits_case(const struct tecore_recipe *r, const char *name) {
  tecore_seq_t *tr = mlp(0, r), *inf = mlp(TECORE_SEQ_INFERENCE, r);
  draw_params(tr);
  train_step(tr);
  train_step(tr);
  copy_model(tr, inf);
  struct tecore_tensor x1 = new_act(), x2 = new_act(), y = new_act();
  put_bf16(x1.data, NY, -1.5f, 1.5f);
  put_bf16(x2.data, NY, -1.5f, 1.5f);
  tecore_devptr_t flag = te_dalloc(4);
  uint16_t *t1 = malloc(NY * 2), *t2 = malloc(NY * 2), *i1 = malloc(NY * 2), *i2 = malloc(NY * 2);
  TE_OK(tecore_memset_d32_async(flag, 0, 1, S()));
  fwd(tr, &x1, &y, flag, t1);
  TE_OK(tecore_memset_d32_async(flag, 1, 1, S()));
  fwd(tr, &x2, &y, flag, t2);
  /* the flag (set) is ignored: the first forward quantizes anyway */
  fwd(inf, &x1, &y, flag, i1);
  fwd(inf, &x2, &y, 0, i2);
  char what[128];
  snprintf(what, sizeof what, "%s: inference forward vs training forward (noop 0)", name);
  expect_same_y(i1, t1, what);
  snprintf(what, sizeof what, "%s: second inference forward vs training forward (noop set)", name);
  expect_same_y(i2, t2, what);
  ck_assert_msg(memcmp(t1, t2, NY * 2) != 0, "%s: two inputs gave one output", name);
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_mem_free(x1.data));
  TE_OK(tecore_mem_free(x2.data));
  TE_OK(tecore_mem_free(y.data));
  free(t1), free(t2), free(i1), free(i2);
  TE_OK(tecore_seq_destroy(tr));
  TE_OK(tecore_seq_destroy(inf));
}

START_TEST(test_infer_fp8_delayed_same_bits) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.history_len = 1 + (int)te_rand_below(16);
  same_bits_case(&r, "fp8 delayed");
}
END_TEST

START_TEST(test_infer_fp8_current_same_bits) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_CURRENT));
  same_bits_case(&r, "fp8 current");
}
END_TEST

START_TEST(test_infer_bf16_same_bits) { same_bits_case(NULL, "bf16"); }
END_TEST

/* ---- launches -------------------------------------------------------------------- */

/* Kernel launches of one eager forward of s whose name contains pat
 * (the profile's report lines: "name [shape] calls total mean share"),
 * and all launches in *all. */
static size_t launches(tecore_seq_t *s, const struct tecore_tensor *x,
                       const struct tecore_tensor *y, tecore_devptr_t noop, const char *pat,
                       size_t *all, char *log, size_t loglen) {
  TE_OK(tecore_stream_synchronize(S()));
  TE_OK(tecore_profile_start());
  TE_OK(tecore_seq_forward(s, x, y, noop, S()));
  TE_OK(tecore_profile_stop());
  FILE *f = tmpfile();
  ck_assert_ptr_nonnull(f);
  TE_OK(tecore_profile_report(fileno(f), NULL));
  rewind(f);
  char line[512];
  size_t hit = 0, total = 0, used = 0;
  if (loglen) log[0] = '\0';
  while (fgets(line, sizeof line, f)) {
    /* the calls: the first token of digits only after the name */
    char copy[512], *save = NULL;
    snprintf(copy, sizeof copy, "%s", line);
    char *name = strtok_r(copy, " \t\n", &save);
    if (!name || strcmp(name, "kernel") == 0 || strcmp(name, "all") == 0) continue;
    size_t calls = 0;
    for (char *t = strtok_r(NULL, " \t\n", &save); t; t = strtok_r(NULL, " \t\n", &save))
      if (strspn(t, "0123456789") == strlen(t)) {
        calls = strtoul(t, NULL, 10);
        break;
      }
    if (!calls) continue;
    total += calls;
    if (strstr(line, pat)) hit += calls;
    int k = snprintf(log + used, loglen - used, "#   %s %zu\n", name, calls);
    if (k > 0 && (size_t)k < loglen - used) used += (size_t)k;
  }
  fclose(f);
  *all = total;
  return hit;
}

/* The first forward quantizes every weight, the second nothing of them:
 * exactly NLIN quantize launches fewer, and no cast+transpose in either
 * (rowwise only); weights_changed and a scale update bring the weights'
 * quantize back for one forward.  The training twin launches at least
 * NLIN more than the second inference forward even with its noop flag set
 * (its weight quantizes launch and exit early), and a cast+transpose. */
START_TEST(test_infer_second_forward_launches_no_weight_quantize) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  tecore_seq_t *inf = mlp(TECORE_SEQ_INFERENCE, &r), *tr = mlp(0, &r);
  draw_params(inf);
  struct tecore_tensor x = new_act(), y = new_act();
  put_bf16(x.data, NY, -1.5f, 1.5f);
  char l1[4096], l2[4096], lt[4096];
  size_t a1 = 0, a2 = 0, a3 = 0, a4 = 0, at = 0, ct = 0;
  size_t q1 = launches(inf, &x, &y, 0, "quantize", &a1, l1, sizeof l1);
  size_t q2 = launches(inf, &x, &y, 0, "quantize", &a2, l2, sizeof l2);
  printf("# first inference forward: %zu launches, %zu quantize\n%s", a1, q1, l1);
  printf("# second inference forward: %zu launches, %zu quantize\n%s", a2, q2, l2);
  ck_assert_msg(q1 == q2 + NLIN && a1 == a2 + NLIN,
                "the second forward launches %zu (%zu quantize), the first %zu (%zu): want "
                "exactly the %d weight quantizes fewer", a2, q2, a1, q1, NLIN);
  ck_assert_msg(!strstr(l1, "transpose") && !strstr(l1, "_ct"),
                "an inference forward makes a columnwise copy:\n%s", l1);
  TE_OK(tecore_seq_weights_changed(inf));
  size_t q3 = launches(inf, &x, &y, 0, "quantize", &a3, l2, sizeof l2);
  ck_assert_msg(q3 == q1 && a3 == a1, "after weights_changed: %zu launches (%zu quantize), "
                "want %zu (%zu)", a3, q3, a1, q1);
  TE_OK(tecore_seq_update_scales(inf, S()));
  size_t q4 = launches(inf, &x, &y, 0, "quantize", &a4, l2, sizeof l2);
  ck_assert_msg(q4 == q1 && a4 == a1, "after a scale update: %zu launches (%zu quantize), "
                "want %zu (%zu)", a4, q4, a1, q1);
  tecore_devptr_t flag = te_dalloc(4);
  TE_OK(tecore_memset_d32_async(flag, 1, 1, S()));
  TE_OK(tecore_seq_forward(tr, &x, &y, 0, S()));
  ct = launches(tr, &x, &y, flag, "quantize", &at, lt, sizeof lt);
  printf("# training forward, noop set: %zu launches, %zu quantize\n%s", at, ct, lt);
  /* its weights' quantizes (exiting early) and a cast+transpose where the
   * inference twin quantizes rowwise */
  ck_assert_msg(ct >= NLIN && at >= a2 + NLIN && strstr(lt, "_ct") != NULL,
                "training forward (noop set) %zu launches (%zu quantize), inference %zu (%zu)",
                at, ct, a2, q2);
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_mem_free(x.data));
  TE_OK(tecore_mem_free(y.data));
  TE_OK(tecore_seq_destroy(inf));
  TE_OK(tecore_seq_destroy(tr));
}
END_TEST

/* The Linear+GELU GEMMs write no pre-activation (the GELU epilogue
 * without aux): its boundary (the GELU's input, ops 3 and 9) keeps the
 * poison the test put there, while the training twin writes it.  On cuda
 * a cuBLASLt without that epilogue for these types falls back to the aux
 * one: then the boundary is written, which the test reports. */
START_TEST(test_infer_gelu_writes_no_preactivation) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  for (int infer = 0; infer < 2; infer++) {
    tecore_seq_t *s = mlp(infer ? TECORE_SEQ_INFERENCE : 0, &r);
    struct tecore_seq_saved sv[128];
    size_t ns = 0, pre = 0;
    TE_OK(tecore_seq_get_saved(s, sv, 128, &ns));
    struct tecore_tensor x = new_act(), y = new_act();
    put_bf16(x.data, NY, -1.5f, 1.5f);
    size_t bytes = (size_t)ROWS * FFN * 2;
    unsigned char *h = malloc(bytes);
    for (size_t i = 0; i < ns; i++) {
      if (sv[i].part != TECORE_SEQ_SAVED_DATA || (sv[i].bnd != 3 && sv[i].bnd != 9)) continue;
      ck_assert_uint_eq(sv[i].bytes, bytes);
      te_poison_dev(sv[i].ptr, bytes);
      pre++;
    }
    ck_assert_uint_eq(pre, NBLK);
    TE_OK(tecore_seq_forward(s, &x, &y, 0, S()));
    TE_OK(tecore_stream_synchronize(S()));
    for (size_t i = 0; i < ns; i++) {
      if (sv[i].part != TECORE_SEQ_SAVED_DATA || (sv[i].bnd != 3 && sv[i].bnd != 9)) continue;
      te_d2h(h, sv[i].ptr, bytes);
      size_t kept = 0;
      for (size_t k = 0; k < bytes; k++) kept += h[k] == TE_POISON_BYTE;
      if (!infer) {
        ck_assert_msg(kept < bytes, "training: the pre-activation at boundary %zu is unwritten",
                      sv[i].bnd);
      } else if (te_backend_kind == TECORE_BACKEND_VDEV) {
        te_expect_bytes_eq(h, TE_POISON_BYTE, bytes, "inference: the pre-activation boundary");
      } else {
        printf("# cuda: inference GELU GEMM %s the pre-activation (boundary %zu)\n",
               kept == bytes ? "did not write" : "wrote (the aux epilogue's fallback)", sv[i].bnd);
      }
    }
    free(h);
    TE_OK(tecore_mem_free(x.data));
    TE_OK(tecore_mem_free(y.data));
    TE_OK(tecore_seq_destroy(s));
  }
}
END_TEST

/* ---- weights changed ------------------------------------------------------------------ */

/* New parameters without tecore_seq_weights_changed: the cached FP8
 * weights still give the old output (biases and gammas are read as they
 * are, so only the weights are changed here); with it, the training
 * twin's output for the new parameters. */
START_TEST(test_infer_weights_changed_reaches_output) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_CURRENT));
  tecore_seq_t *inf = mlp(TECORE_SEQ_INFERENCE, &r), *tr = mlp(0, &r);
  draw_params(inf);
  struct tecore_tensor x = new_act(), y = new_act();
  put_bf16(x.data, NY, -1.5f, 1.5f);
  uint16_t *y1 = malloc(NY * 2), *y2 = malloc(NY * 2), *y3 = malloc(NY * 2), *yt = malloc(NY * 2);
  fwd(inf, &x, &y, 0, y1);
  struct tecore_seq_param p[MAXP];
  size_t n = 0;
  TE_OK(tecore_seq_params(inf, p, MAXP, &n));
  for (size_t i = 0; i < n; i++)
    if (strcmp(p[i].name, "weight") == 0) {
      float a = 1.0f / sqrtf((float)p[i].value.shape[1]);
      put_bf16(p[i].value.data, tecore_tensor_numel(&p[i].value), -a, a);
    }
  fwd(inf, &x, &y, 0, y2);
  te_expect_mem_eq(y2, y1, NY * 2, "y with new weights, not said changed (cached FP8 weights)");
  TE_OK(tecore_seq_weights_changed(inf));
  fwd(inf, &x, &y, 0, y3);
  ck_assert_msg(rel_l2(y3, y1, NY) > 0.05, "the new weights did not reach the output (%.3g)",
                rel_l2(y3, y1, NY));
  copy_model(inf, tr);
  fwd(tr, &x, &y, 0, yt);
  expect_same_y(y3, yt, "after weights_changed vs the training twin");
  TE_OK(tecore_mem_free(x.data));
  TE_OK(tecore_mem_free(y.data));
  free(y1), free(y2), free(y3), free(yt);
  TE_OK(tecore_seq_destroy(inf));
  TE_OK(tecore_seq_destroy(tr));
}
END_TEST

/* ---- capture -------------------------------------------------------------------------- */

/* The first forward is refused in a capture (it would bake the weights'
 * quantize into the graph); after one eager forward the capture holds no
 * quantize of a weight and replays the eager bits; after new weights and
 * one eager forward, the same graph computes with them. */
START_TEST(test_infer_capture_refuses_weight_quantize) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  tecore_seq_t *inf = mlp(TECORE_SEQ_INFERENCE, &r);
  draw_params(inf);
  struct tecore_tensor x = new_act(), y = new_act();
  put_bf16(x.data, NY, -1.5f, 1.5f);
  uint16_t *ye = malloc(NY * 2), *yg = malloc(NY * 2);
  tecore_graph_t g = NULL;
  tecore_graph_exec_t ge = NULL;
  TE_OK(tecore_stream_begin_capture(S(), TECORE_CAPTURE_THREAD_LOCAL));
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, "outside the capture",
                tecore_seq_forward(inf, &x, &y, 0, S()));
  TE_OK(tecore_stream_end_capture(S(), &g));
  TE_OK(tecore_graph_destroy(g));
  for (int round = 0; round < 2; round++) {
    if (round == 1) {
      draw_params(inf);
      TE_OK(tecore_seq_weights_changed(inf));
    }
    fwd(inf, &x, &y, 0, ye);   /* eager: quantizes the weights */
    if (round == 0) {
      TE_OK(tecore_stream_begin_capture(S(), TECORE_CAPTURE_THREAD_LOCAL));
      TE_OK(tecore_seq_forward(inf, &x, &y, 0, S()));
      TE_OK(tecore_stream_end_capture(S(), &g));
      TE_OK(tecore_graph_instantiate(&ge, g));
    }
    te_poison_dev(y.data, NY * 2);
    TE_OK(tecore_graph_launch(ge, S()));
    te_d2h(yg, y.data, NY * 2);
    ck_assert_msg(all_finite(ye, NY), "round %d: the eager output is not finite", round);
    te_expect_mem_eq(yg, ye, NY * 2, round ? "replay after new weights" : "replay");
  }
  TE_OK(tecore_graph_exec_destroy(ge));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_mem_free(x.data));
  TE_OK(tecore_mem_free(y.data));
  free(ye), free(yg);
  TE_OK(tecore_seq_destroy(inf));
}
END_TEST

/* ---- plans ------------------------------------------------------------------------------ */

/* The plan says inference; TECORE_OPS_FP8_MIN_MNK, which keeps the
 * training twin's Linears in BF16, leaves the inference twin's in FP8;
 * no columnwise FP8 copy is saved. */
START_TEST(test_infer_plan_fp8_whatever_min_mnk) {
  ck_assert_int_eq(setenv("TECORE_OPS_FP8_MIN_MNK", "4611686018427387904", 1), 0);
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  tecore_seq_t *inf = mlp(TECORE_SEQ_INFERENCE, &r), *tr = mlp(0, &r);
  char fi[2048], bi[256], ft[2048];
  TE_OK(tecore_seq_describe(inf, TECORE_SEQ_FORWARD, fi, sizeof fi, NULL));
  TE_OK(tecore_seq_describe(inf, TECORE_SEQ_BACKWARD, bi, sizeof bi, NULL));
  TE_OK(tecore_seq_describe(tr, TECORE_SEQ_FORWARD, ft, sizeof ft, NULL));
  printf("# inference: %s\n# %s\n# training: %s\n", fi, bi, ft);
  ck_assert_msg(strncmp(fi, "forward (inference, FP8 weights quantized once, rowwise only): ",
                        63) == 0, "inference forward plan: %s", fi);
  ck_assert_msg(strstr(fi, "rmsnorm+quantize[1]") && !strstr(fi, "(bf16)"),
                "inference forward plan not all FP8: %s", fi);
  ck_assert_msg(strstr(ft, "(bf16)") != NULL, "training plan has no BF16 Linear: %s", ft);
  ck_assert_str_eq(bi, "backward: none (inference)");
  struct tecore_seq_saved sv[128];
  size_t ns = 0, rows = 0;
  TE_OK(tecore_seq_get_saved(inf, sv, 128, &ns));
  ck_assert_uint_le(ns, 128);
  for (size_t i = 0; i < ns; i++) {
    ck_assert_msg(sv[i].part != TECORE_SEQ_SAVED_FP8_COL, "saved %zu: a columnwise FP8 copy", i);
    rows += sv[i].part == TECORE_SEQ_SAVED_FP8_ROW;
  }
  ck_assert_uint_eq(rows, NLIN);
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_BF16,
                                  .flags = TECORE_SEQ_INFERENCE};
  tecore_seq_t *plain = NULL;
  TE_OK(tecore_seq_create(&cfg, &plain));
  struct tecore_op_desc lin = {.kind = TECORE_OP_LINEAR, .features = HID};
  TE_OK(tecore_seq_add(plain, &lin, NULL));
  TE_OK(tecore_seq_build(plain, S()));
  TE_OK(tecore_seq_describe(plain, TECORE_SEQ_FORWARD, fi, sizeof fi, NULL));
  ck_assert_str_eq(fi, "forward (inference): linear[0]");
  TE_OK(tecore_seq_destroy(plain));
  TE_OK(tecore_seq_destroy(inf));
  TE_OK(tecore_seq_destroy(tr));
}
END_TEST

/* ---- memory ------------------------------------------------------------------------------ */

/* An inference sequence allocates no gradient: its parameters' gradient
 * tensors have data 0, it holds at least their F32 bytes and the FP8
 * columnwise and gradient copies less than the training twin, zero_grad
 * succeeds and launches nothing (the profile records no time), set_grad
 * is refused. */
START_TEST(test_infer_allocates_no_gradients) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  tecore_seq_t *inf = mlp(TECORE_SEQ_INFERENCE, &r), *tr = mlp(0, &r);
  struct tecore_seq_param p[MAXP];
  size_t n = 0, gbytes = 0, wbytes = 0;
  TE_OK(tecore_seq_params(inf, p, MAXP, &n));
  for (size_t i = 0; i < n; i++) {
    ck_assert_msg(p[i].grad.data == 0, "parameter %zu (%s): a gradient at 0x%llx", i, p[i].name,
                  (unsigned long long)p[i].grad.data);
    ck_assert_msg(p[i].value.data != 0, "parameter %zu (%s) has no value", i, p[i].name);
    gbytes += tecore_tensor_numel(&p[i].value) * 4;
    if (strcmp(p[i].name, "weight") == 0) wbytes += tecore_tensor_numel(&p[i].value);
  }
  size_t ti = 0, tt = 0, pi = 0, pt = 0;
  TE_OK(tecore_seq_memory(inf, &pi, &ti));
  TE_OK(tecore_seq_memory(tr, &pt, &tt));
  printf("# memory: inference %zu bytes (parameters %zu), training %zu (%zu)\n", ti, pi, tt, pt);
  ck_assert_uint_ge(pt, pi + gbytes);
  /* parameters' gradients, the weights' columnwise copies, activation
   * gradients, FP8 gradient and columnwise activation copies */
  ck_assert_uint_ge(tt, ti + gbytes + wbytes + (size_t)NLIN * ROWS * HID);
  struct tecore_tensor v, g;
  TE_OK(tecore_seq_extra(inf, 1, &v, &g));   /* block 1: its fork is stored inside */
  ck_assert(v.data != 0 && g.data == 0);
  double us[2] = {-1, -1};
  for (int k = 0; k < 2; k++) {
    TE_OK(tecore_stream_synchronize(S()));
    TE_OK(tecore_profile_start());
    TE_OK(tecore_seq_zero_grad(k ? tr : inf, S()));
    TE_OK(tecore_profile_stop());
    TE_OK(tecore_profile_report(-1, &us[k]));
  }
  ck_assert_msg(us[0] == 0 && us[1] > 0, "zero_grad: inference %g us, training %g us", us[0],
                us[1]);
  TE_EXPECT_INVALID("no gradients", tecore_seq_set_grad(inf, 2, 0));
  TE_OK(tecore_seq_destroy(inf));
  TE_OK(tecore_seq_destroy(tr));
}
END_TEST

/* ---- refusals ------------------------------------------------------------------------------- */

START_TEST(test_infer_backward_and_args_refused) {
  struct tecore_recipe r;
  TE_OK(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  tecore_seq_t *inf = mlp(TECORE_SEQ_INFERENCE, &r), *tr = mlp(0, NULL);
  struct tecore_tensor x = new_act(), y = new_act(), dx = new_act();
  put_bf16(x.data, NY, -1.5f, 1.5f);
  TE_OK(tecore_seq_forward(inf, &x, &y, 0, S()));
  TE_EXPECT_INVALID("inference", tecore_seq_backward(inf, &y, &dx, S()));
  TE_EXPECT_INVALID("inference", tecore_seq_backward(inf, &y, NULL, S()));
  TE_EXPECT_INVALID("seq is NULL", tecore_seq_weights_changed(NULL));
  TE_EXPECT_INVALID("training sequence", tecore_seq_weights_changed(tr));
  struct tecore_delayed_state st;
  TE_EXPECT_INVALID("seq is NULL", tecore_seq_fp8_state(NULL, TECORE_FP8_WEIGHT, &st));
  TE_EXPECT_INVALID("st is NULL", tecore_seq_fp8_state(inf, TECORE_FP8_WEIGHT, NULL));
  TE_EXPECT_INVALID("role", tecore_seq_fp8_state(inf, (tecore_fp8_role_t)3, &st));
  TE_EXPECT_INVALID("role", tecore_seq_fp8_state(inf, (tecore_fp8_role_t)-1, &st));
  /* the weights' state: one entry per Linear; none without a recipe */
  TE_OK(tecore_seq_fp8_state(inf, TECORE_FP8_WEIGHT, &st));
  ck_assert_uint_eq(st.count, NLIN);
  ck_assert(st.base != 0 && st.scale_inv == st.scale + NLIN * sizeof(float));
  memset(&st, 0x5a, sizeof st);
  TE_OK(tecore_seq_fp8_state(tr, TECORE_FP8_ACTIVATION, &st));
  ck_assert(st.count == 0 && st.base == 0);
  struct tecore_seq_config cfg = {.rows = ROWS, .features = HID, .dtype = TECORE_DTYPE_BF16,
                                  .flags = TECORE_SEQ_INFERENCE};
  tecore_seq_t *nb = NULL;
  TE_OK(tecore_seq_create(&cfg, &nb));
  TE_EXPECT_INVALID("not built", tecore_seq_fp8_state(nb, TECORE_FP8_WEIGHT, &st));
  TE_OK(tecore_seq_weights_changed(nb));   /* host state only: fine before build */
  TE_OK(tecore_seq_destroy(nb));
  cfg.flags = 0x200;
  TE_EXPECT_INVALID("flags", tecore_seq_create(&cfg, &nb));
  TE_OK(tecore_mem_free(x.data));
  TE_OK(tecore_mem_free(y.data));
  TE_OK(tecore_mem_free(dx.data));
  TE_OK(tecore_seq_destroy(inf));
  TE_OK(tecore_seq_destroy(tr));
  TE_EXPECT_INVALID("not a live sequence", tecore_seq_weights_changed(inf));
}
END_TEST

static Suite *ops_infer_suite(void) {
  Suite *s = suite_create("ops_infer");
  TCase *tc = te_tcase(s, "same_bits", 1);
  tcase_add_test(tc, test_infer_fp8_delayed_same_bits);
  tcase_add_test(tc, test_infer_fp8_current_same_bits);
  tcase_add_test(tc, test_infer_bf16_same_bits);
  tc = te_tcase(s, "cache", 1);
  tcase_add_test(tc, test_infer_second_forward_launches_no_weight_quantize);
  tcase_add_test(tc, test_infer_gelu_writes_no_preactivation);
  tcase_add_test(tc, test_infer_weights_changed_reaches_output);
  tcase_add_test(tc, test_infer_capture_refuses_weight_quantize);
  tc = te_tcase(s, "api", 1);
  tcase_add_test(tc, test_infer_plan_fp8_whatever_min_mnk);
  tcase_add_test(tc, test_infer_allocates_no_gradients);
  tcase_add_test(tc, test_infer_backward_and_args_refused);
  return s;
}

TE_TEST_MAIN(ops_infer_suite, TE_TEST_DEVICE)
