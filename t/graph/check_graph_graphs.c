/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph_graphs.c -- libtegraph's graph layer and the device-layer
 * calls it stands on:
 *   - tecore_graph_nodes lists kernels by registry id with their launch
 *     shapes, copies and memsets with their addresses;
 *     tecore_graph_kernel_node_args reads back the captured values; the
 *     exec per-node updates (kernel arguments, memcpy ends, memset
 *     destination and value) take effect on the next launch;
 *   - capture into an existing graph appends after its leaves;
 *   - instantiate flags (auto-free, upload, node priority);
 *   - tegraph_graph: a whole-graph update and a re-instantiation of the
 *     same new work give identical results; a topology change falls back
 *     to re-instantiation and says why; per-node kernel argument updates
 *     equal a re-capture with that argument, also after whole-graph
 *     updates; DOT; misuse;
 *   - the memory pool: first fit, merging, reuse, usage, misuse.
 * Work: n floats, n random in [1000, 5000); values random; outputs
 * poisoned with NaN before each launch; comparisons bit for bit against a
 * host reference doing the kernels' float arithmetic (tolerance exact). */
#include "check_graph_common.h"

#define WAIT_MS 20000

/* The work:  a = fill(va);  c = alpha*a + beta*x;  out = copy(c);  [e = fill(ve)] */
struct work {
  size_t n;
  tecore_devptr_t a, c, x, out, e;
  float va, alpha, beta, ve;
  int extra;
};

static void work_new(struct work *w, size_t n) {
  memset(w, 0, sizeof *w);
  w->n = n;
  w->a = te_dalloc(n * 4);
  w->c = te_dalloc(n * 4);
  w->out = te_dalloc(n * 4);
  w->e = te_dalloc(n * 4);
  w->x = tgt_rand_dev(n, -4, 4);
  w->va = te_rand_float(-3, 3);
  w->alpha = te_rand_float(0.5f, 2);
  w->beta = te_rand_float(-2, -0.5f);
  w->ve = te_rand_float(5, 9);
}

static void work_free(struct work *w) {
  TE_OK(tecore_mem_free(w->a));
  TE_OK(tecore_mem_free(w->c));
  TE_OK(tecore_mem_free(w->out));
  TE_OK(tecore_mem_free(w->e));
  TE_OK(tecore_mem_free(w->x));
}

static void work_poison(const struct work *w) {
  te_poison_dev_nan(w->a, w->n);
  te_poison_dev_nan(w->c, w->n);
  te_poison_dev_nan(w->out, w->n);
  te_poison_dev_nan(w->e, w->n);
}

static void work_enqueue(const struct work *w, tecore_stream_t s) {
  TE_OK(tecore_fill(w->a, TECORE_DTYPE_F32, w->n, w->va, s));
  TE_OK(tecore_scale_add(w->c, w->a, w->alpha, w->x, w->beta, TECORE_DTYPE_F32, w->n, s));
  TE_OK(tecore_memcpy_async(w->out, w->c, w->n * 4, s));
  if (w->extra) TE_OK(tecore_fill(w->e, TECORE_DTYPE_F32, w->n, w->ve, s));
}

/* The host reference of out (the same float arithmetic as the kernel). */
static void work_check(const struct work *w, const char *when) {
  float *x = tgt_get(w->x, w->n), *out = tgt_get(w->out, w->n), *want = malloc(w->n * 4);
  /* the kernel's arithmetic: fmaf(alpha, a, beta * x) (kernels/common/elementwise.h) */
  for (size_t i = 0; i < w->n; i++) want[i] = fmaf(w->alpha, w->va, w->beta * x[i]);
  char what[96];
  snprintf(what, sizeof what, "out (%s)", when);
  te_expect_f32_bits(out, want, w->n, what);
  if (w->extra) {
    float *e = tgt_get(w->e, w->n);
    for (size_t i = 0; i < w->n; i++) want[i] = w->ve;
    snprintf(what, sizeof what, "e (%s)", when);
    te_expect_f32_bits(e, want, w->n, what);
    free(e);
  }
  free(x);
  free(out);
  free(want);
}

static tecore_graph_t capture(const struct work *w) {
  tecore_graph_t g = NULL;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  work_enqueue(w, te_stream);
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  return g;
}

static void launch_sync(tecore_graph_exec_t x) {
  TE_OK(tecore_graph_launch(x, te_stream));
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
}

static size_t rand_n(void) { return 1000 + (size_t)te_rand_below(4000); }

/* ---- the device layer ------------------------------------------------------------ */

START_TEST(nodes_listed) {
  struct work w;
  work_new(&w, rand_n());
  tecore_graph_t g = capture(&w);
  size_t count = 0;
  TE_OK(tecore_graph_nodes(g, NULL, 0, &count));
  ck_assert_uint_eq(count, 3);
  struct tecore_graph_node_desc d[3];
  TE_OK(tecore_graph_nodes(g, d, 3, &count));
  int fill_id = -1, sa_id = -1;
  TE_OK(tecore_kernel_find("te_fill", &fill_id));
  TE_OK(tecore_kernel_find("te_scale_add", &sa_id));
  ck_assert_int_eq(d[0].type, TECORE_GRAPH_NODE_KERNEL);
  ck_assert_int_eq(d[0].kernel_id, fill_id);
  ck_assert_int_eq(d[1].type, TECORE_GRAPH_NODE_KERNEL);
  ck_assert_int_eq(d[1].kernel_id, sa_id);
  ck_assert_uint_eq(d[1].cfg.block[0] * d[1].cfg.block[1] * d[1].cfg.block[2] > 0, 1);
  ck_assert_int_eq(d[2].type, TECORE_GRAPH_NODE_MEMCPY);
  ck_assert_uint_eq(d[2].src, w.c);
  ck_assert_uint_eq(d[2].dst, w.out);
  ck_assert_uint_eq(d[2].bytes, w.n * 4);
  /* the captured argument values, parameter by parameter */
  void *pd = NULL, *pa = NULL, *pb = NULL;
  float alpha = 0, beta = 0;
  int dt = -1;
  unsigned long long nn = 0;
  void *args[] = {&pd, &pa, &alpha, &pb, &beta, &dt, &nn};
  TE_OK(tecore_graph_kernel_node_args(g, d[1].node, args));
  ck_assert_uint_eq((uintptr_t)pd, w.c);
  ck_assert_uint_eq((uintptr_t)pa, w.a);
  ck_assert_uint_eq((uintptr_t)pb, w.x);
  ck_assert_msg(alpha == w.alpha && beta == w.beta, "alpha %g beta %g, want %g %g", (double)alpha,
                (double)beta, (double)w.alpha, (double)w.beta);
  ck_assert_uint_eq(nn, w.n);
  /* not a kernel node */
  TE_EXPECT_INVALID("kernel", tecore_graph_kernel_node_args(g, d[2].node, args));
  TE_EXPECT_INVALID("nodes is NULL", tecore_graph_nodes(g, NULL, 2, &count));
  TE_OK(tecore_graph_destroy(g));
  work_free(&w);
}
END_TEST

/* Per-node exec updates: a new kernel argument, a copy pointed elsewhere,
 * a memset's destination and value; the graph itself keeps its values. */
START_TEST(exec_node_updates) {
  struct work w;
  work_new(&w, rand_n());
  tecore_graph_t g = NULL;
  tecore_devptr_t flag = te_dalloc(4), flag2 = te_dalloc(4), out2 = te_dalloc(w.n * 4);
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_memset_d32_async(flag, 7, 1, te_stream));
  work_enqueue(&w, te_stream);
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  struct tecore_graph_node_desc d[4];
  size_t count = 0;
  TE_OK(tecore_graph_nodes(g, d, 4, &count));
  ck_assert_uint_eq(count, 4);
  ck_assert_int_eq(d[0].type, TECORE_GRAPH_NODE_MEMSET);
  ck_assert_uint_eq(d[0].dst, flag);
  ck_assert_uint_eq(d[0].value, 7);
  ck_assert_uint_eq(d[0].elem_size, 4);
  ck_assert_uint_eq(d[0].count, 1);
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_graph_instantiate(&x, g));
  work_poison(&w);
  launch_sync(x);
  work_check(&w, "as captured");

  /* new alpha and beta for the scale_add node */
  void *pd = NULL, *pa = NULL, *pb = NULL;
  float alpha, beta;
  int dt;
  unsigned long long nn;
  void *args[] = {&pd, &pa, &alpha, &pb, &beta, &dt, &nn};
  TE_OK(tecore_graph_kernel_node_args(g, d[2].node, args));
  w.alpha = alpha = te_rand_float(-2, -0.5f);
  w.beta = beta = te_rand_float(0.5f, 2);
  TE_OK(tecore_graph_exec_kernel_node_set(x, d[2].node, NULL, args));
  /* the copy goes to out2, the memset writes 9 to flag2 */
  TE_OK(tecore_graph_exec_memcpy_node_set(x, d[3].node, out2, w.c));
  TE_OK(tecore_graph_exec_memset_node_set(x, d[0].node, flag2, 9));
  te_poison_dev_nan(out2, w.n);
  work_poison(&w);
  te_poison_dev(flag, 4);
  te_poison_dev(flag2, 4);
  launch_sync(x);
  tecore_devptr_t keep = w.out;
  w.out = out2;
  work_check(&w, "after per-node updates");
  w.out = keep;
  float *o = tgt_get(keep, w.n);
  for (size_t i = 0; i < w.n; i++) ck_assert_msg(isnan(o[i]), "the old copy target was written");
  free(o);
  uint32_t f1 = 0, f2 = 0;
  te_d2h(&f1, flag, 4);
  te_d2h(&f2, flag2, 4);
  ck_assert_uint_eq(f1, 0xA5A5A5A5u);
  ck_assert_uint_eq(f2, 9);
  /* the graph still holds the captured values */
  float a2;
  void *args2[] = {&pd, &pa, &a2, &pb, &beta, &dt, &nn};
  TE_OK(tecore_graph_kernel_node_args(g, d[2].node, args2));
  ck_assert_msg(a2 != w.alpha, "the graph's node changed with the exec's");
  /* wrong node types and bad arguments */
  TE_EXPECT_INVALID("memcpy", tecore_graph_exec_memcpy_node_set(x, d[0].node, out2, w.c));
  TE_EXPECT_INVALID("memset", tecore_graph_exec_memset_node_set(x, d[3].node, flag2, 1));
  TE_EXPECT_INVALID("kernel", tecore_graph_exec_kernel_node_set(x, d[0].node, NULL, args));
  TE_EXPECT_INVALID("aligned", tecore_graph_exec_memset_node_set(x, d[0].node, flag2 + 2, 1));
  TE_EXPECT_INVALID("node is NULL", tecore_graph_exec_memset_node_set(x, NULL, flag2, 1));
  struct tecore_launch_cfg bad = {.grid = {1, 1, 1}, .block = {2048, 1, 1}};
  TE_EXPECT_INVALID("threads", tecore_graph_exec_kernel_node_set(x, d[2].node, &bad, args));
  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_mem_free(flag));
  TE_OK(tecore_mem_free(flag2));
  TE_OK(tecore_mem_free(out2));
  work_free(&w);
}
END_TEST

/* Capture into an existing graph appends after its leaves: the second
 * part reads what the first wrote. */
START_TEST(capture_to_graph_appends) {
  struct work w;
  work_new(&w, rand_n());
  tecore_devptr_t y = te_dalloc(w.n * 4);
  float gamma = te_rand_float(1, 3);
  tecore_graph_t g = capture(&w);
  tecore_graph_t same = NULL;
  TE_OK(tecore_stream_begin_capture_to_graph(te_stream, g, TECORE_CAPTURE_GLOBAL));
  /* while captured into, the graph cannot be instantiated or destroyed */
  if (te_backend_kind == TECORE_BACKEND_VDEV) {
    tecore_graph_exec_t bad = NULL;
    TE_EXPECT_ERR(TECORE_ERR_CAPTURE, "captured into", tecore_graph_instantiate(&bad, g));
  }
  TE_OK(tecore_scale_add(y, w.out, gamma, w.out, 0.0f, TECORE_DTYPE_F32, w.n, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &same));
  ck_assert_ptr_eq(same, g);
  size_t count = 0;
  TE_OK(tecore_graph_node_count(g, &count));
  ck_assert_uint_eq(count, 4);
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_graph_instantiate(&x, g));
  work_poison(&w);
  te_poison_dev_nan(y, w.n);
  launch_sync(x);
  work_check(&w, "append");
  float *out = tgt_get(w.out, w.n), *got = tgt_get(y, w.n);
  for (size_t i = 0; i < w.n; i++) out[i] = fmaf(gamma, out[i], 0.0f * out[i]);
  te_expect_f32_bits(got, out, w.n, "y = gamma * out (appended)");
  free(out);
  free(got);
  /* a failed capture into the graph leaves it as it was (vdev) */
  if (te_backend_kind == TECORE_BACKEND_VDEV) {
    tecore_graph_t none = NULL;
    TE_OK(tecore_stream_begin_capture_to_graph(te_stream, g, TECORE_CAPTURE_GLOBAL));
    TE_OK(tecore_fill(y, TECORE_DTYPE_F32, w.n, 1.0, te_stream));
    TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_stream_synchronize(te_stream));
    TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_stream_end_capture(te_stream, &none));
    TE_OK(tecore_graph_node_count(g, &count));
    ck_assert_uint_eq(count, 4);
  }
  TE_EXPECT_INVALID("graph is NULL",
                    tecore_stream_begin_capture_to_graph(te_stream, NULL, TECORE_CAPTURE_GLOBAL));
  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_destroy(g));
  TE_OK(tecore_mem_free(y));
  work_free(&w);
}
END_TEST

START_TEST(instantiate_flags) {
  struct work w;
  work_new(&w, rand_n());
  tecore_graph_t g = capture(&w);
  const unsigned flags[] = {0, TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH,
                            TECORE_GRAPH_INSTANTIATE_UPLOAD,
                            TECORE_GRAPH_INSTANTIATE_USE_NODE_PRIORITY,
                            TECORE_GRAPH_INSTANTIATE_UPLOAD |
                                TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH};
  for (size_t i = 0; i < sizeof flags / sizeof flags[0]; i++) {
    tecore_graph_exec_t x = NULL;
    TE_OK(tecore_graph_instantiate_with_flags(&x, g, flags[i], te_stream));
    work_poison(&w);
    launch_sync(x);
    work_check(&w, "instantiated with flags");
    TE_OK(tecore_graph_exec_destroy(x));
  }
  tecore_graph_exec_t x = NULL;
  TE_EXPECT_INVALID("unknown flags", tecore_graph_instantiate_with_flags(&x, g, 0x40, NULL));
  TE_EXPECT_INVALID("graph is NULL", tecore_graph_instantiate_with_flags(&x, NULL, 0, NULL));
  TE_OK(tecore_graph_destroy(g));
  work_free(&w);
}
END_TEST

/* ---- tegraph_graph ------------------------------------------------------------------ */

static void tg_capture(tegraph_graph_t *g, const struct work *w, unsigned flags,
                       struct tegraph_update_info *info) {
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_GLOBAL, flags));
  work_enqueue(w, te_stream);
  TG_OK(tegraph_graph_end_capture(g, info));
}

static void tg_launch_sync(tegraph_graph_t *g) {
  TG_OK(tegraph_graph_launch(g, te_stream));
  TE_OK(te_stream_wait(te_stream, WAIT_MS));
}

/* Whole-graph update in place and a fresh instantiation of the same new
 * work give the same bits; a topology change falls back and says why. */
START_TEST(update_equals_reinstantiation) {
  struct work w1, w2;
  size_t n = rand_n();
  work_new(&w1, n);
  work_new(&w2, n);
  tegraph_graph_t *g = NULL, *fresh = NULL;
  struct tegraph_update_info info;
  TG_OK(tegraph_graph_create(0, &g));
  tg_capture(g, &w1, 0, &info);
  ck_assert_int_eq(info.had_exec, 0);
  work_poison(&w1);
  tg_launch_sync(g); /* instantiates on first use */
  work_check(&w1, "first capture");

  /* the same work with other buffers and values: updated in place */
  tg_capture(g, &w2, 0, &info);
  ck_assert_int_eq(info.had_exec, 1);
  ck_assert_int_eq(info.updated, 1);
  ck_assert_int_eq(info.reinstantiated, 0);
  ck_assert_int_eq(info.why, TECORE_GRAPH_UPDATE_SUCCESS);
  work_poison(&w2);
  tg_launch_sync(g);
  work_check(&w2, "updated in place");
  float *upd = tgt_get(w2.out, n);

  TG_OK(tegraph_graph_create(TEGRAPH_INSTANTIATE_UPLOAD, &fresh));
  tg_capture(fresh, &w2, 0, NULL);
  TG_OK(tegraph_graph_instantiate(fresh, te_stream));
  work_poison(&w2);
  tg_launch_sync(fresh);
  float *re = tgt_get(w2.out, n);
  te_expect_f32_bits(upd, re, n, "update in place vs re-instantiation");

  /* one node more: the update is refused and a new instance replaces it */
  w1.extra = 1;
  w1.ve = te_rand_float(20, 30);
  tg_capture(g, &w1, 0, &info);
  ck_assert_int_eq(info.had_exec, 1);
  ck_assert_int_eq(info.updated, 0);
  ck_assert_int_eq(info.reinstantiated, 1);
  ck_assert_int_eq(info.why, TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED);
  work_poison(&w1);
  tg_launch_sync(g);
  work_check(&w1, "re-instantiated after a topology change");
  size_t count = 0;
  TG_OK(tegraph_graph_node_count(g, &count));
  ck_assert_uint_eq(count, 4);
  free(upd);
  free(re);
  TG_OK(tegraph_graph_destroy(g));
  TG_OK(tegraph_graph_destroy(fresh));
  work_free(&w1);
  work_free(&w2);
}
END_TEST

/* A pointer parameter set to 0 or to an address less aligned than the
 * captured one was accepted, and the next launch crashed (issue 9). */
START_TEST(test_set_kernel_arg_rejects_null_and_misaligned_pointer) {
  struct work w;
  work_new(&w, rand_n());
  tegraph_graph_t *g = NULL;
  TG_OK(tegraph_graph_create(0, &g));
  tg_capture(g, &w, 0, NULL);
  uint64_t p = 0;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "is 0", tegraph_graph_set_kernel_arg(g, 0, 0, &p, 8));
  p = (uint64_t)w.e + 2;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "aligned", tegraph_graph_set_kernel_arg(g, 0, 0, &p, 8));
  /* the executable still runs the captured values */
  work_poison(&w);
  tg_launch_sync(g);
  work_check(&w, "after refused updates");
  /* an aligned pointer to another buffer is taken: te_fill then writes e */
  p = (uint64_t)w.e;
  TG_OK(tegraph_graph_set_kernel_arg(g, 0, 0, &p, 8));
  te_poison_dev_nan(w.e, w.n);
  tg_launch_sync(g);
  float *e = tgt_get(w.e, w.n);
  for (size_t i = 0; i < w.n; i++)
    ck_assert_msg(e[i] == w.va, "e[%zu] = %g, want the fill value %g", i, (double)e[i],
                  (double)w.va);
  free(e);
  TG_OK(tegraph_graph_destroy(g));
  work_free(&w);
}
END_TEST

/* A per-node kernel argument update equals a re-capture with that value. */
START_TEST(set_kernel_arg_equals_recapture) {
  struct work w;
  work_new(&w, rand_n());
  tegraph_graph_t *g = NULL, *ref = NULL;
  TG_OK(tegraph_graph_create(0, &g));
  tg_capture(g, &w, 0, NULL);
  struct tegraph_kernel_node kn[4];
  size_t nk = 0;
  TG_OK(tegraph_graph_kernel_nodes(g, kn, 4, &nk));
  /* the copy of c to out is a te_copy kernel node (TEGRAPH_COPY_KERNELS) */
  ck_assert_uint_eq(nk, 3);
  ck_assert_str_eq(kn[0].name, "te_fill");
  ck_assert_str_eq(kn[1].name, "te_scale_add");
  ck_assert_str_eq(kn[2].name, "te_copy");
  ck_assert_uint_eq(kn[1].node, 1);
  ck_assert_uint_eq(kn[1].nparams, 7);
  float alpha = 0;
  TG_OK(tegraph_graph_kernel_arg(g, 1, 2, &alpha, sizeof alpha));
  ck_assert_msg(alpha == w.alpha, "alpha %g, want %g", (double)alpha, (double)w.alpha);
  /* a new alpha (param 2) and a new fill value (param 3 of te_fill) */
  w.alpha = te_rand_float(-3, -1);
  w.va = te_rand_float(10, 11);
  TG_OK(tegraph_graph_set_kernel_arg(g, 1, 2, &w.alpha, sizeof w.alpha));
  TG_OK(tegraph_graph_set_kernel_arg(g, 0, 3, &w.va, sizeof w.va));
  TG_OK(tegraph_graph_kernel_arg(g, 1, 2, &alpha, sizeof alpha));
  ck_assert_msg(alpha == w.alpha, "the table did not follow the update");
  work_poison(&w);
  tg_launch_sync(g);
  work_check(&w, "after set_kernel_arg");
  float *a = tgt_get(w.out, w.n);
  TG_OK(tegraph_graph_create(0, &ref));
  tg_capture(ref, &w, 0, NULL);
  work_poison(&w);
  tg_launch_sync(ref);
  float *b = tgt_get(w.out, w.n);
  te_expect_f32_bits(a, b, w.n, "per-node update vs re-capture");
  /* misuse: wrong node, parameter, size */
  TG_EXPECT(TEGRAPH_ERR_INVALID, "kernel node 3",
            tegraph_graph_set_kernel_arg(g, 3, 0, &alpha, sizeof alpha));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "param 9",
            tegraph_graph_set_kernel_arg(g, 1, 9, &alpha, sizeof alpha));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "bytes", tegraph_graph_set_kernel_arg(g, 1, 2, &alpha, 8));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "value is NULL", tegraph_graph_set_kernel_arg(g, 1, 2, NULL, 4));
  free(a);
  free(b);
  TG_OK(tegraph_graph_destroy(g));
  TG_OK(tegraph_graph_destroy(ref));
  work_free(&w);
}
END_TEST

/* After a whole-graph update the executable's nodes are still named by the
 * graph it was instantiated from (cuda refused the newer graph's nodes):
 * a per-node update after an update in place must reach the executable. */
START_TEST(kernel_arg_after_whole_graph_update) {
  struct work w1, w2;
  size_t n = rand_n();
  work_new(&w1, n);
  work_new(&w2, n);
  tegraph_graph_t *g = NULL;
  struct tegraph_update_info info;
  TG_OK(tegraph_graph_create(0, &g));
  tg_capture(g, &w1, 0, NULL);
  TG_OK(tegraph_graph_instantiate(g, NULL));
  for (int round = 0; round < 2; round++) {
    tg_capture(g, round ? &w1 : &w2, 0, &info);
    ck_assert_int_eq(info.updated, 1);
    struct work *w = round ? &w1 : &w2;
    w->alpha = te_rand_float(-3, -1);
    TG_OK(tegraph_graph_set_kernel_arg(g, 1, 2, &w->alpha, sizeof w->alpha));
    work_poison(w);
    tg_launch_sync(g);
    work_check(w, round ? "second update, then set_kernel_arg" : "update, then set_kernel_arg");
  }
  TG_OK(tegraph_graph_destroy(g));
  work_free(&w1);
  work_free(&w2);
}
END_TEST

START_TEST(append_and_dot) {
  struct work w;
  work_new(&w, rand_n());
  tecore_devptr_t y = te_dalloc(w.n * 4);
  tegraph_graph_t *g = NULL;
  struct tegraph_update_info info;
  TG_OK(tegraph_graph_create(TEGRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH, &g));
  tg_capture(g, &w, 0, NULL);
  TG_OK(tegraph_graph_instantiate(g, NULL));
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_RELAXED, TEGRAPH_CAPTURE_APPEND));
  TG_EXPECT(TEGRAPH_ERR_STATE, "already captures",
            tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_RELAXED, 0));
  TG_EXPECT(TEGRAPH_ERR_STATE, "capturing", tegraph_graph_launch(g, te_stream));
  TE_OK(tecore_scale_add(y, w.out, 2.0f, w.out, 1.0f, TECORE_DTYPE_F32, w.n, te_stream));
  TG_OK(tegraph_graph_end_capture(g, &info));
  ck_assert_int_eq(info.reinstantiated, 1); /* the topology grew */
  work_poison(&w);
  te_poison_dev_nan(y, w.n);
  TG_OK(tegraph_graph_upload(g, te_stream));
  tg_launch_sync(g);
  work_check(&w, "append");
  float *out = tgt_get(w.out, w.n), *got = tgt_get(y, w.n);
  for (size_t i = 0; i < w.n; i++) out[i] = fmaf(2.0f, out[i], 1.0f * out[i]);
  te_expect_f32_bits(got, out, w.n, "y (appended part)");
  char dir[256], path[300];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/g.dot", dir);
  TG_OK(tegraph_graph_dot(g, path));
  FILE *f = fopen(path, "r");
  ck_assert_ptr_nonnull(f);
  char line[256] = "";
  ck_assert_ptr_nonnull(fgets(line, sizeof line, f));
  fclose(f);
  ck_assert_msg(strstr(line, "digraph"), "DOT file starts with \"%s\"", line);
  te_rmtree(dir);
  tecore_graph_t gh = NULL;
  tecore_graph_exec_t xh = NULL;
  TG_OK(tegraph_graph_handles(g, &gh, &xh));
  ck_assert_ptr_nonnull(gh);
  ck_assert_ptr_nonnull(xh);
  free(out);
  free(got);
  TG_OK(tegraph_graph_destroy(g));
  TE_OK(tecore_mem_free(y));
  work_free(&w);
}
END_TEST

START_TEST(graph_misuse) {
  tegraph_graph_t *g = NULL;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "g is NULL", tegraph_graph_create(0, NULL));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "flags", tegraph_graph_create(0x100, &g));
  TG_OK(tegraph_graph_create(0, &g));
  TG_EXPECT(TEGRAPH_ERR_STATE, "no graph", tegraph_graph_launch(g, te_stream));
  TG_EXPECT(TEGRAPH_ERR_STATE, "not capturing", tegraph_graph_end_capture(g, NULL));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "legacy",
            tegraph_graph_begin_capture(g, NULL, TECORE_CAPTURE_GLOBAL, 0));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "mode", tegraph_graph_begin_capture(g, te_stream, 7, 0));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "flags",
            tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_GLOBAL, 0x8));
  /* a capture that an illegal call invalidates ends with TEGRAPH_ERR_CAPTURE */
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_GLOBAL, 0));
  tecore_devptr_t p = 0;
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_mem_alloc(64, &p));
  TG_EXPECT(TEGRAPH_ERR_CAPTURE, "capture", tegraph_graph_end_capture(g, NULL));
  TG_EXPECT(TEGRAPH_ERR_STATE, "no graph", tegraph_graph_launch(g, te_stream));
  /* g is still usable */
  struct work w;
  work_new(&w, rand_n());
  tg_capture(g, &w, 0, NULL);
  work_poison(&w);
  tg_launch_sync(g);
  work_check(&w, "after a failed capture");
  size_t nk;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "count is NULL", tegraph_graph_kernel_nodes(g, NULL, 0, NULL));
  TG_OK(tegraph_graph_kernel_nodes(g, NULL, 0, &nk));
  ck_assert_uint_eq(nk, 3);   /* te_fill, te_scale_add, te_copy */
  TG_EXPECT(TEGRAPH_ERR_INVALID, "path", tegraph_graph_dot(g, ""));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "g is NULL", tegraph_graph_destroy(NULL));
  TG_OK(tegraph_graph_destroy(g));
  work_free(&w);
}
END_TEST

/* ---- the memory pool ---------------------------------------------------------------- */

START_TEST(mempool_first_fit) {
  tegraph_mempool_t *pool = NULL;
  size_t used = 1, reserved = 1;
  int users = -1;
  TG_OK(tegraph_mempool_create(1 << 20, &pool));
  TG_OK(tegraph_mempool_usage(pool, &used, &reserved, &users));
  ck_assert_uint_eq(used, 0);
  ck_assert_uint_eq(reserved, 0);
  ck_assert_int_eq(users, 0);
  tecore_devptr_t a, b, c, d, big;
  TG_OK(tegraph_mempool_alloc(pool, 1000, &a));
  TG_OK(tegraph_mempool_alloc(pool, 3000, &b));
  TG_OK(tegraph_mempool_alloc(pool, 100, &c));
  ck_assert_uint_eq(a % 256, 0);
  ck_assert_uint_eq(b, a + 1024);
  ck_assert_uint_eq(c, b + 3072);
  TG_OK(tegraph_mempool_usage(pool, &used, &reserved, NULL));
  ck_assert_uint_eq(used, 1024 + 3072 + 256);
  ck_assert_uint_eq(reserved, 1 << 20);
  /* the blocks are real device memory */
  float *h = malloc(1000);
  te_rand_bytes(h, 1000);
  te_h2d(a, h, 1000);
  float *back = tgt_get(a, 250);
  te_expect_mem_eq(back, h, 1000, "pool block a");
  free(back);
  free(h);
  /* first fit reuses b's hole; freeing merges neighbours */
  TG_OK(tegraph_mempool_free(pool, b));
  TG_OK(tegraph_mempool_alloc(pool, 2000, &d));
  ck_assert_uint_eq(d, b);
  TG_OK(tegraph_mempool_free(pool, a));
  TG_OK(tegraph_mempool_free(pool, d));
  TG_OK(tegraph_mempool_alloc(pool, 4000, &d)); /* a + b's space, merged */
  ck_assert_uint_eq(d, a);
  /* larger than a chunk: a chunk of its own */
  TG_OK(tegraph_mempool_alloc(pool, 3 << 20, &big));
  TG_OK(tegraph_mempool_usage(pool, NULL, &reserved, NULL));
  ck_assert_uint_eq(reserved, (1 << 20) + (3 << 20));
  TG_OK(tegraph_mempool_reserve(pool, 1 << 19)); /* fits: nothing reserved */
  TG_OK(tegraph_mempool_usage(pool, NULL, &reserved, NULL));
  ck_assert_uint_eq(reserved, (1 << 20) + (3 << 20));
  /* misuse */
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not a live block", tegraph_mempool_free(pool, a + 16));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "bytes is 0", tegraph_mempool_alloc(pool, 0, &a));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "ptr is NULL", tegraph_mempool_alloc(pool, 8, NULL));
  TG_EXPECT(TEGRAPH_ERR_INVALID, "pool is NULL", tegraph_mempool_create(0, NULL));
  TG_OK(tegraph_mempool_free(pool, c));
  TG_OK(tegraph_mempool_free(pool, d));
  TG_OK(tegraph_mempool_free(pool, big));
  TG_OK(tegraph_mempool_usage(pool, &used, NULL, NULL));
  ck_assert_uint_eq(used, 0);
  TG_OK(tegraph_mempool_destroy(pool));
}
END_TEST

static Suite *make_suite(void) {
  Suite *s = suite_create("graph_graphs");
  TCase *tc = tgt_tcase(s, "device");
  tcase_add_test(tc, nodes_listed);
  tcase_add_test(tc, exec_node_updates);
  tcase_add_test(tc, capture_to_graph_appends);
  tcase_add_test(tc, instantiate_flags);
  tc = tgt_tcase(s, "tegraph_graph");
  tcase_add_test(tc, update_equals_reinstantiation);
  tcase_add_test(tc, set_kernel_arg_equals_recapture);
  tcase_add_test(tc, test_set_kernel_arg_rejects_null_and_misaligned_pointer);
  tcase_add_test(tc, kernel_arg_after_whole_graph_update);
  tcase_add_test(tc, append_and_dot);
  tcase_add_test(tc, graph_misuse);
  tc = tgt_tcase(s, "mempool");
  tcase_add_test(tc, mempool_first_fit);
  return s;
}

TE_TEST_MAIN(make_suite, TE_TEST_DEVICE)
