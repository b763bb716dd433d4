/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_lv.h -- the verbs level's state (verbs_comm.c, verbs_hier.c),
 * reached through c->lv[TC_LV_VERBS]: this rank's endpoint, the
 * service-engine jobs that drive its allreduces and their page-locked
 * staging; private to the level's files (and the hierarchical all-gather's
 * entry, for coll.c). */
#ifndef TC_VERBS_LV_H
#define TC_VERBS_LV_H

#include "level.h"
#include "verbs_priv.h"

struct tc_vjob;
struct tc_vhost;
struct tc_verbs_lv {
  struct tc_vb *vb;          /* the endpoint, or NULL (lv_why says why) */
  struct tc_vjob *jobs;      /* service-engine jobs, one per shape */
  struct tc_vhost *hosts;    /* page-locked staging, newest first */
};
#define VL(c) ((struct tc_verbs_lv *)(c)->lv[TC_LV_VERBS])

/* The hierarchical all-gather (verbs_hier.c), which coll.c runs: the
 * node's own all-gather is coll.c's, handed down as a function so that
 * the level never calls up into it.  gather: an all-gather of count
 * elements of dtype a rank over the node-local group g (send and recv as
 * tecomm_allgather's). */
typedef tecomm_result_t (*tc_group_gather_fn)(struct tecomm_comm *g, tecore_devptr_t send,
                                              tecore_devptr_t recv, size_t count,
                                              tecore_dtype_t dtype, tecore_stream_t stream,
                                              const char *fn);
/* k's all-gather on a hierarchical verbs communicator (c->leader >= 0):
 * gather in the node, the leaders' all-gather over verbs, the result
 * spread in the node; rank r's block lands at r * count whatever the
 * node layout, bytes moved untouched. */
tecomm_result_t tc_hier_allgather(struct tecomm_comm *c, const struct tc_call *k,
                                  tc_group_gather_fn gather);

#endif
