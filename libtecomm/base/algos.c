/* SPDX-License-Identifier: Apache-2.0 */
/* algos.c -- the algorithm list's names and mappings (algos.h), generated
 * from TC_ALGOS.  In the kernels' convenience library, so that their
 * messages name a protocol as the public API names the algorithm. */
#include "algos.h"
#include <string.h>

#define TC_AK_NONE TC_AR_KERNEL_NONE
#define TC_AK_ONESHOT TC_AR_ONESHOT
#define TC_AK_TWOSHOT TC_AR_TWOSHOT
#define TC_AK_LAMPORT TC_AR_LAMPORT
#define TC_AK_NVLS TC_AR_NVLS
#define TC_AK_CE TC_AR_CE

/* the list is the public enum, in order */
#define TC_ALGO_ORDER_(id, name, kernel, at, clobbers) TC_ALGO_ROW_##id,
enum { TC_ALGOS(TC_ALGO_ORDER_) TC_ALGO_ROWS_ };
#define TC_ALGO_SAME_(id, name, kernel, at, clobbers)                   \
  _Static_assert((int)TECOMM_ALGO_##id == (int)TC_ALGO_ROW_##id,       \
                 "TECOMM_ALGO_" #id " is not at its row of TC_ALGOS (algos.h)");
TC_ALGOS(TC_ALGO_SAME_)
_Static_assert((int)TC_ALGO_ROWS_ == (int)TECOMM_ALGO_COUNT_, "te/comm.h has algorithms TC_ALGOS lacks");

static const struct {
  const char *name;
  int kernel;
  tc_algo_at_t at;
  int clobbers;
} rows[] = {
#define TC_ALGO_ROW_(id, name, kernel, at, clobbers) {name, TC_AK_##kernel, TC_AT_##at, clobbers},
    TC_ALGOS(TC_ALGO_ROW_)};

const char *tc_algo_name(tecomm_algo_t a) {
  return (unsigned)a < TECOMM_ALGO_COUNT_ ? rows[a].name : NULL;
}

int tc_algo_by_name(const char *name) {
  for (int i = 0; name && i < TECOMM_ALGO_COUNT_; i++)
    if (strcmp(name, rows[i].name) == 0) return i;
  return -1;
}

int tc_algo_kernel(tecomm_algo_t a) {
  return (unsigned)a < TECOMM_ALGO_COUNT_ ? rows[a].kernel : TC_AR_KERNEL_NONE;
}

tc_algo_at_t tc_algo_at(tecomm_algo_t a) {
  return (unsigned)a < TECOMM_ALGO_COUNT_ ? rows[a].at : TC_AT_TABLE;
}

const char *tc_ar_kernel_name(int k) {
  for (int i = 0; i < TECOMM_ALGO_COUNT_; i++)
    if (rows[i].kernel == k) return rows[i].name;
  return "unknown";
}

/* The kernel contract's question (ar_kernels.h), answered from the list:
 * a protocol overwrites its input when an algorithm it runs does. */
int tc_ar_clobbers_input(tc_ar_algo_t k) {
  for (int i = 0; i < TECOMM_ALGO_COUNT_; i++)
    if (rows[i].kernel == (int)k && rows[i].clobbers) return 1;
  return 0;
}
