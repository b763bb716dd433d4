/* check_bounds.c -- SPDX-License-Identifier: Apache-2.0
 * Issue 9's last holes: pointers that were accepted although what they
 * point at could not hold what the call touches, and handles used with
 * the wrong owner.  Each test is named after what broke and checks, on
 * fresh random inputs with the outputs poisoned, that
 *   - the call fails with the exact error code and a detail that names
 *     the argument;
 *   - nothing was written: every buffer involved holds what it held
 *     before (outputs their poison);
 *   - the legal neighbour (the same call with a buffer that fits, a
 *     pointer that is aligned, the node of the right graph) succeeds and
 *     matches a host reference (tolerances stated at each compare).
 * Topics: tecore_mem_range (the allocation registry's query), graphed
 * callables' replays with a buffer too small for the captured tensor,
 * misaligned pointers in raw launches and graph nodes, a node of another
 * graph, and raw pointers whose whole extent must lie in one allocation
 * (checked on vdev by default, under cuda with TECORE_CUDA_CHECK=1: see
 * libte(7)). */
#include "check_graph_common.h"
#include <sys/mman.h>

/* ---- helpers ------------------------------------------------------------------------- */

static int on_vdev(void) { return te_backend_kind == TECORE_BACKEND_VDEV; }

/* The bytes left in p's allocation from p on, as the registry says. */
static size_t bytes_left(tecore_devptr_t p) {
  tecore_devptr_t base = 0;
  size_t bytes = 0;
  TE_OK(tecore_mem_range(p, &base, &bytes));
  ck_assert_msg(base <= p && p - base < bytes, "0x%llx outside its range [0x%llx, +%zu)",
                (unsigned long long)p, (unsigned long long)base, bytes);
  return bytes - (size_t)(p - base);
}

/* ---- tecore_mem_range ---------------------------------------------------------------- */

/* libtegraph had no way to learn where a caller's buffer ends (the hole
 * behind the replay tests below): the registry's answer for each kind of
 * memory, at its start, inside and at its last byte. */
START_TEST(test_mem_range_gives_each_allocations_extent) {
  size_t n = 1 + te_rand_below(1 << 16);
  tecore_devptr_t d = te_dalloc(n);
  void *h = NULL;
  TE_OK(tecore_mem_alloc_host(n, &h));
  size_t rn = 4096 + te_rand_below(8192);
  void *r = NULL;
  ck_assert_int_eq(posix_memalign(&r, 4096, rn), 0);
  TE_OK(tecore_mem_host_register(r, rn, 0));
  struct {
    tecore_devptr_t p;
    size_t n;
    const char *what;
  } a[] = {{d, n, "device memory"}, {te_hptr(h), n, "pinned host memory"},
           {te_hptr(r), rn, "registered host memory"}};
  for (size_t i = 0; i < 3; i++) {
    size_t offs[3] = {0, te_rand_below(a[i].n), a[i].n - 1};
    for (int k = 0; k < 3; k++) {
      tecore_devptr_t base = 0;
      size_t bytes = 0;
      TE_OK(tecore_mem_range(a[i].p + offs[k], &base, &bytes));
      /* vdev: exactly the allocation; cuda: the driver's range, which
       * holds the allocation (it may be rounded up) */
      ck_assert_msg(base <= a[i].p && base + bytes >= a[i].p + a[i].n,
                    "%s [0x%llx, +%zu) at offset %zu: range [0x%llx, +%zu)", a[i].what,
                    (unsigned long long)a[i].p, a[i].n, offs[k], (unsigned long long)base,
                    bytes);
      if (on_vdev())
        ck_assert_msg(base == a[i].p && bytes == a[i].n, "%s: vdev range [0x%llx, +%zu), want "
                      "[0x%llx, +%zu)", a[i].what, (unsigned long long)base, bytes,
                      (unsigned long long)a[i].p, a[i].n);
    }
  }
  TE_OK(tecore_mem_host_unregister(r));
  free(r);
  TE_OK(tecore_mem_free_host(h));
  TE_OK(tecore_mem_free(d));
}
END_TEST

/* VMM: the run of abutting mappings around the address (vdev exactly;
 * cuda reports the reservation, which holds them). */
START_TEST(test_mem_range_gives_vmm_mapping_extent) {
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  tecore_devptr_t va = 0;
  tecore_vmm_handle_t h1 = 0, h2 = 0;
  TE_OK(tecore_vmm_reserve(3 * g, 0, &va));
  TE_OK(tecore_vmm_create(g, 0, &h1));
  TE_OK(tecore_vmm_create(g, 0, &h2));
  TE_OK(tecore_vmm_map(va, g, h1, 0));
  TE_OK(tecore_vmm_map(va + g, g, h2, 0));
  TE_OK(tecore_vmm_set_access(va, 2 * g, 0));
  tecore_devptr_t base = 0;
  size_t bytes = 0;
  TE_OK(tecore_mem_range(va + g + te_rand_below(g), &base, &bytes));
  ck_assert_msg(base <= va && base + bytes >= va + 2 * g, "range [0x%llx, +%zu) misses the "
                "mappings [0x%llx, +%zu)", (unsigned long long)base, bytes,
                (unsigned long long)va, 2 * g);
  if (on_vdev()) {
    ck_assert_msg(base == va && bytes == 2 * g, "vdev: range [0x%llx, +%zu), want [0x%llx, "
                  "+%zu)", (unsigned long long)base, bytes, (unsigned long long)va, 2 * g);
    /* the unmapped third granule is no allocation */
    TE_EXPECT_INVALID("tecore_mem_range", tecore_mem_range(va + 2 * g, &base, &bytes));
  }
  TE_OK(tecore_vmm_unmap(va, 2 * g));
  TE_OK(tecore_vmm_release(h1));
  TE_OK(tecore_vmm_release(h2));
  TE_OK(tecore_vmm_free_va(va, 3 * g));
}
END_TEST

/* A range given back by tecore_vmm_free_va was plain address space again:
 * the host could map memory of its own there, the enqueue check took that
 * for pageable host memory, and a memset queued behind other work wrote
 * it after the host had unmapped it (fuzz-api: SIGSEGV in a stream
 * worker).  On vdev a freed range stays the device's: the host cannot
 * map it, and every call refuses it as freed device memory.  (On cuda a
 * VMM address is never host memory; the driver reports a freed one.) */
START_TEST(test_freed_vmm_range_stays_refused_and_unmappable) {
  if (!on_vdev()) return;
  size_t g = 0;
  TE_OK(tecore_vmm_granularity(&g, 0));
  tecore_devptr_t va = 0;
  size_t k = 1 + te_rand_below(3);
  TE_OK(tecore_vmm_reserve(k * g, 0, &va));
  TE_OK(tecore_vmm_free_va(va, k * g));
  void *want = (void *)(uintptr_t)va;
  void *h = mmap(want, g, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE,
                 -1, 0);
  int took = h == want;
  if (h != MAP_FAILED) munmap(h, g);
  ck_assert_msg(!took, "the host mapped its own memory at the freed range 0x%llx",
                (unsigned long long)va);
  tecore_devptr_t base = 0;
  size_t bytes = 0;
  TE_EXPECT_INVALID("in no allocation", tecore_mem_range(va, &base, &bytes));
  ck_assert_msg(base == 0 && bytes == 0, "outputs written by a refused call");
  tecore_stream_t s = NULL;
  TE_OK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));
  size_t n = 1 + te_rand_below(g);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "not allocated",
                tecore_memset_d8_async(va + te_rand_below(k * g - n + 1), 0xAB, n, s));
  tecore_stream_synchronize(s); /* the stream keeps the illegal address */
  TE_OK(tecore_stream_destroy(s));
}
END_TEST

/* Addresses the registry does not know: refused, out-parameters kept. */
START_TEST(test_mem_range_refuses_unknown_addresses_and_keeps_outputs) {
  size_t n = 64 + te_rand_below(4096);
  char *pageable = malloc(n);
  tecore_devptr_t base = 0x5a5a5a5a5a5aull;
  size_t bytes = 0xa5a5a5;
  TE_EXPECT_INVALID("in no allocation", tecore_mem_range(te_hptr(pageable + 1), &base, &bytes));
  ck_assert_msg(base == 0x5a5a5a5a5a5aull && bytes == 0xa5a5a5,
                "a refused call changed its out-parameters");
  TE_EXPECT_INVALID("ptr is 0", tecore_mem_range(0, &base, &bytes));
  tecore_devptr_t d = te_dalloc(n);
  TE_EXPECT_INVALID("base is NULL", tecore_mem_range(d, NULL, &bytes));
  TE_EXPECT_INVALID("bytes is NULL", tecore_mem_range(d, &base, NULL));
  TE_OK(tecore_mem_free(d));
  if (on_vdev()) /* the driver may hand the address out again; vdev never does */
    TE_EXPECT_INVALID("in no allocation", tecore_mem_range(d, &base, &bytes));
  free(pageable);
}
END_TEST

/* ---- graphed callables ---------------------------------------------------------------- */

/* A pointer into buf (an allocation of need bytes) whose allocation holds
 * exactly short_by bytes less than need from there on (16-byte aligned:
 * the replay would rebind the graph to it in place and the kernel run
 * past the end).  vdev's registry holds the size asked for (tested
 * above); the driver may round an allocation up, so under cuda the end
 * is the one tecore_mem_range reports. */
static tecore_devptr_t short_at(tecore_devptr_t buf, size_t need, size_t short_by) {
  size_t left = on_vdev() ? need : bytes_left(buf);
  ck_assert(left >= need);
  return buf + (left - need) + short_by;
}

/* A forward replay with an input buffer smaller than the captured tensor
 * was accepted: the graph, rebound to it, read past its end. */
START_TEST(test_callable_forward_refuses_input_buffer_too_small) {
  size_t n = 256 + 16 * te_rand_below(64);
  struct tecore_tensor sample;
  tegraph_callable_t *c = dbl_callable(&n, &sample);
  tecore_devptr_t xb = te_dalloc(n * 4), yb = te_dalloc(n * 4);
  tecore_devptr_t xs = short_at(xb, n * 4, 16);
  float *xh = malloc(n * 4);
  te_rand_floats(xh, n, -4, 4);
  te_h2d(xs, xh, n * 4 - 16);
  te_poison_dev(yb, n * 4);
  struct tecore_tensor in = tgt_vec(xs, n), out = tgt_vec(yb, n);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  struct snap sx = snap_take(xb, n * 4), sy = snap_take(yb, n * 4);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "inputs[0]",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  ck_assert_msg(strstr(tegraph_last_error(), "captured tensor needs"), "detail: %s",
                tegraph_last_error());
  snap_expect(&sx, "the short input after the refused replay");
  snap_expect(&sy, "the poisoned output after the refused replay");
  /* the neighbour: the same buffer, the tensor where it fits */
  in.data = short_at(xb, n * 4, 0);
  te_h2d(in.data, xh, n * 4);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  expect_scaled(yb, xh, 2.0f, n, "y = 2x from an input that fits");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(yb));
  free(xh);
}
END_TEST

/* The same for an output: the graph wrote past the caller's buffer. */
START_TEST(test_callable_forward_refuses_output_buffer_too_small) {
  size_t n = 256 + 16 * te_rand_below(64);
  struct tecore_tensor sample;
  tegraph_callable_t *c = dbl_callable(&n, &sample);
  tecore_devptr_t xb = tgt_rand_dev(n, -4, 4), yb = te_dalloc(n * 4);
  te_poison_dev(yb, n * 4);
  struct tecore_tensor in = tgt_vec(xb, n), out = tgt_vec(short_at(yb, n * 4, 32), n);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  struct snap sx = snap_take(xb, n * 4), sy = snap_take(yb, n * 4);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "outputs[0]",
            tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  snap_expect(&sx, "the input after the refused replay");
  snap_expect(&sy, "the poisoned short output after the refused replay");
  out.data = short_at(yb, n * 4, 0);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, &out, 1, &o));
  float *xh = tgt_get(xb, n);
  expect_scaled(out.data, xh, 2.0f, n, "y = 2x into an output that fits");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(yb));
  free(xh);
}
END_TEST

/* A backward replay with a short grad_outputs buffer (read past) and a
 * short grad_inputs buffer (written past). */
START_TEST(test_callable_backward_refuses_grad_buffers_too_small) {
  size_t n = 256 + 16 * te_rand_below(64);
  struct tecore_tensor sample;
  tegraph_callable_t *c = dbl_callable(&n, &sample);
  tecore_devptr_t xb = tgt_rand_dev(n, -1, 1), gyb = tgt_rand_dev(n, -4, 4);
  tecore_devptr_t gxb = te_dalloc(n * 4);
  te_poison_dev(gxb, n * 4);
  struct tegraph_replay_opts o = {.stream = te_stream, .is_first_microbatch = 1};
  struct tecore_tensor in = tgt_vec(xb, n);
  TG_OK(tegraph_callable_forward(c, &in, 1, NULL, NULL, 0, NULL, 0, &o));
  struct tecore_tensor go = tgt_vec(short_at(gyb, n * 4, 16), n), gi = tgt_vec(gxb, n);
  struct snap sy = snap_take(gyb, n * 4), sx = snap_take(gxb, n * 4);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "grad_outputs[0]",
            tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  go.data = gyb;
  gi.data = short_at(gxb, n * 4, 64);
  TG_EXPECT(TEGRAPH_ERR_INVALID, "grad_inputs[0]",
            tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  snap_expect(&sy, "grad_outputs after the refused replays");
  snap_expect(&sx, "the poisoned grad_inputs after the refused replays");
  gi.data = gxb;
  TG_OK(tegraph_callable_backward(c, &go, 1, &gi, 1, &o));
  float *gy = tgt_get(gyb, n);
  expect_scaled(gxb, gy, 3.0f, n, "dx = 3dy into buffers that fit");
  TG_OK(tegraph_callable_destroy(c));
  TE_OK(tecore_mem_free(sample.data));
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(gyb));
  TE_OK(tecore_mem_free(gxb));
  free(gy);
}
END_TEST

/* ---- misaligned pointers ------------------------------------------------------------- */

/* After the queued work: the word at a is max |x[i]| over n floats, bit
 * for bit (a max of exact values); frees x and a. */
static void expect_amax(tecore_devptr_t a, tecore_devptr_t x, size_t n) {
  TE_OK(tecore_stream_synchronize(te_stream));
  float *xh = tgt_get(x, n), want = 0, got;
  for (size_t i = 0; i < n; i++) want = fmaxf(want, fabsf(xh[i]));
  te_d2h(&got, a, 4);
  te_expect_f32_bits(&got, &want, 1, "amax of x");
  free(xh);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(a));
}

static int kernel_id(const char *name) {
  int id = -1;
  TE_OK(tecore_kernel_find(name, &id));
  return id;
}

static tecore_result_t launch_fill(tecore_devptr_t dst, int dtype, unsigned long long n,
                                   float v) {
  void *p = (void *)(uintptr_t)dst;
  void *args[] = {&p, &dtype, &n, &v};
  struct tecore_launch_cfg cfg = {.grid = {4, 1, 1}, .block = {256, 1, 1}};
  return tecore_kernel_launch(kernel_id("te_fill"), &cfg, args, te_stream);
}

/* A raw launch of te_fill with a float destination 2 bytes off: the C
 * kernel stored misaligned floats (a UBSan abort under the sanitizers, a
 * misaligned-address error on a GPU).  The element size comes from the
 * dtype argument, so an f16 fill at the same address is legal. */
START_TEST(test_kernel_launch_refuses_misaligned_fill_destination) {
  size_t n = 64 + te_rand_below(1024), bytes = n * 4 + 16;
  tecore_devptr_t b = te_dalloc(bytes);
  te_poison_dev(b, bytes);
  struct snap s = snap_take(b, bytes);
  float v = te_rand_float(-8, 8);
  TE_EXPECT_INVALID("not aligned to 4 bytes", launch_fill(b + 2, TECORE_DTYPE_F32, n, v));
  TE_EXPECT_INVALID("not aligned to 2 bytes", launch_fill(b + 1, TECORE_DTYPE_F16, n, v));
  /* a dtype code no dtype has: the widest element is asked for */
  TE_EXPECT_INVALID("not aligned to 8 bytes", launch_fill(b + 4, 99, n, v));
  snap_expect(&s, "the poisoned buffer after the refused launches");
  TE_OK(launch_fill(b + 2, TECORE_DTYPE_F16, n, 1.5f));
  TE_OK(launch_fill(b + 8, TECORE_DTYPE_F32, n, v));
  TE_OK(tecore_stream_synchronize(te_stream));
  float *got = malloc(n * 4), *want = malloc(n * 4);
  te_d2h(got, b + 8, n * 4);
  for (size_t i = 0; i < n; i++) want[i] = v;
  te_expect_f32_bits(got, want, n, "the aligned f32 fill");
  uint16_t h16[2];
  te_d2h(h16, b + 2, 4);
  ck_assert_msg(h16[0] == 0x3e00 && h16[1] == 0x3e00, "f16 fill at +2: 0x%04x 0x%04x, want "
                "0x3e00 (1.5)", h16[0], h16[1]);
  free(got);
  free(want);
  TE_OK(tecore_mem_free(b));
}
END_TEST

/* A typed pointer parameter (te_fp8_amax's unsigned *amax) one byte off:
 * the table knows the pointee type, so the launch is refused. */
START_TEST(test_kernel_launch_refuses_misaligned_amax_pointer) {
  size_t n = 32 + te_rand_below(512);
  tecore_devptr_t x = tgt_rand_dev(n, -4, 4), a = te_dalloc(16);
  te_poison_dev(a, 16);
  struct snap s = snap_take(a, 16);
  void *in = (void *)(uintptr_t)x, *amax = (void *)(uintptr_t)(a + 1), *noop = NULL;
  unsigned long long nn = n;
  int dt = TECORE_DTYPE_F32;
  void *args[] = {&in, &nn, &dt, &amax, &noop};
  struct tecore_launch_cfg cfg = {.grid = {1, 1, 1}, .block = {256, 1, 1}};
  int id = kernel_id("te_fp8_amax");
  TE_EXPECT_INVALID("not aligned to 4 bytes", tecore_kernel_launch(id, &cfg, args, te_stream));
  snap_expect(&s, "the poisoned amax word after the refused launch");
  /* the neighbour: amax zeroed and aligned, max |x| accumulated */
  TE_OK(tecore_memset_d32_async(a, 0, 1, te_stream));
  amax = (void *)(uintptr_t)a;
  TE_OK(tecore_kernel_launch(id, &cfg, args, te_stream));
  expect_amax(a, x, n);
}
END_TEST

/* A graph node's pointer set after capture to an address its kernel
 * cannot use: tecore_graph_exec_kernel_node_set took it, and the next
 * launch stored misaligned floats.  libtegraph's per-parameter set is
 * refused the same way when the new dtype misaligns the old pointer. */
START_TEST(test_graph_node_set_refuses_misaligned_pointer) {
  size_t n = 64 + te_rand_below(512), bytes = n * 4 + 16;
  tecore_devptr_t b = te_dalloc(bytes);
  te_poison_dev(b, bytes);
  tegraph_graph_t *g = NULL;
  TG_OK(tegraph_graph_create(0, &g));
  TG_OK(tegraph_graph_begin_capture(g, te_stream, TECORE_CAPTURE_THREAD_LOCAL, 0));
  TE_OK(tecore_fill(b + 2, TECORE_DTYPE_F16, n, 1.5, te_stream));
  TG_OK(tegraph_graph_end_capture(g, NULL));
  struct snap s = snap_take(b, bytes);
  /* dtype (parameter 1) from f16 to f32 with dst at +2 */
  int f32 = TECORE_DTYPE_F32;
  TG_EXPECT(TEGRAPH_ERR_INVALID, "not aligned to 4 bytes",
            tegraph_graph_set_kernel_arg(g, 0, 1, &f32, sizeof f32));
  /* the whole node through libtecore: f32 at +2 */
  tecore_graph_t graph = NULL;
  tecore_graph_exec_t exec = NULL;
  TG_OK(tegraph_graph_handles(g, &graph, &exec));
  struct tecore_graph_node_desc nd[4];
  size_t cnt = 0;
  TE_OK(tecore_graph_nodes(graph, nd, 4, &cnt));
  ck_assert_uint_eq(cnt, 1);
  void *dst = (void *)(uintptr_t)(b + 2);
  float v = te_rand_float(-8, 8);
  unsigned long long nn = n;
  void *args[] = {&dst, &f32, &nn, &v};
  TE_EXPECT_INVALID("not aligned to 4 bytes",
                    tecore_graph_exec_kernel_node_set(exec, nd[0].node, NULL, args));
  TG_OK(tegraph_graph_launch(g, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  /* only the captured f16 fill ran: 1.5 in n halves at +2 */
  unsigned char *want = malloc(bytes), *got = malloc(bytes);
  memcpy(want, s.h, bytes);
  for (size_t i = 0; i < n; i++) memcpy(want + 2 + 2 * i, &(uint16_t){0x3e00}, 2);
  te_d2h(got, b, bytes);
  te_expect_mem_eq(got, want, bytes, "the buffer after the refused sets and one launch");
  free(s.h);
  /* the neighbour: f32 at an aligned address */
  dst = (void *)(uintptr_t)(b + 8);
  TE_OK(tecore_graph_exec_kernel_node_set(exec, nd[0].node, NULL, args));
  TE_OK(tecore_graph_launch(exec, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float *f = malloc(n * 4), *w = malloc(n * 4);
  te_d2h(f, b + 8, n * 4);
  for (size_t i = 0; i < n; i++) w[i] = v;
  te_expect_f32_bits(f, w, n, "the f32 fill set into the node");
  free(f);
  free(w);
  free(want);
  free(got);
  TG_OK(tegraph_graph_destroy(g));
  TE_OK(tecore_mem_free(b));
}
END_TEST

/* ---- a node of another graph --------------------------------------------------------- */

struct two {
  tecore_graph_t g;
  tecore_graph_exec_t x;
  struct tecore_graph_node_desc nd[3]; /* fill, memset, memcpy */
};

/* One graph: fill dst[0, n) f32 with v, memset m[0, n) to word, copy src to c. */
static void capture_three(struct two *t, tecore_devptr_t dst, size_t n, float v, tecore_devptr_t m,
                          uint32_t word, tecore_devptr_t c, tecore_devptr_t src) {
  TE_OK(tecore_stream_begin_capture(te_stream, TECORE_CAPTURE_THREAD_LOCAL));
  TE_OK(tecore_fill(dst, TECORE_DTYPE_F32, n, v, te_stream));
  TE_OK(tecore_memset_d32_async(m, word, n, te_stream));
  TE_OK(tecore_memcpy_async(c, src, n * 4, te_stream));
  TE_OK(tecore_stream_end_capture(te_stream, &t->g));
  TE_OK(tecore_graph_instantiate(&t->x, t->g));
  size_t cnt = 0;
  TE_OK(tecore_graph_nodes(t->g, t->nd, 3, &cnt));
  ck_assert_uint_eq(cnt, 3);
  ck_assert_int_eq(t->nd[0].type, TECORE_GRAPH_NODE_KERNEL);
  ck_assert_int_eq(t->nd[1].type, TECORE_GRAPH_NODE_MEMSET);
  ck_assert_int_eq(t->nd[2].type, TECORE_GRAPH_NODE_MEMCPY);
}

/* Graph A's node handle passed with graph B (or B's executable): vdev's
 * handles were positions, so A's node 0 edited B's node 0 without a word.
 * Every call that takes a node refuses it now, on both backends, and B
 * runs what it captured. */
START_TEST(test_graph_node_of_another_graph_is_refused) {
  size_t n = 64 + te_rand_below(1024), bytes = n * 4;
  tecore_devptr_t buf[8];
  for (int i = 0; i < 8; i++) {
    buf[i] = te_dalloc(bytes);
    te_poison_dev(buf[i], bytes);
  }
  tecore_devptr_t srcA = tgt_rand_dev(n, -2, 2), srcB = tgt_rand_dev(n, -2, 2);
  float va = te_rand_float(-8, 8), vb = te_rand_float(-8, 8);
  uint32_t wa = te_rand_u32(), wb = te_rand_u32();
  struct two A, B;
  capture_three(&A, buf[0], n, va, buf[1], wa, buf[2], srcA);
  capture_three(&B, buf[3], n, vb, buf[4], wb, buf[5], srcB);
  /* B's arguments read through A's node: refused, args untouched */
  unsigned char store[4][16];
  memset(store, 0x5a, sizeof store);
  void *args[4] = {store[0], store[1], store[2], store[3]};
  TE_EXPECT_INVALID("not a node of graph", tecore_graph_kernel_node_args(B.g, A.nd[0].node, args));
  for (int i = 0; i < 4; i++)
    for (int k = 0; k < 16; k++) ck_assert_uint_eq(store[i][k], 0x5a);
  /* A's nodes set into B's executable: pointing B's fill at buf[6] */
  void *d6 = (void *)(uintptr_t)buf[6];
  int f32 = TECORE_DTYPE_F32;
  unsigned long long nn = n;
  float v6 = te_rand_float(-8, 8);
  void *kargs[] = {&d6, &f32, &nn, &v6};
  TE_EXPECT_INVALID("not a node of the graph",
                    tecore_graph_exec_kernel_node_set(B.x, A.nd[0].node, NULL, kargs));
  TE_EXPECT_INVALID("not a node of the graph",
                    tecore_graph_exec_memset_node_set(B.x, A.nd[1].node, buf[6], 7));
  TE_EXPECT_INVALID("not a node of the graph",
                    tecore_graph_exec_memcpy_node_set(B.x, A.nd[2].node, buf[6], srcB));
  TE_OK(tecore_graph_launch(B.x, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  /* B ran its own captured work; A's buffers and buf[6] keep their poison */
  float *f = malloc(bytes), *w = malloc(bytes);
  te_d2h(f, buf[3], bytes);
  for (size_t i = 0; i < n; i++) w[i] = vb;
  te_expect_f32_bits(f, w, n, "B's fill");
  uint32_t *m = malloc(bytes);
  te_d2h(m, buf[4], bytes);
  for (size_t i = 0; i < n; i++) ck_assert_msg(m[i] == wb, "B's memset[%zu] 0x%08x, want 0x%08x", i, m[i], wb);
  float *sb = tgt_get(srcB, n);
  te_d2h(f, buf[5], bytes);
  te_expect_f32_bits(f, sb, n, "B's copy");
  unsigned char *p = malloc(bytes);
  int untouched[] = {0, 1, 2, 6, 7};
  for (size_t k = 0; k < 5; k++) {
    te_d2h(p, buf[untouched[k]], bytes);
    te_expect_bytes_eq(p, TE_POISON_BYTE, bytes, "a buffer B must not touch");
  }
  /* the neighbour: B's own node takes the same update */
  TE_OK(tecore_graph_exec_kernel_node_set(B.x, B.nd[0].node, NULL, kargs));
  TE_OK(tecore_graph_launch(B.x, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  te_d2h(f, buf[6], bytes);
  for (size_t i = 0; i < n; i++) w[i] = v6;
  te_expect_f32_bits(f, w, n, "B's fill pointed at buf[6]");
  free(f);
  free(w);
  free(m);
  free(sb);
  free(p);
  TE_OK(tecore_graph_exec_destroy(A.x));
  TE_OK(tecore_graph_exec_destroy(B.x));
  TE_OK(tecore_graph_destroy(A.g));
  TE_OK(tecore_graph_destroy(B.g));
  for (int i = 0; i < 8; i++) TE_OK(tecore_mem_free(buf[i]));
  TE_OK(tecore_mem_free(srcA));
  TE_OK(tecore_mem_free(srcB));
}
END_TEST

/* ---- raw pointers: the whole extent ---------------------------------------------------- */

/* Both backends: vdev checks against its registry (TECORE_VDEV_CHECK, on
 * by default); under cuda this suite turns TECORE_CUDA_CHECK on (see the
 * constructor below), and the driver's address ranges answer. */
__attribute__((constructor)) static void cuda_checks_on(void) {
  setenv("TECORE_CUDA_CHECK", "1", 0);
}

/* The driver may round an allocation up, and an address just past it may
 * be the next allocation's: the words a few bytes past a tiny buffer are
 * checked on vdev only, whose registry holds the exact sizes. */
#define VDEV_ONLY()                                                                      \
  do {                                                                                   \
    if (!on_vdev()) {                                                                    \
      printf("# %s: a few bytes past a tiny buffer: vdev's exact sizes only\n", __func__); \
      return;                                                                            \
    }                                                                                    \
  } while (0)

/* How far past used bytes from p the allocation really ends (0 on vdev;
 * under cuda, what the driver rounded up). */
static size_t slack(tecore_devptr_t p, size_t used) {
  size_t left = on_vdev() ? used : bytes_left(p);
  ck_assert_msg(left >= used, "0x%llx: %zu bytes left, %zu used", (unsigned long long)p, left,
                used);
  return left - used;
}

/* An Adam step whose tensors claim more elements than their buffers hold:
 * the pointers travel in a parameter block the launch check cannot see
 * into, and the kernel updated memory past the buffers. */
START_TEST(test_adam_refuses_tensor_past_its_buffer) {
  size_t n = 256 + te_rand_below(1024);
  tecore_devptr_t pb = tgt_rand_dev(n, -1, 1), gb = tgt_rand_dev(n, -1, 1);
  tecore_devptr_t mb = tgt_rand_dev(n, -1, 1), vb = tgt_rand_dev(n, 0, 1);
  struct tecore_optim_tensor t = {.numel = n, .grad_dtype = TECORE_DTYPE_F32, .param = pb,
                                  .grad = gb, .exp_avg = mb, .exp_avg_sq = vb};
  struct tecore_adam_config cfg = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8,
                                   .step = 1};
  struct snap sp = snap_take(pb, n * 4), sm = snap_take(mb, n * 4), sv = snap_take(vb, n * 4);
  const char *field[] = {"tensors[0].param", "tensors[0].grad", "tensors[0].exp_avg",
                         "tensors[0].exp_avg_sq"};
  for (int k = 0; k < 4; k++) {
    struct tecore_optim_tensor bad = t;
    tecore_devptr_t *f[] = {&bad.param, &bad.grad, &bad.exp_avg, &bad.exp_avg_sq};
    *f[k] += 16 + slack(*f[k], n * 4); /* the last 4 floats run past the buffer */
    TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, field[k],
                  tecore_adam_step(&bad, 1, &cfg, 0, 0, te_stream));
  }
  snap_expect(&sp, "param after the refused steps");
  snap_expect(&sm, "exp_avg after the refused steps");
  snap_expect(&sv, "exp_avg_sq after the refused steps");
  TE_OK(tecore_adam_step(&t, 1, &cfg, 0, 0, te_stream)); /* the neighbour */
  TE_OK(tecore_stream_synchronize(te_stream));
  TE_OK(tecore_mem_free(pb));
  TE_OK(tecore_mem_free(gb));
  TE_OK(tecore_mem_free(mb));
  TE_OK(tecore_mem_free(vb));
}
END_TEST

/* A no-op flag in a buffer's last 2 bytes: the launch checked its first
 * byte only, and the kernel read 2 bytes past the allocation. */
START_TEST(test_quantize_refuses_noop_flag_past_its_buffer) {
  VDEV_ONLY();
  size_t n = 128 + te_rand_below(512);
  tecore_devptr_t x = tgt_rand_dev(n, -4, 4), q = te_dalloc(n), sc = te_dalloc(16);
  tecore_devptr_t flag = te_dalloc(6);
  te_poison_dev(q, n);
  te_poison_dev(sc, 16);
  float one = 1.0f;
  te_h2d(sc, &one, 4);
  struct tecore_tensor in = tgt_vec(x, n), out;
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 1, &n, q));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = sc;
  out.scale_inv = sc + 4;
  out.amax = sc + 8;
  struct snap s = snap_take(q, n), ss = snap_take(sc, 16);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "noop_flag",
                tecore_quantize(&in, &out, flag + 4, te_stream));
  snap_expect(&s, "the poisoned output after the refused call");
  snap_expect(&ss, "scale, scale_inv and amax after the refused call");
  TE_OK(tecore_memset_d32_async(flag, 0, 1, te_stream));
  TE_OK(tecore_quantize(&in, &out, flag, te_stream)); /* the neighbour: flag 0 runs */
  TE_OK(tecore_stream_synchronize(te_stream));
  uint8_t *got = malloc(n);
  float *xh = tgt_get(x, n);
  te_d2h(got, q, n);
  for (size_t i = 0; i < n; i++) { /* scale 1: the E4M3 rounding of x, exact */
    float back;
    TE_OK(tecore_cvt_e4m3_to_f32(&got[i], &back, 1));
    uint8_t w8;
    TE_OK(tecore_cvt_f32_to_e4m3(&xh[i], &w8, 1));
    ck_assert_msg(got[i] == w8, "q[%zu] = 0x%02x, want 0x%02x (x %g)", i, got[i], w8, xh[i]);
  }
  free(got);
  free(xh);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(q));
  TE_OK(tecore_mem_free(sc));
  TE_OK(tecore_mem_free(flag));
}
END_TEST

/* A 4096x4096 FP8 output on a 2.5 KiB buffer that also holds its scale,
 * scale_inv and amax: reported as "out->data overlaps out->amax" (issue
 * 32), a symptom; the cause is the shape exceeding the buffer. */
START_TEST(test_quantize_names_shape_past_its_buffer) {
  size_t sh[2] = {4096, 4096}, small[2] = {32, 64};
  tecore_devptr_t x = te_dalloc(sh[0] * sh[1] * 2), buf = te_dalloc(2560);
  te_poison_dev(x, 64);
  te_poison_dev(buf, 2560);
  float one = 1.0f;
  te_h2d(buf + 2048, &one, 4);
  struct tecore_tensor in, out;
  TE_OK(tecore_tensor_init(&in, TECORE_DTYPE_BF16, 2, sh, x));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 2, sh, buf));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = buf + 2048;
  out.scale_inv = buf + 2052;
  out.amax = buf + 2056;
  struct snap s = snap_take(buf, 2560);
  TE_EXPECT_INVALID("out->data: the shape exceeds the buffer",
                    tecore_quantize(&in, &out, 0, te_stream));
  ck_assert_msg(!strstr(tecore_last_error(), "overlaps"), "%s", tecore_last_error());
  ck_assert_msg(strstr(tecore_last_error(), "16777216 bytes"), "%s", tecore_last_error());
  snap_expect(&s, "the buffer after the refused call");
  /* the neighbour: a shape that fits before the scales runs (values: the
   * E4M3 rounding of bf16 inputs at scale 1, exact) */
  size_t n = small[0] * small[1];
  tecore_devptr_t xs = tgt_rand_dev(n, -4, 4), xb = te_dalloc(n * 2);
  struct tecore_tensor inf, inb;
  TE_OK(tecore_tensor_init(&inf, TECORE_DTYPE_F32, 2, small, xs));
  TE_OK(tecore_tensor_init(&inb, TECORE_DTYPE_BF16, 2, small, xb));
  TE_OK(tecore_unscale_multi(&inf, &inb, 1, buf + 2048, 0, te_stream));
  TE_OK(tecore_tensor_init(&out, TECORE_DTYPE_E4M3, 2, small, buf));
  out.scaling = TECORE_SCALING_DELAYED;
  out.scale = buf + 2048;
  out.scale_inv = buf + 2052;
  out.amax = buf + 2056;
  TE_OK(tecore_quantize(&inb, &out, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  uint8_t *got = malloc(n);
  uint16_t *xh = malloc(n * 2);
  te_d2h(got, buf, n);
  te_d2h(xh, xb, n * 2);
  for (size_t i = 0; i < n; i++) {
    float v;
    uint8_t w8;
    TE_OK(tecore_cvt_bf16_to_f32(&xh[i], &v, 1));
    TE_OK(tecore_cvt_f32_to_e4m3(&v, &w8, 1));
    ck_assert_msg(got[i] == w8, "q[%zu] = 0x%02x, want 0x%02x (x %g)", i, got[i], w8, v);
  }
  free(got);
  free(xh);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(xs));
  TE_OK(tecore_mem_free(xb));
  TE_OK(tecore_mem_free(buf));
}
END_TEST

/* tecore_amax's output word in a buffer's last 3 bytes. */
START_TEST(test_amax_refuses_amax_word_past_its_buffer) {
  VDEV_ONLY();
  size_t n = 64 + te_rand_below(1024);
  tecore_devptr_t x = tgt_rand_dev(n, -4, 4), a = te_dalloc(7);
  te_poison_dev(a, 7);
  struct snap s = snap_take(a, 7);
  struct tecore_tensor in = tgt_vec(x, n);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "amax", tecore_amax(&in, a + 4, 0, 0, te_stream));
  snap_expect(&s, "the poisoned amax buffer after the refused call");
  TE_OK(tecore_amax(&in, a, 0, 0, te_stream));
  expect_amax(a, x, n);
}
END_TEST

/* tecore_unscale_multi's scale (in the parameter block) past its buffer. */
START_TEST(test_unscale_refuses_scale_past_its_buffer) {
  VDEV_ONLY();
  size_t n = 64 + te_rand_below(1024);
  tecore_devptr_t x = tgt_rand_dev(n, -4, 4), y = te_dalloc(n * 4), sc = te_dalloc(6);
  te_poison_dev(y, n * 4);
  float k = te_rand_float(0.25f, 4.0f);
  te_h2d(sc, &k, 4);
  struct tecore_tensor in = tgt_vec(x, n), out = tgt_vec(y, n);
  struct snap s = snap_take(y, n * 4);
  TE_EXPECT_ERR(TECORE_ERR_ILLEGAL_ADDRESS, "scale",
                tecore_unscale_multi(&in, &out, 1, sc + 4, 0, te_stream));
  snap_expect(&s, "the poisoned output after the refused call");
  TE_OK(tecore_unscale_multi(&in, &out, 1, sc, 0, te_stream));
  TE_OK(tecore_stream_synchronize(te_stream));
  float *xh = tgt_get(x, n), *got = tgt_get(y, n), *w = malloc(n * 4);
  for (size_t i = 0; i < n; i++) w[i] = xh[i] * k;
  te_expect_f32_near(got, w, n, 0, 1.2e-7, "x * scale (one float rounding)");
  free(xh);
  free(got);
  free(w);
  TE_OK(tecore_mem_free(x));
  TE_OK(tecore_mem_free(y));
  TE_OK(tecore_mem_free(sc));
}
END_TEST

static Suite *bounds_suite(void) {
  Suite *s = suite_create("bounds");
  TCase *tc = te_tcase(s, "mem_range", 1);
  tcase_add_test(tc, test_mem_range_gives_each_allocations_extent);
  tcase_add_test(tc, test_mem_range_gives_vmm_mapping_extent);
  tcase_add_test(tc, test_freed_vmm_range_stays_refused_and_unmappable);
  tcase_add_test(tc, test_mem_range_refuses_unknown_addresses_and_keeps_outputs);
  tc = tgt_tcase(s, "callable");
  tcase_add_test(tc, test_callable_forward_refuses_input_buffer_too_small);
  tcase_add_test(tc, test_callable_forward_refuses_output_buffer_too_small);
  tcase_add_test(tc, test_callable_backward_refuses_grad_buffers_too_small);
  tc = tgt_tcase(s, "align");
  tcase_add_test(tc, test_kernel_launch_refuses_misaligned_fill_destination);
  tcase_add_test(tc, test_kernel_launch_refuses_misaligned_amax_pointer);
  tcase_add_test(tc, test_graph_node_set_refuses_misaligned_pointer);
  tc = tgt_tcase(s, "owner");
  tcase_add_test(tc, test_graph_node_of_another_graph_is_refused);
  tc = te_tcase(s, "extent", 1);
  tcase_add_test(tc, test_adam_refuses_tensor_past_its_buffer);
  tcase_add_test(tc, test_quantize_refuses_noop_flag_past_its_buffer);
  tcase_add_test(tc, test_amax_refuses_amax_word_past_its_buffer);
  tcase_add_test(tc, test_quantize_names_shape_past_its_buffer);
  tcase_add_test(tc, test_unscale_refuses_scale_past_its_buffer);
  return s;
}

TE_TEST_MAIN(bounds_suite, TE_TEST_DEVICE)
