#!/usr/bin/python3
"""PyTorch reference for the C++ GPT-2 (run with Debian's /usr/bin/python3).

Builds a tiny GPT-2 with random weights, writes it as an llm.c model file
together with a token shard, and computes in float64 (the exact answer the
fp32 C++ code is measured against):
  * logits and the mean cross-entropy loss of the first batch,
  * the gradient of every parameter tensor,
  * the losses of N AdamW steps (weight decay on 2-D weights and embeddings,
    global-norm clipping exactly as the trainer does it: scale = clip/norm when
    norm > clip), reading batch k from the shard at token offset k*B*T like the
    trainer's loader without shuffling.

The same again with an SFT loss mask (PyTorch's ignore_index): the same tokens
as sft_train.bin with a mask sidecar sft_train.mask (docs/formats.md) marks ~60% of the targets supervised; the loss is
the mean over supervised targets of the whole step, as the trainer normalises.

Outputs in OUT_DIR: model.bin, train.bin, sft_train.bin + sft_train.mask, reference.bin and
reference_masked.bin (layout in write_reference).
The model is written functionally from the flat parameter list in llm.c's
order, so the mapping to the C++ tensor table is one to one.
"""
import argparse
import math
import os
import struct

import numpy as np
import torch

TENSOR_NAMES = ["wte", "wpe", "ln1w", "ln1b", "qkvw", "qkvb", "attprojw", "attprojb",
                "ln2w", "ln2b", "fcw", "fcb", "fcprojw", "fcprojb", "lnfw", "lnfb"]
DECAYED = {"wte", "wpe", "qkvw", "attprojw", "fcw", "fcprojw"}


def shapes(L, C, maxT, Vp):
    return {
        "wte": (Vp, C), "wpe": (maxT, C),
        "ln1w": (L, C), "ln1b": (L, C),
        "qkvw": (L, 3 * C, C), "qkvb": (L, 3 * C),
        "attprojw": (L, C, C), "attprojb": (L, C),
        "ln2w": (L, C), "ln2b": (L, C),
        "fcw": (L, 4 * C, C), "fcb": (L, 4 * C),
        "fcprojw": (L, C, 4 * C), "fcprojb": (L, C),
        "lnfw": (C,), "lnfb": (C,),
    }


def gelu_tanh(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layernorm(x, w, b):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)  # biased, as GPT-2
    return (x - mean) / torch.sqrt(var + 1e-5) * w + b


def forward(p, idx, cfg):
    L, NH, C, V = cfg["L"], cfg["NH"], cfg["C"], cfg["V"]
    B, T = idx.shape
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        h = layernorm(x, p["ln1w"][l], p["ln1b"][l])
        qkv = h @ p["qkvw"][l].T + p["qkvb"][l]
        q, k, v = qkv.split(C, dim=-1)
        q = q.view(B, T, NH, hs).transpose(1, 2)
        k = k.view(B, T, NH, hs).transpose(1, 2)
        v = v.view(B, T, NH, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p["attprojw"][l].T + p["attprojb"][l]
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu_tanh(h @ p["fcw"][l].T + p["fcb"][l])
        x = x + h @ p["fcprojw"][l].T + p["fcprojb"][l]
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].T  # tied lm_head over the padded vocabulary
    return logits[..., :V]   # padded columns never reach the loss


def write_model(path, cfg, params32):
    header = np.zeros(256, dtype=np.int32)
    header[:8] = [20240326, 3, cfg["maxT"], cfg["V"], cfg["L"], cfg["NH"], cfg["C"], cfg["Vp"]]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        for name in TENSOR_NAMES:
            f.write(params32[name].astype("<f4").tobytes())


def write_shard(path, tokens):
    header = np.zeros(256, dtype=np.int32)
    header[:3] = [20240520, 1, len(tokens)]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(tokens, dtype="<u2").tobytes())


def write_mask(path, mask):
    """Loss-mask sidecar: int32 header [20241123, 1, count lo, count hi, T=0, 0...], uint8 per token."""
    header = np.zeros(256, dtype=np.int32)
    header[:4] = [20241123, 1, len(mask), 0]
    with open(path, "wb") as f:
        f.write(header.tobytes())
        f.write(np.asarray(mask, dtype=np.uint8).tobytes())


def write_reference(path, cfg, B, T, logits, loss, grads, step_losses):
    """int32 header [B, T, V, Vp, num_params, steps, 0, 0], then float64:
    logits (B*T*V), loss, grads (num_params, llm.c order), step losses."""
    flat_grads = np.concatenate([grads[n].reshape(-1) for n in TENSOR_NAMES])
    with open(path, "wb") as f:
        f.write(np.array([B, T, cfg["V"], cfg["Vp"], flat_grads.size, len(step_losses), 0, 0],
                         dtype="<i4").tobytes())
        f.write(np.asarray(logits, dtype="<f8").reshape(-1).tobytes())
        f.write(np.array([loss], dtype="<f8").tobytes())
        f.write(flat_grads.astype("<f8").tobytes())
        f.write(np.asarray(step_losses, dtype="<f8").tobytes())


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--lr", type=float, default=1e-2)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=1234)
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    cfg = dict(L=2, NH=4, C=32, maxT=16, V=101, Vp=128)
    B, T = 2, 8
    rng = np.random.default_rng(args.seed)
    params32 = {}
    for name, shp in shapes(cfg["L"], cfg["C"], cfg["maxT"], cfg["Vp"]).items():
        if name in ("ln1w", "ln2w", "lnfw"):
            a = 1.0 + 0.1 * rng.standard_normal(shp)
        elif name.endswith("b"):
            a = 0.02 * rng.standard_normal(shp)
        else:
            a = 0.08 * rng.standard_normal(shp)
        params32[name] = a.astype(np.float32)
    # The fp32 values the C++ side reads are the exact starting point in float64 too.
    tokens = rng.integers(0, cfg["V"], size=args.steps * B * T + 1)
    write_model(os.path.join(args.out, "model.bin"), cfg, params32)
    write_shard(os.path.join(args.out, "train.bin"), tokens)

    torch.set_default_dtype(torch.float64)
    toks = torch.tensor(tokens, dtype=torch.long)

    def batch(k):
        w = toks[k * B * T: k * B * T + B * T + 1]
        return w[:-1].view(B, T), w[1:].view(B, T)

    # SFT mask: token i is a supervised target with probability 0.6 (token 0 is never a target).
    mask = (rng.random(len(tokens)) < 0.6).astype(np.uint8)
    mask[0] = 0
    write_shard(os.path.join(args.out, "sft_train.bin"), tokens)  # the same tokens, with a sidecar
    write_mask(os.path.join(args.out, "sft_train.mask"), mask)
    labels = torch.tensor(np.where(mask == 1, tokens, -100), dtype=torch.long)

    def masked_batch(k):
        x, _ = batch(k)
        return x, labels[k * B * T + 1: k * B * T + B * T + 1].view(B, T)

    for name, get_batch in (("reference.bin", batch), ("reference_masked.bin", masked_batch)):
        ref = run_reference(params32, cfg, B, T, get_batch, args)
        write_reference(os.path.join(args.out, name), cfg, B, T, *ref)
        print(f"{name}: loss {ref[1]:.8f}, {args.steps} step losses {ref[3][0]:.6f} .. {ref[3][-1]:.6f}")


def run_reference(params32, cfg, B, T, get_batch, args):
    """Loss, logits and gradients of batch 0, then the losses of args.steps AdamW
    steps from the same start. Ignored targets (-100) leave the loss and the
    gradient; the loss is the mean over the others (cross_entropy's default)."""
    p = {n: torch.tensor(params32[n].astype(np.float64), requires_grad=True) for n in TENSOR_NAMES}

    def loss_of(x, y):
        logits = forward(p, x, cfg)
        return logits, torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["V"]), y.reshape(-1),
                                                         ignore_index=-100)

    x, y = get_batch(0)
    logits, loss = loss_of(x, y)
    loss.backward()
    grads = {n: p[n].grad.detach().numpy().copy() for n in TENSOR_NAMES}
    ref_logits = logits.detach().numpy()
    ref_loss = loss.item()

    # AdamW steps, written out so the update is exactly the documented one.
    beta1, beta2, eps = 0.9, 0.95, 1e-8
    m = {n: torch.zeros_like(p[n]) for n in TENSOR_NAMES}
    v = {n: torch.zeros_like(p[n]) for n in TENSOR_NAMES}
    step_losses = []
    for k in range(args.steps):
        for n in TENSOR_NAMES:
            p[n].grad = None
        _, loss = loss_of(*get_batch(k))
        loss.backward()
        step_losses.append(loss.item())
        norm = math.sqrt(sum(float((p[n].grad ** 2).sum()) for n in TENSOR_NAMES))
        scale = args.grad_clip / norm if (args.grad_clip > 0 and norm > args.grad_clip) else 1.0
        t = k + 1
        with torch.no_grad():
            for n in TENSOR_NAMES:
                g = p[n].grad * scale
                m[n].mul_(beta1).add_((1 - beta1) * g)
                v[n].mul_(beta2).add_((1 - beta2) * g * g)
                mhat = m[n] / (1 - beta1 ** t)
                vhat = v[n] / (1 - beta2 ** t)
                wd = args.weight_decay if n in DECAYED else 0.0
                p[n].sub_(args.lr * (mhat / (vhat.sqrt() + eps) + wd * p[n]))
    return ref_logits, ref_loss, grads, step_losses


if __name__ == "__main__":
    main()
