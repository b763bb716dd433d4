/* transpose_internal.h -- private interface of the cast-transpose family
 * (libtecore/transpose): the kernels' parameter layout shared by the
 * launch code and the vdev implementation, the vdev functions, and an
 * entry that other libtecore code (tecore_quantize with a columnwise
 * output) may call to reuse these kernels. */
#ifndef TECORE_TRANSPOSE_INTERNAL_H
#define TECORE_TRANSPOSE_INTERNAL_H

#include "fp8/fp8_internal.h"

/* Parameters of every te_ct_* kernel (kernels/transpose.cu, CT_PARAMS). */
enum {
  TE_CT_P_IN,      /* const void *: input, or dy */
  TE_CT_P_X,       /* const void *: x of the activation, or NULL */
  TE_CT_P_OROW,    /* uint8_t *: rowwise FP8 output, or NULL */
  TE_CT_P_OCOL,    /* uint8_t *: columnwise FP8 output, or NULL */
  TE_CT_P_SCALE,   /* const float *: per-tensor scale (NULL for MXFP8) */
  TE_CT_P_AMAX,    /* unsigned *: amax bits to max-accumulate, or NULL */
  TE_CT_P_SINV,    /* float * (per-tensor) or E8M0 [rows][cdiv(cols,32)] (MXFP8) */
  TE_CT_P_CSINV,   /* float * (per-tensor) or E8M0 [cdiv(rows,32)][cols] (MXFP8) */
  TE_CT_P_WS,      /* float [grid_y][cols]: dbias partials, or NULL */
  TE_CT_P_ROWS,    /* unsigned long long */
  TE_CT_P_COLS,    /* unsigned long long */
  TE_CT_P_TPB,     /* unsigned: row tiles per block */
  TE_CT_P_FLAGS,   /* unsigned: TE_CT_F_* (kernels/common/transpose.h) */
  TE_CT_NPARAMS
};
/* Parameters of te_ct_dbias_reduce. */
enum { TE_CTR_P_WS, TE_CTR_P_DBIAS, TE_CTR_P_PARTS, TE_CTR_P_COLS, TE_CTR_P_DTYPE, TE_CTR_NPARAMS };

/* The vdev implementations (libtecore/transpose/transpose_vdev.c): one
 * function serves every te_ct_* kernel (the flags word names the variant). */
void te_ct_vdev(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ct_vdev_dbias_reduce(const struct tecore_launch_cfg *cfg, void *const *args);

#endif
