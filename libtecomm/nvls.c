/* nvls.c -- the NVLS link of the fallback chain: the multicast object of a
 * communicator (NVLink SHARP), made, bound and mapped collectively through
 * the device layer, and undone when any rank cannot.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Order, each step followed by a vote (tc_vote) so every rank knows
 * whether every rank got there, and the first failure's reason:
 *   0. the operator's rule (tecore_mc_allowed): NCCL_NVLS_ENABLE=0 or
 *      TECOMM_NVLS_ENABLE=0 on any rank refuses NVLS before any driver
 *      call (the project's GPU machines set it: multicast there can take
 *      the GPUs out of service);
 *   1. availability: two ranks or more, the IPC workspace (NVLS barriers
 *      use its flags), on cuda the device's multicast attribute and sm_90,
 *      and the multicast granularity (the first multicast driver call);
 *   2. every rank makes its member (a VMM allocation of the region);
 *   3. rank 0 makes the object and sends it to the others (POSIX fd over
 *      the mesh); they import it;
 *   4. every rank adds its device (all before any binding: the driver's
 *      rule);
 *   5. every rank binds its member;
 *   6. every rank maps its member (unicast) and the object (multicast);
 *   7. the region is initialised and a barrier passed.
 * A failure anywhere (unsupported, out of memory, a transient fabric
 * error) undoes this rank's part and every rank stays on IPC, the reason
 * in the log and in tecomm_comm_describe. */
#include "comm_priv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TECORE_TUNABLE_INT(tc_tun_nvls_mb, "TECOMM_NVLS_MB", 32, 0, 1048576,
                   "MiB of each rank's NVLS data buffer (the largest payload the NVLS simple "
                   "allreduce takes; larger ones go to the IPC table); 0: no NVLS")

struct vote_msg {
  int32_t ok;
  char why[252];
};

tecomm_result_t tc_vote(struct tc_boot *b, int ok, const char *why, int *all_ok, char *out,
                        size_t outlen) {
  struct vote_msg mine, *all = calloc((size_t)b->nranks, sizeof mine);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm: out of host memory");
  memset(&mine, 0, sizeof mine);
  mine.ok = ok != 0;
  snprintf(mine.why, sizeof mine.why, "%s", ok ? "" : why ? why : "failed");
  tecomm_result_t r = b->allgather(b, &mine, all, sizeof mine);
  *all_ok = 1;
  for (int i = 0; r == TECOMM_SUCCESS && i < b->nranks; i++)
    if (!all[i].ok) {
      *all_ok = 0;
      snprintf(out, outlen, "rank %d: %.*s", i, (int)sizeof all[i].why - 1, all[i].why);
      break;
    }
  free(all);
  return r;
}

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Undoes this rank's part (whatever of it exists). */
static void nvls_undo(struct tecomm_comm *c, struct tc_nvls *n) {
  if (!n) return;
  if (n->mcva) {
    (void)tecore_vmm_unmap(n->mcva, n->bytes);
    (void)tecore_vmm_free_va(n->mcva, n->bytes);
  }
  if (n->uc) {
    (void)tecore_vmm_unmap(n->uc, n->bytes);
    (void)tecore_vmm_free_va(n->uc, n->bytes);
  }
  if (n->bound) (void)tecore_mc_unbind(n->mc, c->device, 0, n->bytes);
  if (n->mc) (void)tecore_mc_release(n->mc);
  if (n->mem) (void)tecore_vmm_release(n->mem);
  free(n);
}

/* The refusal as describe prints it: the variable, and the ranks it was
 * set on when not all. */
static void refused(struct tecomm_comm *c, const char *first) {
  const char *var = strstr(first, "NCCL_NVLS_ENABLE") ? "NCCL_NVLS_ENABLE=0" : "TECOMM_NVLS_ENABLE=0";
  snprintf(c->nvls_why, sizeof c->nvls_why, "refused (%s)", var);
  TC_INFO("tecomm: NVLS refused before any multicast call: %s; no multicast object is created",
          first);
}

/* Step 1 on this rank: 1 when NVLS can be tried, else why. */
static int available(struct tecomm_comm *c, char *why, size_t len) {
  if (c->nranks < 2) return snprintf(why, len, "one rank"), 0;
  if (!c->ws || c->level > TC_LEVEL_INPLACE || c->n_kernels != c->nranks)
    return snprintf(why, len, "no IPC workspace (NVLS barriers use it)"), 0;
  if (tecore_tunable_int(&tc_tun_nvls_mb) == 0) return snprintf(why, len, "TECOMM_NVLS_MB=0"), 0;
  if (tc_test_fail("nvls", c->rank)) return snprintf(why, len, "TECOMM_TEST_FAIL"), 0;
  if (c->backend == TECORE_BACKEND_CUDA) {
    struct tecore_device_props pr;
    memset(&pr, 0, sizeof pr);
    if (tecore_device_get_props(c->device, &pr) != TECORE_SUCCESS)
      return snprintf(why, len, "device properties: %s", tecore_last_error()), 0;
    if (!pr.multicast_supported)
      return snprintf(why, len, "device %d does not support multicast (attribute or driver < 12.1)",
                      c->device), 0;
    if (pr.cc_major < 9)
      return snprintf(why, len, "device %d is sm_%d%d (multimem needs sm_90)", c->device,
                      pr.cc_major, pr.cc_minor), 0;
  }
  return 1;
}

/* Steps 3 to 6 on this rank, each voted; 0 and why set on the first
 * failed vote (this rank's or a peer's). */
static tecomm_result_t build(struct tecomm_comm *c, struct tc_nvls *n, int *ok, char *why,
                             size_t len) {
  char mine[256] = "";
  int good = 1;
  /* 3: rank 0 makes the object; the others import it */
  int fd = -1;
  if (c->rank == 0) {
    if (tecore_mc_create(n->bytes, c->nranks, 0, &n->mc) != TECORE_SUCCESS ||
        tecore_mc_export_fd(n->mc, &fd) != TECORE_SUCCESS)
      good = 0, snprintf(mine, sizeof mine, "create: %s", tecore_last_error());
  }
  TC_CHECK(tc_vote(c->mesh, good, mine, ok, why, len));
  if (!*ok) goto out;
  tecomm_result_t r = TECOMM_SUCCESS;
  for (int p = 1; c->rank == 0 && p < c->nranks && r == TECOMM_SUCCESS; p++)
    r = tc_mesh_send_fd(c->mesh, p, fd);
  if (c->rank != 0) {
    int pfd = -1;
    r = tc_mesh_recv_fd(c->mesh, 0, &pfd);
    if (r == TECOMM_SUCCESS) {
      if (tecore_mc_import_fd(pfd, &n->mc) != TECORE_SUCCESS)
        good = 0, snprintf(mine, sizeof mine, "import: %s", tecore_last_error());
      close(pfd);
    }
  }
  if (r != TECOMM_SUCCESS) goto out_r;
  TC_CHECK(tc_vote(c->mesh, good, mine, ok, why, len));
  if (!*ok) goto out;
  /* 4: every device joins before anyone binds */
  if (tecore_mc_add_device(n->mc, c->device) != TECORE_SUCCESS)
    good = 0, snprintf(mine, sizeof mine, "add device: %s", tecore_last_error());
  TC_CHECK(tc_vote(c->mesh, good, mine, ok, why, len));
  if (!*ok) goto out;
  /* 5: bind */
  if (tc_test_fail("nvls-bind", c->rank))
    good = 0, snprintf(mine, sizeof mine, "bind: TECOMM_TEST_FAIL");
  else if (tecore_mc_bind_mem(n->mc, 0, n->mem, 0, n->bytes) != TECORE_SUCCESS)
    good = 0, snprintf(mine, sizeof mine, "bind: %s", tecore_last_error());
  else
    n->bound = 1;
  TC_CHECK(tc_vote(c->mesh, good, mine, ok, why, len));
  if (!*ok) goto out;
  /* 6: map the member and the object */
  tecore_devptr_t va = 0;
  if (tecore_vmm_reserve(n->bytes, c->gran, &va) != TECORE_SUCCESS ||
      tecore_vmm_map(va, n->bytes, n->mem, 0) != TECORE_SUCCESS) {
    good = 0, snprintf(mine, sizeof mine, "map member: %s", tecore_last_error());
    if (va) (void)tecore_vmm_free_va(va, n->bytes);
  } else {
    n->uc = va;
    if (tecore_vmm_set_access(va, n->bytes, c->device) != TECORE_SUCCESS)
      good = 0, snprintf(mine, sizeof mine, "access member: %s", tecore_last_error());
  }
  va = 0;
  if (good && (tecore_vmm_reserve(n->bytes, c->gran, &va) != TECORE_SUCCESS ||
               tecore_vmm_map(va, n->bytes, n->mc, 0) != TECORE_SUCCESS)) {
    good = 0, snprintf(mine, sizeof mine, "map multicast: %s", tecore_last_error());
    if (va) (void)tecore_vmm_free_va(va, n->bytes);
  } else if (good) {
    n->mcva = va;
    if (tecore_vmm_set_access(va, n->bytes, c->device) != TECORE_SUCCESS)
      good = 0, snprintf(mine, sizeof mine, "access multicast: %s", tecore_last_error());
  }
  TC_CHECK(tc_vote(c->mesh, good, mine, ok, why, len));
out:
  if (fd >= 0) close(fd);
  return TECOMM_SUCCESS;
out_r:
  if (fd >= 0) close(fd);
  return r;
}

tecomm_result_t tc_nvls_open(struct tecomm_comm *c, tecore_stream_t st) {
  char mine[256] = "", why[300] = "";
  int ok = 0;
  c->nvls = NULL;
  if (!c->mesh || !c->all_local) {
    snprintf(c->nvls_why, sizeof c->nvls_why, "off (the ranks are not on one host)");
    return TECOMM_SUCCESS;
  }
  /* 0: the operator's rule, before anything reaches the driver */
  int allowed = tecore_mc_allowed() == TECORE_SUCCESS;
  if (!allowed) snprintf(mine, sizeof mine, "%s", tecore_last_error());
  TC_CHECK(tc_vote(c->mesh, allowed, mine, &ok, why, sizeof why));
  if (!ok) {
    refused(c, why);
    return TECOMM_SUCCESS;
  }
  /* 1: can this rank try, and the granularity every rank can use */
  int good = available(c, mine, sizeof mine);
  size_t data = (size_t)tecore_tunable_int(&tc_tun_nvls_mb) << 20;
  size_t need = tc_ar_nvls_bytes(c->nranks, c->ws_max_bytes, data);
  size_t g = 0, vg = 0;
  if (good && need == 0) good = 0, snprintf(mine, sizeof mine, "region size overflows");
  if (good && (tecore_mc_granularity(need, c->nranks, &g) != TECORE_SUCCESS ||
               tecore_vmm_granularity(&vg, 0) != TECORE_SUCCESS))
    good = 0, snprintf(mine, sizeof mine, "granularity: %s", tecore_last_error());
  uint64_t gmine = g > vg ? g : vg, *gall = calloc((size_t)c->nranks, sizeof *gall);
  if (!gall) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  tecomm_result_t r = c->mesh->allgather(c->mesh, &gmine, gall, sizeof gmine);
  for (int i = 0; r == TECOMM_SUCCESS && i < c->nranks; i++)
    if (gall[i] > g) g = (size_t)gall[i];
  free(gall);
  TC_CHECK(r);
  if (g < c->gran) g = c->gran;
  TC_CHECK(tc_vote(c->mesh, good, mine, &ok, why, sizeof why));
  if (!ok) goto off;
  /* 2: every rank's member */
  struct tc_nvls *n = calloc(1, sizeof *n);
  good = n != NULL;
  if (!n) snprintf(mine, sizeof mine, "out of host memory");
  if (n) {
    n->bytes = round_up(need, g);
    n->data_bytes = data;
    if (tecore_vmm_create(n->bytes, 0, &n->mem) != TECORE_SUCCESS)
      good = 0, n->mem = 0, snprintf(mine, sizeof mine, "member: %s", tecore_last_error());
  }
  r = tc_vote(c->mesh, good, mine, &ok, why, sizeof why);
  if (r == TECOMM_SUCCESS && ok) r = build(c, n, &ok, why, sizeof why);
  if (r == TECOMM_SUCCESS && ok) {
    /* 7: the region's words, then nobody stores into a peer's member
     * before its owner initialised it */
    r = tc_core(tc_ar_nvls_init(n->uc, c->nranks, c->ws_max_bytes, st), "NVLS region");
    if (r == TECOMM_SUCCESS) r = tc_core(tecore_stream_synchronize(st), "NVLS region");
    if (r == TECOMM_SUCCESS) r = c->mesh->barrier(c->mesh);
  }
  if (r != TECOMM_SUCCESS || !ok) {
    /* no rank may unbind while a peer still binds or maps: wait for all */
    tecomm_result_t br = r == TECOMM_SUCCESS ? c->mesh->barrier(c->mesh) : r;
    nvls_undo(c, n);
    TC_CHECK(br);
    if (r != TECOMM_SUCCESS) return r;
    goto off;
  }
  c->nvls = n;
  snprintf(c->nvls_why, sizeof c->nvls_why,
           "on (multicast object of %zu KiB per rank: simple up to %zu KiB, Lamport up to %zu KiB)",
           n->bytes >> 10, data >> 10, c->ws_max_bytes >> 10);
  TC_INFO("tecomm: rank %d: NVLS %s", c->rank, c->nvls_why);
  return TECOMM_SUCCESS;
off:
  snprintf(c->nvls_why, sizeof c->nvls_why, "off (%.300s)", why);
  TC_INFO("tecomm: NVLS is off on every rank, they stay on IPC: %s", why);
  return TECOMM_SUCCESS;
}

void tc_nvls_close(struct tecomm_comm *c) {
  nvls_undo(c, c->nvls);
  c->nvls = NULL;
}
