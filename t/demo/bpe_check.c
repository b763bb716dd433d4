/* SPDX-License-Identifier: Apache-2.0
 * bpe_check.c -- te-gpt's byte-level BPE tokenizer (tools/gpt/gpt_bpe.c),
 * TAP on stdout:
 *  1. GPT-2's and Llama 3's pre-tokenizer splits of hand-worked strings;
 *  2. the fixture t/demo/bpe/ (256 byte tokens, 15 merges, one added
 *     token), read as tokenizer.json and as vocab.json + merges.txt, gives
 *     the ids worked out by hand from the merge ranks;
 *  3. decode(encode(x)) == x for random bytes and random UTF-8, 200 seeds
 *     each (the seed printed; TE_TEST_SEED=N repeats a run);
 *  4. malformed files refused, naming the byte offset;
 *  5. 300 randomly mutated tokenizer.json files: refused or sound;
 *  6. t/demo/bpe/llama3.json (Llama 3's pre_tokenizer and ignore_merges):
 *     hand-worked ids, round trips over 200 seeds, and edits of it that
 *     would split or encode wrongly (another regex, byte_fallback,
 *     add_prefix_space, a normalizer) refused;
 *  7. no quadratic costs: a megabyte of spaces, 1e6 merges, in seconds.
 * Environment: srcdir (automake's).  bpe_check --split gpt2|llama3 splits
 * hex lines of stdin instead (t/demo/bpe-regex.sh compares it with the
 * regex module); bpe_check --encode FILE turns hex lines into FILE's ids,
 * --decode FILE lines of ids into hex (t/demo/bpe-hf.sh compares them
 * with Hugging Face's tokenizers). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include "gpt.h"
#include "gpt_bpe.h"

static int ntest, nfail;
static char tmp[256];

/* a TAP line: what with control and non-ASCII bytes as \xNN */
static void ok(int cond, const char *fmt, const char *what) {
  char line[512], *o = line;
  printf("%sok %d - ", cond ? "" : "not ", ++ntest);
  snprintf(line, sizeof line, fmt, what);
  for (; *o; o++)
    if ((unsigned char)*o < 0x20 || (unsigned char)*o >= 0x7f) printf("\\x%02x", (unsigned char)*o);
    else putchar(*o);
  printf("\n");
  nfail += !cond;
}

static uint64_t rng;
static uint32_t draw(void) {   /* splitmix64 */
  uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull, z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return (uint32_t)((z ^ (z >> 31)) >> 32);
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* the pieces of s by GPT-2's split (llama3: Llama 3's) joined with '|' into out */
static void pieces(const char *s, char *out, int llama3) {
  size_t n = strlen(s), o = 0;
  for (size_t i = 0, e; i < n; i = e) {
    e = llama3 ? gpt_bpe_piece_end_llama3((const uint8_t *)s, n, i)
               : gpt_bpe_piece_end((const uint8_t *)s, n, i);
    if (i) out[o++] = '|';
    memcpy(out + o, s + i, e - i), o += e - i;
  }
  out[o] = 0;
}

static void test_split(void) {
  static const char *const cases[][2] = {
      {"Hello world", "Hello| world"},
      {"it's we'll I'd they're", "it|'s| we|'ll| I|'d| they|'re"},
      {"a   b", "a|  | b"},
      {"x  ", "x|  "},
      {"  \n\nfoo", "  \n|\n|foo"},
      {"12345 678", "12345| 678"},
      {"abc123def", "abc|123|def"},
      {"hi!!! ?? ...", "hi|!!!| ??| ..."},
      {"caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve"},
      {"\xd0\xbf\xd1\x80\xd0\xb8 \xe4\xb8\xad\xe6\x96\x87", "\xd0\xbf\xd1\x80\xd0\xb8| \xe4\xb8\xad\xe6\x96\x87"},
      {"''s", "''|s"},
      {"a\tb", "a|\t|b"},
      {"x\xff\xfey", "x|\xff\xfe|y"},
  };
  char got[256];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pieces(cases[i][0], got, 0);
    ok(!strcmp(got, cases[i][1]), "pre-tokenizer split of \"%s\"", cases[i][1]);
    if (strcmp(got, cases[i][1])) printf("# wrong split\n");
  }
}

/* Llama 3's split, one case or more per alternative of its regex (worked
 * by hand, and checked against Python's regex module once) */
static void test_split_llama3(void) {
  static const char *const cases[][2] = {
      /* (?i:'s|'t|'re|'ve|'m|'ll|'d): any case, and U+017F for s */
      {"IT'S We'LL i'D they'Re you'VE I'M", "IT|'S| We|'LL| i|'D| they|'Re| you|'VE| I|'M"},
      {"don'\xc5\xbf", "don|'\xc5\xbf"},
      {"''s", "''|s"},
      /* [^\r\n\p{L}\p{N}]?\p{L}+: one leading space, tab or symbol */
      {"Hello world", "Hello| world"},
      {"(hello) $word", "(hello|)| $|word"},
      {"a\tb", "a|\tb"},
      {"caf\xc3\xa9 na\xc3\xafve", "caf\xc3\xa9| na\xc3\xafve"},
      {"\xd0\xbf\xd1\x80\xd0\xb8 \xe4\xb8\xad\xe6\x96\x87", "\xd0\xbf\xd1\x80\xd0\xb8| \xe4\xb8\xad\xe6\x96\x87"},
      {"\nword", "\n|word"},
      /* \p{N}{1,3}: digits in groups of three, no leading space */
      {"12345 678", "123|45| |678"},
      {"abc1234567def", "abc|123|456|7|def"},
      {"a\xc2\xb2\xc2\xb3\xc2\xb9\xc2\xbc" "5", "a|\xc2\xb2\xc2\xb3\xc2\xb9|\xc2\xbc" "5"},
      /*  ?[^\s\p{L}\p{N}]+[\r\n]*: newlines kept with the symbols */
      {"hi!!! ?? ...", "hi|!!!| ??| ..."},
      {"foo.\n\nbar", "foo|.\n\n|bar"},
      {"..\r\n\r\nz", "..\r\n\r\n|z"},
      {"x\xff\xfey", "x|\xff\xfe|y"},
      {"x\xffy", "x|\xffy"},
      /* \s*[\r\n]+: spaces up to the last newline */
      {"  \n\nfoo", "  \n\n|foo"},
      {"a \n \n b", "a| \n \n| b"},
      {" \r\n", " \r\n"},
      /* \s+(?!\S) and \s+ */
      {"a   b", "a|  | b"},
      {"x  ", "x|  "},
      {"x 1", "x| |1"},
      /* letters and numbers outside the common blocks, as Hugging Face's
       * tokenizers 0.23 splits them (each was "other" when te-gpt knew only
       * those blocks): U+066F Arabic dotless qaf, U+31350 (Unicode 15's
       * CJK extension H), U+0D5F, U+0E33 Thai sara am, U+02EC/U+02EE
       * modifier letters, U+1D7CE.. mathematical digits */
      {"\xd9\xaf_L", "\xd9\xaf|_L"},
      {"a\xf0\xb1\x8d\x90" "b", "a\xf0\xb1\x8d\x90" "b"},
      {"x\xe0\xb5\x9f\xe0\xb5\x9f", "x\xe0\xb5\x9f\xe0\xb5\x9f"},
      {"q\xe0\xb8\xb3\xe0\xb8\xb3", "q\xe0\xb8\xb3\xe0\xb8\xb3"},
      {"z\xcb\xac\xcb\xae", "z\xcb\xac\xcb\xae"},
      {"7\xf0\x9d\x9f\x8e\xf0\x9d\x9f\x8f\xf0\x9d\x9f\x90\xf0\x9d\x9f\x91",
       "7\xf0\x9d\x9f\x8e\xf0\x9d\x9f\x8f|\xf0\x9d\x9f\x90\xf0\x9d\x9f\x91"},
  };
  char got[256];
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    pieces(cases[i][0], got, 1);
    ok(!strcmp(got, cases[i][1]), "Llama 3 split of \"%s\"", cases[i][1]);
    if (strcmp(got, cases[i][1])) printf("# got \"%s\"\n", got);
  }
}

/* the ids of s, 0-terminated list want (ids never 0 in these cases) */
static int encodes(const struct gpt_bpe *b, const char *s, const uint32_t *want, size_t nwant) {
  uint32_t *ids = NULL;
  size_t n = 0, cap = 0;
  int good = !gpt_bpe_encode(b, (const uint8_t *)s, strlen(s), &ids, &n, &cap) && n == nwant &&
             !memcmp(ids, want, n * sizeof *ids);
  if (!good) {
    printf("# \"%s\":", s);
    for (size_t i = 0; i < n; i++) printf(" %u", ids[i]);
    printf("\n");
  }
  free(ids);
  return good;
}

static void test_fixture(const struct gpt_bpe *b, const char *which) {
  /* ids: a byte is its value; 256 th, 257 the, 258 " the", 259 in,
   * 260 ing, 261 aa, 262 aaa, 263 "  ", 264 er, 265 's, 266 12, 267 é,
   * 268 ca, 269 caf, 270 café; 271 <|endoftext|> */
  static const struct { const char *s; uint32_t ids[8]; size_t n; } cases[] = {
      {"the", {257}, 1},
      {" the", {258}, 1},
      {"aaa", {262}, 1},
      {"aaaa", {261, 261}, 2},     /* (a,a) leftmost twice; (aa,aa) no merge */
      {"aaaaa", {261, 262}, 2},
      {"it's", {'i', 't', 265}, 3},
      {"   x", {263, ' ', 'x'}, 3},
      {"x  ", {'x', 263}, 2},
      {"caf\xc3\xa9", {270}, 1},
      {"12345", {266, '3', '4', '5'}, 4},
      {"ring", {'r', 260}, 2},
      {"there", {257, 'r', 'e'}, 3},   /* (th,e) ranks before (e,r) */
      {"a<|endoftext|>b", {'a', 271, 'b'}, 3},
      {"\xff\xfe", {255, 254}, 2},
  };
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
    if (!strcmp(which, "vocab.json") && strstr(cases[i].s, "<|")) continue;   /* no added tokens */
    int good = encodes(b, cases[i].s, cases[i].ids, cases[i].n);
    char what[128];
    snprintf(what, sizeof what, "%s: \"%s\"", which, cases[i].s);
    ok(good, "encode %s by hand", what);
  }
}

/* decode(encode(x)) == x for random text of either kind, 200 seeds */
static void test_round_trip(const struct gpt_bpe *b, int utf8) {
  static const uint32_t cps[] = {'a', 'Z', ' ', ' ', '\n', '\t', '7', '\'', '!', 0xe9, 0x3b1,
                                 0x43f, 0x4e2d, 0xac00, 0x1f600, 0x2003, 0x661, 0x301};
  int good = 1;
  for (int seed = 0; seed < 200 && good; seed++) {
    uint8_t t[1200];
    size_t n = 0, len = draw() % 300;
    for (size_t k = 0; k < len; k++) {
      if (!utf8) { t[n++] = (uint8_t)draw(); continue; }
      uint32_t c = cps[draw() % (sizeof cps / sizeof cps[0])];
      if (c < 0x80) t[n++] = (uint8_t)c;
      else if (c < 0x800) t[n++] = (uint8_t)(0xc0 | c >> 6), t[n++] = (uint8_t)(0x80 | (c & 63));
      else if (c < 0x10000)
        t[n++] = (uint8_t)(0xe0 | c >> 12), t[n++] = (uint8_t)(0x80 | (c >> 6 & 63)),
        t[n++] = (uint8_t)(0x80 | (c & 63));
      else
        t[n++] = (uint8_t)(0xf0 | c >> 18), t[n++] = (uint8_t)(0x80 | (c >> 12 & 63)),
        t[n++] = (uint8_t)(0x80 | (c >> 6 & 63)), t[n++] = (uint8_t)(0x80 | (c & 63));
    }
    uint32_t *ids = NULL;
    size_t nid = 0, cap = 0, dlen = 0;
    uint8_t *d = gpt_bpe_encode(b, t, n, &ids, &nid, &cap) ? NULL : gpt_bpe_decode(b, ids, nid, &dlen);
    good = d && dlen == n && !memcmp(d, t, n) && (n == 0 || nid > 0);
    free(d), free(ids);
  }
  ok(good, "decode(encode(x)) == x, 200 seeds of random %s", utf8 ? "UTF-8" : "bytes");
}

static void put_file(const char *name, const char *text) {
  char p[512];
  snprintf(p, sizeof p, "%s/%s", tmp, name);
  FILE *f = fopen(p, "w");
  fputs(text, f);
  fclose(f);
}

/* loading text as tokenizer.json fails with a message holding want */
static void refused(const char *text, const char *want, const char *what) {
  char p[512], log[512], msg[1024] = "";
  put_file("tokenizer.json", text);
  snprintf(p, sizeof p, "%s/tokenizer.json", tmp);
  snprintf(log, sizeof log, "%s/err", tmp);
  fflush(stderr);
  int save = dup(2);
  FILE *e = freopen(log, "w", stderr);
  struct gpt_bpe *b = gpt_bpe_load(p);
  fflush(stderr);
  dup2(save, 2), close(save);
  (void)e;
  FILE *f = fopen(log, "r");
  size_t k = f ? fread(msg, 1, sizeof msg - 1, f) : 0;
  msg[k] = 0;
  if (f) fclose(f);
  ok(!b && strstr(msg, want), "malformed file refused: %s", what);
  if (b || !strstr(msg, want)) printf("# message: %s", msg);
  gpt_bpe_free(b);
}

static void test_refused(void) {
  const char *m = "{\"model\":{\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},\"merges\":[";
  char t[512];
  refused("{\"model\": {\"vocab\": {\"a\": 0", "at byte 27", "truncated");
  refused("{\"model\": {\"vocab\": {\"a\\q\": 0}}}", "unknown escape", "a bad escape");
  refused("{\"model\": {\"vocab\": {\"a\": 0,}}}", "at byte 28", "a trailing comma");
  refused("{\"model\": {\"vocab\": {\"a\": 0}}} x", "text after", "text after the value");
  refused("{\"model\": {\"vocab\": {\"a\": -1}, \"merges\": []}}", "not an integer", "id -1");
  refused("{\"model\": {\"vocab\": {\"a\": 1e9}, \"merges\": []}}", "not an integer", "id 1e9");
  refused("{\"model\": {\"vocab\": {\"a\": 0, \"b\": 0}, \"merges\": []}}", "given twice",
          "a repeated id");
  refused("{\"model\": {\"vocab\": {\"\xe2\x82\xac\": 0}, \"merges\": []}}", "alphabet",
          "a token outside the byte-level alphabet");
  snprintf(t, sizeof t, "%s\"a c\"]}}", m);
  refused(t, "not in the vocabulary", "a merge of an unknown token");
  snprintf(t, sizeof t, "%s\"a b c\"]}}", m);
  refused(t, "one space", "a merge of three tokens");
  snprintf(t, sizeof t, "%s[\"a\"]]}}", m);
  refused(t, "neither", "a merge of one token");
  snprintf(t, sizeof t, "%s\"a b\"]}, \"added_tokens\": [{\"id\": 1, \"content\": \"a\"}]}", m);
  refused(t, "is token 0", "an added token with another id");
  char deep[300];
  memset(deep, '[', 200), deep[200] = 0;
  refused(deep, "64 deep", "nested 200 deep");
  refused("{\"model\": {\"type\": \"Unigram\", \"vocab\": {}}}", "not \"BPE\"", "a Unigram model");
}

/* a megabyte of spaces and a megabyte of one letter encode in linear time */
static void test_long_piece(const struct gpt_bpe *b) {
  size_t n = 1 << 20;
  uint8_t *t = malloc(n);
  uint32_t *ids = NULL;
  size_t nid = 0, cap = 0;
  memset(t, ' ', n);
  double t0 = now();
  int rc = gpt_bpe_encode(b, t, n, &ids, &nid, &cap);
  memset(t, 'a', n);
  rc = rc || gpt_bpe_encode(b, t, n, &ids, &nid, &cap);
  double dt = now() - t0;
  printf("# 2 MiB in two pieces: %.2f s, %zu ids\n", dt, nid);
  ok(!rc && nid == n && dt < 30, "%s", "a megabyte-long piece encodes in linear time");
  free(t), free(ids);
}

/* alphabet text of byte x (GPT-2's byte-to-unicode) into s: its length */
static int alpha(int x, char *s) {
  int keep = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
  int c = x, k = 256;
  if (!keep)
    for (int y = 0; y < x; y++) k += !((y >= '!' && y <= '~') || (y >= 0xa1 && y <= 0xac) || (y >= 0xae && y <= 0xff));
  if (!keep) c = k;
  if (c < 0x80) return s[0] = (char)c, 1;
  s[0] = (char)(0xc0 | c >> 6), s[1] = (char)(0x80 | (c & 63));
  return 2;
}

/* s[0..n) as a JSON string's body */
static void jput(FILE *f, const char *s, int n) {
  for (int i = 0; i < n; i++) {
    if (s[i] == '"' || s[i] == '\\') fputc('\\', f);
    fputc(s[i], f);
  }
}

/* 1e6 merges: every pair of bytes, then byte pairs with a third byte */
static void test_many_merges(void) {
  char p[512], a[4], c[4], z[4];
  snprintf(p, sizeof p, "%s/vocab.json", tmp);
  FILE *v = fopen(p, "w");
  snprintf(p, sizeof p, "%s/merges.txt", tmp);
  FILE *m = fopen(p, "w");
  size_t id = 256, want = 1000000;
  fputc('{', v);
  for (int x = 0; x < 256; x++) {
    fputs(x ? ",\"" : "\"", v), jput(v, a, alpha(x, a)), fprintf(v, "\":%d", x);
  }
  for (size_t k = 0; k < want; k++) {
    int x = (int)(k % 256), y = (int)(k / 256 % 256), w = (int)(k / 65536), na = alpha(x, a),
        nc = alpha(y, c), nz = k < 65536 ? 0 : alpha(w - 1, z);
    fprintf(m, "%.*s%.*s %.*s\n", nz, z, na, a, nc, c);
    fputs(",\"", v), jput(v, z, nz), jput(v, a, na), jput(v, c, nc), fprintf(v, "\":%zu", id++);
  }
  fputs("}\n", v);
  fclose(v), fclose(m);
  snprintf(p, sizeof p, "%s/vocab.json", tmp);
  double t0 = now();
  struct gpt_bpe *b = gpt_bpe_load(p);
  double dt = now() - t0;
  printf("# 1e6 merges loaded in %.2f s\n", dt);
  ok(b && b->nmerges == want && dt < 60, "%s", "1e6 merges load in linear time");
  gpt_bpe_free(b);
}

/* the fixture's tokenizer.json with a few bytes overwritten, cut short or
 * doubled, 300 times: each loads or is refused, never crashes (ASan), and
 * what loads still round-trips random bytes */
static void test_mutants(void) {
  char p[4200], q[512];
  const char *src = getenv("srcdir");
  snprintf(p, sizeof p, "%s/t/demo/bpe/tokenizer.json", src ? src : ".");
  FILE *f = fopen(p, "rb");
  static char text[16384];
  size_t n = f ? fread(text, 1, sizeof text, f) : 0;
  if (f) fclose(f);
  snprintf(q, sizeof q, "%s/tokenizer.json", tmp);
  int loaded = 0, good = n > 0;
  fflush(stderr);
  int save = dup(2), null = open("/dev/null", O_WRONLY);
  dup2(null, 2);
  for (int k = 0; k < 300 && good; k++) {
    char m[16384];
    size_t len = n;
    memcpy(m, text, n);
    for (int e = 0, ne = 1 + (int)(draw() % 4); e < ne; e++) {
      static const char pick[] = "{}[]\":,\\ 0123456789-e.tfnu\x01\xff\xc4\xa0";
      size_t at = draw() % len;
      if (draw() % 8 == 0) len = at + 1;
      else m[at] = pick[draw() % (sizeof pick - 1)];
    }
    FILE *w = fopen(q, "wb");
    fwrite(m, 1, len, w);
    fclose(w);
    struct gpt_bpe *b = gpt_bpe_load(q);
    if (b) {
      uint8_t t[64];
      uint32_t *ids = NULL;
      size_t nid = 0, cap = 0, dl = 0;
      for (size_t i = 0; i < sizeof t; i++) t[i] = (uint8_t)draw();
      /* a mutant may lose a byte's token: then encode refuses, fine */
      uint8_t *d = gpt_bpe_encode(b, t, sizeof t, &ids, &nid, &cap) ? NULL
                   : gpt_bpe_decode(b, ids, nid, &dl);
      if (d) good = dl == sizeof t && !memcmp(d, t, dl);
      free(d), free(ids);
      loaded++;
    }
    gpt_bpe_free(b);
  }
  fflush(stderr);
  dup2(save, 2), close(save), close(null);
  printf("# %d of 300 mutants loaded\n", loaded);
  ok(good, "%s", "300 mutated tokenizer.json files: each refused or sound");
}

/* t/demo/bpe/name's text into buf (NUL-terminated): its length */
static size_t fixture_text(const char *name, char *buf, size_t cap) {
  char p[4200];
  const char *src = getenv("srcdir");
  snprintf(p, sizeof p, "%s/t/demo/bpe/%s", src ? src : ".", name);
  FILE *f = fopen(p, "rb");
  size_t n = f ? fread(buf, 1, cap - 1, f) : 0;
  if (f) fclose(f);
  buf[n] = 0;
  return n;
}

/* text with the first from replaced by to, loaded as tokenizer.json */
static void refused_edit(const char *text, const char *from, const char *to, const char *want,
                         const char *what) {
  static char m[20000];
  const char *at = strstr(text, from);
  if (!at) {
    ok(0, "%s: the fixture holds the text to edit", what);
    return;
  }
  snprintf(m, sizeof m, "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
  refused(m, want, what);
}

/* t/demo/bpe/llama3.json: the fixture's tokens and merges (as pairs)
 * under Llama 3's pre_tokenizer, ignore_merges set, one more token
 * "aaaa" (272) that the merges never make, the added token renamed */
static void test_llama3(const struct gpt_bpe *b) {
  static const struct { const char *s; uint32_t ids[8]; size_t n; } cases[] = {
      {"aaaa", {272}, 1},               /* ignore_merges: the piece is a token */
      {"aaaaa", {261, 262}, 2},         /* not a token: merged as before */
      {"it'S", {'i', 't', '\'', 'S'}, 4},   /* the contraction split, no merge of 'S */
      {"it's", {'i', 't', 265}, 3},
      {"12345", {266, '3', '4', '5'}, 4},   /* 123|45 */
      {"the\n\nthe", {257, '\n', '\n', 257}, 4},
      {" the", {258}, 1},
      {"x  ", {'x', 263}, 2},
      {"<|begin_of_text|>the", {271, 257}, 2},
  };
  ok(b && b->split == GPT_BPE_LLAMA3 && b->ignore_merges && b->vocab == 273, "%s",
     "llama3.json: Llama 3's split and ignore_merges recognised");
  if (!b) return;
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++)
    ok(encodes(b, cases[i].s, cases[i].ids, cases[i].n), "llama3.json: encode \"%s\" by hand",
       cases[i].s);
  test_round_trip(b, 0), test_round_trip(b, 1);
}

/* pre-tokenizers and flags that would split or encode wrongly refused */
static void test_llama3_refused(void) {
  static char text[20000];
  if (!fixture_text("llama3.json", text, sizeof text)) {
    ok(0, "%s", "llama3.json reads");
    return;
  }
  refused_edit(text, "{1,3}", "{1,4}", "not GPT-2's or Llama 3's", "Llama 3's regex with {1,4}");
  refused_edit(text, "\"Split\"", "\"Splat\"", "not GPT-2's or Llama 3's",
               "an unknown pre-tokenizer type");
  refused_edit(text, "\"invert\": false", "\"invert\": true", "not GPT-2's or Llama 3's",
               "an inverted split");
  refused_edit(text, "\"use_regex\": false", "\"use_regex\": true", "not GPT-2's or Llama 3's",
               "two splits in a row");
  refused_edit(text, "\"add_prefix_space\": false", "\"add_prefix_space\": true",
               "not GPT-2's or Llama 3's", "a ByteLevel pre-tokenizer adding a space");
  refused_edit(text, "\"normalizer\": null", "\"normalizer\": {\"type\": \"NFC\"}",
               "normalizer is not null", "an NFC normalizer");
  refused_edit(text, "\"byte_fallback\": false", "\"byte_fallback\": true", "byte_fallback",
               "byte_fallback set");
  refused_edit(text, "\"ignore_merges\": true", "\"ignore_merges\": 1", "ignore_merges",
               "ignore_merges not a boolean");
  refused("{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\s+\"}, "
          "\"behavior\": \"Isolated\", \"invert\": false}, \"model\": {\"vocab\": {\"a\": 0}, "
          "\"merges\": []}}", "not GPT-2's or Llama 3's", "a Split on an unknown regex");
  refused("{\"pre_tokenizer\": null, \"model\": {\"vocab\": {\"a\": 0}, \"merges\": []}}",
          "not GPT-2's or Llama 3's", "pre_tokenizer null (no split)");
}

static struct gpt_bpe *fixture(const char *name) {
  char p[4200];
  const char *src = getenv("srcdir");
  snprintf(p, sizeof p, "%s/t/demo/bpe/%s", src ? src : ".", name);
  return gpt_bpe_load(p);
}

/* --split gpt2|llama3 (for t/demo/bpe-regex.sh): each stdin line, text in
 * hex, written back as its pieces in hex joined by commas */
static int split_lines(int llama3) {
  static char line[1 << 16];
  static uint8_t t[1 << 15];
  while (fgets(line, sizeof line, stdin)) {
    size_t n = 0;
    for (unsigned x; n < sizeof t && sscanf(line + 2 * n, "%2x", &x) == 1; n++) t[n] = (uint8_t)x;
    for (size_t i = 0, e; i < n; i = e) {
      e = llama3 ? gpt_bpe_piece_end_llama3(t, n, i) : gpt_bpe_piece_end(t, n, i);
      for (size_t k = i; k < e; k++) printf("%02x", t[k]);
      if (e < n) putchar(',');
    }
    putchar('\n');
  }
  return 0;
}

/* a hex line (any length) as bytes into *t (grown): the byte count */
static size_t unhex(const char *line, uint8_t **t, size_t *cap) {
  size_t n = 0;
  for (unsigned x; sscanf(line + 2 * n, "%2x", &x) == 1; n++) {
    if (n == *cap && !(*t = realloc(*t, *cap = 2 * *cap + 64))) exit(1);
    (*t)[n] = (uint8_t)x;
  }
  return n;
}

/* --encode FILE (for t/demo/bpe-hf.sh): each stdin line, text in hex,
 * written back as FILE's ids joined by spaces; exit 1 on the first
 * refusal */
static int encode_lines(const struct gpt_bpe *b) {
  char *line = NULL;
  size_t lcap = 0, cap = 0, nid = 0, icap = 0;
  uint8_t *t = NULL;
  uint32_t *ids = NULL;
  int rc = 0;
  while (!rc && getline(&line, &lcap, stdin) > 0) {
    size_t n = unhex(line, &t, &cap);
    nid = 0;
    static const uint8_t none[1];
    rc = gpt_bpe_encode(b, t ? t : none, n, &ids, &nid, &icap) ? 1 : 0;
    for (size_t i = 0; i < nid && !rc; i++) printf(i ? " %u" : "%u", ids[i]);
    putchar('\n');
  }
  free(line), free(t), free(ids);
  return rc;
}

/* --decode FILE: each stdin line of ids (decimal, spaces between)
 * written back as its bytes in hex; exit 1 on an id that is no token */
static int decode_lines(const struct gpt_bpe *b) {
  char *line = NULL;
  size_t lcap = 0, n = 0, cap = 0;
  uint32_t *ids = NULL;
  int rc = 0;
  while (!rc && getline(&line, &lcap, stdin) > 0) {
    char *at = line, *end;
    n = 0;
    for (unsigned long x; (x = strtoul(at, &end, 10)), end != at; at = end) {
      if (n == cap && !(ids = realloc(ids, (cap = 2 * cap + 64) * sizeof *ids))) exit(1);
      ids[n++] = x > UINT32_MAX ? GPT_BPE_NONE : (uint32_t)x;
    }
    size_t len = 0;
    static const uint32_t none[1];
    uint8_t *d = gpt_bpe_decode(b, ids ? ids : none, n, &len);
    rc = !d;
    for (size_t i = 0; d && i < len; i++) printf("%02x", d[i]);
    putchar('\n');
    free(d);
  }
  free(line), free(ids);
  return rc;
}

/* --encode FILE, --decode FILE: FILE loaded (exit 1 when refused) */
static int code_lines(const char *mode, const char *path) {
  struct gpt_bpe *b = gpt_bpe_load(path);
  if (!b) return 1;
  int rc = !strcmp(mode, "--encode") ? encode_lines(b) : decode_lines(b);
  fflush(stdout);
  gpt_bpe_free(b);
  return rc;
}

int main(int argc, char **argv) {
  if (argc == 3 && !strcmp(argv[1], "--split")) return split_lines(!strcmp(argv[2], "llama3"));
  if (argc == 3 && (!strcmp(argv[1], "--encode") || !strcmp(argv[1], "--decode")))
    return code_lines(argv[1], argv[2]);
  const char *s = getenv("TE_TEST_SEED");
  rng = s ? strtoull(s, NULL, 10) : (uint64_t)time(NULL);
  printf("# seed %llu\n", (unsigned long long)rng);
  snprintf(tmp, sizeof tmp, "%s/bpe_check.XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  if (!mkdtemp(tmp)) return perror("mkdtemp"), 1;
  struct gpt_bpe *tj = fixture("tokenizer.json"), *vj = fixture("vocab.json");
  ok(tj && vj && tj->vocab == 272 && vj->nmerges == 15, "%s", "the fixture reads both ways");
  test_split();
  test_split_llama3();
  if (tj) test_fixture(tj, "tokenizer.json");
  if (vj) test_fixture(vj, "vocab.json");
  if (tj) test_round_trip(tj, 0), test_round_trip(tj, 1), test_long_piece(tj);
  test_refused();
  struct gpt_bpe *l3 = fixture("llama3.json");
  test_llama3(l3);
  gpt_bpe_free(l3);
  test_llama3_refused();
  test_mutants();
  test_many_merges();
  gpt_bpe_free(tj), gpt_bpe_free(vj);
  char cmd[600];
  snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
  if (system(cmd)) printf("# could not remove %s\n", tmp);
  printf("1..%d\n", ntest);
  return 0;
}
