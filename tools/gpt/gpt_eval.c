/* SPDX-License-Identifier: Apache-2.0
 * gpt_eval.c -- te-gpt --eval FILE: the model's loss over every window of
 * FILE (bytes or a token shard; the windows of gpt_data_val_batch:
 * window j is tokens [j seq, (j + 1) seq], so each token after the first
 * of the W = (n - 1) / seq windows is predicted once), in batches of the
 * model's batch, the last one's unused rows ignored (label -100); the
 * mean over the predicted tokens and its perplexity exp(loss).  Forward
 * only: no step, the weights untouched.  A text file with --tokenizer is
 * read as its ids.  Under --dp the ranks share the batches and add their
 * sums. */
#include <math.h>
#include "gpt.h"
#include "../cli.h"
#include "../out.h"

/* batch k's windows into t's staging; the rows past the last window are
 * ignored (ids 0, labels -100) */
static void stage_windows(struct gpt_train *t, const struct gpt_model *m,
                          const struct gpt_data *d, size_t k) {
  size_t seq = (size_t)m->c.seq;
  for (size_t b = 0; b < m->batch; b++) {
    int32_t *ids = t->hids + b * seq, *lab = t->hlabels + b * seq;
    if (gpt_data_window(d, m->c.seq, k * m->batch + b, ids, lab)) continue;
    for (size_t i = 0; i < seq; i++) ids[i] = 0, lab[i] = -100;
  }
}

/* --dp: *sum and *tokens added over the data-parallel ranks (F32 on the
 * device: the sum to 1e-7 of itself) */
static void sum_ranks(struct gpt_model *m, double *sum, double *tokens, tecore_stream_t s) {
  float v[2] = {(float)*sum, (float)*tokens};
  GPT_CHECK(tecore_memcpy(m->means, (tecore_devptr_t)(uintptr_t)v, sizeof v));
  gpt_dp_sum(m, m->means, 2, s);
  GPT_CHECK(tecore_stream_synchronize(s));
  GPT_CHECK(tecore_memcpy((tecore_devptr_t)(uintptr_t)v, m->means, sizeof v));
  *sum = v[0], *tokens = v[1];
}

int gpt_eval(struct gpt_train *t, struct gpt_model *m, const char *path, tecore_stream_t s,
             struct gpt_eval_result *r) {
  struct gpt_data d;
  if (gpt_data_load_eval(&d, path, m->c.seq, m->c.vocab, t->tokenizer)) return -1;
  size_t nwin = gpt_data_windows(&d, m->c.seq);
  /* --dp: rank q takes batches q, q + D, ...; every rank runs as many
   * forwards (one past the file ignores every row), since an FP8
   * recipe's amaxes are reduced over the ranks in each */
  size_t D = m->dp.size > 1 ? (size_t)m->dp.size : 1, me = D > 1 ? (size_t)m->dp.rank : 0;
  size_t nb = (nwin + m->batch - 1) / m->batch;
  double sum = 0, tokens = 0, mean, count;
  for (size_t q = 0; q * D < nb; q++) {
    stage_windows(t, m, &d, q * D + me);
    gpt_forward_loss(t, m, s, &mean, &count);
    if (count > 0) sum += mean * count, tokens += count;
  }
  if (D > 1) sum_ranks(m, &sum, &tokens, s);
  gpt_data_free(&d);
  r->windows = nwin;
  r->tokens = tokens;
  r->loss = tokens > 0 ? sum / tokens : NAN;
  r->perplexity = exp(r->loss);
  if (!isfinite(r->loss)) {
    GPT_ERR("--eval %s: the loss is %g", path, r->loss);
    return -1;
  }
  return 0;
}

int gpt_eval_report(struct te_out *out, struct gpt_train *t, struct gpt_model *m,
                    const char *path, tecore_stream_t s) {
  struct gpt_eval_result r;
  if (gpt_eval(t, m, path, s, &r)) return TE_EXIT_FAIL;
  te_out_begin(out);
  te_out_note(out, "eval %s: %zu windows of %d tokens, %.0f tokens predicted, after step %lld",
              path, r.windows, m->c.seq, r.tokens, (long long)t->step);
  /* the result, as a sample is, on stdout even with --quiet */
  if (out->format == TE_OUT_TABLE)
    printf("eval loss %.6f perplexity %.4f\n", r.loss, r.perplexity);
  te_out_field_n(out, "eval_loss", r.loss);
  te_out_field_n(out, "eval_perplexity", r.perplexity);
  te_out_field_n(out, "eval_windows", (double)r.windows);
  te_out_field_n(out, "eval_tokens", r.tokens);
  te_out_field_n(out, "step", (double)t->step);
  te_out_end(out);
  return TE_EXIT_OK;
}
