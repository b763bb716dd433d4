/* SPDX-License-Identifier: Apache-2.0 */
/* util.c -- small helpers every libtecore file uses. */
#include "internal.h"
#include <stdlib.h>
#include <string.h>
#include <time.h>

uint64_t te_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

int te_env_is_zero(const char *name) {
  const char *v = getenv(name);
  return v && strcmp(v, "0") == 0;
}
