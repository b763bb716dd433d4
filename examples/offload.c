/* SPDX-License-Identifier: Apache-2.0 */
/* offload.c -- activations offloaded to pinned host memory and, past the
 * host budget, to files, then brought back.
 *
 * Four activations of 256 KiB (F32 [256][256]) are saved after their
 * "forward" (tegraph_offload_save), their device memory is then free to
 * reuse (save_done; here it is poisoned to prove it), and before the
 * "backward" they are restored into the same buffers.  The context has a
 * host budget of 768 KiB, of which the four spill staging buffers take
 * 256 KiB (stripes of 64 KiB): the first activations stay in host memory,
 * the rest go to files in the directory given (argument 1, else $TMPDIR or
 * /tmp) through io_uring.  Where io_uring is missing (liburing not
 * loadable, or TEGRAPH_OFFLOAD_NO_URING=1) the context says why, and the
 * activations past the budget are saved with TEGRAPH_SAVE_KEEP (they stay
 * on the device); the program then checks the host part only.
 * Checked: every restored activation equals its original bit for bit;
 * bytes went to host memory, and to files when the context spills.
 *
 * Build and run against an installed libte:
 *   cc -std=c99 offload.c $(pkg-config --cflags --libs te-graph) \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir te-graph)" -o offload
 *   ./offload /scratch   (TE_DEVICE=vdev runs it without a GPU)
 * Exit 0 when every activation came back intact, 1 otherwise. */
#include <te/core.h>
#include <te/graph.h>
#include <te/offload.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { NACT = 4, ROWS = 256, COLS = 256 };
#define BYTES ((size_t)ROWS * COLS * 4)

#define TRY(call)                                                                   \
  do {                                                                              \
    if ((call) != 0) {                                                              \
      fprintf(stderr, "offload: %s: %s\n", #call, tecore_last_error());             \
      exit(1);                                                                      \
    }                                                                               \
  } while (0)

static tecore_devptr_t host(void *p) { return (tecore_devptr_t)(uintptr_t)p; }

int main(int argc, char **argv) {
  const char *dir = argc > 1 ? argv[1] : getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
  static float act[NACT][ROWS * COLS], back[ROWS * COLS];
  srand(5);
  for (int a = 0; a < NACT; a++)
    for (int i = 0; i < ROWS * COLS; i++) act[a][i] = (float)rand() / RAND_MAX - 0.5f;

  TRY(tecore_init());
  tecore_stream_t s;
  TRY(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &s));

  /* the context: 768 KiB of pinned host memory, spill files past it */
  const char *dirs[1] = {dir};
  struct tegraph_offload_config cfg = {.host_budget = 768 << 10, .min_elems = 1,
                                       .dirs = dirs, .ndirs = 1, .files_per_dir = 1,
                                       .stripe_bytes = 64 << 10, .staging_bytes = 64 << 10};
  tegraph_offload_t *ctx;
  TRY(tegraph_offload_create(&cfg, &ctx));
  struct tegraph_offload_stats st;
  TRY(tegraph_offload_get_stats(ctx, &st));
  printf("offload: %s\n", st.why);   /* where spilled tensors go, or why nowhere */

  /* "forward": each activation computed (here: uploaded), then saved */
  struct tecore_tensor t[NACT];
  int id[NACT], kept[NACT];
  size_t shape[2] = {ROWS, COLS}, to_host = 0;
  for (int a = 0; a < NACT; a++) {
    /* without spill files what does not fit the pool stays on the device */
    kept[a] = !st.spill && to_host + BYTES > st.pool_bytes;
    if (!kept[a]) to_host += BYTES;
    tecore_devptr_t d;
    TRY(tecore_mem_alloc(BYTES, &d));
    TRY(tecore_tensor_init(&t[a], TECORE_DTYPE_F32, 2, shape, d));
    TRY(tecore_memcpy_async(d, host(act[a]), BYTES, s));
    TRY(tegraph_offload_save(ctx, &t[a], kept[a] ? TEGRAPH_SAVE_KEEP : 0, s, &id[a]));
  }
  /* the device copies that left may now be overwritten: poison them (NaN) */
  for (int a = 0; a < NACT; a++) {
    TRY(tegraph_offload_save_done(ctx, id[a], s));
    if (!kept[a]) TRY(tecore_memset_d8_async(t[a].data, 0xff, BYTES, s));
  }
  TRY(tecore_stream_synchronize(s));
  TRY(tegraph_offload_get_stats(ctx, &st));

  /* "backward", in reverse order: each activation restored, then read */
  int bad = 0;
  for (int a = NACT - 1; a >= 0; a--) {
    struct tecore_tensor r;
    TRY(tegraph_offload_restore(ctx, id[a], s, &r));
    TRY(tecore_stream_synchronize(s));
    TRY(tecore_memcpy(host(back), r.data, BYTES));
    if (r.data != t[a].data || memcmp(back, act[a], BYTES) != 0) {
      fprintf(stderr, "offload: activation %d came back different\n", a);
      bad = 1;
    }
  }
  printf("offload: %d activations of %zu KiB: %.0f KiB to host memory, %.0f KiB to files\n",
         NACT, BYTES >> 10, st.saves_to_host / 1024.0, st.saves_to_files / 1024.0);
  if (st.saves_to_host == 0) {
    fprintf(stderr, "offload: nothing went to host memory\n");
    bad = 1;
  }
  if (st.spill && st.saves_to_files == 0) {
    fprintf(stderr, "offload: the context spills, but nothing went to files\n");
    bad = 1;
  }
  TRY(tegraph_offload_reset(ctx));
  TRY(tegraph_offload_destroy(ctx));
  for (int a = 0; a < NACT; a++) TRY(tecore_mem_free(t[a].data));
  TRY(tecore_stream_destroy(s));
  return bad;
}
