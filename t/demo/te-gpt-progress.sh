#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-progress.sh -- te-gpt's progress line and its --log figures
# (issue 60): each --log row ends "elapsed_s E eta_s A", E growing and
# A the steps left times the median step (0 at the last step, within
# a factor of 3 of (steps left) * elapsed / steps done at the first); on
# a terminal (script(1), skipped without it) stderr shows "step N/M, ...
# elapsed, ETA ... tokens/s" once per row, and -q shows none.
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-progress.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }

"$gpt" --seed "$seed" --steps 5 --sample 0 -q --log "$tmp/log" > /dev/null 2> "$tmp/err" ||
  { echo "FAIL: te-gpt --log exits non-zero: $(head -2 "$tmp/err")"; exit 1; }
[ "$(grep -c ' elapsed_s [0-9.]* eta_s [0-9.]*$' "$tmp/log")" = 5 ] ||
  bad "--log: not 5 rows ending elapsed_s, eta_s: $(head -1 "$tmp/log")"
awk '{ e = $(NF - 2); a = $NF
       if (NR > 1 && e + 0 <= last + 0) { print "elapsed_s does not grow at step " $2; x = 1 }
       if (NR == 1) { want = 4 * e; if (a < want / 3 || a > 3 * want) { print "step 1: eta_s " a " for 4 steps of " e " s"; x = 1 } }
       if (NR == 5 && a != 0) { print "the last step: eta_s " a ", not 0"; x = 1 }
       last = e }
     END { exit x }' "$tmp/log" > "$tmp/why" || bad "--log: $(head -1 "$tmp/why")"

if command -v script > /dev/null 2>&1; then
  script -qc "'$gpt' --seed $seed --steps 4 --sample 0" "$tmp/tty" > /dev/null 2>&1 < /dev/null
  n=$(tr '\r' '\n' < "$tmp/tty" | grep -ac 'te-gpt: step [1-4]/4, [0-9.]* s elapsed, ETA [0-9.]* s (.* ms/step, the median), [0-9]* tokens/s')
  [ "$n" = 4 ] || bad "on a terminal: $n progress lines, not 4"
  script -qc "'$gpt' --seed $seed --steps 2 --sample 0 -q" "$tmp/tty" > /dev/null 2>&1 < /dev/null
  grep -aq 'ETA' "$tmp/tty" && bad "-q on a terminal: a progress line"
else
  echo "# no script(1): the terminal's progress line is not checked"
fi
exit $fail
