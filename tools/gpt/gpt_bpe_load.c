/* SPDX-License-Identifier: Apache-2.0
 * gpt_bpe_load.c -- a byte-level BPE tokenizer's files, untrusted: a Hugging
 * Face tokenizer.json (model.type "BPE" when given, model.vocab {token: id},
 * model.merges as "a b" strings or ["a", "b"] pairs, added_tokens
 * {content, id}, pre_tokenizer recognised as GPT-2's or Llama 3's split,
 * model.ignore_merges, normalizer null) or vocab.json with merges.txt ("#version" line
 * skipped).
 * Each token's text is GPT-2's byte-to-unicode alphabet (the printable
 * bytes as themselves, the other 68 bytes as U+0100 onwards), undone here
 * to bytes; an added token's text is its bytes.  Bounded: the file at most
 * GPT_BPE_MAX_FILE bytes, ids below GPT_BPE_MAX_VOCAB, a token at most
 * 65535 bytes; lookups are hash tables, so 1e6 merges load in linear time.
 * A merge whose parts or result are not tokens is refused, as Hugging
 * Face's tokenizers refuses it; a repeated merge keeps its first rank. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gpt.h"
#include "gpt_bpe.h"
#include "gpt_json.h"

/* ---- GPT-2's byte-to-unicode alphabet, undone ---- */

/* the byte a code point of the alphabet stands for, or -1 */
static int alphabet_byte(uint32_t cp) {
  static int16_t inv[324];
  static int ready;
  if (!ready) {
    int next = 256;
    for (int b = 0; b < 256; b++) {
      int keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
      inv[keep ? b : next++] = (int16_t)b;
    }
    ready = 1;
  }
  return cp < 324 ? inv[cp] : -1;
}

/* one UTF-8 code point at s[0..n): its length, or 0 when invalid */
static size_t utf8_cp(const uint8_t *s, size_t n, uint32_t *cp) {
  if (s[0] < 0x80) return *cp = s[0], 1;
  size_t k = s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3
           : s[0] >= 0xf0 && s[0] < 0xf5 ? 4 : 0;
  if (!k || n < k) return 0;
  uint32_t c = s[0] & (0x7f >> k);
  for (size_t i = 1; i < k; i++) {
    if ((s[i] & 0xc0) != 0x80) return 0;
    c = c << 6 | (s[i] & 0x3f);
  }
  static const uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
  if (c < least[k] || c > 0x10ffff || (c >= 0xd800 && c < 0xe000)) return 0;
  return *cp = c, k;
}

/* the alphabet's text s[0..n) as bytes into out (at least n): its length, or -1 */
static long unalphabet(const uint8_t *s, size_t n, uint8_t *out) {
  size_t o = 0;
  for (size_t i = 0; i < n;) {
    uint32_t cp;
    size_t k = utf8_cp(s + i, n - i, &cp);
    int b = k ? alphabet_byte(cp) : -1;
    if (b < 0) return -1;
    out[o++] = (uint8_t)b, i += k;
  }
  return (long)o;
}

/* ---- the tables ---- */

static uint64_t hash_bytes(const uint8_t *s, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; i++) h = (h ^ s[i]) * 1099511628211ull;
  return h ^ (h >> 29);
}

static uint64_t hash_pair(uint64_t p) {
  p ^= p >> 33, p *= 0xff51afd7ed558ccdull, p ^= p >> 33;
  return p;
}

static const uint8_t *tok_bytes(const struct gpt_bpe *b, uint32_t id, size_t *n) {
  uint64_t t = id < b->vocab ? b->tok[id] : 0;
  *n = (size_t)(t & 0xffff);
  return t ? b->pool + (t >> 16) : NULL;
}

uint32_t gpt_bpe_lookup(const struct gpt_bpe *b, const uint8_t *s, size_t n) {
  for (size_t h = hash_bytes(s, n) & b->by_bytes_mask;; h = (h + 1) & b->by_bytes_mask) {
    uint32_t id = b->by_bytes[h];
    size_t k;
    if (id == GPT_BPE_NONE) return GPT_BPE_NONE;
    const uint8_t *t = tok_bytes(b, id, &k);
    if (k == n && !memcmp(t, s, n)) return id;
  }
}

/* a power of two above twice n, at least 64 */
static size_t table_size(size_t n) {
  size_t s = 64;
  while (s < 2 * n + 2) s *= 2;
  return s;
}

struct loader {
  struct gpt_bpe *b;
  const char *path;
  uint8_t *scratch;              /* a token's bytes */
};

/* token id of bytes s[0..n) added; -1 on a repeated id or text */
static int add_token(struct loader *L, uint32_t id, const uint8_t *s, size_t n, size_t off) {
  struct gpt_bpe *b = L->b;
  if (id >= b->vocab || b->tok[id] || !n || n > 0xffff) {
    GPT_ERR("%s: byte %zu: token %u %s", L->path, off, id,
            id >= b->vocab ? "out of range" : b->tok[id] ? "given twice" : "of 0 or over 65535 bytes");
    return -1;
  }
  if (gpt_bpe_lookup(b, s, n) != GPT_BPE_NONE)
    return GPT_ERR("%s: byte %zu: token %u's text is another token's too", L->path, off, id), -1;
  memcpy(b->pool + b->pool_len, s, n);
  b->tok[id] = (uint64_t)b->pool_len << 16 | n;
  b->pool_len += n;
  size_t h = hash_bytes(s, n) & b->by_bytes_mask;
  while (b->by_bytes[h] != GPT_BPE_NONE) h = (h + 1) & b->by_bytes_mask;
  b->by_bytes[h] = id;
  if (n == 1) b->byte_id[s[0]] = id;
  return 0;
}

/* the vocabulary object at node v: sizes the tables, then adds each token */
static int read_vocab(struct loader *L, const struct gpt_json *j, int v, size_t extra) {
  struct gpt_bpe *b = L->b;
  size_t count = 0, bytes = 0;
  uint32_t top = 0;
  if (v < 0 || j->n[v].type != GPT_JOBJ)
    return GPT_ERR("%s: no vocabulary object (model.vocab)", L->path), -1;
  for (int k = j->n[v].kid; k >= 0; k = j->n[k].next, count++) {
    double x = j->n[k].num;
    if (j->n[k].type != GPT_JNUM || x < 0 || x >= GPT_BPE_MAX_VOCAB || x != (uint32_t)x)
      return GPT_ERR("%s: byte %zu: a token id that is not an integer in 0..%u", L->path,
                     j->n[k].off, GPT_BPE_MAX_VOCAB - 1), -1;
    if ((uint32_t)x >= top) top = (uint32_t)x + 1;
    bytes += j->n[k].keylen;
  }
  b->vocab = top > extra ? top : (uint32_t)extra;
  b->tok = calloc(b->vocab, sizeof *b->tok);
  b->pool = malloc(bytes + j->pool_len + 1);
  b->by_bytes_mask = table_size(count + j->count) - 1;   /* and the added tokens */
  b->by_bytes = malloc((b->by_bytes_mask + 1) * sizeof *b->by_bytes);
  if (!b->tok || !b->pool || !b->by_bytes) return GPT_ERR("%s: out of host memory", L->path), -1;
  memset(b->by_bytes, 0xff, (b->by_bytes_mask + 1) * sizeof *b->by_bytes);
  for (int k = j->n[v].kid; k >= 0; k = j->n[k].next) {
    long n = unalphabet((const uint8_t *)j->pool + j->n[k].key, j->n[k].keylen, L->scratch);
    if (n < 0)
      return GPT_ERR("%s: byte %zu: a token outside GPT-2's byte-level alphabet", L->path,
                     j->n[k].off), -1;
    if (add_token(L, (uint32_t)j->n[k].num, L->scratch, (size_t)n, j->n[k].off)) return -1;
  }
  return 0;
}

/* the merge of tokens a and b (alphabet text) at rank r */
static int add_merge(struct loader *L, const uint8_t *a, size_t na, const uint8_t *c, size_t nc,
                     size_t off) {
  struct gpt_bpe *b = L->b;
  long x = unalphabet(a, na, L->scratch), y = x < 0 ? -1 : unalphabet(c, nc, L->scratch + x);
  uint32_t ia = x < 0 ? GPT_BPE_NONE : gpt_bpe_lookup(b, L->scratch, (size_t)x);
  uint32_t ib = y < 0 ? GPT_BPE_NONE : gpt_bpe_lookup(b, L->scratch + x, (size_t)y);
  uint32_t im = ib == GPT_BPE_NONE ? ib : gpt_bpe_lookup(b, L->scratch, (size_t)(x + y));
  if (ia == GPT_BPE_NONE || ib == GPT_BPE_NONE || im == GPT_BPE_NONE)
    return GPT_ERR("%s: byte %zu: merge %zu: a part or the result is not in the vocabulary",
                   L->path, off, b->nmerges), -1;
  uint64_t pair = (uint64_t)ia << 32 | ib;
  size_t h = hash_pair(pair) & b->merges_mask;
  for (; b->merges[h].id != GPT_BPE_NONE; h = (h + 1) & b->merges_mask)
    if (b->merges[h].pair == pair) return 0;   /* repeated: the first rank holds */
  b->merges[h] = (struct gpt_bpe_merge){.pair = pair, .rank = (uint32_t)b->nmerges++, .id = im};
  return 0;
}

static int alloc_merges(struct loader *L, size_t n) {
  struct gpt_bpe *b = L->b;
  b->merges_mask = table_size(n) - 1;
  b->merges = malloc((b->merges_mask + 1) * sizeof *b->merges);
  if (!b->merges) return GPT_ERR("%s: out of host memory", L->path), -1;
  for (size_t i = 0; i <= b->merges_mask; i++) b->merges[i] = (struct gpt_bpe_merge){0, 0, GPT_BPE_NONE};
  return 0;
}

/* one merge "a b" (a line or a string) */
static int merge_text(struct loader *L, const char *s, size_t n, size_t off) {
  const char *sp = memchr(s, ' ', n);
  if (!sp || sp == s || sp + 1 == s + n || memchr(sp + 1, ' ', (size_t)(s + n - sp - 1)))
    return GPT_ERR("%s: byte %zu: a merge is not two tokens with one space between", L->path,
                   off), -1;
  return add_merge(L, (const uint8_t *)s, (size_t)(sp - s), (const uint8_t *)sp + 1,
                   (size_t)(s + n - sp - 1), off);
}

static int read_merges_json(struct loader *L, const struct gpt_json *j, int m) {
  size_t n = 0;
  if (m < 0 || j->n[m].type != GPT_JARR)
    return GPT_ERR("%s: no merges array (model.merges)", L->path), -1;
  for (int k = j->n[m].kid; k >= 0; k = j->n[k].next) n++;
  if (alloc_merges(L, n)) return -1;
  for (int k = j->n[m].kid; k >= 0; k = j->n[k].next) {
    const struct gpt_jnode *e = &j->n[k];
    int a = e->type == GPT_JARR ? e->kid : -1, c = a >= 0 ? j->n[a].next : -1;
    int rc;
    if (e->type == GPT_JSTR)
      rc = merge_text(L, j->pool + e->str, e->len, e->off);
    else if (c >= 0 && j->n[c].next < 0 && j->n[a].type == GPT_JSTR && j->n[c].type == GPT_JSTR)
      rc = add_merge(L, (const uint8_t *)j->pool + j->n[a].str, j->n[a].len,
                     (const uint8_t *)j->pool + j->n[c].str, j->n[c].len, e->off);
    else
      rc = (GPT_ERR("%s: byte %zu: a merge is neither \"a b\" nor [\"a\", \"b\"]", L->path,
                    e->off), -1);
    if (rc) return -1;
  }
  return 0;
}

/* ---- the files ---- */

char *gpt_bpe_file(const char *path, size_t *len) {
  uint64_t size;
  int fd = gpt_open_regular(path, &size);
  if (fd < 0) return NULL;
  if (size > GPT_BPE_MAX_FILE) {
    GPT_ERR("%s: %llu bytes, more than a tokenizer file may have (%llu)", path,
            (unsigned long long)size, (unsigned long long)GPT_BPE_MAX_FILE);
    return close(fd), NULL;
  }
  char *t = malloc((size_t)size + 1);
  if (!t) GPT_ERR("%s: out of host memory", path);
  if (t && gpt_read_at(fd, 0, t, (size_t)size, path)) free(t), t = NULL;
  close(fd);
  if (t) t[size] = 0, *len = (size_t)size;
  return t;
}

static int parse(const char *path, struct gpt_json *j, size_t *len) {
  char err[256];
  char *t = gpt_bpe_file(path, len);
  if (!t) return -1;
  int rc = gpt_json_parse(j, t, *len, err, sizeof err);
  free(t);
  if (rc) GPT_ERR("%s: %s", path, err), gpt_json_free(j);
  return rc;
}

/* added_tokens' ids above the vocabulary's: the table size they need */
static uint32_t added_top(const struct gpt_json *j, int at) {
  uint32_t top = 0;
  for (int k = at >= 0 ? j->n[at].kid : -1; k >= 0; k = j->n[k].next) {
    int id = gpt_json_get(j, k, "id");
    double x = id >= 0 ? j->n[id].num : -1;
    if (x >= 0 && x < GPT_BPE_MAX_VOCAB && x == (uint32_t)x && x >= top) top = (uint32_t)x + 1;
  }
  return top;
}

/* added_tokens: [{"id": N, "content": "...", "special": ...}, ...]; one
 * already in the vocabulary must be the same id there */
static int read_added(struct loader *L, const struct gpt_json *j, int at) {
  struct gpt_bpe *b = L->b;
  if (at < 0 || j->n[at].type == GPT_JNULL) return 0;
  if (j->n[at].type != GPT_JARR) return GPT_ERR("%s: added_tokens is not an array", L->path), -1;
  size_t n = 0;
  for (int k = j->n[at].kid; k >= 0; k = j->n[k].next) n++;
  b->special = calloc(n + 1, sizeof *b->special);
  if (!b->special) return GPT_ERR("%s: out of host memory", L->path), -1;
  for (int k = j->n[at].kid; k >= 0; k = j->n[k].next) {
    int id = gpt_json_get(j, k, "id"), c = gpt_json_get(j, k, "content");
    double x = id >= 0 ? j->n[id].num : -1;
    if (c < 0 || j->n[c].type != GPT_JSTR || !j->n[c].len || x < 0 || x >= b->vocab ||
        x != (uint32_t)x)
      return GPT_ERR("%s: byte %zu: an added token needs an id and a non-empty content",
                     L->path, j->n[k].off), -1;
    const uint8_t *s = (const uint8_t *)j->pool + j->n[c].str;
    uint32_t have = gpt_bpe_lookup(b, s, j->n[c].len);
    if (have == GPT_BPE_NONE && add_token(L, (uint32_t)x, s, j->n[c].len, j->n[k].off)) return -1;
    if (have != GPT_BPE_NONE && have != (uint32_t)x)
      return GPT_ERR("%s: byte %zu: added token %u is token %u in the vocabulary", L->path,
                     j->n[k].off, (uint32_t)x, have), -1;
    b->special[b->nspecial++] = (uint32_t)x;
  }
  return 0;
}

/* ---- the pre-tokenizer and the model's flags ---- */

static const char gpt2_re[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
static const char llama3_re[] =
    "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| "
    "?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

static int jstr_is(const struct gpt_json *j, int at, const char *s) {
  return at >= 0 && j->n[at].type == GPT_JSTR && j->n[at].len == strlen(s) &&
         !memcmp(j->pool + j->n[at].str, s, j->n[at].len);
}

/* a boolean member key of object at: dflt when absent; -1 when not a boolean */
static int jflag(const struct gpt_json *j, int at, const char *key, int dflt) {
  int k = gpt_json_get(j, at, key);
  if (k < 0) return dflt;
  return j->n[k].type == GPT_JBOOL ? j->n[k].num != 0 : -1;
}

/* one pre-tokenizer p: 1 + GPT_BPE_* for a split known here, 0 for a
 * ByteLevel that does not split, -1 for anything else */
static int pre_one(const struct gpt_json *j, int p) {
  int type = gpt_json_get(j, p, "type"), re;
  if (jstr_is(j, type, "ByteLevel")) {
    /* add_prefix_space: a space before the text, which te-gpt never adds */
    int r = jflag(j, p, "use_regex", 1);
    return r < 0 || jflag(j, p, "add_prefix_space", 0) ? -1 : r ? 1 + GPT_BPE_GPT2 : 0;
  }
  if (!jstr_is(j, type, "Split") || !jstr_is(j, gpt_json_get(j, p, "behavior"), "Isolated") ||
      jflag(j, p, "invert", 0) != 0)
    return -1;
  re = gpt_json_get(j, gpt_json_get(j, p, "pattern"), "Regex");
  if (jstr_is(j, re, llama3_re)) return 1 + GPT_BPE_LLAMA3;
  return jstr_is(j, re, gpt2_re) ? 1 + GPT_BPE_GPT2 : -1;
}

/* a Sequence's list: the one split in it, ByteLevels beside it */
static int pre_seq(const struct gpt_json *j, int list) {
  int found = 0;
  if (list < 0 || j->n[list].type != GPT_JARR) return -1;
  for (int k = j->n[list].kid; k >= 0; k = j->n[k].next) {
    int r = pre_one(j, k);
    if (r < 0 || (r && found)) return -1;
    found = r ? r : found;
  }
  return found;
}

/* pre_tokenizer: GPT-2's (a ByteLevel with its regex; also when absent,
 * as from a vocab.json) or Llama 3's (a Sequence of a Split on its regex
 * and a ByteLevel without); any other is refused, since a split by the
 * wrong rules gives other ids without a word */
static int read_pre(struct loader *L, const struct gpt_json *j) {
  int p = gpt_json_get(j, 0, "pre_tokenizer"), rule;
  if (p < 0) return 0;
  rule = jstr_is(j, gpt_json_get(j, p, "type"), "Sequence")
             ? pre_seq(j, gpt_json_get(j, p, "pretokenizers")) : pre_one(j, p);
  if (rule <= 0)
    return GPT_ERR("%s: byte %zu: pre_tokenizer is not GPT-2's or Llama 3's split (a ByteLevel "
                   "with its regex, or a Split on Llama 3's regex; add_prefix_space false): "
                   "te-gpt splits by those only", L->path, j->n[p].off), -1;
  L->b->split = rule - 1;
  return 0;
}

/* model.ignore_merges (Llama 3 sets it) honoured; model.byte_fallback
 * must be false (a byte-level BPE has a token for every byte already) */
static int read_flags(struct loader *L, const struct gpt_json *j, int model) {
  int ig = jflag(j, model, "ignore_merges", 0), fb = gpt_json_get(j, model, "byte_fallback");
  if (ig < 0) return GPT_ERR("%s: model.ignore_merges is not true or false", L->path), -1;
  if (fb >= 0 && j->n[fb].type != GPT_JNULL && jflag(j, model, "byte_fallback", 0) != 0)
    return GPT_ERR("%s: model.byte_fallback is not false: unsupported (byte-level BPE needs "
                   "none)", L->path), -1;
  L->b->ignore_merges = ig;
  return 0;
}

/* normalizer: none (GPT-2's and Llama 3's), since te-gpt encodes the text
 * as it is: an NFC or a lowercasing would give other ids without a word */
static int read_normalizer(struct loader *L, const struct gpt_json *j) {
  int nz = gpt_json_get(j, 0, "normalizer");
  if (nz < 0 || j->n[nz].type == GPT_JNULL) return 0;
  return GPT_ERR("%s: byte %zu: normalizer is not null: te-gpt encodes the text unnormalized",
                 L->path, j->n[nz].off), -1;
}

static int load_tokenizer_json(struct loader *L, const struct gpt_json *j) {
  int model = gpt_json_get(j, 0, "model"), type = gpt_json_get(j, model, "type");
  if (type >= 0 && (j->n[type].type != GPT_JSTR || j->n[type].len != 3 ||
                    memcmp(j->pool + j->n[type].str, "BPE", 3)))
    return GPT_ERR("%s: model.type is not \"BPE\"", L->path), -1;
  int added = gpt_json_get(j, 0, "added_tokens");
  return read_normalizer(L, j) || read_pre(L, j) || read_flags(L, j, model) ||
         read_vocab(L, j, gpt_json_get(j, model, "vocab"), added_top(j, added)) ||
         read_merges_json(L, j, gpt_json_get(j, model, "merges")) || read_added(L, j, added);
}

/* merges.txt beside vocab.json: one "a b" a line, "#version..." skipped */
static int load_merges_txt(struct loader *L, const char *vocab_path) {
  char path[4200];
  const char *slash = strrchr(vocab_path, '/');
  int dir = slash ? (int)(slash - vocab_path) + 1 : 0;
  snprintf(path, sizeof path, "%.*smerges.txt", dir, vocab_path);
  size_t len, lines = 0;
  char *t = gpt_bpe_file(path, &len);
  if (!t) return -1;
  for (size_t i = 0; i < len; i++) lines += t[i] == '\n';
  L->path = path;
  int rc = alloc_merges(L, lines + 1);
  for (size_t i = 0, e; !rc && i < len; i = e + 1) {
    const char *nl = memchr(t + i, '\n', len - i);
    e = nl ? (size_t)(nl - t) : len;
    size_t k = e - i - (e > i && t[e - 1] == '\r');
    if (k && !(i == 0 && !strncmp(t, "#version", 8))) rc = merge_text(L, t + i, k, i);
  }
  free(t);
  return rc;
}

struct gpt_bpe *gpt_bpe_load(const char *path) {
  struct gpt_json j;
  size_t len;
  if (parse(path, &j, &len)) return NULL;
  struct gpt_bpe *b = calloc(1, sizeof *b);
  struct loader L = {.b = b, .path = path, .scratch = malloc(2 * len + 2)};
  int rc = !b || !L.scratch ? (GPT_ERR("%s: out of host memory", path), -1) : 0;
  if (b) memset(b->byte_id, 0xff, sizeof b->byte_id);
  int model = gpt_json_get(&j, 0, "model");
  if (!rc && model >= 0) rc = load_tokenizer_json(&L, &j);
  else if (!rc) rc = read_vocab(&L, &j, 0, 0) || load_merges_txt(&L, path);
  if (b) b->vocab_json = model < 0;
  free(L.scratch);
  gpt_json_free(&j);
  if (rc) return gpt_bpe_free(b), NULL;
  return b;
}

void gpt_bpe_free(struct gpt_bpe *b) {
  if (!b) return;
  free(b->pool);
  free(b->tok);
  free(b->by_bytes);
  free(b->merges);
  free(b->special);
  free(b);
}
