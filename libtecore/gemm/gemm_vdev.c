/* SPDX-License-Identifier: Apache-2.0 */
/* gemm_vdev.c -- the reference GEMM: the vdev backend's gemm op
 * (te_vdev_gemm, what tecore_gemm runs on vdev), and the oracle the GPU results are held to.
 *
 * It is a kernel of its own table (vdev implementation only, no fatbin),
 * launched through tecore_kernel_launch, so it runs on the stream's worker
 * thread in stream order and is recorded as a kernel node when the stream
 * captures, like every other vdev kernel.  The pointers are parameters of
 * their own (marked as pointers, so graph-level pointer rewriting sees
 * them); the shape, strides, types and epilogue ride in one struct.
 *
 * Shapes: any m, n, k (the layout rules are checked before, in gemm.c).
 * Math, per output element (i, j):
 *   acc  = sum_kk a(i, kk) * b(j, kk)        in double; a and b are the
 *          stored values (times the E8M0 block scale for MXFP8: exact;
 *          times the FP32 block scale for 1x128 / 128x128, read from a
 *          copy in cuBLASLt's layout made as the cuda backend makes it)
 *   pre  = alpha * acc * sa * sb + beta * C  in double (sa, sb: per-tensor
 *          scale_inv, 1 otherwise), + bias[j] for the bias epilogues
 *   aux  = pre rounded to aux's type; y = gelu(pre) or pre * gelu'(aux)
 *          (tanh form, in double)
 *   y is rounded to float (what a GPU epilogue holds); D = y rounded to
 *   D's type (FP8: fp8(y * d_scale), kernels/common/fp8.h's rounding);
 *   amax = max |y| (NaN wins); bias gradients sum the float y (or a) in
 *   double.
 * Double accumulation makes the reference the exact sum rounded once; a
 * GPU's float accumulation differs from it by the tolerance the tests
 * state. */
#include "gemm/gemm_problem.h"
#include "vdev/vdev.h"
#include "common/convert.h"
#include "common/fp8.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct gemm_ref_params {
  uint64_t m, n, k;
  int64_t a_si, a_sk, a_s_si, a_s_sk;
  int64_t b_si, b_sk, b_s_si, b_s_sk;
  int32_t a_dtype, b_dtype, a_scale_kind, b_scale_kind;
  int32_t c_dtype, d_dtype, bias_dtype, aux_dtype;
  int32_t epilogue, fast_accum;
  float alpha, beta;
};

enum {
  P_A, P_B, P_A_SCALE, P_B_SCALE, P_C, P_D, P_BIAS, P_AUX, P_D_SCALE, P_D_AMAX, P_PARAMS,
  P_COUNT_
};

/* ---- element access ------------------------------------------------------- */

static float load_elem(const void *p, int dtype, size_t i) {
  switch (dtype) {
  case TECORE_DTYPE_F32: return ((const float *)p)[i];
  case TECORE_DTYPE_BF16: return te_bf16_to_f32(((const uint16_t *)p)[i]);
  case TECORE_DTYPE_F16: return te_f16_to_f32(((const uint16_t *)p)[i]);
  case TECORE_DTYPE_E4M3: return te_e4m3_to_f32(((const uint8_t *)p)[i]);
  case TECORE_DTYPE_E5M2: return te_e5m2_to_f32(((const uint8_t *)p)[i]);
  default: return NAN;
  }
}

static void store_elem(void *p, int dtype, size_t i, float v) {
  switch (dtype) {
  case TECORE_DTYPE_F32: ((float *)p)[i] = v; break;
  case TECORE_DTYPE_BF16: ((uint16_t *)p)[i] = te_f32_to_bf16(v); break;
  case TECORE_DTYPE_F16: ((uint16_t *)p)[i] = te_f32_to_f16(v); break;
  default: break;   /* FP8 outputs go through their scale (below) */
  }
}

struct ref_operand {
  const void *data;
  const void *scale;
  int dtype, scale_kind;
  int64_t si, sk, s_si, s_sk;
  const float *lt;             /* block scales in cuBLASLt's layout, or NULL */
  size_t rows, k;
};

/* Element (r, kk) of an operand as a real value, except the per-tensor
 * scale, which is applied to the sum (one rounding fewer). */
static double operand_elem(const struct ref_operand *o, size_t r, size_t kk) {
  double v = load_elem(o->data, o->dtype, (size_t)((int64_t)r * o->si + (int64_t)kk * o->sk));
  if (o->scale_kind == TE_GEMM_SCALE_MX) {
    size_t s = (size_t)((int64_t)r * o->s_si + (int64_t)(kk / 32) * o->s_sk);
    v *= (double)te_e8m0_to_f32(((const uint8_t *)o->scale)[s]);
  } else if (o->lt) {
    v *= (double)o->lt[te_gemm_blk_lt_index((enum te_gemm_scale)o->scale_kind, o->rows, o->k, r, kk)];
  } else if (o->scale_kind == TE_GEMM_SCALE_BLK1D || o->scale_kind == TE_GEMM_SCALE_BLK2D) {
    size_t rb = o->scale_kind == TE_GEMM_SCALE_BLK2D ? r / 128 : r;
    v *= (double)((const float *)o->scale)[(int64_t)rb * o->s_si + (int64_t)(kk / 128) * o->s_sk];
  }
  return v;
}

static double tensor_scale(const struct ref_operand *o) {
  return o->scale_kind == TE_GEMM_SCALE_TENSOR ? (double)*(const float *)o->scale : 1.0;
}

/* A block-scaled operand's scales copied into cuBLASLt's layout the way
 * the cuda backend copies them (gemm_problem.h's te_gemm_blk_lt_copy, run
 * by te_copy2d_on_host, te_copy2d_u32's loop), into an exact-size host
 * buffer that the element reads then go through; NULL (the compact scales
 * are read) when not block-scaled or out of memory. */
static float *lt_scales(struct ref_operand *o, size_t rows, size_t k) {
  if (o->scale_kind != TE_GEMM_SCALE_BLK1D && o->scale_kind != TE_GEMM_SCALE_BLK2D) return NULL;
  size_t bytes = te_gemm_blk_lt_bytes((enum te_gemm_scale)o->scale_kind, rows, k);
  float *buf = malloc(bytes);
  if (!buf) return NULL;
  struct te_gemm_operand g = {.scale_kind = (enum te_gemm_scale)o->scale_kind,
                              .scale_inv = (tecore_devptr_t)(uintptr_t)o->scale,
                              .s_si = o->s_si, .s_sk = o->s_sk};
  struct te_copy2d c = te_gemm_blk_lt_copy(&g, rows, k, (tecore_devptr_t)(uintptr_t)buf);
  te_copy2d_on_host(&c);
  o->lt = buf;
  o->rows = rows;
  o->k = k;
  return buf;
}

/* A k-major panel [rows][k] of an operand, or NULL when memory is short
 * (the loops then read elements in place). */
static double *make_panel(const struct ref_operand *o, size_t rows, size_t k) {
  if (rows && k > SIZE_MAX / sizeof(double) / rows) return NULL;
  double *p = malloc(rows * k * sizeof(double));
  if (!p) return NULL;
  for (size_t r = 0; r < rows; r++)
    for (size_t kk = 0; kk < k; kk++) p[r * k + kk] = operand_elem(o, r, kk);
  return p;
}

/* One row of sums acc[j] = sum_kk ar[kk] * bp[j][kk], each in kk order (the
 * order of the element-at-a-time loop, so the same bits), two rows of A
 * against four of B at a time: eight independent sums, so none waits on
 * its own add latency, and each load feeds two or four products.  The
 * panels and acc are this kernel's own exact-size host buffers, so the
 * loop is left out of ASan's instrumentation (it was most of a sanitizer
 * run's time on vdev); device memory is checked by vdev's red zones. */
#if defined(__has_attribute)
#if __has_attribute(no_sanitize)
__attribute__((no_sanitize("address")))
#endif
#endif
static void dot_rows(const double *ap, size_t rows, const double *bp, size_t n, size_t k,
                     double *acc) {
  size_t i = 0;
  for (; i + 2 <= rows; i += 2) {
    const double *a0 = ap + i * k, *a1 = a0 + k;
    double *c0 = acc + i * n, *c1 = c0 + n;
    size_t j = 0;
    for (; j + 4 <= n; j += 4) {
      const double *b0 = bp + j * k, *b1 = b0 + k, *b2 = b1 + k, *b3 = b2 + k;
      double s00 = 0, s01 = 0, s02 = 0, s03 = 0, s10 = 0, s11 = 0, s12 = 0, s13 = 0;
      for (size_t kk = 0; kk < k; kk++) {
        double x0 = a0[kk], x1 = a1[kk], y0 = b0[kk], y1 = b1[kk], y2 = b2[kk], y3 = b3[kk];
        s00 += x0 * y0;
        s01 += x0 * y1;
        s02 += x0 * y2;
        s03 += x0 * y3;
        s10 += x1 * y0;
        s11 += x1 * y1;
        s12 += x1 * y2;
        s13 += x1 * y3;
      }
      c0[j] = s00, c0[j + 1] = s01, c0[j + 2] = s02, c0[j + 3] = s03;
      c1[j] = s10, c1[j + 1] = s11, c1[j + 2] = s12, c1[j + 3] = s13;
    }
    for (; j < n; j++) {
      const double *br = bp + j * k;
      double s0 = 0, s1 = 0;
      for (size_t kk = 0; kk < k; kk++) {
        s0 += a0[kk] * br[kk];
        s1 += a1[kk] * br[kk];
      }
      c0[j] = s0, c1[j] = s1;
    }
  }
  for (; i < rows; i++) {
    const double *ar = ap + i * k;
    for (size_t j = 0; j < n; j++) {
      const double *br = bp + j * k;
      double s = 0;
      for (size_t kk = 0; kk < k; kk++) s += ar[kk] * br[kk];
      acc[i * n + j] = s;
    }
  }
}

/* ---- GELU, tanh form, in double --------------------------------------------- */

#define GELU_C0 0.79788456080286535588   /* sqrt(2/pi) */
#define GELU_C1 0.044715

static double gelu_d(double x) {
  return 0.5 * x * (1.0 + tanh(GELU_C0 * (x + GELU_C1 * x * x * x)));
}

static double dgelu_d(double x) {
  double t = tanh(GELU_C0 * (x + GELU_C1 * x * x * x));
  return 0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * GELU_C0 * (1.0 + 3.0 * GELU_C1 * x * x);
}

/* ---- the kernel ------------------------------------------------------------- */

static void vdev_gemm_ref(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  const struct gemm_ref_params *p = args[P_PARAMS];
  struct ref_operand a = {.data = *(void *const *)args[P_A],
                          .scale = *(void *const *)args[P_A_SCALE],
                          .dtype = p->a_dtype, .scale_kind = p->a_scale_kind,
                          .si = p->a_si, .sk = p->a_sk, .s_si = p->a_s_si, .s_sk = p->a_s_sk};
  struct ref_operand b = {.data = *(void *const *)args[P_B],
                          .scale = *(void *const *)args[P_B_SCALE],
                          .dtype = p->b_dtype, .scale_kind = p->b_scale_kind,
                          .si = p->b_si, .sk = p->b_sk, .s_si = p->b_s_si, .s_sk = p->b_s_sk};
  const void *c = *(void *const *)args[P_C];
  void *d = *(void *const *)args[P_D];
  void *bias = *(void *const *)args[P_BIAS];
  void *aux = *(void *const *)args[P_AUX];
  const float *d_scale = *(void *const *)args[P_D_SCALE];
  float *d_amax = *(void *const *)args[P_D_AMAX];
  size_t m = p->m, n = p->n, k = p->k;
  int epi = p->epilogue;
  int d_fp8 = p->d_dtype == TECORE_DTYPE_E4M3 || p->d_dtype == TECORE_DTYPE_E5M2;
  double sab = tensor_scale(&a) * tensor_scale(&b);
  float dscale = d_fp8 ? *d_scale : 1.0f;
  uint32_t amax_bits = 0;

  float *alt = lt_scales(&a, m, k), *blt = lt_scales(&b, n, k);
  double *ap = make_panel(&a, m, k), *bp = make_panel(&b, n, k);
  /* the sums of two rows at a time */
  double *colsum = NULL, *acc2 = ap && bp && n <= SIZE_MAX / 2 / sizeof(double)
                                     ? malloc((n ? 2 * n : 1) * sizeof(double)) : NULL;
  if (epi == TECORE_GEMM_EPI_DGELU_BGRAD || epi == TECORE_GEMM_EPI_DAUX_BGRAD)
    colsum = calloc(n ? n : 1, sizeof(double));

  if (epi == TECORE_GEMM_EPI_BGRAD) {
    /* bias[i] = sum_kk op(A)[i][kk]: the reduction over k of A */
    for (size_t i = 0; i < m; i++) {
      double s = 0;
      for (size_t kk = 0; kk < k; kk++) s += ap ? ap[i * k + kk] : operand_elem(&a, i, kk);
      store_elem(bias, p->bias_dtype, i, (float)(s * tensor_scale(&a)));
    }
  }

  for (size_t i = 0; i < m; i++) {
    if (acc2 && i % 2 == 0) dot_rows(ap + i * k, m - i < 2 ? m - i : 2, bp, n, k, acc2);
    for (size_t j = 0; j < n; j++) {
      double acc = 0;
      if (acc2) {
        acc = acc2[(i % 2) * n + j];
      } else {
        for (size_t kk = 0; kk < k; kk++) acc += operand_elem(&a, i, kk) * operand_elem(&b, j, kk);
      }
      size_t ij = i * n + j;
      double pre = (double)p->alpha * (acc * sab);
      /* C is read before D is written: C may be D itself */
      if (p->beta != 0.0f) pre += (double)p->beta * load_elem(c, p->c_dtype, ij);
      if (te_gemm_epi_has_bias_in((tecore_gemm_epilogue_t)epi))
        pre += load_elem(bias, p->bias_dtype, j);
      double y;
      switch (epi) {
      case TECORE_GEMM_EPI_GELU_AUX:
      case TECORE_GEMM_EPI_BIAS_GELU_AUX:
      case TECORE_GEMM_EPI_GELU:
      case TECORE_GEMM_EPI_BIAS_GELU:
      case TECORE_GEMM_EPI_GELU_DAUX:
      case TECORE_GEMM_EPI_BIAS_GELU_DAUX: {
        float pre_f = (float)pre;   /* with aux or not: the same D */
        if (te_gemm_epi_daux((tecore_gemm_epilogue_t)epi))
          store_elem(aux, p->aux_dtype, ij, (float)dgelu_d(pre_f));
        else if (te_gemm_epi_has_aux_out((tecore_gemm_epilogue_t)epi))
          store_elem(aux, p->aux_dtype, ij, pre_f);
        y = gelu_d(pre_f);
        break;
      }
      case TECORE_GEMM_EPI_DGELU:
      case TECORE_GEMM_EPI_DGELU_BGRAD:
        y = (double)(float)pre * dgelu_d(load_elem(aux, p->aux_dtype, ij));
        break;
      case TECORE_GEMM_EPI_DAUX:
      case TECORE_GEMM_EPI_DAUX_BGRAD:
        y = (double)(float)pre * load_elem(aux, p->aux_dtype, ij);
        break;
      default: y = pre; break;
      }
      float yf = (float)y;
      if (colsum) colsum[j] += yf;
      if (d_fp8) {
        amax_bits = te_max_u32(amax_bits, te_abs_bits(yf));
        ((uint8_t *)d)[ij] = te_f32_to_fp8(yf * dscale, p->d_dtype);
      } else {
        store_elem(d, p->d_dtype, ij, yf);
      }
    }
  }

  if (epi == TECORE_GEMM_EPI_DGELU_BGRAD || epi == TECORE_GEMM_EPI_DAUX_BGRAD) {
    for (size_t j = 0; j < n; j++) {
      double s = 0;
      if (colsum) {
        s = colsum[j];
      } else {
        /* no memory for the sums: read D back (exact for an f32 D only;
         * only reached when calloc of n doubles fails) */
        for (size_t i = 0; i < m; i++) s += load_elem(d, p->d_dtype, i * n + j);
      }
      store_elem(bias, p->bias_dtype, j, (float)s);
    }
  }
  if (d_fp8 && d_amax) *d_amax = te_bits_f32(amax_bits);
  free(colsum);
  free(acc2);
  free(ap);
  free(bp);
  free(alt);
  free(blt);
}

/* ---- the table and the launch -------------------------------------------- */

static const struct tecore_kernel_def gemm_kernels[] = {
    {.name = "te_gemm_ref", .vdev = vdev_gemm_ref, .nparams = P_COUNT_,
     .param_size = {8, 8, 8, 8, 8, 8, 8, 8, 8, 8, sizeof(struct gemm_ref_params)},
     .param_is_ptr = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0}},
};

/* vdev only: no fatbin, which the registry accepts; the cuda backend never
 * launches this table (its GEMMs go to cuBLASLt). */
TE_KERNEL_TABLE(gemm_first_id, "libtecore/gemm", gemm_kernels, NULL, 0)

tecore_result_t te_vdev_gemm(const struct te_gemm_problem *p, tecore_stream_t stream) {
  int id = gemm_first_id();
  if (id < 0) return TECORE_ERR_INTERNAL;
  struct gemm_ref_params kp = {
      .m = p->m, .n = p->n, .k = p->k,
      .a_si = p->a.si, .a_sk = p->a.sk, .a_s_si = p->a.s_si, .a_s_sk = p->a.s_sk,
      .b_si = p->b.si, .b_sk = p->b.sk, .b_s_si = p->b.s_si, .b_s_sk = p->b.s_sk,
      .a_dtype = (int32_t)p->a.dtype, .b_dtype = (int32_t)p->b.dtype,
      .a_scale_kind = (int32_t)p->a.scale_kind, .b_scale_kind = (int32_t)p->b.scale_kind,
      .c_dtype = (int32_t)p->c_dtype, .d_dtype = (int32_t)p->d_dtype,
      .bias_dtype = (int32_t)p->bias_dtype, .aux_dtype = (int32_t)p->aux_dtype,
      .epilogue = (int32_t)p->epilogue, .fast_accum = p->fast_accum,
      .alpha = p->alpha, .beta = p->beta};
  void *ptr[P_PARAMS] = {
      [P_A] = (void *)(uintptr_t)p->a.data,         [P_B] = (void *)(uintptr_t)p->b.data,
      [P_A_SCALE] = (void *)(uintptr_t)p->a.scale_inv,
      [P_B_SCALE] = (void *)(uintptr_t)p->b.scale_inv,
      [P_C] = (void *)(uintptr_t)p->c,              [P_D] = (void *)(uintptr_t)p->d,
      [P_BIAS] = (void *)(uintptr_t)p->bias,        [P_AUX] = (void *)(uintptr_t)p->aux,
      [P_D_SCALE] = (void *)(uintptr_t)p->d_scale,  [P_D_AMAX] = (void *)(uintptr_t)p->d_amax};
  void *args[P_COUNT_];
  for (int i = 0; i < P_PARAMS; i++) args[i] = &ptr[i];
  args[P_PARAMS] = &kp;
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {1, 1, 1}};
  TE_CHECK(tecore_kernel_launch(id, &cfg, args, stream));
  return TECORE_SUCCESS;
}
