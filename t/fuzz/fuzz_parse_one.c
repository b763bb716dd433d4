/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_parse_one.c -- one input of the byte-level fuzzer of libtecore's
 * parsers, shared by the plain driver (fuzz_parse.c) and the optional
 * libFuzzer entry point (fuzz_parse_libfuzzer.c).
 *
 * The input's first byte picks a target, the rest are its fields, read in
 * order (zeros once the input runs out):
 *   0  DLPack: a DLTensor with every field from the input (ndim, device,
 *      dtype code/bits/lanes, shape, strides, byte_offset, data) through
 *      tecore_tensor_from_dlpack, and an accepted one back through
 *      tecore_tensor_to_dlpack
 *   1  tensor descriptors: a struct tecore_tensor made of input bytes
 *      through tecore_tensor_validate, _numel, _2d, _scale_shape,
 *      _to_dlpack, and tecore_tensor_init with an input shape
 *   2  recipes: a struct tecore_recipe of input bytes through
 *      tecore_recipe_validate, _dtype, _apply
 *   3  integer tunables: a tunable registered with input bounds and
 *      default, its variable set to input text, then read
 *   4  string tunables: input choices and default, then read
 *   5  the log's environment (TE_DEBUG, TE_DEBUG_SUBSYS) set to input
 *      text, then log lines of every level and subsystem; and lookups of
 *      tunables and names by input values
 *   6  libtecomm's bootstrap and mesh messages: headers, the handshake's
 *      checks, host names (fuzz_parse_wire.c)
 *   7  te-gpt's safetensors checkpoints (fuzz_parse_st.c)
 * Target 5 means something only as the first input of a process (the log
 * reads its environment once); the drivers give each run a fresh process.
 *
 * The oracle: results are TECORE_SUCCESS or TECORE_ERR_INVALID (plus the
 * documented NOT_SUPPORTED), a failure leaves a detail and leaves the
 * out-parameters as they were, an accepted DLPack tensor describes the
 * same memory and shape and its bytes fit in the address space, a
 * tunable's value is the one its text spells when that is a valid value
 * and the default otherwise, names are never NULL. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include "fuzz_parse.h"

#include <te/core.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>
#include <strings.h>

struct rd {
  const uint8_t *p;
  size_t n;
};

static uint8_t rd_u8(struct rd *r) {
  if (!r->n) return 0;
  r->n--;
  return *r->p++;
}

static uint64_t rd_bytes(struct rd *r, unsigned k) {
  uint64_t v = 0;
  for (unsigned i = 0; i < k; i++) v |= (uint64_t)rd_u8(r) << (8 * i);
  return v;
}

static uint64_t rd_u64(struct rd *r) { return rd_bytes(r, 8); }

/* A 64-bit value biased towards the edges that break size arithmetic. */
static int64_t rd_i64_edge(struct rd *r) {
  static const uint64_t edge[] = {0,
                                  1,
                                  2,
                                  3,
                                  16,
                                  32,
                                  128,
                                  (uint64_t)-1,
                                  (uint64_t)1 << 31,
                                  (uint64_t)1 << 32,
                                  ((uint64_t)1 << 32) + 1,
                                  (uint64_t)1 << 40,
                                  ((uint64_t)1 << 40) + 1,
                                  (uint64_t)1 << 62,
                                  (uint64_t)INT64_MAX,
                                  (uint64_t)INT64_MIN};
  uint8_t sel = rd_u8(r);
  if (sel < 128) return (int64_t)edge[sel % (sizeof edge / sizeof edge[0])];
  if (sel < 192) return (int64_t)(sel - 128);
  return (int64_t)rd_u64(r);
}

static void fail_if(int bad, const char *fmt, const char *a, const char *b) {
  if (!bad) return;
  char msg[600];
  snprintf(msg, sizeof msg, fmt, a ? a : "", b ? b : "");
  fz_parse_finding(msg);
}

/* The result must be documented and a failure must leave a detail. */
static tecore_result_t chk(tecore_result_t r, const char *fn) {
  fz_parse_calls++;
  if (fz_parse_trace)
    printf("  %s -> %s%s%s\n", fn, tecore_result_name(r), r ? ": " : "",
           r ? tecore_last_error() : "");
  fail_if(r != TECORE_SUCCESS && r != TECORE_ERR_INVALID && r != TECORE_ERR_NOT_SUPPORTED,
          "%s returned an undocumented result: %s", fn, tecore_result_name(r));
  fail_if(r != TECORE_SUCCESS && !tecore_last_error()[0], "%s failed with an empty detail%s", fn,
          NULL);
  return r;
}
#define K(call) (tecore_clear_error(), chk((call), #call))

/* ---- 0: DLPack ------------------------------------------------------------ */

static tecore_devptr_t dev_buf; /* a real allocation, for data that exists */

static void t_dlpack(struct rd *r) {
  int64_t shape[16], strides[16];
  DLTensor dl;
  memset(&dl, 0, sizeof dl);
  dl.ndim = (int32_t)(rd_u8(r) % 20) - 3;
  static const int dev_types[] = {kDLCPU, kDLCUDA, kDLCUDAHost, kDLCUDAManaged, 0, 4, 7, 255};
  uint8_t d = rd_u8(r);
  dl.device.device_type = (DLDeviceType)(d < 200 ? dev_types[d % 8] : (int)rd_bytes(r, 4));
  uint8_t id = rd_u8(r);
  dl.device.device_id = id < 200 ? 0 : id < 230 ? (int32_t)(id - 215) : (int32_t)rd_bytes(r, 4);
  dl.dtype.code = rd_u8(r) % 16;
  static const uint8_t bits[] = {8, 16, 32, 64, 0, 1, 4, 128};
  uint8_t b = rd_u8(r);
  dl.dtype.bits = b < 240 ? bits[b % 8] : b;
  uint8_t l = rd_u8(r);
  dl.dtype.lanes = l < 240 ? 1 : (uint16_t)rd_bytes(r, 2);
  for (int i = 0; i < 16; i++) shape[i] = rd_i64_edge(r);
  uint8_t sm = rd_u8(r);
  if (sm & 1) {
    /* compact strides, then perturbed */
    int64_t acc = 1;
    for (int i = 15; i >= 0; i--) {
      strides[i] = acc;
      if (shape[i] > 0 && acc < (INT64_MAX / (shape[i] ? shape[i] : 1))) acc *= shape[i];
    }
    if (sm & 2) strides[rd_u8(r) % 16] = rd_i64_edge(r);
    dl.strides = strides;
  } else if (sm & 2) {
    for (int i = 0; i < 16; i++) strides[i] = rd_i64_edge(r);
    dl.strides = strides;
  }
  dl.shape = (sm & 4) && rd_u8(r) == 0 ? NULL : shape;
  uint8_t off = rd_u8(r);
  dl.byte_offset = off < 128 ? off : off < 192 ? (uint64_t)rd_i64_edge(r) : rd_u64(r);
  uint8_t dm = rd_u8(r);
  if (dm < 64)
    dl.data = (void *)(uintptr_t)dev_buf;
  else if (dm < 96)
    dl.data = NULL;
  else if (dm < 128)
    dl.data = (void *)(uintptr_t)0x1000;
  else
    dl.data = (void *)(uintptr_t)rd_u64(r);
  if (dl.ndim < 0 || dl.ndim > 16) dl.ndim = 16; /* our arrays hold 16: never read past them */

  struct tecore_tensor t, before;
  memset(&t, 0x5a, sizeof t);
  before = t;
  tecore_result_t res = K(tecore_tensor_from_dlpack(&dl, &t));
  if (res != TECORE_SUCCESS) {
    fail_if(memcmp(&t, &before, sizeof t) != 0,
            "a refused tecore_tensor_from_dlpack changed *t%s%s", NULL, NULL);
    return;
  }
  /* accepted: the same memory, the same shape, bytes that fit */
  fail_if(t.ndim != dl.ndim, "from_dlpack: ndim differs%s%s", NULL, NULL);
  fail_if(t.data != (tecore_devptr_t)(uintptr_t)dl.data + dl.byte_offset,
          "from_dlpack: data is not dl->data + byte_offset%s%s", NULL, NULL);
  fail_if(t.data < (tecore_devptr_t)(uintptr_t)dl.data, "from_dlpack: data + byte_offset wraps%s%s",
          NULL, NULL);
  size_t es = tecore_dtype_size(t.dtype), bytes = es;
  int empty = 0;
  for (int i = 0; i < t.ndim; i++) empty |= t.shape[i] == 0;
  for (int i = 0; i < t.ndim; i++) {
    fail_if((int64_t)t.shape[i] != dl.shape[i], "from_dlpack: a dimension differs%s%s", NULL, NULL);
    if (!empty && bytes > SIZE_MAX / t.shape[i]) {
      char msg[200];
      snprintf(msg, sizeof msg, "from_dlpack accepted a tensor whose bytes overflow (dim %d = %zu)",
               i, t.shape[i]);
      fz_parse_finding(msg);
    }
    bytes *= t.shape[i];
  }
  fail_if(es == 0, "from_dlpack: unknown dtype accepted%s%s", NULL, NULL);
  K(tecore_tensor_validate(&t, 0));
  /* and back */
  DLTensor back;
  int64_t bshape[TECORE_TENSOR_MAX_DIMS], bstrides[TECORE_TENSOR_MAX_DIMS];
  if (t.data && K(tecore_tensor_to_dlpack(&t, 0, &back, bshape, bstrides)) == TECORE_SUCCESS) {
    fail_if(back.ndim != t.ndim, "to_dlpack of an imported tensor: ndim differs%s%s", NULL, NULL);
    fail_if((tecore_devptr_t)(uintptr_t)back.data + back.byte_offset != t.data,
            "to_dlpack of an imported tensor: data differs%s%s", NULL, NULL);
    for (int i = 0; i < back.ndim && i < TECORE_TENSOR_MAX_DIMS; i++)
      fail_if((size_t)back.shape[i] != t.shape[i], "to_dlpack: a dimension differs%s%s", NULL,
              NULL);
  }
}

/* ---- 1: tensor descriptors -------------------------------------------------- */

static void t_tensor(struct rd *r) {
  struct tecore_tensor t;
  unsigned char raw[sizeof t];
  for (size_t i = 0; i < sizeof raw; i++) raw[i] = rd_u8(r);
  memcpy(&t, raw, sizeof t);
  /* small enums and shapes more often than raw bytes would give them */
  uint8_t tame = rd_u8(r);
  if (tame & 1) t.dtype = (tecore_dtype_t)(rd_u8(r) % 12);
  if (tame & 2) t.scaling = (tecore_scaling_mode_t)(rd_u8(r) % 7);
  if (tame & 4) t.ndim = rd_u8(r) % 11 - 1;
  if (tame & 8)
    for (int i = 0; i < TECORE_TENSOR_MAX_DIMS; i++) t.shape[i] = (size_t)rd_i64_edge(r);
  if (tame & 16) t.device = rd_u8(r) % 4 - 1;
  unsigned flags = rd_u8(r) & 0x1f;
  K(tecore_tensor_validate(&t, flags));
  size_t n = tecore_tensor_numel(&t), rows = 7, cols = 7, sr = 0, sc = 0;
  fz_parse_calls++;
  if (K(tecore_tensor_2d(&t, &rows, &cols)) == TECORE_SUCCESS && n)
    fail_if(rows && cols && rows * cols != n, "tecore_tensor_2d: rows x cols != numel%s%s", NULL,
            NULL);
  tecore_dtype_t sdt;
  for (int c = 0; c < 2; c++)
    if (K(tecore_tensor_scale_shape(&t, c, &sr, &sc, &sdt)) == TECORE_SUCCESS)
      fail_if(sr && sc > SIZE_MAX / sr, "tecore_tensor_scale_shape: srows x scols overflows%s%s",
              NULL, NULL);
  DLTensor dl;
  int64_t shape[TECORE_TENSOR_MAX_DIMS], strides[TECORE_TENSOR_MAX_DIMS];
  K(tecore_tensor_to_dlpack(&t, rd_u8(r) & 1, &dl, shape, strides));
  /* tecore_tensor_init */
  size_t ishape[16];
  for (int i = 0; i < 16; i++) ishape[i] = (size_t)rd_i64_edge(r);
  int ndim = rd_u8(r) % 12 - 2;
  struct tecore_tensor u, ub;
  memset(&u, 0x5a, sizeof u);
  ub = u;
  tecore_result_t res = K(tecore_tensor_init(&u, (tecore_dtype_t)(rd_u8(r) % 12), ndim,
                                             (rd_u8(r) & 7) ? ishape : NULL, rd_u64(r)));
  if (res != TECORE_SUCCESS)
    fail_if(memcmp(&u, &ub, sizeof u) != 0, "a refused tecore_tensor_init changed *t%s%s", NULL,
            NULL);
  fail_if(tecore_scaling_name(t.scaling) == NULL, "tecore_scaling_name returned NULL%s%s", NULL,
          NULL);
  fail_if(tecore_dtype_name(t.dtype) == NULL, "tecore_dtype_name returned NULL%s%s", NULL, NULL);
}

/* ---- 2: recipes --------------------------------------------------------------- */

static void t_recipe(struct rd *r) {
  struct tecore_recipe rc;
  unsigned char raw[sizeof rc];
  for (size_t i = 0; i < sizeof raw; i++) raw[i] = rd_u8(r);
  memcpy(&rc, raw, sizeof rc);
  rc.amax_reduce = NULL; /* a function pointer is not data */
  rc.amax_reduce_ctx = NULL;
  uint8_t tame = rd_u8(r);
  if (tame & 1) rc.kind = (tecore_recipe_kind_t)(rd_u8(r) % 5);
  if (tame & 2) rc.format = (tecore_fp8_format_t)(rd_u8(r) % 4);
  if (tame & 4) rc.history_len = (int)rd_i64_edge(r);
  if (tame & 8) K(tecore_recipe_init(&rc, (tecore_recipe_kind_t)(rd_u8(r) % 6)));
  tecore_result_t v = K(tecore_recipe_validate(&rc));
  tecore_dtype_t dt = TECORE_DTYPE_COUNT_;
  tecore_fp8_role_t role = (tecore_fp8_role_t)(rd_u8(r) % 4);
  if (K(tecore_recipe_dtype(&rc, role, &dt)) == TECORE_SUCCESS)
    fail_if(dt != TECORE_DTYPE_E4M3 && dt != TECORE_DTYPE_E5M2,
            "tecore_recipe_dtype gave %s, not an FP8 type%s", tecore_dtype_name(dt), NULL);
  struct tecore_tensor t;
  size_t shape[2] = {4, 4};
  tecore_tensor_init(&t, TECORE_DTYPE_F32, 2, shape, 0);
  if (K(tecore_recipe_apply(&rc, role, &t)) == TECORE_SUCCESS && v == TECORE_SUCCESS)
    fail_if(t.scaling == TECORE_SCALING_NONE, "tecore_recipe_apply left the scaling NONE%s%s", NULL,
            NULL);
}

/* ---- 3, 4: tunables ---------------------------------------------------------------- */

#define MAX_TUNABLES 2048
static struct tecore_tunable tun[MAX_TUNABLES];
static char tun_env[MAX_TUNABLES][32];
static char tun_def[MAX_TUNABLES][40];
static char tun_choices[MAX_TUNABLES][64];
static int ntun;

/* Text from the input: printable mostly, any byte but NUL sometimes. */
static void rd_text(struct rd *r, char *s, size_t cap) {
  size_t len = rd_u8(r) % cap;
  uint8_t raw = rd_u8(r) & 1;
  for (size_t i = 0; i < len; i++) {
    uint8_t c = rd_u8(r);
    if (!raw) c = (uint8_t)(32 + c % 95);
    s[i] = c ? (char)c : 'x';
  }
  s[len] = 0;
}

static void t_tunable_int(struct rd *r) {
  if (ntun >= MAX_TUNABLES) return;
  int k = ntun++;
  struct tecore_tunable *t = &tun[k];
  snprintf(tun_env[k], sizeof tun_env[k], "TEFUZZ_INT_%d_%d", (int)getpid(), k);
  t->name = "fuzz_int";
  t->env = tun_env[k];
  t->type = TECORE_TUNABLE_INT;
  t->help = "a tunable of the parser fuzzer";
  t->min = rd_i64_edge(r);
  t->max = rd_i64_edge(r);
  t->def_int = rd_i64_edge(r);
  uint8_t mode = rd_u8(r);
  if (mode & 1) { /* a valid set of bounds most of the time */
    if (t->min > t->max) {
      int64_t x = t->min;
      t->min = t->max;
      t->max = x;
    }
    if (t->def_int < t->min || t->def_int > t->max) t->def_int = t->min;
  }
  tecore_result_t reg = K(tecore_tunable_register(t));
  int valid = t->min <= t->def_int && t->def_int <= t->max;
  fail_if(reg == TECORE_SUCCESS && !valid,
          "tecore_tunable_register accepted a default outside "
          "its bounds%s%s",
          NULL, NULL);
  fail_if(reg != TECORE_SUCCESS && valid, "tecore_tunable_register refused %s: %s", t->env,
          tecore_last_error());
  if (reg != TECORE_SUCCESS) return;
  /* the value: an exact spelling (decimal, padded, hex) or text */
  char val[64];
  int64_t want = rd_i64_edge(r);
  int exact = 1;
  switch ((mode >> 1) % 5) {
    case 0: snprintf(val, sizeof val, "%lld", (long long)want); break;
    case 1:
      snprintf(val, sizeof val, "%s%05lld", want < 0 ? "-" : "",
               want < 0 ? (long long)(want == INT64_MIN ? 0 : -want) : (long long)want);
      if (want == INT64_MIN) want = 0;
      break;
    case 2:
      if (want < 0) want = -(want + 1);
      snprintf(val, sizeof val, "0x%llx", (unsigned long long)want);
      break;
    case 3:
      snprintf(val, sizeof val, "%lld%s", (long long)want,
               (mode & 64) ? "0" : "99999999999999999999");
      exact = 0;
      break;
    default:
      rd_text(r, val, sizeof val);
      exact = 0;
      break;
  }
  setenv(t->env, val, 1);
  int64_t got = tecore_tunable_int(t);
  fz_parse_calls++;
  if (exact) {
    int64_t expect = want >= t->min && want <= t->max ? want : t->def_int;
    if (got != expect) {
      char msg[300];
      snprintf(msg, sizeof msg, "%s=\"%s\" in [%lld, %lld] default %lld read as %lld, want %lld",
               t->env, val, (long long)t->min, (long long)t->max, (long long)t->def_int,
               (long long)got, (long long)expect);
      fz_parse_finding(msg);
    }
  } else if (got != t->def_int && (got < t->min || got > t->max)) {
    fz_parse_finding("an integer tunable read a value outside its bounds");
  }
  /* the listing agrees */
  struct tecore_tunable_info info;
  if (K(tecore_tunable_find(t->env, &info)) == TECORE_SUCCESS)
    fail_if(info.value_int != got, "tecore_tunable_find of %s: value differs%s", t->env, NULL);
}

static void t_tunable_str(struct rd *r) {
  if (ntun >= MAX_TUNABLES) return;
  int k = ntun++;
  struct tecore_tunable *t = &tun[k];
  snprintf(tun_env[k], sizeof tun_env[k], "TEFUZZ_STR_%d_%d", (int)getpid(), k);
  t->name = "fuzz_str";
  t->env = tun_env[k];
  t->type = TECORE_TUNABLE_STRING;
  t->help = "a tunable of the parser fuzzer";
  uint8_t mode = rd_u8(r);
  /* choices from a small alphabet so values hit them */
  char *ch = tun_choices[k];
  size_t nc = 0, len = rd_u8(r) % 40;
  for (size_t i = 0; i < len; i++) ch[nc++] = "ab|AB|c|"[rd_u8(r) % 8];
  ch[nc] = 0;
  t->choices = (mode & 1) ? NULL : ch;
  char *def = tun_def[k];
  size_t dl = rd_u8(r) % 4;
  for (size_t i = 0; i < dl; i++) def[i] = "abAB"[rd_u8(r) % 4];
  def[dl] = 0;
  t->def_str = (mode & 2) && (mode & 4) ? NULL : def;
  tecore_result_t reg = K(tecore_tunable_register(t));
  if (reg != TECORE_SUCCESS) return;
  fail_if(!t->def_str, "tecore_tunable_register accepted a string tunable without a default%s%s",
          NULL, NULL);
  char val[64];
  if (mode & 8)
    rd_text(r, val, sizeof val);
  else {
    size_t vl = rd_u8(r) % 4;
    for (size_t i = 0; i < vl; i++) val[i] = "abAB"[rd_u8(r) % 4];
    val[vl] = 0;
  }
  if (!(mode & 16)) setenv(t->env, val, 1);
  const char *got = tecore_tunable_str(t);
  fz_parse_calls++;
  fail_if(!got, "tecore_tunable_str returned NULL for %s%s", t->env, NULL);
  if (mode & 16) {
    fail_if(strcmp(got, t->def_str) != 0, "unset %s does not read its default \"%s\"", t->env,
            t->def_str);
  } else if (!t->choices) {
    fail_if(strcmp(got, val) != 0, "free-text %s does not read its value \"%s\"", t->env, val);
  } else {
    /* one of the choices (case-insensitively the value), or the default */
    int in = 0;
    const char *p = t->choices;
    while (*p) { /* "a|b|": the empty text after the last bar is no choice */
      size_t l = strcspn(p, "|");
      if (l == strlen(val) && strncasecmp(p, val, l) == 0) in = 1;
      if (l == strlen(got) && strncmp(p, got, l) == 0 && strcasecmp(got, val) != 0 &&
          strcmp(got, t->def_str) != 0)
        fz_parse_finding("a choice tunable read a choice the value does not spell");
      p += l + (p[l] ? 1 : 0);
    }
    if (in)
      fail_if(strcasecmp(got, val) != 0, "%s=\"%s\" is a choice but was not taken", t->env, val);
    else
      fail_if(strcmp(got, t->def_str) != 0, "%s=\"%s\" is no choice but did not default", t->env,
              val);
  }
}

/* ---- 5: the log's environment and name lookups --------------------------------------- */

static void t_env(struct rd *r) {
  char v[64];
  static const char *const level[] = {"NONE", "ERROR", "WARN", "INFO", "TRACE", "warn", "", "9"};
  static const char *const subsys[] = {"INIT", "DEVICE,KERNEL", "^INIT",     "ALL",
                                       "^",    ",,,",           "GRAPH,FOO", "^ALL,INIT"};
  uint8_t m = rd_u8(r);
  if (m & 1)
    rd_text(r, v, sizeof v);
  else
    snprintf(v, sizeof v, "%s", level[rd_u8(r) % 8]);
  setenv("TE_DEBUG", v, 1);
  if (m & 2)
    rd_text(r, v, sizeof v);
  else
    snprintf(v, sizeof v, "%s", subsys[rd_u8(r) % 8]);
  setenv("TE_DEBUG_SUBSYS", v, 1);
  setenv("TE_DEBUG_FILE", "/dev/null", 1);
  tecore_log_level_t lv = tecore_log_level();
  fz_parse_calls++;
  if (lv < TECORE_LOG_NONE || lv > TECORE_LOG_TRACE)
    fz_parse_finding("tecore_log_level out of range");
  for (int l = 0; l <= 5; l++)
    for (unsigned s = 1; s <= 0x100; s <<= 1) {
      tecore_log((tecore_log_level_t)l, s, __FILE__, __LINE__, "fuzz %d %u", l, s);
      fz_parse_calls++;
    }
  /* lookups by input values */
  char name[48];
  rd_text(r, name, sizeof name);
  struct tecore_tunable_info info;
  K(tecore_tunable_find(name, &info));
  K(tecore_tunable_find(m & 4 ? "TE_DEBUG_SUBSYS" : "TECORE_VDEV_CHECK", &info));
  int count = 0;
  K(tecore_tunable_count(&count));
  int idx = (int)(int32_t)rd_bytes(r, 4);
  if (m & 8) idx = count ? (int)((unsigned)idx % (unsigned)count) : 0;
  if (K(tecore_tunable_get_info(idx, &info)) == TECORE_SUCCESS)
    fail_if(!info.env || !info.name || !info.help, "tecore_tunable_info has a NULL name%s%s", NULL,
            NULL);
  int x = (int)(int32_t)rd_bytes(r, 4);
  fail_if(!tecore_strerror((tecore_result_t)x) || !tecore_result_name((tecore_result_t)x) ||
              !tecore_dtype_name((tecore_dtype_t)x) ||
              !tecore_scaling_name((tecore_scaling_mode_t)x) ||
              !tecore_activation_name((tecore_activation_t)x) || !tecore_op_kind_name(x) ||
              !tecore_gemm_epilogue_name((tecore_gemm_epilogue_t)x) ||
              !tecore_backend_name((tecore_backend_t)x),
          "a name lookup returned NULL%s%s", NULL, NULL);
  fz_parse_calls += 8;
}

/* ---- the entry ------------------------------------------------------------------------ */

uint64_t fz_parse_calls;
int fz_parse_trace;

void fz_parse_one(const uint8_t *data, size_t len) {
  struct rd r = {data, len};
  uint8_t target = rd_u8(&r) % 8;
  if (target == 5) t_env(&r); /* before anything reads the log's environment */
  if (!dev_buf) {
    /* once per process: a real allocation for DLPack data */
    setenv("TE_DEVICE", "vdev", 0);
    if (tecore_mem_alloc(4096, &dev_buf) != TECORE_SUCCESS) dev_buf = 0x10000;
  }
  switch (target) {
    case 0: t_dlpack(&r); break;
    case 1: t_tensor(&r); break;
    case 2: t_recipe(&r); break;
    case 3: t_tunable_int(&r); break;
    case 4: t_tunable_str(&r); break;
    case 6: fz_parse_wire(r.p, r.n); break;
    case 7: fz_parse_st(r.p, r.n); break;
    default: break;
  }
}
