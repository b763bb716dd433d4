/* verbs_conn.c -- opening a verbs endpoint (verbs_priv.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * The device and port, protection domain, completion queue, registered
 * staging buffers, one RC queue pair per peer, the exchange of connection
 * data over the communicator's host transport, and the INIT -> RTR -> RTS
 * transitions.  Every rank learns whether every rank succeeded, so all
 * agree. */
#include "verbs_ep.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

TECORE_TUNABLE_STR(tc_tun_verbs_device, "TECOMM_VERBS_DEVICE", "", NULL,
                   "RDMA device (and optional :port) the verbs path uses, e.g. mlx5_0:1 or "
                   "rxe0; empty: the first device with an active port")
TECORE_TUNABLE_INT(tc_tun_verbs_gid, "TECOMM_VERBS_GID_INDEX", -1, -1, 1023,
                   "GID index of the verbs path's port; -1: the first IPv4-mapped GID "
                   "(RoCE v2) if any, else 0")
TECORE_TUNABLE_INT(tc_tun_verbs_timeout, "TECOMM_VERBS_TIMEOUT", 20, 1, 31,
                   "RC queue pair timeout exponent (4.096 us x 2^value per try; NCCL's "
                   "default 20 is about 4.3 s)")
TECORE_TUNABLE_INT(tc_tun_verbs_retry, "TECOMM_VERBS_RETRY", 7, 0, 7,
                   "RC queue pair retry count before a send fails (NCCL's default 7)")
TECORE_TUNABLE_INT(tc_tun_verbs_chunk_kb, "TECOMM_VERBS_CHUNK_KB", 256, 4, 8192,
                   "KiB of one verbs chunk (a receive slot; 4 slots per peer): at most 8192, "
                   "rxe's largest message")
TECORE_TUNABLE_STR(tc_tun_verbs_fault, "TECOMM_VERBS_FAULT", "", NULL,
                   "debug: \"mr\" makes every rank's memory registration fail, \"mr:R\" rank "
                   "R's only (the verbs path then reports it and is not used); \"wc:N\" makes "
                   "the Nth work completion every rank polls report an error, \"wc:N:R\" rank "
                   "R's only")

#ifdef TE_HAVE_VERBS

tecomm_result_t tc_vb_fail(tc_vb_t *vb, tecomm_result_t code, int peer, const char *fmt, ...) {
  if (__atomic_load_n(&vb->err, __ATOMIC_ACQUIRE) == TECOMM_SUCCESS) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(vb->errmsg, sizeof vb->errmsg, fmt, ap);
    va_end(ap);
    vb->err_peer = peer >= 0 && peer < vb->nranks ? vb->world_of[peer] : -1;
    __atomic_store_n(&vb->err, (int)code, __ATOMIC_RELEASE);   /* after the detail */
    TC_WARN("verbs: %s", vb->errmsg);
    /* a failed endpoint stops: its queue pairs go to the error state, so
     * that its peers learn of it at once (their writes fail, rxe and real
     * NICs after their retries, soft at once) instead of after
     * TECOMM_TIMEOUT */
    for (int p = 0; vb->connected && p < vb->nranks; p++) {
      if (!vb->peer[p].qp) continue;
      struct ibv_qp_attr a;
      memset(&a, 0, sizeof a);
      a.qp_state = IBV_QPS_ERR;
      (void)te_ibv.modify_qp(vb->peer[p].qp, &a, IBV_QP_STATE);
    }
  }
  return tc_vb_status(vb, "verbs");
}

tecomm_result_t tc_vb_status(tc_vb_t *vb, const char *fn) {
  int e = __atomic_load_n(&vb->err, __ATOMIC_ACQUIRE);
  if (e == TECOMM_SUCCESS) return TECOMM_SUCCESS;
  return TC_ERR((tecomm_result_t)e, "%s: %s", fn, vb->errmsg);
}

int tc_vb_failed_peer(tc_vb_t *vb) {
  return __atomic_load_n(&vb->err, __ATOMIC_ACQUIRE) == TECOMM_SUCCESS ? -1 : vb->err_peer;
}

const char *tc_vb_name(const tc_vb_t *vb) { return vb->name; }

unsigned tc_vb_inline(const tc_vb_t *vb) { return vb->max_inline; }

void tc_vb_ranks(const tc_vb_t *vb, int *rank, int *nranks) {
  *rank = vb->rank;
  *nranks = vb->nranks;
}

tecomm_result_t tc_vb_post_recvs(tc_vb_t *vb, int peer, int n) {
  for (int i = 0; i < n; i++) {
    struct ibv_recv_wr wr, *bad = NULL;
    memset(&wr, 0, sizeof wr);
    wr.wr_id = TC_VB_WRID(TC_VB_WR_RECV, peer, 0);
    wr.num_sge = 0;   /* WRITE_WITH_IMM consumes a receive but places no data in it */
    int rc = ibv_post_recv(vb->peer[peer].qp, &wr, &bad);
    if (rc)
      return tc_vb_fail(vb, TECOMM_ERR_SYSTEM, peer, "rank %d -> rank %d: ibv_post_recv: %s",
                        vb->wrank, vb->world_of[peer], strerror(rc));
  }
  return TECOMM_SUCCESS;
}

/* What one rank tells the others (allgathered): whether its endpoint
 * opened, and how to reach it; qpn[p] is its queue pair for member p.
 * A rank that is not a member says ok and nothing else. */
struct vb_card {
  int32_t ok, member;
  char why[200];
  uint8_t gid[16];
  uint32_t lid, mtu, psn, rkey, link_layer;
  uint64_t raddr;
  uint32_t qpn[];
};

static size_t card_bytes(int nranks) {
  return (sizeof(struct vb_card) + (size_t)nranks * sizeof(uint32_t) + 7) & ~(size_t)7;
}

static int fault_here(int rank) {
  const char *f = tecore_tunable_str(&tc_tun_verbs_fault);
  if (!f || strncmp(f, "mr", 2) != 0) return 0;
  if (f[2] == '\0') return 1;
  return f[2] == ':' && atoi(f + 3) == rank;
}

/* TECOMM_VERBS_FAULT=wc:N[:R]: N when this rank's Nth completion is to
 * fail, else 0. */
static unsigned long fault_wc(int rank) {
  const char *f = tecore_tunable_str(&tc_tun_verbs_fault);
  unsigned long n = 0;
  int r = -1;
  if (!f || strncmp(f, "wc:", 3) != 0) return 0;
  if (sscanf(f + 3, "%lu:%d", &n, &r) < 1) return 0;
  return r < 0 || r == rank ? n : 0;
}

/* 1 for an IPv4-mapped GID, ::ffff: and the address (RoCE v2 over IPv4). */
static int gid_v4(const union ibv_gid *g) {
  for (int i = 0; i < 10; i++)
    if (g->raw[i]) return 0;
  return g->raw[10] == 0xff && g->raw[11] == 0xff;
}

/* Picks the device and port: TECOMM_VERBS_DEVICE, or the first device
 * with an active port.  why gets the reason when there is none. */
static int pick_device(tc_vb_t *vb, struct ibv_port_attr *pa, char *why, size_t wl) {
  const char *want = tecore_tunable_str(&tc_tun_verbs_device);
  char wname[64] = "";
  int wport = 0;
  if (want && *want) {
    snprintf(wname, sizeof wname, "%s", want);
    char *colon = strchr(wname, ':');
    if (colon) {
      *colon = '\0';
      wport = atoi(colon + 1);
    }
  }
  int n = 0;
  struct ibv_device **list = te_ibv.get_device_list(&n);
  if (!list || n == 0) {
    snprintf(why, wl, "no RDMA device (ibv_get_device_list found none)");
    if (list) te_ibv.free_device_list(list);
    return -1;
  }
  snprintf(why, wl, "no RDMA device has an active port%s%s", *wname ? " among " : "",
           *wname ? wname : "");
  for (int i = 0; i < n && !vb->ctx; i++) {
    const char *dn = te_ibv.get_device_name(list[i]);
    if (*wname && strcmp(dn, wname) != 0) continue;
    struct ibv_context *ctx = te_ibv.open_device(list[i]);
    if (!ctx) {
      snprintf(why, wl, "ibv_open_device(%s) failed", dn);
      continue;
    }
    struct ibv_device_attr da;
    memset(&da, 0, sizeof da);
    int nports = te_ibv.query_device(ctx, &da) == 0 ? da.phys_port_cnt : 1;
    for (int p = 1; p <= nports; p++) {
      if (wport && p != wport) continue;
      memset(pa, 0, sizeof *pa);
      if (te_ibv.query_port(ctx, (uint8_t)p, pa) != 0 || pa->state != IBV_PORT_ACTIVE) continue;
      vb->ctx = ctx;
      vb->port = (uint8_t)p;
      snprintf(vb->name, sizeof vb->name, "%s:%d", dn, p);
      break;
    }
    if (!vb->ctx) te_ibv.close_device(ctx);
  }
  te_ibv.free_device_list(list);
  return vb->ctx ? 0 : -1;
}

/* This rank's half: everything up to INIT.  why says what failed. */
static int open_local(tc_vb_t *vb, struct vb_card *card, char *why, size_t wl) {
  struct ibv_port_attr pa;
  if (tc_verbs_load("verbs") != TECOMM_SUCCESS) {
    snprintf(why, wl, "%s", tecore_last_error());
    return -1;
  }
  if (pick_device(vb, &pa, why, wl) != 0) return -1;
  /* the GID: the one asked for, else IPv4-mapped (RoCE v2), else 0 */
  union ibv_gid gid;
  memset(&gid, 0, sizeof gid);
  int gi = (int)tecore_tunable_int(&tc_tun_verbs_gid);
  if (gi < 0) {
    gi = 0;
    for (int i = 0; i < pa.gid_tbl_len && i < 64; i++) {
      union ibv_gid g;
      if (te_ibv.query_gid(vb->ctx, vb->port, i, &g) == 0 && gid_v4(&g)) {
        gi = i;
        break;
      }
    }
  }
  if (te_ibv.query_gid(vb->ctx, vb->port, gi, &gid) != 0) {
    snprintf(why, wl, "%s: no GID at index %d", vb->name, gi);
    return -1;
  }
  vb->gid_index = gi;
  vb->pd = te_ibv.alloc_pd(vb->ctx);
  if (!vb->pd) {
    snprintf(why, wl, "%s: ibv_alloc_pd failed", vb->name);
    return -1;
  }
  vb->slot_bytes = (size_t)tecore_tunable_int(&tc_tun_verbs_chunk_kb) << 10;
  if (vb->slot_bytes > TC_VB_MAX_MSG) vb->slot_bytes = TC_VB_MAX_MSG;
  size_t bytes = (size_t)vb->nranks * TC_VB_SLOTS * vb->slot_bytes;
  long page = sysconf(_SC_PAGESIZE);
  if (posix_memalign((void **)&vb->rbuf, (size_t)(page > 0 ? page : 4096), bytes) ||
      posix_memalign((void **)&vb->sbuf, (size_t)(page > 0 ? page : 4096), bytes)) {
    snprintf(why, wl, "out of host memory for %zu bytes of staging", 2 * bytes);
    return -1;
  }
  memset(vb->rbuf, 0, bytes);
  memset(vb->sbuf, 0, bytes);
  if (fault_here(vb->wrank)) {
    snprintf(why, wl, "%s: memory registration failed (injected by TECOMM_VERBS_FAULT)",
             vb->name);
    return -1;
  }
  vb->rmr = te_ibv.reg_mr(vb->pd, vb->rbuf, bytes, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  vb->smr = vb->rmr ? te_ibv.reg_mr(vb->pd, vb->sbuf, bytes, IBV_ACCESS_LOCAL_WRITE) : NULL;
  if (!vb->rmr || !vb->smr) {
    snprintf(why, wl, "%s: ibv_reg_mr of %zu bytes failed (%s; locked-memory limit?)", vb->name,
             bytes, strerror(errno));
    return -1;
  }
  vb->sq_depth = 4 * TC_VB_SLOTS + 4;
  vb->rq_depth = 2 * TC_VB_SLOTS + 2;
  int cqe = vb->nranks * (vb->sq_depth + vb->rq_depth) + 16;
  vb->cq = te_ibv.create_cq(vb->ctx, cqe, NULL, NULL, 0);
  if (!vb->cq) {
    snprintf(why, wl, "%s: ibv_create_cq(%d) failed", vb->name, cqe);
    return -1;
  }
  /* inline data: ask, and take what the device grants.  No attribute
   * says how much a device takes (rxe 400 B, mlx5 about 900), so the
   * first queue pair asks for 1 KiB and halves until the device accepts;
   * the provider then reports what it gave (at least what was asked). */
  uint32_t want_inline = 1024;
  vb->max_inline = UINT32_MAX;
  for (int p = 0; p < vb->nranks; p++) {
    if (p == vb->rank) continue;
    struct ibv_qp_init_attr ia;
    struct ibv_qp *qp = NULL;
    for (;;) {
      memset(&ia, 0, sizeof ia);
      ia.send_cq = ia.recv_cq = vb->cq;
      ia.qp_type = IBV_QPT_RC;
      ia.cap.max_send_wr = (uint32_t)vb->sq_depth;
      ia.cap.max_recv_wr = (uint32_t)vb->rq_depth;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
      ia.cap.max_inline_data = want_inline;
      qp = te_ibv.create_qp(vb->pd, &ia);
      if (qp || want_inline == 0) break;
      want_inline /= 2;
      if (want_inline < 16) want_inline = 0;
    }
    if (!qp) {
      snprintf(why, wl, "%s: ibv_create_qp (RC) for rank %d failed", vb->name, vb->world_of[p]);
      return -1;
    }
    if (ia.cap.max_inline_data < vb->max_inline) vb->max_inline = ia.cap.max_inline_data;
    vb->peer[p].qp = qp;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = vb->port;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (te_ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                     IBV_QP_ACCESS_FLAGS)) {
      snprintf(why, wl, "%s: queue pair for rank %d: INIT failed", vb->name, vb->world_of[p]);
      return -1;
    }
    card->qpn[p] = qp->qp_num;
  }
  memcpy(card->gid, gid.raw, 16);
  card->lid = pa.lid;
  card->mtu = (uint32_t)pa.active_mtu;
  card->link_layer = pa.link_layer;
  card->rkey = vb->rmr->rkey;
  card->raddr = (uint64_t)(uintptr_t)vb->rbuf;
  return 0;
}

/* INIT -> RTR -> RTS toward peer p, whose card is pc. */
static int connect_peer(tc_vb_t *vb, int p, const struct vb_card *me, const struct vb_card *pc,
                        char *why, size_t wl) {
  struct ibv_qp *qp = vb->peer[p].qp;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  /* the path MTU: the smaller active MTU of the two ports (the netdev's,
   * for RoCE and rxe) */
  a.path_mtu = (enum ibv_mtu)(me->mtu < pc->mtu ? me->mtu : pc->mtu);
  a.dest_qp_num = pc->qpn[vb->rank];
  a.rq_psn = pc->psn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.port_num = vb->port;
  a.ah_attr.dlid = (uint16_t)pc->lid;
  if (me->link_layer == IBV_LINK_LAYER_ETHERNET || pc->lid == 0) {
    a.ah_attr.is_global = 1;
    memcpy(a.ah_attr.grh.dgid.raw, pc->gid, 16);
    a.ah_attr.grh.sgid_index = (uint8_t)vb->gid_index;
    a.ah_attr.grh.hop_limit = 64;
  }
  if (te_ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                   IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                   IBV_QP_MIN_RNR_TIMER)) {
    snprintf(why, wl, "%s: queue pair to rank %d: RTR failed (%s)", vb->name, vb->world_of[p],
             strerror(errno));
    return -1;
  }
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = (uint8_t)vb->timeout;
  a.retry_cnt = (uint8_t)vb->retry;
  a.rnr_retry = 7;
  a.sq_psn = me->psn;
  a.max_rd_atomic = 1;
  if (te_ibv.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                   IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC)) {
    snprintf(why, wl, "%s: queue pair to rank %d: RTS failed (%s)", vb->name, vb->world_of[p],
             strerror(errno));
    return -1;
  }
  vb->peer[p].raddr = pc->raddr + (uint64_t)vb->rank * TC_VB_SLOTS * vb->slot_bytes;
  vb->peer[p].rkey = pc->rkey;
  vb->peer[p].credits = TC_VB_SLOTS;
  return 0;
}

/* Allgathers each rank's ok flag and reason; TECOMM_SUCCESS when all are
 * ok, else NOT_SUPPORTED naming the first rank that was not. */
static tecomm_result_t agree(struct tc_boot *b, struct vb_card *mine, char *all, size_t cb,
                             const char *stage) {
  tecomm_result_t r = b->allgather(b, mine, all, cb);
  if (r != TECOMM_SUCCESS) return r;
  for (int i = 0; i < b->nranks; i++) {
    struct vb_card *c = (struct vb_card *)(void *)(all + (size_t)i * cb);
    c->why[sizeof c->why - 1] = '\0';   /* from the wire: ends within its field */
    if (!c->ok)
      return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "verbs: rank %d %s: %.200s", i, stage, c->why);
  }
  return TECOMM_SUCCESS;
}

/* Who the members are: allgathered flags, so every rank has the same
 * list.  *me is this rank's member index (-1: not a member). */
static tecomm_result_t members(struct tc_boot *b, int member, int **world_of, int *n, int *me) {
  int32_t mine = member != 0, *all = calloc((size_t)b->nranks, sizeof *all);
  int *w = calloc((size_t)b->nranks, sizeof *w);
  if (!all || !w) {
    free(all), free(w);
    return TC_ERR(TECOMM_ERR_NOMEM, "verbs: out of host memory");
  }
  tecomm_result_t r = b->allgather(b, &mine, all, sizeof mine);
  *n = 0;
  *me = -1;
  for (int i = 0; r == TECOMM_SUCCESS && i < b->nranks; i++)
    if (all[i]) {
      if (i == b->rank) *me = *n;
      w[(*n)++] = i;
    }
  free(all);
  if (r != TECOMM_SUCCESS) free(w), w = NULL;
  *world_of = w;
  return r;
}

tecomm_result_t tc_vb_open(struct tc_boot *b, int member, tc_vb_t **out) {
  *out = NULL;
  int nm = 0, me = -1, *world_of = NULL;
  TC_CHECK(members(b, member, &world_of, &nm, &me));
  size_t cb = card_bytes(b->nranks);
  tc_vb_t *vb = calloc(1, sizeof *vb);
  struct vb_card *mine = calloc(1, cb);
  char *all = calloc((size_t)b->nranks, cb);
  struct tc_vb_peer *peers = calloc((size_t)nm + 1, sizeof *peers);
  if (!vb || !mine || !all || !peers) {
    free(vb), free(mine), free(all), free(peers), free(world_of);
    return TC_ERR(TECOMM_ERR_NOMEM, "verbs: out of host memory");
  }
  vb->rank = me;
  vb->nranks = nm;
  vb->wrank = b->rank;
  vb->world_of = world_of;
  vb->peer = peers;
  vb->timeout = (int)tecore_tunable_int(&tc_tun_verbs_timeout);
  vb->retry = (int)tecore_tunable_int(&tc_tun_verbs_retry);
  vb->fault_wc = fault_wc(b->rank);
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  srand((unsigned)(ts.tv_nsec ^ (long)getpid() * 2654435761u));
  mine->psn = (uint32_t)rand() & 0xffffffu;
  mine->member = me >= 0;
  mine->ok = me < 0 || open_local(vb, mine, mine->why, sizeof mine->why) == 0;
  tecomm_result_t r = agree(b, mine, all, cb, "cannot open verbs");
  if (r == TECOMM_SUCCESS) {
    for (int p = 0; me >= 0 && p < nm && mine->ok; p++) {
      if (p == me) continue;
      const struct vb_card *pc =
          (const struct vb_card *)(const void *)(all + (size_t)world_of[p] * cb);
      if (connect_peer(vb, p, mine, pc, mine->why, sizeof mine->why) != 0 ||
          tc_vb_post_recvs(vb, p, vb->rq_depth) != TECOMM_SUCCESS) {
        if (vb->err != TECOMM_SUCCESS) snprintf(mine->why, sizeof mine->why, "%.190s", vb->errmsg);
        mine->ok = 0;
      }
    }
    char *all2 = calloc((size_t)b->nranks, cb);
    r = all2 ? agree(b, mine, all2, cb, "cannot connect its queue pairs")
             : TC_ERR(TECOMM_ERR_NOMEM, "verbs: out of host memory");
    free(all2);
  }
  free(mine);
  free(all);
  if (r != TECOMM_SUCCESS || me < 0) {
    tc_vb_close(vb);
    return r;
  }
  vb->connected = 1;
  if (vb->max_inline == UINT32_MAX) vb->max_inline = 0;
  TC_INFO("verbs: rank %d (member %d of %d): %s, GID index %d, chunks of %zu KiB, %u B inline "
          "(the device's), QP timeout %d retry %d", vb->wrank, vb->rank, vb->nranks, vb->name,
          vb->gid_index, vb->slot_bytes >> 10, vb->max_inline, vb->timeout, vb->retry);
  *out = vb;
  return TECOMM_SUCCESS;
}

void tc_vb_close(tc_vb_t *vb) {
  if (!vb) return;
  for (int p = 0; vb->peer && p < vb->nranks; p++)
    if (vb->peer[p].qp) te_ibv.destroy_qp(vb->peer[p].qp);
  if (vb->cq) te_ibv.destroy_cq(vb->cq);
  if (vb->rmr) te_ibv.dereg_mr(vb->rmr);
  if (vb->smr) te_ibv.dereg_mr(vb->smr);
  if (vb->pd) te_ibv.dealloc_pd(vb->pd);
  if (vb->ctx) te_ibv.close_device(vb->ctx);
  free(vb->rbuf);
  free(vb->sbuf);
  free(vb->peer);
  free(vb->world_of);
  free(vb);
}

#else /* !TE_HAVE_VERBS */

tecomm_result_t tc_vb_open(struct tc_boot *b, int member, tc_vb_t **out) {
  (void)b, (void)member;
  *out = NULL;
  return tc_verbs_load("verbs");
}
unsigned tc_vb_inline(const tc_vb_t *vb) { (void)vb; return 0; }
void tc_vb_close(tc_vb_t *vb) { (void)vb; }
const char *tc_vb_name(const tc_vb_t *vb) { (void)vb; return "none"; }
int tc_vb_failed_peer(tc_vb_t *vb) { (void)vb; return -1; }
void tc_vb_ranks(const tc_vb_t *vb, int *rank, int *nranks) {
  (void)vb;
  *rank = 0;
  *nranks = 1;
}
tecomm_result_t tc_vb_status(tc_vb_t *vb, const char *fn) {
  (void)vb;
  return tc_verbs_load(fn);
}

#endif
