/* te/profile.h -- where a step's device time goes, kernel by kernel.
 *
 * SPDX-License-Identifier: Apache-2.0
 *
 * While profiling is on, every eager launch libte makes (its kernels,
 * libtegraph's and libtecomm's through tecore_kernel_launch, GEMMs,
 * tecore_memset_d8_async and tecore_memcpy_async) is bracketed by two
 * timing events on its stream.  tecore_profile_report waits for the
 * device, sums the elapsed times per kernel name (GEMMs per shape and
 * type) and prints a table, largest first.  Launches into a capturing
 * stream are not recorded (a graph replays them; time the replay).
 *
 * It is the project's own answer to "which kernels does this step run and
 * what does each cost", where no system profiler is at hand; the events
 * add host time to each launch, so time whole steps without it. */
#ifndef TE_PROFILE_H
#define TE_PROFILE_H

#include <te/result.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Starts recording.  TECORE_ERR_INVALID when already recording. */
tecore_result_t tecore_profile_start(void);
/* Stops recording; what was recorded stays until tecore_profile_report.
 * TECORE_ERR_INVALID when not recording. */
tecore_result_t tecore_profile_stop(void);
/* Synchronizes the context, prints one line per kernel name (calls, total
 * and mean microseconds, share of the total) to the file descriptor fd
 * (1: standard output; -1: print nothing),
 * stores the sum of all recorded times in *total_us (NULL: not stored),
 * and forgets the records.  Recording goes on if it was on. */
tecore_result_t tecore_profile_report(int fd, double *total_us);

#ifdef __cplusplus
}
#endif
#endif
