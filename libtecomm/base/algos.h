/* SPDX-License-Identifier: Apache-2.0 */
/* algos.h -- the one list of libtecomm's allreduce algorithms.  Every
 * name (tecomm_algo_name, tecomm_algo_parse, TECOMM_ALGO's choices and
 * messages), every mapping (algorithm -> kernel protocol, -> where it
 * runs, whether it overwrites its input) and the kernel protocols' names
 * in messages come from it.  A new algorithm is one row here, its
 * tecomm_algo_t value in te/comm.h (asserted to agree, in select.c), and
 * its entry in libtecomm(7)'s Algorithms section and
 * tecomm_comm_describe(3)'s list (t/lint/algo-lint.sh compares them).
 *
 * X(id, name, kernel, at, clobbers):
 *   id       TECOMM_ALGO_<id>, in the public enum's order;
 *   name     its one name;
 *   kernel   the IPC kernel protocol that runs it (TC_AR_<kernel>,
 *            ar_kernels.h), NONE when no IPC kernel does (auto, NCCL,
 *            verbs);
 *   at       where it runs: TABLE (auto: the selection table), IPC (the
 *            pool or registered in-place level), NVLS (the multicast
 *            object), MNNVL (fabric mappings across nodes), NCCL, VERBS;
 *   clobbers 1 when the kernel overwrites this rank's input (two-shot
 *            reduce-scatters into it): a symmetric input is then used in
 *            place only when the caller gives it up. */
#ifndef TC_ALGOS_H
#define TC_ALGOS_H

#include <te/comm.h>
#include "ar_kernels.h"
#include "level_list.h"   /* tc_algo_at_t */

#define TC_ALGOS(X)                                \
  X(AUTO, "auto", NONE, TABLE, 0)                  \
  X(ONESHOT, "oneshot", ONESHOT, IPC, 0)           \
  X(TWOSHOT, "twoshot", TWOSHOT, IPC, 1)           \
  X(LAMPORT, "lamport", LAMPORT, IPC, 0)           \
  X(NCCL, "nccl", NONE, NCCL, 0)                   \
  X(VERBS, "verbs", NONE, VERBS, 0)                \
  X(NVLS, "nvls", NVLS, NVLS, 0)                   \
  X(NVLS_LAMPORT, "nvls-lamport", LAMPORT, NVLS, 0) \
  X(MNNVL, "mnnvl", LAMPORT, MNNVL, 0)             \
  X(CE, "ce", CE, IPC, 0)

/* No IPC kernel (the list's kernel column NONE). */
#define TC_AR_KERNEL_NONE (-1)

/* The one name of a, NULL for a value that is not an algorithm. */
const char *tc_algo_name(tecomm_algo_t a);
/* The algorithm called name, or -1. */
int tc_algo_by_name(const char *name);
/* "auto|oneshot|...": every name, for TECOMM_ALGO's choices and messages
 * (a constant: the literal "|auto|oneshot|..." past its first bar). */
#define TC_ALGO_BAR_(id, name, kernel, at, clobbers) "|" name
#define TC_ALGO_CHOICES (TC_ALGOS(TC_ALGO_BAR_) + 1)
/* The kernel protocol that runs a (tc_ar_algo_t), or
 * none does (TC_AR_KERNEL_NONE). */
int tc_algo_kernel(tecomm_algo_t a);
/* Where a runs. */
tc_algo_at_t tc_algo_at(tecomm_algo_t a);
/* The name of kernel protocol k in messages: the first algorithm's that
 * it runs ("lamport" for the Lamport kernel, also under nvls-lamport and
 * mnnvl). */
const char *tc_ar_kernel_name(int k);

#endif
