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

With dropout at all three of HF's sites (embd_pdrop after wte + wpe, attn_pdrop on
the softmax probabilities, resid_pdrop on both c_proj outputs) and masks drawn
by util/philox.h's function, ported below (Philox4x32-10, checked against the
known answers): the loss, logits and every gradient of one training forward.

Outputs in OUT_DIR: model.bin, train.bin, sft_train.bin + sft_train.mask, reference.bin,
reference_masked.bin (layout in write_reference) and reference_dropout.bin (the same
layout plus a trailer with the dropout run and its masks, in write_dropout_trailer).
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


def forward(p, idx, cfg, z=None):
    """Logits; z (optional) holds dropout masks as float64 multipliers (0 or the
    keep scale): "embd" [B,T,C], and per layer "attn" [B,NH,T,T], "attproj" and
    "fcproj" [B,T,C] — where HF's GPT2 has its nn.Dropout modules."""
    L, NH, C, V = cfg["L"], cfg["NH"], cfg["C"], cfg["V"]
    B, T = idx.shape
    hs = C // NH
    x = p["wte"][idx] + p["wpe"][:T]
    if z is not None:
        x = x * z["embd"]  # GPT2Model.drop
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
        if z is not None:
            att = att * z["attn"][l]  # GPT2Attention.attn_dropout: after softmax, before att @ v
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        y = y @ p["attprojw"][l].T + p["attprojb"][l]
        if z is not None:
            y = y * z["attproj"][l]  # GPT2Attention.resid_dropout: c_proj output, before the residual add
        x = x + y
        h = layernorm(x, p["ln2w"][l], p["ln2b"][l])
        h = gelu_tanh(h @ p["fcw"][l].T + p["fcb"][l])
        h = h @ p["fcprojw"][l].T + p["fcprojb"][l]
        if z is not None:
            h = h * z["fcproj"][l]  # GPT2MLP.dropout
        x = x + h
    x = layernorm(x, p["lnfw"], p["lnfb"])
    logits = x @ p["wte"].T  # tied lm_head over the padded vocabulary
    return logits[..., :V]   # padded columns never reach the loss


M32 = 0xFFFFFFFF


def philox4x32_10(c, k0, k1):
    """util/philox.h's philox4x32_10: Python ints masked to 32 bits stand for uint32_t."""
    c0, c1, c2, c3 = c
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2  # exact 64-bit products
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return c0, c1, c2, c3


def check_philox():
    """Random123's known answers, the ones test/backend/dropout_mask_test.cpp checks
    the C++ against: a port that passes draws the C++ generator's words."""
    kat = [((0, 0, 0, 0), 0, 0, (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
           ((M32, M32, M32, M32), M32, M32, (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
           ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), 0xa4093822, 0x299f31d0,
            (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1))]
    for counter, k0, k1, want in kat:
        got = philox4x32_10(counter, k0, k1)
        assert got == want, f"philox4x32_10{counter} = {[hex(w) for w in got]}, want {[hex(w) for w in want]}"


SITE_EMBEDDING, SITE_ATTENTION_PROJ, SITE_MLP_PROJ, SITE_ATTENTION_PROBS = 0, 1, 2, 3


def keep_scale(p):
    """DropoutMask::keep_scale: 1 / (1 - p) in fp32, p the C++ float."""
    return float(np.float32(1) / (np.float32(1) - np.float32(p)))


class DropoutMask:
    """util/philox.h's DropoutMask for one site: keep(token, col) for [N, C]
    tensors, keep_attention(row_token, T, h, q, j) for attention probabilities."""

    def __init__(self, seed, step, layer, site, p):
        self.k0, self.k1 = seed & M32, (seed >> 32) & M32
        self.step, self.stream = step & M32, (layer * 16 + site) & 0xFFFFFF
        # p is the C++ float: the threshold is (double)p * 2^32, truncated as the C++ cast does.
        self.threshold = int(float(np.float32(p)) * 4294967296.0)

    def draws(self, token, q):
        counter = (q & M32, token & M32, self.step, self.stream | (((token >> 32) << 24) & M32))
        return philox4x32_10(counter, self.k0, self.k1)

    def keep(self, token, col):
        return self.draws(token, col // 4)[col % 4] >= self.threshold

    def keep_attention(self, row_token, T, h, q, j):
        # One call per 2x2 block {q, q+8} x {j, j+8}; word 2 (q bit 3) + (j bit 3).
        column = h * ((T + 15) & ~15) + (j & ~8)
        d = self.draws(row_token + (q & ~8), column)
        return d[((q >> 3) & 1) * 2 + ((j >> 3) & 1)] >= self.threshold


def rows_keep(mask, token0, N, C):
    """Keep bits (uint8 [N, C]) of an [N, C] site whose row r is global token token0 + r."""
    out = np.zeros((N, C), dtype=np.uint8)
    for r in range(N):
        for q in range((C + 3) // 4):
            d = mask.draws(token0 + r, q)  # one call serves four columns
            for k in range(min(4, C - 4 * q)):
                out[r, 4 * q + k] = d[k] >= mask.threshold
    return out


def attention_keep(mask, token0, B, NH, T):
    """Keep bits (uint8 [B, NH, T, T]) of attention probabilities, Z[b,h,t,j] for
    j <= t (row b starts at global token token0 + b*T); 0 above the diagonal,
    where P is 0 anyway."""
    out = np.zeros((B, NH, T, T), dtype=np.uint8)
    for b in range(B):
        for h in range(NH):
            for t in range(T):
                for j in range(t + 1):
                    out[b, h, t, j] = mask.keep_attention(token0 + b * T, T, h, t, j)
    return out


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


def write_reference(path, cfg, B, T, logits, loss, grads, step_losses, flags=0):
    """int32 header [B, T, V, Vp, num_params, steps, flags, 0], then float64:
    logits (B*T*V), loss, grads (num_params, llm.c order), step losses.
    flags 1: a dropout trailer follows (write_dropout_trailer)."""
    flat_grads = np.concatenate([grads[n].reshape(-1) for n in TENSOR_NAMES])
    with open(path, "wb") as f:
        f.write(np.array([B, T, cfg["V"], cfg["Vp"], flat_grads.size, len(step_losses), flags, 0],
                         dtype="<i4").tobytes())
        f.write(np.asarray(logits, dtype="<f8").reshape(-1).tobytes())
        f.write(np.array([loss], dtype="<f8").tobytes())
        f.write(flat_grads.astype("<f8").tobytes())
        f.write(np.asarray(step_losses, dtype="<f8").tobytes())


def write_dropout_trailer(path, run, keeps):
    """After write_reference's content (header word 6 = 1 says it is there):
    float32 embd, resid, attn rates (the C++ floats), uint32 step, uint64 seed,
    uint64 token0, then the keep bits, one uint8 per element: embedding [N, C],
    and per layer attention probabilities [B, NH, T, T] (j > t: 0), attention
    projection [N, C], MLP projection [N, C]."""
    with open(path, "ab") as f:
        f.write(struct.pack("<3fIQQ", run["embd"], run["resid"], run["attn"], run["step"], run["seed"],
                            run["token0"]))
        f.write(keeps["embd"].tobytes())
        for l in range(len(keeps["attn"])):
            for site in ("attn", "attproj", "fcproj"):
                f.write(keeps[site][l].tobytes())


def dropout_masks(run, L, NH, C, B, T):
    """Keep bits of every site of one training forward (the C++ model's mask_of:
    the embedding is layer 0's site, every layer draws its own three)."""
    N, token0 = B * T, run["token0"]

    def mask(layer, site, rate):
        return DropoutMask(run["seed"], run["step"], layer, site, run[rate])

    keeps = {"embd": rows_keep(mask(0, SITE_EMBEDDING, "embd"), token0, N, C), "attn": [], "attproj": [],
             "fcproj": []}
    for l in range(L):
        keeps["attn"].append(attention_keep(mask(l, SITE_ATTENTION_PROBS, "attn"), token0, B, NH, T))
        keeps["attproj"].append(rows_keep(mask(l, SITE_ATTENTION_PROJ, "resid"), token0, N, C))
        keeps["fcproj"].append(rows_keep(mask(l, SITE_MLP_PROJ, "resid"), token0, N, C))
    scales = {"embd": keep_scale(run["embd"]), "attn": keep_scale(run["attn"]),
              "attproj": keep_scale(run["resid"]), "fcproj": keep_scale(run["resid"])}
    return keeps, scales


def run_dropout_reference(params32, cfg, B, T, toks, run):
    """Loss, logits and gradients of one training forward on the first B*T
    tokens with dropout at every site. The multipliers are keep * the fp32 scale
    the C++ uses, so the reference is the exact answer to the same function."""
    L, NH, C = cfg["L"], cfg["NH"], cfg["C"]
    keeps, scales = dropout_masks(run, L, NH, C, B, T)
    # Every site of every layer drops some elements and keeps others: no mask is degenerate.
    causal = np.tril(np.ones((T, T), dtype=bool))
    for site in ("embd", "attn", "attproj", "fcproj"):
        for l, k in enumerate([keeps[site]] if site == "embd" else keeps[site]):
            k = k[..., causal] if site == "attn" else k
            assert 0 < k.sum() < k.size, f"layer {l} site {site}: {k.sum()} of {k.size} kept"
    z = {"embd": torch.tensor(keeps["embd"].reshape(B, T, C) * scales["embd"])}
    for site, shp in (("attn", (B, NH, T, T)), ("attproj", (B, T, C)), ("fcproj", (B, T, C))):
        z[site] = [torch.tensor(k.reshape(shp) * scales[site]) for k in keeps[site]]
    p = {n: torch.tensor(params32[n].astype(np.float64), requires_grad=True) for n in TENSOR_NAMES}
    x, y = toks[:B * T].view(B, T), toks[1:B * T + 1].view(B, T)
    logits = forward(p, x, cfg, z)
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, cfg["V"]), y.reshape(-1))
    loss.backward()
    grads = {n: p[n].grad.detach().numpy().copy() for n in TENSOR_NAMES}
    kept = {"embd": keeps["embd"].mean(), "attn": np.mean([k[..., causal].mean() for k in keeps["attn"]]),
            "resid": np.mean([k.mean() for k in keeps["attproj"] + keeps["fcproj"]])}
    return logits.detach().numpy(), loss.item(), grads, keeps, kept


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

    # Dropout at all three sites. T = 12: queries and keys 8-11 use the other
    # words of the attention draws' 2x2 blocks, and the column stride rounds T up
    # to 16; token0 = 64 is a micro-batch that is not the step's first; the seed
    # has both key words nonzero.
    check_philox()
    run = dict(embd=0.1, resid=0.2, attn=0.3, seed=0x0123456789ABCDEF, step=7, token0=64)
    Bd, Td = 2, 12
    logits, loss, grads, keeps, kept = run_dropout_reference(params32, cfg, Bd, Td, toks, run)
    path = os.path.join(args.out, "reference_dropout.bin")
    write_reference(path, cfg, Bd, Td, logits, loss, grads, [], flags=1)
    write_dropout_trailer(path, run, keeps)
    print(f"reference_dropout.bin: B={Bd} T={Td}, loss {loss:.8f}, kept fractions embd {kept['embd']:.3f} "
          f"resid {kept['resid']:.3f} attn {kept['attn']:.3f}")


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
