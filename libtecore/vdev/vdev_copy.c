/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_copy.c -- copies and memsets on vdev: async ones are stream ops (or
 * captured nodes); the synchronous copy runs on the calling thread.  With
 * unified addressing any host or device address is accepted. */
#include "vdev/vdev.h"
#include <string.h>

tecore_result_t te_vdev_memcpy_async(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes,
                                     tecore_stream_t stream) {
  struct vdev_op op = {.type = VDEV_OP_MEMCPY,
                       .u.copy = {.dst = dst, .src = src, .bytes = bytes}};
  return te_vdev_submit(stream, &op, "vdev memcpy_async");
}

/* A synchronous copy is issued on the legacy default stream, as the
 * driver's cuMemcpy is: it runs after earlier work of blocking streams. */
tecore_result_t te_vdev_memcpy_sync(tecore_devptr_t dst, tecore_devptr_t src, size_t bytes) {
  TE_CHECK(te_vdev_memcpy_async(dst, src, bytes, NULL));
  return te_vdev_stream_synchronize(NULL);
}

tecore_result_t te_vdev_memset_async(tecore_devptr_t dst, uint32_t value, unsigned elem_size,
                                     size_t count, tecore_stream_t stream) {
  if (elem_size != 1 && elem_size != 2 && elem_size != 4)
    return TE_ERR(TECORE_ERR_INVALID, "vdev memset_async: element size %u is not 1, 2 or 4",
                  elem_size);
  uint32_t mask = elem_size == 4 ? 0xffffffffu : (1u << (8 * elem_size)) - 1;
  struct vdev_op op = {
      .type = VDEV_OP_MEMSET,
      .u.set = {.dst = dst, .value = value & mask, .elem = elem_size, .count = count}};
  return te_vdev_submit(stream, &op, "vdev memset_async");
}
