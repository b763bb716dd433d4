/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_graph.c -- the cuda backend's stream capture and CUDA graphs:
 * begin/end capture, capture status, node count, DOT dump, instantiate,
 * launch, upload and in-place update (cuGraphExecUpdate, CUDA 12 form).
 * tecore graph handles are the driver's CUgraph / CUgraphExec. */
#include "cuda_backend.h"

/* tecore's update results mirror the driver's, value for value. */
_Static_assert((int)TECORE_GRAPH_UPDATE_SUCCESS == (int)CU_GRAPH_EXEC_UPDATE_SUCCESS, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_ERROR == (int)CU_GRAPH_EXEC_UPDATE_ERROR, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_TOPOLOGY_CHANGED ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_TOPOLOGY_CHANGED, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_NODE_TYPE_CHANGED ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_NODE_TYPE_CHANGED, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_FUNCTION_CHANGED ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_FUNCTION_CHANGED, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_PARAMETERS_CHANGED ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_PARAMETERS_CHANGED, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_NOT_SUPPORTED ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_NOT_SUPPORTED, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_UNSUPPORTED_FUNCTION_CHANGE ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_UNSUPPORTED_FUNCTION_CHANGE, "");
_Static_assert((int)TECORE_GRAPH_UPDATE_ATTRIBUTES_CHANGED ==
                   (int)CU_GRAPH_EXEC_UPDATE_ERROR_ATTRIBUTES_CHANGED, "");

tecore_result_t te_cuda_stream_begin_capture(tecore_stream_t stream, tecore_capture_mode_t mode) {
  CUstreamCaptureMode cu_mode;
  switch (mode) {
  case TECORE_CAPTURE_GLOBAL: cu_mode = CU_STREAM_CAPTURE_MODE_GLOBAL; break;
  case TECORE_CAPTURE_THREAD_LOCAL: cu_mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL; break;
  case TECORE_CAPTURE_RELAXED: cu_mode = CU_STREAM_CAPTURE_MODE_RELAXED; break;
  default: return TE_ERR(TECORE_ERR_INVALID, "begin capture: unknown capture mode %d", (int)mode);
  }
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamBeginCapture, stream, cu_mode));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_stream_end_capture(tecore_stream_t stream, tecore_graph_t *graph) {
  CUgraph g = NULL;
  tecore_result_t res;
  TE_CHECK(te_cuda_need_ctx());
  /* An invalidated capture ends with STREAM_CAPTURE_INVALIDATED
   * (-> TECORE_ERR_CAPTURE) and no graph. */
  TE_CHECK_GOTO(TE_CU(cuStreamEndCapture, stream, &g), res, fail);
  *graph = g;
  return TECORE_SUCCESS;
fail:
  if (g) (void)TE_CU(cuGraphDestroy, g);
  return res;
}

tecore_result_t te_cuda_stream_capture_status(tecore_stream_t stream,
                                              tecore_capture_status_t *status) {
  CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuStreamGetCaptureInfo, stream, &st, NULL, NULL, NULL, NULL));
  switch (st) {
  case CU_STREAM_CAPTURE_STATUS_NONE: *status = TECORE_CAPTURE_NONE; break;
  case CU_STREAM_CAPTURE_STATUS_ACTIVE: *status = TECORE_CAPTURE_ACTIVE; break;
  case CU_STREAM_CAPTURE_STATUS_INVALIDATED: *status = TECORE_CAPTURE_INVALIDATED; break;
  default:
    return TE_ERR(TECORE_ERR_DRIVER, "cuStreamGetCaptureInfo: unknown capture status %d", (int)st);
  }
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_destroy(tecore_graph_t graph) {
  TE_CHECK(TE_CU(cuGraphDestroy, graph));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_node_count(tecore_graph_t graph, size_t *count) {
  size_t n = 0;
  TE_CHECK(TE_CU(cuGraphGetNodes, graph, NULL, &n));
  *count = n;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_dot(tecore_graph_t graph, const char *path) {
  TE_CHECK(TE_CU(cuGraphDebugDotPrint, graph, path, CU_GRAPH_DEBUG_DOT_FLAGS_VERBOSE));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_instantiate(tecore_graph_exec_t *exec, tecore_graph_t graph) {
  return te_cuda_graph_instantiate_flags(exec, graph, 0, NULL);
}

/* tecore's instantiate flags are the driver's. */
_Static_assert(TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH ==
                   CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH, "");
_Static_assert(TECORE_GRAPH_INSTANTIATE_UPLOAD == CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD, "");
_Static_assert(TECORE_GRAPH_INSTANTIATE_USE_NODE_PRIORITY ==
                   CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY, "");

/* Uploading at instantiation needs the parameter-block form, which also
 * says why an instantiation failed. */
tecore_result_t te_cuda_graph_instantiate_flags(tecore_graph_exec_t *exec, tecore_graph_t graph,
                                                unsigned flags, tecore_stream_t upload_stream) {
  CUgraphExec e = NULL;
  TE_CHECK(te_cuda_need_ctx());
  if (flags & TECORE_GRAPH_INSTANTIATE_UPLOAD) {
    CUDA_GRAPH_INSTANTIATE_PARAMS ip = {.flags = flags, .hUploadStream = upload_stream};
    tecore_result_t res = TE_CU(cuGraphInstantiateWithParams, &e, graph, &ip);
    if (res != TECORE_SUCCESS) {
      te_error_hop(__func__, __FILE__, __LINE__);
      return res;
    }
    if (ip.result_out != CUDA_GRAPH_INSTANTIATE_SUCCESS) {
      if (e) (void)TE_CU(cuGraphExecDestroy, e);
      return TE_ERR(TECORE_ERR_DRIVER, "cuGraphInstantiateWithParams: instantiation result %d",
                    (int)ip.result_out);
    }
  } else {
    TE_CHECK(TE_CU(cuGraphInstantiateWithFlags, &e, graph, flags));
  }
  *exec = e;
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_exec_destroy(tecore_graph_exec_t exec) {
  TE_CHECK(TE_CU(cuGraphExecDestroy, exec));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_launch(tecore_graph_exec_t exec, tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuGraphLaunch, exec, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_upload(tecore_graph_exec_t exec, tecore_stream_t stream) {
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuGraphUpload, exec, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_exec_update(tecore_graph_exec_t exec, tecore_graph_t graph,
                                          tecore_graph_update_result_t *why) {
  CUgraphExecUpdateResultInfo info = {.result = CU_GRAPH_EXEC_UPDATE_ERROR};
  TE_CHECK(te_cuda_need_ctx());
  tecore_result_t res = TE_CU(cuGraphExecUpdate, exec, graph, &info);
  if (res == TECORE_SUCCESS) {
    *why = TECORE_GRAPH_UPDATE_SUCCESS;
    return TECORE_SUCCESS;
  }
  if (res == TECORE_ERR_GRAPH_UPDATE) {
    /* The driver refused; exec keeps its old parameters.  Say why. */
    *why = (tecore_graph_update_result_t)info.result;
    return TE_ERR(TECORE_ERR_GRAPH_UPDATE, "cuGraphExecUpdate refused the update: %s",
                  tecore_graph_update_result_name(*why));
  }
  /* Some other failure (bad handle, driver error): not a refusal. */
  *why = TECORE_GRAPH_UPDATE_ERROR;
  te_error_hop(__func__, __FILE__, __LINE__);
  return res;
}
