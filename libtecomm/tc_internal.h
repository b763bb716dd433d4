/* tc_internal.h -- libtecomm's private helpers: the export marker, errors
 * that name the function and argument (the per-thread detail is
 * libtecore's), the mapping of libtecore results, log macros and tunable
 * declarations.  libtecomm sees libtecore through its public API only. */
#ifndef TECOMM_INTERNAL_H
#define TECOMM_INTERNAL_H

#include "config.h"
#include <stddef.h>
#include <stdint.h>
#include <te/comm.h>

#define TE_EXPORT __attribute__((visibility("default")))
#define TC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors ----------------------------------------------------------------
 * tc_err sets the detail (printf format), logs it at INFO (COMM) and
 * returns code:   return TC_ERR(TECOMM_ERR_INVALID, "%s: comm is NULL", fn); */
tecomm_result_t tc_err(tecomm_result_t code, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define TC_ERR(code, ...) tc_err((code), __FILE__, __LINE__, __VA_ARGS__)
#define TC_ARG(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) return tc_err(TECOMM_ERR_INVALID, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)
#define TC_CHECK(call)                                                         \
  do {                                                                         \
    tecomm_result_t tc_r_ = (call);                                            \
    if (tc_r_ != TECOMM_SUCCESS) return tc_r_;                                 \
  } while (0)
/* The libtecomm code for a libtecore failure (INVALID, NOMEM, TIMEOUT,
 * NOT_SUPPORTED keep their meaning; the rest is TECOMM_ERR_DEVICE), with
 * "what: " put in front of libtecore's detail. */
tecomm_result_t tc_core(tecore_result_t r, const char *what);
#define TC_CORE(call, what)                                                    \
  do {                                                                         \
    tecore_result_t tc_c_ = (call);                                            \
    if (tc_c_ != TECORE_SUCCESS) return tc_core(tc_c_, (what));                \
  } while (0)

/* ---- logging --------------------------------------------------------------- */
#define TC_WARN(...) tecore_log(TECORE_LOG_WARN, TECORE_SUBSYS_COMM, __FILE__, __LINE__, __VA_ARGS__)
#define TC_INFO(...) tecore_log(TECORE_LOG_INFO, TECORE_SUBSYS_COMM, __FILE__, __LINE__, __VA_ARGS__)
#define TC_TRACE(...) tecore_log(TECORE_LOG_TRACE, TECORE_SUBSYS_COMM, __FILE__, __LINE__, __VA_ARGS__)

/* ---- tunables (util.c registers them when the library loads) ------------ */
extern struct tecore_tunable tc_tun_timeout_ms;     /* TECOMM_TIMEOUT */
extern struct tecore_tunable tc_tun_pool_mb;        /* TECOMM_POOL_MB */
extern struct tecore_tunable tc_tun_max_tokens;     /* TECOMM_MAX_TOKENS */
extern struct tecore_tunable tc_tun_max_hidden;     /* TECOMM_MAX_HIDDEN */
extern struct tecore_tunable tc_tun_algo;           /* TECOMM_ALGO */
extern struct tecore_tunable tc_tun_nccl;           /* TECOMM_NCCL */
extern struct tecore_tunable tc_tun_rank;           /* TECOMM_RANK */
extern struct tecore_tunable tc_tun_nranks;         /* TECOMM_NRANKS */
extern struct tecore_tunable tc_tun_root;           /* TECOMM_ROOT */
extern struct tecore_tunable tc_tun_oneshot_max_kb; /* TECOMM_ONESHOT_MAX_KB */
extern struct tecore_tunable tc_tun_lamport_max_kb; /* TECOMM_LAMPORT_MAX_KB */

/* Milliseconds a host exchange or device wait may take (TECOMM_TIMEOUT). */
int64_t tc_timeout_ms(void);

/* Monotonic milliseconds. */
int64_t tc_now_ms(void);

#endif
