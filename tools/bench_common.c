/* SPDX-License-Identifier: Apache-2.0 */
/* bench_common.c -- te-bench's harness: set-up, the copy-bandwidth floor,
 * event timing, random inputs and the report line. */
#include "bench.h"
#include <time.h>
#include "common/convert.h"
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct copy_arg {
  tecore_devptr_t dst, src;
  size_t bytes;
};

static tecore_result_t copy_body(struct tb_ctx *c, void *arg) {
  struct copy_arg *a = arg;
  return tecore_memcpy_async(a->dst, a->src, a->bytes, c->s);
}

double tb_time(struct tb_ctx *c, tb_body body, void *arg) {
  tecore_result_t r = TECORE_SUCCESS;
  for (int i = 0; i < 3 && r == TECORE_SUCCESS; i++) r = body(c, arg);
  if (r == TECORE_SUCCESS) r = tecore_event_record(c->e0, c->s);
  for (int i = 0; i < c->iters && r == TECORE_SUCCESS; i++) r = body(c, arg);
  if (r == TECORE_SUCCESS) r = tecore_event_record(c->e1, c->s);
  if (r == TECORE_SUCCESS) r = tecore_event_synchronize(c->e1);
  float ms = 0;
  if (r == TECORE_SUCCESS) r = tecore_event_elapsed(&ms, c->e0, c->e1);
  if (r != TECORE_SUCCESS) {
    fprintf(stderr, "te-bench: timing failed: %s (%s)\n", tecore_strerror(r), tecore_last_error());
    c->failed = 1;
    return -1;
  }
  return ms / c->iters;
}

void tb_report(struct tb_ctx *c, const char *name, const char *shape, double ms, double bytes,
               double target_pct) {
  if (ms <= 0) return;
  char target[32];
  snprintf(target, sizeof target, ">= %.0f%% of copy", target_pct);
  struct tb_row r = {.name = name, .shape = shape, .time = ms, .unit = "ms",
                     .rate = bytes / (ms * 1e-3) / 1e9, .rate_unit = "GB/s",
                     .peer = "copy floor", .peer_time = bytes / (c->copy_gbs * 1e9) * 1e3,
                     .target = target_pct > 0 ? target : NULL};
  r.met = 100.0 * r.peer_time / ms >= target_pct;
  tb_row(c, &r);
}

tecore_devptr_t tb_alloc_random(struct tb_ctx *c, size_t count, tecore_dtype_t dtype) {
  return tb_alloc_random_seeded(c, count, dtype, 0);
}

tecore_devptr_t tb_alloc_random_seeded(struct tb_ctx *c, size_t count, tecore_dtype_t dtype,
                                       uint64_t seed) {
  size_t es = tecore_dtype_size(dtype), bytes = count * es;
  tecore_devptr_t d = 0;
  void *h = malloc(bytes);
  if (!h || tecore_mem_alloc(bytes, &d) != TECORE_SUCCESS) {
    fprintf(stderr, "te-bench: cannot allocate %zu bytes: %s\n", bytes, tecore_last_error());
    free(h);
    c->failed = 1;
    return 0;
  }
  /* seed 0: the stream tb_alloc_random always drew (a function of the
   * count alone: two buffers of one size hold the same data) */
  uint64_t x = 0x9e3779b97f4a7c15ull ^ (uint64_t)count ^ (seed * 0xbf58476d1ce4e5b9ull);
  for (size_t i = 0; i < count; i++) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    float v = (float)((double)(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    if (dtype == TECORE_DTYPE_F32)
      ((float *)h)[i] = v;
    else if (dtype == TECORE_DTYPE_BF16)
      ((uint16_t *)h)[i] = te_f32_to_bf16(v);
    else if (dtype == TECORE_DTYPE_F16)
      ((uint16_t *)h)[i] = te_f32_to_f16(v);
    else
      ((uint8_t *)h)[i * es] = (uint8_t)x;
  }
  if (tecore_memcpy(d, (tecore_devptr_t)(uintptr_t)h, bytes) != TECORE_SUCCESS) c->failed = 1;
  free(h);
  return d;
}

int tb_setup(struct tb_ctx *c) {
  if (tecore_init() || tecore_backend(&c->backend) ||
      tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &c->s) ||
      tecore_event_create(0, &c->e0) || tecore_event_create(0, &c->e1)) {
    fprintf(stderr, "te-bench: set-up failed: %s\n", tecore_last_error());
    return 1;
  }
  tb_begin(c);
  tb_progress(c, "the copy floor");
  /* the floor: a large device-to-device copy (reads + writes counted) */
  struct copy_arg a = {.bytes = (size_t)c->mb << 20};
  if (tecore_mem_alloc(a.bytes, &a.src) || tecore_mem_alloc(a.bytes, &a.dst) ||
      tecore_memset_d8_async(a.src, 0x3c, a.bytes, c->s)) {
    fprintf(stderr, "te-bench: cannot allocate the copy buffers: %s\n", tecore_last_error());
    return 1;
  }
  double ms = tb_time(c, copy_body, &a);
  tecore_mem_free(a.src);
  tecore_mem_free(a.dst);
  if (ms <= 0) return 1;
  c->copy_gbs = 2.0 * a.bytes / (ms * 1e-3) / 1e9;
  char shape[32];
  snprintf(shape, sizeof shape, "%d MiB", c->mb);
  c->section = "copy";
  struct tb_row r = {.name = "copy d2d", .shape = shape, .time = ms, .unit = "ms",
                     .rate = c->copy_gbs, .rate_unit = "GB/s",
                     .note = "the floor of the copy-bound rows below"};
  tb_row(c, &r);
  return 0;
}

void tb_teardown(struct tb_ctx *c) {
  tecore_event_destroy(c->e0);
  tecore_event_destroy(c->e1);
  tecore_stream_destroy(c->s);
}

/* ---- elementwise section ---- */

struct ew_arg {
  tecore_devptr_t x, y, z;
  size_t n;
  tecore_dtype_t dt;
};

static tecore_result_t fill_body(struct tb_ctx *c, void *arg) {
  struct ew_arg *a = arg;
  return tecore_fill(a->z, a->dt, a->n, 0.5, c->s);
}
static tecore_result_t scale_add_body(struct tb_ctx *c, void *arg) {
  struct ew_arg *a = arg;
  return tecore_scale_add(a->z, a->x, 0.5f, a->y, 2.0f, a->dt, a->n, c->s);
}

void tb_elementwise(struct tb_ctx *c) {
  c->section = "elementwise";
  tb_progress(c, "fill and scale_add");
  tecore_dtype_t dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16};
  for (size_t k = 0; k < 2; k++) {
    struct ew_arg a = {.dt = dts[k]};
    size_t es = tecore_dtype_size(a.dt);
    a.n = ((size_t)c->mb << 20) / es;
    a.x = tb_alloc_random(c, a.n, a.dt);
    a.y = tb_alloc_random(c, a.n, a.dt);
    a.z = tb_alloc_random(c, a.n, a.dt);
    if (a.x && a.y && a.z) {
      char shape[32], name[64];
      snprintf(shape, sizeof shape, "%zu", a.n);
      snprintf(name, sizeof name, "fill %s", tecore_dtype_name(a.dt));
      tb_report(c, name, shape, tb_time(c, fill_body, &a), (double)a.n * es, 0);
      snprintf(name, sizeof name, "scale_add %s", tecore_dtype_name(a.dt));
      tb_report(c, name, shape, tb_time(c, scale_add_body, &a), 3.0 * a.n * es, 0);
    }
    tecore_mem_free(a.x);
    tecore_mem_free(a.y);
    tecore_mem_free(a.z);
  }
}

double tb_now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1e6 + ts.tv_nsec / 1e3;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double tb_median(double *v, int n) {
  qsort(v, (size_t)n, sizeof *v, cmp_double);
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
