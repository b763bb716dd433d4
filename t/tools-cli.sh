#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tools-cli.sh -- every te-* tool answers the command line the same way
# (tools/cli.h): --help prints its usage on stdout and exits 0; --version
# prints "<tool> (libte) <version>" and exits 0; an unknown flag, a stray
# word, a flag without its value and a value that is not a number exit 2
# with nothing on stdout and a message on stderr that names the bad word
# and points at --help.  Then te-bench's formats: the header names host,
# GPU, driver and toolkit, --csv has named columns, --json parses, on vdev
# no target is judged, and --quiet drops the explanations; te-info --quiet
# prints nothing; te-demo's default learning rate follows the width, and
# an unstable run names the flag to turn.  Runs on vdev (no GPU needed).
set -u
b=${top_builddir:-.}/tools
tmp=${TMPDIR:-/tmp}/tools-cli.$$
trap 'rm -f "$tmp".*' EXIT
TE_DEVICE=vdev
export TE_DEVICE
fail=0
bad() { echo "FAIL: $*"; fail=1; }

version=$("$b/te-info" -v) || { echo "FAIL: te-info -v"; exit 1; }

# run TOOL ARGS...: sets rc, and $tmp.out / $tmp.err
run() {
  tool=$1
  shift
  "$b/$tool" "$@" > "$tmp.out" 2> "$tmp.err" < /dev/null
  rc=$?
}
# usage_error TOOL WORD ARGS...: exit 2, stdout empty, stderr names WORD
usage_error() {
  tool=$1 word=$2
  shift 2
  run "$tool" "$@"
  if [ $rc -ne 2 ]; then bad "$tool $*: exit $rc, want 2"; cat "$tmp.err"; return; fi
  [ -s "$tmp.out" ] && { bad "$tool $*: printed on stdout:"; head -3 "$tmp.out"; }
  grep -qF -- "$word" "$tmp.err" || { bad "$tool $*: stderr does not name '$word':"; cat "$tmp.err"; }
  grep -qF -- "Try '$tool --help'" "$tmp.err" || { bad "$tool $*: no --help hint:"; cat "$tmp.err"; }
}

# tool, then an option taking a number
for t in "te-info" "te-bench --mb" "te-demo --steps" "te-allreduce-perf -i" \
         "te-offload-bench --iters"; do
  set -- $t
  tool=$1 numflag=${2:-}
  run "$tool" --help
  if [ $rc -ne 0 ] || ! head -1 "$tmp.out" | grep -q "^usage: $tool " || [ -s "$tmp.err" ]; then
    bad "$tool --help: exit $rc, want 0 and 'usage: $tool ...' on stdout"; head -2 "$tmp.out" "$tmp.err"
  fi
  run "$tool" --version
  if [ $rc -ne 0 ] || [ "$(cat "$tmp.out")" != "$tool (libte) $version" ]; then
    bad "$tool --version: exit $rc, printed '$(cat "$tmp.out")', want '$tool (libte) $version'"
  fi
  usage_error "$tool" "--no-such-flag" --no-such-flag
  usage_error "$tool" "-Z" -Z
  usage_error "$tool" "stray" stray
  if [ -n "$numflag" ]; then
    usage_error "$tool" "$numflag" "$numflag" twelve
    usage_error "$tool" "$numflag" "$numflag"
  fi
done

# te-info --quiet: nothing printed, the exit status answers
run te-info --quiet
[ $rc -eq 0 ] && [ ! -s "$tmp.out" ] || bad "te-info --quiet: exit $rc, printed $(wc -c < "$tmp.out") bytes"

# te-bench: the header, named columns, no targets on vdev
run te-bench --fp8 --mb 1 --iters 1
if [ $rc -ne 0 ]; then
  bad "te-bench --fp8: exit $rc"; cat "$tmp.err"
else
  head -1 "$tmp.out" | grep -q "^# te-bench .* host .* gpu .* driver .* toolkit .* backend vdev" ||
    bad "te-bench: header line: $(head -1 "$tmp.out")"
  grep -q "not GPU speed" "$tmp.out" || bad "te-bench on vdev does not say its figures are not speed"
  grep -qE "^name +shape +time +unit +rate" "$tmp.out" || bad "te-bench: no column names"
  grep -q "^quantize delayed" "$tmp.out" || bad "te-bench --fp8: no quantize row"
  grep -qE "PASS|MISS" "$tmp.out" && { bad "te-bench judged a target on vdev:"; grep -E "PASS|MISS" "$tmp.out"; }
fi
run te-bench --fp8 --mb 1 --iters 1 --quiet
[ $rc -eq 0 ] && ! grep -q "^# build\|^# fp8" "$tmp.out" && grep -q "^quantize delayed" "$tmp.out" ||
  bad "te-bench --quiet: exit $rc, explanations left or rows missing"
run te-bench --copy --mb 1 --iters 1 --csv
if [ $rc -ne 0 ] ||
   [ "$(head -1 "$tmp.out")" != "host,gpu,driver,toolkit,backend,section,name,shape,time,unit,rate,rate_unit,peer,peer_time,ratio,target,verdict,note" ] ||
   ! grep -q ",vdev,copy,copy d2d,1 MiB," "$tmp.out"; then
  bad "te-bench --csv: exit $rc:"; cat "$tmp.out"
fi
run te-bench --copy --mb 1 --iters 1 --json
if [ $rc -ne 0 ]; then
  bad "te-bench --json: exit $rc"
elif command -v python3 > /dev/null 2>&1; then
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["backend"]=="vdev" and d["speed"] is False and d["rows"][0]["name"]=="copy d2d" and d["rows"][0]["time"]>0, d' \
    < "$tmp.out" || { bad "te-bench --json: not the document expected:"; cat "$tmp.out"; }
fi
usage_error te-bench "--json" --csv --json

# te-demo: the default learning rate follows the width (3e-3 * (64/hidden)^1.2)
run te-demo --hidden 256 --layers 1 --tokens 16 --steps 2 --no-bf16
[ $rc -eq 0 ] && grep -q "AdamW lr 0.000568" "$tmp.out" ||
  { bad "te-demo --hidden 256: exit $rc, the lr is not 0.000568:"; head -2 "$tmp.out"; cat "$tmp.err"; }
# an unstable run fails with the flag to turn, once; --quiet leaves the summary only
run te-demo --lr 0.5 --steps 4 --quiet
[ $rc -eq 1 ] && [ "$(grep -c 'hint:.*--lr' "$tmp.err")" = 1 ] ||
  { bad "te-demo --lr 0.5: exit $rc (want 1) and one --lr hint:"; cat "$tmp.err"; }
grep -v "^te-demo: " "$tmp.out" | grep . && bad "te-demo --quiet printed more than its summary"

[ $fail -eq 0 ] && echo "ok: te-info te-bench te-demo te-allreduce-perf te-offload-bench answer --help, --version and bad words alike"
exit $fail
