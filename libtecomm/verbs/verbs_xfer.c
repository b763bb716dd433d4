/* verbs_xfer.c -- the verbs endpoint's data path (verbs_priv.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Chunks are written into the peer's receive slots (RDMA WRITE, then a
 * zero-byte WRITE_WITH_IMM carrying the length), credits are returned as
 * they are copied out, and the completion queue is polled (by whoever
 * drives an exchange: the service engine's polling of a running
 * allreduce, verbs_ar.c) until both directions are done; no progress for TECOMM_TIMEOUT is a
 * failure naming the peer. */
#include "verbs_ep.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef TE_HAVE_VERBS

/* The communicator rank of member p (-1 for none). */
#define W(vb, p) ((p) >= 0 && (p) < (vb)->nranks ? (vb)->world_of[p] : -1)

static int peer_of_qpn(tc_vb_t *vb, uint32_t qpn) {
  for (int p = 0; p < vb->nranks; p++)
    if (vb->peer[p].qp && vb->peer[p].qp->qp_num == qpn) return p;
  return -1;
}

static tecomm_result_t wc_failed(tc_vb_t *vb, const struct ibv_wc *wc) {
  int p = peer_of_qpn(vb, wc->qp_num);
  /* retries exhausted: the peer (or the link to it) is gone */
  int gone = wc->status == IBV_WC_RETRY_EXC_ERR || wc->status == IBV_WC_RNR_RETRY_EXC_ERR;
  return tc_vb_fail(vb, gone ? TECOMM_ERR_TIMEOUT : TECOMM_ERR_SYSTEM, p,
                    "rank %d -> rank %d: %s: %s (work completion status %d)%s", vb->wrank, W(vb, p),
                    vb->name, te_ibv.wc_status_str(wc->status), (int)wc->status,
                    gone ? ": the peer did not answer (TECOMM_VERBS_TIMEOUT, TECOMM_VERBS_RETRY)"
                    : wc->status == IBV_WC_WR_FLUSH_ERR
                        ? ": the queue pair is in the error state (the peer failed, or the link)"
                        : "");
}

/* Polls the completion queue once; returns how many completions it saw
 * (or -1 after a failure). */
static int progress(tc_vb_t *vb) {
  struct ibv_wc wc[16];
  int n = ibv_poll_cq(vb->cq, 16, wc);
  if (n < 0) {
    tc_vb_fail(vb, TECOMM_ERR_SYSTEM, -1, "rank %d: %s: ibv_poll_cq failed (%d)", vb->wrank,
               vb->name, n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (vb->fault_wc && ++vb->nwc == vb->fault_wc) {
      int p = peer_of_qpn(vb, wc[i].qp_num);
      tc_vb_fail(vb, TECOMM_ERR_SYSTEM, p, "rank %d -> rank %d: %s: work completion %lu reports "
                 "an error (injected by TECOMM_VERBS_FAULT)", vb->wrank, W(vb, p), vb->name,
                 vb->nwc);
      return -1;
    }
    if (wc[i].status != IBV_WC_SUCCESS) {
      wc_failed(vb, &wc[i]);
      return -1;
    }
    int kind = TC_VB_WR_KIND(wc[i].wr_id), p = TC_VB_WR_PEER(wc[i].wr_id);
    if (p < 0 || p >= vb->nranks || !vb->peer[p].qp) continue;
    struct tc_vb_peer *pe = &vb->peer[p];
    if (kind == TC_VB_WR_RECV) {
      uint32_t imm = ntohl(wc[i].imm_data);
      if (imm & TC_VB_IMM_CREDIT) {
        pe->credits += (int)(imm & 0xffffu);
      } else {
        if (pe->rarrive - pe->rtake >= TC_VB_SLOTS) {
          tc_vb_fail(vb, TECOMM_ERR_SYSTEM, p, "rank %d: rank %d wrote a slot it had no credit "
                     "for", vb->wrank, W(vb, p));
          return -1;
        }
        pe->rlen[pe->rarrive % TC_VB_SLOTS] = imm & TC_VB_IMM_LEN;
        pe->rarrive++;
      }
      if (tc_vb_post_recvs(vb, p, 1) != TECOMM_SUCCESS) return -1;
    } else {
      pe->sq_used--;
      if (kind == TC_VB_WR_IMM) pe->sbusy[TC_VB_WR_SLOT(wc[i].wr_id)] = 0;
    }
  }
  return n;
}

/* Posts one chunk (len bytes at data) into the peer's next slot. */
static tecomm_result_t post_chunk(tc_vb_t *vb, int to, const void *data, size_t len) {
  struct tc_vb_peer *pe = &vb->peer[to];
  unsigned st = pe->sstage % TC_VB_SLOTS;
  char *stage = vb->sbuf + ((size_t)to * TC_VB_SLOTS + st) * vb->slot_bytes;
  uint64_t raddr = pe->raddr + (uint64_t)(pe->sslot % TC_VB_SLOTS) * vb->slot_bytes;
  memcpy(stage, data, len);
  struct ibv_sge sge = {.addr = (uintptr_t)stage, .length = (uint32_t)len, .lkey = vb->smr->lkey};
  struct ibv_send_wr w[2], *bad = NULL;
  memset(w, 0, sizeof w);
  /* the data: an RDMA WRITE (inline when small) */
  w[0].wr_id = TC_VB_WRID(TC_VB_WR_DATA, to, st);
  w[0].opcode = IBV_WR_RDMA_WRITE;
  w[0].sg_list = &sge;
  w[0].num_sge = 1;
  w[0].send_flags = IBV_SEND_SIGNALED | (len <= vb->max_inline ? IBV_SEND_INLINE : 0);
  w[0].wr.rdma.remote_addr = raddr;
  w[0].wr.rdma.rkey = pe->rkey;
  w[0].next = &w[1];
  /* the completion: a zero-byte WRITE_WITH_IMM; RC places it after the data */
  w[1].wr_id = TC_VB_WRID(TC_VB_WR_IMM, to, st);
  w[1].opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w[1].num_sge = 0;
  w[1].send_flags = IBV_SEND_SIGNALED;
  w[1].imm_data = htonl((uint32_t)len);
  w[1].wr.rdma.remote_addr = raddr;
  w[1].wr.rdma.rkey = pe->rkey;
  struct ibv_send_wr *first = len ? &w[0] : &w[1];
  int rc = ibv_post_send(pe->qp, first, &bad);
  if (rc)
    return tc_vb_fail(vb, TECOMM_ERR_SYSTEM, to, "rank %d -> rank %d: ibv_post_send: %s%s",
                      vb->wrank, W(vb, to), strerror(rc),
                      rc == EINVAL ? " (queue pair in the error state?)" : "");
  pe->sq_used += len ? 2 : 1;
  pe->sbusy[st] = 1;
  pe->sstage++;
  pe->sslot++;
  pe->credits--;
  return TECOMM_SUCCESS;
}

static tecomm_result_t post_credit(tc_vb_t *vb, int to) {
  struct tc_vb_peer *pe = &vb->peer[to];
  struct ibv_send_wr w, *bad = NULL;
  memset(&w, 0, sizeof w);
  w.wr_id = TC_VB_WRID(TC_VB_WR_CREDIT, to, 0);
  w.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
  w.num_sge = 0;
  w.send_flags = IBV_SEND_SIGNALED;
  w.imm_data = htonl(TC_VB_IMM_CREDIT | 1u);
  w.wr.rdma.remote_addr = pe->raddr;
  w.wr.rdma.rkey = pe->rkey;
  int rc = ibv_post_send(pe->qp, &w, &bad);
  if (rc)
    return tc_vb_fail(vb, TECOMM_ERR_SYSTEM, to, "rank %d -> rank %d: ibv_post_send (credit): %s",
                      vb->wrank, W(vb, to), strerror(rc));
  pe->sq_used++;
  return TECOMM_SUCCESS;
}

static int64_t now_ms(void) { return tc_now_ms(); }

void tc_vb_xfer_start(tc_vb_t *vb, struct tc_vb_xfer *x, int to, const void *sbuf, size_t sbytes,
                      int from, void *rbuf, size_t rbytes) {
  if (to < 0 || to == vb->rank) sbytes = 0;
  if (from < 0 || from == vb->rank) rbytes = 0;
  *x = (struct tc_vb_xfer){.to = to, .from = from, .sbuf = sbuf, .rbuf = rbuf, .sbytes = sbytes,
                           .rbytes = rbytes, .last = now_ms()};
}

int tc_vb_xfer_poll(tc_vb_t *vb, struct tc_vb_xfer *x) {
  if (__atomic_load_n(&vb->err, __ATOMIC_ACQUIRE)) return -1;
  if (x->sent == x->sbytes && x->got == x->rbytes) return 1;
  if (progress(vb) < 0) return -1;
  int moved = 0, to = x->to, from = x->from;
  if (x->sent < x->sbytes) {
    struct tc_vb_peer *pe = &vb->peer[to];
    while (x->sent < x->sbytes && pe->credits > 0 && !pe->sbusy[pe->sstage % TC_VB_SLOTS] &&
           pe->sq_used + 2 <= vb->sq_depth - 2) {
      size_t n = x->sbytes - x->sent < vb->slot_bytes ? x->sbytes - x->sent : vb->slot_bytes;
      if (post_chunk(vb, to, x->sbuf + x->sent, n) != TECOMM_SUCCESS) return -1;
      x->sent += n;
      moved = 1;
    }
  }
  if (x->got < x->rbytes) {
    struct tc_vb_peer *pe = &vb->peer[from];
    while (x->got < x->rbytes && pe->rarrive != pe->rtake && pe->sq_used + 1 <= vb->sq_depth) {
      unsigned s = pe->rtake % TC_VB_SLOTS;
      size_t want = x->rbytes - x->got < vb->slot_bytes ? x->rbytes - x->got : vb->slot_bytes;
      if (pe->rlen[s] != want) {
        tc_vb_fail(vb, TECOMM_ERR_SYSTEM, from, "rank %d <- rank %d: a chunk of %u bytes "
                   "where %zu were expected (the ranks disagree on the call)",
                   vb->wrank, W(vb, from), pe->rlen[s], want);
        return -1;
      }
      memcpy(x->rbuf + x->got, vb->rbuf + ((size_t)from * TC_VB_SLOTS + s) * vb->slot_bytes,
             want);
      pe->rtake++;
      x->got += want;
      if (post_credit(vb, from) != TECOMM_SUCCESS) return -1;
      moved = 1;
    }
  }
  if (x->sent == x->sbytes && x->got == x->rbytes) return 1;
  int64_t now = now_ms(), limit = tc_timeout_ms();
  if (moved) {
    x->last = now;
    return 0;
  }
  if (now - x->last > limit) {
    int stuck = x->sent < x->sbytes ? to : from;
    tc_vb_fail(vb, TECOMM_ERR_TIMEOUT, stuck, "rank %d: no progress for %lld ms (TECOMM_TIMEOUT) "
               "%s rank %d", vb->wrank, (long long)limit,
               x->sent < x->sbytes ? "waiting for credits from" : "waiting for data from",
               W(vb, stuck));
    return -1;
  }
  return 0;
}

#else

void tc_vb_xfer_start(tc_vb_t *vb, struct tc_vb_xfer *x, int to, const void *sbuf, size_t sbytes,
                      int from, void *rbuf, size_t rbytes) {
  (void)vb, (void)to, (void)sbuf, (void)sbytes, (void)from, (void)rbuf, (void)rbytes;
  memset(x, 0, sizeof *x);
}
int tc_vb_xfer_poll(tc_vb_t *vb, struct tc_vb_xfer *x) {
  (void)vb, (void)x;
  return -1;
}

#endif
