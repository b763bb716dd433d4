/* SPDX-License-Identifier: Apache-2.0 */
/* te/core.h -- libtecore: the device layer, tensors, FP8 kernels, errors,
 * logging and tunables.  Link with `pkg-config --libs te-core`. */
#ifndef TE_CORE_H
#define TE_CORE_H

#include <te/version.h>
#include <te/result.h>
#include <te/log.h>
#include <te/tunable.h>
#include <te/dtype.h>
#include <te/device.h>
#include <te/kernel.h>
#include <te/elementwise.h>
#include <te/tensor.h>
#include <te/recipe.h>
#include <te/fp8.h>
#include <te/gemm.h>
#include <te/activation.h>
#include <te/norm.h>
#include <te/attention.h>
#include <te/transpose.h>
#include <te/optim.h>
#include <te/rope.h>
#include <te/embedding.h>
#include <te/loss.h>
#include <te/ops.h>
#include <te/transformer.h>
#include <te/svc.h>
#include <te/convert.h>
#include <te/profile.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Version of the library at run time (compare with TECORE_VERSION_*). */
void tecore_version(int *major, int *minor, int *patch);
const char *tecore_version_string(void);
/* The build's configuration: "cuda=yes arch=... debug=no ...". */
const char *tecore_build_config(void);

#ifdef __cplusplus
}
#endif
#endif
