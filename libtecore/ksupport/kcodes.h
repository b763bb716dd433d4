/* SPDX-License-Identifier: Apache-2.0 */
/* kcodes.h -- the codes the kernels use are the public enums' values.
 * Kernels (the headers of kernels/common, shared with nvcc) cannot include
 * the public headers, so they carry their own numbers for dtypes,
 * activations and batch sizes; the host passes the public values straight
 * through ((int)t->dtype, (int)act).  These checks, in every family that
 * includes the kernel-support layer, fail the build where the two drift
 * apart. */
#ifndef TECORE_KSUPPORT_KCODES_H
#define TECORE_KSUPPORT_KCODES_H

#include <te/core.h>
#include "common/fp8.h"
#include "common/elementwise.h"
#include "common/act.h"
#include "common/optim.h"

/* Element types (kernels/common/fp8.h, elementwise.h). */
_Static_assert(TE_FP8_DT_F32 == TECORE_DTYPE_F32 && TE_FP8_DT_F16 == TECORE_DTYPE_F16 &&
                   TE_FP8_DT_BF16 == TECORE_DTYPE_BF16 && TE_FP8_DT_E4M3 == TECORE_DTYPE_E4M3 &&
                   TE_FP8_DT_E5M2 == TECORE_DTYPE_E5M2,
               "TE_FP8_DT_* differ from tecore_dtype_t");
_Static_assert(TE_EW_F32 == TECORE_DTYPE_F32 && TE_EW_F16 == TECORE_DTYPE_F16 &&
                   TE_EW_BF16 == TECORE_DTYPE_BF16,
               "TE_EW_* differ from tecore_dtype_t");
/* Packed dtype words (norms, activations, cast-transpose flags) hold 4 bits
 * a type. */
_Static_assert(TECORE_DTYPE_COUNT_ <= 16, "a dtype no longer fits the kernels' 4-bit fields");

/* Activations (kernels/common/act.h). */
_Static_assert(TE_ACT_GELU == TECORE_ACT_GELU && TE_ACT_RELU == TECORE_ACT_RELU &&
                   TE_ACT_SILU == TECORE_ACT_SILU && TE_ACT_QGELU == TECORE_ACT_QGELU &&
                   TE_ACT_SWIGLU == TECORE_ACT_SWIGLU && TE_ACT_GEGLU == TECORE_ACT_GEGLU &&
                   TE_ACT_REGLU == TECORE_ACT_REGLU && TE_ACT_COUNT == TECORE_ACT_COUNT_,
               "TE_ACT_* differ from tecore_activation_t");

/* Optimizer batches (kernels/common/optim.h). */
_Static_assert(TE_OPTIM_MAX == TECORE_OPTIM_BATCH, "TECORE_OPTIM_BATCH differs from the kernels'");

#endif
