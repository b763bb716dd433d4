/* SPDX-License-Identifier: Apache-2.0
 * gpt_ckpt_tok.c -- the tokenizer travels with the model: --save and
 * --save-hf copy --tokenizer's file into the directory as Hugging Face's
 * checkpoints hold it (tokenizer.json; a vocab.json with its merges.txt
 * under those names), a te-gpt checkpoint records which in its metadata
 * ("tokenizer"); --load takes it back (a --tokenizer given again must
 * hold the same bytes, else the ids would mean other text), --load-hf
 * takes a directory's tokenizer.json when te-gpt reads it.  Copies are
 * written beside and renamed into place, so a --save over the directory
 * the run loaded from (its tokenizer the source) never reads a half
 * written file. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt_ckpt.h"
#include "gpt_bpe.h"

/* len bytes of t as dir/name, by way of dir/name.tmp; 0 or -1 */
static int put_file(const char *dir, const char *name, const char *t, size_t len) {
  char path[4200], tmp[4300];
  snprintf(path, sizeof path, "%s/%s", dir, name);
  snprintf(tmp, sizeof tmp, "%s.tmp", path);
  FILE *f = fopen(tmp, "wb");
  int rc = !f || fwrite(t, 1, len, f) != len;
  if (f && fclose(f)) rc = 1;
  if (!rc && rename(tmp, path)) rc = 1;
  if (rc) {
    GPT_ERR("the tokenizer into %s: %s", path, strerror(errno));
    (void)unlink(tmp);
  }
  return rc ? -1 : 0;
}

/* the file src as dir/name; 0 or -1 */
static int copy_file(const char *src, const char *dir, const char *name) {
  size_t len;
  char *t = gpt_bpe_file(src, &len);
  if (!t) return -1;
  int rc = put_file(dir, name, t, len);
  free(t);
  return rc;
}

/* merges.txt beside a vocab.json path, into out */
static void merges_beside(const char *vocab, char *out, size_t n) {
  const char *slash = strrchr(vocab, '/');
  int dir = slash ? (int)(slash - vocab) + 1 : 0;
  snprintf(out, n, "%.*smerges.txt", dir, vocab);
}

int gpt_tok_copy(const char *path, const char *dir, const char **name) {
  struct gpt_bpe *b = gpt_bpe_load(path);
  if (!b) return -1;
  int vj = b->vocab_json;
  gpt_bpe_free(b);
  char merges[4200];
  merges_beside(path, merges, sizeof merges);
  *name = vj ? "vocab.json" : "tokenizer.json";
  if (copy_file(path, dir, *name)) return -1;
  return vj ? copy_file(merges, dir, "merges.txt") : 0;
}

/* files a and b hold the same bytes: 1, 0 when not, -1 on a read error */
static int same_bytes(const char *a, const char *b) {
  size_t na, nb;
  char *ta = gpt_bpe_file(a, &na), *tb = ta ? gpt_bpe_file(b, &nb) : NULL;
  int r = !ta || !tb ? -1 : na == nb && !memcmp(ta, tb, na);
  free(ta), free(tb);
  return r;
}

/* the metadata value names a file this code writes (nothing else: the
 * value is the checkpoint's, and becomes a path) */
static const char *known_name(const char *v) {
  if (v && !strcmp(v, "tokenizer.json")) return "tokenizer.json";
  if (v && !strcmp(v, "vocab.json")) return "vocab.json";
  return NULL;
}

/* given and the checkpoint's tokenizer ck agree (merges.txt too) */
static int check_given(const char *given, const char *ck) {
  char m1[4200], m2[4200];
  int r = same_bytes(given, ck);
  if (r == 1 && !strcmp(strrchr(ck, '/'), "/vocab.json")) {
    merges_beside(given, m1, sizeof m1), merges_beside(ck, m2, sizeof m2);
    r = same_bytes(m1, m2);
  }
  if (r == 0)
    GPT_ERR("--tokenizer %s is not the checkpoint's tokenizer %s (other bytes): the model's "
            "ids would mean other text; leave --tokenizer out to use the checkpoint's", given, ck);
  return r == 1 ? 0 : -1;
}

int gpt_tok_of_checkpoint(const char *dir, const char *given, char **path) {
  struct gpt_ckpt ck;
  *path = NULL;
  if (gpt_ckpt_open(dir, "model.safetensors", &ck)) return -1;
  const char *v = st_meta_get(&ck.f, "tokenizer"), *name = known_name(v);
  int rc = 0;
  if (v && !name) {
    GPT_ERR("%s/model.safetensors: metadata \"tokenizer\" is neither \"tokenizer.json\" nor "
            "\"vocab.json\"", dir);
    rc = -1;
  }
  gpt_ckpt_close(&ck);
  if (rc || !name) return rc;
  size_t n = strlen(dir) + strlen(name) + 2;
  *path = gpt_xalloc(n);
  snprintf(*path, n, "%s/%s", dir, name);
  if (!given || !check_given(given, *path)) return 0;
  free(*path);
  *path = NULL;
  return -1;
}

char *gpt_tok_of_hf(const char *dir) {
  size_t n = strlen(dir) + sizeof "/tokenizer.json";
  char *path = gpt_xalloc(n);
  struct stat st;
  snprintf(path, n, "%s/tokenizer.json", dir);
  if (stat(path, &st)) return free(path), NULL;
  struct gpt_bpe *b = gpt_bpe_load(path);   /* its refusal said why on stderr */
  if (b) {
    fprintf(stderr, "# te-gpt: --load-hf: the tokenizer is %s (%u tokens)\n", path, b->vocab);
    return gpt_bpe_free(b), path;
  }
  fprintf(stderr, "# te-gpt: --load-hf: %s not used (te-gpt does not read it): the model's ids "
          "as bytes; give --tokenizer to use another\n", path);
  return free(path), NULL;
}
