/* testfail.c -- TECOMM_TEST_FAIL: for tests only, makes one link of the
 * fallback chain fail on chosen ranks, so a test can show that every rank
 * lands on the same next link (libtecomm(7) lists the links).
 * SPDX-License-Identifier: Apache-2.0
 *
 * The value is a comma-separated list of link:rank, e.g.
 * "nvls-bind:1,mnnvl:0"; the rank is the rank in the communicator being
 * made.  Links: nvls (the availability check), nvls-bind (binding the
 * member, after the multicast object exists), mnnvl (the fabric export),
 * mnnvl-hang (the fabric import stalls past TECOMM_MNNVL_TIMEOUT), ipc (the
 * pool and workspace allocations), stage (a staging segment past the pool,
 * allreduce.c), nccl (the rank reports NCCL unusable in the capability
 * exchange, as when libnccl.so.2 does not load there), nccl-init (vdev's
 * NCCL: the rank stalls inside ncclCommInitRank, nccl_vdev.c), nccl-deaf
 * (vdev's NCCL: the rank's collectives notice no dead peer and no timeout,
 * only an abort, as a real NCCL's kernels may). */
#include "comm_priv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

TECORE_TUNABLE_STR(tc_tun_test_fail, "TECOMM_TEST_FAIL", "", NULL,
                   "tests only: link:rank[,link:rank...] makes that link of the fallback chain "
                   "fail on that rank (links: nvls, nvls-bind, mnnvl, mnnvl-hang, ipc, stage, nccl, "
                   "nccl-init, nccl-deaf)")

int tc_test_fail(const char *link, int rank) {
  const char *v = tecore_tunable_str(&tc_tun_test_fail);
  size_t n = strlen(link);
  while (v && *v) {
    const char *end = strchr(v, ',');
    size_t len = end ? (size_t)(end - v) : strlen(v);
    if (len > n && strncmp(v, link, n) == 0 && v[n] == ':' && atoi(v + n + 1) == rank) {
      TC_INFO("tecomm: rank %d: TECOMM_TEST_FAIL fails link %s here", rank, link);
      return 1;
    }
    v = end ? end + 1 : NULL;
  }
  return 0;
}
