/* fbf_mem_range_shim.c -- SPDX-License-Identifier: Apache-2.0
 * For t/lint/fails-before-fix.sh only: a stand-in for tecore_mem_range on trees
 * from before it existed, so that today's t/core/check_bounds links there.  It
 * answers as if no address were known (the state before the fix: nothing
 * could tell where an allocation ends).  The tests of tecore_mem_range
 * itself fail against it, by design; the others never call it on vdev. */
#include <te/core.h>

tecore_result_t tecore_mem_range(tecore_devptr_t ptr, tecore_devptr_t *base, size_t *bytes);

tecore_result_t tecore_mem_range(tecore_devptr_t ptr, tecore_devptr_t *base, size_t *bytes) {
  (void)ptr;
  (void)base;
  (void)bytes;
  tecore_set_error("tecore_mem_range: not in this tree (fails-before-fix shim)");
  return TECORE_ERR_NOT_SUPPORTED;
}
