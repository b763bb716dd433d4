#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# te-gpt-mpi.sh -- te-gpt started by a launcher, one rank a process, on
# vdev, the tiny model, --dp 2:
#  1. by mpirun (the MPI te-gpt was built with, tools/Makefile.inc): the
#     forked --dp 2 run's losses bit for bit, rank 1 silent; skipped when
#     configure found no MPI;
#  2. by Slurm's srun, faked: SLURM_PROCID, SLURM_NTASKS and SLURM_LOCALID
#     set by hand for two processes, the root from TECOMM_ROOT: the same
#     bits;
#  3. the misfits exit 2 naming the cause: --dp x --tp against the
#     launcher's size (srun, TECOMM_NRANKS, mpirun) and srun without
#     TECOMM_ROOT.
# Random seed each run (TE_TEST_SEED to repeat).
# Exit 0 pass, 1 fail, 77 skip (TE_DEVICE=cuda without a GPU).
demo_tool=te-gpt
. "$(dirname "$0")/demo-lib.sh"
gpt=$demo
tmp=$(mktemp -d "${TMPDIR:-/tmp}/te-gpt-mpi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
fail=0
# the launchers' variables of an outer job are not this test's
unset TECOMM_RANK TECOMM_NRANKS TECOMM_ROOT SLURM_PROCID SLURM_NTASKS SLURM_LOCALID \
  OMPI_COMM_WORLD_RANK OMPI_COMM_WORLD_SIZE PMI_RANK PMI_SIZE PMIX_RANK

# bits A B WHAT: step, loss, val_loss, lr of A and B the same
bits() {
  cut -d, -f1-4 "$1" > "$tmp/b1"
  cut -d, -f1-4 "$2" > "$tmp/b2"
  if [ "$(wc -l < "$tmp/b1")" -lt 6 ] || ! cmp -s "$tmp/b1" "$tmp/b2"; then
    echo "FAIL: $3: other losses:"; diff "$tmp/b1" "$tmp/b2"; fail=1
  else
    echo "# $3: the forked run's losses, bit for bit"
  fi
}
# misfit WHAT PATTERN CMD...: CMD exits 2 and says PATTERN on stderr
misfit() {
  what=$1 pat=$2; shift 2
  "$@" > /dev/null 2> "$tmp/m.err"; rc=$?
  if [ $rc != 2 ] || ! grep -q -- "$pat" "$tmp/m.err"; then
    echo "FAIL: $what: exit $rc (want 2), stderr:"; cat "$tmp/m.err"; fail=1
  fi
}

opts="--seed $seed --lr 2e-3 --steps 5 --batch 2 --sample 0 --eval-every 0 --csv -q"
"$gpt" $opts --dp 2 > "$tmp/fork.csv" 2> "$tmp/fork.err" ||
  { echo "FAIL: te-gpt --dp 2 (forked):"; cat "$tmp/fork.err"; exit 1; }

# 1. mpirun: the MPI whose mpicc built te-gpt (tools/Makefile.inc's order)
mpirun=
if [ -n "${MPICC_OPENMPI:-}" ]; then mpirun=${MPIRUN_OPENMPI:-}
elif [ -n "${MPICC_MPICH:-}" ]; then mpirun=${MPIRUN_MPICH:-}
elif [ -n "${MPICC_OTHER:-}" ]; then mpirun=${MPIRUN_OTHER:-}
fi
if [ -n "$mpirun" ]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  flags=
  "$mpirun" --version 2>&1 | grep -q "Open MPI\|OpenRTE" && flags=--oversubscribe
  # MPI libraries keep allocations to exit: leak reports there are not ours
  export ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=0"
  # each rank's stdout to its own file: rank 0's rows, rank 1's nothing
  ranks_lock   # the launch's ranks together (demo-lib.sh)
  if timeout 300 "$mpirun" $flags -n 2 sh -c \
      'r=${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-$PMIX_RANK}}; exec "$0" "$@" > "'"$tmp"'/mpi$r.csv"' \
      "$gpt" $opts --dp 2 2> "$tmp/mpi.err"; then
    bits "$tmp/fork.csv" "$tmp/mpi0.csv" "mpirun -n 2 te-gpt --dp 2"
    [ -s "$tmp/mpi1.csv" ] && { echo "FAIL: rank 1 under mpirun printed rows"; fail=1; }
  else
    echo "FAIL: mpirun -n 2 te-gpt --dp 2:"; cat "$tmp/mpi.err"; fail=1
  fi
  misfit "mpirun -n 2 te-gpt --dp 4" "mpirun: 2 ranks, but --dp 4 x --tp 1" \
    timeout 300 "$mpirun" $flags -n 2 "$gpt" $opts --dp 4
  ranks_unlock
  unset ASAN_OPTIONS
else
  echo "# no MPI found by configure: mpirun not tested"
fi

# 2. srun, faked: two tasks on this host, the root by hand
secret=$(od -An -N32 -tx1 /dev/urandom | tr -d ' \n')
port=$((20000 + (seed + 7919) % 20000))
ranks_lock
for r in 0 1; do
  SLURM_PROCID=$r SLURM_NTASKS=2 SLURM_LOCALID=$r TECOMM_SECRET=$secret \
    TECOMM_ROOT=127.0.0.1:$port "$gpt" $opts --dp 2 > "$tmp/slurm$r.csv" 2> "$tmp/slurm$r.err" &
  eval "pid$r=\$!"
done
wait $pid0; rc0=$?
wait $pid1; rc1=$?
ranks_unlock
if [ $rc0 = 0 ] && [ $rc1 = 0 ]; then
  bits "$tmp/fork.csv" "$tmp/slurm0.csv" "srun (faked) te-gpt --dp 2"
  [ -s "$tmp/slurm1.csv" ] && { echo "FAIL: task 1 under srun printed rows"; fail=1; }
else
  echo "FAIL: srun (faked) te-gpt --dp 2: exits $rc0 and $rc1:"
  cat "$tmp/slurm0.err" "$tmp/slurm1.err"; fail=1
fi

# 3. misfits, each process on its own (none waits for a peer)
misfit "srun with 2 tasks, --dp 4" "srun: 2 ranks, but --dp 4 x --tp 1 is 4" \
  env SLURM_PROCID=0 SLURM_NTASKS=2 TECOMM_ROOT=127.0.0.1:1 "$gpt" $opts --dp 4
misfit "srun with 2 tasks, no --dp" "srun: 2 ranks, but --dp 1 x --tp 1 is 1" \
  env SLURM_PROCID=1 SLURM_NTASKS=2 TECOMM_ROOT=127.0.0.1:1 "$gpt" $opts
misfit "srun without TECOMM_ROOT" "set TECOMM_ROOT=host:port" \
  env SLURM_PROCID=0 SLURM_NTASKS=2 "$gpt" $opts --dp 2
misfit "TECOMM_NRANKS 2, --dp 2 --tp 2" "TECOMM_NRANKS: 2 ranks, but --dp 2 x --tp 2 is 4" \
  env TECOMM_RANK=0 TECOMM_NRANKS=2 TECOMM_ROOT=127.0.0.1:1 "$gpt" $opts --dp 2 --tp 2
# TECOMM_RANK wins over Slurm's variables: its size, not SLURM_NTASKS's
misfit "TECOMM_RANK with SLURM_NTASKS" "TECOMM_NRANKS: 3 ranks, but --dp 2" \
  env TECOMM_RANK=0 TECOMM_NRANKS=3 SLURM_PROCID=0 SLURM_NTASKS=2 "$gpt" $opts --dp 2

[ $fail = 0 ] && echo "ok: te-gpt launched by mpirun and srun (seed $seed)"
exit $fail
