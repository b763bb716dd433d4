#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/demo/bpe-regex.sh -- te-gpt's hand-written pre-tokenizers against the
# regular expressions they stand for: 20000 random strings (seeded,
# TE_TEST_SEED repeats a run) over characters of every class the
# splitters know (ASCII letters of the contractions in both cases, digits,
# spaces, tabs, CR, LF, quotes, punctuation, Latin, Cyrillic, CJK,
# U+017F, NBSP, em space, Arabic digits, superscripts, an emoji, a
# combining mark) are split by bpe_check --split and by Python's regex
# module with GPT-2's and Llama 3's patterns; every split must be the
# same.  Exit 77 when python3 or its regex module is missing.
set -u
command -v python3 >/dev/null 2>&1 || { echo "no python3"; exit 77; }
python3 -c 'import regex' 2>/dev/null || { echo "no Python regex module"; exit 77; }
check=${BPE_CHECK:-${top_builddir:-.}/t/demo/bpe_check}
[ -x "$check" ] || { echo "FAIL: $check not built"; exit 1; }
seed=${TE_TEST_SEED:-$(date +%s)}
echo "# seed $seed"
exec python3 - "$check" "$seed" <<'PY'
import random, regex, subprocess, sys
check, seed = sys.argv[1], int(sys.argv[2])
pats = {
    "gpt2": r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",
    "llama3": r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
              r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+",
}
chars = list("aZsStTrReEvVmMlLdDk   '''\n\r\t7.!($") + [
    "\u017f", "\u00e9", "\u0431", "\u4e2d", "\u00a0", "\u2003", "\u0661", "\u00b2",
    "\U0001F600", "\u3000", "\u0301"]
rng = random.Random(seed)
texts = ["".join(rng.choice(chars) for _ in range(rng.randint(1, 40))) for _ in range(20000)]
fail = 0
for name, pat in pats.items():
    feed = "".join(t.encode().hex() + "\n" for t in texts).encode()
    got = subprocess.run([check, "--split", name], input=feed, capture_output=True,
                         check=True).stdout.decode().split("\n")
    bad = [t for t, g in zip(texts, got)
           if g != ",".join(p.encode().hex() for p in regex.findall(pat, t))]
    for t in bad[:5]:
        print("# %s: %r split differently" % (name, t))
    print("%sok - %s: 20000 random strings split as the regex splits them"
          % ("not " if bad else "", name))
    fail |= bool(bad)
sys.exit(1 if fail else 0)
PY
