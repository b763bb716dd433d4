/* SPDX-License-Identifier: Apache-2.0 */
/* bench_graph.c -- te-bench's graph section (--graph): libtegraph's costs,
 * each printed beside its peer measured in the same run:
 *   - a whole-graph update of a 1000-kernel graph (tecore_graph_exec_update
 *     of a newly captured graph), beside re-capture plus instantiation, and
 *     per-node updates of all 1000 kernels;
 *   - host time per replay of a graphed callable whose forward is 12
 *     small kernels (launch-bound), beside a bare graph launch and the
 *     eager launches of the same kernels, with the device time of both;
 *   - replaying a callable with a new --mb MB input each time: rebinding
 *     the pointer in place, beside copying the input in (and the copy
 *     floor);
 *   - host time per launch of lines of 100, 400 and 1000 kernel nodes, and
 *     of 400 nodes with memsets, copies to host or fork/join mixed in
 *     (bench_launch.c);
 *   - a whole FP8 training step of 12 MLP blocks as one graph, beside the
 *     eager step (bench_step.c).
 * Host times are medians of --iters runs (at least 5) measured with
 * CLOCK_MONOTONIC; device times come from events around --iters runs. */
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/graph.h>

static int g_fail(struct tb_ctx *c, const char *what) {
  fprintf(stderr, "te-bench: graph: %s failed: %s\n", what, tecore_last_error());
  c->failed = 1;
  return -1;
}
#define GB_CORE(c, call)                                                      \
  do {                                                                        \
    if ((call) != TECORE_SUCCESS) return g_fail((c), #call);                  \
  } while (0)

/* ---- 1. whole-graph update of a 1000-kernel graph ------------------------------ */

#define CHAIN 1000
#define CHAIN_N 256

/* CHAIN dependent scale_adds ping-ponging between a and b, captured. */
static int capture_chain(struct tb_ctx *c, tecore_devptr_t a, tecore_devptr_t b, float alpha,
                         tecore_graph_t *g) {
  GB_CORE(c, tecore_stream_begin_capture(c->s, TECORE_CAPTURE_THREAD_LOCAL));
  for (int i = 0; i < CHAIN; i++) {
    tecore_devptr_t dst = i & 1 ? a : b, src = i & 1 ? b : a;
    if (tecore_scale_add(dst, src, alpha + 1e-3f * (float)i, src, 0.0f, TECORE_DTYPE_F32,
                         CHAIN_N, c->s) != TECORE_SUCCESS) {
      tecore_graph_t junk = NULL;
      (void)tecore_stream_end_capture(c->s, &junk);
      if (junk) tecore_graph_destroy(junk);
      return g_fail(c, "tecore_scale_add (capture)");
    }
  }
  GB_CORE(c, tecore_stream_end_capture(c->s, g));
  return 0;
}

static int bench_update(struct tb_ctx *c) {
  int reps = c->iters < 5 ? 5 : c->iters;
  double *cap = calloc((size_t)reps, sizeof *cap), *inst = calloc((size_t)reps, sizeof *inst);
  double *upd = calloc((size_t)reps, sizeof *upd), *node = calloc((size_t)reps, sizeof *node);
  tecore_devptr_t a = 0, b = 0;
  tecore_graph_t g = NULL;
  tecore_graph_exec_t x = NULL;
  struct tecore_graph_node_desc *nd = calloc(CHAIN, sizeof *nd);
  int rc = -1;
  if (!cap || !inst || !upd || !node || !nd) goto out;
  if (tecore_mem_alloc(CHAIN_N * 4, &a) || tecore_mem_alloc(CHAIN_N * 4, &b) ||
      tecore_fill(a, TECORE_DTYPE_F32, CHAIN_N, 1.0, c->s)) {
    g_fail(c, "buffers");
    goto out;
  }
  if (capture_chain(c, a, b, 1.0f, &g) || tecore_graph_instantiate(&x, g)) goto out;
  size_t count = 0;
  if (tecore_graph_nodes(g, nd, CHAIN, &count) || count != CHAIN) {
    g_fail(c, "tecore_graph_nodes");
    goto out;
  }
  for (int r = 0; r < reps; r++) {
    tecore_graph_t g2 = NULL;
    tecore_graph_exec_t x2 = NULL;
    tecore_graph_update_result_t why;
    double t0 = tb_now_us();
    if (capture_chain(c, a, b, 1.0f + 0.01f * (float)r, &g2)) goto out;
    double t1 = tb_now_us();
    if (tecore_graph_instantiate(&x2, g2)) {
      g_fail(c, "tecore_graph_instantiate");
      goto out;
    }
    double t2 = tb_now_us();
    if (tecore_graph_exec_update(x, g2, &why)) {
      g_fail(c, "tecore_graph_exec_update");
      goto out;
    }
    double t3 = tb_now_us();
    /* per-node: every kernel's argument values rewritten one node at a time */
    for (int i = 0; i < CHAIN; i++) {
      void *pd, *pa, *pb;
      float al, be;
      int dt;
      unsigned long long nn;
      void *args[] = {&pd, &pa, &al, &pb, &be, &dt, &nn};
      if (tecore_graph_kernel_node_args(g, nd[i].node, args) ||
          tecore_graph_exec_kernel_node_set(x, nd[i].node, NULL, args)) {
        g_fail(c, "per-node update");
        goto out;
      }
    }
    double t4 = tb_now_us();
    cap[r] = t1 - t0;
    inst[r] = t2 - t1;
    upd[r] = t3 - t2;
    node[r] = t4 - t3;
    tecore_graph_exec_destroy(x2);
    tecore_graph_destroy(g2);
  }
  if (tecore_graph_launch(x, c->s) || tecore_stream_synchronize(c->s)) {
    g_fail(c, "launching the updated graph");
    goto out;
  }
  double mc = tb_median(cap, reps), mi = tb_median(inst, reps), mu = tb_median(upd, reps);
  double mn = tb_median(node, reps);
  char note[96];
  snprintf(note, sizeof note, "re-capture %.1f us + instantiate %.1f us", mc, mi);
  struct tb_row r1 = {.name = "graph whole-graph update", .shape = "1000 kernels", .time = mu,
                      .unit = "us", .peer = "re-capture + instantiate", .peer_time = mc + mi,
                      .target = ">= 3x", .met = (mc + mi) / mu >= 3.0, .note = note};
  tb_row(c, &r1);
  struct tb_row r2 = {.name = "graph re-capture + update", .shape = "1000 kernels",
                      .time = mc + mu, .unit = "us", .peer = "re-capture + instantiate",
                      .peer_time = mc + mi};
  tb_row(c, &r2);
  char note3[64];
  snprintf(note3, sizeof note3, "read args + set; per node %.2f us", mn / CHAIN);
  struct tb_row r3 = {.name = "graph per-node update, all nodes", .shape = "1000 kernels",
                      .time = mn, .unit = "us", .peer = "whole-graph update", .peer_time = mu,
                      .note = note3};
  tb_row(c, &r3);
  rc = 0;
out:
  if (x) tecore_graph_exec_destroy(x);
  if (g) tecore_graph_destroy(g);
  tecore_mem_free(a);
  tecore_mem_free(b);
  free(cap), free(inst), free(upd), free(node), free(nd);
  return rc;
}

/* ---- 2. host time per replay ------------------------------------------------------ */

#define LAYERS 12
#define SMALL_N 4096

struct small_model {
  tecore_devptr_t h[LAYERS];
};

static tecore_result_t small_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  struct small_model *m = u;
  tecore_devptr_t in = io->inputs[0].data;
  for (int l = 0; l < LAYERS; l++) {
    tecore_devptr_t out = l == LAYERS - 1 ? io->outputs[0].data : m->h[l];
    tecore_result_t r = tecore_scale_add(out, in, 0.5f, in, 0.25f, TECORE_DTYPE_F32, SMALL_N, s);
    if (r) return r;
    in = out;
  }
  return TECORE_SUCCESS;
}

static int bench_replay(struct tb_ctx *c) {
  struct small_model m = {{0}};
  tegraph_callable_t *cb = NULL;
  tecore_devptr_t x0 = 0, x1 = 0, y = 0;
  int rc = -1, reps = c->iters < 5 ? 5 : c->iters, per = 100;
  double *hs = calloc((size_t)reps, sizeof *hs), *hr = calloc((size_t)reps, sizeof *hr);
  double *he = calloc((size_t)reps, sizeof *he), *hl = calloc((size_t)reps, sizeof *hl);
  if (!hs || !hr || !he || !hl) goto out;
  for (int l = 0; l < LAYERS; l++)
    if (tecore_mem_alloc(SMALL_N * 4, &m.h[l])) goto fail;
  if (tecore_mem_alloc(SMALL_N * 4, &x0) || tecore_mem_alloc(SMALL_N * 4, &x1) ||
      tecore_mem_alloc(SMALL_N * 4, &y) || tecore_fill(x0, TECORE_DTYPE_F32, SMALL_N, 1.0, c->s) ||
      tecore_fill(x1, TECORE_DTYPE_F32, SMALL_N, 2.0, c->s))
    goto fail;
  size_t n = SMALL_N;
  struct tecore_tensor xs, ys;
  tecore_tensor_init(&xs, TECORE_DTYPE_F32, 1, &n, 0);
  tecore_tensor_init(&ys, TECORE_DTYPE_F32, 1, &n, 0);
  struct tegraph_callable_desc d = {.forward = small_fwd, .user = &m, .sample_inputs = &xs,
                                    .ninputs = 1, .outputs = &ys, .noutputs = 1,
                                    .num_warmup = 1,
                                    .instantiate_flags = TEGRAPH_INSTANTIATE_UPLOAD};
  if (tegraph_callable_create(&d, NULL, &cb) != TEGRAPH_SUCCESS) goto fail;
  struct tegraph_slot_info si;
  tegraph_callable_slot(cb, TEGRAPH_SLOT_INPUT, 0, NULL, &si);
  struct tecore_tensor st = si.tensor, in0 = st, in1 = st;
  in0.data = x0;
  in1.data = x1;
  struct tegraph_replay_opts o = {.stream = c->s, .is_first_microbatch = 1};
  tecore_graph_t gg = NULL;
  tecore_graph_exec_t gx = NULL;
  struct tegraph_io io = {.phase = TEGRAPH_PHASE_EAGER, .inputs = &in0, .ninputs = 1,
                          .outputs = &ys, .noutputs = 1};
  ys.data = y;
  /* the bare graph of the same kernels: the floor of a replay */
  if (tecore_stream_begin_capture(c->s, TECORE_CAPTURE_THREAD_LOCAL) ||
      small_fwd(&m, c->s, &io) || tecore_stream_end_capture(c->s, &gg) ||
      tecore_graph_instantiate(&gx, gg) || tecore_graph_upload(gx, c->s))
    goto fail;
  for (int r = 0; r < reps; r++) {
    double t0 = tb_now_us();
    for (int i = 0; i < per; i++)
      if (tegraph_callable_forward(cb, &st, 1, NULL, NULL, 0, NULL, 0, &o)) goto fail;
    double t1 = tb_now_us();
    for (int i = 0; i < per; i++)
      if (tegraph_callable_forward(cb, i & 1 ? &in1 : &in0, 1, NULL, NULL, 0, NULL, 0, &o))
        goto fail;
    double t2 = tb_now_us();
    for (int i = 0; i < per; i++)
      if (small_fwd(&m, c->s, &io)) goto fail;
    double t3 = tb_now_us();
    for (int i = 0; i < per; i++)
      if (tecore_graph_launch(gx, c->s)) goto fail;
    double t4 = tb_now_us();
    if (tecore_stream_synchronize(c->s)) goto fail;
    hs[r] = (t1 - t0) / per;
    hr[r] = (t2 - t1) / per;
    he[r] = (t3 - t2) / per;
    hl[r] = (t4 - t3) / per;
  }
  /* device time per step: replays, bare launches and eager steps back to back */
  float ms_g = 0, ms_e = 0, ms_l = 0;
  if (tecore_event_record(c->e0, c->s)) goto fail;
  for (int i = 0; i < per; i++)
    if (tecore_graph_launch(gx, c->s)) goto fail;
  if (tecore_event_record(c->e1, c->s) || tecore_event_synchronize(c->e1) ||
      tecore_event_elapsed(&ms_l, c->e0, c->e1))
    goto fail;
  if (tecore_event_record(c->e0, c->s)) goto fail;
  for (int i = 0; i < per; i++)
    if (tegraph_callable_forward(cb, &st, 1, NULL, NULL, 0, NULL, 0, &o)) goto fail;
  if (tecore_event_record(c->e1, c->s) || tecore_event_synchronize(c->e1) ||
      tecore_event_elapsed(&ms_g, c->e0, c->e1) || tecore_event_record(c->e0, c->s))
    goto fail;
  for (int i = 0; i < per; i++)
    if (small_fwd(&m, c->s, &io)) goto fail;
  if (tecore_event_record(c->e1, c->s) || tecore_event_synchronize(c->e1) ||
      tecore_event_elapsed(&ms_e, c->e0, c->e1))
    goto fail;
  double mhs = tb_median(hs, reps), mhr = tb_median(hr, reps), mhe = tb_median(he, reps);
  double mhl = tb_median(hl, reps);
  char note[64];
  snprintf(note, sizeof note, "bare graph launch %.2f us", mhl);
  struct tb_row r1 = {.name = "callable replay host time", .shape = "12 kernels x 4096",
                      .time = mhs, .unit = "us", .peer = "eager launches", .peer_time = mhe,
                      .target = "<= 10 us", .met = mhs <= 10.0, .note = note};
  tb_row(c, &r1);
  struct tb_row r2 = {.name = "callable replay host, rebinding", .shape = "12 kernels x 4096",
                      .time = mhr, .unit = "us", .peer = "same input", .peer_time = mhs};
  tb_row(c, &r2);
  char note3[64];
  snprintf(note3, sizeof note3, "bare graph launch %.2f us", 1e3 * ms_l / per);
  struct tb_row r3 = {.name = "callable replay device time", .shape = "12 kernels x 4096",
                      .time = 1e3 * ms_g / per, .unit = "us", .peer = "eager step",
                      .peer_time = 1e3 * ms_e / per, .target = ">= 2x",
                      .met = ms_e / ms_g >= 2.0, .note = note3};
  tb_row(c, &r3);
  rc = 0;
  goto out;
fail:
  g_fail(c, "replay section");
out:
  tecore_stream_synchronize(c->s);
  if (cb) tegraph_callable_destroy(cb);
  if (gx) tecore_graph_exec_destroy(gx);
  if (gg) tecore_graph_destroy(gg);
  for (int l = 0; l < LAYERS; l++) tecore_mem_free(m.h[l]);
  tecore_mem_free(x0);
  tecore_mem_free(x1);
  tecore_mem_free(y);
  free(hs), free(hr), free(he), free(hl);
  return rc;
}

/* ---- 3. rebinding a large input vs copying it ------------------------------------ */

#define PEEK 1024 /* the forward reads this many floats of the input */

static tecore_result_t peek_fwd(void *u, tecore_stream_t s, const struct tegraph_io *io) {
  (void)u;
  return tecore_scale_add(io->outputs[0].data, io->inputs[0].data, 1.0f, io->inputs[0].data,
                          0.0f, TECORE_DTYPE_F32, PEEK, s);
}

/* ms per replay over iters replays alternating u0 and u1 (device time). */
static double time_alternating(struct tb_ctx *c, tegraph_callable_t *cb, struct tecore_tensor *u,
                               double *host_us) {
  struct tegraph_replay_opts o = {.stream = c->s, .is_first_microbatch = 1};
  for (int i = 0; i < 3; i++)
    if (tegraph_callable_forward(cb, &u[i & 1], 1, NULL, NULL, 0, NULL, 0, &o)) return -1;
  if (tecore_event_record(c->e0, c->s)) return -1;
  double t0 = tb_now_us();
  for (int i = 0; i < c->iters; i++)
    if (tegraph_callable_forward(cb, &u[i & 1], 1, NULL, NULL, 0, NULL, 0, &o)) return -1;
  double t1 = tb_now_us();
  float ms = 0;
  if (tecore_event_record(c->e1, c->s) || tecore_event_synchronize(c->e1) ||
      tecore_event_elapsed(&ms, c->e0, c->e1))
    return -1;
  *host_us = (t1 - t0) / c->iters;
  return ms / c->iters;
}

static int bench_rebind(struct tb_ctx *c) {
  size_t n = ((size_t)c->mb << 20) / 4, pn = PEEK;
  tecore_devptr_t u0 = 0, u1 = 0;
  tegraph_callable_t *cb[2] = {NULL, NULL};
  int rc = -1;
  if (tecore_mem_alloc(n * 4, &u0) || tecore_mem_alloc(n * 4, &u1) ||
      tecore_memset_d32_async(u0, 0x3f800000u, n, c->s) ||
      tecore_memset_d32_async(u1, 0x40000000u, n, c->s))
    goto fail;
  struct tecore_tensor xs, ys, u[2];
  tecore_tensor_init(&xs, TECORE_DTYPE_F32, 1, &n, 0);
  tecore_tensor_init(&ys, TECORE_DTYPE_F32, 1, &pn, 0);
  u[0] = xs;
  u[1] = xs;
  u[0].data = u0;
  u[1].data = u1;
  for (int k = 0; k < 2; k++) {
    struct tegraph_callable_desc d = {.forward = peek_fwd, .sample_inputs = &xs, .ninputs = 1,
                                      .outputs = &ys, .noutputs = 1,
                                      .flags = k ? TEGRAPH_CALLABLE_NO_REBIND : 0};
    if (tegraph_callable_create(&d, NULL, &cb[k]) != TEGRAPH_SUCCESS) goto fail;
  }
  double host_r = 0, host_c = 0;
  double ms_r = time_alternating(c, cb[0], u, &host_r);
  double ms_c = time_alternating(c, cb[1], u, &host_c);
  if (ms_r < 0 || ms_c < 0) goto fail;
  struct tegraph_slot_info si;
  tegraph_callable_slot(cb[0], TEGRAPH_SLOT_INPUT, 0, NULL, &si);
  const char *path = si.last_path == TEGRAPH_PATH_REBOUND ? "rebound" : "NOT rebound";
  double floor_ms = 2.0 * n * 4 / (c->copy_gbs * 1e9) * 1e3;
  char shape[32];
  snprintf(shape, sizeof shape, "%d MB", c->mb);
  char note[128];
  snprintf(note, sizeof note, "%s; %.2f%% of copy-in; copy floor %.3f ms; host %.1f us vs %.1f us",
           path, 100.0 * ms_r / ms_c, floor_ms, host_r, host_c);
  struct tb_row r = {.name = "callable input rebinding", .shape = shape, .time = ms_r,
                     .unit = "ms", .peer = "copy-in", .peer_time = ms_c,
                     .target = "<= 5% of copy-in", .met = 100.0 * ms_r / ms_c < 5.0, .note = note};
  tb_row(c, &r);
  rc = 0;
  goto out;
fail:
  g_fail(c, "rebinding section");
out:
  tecore_stream_synchronize(c->s);
  for (int k = 0; k < 2; k++)
    if (cb[k]) tegraph_callable_destroy(cb[k]);
  tecore_mem_free(u0);
  tecore_mem_free(u1);
  return rc;
}

void tb_graph(struct tb_ctx *c) {
  c->section = "graph";
  tb_info(c, "graph: host times are medians of %d runs; device times from events",
          c->iters < 5 ? 5 : c->iters);
  tb_progress(c, "update costs");
  bench_update(c);
  tb_progress(c, "replay costs");
  bench_replay(c);
  tb_progress(c, "rebinding costs");
  bench_rebind(c);
  tb_progress(c, "launch costs by node count");
  tb_graph_launch(c);
  tb_progress(c, "the FP8 training step, graph vs eager");
  tb_graph_step(c);
  fflush(stdout);
}
