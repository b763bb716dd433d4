/* SPDX-License-Identifier: Apache-2.0 */
/* vdev_op.c -- the unit of vdev work: one operation, as a stream queues it
 * and as a graph node holds it.  Release, deep copy, run, and names and
 * labels for logs and DOT files. */
#include "vdev/vdev.h"
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

const char *te_vdev_op_name(enum vdev_op_type type) {
  switch (type) {
  case VDEV_OP_EMPTY: return "empty";
  case VDEV_OP_KERNEL: return "kernel";
  case VDEV_OP_MEMCPY: return "memcpy";
  case VDEV_OP_MEMSET: return "memset";
  case VDEV_OP_WRITE_VALUE: return "write_value";
  case VDEV_OP_WAIT_VALUE: return "wait_value";
  case VDEV_OP_EVENT_RECORD: return "event_record";
  case VDEV_OP_EVENT_WAIT: return "event_wait";
  case VDEV_OP_CHILD_GRAPH: return "graph";
  case VDEV_OP_NODE_TYPES_: break;
  case VDEV_OP_MARKER: return "marker";
  case VDEV_OP_WAIT_MARKER: return "wait_marker";
  case VDEV_OP_BARRIER: return "barrier";
  case VDEV_OP_GRAPH_LAUNCH: return "graph_launch";
  }
  return "?";
}

void te_vdev_op_release(struct vdev_op *op) {
  switch (op->type) {
  case VDEV_OP_KERNEL:
    free(op->u.kernel.args);
    break;
  case VDEV_OP_EVENT_RECORD:
  case VDEV_OP_EVENT_WAIT:
    if (op->u.ev.event) te_vdev_obj_unref(&op->u.ev.event->obj);
    break;
  case VDEV_OP_CHILD_GRAPH:
  case VDEV_OP_GRAPH_LAUNCH:
    if (op->u.graph.plan) te_vdev_plan_unref(op->u.graph.plan);
    te_vdev_marker_unref(op->u.graph.prev);
    te_vdev_marker_unref(op->u.graph.done);
    break;
  case VDEV_OP_MARKER:
  case VDEV_OP_WAIT_MARKER:
    te_vdev_marker_unref(op->u.marker.m);
    break;
  case VDEV_OP_BARRIER:
    for (size_t i = 0; i < op->u.barrier.n; i++) te_vdev_stream_put(op->u.barrier.streams[i]);
    free(op->u.barrier.streams);
    free(op->u.barrier.pos);
    break;
  default:
    break;
  }
  memset(op, 0, sizeof *op);
  op->type = VDEV_OP_EMPTY;
}

/* Only node types are cloned (graphs and plans hold nothing else). */
tecore_result_t te_vdev_op_clone(struct vdev_op *dst, const struct vdev_op *src) {
  *dst = *src;
  switch (src->type) {
  case VDEV_OP_KERNEL:
    dst->u.kernel.args = NULL;
    if (src->u.kernel.args_bytes) {
      dst->u.kernel.args = malloc(src->u.kernel.args_bytes);
      if (!dst->u.kernel.args) {
        dst->type = VDEV_OP_EMPTY;
        return TE_ERR(TECORE_ERR_NOMEM, "vdev: out of memory copying a kernel node");
      }
      memcpy(dst->u.kernel.args, src->u.kernel.args, src->u.kernel.args_bytes);
    }
    break;
  case VDEV_OP_EVENT_RECORD:
  case VDEV_OP_EVENT_WAIT:
    if (dst->u.ev.event) te_vdev_obj_ref(&dst->u.ev.event->obj);
    break;
  case VDEV_OP_CHILD_GRAPH:
    te_vdev_plan_ref(dst->u.graph.plan);
    dst->u.graph.prev = dst->u.graph.done = NULL;
    break;
  default:
    break;
  }
  return TECORE_SUCCESS;
}

static void memset_run(const struct vdev_op *op) {
  unsigned char *d = (unsigned char *)(uintptr_t)op->u.set.dst;
  size_t n = op->u.set.count;
  uint32_t v = op->u.set.value;
  switch (op->u.set.elem) {
  case 1:
    memset(d, (int)(v & 0xff), n);
    break;
  case 2: {
    uint16_t v16 = (uint16_t)v;
    for (size_t i = 0; i < n; i++) memcpy(d + 2 * i, &v16, 2);
    break;
  }
  default:
    for (size_t i = 0; i < n; i++) memcpy(d + 4 * i, &v, 4);
    break;
  }
}

/* Runs a barrier: each listed stream must reach its position.  A stream
 * of a parent process (after fork) never runs here: not waited for. */
void te_vdev_barrier_wait(const struct vdev_op *op) {
  for (size_t i = 0; i < op->u.barrier.n; i++) {
    struct vdev_stream *t = op->u.barrier.streams[i];
    if (t->gen != atomic_load(&te_vdev_fork_gen)) continue;
    pthread_mutex_lock(&t->lock);
    while (t->completed < op->u.barrier.pos[i] && !atomic_load(&te_vdev_exiting))
      pthread_cond_wait(&t->done_cv, &t->lock);
    pthread_mutex_unlock(&t->lock);
  }
}

int te_vdev_barrier_reached(const struct vdev_op *op) {
  if (op->type != VDEV_OP_BARRIER) return 1;
  for (size_t i = 0; i < op->u.barrier.n; i++) {
    struct vdev_stream *t = op->u.barrier.streams[i];
    if (t->gen != atomic_load(&te_vdev_fork_gen)) continue;
    pthread_mutex_lock(&t->lock);
    int reached = t->completed >= op->u.barrier.pos[i];
    pthread_mutex_unlock(&t->lock);
    if (!reached) return 0;
  }
  return 1;
}

static void event_record_run(struct vdev_event *e) {
  struct vdev_marker *m = te_vdev_marker_new();
  if (!m) return; /* out of memory: the event keeps its previous record */
  te_vdev_marker_complete(m);
  te_vdev_event_set_marker(e, m);
  te_vdev_marker_unref(m);
}

static void event_wait_run(struct vdev_event *e) {
  struct vdev_marker *m = te_vdev_event_marker(e);
  if (!m) return; /* never recorded: nothing to wait for */
  te_vdev_marker_wait(m);
  te_vdev_marker_unref(m);
}

tecore_result_t te_vdev_op_run(struct vdev_stream *s, struct vdev_op *op) {
  switch (op->type) {
  case VDEV_OP_EMPTY:
    return TECORE_SUCCESS;
  case VDEV_OP_KERNEL: {
    tecore_result_t r = te_vdev_kernel_run(op);
    if (r == TECORE_SUCCESS && te_vdev_memcheck_on()) r = te_vdev_memcheck_kernel(s, op);
    return r;
  }
  case VDEV_OP_MEMCPY:
    /* overlapping copies are undefined on the driver; be kind */
    te_host_move((void *)(uintptr_t)op->u.copy.dst, (const void *)(uintptr_t)op->u.copy.src,
                 op->u.copy.bytes);
    return TECORE_SUCCESS;
  case VDEV_OP_MEMSET:
    memset_run(op);
    return TECORE_SUCCESS;
  case VDEV_OP_WRITE_VALUE:
    te_vdev_write_value_run(op);
    return TECORE_SUCCESS;
  case VDEV_OP_WAIT_VALUE:
    return te_vdev_wait_value_run(s, op);
  case VDEV_OP_EVENT_RECORD:
    event_record_run(op->u.ev.event);
    return TECORE_SUCCESS;
  case VDEV_OP_EVENT_WAIT:
    event_wait_run(op->u.ev.event);
    return TECORE_SUCCESS;
  case VDEV_OP_CHILD_GRAPH:
    return te_vdev_plan_run(s, op->u.graph.plan);
  case VDEV_OP_MARKER:
    te_vdev_marker_complete(op->u.marker.m);
    return TECORE_SUCCESS;
  case VDEV_OP_WAIT_MARKER:
    te_vdev_marker_wait(op->u.marker.m);
    return TECORE_SUCCESS;
  case VDEV_OP_BARRIER:
    te_vdev_barrier_wait(op);
    return TECORE_SUCCESS;
  case VDEV_OP_GRAPH_LAUNCH: {
    /* launches of one exec run one after another, as on the driver */
    if (op->u.graph.prev) te_vdev_marker_wait(op->u.graph.prev);
    tecore_result_t r = te_vdev_plan_run(s, op->u.graph.plan);
    te_vdev_marker_complete(op->u.graph.done);
    return r;
  }
  case VDEV_OP_NODE_TYPES_:
    break;
  }
  return TECORE_ERR_INTERNAL;
}

static const char *cond_name(tecore_wait_cond_t c) {
  switch (c) {
  case TECORE_WAIT_GEQ: return ">=";
  case TECORE_WAIT_EQ: return "==";
  case TECORE_WAIT_AND: return "&";
  case TECORE_WAIT_NOR: return "nor";
  }
  return "?";
}

void te_vdev_op_label(const struct vdev_op *op, char *buf, size_t n) {
  switch (op->type) {
  case VDEV_OP_KERNEL: {
    const struct tecore_launch_cfg *c = &op->u.kernel.cfg;
    snprintf(buf, n, "kernel\\n%s\\ngrid %ux%ux%u block %ux%ux%u\\nshared %u B, %u params",
             op->u.kernel.def->name, c->grid[0], c->grid[1], c->grid[2], c->block[0],
             c->block[1], c->block[2], c->shared_bytes, op->u.kernel.def->nparams);
    break;
  }
  case VDEV_OP_MEMCPY:
    snprintf(buf, n, "memcpy\\n%zu bytes\\n0x%" PRIx64 " -> 0x%" PRIx64, op->u.copy.bytes,
             op->u.copy.src, op->u.copy.dst);
    break;
  case VDEV_OP_MEMSET:
    snprintf(buf, n, "memset\\n%zu x %u bytes = 0x%x\\nat 0x%" PRIx64, op->u.set.count,
             op->u.set.elem, op->u.set.value, op->u.set.dst);
    break;
  case VDEV_OP_WRITE_VALUE:
    snprintf(buf, n, "write_value%u\\n*0x%" PRIx64 " = %" PRIu64, op->u.mem.width,
             op->u.mem.addr, op->u.mem.value);
    break;
  case VDEV_OP_WAIT_VALUE:
    snprintf(buf, n, "wait_value%u\\n*0x%" PRIx64 " %s %" PRIu64, op->u.mem.width,
             op->u.mem.addr, cond_name(op->u.mem.cond), op->u.mem.value);
    break;
  case VDEV_OP_EVENT_RECORD:
  case VDEV_OP_EVENT_WAIT:
    snprintf(buf, n, "%s\\nevent %p", te_vdev_op_name(op->type), (void *)op->u.ev.event);
    break;
  case VDEV_OP_CHILD_GRAPH:
    snprintf(buf, n, "graph\\n%zu nodes", op->u.graph.plan->count);
    break;
  default:
    snprintf(buf, n, "%s", te_vdev_op_name(op->type));
    break;
  }
}
