/* span.c -- SPDX-License-Identifier: Apache-2.0
 * The search of span.h: the first pair of named byte ranges that breaks
 * libte's aliasing rule.  Compiled into libtecore and into libtegraph
 * (it needs nothing of either). */
#include "ksupport/span.h"
#include <stdio.h>
#include <stdlib.h>

/* One span in address order: its start, end (saturated) and place in s. */
struct key {
  tecore_devptr_t p, end;
  size_t ord;
};

static int key_cmp(const void *a, const void *b) {
  const struct key *x = a, *y = b;
  if (x->p != y->p) return x->p < y->p ? -1 : 1;
  if (x->end != y->end) return x->end < y->end ? -1 : 1;
  return x->ord < y->ord ? -1 : x->ord > y->ord;
}

const char *te_span_name(const struct te_span *s, char *buf, size_t len) {
  if (s->field)
    snprintf(buf, len, "%s[%zu]%s", s->name, s->idx, s->field);
  else
    snprintf(buf, len, "%s", s->name ? s->name : "?");
  return buf;
}

static int same_range(const struct te_span *a, const struct te_span *b) {
  return a->p == b->p && a->bytes == b->bytes;
}

/* 0 when a and b (which share a byte) may, 1 when they conflict; *inplace
 * says the pair was an allowed in-place pair at another range. */
static int conflicts(const struct te_span *a, const struct te_span *b, int *inplace) {
  int wa = (a->access & TE_ACCESS_WRITE) != 0, wb = (b->access & TE_ACCESS_WRITE) != 0;
  *inplace = 0;
  if (!wa && !wb) return 0;
  if (wa && wb)
    return !(a->access == TE_ACCESS_REDUCE && b->access == TE_ACCESS_REDUCE && same_range(a, b));
  if (a->pair && a->pair == b->pair) {
    if (same_range(a, b)) return 0;
    *inplace = 1;
  }
  return 1;
}

/* Spans that give the same verdict against any third one: the second of
 * two such neighbours in address order need not be swept again (two plain
 * writes of one range conflict, and the first one's sweep says so). */
static int twin(const struct te_span *a, const struct te_span *b) {
  return same_range(a, b) && a->access == b->access && a->pair == b->pair;
}

static int report(const struct te_span *a, size_t ia, const struct te_span *b, size_t ib,
                  int inplace, char *msg, size_t len) {
  /* the written one first; of two written ones, the earlier argument */
  int swap = !(a->access & TE_ACCESS_WRITE) || ((b->access & TE_ACCESS_WRITE) && ib < ia);
  const struct te_span *x = swap ? b : a, *y = swap ? a : b;
  char nx[96], ny[96];
  snprintf(msg, len, "%s overlaps %s%s", te_span_name(x, nx, sizeof nx),
           te_span_name(y, ny, sizeof ny),
           inplace ? " other than as the very same range (in place)" : "");
  return 1;
}

static tecore_devptr_t span_end(const struct te_span *s) {
  tecore_devptr_t e = s->p + s->bytes;
  return e < s->p ? (tecore_devptr_t)-1 : e;
}

/* Every pair, for lists too small to sort (or when no scratch is left). */
static int conflict_pairs(const struct te_span *s, size_t n, char *msg, size_t len) {
  int inplace;
  for (size_t a = 0; a < n; a++)
    for (size_t b = a + 1; b < n; b++)
      if (te_span_overlap(s[a], s[b]) && conflicts(&s[a], &s[b], &inplace))
        return report(&s[a], a, &s[b], b, inplace, msg, len);
  return 0;
}

int te_span_conflict(const struct te_span *s, size_t n, char *msg, size_t len) {
  if (n <= 16) return conflict_pairs(s, n, msg, len);
  struct key *k = malloc(n * sizeof *k);
  if (!k) return conflict_pairs(s, n, msg, len);
  size_t m = 0;
  for (size_t i = 0; i < n; i++)
    if (s[i].p && s[i].bytes) k[m++] = (struct key){s[i].p, span_end(&s[i]), i};
  qsort(k, m, sizeof *k, key_cmp);
  /* a sweep in address order: each span meets the spans that start inside it */
  int found = 0, inplace;
  for (size_t i = 0; i < m && !found; i++) {
    const struct te_span *a = &s[k[i].ord];
    if (i > 0 && twin(&s[k[i - 1].ord], a)) continue;
    for (size_t j = i + 1; j < m && k[j].p < k[i].end && !found; j++) {
      const struct te_span *b = &s[k[j].ord];
      if (conflicts(a, b, &inplace)) found = report(a, k[i].ord, b, k[j].ord, inplace, msg, len);
    }
  }
  free(k);
  return found;
}
