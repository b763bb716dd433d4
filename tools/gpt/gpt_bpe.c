/* SPDX-License-Identifier: Apache-2.0
 * gpt_bpe.c -- byte-level BPE's encode and decode (tokens from
 * gpt_bpe_load.c).  Encode: the added tokens are cut out of the text
 * first; the rest is split by GPT-2's pre-tokenizer regex
 *   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 * or Llama 3's (below gpt_bpe_piece_end_llama3), each written by hand
 * over UTF-8; a piece that is a token when the file sets ignore_merges
 * (Llama 3 does) is that token, else it starts as
 * its bytes' tokens and the adjacent pair of lowest merge rank is merged
 * until none is left, leftmost first among equals (a heap: O(L log L) for
 * a piece of L bytes, so a megabyte of spaces costs no L^2).
 * \p{L}, \p{N} and \s are the Unicode classes exactly as Hugging Face's
 * tokenizers matches them (gpt_bpe_classes.h, generated from that package
 * by gen-bpe-classes.py: Python's unicodedata is of an older Unicode).
 * Invalid UTF-8 (which Hugging Face's
 * tokenizers cannot take at all: a Python str is valid) is one "other"
 * character per byte, so decode(encode(x)) == x for any bytes. */
#include <stdlib.h>
#include <string.h>
#include "gpt.h"
#include "gpt_bpe.h"
#include "gpt_bpe_classes.h"

/* ---- character classes ---- */

enum cls { C_OTHER, C_LETTER, C_NUMBER, C_SPACE };

/* the ranges are sorted and disjoint: a binary search */
static int in(uint32_t c, const uint32_t (*r)[2], size_t n) {
  size_t lo = 0, hi = n;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (c < r[mid][0]) hi = mid;
    else if (c > r[mid][1]) lo = mid + 1;
    else return 1;
  }
  return 0;
}

#define IN(c, table) in(c, table, sizeof table / sizeof table[0])

/* the class of the character at t[i] and its length in bytes (an invalid
 * byte: OTHER, 1) */
static int cls_at(const uint8_t *t, size_t n, size_t i, size_t *len) {
  uint32_t c = t[i];
  size_t k = c < 0x80 ? 1 : c >= 0xc2 && c < 0xe0 ? 2 : c >= 0xe0 && c < 0xf0 ? 3
           : c >= 0xf0 && c < 0xf5 ? 4 : 0;
  if (k > 1 && i + k <= n) {
    uint32_t v = c & (0x7fu >> k);
    size_t j = 1;
    for (; j < k && (t[i + j] & 0xc0) == 0x80; j++) v = v << 6 | (t[i + j] & 0x3fu);
    static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    k = j == k && v >= least[k] && v <= 0x10ffff && !(v >= 0xd800 && v < 0xe000) ? k : 0;
    c = v;
  } else if (k > 1) {
    k = 0;
  }
  if (!k) return *len = 1, C_OTHER;
  *len = k;
  return IN(c, gpt_bpe_letters)   ? C_LETTER
         : IN(c, gpt_bpe_numbers) ? C_NUMBER
         : IN(c, gpt_bpe_spaces)  ? C_SPACE
                                  : C_OTHER;
}

/* ---- the pre-tokenizer ---- */

/* the end of the run of class c from i */
static size_t run_end(const uint8_t *t, size_t n, size_t i, int c) {
  size_t k;
  while (i < n && cls_at(t, n, i, &k) == c) i += k;
  return i;
}

/* 's 't 're 've 'm 'll 'd at t[i] (a quote): its length, or 0 */
static size_t contraction(const uint8_t *t, size_t n, size_t i) {
  static const char *const c[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
    size_t l = strlen(c[k]);
    if (n - i - 1 >= l && !memcmp(t + i + 1, c[k], l)) return l + 1;
  }
  return 0;
}

/* \s+(?!\S) | \s+ from i (a space): all of a run that ends the text, else
 * the run but its last character (which goes with the word after), else
 * the one character */
static size_t spaces_end(const uint8_t *t, size_t n, size_t i) {
  size_t first = i, last = i, k;
  while (i < n && cls_at(t, n, i, &k) == C_SPACE) last = i, i += k;
  return i == n || last == first ? i : last;
}

size_t gpt_bpe_piece_end(const uint8_t *t, size_t n, size_t i) {
  size_t k, q = t[i] == '\'' ? contraction(t, n, i) : 0;
  if (q) return i + q;
  size_t j = t[i] == ' ' && i + 1 < n ? i + 1 : i;
  int c = cls_at(t, n, j, &k);
  if (c != C_SPACE) return run_end(t, n, j, c);
  return spaces_end(t, n, i);
}

/* ---- Llama 3's pre-tokenizer ----
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 * each alternative below in the regex's order, over the same classes as
 * GPT-2's split (an invalid byte: one "other" character). */

static int is_nl(uint8_t c) { return c == '\r' || c == '\n'; }

/* (?i:'s|'t|'re|'ve|'m|'ll|'d) at t[i] (a quote): its length, or 0.  The
 * regex folds case by Unicode's simple folding, which for these letters
 * is ASCII's plus U+017F (long s) for s */
static size_t contraction_ci(const uint8_t *t, size_t n, size_t i) {
  static const char *const c[] = {"s", "t", "re", "ve", "m", "ll", "d"};
  if (n - i >= 3 && t[i + 1] == 0xc5 && t[i + 2] == 0xbf) return 3;
  for (size_t k = 0; k < sizeof c / sizeof c[0]; k++) {
    size_t l = strlen(c[k]), m = 0;
    while (m < l && m < n - i - 1 && (t[i + 1 + m] | 0x20) == (uint8_t)c[k][m]) m++;
    if (m == l) return l + 1;
  }
  return 0;
}

/* [^\r\n\p{L}\p{N}]?\p{L}+ at t[i] (class c, k bytes): its end, or 0 */
static size_t l3_word(const uint8_t *t, size_t n, size_t i, int c, size_t k) {
  size_t k2;
  if (c == C_LETTER) return run_end(t, n, i, C_LETTER);
  if (c == C_NUMBER || is_nl(t[i]) || i + k >= n || cls_at(t, n, i + k, &k2) != C_LETTER)
    return 0;
  return run_end(t, n, i + k, C_LETTER);
}

/* \p{N}{1,3} from i (a number) */
static size_t l3_digits(const uint8_t *t, size_t n, size_t i) {
  size_t k;
  for (int m = 0; m < 3 && i < n && cls_at(t, n, i, &k) == C_NUMBER; m++) i += k;
  return i;
}

/*  ?[^\s\p{L}\p{N}]+[\r\n]* at t[i]: its end, or 0 */
static size_t l3_punct(const uint8_t *t, size_t n, size_t i) {
  size_t k, j = t[i] == ' ' && i + 1 < n ? i + 1 : i;
  if (cls_at(t, n, j, &k) != C_OTHER) return 0;
  for (j = run_end(t, n, j, C_OTHER); j < n && is_nl(t[j]);) j++;
  return j;
}

/* \s*[\r\n]+ at t[i]: the space run up to its last \r or \n, or 0 */
static size_t l3_newlines(const uint8_t *t, size_t n, size_t i) {
  size_t k, e = 0;
  for (; i < n && cls_at(t, n, i, &k) == C_SPACE; i += k)
    if (k == 1 && is_nl(t[i])) e = i + 1;
  return e;
}

size_t gpt_bpe_piece_end_llama3(const uint8_t *t, size_t n, size_t i) {
  size_t k, e = t[i] == '\'' ? contraction_ci(t, n, i) : 0;
  if (e) return i + e;
  int c = cls_at(t, n, i, &k);
  if ((e = l3_word(t, n, i, c, k))) return e;
  if (c == C_NUMBER) return l3_digits(t, n, i);
  if ((e = l3_punct(t, n, i)) || (e = l3_newlines(t, n, i))) return e;
  return spaces_end(t, n, i);   /* c is a space: the last two alternatives */
}

/* ---- merges ---- */

static uint32_t merge_of(const struct gpt_bpe *b, uint32_t l, uint32_t r, uint32_t *id) {
  uint64_t pair = (uint64_t)l << 32 | r, h = pair;
  h ^= h >> 33, h *= 0xff51afd7ed558ccdull, h ^= h >> 33;
  for (size_t s = h & b->merges_mask;; s = (s + 1) & b->merges_mask) {
    if (b->merges[s].id == GPT_BPE_NONE) return GPT_BPE_NONE;
    if (b->merges[s].pair == pair) return *id = b->merges[s].id, b->merges[s].rank;
  }
}

/* a piece's symbols: a list over its bytes, and a min-heap of the
 * candidate merges keyed (rank, position) */
struct piece {
  uint32_t *id;
  int32_t *next, *prev;
  uint64_t *heap;          /* rank << 32 | position */
  size_t nheap;
};

static void heap_push(struct piece *p, uint64_t v) {
  size_t i = p->nheap++;
  for (; i && p->heap[(i - 1) / 2] > v; i = (i - 1) / 2) p->heap[i] = p->heap[(i - 1) / 2];
  p->heap[i] = v;
}

static uint64_t heap_pop(struct piece *p) {
  uint64_t top = p->heap[0], v = p->heap[--p->nheap];
  size_t i = 0;
  for (;;) {
    size_t c = 2 * i + 1;
    if (c >= p->nheap) break;
    if (c + 1 < p->nheap && p->heap[c + 1] < p->heap[c]) c++;
    if (p->heap[c] >= v) break;
    p->heap[i] = p->heap[c], i = c;
  }
  p->heap[i] = v;
  return top;
}

/* the merge of symbol at with the one after it, if any, as a candidate */
static void candidate(const struct gpt_bpe *b, struct piece *p, int32_t at) {
  uint32_t id;
  if (at < 0 || p->next[at] < 0) return;
  uint32_t rank = merge_of(b, p->id[at], p->id[p->next[at]], &id);
  if (rank != GPT_BPE_NONE) heap_push(p, (uint64_t)rank << 32 | (uint32_t)at);
}

/* merges the piece's n symbols by rank; a popped candidate whose pair has
 * changed since (its rank no longer the pair's) is stale and skipped */
static void merge_piece(const struct gpt_bpe *b, struct piece *p, size_t n) {
  p->nheap = 0;
  for (size_t i = 0; i + 1 < n; i++) candidate(b, p, (int32_t)i);
  while (p->nheap) {
    uint64_t top = heap_pop(p);
    int32_t at = (int32_t)(uint32_t)top, nx;
    uint32_t id;
    if (p->id[at] == GPT_BPE_NONE || (nx = p->next[at]) < 0 ||
        merge_of(b, p->id[at], p->id[nx], &id) != (uint32_t)(top >> 32))
      continue;
    p->id[at] = id;
    p->id[nx] = GPT_BPE_NONE;
    p->next[at] = p->next[nx];
    if (p->next[nx] >= 0) p->prev[p->next[nx]] = at;
    candidate(b, p, p->prev[at]);
    candidate(b, p, at);
  }
}

static int reserve(uint32_t **ids, size_t *cap, size_t need) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 256;
  while (c < need) c *= 2;
  uint32_t *x = realloc(*ids, c * sizeof *x);
  if (!x) return GPT_ERR("tokenizer: out of host memory"), -1;
  *ids = x, *cap = c;
  return 0;
}

/* the BPE of one piece t[0..n), appended */
static int encode_piece(const struct gpt_bpe *b, struct piece *p, const uint8_t *t, size_t n,
                        uint32_t **ids, size_t *count, size_t *cap) {
  uint32_t whole = b->ignore_merges ? gpt_bpe_lookup(b, t, n) : GPT_BPE_NONE;
  if (whole != GPT_BPE_NONE) {   /* ignore_merges: a piece that is a token is that token */
    if (reserve(ids, cap, *count + 1)) return -1;
    return (*ids)[(*count)++] = whole, 0;
  }
  for (size_t i = 0; i < n; i++) {
    p->id[i] = b->byte_id[t[i]];
    if (p->id[i] == GPT_BPE_NONE)
      return GPT_ERR("tokenizer: byte 0x%02x has no token of its own", t[i]), -1;
    p->next[i] = i + 1 < n ? (int32_t)i + 1 : -1, p->prev[i] = (int32_t)i - 1;
  }
  merge_piece(b, p, n);
  if (reserve(ids, cap, *count + n)) return -1;
  for (int32_t at = 0; at >= 0; at = p->next[at]) (*ids)[(*count)++] = p->id[at];
  return 0;
}

/* the longest added token at t[i] (Hugging Face's rule): its id and
 * *len, or NONE */
static uint32_t special_at(const struct gpt_bpe *b, const uint8_t *t, size_t n, size_t i,
                           size_t *len) {
  uint32_t best = GPT_BPE_NONE;
  *len = 0;
  for (size_t k = 0; k < b->nspecial; k++) {
    uint64_t tk = b->tok[b->special[k]];
    size_t l = (size_t)(tk & 0xffff);
    if (l > *len && l <= n - i && b->pool[tk >> 16] == t[i] &&
        !memcmp(b->pool + (tk >> 16), t + i, l))
      best = b->special[k], *len = l;
  }
  return best;
}

/* text without added tokens, piece by piece */
static int encode_plain(const struct gpt_bpe *b, struct piece *p, const uint8_t *t, size_t n,
                        uint32_t **ids, size_t *count, size_t *cap) {
  for (size_t i = 0, e; i < n; i = e) {
    e = b->split == GPT_BPE_LLAMA3 ? gpt_bpe_piece_end_llama3(t, n, i)
                                   : gpt_bpe_piece_end(t, n, i);
    if (encode_piece(b, p, t + i, e - i, ids, count, cap)) return -1;
  }
  return 0;
}

int gpt_bpe_encode(const struct gpt_bpe *b, const uint8_t *text, size_t n, uint32_t **ids,
                   size_t *count, size_t *cap) {
  struct piece p = {malloc((n + 1) * 4), malloc((n + 1) * 4), malloc((n + 1) * 4),
                    malloc((3 * n + 1) * 8), 0};   /* n - 1 candidates, 2 a merge */
  int rc = !p.id || !p.next || !p.prev || !p.heap ? (GPT_ERR("tokenizer: out of host memory"), -1) : 0;
  size_t from = 0, len;
  for (size_t i = 0; !rc && i <= n; i++) {
    uint32_t sp = i < n ? special_at(b, text, n, i, &len) : GPT_BPE_NONE;
    if (i < n && sp == GPT_BPE_NONE) continue;
    rc = encode_plain(b, &p, text + from, i - from, ids, count, cap);
    if (!rc && sp != GPT_BPE_NONE && !(rc = reserve(ids, cap, *count + 1)))
      (*ids)[(*count)++] = sp, i += len - 1, from = i + 1;
  }
  free(p.id), free(p.next), free(p.prev), free(p.heap);
  return rc;
}

uint8_t *gpt_bpe_decode(const struct gpt_bpe *b, const uint32_t *ids, size_t n, size_t *len) {
  size_t total = 0;
  for (size_t i = 0; i < n; i++) {
    if (ids[i] >= b->vocab || !b->tok[ids[i]]) {
      GPT_ERR("tokenizer: id %u (at %zu) is no token", ids[i], i);
      return NULL;
    }
    total += (size_t)(b->tok[ids[i]] & 0xffff);
  }
  uint8_t *out = malloc(total + 1);
  if (!out) return GPT_ERR("tokenizer: out of host memory"), NULL;
  for (size_t i = 0, o = 0; i < n; i++) {
    size_t l = (size_t)(b->tok[ids[i]] & 0xffff);
    memcpy(out + o, b->pool + (b->tok[ids[i]] >> 16), l), o += l;
  }
  out[total] = 0;
  *len = total;
  return out;
}
