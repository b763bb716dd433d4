/* SPDX-License-Identifier: Apache-2.0 */
/* te/log.h -- libte's log, for callers that want to know where it goes.
 * TE_DEBUG=NONE|ERROR|WARN|INFO|TRACE sets the level (default: WARN),
 * TE_DEBUG_SUBSYS=INIT,DEVICE,... (or ^INIT to exclude) the subsystems,
 * TE_DEBUG_FILE=path (%h host, %p pid) the destination (default stderr).
 * Lines read "host:pid:tid [level] subsys message". */
#ifndef TE_LOG_H
#define TE_LOG_H

#include <te/result.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_log_level {
  TECORE_LOG_NONE = 0,
  TECORE_LOG_ERROR = 1,
  TECORE_LOG_WARN = 2,
  TECORE_LOG_INFO = 3,
  TECORE_LOG_TRACE = 4
} tecore_log_level_t;

/* Subsystem bits for TE_DEBUG_SUBSYS. */
#define TECORE_SUBSYS_INIT 0x01u
#define TECORE_SUBSYS_DEVICE 0x02u
#define TECORE_SUBSYS_KERNEL 0x04u
#define TECORE_SUBSYS_GRAPH 0x08u
#define TECORE_SUBSYS_TUNE 0x10u
#define TECORE_SUBSYS_FP8 0x20u
#define TECORE_SUBSYS_COMM 0x40u
#define TECORE_SUBSYS_OFFLOAD 0x80u
#define TECORE_SUBSYS_ALL 0xffu

/* Writes one log line if level and subsys pass the filters; keeps errno. */
void tecore_log(tecore_log_level_t level, unsigned subsys, const char *file, int line,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
/* The current level (after reading TE_DEBUG). */
tecore_log_level_t tecore_log_level(void);

#ifdef __cplusplus
}
#endif
#endif
