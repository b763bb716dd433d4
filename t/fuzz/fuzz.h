/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz.h -- what the two fuzzers (fuzz-api, fuzz-parse) share: a seeded
 * PRNG, the command line (--seed, --seconds, --iters, --run, --trace,
 * --replay), and the driver that runs the work in forked children.
 *
 * Why children: a crash (a signal, an ASan/UBSan abort) must be reported
 * with the seed and the run that caused it, not kill the fuzzer; and some
 * library state is per process by design (tunables are read once, the
 * legacy stream's sticky TECORE_ERR_ILLEGAL_ADDRESS lasts as long as the
 * process), so a fresh process per run keeps each run reproducible from
 * (seed, run) alone.  The parent never initializes libte, so nothing it
 * holds is forked.
 *
 * A run is a batch of calls drawn from the PRNG seeded with
 * fz_run_seed(seed, run).  `--run K` executes run K in this process (no
 * fork, for gdb and for --trace).  The child counts its calls in a shared
 * page, with the text of the call in progress, so the parent can say
 * which call crashed.  Exit status of the fuzzers: 0 nothing found, 1 a
 * finding (its reproduce command printed), 2 usage. */
#ifndef TE_FUZZ_H
#define TE_FUZZ_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rng.h"   /* t/lib/ */

#define FZ_UNUSED __attribute__((unused))

/* Under AddressSanitizer: a huge allocation the fuzzer asks for on
 * purpose must fail as malloc does (NULL, ENOMEM), not abort the run.
 * ASan reads this before main; ASAN_OPTIONS can still override it. */
__attribute__((visibility("default"), used)) const char *__asan_default_options(void);
__attribute__((visibility("default"), used)) const char *__asan_default_options(void) {
  return "allocator_may_return_null=1";
}

/* ---- PRNG: t/lib/rng.h's xoshiro256** --------------------------------------- */

static FZ_UNUSED uint64_t fz_splitmix(uint64_t *x) { return te_splitmix64(x); }
static FZ_UNUSED void fz_seed_rng(uint64_t seed) { te_rng_seed(seed); }
static FZ_UNUSED uint64_t fz_u64(void) { return te_rand_u64(); }

/* Uniform in [0, n) (0 when n is 0). */
static FZ_UNUSED uint64_t fz_below(uint64_t n) { return n ? fz_u64() % n : 0; }
/* 1 with probability 1/n. */
static FZ_UNUSED int fz_one_in(uint64_t n) { return fz_below(n) == 0; }

/* The seed of run k: independent of every other run's. */
static FZ_UNUSED uint64_t fz_run_seed(uint64_t seed, uint64_t run) {
  uint64_t x = seed ^ (run * 0xd1342543de82ef95ull);
  return fz_splitmix(&x);
}

/* ---- options -------------------------------------------------------------- */

struct fz_opts {
  const char *prog;
  uint64_t seed;
  double seconds; /* wall-clock budget of the fuzz loop */
  uint64_t iters; /* most calls in all (0: no limit) */
  long run;       /* >= 0: only this run, in this process */
  int trace;      /* print every call */
  int stats;      /* print how often each operation's calls succeeded */
  int verbose;    /* keep libte's log (TE_DEBUG) as the environment sets it */
  int nreplay;    /* files after --replay */
  char **replay;
  unsigned per_run;  /* calls (api) or inputs (parse) per run */
  unsigned watchdog; /* seconds a run may take before it counts as a hang */
};

static FZ_UNUSED void fz_usage(const char *prog) {
  fprintf(stderr,
          "usage: %s [--seed N] [--seconds S] [--iters N] [--run K] [--per-run N]\n"
          "          [--watchdog S] [--trace] [--stats] [--verbose] [--replay FILE...]\n"
          "  --seed N      PRNG seed (default: drawn from the clock; printed first)\n"
          "  --seconds S   fuzz for S seconds (default 10)\n"
          "  --iters N     stop after N calls (default: no limit)\n"
          "  --run K       execute run K of the seed in this process (no fork)\n"
          "  --per-run N   calls per run (each run is a fresh process)\n"
          "  --trace       print every call (with --run or --replay)\n"
          "  --stats       print how many calls of each operation succeeded\n"
          "  --replay F..  execute these corpus files instead of fuzzing\n",
          prog);
}

static FZ_UNUSED int fz_parse_opts(int argc, char **argv, struct fz_opts *o, unsigned per_run) {
  memset(o, 0, sizeof *o);
  o->prog = argv[0];
  o->seconds = 10;
  o->run = -1;
  o->per_run = per_run;
  o->watchdog = 60;
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t x =
      (uint64_t)ts.tv_sec * 1000000007ull ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32);
  o->seed = fz_splitmix(&x) >> 1;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--seed") && v)
      o->seed = strtoull(v, NULL, 0), i++;
    else if (!strcmp(a, "--seconds") && v)
      o->seconds = atof(v), i++;
    else if (!strcmp(a, "--iters") && v)
      o->iters = strtoull(v, NULL, 0), i++;
    else if (!strcmp(a, "--run") && v)
      o->run = strtol(v, NULL, 0), i++;
    else if (!strcmp(a, "--per-run") && v)
      o->per_run = (unsigned)strtoul(v, NULL, 0), i++;
    else if (!strcmp(a, "--watchdog") && v)
      o->watchdog = (unsigned)strtoul(v, NULL, 0), i++;
    else if (!strcmp(a, "--trace"))
      o->trace = 1;
    else if (!strcmp(a, "--stats"))
      o->stats = 1;
    else if (!strcmp(a, "--verbose"))
      o->verbose = 1;
    else if (!strcmp(a, "--replay")) {
      o->replay = argv + i + 1;
      o->nreplay = argc - i - 1;
      break;
    } else {
      fz_usage(argv[0]);
      return -1;
    }
  }
  if (o->per_run == 0) o->per_run = 1;
  return 0;
}

/* ---- what a child tells its parent ----------------------------------------- */

#define FZ_MAX_OPS 128
struct fz_shared {
  uint64_t op_ok[FZ_MAX_OPS], op_err[FZ_MAX_OPS]; /* --stats: results by operation */
  uint64_t calls;     /* calls made by all runs */
  char current[512];  /* the call in progress (for a crash report) */
  char finding[1024]; /* a wrong answer the child found (it then exits 3) */
};
static struct fz_shared *fz_sh;
static struct fz_shared fz_local_sh;

static FZ_UNUSED void fz_shared_init(void) {
  void *p = mmap(NULL, sizeof *fz_sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  fz_sh = p == MAP_FAILED ? &fz_local_sh : p;
  memset(fz_sh, 0, sizeof *fz_sh);
}

/* Records a wrong answer (a result outside the documented ones, an empty
 * detail, corrupted data) and ends the process with status 3. */
static FZ_UNUSED __attribute__((noreturn, format(printf, 1, 2))) void fz_fail(const char *fmt,
                                                                              ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(fz_sh->finding, sizeof fz_sh->finding, fmt, ap);
  va_end(ap);
  fprintf(stderr, "FINDING: %s\n  in: %s\n", fz_sh->finding, fz_sh->current);
  fflush(stderr);
  _exit(3);
}

static FZ_UNUSED double fz_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- the driver ----------------------------------------------------------- */

/* Copies the last max bytes of the file fd to stdout. */
static FZ_UNUSED void fz_show_tail(int fd, long max) {
  off_t end = lseek(fd, 0, SEEK_END);
  if (end <= 0) return;
  off_t from = end > max ? end - max : 0;
  if (lseek(fd, from, SEEK_SET) < 0) return;
  char buf[4096];
  ssize_t n;
  printf("---- the run's stderr%s ----\n", from ? " (its end)" : "");
  fflush(stdout);
  while ((n = read(fd, buf, sizeof buf)) > 0)
    if (write(1, buf, (size_t)n) != n) break;
  printf("---- end of the run's stderr ----\n");
}

/* One run: seeded with fz_run_seed(seed, run); makes at most max_calls
 * calls (counting them in fz_sh->calls).  Returns normally when the run is
 * over; a finding ends the process (fz_fail). */
typedef void (*fz_run_fn)(const struct fz_opts *o, uint64_t run, uint64_t max_calls);

/* Fuzzes until the time or call budget is spent: run after run, each in a
 * child.  Prints the seed first and the number of calls last.  Returns the
 * process exit status. */
static FZ_UNUSED int fz_drive(const char *name, const struct fz_opts *o, fz_run_fn fn) {
  printf("%s: seed %" PRIu64 "\n", name, o->seed);
  fflush(stdout);
  if (o->run >= 0) { /* one run, here */
    fz_seed_rng(fz_run_seed(o->seed, (uint64_t)o->run));
    fn(o, (uint64_t)o->run, o->iters ? o->iters : o->per_run);
    printf("%s: %" PRIu64 " calls, run %ld, no finding\n", name, fz_sh->calls, o->run);
    return 0;
  }
  double t0 = fz_now();
  uint64_t run = 0;
  int status = 0;
  /* A child's stderr (libte's warnings about the garbage it is fed, and
   * any sanitizer report) goes to a file that is shown only with a
   * finding, or everywhere with --verbose. */
  FILE *errf = o->verbose ? NULL : tmpfile();
  int errfd = errf ? fileno(errf) : -1;
  while (fz_now() - t0 < o->seconds && (!o->iters || fz_sh->calls < o->iters)) {
    uint64_t left = o->iters ? o->iters - fz_sh->calls : o->per_run;
    if (left > o->per_run) left = o->per_run;
    fz_sh->current[0] = 0;
    fz_sh->finding[0] = 0;
    if (errfd >= 0 && (ftruncate(errfd, 0) != 0 || lseek(errfd, 0, SEEK_SET) != 0)) errfd = -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      if (errfd >= 0) dup2(errfd, 2);
      alarm(o->watchdog); /* a hang is a finding: SIGALRM ends the child */
      fz_seed_rng(fz_run_seed(o->seed, run));
      fn(o, run, left);
      fflush(NULL);
      exit(0); /* through exit(): LeakSanitizer checks the run */
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      const char *what = "crashed";
      char buf[64];
      if (WIFSIGNALED(ws)) {
        snprintf(buf, sizeof buf, "died of signal %d (%s)", WTERMSIG(ws),
                 WTERMSIG(ws) == SIGALRM ? "hang: watchdog" : strsignal(WTERMSIG(ws)));
        what = buf;
      } else if (WEXITSTATUS(ws) == 3) {
        what = "gave a wrong answer";
      } else {
        snprintf(buf, sizeof buf, "exited with status %d (a sanitizer report?)", WEXITSTATUS(ws));
        what = buf;
      }
      if (errfd >= 0) fz_show_tail(errfd, 12000);
      printf("%s: FINDING: run %" PRIu64 " %s\n", name, run, what);
      if (fz_sh->finding[0]) printf("%s:   %s\n", name, fz_sh->finding);
      printf("%s:   last call: %s\n", name, fz_sh->current[0] ? fz_sh->current : "(none)");
      printf("%s:   reproduce: t/fuzz/%s --seed %" PRIu64 " --run %" PRIu64
             " --per-run %u --trace\n",
             name, name, o->seed, run, o->per_run);
      status = 1;
      break;
    }
    run++;
  }
  if (errf) fclose(errf);
  printf("%s: %" PRIu64 " calls in %.1f s, %" PRIu64 " runs, %s\n", name, fz_sh->calls,
         fz_now() - t0, run, status ? "1 finding" : "no finding");
  return status;
}

/* Runs fn(o, file) for each --replay file, each in a child; fn returns
 * the child's exit status (0: the file ran to its end, 2: it could not be
 * read).  Prints the count of calls last.  Returns the exit status. */
typedef int (*fz_file_fn)(const struct fz_opts *o, const char *path);

static FZ_UNUSED int fz_replay(const char *name, const struct fz_opts *o, fz_file_fn fn) {
  printf("%s: replaying %d file(s)\n", name, o->nreplay);
  for (int i = 0; i < o->nreplay; i++) {
    snprintf(fz_sh->current, sizeof fz_sh->current, "%s", o->replay[i]);
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) {
      perror("fork");
      return 1;
    }
    if (pid == 0) {
      alarm(o->watchdog);
      int rc = fn(o, o->replay[i]);
      fflush(NULL);
      exit(rc);
    }
    int ws = 0;
    while (waitpid(pid, &ws, 0) < 0 && errno == EINTR) {
    }
    if (WIFEXITED(ws) && WEXITSTATUS(ws) == 2) return 2;
    if (!WIFEXITED(ws) || WEXITSTATUS(ws) != 0) {
      printf("%s: FINDING: %s %s (status 0x%x)\n", name, o->replay[i],
             WIFSIGNALED(ws) ? strsignal(WTERMSIG(ws)) : "failed", ws);
      if (fz_sh->finding[0]) printf("%s:   %s\n", name, fz_sh->finding);
      printf("%s:   last call: %s\n", name, fz_sh->current);
      printf("%s:   reproduce: t/fuzz/%s --trace --replay %s\n", name, name, o->replay[i]);
      return 1;
    }
  }
  printf("%s: %" PRIu64 " calls, %d file(s), no finding\n", name, fz_sh->calls, o->nreplay);
  return 0;
}

#endif
