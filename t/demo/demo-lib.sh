# SPDX-License-Identifier: Apache-2.0
# demo-lib.sh -- the opening the t/demo-*.sh and t/demo/te-gpt.sh tests share,
# sourced by each (the dot command, from the script's own directory), not
# run: sets $demo to the tool to test ($demo_tool, else te-demo; exit 1
# when it is not built), skips (exit 77)
# under TE_DEVICE=cuda where no GPU can be used, as the Check suites do,
# and sets $seed (from TE_TEST_SEED, brought into 1..2^40, else random,
# 1..65536), printing how to repeat the run.
# Environment (from t/Makefile.inc): top_builddir.

demo="${top_builddir:-.}/tools/${demo_tool:-te-demo}"
if test ! -x "$demo"; then
  echo "FAIL: $demo not built"
  exit 1
fi
# TE_T_RANKS_LOCK (t/lib/comm_ranks.h): each run of the tool holds that
# lock, as each multi-rank Check case does, so that under make -j its
# ranks never spin on the GPUs beside another case's.  $demo becomes a
# wrapper in the build tree (made once, atomically) that takes the lock
# around the tool, unless a launcher started it as one rank of several
# (TECOMM_RANK, mpirun's or Slurm's variables: its peers would wait for
# the lock it holds; such a script locks around the whole launch with
# ranks_lock and ranks_unlock, and calls no $demo in between).
# demo_real is the tool itself (a test that signals the tool's own
# process runs it, inside ranks_lock and ranks_unlock).
demo=$(cd "$(dirname "$demo")" && pwd)/$(basename "$demo")
demo_real=$demo
ranks_lock() {
  if test -n "${TE_T_RANKS_LOCK:-}" && command -v flock > /dev/null 2>&1; then
    exec 8>> "$TE_T_RANKS_LOCK" && flock 8
  fi
}
ranks_unlock() {
  if test -n "${TE_T_RANKS_LOCK:-}" && command -v flock > /dev/null 2>&1; then
    flock -u 8
    exec 8>&-
  fi
}
if test -n "${TE_T_RANKS_LOCK:-}" && command -v flock > /dev/null 2>&1; then
  ranked="${top_builddir:-.}/t/demo/.ranked-${demo_tool:-te-demo}"
  if test ! -x "$ranked"; then
    w=$(mktemp "$ranked.XXXXXX") || exit 1
    cat > "$w" <<EOF_RANKED
#!/bin/sh
# made by t/demo/demo-lib.sh: $demo holding \$TE_T_RANKS_LOCK
if test -n "\${TECOMM_RANK:-}\${OMPI_COMM_WORLD_RANK:-}\${PMI_RANK:-}\${PMIX_RANK:-}\${SLURM_PROCID:-}"; then
  exec "$demo" "\$@"
fi
exec flock "\$TE_T_RANKS_LOCK" "$demo" "\$@"
EOF_RANKED
    chmod 755 "$w" && mv -f "$w" "$ranked" || exit 1
  fi
  demo=$ranked
fi
if test "x$TE_DEVICE" = xcuda && ! "${top_builddir:-.}/tools/te-info" > /dev/null 2>&1; then
  echo "SKIP: TE_DEVICE=cuda but no GPU can be used (te-info fails)"
  exit 77
fi
# A given TE_TEST_SEED is the seed when every tool takes it (1..2^40:
# te-demo's range, te-gpt's is wider); another -- the Check suites print
# seeds up to 2^63, and one TE_TEST_SEED may be given to a whole `make
# check` -- becomes TE_TEST_SEED mod 2^40 + 1, and the seed printed is the
# one used.  Else a random draw.
if test -n "${TE_TEST_SEED:-}"; then
  s=$(printf '%s' "$TE_TEST_SEED" | sed 's/^0*//')
  case ${s:-0} in
    *[!0-9]*) echo "FAIL: TE_TEST_SEED=$TE_TEST_SEED is not a decimal number"; exit 1 ;;
  esac
  if test ${#s} -gt 19; then
    echo "FAIL: TE_TEST_SEED=$TE_TEST_SEED has more than 19 digits"; exit 1
  fi
  seed=${s:-0}
  if test "$seed" -lt 1 || test "$seed" -gt 1099511627776; then
    seed=$(( seed % 1099511627776 + 1 ))
  fi
  if test "$seed" -lt 1; then
    echo "FAIL: TE_TEST_SEED=$TE_TEST_SEED is 2^63 or more"; exit 1
  fi
else
  seed=$(($(od -An -N2 -tu2 /dev/urandom | tr -d ' ') % 100000 + 1))
fi
echo "# seed $seed (TE_TEST_SEED=$seed reproduces this run)"
# Runs are compared across processes, often byte for byte (a checkpoint
# against another, graphed against eager): on a GPU the timed choice of a
# small GEMM's cuBLASLt algorithm (tecore_gemm(3)) may differ between two
# processes, and more often on a busy machine (4 H100s under make -j16:
# the graphed and eager decodes, a text's and its shard's losses), and
# with it the last bits.  The heuristic's first is the same in every
# process; a caller's own setting is kept.
TECORE_GEMM_TUNE_ALGOS=${TECORE_GEMM_TUNE_ALGOS:-1}
export TECORE_GEMM_TUNE_ALGOS

# close A B WHAT [TOL]: the loss columns of te-gpt CSV files A and B
# (header, then rows) agree within TOL (else $gpt_tol), relative, in as
# many rows as A has; prints the largest difference, sets fail=1 when
# they do not.  Uses the caller's $tmp.
close() {
  tol=${4:-$gpt_tol}
  cut -d, -f2 "$1" > "$tmp/l1"
  cut -d, -f2 "$2" > "$tmp/l2"
  rows=$(($(wc -l < "$1") - 1))
  paste -d' ' "$tmp/l1" "$tmp/l2" | awk -v t="$tol" -v c="$3" -v want="$rows" '
    NR > 1 { d = ($1 - $2) / $1; if (d < 0) d = -d; if (d > m || d != d) m = d; n++ }
    END { printf "# %s: losses within %.2g (limit %g)\n", c, m, t;
          exit !(n == want && n > 0 && m <= t) }' ||
    { echo "FAIL: $3: the losses differ past $tol:"; paste "$tmp/l1" "$tmp/l2"; fail=1; }
}
