/* SPDX-License-Identifier: Apache-2.0
 * te_fortran.c -- the C side of libtefortran: fixed-argument doors to the
 * variadic functions of libtecore, which Fortran cannot call (a Fortran
 * interface has no `...`).  The te_core module binds these names and its
 * tecore_set_error(msg) / tecore_log(...) procedures call them; the
 * message is passed on as "%s", so a '%' in it is printed, not read. */
#include <te/core.h>

/* the library is built with -fvisibility=hidden */
#define TEFORTRAN_EXPORT __attribute__((visibility("default")))

TEFORTRAN_EXPORT void tefortran_set_error(const char *msg);
TEFORTRAN_EXPORT void tefortran_log(tecore_log_level_t level, unsigned subsys, const char *file,
                                    int line, const char *msg);

void tefortran_set_error(const char *msg) {
  tecore_set_error("%s", msg ? msg : "");
}

void tefortran_log(tecore_log_level_t level, unsigned subsys, const char *file, int line,
                   const char *msg) {
  tecore_log(level, subsys, file ? file : "fortran", line, "%s", msg ? msg : "");
}
