#!/usr/bin/env python3
"""What our users run today, timed on the same GPU, config and tokens as
train_gpt2cu (scripts/gpu_check.sh's throughput phase):

  --impl hf       transformers' GPT2LMHeadModel, SDPA attention, bf16 autocast
                  with fp32 weights (HF Trainer's bf16=True), fused AdamW
  --impl compact  a compact nanoGPT-style GPT-2 (SDPA, tied lm_head, tanh GELU),
                  torch.compile'd, bf16 autocast, fused AdamW: the project's own
                  PyTorch reference

Batches are consecutive B x T windows of an llm.c token shard (the shard our
trainer reads). Prints one line:
  RESULT impl=.. tok_per_s=.. ms=.. peak_mem_mib=.. params=.. compiled=0|1 device=..
On the CPU (gpu_check.sh --rehearsal) the same code runs with what the local
torch offers: no fused AdamW, and torch.compile / SDPA only where they exist.
"""
import argparse
import math
import statistics
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

SHARD_MAGIC, HEADER_INTS = 20240520, 256


def read_shard(path):
    header = np.fromfile(path, dtype=np.int32, count=HEADER_INTS)
    if header.size != HEADER_INTS or header[0] != SHARD_MAGIC:
        sys.exit(f"{path}: not an llm.c token shard (magic {header[0] if header.size else 'missing'})")
    dtype = np.uint16 if header[1] == 1 else np.uint32
    tokens = np.fromfile(path, dtype=dtype, offset=HEADER_INTS * 4, count=int(header[2]))
    if tokens.size != header[2]:
        sys.exit(f"{path}: truncated ({tokens.size} of {header[2]} tokens)")
    return torch.from_numpy(tokens.astype(np.int64))


def attention(q, k, v):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.size(-2)  # torch < 2.0 (rehearsal on Debian's torch): the same maths, unfused
    att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    return att.masked_fill(~mask, float("-inf")).softmax(-1) @ v


class Block(nn.Module):
    def __init__(self, C, NH):
        super().__init__()
        self.NH = NH
        self.ln_1, self.ln_2 = nn.LayerNorm(C), nn.LayerNorm(C)
        self.c_attn, self.attn_proj = nn.Linear(C, 3 * C), nn.Linear(C, C)
        self.c_fc, self.mlp_proj = nn.Linear(C, 4 * C), nn.Linear(4 * C, C)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (t.view(B, T, self.NH, -1).transpose(1, 2) for t in self.c_attn(self.ln_1(x)).split(C, 2))
        x = x + self.attn_proj(attention(q, k, v).transpose(1, 2).reshape(B, T, C))
        return x + self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))


class CompactGPT(nn.Module):
    def __init__(self, L, NH, C, V, maxT):
        super().__init__()
        self.wte, self.wpe = nn.Embedding(V, C), nn.Embedding(maxT, C)
        self.h = nn.ModuleList(Block(C, NH) for _ in range(L))
        self.ln_f = nn.LayerNorm(C)
        for m in self.modules():  # GPT-2's initialisation (HF's model applies its own)
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear):
                nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.size(1), device=idx.device))
        for block in self.h:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()  # tied lm_head


def build_model(args):
    if args.impl == "compact":
        return CompactGPT(args.L, args.NH, args.C, args.V, args.maxT), None
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=args.V, n_positions=args.maxT, n_embd=args.C, n_layer=args.L, n_head=args.NH,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    return model, model.config._attn_implementation


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--impl", choices=["hf", "compact"], required=True)
    p.add_argument("--data", required=True, help="llm.c token shard")
    p.add_argument("--device", default="cuda")
    p.add_argument("--L", type=int, default=12)
    p.add_argument("--NH", type=int, default=12)
    p.add_argument("--C", type=int, default=768)
    p.add_argument("--V", type=int, default=50257)
    p.add_argument("--maxT", type=int, default=1024)
    p.add_argument("-B", type=int, default=64)
    p.add_argument("-T", type=int, default=1024)
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation, autotuning)")
    p.add_argument("--no-compile", action="store_true")
    args = p.parse_args()

    torch.manual_seed(1337)
    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    tokens = read_shard(args.data)
    n = args.B * args.T + 1
    if tokens.numel() < n:
        sys.exit(f"{args.data}: {tokens.numel()} tokens, a batch needs {n}")
    model, attn_impl = build_model(args)
    model.to(dev).train()
    params = sum(t.numel() for t in model.parameters())  # shared (tied) tensors counted once
    opt_kwargs = {"fused": True} if cuda else {}
    opt = torch.optim.AdamW(model.parameters(), lr=6e-4, betas=(0.9, 0.95), weight_decay=0.1, **opt_kwargs)
    compiled = args.impl == "compact" and not args.no_compile and hasattr(torch, "compile")
    step_model = torch.compile(model) if compiled else model

    def batch(k):
        start = (k * (n - 1)) % (tokens.numel() - n)
        w = tokens[start:start + n]
        return (w[:-1].view(args.B, args.T).to(dev, non_blocking=True),
                w[1:].view(args.B, args.T).to(dev, non_blocking=True))

    def step(k):
        x, y = batch(k)
        with torch.autocast(device_type=dev.type, dtype=torch.bfloat16):
            out = step_model(x)
            logits = out if args.impl == "compact" else out.logits
        loss = F.cross_entropy(logits.float().view(-1, logits.size(-1)), y.view(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    sync = torch.cuda.synchronize if cuda else (lambda: None)
    for k in range(args.warmup):
        step(k)
    sync()
    if cuda:
        torch.cuda.reset_peak_memory_stats()
    times = []
    for k in range(args.warmup, args.warmup + args.steps):
        t0 = time.perf_counter()
        loss = step(k)
        sync()
        times.append(time.perf_counter() - t0)
    ms = statistics.median(times) * 1e3
    peak = torch.cuda.max_memory_reserved() / 2**20 if cuda else float("nan")
    print(f"RESULT impl={args.impl} tok_per_s={args.B * args.T / (ms / 1e3):.1f} ms={ms:.2f} "
          f"peak_mem_mib={peak:.0f} params={params} compiled={int(compiled)} attn={attn_impl or 'sdpa-or-manual'} "
          f"loss={loss.item():.4f} device={dev.type} torch={torch.__version__}")


if __name__ == "__main__":
    main()
