/* SPDX-License-Identifier: Apache-2.0 */
/* gpt_recompute.c -- te-gpt's --recompute: every block of the training
 * sequence recomputed in the backward (tecore_seq_set_recompute), FULL
 * (the block keeps its input only) or SELECTIVE (RoPE, attention and the
 * MLP's activation again, the GEMMs' outputs kept), so that a longer
 * sequence or a larger batch fits.  The blocks are the sequence's first
 * operations, all alike; the final norm and the LM head follow them. */
#include "gpt.h"

void gpt_recompute_blocks(struct gpt_model *m, int inference) {
  if (!m->c.recompute || inference) return;   /* no backward: nothing to recompute */
  const tecore_seq_recompute_t mode = m->c.recompute == GPT_RECOMPUTE_FULL
                                          ? TECORE_SEQ_RECOMPUTE_FULL
                                          : TECORE_SEQ_RECOMPUTE_SELECTIVE;
  struct tecore_op_info info;
  size_t n = 0;
  while (tecore_seq_op(m->seq, n, &info) == TECORE_SUCCESS) n++;
  tecore_clear_error();
  const size_t per = (n - 2) / (size_t)m->c.layers;   /* less the final norm and the head */
  for (int l = 0; l < m->c.layers; l++)
    GPT_CHECK(tecore_seq_set_recompute(m->seq, (size_t)l * per, per, mode));
}
