/* SPDX-License-Identifier: Apache-2.0
 * demo_tp.c -- the tools' multi-rank machinery (demo_tp.h; libtetools,
 * linked by te-demo and te-gpt): the shared page and its bootstrap,
 * forking the ranks, te-demo's split MLP block and its weight slices.
 * Messages name the calling tool (demo_tp_set_tool). */
#include "demo_tp.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#ifdef __linux__
#include <sys/prctl.h>
#endif
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static const char *tool = "te-demo";

void demo_tp_set_tool(const char *name) { tool = name ? name : "te-demo"; }

#define SLOT_BYTES 16384   /* the largest block one bootstrap allgather moves */

struct demo_tp_page {
  atomic_int arrived, sense;
  int n, steps;
  size_t bytes;
  unsigned char slot[DEMO_TP_MAX][SLOT_BYTES];
  double times[2][DEMO_TP_NVARIANTS][2];
  double loss[];   /* ref [2][steps], then [2][variants][ranks][steps] */
};

struct demo_tp_page *demo_tp_page_create(int n, int steps) {
  size_t nl = (size_t)2 * steps + (size_t)2 * DEMO_TP_NVARIANTS * DEMO_TP_MAX * steps;
  size_t bytes = sizeof(struct demo_tp_page) + nl * sizeof(double);
  struct demo_tp_page *p =
      mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    fprintf(stderr, "%s: ranks: mmap of %zu bytes: %s\n", tool, bytes, strerror(errno));
    return NULL;
  }
  memset(p, 0, sizeof *p);
  p->n = n;
  p->steps = steps;
  p->bytes = bytes;
  return p;
}

void demo_tp_page_free(struct demo_tp_page *p) {
  if (p) munmap(p, p->bytes);
}

double *demo_tp_ref_loss(struct demo_tp_page *p, int prec) {
  return p->loss + (size_t)prec * p->steps;
}

double *demo_tp_loss(struct demo_tp_page *p, int prec, int variant, int rank) {
  size_t k = ((size_t)prec * DEMO_TP_NVARIANTS + (size_t)variant) * DEMO_TP_MAX + (size_t)rank;
  return p->loss + (size_t)2 * p->steps + k * p->steps;
}

double *demo_tp_times(struct demo_tp_page *p, int prec, int variant) {
  return p->times[prec][variant];
}

/* ---- processes ------------------------------------------------------------------ */

/* A rank outlives no parent: the parent is the one that ends the others
 * when a rank fails (below).  Without it a rank whose parent died (a
 * SIGPIPE on a closed pipe: `te-gpt --dp 2 | head`) would wait out the
 * last barrier's hour, spinning. */
static void end_with_parent(pid_t parent) {
#ifdef __linux__
  (void)prctl(PR_SET_PDEATHSIG, SIGTERM);
#endif
  if (getppid() != parent) _exit(1);   /* it died before the line above */
}

int demo_tp_fork(int count, int (*fn)(void *arg, int rank), void *arg) {
  pid_t pid[DEMO_TP_MAX], self = getpid();
  fflush(stdout);
  fflush(stderr);
  int started = 0, worst = 0;
  for (; started < count; started++) {
    pid[started] = fork();
    if (pid[started] < 0) {
      fprintf(stderr, "%s: ranks: fork: %s\n", tool, strerror(errno));
      worst = 1;
      break;
    }
    if (pid[started] == 0) {
      end_with_parent(self);
      int rc = fn(arg, started);
      fflush(stdout);
      fflush(stderr);
      _exit(rc);
    }
  }
  /* a rank that could not start, or that failed, leaves the others
   * waiting on it (in the bootstrap, a collective or the last barrier)
   * until their bounds: end them now */
  if (started < count)
    for (int r = 0; r < started; r++) kill(pid[r], SIGTERM);
  int left = started, done[DEMO_TP_MAX] = {0};
  while (left > 0) {
    int st = 0;
    pid_t w = waitpid(-1, &st, 0);
    if (w < 0) {
      if (errno == EINTR) continue;
      break;
    }
    int r = 0;
    while (r < started && pid[r] != w) r++;
    if (r == started || done[r]) continue;
    done[r] = 1;
    left--;
    int rc = WIFEXITED(st) ? WEXITSTATUS(st) : 1;
    if (WIFSIGNALED(st))
      fprintf(stderr, "%s: rank %d died of signal %d\n", tool, r, WTERMSIG(st));
    if (rc > worst) worst = rc;
    if (rc != 0)
      for (int k = 0; k < started; k++)
        if (!done[k]) kill(pid[k], SIGTERM);
  }
  return worst;
}

/* ---- the bootstrap over the page ------------------------------------------------- */

/* A sense-reversing barrier; gives up after limit_s (a dead rank). */
static int page_barrier(struct demo_tp_page *p, int limit_s) {
  int my_sense = !atomic_load(&p->sense);
  if (atomic_fetch_add(&p->arrived, 1) == p->n - 1) {
    atomic_store(&p->arrived, 0);
    atomic_store(&p->sense, my_sense);
    return 0;
  }
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  while (atomic_load(&p->sense) != my_sense) {
    clock_gettime(CLOCK_MONOTONIC, &t1);
    if (t1.tv_sec - t0.tv_sec > limit_s) return -1;
    usleep(50);
  }
  return 0;
}

int demo_tp_barrier(struct demo_tp_page *p) { return page_barrier(p, 3600); }

struct boot_ctx {
  struct demo_tp_page *page;
  int rank;
};
static struct boot_ctx boot;   /* one communicator a process */

static int boot_allgather(const void *send, void *recv, size_t bytes, void *ctx) {
  struct boot_ctx *b = ctx;
  struct demo_tp_page *p = b->page;
  if (bytes > SLOT_BYTES) return -2;
  if (page_barrier(p, 120)) return -1;   /* everyone has read the last round */
  memcpy(p->slot[b->rank], send, bytes);
  if (page_barrier(p, 120)) return -1;
  for (int r = 0; r < p->n; r++) memcpy((char *)recv + (size_t)r * bytes, p->slot[r], bytes);
  return 0;
}

static int boot_barrier(void *ctx) { return page_barrier(((struct boot_ctx *)ctx)->page, 120); }

int demo_tp_init(struct demo_tp *t, struct demo_tp_page *page, int n, int rank) {
  memset(t, 0, sizeof *t);
  t->n = n;
  t->rank = rank;
  t->page = page;
  boot.page = page;
  boot.rank = rank;
  struct tecomm_bootstrap b;
  memset(&b, 0, sizeof b);
  b.kind = TECOMM_BOOTSTRAP_CALLBACKS;
  b.allgather = boot_allgather;
  b.barrier = boot_barrier;
  b.ctx = &boot;
  tecomm_result_t r = tecomm_comm_init(rank, n, -1, &b, &t->comm);
  if (r == TECOMM_SUCCESS) r = tecomm_ops_register();
  if (r != TECOMM_SUCCESS) {
    fprintf(stderr, "%s: rank %d: %s (%s)\n", tool, rank, tecomm_strerror(r),
            tecomm_last_error());
    return 1;
  }
  t->params[DEMO_TP_FUSED] = (struct tecomm_op_params){.comm = t->comm};
  demo_tp_baseline(t, 0);
  demo_tp_bwd_nccl(t, 0);
  return 0;
}

void demo_tp_baseline(struct demo_tp *t, int nccl) {
  t->nccl = nccl;
  t->params[DEMO_TP_BASE] = (struct tecomm_op_params){
      .comm = t->comm, .algo = nccl ? TECOMM_ALGO_NCCL : TECOMM_ALGO_AUTO,
      .flags = TECOMM_OP_NO_FUSION};
  t->copy_params[DEMO_TP_BASE] = t->params[DEMO_TP_BASE];
  t->params[DEMO_TP_BASE_OVL] = t->copy_params[DEMO_TP_BASE_OVL] = t->params[DEMO_TP_BASE];
}

unsigned demo_tp_seq_flags(const struct demo_tp *t) {
  return t->variant == DEMO_TP_BASE ? TECORE_SEQ_NO_OVERLAP : 0u;
}

void demo_tp_bwd_nccl(struct demo_tp *t, int nccl) {
  t->copy_params[DEMO_TP_FUSED] = t->params[DEMO_TP_FUSED];
  if (nccl) t->copy_params[DEMO_TP_FUSED].algo = TECOMM_ALGO_NCCL;
}

void demo_tp_fini(struct demo_tp *t) {
  demo_tp_release(t);
  if (t->loss_sum) (void)tecore_mem_free(t->loss_sum);
  t->loss_sum = 0;
  if (t->comm) (void)tecomm_comm_destroy(t->comm);
  t->comm = NULL;
}

/* ---- the model ------------------------------------------------------------------ */

tecore_result_t demo_tp_add_block(tecore_seq_t *q, const struct demo_tp *t, int layer,
                                  size_t hidden, size_t ffn) {
  void *ctx = (void *)&t->params[t->variant], *cctx = (void *)&t->copy_params[t->variant];
  int slot = layer % TECORE_SEQ_MAX_SLOTS;
  const struct tecore_op_desc d[] = {
      {.kind = TECORE_OP_MAKE_EXTRA_OUTPUT, .slot = slot},
      {.kind = TECORE_OP_RMSNORM, .epsilon = 1e-5f},
      {.kind = t->sp ? TECORE_OP_ALLGATHER : TECORE_OP_TP_COPY, .ctx = cctx},
      {.kind = TECORE_OP_LINEAR, .features = ffn / (size_t)t->n, .bias = 1},
      {.kind = TECORE_OP_GELU},
      {.kind = TECORE_OP_LINEAR, .features = hidden, .bias = t->rank == 0},
      {.kind = t->sp ? TECORE_OP_REDUCE_SCATTER : TECORE_OP_TP_REDUCE, .ctx = ctx},
      {.kind = TECORE_OP_ADD_EXTRA_INPUT, .slot = slot},
  };
  for (size_t k = 0; k < sizeof d / sizeof d[0]; k++) {
    tecore_result_t r = tecore_seq_add(q, &d[k], NULL);
    if (r != TECORE_SUCCESS) return r;
  }
  return TECORE_SUCCESS;
}

/* The libtecomm failure of call as libtecore's, its detail kept. */
static tecore_result_t comm_failed(const char *call) {
  tecore_set_error("%s: %s", call, tecomm_last_error());
  return TECORE_ERR_INTERNAL;
}

tecore_result_t demo_tp_sp_grads(const struct demo_tp *t, const struct tecore_seq_param *p,
                                 size_t n, tecore_stream_t s) {
  for (size_t i = 0; i < n; i++) {
    if (strcmp(p[i].name, "gamma") != 0) continue;
    if (tecomm_allreduce(t->comm, p[i].grad.data, p[i].grad.data,
                         tecore_tensor_numel(&p[i].grad), TECORE_DTYPE_F32, TECOMM_SUM, s))
      return comm_failed("demo_tp_sp_grads: tecomm_allreduce");
  }
  return TECORE_SUCCESS;
}

tecore_result_t demo_tp_sum_loss(struct demo_tp *t, double *loss, tecore_stream_t s) {
  float v = (float)*loss;
  tecore_result_t r = t->loss_sum ? TECORE_SUCCESS : tecore_mem_alloc(4, &t->loss_sum);
  if (r == TECORE_SUCCESS) r = tecore_memcpy(t->loss_sum, (tecore_devptr_t)(uintptr_t)&v, 4);
  if (r == TECORE_SUCCESS &&
      tecomm_allreduce(t->comm, t->loss_sum, t->loss_sum, 1, TECORE_DTYPE_F32, TECOMM_SUM, s))
    return comm_failed("demo_tp_sum_loss: tecomm_allreduce");
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(s);
  if (r == TECORE_SUCCESS) r = tecore_memcpy((tecore_devptr_t)(uintptr_t)&v, t->loss_sum, 4);
  if (r == TECORE_SUCCESS) *loss = v;
  return r;
}

/* The parameters of a built sequence (caller frees). */
static tecore_result_t params_of(tecore_seq_t *q, struct tecore_seq_param **p, size_t *n) {
  tecore_result_t r = tecore_seq_params(q, NULL, 0, n);
  if (r != TECORE_SUCCESS) return r;
  *p = calloc(*n, sizeof **p);
  if (!*p) return TECORE_ERR_NOMEM;
  return tecore_seq_params(q, *p, *n, n);
}

tecore_result_t demo_tp_load_slices(tecore_seq_t *tp, tecore_seq_t *full, const struct demo_tp *t,
                                    int layers, size_t hidden, size_t ffn, tecore_stream_t s) {
  struct tecore_seq_param *pf = NULL, *pt = NULL;
  size_t nf = 0, nt = 0;
  size_t fl = ffn / (size_t)t->n, off = (size_t)t->rank * fl;
  uint16_t *src = malloc(ffn * hidden * 2), *dst = malloc(ffn * hidden * 2);
  tecore_result_t r = src && dst ? params_of(full, &pf, &nf) : TECORE_ERR_NOMEM;
  if (r == TECORE_SUCCESS) r = params_of(tp, &pt, &nt);
  /* per block, full: gamma, fc1 weight, fc1 bias, fc2 weight, fc2 bias;
   * this rank: the same, fc2's bias on rank 0 only */
  size_t kt = 0;
  for (size_t kf = 0; r == TECORE_SUCCESS && kf < nf; kf++) {
    size_t which = kf % 5;
    if (which == 4 && t->rank != 0) continue;
    if (kf / 5 >= (size_t)layers || kt >= nt) {
      r = TECORE_ERR_INTERNAL;
      break;
    }
    size_t n = tecore_tensor_numel(&pf[kf].value), m = tecore_tensor_numel(&pt[kt].value);
    r = tecore_memcpy((tecore_devptr_t)(uintptr_t)src, pf[kf].value.data, n * 2);
    if (r != TECORE_SUCCESS) break;
    switch (which) {
    case 1: /* fc1 weight [ffn][hidden]: rows off .. off + fl */
      memcpy(dst, src + off * hidden, fl * hidden * 2);
      break;
    case 2: /* fc1 bias [ffn] */
      memcpy(dst, src + off, fl * 2);
      break;
    case 3: /* fc2 weight [hidden][ffn]: columns off .. off + fl */
      for (size_t i = 0; i < hidden; i++) memcpy(dst + i * fl, src + i * ffn + off, fl * 2);
      break;
    default: /* gamma, fc2 bias: whole */
      memcpy(dst, src, n * 2);
    }
    r = tecore_memcpy(pt[kt].value.data, (tecore_devptr_t)(uintptr_t)dst, m * 2);
    kt++;
  }
  if (r == TECORE_SUCCESS && kt != nt) r = TECORE_ERR_INTERNAL;
  if (r == TECORE_ERR_INTERNAL || r == TECORE_ERR_NOMEM)
    tecore_set_error("demo_tp_load_slices: %s (%zu parameters of the full model, %zu of rank "
                     "%d's)", r == TECORE_ERR_NOMEM ? "out of host memory"
                                                    : "the models' parameters do not pair up",
                     nf, nt, t->rank);
  if (r == TECORE_SUCCESS) r = tecore_stream_synchronize(s);
  free(pf);
  free(pt);
  free(src);
  free(dst);
  return r;
}

/* ---- symmetric inputs of the sums ------------------------------------------------- */

/* One more symmetric buffer of bytes in t->sym (*p), collectively. */
static tecore_result_t sym_alloc(struct demo_tp *t, size_t bytes, tecore_devptr_t *p) {
  tecore_devptr_t *sym = realloc(t->sym, (t->nsym + 1) * sizeof *sym);
  if (!sym) {
    tecore_set_error("demo_tp_symmetric: out of host memory");
    return TECORE_ERR_NOMEM;
  }
  t->sym = sym;
  if (tecomm_mem_alloc(t->comm, bytes, p) != TECOMM_SUCCESS) {
    /* the detail is tecomm_mem_alloc's */
    tecore_set_error("demo_tp_symmetric: tecomm_mem_alloc of %zu bytes: %s", bytes,
                     tecomm_last_error());
    return TECORE_ERR_DEVICE_NOMEM;
  }
  t->sym[t->nsym++] = *p;
  return TECORE_SUCCESS;
}

/* The gradients tp_copy's backward sums: the input gradient of the
 * Linear after each tp_copy (boundary i + 1), one shared buffer. */
static tecore_result_t symmetric_grads(tecore_seq_t *q, struct demo_tp *t) {
  size_t nops = 0, bytes = 0;
  tecore_result_t r = tecore_seq_groups(q, TECORE_SEQ_FORWARD, NULL, 0, &nops);
  struct tecore_op_info info;
  /* the number of operations: the last group's end */
  struct tecore_seq_group *g = calloc(nops ? nops : 1, sizeof *g);
  if (!g) return TECORE_ERR_NOMEM;
  if (r == TECORE_SUCCESS) r = tecore_seq_groups(q, TECORE_SEQ_FORWARD, g, nops, &nops);
  size_t n = r == TECORE_SUCCESS && nops ? g[nops - 1].first + g[nops - 1].count : 0;
  free(g);
  for (size_t i = 0; r == TECORE_SUCCESS && i + 1 < n; i++) {
    r = tecore_seq_op(q, i, &info);
    if (r == TECORE_SUCCESS && info.desc.kind == TECORE_OP_TP_COPY) {
      size_t b = info.out_rows * info.out_features * 2;   /* bf16 */
      if (b > bytes) bytes = b;
    }
  }
  if (r != TECORE_SUCCESS || bytes == 0) return r;
  tecore_devptr_t p = 0;
  r = sym_alloc(t, bytes, &p);
  for (size_t i = 0; r == TECORE_SUCCESS && i + 1 < n; i++) {
    r = tecore_seq_op(q, i, &info);
    if (r == TECORE_SUCCESS && info.desc.kind == TECORE_OP_TP_COPY)
      r = tecore_seq_set_grad(q, i + 1, p);
  }
  return r;
}

tecore_result_t demo_tp_symmetric(tecore_seq_t *q, struct demo_tp *t, int grads) {
  size_t ns = 0;
  tecore_result_t r = tecore_seq_get_saved(q, NULL, 0, &ns);
  struct tecore_seq_saved *sv = calloc(ns ? ns : 1, sizeof *sv);
  if (!sv) {
    tecore_set_error("demo_tp_symmetric: out of host memory");
    return TECORE_ERR_NOMEM;
  }
  if (r == TECORE_SUCCESS) r = tecore_seq_get_saved(q, sv, ns, &ns);
  for (size_t i = 0; r == TECORE_SUCCESS && i < ns; i++) {
    struct tecore_op_info info;
    if (sv[i].part != TECORE_SEQ_SAVED_DATA) continue;
    r = tecore_seq_op(q, sv[i].bnd, &info);
    if (r != TECORE_SUCCESS || info.desc.kind != TECORE_OP_TP_REDUCE) continue;
    tecore_devptr_t p = 0;
    r = sym_alloc(t, sv[i].bytes, &p);
    if (r == TECORE_SUCCESS) r = tecore_seq_set_saved(q, i, p);
  }
  free(sv);
  if (r == TECORE_SUCCESS && grads) r = symmetric_grads(q, t);
  return r;
}

void demo_tp_release(struct demo_tp *t) {
  for (size_t i = 0; i < t->nsym; i++) (void)tecomm_mem_free(t->comm, t->sym[i]);
  free(t->sym);
  t->sym = NULL;
  t->nsym = 0;
}
