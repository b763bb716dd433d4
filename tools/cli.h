/* SPDX-License-Identifier: Apache-2.0
 * cli.h -- the option layer every te-* tool shares, so that they answer
 * alike: --help (usage on stdout, exit 0), --version ("te-x (libte)
 * 0.2.0", exit 0), --quiet accepted everywhere, an unknown flag or a
 * stray word named on stderr with a pointer to --help (exit 2), a value
 * that is not a number in range named the same way.  Exit codes:
 * TE_EXIT_OK 0, TE_EXIT_FAIL 1 (the work failed), TE_EXIT_USAGE 2 (the
 * command line is wrong).
 *
 * A tool lists TE_CLI_LONGS in its getopt_long table and "h" in its short
 * options, then loops
 *
 *   while ((opt = te_cli_next(&cli, argc, argv)) != -1)
 *     switch (opt) { case TE_CLI_EXIT: return cli.status; case 'x': ... }
 *   if (te_cli_end(&cli, argc, argv)) return cli.status;
 *
 * te_cli_next answers --help and --version itself, takes --quiet (and -q
 * where the tool lists "q") into cli.quiet, --csv and --json (where the
 * tool lists TE_CLI_FORMATS) into cli.out->format, and turns getopt's errors into
 * TE_CLI_EXIT with cli.status = TE_EXIT_USAGE.
 *
 * --quiet means the same in every tool: no banners, progress or
 * explanations on stdout, only the results (te-bench's and the other
 * benchmarks' rows, te-demo's summary line; te-info prints nothing and
 * answers by its exit status).  Errors still go to stderr. */
#ifndef TE_TOOLS_CLI_H
#define TE_TOOLS_CLI_H

#include <getopt.h>

#define TE_EXIT_OK 0
#define TE_EXIT_FAIL 1
#define TE_EXIT_USAGE 2

/* getopt values of the shared long options (outside any char range) */
#define TE_CLI_VERSION 0x7e01
#define TE_CLI_QUIET 0x7e02
#define TE_CLI_CSV 0x7e03
#define TE_CLI_JSON 0x7e04
/* returned by te_cli_next when the tool should exit with cli.status */
#define TE_CLI_EXIT (-2)

#define TE_CLI_LONGS                                                                        \
  {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, TE_CLI_VERSION},               \
      {"quiet", no_argument, 0, TE_CLI_QUIET }
/* --csv and --json (out.h), for a tool that sets te_cli.out */
#define TE_CLI_FORMATS {"csv", no_argument, 0, TE_CLI_CSV}, {"json", no_argument, 0, TE_CLI_JSON}

struct te_out;

struct te_cli {
  const char *prog;           /* "te-bench" */
  const char *usage;          /* the whole --help text, "usage: te-bench ...\n..." */
  const char *shorts;         /* getopt short options (without a leading ':') */
  const struct option *longs; /* with TE_CLI_LONGS in it */
  int status;                 /* the exit status after TE_CLI_EXIT */
  int quiet;                  /* --quiet (or -q) was given */
  struct te_out *out;         /* the tool's output: --csv/--json set its format, and
                               * te_cli_end its quiet */
};

/* The next option: a value of the tool's table, -1 at the end, or
 * TE_CLI_EXIT (help or version printed, or a usage error reported). */
int te_cli_next(struct te_cli *c, int argc, char **argv);
/* After the loop: words left over are an error (reported; returns
 * TE_EXIT_USAGE and sets c->status); 0 when there are none. */
int te_cli_end(struct te_cli *c, int argc, char **argv);
/* Reports a usage error ("te-x: <message>" and the --help hint on
 * stderr), sets c->status = TE_EXIT_USAGE and returns it. */
int te_cli_error(struct te_cli *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Parses the value of flag as a whole number in [lo, hi] (decimal, or 0x
 * hex; a K/M/G suffix multiplies by 2^10/2^20/2^30 when suffixes is 1).
 * 0 and *out set, or the error reported and TE_EXIT_USAGE returned. */
int te_cli_long(struct te_cli *c, const char *flag, const char *arg, long long lo, long long hi,
                int suffixes, long long *out);
/* The same for an int. */
int te_cli_int(struct te_cli *c, const char *flag, const char *arg, int lo, int hi, int *out);
/* A real number in [lo, hi]. */
int te_cli_double(struct te_cli *c, const char *flag, const char *arg, double lo, double hi,
                  double *out);

#endif
