/* SPDX-License-Identifier: Apache-2.0 */
/* grid.c -- what the kernel families size their grids by: the number of
 * multiprocessors of the device, read once (one wave of resident blocks
 * is that times the blocks one multiprocessor holds). */
#include "ksupport/ksupport.h"

unsigned te_sm_count(void) {
  static int cached;
  int v = __atomic_load_n(&cached, __ATOMIC_RELAXED);
  if (v > 0) return (unsigned)v;
  struct tecore_device_props p;
  v = (tecore_device_get_props(0, &p) == TECORE_SUCCESS && p.sm_count > 0) ? p.sm_count : 132;
  __atomic_store_n(&cached, v, __ATOMIC_RELAXED);
  return (unsigned)v;
}
