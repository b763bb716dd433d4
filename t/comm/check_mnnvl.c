/* SPDX-License-Identifier: Apache-2.0 */
/* check_mnnvl.c -- the multi-node NVLink level (MNNVL), ranks as forked
 * processes (t/lib/comm_ranks.h), 2, 4 and 8 ranks:
 *   - ranks given different vdev node ids (TECOMM_VDEV_NODE): describe
 *     says several hosts and MNNVL on, and the table picks it; the Lamport
 *     allreduce over workspaces imported from fabric handles, SUM and MAX,
 *     plain and fused (residual add + RMSNorm + FP8 E4M3, delayed
 *     scaling), against float64 with the tolerances of t/lib/link_checks.h;
 *     the same bits on every rank;
 *   - a call larger than the Lamport buffers is refused (no NCCL on vdev).
 * On cuda (TE_DEVICE=cuda) the vdev node ids mean nothing: the cases are
 * skipped and say so.  MNNVL failing on one rank, and the chain below it:
 * t/comm/check_nvls.c (tcase "chain"). */
#include "link_checks.h"

/* ---- MNNVL ------------------------------------------------------------------------ */

static void rank_mnnvl(int rank, int n, void *arg) {
  (void)arg;
  char v[16];
  snprintf(v, sizeof v, "%d", rank); /* every rank on a node of its own */
  setenv("TECOMM_VDEV_NODE", v, 1);
  tecomm_comm_t c = tc_rank_comm(rank, n);
  tecore_stream_t s;
  RK_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  char d[4096];
  describe(c, 4096, d, sizeof d);
  RK_ASSERT(strstr(d, "several hosts") && strstr(d, "mnnvl: on") &&
                strstr(d, "choice for 4096 bytes: mnnvl"),
            "describe: %s", d);
  /* the chain's line comes from the level table (each row's text where
   * its hosts say it stands); lamport asked by name across nodes goes to
   * the row that claims it, mnnvl, whose refusal names it */
  RK_ASSERT(strstr(d, "\nchain: mnnvl (lamport) -> nccl -> verbs\n"), "describe: %s", d);
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "algorithm lamport across nodes cannot run",
            tecomm_allreduce_algo(c, 64, 64, (size_t)64 << 20, TECORE_DTYPE_F32, TECOMM_SUM,
                                  TECOMM_ALGO_LAMPORT, s));
  uint64_t salt = 900;
  for (size_t k = 0; k < sizeof dtypes / sizeof dtypes[0]; k++, salt += 2) {
    plain_case(c, s, rank, n, TECOMM_ALGO_AUTO, dtypes[k], TECOMM_SUM, 1001, salt);
    plain_case(c, s, rank, n, TECOMM_ALGO_MNNVL, dtypes[k], TECOMM_MAX, 37, salt + 1);
  }
  fused_case(c, s, rank, n, TECOMM_ALGO_MNNVL, TECORE_DTYPE_BF16, 2, 512, salt++);
  /* past the Lamport buffers nothing else runs here (no NCCL on vdev) */
  RK_EXPECT(TECOMM_ERR_NOT_SUPPORTED, "larger than the Lamport buffers",
            tecomm_allreduce_algo(c, 64, 64, (size_t)64 << 20, TECORE_DTYPE_F32, TECOMM_SUM,
                                  TECOMM_ALGO_MNNVL, s));
  RK_CORE(tecore_stream_destroy(s));
  RK_OK(tecomm_comm_destroy(c));
}

START_TEST(mnnvl_lamport_across_vdev_nodes) {
  static const int ranks[] = {2, 4, 8};
  if (!tc_on_vdev()) {
    printf("# MNNVL needs several nodes: vdev plays them; not run on %s\n",
           tc_run_backend);
    return;
  }
  tc_run_ranks(ranks[_i], rank_mnnvl, NULL, 110);
  tc_expect_same_digest(ranks[_i], "MNNVL results");
  tc_shm_release();
}
END_TEST

static Suite *mnnvl_suite(void) {
  setenv("TECORE_VDEV_DEVICES", "8", 0);
  (void)tc_on_vdev();
  Suite *s = suite_create("comm_mnnvl");
  TCase *tc = te_tcase(s, "mnnvl", 0);
  tcase_add_loop_test(tc, mnnvl_lamport_across_vdev_nodes, 0, 3);
  return s;
}

TE_TEST_MAIN(mnnvl_suite, TE_TEST_DEVICE)
