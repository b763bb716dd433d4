/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_quantize_speed.c -- a quick throughput check of the FP8 kernels
 * against the device-to-device copy bandwidth measured in the same run
 * (te-bench is the full tool; this is the kernel author's check).
 *   cc -O2 -I<build>/libtecore -Ilibtecore fp8_quantize_speed.c -ltecore
 *   TE_DEVICE=cuda ./fp8_quantize_speed [rows cols]
 * Prints per kernel: time, bytes moved (the minimum: every input byte read
 * once, every output byte written once; two reads for current scaling),
 * GB/s, and that as a percentage of the copy's GB/s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/core.h>

#define CHECK(x)                                                                        \
  do {                                                                                  \
    tecore_result_t r_ = (x);                                                           \
    if (r_ != TECORE_SUCCESS) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s: %s\n", __FILE__, __LINE__, #x,                     \
              tecore_result_name(r_), tecore_last_error());                             \
      exit(1);                                                                          \
    }                                                                                   \
  } while (0)

static tecore_stream_t s;
static tecore_event_t e0, e1;

/* Median-free simple timing: warm up, then the mean of iters launches. */
#define TIME(ms, iters, call)                                                           \
  do {                                                                                  \
    for (int w_ = 0; w_ < 3; w_++) CHECK(call);                                         \
    CHECK(tecore_event_record(e0, s));                                                  \
    for (int i_ = 0; i_ < (iters); i_++) CHECK(call);                                   \
    CHECK(tecore_event_record(e1, s));                                                  \
    CHECK(tecore_event_synchronize(e1));                                                \
    CHECK(tecore_event_elapsed(&(ms), e0, e1));                                         \
    (ms) /= (iters);                                                                    \
  } while (0)

static double copy_gbs;
static void report(const char *name, float ms, double bytes) {
  double gbs = bytes / (ms * 1e-3) / 1e9;
  printf("%-44s %9.1f us %9.1f MB %8.1f GB/s %6.1f%% of copy\n", name, ms * 1e3, bytes / 1e6, gbs,
         100.0 * gbs / copy_gbs);
}

int main(int argc, char **argv) {
  size_t rows = argc > 2 ? strtoull(argv[1], 0, 0) : 8192, cols = argc > 2 ? strtoull(argv[2], 0, 0) : 8192;
  size_t n = rows * cols;
  tecore_ctx_t ctx;
  CHECK(tecore_init());
  CHECK(tecore_ctx_create(0, &ctx));
  CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  CHECK(tecore_event_create(TECORE_EVENT_DEFAULT, &e0));
  CHECK(tecore_event_create(TECORE_EVENT_DEFAULT, &e1));
  struct tecore_device_props p;
  CHECK(tecore_device_get_props(0, &p));
  printf("# %s, %d SMs, %zu x %zu elements (%.1f MB of bf16)\n", p.name, p.sm_count, rows, cols,
         n * 2 / 1e6);

  tecore_devptr_t in, q, qc, sc, scc, meta, c1, c2;
  CHECK(tecore_mem_alloc(n * 4, &in));
  CHECK(tecore_mem_alloc(n, &q));
  CHECK(tecore_mem_alloc(n, &qc));
  CHECK(tecore_mem_alloc(n / 8 + 4096, &sc));
  CHECK(tecore_mem_alloc(n / 8 + 4096, &scc));
  CHECK(tecore_mem_alloc(256, &meta));
  CHECK(tecore_mem_alloc(n * 2, &c1));
  CHECK(tecore_mem_alloc(n * 2, &c2));
  CHECK(tecore_fill(in, TECORE_DTYPE_BF16, n, 1.5, s));
  CHECK(tecore_scale_add(in, in, 0.5f, in, 0.25f, TECORE_DTYPE_BF16, n, s));
  CHECK(tecore_memset_d32_async(meta, 0x3f800000u, 64, s));
  float ms;
  TIME(ms, 20, tecore_memcpy_async(c2, c1, n * 2, s));
  copy_gbs = 2.0 * n * 2 / (ms * 1e-3) / 1e9;
  printf("%-44s %9.1f us %9.1f MB %8.1f GB/s (read + write)\n", "device-to-device copy", ms * 1e3,
         2.0 * n * 2 / 1e6, copy_gbs);

  size_t shape[2] = {rows, cols};
  struct tecore_tensor tin, tout;
  CHECK(tecore_tensor_init(&tin, TECORE_DTYPE_BF16, 2, shape, in));
  CHECK(tecore_tensor_init(&tout, TECORE_DTYPE_E4M3, 2, shape, q));
  tout.amax = meta, tout.scale = meta + 4, tout.scale_inv = meta + 8;

  tout.scaling = TECORE_SCALING_DELAYED;
  TIME(ms, 20, tecore_quantize(&tin, &tout, 0, s));
  report("quantize delayed bf16->e4m3 (3 B/el)", ms, 3.0 * n);
  tout.scaling = TECORE_SCALING_CURRENT;
  TIME(ms, 20, tecore_quantize(&tin, &tout, 0, s));
  report("quantize current bf16->e4m3 (5 B/el floor)", ms, 5.0 * n);
  tout.scaling = TECORE_SCALING_DELAYED;
  tout.columnwise_data = qc;
  TIME(ms, 20, tecore_quantize(&tin, &tout, 0, s));
  report("quantize delayed + transpose (4 B/el)", ms, 4.0 * n);
  tout.scaling = TECORE_SCALING_MXFP8;
  tout.scale_inv = sc, tout.columnwise_scale_inv = scc, tout.amax = 0;
  TIME(ms, 20, tecore_quantize(&tin, &tout, 0, s));
  report("quantize mxfp8 rowwise + columnwise", ms, 4.0 * n + 2.0 * n / 32);
  tout.columnwise_data = 0;
  TIME(ms, 20, tecore_quantize(&tin, &tout, 0, s));
  report("quantize mxfp8 rowwise", ms, 3.0 * n + n / 32.0);
  tout.scaling = TECORE_SCALING_BLOCK_1X128;
  tout.columnwise_data = qc;
  TIME(ms, 10, tecore_quantize(&tin, &tout, 0, s));
  report("quantize block 1x128 rowwise + columnwise", ms, 4.0 * n + 8.0 * n / 128);
  tout.scaling = TECORE_SCALING_BLOCK_128X128;
  TIME(ms, 10, tecore_quantize(&tin, &tout, 0, s));
  report("quantize block 128x128 rowwise + columnwise", ms, 4.0 * n);
  /* dequantize the per-tensor result */
  struct tecore_tensor dq;
  CHECK(tecore_tensor_init(&dq, TECORE_DTYPE_BF16, 2, shape, c1));
  tout.scaling = TECORE_SCALING_DELAYED;
  tout.columnwise_data = 0, tout.scale_inv = meta + 8, tout.amax = meta;
  TIME(ms, 10, tecore_dequantize(&tout, &dq, s));
  report("dequantize e4m3->bf16 (3 B/el)", ms, 3.0 * n);
  TIME(ms, 20, tecore_amax(&tin, meta + 64, 0, 0, s));
  report("amax bf16 (2 B/el)", ms, 2.0 * n);
  /* multi: 16 tensors of n/16 */
  struct tecore_tensor mi[16], mo[16];
  size_t sh1[1] = {n / 16};
  for (int t = 0; t < 16; t++) {
    CHECK(tecore_tensor_init(&mi[t], TECORE_DTYPE_BF16, 1, sh1, in + (size_t)t * (n / 16) * 2));
    CHECK(tecore_tensor_init(&mo[t], TECORE_DTYPE_E4M3, 1, sh1, q + (size_t)t * (n / 16)));
    mo[t].scaling = TECORE_SCALING_DELAYED;
    mo[t].amax = meta + 128 + 4 * t, mo[t].scale = meta + 4, mo[t].scale_inv = meta + 192 + 4 * t;
  }
  TIME(ms, 20, tecore_quantize_multi(mi, mo, 16, 0, s));
  report("quantize_multi 16 x delayed bf16->e4m3", ms, 3.0 * n);
  CHECK(tecore_stream_synchronize(s));
  return 0;
}
