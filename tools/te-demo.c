/* SPDX-License-Identifier: Apache-2.0 */
/* te-demo -- libte's main job: train a stack of transformer-style MLP
 * blocks (x + Linear(GELU(Linear(RMSNorm(x)))) per layer) built with the
 * operation fuser (te/ops.h), with delayed-scaling FP8 (HYBRID: E4M3
 * forward, E5M2 gradients), on synthetic data from a fixed seed: regress
 * the output of a fixed random "teacher" network of the same shape (MSE
 * loss on the device), AdamW through te/optim.h.  The step (forward and
 * backward of every microbatch) replays graphed callables (libtegraph)
 * with the FP8 weights quantized on the first microbatch and reused by the
 * others (--no-graphs: eager launches; --step-graph: the whole step, the
 * loss, the FP8 scale update and AdamW included, one graph replayed each
 * step, AdamW reading its step number and learning rate from device
 * memory).  Then the same model, the same seed, in BF16, for comparison;
 * then both again in the reversed order (BF16, then FP8), for the step
 * times alone, so that each precision runs once first and once second and
 * the FP8/BF16 speed ratio (each precision's median step over both
 * positions) does not favour the one that runs second (--one-order: not).
 * The three modes compute the same bits.
 *
 * Prints per step the loss, step time, throughput (tokens/s and the
 * GEMMs' TFLOP/s) and memory; exits 1 when a loss curve does not go down
 * or the FP8 curve leaves the BF16 curve by more than --tolerance (a
 * fraction of the first BF16 loss, at any step), so the demo is also a
 * check.
 *
 * --offload: the FP8 run again with activation offload (te/offload.h) on
 * the model's blocks -- copied to pinned host memory during forward (and
 * to files past --host-budget, in --offload-dir) and back ahead of
 * backward -- whose losses must be the same bits as the run without it;
 * prints the device memory saved, the step-time ratio and the bytes moved.
 *
 * --tp N: the same model tensor-parallel over N forked ranks (demo_tp.h),
 * after the one-process run that is its reference: per precision a fused
 * variant (libtecomm's allreduce + residual add + RMSNorm in one call, a
 * fuser pattern) and an unfused baseline (NCCL's allreduce on cuda,
 * libtecomm's on vdev); the fused variant's backward sums overlap the
 * wgrad GEMMs (te/ops.h, TECORE_OPS_OVERLAP), the baseline's do not, and
 * --tp-base-overlap adds the baseline with overlap; rank 0 checks every
 * curve against the reference and prints the step and forward-alone
 * times side by side (the forward alone: the trained model's inference
 * twin, TECORE_SEQ_INFERENCE, its output checked against the training
 * forward's).  --sp: the blocks sequence-parallel (demo_tp.h): each rank
 * holds tokens / N rows, its loss share over all the tokens.
 *
 * Shapes: activations [tokens][hidden], the MLP's inner width ffn
 * (4 * hidden by default); weights [ffn][hidden] and [hidden][ffn]. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <te/core.h>
#include <te/graph.h>
#include "cli.h"
#include "out.h"
#include "mlp_block.h"
#include "demo_offload.h"
#include "demo_tp.h"
#include "demo_tpprof.h"

#define CHECK(call)                                                                   \
  do {                                                                                \
    tecore_result_t r_ = (call);                                                      \
    if (r_ != TECORE_SUCCESS) {                                                       \
      fprintf(stderr, "te-demo: %s failed: %s (%s)\n", #call, tecore_strerror(r_),    \
              tecore_last_error());                                                   \
      exit(TE_EXIT_FAIL);                                                             \
    }                                                                                 \
  } while (0)
#define GCHECK(call)                                                                  \
  do {                                                                                \
    tegraph_result_t r_ = (call);                                                     \
    if (r_ != TEGRAPH_SUCCESS) {                                                      \
      fprintf(stderr, "te-demo: %s failed: %s (%s)\n", #call, tegraph_strerror(r_),   \
              tegraph_last_error());                                                  \
      exit(TE_EXIT_FAIL);                                                             \
    }                                                                                 \
  } while (0)

/* --csv, --json: the steps and the runs as rows (tools/out.h); the prose
 * then goes to stderr.  Not with --tp (its ranks are processes). */
static struct te_out OUT = {.tool = "te-demo", .own_table = 1};
static const struct te_out_col step_cols[] = {
    {"run", TE_OUT_STR, 0, 0, 0, 0},          {"step", TE_OUT_NUM, 0, 0, 0, 0},
    {"loss", TE_OUT_NUM, 0, 0, 0, 0},         {"ms", TE_OUT_NUM, 0, 0, 0, 0},
    {"host_us", TE_OUT_NUM, 0, 0, 0, 0},      {"tokens_per_s", TE_OUT_NUM, 0, 0, 0, 0},
    {"tflops", TE_OUT_NUM, 0, 0, 0, 0}};
static const struct te_out_col run_cols[] = {
    {"run", TE_OUT_STR, 0, 0, 0, 0},          {"first_loss", TE_OUT_NUM, 0, 0, 0, 0},
    {"last_loss", TE_OUT_NUM, 0, 0, 0, 0},    {"ms_per_step", TE_OUT_NUM, 0, 0, 0, 0},
    {"host_us", TE_OUT_NUM, 0, 0, 0, 0},      {"tokens_per_s", TE_OUT_NUM, 0, 0, 0, 0},
    {"tflops", TE_OUT_NUM, 0, 0, 0, 0},       {"loss_went_down", TE_OUT_BOOL, 0, 0, 0, 0}};

/* How a step reaches the device. */
enum graph_mode { MODE_EAGER, MODE_CALLABLES, MODE_STEP };
static const char *const mode_text[] = {
    "eager launches", "graphed callables (FP8 weights cached after the first microbatch)",
    "one graph per step (forward, backward, loss, scale update and AdamW)"};

struct opts {
  size_t hidden, ffn, tokens;
  int layers, steps, microbatches, graphs, bf16, quiet;   /* graphs: enum graph_mode */
  int profile;                                          /* --profile: time step 1's kernels */
  int one_order;                                        /* --one-order: no reversed pass */
  double lr, tolerance;
  unsigned long long seed;
  struct demo_offload_opts off;
  int tp;                  /* --tp N: ranks (0: one process, no communication) */
  int tp_comm;             /* --tp-comm: the baseline's allreduce (TP_COMM_*) */
  int tp_profile;          /* --tp-profile: the eager pass timed phase by phase */
  int tp_bwd_nccl;         /* --tp-bwd-comm nccl: the fused variant's backward sums */
  int tp_base_overlap;     /* --tp-base-overlap: the baseline again, with backward overlap */
  int sp;                  /* --sp: the --tp blocks sequence-parallel (demo_tp.h) */
  struct demo_tp *tpc;     /* in a rank of a --tp run: its communicator and variant */
};

/* --tp-comm: the unfused baseline's allreduce */
enum { TP_COMM_DEFAULT = 0, TP_COMM_NCCL, TP_COMM_TECOMM };

/* The sizes given on the command line; 0: not given, the backend's
 * default (resolve_opts). */
struct given {
  size_t hidden, ffn, tokens, layers, steps, mbs;
  double lr;
};

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t splitmix(uint64_t *x) {
  uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* ---- device helpers ------------------------------------------------------------ */

static struct tecore_tensor tensor2(tecore_dtype_t dt, size_t rows, size_t cols,
                                    tecore_devptr_t p) {
  struct tecore_tensor t;
  size_t sh[2] = {rows, cols};
  CHECK(tecore_tensor_init(&t, dt, 2, sh, p));
  return t;
}

static tecore_devptr_t dalloc(size_t bytes) {
  tecore_devptr_t p;
  CHECK(tecore_mem_alloc(bytes, &p));
  return p;
}

/* Uniform values with unit variance, as bf16 (synchronously). */
static void fill_random(tecore_devptr_t dst, size_t n, uint64_t seed, tecore_devptr_t one,
                        tecore_stream_t s) {
  float *h = malloc(n * sizeof *h);
  if (!h) {
    fprintf(stderr, "te-demo: out of host memory\n");
    exit(TE_EXIT_FAIL);
  }
  for (size_t i = 0; i < n; i++)
    h[i] = (float)(1.7320508 * (2.0 * (double)(splitmix(&seed) >> 11) / 9007199254740992.0 - 1.0));
  /* kernels read device memory only: stage the floats there, then convert */
  tecore_devptr_t f = dalloc(n * 4);
  CHECK(tecore_memcpy_async(f, (tecore_devptr_t)(uintptr_t)h, n * 4, s));
  struct tecore_tensor in = tensor2(TECORE_DTYPE_F32, 1, n, f);
  struct tecore_tensor out = tensor2(TECORE_DTYPE_BF16, 1, n, dst);
  CHECK(tecore_unscale_multi(&in, &out, 1, one, 0, s));
  CHECK(tecore_stream_synchronize(s));
  CHECK(tecore_mem_free(f));
  free(h);
}

/* The elements the loss averages over: a sequence-parallel rank holds
 * 1/tp of the tokens (o->tokens its rows), and its share of the loss and
 * of its gradient are over all of them, so that the ranks' shares add up
 * to the one-process loss and the gradients sum to its gradients. */
static size_t loss_elems(const struct opts *o) {
  size_t n = o->tokens * o->hidden;
  return o->tpc && o->tpc->sp ? n * (size_t)o->tp : n;
}

/* The MLP stack as a fuser sequence: the whole model (full), or in a rank
 * of a --tp run this rank's part of it, its weights sliced from the whole
 * model of the same seed (demo_tp.h).  flags: more tecore_seq_config
 * flags (TECORE_SEQ_INFERENCE: a twin whose parameters the caller copies
 * in, so no slices are loaded). */
static tecore_seq_t *make_model(const struct opts *o, uint64_t seed,
                                const struct tecore_recipe *recipe, tecore_stream_t s, int full,
                                unsigned flags) {
  int tp = o->tpc && !full;
  struct tecore_seq_config cfg = {.rows = o->tokens, .features = o->hidden,
                                  .dtype = TECORE_DTYPE_BF16, .seed = seed,
                                  .flags = (tp ? demo_tp_seq_flags(o->tpc) : 0u) | flags};
  tecore_seq_t *q;
  CHECK(tecore_seq_create(&cfg, &q));
  for (int l = 0; l < o->layers; l++)
    CHECK(tp ? demo_tp_add_block(q, o->tpc, l, o->hidden, o->ffn)
             : te_tools_add_mlp_block(q, l, o->hidden, o->ffn));
  if (recipe) CHECK(tecore_seq_set_recipe(q, recipe, s));
  CHECK(tecore_seq_build(q, s));
  if (tp) {
    if (!(flags & TECORE_SEQ_INFERENCE)) {
      tecore_seq_t *whole = make_model(o, seed, NULL, s, 1, 0);
      CHECK(demo_tp_load_slices(q, whole, o->tpc, o->layers, o->hidden, o->ffn, s));
      CHECK(tecore_seq_destroy(whole));
    }
    CHECK(demo_tp_symmetric(q, o->tpc, !(flags & TECORE_SEQ_INFERENCE)));
  }
  return q;
}

/* ---- one training run -------------------------------------------------------------- */

struct data {
  int mb;
  tecore_devptr_t *x, *t;          /* [mb] inputs and targets, bf16 [tokens][hidden] */
};

struct run {
  const char *name;
  double *loss, *ms, *host_us;     /* per step: loss, wall time, host time to queue it */
  double mem_model, mem_optim;     /* MiB */
  size_t dev_used, dev_total;      /* device memory in use after setup, and all of it */
  char plan_fwd[1024], plan_bwd[1024];
  int offload;                     /* this run offloads activations */
  int again;                       /* the reversed-order pass: timed, not checked */
  double fwd_ms;                   /* --tp: one microbatch's forward alone (inference) */
  struct demo_tpprof_result prof;  /* --tp-profile: the eager pass's phases */
  struct demo_offload dof;
};

struct model {
  tecore_seq_t *seq;
  tegraph_callable_t *callable;
  struct demo_offload *off;        /* NULL: no offload */
};

/* What one training run owns: the model, the optimizer's tensors and
 * its device state, the loss buffers.  A step (queue_step) touches all of
 * it; setup fills it in the order below and stepper_free releases it. */
struct stepper {
  const struct opts *o;
  const struct data *dd;
  struct model *m;
  struct tecore_seq_param *p;      /* the sequence's parameters, [np] */
  struct tecore_optim_tensor *ot;
  size_t np;
  tecore_devptr_t one;             /* f32 1.0: the unscale factor */
  tecore_devptr_t optim_state;     /* struct tecore_optim_state: step count and lr */
  tecore_devptr_t diff, dy, noop, ws, y_eager;
  tecore_devptr_t mbflags;         /* int32 {0, 1}: the noop flag of microbatch 0, of the rest */
  size_t wsb;
  float *norms;                    /* pinned: each microbatch's |y - t| */
};

/* prof (--tp-profile): the phase from here on (demo_tpprof.h). */
static void phase(struct demo_tpprof *prof, int ph, tecore_stream_t s) {
  if (prof) CHECK(demo_tpprof_phase(prof, ph, s));
}

/* Queues one step on s: zeroed gradients, forward and backward of every
 * microbatch (the norm kernel writes the loss norm straight into pinned
 * memory), the FP8 scale update and AdamW.  Nothing here waits, so a
 * capture can record it; and no memset or copy either, so the step graph
 * is a line of kernel nodes, the kind the driver launches fastest.
 * prof (--tp-profile; NULL: none): eager passes whatever the mode (pass
 * hooks fire only there), each phase's start marked. */
static void queue_step(const struct stepper *st, tecore_stream_t s, struct demo_tpprof *prof) {
  const struct opts *o = st->o;
  size_t n = o->tokens * o->hidden;
  struct tecore_tensor diff_t = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->diff);
  struct tecore_tensor dy_t = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dy);
  int callables = o->graphs == MODE_CALLABLES && !prof;
  phase(prof, TPP_OTHER, s);
  CHECK(tecore_seq_zero_grad(st->m->seq, s));
  for (int mb = 0; mb < o->microbatches; mb++) {
    struct tecore_tensor xin = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dd->x[mb]);
    struct tecore_tensor y = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->y_eager);
    struct tegraph_replay_opts ro = {.stream = s, .is_first_microbatch = mb == 0};
    phase(prof, TPP_FWD, s);
    if (callables) {
      y.data = 0;   /* receives the static output */
      GCHECK(tegraph_callable_forward(st->m->callable, &xin, 1, NULL, NULL, 0, &y, 1, &ro));
    } else {
      /* the FP8 weights are quantized on the first microbatch only */
      CHECK(tecore_seq_forward(st->m->seq, &xin, &y, st->mbflags + (mb == 0 ? 0 : 4), s));
    }
    /* MSE over the step's tokens: loss = sum (y - t)^2 / (n * mb) */
    phase(prof, TPP_LOSS, s);
    CHECK(tecore_scale_add(st->diff, y.data, 1.0f, st->dd->t[mb], -1.0f, TECORE_DTYPE_BF16, n,
                           s));
    /* pinned memory's device address is its host address */
    CHECK(tecore_l2norm_multi(&diff_t, 1, st->ws, st->wsb,
                              (tecore_devptr_t)(uintptr_t)&st->norms[mb], 0, s));
    float g = 2.0f / ((float)loss_elems(o) * (float)o->microbatches);
    CHECK(tecore_scale_add(st->dy, st->diff, g, st->diff, 0.0f, TECORE_DTYPE_BF16, n, s));
    phase(prof, TPP_BWD, s);
    if (callables)
      GCHECK(tegraph_callable_backward(st->m->callable, &dy_t, 1, NULL, 0, &ro));
    else
      CHECK(tecore_seq_backward(st->m->seq, &dy_t, NULL, s));
  }
  phase(prof, TPP_OPT, s);
  if (o->tpc && o->tpc->sp) CHECK(demo_tp_sp_grads(o->tpc, st->p, st->np, s));
  CHECK(tecore_seq_update_scales(st->m->seq, s));
  /* lr and the step number from device memory: every mode takes the same
   * step, and a graph replays it */
  struct tecore_adam_config ac = {.beta1 = 0.9, .beta2 = 0.95, .eps = 1e-8,
                                  .weight_decay = 0.01, .flags = TECORE_ADAM_W,
                                  .state = st->optim_state};
  CHECK(tecore_adam_step(st->ot, st->np, &ac, 0, 0, s));
  if (prof) CHECK(demo_tpprof_end(prof, s));
}

static tecore_result_t fwd_cb(void *user, tecore_stream_t s, const struct tegraph_io *io) {
  return tecore_seq_forward(((struct model *)user)->seq, &io->inputs[0], &io->outputs[0],
                            io->noop_flag, s);
}
static tecore_result_t bwd_cb(void *user, tecore_stream_t s, const struct tegraph_io *io) {
  return tecore_seq_backward(((struct model *)user)->seq, &io->grad_outputs[0], NULL, s);
}
/* warmup runs without offload; the capture after it records the schedule */
static tecore_result_t pre_warmup_cb(void *user) {
  struct model *m = user;
  return m->off ? tegraph_offload_hook_off(m->off->ctx) : TECORE_SUCCESS;
}
static tecore_result_t post_warmup_cb(void *user) {
  struct model *m = user;
  return m->off ? tegraph_offload_hook_on(m->off->ctx) : TECORE_SUCCESS;
}

/* Optimizer state: F32 master weights (from the model's bf16 ones), Adam
 * moments; the model's bf16 weights are the refreshed copy.  Then AdamW's
 * step count and learning rate, on the device.  Fills st's p, ot, np, one
 * and optim_state; returns the bytes the master weights and moments take. */
static size_t optim_setup(struct stepper *st, tecore_stream_t s) {
  tecore_seq_t *seq = st->m->seq;
  size_t np = 0;
  CHECK(tecore_seq_params(seq, NULL, 0, &np));
  struct tecore_seq_param *p = calloc(np, sizeof *p);
  struct tecore_optim_tensor *ot = calloc(np, sizeof *ot);
  CHECK(tecore_seq_params(seq, p, np, &np));
  tecore_devptr_t one = dalloc(4);
  CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, s));
  size_t optim_bytes = 0;
  for (size_t i = 0; i < np; i++) {
    size_t k = tecore_tensor_numel(&p[i].value);
    ot[i].numel = k;
    ot[i].param = dalloc(k * 4);
    ot[i].exp_avg = dalloc(k * 4);
    ot[i].exp_avg_sq = dalloc(k * 4);
    optim_bytes += 12 * k;
    ot[i].grad = p[i].grad.data;
    ot[i].grad_dtype = TECORE_DTYPE_F32;
    ot[i].model = p[i].value.data;
    ot[i].model_dtype = TECORE_DTYPE_BF16;
    struct tecore_tensor master = tensor2(TECORE_DTYPE_F32, 1, k, ot[i].param);
    struct tecore_tensor model = tensor2(TECORE_DTYPE_BF16, 1, k, p[i].value.data);
    CHECK(tecore_unscale_multi(&model, &master, 1, one, 0, s));
    CHECK(tecore_memset_d32_async(ot[i].exp_avg, 0, k, s));
    CHECK(tecore_memset_d32_async(ot[i].exp_avg_sq, 0, k, s));
  }
  st->p = p;
  st->ot = ot;
  st->np = np;
  st->one = one;
  return optim_bytes;
}

/* AdamW's step count and learning rate, on the device. */
static void optim_state_setup(struct stepper *st, tecore_stream_t s) {
  struct tecore_optim_state ost = {.step = 0, .lr = st->o->lr};
  st->optim_state = dalloc(sizeof ost);
  CHECK(tecore_memcpy_async(st->optim_state, (tecore_devptr_t)(uintptr_t)&ost, sizeof ost, s));
  CHECK(tecore_stream_synchronize(s));
}

/* Loss buffers: diff, dy, the norm's workspace, the eager output, the
 * pinned per-microbatch norms; the microbatch noop flags. */
static void loss_buffers_setup(struct stepper *st) {
  const struct opts *o = st->o;
  size_t n = o->tokens * o->hidden;
  st->diff = dalloc(n * 2);
  st->dy = dalloc(n * 2);
  st->noop = dalloc(4);
  static const int32_t first_rest[2] = {0, 1};
  st->mbflags = dalloc(sizeof first_rest);
  CHECK(tecore_memcpy(st->mbflags, (tecore_devptr_t)(uintptr_t)first_rest, sizeof first_rest));
  struct tecore_tensor diff_t = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->diff);
  st->wsb = 0;
  CHECK(tecore_l2norm_multi_workspace_size(&diff_t, 1, &st->wsb));
  st->ws = dalloc(st->wsb ? st->wsb : 16);
  st->y_eager = dalloc(n * 2);
  st->norms = NULL;
  CHECK(tecore_mem_alloc_host((size_t)o->microbatches * sizeof(float), (void **)&st->norms));
}

/* One forward and backward whose gradients are thrown away: the FP8
 * calibration (the first step's scales come from real amaxes; delayed
 * scaling otherwise starts from scale 1, where small gradients underflow
 * E5M2), and in every mode the warmup that a capture needs (lazy
 * allocations and algorithm choices happen outside it). */
static void calibrate(const struct stepper *st, const struct tecore_recipe *recipe,
                      tecore_stream_t s) {
  const struct opts *o = st->o;
  size_t n = o->tokens * o->hidden;
  struct tecore_tensor dy_t = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dy);
  struct tecore_tensor xin = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dd->x[0]);
  struct tecore_tensor yo = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->y_eager);
  CHECK(tecore_memset_d32_async(st->noop, 0, 1, s));
  CHECK(tecore_seq_forward(st->m->seq, &xin, &yo, st->noop, s));
  float inv = 2.0f / (float)loss_elems(o);
  CHECK(tecore_scale_add(st->dy, st->y_eager, inv, st->dd->t[0], -inv, TECORE_DTYPE_BF16, n, s));
  CHECK(tecore_seq_backward(st->m->seq, &dy_t, NULL, s));
  if (recipe) CHECK(tecore_seq_update_scales(st->m->seq, s));
}

/* How te-demo instantiates its graphs: uploaded, and with the priorities
 * of the streams they were captured from.  CUDA ignores those unless asked
 * (CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY); without them the fuser's
 * backward sum on its high-priority side stream (tecore_seq_backward(3),
 * "Overlap") competes as an equal with the weight-gradient GEMM it is
 * meant to hide behind, and the GEMM's CTAs can take every SM first. */
#define DEMO_GRAPH_FLAGS (TEGRAPH_INSTANTIATE_UPLOAD | TEGRAPH_INSTANTIATE_USE_NODE_PRIORITY)

/* The model's forward and backward as one graphed callable (warmup with
 * offload off, then the capture). */
static void callable_setup(const struct opts *o, const struct data *dd, struct model *m) {
  struct tecore_tensor sample = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, dd->x[0]);
  struct tecore_tensor outd = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, 0);
  unsigned char needs = 0;
  struct tegraph_callable_desc cd = {
      .forward = fwd_cb, .backward = bwd_cb, .user = m, .sample_inputs = &sample,
      .ninputs = 1, .outputs = &outd, .noutputs = 1, .input_needs_grad = &needs,
      .num_warmup = 1, .pre_warmup = pre_warmup_cb, .post_warmup = post_warmup_cb,
      .capture_mode = TECORE_CAPTURE_THREAD_LOCAL, .instantiate_flags = DEMO_GRAPH_FLAGS};
  GCHECK(tegraph_callable_create(&cd, NULL, &m->callable));
}

/* The whole step, captured once; replays read lr and step on the device. */
static tegraph_graph_t *capture_step(const struct stepper *st, tecore_stream_t s) {
  tegraph_graph_t *g = NULL;
  size_t nodes = 0;
  GCHECK(tegraph_graph_create(DEMO_GRAPH_FLAGS, &g));
  GCHECK(tegraph_graph_begin_capture(g, s, TECORE_CAPTURE_THREAD_LOCAL, 0));
  queue_step(st, s, NULL);
  GCHECK(tegraph_graph_end_capture(g, NULL));
  GCHECK(tegraph_graph_instantiate(g, s));
  GCHECK(tegraph_graph_node_count(g, &nodes));
  CHECK(tecore_stream_synchronize(s));
  if (!st->o->quiet) {
    /* kernel nodes only launch fastest; say what else the graph holds */
    tecore_graph_t tg = NULL;
    size_t n = 0, kernels = 0, memsets = 0;
    GCHECK(tegraph_graph_handles(g, &tg, NULL));
    struct tecore_graph_node_desc *d = calloc(nodes ? nodes : 1, sizeof *d);
    if (!d) {
      fprintf(stderr, "te-demo: out of host memory\n");
      exit(TE_EXIT_FAIL);
    }
    CHECK(tecore_graph_nodes(tg, d, nodes, &n));
    for (size_t i = 0; i < n && i < nodes; i++) {
      kernels += d[i].type == TECORE_GRAPH_NODE_KERNEL;
      memsets += d[i].type == TECORE_GRAPH_NODE_MEMSET;
    }
    free(d);
    printf("  step graph: %zu nodes (%zu kernel, %zu memset, %zu other)\n", nodes, kernels,
           memsets, nodes - kernels - memsets);
  }
  return g;
}

/* The GEMM flops of one step: three GEMMs (forward, dgrad, wgrad) of two
 * linears per block and microbatch. */
static double step_flops(const struct opts *o) {
  return 3.0 * 2.0 * (double)o->tokens * (double)o->hidden * (double)o->ffn * 2.0 * o->layers *
         o->microbatches;
}

/* --profile: step 1's launches, kernel by kernel (te/profile.h). */
static void print_profile(const char *name, int mode) {
  CHECK(tecore_profile_stop());
  printf("  %s step 1, device time per kernel (%s%s):\n", name, mode_text[mode],
         mode == MODE_EAGER ? "" : "; graph replays are not timed, only the launches around them");
  fflush(stdout);
  CHECK(tecore_profile_report(1, NULL));
}

/* Runs o->steps steps (replaying step_graph when there is one), recording
 * each step's loss and times in R and printing them. */
static void run_steps(const struct stepper *st, tegraph_graph_t *step_graph, struct run *R,
                      tecore_stream_t s) {
  const struct opts *o = st->o;
  double flops = step_flops(o);
  double tokens = (double)o->tokens * o->microbatches;
  for (int step = 1; step <= o->steps; step++) {
    /* step 1 is left out of the mean step time; the reversed pass is not profiled */
    int prof = o->profile && step == 1 && !R->again;
    if (prof) CHECK(tecore_profile_start());
    double t0 = now_s();
    if (step_graph) {
      GCHECK(tegraph_graph_launch(step_graph, s));
      if (st->m->off) CHECK(tecore_svc_kick());   /* spill hand-offs: no sleeping engine */
    } else {
      queue_step(st, s, NULL);
    }
    double t1 = now_s();
    CHECK(tecore_stream_synchronize(s));
    demo_offload_check(&R->dof, step);
    double dt = now_s() - t0;
    double loss = 0;
    for (int mb = 0; mb < o->microbatches; mb++) loss += (double)st->norms[mb] * st->norms[mb];
    loss /= (double)loss_elems(o) * o->microbatches;
    if (o->tpc && o->tpc->sp) CHECK(demo_tp_sum_loss(o->tpc, &loss, s));   /* the shares */
    R->loss[step - 1] = loss;
    R->ms[step - 1] = dt * 1e3;
    R->host_us[step - 1] = (t1 - t0) * 1e6;
    if (prof) print_profile(R->name, o->graphs);
    te_out_row(&OUT, (struct te_out_val[]){TE_OUT_S(R->name), TE_OUT_N(step), TE_OUT_N(loss),
                                           TE_OUT_N(dt * 1e3), TE_OUT_N((t1 - t0) * 1e6),
                                           TE_OUT_N(tokens / dt), TE_OUT_N(flops / dt / 1e12)});
    if (!o->quiet)
      printf("  %-4s step %3d/%d  loss %.6f  %9.3f ms  (host %8.1f us)  %12.0f tokens/s  "
             "%8.3f TFLOP/s\n", R->name, step, o->steps, loss, dt * 1e3, (t1 - t0) * 1e6,
             tokens / dt, flops / dt / 1e12);
    fflush(stdout);
  }
}

/* --tp-profile: one warmup and TP_PROFILE_STEPS measured steps queued
 * eagerly with device events at each phase and around each group of the
 * plan that holds a collective (demo_tpprof.h); every rank runs them (the
 * collectives pair up).  They train on: after the losses were taken. */
enum { TP_PROFILE_STEPS = 3 };
static void profile_steps(const struct stepper *st, tecore_stream_t s,
                          struct demo_tpprof_result *out) {
  struct demo_tpprof *prof = demo_tpprof_create();
  if (!prof) exit(TE_EXIT_FAIL);
  CHECK(demo_tpprof_attach(prof, st->m->seq));
  for (int k = 0; k <= TP_PROFILE_STEPS; k++) {
    queue_step(st, s, prof);
    CHECK(tecore_stream_synchronize(s));
    CHECK(demo_tpprof_collect(prof, k > 0));
  }
  CHECK(tecore_seq_set_hooks(st->m->seq, NULL));
  demo_tpprof_result(prof, out);
  demo_tpprof_destroy(prof);
}

/* --tp: the trained model's inference twin (TECORE_SEQ_INFERENCE: forward
 * only, FP8 weights quantized once and cached, activations quantized
 * rowwise only, every Linear in FP8 under a recipe), built like the model
 * (the same variant: fused or baseline) with the training sequence's
 * parameters copied in.  Its FP8 scales: the training sequence's, copied
 * (tecore_seq_fp8_state), when both have the same scaling state (*copied
 * = 1); else -- the training plan left its Linears in BF16
 * (TECORE_OPS_FP8_MIN_MNK) and has none -- measured by one calibration
 * forward of the twin and a scale update (every rank runs the same
 * passes: the collectives pair up). */
static tecore_seq_t *inference_twin(const struct stepper *st, const struct tecore_recipe *recipe,
                                    tecore_stream_t s, int *copied) {
  const struct opts *o = st->o;
  tecore_seq_t *tr = st->m->seq;
  tecore_seq_t *q = make_model(o, o->seed, recipe, s, 0, TECORE_SEQ_INFERENCE);
  struct tecore_seq_param *pq = calloc(st->np ? st->np : 1, sizeof *pq);
  size_t nq = 0;
  if (!pq) {
    fprintf(stderr, "te-demo: out of host memory\n");
    exit(TE_EXIT_FAIL);
  }
  CHECK(tecore_seq_params(q, pq, st->np, &nq));
  if (nq != st->np) {
    fprintf(stderr, "te-demo: the inference twin has %zu parameters, the model %zu\n", nq,
            st->np);
    exit(TE_EXIT_FAIL);
  }
  for (size_t i = 0; i < nq; i++)
    CHECK(tecore_memcpy_async(pq[i].value.data, st->p[i].value.data,
                              tecore_tensor_numel(&st->p[i].value) * 2, s));
  free(pq);
  *copied = 1;
  struct tecore_delayed_state a[3], b[3];
  for (int r = 0; r < 3; r++) {
    CHECK(tecore_seq_fp8_state(tr, (tecore_fp8_role_t)r, &a[r]));
    CHECK(tecore_seq_fp8_state(q, (tecore_fp8_role_t)r, &b[r]));
    if (a[r].count != b[r].count || a[r].history_len != b[r].history_len) *copied = 0;
  }
  for (int r = 0; r < 3 && *copied; r++)
    if (a[r].count)
      CHECK(tecore_memcpy_async(b[r].base, a[r].base,
                                (3 + (size_t)a[r].history_len) * a[r].count * sizeof(float), s));
  CHECK(tecore_seq_weights_changed(q));
  if (!*copied) {
    struct tecore_tensor xin = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dd->x[0]);
    struct tecore_tensor y = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->y_eager);
    CHECK(tecore_seq_forward(q, &xin, &y, 0, s));
    CHECK(tecore_seq_update_scales(q, s));
  }
  CHECK(tecore_stream_synchronize(s));
  return q;
}

/* The twin's output against the training sequence's forward on the same
 * input, its weights quantized at the current scales (noop 0: a forward
 * with the flag set right after the step's scale update would pair the
 * weight codes of the old scale with the new scale_inv).  Same scales and
 * every Linear in FP8 in both plans: the same kernels on the same bytes,
 * so on vdev the same bits (required; on a GPU a GEMM library may pick
 * other algorithms, and one flipped FP8 code moves a value by 2^-3);
 * otherwise (calibrated scales, or the training plan's BF16 Linears)
 * ||y_inf - y_train|| / ||y_train|| <= 0.15.  Exits 2 on a mismatch. */
static void check_twin(const struct stepper *st, tecore_seq_t *q, int copied,
                       const char *name, tecore_stream_t s) {
  const struct opts *o = st->o;
  size_t n = o->tokens * o->hidden;
  struct tecore_tensor xin = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dd->x[0]);
  struct tecore_tensor y = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->y_eager);
  uint16_t *ht = malloc(n * 2), *hi = malloc(n * 2);
  if (!ht || !hi) {
    fprintf(stderr, "te-demo: out of host memory\n");
    exit(TE_EXIT_FAIL);
  }
  CHECK(tecore_memset_d32_async(st->noop, 0, 1, s));
  CHECK(tecore_seq_forward(st->m->seq, &xin, &y, st->noop, s));
  CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)ht, y.data, n * 2, s));
  CHECK(tecore_memset_d8_async(y.data, 0xff, n * 2, s));   /* NaN: poison */
  CHECK(tecore_seq_forward(q, &xin, &y, 0, s));
  CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)hi, y.data, n * 2, s));
  CHECK(tecore_stream_synchronize(s));
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    double a = tecore_bf16_to_f32(hi[i]), b = tecore_bf16_to_f32(ht[i]);
    num += (a - b) * (a - b);
    den += b * b;
  }
  int same = memcmp(hi, ht, n * 2) == 0;
  double e = den > 0 ? sqrt(num / den) : INFINITY;
  tecore_backend_t be = TECORE_BACKEND_NONE;
  CHECK(tecore_backend(&be));
  int exact = copied && be == TECORE_BACKEND_VDEV;
  int ok = exact ? same : (same || e <= 0.15);
  if (!ok) {
    fprintf(stderr, "te-demo: rank %d, %s: the inference twin's forward differs from the "
            "training forward: %s (||a - b|| / ||b|| = %.3g, limit %s)\n", o->tpc->rank, name,
            same ? "same bits" : "bits differ", e, exact ? "the same bits" : "0.15");
    exit(TE_EXIT_FAIL);
  }
  if (!o->quiet && o->tpc->rank == 0)
    printf("  %s inference twin (%s scales) vs training forward: %s (||a - b|| / ||b|| "
           "%.3g)\n", name, copied ? "copied" : "calibrated", same ? "same bits" : "close", e);
  free(ht);
  free(hi);
}

/* --tp: one microbatch's forward alone, as inference runs it: the
 * inference twin's (inference_twin; its output checked by check_twin),
 * its FP8 weights quantized once by that check: a graph of it replayed
 * (eager launches with --no-graphs), the mean of 20 after 3 unmeasured
 * ones, in ms.  Every rank runs the same passes (their allreduces pair
 * up).  With --tp-profile, one more eager pass is timed kernel by kernel
 * (te/profile.h). */
static double time_forward(const struct stepper *st, const struct tecore_recipe *recipe,
                           const char *name, tecore_stream_t s) {
  const struct opts *o = st->o;
  struct tecore_tensor xin = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->dd->x[0]);
  struct tecore_tensor y = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, st->y_eager);
  int copied = 0;
  tecore_seq_t *q = inference_twin(st, recipe, s, &copied);
  check_twin(st, q, copied, name, s);
  tegraph_graph_t *g = NULL;
  if (o->graphs != MODE_EAGER) {
    GCHECK(tegraph_graph_create(DEMO_GRAPH_FLAGS, &g));
    GCHECK(tegraph_graph_begin_capture(g, s, TECORE_CAPTURE_THREAD_LOCAL, 0));
    CHECK(tecore_seq_forward(q, &xin, &y, 0, s));
    GCHECK(tegraph_graph_end_capture(g, NULL));
    GCHECK(tegraph_graph_instantiate(g, s));
  }
  double t0 = 0;
  for (int k = 0; k < 23; k++) {
    if (k == 3) {
      CHECK(tecore_stream_synchronize(s));
      t0 = now_s();
    }
    if (g) GCHECK(tegraph_graph_launch(g, s));
    else CHECK(tecore_seq_forward(q, &xin, &y, 0, s));
  }
  CHECK(tecore_stream_synchronize(s));
  double ms = (now_s() - t0) * 1e3 / 20;
  if (g) GCHECK(tegraph_graph_destroy(g));
  if (o->tp_profile) {
    /* where that forward's device time goes: one more, eager, kernel by
     * kernel (every rank runs it, so the collectives pair up; rank 0
     * prints).  A collective's time includes its wait for the peers. */
    CHECK(tecore_profile_start());
    CHECK(tecore_seq_forward(q, &xin, &y, 0, s));
    CHECK(tecore_profile_stop());
    int r0 = o->tpc->rank == 0;
    if (r0) {
      printf("  %s forward alone (inference twin), rank 0's device time per kernel (eager, "
             "weights cached):\n", name);
      fflush(stdout);
    }
    CHECK(tecore_profile_report(r0 ? 1 : -1, NULL));
  }
  CHECK(tecore_stream_synchronize(s));
  CHECK(tecore_seq_destroy(q));
  return ms;
}

/* The device counted every step: exits 2 when AdamW's step count is not
 * the number of steps run. */
static void check_device_steps(const struct stepper *st, tecore_stream_t s) {
  struct tecore_optim_state ost;
  CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&ost, st->optim_state, sizeof ost, s));
  CHECK(tecore_stream_synchronize(s));
  if (ost.step != st->o->steps) {
    fprintf(stderr, "te-demo: AdamW's device step count is %lld after %d steps\n",
            (long long)ost.step, st->o->steps);
    exit(TE_EXIT_FAIL);
  }
}

/* Frees what optim_setup, optim_state_setup and loss_buffers_setup made. */
static void stepper_free(struct stepper *st) {
  for (size_t i = 0; i < st->np; i++) {
    CHECK(tecore_mem_free(st->ot[i].param));
    CHECK(tecore_mem_free(st->ot[i].exp_avg));
    CHECK(tecore_mem_free(st->ot[i].exp_avg_sq));
  }
  CHECK(tecore_mem_free(st->one));
  CHECK(tecore_mem_free(st->diff));
  CHECK(tecore_mem_free(st->dy));
  CHECK(tecore_mem_free(st->mbflags));
  CHECK(tecore_mem_free(st->noop));
  CHECK(tecore_mem_free(st->optim_state));
  CHECK(tecore_mem_free(st->ws));
  CHECK(tecore_mem_free(st->y_eager));
  CHECK(tecore_mem_free_host(st->norms));
  free(st->p);
  free(st->ot);
}

/* One training run: the model (with offload when R->offload), the
 * optimizer, the calibration step, the graphs of the chosen mode, then
 * o->steps steps; fills R. */
static void train(const struct opts *o, const struct data *dd, const struct tecore_recipe *recipe,
                  tecore_stream_t s, struct run *R) {
  size_t total = 0;
  struct model m = {.seq = make_model(o, o->seed, recipe, s, 0, 0)};
  if (R->offload) {
    demo_offload_attach(&R->dof, &o->off, m.seq, o->layers, o->quiet);
    m.off = &R->dof;
  }
  CHECK(tecore_seq_describe(m.seq, TECORE_SEQ_FORWARD, R->plan_fwd, sizeof R->plan_fwd, NULL));
  CHECK(tecore_seq_describe(m.seq, TECORE_SEQ_BACKWARD, R->plan_bwd, sizeof R->plan_bwd, NULL));

  struct stepper stp = {.o = o, .dd = dd, .m = &m};
  size_t optim_bytes = optim_setup(&stp, s);
  size_t seq_param = 0, seq_total = 0;
  CHECK(tecore_seq_memory(m.seq, &seq_param, &seq_total));
  R->mem_model = seq_total / 1048576.0;
  R->mem_optim = optim_bytes / 1048576.0;
  optim_state_setup(&stp, s);
  loss_buffers_setup(&stp);

  calibrate(&stp, recipe, s);
  if (o->graphs == MODE_CALLABLES) callable_setup(o, dd, &m);
  CHECK(tecore_seq_zero_grad(m.seq, s));   /* warmup's gradients */
  CHECK(tecore_stream_synchronize(s));

  tegraph_graph_t *step_graph = o->graphs == MODE_STEP ? capture_step(&stp, s) : NULL;
  size_t free1 = 0;
  CHECK(tecore_mem_info(&free1, &total));
  R->dev_used = total - free1;
  R->dev_total = total;

  run_steps(&stp, step_graph, R, s);
  check_device_steps(&stp, s);
  if (o->tpc) R->fwd_ms = time_forward(&stp, recipe, R->name, s);
  if (o->tpc && o->tp_profile) profile_steps(&stp, s, &R->prof);

  if (step_graph) GCHECK(tegraph_graph_destroy(step_graph));
  if (m.callable) GCHECK(tegraph_callable_destroy(m.callable));
  CHECK(tecore_stream_synchronize(s));
  stepper_free(&stp);
  demo_offload_destroy(&R->dof);
  CHECK(tecore_seq_destroy(m.seq));
  if (o->tpc) demo_tp_release(o->tpc);   /* after the sequence that used them */
}
/* The backend, the device and the model's shape and mode. */
static void print_setup(const struct opts *o, tecore_backend_t be,
                        const struct tecore_device_props *props) {
  if (o->quiet) return;
  printf("te-demo: backend %s, device %s\n", tecore_backend_name(be), props->name);
  printf("te-demo: %d MLP blocks, hidden %zu, ffn %zu, %zu tokens x %d microbatches, %d steps, "
         "AdamW lr %g, seed %llu, %s\n", o->layers, o->hidden, o->ffn, o->tokens, o->microbatches,
         o->steps, o->lr, o->seed, mode_text[o->graphs]);
}

static void run_free(struct run *R) {
  free(R->loss);
  free(R->ms);
  free(R->host_us);
}

/* One run (R->name) with its per-step arrays, then its fusion plans and
 * memory; first: the first run, which names the FP8 recipe. */
static void train_and_print(const struct opts *o, const struct data *dd,
                            const struct tecore_recipe *recipe, tecore_stream_t s, int gpu,
                            int first, struct run *R) {
  R->loss = calloc((size_t)o->steps, sizeof(double));
  R->ms = calloc((size_t)o->steps, sizeof(double));
  R->host_us = calloc((size_t)o->steps, sizeof(double));
  if (!R->loss || !R->ms || !R->host_us) {
    fprintf(stderr, "te-demo: out of host memory for %d steps' figures\n", o->steps);
    exit(TE_EXIT_FAIL);
  }
  if (!o->quiet && R->again)
    printf("te-demo: %s run (the reversed order, bf16 then fp8, for the step times alone)\n",
           R->name);
  else if (!o->quiet)
    printf("te-demo: %s run%s\n", R->name,
           first ? " (delayed scaling, HYBRID: E4M3 forward, E5M2 gradients)" : "");
  train(o, dd, recipe, s, R);
  if (o->quiet || R->again) return;
  printf("  plan %s\n  plan %s\n", R->plan_fwd, R->plan_bwd);
  printf("  memory: model %.1f MiB (the sequence's parameters, gradients, activations, "
         "FP8 copies), optimizer %.1f MiB; %s %.0f of %.0f MiB in use\n", R->mem_model,
         R->mem_optim, gpu ? "device" : "host (vdev's device memory)", R->dev_used / 1048576.0,
         R->dev_total / 1048576.0);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The default AdamW learning rate for a model of width hidden.  A first
 * Adam step moves every output by about lr * fan_in, so the rate must
 * fall as the width grows: 3e-3 trains hidden 64 (vdev's default), 3e-4
 * diverged at hidden 4096 on an H100 where 2e-5 keeps the move near 0.1.
 * 3e-3 * (64 / hidden)^1.2 passes through both (2.0e-5 at 4096) and gives
 * 5.7e-4 at 256, where 3e-3 made the loss jump (te-demo --hidden 256
 * --layers 4 --tokens 256 --steps 3 failed its FP8/BF16 check). */
static double default_lr(size_t hidden) {
  return 3e-3 * pow(64.0 / (double)hidden, 1.2);
}

/* Fills o's sizes from the options given (0: not given) and the backend's
 * defaults (gpu: the cuda backend), then checks them; returns 0, or 2
 * (te-demo's exit status for bad usage) after saying why. */
static int resolve_opts(struct opts *o, int gpu, const struct given *g) {
  o->hidden = g->hidden ? g->hidden : gpu ? 4096 : 64;
  o->ffn = g->ffn ? g->ffn : 4 * o->hidden;
  /* vdev's --offload: 4 blocks, so that with the ring's two slots two
   * blocks leave the device (of 2, none would) */
  o->layers = g->layers ? (int)g->layers : gpu ? 8 : o->off.on ? 4 : 2;
  o->tokens = g->tokens ? g->tokens : gpu ? 8192 : 16;
  o->steps = g->steps ? (int)g->steps : gpu ? 20 : 8;
  o->microbatches = g->mbs ? (int)g->mbs : 2;
  o->lr = g->lr ? g->lr : default_lr(o->hidden);
  if (o->off.on && !o->off.min_elems) o->off.min_elems = gpu ? 262144 : 1024;
  if (!o->off.on &&
      (o->off.dirs || o->off.host_budget_mb > 0 || o->off.layers || o->off.prefetch)) {
    fprintf(stderr, "te-demo: --offload-dir, --host-budget, --offload-layers and "
            "--offload-prefetch need --offload\n");
    return 2;
  }
  if (o->hidden % 16 || o->ffn % 16 || o->tokens % 16) {
    fprintf(stderr, "te-demo: FP8 GEMMs need --hidden (%zu), --ffn (%zu) and --tokens (%zu) to "
            "be multiples of 16\n", o->hidden, o->ffn, o->tokens);
    return 2;
  }
  if (o->tp) {
    /* NCCL: libnccl.so.2 on cuda, vdev's NCCL on vdev; absent with
     * TECOMM_NCCL=0 or where libnccl.so.2 does not load */
    int nccl_version = 0, nccl = tecomm_nccl_version(&nccl_version) == TECOMM_SUCCESS;
    if (!o->tp_comm) o->tp_comm = nccl ? TP_COMM_NCCL : TP_COMM_TECOMM;
    if (o->tp_comm == TP_COMM_NCCL && !nccl) {
      fprintf(stderr, "te-demo: --tp-comm nccl: no NCCL here (%s); the baseline can be the "
              "unfused libtecomm allreduce (--tp-comm tecomm)\n", tecomm_last_error());
      return 2;
    }
    if (o->tp_bwd_nccl && !nccl) {
      fprintf(stderr, "te-demo: --tp-bwd-comm nccl: no NCCL here (%s)\n", tecomm_last_error());
      return 2;
    }
    if (o->ffn % (16 * (size_t)o->tp)) {
      fprintf(stderr, "te-demo: --tp %d splits --ffn (%zu) across the ranks: it must be a "
              "multiple of 16 * %d (FP8 GEMMs take multiples of 16)\n", o->tp, o->ffn, o->tp);
      return 2;
    }
    if (o->off.on) {
      fprintf(stderr, "te-demo: --offload and --tp do not go together (yet)\n");
      return 2;
    }
    if (o->sp && o->tokens % (size_t)o->tp) {
      fprintf(stderr, "te-demo: --tp %d --sp splits --tokens (%zu) across the ranks: it must "
              "be a multiple of %d\n", o->tp, o->tokens, o->tp);
      return 2;
    }
  }
  if (o->layers > 1000 || o->steps > 1000000 || o->microbatches > 1024) {
    fprintf(stderr, "te-demo: --layers (<= 1000), --steps or --microbatches (<= 1024) too large\n");
    return 2;
  }
  return 0;
}

/* The data: inputs from the seed, targets from the teacher (BF16, its own
 * seed); ready when this returns. */
static void make_data(const struct opts *o, tecore_devptr_t one, tecore_stream_t s,
                      struct data *dd) {
  size_t n = o->tokens * o->hidden;
  dd->mb = o->microbatches;
  dd->x = calloc((size_t)o->microbatches, sizeof *dd->x);
  dd->t = calloc((size_t)o->microbatches, sizeof *dd->t);
  tecore_seq_t *teacher = make_model(o, o->seed * 7919 + 17, NULL, s, 1, 0);
  for (int mb = 0; mb < o->microbatches; mb++) {
    dd->x[mb] = dalloc(n * 2);
    dd->t[mb] = dalloc(n * 2);
    fill_random(dd->x[mb], n, o->seed * 1000003ull + (uint64_t)mb, one, s);
    struct tecore_tensor xi = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, dd->x[mb]);
    struct tecore_tensor ti = tensor2(TECORE_DTYPE_BF16, o->tokens, o->hidden, dd->t[mb]);
    CHECK(tecore_seq_forward(teacher, &xi, &ti, 0, s));
  }
  CHECK(tecore_stream_synchronize(s));
  CHECK(tecore_seq_destroy(teacher));
}

static void data_free(const struct opts *o, struct data *dd) {
  for (int mb = 0; mb < o->microbatches; mb++) {
    CHECK(tecore_mem_free(dd->x[mb]));
    CHECK(tecore_mem_free(dd->t[mb]));
  }
  free(dd->x);
  free(dd->t);
}

/* A run's average step time in ms, the first step (which pays one-time
 * costs) left out. */
static double mean_step_ms(const struct opts *o, const struct run *R) {
  int from = o->steps > 1 ? 1 : 0;
  double sum = 0;
  for (int k = from; k < o->steps; k++) sum += R->ms[k];
  return sum / (o->steps - from);
}

/* The median step time in ms of the runs rs[0..nr) together (their steps
 * pooled), the first step of each left out: beside the mean, so that one
 * slow step (a preempted host thread, a clock change) does not decide a
 * comparison of runs whose steps cost about the same -- at small sizes an
 * FP8 sequence may run the BF16 kernels launch for launch
 * (TECORE_OPS_FP8_MIN_MNK). */
static double median_steps_ms(const struct opts *o, const struct run *const *rs, int nr) {
  int from = o->steps > 1 ? 1 : 0;
  size_t per = (size_t)(o->steps - from), n = per * (size_t)nr;
  double *v = malloc(n * sizeof *v);
  if (!v) {
    fprintf(stderr, "te-demo: out of host memory for %zu step times\n", n);
    exit(TE_EXIT_FAIL);
  }
  for (int r = 0; r < nr; r++) memcpy(v + (size_t)r * per, rs[r]->ms + from, per * sizeof *v);
  qsort(v, n, sizeof *v, cmp_double);
  double m = n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
  free(v);
  return m;
}

static double median_step_ms(const struct opts *o, const struct run *R) {
  return median_steps_ms(o, &R, 1);
}

/* After a failed check: which flag to turn.  A loss that rises from one
 * step to the next means the learning rate is too large for the model
 * (the curves of two precisions then part by chance, not by FP8 error). */
static void print_unstable_hint(const struct opts *o, const struct run *a, const struct run *b) {
  static int said; /* once a run of te-demo, however many checks failed */
  if (said++) return;
  int rose = 0;
  const struct run *R = a;
  for (int r = 0; r < 2 && !rose; r++) {
    R = r ? b : a;
    for (int k = 1; R && k < o->steps && !rose; k++)
      if (!(R->loss[k] <= R->loss[k - 1] * 1.05)) rose = k + 1;
  }
  if (rose)
    fprintf(stderr, "te-demo: hint: the %s loss rose at step %d: the run is unstable at --lr %g; "
            "try --lr %g (the default for --hidden %zu is %g)\n", R->name, rose, o->lr,
            o->lr / 4, o->hidden, default_lr(o->hidden));
  else
    fprintf(stderr, "te-demo: hint: a smaller --lr (now %g) steadies the run; --tolerance "
            "(now %g) sets the gap accepted\n", o->lr, o->tolerance);
}

/* Prints one run's summary line; returns its average step time in ms
 * (the first step, which pays one-time costs, left out) and 1 in *fail
 * when its loss did not go down.  Sorts R->host_us past the first step. */
static double summarize_run(const struct opts *o, struct run *R, int *fail) {
  double avg = mean_step_ms(o, R);
  int from = o->steps > 1 ? 1 : 0;
  /* host time: the median (one preempted step would dominate a mean) */
  qsort(R->host_us + from, (size_t)(o->steps - from), sizeof(double), cmp_double);
  double host = R->host_us[from + (o->steps - from) / 2];
  double first = R->loss[0], last = R->loss[o->steps - 1];
  printf("te-demo: %-11s loss %.6f -> %.6f, %.3f ms/step (median host time %.1f us to queue it), "
         "%.0f tokens/s, %.3f TFLOP/s\n", R->name, first, last, avg, host,
         (double)o->tokens * o->microbatches / (avg * 1e-3), step_flops(o) / (avg * 1e-3) / 1e12);
  double tps = (double)o->tokens * o->microbatches / (avg * 1e-3);
  te_out_row(&OUT, (struct te_out_val[]){TE_OUT_S(R->name), TE_OUT_N(first), TE_OUT_N(last),
                                         TE_OUT_N(avg), TE_OUT_N(host), TE_OUT_N(tps),
                                         TE_OUT_N(step_flops(o) / (avg * 1e-3) / 1e12),
                                         TE_OUT_N(last < first && isfinite(last))});
  if (!(last < first) || !isfinite(last)) {
    fprintf(stderr, "te-demo: FAIL: the %s loss did not go down (%.6f -> %.6f)\n", R->name,
            first, last);
    print_unstable_hint(o, R, NULL);
    *fail = 1;
  }
  return avg;
}

/* Offload moves bits, it must not change one: compares the offload run's
 * losses with the plain FP8 run's and prints the memory saved and the
 * bytes moved; returns 1 when a loss differs. */
static int check_offload(const struct opts *o, const struct run *base, const struct run *off,
                         double avg_base, double avg_off) {
  int same = memcmp(base->loss, off->loss, (size_t)o->steps * sizeof(double)) == 0;
  const struct demo_offload *d = &off->dof;
  size_t saved = d->st.seq_bytes_before - d->st.seq_bytes_after - d->st.ring_bytes;
  te_out_field_b(&OUT, "offload_losses_identical", same);
  /* signed: a ring larger than what left the device saves nothing */
  te_out_field_n(&OUT, "offload_saved_bytes", (double)d->st.seq_bytes_before -
                                                  (double)d->st.seq_bytes_after -
                                                  (double)d->st.ring_bytes);
  printf("te-demo: offload: losses %s the run without offload (%d steps)\n",
         same ? "bit-identical to" : "DIFFER from", o->steps);
  printf("te-demo: offload: device memory of the model %.1f -> %.1f MiB (+ ring %.1f MiB): "
         "saved %.1f MiB, %.0f%% of the %.1f MiB the offloaded blocks' activations take\n",
         d->st.seq_bytes_before / 1048576.0, d->st.seq_bytes_after / 1048576.0,
         d->st.ring_bytes / 1048576.0, saved / 1048576.0,
         d->theory_bytes ? 100.0 * (double)saved / (double)d->theory_bytes : 0.0,
         d->theory_bytes / 1048576.0);
  printf("te-demo: offload: step time %.3f ms vs %.3f ms without: %.3fx; per step %.3f MiB "
         "to host and %.3f MiB to files (and back)\n", avg_off, avg_base, avg_off / avg_base,
         (double)d->st.pass_to_host * o->microbatches / 1048576.0,
         (double)d->st.pass_to_files * o->microbatches / 1048576.0);
  if (same) return 0;
  for (int k = 0; k < o->steps; k++)
    if (base->loss[k] != off->loss[k])
      fprintf(stderr, "te-demo: FAIL: step %d: loss %.9g with offload, %.9g without\n", k + 1,
              off->loss[k], base->loss[k]);
  return 1;
}

/* The two precisions' step times, fair to the order they ran in. */
struct speed {
  double med_fp8, med_bf16;     /* median step, ms, over the positions run */
  double mean_fp8, mean_bf16;   /* mean step, ms, likewise */
  int orders;                   /* 2: both orders; 1: FP8 first only */
};

/* With the reversed pass (fp8b, bf16b: BF16 then FP8 again, after the FP8
 * then BF16 of the checked runs; ABBA), prints each position's medians and
 * returns each precision's median and mean over both positions: the first
 * run of a process pays for warm-up, clocks and the allocator, which at
 * small sizes moved the ratio by 1-2% when FP8 always ran first.  Without
 * it (--one-order, a --tp reference; fp8b NULL), the two runs' own. */
static struct speed fp8_vs_bf16_speed(const struct opts *o, const struct run *fp8,
                                      const struct run *bf16, const struct run *fp8b,
                                      const struct run *bf16b) {
  const struct run *f[2] = {fp8, fp8b}, *b[2] = {bf16, bf16b};
  struct speed sp = {.orders = fp8b && bf16b ? 2 : 1};
  if (sp.orders == 2) {
    const double f1 = median_step_ms(o, fp8), b1 = median_step_ms(o, bf16);
    const double b2 = median_step_ms(o, bf16b), f2 = median_step_ms(o, fp8b);
    printf("te-demo: fp8 vs bf16 by run order (median ms of steps %d-%d): fp8 then bf16 %.3f / "
           "%.3f (fp8 %.2fx the speed of bf16), bf16 then fp8 %.3f / %.3f (fp8 %.2fx)\n",
           o->steps > 1 ? 2 : 1, o->steps, f1, b1, b1 / f1, b2, f2, b2 / f2);
  }
  sp.med_fp8 = median_steps_ms(o, f, sp.orders);
  sp.med_bf16 = median_steps_ms(o, b, sp.orders);
  for (int r = 0; r < sp.orders; r++) {
    sp.mean_fp8 += mean_step_ms(o, f[r]) / sp.orders;
    sp.mean_bf16 += mean_step_ms(o, b[r]) / sp.orders;
  }
  return sp;
}

/* The FP8 and BF16 curves' distance at each step, in units of BF16's
 * first loss (relative to the current loss it would grow without bound as
 * the loss nears FP8's noise floor), and their speed (fp8b, bf16b: the
 * reversed pass, or NULL); returns 1 past o->tolerance. */
static int check_fp8_vs_bf16(const struct opts *o, const struct run *fp8, const struct run *bf16,
                             const struct run *fp8b, const struct run *bf16b) {
  double worst = 0, worst_cur = 0;
  int at = 0;
  for (int k = 0; k < o->steps; k++) {
    double d = fabs(fp8->loss[k] - bf16->loss[k]);
    if (!(d / bf16->loss[0] <= worst)) {
      worst = d / bf16->loss[0];
      at = k + 1;
    }
    worst_cur = fmax(worst_cur, d / bf16->loss[k]);
  }
  const struct speed sp = fp8_vs_bf16_speed(o, fp8, bf16, fp8b, bf16b);
  te_out_field_n(&OUT, "fp8_bf16_max_diff", worst);
  te_out_field_n(&OUT, "fp8_bf16_tolerance", o->tolerance);
  te_out_field_n(&OUT, "fp8_over_bf16_speed", sp.med_bf16 / sp.med_fp8);
  printf("te-demo: fp8 vs bf16: loss curves differ by at most %.4f of the first loss (step %d; "
         "tolerance %.4f), %.4f of the step's loss; fp8 step %.2fx the speed of bf16 by the "
         "median step (%.3f vs %.3f ms, %s), %.2fx by the mean\n", worst, at, o->tolerance,
         worst_cur, sp.med_bf16 / sp.med_fp8, sp.med_fp8, sp.med_bf16,
         sp.orders == 2 ? "both run orders" : "fp8 ran first", sp.mean_bf16 / sp.mean_fp8);
  if (worst <= o->tolerance) return 0;
  fprintf(stderr, "te-demo: FAIL: the FP8 loss left the BF16 loss by %.4f of the first loss "
          "at step %d (tolerance %.4f)\n", worst, at, o->tolerance);
  print_unstable_hint(o, fp8, bf16);
  return 1;
}
/* ---- main --------------------------------------------------------------------------- */

static const char usage_text[] =
    "usage: te-demo [options]   (te-demo -h | --help | --version)\n"
    "  trains MLP blocks (x + Linear(GELU(Linear(RMSNorm(x))))) with delayed-scaling FP8\n"
    "  and then in BF16 from the same seed; prints loss, step time, throughput, memory;\n"
    "  exits 1 if a loss does not go down or FP8 leaves BF16 by more than the tolerance\n"
    "  --hidden N         model width (vdev: 64, cuda: 4096)\n"
    "  --ffn N            inner width of each MLP (4 * hidden)\n"
    "  --layers N         MLP blocks (vdev: 2, 4 with --offload; cuda: 8)\n"
    "  --tokens N         tokens per microbatch (vdev: 16, cuda: 8192)\n"
    "  --steps N          optimizer steps (vdev: 8, cuda: 20)\n"
    "  --microbatches N   microbatches per step, FP8 weights cached after the first (2)\n"
    "  --lr X             AdamW learning rate (3e-3 * (64 / hidden)^1.2: 0.003 at 64,\n"
    "                     0.00057 at 256, 0.00002 at 4096)\n"
    "  --tolerance X      largest FP8 - BF16 loss difference at any step, as a fraction\n"
    "                     of the first BF16 loss (0.05)\n"
    "  --seed N           data, teacher and initialization seed (1)\n"
    "  --no-graphs        eager launches instead of graphed callables\n"
    "  --step-graph       the whole step (loss, scale update, AdamW) as one graph\n"
    "  --no-bf16          skip the BF16 run (and the comparison)\n"
    "  --one-order        no second pass in the reversed order (BF16, then FP8 again):\n"
    "                     half the runs, but the FP8/BF16 step ratio then carries\n"
    "                     the advantage of running second\n"
    "  --offload          also run FP8 with activation offload: same losses, memory saved\n"
    "  --offload-dir D[,D...]  spill past the host budget to files in these directories\n"
    "  --host-budget MB   pinned host memory for offload (default: what it needs)\n"
    "  --offload-layers N offload the first N blocks (all)\n"
    "  --offload-prefetch P  blocks reloaded ahead of backward; the last P + 1 attached\n"
    "                     blocks stay on the device (default: the most blocks whose copies\n"
    "                     the measured copy bandwidth hides behind compute)\n"
    "  --offload-min-elems N  smaller saved tensors stay (vdev: 1024, cuda: 262144)\n"
    "  --profile          print step 1's device time per kernel (use with --no-graphs)\n"
    "  --tp N             tensor parallel over N ranks (1..8; processes, one a GPU): fc1\n"
    "                     column-parallel, fc2 row-parallel, its sum fused with the residual\n"
    "                     add and the next RMSNorm; each run against the one-process run,\n"
    "                     and the fused step and forward times next to the baseline's\n"
    "  --sp               with --tp: sequence parallel: each rank's norms and residuals on\n"
    "                     its 1/N of the tokens, an all-gather before fc1 and a\n"
    "                     reduce-scatter after fc2 instead of the allreduce (--tokens a\n"
    "                     multiple of N)\n"
    "  --tp-comm C        the unfused baseline's allreduce: nccl (the default where there\n"
    "                     is NCCL: libnccl.so.2 on cuda, vdev's NCCL on vdev) or tecomm\n"
    "                     (libtecomm's table, unfused; the default with TECOMM_NCCL=0)\n"
    "  --tp-profile       after each --tp run, an eager pass timed with device events:\n"
    "                     forward, backward, optimizer, the time in the collectives, the\n"
    "                     comm share of the step and the bound it sets on the speed-up;\n"
    "                     and the forward alone (weights cached) kernel by kernel\n"
    "  --tp-bwd-comm C    the fused variant's backward sums (the input gradient of fc1):\n"
    "                     tecomm (libtecomm's table, the default) or nccl\n"
    "  --tp-base-overlap  a third variant: the baseline with its backward sums overlapped\n"
    "                     with the wgrad GEMMs, as the fused variant's are (the baseline\n"
    "                     itself runs without; TECORE_OPS_OVERLAP=0: none overlaps)\n"
    "  --csv              CSV on stdout: a row of column names, then one row per step\n"
    "                     (run, step, loss, ms, host_us, tokens_per_s, tflops); the\n"
    "                     other lines go to stderr\n"
    "  --json             one JSON object on stdout: the model, \"steps\", \"runs\" (each\n"
    "                     run's summary), the checks and \"result\"; the rest on stderr\n"
    "  -q, --quiet        the summary only\n"
    "  -h, --help         this text\n"
    "  --version          te-demo (libte) VERSION\n"
    "FP8 needs hidden, ffn and tokens to be multiples of 16.\n"
    "exit status: 0 ok, 1 a check or a library call failed, 2 a wrong command line\n";

/* A positive whole number (size_t), or the error reported through cli. */
static int parse_size(struct te_cli *cli, const char *arg, const char *name, size_t *out) {
  long long v;
  if (te_cli_long(cli, name, arg, 1, (long long)1 << 40, 0, &v)) return -1;
  *out = (size_t)v;
  return 0;
}

/* Parses the command line into o and g; returns -1 to go on, else the
 * exit status (0 after --help or --version, 2 for bad usage, said on
 * stderr by the shared option layer, tools/cli.h). */
static int parse_opts(int argc, char **argv, struct opts *o, struct given *g) {
  enum { O_HIDDEN = 1000, O_FFN, O_LAYERS, O_TOKENS, O_STEPS, O_MB, O_LR, O_TOL, O_SEED,
         O_NOGRAPH, O_STEPGRAPH, O_NOBF16, O_OFFLOAD, O_ODIR, O_BUDGET, O_OLAYERS,
         O_OMIN, O_OPREFETCH, O_PROFILE, O_TP, O_TPCOMM, O_TPPROF, O_TPBWD, O_TPBOVL,
         O_ONEORDER, O_SP };
  static const struct option longs[] = {
      {"hidden", required_argument, 0, O_HIDDEN}, {"ffn", required_argument, 0, O_FFN},
      {"layers", required_argument, 0, O_LAYERS}, {"tokens", required_argument, 0, O_TOKENS},
      {"steps", required_argument, 0, O_STEPS}, {"microbatches", required_argument, 0, O_MB},
      {"lr", required_argument, 0, O_LR}, {"tolerance", required_argument, 0, O_TOL},
      {"seed", required_argument, 0, O_SEED}, {"no-graphs", no_argument, 0, O_NOGRAPH},
      {"step-graph", no_argument, 0, O_STEPGRAPH},
      {"no-bf16", no_argument, 0, O_NOBF16}, {"one-order", no_argument, 0, O_ONEORDER},
      {"offload", no_argument, 0, O_OFFLOAD}, {"offload-dir", required_argument, 0, O_ODIR},
      {"host-budget", required_argument, 0, O_BUDGET},
      {"offload-layers", required_argument, 0, O_OLAYERS},
      {"offload-min-elems", required_argument, 0, O_OMIN},
      {"offload-prefetch", required_argument, 0, O_OPREFETCH},
      {"profile", no_argument, 0, O_PROFILE},
      {"tp", required_argument, 0, O_TP}, {"tp-comm", required_argument, 0, O_TPCOMM},
      {"tp-profile", no_argument, 0, O_TPPROF}, {"sp", no_argument, 0, O_SP},
      {"tp-bwd-comm", required_argument, 0, O_TPBWD},
      {"tp-base-overlap", no_argument, 0, O_TPBOVL},
      TE_CLI_FORMATS, TE_CLI_LONGS, {0, 0, 0, 0}};
  struct te_cli cli = {.prog = "te-demo", .usage = usage_text, .shorts = "qh", .longs = longs,
                       .out = &OUT};
  int opt;
  size_t seedv;
  while ((opt = te_cli_next(&cli, argc, argv)) != -1) {
    int bad = 0;
    switch (opt) {
    case TE_CLI_EXIT: return cli.status;
    case O_HIDDEN: bad = parse_size(&cli, optarg, "--hidden", &g->hidden); break;
    case O_FFN: bad = parse_size(&cli, optarg, "--ffn", &g->ffn); break;
    case O_LAYERS: bad = parse_size(&cli, optarg, "--layers", &g->layers); break;
    case O_TOKENS: bad = parse_size(&cli, optarg, "--tokens", &g->tokens); break;
    case O_STEPS: bad = parse_size(&cli, optarg, "--steps", &g->steps); break;
    case O_MB: bad = parse_size(&cli, optarg, "--microbatches", &g->mbs); break;
    case O_SEED:
      bad = parse_size(&cli, optarg, "--seed", &seedv);
      o->seed = seedv;
      break;
    case O_OFFLOAD: o->off.on = 1; break;
    case O_ODIR: o->off.dirs = optarg; break;
    case O_OLAYERS: {
      size_t v = 0;
      bad = parse_size(&cli, optarg, "--offload-layers", &v);
      o->off.layers = v > 1000 ? 1000 : (int)v;
      break;
    }
    case O_OMIN: bad = parse_size(&cli, optarg, "--offload-min-elems", &o->off.min_elems); break;
    case O_OPREFETCH:
      bad = te_cli_int(&cli, "--offload-prefetch", optarg, 1, 999, &o->off.prefetch) ? -1 : 0;
      break;
    case O_BUDGET:
    case O_LR:
    case O_TOL: {
      double v = 0;
      bad = te_cli_double(&cli, opt == O_LR ? "--lr" : opt == O_BUDGET ? "--host-budget"
                                                                       : "--tolerance",
                          optarg, 1e-300, 1e300, &v) ? -1 : 0;
      if (opt == O_LR) g->lr = v;
      else if (opt == O_BUDGET) o->off.host_budget_mb = v;
      else o->tolerance = v;
      break;
    }
    case O_TP:
      bad = te_cli_int(&cli, "--tp", optarg, 1, DEMO_TP_MAX, &o->tp) ? -1 : 0;
      break;
    case O_TPCOMM:
      if (!strcmp(optarg, "nccl")) {
        o->tp_comm = TP_COMM_NCCL;
      } else if (!strcmp(optarg, "tecomm")) {
        o->tp_comm = TP_COMM_TECOMM;
      } else {
        bad = te_cli_error(&cli, "--tp-comm %s: not nccl or tecomm", optarg) ? -1 : 0;
      }
      break;
    case O_NOGRAPH: o->graphs = MODE_EAGER; break;
    case O_STEPGRAPH: o->graphs = MODE_STEP; break;
    case O_NOBF16: o->bf16 = 0; break;
    case O_ONEORDER: o->one_order = 1; break;
    case O_PROFILE: o->profile = 1; break;
    case O_TPPROF: o->tp_profile = 1; break;
    case O_TPBOVL: o->tp_base_overlap = 1; break;
    case O_SP: o->sp = 1; break;
    case O_TPBWD:
      if (!strcmp(optarg, "nccl")) {
        o->tp_bwd_nccl = 1;
      } else if (strcmp(optarg, "tecomm")) {
        bad = te_cli_error(&cli, "--tp-bwd-comm %s: not nccl or tecomm", optarg) ? -1 : 0;
      }
      break;
    }
    if (bad) return TE_EXIT_USAGE;
  }
  if (te_cli_end(&cli, argc, argv)) return cli.status;
  if (o->tp_comm && !o->tp) return te_cli_error(&cli, "--tp-comm needs --tp");
  if (o->tp_profile && !o->tp) return te_cli_error(&cli, "--tp-profile needs --tp");
  if (o->tp_bwd_nccl && !o->tp) return te_cli_error(&cli, "--tp-bwd-comm needs --tp");
  if (o->tp_base_overlap && !o->tp) return te_cli_error(&cli, "--tp-base-overlap needs --tp");
  if (o->sp && !o->tp) return te_cli_error(&cli, "--sp needs --tp");
  if (o->tp && OUT.format != TE_OUT_TABLE)
    return te_cli_error(&cli, "--tp: --csv and --json are not there yet (the table only)");
  o->quiet = cli.quiet;
  return -1;
}

/* One process: the FP8 run (with offload, when asked), the BF16 run, the
 * checks.  page (a --tp run's reference): the losses go there, and the
 * verdict line is left to the parent.  Returns te-demo's exit status. */
static int single_main(struct opts *o, const struct given *g, struct demo_tp_page *page) {
  CHECK(tecore_init());
  tecore_backend_t be;
  CHECK(tecore_backend(&be));
  struct tecore_device_props props;
  CHECK(tecore_device_get_props(0, &props));
  int gpu = be == TECORE_BACKEND_CUDA;
  if (resolve_opts(o, gpu, g)) return 2;

  print_setup(o, be, &props);
  if (!page) {
    te_out_begin(&OUT);
    te_out_field_s(&OUT, "backend", tecore_backend_name(be));
    te_out_field_s(&OUT, "gpu", props.name);
    te_out_field_n(&OUT, "layers", o->layers);
    te_out_field_n(&OUT, "hidden", (double)o->hidden);
    te_out_field_n(&OUT, "ffn", (double)o->ffn);
    te_out_field_n(&OUT, "tokens", (double)o->tokens);
    te_out_field_n(&OUT, "microbatches", o->microbatches);
    te_out_field_n(&OUT, "steps_per_run", o->steps);
    te_out_field_n(&OUT, "lr", o->lr);
    te_out_field_n(&OUT, "seed", (double)o->seed);
    te_out_field_s(&OUT, "mode", mode_text[o->graphs]);
    te_out_table(&OUT, "steps", step_cols, sizeof step_cols / sizeof step_cols[0]);
  }

  tecore_stream_t s;
  CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t one = dalloc(4);
  CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, s));
  struct data dd;
  make_data(o, one, s, &dd);

  struct tecore_recipe recipe;
  CHECK(tecore_recipe_init(&recipe, TECORE_RECIPE_DELAYED));   /* HYBRID, history 1024, max */
  struct run runs[3] = {{.name = "fp8"}, {.name = "fp8+offload", .offload = 1}, {.name = "bf16"}};
  int iof = o->off.on ? 1 : -1, ibf = o->bf16 ? (o->off.on ? 2 : 1) : -1;
  if (!o->off.on) runs[1] = runs[2];
  int nrun = 1 + o->off.on + o->bf16;
  for (int r = 0; r < nrun; r++) {
    if (r == iof) {   /* the automatic prefetch models the plain run's step */
      o->off.plain_step_ms = mean_step_ms(o, &runs[0]);
      o->off.microbatches = o->microbatches;
    }
    train_and_print(o, &dd, r != ibf ? &recipe : NULL, s, gpu, r == 0, &runs[r]);
  }
  /* the reversed order, BF16 then FP8 again, for the step times alone
   * (ABBA: each precision once first and once second); their losses are
   * not checked, the first two runs' are */
  struct run again[2] = {{.name = "bf16(2)", .again = 1}, {.name = "fp8(2)", .again = 1}};
  const int reverse = ibf > 0 && !o->one_order && !page;
  for (int r = 0; reverse && r < 2; r++)
    train_and_print(o, &dd, r ? &recipe : NULL, s, gpu, 0, &again[r]);

  /* summary and checks */
  int fail = 0;
  double avg[3] = {0, 0, 0};
  te_out_table_end(&OUT);
  te_out_table(&OUT, "runs", run_cols, sizeof run_cols / sizeof run_cols[0]);
  for (int r = 0; r < nrun; r++) avg[r] = summarize_run(o, &runs[r], &fail);
  te_out_table_end(&OUT);
  if (iof > 0 && check_offload(o, &runs[0], &runs[iof], avg[0], avg[iof])) fail = 1;
  if (ibf > 0 && check_fp8_vs_bf16(o, &runs[0], &runs[ibf], reverse ? &again[1] : NULL,
                                   reverse ? &again[0] : NULL))
    fail = 1;
  if (page) {
    memcpy(demo_tp_ref_loss(page, 0), runs[0].loss, (size_t)o->steps * sizeof(double));
    if (ibf > 0)
      memcpy(demo_tp_ref_loss(page, 1), runs[ibf].loss, (size_t)o->steps * sizeof(double));
  }
  data_free(o, &dd);
  for (int r = 0; r < nrun; r++) run_free(&runs[r]);
  for (int r = 0; reverse && r < 2; r++) run_free(&again[r]);
  CHECK(tecore_mem_free(one));
  CHECK(tecore_stream_destroy(s));
  if (!page) printf("te-demo: %s\n", fail ? "FAILED" : "ok");
  te_out_field_s(&OUT, "result", fail ? "FAILED" : "ok");
  te_out_end(&OUT);
  return fail;
}

/* ---- --tp N: tensor-parallel runs ------------------------------------------------------ */

struct tp_args {
  const struct opts *o;
  const struct given *g;
  struct demo_tp_page *page;
};

/* The single-process run of the same model and data: the reference the
 * tensor-parallel losses must stay near. */
static int tp_reference(void *arg, int rank) {
  (void)rank;
  const struct tp_args *a = arg;
  struct opts o = *a->o;
  if (!o.quiet) printf("te-demo: --tp %d: first the model in one process, the reference\n", o.tp);
  return single_main(&o, a->g, a->page);
}

/* --tp-profile: every kind of group of either variant's plans (pass and
 * operation kinds; '*': it holds a collective), ms and groups per step,
 * the fused variant's next to the baseline's: where the two part. */
static void tp_print_groups(const struct demo_tpprof_result *pr) {
  enum { NV = 2 };   /* fused and baseline (not the baseline with overlap) */
  printf("  %-64s %15s %15s\n", "group of the plan (ms, groups per step)", "fused", "baseline");
  for (int v = 0; v < NV; v++)
    for (size_t g = 0; g < pr[v].ngroups; g++) {
      const struct demo_tpprof_group *x = &pr[v].group[g];
      if (v == DEMO_TP_BASE && demo_tpprof_find(&pr[DEMO_TP_FUSED], x->name)) continue;
      char cell[NV][32];
      for (int w = 0; w < NV; w++) {
        const struct demo_tpprof_group *y = demo_tpprof_find(&pr[w], x->name);
        if (y) snprintf(cell[w], sizeof cell[w], "%8.3f %4.0fx", y->ms, y->calls);
        else snprintf(cell[w], sizeof cell[w], "-");
      }
      printf("  %c %-62s %15s %15s\n", x->comm ? '*' : ' ', x->name, cell[0], cell[1]);
    }
}

/* --tp-profile: prec's phases of both variants side by side (rank 0's
 * device events; demo_tpprof.h), the comm share of each step and the
 * Amdahl bounds: how much faster each step (and forward) would be with
 * its collectives at zero cost, and where the fused variant would then
 * stand against the baseline as measured. */
static void tp_print_profile(const struct opts *o, const char *pn,
                             const struct demo_tpprof_result *pr) {
  const struct demo_tpprof_result *f = &pr[DEMO_TP_FUSED], *b = &pr[DEMO_TP_BASE];
  if (!f->steps || !b->steps) return;
  printf("te-demo: tp %d %s profile: eager pass, rank 0's device events, ms per step (mean of "
         "%d steps after one warmup; eager launches: not the graphed step's total)\n", o->tp, pn,
         f->steps);
  printf("  %-34s %10s %10s\n", "phase", "fused", "baseline");
  double step[2] = {0, 0}, comm[2] = {0, 0};
  for (int k = 0; k < TPP_NPHASES; k++) {
    int ph = k == 0 ? TPP_FWD : k == 1 ? TPP_BWD : k == 2 ? TPP_LOSS : k == 3 ? TPP_OPT
                                                                              : TPP_OTHER;
    printf("  %-34s %10.3f %10.3f\n", demo_tpprof_phase_name[ph], f->phase_ms[ph],
           b->phase_ms[ph]);
    if (f->comm_calls[ph] > 0 || b->comm_calls[ph] > 0) {
      char what[64];
      snprintf(what, sizeof what, "  in collectives (%.0f / %.0f groups)", f->comm_calls[ph],
               b->comm_calls[ph]);
      printf("  %-34s %10.3f %10.3f\n", what, f->comm_ms[ph], b->comm_ms[ph]);
      printf("  %-34s %10.3f %10.3f\n", "  the rest", f->phase_ms[ph] - f->comm_ms[ph],
             b->phase_ms[ph] - b->comm_ms[ph]);
    }
    for (int v = 0; v < 2; v++) {
      step[v] += pr[v].phase_ms[ph];
      comm[v] += pr[v].comm_ms[ph];
    }
  }
  printf("  %-34s %10.3f %10.3f\n", "step", step[0], step[1]);
  printf("  %-34s %9.1f%% %9.1f%%\n", "comm share of the step", 100 * comm[0] / step[0],
         100 * comm[1] / step[1]);
  tp_print_groups(pr);
  double fr = step[0] - comm[0], ffr = f->phase_ms[TPP_FWD] - f->comm_ms[TPP_FWD];
  printf("te-demo: tp %d %s: with comm at zero cost the step would be at most %.3fx faster "
         "(fused), %.3fx (baseline); the forward %.3fx (fused), %.3fx (baseline)\n", o->tp, pn,
         step[0] / fr, step[1] / (step[1] - comm[1]), f->phase_ms[TPP_FWD] / ffr,
         b->phase_ms[TPP_FWD] / (b->phase_ms[TPP_FWD] - b->comm_ms[TPP_FWD]));
  printf("te-demo: tp %d %s: fused with comm at zero cost vs the baseline as measured: step "
         "%.3fx (target 1.1x), forward %.3fx (target 1.3x); measured: step %.3fx, forward "
         "%.3fx\n", o->tp, pn, step[1] / fr, b->phase_ms[TPP_FWD] / ffr, step[1] / step[0],
         b->phase_ms[TPP_FWD] / f->phase_ms[TPP_FWD]);
}

/* Rank 0, after every rank trained: each variant's losses are the same
 * bits on every rank and stay within the tolerance of the reference's;
 * the step and forward times side by side (and prof's phases, with
 * --tp-profile).  Returns 1 on a failed check. */
static int tp_report(const struct opts *o, struct demo_tp_page *pg, const char *base_name,
                     const struct demo_tpprof_result prof[2][DEMO_TP_NVARIANTS]) {
  int fail = 0;
  /* the fused variant overlaps its backward sums unless the tunable says not */
  struct tecore_tunable_info ti;
  const char *ovl = tecore_tunable_find("TECORE_OPS_OVERLAP", &ti) == TECORE_SUCCESS &&
                            ti.value_int ? " +overlap" : "";
  static const char *const vname[DEMO_TP_NVARIANTS] = {"fused", "baseline",
                                                       "baseline+overlap"};
  for (int prec = 0; prec < 1 + o->bf16; prec++) {
    const char *pn = prec ? "bf16" : "fp8";
    const double *ref = demo_tp_ref_loss(pg, prec);
    for (int v = 0; v < DEMO_TP_NVARIANTS; v++) {
      if (v == DEMO_TP_BASE_OVL && !o->tp_base_overlap) continue;
      const double *l0 = demo_tp_loss(pg, prec, v, 0);
      for (int r = 1; r < o->tp; r++)
        if (memcmp(demo_tp_loss(pg, prec, v, r), l0, (size_t)o->steps * sizeof(double))) {
          const double *lr = demo_tp_loss(pg, prec, v, r);
          int k = 0;
          while (k + 1 < o->steps && !memcmp(&lr[k], &l0[k], sizeof(double))) k++;
          fprintf(stderr, "te-demo: FAIL: %s %s: rank %d's losses differ from rank 0's from "
                  "step %d: %.17g against %.17g\n", pn, vname[v], r, k + 1, lr[k], l0[k]);
          fail = 1;
        }
      double worst = 0;
      int at = 0;
      for (int k = 0; k < o->steps; k++) {
        double d = fabs(l0[k] - ref[k]) / ref[0];
        if (!(d <= worst)) worst = d, at = k + 1;
      }
      printf("te-demo: tp %d %s %s%s: losses the same bits on all %d ranks; at most %.5f of the "
             "first loss from the one-process run (step %d; tolerance %.4f)\n", o->tp, pn,
             vname[v], v ? base_name : "", o->tp, worst, at, o->tolerance);
      if (!(worst <= o->tolerance)) {
        fprintf(stderr, "te-demo: FAIL: tp %d %s %s: the loss left the one-process run's by "
                "%.5f of the first loss at step %d (tolerance %.4f)\n", o->tp, pn, vname[v],
                worst, at, o->tolerance);
        fail = 1;
      }
    }
    const double *tf = demo_tp_times(pg, prec, DEMO_TP_FUSED);
    const double *tb = demo_tp_times(pg, prec, DEMO_TP_BASE);
    printf("te-demo: tp %d %s step time: fused%s%s %.3f ms, baseline%s %.3f ms: %.3fx; forward "
           "alone: fused %.3f ms, baseline %.3f ms: %.3fx\n", o->tp, pn,
           o->tp_bwd_nccl ? " (backward sums: nccl)" : "", ovl, tf[0],
           base_name, tb[0], tb[0] / tf[0], tf[1], tb[1], tb[1] / tf[1]);
    if (o->tp_base_overlap) {
      const double *to = demo_tp_times(pg, prec, DEMO_TP_BASE_OVL);
      printf("te-demo: tp %d %s step time: baseline%s +overlap %.3f ms: %.3fx the baseline; "
             "fused%s vs it: %.3fx\n", o->tp, pn, base_name, to[0], tb[0] / to[0],
             ovl, to[0] / tf[0]);
    }
    if (o->tp_profile) tp_print_profile(o, pn, prof[prec]);
  }
  return fail;
}

/* --sp: this rank's rows of the data (the whole of it made on every rank,
 * as --tp makes it), from then on o->tokens its rows; sh's arrays are
 * views into dd's (free sh's arrays only). */
static void sp_shard(struct opts *o, int rank, const struct data *dd, struct data *sh) {
  size_t rows = o->tokens / (size_t)o->tp, off = (size_t)rank * rows * o->hidden * 2;
  sh->mb = dd->mb;
  sh->x = calloc((size_t)dd->mb, sizeof *sh->x);
  sh->t = calloc((size_t)dd->mb, sizeof *sh->t);
  if (!sh->x || !sh->t) {
    fprintf(stderr, "te-demo: rank %d: out of host memory\n", rank);
    exit(TE_EXIT_FAIL);
  }
  for (int mb = 0; mb < dd->mb; mb++) sh->x[mb] = dd->x[mb] + off, sh->t[mb] = dd->t[mb] + off;
  o->tokens = rows;
}

/* One rank of a --tp run: the communicator, the data, then per precision
 * the fused and the baseline variant; rank 0 checks and reports. */
static int tp_rank(void *arg, int rank) {
  const struct tp_args *a = arg;
  struct opts o = *a->o;
  /* the communicator first: it makes this rank's device current (cuda:
   * GPU rank) before libtecore's first use */
  struct demo_tp t;
  if (demo_tp_init(&t, a->page, o.tp, rank)) return 1;
  tecore_backend_t be;
  CHECK(tecore_backend(&be));
  int gpu = be == TECORE_BACKEND_CUDA;
  if (resolve_opts(&o, gpu, a->g)) return 2;   /* the reference said why */
  demo_tp_baseline(&t, o.tp_comm == TP_COMM_NCCL);
  demo_tp_bwd_nccl(&t, o.tp_bwd_nccl);
  t.sp = o.sp;
  o.tpc = &t;
  if (rank) o.quiet = 1;
  const char *base_name = o.tp_comm == TP_COMM_NCCL ? " (nccl, unfused)"
                                                     : " (libtecomm, unfused)";
  if (!o.quiet)
    printf("te-demo: --tp %d: %d ranks, fc1 column-parallel, fc2 row-parallel; %s; "
           "baseline%s%s\n", o.tp, o.tp,
           o.sp ? "sequence parallel: norms and residuals on 1/N of the tokens, all-gather "
                  "before fc1, reduce-scatter after fc2"
                : "fused: the row-parallel sum + residual add + next RMSNorm in one libtecomm "
                  "call",
           base_name,
           gpu ? "" : " (vdev has no NCCL: the unfused libtecomm allreduce is the baseline)");

  tecore_stream_t s;
  CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  tecore_devptr_t one = dalloc(4);
  CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, s));
  struct data dd;
  make_data(&o, one, s, &dd);
  /* Every rank ran the whole teacher, and a GEMM algorithm chosen by
   * measurement (tecore_gemm(3), TECORE_GEMM_TUNE_ALGOS) may differ from
   * process to process, with it the targets' last bits and every loss
   * after: rank 0's targets become every rank's, as a sum with zeros
   * elsewhere (exact). */
  for (int mb = 0; mb < dd.mb; mb++) {
    size_t n = o.tokens * o.hidden;
    if (rank) CHECK(tecore_memset_d8_async(dd.t[mb], 0, n * 2, s));
    if (tecomm_allreduce(t.comm, dd.t[mb], dd.t[mb], n, TECORE_DTYPE_BF16, TECOMM_SUM, s)) {
      fprintf(stderr, "te-demo: rank %d: sharing rank 0's targets failed\n", rank);
      return 1;
    }
  }
  CHECK(tecore_stream_synchronize(s));
  struct data whole = dd;
  if (o.sp) sp_shard(&o, rank, &whole, &dd);
  /* delayed scaling across the ranks: every amax is the MAX over them
   * (inside the step graph too), so the scales are the one-process run's */
  struct tecore_recipe recipe;
  CHECK(tecore_recipe_init(&recipe, TECORE_RECIPE_DELAYED));
  recipe.amax_reduce = tecomm_amax_reduce;
  recipe.amax_reduce_ctx = t.comm;

  static const char *const names[2][DEMO_TP_NVARIANTS] = {
      {"fp8/fused", "fp8/baseline", "fp8/baseline+overlap"},
      {"bf16/fused", "bf16/baseline", "bf16/baseline+overlap"}};
  int fail = 0;
  static struct demo_tpprof_result prof[2][DEMO_TP_NVARIANTS];
  for (int prec = 0; prec < 1 + o.bf16; prec++)
    for (int v = 0; v < DEMO_TP_NVARIANTS; v++) {
      if (v == DEMO_TP_BASE_OVL && !o.tp_base_overlap) continue;
      struct run R = {.name = names[prec][v]};
      t.variant = v;
      train_and_print(&o, &dd, prec ? NULL : &recipe, s, gpu, 0, &R);
      memcpy(demo_tp_loss(a->page, prec, v, rank), R.loss, (size_t)o.steps * sizeof(double));
      double *tm = demo_tp_times(a->page, prec, v);
      if (rank == 0) {
        tm[0] = summarize_run(&o, &R, &fail);
        tm[1] = R.fwd_ms;
        prof[prec][v] = R.prof;
      }
      run_free(&R);
    }
  if (demo_tp_barrier(a->page)) {
    fprintf(stderr, "te-demo: rank %d: the other ranks did not finish (a rank died?)\n", rank);
    fail = 1;
  } else if (rank == 0 && tp_report(&o, a->page, base_name, prof)) {
    fail = 1;
  }
  if (o.sp) {
    free(dd.x);
    free(dd.t);
  }
  data_free(&o, &whole);
  CHECK(tecore_mem_free(one));
  CHECK(tecore_stream_destroy(s));
  demo_tp_fini(&t);
  return fail;
}

/* The parent of a --tp run touches no device (a cuda context does not
 * survive fork): it forks the reference, then the ranks. */
static int tp_main(const struct opts *o, const struct given *g) {
  if (g->steps > 1000000) {
    fprintf(stderr, "te-demo: --steps (<= 1000000) too large\n");
    return 2;
  }
  struct demo_tp_page *page = demo_tp_page_create(o->tp, g->steps ? (int)g->steps : 20);
  if (!page) return 1;
  struct tp_args a = {.o = o, .g = g, .page = page};
  int rc = demo_tp_fork(1, tp_reference, &a);
  if (rc == 0) rc = demo_tp_fork(o->tp, tp_rank, &a);
  demo_tp_page_free(page);
  printf("te-demo: %s\n", rc ? "FAILED" : "ok");
  return rc;
}

int main(int argc, char **argv) {
  /* the NCCL baseline runs as NCCL does: without the watchdog's writes
   * around its calls (libtecomm(7)), unless the caller set the variable */
  setenv("TECOMM_NCCL_WATCHDOG", "0", 0);
  struct opts o = {.microbatches = 2, .graphs = MODE_CALLABLES, .bf16 = 1, .tolerance = 0.05,
                   .seed = 1};
  struct given g = {0};
  int rc = parse_opts(argc, argv, &o, &g);
  if (rc >= 0) return rc;
  te_out_take_stdout(&OUT);   /* --csv, --json: the document alone on stdout */
  return o.tp ? tp_main(&o, &g) : single_main(&o, &g, NULL);
}
