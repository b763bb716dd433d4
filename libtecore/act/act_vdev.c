/* SPDX-License-Identifier: Apache-2.0 */
/* act_vdev.c -- the vdev twins of kernels/act.cu: each activation's
 * forward and backward over the whole tensor, from the same
 * kernels/common/act.h math (act.c's table names them). */
#include "act/act_internal.h"
#include "common/ldst.h"
#include "common/colsum.h"

/* ---- vdev implementations ------------------------------------------------------
 * Parameters: kernels/common/act_params.h.  vec only picks the GPU's access
 * width: the values are the same. */

/* scale is 1 unless the output is FP8 (y * 1 is y: the GPU's loops have
 * no branch there either). */
struct act_vout {
  void *p;
  int dtype;
  float scale;
  float amax;
};

static void act_vput(struct act_vout *o, uint64_t i, float y) {
  o->amax = te_amax_f32(o->amax, y);
  te_st(o->p, i, o->dtype, te_mul_rn(y, o->scale));
}

static void act_vdev_fwd(int kind, void *const *args) {
  const struct te_act_fwd_args a = te_act_fwd_args_of(args);
  const void *in = a.in;
  const float *scale = a.scale;
  unsigned *amax = a.amax;
  float *scale_inv = a.scale_inv;
  unsigned long long rows = a.rows, cols = a.cols;
  int dtypes = a.dtypes, din = dtypes & 0xf;
  if (a.noop && *a.noop != 0) return;
  struct act_vout o = {a.out, (dtypes >> 4) & 0xf, 1.0f, 0.0f};
  if (te_dt_is_fp8(o.dtype) && scale) o.scale = *scale;
  if (scale_inv && scale) *scale_inv = te_fp8_scale_inv(*scale);
  if (!te_act_is_gated(kind)) {
    for (uint64_t i = 0, n = rows * cols; i < n; i++) act_vput(&o, i, te_act_fwd(kind, te_ld(in, i, din)));
  } else {
    for (uint64_t r = 0; r < rows; r++)
      for (uint64_t c = 0; c < cols; c++) {
        uint64_t ia = r * 2 * cols + c;
        act_vput(&o, r * cols + c,
                 te_act_gated_fwd(kind, te_ld(in, ia, din), te_ld(in, ia + cols, din)));
      }
  }
  if (amax && te_abs_bits(o.amax)) te_vdev_amax_update(amax, te_abs_bits(o.amax));
}

static void act_vdev_bwd(int kind, void *const *args) {
  const struct te_act_bwd_args a = te_act_bwd_args_of(args);
  const void *dy = a.dy, *x = a.x;
  const float *scale = a.scale;
  unsigned *amax = a.amax;
  float *scale_inv = a.scale_inv;
  unsigned long long rows = a.rows, cols = a.cols;
  int dtypes = a.dtypes, ddy = dtypes & 0xf, dxin = (dtypes >> 4) & 0xf;
  struct act_vout o = {a.dx, (dtypes >> 8) & 0xf, 1.0f, 0.0f};
  if (te_dt_is_fp8(o.dtype) && scale) o.scale = *scale;
  if (scale_inv && scale) *scale_inv = te_fp8_scale_inv(*scale);
  if (!te_act_is_gated(kind)) {
    for (uint64_t i = 0, n = rows * cols; i < n; i++)
      act_vput(&o, i, te_act_bwd(kind, te_ld(x, i, dxin), te_ld(dy, i, ddy)));
  } else {
    for (uint64_t r = 0; r < rows; r++)
      for (uint64_t c = 0; c < cols; c++) {
        uint64_t ia = r * 2 * cols + c;
        float da, db;
        te_act_gated_bwd(kind, te_ld(x, ia, dxin), te_ld(x, ia + cols, dxin),
                         te_ld(dy, r * cols + c, ddy), &da, &db);
        act_vput(&o, ia, da);
        act_vput(&o, ia + cols, db);
      }
  }
  if (amax && te_abs_bits(o.amax)) te_vdev_amax_update(amax, te_abs_bits(o.amax));
}

/* te_act_bwd_colsum_<kind>: the kernel's values and its order of sums
 * (te_colsum_part's: per column, lane l adds rows r0 + l, + lanes, ...;
 * then the lanes in order). */
struct act_cs {
  struct te_act_bwd_colsum_args a;
  int kind;
};

/* element i's dx, written, then read back as stored */
static float act_cs_val(void *ctx, uint64_t i) {
  const struct act_cs *c = ctx;
  const struct te_act_bwd_colsum_args *a = &c->a;
  te_st(a->dx, i, a->dtype, te_act_bwd(c->kind, te_ld(a->x, i, a->dtype), te_ld(a->dy, i, a->dtype)));
  return te_ld(a->dx, i, a->dtype);
}

static void act_vdev_bwd_colsum(int kind, void *const *args) {
  struct act_cs c = {te_act_bwd_colsum_args_of(args), kind};
  te_colsum_parts_host(c.a.ws, c.a.rows, c.a.cols, c.a.rpp, act_cs_val, &c);
}

#define ACT_VDEV(name, KIND)                                                                  \
  void te_act_vdev_fwd_##name(const struct tecore_launch_cfg *cfg, void *const *args) {   \
    (void)cfg;                                                                                \
    act_vdev_fwd(KIND, args);                                                                 \
  }                                                                                           \
  void te_act_vdev_bwd_##name(const struct tecore_launch_cfg *cfg, void *const *args) {   \
    (void)cfg;                                                                                \
    act_vdev_bwd(KIND, args);                                                                 \
  }
ACT_VDEV(gelu, TE_ACT_GELU)
ACT_VDEV(relu, TE_ACT_RELU)
ACT_VDEV(silu, TE_ACT_SILU)
ACT_VDEV(qgelu, TE_ACT_QGELU)
ACT_VDEV(swiglu, TE_ACT_SWIGLU)
ACT_VDEV(geglu, TE_ACT_GEGLU)
ACT_VDEV(reglu, TE_ACT_REGLU)

#define ACT_VDEV_COLSUM(name, KIND)                                                            \
  void te_act_vdev_bwd_colsum_##name(const struct tecore_launch_cfg *cfg, void *const *args) { \
    (void)cfg;                                                                                 \
    act_vdev_bwd_colsum(KIND, args);                                                           \
  }
ACT_VDEV_COLSUM(gelu, TE_ACT_GELU)
ACT_VDEV_COLSUM(relu, TE_ACT_RELU)
ACT_VDEV_COLSUM(silu, TE_ACT_SILU)
ACT_VDEV_COLSUM(qgelu, TE_ACT_QGELU)
