/* SPDX-License-Identifier: Apache-2.0
 * gpt_train.c -- te-gpt's training step: accum microbatches of forward,
 * cross-entropy and backward (the gradients add up; each microbatch's mean
 * loss weighted 1/accum), the FP8 scale update, the global gradient norm
 * and clipping, and AdamW (decoupled weight decay on the matrices and
 * embedding tables, none on gains and biases) on F32 masters that refresh
 * the BF16 model copy; the learning rate warms up linearly, then decays
 * along a cosine to min_lr at decay_steps.
 *
 * The norm and the clip factor are computed on the device
 * (tecore_clip_grad_norm), AdamW reads its learning rate and step number
 * from device memory (struct tecore_optim_state, written before each
 * step), so with use_graph the whole step -- every microbatch, the scale
 * update, the norm, the clipping and AdamW -- is one graph (libtegraph)
 * captured after the first eager step and replayed; the host waits once a
 * step, to read the loss and the norm.  --tp: each rank writes its split
 * gradients' norm into its slot of a zeroed vector, an allreduce on the
 * device (sum_ranks) gives every rank all of them, and the clip norm is
 * taken over the replicated gradients and that vector: the global norm,
 * the same bits on every rank, inside the graph too.  --sp: the ranks'
 * losses and the replicated gradients (of each rank's rows) summed after
 * the backward, before the norm.  --dp: the norm of the parts of each
 * rank's dp shard (tecomm_dp_norm_parts; with --tp zero_tp_norm), at every
 * ZeRO stage, so that all stages clip alike, bit for bit.
 * The step graph is launched from the device (one kernel node queued by
 * the host, tecore_graph_launch_device) unless host_launch is set or the
 * graph cannot be (then it is captured again for host launches).  With
 * pipeline and queue_next the host queues the next step (a second graph
 * on a second set of pinned staging and outputs) before it waits for this
 * one: the same work in the same order, so the same losses bit for bit,
 * and each launch finds the device busy. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/graph.h>
#include <te/comm_dp.h>
#include "gpt.h"

static void dp_call(tecomm_result_t r, const char *what) {
  if (r == TECOMM_SUCCESS) return;
  GPT_ERR("--dp: %s: %s (%s)", what, tecomm_strerror(r), tecomm_last_error());
  exit(1);
}

void gpt_train_init(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  size_t np = m->np, *db = &m->dev_bytes;
  t->ot = gpt_xalloc(np * sizeof *t->ot);
  t->grads = gpt_xalloc((np + 1) * sizeof *t->grads);
  tecore_devptr_t one = gpt_dalloc(4, NULL);
  GPT_CHECK(tecore_memset_d32_async(one, 0x3f800000u, 1, s));
  size_t k = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (size_t i = 0; i < np; i++) {
      struct gpt_param *p = &m->p[i];
      if (p->decay != !pass) continue;
      /* --zero 1, 2, 3: this rank's shard only (gpt_dp.c); under 3 the
       * value's shard lies in the group */
      size_t n = p->dp_sharded ? p->dp_count : p->rows * p->cols;
      size_t f0 = p->dp_sharded ? p->dp_first : 0;
      tecore_devptr_t value = p->dp_z3 ? p->dp_value : p->value + f0 * (p->bf16 ? 2 : 4);
      size_t nb = (n ? n : 1) * 4;
      p->master = p->bf16 ? gpt_dalloc(nb, db) : value;
      p->m = gpt_dalloc(nb, db);
      p->v = gpt_dalloc(nb, db);
      if (!n) continue;   /* a shard without elements of p */
      if (p->bf16) {
        struct tecore_tensor b = gpt_tensor2(TECORE_DTYPE_BF16, 1, n, value);
        struct tecore_tensor f = gpt_tensor2(TECORE_DTYPE_F32, 1, n, p->master);
        GPT_CHECK(tecore_unscale_multi(&b, &f, 1, one, 0, s));
      }
      GPT_CHECK(tecore_memset_d32_async(p->m, 0, n, s));
      GPT_CHECK(tecore_memset_d32_async(p->v, 0, n, s));
      t->ot[k] = (struct tecore_optim_tensor){
          .param = p->master, .grad = p->dp_sharded ? p->dp_grad : p->grad,
          .exp_avg = p->m, .exp_avg_sq = p->v, .model = p->bf16 ? value : 0, .numel = n,
          .grad_dtype = p->grad_dtype, .model_dtype = TECORE_DTYPE_BF16};
      /* an FP8 Linear's F32 weight (delayed scaling): AdamW writes the
       * next forward's FP8 codes too, and that forward reads 4 bytes a
       * weight fewer (TECORE_OPS_FUSION_OFF=weight_fp8: not; nor under
       * --zero 1, 2, where AdamW writes a shard and the gather the rest
       * of the F32 weight, which the forward then quantizes) */
      struct tecore_tensor w8;
      if (p->lin_weight && !p->bf16 && !p->table && !p->dp_sharded) {
        if (tecore_seq_fp8_weight(m->seq, p->op, &w8) == TECORE_SUCCESS) {
          t->ot[k].model = w8.data;
          t->ot[k].model_dtype = w8.dtype;
          t->ot[k].model_scale = w8.scale;
          t->ot[k].model_scale_inv = w8.scale_inv;
          t->ot[k].model_amax = w8.amax;
          t->w8_opt++;
        } else {
          tecore_clear_error();
        }
      }
      k++;
    }
    if (!pass) t->ndecay = k;
  }
  t->nopt = k;
  /* the gradients for the norm: replicated ones first, then (--tp) the
   * vector of the ranks' split norms, then this rank's split ones */
  t->nrep = t->nsh = 0;
  t->nvec = m->tp.size > 1;
  /* --dp with --tp: the views are this rank's dp shard's parts
   * (zero_tp_norm), at every ZeRO stage: under 2 and 3 a rank's gradients
   * are reduced in its shard only, and under 0 and 1 the same parts give
   * the same norm bit for bit (the squares added in one order) */
  const int ztp = t->nvec && m->dp.group;
  size_t nv = ztp ? (size_t)m->dp.size * (1 + (size_t)m->tp.size) : (size_t)m->tp.size;
  for (int sh = 0; sh < 2; sh++) {
    if (sh && t->nvec) {
      t->normvec = gpt_dalloc(4 * nv, db);
      t->grads[t->nrep] = gpt_tensor2(TECORE_DTYPE_F32, 1, nv, t->normvec);
    }
    for (size_t i = 0; i < np; i++)
      if (m->p[i].sharded == sh) {
        const struct gpt_param *p = &m->p[i];
        /* --table-shards: the token table's gradient is a shard only */
        const int part = ztp || (p->table && p->dp_z3);
        size_t n = part ? p->dp_count : p->rows * p->cols, f = part ? p->dp_first : 0;
        if (!n) continue;   /* a shard without elements of p */
        /* --dp alone: not read (tecomm_dp_norm_parts is), but they size
         * the workspace; under --zero 3 with gradient shards p->grad is
         * the group's ring, whole inside a backward only */
        tecore_devptr_t gp = part ? p->dp_grad : p->grad + f * tecore_dtype_size(p->grad_dtype);
        t->grads[sh ? t->nrep + t->nvec + t->nsh : t->nrep] = gpt_tensor2(p->grad_dtype, 1, n, gp);
        if (sh) t->nsh++;
        else t->nrep++;
      }
  }
  GPT_CHECK(tecore_l2norm_multi_workspace_size(t->grads, t->nrep + t->nvec + t->nsh,
                                               &t->l2wsb));
  t->l2ws = gpt_dalloc(t->l2wsb, db);
  GPT_CHECK(tecore_mem_alloc_host((4 + 2 * (size_t)m->max_mb) * sizeof(float), (void **)&t->pinned));
  /* AdamW's two groups (decayed, not) each count their steps */
  t->ostate = gpt_dalloc(2 * sizeof(struct tecore_optim_state), db);
  t->clipf = gpt_dalloc(sizeof(float), db);
  GPT_CHECK(tecore_mem_alloc_host(2 * sizeof *t->hstate, (void **)&t->hstate));
  /* pinned: a graph's copies read them where they lie */
  GPT_CHECK(tecore_mem_alloc_host((size_t)m->max_mb * m->rows * 4, (void **)&t->hids));
  GPT_CHECK(tecore_mem_alloc_host((size_t)m->max_mb * m->rows * 4, (void **)&t->hlabels));
  t->set[0] = (struct gpt_stage){.hids = t->hids, .hlabels = t->hlabels, .pinned = t->pinned,
                                 .hstate = t->hstate};
  /* each graph launch records its set's event: a step queued ahead of
   * the next is waited for by it alone */
  for (int b = 0; b < 2; b++)
    GPT_CHECK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &t->set[b].done));
  GPT_CHECK(tecore_stream_synchronize(s));
  GPT_CHECK(tecore_mem_free(one));
}

void gpt_train_free(struct gpt_train *t) {
  /* the masters of BF16 parameters and the moments are the model's dev
   * memory; the process ends right after (tecore_fini frees the rest) */
  if (t->chain) tecore_graph_chain_destroy(t->chain);   /* before its executables */
  t->chain = NULL;
  free(t->ot);
  free(t->grads);
  for (int b = 0; b < 2; b++) {
    struct gpt_stage *g = &t->set[b];
    if (g->done) tecore_event_destroy(g->done);
    if (!g->pinned) continue;   /* set 1 exists once the step pipelines */
    if (g->graph) tegraph_graph_destroy(g->graph);
    tecore_mem_free_host(g->hids);
    tecore_mem_free_host(g->hlabels);
    tecore_mem_free_host(g->pinned);
    if (g->hstate) tecore_mem_free_host(g->hstate);
  }
  memset(t->set, 0, sizeof t->set);
  t->graph = NULL;
  t->hstate = NULL;
  t->ot = NULL;
}

double gpt_lr_at(const struct gpt_train *t, int64_t step) {
  if (step <= t->warmup) return t->lr * (double)step / (double)(t->warmup > 0 ? t->warmup : 1);
  double span = (double)(t->decay_steps - t->warmup);
  double q = span > 0 ? (double)(step - t->warmup) / span : 1.0;
  if (q > 1) q = 1;
  return t->min_lr + 0.5 * (t->lr - t->min_lr) * (1.0 + cos(M_PI * q));
}

/* ids and labels of microbatch mb from the host staging, on s */
static void upload(struct gpt_train *t, struct gpt_model *m, int mb, tecore_stream_t s) {
  int32_t *ids = t->hids + (size_t)mb * m->rows, *lab = t->hlabels + (size_t)mb * m->rows;
  GPT_CHECK(tecore_memcpy_async(m->ids, (tecore_devptr_t)(uintptr_t)ids, m->rows * 4, s));
  GPT_CHECK(tecore_memcpy_async(m->labels, (tecore_devptr_t)(uintptr_t)lab, m->rows * 4, s));
}

/* AdamW wrote the FP8 weights the next forward reads: its first
 * microbatch quantizes none.  The flag stays 1, so it is set once, after
 * the first step's AdamW (in stream order; the first step runs eagerly,
 * so no step graph carries the memset). */
static void w8_current(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  if (!t->w8_opt || t->w8_flag_set) return;
  GPT_CHECK(tecore_memset_d32_async(m->noop, 1, 1, s));
  t->w8_flag_set = 1;
}

/* AdamW over both groups, learning rate and step from t->ostate, the
 * gradients scaled by the device clip factor. */
static void queue_adam(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  tecore_devptr_t gscale = t->clip > 0 ? t->clipf : 0;
  struct tecore_adam_config ac = {.beta1 = t->beta1, .beta2 = t->beta2, .eps = t->eps,
                                  .weight_decay = t->wd, .flags = TECORE_ADAM_W,
                                  .state = t->ostate};
  GPT_CHECK(tecore_adam_step(t->ot, t->ndecay, &ac, gscale, 0, s));
  ac.weight_decay = 0;
  ac.state = t->ostate + sizeof(struct tecore_optim_state);
  GPT_CHECK(tecore_adam_step(t->ot + t->ndecay, t->nopt - t->ndecay, &ac, gscale, 0, s));
  w8_current(t, m, s);
  /* --zero 1, 2: each rank stepped its shard; every rank gets them all
   * (--zero 3: the tables; the passes gather the sequence's) */
  if (m->dp.zero > 0) dp_call(tecomm_dp_gather((tecomm_dp_t)m->dp.group, s), "tecomm_dp_gather");
}

/* --zero 2, 3 with --tp: the global norm's parts in normvec, F32
 * [dp][1 + tp]: slot d the replicated gradients' norm in dp shard d (tp
 * rank 0's: the tp ranks hold the same), slot dp + t * dp + d the split
 * ones' of tp rank t in shard d; summed over both groups, its L2 norm is
 * the global norm (each element counted once). */
static void zero_tp_norm(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  size_t D = (size_t)m->dp.size, T = (size_t)m->tp.size, n = D * (1 + T);
  size_t d = (size_t)m->dp.rank, r = (size_t)m->tp.rank;
  GPT_CHECK(tecore_memset_d32_async(t->normvec, 0, n, s));
  if (t->nrep && r == 0)
    GPT_CHECK(tecore_l2norm_multi(t->grads, t->nrep, t->l2ws, t->l2wsb, t->normvec + 4 * d, 0,
                                  s));
  if (t->nsh)
    GPT_CHECK(tecore_l2norm_multi(t->grads + t->nrep + 1, t->nsh, t->l2ws, t->l2wsb,
                                  t->normvec + 4 * (D + r * D + d), 0, s));
  gpt_dp_sum(m, t->normvec, n, s);
  t->sum_ranks(t->normvec, n, m, s);
}

/* The device part of a step, with no host synchronization (so that a
 * graph can hold it): zeroed gradients, each microbatch's ids and labels
 * copied from the pinned staging, forward, loss, backward; the FP8 scale
 * update; the gradient norm and the losses into pinned memory. */
static void queue_fwd_bwd(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  /* AdamW's step number and learning rate from this set's staging: in the
   * graph, so that a chained step needs no copy queued by the host */
  GPT_CHECK(tecore_memcpy_async(t->ostate, (tecore_devptr_t)(uintptr_t)t->hstate,
                                2 * sizeof *t->hstate, s));
  GPT_CHECK(tecore_seq_zero_grad(m->seq, s));
  size_t H = (size_t)m->c.hidden;
  if (m->tok_grad)   /* --table-shards: the group zeroes its shard */
    GPT_CHECK(tecore_memset_d32_async(m->tok_grad, 0, (size_t)m->c.vocab * H, s));
  if (m->pos_grad) GPT_CHECK(tecore_memset_d32_async(m->pos_grad, 0, (size_t)m->c.seq * H, s));
  tecomm_dp_t dp = (tecomm_dp_t)m->dp.group;
  for (int mb = 0; mb < t->accum; mb++) {
    upload(t, m, mb, s);
    gpt_logits(m, mb > 0, s);   /* FP8 weights quantized on the first microbatch */
    /* --dp: the last backward reduces each bucket as it finishes it */
    if (dp && mb == t->accum - 1) dp_call(tecomm_dp_arm(dp), "tecomm_dp_arm");
    gpt_backward(m, mb, 1, s);  /* the loss and its gradient in one pass */
  }
  if (dp) {
    dp_call(tecomm_dp_finish(dp, s), "tecomm_dp_finish");
    gpt_dp_sum(m, m->means, 2 * (size_t)t->accum, s);   /* the ranks' losses and counts */
  }
  if (m->tp.sp) {   /* each rank's rows: the replicated gradients and the losses summed */
    gpt_sp_grads(m, s);
    gpt_sp_sum(m, m->means, 2 * (size_t)t->accum, TECORE_DTYPE_F32, s);
  }
  GPT_CHECK(tecore_seq_update_scales(m->seq, s));
  /* pinned memory's device address is its host address */
  tecore_devptr_t norm = (tecore_devptr_t)(uintptr_t)&t->pinned[0];
  const int ztp = t->nvec && dp;
  if (ztp) {
    zero_tp_norm(t, m, s);
  } else if (t->nvec) {
    /* --tp: this rank's split norm in its slot, the others 0, summed over
     * the ranks: every rank holds all of them */
    size_t tp = (size_t)m->tp.size;
    GPT_CHECK(tecore_memset_d32_async(t->normvec, 0, tp, s));
    GPT_CHECK(tecore_l2norm_multi(t->grads + t->nrep + t->nvec, t->nsh, t->l2ws, t->l2wsb,
                                  t->normvec + 4 * (size_t)m->tp.rank, 0, s));
    t->sum_ranks(t->normvec, tp, m, s);
  }
  size_t nn = t->nrep + t->nvec;
  const struct tecore_tensor *gv = t->grads;
  struct tecore_tensor parts;
  if (ztp) {
    gv = &t->grads[t->nrep], nn = 1;
  } else if (dp) {
    /* the ranks' shard norms: under --zero 2, 3 a rank holds its shard's
     * sums only; under 0 and 1 the same parts, so that every stage clips
     * by the same norm, bit for bit */
    dp_call(tecomm_dp_norm_parts(dp, &parts, s), "tecomm_dp_norm_parts");
    gv = &parts, nn = 1;
  }
  if (t->clip > 0)
    GPT_CHECK(tecore_clip_grad_norm(gv, nn, t->l2ws, t->l2wsb, (float)t->clip, norm, t->clipf,
                                    0, s));
  else
    GPT_CHECK(tecore_l2norm_multi(gv, nn, t->l2ws, t->l2wsb, norm, 0, s));
  GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&t->pinned[4], m->means,
                                8 * (size_t)t->accum, s));
  queue_adam(t, m, s);
}

/* Makes set b current (the pointers queue_fwd_bwd and upload use). */
static void use_set(struct gpt_train *t, int b) {
  struct gpt_stage *g = &t->set[b];
  t->hids = g->hids, t->hlabels = g->hlabels, t->pinned = g->pinned, t->hstate = g->hstate;
  t->graph = g->graph;
  t->cur = b;
}

/* Set 1's pinned staging and outputs. */
static void second_set(struct gpt_train *t, struct gpt_model *m) {
  struct gpt_stage *g = &t->set[1];
  size_t n = (size_t)m->max_mb * m->rows * 4;
  GPT_CHECK(tecore_mem_alloc_host(n, (void **)&g->hids));
  GPT_CHECK(tecore_mem_alloc_host(n, (void **)&g->hlabels));
  GPT_CHECK(tecore_mem_alloc_host((4 + 2 * (size_t)m->max_mb) * sizeof(float), (void **)&g->pinned));
  GPT_CHECK(tecore_mem_alloc_host(2 * sizeof *g->hstate, (void **)&g->hstate));
}

/* A training batch into ids and labels (m->rows each): --dp draws the
 * batch of all the ranks, batch * dp sequences, as one process of that
 * batch draws them, and keeps this rank's slice, so that the ranks
 * together train on what that process trains on. */
static void draw(struct gpt_train *t, struct gpt_model *m, const struct gpt_data *d, int32_t *ids,
                 int32_t *labels) {
  if (m->dp.size <= 1) return gpt_data_batch(d, m->c.seq, m->batch, &t->rng, ids, labels);
  size_t all = m->rows * (size_t)m->dp.size;
  int32_t *ai = gpt_xalloc(all * 4), *al = gpt_xalloc(all * 4);
  gpt_data_batch(d, m->c.seq, m->batch * (size_t)m->dp.size, &t->rng, ai, al);
  gpt_dp_slice(m, ai, ids);
  gpt_dp_slice(m, al, labels);
  free(ai);
  free(al);
}

/* The current set's staging: the batches of step number step, the step's
 * number and learning rate where AdamW reads them (written while no
 * queued work reads this set). */
static void stage(struct gpt_train *t, struct gpt_model *m, const struct gpt_data *d,
                  int64_t step) {
  for (int mb = 0; mb < t->accum; mb++)
    draw(t, m, d, t->hids + (size_t)mb * m->rows, t->hlabels + (size_t)mb * m->rows);
  for (int g = 0; g < 2; g++)
    t->hstate[g] = (struct tecore_optim_state){.step = step - 1, .lr = gpt_lr_at(t, step)};
}

/* The current set's step graph: captured (after one eager step: lazy
 * allocations, GEMM workspaces and algorithm choices happen outside the
 * capture), launchable from the device unless host_launch (or the graph
 * cannot be: captured again for host launches). */
static void capture(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  for (;;) {
    unsigned fl = TEGRAPH_INSTANTIATE_UPLOAD |
                  (t->host_launch ? 0u : (unsigned)TEGRAPH_INSTANTIATE_DEVICE_LAUNCH);
    GPT_GCHECK(tegraph_graph_create(fl, &t->graph));
    GPT_GCHECK(tegraph_graph_begin_capture(t->graph, s, TECORE_CAPTURE_THREAD_LOCAL, 0));
    queue_fwd_bwd(t, m, s);
    GPT_GCHECK(tegraph_graph_end_capture(t->graph, NULL));
    if (t->host_launch) {
      GPT_GCHECK(tegraph_graph_instantiate(t->graph, s));
      break;
    }
    if (tegraph_graph_instantiate(t->graph, s) == TEGRAPH_SUCCESS) break;
    fprintf(stderr, "# te-gpt: the step graph cannot be launched from the device (%s); it is "
            "captured again for host launches\n", tegraph_last_error());
    GPT_GCHECK(tegraph_graph_destroy(t->graph));
    t->graph = NULL;
    t->host_launch = 1;
  }
  t->set[t->cur].graph = t->graph;
}

/* Queues the current set's step: its AdamW state, then its graph (timed:
 * the least host time and every one; the first launch of a graph from
 * the device waits for the device to accept it, not counted). */
static void queue_graph(struct gpt_train *t, tecore_stream_t s) {
  struct gpt_stage *g = &t->set[t->cur];
  if (t->chain_mode && !t->chain && t->set[0].launched && t->set[1].launched) {
    /* both step graphs ran once from the device: from now on they are
     * queued to the chain's launcher */
    tecore_graph_exec_t x[2];
    for (int b = 0; b < 2; b++)
      GPT_GCHECK(tegraph_graph_handles(t->set[b].graph, NULL, &x[b]));
    if (tecore_graph_chain_create(x, 2, s, &t->chain) != TECORE_SUCCESS) {
      fprintf(stderr, "# te-gpt: no graph chain (%s); the step graphs are launched from the "
              "device\n", tecore_last_error());
      t->chain_mode = 0;
    }
  }
  double l0 = gpt_now();
  if (t->chain) {
    GPT_CHECK(tecore_graph_chain_queue(t->chain, t->cur, &g->ticket));
    t->chain_launches++;
  } else {
    g->ticket = 0;
    GPT_GCHECK(tegraph_graph_launch(t->graph, s));
  }
  double us = (gpt_now() - l0) * 1e6;
  if (t->host_launch || g->launched) {
    if (t->launch_us <= 0 || us < t->launch_us) t->launch_us = us;
    if (t->nlaunch < (int)(sizeof t->launch_all / sizeof t->launch_all[0]))
      t->launch_all[t->nlaunch++] = us;
  }
  g->launched = t->graph_launched = 1;
  if (g->done && !g->ticket) GPT_CHECK(tecore_event_record(g->done, s));
}

/* Waits for set b's last step: its chain ticket, or its event. */
static void wait_set(struct gpt_train *t, int b) {
  if (t->set[b].ticket) GPT_CHECK(tecore_graph_chain_wait(t->chain, t->set[b].ticket));
  else GPT_CHECK(tecore_event_synchronize(t->set[b].done));
}

/* Nothing else may run on the stream while the chain's launcher holds it:
 * it ends here (a later step starts it again). */
static void chain_rest(struct gpt_train *t) {
  if (!t->chain) return;
  GPT_CHECK(tecore_graph_chain_stop(t->chain));
  struct tecore_graph_chain_counts st;
  GPT_CHECK(tecore_graph_chain_stats(t->chain, &st));
  snprintf(t->chain_note, sizeof t->chain_note, "; the chain's launcher started %llu time%s for "
           "%d steps", (unsigned long long)st.starts, st.starts == 1 ? "" : "s", t->chain_launches);
}

double gpt_train_step(struct gpt_train *t, struct gpt_model *m, const struct gpt_data *d,
                      tecore_stream_t s, double *gnorm) {
  int64_t step = t->step + 1;
  if (!t->inflight && t->pipeline && t->set[0].launched &&
      !t->set[1].launched) {
    /* the second graph's first launch (captured now; from the device it
     * waits for the device) in a step of its own, not queued ahead */
    if (!t->set[1].pinned) second_set(t, m);
    use_set(t, 1);
  }
  const int b = t->cur;
  if (!t->inflight) {
    stage(t, m, d, step);
    if (t->use_graph && !t->graph && t->eager_steps > 0) capture(t, m, s);
    if (t->graph) {
      queue_graph(t, s);
    } else {
      queue_fwd_bwd(t, m, s);
      t->eager_steps++;
    }
  }
  /* the next step queued before this one is waited for: its own set */
  t->inflight = 0;
  if (t->graph && t->pipeline && t->queue_next && t->set[b ^ 1].launched) {
    use_set(t, b ^ 1);
    stage(t, m, d, step + 1);
    queue_graph(t, s);
    t->inflight = 1;
    wait_set(t, b);
  } else {
    if (t->set[b].ticket) {   /* the launcher holds the stream until it stops */
      wait_set(t, b);
      if (!t->queue_next) chain_rest(t);
    } else {
      GPT_CHECK(tecore_stream_synchronize(s));
    }
  }
  /* clipped and stepped on the device already */
  const float *out = t->set[b].pinned;
  *gnorm = out[0];
  double loss = 0;
  for (int mb = 0; mb < t->accum; mb++) loss += out[4 + 2 * mb];
  t->step = step;
  /* --dp, --sp: summed over the ranks */
  return loss / t->accum / (m->dp.size > 1 ? m->dp.size : 1) / (m->tp.sp ? m->tp.size : 1);
}

/* Validation batch k of nval, this rank's slice under --dp (as draw). */
static void val_draw(struct gpt_model *m, const struct gpt_data *d, int k, int nval, int32_t *ids,
                     int32_t *labels) {
  if (m->dp.size <= 1) return gpt_data_val_batch(d, m->c.seq, m->batch, k, nval, ids, labels);
  size_t all = m->rows * (size_t)m->dp.size;
  int32_t *ai = gpt_xalloc(all * 4), *al = gpt_xalloc(all * 4);
  gpt_data_val_batch(d, m->c.seq, m->batch * (size_t)m->dp.size, k, nval, ai, al);
  gpt_dp_slice(m, ai, ids);
  gpt_dp_slice(m, al, labels);
  free(ai);
  free(al);
}

/* --sp: *mean and *count of this rank's rows in, of every row out */
static void sp_loss(struct gpt_model *m, tecore_stream_t s, double *mean, double *count) {
  float v[2] = {(float)(*mean * *count), (float)*count};
  GPT_CHECK(tecore_memcpy(m->sp_sum, (tecore_devptr_t)(uintptr_t)v, sizeof v));
  gpt_sp_sum(m, m->sp_sum, 2, TECORE_DTYPE_F32, s);
  GPT_CHECK(tecore_stream_synchronize(s));
  GPT_CHECK(tecore_memcpy((tecore_devptr_t)(uintptr_t)v, m->sp_sum, sizeof v));
  *count = v[1];
  *mean = v[1] > 0 ? v[0] / v[1] : 0;
}

/* --sp: means[0..1] of this rank's rows made those of every row */
static void sp_means(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s) {
  GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&t->pinned[4], m->means, 8, s));
  GPT_CHECK(tecore_stream_synchronize(s));
  double mean = t->pinned[4], count = t->pinned[5];
  sp_loss(m, s, &mean, &count);
  float v[2] = {(float)mean, (float)count};
  GPT_CHECK(tecore_memcpy(m->means, (tecore_devptr_t)(uintptr_t)v, sizeof v));
}

void gpt_forward_loss(struct gpt_train *t, struct gpt_model *m, tecore_stream_t s, double *mean,
                      double *count) {
  upload(t, m, 0, s);
  gpt_forward(m, 0, 0, s);
  GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&t->pinned[4], m->means, 8, s));
  GPT_CHECK(tecore_stream_synchronize(s));
  *mean = t->pinned[4];
  *count = t->pinned[5];
  if (m->tp.sp) sp_loss(m, s, mean, count);
}

double gpt_val_loss(struct gpt_train *t, struct gpt_model *m, const struct gpt_data *d, int nval,
                    tecore_stream_t s) {
  double sum = 0;
  for (int k = 0; k < nval; k++) {
    val_draw(m, d, k, nval, t->hids, t->hlabels);
    upload(t, m, 0, s);
    gpt_forward(m, 0, 0, s);
    if (m->tp.sp) sp_means(t, m, s);   /* before --dp's sum of the replicas' means */
    if (m->dp.size > 1) gpt_dp_sum(m, m->means, 2, s);
    GPT_CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)&t->pinned[4], m->means, 8, s));
    GPT_CHECK(tecore_stream_synchronize(s));
    sum += t->pinned[4] / (m->dp.size > 1 ? m->dp.size : 1);
  }
  return nval ? sum / nval : NAN;
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

double gpt_median(double *v, size_t n) {
  if (!n) return NAN;
  qsort(v, n, sizeof v[0], cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

double gpt_launch_median(const struct gpt_train *t) {
  if (t->nlaunch <= 0) return 0;
  double v[64];
  memcpy(v, t->launch_all, (size_t)t->nlaunch * sizeof v[0]);
  return gpt_median(v, (size_t)t->nlaunch);
}

void gpt_graph_census(const struct gpt_train *t, char *buf, size_t n) {
  tecore_graph_t g = NULL;
  size_t count = 0, k[4] = {0, 0, 0, 0};
  buf[0] = '\0';
  if (!t->graph || tegraph_graph_handles(t->graph, &g, NULL) != TEGRAPH_SUCCESS || !g ||
      tecore_graph_nodes(g, NULL, 0, &count) != TECORE_SUCCESS)
    return;
  struct tecore_graph_node_desc *d = calloc(count ? count : 1, sizeof *d);
  if (!d || tecore_graph_nodes(g, d, count, &count) != TECORE_SUCCESS) {
    free(d);
    return;
  }
  for (size_t i = 0; i < count; i++)
    k[d[i].type == TECORE_GRAPH_NODE_KERNEL   ? 0
      : d[i].type == TECORE_GRAPH_NODE_MEMCPY ? 1
      : d[i].type == TECORE_GRAPH_NODE_MEMSET ? 2
                                              : 3]++;
  free(d);
  snprintf(buf, n, "%zu kernel, %zu memcpy, %zu memset, %zu other nodes", k[0], k[1], k[2], k[3]);
}
