/* cuda_backend.h -- private to libtecore/cuda: the driver entry points the
 * backend uses, each fetched once through cuGetProcAddress at a pinned
 * version, the one macro every driver call goes through, and the ops the
 * files of this folder define for te_cuda_ops (cuda_ops.c).
 *
 * Nothing links -lcuda: cuda_driver.c dlopens libcuda.so.1.  The version
 * next to each symbol picks the ABI we were written against (the pointer is
 * typed with the matching PFN_<name>_v<version> of <cudaTypedefs.h>), so a
 * newer driver that changes a signature under the same name (cuCtxSynchronize
 * and cuCtxGetDevice did in CUDA 13) cannot break us. */
#ifndef TECORE_CUDA_BACKEND_H
#define TECORE_CUDA_BACKEND_H

#include <cuda.h>
#include <cudaTypedefs.h>

#include "device_ops.h"

/* X(name, version, required)
 * required = 1: init fails (TECORE_ERR_NO_DRIVER) when the driver lacks it.
 * required = 0: only the ops that use it fail (TECORE_ERR_NOT_SUPPORTED). */
#define TE_CUDA_SYMBOLS(X)                                                     \
  X(cuGetErrorName, 6000, 1)                                                   \
  X(cuGetErrorString, 6000, 1)                                                 \
  X(cuInit, 2000, 1)                                                           \
  X(cuDriverGetVersion, 2020, 1)                                               \
  X(cuDeviceGet, 2000, 1)                                                      \
  X(cuDeviceGetCount, 2000, 1)                                                 \
  X(cuDeviceGetName, 2000, 1)                                                  \
  X(cuDeviceGetAttribute, 2000, 1)                                             \
  X(cuDeviceTotalMem, 3020, 1)                                                 \
  X(cuDeviceGetPCIBusId, 4010, 1)                                              \
  X(cuDeviceCanAccessPeer, 4000, 1)                                            \
  X(cuDevicePrimaryCtxRetain, 7000, 1)                                         \
  X(cuDevicePrimaryCtxRelease, 11000, 1)                                       \
  X(cuDevicePrimaryCtxGetState, 7000, 1)                                       \
  X(cuCtxSetCurrent, 4000, 1)                                                  \
  X(cuCtxGetCurrent, 4000, 1)                                                  \
  X(cuCtxGetDevice, 2000, 1)                                                   \
  X(cuCtxPushCurrent, 4000, 1)                                                 \
  X(cuCtxPopCurrent, 4000, 1)                                                  \
  X(cuCtxSynchronize, 2000, 1)                                                 \
  X(cuCtxGetStreamPriorityRange, 5050, 1)                                      \
  X(cuMemAlloc, 3020, 1)                                                       \
  X(cuMemFree, 3020, 1)                                                        \
  X(cuMemGetInfo, 3020, 1)                                                     \
  X(cuMemHostAlloc, 2020, 1)                                                   \
  X(cuMemFreeHost, 2000, 1)                                                    \
  X(cuMemHostRegister, 6050, 1)                                                \
  X(cuMemHostUnregister, 4000, 1)                                              \
  X(cuMemHostGetDevicePointer, 3020, 1)                                        \
  X(cuMemcpy, 4000, 1)                                                         \
  X(cuMemcpyAsync, 4000, 1)                                                    \
  X(cuMemsetD8Async, 3020, 1)                                                  \
  X(cuMemsetD16Async, 3020, 1)                                                 \
  X(cuMemsetD32Async, 3020, 1)                                                 \
  X(cuStreamCreateWithPriority, 5050, 1)                                       \
  X(cuStreamDestroy, 4000, 1)                                                  \
  X(cuStreamSynchronize, 2000, 1)                                              \
  X(cuStreamQuery, 2000, 1)                                                    \
  X(cuStreamWaitEvent, 3020, 1)                                                \
  X(cuStreamGetPriority, 5050, 1)                                              \
  X(cuEventCreate, 2000, 1)                                                    \
  X(cuEventDestroy, 4000, 1)                                                   \
  X(cuEventRecord, 2000, 1)                                                    \
  X(cuEventSynchronize, 2000, 1)                                               \
  X(cuEventQuery, 2000, 1)                                                     \
  X(cuEventElapsedTime, 2000, 1)                                               \
  /* stream memory operations: the v2 entry points (always enabled) */        \
  X(cuStreamWriteValue32, 11070, 0)                                            \
  X(cuStreamWriteValue64, 11070, 0)                                            \
  X(cuStreamWaitValue32, 11070, 0)                                             \
  X(cuStreamWaitValue64, 11070, 0)                                             \
  /* kernels: context-independent libraries */                                \
  X(cuLibraryLoadData, 12000, 0)                                               \
  X(cuLibraryGetKernel, 12000, 0)                                              \
  X(cuKernelSetAttribute, 12000, 0)                                            \
  X(cuLaunchKernelEx, 11060, 0)                                                \
  /* capture and graphs */                                                    \
  X(cuStreamBeginCapture, 10010, 0)                                            \
  X(cuStreamEndCapture, 10000, 0)                                              \
  X(cuStreamGetCaptureInfo, 11030, 0)                                          \
  X(cuGraphDestroy, 10000, 0)                                                  \
  X(cuGraphGetNodes, 10000, 0)                                                 \
  X(cuGraphDebugDotPrint, 11030, 0)                                            \
  X(cuGraphInstantiateWithFlags, 11040, 0)                                     \
  X(cuGraphExecDestroy, 10000, 0)                                              \
  X(cuGraphLaunch, 10000, 0)                                                   \
  X(cuGraphUpload, 11010, 0)                                                   \
  X(cuGraphExecUpdate, 12000, 0)                                               \
  /* capture into a graph, instantiate flags, single nodes (libtegraph) */    \
  X(cuStreamBeginCaptureToGraph, 12030, 0)                                     \
  X(cuGraphNodeGetDependentNodes, 12030, 0)                                    \
  X(cuGraphInstantiateWithParams, 12000, 0)                                    \
  X(cuGraphNodeGetType, 10000, 0)                                              \
  X(cuGraphKernelNodeGetParams, 12000, 0)                                      \
  X(cuGraphMemcpyNodeGetParams, 10000, 0)                                      \
  X(cuGraphMemsetNodeGetParams, 10000, 0)                                      \
  X(cuGraphExecKernelNodeSetParams, 12000, 0)                                  \
  X(cuGraphExecMemcpyNodeSetParams, 10020, 0)                                  \
  X(cuGraphExecMemsetNodeSetParams, 10020, 0)                                  \
  X(cuKernelGetFunction, 12000, 0)                                             \
  /* virtual memory management */                                             \
  X(cuMemGetAllocationGranularity, 10020, 0)                                   \
  X(cuMemAddressReserve, 10020, 0)                                             \
  X(cuMemAddressFree, 10020, 0)                                                \
  X(cuMemCreate, 10020, 0)                                                     \
  X(cuMemRelease, 10020, 0)                                                    \
  X(cuMemMap, 10020, 0)                                                        \
  X(cuMemUnmap, 10020, 0)                                                      \
  X(cuMemSetAccess, 10020, 0)                                                  \
  X(cuMemExportToShareableHandle, 10020, 0)                                    \
  X(cuMemImportFromShareableHandle, 10020, 0)                                  \
  /* multicast objects (driver 12.1+) */                                      \
  X(cuMulticastGetGranularity, 12010, 0)                                       \
  X(cuMulticastCreate, 12010, 0)                                               \
  X(cuMulticastAddDevice, 12010, 0)                                            \
  X(cuMulticastBindMem, 12010, 0)                                              \
  X(cuMulticastUnbind, 12010, 0)

/* The fetched entry points; a NULL field is a symbol the driver lacks.
 * Fields are p_<name> so that <cuda.h>'s renaming macros (cuMemAlloc ->
 * cuMemAlloc_v2 ...) never touch them. */
struct te_cuda_api {
#define TE_CUDA_FIELD_(name, ver, req) PFN_##name##_v##ver p_##name;
  TE_CUDA_SYMBOLS(TE_CUDA_FIELD_)
#undef TE_CUDA_FIELD_
};
extern struct te_cuda_api te_cu;

/* Maps a CUresult to a tecore_result_t; on failure sets the thread's detail
 * to "<fn> failed: <CUDA_ERROR_NAME> (<driver's text>)".  CUDA_ERROR_NOT_READY
 * is an answer, not a failure: it maps to TECORE_ERR_NOT_READY, clears the
 * detail and logs nothing (queries are polled). */
tecore_result_t te_cuda_result(CUresult r, const char *fn, const char *file, int line);
/* TECORE_ERR_NOT_SUPPORTED naming a symbol this driver does not have. */
tecore_result_t te_cuda_missing(const char *fn, const char *file, int line);

/* The one way to call the driver:  TE_CHECK(TE_CU(cuMemAlloc, &p, n));
 * fn is the base name as cuGetProcAddress knows it. */
#define TE_CU(fn, ...)                                                         \
  (te_cu.p_##fn ? te_cuda_result(te_cu.p_##fn(__VA_ARGS__), #fn, __FILE__, __LINE__) \
                : te_cuda_missing(#fn, __FILE__, __LINE__))

/* Makes sure the calling thread has a current context: when it has none,
 * device 0's primary context (retained once for the process, never
 * released, as the runtime API does) becomes current. */
tecore_result_t te_cuda_need_ctx(void);
/* The current context's device (after te_cuda_need_ctx). */
tecore_result_t te_cuda_current_device(CUdevice *dev);
/* ordinal -> CUdevice with a message naming the ordinal. */
tecore_result_t te_cuda_device(int ordinal, CUdevice *dev);

/* NVLink links from device a (PCI bus id string) to the GPU at
 * domain:bus:device, or -1 when NVML is unavailable (cuda_nvml.c). */
int te_cuda_nvlink_count(const char *pci_bus_id_a, int domain_b, int bus_b, int device_b);

/* ---- the ops, by file ---------------------------------------------------- */
/* cuda_driver.c */
tecore_result_t te_cuda_init(void);
tecore_result_t te_cuda_driver_version(int *version);
/* cuda_device.c */
tecore_result_t te_cuda_device_count(int *count);
tecore_result_t te_cuda_device_props(int ordinal, struct tecore_device_props *props);
tecore_result_t te_cuda_device_peer(int a, int b, int *can, int *link);
tecore_result_t te_cuda_ctx_create(int ordinal, tecore_ctx_t *ctx);
tecore_result_t te_cuda_ctx_destroy(tecore_ctx_t ctx);
tecore_result_t te_cuda_ctx_set_current(tecore_ctx_t ctx);
tecore_result_t te_cuda_ctx_get_current(tecore_ctx_t *ctx);
tecore_result_t te_cuda_ctx_synchronize(void);
/* cuda_memory.c */
tecore_result_t te_cuda_mem_alloc(size_t bytes, tecore_devptr_t *dptr);
tecore_result_t te_cuda_mem_free(tecore_devptr_t dptr);
tecore_result_t te_cuda_mem_info(size_t *free_bytes, size_t *total_bytes);
tecore_result_t te_cuda_mem_alloc_host(size_t bytes, void **ptr);
tecore_result_t te_cuda_mem_free_host(void *ptr);
tecore_result_t te_cuda_mem_host_register(void *ptr, size_t bytes, unsigned flags);
tecore_result_t te_cuda_mem_host_unregister(void *ptr);
tecore_result_t te_cuda_mem_host_device_ptr(void *host, tecore_devptr_t *dptr);
tecore_result_t te_cuda_memcpy_async(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes,
                                     tecore_stream_t stream);
tecore_result_t te_cuda_memcpy_sync(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes);
tecore_result_t te_cuda_memset_async(tecore_devptr_t dst, uint32_t value, unsigned elem_size,
                                     size_t count, tecore_stream_t stream);
/* cuda_stream.c */
tecore_result_t te_cuda_stream_priority_range(int *least, int *greatest);
tecore_result_t te_cuda_stream_create(unsigned flags, int priority, tecore_stream_t *stream);
tecore_result_t te_cuda_stream_destroy(tecore_stream_t stream);
tecore_result_t te_cuda_stream_synchronize(tecore_stream_t stream);
tecore_result_t te_cuda_stream_query(tecore_stream_t stream);
tecore_result_t te_cuda_stream_wait_event(tecore_stream_t stream, tecore_event_t event);
tecore_result_t te_cuda_stream_get_priority(tecore_stream_t stream, int *priority);
tecore_result_t te_cuda_event_create(unsigned flags, tecore_event_t *event);
tecore_result_t te_cuda_event_destroy(tecore_event_t event);
tecore_result_t te_cuda_event_record(tecore_event_t event, tecore_stream_t stream);
tecore_result_t te_cuda_event_synchronize(tecore_event_t event);
tecore_result_t te_cuda_event_query(tecore_event_t event);
tecore_result_t te_cuda_event_elapsed(float *ms, tecore_event_t start, tecore_event_t end);
tecore_result_t te_cuda_stream_write_value(tecore_stream_t stream, tecore_devptr_t addr,
                                           uint64_t value, unsigned width);
tecore_result_t te_cuda_stream_wait_value(tecore_stream_t stream, tecore_devptr_t addr,
                                          uint64_t value, tecore_wait_cond_t cond,
                                          unsigned width);
/* cuda_kernel.c */
tecore_result_t te_cuda_kernel_module_load(struct te_kernel_module *mod);
tecore_result_t te_cuda_kernel_prepare(struct te_kernel_entry *k, struct te_kernel_module *mod);
tecore_result_t te_cuda_kernel_launch(struct te_kernel_entry *k, struct te_kernel_module *mod,
                                      const struct tecore_launch_cfg *cfg, void *const *args,
                                      tecore_stream_t stream);
/* cuda_graph.c */
tecore_result_t te_cuda_stream_begin_capture(tecore_stream_t stream, tecore_capture_mode_t mode);
tecore_result_t te_cuda_stream_end_capture(tecore_stream_t stream, tecore_graph_t *graph);
tecore_result_t te_cuda_stream_capture_status(tecore_stream_t stream,
                                              tecore_capture_status_t *status);
tecore_result_t te_cuda_graph_destroy(tecore_graph_t graph);
tecore_result_t te_cuda_graph_node_count(tecore_graph_t graph, size_t *count);
tecore_result_t te_cuda_graph_dot(tecore_graph_t graph, const char *path);
tecore_result_t te_cuda_graph_instantiate(tecore_graph_exec_t *exec, tecore_graph_t graph);
tecore_result_t te_cuda_graph_exec_destroy(tecore_graph_exec_t exec);
tecore_result_t te_cuda_graph_launch(tecore_graph_exec_t exec, tecore_stream_t stream);
tecore_result_t te_cuda_graph_upload(tecore_graph_exec_t exec, tecore_stream_t stream);
tecore_result_t te_cuda_graph_exec_update(tecore_graph_exec_t exec, tecore_graph_t graph,
                                          tecore_graph_update_result_t *why);
tecore_result_t te_cuda_graph_instantiate_flags(tecore_graph_exec_t *exec, tecore_graph_t graph,
                                                unsigned flags, tecore_stream_t upload_stream);
/* cuda_graph_node.c */
tecore_result_t te_cuda_stream_begin_capture_to_graph(tecore_stream_t stream,
                                                      tecore_graph_t graph,
                                                      tecore_capture_mode_t mode);
tecore_result_t te_cuda_graph_nodes(tecore_graph_t graph, struct tecore_graph_node_desc *nodes,
                                    size_t max, size_t *count);
tecore_result_t te_cuda_graph_kernel_node_args(tecore_graph_t graph, tecore_graph_node_t node,
                                               void *const *args);
tecore_result_t te_cuda_graph_exec_kernel_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node,
                                                   const struct tecore_launch_cfg *cfg,
                                                   void *const *args);
tecore_result_t te_cuda_graph_exec_memcpy_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node, tecore_devptr_t dst,
                                                   tecore_devptr_t src);
tecore_result_t te_cuda_graph_exec_memset_node_set(tecore_graph_exec_t exec,
                                                   tecore_graph_node_t node, tecore_devptr_t dst,
                                                   uint32_t value);
/* cuda_vmm.c */
tecore_result_t te_cuda_vmm_granularity(size_t *granularity, int recommended);
tecore_result_t te_cuda_vmm_reserve(size_t bytes, size_t align, tecore_devptr_t *va);
tecore_result_t te_cuda_vmm_free_va(tecore_devptr_t va, size_t bytes);
tecore_result_t te_cuda_vmm_create(size_t bytes, unsigned flags, tecore_vmm_handle_t *handle);
tecore_result_t te_cuda_vmm_release(tecore_vmm_handle_t handle);
tecore_result_t te_cuda_vmm_map(tecore_devptr_t va, size_t bytes, tecore_vmm_handle_t handle,
                                size_t offset);
tecore_result_t te_cuda_vmm_unmap(tecore_devptr_t va, size_t bytes);
tecore_result_t te_cuda_vmm_set_access(tecore_devptr_t va, size_t bytes, int ordinal);
tecore_result_t te_cuda_vmm_export_fd(tecore_vmm_handle_t handle, int *fd);
tecore_result_t te_cuda_vmm_import_fd(int fd, tecore_vmm_handle_t *handle);
/* cuda_multicast.c */
tecore_result_t te_cuda_mc_granularity(size_t bytes, int ndevices, size_t *granularity);
tecore_result_t te_cuda_mc_create(size_t bytes, int ndevices, unsigned flags,
                                  tecore_mc_handle_t *mc);
tecore_result_t te_cuda_mc_add_device(tecore_mc_handle_t mc, int ordinal);
tecore_result_t te_cuda_mc_bind_mem(tecore_mc_handle_t mc, size_t mc_offset,
                                    tecore_vmm_handle_t mem, size_t mem_offset, size_t bytes);
tecore_result_t te_cuda_mc_unbind(tecore_mc_handle_t mc, int ordinal, size_t mc_offset,
                                  size_t bytes);
tecore_result_t te_cuda_mc_release(tecore_mc_handle_t mc);
tecore_result_t te_cuda_mc_export_fd(tecore_mc_handle_t mc, int *fd);
tecore_result_t te_cuda_mc_import_fd(int fd, tecore_mc_handle_t *mc);

#endif
