/* SPDX-License-Identifier: Apache-2.0
 * gpt_sample.c -- te-gpt's generation: the prompt, then each new byte,
 * through the decode step with a KV cache (gpt_decode.c; when the cache
 * of seq positions is full, it starts again from the last half of the
 * window), the next byte taken from the logits: greedy, or softmax at
 * temperature over the top_k most likely bytes.  With check, every step's
 * logits are also computed by the whole model over the window (a twin of
 * the model for one sequence, a TECORE_SEQ_INFERENCE sequence), and the
 * largest difference is reported.  --tp: every rank runs all of it (the
 * sums inside are collective) and draws the same bytes from the same
 * logits.  With a tokenizer (--tokenizer) the prompt is its ids and
 * every id of the tokenizer's vocabulary may be drawn. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include "gpt.h"
#include "gpt_bpe.h"
#include "gpt_decode.h"

/* the prompt as tokens into a new array with room for n more (*len of
 * them): its bytes, or its BPE ids; an empty prompt is a newline */
static int32_t *prompt_tokens(const struct gpt_model *m, const struct gpt_sample_opts *o,
                              size_t *len) {
  size_t plen = strlen(o->prompt), cap = 0, count = 0;
  uint32_t *ids = NULL;
  if (o->bpe && gpt_bpe_encode(o->bpe, (const uint8_t *)o->prompt, plen, &ids, &count, &cap))
    return NULL;
  if (o->bpe) plen = count;
  int32_t *text = gpt_xalloc((plen + (size_t)o->n + 1) * sizeof *text);
  for (size_t i = 0; i < plen; i++)
    text[i] = o->bpe ? (int32_t)(ids[i] % (uint32_t)m->c.vocab)
                     : (unsigned char)o->prompt[i] % m->c.vocab;
  free(ids);
  *len = plen;
  if (!plen) text[(*len)++] = o->bpe ? (int32_t)(o->bpe->byte_id['\n'] % (uint32_t)m->c.vocab) : '\n';
  return text;
}

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

/* a logit that is no number (weights that overflow BF16's range on the
 * way) would be drawn as a byte: refused, with where it came */
static int finite_logits(const float *lg, int V, size_t len) {
  for (int i = 0; i < V; i++)
    if (!isfinite(lg[i])) {
      GPT_ERR("--sample: after %zu tokens the logit of token %d is %g: the model's output is "
              "not finite, no sample", len, i, (double)lg[i]);
      return 0;
    }
  return 1;
}

/* the largest logit less the second largest: how far the logits must
 * move before greedy decoding takes another byte */
static double top_gap(const float *lg, int V) {
  double a = -INFINITY, b = -INFINITY;
  for (int i = 0; i < V; i++) {
    if (lg[i] > a) b = a, a = lg[i];
    else if (lg[i] > b) b = lg[i];
  }
  return a - b;
}

/* the logits of the window text[0..w) at its last row, by the whole
 * model (g: a twin for one sequence), into lg[V] */
static void recompute(struct gpt_model *g, const int32_t *text, size_t w, uint16_t *row, float *lg,
                      int V, tecore_stream_t s) {
  int T = g->c.seq;
  int32_t *ids = gpt_xalloc((size_t)T * sizeof *ids);
  memcpy(ids, text, w * sizeof *ids);
  GPT_CHECK(tecore_memcpy_async(g->ids, (tecore_devptr_t)(uintptr_t)ids, (size_t)T * 4, s));
  gpt_logits(g, 0, s);
  GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)row,
                                g->logits + (w - 1) * (size_t)g->c.vocab * 2,
                                (size_t)g->c.vocab * 2, s));
  GPT_CHECK(tecore_stream_synchronize(s));
  for (int i = 0; i < V; i++) lg[i] = tecore_bf16_to_f32(row[i]);
  free(ids);
}

int gpt_sample(struct gpt_model *m, const struct gpt_sample_opts *o, char *out,
               tecore_stream_t s) {
  struct gpt_model g;
  if (o->check) {
    /* --tp: a twin of this rank's part (its values copied below) */
    gpt_model_create_tp(&g, &m->c, 1, 0, NULL, 1, m->tp.size > 1 ? &m->tp : NULL, s);
    tecore_devptr_t one = gpt_dalloc(4, NULL);
    GPT_CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, s));
    for (size_t i = 0; i < m->np; i++) {
      const struct gpt_param *p = &m->p[i];
      size_t n = p->rows * p->cols;
      if (p->bf16 == g.p[i].bf16) {
        GPT_CHECK(tecore_memcpy_async(g.p[i].value, p->value, n * (p->bf16 ? 2 : 4), s));
      } else {   /* FP8 training's F32 weight: the twin's BF16, nearest even */
        struct tecore_tensor a = gpt_tensor2(TECORE_DTYPE_F32, 1, n, p->value);
        struct tecore_tensor b = gpt_tensor2(TECORE_DTYPE_BF16, 1, n, g.p[i].value);
        GPT_CHECK(tecore_unscale_multi(&a, &b, 1, one, 0, s));
      }
    }
    GPT_CHECK(tecore_stream_synchronize(s));
    GPT_CHECK(tecore_mem_free(one));
  }
  struct gpt_decoder d;
  gpt_decoder_create(&d, m, !o->no_graph);
  int vmax = o->bpe ? (int)o->bpe->vocab : 256;   /* a byte model draws bytes only */
  int T = m->c.seq, V = m->c.vocab < vmax ? m->c.vocab : vmax;
  size_t len = 0;
  int32_t *text = prompt_tokens(m, o, &len);
  if (!text) {
    gpt_decoder_destroy(&d);
    if (o->check) gpt_model_destroy(&g);
    return -1;
  }
  uint16_t *row = gpt_xalloc((size_t)m->c.vocab * 2);
  float *lg = gpt_xalloc((size_t)m->c.vocab * sizeof *lg), *lg2 = gpt_xalloc((size_t)V * sizeof *lg2);
  uint64_t rng = o->seed;
  /* the cache holds text[base .. base + pos) at positions 0 .. pos - 1 */
  size_t base = len > (size_t)T ? len - (size_t)T / 2 : 0;
  int pos = 0;
  double maxdiff = 0, maxabs = 0, margin = INFINITY;
  int rc = 0;
  for (int k = 0; k <= o->n; k++) {
    if (pos == T && base + (size_t)pos < len) {
      /* the cache is full: start again from the last half of the window */
      base = len - (size_t)T / 2;
      pos = 0;
    }
    while (base + (size_t)pos < len) {   /* prefill, or the token just drawn */
      if (d.steps == 2 && o->steady_t0) *o->steady_t0 = gpt_now();   /* warm-up and capture done */
      gpt_decode_step(&d, text[base + (size_t)pos], pos, s);
      pos++;
    }
    if (k == o->n) break;
    GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)row, d.logits,
                                  (size_t)m->c.vocab * 2, s));
    GPT_CHECK(tecore_stream_synchronize(s));
    for (int i = 0; i < V; i++) lg[i] = tecore_bf16_to_f32(row[i]);
    if (!finite_logits(lg, V, len)) {
      rc = -1;
      break;
    }
    if (o->check) {
      recompute(&g, text + base, (size_t)pos, row, lg2, V, s);
      for (int i = 0; i < V; i++) {
        maxdiff = fmax(maxdiff, fabs((double)lg[i] - lg2[i]));
        maxabs = fmax(maxabs, fabs((double)lg2[i]));
      }
    }
    margin = fmin(margin, top_gap(lg, V));
    int next = pick(lg, V, o, &rng);
    text[len++] = next;
    out[k] = (char)next;
    if (o->ids) o->ids[k] = (uint32_t)next;
  }
  out[o->n] = 0;
  if (o->check_diff) *o->check_diff = maxdiff;
  if (o->check_max) *o->check_max = maxabs;
  if (o->margin) *o->margin = margin;
  free(text);
  free(row);
  free(lg);
  free(lg2);
  gpt_decoder_destroy(&d);
  if (o->check) gpt_model_destroy(&g);
  return rc;
}
