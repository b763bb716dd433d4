/* SPDX-License-Identifier: Apache-2.0 */
/* nccl_level.c -- the nccl level of the fallback chain: an NCCL
 * communicator over every rank (nccl.c loads libnccl, nccl_vdev.c
 * emulates it on vdev, nccl_watch.c guards its collectives), made at init
 * only when every rank has NCCL and bounded so that no rank waits on
 * another's init.  It runs the plain allreduce as ncclAllReduce and the
 * fused one as that plus add and RMSNorm kernels, reduce-scatter and
 * all-gather as ncclReduceScatter and ncclAllGather; all are agreed on
 * the host first (agree.c): an enqueued NCCL call cannot be stopped. */
#include "nccl_lv.h"
#include "base/agree.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WHY(c) ((c)->lv_why[TC_LV_NCCL])

TECORE_TUNABLE_INT(tc_tun_nccl_blocking, "TECOMM_NCCL_BLOCKING", 0, 0, 1,
                   "1: make the NCCL communicator blocking (ncclCommInitRank: a rank stuck in "
                   "NCCL's init then holds its peers); 0: non-blocking, its init polled for at "
                   "most TECOMM_NCCL_INIT_TIMEOUT and aborted past it")

/* ncclCommInitRank on every rank, bounded: where the library has
 * ncclCommInitRankConfig the communicator is non-blocking and polled for
 * TECOMM_NCCL_INIT_TIMEOUT (TECOMM_TIMEOUT by default), then aborted, so a rank stuck inside NCCL's init (a
 * peer that never joins, a wedged transport) cannot hold the others.
 * Every rank keeps NCCL only if every rank made its communicator, so all
 * land on the same link.  Abort, not destroy, drops a made one: it never
 * waits for the peers.  split: vdev's NCCL is on ranks of several
 * machines (count_nccl). */
static tecomm_result_t setup_nccl(struct tecomm_comm *c, int split) {
  const struct tc_nccl *n = tc_nccl_get(&NL(c)->loaded);
  if (c->n_nccl != c->nranks) {
    if (!n)
      snprintf(WHY(c), sizeof WHY(c), "off (%.200s)", NL(c)->loaded);
    else if (split)
      snprintf(WHY(c), sizeof WHY(c),
               "off (vdev's NCCL joins the ranks of one machine; these span several)");
    else
      snprintf(WHY(c), sizeof WHY(c), "off (NCCL on %d of %d ranks)", c->n_nccl,
               c->nranks);
    return TECOMM_SUCCESS;
  }
  tc_nccl_uid_t id, *all = malloc((size_t)c->nranks * sizeof id);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  memset(&id, 0, sizeof id);
  int ok = 1;
  if (c->rank == 0) ok = n->GetUniqueId(&id) == 0;
  tecomm_result_t r = c->xchg->allgather(c->xchg, &id, all, sizeof id);
  if (r == TECOMM_SUCCESS) r = tc_count_all(c->xchg, ok, &c->n_nccl);
  if (r == TECOMM_SUCCESS && c->n_nccl != c->nranks)
    snprintf(WHY(c), sizeof WHY(c), "off (rank 0: ncclGetUniqueId failed)");
  if (r == TECOMM_SUCCESS && c->n_nccl == c->nranks) {
    int nr; /* an NCCL result, or -1: not complete within TECOMM_TIMEOUT */
    int bounded = n->CommInitRankConfig && !tecore_tunable_int(&tc_tun_nccl_blocking);
    if (bounded) {
      struct tc_nccl_config cf = {sizeof cf, 0xcafebeefu, 21700, 0, TC_NCCL_CONFIG_UNDEF,
                                  TC_NCCL_CONFIG_UNDEF, TC_NCCL_CONFIG_UNDEF, NULL,
                                  TC_NCCL_CONFIG_UNDEF};
      nr = n->CommInitRankConfig(&NL(c)->comm, c->nranks, all[0], c->rank, &cf);
      if (NL(c)->comm) nr = tc_nccl_wait(n, NL(c)->comm, nr, tc_nccl_init_timeout_ms());
    } else {
      nr = n->CommInitRank(&NL(c)->comm, c->nranks, all[0], c->rank);
    }
    if (nr != TC_NCCL_OK) {
      if (nr == -1)
        TC_WARN("tecomm_comm_init: rank %d of %d: ncclCommInitRank did not complete within "
                "%lld ms (TECOMM_NCCL_INIT_TIMEOUT): aborted", c->rank, c->nranks,
                (long long)tc_nccl_init_timeout_ms());
      else
        TC_WARN("tecomm_comm_init: rank %d of %d: ncclCommInitRank: %d (%s)", c->rank, c->nranks,
                nr, n->GetErrorString(nr));
      if (NL(c)->comm) (void)n->CommAbort(NL(c)->comm);
      NL(c)->comm = NULL;
    }
    int nfail = 0, bad = -1;
    int32_t code = 0;
    r = tc_gather_codes(c->xchg, nr, &nfail, &bad, &code);
    if (r == TECOMM_SUCCESS && nfail > 0) {
      if (NL(c)->comm) (void)n->CommAbort(NL(c)->comm);
      NL(c)->comm = NULL;
      c->n_nccl = 0;
      char what[128];
      if (code == -1)
        snprintf(what, sizeof what, "did not complete within %lld ms (TECOMM_NCCL_INIT_TIMEOUT)",
                 (long long)tc_nccl_init_timeout_ms());
      else
        snprintf(what, sizeof what, "%d (%s)", (int)code, n->GetErrorString(code));
      snprintf(WHY(c), sizeof WHY(c),
               "off (ncclCommInitRank failed on %d of %d ranks; rank %d: %s)", nfail, c->nranks,
               bad, what);
      if (c->rank == 0) TC_WARN("tecomm: nccl %s: every rank falls back", WHY(c));
    } else if (r == TECOMM_SUCCESS) {
      snprintf(WHY(c), sizeof WHY(c), "on (%.120s, %s init)", NL(c)->loaded,
               bounded ? "non-blocking, bounded" : "blocking");
      r = tc_nccl_open_watch(c);
    }
  }
  if (c->n_nccl != c->nranks) c->n_nccl = 0;
  free(all);
  return r;
}

/* c->n_nccl: the ranks whose NCCL can join rank 0's; 1 when vdev's NCCL
 * is on ranks of several machines (it joins the ranks of one machine,
 * vdev nodes of it too; nccl_caps). */
static int count_nccl(struct tecomm_comm *c, const struct tc_caps *all) {
  int split = 0;
  c->n_nccl = 0;
  for (int i = 0; i < c->nranks; i++) {
    int same = all[i].nccl_host == all[0].nccl_host;
    c->n_nccl += all[i].nccl != 0 && same;
    split |= all[i].nccl != 0 && !same;
  }
  return split;
}

static tecomm_result_t nccl_open(struct tecomm_comm *c, const struct tc_caps *all,
                                 tecore_stream_t st) {
  (void)st;
  struct tc_nccl_lv *l = calloc(1, sizeof *l);
  if (!l) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  c->lv[TC_LV_NCCL] = l;
  tecomm_result_t r = setup_nccl(c, count_nccl(c, all));
  if (r == TECOMM_SUCCESS && c->level == TC_LEVEL_NONE && l->comm) c->level = TC_LEVEL_NCCL;
  return r;
}

static void nccl_close(struct tecomm_comm *c) {
  if (!NL(c)) return;
  tc_nccl_close(c);
  free(NL(c));
  c->lv[TC_LV_NCCL] = NULL;
}

static tecomm_result_t nccl_health(struct tecomm_comm *c, const char *fn, int check_device) {
  (void)fn;
  if (check_device) tc_nccl_health(c);
  return TECOMM_SUCCESS;
}

static int nccl_dtype(tecore_dtype_t d) {
  return d == TECORE_DTYPE_F32 ? TC_NCCL_FLOAT32 : d == TECORE_DTYPE_F16 ? TC_NCCL_FLOAT16
                                                                          : TC_NCCL_BFLOAT16;
}

/* One NCCL collective (k->coll; allreduce when 0) of k's buffers, under
 * the communicator's lock and its watchdog.  All-gather moves bytes
 * (ncclUint8: FP8 included, never converted). */
static tecomm_result_t nccl_enqueue(struct tecomm_comm *c, const struct tc_call *k) {
  static const char *const what[] = {"ncclAllReduce", "ncclReduceScatter", "ncclAllGather"};
  const struct tc_nccl *n = tc_nccl_get(NULL);
  const void *send = (const void *)(uintptr_t)k->send;
  void *recv = (void *)(uintptr_t)k->recv;
  const int op = k->op == TECOMM_MAX ? TC_NCCL_MAX : TC_NCCL_SUM;
  TC_CHECK(tc_nccl_lock(c, k->fn));
  struct tc_nccl_op *watched = tc_nccl_watch_begin(c, k->stream);
  int r = k->coll == TC_COLL_ALLGATHER
              ? n->AllGather(send, recv, k->bytes, TC_NCCL_UINT8, NL(c)->comm, k->stream)
          : k->coll == TC_COLL_REDUCE_SCATTER
              ? n->ReduceScatter(send, recv, k->count, nccl_dtype(k->dtype), op, NL(c)->comm,
                                 k->stream)
              : n->AllReduce(send, recv, k->count, nccl_dtype(k->dtype), op, NL(c)->comm,
                             k->stream);
  r = tc_nccl_wait(n, NL(c)->comm, r, tc_timeout_ms()); /* non-blocking: may still be connecting */
  tc_nccl_watch_end(c, watched, k->stream, r == 0);
  tc_nccl_unlock(c);
  if (r == -1)
    return TC_ERR(TECOMM_ERR_TIMEOUT, "%s: %s did not complete its enqueue within "
                  "TECOMM_TIMEOUT (%lld ms)", k->fn, what[k->coll], (long long)tc_timeout_ms());
  if (r != 0) return tc_nccl_err(r, k->fn);
  return TECOMM_SUCCESS;
}

/* recv = allreduce(send) on the NCCL communicator. */
static tecomm_result_t nccl_reduce(struct tecomm_comm *c, tecore_devptr_t send,
                                   tecore_devptr_t recv, size_t count, tecore_dtype_t dtype,
                                   tecomm_op_t op, tecore_stream_t stream, const char *fn) {
  return nccl_enqueue(c, &(struct tc_call){.coll = TC_COLL_ALLREDUCE, .send = send, .recv = recv,
                                           .count = count, .dtype = dtype, .op = op,
                                           .stream = stream, .fn = fn});
}

static tecomm_result_t nccl_pick(struct tecomm_comm *c, tecomm_algo_t asked,
                                 const struct tc_call_facts *f, tecomm_algo_t *algo) {
  (void)f;
  int on = NL(c) && NL(c)->comm;
  if (asked == TECOMM_ALGO_AUTO) {
    *algo = on ? TECOMM_ALGO_NCCL : TECOMM_ALGO_AUTO;
    return TECOMM_SUCCESS;
  }
  if (!on)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm nccl: no NCCL communicator (%s)",
                  NL(c) && NL(c)->loaded ? NL(c)->loaded : "NCCL is not on every rank");
  *algo = asked;
  return TECOMM_SUCCESS;
}

/* NCCL: agreed on the host first (tc_run_agreed): an enqueued call
 * cannot be stopped. */
static tecomm_result_t nccl_run(struct tecomm_comm *c, const struct tc_call *k) {
  return tc_run_agreed(c, k, nccl_reduce);
}

/* Reduce-scatter and all-gather: agreed on the host first, as allreduce. */
static tecomm_result_t nccl_coll(struct tecomm_comm *c, const struct tc_call *k) {
  TC_CHECK(tc_agree_host(c, &(struct tc_agree_call){.count = k->count, .dtype = k->dtype,
                                                     .op = k->op, .algo = k->algo,
                                                     .coll = (int)k->coll}, k->fn));
  return nccl_enqueue(c, k);
}

static void nccl_describe(struct tecomm_comm *c, struct tc_text *t) {
  if (c->nranks > 1) tc_put(t, "nccl: %s\n", WHY(c)[0] ? WHY(c) : "off");
  if (c->level == TC_LEVEL_NCCL) tc_put(t, "table: nccl at every size\n");
}

/* This rank's report at init.  TECOMM_TEST_FAIL=nccl:R: rank R reports
 * NCCL unusable here, in the exchange every rank decides from, as a rank
 * whose libnccl.so.2 does not load would.  (nccl-init:R, a rank stuck
 * inside its init, is injected in vdev's NCCL: nccl_vdev.c.) */
static void nccl_caps(struct tecomm_comm *c, struct tc_caps *k) {
  k->nccl = tc_nccl_get(NULL) != NULL && !tc_test_fail("nccl", c->rank);
  k->nccl_host = k->nccl && c->backend == TECORE_BACKEND_VDEV ? tc_machine_id() : 0;
}

const struct tc_level tc_level_nccl = {
    .name = "nccl",
    .chain = "nccl",
    .hosts = TC_ONE_HOST | TC_ACROSS_HOSTS,
    .why_in = TC_WHY_REFUSED,
    .why_name = "NCCL",
    .caps = nccl_caps,
    .open = nccl_open,
    .close = nccl_close,
    .health = nccl_health,
    .abort = tc_nccl_abort,
    .pick = nccl_pick,
    .run = nccl_run,
    .run_coll = nccl_coll,
    .describe = nccl_describe,
};
