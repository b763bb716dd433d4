/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_misuse.c -- graphed callables refuse misuse with a clear error
 * and stay usable:
 *   - creation: NULL and missing arguments, no outputs, backward_dw without
 *     backward, repeated keyword names, FP8 (scaled) samples, schedules
 *     that repeat a pass, miss one or put a backward before its forward;
 *   - replay: wrong counts, shapes, dtypes, NULL data, misaligned data,
 *     gradients for inputs that need none, out-of-order calls (backward
 *     before forward, backward_dw without backward, forward while a
 *     backward_dw is due), replay into a capturing stream;
 *   - illegal calls during capture: a function that calls back into a
 *     callable (replay, create, reset, destroy) gets TEGRAPH_ERR_STATE; a
 *     function that makes an illegal device call (a synchronize) fails the
 *     creation with TEGRAPH_ERR_CAPTURE; a function that fails fails the
 *     creation and names itself; nothing leaks and the next creation works.
 * After each refused call a correct replay is checked against the host
 * reference y = 2x + 1 (tecore_scale_add's float arithmetic; tolerance
 * exact).  n = 256 + random below 1000. */
#include "check_graph_common.h"

#define WAIT_MS 20000

struct ctx {
  size_t n;
  tecore_devptr_t one;           /* n ones */
  tegraph_callable_t *victim;    /* called back into during capture */
  int reenter;                   /* 1: call into victim / libtegraph from forward */
  int sync_in_capture;           /* 1: an illegal device call while captured */
  int fail_backward;             /* 1: the backward function fails */
  tegraph_result_t inner[5];     /* what the calls from inside returned */
};

static tecore_result_t fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct ctx *c = u;
  if (io->phase == TEGRAPH_PHASE_CAPTURE && c->reenter) {
    struct tecore_tensor in = io->inputs[0];
    tegraph_callable_t *tmp = NULL;
    struct tegraph_callable_desc d = {.forward = fwd};
    c->inner[0] = c->victim ? tegraph_callable_forward(c->victim, &in, 1, NULL, NULL, 0, NULL, 0,
                                                       NULL)
                            : TEGRAPH_ERR_STATE;
    c->inner[1] = tegraph_callable_create(&d, NULL, &tmp);
    c->inner[2] = c->victim ? tegraph_callable_reset(c->victim, 0) : TEGRAPH_ERR_STATE;
    c->inner[3] = c->victim ? tegraph_callable_destroy(c->victim) : TEGRAPH_ERR_STATE;
    c->inner[4] = c->victim ? tegraph_callable_backward_dw(c->victim, NULL) : TEGRAPH_ERR_STATE;
  }
  if (io->phase == TEGRAPH_PHASE_CAPTURE && c->sync_in_capture) {
    tecore_result_t r = tecore_stream_synchronize(s);
    if (r == TECORE_SUCCESS) return TECORE_ERR_INTERNAL; /* must not happen */
  }
  return tecore_scale_add(io->outputs[0].data, io->inputs[0].data, 2.0f, c->one, 1.0f,
                          TECORE_DTYPE_F32, c->n, s);
}

static tecore_result_t bwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct ctx *c = u;
  if (c->fail_backward && io->phase == TEGRAPH_PHASE_CAPTURE) return TECORE_ERR_NOT_SUPPORTED;
  if (!io->grad_inputs[0].data) return TECORE_SUCCESS;
  return tecore_scale_add(io->grad_inputs[0].data, io->grad_outputs[0].data, 2.0f,
                          io->grad_outputs[0].data, 0.0f, TECORE_DTYPE_F32, c->n, s);
}

static tecore_result_t dwf(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  (void)u, (void)s, (void)io;
  return TECORE_SUCCESS;
}

static struct ctx g_ctx;
static struct tecore_tensor g_x, g_y;

static void ctx_setup(void) {
  tgt_setup();
  memset(&g_ctx, 0, sizeof g_ctx);
  g_ctx.n = 256 + (size_t)te_rand_below(1000);
  g_ctx.one = te_dalloc(g_ctx.n * 4);
  TE_OK(tecore_fill(g_ctx.one, TECORE_DTYPE_F32, g_ctx.n, 1.0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  g_x = tgt_vec(0, g_ctx.n);
  g_y = tgt_vec(0, g_ctx.n);
}

static void ctx_teardown(void) {
  TE_OK(tecore_mem_free(g_ctx.one));
  te_dev_teardown();
}

static struct tegraph_callable_desc base_desc(void) {
  struct tegraph_callable_desc d = {.forward = fwd, .backward = bwd, .user = &g_ctx,
                                    .sample_inputs = &g_x, .ninputs = 1, .outputs = &g_y,
                                    .noutputs = 1};
  return d;
}

/* A correct replay: y = 2x + 1 for fresh x, checked on the host. */
static void check_usable(tegraph_callable_t *c) {
  size_t n = g_ctx.n;
  tecore_devptr_t x = tgt_rand_dev(n, -3, 3), y = te_dalloc(n * 4);
  te_poison_dev_nan(y, n);
  struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
  float *hx = tgt_get(x, n), *hy = tgt_get(y, n), *want = malloc(n * 4);
  for (size_t i = 0; i < n; i++) want[i] = fmaf(2.0f, hx[i], 1.0f * 1.0f);
  te_expect_f32_bits(hy, want, n, "y = 2x + 1 after refused calls");
  free(hx), free(hy), free(want);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
}

START_TEST(create_misuse) {
  tegraph_callable_t *c = NULL;
  struct tegraph_callable_desc d = base_desc();
  TG_EXPECT(TEGRAPH_ERR_INVALID, "desc is NULL", tegraph_callable_create(NULL, NULL, &c));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "out is NULL", tegraph_callable_create(&d, NULL, NULL));
  d.forward = NULL;
  /* one callable: named as the caller wrote it, desc, not descs[0] */
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tegraph_callable_create: desc.forward is NULL",
            tegraph_callable_create(&d, NULL, &c));
  ck_assert_msg(!strstr(tegraph_last_error(), "descs["), "%s", tegraph_last_error());
  /* an array: the element that is wrong */
  struct tegraph_callable_desc arr[2] = {base_desc(), base_desc()};
  tegraph_callable_t *pair[2] = {NULL, NULL};
  arr[1].forward = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "tegraph_callables_create: descs[1].forward is NULL",
            tegraph_callables_create(arr, 2, NULL, 0, NULL, pair));
  d = base_desc();
  d.noutputs = 0;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "at least one output", tegraph_callable_create(&d, NULL, &c));
  d = base_desc();
  d.backward = NULL;
  d.backward_dw = dwf;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "backward_dw without backward",
            tegraph_callable_create(&d, NULL, &c));
  d = base_desc();
  d.num_warmup = -1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "num_warmup", tegraph_callable_create(&d, NULL, &c));
  d = base_desc();
  struct tecore_tensor fp8 = g_x;
  fp8.dtype = TECORE_DTYPE_E4M3;
  fp8.scaling = TECORE_SCALING_DELAYED;
  d.sample_inputs = &fp8;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "plain tensors", tegraph_callable_create(&d, NULL, &c));
  d = base_desc();
  const char *names[] = {"a", "a"};
  struct tecore_tensor kws[2] = {g_x, g_x};
  d.kw_names = names;
  d.sample_kw = kws;
  d.nkw = 2;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "'a' is given twice", tegraph_callable_create(&d, NULL, &c));
  names[1] = "";
  TG_EXPECT(TEGRAPH_ERR_INVALID, "kw_names[1]", tegraph_callable_create(&d, NULL, &c));
  /* schedules */
  struct tegraph_callable_desc two[2] = {base_desc(), base_desc()};
  tegraph_callable_t *cs[2];
  const struct tegraph_schedule_entry dup[] = {{0, 0}, {0, 0}, {1, 0}, {1, 1}};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "scheduled twice",
            tegraph_callables_create(two, 2, dup, 4, NULL, cs));
  const struct tegraph_schedule_entry early[] = {{0, 1}, {0, 0}, {1, 0}, {1, 1}};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "comes before its forward",
            tegraph_callables_create(two, 2, early, 4, NULL, cs));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "3 entries",
            tegraph_callables_create(two, 2, early, 3, NULL, cs));
  const struct tegraph_schedule_entry nodw[] = {{0, 0}, {0, 2}, {1, 0}, {1, 1}};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "no backward_dw function",
            tegraph_callables_create(two, 2, nodw, 4, NULL, cs));
  const struct tegraph_schedule_entry far[] = {{0, 0}, {0, 1}, {2, 0}, {1, 1}};
  TG_EXPECT(TEGRAPH_ERR_INVALID, "outside",
            tegraph_callables_create(two, 2, far, 4, NULL, cs));
  /* none of that created anything: a good creation works */
  TG_OK(tegraph_callable_create(&two[0], NULL, &c));
  check_usable(c);
  TG_OK(tegraph_callable_destroy(c));
}
END_TEST

START_TEST(replay_misuse) {
  tegraph_callable_t *c = NULL;
  struct tegraph_callable_desc d = base_desc();
  d.backward_dw = dwf;
  const unsigned char no_grad[1] = {0};
  d.input_needs_grad = no_grad;
  TG_OK(tegraph_callable_create(&d, NULL, &c));
  size_t n = g_ctx.n;
  tecore_devptr_t x = tgt_rand_dev(n, -1, 1), y = te_dalloc(n * 4 + 64);
  struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n), go = tgt_vec(y, n);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  /* out of order */
  TG_EXPECT(TEGRAPH_ERR_STATE, "no forward", tegraph_callable_backward(c, &go, 1, NULL, 0, &o));
  TG_EXPECT(TEGRAPH_ERR_STATE, "no backward", tegraph_callable_backward_dw(c, &o));
  /* counts and NULLs */
  TG_EXPECT(TEGRAPH_ERR_INVALID, "c is NULL",
            tegraph_callable_forward(NULL, &in, 1, NULL, NULL, 0, NULL, 0, &o));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "ninputs is 2",
            tegraph_callable_forward(c, &in, 2, NULL, NULL, 0, NULL, 0, &o));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "inputs is NULL",
            tegraph_callable_forward(c, NULL, 1, NULL, NULL, 0, NULL, 0, &o));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "noutputs is 3",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 3, &o));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "nkw is 1",
            tegraph_callable_forward(c, &in, 1, NULL, &in, 1, NULL, 0, &o));
  /* shapes, dtypes, data */
  struct tecore_tensor bad = in;
  bad.shape[0] = n + 1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "inputs[0]: shape",
            tegraph_callable_forward(c, &bad, 1, NULL, NULL, 0, NULL, 0, &o));
  bad = in;
  bad.ndim = 2;
  bad.shape[0] = 1;
  bad.shape[1] = n;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "shape [1, ",
            tegraph_callable_forward(c, &bad, 1, NULL, NULL, 0, NULL, 0, &o));
  bad = in;
  bad.dtype = TECORE_DTYPE_F16;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "dtype f16 differs from the captured f32",
            tegraph_callable_forward(c, &bad, 1, NULL, NULL, 0, NULL, 0, &o));
  bad = in;
  bad.data = 0;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "inputs[0]: data is 0",
            tegraph_callable_forward(c, &bad, 1, NULL, NULL, 0, NULL, 0, &o));
  bad = in;
  bad.data = x + 2;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not aligned",
            tegraph_callable_forward(c, &bad, 1, NULL, NULL, 0, NULL, 0, &o));
  bad = out;
  bad.shape[0] = 3;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "outputs[0]: shape",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &bad, 1, &o));
  bad = in;
  bad.scaling = TECORE_SCALING_CURRENT;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "plain tensor",
            tegraph_callable_forward(c, &bad, 1, NULL, NULL, 0, NULL, 0, &o));
  /* a replay into a capturing stream */
  tecore_stream_t cs = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &cs));
  TE_OK(tecore_stream_begin_capture(cs, TECORE_CAPTURE_RELAXED));
  struct tegraph_replay_opts oc = {.stream = cs, .is_first_microbatch = 1};
  TG_EXPECT(TEGRAPH_ERR_STATE, "is capturing",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, &oc));
  tecore_graph_t gg = NULL;
  TE_OK(tecore_stream_end_capture(cs, &gg));
  TE_OK(tecore_graph_destroy(gg));
  TE_OK(tecore_stream_destroy(cs));
  check_usable(c);
  /* backward: grad_inputs for an input that needs none; wrong grad shape */
  struct tecore_tensor gi = tgt_vec(y, n);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "needs no gradient",
            tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  bad = go;
  bad.shape[0] = 1;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "grad_outputs[0]: shape",
            tegraph_callable_backward(c, &bad, 1, NULL, 0, &o));
  gi.data = 0;
  TG_OK(tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  ck_assert_uint_eq(gi.data, 0); /* no gradient buffer for that input */
  /* the delayed weight gradient is due before the next forward */
  TG_EXPECT(TEGRAPH_ERR_STATE, "backward_dw",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, &o));
  TG_EXPECT(TEGRAPH_ERR_STATE, "no forward", tegraph_callable_backward(c, &go, 1, NULL, 0, &o));
  TG_OK(tegraph_callable_backward_dw(c, &o));
  check_usable(c);
  struct tegraph_slot_info si;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "no input 4",
            tegraph_callable_slot(c, TEGRAPH_SLOT_INPUT, 4, NULL, &si));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "unknown kind",
            tegraph_callable_slot(c, (tegraph_slot_kind_t)9, 0, NULL, &si));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "unknown pass",
            tegraph_callable_dot(c, (tegraph_pass_t)5, "/dev/null"));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "path", tegraph_callable_dot(c, TEGRAPH_PASS_BACKWARD_DW, ""));
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
}
END_TEST

/* Calls into libtegraph from a function being captured are refused. */
START_TEST(reentry_during_capture) {
  tegraph_callable_t *victim = NULL, *c = NULL;
  struct tegraph_callable_desc d = base_desc();
  TG_OK(tegraph_callable_create(&d, NULL, &victim));
  g_ctx.victim = victim;
  g_ctx.reenter = 1;
  TG_OK(tegraph_callable_create(&d, NULL, &c)); /* its forward calls into victim */
  g_ctx.reenter = 0;
  for (int i = 0; i < 5; i++)
    ck_assert_msg(g_ctx.inner[i] == TEGRAPH_ERR_STATE, "call %d from inside a capture returned %s",
                  i, tegraph_result_name(g_ctx.inner[i]));
  check_usable(victim);
  check_usable(c);
  TG_OK(tegraph_callable_destroy(victim));
  TG_OK(tegraph_callable_destroy(c));
}
END_TEST

/* An illegal device call or a failing function fails the creation cleanly. */
START_TEST(failed_capture_cleans_up) {
  tegraph_mempool_t *pool = NULL;
  TG_OK(tegraph_mempool_create(0, &pool));
  tegraph_callable_t *c = NULL;
  struct tegraph_callable_desc d = base_desc();
  g_ctx.sync_in_capture = 1;
  TG_EXPECT(TEGRAPH_ERR_CAPTURE, "forward", tegraph_callable_create(&d, pool, &c));
  g_ctx.sync_in_capture = 0;
  g_ctx.fail_backward = 1;
  TG_EXPECT(TEGRAPH_ERR_CAPTURE, "backward function failed during capture",
            tegraph_callable_create(&d, pool, &c));
  g_ctx.fail_backward = 0;
  size_t used = 1;
  int users = -1;
  TG_OK(tegraph_mempool_usage(pool, &used, NULL, &users));
  ck_assert_uint_eq(used, 0);
  ck_assert_int_eq(users, 0);
  TG_OK(tegraph_callable_create(&d, pool, &c));
  check_usable(c);
  TG_EXPECT(TEGRAPH_ERR_STATE, "destroy them first", tegraph_mempool_destroy(pool));
  TG_OK(tegraph_callable_destroy(c));
  TG_OK(tegraph_mempool_destroy(pool));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("graph_misuse");
  TCase *tc = te_tcase(s, "misuse", 0);
  tcase_add_checked_fixture(tc, ctx_setup, ctx_teardown);
  tcase_add_test(tc, create_misuse);
  tcase_add_test(tc, replay_misuse);
  tcase_add_test(tc, reentry_during_capture);
  tcase_add_test(tc, failed_capture_cleans_up);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
