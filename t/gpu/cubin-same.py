#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""cubin-same.py -- whether two cubins hold the same machine code.

A kernel split into named __forceinline__ stages (funcs.sh's limits) is
meant to compile to the same instructions; without cuobjdump this shows
it: every kernel's .text, .nv.info, .nv.shared and .nv.constant0 section
is compared byte for byte (with its size, flags and register field).

  nvcc -O3 -std=c++17 -cubin -arch sm_90a -Ikernels -o before.cubin kernels/norm.cu
  (edit, then the same into after.cubin)
  python3 t/gpu/cubin-same.py before.cubin after.cubin [SECTION]

Prints each section that differs (and, with SECTION, how many of its
16-byte instructions differ) and exits 1 when one does.
"""
import hashlib
import struct
import sys

KEPT = ('.text.', '.nv.info.', '.nv.shared.', '.nv.constant0.')


def sections(path):
    """name -> (bytes, size, flags, info) of the sections compared."""
    d = open(path, 'rb').read()
    if d[:4] != b'\x7fELF' or d[4] != 2:
        sys.exit('%s: not a 64-bit ELF (a cubin: nvcc -cubin)' % path)
    shoff, = struct.unpack_from('<Q', d, 0x28)
    size, count, names = struct.unpack_from('<HHH', d, 0x3a)
    hdr = [struct.unpack_from('<IIQQQQIIQQ', d, shoff + i * size) for i in range(count)]
    base = hdr[names][4]
    out = {}
    for h in hdr:
        name = d[base + h[0]:d.index(b'\0', base + h[0])].decode()
        if name.startswith(KEPT):
            body = b'' if h[1] == 8 else d[h[4]:h[4] + h[5]]   # SHT_NOBITS: no bytes
            out[name] = (body, h[5], h[2], h[7])
    return out


def main(argv):
    if len(argv) not in (2, 3):
        sys.exit(__doc__)
    a, b = sections(argv[0]), sections(argv[1])
    differ = 0
    for k in sorted(set(a) | set(b)):
        x, y = a.get(k), b.get(k)
        if x != y:
            differ += 1
            show = [None if s is None else (hashlib.sha1(s[0]).hexdigest()[:12],) + s[1:]
                    for s in (x, y)]
            print('differs: %s %s -> %s' % (k, show[0], show[1]))
    if len(argv) == 3 and argv[2] in a and argv[2] in b:
        x, y = a[argv[2]][0], b[argv[2]][0]
        n = sum(x[i:i + 16] != y[i:i + 16] for i in range(0, max(len(x), len(y)), 16))
        print('%s: %d of %d instructions differ' % (argv[2], n, max(len(x), len(y)) // 16))
    print('%d sections compared, %d differ' % (len(set(a) | set(b)), differ))
    return 1 if differ else 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
