/* SPDX-License-Identifier: Apache-2.0
 * gpt_data.c -- te-gpt's corpus: files read as bytes (token = byte,
 * vocabulary 256), by default libte's own man pages (the installed ones,
 * else the source tree's, both paths fixed at build time), the last tenth
 * held out for the validation loss; or random tokens (--synthetic).  The
 * sampler draws each sequence's start from a splitmix64 state that the
 * checkpoint keeps, so a resumed run draws the same batches. */
#include <dirent.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt.h"

/* path's bytes after d's: a regular file (a FIFO would block, a device
 * such as /dev/zero never end), read to the size it had when opened, all
 * files together at most GPT_DATA_MAX bytes (checked before reading). */
static int append_file(struct gpt_data *d, const char *path) {
  uint64_t size;
  int fd = gpt_open_regular(path, &size);
  if (fd < 0) return -1;
  if (size > GPT_DATA_MAX - d->n) {
    GPT_ERR("%s: %llu bytes, with the files before it past te-gpt's corpus limit of %llu MiB",
            path, (unsigned long long)size, (unsigned long long)(GPT_DATA_MAX >> 20));
    close(fd);
    return -1;
  }
  uint8_t *b = realloc(d->bytes, d->n + (size_t)size + 1);
  if (!b) {
    GPT_ERR("out of host memory reading %s", path);
    close(fd);
    return -1;
  }
  d->bytes = b;
  int rc = gpt_read_at(fd, 0, d->bytes + d->n, (size_t)size, path);
  close(fd);
  if (!rc) d->n += (size_t)size;
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

int gpt_data_load(struct gpt_data *d, char **files, int nfiles, const char *corpus_dir, int seq,
                  int vocab, int synthetic) {
  memset(d, 0, sizeof *d);
  d->vocab = vocab;
  if (synthetic) {
    d->synthetic = 1;
    snprintf(d->source, sizeof d->source, "random tokens (--synthetic, vocabulary %d)", vocab);
    return 0;
  }
  if (vocab < 256) {
    GPT_ERR("--vocab %d: byte data needs a vocabulary of at least 256 (or --synthetic)", vocab);
    return -1;
  }
  if (nfiles) {
    for (int i = 0; i < nfiles; i++)
      if (append_file(d, files[i])) return gpt_data_free(d), -1;
    snprintf(d->source, sizeof d->source, "%d file%s (%s%s)", nfiles, nfiles > 1 ? "s" : "",
             files[0], nfiles > 1 ? ", ..." : "");
  } else {
    const char *dirs[3] = {corpus_dir, TE_GPT_MAN_DIR, TE_GPT_SRC_MAN_DIR};
    int got = 0;
    for (int k = corpus_dir ? 0 : 1; k < (corpus_dir ? 1 : 3) && got <= 0; k++) {
      got = read_man_dir(d, dirs[k]);
      if (got < 0) return gpt_data_free(d), -1;
      if (got > 0)
        snprintf(d->source, sizeof d->source, "libte's man pages, %d files under %s", got,
                 dirs[k]);
    }
    if (got <= 0) {
      GPT_ERR("no corpus: no libte man pages under %s%s%s%s (give --data FILE or --corpus-dir)",
              corpus_dir ? corpus_dir : TE_GPT_MAN_DIR, corpus_dir ? "" : " nor ",
              corpus_dir ? "" : TE_GPT_SRC_MAN_DIR, "");
      return -1;
    }
  }
  size_t need = 2 * ((size_t)seq + 1);
  if (d->n < 10 * need) {
    GPT_ERR("the data holds %zu bytes: at least %zu needed for --seq %d (a tenth is held out)",
            d->n, 10 * need, seq);
    gpt_data_free(d);
    return -1;
  }
  d->ntrain = d->n - d->n / 10;
  return 0;
}

void gpt_data_free(struct gpt_data *d) {
  free(d->bytes);
  d->bytes = NULL;
  d->n = d->ntrain = 0;
}

/* one sequence from offset off of the bytes, or random tokens from *r */
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
    ids[i] = d->bytes[off + (size_t)i];
    labels[i] = d->bytes[off + (size_t)i + 1];
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

void gpt_data_val_batch(const struct gpt_data *d, int seq, size_t batch, int k, int32_t *ids,
                        int32_t *labels) {
  /* fixed places spread over the held-out tail (synthetic: fixed seeds) */
  size_t nval = d->synthetic ? 0 : d->n - d->ntrain - (size_t)seq;   /* >= seq + 2 */
  for (size_t b = 0; b < batch; b++) {
    uint64_t r = 0x76616cull + (uint64_t)k * 1000003u + b;
    size_t off = d->synthetic ? 0 : d->ntrain + (size_t)(gpt_splitmix(&r) % nval);
    fill_seq(d, seq, off, &r, ids + b * (size_t)seq, labels + b * (size_t)seq);
  }
}
