/* SPDX-License-Identifier: Apache-2.0
 * deprecated.c -- libtegraph's former function names, kept for one release
 * (see libtecore/infra/deprecated.c and te/deprecated.h for why they changed).
 * Each forwards to its new name and logs one WARN line on its first call. */
#include "tg_internal.h"
#include <te/offload.h>

#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

TE_EXPORT tegraph_result_t tegraph_offload_stats(tegraph_offload_t *ctx,
                                                 struct tegraph_offload_stats *st) {
  static int warned;
  if (!__atomic_exchange_n(&warned, 1, __ATOMIC_RELAXED))
    tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_OFFLOAD, __FILE__, __LINE__,
               "tegraph_offload_stats() is deprecated and goes in the next release; "
               "call tegraph_offload_get_stats()");
  return tegraph_offload_get_stats(ctx, st);
}
