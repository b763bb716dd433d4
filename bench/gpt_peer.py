#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""gpt_peer.py -- te-gpt's PyTorch twin: the same model (token embedding
and, without RoPE, a learned position table, both F32; pre-norm blocks of
norm -> QKV Linear -> RoPE (rotate halves) -> causal attention -> output
Linear -> residual, norm -> fc1 -> GELU (tanh form) or a gated activation
-> fc2 -> residual; the final norm and an untied LM head without bias;
cross-entropy in F32), with te-gpt's parameter names, so that a te-gpt
checkpoint (model.safetensors) loads as its state_dict.

Three modes:

  check   loads a te-gpt checkpoint (step 0), draws the same token batches
          from the same file with te-gpt's sampler (splitmix64, the state
          in optimizer.safetensors), trains with te-gpt's AdamW (betas 0.9,
          0.95, eps 1e-8, decoupled weight decay on matrices and tables,
          global-norm clipping, linear warmup then cosine) under BF16
          autocast, and prints its losses beside te-gpt's (--te-json, the
          document of `te-gpt --json --load ...`).
  speed   trains a fresh model on random tokens with fp32 master weights,
          BF16 autocast, fused AdamW, its SDPA and (--compile) torch.compile,
          and prints ms/step, tokens/s, model TFLOP/s counted as te-gpt
          counts them (tokens/s x (6N + 6 L d T), N without the embedding
          tables) and the peak of torch.cuda.max_memory_allocated.  Under
          torchrun (WORLD_SIZE > 1) each rank trains --batch sequences of
          its own, wrapped in DDP (or --fsdp: FSDP2's fully_shard per
          block and at the top, BF16 parameters gathered and F32
          gradients reduced, as TorchTitan runs it); rank 0 prints,
          tokens/s counting every rank's, memory of rank 0.  --float8:
          torchao's Float8 training (tensorwise scaling) on every Linear
          but the LM head, where torchao is installed (else said, and
          BF16); --ac: each block's activations recomputed in the
          backward (torch.utils.checkpoint).
  decode  batch 1 greedy decoding with a KV cache (a plain PyTorch loop,
          BF16 weights, each token read back to the host as te-gpt does),
          tokens/s.

The safetensors reader is this file's own (8-byte header length, JSON
header, raw little-endian data), so nothing beyond torch is needed.
"""
import argparse
import json
import math
import os
import struct
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

PRESETS = {  # layers, hidden, heads, kv_heads, ffn, seq, vocab, norm, act, rope, bias
    "tiny": (2, 64, 4, 4, 256, 64, 256, "layernorm", "gelu", 1, 1),
    "gpt2-124m": (12, 768, 12, 12, 3072, 1024, 50304, "layernorm", "gelu", 0, 1),
    "gpt2-350m": (24, 1024, 16, 16, 4096, 1024, 50304, "layernorm", "gelu", 0, 1),
    "gpt-1.3b": (24, 2048, 16, 16, 8192, 2048, 50304, "layernorm", "gelu", 0, 1),
    "llama-1b": (16, 2048, 32, 8, 8192, 2048, 128256, "rmsnorm", "swiglu", 1, 0),
    "llama3-8b": (32, 4096, 32, 8, 14336, 8192, 128256, "rmsnorm", "swiglu", 1, 0),
}
ROPE_THETA = {"llama3-8b": 500000.0}  # te-gpt's presets; the others 10000
KEYS = ("layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab", "norm", "act", "rope",
        "bias")
MASK = (1 << 64) - 1


def read_safetensors(path):
    """(tensors by name, metadata) of a safetensors file."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        head = json.loads(f.read(n))
        data = f.read()
    meta = head.pop("__metadata__", {})
    dts = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16, "I32": torch.int32}
    out = {}
    for name, t in head.items():
        a, b = t["data_offsets"]
        out[name] = torch.frombuffer(bytearray(data[a:b]), dtype=dts[t["dtype"]]).reshape(t["shape"])
    return out, meta


class Norm(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.rms = c["norm"] == "rmsnorm"
        self.weight = nn.Parameter(torch.ones(c["hidden"]))
        if not self.rms:
            self.bias = nn.Parameter(torch.zeros(c["hidden"]))

    def forward(self, x):
        if self.rms:
            return F.rms_norm(x, (x.shape[-1],), self.weight, 1e-5)
        return F.layer_norm(x, (x.shape[-1],), self.weight, self.bias, 1e-5)


class Attn(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.h, self.kv = c["heads"], c["kv_heads"]
        self.d = c["hidden"] // c["heads"]
        self.qkv = nn.Linear(c["hidden"], (self.h + 2 * self.kv) * self.d, bias=bool(c["bias"]))
        self.proj = nn.Linear(self.h * self.d, c["hidden"], bias=bool(c["bias"]))

    def split(self, x):
        B, T, _ = x.shape
        q, k, v = self.qkv(x).split([self.h * self.d, self.kv * self.d, self.kv * self.d], -1)
        return (q.view(B, T, self.h, self.d), k.view(B, T, self.kv, self.d),
                v.view(B, T, self.kv, self.d))

    def forward(self, x, rope):
        B, T, _ = x.shape
        q, k, v = self.split(x)
        if rope is not None:
            q, k = rotate(q, rope[0][:T], rope[1][:T]), rotate(k, rope[0][:T], rope[1][:T])
        o = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                           is_causal=True, enable_gqa=self.kv != self.h)
        return self.proj(o.transpose(1, 2).reshape(B, T, self.h * self.d))


def rope_table(c, device):
    d = c["hidden"] // c["heads"]
    inv = c["rope_theta"] ** (-torch.arange(0, d // 2, dtype=torch.float64, device=device) * 2 / d)
    ang = torch.arange(c["seq"], dtype=torch.float64, device=device)[:, None] * inv[None, :]
    return torch.cos(ang).float(), torch.sin(ang).float()


def rotate(x, cos, sin):
    """x [B, T, heads, d] rotated by halves at positions given by cos/sin [T, d/2]."""
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h].float(), x[..., h:].float()
    cs, sn = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * cs - x2 * sn, x2 * cs + x1 * sn], -1).to(x.dtype)


class MLP(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.act = c["act"]
        g = 2 if self.act in ("swiglu", "geglu") else 1
        self.fc1 = nn.Linear(c["hidden"], g * c["ffn"], bias=bool(c["bias"]))
        self.fc2 = nn.Linear(c["ffn"], c["hidden"], bias=bool(c["bias"]))

    def forward(self, x):
        f = self.fc1(x)
        if self.act == "swiglu":
            a, b = f.chunk(2, -1)
            f = F.silu(a) * b
        elif self.act == "geglu":
            a, b = f.chunk(2, -1)
            f = F.gelu(a, approximate="tanh") * b
        elif self.act == "relu":
            f = F.relu(f)
        else:
            f = F.gelu(f, approximate="tanh")
        return self.fc2(f)


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.attn_norm, self.attn = Norm(c), Attn(c)
        self.mlp_norm, self.mlp = Norm(c), MLP(c)

    def forward(self, x, rope):
        x = x + self.attn(self.attn_norm(x), rope)
        return x + self.mlp(self.mlp_norm(x))


class GPT(nn.Module):
    def __init__(self, c, device):
        super().__init__()
        self.c = c
        self.tok_embeddings = nn.Embedding(c["vocab"], c["hidden"])
        if not c["rope"]:
            self.pos_embeddings = nn.Embedding(c["seq"], c["hidden"])
        self.layers = nn.ModuleList(Block(c) for _ in range(c["layers"]))
        self.norm = Norm(c)
        self.lm_head = nn.Linear(c["hidden"], c["vocab"], bias=False)
        self.rope = rope_table(c, device) if c["rope"] else None

    def forward(self, ids, labels=None):
        T = ids.shape[1]
        x = self.tok_embeddings(ids)
        if not self.c["rope"]:
            x = x + self.pos_embeddings.weight[:T][None]
        for b in self.layers:
            x = b(x, self.rope)
        logits = self.lm_head(self.norm(x))
        if labels is None:
            return logits
        return F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), labels.reshape(-1))

    def n_flop_params(self):
        """N of te-gpt's flop count: every parameter but the embedding tables."""
        n = sum(p.numel() for p in self.parameters())
        n -= self.tok_embeddings.weight.numel()
        if not self.c["rope"]:
            n -= self.pos_embeddings.weight.numel()
        return n


def config_of(args):
    c = dict(zip(KEYS, PRESETS[args.model]))
    c["rope_theta"] = ROPE_THETA.get(args.model, 10000.0)
    for k in KEYS:
        v = getattr(args, k, None)
        if v is not None:
            c[k] = v
    return c


def init_params(model, seed):
    torch.manual_seed(seed)
    for name, p in model.named_parameters():
        if name.endswith("bias"):
            nn.init.zeros_(p)
        elif p.dim() == 1:
            nn.init.ones_(p)
        else:
            nn.init.normal_(p, 0.0, 0.02)


def param_groups(model, wd):
    """te-gpt's split: matrices (Linear weights, the tables) decay; gains and biases do not."""
    dec, rest = [], []
    for p in model.parameters():
        (dec if p.dim() == 2 else rest).append(p)
    return [{"params": dec, "weight_decay": wd}, {"params": rest, "weight_decay": 0.0}]


def lr_at(step, lr, min_lr, warmup, decay):
    """te-gpt's gpt_lr_at: linear warmup to step `warmup`, then a cosine to min_lr."""
    if step <= warmup:
        return lr * step / (warmup if warmup > 0 else 1)
    span = decay - warmup
    q = (step - warmup) / span if span > 0 else 1.0
    q = min(q, 1.0)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * q))


def splitmix(state):
    state[0] = (state[0] + 0x9E3779B97F4A7C15) & MASK
    z = state[0]
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def check(args):
    dev = torch.device("cuda")
    w, meta = read_safetensors(f"{args.ckpt}/model.safetensors")
    _, ometa = read_safetensors(f"{args.ckpt}/optimizer.safetensors")
    c = {k: (meta[k] if k in ("norm", "act") else int(meta[k])) for k in KEYS}
    c["rope_theta"] = float(meta.get("rope_theta", 10000))   # te-gpt writes it where not 10000
    model = GPT(c, dev).to(dev)
    missing, unexpected = model.load_state_dict(w, strict=True), None
    del missing, unexpected
    state = [int(ometa["sampler_state"], 16)]
    data = open(args.data, "rb").read()
    ntrain = len(data) - len(data) // 10
    span = ntrain - c["seq"]
    buf = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
    te = json.load(open(args.te_json))["steps"] if args.te_json else []
    warmup = args.warmup if args.warmup >= 0 else args.steps // 10
    min_lr = args.lr / 10
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.lr, betas=(0.9, 0.95),
                            eps=1e-8, fused=True)
    T, worst, rows = c["seq"], 0.0, []
    print(f"# check: {args.ckpt} ({sum(p.numel() for p in model.parameters())} parameters), "
          f"{args.data} ({len(data)} bytes), batch {args.batch} x {T}, {args.steps} steps, "
          f"torch {torch.__version__}")
    print(f"{'step':>5} {'te-gpt':>9} {'torch':>9} {'rel diff':>9}")
    for step in range(1, args.steps + 1):
        offs = [splitmix(state) % span for _ in range(args.batch)]
        idx = torch.tensor(offs)[:, None] + torch.arange(T + 1)[None, :]
        seqs = buf[idx].to(dev)
        ids, labels = seqs[:, :-1], seqs[:, 1:]
        for g in opt.param_groups:
            g["lr"] = lr_at(step, args.lr, min_lr, warmup, args.steps)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(ids, labels)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        opt.zero_grad(set_to_none=True)
        lv = loss.item()
        tv = te[step - 1]["loss"] if step - 1 < len(te) else float("nan")
        rel = abs(lv - tv) / abs(tv) if te else float("nan")
        worst = max(worst, rel) if te else worst
        rows.append((step, tv, lv, rel))
        print(f"{step:5d} {tv:9.4f} {lv:9.4f} {rel:9.2e}")
    print(f"# max relative loss difference over {args.steps} steps: {worst:.3e} "
          f"(te-gpt {rows[-1][1]:.4f}, torch {rows[-1][2]:.4f} at step {args.steps})")
    return 0


def peak_mib():
    return torch.cuda.max_memory_allocated() / 1048576.0


def speed(args):
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    if world > 1:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
        torch.distributed.init_process_group("nccl")
    dev = torch.device("cuda")
    c = config_of(args)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    model = GPT(c, dev).to(dev)
    init_params(model, 1)
    N = model.n_flop_params()
    fpt = 6.0 * N + 6.0 * c["layers"] * c["hidden"] * c["seq"]
    prec, f8_fsdp = "BF16", None
    if args.float8:
        try:
            from torchao.float8 import Float8LinearConfig, convert_to_float8_training
            # under FSDP2 the weights are gathered as Float8 and their
            # scales computed once for all after the step (TorchTitan's setup)
            fs = world > 1 and args.fsdp
            convert_to_float8_training(model, config=Float8LinearConfig(
                enable_fsdp_float8_all_gather=fs),
                module_filter_fn=lambda m, fqn: fqn != "lm_head")
            if fs:
                from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp
                f8_fsdp = precompute_float8_dynamic_scale_for_fsdp
            prec = "Float8 (torchao" + (", Float8 all-gather)" if fs else ")")
        except ImportError:
            prec = "BF16 (--float8 asked: no torchao on this image)"
    if args.ac:
        from torch.utils.checkpoint import checkpoint
        for blk in model.layers:
            blk.forward = (lambda f: lambda x, rope: checkpoint(f, x, rope, use_reentrant=False))(
                blk.forward)
    wrapped = model
    if world > 1 and args.fsdp:
        from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
        mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        for blk in model.layers:
            fully_shard(blk, mp_policy=mp)
        wrapped = fully_shard(model, mp_policy=mp)
    elif world > 1:
        wrapped = torch.nn.parallel.DistributedDataParallel(model, device_ids=[dev.index or
                                                                               torch.cuda.current_device()])
    opt = torch.optim.AdamW(param_groups(model, 0.1), lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            fused=True)
    fwd = torch.compile(wrapped) if args.compile else wrapped
    B, T = args.batch, c["seq"]
    g = torch.Generator(device=dev).manual_seed(1 + rank)

    def step():
        ids = torch.randint(0, c["vocab"], (B, T + 1), device=dev, generator=g)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = fwd(ids[:, :-1], ids[:, 1:])
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if f8_fsdp:
            f8_fsdp(model)
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.time()
    for _ in range(args.warmup):
        step()
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(args.steps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        loss = step()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1))
    run_order = list(times)
    times.sort()
    ms = times[len(times) // 2]
    tps = world * B * T / (ms / 1e3)
    name = "torch.compile" if args.compile else "eager"
    if world > 1:
        name += (" FSDP2" if args.fsdp else " DDP") + f" x{world}"
    if rank:
        torch.distributed.destroy_process_group()
        return 0
    if args.ac:
        name += ", blocks recomputed"
    print(f"peer {args.model} {name} {prec}: batch {B} x {T}, {N / 1e6:.1f}M flop parameters; "
          f"median {ms:.2f} ms/step (min {times[0]:.2f}), {tps:.0f} tokens/s, "
          f"{tps * fpt / 1e12:.1f} TFLOP/s, peak allocated {peak_mib():.0f} MiB, "
          f"warmup {warm_s:.0f} s, last loss {loss.item():.4f}, torch {torch.__version__}")
    if args.json:
        json.dump({"model": args.model, "mode": name, "precision": prec, "batch": B, "seq": T,
                   "ms": ms,
                   "tokens_per_s": tps, "tflops": tps * fpt / 1e12, "peak_mib": peak_mib(),
                   "times_ms": run_order},
                  open(args.json, "w"))
    if world > 1:
        torch.distributed.destroy_process_group()
    return 0


@torch.no_grad()
def decode(args):
    dev = torch.device("cuda")
    c = config_of(args)
    model = GPT(c, dev).to(dev)
    init_params(model, 1)
    model = model.to(torch.bfloat16)
    L, kv, d, T = c["layers"], c["kv_heads"], c["hidden"] // c["heads"], c["seq"]
    kc = torch.zeros(L, 1, kv, T, d, dtype=torch.bfloat16, device=dev)
    vc = torch.zeros_like(kc)
    rope = model.rope

    def one(tok, pos):
        x = model.tok_embeddings.weight[tok][None, None, :]
        if not c["rope"]:
            x = x + model.pos_embeddings.weight[pos][None, None, :]
        for i, b in enumerate(model.layers):
            a = b.attn
            q, k, v = a.split(b.attn_norm(x))
            if rope is not None:
                q = rotate(q, rope[0][pos:pos + 1], rope[1][pos:pos + 1])
                k = rotate(k, rope[0][pos:pos + 1], rope[1][pos:pos + 1])
            kc[i, :, :, pos] = k[:, 0]
            vc[i, :, :, pos] = v[:, 0]
            o = F.scaled_dot_product_attention(q.transpose(1, 2), kc[i, :, :, :pos + 1],
                                               vc[i, :, :, :pos + 1], enable_gqa=kv != a.h)
            x = x + a.proj(o.transpose(1, 2).reshape(1, 1, a.h * a.d))
            x = x + b.mlp(b.mlp_norm(x))
        lg = model.lm_head(model.norm(x))[0, 0, :256]
        return int(lg.argmax().item())

    n = min(args.tokens, T - 1)
    tok = ord("\n")
    # not the cuDNN backend: it builds a plan for each new key length
    # (seconds per token); flash and memory-efficient take any length
    from torch.nn.attention import SDPBackend, sdpa_kernel
    with sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]):
        for p in range(8):   # warm-up: kernels loaded, caches allocated
            one(tok, p)
        torch.cuda.synchronize()
        t0 = time.time()
        for p in range(n):
            tok = one(tok, p)
        dt = time.time() - t0
    print(f"peer {args.model} decode, PyTorch loop with a KV cache, BF16, batch 1: {n} tokens "
          f"in {dt * 1e3:.1f} ms, {n / dt:.0f} tokens/s, torch {torch.__version__}")
    if args.json:
        json.dump({"model": args.model, "tokens": n, "tokens_per_s": n / dt}, open(args.json, "w"))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("mode", choices=["check", "speed", "decode"])
    ap.add_argument("--model", default="gpt2-124m", choices=sorted(PRESETS))
    for k in ("layers", "hidden", "heads", "kv_heads", "ffn", "seq", "vocab", "rope", "bias"):
        ap.add_argument("--" + k.replace("_", "-"), dest=k, type=int)
    ap.add_argument("--norm", choices=["layernorm", "rmsnorm"])
    ap.add_argument("--act", choices=["gelu", "swiglu", "geglu", "relu"])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=-1, help="check: lr warmup; speed: untimed steps")
    ap.add_argument("--lr", type=float, default=6e-4)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--fsdp", action="store_true", help="speed under torchrun: FSDP2, not DDP")
    ap.add_argument("--float8", action="store_true",
                    help="speed: torchao's Float8 training where torchao is installed")
    ap.add_argument("--ac", action="store_true",
                    help="speed: each block's activations recomputed in the backward")
    ap.add_argument("--ckpt")
    ap.add_argument("--data")
    ap.add_argument("--te-json")
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--json")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("gpt_peer.py: no CUDA device", file=sys.stderr)
        return 1
    if args.mode == "check":
        if not args.ckpt or not args.data:
            ap.error("check needs --ckpt DIR and --data FILE")
        return check(args)
    if args.mode == "speed" and args.warmup < 0:
        args.warmup = 3
    return speed(args) if args.mode == "speed" else decode(args)


if __name__ == "__main__":
    sys.exit(main())
