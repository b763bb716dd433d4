/* SPDX-License-Identifier: Apache-2.0 */
/* demo_offload.h -- the tools' activation offload (te-demo and te-gpt
 * --offload): a context sized for the model's offloaded blocks, attached
 * to the model's sequence, the warmup switches, the per-step check and the
 * figures the tools print (tools/lib/demo_offload.c, libtetools). */
#ifndef TE_TOOLS_DEMO_OFFLOAD_H
#define TE_TOOLS_DEMO_OFFLOAD_H

#include <stddef.h>
#include <te/core.h>
#include <te/graph.h>
#include <te/offload.h>

struct demo_offload_opts {
  int on;
  const char *dirs;          /* comma-separated spill directories, or NULL */
  double host_budget_mb;     /* 0: what the offloaded blocks need, plus staging */
  int layers;                /* blocks attached (the first ones); 0: all */
  size_t min_elems;          /* 0: the library's default (TE's 256K) */
  int prefetch;              /* >= 1; 0: chosen from the model below */
  double plain_step_ms;      /* the run without offload: its mean step (the model's input) */
  int microbatches;          /* forward/backward passes a step */
  size_t ops_per_block;      /* the sequence's operations a block (0: te-demo's 6) */
  const char *tool;          /* for messages (NULL: "te-demo") */
};

struct demo_offload {
  tegraph_offload_t *ctx;
  struct tegraph_offload_stats st;
  size_t theory_bytes;       /* the copied blocks' saved tensors: the most offload can save */
  int prefetch;              /* what the context was given */
  double predicted;          /* the model's step-time ratio for that prefetch (0: not modelled) */
};

/* Attaches offload to seq, which starts with `layers` blocks of
 * o->ops_per_block operations each.  Prints what it set up; exits the
 * program on failure (as the tools do). */
void demo_offload_attach(struct demo_offload *d, const struct demo_offload_opts *o,
                         tecore_seq_t *seq, int layers, int quiet);
/* After a step's synchronize: exits with the cause when a spill failed. */
void demo_offload_check(struct demo_offload *d, int step);
void demo_offload_destroy(struct demo_offload *d);

#endif
