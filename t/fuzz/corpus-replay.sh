#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# t/fuzz/corpus-replay.sh -- replays the fuzz corpus (t/fuzz/corpus/): the
# call patterns and byte inputs of past crashes (issue 9), each in a fresh
# process.  Every one must run to its end with documented results: a crash,
# a sanitizer report or a wrong answer fails the test and prints the file.
b=${top_builddir:-.}/t/fuzz
c=${srcdir:-.}/t/fuzz/corpus
"$b/fuzz-api" --replay "$c"/api/*.txt || exit 1
"$b/fuzz-parse" --replay "$c"/parse/*.hex || exit 1
