/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_api.h -- private to the cuDNN attention backend
 * (attn_cudnn*.c): the part of cuDNN 9's backend ("graph") C API it uses,
 * declared here from the documented values so that nothing needs a cuDNN
 * header to build; the dlopen'ed entry points (attn_cudnn_load.c); the
 * graph builder and the plan cache (attn_cudnn_graph.c, attn_cudnn_plan.c).
 *
 * Nothing links libcudnn: libtecore loads without it, and the cudnn row of
 * the attention table refuses, saying why, where it is missing. */
#ifndef TECORE_ATTN_CUDNN_API_H
#define TECORE_ATTN_CUDNN_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "attn/attn_backend.h"

/* ---- cuDNN types and the enum values used (cuDNN 9 ABI) ------------------ */
typedef int te_dnn_status_t;            /* cudnnStatus_t */
typedef struct cudnnContext *te_dnn_handle_t;
typedef void *te_dnn_desc_t;            /* cudnnBackendDescriptor_t */

#define TE_DNN_SUCCESS 0
/* status / 1000: 1 initialization, 2 bad parameter, 3 not supported,
 * 4 internal, 5 execution failed. */

/* cudnnDataType_t */
enum {
  TE_DNN_DATA_FLOAT = 0, TE_DNN_DATA_HALF = 2, TE_DNN_DATA_INT32 = 4,
  TE_DNN_DATA_BFLOAT16 = 9, TE_DNN_DATA_INT64 = 10, TE_DNN_DATA_BOOLEAN = 11,
  TE_DNN_DATA_FP8_E4M3 = 12
};
/* cudnnPointwiseMode_t */
enum {
  TE_DNN_PW_ADD = 0, TE_DNN_PW_MUL = 1, TE_DNN_PW_DIV = 6, TE_DNN_PW_SUB = 9,
  TE_DNN_PW_EXP = 13, TE_DNN_PW_LOG = 15, TE_DNN_PW_IDENTITY = 21,
  TE_DNN_PW_CMP_GT = 302, TE_DNN_PW_CMP_GE = 303, TE_DNN_PW_CMP_LT = 304,
  TE_DNN_PW_LOGICAL_AND = 400, TE_DNN_PW_GEN_INDEX = 501, TE_DNN_PW_BINARY_SELECT = 601
};
/* cudnnReduceTensorOp_t */
enum { TE_DNN_REDUCE_ADD = 0, TE_DNN_REDUCE_MAX = 3, TE_DNN_REDUCE_AMAX = 4 };
/* cudnnBackendHeurMode_t */
enum { TE_DNN_HEUR_MODE_A = 3 };
/* cudnnBackendAttributeType_t */
enum {
  TE_DNN_TYPE_HANDLE = 0, TE_DNN_TYPE_DATA_TYPE = 1, TE_DNN_TYPE_BOOLEAN = 2,
  TE_DNN_TYPE_INT64 = 3, TE_DNN_TYPE_FLOAT = 4, TE_DNN_TYPE_VOID_PTR = 6,
  TE_DNN_TYPE_HEUR_MODE = 8, TE_DNN_TYPE_POINTWISE_MODE = 14,
  TE_DNN_TYPE_BACKEND_DESCRIPTOR = 15, TE_DNN_TYPE_REDUCTION_OPERATOR_TYPE = 18
};
/* cudnnBackendDescriptorType_t */
enum {
  TE_DNN_POINTWISE_DESCRIPTOR = 0, TE_DNN_ENGINE_DESCRIPTOR = 2, TE_DNN_ENGINECFG_DESCRIPTOR = 3,
  TE_DNN_ENGINEHEUR_DESCRIPTOR = 4, TE_DNN_EXECUTION_PLAN_DESCRIPTOR = 5,
  TE_DNN_OPERATION_POINTWISE_DESCRIPTOR = 13, TE_DNN_OPERATIONGRAPH_DESCRIPTOR = 15,
  TE_DNN_VARIANT_PACK_DESCRIPTOR = 16, TE_DNN_TENSOR_DESCRIPTOR = 17,
  TE_DNN_MATMUL_DESCRIPTOR = 18, TE_DNN_OPERATION_MATMUL_DESCRIPTOR = 19,
  TE_DNN_REDUCTION_DESCRIPTOR = 21, TE_DNN_OPERATION_REDUCTION_DESCRIPTOR = 22,
  TE_DNN_OPERATION_RESHAPE_DESCRIPTOR = 31
};
/* cudnnBackendAttributeName_t */
enum {
  TE_DNN_ATTR_POINTWISE_MODE = 0, TE_DNN_ATTR_POINTWISE_MATH_PREC = 1,
  TE_DNN_ATTR_POINTWISE_AXIS = 9,
  TE_DNN_ATTR_ENGINEHEUR_MODE = 200, TE_DNN_ATTR_ENGINEHEUR_OPERATION_GRAPH = 201,
  TE_DNN_ATTR_ENGINEHEUR_RESULTS = 202,
  TE_DNN_ATTR_ENGINECFG_ENGINE = 300,
  TE_DNN_ATTR_EXECUTION_PLAN_HANDLE = 400, TE_DNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG = 401,
  TE_DNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE = 402,
  TE_DNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR = 750, TE_DNN_ATTR_OPERATION_POINTWISE_XDESC = 751,
  TE_DNN_ATTR_OPERATION_POINTWISE_BDESC = 752, TE_DNN_ATTR_OPERATION_POINTWISE_YDESC = 753,
  TE_DNN_ATTR_OPERATION_POINTWISE_TDESC = 758,
  TE_DNN_ATTR_OPERATIONGRAPH_HANDLE = 800, TE_DNN_ATTR_OPERATIONGRAPH_OPS = 801,
  TE_DNN_ATTR_TENSOR_BYTE_ALIGNMENT = 900, TE_DNN_ATTR_TENSOR_DATA_TYPE = 901,
  TE_DNN_ATTR_TENSOR_DIMENSIONS = 902, TE_DNN_ATTR_TENSOR_STRIDES = 903,
  TE_DNN_ATTR_TENSOR_UNIQUE_ID = 906, TE_DNN_ATTR_TENSOR_IS_VIRTUAL = 907,
  TE_DNN_ATTR_TENSOR_IS_BY_VALUE = 908, TE_DNN_ATTR_TENSOR_RAGGED_OFFSET_DESC = 913,
  TE_DNN_ATTR_VARIANT_PACK_UNIQUE_IDS = 1000, TE_DNN_ATTR_VARIANT_PACK_DATA_POINTERS = 1001,
  TE_DNN_ATTR_VARIANT_PACK_WORKSPACE = 1003,
  TE_DNN_ATTR_ENGINE_GLOBAL_INDEX = 1301,
  TE_DNN_ATTR_MATMUL_COMP_TYPE = 1500,
  TE_DNN_ATTR_OPERATION_MATMUL_ADESC = 1520, TE_DNN_ATTR_OPERATION_MATMUL_BDESC = 1521,
  TE_DNN_ATTR_OPERATION_MATMUL_CDESC = 1522, TE_DNN_ATTR_OPERATION_MATMUL_DESC = 1523,
  TE_DNN_ATTR_OPERATION_MATMUL_GEMM_M_OVERRIDE_DESC = 1525,
  TE_DNN_ATTR_OPERATION_MATMUL_GEMM_N_OVERRIDE_DESC = 1526,
  TE_DNN_ATTR_OPERATION_MATMUL_GEMM_K_OVERRIDE_DESC = 1527,
  TE_DNN_ATTR_REDUCTION_OPERATOR = 1600, TE_DNN_ATTR_REDUCTION_COMP_TYPE = 1601,
  TE_DNN_ATTR_OPERATION_REDUCTION_XDESC = 1610, TE_DNN_ATTR_OPERATION_REDUCTION_YDESC = 1611,
  TE_DNN_ATTR_OPERATION_REDUCTION_DESC = 1612,
  TE_DNN_ATTR_OPERATION_RESHAPE_XDESC = 2200, TE_DNN_ATTR_OPERATION_RESHAPE_YDESC = 2201
};

/* ---- the entry points ------------------------------------------------------ */
/* X(name, return type, parameters, required) */
#define TE_DNN_SYMBOLS(X)                                                                \
  X(cudnnGetVersion, size_t, (void), 1)                                                  \
  X(cudnnGetErrorString, const char *, (te_dnn_status_t s), 1)                           \
  X(cudnnGetLastErrorString, void, (char *msg, size_t max), 0)                           \
  X(cudnnCreate, te_dnn_status_t, (te_dnn_handle_t * h), 1)                              \
  X(cudnnDestroy, te_dnn_status_t, (te_dnn_handle_t h), 1)                               \
  X(cudnnSetStream, te_dnn_status_t, (te_dnn_handle_t h, void *stream), 1)               \
  X(cudnnBackendCreateDescriptor, te_dnn_status_t, (int type, te_dnn_desc_t *d), 1)      \
  X(cudnnBackendDestroyDescriptor, te_dnn_status_t, (te_dnn_desc_t d), 1)                \
  X(cudnnBackendFinalize, te_dnn_status_t, (te_dnn_desc_t d), 1)                         \
  X(cudnnBackendSetAttribute, te_dnn_status_t,                                           \
    (te_dnn_desc_t d, int name, int type, int64_t count, const void *elems), 1)          \
  X(cudnnBackendGetAttribute, te_dnn_status_t,                                           \
    (te_dnn_desc_t d, int name, int type, int64_t requested, int64_t *count, void *elems), 1) \
  X(cudnnBackendExecute, te_dnn_status_t,                                                \
    (te_dnn_handle_t h, te_dnn_desc_t plan, te_dnn_desc_t pack), 1)

struct te_dnn_api {
#define TE_DNN_FIELD_(name, ret, params, req) ret(*p_##name) params;
  TE_DNN_SYMBOLS(TE_DNN_FIELD_)
#undef TE_DNN_FIELD_
};
extern struct te_dnn_api te_dnn;

/* The oldest cuDNN the graphs here were written for (9.1.0). */
#define TE_DNN_MIN_VERSION 90100

/* TECORE_CUDNN_LIB ("" when unset); registered by attn_cudnn_lib.c in
 * every build, so that te-info -e lists it whether or not CUDA was found. */
const char *te_dnn_lib_name(void);
/* TECORE_CUDNN_ENGINE_CFG (attn_cudnn_lib.c likewise): which of the
 * engine configurations that finalize a plan takes, 0 the first. */
int te_dnn_engine_cfg(void);
/* TECORE_CUDNN_MASK_VALUE (likewise): what masked scores become,
 * TE_DNN_MASK_*; auto is resolved when a graph is built (cuDNN loaded:
 * its version known), so that a shape's key does not depend on whether
 * cuDNN was loaded when the key was made. */
enum { TE_DNN_MASK_AUTO, TE_DNN_MASK_INF, TE_DNN_MASK_LOWEST };
int te_dnn_mask_choice(void);
/* cudnnGetVersion() of the loaded library, 0 before a successful load. */
size_t te_dnn_version(void);
/* The cuDNN handle of the calling thread's current context, cuDNN loaded
 * on the first call (TECORE_CUDNN_LIB, else libcudnn.so.9), created on
 * first use (the thread's capture mode relaxed meanwhile); NULL with the
 * reason in why. */
te_dnn_handle_t te_dnn_handle(char *why, size_t why_len);
/* "<fn> failed: <status> (<n>): <cuDNN's last error>" into buf. */
void te_dnn_describe(te_dnn_status_t s, const char *fn, char *buf, size_t len);
/* The libtecore result a failed status maps to. */
tecore_result_t te_dnn_result(te_dnn_status_t s);

/* Relaxes the thread's stream-capture mode for calls that may allocate
 * (handle creation, plan building), so that another stream's capture is not
 * invalidated; restore with the returned token. */
int te_dnn_relax_capture(void);
void te_dnn_restore_capture(int token);

/* ---- graphs and plans (attn_cudnn_graph.c, attn_cudnn_plan.c) --------------- */
#define TE_DNN_MAX_DESCS 256
#define TE_DNN_MAX_OPS 96
#define TE_DNN_MAX_BYVAL 24

/* The tensors of a variant pack, by role. */
enum te_dnn_role {
  TE_DNN_Q, TE_DNN_K, TE_DNN_V, TE_DNN_O, TE_DNN_STATS, TE_DNN_SCALE,
  TE_DNN_DO, TE_DNN_DQ, TE_DNN_DK, TE_DNN_DV,
  TE_DNN_WS_SUM,      /* bwd: rowsum(dO * O), float [b][h][s] in the workspace */
  TE_DNN_WS_DQACC,    /* bwd: dQ accumulated in float [b][h][s][d] in the workspace */
  /* variable lengths: int32 in the workspace (kernels/attn_cudnn.cu) */
  TE_DNN_SEQ_Q, TE_DNN_SEQ_KV,            /* [b][1][1][1] lengths */
  TE_DNN_OFF_Q, TE_DNN_OFF_K, TE_DNN_OFF_V, TE_DNN_OFF_O,   /* [b + 1] element offsets, */
  TE_DNN_OFF_DO, TE_DNN_OFF_DQ, TE_DNN_OFF_DK, TE_DNN_OFF_DV, /* in TE_ACD_ROLES order */
  /* E4M3 forward: float [1][1][1][1] on the device: the caller's dequantize
   * factors and O scale, or slots of the workspace (TE_ACD_SLOT_*) */
  TE_DNN_DESCALE_Q, TE_DNN_DESCALE_K, TE_DNN_DESCALE_V, TE_DNN_DESCALE_S,
  TE_DNN_SCALE_S, TE_DNN_SCALE_O, TE_DNN_AMAX_S, TE_DNN_AMAX_O,
  TE_DNN_ROLES
};

/* A built operation graph: every descriptor it made (destroyed together),
 * the uid of each role (0: absent), and the by-value constants whose host
 * addresses go into each variant pack. */
struct te_dnn_graph {
  te_dnn_desc_t descs[TE_DNN_MAX_DESCS];
  int ndescs;
  te_dnn_desc_t ops[TE_DNN_MAX_OPS];
  int nops;
  char opnames[TE_DNN_MAX_OPS][12]; /* what each operation is, for the log */
  te_dnn_desc_t opgraph;
  int64_t next_uid;
  int64_t role_uid[TE_DNN_ROLES];
  int nbyval;
  int64_t byval_uid[TE_DNN_MAX_BYVAL];
  union {
    float f;
    int32_t i;
  } byval[TE_DNN_MAX_BYVAL];
  /* workspace regions the graph itself needs, before the engine's, in this
   * order, each 256-aligned: rowsum and dQ accumulator (bwd); lengths and
   * offsets, and the padded stats (variable lengths) */
  size_t ws_sum_bytes, ws_dqacc_bytes, ws_ragged_bytes, ws_stats_bytes;
  /* E4M3 forward, after those: the slots, then a staged E4M3 O */
  size_t ws_slots_bytes, ws_o8_bytes;
  /* first failure */
  te_dnn_status_t status;
  char failed[256];
};

/* The shape facts a graph depends on, from the problem.  Variable lengths
 * (varlen): sq and skv are the maximum lengths; each sequence's length and
 * first element come from the workspace (ragged offsets), and the stats
 * are padded [b][h][sq] in the workspace. */
struct te_dnn_shape {
  int64_t b, hq, hk, d, sq, skv, total_q;
  int varlen;
  int dtype;                       /* TE_DNN_DATA_BFLOAT16, _HALF or _FP8_E4M3 (forward) */
  int o_staged;                    /* E4M3: O is BF16/F16, the graph writes E4M3 to the
                                    * workspace, packed (o_ts, o_hs: hq * d, d) */
  int o_dt;                        /* E4M3 forward: the graph's O type (E4M3; BF16/HALF:
                                    * written directly, no staging) */
  int causal;
  long window_left;
  int stats_direct;                /* stats strided straight into lse (0: varlen or no lse) */
  int mask;                        /* masked scores: TE_DNN_MASK_* (te_dnn_mask_choice) */
  int64_t q_ts, q_hs, k_ts, k_hs, v_ts, v_hs, o_ts, o_hs;      /* token, head strides */
  int64_t do_ts, do_hs, dq_ts, dq_hs, dk_ts, dk_hs, dv_ts, dv_hs;
};

/* Builds and finalizes the forward (backward = 0) or backward operation
 * graph on handle h into g (zeroed by the caller).  0, or -1 with
 * g->status and g->failed set; te_dnn_graph_free releases what was made. */
int te_dnn_graph_build(struct te_dnn_graph *g, te_dnn_handle_t h, const struct te_dnn_shape *s,
                       int backward);
void te_dnn_graph_free(struct te_dnn_graph *g);

/* A cached plan: the graph, the execution plan, its workspace. */
struct te_dnn_plan {
  struct te_dnn_graph graph;
  te_dnn_desc_t plan;
  te_dnn_handle_t handle;
  size_t engine_ws;       /* the engine's own workspace */
  size_t ws_bytes;        /* all of it: graph regions (256-aligned) + engine */
  int64_t engine;
};

/* The plan for (current context, s, backward): from the cache, or built
 * now (relaxing the thread's capture mode) unless build == 0.  Holds the
 * cache lock on success until te_dnn_plan_release.  NULL with the reason
 * in why (why_code: the libtecore result it maps to). */
struct te_dnn_plan *te_dnn_plan_get(const struct te_dnn_shape *s, int backward, int build,
                                    char *why, size_t why_len, tecore_result_t *why_code);
void te_dnn_plan_release(void);
/* Destroys every handle (the plan cache's tecore_fini hook, after the
 * plans that name them). */
void te_dnn_handles_free(void);

#endif
