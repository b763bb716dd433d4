/* SPDX-License-Identifier: Apache-2.0 */
/* t/install/project/consumer.c -- a C program built by make installcheck
 * against the INSTALLED libte through pkg-config (te-core, te-graph,
 * te-comm; t/install/installcheck-pkgconfig.sh): it proves that the installed
 * headers compile as C99, that the three .pc files give a working link
 * line and run path, and that the installed libtecore quantizes right.
 *
 * The check: 4096 random floats (seed printed; TE_SEED repeats a run) in
 * [-8, 8) are quantized to E4M3 with current scaling, then dequantized.
 * Outputs are poisoned first (0xff bytes: NaN in f32 and in E4M3).
 * Asserted: amax is max|x| exactly; scale * scale_inv is 1 within 1e-6;
 * each dequantized value is within E4M3's half step of x (2^-4 relative,
 * or 2^-10 * scale_inv absolute in the subnormal range).  The versions the
 * three libraries report equal the installed <te/version.h>.
 * Exit 0 pass, 1 fail (the reason on stderr). */
#include <te/core.h>
#include <te/graph.h>
#include <te/comm.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define N 4096

static int fail(const char *what) {
  fprintf(stderr, "consumer.c: %s: %s\n", what, tecore_last_error());
  return 1;
}

static tecore_devptr_t host(void *p) { return (tecore_devptr_t)(uintptr_t)p; }

int main(void) {
  static float x[N], y[N];
  float amax = 0.f, got_amax, scale, scale_inv;
  tecore_devptr_t dx, dq, dy, damax, dscale, dsinv;
  struct tecore_tensor in, q, out;
  size_t shape[2] = {64, 64};
  unsigned seed = getenv("TE_SEED") ? (unsigned)strtoul(getenv("TE_SEED"), NULL, 0)
                                    : (unsigned)time(NULL);
  int maj[3], min[3], pat[3], i, bad = 0;

  tecore_version(&maj[0], &min[0], &pat[0]);
  tegraph_version(&maj[1], &min[1], &pat[1]);
  tecomm_version(&maj[2], &min[2], &pat[2]);
  for (i = 0; i < 3; i++)
    if (maj[i] != TECORE_VERSION_MAJOR || min[i] != TECORE_VERSION_MINOR ||
        pat[i] != TECORE_VERSION_PATCH) {
      fprintf(stderr, "consumer.c: library %d reports %d.%d.%d, <te/version.h> says %s\n", i,
              maj[i], min[i], pat[i], TECORE_VERSION_STRING);
      return 1;
    }

  printf("consumer.c: seed %u\n", seed);
  srand(seed);
  for (i = 0; i < N; i++) {
    x[i] = (float)rand() / ((float)RAND_MAX + 1.f) * 16.f - 8.f;
    if (fabsf(x[i]) > amax) amax = fabsf(x[i]);
  }
  if (tecore_init() || tecore_mem_alloc(N * 4, &dx) || tecore_mem_alloc(N, &dq) ||
      tecore_mem_alloc(N * 4, &dy) || tecore_mem_alloc(4, &damax) ||
      tecore_mem_alloc(4, &dscale) || tecore_mem_alloc(4, &dsinv))
    return fail("allocation");
  if (tecore_memcpy(dx, host(x), sizeof x) || tecore_memset_d8_async(dq, 0xff, N, NULL) ||
      tecore_memset_d8_async(dy, 0xff, N * 4, NULL) ||
      tecore_memset_d8_async(damax, 0xff, 4, NULL) ||
      tecore_memset_d8_async(dsinv, 0xff, 4, NULL))
    return fail("upload");

  if (tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, dx) ||
      tecore_tensor_init(&q, TECORE_DTYPE_E4M3, 2, shape, dq) ||
      tecore_tensor_init(&out, TECORE_DTYPE_F32, 2, shape, dy))
    return fail("tecore_tensor_init");
  q.scaling = TECORE_SCALING_CURRENT;
  q.amax = damax;
  q.scale = dscale;
  q.scale_inv = dsinv;
  if (tecore_quantize(&in, &q, 0, NULL) || tecore_dequantize(&q, &out, NULL) ||
      tecore_ctx_synchronize())
    return fail("quantize");
  if (tecore_memcpy(host(y), dy, sizeof y) || tecore_memcpy(host(&got_amax), damax, 4) ||
      tecore_memcpy(host(&scale), dscale, 4) || tecore_memcpy(host(&scale_inv), dsinv, 4))
    return fail("download");

  if (got_amax != amax) {
    fprintf(stderr, "consumer.c: amax %.9g, expected %.9g\n", got_amax, amax);
    return 1;
  }
  if (!(fabsf(scale * scale_inv - 1.f) <= 1e-6f)) {
    fprintf(stderr, "consumer.c: scale %g * scale_inv %g is not 1\n", scale, scale_inv);
    return 1;
  }
  for (i = 0; i < N; i++) {
    float tol = fmaxf(fabsf(x[i]) * 0.0625f, scale_inv * 0.0009765625f);
    if (!(fabsf(y[i] - x[i]) <= tol) && bad++ < 5)
      fprintf(stderr, "consumer.c: element %d: %.9g -> %.9g, tolerance %.3g\n", i, x[i], y[i],
              tol);
  }
  if (bad) {
    fprintf(stderr, "consumer.c: %d of %d elements out of tolerance\n", bad, N);
    return 1;
  }
  if (tecore_mem_free(dx) || tecore_mem_free(dq) || tecore_mem_free(dy) ||
      tecore_mem_free(damax) || tecore_mem_free(dscale) || tecore_mem_free(dsinv))
    return fail("tecore_mem_free");
  printf("consumer.c: libte %s, %d elements quantized to E4M3 (amax %g, scale %g) and back\n",
         tecore_version_string(), N, amax, scale);
  return 0;
}
