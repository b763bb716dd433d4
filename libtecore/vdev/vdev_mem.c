/* vdev_mem.c -- vdev memory: device memory and pinned host memory are host
 * memory (device allocations 256-byte aligned, pinned ones page aligned),
 * kept in a registry so freeing an unknown pointer is an error, not a
 * crash; host ranges registered with host_register are tracked too, and
 * their device address is the host address (unified addressing). */
#include "vdev/vdev.h"
#include <stdlib.h>
#include <sys/sysinfo.h>
#include <unistd.h>

enum alloc_kind { ALLOC_DEVICE = 1, ALLOC_HOST, ALLOC_HOST_REGISTERED };

struct alloc {
  enum alloc_kind kind;
  size_t bytes;
  struct alloc *next_host;        /* host ranges, for interior-pointer lookups */
  uintptr_t base;
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct vdev_map mem_allocs;    /* base address -> struct alloc */
static struct alloc *mem_host_list;   /* ALLOC_HOST and ALLOC_HOST_REGISTERED */

/* Allocations stay valid in a forked child (its copy of the heap). */
void te_vdev_mem_fork(enum vdev_fork_phase phase) {
  if (phase == VDEV_FORK_PREPARE) pthread_mutex_lock(&mem_lock);
  else pthread_mutex_unlock(&mem_lock);
}

static const char *kind_name(enum alloc_kind k) {
  switch (k) {
  case ALLOC_DEVICE: return "device memory (tecore_mem_alloc)";
  case ALLOC_HOST: return "pinned host memory (tecore_mem_alloc_host)";
  case ALLOC_HOST_REGISTERED: return "registered host memory (tecore_mem_host_register)";
  }
  return "memory";
}

static tecore_result_t track(uintptr_t base, size_t bytes, enum alloc_kind kind) {
  struct alloc *a = malloc(sizeof *a);
  if (!a) return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory tracking an allocation");
  *a = (struct alloc){.kind = kind, .bytes = bytes, .base = base};
  pthread_mutex_lock(&mem_lock);
  int rc = te_vdev_map_put(&mem_allocs, base, a);
  if (rc == 0 && kind != ALLOC_DEVICE) {
    a->next_host = mem_host_list;
    mem_host_list = a;
  }
  pthread_mutex_unlock(&mem_lock);
  if (rc != 0) {
    free(a);
    return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of host memory tracking an allocation");
  }
  return TECORE_SUCCESS;
}

/* Removes base from the registry if it is of the wanted kind. */
static tecore_result_t untrack(uintptr_t base, enum alloc_kind kind, const char *fn) {
  pthread_mutex_lock(&mem_lock);
  struct alloc *a = te_vdev_map_get(&mem_allocs, base);
  if (!a || a->kind != kind) {
    pthread_mutex_unlock(&mem_lock);
    if (a)
      return TE_ERR(TECORE_ERR_INVALID, "%s: %p is %s, not %s", fn, (void *)base,
                    kind_name(a->kind), kind_name(kind));
    return TE_ERR(TECORE_ERR_INVALID, "%s: %p is not %s (unknown or already freed)", fn,
                  (void *)base, kind_name(kind));
  }
  te_vdev_map_del(&mem_allocs, base);
  if (kind != ALLOC_DEVICE)
    for (struct alloc **pp = &mem_host_list; *pp; pp = &(*pp)->next_host)
      if (*pp == a) {
        *pp = a->next_host;
        break;
      }
  pthread_mutex_unlock(&mem_lock);
  free(a);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_alloc(size_t bytes, tecore_devptr_t *dptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_alloc"));
  void *p = NULL;
  size_t rounded = (bytes + 255) & ~(size_t)255;
  if (rounded < bytes || posix_memalign(&p, 256, rounded) != 0)
    return TE_ERR(TECORE_ERR_DEVICE_NOMEM, "vdev mem_alloc: cannot allocate %zu bytes", bytes);
  tecore_result_t r = track((uintptr_t)p, bytes, ALLOC_DEVICE);
  if (r != TECORE_SUCCESS) {
    free(p);
    return r;
  }
  *dptr = (tecore_devptr_t)(uintptr_t)p;
  return TECORE_SUCCESS;
}

/* Freeing synchronizes with the device on the driver, so it is one of the
 * calls a capture forbids. */
tecore_result_t te_vdev_mem_free(tecore_devptr_t dptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_free"));
  TE_CHECK(untrack((uintptr_t)dptr, ALLOC_DEVICE, "vdev mem_free"));
  free((void *)(uintptr_t)dptr);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_info(size_t *free_bytes, size_t *total_bytes) {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return TE_ERR(TECORE_ERR_SYSTEM, "vdev mem_info: sysinfo failed");
  *free_bytes = (size_t)si.freeram * si.mem_unit;
  *total_bytes = (size_t)si.totalram * si.mem_unit;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_alloc_host(size_t bytes, void **ptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_alloc_host"));
  long page = sysconf(_SC_PAGESIZE);
  void *p = NULL;
  if (posix_memalign(&p, page > 0 ? (size_t)page : 4096, bytes) != 0)
    return TE_ERR(TECORE_ERR_NOMEM, "vdev mem_alloc_host: cannot allocate %zu bytes", bytes);
  tecore_result_t r = track((uintptr_t)p, bytes, ALLOC_HOST);
  if (r != TECORE_SUCCESS) {
    free(p);
    return r;
  }
  *ptr = p;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_free_host(void *ptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_free_host"));
  TE_CHECK(untrack((uintptr_t)ptr, ALLOC_HOST, "vdev mem_free_host"));
  free(ptr);
  return TECORE_SUCCESS;
}

/* The host range containing p (mem_lock held), or NULL. */
static struct alloc *host_range_locked(uintptr_t p, size_t bytes) {
  for (struct alloc *a = mem_host_list; a; a = a->next_host)
    if (p < a->base + a->bytes && a->base < p + bytes) return a;
  return NULL;
}

tecore_result_t te_vdev_mem_host_register(void *ptr, size_t bytes, unsigned flags) {
  (void)flags; /* all host memory is device-visible here; READONLY is not enforced */
  pthread_mutex_lock(&mem_lock);
  struct alloc *a = host_range_locked((uintptr_t)ptr, bytes);
  pthread_mutex_unlock(&mem_lock);
  if (a)
    return TE_ERR(TECORE_ERR_INVALID,
                  "vdev mem_host_register: [%p, +%zu) overlaps %s at %p (already registered)",
                  ptr, bytes, kind_name(a->kind), (void *)a->base);
  return track((uintptr_t)ptr, bytes, ALLOC_HOST_REGISTERED);
}

tecore_result_t te_vdev_mem_host_unregister(void *ptr) {
  return untrack((uintptr_t)ptr, ALLOC_HOST_REGISTERED, "vdev mem_host_unregister");
}

/* Unified addressing: the device address of page-locked host memory is the
 * host address; any pointer inside a pinned or registered range works. */
tecore_result_t te_vdev_mem_host_device_ptr(void *host, tecore_devptr_t *dptr) {
  pthread_mutex_lock(&mem_lock);
  struct alloc *a = host_range_locked((uintptr_t)host, 1);
  pthread_mutex_unlock(&mem_lock);
  if (!a)
    return TE_ERR(TECORE_ERR_INVALID,
                  "vdev mem_host_device_ptr: %p is not pinned or registered host memory", host);
  *dptr = (tecore_devptr_t)(uintptr_t)host;
  return TECORE_SUCCESS;
}
