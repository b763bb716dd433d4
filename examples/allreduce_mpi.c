/* SPDX-License-Identifier: Apache-2.0 */
/* allreduce_mpi.c -- libtecomm under the program's own MPI: every rank
 * makes a communicator with tecomm_comm_init_mpi (te/comm_mpi.h, compiled
 * by this MPI's mpicc; libtecomm itself links no MPI), then sums a buffer
 * of symmetric memory across the ranks with tecomm_allreduce.
 *
 * Rank r's element i is a multiple of 1/4 below 8, so the F32 sum is
 * exact: every rank checks every element against the host's sum, bit for
 * bit, after poisoning its output.  On the virtual device each rank takes
 * a virtual GPU of its own (TECORE_VDEV_DEVICES is set to the size when
 * the environment has none); on GPUs each rank takes the device of its
 * local rank.
 *
 * Build and run against an installed libte, with MPICH or Open MPI:
 *   mpicc allreduce_mpi.c $(pkg-config --cflags --libs te-comm) \
 *     -Wl,-rpath,"$(pkg-config --variable=libdir te-comm)" -o allreduce_mpi
 *   mpirun -n 2 ./allreduce_mpi      (TE_DEVICE=vdev runs it without a GPU)
 * Exit 0 when every rank's sums are right, 1 otherwise (MPI_Abort). */
#define _POSIX_C_SOURCE 200809L
#include <mpi.h>
#include <te/comm_mpi.h>
#include <te/core.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { COUNT = 4096 };

static int rank = -1;

#define TRY(call)                                                                   \
  do {                                                                              \
    if ((call) != 0) {                                                              \
      fprintf(stderr, "allreduce_mpi: rank %d: %s: %s\n", rank, #call,              \
              tecore_last_error());                                                 \
      MPI_Abort(MPI_COMM_WORLD, 1);                                                 \
    }                                                                               \
  } while (0)

static float input(int r, int i) { return (float)((i * 5 + r * 3) % 29 - 14) / 4.0f; }

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  char n[16];
  snprintf(n, sizeof n, "%d", size);
  setenv("TECORE_VDEV_DEVICES", n, 0); /* vdev: a device a rank (ignored on GPUs) */

  /* the MPI_Comm must outlive the communicator */
  MPI_Comm world = MPI_COMM_WORLD;
  tecomm_comm_t comm;
  TRY(tecomm_comm_init_mpi(&world, -1, &comm));

  float *h = malloc(COUNT * sizeof *h), *got = malloc(COUNT * sizeof *got);
  if (!h || !got) MPI_Abort(MPI_COMM_WORLD, 1);
  for (int i = 0; i < COUNT; i++) h[i] = input(rank, i);
  tecore_devptr_t x, y;
  TRY(tecomm_mem_alloc(comm, COUNT * sizeof(float), &x));
  TRY(tecomm_mem_alloc(comm, COUNT * sizeof(float), &y));
  TRY(tecore_memcpy(x, (tecore_devptr_t)(uintptr_t)h, COUNT * sizeof(float)));
  TRY(tecore_memset_d8_async(y, 0xff, COUNT * sizeof(float), NULL)); /* NaN: a miss shows */
  TRY(tecomm_allreduce(comm, x, y, COUNT, TECORE_DTYPE_F32, TECOMM_SUM, NULL));
  TRY(tecore_ctx_synchronize());
  TRY(tecore_memcpy((tecore_devptr_t)(uintptr_t)got, y, COUNT * sizeof(float)));

  int wrong = 0;
  for (int i = 0; i < COUNT; i++) {
    float want = 0;
    for (int r = 0; r < size; r++) want += input(r, i);
    if (memcmp(&got[i], &want, sizeof want) && wrong++ < 5)
      fprintf(stderr, "allreduce_mpi: rank %d: element %d is %g, want %g\n", rank, i,
              (double)got[i], (double)want);
  }
  int any = 0;
  MPI_Allreduce(&wrong, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  TRY(tecomm_mem_free(comm, x));
  TRY(tecomm_mem_free(comm, y));
  TRY(tecomm_comm_destroy(comm));
  free(h);
  free(got);
  if (rank == 0)
    printf("allreduce_mpi: %d ranks, %d elements: %s\n", size, COUNT,
           any ? "WRONG" : "every sum exact");
  MPI_Finalize();
  return any ? 1 : 0;
}
