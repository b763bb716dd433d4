/* SPDX-License-Identifier: Apache-2.0 */
/* te-bench -- libte's benchmarks.  Each memory-bound kernel is timed at a
 * large size beside the floor measured in the same run: the minimum bytes
 * it must move over the device-to-device copy bandwidth (cuMemcpyAsync of
 * a large buffer).  Prints time, GB/s, the floor and the percentage of
 * copy bandwidth reached.  Sections: --copy --elementwise --fp8 --gemm --graph --all
 * (--gemm: TFLOP/s beside cuBLASLt called directly, tools/bench_gemm.c;
 * --graph: libtegraph's update, replay and rebinding costs, tools/bench_graph.c).
 * Output: tools/bench_out.c (table, --csv, --json). */
#include "bench.h"
#include "cli.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: te-bench [--all] [--copy] [--elementwise] [--fp8] [--gemm] [--graph] [--model]\n"
    "                [--attention]\n"
    "                [--mb MB] [--iters N] [--csv | --json] [-q] [-h] [--version]\n"
    "  the sections (none named: all of them):\n"
    "  -a, --all          every section\n"
    "  -c, --copy         the copy floor alone (always measured: every figure needs it)\n"
    "  -e, --elementwise  fill and scale_add in f32 and bf16, against that floor\n"
    "  -f, --fp8          the FP8 quantize, cast+transpose, norm and GELU kernels\n"
    "  -g, --gemm         GEMM TFLOP/s beside cuBLASLt called directly\n"
    "  -G, --graph        libtegraph's update, replay and rebinding costs\n"
    "  -M, --model        RoPE, embedding backward and cross-entropy against the copy floor\n"
    "  -A, --attention    BF16 causal attention TFLOP/s (the backend TECORE_ATTN_BACKEND picks)\n"
    "  -m, --mb MB        size of the large buffers in MiB (default 256)\n"
    "  -i, --iters N      timed repetitions per kernel (default 20; 3 warm-ups)\n"
    "  --csv              CSV: a row of column names, then one row per measurement\n"
    "  --json             one JSON object: the machine, and \"rows\": one object per measurement\n"
    "  -q, --quiet        the header and the rows only, no explanations\n"
    "  -h, --help         this help\n"
    "  --version          print \"te-bench (libte) VERSION\"\n"
    "  a row: name, shape, time, unit, rate, unit, peer, peer_time, ratio (peer_time / time),\n"
    "  target, verdict, note; on vdev no targets are judged (its figures are not GPU speed)\n"
    "exit status: 0 ok, 1 a measurement or a library call failed, 2 a wrong command line\n";

int main(int argc, char **argv) {
  struct tb_ctx c = {.mb = 256, .iters = 20};
  int want_copy = 0, want_ew = 0, want_fp8 = 0, want_gemm = 0, want_graph = 0, want_model = 0;
  int want_attn = 0, opt;
  static const struct option longs[] = {
      {"all", no_argument, 0, 'a'},         {"copy", no_argument, 0, 'c'},
      {"elementwise", no_argument, 0, 'e'}, {"fp8", no_argument, 0, 'f'},
      {"mb", required_argument, 0, 'm'},    {"iters", required_argument, 0, 'i'},
      {"gemm", no_argument, 0, 'g'},        {"graph", no_argument, 0, 'G'},
      {"model", no_argument, 0, 'M'},       {"attention", no_argument, 0, 'A'},
      TE_CLI_FORMATS,                       TE_CLI_LONGS,
      {0, 0, 0, 0}};
  struct te_cli cli = {.prog = "te-bench", .usage = usage_text, .shorts = "acefgGMAm:i:qh",
                       .longs = longs, .out = &c.out};
  while ((opt = te_cli_next(&cli, argc, argv)) != -1) {
    switch (opt) {
    case TE_CLI_EXIT: return cli.status;
    case 'a': want_copy = want_ew = want_fp8 = want_gemm = want_graph = want_model = want_attn = 1;
      break;
    case 'c': want_copy = 1; break;
    case 'e': want_ew = 1; break;
    case 'f': want_fp8 = 1; break;
    case 'g': want_gemm = 1; break;
    case 'G': want_graph = 1; break;
    case 'M': want_model = 1; break;
    case 'A': want_attn = 1; break;
    case 'm':
      if (te_cli_int(&cli, "--mb", optarg, 1, 1 << 20, &c.mb)) return cli.status;
      break;
    case 'i':
      if (te_cli_int(&cli, "--iters", optarg, 1, 1000000, &c.iters)) return cli.status;
      break;
    }
  }
  if (te_cli_end(&cli, argc, argv)) return cli.status;
  if (!want_copy && !want_ew && !want_fp8 && !want_gemm && !want_graph && !want_model &&
      !want_attn)
    want_copy = want_ew = want_fp8 = want_gemm = want_graph = want_model = want_attn = 1;
  if (tb_setup(&c)) {
    tb_end(&c);
    return TE_EXIT_FAIL;
  }
  (void)want_copy; /* the copy floor is always measured: every figure needs it */
  if (want_ew) tb_elementwise(&c);
  if (want_fp8) tb_fp8(&c);
  if (want_gemm) tb_gemm(&c);
  if (want_graph) tb_graph(&c);
  if (want_model) tb_model(&c);
  if (want_attn) tb_attention(&c);
  tb_teardown(&c);
  tb_end(&c);
  return c.failed ? TE_EXIT_FAIL : TE_EXIT_OK;
}
