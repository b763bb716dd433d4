/* SPDX-License-Identifier: Apache-2.0
 * fini.c -- libtegraph's part of tecore_fini(): registered with
 * tecore_fini_register when the library loads (libtecore keeps the hook
 * list, so the layering stays downward), it frees libtegraph's
 * process-wide table of live handles (its own instance of
 * common/handles.c).  Objects the program did not destroy stay the
 * program's. */
#include "tg_internal.h"

static void tg_fini(void *unused) {
  (void)unused;
  te_handles_fini();
}

__attribute__((constructor)) static void tg_fini_at_load(void) {
  (void)tecore_fini_register(tg_fini, NULL);
}
