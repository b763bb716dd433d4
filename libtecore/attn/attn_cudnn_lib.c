/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_lib.c -- the TECORE_CUDNN_LIB tunable: which cuDNN
 * attn_cudnn_load.c opens, TECORE_CUDNN_ENGINE_CFG: which engine
 * configuration attn_cudnn_plan.c takes, and TECORE_CUDNN_MASK_VALUE:
 * what attn_cudnn_graph.c's masks write, and
 * TECORE_CUDNN_FP8_CAUSAL_MAX_TILES: which causal E4M3 forwards cuDNN may
 * run (te_dnn_fp8_causal_fits, asked by attn_cudnn.c).  Registered in every build, so
 * that te-info -e lists them whether or not CUDA was found; read only
 * where cuDNN can load.
 * A file of its own so that the loader, below the cudnn row
 * (attn_cudnn.c), calls nothing above it. */
#include "internal.h"
#include "attn/attn_backend.h"
#include <stdio.h>

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

/* On an H100 with cuDNN 9.19 the FP8 engine's causal forward wrote wrong
 * O (values past max|V|, rows of most heads, E4M3 and staged O alike) once
 * a call held more than 256 query tiles of 128 rows: B16 H8 S512 (512) and
 * te-bench's shapes were wrong; B4 H8 S512, B4 H8 S1024 (256), B1 H8
 * S2048, and B4 H8 S2048 without a mask were right (t/core/check_attn_fp8,
 * bench/2026-11-27.md).  Until the cause is known such calls are refused:
 * a caller falls back (the fuser runs attention in BF16) instead of taking
 * a wrong answer. */
TE_PARAM_INT(dnn_fp8_tiles_param, "TECORE_CUDNN_FP8_CAUSAL_MAX_TILES", 256, 0, (int64_t)1 << 40,
             "the most query tiles of 128 rows (batch x heads x ceil(max_seqlen_q / 128)) a "
             "causal E4M3 attention forward may hold for cuDNN to run it; larger ones are "
             "refused, as cuDNN 9.19 computed them wrong on an H100 (0: no limit, to try "
             "another cuDNN)")

int te_dnn_fp8_causal_fits(const struct te_attn_problem *p, char *why, size_t len) {
  if (p->qkv_dtype != TECORE_DTYPE_E4M3 || !p->causal) return 1;
  int64_t max = tecore_tunable_int(&dnn_fp8_tiles_param);
  size_t tiles = p->batch * (size_t)p->heads * ((p->max_seqlen_q + 127) / 128);
  if (!max || tiles <= (size_t)max) return 1;
  if (why && len)
    snprintf(why, len, "causal E4M3 with %zu query tiles of 128 rows (batch %zu, heads %d, "
             "max_seqlen_q %zu): cuDNN 9.19's FP8 forward computed such calls wrong on an H100; "
             "TECORE_CUDNN_FP8_CAUSAL_MAX_TILES is %lld", tiles, p->batch, p->heads,
             p->max_seqlen_q, (long long)max);
  return 0;
}

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
