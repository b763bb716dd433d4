#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# tools-output.sh -- what scripts read from the tools (tools/out.h): every
# tool's --json parses as one JSON object (no key twice) naming the tool,
# and its --csv as CSV (a header row, then rows with as many fields as the
# header, at least one) with nothing else on stdout, not even a '#' line,
# with -q or without; progress is kept off a stderr that is not a
# terminal.  te-allreduce-perf's table ends with the average bus bandwidth.
# Small, fast settings on vdev.
# Exit 0 pass, 1 fail, 77 no python3.  Environment: top_builddir.
bin=${top_builddir:-.}/tools
command -v python3 > /dev/null 2>&1 || { echo "SKIP: no python3"; exit 77; }
TE_DEVICE=vdev
export TE_DEVICE
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-tools-output.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

cat > "$tmp/check_json.py" << 'EOF'
import json, sys
def pairs(kv):
    keys = [k for k, _ in kv]
    dup = {k for k in keys if keys.count(k) > 1}
    if dup:
        raise ValueError("key given twice: %s" % ", ".join(sorted(dup)))
    return dict(kv)
doc = json.load(sys.stdin, object_pairs_hook=pairs)
if not isinstance(doc, dict) or doc.get("tool") != sys.argv[1]:
    sys.exit("not one object with \"tool\": \"%s\"" % sys.argv[1])
for key in sys.argv[2:]:
    if not isinstance(doc.get(key), list) or not doc[key]:
        sys.exit("no rows in \"%s\"" % key)
EOF
cat > "$tmp/check_csv.py" << 'EOF'
import csv, sys
rows = list(csv.reader(sys.stdin))
if len(rows) < 2:
    sys.exit("a header and at least one row wanted, got %d lines" % len(rows))
head = rows[0]
if not all(h and h[0].isalpha() for h in head):
    sys.exit("the first row is not a header of names: %r" % head)
for i, r in enumerate(rows[1:], 2):
    if len(r) != len(head):
        sys.exit("row %d has %d fields, the header %d" % (i, len(r), len(head)))
EOF

# check FORMAT TOOL TABLES -- ARGS...: runs bin/TOOL ARGS --FORMAT and parses stdout
check() {
  fmt=$1 tool=$2
  shift 2
  tables=
  while [ "$1" != "--" ]; do tables="$tables $1"; shift; done
  shift
  "$bin/$tool" "$@" "--$fmt" > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc != 0 ]; then
    echo "FAIL: $tool $* --$fmt exits $rc"; sed 's/^/  | /' "$tmp/err" | head -5; fail=1; return
  fi
  if [ "$fmt" = json ]; then
    python3 "$tmp/check_json.py" "$tool" $tables < "$tmp/out" 2> "$tmp/perr" ||
      { echo "FAIL: $tool $* --json: $(tail -1 "$tmp/perr")"; head -c 600 "$tmp/out"; fail=1; }
  else
    python3 "$tmp/check_csv.py" < "$tmp/out" 2> "$tmp/perr" ||
      { echo "FAIL: $tool $* --csv: $(tail -1 "$tmp/perr")"; head -5 "$tmp/out"; fail=1; }
    grep -q '^#' "$tmp/out" && { echo "FAIL: $tool $* --csv: '#' lines on stdout"; fail=1; }
  fi
  if tr -d '\n' < "$tmp/err" | grep -q "$(printf '\r')"; then
    echo "FAIL: $tool $* --$fmt: progress on a stderr that is no terminal"; fail=1
  fi
}

for f in json csv; do
  for q in "" -q; do
    check $f te-info devices backends libraries tunables -- $q
    check $f te-info tunables -- -e $q
    check $f te-bench rows -- --mb 1 --iters 1 --elementwise $q
    check $f te-offload-bench rows -- --mb 1 --iters 1 --layers 1 --dir "$tmp" --skip engine $q
    check $f te-demo steps runs -- --steps 2 --layers 1 --one-order $q
    check $f te-gpt steps -- --steps 2 --batch 1 --sample 4 $q
    check $f te-allreduce-perf rows -- -n 2 -b 8 -e 1K -f 8 -w 1 -i 1 $q
  done
done

# CSV alone on stdout: the header is the first line, even with -q
"$bin/te-allreduce-perf" -q -n 2 -b 8 -e 64 -f 8 -w 1 -i 1 --csv > "$tmp/out" 2> /dev/null
head -1 "$tmp/out" | grep -q '^size,count,' ||
  { echo "FAIL: te-allreduce-perf -q --csv: the first line is not the header:"; head -3 "$tmp/out"; fail=1; }
# the table ends as nccl-tests' does: the average bus bandwidth
"$bin/te-allreduce-perf" -n 2 -b 8 -e 64 -f 8 -w 1 -i 1 > "$tmp/out" 2> /dev/null
grep -Eq '^# Avg bus bandwidth *: *[0-9.]+' "$tmp/out" ||
  { echo "FAIL: te-allreduce-perf: no 'Avg bus bandwidth' line:"; cat "$tmp/out"; fail=1; }
# the JSON carries the same average
"$bin/te-allreduce-perf" -n 2 -b 8 -e 64 -f 8 -w 1 -i 1 --json 2> /dev/null |
  python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["avg_busbw_gbs"] >= 0 and len(d["rows"]) == 2' ||
  { echo "FAIL: te-allreduce-perf --json: no avg_busbw_gbs or not 2 rows"; fail=1; }
# --csv and --json together: a usage error
for t in te-info te-bench te-offload-bench te-demo te-allreduce-perf; do
  "$bin/$t" --csv --json > /dev/null 2>&1
  rc=$?
  [ $rc = 2 ] || { echo "FAIL: $t --csv --json exits $rc, not 2"; fail=1; }
done
[ $fail = 0 ] && echo "ok: every tool's --json and --csv parse; CSV alone on stdout"
exit $fail
