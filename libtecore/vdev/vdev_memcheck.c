/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_memcheck.c -- red zones around device memory (TECORE_VDEV_MEMCHECK=1),
 * what compute-sanitizer's memcheck finds on a GPU: a kernel that writes
 * past the end (or before the start) of a buffer it was given.
 *
 * vdev_check.c checks the addresses an operation is given, not the ones a
 * kernel's C code computes, and the guard page after each allocation only
 * faults past the page's slack.  In this mode each device allocation is
 * placed at the end of its pages, 256-byte aligned (cudaMalloc's promise),
 * so that its end touches the red zone after it (the alignment slack, then
 * at least 64 bytes); every other byte of its pages is the red zone before
 * it.  Both are filled with a poison byte and verified:
 *
 *   after each kernel   the allocations its parameters point into (every
 *                       8-byte word of the argument copy that is an arena
 *                       address: pointers inside parameter structs count),
 *                       so the fault names the kernel; sticky on its stream
 *   at synchronize      every allocation (stream, event, context): damage
 *                       a kernel did through a pointer table, or a host
 *                       write; sticky on the synchronized stream
 *   at free             the allocation freed (the free returns the error;
 *                       a free deferred behind queued work is checked when
 *                       released and reported by the next synchronize)
 *
 * A damaged red zone is repainted once reported, so one fault is one
 * report.  The mode costs a memcmp of each allocation's pages per check;
 * it turns TECORE_VDEV_CHECK on (a copy or memset into a red zone is
 * refused before it runs).  A kernel that writes exactly the poison byte
 * is not seen; reads are not checked. */
#include "vdev/vdev.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

TE_PARAM_INT(vdev_memcheck, "TECORE_VDEV_MEMCHECK", 0, 0, 1,
             "1: vdev puts poisoned red zones around each device allocation (its end "
             "touching the one after it, 256-byte aligned) and verifies them after every "
             "kernel, at every synchronize and at free; a kernel that wrote out of bounds "
             "is a sticky TECORE_ERR_ILLEGAL_ADDRESS naming it, the allocation and the "
             "offsets (slower; implies TECORE_VDEV_CHECK=1); 0: off")

#define RZ_MIN 64       /* red zone after the end, at least */
#define RZ_ALIGN 256    /* the allocation's alignment, as cudaMalloc's */
#define RZ_POISON 0xcb  /* as a float -2.67e7, as a bf16 -2.67e7: unlikely output */

int te_vdev_memcheck_on(void) { return tecore_tunable_int(&vdev_memcheck) != 0; }

/* ---- layout and verification ------------------------------------------- */

size_t te_vdev_rz_mapped(size_t bytes, size_t page) {
  size_t need = bytes + RZ_MIN + 2 * RZ_ALIGN; /* bytes <= 2^39: no wrap */
  return (need + page - 1) & ~(page - 1);
}

uintptr_t te_vdev_rz_place(uintptr_t region, size_t mapped, size_t bytes) {
  uintptr_t base = (region + mapped - RZ_MIN - bytes) & ~(uintptr_t)(RZ_ALIGN - 1);
  memset((void *)region, RZ_POISON, base - region);
  memset((void *)(base + bytes), RZ_POISON, region + mapped - (base + bytes));
  return base;
}

/* Index of the first byte of [p, p+n) that is not poison, or n: bytes up
 * to an 8-byte boundary, then words. */
static size_t first_bad(const unsigned char *p, size_t n) {
  const uint64_t word = 0x0101010101010101ull * RZ_POISON;
  size_t i = 0;
  for (; i < n && ((uintptr_t)(p + i) & 7); i++)
    if (p[i] != RZ_POISON) return i;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8); /* one aligned load */
    if (w != word) break;
  }
  for (; i < n; i++)
    if (p[i] != RZ_POISON) return i;
  return n;
}

/* Adds the damage of [p, p+n) (offsets from base) to *h and repaints it. */
static void scan_part(unsigned char *p, size_t n, uintptr_t base, struct vdev_rz_hit *h) {
  size_t i = first_bad(p, n);
  if (i == n) return;
  size_t last = i;
  for (size_t j = i; j < n; j++)
    if (p[j] != RZ_POISON) {
      h->nbad++;
      last = j;
    }
  ptrdiff_t lo = (ptrdiff_t)((uintptr_t)p + i - base), hi = (ptrdiff_t)((uintptr_t)p + last - base);
  if (lo < h->first) h->first = lo;
  if (hi > h->last) h->last = hi;
  memset(p, RZ_POISON, n);
}

int te_vdev_rz_verify(uintptr_t region, size_t mapped, uintptr_t base, size_t bytes,
                      struct vdev_rz_hit *h) {
  *h = (struct vdev_rz_hit){.base = base, .bytes = bytes, .first = PTRDIFF_MAX,
                            .last = PTRDIFF_MIN};
  scan_part((unsigned char *)region, base - region, base, h);
  scan_part((unsigned char *)(base + bytes), region + mapped - (base + bytes), base, h);
  return h->nbad != 0;
}

/* "device memory [0x.., +N): 4 bytes of its red zones written, offsets
 * +N to +N+3 (from 1 to 4 bytes past its end)" */
void te_vdev_rz_describe(const struct vdev_rz_hit *h, char *buf, size_t n) {
  char side[128];
  ptrdiff_t end = (ptrdiff_t)h->bytes;
  if (h->last < 0)
    snprintf(side, sizeof side, "from %td to %td bytes before its start", -h->first, -h->last);
  else if (h->first >= end)
    snprintf(side, sizeof side, "from %td to %td bytes past its end", h->first - end + 1,
             h->last - end + 1);
  else
    snprintf(side, sizeof side, "before its start and past its end");
  snprintf(buf, n,
           "device memory [0x%" PRIxPTR ", +%zu): %zu bytes of its red zones written, "
           "offsets %+td to %+td (%s)",
           h->base, h->bytes, h->nbad, h->first, h->last, side);
}

/* ---- reporting ------------------------------------------------------------ */

/* Damage found where nothing could return it (a deferred free released
 * after its work ran): the next synchronize reports it. */
static pthread_mutex_t late_lock = PTHREAD_MUTEX_INITIALIZER;
static char late_msg[400];
static int late_pending;

void te_vdev_memcheck_late(const struct vdev_rz_hit *h, const char *when) {
  char d[300];
  te_vdev_rz_describe(h, d, sizeof d);
  TE_LOG_ERROR(TECORE_SUBSYS_DEVICE, "vdev memcheck: %s (found %s)", d, when);
  pthread_mutex_lock(&late_lock);
  if (!late_pending) snprintf(late_msg, sizeof late_msg, "%s (found %s)", d, when);
  late_pending = 1;
  pthread_mutex_unlock(&late_lock);
}

static int take_late(char *buf, size_t n) {
  pthread_mutex_lock(&late_lock);
  int had = late_pending;
  if (had) snprintf(buf, n, "%s", late_msg);
  late_pending = 0;
  pthread_mutex_unlock(&late_lock);
  return had;
}

/* The error, logged (CI's logs are searched for "vdev memcheck:"), and
 * sticky on s (when given and still clean). */
static tecore_result_t fault(struct vdev_stream *s, const char *fn, const char *why) {
  return te_vdev_fault(s, "vdev memcheck", fn, why);
}

/* The tail of a report that found bad damaged allocations. */
static const char *others(size_t bad) {
  if (bad > 2) return "; more allocations damaged too";
  return bad == 2 ? "; one more allocation damaged too" : "";
}

#define KERNEL_PTRS_MAX 64

/* After kernel op ran on s: the red zones of what its parameters point
 * into.  More candidate words than KERNEL_PTRS_MAX: every allocation. */
tecore_result_t te_vdev_memcheck_kernel(struct vdev_stream *s, const struct vdev_op *op) {
  const char *name = op->u.kernel.def->name;
  if (s) __atomic_store_n(&s->last_kernel, name, __ATOMIC_RELAXED);
  uintptr_t ptrs[KERNEL_PTRS_MAX];
  size_t n = 0, all = 0;
  for (size_t off = 0; off + 8 <= op->u.kernel.args_bytes; off += 8) {
    uint64_t v;
    memcpy(&v, op->u.kernel.args + off, 8);
    if (!te_vdev_mem_in_arena((uintptr_t)v)) continue;
    if (n == KERNEL_PTRS_MAX) all = 1;
    else ptrs[n++] = (uintptr_t)v;
  }
  if (!n) return TECORE_SUCCESS;
  struct vdev_rz_hit h;
  size_t bad = te_vdev_mem_redzones_check(all ? NULL : ptrs, all ? 0 : n, &h);
  if (!bad) return TECORE_SUCCESS;
  char d[300], why[400];
  te_vdev_rz_describe(&h, d, sizeof d);
  snprintf(why, sizeof why, "kernel %s wrote out of bounds: %s%s", name, d, others(bad));
  return fault(s, "vdev kernel", why);
}

/* At a synchronize: every allocation, and damage found at a deferred free. */
tecore_result_t te_vdev_memcheck_sync(struct vdev_stream *s, const char *fn) {
  if (!te_vdev_memcheck_on()) return TECORE_SUCCESS;
  char d[400], why[640];
  struct vdev_rz_hit h;
  size_t bad = te_vdev_mem_redzones_check(NULL, 0, &h);
  if (bad) {
    const char *k = s ? __atomic_load_n(&s->last_kernel, __ATOMIC_RELAXED) : NULL;
    te_vdev_rz_describe(&h, d, sizeof d);
    snprintf(why, sizeof why,
             "%s%s (found at synchronize: written by no kernel given a pointer into it: "
             "through a pointer table, or by the host%s%s)",
             d, others(bad), k ? "; last kernel on this stream: " : "", k ? k : "");
  } else if (take_late(d, sizeof d)) {
    snprintf(why, sizeof why, "%s", d);
  } else {
    return TECORE_SUCCESS;
  }
  return fault(s, fn, why);
}
