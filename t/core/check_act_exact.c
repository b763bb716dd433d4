/* check_act_exact.c -- the activation math of kernels/common/act.h, over
 * every BF16 input (SPDX-License-Identifier: Apache-2.0).
 *
 * bounds (host only): for GELU, SiLU and QGELU and their derivatives, all
 * 65536 BF16 patterns against float64, within the bounds act.h states:
 *   act(x):  |err| <= (4 + 2|z|) 2^-24 |act(x)|            (x >= -C)
 *   act'(x): |err| <= (6 + 3|z|) 2^-24 (|s| + |x s (1-s) z'|)  (x >= -C)
 *   x < -C:  act(x) = 0, act'(x) and the errors below 2^-115;
 * infinities and NaN as documented there.  RELU exactly.
 * device (either backend): the kernels' bytes over the same inputs equal
 * the host evaluation of the same header, bit for bit: forward to F32
 * (the float itself), to BF16 and to E4M3 with a random scale (the vector
 * paths the benchmarks time) and its amax; backward to F32 and to BF16;
 * gated kinds with a random second half.  On vdev this checks the
 * plumbing; on cuda it is the proof that the GPU computes vdev's bits.
 * NaN results only have to be NaN on both (payloads may differ). */
#include "tests.h"
#include "act_ref.h"
#include "common/act.h"
#include "common/convert.h"
#include "common/fp8.h"

#define N_BF16 65536u
#define ROWS 256u
#define COLS 256u

static const double u24 = 1.0 / 16777216.0; /* 2^-24 */

static double clamp_of(int base) {
  return base == TE_ACT_GELU ? TE_ACT_GELU_C : base == TE_ACT_SILU ? TE_ACT_SILU_C : TE_ACT_QGELU_C;
}

static float bf16_at(uint32_t h) { return te_bf16_to_f32((uint16_t)h); }

/* _i: 0 GELU, 1 SILU, 2 QGELU. */
START_TEST(test_act_exact_bounds) {
  static const int bases[] = {TE_ACT_GELU, TE_ACT_SILU, TE_ACT_QGELU};
  int base = bases[_i];
  double C = clamp_of(base), tiny = ldexp(1.0, -115), worst_y = 0, worst_d = 0;
  for (uint32_t h = 0; h < N_BF16; h++) {
    float x = bf16_at(h);
    if (!isfinite(x)) continue;
    float y = te_act_fwd(base, x), d = te_act_dact(base, x), y2, d2;
    te_act_fwd_dact(base, x, &y2, &d2);
    ck_assert_msg(te_f32_bits(y) == te_f32_bits(y2) && te_f32_bits(d) == te_f32_bits(d2),
                  "kind %d x=%a: fwd_dact (%a, %a) differs from fwd/dact (%a, %a)", base,
                  (double)x, (double)y2, (double)d2, (double)y, (double)d);
    double ry, rd, az, dm;
    ref_act_sig(base, x, &ry, &rd, &az, &dm);
    if (x < -C) {
      ck_assert_msg(y == 0.0f && fabs(d) <= tiny && fabs(y - ry) <= tiny &&
                        fabs(d - rd) <= tiny,
                    "kind %d x=%a below -C: y %a (want 0 for %a), d %a (want %a) off by 2^-115", base,
                    (double)x, (double)y, ry, (double)d, rd);
      continue;
    }
    double ty = (4.0 + 2.0 * az) * u24 * fabs(ry), td = (6.0 + 3.0 * az) * u24 * dm;
    ck_assert_msg(fabs(y - ry) <= ty, "kind %d x=%a: act %a, float64 %a: error %.3g > bound %.3g",
                  base, (double)x, (double)y, ry, fabs(y - ry), ty);
    ck_assert_msg(fabs(d - rd) <= td,
                  "kind %d x=%a: act' %a, float64 %a: error %.3g > bound %.3g", base, (double)x,
                  (double)d, rd, fabs(d - rd), td);
    if (ry != 0 && fabs(y - ry) / (u24 * fabs(ry)) > worst_y) worst_y = fabs(y - ry) / (u24 * fabs(ry));
    if (fabs(d - rd) / (u24 * dm) > worst_d) worst_d = fabs(d - rd) / (u24 * dm);
  }
  printf("# kind %d: worst error %.2f (act) and %.2f (act') units of 2^-24\n", base, worst_y,
         worst_d);
}
END_TEST

/* The ends of the range.  Before the FMA-only sigmoid, gelu(-inf) was
 * -inf * 0 = NaN (and so were silu and qgelu); now -inf gives 0, +inf
 * gives +inf, NaN stays NaN, and the derivatives are 1 at +inf and below
 * 2^-115 at -inf. */
START_TEST(test_act_exact_inf_nan) {
  static const int bases[] = {TE_ACT_GELU, TE_ACT_SILU, TE_ACT_QGELU};
  double tiny = ldexp(1.0, -115);
  for (int i = 0; i < 3; i++) {
    int b = bases[i];
    float y;
    ck_assert(te_act_fwd(b, INFINITY) == INFINITY);
    ck_assert(te_act_dact(b, INFINITY) == 1.0f);
    y = te_act_fwd(b, -INFINITY);
    ck_assert_msg(y == 0.0f, "kind %d: act(-inf) = %a, want 0", b, (double)y);
    y = te_act_dact(b, -INFINITY);
    ck_assert_msg(!isnan(y) && fabs(y) <= tiny, "kind %d: act'(-inf) = %a", b, (double)y);
    ck_assert(isnan(te_act_fwd(b, NAN)));
    ck_assert(isnan(te_act_dact(b, NAN)));
    ck_assert(te_act_fwd(b, 0.0f) == 0.0f && te_act_dact(b, 0.0f) == 0.5f);
    /* the largest finite inputs: x, and about 0 */
    ck_assert(te_act_fwd(b, 3.0e38f) == 3.0e38f && te_act_dact(b, 3.0e38f) == 1.0f);
    y = te_act_fwd(b, -3.0e38f);
    ck_assert_msg(y == 0.0f, "kind %d: act(-3e38) = %a, want 0", b, (double)y);
  }
  for (uint32_t h = 0; h < N_BF16; h++) {
    float x = bf16_at(h);
    float want = x > 0 || isnan(x) ? x : 0.0f;
    ck_assert(te_f32_bits(te_act_fwd(TE_ACT_RELU, x)) == te_f32_bits(want) ||
              (isnan(x) && isnan(te_act_fwd(TE_ACT_RELU, x))));
  }
}
END_TEST

/* ---- device bytes against the host ------------------------------------------- */

static int same_f32(float a, float b) { return te_f32_bits(a) == te_f32_bits(b) || (a != a && b != b); }

static void expect_f32(const float *got, const float *want, size_t n, const char *what,
                       const uint16_t *xin) {
  for (size_t i = 0; i < n; i++)
    ck_assert_msg(same_f32(got[i], want[i]), "%s: element %zu (x bits 0x%04x): %a, host %a", what,
                  i, xin ? xin[i] : 0, (double)got[i], (double)want[i]);
}
static void expect_bf16(const uint16_t *got, const float *want, size_t n, const char *what) {
  for (size_t i = 0; i < n; i++) {
    uint16_t w = te_f32_to_bf16(want[i]);
    int nan_both = (got[i] & 0x7fff) > 0x7f80 && (w & 0x7fff) > 0x7f80;
    ck_assert_msg(got[i] == w || nan_both, "%s: element %zu: 0x%04x, host 0x%04x (%a)", what, i,
                  got[i], w, (double)want[i]);
  }
}

/* An input of all BF16 patterns ([ROWS][COLS], element i = pattern i); for
 * gated kinds [ROWS][2*COLS] with random b in the second half.
 * finite_only: the 256 infinity and NaN patterns become random values (for
 * a meaningful amax). */
static uint16_t *make_x(int gated, int finite_only) {
  size_t cols = gated ? 2 * COLS : COLS;
  uint16_t *x = malloc(ROWS * cols * 2);
  ck_assert_ptr_nonnull(x);
  for (size_t r = 0; r < ROWS; r++)
    for (size_t c = 0; c < cols; c++) {
      uint32_t h = (uint32_t)(r * COLS + c);
      float v = c < COLS ? bf16_at(h) : te_rand_float(-4.0f, 4.0f);
      if (finite_only && !isfinite(v)) v = te_rand_float(-12.0f, 12.0f);
      x[r * cols + c] = te_f32_to_bf16(v);
    }
  return x;
}

/* Forward of kind over all BF16 inputs into out_dt; returns the device
 * bytes (caller frees) and fills host[] with the host's floats. */
static void *fwd_dev(int kind, const uint16_t *x, tecore_dtype_t out_dt, float scale, float *host,
                     float *amax_out) {
  int gated = te_act_is_gated(kind);
  size_t icols = gated ? 2 * COLS : COLS, n = ROWS * COLS, es = tecore_dtype_size(out_dt);
  tecore_devptr_t din = te_dalloc(ROWS * icols * 2), dout = te_dalloc(n * es);
  tecore_devptr_t dsc = te_dalloc(16), dam = te_dalloc(16), dsi = te_dalloc(16);
  te_h2d(din, x, ROWS * icols * 2);
  te_poison_dev(dout, n * es);
  float zero = 0.0f;
  te_h2d(dsc, &scale, 4);
  te_h2d(dam, &zero, 4);
  struct tecore_tensor ti = ref_tensor2(TECORE_DTYPE_BF16, ROWS, icols, din);
  struct tecore_tensor to = ref_tensor2(out_dt, ROWS, COLS, dout);
  to.amax = dam;
  if (out_dt == TECORE_DTYPE_E4M3) {
    to.scaling = TECORE_SCALING_DELAYED;
    to.scale = dsc;
    to.scale_inv = dsi;
  }
  TE_OK(tecore_act_fwd(kind, &ti, &to, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  void *got = malloc(n * es);
  ck_assert_ptr_nonnull(got);
  te_d2h(got, dout, n * es);
  te_d2h(amax_out, dam, 4);
  for (size_t r = 0; r < ROWS; r++)
    for (size_t c = 0; c < COLS; c++) {
      float a = te_bf16_to_f32(x[r * icols + c]);
      host[r * COLS + c] = gated ? te_act_gated_fwd(kind, a, te_bf16_to_f32(x[r * icols + COLS + c]))
                                 : te_act_fwd(kind, a);
    }
  TE_OK(tecore_mem_free(din));
  TE_OK(tecore_mem_free(dout));
  TE_OK(tecore_mem_free(dsc));
  TE_OK(tecore_mem_free(dam));
  TE_OK(tecore_mem_free(dsi));
  return got;
}

/* _i: the activation kind. */
START_TEST(test_act_exact_fwd_bits) {
  int kind = _i, gated = te_act_is_gated(kind);
  size_t n = ROWS * COLS;
  float *host = malloc(n * 4), am;
  ck_assert_ptr_nonnull(host);
  char what[96];
  uint16_t *x = make_x(gated, 0);
  float *f = fwd_dev(kind, x, TECORE_DTYPE_F32, 1.0f, host, &am);
  snprintf(what, sizeof what, "%s fwd bf16->f32", tecore_activation_name(kind));
  expect_f32(f, host, n, what, gated ? NULL : x);
  free(f);
  uint16_t *b = fwd_dev(kind, x, TECORE_DTYPE_BF16, 1.0f, host, &am);
  snprintf(what, sizeof what, "%s fwd bf16->bf16", tecore_activation_name(kind));
  expect_bf16(b, host, n, what);
  free(b);
  free(x);
  /* FP8 with a delayed scale: bytes and amax (finite inputs) */
  x = make_x(gated, 1);
  float scale = te_rand_float(0.5f, 8.0f);
  uint8_t *q = fwd_dev(kind, x, TECORE_DTYPE_E4M3, scale, host, &am);
  float want_am = 0.0f;
  for (size_t i = 0; i < n; i++) {
    uint8_t w = te_f32_to_e4m3(te_mul_rn(host[i], scale));
    ck_assert_msg(q[i] == w, "%s fwd bf16->e4m3 (scale %a): element %zu: 0x%02x, host 0x%02x (%a)",
                  tecore_activation_name(kind), (double)scale, i, q[i], w, (double)host[i]);
    want_am = te_amax_f32(want_am, host[i]);
  }
  ck_assert_msg(te_f32_bits(am) == te_f32_bits(want_am), "%s: amax %a, host %a",
                tecore_activation_name(kind), (double)am, (double)want_am);
  free(q);
  free(x);
  free(host);
}
END_TEST

/* Backward: dy random, x all BF16 patterns; dx to F32 (dy F32) and to BF16
 * (dy, x and dx BF16: the vector path).  _i: the activation kind. */
START_TEST(test_act_exact_bwd_bits) {
  int kind = _i, gated = te_act_is_gated(kind);
  size_t xcols = gated ? 2 * COLS : COLS, nx = ROWS * xcols, ny = ROWS * COLS;
  uint16_t *x = make_x(gated, 0), *dy16 = malloc(ny * 2);
  float *dy32 = malloc(ny * 4), *host = malloc(nx * 4), *got32 = malloc(nx * 4);
  uint16_t *got16 = malloc(nx * 2);
  ck_assert(dy16 && dy32 && host && got32 && got16);
  for (size_t i = 0; i < ny; i++) {
    dy16[i] = te_f32_to_bf16(te_rand_float(-2.0f, 2.0f));
    dy32[i] = te_bf16_to_f32(dy16[i]);
  }
  for (size_t r = 0; r < ROWS; r++)
    for (size_t c = 0; c < COLS; c++) {
      float a = te_bf16_to_f32(x[r * xcols + c]), g = dy32[r * COLS + c];
      if (!gated) {
        host[r * COLS + c] = te_act_bwd(kind, a, g);
      } else {
        te_act_gated_bwd(kind, a, te_bf16_to_f32(x[r * xcols + COLS + c]), g,
                         &host[r * xcols + c], &host[r * xcols + COLS + c]);
      }
    }
  tecore_devptr_t dx = te_dalloc(nx * 2), ddy = te_dalloc(ny * 4), dout = te_dalloc(nx * 4);
  te_h2d(dx, x, nx * 2);
  struct tecore_tensor tx = ref_tensor2(TECORE_DTYPE_BF16, ROWS, xcols, dx);
  char what[96];
  for (int pass = 0; pass < 2; pass++) {
    tecore_dtype_t dt = pass == 0 ? TECORE_DTYPE_F32 : TECORE_DTYPE_BF16;
    te_h2d(ddy, pass == 0 ? (const void *)dy32 : (const void *)dy16, ny * (pass == 0 ? 4 : 2));
    te_poison_dev(dout, nx * 4);
    struct tecore_tensor tdy = ref_tensor2(dt, ROWS, COLS, ddy);
    struct tecore_tensor to = ref_tensor2(dt, ROWS, xcols, dout);
    TE_OK(tecore_act_bwd(kind, &tdy, &tx, &to, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    snprintf(what, sizeof what, "%s bwd x bf16, dy/dx %s", tecore_activation_name(kind),
             tecore_dtype_name(dt));
    if (pass == 0) {
      te_d2h(got32, dout, nx * 4);
      expect_f32(got32, host, nx, what, gated ? NULL : x);
    } else {
      te_d2h(got16, dout, nx * 2);
      expect_bf16(got16, host, nx, what);
    }
  }
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(ddy));
  TE_OK(tecore_mem_free(dout));
  free(x);
  free(dy16);
  free(dy32);
  free(host);
  free(got32);
  free(got16);
}
END_TEST

static Suite *act_exact_suite(void) {
  Suite *s = suite_create("act_exact");
  TCase *tc = te_tcase(s, "bounds", 0);
  tcase_add_loop_test(tc, test_act_exact_bounds, 0, 3);
  tcase_add_test(tc, test_act_exact_inf_nan);
  tc = te_tcase(s, "device", 1);
  tcase_add_loop_test(tc, test_act_exact_fwd_bits, 0, TECORE_ACT_COUNT_);
  tcase_add_loop_test(tc, test_act_exact_bwd_bits, 0, TECORE_ACT_COUNT_);
  return s;
}

TE_TEST_MAIN(act_exact_suite, TE_TEST_DEVICE)
