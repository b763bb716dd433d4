/* profile_hook.h -- the two calls a launch path makes around its launch so
 * that tecore_profile_* (te/profile.h) can time it.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Cheap when profiling is off: one relaxed load.  Nested brackets (a GEMM
 * that vdev runs as a kernel launch) are recorded once, by the outer one. */
#ifndef TE_PROFILE_HOOK_H
#define TE_PROFILE_HOOK_H

#include <te/device.h>

struct te_prof_mark {
  tecore_event_t e0;
  tecore_stream_t stream;
  int on;
};

void te_prof_begin(struct te_prof_mark *m, tecore_stream_t stream);
/* name: a string that lives as long as the process; label: copied (NULL:
 * none); r: the launch's result (a failed launch is not recorded). */
void te_prof_end(struct te_prof_mark *m, const char *name, const char *label, tecore_result_t r);

#endif
