/* SPDX-License-Identifier: Apache-2.0 */
/* probe.c -- tecomm_probe: the latency floors of the IPC allreduce, one
 * kernel each (kernels/comm_ar.cu's te_comm_ar_probe_*), over the same
 * workspaces, the same launch (programmatic dependent launch when
 * TECOMM_PDL allows) and the same bounded wait as the allreduce kernels,
 * so te-allreduce-perf can print what no allreduce could beat beside what
 * it measures. */
#include "comm_priv.h"
#include <string.h>

TE_EXPORT tecomm_result_t tecomm_probe(tecomm_comm_t comm, tecomm_probe_t what,
                                       tecore_stream_t stream) {
  static const char fn[] = "tecomm_probe";
  TC_COMM(comm, fn);
  TC_ARG(what == TECOMM_PROBE_LAUNCH || what == TECOMM_PROBE_EXCHANGE,
         "%s: what %d is not TECOMM_PROBE_LAUNCH or TECOMM_PROBE_EXCHANGE", fn, (int)what);
  struct tecomm_comm *c = comm;
  TC_CHECK(tc_comm_ready(c, fn, !tc_capturing(stream)));
  if (!c->ws.me)
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED,
                  "%s: no IPC workspaces at level %s: the probes run over the IPC kernels' "
                  "mappings",
                  fn, tc_level_name(c->level));
  struct tc_ar_call call;
  memset(&call, 0, sizeof call);
  call.rank = c->rank;
  call.nranks = c->nranks;
  call.timeout_ns = (uint64_t)tc_timeout_ms() * 1000000ull;
  call.ws_max_bytes = c->ws.max_bytes;
  for (int r = 0; r < c->nranks; r++) call.ws[r] = c->ws.peer[r];
  tecore_result_t cr = tc_ar_probe(&call, what == TECOMM_PROBE_EXCHANGE, stream);
  return cr == TECORE_SUCCESS ? TECOMM_SUCCESS : tc_comm_fail(c, tc_core(cr, fn));
}
