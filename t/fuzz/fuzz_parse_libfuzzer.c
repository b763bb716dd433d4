/* SPDX-License-Identifier: Apache-2.0
 *
 * fuzz_parse_libfuzzer.c -- the libFuzzer entry point of the parser fuzzer
 * (optional: the build does not need it).  With clang, from the top of
 * the source tree, against a library built in build/ (configured with
 * --without-cuda):
 *   clang -g -fsanitize=fuzzer,address,undefined -Ilibtecore -Ibuild/libtecore \
 *     -Icommon -Ilibtecomm -Itools/gpt t/fuzz/fuzz_parse_libfuzzer.c t/fuzz/fuzz_parse_one.c \
 *     t/fuzz/fuzz_parse_wire.c libtecomm/boot/wire.c common/sha256.c \
 *     t/fuzz/fuzz_parse_st.c tools/gpt/st.c \
 *     build/libtecore/.libs/libtecore.so -Wl,-rpath,$PWD/build/libtecore/.libs \
 *     -o fuzz-parse-lf
 *   TE_DEVICE=vdev TE_DEBUG_FILE=/dev/null ./fuzz-parse-lf -max_total_time=60
 * For coverage feedback from inside the library, configure build/ with
 * CC=clang CFLAGS='-g -fsanitize=fuzzer-no-link,address'; against a plain
 * build libFuzzer sees only this file's and fuzz_parse_one.c's branches
 * (the command above was tried that way: it builds and runs).
 * (the tunable and log targets see one process for all inputs, so they
 * exercise less there than under the plain driver). */
#include "fuzz_parse.h"

#include <stdio.h>
#include <stdlib.h>

void fz_parse_finding(const char *msg) {
  fprintf(stderr, "FINDING: %s\n", msg);
  abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  fz_parse_one(data, size);
  return 0;
}
