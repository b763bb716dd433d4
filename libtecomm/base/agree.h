/* SPDX-License-Identifier: Apache-2.0 */
/* agree.h -- the host agreement of allreduce calls at the NCCL and verbs
 * levels (agree.c says why it is on the host there). */
#ifndef TECOMM_AGREE_H
#define TECOMM_AGREE_H

#include "tc_internal.h"

struct tecomm_comm;

/* What every rank's call must agree on. */
struct tc_agree_call {
  size_t count;
  tecore_dtype_t dtype;
  tecomm_op_t op;
  tecomm_algo_t algo;   /* the algorithm chosen (nccl, verbs) */
  size_t hidden;        /* the fused call's row; 0: a plain allreduce */
  float eps;            /* the fused call's */
  int coll;             /* tc_coll_t: allreduce (0), reduce-scatter, all-gather */
};

/* Collective over c->xchg (every rank of c calls it for the same call):
 * TECOMM_SUCCESS when every rank's call is the same, else
 * TECOMM_ERR_MISMATCH on every rank naming the first differing field,
 * both values and the peer (c->sticky_peer), or the exchange's own
 * failure (TECOMM_ERR_TIMEOUT when a peer does not come).  Nothing when
 * TECOMM_HOST_AGREE=0 or on one rank. */
tecomm_result_t tc_agree_host(struct tecomm_comm *c, const struct tc_agree_call *call,
                              const char *fn);

/* A call refused with why (the communicator failed earlier) on c: at the
 * NCCL and verbs levels the first such call still takes part in the
 * exchange, once, saying this rank failed, so that peers waiting in
 * tc_agree_host learn it and name this rank (TECOMM_ERR_TIMEOUT) instead
 * of waiting out TECOMM_TIMEOUT; not when the failure was learnt in an
 * exchange (every rank there knows it).  Returns why, with the refusal's
 * detail kept. */
tecomm_result_t tc_agree_refused(struct tecomm_comm *c, tecomm_result_t why, const char *fn);

#endif
