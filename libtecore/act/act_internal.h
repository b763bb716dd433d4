/* act_internal.h -- private helpers shared by the activation and norm
 * families (libtecore/act, libtecore/norm): argument checks for their
 * input and output tensors, the vdev amax update, and the fatbin symbols
 * of libtecore/act/fatbins.S. */
#ifndef TECORE_ACT_INTERNAL_H
#define TECORE_ACT_INTERNAL_H

#include "fp8/fp8_internal.h"

#ifdef TE_HAVE_CUDA
extern const unsigned char te_fatbin_act[], te_fatbin_act_end[];
extern const unsigned char te_fatbin_norm[], te_fatbin_norm_end[];
#endif

/* An input: rowwise data of F32, F16 or BF16, scaling NONE. */
tecore_result_t te_act_check_in(const struct tecore_tensor *t, const char *fn, const char *arg);
/* An output: F32/F16/BF16 with scaling NONE, or E4M3/E5M2 with DELAYED
 * scaling (scale and scale_inv set) or CURRENT scaling (scale, scale_inv
 * and amax set); no columnwise data. */
tecore_result_t te_act_check_out(const struct tecore_tensor *t, const char *fn, const char *arg);

/* The FP8 pointers one launch of an activation or norm kernel gets for its
 * output t.  NONE and DELAYED take one launch.  CURRENT takes two over the
 * same input: the first (after *amax = 0) finds the amax of the unscaled
 * output, with scale and scale_inv 0 (the kernels then scale by 1: its
 * bytes are overwritten); then the scale kernel sets scale and scale_inv
 * from that amax; the second writes the bytes with that scale, amax and
 * scale_inv 0 (both already final).  te_qout_begin queues the small
 * kernels that come before launch `pass` and fills q. */
struct te_qout {
  void *scale, *amax, *scale_inv;
};
static inline int te_qout_passes(const struct tecore_tensor *t) {
  return t->scaling == TECORE_SCALING_CURRENT ? 2 : 1;
}
tecore_result_t te_qout_begin(const struct tecore_tensor *t, int pass, tecore_devptr_t noop,
                              tecore_stream_t stream, struct te_qout *q);

/* 1 when p is 16-byte aligned (0 counts as aligned: absent). */
static inline int te_al16(tecore_devptr_t p) { return (p & 15u) == 0; }

/* *amax = max(*amax, v) for amax bits (te_abs_bits), atomically: the vdev
 * counterpart of the kernels' atomicMax. */
static inline void te_vdev_amax_update(unsigned *amax, uint32_t v) {
  unsigned cur = __atomic_load_n(amax, __ATOMIC_RELAXED);
  while (v > cur &&
         !__atomic_compare_exchange_n(amax, &cur, v, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
  }
}

#endif
