/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_mc.c -- multicast objects (NVLink SHARP) emulated on vdev over the
 * bound unicast memory.  No hardware is involved, so creating one is
 * allowed whatever NCCL_NVLS_ENABLE says.
 *
 * A multicast object is a small description in a memfd, mapped shared by
 * every process that created or imported it: its size, the devices added
 * (keyed by process and ordinal, since every vdev process has a device 0)
 * and the bindings.  A binding names the binding process, a descriptor
 * that process keeps open on the member's memfd, and the offsets, so any
 * process can open the member through /proc/<pid>/fd/<fd> and map it.
 * Mapping a multicast handle with vmm_map reserves an address range; a
 * vdev comm kernel turns an address in it into the member addresses with
 * tecore_mc_members (te_vdev_mc_members), the way a multimem instruction
 * reaches every member.
 *
 * All local state is under te_vdev_vmm_lock; the shared description has its
 * own spinlock (processes share it). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include "vdev/vdev.h"
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MC_MAGIC 0x7464766d63647363ull /* "tdvmcdsc" */
#define MC_VERSION 1u
#define MC_MAX_DEVICES 64
#define MC_MAX_BINDS 256

struct mc_dev {
  int32_t pid, ordinal;
};

struct mc_bind {
  uint32_t live;
  int32_t pid;                    /* the binding process */
  int32_t fd;                     /* its descriptor on the member's memfd */
  int32_t ordinal;                /* its current device when it bound */
  uint64_t gen;                   /* changes whenever the slot is reused */
  uint64_t mc_offset, mem_offset, bytes;
  uint64_t mem_bytes;             /* the member memfd's size */
};

/* Shared between processes: fixed layout, no pointers. */
struct mc_desc {
  uint64_t magic;
  uint32_t version;
  uint32_t lock;                  /* spinlock */
  uint64_t bytes;
  int32_t ndevices;
  uint32_t flags;
  uint64_t gen_counter;
  uint32_t ndev;
  struct mc_dev devs[MC_MAX_DEVICES];
  struct mc_bind binds[MC_MAX_BINDS];
};

/* This process's view of one multicast object. */
struct mc {
  int desc_fd;
  struct mc_desc *desc;
  int local_fd[MC_MAX_BINDS];     /* our open member fds, for slots we bound */
  struct {
    uint64_t gen;
    void *base;
    size_t len;
  } cache[MC_MAX_BINDS];          /* member mappings made by te_vdev_mc_members */
};

static void desc_lock(struct mc_desc *d) {
  while (__atomic_exchange_n(&d->lock, 1u, __ATOMIC_ACQUIRE)) sched_yield();
}

static void desc_unlock(struct mc_desc *d) { __atomic_store_n(&d->lock, 0u, __ATOMIC_RELEASE); }

static struct mc *mc_get_locked(uint64_t h, const char *fn, tecore_result_t *r) {
  struct mc *m = te_vdev_handle_get_locked(h, VDEV_HANDLE_MC);
  if (!m)
    *r = TE_ERR(TECORE_ERR_INVALID, "%s: 0x%llx is not a live vdev multicast handle", fn,
                (unsigned long long)h);
  return m;
}

tecore_result_t te_vdev_mc_size_locked(uint64_t handle, size_t *bytes, const char *fn) {
  tecore_result_t r = TECORE_SUCCESS;
  struct mc *m = mc_get_locked(handle, fn, &r);
  if (m) *bytes = m->desc->bytes;
  return r;
}

static void drop_cache(struct mc *m, int slot) {
  if (m->cache[slot].base) munmap(m->cache[slot].base, m->cache[slot].len);
  m->cache[slot].base = NULL;
  m->cache[slot].gen = 0;
}

/* Wraps a mapped description in a local object and a handle. */
static tecore_result_t mc_open(int desc_fd, struct mc_desc *desc, uint64_t *out, const char *fn) {
  struct mc *m = calloc(1, sizeof *m);
  if (!m) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  m->desc_fd = desc_fd;
  m->desc = desc;
  for (int i = 0; i < MC_MAX_BINDS; i++) m->local_fd[i] = -1;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  uint64_t h = te_vdev_handle_new_locked(VDEV_HANDLE_MC, m);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (!h) {
    free(m);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *out = h;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mc_granularity(size_t bytes, int ndevices, size_t *granularity) {
  (void)bytes;
  (void)ndevices;
  *granularity = VDEV_GRANULARITY;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mc_create(size_t bytes, int ndevices, unsigned flags,
                                  tecore_mc_handle_t *mc) {
  static const char fn[] = "vdev mc_create";
  if (flags != 0) return TE_ERR(TECORE_ERR_INVALID, "%s: flags must be 0 (got 0x%x)", fn, flags);
  if (ndevices < 1 || ndevices > MC_MAX_DEVICES)
    return TE_ERR(TECORE_ERR_INVALID, "%s: ndevices %d outside [1, %d]", fn, ndevices,
                  MC_MAX_DEVICES);
  if (!bytes || bytes % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: bytes %zu is not a multiple of the granularity %zu",
                  fn, bytes, VDEV_GRANULARITY);
  int fd = memfd_create("te-vdev-mc", MFD_CLOEXEC);
  if (fd < 0) return TE_ERR(TECORE_ERR_SYSTEM, "%s: memfd_create failed", fn);
  struct mc_desc *d = MAP_FAILED;
  if (ftruncate(fd, sizeof *d) == 0)
    d = mmap(NULL, sizeof *d, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (d == MAP_FAILED) {
    tecore_result_t r = TE_ERR(TECORE_ERR_SYSTEM, "%s: cannot map the description", fn);
    close(fd);
    return r;
  }
  /* the memfd starts zeroed: only the header needs writing */
  d->bytes = bytes;
  d->ndevices = ndevices;
  d->flags = flags;
  d->version = MC_VERSION;
  __atomic_store_n(&d->magic, MC_MAGIC, __ATOMIC_RELEASE);
  tecore_result_t r = mc_open(fd, d, mc, fn);
  if (r != TECORE_SUCCESS) {
    munmap(d, sizeof *d);
    close(fd);
  }
  return r;
}

tecore_result_t te_vdev_mc_add_device(tecore_mc_handle_t h, int ordinal) {
  static const char fn[] = "vdev mc_add_device";
  if (ordinal < 0 || ordinal >= te_vdev_ndevices())
    return TE_ERR(TECORE_ERR_INVALID, "%s: device ordinal %d outside [0, %d)", fn, ordinal,
                  te_vdev_ndevices());
  tecore_result_t r = TECORE_SUCCESS;
  int32_t pid = (int32_t)getpid();
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct mc *m = mc_get_locked(h, fn, &r);
  if (m) {
    struct mc_desc *d = m->desc;
    desc_lock(d);
    for (uint32_t i = 0; i < d->ndev && r == TECORE_SUCCESS; i++)
      if (d->devs[i].pid == pid && d->devs[i].ordinal == ordinal)
        r = TE_ERR(TECORE_ERR_INVALID, "%s: device %d was already added", fn, ordinal);
    if (r == TECORE_SUCCESS && d->ndev >= (uint32_t)d->ndevices)
      r = TE_ERR(TECORE_ERR_INVALID, "%s: the object was created for %d devices, all added", fn,
                 d->ndevices);
    if (r == TECORE_SUCCESS) d->devs[d->ndev++] = (struct mc_dev){.pid = pid, .ordinal = ordinal};
    desc_unlock(d);
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

/* Binds memory of the caller's current device (the driver's rule). */
tecore_result_t te_vdev_mc_bind_mem(tecore_mc_handle_t h, size_t mc_offset,
                                    tecore_vmm_handle_t mem, size_t mem_offset, size_t bytes) {
  static const char fn[] = "vdev mc_bind_mem";
  if (!bytes || bytes % VDEV_GRANULARITY || mc_offset % VDEV_GRANULARITY ||
      mem_offset % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: mc_offset %zu, mem_offset %zu and bytes %zu must be multiples of %zu", fn,
                  mc_offset, mem_offset, bytes, VDEV_GRANULARITY);
  int ordinal = te_vdev_ctx_current()->ordinal;
  int32_t pid = (int32_t)getpid();
  tecore_result_t r = TECORE_SUCCESS;
  int mem_fd = -1, dup_fd = -1;
  size_t mem_bytes = 0;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct mc *m = mc_get_locked(h, fn, &r);
  if (!m) goto out;
  TE_CHECK_GOTO(te_vdev_phys_fd_locked(mem, &mem_fd, &mem_bytes, fn), r, out);
  struct mc_desc *d = m->desc;
  if (mc_offset > d->bytes || bytes > d->bytes - mc_offset) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: mc_offset %zu + bytes %zu exceed the object's %llu", fn,
               mc_offset, bytes, (unsigned long long)d->bytes);
    goto out;
  }
  if (mem_offset > mem_bytes || bytes > mem_bytes - mem_offset) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: mem_offset %zu + bytes %zu exceed the allocation's %zu",
               fn, mem_offset, bytes, mem_bytes);
    goto out;
  }
  dup_fd = fcntl(mem_fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) {
    r = TE_ERR(TECORE_ERR_SYSTEM, "%s: dup failed", fn);
    goto out;
  }
  desc_lock(d);
  int added = 0, slot = -1;
  for (uint32_t i = 0; i < d->ndev; i++)
    added |= d->devs[i].pid == pid && d->devs[i].ordinal == ordinal;
  for (int i = 0; i < MC_MAX_BINDS && r == TECORE_SUCCESS; i++) {
    struct mc_bind *b = &d->binds[i];
    if (!b->live) {
      if (slot < 0) slot = i;
    } else if (b->pid == pid && b->ordinal == ordinal && mc_offset < b->mc_offset + b->bytes &&
               b->mc_offset < mc_offset + bytes) {
      r = TE_ERR(TECORE_ERR_INVALID, "%s: device %d already has memory bound at mc offset %llu",
                 fn, ordinal, (unsigned long long)b->mc_offset);
    }
  }
  if (r == TECORE_SUCCESS && !added)
    r = TE_ERR(TECORE_ERR_INVALID, "%s: device %d (current) was not added with mc_add_device", fn,
               ordinal);
  if (r == TECORE_SUCCESS && slot < 0)
    r = TE_ERR(TECORE_ERR_NOMEM, "%s: more than %d bindings", fn, MC_MAX_BINDS);
  if (r == TECORE_SUCCESS) {
    d->binds[slot] = (struct mc_bind){.live = 1, .pid = pid, .fd = dup_fd, .ordinal = ordinal,
                                      .gen = ++d->gen_counter, .mc_offset = mc_offset,
                                      .mem_offset = mem_offset, .bytes = bytes,
                                      .mem_bytes = mem_bytes};
    m->local_fd[slot] = dup_fd;
    dup_fd = -1;
  }
  desc_unlock(d);
out:
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (dup_fd >= 0) close(dup_fd);
  return r;
}

/* Frees our binding in a slot (desc locked). */
static void unbind_slot(struct mc *m, int slot) {
  m->desc->binds[slot].live = 0;
  if (m->local_fd[slot] >= 0) close(m->local_fd[slot]);
  m->local_fd[slot] = -1;
  drop_cache(m, slot);
}

tecore_result_t te_vdev_mc_unbind(tecore_mc_handle_t h, int ordinal, size_t mc_offset,
                                  size_t bytes) {
  static const char fn[] = "vdev mc_unbind";
  tecore_result_t r = TECORE_SUCCESS;
  int32_t pid = (int32_t)getpid();
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct mc *m = mc_get_locked(h, fn, &r);
  if (m) {
    int found = 0;
    desc_lock(m->desc);
    for (int i = 0; i < MC_MAX_BINDS; i++) {
      struct mc_bind *b = &m->desc->binds[i];
      if (b->live && b->pid == pid && b->ordinal == ordinal && b->mc_offset == mc_offset &&
          b->bytes == bytes && m->local_fd[i] >= 0) {
        unbind_slot(m, i);
        found++;
      }
    }
    desc_unlock(m->desc);
    if (!found)
      r = TE_ERR(TECORE_ERR_INVALID, "%s: no binding of device %d at mc offset %zu (+%zu)", fn,
                 ordinal, mc_offset, bytes);
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

/* This process lets go: its bindings end, its mappings of members go. */
tecore_result_t te_vdev_mc_release(tecore_mc_handle_t h) {
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct mc *m = te_vdev_handle_del_locked(h, VDEV_HANDLE_MC);
  if (m) {
    desc_lock(m->desc);
    for (int i = 0; i < MC_MAX_BINDS; i++)
      if (m->local_fd[i] >= 0) unbind_slot(m, i);
    desc_unlock(m->desc);
    for (int i = 0; i < MC_MAX_BINDS; i++) drop_cache(m, i);
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (!m)
    return TE_ERR(TECORE_ERR_INVALID, "vdev mc_release: 0x%llx is not a live multicast handle",
                  (unsigned long long)h);
  munmap(m->desc, sizeof *m->desc);
  close(m->desc_fd);
  free(m);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mc_export_fd(tecore_mc_handle_t h, int *fd) {
  static const char fn[] = "vdev mc_export_fd";
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct mc *m = mc_get_locked(h, fn, &r);
  if (m) {
    int d = fcntl(m->desc_fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) r = TE_ERR(TECORE_ERR_SYSTEM, "%s: dup failed", fn);
    else *fd = d;
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

tecore_result_t te_vdev_mc_import_fd(int fd, tecore_mc_handle_t *mc) {
  static const char fn[] = "vdev mc_import_fd";
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (size_t)st.st_size != sizeof(struct mc_desc))
    return TE_ERR(TECORE_ERR_INVALID, "%s: fd %d is not an exported vdev multicast object", fn, fd);
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return TE_ERR(TECORE_ERR_SYSTEM, "%s: dup of fd %d failed", fn, fd);
  struct mc_desc *d = mmap(NULL, sizeof *d, PROT_READ | PROT_WRITE, MAP_SHARED, own, 0);
  if (d == MAP_FAILED) {
    close(own);
    return TE_ERR(TECORE_ERR_SYSTEM, "%s: cannot map the description", fn);
  }
  if (__atomic_load_n(&d->magic, __ATOMIC_ACQUIRE) != MC_MAGIC || d->version != MC_VERSION) {
    munmap(d, sizeof *d);
    close(own);
    return TE_ERR(TECORE_ERR_INVALID, "%s: fd %d is not an exported vdev multicast object", fn, fd);
  }
  tecore_result_t r = mc_open(own, d, mc, fn);
  if (r != TECORE_SUCCESS) {
    munmap(d, sizeof *d);
    close(own);
  }
  return r;
}

/* ---- member resolution for vdev comm kernels ----------------------------------- */

/* Maps a member's memfd in this process (vmm lock held). */
static void *map_member(struct mc *m, int slot, const struct mc_bind *b) {
  if (m->cache[slot].base && m->cache[slot].gen == b->gen) return m->cache[slot].base;
  drop_cache(m, slot);
  int fd = -1, opened = 0;
  if (b->pid == (int32_t)getpid()) {
    fd = m->local_fd[slot] >= 0 ? m->local_fd[slot] : b->fd;
  } else {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)b->pid, (int)b->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    opened = 1;
  }
  void *p = MAP_FAILED;
  if (fd >= 0) p = mmap(NULL, b->mem_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (opened && fd >= 0) close(fd);
  if (p == MAP_FAILED) {
    TE_WARN(TECORE_SUBSYS_COMM, "vdev: cannot map multicast member of process %d (fd %d): %s",
            (int)b->pid, (int)b->fd, strerror(errno));
    return NULL;
  }
  m->cache[slot].base = p;
  m->cache[slot].len = b->mem_bytes;
  m->cache[slot].gen = b->gen;
  return p;
}

tecore_result_t te_vdev_mc_members(tecore_devptr_t mc_va, tecore_devptr_t *members, int max,
                                   int *count) {
  uint64_t h;
  size_t off;
  int n = 0;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct mc *m = NULL;
  if (te_vdev_mc_mapping_locked(mc_va, &h, &off)) m = te_vdev_handle_get_locked(h, VDEV_HANDLE_MC);
  if (!m) {
    pthread_mutex_unlock(&te_vdev_vmm_lock);
    return TE_ERR(TECORE_ERR_INVALID,
                  "tecore_mc_members: 0x%llx is not in a mapping of a multicast handle",
                  (unsigned long long)mc_va);
  }
  /* snapshot the live bindings covering off, ordered by (ordinal, slot):
   * the same order in every process, so every rank reduces alike */
  static __thread int slots[MC_MAX_BINDS];
  static __thread struct mc_bind snap[MC_MAX_BINDS];
  int ns = 0;
  desc_lock(m->desc);
  for (int i = 0; i < MC_MAX_BINDS; i++) {
    const struct mc_bind *b = &m->desc->binds[i];
    if (!b->live || off < b->mc_offset || off >= b->mc_offset + b->bytes) continue;
    int j = ns++;
    while (j > 0 && snap[j - 1].ordinal > b->ordinal) {
      snap[j] = snap[j - 1];
      slots[j] = slots[j - 1];
      j--;
    }
    snap[j] = *b;
    slots[j] = i;
  }
  desc_unlock(m->desc);
  for (int k = 0; k < ns; k++) {
    unsigned char *base = map_member(m, slots[k], &snap[k]);
    if (!base) continue;
    if (n < max)
      members[n] = (tecore_devptr_t)(uintptr_t)(base + snap[k].mem_offset + (off - snap[k].mc_offset));
    n++;
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  *count = n;
  return TECORE_SUCCESS;
}
