/* SPDX-License-Identifier: Apache-2.0 */
/* graph_device.c -- executable graphs launched from the device
 * (TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH, tecore_graph_launch_device).
 *
 * A host launch of a graph costs host time that grows with its nodes (a
 * training step of 2000 kernels took 7-36 us on an H100); launched from
 * the device, the host queues one kernel node whatever the graph holds.
 * Above the backends live what both must agree on:
 *   - the node kinds a device-launchable graph may hold (kernel, memcpy,
 *     memset, child graph: the driver's rule), checked before the
 *     backend instantiates, so that vdev refuses what cuda would;
 *   - a record per such executable: the backend's launcher state, whether
 *     the executable changed since it was uploaded (an update or a node
 *     setter: the driver's device launch needs it uploaded again), and
 *     whether it was ever launched (the first launch waits, so that the
 *     device's refusal is that call's error).
 * Records go with their executable (tecore_graph_exec_destroy) or at
 * tecore_fini. */
#include "device/device_ops.h"
#include "device/graph_device.h"
#include <pthread.h>
#include <stdlib.h>

struct dl_rec {
  tecore_graph_exec_t exec;
  void *state;       /* the backend's (cuda: the launcher graph) */
  int dirty;         /* changed since its last upload */
  int launched;      /* launched from the device at least once */
  int chained;       /* graph chains that hold it (graph_chain.c) */
  struct dl_rec *next;
};

static pthread_mutex_t dl_lock = PTHREAD_MUTEX_INITIALIZER;
static struct dl_rec *dl_head;

static struct dl_rec *find_locked(tecore_graph_exec_t exec) {
  for (struct dl_rec *r = dl_head; r; r = r->next)
    if (r->exec == exec) return r;
  return NULL;
}

static const char *node_kind(tecore_graph_node_type_t t) {
  switch (t) {
  case TECORE_GRAPH_NODE_HOST: return "host function";
  case TECORE_GRAPH_NODE_EMPTY: return "empty";
  case TECORE_GRAPH_NODE_WAIT_EVENT: return "event wait";
  case TECORE_GRAPH_NODE_EVENT_RECORD: return "event record";
  case TECORE_GRAPH_NODE_EXT_SEMAS_SIGNAL: return "external semaphore signal";
  case TECORE_GRAPH_NODE_EXT_SEMAS_WAIT: return "external semaphore wait";
  case TECORE_GRAPH_NODE_MEM_ALLOC: return "memory allocation";
  case TECORE_GRAPH_NODE_MEM_FREE: return "memory free";
  case TECORE_GRAPH_NODE_BATCH_MEM_OP: return "stream memory operation";
  case TECORE_GRAPH_NODE_CONDITIONAL: return "conditional";
  default: return "unknown";
  }
}

tecore_result_t te_graph_device_check(const struct te_device_ops *o, tecore_graph_t graph,
                                      unsigned flags, const char *fn) {
  if (!(flags & TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH)) return TECORE_SUCCESS;
  TE_ARG(!(flags & TECORE_GRAPH_INSTANTIATE_AUTO_FREE_ON_LAUNCH),
         "%s: TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH does not go with AUTO_FREE_ON_LAUNCH", fn);
  size_t n = 0;
  TE_CHECK(o->graph_nodes(graph, NULL, 0, &n));
  TE_ARG(n > 0, "%s: a graph launched from the device needs at least one node; graph %p is "
         "empty", fn, (void *)graph);
  struct tecore_graph_node_desc *d = calloc(n, sizeof *d);
  if (!d) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  size_t got = n;
  tecore_result_t r = o->graph_nodes(graph, d, n, &got);
  for (size_t i = 0; r == TECORE_SUCCESS && i < got && i < n; i++) {
    tecore_graph_node_type_t t = d[i].type;
    if (t != TECORE_GRAPH_NODE_KERNEL && t != TECORE_GRAPH_NODE_MEMCPY &&
        t != TECORE_GRAPH_NODE_MEMSET && t != TECORE_GRAPH_NODE_GRAPH)
      r = TE_ERR(TECORE_ERR_INVALID, "%s: node %zu of graph %p is a%s %s node; a graph launched "
                 "from the device holds kernel, memcpy, memset and child-graph nodes only", fn, i,
                 (void *)graph, t == TECORE_GRAPH_NODE_EMPTY || t == TECORE_GRAPH_NODE_EVENT_RECORD
                     || t == TECORE_GRAPH_NODE_EXT_SEMAS_SIGNAL
                     || t == TECORE_GRAPH_NODE_EXT_SEMAS_WAIT ? "n" : "", node_kind(t));
  }
  free(d);
  return r;
}

tecore_result_t te_graph_device_add(const struct te_device_ops *o, tecore_graph_exec_t exec,
                                    const char *fn) {
  struct dl_rec *r = calloc(1, sizeof *r);
  if (!r) return TE_ERR(TECORE_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t res = o->graph_device_prepare(exec, &r->state);
  if (res != TECORE_SUCCESS) {
    free(r);
    return res;
  }
  r->exec = exec;
  r->dirty = 1;   /* uploaded by the first device launch, whatever the flags */
  pthread_mutex_lock(&dl_lock);
  r->next = dl_head;
  dl_head = r;
  pthread_mutex_unlock(&dl_lock);
  return TECORE_SUCCESS;
}

void te_graph_device_forget(const struct te_device_ops *o, tecore_graph_exec_t exec) {
  pthread_mutex_lock(&dl_lock);
  struct dl_rec **p = &dl_head;
  while (*p && (*p)->exec != exec) p = &(*p)->next;
  struct dl_rec *r = *p;
  if (r) *p = r->next;
  pthread_mutex_unlock(&dl_lock);
  if (!r) return;
  if (r->state) (void)o->graph_device_release(r->state);
  free(r);
}

int te_graph_device_has(tecore_graph_exec_t exec) {
  pthread_mutex_lock(&dl_lock);
  int has = find_locked(exec) != NULL;
  pthread_mutex_unlock(&dl_lock);
  return has;
}

void te_graph_device_dirty(tecore_graph_exec_t exec) {
  pthread_mutex_lock(&dl_lock);
  struct dl_rec *r = find_locked(exec);
  if (r) r->dirty = 1;
  pthread_mutex_unlock(&dl_lock);
}

tecore_result_t te_graph_device_chain(tecore_graph_exec_t exec, int delta, const char *fn) {
  pthread_mutex_lock(&dl_lock);
  struct dl_rec *r = find_locked(exec);
  if (r) r->chained += delta;
  pthread_mutex_unlock(&dl_lock);
  if (!r)
    return TE_ERR(TECORE_ERR_INVALID, "%s: exec %p was not instantiated with "
                  "TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH (or is destroyed)", fn, (void *)exec);
  return TECORE_SUCCESS;
}

int te_graph_device_chained(tecore_graph_exec_t exec) {
  pthread_mutex_lock(&dl_lock);
  struct dl_rec *r = find_locked(exec);
  int n = r ? r->chained : 0;
  pthread_mutex_unlock(&dl_lock);
  return n;
}

int te_graph_device_take_dirty(tecore_graph_exec_t exec) {
  pthread_mutex_lock(&dl_lock);
  struct dl_rec *r = find_locked(exec);
  int d = r ? r->dirty : 0;
  if (r) r->dirty = 0;
  pthread_mutex_unlock(&dl_lock);
  return d;
}

/* tecore_fini, after the backend stopped: the records only (cuda leaves
 * the driver's objects to process exit). */
void te_graph_device_fini(void) {
  pthread_mutex_lock(&dl_lock);
  struct dl_rec *r = dl_head;
  dl_head = NULL;
  pthread_mutex_unlock(&dl_lock);
  while (r) {
    struct dl_rec *next = r->next;
    free(r);
    r = next;
  }
}

/* The code a device launch left, as this call's error. */
static tecore_result_t refused(unsigned code, tecore_graph_exec_t exec, int first) {
  return TE_ERR(TECORE_ERR_DRIVER, "tecore_graph_launch_device: the device refused %s launch of "
                "exec %p: CUDA error %u%s", first ? "the first" : "an earlier", (void *)exec,
                code, code == 1 ? " (invalid value: a launch of it still running, or it is not "
                "uploaded)" : "");
}

tecore_result_t te_graph_device_launch(const struct te_device_ops *o, tecore_graph_exec_t exec,
                                       tecore_stream_t stream) {
  static const char fn[] = "tecore_graph_launch_device";
  tecore_capture_status_t cs = TECORE_CAPTURE_NONE;
  TE_CHECK(o->stream_capture_status(stream, &cs));
  if (cs != TECORE_CAPTURE_NONE)
    return TE_ERR(TECORE_ERR_CAPTURE, "%s: stream %p is capturing; capture the graph's launch "
                  "with tecore_graph_launch", fn, (void *)stream);
  pthread_mutex_lock(&dl_lock);
  struct dl_rec *r = find_locked(exec);
  void *state = r ? r->state : NULL;
  int upload = r ? r->dirty : 0, first = r ? !r->launched : 0;
  if (r) r->dirty = 0, r->launched = 1;
  pthread_mutex_unlock(&dl_lock);
  if (!r)
    return TE_ERR(TECORE_ERR_INVALID, "%s: exec %p was not instantiated with "
                  "TECORE_GRAPH_INSTANTIATE_DEVICE_LAUNCH (or is destroyed)", fn, (void *)exec);
  unsigned code = 0;
  TE_CHECK(o->graph_device_status(state, &code));
  if (code) return refused(code, exec, 0);
  tecore_result_t res = o->graph_device_launch(exec, state, upload, stream);
  if (res != TECORE_SUCCESS) {
    if (upload) te_graph_device_dirty(exec);
    return res;
  }
  if (!first) return TECORE_SUCCESS;
  TE_CHECK(o->stream_synchronize(stream));
  TE_CHECK(o->graph_device_status(state, &code));
  return code ? refused(code, exec, 1) : TECORE_SUCCESS;
}
