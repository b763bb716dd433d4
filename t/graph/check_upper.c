/* SPDX-License-Identifier: Apache-2.0
 * check_upper.c -- the conventions libtegraph and libtecomm share
 * (common/te_upper.h), seen through their public API:
 *  - a failure that crosses two TG_CHECK hops logs each hop ("<- where")
 *    at TRACE, in order, after the line that set the detail, and the
 *    detail the caller reads is the one that line set;
 *  - the result functions generated from each library's result list give
 *    every listed code its name and message, "unknown result" otherwise,
 *    and last_error / version are libtecore's;
 *  - one number per meaning in all three libraries (common/te_results.h):
 *    every code's name and message agree with the shared list, and a
 *    result converted between libtecore and an upper library keeps its
 *    code where both have it (a TIMEOUT stays a TIMEOUT);
 *  - libtecomm's tunables are registered when the library loads (before
 *    any communicator exists), with a help text and their defaults.
 * The log reads its settings once per process, so the hop test runs in a
 * child it forks itself; the parent reads the log file. */
#include "tests.h"
#include <sys/mman.h>
#include <te/comm.h>
#include <te/graph.h>
#include "te_results.h"

/* What the logging child reports back through a shared page. */
struct hop_report {
  int done;
  int result;
  char detail[1024];
};

static tecore_result_t noop_fwd(void *user, tecore_stream_t s, const struct tegraph_io *io) {
  (void)user, (void)s, (void)io;
  return TECORE_SUCCESS;
}

/* tegraph_callable_create with a sample input of an unknown dtype: the
 * check of that tensor fails, and the failure goes up through the check
 * of the description and the creation (two TG_CHECK hops). */
static void hop_child(struct hop_report *rep, int bad_dtype) {
  struct tecore_tensor in, out;
  size_t shape[2] = {4, 8};
  memset(&in, 0, sizeof in);
  memset(&out, 0, sizeof out);
  (void)tecore_tensor_init(&out, TECORE_DTYPE_F32, 2, shape, 0);
  (void)tecore_tensor_init(&in, TECORE_DTYPE_F32, 2, shape, 0);
  in.dtype = (tecore_dtype_t)bad_dtype;
  struct tegraph_callable_desc d = {.forward = noop_fwd, .sample_inputs = &in, .ninputs = 1,
                                    .outputs = &out, .noutputs = 1};
  tegraph_callable_t *c = NULL;
  rep->result = tegraph_callable_create(&d, NULL, &c);
  snprintf(rep->detail, sizeof rep->detail, "%s", tegraph_last_error());
}

START_TEST(hop_log_names_each_hop) {
  char dir[256], path[512], text[65536];
  te_tmpdir(dir, sizeof dir);
  snprintf(path, sizeof path, "%s/te.log", dir);
  struct hop_report *rep = mmap(NULL, sizeof *rep, PROT_READ | PROT_WRITE,
                                MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  ck_assert_msg(rep != MAP_FAILED, "mmap: %s", strerror(errno));
  memset(rep, 0, sizeof *rep);
  int bad_dtype = 1000 + (int)(te_rand_u32() % 100000);
  fflush(stdout);
  fflush(stderr);
  pid_t pid = fork();
  ck_assert_msg(pid >= 0, "fork: %s", strerror(errno));
  if (pid == 0) {
    setenv("TE_DEBUG", "TRACE", 1);
    setenv("TE_DEBUG_SUBSYS", "GRAPH", 1);
    setenv("TE_DEBUG_FILE", path, 1);
    hop_child(rep, bad_dtype);
    rep->done = 1;
    _exit(0);
  }
  int status = 0;
  ck_assert_int_eq(waitpid(pid, &status, 0), pid);
  ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child died (status 0x%x)",
                status);
  ck_assert(rep->done);
  ck_assert_msg(rep->result == TEGRAPH_ERR_INVALID, "tegraph_callable_create gave %s (%s)",
                tegraph_result_name((tegraph_result_t)rep->result), rep->detail);

  /* the detail names the function, the argument and the value, and the
   * hops left it as the failing check set it */
  char want[256];
  snprintf(want, sizeof want,
           "tegraph_callable_create: desc.sample_inputs[0]: unknown dtype %d", bad_dtype);
  ck_assert_str_eq(rep->detail, want);

  te_read_text(path, text, sizeof text);
  /* the line that set the detail, then one TRACE line per hop, innermost
   * first: the description's check, then the creation */
  const char *set = strstr(text, want);
  ck_assert_msg(set, "no log line carries the detail \"%s\":\n%s", want, text);
  const char *hop1 = strstr(set, "<- check_desc");
  ck_assert_msg(hop1, "no hop line \"<- check_desc\" after the error:\n%s", text);
  const char *hop2 = strstr(hop1, "<- callables_create");
  ck_assert_msg(hop2, "no hop line \"<- callables_create\" after \"<- check_desc\":\n%s", text);
  /* each hop line is a TRACE line of libtegraph/callable.c */
  for (const char *h = hop1; h; h = h == hop1 ? hop2 : NULL) {
    const char *start = h;
    while (start > text && start[-1] != '\n') start--;
    char line[512];
    size_t len = (size_t)(h - start) + 20;
    if (len >= sizeof line) len = sizeof line - 1;
    memcpy(line, start, len);
    line[len] = '\0';
    ck_assert_msg(strstr(line, "TRACE") && strstr(line, "callable.c"),
                  "hop line \"%s\" is not a TRACE line of callable.c", line);
  }
  munmap(rep, sizeof *rep);
  te_rmtree(dir);
}
END_TEST

/* ---- result functions, generated from the lists ---- */

struct listed {
  int value;
  const char *name, *msg;
};
#define LISTED_(name, value, msg) {value, #name, msg},
static const struct listed graph_codes[] = {TEGRAPH_RESULT_LIST(LISTED_)};
static const struct listed comm_codes[] = {TECOMM_RESULT_LIST(LISTED_)};

START_TEST(result_functions_follow_the_lists) {
  for (size_t i = 0; i < sizeof graph_codes / sizeof graph_codes[0]; i++) {
    const struct listed *l = &graph_codes[i];
    ck_assert_str_eq(tegraph_result_name((tegraph_result_t)l->value), l->name);
    ck_assert_str_eq(tegraph_strerror((tegraph_result_t)l->value), l->msg);
  }
  for (size_t i = 0; i < sizeof comm_codes / sizeof comm_codes[0]; i++) {
    const struct listed *l = &comm_codes[i];
    ck_assert_str_eq(tecomm_result_name((tecomm_result_t)l->value), l->name);
    ck_assert_str_eq(tecomm_strerror((tecomm_result_t)l->value), l->msg);
  }
  /* a value no list names */
  int bogus = 100000 + (int)(te_rand_u32() % 1000);
  ck_assert_str_eq(tegraph_result_name((tegraph_result_t)bogus), "unknown result");
  ck_assert_str_eq(tegraph_strerror((tegraph_result_t)bogus), "unknown result");
  ck_assert_str_eq(tecomm_result_name((tecomm_result_t)bogus), "unknown result");
  ck_assert_str_eq(tecomm_strerror((tecomm_result_t)bogus), "unknown result");
  /* one per-thread detail for all three libraries */
  char token[32];
  snprintf(token, sizeof token, "detail-%08x", te_rand_u32());
  tecore_set_error("%s", token);
  ck_assert_str_eq(tegraph_last_error(), token);
  ck_assert_str_eq(tecomm_last_error(), token);
  tecore_clear_error();
  /* one version for the package */
  int v[3][3];
  tecore_version(&v[0][0], &v[0][1], &v[0][2]);
  tegraph_version(&v[1][0], &v[1][1], &v[1][2]);
  tecomm_version(&v[2][0], &v[2][1], &v[2][2]);
  for (int k = 0; k < 3; k++) {
    ck_assert_int_eq(v[1][k], v[0][k]);
    ck_assert_int_eq(v[2][k], v[0][k]);
  }
  /* the numbers are the package's version string (te-info prints both:
   * 0.1.0 beside 0.2.0 read as a mismatched library) */
  char nums[48];
  snprintf(nums, sizeof nums, "%d.%d.%d", v[0][0], v[0][1], v[0][2]);
  ck_assert_str_eq(nums, tecore_version_string());
  ck_assert_str_eq(nums, TECORE_VERSION_STRING);
  ck_assert_int_eq(TECORE_VERSION_CODE, v[0][0] * 10000 + v[0][1] * 100 + v[0][2]);
}
END_TEST

/* ---- one result list for the three libraries ---- */

struct shared_row {
  int num, core, graph, comm, instead;
  const char *sfx, *msg;
};
#define T_YN_Y 1
#define T_YN_N 0
#define T_ROW_(sfx, num, msg, a, b, c, i) \
  {num, T_YN_##a, T_YN_##b, T_YN_##c, TE_RES_##i, #sfx, msg},
static const struct shared_row shared_rows[] = {TE_RESULT_ROWS(T_ROW_)};

START_TEST(results_share_numbers_messages_and_conversions) {
  char name[64];
  for (size_t i = 0; i < sizeof shared_rows / sizeof shared_rows[0]; i++) {
    const struct shared_row *w = &shared_rows[i];
    ck_assert_str_eq(te_result_message(w->num), w->msg);
    for (size_t j = 0; j < i; j++) ck_assert_int_ne(shared_rows[j].num, w->num);
    /* each library that has the row names it <LIB>_<suffix> with the shared
     * message; the others do not know the number */
    snprintf(name, sizeof name, "TECORE_%s", w->sfx);
    ck_assert_str_eq(tecore_result_name((tecore_result_t)w->num), w->core ? name : "unknown result");
    ck_assert_str_eq(tecore_strerror((tecore_result_t)w->num), w->core ? w->msg : "unknown result");
    snprintf(name, sizeof name, "TEGRAPH_%s", w->sfx);
    ck_assert_str_eq(tegraph_result_name((tegraph_result_t)w->num),
                     w->graph ? name : "unknown result");
    ck_assert_str_eq(tegraph_strerror((tegraph_result_t)w->num),
                     w->graph ? w->msg : "unknown result");
    snprintf(name, sizeof name, "TECOMM_%s", w->sfx);
    ck_assert_str_eq(tecomm_result_name((tecomm_result_t)w->num),
                     w->comm ? name : "unknown result");
    ck_assert_str_eq(tecomm_strerror((tecomm_result_t)w->num),
                     w->comm ? w->msg : "unknown result");
    /* conversions: the code itself where the target has it, else the row's
     * instead, which the target has */
    if (w->core) {
      int g = te_result_to_graph(w->num), m = te_result_to_comm(w->num);
      ck_assert_int_eq(g, w->graph ? w->num : w->instead);
      ck_assert_int_eq(m, w->comm ? w->num : w->instead);
      ck_assert_str_ne(tegraph_result_name((tegraph_result_t)g), "unknown result");
      ck_assert_str_ne(tecomm_result_name((tecomm_result_t)m), "unknown result");
    }
    if (w->graph || w->comm) {
      int c = te_result_to_core(w->num);
      ck_assert_int_eq(c, w->core ? w->num : w->instead);
      ck_assert_str_ne(tecore_result_name((tecore_result_t)c), "unknown result");
    }
  }
  /* what issue 30 found disagreeing: the same meaning, the same number,
   * and conversions that keep it */
  ck_assert_int_eq(TECORE_ERR_NOT_SUPPORTED, TEGRAPH_ERR_NOT_SUPPORTED);
  ck_assert_int_eq(TECORE_ERR_NOT_SUPPORTED, TECOMM_ERR_NOT_SUPPORTED);
  ck_assert_int_eq(TEGRAPH_ERR_DEVICE, TECOMM_ERR_DEVICE);
  ck_assert_int_eq(te_result_to_graph(TECORE_ERR_TIMEOUT), TEGRAPH_ERR_TIMEOUT);
  ck_assert_int_eq(te_result_to_comm(TECORE_ERR_TIMEOUT), TECOMM_ERR_TIMEOUT);
  ck_assert_int_eq(te_result_to_graph(TECORE_ERR_CAPTURE), TEGRAPH_ERR_CAPTURE);
  ck_assert_int_eq(te_result_to_comm(TECORE_ERR_CAPTURE), TECOMM_ERR_CAPTURE);
  ck_assert_int_eq(te_result_to_comm(TECORE_ERR_DRIVER), TECOMM_ERR_DEVICE);
  ck_assert_int_eq(te_result_to_core(TECOMM_ERR_TIMEOUT), TECORE_ERR_TIMEOUT);
  ck_assert_int_eq(te_result_to_core(TECOMM_ERR_MISMATCH), TECORE_ERR_INTERNAL);
  /* a number no row has */
  int bogus = 100000 + (int)(te_rand_u32() % 1000);
  ck_assert_ptr_null(te_result_message(bogus));
  ck_assert_int_eq(te_result_to_core(bogus), TECORE_ERR_INTERNAL);
  ck_assert_int_eq(te_result_to_comm(bogus), TECOMM_ERR_DEVICE);
}
END_TEST

/* ---- libtecomm's tunables ---- */

START_TEST(comm_tunables_registered_at_load) {
  /* the environment variable, its type, and its default (the reference:
   * libtecomm(7), ENVIRONMENT) */
  static const struct {
    const char *env;
    tecore_tunable_type_t type;
    int64_t def;
    const char *def_str;
  } want[] = {
      {"TECOMM_TIMEOUT", TECORE_TUNABLE_INT, 30000, NULL},
      {"TECOMM_POOL_MB", TECORE_TUNABLE_INT, 256, NULL},
      {"TECOMM_MAX_TOKENS", TECORE_TUNABLE_INT, 64, NULL},
      {"TECOMM_MAX_HIDDEN", TECORE_TUNABLE_INT, 8192, NULL},
      {"TECOMM_ALGO", TECORE_TUNABLE_STRING, 0, "auto"},
      {"TECOMM_NCCL", TECORE_TUNABLE_INT, 1, NULL},
      {"TECOMM_RANK", TECORE_TUNABLE_INT, -1, NULL},
      {"TECOMM_NRANKS", TECORE_TUNABLE_INT, -1, NULL},
      {"TECOMM_ROOT", TECORE_TUNABLE_STRING, 0, ""},
      {"TECOMM_ONESHOT_MAX_KB", TECORE_TUNABLE_INT, 0, NULL},
      {"TECOMM_LAMPORT_MAX_KB", TECORE_TUNABLE_INT, 0, NULL},
  };
  /* no libtecomm call has run in this process: registration happened at
   * load (tecomm_strerror keeps the library linked) */
  ck_assert_ptr_nonnull(tecomm_strerror(TECOMM_SUCCESS));
  for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
    struct tecore_tunable_info info;
    tecore_result_t r = tecore_tunable_find(want[i].env, &info);
    ck_assert_msg(r == TECORE_SUCCESS, "%s is not registered: %s", want[i].env,
                  tecore_last_error());
    ck_assert_str_eq(info.env, want[i].env);
    ck_assert_msg(info.help && strlen(info.help) > 10, "%s has no help text", want[i].env);
    ck_assert_int_eq(info.type, want[i].type);
    if (want[i].type == TECORE_TUNABLE_INT) ck_assert_int_eq(info.def_int, want[i].def);
    else ck_assert_str_eq(info.def_str, want[i].def_str);
  }
}
END_TEST

static Suite *upper_suite(void) {
  Suite *s = suite_create("upper");
  TCase *tc = te_tcase(s, "check", 0);
  tcase_add_test(tc, hop_log_names_each_hop);
  tc = te_tcase(s, "result", 0);
  tcase_add_test(tc, result_functions_follow_the_lists);
  tcase_add_test(tc, results_share_numbers_messages_and_conversions);
  tc = te_tcase(s, "tunables", 0);
  tcase_add_test(tc, comm_tunables_registered_at_load);
  return s;
}

TE_TEST_MAIN(upper_suite, TE_TEST_NODEVICE)
