/* verbs_ep.h -- the insides of a verbs endpoint (verbs_priv.h), shared by
 * its connection setup (verbs_conn.c) and its data path (verbs_xfer.c).
 * SPDX-License-Identifier: Apache-2.0 */
#ifndef TECOMM_VERBS_EP_H
#define TECOMM_VERBS_EP_H

#include "verbs_priv.h"

#ifdef TE_HAVE_VERBS
/* work request ids: kind in the top byte, peer and slot below */
enum { TC_VB_WR_DATA = 1, TC_VB_WR_IMM = 2, TC_VB_WR_CREDIT = 3, TC_VB_WR_RECV = 4 };
#define TC_VB_WRID(kind, peer, slot) \
  (((uint64_t)(kind) << 56) | ((uint64_t)(uint32_t)(peer) << 8) | (uint64_t)(slot))
#define TC_VB_WR_KIND(id) ((int)((id) >> 56))
#define TC_VB_WR_PEER(id) ((int)(((id) >> 8) & 0xffffffu))
#define TC_VB_WR_SLOT(id) ((unsigned)((id) & 0xffu))

struct tc_vb_peer {
  struct ibv_qp *qp;
  uint64_t raddr;              /* the peer's receive slots for this rank */
  uint32_t rkey;
  int credits;                 /* slots this rank may still write at the peer */
  unsigned sslot;              /* the next of those slots */
  int sbusy[TC_VB_SLOTS];      /* this rank's staging slot for the peer is in flight */
  unsigned sstage;             /* the next staging slot */
  int sq_used;                 /* send work requests not completed */
  unsigned rarrive;            /* slots the peer filled (its chunks, in order) */
  unsigned rtake;              /* slots copied out */
  uint32_t rlen[TC_VB_SLOTS];  /* length of each filled slot */
};

struct tc_vb {
  int rank, nranks;            /* among the endpoint's members */
  int wrank;                   /* this rank in the communicator */
  int *world_of;               /* member index -> communicator rank */
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *cq;
  uint8_t port;
  int gid_index;
  size_t slot_bytes;
  int sq_depth, rq_depth;
  uint32_t max_inline;
  char *rbuf, *sbuf;           /* nranks x TC_VB_SLOTS x slot_bytes each */
  struct ibv_mr *rmr, *smr;
  struct tc_vb_peer *peer;
  int timeout, retry;          /* TECOMM_VERBS_TIMEOUT, TECOMM_VERBS_RETRY */
  unsigned long fault_wc;      /* TECOMM_VERBS_FAULT=wc:N: the Nth completion fails (0: none) */
  unsigned long nwc;           /* completions polled */
  int connected;               /* queue pairs up: a failure also moves them to ERR */
  int err;                     /* sticky tecomm_result_t (atomic: the engine thread sets it) */
  int err_peer;
  char errmsg[384];
  char name[80];
};

/* Makes the endpoint failed (the first failure wins; peer: the rank it
 * concerns, or -1) and returns code with the detail set. */
tecomm_result_t tc_vb_fail(tc_vb_t *vb, tecomm_result_t code, int peer, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Posts every receive the peer's queue pair can hold (at connect). */
tecomm_result_t tc_vb_post_recvs(tc_vb_t *vb, int peer, int n);
#endif

#endif
