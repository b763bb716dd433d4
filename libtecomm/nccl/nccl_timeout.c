/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_timeout.c -- how long NCCL's init may take: read by the level's
 * open (nccl_level.c) and by vdev's NCCL (nccl_vdev.c), in a file of its
 * own so that neither calls the other. */
#include "nccl.h"

TECORE_TUNABLE_INT(tc_tun_nccl_init_timeout, "TECOMM_NCCL_INIT_TIMEOUT", 0, 0, 86400000,
                   "milliseconds NCCL's (non-blocking) init may take before every rank gives it "
                   "up and takes the next link; 0: TECOMM_TIMEOUT.  A large job's NCCL init can "
                   "take longer than the device-side waits should")

int64_t tc_nccl_init_timeout_ms(void) {
  int64_t t = tecore_tunable_int(&tc_tun_nccl_init_timeout);
  return t > 0 ? t : tc_timeout_ms();
}
