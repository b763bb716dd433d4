#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# params-lint.sh -- no function of libtecomm outside its public API takes
# more than 8 parameters (issue 30: structs, not flag lists; a call such
# as f(c, 1, 1, 1, 0, 0, &a) says nothing at its call site).  The public
# functions are those declared in libtecomm/te/*.h; their signatures are
# the ABI and stay.  Needs python3 (skipped without).
# Exit 0 pass, 1 a finding (all listed), 77 skipped.
set -u
top=$(cd "$(dirname "$0")/.." && pwd)
command -v python3 >/dev/null 2>&1 || { echo "params-lint: no python3; skipped"; exit 77; }
python3 - "$top" <<'PY'
import glob, re, sys
top = sys.argv[1]
MAX = 8
def strip(s):
    s = re.sub(r'/\*.*?\*/', ' ', s, flags=re.S)
    s = re.sub(r'//[^\n]*', ' ', s)
    return re.sub(r'^\s*#(?:[^\n]*\\\n)*[^\n]*', ' ', s, flags=re.M)
# a function declarator at the start of a line: type words, name, (params), then { or ;
fn = re.compile(r'^[A-Za-z_][\w \t\*]*?\b([A-Za-z_]\w*)\s*\(([^;{}()]*(?:\([^()]*\)[^;{}()]*)*)\)\s*'
                r'(?:__attribute__\s*\(\(.*?\)\)\s*)*[{;]', re.M)
def params(args):
    depth, n = 0, 1
    for ch in args:
        depth += ch == '('
        depth -= ch == ')'
        n += ch == ',' and depth == 0
    return 0 if args.strip() in ('', 'void') else n
public = set()
for h in glob.glob(top + '/libtecomm/te/*.h'):
    public.update(m.group(1) for m in fn.finditer(strip(open(h).read())))
bad = 0
for f in sorted(glob.glob(top + '/libtecomm/*.[ch]')):
    for m in fn.finditer(strip(open(f).read())):
        name, n = m.group(1), params(m.group(2))
        if n > MAX and name not in public:
            print("params-lint: %s: %s takes %d parameters (at most %d outside the public API: "
                  "pass a struct)" % (f[len(top) + 1:], name, n, MAX))
            bad = 1
if not bad:
    print("params-lint: no private function of libtecomm takes more than %d parameters" % MAX)
sys.exit(bad)
PY
