/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_api.c -- fuzz-api, the structured fuzzer of the public API: random
 * but type-correct sequences of libtecore, libtegraph and libtecomm calls
 * (these in fuzz_comm.c, on a communicator of one rank) on the vdev
 * backend with its memory checker on (TECORE_VDEV_CHECK=1).
 *
 * The program is a list of operations, each a line of text:
 *     name arg arg ...        (integers; '#' starts a comment)
 * The fuzzer draws lines from its PRNG and executes them; --replay runs
 * files of such lines (t/fuzz/corpus/api/NN-name.txt: the call patterns of past
 * crashes), and --trace prints the lines as they run, so a finding's trace
 * is a corpus file.  Arguments are taken modulo the size of what they pick
 * (slot indices), or literally (sizes, offsets), so any line is safe to run.
 *
 * What it holds (slots): device buffers, pinned host buffers, streams (slot
 * 0 is the legacy stream), events, graphs and executables, tensor
 * descriptors, delayed-scaling states, VMM ranges and handles, fuser
 * sequences, libtegraph memory pools, graphs and callables.  Freed and
 * destroyed objects stay in their slots as stale handles and pointers, to
 * be used again on purpose.
 *
 * Pointer arguments are three integers: kind slot offset, with kinds
 *   0 inside a device buffer (offset modulo its size; the stale base when
 *     it was freed)   1 a buffer's base + offset (up to 1 MiB past its end)
 *   2 NULL            3 a wild address (offset picks one never mapped)
 *   4 inside a pinned host buffer    5 one past a buffer's end
 *   6 a VMM range + offset           7 pageable host scratch (copies only;
 *                                      sizes are clamped to it, since no
 *                                      library can check a pageable range)
 *
 * The oracle, for every call: the result is TECORE_SUCCESS or one of the
 * codes the API documents (never INTERNAL, DRIVER, an unknown value ...),
 * a failure leaves a non-empty tecore_last_error(); calls whose arguments
 * are all valid succeed (copies, memsets, allocations, frees, streams,
 * events); copies between valid buffers copy the right bytes; the process
 * never crashes, hangs or trips ASan/UBSan.  A sticky
 * TECORE_ERR_ILLEGAL_ADDRESS is handled as tecore_strerror(3) documents it:
 * the stream that keeps it is destroyed and created again, and when it is
 * the legacy stream (which keeps it for the process's life) the run stops. */
#include "fuzz.h"
#include "fuzz_api.h"

#include <te/core.h>
#include <te/graph.h>

/* ---- state --------------------------------------------------------------- */

#define NB 10 /* device buffers */
#define NH 3  /* pinned host buffers */
#define NS 4  /* streams (0: legacy) */
#define NE 4  /* events */
#define NG 4  /* graphs */
#define NX 4  /* executables */
#define NT 6  /* tensors */
#define ND 2  /* delayed states */
#define NV 2  /* VMM ranges (and handles) */
#define NQ 2  /* sequences */
#define NP 2  /* memory pools */
#define NPB 4 /* blocks per pool */
#define NTG 2 /* libtegraph graphs */
#define NC 2  /* callables */
#define SCRATCH_BYTES (1u << 20)
#define SCALE_STRIDE ((size_t)64 << 10)

struct buf {
  tecore_devptr_t p;
  size_t bytes;
  int live;
};
struct hbuf {
  void *p;
  size_t bytes;
  int live;
};
struct strm {
  tecore_stream_t s;
  int live;    /* created and not destroyed (slot 0: always) */
  int ever;    /* s holds a handle (maybe stale) */
  int capture; /* a capture was begun on it */
};
struct vmm {
  tecore_devptr_t va;
  size_t bytes;
  int reserved;
  tecore_vmm_handle_t h;
  size_t hbytes;
  int handle;
  int mapped;
};
struct seq {
  tecore_seq_t *q;
  int live, built, nops;
  size_t rows, features;
  tecore_dtype_t dtype;
  tecore_devptr_t io[4]; /* in, out, dy, dx: allocated to fit at build */
  size_t io_bytes[4];
  int forwarded;
};
struct pool {
  tegraph_mempool_t *p;
  int live;
  tecore_devptr_t blk[NPB];
};
struct cuser {
  int mode; /* 0 well-behaved, 1 fails, 2 works on the legacy stream */
};
struct callable {
  tegraph_callable_t *c;
  int live;
  struct cuser *user;
  size_t n; /* elements of the input and output */
  int from_seq;
  struct tecore_tensor in, out; /* from_seq: the sample shapes */
};

static struct {
  struct buf b[NB];
  struct hbuf h[NH];
  struct strm s[NS];
  tecore_event_t e[NE];
  int e_live[NE], e_ever[NE];
  tecore_graph_t g[NG];
  int g_live[NG];
  tecore_graph_exec_t x[NX];
  int x_live[NX], x_ever[NX];
  /* the graph (slot, generation) each exec was instantiated from or last
   * updated to: a node of that graph is one the exec knows */
  size_t x_from[NX];
  unsigned x_from_gen[NX], g_gen[NG];
  struct tecore_tensor t[NT];
  struct tecore_delayed_state d[ND];
  int d_live[ND];
  struct vmm v[NV];
  size_t gran;
  struct seq q[NQ];
  struct pool p[NP];
  tegraph_graph_t *tg[NTG];
  int tg_live[NTG], tg_capture[NTG];
  struct callable c[NC];
  tecore_devptr_t scales; /* NT regions of SCALE_STRIDE: scale, amax, scale_inv ... */
  unsigned char *scratch; /* pageable host memory */
  void *reg;              /* host memory for host_register */
  int reg_live;
  size_t reg_bytes;
  int stop; /* the legacy stream keeps an error: the run ends */
  int trace;
} F;

/* ---- checking results ------------------------------------------------------ */

static size_t cur_op = FZ_MAX_OPS; /* the operation running, for --stats */

static void count_call(const char *fn) {
  (void)fn;
  fz_sh->calls++;
}

static void count_result(int ok) {
  if (cur_op >= FZ_MAX_OPS) return;
  if (ok) fz_sh->op_ok[cur_op]++;
  else fz_sh->op_err[cur_op]++;
}

/* The codes a libtecore call may return on vdev.  Not INTERNAL, DRIVER,
 * NO_DRIVER, NO_DEVICE, NOT_INITIALIZED, SYSTEM, DISABLED, NO_LIBRARY. */
static int tecore_allowed(tecore_result_t r) {
  switch (r) {
    case TECORE_SUCCESS:
    case TECORE_ERR_INVALID:
    case TECORE_ERR_NOMEM:
    case TECORE_ERR_DEVICE_NOMEM:
    case TECORE_ERR_NOT_SUPPORTED:
    case TECORE_ERR_NOT_READY:
    case TECORE_ERR_CAPTURE:
    case TECORE_ERR_GRAPH_UPDATE:
    case TECORE_ERR_TIMEOUT:
    case TECORE_ERR_ILLEGAL_ADDRESS: return 1;
    default: return 0;
  }
}

static int tegraph_allowed(tegraph_result_t r) {
  switch (r) {
    case TEGRAPH_SUCCESS:
    case TEGRAPH_ERR_INVALID:
    case TEGRAPH_ERR_NOMEM:
    case TEGRAPH_ERR_DEVICE:
    case TEGRAPH_ERR_CAPTURE:
    case TEGRAPH_ERR_TIMEOUT: /* a libtecore timeout keeps its code */
    case TEGRAPH_ERR_STATE:
    case TEGRAPH_ERR_NOT_SUPPORTED: return 1;
    default: return 0;
  }
}

static tecore_result_t check_core(tecore_result_t r, const char *fn) {
  if (!tecore_allowed(r))
    fz_fail("%s returned %s (%d), not a documented result: %s", fn, tecore_result_name(r), (int)r,
            tecore_last_error());
  if (r != TECORE_SUCCESS && r != TECORE_ERR_NOT_READY && !tecore_last_error()[0])
    fz_fail("%s returned %s with an empty tecore_last_error()", fn, tecore_result_name(r));
  count_result(r == TECORE_SUCCESS);
  if (F.trace && r != TECORE_SUCCESS && r != TECORE_ERR_NOT_READY)
    printf("    -> %s: %s\n", tecore_result_name(r), tecore_last_error());
  return r;
}

static tegraph_result_t check_graph(tegraph_result_t r, const char *fn) {
  if (!tegraph_allowed(r))
    fz_fail("%s returned %s (%d), not a documented result: %s", fn, tegraph_result_name(r), (int)r,
            tegraph_last_error());
  if (r != TEGRAPH_SUCCESS && !tegraph_last_error()[0])
    fz_fail("%s returned %s with an empty tegraph_last_error()", fn, tegraph_result_name(r));
  count_result(r == TEGRAPH_SUCCESS);
  if (F.trace && r != TEGRAPH_SUCCESS)
    printf("    -> %s: %s\n", tegraph_result_name(r), tegraph_last_error());
  return r;
}

/* C(call): one checked libtecore call; G(call) the same for libtegraph. */
#define C(call) (count_call(#call), tecore_clear_error(), check_core((call), #call))
#define G(call) (count_call(#call), tecore_clear_error(), check_graph((call), #call))

/* A call whose arguments were all valid must succeed (or run out of memory). */
static void expect_ok(tecore_result_t r, const char *what) {
  /* TIMEOUT: an earlier wait on the stream ran out (asynchronous, sticky) */
  if (r != TECORE_SUCCESS && r != TECORE_ERR_DEVICE_NOMEM && r != TECORE_ERR_NOMEM &&
      r != TECORE_ERR_TIMEOUT)
    fz_fail("%s with valid arguments returned %s: %s", what, tecore_result_name(r),
            tecore_last_error());
}

/* A destroy of a stale handle that succeeded is a finding, unless a newer
 * object of the same kind got the same address (the allocator reused it:
 * as on the driver, no library can tell the two apart).  Then the newer
 * object is the one destroyed, and its slot is marked so (REUSED). */
#define REUSED(n, cond_live, same_handle, kill)       \
  ({                                                  \
    int reused_ = 0;                                  \
    for (size_t k_ = 0; k_ < (n); k_++)               \
      if (k_ != self_ && (cond_live) && (same_handle)) { \
        kill;                                         \
        reused_ = 1;                                  \
      }                                               \
    reused_;                                          \
  })

/* ---- handles from arguments --------------------------------------------------- */

static uint64_t ix(int64_t a, uint64_t n) { return (uint64_t)a % n; }

static int any_capture(void) {
  for (int i = 0; i < NS; i++)
    if (F.s[i].capture) return 1;
  for (int i = 0; i < NTG; i++)
    if (F.tg_capture[i]) return 1;
  return 0;
}

static tecore_stream_t stream_of(int64_t a) { return F.s[ix(a, NS)].s; }

/* A stream that can take work now: not destroyed, not keeping an error. */
static int stream_clean(int64_t a) {
  struct strm *s = &F.s[ix(a, NS)];
  if (!s->live || s->capture) return 0;
  tecore_result_t q = tecore_stream_query(s->s);
  return q == TECORE_SUCCESS || q == TECORE_ERR_NOT_READY;
}

/* Destroys and recreates stream slot i when it keeps a sticky error (the
 * documented recovery); stops the run when that stream is the legacy one. */
static void recover_stream(size_t i) {
  struct strm *s = &F.s[i];
  if (!s->live || s->capture) return;
  tecore_result_t q = C(tecore_stream_query(s->s));
  if (q != TECORE_ERR_ILLEGAL_ADDRESS && q != TECORE_ERR_TIMEOUT) return;
  if (i == 0) {
    F.stop = 1;
    if (F.trace) printf("    (the legacy stream keeps %s: the run ends)\n", tecore_result_name(q));
    return;
  }
  C(tecore_stream_destroy(s->s));
  s->live = 0;
  if (C(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s->s)) == TECORE_SUCCESS) s->live = 1;
}

/* After a call that returned r: a sticky error on any stream is recovered. */
static void after(tecore_result_t r) {
  if (r != TECORE_ERR_ILLEGAL_ADDRESS && r != TECORE_ERR_TIMEOUT) return;
  for (size_t i = 0; i < NS; i++) recover_stream(i);
}
static void afterg(tegraph_result_t r) {
  if (r == TEGRAPH_ERR_DEVICE || r == TEGRAPH_ERR_CAPTURE || r == TEGRAPH_ERR_TIMEOUT)
    after(TECORE_ERR_ILLEGAL_ADDRESS);
}

static const uint64_t wild[] = {0x8,
                                0x40,
                                0x1000,
                                0x800000000000ull,
                                0x4000000000000000ull,
                                0xfffffffffffff000ull,
                                0xfffffffffffffff0ull};

/* The address a pointer argument names; *valid_bytes gets how many bytes
 * from there lie inside a live allocation (0: none). */
static tecore_devptr_t ptr_of(const int64_t *a, size_t *valid_bytes) {
  uint64_t kind = ix(a[0], 8), off = (uint64_t)a[2];
  size_t vb = 0;
  tecore_devptr_t p = 0;
  switch (kind) {
    case 0: {
      struct buf *b = &F.b[ix(a[1], NB)];
      if (b->bytes)
        off %= b->bytes;
      else
        off = 0;
      p = b->p + off;
      if (b->live && b->p) vb = b->bytes - off;
      break;
    }
    case 1: {
      /* past the end, into the guard page or the arena beyond, never far:
       * a far address may be some mapped host memory of the process,
       * which a copy may legally write (unified addressing), as a GPU
       * with HMM would */
      struct buf *b = &F.b[ix(a[1], NB)];
      off = b->p ? off % (b->bytes + ((uint64_t)1 << 20)) : off % 4096;
      p = b->p + off;
      if (b->live && b->p && off < b->bytes) vb = b->bytes - off;
      break;
    }
    case 2: p = 0; break;
    case 3: p = wild[off % (sizeof wild / sizeof wild[0])]; break;
    case 4: {
      struct hbuf *h = &F.h[ix(a[1], NH)];
      if (h->bytes)
        off %= h->bytes;
      else
        off = 0;
      p = (tecore_devptr_t)(uintptr_t)h->p + off;
      if (h->live && h->p) vb = h->bytes - off;
      break;
    }
    case 5: {
      struct buf *b = &F.b[ix(a[1], NB)];
      p = b->p + b->bytes;
      break;
    }
    case 6: {
      struct vmm *v = &F.v[ix(a[1], NV)];
      if (v->bytes)
        off %= v->bytes;
      else
        off = 0;
      p = v->va + off;
      if (v->reserved && v->mapped && v->va) vb = v->bytes - off;
      break;
    }
    default:
      off %= SCRATCH_BYTES;
      p = (tecore_devptr_t)(uintptr_t)F.scratch + off;
      vb = SCRATCH_BYTES - off;
      break;
  }
  if (valid_bytes) *valid_bytes = vb;
  return p;
}

static int is_scratch(const int64_t *a) { return ix(a[0], 8) == 7; }

/* ---- lent to fuzz_comm.c (fuzz_api.h) ------------------------------------------ */

uint64_t fz_ix(int64_t a, uint64_t n) { return ix(a, n); }
/* pageable host scratch is lent as a wild address: no library can check a
 * pageable range, and the comm calls size their copies themselves */
tecore_devptr_t fz_ptr(const int64_t *a, size_t *valid_bytes) {
  if (!is_scratch(a)) return ptr_of(a, valid_bytes);
  int64_t w[3] = {3, a[1], a[2]};
  return ptr_of(w, valid_bytes);
}
tecore_devptr_t fz_buf(int64_t a, size_t *live_bytes) {
  struct buf *b = &F.b[ix(a, NB)];
  if (live_bytes) *live_bytes = b->live ? b->bytes : 0;
  return b->p;
}
tecore_stream_t fz_stream(int64_t a) { return stream_of(a); }
const struct tecore_tensor *fz_tensor(int64_t a) { return &F.t[ix(a, NT)]; }
void fz_after(tecore_result_t r) { after(r); }
void fz_count_call(const char *fn) { count_call(fn); }
void fz_count_result(int ok) { count_result(ok); }
int fz_tracing(void) { return F.trace; }
void fz_finding(const char *fmt, ...) {
  char what[900];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(what, sizeof what, fmt, ap);
  va_end(ap);
  fz_fail("%s", what);
}

/* A pointer for a raw kernel argument (a graph node's parameter): NULL, a
 * wild or a freed address, or the base of a live buffer of at least 4 KiB
 * (the captured kernels touch up to 4 KiB: how far a kernel reads past its
 * pointer's start is the kernel's business, on a GPU as on vdev).
 * misalign: also base + 1 when the argument says so. */
static tecore_devptr_t raw_ptr(const int64_t *a, int misalign) {
  uint64_t kind = ix(a[0], 8);
  if (kind == 2 || kind == 3) return ptr_of(a, NULL);
  struct buf *b = &F.b[ix(a[1], NB)];
  if (kind == 1 && !b->live) return b->p; /* freed (or 0) */
  for (size_t k = 0; k < NB; k++) {
    struct buf *c = &F.b[(ix(a[1], NB) + k) % NB];
    if (c->live && c->bytes >= 4096) return c->p + (misalign && ix(a[2], 4) == 1 ? 1 : 0);
  }
  return 0;
}

/* ---- the operations --------------------------------------------------------- *
 * Argument types (gen_args draws each):
 *   b buffer  h host buffer  s stream  e event  g graph  x exec  t tensor
 *   d delayed state  V vmm  q sequence  p pool  G tegraph graph  c callable
 *   z size  n dim  P pointer (3 ints)  k small (0..15)  m mode (0..255)
 *   v value (32 bits) */

#define NARGS 12

struct op {
  const char *name;
  const char *types;
  unsigned weight;
  void (*run)(const int64_t *a);
};

/* -- memory -- */

static void op_alloc(const int64_t *a) {
  struct buf *b = &F.b[ix(a[0], NB)];
  size_t bytes = (size_t)a[1];
  /* sizes the machine would really have to provide are not the point */
  if (bytes > ((size_t)64 << 20) && bytes < ((size_t)1 << 40)) return;
  if (b->live) {
    if (C(tecore_mem_free(b->p)) == TECORE_SUCCESS)
      b->live = 0;
    else
      return;
  }
  tecore_devptr_t p = 0;
  tecore_result_t r = C(tecore_mem_alloc(bytes, &p));
  if (r == TECORE_SUCCESS) {
    if (!p) fz_fail("tecore_mem_alloc(%zu) succeeded with address 0", bytes);
    b->p = p;
    b->bytes = bytes;
    b->live = 1;
  } else if (bytes && bytes <= ((size_t)16 << 20) && !any_capture()) {
    expect_ok(r, "tecore_mem_alloc");
  }
}

static void op_free(const int64_t *a) {
  struct buf *b = &F.b[ix(a[0], NB)];
  uint64_t mode = ix(a[1], 4);
  tecore_devptr_t p = mode == 1 ? b->p + 1 : mode == 2 ? 0 : b->p;
  int was_live = b->live;
  tecore_result_t r = C(tecore_mem_free(p));
  if (r == TECORE_SUCCESS && p == b->p) b->live = 0;
  if (mode != 1 && mode != 2 && was_live && !any_capture()) expect_ok(r, "tecore_mem_free");
  if (r == TECORE_SUCCESS && p && (p != b->p || !was_live))
    fz_fail("tecore_mem_free(0x%llx) of no allocation succeeded", (unsigned long long)p);
}

static void op_alloc_host(const int64_t *a) {
  struct hbuf *h = &F.h[ix(a[0], NH)];
  size_t bytes = (size_t)a[1];
  if (bytes > ((size_t)64 << 20) && bytes < ((size_t)1 << 40)) return;
  if (h->live) {
    if (C(tecore_mem_free_host(h->p)) != TECORE_SUCCESS) return;
    h->live = 0;
  }
  void *p = NULL;
  if (C(tecore_mem_alloc_host(bytes, &p)) == TECORE_SUCCESS) {
    h->p = p;
    h->bytes = bytes;
    h->live = 1;
  }
}

static void op_free_host(const int64_t *a) {
  struct hbuf *h = &F.h[ix(a[0], NH)];
  uint64_t mode = ix(a[1], 3);
  void *p = mode == 1 ? (char *)h->p + 1 : mode == 2 ? NULL : h->p;
  tecore_result_t r = C(tecore_mem_free_host(p));
  if (r == TECORE_SUCCESS && p == h->p) h->live = 0;
}

static void op_memcpy_async(const int64_t *a) {
  size_t vd = 0, vs = 0;
  tecore_devptr_t dst = ptr_of(a, &vd), src = ptr_of(a + 3, &vs);
  size_t bytes = (size_t)a[6];
  if ((is_scratch(a) || is_scratch(a + 3)) && bytes > (vd < vs ? vd : vs))
    bytes = vd < vs ? vd : vs;
  int good = vd >= bytes && vs >= bytes && bytes && stream_clean(a[7]) && !any_capture();
  /* overlapping ranges are the caller's fault; keep the oracle to disjoint ones */
  if (good && dst < src + bytes && src < dst + bytes) good = 0;
  tecore_result_t r = C(tecore_memcpy_async(dst, src, bytes, stream_of(a[7])));
  if (good) expect_ok(r, "tecore_memcpy_async");
  after(r);
}

static void op_memcpy(const int64_t *a) {
  size_t vd = 0, vs = 0;
  tecore_devptr_t dst = ptr_of(a, &vd), src = ptr_of(a + 3, &vs);
  size_t bytes = (size_t)a[6];
  if ((is_scratch(a) || is_scratch(a + 3)) && bytes > (vd < vs ? vd : vs))
    bytes = vd < vs ? vd : vs;
  tecore_result_t r = C(tecore_memcpy(dst, src, bytes));
  after(r);
}

static void op_memset(const int64_t *a) {
  size_t vd = 0;
  tecore_devptr_t dst = ptr_of(a, &vd);
  uint64_t w = ix(a[3], 3);
  size_t count = (size_t)a[4];
  size_t esz = w == 0 ? 1 : w == 1 ? 2 : 4;
  if (is_scratch(a) && count > vd / esz) count = vd / esz;
  tecore_stream_t s = stream_of(a[5]);
  tecore_result_t r;
  if (w == 0)
    r = C(tecore_memset_d8_async(dst, (uint8_t)a[6], count, s));
  else if (w == 1)
    r = C(tecore_memset_d16_async(dst, (uint16_t)a[6], count, s));
  else
    r = C(tecore_memset_d32_async(dst, (uint32_t)a[6], count, s));
  int good = count && count <= vd / esz && dst % esz == 0 && stream_clean(a[5]) && !any_capture();
  if (good) expect_ok(r, "tecore_memset_async");
  after(r);
}

/* Copies random bytes through two valid buffers and back: they must arrive. */
static void op_copy_check(const int64_t *a) {
  struct buf *x = &F.b[ix(a[0], NB)], *y = &F.b[ix(a[1], NB)];
  size_t n = (size_t)a[2] % 65536 + 1;
  if (!x->live || !y->live || x == y || x->bytes < n || y->bytes < n || any_capture() ||
      !stream_clean(a[3]))
    return;
  /* other streams' queued work may write these buffers: let it finish
   * (a race between streams is the caller's to order, not a finding) */
  tecore_result_t r0 = C(tecore_ctx_synchronize());
  after(r0);
  if (r0 != TECORE_SUCCESS || F.stop || !stream_clean(a[3])) return;
  unsigned char *want = malloc(n), *got = malloc(n);
  if (!want || !got) goto out;
  for (size_t i = 0; i < n; i++) want[i] = (unsigned char)fz_u64();
  memset(got, 0xa5, n);
  tecore_stream_t s = stream_of(a[3]);
  tecore_result_t r = C(tecore_memcpy_async(x->p, (tecore_devptr_t)(uintptr_t)want, n, s));
  expect_ok(r, "copy_check: host to device");
  r = C(tecore_memcpy_async(y->p, x->p, n, s));
  expect_ok(r, "copy_check: device to device");
  r = C(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)got, y->p, n, s));
  expect_ok(r, "copy_check: device to host");
  r = C(tecore_stream_synchronize(s));
  expect_ok(r, "copy_check: synchronize");
  if (memcmp(want, got, n) != 0) fz_fail("copy_check: %zu bytes came back different", n);
out:
  free(want);
  free(got);
}

static void op_host_register(const int64_t *a) {
  uint64_t mode = ix(a[0], 4);
  size_t bytes = mode == 0   ? 3 * 4096
                 : mode == 1 ? SIZE_MAX
                 : mode == 2 ? 4096
                             : (size_t)a[1] % (3 * 4096 + 1);
  char *p = mode == 2 ? (char *)F.reg + 4096 : (char *)F.reg;
  tecore_result_t r = C(tecore_mem_host_register(p, bytes, (unsigned)a[2] & 0xf));
  if (r == TECORE_SUCCESS) {
    /* SIZE_MAX wraps; a range over a registered one is registered twice */
    uintptr_t lo = (uintptr_t)p, rlo = (uintptr_t)F.reg;
    int overlap =
        F.reg_live && lo < rlo + (F.reg_bytes ? F.reg_bytes : 1) && rlo < lo + (bytes ? bytes : 1);
    if (overlap || bytes > 3 * 4096)
      fz_fail("tecore_mem_host_register(%p, %zu) of a bad range succeeded", (void *)p, bytes);
    if (p == F.reg) {
      F.reg_live = 1;
      F.reg_bytes = bytes;
    } else {
      C(tecore_mem_host_unregister(p));
    }
  }
}

static void op_host_unregister(const int64_t *a) {
  char *p = ix(a[0], 2) ? (char *)F.reg + 4096 : (char *)F.reg;
  tecore_result_t r = C(tecore_mem_host_unregister(p));
  if (r == TECORE_SUCCESS) {
    if (p != F.reg || !F.reg_live) fz_fail("tecore_mem_host_unregister(%p) succeeded", (void *)p);
    F.reg_live = 0;
  }
}

static void op_write_wait(const int64_t *a) {
  size_t vb = 0;
  tecore_devptr_t p = ptr_of(a + 1, &vb);
  tecore_stream_t s = stream_of(a[0]);
  tecore_result_t r;
  if (ix(a[4], 2)) {
    p &= ~(tecore_devptr_t)7;
    r = C(tecore_stream_write_value64(s, p, (uint64_t)a[5]));
    after(r);
    if (r == TECORE_SUCCESS)
      after(C(tecore_stream_wait_value64(s, p, (uint64_t)a[5], TECORE_WAIT_EQ)));
  } else {
    p &= ~(tecore_devptr_t)3;
    r = C(tecore_stream_write_value32(s, p, (uint32_t)a[5]));
    after(r);
    if (r == TECORE_SUCCESS)
      after(C(tecore_stream_wait_value32(s, p, (uint32_t)a[5], TECORE_WAIT_EQ)));
  }
}

/* -- streams and events -- */

static void op_stream_create(const int64_t *a) {
  size_t i = ix(a[0], NS) ? ix(a[0], NS) : 1; /* slot 0 is the legacy stream */
  struct strm *s = &F.s[i];
  if (s->live) {
    if (s->capture) return;
    if (C(tecore_stream_destroy(s->s)) != TECORE_SUCCESS) return;
    s->live = 0;
  }
  int lo = 0, hi = 0;
  C(tecore_stream_priority_range(&lo, &hi));
  tecore_stream_t st = NULL;
  int prio = (int)ix(a[2], 8) - 4;
  tecore_result_t r = C(tecore_stream_create((unsigned)a[1] & 3, prio, &st));
  if (r == TECORE_SUCCESS) {
    s->s = st;
    s->live = s->ever = 1;
  } else if (((unsigned)a[1] & 2u) == 0 && prio >= hi && prio <= lo && !any_capture()) {
    expect_ok(r, "tecore_stream_create");
  }
}

static void op_stream_destroy(const int64_t *a) {
  size_t i = ix(a[0], NS);
  struct strm *s = &F.s[i];
  if (i == 0 || !s->ever) return;
  if (s->capture) return; /* its capture ends first (cleanup) */
  tecore_result_t r = C(tecore_stream_destroy(s->s));
  if (r == TECORE_SUCCESS) {
    size_t self_ = i;
    if (!s->live && !REUSED(NS, F.s[k_].live, F.s[k_].s == s->s, F.s[k_].live = 0))
      fz_fail("tecore_stream_destroy of a destroyed stream succeeded");
    s->live = 0;
  }
}

static void op_stream_sync(const int64_t *a) {
  after(C(tecore_stream_synchronize(stream_of(a[0]))));
}
static void op_stream_query(const int64_t *a) { after(C(tecore_stream_query(stream_of(a[0])))); }
static void op_ctx_sync(const int64_t *a) { after(C(tecore_ctx_synchronize())); }

static void op_event_create(const int64_t *a) {
  size_t i = ix(a[0], NE);
  if (F.e_live[i]) {
    if (C(tecore_event_destroy(F.e[i])) != TECORE_SUCCESS) return;
    F.e_live[i] = 0;
  }
  tecore_event_t e = NULL;
  if (C(tecore_event_create((unsigned)a[1] & 7, &e)) == TECORE_SUCCESS) {
    F.e[i] = e;
    F.e_live[i] = F.e_ever[i] = 1;
  }
}

static void op_event_destroy(const int64_t *a) {
  size_t i = ix(a[0], NE);
  if (!F.e_ever[i]) return;
  tecore_result_t r = C(tecore_event_destroy(F.e[i]));
  if (r == TECORE_SUCCESS) {
    size_t self_ = i;
    if (!F.e_live[i] && !REUSED(NE, F.e_live[k_], F.e[k_] == F.e[i], F.e_live[k_] = 0))
      fz_fail("tecore_event_destroy of a destroyed event succeeded");
    F.e_live[i] = 0;
  }
}

static void op_event_record(const int64_t *a) {
  after(C(tecore_event_record(F.e[ix(a[0], NE)], stream_of(a[1]))));
}
static void op_event_sync(const int64_t *a) {
  after(C(tecore_event_synchronize(F.e[ix(a[0], NE)])));
}
static void op_event_query(const int64_t *a) { after(C(tecore_event_query(F.e[ix(a[0], NE)]))); }
static void op_stream_wait_event(const int64_t *a) {
  after(C(tecore_stream_wait_event(stream_of(a[0]), F.e[ix(a[1], NE)])));
}
static void op_event_elapsed(const int64_t *a) {
  float ms = 0;
  C(tecore_event_elapsed(ix(a[2], 4) ? &ms : NULL, F.e[ix(a[0], NE)], F.e[ix(a[1], NE)]));
}

/* -- capture and graphs -- */

static void op_begin_capture(const int64_t *a) {
  size_t i = ix(a[0], NS);
  tecore_result_t r = C(tecore_stream_begin_capture(F.s[i].s, (tecore_capture_mode_t)ix(a[1], 4)));
  if (r == TECORE_SUCCESS) F.s[i].capture = 1;
}

static void put_graph(size_t gi, tecore_graph_t g) {
  if (F.g_live[gi]) C(tecore_graph_destroy(F.g[gi]));
  F.g[gi] = g;
  F.g_live[gi] = 1;
  F.g_gen[gi]++;
}

static void exec_from(size_t xi, size_t gi) {
  F.x_from[xi] = gi;
  F.x_from_gen[xi] = F.g_gen[gi];
}

static void op_end_capture(const int64_t *a) {
  size_t i = ix(a[0], NS);
  tecore_graph_t g = NULL;
  tecore_result_t r = C(tecore_stream_end_capture(F.s[i].s, &g));
  if (F.s[i].capture) F.s[i].capture = 0;
  if (r == TECORE_SUCCESS && g) put_graph(ix(a[1], NG), g);
  after(r);
}

static void op_capture_status(const int64_t *a) {
  tecore_capture_status_t st;
  C(tecore_stream_capture_status(stream_of(a[0]), &st));
}

static void op_instantiate(const int64_t *a) {
  size_t xi = ix(a[0], NX), gi = ix(a[1], NG);
  tecore_graph_exec_t x = F.x[xi];
  tecore_result_t r = C(tecore_graph_instantiate(&x, F.g[gi]));
  if (r != TECORE_SUCCESS) {
    if (x != F.x[xi]) fz_fail("a failed tecore_graph_instantiate changed *exec");
    return;
  }
  if (F.x_live[xi]) C(tecore_graph_exec_destroy(F.x[xi]));
  F.x[xi] = x;
  F.x_live[xi] = F.x_ever[xi] = 1;
  exec_from(xi, gi);
}

static void op_graph_launch(const int64_t *a) {
  after(C(tecore_graph_launch(F.x[ix(a[0], NX)], stream_of(a[1]))));
}
static void op_graph_upload(const int64_t *a) {
  after(C(tecore_graph_upload(F.x[ix(a[0], NX)], stream_of(a[1]))));
}

static void op_exec_update(const int64_t *a) {
  tecore_graph_update_result_t why = TECORE_GRAPH_UPDATE_SUCCESS;
  if (C(tecore_graph_exec_update(F.x[ix(a[0], NX)], F.g[ix(a[1], NG)], &why)) == TECORE_SUCCESS &&
      F.x_live[ix(a[0], NX)] && F.g_live[ix(a[1], NG)])
    exec_from(ix(a[0], NX), ix(a[1], NG));
}

static void op_graph_destroy(const int64_t *a) {
  size_t gi = ix(a[0], NG);
  if (!F.g[gi]) return;
  tecore_result_t r = C(tecore_graph_destroy(F.g[gi]));
  if (r == TECORE_SUCCESS) {
    size_t self_ = gi;
    if (!F.g_live[gi] && !REUSED(NG, F.g_live[k_], F.g[k_] == F.g[gi], F.g_live[k_] = 0))
      fz_fail("tecore_graph_destroy of a destroyed graph succeeded");
    F.g_live[gi] = 0;
  }
}

static void op_exec_destroy(const int64_t *a) {
  size_t xi = ix(a[0], NX);
  if (!F.x_ever[xi]) return;
  tecore_result_t r = C(tecore_graph_exec_destroy(F.x[xi]));
  if (r == TECORE_SUCCESS) {
    size_t self_ = xi;
    if (!F.x_live[xi] && !REUSED(NX, F.x_live[k_], F.x[k_] == F.x[xi], F.x_live[k_] = 0))
      fz_fail("tecore_graph_exec_destroy of a destroyed exec succeeded");
    F.x_live[xi] = 0;
  }
}

static void op_graph_nodes(const int64_t *a) {
  struct tecore_graph_node_desc nd[9];
  size_t max = (size_t)ix(a[1], 9), count = 0;
  memset(nd, 0x5a, sizeof nd);
  tecore_result_t r = C(tecore_graph_nodes(F.g[ix(a[0], NG)], max ? nd : NULL, max, &count));
  if (r == TECORE_SUCCESS) {
    const unsigned char *tail = (const unsigned char *)&nd[max < count ? max : count];
    size_t left = sizeof nd - (size_t)(tail - (const unsigned char *)nd);
    for (size_t i = 0; i < left; i++)
      if (tail[i] != 0x5a)
        fz_fail("tecore_graph_nodes wrote past the %zu entries it described", count);
    /* a kernel node's arguments, and a set of them into an exec */
    size_t n = max < count ? max : count;
    for (size_t i = 0; i < n && i < 2; i++) {
      if (nd[i].type != TECORE_GRAPH_NODE_KERNEL || nd[i].kernel_id < 0) continue;
      const struct tecore_kernel_def *def = NULL;
      if (C(tecore_kernel_get_def(nd[i].kernel_id, &def)) != TECORE_SUCCESS) continue;
      static uint64_t store[TECORE_KERNEL_MAX_PARAMS * 8192 / 8];
      void *args[TECORE_KERNEL_MAX_PARAMS];
      size_t off = 0;
      for (unsigned k = 0; k < def->nparams && k < TECORE_KERNEL_MAX_PARAMS; k++) {
        args[k] = (char *)store + off;
        off += ((size_t)def->param_size[k] + 7) / 8 * 8;
      }
      if (C(tecore_graph_kernel_node_args(F.g[ix(a[0], NG)], nd[i].node, args)) != TECORE_SUCCESS)
        continue;
      unsigned k = (unsigned)ix(a[2], def->nparams ? def->nparams : 1);
      if (def->nparams && def->param_is_ptr[k]) {
        int64_t pa[3] = {a[3], a[4], a[5]};
        tecore_devptr_t p = raw_ptr(pa, 0);
        memcpy(args[k], &p, 8);
      }
      /* any live exec: a node of another graph than the exec's is refused */
      if (F.x_live[ix(a[6], NX)])
        after(C(tecore_graph_exec_kernel_node_set(F.x[ix(a[6], NX)], nd[i].node, NULL, args)));
    }
  }
}

/* -- tensors and kernels -- */

static const size_t dims_small[] = {1, 2, 3, 7, 8, 16, 31, 32, 33, 64, 100, 128, 129, 256};

/* tensor t dtype scaling rows cols mode buf */
static void op_tensor(const int64_t *a) {
  size_t ti = ix(a[0], NT);
  struct tecore_tensor *t = &F.t[ti];
  memset(t, 0, sizeof *t);
  t->dtype = (tecore_dtype_t)ix(a[1], TECORE_DTYPE_COUNT_ + 2);
  t->scaling = (tecore_scaling_mode_t)ix(a[2], TECORE_SCALING_COUNT_ + 1);
  size_t rows = (size_t)a[3], cols = (size_t)a[4];
  uint64_t mode = (uint64_t)a[5];
  switch (mode & 3) {
    case 0: t->ndim = 2, t->shape[0] = rows, t->shape[1] = cols; break;
    case 1: t->ndim = 1, t->shape[0] = cols; break;
    case 2: t->ndim = 3, t->shape[0] = 2, t->shape[1] = rows, t->shape[2] = cols; break;
    default: t->ndim = 0; break;
  }
  struct buf *b = &F.b[ix(a[6], NB)], *b2 = &F.b[ix(a[6] + 1, NB)];
  if (!(mode & 4)) t->data = b->p + ((mode & 64) ? 1 : 0);
  if (mode & 8) t->columnwise_data = b2->p;
  if (mode & 256) {
    struct hbuf *h = &F.h[ix(a[6], NH)];
    t->data = (tecore_devptr_t)(uintptr_t)h->p;
  }
  if (!(mode & 16)) {
    tecore_devptr_t base = F.scales + ti * SCALE_STRIDE + ((mode & 32) ? 2 : 0);
    t->scale = base;
    t->amax = base + 4;
    t->scale_inv = base + 64;
    if (mode & 8) t->columnwise_scale_inv = base + SCALE_STRIDE / 2;
  }
  if (mode & 128) t->flags = TECORE_TENSOR_POW2_SCALES;
  if (mode & 512) t->amax_epsilon = (mode & 1024) ? -1.0f : __builtin_nanf("");
  if (mode & 2048) t->device = 1;
  C(tecore_tensor_validate(t, (unsigned)(mode >> 12) & 0x1f));
}

/* a plain tensor of n F32 elements over buffer slot bi */
static void op_tensor_fit(const int64_t *a) {
  size_t ti = ix(a[0], NT);
  struct buf *b = &F.b[ix(a[1], NB)];
  tecore_dtype_t dt = (tecore_dtype_t)ix(a[2], 5); /* F32 F16 BF16 E4M3 E5M2 */
  size_t es = tecore_dtype_size(dt);
  size_t cols = dims_small[ix(a[3], sizeof dims_small / sizeof dims_small[0])];
  size_t rows = b->bytes / es / cols;
  if (rows > 256) rows = 256;
  if (rows == 0) rows = 1;
  size_t shape[2] = {rows, cols};
  struct tecore_tensor *t = &F.t[ti];
  if (C(tecore_tensor_init(t, dt, 2, shape, b->p)) != TECORE_SUCCESS) return;
  if (dt == TECORE_DTYPE_E4M3 || dt == TECORE_DTYPE_E5M2) {
    t->scaling = (tecore_scaling_mode_t)(1 + ix(a[4], 5));
    tecore_devptr_t base = F.scales + ti * SCALE_STRIDE;
    t->scale = base;
    t->amax = base + 4;
    t->scale_inv = base + 64;
    if (t->scaling == TECORE_SCALING_MXFP8 && ix(a[4], 7) == 0) {
      t->columnwise_data = t->data;
      t->data = 0;
      t->columnwise_scale_inv = base + SCALE_STRIDE / 2;
    }
  }
}

static void op_quantize(const int64_t *a) {
  int64_t pa[3] = {a[2], a[3], a[4]};
  tecore_devptr_t noop = ix(a[5], 3) ? 0 : ptr_of(pa, NULL);
  after(C(tecore_quantize(&F.t[ix(a[0], NT)], &F.t[ix(a[1], NT)], noop, stream_of(a[6]))));
}

static void op_quantize_multi(const int64_t *a) {
  size_t count = (size_t)ix(a[2], 4);
  struct tecore_tensor in[3], out[3];
  for (size_t i = 0; i < 3; i++) {
    in[i] = F.t[ix(a[0] + (int64_t)i, NT)];
    out[i] = F.t[ix(a[1] + (int64_t)i, NT)];
  }
  after(C(tecore_quantize_multi(in, out, count, 0, stream_of(a[3]))));
}

static void op_dequantize(const int64_t *a) {
  after(C(tecore_dequantize(&F.t[ix(a[0], NT)], &F.t[ix(a[1], NT)], stream_of(a[2]))));
}

static void op_amax(const int64_t *a) {
  tecore_devptr_t p = ptr_of(a + 1, NULL);
  after(C(tecore_amax(&F.t[ix(a[0], NT)], p, (unsigned)a[4] & 3, 0, stream_of(a[5]))));
}

static void op_compute_scale(const int64_t *a) {
  after(C(tecore_compute_scale(&F.t[ix(a[0], NT)], 0, stream_of(a[1]))));
}

static void op_cast_transpose(const int64_t *a) {
  after(C(tecore_cast_transpose(&F.t[ix(a[0], NT)], &F.t[ix(a[1], NT)], stream_of(a[2]))));
}

static void op_ct_dbias(const int64_t *a) {
  size_t ws = 0;
  struct tecore_tensor *in = &F.t[ix(a[0], NT)];
  C(tecore_cast_transpose_dbias_workspace_size(in, &ws));
  tecore_devptr_t w = ptr_of(a + 3, NULL);
  if (ix(a[6], 3) == 0) ws = (size_t)a[7];
  if (ix(a[6], 5) == 1)
    after(C(tecore_dact_dbias_cast_transpose((tecore_activation_t)ix(a[7], 8), in,
                                             &F.t[ix(a[0] + 1, NT)], &F.t[ix(a[1], NT)],
                                             &F.t[ix(a[2], NT)], w, ws, stream_of(a[8]))));
  else
    after(C(tecore_cast_transpose_dbias(in, &F.t[ix(a[1], NT)], &F.t[ix(a[2], NT)], w, ws,
                                        stream_of(a[8]))));
}

static void op_act_fwd(const int64_t *a) {
  tecore_activation_t act = (tecore_activation_t)ix(a[0], TECORE_ACT_COUNT_ + 1);
  after(C(tecore_act_fwd(act, &F.t[ix(a[1], NT)], &F.t[ix(a[2], NT)], 0, stream_of(a[3]))));
}

static void op_act_bwd(const int64_t *a) {
  tecore_activation_t act = (tecore_activation_t)ix(a[0], TECORE_ACT_COUNT_ + 1);
  after(C(tecore_act_bwd(act, &F.t[ix(a[1], NT)], &F.t[ix(a[2], NT)], &F.t[ix(a[3], NT)],
                         stream_of(a[4]))));
}

static const float eps_tab[] = {1e-5f, 1e-6f, 0.0f, -1.0f, 1e30f};

static void op_rmsnorm_fwd(const int64_t *a) {
  tecore_devptr_t rs = ptr_of(a + 4, NULL);
  after(C(tecore_rmsnorm_fwd(&F.t[ix(a[0], NT)], &F.t[ix(a[1], NT)], eps_tab[ix(a[3], 5)],
                             (unsigned)a[7] & 3, &F.t[ix(a[2], NT)], rs, stream_of(a[8]))));
}

static void op_layernorm_fwd(const int64_t *a) {
  tecore_devptr_t mu = ptr_of(a + 4, NULL);
  tecore_devptr_t rs = ix(a[7], 2) ? mu + 4096 : 0;
  after(C(tecore_layernorm_fwd(&F.t[ix(a[0], NT)], &F.t[ix(a[1], NT)], &F.t[ix(a[1] + 1, NT)],
                               eps_tab[ix(a[3], 5)], (unsigned)a[7] & 1, &F.t[ix(a[2], NT)], mu, rs,
                               stream_of(a[8]))));
}

static void op_rmsnorm_bwd(const int64_t *a) {
  struct tecore_tensor *dy = &F.t[ix(a[0], NT)], *x = &F.t[ix(a[1], NT)];
  size_t rows = 0, cols = 0, ws = 0;
  if (tecore_tensor_2d(x, &rows, &cols) == TECORE_SUCCESS)
    C(tecore_norm_bwd_workspace_size(TECORE_NORM_RMSNORM, rows, cols, &ws));
  tecore_devptr_t rs = ptr_of(a + 3, NULL);
  tecore_devptr_t w = F.b[ix(a[6], NB)].p;
  if (ix(a[7], 4) == 0) ws = (size_t)a[7];
  after(C(tecore_rmsnorm_bwd(dy, x, rs, &F.t[ix(a[2], NT)], 0, &F.t[ix(a[0] + 3, NT)],
                             &F.t[ix(a[2] + 3, NT)], w, ws, stream_of(a[8]))));
}

static void op_gemm(const int64_t *a) {
  struct tecore_gemm_opts o;
  memset(&o, 0, sizeof o);
  uint64_t m = (uint64_t)a[7];
  o.epilogue = (tecore_gemm_epilogue_t)ix((int64_t)(m >> 2), TECORE_GEMM_EPI_COUNT_ + 1);
  if (m & 0x40) o.bias = &F.t[ix(a[0] + 3, NT)];
  if (m & 0x80) o.aux = &F.t[ix(a[0] + 4, NT)];
  if (m & 0x100) o.C = &F.t[ix(a[0] + 5, NT)];
  static const float coef[] = {1.0f, 0.0f, -0.5f, 2.0f};
  after(C(tecore_gemm(&F.t[ix(a[0], NT)], (tecore_gemm_op_t)ix(a[1], 3), &F.t[ix(a[2], NT)],
                      (tecore_gemm_op_t)ix(a[3], 3), &F.t[ix(a[4], NT)], coef[ix(a[5], 4)],
                      coef[ix(a[6], 4)], (m & 3) ? &o : NULL, stream_of(a[8]))));
}

static void op_fill(const int64_t *a) {
  size_t vb = 0;
  tecore_devptr_t p = ptr_of(a, &vb);
  tecore_dtype_t dt = (tecore_dtype_t)ix(a[3], 4);
  size_t count = (size_t)a[4];
  tecore_result_t r = C(tecore_fill(p, dt, count, (double)(int32_t)a[5] / 7.0, stream_of(a[6])));
  after(r);
}

static void op_scale_add(const int64_t *a) {
  tecore_devptr_t d = ptr_of(a, NULL), x = ptr_of(a + 3, NULL);
  tecore_dtype_t dt = (tecore_dtype_t)ix(a[6], 4);
  after(C(tecore_scale_add(d, x, 0.5f, d, 2.0f, dt, (size_t)a[7], stream_of(a[8]))));
}

/* A raw launch of libtecore's te_fill: pointer parameters are checked at
 * launch, their alignment too (the element size of the dtype argument,
 * which is drawn: f32, f16, bf16 or a code no dtype has); the count is
 * kept inside the buffer (what a kernel touches past its pointer's start
 * is the kernel's business, as on a GPU). */
static void op_launch_fill(const int64_t *a) {
  int id = -1;
  if (C(tecore_kernel_find("te_fill", &id)) != TECORE_SUCCESS) return;
  size_t vb = 0;
  tecore_devptr_t p = ptr_of(a, &vb);
  void *dst = (void *)(uintptr_t)p;
  static const int dts[] = {TECORE_DTYPE_F32, TECORE_DTYPE_F16, TECORE_DTYPE_BF16, 13};
  int dt = dts[ix(a[6], 4)];
  unsigned long long n = vb / 4;
  if (n > 4096) n = 4096;
  float v = 1.5f;
  void *args[] = {&dst, &dt, &n, &v};
  struct tecore_launch_cfg cfg = {.grid = {(unsigned)ix(a[3], 8) + 1, 1, 1}, .block = {256, 1, 1}};
  if (ix(a[4], 8) == 0) cfg.grid[0] = 0xffffffffu;
  if (ix(a[4], 8) == 1) cfg.shared_bytes = 1u << 30;
  after(C(tecore_kernel_launch(id, &cfg, args, stream_of(a[5]))));
}

/* -- kernels on tensors that fit ------------------------------------------------ *
 * Random tensors rarely make a valid call; these operations build tensors
 * whose shapes, dtypes and buffers agree (each in a buffer of its own that
 * is large enough), so the kernels really run, and then, one time in
 * four, break one thing about one of them (the argument `mut`). */

static unsigned fit_used; /* buffers taken by the call being built */

/* A live buffer of at least bytes not yet taken, searched from slot hint;
 * the hint's own buffer (too small, or freed) when there is none. */
static tecore_devptr_t pick_buf(size_t bytes, int64_t hint) {
  for (size_t k = 0; k < NB; k++) {
    size_t i = (ix(hint, NB) + k) % NB;
    if (F.b[i].live && F.b[i].bytes >= bytes && !(fit_used & (1u << i))) {
      fit_used |= 1u << i;
      return F.b[i].p;
    }
  }
  return F.b[ix(hint, NB)].p;
}

/* Tensor slot ti as a [rows][cols] tensor of dt and scaling sc; which: 1
 * rowwise, 2 columnwise, 3 both.  Per-tensor columnwise data is the
 * transpose (same bytes). */
static struct tecore_tensor *fit(size_t ti, tecore_dtype_t dt, tecore_scaling_mode_t sc,
                                 size_t rows, size_t cols, int which, int64_t hint) {
  struct tecore_tensor *t = &F.t[ti % NT];
  size_t shape[2] = {rows, cols};
  tecore_tensor_init(t, dt, 2, shape, 0);
  size_t es = tecore_dtype_size(dt), bytes = rows * cols * (es ? es : 1);
  t->scaling = sc;
  if (which & 1) t->data = pick_buf(bytes, hint);
  if (which & 2) t->columnwise_data = pick_buf(bytes, hint + 3);
  if (sc != TECORE_SCALING_NONE) {
    tecore_devptr_t base = F.scales + (ti % NT) * SCALE_STRIDE;
    t->scale = base;
    t->amax = base + 4;
    t->scale_inv = base + 64;
    if (which & 2) t->columnwise_scale_inv = base + SCALE_STRIDE / 2;
  }
  return t;
}

/* Breaks one thing about t when mut says so (mut % 4 == 0). */
static void mutate(struct tecore_tensor *t, int64_t mut) {
  if (ix(mut, 4) != 0) return;
  switch (ix(mut / 4, 10)) {
  case 0: t->data += 1; break;
  case 1: t->shape[0] = t->shape[0] * 4096 + 1; break;
  case 2: t->dtype = (tecore_dtype_t)ix(t->dtype + 1, TECORE_DTYPE_COUNT_); break;
  case 3: t->scale_inv = 0; break;
  case 4: t->data = 0; break;
  case 5: t->columnwise_data = t->data; break;
  case 6: { /* a freed buffer's address */
    for (size_t i = 0; i < NB; i++)
      if (!F.b[i].live && F.b[i].p) t->data = F.b[i].p;
    break;
  }
  case 7: t->scale = t->scale_inv; break;
  case 8: t->ndim = 3, t->shape[2] = 2; break;
  default: t->amax = t->data; break;
  }
}

/* A dimension of real work: small (the kernels run on the CPU under the
 * sanitizers), the odd huge one kept. */
static size_t fit_dim(int64_t a) {
  uint64_t v = (uint64_t)a;
  if (v >= ((uint64_t)1 << 40)) return (size_t)v;
  return v > 256 ? 256 : (size_t)v;
}

static const tecore_dtype_t hp[] = {TECORE_DTYPE_F32, TECORE_DTYPE_BF16, TECORE_DTYPE_F16};

/* k_quantize rows cols in_dt scaling which mut stream: quantize, then
 * dequantize the result back */
static void op_k_quantize(const int64_t *a) {
  size_t rows = fit_dim(a[0]), cols = fit_dim(a[1]);
  fit_used = 0;
  struct tecore_tensor *in = fit(0, hp[ix(a[2], 3)], TECORE_SCALING_NONE, rows, cols, 1, a[5]);
  tecore_scaling_mode_t sc = (tecore_scaling_mode_t)(1 + ix(a[3], 5));
  tecore_dtype_t q = ix(a[3], 10) < 5 ? TECORE_DTYPE_E4M3 : TECORE_DTYPE_E5M2;
  struct tecore_tensor *out = fit(1, q, sc, rows, cols, 1 + (int)ix(a[4], 3), a[5] + 1);
  mutate(ix(a[5] / 40, 2) ? out : in, a[5]);
  tecore_result_t r = C(tecore_quantize(in, out, 0, stream_of(a[6])));
  after(r);
  if (r != TECORE_SUCCESS) return;
  struct tecore_tensor *back = fit(2, hp[ix(a[2] + 1, 3)], TECORE_SCALING_NONE, rows, cols, 1, a[5] + 2);
  after(C(tecore_dequantize(out, back, stream_of(a[6]))));
}

/* k_act act rows cols in_dt out_kind mut stream: forward and backward */
static void op_k_act(const int64_t *a) {
  tecore_activation_t act = (tecore_activation_t)ix(a[0], TECORE_ACT_COUNT_);
  size_t rows = fit_dim(a[1]), cols = fit_dim(a[2]);
  size_t icols = tecore_activation_is_gated(act) ? 2 * cols : cols;
  fit_used = 0;
  tecore_dtype_t dt = hp[ix(a[3], 3)];
  struct tecore_tensor *in = fit(0, dt, TECORE_SCALING_NONE, rows, icols, 1, a[5]);
  uint64_t ok = ix(a[4], 4);
  struct tecore_tensor *out =
      ok < 2 ? fit(1, hp[ok], TECORE_SCALING_NONE, rows, cols, 1, a[5] + 1)
             : fit(1, TECORE_DTYPE_E4M3, ok == 2 ? TECORE_SCALING_DELAYED : TECORE_SCALING_CURRENT,
                   rows, cols, 1, a[5] + 1);
  mutate(ix(a[5] / 40, 2) ? out : in, a[5]);
  after(C(tecore_act_fwd(act, in, out, 0, stream_of(a[6]))));
  struct tecore_tensor *dy = fit(2, dt, TECORE_SCALING_NONE, rows, cols, 1, a[5] + 2);
  struct tecore_tensor *dx = fit(3, dt, TECORE_SCALING_NONE, rows, icols, 1, a[5] + 3);
  after(C(tecore_act_bwd(act, dy, in, dx, stream_of(a[6]))));
}

/* k_norm kind rows hidden dt out_kind mut stream: forward and backward (plain or
 * with the residual's gradient added) */
static void op_k_norm(const int64_t *a) {
  int ln = (int)ix(a[0], 2);
  size_t rows = fit_dim(a[1]), hidden = fit_dim(a[2]);
  fit_used = 0;
  tecore_dtype_t dt = hp[ix(a[3], 3)];
  struct tecore_tensor *x = fit(0, dt, TECORE_SCALING_NONE, rows, hidden, 1, a[5]);
  struct tecore_tensor *g = fit(1, hp[ix(a[3] + 1, 3)], TECORE_SCALING_NONE, 1, hidden, 1, a[5] + 1);
  struct tecore_tensor *b = fit(4, g->dtype, TECORE_SCALING_NONE, 1, hidden, 1, a[5] + 4);
  struct tecore_tensor *y =
      ix(a[4], 3) ? fit(2, dt, TECORE_SCALING_NONE, rows, hidden, 1, a[5] + 2)
                  : fit(2, TECORE_DTYPE_E4M3, TECORE_SCALING_DELAYED, rows, hidden, 1, a[5] + 2);
  tecore_devptr_t stats = pick_buf(rows * 8, a[5] + 5), mu = stats, rs = stats + rows * 4;
  mutate(ix(a[5] / 40, 2) ? y : x, a[5]);
  unsigned flags = (unsigned)ix(a[4] / 3, 2);
  tecore_result_t r =
      ln ? C(tecore_layernorm_fwd(x, g, b, 1e-5f, flags, y, mu, rs, stream_of(a[6])))
         : C(tecore_rmsnorm_fwd(x, g, 1e-5f, flags, y, rs, stream_of(a[6])));
  after(r);
  if (r != TECORE_SUCCESS) return;
  size_t ws = 0;
  C(tecore_norm_bwd_workspace_size(ln ? TECORE_NORM_LAYERNORM : TECORE_NORM_RMSNORM, rows, hidden,
                                   &ws));
  tecore_devptr_t w = pick_buf(ws, a[5] + 6);
  struct tecore_tensor *dy = fit(3, dt, TECORE_SCALING_NONE, rows, hidden, 1, a[5] + 3);
  struct tecore_tensor *dx = fit(5, dt, TECORE_SCALING_NONE, rows, hidden, 1, a[5] + 7);
  struct tecore_tensor dg = *g, db = *b;
  size_t one[1] = {hidden};
  tecore_tensor_init(&dg, TECORE_DTYPE_F32, 1, one, pick_buf(hidden * 4, a[5] + 8));
  tecore_tensor_init(&db, TECORE_DTYPE_F32, 1, one, pick_buf(hidden * 4, a[5] + 9));
  /* the residual's gradient added (the _bwd_add calls): none, dx itself
   * (in place), the forward's y (FP8 half the time: refused) or x */
  unsigned add = (unsigned)ix(a[4] / 6, 4);
  const struct tecore_tensor *extra = add == 1 ? dx : add == 2 ? y : x;
  if (ln && add)
    after(C(tecore_layernorm_bwd_add(dy, x, mu, rs, g, extra, flags, dx, &dg, &db, w, ws,
                                     stream_of(a[6]))));
  else if (add)
    after(C(tecore_rmsnorm_bwd_add(dy, x, rs, g, extra, flags, dx, &dg, w, ws, stream_of(a[6]))));
  else if (ln)
    after(C(tecore_layernorm_bwd(dy, x, mu, rs, g, flags, dx, &dg, &db, w, ws, stream_of(a[6]))));
  else
    after(C(tecore_rmsnorm_bwd(dy, x, rs, g, flags, dx, &dg, w, ws, stream_of(a[6]))));
}

/* k_ct rows cols in_dt mode mut stream: cast-transpose, with dbias */
static void op_k_ct(const int64_t *a) {
  size_t rows = fit_dim(a[0]), cols = fit_dim(a[1]);
  fit_used = 0;
  tecore_dtype_t dt = hp[ix(a[2], 3)];
  struct tecore_tensor *in = fit(0, dt, TECORE_SCALING_NONE, rows, cols, 1, a[4]);
  static const tecore_scaling_mode_t modes[] = {TECORE_SCALING_DELAYED, TECORE_SCALING_CURRENT,
                                                TECORE_SCALING_MXFP8, TECORE_SCALING_BLOCK_1X128};
  struct tecore_tensor *out =
      fit(1, TECORE_DTYPE_E4M3, modes[ix(a[3], 4)], rows, cols, 1 + (int)ix(a[3] / 4, 3), a[4] + 1);
  mutate(ix(a[4] / 40, 2) ? out : in, a[4]);
  if (ix(a[3] / 12, 2) == 0) {
    after(C(tecore_cast_transpose(in, out, stream_of(a[5]))));
    return;
  }
  size_t ws = 0, one[1] = {cols};
  C(tecore_cast_transpose_dbias_workspace_size(in, &ws));
  struct tecore_tensor *db = &F.t[2];
  tecore_tensor_init(db, dt, 1, one, pick_buf(cols * 4, a[4] + 2));
  after(C(tecore_cast_transpose_dbias(in, out, db, pick_buf(ws, a[4] + 3), ws, stream_of(a[5]))));
}

/* k_gemm m n k type transa transb epi+mut stream */
static void op_k_gemm(const int64_t *a) {
  size_t m = fit_dim(a[0]) % 129, n = fit_dim(a[1]) % 129, k = fit_dim(a[2]) % 129;
  uint64_t type = ix(a[3], 6);   /* bf16, f16, delayed, mxfp8, 1x128 x 1x128, 1x128 x 128x128 */
  int ta = (int)ix(a[4], 2), tb = (int)ix(a[5], 2);
  fit_used = 0;
  struct tecore_tensor *A, *B, *D;
  tecore_dtype_t ddt;
  if (type < 2) { /* BF16 or F16, any layout */
    tecore_dtype_t dt = type ? TECORE_DTYPE_F16 : TECORE_DTYPE_BF16;
    A = ta ? fit(0, dt, TECORE_SCALING_NONE, k, m, 1, a[6]) : fit(0, dt, TECORE_SCALING_NONE, m, k, 1, a[6]);
    B = tb ? fit(1, dt, TECORE_SCALING_NONE, n, k, 1, a[6] + 1)
           : fit(1, dt, TECORE_SCALING_NONE, k, n, 1, a[6] + 1);
    ddt = ix(a[6] / 4, 2) ? TECORE_DTYPE_F32 : dt;
  } else { /* FP8, TN, k a multiple of 16 and n of 16 */
    tecore_scaling_mode_t sc = type == 2 ? TECORE_SCALING_DELAYED
                               : type == 3 ? TECORE_SCALING_MXFP8 : TECORE_SCALING_BLOCK_1X128;
    tecore_scaling_mode_t sb = type == 5 ? TECORE_SCALING_BLOCK_128X128 : sc;
    k = (k + 31) / 32 * 32;
    n = (n + 15) / 16 * 16;
    A = fit(0, TECORE_DTYPE_E4M3, sc, m, k, 1, a[6]);
    B = fit(1, TECORE_DTYPE_E4M3, sb, n, k, 1, a[6] + 1);
    ta = 0;
    tb = 1;
    ddt = TECORE_DTYPE_BF16;
  }
  D = fit(2, ddt, TECORE_SCALING_NONE, m, n, 1, a[6] + 2);
  mutate(ix(a[6] / 40, 3) == 0 ? A : ix(a[6] / 40, 3) == 1 ? B : D, a[6]);
  struct tecore_gemm_opts o;
  memset(&o, 0, sizeof o);
  o.epilogue = (tecore_gemm_epilogue_t)ix(a[6] / 8, 4); /* none, bias, gelu_aux, bias_gelu_aux */
  size_t one[1] = {n};
  struct tecore_tensor bias, aux;
  tecore_dtype_t comp = ddt == TECORE_DTYPE_F32 ? TECORE_DTYPE_BF16 : ddt;
  tecore_tensor_init(&bias, comp, 1, one, pick_buf(n * 4, a[6] + 3));
  size_t mn[2] = {m, n};
  tecore_tensor_init(&aux, comp, 2, mn, pick_buf(m * n * 4, a[6] + 4));
  if (o.epilogue == TECORE_GEMM_EPI_BIAS || o.epilogue == TECORE_GEMM_EPI_BIAS_GELU_AUX) o.bias = &bias;
  if (o.epilogue >= TECORE_GEMM_EPI_GELU_AUX) o.aux = &aux;
  after(C(tecore_gemm(A, (tecore_gemm_op_t)ta, B, (tecore_gemm_op_t)tb, D, 1.0f, 0.0f,
                      o.epilogue ? &o : NULL, stream_of(a[7]))));
}

/* capture_full stream mode graph exec: a capture of real work (a fill and
 * a copy between live buffers), instantiated and launched */
static void op_capture_full(const int64_t *a) {
  size_t si = ix(a[0], NS) ? ix(a[0], NS) : 1;
  struct strm *st = &F.s[si];
  if (!st->live || st->capture) return;
  fit_used = 0;
  tecore_devptr_t x = pick_buf(4096, a[2]), y = pick_buf(4096, a[2] + 1);
  tecore_capture_mode_t mode = ix(a[1], 3) ? TECORE_CAPTURE_THREAD_LOCAL : TECORE_CAPTURE_RELAXED;
  if (C(tecore_stream_begin_capture(st->s, mode)) != TECORE_SUCCESS) return;
  st->capture = 1;
  C(tecore_fill(x, TECORE_DTYPE_F32, 1024, 0.25 * (double)ix(a[1], 8), st->s));
  C(tecore_memcpy_async(y, x, 4096, st->s));
  C(tecore_memset_d32_async(x, (uint32_t)a[1], 16, st->s));
  tecore_graph_t g = NULL;
  tecore_result_t r = C(tecore_stream_end_capture(st->s, &g));
  st->capture = 0;
  if (r != TECORE_SUCCESS || !g) return;
  put_graph(ix(a[2], NG), g);
  size_t xi = ix(a[3], NX);
  tecore_graph_exec_t ex = NULL;
  if (F.x_live[xi] && ix(a[1], 2)) { /* update the exec there, else replace it */
    tecore_graph_update_result_t why;
    if (C(tecore_graph_exec_update(F.x[xi], g, &why)) == TECORE_SUCCESS) {
      exec_from(xi, ix(a[2], NG));
      after(C(tecore_graph_launch(F.x[xi], st->s)));
      return;
    }
  }
  if (C(tecore_graph_instantiate(&ex, g)) != TECORE_SUCCESS) return;
  if (F.x_live[xi]) C(tecore_graph_exec_destroy(F.x[xi]));
  F.x[xi] = ex;
  F.x_live[xi] = F.x_ever[xi] = 1;
  exec_from(xi, ix(a[2], NG));
  after(C(tecore_graph_launch(ex, st->s)));
}

/* -- delayed scaling state -- */

static void op_dstate_create(const int64_t *a) {
  size_t di = ix(a[0], ND);
  if (F.d_live[di]) {
    if (C(tecore_delayed_state_free(&F.d[di])) != TECORE_SUCCESS) return;
    F.d_live[di] = 0;
  }
  struct tecore_recipe r;
  C(tecore_recipe_init(&r, (tecore_recipe_kind_t)ix(a[2], 5)));
  if (ix(a[3], 4) == 0) r.history_len = (int)a[3];
  struct tecore_delayed_state st;
  size_t count = (uint64_t)a[1] > ((uint64_t)1 << 32) ? (size_t)a[1] : (size_t)a[1] % 2049;
  tecore_result_t res = C(
      tecore_delayed_state_create(&r, (tecore_fp8_role_t)ix(a[4], 4), count, stream_of(a[5]), &st));
  if (res == TECORE_SUCCESS) {
    F.d[di] = st;
    F.d_live[di] = 1;
  }
  after(res);
}

static void op_dstate_update(const int64_t *a) {
  size_t di = ix(a[0], ND);
  struct tecore_recipe r;
  C(tecore_recipe_init(&r, TECORE_RECIPE_DELAYED));
  r.amax_algo = (tecore_amax_algo_t)ix(a[1], 2);
  struct tecore_delayed_state st = F.d[di];
  switch (ix(a[2], 6)) {
    case 1: st.amax += 1; break;
    case 2: st.scale += (tecore_devptr_t)a[3]; break;
    case 3: st.count = (size_t)a[3]; break;
    case 4: st.history_len = (int)a[3]; break;
    default: break;
  }
  after(C(tecore_delayed_update(&r, &st, stream_of(a[4]))));
}

static void op_dstate_tensor(const int64_t *a) {
  size_t di = ix(a[0], ND);
  C(tecore_delayed_state_tensor(&F.d[di], (size_t)a[1], &F.t[ix(a[2], NT)]));
}

static void op_dstate_free(const int64_t *a) {
  size_t di = ix(a[0], ND);
  struct tecore_delayed_state st = F.d[di];
  tecore_result_t r = C(tecore_delayed_state_free(&st));
  if (r == TECORE_SUCCESS) {
    if (!F.d_live[di] && F.d[di].base)
      fz_fail("tecore_delayed_state_free of a freed state succeeded");
    F.d_live[di] = 0;
    memset(&F.d[di], 0, sizeof F.d[di]);
  }
}

/* -- VMM -- */

static void op_vmm_reserve(const int64_t *a) {
  struct vmm *v = &F.v[ix(a[0], NV)];
  if (v->reserved) return;
  size_t bytes = ix(a[1], 6) == 0 ? (size_t)a[1] : F.gran * (1 + ix(a[1], 4));
  tecore_devptr_t va = 0;
  if (C(tecore_vmm_reserve(bytes, ix(a[2], 3) ? 0 : (size_t)a[2], &va)) == TECORE_SUCCESS) {
    v->va = va;
    v->bytes = bytes;
    v->reserved = 1;
  }
}

static void op_vmm_create(const int64_t *a) {
  struct vmm *v = &F.v[ix(a[0], NV)];
  if (v->handle) return;
  size_t bytes = ix(a[1], 6) == 0 ? (size_t)a[1] : F.gran * (1 + ix(a[1], 4));
  tecore_vmm_handle_t h = 0;
  if (C(tecore_vmm_create(bytes, 0, &h)) == TECORE_SUCCESS) {
    v->h = h;
    v->hbytes = bytes;
    v->handle = 1;
  }
}

static void op_vmm_map(const int64_t *a) {
  struct vmm *v = &F.v[ix(a[0], NV)], *w = &F.v[ix(a[1], NV)];
  size_t bytes = ix(a[2], 3) == 0 ? (size_t)a[2] : v->bytes;
  tecore_result_t r = C(tecore_vmm_map(v->va, bytes, w->h, (size_t)a[3] % (2 * F.gran + 1)));
  if (r == TECORE_SUCCESS) {
    if (bytes == v->bytes && !v->mapped) {
      if (C(tecore_vmm_set_access(v->va, v->bytes, 0)) == TECORE_SUCCESS)
        v->mapped = 1;
      else
        C(tecore_vmm_unmap(v->va, bytes));
    } else {
      C(tecore_vmm_unmap(v->va, bytes));
    }
  }
}

static void op_vmm_unmap(const int64_t *a) {
  struct vmm *v = &F.v[ix(a[0], NV)];
  size_t bytes = ix(a[1], 3) == 0 ? (size_t)a[1] : v->bytes;
  tecore_result_t r = C(tecore_vmm_unmap(v->va, bytes));
  if (r == TECORE_SUCCESS && bytes == v->bytes) v->mapped = 0;
}

static void op_vmm_release(const int64_t *a) {
  struct vmm *v = &F.v[ix(a[0], NV)];
  if (C(tecore_vmm_release(v->h)) == TECORE_SUCCESS) v->handle = 0;
}

static void op_vmm_free_va(const int64_t *a) {
  struct vmm *v = &F.v[ix(a[0], NV)];
  tecore_result_t r = C(tecore_vmm_free_va(v->va, v->bytes));
  if (r == TECORE_SUCCESS) {
    if (v->mapped) fz_fail("tecore_vmm_free_va of a mapped range succeeded");
    v->reserved = 0;
  }
}

/* -- the fuser -- */

static void seq_free_io(struct seq *q) {
  for (int i = 0; i < 4; i++)
    if (q->io[i]) {
      C(tecore_mem_free(q->io[i]));
      q->io[i] = 0;
    }
}

/* Dimensions of real work stay small (the GEMMs run on the CPU); the
 * overflowing ones stay as they are. */
static size_t clamp_dim(int64_t a) {
  uint64_t v = (uint64_t)a;
  return v > 256 && v < ((uint64_t)1 << 40) ? 256 : (size_t)v;
}

static void op_seq_create(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (q->live) return;
  struct tecore_seq_config cfg = {.rows = clamp_dim(a[1]),
                                  .features = clamp_dim(a[2]),
                                  .dtype = (tecore_dtype_t)ix(a[3], 4),
                                  .seed = (uint64_t)a[5],
                                  /* the first three flags, GRAD_FP8_GIVEN, BF16_WGRAD,
                                   * NO_GELU_EPILOGUE */
                                  .flags = (unsigned)a[4] & (7u | TECORE_SEQ_GRAD_FP8_GIVEN |
                                                              TECORE_SEQ_BF16_WGRAD |
                                                              TECORE_SEQ_NO_GELU_EPILOGUE)};
  tecore_seq_t *s = NULL;
  if (C(tecore_seq_create(&cfg, &s)) == TECORE_SUCCESS) {
    q->q = s;
    q->live = 1;
    q->built = q->nops = q->forwarded = 0;
    q->rows = cfg.rows;
    q->features = cfg.features;
    q->dtype = cfg.dtype;
  }
}

static const int op_kinds[] = {TECORE_OP_LINEAR,
                               TECORE_OP_LINEAR,
                               TECORE_OP_GELU,
                               TECORE_OP_RELU,
                               TECORE_OP_SILU,
                               TECORE_OP_SWIGLU,
                               TECORE_OP_RMSNORM,
                               TECORE_OP_LAYERNORM,
                               TECORE_OP_BIAS,
                               TECORE_OP_QUANTIZE,
                               TECORE_OP_CONSTANT_SCALE,
                               TECORE_OP_IDENTITY,
                               TECORE_OP_RESHAPE,
                               TECORE_OP_MAKE_EXTRA_OUTPUT,
                               TECORE_OP_ADD_EXTRA_INPUT,
                               TECORE_OP_ALLREDUCE,
                               99};

static void op_seq_add(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  struct tecore_op_desc d;
  memset(&d, 0, sizeof d);
  d.kind = op_kinds[ix(a[1], sizeof op_kinds / sizeof op_kinds[0])];
  switch (d.kind) {
    case TECORE_OP_LINEAR: d.features = clamp_dim(a[2]), d.bias = (int)ix(a[3], 2); break;
    case TECORE_OP_RESHAPE: d.features = clamp_dim(a[2]); break;
    case TECORE_OP_RMSNORM:
    case TECORE_OP_LAYERNORM:
      d.epsilon = eps_tab[ix(a[3], 5)], d.norm_flags = (unsigned)a[3] & 1;
      break;
    case TECORE_OP_CONSTANT_SCALE: d.scale = ix(a[3], 4) ? 0.5f : __builtin_inff(); break;
    case TECORE_OP_MAKE_EXTRA_OUTPUT:
    case TECORE_OP_ADD_EXTRA_INPUT: d.slot = (int)ix(a[3], 20) - 2; break;
    default: break;
  }
  /* a field the kind does not read (a Linear's or a reshape's own stays
   * clamped: an unclamped one is real work, gigabytes of weights to
   * initialize on the CPU, which the watchdog took for a hang) */
  if (ix(a[4], 8) == 0 && d.kind != TECORE_OP_LINEAR && d.kind != TECORE_OP_RESHAPE)
    d.features = (size_t)a[2];
  size_t index = 0;
  if (C(tecore_seq_add(q->q, &d, &index)) == TECORE_SUCCESS) q->nops++;
}

static void op_seq_recipe(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  struct tecore_recipe r;
  C(tecore_recipe_init(&r, (tecore_recipe_kind_t)ix(a[1], 4)));
  r.format = (tecore_fp8_format_t)ix(a[2], 4);
  after(C(tecore_seq_set_recipe(q->q, ix(a[1], 5) == 4 ? NULL : &r, stream_of(a[3]))));
}

static void op_seq_build(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  tecore_result_t r = C(tecore_seq_build(q->q, stream_of(a[1])));
  after(r);
  if (r != TECORE_SUCCESS || !q->live || q->built) return;
  q->built = 1;
  if (q->nops <= 0) return;
  struct tecore_op_info info;
  if (C(tecore_seq_op(q->q, (size_t)q->nops - 1, &info)) != TECORE_SUCCESS) return;
  size_t in = q->rows * q->features, out = info.out_rows * info.out_features;
  size_t bytes[4] = {in * 4, out * 4, out * 4, in * 4};
  for (int i = 0; i < 4; i++) {
    if (bytes[i] == 0 || bytes[i] > ((size_t)16 << 20)) continue;
    if (C(tecore_mem_alloc(bytes[i], &q->io[i])) == TECORE_SUCCESS) q->io_bytes[i] = bytes[i];
  }
}

/* Tensors that fit the sequence (mode 0) or the fuzzer's tensor slots. */
static void seq_io(struct seq *q, int64_t mode, int which, struct tecore_tensor *t) {
  if (ix(mode, 4) != 0) {
    *t = F.t[ix(mode, NT)];
    return;
  }
  size_t shape[2] = {q->rows, q->features};
  struct tecore_op_info info;
  if ((which == 1 || which == 2) && q->nops > 0 &&
      tecore_seq_op(q->q, (size_t)q->nops - 1, &info) == TECORE_SUCCESS) {
    shape[0] = info.out_rows;
    shape[1] = info.out_features;
  }
  tecore_tensor_init(t, q->dtype, 2, shape, q->io[which]);
}

static void op_seq_fwd(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  struct tecore_tensor in, out;
  seq_io(q, a[1], 0, &in);
  seq_io(q, a[1], 1, &out);
  tecore_result_t r = C(tecore_seq_forward(q->q, &in, &out, 0, stream_of(a[2])));
  after(r);
}

static void op_seq_bwd(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  struct tecore_tensor dy, dx;
  seq_io(q, a[1], 2, &dy);
  seq_io(q, a[1], 3, &dx);
  after(C(tecore_seq_backward(q->q, &dy, ix(a[3], 3) ? &dx : NULL, stream_of(a[2]))));
}

static void op_seq_misc(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  char buf[256];
  size_t need = 0, count = 0;
  struct tecore_seq_group groups[4];
  struct tecore_seq_param params[4];
  switch (ix(a[1], 6)) {
    case 0: after(C(tecore_seq_zero_grad(q->q, stream_of(a[2])))); break;
    case 1: after(C(tecore_seq_update_scales(q->q, stream_of(a[2])))); break;
    case 2:
      C(tecore_seq_describe(q->q, (tecore_seq_dir_t)ix(a[3], 3), ix(a[4], 2) ? buf : NULL,
                            ix(a[4], 2) ? (size_t)ix(a[5], sizeof buf + 1) : 0, &need));
      break;
    case 3:
      C(tecore_seq_groups(q->q, (tecore_seq_dir_t)ix(a[3], 3), groups, ix(a[4], 5), &count));
      break;
    case 4: C(tecore_seq_params(q->q, params, ix(a[4], 5), &count)); break;
    default: {
      struct tecore_tensor v, gr;
      C(tecore_seq_extra(q->q, (int)ix(a[3], 20) - 2, &v, &gr));
      break;
    }
  }
}

/* seq_fp8 seq what index stream: the FP8 hand-offs (tecore_seq_fp8_weight
 * of operation index, tecore_seq_grad_fp8) and a backward given the FP8
 * gradient, its columnwise scratch (and, TECORE_SEQ_GRAD_FP8_GIVEN, its
 * rowwise codes) one of the sequence's io buffers where the sequence has
 * none (too small or overlapping: refused) */
static void op_seq_fp8(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  struct tecore_tensor t, dx;
  switch (ix(a[1], 3)) {
    case 0: C(tecore_seq_fp8_weight(q->q, (size_t)ix(a[2], 8), &t)); break;
    case 1: C(tecore_seq_grad_fp8(q->q, &t)); break;
    default:
      if (C(tecore_seq_grad_fp8(q->q, &t)) != TECORE_SUCCESS) return;
      if (!t.columnwise_data) t.columnwise_data = q->io[ix(a[2], 4)];
      /* TECORE_SEQ_GRAD_FP8_GIVEN: the rowwise codes the caller's too */
      if (!t.data) t.data = q->io[ix(a[2] / 4, 4)];
      seq_io(q, 0, 3, &dx);
      after(C(tecore_seq_backward(q->q, &t, &dx, stream_of(a[3]))));
      break;
  }
}

static void op_seq_destroy(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (!q->q) return;
  tecore_result_t r = C(tecore_seq_destroy(q->q));
  if (r == TECORE_SUCCESS) {
    size_t self_ = (size_t)(q - F.q);
    if (!q->live && !REUSED(NQ, F.q[k_].live, F.q[k_].q == q->q, F.q[k_].live = F.q[k_].built = 0))
      fz_fail("tecore_seq_destroy of a destroyed sequence succeeded");
    q->live = 0;
    q->built = 0;
    seq_free_io(q);
  }
}

/* seq_full seq rows features recipe stream: a small valid sequence, built */
static void op_seq_full(const int64_t *a) {
  struct seq *q = &F.q[ix(a[0], NQ)];
  if (q->live) return;
  size_t rows = 1 + ix(a[1], 32), feat = 8 * (1 + ix(a[2], 8));
  int64_t c[6] = {a[0], (int64_t)rows, (int64_t)feat, 0, 0, (int64_t)a[3]};
  op_seq_create(c);
  if (!q->live) return;
  const int64_t plan[][5] = {{0, 6, 0, 0, 1},   /* rmsnorm */
                             {0, 0, (int64_t)(2 * feat), 1, 1}, /* linear 2f */
                             {0, 2 + ix(a[3], 3), 0, 0, 1},    /* gelu, relu or silu */
                             /* linear f, with a bias or (half the time: the
                              * last Linear tecore_seq_grad_fp8 takes) none */
                             {0, 0, (int64_t)feat, (int64_t)ix(a[3] / 6, 2), 1}};
  for (size_t i = 0; i < 4; i++) {
    int64_t d[5] = {a[0], plan[i][1], plan[i][2], plan[i][3], plan[i][4]};
    op_seq_add(d);
  }
  if (ix(a[3], 3) == 0) {
    int64_t r[4] = {a[0], (int64_t)ix(a[3] / 3, 2), 2, a[4]};
    op_seq_recipe(r);
  }
  int64_t b[2] = {a[0], a[4]};
  op_seq_build(b);
}

/* -- libtegraph: pools -- */

static void op_pool_create(const int64_t *a) {
  struct pool *p = &F.p[ix(a[0], NP)];
  if (p->live) return;
  size_t chunk = ix(a[1], 4) == 0 ? (size_t)a[1] : (size_t)1 << (16 + ix(a[1], 5));
  tegraph_mempool_t *mp = NULL;
  if (G(tegraph_mempool_create(chunk, &mp)) == TEGRAPH_SUCCESS) {
    p->p = mp;
    p->live = 1;
    memset(p->blk, 0, sizeof p->blk);
  }
}

static void op_pool_alloc(const int64_t *a) {
  struct pool *p = &F.p[ix(a[0], NP)];
  if (!p->p) return;
  tecore_devptr_t d = 0;
  if (G(tegraph_mempool_alloc(p->p, (size_t)a[2], &d)) == TEGRAPH_SUCCESS)
    p->blk[ix(a[1], NPB)] = d;
}

static void op_pool_free(const int64_t *a) {
  struct pool *p = &F.p[ix(a[0], NP)];
  if (!p->p) return;
  size_t k = ix(a[1], NPB);
  tecore_devptr_t d = p->blk[k] + (ix(a[2], 4) == 0 ? 8 : 0);
  if (G(tegraph_mempool_free(p->p, d)) == TEGRAPH_SUCCESS) p->blk[k] = 0;
}

static void op_pool_misc(const int64_t *a) {
  struct pool *p = &F.p[ix(a[0], NP)];
  if (!p->p) return;
  size_t used = 0, reserved = 0;
  int users = 0;
  if (ix(a[1], 2))
    G(tegraph_mempool_reserve(p->p, (size_t)a[2]));
  else
    G(tegraph_mempool_usage(p->p, &used, &reserved, &users));
}

static void op_pool_destroy(const int64_t *a) {
  struct pool *p = &F.p[ix(a[0], NP)];
  if (!p->p) return;
  tegraph_result_t r = G(tegraph_mempool_destroy(p->p));
  if (r == TEGRAPH_SUCCESS) {
    size_t self_ = (size_t)(p - F.p);
    if (!p->live && !REUSED(NP, F.p[k_].live, F.p[k_].p == p->p, F.p[k_].live = 0))
      fz_fail("tegraph_mempool_destroy of a destroyed pool succeeded");
    p->live = 0;
  }
}

/* -- libtegraph: graphs -- */

static void op_tg_create(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  if (F.tg_live[i]) return;
  tegraph_graph_t *g = NULL;
  if (G(tegraph_graph_create((unsigned)a[1] & 0xb, &g)) == TEGRAPH_SUCCESS) {
    F.tg[i] = g;
    F.tg_live[i] = 1;
    F.tg_capture[i] = 0;
  }
}

static void op_tg_capture(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  if (!F.tg[i]) return;
  tegraph_result_t r = G(tegraph_graph_begin_capture(
      F.tg[i], stream_of(a[1]), (tecore_capture_mode_t)ix(a[2], 4), (unsigned)a[3] & 3));
  if (r == TEGRAPH_SUCCESS) {
    F.tg_capture[i] = 1;
    F.s[ix(a[1], NS)].capture = 2; /* ended through tegraph */
  }
}

static void op_tg_end(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  if (!F.tg[i]) return;
  struct tegraph_update_info info;
  tegraph_result_t r = G(tegraph_graph_end_capture(F.tg[i], ix(a[1], 2) ? &info : NULL));
  if (F.tg_capture[i] && r != TEGRAPH_ERR_STATE && r != TEGRAPH_ERR_INVALID) {
    F.tg_capture[i] = 0;
    for (int k = 0; k < NS; k++)
      if (F.s[k].capture == 2) F.s[k].capture = 0;
  }
  afterg(r);
}

static void op_tg_run(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  if (!F.tg[i]) return;
  size_t count = 0;
  struct tegraph_kernel_node kn[4];
  switch (ix(a[1], 5)) {
    case 0: afterg(G(tegraph_graph_launch(F.tg[i], stream_of(a[2])))); break;
    case 1: afterg(G(tegraph_graph_upload(F.tg[i], stream_of(a[2])))); break;
    case 2: afterg(G(tegraph_graph_instantiate(F.tg[i], stream_of(a[2])))); break;
    case 3: G(tegraph_graph_node_count(F.tg[i], &count)); break;
    default: G(tegraph_graph_kernel_nodes(F.tg[i], kn, ix(a[2], 5), &count)); break;
  }
}

static void op_tg_set_arg(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  if (!F.tg[i]) return;
  tecore_devptr_t p = raw_ptr(a + 3, 1);
  size_t bytes = ix(a[6], 4) == 0 ? (size_t)ix(a[6], 17) : 8;
  unsigned char val[16] = {0};
  memcpy(val, &p, 8);
  size_t k = ix(a[1], 8) < 6 ? ix(a[1], 3) : (size_t)a[1]; /* nodes 0..2, sometimes past them */
  unsigned prm = ix(a[2], 8) < 6 ? (unsigned)ix(a[2], 5) : (unsigned)a[2];
  /* a pointer value goes into pointer parameters only (or with a wrong
   * size, to be refused): a count set to an address makes the kernel run
   * wild, as it would on a GPU -- the caller's business, not a finding */
  struct tegraph_kernel_node kn[8];
  size_t nk = 0;
  const struct tecore_kernel_def *def = NULL;
  if (tegraph_graph_kernel_nodes(F.tg[i], kn, 8, &nk) == TEGRAPH_SUCCESS && k < nk && k < 8 &&
      tecore_kernel_get_def(kn[k].kernel_id, &def) == TECORE_SUCCESS && prm < def->nparams &&
      !def->param_is_ptr[prm] && bytes == def->param_size[prm])
    return;
  if (ix(a[7], 2))
    afterg(G(tegraph_graph_set_kernel_arg(F.tg[i], k, prm, val, bytes)));
  else
    G(tegraph_graph_kernel_arg(F.tg[i], k, prm, val, bytes));
}

/* tg_full graph stream mode: a capture of real work into a libtegraph
 * graph (APPEND sometimes), then a launch */
static void op_tg_full(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  struct strm *st = &F.s[ix(a[1], NS) ? ix(a[1], NS) : 1];
  if (!st->live || st->capture) return;
  if (!F.tg_live[i]) {
    tegraph_graph_t *g = NULL;
    if (G(tegraph_graph_create(0, &g)) != TEGRAPH_SUCCESS) return;
    F.tg[i] = g;
    F.tg_live[i] = 1;
  }
  if (F.tg_capture[i]) return;
  fit_used = 0;
  tecore_devptr_t x = pick_buf(4096, a[2]), y = pick_buf(4096, a[2] + 1);
  tecore_capture_mode_t mode = ix(a[2], 3) ? TECORE_CAPTURE_THREAD_LOCAL : TECORE_CAPTURE_RELAXED;
  unsigned flags = ix(a[2], 5) == 0 ? TEGRAPH_CAPTURE_APPEND : 0;
  if (G(tegraph_graph_begin_capture(F.tg[i], st->s, mode, flags)) != TEGRAPH_SUCCESS) return;
  C(tecore_fill(x, TECORE_DTYPE_F32, 1024, 1.0, st->s));
  C(tecore_scale_add(y, x, 2.0f, x, 1.0f, TECORE_DTYPE_F32, 1024, st->s));
  struct tegraph_update_info info;
  if (G(tegraph_graph_end_capture(F.tg[i], &info)) != TEGRAPH_SUCCESS) return;
  afterg(G(tegraph_graph_launch(F.tg[i], st->s)));
}

static void op_tg_destroy(const int64_t *a) {
  size_t i = ix(a[0], NTG);
  if (!F.tg_live[i] || F.tg_capture[i]) return;
  if (G(tegraph_graph_destroy(F.tg[i])) == TEGRAPH_SUCCESS) F.tg_live[i] = 0;
  F.tg[i] = NULL; /* tegraph graphs are not validated handles: never reused */
}

/* -- libtegraph: callables -- */

static tecore_result_t c_forward(void *user, tecore_stream_t stream, const struct tegraph_io *io) {
  struct cuser *u = user;
  if (u->mode == 1) {
    tecore_set_error("fuzz: a forward that fails");
    return TECORE_ERR_INVALID;
  }
  tecore_stream_t s = u->mode == 2 ? NULL : stream;
  for (size_t i = 0; i < io->noutputs && io->ninputs; i++) {
    size_t n = tecore_tensor_numel(&io->outputs[i]);
    tecore_result_t r = tecore_scale_add(io->outputs[i].data, io->inputs[0].data, 2.0f,
                                         io->inputs[0].data, 0.0f, TECORE_DTYPE_F32, n, s);
    if (r) return r;
  }
  return TECORE_SUCCESS;
}

static tecore_result_t c_backward(void *user, tecore_stream_t stream, const struct tegraph_io *io) {
  (void)user;
  for (size_t i = 0; i < io->ninputs && io->noutputs; i++) {
    if (!io->grad_inputs[i].data) continue;
    size_t n = tecore_tensor_numel(&io->grad_inputs[i]);
    tecore_result_t r =
        tecore_scale_add(io->grad_inputs[i].data, io->grad_outputs[0].data, 2.0f,
                         io->grad_outputs[0].data, 0.0f, TECORE_DTYPE_F32, n, stream);
    if (r) return r;
  }
  return TECORE_SUCCESS;
}

static void c_user_free(void *user) { free(user); }

static void op_callable_create(const int64_t *a) {
  struct callable *c = &F.c[ix(a[0], NC)];
  if (c->live) return;
  size_t n = ix(a[1], 8) == 0 ? (size_t)a[1] : dims_small[ix(a[1], 14)] * 4;
  if (n > ((size_t)1 << 20) && n < ((size_t)1 << 40)) n = (size_t)1 << 20;
  struct tecore_tensor in, out;
  size_t shape[1] = {n};
  tecore_devptr_t data = ix(a[2], 3) == 0 ? F.b[ix(a[2], NB)].p : 0;
  tecore_tensor_init(&in, TECORE_DTYPE_F32, 1, shape, data);
  tecore_tensor_init(&out, TECORE_DTYPE_F32, 1, shape, 0);
  if (ix(a[3], 6) == 0) in.dtype = (tecore_dtype_t)ix(a[3], 12);
  struct cuser *u = calloc(1, sizeof *u);
  if (!u) return;
  u->mode = ix(a[4], 6) < 3 ? (int)ix(a[4], 6) : 0;
  struct tegraph_callable_desc d;
  memset(&d, 0, sizeof d);
  d.forward = c_forward;
  d.backward = ix(a[5], 3) ? c_backward : NULL;
  d.user = u;
  d.sample_inputs = &in;
  d.ninputs = 1;
  d.outputs = &out;
  d.noutputs = ix(a[6], 8) ? 1 : 0;
  d.num_warmup = (int)ix(a[7], 3);
  d.capture_mode = (tecore_capture_mode_t)ix(a[8], 3);
  d.flags = (unsigned)a[9] & 1;
  d.user_free = c_user_free;
  struct pool *p = &F.p[ix(a[10], NP)];
  tegraph_mempool_t *mp = ix(a[10], 4) < NP && p->live ? p->p : NULL;
  tegraph_callable_t *cl = NULL;
  tegraph_result_t r = G(tegraph_callable_create(&d, mp, &cl));
  if (r == TEGRAPH_SUCCESS) {
    c->c = cl;
    c->live = 1;
    c->user = u;
    c->n = n;
    c->from_seq = 0;
  } else {
    free(u);
  }
  afterg(r);
}

static void op_callable_from_seq(const int64_t *a) {
  struct callable *c = &F.c[ix(a[0], NC)];
  struct seq *q = &F.q[ix(a[1], NQ)];
  if (c->live || !q->q) return;
  struct tecore_tensor in;
  seq_io(q, 0, 0, &in);
  if (ix(a[2], 3) == 0) in.data = 0;
  struct tegraph_seq_callable_desc d = {.seq = q->q,
                                        .sample_input = &in,
                                        .need_dx = (int)ix(a[3], 2),
                                        .num_warmup = (int)ix(a[4], 3),
                                        .capture_mode = (tecore_capture_mode_t)ix(a[5], 3),
                                        .flags = (unsigned)a[6] & 1};
  tegraph_callable_t *cl = NULL;
  tegraph_result_t r = G(tegraph_callable_from_seq(&d, NULL, &cl));
  if (r == TEGRAPH_SUCCESS) {
    c->c = cl;
    c->live = 1;
    c->user = NULL;
    c->n = q->rows * q->features;
    c->from_seq = 1;
    c->in = in;
    seq_io(q, 0, 1, &c->out);
  }
  afterg(r);
}

/* 1 when p points into a device or pinned buffer of ours (live or freed):
 * memory the allocation registry knows, whatever the size. */
static int in_our_buf(tecore_devptr_t p) {
  for (size_t i = 0; i < NB; i++)
    if (F.b[i].p && p >= F.b[i].p && p - F.b[i].p < F.b[i].bytes) return 1;
  for (size_t i = 0; i < NH; i++) {
    tecore_devptr_t h = (tecore_devptr_t)(uintptr_t)F.h[i].p;
    if (h && p >= h && p - h < F.h[i].bytes) return 1;
  }
  return 0;
}

static void op_callable_run(const int64_t *a) {
  struct callable *c = &F.c[ix(a[0], NC)];
  if (!c->c) return;
  struct tecore_tensor in, out;
  size_t shape[1] = {c->n};
  struct buf *b = &F.b[ix(a[2], NB)];
  tecore_tensor_init(&in, TECORE_DTYPE_F32, 1, shape, ix(a[3], 3) ? b->p : 0);
  tecore_tensor_init(&out, TECORE_DTYPE_F32, 1, shape,
                     ix(a[3], 4) == 1 ? F.b[ix(a[2] + 1, NB)].p : 0);
  if (c->from_seq) { /* the sequence's shapes, over the fuzzer's buffers */
    in.ndim = c->in.ndim;
    memcpy(in.shape, c->in.shape, sizeof in.shape);
    out.ndim = c->out.ndim;
    memcpy(out.shape, c->out.shape, sizeof out.shape);
    in.dtype = out.dtype = c->in.dtype;
  }
  if (ix(a[3], 5) == 0) in = F.t[ix(a[2], NT)];
  /* Buffers of any size, freed ones too: a replay checks that each holds
   * its captured tensor (tecore_mem_range).  Only the registry's memory:
   * a pageable pointer is accepted unchecked (it cannot be known), and a
   * copy from a short malloc'ed block would be the fuzzer's own bug. */
  if (in.data && !in_our_buf(in.data)) in.data = 0;
  if (out.data && !in_our_buf(out.data)) out.data = 0;
  struct tegraph_replay_opts o = {.stream = stream_of(a[4]),
                                  .replay_stream = ix(a[5], 3) == 0 ? stream_of(a[5] + 1) : NULL,
                                  .is_first_microbatch = (int)ix(a[6], 2)};
  const struct tegraph_replay_opts *op = ix(a[7], 4) ? &o : NULL;
  tegraph_result_t r;
  switch (ix(a[1], 5)) {
    case 0:
    case 1: r = G(tegraph_callable_forward(c->c, &in, 1, NULL, NULL, 0, &out, 1, op)); break;
    case 2: r = G(tegraph_callable_backward(c->c, &out, 1, &in, ix(a[3], 2), op)); break;
    case 3: r = G(tegraph_callable_backward_dw(c->c, op)); break;
    default: r = G(tegraph_callable_reset(c->c, (unsigned)a[6] & 1)); break;
  }
  afterg(r);
}

static void op_callable_destroy(const int64_t *a) {
  struct callable *c = &F.c[ix(a[0], NC)];
  if (!c->c) return;
  tegraph_result_t r = G(tegraph_callable_destroy(c->c));
  if (r == TEGRAPH_SUCCESS) {
    size_t self_ = (size_t)(c - F.c);
    if (!c->live && !REUSED(NC, F.c[k_].live, F.c[k_].c == c->c, F.c[k_].live = 0))
      fz_fail("tegraph_callable_destroy of a destroyed callable succeeded");
    c->live = 0;
    c->user = NULL;
  }
}

/* -- odds and ends -- */

static void op_misc(const int64_t *a) {
  struct tecore_device_props pr;
  size_t fr = 0, tot = 0;
  int n = 0;
  switch (ix(a[0], 6)) {
    case 0: C(tecore_device_get_props((int)a[1], ix(a[2], 4) ? &pr : NULL)); break;
    case 1: C(tecore_mem_info(&fr, &tot)); break;
    case 2:
      tecore_set_error(NULL);
      count_call("tecore_set_error(NULL)");
      break;
    case 3:
      tecore_log(TECORE_LOG_ERROR, TECORE_SUBSYS_INIT, NULL, 0, NULL);
      count_call("tecore_log(NULL)");
      break;
    case 4: C(tecore_device_count(&n)); break;
    default: {
      tecore_devptr_t d = 0;
      struct hbuf *h = &F.h[ix(a[1], NH)];
      C(tecore_mem_host_device_ptr((void *)((uintptr_t)h->p + ix(a[2], 64)), &d));
      break;
    }
  }
}

static const struct op ops[] = {
    {"alloc", "bz", 8, op_alloc},
    {"free", "bk", 5, op_free},
    {"alloc_host", "hz", 2, op_alloc_host},
    {"free_host", "hk", 1, op_free_host},
    {"memcpy_async", "PPzs", 8, op_memcpy_async},
    {"memcpy", "PPz", 3, op_memcpy},
    {"memset", "Pkzsv", 6, op_memset},
    {"copy_check", "bbvs", 2, op_copy_check},
    {"host_register", "kzk", 1, op_host_register},
    {"host_unregister", "k", 1, op_host_unregister},
    {"write_wait", "sPkv", 1, op_write_wait},
    {"stream_create", "skk", 2, op_stream_create},
    {"stream_destroy", "s", 1, op_stream_destroy},
    {"stream_sync", "s", 3, op_stream_sync},
    {"stream_query", "s", 1, op_stream_query},
    {"ctx_sync", "", 1, op_ctx_sync},
    {"event_create", "ek", 1, op_event_create},
    {"event_destroy", "e", 1, op_event_destroy},
    {"event_record", "es", 2, op_event_record},
    {"event_sync", "e", 1, op_event_sync},
    {"event_query", "e", 1, op_event_query},
    {"stream_wait_event", "se", 1, op_stream_wait_event},
    {"event_elapsed", "eek", 1, op_event_elapsed},
    {"begin_capture", "sk", 3, op_begin_capture},
    {"end_capture", "sg", 4, op_end_capture},
    {"capture_status", "s", 1, op_capture_status},
    {"instantiate", "xg", 3, op_instantiate},
    {"graph_launch", "xs", 4, op_graph_launch},
    {"graph_upload", "xs", 1, op_graph_upload},
    {"exec_update", "xg", 1, op_exec_update},
    {"graph_destroy", "g", 1, op_graph_destroy},
    {"exec_destroy", "x", 1, op_exec_destroy},
    {"graph_nodes", "gkkPx", 2, op_graph_nodes},
    {"tensor", "tkknnmb", 10, op_tensor},
    {"tensor_fit", "tbkkk", 8, op_tensor_fit},
    {"quantize", "ttPks", 5, op_quantize},
    {"quantize_multi", "ttks", 1, op_quantize_multi},
    {"dequantize", "tts", 3, op_dequantize},
    {"amax", "tPks", 2, op_amax},
    {"compute_scale", "ts", 1, op_compute_scale},
    {"cast_transpose", "tts", 3, op_cast_transpose},
    {"ct_dbias", "tttPkks", 2, op_ct_dbias},
    {"act_fwd", "ktts", 3, op_act_fwd},
    {"act_bwd", "kttts", 2, op_act_bwd},
    {"rmsnorm_fwd", "tttkPks", 2, op_rmsnorm_fwd},
    {"layernorm_fwd", "tttkPks", 2, op_layernorm_fwd},
    {"rmsnorm_bwd", "tttPbks", 1, op_rmsnorm_bwd},
    {"gemm", "tktktkkms", 3, op_gemm},
    {"fill", "Pkzvs", 4, op_fill},
    {"scale_add", "PPkzs", 2, op_scale_add},
    {"launch_fill", "Pkksk", 2, op_launch_fill},
    {"k_quantize", "nnkkkms", 6, op_k_quantize},
    {"k_act", "knnkkms", 4, op_k_act},
    {"k_norm", "knnkkms", 3, op_k_norm},
    {"k_ct", "nnkkms", 3, op_k_ct},
    {"k_gemm", "nnnkkkms", 3, op_k_gemm},
    {"capture_full", "skgx", 3, op_capture_full},
    {"seq_full", "qkkks", 2, op_seq_full},
    {"dstate_create", "dzkkks", 1, op_dstate_create},
    {"dstate_update", "dkkzs", 1, op_dstate_update},
    {"dstate_tensor", "dzt", 1, op_dstate_tensor},
    {"dstate_free", "d", 1, op_dstate_free},
    {"vmm_reserve", "Vkz", 1, op_vmm_reserve},
    {"vmm_create", "Vk", 1, op_vmm_create},
    {"vmm_map", "VVkz", 1, op_vmm_map},
    {"vmm_unmap", "Vk", 1, op_vmm_unmap},
    {"vmm_release", "V", 1, op_vmm_release},
    {"vmm_free_va", "V", 1, op_vmm_free_va},
    {"seq_create", "qnnkkv", 2, op_seq_create},
    {"seq_add", "qknkk", 4, op_seq_add},
    {"seq_recipe", "qkks", 1, op_seq_recipe},
    {"seq_build", "qs", 2, op_seq_build},
    {"seq_fwd", "qms", 3, op_seq_fwd},
    {"seq_bwd", "qmsk", 2, op_seq_bwd},
    {"seq_misc", "qkskkk", 2, op_seq_misc},
    {"seq_fp8", "qkks", 2, op_seq_fp8},
    {"seq_destroy", "q", 1, op_seq_destroy},
    {"pool_create", "pk", 1, op_pool_create},
    {"pool_alloc", "pkz", 2, op_pool_alloc},
    {"pool_free", "pkk", 1, op_pool_free},
    {"pool_misc", "pkz", 1, op_pool_misc},
    {"pool_destroy", "p", 1, op_pool_destroy},
    {"tg_create", "Gk", 1, op_tg_create},
    {"tg_capture", "Gskk", 1, op_tg_capture},
    {"tg_end", "Gk", 1, op_tg_end},
    {"tg_run", "Gks", 2, op_tg_run},
    {"tg_set_arg", "GkkPkk", 2, op_tg_set_arg},
    {"tg_destroy", "G", 1, op_tg_destroy},
    {"tg_full", "Gsk", 3, op_tg_full},
    {"callable_create", "cnbkkkkkkkp", 2, op_callable_create},
    {"callable_from_seq", "cqkkkkk", 1, op_callable_from_seq},
    {"callable_run", "ckbksskk", 4, op_callable_run},
    {"callable_destroy", "c", 1, op_callable_destroy},
    {"misc", "kkk", 1, op_misc},
    {"comm_allreduce", "PPzkkks", 4, op_comm_allreduce},
    {"comm_fused", "Pbbbnmnks", 3, op_comm_fused},
    {"comm_mem", "kzk", 2, op_comm_mem},
    {"comm_misc", "kkzs", 2, op_comm_misc},
    {"comm_split", "kk", 1, op_comm_split},
    {"comm_renew", "", 1, op_comm_renew},
};
#define NOPS (sizeof ops / sizeof ops[0])

/* ---- drawing arguments -------------------------------------------------------- */

static int64_t draw_size(void) {
  static const uint64_t common[] = {1,   3,    4,    8,     64,       255,
                                    256, 1000, 4096, 65536, 1u << 20, 4u << 20};
  static const uint64_t odd[] = {0,
                                 SIZE_MAX,
                                 SIZE_MAX / 2,
                                 (uint64_t)1 << 40,
                                 (uint64_t)1 << 50,
                                 ((uint64_t)1 << 62) + 1,
                                 SIZE_MAX - 4095};
  if (fz_one_in(16)) return (int64_t)odd[fz_below(sizeof odd / sizeof odd[0])];
  uint64_t v = common[fz_below(sizeof common / sizeof common[0])];
  if (fz_one_in(4)) v += fz_below(64);
  return (int64_t)v;
}

static int64_t draw_dim(void) {
  static const uint64_t odd[] = {
      0, (uint64_t)1 << 31, (uint64_t)1 << 40, (uint64_t)1 << 62, SIZE_MAX, 65536};
  if (fz_one_in(20)) return (int64_t)odd[fz_below(sizeof odd / sizeof odd[0])];
  return (int64_t)dims_small[fz_below(sizeof dims_small / sizeof dims_small[0])];
}

static unsigned draw_args(const char *types, int64_t *a) {
  unsigned n = 0;
  for (const char *c = types; *c && n < NARGS; c++) {
    switch (*c) {
      case 'b': a[n++] = (int64_t)fz_below(NB); break;
      case 'h': a[n++] = (int64_t)fz_below(NH); break;
      case 's': a[n++] = (int64_t)fz_below(NS); break;
      case 'e': a[n++] = (int64_t)fz_below(NE); break;
      case 'g': a[n++] = (int64_t)fz_below(NG); break;
      case 'x': a[n++] = (int64_t)fz_below(NX); break;
      case 't': a[n++] = (int64_t)fz_below(NT); break;
      case 'd': a[n++] = (int64_t)fz_below(ND); break;
      case 'V': a[n++] = (int64_t)fz_below(NV); break;
      case 'q': a[n++] = (int64_t)fz_below(NQ); break;
      case 'p': a[n++] = (int64_t)fz_below(NP + 2); break;
      case 'G': a[n++] = (int64_t)fz_below(NTG); break;
      case 'c': a[n++] = (int64_t)fz_below(NC); break;
      case 'z': a[n++] = draw_size(); break;
      case 'n': a[n++] = draw_dim(); break;
      case 'k': a[n++] = (int64_t)fz_below(16); break;
      case 'm': a[n++] = (int64_t)fz_below(1u << 17); break;
      case 'v': a[n++] = (int64_t)(uint32_t)fz_u64(); break;
      case 'P': {
        /* mostly inside a buffer, at its start or aligned */
        static const unsigned kinds[] = {0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 4, 5, 6, 7};
        a[n++] = kinds[fz_below(sizeof kinds / sizeof kinds[0])];
        a[n++] = (int64_t)fz_below(NB);
        a[n++] = fz_one_in(2) ? 0 : fz_one_in(2) ? (int64_t)(fz_below(64) * 256) : draw_size();
        break;
      }
      default: a[n++] = 0; break;
    }
  }
  return n;
}

/* ---- a run ------------------------------------------------------------------- */

static void setup(void) {
  memset(&F, 0, sizeof F);
  F.s[0].live = F.s[0].ever = 1;
  if (C(tecore_init()) != TECORE_SUCCESS) fz_fail("tecore_init failed: %s", tecore_last_error());
  tecore_backend_t be = TECORE_BACKEND_NONE;
  C(tecore_backend(&be));
  if (be != TECORE_BACKEND_VDEV) fz_fail("the fuzzer runs on vdev (TE_DEVICE=vdev)");
  if (C(tecore_mem_alloc(NT * SCALE_STRIDE, &F.scales)) != TECORE_SUCCESS)
    fz_fail("no memory for the scales");
  C(tecore_memset_d32_async(F.scales, 0x3f800000u, NT * SCALE_STRIDE / 4, NULL));
  C(tecore_stream_synchronize(NULL));
  F.scratch = malloc(SCRATCH_BYTES);
  if (!F.scratch || posix_memalign(&F.reg, 4096, 3 * 4096)) fz_fail("no host memory");
  memset(F.scratch, 0, SCRATCH_BYTES);
  C(tecore_vmm_granularity(&F.gran, 0));
  if (!F.gran) F.gran = 1 << 21;
  for (int i = 1; i < NS - 1; i++)
    if (C(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &F.s[i].s)) == TECORE_SUCCESS)
      F.s[i].live = F.s[i].ever = 1;
  /* buffers of 4, 8, 16, 32 KiB, 256 KiB twice and 1 MiB twice: room for
   * the kernels' tensors (the fit ops), slots 8 and 9 empty */
  static const size_t sizes[] = {4096, 8192, 16384, 32768, 262144, 262144, 1 << 20, 1 << 20};
  for (int i = 0; i < 8; i++) {
    if (C(tecore_mem_alloc(sizes[i], &F.b[i].p)) == TECORE_SUCCESS) {
      F.b[i].bytes = sizes[i];
      F.b[i].live = 1;
    }
  }
  for (int i = 0; i < 2; i++)
    if (C(tecore_event_create(TECORE_EVENT_DEFAULT, &F.e[i])) == TECORE_SUCCESS)
      F.e_live[i] = F.e_ever[i] = 1;
  fz_comm_setup();
}

/* Ends every capture and frees everything the run holds (LeakSanitizer
 * checks the run at exit). */
static void cleanup(void) {
  for (int i = 0; i < NTG; i++)
    if (F.tg[i] && F.tg_capture[i]) {
      G(tegraph_graph_end_capture(F.tg[i], NULL));
      F.tg_capture[i] = 0;
    }
  for (int i = 0; i < NS; i++)
    if (F.s[i].capture) {
      tecore_graph_t g = NULL;
      if (C(tecore_stream_end_capture(F.s[i].s, &g)) == TECORE_SUCCESS && g)
        C(tecore_graph_destroy(g));
      F.s[i].capture = 0;
    }
  for (int i = 0; i < NC; i++)
    if (F.c[i].live) G(tegraph_callable_destroy(F.c[i].c));
  fz_comm_cleanup();
  for (int i = 0; i < NTG; i++)
    if (F.tg_live[i]) G(tegraph_graph_destroy(F.tg[i]));
  for (int i = 0; i < NP; i++)
    if (F.p[i].live) G(tegraph_mempool_destroy(F.p[i].p));
  for (int i = 0; i < NQ; i++) {
    if (F.q[i].live) C(tecore_seq_destroy(F.q[i].q));
    seq_free_io(&F.q[i]);
  }
  for (int i = 0; i < ND; i++)
    if (F.d_live[i]) C(tecore_delayed_state_free(&F.d[i]));
  for (int i = 0; i < NX; i++)
    if (F.x_live[i]) C(tecore_graph_exec_destroy(F.x[i]));
  for (int i = 0; i < NG; i++)
    if (F.g_live[i]) C(tecore_graph_destroy(F.g[i]));
  for (int i = 0; i < NE; i++)
    if (F.e_live[i]) C(tecore_event_destroy(F.e[i]));
  for (int i = 0; i < NV; i++) {
    if (F.v[i].mapped) C(tecore_vmm_unmap(F.v[i].va, F.v[i].bytes));
    if (F.v[i].handle) C(tecore_vmm_release(F.v[i].h));
    if (F.v[i].reserved) C(tecore_vmm_free_va(F.v[i].va, F.v[i].bytes));
  }
  for (int i = 0; i < NB; i++)
    if (F.b[i].live) C(tecore_mem_free(F.b[i].p));
  for (int i = 0; i < NH; i++)
    if (F.h[i].live) C(tecore_mem_free_host(F.h[i].p));
  if (F.reg_live) C(tecore_mem_host_unregister(F.reg));
  C(tecore_mem_free(F.scales));
  for (int i = 1; i < NS; i++)
    if (F.s[i].live) C(tecore_stream_destroy(F.s[i].s));
  C(tecore_ctx_synchronize());
  free(F.scratch);
  free(F.reg);
}

static const struct op *find_op(const char *name) {
  for (size_t i = 0; i < NOPS; i++)
    if (!strcmp(ops[i].name, name)) return &ops[i];
  return NULL;
}

static void exec_line(const struct op *o, const int64_t *a, unsigned n) {
  int len = snprintf(fz_sh->current, sizeof fz_sh->current, "%s", o->name);
  for (unsigned i = 0; i < n && len < (int)sizeof fz_sh->current; i++)
    len += snprintf(fz_sh->current + len, sizeof fz_sh->current - (size_t)len, " %lld",
                    (long long)a[i]);
  if (F.trace) {
    printf("%s\n", fz_sh->current);
    fflush(stdout);
  }
  cur_op = (size_t)(o - ops);
  o->run(a);
  cur_op = FZ_MAX_OPS;
}

static unsigned total_weight(void) {
  unsigned w = 0;
  for (size_t i = 0; i < NOPS; i++) w += ops[i].weight;
  return w;
}

static void one_run(const struct fz_opts *o, uint64_t run, uint64_t max_calls) {
  F.trace = o->trace;
  setup();
  F.trace = o->trace;
  unsigned tw = total_weight();
  uint64_t start = fz_sh->calls;
  while (!F.stop && fz_sh->calls - start < max_calls) {
    uint64_t w = fz_below(tw);
    const struct op *op = ops;
    for (size_t i = 0; i < NOPS; i++) {
      if (w < ops[i].weight) {
        op = &ops[i];
        break;
      }
      w -= ops[i].weight;
    }
    int64_t a[NARGS] = {0};
    unsigned n = draw_args(op->types, a);
    exec_line(op, a, n);
  }
  snprintf(fz_sh->current, sizeof fz_sh->current, "(cleanup after run %llu)",
           (unsigned long long)run);
  cleanup();
}

/* Executes a corpus file (lines of "name args..."). */
static int replay_file(const struct fz_opts *o, const char *path) {
  int trace = o->trace;
  FILE *f = fopen(path, "r");
  if (!f) {
    fprintf(stderr, "fuzz-api: %s: %s\n", path, strerror(errno));
    return 2;
  }
  F.trace = trace;
  setup();
  F.trace = trace;
  char line[1024];
  int lineno = 0;
  while (!F.stop && fgets(line, sizeof line, f)) {
    lineno++;
    char *hash = strchr(line, '#');
    if (hash) *hash = 0;
    char *save = NULL, *name = strtok_r(line, " \t\r\n", &save);
    if (!name) continue;
    const struct op *op = find_op(name);
    if (!op) {
      fprintf(stderr, "fuzz-api: %s:%d: unknown operation \"%s\"\n", path, lineno, name);
      fclose(f);
      return 2;
    }
    int64_t a[NARGS] = {0};
    unsigned n = 0;
    for (char *tok; n < NARGS && (tok = strtok_r(NULL, " \t\r\n", &save));)
      a[n++] = (int64_t)strtoull(tok, NULL, 0);
    exec_line(op, a, n);
  }
  fclose(f);
  cleanup();
  return 0;
}

int main(int argc, char **argv) {
  struct fz_opts o;
  if (fz_parse_opts(argc, argv, &o, 200)) return 2;
  setenv("TE_DEVICE", "vdev", 1);
  setenv("TECORE_VDEV_CHECK", "1", 1);
  setenv("TECORE_VDEV_WAIT_TIMEOUT", "2", 0);
  setenv("NCCL_NVLS_ENABLE", "0", 0);
  /* a small pool and Lamport buffers: a communicator a run */
  setenv("TECOMM_POOL_MB", "16", 0);
  setenv("TECOMM_MAX_TOKENS", "8", 0);
  setenv("TECOMM_MAX_HIDDEN", "1024", 0);
  setenv("TECOMM_TIMEOUT", "2000", 0);
  if (!o.verbose) setenv("TE_DEBUG", "NONE", 1);
  fz_shared_init();
  if (o.nreplay) return fz_replay("fuzz-api", &o, replay_file);
  int rc = fz_drive("fuzz-api", &o, one_run);
  if (o.stats) {
    printf("%-20s %10s %10s\n", "operation", "succeeded", "failed");
    for (size_t i = 0; i < NOPS && i < FZ_MAX_OPS; i++)
      printf("%-20s %10" PRIu64 " %10" PRIu64 "\n", ops[i].name, fz_sh->op_ok[i], fz_sh->op_err[i]);
  }
  return rc;
}
