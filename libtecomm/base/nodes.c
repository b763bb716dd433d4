/* SPDX-License-Identifier: Apache-2.0 */
/* nodes.c -- which node each rank is on: the identity a rank reports
 * (its host, or the node TECOMM_VDEV_NODE or TECOMM_NODE_MAP make it
 * play in tests) and every rank's node from the allgathered identities.
 * The communicator layer computes them at init; the levels that span
 * nodes (mnnvl, the hierarchical verbs path) read them. */
#include "comm_priv.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* vdev plays several nodes on one machine (the MNNVL path in CI). */
TECORE_TUNABLE_INT(tc_tun_vdev_node, "TECOMM_VDEV_NODE", -1, -1, 1048576,
                   "vdev only: this process's node id; ranks with different ids act as ranks on "
                   "different hosts of one NVLink domain (no local mesh, MNNVL across them); "
                   "-1: the real host")

int64_t tc_vdev_node(void) { return tecore_tunable_int(&tc_tun_vdev_node); }

TECORE_TUNABLE_STR(tc_tun_node_map, "TECOMM_NODE_MAP", "", NULL,
                   "debug: the node of every rank, comma-separated (e.g. 0,0,1,1): ranks of one "
                   "host then act as ranks of several nodes (tests of the inter-node paths); "
                   "empty: each rank's host")

uint64_t tc_fnv(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

void tc_node_map_identity(char *host, size_t hl, uint64_t *boot_id, int rank) {
  const char *m = tecore_tunable_str(&tc_tun_node_map);
  if (!m || !*m || rank < 0) return;
  const char *p = m;
  for (int i = 0; i < rank && p; i++) {
    p = strchr(p, ',');
    if (p) p++;
  }
  if (!p || *p < '0' || *p > '9') {
    TC_WARN("TECOMM_NODE_MAP=\"%s\" has no node for rank %d: it stays on its host", m, rank);
    return;
  }
  int node = atoi(p);
  char h[64];
  snprintf(h, sizeof h, "%s", host);
  snprintf(host, hl, "%.40s#node%d", h, node);
  *boot_id = tc_fnv(&node, sizeof node, *boot_id);
}

tecomm_result_t tc_nodes_find(struct tecomm_comm *c, const struct tc_caps *all) {
  c->node_of = calloc((size_t)c->nranks, sizeof *c->node_of);
  if (!c->node_of) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  c->nnodes = 0;
  for (int i = 0; i < c->nranks; i++) {
    int j = 0;
    /* the names came over the wire: bounded by their field (comm.c
     * checked each ends within it) */
    while (j < i && (all[j].boot_id != all[i].boot_id ||
                     strncmp(all[j].host, all[i].host, sizeof all[i].host) != 0))
      j++;
    c->node_of[i] = j < i ? c->node_of[j] : c->nnodes++;
  }
  c->node = c->node_of[c->rank];
  return TECOMM_SUCCESS;
}
