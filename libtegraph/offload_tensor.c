/* SPDX-License-Identifier: Apache-2.0 */
/* offload_tensor.c -- offloading single tensors (te/offload.h): a tensor
 * travels whole, every buffer its scaling mode has (data, columnwise
 * data, amax, scale, scale_inv, columnwise scale_inv), each as one part,
 * and the descriptor is kept as given, so it comes back with its dtype,
 * shape and layout (never as a byte view of a packed buffer).  The
 * do-not-offload mark (TEGRAPH_SAVE_KEEP) and the size threshold are
 * decided here, once, for every path a save can take. */
#include "offload_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The parts of t: pointer, bytes and a name, at most 6. */
static tegraph_result_t tensor_parts(const struct tecore_tensor *t, tecore_devptr_t *ptr,
                                     size_t *bytes, const char **what, size_t *n,
                                     const char *fn) {
  size_t numel = tecore_tensor_numel(t);
  size_t es = tecore_dtype_size(t->dtype);
  *n = 0;
  if (t->data) {
    ptr[*n] = t->data;
    bytes[*n] = numel * es;
    what[(*n)++] = "data";
  }
  if (t->columnwise_data) {
    ptr[*n] = t->columnwise_data;
    bytes[*n] = numel * es;
    what[(*n)++] = "columnwise_data";
  }
  if (t->amax) {
    ptr[*n] = t->amax;
    bytes[*n] = 4;
    what[(*n)++] = "amax";
  }
  if (t->scale) {
    ptr[*n] = t->scale;
    bytes[*n] = 4;
    what[(*n)++] = "scale";
  }
  for (int col = 0; col < 2; col++) {
    tecore_devptr_t p = col ? t->columnwise_scale_inv : t->scale_inv;
    if (!p) continue;
    size_t sr = 0, sc = 0;
    tecore_dtype_t sdt = TECORE_DTYPE_F32;
    TG_CORE(tecore_tensor_scale_shape(t, col, &sr, &sc, &sdt), fn);
    ptr[*n] = p;
    bytes[*n] = sr * sc * tecore_dtype_size(sdt);
    what[(*n)++] = col ? "columnwise_scale_inv" : "scale_inv";
  }
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_save(tegraph_offload_t *c,
                                                const struct tecore_tensor *t, unsigned flags,
                                                tecore_stream_t stream, int *id) {
  static const char fn[] = "tegraph_offload_save";
  TG_CHECK(ol_live(c, fn));
  TG_ARG(t, "%s: t is NULL", fn);
  TG_ARG(id, "%s: id is NULL", fn);
  TG_ARG(!(flags & ~TEGRAPH_SAVE_KEEP), "%s: flags 0x%x has unknown bits", fn, flags);
  TG_CORE(tecore_tensor_validate(t, 0), fn);
  TG_ARG(t->data || t->columnwise_data, "%s: t has neither data nor columnwise_data", fn);
  if (c->failed != TEGRAPH_SUCCESS) return TG_ERR(c->failed, "%s: %s", fn, c->failmsg);
  if (c->nsaves == c->cap_saves) {
    size_t cap = c->cap_saves ? 2 * c->cap_saves : 16;
    struct ol_save *ns = realloc(c->saves, cap * sizeof *ns);
    if (!ns) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    c->saves = ns;
    c->cap_saves = cap;
  }
  if (c->nsaves == 0) {
    c->save_host_base = c->host_used;
    c->save_file_base = c->file_used;
  }
  struct ol_save *sv = &c->saves[c->nsaves];
  memset(sv, 0, sizeof *sv);
  sv->t = *t;
  /* the mark and the threshold: one decision for every path */
  if ((flags & TEGRAPH_SAVE_KEEP) || tecore_tensor_numel(t) < c->min_elems) {
    sv->kept = 1;
    *id = (int)c->nsaves++;
    return TEGRAPH_SUCCESS;
  }
  tecore_devptr_t ptr[6];
  size_t bytes[6], n = 0;
  const char *what[6];
  TG_CHECK(tensor_parts(t, ptr, bytes, what, &n, fn));
  size_t host0 = c->host_used;
  uint64_t file0 = c->file_used;
  tegraph_result_t res = TEGRAPH_SUCCESS;
  tecore_result_t r = TECORE_SUCCESS;
  for (size_t i = 0; i < n && res == TEGRAPH_SUCCESS; i++) {
    char name[96];
    snprintf(name, sizeof name, "save %zu %s (%s)", c->nsaves, what[i],
             tecore_dtype_name(i < 2 ? t->dtype : TECORE_DTYPE_F32));
    res = ol_add_part(c, &sv->x, ptr[i], bytes[i], name, fn);
  }
  if (res == TEGRAPH_SUCCESS) {
    r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &sv->out_done);
    if (r == TECORE_SUCCESS) r = tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &sv->in_done);
    /* fork the D2H stream off the caller's work, copy out, mark done */
    if (r == TECORE_SUCCESS) r = tecore_event_record(sv->out_done, stream);
    if (r == TECORE_SUCCESS) r = tecore_stream_wait_event(c->d2h, sv->out_done);
    if (r != TECORE_SUCCESS) res = tg_core(r, fn);
  }
  if (res == TEGRAPH_SUCCESS) res = ol_out(c, &sv->x, fn);
  if (res == TEGRAPH_SUCCESS) {
    r = tecore_event_record(sv->out_done, c->d2h);
    if (r != TECORE_SUCCESS) res = tg_core(r, fn);
  }
  if (res != TEGRAPH_SUCCESS) {
    /* nothing of this save stays (work already queued only reads the tensor) */
    ol_xfer_free(&sv->x);
    if (sv->out_done) (void)tecore_event_destroy(sv->out_done);
    if (sv->in_done) (void)tecore_event_destroy(sv->in_done);
    c->host_used = host0;
    c->file_used = file0;
    return res;
  }
  c->saves_host += ol_xfer_bytes(&sv->x, OL_HOST);
  c->saves_files += ol_xfer_bytes(&sv->x, OL_FILE);
  *id = (int)c->nsaves++;
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t get_save(tegraph_offload_t *c, int id, const char *fn,
                                 struct ol_save **sv) {
  TG_CHECK(ol_live(c, fn));
  TG_ARG(id >= 0 && (size_t)id < c->nsaves, "%s: id %d is not a save (%zu saves since the "
         "last reset)", fn, id, c->nsaves);
  *sv = &c->saves[id];
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_save_done(tegraph_offload_t *c, int id,
                                                     tecore_stream_t stream) {
  static const char fn[] = "tegraph_offload_save_done";
  struct ol_save *sv = NULL;
  TG_CHECK(get_save(c, id, fn, &sv));
  if (!sv->kept) TG_CORE(tecore_stream_wait_event(stream, sv->out_done), fn);
  return TEGRAPH_SUCCESS;
}

/* The copy in of sv on the context's h2d stream, ordered after the copy
 * out and after the caller's work on stream; stream waits for it. */
static tegraph_result_t restore_in(tegraph_offload_t *c, struct ol_save *sv,
                                   tecore_stream_t stream, const char *fn) {
  TG_CORE(tecore_stream_wait_event(c->h2d, sv->out_done), fn);
  TG_CORE(tecore_event_record(sv->in_done, stream), fn);
  TG_CORE(tecore_stream_wait_event(c->h2d, sv->in_done), fn);
  TG_CHECK(ol_in(c, &sv->x, fn));
  TG_CORE(tecore_event_record(sv->in_done, c->h2d), fn);
  TG_CORE(tecore_stream_wait_event(stream, sv->in_done), fn);
  return TEGRAPH_SUCCESS;
}

/* A failed copy in leaves the context's h2d stream with the error (an
 * illegal address is sticky): every later transfer would fail the same
 * way, so the context is failed from here, as after a spill error --
 * tegraph_offload_check and later calls report it, destroy frees it. */
static tegraph_result_t restore_failed(tegraph_offload_t *c, tegraph_result_t r) {
  c->failed = r;
  snprintf(c->failmsg, sizeof c->failmsg, "a restore failed: %s", tegraph_last_error());
  return r;
}

TE_EXPORT tegraph_result_t tegraph_offload_restore(tegraph_offload_t *c, int id,
                                                   tecore_stream_t stream,
                                                   struct tecore_tensor *t) {
  static const char fn[] = "tegraph_offload_restore";
  struct ol_save *sv = NULL;
  TG_CHECK(get_save(c, id, fn, &sv));
  TG_ARG(t, "%s: t is NULL", fn);
  if (!sv->kept) {
    if (c->failed != TEGRAPH_SUCCESS) return TG_ERR(c->failed, "%s: %s", fn, c->failmsg);
    tegraph_result_t r = restore_in(c, sv, stream, fn);
    if (r != TEGRAPH_SUCCESS) return restore_failed(c, r);
    sv->restored = 1;
  }
  *t = sv->t;
  return TEGRAPH_SUCCESS;
}

TE_EXPORT tegraph_result_t tegraph_offload_reset(tegraph_offload_t *c) {
  static const char fn[] = "tegraph_offload_reset";
  TG_CHECK(ol_live(c, fn));
  for (size_t i = 0; i < c->nsaves; i++) {
    struct ol_save *sv = &c->saves[i];
    if (sv->kept) continue;
    tecore_result_t a = tecore_event_query(sv->out_done);
    tecore_result_t b = tecore_event_query(sv->in_done);
    if (a == TECORE_ERR_NOT_READY || b == TECORE_ERR_NOT_READY)
      return TG_ERR(TEGRAPH_ERR_STATE, "%s: save %zu is still being copied; wait for its "
                    "streams first", fn, i);
  }
  /* a forward whose backward will not run (tegraph_offload_detach says
   * why it is kept pending): dropped, its copies finished first */
  if (c->sq && c->sq->pending) {
    TG_CORE(tecore_stream_synchronize(c->d2h), fn);
    TG_CORE(tecore_stream_synchronize(c->h2d), fn);
    c->sq->pending = 0;
  }
  return ol_saves_free(c);
}

tegraph_result_t ol_saves_free(tegraph_offload_t *c) {
  for (size_t i = 0; i < c->nsaves; i++) {
    struct ol_save *sv = &c->saves[i];
    if (sv->kept) continue;
    if (c->failed == TEGRAPH_SUCCESS) (void)ol_xfer_check(c, &sv->x);
    ol_xfer_free(&sv->x);
    (void)tecore_event_destroy(sv->out_done);
    (void)tecore_event_destroy(sv->in_done);
  }
  if (c->nsaves) {
    c->host_used = c->save_host_base;
    c->file_used = c->save_file_base;
  }
  c->nsaves = 0;
  return TEGRAPH_SUCCESS;
}
