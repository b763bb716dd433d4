/* SPDX-License-Identifier: Apache-2.0 */
/* tc_internal.h -- libtecomm's private helpers: the upper libraries'
 * conventions (common/te_upper.h: export marker, errors in libtecore's
 * per-thread detail, checks that log each hop, libtecore results converted
 * by common/te_results.h) bound to libtecomm's result type and log
 * subsystem; log macros; the
 * timeout.  Tunables are defined, with TECORE_TUNABLE_* (te/tunable.h),
 * in the file that reads them.  libtecomm sees libtecore through its
 * public API only. */
#ifndef TECOMM_INTERNAL_H
#define TECOMM_INTERNAL_H

#include "config.h"
#include <stddef.h>
#include <stdint.h>
#include <te/comm.h>
#include "te_upper.h"


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
/* Propagates a libtecomm failure, logging the hop at TRACE (te_upper_hop). */
#define TC_CHECK(call) TE_UPPER_CHECK(tecomm_result_t, TECOMM_SUCCESS, TECORE_SUBSYS_COMM, call)
/* The libtecomm code for a libtecore failure (the same number where
 * libtecomm has the code, else the row's instead: common/te_results.h),
 * with "what: " put in front of libtecore's detail. */
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

/* Milliseconds a host exchange or device wait may take (TECOMM_TIMEOUT). */
int64_t tc_timeout_ms(void);

/* Monotonic milliseconds. */
int64_t tc_now_ms(void);
/* This machine (a hash of the kernel's boot id, never 0): the same for
 * every process of it, vdev nodes included. */
uint64_t tc_machine_id(void);
/* 1 when stream is capturing (no host reads of device memory then). */
int tc_capturing(tecore_stream_t stream);

/* ---- the fuser's sums (allreduce.c, for fuser_ops.c) -------------------------
 * tecomm_allreduce_algo (SUM) and tecomm_allreduce_add_rmsnorm for a send
 * / args->x that the caller reads no more afterwards: an algorithm that
 * reduce-scatters into its input (two-shot) then runs on a symmetric input
 * where it lies, without the staged copy the public calls make to keep
 * the caller's input intact. */
tecomm_result_t tc_allreduce_scratch(tecomm_comm_t comm, tecore_devptr_t send, tecore_devptr_t recv,
                                     size_t count, tecore_dtype_t dtype, tecomm_algo_t algo,
                                     unsigned how, tecore_stream_t stream);
/* how, for tc_allreduce_scratch: SCRATCH, send is dead afterwards (as
 * above; without it, the call is tecomm_allreduce_algo's SUM); BESIDE, the
 * call runs beside another kernel (the fuser's overlap): the IPC kernels
 * take at most TECOMM_AR_OVERLAP_BLOCKS blocks. */
#define TC_AR_SCRATCH 0x1u
#define TC_AR_BESIDE 0x2u
/* tecomm_allreduce_algo (TECOMM_ALGO_AUTO) on a communicator libtecomm
 * made for itself and never handed out (the hierarchy's node group): it
 * is not in the handle registry, so the public entry would refuse it;
 * fn names the public call the errors are reported as. */
tecomm_result_t tc_allreduce_group(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn);
/* tecomm_allgather (TECOMM_ALGO_AUTO) on such a communicator (coll.c);
 * a failure becomes its sticky error, which the parent's next call
 * reports. */
tecomm_result_t tc_allgather_group(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecore_stream_t stream, const char *fn);
tecomm_result_t tc_allreduce_add_rmsnorm_scratch(tecomm_comm_t comm,
                                                 const struct tecomm_add_rmsnorm *a, unsigned how,
                                                 tecore_stream_t stream);

/* The sequence-parallel overlap fusions (fuser_sp.c) tecomm_ops_register
 * adds after fuser_ops.c's own. */
extern const struct tecore_fusion_def tc_sp_fusions[];
extern const size_t tc_sp_nfusions;

#endif
