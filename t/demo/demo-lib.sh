# SPDX-License-Identifier: Apache-2.0
# demo-lib.sh -- the opening the t/demo-*.sh and t/demo/te-gpt.sh tests share,
# sourced by each (the dot command, from the script's own directory), not
# run: sets $demo to the tool to test ($demo_tool, else te-demo; exit 1
# when it is not built), skips (exit 77)
# under TE_DEVICE=cuda where no GPU can be used, as the Check suites do,
# and sets $seed (from TE_TEST_SEED, else random, 1..100000), printing how
# to repeat the run.
# Environment (from t/Makefile.inc): top_builddir.

demo="${top_builddir:-.}/tools/${demo_tool:-te-demo}"
if test ! -x "$demo"; then
  echo "FAIL: $demo not built"
  exit 1
fi
if test "x$TE_DEVICE" = xcuda && ! "${top_builddir:-.}/tools/te-info" > /dev/null 2>&1; then
  echo "SKIP: TE_DEVICE=cuda but no GPU can be used (te-info fails)"
  exit 77
fi
# (the draw alone is brought into range: a given TE_TEST_SEED is the seed)
seed=${TE_TEST_SEED:-$(($(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 100000 + 1))}
echo "# seed $seed (TE_TEST_SEED=$seed reproduces this run)"
