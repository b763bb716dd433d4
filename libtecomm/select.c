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
 * algorithm forced, twice, with PDL (bench/2026-11-22e): Lamport 5.3,
 * 6.2, 7.8, 12.1 us at 256 KiB, 512 KiB, 1 MiB, 2 MiB; two-shot 6.6, 7.6,
 * 9.2, 11.9; one-shot 10.7, 10.8, 11.1, 13.1 (one-shot wins only below
 * that, 6.2 us against two-shot's 8.7 at 8 KiB in the first record).  4
 * GPUs, the first record: 512 KiB Lamport 13.5 us against one-shot 14.1.
 * The wrong elements Lamport showed there at 512 KiB came from the
 * benchmark's check, whose synchronous copy from pageable memory could
 * still be landing when Lamport, which reads its input at once, ran (see
 * te_cuda_memcpy_sync); the protocol itself is tested under stress in
 * t/check_comm_ar (lamport_stress_skewed_ranks_*).
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
#include "comm_priv.h"
#include "algos.h"
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The table's edges and the algorithm forced for auto. */
TECORE_TUNABLE_STR(tc_tun_algo, "TECOMM_ALGO", "auto", TC_ALGO_CHOICES,
                   "allreduce algorithm for every call that asks for auto (the selection "
                   "table) on the caller's communicators; a hierarchical allreduce's node "
                   "groups keep theirs")
TECORE_TUNABLE_INT(tc_tun_oneshot_max_kb, "TECOMM_ONESHOT_MAX_KB", 0, 0, 1048576,
                   "largest payload (KiB) the table gives to one-shot; 0: the built-in table")
TECORE_TUNABLE_INT(tc_tun_lamport_max_kb, "TECOMM_LAMPORT_MAX_KB", 0, 0, 1048576,
                   "largest payload (KiB) the table gives to Lamport; 0: the built-in table")
TECORE_TUNABLE_INT(tc_tun_ce_min_kb, "TECOMM_CE_MIN_KB", 1024, 0, 16777216,
                   "smallest payload (KiB) of an allreduce (plain or fused) on 2 ranks that runs "
                   "beside another kernel (the fuser's overlapped backward sums, its forward row "
                   "blocks) for which the table takes the copy-engine one-shot (ce); 0: never.  "
                   "Every rank must use the same value")

TE_EXPORT const char *tecomm_algo_name(tecomm_algo_t algo) {
  const char *n = tc_algo_name(algo);
  return n ? n : "unknown";
}

TE_EXPORT tecomm_result_t tecomm_algo_parse(const char *name, tecomm_algo_t *algo) {
  TC_ARG(name, "tecomm_algo_parse: name is NULL");
  TC_ARG(algo, "tecomm_algo_parse: algo is NULL");
  int i = tc_algo_by_name(name);
  if (i < 0)
    return TC_ERR(TECOMM_ERR_INVALID, "tecomm_algo_parse: name \"%s\" is not one of %s", name,
                  TC_ALGO_CHOICES);
  *algo = (tecomm_algo_t)i;
  return TECOMM_SUCCESS;
}

const char *tc_level_name(tc_level_t l) {
  switch (l) {
  case TC_LEVEL_POOL:
    return "pool";
  case TC_LEVEL_INPLACE:
    return "registered in-place";
  case TC_LEVEL_NCCL:
    return "nccl";
  case TC_LEVEL_VERBS:
    return "verbs";
  default:
    return "none";
  }
}

/* The kernel protocol of an IPC algorithm (algos.h). */
static tc_ar_algo_t to_ar(tecomm_algo_t a) { return (tc_ar_algo_t)tc_algo_kernel(a); }

static void table_edges(int nranks, size_t *lamport, size_t *oneshot) {
  size_t kb_l = nranks <= 2 ? 1024 : nranks <= 4 ? 512 : 128;
  size_t kb_o = nranks <= 2 ? 128 : nranks <= 4 ? 512 : 256;
  int64_t ol = tecore_tunable_int(&tc_tun_lamport_max_kb);
  int64_t oo = tecore_tunable_int(&tc_tun_oneshot_max_kb);
  if (ol > 0) kb_l = (size_t)ol;
  if (oo > 0) kb_o = (size_t)oo;
  *lamport = kb_l * 1024;
  *oneshot = kb_o * 1024;
}

/* Why the NVLS or MNNVL algorithm a cannot run the call ("" when it can). */
static const char *above_ipc_cannot(struct tecomm_comm *c, tecomm_algo_t a,
                                    const struct tc_call_facts *f) {
  if (a == TECOMM_ALGO_MNNVL) {
    if (!c->mnnvl) return "MNNVL is off";
    if (f->bytes > c->ws_max_bytes) return "larger than the Lamport buffers";
    if (!f->fused_lamport_ok) return "fused Lamport needs hidden % 8 == 0 and 16-byte alignment";
    return "";
  }
  if (!c->nvls) return "NVLS is off";
  if (!f->sum) return "NVLS reduces with SUM only";
  if (a == TECOMM_ALGO_NVLS) return f->bytes > c->nvls->data_bytes ? "larger than TECOMM_NVLS_MB" : "";
  if (f->bytes > c->ws_max_bytes) return "larger than the Lamport buffers";
  if (!f->fused_lamport_ok) return "fused Lamport needs hidden % 8 == 0 and 16-byte alignment";
  return "";
}

/* The NVLS or MNNVL choice of the table (TECOMM_ALGO_AUTO when none):
 * Lamport up to the table's Lamport edge, NVLS simple up to its buffer. */
static tecomm_algo_t table_above_ipc(struct tecomm_comm *c, const struct tc_call_facts *f) {
  size_t lam, one;
  table_edges(c->nranks, &lam, &one);
  if (c->mnnvl)
    return !*above_ipc_cannot(c, TECOMM_ALGO_MNNVL, f) ? TECOMM_ALGO_MNNVL : TECOMM_ALGO_AUTO;
  if (!c->nvls) return TECOMM_ALGO_AUTO;
  if (f->bytes <= lam && !*above_ipc_cannot(c, TECOMM_ALGO_NVLS_LAMPORT, f))
    return TECOMM_ALGO_NVLS_LAMPORT;
  if (!*above_ipc_cannot(c, TECOMM_ALGO_NVLS, f)) return TECOMM_ALGO_NVLS;
  return TECOMM_ALGO_AUTO;
}

/* 1 when the kernels run algo for the call with this communicator's
 * workspace, and its input can be had where the algorithm wants it:
 * symmetric memory read in place, or a copy staged in the pool (Lamport
 * pushes its input itself and needs neither). */
static int ipc_can(struct tecomm_comm *c, tecomm_algo_t a, const struct tc_call_facts *f) {
  if (c->level > TC_LEVEL_INPLACE || !c->ws || c->n_kernels != c->nranks) return 0;
  size_t m = tc_ar_max_bytes(to_ar(a), c->nranks, c->ws_max_bytes);
  if (m == 0 || f->bytes > m) return 0;
  if (a == TECOMM_ALGO_LAMPORT) return f->fused_lamport_ok;
  if (c->level == TC_LEVEL_POOL) return 1;
  return f->symmetric && (f->in_place || !tc_ar_clobbers_input(to_ar(a)));
}

/* The IPC choice of the table (TECOMM_ALGO_AUTO when none fits). */
static tecomm_algo_t table_ipc(struct tecomm_comm *c, const struct tc_call_facts *f) {
  size_t lam, one;
  table_edges(c->nranks, &lam, &one);
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
   * --fused (bench/2026-11-23c-gpu.md): 2 MB 14.7 us against 22.4, 64 MB 214
   * against 279; the plain call keeps two-shot (64 MB 209 against 251). */
  if (f->fused && c->nranks == 2 && tecore_tunable_int(&tc_tun_oneshot_max_kb) == 0 &&
      ipc_can(c, TECOMM_ALGO_ONESHOT, f))
    return TECOMM_ALGO_ONESHOT;
  if (ipc_can(c, TECOMM_ALGO_TWOSHOT, f)) return TECOMM_ALGO_TWOSHOT;
  if (ipc_can(c, TECOMM_ALGO_ONESHOT, f)) return TECOMM_ALGO_ONESHOT;
  return TECOMM_ALGO_AUTO;
}

/* auto: above the IPC level, then the IPC table, then NCCL, then verbs. */
static tecomm_result_t select_auto(struct tecomm_comm *c, const struct tc_call_facts *f,
                                   int ipc_ok, tecomm_algo_t *algo) {
  tecomm_algo_t a = table_above_ipc(c, f);
  if (a == TECOMM_ALGO_AUTO && ipc_ok) a = table_ipc(c, f);
  if (a == TECOMM_ALGO_AUTO && c->nccl) a = TECOMM_ALGO_NCCL;
  if (a == TECOMM_ALGO_AUTO && c->level == TC_LEVEL_VERBS) a = TECOMM_ALGO_VERBS;
  if (a == TECOMM_ALGO_AUTO)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "no algorithm for %zu bytes: level %s (%s)%s; NCCL: %s", f->bytes,
                  tc_level_name(c->level), c->level_why,
                  c->level == TC_LEVEL_INPLACE && !f->symmetric
                      ? "; the input is not symmetric memory (tecomm_mem_alloc)"
                      : "",
                  c->nccl ? "present" : c->nccl_why ? c->nccl_why : "absent");
  *algo = a;
  return TECOMM_SUCCESS;
}

/* An IPC algorithm asked for by name. */
static tecomm_result_t select_ipc(struct tecomm_comm *c, tecomm_algo_t a,
                                  const struct tc_call_facts *f, int ipc_ok,
                                  tecomm_algo_t *algo) {
  if (!ipc_ok)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm %s: level %s (%s)%s", tc_algo_name(a),
                  tc_level_name(c->level), c->level_why,
                  c->level == TC_LEVEL_INPLACE ? ": the input must be symmetric memory" : "");
  if (!ipc_can(c, a, f))
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "algorithm %s cannot run %zu bytes on %d ranks (kernel bound %zu bytes%s%s)",
                  tc_algo_name(a), f->bytes, c->nranks,
                  tc_ar_max_bytes(to_ar(a), c->nranks, c->ws_max_bytes),
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
  /* IPC runs on the pool (any input: staged) or in place on registered
   * inputs; everything else is NCCL's */
  int ipc_ok = c->level == TC_LEVEL_POOL || (c->level == TC_LEVEL_INPLACE && f->symmetric);
  /* Lamport on ranks across nodes is the MNNVL Lamport */
  if (a == TECOMM_ALGO_LAMPORT && c->mnnvl) {
    const char *why = above_ipc_cannot(c, TECOMM_ALGO_MNNVL, f);
    if (*why)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm lamport across nodes cannot run %zu "
                    "bytes: %s", f->bytes, why);
    *algo = TECOMM_ALGO_MNNVL;
    return TECOMM_SUCCESS;
  }
  switch (tc_algo_at(a)) {
  case TC_AT_TABLE:
    return select_auto(c, f, ipc_ok, algo);
  case TC_AT_IPC:
    return select_ipc(c, a, f, ipc_ok, algo);
  case TC_AT_VERBS:
    if (c->level != TC_LEVEL_VERBS)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm verbs: level %s (%s)%s%s",
                    tc_level_name(c->level), c->level_why, c->verbs_why[0] ? "; verbs: " : "",
                    c->verbs_why);
    break;
  case TC_AT_NCCL:
    if (!c->nccl)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm nccl: no NCCL communicator (%s)",
                    c->nccl_why ? c->nccl_why : "NCCL is not on every rank");
    break;
  case TC_AT_NVLS:
  case TC_AT_MNNVL: {
    const char *why = above_ipc_cannot(c, a, f);
    if (*why)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm %s cannot run %zu bytes: %s (%s)",
                    tc_algo_name(a), f->bytes, why,
                    a == TECOMM_ALGO_MNNVL ? c->mnnvl_why : c->nvls_why);
    break;
  }
  }
  *algo = a;
  return TECOMM_SUCCESS;
}

/* Appends printf output to buf at *len (truncating, always terminated). */
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void put(char *buf, size_t cap, size_t *len, const char *fmt, ...) {
  if (*len >= cap) return;
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(buf + *len, cap - *len, fmt, ap);
  va_end(ap);
  if (n > 0) *len = *len + (size_t)n < cap ? *len + (size_t)n : cap - 1;
}

static void describe(struct tecomm_comm *c, size_t bytes, char *buf, size_t cap) {
  size_t len = 0;
  buf[0] = '\0';
  put(buf, cap, &len, "tecomm: %d ranks%s, backend %s\n", c->nranks,
      c->all_local ? " on one host" : " on several hosts", tecore_backend_name(c->backend));
  put(buf, cap, &len, "chain: %s\n",
      c->all_local ? "nvls (lamport, simple) -> ipc pool (lamport, oneshot, twoshot by size) -> "
                     "ipc registered in-place -> nccl -> verbs"
                   : "mnnvl (lamport) -> nccl -> verbs");
  put(buf, cap, &len,
      "capabilities: p2p %d/%d, vmm posix-fd %d/%d, ipc kernels %d/%d, nccl %d/%d, pool %d/%d\n",
      c->n_p2p, c->nranks, c->n_vmm_fd, c->nranks, c->n_kernels, c->nranks, c->n_nccl, c->nranks,
      c->n_pool, c->nranks);
  put(buf, cap, &len, "level: %s (%s)\n", tc_level_name(c->level), c->level_why);
  put(buf, cap, &len, "nvls: %s\n", c->nvls_why[0] ? c->nvls_why : "off");
  if (c->nranks > 1) put(buf, cap, &len, "nccl: %s\n", c->nccl_state[0] ? c->nccl_state : "off");
  if (!c->all_local) put(buf, cap, &len, "mnnvl: %s\n", c->mnnvl_why[0] ? c->mnnvl_why : "off");
  if (c->nvls) {
    size_t lam, one;
    table_edges(c->nranks, &lam, &one);
    if (c->ws_max_bytes < lam) lam = c->ws_max_bytes;
    put(buf, cap, &len,
        "table above ipc (SUM): nvls-lamport <= %zu KiB, nvls <= %zu KiB, then the ipc table\n",
        lam / 1024, c->nvls->data_bytes / 1024);
  } else if (c->mnnvl) {
    put(buf, cap, &len, "table above the level (SUM and MAX): mnnvl <= %zu KiB\n",
        c->ws_max_bytes / 1024);
  }
  if (c->level <= TC_LEVEL_INPLACE) {
    size_t lam, one;
    table_edges(c->nranks, &lam, &one);
    size_t ml = tc_ar_max_bytes(TC_AR_LAMPORT, c->nranks, c->ws_max_bytes);
    if (ml < lam) lam = ml;
    put(buf, cap, &len, "table (%d ranks): lamport <= %zu KiB, oneshot <= %zu KiB, twoshot above%s\n",
        c->nranks, lam / 1024, one / 1024,
        c->level == TC_LEVEL_INPLACE ? " (registered inputs only; others nccl)" : "");
    put(buf, cap, &len, "fused add + rmsnorm on twoshot: %s (TECOMM_FUSED_TWOSHOT)\n",
        tc_ar_fused_twoshot_variant());
    if (c->nranks == 2 && tecore_tunable_int(&tc_tun_oneshot_max_kb) == 0)
      put(buf, cap, &len, "fused add + rmsnorm (2 ranks): oneshot where the table says twoshot\n");
    if (tecore_tunable_int(&tc_tun_ce_min_kb) > 0 && c->nranks == 2)
      put(buf, cap, &len, "beside another kernel (overlapped sums): ce from %lld KiB "
          "(TECOMM_CE_MIN_KB)\n", (long long)tecore_tunable_int(&tc_tun_ce_min_kb));
  } else if (c->level == TC_LEVEL_NCCL) {
    put(buf, cap, &len, "table: nccl at every size\n");
  } else if (c->level == TC_LEVEL_VERBS) {
    char vl[512];
    tc_verbs_describe(c, vl, sizeof vl);
    put(buf, cap, &len, "table: verbs at every size (recursive doubling when small, else ring)\n");
    put(buf, cap, &len, "%s\n", vl);
  }
  if (bytes) {
    tecomm_algo_t a = TECOMM_ALGO_AUTO;
    char detail[512];
    snprintf(detail, sizeof detail, "%s", tecore_last_error());
    /* a plain SUM in place on symmetric memory where the level needs it */
    const struct tc_call_facts f = {.bytes = bytes, .symmetric = c->level == TC_LEVEL_INPLACE,
                                    .in_place = 1, .fused_lamport_ok = 1, .sum = 1};
    if (tc_select(c, TECOMM_ALGO_AUTO, &f, &a) == TECOMM_SUCCESS)
      put(buf, cap, &len, "choice for %zu bytes: %s\n", bytes, tc_algo_name(a));
    else
      put(buf, cap, &len, "choice for %zu bytes: none (%s)\n", bytes, tecore_last_error());
    tecore_set_error("%s", detail);
  }
}

void tc_level_log(struct tecomm_comm *c) {
  TC_INFO("tecomm: rank %d of %d: level %s (%s); nvls: %s", c->rank, c->nranks,
          tc_level_name(c->level), c->level_why, c->nvls_why);
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
