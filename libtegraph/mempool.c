/* SPDX-License-Identifier: Apache-2.0 */
/* mempool.c -- the graph memory pool: a device-memory arena that hands out
 * 256-byte aligned blocks, first fit, from chunks reserved with
 * tecore_mem_alloc and kept until the pool is destroyed (so an address a
 * graph baked in never goes back to the driver under it).  Each chunk
 * keeps its free ranges sorted by address; a freed block merges with the
 * ranges on either side.  One mutex guards the pool. */
#include "tg_internal.h"
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_ALIGN 256
/* no device has 256 TiB: a larger chunk is a mistake (or SIZE_MAX) */
#define TG_POOL_CHUNK_MAX ((size_t)1 << 48)

TECORE_TUNABLE_INT(tg_pool_chunk_mb, "TEGRAPH_POOL_CHUNK_MB", 64, 1, 1 << 20,
                   "libtegraph: least size in MiB of each device reservation of a graph "
                   "memory pool")

struct range {
  size_t off, len;
};

struct chunk {
  tecore_devptr_t base;
  size_t size;
  struct range *free;   /* sorted by off, never adjacent (merged) */
  size_t nfree, capfree;
};

struct block {
  tecore_devptr_t ptr;
  size_t size;
};

struct tegraph_mempool {
  pthread_mutex_t lock;
  size_t chunk_bytes;
  struct chunk *chunks;
  size_t nchunks, capchunks;
  struct block *blocks; /* live blocks, unsorted */
  size_t nblocks, capblocks;
  size_t used, reserved;
  int users;
  int autofree;         /* made by tegraph_callables_create: goes with its last user */
};

static int grow(void **arr, size_t *cap, size_t need, size_t elem) {
  if (need <= *cap) return 0;
  size_t ncap = *cap ? *cap * 2 : 8;
  while (ncap < need) ncap *= 2;
  void *p = realloc(*arr, ncap * elem);
  if (!p) return -1;
  *arr = p;
  *cap = ncap;
  return 0;
}

TE_EXPORT tegraph_result_t tegraph_mempool_create(size_t chunk_bytes, tegraph_mempool_t **pool) {
  TG_ARG(pool, "tegraph_mempool_create: pool is NULL");
  *pool = NULL;
  /* rounding SIZE_MAX up to the alignment gave a chunk of 0 bytes */
  TG_ARG(chunk_bytes <= TG_POOL_CHUNK_MAX,
         "tegraph_mempool_create: chunk_bytes %zu is above the largest chunk, %zu", chunk_bytes,
         (size_t)TG_POOL_CHUNK_MAX);
  struct tegraph_mempool *p = calloc(1, sizeof *p);
  if (!p) return TG_ERR(TEGRAPH_ERR_NOMEM, "tegraph_mempool_create: out of host memory");
  pthread_mutex_init(&p->lock, NULL);
  p->chunk_bytes = chunk_bytes ? chunk_bytes : (size_t)tecore_tunable_int(&tg_pool_chunk_mb) << 20;
  p->chunk_bytes = (p->chunk_bytes + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
  if (te_handle_add(p) != 0) {
    pthread_mutex_destroy(&p->lock);
    free(p);
    return TG_ERR(TEGRAPH_ERR_NOMEM, "tegraph_mempool_create: out of host memory");
  }
  *pool = p;
  return TEGRAPH_SUCCESS;
}

/* Takes [off, off+len) out of free range r of c. */
static void carve(struct chunk *c, size_t r, size_t len) {
  c->free[r].off += len;
  c->free[r].len -= len;
  if (c->free[r].len == 0) {
    memmove(&c->free[r], &c->free[r + 1], (c->nfree - r - 1) * sizeof *c->free);
    c->nfree--;
  }
}

/* A new chunk of at least bytes; caller holds the lock. */
static tegraph_result_t add_chunk(struct tegraph_mempool *p, size_t bytes, const char *fn) {
  size_t size = bytes > p->chunk_bytes ? bytes : p->chunk_bytes;
  if (grow((void **)&p->chunks, &p->capchunks, p->nchunks + 1, sizeof *p->chunks) != 0)
    return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  struct chunk c = {0};
  c.free = malloc(sizeof *c.free);
  if (!c.free) return TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
  tecore_result_t r = tecore_mem_alloc(size, &c.base);
  if (r != TECORE_SUCCESS) {
    free(c.free);
    char what[96];
    snprintf(what, sizeof what, "%s: reserving %zu bytes of device memory", fn, size);
    return tg_core(r, what);
  }
  c.size = size;
  c.free[0] = (struct range){0, size};
  c.nfree = c.capfree = 1;
  p->chunks[p->nchunks++] = c;
  p->reserved += size;
  return TEGRAPH_SUCCESS;
}

/* First fit: the chunk and free range, or -1. */
static int find_fit(struct tegraph_mempool *p, size_t size, size_t *ci, size_t *ri) {
  for (size_t c = 0; c < p->nchunks; c++)
    for (size_t r = 0; r < p->chunks[c].nfree; r++)
      if (p->chunks[c].free[r].len >= size) {
        *ci = c;
        *ri = r;
        return 0;
      }
  return -1;
}

TE_EXPORT tegraph_result_t tegraph_mempool_alloc(tegraph_mempool_t *p, size_t bytes,
                                                 tecore_devptr_t *ptr) {
  static const char fn[] = "tegraph_mempool_alloc";
  TG_ARG(p, "%s: pool is NULL", fn);
  TG_ARG(te_handle_live(p), "%s: pool %p is not a live pool (destroyed?)", fn, (void *)p);
  TG_ARG(ptr, "%s: ptr is NULL", fn);
  TG_ARG(bytes > 0, "%s: bytes is 0", fn);
  TG_ARG(bytes <= SIZE_MAX - POOL_ALIGN, "%s: bytes %zu is too large", fn, bytes);
  size_t size = (bytes + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  size_t ci = 0, ri = 0;
  pthread_mutex_lock(&p->lock);
  if (grow((void **)&p->blocks, &p->capblocks, p->nblocks + 1, sizeof *p->blocks) != 0) {
    res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    goto out;
  }
  if (find_fit(p, size, &ci, &ri) != 0) {
    res = add_chunk(p, size, fn);
    if (res != TEGRAPH_SUCCESS) goto out;
    ci = p->nchunks - 1;
    ri = 0;
  }
  struct chunk *c = &p->chunks[ci];
  tecore_devptr_t d = c->base + c->free[ri].off;
  carve(c, ri, size);
  p->blocks[p->nblocks++] = (struct block){d, size};
  p->used += size;
  *ptr = d;
out:
  pthread_mutex_unlock(&p->lock);
  return res;
}

TE_EXPORT tegraph_result_t tegraph_mempool_free(tegraph_mempool_t *p, tecore_devptr_t ptr) {
  static const char fn[] = "tegraph_mempool_free";
  TG_ARG(p, "%s: pool is NULL", fn);
  TG_ARG(te_handle_live(p), "%s: pool %p is not a live pool (destroyed?)", fn, (void *)p);
  TG_ARG(ptr, "%s: ptr is 0", fn);
  tegraph_result_t res = TEGRAPH_SUCCESS;
  pthread_mutex_lock(&p->lock);
  size_t b = 0;
  while (b < p->nblocks && p->blocks[b].ptr != ptr) b++;
  if (b == p->nblocks) {
    res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: 0x%llx is not a live block of pool %p", fn,
                 (unsigned long long)ptr, (void *)p);
    goto out;
  }
  size_t size = p->blocks[b].size;
  struct chunk *c = NULL;
  for (size_t i = 0; i < p->nchunks && !c; i++)
    if (ptr >= p->chunks[i].base && ptr < p->chunks[i].base + p->chunks[i].size) c = &p->chunks[i];
  if (!c) {
    res = TG_ERR(TEGRAPH_ERR_INVALID, "%s: internal: block 0x%llx lies in no chunk", fn,
                 (unsigned long long)ptr);
    goto out;
  }
  if (grow((void **)&c->free, &c->capfree, c->nfree + 1, sizeof *c->free) != 0) {
    res = TG_ERR(TEGRAPH_ERR_NOMEM, "%s: out of host memory", fn);
    goto out;
  }
  size_t off = (size_t)(ptr - c->base), at = 0;
  while (at < c->nfree && c->free[at].off < off) at++;
  memmove(&c->free[at + 1], &c->free[at], (c->nfree - at) * sizeof *c->free);
  c->free[at] = (struct range){off, size};
  c->nfree++;
  /* merge with the next range, then with the previous one */
  if (at + 1 < c->nfree && c->free[at].off + c->free[at].len == c->free[at + 1].off) {
    c->free[at].len += c->free[at + 1].len;
    memmove(&c->free[at + 1], &c->free[at + 2], (c->nfree - at - 2) * sizeof *c->free);
    c->nfree--;
  }
  if (at > 0 && c->free[at - 1].off + c->free[at - 1].len == c->free[at].off) {
    c->free[at - 1].len += c->free[at].len;
    memmove(&c->free[at], &c->free[at + 1], (c->nfree - at - 1) * sizeof *c->free);
    c->nfree--;
  }
  p->blocks[b] = p->blocks[--p->nblocks];
  p->used -= size;
out:
  pthread_mutex_unlock(&p->lock);
  return res;
}

TE_EXPORT tegraph_result_t tegraph_mempool_reserve(tegraph_mempool_t *p, size_t bytes) {
  static const char fn[] = "tegraph_mempool_reserve";
  TG_ARG(p, "%s: pool is NULL", fn);
  TG_ARG(te_handle_live(p), "%s: pool %p is not a live pool (destroyed?)", fn, (void *)p);
  TG_ARG(bytes > 0, "%s: bytes is 0", fn);
  TG_ARG(bytes <= SIZE_MAX - POOL_ALIGN, "%s: bytes %zu is too large", fn, bytes);
  size_t size = (bytes + POOL_ALIGN - 1) & ~(size_t)(POOL_ALIGN - 1), ci, ri;
  tegraph_result_t res = TEGRAPH_SUCCESS;
  pthread_mutex_lock(&p->lock);
  if (find_fit(p, size, &ci, &ri) != 0) res = add_chunk(p, size, fn);
  pthread_mutex_unlock(&p->lock);
  return res;
}

TE_EXPORT tegraph_result_t tegraph_mempool_usage(tegraph_mempool_t *p, size_t *used,
                                                 size_t *reserved, int *users) {
  TG_ARG(p, "tegraph_mempool_usage: pool is NULL");
  TG_ARG(te_handle_live(p), "tegraph_mempool_usage: pool %p is not a live pool (destroyed?)",
         (void *)p);
  pthread_mutex_lock(&p->lock);
  if (used) *used = p->used;
  if (reserved) *reserved = p->reserved;
  if (users) *users = p->users;
  pthread_mutex_unlock(&p->lock);
  return TEGRAPH_SUCCESS;
}

static tegraph_result_t pool_free(struct tegraph_mempool *p, const char *fn);

void tg_mempool_autofree(tegraph_mempool_t *p) {
  pthread_mutex_lock(&p->lock);
  p->autofree = 1;
  pthread_mutex_unlock(&p->lock);
}

void tg_mempool_use(tegraph_mempool_t *p, int delta) {
  pthread_mutex_lock(&p->lock);
  p->users += delta;
  int gone = p->users == 0 && p->autofree;
  pthread_mutex_unlock(&p->lock);
  if (gone) (void)pool_free(p, "tegraph_callable_destroy");
}

TE_EXPORT tegraph_result_t tegraph_mempool_destroy(tegraph_mempool_t *p) {
  static const char fn[] = "tegraph_mempool_destroy";
  TG_ARG(p, "%s: pool is NULL", fn);
  TG_ARG(te_handle_live(p), "%s: pool %p is not a live pool (destroyed?)", fn, (void *)p);
  pthread_mutex_lock(&p->lock);
  int users = p->users, autofree = p->autofree;
  pthread_mutex_unlock(&p->lock);
  if (autofree)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: pool %p belongs to the callables that made it; it goes "
                  "with the last of them", fn, (void *)p);
  if (users)
    return TG_ERR(TEGRAPH_ERR_STATE, "%s: %d callable(s) still take their buffers from pool %p; "
                  "destroy them first", fn, users, (void *)p);
  return pool_free(p, fn);
}

static tegraph_result_t pool_free(struct tegraph_mempool *p, const char *fn) {
  tegraph_result_t res = TEGRAPH_SUCCESS;
  /* A free refused (during a capture that forbids frees) leaves the pool
   * as it was: the first chunk's answer stands for all (the capture state
   * does not change within this call).  It freed the pool anyway, so the
   * caller's retry or next use read freed memory (found by fuzz-api). */
  if (p->nchunks) {
    tecore_result_t r = tecore_mem_free(p->chunks[0].base);
    if (r != TECORE_SUCCESS) return tg_core(r, fn);
    p->chunks[0].base = 0;
  }
  for (size_t i = 0; i < p->nchunks; i++) {
    tecore_result_t r = p->chunks[i].base ? tecore_mem_free(p->chunks[i].base) : TECORE_SUCCESS;
    if (r != TECORE_SUCCESS && res == TEGRAPH_SUCCESS) res = tg_core(r, fn);
    free(p->chunks[i].free);
  }
  free(p->chunks);
  free(p->blocks);
  pthread_mutex_destroy(&p->lock);
  te_handle_del(p);
  free(p);
  return res;
}
