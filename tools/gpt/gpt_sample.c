/* SPDX-License-Identifier: Apache-2.0
 * gpt_sample.c -- te-gpt's generation: a twin of the model for one
 * sequence of seq tokens (a training sequence: TECORE_SEQ_INFERENCE's
 * attention lacks its statistics buffer) with the trained parameters
 * copied in, run over the last seq tokens of the text for each
 * new one (no KV cache yet: every step recomputes the window), the next
 * byte taken from the last row's logits: greedy, or softmax at
 * temperature over the top_k most likely bytes. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt.h"

/* the next token from logits [V] (bytes only: ids below 256) */
static int pick(const float *lg, int V, const struct gpt_sample_opts *o, uint64_t *rng) {
  int best = 0;
  for (int i = 1; i < V; i++)
    if (lg[i] > lg[best]) best = i;
  if (o->temperature <= 0) return best;
  /* the top_k threshold: the k-th largest value (k <= V) */
  double thr = -INFINITY;
  if (o->top_k > 0 && o->top_k < V) {
    float *c = gpt_xalloc((size_t)V * sizeof *c);
    memcpy(c, lg, (size_t)V * sizeof *c);
    for (int k = 0; k < o->top_k; k++) {   /* V is small: k passes of selection */
      int j = k;
      for (int i = k + 1; i < V; i++)
        if (c[i] > c[j]) j = i;
      float x = c[k];
      c[k] = c[j], c[j] = x;
    }
    thr = c[o->top_k - 1];
    free(c);
  }
  double sum = 0, *w = gpt_xalloc((size_t)V * sizeof *w);
  for (int i = 0; i < V; i++) {
    w[i] = lg[i] >= thr ? exp((lg[i] - lg[best]) / o->temperature) : 0;
    sum += w[i];
  }
  double u = (double)(gpt_splitmix(rng) >> 11) / 9007199254740992.0 * sum;
  int r = best;
  for (int i = 0; i < V; i++) {
    if (u < w[i]) { r = i; break; }
    u -= w[i];
  }
  free(w);
  return r;
}

int gpt_sample(struct gpt_model *m, const struct gpt_sample_opts *o, char *out,
               tecore_stream_t s) {
  struct gpt_model g;
  gpt_model_create(&g, &m->c, 1, 0, NULL, 1, s);
  for (size_t i = 0; i < m->np; i++) {
    const struct gpt_param *p = &m->p[i];
    GPT_CHECK(tecore_memcpy_async(g.p[i].value, p->value, p->rows * p->cols * (p->bf16 ? 2 : 4), s));
  }
  int T = m->c.seq, V = m->c.vocab < 256 ? m->c.vocab : 256;
  size_t plen = strlen(o->prompt);
  size_t cap = plen + (size_t)o->n + 1;
  int32_t *text = gpt_xalloc(cap * sizeof *text), *ids = gpt_xalloc((size_t)T * sizeof *ids);
  size_t len = 0;
  for (size_t i = 0; i < plen; i++) text[len++] = (unsigned char)o->prompt[i] % m->c.vocab;
  if (!len) text[len++] = '\n';
  uint16_t *row = gpt_xalloc((size_t)m->c.vocab * 2);
  float *lg = gpt_xalloc((size_t)m->c.vocab * sizeof *lg);
  uint64_t rng = o->seed;
  for (int k = 0; k < o->n; k++) {
    size_t w = len < (size_t)T ? len : (size_t)T;
    memset(ids, 0, (size_t)T * sizeof *ids);
    memcpy(ids, text + len - w, w * sizeof *ids);
    GPT_CHECK(tecore_memcpy_async(g.ids, (tecore_devptr_t)(uintptr_t)ids, (size_t)T * 4, s));
    gpt_logits(&g, 0, s);
    GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)row,
                                  g.logits + (w - 1) * (size_t)m->c.vocab * 2,
                                  (size_t)m->c.vocab * 2, s));
    GPT_CHECK(tecore_stream_synchronize(s));
    for (int i = 0; i < V; i++) lg[i] = tecore_bf16_to_f32(row[i]);
    int next = pick(lg, V, o, &rng);
    text[len++] = next;
    out[k] = (char)next;
  }
  out[o->n] = 0;
  free(text);
  free(ids);
  free(row);
  free(lg);
  gpt_model_destroy(&g);
  return 0;
}
