/* SPDX-License-Identifier: Apache-2.0 */
/* check_log.c -- libte's log (te/log.h): TE_DEBUG level, TE_DEBUG_SUBSYS
 * filter, TE_DEBUG_FILE with %h and %p, the "host:pid:tid" line prefix, and
 * errno preservation.
 *
 * The log reads its settings once per process, so every scenario runs in
 * a child this test forks itself (whether or not Check forks): the child
 * sets the environment, logs, and reports through a shared page; the
 * parent reads the file and checks it. */
#include "tests.h"
#include <dirent.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>

/* What a child reports back. */
struct report {
  int done;
  int errno_ok;          /* 1 when every call kept errno */
  int errno_fail_line;   /* first line that changed it */
  int level;             /* tecore_log_level() in the child */
  long thread_tid;       /* tid of the child's second thread */
  char token[32];
};

static struct report *shared_report(void) {
  void *p = mmap(NULL, sizeof(struct report), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                 -1, 0);
  ck_assert_msg(p != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(p, 0, sizeof(struct report));
  return p;
}

/* Environment for a child: NULL unsets. */
struct log_env {
  const char *level, *subsys, *file;
};

static pid_t run_child(const struct log_env *env, void (*body)(struct report *),
                       struct report *rep) {
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    if (env->level) setenv("TE_DEBUG", env->level, 1); else unsetenv("TE_DEBUG");
    if (env->subsys) setenv("TE_DEBUG_SUBSYS", env->subsys, 1); else unsetenv("TE_DEBUG_SUBSYS");
    if (env->file) setenv("TE_DEBUG_FILE", env->file, 1); else unsetenv("TE_DEBUG_FILE");
    body(rep);
    rep->done = 1;
    _exit(0);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "log child died (status 0x%x)",
                status);
  ck_assert_msg(rep->done, "log child did not finish");
  return pid;
}

/* The line of text that contains needle, copied to line ("" if none). */
static int find_line(const char *text, const char *needle, char *line, size_t n) {
  const char *hit = strstr(text, needle);
  line[0] = '\0';
  if (!hit) return 0;
  const char *start = hit;
  while (start > text && start[-1] != '\n') start--;
  const char *end = strchr(hit, '\n');
  size_t len = end ? (size_t)(end - start) : strlen(start);
  if (len >= n) len = n - 1;
  memcpy(line, start, len);
  line[len] = '\0';
  return 1;
}

#define CHECK_ERRNO(rep, e)                                   \
  do {                                                        \
    if (errno != (e) && (rep)->errno_ok) {                    \
      (rep)->errno_ok = 0;                                    \
      (rep)->errno_fail_line = __LINE__;                      \
    }                                                         \
  } while (0)

/* ---- file name expansion and line prefix ---- */

static struct report *g_rep;

static void *second_thread(void *arg) {
  (void)arg;
  g_rep->thread_tid = (long)syscall(SYS_gettid);
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_DEVICE, __FILE__, __LINE__, "thread-%s",
             g_rep->token);
  return NULL;
}

static void body_prefix(struct report *rep) {
  g_rep = rep;
  rep->level = (int)tecore_log_level();
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "warn-%s", rep->token);
  tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "info-%s", rep->token);
  tecore_log(TECORE_LOG_TRACE, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "trace-%s", rep->token);
  pthread_t th;
  if (pthread_create(&th, NULL, second_thread, NULL) == 0) pthread_join(th, NULL);
}

START_TEST(file_pattern_and_prefix) {
  char dir[256], pattern[512], host[256];
  te_tmpdir(dir, sizeof dir);
  snprintf(pattern, sizeof pattern, "%s/te.%%h.%%p.log", dir);
  struct report *rep = shared_report();
  snprintf(rep->token, sizeof rep->token, "%08x%08x", te_rand_u32(), te_rand_u32());
  struct log_env env = {.level = "INFO", .subsys = NULL, .file = pattern};
  pid_t pid = run_child(&env, body_prefix, rep);
  ck_assert_int_eq(rep->level, TECORE_LOG_INFO);

  /* %h is the host name, possibly cut at its first dot */
  ck_assert_int_eq(gethostname(host, sizeof host), 0);
  host[sizeof host - 1] = '\0';
  char shorthost[256];
  snprintf(shorthost, sizeof shorthost, "%s", host);
  char *dot = strchr(shorthost, '.');
  if (dot) *dot = '\0';
  char path[700], text[16384];
  const char *h = host;
  snprintf(path, sizeof path, "%s/te.%s.%ld.log", dir, host, (long)pid);
  if (access(path, R_OK) != 0) {
    h = shorthost;
    snprintf(path, sizeof path, "%s/te.%s.%ld.log", dir, shorthost, (long)pid);
  }
  ck_assert_msg(access(path, R_OK) == 0, "TE_DEBUG_FILE=%s: no file %s/te.%s.%ld.log", pattern,
                dir, shorthost, (long)pid);
  /* nothing else was created */
  DIR *d = opendir(dir);
  int nfiles = 0;
  for (struct dirent *e; (e = readdir(d));)
    if (e->d_name[0] != '.') nfiles++;
  closedir(d);
  ck_assert_int_eq(nfiles, 1);

  te_read_text(path, text, sizeof text);
  char line[2048], needle[64], prefix[512];
  snprintf(needle, sizeof needle, "warn-%s", rep->token);
  ck_assert_msg(find_line(text, needle, line, sizeof line), "no WARN line in:\n%s", text);
  /* host:pid:tid -- the main thread's tid is the pid */
  snprintf(prefix, sizeof prefix, "%s:%ld:%ld ", h, (long)pid, (long)pid);
  ck_assert_msg(strncmp(line, prefix, strlen(prefix)) == 0, "line \"%s\" does not start with \"%s\"",
                line, prefix);
  ck_assert_msg(strstr(line, "WARN"), "line \"%s\" does not name its level", line);
  snprintf(needle, sizeof needle, "info-%s", rep->token);
  ck_assert_msg(strstr(text, needle), "TE_DEBUG=INFO dropped an INFO line:\n%s", text);
  snprintf(needle, sizeof needle, "trace-%s", rep->token);
  ck_assert_msg(!strstr(text, needle), "TE_DEBUG=INFO wrote a TRACE line:\n%s", text);

  snprintf(needle, sizeof needle, "thread-%s", rep->token);
  ck_assert_msg(find_line(text, needle, line, sizeof line), "no line from the second thread:\n%s",
                text);
  ck_assert_msg(rep->thread_tid != 0 && rep->thread_tid != (long)pid, "thread tid %ld",
                rep->thread_tid);
  snprintf(prefix, sizeof prefix, "%s:%ld:%ld ", h, (long)pid, rep->thread_tid);
  ck_assert_msg(strncmp(line, prefix, strlen(prefix)) == 0, "line \"%s\" does not start with \"%s\"",
                line, prefix);
  munmap(rep, sizeof *rep);
  te_rmtree(dir);
}
END_TEST

/* ---- subsystem filter ---- */

static void body_subsys(struct report *rep) {
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "init-%s", rep->token);
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_DEVICE, __FILE__, __LINE__, "device-%s", rep->token);
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_GRAPH, __FILE__, __LINE__, "graph-%s", rep->token);
}

static void subsys_case(const char *filter, int want_init, int want_device, int want_graph) {
  char dir[256], path[512], text[16384], needle[64];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/sub.log", dir);
  struct report *rep = shared_report();
  snprintf(rep->token, sizeof rep->token, "%08x", te_rand_u32());
  struct log_env env = {.level = "WARN", .subsys = filter, .file = path};
  run_child(&env, body_subsys, rep);
  te_read_text(path, text, sizeof text);
  const char *names[] = {"init", "device", "graph"};
  int want[] = {want_init, want_device, want_graph};
  for (int i = 0; i < 3; i++) {
    snprintf(needle, sizeof needle, "%s-%s", names[i], rep->token);
    ck_assert_msg(!!strstr(text, needle) == want[i], "TE_DEBUG_SUBSYS=%s: %s line %s:\n%s", filter,
                  names[i], want[i] ? "missing" : "present", text);
  }
  munmap(rep, sizeof *rep);
  te_rmtree(dir);
}

/* Garbage in TE_DEBUG_SUBSYS silently turned all logging off; now it is
 * reported in the log and ignored. */
START_TEST(test_debug_subsys_garbage_is_reported) {
  subsys_case("garbage", 1, 1, 1);
  subsys_case("INIT,bogus", 1, 0, 0);
  char dir[256], path[512], text[16384];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/bad.log", dir);
  struct report *rep = shared_report();
  snprintf(rep->token, sizeof rep->token, "%08x", te_rand_u32());
  struct log_env env = {.level = "WARN", .subsys = "n0such,INIT", .file = path};
  run_child(&env, body_subsys, rep);
  te_read_text(path, text, sizeof text);
  ck_assert_msg(strstr(text, "unknown subsystem 'n0such'"), "no report of the bad name:\n%s",
                text);
  munmap(rep, sizeof *rep);
  te_rmtree(dir);
}
END_TEST

START_TEST(subsystem_filter) {
  subsys_case("INIT,GRAPH", 1, 0, 1);
  subsys_case("^INIT", 0, 1, 1);
  subsys_case("ALL", 1, 1, 1);
}
END_TEST

/* ---- levels ---- */

static void body_levels(struct report *rep) {
  rep->level = (int)tecore_log_level();
  tecore_log(TECORE_LOG_ERROR, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "error-%s", rep->token);
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "warn-%s", rep->token);
}

static void level_case(const char *level, int want_level, int want_error, int want_warn) {
  char dir[256], path[512], text[16384], needle[64];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/lv.log", dir);
  struct report *rep = shared_report();
  snprintf(rep->token, sizeof rep->token, "%08x", te_rand_u32());
  struct log_env env = {.level = level, .subsys = NULL, .file = path};
  run_child(&env, body_levels, rep);
  ck_assert_msg(rep->level == want_level, "TE_DEBUG=%s: tecore_log_level() = %d, want %d",
                level ? level : "(unset)", rep->level, want_level);
  te_read_text(path, text, sizeof text);
  snprintf(needle, sizeof needle, "error-%s", rep->token);
  ck_assert_msg(!!strstr(text, needle) == want_error, "TE_DEBUG=%s: ERROR line %s",
                level ? level : "(unset)", want_error ? "missing" : "present");
  snprintf(needle, sizeof needle, "warn-%s", rep->token);
  ck_assert_msg(!!strstr(text, needle) == want_warn, "TE_DEBUG=%s: WARN line %s",
                level ? level : "(unset)", want_warn ? "missing" : "present");
  munmap(rep, sizeof *rep);
  te_rmtree(dir);
}

START_TEST(levels) {
  level_case("NONE", TECORE_LOG_NONE, 0, 0);
  level_case("TRACE", TECORE_LOG_TRACE, 1, 1);
  level_case("WARN", TECORE_LOG_WARN, 1, 1);
  /* te/log.h: "default: WARN" */
  level_case(NULL, TECORE_LOG_WARN, 1, 1);
  level_case("ERROR", TECORE_LOG_ERROR, 1, 0);
}
END_TEST

/* ---- errno ---- */

static void body_errno(struct report *rep) {
  rep->errno_ok = 1;
  errno = E2BIG; /* the first call also opens the file */
  tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "first %s", rep->token);
  CHECK_ERRNO(rep, E2BIG);
  errno = EDOM;
  tecore_log(TECORE_LOG_TRACE, TECORE_SUBSYS_INIT, __FILE__, __LINE__, "filtered %s", rep->token);
  CHECK_ERRNO(rep, EDOM);
  errno = ERANGE;
  tecore_log(TECORE_LOG_ERROR, TECORE_SUBSYS_DEVICE, __FILE__, __LINE__, "second %s %s",
             rep->token, strerror(EINVAL));
  CHECK_ERRNO(rep, ERANGE);
  errno = ENOSPC;
  (void)tecore_log_level();
  CHECK_ERRNO(rep, ENOSPC);
  /* a failing libtecore call logs its detail: errno is still the caller's */
  errno = EXDEV;
  (void)tecore_tunable_count(NULL);
  CHECK_ERRNO(rep, EXDEV);
}

START_TEST(errno_is_preserved) {
  char dir[256], path[512], text[16384], needle[64];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/errno.log", dir);
  struct report *rep = shared_report();
  snprintf(rep->token, sizeof rep->token, "%08x", te_rand_u32());
  struct log_env env = {.level = "WARN", .subsys = NULL, .file = path};
  run_child(&env, body_errno, rep);
  ck_assert_msg(rep->errno_ok, "errno changed by the call before line %d", rep->errno_fail_line);
  te_read_text(path, text, sizeof text);
  snprintf(needle, sizeof needle, "second %s", rep->token);
  ck_assert_msg(strstr(text, needle), "ERROR line missing:\n%s", text);

  /* an unwritable TE_DEBUG_FILE falls back without touching errno */
  memset(rep, 0, sizeof *rep);
  snprintf(rep->token, sizeof rep->token, "%08x", te_rand_u32());
  struct log_env bad = {.level = "WARN", .subsys = NULL, .file = "/nonexistent-te-dir/x/%p.log"};
  run_child(&bad, body_errno, rep);
  ck_assert_msg(rep->errno_ok, "errno changed (unwritable file) by the call before line %d",
                rep->errno_fail_line);
  munmap(rep, sizeof *rep);
  te_rmtree(dir);
}
END_TEST

static Suite *log_suite(void) {
  Suite *s = suite_create("log");
  TCase *tc = te_tcase(s, "log", 0);
  tcase_add_test(tc, file_pattern_and_prefix);
  tcase_add_test(tc, subsystem_filter);
  tcase_add_test(tc, test_debug_subsys_garbage_is_reported);
  tcase_add_test(tc, levels);
  tcase_add_test(tc, errno_is_preserved);
  return s;
}

TE_TEST_MAIN(log_suite, TE_TEST_NODEVICE)
