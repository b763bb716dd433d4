#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# t/demo/bpe-hf.sh -- te-gpt's byte-level BPE (tools/gpt/gpt_bpe.c, through
# bpe_check --encode/--decode) against Hugging Face's tokenizers package
# (issue 60).  Two tokenizers are trained here with tokenizers on the man
# pages' text, random UTF-8 and random bytes (as Latin-1 text): GPT-2's
# (a ByteLevel pre-tokenizer with its regex) and Llama 3's (a Sequence of
# a Split on Llama 3's regex and a ByteLevel without one, ignore_merges),
# each with an added special token, saved as tokenizer.json.  12000
# seeded random strings (every character class of bpe-regex.sh, the
# special token, random code points of every UTF-8 length, man page
# lines, the empty string) are encoded by both: the same ids, and
# decode(encode(x)) == x on both sides (te-gpt also decodes tokenizers'
# ids back to x).  Random bytes, invalid UTF-8 among them (tokenizers
# takes no such text), round-trip through te-gpt alone.  The seed is
# printed; TE_TEST_SEED repeats a run.
# bpe_check's modes are checked on the hand-worked fixture first.
# Exit 0 pass, 1 fail, 77 skip (no python3, or no tokenizers package:
# no generated fixture stands in for it).
# Environment (from t/Makefile.inc): top_builddir, srcdir;
# TE_TOKENIZERS_PYTHON, a Python that has tokenizers (else python3):
# Debian packages none, so .ci/run makes a virtual environment with it.
set -u
check=${BPE_CHECK:-${top_builddir:-.}/t/demo/bpe_check}
[ -x "$check" ] || { echo "FAIL: $check not built"; exit 1; }
# the modes the comparison drives, on the hand-worked fixture first (so
# they are checked where tokenizers is missing too): "the the", "", 0xff
fix=${srcdir:-.}/t/demo/bpe/tokenizer.json
got=$(printf '74686520746865\n\nff\n' | "$check" --encode "$fix" | tr '\n' '|')
[ "$got" = "257 258||255|" ] || { echo "FAIL: bpe_check --encode: '$got', not '257 258||255|'"; exit 1; }
got=$(printf '257 258\n\n255\n' | "$check" --decode "$fix" | tr '\n' '|')
[ "$got" = "74686520746865||ff|" ] || { echo "FAIL: bpe_check --decode: '$got'"; exit 1; }
printf '99999\n' | "$check" --decode "$fix" > /dev/null 2>&1 &&
  { echo "FAIL: bpe_check --decode took an id that is no token"; exit 1; }
py=${TE_TOKENIZERS_PYTHON:-python3}
command -v "$py" >/dev/null 2>&1 || { echo "# skip: no $py"; exit 77; }
"$py" -c 'import tokenizers' 2>/dev/null ||
  { echo "# skip: Python's tokenizers package (Hugging Face) is not installed"; exit 77; }
man=${srcdir:-.}/man
[ -d "$man/man1" ] || { echo "FAIL: no man pages under $man"; exit 1; }
seed=${TE_TEST_SEED:-$(date +%s)}
echo "# seed $seed"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bpe-hf.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
"$py" - "$check" "$seed" "$man" "$tmp" <<'PY'
import glob, json, os, random, subprocess, sys
check, seed, man, tmp = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
try:
    import tokenizers
    from tokenizers import Tokenizer, Regex, decoders, models, pre_tokenizers, trainers
except Exception as e:
    print("# skip: tokenizers does not import what this test needs: %r" % (e,))
    sys.exit(77)
print("# tokenizers %s" % getattr(tokenizers, "__version__", "?"))
LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
          r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIAL = "<|endoftext|>"
rng = random.Random(seed)
fails = 0

def ok(cond, what):
    global fails
    print("%sok - %s" % ("" if cond else "not ", what))
    fails += not cond

def rand_cp():
    """a random Unicode scalar value of 1, 2, 3 or 4 UTF-8 bytes"""
    lo, hi = rng.choice([(0, 0x7f), (0x80, 0x7ff), (0x800, 0xffff), (0x10000, 0x10ffff)])
    c = rng.randint(lo, hi)
    return chr(c) if not 0xd800 <= c <= 0xdfff else "x"

# every class bpe-regex.sh draws from, and the special token as one "character"
CHARS = list("aZsStTrReEvVmMlLdDk   '''\n\r\t7.!($") + [
    "\u017f", "\u00e9", "\u0431", "\u4e2d", "\u00a0", "\u2003", "\u0661", "\u00b2",
    "\U0001F600", "\u3000", "\u0301", SPECIAL]

lines = []
for path in sorted(glob.glob(os.path.join(man, "man[137]", "*"))):
    with open(path, encoding="utf-8", errors="replace") as f:
        lines += [l for l in f.read().split("\n") if l]
if len(lines) < 1000:
    print("not ok - the man pages under %s hold %d lines, not 1000 or more" % (man, len(lines)))
    sys.exit(1)

def corpus():
    """the training text: the man pages, random UTF-8, random bytes as Latin-1"""
    for l in lines:
        yield l + "\n"
    for _ in range(3000):
        yield "".join(rand_cp() for _ in range(rng.randint(1, 60)))
        yield bytes(rng.getrandbits(8) for _ in range(rng.randint(1, 60))).decode("latin-1")

def strings(n):
    """n test strings: the empty one, class mixtures, code points, man lines"""
    out = [""]
    while len(out) < n:
        k = rng.randrange(4)
        if k == 0:
            out.append("".join(rng.choice(CHARS) for _ in range(rng.randint(1, 40))))
        elif k == 1:
            out.append("".join(rand_cp() for _ in range(rng.randint(1, 30))))
        elif k == 2:
            out.append(rng.choice(lines))
        else:   # a man line with classes spliced in
            l = rng.choice(lines)
            at = rng.randint(0, len(l))
            out.append(l[:at] + "".join(rng.choice(CHARS) for _ in range(5)) + l[at:])
    return out

def train(name, llama3):
    """a byte-level BPE trained by tokenizers, saved as tmp/name.json"""
    tok = Tokenizer(models.BPE())
    if llama3:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=3000, min_frequency=2, show_progress=False,
                                  special_tokens=[SPECIAL],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus(), trainer=trainer)
    j = json.loads(tok.to_str())
    if llama3:   # as Llama 3's tokenizer.json has it
        j["model"]["ignore_merges"] = True
    text = json.dumps(j, ensure_ascii=False)
    tok = Tokenizer.from_str(text)
    back = json.loads(tok.to_str())
    if llama3 and back["model"].get("ignore_merges") is not True:
        # a tokenizers older than the flag: both sides read the file without it
        print("# %s: tokenizers %s keeps no model.ignore_merges: compared without it"
              % (name, getattr(tokenizers, "__version__", "?")))
    path = os.path.join(tmp, name + ".json")
    with open(path, "w", encoding="utf-8") as f:
        f.write(tok.to_str())
    nm = len(back["model"]["merges"])
    print("# %s: %d tokens, %d merges, pre_tokenizer %s" %
          (name, tok.get_vocab_size(), nm, back["pre_tokenizer"]["type"]))
    ok(nm >= 1000 and tok.token_to_id(SPECIAL) is not None,
       "%s: trained, 1000 merges or more, the special token added" % name)
    return tok, path

def tool(mode, path, feed):
    """bpe_check --encode/--decode path over feed's lines: the output lines"""
    r = subprocess.run([check, mode, path], input="".join(l + "\n" for l in feed).encode(),
                       capture_output=True)
    if r.returncode:
        print("# bpe_check %s %s: exit %d: %s" % (mode, path, r.returncode,
                                                r.stderr.decode(errors="replace")[:300]))
        return None
    return r.stdout.decode().split("\n")[:len(feed)]

def compare(name, tok, path, texts):
    enc = tok.encode_batch(texts, add_special_tokens=False)
    hf = [e.ids for e in enc]
    te = tool("--encode", path, [t.encode("utf-8").hex() for t in texts])
    if te is None:
        return ok(False, "%s: bpe_check --encode reads tokenizers' file" % name)
    te = [[int(x) for x in l.split()] for l in te]
    bad = [i for i in range(len(texts)) if hf[i] != te[i]]
    for i in bad[:5]:
        print("# %s: %r: tokenizers %s, te-gpt %s" % (name, texts[i], hf[i][:20], te[i][:20]))
    ok(not bad and len(te) == len(texts),
       "%s: %d strings, the same ids from tokenizers and te-gpt" % (name, len(texts)))
    hdec = tok.decode_batch(hf, skip_special_tokens=False)
    bad = [i for i in range(len(texts)) if hdec[i] != texts[i]]
    for i in bad[:3]:
        print("# %s: tokenizers decodes %r as %r" % (name, texts[i], hdec[i]))
    ok(not bad, "%s: decode(encode(x)) == x by tokenizers" % name)
    tdec = tool("--decode", path, [" ".join(map(str, ids)) for ids in hf])
    bad = [i for i in range(len(texts)) if tdec is None or tdec[i] != texts[i].encode().hex()]
    for i in bad[:3]:
        print("# %s: te-gpt decodes the ids of %r otherwise" % (name, texts[i]))
    ok(not bad, "%s: decode(encode(x)) == x by te-gpt" % name)

def bytes_round_trip(name, path):
    raw = [bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 80))) for _ in range(2000)]
    ids = tool("--encode", path, [b.hex() for b in raw])
    back = tool("--decode", path, ids) if ids is not None else None
    good = back is not None and all(back[i] == raw[i].hex() for i in range(len(raw)))
    ok(good, "%s: 2000 random byte strings (invalid UTF-8 among them) round-trip in te-gpt"
       % name)

for name, llama3 in (("gpt2", False), ("llama3", True)):
    try:
        tok, path = train(name, llama3)
    except Exception as e:
        print("not ok - %s: training with tokenizers failed: %r" % (name, e))
        fails += 1
        continue
    compare(name, tok, path, strings(12000))
    bytes_round_trip(name, path)
sys.exit(1 if fails else 0)
PY
