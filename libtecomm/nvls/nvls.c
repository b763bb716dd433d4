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
#include "level.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

TECORE_TUNABLE_INT(tc_tun_nvls_mb, "TECOMM_NVLS_MB", 32, 0, 1048576,
                   "MiB of each rank's NVLS data buffer (the largest payload the NVLS simple "
                   "allreduce takes; larger ones go to the IPC table); 0: no NVLS")

/* The level's state: the communicator's multicast region. */
struct tc_nvls {
  tecore_mc_handle_t mc;
  tecore_vmm_handle_t mem;   /* this rank's member */
  tecore_devptr_t uc, mcva;  /* its unicast mapping; the multicast mapping */
  size_t bytes;              /* of the region (each mapping) */
  size_t data_bytes;         /* the simple protocol's buffer: its size bound */
  int bound;
};

#define WHY(c) ((c)->lv_why[TC_LV_NVLS])
static struct tc_nvls *state(const struct tecomm_comm *c) { return c->lv[TC_LV_NVLS]; }

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
  snprintf(WHY(c), sizeof WHY(c), "refused (%s)", var);
  TC_INFO("tecomm: NVLS refused before any multicast call: %s; no multicast object is created",
          first);
}

/* Step 1 on this rank: 1 when NVLS can be tried, else why. */
static int available(struct tecomm_comm *c, char *why, size_t len) {
  if (c->nranks < 2) return snprintf(why, len, "one rank"), 0;
  if (!c->ws.me || c->level > TC_LEVEL_INPLACE || c->n_kernels != c->nranks)
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

static tecomm_result_t nvls_open(struct tecomm_comm *c, const struct tc_caps *all,
                                 tecore_stream_t st) {
  (void)all;
  char mine[256] = "", why[300] = "";
  int ok = 0;
  c->lv[TC_LV_NVLS] = NULL;
  if (!c->mesh || !c->all_local) {
    snprintf(WHY(c), sizeof WHY(c), "off (the ranks are not on one host)");
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
  size_t need = tc_ar_nvls_bytes(c->nranks, c->ws.max_bytes, data);
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
    r = tc_core(tc_ar_nvls_init(n->uc, c->nranks, c->ws.max_bytes, st), "NVLS region");
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
  c->lv[TC_LV_NVLS] = n;
  snprintf(WHY(c), sizeof WHY(c),
           "on (multicast object of %zu KiB per rank: simple up to %zu KiB, Lamport up to %zu KiB)",
           n->bytes >> 10, data >> 10, c->ws.max_bytes >> 10);
  TC_INFO("tecomm: rank %d: NVLS %s", c->rank, WHY(c));
  return TECOMM_SUCCESS;
off:
  snprintf(WHY(c), sizeof WHY(c), "off (%.300s)", why);
  TC_INFO("tecomm: NVLS is off on every rank, they stay on IPC: %s", why);
  return TECOMM_SUCCESS;
}

static void nvls_close(struct tecomm_comm *c) {
  nvls_undo(c, state(c));
  c->lv[TC_LV_NVLS] = NULL;
}

/* Why the NVLS algorithm a cannot run the call ("" when it can). */
static const char *cannot(struct tecomm_comm *c, tecomm_algo_t a, const struct tc_call_facts *f) {
  const struct tc_nvls *n = state(c);
  if (!n) return "NVLS is off";
  if (!f->sum) return "NVLS reduces with SUM only";
  if (a == TECOMM_ALGO_NVLS) return f->bytes > n->data_bytes ? "larger than TECOMM_NVLS_MB" : "";
  if (f->bytes > c->ws.max_bytes) return "larger than the Lamport buffers";
  if (!f->fused_lamport_ok) return "fused Lamport needs hidden % 8 == 0 and 16-byte alignment";
  return "";
}

/* The table (SUM only): NVLS Lamport up to the table's Lamport edge,
 * NVLS simple up to its buffer. */
static tecomm_result_t nvls_pick(struct tecomm_comm *c, tecomm_algo_t asked,
                                 const struct tc_call_facts *f, tecomm_algo_t *algo) {
  if (asked != TECOMM_ALGO_AUTO) {
    const char *why = cannot(c, asked, f);
    if (*why)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "algorithm %s cannot run %zu bytes: %s (%s)",
                    tc_algo_name(asked), f->bytes, why, WHY(c));
    *algo = asked;
    return TECOMM_SUCCESS;
  }
  size_t lam, one;
  tc_table_edges(c->nranks, &lam, &one);
  *algo = TECOMM_ALGO_AUTO;
  if (!state(c)) return TECOMM_SUCCESS;
  if (f->bytes <= lam && !*cannot(c, TECOMM_ALGO_NVLS_LAMPORT, f))
    *algo = TECOMM_ALGO_NVLS_LAMPORT;
  else if (!*cannot(c, TECOMM_ALGO_NVLS, f))
    *algo = TECOMM_ALGO_NVLS;
  return TECOMM_SUCCESS;
}

/* The kernels on the multicast region; the IPC workspaces keep the
 * barriers. */
static tecomm_result_t nvls_run(struct tecomm_comm *c, const struct tc_call *k) {
  const struct tc_nvls *n = state(c);
  struct tc_call kn = *k;
  kn.nvls_uc = n->uc;
  kn.nvls_mc = n->mcva;
  kn.nvls_data_bytes = n->data_bytes;
  kn.seg = NULL; /* both read only in[rank], wherever it is */
  return tc_run_kernel(c, &kn);
}

static void nvls_describe(struct tecomm_comm *c, struct tc_text *t) {
  tc_put(t, "nvls: %s\n", WHY(c)[0] ? WHY(c) : "off");
  const struct tc_nvls *n = state(c);
  if (!n) return;
  size_t lam, one;
  tc_table_edges(c->nranks, &lam, &one);
  if (c->ws.max_bytes < lam) lam = c->ws.max_bytes;
  tc_put(t, "table above ipc (SUM): nvls-lamport <= %zu KiB, nvls <= %zu KiB, then the ipc table\n",
         lam / 1024, n->data_bytes / 1024);
}

const struct tc_level tc_level_nvls = {
    .name = "nvls",
    .chain = "nvls (lamport, simple)",
    .hosts = TC_ONE_HOST,
    .why_in = TC_WHY_LOGGED,
    .why_name = "nvls",
    .open = nvls_open,
    .close = nvls_close,
    .pick = nvls_pick,
    .run = nvls_run,
    .describe = nvls_describe,
};
