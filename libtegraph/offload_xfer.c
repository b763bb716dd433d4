/* SPDX-License-Identifier: Apache-2.0 */
/* offload_xfer.c -- moving parts (contiguous device ranges) out and back:
 * placing each part's copy in the pinned pool or, past the budget, in the
 * spill space; the service-engine jobs that write and read each chunk of a
 * spilled part; and the stream work of a transfer.
 *
 * Spill space.  One address space striped over the files: stripe g lives
 * in file g mod nfiles at offset (g / nfiles) * stripe.  A part starts on
 * a stripe and takes its size rounded up to 4096 (O_DIRECT).  It moves in
 * chunks of one staging buffer; chunk k of a transfer uses staging buffer
 * k mod 2 of its direction, so that
 *   out (D2H stream):  copy chunk k to its buffer, launch its write; before
 *                      a buffer is copied into again, wait for its write;
 *   in  (H2D stream):  launch the reads of chunks k and k + 1; wait for k,
 *                      copy it to the device, launch k + 2 into its buffer;
 * copies overlap file I/O, and a buffer is never reused before the engine
 * is done with it (stream order). */
#include "offload_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t round_up(size_t v, size_t a) { return (v + a - 1) / a * a; }

/* The engine job moving chunk k of p (dir 0: write, 1: read). */
static tegraph_result_t make_chunk_job(tegraph_offload_t *c, const struct ol_part *p, size_t k,
                                       unsigned parity, int read, tecore_svc_job_t **job,
                                       const char *fn) {
  size_t total = round_up(p->bytes, 4096);
  size_t lo = k * c->stage_bytes, hi = lo + c->stage_bytes;
  if (hi > total) hi = total;
  size_t nops = (hi - lo + c->stripe - 1) / c->stripe;
  struct tecore_svc_op *ops = calloc(nops, sizeof *ops);
  char (*names)[160] = calloc(nops, sizeof *names);
  if (!ops || !names) {
    free(ops);
    free(names);
    return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  }
  unsigned char *buf = c->stage[(read ? 2 : 0) + parity];
  size_t i = 0;
  for (size_t off = lo; off < hi; i++) {
    uint64_t g = (p->file_off + off) / c->stripe;
    size_t in_stripe = (size_t)((p->file_off + off) % c->stripe);
    size_t len = c->stripe - in_stripe;
    if (len > hi - off) len = hi - off;
    size_t f = (size_t)(g % c->nfiles);
    uint64_t foff = (g / c->nfiles) * c->stripe + in_stripe;
    snprintf(names[i], sizeof names[i], "tensor %s: %s at offset %llu", p->name, c->paths[f],
             (unsigned long long)foff);
    ops[i] = (struct tecore_svc_op){.kind = read ? TECORE_SVC_READ : TECORE_SVC_WRITE,
                                    .fd = c->fds[f], .buf = buf + (off - lo), .bytes = len,
                                    .offset = foff, .buf_index = c->buf_index,
                                    .name = names[i]};
    off += len;
  }
  tecore_result_t r = tecore_svc_job_create(ops, i, job);
  free(ops);
  free(names);
  if (r != TECORE_SUCCESS) return tg_core(r, fn);
  return TEGRAPH_SUCCESS;
}

tegraph_result_t ol_add_part(tegraph_offload_t *c, struct ol_xfer *x, tecore_devptr_t dev,
                             size_t bytes, const char *name, const char *fn) {
  struct ol_part *np = realloc(x->parts, (x->nparts + 1) * sizeof *np);
  if (!np) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  x->parts = np;
  struct ol_part *p = &np[x->nparts];
  memset(p, 0, sizeof *p);
  p->dev = dev;
  p->bytes = bytes;
  snprintf(p->name, sizeof p->name, "%s", name);
  size_t hoff = round_up(c->host_used, 256);
  if (hoff + bytes <= c->host_cap) {
    p->where = OL_HOST;
    p->host_off = hoff;
    c->host_used = hoff + bytes;
    x->nparts++;
    return TEGRAPH_SUCCESS;
  }
  if (!c->spill)
    return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: %s (%zu bytes) does not fit the host budget (%zu of "
                  "%zu bytes used) and there is no spill (%s)", fn, name, bytes, c->host_used,
                  c->host_cap, c->why);
  p->where = OL_FILE;
  p->file_off = round_up(c->file_used, c->stripe);
  size_t total = round_up(bytes, 4096);
  c->file_used = p->file_off + total;
  p->nchunks = (total + c->stage_bytes - 1) / c->stage_bytes;
  p->first_parity = x->chunks % 2;
  p->wjob = calloc(p->nchunks, sizeof *p->wjob);
  p->rjob = calloc(p->nchunks, sizeof *p->rjob);
  x->nparts++;   /* from here on ol_xfer_free cleans it up */
  if (!p->wjob || !p->rjob) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  for (size_t k = 0; k < p->nchunks; k++) {
    unsigned parity = (p->first_parity + (unsigned)k) % 2;
    TG_CHECK(make_chunk_job(c, p, k, parity, 0, &p->wjob[k], fn));
    TG_CHECK(make_chunk_job(c, p, k, parity, 1, &p->rjob[k], fn));
  }
  x->chunks += (unsigned)p->nchunks;
  return TEGRAPH_SUCCESS;
}

void ol_xfer_free(struct ol_xfer *x) {
  for (size_t i = 0; i < x->nparts; i++) {
    struct ol_part *p = &x->parts[i];
    for (size_t k = 0; k < p->nchunks; k++) {
      if (p->wjob && p->wjob[k]) (void)tecore_svc_job_destroy(p->wjob[k]);
      if (p->rjob && p->rjob[k]) (void)tecore_svc_job_destroy(p->rjob[k]);
    }
    free(p->wjob);
    free(p->rjob);
  }
  free(x->parts);
  memset(x, 0, sizeof *x);
}

size_t ol_xfer_bytes(const struct ol_xfer *x, int where) {
  size_t b = 0;
  for (size_t i = 0; i < x->nparts; i++)
    if (x->parts[i].where == where) b += x->parts[i].bytes;
  return b;
}

tegraph_result_t ol_out(tegraph_offload_t *c, const struct ol_xfer *x, const char *fn) {
  tecore_stream_t s = c->d2h;
  tecore_svc_job_t *pending[2] = {NULL, NULL};
  for (size_t i = 0; i < x->nparts; i++) {
    const struct ol_part *p = &x->parts[i];
    if (p->where == OL_HOST) {
      TG_CORE(tecore_memcpy_async(c->pool_d + p->host_off, p->dev, p->bytes, s), fn);
      continue;
    }
    for (size_t k = 0; k < p->nchunks; k++) {
      unsigned par = (p->first_parity + (unsigned)k) % 2;
      if (pending[par]) TG_CORE(tecore_svc_job_wait(pending[par], s), fn);
      size_t lo = k * c->stage_bytes;
      size_t len = p->bytes - lo < c->stage_bytes ? p->bytes - lo : c->stage_bytes;
      tecore_devptr_t st = c->pool_d + (size_t)(c->stage[par] - c->pool);
      TG_CORE(tecore_memcpy_async(st, p->dev + lo, len, s), fn);
      TG_CORE(tecore_svc_job_launch(p->wjob[k], s), fn);
      pending[par] = p->wjob[k];
    }
  }
  for (int par = 0; par < 2; par++)
    if (pending[par]) TG_CORE(tecore_svc_job_wait(pending[par], s), fn);
  return TEGRAPH_SUCCESS;
}

/* The file chunks of x in transfer order. */
struct chunk_ref {
  const struct ol_part *p;
  size_t k;
};

tegraph_result_t ol_in(tegraph_offload_t *c, const struct ol_xfer *x, const char *fn) {
  tecore_stream_t s = c->h2d;
  size_t n = 0;
  for (size_t i = 0; i < x->nparts; i++) {
    const struct ol_part *p = &x->parts[i];
    if (p->where == OL_HOST)
      TG_CORE(tecore_memcpy_async(p->dev, c->pool_d + p->host_off, p->bytes, s), fn);
    else
      n += p->nchunks;
  }
  if (n == 0) return TEGRAPH_SUCCESS;
  struct chunk_ref *ch = calloc(n, sizeof *ch);
  if (!ch) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  size_t m = 0;
  for (size_t i = 0; i < x->nparts; i++)
    for (size_t k = 0; i < x->nparts && x->parts[i].where == OL_FILE && k < x->parts[i].nchunks;
         k++)
      ch[m++] = (struct chunk_ref){&x->parts[i], k};
  tegraph_result_t res = TEGRAPH_SUCCESS;
  tecore_result_t r = TECORE_SUCCESS;
  for (size_t j = 0; j < 2 && j < n && r == TECORE_SUCCESS; j++)
    r = tecore_svc_job_launch(ch[j].p->rjob[ch[j].k], s);
  for (size_t j = 0; j < n && r == TECORE_SUCCESS; j++) {
    const struct ol_part *p = ch[j].p;
    size_t k = ch[j].k;
    unsigned par = (p->first_parity + (unsigned)k) % 2;
    r = tecore_svc_job_wait(p->rjob[k], s);
    if (r != TECORE_SUCCESS) break;
    size_t lo = k * c->stage_bytes;
    size_t len = p->bytes - lo < c->stage_bytes ? p->bytes - lo : c->stage_bytes;
    tecore_devptr_t st = c->pool_d + (size_t)(c->stage[2 + par] - c->pool);
    r = tecore_memcpy_async(p->dev + lo, st, len, s);
    if (r == TECORE_SUCCESS && j + 2 < n) r = tecore_svc_job_launch(ch[j + 2].p->rjob[ch[j + 2].k], s);
  }
  if (r != TECORE_SUCCESS) res = tg_core(r, fn);
  free(ch);
  return res;
}

tegraph_result_t ol_xfer_check(tegraph_offload_t *c, const struct ol_xfer *x) {
  for (size_t i = 0; i < x->nparts && c->failed == TEGRAPH_SUCCESS; i++) {
    const struct ol_part *p = &x->parts[i];
    for (size_t k = 0; k < p->nchunks; k++) {
      tecore_svc_job_t *jobs[2] = {p->wjob[k], p->rjob[k]};
      for (int d = 0; d < 2; d++) {
        if (!jobs[d] || tecore_svc_job_status(jobs[d], NULL) == TECORE_SUCCESS) continue;
        c->failed = TEGRAPH_ERR_IO;
        snprintf(c->failmsg, sizeof c->failmsg, "spill %s failed: %s",
                 d ? "read (the tensor came back as NaN bytes)" : "write", tecore_last_error());
        return c->failed;
      }
    }
  }
  return c->failed;
}
