/* SPDX-License-Identifier: Apache-2.0 */
/* tunable.c -- the registry of environment tunables (TECORE_TUNABLE_*,
 * TE_PARAM_*).  A tunable is read from the environment once, on first
 * use; an invalid value is logged and replaced by the default.  A renamed
 * tunable's former name (old_env) is read when the new one is unset, with
 * a deprecation warning, for one release.  Registration happens in
 * library constructors, so the list is complete before main() runs and
 * te-info -e shows every knob of every loaded libte library. */
#include "internal.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static pthread_mutex_t tun_lock = PTHREAD_MUTEX_INITIALIZER;
static struct tecore_tunable *tun_head; /* sorted by env name */
static int tun_count;

/* 1 when name is the env or the old_env of a registered tunable other
 * than t (under tun_lock). */
static int name_taken(const struct tecore_tunable *t, const char *name) {
  for (const struct tecore_tunable *u = tun_head; u; u = u->next_)
    if (u != t && (strcmp(u->env, name) == 0 || (u->old_env && strcmp(u->old_env, name) == 0)))
      return 1;
  return 0;
}
static const char *match_choice(const char *choices, const char *s);

TE_EXPORT tecore_result_t tecore_tunable_register(struct tecore_tunable *t) {
  TE_ARG(t, "tecore_tunable_register: t is NULL");
  TE_ARG(t->name && t->name[0], "tecore_tunable_register: name is empty");
  TE_ARG(t->env && t->env[0], "tecore_tunable_register: env is empty");
  TE_ARG(t->help && t->help[0], "tecore_tunable_register: %s has no help text", t->env);
  TE_ARG(t->type == TECORE_TUNABLE_INT || t->type == TECORE_TUNABLE_STRING,
         "tecore_tunable_register: %s has an unknown type %d", t->env, (int)t->type);
  if (t->type == TECORE_TUNABLE_INT)
    TE_ARG(t->min <= t->def_int && t->def_int <= t->max,
           "tecore_tunable_register: %s default %lld outside [%lld, %lld]", t->env,
           (long long)t->def_int, (long long)t->min, (long long)t->max);
  else
    TE_ARG(t->def_str, "tecore_tunable_register: %s has no default string", t->env);
  TE_ARG(!t->old_env || (t->old_env[0] && strcmp(t->old_env, t->env) != 0),
         "tecore_tunable_register: %s: old_env is empty or the same name", t->env);
  TE_ARG(t->type != TECORE_TUNABLE_STRING || !t->choices || match_choice(t->choices, t->def_str),
         "tecore_tunable_register: %s default \"%s\" is not one of %s", t->env, t->def_str,
         t->choices);
  pthread_mutex_lock(&tun_lock);
  if (t->old_env && name_taken(t, t->old_env)) {
    pthread_mutex_unlock(&tun_lock);
    return TE_ERR(TECORE_ERR_INVALID, "tecore_tunable_register: %s: old_env %s is already "
                  "registered", t->env, t->old_env);
  }
  struct tecore_tunable **pp = &tun_head;
  while (*pp && strcmp((*pp)->env, t->env) < 0) pp = &(*pp)->next_;
  if (*pp == t) {
    pthread_mutex_unlock(&tun_lock);
    return TECORE_SUCCESS;
  }
  if ((*pp && strcmp((*pp)->env, t->env) == 0) || name_taken(t, t->env)) {
    pthread_mutex_unlock(&tun_lock);
    return TE_ERR(TECORE_ERR_INVALID, "tecore_tunable_register: %s is already registered",
                  t->env);
  }
  t->next_ = *pp;
  *pp = t;
  tun_count++;
  pthread_mutex_unlock(&tun_lock);
  return TECORE_SUCCESS;
}

/* Returns 1 and sets *out when s is a whole decimal or 0x-hex integer. */
static int parse_int(const char *s, int64_t *out) {
  char *end = NULL;
  errno = 0;
  /* base 0 would read 010 as octal 8 and refuse 08: the help says
   * decimal or 0x-hex, so a leading 0 is just a digit */
  const char *d = s;
  while (*d == ' ' || *d == '\t') d++;
  if (*d == '+' || *d == '-') d++;
  int hex = d[0] == '0' && (d[1] == 'x' || d[1] == 'X');
  long long v = strtoll(s, &end, hex ? 16 : 10);
  if (errno || end == s) return 0;
  while (*end == ' ' || *end == '\t') end++;
  if (*end) return 0;
  *out = v;
  return 1;
}

/* Returns the canonical spelling of s among "a|b|c", or NULL. */
static const char *match_choice(const char *choices, const char *s) {
  const char *p = choices;
  size_t n = strlen(s);
  while (*p) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && strncasecmp(p, s, n) == 0) return p;
    p += len + (bar ? 1 : 0);
  }
  return NULL;
}

/* The value t reads: its variable, else its deprecated former name (then
 * *name is that name and *dep says so; also when the old name is set
 * beside the new one and ignored). */
static const char *tunable_getenv(const struct tecore_tunable *t, const char **name, char *dep,
                                  size_t n) {
  const char *v = getenv(t->env), *old = t->old_env ? getenv(t->old_env) : NULL;
  *name = t->env;
  if (!old) return v;
  if (v) {
    snprintf(dep, n, "%s is deprecated and ignored: %s is set (the new name)", t->old_env,
             t->env);
    return v;
  }
  snprintf(dep, n, "%s is deprecated: use %s (the old name works until the next release)",
           t->old_env, t->env);
  *name = t->old_env;
  return old;
}

/* Reads t once.  Warnings are logged after the lock is dropped (the log
 * reads its own tunables). */
static void tunable_read(struct tecore_tunable *t) {
  char warn[512] = "", dep[256] = "";
  int saved = errno;
  pthread_mutex_lock(&tun_lock);
  if (t->state_ == 2) {
    pthread_mutex_unlock(&tun_lock);
    return;
  }
  const char *name;
  const char *v = tunable_getenv(t, &name, dep, sizeof dep);
  if (t->type == TECORE_TUNABLE_INT) {
    int64_t x = t->def_int;
    if (v && *v) {
      if (!parse_int(v, &x))
        snprintf(warn, sizeof warn, "%s=\"%s\" is not an integer; using %lld", name, v,
                 (long long)(x = t->def_int));
      else if (x < t->min || x > t->max)
        snprintf(warn, sizeof warn, "%s=%s is outside [%lld, %lld]; using %lld", name, v,
                 (long long)t->min, (long long)t->max, (long long)(x = t->def_int));
    }
    t->int_ = x;
  } else {
    const char *s = t->def_str;
    if (v) {
      if (!t->choices) {
        s = strdup(v);
        if (!s) s = t->def_str;
      } else {
        const char *c = match_choice(t->choices, v);
        if (c) {
          size_t len = strcspn(c, "|");
          char *copy = strndup(c, len);
          s = copy ? copy : t->def_str;
        } else {
          snprintf(warn, sizeof warn, "%s=\"%s\" is not one of %s; using \"%s\"", name, v,
                   t->choices, t->def_str);
        }
      }
    }
    t->str_ = s; /* strings live as long as the process */
  }
  __atomic_store_n(&t->state_, 2, __ATOMIC_RELEASE);
  pthread_mutex_unlock(&tun_lock);
  if (dep[0]) TE_WARN(TECORE_SUBSYS_TUNE, "%s", dep);
  if (warn[0]) TE_WARN(TECORE_SUBSYS_TUNE, "%s", warn);
  errno = saved;
}

TE_EXPORT int64_t tecore_tunable_int(struct tecore_tunable *t) {
  if (!t) return 0;
  if (__atomic_load_n(&t->state_, __ATOMIC_ACQUIRE) != 2) tunable_read(t);
  return t->type == TECORE_TUNABLE_INT ? t->int_ : 0;
}

TE_EXPORT const char *tecore_tunable_str(struct tecore_tunable *t) {
  if (!t) return "";
  if (__atomic_load_n(&t->state_, __ATOMIC_ACQUIRE) != 2) tunable_read(t);
  return t->type == TECORE_TUNABLE_STRING ? t->str_ : "";
}

TE_EXPORT tecore_result_t tecore_tunable_count(int *count) {
  TE_ARG(count, "tecore_tunable_count: count is NULL");
  pthread_mutex_lock(&tun_lock);
  *count = tun_count;
  pthread_mutex_unlock(&tun_lock);
  return TECORE_SUCCESS;
}

static void fill_info(struct tecore_tunable *t, struct tecore_tunable_info *info) {
  memset(info, 0, sizeof *info);
  info->name = t->name;
  info->env = t->env;
  info->help = t->help;
  info->choices = t->choices;
  info->type = t->type;
  info->def_int = t->def_int;
  info->min = t->min;
  info->max = t->max;
  info->def_str = t->def_str;
  info->old_env = t->old_env;
  info->set_in_env = getenv(t->env) != NULL || (t->old_env && getenv(t->old_env) != NULL);
  if (t->type == TECORE_TUNABLE_INT)
    info->value_int = tecore_tunable_int(t);
  else
    info->value_str = tecore_tunable_str(t);
}

TE_EXPORT tecore_result_t tecore_tunable_get_info(int index, struct tecore_tunable_info *info) {
  TE_ARG(info, "tecore_tunable_get_info: info is NULL");
  pthread_mutex_lock(&tun_lock);
  struct tecore_tunable *t = tun_head;
  for (int i = 0; t && i < index; i++) t = t->next_;
  pthread_mutex_unlock(&tun_lock);
  TE_ARG(index >= 0 && t, "tecore_tunable_get_info: index %d outside [0, %d)", index, tun_count);
  fill_info(t, info);
  return TECORE_SUCCESS;
}

TE_EXPORT tecore_result_t tecore_tunable_find(const char *env, struct tecore_tunable_info *info) {
  TE_ARG(env, "tecore_tunable_find: env is NULL");
  TE_ARG(info, "tecore_tunable_find: info is NULL");
  pthread_mutex_lock(&tun_lock);
  struct tecore_tunable *t = tun_head;
  while (t && strcmp(t->env, env) != 0 && !(t->old_env && strcmp(t->old_env, env) == 0))
    t = t->next_;
  pthread_mutex_unlock(&tun_lock);
  if (!t) return TE_ERR(TECORE_ERR_INVALID, "tecore_tunable_find: no tunable %s", env);
  fill_info(t, info);
  return TECORE_SUCCESS;
}

/* tecore_fini: the strings read from the environment are freed and their
 * tunables marked unread (a later read reads the environment again). */
void te_tunables_fini(void) {
  pthread_mutex_lock(&tun_lock);
  for (struct tecore_tunable *t = tun_head; t; t = t->next_) {
    if (t->type != TECORE_TUNABLE_STRING || __atomic_load_n(&t->state_, __ATOMIC_ACQUIRE) != 2)
      continue;
    if (t->str_ && t->str_ != t->def_str) free((char *)t->str_);
    t->str_ = NULL;
    __atomic_store_n(&t->state_, 0, __ATOMIC_RELEASE);
  }
  pthread_mutex_unlock(&tun_lock);
}
