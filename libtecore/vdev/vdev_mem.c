/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_mem.c -- vdev memory: device memory, pinned host memory and
 * registered host ranges, kept in one registry of address intervals so
 * that freeing an unknown pointer is an error, not a crash, and so that
 * every launch, copy and memset can have its pointers checked
 * (vdev_check.c).
 *
 * Device memory comes from an arena: one large PROT_NONE reservation that
 * allocations are carved from (page-aligned, a guard page after each) and
 * never reused while fresh address space is left, so a stale device
 * pointer never silently points at a newer allocation, and an address in
 * the arena outside a live allocation is known to be bad.  Pinned host
 * memory comes from the same arena, for the same reason: as heap memory a
 * freed pinned buffer stayed mapped, so a copy through a stale pinned
 * pointer passed the checks as pageable memory and wrote freed heap.
 * Registered ranges are the caller's.
 * With unified addressing a pinned or registered range's device address is
 * its host address.
 *
 * Frees keep the driver's promise: cuMemFree does not return memory to the
 * system while queued work may still touch it.  Here a free takes the
 * allocation out of the registry at once (later submissions that name it
 * fail their check) and releases the memory when every stream has run
 * what was queued before the free (a deferred-free list, reaped by later
 * memory calls and synchronizations). */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vdev/vdev.h"
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sysinfo.h>
#include <unistd.h>

struct alloc {
  uintptr_t base;
  size_t bytes;                   /* what the caller asked for */
  uintptr_t region;               /* arena: the span's start (base, unless memcheck) */
  size_t span;                    /* arena: bytes taken (with the guard) */
  size_t mapped;                  /* memcheck: the pages around base with its red
                                     zones (vdev_memcheck.c); 0: none */
  enum vdev_alloc_kind kind;
};

/* A free waiting for the work queued before it. */
struct deferred {
  struct deferred *next;
  struct alloc a;
  struct vdev_op pending;         /* BARRIER (or EMPTY) */
};

static pthread_mutex_t mem_lock = PTHREAD_MUTEX_INITIALIZER;
static struct alloc *allocs;          /* sorted by base, disjoint */
static size_t nallocs, capallocs;
static struct deferred *deferred_head;

#define ARENA_MAX ((size_t)1 << 40)   /* 1 TiB of address space, not memory */
#define ARENA_MIN ((size_t)1 << 32)
static uintptr_t arena_base, arena_end, arena_next;
/* spans given back, reused only once the fresh address space is gone */
static struct alloc *arena_free;
static size_t narena_free, caparena_free;

/* Allocations stay valid in a forked child (its copy of the address
 * space); frees deferred for the parent's streams are due there at once. */
void te_vdev_mem_fork(enum vdev_fork_phase phase) {
  if (phase == VDEV_FORK_PREPARE) pthread_mutex_lock(&mem_lock);
  else pthread_mutex_unlock(&mem_lock);
}

const char *te_vdev_alloc_kind_name(enum vdev_alloc_kind k) {
  switch (k) {
  case VDEV_ALLOC_DEVICE: return "device memory (tecore_mem_alloc)";
  case VDEV_ALLOC_HOST: return "pinned host memory (tecore_mem_alloc_host)";
  case VDEV_ALLOC_HOST_REGISTERED: return "registered host memory (tecore_mem_host_register)";
  }
  return "memory";
}

static size_t page_size(void) {
  long p = sysconf(_SC_PAGESIZE);
  return p > 0 ? (size_t)p : 4096;
}

/* ---- the interval registry (mem_lock held) --------------------------------- */

/* Index of the last allocation whose base is <= p, or nallocs when none. */
static size_t find_le(uintptr_t p) {
  size_t lo = 0, hi = nallocs;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    if (allocs[mid].base <= p) lo = mid + 1;
    else hi = mid;
  }
  return lo ? lo - 1 : nallocs;
}

static int insert_locked(const struct alloc *a) {
  if (nallocs == capallocs) {
    size_t ncap = capallocs ? capallocs * 2 : 64;
    struct alloc *n = realloc(allocs, ncap * sizeof *n);
    if (!n) return -1;
    allocs = n;
    capallocs = ncap;
  }
  size_t i = find_le(a->base);
  i = i == nallocs ? 0 : i + 1;
  memmove(&allocs[i + 1], &allocs[i], (nallocs - i) * sizeof *allocs);
  allocs[i] = *a;
  nallocs++;
  return 0;
}

/* 1 and the allocation when some live one overlaps [p, p+bytes). */
static int overlapping_locked(uintptr_t p, size_t bytes, struct alloc *out) {
  size_t i = find_le(p);
  if (i != nallocs && p - allocs[i].base < (allocs[i].bytes ? allocs[i].bytes : 1)) {
    *out = allocs[i];
    return 1;
  }
  size_t next = i == nallocs ? 0 : i + 1;
  if (next < nallocs && allocs[next].base - p < bytes) {
    *out = allocs[next];
    return 1;
  }
  return 0;
}

int te_vdev_mem_lookup(uintptr_t p, size_t bytes, struct vdev_alloc_info *info) {
  pthread_mutex_lock(&mem_lock);
  struct alloc a;
  int found = overlapping_locked(p, bytes ? bytes : 1, &a);
  pthread_mutex_unlock(&mem_lock);
  if (found) *info = (struct vdev_alloc_info){.base = a.base, .bytes = a.bytes, .kind = a.kind};
  return found;
}

int te_vdev_mem_in_arena(uintptr_t p) {
  return arena_base && p >= __atomic_load_n(&arena_base, __ATOMIC_ACQUIRE) && p < arena_end;
}

/* ---- the device arena ----------------------------------------------------------- */

static int arena_init_locked(void) {
  if (arena_base) return 0;
  for (size_t sz = ARENA_MAX; sz >= ARENA_MIN; sz /= 2) {
    void *p = mmap(NULL, sz, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) continue;
    arena_end = (uintptr_t)p + sz;
    arena_next = (uintptr_t)p;
    __atomic_store_n(&arena_base, (uintptr_t)p, __ATOMIC_RELEASE);
    return 0;
  }
  return -1;
}

/* Takes span bytes of address space: fresh first, then a returned span. */
static uintptr_t arena_take_locked(size_t span) {
  if (arena_init_locked() != 0) return 0;
  if (arena_end - arena_next >= span) {
    uintptr_t p = arena_next;
    arena_next += span;
    return p;
  }
  for (size_t i = 0; i < narena_free; i++)
    if (arena_free[i].span >= span) {
      uintptr_t p = arena_free[i].base;
      arena_free[i].base += span;
      arena_free[i].span -= span;
      if (!arena_free[i].span) arena_free[i] = arena_free[--narena_free];
      return p;
    }
  return 0;
}

/* Back to reserved, unbacked, inaccessible memory (a stale pointer faults
 * on the host and fails every check). */
static void arena_give_back_locked(uintptr_t base, size_t span) {
  mmap((void *)base, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED | MAP_NORESERVE,
       -1, 0);
  if (narena_free == caparena_free) {
    size_t ncap = caparena_free ? caparena_free * 2 : 64;
    struct alloc *n = realloc(arena_free, ncap * sizeof *n);
    if (!n) return; /* the address space is lost, the memory is not */
    arena_free = n;
    caparena_free = ncap;
  }
  arena_free[narena_free++] = (struct alloc){.base = base, .span = span};
}

/* ---- deferred frees --------------------------------------------------------------- */

static void release_locked(const struct alloc *a) {
  if (a->kind == VDEV_ALLOC_DEVICE || a->kind == VDEV_ALLOC_HOST)
    arena_give_back_locked(a->region, a->span);
}

/* memcheck: 1 and *h when a's red zones were written (then repainted). */
static int redzones_hit(const struct alloc *a, struct vdev_rz_hit *h) {
  return a->mapped && te_vdev_rz_verify(a->region, a->mapped, a->base, a->bytes, h);
}

/* The memcheck allocation whose pages (red zones included) hold p, or NULL. */
static const struct alloc *holder_locked(uintptr_t p) {
  size_t i = find_le(p);
  i = i == nallocs ? 0 : i; /* p may sit in the red zone before allocs[0] */
  for (size_t k = i; k < nallocs && k <= i + 1; k++)
    if (allocs[k].mapped && p - allocs[k].region < allocs[k].mapped) return &allocs[k];
  return NULL;
}

size_t te_vdev_mem_redzones_check(const uintptr_t *ptrs, size_t n, struct vdev_rz_hit *h) {
  size_t bad = 0;
  struct vdev_rz_hit one;
  pthread_mutex_lock(&mem_lock);
  size_t count = ptrs ? n : nallocs;
  for (size_t i = 0; i < count; i++) {
    const struct alloc *a = ptrs ? holder_locked(ptrs[i]) : &allocs[i];
    if (a && redzones_hit(a, &one) && bad++ == 0) *h = one;
  }
  pthread_mutex_unlock(&mem_lock);
  return bad;
}

int te_vdev_mem_redzone_owner(uintptr_t p, struct vdev_alloc_info *info) {
  pthread_mutex_lock(&mem_lock);
  const struct alloc *a = holder_locked(p);
  if (a) *info = (struct vdev_alloc_info){.base = a->base, .bytes = a->bytes, .kind = a->kind};
  pthread_mutex_unlock(&mem_lock);
  return a != NULL;
}

/* Releases the frees whose work is done. */
static void reap_locked(void) {
  for (struct deferred **pp = &deferred_head; *pp;) {
    struct deferred *d = *pp;
    if (!te_vdev_barrier_reached(&d->pending)) {
      pp = &d->next;
      continue;
    }
    *pp = d->next;
    struct vdev_rz_hit h;
    if (redzones_hit(&d->a, &h)) te_vdev_memcheck_late(&h, "when its deferred free ran");
    release_locked(&d->a);
    te_vdev_op_release(&d->pending);
    free(d);
  }
}

/* Unmaps the arena except the pages of pinned host allocations still
 * live: tecore_fini(3) leaves those to the program, which may still read
 * what its last queued copies wrote there (the bytes the worker threads
 * wrote before they were joined). */
static void arena_unmap_locked(void) {
  size_t pg = page_size();
  uintptr_t from = arena_base;
  for (size_t i = 0; i < nallocs; i++) {
    const struct alloc *a = &allocs[i];
    if (a->kind != VDEV_ALLOC_HOST) continue;
    if (a->base > from) munmap((void *)from, a->base - from);
    from = a->base + ((a->bytes + pg - 1) & ~(pg - 1));
  }
  if (arena_end > from) munmap((void *)from, arena_end - from);
}

/* tecore_fini, after the streams stopped: every deferred free is due.  The
 * registry and the arena's bookkeeping go and the arena is unmapped
 * (device memory never freed goes with it; pinned host memory never freed
 * stays mapped, the caller's). */
void te_vdev_mem_fini(void) {
  pthread_mutex_lock(&mem_lock);
  while (deferred_head) {
    struct deferred *d = deferred_head;
    deferred_head = d->next;
    release_locked(&d->a);
    te_vdev_op_release(&d->pending);
    free(d);
  }
  struct vdev_rz_hit h;
  for (size_t i = 0; i < nallocs; i++)
    if (redzones_hit(&allocs[i], &h)) te_vdev_memcheck_late(&h, "at tecore_fini");
  if (arena_base) arena_unmap_locked();
  free(allocs);
  allocs = NULL;
  nallocs = capallocs = 0;
  free(arena_free);
  arena_free = NULL;
  narena_free = caparena_free = 0;
  __atomic_store_n(&arena_base, 0, __ATOMIC_RELEASE);
  arena_end = arena_next = 0;
  pthread_mutex_unlock(&mem_lock);
}

void te_vdev_mem_reap(void) {
  pthread_mutex_lock(&mem_lock);
  reap_locked();
  pthread_mutex_unlock(&mem_lock);
}

/* memcheck: a free that found its red zones written (it still freed). */
static tecore_result_t redzone_fault_at_free(const struct vdev_rz_hit *h, const char *fn) {
  char d[300];
  te_vdev_rz_describe(h, d, sizeof d);
  TE_LOG_ERROR(TECORE_SUBSYS_DEVICE, "vdev memcheck: %s: illegal address: %s (found at free)",
               fn, d);
  return TE_ERR(TECORE_ERR_ILLEGAL_ADDRESS,
                "%s: illegal address: %s (found at free; the memory is freed)", fn, d);
}

/* Removes the allocation based at p, of the wanted kind, from the registry
 * and releases it once the work queued now is done. */
static tecore_result_t free_alloc(uintptr_t p, enum vdev_alloc_kind kind, const char *fn) {
  struct deferred *d = calloc(1, sizeof *d);
  if (!d) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  /* snapshot outside mem_lock: it takes context and stream locks */
  tecore_result_t r = kind == VDEV_ALLOC_HOST_REGISTERED ? TECORE_SUCCESS
                                                          : te_vdev_pending_work(&d->pending);
  if (r != TECORE_SUCCESS) {
    free(d);
    return r;
  }
  pthread_mutex_lock(&mem_lock);
  size_t i = find_le(p);
  if (i == nallocs || allocs[i].base != p || allocs[i].kind != kind) {
    struct alloc a = {0};
    int known = i != nallocs && p - allocs[i].base < allocs[i].bytes;
    if (known) a = allocs[i];
    pthread_mutex_unlock(&mem_lock);
    te_vdev_op_release(&d->pending);
    free(d);
    if (known && a.base == p)
      return TE_ERR(TECORE_ERR_INVALID, "%s: %p is %s, not %s", fn, (void *)p,
                    te_vdev_alloc_kind_name(a.kind), te_vdev_alloc_kind_name(kind));
    if (known)
      return TE_ERR(TECORE_ERR_INVALID, "%s: %p is inside %s at %p, not its start", fn,
                    (void *)p, te_vdev_alloc_kind_name(a.kind), (void *)a.base);
    return TE_ERR(TECORE_ERR_INVALID, "%s: %p is not %s (unknown or already freed)", fn,
                  (void *)p, te_vdev_alloc_kind_name(kind));
  }
  d->a = allocs[i];
  memmove(&allocs[i], &allocs[i + 1], (nallocs - i - 1) * sizeof *allocs);
  nallocs--;
  struct vdev_rz_hit h;
  int hit = 0;
  if (kind == VDEV_ALLOC_HOST_REGISTERED || te_vdev_barrier_reached(&d->pending)) {
    hit = redzones_hit(&d->a, &h);
    release_locked(&d->a);
    te_vdev_op_release(&d->pending);
    free(d);
  } else {
    d->next = deferred_head;
    deferred_head = d;
  }
  reap_locked();
  pthread_mutex_unlock(&mem_lock);
  return hit ? redzone_fault_at_free(&h, fn) : TECORE_SUCCESS;
}

uintptr_t te_vdev_arena_reserve(size_t bytes, size_t align, uintptr_t *span_base, size_t *span) {
  if (bytes > ARENA_MAX || align > ARENA_MAX) return 0;
  size_t sp = bytes + align;
  pthread_mutex_lock(&mem_lock);
  uintptr_t p = arena_take_locked(sp);
  pthread_mutex_unlock(&mem_lock);
  if (!p) return 0;
  *span_base = p;
  *span = sp;
  return (p + align - 1) & ~(uintptr_t)(align - 1);
}

void te_vdev_arena_unreserve(uintptr_t span_base, size_t span) {
  pthread_mutex_lock(&mem_lock);
  if (te_vdev_mem_in_arena(span_base)) arena_give_back_locked(span_base, span);
  pthread_mutex_unlock(&mem_lock);
}

/* ---- the ops ----------------------------------------------------------------------- */

/* bytes of kind from the arena, registered; 0 when there is no room. */
static uintptr_t arena_alloc(size_t bytes, enum vdev_alloc_kind kind) {
  size_t pg = page_size();
  int rz = kind == VDEV_ALLOC_DEVICE && te_vdev_memcheck_on();
  size_t len = rz ? te_vdev_rz_mapped(bytes, pg) : (bytes + pg - 1) & ~(pg - 1);
  size_t span = len + pg; /* a guard page after each allocation */
  pthread_mutex_lock(&mem_lock);
  reap_locked();
  uintptr_t p = arena_take_locked(span);
  int ok = p && mprotect((void *)p, len, PROT_READ | PROT_WRITE) == 0;
  struct alloc a = {.base = p, .bytes = bytes, .region = p, .span = span,
                    .mapped = rz ? len : 0, .kind = kind};
  if (ok && rz) a.base = te_vdev_rz_place(p, len, bytes);
  if (ok && insert_locked(&a) != 0) ok = 0;
  if (!ok && p) arena_give_back_locked(p, span);
  pthread_mutex_unlock(&mem_lock);
  return ok ? a.base : 0;
}

/* The device's memory is the host's: a request above it fails, as one
 * above a GPU's memory does. */
static size_t host_total(void) {
  struct sysinfo si;
  return sysinfo(&si) == 0 ? (size_t)si.totalram * si.mem_unit : (size_t)1 << 40;
}

tecore_result_t te_vdev_mem_alloc(size_t bytes, tecore_devptr_t *dptr) {
  static const char fn[] = "vdev mem_alloc";
  TE_CHECK(te_vdev_capture_unsafe_call(fn));
  size_t total = host_total();
  if (bytes > total || bytes > ARENA_MAX / 2)
    return TE_ERR(TECORE_ERR_DEVICE_NOMEM, "%s: cannot allocate %zu bytes (the device has %zu)",
                  fn, bytes, total);
  uintptr_t p = arena_alloc(bytes, VDEV_ALLOC_DEVICE);
  if (!p) return TE_ERR(TECORE_ERR_DEVICE_NOMEM, "%s: cannot allocate %zu bytes", fn, bytes);
  *dptr = (tecore_devptr_t)p;
  return TECORE_SUCCESS;
}

/* Freeing synchronizes with the device on the driver, so it is one of the
 * calls a capture forbids. */
tecore_result_t te_vdev_mem_free(tecore_devptr_t dptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_free"));
  return free_alloc((uintptr_t)dptr, VDEV_ALLOC_DEVICE, "vdev mem_free");
}

tecore_result_t te_vdev_mem_info(size_t *free_bytes, size_t *total_bytes) {
  struct sysinfo si;
  if (sysinfo(&si) != 0) return TE_ERR(TECORE_ERR_SYSTEM, "vdev mem_info: sysinfo failed");
  *free_bytes = (size_t)si.freeram * si.mem_unit;
  *total_bytes = (size_t)si.totalram * si.mem_unit;
  return TECORE_SUCCESS;
}

/* The allocation (or VMM mapping) holding ptr; bytes 0 when the registry
 * knows no such thing (pageable host memory, a freed pointer, garbage). */
tecore_result_t te_vdev_mem_range(tecore_devptr_t ptr, tecore_devptr_t *base, size_t *bytes) {
  uintptr_t p = (uintptr_t)ptr, b = 0;
  size_t n = 0;
  struct vdev_alloc_info a;
  if (te_vdev_mem_lookup(p, 1, &a) && p >= a.base && p - a.base < a.bytes) {
    b = a.base;
    n = a.bytes;
  } else if (!te_vdev_vmm_range(p, &b, &n)) {
    b = 0;
    n = 0;
  }
  *base = (tecore_devptr_t)b;
  *bytes = n;
  return TECORE_SUCCESS;
}

/* vdev's kernels run on the host and could reach anything; the answer
 * follows cuda's so that code tested here takes the same paths there:
 * device memory and pinned or registered host memory, whole. */
tecore_result_t te_vdev_mem_kernel_addr(tecore_devptr_t ptr, size_t bytes,
                                        tecore_devptr_t *kaddr, int *host) {
  uintptr_t p = (uintptr_t)ptr;
  struct vdev_alloc_info a;
  uintptr_t b = 0;
  size_t n = 0;
  *kaddr = 0;
  *host = 0;
  if (te_vdev_mem_lookup(p, 1, &a) && p >= a.base && p - a.base < a.bytes) {
    b = a.base, n = a.bytes;
    *host = a.kind != VDEV_ALLOC_DEVICE;
  } else if (!te_vdev_vmm_range(p, &b, &n)) {
    return TECORE_SUCCESS;
  }
  if (bytes <= n && p - b <= n - bytes) *kaddr = ptr;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_alloc_host(size_t bytes, void **ptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_alloc_host"));
  uintptr_t p = 0;
  if (bytes <= host_total() && bytes <= ARENA_MAX / 2) p = arena_alloc(bytes, VDEV_ALLOC_HOST);
  if (!p)
    return TE_ERR(TECORE_ERR_NOMEM, "vdev mem_alloc_host: cannot allocate %zu bytes", bytes);
  *ptr = (void *)p;
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_free_host(void *ptr) {
  TE_CHECK(te_vdev_capture_unsafe_call("vdev mem_free_host"));
  return free_alloc((uintptr_t)ptr, VDEV_ALLOC_HOST, "vdev mem_free_host");
}

/* The range may not wrap, nor overlap any allocation or registered range
 * (registering a base twice, or inside pinned memory, is refused). */
tecore_result_t te_vdev_mem_host_register(void *ptr, size_t bytes, unsigned flags) {
  static const char fn[] = "vdev mem_host_register";
  (void)flags; /* all host memory is device-visible here; READONLY is not enforced */
  uintptr_t p = (uintptr_t)ptr;
  if (bytes > UINTPTR_MAX - p)
    return TE_ERR(TECORE_ERR_INVALID, "%s: [%p, +%zu) wraps around the address space", fn, ptr,
                  bytes);
  if (te_vdev_mem_in_arena(p) || te_vdev_mem_in_arena(p + bytes - 1))
    return TE_ERR(TECORE_ERR_INVALID, "%s: [%p, +%zu) is device or pinned memory", fn, ptr,
                  bytes);
  struct alloc a = {.base = p, .bytes = bytes, .kind = VDEV_ALLOC_HOST_REGISTERED}, old;
  pthread_mutex_lock(&mem_lock);
  int clash = overlapping_locked(p, bytes, &old);
  int rc = clash ? 0 : insert_locked(&a);
  pthread_mutex_unlock(&mem_lock);
  if (clash)
    return TE_ERR(TECORE_ERR_INVALID, "%s: [%p, +%zu) overlaps %s at %p (already registered)",
                  fn, ptr, bytes, te_vdev_alloc_kind_name(old.kind), (void *)old.base);
  if (rc != 0) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_host_unregister(void *ptr) {
  return free_alloc((uintptr_t)ptr, VDEV_ALLOC_HOST_REGISTERED, "vdev mem_host_unregister");
}

/* Unified addressing: the device address of page-locked host memory is the
 * host address; any pointer inside a pinned or registered range works. */
tecore_result_t te_vdev_mem_host_device_ptr(void *host, tecore_devptr_t *dptr) {
  struct vdev_alloc_info a;
  if (!te_vdev_mem_lookup((uintptr_t)host, 1, &a) || a.kind == VDEV_ALLOC_DEVICE ||
      (uintptr_t)host - a.base >= a.bytes)
    return TE_ERR(TECORE_ERR_INVALID,
                  "vdev mem_host_device_ptr: %p is not pinned or registered host memory", host);
  *dptr = (tecore_devptr_t)(uintptr_t)host;
  return TECORE_SUCCESS;
}
