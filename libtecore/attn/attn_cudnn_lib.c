/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_lib.c -- the TECORE_CUDNN_LIB tunable: which cuDNN
 * attn_cudnn_load.c opens, TECORE_CUDNN_ENGINE_CFG: which engine
 * configuration attn_cudnn_plan.c takes, and TECORE_CUDNN_MASK_VALUE:
 * what attn_cudnn_graph.c's masks write.  Registered in every build, so
 * that te-info -e lists them whether or not CUDA was found; read only
 * where cuDNN can load.
 * A file of its own so that the loader, below the cudnn row
 * (attn_cudnn.c), calls nothing above it. */
#include "internal.h"

TE_PARAM_STR(cudnn_lib, "TECORE_CUDNN_LIB", "", NULL,
             "cuDNN (9.1 or newer) to dlopen for attention: a path or a soname "
             "(default: libcudnn.so.9)")

TE_PARAM_INT(dnn_cfg_param, "TECORE_CUDNN_ENGINE_CFG", 0, 0, 7,
             "which of the engine configurations cuDNN's heuristics rank (mode A) an attention "
             "plan runs: 0 the first that finalizes (the default), k the k-th of those that "
             "finalize (the last one when fewer do); for comparing cuDNN's engines")

TE_PARAM_STR(dnn_mask_param, "TECORE_CUDNN_MASK_VALUE", "auto", "auto|inf|lowest",
             "the score cuDNN attention graphs give a masked (causal, window) position: "
             "lowest (-FLT_MAX) or inf (-infinity); auto: lowest before cuDNN 9.10, else "
             "-infinity; for comparing what cuDNN's engines take")

#ifdef TE_HAVE_CUDA
#include "attn/attn_cudnn_api.h"
#include <string.h>

const char *te_dnn_lib_name(void) { return tecore_tunable_str(&cudnn_lib); }
int te_dnn_engine_cfg(void) { return (int)tecore_tunable_int(&dnn_cfg_param); }
int te_dnn_mask_choice(void) {
  const char *v = tecore_tunable_str(&dnn_mask_param);
  return !strcmp(v, "lowest") ? TE_DNN_MASK_LOWEST
         : !strcmp(v, "inf")  ? TE_DNN_MASK_INF
                              : TE_DNN_MASK_AUTO;
}
#endif
