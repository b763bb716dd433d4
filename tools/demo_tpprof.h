/* SPDX-License-Identifier: Apache-2.0
 * demo_tpprof.h -- te-demo --tp-profile: where a tensor-parallel step's
 * device time goes, measured with device events (te/device.h) in an eager
 * pass of a few steps: per phase (forward, loss, backward, scale update +
 * AdamW, the rest), and within forward and backward the time in the
 * groups of the plan that hold a tensor-parallel collective (tp_reduce,
 * tp_copy, allreduce: alone, or fused, as the fused
 * allreduce+add+RMSNorm is counted whole), through the sequence's pass
 * hooks (te/ops.h, tecore_seq_set_hooks); and every group of the plan by
 * the kinds of its operations, so the two variants compare group by
 * group.  Graph replays fire no hooks:
 * the pass is eager, and its times are for comparing the variants and
 * the phases, not the graphed step's total.
 *
 * Use: demo_tpprof_create, demo_tpprof_attach(seq), then per step
 * demo_tpprof_phase(phase) at each phase's start on the step's stream,
 * demo_tpprof_end, and demo_tpprof_collect after the stream is done; the
 * averages in demo_tpprof_result; demo_tpprof_destroy detaches nothing
 * (the sequence dies first). */
#ifndef TE_TOOLS_DEMO_TPPROF_H
#define TE_TOOLS_DEMO_TPPROF_H

#include <te/core.h>

enum { TPP_OTHER = 0, TPP_FWD, TPP_LOSS, TPP_BWD, TPP_OPT, TPP_NPHASES };

#define TPP_MAX_GROUPS 48
#define TPP_NAME 80

/* One kind of group of the plan: its pass and its operations' kinds
 * ("fwd linear+gelu"), its device time and count per step. */
struct demo_tpprof_group {
  char name[TPP_NAME];
  int comm;                        /* holds a collective */
  double ms, calls;
};

struct demo_tpprof_result {
  int steps;                       /* steps averaged (0: no profile) */
  double phase_ms[TPP_NPHASES];    /* per step, device time between the phase marks */
  double comm_ms[TPP_NPHASES];     /* of it, in the groups holding a collective */
  double comm_calls[TPP_NPHASES];  /* such groups per step */
  size_t ngroups;                  /* every group of both passes, by kind (the first
                                    * TPP_MAX_GROUPS kinds; the rest not listed) */
  struct demo_tpprof_group group[TPP_MAX_GROUPS];
};

struct demo_tpprof;

/* NULL after saying why on stderr. */
struct demo_tpprof *demo_tpprof_create(void);
void demo_tpprof_destroy(struct demo_tpprof *p);
/* Installs the hooks on seq (its only hook set: no offload with it). */
tecore_result_t demo_tpprof_attach(struct demo_tpprof *p, tecore_seq_t *seq);
/* From here on the stream's work is phase's (an event recorded on s). */
tecore_result_t demo_tpprof_phase(struct demo_tpprof *p, int phase, tecore_stream_t s);
/* The step's end on s. */
tecore_result_t demo_tpprof_end(struct demo_tpprof *p, tecore_stream_t s);
/* After s is done: adds the step's times to the sums (keep; 0: a warmup
 * step, left out), forgets its events. */
tecore_result_t demo_tpprof_collect(struct demo_tpprof *p, int keep);
/* The sums so far, averaged per step, into *out. */
void demo_tpprof_result(const struct demo_tpprof *p, struct demo_tpprof_result *out);

/* The group of r named name, or NULL. */
const struct demo_tpprof_group *demo_tpprof_find(const struct demo_tpprof_result *r,
                                                 const char *name);

/* Phase names for printing. */
extern const char *const demo_tpprof_phase_name[TPP_NPHASES];

#endif
