#!/bin/bash
# SPDX-License-Identifier: Apache-2.0
# bench/gpu-run-dp.sh -- data parallelism and the suites on a multi-GPU
# machine, beside PyTorch's DDP and FSDP2 in the same call, from the top of
# a configured and built tree:
#
#     OUT=gpu-out PHASES="check coll small big" bash bench/gpu-run-dp.sh
#
# Phases (any subset, in this order):
#   build   the test programs, none run (make check TESTS=): the check
#           phase's time then goes to the suites alone
#   check   make -k check under TE_DEVICE=cuda (CHECK_JOBS parallel, bounded
#           by CHECK_TIMEOUT seconds; CHECK_TESTS: only these, e.g. the
#           suites a call before did not reach -- a suite killed by the
#           bound starts over; CHECK_SHARD=i/n: the i-th of n round-robin
#           parts of `make print-tests`, so that n calls cover the whole
#           suite; CHECK_FIRST: suites started first, the slow multi-rank
#           ones by default, so that they do not start last and run past
#           the bound; TE_T_RANKS_LOCK, set by default, runs one
#           multi-rank case at a time across the suites); the failed
#           suites' logs in check.tgz,
#           then each failed suite again alone (alone-NAME.txt), and
#           those the bound cut off when at most ALONE_MAX (3): a Check
#           program runs directly, each TAP line stamped with the seconds
#           since its start, so that a run the bound kills keeps what it
#           reached (make deletes the .log of a killed suite)
#   coll    te-allreduce-perf -C reduce-scatter, allgather and allreduce on
#           2 and 4 GPUs, graph-captured, each size beside NCCL's own time
#   small   GPT-2 124M BF16, batch 32 x 1024 a GPU: te-gpt --dp 1 and 4,
#           --zero 1; torchrun DDP + torch.compile on 1 and 4 GPUs
#   big     1.3B FP8 delayed, batch 8 x 2048 a GPU: te-gpt --dp 1, 4 and
#           --zero 1 (memory); DDP and FSDP2 + torch.compile BF16 on 4 GPUs
#   sp      tensor and sequence parallelism over all the GPUs (n): te-gpt
#           1.3B FP8 delayed --tp n --sp's plan, --tp n, --tp n --sp with
#           TECOMM_SP_OVERLAP 1 (pulls over 1 and 4 streams; the gradient's
#           rows gathered instead of its codes; allgather+dgrad off) and 0;
#           te-demo --tp n --sp; te-allreduce-perf -C ag-gemm and gemm-rs
#           at Llama-3 8B's --tp 4 shapes (fc1 8192 x 7168 x 4096, fc2
#           8192 x 4096 x 3584), BF16 and E4M3, each with
#           TECOMM_AG_GEMM_PULLS / TECOMM_GEMM_RS_PULLS 1, 2 and 4
#   profile where --tp n --sp's step goes: te-gpt 1.3B FP8 delayed --profile
#           (eager, device time per kernel, each rank's report), one GPU and
#           --tp n --sp (TECOMM_AG_GEMM_PULLS and _GEMM_RS_PULLS 1, then 4)
#   llama   Llama-3 8B FP8 delayed, batch 1 x 8192 a GPU: te-gpt --dp n
#           --zero 3 --recompute selective; the peer FSDP2 + torch.compile
#           with torchao's Float8 (BF16, said so, where torchao is absent),
#           BF16 parameters gathered, F32 gradients reduced
#   attn    te-bench -A alone, then te-bench --all (the FP8 attention rows
#           of both); compute-sanitizer memcheck over the model path's suites
# END (seconds since the epoch): every bound is cut so that the script
# ends by then -- a device call that runs past its limit returns nothing
# (session 46 lost a whole call's results to a rerun alone).
# Each step is bounded by STEP_TIMEOUT seconds (300), writes $OUT/NAME.txt,
# and samples device memory (the busiest GPU's peak above idle in the
# summary).  Never changes clocks, power, MIG or multicast
# (NCCL_NVLS_ENABLE=0 as the machine sets it).
set -u
out=${OUT:-gpu-out}
mkdir -p "$out"
summary="$out/summary.txt"
phases=${PHASES:-check coll small big}
ngpu=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
cudnn=$(python3 -c 'import nvidia.cudnn, os; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
[ -n "$cudnn" ] && export TECORE_CUDNN_LIB="$cudnn/lib/libcudnn.so.9"
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | sort -n | tail -1)

step() {   # step NAME COMMAND...: output to $out/NAME.txt, the summary line
  local name=$1
  shift
  local t0=$SECONDS
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$out/$name.mem" 2>/dev/null &
  local mon=$!
  timeout "$(bound "${STEP_TIMEOUT:-300}")" "$@" > "$out/$name.txt" 2>&1
  local rc=$?
  kill "$mon" 2>/dev/null
  wait "$mon" 2>/dev/null
  local peak
  peak=$(sort -n "$out/$name.mem" | tail -1)
  rm -f "$out/$name.mem"
  printf '%-22s rc %3d %5d s  peak %6s MiB  %s\n' "$name" "$rc" $((SECONDS - t0)) \
    "$(( ${peak:-0} - ${base:-0} ))" "$*" >> "$summary"
}
has() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }
bound() {   # bound SECONDS: SECONDS, cut to what END leaves less MARGIN
  local b=$1 left
  if [ -n "${END:-}" ]; then
    left=$(( END - $(date +%s) - ${2:-10} ))
    [ "$left" -lt "$b" ] && b=$left
  fi
  echo $(( b > 0 ? b : 0 ))
}
peer() {   # peer NRANKS: gpt_peer.py speed's command, under torchrun past one rank
  if [ "$1" -gt 1 ]; then
    echo "python3 -m torch.distributed.run --standalone --nproc_per_node $1 bench/gpt_peer.py speed"
  else
    echo "python3 bench/gpt_peer.py speed"
  fi
}

if has build; then
  t0=$SECONDS
  make -j"$(nproc)" check TESTS= > "$out/build.txt" 2>&1
  printf '%-22s rc %3d %5d s  make check TESTS=\n' build "$?" $((SECONDS - t0)) >> "$summary"
fi
if has check; then
  if [ -n "${CHECK_SHARD:-}" ]; then
    CHECK_TESTS=$(make -s print-tests | awk -v i="${CHECK_SHARD%/*}" -v n="${CHECK_SHARD#*/}" \
      '(NR - 1) % n == i - 1' | tr '\n' ' ')
  fi
  all=${CHECK_TESTS:-$(make -s print-tests | tr '\n' ' ')}
  first=${CHECK_FIRST-t/comm/check_coll t/comm/check_dp t/comm/check_agree t/comm/check_misuse \
t/demo/te-gpt-tp.sh t/demo/te-gpt-dp.sh t/comm/check_fuser_sp t/comm/check_overlap}
  order=
  for t in $first; do case " $all " in *" $t "*) order="$order $t" ;; esac; done
  for t in $all; do case " $first " in *" $t "*) ;; *) order="$order $t" ;; esac; done
  CHECK_TESTS=${order# }
  t0=$SECONDS
  # one multi-rank case on the GPUs at a time (t/lib/comm_ranks.h: ranks
  # spinning for peers that another suite's case has descheduled), the
  # waits for it within the Check timeouts
  TE_DEVICE=cuda TE_T_RANKS_LOCK=${TE_T_RANKS_LOCK-/tmp/te-ranks.$$.lock} \
    CK_TIMEOUT_MULTIPLIER=${CK_TIMEOUT_MULTIPLIER:-3} \
    timeout "$(bound "${CHECK_TIMEOUT:-420}" "${CHECK_MARGIN:-60}")" \
    make -k -j"${CHECK_JOBS:-8}" check TESTS="$CHECK_TESTS" > "$out/check.txt" 2>&1
  rc=$?
  printf '%-22s rc %3d %5d s  make -k check TE_DEVICE=cuda\n' check "$rc" $((SECONDS - t0)) >> "$summary"
  grep -E '^(# |FAIL|ERROR|XPASS)' "$out/check.txt" | sort | uniq >> "$summary"
  fails=$(grep -lE '^:test-result: (FAIL|ERROR)' $(find t -name '*.trs') 2>/dev/null | sed 's/\.trs$/.log/')
  [ -n "$fails" ] && tar -czf "$out/check.tgz" $fails
  # each failed suite again, alone on the machine (a fault, or
  # contention?); the suites the bound cut off (no .trs) too when they
  # are few (ALONE_MAX, 3), else only listed: a bound that cut off most of
  # the suite would spend the call on them one by one (session 45)
  again=
  cut=
  for t in ${CHECK_TESTS:-$(make -s print-tests)}; do
    trs=${t%.sh}.trs
    if [ ! -f "$trs" ]; then cut="$cut $t"
    elif grep -qE '^:test-result: (FAIL|ERROR)' "$trs"; then again="$again $t"; fi
  done
  if [ "$(echo $cut | wc -w)" -le "${ALONE_MAX:-3}" ]; then again="$again$cut"
  else echo "not reached (CHECK_TESTS for the next call):$cut" >> "$summary"; fi
  for t in $again; do
    b=$(bound "${ALONE_TIMEOUT:-600}")
    if [ "$b" -lt 20 ]; then
      printf '%-22s not run alone: END leaves %d s\n' "$(basename "$t")" "$b" >> "$summary"
      continue
    fi
    case $t in
    *.sh)
      TE_DEVICE=cuda timeout "$b" make check TESTS="$t" > "$out/alone-$(basename "$t").txt" 2>&1
      rc=$?
      cp "${t%.sh}.log" "$out/alone-$(basename "$t").log" 2>/dev/null ;;
    *)
      s0=$(date +%s)
      TE_DEVICE=cuda CK_VERBOSITY=verbose timeout "$b" "./$t" 2>&1 |
        while IFS= read -r l; do printf '%4d %s\n' $(( $(date +%s) - s0 )) "$l"; done \
        > "$out/alone-$(basename "$t").txt"
      rc=${PIPESTATUS[0]} ;;
    esac
    printf '%-22s rc %3d  alone, bound %d s\n' "$(basename "$t")" "$rc" "$b" >> "$summary"
  done
fi
if has coll; then
  for n in 2 4; do
    [ "$ngpu" -ge "$n" ] || continue
    for c in reduce-scatter allgather allreduce; do
      step "$c-$n" tools/te-allreduce-perf -n "$n" -C "$c" -G 20 -b 8K -e 256M -f 4 -d bf16
    done
  done
fi
n=$(( ngpu >= 4 ? 4 : ngpu ))   # the data-parallel size
g="tools/te-gpt --synthetic --eval-every 0 --sample 0 --json"
if has small; then
  step small-dp1 $g --model gpt2-124m --batch 32 --steps 20
  [ "$n" -ge 2 ] && step small-dp$n $g --model gpt2-124m --batch 32 --steps 20 --dp $n
  [ "$n" -ge 2 ] && step small-dp$n-z1 $g --model gpt2-124m --batch 32 --steps 20 --dp $n --zero 1
  step small-peer1 $(peer 1) --model gpt2-124m --batch 32 --compile --steps 10 --warmup 3
  [ "$n" -ge 2 ] && step small-peer$n $(peer $n) --model gpt2-124m --batch 32 --compile --steps 10 --warmup 3
fi
if has big; then
  step big-dp1 $g --model gpt-1.3b --batch 8 --steps 12 --recipe delayed
  [ "$n" -ge 2 ] && step big-dp$n $g --model gpt-1.3b --batch 8 --steps 12 --recipe delayed --dp $n
  [ "$n" -ge 2 ] && step big-dp$n-z1 $g --model gpt-1.3b --batch 8 --steps 12 --recipe delayed --dp $n --zero 1
  [ "$n" -ge 2 ] && step big-peer$n $(peer $n) --model gpt-1.3b --batch 8 --compile --steps 8 --warmup 3
  [ "$n" -ge 2 ] && step big-fsdp$n $(peer $n) --model gpt-1.3b --batch 8 --compile --fsdp --steps 8 --warmup 3
fi
if has sp && [ "$n" -ge 2 ]; then
  b="$g --model gpt-1.3b --batch 8 --steps 12 --recipe delayed"
  # the plan: under FP8 both overlap groups (allgather+linear quantizing
  # the rows as they land, linear+reduce_scatter)
  step sp-plan$n tools/te-gpt --synthetic --eval-every 0 --model gpt-1.3b --batch 8 \
    --recipe delayed --tp $n --sp --steps 0 --sample 0 --plan
  step sp-tp$n $b --tp $n
  step sp-tp$n-sp env TECOMM_SP_OVERLAP=1 $b --tp $n --sp
  step sp-tp$n-sp-p4 env TECOMM_AG_GEMM_PULLS=4 TECOMM_GEMM_RS_PULLS=4 $b --tp $n --sp
  # the gradient's 16-bit rows gathered instead of its E5M2 codes
  # (allgather+dgrad, not allgather+dgrad8+dbias), then the backward's
  # gather inside dgrad off altogether
  step sp-tp$n-sp-dgrad16 env TECORE_OPS_FUSION_OFF=allgather+dgrad8+dbias $b --tp $n --sp
  step sp-tp$n-sp-nodgrad env TECORE_OPS_FUSION_OFF=allgather+dgrad,allgather+dgrad8,allgather+dgrad8+dbias,allgather+dgrad+dgelu \
    $b --tp $n --sp
  step sp-tp$n-sp-apart env TECOMM_SP_OVERLAP=0 $b --tp $n --sp
  step sp-demo$n tools/te-demo --tp $n --sp
  for d in bf16 e4m3; do
    for p in 1 2 4; do   # TECOMM_*_PULLS: copy streams a pull is split over
      step ag-gemm-$d-p$p env TECOMM_AG_GEMM_PULLS=$p tools/te-allreduce-perf -n $n -C ag-gemm \
        --mnk 8192,7168,4096 -G 20 -d $d
      step gemm-rs-$d-p$p env TECOMM_GEMM_RS_PULLS=$p tools/te-allreduce-perf -n $n -C gemm-rs \
        --mnk 8192,4096,3584 -G 20 -d $d
    done
  done
fi
if has profile; then
  p="tools/te-gpt --synthetic --eval-every 0 --sample 0 --model gpt-1.3b --batch 8 --steps 3 \
    --recipe delayed --profile"
  step profile-tp1 $p
  if [ "$n" -ge 2 ]; then
    for q in 1 4; do
      step profile-tp$n-sp-p$q env TECOMM_AG_GEMM_PULLS=$q TECOMM_GEMM_RS_PULLS=$q $p --tp $n --sp
    done
  fi
fi
if has llama && [ "$n" -ge 2 ]; then
  step llama-dp$n $g --model llama3-8b --batch 1 --steps 8 --recipe delayed --dp $n --zero 3 \
    --recompute selective
  step llama-fsdp$n $(peer $n) --model llama3-8b --batch 1 --compile --fsdp --float8 --steps 6 \
    --warmup 2
fi
if has attn; then
  step bench-attn tools/te-bench -A
  step bench-all tools/te-bench --all
  cs=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
  for s in check_attention check_attn_fp8 check_rope check_embedding check_xent check_norm check_gemm; do
    step "memcheck-$s" env TE_DEVICE=cuda CK_FORK=no "$cs" --tool memcheck --error-exitcode 9 "t/core/$s"
  done
fi
cat "$summary"
