#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-readme.sh -- the README's main job, as the README gives it (the
# te-gpt words of its quick-start command), prints a visible sample: at
# least GPT_README_LETTERS of its 64 bytes letters, of 5 or more kinds
# (issue 60: greedy after 30 steps it printed 64 spaces).  The sample is
# drawn at temperature 0.8 after 100 steps: man pages are mostly
# letters, and such a model writes word-like runs of them (seen on vdev:
# 43..48 letters of 12..23 kinds over seeds 1..6, 51 at seed 6381); 24
# fails a model that repeats one byte or draws all 256 uniformly (52 of
# them letters: 13 of 64 expected).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
GPT_README_LETTERS=24
readme="$(dirname "$0")/../../README.md"
args=$(sed -n 's/^\.\/install-deps\.sh .* tools\/te-gpt\(.*\)$/\1/p' "$readme" | head -1)
[ -n "$args" ] || { echo "FAIL: no te-gpt command in $readme's quick start"; exit 1; }
echo "# README: te-gpt$args (seed $seed)"
# shellcheck disable=SC2086 # the README's words, split as the shell does
sample=$("$demo" $args --seed "$seed" --json 2> /dev/null |
  sed -n 's/.*"sample": *"\(\([^"\\]\|\\.\)*\)".*/\1/p' | sed 's/\\u00[0-9a-f][0-9a-f]/?/g; s/\\./?/g')
letters=$(printf '%s' "$sample" | tr -cd 'A-Za-z' | wc -c)
kinds=$(printf '%s' "$sample" | tr -cd 'A-Za-z' | fold -w 1 | sort -u | wc -l)
echo "# sample: '$sample' ($letters letters, $kinds kinds)"
[ "$letters" -ge $GPT_README_LETTERS ] && [ "$kinds" -ge 5 ] ||
  { echo "FAIL: the README's sample holds $letters letters of $kinds kinds (want $GPT_README_LETTERS, 5)"; exit 1; }
exit 0
