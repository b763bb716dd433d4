/* SPDX-License-Identifier: Apache-2.0 */
/* gpudirect.c -- whether an RDMA NIC could read and write a device's
 * memory directly (GPUDirect RDMA), for te-info, the verbs path's log and
 * tecomm_comm_describe.  Detected, never required: the verbs path stages
 * through page-locked host memory either way.
 *
 * Two ways exist on Linux, and either is enough: the nvidia-peermem
 * kernel module (or Mellanox's older nv_peer_mem), which lets
 * ibv_reg_mr take a device pointer, and dma-buf export of device memory
 * (cuMemGetHandleForAddressRange, the device's DMA_BUF_SUPPORTED
 * attribute: tecore_device_get_props), which ibv_reg_dmabuf_mr takes
 * without any module.  vdev's device memory is host memory: nothing to
 * detect. */
#include "base/tc_internal.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* The module that lets the RDMA stack pin device memory, if loaded. */
static const char *peermem_module(void) {
  if (access("/sys/module/nvidia_peermem", F_OK) == 0) return "nvidia-peermem";
  if (access("/sys/module/nv_peer_mem", F_OK) == 0) return "nv_peer_mem";
  return NULL;
}

TE_EXPORT tecomm_result_t tecomm_gpudirect(int device, int *possible, char *why, size_t len) {
  static const char fn[] = "tecomm_gpudirect";
  TC_ARG(possible, "%s: possible is NULL", fn);
  *possible = 0;
  TC_ARG(why || len == 0, "%s: why is NULL while len is %zu", fn, len);
  if (why) why[0] = '\0';
  int count = 0;
  TC_CORE(tecore_device_count(&count), fn);
  TC_ARG(device >= 0 && device < count, "%s: device %d is not an ordinal in [0, %d)", fn, device,
         count);
  tecore_backend_t be = TECORE_BACKEND_NONE;
  TC_CORE(tecore_backend(&be), fn);
  char line[160];
  if (be != TECORE_BACKEND_CUDA) {
    snprintf(line, sizeof line, "no: %s device memory is host memory (host staging)",
             tecore_backend_name(be));
  } else {
    struct tecore_device_props pr;
    memset(&pr, 0, sizeof pr);
    TC_CORE(tecore_device_get_props(device, &pr), fn);
    const char *mod = peermem_module();
    if (mod || pr.dma_buf) {
      *possible = 1;
      snprintf(line, sizeof line, "possible (%s%s%s%s), not used yet: host staging",
               mod ? mod : "", mod ? " loaded" : "", mod && pr.dma_buf ? ", " : "",
               pr.dma_buf ? "dma-buf export" : "");
    } else {
      snprintf(line, sizeof line, "no (neither nvidia-peermem loaded nor dma-buf export of "
               "device memory): host staging");
    }
  }
  if (why && len) snprintf(why, len, "%s", line);
  return TECOMM_SUCCESS;
}
