/* te-demo -- libte's main job.  This release runs the device layer end to
 * end: fill and scale-and-add kernels on two streams joined by an event,
 * the same work captured into a CUDA graph and replayed, results checked
 * on the host, and the time per step printed eagerly and graphed.
 * Runs on the GPU when one is visible, else on the virtual device. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <te/core.h>

#define CHECK(call)                                                                   \
  do {                                                                                \
    tecore_result_t r_ = (call);                                                      \
    if (r_ != TECORE_SUCCESS) {                                                       \
      fprintf(stderr, "te-demo: %s failed: %s (%s)\n", #call, tecore_strerror(r_),    \
              tecore_last_error());                                                   \
      exit(1);                                                                        \
    }                                                                                 \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

struct demo {
  size_t n;
  tecore_devptr_t x, y, z;
  tecore_stream_t s0, s1;
  tecore_event_t joined;
};

/* One step: x = 1.5 and y = -0.25 on two streams, then z = 2x + 4y on s0. */
static void step(struct demo *d) {
  CHECK(tecore_fill(d->x, TECORE_DTYPE_F32, d->n, 1.5, d->s0));
  CHECK(tecore_fill(d->y, TECORE_DTYPE_F32, d->n, -0.25, d->s1));
  CHECK(tecore_event_record(d->joined, d->s1));
  CHECK(tecore_stream_wait_event(d->s0, d->joined));
  CHECK(tecore_scale_add(d->z, d->x, 2.0f, d->y, 4.0f, TECORE_DTYPE_F32, d->n, d->s0));
}

static int verify(struct demo *d, float *host) {
  for (size_t i = 0; i < d->n; i++) host[i] = NAN; /* poison */
  CHECK(tecore_memcpy_async((tecore_devptr_t)(uintptr_t)host, d->z, d->n * sizeof(float), d->s0));
  CHECK(tecore_stream_synchronize(d->s0));
  for (size_t i = 0; i < d->n; i++)
    if (host[i] != 2.0f) {
      fprintf(stderr, "te-demo: z[%zu] = %g, want 2\n", i, host[i]);
      return 1;
    }
  return 0;
}

int main(int argc, char **argv) {
  size_t n = 1 << 20;
  int iters = 20, opt;
  static const struct option longs[] = {{"elements", required_argument, 0, 'n'},
                                        {"iters", required_argument, 0, 'i'},
                                        {"help", no_argument, 0, 'h'},
                                        {0, 0, 0, 0}};
  while ((opt = getopt_long(argc, argv, "n:i:h", longs, NULL)) != -1) {
    switch (opt) {
    case 'n': n = strtoull(optarg, NULL, 0); break;
    case 'i': iters = atoi(optarg); break;
    case 'h':
      printf("usage: te-demo [-n ELEMENTS] [-i ITERS]\n"
             "  runs fill + scale-and-add on two streams, eagerly and as a replayed graph,\n"
             "  checks the result and prints the time per step\n");
      return 0;
    default: return 1;
    }
  }
  if (n == 0 || iters <= 0) {
    fprintf(stderr, "te-demo: --elements and --iters must be positive\n");
    return 1;
  }
  CHECK(tecore_init());
  tecore_backend_t b;
  CHECK(tecore_backend(&b));
  struct tecore_device_props p;
  CHECK(tecore_device_props(0, &p));
  printf("te-demo: backend %s, device %s\n", tecore_backend_name(b), p.name);

  struct demo d = {.n = n};
  float *host = NULL;
  CHECK(tecore_mem_alloc(n * 4, &d.x));
  CHECK(tecore_mem_alloc(n * 4, &d.y));
  CHECK(tecore_mem_alloc(n * 4, &d.z));
  CHECK(tecore_mem_alloc_host(n * 4, (void **)&host));
  CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &d.s0));
  CHECK(tecore_stream_create(TECORE_STREAM_NON_BLOCKING, 0, &d.s1));
  CHECK(tecore_event_create(TECORE_EVENT_DISABLE_TIMING, &d.joined));

  step(&d);
  if (verify(&d, host)) return 1;
  double t0 = now_s();
  for (int i = 0; i < iters; i++) step(&d);
  CHECK(tecore_stream_synchronize(d.s0));
  double eager = (now_s() - t0) / iters;

  tecore_graph_t g;
  tecore_graph_exec_t ge;
  size_t nodes = 0;
  CHECK(tecore_stream_begin_capture(d.s0, TECORE_CAPTURE_THREAD_LOCAL));
  CHECK(tecore_event_record(d.joined, d.s0)); /* fork s1 into the capture */
  CHECK(tecore_stream_wait_event(d.s1, d.joined));
  step(&d);
  CHECK(tecore_stream_end_capture(d.s0, &g));
  CHECK(tecore_graph_node_count(g, &nodes));
  CHECK(tecore_graph_instantiate(&ge, g));
  CHECK(tecore_memset_d32_async(d.z, 0, n, d.s0));
  CHECK(tecore_graph_launch(ge, d.s0));
  if (verify(&d, host)) return 1;
  t0 = now_s();
  for (int i = 0; i < iters; i++) CHECK(tecore_graph_launch(ge, d.s0));
  CHECK(tecore_stream_synchronize(d.s0));
  double graphed = (now_s() - t0) / iters;

  double gb = 5.0 * n * 4 / 1e9; /* 2 fills (write) + scale_add (2 reads, 1 write) */
  printf("te-demo: %zu elements, %d steps: eager %.3f ms/step (%.1f GB/s), "
         "graph of %zu nodes %.3f ms/step (%.1f GB/s); results verified\n",
         n, iters, eager * 1e3, gb / eager, nodes, graphed * 1e3, gb / graphed);

  CHECK(tecore_graph_exec_destroy(ge));
  CHECK(tecore_graph_destroy(g));
  CHECK(tecore_event_destroy(d.joined));
  CHECK(tecore_stream_destroy(d.s1));
  CHECK(tecore_stream_destroy(d.s0));
  CHECK(tecore_mem_free_host(host));
  CHECK(tecore_mem_free(d.x));
  CHECK(tecore_mem_free(d.y));
  CHECK(tecore_mem_free(d.z));
  return 0;
}
