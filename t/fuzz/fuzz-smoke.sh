#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# t/fuzz/fuzz-smoke.sh -- a short fuzz run of each fuzzer in make check:
# TE_FUZZ_SECONDS each (default 10), from a fresh seed each time (printed;
# TE_FUZZ_SEED=N repeats one).  A finding prints the command that
# reproduces it.  .ci/run runs the fuzzers longer under the sanitizers.
b=${top_builddir:-.}/t/fuzz
secs=${TE_FUZZ_SECONDS:-10}
set --
if [ -n "$TE_FUZZ_SEED" ]; then set -- --seed "$TE_FUZZ_SEED"; fi
"$b/fuzz-api" "$@" --seconds "$secs" || exit 1
"$b/fuzz-parse" "$@" --seconds "$secs" || exit 1
