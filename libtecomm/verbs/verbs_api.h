/* verbs_api.h -- libibverbs, loaded at run time: the table of the
 * libibverbs.so.1 functions libtecomm calls.  SPDX-License-Identifier: Apache-2.0
 *
 * Nothing links -libverbs, so libtecomm (and te-info) load on nodes
 * without rdma-core; there the verbs path reports
 * TECOMM_ERR_NOT_SUPPORTED naming the missing library.  <infiniband/verbs.h>
 * is needed at build time only, for the types and for the data-path calls
 * that are static inline in it (ibv_post_send, ibv_poll_cq go through the
 * provider's ops in the context and are not symbols of libibverbs).
 * Everything else is called as te_ibv.name(...), never by the header's
 * name: t/lint/ldd-lint.sh checks that no ibv_* symbol is left undefined. */
#ifndef TECOMM_VERBS_API_H
#define TECOMM_VERBS_API_H

#include "base/tc_internal.h"

#ifdef TE_HAVE_VERBS
#include <infiniband/verbs.h>

/* name, return type, parameters: one line per libibverbs function used.
 * query_port is the exported symbol that fills the base of
 * struct ibv_port_attr (the header's macro adds the extended query). */
#define TE_IBV_SYMBOLS(X)                                                                 \
  X(get_device_list, struct ibv_device **, (int *))                                     \
  X(free_device_list, void, (struct ibv_device **))                                     \
  X(get_device_name, const char *, (struct ibv_device *))                               \
  X(open_device, struct ibv_context *, (struct ibv_device *))                           \
  X(close_device, int, (struct ibv_context *))                                          \
  X(query_device, int, (struct ibv_context *, struct ibv_device_attr *))                \
  X(query_port, int, (struct ibv_context *, uint8_t, struct ibv_port_attr *))           \
  X(query_gid, int, (struct ibv_context *, uint8_t, int, union ibv_gid *))              \
  X(alloc_pd, struct ibv_pd *, (struct ibv_context *))                                  \
  X(dealloc_pd, int, (struct ibv_pd *))                                                 \
  X(reg_mr, struct ibv_mr *, (struct ibv_pd *, void *, size_t, int))                    \
  X(dereg_mr, int, (struct ibv_mr *))                                                   \
  X(create_cq, struct ibv_cq *, (struct ibv_context *, int, void *,                     \
                                 struct ibv_comp_channel *, int))                      \
  X(destroy_cq, int, (struct ibv_cq *))                                                 \
  X(create_qp, struct ibv_qp *, (struct ibv_pd *, struct ibv_qp_init_attr *))           \
  X(modify_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int))                       \
  X(query_qp, int, (struct ibv_qp *, struct ibv_qp_attr *, int, struct ibv_qp_init_attr *)) \
  X(destroy_qp, int, (struct ibv_qp *))                                                 \
  X(wc_status_str, const char *, (enum ibv_wc_status))

struct te_ibv_api {
#define TE_IBV_FIELD_(name, ret, args) ret(*name) args;
  TE_IBV_SYMBOLS(TE_IBV_FIELD_)
#undef TE_IBV_FIELD_
};
extern struct te_ibv_api te_ibv;
/* "soft": the loopback device for tests (verbs_soft.c), which
 * TECOMM_VERBS_LIB=soft puts in te_ibv's place. */
extern const struct te_ibv_api tc_vb_soft_api;
#endif

/* Loads libibverbs.so.1 once.  TECOMM_SUCCESS, or TECOMM_ERR_NOT_SUPPORTED
 * with the reason (built without verbs, library missing or too old) as
 * the detail, prefixed by who. */
tecomm_result_t tc_verbs_load(const char *who);

#endif
