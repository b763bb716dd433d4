/* SPDX-License-Identifier: Apache-2.0
 * bench_launch.c -- te-bench's graph launch costs (part of --graph): what
 * makes a graph's host launch time grow with its nodes.
 *
 *   - a straight line of 100, 400 and 1000 small kernels (dependent
 *     scale_adds over 256 floats), captured and instantiated: host time
 *     per launch (median of --iters launches, each followed by a
 *     synchronize, CLOCK_MONOTONIC), and device time per launch (events
 *     around --iters back-to-back launches) beside its floor, the sum of
 *     the same kernels' own times run eagerly (te/profile.h);
 *   - 400 nodes again where every 10th kernel is replaced by another kind
 *     of node -- a memset, a 4-byte copy to pinned host memory -- or runs
 *     on a second stream (a fork and a join each time): host time per
 *     launch beside the 400-kernel line's, so each kind's cost shows;
 *     and the memsets and copies again after libtegraph's rewrite into
 *     te_memset / te_copy kernel nodes (tecore_graph_memsets_to_kernels,
 *     tecore_graph_copies_to_kernels), which is what its graphs launch;
 *   - each of those again launched from the device
 *     (TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, tecore_graph_launch_device:
 *     the host queues one kernel node), the lines up to 2000 kernels (a
 *     te-gpt 1.3B step holds 2112): host time beside the host launch's,
 *     and device time per launch beside the host-launched graph's;
 *   - the 2000-kernel line queued to a graph chain after the same wait
 *     for the device as the rows above (tecore_graph_chain_*: te-gpt's
 *     default), host time beside the host launch's.
 * The target is the issue's: a step graph launches in <= 10 us. */
#include "bench.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define LN_ELEMS 256
#define LN_EVERY 10

enum variant { V_KERNELS, V_MEMSET, V_D2H, V_FORK, V_MEMSET_K, V_D2H_K, V_COUNT };
static const char *const v_name[V_COUNT] = {
    "kernels only", "every 10th a memset", "every 10th a copy to pinned host",
    "every 10th on a side stream (fork/join)", "every 10th a memset, as te_memset kernels",
    "every 10th a copy to pinned host, as te_copy kernels"};

struct launch_bufs {
  tecore_devptr_t a, b, scratch;
  float *host;               /* pinned, one word */
  tecore_stream_t side;
  tecore_event_t fork, join;
};

/* Node i of the line on stream s (or its variant's replacement). */
static tecore_result_t line_node(struct tb_ctx *c, const struct launch_bufs *lb, int i,
                                 enum variant v) {
  tecore_devptr_t dst = i & 1 ? lb->a : lb->b, src = i & 1 ? lb->b : lb->a;
  int odd = i % LN_EVERY == LN_EVERY - 1;
  if (odd && (v == V_MEMSET || v == V_MEMSET_K))
    return tecore_memset_d32_async(lb->scratch, (uint32_t)i, LN_ELEMS, c->s);
  if (odd && (v == V_D2H || v == V_D2H_K))
    return tecore_memcpy_async((tecore_devptr_t)(uintptr_t)lb->host, src, 4, c->s);
  float alpha = 1.0f + 1e-4f * (float)(i % 7);
  if (odd && v == V_FORK) {
    TB_CHECK(tecore_event_record(lb->fork, c->s));
    TB_CHECK(tecore_stream_wait_event(lb->side, lb->fork));
    TB_CHECK(tecore_scale_add(lb->scratch, src, alpha, src, 0.0f, TECORE_DTYPE_F32, LN_ELEMS,
                              lb->side));
    TB_CHECK(tecore_event_record(lb->join, lb->side));
    return tecore_stream_wait_event(c->s, lb->join);
  }
  return tecore_scale_add(dst, src, alpha, src, 0.0f, TECORE_DTYPE_F32, LN_ELEMS, c->s);
}

static tecore_result_t line_queue(struct tb_ctx *c, const struct launch_bufs *lb, int n,
                                  enum variant v) {
  for (int i = 0; i < n; i++) TB_CHECK(line_node(c, lb, i, v));
  return TECORE_SUCCESS;
}

/* Captures and instantiates the line (uploaded, as libtegraph does);
 * dev: for launch from the device. */
static tecore_result_t line_graph(struct tb_ctx *c, const struct launch_bufs *lb, int n,
                                  enum variant v, int dev, tecore_graph_exec_t *x) {
  tecore_graph_t g = NULL;
  TB_CHECK(tecore_stream_begin_capture(c->s, TECORE_CAPTURE_THREAD_LOCAL));
  tecore_result_t r = line_queue(c, lb, n, v), r2 = tecore_stream_end_capture(c->s, &g);
  if (r == TECORE_SUCCESS) r = r2;
  if (r == TECORE_SUCCESS && v == V_MEMSET_K) r = tecore_graph_memsets_to_kernels(g, NULL);
  if (r == TECORE_SUCCESS && v == V_D2H_K) r = tecore_graph_copies_to_kernels(g, 4, 4, NULL);
  if (r == TECORE_SUCCESS)
    r = tecore_graph_instantiate_with_flags(x, g, dev ? TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH : 0,
                                            NULL);
  if (g) tecore_graph_destroy(g);
  if (r == TECORE_SUCCESS) r = tecore_graph_upload(*x, c->s);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(c->s);
  return r;
}

static tecore_result_t launch(tecore_graph_exec_t x, int dev, tecore_stream_t s) {
  return dev ? tecore_graph_launch_device(x, s) : tecore_graph_launch(x, s);
}

/* Median host microseconds of one launch; device milliseconds per launch;
 * dev: launched from the device. */
static tecore_result_t line_times(struct tb_ctx *c, tecore_graph_exec_t x, int dev, double *v,
                                  int reps, double *host_us, double *dev_ms) {
  for (int i = 0; i < 3; i++) TB_CHECK(launch(x, dev, c->s));
  TB_CHECK(tecore_stream_synchronize(c->s));
  for (int i = 0; i < reps; i++) {
    double t0 = tb_now_us();
    tecore_result_t r = launch(x, dev, c->s);
    v[i] = tb_now_us() - t0;
    TB_CHECK(r);
    TB_CHECK(tecore_stream_synchronize(c->s));
  }
  *host_us = tb_median(v, reps);
  TB_CHECK(tecore_event_record(c->e0, c->s));
  for (int i = 0; i < reps; i++) TB_CHECK(launch(x, dev, c->s));
  TB_CHECK(tecore_event_record(c->e1, c->s));
  TB_CHECK(tecore_event_synchronize(c->e1));
  float ms = 0;
  TB_CHECK(tecore_event_elapsed(&ms, c->e0, c->e1));
  *dev_ms = ms / reps;
  return TECORE_SUCCESS;
}

/* The floor: the line's kernels run eagerly, each one's own time summed. */
static tecore_result_t line_floor(struct tb_ctx *c, const struct launch_bufs *lb, int n,
                                  double *us) {
  TB_CHECK(tecore_stream_synchronize(c->s));
  TB_CHECK(tecore_profile_start());
  tecore_result_t r = line_queue(c, lb, n, V_KERNELS);
  tecore_profile_stop();
  TB_CHECK(tecore_profile_report(-1, us));
  return r;
}

/* What a launch costs where te-gpt launches its step: the 2000-kernel
 * line launched by the host and from the device right after the host
 * waited for ~10 ms of device work (a training step's wait), one small
 * kernel launched eagerly after the same wait, and the line launched while
 * that work still runs (the host ahead of the device).  Medians of 7;
 * TECORE_CUDA_SYNC says how the host waits. */
#define WAIT_FILLS 400
#define WAIT_BYTES (64u << 20)
enum wait_mode { W_HOST, W_DEVICE, W_EAGER, W_BUSY_HOST, W_BUSY_DEVICE, W_COUNT };
static const char *const w_name[W_COUNT] = {
    "graph launch host, waited", "graph launch from device, waited", "one kernel eager, waited",
    "graph launch host, device busy", "graph launch from device, busy"};

static tecore_result_t after_wait(struct tb_ctx *c, const struct launch_bufs *lb,
                                  double *host_waited) {
  double v[7], med[W_COUNT] = {0};
  tecore_devptr_t big = 0;
  /* vdev: a token wait (its figures are not speed) */
  const size_t bytes = c->speed ? WAIT_BYTES : 4096;
  const int fills = c->speed ? WAIT_FILLS : 4;
  TB_CHECK(tecore_mem_alloc(bytes, &big));
  tecore_result_t r = TECORE_SUCCESS;
  const char *pol = getenv("TECORE_CUDA_SYNC") ? getenv("TECORE_CUDA_SYNC") : "auto";
  for (int m = 0; m < W_COUNT && r == TECORE_SUCCESS; m++) {
    const int dev = m == W_DEVICE || m == W_BUSY_DEVICE, busy = m >= W_BUSY_HOST;
    tecore_graph_exec_t x = NULL;
    if (m != W_EAGER) {
      r = line_graph(c, lb, 2000, V_KERNELS, dev, &x);
      if (r == TECORE_SUCCESS) r = launch(x, dev, c->s);
    }
    if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(c->s);
    double busy_ms = 0;
    int k = 0;
    for (; k < (int)(sizeof v / sizeof v[0]) && r == TECORE_SUCCESS; k++) {
      double t0 = tb_now_us();
      for (int i = 0; i < fills && r == TECORE_SUCCESS; i++)
        r = tecore_fill(big, TECORE_DTYPE_F32, bytes / 4, (double)i, c->s);
      if (r == TECORE_SUCCESS && !busy) r = tecore_stream_synchronize(c->s);
      double t1 = tb_now_us();
      busy_ms += (t1 - t0) / 1e3;
      if (r == TECORE_SUCCESS)
        r = m == W_EAGER ? tecore_fill(lb->scratch, TECORE_DTYPE_F32, 1, 1.0, c->s)
                         : launch(x, dev, c->s);
      v[k] = tb_now_us() - t1;
      if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(c->s);
    }
    if (x) tecore_graph_exec_destroy(x);
    if (r != TECORE_SUCCESS) break;
    med[m] = tb_median(v, k);
    char note[160];
    if (busy)
      snprintf(note, sizeof note, "queued behind %d fills still running (TECORE_CUDA_SYNC %s)",
               fills, pol);
    else
      snprintf(note, sizeof note, "after a %.0f ms wait for the device (TECORE_CUDA_SYNC %s)",
               busy_ms / k, pol);
    struct tb_row h = {.name = w_name[m], .shape = m == W_EAGER ? "1 kernel" : "2000 kernel nodes",
                       .time = med[m], .unit = "us", .peer = m ? "host launch, waited" : NULL,
                       .peer_time = m ? med[W_HOST] : 0, .target = m == W_EAGER ? NULL : "<= 10 us",
                       .met = med[m] <= 10.0, .note = note};
    tb_row(c, &h);
  }
  tecore_mem_free(big);
  *host_waited = med[W_HOST];
  return r;
}

/* The same wait, then the 2000-kernel line queued to a graph chain
 * (tecore_graph_chain_*: its launcher kernel waits on the device for the
 * host's ticket and launches the line; no driver call) on a stream of its
 * own, as te-gpt queues its steps; the chain's wait between. */
static tecore_result_t chain_after_wait(struct tb_ctx *c, const struct launch_bufs *lb,
                                        double host_waited) {
  double v[7];
  const size_t bytes = c->speed ? WAIT_BYTES : 4096;
  const int fills = c->speed ? WAIT_FILLS : 4;
  tecore_devptr_t big = 0;
  tecore_stream_t cs = NULL;
  tecore_graph_exec_t x = NULL;
  tecore_graph_chain_t ch = NULL;
  uint64_t t = 0;
  double waited_ms = 0;
  int k = 0;
  TB_CHECK(tecore_mem_alloc(bytes, &big));
  tecore_result_t r = tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &cs);
  if (r == TECORE_SUCCESS) r = line_graph(c, lb, 2000, V_KERNELS, 1, &x);
  if (r == TECORE_SUCCESS) r = tecore_graph_chain_create(&x, 1, cs, &ch);
  if (r == TECORE_SUCCESS) r = tecore_graph_chain_queue(ch, 0, &t);   /* starts the launcher */
  if (r == TECORE_SUCCESS) r = tecore_graph_chain_wait(ch, t);
  for (; k < (int)(sizeof v / sizeof v[0]) && r == TECORE_SUCCESS; k++) {
    double t0 = tb_now_us();
    for (int i = 0; i < fills && r == TECORE_SUCCESS; i++)
      r = tecore_fill(big, TECORE_DTYPE_F32, bytes / 4, (double)i, c->s);
    if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(c->s);
    double t1 = tb_now_us();
    waited_ms += (t1 - t0) / 1e3;
    if (r == TECORE_SUCCESS) r = tecore_graph_chain_queue(ch, 0, &t);
    v[k] = tb_now_us() - t1;
    if (r == TECORE_SUCCESS) r = tecore_graph_chain_wait(ch, t);
  }
  struct tecore_graph_chain_counts n = {0};
  if (ch) {
    (void)tecore_graph_chain_stats(ch, &n);
    tecore_result_t q = tecore_graph_chain_destroy(ch);
    if (r == TECORE_SUCCESS) r = q;
  }
  if (x) tecore_graph_exec_destroy(x);
  if (cs) tecore_stream_destroy(cs);
  tecore_mem_free(big);
  TB_CHECK(r);
  char note[160];
  snprintf(note, sizeof note, "tecore_graph_chain_queue after a %.0f ms wait for the device; "
           "%llu launcher start(s) for %llu tickets", waited_ms / k,
           (unsigned long long)n.starts, (unsigned long long)n.queued);
  struct tb_row h = {.name = "graph queued to a chain, waited", .shape = "2000 kernel nodes",
                     .time = tb_median(v, k), .unit = "us", .peer = "host launch, waited",
                     .peer_time = host_waited, .target = "<= 10 us",
                     .met = tb_median(v, k) <= 10.0, .note = note};
  tb_row(c, &h);
  return TECORE_SUCCESS;
}

static tecore_result_t launch_run(struct tb_ctx *c, struct launch_bufs *lb, double *v, int reps) {
  static const int sizes[] = {100, 400, 1000, 2000};
  double host400 = 0, hostv[V_COUNT] = {0};
  char shape[48], note[128];
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    int n = sizes[k];
    double host = 0, dev = 0, floor_us = 0;
    for (int d = 0; d < 2; d++) {
      tecore_graph_exec_t x = NULL;
      double h = 0, t = 0;
      tecore_result_t r = line_graph(c, lb, n, V_KERNELS, d, &x);
      if (r == TECORE_SUCCESS) r = line_times(c, x, d, v, reps, &h, &t);
      if (x) tecore_graph_exec_destroy(x);
      TB_CHECK(r);
      snprintf(shape, sizeof shape, "%d kernel nodes", n);
      if (!d) {
        host = h, dev = t;
        TB_CHECK(line_floor(c, lb, n, &floor_us));
        if (n == 400) host400 = host;
        snprintf(note, sizeof note, "%.3f us a node", host / n);
        struct tb_row hr = {.name = "graph launch host, kernel line", .shape = shape,
                            .time = host, .unit = "us", .target = "<= 10 us",
                            .met = host <= 10.0, .note = note};
        tb_row(c, &hr);
        struct tb_row dr = {.name = "graph device/floor, kernel line", .shape = shape,
                            .time = dev * 1e3, .unit = "us", .peer = "kernel sum",
                            .peer_time = floor_us,
                            .note = "floor: the same kernels' own times, run eagerly"};
        tb_row(c, &dr);
        continue;
      }
      struct tb_row hr = {.name = "graph launch from device, host time", .shape = shape,
                          .time = h, .unit = "us", .peer = "host launch", .peer_time = host,
                          .target = "<= 10 us", .met = h <= 10.0,
                          .note = "tecore_graph_launch_device: one kernel node queued"};
      tb_row(c, &hr);
      struct tb_row dr = {.name = "graph launch from device, device", .shape = shape,
                          .time = t * 1e3, .unit = "us", .peer = "host-launched",
                          .peer_time = dev * 1e3,
                          .note = "device time per launch, back to back"};
      tb_row(c, &dr);
    }
  }
  double host_waited = 0;
  TB_CHECK(after_wait(c, lb, &host_waited));
  TB_CHECK(chain_after_wait(c, lb, host_waited));
  for (int d = 0; d < 2; d++)
    for (int v0 = V_MEMSET; v0 < V_COUNT; v0++) {
      tecore_graph_exec_t x = NULL;
      double host = 0, dev = 0;
      tecore_result_t r = line_graph(c, lb, 400, (enum variant)v0, d, &x);
      if (r == TECORE_SUCCESS) r = line_times(c, x, d, v, reps, &host, &dev);
      if (x) tecore_graph_exec_destroy(x);
      TB_CHECK(r);
      snprintf(shape, sizeof shape, "400 nodes");
      if (!d) hostv[v0] = host;
      struct tb_row h = {.name = d ? "graph launch from device, mixed" : "graph launch host, mixed",
                         .shape = shape, .time = host, .unit = "us",
                         .peer = d ? "host launch" : "400 kernels",
                         .peer_time = d ? hostv[v0] : host400, .target = "<= 10 us",
                         .met = host <= 10.0, .note = v_name[v0]};
      tb_row(c, &h);
    }
  return TECORE_SUCCESS;
}

void tb_graph_launch(struct tb_ctx *c) {
  int reps = c->iters < 5 ? 5 : c->iters;
  double *v = calloc((size_t)reps, sizeof *v);
  struct launch_bufs lb;
  memset(&lb, 0, sizeof lb);
  tecore_result_t r = v ? TECORE_SUCCESS : TECORE_ERR_NOMEM;
  if (r == TECORE_SUCCESS) r = tecore_mem_alloc(LN_ELEMS * 4, &lb.a);
  if (r == TECORE_SUCCESS) r = tecore_mem_alloc(LN_ELEMS * 4, &lb.b);
  if (r == TECORE_SUCCESS) r = tecore_mem_alloc(LN_ELEMS * 4, &lb.scratch);
  if (r == TECORE_SUCCESS) r = tecore_mem_alloc_host(4, (void **)&lb.host);
  if (r == TECORE_SUCCESS) r = tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &lb.side);
  if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &lb.fork);
  if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &lb.join);
  if (r == TECORE_SUCCESS) r = tecore_fill(lb.a, TECORE_DTYPE_F32, LN_ELEMS, 1.0, c->s);
  if (r == TECORE_SUCCESS) r = tecore_fill(lb.b, TECORE_DTYPE_F32, LN_ELEMS, 1.0, c->s);
  if (r == TECORE_SUCCESS) {
    tb_info(c, "graph launch: a line of small kernels, then 400 nodes with other kinds mixed in");
    r = launch_run(c, &lb, v, reps);
  }
  if (r != TECORE_SUCCESS) {
    fprintf(stderr, "te-bench: graph: launch costs failed: %s\n", tecore_last_error());
    c->failed = 1;
  }
  tecore_stream_synchronize(c->s);
  if (lb.side) tecore_stream_synchronize(lb.side), tecore_stream_destroy(lb.side);
  if (lb.fork) tecore_event_destroy(lb.fork);
  if (lb.join) tecore_event_destroy(lb.join);
  if (lb.host) tecore_mem_free_host(lb.host);
  if (lb.a) tecore_mem_free(lb.a);
  if (lb.b) tecore_mem_free(lb.b);
  if (lb.scratch) tecore_mem_free(lb.scratch);
  free(v);
}
