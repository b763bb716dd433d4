/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_graph.c -- the cuda backend's stream capture and CUDA graphs:
 * begin/end capture, capture status, node count, DOT dump, instantiate,
 * launch, upload and in-place update (cuGraphExecUpdate, CUDA 12 form),
 * and the launch of an executable from the device.
 * tecore graph handles are the driver's CUgraph / CUgraphExec. */
#include "cuda_backend.h"
#include "common/graph_chain.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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
_Static_assert(TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH == CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH,
               "");

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

/* ---- device launch ----------------------------------------------------------------
 * An executable instantiated with CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH
 * gets a launcher: a graph of one node of te_graph_fire
 * (kernels/graph_fire.cu), which launches it as its tail.  A device launch
 * must come from a kernel that runs in a graph, so the launcher is one.
 * The kernel leaves a failure's code in a word of pinned host memory
 * mapped for the device. */

/* kernels/graph_fire.fatbin, embedded by libtecore/fatbins.S */
extern const unsigned char te_fatbin_graph_fire[], te_fatbin_graph_fire_end[];

struct dev_launcher {
  CUgraph graph;
  CUgraphExec fire;
  volatile unsigned *status;   /* pinned, mapped: te_graph_fire writes it */
};

static pthread_mutex_t fire_lock = PTHREAD_MUTEX_INITIALIZER;
static CUlibrary fire_lib;
static CUkernel fire_kernel, chain_kernel;

/* A kernel of kernels/graph_fire.cu (te_graph_fire, te_graph_chain), its
 * library loaded once per process. */
static tecore_result_t fire_lib_kernel(const char *name, CUkernel *slot, CUkernel *out) {
  tecore_result_t res = TECORE_SUCCESS;
  pthread_mutex_lock(&fire_lock);
  if (!fire_lib)
    res = TE_CU(cuLibraryLoadData, &fire_lib, te_fatbin_graph_fire, NULL, NULL, 0, NULL, NULL, 0);
  if (res == TECORE_SUCCESS && !*slot) res = TE_CU(cuLibraryGetKernel, slot, fire_lib, name);
  *out = *slot;
  pthread_mutex_unlock(&fire_lock);
  return res;
}

static tecore_result_t fire_kernel_get(CUkernel *out) {
  return fire_lib_kernel("te_graph_fire", &fire_kernel, out);
}

tecore_result_t te_cuda_graph_device_release(void *state) {
  struct dev_launcher *l = state;
  if (!l) return TECORE_SUCCESS;
  tecore_result_t res = TECORE_SUCCESS, r;
  if (l->fire && (r = TE_CU(cuGraphExecDestroy, l->fire)) != TECORE_SUCCESS) res = r;
  if (l->graph && (r = TE_CU(cuGraphDestroy, l->graph)) != TECORE_SUCCESS) res = r;
  if (l->status && (r = TE_CU(cuMemFreeHost, (void *)l->status)) != TECORE_SUCCESS) res = r;
  free(l);
  return res;
}

tecore_result_t te_cuda_graph_device_prepare(tecore_graph_exec_t exec, void **state) {
  static const char fn[] = "device launch";
  TE_CHECK(te_cuda_need_ctx());
  CUkernel k = NULL;
  CUfunction f = NULL;
  TE_CHECK(fire_kernel_get(&k));
  /* the image for this device, loaded now: a device without one (the
   * kernel is built as machine code only) is told so here */
  if (TE_CU(cuKernelGetFunction, &f, k) != TECORE_SUCCESS)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: no device-launch kernel for this GPU (%s); "
                  "libte's build holds it for the architectures of --with-cuda-arch only", fn,
                  tecore_last_error());
  struct dev_launcher *l = calloc(1, sizeof *l);
  if (!l) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t res;
  void *h = NULL;
  CUdeviceptr d = 0;
  TE_CHECK_GOTO(TE_CU(cuMemHostAlloc, &h, 64, CU_MEMHOSTALLOC_PORTABLE |
                      CU_MEMHOSTALLOC_DEVICEMAP), res, fail);
  l->status = h;
  *l->status = 0;
  TE_CHECK_GOTO(TE_CU(cuMemHostGetDevicePointer, &d, h, 0), res, fail);
  TE_CHECK_GOTO(TE_CU(cuGraphCreate, &l->graph, 0), res, fail);
  CUgraphExec target = (CUgraphExec)exec;
  void *args[] = {&target, &d};
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.kern = k; /* func and ctx NULL: the current context's */
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  CUgraphNode node = NULL;
  TE_CHECK_GOTO(TE_CU(cuGraphAddKernelNode, &node, l->graph, NULL, 0, &p), res, fail);
  TE_CHECK_GOTO(TE_CU(cuGraphInstantiateWithFlags, &l->fire, l->graph, 0), res, fail);
  *state = l;
  return TECORE_SUCCESS;
fail:
  (void)te_cuda_graph_device_release(l);
  return res;
}

tecore_result_t te_cuda_graph_device_launch(tecore_graph_exec_t exec, void *state, int upload,
                                            tecore_stream_t stream) {
  struct dev_launcher *l = state;
  if (!l) return TE_ERR(TECORE_ERR_INTERNAL, "device launch: exec %p has no launcher", (void *)exec);
  TE_CHECK(te_cuda_need_ctx());
  if (upload) TE_CHECK(TE_CU(cuGraphUpload, (CUgraphExec)exec, stream));
  TE_CHECK(TE_CU(cuGraphLaunch, l->fire, stream));
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_graph_device_status(void *state, unsigned *code) {
  struct dev_launcher *l = state;
  *code = 0;
  if (!l) return TECORE_SUCCESS;
  unsigned v = *l->status;
  if (v) {
    *l->status = 0;
    *code = v;
  }
  return TECORE_SUCCESS;
}

/* ---- graph chains ------------------------------------------------------------------
 * The launcher of a chain (kernels/common/graph_chain.h): a graph of one
 * node of te_graph_chain(ctl), instantiated for device launch (it launches
 * itself again as a tail) and uploaded with the chain's executables. */
struct chain_launcher {
  CUgraph graph;
  CUgraphExec exec;
};

tecore_result_t te_cuda_graph_chain_release(void *state) {
  struct chain_launcher *l = state;
  if (!l) return TECORE_SUCCESS;
  tecore_result_t res = TECORE_SUCCESS, r;
  if (l->exec && (r = TE_CU(cuGraphExecDestroy, l->exec)) != TECORE_SUCCESS) res = r;
  if (l->graph && (r = TE_CU(cuGraphDestroy, l->graph)) != TECORE_SUCCESS) res = r;
  free(l);
  return res;
}

tecore_result_t te_cuda_graph_chain_prepare(struct te_chain_ctl *ctl, tecore_stream_t stream,
                                            void **state) {
  static const char fn[] = "graph chain";
  TE_CHECK(te_cuda_need_ctx());
  CUkernel k = NULL;
  CUfunction f = NULL;
  TE_CHECK(fire_lib_kernel("te_graph_chain", &chain_kernel, &k));
  if (TE_CU(cuKernelGetFunction, &f, k) != TECORE_SUCCESS)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "%s: no launcher kernel for this GPU (%s); "
                  "libte's build holds it for the architectures of --with-cuda-arch only", fn,
                  tecore_last_error());
  CUdeviceptr d = 0;
  TE_CHECK(TE_CU(cuMemHostGetDevicePointer, &d, (void *)ctl, 0));
  for (uint32_t i = 0; i < ctl->nexec; i++)
    TE_CHECK(TE_CU(cuGraphUpload, (CUgraphExec)(uintptr_t)ctl->exec[i], (CUstream)stream));
  struct chain_launcher *l = calloc(1, sizeof *l);
  if (!l) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t res;
  TE_CHECK_GOTO(TE_CU(cuGraphCreate, &l->graph, 0), res, fail);
  void *args[] = {&d};
  CUDA_KERNEL_NODE_PARAMS p;
  memset(&p, 0, sizeof p);
  p.kern = k;
  p.gridDimX = p.gridDimY = p.gridDimZ = 1;
  p.blockDimX = 32, p.blockDimY = p.blockDimZ = 1;
  p.kernelParams = args;
  CUgraphNode node = NULL;
  TE_CHECK_GOTO(TE_CU(cuGraphAddKernelNode, &node, l->graph, NULL, 0, &p), res, fail);
  TE_CHECK_GOTO(TE_CU(cuGraphInstantiateWithFlags, &l->exec, l->graph,
                      CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH), res, fail);
  TE_CHECK_GOTO(TE_CU(cuGraphUpload, l->exec, (CUstream)stream), res, fail);
  *state = l;
  return TECORE_SUCCESS;
fail:
  (void)te_cuda_graph_chain_release(l);
  return res;
}

tecore_result_t te_cuda_graph_chain_start(void *state, tecore_stream_t stream) {
  struct chain_launcher *l = state;
  if (!l) return TE_ERR(TECORE_ERR_INTERNAL, "graph chain: no launcher");
  TE_CHECK(te_cuda_need_ctx());
  return TE_CU(cuGraphLaunch, l->exec, (CUstream)stream);
}
