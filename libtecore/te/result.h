/* SPDX-License-Identifier: Apache-2.0 */
/* te/result.h -- libtecore's result codes, errors and last-error detail.
 *
 * Every libtecore function returns a tecore_result_t.  The enum, its names
 * and its messages come from one list (TECORE_RESULT_LIST) so they cannot
 * drift apart.  libtegraph and libtecomm share the numbers: a meaning has
 * one number in all three libraries (TEGRAPH_ERR_TIMEOUT == TECORE_ERR_TIMEOUT),
 * and a code only they return takes a number libtecore does not use.  A failing call also leaves a per-thread detail string,
 * read with tecore_last_error(), that names the argument or the driver
 * call that failed. */
#ifndef TE_RESULT_H
#define TE_RESULT_H

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define TECORE_RESULT_LIST(X)                                                   \
  X(TECORE_SUCCESS, 0, "success")                                               \
  X(TECORE_ERR_INVALID, 1, "invalid argument")                                  \
  X(TECORE_ERR_NOMEM, 2, "out of memory")                                       \
  X(TECORE_ERR_DEVICE_NOMEM, 3, "out of device memory")                         \
  X(TECORE_ERR_NO_DRIVER, 4, "CUDA driver not available")                       \
  X(TECORE_ERR_NO_DEVICE, 5, "no device")                                       \
  X(TECORE_ERR_NOT_INITIALIZED, 6, "libtecore not initialized")                 \
  X(TECORE_ERR_DRIVER, 7, "CUDA driver call failed")                            \
  X(TECORE_ERR_NOT_SUPPORTED, 8, "not supported by this backend, device or system") \
  X(TECORE_ERR_NOT_READY, 9, "not ready")                                       \
  X(TECORE_ERR_CAPTURE, 10,                                                     \
    "illegal operation during stream capture, or the capture failed")            \
  X(TECORE_ERR_GRAPH_UPDATE, 11, "graph update failed")                         \
  X(TECORE_ERR_SYSTEM, 12, "system call failed")                                \
  X(TECORE_ERR_INTERNAL, 13, "internal error")                                  \
  X(TECORE_ERR_TIMEOUT, 14, "timed out (a peer or the device did not answer in time)") \
  X(TECORE_ERR_DISABLED, 15, "disabled by the environment")                     \
  X(TECORE_ERR_NO_LIBRARY, 16, "run-time library not available")                \
  X(TECORE_ERR_ILLEGAL_ADDRESS, 17, "illegal memory access")

typedef enum tecore_result {
#define TECORE_RESULT_ENUM_(name, value, msg) name = value,
  TECORE_RESULT_LIST(TECORE_RESULT_ENUM_)
#undef TECORE_RESULT_ENUM_
  TECORE_RESULT_COUNT_
} tecore_result_t;

/* A static message for a result code ("unknown result" for others). */
const char *tecore_strerror(tecore_result_t r);
/* The enum's name, e.g. "TECORE_ERR_INVALID". */
const char *tecore_result_name(tecore_result_t r);
/* The calling thread's detail for its last failed call ("" if none).
 * Valid until the thread's next libtecore call. */
const char *tecore_last_error(void);
/* Clears the calling thread's detail string. */
void tecore_clear_error(void);
/* Sets the calling thread's detail string (printf format).  For layered
 * libraries (libtegraph, libtecomm) and applications that want one place
 * to read the reason of a failure. */
void tecore_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#ifdef __cplusplus
}
#endif
#endif
