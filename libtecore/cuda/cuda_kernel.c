/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_kernel.c -- the cuda backend's kernels: a registered table's
 * embedded fatbin becomes a context-independent CUlibrary
 * (cuLibraryLoadData), each kernel a CUkernel looked up on its first
 * launch, and launches go through cuLaunchKernelEx in the current context
 * (recorded as a kernel node when the stream captures). */
#include "cuda_backend.h"

#include <stdio.h>
#include <string.h>

/* The static shared memory limit without opting in; above it the kernel's
 * dynamic shared memory maximum must be raised first. */
#define TE_CUDA_DEFAULT_SHARED_MAX (48u * 1024u)

tecore_result_t te_cuda_kernel_module_load(struct te_kernel_module *mod) {
  const struct tecore_kernel_table *t = mod->table;
  if (mod->backend_handle) return TECORE_SUCCESS;
  if (!t->fatbin || t->fatbin_bytes == 0)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED, "kernel module %s: built without CUDA kernels",
                  t->module ? t->module : "(unnamed)");
  CUlibrary lib = NULL;
  TE_CHECK(TE_CU(cuLibraryLoadData, &lib, t->fatbin, NULL, NULL, 0, NULL, NULL, 0));
  mod->backend_handle = lib;
  TE_INFO(TECORE_SUBSYS_KERNEL, "cuda: loaded kernel module %s (%zu bytes of fatbin)",
          t->module ? t->module : "(unnamed)", t->fatbin_bytes);
  return TECORE_SUCCESS;
}

/* Re-states the thread's detail with the kernel's name in front. */
static tecore_result_t kernel_fail(tecore_result_t res, const struct te_kernel_entry *k,
                                   int line) {
  char prev[384];
  snprintf(prev, sizeof prev, "%s", tecore_last_error());
  return te_error_set(res, __FILE__, line, "kernel %s (module %s): %s", k->def->name,
                      k->table && k->table->module ? k->table->module : "?", prev);
}

/* The CUkernel for k, looked up once.  Two threads racing here both get
 * the same handle from the driver, so a plain atomic publish suffices. */
tecore_result_t te_cuda_kernel_handle(struct te_kernel_entry *k, CUlibrary lib, CUkernel *out) {
  CUkernel kern = (CUkernel)__atomic_load_n(&k->backend_handle, __ATOMIC_ACQUIRE);
  if (!kern) {
    TE_CHECK(TE_CU(cuLibraryGetKernel, &kern, lib, k->def->name));
    __atomic_store_n(&k->backend_handle, (void *)kern, __ATOMIC_RELEASE);
  }
  *out = kern;
  return TECORE_SUCCESS;
}

/* Loads k's code into the current context now rather than at its first
 * launch: a load waits for the context's streams, so a first launch while
 * another stream sits in cuStreamWaitValue (released later by the host or
 * by this very launch's successors) would never return. */
tecore_result_t te_cuda_kernel_prepare(struct te_kernel_entry *k, struct te_kernel_module *mod) {
  CUlibrary lib = mod->backend_handle;
  CUkernel kern = NULL;
  CUfunction fn = NULL;
  if (!lib)
    return TE_ERR(TECORE_ERR_INTERNAL, "kernel %s: module %s is not loaded", k->def->name,
                  mod->table && mod->table->module ? mod->table->module : "?");
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(te_cuda_kernel_handle(k, lib, &kern));
  TE_CHECK(TE_CU(cuKernelGetFunction, &fn, kern));
  return TECORE_SUCCESS;
}

/* 1 when dev runs programmatic dependent launches (compute capability
 * 9.0 and newer): below that the attribute is left off and the launch is
 * an ordinary one, which is what the flag allows. */
static int pdl_capable(CUdevice dev) {
  int cc = 0;
  return te_cuda_device_cc(dev, &cc) == TECORE_SUCCESS && cc >= 90;
}

tecore_result_t te_cuda_kernel_launch(struct te_kernel_entry *k, struct te_kernel_module *mod,
                                      const struct tecore_launch_cfg *cfg, void *const *args,
                                      unsigned flags, tecore_stream_t stream) {
  tecore_result_t res;
  CUlibrary lib = mod->backend_handle;
  CUkernel kern = NULL;
  if (!lib)
    return TE_ERR(TECORE_ERR_INTERNAL, "kernel %s: module %s is not loaded", k->def->name,
                  mod->table && mod->table->module ? mod->table->module : "?");
  TE_CHECK_GOTO(te_cuda_need_ctx(), res, fail);
  TE_CHECK_GOTO(te_cuda_kernel_handle(k, lib, &kern), res, fail);

  if (cfg->shared_bytes > TE_CUDA_DEFAULT_SHARED_MAX) {
    /* Per device: the attribute is set for the current context's device.
     * Cheap, and not a stream operation, so legal while capturing. */
    CUdevice dev;
    TE_CHECK_GOTO(te_cuda_current_device(&dev), res, fail);
    TE_CHECK_GOTO(TE_CU(cuKernelSetAttribute, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        (int)cfg->shared_bytes, kern, dev),
                  res, fail);
  }

  CUlaunchConfig lc = {
      .gridDimX = cfg->grid[0], .gridDimY = cfg->grid[1], .gridDimZ = cfg->grid[2],
      .blockDimX = cfg->block[0], .blockDimY = cfg->block[1], .blockDimZ = cfg->block[2],
      .sharedMemBytes = cfg->shared_bytes, .hStream = stream, .attrs = NULL, .numAttrs = 0};
  CUlaunchAttribute attr[1];
  if (flags & TECORE_LAUNCH_PDL) {
    CUdevice dev;
    TE_CHECK_GOTO(te_cuda_current_device(&dev), res, fail);
    if (pdl_capable(dev)) {
      /* The launch may begin once the stream's previous kernel has
       * triggered (griddepcontrol.launch_dependents) or ended; captured,
       * the edge from that kernel's node is a programmatic one. */
      memset(attr, 0, sizeof attr);
      attr[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
      attr[0].value.programmaticStreamSerializationAllowed = 1;
      lc.attrs = attr;
      lc.numAttrs = 1;
    }
  }
  /* A CUkernel passes as a CUfunction: the driver resolves it for the
   * current context.  The driver only reads args. */
  TE_CHECK_GOTO(TE_CU(cuLaunchKernelEx, &lc, (CUfunction)kern, (void **)args, NULL), res, fail);
  return TECORE_SUCCESS;
fail:
  return kernel_fail(res, k, __LINE__);
}
