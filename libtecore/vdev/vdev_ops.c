/* vdev_ops.c -- the vdev backend's ops table (the test VM's virtual GPU in
 * plain C), generated from the one op list (TE_DEVICE_OPS in
 * device_ops.h).  Each op lives in the file vdev.h names. */
#include "vdev/vdev.h"

/* The kernels' C implementations are linked in: nothing to resolve per
 * context. */
tecore_result_t te_vdev_kernel_prepare(struct te_kernel_entry *k, struct te_kernel_module *mod) {
  (void)k;
  (void)mod;
  return TECORE_SUCCESS;
}

TE_DEVICE_OPS_TABLE(vdev, TECORE_BACKEND_VDEV);
