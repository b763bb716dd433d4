/* uring_load.c -- loads liburing.so.2 on first use and forwards the few
 * liburing functions that are real symbols (te_uring.h renames them).
 * SPDX-License-Identifier: Apache-2.0
 *
 * Part of libtecore only (the service engine and tecore_svc_uring_probe),
 * hidden: nothing of liburing's is exported or imported. */
#include "internal.h"
#include "te_uring.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>

TE_PARAM_STR(svc_uring_lib, "TECORE_URING_LIB", "liburing.so.2", NULL,
             "the liburing shared object the service engine loads at run time (a path, or a "
             "name the dynamic loader searches for); when it cannot be loaded, reads and "
             "writes use pread/pwrite and offload spill stays in host memory")

/* The functions of liburing.so.2 we call, with their liburing names. */
#define TE_URING_SYMBOLS(X)                                                              \
  X(queue_init, "io_uring_queue_init", int, (unsigned, struct io_uring *, unsigned))    \
  X(queue_exit, "io_uring_queue_exit", void, (struct io_uring *))                        \
  X(submit, "io_uring_submit", int, (struct io_uring *))                                 \
  X(get_probe_ring, "io_uring_get_probe_ring", struct io_uring_probe *, (struct io_uring *)) \
  X(free_probe, "io_uring_free_probe", void, (struct io_uring_probe *))                 \
  X(register_buffers_sparse, "io_uring_register_buffers_sparse", int,                    \
    (struct io_uring *, unsigned))                                                       \
  X(register_buffers_update_tag, "io_uring_register_buffers_update_tag", int,            \
    (struct io_uring *, unsigned, const struct iovec *, const __u64 *, unsigned))        \
  X(wait_cqe_timeout, "io_uring_wait_cqe_timeout", int,                                  \
    (struct io_uring *, struct io_uring_cqe **, struct __kernel_timespec *))             \
  X(get_cqe, "__io_uring_get_cqe", int,                                                  \
    (struct io_uring *, struct io_uring_cqe **, unsigned, unsigned, sigset_t *))

static struct {
#define TE_URING_FIELD_(f, sym, ret, args) ret(*f) args;
  TE_URING_SYMBOLS(TE_URING_FIELD_)
#undef TE_URING_FIELD_
} fn;

static pthread_once_t once = PTHREAD_ONCE_INIT;
static int loaded;
static char why[256];

static void uring_load(void) {
  const char *soname = tecore_tunable_str(&svc_uring_lib);
  dlerror();
  void *lib = dlopen(soname, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char *e = dlerror();
    snprintf(why, sizeof why, "%s not found (%s): install liburing", soname,
             e ? e : "dlopen failed");
    return;
  }
#define TE_URING_LOAD_(f, sym, ret, args)                                                \
  *(void **)(&fn.f) = dlsym(lib, sym);                                                   \
  if (!fn.f) {                                                                           \
    snprintf(why, sizeof why, "%s lacks %s: liburing older than 2.2", soname, sym); \
    dlclose(lib);                                                                        \
    return;                                                                              \
  }
  TE_URING_SYMBOLS(TE_URING_LOAD_)
#undef TE_URING_LOAD_
  loaded = 1;   /* the handle stays open for the process's life */
}

int te_uring_loaded(void) {
  pthread_once(&once, uring_load);
  return loaded;
}

const char *te_uring_why(void) { return te_uring_loaded() ? "" : why; }

/* The gate: every ring starts here, so the others run only when loaded. */
int te_uring_queue_init(unsigned entries, struct io_uring *ring, unsigned flags) {
  if (!te_uring_loaded()) return -ELIBACC;
  return fn.queue_init(entries, ring, flags);
}

void te_uring_queue_exit(struct io_uring *ring) { fn.queue_exit(ring); }

int te_uring_submit(struct io_uring *ring) { return fn.submit(ring); }

struct io_uring_probe *te_uring_get_probe_ring(struct io_uring *ring) {
  return fn.get_probe_ring(ring);
}

void te_uring_free_probe(struct io_uring_probe *probe) { fn.free_probe(probe); }

int te_uring_register_buffers_sparse(struct io_uring *ring, unsigned nr) {
  return fn.register_buffers_sparse(ring, nr);
}

int te_uring_register_buffers_update_tag(struct io_uring *ring, unsigned off,
                                         const struct iovec *iovecs, const __u64 *tags,
                                         unsigned nr) {
  return fn.register_buffers_update_tag(ring, off, iovecs, tags, nr);
}

int te_uring_wait_cqe_timeout(struct io_uring *ring, struct io_uring_cqe **cqe_ptr,
                              struct __kernel_timespec *ts) {
  return fn.wait_cqe_timeout(ring, cqe_ptr, ts);
}

int te_uring_get_cqe_(struct io_uring *ring, struct io_uring_cqe **cqe_ptr, unsigned submit,
                      unsigned wait_nr, sigset_t *sigmask) {
  return fn.get_cqe(ring, cqe_ptr, submit, wait_nr, sigmask);
}
