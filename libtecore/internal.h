/* SPDX-License-Identifier: Apache-2.0 */
/* internal.h -- libtecore's private helpers: export marker, error setting,
 * checks that log each hop, log macros and tunable declarations.
 * Included by every libtecore source; libtegraph and libtecomm use the
 * same macros through their own headers over the public functions. */
#ifndef TECORE_INTERNAL_H
#define TECORE_INTERNAL_H

#include "config.h"
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>
#include <te/core.h>

/* Marks a public function's definition (everything else is hidden). */
#define TE_EXPORT __attribute__((visibility("default")))
#define TE_UNUSED __attribute__((unused))
#define TE_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* ---- errors --------------------------------------------------------------
 * te_error_set stores a formatted detail in the thread's last-error buffer,
 * logs it at INFO (DEVICE subsystem), keeps errno, and returns code, so a
 * failing path reads:  return TE_ERR(TECORE_ERR_INVALID, "bytes is 0");  */
tecore_result_t te_error_set(tecore_result_t code, const char *file, int line,
                             const char *fmt, ...) __attribute__((format(printf, 4, 5)));
/* Logs a failure's hop "<- func" at TRACE (used by TE_CHECK on each hop;
 * the detail is left as the failing call set it). */
void te_error_hop(const char *func, const char *file, int line);
/* A deferred error: held for the thread's next te_error_deferred_take
 * (which sets and returns it), dropped by any te_error_set before. */
void te_error_defer(tecore_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
int te_error_deferred(void);
tecore_result_t te_error_deferred_take(void);

#define TE_ERR(code, ...) te_error_set((code), __FILE__, __LINE__, __VA_ARGS__)

/* Argument check: returns TECORE_ERR_INVALID naming the function and argument. */
#define TE_ARG(cond, ...)                                                      \
  do {                                                                         \
    if (!(cond)) return te_error_set(TECORE_ERR_INVALID, __FILE__, __LINE__,   \
                                     __VA_ARGS__);                             \
  } while (0)

/* Propagates a failure, logging the hop at TRACE. */
#define TE_CHECK(call)                                                         \
  do {                                                                         \
    tecore_result_t te_r_ = (call);                                            \
    if (te_r_ != TECORE_SUCCESS) {                                             \
      te_error_hop(__func__, __FILE__, __LINE__);                              \
      return te_r_;                                                            \
    }                                                                          \
  } while (0)

/* Stores a failure in res and jumps to the one cleanup label. */
#define TE_CHECK_GOTO(call, res, label)                                        \
  do {                                                                         \
    (res) = (call);                                                            \
    if ((res) != TECORE_SUCCESS) {                                             \
      te_error_hop(__func__, __FILE__, __LINE__);                              \
      goto label;                                                              \
    }                                                                          \
  } while (0)

/* ---- logging (errno is preserved) ---------------------------------------- */
#define TE_LOG_ERROR(sub, ...) tecore_log(TECORE_LOG_ERROR, (sub), __FILE__, __LINE__, __VA_ARGS__)
#define TE_WARN(sub, ...) tecore_log(TECORE_LOG_WARN, (sub), __FILE__, __LINE__, __VA_ARGS__)
#define TE_INFO(sub, ...) tecore_log(TECORE_LOG_INFO, (sub), __FILE__, __LINE__, __VA_ARGS__)
#define TE_TRACE(sub, ...) tecore_log(TECORE_LOG_TRACE, (sub), __FILE__, __LINE__, __VA_ARGS__)

/* ---- tunables --------------------------------------------------------------
 * TE_PARAM_INT(var, "TECORE_X", def, lo, hi, "help") defines a static
 * tunable registered when the library loads (so te-info -e lists it before
 * use); read it with tecore_tunable_int(&var).  The public macros of
 * te/tunable.h under libtecore's names; the _RENAMED forms keep a
 * deprecated former name readable for one release. */
#define TE_PARAM_INT(var, envname, def, lo, hi, helptext)                      \
  TECORE_TUNABLE_INT(var, envname, def, lo, hi, helptext)
#define TE_PARAM_STR(var, envname, def, choicelist, helptext)                  \
  TECORE_TUNABLE_STR(var, envname, def, choicelist, helptext)
#define TE_PARAM_INT_RENAMED(var, envname, oldname, def, lo, hi, helptext)     \
  TECORE_TUNABLE_INT_RENAMED(var, envname, oldname, def, lo, hi, helptext)

/* ---- kernel tables -----------------------------------------------------------
 * TE_KERNEL_TABLE(fn, "libtecore/x", defs, fatbin, fatbin_bytes) defines
 * `static int fn(void)`, the first id of a kernel family's table.  The
 * table is registered once, when the library loads (a constructor), so the
 * backend loads its code at init and no launch ever has to: a code load
 * waits for streams blocked on a stream memory op and would deadlock there
 * (kernel.c's backend-ready hook).  fatbin may be NULL (vdev-only table). */
#define TE_KERNEL_TABLE(fn, modname, defs, fatbin_ptr, fatbin_size)            \
  TE_KERNEL_TABLE_ALIGNED(fn, modname, defs, NULL, fatbin_ptr, fatbin_size)
/* The same with aligns: a struct te_kalign for each entry of defs (TE_KALIGN
 * of the same parameter list, kernels/common/kparams.h), NULL for none; its
 * length is checked against defs' at compile time. */
#define TE_KERNEL_TABLE_ALIGNED(fn, modname, defs, aligns, fatbin_ptr, fatbin_size) \
  static struct tecore_kernel_table fn##_table_ = {                            \
      .module = modname, .count = TE_ARRAY_SIZE(defs), .kernels = defs};       \
  static int fn##_id_ = -1;                                                    \
  static pthread_once_t fn##_once_ = PTHREAD_ONCE_INIT;                        \
  static void fn##_register_(void) {                                           \
    fn##_table_.fatbin = (fatbin_ptr);                                         \
    fn##_table_.fatbin_bytes = (fatbin_size);                                  \
    if (tecore_kernel_table_register(&fn##_table_, &fn##_id_) != TECORE_SUCCESS) \
      fn##_id_ = -1;                                                           \
    else                                                                       \
      te_kernel_table_set_align(fn##_id_, fn##_table_.count, (aligns));        \
  }                                                                            \
  static int fn(void) {                                                        \
    pthread_once(&fn##_once_, fn##_register_);                                 \
    return fn##_id_;                                                           \
  }                                                                            \
  __attribute__((constructor)) static void fn##_at_load_(void) { (void)fn(); }

/* TE_KERNEL_TABLE_FATBIN(fn, "libtecore/<x>", defs, x): the same for a
 * family whose CUDA code is kernels/<x>.cu, embedded by fatbins.S as te_fatbin_x
 * (declared here, so no family repeats the block; NULL in a build without
 * CUDA, where the table is vdev-only). */
#ifdef TE_HAVE_CUDA
#define TE_FATBIN_DECL_(stem) \
  extern const unsigned char te_fatbin_##stem[], te_fatbin_##stem##_end[];
#define TE_FATBIN_PTR_(stem) te_fatbin_##stem
#define TE_FATBIN_BYTES_(stem) ((size_t)(te_fatbin_##stem##_end - te_fatbin_##stem))
#else
#define TE_FATBIN_DECL_(stem)
#define TE_FATBIN_PTR_(stem) NULL
#define TE_FATBIN_BYTES_(stem) 0
#endif
#define TE_KERNEL_TABLE_FATBIN(fn, modname, defs, stem) \
  TE_FATBIN_DECL_(stem)                                 \
  TE_KERNEL_TABLE(fn, modname, defs, TE_FATBIN_PTR_(stem), TE_FATBIN_BYTES_(stem))
#define TE_KERNEL_TABLE_FATBIN_ALIGNED(fn, modname, defs, aligns, stem)                    \
  TE_FATBIN_DECL_(stem)                                                                   \
  _Static_assert(TE_ARRAY_SIZE(aligns) == TE_ARRAY_SIZE(defs), #aligns " and " #defs     \
                 " differ in length");                                                    \
  TE_KERNEL_TABLE_ALIGNED(fn, modname, defs, aligns, TE_FATBIN_PTR_(stem),                \
                          TE_FATBIN_BYTES_(stem))

/* tecore_kernel_launch with TECORE_LAUNCH_PDL unless TECORE_PDL=0: only
 * for kernels whose first statement is te_pdl_enter (kernels/pdl.cuh). */
tecore_result_t te_kernel_launch_pdl(int id, const struct tecore_launch_cfg *cfg,
                                     void *const *args, tecore_stream_t stream);
/* Kernel ids first .. first+count-1 need the pointer alignments in
 * aligns[0 .. count) (kernel.c; aligns has static storage; NULL: none). */
struct te_kalign;
void te_kernel_table_set_align(int first, unsigned count, const struct te_kalign *aligns);
/* TECORE_ERR_INVALID naming who, the kernel, the parameter and the
 * alignment when a nonzero pointer argument is less aligned than its
 * kernel needs. */
tecore_result_t te_kernel_check_align(int id, void *const *args, const char *who);
/* Puts a node of kernel id (cfg, args) in memset or memcpy node node's
 * place in graph, keeping its edges (the backend's graph_node_to_kernel);
 * *out is the new node (graph_memset.c). */
tecore_result_t te_kernel_node_replace(int id, tecore_graph_t graph, tecore_graph_node_t node,
                                       const struct tecore_launch_cfg *cfg, void *const *args,
                                       tecore_graph_node_t *out);
/* te_memset's and te_copy's registry ids, -1 when their table did not
 * register (elementwise.c). */
int te_memset_kernel_id(void);
int te_copy_kernel_id(void);
/* A 2-D array of 4-byte elements copied between strides (in elements),
 * zeros where the destination's extent passes the source's
 * (te_copy2d_u32, kernels/elementwise.cu), queued on stream. */
struct te_copy2d {
  tecore_devptr_t dst, src;
  size_t drows, dcols, srows, scols;
  size_t dsi, dsj, ssi, ssj;
};
tecore_result_t te_copy2d_u32(const struct te_copy2d *c, tecore_stream_t stream);
/* The same copy done by the host on host-addressable memory: the rule the
 * kernel and its vdev twin follow (vdev's reference GEMM uses it too). */
static inline void te_copy2d_on_host(const struct te_copy2d *c) {
  uint32_t *dst = (uint32_t *)(uintptr_t)c->dst;
  const uint32_t *src = (const uint32_t *)(uintptr_t)c->src;
  for (size_t i = 0; i < c->drows; i++)
    for (size_t j = 0; j < c->dcols; j++)
      dst[i * c->dsi + j * c->dsj] = i < c->srows && j < c->scols ? src[i * c->ssi + j * c->ssj] : 0u;
}

/* A host copy of n bytes that may overlap (what vdev's memcpy and copy
 * kernel do): memcpy when the ranges are apart, memmove only when they
 * overlap.  ASan's memmove is a byte loop; copies through it were most of
 * some sanitizer suites' time. */
static inline void te_host_move(void *dst, const void *src, size_t n) {
  uintptr_t d = (uintptr_t)dst, s = (uintptr_t)src;
  if (n == 0 || d == s) return;
  if (d + n <= s || s + n <= d) memcpy(dst, src, n);
  else memmove(dst, src, n);
}

/* ---- the vdev memory checker, for the layers above the ops table ----------
 * te_dev_checks_on: 1 when the backend is vdev with TECORE_VDEV_CHECK on,
 * or cuda with TECORE_CUDA_CHECK=1 (dev_check.c).  te_dev_check_range:
 * then TECORE_ERR_ILLEGAL_ADDRESS naming fn, what and the address when
 * [p, p+bytes) is not inside one live allocation (the driver's address
 * range on cuda); else TECORE_SUCCESS. */
int te_dev_checks_on(void);
tecore_result_t te_dev_check_range(tecore_devptr_t p, size_t bytes, const char *fn,
                                   const char *what);
/* The same, reported later: the thread's next kernel launch fails with it
 * (after the caller's own argument checks), through te_error_defer; any
 * error set on the thread first drops it. */
void te_dev_check_range_later(tecore_devptr_t p, size_t bytes, const char *fn, const char *what);
/* For a call whose spans conflict: 1, with "<span>: the shape exceeds the
 * buffer ..." in msg, when one of s[0..n) runs past the allocation it
 * starts in (any backend, the registry's answer); else 0, msg untouched. */
struct te_span;
int te_span_past_buffer(const struct te_span *s, size_t n, char *msg, size_t len);

/* ---- status words (status_word.c) --------------------------------------------
 * A caller's uint64_t in mapped host memory (tecore_mem_alloc_host) that
 * kernels write when they meet device-resident input out of bounds.
 * te_status_word_arg: *d, the device address of a call's args->status
 * once it is checked to be 8-byte aligned mapped host memory
 * (TECORE_ERR_INVALID otherwise; *d 0 when status is NULL), then the
 * report an earlier call left, formatted by err, fails this call.  te_status_word_check: the public *_check calls (the
 * stream drained, then the report).  err gives success for 0, else the
 * error naming what w holds, "met" by when. */
typedef tecore_result_t (*te_status_err_fn)(uint64_t w, const char *fn, const char *when);
tecore_result_t te_status_word_arg(uint64_t *status, te_status_err_fn err, tecore_devptr_t *d,
                                   const char *fn);
tecore_result_t te_status_word_check(uint64_t *status, tecore_stream_t stream,
                                     te_status_err_fn err, const char *fn);

/* ---- live handles of heap objects ---------------------------------------------
 * te_handle_add, te_handle_del, te_handle_live: the registry that
 * libtegraph uses too (common/te_handles.h, common/handles.c), libtecore's
 * own instance. */
#include "te_handles.h"

/* ---- tecore_fini (fini.c) ----------------------------------------------------
 * te_finished: 1 once tecore_fini has begun stopping the backend (calls
 * that would start a thread or reach the device then fail with
 * TECORE_ERR_NOT_INITIALIZED).  The *_fini functions free one part's
 * process-wide state; fini.c calls them in order, once. */
int te_finished(void);         /* device/ops.c */
void te_device_fini(void);      /* device/ops.c: the backend (te_finished from then on) */
void te_tunables_fini(void);    /* tunable.c: strings read from the environment */
void te_log_fini(void);         /* log.c: closes TE_DEBUG_FILE */

/* ---- misc ------------------------------------------------------------------ */
/* Monotonic nanoseconds. */
uint64_t te_now_ns(void);
/* 1 when the variable is set to "0" (for NCCL's NCCL_NVLS_ENABLE, which is
 * not ours to register). */
int te_env_is_zero(const char *name);
/* TECORE_ERR_DISABLED naming the variable (NCCL_NVLS_ENABLE=0 or
 * TECOMM_NVLS_ENABLE=0) that forbids NVLink multicast, else success
 * (multicast_guard.c). */
tecore_result_t te_multicast_allowed(const char *fn);

#endif
