/* SPDX-License-Identifier: Apache-2.0 */
/* vote.c -- the collective verdicts every rank must reach together: a
 * vote with the first "no"'s reason, a count of ranks with a flag, every
 * rank's result code, and the barrier a bootstrap builds from its
 * allgather.  Each is one allgather over a bootstrap, so
 * every rank computes the same answer from the same bytes. */
#include "comm_priv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct vote_msg {
  int32_t ok;
  char why[252];
};

tecomm_result_t tc_vote(struct tc_boot *b, int ok, const char *why, int *all_ok, char *out,
                        size_t outlen) {
  struct vote_msg mine, *all = calloc((size_t)b->nranks, sizeof mine);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm: out of host memory");
  memset(&mine, 0, sizeof mine);
  mine.ok = ok != 0;
  snprintf(mine.why, sizeof mine.why, "%s", ok ? "" : why ? why : "failed");
  tecomm_result_t r = b->allgather(b, &mine, all, sizeof mine);
  *all_ok = 1;
  for (int i = 0; r == TECOMM_SUCCESS && i < b->nranks; i++)
    if (!all[i].ok) {
      *all_ok = 0;
      snprintf(out, outlen, "rank %d: %.*s", i, (int)sizeof all[i].why - 1, all[i].why);
      break;
    }
  free(all);
  return r;
}

/* Collective over xchg: each rank's count of ranks with flag set. */
tecomm_result_t tc_count_all(struct tc_boot *b, int flag, int *count) {
  int32_t mine = flag != 0, *all = malloc((size_t)b->nranks * sizeof *all);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm: out of host memory");
  tecomm_result_t r = b->allgather(b, &mine, all, sizeof mine);
  *count = 0;
  for (int i = 0; r == TECOMM_SUCCESS && i < b->nranks; i++) *count += all[i] != 0;
  free(all);
  return r;
}

/* Collective over xchg: every rank's code (0: success), so that every
 * rank can say the same thing of a failure; *nfail ranks failed, the
 * first of them *first with code *first_code. */
tecomm_result_t tc_gather_codes(struct tc_boot *b, int32_t code, int *nfail, int *first,
                                    int32_t *first_code) {
  int32_t *all = malloc((size_t)b->nranks * sizeof *all);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm: out of host memory");
  tecomm_result_t r = b->allgather(b, &code, all, sizeof code);
  *nfail = 0;
  *first = -1;
  for (int i = 0; r == TECOMM_SUCCESS && i < b->nranks; i++)
    if (all[i] != 0 && (*nfail)++ == 0) {
      *first = i;
      *first_code = all[i];
    }
  free(all);
  return r;
}

tecomm_result_t tc_boot_barrier(struct tc_boot *b) {
  unsigned char one = 1, *all = malloc((size_t)b->nranks);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "bootstrap barrier: out of host memory");
  tecomm_result_t r = b->allgather(b, &one, all, 1);
  free(all);
  return r;
}
