/* SPDX-License-Identifier: Apache-2.0
 * gpt_data.c -- te-gpt's corpus, tokens: files of bytes (token = byte,
 * vocabulary 256) or llm token shards (gpt_shard.c), held at the widest
 * token any file has; by default libte's own man pages (the installed
 * ones, else the source tree's, both paths fixed at build time).  The
 * last tenth is held out for the validation loss, or --val's file is;
 * --eval's file is all windows.  With --tokenizer a file that is no shard
 * is text, read as its BPE ids.  Or random tokens (--synthetic).  The
 * sampler draws each sequence's start from a splitmix64 state that the
 * checkpoint keeps, so a resumed run draws the same batches. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt.h"
#include "gpt_bpe.h"

/* the count tokens at p, from bytes wide each to to bytes (in place,
 * the buffer holding count * to bytes; little-endian, as shards are) */
static void widen(uint8_t *p, size_t count, int from, int to) {
  for (size_t i = count; i-- > 0;) {
    uint32_t v = 0;
    for (int b = from; b-- > 0;) v = v << 8 | p[i * (size_t)from + (size_t)b];
    for (int b = 0; b < to; b++) p[i * (size_t)to + (size_t)b] = (uint8_t)(v >> (8 * b));
  }
}

static uint32_t tok_at(const struct gpt_data *d, size_t i) {
  const uint8_t *p = d->tok + i * (size_t)d->width;
  uint32_t v = 0;
  for (int b = d->width; b-- > 0;) v = v << 8 | p[b];
  return v;
}

/* the tokens of path read at d->tok + d->n (width w each), widened to d's
 * width; every token below the vocabulary */
static int read_tokens(struct gpt_data *d, int fd, uint64_t off, size_t count, int w,
                       const char *path) {
  uint8_t *at = d->tok + d->n * (size_t)d->width;
  if (gpt_read_at(fd, off, at, count * (size_t)w, path)) return -1;
  if (w < d->width) widen(at, count, w, d->width);
  for (size_t i = 0; w > 1 && i < count; i++) {
    uint32_t v = tok_at(d, d->n + i);
    if (v >= (uint32_t)d->vocab) {
      GPT_ERR("%s: token %zu is %u, past the vocabulary (--vocab %d)", path, i, v, d->vocab);
      return -1;
    }
  }
  d->n += count;
  return 0;
}

/* ids[0..count) after d's tokens (d's width), every one below the vocabulary */
static int put_ids(struct gpt_data *d, const uint32_t *ids, size_t count, const char *path) {
  uint8_t *at = d->tok + d->n * (size_t)d->width;
  for (size_t i = 0; i < count; i++) {
    if (ids[i] >= (uint32_t)d->vocab) {
      GPT_ERR("%s: token %zu is %u (--tokenizer), past the vocabulary (--vocab %d)", path, i,
              ids[i], d->vocab);
      return -1;
    }
    for (int b = 0; b < d->width; b++) at[i * (size_t)d->width + (size_t)b] = (uint8_t)(ids[i] >> (8 * b));
  }
  d->n += count;
  return 0;
}

/* fd's text (size bytes) as --tokenizer's ids (*count), *w their width */
static uint32_t *text_ids(const struct gpt_bpe *bpe, int fd, uint64_t size, const char *path,
                          uint64_t *count, int *w) {
  if (size > GPT_DATA_MAX) {
    GPT_ERR("%s: %llu bytes, past te-gpt's corpus limit of %llu MiB", path,
            (unsigned long long)size, (unsigned long long)(GPT_DATA_MAX >> 20));
    return NULL;
  }
  uint8_t *t = malloc((size_t)size + 1);
  uint32_t *ids = NULL;
  size_t n = 0, cap = 0;
  int rc = !t ? (GPT_ERR("out of host memory reading %s", path), -1)
              : gpt_read_at(fd, 0, t, (size_t)size, path);
  if (!rc) rc = gpt_bpe_encode(bpe, t, (size_t)size, &ids, &n, &cap);
  free(t);
  if (rc) return free(ids), NULL;
  *count = n, *w = bpe->vocab > 65536 ? 4 : 2;
  return ids ? ids : calloc(1, sizeof *ids);
}

/* path's tokens after d's: an llm token shard's (gpt_shard.c), its text's
 * --tokenizer ids (gpt_bpe.c), or its bytes.
 * A regular file (a FIFO would block, a device such as /dev/zero never
 * end), read to the size it had when opened, all files together at most
 * GPT_DATA_MAX bytes in memory (checked before reading). */
static int append_file(struct gpt_data *d, const char *path) {
  uint64_t size, count;
  int fd = gpt_open_regular(path, &size), w = 1;
  if (fd < 0) return -1;
  int shard = gpt_shard_probe(fd, size, path, &w, &count);
  if (shard < 0) return close(fd), -1;
  uint32_t *ids = !shard && d->bpe ? text_ids(d->bpe, fd, size, path, &count, &w) : NULL;
  if (!shard && d->bpe && !ids) return close(fd), -1;
  if (!shard && !d->bpe) count = size;
  int nw = w > d->width ? w : d->width;
  /* widened, the tokens before may pass the limit by themselves */
  if (d->n > GPT_DATA_MAX / (uint64_t)nw || count > GPT_DATA_MAX / (uint64_t)nw - d->n) {
    GPT_ERR("%s: %llu tokens, with the files before it past te-gpt's corpus limit of %llu MiB",
            path, (unsigned long long)count, (unsigned long long)(GPT_DATA_MAX >> 20));
    close(fd);
    free(ids);
    return -1;
  }
  uint8_t *b = realloc(d->tok, (d->n + (size_t)count) * (size_t)nw + 1);
  if (!b) GPT_ERR("out of host memory reading %s", path);
  if (b) d->tok = b;
  if (b && nw > d->width) widen(d->tok, d->n, d->width, nw);
  if (b) d->width = nw;
  int rc = !b ? -1 : ids ? put_ids(d, ids, (size_t)count, path)
                  : read_tokens(d, fd, shard ? GPT_SHARD_HEADER : 0, (size_t)count, w, path);
  close(fd);
  free(ids);
  return rc;
}

/* libte's pages only (an installed man dir holds everyone's) */
static int is_libte_page(const char *name) {
  return !strncmp(name, "te", 2) || !strncmp(name, "libte", 5);
}

/* dir's man1, man3 and man7 pages in name order; the number of files */
static int read_man_dir(struct gpt_data *d, const char *dir) {
  static const char *const sect[] = {"man1", "man3", "man7"};
  int files = 0;
  for (int k = 0; k < 3; k++) {
    char sub[1024];
    snprintf(sub, sizeof sub, "%s/%s", dir, sect[k]);
    struct dirent **e = NULL;
    int n = scandir(sub, &e, NULL, alphasort);
    for (int i = 0; i < n; i++) {
      char path[2048];
      struct stat st;
      snprintf(path, sizeof path, "%s/%s", sub, e[i]->d_name);
      if (is_libte_page(e[i]->d_name) && !stat(path, &st) && S_ISREG(st.st_mode)) {
        if (append_file(d, path)) files = -1;
        else if (files >= 0) files++;
      }
      free(e[i]);
    }
    free(e);
    if (files < 0) return -1;
  }
  return files;
}

#ifndef TE_GPT_MAN_DIR
#define TE_GPT_MAN_DIR "/usr/local/share/man"
#endif
#ifndef TE_GPT_SRC_MAN_DIR
#define TE_GPT_SRC_MAN_DIR "man"
#endif

/* the training files, else libte's man pages; d->n tokens of them */
static int load_train(struct gpt_data *d, const struct gpt_data_opts *o) {
  if (o->nfiles) {
    for (int i = 0; i < o->nfiles; i++)
      if (append_file(d, o->files[i])) return -1;
    snprintf(d->source, sizeof d->source, "%d file%s (%s%s)", o->nfiles, o->nfiles > 1 ? "s" : "",
             o->files[0], o->nfiles > 1 ? ", ..." : "");
    return 0;
  }
  const char *dirs[3] = {o->corpus_dir, TE_GPT_MAN_DIR, TE_GPT_SRC_MAN_DIR};
  int got = 0;
  for (int k = o->corpus_dir ? 0 : 1; k < (o->corpus_dir ? 1 : 3) && got <= 0; k++) {
    got = read_man_dir(d, dirs[k]);
    if (got < 0) return -1;
    if (got > 0)
      snprintf(d->source, sizeof d->source, "libte's man pages, %d files under %s", got, dirs[k]);
  }
  if (got <= 0) {
    GPT_ERR("no corpus: no libte man pages under %s%s%s (give --data FILE or --corpus-dir)",
            o->corpus_dir ? o->corpus_dir : TE_GPT_MAN_DIR, o->corpus_dir ? "" : " nor ",
            o->corpus_dir ? "" : TE_GPT_SRC_MAN_DIR);
    return -1;
  }
  return 0;
}

/* --val: its tokens after the training ones, all of them validation */
static int load_val(struct gpt_data *d, const char *val, int seq) {
  size_t ntrain = d->n;
  if (ntrain < (size_t)seq + 2) {
    GPT_ERR("the training data holds %zu tokens: at least %d needed for --seq %d", ntrain,
            seq + 2, seq);
    return -1;
  }
  if (append_file(d, val)) return -1;
  if (d->n - ntrain < (size_t)seq + 1) {
    GPT_ERR("--val %s: %zu tokens, at least %d needed for --seq %d (one window)", val,
            d->n - ntrain, seq + 1, seq);
    return -1;
  }
  d->ntrain = ntrain;
  return 0;
}

int gpt_data_load(struct gpt_data *d, const struct gpt_data_opts *o) {
  memset(d, 0, sizeof *d);
  d->vocab = o->vocab;
  d->width = 1;
  if (o->synthetic) {
    d->synthetic = 1;
    snprintf(d->source, sizeof d->source, "random tokens (--synthetic, vocabulary %d)", o->vocab);
    return 0;
  }
  if (o->vocab < 256) {
    GPT_ERR("--vocab %d: byte data needs a vocabulary of at least 256 (or --synthetic)", o->vocab);
    return -1;
  }
  if (o->tokenizer && !(d->bpe = gpt_bpe_load(o->tokenizer))) return -1;
  int rc = load_train(d, o) || (o->val && load_val(d, o->val, o->seq));
  gpt_bpe_free((struct gpt_bpe *)d->bpe);
  d->bpe = NULL;
  if (rc) return gpt_data_free(d), -1;
  if (o->val) return 0;
  size_t need = 2 * ((size_t)o->seq + 1);
  if (d->n < 10 * need) {
    GPT_ERR("the data holds %zu tokens: at least %zu needed for --seq %d (a tenth is held out)",
            d->n, 10 * need, o->seq);
    gpt_data_free(d);
    return -1;
  }
  d->ntrain = d->n - d->n / 10;
  return 0;
}

int gpt_data_load_eval(struct gpt_data *d, const char *path, int seq, int vocab,
                       const char *tokenizer) {
  memset(d, 0, sizeof *d);
  d->vocab = vocab;
  d->width = 1;
  if (tokenizer && !(d->bpe = gpt_bpe_load(tokenizer))) return -1;
  int rc = append_file(d, path);
  gpt_bpe_free((struct gpt_bpe *)d->bpe);
  d->bpe = NULL;
  if (rc) return gpt_data_free(d), -1;
  if (d->n < (size_t)seq + 1) {
    GPT_ERR("--eval %s: %zu tokens, at least %d needed for --seq %d (one window)", path, d->n,
            seq + 1, seq);
    return gpt_data_free(d), -1;
  }
  snprintf(d->source, sizeof d->source, "%s", path);
  return 0;
}

void gpt_data_free(struct gpt_data *d) {
  free(d->tok);
  d->tok = NULL;
  d->n = d->ntrain = 0;
}

size_t gpt_data_windows(const struct gpt_data *d, int seq) {
  return d->synthetic ? 0 : (d->n - d->ntrain - 1) / (size_t)seq;
}

/* one sequence from token off, or random tokens from *r */
static void fill_seq(const struct gpt_data *d, int seq, size_t off, uint64_t *r, int32_t *ids,
                     int32_t *labels) {
  if (d->synthetic) {
    int32_t prev = (int32_t)(gpt_splitmix(r) % (uint64_t)d->vocab);
    for (int i = 0; i < seq; i++) {
      ids[i] = prev;
      labels[i] = prev = (int32_t)(gpt_splitmix(r) % (uint64_t)d->vocab);
    }
    return;
  }
  for (int i = 0; i < seq; i++) {
    ids[i] = (int32_t)tok_at(d, off + (size_t)i);
    labels[i] = (int32_t)tok_at(d, off + (size_t)i + 1);
  }
}

void gpt_data_batch(const struct gpt_data *d, int seq, size_t batch, uint64_t *rng, int32_t *ids,
                    int32_t *labels) {
  size_t span = d->synthetic ? 1 : d->ntrain - (size_t)seq;   /* starts 0 .. ntrain - seq - 1 */
  for (size_t b = 0; b < batch; b++) {
    size_t off = (size_t)(gpt_splitmix(rng) % span);
    fill_seq(d, seq, off, rng, ids + b * (size_t)seq, labels + b * (size_t)seq);
  }
}

/* The validation windows (te-gpt(1), "Data"): window j of the W the
 * held-out tokens hold is tokens [ntrain + j seq, ntrain + (j + 1) seq]
 * (inputs, then labels one on), the windows of --eval; the nbatch batches
 * of the validation loss take N = nbatch * batch of them spread evenly,
 * sequence i window i W / N: all of them in order when N is W.  Fixed,
 * whatever the seed; synthetic data: fixed seeds. */
void gpt_data_val_batch(const struct gpt_data *d, int seq, size_t batch, int k, int nbatch,
                        int32_t *ids, int32_t *labels) {
  uint64_t nwin = gpt_data_windows(d, seq), all = (uint64_t)nbatch * batch;
  for (size_t b = 0; b < batch; b++) {
    uint64_t r = 0x76616cull + (uint64_t)k * 1000003u + b, i = (uint64_t)k * batch + b;
    size_t off = d->synthetic ? 0 : d->ntrain + (size_t)(i * nwin / all) * (size_t)seq;
    fill_seq(d, seq, off, &r, ids + b * (size_t)seq, labels + b * (size_t)seq);
  }
}

int gpt_data_window(const struct gpt_data *d, int seq, size_t j, int32_t *ids, int32_t *labels) {
  if (j >= gpt_data_windows(d, seq)) return 0;
  fill_seq(d, seq, d->ntrain + j * (size_t)seq, NULL, ids, labels);
  return 1;
}
