#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# fatbin-arch.sh -- every kernels/*.fatbin the build made holds SASS for
# sm_90 and sm_90a (Hopper, the tuned target; attention.fatbin and
# gemm16.fatbin sm_90a alone, for their wgmma kernels), read with cuobjdump --list-elf,
# or, where the toolkit has no cuobjdump, from the fatbin's own entry headers
# (magic 0xBA55ED50; each entry: kind 1 PTX / 2 ELF at byte 0, header size
# at 4, payload size at 8, SM number at 28, flags at 40 with 0x100000 set
# for the arch-specific "a" variant).
# Exit 0: all good; 77: skip (built without CUDA);
# 1: a fatbin lacks an architecture, or none was built.
# Environment (from t/Makefile.inc): CUOBJDUMP, top_builddir, TE_T_HAVE_CUDA.

if test "x$TE_T_HAVE_CUDA" != xyes; then
  echo "SKIP: built without CUDA (no fatbins)"
  exit 77
fi

# The sm_XX[a] tokens of fb's ELF entries and "compute_XX" for its PTX, read
# from the container itself.
list_entries() {
  od -An -tu1 -v "$1" | tr -s ' \n' '\n\n' | awk '
    NF { b[n++] = $1 }
    function u(o, w,   v, i) { v = 0; for (i = w - 1; i >= 0; i--) v = v * 256 + b[o + i]; return v }
    END {
      if (u(0, 4) != 3126193488) { print "BADMAGIC"; exit }
      off = u(6, 2); end = off + u(8, 8)
      while (off < end) {
        kind = u(off, 2); hs = u(off + 4, 4); size = u(off + 8, 8); sm = u(off + 28, 4)
        a = (int(u(off + 40, 4) / 1048576) % 2) ? "a" : ""
        if (kind == 2) print "sm_" sm a; else if (kind == 1) print "compute_" sm
        off += hs + size
      }
    }'
}

dir="${top_builddir:-.}/kernels"
found=0
bad=0
for fb in "$dir"/*.fatbin; do
  test -f "$fb" || continue
  found=$((found + 1))
  if test -n "$CUOBJDUMP" && test -x "$CUOBJDUMP"; then
    if ! list=$("$CUOBJDUMP" --list-elf "$fb" 2>&1); then
      echo "FAIL: $CUOBJDUMP --list-elf $fb failed:"
      echo "$list"
      bad=1
      continue
    fi
  else
    list=$(list_entries "$fb")
    case "$list" in
      *BADMAGIC*) echo "FAIL: $fb is not a fatbin"; bad=1; continue ;;
      *compute_*) ;;
      *)
        # graph_fire is device-linked with the device runtime, which a
        # JIT-compiled image could not be linked with: machine code only
        case "$fb" in
          */graph_fire.fatbin) ;;
          *) echo "FAIL: $fb has no PTX for newer GPUs"; bad=1 ;;
        esac
        ;;
    esac
  fi
  # Names read like "ELF file    1: elementwise.1.sm_90a.cubin": pull out
  # the sm_XX[a] tokens and compare them whole (sm_90 is not sm_90a).
  archs=$(echo "$list" | grep -o 'sm_[0-9][0-9]*[a-z]*' | sort -u | tr '\n' ' ')
  # attention.fatbin and gemm16.fatbin hold wgmma kernels: sm_90a without
  # plain sm_90, so that a Hopper GPU loads them (NVCC_GENCODE_WG, m4/te.m4)
  wants="sm_90 sm_90a"
  case "$fb" in */attention.fatbin | */gemm16.fatbin) wants="sm_90a" ;; esac
  for want in $wants; do
    case " $archs " in
      *" $want "*) ;;
      *)
        echo "FAIL: $fb has no $want code (has: ${archs:-nothing})"
        bad=1
        ;;
    esac
  done
  echo "$fb: $archs"
done

if test "$found" -eq 0; then
  echo "FAIL: no fatbins under $dir although the build has CUDA"
  exit 1
fi
exit $bad
