/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm16.c -- the cuda backend's own 16-bit GEMM (kernels/gemm16.cu:
 * persistent, warp-specialized blocks of 128 x 256: a TMA producer warp,
 * two warpgroups of wgmma, seven epilogue warps) for the problems
 * cuBLASLt runs slowly: the GELU epilogues, and the DAUX pair (gelu' saved
 * by the forward, multiplied by the backward) that only this kernel runs
 * on a GPU.  On an H100 cuBLASLt's bias +
 * GELU + aux and dGELU + bias-gradient kernels for GPT-2's fc1 and fc2
 * (32768 x 3072 x 768) took 597-607 us a call against 225 without the
 * epilogue, every candidate its heuristic offers measured
 * (bench/2026-11-23.md, session 13); libte's kernel takes 288 and 387 us there
 * (bench/2026-11-26.md, session 29).
 *
 * te_cuda_gemm asks te_gemm16_takes first; a problem this file does not
 * take goes to cuBLASLt as before.  Taken: 16-bit A, B, D (and aux and
 * bias) of one type, no scales, beta 0, A read k-major, B either way, m a
 * multiple of 128, n of 256, k of 64, rows and pointers 16-byte aligned,
 * compute capability 9.0, sm_90a code in the build and a driver with
 * cuTensorMapEncodeTiled (the kernel reads A and B through TMA tensor
 * maps made here, per call); TECORE_GEMM_OWN says which epilogues.  The
 * dGELU's bias gradient is made from column sums of each 128-row block
 * (in the GEMM's workspace) by te_gemm16_bgrad, in a fixed order: the
 * same bits on every run.  The DAUX product runs on the wide kernel
 * (te_gemm16_*_dmulw: 384 threads, one m64n256k16 MMA a k-step, the aux
 * tile through the TMA, TECORE_GEMM16_WIDE), whose column sums add the
 * 16-bit products. */
#include "cuda/cuda_backend.h"
#include "cuda/cuda_gemm.h"
#include "ksupport/ksupport.h"
#include "common/gemm16_params.h"

#include <string.h>

TE_PARAM_INT(gemm_own_param, "TECORE_GEMM_OWN", 1, 0, 2,
             "16-bit GEMMs libte's own wgmma kernel runs on compute capability 9.0 "
             "instead of cuBLASLt, where the shape fits (m % 128, n % 256, k % 64): 0 none; 1 "
             "those with a GELU or dGELU epilogue; 2 also those without epilogue or with a "
             "bias")

TE_PARAM_INT(gemm16_wide_param, "TECORE_GEMM16_WIDE", 1, 0, 1,
             "1: the DAUX product GEMMs (fc2's dgrad after a GELU) of libte's own 16-bit "
             "GEMM run on its wide kernel (384 threads, one m64n256k16 MMA a k-step, the aux "
             "tile through the TMA); 0: on the 512-thread kernel, whose bias gradient adds "
             "the float products rather than the 16-bit ones")

TE_KARGS(te_gemm16_args, TE_GEMM16_PARAMS)
TE_KARGS(te_gemm16_bgrad_args, TE_GEMM16_BGRAD_PARAMS)

/* kernel index: type (bf16, f16) x B (kn, nk) x epilogue (lin, gelu,
 * dgelu, gelu with gelu' as aux, the product with aux, that product on the
 * wide kernel), then bgrad */
#define G16(pre, t, b)                                                                   \
  TE_KDEF(pre "_" #t "_" #b "_lin", NULL, TE_GEMM16_PARAMS),                             \
      TE_KDEF(pre "_" #t "_" #b "_gelu", NULL, TE_GEMM16_PARAMS),                        \
      TE_KDEF(pre "_" #t "_" #b "_dgelu", NULL, TE_GEMM16_PARAMS),                       \
      TE_KDEF(pre "_" #t "_" #b "_gelud", NULL, TE_GEMM16_PARAMS),                       \
      TE_KDEF(pre "_" #t "_" #b "_dmul", NULL, TE_GEMM16_PARAMS),                        \
      TE_KDEF(pre "_" #t "_" #b "_dmulw", NULL, TE_GEMM16_PARAMS)
#define G16_SET(pre) G16(pre, bf16, kn), G16(pre, bf16, nk), G16(pre, f16, kn), G16(pre, f16, nk)
static const struct tecore_kernel_def g16_kernels[] = {
    G16_SET("te_gemm16"),
    TE_KDEF("te_gemm16_bgrad", NULL, TE_GEMM16_BGRAD_PARAMS),
};
#define G16_EPIS 6
#define K_BGRAD (4 * G16_EPIS)
#define A16 TE_KALIGN(TE_GEMM16_PARAMS)
#define A16_6 A16, A16, A16, A16, A16, A16
#define A16_SET A16_6, A16_6, A16_6, A16_6
static const struct te_kalign g16_align[] = {
    A16_SET, TE_KALIGN(TE_GEMM16_BGRAD_PARAMS),
};
TE_KERNEL_TABLE_FATBIN_ALIGNED(g16_first_id, "libtecore/gemm16", g16_kernels, g16_align, gemm16)

enum { EPI_LIN, EPI_GELU, EPI_DGELU, EPI_GELUD, EPI_DMUL, EPI_DMULW };
_Static_assert(TE_ARRAY_SIZE(g16_kernels) == K_BGRAD + 1, "the kernel table's layout");

/* 1 where the kernels run: sm_90a code in the build and compute
 * capability 9.0 (cc 90). */
static int g16_arch(int cc) {
#ifdef TE_CUDA_HAVE_SM90A
  return cc == 90;
#else
  (void)cc;
  return 0;
#endif
}

static int aligned16(tecore_devptr_t p) { return p % 16 == 0; }

/* The kernel's epilogue for p's, or -1 when TECORE_GEMM_OWN leaves it to
 * cuBLASLt. */
static int g16_epi(const struct te_gemm_problem *p) {
  int epi;
  switch (p->epilogue) {
  case TECORE_GEMM_EPI_GELU_AUX:
  case TECORE_GEMM_EPI_BIAS_GELU_AUX: epi = EPI_GELU; break;
  case TECORE_GEMM_EPI_DGELU:
  case TECORE_GEMM_EPI_DGELU_BGRAD: epi = EPI_DGELU; break;
  case TECORE_GEMM_EPI_GELU_DAUX:
  case TECORE_GEMM_EPI_BIAS_GELU_DAUX: epi = EPI_GELUD; break;
  case TECORE_GEMM_EPI_DAUX:
  case TECORE_GEMM_EPI_DAUX_BGRAD: epi = EPI_DMUL; break;
  case TECORE_GEMM_EPI_NONE:
  case TECORE_GEMM_EPI_BIAS: epi = EPI_LIN; break;
  default: return -1;   /* GELU without aux, BGRAD: cuBLASLt */
  }
  /* TECORE_GEMM_OWN 1: the epilogues; 2: the plain and bias GEMMs too */
  return tecore_tunable_int(&gemm_own_param) >= (epi == EPI_LIN ? 2 : 1) ? epi : -1;
}

/* Bytes of the dGELU's column sums (0 when the problem has none). */
static size_t g16_part_bytes(const struct te_gemm_problem *p) {
  if (p->epilogue != TECORE_GEMM_EPI_DGELU_BGRAD && p->epilogue != TECORE_GEMM_EPI_DAUX_BGRAD)
    return 0;
  return p->m / TE_GEMM16_BM * p->n * sizeof(float);
}

int te_gemm16_takes(const struct te_gemm_problem *p, int cc, tecore_devptr_t ws,
                    size_t ws_bytes) {
  if (!g16_arch(cc) || g16_epi(p) < 0 || p->fp8 || !te_cu.p_cuTensorMapEncodeTiled) return 0;
  tecore_dtype_t t = p->d_dtype;
  if ((t != TECORE_DTYPE_BF16 && t != TECORE_DTYPE_F16) || p->a.dtype != t || p->b.dtype != t ||
      p->a.scale_kind != TE_GEMM_SCALE_NONE || p->b.scale_kind != TE_GEMM_SCALE_NONE)
    return 0;
  if (p->beta != 0.0f) return 0;
  if (p->m % TE_GEMM16_BM || p->n % TE_GEMM16_BN || p->k % TE_GEMM16_BK || p->k == 0 ||
      p->m > 0x7fffffff || p->n > 0x7fffffff || p->k > 0x7fffffff ||
      p->m / TE_GEMM16_BM * (p->n / TE_GEMM16_BN) > 0x7fffffff)
    return 0;
  /* A k-major; B k-major ([n][k]) or n-major ([k][n]); rows of 16 bytes */
  if (p->a.sk != 1 || p->a.si % 8 || !aligned16(p->a.data)) return 0;
  int64_t ldb = p->b.sk == 1 ? p->b.si : p->b.si == 1 ? p->b.sk : 0;
  if (ldb <= 0 || ldb % 8 || !aligned16(p->b.data) || !aligned16(p->d)) return 0;
  if ((te_gemm_epi_has_aux_out(p->epilogue) || te_gemm_epi_has_aux_in(p->epilogue)) &&
      (p->aux_dtype != t || !aligned16(p->aux)))
    return 0;
  /* a bias (read, or the dGELU's gradient written) of the same type */
  if ((te_gemm_epi_has_bias_in(p->epilogue) && (p->bias_dtype != t || p->bias % 4)) ||
      (te_gemm_epi_has_bias_out(p->epilogue) && p->bias_dtype != t))
    return 0;
  size_t part = g16_part_bytes(p);
  return !part || (part <= ws_bytes && aligned16(ws));
}

/* A 2-D tensor map of 16-bit elements: rows of `cols` elements `ld` apart,
 * boxes of box_rows x 64 (128 bytes, the 128-byte swizzle wgmma reads). */
static tecore_result_t g16_tmap(te_gemm16_tmap *out, int f16, tecore_devptr_t base, int64_t cols,
                                int64_t rows, int64_t ld, unsigned box_rows) {
  CUtensorMap m;
  cuuint64_t dim[2] = {(cuuint64_t)cols, (cuuint64_t)rows}, stride[1] = {(cuuint64_t)ld * 2};
  cuuint32_t box[2] = {64, box_rows}, step[2] = {1, 1};
  TE_CHECK(TE_CU(cuTensorMapEncodeTiled, &m,
                 f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2,
                 (void *)(uintptr_t)base, dim, stride, box, step, CU_TENSOR_MAP_INTERLEAVE_NONE,
                 CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                 CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE));
  _Static_assert(sizeof m == sizeof *out, "a CUtensorMap is 128 bytes");
  memcpy(out, &m, sizeof m);
  return TECORE_SUCCESS;
}

tecore_result_t te_gemm16_run(const struct te_gemm_problem *p, tecore_devptr_t ws,
                              size_t ws_bytes, tecore_stream_t stream) {
  int id = g16_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "gemm16: the kernels did not register");
  const int f16 = p->d_dtype == TECORE_DTYPE_F16, nk = p->b.sk != 1;
  int epi = g16_epi(p);
  const int wide = epi == EPI_DMUL && tecore_tunable_int(&gemm16_wide_param);
  const size_t part_bytes = g16_part_bytes(p);
  if (epi < 0 || part_bytes > ws_bytes || ws % 16)
    return TE_ERR(TECORE_ERR_INTERNAL, "gemm16: a problem te_gemm16_takes refuses");
  struct te_gemm16_params kp = {
      .d = TE_DPTR(p->d),
      .bias = te_gemm_epi_has_bias_in(p->epilogue) ? TE_DPTR(p->bias) : NULL,
      .aux = TE_DPTR(p->aux), .part = part_bytes ? TE_DPTR(ws) : NULL,
      .ldd = (long long)p->n, .m = (int)p->m, .n = (int)p->n, .k = (int)p->k,
      .alpha = p->alpha};
  /* A [m][k] in boxes of 128 rows; B [n][k] in boxes of 256 rows, or B
   * [k][n] in boxes of 64 k-rows x 64 columns */
  TE_CHECK(g16_tmap(&kp.ta, f16, p->a.data, p->k, p->m, p->a.si, TE_GEMM16_BM));
  if (nk)
    TE_CHECK(g16_tmap(&kp.tb, f16, p->b.data, p->n, p->k, p->b.sk, TE_GEMM16_BK));
  else
    TE_CHECK(g16_tmap(&kp.tb, f16, p->b.data, p->k, p->n, p->b.si, TE_GEMM16_BN));
  /* the wide kernel's aux [m][n] in boxes of 128 rows x 64 columns */
  if (wide) {
    TE_CHECK(g16_tmap(&kp.tx, f16, p->aux, p->n, p->m, p->n, TE_GEMM16_BM));
    epi = EPI_DMULW;
  }
  const size_t tiles = p->m / TE_GEMM16_BM * (p->n / TE_GEMM16_BN);
  /* persistent blocks: one an SM, each taking every grid-th output block */
  CUdevice dev;
  int sms = 0;
  TE_CHECK(te_cuda_current_device(&dev));
  TE_CHECK(te_cuda_device_sms(dev, &sms));
  size_t grid = (size_t)(sms > 0 ? sms : 1);
  if (grid > tiles) grid = tiles;
  struct tecore_launch_cfg cfg = {
      .grid = {(unsigned)grid, 1, 1},
      .block = {wide ? TE_GEMM16_THREADS_W : TE_GEMM16_THREADS, 1, 1},
      .shared_bytes = wide ? TE_GEMM16_SMEM_W : TE_GEMM16_SMEM};
  struct te_gemm16_args a = {.p = &kp};
  void *args[TE_KNPARAMS(TE_GEMM16_PARAMS)];
  te_gemm16_args_ptrs(&a, args);
  TE_CHECK(te_kernel_launch_pdl(id + (f16 * 2 + nk) * G16_EPIS + epi, &cfg, args, stream));
  if (!part_bytes) return TECORE_SUCCESS;

  struct te_gemm16_bgrad_args b = {.out = TE_DPTR(p->bias), .part = TE_DPTR(ws),
                                   .dtype = (int)p->bias_dtype,
                                   .parts = (int)(p->m / TE_GEMM16_BM), .cols = (int)p->n};
  struct tecore_launch_cfg bc = {
      .grid = {(unsigned)((p->n + TE_GEMM16_BG_COLS - 1) / TE_GEMM16_BG_COLS), 1, 1},
      .block = {TE_GEMM16_BG_COLS, TE_GEMM16_BG_LANES, 1}};
  void *bargs[TE_KNPARAMS(TE_GEMM16_BGRAD_PARAMS)];
  te_gemm16_bgrad_args_ptrs(&b, bargs);
  return te_kernel_launch_pdl(id + K_BGRAD, &bc, bargs, stream);
}
