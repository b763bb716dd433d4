/* SPDX-License-Identifier: Apache-2.0
 * gpt_shard.c -- token shards as Karpathy's llm trainer in C writes them,
 * te-gpt's pre-tokenized data: a header of 256 little-endian int32 (magic,
 * version, token count, the rest zero), then the tokens:
 *   magic 20240520, version 1: uint16 tokens (GPT-2's vocabulary fits)
 *   magic 20240801, version 2: uint32 tokens (Llama 3's does not)
 * The header is untrusted input: a file that starts with neither magic is
 * not a shard (bytes); one that does must have its magic's version and
 * exactly the bytes its count says, and (gpt_data.c) every token below
 * the model's vocabulary.  gpt_shard_write: --tokenize, bytes or (with
 * --tokenizer) byte-level BPE ids (gpt_bpe.c) as uint16 tokens, or uint32
 * when the vocabulary passes 65536. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gpt.h"
#include "gpt_bpe.h"

static uint32_t le32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static const struct {
  uint32_t magic, version, width;
} kinds[] = {{GPT_SHARD_MAGIC16, 1, 2}, {GPT_SHARD_MAGIC32, 2, 4}};

int gpt_shard_probe(int fd, uint64_t size, const char *path, int *width, uint64_t *ntok) {
  uint8_t h[GPT_SHARD_HEADER];
  if (size < 4) return 0;
  if (gpt_read_at(fd, 0, h, 4, path)) return -1;
  int k = -1;
  for (int i = 0; i < 2; i++)
    if (le32(h) == kinds[i].magic) k = i;
  if (k < 0) return 0;   /* bytes */
  if (size < GPT_SHARD_HEADER) {
    GPT_ERR("%s: an llm.c token shard (magic %u) of %llu bytes: its header alone is %d", path,
            kinds[k].magic, (unsigned long long)size, GPT_SHARD_HEADER);
    return -1;
  }
  if (gpt_read_at(fd, 0, h, sizeof h, path)) return -1;
  uint32_t version = le32(h + 4);
  int32_t count = (int32_t)le32(h + 8);
  if (version != kinds[k].version) {
    GPT_ERR("%s: llm.c token shard with magic %u has version %u, not %u", path, kinds[k].magic,
            version, kinds[k].version);
    return -1;
  }
  uint64_t want = GPT_SHARD_HEADER + (uint64_t)(count < 0 ? 0 : count) * kinds[k].width;
  if (count <= 0 || want != size) {
    GPT_ERR("%s: llm.c token shard header says %d tokens (%llu bytes with the header), the "
            "file has %llu bytes", path, count, (unsigned long long)want,
            (unsigned long long)size);
    return -1;
  }
  *width = (int)kinds[k].width;
  *ntok = (uint64_t)count;
  return 1;
}

/* the header of a shard of n tokens, width 2 (version 1) or 4 (version 2) */
static void header(uint8_t *h, uint32_t n, int width) {
  const uint32_t v[3] = {width == 2 ? GPT_SHARD_MAGIC16 : GPT_SHARD_MAGIC32, width == 2 ? 1 : 2, n};
  memset(h, 0, GPT_SHARD_HEADER);
  for (int i = 0; i < 3; i++)
    for (int b = 0; b < 4; b++) h[4 * i + b] = (uint8_t)(v[i] >> (8 * b));
}

static int write_all(int fd, const uint8_t *p, size_t n, const char *path) {
  while (n) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k < 0) return GPT_ERR("%s: %s", path, strerror(errno)), -1;
    p += k, n -= (size_t)k;
  }
  return 0;
}

/* in's bytes (1 to GPT_DATA_MAX of them) into a new buffer */
static uint8_t *read_text(const char *in, size_t *n) {
  uint64_t size;
  int fd = gpt_open_regular(in, &size);
  if (fd < 0) return NULL;
  if (size == 0 || size > 0x7fffffffu || size > GPT_DATA_MAX) {
    GPT_ERR("--tokenize %s: %llu bytes (1 to %llu a shard)", in, (unsigned long long)size,
            (unsigned long long)GPT_DATA_MAX);
    return close(fd), NULL;
  }
  uint8_t *b = malloc((size_t)size);
  if (!b) GPT_ERR("--tokenize %s: out of host memory", in);
  if (b && gpt_read_at(fd, 0, b, (size_t)size, in)) free(b), b = NULL;
  close(fd);
  *n = (size_t)size;
  return b;
}

/* the text's tokens: its bytes, or the tokenizer's ids; *width: 2 when
 * every id fits 16 bits (GPT-2's vocabulary), else 4 (Llama 3's) */
static uint32_t *tokens(const uint8_t *t, size_t n, const char *tokenizer, size_t *count,
                        int *width) {
  uint32_t *ids = NULL;
  size_t cap = 0;
  *count = 0, *width = 2;
  if (!tokenizer) {
    ids = malloc(n * sizeof *ids);
    if (!ids) return GPT_ERR("--tokenize: out of host memory"), NULL;
    for (size_t i = 0; i < n; i++) ids[i] = t[i];
    return *count = n, ids;
  }
  struct gpt_bpe *b = gpt_bpe_load(tokenizer);
  int rc = b ? gpt_bpe_encode(b, t, n, &ids, count, &cap) : -1;
  if (b && b->vocab > 65536) *width = 4;
  gpt_bpe_free(b);
  if (!rc && *count > 0x7fffffffu) rc = (GPT_ERR("--tokenize: %zu tokens, more than a shard holds", *count), -1);
  if (rc) free(ids), ids = NULL;
  return ids;
}

int gpt_shard_write(const char *in, const char *out, const char *tokenizer) {
  size_t n, count;
  int width;
  uint8_t *text = read_text(in, &n);
  uint32_t *ids = text ? tokens(text, n, tokenizer, &count, &width) : NULL;
  free(text);
  if (!ids) return -1;
  uint8_t *t = malloc(GPT_SHARD_HEADER + (size_t)width * count);
  int ofd = t ? open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666) : -1;
  int rc = !t ? (GPT_ERR("--tokenize: out of host memory"), -1)
           : ofd < 0 ? (GPT_ERR("--tokenize: %s: %s", out, strerror(errno)), -1) : 0;
  if (!rc) {
    header(t, (uint32_t)count, width);
    for (size_t i = 0; i < count; i++)
      for (int b = 0; b < width; b++)
        t[GPT_SHARD_HEADER + (size_t)width * i + (size_t)b] = (uint8_t)(ids[i] >> (8 * b));
    rc = write_all(ofd, t, GPT_SHARD_HEADER + (size_t)width * count, out);
  }
  if (ofd >= 0 && close(ofd) && !rc) rc = (GPT_ERR("%s: %s", out, strerror(errno)), -1);
  free(ids);
  free(t);
  return rc;
}
