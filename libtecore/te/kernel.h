/* SPDX-License-Identifier: Apache-2.0 */
/* te/kernel.h -- kernels by id, and the table through which libraries add theirs.
 *
 * A kernel exists twice: in a fatbin (the cuda backend loads it with
 * cuLibraryLoadData and launches it with cuLaunchKernelEx) and as a C
 * function (the vdev backend calls it on the stream's worker thread).
 * libtecore registers its own table at init; libtegraph and libtecomm
 * register theirs with tecore_kernel_table_register, the way a verbs
 * provider registers its ops.  The parameter sizes in a definition are
 * what lets the vdev backend capture a launch by value and what lets
 * libtegraph rewrite a captured node's pointer parameters in place. */
#ifndef TE_KERNEL_H
#define TE_KERNEL_H

#include <stddef.h>
#include <stdint.h>
#include <te/device.h>
#include <te/deprecated.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TECORE_KERNEL_MAX_PARAMS 24

/* param_is_ptr values.  A pointer parameter is 8 bytes.  The vdev backend
 * checks each one at launch against its allocation registry: it must point
 * inside a live allocation, or be 0 when the kernel allows that (an
 * optional output). */
#define TECORE_KERNEL_PTR 1          /* a device pointer, 0 allowed */
#define TECORE_KERNEL_PTR_NONNULL 2  /* a device pointer that is never 0 */

/* struct tecore_launch_cfg (grid, block, dynamic shared bytes) is in
 * te/device.h, where graph nodes report it too. */

/* A vdev implementation: runs the whole grid.  args[i] points to parameter i. */
typedef void (*tecore_vdev_kernel_fn)(const struct tecore_launch_cfg *cfg, void *const *args);

struct tecore_kernel_def {
  const char *name;                       /* extern "C" symbol in the fatbin */
  tecore_vdev_kernel_fn vdev;             /* C implementation (NULL: cuda only) */
  unsigned nparams;
  uint16_t param_size[TECORE_KERNEL_MAX_PARAMS];
  uint8_t param_is_ptr[TECORE_KERNEL_MAX_PARAMS];  /* TECORE_KERNEL_PTR* or 0 */
};

struct tecore_kernel_table {
  const char *module;                     /* e.g. "libtecore/fill" */
  const void *fatbin;                     /* NULL when built without CUDA */
  size_t fatbin_bytes;
  unsigned count;
  const struct tecore_kernel_def *kernels;
};

/* Registers a table; its kernels get ids *first_id .. *first_id+count-1.
 * The table must outlive the process (static storage).  Registering the
 * same table twice returns the same ids. */
tecore_result_t tecore_kernel_table_register(const struct tecore_kernel_table *table,
                                             int *first_id);
/* The id of a kernel by symbol name. */
tecore_result_t tecore_kernel_find(const char *name, int *id);
/* The definition behind an id (for parameter layouts). */
tecore_result_t tecore_kernel_get_def(int id, const struct tecore_kernel_def **def);
#if TE_DEPRECATED_NAMES_VISIBLE
/* Deprecated former name of tecore_kernel_get_def (te/deprecated.h). */
tecore_result_t tecore_kernel_def(int id, const struct tecore_kernel_def **def)
    TE_DEPRECATED("use tecore_kernel_get_def");
#endif
/* Launches kernel id on stream (captured when the stream captures).
 * args[i] points to a value of param_size[i] bytes. */
tecore_result_t tecore_kernel_launch(int id, const struct tecore_launch_cfg *cfg,
                                     void *const *args, tecore_stream_t stream);

/* flags of tecore_kernel_launch_ex.
 * TECORE_LAUNCH_PDL: programmatic dependent launch (cuda, sm_90 and newer:
 * CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION).  The kernel may
 * start while the stream's previous kernel still runs (once every block of
 * that one has run griddepcontrol.launch_dependents, or ended); it must
 * execute griddepcontrol.wait before it reads anything earlier work wrote
 * and before it writes anything earlier work reads.  A kernel that does
 * not is wrong under this flag.  Captured, the dependency becomes a
 * programmatic graph edge.  Older GPUs and vdev run an ordinary launch. */
#define TECORE_LAUNCH_PDL 0x1u
#define TECORE_LAUNCH_FLAGS_ALL_ 0x1u /* every flag this version knows */
/* tecore_kernel_launch with flags (TECORE_LAUNCH_*; 0 is
 * tecore_kernel_launch).  An unknown flag bit is TECORE_ERR_INVALID. */
tecore_result_t tecore_kernel_launch_ex(int id, const struct tecore_launch_cfg *cfg,
                                        void *const *args, unsigned flags,
                                        tecore_stream_t stream);

#ifdef __cplusplus
}
#endif
#endif
