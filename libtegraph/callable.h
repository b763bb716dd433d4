/* SPDX-License-Identifier: Apache-2.0 */
/* callable.h -- private to libtegraph: the graphed callable's state, shared
 * by callable.c (create, capture, analysis, reset, destroy, queries) and
 * replay.c (forward, backward, backward_dw, rebinding and copies).
 *
 * Slots.  Every buffer a callable owns is a slot: a static tensor in the
 * pool, the address its graphs use now (bound: the static buffer, or a
 * caller's tensor written into the nodes), and the list of places in the
 * graphs that hold an address inside it (refs).  A slot is rebindable when
 * no graph of the callable has opaque nodes and every use of its range
 * is a pointer parameter of a registered kernel, a 1-D memcpy end or a
 * memset destination. */
#ifndef TEGRAPH_CALLABLE_H
#define TEGRAPH_CALLABLE_H

#include "tg_internal.h"

#define TG_NPASS 3

enum tg_ref_kind {
  TG_REF_KPARAM = 0,   /* item: kernel node (tg_nodes.k index), param: parameter */
  TG_REF_COPY_SRC = 1, /* item: node index of a 1-D memcpy */
  TG_REF_COPY_DST = 2,
  TG_REF_MEMSET = 3    /* item: node index of a memset */
};

struct tg_ref {
  unsigned char pass;
  unsigned char kind;
  unsigned param;
  size_t item;
  uint64_t offset;     /* the held address minus the slot's address */
};

struct tg_slot {
  tegraph_slot_kind_t kind;
  size_t index;
  const char *name;    /* keyword slots: the callable's copy of the name */
  struct tecore_tensor *t; /* the static tensor (points into the callable's io arrays) */
  size_t bytes;
  tecore_devptr_t bound;
  int rebindable;
  char why[160];
  struct tg_ref *refs;
  size_t nrefs, capref;
  tegraph_bind_path_t last;
};

struct tg_pass {
  int present;
  tecore_graph_t graph;           /* the latest capture: the values */
  tecore_graph_exec_t exec;
  tecore_graph_t inst;            /* after a whole-graph update, the graph exec was
                                     instantiated from (its nodes name exec's); or NULL */
  struct tg_nodes *nodes;
};

struct tegraph_callable {
  tegraph_fn fn[TG_NPASS];
  void *user;
  void (*user_free)(void *user);  /* called by tegraph_callable_destroy */
  /* set by a maker that replays an object of another library (from_seq):
   * TEGRAPH_SUCCESS while that object may still be replayed, else an
   * error naming why; asked before each replay */
  tegraph_result_t (*user_alive)(void *user, const char *fn);
  tegraph_hook pre_warmup, post_warmup;
  int num_warmup;
  tecore_capture_mode_t mode;
  unsigned inst_flags, flags;
  size_t index;                   /* in its creation batch (for messages) */

  tegraph_mempool_t *pool;
  tecore_stream_t stream;         /* warmup, capture, uploads */
  tecore_event_t ev_fork, ev_done;
  int replayed;                   /* ev_done marks the last replay */
  tecore_stream_t last_run;       /* the stream it ran on */

  size_t nin, nkw, nout;
  char **kw_names;
  /* the static tensors, as the functions see them */
  struct tecore_tensor *in, *kw, *out, *gout, *gin;
  unsigned char *needs_grad;
  size_t nslots;
  struct tg_slot *slots;          /* in, kw, out, gout, gin (gout/gin only with backward) */
  tecore_devptr_t noop;           /* int32 flag */
  size_t noop_node;               /* memset node of the forward graph that sets it */
  long noop_knode;                /* or, when it became a te_memset kernel node
                                     (TEGRAPH_MEMSET_KERNELS), its entry in the forward
                                     node table's kernels; -1: a memset node */
  uint32_t noop_value;            /* what that node writes now */

  struct tg_pass pass[TG_NPASS];
  int capturing;                  /* its functions are being captured */
  int fwd_done, need_dw;          /* order of use */
};

/* 1 while this thread captures a callable (calls into callables are refused). */
extern __thread int tg_thread_capturing;

/* The slot of kind/index (NULL when there is none). */
struct tg_slot *tg_slot_find(struct tegraph_callable *c, tegraph_slot_kind_t kind, size_t index);
/* Points every use of s at addr (per-node exec updates).  On failure the
 * uses updated so far go back to s->bound, s becomes not rebindable (why
 * says so) and the failure is returned. */
tegraph_result_t tg_slot_rebind(struct tegraph_callable *c, struct tg_slot *s,
                                tecore_devptr_t addr, const char *fn);
/* Fails with TEGRAPH_ERR_STATE when c may not be called now (during a
 * capture of a callable), or when the object its graphs replay is gone
 * (user_alive): the replays' check. */
tegraph_result_t tg_callable_replayable(struct tegraph_callable *c, const char *fn);

#endif
