/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_ops.c -- te_cuda_ops: the cuda backend's ops table (the CUDA Driver
 * API, dlopen'ed), generated from the one op list (TE_DEVICE_OPS in
 * device_ops.h).  The ops live in the other files of this folder, one job
 * a file (cuda_backend.h says which). */
#include "cuda_backend.h"

TE_DEVICE_OPS_TABLE(cuda, TECORE_BACKEND_CUDA);
