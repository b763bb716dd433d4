/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_ops.c -- the vdev backend's ops table (the test VM's virtual GPU in
 * plain C), generated from the one op list (TE_DEVICE_OPS in
 * device_ops.h).  Each op lives in the file vdev.h names. */
#include "vdev/vdev.h"


TE_DEVICE_OPS_TABLE(vdev, TECORE_BACKEND_VDEV);
