/* SPDX-License-Identifier: Apache-2.0 */
/* bench_step.c -- te-bench's training-step measure (part of --graph): a
 * te-demo-style FP8 step of 12 MLP blocks at a small size, where launches
 * dominate, queued eagerly and replayed as one captured graph.
 *
 * The model: per block x + Linear(GELU(Linear(RMSNorm(x)))) with biases
 * (the fuser, te/ops.h), hidden 256, ffn 1024, 64 tokens, delayed-scaling
 * FP8 (HYBRID).  A step: zero the gradients, forward, backward of a fixed
 * output gradient, the FP8 scale update and AdamW (step number and lr on
 * the device, struct tecore_optim_state, so one graph serves every step).
 *
 * Printed: host time to queue a step (median of --iters runs, CLOCK_MONOTONIC)
 * for the graph beside the eager launches, with what the graph's nodes are
 * (kernels, memsets, copies, event nodes: the kinds that keep a launch off
 * the driver's straight-line path); device time per step from events
 * around --iters back-to-back steps, graph beside eager, with the issue's
 * targets (host <= 10 us, device >= 2x faster); and the graph's device
 * time beside its floor, the sum of the step's kernels' own times. */
#include "bench.h"
#include "mlp_block.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/graph.h>

#define STEP_LAYERS 12
#define STEP_HIDDEN 256
#define STEP_FFN 1024
#define STEP_TOKENS 64

struct step {
  tecore_seq_t *seq;
  struct tecore_tensor x, y, dy;
  struct tecore_optim_tensor *ot;
  size_t np;
  tecore_devptr_t state, noop;
  tecore_devptr_t *owned;   /* every allocation of the optimizer, to free */
  size_t nowned;
};

static tecore_result_t step_alloc(struct step *st, size_t bytes, tecore_devptr_t *p) {
  tecore_result_t r = tecore_mem_alloc(bytes, p);
  if (r == TECORE_SUCCESS) st->owned[st->nowned++] = *p;
  return r;
}

/* One training step on s (no waiting, so that a capture can record it). */
static tecore_result_t step_queue(struct step *st, tecore_stream_t s) {
  tecore_result_t r;
  if ((r = tecore_seq_zero_grad(st->seq, s))) return r;
  /* st->noop stays 0 (set once by step_build): no memset node per step */
  if ((r = tecore_seq_forward(st->seq, &st->x, &st->y, st->noop, s))) return r;
  if ((r = tecore_seq_backward(st->seq, &st->dy, NULL, s))) return r;
  if ((r = tecore_seq_update_scales(st->seq, s))) return r;
  struct tecore_adam_config ac = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.01, .flags = TECORE_ADAM_W,
                                  .state = st->state};
  return tecore_adam_step(st->ot, st->np, &ac, 0, 0, s);
}

static tecore_result_t step_build(struct tb_ctx *c, struct step *st) {
  tecore_result_t r;
  struct tecore_seq_config cfg = {.rows = STEP_TOKENS, .features = STEP_HIDDEN,
                                  .dtype = TECORE_DTYPE_BF16, .seed = 7};
  if ((r = tecore_seq_create(&cfg, &st->seq))) return r;
  for (int l = 0; l < STEP_LAYERS; l++)
    if ((r = te_tools_add_mlp_block(st->seq, l, STEP_HIDDEN, STEP_FFN))) return r;
  struct tecore_recipe recipe;
  if ((r = tecore_recipe_init(&recipe, TECORE_RECIPE_DELAYED)) ||
      (r = tecore_seq_set_recipe(st->seq, &recipe, c->s)) || (r = tecore_seq_build(st->seq, c->s)))
    return r;
  if ((r = tecore_seq_params(st->seq, NULL, 0, &st->np))) return r;
  struct tecore_seq_param *p = calloc(st->np, sizeof *p);
  st->ot = calloc(st->np, sizeof *st->ot);
  st->owned = calloc(3 * st->np + 8, sizeof *st->owned);
  if (!p || !st->ot || !st->owned) {
    free(p);
    return TECORE_ERR_NOMEM;
  }
  r = tecore_seq_params(st->seq, p, st->np, &st->np);
  for (size_t i = 0; i < st->np && r == TECORE_SUCCESS; i++) {
    size_t k = tecore_tensor_numel(&p[i].value);
    struct tecore_optim_tensor *t = &st->ot[i];
    t->numel = k;
    t->grad = p[i].grad.data;
    t->grad_dtype = TECORE_DTYPE_F32;
    t->model = p[i].value.data;
    t->model_dtype = TECORE_DTYPE_BF16;
    if ((r = step_alloc(st, k * 4, &t->param)) || (r = step_alloc(st, k * 4, &t->exp_avg)) ||
        (r = step_alloc(st, k * 4, &t->exp_avg_sq)))
      break;
    /* master weights from the model's, moments zero */
    if ((r = tecore_fill(t->param, TECORE_DTYPE_F32, k, 0.01, c->s)) ||
        (r = tecore_memset_d32_async(t->exp_avg, 0, k, c->s)) ||
        (r = tecore_memset_d32_async(t->exp_avg_sq, 0, k, c->s)))
      break;
  }
  free(p);
  if (r) return r;
  size_t n = (size_t)STEP_TOKENS * STEP_HIDDEN, shape[2] = {STEP_TOKENS, STEP_HIDDEN};
  tecore_devptr_t xd, yd, dyd;
  struct tecore_optim_state s0 = {0, 1e-4};
  if ((r = step_alloc(st, n * 2, &xd)) || (r = step_alloc(st, n * 2, &yd)) ||
      (r = step_alloc(st, n * 2, &dyd)) || (r = step_alloc(st, sizeof s0, &st->state)) ||
      (r = step_alloc(st, 4, &st->noop)) || (r = tecore_memset_d32_async(st->noop, 0, 1, c->s)) ||
      (r = tecore_fill(xd, TECORE_DTYPE_BF16, n, 0.5, c->s)) ||
      (r = tecore_fill(dyd, TECORE_DTYPE_BF16, n, 1e-3, c->s)) ||
      (r = tecore_memcpy_async(st->state, (tecore_devptr_t)(uintptr_t)&s0, sizeof s0, c->s)) ||
      (r = tecore_tensor_init(&st->x, TECORE_DTYPE_BF16, 2, shape, xd)) ||
      (r = tecore_tensor_init(&st->y, TECORE_DTYPE_BF16, 2, shape, yd)) ||
      (r = tecore_tensor_init(&st->dy, TECORE_DTYPE_BF16, 2, shape, dyd)))
    return r;
  return tecore_stream_synchronize(c->s);
}

static void step_free(struct step *st) {
  if (st->seq) tecore_seq_destroy(st->seq);
  for (size_t i = 0; i < st->nowned; i++) tecore_mem_free(st->owned[i]);
  free(st->owned);
  free(st->ot);
}

/* Host microseconds to queue each of reps steps (graph or eager), then a
 * synchronize per step so the queue never fills; returns the median. */
static double host_us(struct tb_ctx *c, struct step *st, tegraph_graph_t *g, int reps,
                      double *v) {
  for (int i = 0; i < reps; i++) {
    double t0 = tb_now_us();
    int bad = g ? tegraph_graph_launch(g, c->s) != TEGRAPH_SUCCESS
                : step_queue(st, c->s) != TECORE_SUCCESS;
    v[i] = tb_now_us() - t0;
    if (bad || tecore_stream_synchronize(c->s)) return -1;
  }
  return tb_median(v, reps);
}

/* The floor of the step's device time: the sum of its kernels' own times
 * (te/profile.h events around each launch of one eager step), in ms;
 * -1 when it cannot be taken.  Gaps between kernels are what a graph can
 * remove; the kernels themselves it cannot. */
static double kernel_sum_ms(struct tb_ctx *c, struct step *st) {
  double us = -1;
  if (tecore_stream_synchronize(c->s) || tecore_profile_start()) return -1;
  tecore_result_t r = step_queue(st, c->s);
  tecore_profile_stop();
  if (tecore_profile_report(-1, &us) || r) return -1;
  return us / 1e3;
}

/* Device milliseconds per step over reps back-to-back steps. */
static double device_ms(struct tb_ctx *c, struct step *st, tegraph_graph_t *g, int reps) {
  if (tecore_event_record(c->e0, c->s)) return -1;
  for (int i = 0; i < reps; i++) {
    int bad = g ? tegraph_graph_launch(g, c->s) != TEGRAPH_SUCCESS
                : step_queue(st, c->s) != TECORE_SUCCESS;
    if (bad) return -1;
  }
  float ms = 0;
  if (tecore_event_record(c->e1, c->s) || tecore_event_synchronize(c->e1) ||
      tecore_event_elapsed(&ms, c->e0, c->e1))
    return -1;
  return ms / reps;
}

/* "N nodes: K kernel, ..." -- what the graph holds besides kernels (the
 * nodes that keep a launch off the driver's straight-line fast path). */
static void node_census(tegraph_graph_t *g, char *out, size_t len) {
  static const char *const names[] = {"kernel", "memcpy", "memset", "host", "child graph",
                                      "empty", "event wait", "event record", "sema signal",
                                      "sema wait", "mem alloc", "mem free", "mem op",
                                      "conditional"};
  enum { NT = sizeof names / sizeof names[0] };
  size_t n = 0, count[NT + 1] = {0};
  tecore_graph_t tg = NULL;
  struct tecore_graph_node_desc *d = NULL;
  snprintf(out, len, "? nodes");
  if (tegraph_graph_handles(g, &tg, NULL) || tecore_graph_nodes(tg, NULL, 0, &n) ||
      !(d = calloc(n ? n : 1, sizeof *d)) || tecore_graph_nodes(tg, d, n, &n)) {
    free(d);
    return;
  }
  for (size_t i = 0; i < n; i++) count[(unsigned)d[i].type < NT ? d[i].type : NT]++;
  free(d);
  int k = snprintf(out, len, "%zu nodes:", n);
  for (int t = 0; t <= NT && k > 0 && (size_t)k < len; t++)
    if (count[t])
      k += snprintf(out + k, len - (size_t)k, " %zu %s", count[t], t < NT ? names[t] : "other");
}

int tb_graph_step(struct tb_ctx *c) {
  struct step st;
  memset(&st, 0, sizeof st);
  tegraph_graph_t *g = NULL;
  int reps = c->iters < 5 ? 5 : c->iters, rc = -1;
  double *v = calloc((size_t)reps, sizeof *v);
  size_t nodes = 0;
  if (!v || step_build(c, &st)) goto fail;
  /* warm up eagerly (algorithm choices, lazy buffers), then capture once */
  for (int i = 0; i < 2; i++)
    if (step_queue(&st, c->s)) goto fail;
  if (tecore_stream_synchronize(c->s) ||
      tegraph_graph_create(TEGRAPH_INSTANTIATE_UPLOAD, &g) != TEGRAPH_SUCCESS ||
      tegraph_graph_begin_capture(g, c->s, TECORE_CAPTURE_THREAD_LOCAL, 0) != TEGRAPH_SUCCESS)
    goto fail;
  if (step_queue(&st, c->s)) {
    tecore_graph_t dead = NULL;
    (void)tecore_stream_end_capture(c->s, &dead);
    if (dead) tecore_graph_destroy(dead);
    goto fail;
  }
  if (tegraph_graph_end_capture(g, NULL) != TEGRAPH_SUCCESS ||
      tegraph_graph_instantiate(g, c->s) != TEGRAPH_SUCCESS ||
      tegraph_graph_node_count(g, &nodes) != TEGRAPH_SUCCESS || tecore_stream_synchronize(c->s))
    goto fail;
  double hg = host_us(c, &st, g, reps, v), he = host_us(c, &st, NULL, reps, v);
  double dg = device_ms(c, &st, g, reps), de = device_ms(c, &st, NULL, reps);
  double floor_ms = kernel_sum_ms(c, &st);
  if (hg < 0 || he < 0 || dg < 0 || de < 0 || floor_ms < 0) goto fail;
  char shape[64];
  snprintf(shape, sizeof shape, "%dx(%d,%d) t%d", STEP_LAYERS, STEP_HIDDEN, STEP_FFN,
           STEP_TOKENS);
  char note[256];
  node_census(g, note, sizeof note);
  (void)nodes;
  struct tb_row r1 = {.name = "FP8 train step graph, host", .shape = shape, .time = hg,
                      .unit = "us", .peer = "eager launches", .peer_time = he,
                      .target = "<= 10 us", .met = hg <= 10.0, .note = note};
  tb_row(c, &r1);
  struct tb_row r2 = {.name = "FP8 train step graph, device", .shape = shape, .time = dg,
                      .unit = "ms", .peer = "eager step", .peer_time = de, .target = ">= 2x",
                      .met = de / dg >= 2.0};
  tb_row(c, &r2);
  char fnote[64];
  snprintf(fnote, sizeof fnote, "floor: sum of the step's kernels run eagerly");
  struct tb_row r3 = {.name = "FP8 train step graph, device/floor", .shape = shape, .time = dg,
                      .unit = "ms", .peer = "kernel sum", .peer_time = floor_ms,
                      .note = fnote};
  tb_row(c, &r3);
  fflush(stdout);
  rc = 0;
  goto out;
fail:
  fprintf(stderr, "te-bench: graph: training step failed: %s\n", tecore_last_error());
  c->failed = 1;
out:
  tecore_stream_synchronize(c->s);
  if (g) tegraph_graph_destroy(g);
  step_free(&st);
  free(v);
  return rc;
}
