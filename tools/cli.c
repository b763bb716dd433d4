/* SPDX-License-Identifier: Apache-2.0
 * cli.c -- the shared option layer of the te-* tools (cli.h): --help,
 * --version, --quiet, and usage errors that name the bad flag or word. */
#include "cli.h"
#include "out.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/core.h>

int te_cli_error(struct te_cli *c, const char *fmt, ...) {
  va_list ap;
  fprintf(stderr, "%s: ", c->prog);
  va_start(ap, fmt);
  vfprintf(stderr, fmt, ap);
  va_end(ap);
  fprintf(stderr, "\nTry '%s --help' for the options.\n", c->prog);
  c->status = TE_EXIT_USAGE;
  return TE_EXIT_USAGE;
}

int te_cli_next(struct te_cli *c, int argc, char **argv) {
  char shorts[128];
  /* a leading ':' makes getopt return ':' for a missing value and keeps it
   * quiet: the messages below name the flag the same way in every tool */
  snprintf(shorts, sizeof shorts, ":%s", c->shorts ? c->shorts : "");
  opterr = 0;
  int prev = optind;
  int opt = getopt_long(argc, argv, shorts, c->longs, NULL);
  while (opt == TE_CLI_QUIET || (opt == 'q' && c->shorts && strchr(c->shorts, 'q'))) {
    c->quiet = 1; /* the same in every tool: handled here */
    prev = optind;
    opt = getopt_long(argc, argv, shorts, c->longs, NULL);
  }
  /* the word getopt just read (for "-abc" clusters, the whole word) */
  const char *word = optind > prev && optind - 1 < argc ? argv[optind - 1] : "";
  switch (opt) {
  case 'h':
    fputs(c->usage, stdout);
    c->status = TE_EXIT_OK;
    return TE_CLI_EXIT;
  case TE_CLI_VERSION:
    printf("%s (libte) %s\n", c->prog, tecore_version_string());
    c->status = TE_EXIT_OK;
    return TE_CLI_EXIT;
  case TE_CLI_CSV:
  case TE_CLI_JSON: {
    enum te_out_format f = opt == TE_CLI_CSV ? TE_OUT_CSV : TE_OUT_JSON;
    if (!c->out) return opt;
    if (c->out->format != TE_OUT_TABLE && c->out->format != f) {
      te_cli_error(c, "--csv and --json: one or the other");
      return TE_CLI_EXIT;
    }
    c->out->format = f;
    return te_cli_next(c, argc, argv);
  }
  case ':':
    if (strncmp(word, "--", 2) == 0)
      te_cli_error(c, "option '%s' needs a value", word);
    else
      te_cli_error(c, "option '-%c' needs a value", optopt);
    return TE_CLI_EXIT;
  case '?':
    if (optopt && strncmp(word, "--", 2) != 0)
      te_cli_error(c, "unknown option '-%c'", optopt);
    else if (strchr(word, '='))
      te_cli_error(c, "unknown option, or one that takes no value: '%s'", word);
    else
      te_cli_error(c, "unknown option '%s'", word);
    return TE_CLI_EXIT;
  default:
    return opt;
  }
}

int te_cli_end(struct te_cli *c, int argc, char **argv) {
  if (c->out) c->out->quiet = c->quiet;
  if (optind < argc) return te_cli_error(c, "unexpected argument '%s'", argv[optind]);
  return 0;
}

int te_cli_long(struct te_cli *c, const char *flag, const char *arg, long long lo, long long hi,
                int suffixes, long long *out) {
  char *end = NULL;
  errno = 0;
  long long v = strtoll(arg, &end, 0);
  if (end != arg && suffixes && *end) {
    int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20
              : *end == 'G' || *end == 'g' ? 30 : -1;
    if (shift > 0 && end[1] == '\0' && v <= (hi >> shift)) {
      v <<= shift;
      end++;
    }
  }
  if (end == arg || *end || errno) {
    return te_cli_error(c, "%s '%s': not a whole number%s", flag, arg,
                        suffixes ? " (K, M or G may follow)" : "");
  }
  if (v < lo || v > hi) return te_cli_error(c, "%s %s: out of range [%lld, %lld]", flag, arg, lo, hi);
  *out = v;
  return 0;
}

int te_cli_int(struct te_cli *c, const char *flag, const char *arg, int lo, int hi, int *out) {
  long long v;
  if (te_cli_long(c, flag, arg, lo, hi, 0, &v)) return TE_EXIT_USAGE;
  *out = (int)v;
  return 0;
}

int te_cli_double(struct te_cli *c, const char *flag, const char *arg, double lo, double hi,
                  double *out) {
  char *end = NULL;
  errno = 0;
  double v = strtod(arg, &end);
  if (end == arg || *end || errno || !isfinite(v))
    return te_cli_error(c, "%s '%s': not a number", flag, arg);
  if (v < lo || v > hi) return te_cli_error(c, "%s %s: out of range [%g, %g]", flag, arg, lo, hi);
  *out = v;
  return 0;
}
