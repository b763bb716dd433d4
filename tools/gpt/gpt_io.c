/* SPDX-License-Identifier: Apache-2.0
 * gpt_io.c -- te-gpt's reads of files it does not control (the corpus,
 * checkpoints): a file is opened without waiting (a FIFO's open blocks
 * until a writer comes, forever) and must be a regular file (a FIFO or a
 * device such as /dev/zero has no end), so its size is known before a
 * byte is read and every read is bounded by it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "gpt.h"

int gpt_open_regular(const char *path, uint64_t *size) {
  int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    GPT_ERR("%s: %s", path, strerror(errno));
    return -1;
  }
  struct stat st;
  const char *why = NULL;
  if (fstat(fd, &st) != 0) why = strerror(errno);
  else if (S_ISDIR(st.st_mode)) why = "a directory, not a regular file";
  else if (!S_ISREG(st.st_mode))
    why = "not a regular file (a FIFO, socket or device has no size to read to)";
  if (why) {
    GPT_ERR("%s: %s", path, why);
    close(fd);
    return -1;
  }
  *size = (uint64_t)st.st_size;
  return fd;
}

int gpt_read_at(int fd, uint64_t off, void *buf, size_t n, const char *path) {
  size_t got = 0;
  while (got < n) {
    ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) {
      GPT_ERR("%s: %s at byte %llu (%zu of %zu bytes read)", path,
              k < 0 ? strerror(errno) : "short read: the file shrank",
              (unsigned long long)(off + got), got, n);
      return -1;
    }
    got += (size_t)k;
  }
  return 0;
}
