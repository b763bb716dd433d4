/* SPDX-License-Identifier: Apache-2.0 */
/* ksupport.h -- the kernel-support layer: what every kernel family of
 * libtecore (elementwise, quantize, cast-transpose, activations, norms,
 * optimizers, GEMM) needs and none of them owns.  It sits below the
 * families and above the device layer; the families include this header
 * and depend only downward (no file of ksupport calls into a family).
 *
 *   tensor checks   te_tensor_check, te_tensor_view      (tensor_check.c)
 *   dtype rules     te_dtype_is_fp8, te_dtype_is_hp, ...  (below, inline)
 *   I/O checks      te_check_hp_input, te_check_fused_output (io_check.c)
 *   FP8 outputs     te_qout_passes, te_qout_begin, te_fp8_amax_zero,
 *                   te_fp8_scale_from_amax                (fp8_out.c)
 *   aliasing        te_check_spans, te_check_alias        (alias.c; the
 *                   rule itself: span.h, span.c)
 *   grids           te_sm_count                           (grid.c)
 *   vdev helpers    te_vdev_amax_update                   (below, inline)
 *   kernel codes    TE_FP8_DT_* ... are the public values (kcodes.h)
 *   kernel params   TE_KDEF, TE_KARGS (kernels/common/kparams.h: each
 *                   kernel's parameters declared once, for nvcc and C)
 *
 * Every check returns TECORE_ERR_INVALID (or NOT_SUPPORTED where said)
 * with a detail that reads "<fn>: <arg>: <what is wrong>", fn and arg
 * being the public function and argument the caller names. */
#ifndef TECORE_KSUPPORT_H
#define TECORE_KSUPPORT_H

#include "internal.h"
#include "ksupport/kcodes.h"

/* ---- grids -------------------------------------------------------------------- */
/* Multiprocessors of device 0 (132 on an H100 SXM; 132 when the device
 * cannot say), read once. */
unsigned te_sm_count(void);

/* ---- tensor checks and the 2-D view ---------------------------------------- */

/* tecore_tensor_validate's checks (flags TECORE_TENSOR_*) with a detail
 * naming fn and arg. */
tecore_result_t te_tensor_check(const struct tecore_tensor *t, unsigned flags, const char *fn,
                                const char *arg);
/* The descriptor's rules alone (no memory is looked at): what
 * tecore_tensor_validate and the DLPack functions check.  te_tensor_check
 * adds, on vdev with TECORE_VDEV_CHECK, that each buffer holds the bytes
 * the shape implies (reported by the next launch). */
tecore_result_t te_tensor_check_desc(const struct tecore_tensor *t, unsigned flags,
                                     const char *fn, const char *arg);

/* The 2-D view of a tensor already checked: rows = the product of all
 * dimensions but the last, cols = the last (1 x 1 for ndim 0). */
void te_tensor_view(const struct tecore_tensor *t, size_t *rows, size_t *cols);
/* The shape and dtype of a checked tensor's scale array (rowwise, or
 * columnwise 1); 0 x 0 for a scaling mode without one. */
void te_tensor_scale_shape(const struct tecore_tensor *t, int columnwise, size_t *sr, size_t *sc,
                           tecore_dtype_t *dt);

/* The product of t's shape (t's ndim already in range), or SIZE_MAX when
 * it overflows size_t. */
size_t te_tensor_count(const struct tecore_tensor *t);

/* A device address as the pointer a kernel parameter holds. */
#define TE_DPTR(x) ((void *)(uintptr_t)(x))

/* ---- dtype and scaling predicates -------------------------------------------- */

/* 1 for the two per-tensor modes. */
static inline int te_scaling_per_tensor(tecore_scaling_mode_t m) {
  return m == TECORE_SCALING_DELAYED || m == TECORE_SCALING_CURRENT;
}
/* 1 for the two block modes (1x128, 128x128 FP32 scales). */
static inline int te_scaling_block(tecore_scaling_mode_t m) {
  return m == TECORE_SCALING_BLOCK_1X128 || m == TECORE_SCALING_BLOCK_128X128;
}
static inline int te_dtype_is_fp8(tecore_dtype_t d) {
  return d == TECORE_DTYPE_E4M3 || d == TECORE_DTYPE_E5M2;
}
/* The high-precision types every kernel family reads (and writes unscaled). */
static inline int te_dtype_is_hp(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 || d == TECORE_DTYPE_F16 || d == TECORE_DTYPE_BF16;
}
static inline size_t te_cdiv(size_t a, size_t b) { return (a + b - 1) / b; }
/* 1 when p is 16-byte aligned (0 counts as aligned: absent). */
static inline int te_al16(tecore_devptr_t p) { return (p & 15u) == 0; }

/* ---- input and output checks of the element-wise families ------------------- */

/* An input: rowwise data of F32, F16 or BF16, scaling NONE. */
tecore_result_t te_check_hp_input(const struct tecore_tensor *t, const char *fn, const char *arg);

/* An output a fused kernel writes rowwise (activations, norms):
 * F32/F16/BF16 with scaling NONE, or E4M3/E5M2 with DELAYED scaling
 * (scale and scale_inv set) or CURRENT scaling (scale, scale_inv and amax
 * set); no columnwise data.  Other modes: TECORE_ERR_INVALID pointing at
 * tecore_quantize. */
tecore_result_t te_check_fused_output(const struct tecore_tensor *t, const char *fn,
                                      const char *arg);

/* ---- the FP8 output-pass protocol ------------------------------------------------
 * A kernel that writes an FP8 output t with a per-tensor scale takes, for
 * each launch, the pointers scale, amax and scale_inv of struct te_qout:
 *   NONE, DELAYED: one launch (pass 0) with t's scale, amax and scale_inv;
 *   CURRENT: two launches over the same input.  Pass 0 (after *amax = 0)
 *     finds the amax of the unscaled output, with scale and scale_inv NULL
 *     (the kernel then scales by 1; its bytes are overwritten).  Then the
 *     scale kernel sets scale and scale_inv from that amax.  Pass 1 writes
 *     the bytes with that scale, amax and scale_inv NULL (both final).
 * The loop of a launching family:
 *   for (int pass = 0; pass < te_qout_passes(t); pass++) {
 *     struct te_qout q;
 *     TE_CHECK(te_qout_begin(t, pass, noop, stream, &q));
 *     ... launch with q.scale, q.amax, q.scale_inv ...
 *   }
 * te_qout_begin queues the small kernels that come before launch `pass`
 * (the amax reset, the scale) and fills q. */
struct te_qout {
  void *scale, *amax, *scale_inv;
};
static inline int te_qout_passes(const struct tecore_tensor *t) {
  return t->scaling == TECORE_SCALING_CURRENT ? 2 : 1;
}
tecore_result_t te_qout_begin(const struct tecore_tensor *t, int pass, tecore_devptr_t noop,
                              tecore_stream_t stream, struct te_qout *q);

/* Current scaling's two small steps, also for the families that run their
 * own amax pass: *amax = 0, and scale / scale_inv (and columnwise_scale_inv
 * when set) from t's amax, amax_epsilon and TECORE_TENSOR_POW2_SCALES.
 * Both skip when noop points at a nonzero int (noop may be 0).  t is
 * already checked. */
tecore_result_t te_fp8_amax_zero(tecore_devptr_t amax, tecore_devptr_t noop,
                                 tecore_stream_t stream);
tecore_result_t te_fp8_scale_from_amax(const struct tecore_tensor *t, tecore_devptr_t noop,
                                       tecore_stream_t stream);

/* ---- aliasing -----------------------------------------------------------------------
 * The rule and the span type are span.h's (shared with libtegraph): a
 * span is a named byte range of device memory an operation reads or
 * writes; p == 0 or bytes == 0 is an absent span, which overlaps nothing.
 * Every family checks its call's spans before any launch, so a refused
 * call queues nothing and leaves its outputs as they were. */
#include "ksupport/span.h"

/* Checks one call's spans (each with its access and in-place pair, span.h):
 * the first conflict fails with TECORE_ERR_INVALID and the detail
 * "<fn>: <written> overlaps <other>", both named as the caller names them:
 *   struct te_tensor_spans l = {.access = TE_ACCESS_WRITE};
 *   te_tensor_spans(out, "out", TE_SPAN_WRITTEN, &l);
 *   l.access = TE_ACCESS_READ;
 *   te_tensor_spans(in, "in", TE_SPAN_DATA, &l);
 *   TE_CHECK(te_check_spans(l.span, l.n, __func__)); */
tecore_result_t te_check_spans(const struct te_span *s, size_t n, const char *fn);

/* What te_check_alias lets an output share with an input. */
enum te_alias_rule {
  TE_ALIAS_FORBID,     /* nothing: any overlap is an error */
  TE_ALIAS_EXACT_OK,   /* exactly the same range (same p, same bytes): in place */
};

/* te_check_spans of nout outputs (written) and nin inputs (read), with
 * every output allowed to be exactly any input under TE_ALIAS_EXACT_OK
 * (outputs never share a byte). */
tecore_result_t te_check_alias(const struct te_span *out, size_t nout, const struct te_span *in,
                               size_t nin, enum te_alias_rule rule, const char *fn);

/* The spans of the buffers a tensor names (alias_tensor.c), named
 * "<arg>-><field>": data and columnwise_data (the shape's bytes), amax and
 * scale (a float), scale_inv and columnwise_scale_inv (a float per tensor;
 * the first byte of block scales).  which: TE_SPAN_* bits.  Appends to s
 * (zero it first) with s->access and s->pair; absent buffers are skipped. */
#define TE_TENSOR_SPANS_MAX 48
#define TE_SPAN_DATA 0x1u
#define TE_SPAN_AMAX 0x2u
#define TE_SPAN_SCALE 0x4u
#define TE_SPAN_SCALE_INV 0x8u
#define TE_SPAN_ALL 0xfu
/* What a kernel writes through an FP8 output (its scale is read, for
 * delayed scaling, or written by a separate kernel: an input either way). */
#define TE_SPAN_WRITTEN (TE_SPAN_DATA | TE_SPAN_AMAX | TE_SPAN_SCALE_INV)
struct te_tensor_spans {
  unsigned access, pair;   /* given to the spans appended next (span.h) */
  size_t n;
  struct te_span span[TE_TENSOR_SPANS_MAX];
  char names[TE_TENSOR_SPANS_MAX][64];
};
void te_tensor_spans(const struct tecore_tensor *t, const char *arg, unsigned which,
                     struct te_tensor_spans *s);
/* Appends one named span (a workspace, a vector). */
void te_span_add(struct te_tensor_spans *s, const char *name, tecore_devptr_t p, size_t bytes);

/* ---- vdev helpers ------------------------------------------------------------------- */

/* *amax = max(*amax, v) for amax bits (te_abs_bits of kernels/common/fp8.h),
 * atomically: the vdev counterpart of the kernels' atomicMax (several
 * streams' workers may update one amax). */
static inline void te_vdev_amax_update(unsigned *amax, uint32_t v) {
  unsigned cur = __atomic_load_n(amax, __ATOMIC_RELAXED);
  while (v > cur &&
         !__atomic_compare_exchange_n(amax, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

#endif
