/* SPDX-License-Identifier: Apache-2.0 */
/* log.c -- libte's log: level, subsystem filter and destination read once
 * from TE_DEBUG, TE_DEBUG_SUBSYS and TE_DEBUG_FILE.  Every line names
 * host:pid:tid so logs of many ranks can be merged.  errno is preserved
 * across every call, so a log line never changes what a caller sees. */
#define _GNU_SOURCE
#include "internal.h"
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

TE_PARAM_STR(te_log_level_param, "TE_DEBUG", "WARN", "NONE|ERROR|WARN|INFO|TRACE",
             "log level: ERROR, WARN (default), INFO or TRACE")
TE_PARAM_STR(te_log_subsys_param, "TE_DEBUG_SUBSYS", "ALL", NULL,
             "comma list of INIT,DEVICE,KERNEL,GRAPH,TUNE,FP8,COMM,OFFLOAD,ALL; ^LIST excludes")
TE_PARAM_STR(te_log_file_param, "TE_DEBUG_FILE", "", NULL,
             "log destination file (%h host, %p pid); default stderr")

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static __thread int log_in_init;
static tecore_log_level_t log_level = TECORE_LOG_WARN;
static unsigned log_mask = TECORE_SUBSYS_ALL;
static FILE *log_fp;
static char log_host[64];
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static const struct {
  const char *name;
  unsigned bit;
} subsys_names[] = {{"INIT", TECORE_SUBSYS_INIT},     {"DEVICE", TECORE_SUBSYS_DEVICE},
                    {"KERNEL", TECORE_SUBSYS_KERNEL}, {"GRAPH", TECORE_SUBSYS_GRAPH},
                    {"TUNE", TECORE_SUBSYS_TUNE},     {"FP8", TECORE_SUBSYS_FP8},
                    {"COMM", TECORE_SUBSYS_COMM},     {"OFFLOAD", TECORE_SUBSYS_OFFLOAD},
                    {"ALL", TECORE_SUBSYS_ALL}};

/* The mask a TE_DEBUG_SUBSYS list names.  Unknown names go to bad (the
 * first one) to be reported; a list naming nothing known keeps every
 * subsystem on (garbage must not silently turn logging off). */
static unsigned parse_subsys(const char *s, char *bad, size_t badn) {
  int exclude = (*s == '^');
  unsigned mask = 0;
  int known = 0;
  char buf[256];
  bad[0] = '\0';
  snprintf(buf, sizeof buf, "%s", s + exclude);
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    size_t i;
    for (i = 0; i < TE_ARRAY_SIZE(subsys_names); i++)
      if (strcasecmp(tok, subsys_names[i].name) == 0) break;
    if (i < TE_ARRAY_SIZE(subsys_names)) {
      mask |= subsys_names[i].bit;
      known = 1;
    } else if (!bad[0]) {
      snprintf(bad, badn, "%s", tok);
    }
  }
  if (!known) return TECORE_SUBSYS_ALL;
  return exclude ? (TECORE_SUBSYS_ALL & ~mask) : mask;
}

/* Expands %h (host) and %p (pid) in a TE_DEBUG_FILE path. */
static void expand_path(const char *in, char *out, size_t n) {
  size_t o = 0;
  for (const char *p = in; *p && o + 1 < n; p++) {
    if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
      int w = p[1] == 'h' ? snprintf(out + o, n - o, "%s", log_host)
                          : snprintf(out + o, n - o, "%ld", (long)getpid());
      if (w < 0) break;
      o += (size_t)w < n - o ? (size_t)w : n - o - 1;
      p++;
    } else {
      out[o++] = *p;
    }
  }
  out[o] = '\0';
}

static void log_init(void) {
  log_in_init = 1;
  if (gethostname(log_host, sizeof log_host) != 0) snprintf(log_host, sizeof log_host, "?");
  log_host[sizeof log_host - 1] = '\0';
  char *dot = strchr(log_host, '.');
  if (dot) *dot = '\0';
  const char *lv = tecore_tunable_str(&te_log_level_param);
  static const char *levels[] = {"NONE", "ERROR", "WARN", "INFO", "TRACE"};
  for (int i = 0; i < 5; i++)
    if (strcasecmp(lv, levels[i]) == 0) log_level = (tecore_log_level_t)i;
  char bad[64];
  const char *subsys = tecore_tunable_str(&te_log_subsys_param);
  log_mask = parse_subsys(subsys, bad, sizeof bad);
  const char *file = tecore_tunable_str(&te_log_file_param);
  log_fp = stderr;
  if (file[0]) {
    char path[4096];
    expand_path(file, path, sizeof path);
    FILE *fp = fopen(path, "a");
    if (fp) {
      setvbuf(fp, NULL, _IOLBF, 0);
      log_fp = fp;
    } else {
      fprintf(stderr, "%s:%ld libte WARN cannot open TE_DEBUG_FILE %s: %s; logging to stderr\n",
              log_host, (long)getpid(), path, strerror(errno));
    }
  }
  if (bad[0])
    fprintf(log_fp,
            "%s:%ld libte WARN TE_DEBUG_SUBSYS=%s: unknown subsystem '%s' ignored (known: "
            "INIT,DEVICE,KERNEL,GRAPH,TUNE,FP8,COMM,OFFLOAD,ALL)%s\n",
            log_host, (long)getpid(), subsys, bad,
            log_mask == TECORE_SUBSYS_ALL ? "; logging every subsystem" : "");
  log_in_init = 0;
}

TE_EXPORT tecore_log_level_t tecore_log_level(void) {
  int saved = errno;
  if (!log_in_init) pthread_once(&log_once, log_init);
  errno = saved;
  return log_level;
}

static const char *level_name(tecore_log_level_t l) {
  switch (l) {
  case TECORE_LOG_ERROR: return "ERROR";
  case TECORE_LOG_WARN: return "WARN";
  case TECORE_LOG_INFO: return "INFO";
  case TECORE_LOG_TRACE: return "TRACE";
  default: return "?";
  }
}

static const char *subsys_name(unsigned sub) {
  for (size_t i = 0; i < TE_ARRAY_SIZE(subsys_names); i++)
    if (subsys_names[i].bit == sub) return subsys_names[i].name;
  return "MISC";
}

TE_EXPORT void tecore_log(tecore_log_level_t level, unsigned subsys, const char *file, int line,
                          const char *fmt, ...) {
  int saved = errno;
  char msg[2048];
  va_list ap;
  if (!fmt) fmt = "(no message)"; /* vsnprintf(NULL) is undefined */
  if (log_in_init) {
    /* a tunable warned while the log itself was being configured */
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (level <= TECORE_LOG_WARN) fprintf(stderr, "libte %s %s\n", level_name(level), msg);
    errno = saved;
    return;
  }
  pthread_once(&log_once, log_init);
  if (level > log_level || level == TECORE_LOG_NONE || !(subsys & log_mask)) {
    errno = saved;
    return;
  }
  va_start(ap, fmt);
  vsnprintf(msg, sizeof msg, fmt, ap);
  va_end(ap);
  const char *base = file ? strrchr(file, '/') : NULL;
  base = base ? base + 1 : (file ? file : "?");
  pthread_mutex_lock(&log_lock);
  fprintf(log_fp, "%s:%ld:%ld [%s] %s %s:%d %s\n", log_host, (long)getpid(),
          (long)syscall(SYS_gettid), level_name(level), subsys_name(subsys), base, line, msg);
  pthread_mutex_unlock(&log_lock);
  errno = saved;
}

/* tecore_fini: a TE_DEBUG_FILE is closed; later lines go to stderr. */
void te_log_fini(void) {
  pthread_mutex_lock(&log_lock);
  if (log_fp && log_fp != stderr) {
    fclose(log_fp);
    log_fp = stderr;
  }
  pthread_mutex_unlock(&log_lock);
}
