/* SPDX-License-Identifier: Apache-2.0 */
/* mlp_block.h -- the transformer-style MLP block that te-demo trains and
 * te-bench times, as fuser operations (te/ops.h):
 *   x + Linear2(GELU(Linear1(RMSNorm(x)))), both Linears with a bias,
 *   Linear1 hidden -> ffn, Linear2 ffn -> hidden, the residual through
 *   extra-output slot `layer % TECORE_SEQ_MAX_SLOTS`. */
#ifndef TE_TOOLS_MLP_BLOCK_H
#define TE_TOOLS_MLP_BLOCK_H

#include <string.h>
#include <te/core.h>

/* Appends block `layer` to q; the first error is returned. */
static inline tecore_result_t te_tools_add_mlp_block(tecore_seq_t *q, int layer, size_t hidden,
                                                     size_t ffn) {
  struct tecore_op_desc d[6];
  memset(d, 0, sizeof d);
  d[0].kind = TECORE_OP_MAKE_EXTRA_OUTPUT;
  d[0].slot = layer % TECORE_SEQ_MAX_SLOTS;
  d[1].kind = TECORE_OP_RMSNORM;
  d[1].epsilon = 1e-5f;
  d[2].kind = TECORE_OP_LINEAR;
  d[2].features = ffn;
  d[2].bias = 1;
  d[3].kind = TECORE_OP_GELU;
  d[4].kind = TECORE_OP_LINEAR;
  d[4].features = hidden;
  d[4].bias = 1;
  d[5].kind = TECORE_OP_ADD_EXTRA_INPUT;
  d[5].slot = layer % TECORE_SEQ_MAX_SLOTS;
  for (int k = 0; k < 6; k++) {
    tecore_result_t r = tecore_seq_add(q, &d[k], NULL);
    if (r != TECORE_SUCCESS) return r;
  }
  return TECORE_SUCCESS;
}

#endif
