/* result.c -- libtegraph's result strings, version and last error. */
#include "config.h"
#include <te/graph.h>

#define TE_EXPORT __attribute__((visibility("default")))

TE_EXPORT const char *tegraph_strerror(tegraph_result_t r) {
  switch (r) {
#define TG_MSG_(name, value, msg) \
  case name:                      \
    return msg;
    TEGRAPH_RESULT_LIST(TG_MSG_)
#undef TG_MSG_
  default:
    return "unknown result";
  }
}

TE_EXPORT const char *tegraph_result_name(tegraph_result_t r) {
  switch (r) {
#define TG_NAME_(name, value, msg) \
  case name:                       \
    return #name;
    TEGRAPH_RESULT_LIST(TG_NAME_)
#undef TG_NAME_
  default:
    return "unknown result";
  }
}

TE_EXPORT const char *tegraph_last_error(void) { return tecore_last_error(); }

TE_EXPORT void tegraph_version(int *major, int *minor, int *patch) {
  tecore_version(major, minor, patch);
}
