/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn.c -- the cuDNN row of the attention backend table
 * (attn_backend.h).  A placeholder until the cuDNN backend lands: it
 * refuses every problem, so auto walks on to libte's kernels. */
#include "attn/attn_internal.h"
#include <stdio.h>

static int cudnn_supports(const struct te_attn_problem *p, int backward, char *why, size_t len) {
  (void)p;
  (void)backward;
  snprintf(why, len, "cuDNN backend not built yet");
  return 0;
}

static size_t cudnn_workspace(const struct te_attn_problem *p, int backward) {
  (void)p;
  (void)backward;
  return 0;
}

static tecore_result_t cudnn_run(const struct te_attn_problem *p, tecore_stream_t stream) {
  (void)p;
  (void)stream;
  return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "attention: cuDNN backend not built yet");
}

const struct te_attn_backend te_attn_backend_cudnn = {
    .name = "cudnn",
    .supports = cudnn_supports,
    .workspace = cudnn_workspace,
    .fwd = cudnn_run,
    .bwd = cudnn_run,
};
