/* vdev_fabric.c -- fabric handles (multi-node NVLink) emulated on vdev.
 * SPDX-License-Identifier: Apache-2.0
 *
 * On a GPU a fabric handle is 64 opaque bytes that let a process on
 * another node of the NVLink domain import an allocation; it travels as
 * plain data, never as a file descriptor.  vdev's "nodes" are processes of
 * one machine (libtecomm gives ranks different node ids to play them), so
 * the handle names the exporting process, its descriptor on the
 * allocation's memfd and that memfd's identity (device, inode, size): the
 * importer opens /proc/<pid>/fd/<fd> and checks the identity, so a
 * descriptor number reused after the allocation went is refused instead
 * of mapping someone else's memory.  The handle also carries the
 * machine's boot id: two identical guests (t/vm runs two) can have the
 * same pid, descriptor and even inode numbers, and a handle from the
 * other machine must be refused, not mapped.  The exporter must keep the
 * allocation until every importer has imported it (as the driver
 * requires of a fabric export). */
#include "vdev/vdev.h"
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FAB_MAGIC 0x6372626166766474ull /* "tdvfabrc" */

/* The 64 bytes of a vdev fabric handle. */
struct fab {
  uint64_t magic;
  int32_t pid, fd;
  uint64_t dev, ino, bytes;
  uint64_t boot;                  /* hash of this machine's boot id */
  uint64_t pad_[2];
};

/* FNV-1a of /proc/sys/kernel/random/boot_id (0 if unreadable). */
static uint64_t boot_hash(void) {
  char id[64] = "";
  int fd = open("/proc/sys/kernel/random/boot_id", O_RDONLY | O_CLOEXEC);
  ssize_t n = fd >= 0 ? read(fd, id, sizeof id - 1) : -1;
  if (fd >= 0) close(fd);
  if (n <= 0) return 0;
  uint64_t h = 0xcbf29ce484222325ull;
  for (ssize_t i = 0; i < n; i++) h = (h ^ (unsigned char)id[i]) * 0x100000001b3ull;
  return h;
}
_Static_assert(sizeof(struct fab) == sizeof(struct tecore_fabric_handle), "fabric handle size");

tecore_result_t te_vdev_vmm_export_fabric(tecore_vmm_handle_t handle,
                                          struct tecore_fabric_handle *fabric) {
  static const char fn[] = "vdev vmm_export_fabric";
  int fd = -1;
  size_t bytes = 0;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  tecore_result_t r = te_vdev_phys_fd_locked(handle, &fd, &bytes, fn);
  if (r == TECORE_SUCCESS && !(te_vdev_phys_flags_locked(handle) & TECORE_VMM_EXPORT_FABRIC))
    r = TE_ERR(TECORE_ERR_INVALID, "%s: handle 0x%llx was not created with TECORE_VMM_EXPORT_FABRIC",
               fn, (unsigned long long)handle);
  struct stat st;
  if (r == TECORE_SUCCESS && fstat(fd, &st) != 0)
    r = TE_ERR(TECORE_ERR_SYSTEM, "%s: fstat of the allocation failed", fn);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (r != TECORE_SUCCESS) return r;
  struct fab f = {.magic = FAB_MAGIC, .pid = (int32_t)getpid(), .fd = fd,
                  .dev = (uint64_t)st.st_dev, .ino = (uint64_t)st.st_ino, .bytes = bytes,
                  .boot = boot_hash()};
  memcpy(fabric->data, &f, sizeof f);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_vmm_import_fabric(const struct tecore_fabric_handle *fabric,
                                          tecore_vmm_handle_t *handle) {
  static const char fn[] = "vdev vmm_import_fabric";
  struct fab f;
  memcpy(&f, fabric->data, sizeof f);
  if (f.magic != FAB_MAGIC || f.pid <= 0 || f.fd < 0 || !f.bytes || f.bytes % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: not a vdev fabric handle", fn);
  if (f.boot != boot_hash())
    return TE_ERR(TECORE_ERR_NOT_SUPPORTED,
                  "%s: the handle comes from another machine (vdev emulates fabric handles "
                  "between processes of one machine)", fn);
  char path[64];
  snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)f.pid, (int)f.fd);
  int fd = open(path, O_RDWR | O_CLOEXEC);
  if (fd < 0)
    return TE_ERR(TECORE_ERR_INVALID, "%s: the exporting process %d no longer holds the allocation",
                  fn, (int)f.pid);
  struct stat st;
  if (fstat(fd, &st) != 0 || (uint64_t)st.st_dev != f.dev || (uint64_t)st.st_ino != f.ino ||
      (uint64_t)st.st_size != f.bytes) {
    close(fd);
    return TE_ERR(TECORE_ERR_INVALID, "%s: process %d's allocation is gone (its descriptor now "
                  "names something else)", fn, (int)f.pid);
  }
  return te_vdev_phys_adopt(fd, (size_t)f.bytes, TECORE_VMM_EXPORT_FABRIC, handle, fn);
}
