/* cuda_fabric.c -- the cuda backend's fabric handles (multi-node NVLink).
 * SPDX-License-Identifier: Apache-2.0
 *
 * An allocation made with TECORE_VMM_EXPORT_FABRIC exports a
 * CUmemFabricHandle (64 bytes) that a process on another node of the
 * NVLink domain imports.  Both need the device's fabric support and an
 * IMEX channel (/dev/nvidia-caps-imex-channels); without IMEX the driver
 * refuses the export or import (CUDA_ERROR_NOT_PERMITTED or
 * NOT_SUPPORTED), which libtecomm takes as "no MNNVL here".  The driver
 * entry points are the VMM ones cuda_vmm.c already loads. */
#include "cuda_backend.h"
#include <string.h>

_Static_assert(sizeof(CUmemFabricHandle) == sizeof(struct tecore_fabric_handle),
               "CUmemFabricHandle is 64 bytes");

tecore_result_t te_cuda_fabric_supported(CUdevice dev) {
  int fabric = 0;
  TE_CHECK(TE_CU(cuDeviceGetAttribute, &fabric, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED,
                 dev));
  if (!fabric)
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                  "fabric handles: the device does not support them "
                  "(CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED is 0)");
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_export_fabric(tecore_vmm_handle_t handle,
                                          struct tecore_fabric_handle *fabric) {
  CUmemFabricHandle fh;
  memset(&fh, 0, sizeof fh);
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemExportToShareableHandle, &fh, (CUmemGenericAllocationHandle)handle,
                 CU_MEM_HANDLE_TYPE_FABRIC, 0));
  memcpy(fabric->data, &fh, sizeof fh);
  return TECORE_SUCCESS;
}

tecore_result_t te_cuda_vmm_import_fabric(const struct tecore_fabric_handle *fabric,
                                          tecore_vmm_handle_t *handle) {
  CUmemGenericAllocationHandle h = 0;
  CUmemFabricHandle fh;
  memcpy(&fh, fabric->data, sizeof fh);
  TE_CHECK(te_cuda_need_ctx());
  TE_CHECK(TE_CU(cuMemImportFromShareableHandle, &h, &fh, CU_MEM_HANDLE_TYPE_FABRIC));
  *handle = (tecore_vmm_handle_t)h;
  return TECORE_SUCCESS;
}
