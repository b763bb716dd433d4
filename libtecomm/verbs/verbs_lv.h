/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_lv.h -- the verbs level's state (verbs_comm.c, verbs_hier.c),
 * reached through c->lv[TC_LV_VERBS]: this rank's endpoint, the
 * service-engine jobs that drive its allreduces and their page-locked
 * staging; private to the level's files. */
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
  /* the hierarchy (verbs_hier.c): this node's ranks, a child
   * communicator made through c->groups, or NULL (flat); this rank is the
   * node's leader (1), another of its ranks (0), or -1: not hierarchical */
  struct tecomm_comm *local;
  int leader;
  int gdr;                   /* GPUDirect RDMA could be used (it is not yet: staging) */
  char gdr_why[160];
};
#define VL(c) ((struct tc_verbs_lv *)(c)->lv[TC_LV_VERBS])

/* ---- verbs_hier.c ------------------------------------------------------------ */
/* k's all-gather on a hierarchical verbs communicator (VL(c)->leader >= 0):
 * gather in the node (the node group's all-gather, c->groups, handed
 * down so that the level never calls up into coll.c), the leaders'
 * all-gather over verbs, the result spread in the node; rank r's block
 * lands at r * count whatever the node layout, bytes moved untouched. */
tecomm_result_t tc_hier_allgather(struct tecomm_comm *c, const struct tc_call *k);

/* ---- verbs_staged.c ---------------------------------------------------------- */
/* The verbs allreduce of send into recv on this rank's endpoint, staged
 * through page-locked memory; the hierarchy's leaders run their
 * inter-node step with it. */
tecomm_result_t tc_verbs_staged(struct tecomm_comm *c, tecore_devptr_t send, tecore_devptr_t recv,
                                size_t count, tecore_dtype_t dtype, tecomm_op_t op,
                                tecore_stream_t stream, const char *fn);
/* The verbs all-gather among the endpoint's members (every rank flat, or
 * the node leaders under the hierarchy): bytes of send from every member
 * into recv (members * bytes), the ring's all-gather over page-locked
 * staging. */
tecomm_result_t tc_verbs_staged_gather(struct tecomm_comm *c, tecore_devptr_t send,
                                       tecore_devptr_t recv, size_t bytes, tecore_stream_t stream,
                                       const char *fn);
/* Its jobs and staging, freed (the verbs level's close). */
void tc_verbs_staged_free(struct tecomm_comm *c);

/* Collective over c->xchg: the node-local group and whether every node
 * can take part; sets VL(c)->local (NULL: flat verbs over every rank) and
 * *member (this rank opens verbs: a node leader, or every rank when
 * flat). */
tecomm_result_t tc_hier_open(struct tecomm_comm *c, int *member);
/* The node-local group's health, named as the hierarchy's. */
tecomm_result_t tc_hier_ready(struct tecomm_comm *c, const char *fn, int check_device);
int tc_hier_failed_peer(struct tecomm_comm *c);
/* recv = allreduce(send): reduce in the node, leaders over verbs, broadcast. */
tecomm_result_t tc_hier_allreduce(struct tecomm_comm *c, tecore_devptr_t send,
                                  tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                  tecomm_op_t op, tecore_stream_t stream, const char *fn);
/* GPUDirect RDMA: whether the device memory could be registered (sets
 * VL(c)->gdr and gdr_why). */
void tc_gdr_detect(struct tecomm_comm *c);

#endif
