/* SPDX-License-Identifier: Apache-2.0 */
/* te/tunable.h -- the registry of environment tunables.
 *
 * Every knob libte reads from the environment is registered once with a
 * name, its environment variable, a default, bounds and a help string.
 * The variable is read once, on first use; an invalid value is logged
 * (WARN) and the default used.  te-info -e lists the registry.
 * libtegraph and libtecomm register their own tunables here, with the
 * same macros (TECORE_TUNABLE_INT, TECORE_TUNABLE_STR below).
 *
 * Names: a variable carries its library's prefix (TECORE_, TEGRAPH_,
 * TECOMM_; TE_ only for what all share: TE_DEVICE, TE_DEBUG*).  A renamed
 * variable keeps its old name in old_env for one release: the old name is
 * still read when the new one is unset, with a deprecation warning in the
 * log, and te-info -e lists it as deprecated. */
#ifndef TE_TUNABLE_H
#define TE_TUNABLE_H

#include <stdint.h>
#include <te/result.h>
#include <te/deprecated.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum tecore_tunable_type {
  TECORE_TUNABLE_INT = 0,   /* decimal or 0x-hex integer within [min, max] */
  TECORE_TUNABLE_STRING = 1 /* free text, or one of the '|'-separated choices */
} tecore_tunable_type_t;

/* A tunable.  The caller owns the storage (normally static) and fills the
 * first block; the library owns the rest.  Register it once before use. */
struct tecore_tunable {
  const char *name;            /* short name, e.g. "device" */
  const char *env;             /* environment variable, e.g. "TE_DEVICE" */
  tecore_tunable_type_t type;
  int64_t def_int;             /* INT: default */
  int64_t min, max;            /* INT: accepted range, inclusive */
  const char *def_str;         /* STRING: default (may be "") */
  const char *choices;         /* STRING: "a|b|c" or NULL for free text */
  const char *help;            /* one line */
  const char *old_env;         /* deprecated former name, still read; or NULL */
  /* library-owned below */
  int state_;                  /* 0 unread, 1 reading, 2 read */
  int64_t int_;
  const char *str_;
  struct tecore_tunable *next_;
};

/* Adds t to the registry (idempotent for the same object).  Errors:
 * TECORE_ERR_INVALID when a field is missing, when the default lies
 * outside the bounds, or when another tunable has the same env name. */
tecore_result_t tecore_tunable_register(struct tecore_tunable *t);
/* The value of an INT tunable (read from the environment on first call). */
int64_t tecore_tunable_int(struct tecore_tunable *t);
/* The value of a STRING tunable; the string lives as long as the process. */
const char *tecore_tunable_str(struct tecore_tunable *t);

/* Read-only view of one registered tunable, for listing. */
struct tecore_tunable_info {
  const char *name, *env, *help, *choices;
  tecore_tunable_type_t type;
  int64_t def_int, min, max, value_int;
  const char *def_str, *value_str;
  int set_in_env;              /* 1 when the variable (or old_env) is set */
  const char *old_env;         /* deprecated former name, or NULL */
};
/* Number of registered tunables. */
tecore_result_t tecore_tunable_count(int *count);
/* Fills *info for tunable index (0..count-1, sorted by env name). */
tecore_result_t tecore_tunable_get_info(int index, struct tecore_tunable_info *info);
#if TE_DEPRECATED_NAMES_VISIBLE
/* Deprecated former name of tecore_tunable_get_info (te/deprecated.h). */
tecore_result_t tecore_tunable_info(int index, struct tecore_tunable_info *info)
    TE_DEPRECATED("use tecore_tunable_get_info");
#endif
/* Looks a tunable up by its environment variable name (or its deprecated
 * former name). */
tecore_result_t tecore_tunable_find(const char *env, struct tecore_tunable_info *info);

/* TECORE_TUNABLE_INT(var, "TEGRAPH_X", def, lo, hi, "help") defines a
 * static tunable `var` registered when the library that defines it loads
 * (a GCC/Clang constructor), so te-info -e lists it before first use; read
 * it with tecore_tunable_int(&var).  TECORE_TUNABLE_STR(var, env, def,
 * "a|b" or NULL, "help") the same for strings.  The _RENAMED forms take
 * the deprecated former name after the new one. */
#define TECORE_TUNABLE_INT_RENAMED(var, envname, oldname, def, lo, hi, helptext) \
  static struct tecore_tunable var = {                                         \
      .name = #var, .env = envname, .type = TECORE_TUNABLE_INT,                \
      .def_int = (def), .min = (lo), .max = (hi), .help = helptext,            \
      .old_env = oldname};                                                     \
  __attribute__((constructor)) static void var##_register_(void) {             \
    (void)tecore_tunable_register(&var);                                       \
  }
#define TECORE_TUNABLE_STR_RENAMED(var, envname, oldname, def, choicelist, helptext) \
  static struct tecore_tunable var = {                                         \
      .name = #var, .env = envname, .type = TECORE_TUNABLE_STRING,             \
      .def_str = (def), .choices = (choicelist), .help = helptext,             \
      .old_env = oldname};                                                     \
  __attribute__((constructor)) static void var##_register_(void) {             \
    (void)tecore_tunable_register(&var);                                       \
  }
#define TECORE_TUNABLE_INT(var, envname, def, lo, hi, helptext)                \
  TECORE_TUNABLE_INT_RENAMED(var, envname, NULL, def, lo, hi, helptext)
#define TECORE_TUNABLE_STR(var, envname, def, choicelist, helptext)            \
  TECORE_TUNABLE_STR_RENAMED(var, envname, NULL, def, choicelist, helptext)

#ifdef __cplusplus
}
#endif
#endif
