/* SPDX-License-Identifier: Apache-2.0 */
/* te_results.h -- the one list of result codes of libtecore, libtegraph
 * and libtecomm: one number and one message per meaning, whichever
 * library returns it, and the conversions between the libraries'
 * results, generated from the list.
 *
 * The public enums (TECORE_RESULT_LIST in te/result.h,
 * TEGRAPH_RESULT_LIST in te/graph.h, TECOMM_RESULT_LIST in te/comm.h)
 * are written out in their installed headers, which cannot include this
 * file; te_results_check.h asserts at compile time, in each library,
 * that every row a library has is in its public list under
 * <LIB>_<suffix> with this number and that the list has nothing else,
 * and t/graph/check_upper.c that the messages agree.
 *
 * A row: X(suffix, number, message, core, graph, comm, instead).  core,
 * graph, comm: Y when that library returns the code (its enum has
 * <LIB>_<suffix>), N when not.  instead: the suffix a library without
 * the code reports when it converts a result of a library that has it
 * (a libtecore DRIVER failure is a libtecomm DEVICE failure); it must be
 * a row of each library that lacks this one and converts from one that
 * has it (checked; libtecore converts to and from libtegraph and
 * libtecomm, which never convert each other's results).
 *
 * libtecore's codes keep the numbers 0-17 they had; the codes only the
 * upper libraries return follow from 18.  A new code is one row here and
 * one line in each public list that has it. */
#ifndef TE_RESULTS_H
#define TE_RESULTS_H

#define TE_RESULT_ROWS(X)                                                                     \
  X(SUCCESS, 0, "success", Y, Y, Y, SUCCESS)                                                  \
  X(ERR_INVALID, 1, "invalid argument", Y, Y, Y, ERR_INVALID)                                 \
  X(ERR_NOMEM, 2, "out of memory", Y, Y, Y, ERR_NOMEM)                                        \
  X(ERR_DEVICE_NOMEM, 3, "out of device memory", Y, N, N, ERR_NOMEM)                         \
  X(ERR_NO_DRIVER, 4, "CUDA driver not available", Y, N, N, ERR_DEVICE)                      \
  X(ERR_NO_DEVICE, 5, "no device", Y, N, N, ERR_DEVICE)                                       \
  X(ERR_NOT_INITIALIZED, 6, "libtecore not initialized", Y, N, N, ERR_DEVICE)                \
  X(ERR_DRIVER, 7, "CUDA driver call failed", Y, N, N, ERR_DEVICE)                            \
  X(ERR_NOT_SUPPORTED, 8, "not supported by this backend, device or system", Y, Y, Y,         \
    ERR_NOT_SUPPORTED)                                                                        \
  X(ERR_NOT_READY, 9, "not ready", Y, N, N, ERR_DEVICE)                                       \
  X(ERR_CAPTURE, 10, "illegal operation during stream capture, or the capture failed", Y, Y, \
    Y, ERR_CAPTURE)                                                                           \
  X(ERR_GRAPH_UPDATE, 11, "graph update failed", Y, N, N, ERR_DEVICE)                         \
  X(ERR_SYSTEM, 12, "system call failed", Y, N, Y, ERR_DEVICE)                                \
  X(ERR_INTERNAL, 13, "internal error", Y, N, N, ERR_DEVICE)                                  \
  X(ERR_TIMEOUT, 14, "timed out (a peer or the device did not answer in time)", Y, Y, Y,      \
    ERR_TIMEOUT)                                                                              \
  X(ERR_DISABLED, 15, "disabled by the environment", Y, N, N, ERR_NOT_SUPPORTED)              \
  X(ERR_NO_LIBRARY, 16, "run-time library not available", Y, N, N, ERR_DEVICE)                \
  X(ERR_ILLEGAL_ADDRESS, 17, "illegal memory access", Y, N, N, ERR_DEVICE)                    \
  X(ERR_DEVICE, 18, "device layer call failed (see tecore_last_error)", N, Y, Y, ERR_INTERNAL) \
  X(ERR_STATE, 19, "call not allowed in the object's current state", N, Y, N, ERR_INTERNAL)  \
  X(ERR_IO, 20, "I/O failed", N, Y, N, ERR_SYSTEM)                                            \
  X(ERR_BOOTSTRAP, 21, "bootstrap exchange failed", N, N, Y, ERR_INTERNAL)                    \
  X(ERR_ABORTED, 22, "the communicator was aborted", N, N, Y, ERR_INTERNAL)                   \
  X(ERR_MISMATCH, 23, "the ranks made different collective calls", N, N, Y, ERR_INTERNAL)

/* The rows' numbers by suffix (TE_RES_ERR_INVALID == 1). */
enum te_result_row {
#define TE_RES_NUM_(sfx, num, msg, core, graph, comm, instead) TE_RES_##sfx = num,
  TE_RESULT_ROWS(TE_RES_NUM_)
#undef TE_RES_NUM_
};

#define TE_RES_HAS_Y 1
#define TE_RES_HAS_N 0
#define TE_RES_HAS(yn) TE_RES_HAS_##yn

/* Which library has which row (te_res_in_graph_ERR_TIMEOUT == 1). */
enum te_result_has {
#define TE_RES_IN_(sfx, num, msg, in_core, in_graph, in_comm, instead)                  \
  te_res_in_core_##sfx = TE_RES_HAS(in_core), te_res_in_graph_##sfx = TE_RES_HAS(in_graph), \
  te_res_in_comm_##sfx = TE_RES_HAS(in_comm),
  TE_RESULT_ROWS(TE_RES_IN_)
#undef TE_RES_IN_
};

/* The message of number v, NULL for a number no row has. */
static inline const char *te_result_message(int v) {
  switch (v) {
#define TE_RES_MSG_(sfx, num, msg, core, graph, comm, instead) \
  case num:                                                    \
    return msg;
    TE_RESULT_ROWS(TE_RES_MSG_)
#undef TE_RES_MSG_
  default:
    return NULL;
  }
}

/* v as library lib (core, graph or comm) reports it: v itself where lib
 * has the row, else the row's instead; a number no row has becomes
 * unknown (lib's own code for "internal": INTERNAL in core, DEVICE
 * above). */
#define TE_RES_CONV_CASE_(lib, sfx, num, instead) \
  case num:                                       \
    return te_res_in_##lib##_##sfx ? num : TE_RES_##instead;
#define TE_RES_TO_CORE_(sfx, num, msg, in_core, in_graph, in_comm, instead) \
  TE_RES_CONV_CASE_(core, sfx, num, instead)
#define TE_RES_TO_GRAPH_(sfx, num, msg, in_core, in_graph, in_comm, instead) \
  TE_RES_CONV_CASE_(graph, sfx, num, instead)
#define TE_RES_TO_COMM_(sfx, num, msg, in_core, in_graph, in_comm, instead) \
  TE_RES_CONV_CASE_(comm, sfx, num, instead)

static inline int te_result_to_core(int v) {
  switch (v) {
    TE_RESULT_ROWS(TE_RES_TO_CORE_)
  default:
    return TE_RES_ERR_INTERNAL;
  }
}
static inline int te_result_to_graph(int v) {
  switch (v) {
    TE_RESULT_ROWS(TE_RES_TO_GRAPH_)
  default:
    return TE_RES_ERR_DEVICE;
  }
}
static inline int te_result_to_comm(int v) {
  switch (v) {
    TE_RESULT_ROWS(TE_RES_TO_COMM_)
  default:
    return TE_RES_ERR_DEVICE;
  }
}

#endif
