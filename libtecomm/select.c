/* SPDX-License-Identifier: Apache-2.0 */
/* select.c -- which algorithm runs: the fallback chain (where a
 * communicator stands is decided at init, the same on every rank), the
 * selection table by payload size and rank count, TECOMM_ALGO and the
 * per-call override, and tecomm_comm_describe, which prints all of it.
 *
 * The table (payload bytes, per rank count; TECOMM_LAMPORT_MAX_KB and
 * TECOMM_ONESHOT_MAX_KB move its edges):
 *   ranks   Lamport up to   one-shot up to   larger
 *   2       1 MiB           128 KiB          two-shot
 *   3-4     512 KiB         512 KiB          two-shot
 *   5-8     128 KiB         256 KiB          two-shot
 * The edges are H200 figures (graph-captured bf16).  2 GPUs, each
 * algorithm forced, twice, with PDL (bench/2026-11-22.md, session 5): Lamport 5.3,
 * 6.2, 7.8, 12.1 us at 256 KiB, 512 KiB, 1 MiB, 2 MiB; two-shot 6.6, 7.6,
 * 9.2, 11.9; one-shot 10.7, 10.8, 11.1, 13.1 (one-shot wins only below
 * that, 6.2 us against two-shot's 8.7 at 8 KiB in the first record).  4
 * GPUs, the first record: 512 KiB Lamport 13.5 us against one-shot 14.1.
 * The wrong elements Lamport showed there at 512 KiB came from the
 * benchmark's check, whose synchronous copy from pageable memory could
 * still be landing when Lamport, which reads its input at once, ran (see
 * te_cuda_memcpy_sync); the protocol itself is tested under stress in
 * t/comm/check_protocols (lamport_stress_skewed_ranks_*).
 * Lamport is also bounded by the buffers TECOMM_MAX_TOKENS x
 * TECOMM_MAX_HIDDEN sized; an algorithm the kernels do not offer is
 * skipped (the next one in the row runs).  Below the pool level: in place
 * on registered inputs only, NCCL for the rest.
 *
 * Above the table (SUM only): NVLS Lamport up to the Lamport edge (and the
 * Lamport buffers), NVLS simple up to its buffer (TECOMM_NVLS_MB), when
 * the communicator has a multicast object (nvls.c).  Across nodes: MNNVL
 * (Lamport over fabric mappings, SUM or MAX) up to the Lamport buffers,
 * then NCCL (mnnvl.c).
 *
 * Beside another kernel (the fuser's backward sums overlapped with a
 * weight-gradient GEMM, its forward row blocks), on 2 ranks: calls of
 * TECOMM_CE_MIN_KB and more, plain or fused, take the copy-engine
 * one-shot, whose bytes the copy engines move while the GEMM keeps the
 * SMs (kernels/common/comm_ar.h).  On more ranks it would move n - 1
 * inputs where two-shot moves 2 (n - 1) / n. */
#include "level.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table's edges and the algorithm forced for auto. */
TECORE_TUNABLE_STR(tc_tun_algo, "TECOMM_ALGO", "auto", TC_ALGO_CHOICES,
                   "allreduce algorithm for every call that asks for auto (the selection "
                   "table) on the caller's communicators; a hierarchical allreduce's node "
                   "groups keep theirs")

/* "; name: why" for each level whose "why off" text the message where
 * tells (struct tc_level's why_in), in buf. */
#define TC_WHYS_CAP (TC_LV_COUNT * 340)
static const char *whys(struct tecomm_comm *c, unsigned where, char *buf) {
  struct tc_text t = {buf, TC_WHYS_CAP, 0};
  buf[0] = '\0';
  for (int i = 0; i < TC_LV_COUNT; i++) {
    const struct tc_level *l = tc_levels[i];
    if (!(l->why_in & where)) continue;
    const int absent = where == TC_WHY_REFUSED && !c->lv_why[i][0];
    tc_put(&t, "; %s: %s", l->why_name, absent ? "absent" : c->lv_why[i]);
  }
  return buf;
}

struct tc_call_facts tc_call_facts_of(const struct tc_call *k) {
  return (struct tc_call_facts){.bytes = k->bytes, .symmetric = k->seg != NULL,
                                .in_place = k->in_place, .sum = k->op == TECOMM_SUM,
                                .fused = k->fa != NULL, .beside = (k->how & TC_AR_BESIDE) != 0};
}

/* auto: each level's table in the chain's order; the first with a choice
 * runs the call. */
static tecomm_result_t select_auto(struct tecomm_comm *c, const struct tc_call_facts *f,
                                   tecomm_algo_t *algo) {
  for (int i = 0; i < TC_LV_COUNT; i++) {
    tecomm_algo_t a = TECOMM_ALGO_AUTO;
    TC_CHECK(tc_levels[i]->pick(c, TECOMM_ALGO_AUTO, f, &a));
    if (a != TECOMM_ALGO_AUTO) {
      *algo = a;
      return TECOMM_SUCCESS;
    }
  }
  char why[TC_WHYS_CAP];
  return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "no algorithm for %zu bytes: level %s (%s)%s%s",
                f->bytes, tc_level_name(c->level), c->level_why,
                c->level == TC_LEVEL_INPLACE && !f->symmetric
                    ? "; the input is not symmetric memory (tecomm_mem_alloc)"
                    : "",
                whys(c, TC_WHY_REFUSED, why));
}

/* The level that runs a (not auto): an open level that claims it (mnnvl
 * lamport across nodes), else the one its at column names. */
static const struct tc_level *level_of(struct tecomm_comm *c, tecomm_algo_t a) {
  for (int i = 0; i < TC_LV_COUNT; i++)
    if (tc_levels[i]->claims == a && c->lv[i]) return tc_levels[i];
  return tc_level_at(tc_algo_at(a));
}

tecomm_result_t tc_select(struct tecomm_comm *c, tecomm_algo_t asked,
                          const struct tc_call_facts *f, tecomm_algo_t *algo) {
  tecomm_algo_t a = asked;
  /* TECOMM_ALGO is for the caller's communicators.  A hierarchical
   * communicator's node group (no_verbs) runs steps of its parent's verbs
   * allreduce, on its own table: TECOMM_ALGO=verbs forced on it would
   * refuse every hierarchical call (the group stands at the pool level) */
  if (a == TECOMM_ALGO_AUTO && !c->no_verbs) {
    int e = tc_algo_by_name(tecore_tunable_str(&tc_tun_algo));
    a = e < 0 ? TECOMM_ALGO_AUTO : (tecomm_algo_t)e;
  }
  if (a == TECOMM_ALGO_AUTO) return select_auto(c, f, algo);
  return level_of(c, a)->pick(c, a, f, algo);
}

/* The chain's links where the communicator's ranks are, from the table. */
static void put_chain(struct tecomm_comm *c, struct tc_text *t) {
  unsigned where = c->all_local ? TC_ONE_HOST : TC_ACROSS_HOSTS;
  const char *sep = "";
  tc_put(t, "chain: ");
  for (int i = 0; i < TC_LV_COUNT; i++) {
    if (!(tc_levels[i]->hosts & where)) continue;
    tc_put(t, "%s%s", sep, tc_levels[i]->chain);
    sep = " -> ";
  }
  tc_put(t, "\n");
}

static void describe(struct tecomm_comm *c, size_t bytes, char *buf, size_t cap) {
  struct tc_text t = {buf, cap, 0};
  buf[0] = '\0';
  tc_put(&t, "tecomm: %d ranks%s, backend %s\n", c->nranks,
         c->all_local ? " on one host" : " on several hosts", tecore_backend_name(c->backend));
  put_chain(c, &t);
  tc_put(&t,
         "capabilities: p2p %d/%d, vmm posix-fd %d/%d, ipc kernels %d/%d, nccl %d/%d, pool %d/%d\n",
         c->n_p2p, c->nranks, c->n_vmm_fd, c->nranks, c->n_kernels, c->nranks, c->n_nccl, c->nranks,
         c->n_pool, c->nranks);
  tc_put(&t, "level: %s (%s)\n", tc_level_name(c->level), c->level_why);
  tc_levels_describe(c, &t);
  if (bytes) {
    tecomm_algo_t a = TECOMM_ALGO_AUTO;
    char detail[512];
    snprintf(detail, sizeof detail, "%s", tecore_last_error());
    /* a plain SUM in place on symmetric memory where the level needs it */
    const struct tc_call_facts f = {.bytes = bytes, .symmetric = c->level == TC_LEVEL_INPLACE,
                                    .in_place = 1, .fused_lamport_ok = 1, .sum = 1};
    if (tc_select(c, TECOMM_ALGO_AUTO, &f, &a) == TECOMM_SUCCESS)
      tc_put(&t, "choice for %zu bytes: %s\n", bytes, tc_algo_name(a));
    else
      tc_put(&t, "choice for %zu bytes: none (%s)\n", bytes, tecore_last_error());
    tecore_set_error("%s", detail);
  }
}

void tc_level_log(struct tecomm_comm *c) {
  char why[TC_WHYS_CAP];
  TC_INFO("tecomm: rank %d of %d: level %s (%s)%s", c->rank, c->nranks, tc_level_name(c->level),
          c->level_why, whys(c, TC_WHY_LOGGED, why));
  if (tecore_log_level() >= TECORE_LOG_INFO && c->rank == 0) {
    char buf[2048];
    describe(c, 0, buf, sizeof buf);
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n")) TC_INFO("%s", line);
  }
}

TE_EXPORT tecomm_result_t tecomm_comm_describe(tecomm_comm_t comm, size_t bytes, char *buf,
                                               size_t len) {
  TC_COMM(comm, "tecomm_comm_describe");
  TC_ARG(buf, "tecomm_comm_describe: buf is NULL");
  TC_ARG(len > 0, "tecomm_comm_describe: len is 0");
  describe(comm, bytes, buf, len);
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_comm_choose(tecomm_comm_t comm, size_t count, tecore_dtype_t dtype,
                                             int fused, tecomm_algo_t *algo) {
  TC_COMM(comm, "tecomm_comm_choose");
  TC_ARG(algo, "tecomm_comm_choose: algo is NULL");
  TC_ARG(dtype == TECORE_DTYPE_F32 || dtype == TECORE_DTYPE_BF16 || dtype == TECORE_DTYPE_F16,
         "tecomm_comm_choose: dtype %d is not F32, BF16 or F16", (int)dtype);
  const struct tc_call_facts f = {.bytes = count * tecore_dtype_size(dtype),
                                  .symmetric = comm->level == TC_LEVEL_INPLACE,
                                  .in_place = !fused, .fused_lamport_ok = 1, .sum = 1,
                                  .fused = fused != 0};
  return tc_select(comm, TECOMM_ALGO_AUTO, &f, algo);
}
