/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_check.c -- vdev as a memory checker (what compute-sanitizer is to
 * a GPU): before a kernel launch, copy, memset, stream memory op or graph
 * launch is queued, each address it will touch is checked against the
 * allocation registry (vdev_mem.c) and the VMM mappings (vdev_vmm.c).
 *
 *   copies, memsets    the whole range [p, p+bytes) must lie inside one
 *                      live allocation or mapping; a copy endpoint that is
 *                      no allocation at all is pageable host memory (legal
 *                      with unified addressing) and must be mapped
 *   memory ops         the word must be in device-accessible memory
 *   kernels            every pointer parameter (the kernel table's
 *                      param_is_ptr) must point inside a live allocation;
 *                      0 is allowed unless the parameter is
 *                      TECORE_KERNEL_PTR_NONNULL, and be as aligned as the
 *                      kernel's elements need (kernel.c's alignment
 *                      record).  The range a kernel touches is checked by
 *                      the public function that launches it; here its
 *                      start is.
 *   graph launches     every node of the plan, recursively
 *
 * A failure becomes the stream's sticky TECORE_ERR_ILLEGAL_ADDRESS (every
 * later synchronize or query of that stream returns it, as the driver's
 * illegal-address error does) with a detail naming the operation, the
 * kernel parameter and the address; the operation is not run, so the
 * process never faults on a worker thread.  The call that queued it
 * returns the error at once (the driver would report it later: vdev is
 * stricter).  TECORE_VDEV_CHECK=0 turns the checks off. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "vdev/vdev.h"
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

TE_PARAM_INT(vdev_check, "TECORE_VDEV_CHECK", 1, 0, 1,
             "1: vdev checks every launch, copy and memset against its allocation registry "
             "and fails bad addresses with TECORE_ERR_ILLEGAL_ADDRESS; 0: no checks (faster)")

/* memcheck's red zones (vdev_memcheck.c) rely on copies into them being
 * refused */
static int check_enabled(void) {
  return tecore_tunable_int(&vdev_check) != 0 || te_vdev_memcheck_on();
}

/* 1 when every page of [p, p+bytes) is mapped in this process (bytes >= 1,
 * and the range does not wrap: the caller checked).  The range's last byte,
 * not its end, bounds the walk: a range that ends at 2^64 has an end of 0,
 * and was taken for mapped without a look (found by fuzz-api). */
static int host_mapped(uintptr_t p, size_t bytes) {
  static const size_t chunk = 4096; /* pages per mincore call */
  unsigned char vec[4096];
  long pg = sysconf(_SC_PAGESIZE);
  uintptr_t page = pg > 0 ? (uintptr_t)pg : 4096;
  uintptr_t lo = p & ~(page - 1), last = p + (bytes - 1);
  for (;;) {
    uintptr_t left = (last - lo) / page + 1; /* pages from lo to the last byte's */
    size_t n = left > chunk ? chunk : (size_t)left;
    if (mincore((void *)lo, n * page, vec) != 0) return 0;
    if (n == left) return 1;
    lo += n * page;
  }
}

/* 0 when [addr, addr+bytes) lies in one live allocation or mapping
 * (pageable_ok: or in mapped host memory), else -1 and the reason in why. */
static int check_range(uint64_t addr, size_t bytes, int pageable_ok, char *why, size_t n) {
  uintptr_t p = (uintptr_t)addr;
  if (bytes == 0) bytes = 1;
  if (p == 0) {
    snprintf(why, n, "address 0 (NULL)");
    return -1;
  }
  if (bytes - 1 > UINTPTR_MAX - p) {
    snprintf(why, n, "[0x%" PRIxPTR ", +%zu) wraps around the address space", p, bytes);
    return -1;
  }
  struct vdev_alloc_info a;
  if (te_vdev_mem_lookup(p, bytes, &a)) {
    if (p < a.base) {
      snprintf(why, n, "[0x%" PRIxPTR ", +%zu) starts %zu bytes before %s at 0x%" PRIxPTR, p,
               bytes, (size_t)(a.base - p), te_vdev_alloc_kind_name(a.kind), a.base);
      return -1;
    }
    if (bytes > a.bytes - (p - a.base)) {
      snprintf(why, n,
               "[0x%" PRIxPTR ", +%zu) ends %zu bytes past the end of %s [0x%" PRIxPTR ", +%zu)",
               p, bytes, (size_t)(p - a.base + bytes - a.bytes), te_vdev_alloc_kind_name(a.kind),
               a.base, a.bytes);
      return -1;
    }
    return 0;
  }
  int v = te_vdev_vmm_check_range(p, bytes);
  if (v > 0) return 0;
  if (v < 0) {
    snprintf(why, n, "[0x%" PRIxPTR ", +%zu) is in a VMM reservation but not (entirely) mapped",
             p, bytes);
    return -1;
  }
  if (te_vdev_mem_redzone_owner(p, &a)) {
    snprintf(why, n, "0x%" PRIxPTR " is in the red zone %zu bytes %s %s [0x%" PRIxPTR ", +%zu)",
             p, p < a.base ? (size_t)(a.base - p) : (size_t)(p - a.base - a.bytes + 1),
             p < a.base ? "before" : "past the end of", te_vdev_alloc_kind_name(a.kind), a.base,
             a.bytes);
    return -1;
  }
  if (te_vdev_mem_in_arena(p)) {
    snprintf(why, n, "0x%" PRIxPTR " is device or pinned memory that is not allocated (freed?)",
             p);
    return -1;
  }
  if (!pageable_ok) {
    snprintf(why, n, "0x%" PRIxPTR " is inside no live allocation", p);
    return -1;
  }
  if (!host_mapped(p, bytes)) {
    snprintf(why, n, "[0x%" PRIxPTR ", +%zu) is neither allocated nor mapped host memory", p,
             bytes);
    return -1;
  }
  return 0;
}

/* The reason op may not run, in why; 0 when it may. */
static int op_bad(const struct vdev_op *op, char *why, size_t n) {
  char r[160];
  switch (op->type) {
  case VDEV_OP_KERNEL: {
    const struct tecore_kernel_def *def = op->u.kernel.def;
    void *argv[TECORE_KERNEL_MAX_PARAMS];
    for (unsigned i = 0; i < def->nparams && i < TECORE_KERNEL_MAX_PARAMS; i++)
      argv[i] = op->u.kernel.args + te_vdev_arg_offset(def, i);
    for (unsigned i = 0; i < def->nparams; i++) {
      if (!def->param_is_ptr[i] || def->param_size[i] != 8) continue;
      uint64_t v;
      memcpy(&v, argv[i], 8);
      if (v == 0 && def->param_is_ptr[i] != TECORE_KERNEL_PTR_NONNULL) continue;
      if (check_range(v, 1, 0, r, sizeof r) != 0) {
        snprintf(why, n, "kernel %s, parameter %u, address 0x%" PRIx64 ": %s", def->name, i, v,
                 r);
        return 1;
      }
      /* a graph node's pointer set after capture is checked here too: the
       * C kernel's access through it would be misaligned (a GPU's
       * misaligned-address error) */
      size_t align = te_kparam_align(op->u.kernel.align, def, i, argv);
      if (align > 1 && v % align) {
        snprintf(why, n, "kernel %s, parameter %u, address 0x%" PRIx64
                 ": misaligned (its elements need %zu-byte alignment)", def->name, i, v, align);
        return 1;
      }
    }
    return 0;
  }
  case VDEV_OP_MEMCPY:
    if (check_range(op->u.copy.dst, op->u.copy.bytes, 1, r, sizeof r) != 0) {
      snprintf(why, n, "memcpy of %zu bytes, destination 0x%" PRIx64 ": %s", op->u.copy.bytes,
               op->u.copy.dst, r);
      return 1;
    }
    if (check_range(op->u.copy.src, op->u.copy.bytes, 1, r, sizeof r) != 0) {
      snprintf(why, n, "memcpy of %zu bytes, source 0x%" PRIx64 ": %s", op->u.copy.bytes,
               op->u.copy.src, r);
      return 1;
    }
    return 0;
  case VDEV_OP_MEMSET: {
    size_t bytes = op->u.set.count * op->u.set.elem;
    if (op->u.set.count > SIZE_MAX / op->u.set.elem) {
      snprintf(why, n, "memset of %zu x %u bytes at 0x%" PRIx64 ": the size overflows",
               op->u.set.count, op->u.set.elem, op->u.set.dst);
      return 1;
    }
    if (check_range(op->u.set.dst, bytes, 1, r, sizeof r) != 0) {
      snprintf(why, n, "memset of %zu bytes, destination 0x%" PRIx64 ": %s", bytes,
               op->u.set.dst, r);
      return 1;
    }
    return 0;
  }
  case VDEV_OP_WRITE_VALUE:
  case VDEV_OP_WAIT_VALUE:
    if (check_range(op->u.mem.addr, op->u.mem.width / 8, 1, r, sizeof r) != 0) {
      snprintf(why, n, "%s%u at 0x%" PRIx64 ": %s", te_vdev_op_name(op->type), op->u.mem.width,
               op->u.mem.addr, r);
      return 1;
    }
    return 0;
  case VDEV_OP_CHILD_GRAPH:
  case VDEV_OP_GRAPH_LAUNCH: {
    const struct vdev_plan *p = op->u.graph.plan;
    for (size_t i = 0; p && i < p->count; i++) {
      char inner[sizeof r + 96];
      if (op_bad(&p->nodes[i].op, inner, sizeof inner)) {
        snprintf(why, n, "graph node %zu: %s", i, inner);
        return 1;
      }
    }
    return 0;
  }
  default:
    return 0;
  }
}

tecore_result_t te_vdev_fault(struct vdev_stream *s, const char *tag, const char *fn,
                              const char *why) {
  if (s) {
    pthread_mutex_lock(&s->lock);
    if (s->sticky == TECORE_SUCCESS) {
      s->sticky = TECORE_ERR_ILLEGAL_ADDRESS;
      snprintf(s->sticky_msg, sizeof s->sticky_msg, "illegal address: %s", why);
    }
    pthread_mutex_unlock(&s->lock);
  }
  TE_LOG_ERROR(TECORE_SUBSYS_DEVICE, "%s: %s: illegal address: %s", tag, fn, why);
  return TE_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "%s: illegal address: %s", fn, why);
}

tecore_result_t te_vdev_check_op(struct vdev_stream *s, const struct vdev_op *op,
                                 const char *fn) {
  if (!check_enabled()) return TECORE_SUCCESS;
  char why[400];
  if (!op_bad(op, why, sizeof why)) return TECORE_SUCCESS;
  return te_vdev_fault(s, "vdev", fn, why);
}



/* ---- the memory checks of the layers above (dev_check.c) ---- */

tecore_result_t te_vdev_checks_on(int *on) {
  *on = check_enabled();
  return TECORE_SUCCESS;
}

tecore_result_t te_vdev_mem_check(tecore_devptr_t p, size_t bytes, char *why, size_t n) {
  return check_range(p, bytes, 0, why, n) == 0 ? TECORE_SUCCESS
                                                       : TECORE_ERR_ILLEGAL_ADDRESS;
}
