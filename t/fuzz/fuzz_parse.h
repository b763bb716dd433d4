/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_parse.h -- the interface between the byte-level parser fuzzer's
 * targets (fuzz_parse_one.c) and its drivers (fuzz_parse.c, the plain
 * PRNG driver; fuzz_parse_libfuzzer.c, the optional libFuzzer entry). */
#ifndef TE_FUZZ_PARSE_H
#define TE_FUZZ_PARSE_H

#include <stddef.h>
#include <stdint.h>

/* Runs one input through the parsers (its first byte picks the target). */
void fz_parse_one(const uint8_t *data, size_t len);
/* Target 6: libtecomm's bootstrap and mesh messages (fuzz_parse_wire.c). */
void fz_parse_wire(const uint8_t *data, size_t len);
/* Target 7: te-gpt's safetensors reader (fuzz_parse_st.c). */
void fz_parse_st(const uint8_t *data, size_t len);
/* Library calls made so far by this process. */
extern uint64_t fz_parse_calls;
/* Nonzero: print each checked call and its result. */
extern int fz_parse_trace;
/* Reports a wrong answer; the driver decides how the process ends. */
void fz_parse_finding(const char *msg);

#endif
