/* SPDX-License-Identifier: Apache-2.0
 * st.c -- safetensors reader and writer for te-gpt's checkpoints (st.h):
 * a strict JSON parser for exactly the header's grammar (an object of
 * tensor entries and one "__metadata__" object of strings), bounds and
 * overlap checks on the offsets, and the writer. */
#include "st.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_names[ST_NDTYPES] = {"F32", "F16", "BF16", "I32",
                                                    "I64", "U8",  "F64"};
static const size_t dtype_sizes[ST_NDTYPES] = {4, 2, 2, 4, 8, 1, 8};

size_t st_dtype_size(enum st_dtype d) { return (unsigned)d < ST_NDTYPES ? dtype_sizes[d] : 0; }
const char *st_dtype_name(enum st_dtype d) {
  return (unsigned)d < ST_NDTYPES ? dtype_names[d] : "?";
}

/* ---- the JSON header ---------------------------------------------------------- */

struct px {
  const char *s;      /* the header */
  size_t n, i;        /* its length, the cursor */
  char *err;
  size_t errlen;
  int failed;
  int meta_seen;      /* "__metadata__" came (an empty one leaves f->meta NULL) */
};

static int fail(struct px *p, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct px *p, const char *fmt, ...) {
  if (p->failed) return -1;
  p->failed = 1;
  int k = snprintf(p->err, p->errlen, "header byte %zu: ", p->i);
  if (k < 0 || (size_t)k >= p->errlen) return -1;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(p->err + k, p->errlen - (size_t)k, fmt, ap);
  va_end(ap);
  return -1;
}

static void ws(struct px *p) {
  while (p->i < p->n && (p->s[p->i] == ' ' || p->s[p->i] == '\t' || p->s[p->i] == '\n' ||
                         p->s[p->i] == '\r'))
    p->i++;
}

static int expect(struct px *p, char c) {
  ws(p);
  if (p->i >= p->n) return fail(p, "the JSON ends where '%c' was expected", c);
  if (p->s[p->i] != c) return fail(p, "'%c' expected, found byte 0x%02x", c, (unsigned char)p->s[p->i]);
  p->i++;
  return 0;
}

/* the next non-blank byte, not taken; -1 at the end */
static int peek(struct px *p) {
  ws(p);
  return p->i < p->n ? (unsigned char)p->s[p->i] : -1;
}

static int hex4(struct px *p, unsigned *v) {
  if (p->n - p->i < 4) return fail(p, "a \\u escape is cut short");
  *v = 0;
  for (int k = 0; k < 4; k++) {
    char c = p->s[p->i++];
    unsigned d = c >= '0' && c <= '9' ? (unsigned)(c - '0')
                 : c >= 'a' && c <= 'f' ? (unsigned)(c - 'a' + 10)
                 : c >= 'A' && c <= 'F' ? (unsigned)(c - 'A' + 10) : 16u;
    if (d > 15) return fail(p, "a \\u escape has a byte that is not hex");
    *v = *v * 16 + d;
  }
  return 0;
}

/* appends code point cp as UTF-8 to out[*k], within cap (the NUL kept) */
static int put_utf8(struct px *p, unsigned cp, char *out, size_t cap, size_t *k) {
  char b[4];
  size_t m;
  if (cp < 0x80) b[0] = (char)cp, m = 1;
  else if (cp < 0x800) b[0] = (char)(0xc0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3f)), m = 2;
  else if (cp < 0x10000)
    b[0] = (char)(0xe0 | cp >> 12), b[1] = (char)(0x80 | ((cp >> 6) & 0x3f)),
    b[2] = (char)(0x80 | (cp & 0x3f)), m = 3;
  else
    b[0] = (char)(0xf0 | cp >> 18), b[1] = (char)(0x80 | ((cp >> 12) & 0x3f)),
    b[2] = (char)(0x80 | ((cp >> 6) & 0x3f)), b[3] = (char)(0x80 | (cp & 0x3f)), m = 4;
  if (cp == 0) return fail(p, "a string holds \\u0000");
  if (*k + m >= cap) return fail(p, "a string is longer than %zu bytes", cap - 1);
  memcpy(out + *k, b, m);
  *k += m;
  return 0;
}

/* a JSON string into out (cap bytes with the NUL) */
static int str(struct px *p, char *out, size_t cap) {
  if (expect(p, '"')) return -1;
  size_t k = 0;
  for (;;) {
    if (p->i >= p->n) return fail(p, "a string is not closed");
    unsigned char c = (unsigned char)p->s[p->i++];
    if (c == '"') break;
    if (c < 0x20) return fail(p, "a string holds control byte 0x%02x", c);
    if (c != '\\') {
      if (k + 1 >= cap) return fail(p, "a string is longer than %zu bytes", cap - 1);
      out[k++] = (char)c;
      continue;
    }
    if (p->i >= p->n) return fail(p, "a string ends in a backslash");
    char e = p->s[p->i++];
    unsigned cp;
    switch (e) {
    case '"': cp = '"'; break;
    case '\\': cp = '\\'; break;
    case '/': cp = '/'; break;
    case 'b': cp = '\b'; break;
    case 'f': cp = '\f'; break;
    case 'n': cp = '\n'; break;
    case 'r': cp = '\r'; break;
    case 't': cp = '\t'; break;
    case 'u':
      if (hex4(p, &cp)) return -1;
      if (cp >= 0xdc00 && cp <= 0xdfff) return fail(p, "a string holds a lone low surrogate");
      if (cp >= 0xd800 && cp <= 0xdbff) {
        unsigned lo;
        if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
          return fail(p, "a string holds a lone high surrogate");
        p->i += 2;
        if (hex4(p, &lo)) return -1;
        if (lo < 0xdc00 || lo > 0xdfff) return fail(p, "a surrogate pair is broken");
        cp = 0x10000 + ((cp - 0xd800) << 10) + (lo - 0xdc00);
      }
      break;
    default: return fail(p, "a string has the unknown escape \\%c", e);
    }
    if (put_utf8(p, cp, out, cap, &k)) return -1;
  }
  out[k] = 0;
  return 0;
}

/* a non-negative integer without sign, fraction or exponent */
static int uint_val(struct px *p, uint64_t *v) {
  ws(p);
  if (p->i >= p->n || p->s[p->i] < '0' || p->s[p->i] > '9')
    return fail(p, "a non-negative integer expected");
  if (p->s[p->i] == '0' && p->i + 1 < p->n && p->s[p->i + 1] >= '0' && p->s[p->i + 1] <= '9')
    return fail(p, "an integer has a leading zero");
  *v = 0;
  while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9') {
    unsigned d = (unsigned)(p->s[p->i++] - '0');
    if (*v > (UINT64_MAX - d) / 10) return fail(p, "an integer overflows 64 bits");
    *v = *v * 10 + d;
  }
  if (p->i < p->n && (p->s[p->i] == '.' || p->s[p->i] == 'e' || p->s[p->i] == 'E'))
    return fail(p, "an integer has a fraction or exponent");
  return 0;
}

/* [u, u, ...] into v (at most max; *count) */
static int uint_array(struct px *p, uint64_t *v, int max, int *count) {
  *count = 0;
  if (expect(p, '[')) return -1;
  if (peek(p) == ']') return p->i++, 0;
  for (;;) {
    if (*count >= max) return fail(p, "an array has more than %d values", max);
    if (uint_val(p, &v[(*count)++])) return -1;
    int c = peek(p);
    if (c == ',') { p->i++; continue; }
    if (c == ']') { p->i++; return 0; }
    return fail(p, "',' or ']' expected in an array");
  }
}

/* {"dtype": .., "shape": [..], "data_offsets": [b, e]}, each once */
static int tensor_entry(struct px *p, struct st_tensor *t) {
  char key[32], dt[16];
  int seen = 0;
  if (expect(p, '{')) return -1;
  if (peek(p) == '}') return fail(p, "tensor \"%s\" has no fields", t->name);
  for (;;) {
    if (str(p, key, sizeof key) || expect(p, ':')) return -1;
    int bit = !strcmp(key, "dtype") ? 1 : !strcmp(key, "shape") ? 2
              : !strcmp(key, "data_offsets") ? 4 : 0;
    if (!bit) return fail(p, "tensor \"%s\": unknown field \"%s\"", t->name, key);
    if (seen & bit) return fail(p, "tensor \"%s\": field \"%s\" twice", t->name, key);
    seen |= bit;
    if (bit == 1) {
      if (str(p, dt, sizeof dt)) return -1;
      int d = 0;
      while (d < ST_NDTYPES && strcmp(dt, dtype_names[d])) d++;
      if (d == ST_NDTYPES) return fail(p, "tensor \"%s\": unknown dtype \"%s\"", t->name, dt);
      t->dtype = (enum st_dtype)d;
    } else if (bit == 2) {
      if (uint_array(p, t->shape, ST_MAX_DIMS, &t->ndim)) return -1;
    } else {
      uint64_t o[2];
      int k;
      if (uint_array(p, o, 2, &k)) return -1;
      if (k != 2) return fail(p, "tensor \"%s\": data_offsets needs 2 values", t->name);
      t->begin = o[0], t->end = o[1];
    }
    int c = peek(p);
    if (c == ',') { p->i++; continue; }
    if (c == '}') { p->i++; break; }
    return fail(p, "',' or '}' expected in tensor \"%s\"", t->name);
  }
  if (seen != 7)
    return fail(p, "tensor \"%s\" lacks %s", t->name,
                !(seen & 1) ? "dtype" : !(seen & 2) ? "shape" : "data_offsets");
  return 0;
}

static int meta_object(struct px *p, struct st_file *f) {
  if (p->meta_seen++) return fail(p, "\"__metadata__\" twice");
  size_t cap = 0;
  if (expect(p, '{')) return -1;
  if (peek(p) == '}') return p->i++, 0;
  for (;;) {
    /* each entry costs sizeof (struct st_meta), over a kilobyte, for a
     * few bytes of header, and is compared with every other: bounded */
    if (f->nmeta == ST_MAX_META) return fail(p, "more than %d metadata entries", ST_MAX_META);
    if (f->nmeta == cap) {
      cap = cap ? 2 * cap : 16;
      struct st_meta *m = realloc(f->meta, cap * sizeof *m);
      if (!m) return fail(p, "out of memory");
      f->meta = m;
    }
    struct st_meta *m = &f->meta[f->nmeta];
    if (str(p, m->key, sizeof m->key) || expect(p, ':') || str(p, m->value, sizeof m->value))
      return -1;
    for (size_t j = 0; j < f->nmeta; j++)
      if (!strcmp(f->meta[j].key, m->key)) return fail(p, "metadata key \"%s\" twice", m->key);
    f->nmeta++;
    int c = peek(p);
    if (c == ',') { p->i++; continue; }
    if (c == '}') { p->i++; return 0; }
    return fail(p, "',' or '}' expected in \"__metadata__\"");
  }
}

static int header(struct px *p, struct st_file *f) {
  size_t cap = 0;
  if (expect(p, '{')) return -1;
  if (peek(p) == '}') { p->i++; goto tail; }
  for (;;) {
    char name[ST_MAX_NAME];
    if (str(p, name, sizeof name) || expect(p, ':')) return -1;
    if (!strcmp(name, "__metadata__")) {
      if (meta_object(p, f)) return -1;
    } else {
      if (!name[0]) return fail(p, "a tensor has an empty name");
      if (f->nt == cap) {
        cap = cap ? 2 * cap : 64;
        struct st_tensor *t = realloc(f->t, cap * sizeof *t);
        if (!t) return fail(p, "out of memory");
        f->t = t;
      }
      struct st_tensor *t = &f->t[f->nt];
      memset(t, 0, sizeof *t);
      memcpy(t->name, name, sizeof name);
      if (tensor_entry(p, t)) return -1;
      f->nt++;
    }
    int c = peek(p);
    if (c == ',') { p->i++; continue; }
    if (c == '}') { p->i++; break; }
    return fail(p, "',' or '}' expected after an entry");
  }
tail:
  ws(p);
  if (p->i != p->n) return fail(p, "bytes after the JSON object");
  return 0;
}

/* ---- the checks on the tensors ---------------------------------------------------- */

static int by_begin(const void *a, const void *b) {
  const struct st_tensor *x = *(const struct st_tensor *const *)a;
  const struct st_tensor *y = *(const struct st_tensor *const *)b;
  return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : strcmp(x->name, y->name);
}

static int by_name(const void *a, const void *b) {
  return strcmp((*(const struct st_tensor *const *)a)->name,
                (*(const struct st_tensor *const *)b)->name);
}

/* Each tensor's shape against its offsets, inside the data. */
static int check_spans(const struct st_file *f, char *err, size_t errlen) {
  for (size_t i = 0; i < f->nt; i++) {
    const struct st_tensor *t = &f->t[i];
    uint64_t bytes = st_dtype_size(t->dtype);
    for (int d = 0; d < t->ndim; d++) {
      if (t->shape[d] && bytes > UINT64_MAX / t->shape[d]) {
        snprintf(err, errlen, "tensor \"%s\": the shape's byte size overflows", t->name);
        return -1;
      }
      bytes *= t->shape[d];
    }
    if (t->begin > t->end || t->end > f->data_len) {
      snprintf(err, errlen,
               "tensor \"%s\": data_offsets [%llu, %llu] out of the data (%llu bytes)",
               t->name, (unsigned long long)t->begin, (unsigned long long)t->end,
               (unsigned long long)f->data_len);
      return -1;
    }
    if (t->end - t->begin != bytes) {
      snprintf(err, errlen, "tensor \"%s\": data_offsets span %llu bytes, its shape %llu",
               t->name, (unsigned long long)(t->end - t->begin), (unsigned long long)bytes);
      return -1;
    }
  }
  return 0;
}

/* Overlaps (sorted by offset) and names given twice (sorted by name:
 * n log n, where comparing every pair took minutes for 200,000 tensors);
 * the name order stays as st_find's index. */
static int check_tensors(struct st_file *f, char *err, size_t errlen) {
  if (check_spans(f, err, errlen)) return -1;
  const struct st_tensor **s = malloc((f->nt ? f->nt : 1) * sizeof *s);
  if (!s) return snprintf(err, errlen, "out of memory"), -1;
  for (size_t i = 0; i < f->nt; i++) s[i] = &f->t[i];
  qsort(s, f->nt, sizeof *s, by_begin);
  for (size_t i = 1; i < f->nt; i++)
    if (s[i]->begin < s[i - 1]->end) {
      snprintf(err, errlen, "tensors \"%s\" and \"%s\" overlap", s[i - 1]->name, s[i]->name);
      return free(s), -1;
    }
  qsort(s, f->nt, sizeof *s, by_name);
  for (size_t i = 1; i < f->nt; i++)
    if (!strcmp(s[i - 1]->name, s[i]->name)) {
      snprintf(err, errlen, "tensor \"%s\" named twice", s[i]->name);
      return free(s), -1;
    }
  f->by_name = s;
  return 0;
}

/* err as printable ASCII: the names and values quoted in it are the
 * file's, and must not reach a terminal as control sequences */
static void escape_err(char *err, size_t errlen) {
  char *copy = strdup(err);
  if (copy) st_escape(copy, err, errlen);
  free(copy);
}

int st_header_len(const uint8_t first8[8], uint64_t file_len, uint64_t *n, char *err,
                  size_t errlen) {
  if (file_len < 8) {
    snprintf(err, errlen, "%llu bytes: shorter than the 8-byte header length",
             (unsigned long long)file_len);
    return -1;
  }
  *n = 0;
  for (int k = 7; k >= 0; k--) *n = *n << 8 | first8[k];
  if (*n > file_len - 8 || *n > ST_MAX_HEADER) {
    snprintf(err, errlen, "header length %llu: past the file's %llu bytes (or over %u)",
             (unsigned long long)*n, (unsigned long long)file_len, ST_MAX_HEADER);
    return -1;
  }
  if (*n == 0) {
    snprintf(err, errlen, "the header is empty");
    return -1;
  }
  return 0;
}

int st_parse_header(const char *hdr, size_t n, uint64_t data_len, struct st_file *f, char *err,
                    size_t errlen) {
  memset(f, 0, sizeof *f);
  struct px p = {.s = hdr, .n = n, .err = err, .errlen = errlen};
  f->data_len = data_len;
  if (header(&p, f) || check_tensors(f, err, errlen)) {
    st_free(f);
    escape_err(err, errlen);
    return -1;
  }
  return 0;
}

uint64_t st_data_end(const struct st_file *f) {
  uint64_t end = 0;
  for (size_t i = 0; i < f->nt; i++)
    if (f->t[i].end > end) end = f->t[i].end;
  return end;
}

void st_set_data(struct st_file *f, const uint8_t *data) {
  for (size_t i = 0; i < f->nt; i++) f->t[i].data = data + f->t[i].begin;
}

int st_parse(const uint8_t *buf, size_t len, struct st_file *f, char *err, size_t errlen) {
  uint64_t n;
  memset(f, 0, sizeof *f);
  if (st_header_len(buf, len, &n, err, errlen) ||
      st_parse_header((const char *)buf + 8, (size_t)n, len - 8 - n, f, err, errlen))
    return -1;
  st_set_data(f, buf + 8 + n);
  return 0;
}

size_t st_escape(const char *s, char *out, size_t n) {
  size_t k = 0;
  if (!n) return 0;
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    char e[8];
    int m = c >= 0x20 && c < 0x7f ? snprintf(e, sizeof e, "%c", c)
                                  : snprintf(e, sizeof e, "\\x%02x", c);
    if (k + (size_t)m >= n) break;   /* whole escapes only */
    memcpy(out + k, e, (size_t)m);
    k += (size_t)m;
  }
  out[k] = '\0';
  return k;
}

void st_free(struct st_file *f) {
  free(f->t);
  free(f->meta);
  free(f->by_name);
  memset(f, 0, sizeof *f);
}

const struct st_tensor *st_find(const struct st_file *f, const char *name) {
  size_t lo = 0, hi = f->by_name ? f->nt : 0;   /* f->by_name: sorted by name */
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(f->by_name[mid]->name, name);
    if (!c) return f->by_name[mid];
    if (c < 0) lo = mid + 1;
    else hi = mid;
  }
  return NULL;
}

const char *st_meta_get(const struct st_file *f, const char *key) {
  for (size_t i = 0; i < f->nmeta; i++)
    if (!strcmp(f->meta[i].key, key)) return f->meta[i].value;
  return NULL;
}

/* ---- the writer ------------------------------------------------------------------ */

/* s as a JSON string (names and values here are printable ASCII; others escaped) */
static void put_str(FILE *h, const char *s) {
  fputc('"', h);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(h, "\\%c", c);
    else if (c < 0x20) fprintf(h, "\\u%04x", c);
    else fputc(c, h);
  }
  fputc('"', h);
}

int st_write(const char *path, struct st_tensor *t, size_t n, const struct st_meta *meta,
             size_t nmeta, char *err, size_t errlen) {
  char *hdr = NULL;
  size_t hlen = 0;
  FILE *h = open_memstream(&hdr, &hlen);
  if (!h) return snprintf(err, errlen, "%s: out of memory", path), -1;
  uint64_t off = 0;
  fputc('{', h);
  if (nmeta) {
    fputs("\"__metadata__\":{", h);
    for (size_t i = 0; i < nmeta; i++) {
      if (i) fputc(',', h);
      put_str(h, meta[i].key);
      fputc(':', h);
      put_str(h, meta[i].value);
    }
    fputc('}', h);
  }
  for (size_t i = 0; i < n; i++) {
    uint64_t bytes = st_dtype_size(t[i].dtype);
    for (int d = 0; d < t[i].ndim; d++) bytes *= t[i].shape[d];
    t[i].begin = off;
    t[i].end = off += bytes;
    if (i || nmeta) fputc(',', h);
    put_str(h, t[i].name);
    fprintf(h, ":{\"dtype\":\"%s\",\"shape\":[", st_dtype_name(t[i].dtype));
    for (int d = 0; d < t[i].ndim; d++)
      fprintf(h, "%s%llu", d ? "," : "", (unsigned long long)t[i].shape[d]);
    fprintf(h, "],\"data_offsets\":[%llu,%llu]}", (unsigned long long)t[i].begin,
            (unsigned long long)t[i].end);
  }
  fputc('}', h);
  /* pad with blanks so that the data starts 8-byte aligned */
  while ((ftell(h) + 8) % 8) fputc(' ', h);
  if (fclose(h)) return free(hdr), snprintf(err, errlen, "%s: out of memory", path), -1;
  FILE *o = fopen(path, "wb");
  if (!o) {
    snprintf(err, errlen, "%s: %s", path, strerror(errno));
    free(hdr);
    return -1;
  }
  uint8_t le[8];
  for (int k = 0; k < 8; k++) le[k] = (uint8_t)((uint64_t)hlen >> (8 * k));
  int bad = fwrite(le, 1, 8, o) != 8 || fwrite(hdr, 1, hlen, o) != hlen;
  for (size_t i = 0; i < n && !bad; i++)
    bad = fwrite(t[i].data, 1, t[i].end - t[i].begin, o) != t[i].end - t[i].begin;
  bad |= fclose(o) != 0;
  free(hdr);
  if (bad) return snprintf(err, errlen, "%s: write failed: %s", path, strerror(errno)), -1;
  return 0;
}
