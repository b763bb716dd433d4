# SPDX-License-Identifier: Apache-2.0
"""pdl-entry.py -- every kernel of kernels/*.cu and *.cuh (but comm_ar.cu,
whose entry points run ar_pdl_enter, and graph_fire.cu, launched by the
device runtime) begins with te_pdl_enter();.  libtecore launches its own
kernels with programmatic dependent launch (te_kernel_launch_pdl,
TECORE_PDL): a kernel that touched memory before griddepcontrol.wait, or
returned without running it, would race with the kernel before it.
Prints each offender as file:line and exits 1; 0 when there is none."""
import glob
import os
import re
import sys

SKIP = {"comm_ar.cu", "graph_fire.cu"}


def strip_comments(s):
    # // comments to end of line (keeps the newlines: line numbers hold)
    return re.sub(r"//[^\n]*", "", re.sub(r"/\*.*?\*/", lambda m: "\n" * m.group(0).count("\n"),
                                              s, flags=re.S))


def body_start(s, i):
    """Index just past the '{' opening the body of the kernel whose
    __global__ is at i: the first brace outside parentheses."""
    depth = 0
    while i < len(s):
        c = s[i]
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "{" and depth == 0:
            return i + 1
        elif c == ";" and depth == 0:
            return -1  # a declaration, not a definition
        i += 1
    return -1


def check(path):
    s = strip_comments(open(path).read())
    bad = []
    for m in re.finditer(r"\b__global__\b", s):
        b = body_start(s, m.end())
        if b < 0:
            continue
        rest = re.sub(r"[\s\\]+", " ", s[b:b + 200]).lstrip()
        if not rest.startswith("te_pdl_enter();"):
            bad.append(s.count("\n", 0, m.start()) + 1)
    return bad


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else "."
    files = sorted(glob.glob(os.path.join(root, "kernels", "*.cu")) +
                   glob.glob(os.path.join(root, "kernels", "*.cuh")))
    status, n = 0, 0
    for f in files:
        if os.path.basename(f) in SKIP:
            continue
        n += 1
        for line in check(f):
            print("%s:%d: a kernel whose first statement is not te_pdl_enter();" % (f, line))
            status = 1
    if n == 0:
        print("no kernels/*.cu found under %s" % root)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
