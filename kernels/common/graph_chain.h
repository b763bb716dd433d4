/* SPDX-License-Identifier: Apache-2.0 */
/* graph_chain.h -- the control block of a graph chain
 * (tecore_graph_chain_create), shared by the host protocol
 * (libtecore/device/graph_chain.c), the launcher kernel
 * (kernels/graph_fire.cu, te_graph_chain) and vdev's twin of it
 * (libtecore/vdev/vdev_chain.c).
 *
 * The block lies in page-locked host memory that the device reaches.  The
 * host queues ticket t (1, 2, ...) by writing which[t % TE_CHAIN_RING] and
 * then go = t.  The launcher is a one-kernel graph that the host launches
 * once; each run of it:
 *   1. writes done = ran: it runs after the graph of ticket ran ended;
 *   2. waits until go > ran (the next ticket is queued), or until stop is
 *      set or timeout_ns passed with nothing queued: then it writes
 *      ended = 1, reads go once more (a ticket queued meanwhile is taken:
 *      ended back to 0) and otherwise writes gone = 1 and ends;
 *   3. launches exec[which[(ran + 1) % RING]] and then itself, both as tail
 *      launches (they run one after the other once this run ends), and
 *      writes ran = ran + 1.
 * A failed launch leaves its CUDA error in status (and ended = gone = 1).
 * The host that finds ended set after it queued a ticket waits until
 * ended is 0 again (taken) or gone is 1 (the launcher left without it: the
 * host launches it again).  Both sides fence between their write and
 * their read, so at least one of them sees the other's write. */
#ifndef TE_KERNELS_COMMON_GRAPH_CHAIN_H
#define TE_KERNELS_COMMON_GRAPH_CHAIN_H

#include <stdint.h>

#define TE_CHAIN_MAX_EXECS 8   /* executables one chain alternates between */
#define TE_CHAIN_RING 64       /* tickets queued and not yet done, at most RING - 1 */
#define TE_CHAIN_TIMED_OUT 0x7fffffffu   /* status: ended after timeout_ns, not an error */
#define TE_CHAIN_BAD_INDEX 0x7ffffffeu   /* status: which[] named no executable */

struct te_chain_ctl {
  /* written by the host */
  volatile uint64_t go;          /* the last ticket queued */
  volatile uint32_t stop;        /* 1: end once every queued ticket ran */
  uint32_t nexec;
  uint64_t timeout_ns;           /* the launcher's wait for a ticket before it ends */
  uint64_t exec[TE_CHAIN_MAX_EXECS];          /* the executables (CUgraphExec on cuda) */
  volatile uint32_t which[TE_CHAIN_RING];     /* ticket t runs exec[which[t % RING]] */
  /* written by the launcher */
  volatile uint64_t ran;         /* the last ticket launched */
  volatile uint64_t done;        /* the last ticket whose graph ended */
  volatile uint32_t ended;       /* 1: the launcher is ending (it reads go once more) */
  volatile uint32_t gone;        /* 1: it ended and takes no more tickets */
  volatile uint32_t status;      /* 0, TE_CHAIN_TIMED_OUT, TE_CHAIN_BAD_INDEX or a CUDA error */
  uint32_t pad;
  volatile uint64_t runs;        /* launcher runs (statistics) */
};

#endif
