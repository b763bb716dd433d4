/* SPDX-License-Identifier: Apache-2.0
 * gpt_json.c -- the strict JSON reader of gpt_json.h (RFC 8259): objects,
 * arrays, strings with every escape (surrogate pairs joined), numbers,
 * true/false/null; nesting at most 64 deep; nothing but white space after
 * the value.  A string's raw bytes are copied as they are (a tokenizer's
 * vocabulary is checked as UTF-8 by its reader). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "gpt_json.h"

#define JSON_DEPTH 64

struct jp {
  struct gpt_json *j;
  const char *t;
  size_t n, i;
  char *err;
  size_t errlen;
};

static int fail(struct jp *p, const char *why) {
  snprintf(p->err, p->errlen, "malformed JSON at byte %zu: %s", p->i, why);
  return -1;
}

static void ws(struct jp *p) {
  while (p->i < p->n && (p->t[p->i] == ' ' || p->t[p->i] == '\t' || p->t[p->i] == '\n' ||
                         p->t[p->i] == '\r'))
    p->i++;
}

static int grow(void **a, size_t *cap, size_t need, size_t size) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : 64;
  while (c < need) c *= 2;
  void *b = realloc(*a, c * size);
  if (!b) return -1;
  *a = b, *cap = c;
  return 0;
}

static int put(struct jp *p, const void *b, size_t k) {
  struct gpt_json *j = p->j;
  if (grow((void **)&j->pool, &j->pool_cap, j->pool_len + k + 1, 1)) return fail(p, "out of memory");
  memcpy(j->pool + j->pool_len, b, k);
  j->pool_len += k;
  return 0;
}

static int put_utf8(struct jp *p, uint32_t c) {
  unsigned char b[4];
  size_t k = c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
  static const unsigned char lead[] = {0, 0, 0xc0, 0xe0, 0xf0};
  for (size_t i = k; i-- > 1; c >>= 6) b[i] = (unsigned char)(0x80 | (c & 0x3f));
  b[0] = (unsigned char)(k == 1 ? c : (lead[k] | c));
  return put(p, b, k);
}

static int hex4(struct jp *p, uint32_t *v) {
  *v = 0;
  for (int k = 0; k < 4; k++, p->i++) {
    char c = p->i < p->n ? p->t[p->i] : 0;
    int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
          : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
    if (d < 0) return fail(p, "\\u needs four hex digits");
    *v = *v << 4 | (uint32_t)d;
  }
  return 0;
}

/* \uXXXX (p->i after the 'u'), a surrogate pair joined */
static int unicode_escape(struct jp *p) {
  uint32_t c, lo;
  if (hex4(p, &c)) return -1;
  if (c >= 0xdc00 && c < 0xe000) return fail(p, "a lone low surrogate");
  if (c >= 0xd800 && c < 0xdc00) {
    if (p->i + 1 >= p->n || p->t[p->i] != '\\' || p->t[p->i + 1] != 'u')
      return fail(p, "a high surrogate without its low half");
    p->i += 2;
    if (hex4(p, &lo)) return -1;
    if (lo < 0xdc00 || lo >= 0xe000) return fail(p, "a high surrogate without its low half");
    c = 0x10000 + ((c - 0xd800) << 10) + (lo - 0xdc00);
  }
  return put_utf8(p, c);
}

static int escape(struct jp *p) {
  static const char from[] = "\"\\/bfnrt", to[] = "\"\\/\b\f\n\r\t";
  char c = ++p->i < p->n ? p->t[p->i] : 0;
  const char *at = c ? strchr(from, c) : NULL;
  if (c == 'u') return p->i++, unicode_escape(p);
  if (!at) return fail(p, "an unknown escape");
  p->i++;
  return put(p, &to[at - from], 1);
}

/* a string at p->i (its '"') into the pool: *at, *len */
static int string(struct jp *p, size_t *at, size_t *len) {
  *at = p->j->pool_len;
  for (p->i++;;) {
    if (p->i >= p->n) return fail(p, "the text ends inside a string");
    unsigned char c = (unsigned char)p->t[p->i];
    if (c == '"') break;
    if (c < 0x20) return fail(p, "a control character inside a string");
    if (c == '\\' ? escape(p) : put(p, &p->t[p->i++], 1)) return -1;
  }
  p->i++;
  *len = p->j->pool_len - *at;
  return 0;
}

static int number(struct jp *p, struct gpt_jnode *v) {
  size_t s = p->i;
  if (p->i < p->n && p->t[p->i] == '-') p->i++;
  if (p->i >= p->n || p->t[p->i] < '0' || p->t[p->i] > '9') return fail(p, "not a value");
  if (p->t[p->i] == '0' && p->i + 1 < p->n && p->t[p->i + 1] >= '0' && p->t[p->i + 1] <= '9')
    return fail(p, "a number with a leading zero");
  while (p->i < p->n && strchr("0123456789+-.eE", p->t[p->i]) && p->t[p->i]) p->i++;
  char b[64];
  if (p->i - s >= sizeof b) return fail(p, "a number of more than 63 characters");
  memcpy(b, p->t + s, p->i - s), b[p->i - s] = 0;
  char *end;
  v->num = strtod(b, &end);
  if (*end) return p->i = s + (size_t)(end - b), fail(p, "a malformed number");
  v->type = GPT_JNUM;
  return 0;
}

static int node(struct jp *p) {
  struct gpt_json *j = p->j;
  if (j->count >= (size_t)INT32_MAX / 2 ||
      grow((void **)&j->n, &j->cap, j->count + 1, sizeof *j->n))
    return fail(p, "out of memory");
  memset(&j->n[j->count], 0, sizeof *j->n);
  j->n[j->count].kid = j->n[j->count].next = -1;
  j->n[j->count].off = p->i;
  return (int)j->count++;
}

static int value(struct jp *p, int depth);

/* the members or elements of the container at node me (p->i after its
 * opening bracket), each linked after the one before */
static int members(struct jp *p, int me, int depth, int object) {
  char close = object ? '}' : ']';
  int last = -1;
  ws(p);
  if (p->i < p->n && p->t[p->i] == close) return p->i++, 0;
  for (;;) {
    size_t key = 0, keylen = 0;
    ws(p);
    if (object) {
      if (p->i >= p->n || p->t[p->i] != '"') return fail(p, "an object member needs a name");
      if (string(p, &key, &keylen)) return -1;
      ws(p);
      if (p->i >= p->n || p->t[p->i] != ':') return fail(p, "a ':' after a member's name");
      p->i++;
    }
    int k = value(p, depth + 1);
    if (k < 0) return -1;
    p->j->n[k].key = key, p->j->n[k].keylen = keylen;
    *(last < 0 ? &p->j->n[me].kid : &p->j->n[last].next) = k;
    last = k;
    ws(p);
    if (p->i < p->n && p->t[p->i] == ',') { p->i++; continue; }
    if (p->i < p->n && p->t[p->i] == close) return p->i++, 0;
    return fail(p, object ? "a ',' or '}' in an object" : "a ',' or ']' in an array");
  }
}

static int literal(struct jp *p, struct gpt_jnode *v) {
  static const struct { const char *w; int type; double num; } lits[] = {
      {"true", GPT_JBOOL, 1}, {"false", GPT_JBOOL, 0}, {"null", GPT_JNULL, 0}};
  for (size_t k = 0; k < 3; k++) {
    size_t l = strlen(lits[k].w);
    if (p->n - p->i >= l && !memcmp(p->t + p->i, lits[k].w, l))
      return v->type = lits[k].type, v->num = lits[k].num, p->i += l, 0;
  }
  return number(p, v);
}

static int value(struct jp *p, int depth) {
  if (depth > JSON_DEPTH) return fail(p, "nested more than 64 deep");
  ws(p);
  if (p->i >= p->n) return fail(p, "the text ends where a value should be");
  int me = node(p);
  if (me < 0) return -1;
  char c = p->t[p->i];
  int rc;
  if (c == '{' || c == '[') {
    p->j->n[me].type = c == '{' ? GPT_JOBJ : GPT_JARR;
    p->i++;
    rc = members(p, me, depth, c == '{');
  } else if (c == '"') {
    size_t at, len;
    rc = string(p, &at, &len);
    p->j->n[me].type = GPT_JSTR, p->j->n[me].str = at, p->j->n[me].len = len;
  } else {
    rc = literal(p, &p->j->n[me]);
  }
  return rc ? -1 : me;
}

int gpt_json_parse(struct gpt_json *j, const char *text, size_t len, char *err, size_t errlen) {
  memset(j, 0, sizeof *j);
  struct jp p = {.j = j, .t = text, .n = len, .err = err, .errlen = errlen};
  if (value(&p, 0) < 0) return -1;
  ws(&p);
  if (p.i != p.n) return fail(&p, "text after the document's value");
  return 0;
}

void gpt_json_free(struct gpt_json *j) {
  free(j->n);
  free(j->pool);
  memset(j, 0, sizeof *j);
}

int gpt_json_get(const struct gpt_json *j, int at, const char *key) {
  if (at < 0 || j->n[at].type != GPT_JOBJ) return -1;
  size_t l = strlen(key);
  for (int k = j->n[at].kid; k >= 0; k = j->n[k].next)
    if (j->n[k].keylen == l && !memcmp(j->pool + j->n[k].key, key, l)) return k;
  return -1;
}
