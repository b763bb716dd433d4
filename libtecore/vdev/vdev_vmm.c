/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_vmm.c -- virtual memory management on vdev, through memfd so that
 * processes share physical memory for real:
 *   reserve     mmap PROT_NONE (aligned), a range mappings go into
 *   create      memfd_create + ftruncate: a physical allocation
 *   map         mmap MAP_SHARED|MAP_FIXED of the memfd inside a reservation,
 *               still PROT_NONE: access faults until set_access, as on the
 *               driver
 *   set_access  mprotect read/write
 *   unmap       back to PROT_NONE reserved
 *   export_fd   a dup of the memfd (only for handles created exportable)
 *   import_fd   a new handle over a dup of a received fd
 * A multicast handle may be mapped too: its range stays reserved and
 * te_vdev_mc_members resolves addresses in it (vdev_mc.c).
 * Handles are ids in a table (unknown ones are refused, never followed). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memfd_create */
#endif
#include "vdev/vdev.h"
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sysinfo.h>
#include <unistd.h>

pthread_mutex_t te_vdev_vmm_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vdev_map vmm_handles; /* handle -> object (struct phys, or vdev_mc.c's) */
static uint64_t vmm_next_id = 1;

struct phys {
  int fd;
  size_t bytes;
  unsigned flags;                 /* TECORE_VMM_EXPORT_POSIX_FD, _FABRIC */
};

struct range {
  uintptr_t va;
  size_t bytes;
  uintptr_t span_base; /* the arena span holding it (0: an mmap of its own) */
  size_t span;
};

struct mapping {
  uintptr_t va;
  size_t bytes;
  uint64_t handle;                /* PHYS or MC */
  size_t offset;                  /* in the handle's memory */
};

static struct range *vmm_resv;
static size_t vmm_nresv, vmm_capresv;
static struct mapping *vmm_maps;
static size_t vmm_nmaps, vmm_capmaps;

/* ---- handle table ------------------------------------------------------------ */

uint64_t te_vdev_handle_new_locked(uint64_t tag, void *obj) {
  uint64_t h = tag | vmm_next_id;
  if (te_vdev_map_put(&vmm_handles, h, obj) != 0) return 0;
  vmm_next_id++; /* ids are never reused: a stale handle stays unknown */
  return h;
}

void *te_vdev_handle_get_locked(uint64_t handle, uint64_t tag) {
  if ((handle & VDEV_HANDLE_TAG_MASK) != tag) return NULL;
  return te_vdev_map_get(&vmm_handles, handle);
}

void *te_vdev_handle_del_locked(uint64_t handle, uint64_t tag) {
  if ((handle & VDEV_HANDLE_TAG_MASK) != tag) return NULL;
  return te_vdev_map_del(&vmm_handles, handle);
}

tecore_result_t te_vdev_phys_fd_locked(uint64_t handle, int *fd, size_t *bytes, const char *fn) {
  struct phys *p = te_vdev_handle_get_locked(handle, VDEV_HANDLE_PHYS);
  if (!p)
    return TE_ERR(TECORE_ERR_INVALID, "%s: 0x%llx is not a live vdev VMM allocation handle", fn,
                  (unsigned long long)handle);
  *fd = p->fd;
  *bytes = p->bytes;
  return TECORE_SUCCESS;
}

int te_vdev_mc_mapping_locked(uint64_t va, uint64_t *mc, size_t *mc_offset) {
  for (size_t i = 0; i < vmm_nmaps; i++) {
    struct mapping *m = &vmm_maps[i];
    if ((m->handle & VDEV_HANDLE_TAG_MASK) == VDEV_HANDLE_MC && va >= m->va &&
        va < m->va + m->bytes) {
      *mc = m->handle;
      *mc_offset = (size_t)(va - m->va) + m->offset;
      return 1;
    }
  }
  return 0;
}

/* ---- ranges ---------------------------------------------------------------------- */

static void *grow(void *arr, size_t *cap, size_t elem) {
  size_t ncap = *cap ? *cap * 2 : 16;
  void *n = realloc(arr, ncap * elem);
  if (n) *cap = ncap;
  return n;
}

static struct range *resv_containing(uintptr_t va, size_t bytes) {
  for (size_t i = 0; i < vmm_nresv; i++)
    if (va >= vmm_resv[i].va && va + bytes <= vmm_resv[i].va + vmm_resv[i].bytes)
      return &vmm_resv[i];
  return NULL;
}

static int overlaps(uintptr_t a, size_t an, uintptr_t b, size_t bn) {
  return a < b + bn && b < a + an;
}

static void drop_mapping(size_t i) { vmm_maps[i] = vmm_maps[--vmm_nmaps]; }

/* Puts [va, va+bytes) back to reserved, inaccessible, unbacked memory. */
static int restore_reserved(uintptr_t va, size_t bytes) {
  void *p = mmap((void *)va, bytes, PROT_NONE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE, -1, 0);
  return p == MAP_FAILED ? -1 : 0;
}

/* 1 when the mappings cover [va, va+bytes) without a gap. */
static int fully_mapped(uintptr_t va, size_t bytes) {
  uintptr_t cur = va, end = va + bytes;
  while (cur < end) {
    size_t i;
    for (i = 0; i < vmm_nmaps; i++)
      if (cur >= vmm_maps[i].va && cur < vmm_maps[i].va + vmm_maps[i].bytes) break;
    if (i == vmm_nmaps) return 0;
    cur = vmm_maps[i].va + vmm_maps[i].bytes;
  }
  return 1;
}

int te_vdev_vmm_check_range(uintptr_t p, size_t bytes) {
  pthread_mutex_lock(&te_vdev_vmm_lock);
  int r = 0;
  for (size_t i = 0; i < vmm_nresv && !r; i++)
    if (overlaps(vmm_resv[i].va, vmm_resv[i].bytes, p, bytes)) r = -1;
  if (r && fully_mapped(p, bytes)) r = 1;
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

/* The mapping holding p, grown over the mappings that abut it on either
 * side: what one access starting at p may legally reach. */
int te_vdev_vmm_range(uintptr_t p, uintptr_t *base, size_t *bytes) {
  pthread_mutex_lock(&te_vdev_vmm_lock);
  size_t i;
  for (i = 0; i < vmm_nmaps; i++)
    if (p >= vmm_maps[i].va && p - vmm_maps[i].va < vmm_maps[i].bytes) break;
  int found = i < vmm_nmaps;
  if (found) {
    uintptr_t lo = vmm_maps[i].va, hi = lo + vmm_maps[i].bytes;
    for (int grew = 1; grew;) {
      grew = 0;
      for (size_t j = 0; j < vmm_nmaps; j++) {
        uintptr_t a = vmm_maps[j].va, b = a + vmm_maps[j].bytes;
        if (b == lo) lo = a, grew = 1;
        else if (a == hi) hi = b, grew = 1;
      }
    }
    *base = lo;
    *bytes = hi - lo;
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return found;
}

/* ---- the ops ---------------------------------------------------------------------- */

tecore_result_t te_vdev_vmm_granularity(size_t *granularity, int recommended) {
  (void)recommended; /* minimum and recommended are the same here */
  *granularity = VDEV_GRANULARITY;
  return TECORE_SUCCESS;
}

/* A reservation's address space back to the arena (inaccessible, and
 * refused as freed device memory) or to the system. */
static void resv_give_back(const struct range *rg) {
  if (rg->span_base) te_vdev_arena_unreserve(rg->span_base, rg->span);
  else munmap((void *)rg->va, rg->bytes);
}

/* tecore_fini: the arena (with every reservation in it) is unmapped next;
 * the ones of their own go now. */
void te_vdev_vmm_fini(void) {
  pthread_mutex_lock(&te_vdev_vmm_lock);
  for (size_t i = 0; i < vmm_nresv; i++)
    if (!vmm_resv[i].span_base) munmap((void *)vmm_resv[i].va, vmm_resv[i].bytes);
  free(vmm_resv);
  vmm_resv = NULL;
  vmm_nresv = vmm_capresv = 0;
  free(vmm_maps);
  vmm_maps = NULL;
  vmm_nmaps = vmm_capmaps = 0;
  pthread_mutex_unlock(&te_vdev_vmm_lock);
}

tecore_result_t te_vdev_vmm_reserve(size_t bytes, size_t align, tecore_devptr_t *va) {
  static const char fn[] = "vdev vmm_reserve";
  if (!bytes || bytes % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: bytes %zu is not a multiple of %zu", fn, bytes,
                  VDEV_GRANULARITY);
  if (align & (align - 1))
    return TE_ERR(TECORE_ERR_INVALID, "%s: align %zu is not a power of 2", fn, align);
  if (align < VDEV_GRANULARITY) align = VDEV_GRANULARITY;
  if (bytes + align < bytes)
    return TE_ERR(TECORE_ERR_INVALID, "%s: bytes %zu is too large", fn, bytes);
  struct range rg = {0};
  uintptr_t base = te_vdev_arena_reserve(bytes, align, &rg.span_base, &rg.span);
  if (!base) {
    /* the arena is full (or small): address space of its own, which a
     * stale pointer may later find reused */
    size_t total = bytes + align;
    char *p = mmap(NULL, total, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED)
      return TE_ERR(TECORE_ERR_DEVICE_NOMEM, "%s: cannot reserve %zu bytes of address space", fn,
                    bytes);
    base = ((uintptr_t)p + align - 1) & ~(uintptr_t)(align - 1);
    if (base > (uintptr_t)p) munmap(p, base - (uintptr_t)p);
    uintptr_t end = (uintptr_t)p + total;
    if (end > base + bytes) munmap((void *)(base + bytes), end - (base + bytes));
  }
  rg.va = base;
  rg.bytes = bytes;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  if (vmm_nresv == vmm_capresv) {
    struct range *n = grow(vmm_resv, &vmm_capresv, sizeof *n);
    if (!n) {
      pthread_mutex_unlock(&te_vdev_vmm_lock);
      resv_give_back(&rg);
      return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
    }
    vmm_resv = n;
  }
  vmm_resv[vmm_nresv++] = rg;
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  *va = (tecore_devptr_t)base;
  return TECORE_SUCCESS;
}

/* Frees a whole reservation, which must have no mapping left (the driver
 * refuses to free a mapped range). */
tecore_result_t te_vdev_vmm_free_va(tecore_devptr_t va, size_t bytes) {
  pthread_mutex_lock(&te_vdev_vmm_lock);
  size_t i;
  for (i = 0; i < vmm_nresv; i++)
    if (vmm_resv[i].va == va && vmm_resv[i].bytes == bytes) break;
  if (i == vmm_nresv) {
    pthread_mutex_unlock(&te_vdev_vmm_lock);
    return TE_ERR(TECORE_ERR_INVALID,
                  "vdev vmm_free_va: [0x%llx, +%zu) is not a range returned by vmm_reserve",
                  (unsigned long long)va, bytes);
  }
  for (size_t m = 0; m < vmm_nmaps; m++)
    if (overlaps(vmm_maps[m].va, vmm_maps[m].bytes, va, bytes)) {
      pthread_mutex_unlock(&te_vdev_vmm_lock);
      return TE_ERR(TECORE_ERR_INVALID,
                    "vdev vmm_free_va: [0x%llx, +%zu) still has a mapping at 0x%llx (+%zu); "
                    "unmap it first",
                    (unsigned long long)va, bytes, (unsigned long long)vmm_maps[m].va,
                    vmm_maps[m].bytes);
    }
  struct range rg = vmm_resv[i];
  vmm_resv[i] = vmm_resv[--vmm_nresv];
  resv_give_back(&rg);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_vmm_create(size_t bytes, unsigned flags, tecore_vmm_handle_t *handle) {
  static const char fn[] = "vdev vmm_create";
  if (!bytes || bytes % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: bytes %zu is not a multiple of the granularity %zu",
                  fn, bytes, VDEV_GRANULARITY);
  if (flags & ~(TECORE_VMM_EXPORT_POSIX_FD | TECORE_VMM_EXPORT_FABRIC))
    return TE_ERR(TECORE_ERR_INVALID, "%s: unknown flags 0x%x", fn, flags);
  /* the device's memory is the host's: more fails, as on a GPU */
  struct sysinfo si;
  size_t total = sysinfo(&si) == 0 ? (size_t)si.totalram * si.mem_unit : (size_t)1 << 40;
  if (bytes > total)
    return TE_ERR(TECORE_ERR_DEVICE_NOMEM, "%s: %zu bytes exceed the device's %zu", fn, bytes,
                  total);
  int fd = memfd_create("te-vdev-vmm", MFD_CLOEXEC);
  if (fd < 0) return TE_ERR(TECORE_ERR_SYSTEM, "%s: memfd_create failed", fn);
  if (ftruncate(fd, (off_t)bytes) != 0) {
    tecore_result_t r = TE_ERR(TECORE_ERR_DEVICE_NOMEM, "%s: ftruncate(%zu) failed", fn, bytes);
    close(fd);
    return r;
  }
  struct phys *p = malloc(sizeof *p);
  if (!p) {
    close(fd);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *p = (struct phys){.fd = fd, .bytes = bytes, .flags = flags};
  pthread_mutex_lock(&te_vdev_vmm_lock);
  uint64_t h = te_vdev_handle_new_locked(VDEV_HANDLE_PHYS, p);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (!h) {
    close(fd);
    free(p);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *handle = h;
  return TECORE_SUCCESS;
}

/* Mappings of the allocation keep its memory (as on the driver, where the
 * memory goes when the last mapping does). */
tecore_result_t te_vdev_vmm_release(tecore_vmm_handle_t handle) {
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct phys *p = te_vdev_handle_del_locked(handle, VDEV_HANDLE_PHYS);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (!p)
    return TE_ERR(TECORE_ERR_INVALID, "vdev vmm_release: 0x%llx is not a live VMM handle",
                  (unsigned long long)handle);
  close(p->fd);
  free(p);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_vmm_map(tecore_devptr_t va, size_t bytes, tecore_vmm_handle_t handle,
                                size_t offset) {
  static const char fn[] = "vdev vmm_map";
  tecore_result_t r = TECORE_SUCCESS;
  if (!bytes || bytes % VDEV_GRANULARITY || va % VDEV_GRANULARITY || offset % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID,
                  "%s: va 0x%llx, bytes %zu and offset %zu must be multiples of %zu", fn,
                  (unsigned long long)va, bytes, offset, VDEV_GRANULARITY);
  pthread_mutex_lock(&te_vdev_vmm_lock);
  int fd = -1;
  size_t size = 0;
  uint64_t tag = handle & VDEV_HANDLE_TAG_MASK;
  if (tag == VDEV_HANDLE_MC) r = te_vdev_mc_size_locked(handle, &size, fn);
  else r = te_vdev_phys_fd_locked(handle, &fd, &size, fn);
  if (r != TECORE_SUCCESS) goto out;
  if (offset > size || bytes > size - offset) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: offset %zu + bytes %zu exceed the allocation's %zu", fn,
               offset, bytes, size);
    goto out;
  }
  if (!resv_containing((uintptr_t)va, bytes)) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: [0x%llx, +%zu) is not inside a vmm_reserve range", fn,
               (unsigned long long)va, bytes);
    goto out;
  }
  for (size_t i = 0; i < vmm_nmaps; i++)
    if (overlaps(vmm_maps[i].va, vmm_maps[i].bytes, (uintptr_t)va, bytes)) {
      r = TE_ERR(TECORE_ERR_INVALID, "%s: [0x%llx, +%zu) is already (partly) mapped", fn,
                 (unsigned long long)va, bytes);
      goto out;
    }
  if (vmm_nmaps == vmm_capmaps) {
    struct mapping *n = grow(vmm_maps, &vmm_capmaps, sizeof *n);
    if (!n) {
      r = TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
      goto out;
    }
    vmm_maps = n;
  }
  if (fd >= 0) {
    void *p = mmap((void *)(uintptr_t)va, bytes, PROT_NONE, MAP_SHARED | MAP_FIXED, fd,
                   (off_t)offset);
    if (p == MAP_FAILED) {
      r = TE_ERR(TECORE_ERR_SYSTEM, "%s: mmap of the allocation failed", fn);
      goto out;
    }
  } /* a multicast range stays reserved: kernels resolve it through te_vdev_mc_members */
  vmm_maps[vmm_nmaps++] =
      (struct mapping){.va = (uintptr_t)va, .bytes = bytes, .handle = handle, .offset = offset};
out:
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

/* The range must be made of whole mappings, without gaps. */
tecore_result_t te_vdev_vmm_unmap(tecore_devptr_t va, size_t bytes) {
  static const char fn[] = "vdev vmm_unmap";
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  for (size_t i = 0; i < vmm_nmaps; i++) {
    struct mapping *m = &vmm_maps[i];
    if (overlaps(m->va, m->bytes, (uintptr_t)va, bytes) &&
        (m->va < va || m->va + m->bytes > va + bytes)) {
      r = TE_ERR(TECORE_ERR_INVALID, "%s: [0x%llx, +%zu) cuts the mapping at 0x%llx (+%zu)", fn,
                 (unsigned long long)va, bytes, (unsigned long long)m->va, m->bytes);
      goto out;
    }
  }
  if (!fully_mapped((uintptr_t)va, bytes)) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: [0x%llx, +%zu) is not (entirely) mapped", fn,
               (unsigned long long)va, bytes);
    goto out;
  }
  /* as on the driver, queued work that may touch the range finishes first */
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  struct vdev_op pending;
  r = te_vdev_pending_work(&pending);
  if (r != TECORE_SUCCESS) return r;
  te_vdev_barrier_wait(&pending);
  te_vdev_op_release(&pending);
  pthread_mutex_lock(&te_vdev_vmm_lock);
  if (!fully_mapped((uintptr_t)va, bytes)) { /* another thread unmapped it meanwhile */
    r = TE_ERR(TECORE_ERR_INVALID, "%s: [0x%llx, +%zu) is not (entirely) mapped", fn,
               (unsigned long long)va, bytes);
    goto out;
  }
  if (restore_reserved((uintptr_t)va, bytes) != 0) {
    r = TE_ERR(TECORE_ERR_SYSTEM, "%s: mmap back to reserved failed", fn);
    goto out;
  }
  for (size_t m = vmm_nmaps; m-- > 0;)
    if (overlaps(vmm_maps[m].va, vmm_maps[m].bytes, (uintptr_t)va, bytes)) drop_mapping(m);
out:
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

tecore_result_t te_vdev_vmm_set_access(tecore_devptr_t va, size_t bytes, int ordinal) {
  static const char fn[] = "vdev vmm_set_access";
  if (ordinal < 0 || ordinal >= te_vdev_ndevices())
    return TE_ERR(TECORE_ERR_INVALID, "%s: device ordinal %d outside [0, %d)", fn, ordinal,
                  te_vdev_ndevices());
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  if (!fully_mapped((uintptr_t)va, bytes)) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: [0x%llx, +%zu) is not (entirely) mapped", fn,
               (unsigned long long)va, bytes);
    goto out;
  }
  for (size_t i = 0; i < vmm_nmaps; i++) {
    struct mapping *m = &vmm_maps[i];
    if (!overlaps(m->va, m->bytes, (uintptr_t)va, bytes)) continue;
    if ((m->handle & VDEV_HANDLE_TAG_MASK) == VDEV_HANDLE_MC) continue; /* stays reserved */
    uintptr_t lo = m->va > va ? m->va : (uintptr_t)va;
    uintptr_t hi = m->va + m->bytes < va + bytes ? m->va + m->bytes : (uintptr_t)(va + bytes);
    if (mprotect((void *)lo, hi - lo, PROT_READ | PROT_WRITE) != 0) {
      r = TE_ERR(TECORE_ERR_SYSTEM, "%s: mprotect failed", fn);
      goto out;
    }
  }
out:
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

tecore_result_t te_vdev_vmm_export_fd(tecore_vmm_handle_t handle, int *fd) {
  static const char fn[] = "vdev vmm_export_fd";
  tecore_result_t r = TECORE_SUCCESS;
  pthread_mutex_lock(&te_vdev_vmm_lock);
  struct phys *p = te_vdev_handle_get_locked(handle, VDEV_HANDLE_PHYS);
  if (!p) {
    r = TE_ERR(TECORE_ERR_INVALID, "%s: 0x%llx is not a live VMM handle", fn,
               (unsigned long long)handle);
  } else if (!(p->flags & TECORE_VMM_EXPORT_POSIX_FD)) {
    r = TE_ERR(TECORE_ERR_INVALID,
               "%s: handle 0x%llx was not created with TECORE_VMM_EXPORT_POSIX_FD", fn,
               (unsigned long long)handle);
  } else {
    int d = fcntl(p->fd, F_DUPFD_CLOEXEC, 0);
    if (d < 0) r = TE_ERR(TECORE_ERR_SYSTEM, "%s: dup failed", fn);
    else *fd = d;
  }
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  return r;
}

/* Wraps fd (now owned here) of bytes as a physical allocation handle. */
tecore_result_t te_vdev_phys_adopt(int fd, size_t bytes, unsigned flags, uint64_t *handle,
                                   const char *fn) {
  struct phys *p = malloc(sizeof *p);
  if (!p) {
    close(fd);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *p = (struct phys){.fd = fd, .bytes = bytes, .flags = flags};
  pthread_mutex_lock(&te_vdev_vmm_lock);
  uint64_t h = te_vdev_handle_new_locked(VDEV_HANDLE_PHYS, p);
  pthread_mutex_unlock(&te_vdev_vmm_lock);
  if (!h) {
    close(p->fd);
    free(p);
    return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  }
  *handle = h;
  return TECORE_SUCCESS;
}

unsigned te_vdev_phys_flags_locked(uint64_t handle) {
  struct phys *p = te_vdev_handle_get_locked(handle, VDEV_HANDLE_PHYS);
  return p ? p->flags : 0u;
}

tecore_result_t te_vdev_vmm_import_fd(int fd, tecore_vmm_handle_t *handle) {
  static const char fn[] = "vdev vmm_import_fd";
  struct stat st;
  if (fstat(fd, &st) != 0) return TE_ERR(TECORE_ERR_INVALID, "%s: fd %d is not open", fn, fd);
  if (!S_ISREG(st.st_mode) || st.st_size <= 0 || (size_t)st.st_size % VDEV_GRANULARITY)
    return TE_ERR(TECORE_ERR_INVALID, "%s: fd %d is not an exported vdev VMM allocation", fn, fd);
  int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
  if (own < 0) return TE_ERR(TECORE_ERR_SYSTEM, "%s: dup of fd %d failed", fn, fd);
  /* it came through an fd: it may go on */
  return te_vdev_phys_adopt(own, (size_t)st.st_size, TECORE_VMM_EXPORT_POSIX_FD, handle, fn);
}
