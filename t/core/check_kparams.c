/* SPDX-License-Identifier: Apache-2.0 */
/* check_kparams.c -- kernels/common/kparams.h, the parameter lists every
 * libtecore kernel is declared with (and libtecomm's and libtegraph's may
 * be): TE_KDEF's table entry (nparams, param_size, param_is_ptr) must be
 * what the list says, TE_KARGS's struct must carry every parameter between
 * a launch's void *args[] and the typed fields both ways, and a table built
 * with them must register through te/kernel.h and run on vdev with its
 * parameters captured by value at launch. */
#include "tests.h"
#include "common/kparams.h"

/* A parameter block passed by value (a gcblk: __grid_constant__ on a GPU). */
struct kp_block {
  double bias;
  int count;
  short tag;
};

/* One of each kind and of several sizes, in an order that would expose a
 * shifted index or size. */
#define KP_MIXED_PARAMS(P)             \
  P(const float *, x, ptr)             \
  P(unsigned char, small, val)         \
  P(float *, y, rptr)                  \
  P(unsigned long long, n, val)        \
  P(struct kp_block, blk, gcblk)       \
  P(short, half, val)                  \
  P(double, scale, val)                \
  P(const int *, noop, ptr)
TE_KARGS(kp_mixed_args, KP_MIXED_PARAMS)

/* y[i] = x[i] * scale + blk.bias (in double, rounded once to float), for
 * i < n, unless *noop; blk.count counts launches into *y's last slot. */
static void kp_mixed_vdev(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct kp_mixed_args a = kp_mixed_args_of(args);
  (void)cfg;
  if (a.noop && *a.noop) return;
  for (unsigned long long i = 0; i < a.n; i++)
    a.y[i] = (float)((double)a.x[i] * a.scale + a.blk->bias);
  a.y[a.n] = (float)(a.blk->count + a.small + a.half);
}

static const struct tecore_kernel_def kp_defs[] = {
    TE_KDEF("te_test_kparams_mixed", kp_mixed_vdev, KP_MIXED_PARAMS),
};
static const struct tecore_kernel_table kp_table = {
    .module = "t/core/check_kparams", .count = 1, .kernels = kp_defs};

START_TEST(kdef_matches_the_list) {
  const struct tecore_kernel_def *d = &kp_defs[0];
  ck_assert_str_eq(d->name, "te_test_kparams_mixed");
  ck_assert_ptr_eq((void *)d->vdev, (void *)kp_mixed_vdev);
  ck_assert_uint_eq(d->nparams, 8);
  ck_assert_uint_eq(TE_KNPARAMS(KP_MIXED_PARAMS), 8);
  const unsigned sizes[] = {sizeof(void *), 1, sizeof(void *), 8, sizeof(struct kp_block), 2, 8,
                            sizeof(void *)};
  const unsigned ptrs[] = {1, 0, 1, 0, 0, 0, 0, 1};
  for (unsigned p = 0; p < 8; p++) {
    ck_assert_msg(d->param_size[p] == sizes[p], "param_size[%u] is %u, not %u", p,
                  (unsigned)d->param_size[p], sizes[p]);
    ck_assert_msg(d->param_is_ptr[p] == ptrs[p], "param_is_ptr[%u] is %u, not %u", p,
                  (unsigned)d->param_is_ptr[p], ptrs[p]);
  }
  for (unsigned p = 8; p < TECORE_KERNEL_MAX_PARAMS; p++)
    ck_assert_msg(d->param_size[p] == 0 && d->param_is_ptr[p] == 0, "slot %u past the list is set",
                  p);
}
END_TEST

/* The e*ptr kinds (a pointer whose element type is a run-time dtype
 * code) generate the same signature pieces as their plain kinds, and
 * TE_KALIGN records each pointer's alignment: the pointee's for typed
 * pointers, 1 for void *, the dtype link for e*ptr, nothing for values
 * and blocks.  (Without this, a raw launch with a misaligned pointer
 * reached the C kernel: a UBSan abort.) */
#define KP_ELEM_PARAMS(P)              \
  P(const void *, in, eptr(3, TE_KP_WHOLE)) \
  P(void *, out, nneptr(4, 1))         \
  P(float *, sc, reptr(3, 2))          \
  P(int, dt, val)                      \
  P(int, dts, val)                     \
  P(const double *, part, ptr)         \
  P(struct kp_block *, blk, rptr)      \
  P(const void *, raw, ptr)            \
  P(struct kp_block, byval, blk)
TE_KARGS(kp_elem_args, KP_ELEM_PARAMS)

START_TEST(kalign_matches_the_list) {
  static const struct tecore_kernel_def d = TE_KDEF("te_test_kparams_elem", NULL, KP_ELEM_PARAMS);
  static const struct te_kalign al = TE_KALIGN(KP_ELEM_PARAMS);
  const unsigned ptrs[] = {1, 2, 1, 0, 0, 1, 1, 1, 0};
  const struct te_kparam_align want[] = {
      {1, 3, TE_KP_WHOLE}, {1, 4, 1}, {1, 3, 2}, {0, TE_KP_NO_DT, 0}, {0, TE_KP_NO_DT, 0},
      {(uint8_t)_Alignof(double), TE_KP_NO_DT, 0}, {(uint8_t)_Alignof(struct kp_block), TE_KP_NO_DT, 0},
      {1, TE_KP_NO_DT, 0}, {0, TE_KP_NO_DT, 0}};
  ck_assert_uint_eq(d.nparams, 9);
  for (unsigned p = 0; p < 9; p++) {
    ck_assert_msg(d.param_is_ptr[p] == ptrs[p], "param_is_ptr[%u] is %u, not %u", p,
                  (unsigned)d.param_is_ptr[p], ptrs[p]);
    ck_assert_msg(al.p[p].align == want[p].align && al.p[p].dt_param == want[p].dt_param &&
                      al.p[p].dt_slot == want[p].dt_slot,
                  "param %u: align %u dt_param %u dt_slot %u, want %u %u %u", p, al.p[p].align,
                  al.p[p].dt_param, al.p[p].dt_slot, want[p].align, want[p].dt_param,
                  want[p].dt_slot);
  }
  /* and the typed struct carries them like the plain kinds */
  float f = te_rand_float(-1, 1);
  struct kp_elem_args a = {.in = &f, .out = &f, .sc = &f, .dt = (int)te_rand_below(5)};
  void *args[TE_KNPARAMS(KP_ELEM_PARAMS)];
  memset(args, 0, sizeof args);
  kp_elem_args_ptrs(&a, args);
  struct kp_elem_args b = kp_elem_args_of(args);
  ck_assert_ptr_eq(b.in, &f);
  ck_assert_ptr_eq(b.out, &f);
  ck_assert_ptr_eq(b.sc, &f);
  ck_assert_int_eq(b.dt, a.dt);
}
END_TEST

START_TEST(kargs_round_trip) {
  float xs[4], ys[4];
  int noop = 0;
  struct kp_block blk = {.bias = te_rand_float(-4, 4), .count = (int)(te_rand_u64() % 1000),
                         .tag = (short)(te_rand_u64() % 100)};
  struct kp_mixed_args a = {.x = xs, .small = (unsigned char)(te_rand_u64() % 256), .y = ys,
                            .n = te_rand_u64(), .blk = &blk,
                            .half = (short)(te_rand_u64() % 30000), .scale = te_rand_float(-2, 2),
                            .noop = &noop};
  void *args[TE_KNPARAMS(KP_MIXED_PARAMS)];
  memset(args, 0, sizeof args);
  kp_mixed_args_ptrs(&a, args);
  /* each args[i] points to parameter i's value: a block points to the block */
  ck_assert_ptr_eq(args[0], &a.x);
  ck_assert_ptr_eq(args[1], &a.small);
  ck_assert_ptr_eq(args[2], &a.y);
  ck_assert_ptr_eq(args[3], &a.n);
  ck_assert_ptr_eq(args[4], &blk);
  ck_assert_ptr_eq(args[5], &a.half);
  ck_assert_ptr_eq(args[6], &a.scale);
  ck_assert_ptr_eq(args[7], &a.noop);
  /* and the reader gives back every field */
  const struct kp_mixed_args b = kp_mixed_args_of(args);
  ck_assert_ptr_eq(b.x, xs);
  ck_assert_uint_eq(b.small, a.small);
  ck_assert_ptr_eq(b.y, ys);
  ck_assert_uint_eq(b.n, a.n);
  ck_assert_ptr_eq(b.blk, &blk);
  ck_assert_int_eq(b.half, a.half);
  ck_assert(b.scale == a.scale);
  ck_assert_ptr_eq(b.noop, &noop);
}
END_TEST

/* Registered through the public table API and launched from the typed
 * struct: the vdev function reads the same values, and the block is taken
 * by value at launch (changing it after the launch changes nothing). */
START_TEST(table_launch_captures_by_value) {
  if (te_backend_kind != TECORE_BACKEND_VDEV) {
    printf("# table_launch_captures_by_value: skipped on %s (a vdev-only test kernel)\n",
           tecore_backend_name(te_backend_kind));
    return;
  }
  int id = -1;
  TE_OK(tecore_kernel_table_register(&kp_table, &id));
  const unsigned long long n = 1000 + te_rand_u64() % 3000;
  float *hx = malloc(n * sizeof *hx), *hy = malloc((n + 1) * sizeof *hy);
  ck_assert(hx && hy);
  te_rand_floats(hx, n, -100, 100);
  tecore_devptr_t dx = te_dalloc(n * sizeof(float)), dy = te_dalloc((n + 1) * sizeof(float));
  te_h2d(dx, hx, n * sizeof(float));
  te_poison_dev_nan(dy, n + 1);
  struct kp_block blk = {.bias = te_rand_float(-8, 8), .count = 7, .tag = 1};
  const struct kp_block sent = blk;
  struct kp_mixed_args a = {.x = (const float *)(uintptr_t)dx, .small = 3,
                            .y = (float *)(uintptr_t)dy, .n = n, .blk = &blk, .half = 11,
                            .scale = te_rand_float(-3, 3), .noop = NULL};
  void *args[TE_KNPARAMS(KP_MIXED_PARAMS)];
  kp_mixed_args_ptrs(&a, args);
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
  const double scale_sent = a.scale;
  TE_OK(tecore_kernel_launch(id, &cfg, args, te_stream));
  blk.bias = 1e30;   /* after the launch: must not be seen */
  blk.count = -1;
  a.scale = 0;
  a.n = 1;
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(hy, dy, (n + 1) * sizeof(float));
  /* exact: the same double expression rounded once, on the same host */
  for (unsigned long long i = 0; i < n; i++) {
    float want = (float)((double)hx[i] * scale_sent + sent.bias);
    ck_assert_msg(memcmp(&hy[i], &want, sizeof want) == 0, "y[%llu] = %a, want %a (x %a)", i,
                  (double)hy[i], (double)want, (double)hx[i]);
  }
  ck_assert_msg(hy[n] == (float)(sent.count + 3 + 11), "y[n] = %g, want %d", (double)hy[n],
                sent.count + 3 + 11);
  free(hx);
  free(hy);
  TE_OK(tecore_mem_free(dx));
  TE_OK(tecore_mem_free(dy));
}
END_TEST

static Suite *kparams_suite(void) {
  Suite *s = suite_create("kparams");
  TCase *tc = te_tcase(s, "generate", 0);
  tcase_add_test(tc, kdef_matches_the_list);
  tcase_add_test(tc, kargs_round_trip);
  tcase_add_test(tc, kalign_matches_the_list);
  tc = te_tcase(s, "launch", 1);
  tcase_add_test(tc, table_launch_captures_by_value);
  return s;
}

TE_TEST_MAIN(kparams_suite, TE_TEST_DEVICE)
