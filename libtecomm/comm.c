/* SPDX-License-Identifier: Apache-2.0 */
/* comm.c -- communicators: init (bootstrap, capabilities allgathered, the
 * local mesh, NCCL, the pool, one place in the fallback chain for every
 * rank), split, destroy, abort, status.
 *
 * Why every decision is made from allgathered facts: a rank that chose
 * IPC while a peer chose NCCL would wait for that peer forever (bounded
 * only by TECOMM_TIMEOUT).  So each rank reports what it can do, every
 * rank sees every report, and each computes the same function of them. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "level.h"
#include "te_handles.h"
#include "te_sha256.h"
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* The sizes of a communicator's pool and Lamport buffers. */
TECORE_TUNABLE_INT(tc_tun_pool_mb, "TECOMM_POOL_MB", 256, 0, 16777216,
                   "MiB of each rank's symmetric pool for tecomm_mem_alloc and staged allreduce "
                   "inputs (the kernels' workspace comes on top); 0: no pool")
TECORE_TUNABLE_INT(tc_tun_max_tokens, "TECOMM_MAX_TOKENS", 64, 1, 1048576,
                   "tokens (rows) the Lamport buffers are sized for: Lamport runs up to "
                   "TECOMM_MAX_TOKENS x TECOMM_MAX_HIDDEN elements of 4 bytes")
TECORE_TUNABLE_INT(tc_tun_max_hidden, "TECOMM_MAX_HIDDEN", 8192, 1, 1048576,
                   "hidden size the Lamport buffers are sized for (with TECOMM_MAX_TOKENS)")
static uint64_t hash64(const void *p, size_t n, uint64_t h) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull; /* FNV-1a */
  return h;
}

static uint64_t random_nonce(void) {
  uint64_t x = 0;
  int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    if (read(fd, &x, sizeof x) != (ssize_t)sizeof x) x = 0;
    close(fd);
  }
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  uint64_t t = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
  x ^= hash64(&t, sizeof t, 0xcbf29ce484222325ull) ^ ((uint64_t)getpid() << 32);
  return x ? x : 1;   /* 0 means "no seed" (check_identities) */
}

static void host_identity(struct tc_caps *k, tecore_backend_t backend) {
  if (gethostname(k->host, sizeof k->host - 1) != 0) snprintf(k->host, sizeof k->host, "?");
  int64_t node = tc_vdev_node();
  if (node >= 0 && backend == TECORE_BACKEND_VDEV) {
    size_t l = strnlen(k->host, 40);
    snprintf(k->host + l, sizeof k->host - l, "/vdev-node-%lld", (long long)node);
  } else if (node >= 0) {
    TC_WARN("tecomm: TECOMM_VDEV_NODE=%lld ignored: the backend is not vdev", (long long)node);
  }
  uint64_t machine = tc_machine_id();
  k->boot_id =
      hash64(&machine, sizeof machine, hash64(k->host, strlen(k->host), 0xcbf29ce484222325ull));
}

/* What the hierarchy's levels may do with a node-local group: make,
 * free and abort one, check its health, run its allreduce and all-gather
 * (verbs_hier.c), without calling up into this file, allreduce.c or
 * coll.c. */
static tecomm_result_t child_make(struct tecomm_comm *parent, uint64_t tag, int me, int n,
                                  int no_verbs, struct tecomm_comm **out);
static void child_free(struct tecomm_comm *c);
static void child_abort(struct tecomm_comm *c);
static const struct tc_group_ops group_ops = {
    .make = child_make,
    .free = child_free,
    .abort = child_abort,
    .ready = tc_comm_ready,
    .allreduce = tc_allreduce_group,
    .allgather = tc_allgather_group,
};

static void comm_free(struct tecomm_comm *c) {
  if (!c) return;
  if (c->ov_free) c->ov_free(c);
  tc_levels_close(c);
  if (c->scratch) (void)tecore_mem_free(c->scratch);
  if (c->ce_scratch) (void)tecore_mem_free(c->ce_scratch);
  for (int i = 0; i < c->n_ce_old; i++) (void)tecore_mem_free(c->ce_old[i]);
  if (c->al_scratch) (void)tecore_mem_free(c->al_scratch);
  for (int i = 0; i < c->n_al_old; i++) (void)tecore_mem_free(c->al_old[i]);
  free(c->node_of);
  while (c->segs) tc_seg_destroy(c, c->segs);
  tc_boot_close(c->mesh);
  tc_boot_close(c->world);
  te_wipe(c->secret, sizeof c->secret);
  free(c);
}

/* Everything after the rank set is known: shared by init and split.  The
 * facts every rank reported are counted, the symmetric memory (pool and
 * the kernels' workspace) made where IPC can run, then the levels open
 * in the chain's order (levels.c), each reading the reports' fields of
 * its own (nccl: whose NCCL joins whose). */
static tecomm_result_t comm_start(struct tecomm_comm *c, const struct tc_caps *all) {
  tecore_stream_t st = NULL;
  c->n_vmm_fd = c->n_kernels = 0;
  for (int i = 0; i < c->nranks; i++) {
    c->n_vmm_fd += all[i].vmm_fd != 0;
    c->n_kernels += all[i].kernels != 0;
  }
  c->level = TC_LEVEL_NONE;
  snprintf(c->level_why, sizeof c->level_why, "no IPC and no NCCL");
  if (c->all_local) {
    /* P2P between every pair of devices, each rank for its own view */
    int can_all = 1;
    for (int i = 0; i < c->nranks; i++) {
      if (all[i].device == c->device) continue;
      int can = 0, link = 0;
      if (tecore_device_peer(c->device, all[i].device, &can, &link) != TECORE_SUCCESS || !can)
        can_all = 0;
    }
    TC_CHECK(tc_count_all(c->xchg, can_all, &c->n_p2p));
  }
  TC_CORE(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &st), "tecomm_comm_init: stream");
  c->ws.max_bytes = (size_t)tecore_tunable_int(&tc_tun_max_tokens) *
                    (size_t)tecore_tunable_int(&tc_tun_max_hidden) * 4;
  tecomm_result_t r = tc_symm_open(c, (size_t)tecore_tunable_int(&tc_tun_pool_mb), st);
  if (r == TECOMM_SUCCESS) r = tc_levels_open(c, all, st);
  if (r == TECOMM_SUCCESS) tc_level_log(c);
  (void)tecore_stream_synchronize(st);
  (void)tecore_stream_destroy(st);
  return r;
}

/* An allgather of init's facts, all poisoned first: a bootstrap that
 * leaves some rank's block unwritten (a caller's allgather that fills
 * only its own) would otherwise pass stale or zero facts for a success. */
static tecomm_result_t gather_caps(struct tecomm_comm *c, struct tc_caps *k, struct tc_caps *all,
                                   const char *round) {
  static const char fn[] = "tecomm_comm_init";
  k->rank = c->rank;
  memset(all, 0xa5, (size_t)c->nranks * sizeof *all);
  TC_CHECK(c->world->allgather(c->world, k, all, sizeof *k));
  for (int i = 0; i < c->nranks; i++)
    if (all[i].rank != i)
      return TC_ERR(TECOMM_ERR_BOOTSTRAP,
                    "%s: the bootstrap's allgather (%s, %s) did not fill rank %d's block of %zu "
                    "bytes (%s): an allgather must give every rank every rank's block, rank r's "
                    "at r * bytes", fn, c->world->kind, round, i, sizeof *k,
                    all[i].rank == (int32_t)0xa5a5a5a5u ? "it was left unwritten"
                                                          : "it holds another rank's");
  return TECOMM_SUCCESS;
}

/* Round 1's facts from the wire: every host name ends within its field,
 * and rank 0 drew a seed (the same verdict on every rank: all have the
 * same bytes). */
static tecomm_result_t check_identities(struct tc_caps *all, int n) {
  static const char fn[] = "tecomm_comm_init";
  if (all[0].nonce == 0)
    return TC_ERR(TECOMM_ERR_SYSTEM, "%s: rank 0 could not draw the communicator's secret "
                  "(/dev/urandom)", fn);
  for (int i = 0; i < n; i++)
    if (!tc_wire_str_ok(all[i].host, sizeof all[i].host))
      return TC_ERR(TECOMM_ERR_BOOTSTRAP, "%s: rank %d's host name is not NUL-terminated within "
                    "%zu bytes (a broken bootstrap, or not a rank of this job)", fn, i,
                    sizeof all[i].host);
  return TECOMM_SUCCESS;
}

static void my_caps(struct tecomm_comm *c, struct tc_caps *k) {
  struct tecore_device_props pr;
  memset(&pr, 0, sizeof pr);
  (void)tecore_device_get_props(c->device, &pr);
  k->device = c->device;
  k->vmm_fd = pr.vmm_supported && pr.posix_fd_handles;
  tc_levels_caps(c, k);
  k->kernels = tc_ar_kernels_register() == TECORE_SUCCESS &&
               tc_ar_max_bytes(TC_AR_ONESHOT, c->nranks < 2 ? 2 : c->nranks,
                                   1u << 20) > 0;
  k->backend = (int32_t)c->backend;
}

TE_EXPORT tecomm_result_t tecomm_comm_init(int rank, int nranks, int device,
                                           const struct tecomm_bootstrap *bootstrap,
                                           tecomm_comm_t *comm) {
  static const char fn[] = "tecomm_comm_init";
  TC_ARG(comm, "%s: comm is NULL", fn);
  *comm = NULL;
  TC_ARG(nranks == -1 || nranks >= 1, "%s: nranks (%d) must be >= 1 or -1", fn, nranks);
  TC_ARG(rank == -1 || (rank >= 0 && (nranks < 0 || rank < nranks)),
         "%s: rank (%d) must be in [0, nranks %d) or -1", fn, rank, nranks);
  TC_ARG(device >= -1, "%s: device (%d) must be an ordinal or -1", fn, device);
  TC_CORE(tecore_init(), fn);
  struct tecomm_comm *c = calloc(1, sizeof *c);
  if (!c) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  c->groups = &group_ops;
  c->sticky_peer = -1;
  c->creator = (long)getpid();
  TC_CORE(tecore_backend(&c->backend), fn);
  struct tc_caps *all = NULL;
  tecomm_result_t r = tc_boot_open(bootstrap, &rank, &nranks, &c->world);
  if (r != TECOMM_SUCCESS) goto fail;
  c->rank = rank;
  c->nranks = nranks;
  c->xchg = c->world;
  all = calloc((size_t)nranks, sizeof *all);
  if (!all) {
    r = TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
    goto fail;
  }
  /* round 1: where each rank lives, so device -1 can become the local rank */
  struct tc_caps k;
  memset(&k, 0, sizeof k);
  host_identity(&k, c->backend);
  tc_node_map_identity(k.host, sizeof k.host, &k.boot_id, rank);   /* TECOMM_NODE_MAP */
  k.nonce = random_nonce();
  /* rank 0's seed makes the secret; a rank 0 without one says so with a
   * zero nonce, so every rank fails together instead of waiting */
  if (rank == 0 && tc_random_bytes(k.seed, sizeof k.seed) != 0) k.nonce = 0;
  if ((r = gather_caps(c, &k, all, "round 1")) != TECOMM_SUCCESS) goto fail;
  te_wipe(k.seed, sizeof k.seed);
  if ((r = check_identities(all, nranks)) != TECOMM_SUCCESS) goto fail;
  int local_rank = 0;
  c->all_local = 1;
  for (int i = 0; i < nranks; i++) {
    int same = all[i].boot_id == k.boot_id && strncmp(all[i].host, k.host, sizeof k.host) == 0;
    if (same && i < rank) local_rank++;
    if (all[i].boot_id != all[0].boot_id ||
        strncmp(all[i].host, all[0].host, sizeof all[0].host) != 0)
      c->all_local = 0;
  }
  c->tag = all[0].nonce;
  /* the TCP rendezvous's seed crossed the network: the secret is keyed
   * by the job's; the caller's bootstraps carry it as it is */
  if (c->world->keyed)
    tc_auth_derive(c->world->key, "tecomm communicator", all[0].seed, sizeof all[0].seed,
                   c->secret);
  else
    memcpy(c->secret, all[0].seed, sizeof c->secret);
  for (int i = 0; i < nranks; i++) te_wipe(all[i].seed, sizeof all[i].seed);
  if ((r = tc_nodes_find(c, all)) != TECOMM_SUCCESS) goto fail;
  if (device < 0) {
    int count = 0;
    if (tecore_device_count(&count) != TECORE_SUCCESS || count < 1) count = 1;
    device = local_rank % count;
  }
  c->device = device;
  tecore_result_t cr = tecore_ctx_create(device, &c->ctx);
  if (cr != TECORE_SUCCESS) {
    r = tc_core(cr, "tecomm_comm_init: device");
    c->ctx = NULL;
    /* the others must not wait for this rank: they learn it in round 2 */
  }
  /* round 2: what each rank can do */
  memset(&k, 0, sizeof k);
  if (c->ctx) my_caps(c, &k);
  else k.device = -1;
  tecomm_result_t r2 = gather_caps(c, &k, all, "round 2");
  if (r != TECOMM_SUCCESS) goto fail;
  if ((r = r2) != TECOMM_SUCCESS) goto fail;
  for (int i = 0; i < nranks; i++)
    if (all[i].device < 0) {
      r = TC_ERR(TECOMM_ERR_DEVICE, "%s: rank %d could not open its device", fn, i);
      goto fail;
    }
  if (c->all_local) {
    if ((r = tc_mesh_open(c->secret, c->tag, rank, nranks, &c->mesh)) != TECOMM_SUCCESS)
      goto fail;
    /* the caller's bootstrap is no longer needed: its callbacks may go */
    tc_boot_close(c->world);
    c->world = NULL;
    c->xchg = c->mesh;
  }
  if ((r = comm_start(c, all)) != TECOMM_SUCCESS) goto fail;
  if (te_handle_add(c) != 0) {
    r = TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
    goto fail;
  }
  free(all);
  *comm = c;
  return TECOMM_SUCCESS;
fail:
  free(all);
  tecore_ctx_t ctx = c->ctx;
  comm_free(c);
  if (ctx) (void)tecore_ctx_destroy(ctx);
  return r;
}

static void child_free(struct tecomm_comm *c) { comm_free(c); }

static tecomm_result_t child_make(struct tecomm_comm *parent, uint64_t tag, int me, int n,
                                  int no_verbs, struct tecomm_comm **out) {
  *out = NULL;
  struct tecomm_comm *c = calloc(1, sizeof *c);
  struct tc_caps *caps = calloc((size_t)n, sizeof *caps);
  if (!c || !caps) {
    free(c);
    free(caps);
    return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of host memory");
  }
  c->groups = &group_ops;
  c->sticky_peer = -1;
  c->creator = (long)getpid();
  c->rank = me;
  c->nranks = n;
  c->device = parent->device;
  c->backend = parent->backend;
  c->all_local = 1;
  c->no_verbs = no_verbs;
  c->ctx = NULL; /* the parent's context; it stays the parent's */
  c->tag = tag;
  /* the child's secret: the parent's, keyed with the child's tag (which
   * mixes the split's sequence number and color, or the node) */
  tc_auth_derive(parent->secret, "tecomm child", &tag, sizeof tag, c->secret);
  tecomm_result_t r = tc_mesh_open(c->secret, c->tag, me, n, &c->mesh);
  if (r == TECOMM_SUCCESS) {
    c->xchg = c->mesh;
    struct tc_caps k;
    memset(&k, 0, sizeof k);
    my_caps(c, &k);
    r = c->mesh->allgather(c->mesh, &k, caps, sizeof k);
  }
  if (r == TECOMM_SUCCESS) r = comm_start(c, caps);
  free(caps);
  if (r != TECOMM_SUCCESS) {
    comm_free(c);
    return r;
  }
  *out = c;
  return TECOMM_SUCCESS;
}

TE_EXPORT tecomm_result_t tecomm_comm_split(tecomm_comm_t comm, int color, int key,
                                            tecomm_comm_t *newcomm) {
  static const char fn[] = "tecomm_comm_split";
  TC_COMM(comm, fn);
  TC_ARG(newcomm, "%s: newcomm is NULL", fn);
  TC_ARG(color >= 0 || color == TECOMM_SPLIT_NONE, "%s: color (%d) must be >= 0 or TECOMM_SPLIT_NONE",
         fn, color);
  *newcomm = NULL;
  TC_CHECK(tc_comm_ready(comm, fn, 0));
  struct entry {
    int32_t color, key, rank, device;
  } mine = {color, key, comm->rank, comm->device}, *all = calloc((size_t)comm->nranks, sizeof mine);
  if (!all) return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  tecomm_result_t r = comm->xchg->allgather(comm->xchg, &mine, all, sizeof mine);
  unsigned seq = comm->nsplits++;
  if (r != TECOMM_SUCCESS || color == TECOMM_SPLIT_NONE) {
    free(all);
    return tc_comm_fail(comm, r);
  }
  if (!comm->all_local) {
    free(all);
    return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: the ranks span hosts; groups must lie on one host",
                  fn);
  }
  /* members of my color, ordered by (key, parent rank) */
  int n = 0, me = 0;
  struct entry *g = calloc((size_t)comm->nranks, sizeof *g);
  if (!g) {
    free(all);
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  }
  for (int i = 0; i < comm->nranks; i++)
    if (all[i].color == color) {
      int j = n++;
      while (j > 0 && (g[j - 1].key > all[i].key ||
                       (g[j - 1].key == all[i].key && g[j - 1].rank > all[i].rank))) {
        g[j] = g[j - 1];
        j--;
      }
      g[j] = all[i];
    }
  for (int i = 0; i < n; i++)
    if (g[i].rank == comm->rank) me = i;
  uint64_t mix[3] = {comm->tag, seq, (uint64_t)color};
  free(all);
  free(g);
  struct tecomm_comm *c = NULL;
  r = child_make(comm, hash64(mix, sizeof mix, 0xcbf29ce484222325ull), me, n, 0, &c);
  if (r != TECOMM_SUCCESS) return tc_comm_fail(comm, r);
  if (te_handle_add(c) != 0) {
    child_free(c);
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *newcomm = c;
  return TECOMM_SUCCESS;
}

/* destroy's wait for the device: every stream of the context drained.  A
 * sticky error an earlier operation left on a stream (an illegal address,
 * an expired wait) is that stream's, reported to its user by the stream's
 * own synchronize; it says nothing of the communicator, and the wait is
 * over all the same (vdev drains every stream first; a CUDA context with
 * such an error runs nothing more), so destroy goes on and succeeds.  Any
 * other failure is returned with its detail. */
static tecomm_result_t destroy_wait(void) {
  tecore_result_t cr = tecore_ctx_synchronize();
  if (cr == TECORE_ERR_ILLEGAL_ADDRESS || cr == TECORE_ERR_TIMEOUT) {
    TC_INFO("tecomm_comm_destroy: a stream keeps an earlier failure (%s), not the "
            "communicator's: %s", tecore_result_name(cr), tecore_last_error());
    tecore_clear_error();
    return TECOMM_SUCCESS;
  }
  return cr == TECORE_SUCCESS ? TECOMM_SUCCESS
                              : tc_core(cr, "tecomm_comm_destroy: waiting for the device");
}

TE_EXPORT tecomm_result_t tecomm_comm_destroy(tecomm_comm_t comm) {
  static const char fn[] = "tecomm_comm_destroy";
  if (!comm) return TECOMM_SUCCESS;
  TC_COMM(comm, fn);
  te_handle_del(comm);
  int64_t t0 = tc_now_ms();
  tecomm_result_t r = destroy_wait();
  int64_t t_wait = tc_now_ms() - t0;
  char why[TE_UPPER_DETAIL_MAX] = "";
  if (r != TECOMM_SUCCESS) snprintf(why, sizeof why, "%s", tecore_last_error());
  /* a communicator that failed (a collective timed out, mismatched or was
   * aborted, a verbs connection failed, the node's group was stopped),
   * seen after the wait, since a failed collective reports on the device
   * once its TECOMM_TIMEOUT is over: no barrier.  Its peers failed too and
   * skip it (a hierarchy's leaders see the verbs failure, the other ranks
   * their stopped group), or are gone: it would only wait for them until
   * the bootstrap gave up. */
  int failed = tc_comm_ready(comm, fn, 2) != TECOMM_SUCCESS;
  tecore_clear_error();
  /* no rank may unmap its pool while a peer's kernel still reads it */
  if (comm->xchg && !comm->aborted && !failed) {
    tecomm_result_t br = comm->xchg->barrier(comm->xchg);
    if (r == TECOMM_SUCCESS && br != TECOMM_SUCCESS) {
      r = br;
      snprintf(why, sizeof why, "%s", tecore_last_error());
    }
  }
  tecore_ctx_t ctx = comm->ctx;
  int64_t t_free = tc_now_ms();
  comm_free(comm);
  if (ctx) (void)tecore_ctx_destroy(ctx);
  TC_INFO("tecomm_comm_destroy: %lld ms (device wait %lld, barrier %lld, freeing %lld)",
          (long long)(tc_now_ms() - t0), (long long)t_wait, (long long)(t_free - t0 - t_wait),
          (long long)(tc_now_ms() - t_free));
  /* the detail of the failure returned, not what freeing left there */
  if (r != TECOMM_SUCCESS) tecore_set_error("%s", why);
  return r;
}

/* Abort, for the communicator (and, through the levels, a node-local
 * group: the verbs level's). */
static tecomm_result_t comm_abort(struct tecomm_comm *comm) {
  comm->aborted = 1;
  tecomm_result_t r = TECOMM_SUCCESS;
  if (comm->ws.me) {
    tecore_result_t cr = tc_ar_abort(comm->ws.me);
    if (cr != TECORE_SUCCESS) r = tc_core(cr, "tecomm_comm_abort");
  }
  tc_levels_abort(comm);
  TC_INFO("tecomm: rank %d of %d aborted", comm->rank, comm->nranks);
  return r;
}

static void child_abort(struct tecomm_comm *c) { (void)comm_abort(c); }

TE_EXPORT tecomm_result_t tecomm_comm_abort(tecomm_comm_t comm) {
  TC_COMM(comm, "tecomm_comm_abort");
  return comm_abort(comm);
}

TE_EXPORT tecomm_result_t tecomm_comm_status(tecomm_comm_t comm, int *peer) {
  TC_COMM(comm, "tecomm_comm_status");
  if (peer) *peer = -1;
  tecomm_result_t r = tc_comm_ready(comm, "tecomm_comm_status", 2);
  if (peer && (r == TECOMM_ERR_TIMEOUT || r == TECOMM_ERR_MISMATCH)) *peer = comm->sticky_peer;
  /* a mismatch names its peer itself (agree.c), and so does a timeout
   * the ranks agreed on or the kernels' word reported; otherwise the
   * verbs endpoint's or the node's failure names theirs (a node's
   * leader only stands for the rank that failed behind it) */
  int transport = r != TECOMM_SUCCESS && r != TECOMM_ERR_MISMATCH;
  int lp = transport ? tc_levels_failed_peer(comm) : -1;
  if (peer && lp >= 0 && *peer < 0) *peer = lp;
  /* a timeout no level named a rank for came from the host exchange (a
   * staged call's, or the host agreement's): the rank it waited for */
  if (peer && *peer < 0 && r == TECOMM_ERR_TIMEOUT && comm->xchg)
    *peer = comm->xchg->failed_peer;
  return r;
}

TE_EXPORT tecomm_result_t tecomm_comm_rank(tecomm_comm_t comm, int *rank, int *nranks, int *device) {
  TC_COMM(comm, "tecomm_comm_rank");
  if (rank) *rank = comm->rank;
  if (nranks) *nranks = comm->nranks;
  if (device) *device = comm->device;
  return TECOMM_SUCCESS;
}
