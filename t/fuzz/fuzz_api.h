/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_api.h -- what fuzz_api.c (the state, the arguments, the stream
 * recovery) lends the operations kept in files of their own
 * (fuzz_comm.c: libtecomm's). */
#ifndef TE_FUZZ_API_H
#define TE_FUZZ_API_H

#include <stddef.h>
#include <stdint.h>
#include <te/core.h>

/* an argument taken modulo n (a slot index) */
uint64_t fz_ix(int64_t a, uint64_t n);
/* the address a pointer argument (3 ints: kind slot offset) names, and how
 * many bytes from there lie in a live allocation (fuzz_api.c's header) */
tecore_devptr_t fz_ptr(const int64_t *a, size_t *valid_bytes);
/* buffer slot a's base (0 when empty) and its bytes while live (0 freed) */
tecore_devptr_t fz_buf(int64_t a, size_t *live_bytes);
/* stream slot a (maybe destroyed, maybe capturing) */
tecore_stream_t fz_stream(int64_t a);
/* tensor slot a */
const struct tecore_tensor *fz_tensor(int64_t a);
/* after a call that returned r: a sticky stream error is recovered */
void fz_after(tecore_result_t r);
/* a finding: fz_fail of fuzz.h (which only fuzz_api.c includes) */
__attribute__((noreturn, format(printf, 1, 2))) void fz_finding(const char *fmt, ...);
/* --stats and the trace */
void fz_count_call(const char *fn);
void fz_count_result(int ok);
int fz_tracing(void);

/* fuzz_comm.c: the communicator of a run, made and ended with the run */
void fz_comm_setup(void);
void fz_comm_cleanup(void);
void op_comm_allreduce(const int64_t *a);
void op_comm_fused(const int64_t *a);
void op_comm_mem(const int64_t *a);
void op_comm_misc(const int64_t *a);
void op_comm_split(const int64_t *a);
void op_comm_renew(const int64_t *a);

#endif
