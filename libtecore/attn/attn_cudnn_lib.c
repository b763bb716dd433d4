/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_lib.c -- the TECORE_CUDNN_LIB tunable: which cuDNN
 * attn_cudnn_load.c opens.  Registered in every build, so that te-info -e
 * lists it whether or not CUDA was found; read only where cuDNN can load.
 * A file of its own so that the loader, below the cudnn row
 * (attn_cudnn.c), calls nothing above it. */
#include "internal.h"

TE_PARAM_STR(cudnn_lib, "TECORE_CUDNN_LIB", "", NULL,
             "cuDNN (9.1 or newer) to dlopen for attention: a path or a soname "
             "(default: libcudnn.so.9)")

#ifdef TE_HAVE_CUDA
#include "attn/attn_cudnn_api.h"

const char *te_dnn_lib_name(void) { return tecore_tunable_str(&cudnn_lib); }
#endif
