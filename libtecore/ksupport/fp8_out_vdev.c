/* SPDX-License-Identifier: Apache-2.0 */
/* fp8_out_vdev.c -- the vdev twins of kernels/fp8_scale.cu: the amax
 * reset and the scale from an amax of the FP8 output protocol (fp8_out.c's
 * table names them). */
#include "ksupport/fp8_out.h"

void te_fp8_out_vdev_amax_init(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_amax_init_args a = te_amax_init_args_of(args);
  (void)cfg;
  if (a.noop && *a.noop) return;
  __atomic_store_n(a.amax, 0u, __ATOMIC_RELAXED);
}

void te_fp8_out_vdev_compute_scale(const struct tecore_launch_cfg *cfg, void *const *args) {
  const struct te_compute_scale_args a = te_compute_scale_args_of(args);
  (void)cfg;
  if (a.noop && *a.noop) return;
  float s = te_fp8_current_scale(te_bits_f32(*a.amax), a.eps, a.fp8_max, a.pow2);
  float si = te_fp8_scale_inv(s);
  *a.scale = s;
  if (a.scale_inv) *a.scale_inv = si;
  if (a.scale_inv_col) *a.scale_inv_col = si;
}
