// SPDX-License-Identifier: Apache-2.0
// transpose_gpu.cu -- the cast-transpose kernels (kernels/transpose.cu) on a
// GPU against their vdev implementation (libtecore/transpose/transpose_vdev.c,
// itself checked against float64 by t/core/check_transpose.c), and their speed
// against the device-to-device copy measured in the same run.
// A standalone program (CUDA runtime, no libte build needed), from the
// source root, with BUILD a configured build folder (for config.h and
// te/version.h):
//   gcc -O2 -std=gnu11 -c -Ilibtecore -Icommon -I$BUILD -I$BUILD/libtecore -Ikernels \
//       libtecore/transpose/transpose_vdev.c -o ct_vdev.o
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -Ikernels \
//       -Ilibtecore -Icommon -I$BUILD/libtecore -o ctg t/gpu/transpose_gpu.cu ct_vdev.o
//   ./ctg [seed [speed]]      (speed: part 2 only)
// Part 1 runs many shapes, dtypes, modes and activations on both and
// requires identical bytes in every output (FP8 data, E8M0 and float
// scales, amax, dbias partials and dbias); guard bytes around each output
// must stay poisoned (a NaN in amax or dbias matches any NaN: payloads
// differ).  Part 2 prints, for 8192x8192 inputs, time, GB/s (minimum
// bytes: inputs read once, outputs written once), the floor (those bytes
// over the copy bandwidth) and the percentage of copy bandwidth.
// Exit 0 when every comparison matched.  Results: bench/2026-11-21.md, cast-transpose.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cmath>
#include <vector>
#include <algorithm>
#include <cuda_runtime.h>
#include <te/kernel.h>
#include "transpose.cu"

extern "C" void te_ct_vdev(const struct tecore_launch_cfg *cfg, void *const *args);
extern "C" void te_ct_vdev_dbias_reduce(const struct tecore_launch_cfg *cfg, void *const *args);

#define CK(call)                                                                       \
  do {                                                                                 \
    cudaError_t e_ = (call);                                                           \
    if (e_ != cudaSuccess) {                                                           \
      printf("CUDA error %s at %s:%d: %s\n", cudaGetErrorString(e_), __FILE__, __LINE__, \
             #call);                                                                   \
      exit(2);                                                                         \
    }                                                                                  \
  } while (0)

typedef void (*ct_fn)(CT_PARAMS);
#define F3(mode, act, s) te_ct_##mode##_##act##_f32##s, te_ct_##mode##_##act##_f16##s, \
                        te_ct_##mode##_##act##_bf16##s
#define F15(mode, s) F3(mode, none, s), F3(mode, gelu, s), F3(mode, relu, s), F3(mode, silu, s), \
                     F3(mode, qgelu, s)
static const ct_fn kfns[60] = {F15(pt, ), F15(mx, ), F15(pt, _db), F15(mx, _db)};
// The table index of libtecore/transpose/transpose.c.
static int kidx(int db, int mx, int act, int dt) { return db * 30 + mx * 15 + (act + 1) * 3 + dt; }

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd() {
  rng ^= rng << 13;
  rng ^= rng >> 7;
  rng ^= rng << 17;
  return rng;
}

// A random element of dtype dt (0 f32, 1 f16, 2 bf16); specials now and then.
static void rand_elem(int dt, unsigned char *p, bool specials) {
  int e = (int)(rnd() % 13) - 8;
  float f = (1.0f + (float)(rnd() % 1000000) / 1e6f) * ldexpf(1.0f, e) * ((rnd() & 1) ? -1.f : 1.f);
  if (specials && rnd() % 97 == 0) {
    static const float sp[] = {INFINITY, -INFINITY, 3e38f, -0.0f, 1e-40f, 0.0f, 60000.f,
                               NAN, -NAN};
    f = sp[rnd() % 9];
  }
  if (dt == 0) {
    memcpy(p, &f, 4);
  } else if (dt == 2) {
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t h = (uint16_t)(u >> 16);
    memcpy(p, &h, 2);
  } else {
    uint16_t h = te_f32_to_f16(f);
    memcpy(p, &h, 2);
  }
}

struct bufpair {
  void *d = nullptr, *dbase = nullptr;
  unsigned char *h = nullptr, *hbase = nullptr;
  size_t bytes = 0, off = 0;
};
#define GUARD 64
static bufpair mk(size_t bytes, size_t off) {
  bufpair b;
  b.bytes = bytes;
  b.off = off;
  size_t tot = bytes + off + 2 * GUARD;
  CK(cudaMalloc(&b.dbase, tot));
  CK(cudaMemset(b.dbase, 0xA5, tot));
  b.hbase = (unsigned char *)malloc(tot);
  memset(b.hbase, 0xA5, tot);
  b.d = (char *)b.dbase + GUARD + off;
  b.h = b.hbase + GUARD + off;
  return b;
}
static void put(bufpair &b, const void *src) {
  memcpy(b.h, src, b.bytes);
  CK(cudaMemcpy(b.d, src, b.bytes, cudaMemcpyHostToDevice));
}
static void fr(bufpair &b) {
  if (b.dbase) CK(cudaFree(b.dbase));
  free(b.hbase);
  b = bufpair();
}
static int failures = 0;
// elem: 1 for bytes; 4 for floats, 2 for bf16, 3 for f16: any NaN matches
// any NaN (the payload and sign of inf - inf are the platform's).
static int is_nan(const unsigned char *p, int elem) {
  if (elem == 4) {
    uint32_t u;
    memcpy(&u, p, 4);
    return (u & 0x7fffffffu) > 0x7f800000u;
  }
  uint16_t h;
  memcpy(&h, p, 2);
  return elem == 2 ? (h & 0x7fffu) > 0x7f80u : (h & 0x7fffu) > 0x7c00u;
}
static void cmp(bufpair &b, const char *what, const char *name, int elem = 1) {
  if (!b.dbase) return;
  size_t tot = b.bytes + b.off + 2 * GUARD;
  std::vector<unsigned char> g(tot);
  CK(cudaMemcpy(g.data(), b.dbase, tot, cudaMemcpyDeviceToHost));
  if (memcmp(g.data(), b.hbase, tot) == 0) return;
  if (elem > 1) {   // patch NaN pairs, then compare again
    size_t es = elem == 4 ? 4 : 2, base = GUARD + b.off;
    for (size_t i = base; i + es <= base + b.bytes; i += es)
      if (is_nan(&g[i], elem) && is_nan(&b.hbase[i], elem)) memcpy(&g[i], &b.hbase[i], es);
    if (memcmp(g.data(), b.hbase, tot) == 0) return;
  }
  size_t first = 0, n = 0;
  for (size_t i = 0; i < tot; i++)
    if (g[i] != b.hbase[i]) {
      if (!n) first = i;
      n++;
    }
  long pos = (long)first - GUARD - (long)b.off;
  printf("MISMATCH %s: %s: %zu bytes differ, first at byte %ld: gpu 0x%02x vdev 0x%02x\n", name,
         what, n, pos, g[first], b.hbase[first]);
  failures++;
}

struct ccase {
  size_t rows, cols;
  int in_dt, out_dt, mx, act, dbias_dt, row, col, misalign, amax_only, specials;
};

static void run_case(const ccase &c) {
  char name[200];
  snprintf(name, sizeof name, "%zux%zu in%d out%d mx%d act%d dbias%d row%d col%d mis%d ao%d sp%d",
           c.rows, c.cols, c.in_dt, c.out_dt, c.mx, c.act, c.dbias_dt, c.row, c.col, c.misalign,
           c.amax_only, c.specials);
  const size_t n = c.rows * c.cols, isz = c.in_dt == 0 ? 4 : 2;
  std::vector<unsigned char> hin(n * isz), hx(n * isz);
  for (size_t i = 0; i < n; i++) {
    rand_elem(c.in_dt, &hin[i * isz], c.specials);
    rand_elem(c.in_dt, &hx[i * isz], false);
  }
  const size_t oin = c.misalign ? isz : 0, oo = c.misalign ? 1 : 0;
  bufpair in = mk(n * isz, oin), x, orow, ocol, sinv, csinv, scale, amax, ws;
  put(in, hin.data());
  if (c.act >= 0) {
    x = mk(n * isz, oin);
    put(x, hx.data());
  }
  if (c.row) orow = mk(n, oo);
  if (c.col) ocol = mk(n, oo);
  if (c.mx) {
    if (c.row) sinv = mk(c.rows * ((c.cols + 31) / 32), 0);
    if (c.col) csinv = mk(((c.rows + 31) / 32) * c.cols, 0);
  } else {
    sinv = mk(4, 0);
    csinv = mk(4, 0);
    scale = mk(4, 0);
    float s = ldexpf(1.0f, (int)(rnd() % 9)) * 1.37f;
    put(scale, &s);
  }
  amax = mk(4, 0);
  float a0 = 0.5f;
  put(amax, &a0);
  te_ct_shape sh = te_ct_shape_of(c.rows, c.cols);
  if (c.dbias_dt >= 0) ws = mk((size_t)sh.grid_y * c.cols * 4, 0);

  unsigned flags = TE_CT_F_IN(c.in_dt) | TE_CT_F_OUT(c.out_dt) | TE_CT_F_ACT(c.act);
  if (c.mx) flags |= TE_CT_F_MX;
  if (c.amax_only) flags |= TE_CT_F_AMAX_ONLY;
  if (!c.misalign && (c.cols * isz) % 16 == 0) flags |= TE_CT_F_VEC_IN;
  if (!c.misalign && c.cols % 16 == 0) flags |= TE_CT_F_VEC_ROW;
  if (!c.misalign && (c.mx ? c.cols : c.rows) % 16 == 0) flags |= TE_CT_F_VEC_COL;
  unsigned long long rows = c.rows, cols = c.cols;
  unsigned tpb = sh.tpb;
  for (int side = 0; side < 2; side++) {   // 0 gpu, 1 vdev
    auto P = [&](bufpair &b) -> void * { return side ? (b.hbase ? (void *)b.h : nullptr) : b.d; };
    void *p[9] = {P(in), P(x), P(orow), P(ocol), P(scale), P(amax), P(sinv), P(csinv), P(ws)};
    void *args[13] = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7], &p[8],
                      &rows, &cols, &tpb, &flags};
    struct tecore_launch_cfg cfg = {{sh.grid_x, sh.grid_y, 1}, {te_ct_threads(flags), 1, 1}, 0};
    if (side == 0) {
      CK(cudaLaunchKernel((const void *)kfns[kidx(c.dbias_dt >= 0, c.mx, c.act, c.in_dt)],
                          dim3(sh.grid_x, sh.grid_y), dim3(te_ct_threads(flags)), args, 0, 0));
      CK(cudaGetLastError());
      CK(cudaDeviceSynchronize());
    } else {
      te_ct_vdev(&cfg, args);
    }
  }
  cmp(orow, "data", name);
  cmp(ocol, "columnwise_data", name);
  cmp(sinv, "scale_inv", name);
  cmp(csinv, "columnwise_scale_inv", name);
  cmp(amax, "amax", name, 4);
  cmp(ws, "dbias partials", name, 4);
  if (c.dbias_dt >= 0 && !c.amax_only) {
    size_t dsz = c.dbias_dt == 0 ? 4 : 2;
    bufpair db = mk(c.cols * dsz, 0);
    unsigned parts = sh.grid_y;
    int dt = c.dbias_dt;
    for (int side = 0; side < 2; side++) {
      void *pw = side ? (void *)ws.h : ws.d, *pd = side ? (void *)db.h : db.d;
      void *args[5] = {&pw, &pd, &parts, &cols, &dt};
      struct tecore_launch_cfg cfg = {{1, 1, 1}, {256, 1, 1}, 0};
      if (side == 0) {
        unsigned blocks = (unsigned)((c.cols + TE_CT_RED_COLS - 1) / TE_CT_RED_COLS);
        CK(cudaLaunchKernel((const void *)te_ct_dbias_reduce, dim3(blocks),
                            dim3(TE_CT_RED_COLS * TE_CT_RED_CHUNKS), args, 0, 0));
        CK(cudaDeviceSynchronize());
      } else {
        te_ct_vdev_dbias_reduce(&cfg, args);
      }
    }
    cmp(db, "dbias", name, c.dbias_dt == 0 ? 4 : c.dbias_dt == 2 ? 2 : 3);
    fr(db);
  }
  bufpair *all[] = {&in, &x, &orow, &ocol, &sinv, &csinv, &scale, &amax, &ws};
  for (auto *b : all) fr(*b);
}

// ---- speed -------------------------------------------------------------------
static float time_ms(cudaEvent_t a, cudaEvent_t b) {
  float ms;
  CK(cudaEventElapsedTime(&ms, a, b));
  return ms;
}

template <typename L>
static double median_us(L launch, int reps) {
  cudaEvent_t a, b;
  CK(cudaEventCreate(&a));
  CK(cudaEventCreate(&b));
  for (int i = 0; i < 3; i++) launch();
  std::vector<double> t;
  for (int i = 0; i < reps; i++) {
    CK(cudaEventRecord(a));
    launch();
    CK(cudaEventRecord(b));
    CK(cudaEventSynchronize(b));
    t.push_back(time_ms(a, b) * 1000.0);
  }
  CK(cudaGetLastError());
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

static void speed() {
  const size_t R = 8192, C = 8192, n = R * C;
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, 0));
  int drv = 0, rt = 0;
  cudaDriverGetVersion(&drv);
  cudaRuntimeGetVersion(&rt);
  printf("\n# %s, %d SMs, driver %d, runtime %d\n", prop.name, prop.multiProcessorCount, drv, rt);
  void *cpy_a, *cpy_b;
  const size_t cpy_bytes = 256u << 20;
  CK(cudaMalloc(&cpy_a, cpy_bytes));
  CK(cudaMalloc(&cpy_b, cpy_bytes));
  CK(cudaMemset(cpy_a, 1, cpy_bytes));
  double cpy_us = median_us(
      [&] { CK(cudaMemcpyAsync(cpy_b, cpy_a, cpy_bytes, cudaMemcpyDeviceToDevice)); }, 20);
  double cpy_gbs = 2.0 * cpy_bytes / cpy_us / 1e3;
  printf("copy D2D 256 MiB: %.1f us, %.0f GB/s (read + write)\n", cpy_us, cpy_gbs);

  void *in, *x, *orow, *ocol, *sinv, *csinv, *scale, *amax, *ws, *db;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&orow, n));
  CK(cudaMalloc(&ocol, n));
  CK(cudaMalloc(&sinv, n / 16));
  CK(cudaMalloc(&csinv, n / 16));
  CK(cudaMalloc(&scale, 16));
  CK(cudaMalloc(&amax, 16));
  CK(cudaMalloc(&db, C * 4));
  te_ct_shape sh = te_ct_shape_of(R, C);
  CK(cudaMalloc(&ws, (size_t)sh.grid_y * C * 4));
  {
    std::vector<unsigned char> h(n * 4);
    for (size_t i = 0; i < n; i++) rand_elem(0, &h[i * 4], false);
    CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
    for (size_t i = 0; i < n; i++) rand_elem(0, &h[i * 4], false);
    CK(cudaMemcpy(x, h.data(), n * 4, cudaMemcpyHostToDevice));
    float s = 1.5f;
    CK(cudaMemcpy(scale, &s, 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(amax, 0, 4));
  }
  struct spd {
    const char *what;
    int in_dt, mx, act, dbias;
    double bytes_per_el;
  } cases[] = {
      {"cast+transpose bf16->e4m3 (4 B/el)", 2, 0, -1, 0, 4},
      {"cast+transpose f32->e4m3 (6 B/el)", 0, 0, -1, 0, 6},
      {"cast+transpose+dbias bf16->e4m3", 2, 0, -1, 1, 4},
      {"dgelu+dbias+cast+transpose bf16 (6 B/el)", 2, 0, TE_ACT_GELU, 1, 6},
      {"dsilu+dbias+cast+transpose bf16", 2, 0, TE_ACT_SILU, 1, 6},
      {"drelu+dbias+cast+transpose bf16", 2, 0, TE_ACT_RELU, 1, 6},
      {"mxfp8 row+col bf16->e4m3 (4.0625 B/el)", 2, 1, -1, 0, 4.0625},
      {"mxfp8 dgelu+dbias bf16->e4m3", 2, 1, TE_ACT_GELU, 1, 6.0625},
  };
  printf("%-44s %9s %8s %9s %7s\n", "kernel, 8192x8192", "us", "GB/s", "floor us", "% copy");
  for (auto &s : cases) {
    unsigned flags = TE_CT_F_IN(s.in_dt) | TE_CT_F_OUT(TE_FP8_DT_E4M3) | TE_CT_F_ACT(s.act) |
                     TE_CT_F_VEC_IN | TE_CT_F_VEC_ROW | TE_CT_F_VEC_COL | (s.mx ? TE_CT_F_MX : 0);
    unsigned long long rows = R, cols = C;
    unsigned tpb = sh.tpb, parts = sh.grid_y;
    int dbdt = s.in_dt;
    void *p[9] = {in, s.act >= 0 ? x : nullptr, orow, ocol, s.mx ? nullptr : scale,
                  s.mx ? nullptr : amax, sinv, csinv, s.dbias ? ws : nullptr};
    void *args[13] = {&p[0], &p[1], &p[2], &p[3], &p[4], &p[5], &p[6], &p[7], &p[8],
                      &rows, &cols, &tpb, &flags};
    void *rargs[5] = {&p[8], &db, &parts, &cols, &dbdt};
    const void *fn = (const void *)kfns[kidx(s.dbias, s.mx, s.act, s.in_dt)];
    double us = median_us(
        [&] {
          CK(cudaLaunchKernel(fn, dim3(sh.grid_x, sh.grid_y), dim3(te_ct_threads(flags)), args, 0,
                              0));
          if (s.dbias)
            CK(cudaLaunchKernel((const void *)te_ct_dbias_reduce, dim3(C / TE_CT_RED_COLS),
                                dim3(TE_CT_RED_COLS * TE_CT_RED_CHUNKS), rargs, 0, 0));
        },
        20);
    double bytes = s.bytes_per_el * (double)n;
    double floor_us = bytes / (cpy_gbs * 1e3);
    printf("%-44s %9.1f %8.0f %9.1f %6.1f%%\n", s.what, us, bytes / us / 1e3, floor_us,
           100.0 * floor_us / us);
  }
  void *bufs[] = {cpy_a, cpy_b, in, x, orow, ocol, sinv, csinv, scale, amax, ws, db};
  for (void *b : bufs) CK(cudaFree(b));
}

int main(int argc, char **argv) {
  if (argc > 1) rng = strtoull(argv[1], nullptr, 0) | 1;
  printf("# seed %llu\n", (unsigned long long)rng);
  static const size_t shapes[][2] = {{1, 1},    {1, 100},    {100, 1},   {7, 33},
                                     {64, 64},  {129, 257},  {96, 48},   {3, 100000},
                                     {256, 512}, {65, 16},   {200000, 16}, {1000, 4096},
                                     {4096, 72}, {33, 8200}};
  int ncase = 0;
  if (argc > 2 && strcmp(argv[2], "speed") == 0) {
    speed();
    return 0;
  }
  for (auto &sh : shapes)
    for (int dt = 0; dt < 3; dt++)
      for (int mx = 0; mx < 2; mx++)
        for (int act = -1; act < 4; act++) {
          ccase c = {sh[0], sh[1], dt, (int)(rnd() % 2) + 3, mx, act,
                     (int)(rnd() % 4) - 1, 1, 1, (int)(rnd() % 4 == 0), 0,
                     act < 0 && rnd() % 3 == 0};
          int pick = (int)(rnd() % 6);
          if (pick == 0) c.row = 0;
          if (pick == 1) c.col = 0;
          if (!mx && act < 0 && rnd() % 5 == 0) c.amax_only = 1;
          run_case(c);
          ncase++;
        }
  // more than TE_CT_TARGET_BLOCKS tiles: blocks of two row tiles (tpb 2),
  // the double-buffered shared tile and the dbias accumulators across tiles
  static const ccase big[] = {
      {8256, 8200, 2, 3, 0, TE_ACT_GELU, 2, 1, 1, 0, 0, 0},
      {8256, 8200, 1, 4, 0, TE_ACT_SILU, 0, 1, 1, 0, 0, 0},
      {8256, 8200, 2, 3, 0, -1, 2, 1, 1, 0, 0, 0},
  };
  for (auto &c : big) {
    run_case(c);
    ncase++;
  }
  printf("# part 1: %d cases, %d mismatches\n", ncase, failures);
  speed();
  return failures ? 1 : 0;
}
