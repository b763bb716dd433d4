/* SPDX-License-Identifier: Apache-2.0 */
/* ops_registry.c -- the fuser's registration tables: implementations of
 * operation kinds that upper layers provide (libtecomm's AllReduce,
 * ReduceScatter, AllGather, or new kinds), and fusion patterns they add;
 * and the one lookup that gives a sequence any kind's definition, libtecore's
 * own (ops_kinds.c) or a registered one.
 * Both tables are process-wide and locked; a sequence copies what it uses
 * when it is built or planned, so later changes do not reach it. */
#include "ops/ops_internal.h"

#include <stdlib.h>
#include <string.h>

static pthread_mutex_t reg_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tecore_op_kind_def kinds[TECORE_OP_KIND_MAX];
static int kind_set[TECORE_OP_KIND_MAX];
static struct te_fusion *fusions;
static size_t nfusions, cap_fusions;

/* The communication slots: kinds libtecore names and leaves to an upper
 * layer (entries without executors). */
static int is_comm_kind(int k) {
  return k >= 0 && k < TECORE_OP_BUILTIN_COUNT_ && !te_builtin_kinds[k].def.forward;
}

/* libtecore's own kinds are entries with executors; the communication
 * slots' entries only name them. */
static const struct te_kind *builtin(int kind) {
  if (kind < 0 || kind >= TECORE_OP_BUILTIN_COUNT_ || !te_builtin_kinds[kind].def.forward)
    return NULL;
  return &te_builtin_kinds[kind];
}

TE_EXPORT const char *tecore_op_kind_name(int kind) {
  if (kind < 0 || kind >= TECORE_OP_KIND_MAX) return "?";
  if (builtin(kind)) return te_builtin_kinds[kind].def.name;
  const char *name = NULL;
  pthread_mutex_lock(&reg_lock);
  if (kind_set[kind]) name = kinds[kind].name;
  pthread_mutex_unlock(&reg_lock);
  if (name) return name;
  if (kind < TECORE_OP_BUILTIN_COUNT_) return te_builtin_kinds[kind].def.name;
  return "?";
}

int te_kind_lookup(int kind, struct te_kind *k) {
  if (kind < 0 || kind >= TECORE_OP_KIND_MAX) return 0;
  const struct te_kind *b = builtin(kind);
  if (b) {
    *k = *b;
    return 1;
  }
  pthread_mutex_lock(&reg_lock);
  int ok = kind_set[kind];
  if (ok) {
    k->def = kinds[kind];
    k->fp8 = 0;
    k->ctx_bytes = 0;   /* a registered kind's ctx stays the caller's */
  }
  pthread_mutex_unlock(&reg_lock);
  return ok;
}

/* What a definition must hold, as libtecore's own entries do. */
static tecore_result_t check_def(const struct tecore_op_kind_def *def, const char *fn) {
  TE_ARG(def->name && def->name[0], "%s: def->name is NULL or empty", fn);
  TE_ARG(def->forward, "%s: def->forward is NULL (kind %s)", fn, def->name);
  TE_ARG(def->backward, "%s: def->backward is NULL (kind %s)", fn, def->name);
  unsigned fields = TECORE_OP_FIELD_FEATURES | TECORE_OP_FIELD_BIAS | TECORE_OP_FIELD_EPSILON |
                    TECORE_OP_FIELD_SCALE | TECORE_OP_FIELD_SLOT | TECORE_OP_FIELD_CTX;
  unsigned roles = TECORE_OP_SLOT_MAKE | TECORE_OP_SLOT_ADD;
  unsigned flags = TECORE_OP_ALIAS_FORWARD | TECORE_OP_ALIAS_BACKWARD | roles |
                   TECORE_OP_BACKWARD_NO_INPUT | TECORE_OP_BACKWARD_OVERLAP |
                   TECORE_OP_BACKWARD_OUTPUT;
  TE_ARG((def->fields & ~fields) == 0, "%s: def->fields 0x%x has unknown bits (kind %s)", fn,
         def->fields, def->name);
  TE_ARG((def->flags & ~flags) == 0, "%s: def->flags 0x%x has unknown bits (kind %s)", fn,
         def->flags, def->name);
  TE_ARG((def->flags & roles) != roles, "%s: def->flags: kind %s both makes and adds a slot "
         "(TECORE_OP_SLOT_MAKE | TECORE_OP_SLOT_ADD; one role at most)", fn, def->name);
  TE_ARG(!(def->flags & roles) == !(def->fields & TECORE_OP_FIELD_SLOT),
         "%s: kind %s: a slot role (def->flags TECORE_OP_SLOT_*) and TECORE_OP_FIELD_SLOT "
         "(def->fields) go together", fn, def->name);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_ops_register_kind(int kind, const struct tecore_op_kind_def *def) {
  static const char fn[] = "tecore_ops_register_kind";
  TE_ARG(is_comm_kind(kind) || (kind >= TECORE_OP_USER_FIRST && kind < TECORE_OP_KIND_MAX),
         "%s: kind %d is neither a communication slot (TECORE_OP_ALLREDUCE, "
         "TECORE_OP_REDUCE_SCATTER, TECORE_OP_ALLGATHER, TECORE_OP_TP_COPY, TECORE_OP_TP_REDUCE) "
         "nor in [TECORE_OP_USER_FIRST = %d, "
         "TECORE_OP_KIND_MAX = %d)", fn, kind, TECORE_OP_USER_FIRST, TECORE_OP_KIND_MAX);
  if (def) TE_CHECK(check_def(def, fn));
  pthread_mutex_lock(&reg_lock);
  if (def && kind_set[kind]) {
    const char *old = kinds[kind].name;
    pthread_mutex_unlock(&reg_lock);
    return TE_ERR(TECORE_ERR_INVALID, "%s: kind %d is already registered (as \"%s\"); remove it "
                  "first (def NULL)", fn, kind, old);
  }
  if (def) {
    kinds[kind] = *def;
    kind_set[kind] = 1;
  } else {
    if (!kind_set[kind]) {
      pthread_mutex_unlock(&reg_lock);
      return TE_ERR(TECORE_ERR_INVALID, "%s: def is NULL (remove) but kind %d is not registered",
                    fn, kind);
    }
    memset(&kinds[kind], 0, sizeof kinds[kind]);
    kind_set[kind] = 0;
  }
  pthread_mutex_unlock(&reg_lock);
  return TECORE_SUCCESS;
}

static int builtin_fusion_named(const char *name) {
  for (size_t i = 0; i < te_builtin_fusion_count; i++)
    if (strcmp(te_builtin_fusions[i].def.name, name) == 0) return 1;
  return 0;
}

TE_EXPORT tecore_result_t tecore_ops_register_fusion(const struct tecore_fusion_def *def) {
  static const char fn[] = "tecore_ops_register_fusion";
  TE_ARG(def, "%s: def is NULL", fn);
  TE_ARG(def->name && def->name[0], "%s: def->name is NULL or empty", fn);
  TE_ARG(def->dir == TECORE_SEQ_FORWARD || def->dir == TECORE_SEQ_BACKWARD,
         "%s: def->dir is %d, not TECORE_SEQ_FORWARD or TECORE_SEQ_BACKWARD (pattern %s)", fn,
         (int)def->dir, def->name);
  TE_ARG(def->nops >= 1 && def->nops <= TECORE_FUSION_MAX_OPS,
         "%s: def->nops is %zu, not in 1..%d (pattern %s)", fn, def->nops, TECORE_FUSION_MAX_OPS,
         def->name);
  for (size_t i = 0; i < def->nops; i++)
    TE_ARG(def->kinds[i] >= 0 && def->kinds[i] < TECORE_OP_KIND_MAX,
           "%s: def->kinds[%zu] is %d, not an operation kind (pattern %s)", fn, i, def->kinds[i],
           def->name);
  TE_ARG(def->run, "%s: def->run is NULL (pattern %s)", fn, def->name);
  TE_ARG(!(def->flags & ~(TECORE_FUSION_WRITES_FP8 | TECORE_FUSION_ROWS |
                          TECORE_FUSION_GELU_EPILOGUE | TECORE_FUSION_QUANTIZES_INPUT |
                          TECORE_FUSION_INPUT_FP8_ONLY)),
         "%s: def->flags 0x%x has bits other than TECORE_FUSION_WRITES_FP8, "
         "TECORE_FUSION_ROWS, TECORE_FUSION_GELU_EPILOGUE, TECORE_FUSION_QUANTIZES_INPUT and "
         "TECORE_FUSION_INPUT_FP8_ONLY (pattern %s)", fn, def->flags, def->name);
  TE_ARG(!(def->flags & TECORE_FUSION_INPUT_FP8_ONLY) ||
             (def->flags & TECORE_FUSION_QUANTIZES_INPUT),
         "%s: def->flags TECORE_FUSION_INPUT_FP8_ONLY needs TECORE_FUSION_QUANTIZES_INPUT "
         "(pattern %s)", fn, def->name);
  TE_ARG(!(def->flags & TECORE_FUSION_ROWS) || def->dir == TECORE_SEQ_FORWARD,
         "%s: def->flags TECORE_FUSION_ROWS is for forward patterns (pattern %s)", fn,
         def->name);
  TE_ARG(!(def->flags & TECORE_FUSION_WRITES_FP8) || def->dir == TECORE_SEQ_FORWARD,
         "%s: def->flags TECORE_FUSION_WRITES_FP8 is for forward patterns (pattern %s)", fn,
         def->name);
  if (def->flags & TECORE_FUSION_QUANTIZES_INPUT) {
    size_t lins = 0;
    for (size_t i = 1; i < def->nops; i++) lins += def->kinds[i] == TECORE_OP_LINEAR;
    TE_ARG(def->dir == TECORE_SEQ_FORWARD && lins == 1 && def->kinds[0] != TECORE_OP_LINEAR,
           "%s: def->flags TECORE_FUSION_QUANTIZES_INPUT is for forward patterns with one "
           "Linear, not the first operation (pattern %s)", fn, def->name);
  }
  TE_ARG(def->priority >= 0 && def->priority <= 100,
         "%s: def->priority is %d, not in 0..100 (pattern %s)", fn, def->priority, def->name);
  TE_ARG(!builtin_fusion_named(def->name),
         "%s: def->name \"%s\" is the name of a built-in pattern", fn, def->name);
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < nfusions; i++)
    if (strcmp(fusions[i].def.name, def->name) == 0) {
      pthread_mutex_unlock(&reg_lock);
      return TE_ERR(TECORE_ERR_INVALID, "%s: a pattern named \"%s\" is already registered", fn,
                    def->name);
    }
  if (nfusions == cap_fusions) {
    size_t cap = cap_fusions ? 2 * cap_fusions : 8;
    struct te_fusion *p = realloc(fusions, cap * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&reg_lock);
      return TE_ERR(TECORE_ERR_NOMEM, "%s: out of memory", fn);
    }
    fusions = p;
    cap_fusions = cap;
  }
  memset(&fusions[nfusions], 0, sizeof fusions[nfusions]);
  fusions[nfusions].def = *def;
  fusions[nfusions].builtin_id = -1;
  nfusions++;
  pthread_mutex_unlock(&reg_lock);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_ops_unregister_fusion(const char *name) {
  static const char fn[] = "tecore_ops_unregister_fusion";
  TE_ARG(name && name[0], "%s: name is NULL or empty", fn);
  pthread_mutex_lock(&reg_lock);
  for (size_t i = 0; i < nfusions; i++)
    if (strcmp(fusions[i].def.name, name) == 0) {
      memmove(&fusions[i], &fusions[i + 1], (nfusions - i - 1) * sizeof fusions[0]);
      nfusions--;
      pthread_mutex_unlock(&reg_lock);
      return TECORE_SUCCESS;
    }
  pthread_mutex_unlock(&reg_lock);
  return TE_ERR(TECORE_ERR_INVALID, "%s: name: no registered pattern is called \"%s\"%s", fn,
                name, builtin_fusion_named(name) ? " (built-in patterns cannot be removed)" : "");
}

tecore_result_t te_fusions_snapshot(struct te_fusion **out, size_t *n) {
  pthread_mutex_lock(&reg_lock);
  struct te_fusion *p = NULL;
  if (nfusions) {
    p = malloc(nfusions * sizeof *p);
    if (!p) {
      pthread_mutex_unlock(&reg_lock);
      return TE_ERR(TECORE_ERR_NOMEM, "fusion planning: out of memory");
    }
    memcpy(p, fusions, nfusions * sizeof *p);
  }
  *n = nfusions;
  pthread_mutex_unlock(&reg_lock);
  *out = p;
  return TECORE_SUCCESS;
}
