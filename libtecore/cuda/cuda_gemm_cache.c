/* SPDX-License-Identifier: Apache-2.0 */
/* cuda_gemm_cache.c -- the cuda GEMM's algorithm cache: cuBLASLt's
 * heuristic is asked once per distinct problem (shape, types, layouts,
 * epilogue, pointer alignments, workspace size, device) and its answer
 * reused, so a training step's GEMMs cost one heuristic query each for the
 * life of the process.
 *
 * A fixed table of TE_GEMM_CACHE_SLOTS entries, open addressing with
 * linear probing, one mutex (lookups are a few hundred nanoseconds; GEMMs
 * are microseconds at least).  Entries are never removed: a model has a
 * few dozen GEMM shapes; when the table is full new problems are simply
 * not cached (the heuristic is then asked each time, a logged slowdown,
 * never a wrong answer).  Values are opaque bytes: nothing here depends
 * on cuBLASLt's types. */
#include "cuda/cuda_gemm.h"

#include <pthread.h>
#include <string.h>

#define TE_GEMM_CACHE_SLOTS 1024   /* a power of two; at most 3/4 used */

struct cache_slot {
  int used;
  struct te_gemm_key key;
  unsigned char val[TE_GEMM_ALGO_BYTES];
};

static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;
static struct cache_slot cache_slots[TE_GEMM_CACHE_SLOTS];
static size_t cache_used;
static int cache_full_logged;

/* FNV-1a over the key's words. */
static size_t key_hash(const struct te_gemm_key *k) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (int i = 0; i < TE_GEMM_KEY_WORDS; i++) {
    uint64_t w = (uint64_t)k->w[i];
    for (int b = 0; b < 8; b++) {
      h ^= (w >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return (size_t)(h ^ (h >> 29));
}

/* The slot holding key, or the empty slot where it would go. */
static struct cache_slot *find_slot(const struct te_gemm_key *key) {
  size_t i = key_hash(key) & (TE_GEMM_CACHE_SLOTS - 1);
  for (;;) {
    struct cache_slot *s = &cache_slots[i];
    if (!s->used || memcmp(&s->key, key, sizeof *key) == 0) return s;
    i = (i + 1) & (TE_GEMM_CACHE_SLOTS - 1);   /* never all used: see the 3/4 bound */
  }
}

int te_gemm_cache_get(const struct te_gemm_key *key, void *val) {
  pthread_mutex_lock(&cache_lock);
  struct cache_slot *s = find_slot(key);
  int hit = s->used;
  if (hit) memcpy(val, s->val, TE_GEMM_ALGO_BYTES);
  pthread_mutex_unlock(&cache_lock);
  return hit;
}

int te_gemm_cache_put(const struct te_gemm_key *key, const void *val) {
  int r = 0;
  pthread_mutex_lock(&cache_lock);
  struct cache_slot *s = find_slot(key);
  if (!s->used) {
    if (cache_used >= TE_GEMM_CACHE_SLOTS / 4 * 3) {
      r = -1;
      if (!cache_full_logged) {
        cache_full_logged = 1;
        TE_WARN(TECORE_SUBSYS_TUNE, "gemm: the algorithm cache is full (%zu problems); new "
                "GEMM shapes ask cuBLASLt's heuristic on every call", cache_used);
      }
      goto out;
    }
    s->used = 1;
    s->key = *key;
    cache_used++;
  }
  memcpy(s->val, val, TE_GEMM_ALGO_BYTES);
out:
  pthread_mutex_unlock(&cache_lock);
  return r;
}
