#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""attn_peer.py -- the peer figures for libte's attention: PyTorch's
torch.nn.functional.scaled_dot_product_attention with its CUDNN_ATTENTION
and FLASH_ATTENTION backends (torch.nn.attention.sdpa_kernel), BF16,
causal, forward and forward + backward, timed with CUDA events on the
shapes of issue 29.

TFLOP/s count the causal half of the score matrix: 2 * 2 * B*H*S^2*D / 2
for the forward and 3.5 times that for forward + backward.

  python3 bench/attn_peer.py [--iters N] [--warmup N] [--shapes B,H,S,D ...]

Prints one line per (shape, backend, pass) and the versions it ran with.
"""
import argparse
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

SHAPES = [(16, 16, 2048, 128), (4, 16, 8192, 128), (32, 12, 1024, 64)]
BACKENDS = [("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)]


def flops_fwd(b, h, s, d):
    return 2 * 2 * b * h * s * s * d / 2


def time_ms(fn, iters, warmup):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    stop = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        fn()
    stop.record()
    stop.synchronize()
    return start.elapsed_time(stop) / iters


def run(shape, backend, iters, warmup):
    b, h, s, d = shape
    dev = "cuda"
    # [B, H, S, D] views of [B, S, H, D] storage: the token-major layout
    # libte's attention takes (THD with fixed lengths).
    q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16)
               .transpose(1, 2).requires_grad_(True) for _ in range(3))
    do = torch.randn(b, s, h, d, device=dev, dtype=torch.bfloat16).transpose(1, 2)
    out = {}
    with sdpa_kernel([backend]):
        def fwd():
            with torch.no_grad():
                F.scaled_dot_product_attention(q, k, v, is_causal=True)

        def fwd_bwd():
            o = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            torch.autograd.grad(o, (q, k, v), do)

        out["fwd"] = time_ms(fwd, iters, warmup)
        out["fwd+bwd"] = time_ms(fwd_bwd, iters, warmup)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--iters", type=int, default=50)
    ap.add_argument("--warmup", type=int, default=10)
    ap.add_argument("--shapes", nargs="*", default=None,
                    help="B,H,S,D tuples (default: the issue's three)")
    a = ap.parse_args()
    shapes = [tuple(int(x) for x in t.split(",")) for t in a.shapes] if a.shapes else SHAPES
    if not torch.cuda.is_available():
        print("SKIP: no CUDA device")
        return 77
    print(f"# torch {torch.__version__}, CUDA {torch.version.cuda}, "
          f"cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name()}")
    print(f"# {'B':>3} {'H':>3} {'S':>5} {'D':>4}  {'backend':<6} {'pass':<8} {'ms':>9} {'TFLOP/s':>8}")
    for shape in shapes:
        for name, backend in BACKENDS:
            try:
                t = run(shape, backend, a.iters, a.warmup)
            except RuntimeError as e:  # a backend that refuses the shape
                print(f"  {shape}  {name}: refused ({str(e).splitlines()[0]})")
                continue
            for pas, ms in t.items():
                fl = flops_fwd(*shape) * (3.5 if pas == "fwd+bwd" else 1.0)
                print(f"  {shape[0]:>3} {shape[1]:>3} {shape[2]:>5} {shape[3]:>4}  {name:<6} "
                      f"{pas:<8} {ms:9.3f} {fl / ms / 1e9:8.1f}")
            torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
