/* te-bench -- libte's benchmarks.  Each memory-bound kernel is timed at a
 * large size beside the floor measured in the same run: the minimum bytes
 * it must move over the device-to-device copy bandwidth (cuMemcpyAsync of
 * a large buffer).  Prints time, GB/s, the floor and the percentage of
 * copy bandwidth reached.  Sections: --copy --elementwise --fp8 --gemm --graph --all
 * (--gemm: TFLOP/s beside cuBLASLt called directly, tools/bench_gemm.c;
 * --graph: libtegraph's update, replay and rebinding costs, tools/bench_graph.c). */
#include "bench.h"
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void usage(FILE *fp) {
  fprintf(fp,
          "usage: te-bench [--all] [--copy] [--elementwise] [--fp8] [--gemm] [--graph] [--mb MB] [--iters N]\n"
          "  --mb MB      size of the large buffers in MiB (default 256)\n"
          "  --iters N    timed repetitions per kernel (default 20; 3 warm-ups)\n"
          "  every line: kernel, shape, time, GB/s, floor time, %% of copy bandwidth\n");
}

int main(int argc, char **argv) {
  struct tb_ctx c = {.mb = 256, .iters = 20};
  int want_copy = 0, want_ew = 0, want_fp8 = 0, want_gemm = 0, want_graph = 0, opt;
  static const struct option longs[] = {
      {"all", no_argument, 0, 'a'},   {"copy", no_argument, 0, 'c'},
      {"elementwise", no_argument, 0, 'e'}, {"fp8", no_argument, 0, 'f'},
      {"mb", required_argument, 0, 'm'},    {"iters", required_argument, 0, 'i'},
      {"gemm", no_argument, 0, 'g'}, {"graph", no_argument, 0, 'G'}, {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  while ((opt = getopt_long(argc, argv, "acefgGm:i:h", longs, NULL)) != -1) {
    switch (opt) {
    case 'a': want_copy = want_ew = want_fp8 = want_gemm = want_graph = 1; break;
    case 'c': want_copy = 1; break;
    case 'e': want_ew = 1; break;
    case 'f': want_fp8 = 1; break;
    case 'g': want_gemm = 1; break;
    case 'G': want_graph = 1; break;
    case 'm': c.mb = atoi(optarg); break;
    case 'i': c.iters = atoi(optarg); break;
    case 'h': usage(stdout); return 0;
    default: usage(stderr); return 1;
    }
  }
  if (!want_copy && !want_ew && !want_fp8 && !want_gemm && !want_graph)
    want_copy = want_ew = want_fp8 = want_gemm = want_graph = 1;
  if (c.mb <= 0 || c.iters <= 0) {
    fprintf(stderr, "te-bench: --mb and --iters must be positive\n");
    return 1;
  }
  if (tb_setup(&c)) return 1;
  (void)want_copy; /* the copy floor is always measured: every figure needs it */
  if (want_ew) tb_elementwise(&c);
  if (want_fp8) tb_fp8(&c);
  if (want_gemm) tb_gemm(&c);
  if (want_graph) tb_graph(&c);
  tb_teardown(&c);
  return c.failed ? 1 : 0;
}
