/* SPDX-License-Identifier: Apache-2.0 */
/* check_graph.c -- stream capture and graphs (te/device.h):
 *   - capture of a memset, kernels and a copy on one stream plus a second
 *     stream forked and joined by events; instantiate, launch (and upload):
 *     results equal the eager run bit for bit, on poisoned outputs;
 *   - node count and the DOT dump;
 *   - exec update with new pointers and values (same topology) takes
 *     effect on the next launch; an extra node is refused with
 *     TOPOLOGY_CHANGED and the exec keeps running its old work;
 *     update_or_instantiate falls back to a new instance;
 *   - an illegal call during capture (stream_synchronize) fails with
 *     TECORE_ERR_CAPTURE and invalidates the capture; ending a capture with
 *     an unjoined fork fails.
 * Shapes: n floats per buffer, n random in [1000, 9000). */
#include "tests.h"

#define WAIT_MS 20000

/* One instance of the work: every buffer and value the graph bakes in. */
struct work {
  size_t n;
  tecore_devptr_t a, b, c, d, x, out, e;
  float va, vb, alpha, beta, gamma, ve;
  int extra; /* 1: one more node (fill e) -- a topology change */
  float *x_host;
};

static tecore_stream_t side; /* the forked stream */
static tecore_event_t ev_fork, ev_join;

static void graph_setup(void) {
  te_dev_setup();
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &side));
  TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ev_fork));
  TE_OK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &ev_join));
}
static void graph_teardown(void) {
  TE_OK(tecore_event_destroy(ev_fork));
  TE_OK(tecore_event_destroy(ev_join));
  TE_OK(tecore_stream_synchronize(side));
  TE_OK(tecore_stream_destroy(side));
  te_dev_teardown();
}

static void work_new(struct work *w, size_t n, int extra) {
  size_t bytes = n * 4;
  memset(w, 0, sizeof *w);
  w->n = n;
  w->extra = extra;
  w->a = te_dalloc(bytes);
  w->b = te_dalloc(bytes);
  w->c = te_dalloc(bytes);
  w->d = te_dalloc(bytes);
  w->x = te_dalloc(bytes);
  w->out = te_dalloc(bytes);
  w->e = te_dalloc(bytes);
  w->va = te_rand_float(-4, 4);
  w->vb = te_rand_float(-4, 4);
  w->alpha = te_rand_float(-2, 2);
  w->beta = te_rand_float(-2, 2);
  w->gamma = te_rand_float(-2, 2);
  w->ve = te_rand_float(10, 20);
  w->x_host = malloc(bytes);
  te_rand_floats(w->x_host, n, -8, 8);
  te_h2d(w->x, w->x_host, bytes);
}
static void work_free(struct work *w) {
  tecore_devptr_t *p[] = {&w->a, &w->b, &w->c, &w->d, &w->x, &w->out, &w->e};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) TE_OK(tecore_mem_free(*p[i]));
  free(w->x_host);
}
/* NaN into every output (x is an input and stays). */
static void work_poison(const struct work *w) {
  const tecore_devptr_t p[] = {w->a, w->b, w->c, w->d, w->out, w->e};
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) te_poison_dev_nan(p[i], w->n);
}

/* Enqueues the work on s (and the side stream), captured or not. */
static void work_enqueue(const struct work *w, tecore_stream_t s) {
  size_t n = w->n;
  TE_OK(tecore_memset_d32_async(w->a, te_f32_bits_of(w->va), n, s));
  TE_OK(tecore_fill(w->b, TECORE_DTYPE_F32, n, w->vb, s));
  TE_OK(tecore_event_record(ev_fork, s));
  TE_OK(tecore_stream_wait_event(side, ev_fork));
  TE_OK(tecore_scale_add(w->c, w->a, w->alpha, w->b, w->beta, TECORE_DTYPE_F32, n, side));
  TE_OK(tecore_event_record(ev_join, side));
  TE_OK(tecore_stream_wait_event(s, ev_join));
  TE_OK(tecore_scale_add(w->d, w->c, 1.0f, w->x, w->gamma, TECORE_DTYPE_F32, n, s));
  TE_OK(tecore_memcpy_async(w->out, w->d, n * 4, s));
  if (w->extra) TE_OK(tecore_fill(w->e, TECORE_DTYPE_F32, n, w->ve, s));
}

static tecore_graph_t work_capture(const struct work *w) {
  tecore_graph_t g = NULL;
  tecore_capture_status_t st;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_ACTIVE);
  work_enqueue(w, te_stream);
  /* the forked stream stays in the capture until the origin ends it */
  TE_OK(tecore_stream_capture_status(side, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_ACTIVE);
  TE_OK(tecore_stream_end_capture(te_stream, &g));
  ck_assert_ptr_nonnull(g);
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);
  TE_OK(tecore_stream_capture_status(side, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);
  return g;
}

/* Checks every output of w against the host reference, bit for bit. */
static void work_verify(const struct work *w, const char *when) {
  size_t n = w->n, bytes = n * 4;
  float *got = malloc(bytes), *want = malloc(bytes);
  char what[128];
  const struct {
    const char *name;
    tecore_devptr_t p;
  } outs[] = {{"a", w->a}, {"b", w->b}, {"c", w->c}, {"d", w->d}, {"out", w->out}};
  for (size_t k = 0; k < sizeof outs / sizeof outs[0]; k++) {
    for (size_t i = 0; i < n; i++) {
      float c = fmaf(w->alpha, w->va, w->beta * w->vb);
      float gx = w->gamma * w->x_host[i];
      float d = fmaf(1.0f, c, gx);
      want[i] = k == 0 ? w->va : k == 1 ? w->vb : k == 2 ? c : d;
    }
    te_poison_host_nan(got, n);
    te_d2h(got, outs[k].p, bytes);
    snprintf(what, sizeof what, "%s: %s", when, outs[k].name);
    te_expect_f32_bits(got, want, n, what);
  }
  te_d2h(got, w->e, bytes);
  for (size_t i = 0; i < n; i++) {
    if (w->extra)
      ck_assert_msg(got[i] == w->ve, "%s: e[%zu] = %g, want %g", when, i, (double)got[i],
                    (double)w->ve);
    else
      ck_assert_msg(isnan(got[i]), "%s: e[%zu] = %g written without the extra node", when, i,
                    (double)got[i]);
  }
  free(got);
  free(want);
}

/* Every output of w still NaN: the work did not run on these buffers. */
static void work_untouched(const struct work *w, const char *when) {
  size_t n = w->n;
  float *got = malloc(n * 4);
  const tecore_devptr_t p[] = {w->a, w->b, w->c, w->d, w->out, w->e};
  for (size_t k = 0; k < sizeof p / sizeof p[0]; k++) {
    te_d2h(got, p[k], n * 4);
    for (size_t i = 0; i < n; i++)
      ck_assert_msg(isnan(got[i]), "%s: buffer %zu [%zu] = %g was written", when, k, i,
                    (double)got[i]);
  }
  free(got);
}

static void launch_and_wait(tecore_graph_exec_t x) {
  TE_OK(tecore_graph_launch(x, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  ck_assert_int_eq(te_stream_wait(side, WAIT_MS), TECORE_SUCCESS);
}

static size_t rand_n(void) { return 1000 + te_rand_below(8000); }

/* ---- capture, instantiate, launch = eager ---- */

START_TEST(capture_matches_eager) {
  struct work w;
  work_new(&w, rand_n(), 0);
  /* eager */
  work_poison(&w);
  work_enqueue(&w, te_stream);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  work_verify(&w, "eager");
  float *eager = malloc(w.n * 4), *graphed = malloc(w.n * 4);
  te_d2h(eager, w.out, w.n * 4);

  /* captured: nothing runs at capture time */
  work_poison(&w);
  tecore_graph_t g = work_capture(&w);
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  work_untouched(&w, "after capture, before launch");
  size_t nodes = 0;
  TE_OK(tecore_graph_node_count(g, &nodes));
  ck_assert_msg(nodes == 5, "node count %zu, want 5 (memset, fill, 2 scale_add, copy)", nodes);

  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_graph_instantiate(&x, g));
  ck_assert_ptr_nonnull(x);
  TE_OK(tecore_graph_upload(x, te_stream));
  launch_and_wait(x);
  work_verify(&w, "graph launch");
  te_d2h(graphed, w.out, w.n * 4);
  te_expect_f32_bits(graphed, eager, w.n, "graph vs eager");

  /* a graph reads memory when it runs: new x, relaunch, new result */
  te_rand_floats(w.x_host, w.n, -8, 8);
  te_h2d(w.x, w.x_host, w.n * 4);
  work_poison(&w);
  launch_and_wait(x);
  work_verify(&w, "relaunch with new input");
  /* and twice in a row without a host wait in between */
  work_poison(&w);
  TE_OK(tecore_graph_launch(x, te_stream));
  TE_OK(tecore_graph_launch(x, te_stream));
  ck_assert_int_eq(te_stream_wait(te_stream, WAIT_MS), TECORE_SUCCESS);
  work_verify(&w, "two launches");

  /* the graph outlives the exec and vice versa */
  TE_OK(tecore_graph_destroy(g));
  work_poison(&w);
  launch_and_wait(x);
  work_verify(&w, "launch after graph_destroy");
  TE_OK(tecore_graph_exec_destroy(x));
  free(eager);
  free(graphed);
  work_free(&w);
}
END_TEST

START_TEST(dot_file) {
  struct work w;
  work_new(&w, rand_n(), 1);
  tecore_graph_t g = work_capture(&w);
  size_t nodes = 0;
  TE_OK(tecore_graph_node_count(g, &nodes));
  ck_assert_uint_eq(nodes, 6);
  char dir[256], path[512];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/g.dot", dir);
  TE_OK(tecore_graph_dot(g, path));
  FILE *fp = fopen(path, "r");
  ck_assert_msg(fp != NULL, "no DOT file %s", path);
  char head[64] = "";
  size_t k = fread(head, 1, sizeof head - 1, fp);
  head[k] = '\0';
  fclose(fp);
  ck_assert_msg(strncmp(head, "digraph", 7) == 0, "DOT file starts \"%.20s\"", head);
  /* a path that cannot be written is an error, not a crash */
  snprintf(path, sizeof path, "%s/no/such/dir/g.dot", dir);
  TE_EXPECT_FAIL(tecore_graph_dot(g, path));
  te_rmtree(dir);
  TE_OK(tecore_graph_destroy(g));
  work_free(&w);
}
END_TEST

/* ---- update ---- */

START_TEST(exec_update) {
  size_t n = rand_n();
  struct work w1, w2, w3;
  work_new(&w1, n, 0);
  work_new(&w2, n, 0);
  work_new(&w3, n, 1);
  tecore_graph_t g1 = work_capture(&w1);
  tecore_graph_exec_t x = NULL;
  TE_OK(tecore_graph_instantiate(&x, g1));
  work_poison(&w1);
  launch_and_wait(x);
  work_verify(&w1, "first instance");

  /* same topology, other pointers and values: updated in place */
  tecore_graph_t g2 = work_capture(&w2);
  tecore_graph_update_result_t why = TECORE_GRAPH_UPDATE_ERROR;
  TE_OK(tecore_graph_exec_update(x, g2, &why));
  ck_assert_int_eq(why, TECORE_GRAPH_UPDATE_SUCCESS);
  work_poison(&w1);
  work_poison(&w2);
  launch_and_wait(x);
  work_verify(&w2, "after update");
  work_untouched(&w1, "old buffers after update");

  /* one more node: refused, and the exec still runs w2 */
  tecore_graph_t g3 = work_capture(&w3);
  why = TECORE_GRAPH_UPDATE_SUCCESS;
  TE_EXPECT_ERR(TECORE_ERR_GRAPH_UPDATE, NULL, tecore_graph_exec_update(x, g3, &why));
  ck_assert_msg(why == TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED, "why = %d (%s)", (int)why,
                tecore_graph_update_result_name(why));
  work_poison(&w2);
  work_poison(&w3);
  launch_and_wait(x);
  work_verify(&w2, "after a refused update");
  work_untouched(&w3, "new buffers after a refused update");

  /* update_or_instantiate: refused in place, so a new instance */
  int re = -1;
  tecore_graph_exec_t before = x;
  TE_OK(tecore_graph_exec_update_or_instantiate(&x, g3, &re));
  ck_assert_int_eq(re, 1);
  ck_assert_ptr_nonnull(x);
  (void)before; /* destroyed by the call: not touched again */
  work_poison(&w2);
  work_poison(&w3);
  launch_and_wait(x);
  work_verify(&w3, "after reinstantiation");
  work_untouched(&w2, "old buffers after reinstantiation");

  /* and where in-place works it updates in place */
  w3.va = te_rand_float(-4, 4);
  w3.gamma = te_rand_float(-2, 2);
  w3.ve = te_rand_float(30, 40);
  tecore_graph_t g4 = work_capture(&w3);
  re = -1;
  TE_OK(tecore_graph_exec_update_or_instantiate(&x, g4, &re));
  ck_assert_int_eq(re, 0);
  work_poison(&w3);
  launch_and_wait(x);
  work_verify(&w3, "after update_or_instantiate in place");

  /* from nothing: *exec NULL instantiates */
  tecore_graph_exec_t y = NULL;
  re = -1;
  TE_OK(tecore_graph_exec_update_or_instantiate(&y, g2, &re));
  ck_assert_int_eq(re, 1);
  ck_assert_ptr_nonnull(y);
  work_poison(&w2);
  launch_and_wait(y);
  work_verify(&w2, "instantiated from NULL");

  TE_OK(tecore_graph_exec_destroy(x));
  TE_OK(tecore_graph_exec_destroy(y));
  TE_OK(tecore_graph_destroy(g1));
  TE_OK(tecore_graph_destroy(g2));
  TE_OK(tecore_graph_destroy(g3));
  TE_OK(tecore_graph_destroy(g4));
  work_free(&w1);
  work_free(&w2);
  work_free(&w3);
}
END_TEST

/* ---- capture errors ---- */

START_TEST(illegal_call_invalidates) {
  tecore_devptr_t d = te_dalloc(4096);
  te_poison_dev(d, 4096);
  tecore_capture_status_t st;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, 1024, 3.0, te_stream));
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_stream_synchronize(te_stream));
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_INVALIDATED);
  tecore_graph_t g = (tecore_graph_t)(uintptr_t)0x1;
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_stream_end_capture(te_stream, &g));
  ck_assert_ptr_null(g);
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);
  /* nothing captured ran, and the stream works normally again */
  unsigned char back[4096];
  te_d2h(back, d, sizeof back);
  te_expect_bytes_eq(back, TE_POISON_BYTE, sizeof back, "buffer of an invalidated capture");
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, 1024, 3.0, te_stream));
  float f[1024];
  te_d2h(f, d, sizeof f);
  for (int i = 0; i < 1024; i++) ck_assert_float_eq(f[i], 3.0f);
  TE_OK(tecore_mem_free(d));
}
END_TEST

START_TEST(capture_query_is_illegal) {
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_EXPECT_ERR(TECORE_ERR_CAPTURE, NULL, tecore_stream_query(te_stream));
  tecore_graph_t g = NULL;
  tecore_result_t r = tecore_stream_end_capture(te_stream, &g);
  ck_assert_msg(r == TECORE_SUCCESS || r == TECORE_ERR_CAPTURE, "end_capture: %s",
                tecore_result_name(r));
  if (g) TE_OK(tecore_graph_destroy(g));
  tecore_capture_status_t st;
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);
}
END_TEST

START_TEST(unjoined_fork_fails) {
  tecore_devptr_t d = te_dalloc(4096), e = te_dalloc(4096);
  te_poison_dev(d, 4096);
  te_poison_dev(e, 4096);
  tecore_capture_status_t st;
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_GLOBAL));
  TE_OK(tecore_fill(d, TECORE_DTYPE_F32, 1024, 1.0, te_stream));
  TE_OK(tecore_event_record(ev_fork, te_stream));
  TE_OK(tecore_stream_wait_event(side, ev_fork));
  TE_OK(tecore_stream_capture_status(side, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_ACTIVE); /* the wait pulled side into the capture */
  TE_OK(tecore_fill(e, TECORE_DTYPE_F32, 1024, 2.0, side));
  tecore_graph_t g = NULL;
  TE_EXPECT_FAIL(tecore_stream_end_capture(te_stream, &g));
  ck_assert_ptr_null(g);
  TE_OK(tecore_stream_capture_status(te_stream, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);
  /* the failed capture ends for the forked stream too */
  TE_OK(tecore_stream_capture_status(side, &st));
  ck_assert_int_eq(st, TECORE_CAPTURE_NONE);
  unsigned char back[4096];
  te_d2h(back, d, sizeof back);
  te_expect_bytes_eq(back, TE_POISON_BYTE, sizeof back, "buffer of a failed capture");
  te_d2h(back, e, sizeof back);
  te_expect_bytes_eq(back, TE_POISON_BYTE, sizeof back, "forked buffer of a failed capture");
  TE_OK(tecore_mem_free(d));
  TE_OK(tecore_mem_free(e));
}
END_TEST

static Suite *graph_suite(void) {
  Suite *s = suite_create("graph");
  TCase *tc = tcase_create("capture");
  tcase_set_timeout(tc, TE_TEST_TIMEOUT);
  tcase_add_checked_fixture(tc, graph_setup, graph_teardown);
  tcase_add_test(tc, capture_matches_eager);
  tcase_add_test(tc, dot_file);
  tcase_add_test(tc, exec_update);
  tcase_add_test(tc, illegal_call_invalidates);
  tcase_add_test(tc, capture_query_is_illegal);
  tcase_add_test(tc, unjoined_fork_fails);
  suite_add_tcase(s, tc);
  return s;
}

TE_TEST_MAIN(graph_suite, TE_TEST_DEVICE)
