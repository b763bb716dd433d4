#!/bin/sh
# fatbin-arch.sh -- every kernels/*.fatbin the build made holds SASS for
# sm_90 and sm_90a (Hopper, the tuned target), read with cuobjdump --list-elf.
# Exit 0: all good; 77: skip (built without CUDA, or no cuobjdump);
# 1: a fatbin lacks an architecture, or none was built.
# Environment (from t/Makefile.inc): CUOBJDUMP, top_builddir, TE_T_HAVE_CUDA.

if test "x$TE_T_HAVE_CUDA" != xyes; then
  echo "SKIP: built without CUDA (no fatbins)"
  exit 77
fi
if test -z "$CUOBJDUMP" || ! test -x "$CUOBJDUMP"; then
  echo "SKIP: cuobjdump not found at configure time"
  exit 77
fi

dir="${top_builddir:-.}/kernels"
found=0
bad=0
for fb in "$dir"/*.fatbin; do
  test -f "$fb" || continue
  found=$((found + 1))
  if ! list=$("$CUOBJDUMP" --list-elf "$fb" 2>&1); then
    echo "FAIL: $CUOBJDUMP --list-elf $fb failed:"
    echo "$list"
    bad=1
    continue
  fi
  # Names read like "ELF file    1: elementwise.1.sm_90a.cubin": pull out
  # the sm_XX[a] tokens and compare them whole (sm_90 is not sm_90a).
  archs=$(echo "$list" | grep -o 'sm_[0-9][0-9]*[a-z]*' | sort -u | tr '\n' ' ')
  for want in sm_90 sm_90a; do
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
