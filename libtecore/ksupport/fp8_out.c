/* fp8_out.c -- the FP8 output-pass protocol of ksupport.h (amax pass,
 * scale, bytes pass) and the two small kernels it queues: the amax reset
 * and the scale from an amax (kernels/fp8_scale.cu on cuda, the vdev
 * functions below, both from kernels/common/fp8.h).  Quantize, the
 * activations, the norms and the cast-transpose family use them, so they
 * live below all four. */
#include "ksupport/ksupport.h"
#include "common/fp8.h"

/* ---- vdev kernels ------------------------------------------------------------ */

#define ARG(T, i) (*(T const *)args[i])

static int vdev_noop(const int *noop) { return noop && *noop; }

static void vdev_amax_init(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  if (vdev_noop(ARG(const int *, 1))) return;
  __atomic_store_n(ARG(unsigned *, 0), 0u, __ATOMIC_RELAXED);
}

static void vdev_compute_scale(const struct tecore_launch_cfg *cfg, void *const *args) {
  (void)cfg;
  if (vdev_noop(ARG(const int *, 7))) return;
  float s = te_fp8_current_scale(te_bits_f32(*ARG(const unsigned *, 0)), ARG(float, 4),
                                 ARG(float, 5), ARG(int, 6));
  float si = te_fp8_scale_inv(s);
  *ARG(float *, 1) = s;
  if (ARG(float *, 2)) *ARG(float *, 2) = si;
  if (ARG(float *, 3)) *ARG(float *, 3) = si;
}

/* ---- the table ------------------------------------------------------------------ */

enum { K_AMAX_INIT, K_SCALE };
static const struct tecore_kernel_def fs_kernels[] = {
    [K_AMAX_INIT] = {.name = "te_fp8_amax_init", .vdev = vdev_amax_init, .nparams = 2,
                     .param_size = {8, 8}, .param_is_ptr = {1, 1}},
    [K_SCALE] = {.name = "te_fp8_compute_scale", .vdev = vdev_compute_scale, .nparams = 8,
                 .param_size = {8, 8, 8, 8, 4, 4, 4, 8}, .param_is_ptr = {1, 1, 1, 1, 0, 0, 0, 1}},
};

TE_KERNEL_TABLE_FATBIN(fs_first_id, "libtecore/fp8_scale", fs_kernels, fp8_scale)

/* One thread's work, launched as one block of 256 threads (the shape the
 * quantize kernels have always had: graphs captured before compare equal). */
static tecore_result_t fs_launch(int k, void **args, tecore_stream_t stream) {
  int id = fs_first_id();
  if (id < 0) return TE_ERR(TECORE_ERR_INTERNAL, "FP8 scale kernel table could not be registered");
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
  TE_CHECK(tecore_kernel_launch(id + k, &cfg, args, stream));
  return TECORE_SUCCESS;
}

#define P(x) ((void *)(uintptr_t)(x))

tecore_result_t te_fp8_amax_zero(tecore_devptr_t amax, tecore_devptr_t noop,
                                 tecore_stream_t stream) {
  void *a = P(amax), *nf = P(noop);
  void *args[] = {&a, &nf};
  return fs_launch(K_AMAX_INIT, args, stream);
}

tecore_result_t te_fp8_scale_from_amax(const struct tecore_tensor *t, tecore_devptr_t noop,
                                       tecore_stream_t stream) {
  void *a = P(t->amax), *s = P(t->scale), *si = P(t->scale_inv), *sc = P(t->columnwise_scale_inv);
  void *nf = P(noop);
  float eps = t->amax_epsilon, fmax = te_fp8_max((int)t->dtype);
  int pow2 = (t->flags & TECORE_TENSOR_POW2_SCALES) ? 1 : 0;
  void *args[] = {&a, &s, &si, &sc, &eps, &fmax, &pow2, &nf};
  return fs_launch(K_SCALE, args, stream);
}

/* ---- the protocol ------------------------------------------------------------------ */

tecore_result_t te_qout_begin(const struct tecore_tensor *t, int pass, tecore_devptr_t noop,
                              tecore_stream_t stream, struct te_qout *q) {
  q->scale = q->scale_inv = NULL;
  q->amax = P(t->amax);
  if (t->scaling == TECORE_SCALING_DELAYED) {
    q->scale = P(t->scale);
    q->scale_inv = P(t->scale_inv);
  } else if (t->scaling == TECORE_SCALING_CURRENT) {
    if (pass == 0) {
      TE_CHECK(te_fp8_amax_zero(t->amax, noop, stream));
    } else {
      TE_CHECK(te_fp8_scale_from_amax(t, noop, stream));
      q->scale = P(t->scale);
      q->amax = NULL;
    }
  }
  return TECORE_SUCCESS;
}
