/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_gemm.c -- an FP8 GEMM, checked against a host reference.
 *
 * A Linear layer's product y = x W^T with both operands in E4M3:
 *   x [m][k] and W [n][k] (F32 on the host, random) are quantized with
 *   current scaling (tecore_quantize computes amax, scale and scale_inv),
 *   y [m][n] = x8 W8^T in F32 through tecore_gemm.
 * The reference multiplies, in double on the host, the values the FP8
 * operands hold (tecore_dequantize of each), so the only difference left
 * is the GEMM's F32 accumulation: a relative tolerance of 1e-5 of the sum
 * of |products| covers it.  Outputs are poisoned first (0xff: NaN).
 *
 * Build and run against an installed libte:
 *   cc -std=c99 fp8_gemm.c $(pkg-config --cflags --libs te-core) -lm \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir te-core)" -o fp8_gemm
 *   ./fp8_gemm            (TE_DEVICE=vdev runs it without a GPU)
 * Exit 0 when every element is within tolerance, 1 otherwise. */
#include <te/core.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

enum { M = 64, N = 48, K = 128 };

/* Every libte call returns a result code; tecore_last_error() says why. */
#define TRY(call)                                                                  \
  do {                                                                             \
    if ((call) != TECORE_SUCCESS) {                                                \
      fprintf(stderr, "fp8_gemm: %s: %s\n", #call, tecore_last_error());           \
      exit(1);                                                                     \
    }                                                                              \
  } while (0)

/* Host memory passes as a device address (unified addressing). */
static tecore_devptr_t host(void *p) { return (tecore_devptr_t)(uintptr_t)p; }

static tecore_devptr_t dev_alloc(size_t bytes) {
  tecore_devptr_t p;
  TRY(tecore_mem_alloc(bytes, &p));
  return p;
}

/* Quantizes rows x cols F32 values (on the device at src) to an E4M3
 * tensor with current scaling; fills *q, whose buffers the caller frees. */
static void quantize_e4m3(tecore_devptr_t src, size_t rows, size_t cols, struct tecore_tensor *q) {
  size_t shape[2] = {rows, cols};
  struct tecore_tensor in;
  TRY(tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, src));
  TRY(tecore_tensor_init(q, TECORE_DTYPE_E4M3, 2, shape, dev_alloc(rows * cols)));
  q->scaling = TECORE_SCALING_CURRENT;
  q->amax = dev_alloc(4);
  q->scale = dev_alloc(4);
  q->scale_inv = dev_alloc(4);
  TRY(tecore_quantize(&in, q, 0, NULL));
}

/* What the FP8 tensor q holds, as F32 on the host (rows x cols). */
static void dequantize_to_host(const struct tecore_tensor *q, size_t rows, size_t cols, float *out) {
  size_t shape[2] = {rows, cols};
  struct tecore_tensor f;
  tecore_devptr_t d = dev_alloc(rows * cols * 4);
  TRY(tecore_tensor_init(&f, TECORE_DTYPE_F32, 2, shape, d));
  TRY(tecore_dequantize(q, &f, NULL));
  TRY(tecore_memcpy(host(out), d, rows * cols * 4));   /* waits for the stream */
  TRY(tecore_mem_free(d));
}

static void free_tensor(struct tecore_tensor *t) {
  TRY(tecore_mem_free(t->data));
  TRY(tecore_mem_free(t->amax));
  TRY(tecore_mem_free(t->scale));
  TRY(tecore_mem_free(t->scale_inv));
}

int main(void) {
  static float x[M * K], w[N * K], xq[M * K], wq[N * K], y[M * N];
  unsigned seed = getenv("TE_SEED") ? (unsigned)strtoul(getenv("TE_SEED"), NULL, 0) : 12345u;
  srand(seed);
  for (int i = 0; i < M * K; i++) x[i] = (float)rand() / RAND_MAX * 4.f - 2.f;
  for (int i = 0; i < N * K; i++) w[i] = (float)rand() / RAND_MAX * 0.2f - 0.1f;

  TRY(tecore_init());   /* the backend: a GPU, or vdev where there is none */
  tecore_devptr_t dx = dev_alloc(sizeof x), dw = dev_alloc(sizeof w), dy = dev_alloc(sizeof y);
  TRY(tecore_memcpy(dx, host(x), sizeof x));
  TRY(tecore_memcpy(dw, host(w), sizeof w));
  TRY(tecore_memset_d8_async(dy, 0xff, sizeof y, NULL));   /* poison: NaN */

  struct tecore_tensor x8, w8, out;
  quantize_e4m3(dx, M, K, &x8);
  quantize_e4m3(dw, N, K, &w8);
  size_t yshape[2] = {M, N};
  TRY(tecore_tensor_init(&out, TECORE_DTYPE_F32, 2, yshape, dy));
  /* y = x8 W8^T: W is [n][k], so transb = T (the layout FP8 GEMMs take) */
  TRY(tecore_gemm(&x8, TECORE_GEMM_N, &w8, TECORE_GEMM_T, &out, 1.0f, 0.0f, NULL, NULL));
  TRY(tecore_ctx_synchronize());
  TRY(tecore_memcpy(host(y), dy, sizeof y));

  /* the reference: the same FP8 values, multiplied in double */
  dequantize_to_host(&x8, M, K, xq);
  dequantize_to_host(&w8, N, K, wq);
  int bad = 0;
  double worst = 0;
  for (int i = 0; i < M; i++)
    for (int j = 0; j < N; j++) {
      double ref = 0, mag = 0;
      for (int k = 0; k < K; k++) {
        ref += (double)xq[i * K + k] * wq[j * K + k];
        mag += fabs((double)xq[i * K + k] * wq[j * K + k]);
      }
      double err = fabs(y[i * N + j] - ref), tol = 1e-5 * mag + 1e-30;
      if (err / tol > worst) worst = err / tol;
      if (!(err <= tol) && bad++ < 5)   /* !(<=): a NaN fails too */
        fprintf(stderr, "fp8_gemm: y[%d][%d] = %.9g, reference %.9g\n", i, j, y[i * N + j], ref);
    }
  free_tensor(&x8);
  free_tensor(&w8);
  TRY(tecore_mem_free(dx));
  TRY(tecore_mem_free(dw));
  TRY(tecore_mem_free(dy));
  if (bad) {
    fprintf(stderr, "fp8_gemm: %d of %d elements out of tolerance\n", bad, M * N);
    return 1;
  }
  tecore_backend_t b;
  TRY(tecore_backend(&b));
  printf("fp8_gemm: [%d x %d] x [%d x %d]^T in E4M3 on %s: largest error %.2f of the "
         "tolerance (seed %u)\n", M, K, N, K, tecore_backend_name(b), worst, seed);
  return 0;
}
