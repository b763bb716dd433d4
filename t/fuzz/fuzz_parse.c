/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_parse.c -- fuzz-parse, the plain driver of the byte-level fuzzer of
 * libtecore's parsers (DLPack descriptors, tensor descriptors, recipes,
 * tunable and log environment strings; the targets are in
 * fuzz_parse_one.c).  Inputs come from the PRNG (random lengths, random
 * bytes, some of them edge values) or, with --replay, from corpus files of
 * hex bytes (t/fuzz/corpus/parse/NN-name.hex; '#' starts a comment).  Each run
 * is a fresh process (fuzz.h) whose first input is the log's environment,
 * which a process reads once.  Needs no libFuzzer; see
 * fuzz_parse_libfuzzer.c for that. */
#include "fuzz.h"
#include "fuzz_parse.h"

#include <ctype.h>

void fz_parse_finding(const char *msg) { fz_fail("%s", msg); }

static void draw_input(uint8_t *buf, size_t *len, size_t cap) {
  size_t n = (size_t)fz_below(cap);
  if (fz_one_in(4)) n = (size_t)fz_below(48);
  for (size_t i = 0; i < n; i++) {
    uint64_t k = fz_below(8);
    buf[i] = k == 0 ? 0 : k == 1 ? 0xff : k == 2 ? (uint8_t)fz_below(16) : (uint8_t)fz_u64();
  }
  *len = n;
}

static void one_run(const struct fz_opts *o, uint64_t run, uint64_t max_calls) {
  setenv("TE_DEBUG_FILE", "/dev/null", 1);
  fz_parse_trace = o->trace;
  uint8_t buf[1024];
  size_t len = 0;
  /* first: the log's environment (target 5) */
  draw_input(buf, &len, sizeof buf);
  if (len == 0) len = 1;
  buf[0] = 5;
  uint64_t start = fz_parse_calls;
  for (uint64_t i = 0; fz_parse_calls - start < max_calls; i++) {
    if (i) draw_input(buf, &len, sizeof buf);
    if (o->trace) {
      printf("input %llu:", (unsigned long long)i);
      for (size_t k = 0; k < len; k++) printf(" %02x", buf[k]);
      printf("\n");
    }
    int l = snprintf(fz_sh->current, sizeof fz_sh->current,
                     "input %llu of run %llu, %zu bytes:", (unsigned long long)i,
                     (unsigned long long)run, len);
    for (size_t k = 0; k < len && l < (int)sizeof fz_sh->current - 4; k++)
      l += snprintf(fz_sh->current + l, sizeof fz_sh->current - (size_t)l, " %02x", buf[k]);
    uint64_t before = fz_parse_calls;
    fz_parse_one(buf, len);
    fz_sh->calls += fz_parse_calls - before;
    if (fz_parse_calls == before) fz_parse_calls++, fz_sh->calls++; /* an empty input counts */
  }
}

/* Reads a file of hex bytes. */
static int read_hex(const char *path, uint8_t *buf, size_t cap, size_t *len) {
  FILE *f = fopen(path, "r");
  if (!f) return -1;
  size_t n = 0;
  int c, hi = -1, comment = 0;
  while ((c = fgetc(f)) != EOF) {
    if (c == '\n') comment = 0;
    if (comment) continue;
    if (c == '#') {
      comment = 1;
      continue;
    }
    if (!isxdigit(c)) continue;
    int v = isdigit(c) ? c - '0' : tolower(c) - 'a' + 10;
    if (hi < 0)
      hi = v;
    else {
      if (n < cap) buf[n++] = (uint8_t)(hi << 4 | v);
      hi = -1;
    }
  }
  fclose(f);
  *len = n;
  return 0;
}

/* One corpus file, in the child fz_replay made. */
static int replay_file(const struct fz_opts *o, const char *path) {
  static uint8_t buf[65536];
  size_t len = 0;
  if (read_hex(path, buf, sizeof buf, &len)) {
    fprintf(stderr, "fuzz-parse: %s: %s\n", path, strerror(errno));
    return 2;
  }
  if (!o->verbose) setenv("TE_DEBUG_FILE", "/dev/null", 1);
  fz_parse_trace = o->trace;
  uint64_t before = fz_parse_calls;
  fz_parse_one(buf, len);
  fz_sh->calls += fz_parse_calls - before;
  return 0;
}

int main(int argc, char **argv) {
  struct fz_opts o;
  if (fz_parse_opts(argc, argv, &o, 500)) return 2;
  setenv("TE_DEVICE", "vdev", 1);
  setenv("TECORE_VDEV_CHECK", "1", 1);
  fz_shared_init();
  if (o.nreplay) return fz_replay("fuzz-parse", &o, replay_file);
  return fz_drive("fuzz-parse", &o, one_run);
}
