#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-files.sh -- te-gpt given hostile files (issue 57, "Hangs and
# hostile files"); each case failed before its fix:
#  1. --data naming a FIFO, or a checkpoint whose model.safetensors is
#     one: refused at once, exit 1 (both blocked in open() forever);
#     --data /dev/zero: refused as a device (read until allocation failed);
#  2. a 2.5 GB sparse checkpoint whose header length is 0, and one with a
#     valid header naming a 2.5 GB tensor but no te-gpt metadata: refused
#     from the 8-byte length and the header alone, in well under 512 MiB
#     of memory (the whole file was read first: 2.8 GB);
#  3. --data files past te-gpt's corpus limit (1 GiB in all, a sparse
#     file): refused before reading (were read, then trained on);
#  4. a checkpoint with 200,000 zero-byte tensors (an 11 MB valid
#     header): parsed and refused in well under a minute (duplicate names
#     were looked for by comparing every pair: still parsing after 60 s);
#  5. a metadata value holding an escape sequence (ESC ] 0 ; ... BEL
#     ESC [ 2 J): stderr carries it as \x1b... text, never the raw bytes
#     (it wrote to the user's terminal); "__metadata__" twice, the first
#     empty: refused (was accepted).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
# Environment (from t/Makefile.inc): top_builddir.
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-files.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
# a hang is a failure, not a stuck make check: every run is bounded
limit=60
bounded() {
  if command -v timeout > /dev/null; then timeout "$limit" "$@"; else "$@"; fi
}

# refused WORDS ARGS...: te-gpt ARGS exits 1 within $limit s, saying WORDS
refused() {
  want=$1
  shift
  bounded "$gpt" "$@" --steps 1 --sample 0 -q > "$tmp/out" 2> "$tmp/err"
  rc=$?
  if [ $rc != 1 ] || ! grep -q -- "$want" "$tmp/err"; then
    echo "FAIL: te-gpt $*: exit $rc (want 1; 124 is a hang), stderr: $(head -2 "$tmp/err")"
    fail=1
  fi
}

# 1. FIFOs and devices
mkfifo "$tmp/fifo" || { echo "FAIL: mkfifo"; exit 1; }
refused "not a regular file" --data "$tmp/fifo"
refused "not a regular file" --data /dev/zero
mkdir "$tmp/fifo-ckpt" && mkfifo "$tmp/fifo-ckpt/model.safetensors"
refused "not a regular file" --load "$tmp/fifo-ckpt"

# safetensors files: the 8-byte length, the header, then data
le8() {
  n=$1 i=0
  while [ $i -lt 8 ]; do
    printf "\\$(printf %03o $((n % 256)))"
    n=$((n / 256)) i=$((i + 1))
  done
}
mkst() {
  mkdir -p "$(dirname "$1")"
  { le8 ${#2}; printf '%s' "$2"; } > "$1"
}

# 2. large sparse files: only the header is read (peak memory where
# /usr/bin/time can tell it)
big=2500000000
mkdir -p "$tmp/zero-hdr" && truncate -s $big "$tmp/zero-hdr/model.safetensors" ||
  { echo "FAIL: truncate"; exit 1; }
hdr="{\"x\":{\"dtype\":\"U8\",\"shape\":[$big],\"data_offsets\":[0,$big]}}"
mkst "$tmp/big-tensor/model.safetensors" "$hdr"
truncate -s $((8 + ${#hdr} + big)) "$tmp/big-tensor/model.safetensors"
for c in "zero-hdr:the header is empty" "big-tensor:not a te-gpt checkpoint"; do
  refused "${c#*:}" --load "$tmp/${c%%:*}"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f '%M' -o "$tmp/rss" "$gpt" --load "$tmp/${c%%:*}" --steps 1 -q \
      > /dev/null 2>&1
    kb=$(tail -1 "$tmp/rss")
    echo "# ${c%%:*}: a $big-byte checkpoint refused in $kb KiB"
    [ "$kb" -lt 524288 ] 2> /dev/null ||
      { echo "FAIL: ${c%%:*}: peak memory $kb KiB (limit 512 MiB): the file was read"; fail=1; }
  fi
done

# 3. --data past 1 GiB in all (two files of 600 MB, sparse)
truncate -s 600000000 "$tmp/d1" "$tmp/d2"
refused "corpus limit of 1024 MiB" --data "$tmp/d1" --data "$tmp/d2"

# 4. 200,000 zero-byte tensors
awk 'BEGIN { printf "{"; for (i = 0; i < 200000; i++)
  printf "%s\"t%d\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[0,0]}", i ? "," : "", i
  printf "}" }' > "$tmp/many.json"
hn=$(wc -c < "$tmp/many.json")
mkdir -p "$tmp/many" && { le8 $hn; cat "$tmp/many.json"; } > "$tmp/many/model.safetensors"
t0=$(date +%s)
refused "not a te-gpt checkpoint" --load "$tmp/many"
echo "# 200000 tensors ($hn bytes of header): refused in $(( $(date +%s) - t0 )) s (limit $limit)"

# 5. escapes and a second "__metadata__"
mkst "$tmp/esc/model.safetensors" '{"__metadata__":{"format":"\u001b]0;owned\u0007\u001b[2J"}}'
refused 'format": \\x1b]0;owned\\x07\\x1b\[2J' --load "$tmp/esc"
if tr -d '\033\007' < "$tmp/err" | cmp -s - "$tmp/err"; then :; else
  echo "FAIL: a checkpoint's escape sequence reached stderr raw: $(od -c "$tmp/err" | head -3)"
  fail=1
fi
mkst "$tmp/meta2/model.safetensors" '{"__metadata__":{},"__metadata__":{"format":"te-gpt 1"}}'
refused '"__metadata__" twice' --load "$tmp/meta2"
exit $fail
