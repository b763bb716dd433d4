/* verbs_xfer.c -- the verbs endpoint's data path (verbs_priv.h).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Chunks are written into the peer's receive slots (RDMA WRITE, then a
 * zero-byte WRITE_WITH_IMM carrying the length), credits are returned as
 * they are copied out, and the completion queue is polled until both
 * directions of an exchange are done; no progress for TECOMM_TIMEOUT is a
 * failure naming the peer. */
#include "verbs_ep.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#ifdef TE_HAVE_VERBS

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
                    "rank %d -> rank %d: %s: %s (work completion status %d)%s", vb->rank, p,
                    vb->name, te_ibv.wc_status_str(wc->status), (int)wc->status,
                    gone ? ": the peer did not answer (TECOMM_VERBS_TIMEOUT, TECOMM_VERBS_RETRY)"
                         : "");
}

/* Polls the completion queue once; returns how many completions it saw
 * (or -1 after a failure). */
static int progress(tc_vb_t *vb) {
  struct ibv_wc wc[16];
  int n = ibv_poll_cq(vb->cq, 16, wc);
  if (n < 0) {
    tc_vb_fail(vb, TECOMM_ERR_SYSTEM, -1, "rank %d: %s: ibv_poll_cq failed (%d)", vb->rank, vb->name,
               n);
    return -1;
  }
  for (int i = 0; i < n; i++) {
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
                     "for", vb->rank, p);
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
    return tc_vb_fail(vb, TECOMM_ERR_SYSTEM, to, "rank %d -> rank %d: ibv_post_send: %s%s", vb->rank,
                      to, strerror(rc), rc == EINVAL ? " (queue pair in the error state?)" : "");
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
                      vb->rank, to, strerror(rc));
  pe->sq_used++;
  return TECOMM_SUCCESS;
}

static int64_t now_ms(void) { return tc_now_ms(); }

tecomm_result_t tc_vb_sendrecv(tc_vb_t *vb, int to, const void *sbuf, size_t sbytes, int from,
                               void *rbuf, size_t rbytes) {
  TC_CHECK(tc_vb_status(vb, "verbs"));
  if (to < 0 || to == vb->rank) sbytes = 0;
  if (from < 0 || from == vb->rank) rbytes = 0;
  size_t sent = 0, got = 0;
  int64_t limit = tc_timeout_ms(), last = now_ms();
  unsigned idle = 0;
  while (sent < sbytes || got < rbytes) {
    if (progress(vb) < 0) return tc_vb_status(vb, "verbs");
    int moved = 0;
    if (sent < sbytes) {
      struct tc_vb_peer *pe = &vb->peer[to];
      while (sent < sbytes && pe->credits > 0 && !pe->sbusy[pe->sstage % TC_VB_SLOTS] &&
             pe->sq_used + 2 <= vb->sq_depth - 2) {
        size_t n = sbytes - sent < vb->slot_bytes ? sbytes - sent : vb->slot_bytes;
        TC_CHECK(post_chunk(vb, to, (const char *)sbuf + sent, n));
        sent += n;
        moved = 1;
      }
    }
    if (got < rbytes) {
      struct tc_vb_peer *pe = &vb->peer[from];
      while (got < rbytes && pe->rarrive != pe->rtake && pe->sq_used + 1 <= vb->sq_depth) {
        unsigned s = pe->rtake % TC_VB_SLOTS;
        size_t want = rbytes - got < vb->slot_bytes ? rbytes - got : vb->slot_bytes;
        if (pe->rlen[s] != want)
          return tc_vb_fail(vb, TECOMM_ERR_SYSTEM, from, "rank %d <- rank %d: a chunk of %u bytes "
                            "where %zu were expected (the ranks disagree on the call)",
                            vb->rank, from, pe->rlen[s], want);
        memcpy((char *)rbuf + got,
               vb->rbuf + ((size_t)from * TC_VB_SLOTS + s) * vb->slot_bytes, want);
        pe->rtake++;
        got += want;
        TC_CHECK(post_credit(vb, from));
        moved = 1;
      }
    }
    if (moved) {
      last = now_ms();
      idle = 0;
      continue;
    }
    if (now_ms() - last > limit)
      return tc_vb_fail(vb, TECOMM_ERR_TIMEOUT, sent < sbytes ? to : from, "rank %d: no progress for %lld ms (TECOMM_TIMEOUT) "
                        "%s rank %d", vb->rank, (long long)limit,
                        sent < sbytes ? "waiting for credits from" : "waiting for data from",
                        sent < sbytes ? to : from);
    /* spin a little, then sleep: a CPU-starved node (or a VM) still runs
     * its peers' processes */
    if (++idle > 200) {
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
  return TECOMM_SUCCESS;
}

#else

tecomm_result_t tc_vb_sendrecv(tc_vb_t *vb, int to, const void *sbuf, size_t sbytes, int from,
                               void *rbuf, size_t rbytes) {
  (void)vb, (void)to, (void)sbuf, (void)sbytes, (void)from, (void)rbuf, (void)rbytes;
  return tc_verbs_load("verbs");
}

#endif
