/* SPDX-License-Identifier: Apache-2.0 */
/* pool.c -- symmetric memory: segments (one VMM allocation per rank,
 * exported as a POSIX fd, passed to every local peer over the mesh with
 * SCM_RIGHTS, imported and mapped by all of them side by side in one
 * reservation) and the first-fit sub-allocator of the pool segment (free
 * blocks kept sorted by offset and merged with their neighbours).
 *
 * Every step that can fail on one rank is followed by an allgather of
 * the outcome, so all ranks return the same result: a segment exists on
 * every rank or on none.  Ranks may ask for different sizes (each its own
 * TECOMM_POOL_MB): slots are the largest apart, and what is usable at the
 * same offset everywhere (seg->bytes) is the smallest. */
#include "comm_priv.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define TC_ALIGN 256

static size_t round_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

/* Allgathers ok over the mesh: *first_bad is the first rank with ok == 0,
 * or -1 (vote.c). */
static tecomm_result_t agree(struct tecomm_comm *c, int ok, int *first_bad) {
  int nfail = 0;
  int32_t code = 0;
  return tc_gather_codes(c->mesh, ok ? 0 : 1, &nfail, first_bad, &code);
}

static void seg_unmap(struct tc_seg *s) {
  for (int r = 0; r < s->nmapped; r++)
    (void)tecore_vmm_unmap(s->va + (size_t)r * s->stride, s->size[r]);
  s->nmapped = 0;
}

static void seg_free_parts(int n, struct tc_seg *s) {
  seg_unmap(s);
  if (s->va) (void)tecore_vmm_free_va(s->va, (size_t)n * s->stride);
  for (int r = 0; r < n; r++)
    if (s->h[r]) (void)tecore_vmm_release(s->h[r]);
  struct tc_block *b = s->free_list, *nb;
  for (; b; b = nb) nb = b->next, free(b);
  for (b = s->used_list; b; b = nb) nb = b->next, free(b);
  free(s);
}

tecomm_result_t tc_seg_create(struct tecomm_comm *c, size_t bytes, const char *fail_link,
                              struct tc_seg **out, int *failed_rank) {
  static const char fn[] = "symmetric segment";
  int n = c->nranks, me = c->rank, bad = -1;
  *failed_rank = -1;
  if (!c->mesh) return TC_ERR(TECOMM_ERR_NOT_SUPPORTED, "%s: the ranks are not on one host", fn);
  if (bytes > TC_MEM_MAX)
    return TC_ERR(TECOMM_ERR_INVALID, "%s: %zu bytes is more than %zu", fn, bytes, TC_MEM_MAX);
  bytes = round_up(bytes ? bytes : 1, c->gran);
  struct tc_seg *s = calloc(1, sizeof *s);
  char why[512] = "";
  int ok = s != NULL;
  if (ok) {
    s->bytes = SIZE_MAX; /* the minimum over the ranks, below */
    size_t free_b = 0, total_b = 0;
    if (tecore_mem_info(&free_b, &total_b) == TECORE_SUCCESS && bytes > total_b) {
      /* the driver would overcommit or fail late; refuse up front */
      snprintf(why, sizeof why, "%zu bytes exceed the device's %zu", bytes, total_b);
      ok = 0;
    } else if (fail_link && tc_test_fail(fail_link, me)) {
      snprintf(why, sizeof why, "TECOMM_TEST_FAIL");
      ok = 0;
    } else if (tecore_vmm_create(bytes, TECORE_VMM_EXPORT_POSIX_FD, &s->h[me]) != TECORE_SUCCESS) {
      snprintf(why, sizeof why, "%s", tecore_last_error());
      s->h[me] = 0;
      ok = 0;
    }
  }
  uint64_t mine[2] = {(uint64_t)ok, bytes}, all[2 * TC_AR_MAX_RANKS];
  tecomm_result_t r = c->mesh->allgather(c->mesh, mine, all, sizeof mine);
  for (int p = 0; r == TECOMM_SUCCESS && p < n; p++) {
    if (!all[2 * p] && bad < 0) bad = p;
    if (s) {
      s->size[p] = (size_t)all[2 * p + 1];
      if (s->size[p] > s->stride) s->stride = s->size[p];
      if (s->size[p] < s->bytes) s->bytes = s->size[p];
    }
  }
  if (r != TECOMM_SUCCESS || bad >= 0) {
    if (s) seg_free_parts(n, s);
    if (r != TECOMM_SUCCESS) return r;
    *failed_rank = bad;
    if (bad == me) TC_INFO("%s: rank %d cannot allocate %zu bytes: %s", fn, me, bytes, why);
    return TC_ERR(TECOMM_ERR_NOMEM, "%s: rank %d could not allocate %zu bytes%s%s", fn, bad, bytes,
                  bad == me ? ": " : "", bad == me ? why : "");
  }
  /* handles out to every peer, then theirs in: a one-byte message with a
   * descriptor never blocks on socket buffers, so this order cannot hang */
  int fd = -1;
  ok = tecore_vmm_export_fd(s->h[me], &fd) == TECORE_SUCCESS;
  if (!ok) snprintf(why, sizeof why, "export: %s", tecore_last_error());
  r = agree(c, ok, &bad);
  if (r != TECOMM_SUCCESS || bad >= 0) goto fail_agree;
  for (int p = 0; p < n && r == TECOMM_SUCCESS; p++)
    if (p != me) r = tc_mesh_send_fd(c->mesh, p, fd);
  close(fd);
  for (int p = 0; p < n && r == TECOMM_SUCCESS; p++) {
    if (p == me) continue;
    int pfd = -1;
    r = tc_mesh_recv_fd(c->mesh, p, &pfd);
    if (r != TECOMM_SUCCESS) break;
    if (tecore_vmm_import_fd(pfd, &s->h[p]) != TECORE_SUCCESS) {
      s->h[p] = 0;
      snprintf(why, sizeof why, "import of rank %d's handle: %s", p, tecore_last_error());
      ok = 0;
    }
    close(pfd);
  }
  if (r != TECOMM_SUCCESS) goto fail;
  if (ok && tecore_vmm_reserve((size_t)n * s->stride, c->gran, &s->va) != TECORE_SUCCESS) {
    snprintf(why, sizeof why, "reserve: %s", tecore_last_error());
    s->va = 0;
    ok = 0;
  }
  for (int p = 0; ok && p < n; p++) {
    tecore_devptr_t at = s->va + (size_t)p * s->stride;
    if (tecore_vmm_map(at, s->size[p], s->h[p], 0) != TECORE_SUCCESS) {
      snprintf(why, sizeof why, "map of rank %d: %s", p, tecore_last_error());
      ok = 0;
      break;
    }
    s->nmapped = p + 1;
    if (tecore_vmm_set_access(at, s->size[p], c->device) != TECORE_SUCCESS) {
      snprintf(why, sizeof why, "access to rank %d: %s", p, tecore_last_error());
      ok = 0;
    }
  }
  r = agree(c, ok, &bad);
  if (r != TECOMM_SUCCESS || bad >= 0) goto fail_agree;
  s->next = c->segs;
  c->segs = s;
  *out = s;
  TC_TRACE("%s: %zu bytes per rank at 0x%llx (%d ranks)", fn, s->bytes, (unsigned long long)s->va,
           n);
  return TECOMM_SUCCESS;
fail_agree:
  if (r == TECOMM_SUCCESS) {
    *failed_rank = bad;
    r = TC_ERR(TECOMM_ERR_NOMEM, "%s: rank %d could not map the peers' memory%s%s", fn, bad,
               bad == me ? ": " : "", bad == me ? why : "");
  }
fail:
  seg_free_parts(n, s);
  return r;
}

void tc_seg_destroy(struct tecomm_comm *c, struct tc_seg *seg) {
  struct tc_seg **pp = &c->segs;
  while (*pp && *pp != seg) pp = &(*pp)->next;
  if (*pp) *pp = seg->next;
  seg_free_parts(c->nranks, seg);
}

struct tc_seg *tc_seg_find(struct tecomm_comm *c, tecore_devptr_t ptr, size_t bytes, size_t *off) {
  for (struct tc_seg *s = c->segs; s; s = s->next) {
    tecore_devptr_t base = tc_seg_addr(s, c->rank, 0);
    if (ptr >= base && ptr - base < s->bytes && bytes <= s->bytes - (ptr - base)) {
      *off = (size_t)(ptr - base);
      return s;
    }
  }
  return NULL;
}

/* A live allocation of the pool holding off: its used block, or NULL
 * (free space, or past the pool). */
static const struct tc_block *pool_block(const struct tc_seg *pool, size_t off) {
  for (const struct tc_block *b = pool->used_list; b; b = b->next)
    if (off >= b->off && off - b->off < b->len) return b;
  return NULL;
}

int tc_sym_room(struct tecomm_comm *c, tecore_devptr_t ptr, struct tc_seg **seg, size_t *off,
                size_t *room) {
  for (struct tc_seg *s = c->segs; s; s = s->next) {
    size_t span = (size_t)c->nranks * s->stride;
    if (ptr < s->va || ptr - s->va >= span) continue;
    /* this rank's slot, or a peer's (a tecomm_mem_peer_ptr): the same offsets */
    size_t o = (size_t)(ptr - s->va) % s->stride;
    *seg = s;
    *off = o;
    *room = 0;
    if (o >= s->bytes) return 1;
    if (s != c->pool) {
      *room = s->bytes - o;
      return 1;
    }
    const struct tc_block *b = pool_block(s, o);
    if (b) *room = b->off + b->len - o;
    return 1;
  }
  return 0;
}

/* ---- first-fit sub-allocation -------------------------------------------- */

static void pool_reset(struct tc_seg *pool) {
  pool->free_list = calloc(1, sizeof *pool->free_list);
  if (pool->free_list) *pool->free_list = (struct tc_block){.off = 0, .len = pool->bytes};
}

size_t tc_pool_take(struct tc_seg *pool, size_t bytes) {
  if (bytes > pool->bytes) return (size_t)-1;   /* and no rounding can wrap */
  bytes = round_up(bytes ? bytes : 1, TC_ALIGN);
  struct tc_block **pp = &pool->free_list;
  for (; *pp; pp = &(*pp)->next) {
    struct tc_block *b = *pp;
    if (b->len < bytes) continue;
    struct tc_block *u = malloc(sizeof *u);
    if (!u) return (size_t)-1;
    *u = (struct tc_block){.off = b->off, .len = bytes, .next = pool->used_list};
    pool->used_list = u;
    b->off += bytes;
    b->len -= bytes;
    if (!b->len) {
      *pp = b->next;
      free(b);
    }
    return u->off;
  }
  return (size_t)-1;
}

int tc_pool_give(struct tc_seg *pool, size_t off) {
  struct tc_block **up = &pool->used_list;
  while (*up && (*up)->off != off) up = &(*up)->next;
  if (!*up) return -1;
  struct tc_block *u = *up;
  *up = u->next;
  /* insert sorted, then merge with the neighbours */
  struct tc_block **pp = &pool->free_list, *prev = NULL;
  while (*pp && (*pp)->off < u->off) {
    prev = *pp;
    pp = &(*pp)->next;
  }
  u->next = *pp;
  *pp = u;
  if (u->next && u->off + u->len == u->next->off) {
    struct tc_block *nx = u->next;
    u->len += nx->len;
    u->next = nx->next;
    free(nx);
  }
  if (prev && prev->off + prev->len == u->off) {
    prev->len += u->len;
    prev->next = u->next;
    free(u);
  }
  return 0;
}

/* The pool, or the workspace alone, or neither: every rank lands on the
 * same level because each step's outcome is agreed (tc_seg_create). */
static tecomm_result_t setup_ipc(struct tecomm_comm *c, size_t pool_mb, tecore_stream_t st) {
  size_t ws_max = c->ws.max_bytes;
  size_t ws_bytes = (tc_ar_workspace_bytes(c->nranks, ws_max) + 255) / 256 * 256;
  c->pool_req_mb = pool_mb;
  struct tc_seg *seg = NULL;
  int bad = -1;
  tecomm_result_t r;
  if (pool_mb > 0) {
    r = tc_seg_create(c, ws_bytes + pool_mb * 1024 * 1024, "ipc", &seg, &bad);
    if (r == TECOMM_SUCCESS) {
      c->pool = seg;
      pool_reset(seg);
      size_t off = tc_pool_take(seg, ws_bytes);
      if (off != 0) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: pool bookkeeping");
      c->level = TC_LEVEL_POOL;
      c->n_pool = c->nranks;
      snprintf(c->level_why, sizeof c->level_why,
               "every rank has its pool: %zu MiB usable + %zu KiB workspace",
               (seg->bytes - ws_bytes) >> 20, ws_bytes / 1024);
    } else if (r != TECOMM_ERR_NOMEM) {
      return r;
    } else {
      c->n_pool = c->nranks - 1;
      snprintf(c->level_why, sizeof c->level_why, "rank %d could not allocate its pool", bad);
      TC_WARN("tecomm: rank %d could not allocate its pool: every rank falls back", bad);
    }
  } else {
    snprintf(c->level_why, sizeof c->level_why, "TECOMM_POOL_MB=0 (no pool)");
  }
  if (!seg) {
    r = tc_seg_create(c, ws_bytes, "ipc", &seg, &bad);
    if (r == TECOMM_ERR_NOMEM) {
      size_t l = strlen(c->level_why);
      snprintf(c->level_why + l, sizeof c->level_why - l,
               "; rank %d could not allocate the %zu KiB workspace", bad, ws_bytes / 1024);
      return TECOMM_SUCCESS;
    }
    if (r != TECOMM_SUCCESS) return r;
    c->level = TC_LEVEL_INPLACE;
  }
  c->n_ws = c->nranks;
  c->ws.me = tc_seg_addr(seg, c->rank, 0);
  for (int p = 0; p < c->nranks; p++) c->ws.peer[p] = tc_seg_addr(seg, p, 0);
  TC_CORE(tc_ar_workspace_init(c->ws.me, c->nranks, ws_max, st), "tecomm_comm_init: workspace");
  TC_CORE(tecore_stream_synchronize(st), "tecomm_comm_init: workspace");
  /* no peer may write into a workspace before its owner initialised it */
  return c->xchg->barrier(c->xchg);
}

tecomm_result_t tc_symm_open(struct tecomm_comm *c, size_t pool_mb, tecore_stream_t st) {
  /* the pool does not need the kernels (tecomm_mem_alloc works without
   * them); the table skips algorithms the kernels do not offer */
  int ipc = c->all_local && c->nranks <= TC_AR_MAX_RANKS && c->n_vmm_fd == c->nranks &&
            c->n_p2p == c->nranks;
  if (ipc) {
    size_t g = 0;
    TC_CORE(tecore_vmm_granularity(&g, 1), "tecomm_comm_init: granularity");
    uint64_t mine = g, *gs = calloc((size_t)c->nranks, sizeof *gs);
    if (!gs) return TC_ERR(TECOMM_ERR_NOMEM, "tecomm_comm_init: out of memory");
    tecomm_result_t r = c->xchg->allgather(c->xchg, &mine, gs, sizeof mine);
    for (int i = 0; r == TECOMM_SUCCESS && i < c->nranks; i++)
      if (gs[i] > c->gran) c->gran = (size_t)gs[i];
    free(gs);
    TC_CHECK(r);
    return setup_ipc(c, pool_mb, st);
  }
  if (!c->all_local)
    snprintf(c->level_why, sizeof c->level_why, "the ranks span hosts (IPC needs one host)");
  else if (c->nranks > TC_AR_MAX_RANKS)
    snprintf(c->level_why, sizeof c->level_why, "%d ranks (IPC kernels reduce over at most %d)",
             c->nranks, TC_AR_MAX_RANKS);
  else
    snprintf(c->level_why, sizeof c->level_why,
             "IPC needs every rank: p2p %d/%d, vmm posix-fd %d/%d", c->n_p2p, c->nranks,
             c->n_vmm_fd, c->nranks);
  return TECOMM_SUCCESS;
}
