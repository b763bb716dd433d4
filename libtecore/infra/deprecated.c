/* SPDX-License-Identifier: Apache-2.0
 * deprecated.c -- libtecore's former function names, kept for one release.
 *
 * Each old name was also the name of the struct it fills, which made C++
 * callers write `struct` everywhere (te/deprecated.h).  The old symbols
 * stay exported in the TECORE_0.1 node so built programs keep working;
 * each forwards to its new name and logs one WARN line on its first call,
 * so a program still using it hears about it at run time as well as at
 * build time.  Remove this file one release after the renames. */
#include "internal.h"

/* Defining the deprecated functions is not a use of them. */
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

/* Logs the one warning of an old name (the first call through *warned). */
static void te_deprecated_called(int *warned, const char *old_name, const char *new_name) {
  if (__atomic_exchange_n(warned, 1, __ATOMIC_RELAXED)) return;
  TE_WARN(TECORE_SUBSYS_INIT, "%s() is deprecated and goes in the next release; call %s()",
          old_name, new_name);
}

#define TE_FORWARD_NOTE(old, new_)                                             \
  static int warned_;                                                          \
  te_deprecated_called(&warned_, #old, #new_)

TE_EXPORT tecore_result_t tecore_device_props(int ordinal, struct tecore_device_props *props) {
  TE_FORWARD_NOTE(tecore_device_props, tecore_device_get_props);
  return tecore_device_get_props(ordinal, props);
}

TE_EXPORT tecore_result_t tecore_tunable_info(int index, struct tecore_tunable_info *info) {
  TE_FORWARD_NOTE(tecore_tunable_info, tecore_tunable_get_info);
  return tecore_tunable_get_info(index, info);
}

TE_EXPORT tecore_result_t tecore_kernel_def(int id, const struct tecore_kernel_def **def) {
  TE_FORWARD_NOTE(tecore_kernel_def, tecore_kernel_get_def);
  return tecore_kernel_get_def(id, def);
}

TE_EXPORT tecore_result_t tecore_seq_saved(const tecore_seq_t *seq, struct tecore_seq_saved *saved,
                                           size_t max, size_t *count) {
  TE_FORWARD_NOTE(tecore_seq_saved, tecore_seq_get_saved);
  return tecore_seq_get_saved(seq, saved, max, count);
}

TE_EXPORT tecore_result_t tecore_svc_stats(struct tecore_svc_stats *st) {
  TE_FORWARD_NOTE(tecore_svc_stats, tecore_svc_get_stats);
  return tecore_svc_get_stats(st);
}
