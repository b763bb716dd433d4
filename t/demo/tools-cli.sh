#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tools-cli.sh -- what scripts rely on in te-info, te-demo, te-gpt, te-offload-bench,
# te-bench and te-allreduce-perf: --help explains every option the tool takes in a line of
# its own (each long option of the tool's getopt table, and each short
# one, starts a line of --help), and the exit codes: 0 done, 1 the work
# failed, 2 bad usage (an unknown option, a stray word, a bad value).
# The failures: te-offload-bench --dir on a missing directory (said once
# on stderr, exit 1), te-demo with a tolerance no FP8 run meets, te-info
# under TE_DEVICE=cuda where no GPU is usable (checked only there).
# Exit 0 pass, 1 fail.  Environment (from t/Makefile.inc): top_builddir.
top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${top_builddir:-.}/tools
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-tools-cli.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
# expect CODE WHAT COMMAND...: runs it (output in $tmp/out, $tmp/err)
expect() {
  want=$1 what=$2
  shift 2
  "$@" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ "$rc" != "$want" ]; then
    echo "FAIL: $what: '$*' exits $rc, not $want"
    sed 's/^/  | /' "$tmp/err" | head -5
    fail=1
  fi
}

for t in te-info te-demo te-gpt te-offload-bench te-bench te-allreduce-perf; do
  [ -x "$bin/$t" ] || { echo "FAIL: $bin/$t not built"; fail=1; continue; }
  expect 0 "--help" "$bin/$t" --help
  cp "$tmp/out" "$tmp/help"
  [ -s "$tmp/help" ] || { echo "FAIL: $t --help printed nothing on stdout"; fail=1; }
  # the long options of the tool's table, and the shared ones (tools/cli.h)
  longs=$(sed -n 's/.*{"\([a-z0-9-]*\)", *\(no\|required\|optional\)_argument.*/\1/p' \
    "$top/tools/$t.c" | tr '\n' ' ')
  # --csv and --json where the tool takes the shared formats (tools/out.h)
  formats=$(grep -q TE_CLI_FORMATS "$top/tools/$t.c" && echo csv json)
  for o in $longs $formats help version quiet; do
    grep -Eq "^ +(-[A-Za-z], )?--$o([ =,]|\$)" "$tmp/help" ||
      { echo "FAIL: $t --help has no line explaining --$o"; fail=1; }
  done
  shorts=$(sed -n 's/.*\.shorts = "\([A-Za-z:]*\)".*/\1/p' "$top/tools/$t.c" | tr -d ':')
  for s in $(echo "$shorts" | sed 's/./& /g'); do
    grep -Eq "^ +-$s([ ,]|\$)" "$tmp/help" ||
      { echo "FAIL: $t --help has no line explaining -$s"; fail=1; }
  done
  grep -q "^exit status: 0 " "$tmp/help" || { echo "FAIL: $t --help does not give its exit status"; fail=1; }
  expect 0 "--version" "$bin/$t" --version
  grep -q "^$t (libte) [0-9]" "$tmp/out" || { echo "FAIL: $t --version: $(cat "$tmp/out")"; fail=1; }
  expect 2 "an unknown option" "$bin/$t" --no-such-option
  expect 2 "a stray word" "$bin/$t" stray-word
done
expect 2 "a bad value" "$bin/te-demo" --steps many
expect 2 "a bad value" "$bin/te-gpt" --steps many
expect 2 "a bad value" "$bin/te-offload-bench" --mb 0
expect 2 "a bad value" "$bin/te-bench" --iters x
expect 2 "a bad value" "$bin/te-allreduce-perf" -d int8

# te-info -q: nothing on stdout, and the exit status says whether a backend works
expect 0 "te-info -q" env TE_DEVICE=vdev "$bin/te-info" -q
[ -s "$tmp/out" ] && { echo "FAIL: te-info -q printed: $(cat "$tmp/out")"; fail=1; }
if ! env TE_DEVICE=cuda "$bin/te-info" > /dev/null 2>&1; then
  expect 1 "no usable GPU" env TE_DEVICE=cuda "$bin/te-info" -q
  [ -s "$tmp/out" ] && { echo "FAIL: te-info -q printed: $(cat "$tmp/out")"; fail=1; }
fi

# the work failed: exit 1, the reason once on stderr
expect 1 "a --dir it cannot write" "$bin/te-offload-bench" -q --mb 1 --iters 1 \
  --dir "$tmp/no/such/dir" --skip pool,step,engine
n=$(grep -c "no/such/dir" "$tmp/err")
[ "$n" = 1 ] || { echo "FAIL: te-offload-bench named the missing --dir $n times on stderr:"; cat "$tmp/err"; fail=1; }
expect 1 "a tolerance no run meets" env TE_DEVICE=vdev "$bin/te-demo" -q --steps 2 --layers 1 \
  --tolerance 1e-12 --one-order
grep -q "FAIL" "$tmp/err" || { echo "FAIL: te-demo failed without saying why"; fail=1; }
[ $fail = 0 ] && echo "ok: --help complete, exit codes 0/1/2"
exit $fail
