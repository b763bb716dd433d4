/* SPDX-License-Identifier: Apache-2.0 */
/* comm_mpi.c -- one rank of the MPI bootstrap test (t/comm/comm-mpi.sh builds it
 * with each MPI's own mpicc and starts it under that MPI's mpirun): a bare
 * TECOMM_BOOTSTRAP_MPI refused (libtecomm links no MPI), then a
 * communicator through te/comm_mpi.h with rank and size from MPI_COMM_WORLD, symmetric memory written by every rank and
 * read by every peer, an allreduce checked against its exact result when
 * an algorithm can run it, a split by parity.  Exit 0 when all held. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <te/comm_mpi.h>

static int rank = -1;

#define CHECK(cond, ...)                                                       \
  do {                                                                         \
    if (!(cond)) {                                                             \
      fprintf(stderr, "comm_mpi: rank %d: ", rank);                            \
      fprintf(stderr, __VA_ARGS__);                                            \
      fprintf(stderr, " (%s)\n", tecomm_last_error());                         \
      MPI_Abort(MPI_COMM_WORLD, 1);                                            \
    }                                                                          \
  } while (0)

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int n = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  MPI_Comm world = MPI_COMM_WORLD;
  /* the MPI kind without te/comm_mpi.h's callbacks: refused, saying how */
  struct tecomm_bootstrap bare = {.kind = TECOMM_BOOTSTRAP_MPI, .mpi_comm = &world};
  tecomm_comm_t c = NULL;
  CHECK(tecomm_comm_init(rank, n, -1, &bare, &c) == TECOMM_ERR_NOT_SUPPORTED && !c &&
            strstr(tecomm_last_error(), "te/comm_mpi.h"),
        "a bare TECOMM_BOOTSTRAP_MPI: %s", tecomm_last_error());
  CHECK(tecomm_comm_init_mpi(&world, -1, &c) == TECOMM_SUCCESS, "tecomm_comm_init_mpi: %s",
        tecomm_last_error());
  int r = -1, nr = -1;
  CHECK(tecomm_comm_rank(c, &r, &nr, NULL) == TECOMM_SUCCESS && r == rank && nr == n,
        "rank %d of %d, MPI says %d of %d", r, nr, rank, n);

  enum { COUNT = 1000 };
  tecore_devptr_t p = 0;
  CHECK(tecomm_mem_alloc(c, COUNT * sizeof(float), &p) == TECOMM_SUCCESS, "tecomm_mem_alloc");
  float mine[COUNT], got[COUNT];
  for (int i = 0; i < COUNT; i++) mine[i] = (float)(rank * 1000 + i);
  CHECK(tecore_memcpy(p, (tecore_devptr_t)(uintptr_t)mine, sizeof mine) == TECORE_SUCCESS, "copy");
  MPI_Barrier(MPI_COMM_WORLD);
  for (int peer = 0; peer < n; peer++) {
    tecore_devptr_t pp = 0;
    CHECK(tecomm_mem_peer_ptr(c, p, peer, &pp) == TECOMM_SUCCESS, "peer_ptr");
    CHECK(tecore_memcpy((tecore_devptr_t)(uintptr_t)got, pp, sizeof got) == TECORE_SUCCESS, "copy");
    for (int i = 0; i < COUNT; i++)
      CHECK(got[i] == (float)(peer * 1000 + i), "rank %d's element %d seen as %g", peer, i,
            (double)got[i]);
  }
  MPI_Barrier(MPI_COMM_WORLD);

  tecomm_algo_t algo;
  if (tecomm_comm_choose(c, COUNT, TECORE_DTYPE_F32, 0, &algo) == TECOMM_SUCCESS) {
    CHECK(tecomm_allreduce(c, p, p, COUNT, TECORE_DTYPE_F32, TECOMM_SUM, NULL) == TECOMM_SUCCESS,
          "tecomm_allreduce");
    CHECK(tecore_ctx_synchronize() == TECORE_SUCCESS, "synchronize");
    CHECK(tecore_memcpy((tecore_devptr_t)(uintptr_t)got, p, sizeof got) == TECORE_SUCCESS, "copy");
    for (int i = 0; i < COUNT; i++) {
      float want = 0;
      for (int q = 0; q < n; q++) want += (float)(q * 1000 + i);
      CHECK(got[i] == want, "allreduce (%s) element %d: %g, want %g", tecomm_algo_name(algo), i,
            (double)got[i], (double)want);
    }
  }
  tecomm_comm_t g = NULL;
  CHECK(tecomm_comm_split(c, rank % 2, rank, &g) == TECOMM_SUCCESS && g, "split");
  int gr, gn;
  CHECK(tecomm_comm_rank(g, &gr, &gn, NULL) == TECOMM_SUCCESS && gr == rank / 2 &&
            gn == (n - rank % 2 + 1) / 2,
        "split: %d of %d", gr, gn);
  CHECK(tecomm_comm_destroy(g) == TECOMM_SUCCESS, "destroy group");
  CHECK(tecomm_mem_free(c, p) == TECOMM_SUCCESS, "tecomm_mem_free");
  CHECK(tecomm_comm_destroy(c) == TECOMM_SUCCESS, "tecomm_comm_destroy");
  MPI_Finalize();
  if (rank == 0) printf("comm_mpi: %d ranks passed\n", n);
  return 0;
}
