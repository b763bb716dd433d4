/* result.c -- libtecomm's result strings, version and last error. */
#include "config.h"
#include <te/comm.h>

#define TE_EXPORT __attribute__((visibility("default")))

TE_EXPORT const char *tecomm_strerror(tecomm_result_t r) {
  switch (r) {
#define TC_MSG_(name, value, msg) \
  case name:                      \
    return msg;
    TECOMM_RESULT_LIST(TC_MSG_)
#undef TC_MSG_
  default:
    return "unknown result";
  }
}

TE_EXPORT const char *tecomm_result_name(tecomm_result_t r) {
  switch (r) {
#define TC_NAME_(name, value, msg) \
  case name:                       \
    return #name;
    TECOMM_RESULT_LIST(TC_NAME_)
#undef TC_NAME_
  default:
    return "unknown result";
  }
}

TE_EXPORT const char *tecomm_last_error(void) { return tecore_last_error(); }

TE_EXPORT void tecomm_version(int *major, int *minor, int *patch) {
  tecore_version(major, minor, patch);
}
