/* SPDX-License-Identifier: Apache-2.0 */
/* verbs_soft.c -- "soft", a loopback RDMA device for tests: the libibverbs
 * calls libtecomm makes (the te_ibv table, verbs_api.h, and the three
 * data-path calls the header inlines through the context's ops:
 * ibv_post_send, ibv_post_recv, ibv_poll_cq), implemented between
 * processes of one host over Unix stream sockets.
 * SPDX-License-Identifier: Apache-2.0
 *
 * Why: CI has RDMA only inside the test VM (t/vm, soft-RoCE), which runs
 * the plain build only and takes minutes.  TECOMM_VERBS_LIB=soft puts this
 * table in place of libibverbs.so.1, so that the verbs transport's own
 * code -- credits, slots, completions, error completions, the
 * hierarchical allreduce, the engine's polling -- runs in every Check
 * suite, under ASan too, with ranks that are processes on one machine.
 *
 * What it models: one device "soft0", one active Ethernet port, GID
 * "teso" + pid + context number (the name of the context's listening
 * socket), RC queue pairs with RDMA WRITE and WRITE_WITH_IMM only, 400 B
 * of inline data (rxe's limit: a larger request fails, as rxe's does),
 * memory regions checked by rkey and bounds on the responder.  A queue
 * pair connects at RTR: the end with the smaller (GID, QPN) dials the
 * other's socket and names both queue pairs.  A send completes when its
 * bytes are in the socket (copied at post: the send buffer is free);
 * the responder places them, and WRITE_WITH_IMM consumes a posted
 * receive.  A peer that goes away (EOF, reset) puts the queue pair in the
 * error state: queued sends complete with IBV_WC_RETRY_EXC_ERR, posted
 * receives with IBV_WC_WR_FLUSH_ERR, as a real RC queue pair's would once
 * its retries ran out.  Progress happens in ibv_poll_cq (and at post):
 * one thread at a time per context, as libtecomm uses it. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "verbs_api.h"

#ifdef TE_HAVE_VERBS
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define SOFT_MAX_INLINE 400u
#define SOFT_MAGIC 0x74655346u   /* a data message */
#define SOFT_HELLO 0x74654846u   /* the dialler names the queue pairs */
#define SOFT_MAX_PENDING 64

struct soft_hdr {
  uint32_t magic, opcode;   /* IBV_WR_RDMA_WRITE or IBV_WR_RDMA_WRITE_WITH_IMM */
  uint64_t raddr;
  uint32_t rkey, len, imm, pad;
};

struct soft_msg {            /* a send on its way into the socket */
  struct soft_msg *next;
  uint64_t wr_id;
  int signaled;
  enum ibv_wc_opcode op;
  size_t bytes;              /* header + payload */
  struct soft_hdr h;         /* followed by the payload */
};

struct soft_cq {
  struct ibv_cq cq;
  struct ibv_wc *ring;
  unsigned head, n, cap;
};

struct soft_mr {
  struct ibv_mr mr;
  int access;
  struct soft_mr *next;
};

struct soft_qp {
  struct ibv_qp qp;
  struct soft_qp *next;
  int fd;
  uint8_t dgid[16];
  uint32_t dqpn;
  unsigned max_send, max_recv;
  struct soft_msg *out, *out_tail;   /* queued sends, oldest first */
  size_t out_off;                    /* bytes of the oldest already written */
  unsigned out_n;
  uint64_t *rq;                      /* posted receives (ring) */
  unsigned rq_head, rq_n;
  struct soft_hdr ih;                /* the incoming message */
  size_t ih_got, ib_got;
  char *ibuf;
  size_t ibuf_cap;
};

struct soft_ctx {
  struct ibv_context ctx;
  int lfd;
  uint32_t seq, next_qpn, next_key;
  uint8_t gid[16];
  struct soft_qp *qps;
  struct soft_mr *mrs;
  int pending[SOFT_MAX_PENDING];     /* accepted, hello not read yet */
  int npending;
};

static struct ibv_device soft_device;
static uint32_t soft_seq;

static socklen_t soft_addr(struct sockaddr_un *a, uint32_t pid, uint32_t seq) {
  memset(a, 0, sizeof *a);
  a->sun_family = AF_UNIX;
  int n = snprintf(a->sun_path + 1, sizeof a->sun_path - 1, "tecomm-soft-%u-%u", pid, seq);
  return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static void soft_gid(uint8_t g[16], uint32_t pid, uint32_t seq) {
  memset(g, 0, 16);
  memcpy(g, "teso", 4);
  memcpy(g + 4, &pid, 4);
  memcpy(g + 8, &seq, 4);
}

static struct soft_ctx *ctx_of(struct ibv_context *c) { return (struct soft_ctx *)(void *)c; }

/* ---- completions ------------------------------------------------------------ */

static void cq_push(struct ibv_cq *cq, const struct ibv_wc *wc) {
  struct soft_cq *s = (struct soft_cq *)(void *)cq;
  if (s->n == s->cap) return;   /* overrun: the consumer sized its queue too small */
  s->ring[(s->head + s->n) % s->cap] = *wc;
  s->n++;
}

static void complete(struct soft_qp *q, struct ibv_cq *cq, uint64_t wr_id, enum ibv_wc_status st,
                     enum ibv_wc_opcode op, uint32_t len, uint32_t imm, int with_imm) {
  struct ibv_wc wc;
  memset(&wc, 0, sizeof wc);
  wc.wr_id = wr_id;
  wc.status = st;
  wc.opcode = op;
  wc.byte_len = len;
  wc.imm_data = imm;
  wc.wc_flags = with_imm ? IBV_WC_WITH_IMM : 0;
  wc.qp_num = q->qp.qp_num;
  cq_push(cq, &wc);
}

/* The queue pair enters the error state: every queued send and posted
 * receive completes with an error (the first send with st). */
static void qp_error(struct soft_qp *q, enum ibv_wc_status st) {
  if (q->qp.state == IBV_QPS_ERR) return;
  q->qp.state = IBV_QPS_ERR;
  if (q->fd >= 0) close(q->fd);
  q->fd = -1;
  for (struct soft_msg *m = q->out; m;) {
    struct soft_msg *nx = m->next;
    complete(q, q->qp.send_cq, m->wr_id, st, m->op, 0, 0, 0);
    st = IBV_WC_WR_FLUSH_ERR;
    free(m);
    m = nx;
  }
  q->out = q->out_tail = NULL;
  q->out_n = 0;
  for (; q->rq_n; q->rq_n--, q->rq_head = (q->rq_head + 1) % q->max_recv)
    complete(q, q->qp.recv_cq, q->rq[q->rq_head], IBV_WC_WR_FLUSH_ERR, IBV_WC_RECV, 0, 0, 0);
}

/* ---- progress --------------------------------------------------------------- */

static void flush_out(struct soft_qp *q) {
  while (q->out && q->fd >= 0) {
    struct soft_msg *m = q->out;
    const char *p = (const char *)&m->h + q->out_off;
    ssize_t w = send(q->fd, p, m->bytes - q->out_off, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (w < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      qp_error(q, IBV_WC_RETRY_EXC_ERR);   /* the peer is gone */
      return;
    }
    q->out_off += (size_t)w;
    if (q->out_off < m->bytes) return;
    q->out = m->next;
    if (!q->out) q->out_tail = NULL;
    q->out_off = 0;
    q->out_n--;
    if (m->signaled) complete(q, q->qp.send_cq, m->wr_id, IBV_WC_SUCCESS, m->op, 0, 0, 0);
    free(m);
  }
}

static struct soft_mr *mr_for(struct soft_ctx *c, uint32_t rkey, uint64_t addr, size_t len) {
  for (struct soft_mr *m = c->mrs; m; m = m->next) {
    uint64_t base = (uint64_t)(uintptr_t)m->mr.addr;
    if (m->mr.rkey == rkey && (m->access & IBV_ACCESS_REMOTE_WRITE) && addr >= base &&
        addr - base <= m->mr.length && len <= m->mr.length - (addr - base))
      return m;
  }
  return NULL;
}

/* Places one whole incoming message. */
static void deliver(struct soft_ctx *c, struct soft_qp *q) {
  const struct soft_hdr *h = &q->ih;
  if (h->len && !mr_for(c, h->rkey, h->raddr, h->len)) {
    qp_error(q, IBV_WC_REM_ACCESS_ERR);
    return;
  }
  if (h->len) memcpy((void *)(uintptr_t)h->raddr, q->ibuf, h->len);
  if (h->opcode != IBV_WR_RDMA_WRITE_WITH_IMM) return;
  if (!q->rq_n) {   /* no receive posted: rxe would retry, then give up */
    qp_error(q, IBV_WC_RNR_RETRY_EXC_ERR);
    return;
  }
  uint64_t id = q->rq[q->rq_head];
  q->rq_head = (q->rq_head + 1) % q->max_recv;
  q->rq_n--;
  complete(q, q->qp.recv_cq, id, IBV_WC_SUCCESS, IBV_WC_RECV_RDMA_WITH_IMM, h->len, h->imm, 1);
}

static void read_in(struct soft_ctx *c, struct soft_qp *q) {
  while (q->fd >= 0) {
    ssize_t r;
    if (q->ih_got < sizeof q->ih) {
      r = recv(q->fd, (char *)&q->ih + q->ih_got, sizeof q->ih - q->ih_got, MSG_DONTWAIT);
    } else {
      if (q->ih.magic != SOFT_MAGIC || q->ih.len > (64u << 20)) {
        qp_error(q, IBV_WC_BAD_RESP_ERR);
        return;
      }
      if (q->ibuf_cap < q->ih.len) {
        char *nb = realloc(q->ibuf, q->ih.len);
        if (!nb) {
          qp_error(q, IBV_WC_LOC_LEN_ERR);
          return;
        }
        q->ibuf = nb;
        q->ibuf_cap = q->ih.len;
      }
      if (q->ib_got == q->ih.len) {
        deliver(c, q);
        q->ih_got = q->ib_got = 0;
        continue;
      }
      r = recv(q->fd, q->ibuf + q->ib_got, q->ih.len - q->ib_got, MSG_DONTWAIT);
    }
    if (r == 0) {
      qp_error(q, IBV_WC_RETRY_EXC_ERR);   /* the peer closed: it is gone */
      return;
    }
    if (r < 0) {
      if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
      qp_error(q, IBV_WC_RETRY_EXC_ERR);
      return;
    }
    if (q->ih_got < sizeof q->ih) q->ih_got += (size_t)r;
    else q->ib_got += (size_t)r;
  }
}

/* New connections, and their hellos: which of our queue pairs they are for. */
static void take_calls(struct soft_ctx *c) {
  for (;;) {
    if (c->npending == SOFT_MAX_PENDING) break;
    int fd = accept4(c->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) break;
    /* a device of this user's processes: another user's call is dropped
     * unread (the mesh's rule, libtecomm(7) SECURITY) */
    struct ucred cr;
    socklen_t cl = sizeof cr;
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) != 0 || cr.uid != geteuid()) {
      close(fd);
      continue;
    }
    c->pending[c->npending++] = fd;
  }
  for (int i = 0; i < c->npending;) {
    uint32_t hello[3];
    ssize_t r = recv(c->pending[i], hello, sizeof hello, MSG_PEEK | MSG_DONTWAIT);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
      i++;
      continue;
    }
    if (r > 0 && r < (ssize_t)sizeof hello) {
      i++;   /* the rest of the hello is on its way */
      continue;
    }
    struct soft_qp *q = NULL;
    int later = 0;   /* our queue pair is not at RTR yet: keep the call */
    if (r == (ssize_t)sizeof hello && hello[0] == SOFT_HELLO)
      for (q = c->qps; q; q = q->next)
        if (q->qp.qp_num == hello[2]) {
          later = q->qp.state == IBV_QPS_INIT || q->qp.state == IBV_QPS_RESET;
          if (later || q->dqpn != hello[1] || q->fd >= 0 || q->qp.state == IBV_QPS_ERR) q = NULL;
          break;
        }
    if (later) {
      i++;
      continue;
    }
    if (q && recv(c->pending[i], hello, sizeof hello, 0) != (ssize_t)sizeof hello) q = NULL;
    if (q) q->fd = c->pending[i];
    else close(c->pending[i]);
    c->pending[i] = c->pending[--c->npending];
  }
}

static void progress(struct soft_ctx *c) {
  take_calls(c);
  for (struct soft_qp *q = c->qps; q; q = q->next) {
    if (q->fd < 0) continue;
    flush_out(q);
    read_in(c, q);
  }
}

/* ---- the data path (struct ibv_context_ops) ------------------------------------ */

static int soft_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc) {
  struct soft_cq *s = (struct soft_cq *)(void *)cq;
  progress(ctx_of(cq->context));
  int n = 0;
  for (; n < num && s->n; n++, s->n--, s->head = (s->head + 1) % s->cap) wc[n] = s->ring[s->head];
  return n;
}

static int soft_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  struct soft_qp *q = (struct soft_qp *)(void *)qp;
  for (; wr; wr = wr->next) {
    if (q->qp.state == IBV_QPS_RESET || q->qp.state == IBV_QPS_ERR || q->rq_n == q->max_recv) {
      *bad = wr;
      return q->rq_n == q->max_recv ? ENOMEM : EINVAL;
    }
    q->rq[(q->rq_head + q->rq_n) % q->max_recv] = wr->wr_id;
    q->rq_n++;
  }
  return 0;
}

static int soft_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct soft_qp *q = (struct soft_qp *)(void *)qp;
  for (; wr; wr = wr->next) {
    if (q->qp.state != IBV_QPS_RTS ||
        (wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM)) {
      *bad = wr;
      return EINVAL;
    }
    if (q->out_n >= q->max_send) {
      *bad = wr;
      return ENOMEM;
    }
    size_t len = 0;
    for (int i = 0; i < wr->num_sge; i++) len += wr->sg_list[i].length;
    if ((wr->send_flags & IBV_SEND_INLINE) && len > SOFT_MAX_INLINE) {
      *bad = wr;
      return EINVAL;
    }
    struct soft_msg *m = malloc(sizeof *m + len);
    if (!m) {
      *bad = wr;
      return ENOMEM;
    }
    memset(m, 0, sizeof *m);
    m->wr_id = wr->wr_id;
    m->signaled = (wr->send_flags & IBV_SEND_SIGNALED) != 0;
    m->op = IBV_WC_RDMA_WRITE;
    m->bytes = sizeof m->h + len;
    m->h = (struct soft_hdr){.magic = SOFT_MAGIC, .opcode = (uint32_t)wr->opcode,
                             .raddr = wr->wr.rdma.remote_addr, .rkey = wr->wr.rdma.rkey,
                             .len = (uint32_t)len, .imm = wr->imm_data};
    char *p = (char *)(m + 1);
    for (int i = 0; i < wr->num_sge; i++) {
      memcpy(p, (const void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
      p += wr->sg_list[i].length;
    }
    if (q->out_tail) q->out_tail->next = m;
    else q->out = m;
    q->out_tail = m;
    q->out_n++;
  }
  flush_out(q);
  return 0;
}

/* ---- the control path (the te_ibv table) ------------------------------------ */

static struct ibv_device **soft_get_device_list(int *n) {
  struct ibv_device **l = calloc(2, sizeof *l);
  if (n) *n = l ? 1 : 0;
  if (l) l[0] = &soft_device;
  return l;
}
static void soft_free_device_list(struct ibv_device **l) { free(l); }
static const char *soft_get_device_name(struct ibv_device *d) {
  (void)d;
  return "soft0";
}

static struct ibv_context *soft_open_device(struct ibv_device *d) {
  struct soft_ctx *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->ctx.device = d;
  c->ctx.ops.poll_cq = soft_poll_cq;
  c->ctx.ops.post_send = soft_post_send;
  c->ctx.ops.post_recv = soft_post_recv;
  c->seq = __atomic_add_fetch(&soft_seq, 1, __ATOMIC_RELAXED);
  c->next_qpn = 0x100;
  c->next_key = 0x1000 + c->seq * 0x100;
  soft_gid(c->gid, (uint32_t)getpid(), c->seq);
  struct sockaddr_un a;
  socklen_t al = soft_addr(&a, (uint32_t)getpid(), c->seq);
  c->lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (c->lfd < 0 || bind(c->lfd, (struct sockaddr *)&a, al) != 0 || listen(c->lfd, 64) != 0) {
    if (c->lfd >= 0) close(c->lfd);
    free(c);
    return NULL;
  }
  return &c->ctx;
}

static int soft_close_device(struct ibv_context *ctx) {
  struct soft_ctx *c = ctx_of(ctx);
  for (int i = 0; i < c->npending; i++) close(c->pending[i]);
  close(c->lfd);
  free(c);
  return 0;
}

static int soft_query_device(struct ibv_context *ctx, struct ibv_device_attr *a) {
  (void)ctx;
  memset(a, 0, sizeof *a);
  a->phys_port_cnt = 1;
  a->max_qp_wr = 4096;
  a->max_sge = 1;
  a->max_cqe = 1 << 16;
  a->max_mr_size = UINT64_MAX;
  return 0;
}

static int soft_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *a) {
  (void)ctx;
  if (port != 1) return EINVAL;
  memset(a, 0, sizeof *a);
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = 1;
  a->link_layer = IBV_LINK_LAYER_ETHERNET;
  return 0;
}

static int soft_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *g) {
  if (port != 1 || index != 0) return EINVAL;
  memcpy(g->raw, ctx_of(ctx)->gid, 16);
  return 0;
}

static struct ibv_pd *soft_alloc_pd(struct ibv_context *ctx) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd) pd->context = ctx;
  return pd;
}
static int soft_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

static struct ibv_mr *soft_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access) {
  struct soft_ctx *c = ctx_of(pd->context);
  struct soft_mr *m = calloc(1, sizeof *m);
  if (!m) return NULL;
  m->mr = (struct ibv_mr){.context = pd->context, .pd = pd, .addr = addr, .length = len};
  m->mr.lkey = m->mr.rkey = c->next_key++;
  m->access = access;
  m->next = c->mrs;
  c->mrs = m;
  return &m->mr;
}

static int soft_dereg_mr(struct ibv_mr *mr) {
  struct soft_ctx *c = ctx_of(mr->context);
  for (struct soft_mr **pp = &c->mrs; *pp; pp = &(*pp)->next)
    if (&(*pp)->mr == mr) {
      struct soft_mr *m = *pp;
      *pp = m->next;
      free(m);
      return 0;
    }
  return EINVAL;
}

static struct ibv_cq *soft_create_cq(struct ibv_context *ctx, int cqe, void *cq_ctx,
                                     struct ibv_comp_channel *ch, int vec) {
  (void)cq_ctx, (void)ch, (void)vec;
  struct soft_cq *s = calloc(1, sizeof *s);
  if (!s || cqe < 1 || !(s->ring = calloc((size_t)cqe, sizeof *s->ring))) {
    free(s);
    return NULL;
  }
  s->cap = (unsigned)cqe;
  s->cq.context = ctx;
  s->cq.cqe = cqe;
  return &s->cq;
}

static int soft_destroy_cq(struct ibv_cq *cq) {
  struct soft_cq *s = (struct soft_cq *)(void *)cq;
  free(s->ring);
  free(s);
  return 0;
}

static struct ibv_qp *soft_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *ia) {
  struct soft_ctx *c = ctx_of(pd->context);
  if (ia->qp_type != IBV_QPT_RC || ia->cap.max_inline_data > SOFT_MAX_INLINE ||
      !ia->cap.max_send_wr || !ia->cap.max_recv_wr || !ia->send_cq || !ia->recv_cq) {
    errno = EINVAL;
    return NULL;
  }
  struct soft_qp *q = calloc(1, sizeof *q);
  if (!q || !(q->rq = calloc(ia->cap.max_recv_wr, sizeof *q->rq))) {
    free(q);
    errno = ENOMEM;
    return NULL;
  }
  q->qp = (struct ibv_qp){.context = pd->context, .pd = pd, .send_cq = ia->send_cq,
                          .recv_cq = ia->recv_cq, .qp_num = c->next_qpn++,
                          .state = IBV_QPS_RESET, .qp_type = IBV_QPT_RC};
  q->fd = -1;
  q->max_send = ia->cap.max_send_wr;
  q->max_recv = ia->cap.max_recv_wr;
  ia->cap.max_inline_data = SOFT_MAX_INLINE;   /* what the device gives, as rxe reports */
  q->next = c->qps;
  c->qps = q;
  return &q->qp;
}

/* RTR: the end with the smaller (GID, QPN) dials the other. */
static int soft_connect(struct soft_ctx *c, struct soft_qp *q) {
  uint8_t mine[20], theirs[20];
  memcpy(mine, c->gid, 16);
  memcpy(mine + 16, &q->qp.qp_num, 4);
  memcpy(theirs, q->dgid, 16);
  memcpy(theirs + 16, &q->dqpn, 4);
  if (memcmp(mine, theirs, 20) >= 0) return 0;   /* the peer dials */
  if (memcmp(q->dgid, "teso", 4) != 0) return EINVAL;
  uint32_t pid, seq;
  memcpy(&pid, q->dgid + 4, 4);
  memcpy(&seq, q->dgid + 8, 4);
  struct sockaddr_un a;
  socklen_t al = soft_addr(&a, pid, seq);
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno;
  uint32_t hello[3] = {SOFT_HELLO, q->qp.qp_num, q->dqpn};
  if (connect(fd, (struct sockaddr *)&a, al) != 0 ||
      send(fd, hello, sizeof hello, MSG_NOSIGNAL) != (ssize_t)sizeof hello) {
    int e = errno;
    close(fd);
    return e ? e : EIO;
  }
  q->fd = fd;
  int fl = fcntl(fd, F_GETFL);   /* the data path never blocks */
  if (fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) != 0) return errno;
  return 0;
}

static int soft_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask) {
  struct soft_qp *q = (struct soft_qp *)(void *)qp;
  if (!(mask & IBV_QP_STATE)) return 0;
  switch (a->qp_state) {
  case IBV_QPS_INIT:
    q->qp.state = IBV_QPS_INIT;
    return 0;
  case IBV_QPS_RTR:
    if (q->qp.state != IBV_QPS_INIT || !(mask & IBV_QP_AV) || !(mask & IBV_QP_DEST_QPN)) {
      errno = EINVAL;
      return EINVAL;
    }
    memcpy(q->dgid, a->ah_attr.grh.dgid.raw, 16);
    q->dqpn = a->dest_qp_num;
    q->qp.state = IBV_QPS_RTR;
    {
      int e = soft_connect(ctx_of(qp->context), q);
      if (e) {
        errno = e;
        return e;
      }
    }
    return 0;
  case IBV_QPS_RTS:
    if (q->qp.state != IBV_QPS_RTR) {
      errno = EINVAL;
      return EINVAL;
    }
    q->qp.state = IBV_QPS_RTS;
    return 0;
  case IBV_QPS_ERR:
    qp_error(q, IBV_WC_WR_FLUSH_ERR);
    return 0;
  default:
    errno = EINVAL;
    return EINVAL;
  }
}

static int soft_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *a, int mask,
                         struct ibv_qp_init_attr *ia) {
  (void)mask;
  struct soft_qp *q = (struct soft_qp *)(void *)qp;
  memset(a, 0, sizeof *a);
  a->qp_state = a->cur_qp_state = q->qp.state;
  a->cap.max_inline_data = SOFT_MAX_INLINE;
  if (ia) memset(ia, 0, sizeof *ia);
  return 0;
}

static int soft_destroy_qp(struct ibv_qp *qp) {
  struct soft_qp *q = (struct soft_qp *)(void *)qp;
  struct soft_ctx *c = ctx_of(qp->context);
  for (struct soft_qp **pp = &c->qps; *pp; pp = &(*pp)->next)
    if (*pp == q) {
      *pp = q->next;
      break;
    }
  if (q->fd >= 0) close(q->fd);
  for (struct soft_msg *m = q->out; m;) {
    struct soft_msg *nx = m->next;
    free(m);
    m = nx;
  }
  free(q->rq);
  free(q->ibuf);
  free(q);
  return 0;
}

static const char *soft_wc_status_str(enum ibv_wc_status st) {
  switch (st) {
  case IBV_WC_SUCCESS: return "success";
  case IBV_WC_RETRY_EXC_ERR: return "transport retry counter exceeded";
  case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
  case IBV_WC_WR_FLUSH_ERR: return "Work Request Flushed Error";
  case IBV_WC_REM_ACCESS_ERR: return "remote access error";
  case IBV_WC_GENERAL_ERR: return "general error";
  default: return "error";
  }
}

const struct te_ibv_api tc_vb_soft_api = {
    .get_device_list = soft_get_device_list,
    .free_device_list = soft_free_device_list,
    .get_device_name = soft_get_device_name,
    .open_device = soft_open_device,
    .close_device = soft_close_device,
    .query_device = soft_query_device,
    .query_port = soft_query_port,
    .query_gid = soft_query_gid,
    .alloc_pd = soft_alloc_pd,
    .dealloc_pd = soft_dealloc_pd,
    .reg_mr = soft_reg_mr,
    .dereg_mr = soft_dereg_mr,
    .create_cq = soft_create_cq,
    .destroy_cq = soft_destroy_cq,
    .create_qp = soft_create_qp,
    .modify_qp = soft_modify_qp,
    .query_qp = soft_query_qp,
    .destroy_qp = soft_destroy_qp,
    .wc_status_str = soft_wc_status_str,
};
#endif
