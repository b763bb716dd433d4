/* te_uring.h -- liburing, loaded at run time.  SPDX-License-Identifier: Apache-2.0
 *
 * libtecore's service engine and libtegraph's probe use liburing, but no
 * library links it: a node without liburing.so.2 must still load
 * libtecore, and there reads and writes go through pread/pwrite.  Most of
 * liburing is static inline in its header (get_sqe, prep_*, peek_cqe,
 * cqe_seen, opcode_supported), which we keep; the few functions that are
 * real symbols of liburing.so.2 are renamed here, before the header is
 * read, to trampolines (uring_load.c) that call through a table filled
 * by dlopen/dlsym.  The header's own prototypes then declare the
 * trampolines, so their signatures are checked against liburing's.
 *
 * Include this instead of <liburing.h>.  te_uring_queue_init (the first
 * call of every ring) loads the library and returns -ELIBACC when it
 * cannot; te_uring_why() then says which library is missing.  t/lint/ldd-lint.sh
 * checks that no io_uring_* symbol is left undefined in a library. */
#ifndef TE_URING_H
#define TE_URING_H

#define io_uring_queue_init te_uring_queue_init
#define io_uring_queue_exit te_uring_queue_exit
#define io_uring_submit te_uring_submit
#define io_uring_get_probe_ring te_uring_get_probe_ring
#define io_uring_free_probe te_uring_free_probe
#define io_uring_register_buffers_sparse te_uring_register_buffers_sparse
#define io_uring_register_buffers_update_tag te_uring_register_buffers_update_tag
#define io_uring_wait_cqe_timeout te_uring_wait_cqe_timeout
#define __io_uring_get_cqe te_uring_get_cqe_
#include <liburing.h>

/* 1 when liburing.so.2 is loaded (loading it on the first call). */
int te_uring_loaded(void);
/* Why it is not (a static string naming the library); "" when it is. */
const char *te_uring_why(void);

#endif
