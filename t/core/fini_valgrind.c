/* SPDX-License-Identifier: Apache-2.0
 * fini_valgrind.c -- the program t/core/fini-valgrind.sh runs under valgrind:
 * it initializes libtecore, quantizes a tensor to E4M3, captures the
 * quantize into a libtegraph graph and replays it twice on fresh input,
 * checks every byte against the host conversion (tecore_cvt_f32_to_e4m3
 * of x * scale), frees what it made, leaves one stream undestroyed on
 * purpose (tecore_fini must join its worker) and calls tecore_fini().
 * Exit 0 when the results are right and tecore_fini behaved (a second
 * call harmless, tecore_init refused afterwards); valgrind's verdict on
 * threads and leaks is the script's. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <te/core.h>
#include <te/graph.h>

#define CK(call)                                                               \
  do {                                                                         \
    int r_ = (int)(call);                                                      \
    if (r_ != 0) {                                                             \
      fprintf(stderr, "fini_valgrind: %s: %d: %s\n", #call, r_, tecore_last_error()); \
      return 1;                                                                \
    }                                                                          \
  } while (0)

static uint64_t rng;
static float next_float(void) {   /* xorshift: values in [-300, 300) */
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return (float)((double)(rng >> 11) / 9007199254740992.0 * 600.0 - 300.0);
}

/* The kernel's bytes for x * scale, from the host conversion. */
static int check(const float *x, const uint8_t *got, size_t n, float scale, const char *what) {
  for (size_t i = 0; i < n; i++) {
    uint8_t want = tecore_f32_to_e4m3(x[i] * scale);
    if (got[i] != want) {
      fprintf(stderr, "fini_valgrind: %s: [%zu] x = %g: got 0x%02x, want 0x%02x\n", what, i,
              (double)x[i], got[i], want);
      return 1;
    }
  }
  return 0;
}

int main(void) {
  const char *seed = getenv("TE_TEST_SEED");
  rng = seed && seed[0] ? strtoull(seed, NULL, 0) : (uint64_t)time(NULL);
  if (!rng) rng = 1;
  printf("# seed %llu\n", (unsigned long long)rng);
  enum { ROWS = 32, COLS = 64, N = ROWS * COLS };
  size_t shape[2] = {ROWS, COLS};
  float *x = malloc(N * sizeof *x);
  uint8_t *q = malloc(N);
  if (!x || !q) return 1;

  CK(tecore_init());
  tecore_stream_t s, left;
  CK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  CK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &left));
  tecore_devptr_t dx, dq, dsc;
  CK(tecore_mem_alloc(N * sizeof(float), &dx));
  CK(tecore_mem_alloc(N, &dq));
  CK(tecore_mem_alloc(16, &dsc));
  float sc[4] = {0.0f, 0.5f, 0.0f, 0.0f};   /* amax, scale, scale_inv */
  CK(tecore_memcpy(dsc, (tecore_devptr_t)(uintptr_t)sc, sizeof sc));
  struct tecore_tensor in, out;
  CK(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, dx));
  CK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 2, shape, dq));
  out.scaling = TECORE_SCALING_DELAYED;
  out.amax = dsc;
  out.scale = dsc + 4;
  out.scale_inv = dsc + 8;

  /* eager */
  for (int i = 0; i < N; i++) x[i] = next_float();
  CK(tecore_memcpy(dx, (tecore_devptr_t)(uintptr_t)x, N * sizeof(float)));
  CK(tecore_memset_d8_async(dq, 0xa5, N, s));
  CK(tecore_quantize(&in, &out, 0, s));
  CK(tecore_stream_synchronize(s));
  CK(tecore_memcpy((tecore_devptr_t)(uintptr_t)q, dq, N));
  if (check(x, q, N, sc[1], "eager")) return 1;

  /* captured once, replayed twice on new input */
  tegraph_graph_t *g = NULL;
  CK(tegraph_graph_create(0, &g));
  CK(tegraph_graph_begin_capture(g, s, TECORE_CAPTURE_GLOBAL, 0));
  CK(tecore_quantize(&in, &out, 0, s));
  CK(tegraph_graph_end_capture(g, NULL));
  CK(tegraph_graph_instantiate(g, s));
  for (int rep = 0; rep < 2; rep++) {
    for (int i = 0; i < N; i++) x[i] = next_float();
    CK(tecore_memcpy(dx, (tecore_devptr_t)(uintptr_t)x, N * sizeof(float)));
    CK(tecore_memset_d8_async(dq, 0xa5, N, s));
    CK(tegraph_graph_launch(g, s));
    CK(tecore_stream_synchronize(s));
    CK(tecore_memcpy((tecore_devptr_t)(uintptr_t)q, dq, N));
    if (check(x, q, N, sc[1], "replay")) return 1;
  }
  CK(tegraph_graph_destroy(g));
  /* work queued on the stream left behind, and a free that waits for it */
  CK(tecore_fill(dx, TECORE_DTYPE_F32, N, 1.0, left));
  CK(tecore_mem_free(dx));
  CK(tecore_mem_free(dq));
  CK(tecore_mem_free(dsc));
  CK(tecore_stream_destroy(s));

  CK(tecore_fini());
  CK(tecore_fini());
  if (tecore_init() != TECORE_ERR_NOT_INITIALIZED) {
    fprintf(stderr, "fini_valgrind: tecore_init after tecore_fini did not refuse\n");
    return 1;
  }
  free(x);
  free(q);
  printf("fini_valgrind: eager + 2 replays right; tecore_fini done\n");
  return 0;
}
