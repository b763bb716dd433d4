/* SPDX-License-Identifier: Apache-2.0 */
/* ar_internal.h -- what the allreduce kernel files of libtecomm share
 * privately: the vdev implementations (ar_vdev.c), the kernel table and
 * launches (ar_kernels.c), error helpers in libtecore's style (AR_*), and the
 * embedded fatbin (libtecomm/fatbins.S). */
#ifndef TC_AR_INTERNAL_H
#define TC_AR_INTERNAL_H

#include "config.h"
#include <te/core.h>
#include <te/kernel.h>
#include "ar_kernels.h"
#include "common/comm_ar.h"

#ifdef TE_HAVE_CUDA
extern const unsigned char te_fatbin_comm_ar[], te_fatbin_comm_ar_end[];
#endif

/* Kernels of the table, in table order. */
enum {
  TE_AR_K_ONESHOT,
  TE_AR_K_TWOSHOT,
  TE_AR_K_LAMPORT,
  TE_AR_K_ONESHOT_FUSED,
  TE_AR_K_LAMPORT_FUSED,
  TE_AR_K_ADDNORM, /* the fused epilogue alone (after two-shot) */
  TE_AR_K_ONESHOT_FUSED_WIDE, /* the fused kernels for blocks of more than */
  TE_AR_K_LAMPORT_FUSED_WIDE, /* TE_AR_FUSED_NARROW threads */
  TE_AR_K_ADDNORM_WIDE,
  TE_AR_K_NVLS, /* NVLS simple (the NVLS Lamport is TE_AR_K_LAMPORT* with mc set) */
  TE_AR_K_LAMPORT_FUSED_SPREAD,  /* the fused Lamport kernel over spread x the plan's */
  TE_AR_K_LAMPORT_FUSED_SPREAD4, /* threads: 2 ranks, 3 or 4 ranks */
  TE_AR_K_PROBE_LAUNCH,   /* tecomm_probe: an empty kernel, */
  TE_AR_K_PROBE_EXCHANGE, /* one word to and from every peer */
  TE_AR_K_LAMPORT2, /* TE_AR_K_LAMPORT built for up to 2 ranks, */
  TE_AR_K_LAMPORT4, /* and for up to 4 */
  TE_AR_K_TWOSHOT_FUSED,      /* the fused two-shot by rows (one kernel), */
  TE_AR_K_TWOSHOT_FUSED_WIDE, /* and for plans of more than TE_AR_FUSED_RS_THREADS */
  TE_AR_K_CE_REDUCE, /* the copy-engine one-shot's local sum */
  TE_AR_K_GATHER,    /* all-gather (bytes) */
  TE_AR_K_COUNT_
};

/* vdev implementations (ar_vdev.c); args[0] points to a struct te_ar_params. */
void te_ar_vdev_oneshot(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_twoshot(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_lamport(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_addnorm(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_nvls(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_twoshot_fused(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_gather(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_ce_reduce(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_probe_launch(const struct tecore_launch_cfg *cfg, void *const *args);
void te_ar_vdev_probe_exchange(const struct tecore_launch_cfg *cfg, void *const *args);

/* Errors of the kernel side, in libtecore's results (tecore_result_t),
 * without logging: the communicator side converts and logs them (TC_CORE,
 * tc_internal.h).  Named AR_*: tc_internal.h's TC_ERR/TC_ARG/TC_CHECK
 * return tecomm_result_t and log.  AR_ERR sets the thread's detail and
 * returns code (libtecore's TE_ERR). */
#define AR_ERR(code, ...) (tecore_set_error(__VA_ARGS__), (code))
#define AR_ARG(cond, ...)                                              \
  do {                                                                 \
    if (!(cond)) return AR_ERR(TECORE_ERR_INVALID, __VA_ARGS__);       \
  } while (0)
#define AR_CHECK(call)                                                 \
  do {                                                                 \
    tecore_result_t ar_r_ = (call);                                    \
    if (ar_r_ != TECORE_SUCCESS) return ar_r_;                         \
  } while (0)

#endif
