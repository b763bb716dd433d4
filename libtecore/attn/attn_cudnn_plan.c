/* SPDX-License-Identifier: Apache-2.0 */
/* attn_cudnn_plan.c -- execution plans of the cuDNN attention backend,
 * built once per (context, direction, shape) and kept in a small LRU cache:
 * the operation graph (attn_cudnn_graph.c), the engine configurations that
 * heuristics mode A ranks, the first that finalizes into a plan, and the
 * workspace it needs.  A shape cuDNN refuses is cached too, with the
 * reason, so that supports() answers it again without rebuilding.
 *
 * One lock guards the cache; te_dnn_plan_get returns with it held so that
 * the caller binds the handle to its stream and enqueues the plan before
 * another thread may evict it or rebind the handle.  Plans are freed by
 * tecore_fini: the hook this file registers with the first handle frees
 * the plans, then the handles they name (attn_cudnn_load.c). */
#include "attn/attn_cudnn_api.h"

#include "internal.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#define TE_DNN_CACHE 32
#define TE_DNN_MAX_CFGS 8
_Static_assert(TE_DNN_MAX_CFGS == 8, "TECORE_CUDNN_ENGINE_CFG's range (attn_cudnn_lib.c)");

struct entry {
  int used;
  uint64_t tick;
  tecore_ctx_t ctx;
  int backward;
  struct te_dnn_shape shape;
  te_dnn_desc_t cfg;            /* the engine configuration the plan runs */
  struct te_dnn_plan plan;      /* plan.plan NULL: refused, see why */
  tecore_result_t code;
  char why[384];
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct entry cache[TE_DNN_CACHE];
static uint64_t ticks;
static int fini_registered;   /* under cache_lock */

static size_t align256(size_t n) { return (n + 255) & ~(size_t)255; }

static void entry_free(struct entry *e) {
  if (e->plan.plan) (void)te_dnn.p_cudnnBackendDestroyDescriptor(e->plan.plan);
  if (e->cfg) (void)te_dnn.p_cudnnBackendDestroyDescriptor(e->cfg);
  te_dnn_graph_free(&e->plan.graph);
  memset(e, 0, sizeof *e);
}

/* tecore_fini hook: the plans first (they name the handles), then the
 * handles; the backend is still up, so cuDNN may free device memory. */
static void dnn_fini(void *arg) {
  (void)arg;
  pthread_mutex_lock(&cache_lock);
  for (int i = 0; i < TE_DNN_CACHE; i++)
    if (cache[i].used) entry_free(&cache[i]);
  pthread_mutex_unlock(&cache_lock);
  te_dnn_handles_free();
}

static void refuse(struct entry *e, te_dnn_status_t s, const char *fn) {
  char buf[256];
  te_dnn_describe(s, fn, buf, sizeof buf);
  snprintf(e->why, sizeof e->why, "cuDNN refused the %s graph: %s",
           e->backward ? "backward" : "forward", buf);
  e->code = te_dnn_result(s);
}

/* The engine's global index, for the log. */
static int64_t engine_index(te_dnn_desc_t cfg) {
  te_dnn_desc_t eng = NULL;
  int64_t n = 0, idx = -1;
  if (te_dnn.p_cudnnBackendCreateDescriptor(TE_DNN_ENGINE_DESCRIPTOR, &eng) != TE_DNN_SUCCESS)
    return -1;
  if (te_dnn.p_cudnnBackendGetAttribute(cfg, TE_DNN_ATTR_ENGINECFG_ENGINE,
                                        TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &n, &eng) == 0)
    (void)te_dnn.p_cudnnBackendGetAttribute(eng, TE_DNN_ATTR_ENGINE_GLOBAL_INDEX,
                                            TE_DNN_TYPE_INT64, 1, &n, &idx);
  (void)te_dnn.p_cudnnBackendDestroyDescriptor(eng);
  return idx;
}

/* Heuristics, then the first configuration that finalizes into a plan. */
static void choose_plan(struct entry *e, te_dnn_handle_t h) {
  te_dnn_desc_t heur = NULL, cfgs[TE_DNN_MAX_CFGS] = {0};
  int64_t count = 0, got = 0;
  int mode = TE_DNN_HEUR_MODE_A;
  te_dnn_status_t s = te_dnn.p_cudnnBackendCreateDescriptor(TE_DNN_ENGINEHEUR_DESCRIPTOR, &heur);
  if (s == 0)
    s = te_dnn.p_cudnnBackendSetAttribute(heur, TE_DNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
                                          TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                          &e->plan.graph.opgraph);
  if (s == 0)
    s = te_dnn.p_cudnnBackendSetAttribute(heur, TE_DNN_ATTR_ENGINEHEUR_MODE,
                                          TE_DNN_TYPE_HEUR_MODE, 1, &mode);
  if (s == 0) s = te_dnn.p_cudnnBackendFinalize(heur);
  if (s == 0)
    s = te_dnn.p_cudnnBackendGetAttribute(heur, TE_DNN_ATTR_ENGINEHEUR_RESULTS,
                                          TE_DNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, NULL);
  if (s != 0) {
    refuse(e, s, "engine heuristics");
    goto out;
  }
  if (count > TE_DNN_MAX_CFGS) count = TE_DNN_MAX_CFGS;
  for (int64_t i = 0; i < count && s == 0; i++)
    s = te_dnn.p_cudnnBackendCreateDescriptor(TE_DNN_ENGINECFG_DESCRIPTOR, &cfgs[i]);
  if (s == 0 && count > 0)
    s = te_dnn.p_cudnnBackendGetAttribute(heur, TE_DNN_ATTR_ENGINEHEUR_RESULTS,
                                          TE_DNN_TYPE_BACKEND_DESCRIPTOR, count, &got, cfgs);
  if (s != 0) {
    refuse(e, s, "engine heuristics results");
    goto out;
  }
  if (got == 0) {
    snprintf(e->why, sizeof e->why, "cuDNN's heuristics offer no engine for the %s graph",
             e->backward ? "backward" : "forward");
    e->code = TECORE_ERR_NOT_SUPPORTED;
    goto out;
  }
  te_dnn_status_t first = 0;
  /* the skip-th configuration that finalizes (TECORE_CUDNN_ENGINE_CFG),
   * or the last one that does */
  int64_t skip = te_dnn_engine_cfg(), ok = 0;
  for (int64_t i = 0; i < got && (!e->plan.plan || ok <= skip); i++) {
    te_dnn_desc_t plan = NULL;
    s = te_dnn.p_cudnnBackendCreateDescriptor(TE_DNN_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (s == 0)
      s = te_dnn.p_cudnnBackendSetAttribute(plan, TE_DNN_ATTR_EXECUTION_PLAN_HANDLE,
                                            TE_DNN_TYPE_HANDLE, 1, &h);
    if (s == 0)
      s = te_dnn.p_cudnnBackendSetAttribute(plan, TE_DNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
                                            TE_DNN_TYPE_BACKEND_DESCRIPTOR, 1, &cfgs[i]);
    if (s == 0) s = te_dnn.p_cudnnBackendFinalize(plan);
    if (s == 0) {
      ok++;
      if (e->plan.plan) (void)te_dnn.p_cudnnBackendDestroyDescriptor(e->plan.plan);
      if (e->cfg) (void)te_dnn.p_cudnnBackendDestroyDescriptor(e->cfg);
      e->plan.plan = plan;
      e->cfg = cfgs[i];
      cfgs[i] = NULL;
    } else {
      if (!first) first = s;
      if (plan) (void)te_dnn.p_cudnnBackendDestroyDescriptor(plan);
    }
  }
  if (!e->plan.plan) {
    refuse(e, first, "cudnnBackendFinalize(execution plan)");
    goto out;
  }
  int64_t ws = 0, n = 0;
  s = te_dnn.p_cudnnBackendGetAttribute(e->plan.plan, TE_DNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                                        TE_DNN_TYPE_INT64, 1, &n, &ws);
  if (s != 0) {
    refuse(e, s, "workspace size of the plan");
    (void)te_dnn.p_cudnnBackendDestroyDescriptor(e->plan.plan);
    e->plan.plan = NULL;
    goto out;
  }
  e->plan.engine_ws = (size_t)ws;
  e->plan.engine = engine_index(e->cfg);
  TE_INFO(TECORE_SUBSYS_KERNEL, "attention: cuDNN's heuristics offered %lld %s configurations, "
          "%lld tried finalized; engine %lld runs", (long long)got,
          e->backward ? "backward" : "forward", (long long)ok, (long long)e->plan.engine);
out:
  for (int i = 0; i < TE_DNN_MAX_CFGS; i++)
    if (cfgs[i]) (void)te_dnn.p_cudnnBackendDestroyDescriptor(cfgs[i]);
  if (heur) (void)te_dnn.p_cudnnBackendDestroyDescriptor(heur);
}

static const char *dtype_name(int dt) {
  return dt == TE_DNN_DATA_BFLOAT16 ? "bf16" : dt == TE_DNN_DATA_HALF ? "f16" : "e4m3";
}

/* The graph's operations in order, one log line (TE_DEBUG=INFO), so that a
 * refused graph on a new cuDNN can be compared with the frontend's. */
static void log_ops(const struct entry *e) {
  const struct te_dnn_graph *g = &e->plan.graph;
  char line[TE_DNN_MAX_OPS * 13 + 1];
  size_t at = 0;
  line[0] = 0;
  for (int i = 0; i < g->nops && at + 14 < sizeof line; i++)
    at += (size_t)snprintf(line + at, sizeof line - at, "%s%s", i ? " " : "", g->opnames[i]);
  TE_INFO(TECORE_SUBSYS_KERNEL, "attention: cuDNN %s %s graph, %d operations: %s",
          e->backward ? "bwd" : "fwd", dtype_name(e->shape.dtype), g->nops, line);
}

static void build(struct entry *e, te_dnn_handle_t h) {
  e->plan.handle = h;
  if (te_dnn_graph_build(&e->plan.graph, h, &e->shape, e->backward) != 0) {
    snprintf(e->why, sizeof e->why, "cuDNN refused the %s graph: %s",
             e->backward ? "backward" : "forward", e->plan.graph.failed);
    e->code = te_dnn_result(e->plan.graph.status);
    log_ops(e);
    return;
  }
  log_ops(e);
  choose_plan(e, h);
  const struct te_dnn_shape *s = &e->shape;
  if (!e->plan.plan) {
    TE_INFO(TECORE_SUBSYS_KERNEL, "attention: cuDNN %s %s b=%ld h=%ld/%ld s=%ld/%ld d=%ld%s: %s",
            e->backward ? "bwd" : "fwd", dtype_name(s->dtype), (long)s->b, (long)s->hq, (long)s->hk, (long)s->sq,
            (long)s->skv, (long)s->d, s->causal ? " causal" : "", e->why);
    return;
  }
  const struct te_dnn_graph *g = &e->plan.graph;
  e->plan.ws_bytes = align256(g->ws_sum_bytes) + align256(g->ws_dqacc_bytes) +
                     align256(g->ws_ragged_bytes) + align256(g->ws_stats_bytes) +
                     align256(g->ws_slots_bytes) + align256(g->ws_o8_bytes) + e->plan.engine_ws;
  TE_INFO(TECORE_SUBSYS_KERNEL,
          "attention: cuDNN %s plan b=%ld h=%ld/%ld s=%ld/%ld d=%ld %s%s window=%ld: engine %ld, "
          "%d operations, workspace %zu bytes (engine %zu)",
          e->backward ? "bwd" : "fwd", (long)s->b, (long)s->hq, (long)s->hk, (long)s->sq,
          (long)s->skv, (long)s->d, dtype_name(s->dtype),
          s->causal ? " causal" : "", s->window_left, (long)e->plan.engine, g->nops,
          e->plan.ws_bytes, e->plan.engine_ws);
}

static struct entry *lookup(tecore_ctx_t ctx, const struct te_dnn_shape *s, int backward) {
  for (int i = 0; i < TE_DNN_CACHE; i++) {
    struct entry *e = &cache[i];
    if (e->used && e->ctx == ctx && e->backward == backward && !memcmp(&e->shape, s, sizeof *s))
      return e;
  }
  return NULL;
}

/* A free slot, or the least recently used one, emptied. */
static struct entry *victim(void) {
  struct entry *v = &cache[0];
  for (int i = 0; i < TE_DNN_CACHE; i++) {
    if (!cache[i].used) return &cache[i];
    if (cache[i].tick < v->tick) v = &cache[i];
  }
  entry_free(v);
  return v;
}

struct te_dnn_plan *te_dnn_plan_get(const struct te_dnn_shape *s, int backward, int build_ok,
                                    char *why, size_t why_len, tecore_result_t *why_code) {
  *why_code = TECORE_ERR_NOT_SUPPORTED;
  te_dnn_handle_t h = te_dnn_handle(why, why_len);
  if (!h) return NULL;
  /* a handle exists: the hook that frees it (with the plans) is due */
  pthread_mutex_lock(&cache_lock);
  if (!fini_registered && tecore_fini_register(dnn_fini, NULL) == TECORE_SUCCESS)
    fini_registered = 1;
  pthread_mutex_unlock(&cache_lock);
  tecore_ctx_t ctx = NULL;
  if (tecore_ctx_get_current(&ctx) != TECORE_SUCCESS) {
    snprintf(why, why_len, "no current context: %s", tecore_last_error());
    return NULL;
  }
  pthread_mutex_lock(&cache_lock);
  struct entry *e = lookup(ctx, s, backward);
  if (!e && !build_ok) {
    pthread_mutex_unlock(&cache_lock);
    snprintf(why, why_len, "no cuDNN plan for this %s shape yet, and plans are not built while "
             "the stream captures: run the shape once (or ask for its workspace size) before "
             "capturing", backward ? "backward" : "forward");
    *why_code = TECORE_ERR_CAPTURE;
    return NULL;
  }
  if (!e) {
    e = victim();
    e->used = 1;
    e->ctx = ctx;
    e->backward = backward;
    e->shape = *s;
    int tok = te_dnn_relax_capture();
    build(e, h);
    te_dnn_restore_capture(tok);
  }
  e->tick = ++ticks;
  if (!e->plan.plan) {
    snprintf(why, why_len, "%s", e->why);
    *why_code = e->code;
    pthread_mutex_unlock(&cache_lock);
    return NULL;
  }
  return &e->plan;
}

void te_dnn_plan_release(void) { pthread_mutex_unlock(&cache_lock); }
