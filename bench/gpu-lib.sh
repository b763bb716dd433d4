# SPDX-License-Identifier: Apache-2.0
# bench/gpu-lib.sh -- what the session GPU scripts (gpu-run-s15.sh,
# gpu-run-s16.sh, gpu-run-s18.sh, gpu-run-s19.sh, gpu-run-s20.sh,
# gpu-run-s21.sh, gpu-run-s22.sh, gpu-run-s23.sh, gpu-run-s24.sh,
# gpu-run-s25.sh, gpu-run-s26.sh, gpu-run-s27.sh, gpu-run-s28.sh,
# gpu-run-s29.sh, gpu-run-s30.sh, gpu-run-s31.sh, gpu-run-s32.sh,
# gpu-run-s33.sh, gpu-run-s34.sh, gpu-run-s35.sh, gpu-run-s36.sh,
# gpu-run-s37.sh, gpu-fp8attn.sh) share,
# sourced after they set default_phases: $out,
# $summary, $phases (PHASES or default_phases), PyTorch's cuDNN as
# TECORE_CUDNN_LIB, the idle memory, and
#   step NAME COMMAND...  runs COMMAND bounded by STEP_TIMEOUT seconds (150),
#                         output to $out/NAME.txt and .err, nvidia-smi's memory
#                         every MEM_MS ms (100) to $out/NAME.mem, a summary line
#   has PHASE             is PHASE among $phases
#   smi NAME COMMAND...   step NAME with nvidia-smi's SM clock, power,
#                         temperature and throttle reasons every 50 ms to
#                         $out/NAME-smi.csv
#   export_rep BASE       BASE.ncu-rep (Nsight Compute) to BASE-details.txt
#                         and BASE-source.csv.gz, the report removed
# With TAR set, every step ends by packing $out into the file TAR (for the
# device tool, which brings back at most 8 files under its $OUT, and what
# is there when a call runs out of time: a call cut short keeps its
# finished steps).  OUT must then lie outside the tool's $OUT (session
# 20's first call set OUT=$OUT: the step files filled the 8 slots and the
# tar did not come back); a TAR inside OUT is refused.
out=${OUT:-gpu-out}
mkdir -p "$out"
if [ -n "${TAR:-}" ] && [ "$(cd "$(dirname "$TAR")" 2>/dev/null && pwd -P)" = "$(cd "$out" && pwd -P)" ]; then
  echo "gpu-lib.sh: TAR ($TAR) lies in OUT ($out): put OUT elsewhere (OUT=/tmp/o)" >&2
  exit 2
fi
summary="$out/summary.txt"
phases=${PHASES:-$default_phases}
cudnn=$(python3 -c 'import nvidia.cudnn; print(list(nvidia.cudnn.__path__)[0])' 2>/dev/null)
[ -n "$cudnn" ] && export TECORE_CUDNN_LIB="$cudnn/lib/libcudnn.so.9"
base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
step() {
  local name=$1
  shift
  local t0=$SECONDS
  nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms "${MEM_MS:-100}" \
    > "$out/$name.mem" 2>/dev/null &
  local mon=$!
  timeout "${STEP_TIMEOUT:-150}" "$@" > "$out/$name.txt" 2> "$out/$name.err"
  local rc=$?
  kill "$mon" 2>/dev/null
  wait "$mon" 2>/dev/null
  local peak
  peak=$(sort -n "$out/$name.mem" | tail -1)
  printf '%-24s rc %3d %4d s  peak %6s MiB  %s\n' "$name" "$rc" $((SECONDS - t0)) \
    "$(( ${peak:-0} - ${base:-0} ))" "$*" >> "$summary"
  if [ -n "${TAR:-}" ]; then tar czf "$TAR.part" -C "$out" . && mv "$TAR.part" "$TAR"; fi
}
has() { case " $phases " in *" $1 "*) return 0 ;; esac; return 1; }
export_rep() {
  /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page details > "$1-details.txt" 2>&1
  /usr/local/cuda/bin/ncu --import "$1.ncu-rep" --page source --csv --print-source sass \
    2>&1 | gzip > "$1-source.csv.gz"
  rm -f "$1.ncu-rep"
}
smi() {
  local name=$1
  shift
  nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_event_reasons.active \
    --format=csv -lms 50 > "$out/$name-smi.csv" 2>/dev/null &
  local mon=$!
  step "$name" "$@"
  kill $mon 2>/dev/null
  wait $mon 2>/dev/null
}
