/* SPDX-License-Identifier: Apache-2.0 */
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

#include "device/device_ops.h"

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
  X(cuDevicePrimaryCtxSetFlags, 11000, 0)                                      \
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
  X(cuPointerGetAttributes, 7000, 0)                                           \
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
  X(cuThreadExchangeStreamCaptureMode, 10010, 0)                               \
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
  /* a memset node replaced by a kernel node (graph_memset.c) */              \
  X(cuGraphNodeGetDependencies, 12030, 0)                                      \
  X(cuGraphAddKernelNode, 12000, 0)                                            \
  X(cuGraphAddDependencies, 12030, 0)                                          \
  X(cuGraphDestroyNode, 10000, 0)                                              \
  X(cuKernelGetFunction, 12000, 0)                                             \
  /* the device-launch graph of one kernel (cuda_graph.c) */                   \
  X(cuGraphCreate, 10000, 0)                                                   \
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
  X(cuMulticastUnbind, 12010, 0)                                               \
  /* TMA tensor maps (the own 16-bit GEMM, cuda_gemm16.c) */                  \
  X(cuTensorMapEncodeTiled, 12000, 0)

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
/* Before a primary context is retained: its wait policy from
 * TECORE_CUDA_SYNC (nothing for "auto", the driver's own choice). */
tecore_result_t te_cuda_sync_policy(CUdevice dev);
/* The current context's device (after te_cuda_need_ctx). */
tecore_result_t te_cuda_current_device(CUdevice *dev);
/* dev's compute capability as major * 10 + minor, read once per device. */
tecore_result_t te_cuda_device_cc(CUdevice dev, int *cc);
/* Its multiprocessor count, read once per device like the capability. */
tecore_result_t te_cuda_device_sms(CUdevice dev, int *sms);
/* The CUkernel of registered kernel k in module library lib, looked up
 * once (cuda_kernel.c). */
struct te_kernel_entry;
tecore_result_t te_cuda_kernel_handle(struct te_kernel_entry *k, CUlibrary lib, CUkernel *out);
/* ordinal -> CUdevice with a message naming the ordinal. */
tecore_result_t te_cuda_device(int ordinal, CUdevice *dev);

/* TECORE_SUCCESS when dev can create and export fabric handles
 * (CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED), else
 * TECORE_ERR_NOT_SUPPORTED saying so (cuda_fabric.c). */
tecore_result_t te_cuda_fabric_supported(CUdevice dev);

/* NVLink links from device a (PCI bus id string) to the GPU at
 * domain:bus:device, or -1 when NVML is unavailable (cuda_nvml.c). */
int te_cuda_nvlink_count(const char *pci_bus_id_a, int domain_b, int bus_b, int device_b);

/* ---- the ops ------------------------------------------------------------
 * te_cuda_<op> for every op of TE_DEVICE_OPS (device_ops.h), by file:
 * cuda_driver.c (init, driver_version), cuda_device.c (device_*, ctx_*),
 * cuda_memory.c (mem_*, memcpy_*, memset_async), cuda_stream.c (stream_*,
 * event_*, stream memory ops), cuda_kernel.c (kernel_*), cuda_graph.c
 * (capture, graph_* of whole graphs), cuda_graph_node.c (capture to a
 * graph, graph nodes), cuda_vmm.c (vmm_*), cuda_fabric.c (vmm_*_fabric),
 * cuda_multicast.c (mc_*),
 * cuda_gemm.c (gemm: cuBLASLt, loaded by cuda_gemm_load.c). */
TE_DEVICE_OPS(TE_DEVICE_OP_PROTO, cuda)

#endif
