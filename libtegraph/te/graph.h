/* te/graph.h -- libtegraph: CUDA graph capture and update, graphed
 * callables, activation offload.  Link with `pkg-config --libs te-graph`.
 * This release holds the library's foundation: its result codes, version
 * and the io_uring probe its file-spill path stands on. */
#ifndef TE_GRAPH_H
#define TE_GRAPH_H

#include <te/core.h>

#ifdef __cplusplus
extern "C" {
#endif

/* X(name, value, message) */
#define TEGRAPH_RESULT_LIST(X)                                                  \
  X(TEGRAPH_SUCCESS, 0, "success")                                              \
  X(TEGRAPH_ERR_INVALID, 1, "invalid argument")                                 \
  X(TEGRAPH_ERR_NOMEM, 2, "out of memory")                                      \
  X(TEGRAPH_ERR_DEVICE, 3, "device layer call failed (see tecore_last_error)")  \
  X(TEGRAPH_ERR_CAPTURE, 4, "capture failed")                                   \
  X(TEGRAPH_ERR_STATE, 5, "call not allowed in the object's current state")     \
  X(TEGRAPH_ERR_IO, 6, "I/O failed")                                            \
  X(TEGRAPH_ERR_NOT_SUPPORTED, 7, "not supported on this system")

typedef enum tegraph_result {
#define TEGRAPH_RESULT_ENUM_(name, value, msg) name = value,
  TEGRAPH_RESULT_LIST(TEGRAPH_RESULT_ENUM_)
#undef TEGRAPH_RESULT_ENUM_
  TEGRAPH_RESULT_COUNT_
} tegraph_result_t;

/* A static message for a result code. */
const char *tegraph_strerror(tegraph_result_t r);
/* The enum's name, e.g. "TEGRAPH_ERR_INVALID". */
const char *tegraph_result_name(tegraph_result_t r);
/* The calling thread's detail for its last failure (shared with libtecore). */
const char *tegraph_last_error(void);
void tegraph_version(int *major, int *minor, int *patch);

/* Whether io_uring works here (kernel support, not blocked by seccomp or
 * io_uring_disabled): *supported = 1, or 0 with the reason in *why
 * (a static string).  The file-spill path of activation offload needs it. */
tegraph_result_t tegraph_uring_probe(int *supported, const char **why);

#ifdef __cplusplus
}
#endif
#endif
