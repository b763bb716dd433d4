/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_hier.c -- the hierarchical allreduce across nodes: reduce inside
 * each node over IPC, allreduce among the node leaders over verbs,
 * broadcast inside each node; the hierarchical all-gather (below
 * tc_hier_allreduce); which ranks share a node; and GPUDirect RDMA for
 * the description (gpudirect.c detects it).
 *
 * Why: a flat verbs allreduce moves every rank's data through host
 * staging and the network; inside a node the IPC kernels are far faster,
 * so only one rank per node (its leader, local rank 0) needs to talk to
 * the other nodes.  On a stream, every rank of a node runs
 *   1. an allreduce of send into recv over the node's group (the IPC
 *      kernels of a child communicator, VL(c)->local, made at init);
 *   2. the leader only: the staged verbs allreduce of recv among the
 *      leaders (verbs_comm.c: host copy, service-engine job, copy back);
 *   3. a broadcast of the leader's recv over the node's group: an
 *      allreduce in which the other ranks contribute the operation's
 *      identity (0 for SUM, -inf for MAX), so the leader's bits arrive
 *      unchanged (x + 0 = x; a -0.0 comes back +0.0, the same on every
 *      rank) and the IPC kernels' own flags order it after step 2 --
 *      their waits are bounded by TECOMM_TIMEOUT like every other.
 * Every rank ends with the same bits.  The path is chosen at init when
 * the ranks span nodes, no NCCL runs on all of them and verbs opens among
 * the leaders, and every node's group reached the pool level (or NCCL);
 * otherwise verbs runs flat over every rank.  Every rank agrees
 * (allgathered facts).
 *
 * Failure.  When the leader's verbs step fails (an error completion, a
 * dead peer), its engine job aborts the node group's workspaces, so the
 * node's other ranks stop in step 3 instead of waiting for TECOMM_TIMEOUT;
 * their next call or tecomm_comm_status says so and names the leader,
 * while the leader's names the verbs peer.  Step 3 then broadcasts
 * nothing: recv keeps step 1's node sum on those ranks and NaN on the
 * leader, and the error is what the caller sees.  The other way round,
 * a leader whose node group failed (a node rank died: the IPC wait timed
 * out) does not send its partial sum on: its job sees the group's error
 * word and fails the endpoint, whose queue pairs in the error state stop
 * the other leaders, and they their nodes. */
#include "verbs_lv.h"
#include "verbs_ep.h"   /* tc_vb_fail */
#include "common/comm_ar.h"   /* TE_AR_OFF_ABORT */
#include "base/agree.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TECORE_TUNABLE_INT(tc_tun_verbs_hier, "TECOMM_VERBS_HIER", 1, 0, 1,
                   "across nodes, 1: reduce in each node over IPC and run verbs among the node "
                   "leaders only (hierarchical); 0: verbs among every rank (flat)")

/* The communicator rank of the leader of node. */
static int leader_of(const struct tecomm_comm *c, int node) {
  for (int i = 0; i < c->nranks; i++)
    if (c->node_of[i] == node) return i;
  return -1;
}

tecomm_result_t tc_hier_open(struct tecomm_comm *c, int *member) {
  *member = 1;
  VL(c)->leader = -1;
  VL(c)->local = NULL;
  if (c->all_local || !c->node_of || c->nnodes < 2 || !tecore_tunable_int(&tc_tun_verbs_hier))
    return TECOMM_SUCCESS;
  int me = 0, n = 0;
  for (int i = 0; i < c->nranks; i++)
    if (c->node_of[i] == c->node) {
      if (i == c->rank) me = n;
      n++;
    }
  /* this node's group: its own mesh and place in the chain; a failure
   * here is told to every rank below, and all go flat */
  struct tecomm_comm *lc = NULL;
  struct {
    int32_t ok, n;
  } mine = {1, n}, *all = calloc((size_t)c->nranks, sizeof mine);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  if (n > 1) {
    uint64_t mix[3] = {c->tag, 0x68696572u, (uint64_t)c->node};
    tecomm_result_t r = c->groups->make(c, tc_fnv(mix, sizeof mix, 0xcbf29ce484222325ull), me, n, 1, &lc);
    if (r != TECOMM_SUCCESS) {
      TC_WARN("tecomm: rank %d: node %d's group: %s: verbs goes flat", c->rank, c->node,
              tecore_last_error());
      lc = NULL;
      mine.ok = 0;
    } else if (lc->level != TC_LEVEL_POOL && lc->level != TC_LEVEL_NCCL) {
      TC_INFO("tecomm: node %d's group stands at %s (%s): verbs goes flat", c->node,
              tc_level_name(lc->level), lc->level_why);
      mine.ok = 0;
    }
  }
  tecomm_result_t r = c->xchg->allgather(c->xchg, &mine, all, sizeof mine);
  int ok = r == TECOMM_SUCCESS, several = 0;
  for (int i = 0; ok && i < c->nranks; i++) {
    ok = ok && all[i].ok;
    several = several || all[i].n > 1;
  }
  free(all);
  if (!ok || !several) {   /* flat: also when every node has one rank (the same thing) */
    if (lc) c->groups->free(lc);
    return r;
  }
  VL(c)->local = lc;
  VL(c)->leader = me == 0;
  *member = me == 0;
  return TECOMM_SUCCESS;
}

/* 1 when the node group's abort word is set on this rank: the leader
 * stopped the node (hier_stop_node, verbs_staged.c).  The kernels report an abort in
 * the error word only when it ends a wait; a call that starts after it
 * returns at once and reports nothing, so the word itself is read (on a
 * stream of its own, as the kernels' error word is). */
static int node_stopped(struct tecomm_comm *c) {
  uint32_t w = 0;
  tecore_stream_t s = NULL;
  if (tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s) != TECORE_SUCCESS) return 0;
  tecore_result_t r = tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&w,
                                          VL(c)->local->ws.me + TE_AR_OFF_ABORT, sizeof w, s);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(s);
  (void)tecore_stream_destroy(s);
  return r == TECORE_SUCCESS && w != 0;
}

tecomm_result_t tc_hier_ready(struct tecomm_comm *c, const char *fn, int check_device) {
  tecomm_result_t r = c->groups->ready(VL(c)->local, fn, check_device);
  if (r == TECOMM_SUCCESS && check_device && VL(c)->leader == 0 && VL(c)->local->ws.me &&
      VL(c)->local->sticky == TECOMM_SUCCESS && node_stopped(c)) {
    VL(c)->local->sticky = TECOMM_ERR_ABORTED;
    r = TC_ERR(TECOMM_ERR_ABORTED, "%s: the node's leader stopped the group", fn);
  }
  if (r == TECOMM_SUCCESS) return r;
  char d[400];
  snprintf(d, sizeof d, "%s", tecore_last_error());
  return TC_ERR(r, "%s: rank %d: node %d's ranks stopped: the inter-node allreduce failed at the "
                "node's leader, rank %d (its error names the verbs peer), or the node's group "
                "failed (%s)", fn, c->rank, c->node, leader_of(c, c->node), d);
}

/* A rank's node group stops when its leader does: the leader is the
 * peer a rank names, unless the rank is the leader (-1: the failure is
 * not its node group's, so the agreed peer or the endpoint's stands). */
int tc_hier_failed_peer(struct tecomm_comm *c) {
  const int l = leader_of(c, c->node);
  return l == c->rank ? -1 : l;
}

tecomm_result_t tc_hier_allreduce(struct tecomm_comm *c, tecore_devptr_t send,
                                  tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                  tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  struct tecomm_comm *lc = VL(c)->local;
  size_t bytes = count * tecore_dtype_size(dtype);
  /* 1: the node's sum */
  if (lc)
    TC_CHECK(c->groups->allreduce(lc, send, recv, count, dtype, op, stream, fn));
  else if (send != recv)
    TC_CORE(tecore_memcpy_async(recv, send, bytes, stream), fn);
  /* 2: the nodes' sum, among the leaders */
  if (VL(c)->leader == 1)
    TC_CHECK(tc_verbs_staged(c, recv, recv, count, dtype, op, stream, fn));
  if (!lc) return TECOMM_SUCCESS;
  /* 3: the leader's result to the node: the others bring the identity */
  if (VL(c)->leader == 0) {
    if (op == TECOMM_SUM)
      TC_CORE(tecore_memset_d8_async(recv, 0, bytes, stream), fn);
    else if (dtype == TECORE_DTYPE_F32)
      TC_CORE(tecore_memset_d32_async(recv, 0xff800000u, count, stream), fn);
    else
      TC_CORE(tecore_memset_d16_async(recv, dtype == TECORE_DTYPE_BF16 ? 0xff80u : 0xfc00u, count,
                                      stream), fn);
  }
  return c->groups->allreduce(lc, recv, recv, count, dtype, op, stream, fn);
}

/* The hierarchical all-gather.  Blocks are bytes a rank; a node's group
 * holds n ranks (local index = order among the node's ranks, which is
 * global order), the largest node maxn, so each node's share is one
 * uniform leader block of maxn * bytes (the ring wants equal blocks; a
 * smaller node's tail is padding).  Scratch: A (one leader block) then C
 * (n leader results of nnodes * maxn * bytes each).
 *   1. the node's blocks into A (the group's all-gather of send);
 *   2. the leader: the leaders' all-gather of A over verbs into C's
 *      first result (node k's share at k * maxn * bytes: leaders are
 *      members in rank order, nodes numbered by their first rank);
 *   3. C's first result to the node: the group's in-place all-gather of
 *      C (the others' results are not read: no kernel broadcasts exact
 *      bytes, an allreduce would turn -0.0 and NaN payloads);
 *   4. every rank's block from C to recv + r * bytes, runs of
 *      consecutive ranks in one copy.
 * A failure at the leader stops the node in step 3, as the allreduce's. */
static int largest_node(const struct tecomm_comm *c) {
  int maxn = 1;
  for (int k = 0; k < c->nnodes; k++) {
    int n = 0;
    for (int i = 0; i < c->nranks; i++) n += c->node_of[i] == k;
    if (n > maxn) maxn = n;
  }
  return maxn;
}

/* Where rank r's block sits in a leader result (in blocks). */
static size_t block_at(const struct tecomm_comm *c, int r, int maxn) {
  int j = 0;
  for (int i = 0; i < r; i++) j += c->node_of[i] == c->node_of[r];
  return (size_t)c->node_of[r] * (size_t)maxn + (size_t)j;
}

static tecomm_result_t spread(struct tecomm_comm *c, const struct tc_call *k,
                              tecore_devptr_t res, int maxn) {
  for (int r = 0; r < c->nranks;) {
    size_t from = block_at(c, r, maxn);
    int e = r + 1;
    while (e < c->nranks && block_at(c, e, maxn) == from + (size_t)(e - r)) e++;
    TC_CORE(tecore_memcpy_async(k->recv + (size_t)r * k->bytes, res + from * k->bytes,
                                (size_t)(e - r) * k->bytes, k->stream), k->fn);
    r = e;
  }
  return TECOMM_SUCCESS;
}

tecomm_result_t tc_hier_allgather(struct tecomm_comm *c, const struct tc_call *k) {
  struct tecomm_comm *lc = VL(c)->local;
  __typeof__(c->groups->allgather) gather = c->groups->allgather;
  const int maxn = largest_node(c), n = lc ? lc->nranks : 1, me = lc ? lc->rank : 0;
  const size_t share = (size_t)maxn * k->bytes, result = (size_t)c->nnodes * share;
  TC_CHECK(tc_agree_host(c, &(struct tc_agree_call){.count = k->count, .dtype = k->dtype,
                                                     .op = k->op, .algo = k->algo,
                                                     .coll = (int)k->coll}, k->fn));
  TC_CHECK(tc_ce_scratch_get(c, share + (size_t)n * result, k->cap, k->fn));
  const tecore_devptr_t a = c->ce_scratch, res = a + share;
  if (lc)
    TC_CHECK(gather(lc, k->send, a, k->count, k->dtype, k->stream, k->fn));
  else
    TC_CORE(tecore_memcpy_async(a, k->send, k->bytes, k->stream), k->fn);
  if (VL(c)->leader == 1) {
    int at = -1, nm = 0;
    if (VL(c) && VL(c)->vb) tc_vb_ranks(VL(c)->vb, &at, &nm);
    if (at != c->node || nm != c->nnodes)   /* the layout step 2 relies on */
      return TC_ERR(TECOMM_ERR_SYSTEM, "%s: leader %d is member %d of %d, not node %d of %d",
                    k->fn, c->rank, at, nm, c->node, c->nnodes);
    TC_CHECK(tc_verbs_staged_gather(c, a, res, share, k->stream, k->fn));
  }
  if (lc)
    TC_CHECK(gather(lc, res + (size_t)me * result, res, result, TECORE_DTYPE_E4M3, k->stream,
                    k->fn));
  return spread(c, k, res, maxn);
}

void tc_gdr_detect(struct tecomm_comm *c) {
  struct tc_verbs_lv *l = VL(c);
  if (tecomm_gpudirect(c->device, &l->gdr, l->gdr_why, sizeof l->gdr_why) != TECOMM_SUCCESS) {
    l->gdr = 0;
    snprintf(l->gdr_why, sizeof l->gdr_why, "unknown (%.120s): host staging",
             tecore_last_error());
  }
}
