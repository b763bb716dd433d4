/* SPDX-License-Identifier: Apache-2.0
 * te_upper.h -- the private conventions the upper libraries (libtegraph,
 * libtecomm) share, so that each writes them once and the same way:
 *  - the export marker;
 *  - the public result functions (<lib>_strerror, <lib>_result_name,
 *    <lib>_last_error, <lib>_version) generated from the library's result
 *    list (TEGRAPH_RESULT_LIST, TECOMM_RESULT_LIST);
 *  - errors set in libtecore's per-thread detail and logged, libtecore
 *    failures converted (common/te_results.h) with "what: " in front of
 *    libtecore's detail;
 *  - a check that propagates a failure, logging each hop ("<- where")
 *    at TRACE as libtecore's TE_CHECK does;
 *  - tunables: TECORE_TUNABLE_INT / TECORE_TUNABLE_STR of te/tunable.h,
 *    defined in the file that reads them (registered when the library
 *    loads, listed by te-info -e);
 *  - the live-handle registry (te_handles.h, common/handles.c).
 * Each library's own header (tg_internal.h, tc_internal.h) binds these to
 * its result type and log subsystem (TG_ERR, TG_CHECK, TC_ERR, ...).
 * Everything here goes through libtecore's public API only. */
#ifndef TE_UPPER_H
#define TE_UPPER_H

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <te/core.h>
#include "te_handles.h"

/* Marks a public function's definition (everything else is hidden). */
#define TE_EXPORT __attribute__((visibility("default")))
#define TE_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- result functions ------------------------------------------------------
 * TE_UPPER_RESULT_FUNCS(tegraph, tegraph_result_t, TEGRAPH_RESULT_LIST)
 * defines tegraph_strerror and tegraph_result_name from the list's
 * X(name, value, "message") entries, tegraph_last_error (libtecore's
 * per-thread detail, which every libte library sets) and tegraph_version
 * (the package's version, which libtecore holds). */
#define TE_UPPER_MSG_CASE_(name, value, msg) \
  case name:                                 \
    return msg;
#define TE_UPPER_NAME_CASE_(name, value, msg) \
  case name:                                  \
    return #name;
#define TE_UPPER_RESULT_FUNCS(lib, type, LIST)                                 \
  TE_EXPORT const char *lib##_strerror(type r) {                               \
    switch (r) {                                                               \
      LIST(TE_UPPER_MSG_CASE_)                                                 \
    default:                                                                   \
      return "unknown result";                                                 \
    }                                                                          \
  }                                                                            \
  TE_EXPORT const char *lib##_result_name(type r) {                            \
    switch (r) {                                                               \
      LIST(TE_UPPER_NAME_CASE_)                                                \
    default:                                                                   \
      return "unknown result";                                                 \
    }                                                                          \
  }                                                                            \
  TE_EXPORT const char *lib##_last_error(void) { return tecore_last_error(); } \
  TE_EXPORT void lib##_version(int *major, int *minor, int *patch) {           \
    tecore_version(major, minor, patch);                                       \
  }

/* ---- errors ------------------------------------------------------------------
 * Bytes of a detail built here: libtecore's per-thread buffer holds as
 * much. */
#define TE_UPPER_DETAIL_MAX 1024

/* Sets the per-thread detail to the formatted message and logs it at INFO
 * in subsys as "<result name>: <detail>" (errno is kept: tecore_set_error
 * and tecore_log keep it).  The body of TG_ERR and TC_ERR. */
static inline void te_upper_verr(unsigned subsys, const char *result_name, const char *file,
                                 int line, const char *fmt, va_list ap) {
  char msg[TE_UPPER_DETAIL_MAX];
  vsnprintf(msg, sizeof msg, fmt, ap);
  tecore_set_error("%s", msg);
  tecore_log(TECORE_LOG_INFO, subsys, file, line, "%s: %s", result_name, msg);
}

/* Puts "what: " in front of libtecore's detail of failure r (its message
 * when the detail is empty).  The first half of TG_CORE and TC_CORE; the
 * library maps r to its own code. */
static inline void te_upper_core_detail(tecore_result_t r, const char *what) {
  char prev[TE_UPPER_DETAIL_MAX];
  snprintf(prev, sizeof prev, "%s", tecore_last_error());
  tecore_set_error("%s: %s", what, prev[0] ? prev : tecore_strerror(r));
}

/* One hop of a failure on its way up: logs "<- where" at TRACE in subsys,
 * as libtecore's TE_CHECK does, so TE_DEBUG=TRACE shows the path from the
 * call that set the detail up to the public function.  The detail itself
 * is left as that call set it (it names the public function and the
 * argument already; a hop adds no words to what the caller reads). */
static inline void te_upper_hop(unsigned subsys, const char *where, const char *file, int line) {
  tecore_log(TECORE_LOG_TRACE, subsys, file, line, "<- %s", where);
}

/* Propagates a failure of call (a value of the library's result type;
 * ok is its success code), logging the hop (te_upper_hop).  The body of
 * TG_CHECK and TC_CHECK. */
#define TE_UPPER_CHECK(type, ok, subsys, call)                                 \
  do {                                                                         \
    type te_up_r_ = (call);                                                    \
    if (te_up_r_ != (ok)) {                                                    \
      te_upper_hop((subsys), __func__, __FILE__, __LINE__);                    \
      return te_up_r_;                                                         \
    }                                                                          \
  } while (0)

#endif
