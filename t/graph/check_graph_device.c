/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_device.c -- executable graphs launched from the device
 * (TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, tecore_graph_launch_device,
 * TEGRAPH_INSTANTIATE_DEVICE_LAUNCH).
 *
 * The work: a copy of fresh random x into a, a memset of the output's
 * guard words, then CHAIN dependent scale_adds ping-ponging between a and
 * b (dst = alpha_i * src + beta_i * x), then a copy of the result into
 * out.  Its reference is the same arithmetic in float on the host, step by
 * step (the kernels compute each element in float and round to F32: the
 * tolerance is 1e-6 relative, and the device launch must equal the host
 * launch bit for bit: the same kernels on the same data).
 *   - device_equals_host: one graph, instantiated for host and for device
 *     launch; three device launches with fresh x and poisoned out each time
 *     equal the host launch and the reference; work queued after a device
 *     launch (a copy of out, then a scale_add of it) sees the whole graph's
 *     result (the stream orders it behind the device-launched graph);
 *   - device_after_update: a whole-graph update with new coefficients and
 *     a kernel node's new coefficients (tecore_graph_exec_kernel_node_set)
 *     are what the next device launch runs (cuda uploads the changed
 *     executable again);
 *   - tegraph_device_launch: a tegraph_graph created with the flag replays
 *     the chain; launched into a capturing stream it is refused, and the
 *     next launch still replays right;
 *   - refusals: NULL exec; an exec instantiated without the flag; the flag
 *     with AUTO_FREE_ON_LAUNCH (tecore and tegraph); a graph holding a
 *     stream memory operation node; an empty graph; a launch into a
 *     capturing stream; a destroyed exec.  Each names what is wrong. */
#include "check_graph_common.h"

#define N 1000
#define CHAIN 40

struct chain {
  tecore_devptr_t x, a, b, out;
  float alpha[CHAIN], beta[CHAIN];
};

static void chain_alloc(struct chain *c) {
  c->x = te_dalloc(N * 4);
  c->a = te_dalloc(N * 4);
  c->b = te_dalloc(N * 4);
  c->out = te_dalloc((N + 8) * 4);
  for (int i = 0; i < CHAIN; i++) {
    c->alpha[i] = te_rand_float(0.5f, 1.0f);
    c->beta[i] = te_rand_float(-0.5f, 0.5f);
  }
}

static void chain_free(struct chain *c) {
  TE_OK(tecore_mem_free(c->x));
  TE_OK(tecore_mem_free(c->a));
  TE_OK(tecore_mem_free(c->b));
  TE_OK(tecore_mem_free(c->out));
}

/* The work, queued on s (captured when s captures). */
static void chain_queue(const struct chain *c, tecore_stream_t s) {
  TE_OK(tecore_memcpy_async(c->a, c->x, N * 4, s));
  TE_OK(tecore_memset_d32_async(c->out + N * 4, 0x600dF00Du, 8, s));
  for (int i = 0; i < CHAIN; i++) {
    tecore_devptr_t src = i & 1 ? c->b : c->a, dst = i & 1 ? c->a : c->b;
    TE_OK(tecore_scale_add(dst, src, c->alpha[i], c->x, c->beta[i], TECORE_DTYPE_F32, N, s));
  }
  TE_OK(tecore_memcpy_async(c->out, CHAIN & 1 ? c->b : c->a, N * 4, s));
}

static tecore_graph_t chain_capture(const struct chain *c) {
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  chain_queue(c, te_stream);
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  return g;
}

/* Fresh x on the device; the host reference of out in want. */
static void chain_input(const struct chain *c, float *want) {
  float x[N];
  te_rand_floats(x, N, -1.0f, 1.0f);
  te_h2d(c->x, x, sizeof x);
  for (int j = 0; j < N; j++) {
    float v = x[j];
    for (int i = 0; i < CHAIN; i++) v = c->alpha[i] * v + c->beta[i] * x[j];
    want[j] = v;
  }
}

/* out against want (1e-6 relative, 1e-7 absolute) and the guard words. */
static void chain_expect(const struct chain *c, const float *want, float *got, const char *what) {
  uint32_t guard[8];
  te_d2h(got, c->out, N * 4);
  te_d2h(guard, c->out + N * 4, sizeof guard);
  for (int j = 0; j < N; j++)
    ck_assert_msg(fabsf(got[j] - want[j]) <= 1e-7f + 1e-6f * fabsf(want[j]),
                  "%s: out[%d] = %.9g, want %.9g (tolerance 1e-6 relative)", what, j,
                  (double)got[j], (double)want[j]);
  for (int k = 0; k < 8; k++)
    ck_assert_msg(guard[k] == 0x600dF00Du, "%s: guard word %d is 0x%08x", what, k, guard[k]);
}

static void poison_out(const struct chain *c) { te_poison_dev_nan(c->out, N + 8); }

START_TEST(device_equals_host) {
  struct chain c;
  chain_alloc(&c);
  tecore_graph_t g = chain_capture(&c);
  tecore_graph_exec_t host = NULL, dev = NULL;
  TE_OK(tecore_graph_instantiate(&host, g));
  TE_OK(tecore_graph_instantiate_with_flags(&dev, g, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH |
                                            TECORE_GRAPH_INSTANTIATE_UPLOAD, te_stream));
  static float want[N], ref[N], got[N];
  tecore_devptr_t after = te_dalloc(N * 4);
  for (int rep = 0; rep < 3; rep++) {
    chain_input(&c, want);
    poison_out(&c);
    TE_OK(tecore_graph_launch(host, te_stream));
    TE_OK(tecore_stream_synchronize(te_stream));
    chain_expect(&c, want, ref, "host launch");
    poison_out(&c);
    te_poison_dev_nan(after, N);
    TE_OK(tecore_graph_launch_device(dev, te_stream));
    /* queued behind the device-launched graph: must see its result */
    TE_OK(tecore_scale_add(after, c.out, 2.0f, c.out, -1.0f, TECORE_DTYPE_F32, N, te_stream));
    TE_OK(te_stream_wait(te_stream, 60000));
    chain_expect(&c, want, got, "device launch");
    te_expect_f32_bits(got, ref, N, "device launch against host launch");
    te_d2h(got, after, N * 4);
    te_expect_f32_bits(got, ref, N, "work queued after the device launch");
  }
  printf("# %d-node chain: 3 device launches = host launch bit for bit, later work ordered\n",
         CHAIN + 3);
  TE_OK(tecore_graph_exec_destroy(dev));
  TE_OK(tecore_graph_exec_destroy(host));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_mem_free(after));
  chain_free(&c);
}
END_TEST

START_TEST(device_after_update) {
  struct chain c;
  chain_alloc(&c);
  tecore_graph_t g = chain_capture(&c);
  tecore_graph_exec_t dev = NULL;
  TE_OK(tecore_graph_instantiate_with_flags(&dev, g, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH,
                                            NULL));
  static float want[N], got[N];
  chain_input(&c, want);
  poison_out(&c);
  TE_OK(tecore_graph_launch_device(dev, te_stream));
  TE_OK(te_stream_wait(te_stream, 60000));
  chain_expect(&c, want, got, "before the update");
  /* whole-graph update: new coefficients */
  for (int i = 0; i < CHAIN; i++) c.alpha[i] = te_rand_float(0.5f, 1.0f);
  tecore_graph_t g2 = chain_capture(&c);
  TE_OK(tecore_graph_exec_update(dev, g2, NULL));
  chain_input(&c, want);
  poison_out(&c);
  TE_OK(tecore_graph_launch_device(dev, te_stream));
  TE_OK(te_stream_wait(te_stream, 60000));
  chain_expect(&c, want, got, "after a whole-graph update");
  /* one kernel node's arguments: the last scale_add's beta (an
   * executable's nodes are named by the graph it was instantiated from) */
  size_t n = 0;
  TE_OK(tecore_graph_nodes(g, NULL, 0, &n));
  struct tecore_graph_node_desc *d = calloc(n, sizeof *d);
  TE_OK(tecore_graph_nodes(g, d, n, &n));
  size_t last = n;
  for (size_t i = 0; i < n; i++)
    if (d[i].type == TECORE_GRAPH_NODE_KERNEL && d[i].kernel_id >= 0) last = i;
  ck_assert_msg(last < n, "no registered kernel node in the chain's graph");
  int id = -1;
  TE_OK(tecore_kernel_find("te_scale_add", &id));
  ck_assert_msg(d[last].kernel_id == id, "the last kernel node is not te_scale_add");
  c.beta[CHAIN - 1] = te_rand_float(1.0f, 2.0f);
  tecore_devptr_t src = (CHAIN - 1) & 1 ? c.b : c.a, dst = (CHAIN - 1) & 1 ? c.a : c.b;
  float alpha = c.alpha[CHAIN - 1], beta = c.beta[CHAIN - 1];
  int dtype = TECORE_DTYPE_F32;
  unsigned long long cnt = N;
  /* te_scale_add(dst, a, alpha, b, beta, dtype, n): elementwise_params.h */
  void *args[] = {&dst, &src, &alpha, &c.x, &beta, &dtype, &cnt};
  TE_OK(tecore_graph_exec_kernel_node_set(dev, d[last].node, NULL, args));
  chain_input(&c, want);
  poison_out(&c);
  TE_OK(tecore_graph_launch_device(dev, te_stream));
  TE_OK(te_stream_wait(te_stream, 60000));
  chain_expect(&c, want, got, "after a kernel node's new arguments");
  free(d);
  TE_OK(tecore_graph_exec_destroy(dev));
  TE_OK(tecore_graph_destroy(g2));
  TE_OK(tecore_graph_destroy(g));
  chain_free(&c);
}
END_TEST

START_TEST(tegraph_device_launch) {
  struct chain c;
  chain_alloc(&c);
  tegraph_graph_t *tg = NULL;
  TG_OK(tegraph_graph_create(TEGRAPH_INSTANTIATE_DEVICE_LAUNCH | TEGRAPH_INSTANTIATE_UPLOAD, &tg));
  TG_OK(tegraph_graph_begin_capture(tg, te_stream, TECORE_CAPTURE_THREAD_LOCAL, 0));
  chain_queue(&c, te_stream);
  TG_OK(tegraph_graph_end_capture(tg, NULL));
  static float want[N], got[N];
  for (int rep = 0; rep < 3; rep++) {
    chain_input(&c, want);
    poison_out(&c);
    TG_OK(tegraph_graph_launch(tg, te_stream));
    TE_OK(te_stream_wait(te_stream, 60000));
    chain_expect(&c, want, got, "tegraph device launch");
  }
  /* not into a capturing stream: refused, and the capture goes on */
  tecore_graph_t outer = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TG_EXPECT(TEGRAPH_ERR_CAPTURE, "capturing", tegraph_graph_launch(tg, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &outer));
  if (outer) TE_OK(tecore_graph_destroy(outer));
  chain_input(&c, want);
  poison_out(&c);
  TG_OK(tegraph_graph_launch(tg, te_stream));
  TE_OK(te_stream_wait(te_stream, 60000));
  chain_expect(&c, want, got, "tegraph device launch after the refused capture");
  TG_OK(tegraph_graph_destroy(tg));
  chain_free(&c);
}
END_TEST

START_TEST(refusals) {
  struct chain c;
  chain_alloc(&c);
  tecore_graph_t g = chain_capture(&c);
  tecore_graph_exec_t host = NULL, x = NULL;
  TE_EXPECT_INVALID("exec is NULL", tecore_graph_launch_device(NULL, te_stream));
  TE_OK(tecore_graph_instantiate(&host, g));
  TE_EXPECT_INVALID("TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH",
                    tecore_graph_launch_device(host, te_stream));
  TE_EXPECT_INVALID("AUTO_FREE_ON_LAUNCH",
                    tecore_graph_instantiate_with_flags(
                        &x, g, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH |
                        TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH, NULL));
  ck_assert_ptr_null(x);
  tegraph_graph_t *tg = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "AUTO_FREE_ON_LAUNCH",
            tegraph_graph_create(TEGRAPH_INSTANTIATE_DEVICE_LAUNCH |
                                 TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH, &tg));
  /* a stream memory operation node */
  tecore_devptr_t word = te_dalloc(64);
  tecore_graph_t gw = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_scale_add(c.b, c.a, 1.0f, c.x, 0.0f, TECORE_DTYPE_F32, N, te_stream));
  tecore_result_t wr = tecore_stream_write_value32(te_stream, word, 7);
  TE_OK(tecore_stream_end_capture(te_stream, &gw));
  if (wr == TECORE_SUCCESS) {
    TE_EXPECT_INVALID("stream memory operation",
                      tecore_graph_instantiate_with_flags(
                          &x, gw, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, NULL));
    ck_assert_ptr_null(x);
  } else {
    ck_assert_msg(wr == TECORE_ERR_NOT_SUPPORTED, "write_value32 in a capture: %s",
                  tecore_last_error());
    printf("# no stream memory operations on this device: that refusal not reached\n");
  }
  /* an empty graph */
  tecore_graph_t ge = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_stream_end_capture(te_stream, &ge));
  TE_EXPECT_INVALID("empty", tecore_graph_instantiate_with_flags(
                                 &x, ge, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, NULL));
  /* a capturing stream */
  TE_OK(tecore_graph_instantiate_with_flags(&x, g, TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, NULL));
  tecore_graph_t junk = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, "capturing", tecore_graph_launch_device(x, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &junk));
  if (junk) TE_OK(tecore_graph_destroy(junk));
  /* destroyed: its record went with it (no call reaches the driver) */
  TE_OK(tecore_graph_exec_destroy(x));
  TE_EXPECT_INVALID("destroyed", tecore_graph_launch_device(x, te_stream));
  TE_OK(tecore_graph_exec_destroy(host));
  TE_OK(tecore_graph_destroy(ge));
  TE_OK(tecore_graph_destroy(gw));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_mem_free(word));
  chain_free(&c);
}
END_TEST

static Suite *device_suite(void) {
  Suite *s = suite_create("graph_device");
  TCase *tc = tgt_tcase(s, "device_launch");
  tcase_add_test(tc, device_equals_host);
  tcase_add_test(tc, device_after_update);
  tcase_add_test(tc, tegraph_device_launch);
  tcase_add_test(tc, refusals);
  return s;
}

TE_TEST_MAIN(device_suite, TE_TEST_DEVICE)
