#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-dp.sh -- te-gpt --dp (ranks as forked processes, libtecomm's
# data-parallel group) on vdev, the tiny model:
#  1. --dp 2 --batch 2 and --dp 4 --batch 1 give the losses of one process
#     with --batch 4 within GPT_DP_TOL (te-gpt itself fails when the
#     ranks' losses differ in a bit); FP8 delayed within GPT_DP_TOL_FP8;
#  2. --zero 1, 2 and 3 the same losses and norms as --zero 0, bit for
#     bit (the same sums, two ranks; AdamW per element on the shards;
#     every stage clips by the norm of the shards' norms; each layer's
#     gathered values are the values); FP8 delayed --zero 3 within
#     GPT_DP_TOL_FP8 (AdamW no longer writes the FP8 codes: the forward
#     quantizes the gathered weight); --zero 3 --recipe delayed gathers FP8 codes, bit for
#     bit the losses of gathering the values (TECORE_OPS_FUSION_OFF);
#     --zero 2's and 3's gradients out of the ring (the default) the bits
#     of --grad-shards 0's whole buffers, with --accum 2 within GPT_DP_TOL;
#     the token table held as shards (--table-shards, the default under
#     --zero 2, 3) within GPT_DP_TOL of the whole table, RoPE and learned
#     positions, its bytes less, --sample gathering it whole; FP8 delayed
#     --zero 3 with selective recomputation (the codes gathered again
#     inside the backward) within GPT_DP_TOL_FP8 of --zero 0;
#  3. --dp 2 --tp 2 (4 ranks, a 2-D grid) within GPT_DP_TOL of one process;
#     with --zero 2 and 3 --zero 0's losses and norms bit for bit; with
#     --sp too (te-gpt-dp-zero-sp: the tp sum of the norms' gradients once
#     read unreduced elements, the tp ranks' dp shards lying apart);
#     --dp 2 as two processes launched by TECOMM_RANK, TECOMM_NRANKS and
#     TECOMM_ROOT: the forked run's losses, bit for bit;
#  4. checkpoints: --dp 2 --zero 1, 3 steps, --save, --load, 3 more: the
#     losses and files of 6 steps straight, bit for bit; that checkpoint
#     continued with --dp 4 --zero 2 and with one process within
#     GPT_DP_TOL; the model file of --zero 1 the same bytes as --zero 0's;
#     --zero 3: 6 steps straight and 3 + 3 resumed bit for bit, its files
#     the same bytes as --zero 2's, and the --zero 1 checkpoint continued
#     with --dp 4 --zero 3 within GPT_DP_TOL; the same with --tp 2, its
#     checkpoint continued by --zero 0 bit for bit;
#  5. a rank killed mid-run: te-gpt exits 1 naming it, no hang; te-gpt
#     itself killed: its ranks end with it;
#  6. the misfits exit 2;
#  7. --eval with --dp (the batches shared out) within GPT_EVAL_TOL of one
#     process, with --tp within GPT_DP_TOL; --save-hf from --dp --zero 1
#     and --dp --tp the bytes of one process's; --load-hf on --dp --zero 2
#     and --tp 2 scores as one process.
# Random seed each run (TE_TEST_SEED to repeat).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-dp.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0

# Against one process the relative difference of each step's loss (lr
# 2e-3, 5 steps): the ranks' gradients are summed in another order than
# one process's rows (the weight-gradient GEMMs over fewer rows, then
# the allreduce), BF16 rounding apart.  Observed at most 4.3e-4 over 40
# seeds (--dp 2 --batch 2 against --batch 4); the limit is 11x that, and
# te-gpt --tp's, whose partial sums part alike.
GPT_DP_TOL=0.005
# FP8 (delayed scaling, the amaxes reduced over the ranks): te-gpt --tp's
# limit (a sum rounded otherwise can move an activation across an E4M3
# step)
GPT_DP_TOL_FP8=0.02

gpt_tol=$GPT_DP_TOL   # close's default (demo-lib.sh)
# bits A B WHAT: step, loss, val_loss, lr, grad_norm of A and B the same
bits() {
  cut -d, -f1-5 "$1" > "$tmp/b1"
  cut -d, -f1-5 "$2" > "$tmp/b2"
  cmp -s "$tmp/b1" "$tmp/b2" || { echo "FAIL: $3: other losses or norms:"; diff "$tmp/b1" "$tmp/b2"; fail=1; }
}
run() {   # run OUT ARGS...: te-gpt ARGS > OUT, or FAIL
  out=$1; shift
  "$gpt" "$@" > "$out" 2> "$tmp/err" ||
    { echo "FAIL: te-gpt $* fails:"; cat "$tmp/err"; fail=1; }
}

opts="--seed $seed --lr 2e-3 --steps 5 --sample 0 --eval-every 0 --csv -q"
# 1. against one process of the global batch
run "$tmp/one.csv" $opts --batch 4
run "$tmp/d2.csv" $opts --batch 2 --dp 2
run "$tmp/d4.csv" $opts --batch 1 --dp 4
close "$tmp/one.csv" "$tmp/d2.csv" "--dp 2 --batch 2 against one process --batch 4"
close "$tmp/one.csv" "$tmp/d4.csv" "--dp 4 --batch 1 against one process --batch 4"
# FP8: every rank quantizes with the amaxes of all
run "$tmp/f1.csv" $opts --batch 4 --recipe delayed
run "$tmp/f2.csv" $opts --batch 2 --dp 2 --recipe delayed
close "$tmp/f1.csv" "$tmp/f2.csv" "--dp 2 --recipe delayed against one process" "$GPT_DP_TOL_FP8"
# 2. the ZeRO stages
run "$tmp/z1.csv" $opts --batch 2 --dp 2 --zero 1
run "$tmp/z2.csv" $opts --batch 2 --dp 2 --zero 2
bits "$tmp/d2.csv" "$tmp/z1.csv" "--zero 1 against --zero 0"
bits "$tmp/d2.csv" "$tmp/z2.csv" "--zero 2 against --zero 0"
run "$tmp/z3.csv" $opts --batch 2 --dp 2 --zero 3
bits "$tmp/d2.csv" "$tmp/z3.csv" "--zero 3 against --zero 0"
# the gradients reduce-scattered out of the ring (the default) or kept
# whole: the same reduction, the same bits; with two microbatches a step
# each reduced, then added in the shard (within GPT_DP_TOL of --zero 0)
run "$tmp/a0.csv" $opts --batch 1 --accum 2 --dp 2
for z in 2 3; do
  run "$tmp/z${z}w.csv" $opts --batch 2 --dp 2 --zero $z --grad-shards 0
  bits "$tmp/z$z.csv" "$tmp/z${z}w.csv" "--zero $z --grad-shards 0 against 1"
  run "$tmp/a$z.csv" $opts --batch 1 --accum 2 --dp 2 --zero $z
  close "$tmp/a0.csv" "$tmp/a$z.csv" "--zero $z --accum 2 against --zero 0"
  zo="--seed $seed --steps 1 --sample 0 --eval-every 0 --batch 2 --dp 2 --zero $z"
  "$gpt" $zo 2>&1 | grep -q "; gradients: shards" ||
    { echo "FAIL: --zero $z keeps whole gradients (no '; gradients:' in the # dp: line)"; fail=1; }
  "$gpt" $zo --grad-shards 0 2>&1 | grep -q "; gradients:" &&
    { echo "FAIL: --zero $z --grad-shards 0 still shards the gradients"; fail=1; }
done
# the token table held as shards (the default under --zero 2, 3): the
# rows move instead of the table, and its gradient is summed over every
# rank's tokens in one pass (another order than a rank's sum, then the
# reduction: within GPT_DP_TOL of the whole table); a learned position
# table too (--rope 0: the token rows in F32, the positions added as one
# process adds them); the group holds the shards, the table bytes less;
# generation gathers the table whole again
for z in 2 3; do
  for rp in 1 0; do
    run "$tmp/t${z}r$rp.csv" $opts --batch 2 --dp 2 --zero $z --rope $rp --table-shards 0
    run "$tmp/s${z}r$rp.csv" $opts --batch 2 --dp 2 --zero $z --rope $rp
    close "$tmp/t${z}r$rp.csv" "$tmp/s${z}r$rp.csv" "--zero $z --rope $rp table shards against whole"
  done
done
to="--seed $seed --steps 1 --sample 0 --eval-every 0 --batch 2 --dp 2 --zero 3 --vocab 4096"
"$gpt" $to > "$tmp/ts.txt" 2>&1 || { echo "FAIL: te-gpt $to fails:"; cat "$tmp/ts.txt"; fail=1; }
"$gpt" $to --table-shards 0 > "$tmp/tw.txt" 2>&1 || { echo "FAIL: --table-shards 0 fails"; fail=1; }
grep -q "; tables: shards " "$tmp/ts.txt" ||
  { echo "FAIL: --zero 3 keeps the whole table (no '; tables:' in the # dp: line)"; fail=1; }
grep -q "; tables:" "$tmp/tw.txt" && { echo "FAIL: --table-shards 0 still shards the table"; fail=1; }
# the table's MiB in the device memory line: whole, 2 x 4096 x 64 x 4 bytes
tab() { sed -n 's/.*embedding tables and gradients \([0-9.]*\).*/\1/p' "$1"; }
echo "# vocab 4096: embedding tables $(tab "$tmp/tw.txt") MiB whole, $(tab "$tmp/ts.txt") MiB as shards a rank"
awk -v w="$(tab "$tmp/tw.txt")" -v s="$(tab "$tmp/ts.txt")" 'BEGIN { exit !(w >= 1.9 && s < 0.75 * w) }' ||
  { echo "FAIL: the table's shards take $(tab "$tmp/ts.txt") MiB, the whole $(tab "$tmp/tw.txt")"; fail=1; }
run "$tmp/sample.txt" --seed $seed --steps 2 --eval-every 0 --batch 2 --dp 2 --zero 2 --sample 16 --json
grep -q '"sample"' "$tmp/sample.txt" || { echo "FAIL: --zero 2 --sample with table shards"; fail=1; }
run "$tmp/f3.csv" $opts --batch 2 --dp 2 --zero 3 --recipe delayed
close "$tmp/f2.csv" "$tmp/f3.csv" "--zero 3 --recipe delayed against --zero 0" "$GPT_DP_TOL_FP8"
# the FP8 codes gathered again for a recomputed forward inside the
# backward (selective recomputation), every Linear in FP8
export TECORE_OPS_FP8_MIN_MNK=0
run "$tmp/r0.csv" $opts --batch 2 --dp 2 --recipe delayed --recompute selective
run "$tmp/r3.csv" $opts --batch 2 --dp 2 --zero 3 --recipe delayed --recompute selective
unset TECORE_OPS_FP8_MIN_MNK
close "$tmp/r0.csv" "$tmp/r3.csv" "--zero 3 --recipe delayed --recompute selective against --zero 0" \
  "$GPT_DP_TOL_FP8"
# delayed scaling: the Linears' weights gathered as FP8 codes (the group
# says how many buckets), the losses those of gathering their BF16 values
# (TECORE_OPS_FUSION_OFF=weight_fp8) bit for bit; every Linear in FP8
# (TECORE_OPS_FP8_MIN_MNK=0: on a GPU this model's small Linears stay
# BF16, and then no weight has codes to gather)
TECORE_OPS_FP8_MIN_MNK=0 "$gpt" --seed $seed --steps 1 --sample 0 --eval-every 0 --batch 2 \
  --dp 2 --zero 3 --recipe delayed > "$tmp/f3d" 2>&1
grep -q "[1-9][0-9]* buckets of FP8 codes" "$tmp/f3d" ||
  { echo "FAIL: --zero 3 --recipe delayed gathers no FP8 codes:"; grep "dp:" "$tmp/f3d"; fail=1; }
TECORE_OPS_FP8_MIN_MNK=0 run "$tmp/f3c.csv" $opts --batch 2 --dp 2 --zero 3 --recipe delayed
TECORE_OPS_FP8_MIN_MNK=0 TECORE_OPS_FUSION_OFF=weight_fp8 run "$tmp/f3v.csv" $opts --batch 2 \
  --dp 2 --zero 3 --recipe delayed
bits "$tmp/f3c.csv" "$tmp/f3v.csv" "--zero 3 --recipe delayed: FP8 codes against BF16 values"
# 3. --dp 2 --tp 2
run "$tmp/dt.csv" $opts --batch 2 --dp 2 --tp 2
close "$tmp/one.csv" "$tmp/dt.csv" "--dp 2 --tp 2 --batch 2 against one process --batch 4"
# --zero 2 and 3 with --tp: each dp group shards its tp rank's slices; the
# norm from the shards (replicated and split apart): --zero 0's bits
for z in 2 3; do
  run "$tmp/dt$z.csv" $opts --batch 2 --dp 2 --tp 2 --zero $z
  bits "$tmp/dt.csv" "$tmp/dt$z.csv" "--dp 2 --tp 2 --zero $z against --zero 0"
done
# seed 10: --zero 2's norm once parted from --zero 0's in its last bits
# (4.08792925 against 4.08792973 at step 1), and the losses from step 4
o10="--seed 10 --lr 2e-3 --steps 5 --sample 0 --eval-every 0 --csv -q --batch 2 --dp 2 --tp 2"
run "$tmp/s10a.csv" $o10
run "$tmp/s10b.csv" $o10 --zero 2
bits "$tmp/s10a.csv" "$tmp/s10b.csv" "--seed 10 --dp 2 --tp 2 --zero 2 against --zero 0"
# te-gpt-dp-zero-sp: --sp sums the replicated gradients over the tp ranks;
# under --zero 2, 3 made whole over the dp ranks first (x + 0 is x), so
# the gradients are --zero 0's, and so is the norm (every stage adds the
# same parts in one order: once the stages' norms differed in their last
# bits, and the later losses by up to 1.1e-4 on 3 of 9 seeds)
run "$tmp/ds.csv" $opts --batch 2 --dp 2 --tp 2 --sp
for z in 2 3; do
  run "$tmp/ds$z.csv" $opts --batch 2 --dp 2 --tp 2 --sp --zero $z
  bits "$tmp/ds.csv" "$tmp/ds$z.csv" "te-gpt-dp-zero-sp: --dp 2 --tp 2 --sp --zero $z against --zero 0"
done

# one process a rank, launched by TECOMM_RANK / TECOMM_NRANKS / TECOMM_ROOT
# (as mpirun or srun would, here on one host): the forked run's bits
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
port=$((20000 + seed % 20000))
ranks_lock   # the two processes together (demo-lib.sh)
for r in 0 1; do
  TECOMM_SECRET=$secret TECOMM_RANK=$r TECOMM_NRANKS=2 TECOMM_ROOT=127.0.0.1:$port \
    "$gpt" $opts --batch 2 --dp 2 > "$tmp/env$r.csv" 2> "$tmp/env$r.err" &
  eval "pid$r=\$!"
done
wait $pid0; rc0=$?
wait $pid1; rc1=$?
ranks_unlock
if [ $rc0 = 0 ] && [ $rc1 = 0 ]; then
  bits "$tmp/d2.csv" "$tmp/env0.csv" "--dp 2 launched by TECOMM_RANK against forked"
  [ -s "$tmp/env1.csv" ] && { echo "FAIL: rank 1 of a TECOMM_RANK launch printed rows"; fail=1; }
else
  echo "FAIL: --dp 2 launched by TECOMM_RANK: exits $rc0 and $rc1:"; cat "$tmp/env0.err" "$tmp/env1.err"
  fail=1
fi

# 4. checkpoints
co="--seed $seed --lr 2e-3 --batch 2 --sample 0 --eval-every 0 --csv -q --decay-steps 6"
run "$tmp/a.csv" $co --dp 2 --zero 1 --steps 6 --save "$tmp/a"
run "$tmp/b1.csv" $co --dp 2 --zero 1 --steps 3 --save "$tmp/b3"
run "$tmp/b2.csv" $co --dp 2 --zero 1 --steps 6 --load "$tmp/b3" --save "$tmp/b"
{ cat "$tmp/b1.csv"; sed 1d "$tmp/b2.csv"; } > "$tmp/b.csv"
bits "$tmp/a.csv" "$tmp/b.csv" "--dp 2 --zero 1: 6 steps straight and 3 + 3 resumed"
for f in model optimizer; do
  cmp -s "$tmp/a/$f.safetensors" "$tmp/b/$f.safetensors" ||
    { echo "FAIL: --dp 2 --zero 1 straight and resumed: $f.safetensors differs"; fail=1; }
done
run "$tmp/z0.csv" $co --dp 2 --steps 3 --save "$tmp/z0"
cmp -s "$tmp/z0/model.safetensors" "$tmp/b3/model.safetensors" ||
  { echo "FAIL: the model file of --zero 1 differs from --zero 0's"; fail=1; }
{ head -1 "$tmp/a.csv"; sed -n '5,7p' "$tmp/a.csv"; } > "$tmp/a3.csv"
run "$tmp/x4.csv" $co --dp 4 --batch 1 --zero 2 --steps 6 --load "$tmp/b3"
run "$tmp/x1.csv" $co --batch 4 --steps 6 --load "$tmp/b3"
close "$tmp/a3.csv" "$tmp/x4.csv" "--dp 2 --zero 1 checkpoint on with --dp 4 --zero 2"
close "$tmp/a3.csv" "$tmp/x1.csv" "--dp 2 --zero 1 checkpoint on with one process"
# --zero 3: the passes gather the values; --save the masters' shards
run "$tmp/c.csv" $co --dp 2 --zero 3 --steps 6
run "$tmp/c1.csv" $co --dp 2 --zero 3 --steps 3 --save "$tmp/c3"
run "$tmp/c2.csv" $co --dp 2 --zero 3 --steps 6 --load "$tmp/c3"
{ cat "$tmp/c1.csv"; sed 1d "$tmp/c2.csv"; } > "$tmp/cc.csv"
bits "$tmp/c.csv" "$tmp/cc.csv" "--dp 2 --zero 3: 6 steps straight and 3 + 3 resumed"
run "$tmp/y2.csv" $co --dp 2 --zero 2 --steps 3 --save "$tmp/y2"
for f in model optimizer; do
  cmp -s "$tmp/y2/$f.safetensors" "$tmp/c3/$f.safetensors" ||
    { echo "FAIL: --dp 2: $f.safetensors of --zero 3 differs from --zero 2's"; fail=1; }
done
run "$tmp/x3.csv" $co --dp 4 --batch 1 --zero 3 --steps 6 --load "$tmp/b3"
close "$tmp/a3.csv" "$tmp/x3.csv" "--dp 2 --zero 1 checkpoint on with --dp 4 --zero 3"
# --dp 2 --tp 2 --zero 3: 3 + 3 resumed bit for bit, the files --zero 2's,
# and its checkpoint goes on with --zero 0 as with --zero 3
ct="$co --dp 2 --tp 2"
run "$tmp/t.csv" $ct --zero 3 --steps 6
run "$tmp/t1.csv" $ct --zero 3 --steps 3 --save "$tmp/t3"
run "$tmp/t2.csv" $ct --zero 3 --steps 6 --load "$tmp/t3"
{ cat "$tmp/t1.csv"; sed 1d "$tmp/t2.csv"; } > "$tmp/tt.csv"
bits "$tmp/t.csv" "$tmp/tt.csv" "--dp 2 --tp 2 --zero 3: 6 steps straight and 3 + 3 resumed"
run "$tmp/u2.csv" $ct --zero 2 --steps 3 --save "$tmp/u2"
for f in model optimizer; do
  cmp -s "$tmp/u2/$f.safetensors" "$tmp/t3/$f.safetensors" ||
    { echo "FAIL: --dp 2 --tp 2: $f.safetensors of --zero 3 differs from --zero 2's"; fail=1; }
done
run "$tmp/t0.csv" $ct --zero 0 --steps 6 --load "$tmp/t3"
bits "$tmp/t2.csv" "$tmp/t0.csv" "--dp 2 --tp 2 --zero 3 checkpoint on with --zero 0"

# 7. --eval, --save-hf and --load-hf with --dp (and --tp): every rank
# holds the whole model.  --eval's batches are shared out, their sums
# added: one process's loss within GPT_EVAL_TOL (each batch the same
# forward; the sums added in F32, 6e-8 of themselves: observed the same
# printed digits); with --tp the partial sums round otherwise: GPT_DP_TOL
GPT_EVAL_TOL=1e-5
"$gpt" --help > "$tmp/ev.txt"
ev() { "$gpt" --eval "$tmp/ev.txt" -q "$@" 2> "$tmp/err" | sed -n 's/^eval loss \([^ ]*\) .*/\1/p'; }
within() {   # within A B TOL WHAT
  awk -v a="$1" -v b="$2" -v t="$3" 'BEGIN { d = (a - b) / a; if (d < 0) d = -d
    exit !(a != "" && b != "" && d <= t) }' ||
    { echo "FAIL: $4: loss '$2', one process '$1' (limit $3): $(head -1 "$tmp/err")"; fail=1; }
}
one=$(ev --load "$tmp/b3")
within "$one" "$(ev --load "$tmp/b3" --dp 2)" $GPT_EVAL_TOL "--eval --dp 2"
within "$one" "$(ev --load "$tmp/b3" --dp 3 --zero 1)" $GPT_EVAL_TOL "--eval --dp 3 --zero 1"
within "$one" "$(ev --load "$tmp/b3" --dp 2 --tp 2)" $GPT_DP_TOL "--eval --dp 2 --tp 2"
# GPT-2's layout: --save-hf from the ranks writes one process's bytes (the
# shards made whole, the slices gathered), --load-hf on the ranks scores
# as one process
run "$tmp/g.csv" --seed "$seed" --rope 0 --steps 2 --sample 0 -q --save "$tmp/g" --save-hf "$tmp/g1"
for r in "--dp 2 --zero 1" "--dp 2 --tp 2"; do
  rm -rf "$tmp/g2"
  run "$tmp/g.csv" --load "$tmp/g" --sample 0 -q --save-hf "$tmp/g2" $r
  cmp -s "$tmp/g1/model.safetensors" "$tmp/g2/model.safetensors" ||
    { echo "FAIL: --save-hf $r: another model.safetensors than one process's"; fail=1; }
done
one=$(ev --load-hf "$tmp/g1")
within "$one" "$(ev --load-hf "$tmp/g1" --dp 2 --zero 2)" $GPT_EVAL_TOL "--load-hf --dp 2 --zero 2 --eval"
within "$one" "$(ev --load-hf "$tmp/g1" --tp 2)" $GPT_DP_TOL "--load-hf --tp 2 --eval"

# 5. a rank killed mid-run: its parent names it and ends the others
: > "$tmp/k.csv"   # there before the loop below reads it
ranks_lock   # the tool itself (its child is the rank killed), under the lock
"$demo_real" --seed "$seed" --batch 2 --dp 2 --steps 100000 --sample 0 --eval-every 0 --csv \
  > "$tmp/k.csv" 2> "$tmp/k.err" &
pid=$!
n=0
while [ "$(wc -l < "$tmp/k.csv")" -lt 3 ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n + 1)); done
victim=$(ps -o pid= --ppid "$pid" | sort -n | tail -1)
if [ -n "$victim" ]; then
  kill -9 $victim
  n=0
  while kill -0 "$pid" 2>/dev/null && [ $n -lt 600 ]; do sleep 0.2; n=$((n + 1)); done
  if kill -0 "$pid" 2>/dev/null; then
    echo "FAIL: te-gpt --dp 2 still runs 120 s after a rank was killed"; kill -9 "$pid"; fail=1
  fi
  wait "$pid"; rc=$?
  [ $rc -ne 0 ] && grep -q "rank 1 died of signal 9" "$tmp/k.err" ||
    { echo "FAIL: a killed rank: exit $rc, stderr:"; cat "$tmp/k.err"; fail=1; }
else
  echo "FAIL: te-gpt --dp 2 had no rank to kill"; kill -9 "$pid"; fail=1
fi
ranks_unlock

# te-gpt itself killed (SIGKILL; or of SIGPIPE, `te-gpt --dp 2 | head`):
# its ranks end with it, none left training or waiting for the others
# (one waited an hour in the last barrier)
mark=$((seed + 7777777))
: > "$tmp/o.csv"
ranks_lock
"$demo_real" --seed $mark --batch 2 --dp 2 --steps 100000 --sample 0 --eval-every 0 --csv \
  > "$tmp/o.csv" 2> /dev/null &
pid=$!
n=0
while [ "$(wc -l < "$tmp/o.csv")" -lt 3 ] && [ $n -lt 600 ]; do sleep 0.2; n=$((n + 1)); done
kill -9 $pid
wait $pid 2> /dev/null
n=0
while pgrep -f -- "--seed $mark " > /dev/null && [ $n -lt 50 ]; do sleep 0.2; n=$((n + 1)); done
if pgrep -f -- "--seed $mark " > /dev/null; then
  echo "FAIL: the ranks of a te-gpt --dp killed still run 10 s later"
  pkill -9 -f -- "--seed $mark "; fail=1
fi
ranks_unlock

# 6. misfits
for bad in "--zero 1" "--dp 4 --tp 4" "--dp 2 --offload" "--zero 4 --dp 2" \
           "--dp 2 --zero 3 --sample 8"; do
  "$gpt" $bad --steps 1 > /dev/null 2>&1
  rc=$?
  [ $rc = 2 ] || { echo "FAIL: te-gpt $bad exits $rc, not 2"; fail=1; }
done

[ $fail = 0 ] && echo "ok: te-gpt --dp (seed $seed)"
exit $fail
