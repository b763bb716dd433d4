/* SPDX-License-Identifier: Apache-2.0 */
/* ipc.c -- the ipc level of the fallback chain: libtecomm's allreduce
 * kernels (ar_kernels.h: one-shot, two-shot, Lamport, the copy-engine
 * one-shot) over the IPC workspaces of ranks on one host, on the
 * symmetric pool (any input: staged into it) or, without a pool, in place
 * on registered inputs.  The pool and the workspace are the
 * communicator's symmetric memory (pool.c, tc_symm_open), made before the
 * levels open since nvls uses the workspace too; this file is the
 * level's selection table and its row.
 *
 * The table (payload bytes, per rank count; TECOMM_LAMPORT_MAX_KB and
 * TECOMM_ONESHOT_MAX_KB move its edges) is described in select.c's
 * header, with the figures it comes from. */
#include "ipc_lv.h"
#include <stdio.h>
#include <string.h>

TECORE_TUNABLE_INT(tc_tun_oneshot_max_kb, "TECOMM_ONESHOT_MAX_KB", 0, 0, 1048576,
                   "largest payload (KiB) the table gives to one-shot; 0: the built-in table")
TECORE_TUNABLE_INT(tc_tun_lamport_max_kb, "TECOMM_LAMPORT_MAX_KB", 0, 0, 1048576,
                   "largest payload (KiB) the table gives to Lamport; 0: the built-in table")
TECORE_TUNABLE_INT(tc_tun_ce_min_kb, "TECOMM_CE_MIN_KB", 1024, 0, 16777216,
                   "smallest payload (KiB) of an allreduce (plain or fused) on 2 ranks that runs "
                   "beside another kernel (the fuser's overlapped backward sums, its forward row "
                   "blocks) for which the table takes the copy-engine one-shot (ce); 0: never.  "
                   "Every rank must use the same value")

/* The kernel protocol of an IPC algorithm (algos.h). */
static tc_ar_algo_t to_ar(tecomm_algo_t a) { return (tc_ar_algo_t)tc_algo_kernel(a); }

void tc_table_edges(int nranks, size_t *lamport, size_t *oneshot) {
  size_t kb_l = nranks <= 2 ? 1024 : nranks <= 4 ? 512 : 128;
  size_t kb_o = nranks <= 2 ? 128 : nranks <= 4 ? 512 : 256;
  int64_t ol = tecore_tunable_int(&tc_tun_lamport_max_kb);
  int64_t oo = tecore_tunable_int(&tc_tun_oneshot_max_kb);
  if (ol > 0) kb_l = (size_t)ol;
  if (oo > 0) kb_o = (size_t)oo;
  *lamport = kb_l * 1024;
  *oneshot = kb_o * 1024;
}

/* 1 when the kernels run algo for the call with this communicator's
 * workspace, and its input can be had where the algorithm wants it:
 * symmetric memory read in place, or a copy staged in the pool (Lamport
 * pushes its input itself and needs neither). */
static int ipc_can(struct tecomm_comm *c, tecomm_algo_t a, const struct tc_call_facts *f) {
  if (c->level > TC_LEVEL_INPLACE || !c->ws.me || c->n_kernels != c->nranks) return 0;
  size_t m = tc_ar_max_bytes(to_ar(a), c->nranks, c->ws.max_bytes);
  if (m == 0 || f->bytes > m) return 0;
  if (a == TECOMM_ALGO_LAMPORT) return f->fused_lamport_ok;
  if (c->level == TC_LEVEL_POOL) return 1;
  return f->symmetric && (f->in_place || !tc_ar_clobbers_input(to_ar(a)));
}

/* The IPC choice of the table (TECOMM_ALGO_AUTO when none fits). */
static tecomm_algo_t table_ipc(struct tecomm_comm *c, const struct tc_call_facts *f) {
  size_t lam, one;
  tc_table_edges(c->nranks, &lam, &one);
  /* beside a GEMM, a large sum on 2 ranks moves its bytes with the copy
   * engines */
  int64_t ce_kb = tecore_tunable_int(&tc_tun_ce_min_kb);
  if (f->beside && c->nranks == 2 && ce_kb > 0 && f->bytes >= (size_t)ce_kb * 1024 &&
      ipc_can(c, TECOMM_ALGO_CE, f))
    return TECOMM_ALGO_CE;
  if (f->bytes <= lam && ipc_can(c, TECOMM_ALGO_LAMPORT, f)) return TECOMM_ALGO_LAMPORT;
  if (f->bytes <= one && ipc_can(c, TECOMM_ALGO_ONESHOT, f)) return TECOMM_ALGO_ONESHOT;
  /* The fused call on 2 ranks: one-shot at every size the built-in table
   * gives to two-shot.  At 2 ranks both move the same bytes over NVLink
   * (the peer's input, once), one-shot in one phase with one barrier and no
   * second read of the rows.  2x H200, hidden 4096, te-allreduce-perf
   * --fused (bench/2026-11-23.md, session 9): 2 MB 14.7 us against 22.4, 64 MB 214
   * against 279; the plain call keeps two-shot (64 MB 209 against 251). */
  if (f->fused && c->nranks == 2 && tecore_tunable_int(&tc_tun_oneshot_max_kb) == 0 &&
      ipc_can(c, TECOMM_ALGO_ONESHOT, f))
    return TECOMM_ALGO_ONESHOT;
  if (ipc_can(c, TECOMM_ALGO_TWOSHOT, f)) return TECOMM_ALGO_TWOSHOT;
  if (ipc_can(c, TECOMM_ALGO_ONESHOT, f)) return TECOMM_ALGO_ONESHOT;
  return TECOMM_ALGO_AUTO;
}

/* Where an IPC algorithm can run at all: on the pool (any input: staged)
 * or in place on registered inputs. */
static int ipc_ok(const struct tecomm_comm *c, const struct tc_call_facts *f) {
  return c->level == TC_LEVEL_POOL || (c->level == TC_LEVEL_INPLACE && f->symmetric);
}

/* An IPC algorithm asked for by name. */
static tecomm_result_t ipc_pick_named(struct tecomm_comm *c, tecomm_algo_t a,
                                      const struct tc_call_facts *f, tecomm_algo_t *algo) {
  if (!ipc_ok(c, f))
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm %s: level %s (%s)%s", tc_algo_name(a),
                  tc_level_name(c->level), c->level_why,
                  c->level == TC_LEVEL_INPLACE ? ": the input must be symmetric memory" : "");
  if (!ipc_can(c, a, f))
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "algorithm %s cannot run %zu bytes on %d ranks (kernel bound %zu bytes%s%s)",
                  tc_algo_name(a), f->bytes, c->nranks,
                  tc_ar_max_bytes(to_ar(a), c->nranks, c->ws.max_bytes),
                  c->level == TC_LEVEL_INPLACE && tc_ar_clobbers_input(to_ar(a))
                      ? "; without a pool it runs only in place"
                      : "",
                  a == TECOMM_ALGO_LAMPORT && !f->fused_lamport_ok
                      ? "; fused Lamport needs hidden % 8 == 0 and 16-byte aligned "
                        "residuals, gamma and outputs"
                      : "");
  *algo = a;
  return TECOMM_SUCCESS;
}

static tecomm_result_t ipc_pick(struct tecomm_comm *c, tecomm_algo_t asked,
                                const struct tc_call_facts *f, tecomm_algo_t *algo) {
  if (asked != TECOMM_ALGO_AUTO) return ipc_pick_named(c, asked, f, algo);
  *algo = ipc_ok(c, f) ? table_ipc(c, f) : TECOMM_ALGO_AUTO;
  return TECOMM_SUCCESS;
}

/* The level was settled with the symmetric memory (tc_symm_open): on at
 * the pool and registered in-place levels. */
static tecomm_result_t ipc_open(struct tecomm_comm *c, const struct tc_caps *all,
                                tecore_stream_t st) {
  (void)st;
  (void)all;
  int on = c->level == TC_LEVEL_POOL || c->level == TC_LEVEL_INPLACE;
  c->lv[TC_LV_IPC] = on ? &c->ws : NULL;
  snprintf(c->lv_why[TC_LV_IPC], sizeof c->lv_why[TC_LV_IPC], "%s (%.280s)", on ? "on" : "off",
           c->level_why);
  return TECOMM_SUCCESS;
}

static void ipc_close(struct tecomm_comm *c) { c->lv[TC_LV_IPC] = NULL; }

static void ipc_describe(struct tecomm_comm *c, struct tc_text *t) {
  if (c->level > TC_LEVEL_INPLACE) return;
  size_t lam, one;
  tc_table_edges(c->nranks, &lam, &one);
  size_t ml = tc_ar_max_bytes(TC_AR_LAMPORT, c->nranks, c->ws.max_bytes);
  if (ml < lam) lam = ml;
  tc_put(t, "table (%d ranks): lamport <= %zu KiB, oneshot <= %zu KiB, twoshot above%s\n",
         c->nranks, lam / 1024, one / 1024,
         c->level == TC_LEVEL_INPLACE ? " (registered inputs only; others nccl)" : "");
  tc_put(t, "fused add + rmsnorm on twoshot: %s (TECOMM_FUSED_TWOSHOT)\n",
         tc_ar_fused_twoshot_variant());
  if (c->nranks == 2 && tecore_tunable_int(&tc_tun_oneshot_max_kb) == 0)
    tc_put(t, "fused add + rmsnorm (2 ranks): oneshot where the table says twoshot\n");
  if (tecore_tunable_int(&tc_tun_ce_min_kb) > 0 && c->nranks == 2)
    tc_put(t, "beside another kernel (overlapped sums): ce from %lld KiB (TECOMM_CE_MIN_KB)\n",
           (long long)tecore_tunable_int(&tc_tun_ce_min_kb));
}

const struct tc_level tc_level_ipc = {
    .name = "ipc",
    .chain = "ipc pool (lamport, oneshot, twoshot by size) -> ipc registered in-place",
    .hosts = TC_ONE_HOST,
    .open = ipc_open,
    .close = ipc_close,
    .pick = ipc_pick,
    .run = tc_run_kernel,
    .run_coll = tc_run_coll_kernel,
    .describe = ipc_describe,
};
