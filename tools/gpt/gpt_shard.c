/* SPDX-License-Identifier: Apache-2.0
 * gpt_shard.c -- token shards as Karpathy's llm trainer in C writes them,
 * te-gpt's pre-tokenized data: a header of 256 little-endian int32 (magic,
 * version, token count, the rest zero), then the tokens:
 *   magic 20240520, version 1: uint16 tokens (GPT-2's vocabulary fits)
 *   magic 20240801, version 2: uint32 tokens (Llama 3's does not)
 * The header is untrusted input: a file that starts with neither magic is
 * not a shard (bytes); one that does must have its magic's version and
 * exactly the bytes its count says, and (gpt_data.c) every token below
 * the model's vocabulary.  gpt_shard_write: --tokenize, bytes as uint16
 * tokens. */
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "gpt.h"

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

/* the header of a version 1 shard of n tokens */
static void header16(uint8_t *h, uint32_t n) {
  const uint32_t v[3] = {GPT_SHARD_MAGIC16, 1, n};
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

int gpt_shard_write(const char *in, const char *out) {
  uint64_t size;
  int fd = gpt_open_regular(in, &size);
  if (fd < 0) return -1;
  if (size == 0 || size > 0x7fffffffu || size > GPT_DATA_MAX) {
    GPT_ERR("--tokenize %s: %llu bytes (1 to %llu a shard)", in, (unsigned long long)size,
            (unsigned long long)GPT_DATA_MAX);
    return close(fd), -1;
  }
  uint8_t *b = malloc((size_t)size), *t = malloc(GPT_SHARD_HEADER + 2 * (size_t)size);
  int rc = !b || !t ? (GPT_ERR("--tokenize %s: out of host memory", in), -1)
                    : gpt_read_at(fd, 0, b, (size_t)size, in);
  close(fd);
  int ofd = rc ? -1 : open(out, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
  if (!rc && ofd < 0) rc = (GPT_ERR("--tokenize: %s: %s", out, strerror(errno)), -1);
  if (!rc) {
    header16(t, (uint32_t)size);
    for (size_t i = 0; i < size; i++) t[GPT_SHARD_HEADER + 2 * i] = b[i], t[GPT_SHARD_HEADER + 2 * i + 1] = 0;
    rc = write_all(ofd, t, GPT_SHARD_HEADER + 2 * (size_t)size, out);
  }
  if (ofd >= 0 && close(ofd) && !rc) rc = (GPT_ERR("%s: %s", out, strerror(errno)), -1);
  free(b);
  free(t);
  return rc;
}
