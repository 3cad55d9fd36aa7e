#!/usr/bin/python3
"""Hugging Face GPT-2 checkpoints for test/e2e/hf_import_test.sh (Debian's /usr/bin/python3 + torch).

No `transformers` or `safetensors` package is needed: this file has its own
safetensors writer and reader (8-byte little-endian header length, a JSON
header, the raw tensor bytes) and a GPT-2 written functionally against HF's
parameter names and layouts (Conv1D weights [in, out], tied lm_head).

Commands:
  make OUT_DIR [shape and file options]
      writes OUT_DIR/hf (config.json + model.safetensors, or shards with
      model.safetensors.index.json), OUT_DIR/tokens.bin (B*T+1 int32),
      OUT_DIR/train.bin (the same tokens as an llm.c uint16 shard) and
      OUT_DIR/reference.bin (float64 logits [B,T,V], then the mean loss),
      computed in float64 from the exact stored (fp32/fp16/bf16) values.
  compare REF_DIR OURS             OURS: hf_logits' output (float32 logits, float32 loss)
  loss REF_DIR LOSS                a loss printed by the trainer
  check-export REF_DIR EXPORT_DIR  our export holds exactly the reference's weights under
                                   GPT2LMHeadModel's names, with save_pretrained's config keys
  transformers REF_DIR EXPORT_DIR  GPT2LMHeadModel.from_pretrained(EXPORT_DIR) gives the
                                   reference logits (needs `transformers`)
  save-pretrained OUT_DIR [shape options]
                                   GPT2LMHeadModel(GPT2Config(...)).save_pretrained(OUT_DIR/hf)
                                   with tokens.bin and transformers' logits as reference.bin,
                                   for `compare` (needs `transformers`)
  transformers-logits EXPORT TOKENS B T OURS
                                   hf_logits' output for EXPORT against
                                   GPT2LMHeadModel.from_pretrained(EXPORT) (needs `transformers`)
  big OUT_DIR [--dtype BF16]       a d48-sized checkpoint (1.56e9 parameters) of
                                   pseudo-random values, for measuring a load's peak memory
"""
import argparse
import json
import math
import os
import struct
import sys

import numpy as np
import torch

# fp32 against the float64 reference: an rms (rel_l2) over the logits and the mean
# loss, i.e. averages of per-element errors that are sums of random-sign 2^-24
# roundings (a few per op, ~10 ops per layer, GEMM sums of C terms): ~1e-6 for the
# small test models; 1e-5 (~170 u) is the allowance. Not a worst case: it holds the
# fp32 path to "rounding only", where a wrong formula is off by O(1e-2) or more.
REL_TOL = 1e-5


# ---------------------------------------------------------------- safetensors

def to_storage(a, dtype):
    """float array -> (bytes, the exact values stored as float64)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "F32":
        return a.astype("<f4").tobytes(), a.astype(np.float64)
    if dtype == "F16":
        h = a.astype("<f2")
        return h.tobytes(), h.astype(np.float64)
    if dtype == "BF16":
        b = torch.from_numpy(a).to(torch.bfloat16)  # round to nearest even
        return b.view(torch.int16).numpy().astype("<i2").tobytes(), b.to(torch.float64).numpy()
    raise ValueError(dtype)


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, dtype, shape, raw bytes), written in that order."""
    header, off = {}, 0
    if metadata is not None:
        header["__metadata__"] = metadata
    for name, dtype, shape, raw in tensors:
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [off, off + len(raw)]}
        off += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for _, _, _, raw in tensors:
            f.write(raw)
    return off


def read_safetensors(path):
    """-> (header dict, {name: float64 array}, header length)."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    data = blob[8 + n:]
    np_types = {"F32": "<f4", "F16": "<f2"}
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = data[b:en]
        if e["dtype"] == "BF16":
            u = np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16
            arr = u.view(np.float32).astype(np.float64)
        else:
            arr = np.frombuffer(raw, dtype=np_types[e["dtype"]]).astype(np.float64)
        out[name] = arr.reshape(e["shape"])
    return header, out, n


# ---------------------------------------------------------------- GPT-2 with HF names

def hf_shapes(L, C, P, V):
    s = {"wte.weight": (V, C), "wpe.weight": (P, C)}
    for l in range(L):
        h = f"h.{l}."
        s.update({h + "ln_1.weight": (C,), h + "ln_1.bias": (C,),
                  h + "attn.c_attn.weight": (C, 3 * C), h + "attn.c_attn.bias": (3 * C,),
                  h + "attn.c_proj.weight": (C, C), h + "attn.c_proj.bias": (C,),
                  h + "ln_2.weight": (C,), h + "ln_2.bias": (C,),
                  h + "mlp.c_fc.weight": (C, 4 * C), h + "mlp.c_fc.bias": (4 * C,),
                  h + "mlp.c_proj.weight": (4 * C, C), h + "mlp.c_proj.bias": (C,)})
    s.update({"ln_f.weight": (C,), "ln_f.bias": (C,)})
    return s


def layernorm(x, w, b, eps=1e-5):
    mean = x.mean(-1, keepdim=True)
    var = ((x - mean) ** 2).mean(-1, keepdim=True)
    return (x - mean) / torch.sqrt(var + eps) * w + b


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def forward(sd, cfg, idx):
    """GPT2LMHeadModel's forward (eval mode) in float64; sd keys without "transformer."."""
    L, NH, C = cfg["n_layer"], cfg["n_head"], cfg["n_embd"]
    B, T = idx.shape
    hs = C // NH
    x = sd["wte.weight"][idx] + sd["wpe.weight"][:T]
    mask = torch.tril(torch.ones(T, T, dtype=torch.bool))
    for l in range(L):
        p = lambda n: sd[f"h.{l}.{n}"]
        h = layernorm(x, p("ln_1.weight"), p("ln_1.bias"))
        qkv = h @ p("attn.c_attn.weight") + p("attn.c_attn.bias")  # Conv1D: x @ W[in, out] + b
        q, k, v = (t.view(B, T, NH, hs).transpose(1, 2) for t in qkv.split(C, dim=-1))
        att = (q @ k.transpose(-2, -1)) / math.sqrt(hs)
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(B, T, C)
        x = x + y @ p("attn.c_proj.weight") + p("attn.c_proj.bias")
        h = layernorm(x, p("ln_2.weight"), p("ln_2.bias"))
        h = gelu_new(h @ p("mlp.c_fc.weight") + p("mlp.c_fc.bias"))
        x = x + h @ p("mlp.c_proj.weight") + p("mlp.c_proj.bias")
    x = layernorm(x, sd["ln_f.weight"], sd["ln_f.bias"])
    return x @ sd["wte.weight"].T  # lm_head tied to wte


def hf_config(a):
    """The keys save_pretrained writes for a GPT2LMHeadModel."""
    return {"activation_function": "gelu_new", "architectures": ["GPT2LMHeadModel"], "attn_pdrop": 0.1,
            "bos_token_id": 50256, "embd_pdrop": 0.1, "eos_token_id": 50256, "initializer_range": 0.02,
            "layer_norm_epsilon": 1e-05, "model_type": "gpt2", "n_ctx": a.positions, "n_embd": a.embd,
            "n_head": a.heads, "n_inner": None, "n_layer": a.layers, "n_positions": a.positions,
            "reorder_and_upcast_attn": False, "resid_pdrop": 0.1, "scale_attn_by_inverse_layer_idx": False,
            "scale_attn_weights": True, "summary_activation": None, "summary_first_dropout": 0.1,
            "summary_proj_to_labels": True, "summary_type": "cls_index", "summary_use_proj": True,
            "torch_dtype": {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}[a.dtype],
            "transformers_version": "4.44.0", "use_cache": True, "vocab_size": a.vocab}


def random_weights(shapes, C, rng):
    w, std = {}, 0.5 / math.sqrt(C)
    for name, shp in shapes.items():
        if name.endswith(("ln_1.weight", "ln_2.weight", "ln_f.weight")):
            a = 1.0 + 0.1 * rng.standard_normal(shp)
        elif name.endswith(".bias"):
            a = 0.02 * rng.standard_normal(shp)
        else:
            a = std * rng.standard_normal(shp)
        w[name] = a.astype(np.float32)
    return w


def write_checkpoint(d, a, weights):
    """HF directory: config.json + one file or a.shards shards; returns the stored float64 values."""
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(a), f, indent=2, sort_keys=True)
    prefix = "transformer." if a.prefix else ""
    entries, stored = [], {}
    for name, arr in weights.items():
        raw, vals = to_storage(arr, a.dtype)
        stored[name] = vals
        entries.append((prefix + name, a.dtype, arr.shape, raw))
    if a.lm_head:  # an explicit copy of wte, as some exporters write it
        entries.append(("lm_head.weight", a.dtype, weights["wte.weight"].shape, to_storage(weights["wte.weight"], a.dtype)[0]))
    if a.mask_buffers:  # what older transformers versions saved next to the weights
        tril = np.tril(np.ones((a.positions, a.positions), dtype=np.float32)).reshape(1, 1, a.positions, a.positions)
        for l in range(a.layers):
            entries.append((f"{prefix}h.{l}.attn.bias", "F32", tril.shape, tril.astype("<f4").tobytes()))
            entries.append((f"{prefix}h.{l}.attn.masked_bias", "F32", (), np.float32(-1e4).tobytes()))
    meta = {"format": "pt"}
    if a.shards <= 1:
        write_safetensors(os.path.join(d, "model.safetensors"), entries, meta)
        return stored
    per = -(-len(entries) // a.shards)
    weight_map, total = {}, 0
    for s in range(a.shards):
        fname = f"model-{s + 1:05d}-of-{a.shards:05d}.safetensors"
        part = entries[s * per:(s + 1) * per]
        total += write_safetensors(os.path.join(d, fname), part, meta)
        weight_map.update({e[0]: fname for e in part})
    with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f, indent=2)
    return stored


def cmd_make(a):
    rng = np.random.default_rng(a.seed)
    weights = random_weights(hf_shapes(a.layers, a.embd, a.positions, a.vocab), a.embd, rng)
    stored = write_checkpoint(os.path.join(a.out, "hf"), a, weights)
    tokens = rng.integers(0, a.vocab, size=a.B * a.T + 1)
    with open(os.path.join(a.out, "tokens.bin"), "wb") as f:
        f.write(tokens.astype("<i4").tobytes())
    header = np.zeros(256, dtype="<i4")
    header[:3] = [20240520, 1, len(tokens)]
    with open(os.path.join(a.out, "train.bin"), "wb") as f:
        f.write(header.tobytes() + tokens.astype("<u2").tobytes())
    cfg = {"n_layer": a.layers, "n_head": a.heads, "n_embd": a.embd}
    sd = {n: torch.from_numpy(v) for n, v in stored.items()}
    idx = torch.from_numpy(tokens.astype(np.int64))
    with torch.no_grad():
        logits = forward(sd, cfg, idx[:-1].view(a.B, a.T))
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, a.vocab), idx[1:]).item()
    with open(os.path.join(a.out, "reference.bin"), "wb") as f:
        f.write(logits.numpy().astype("<f8").tobytes() + struct.pack("<d", loss))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(vars(a), f)
    n = sum(v.size for v in stored.values())
    print(f"made {a.out}/hf: L={a.layers} H={a.heads} C={a.embd} P={a.positions} V={a.vocab} {a.dtype} "
          f"prefix={a.prefix} shards={a.shards}, {n} parameters; reference loss {loss:.9f}")


def load_reference(ref_dir):
    with open(os.path.join(ref_dir, "meta.json")) as f:
        m = json.load(f)
    raw = np.fromfile(os.path.join(ref_dir, "reference.bin"), dtype="<f8")
    return m, raw[:-1].reshape(m["B"], m["T"], m["vocab"]), raw[-1]


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare_logits(name, ours_path, logits, loss, against="torch"):
    """Exits 0 when hf_logits' output (float32 logits, then the loss) is within REL_TOL of the reference."""
    ours = np.fromfile(ours_path, dtype="<f4").astype(np.float64)
    if ours.size != logits.size + 1:
        sys.exit(f"FAIL {ours_path}: {ours.size} floats, expected {logits.size + 1}")
    err = rel_l2(ours[:-1].reshape(logits.shape), logits)
    lerr = abs(ours[-1] - loss) / loss
    ok = err < REL_TOL and lerr < REL_TOL
    print(f"{'ok  ' if ok else 'FAIL'} {name}: logits rel err {err:.2e}, loss {ours[-1]:.9f} vs {against} {loss:.9f} "
          f"(rel {lerr:.2e}, bound {REL_TOL:g})")
    sys.exit(0 if ok else 1)


def cmd_compare(a):
    m, logits, loss = load_reference(a.ref)
    compare_logits(a.ref, a.ours, logits, loss)


def transformers_logits(model_dir, tokens, B, T):
    """GPT2LMHeadModel.from_pretrained(model_dir) evaluated in float64 (on the stored
    fp32 values, exactly) on tokens[:B*T] with targets tokens[1:]: logits, mean loss."""
    import transformers  # only where it is installed (the GPU machine)
    model = transformers.GPT2LMHeadModel.from_pretrained(model_dir, torch_dtype=torch.float32).double().eval()
    idx = torch.from_numpy(tokens.astype(np.int64))
    with torch.no_grad():
        logits = model(idx[:B * T].view(B, T)).logits
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), idx[1:B * T + 1]).item()
    return logits.numpy(), loss, transformers.__version__


def cmd_save_pretrained(a):
    """A GPT2LMHeadModel of GPT2Config's own initialisation, written by save_pretrained
    (safetensors), with tokens.bin, meta.json and transformers' float64 logits as reference.bin."""
    import transformers
    torch.manual_seed(a.seed)
    cfg = transformers.GPT2Config(n_layer=a.layers, n_head=a.heads, n_embd=a.embd, n_positions=a.positions,
                                  vocab_size=a.vocab)
    transformers.GPT2LMHeadModel(cfg).float().save_pretrained(os.path.join(a.out, "hf"), safe_serialization=True)
    tokens = np.random.default_rng(a.seed).integers(0, a.vocab, size=a.B * a.T + 1)
    with open(os.path.join(a.out, "tokens.bin"), "wb") as f:
        f.write(tokens.astype("<i4").tobytes())
    logits, loss, version = transformers_logits(os.path.join(a.out, "hf"), tokens, a.B, a.T)
    with open(os.path.join(a.out, "reference.bin"), "wb") as f:
        f.write(logits.astype("<f8").tobytes() + struct.pack("<d", loss))
    with open(os.path.join(a.out, "meta.json"), "w") as f:
        json.dump(vars(a), f)
    print(f"saved {a.out}/hf with transformers {version} save_pretrained: L={a.layers} H={a.heads} C={a.embd} "
          f"V={a.vocab}; its loss {loss:.9f}")


def cmd_transformers_logits(a):
    """Our logits of EXPORT (hf_logits' output OURS) against GPT2LMHeadModel.from_pretrained(EXPORT)'s."""
    tokens = np.fromfile(a.tokens, dtype="<i4")
    logits, loss, version = transformers_logits(a.export, tokens, a.B, a.T)
    compare_logits(f"{a.export} (transformers {version} from_pretrained)", a.ours, logits, loss, "transformers")


def cmd_loss(a):
    _, _, loss = load_reference(a.ref)
    rel = abs(a.loss - loss) / loss
    print(f"{'ok  ' if rel < REL_TOL else 'FAIL'} trainer val loss {a.loss:.9f} vs torch {loss:.9f} (rel {rel:.2e})")
    sys.exit(0 if rel < REL_TOL else 1)


def cmd_check_export(a):
    m, _, _ = load_reference(a.ref)
    ns = argparse.Namespace(**m)
    ref_vals = read_safetensors_dir(os.path.join(a.ref, "hf"))
    header, vals, hlen = read_safetensors(os.path.join(a.export, "model.safetensors"))
    with open(os.path.join(a.export, "config.json")) as f:
        cfg = json.load(f)
    problems = []
    want_cfg = hf_config(ns)
    for k in ("model_type", "n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "activation_function",
              "layer_norm_epsilon", "architectures"):
        if cfg.get(k) != want_cfg[k]:
            problems.append(f"config.json {k}={cfg.get(k)!r}, expected {want_cfg[k]!r}")
    if header.get("__metadata__") != {"format": "pt"}:
        problems.append(f"__metadata__ {header.get('__metadata__')!r}")
    if hlen % 8:
        problems.append(f"header length {hlen} not a multiple of 8")
    want = {"transformer." + n: s for n, s in hf_shapes(ns.layers, ns.embd, ns.positions, ns.vocab).items()}
    if set(vals) != set(want):
        problems.append(f"keys differ: extra {sorted(set(vals) - set(want))[:4]}, missing {sorted(set(want) - set(vals))[:4]}")
    for k, shp in want.items():
        if k in vals and (vals[k].shape != shp or not np.array_equal(vals[k], ref_vals[k[len("transformer."):]])):
            problems.append(f"{k}: shape {vals[k].shape} or values differ from the imported checkpoint")
    for p in problems:
        print("FAIL " + p)
    if not problems:
        print(f"ok   {a.export}: {len(vals)} tensors, GPT2LMHeadModel names and shapes, values equal to {a.ref}/hf")
    sys.exit(1 if problems else 0)


def read_safetensors_dir(d):
    """Canonical-named (no "transformer.") values of an HF directory, single file or shards."""
    idx = os.path.join(d, "model.safetensors.index.json")
    files = sorted(set(json.load(open(idx))["weight_map"].values())) if os.path.exists(idx) else ["model.safetensors"]
    vals = {}
    for fn in files:
        _, v, _ = read_safetensors(os.path.join(d, fn))
        for k, arr in v.items():
            vals[k[len("transformer."):] if k.startswith("transformer.") else k] = arr
    return vals


def cmd_transformers(a):
    import transformers  # only where it is installed (the GPU machine)
    m, logits, loss = load_reference(a.ref)
    model = transformers.GPT2LMHeadModel.from_pretrained(a.export, torch_dtype=torch.float32).eval()
    toks = torch.from_numpy(np.fromfile(os.path.join(a.ref, "tokens.bin"), dtype="<i4").astype(np.int64))
    with torch.no_grad():
        out = model(toks[:-1].view(m["B"], m["T"]), labels=None).logits.double().numpy()
    hf_loss = torch.nn.functional.cross_entropy(torch.from_numpy(out).reshape(-1, m["vocab"]), toks[1:]).item()
    err, lerr = rel_l2(out, logits), abs(hf_loss - loss) / loss
    ok = err < REL_TOL and lerr < REL_TOL
    print(f"{'ok  ' if ok else 'FAIL'} transformers {transformers.__version__} GPT2LMHeadModel.from_pretrained({a.export}): "
          f"logits rel err {err:.2e}, loss rel err {lerr:.2e}")
    sys.exit(0 if ok else 1)


def cmd_big(a):
    """d48's shape (GPT-2 XL): 1,557,611,200 parameters. The values are a repeated
    block of random numbers: real bytes on disk, quick to write."""
    L, C, P, V = 48, 1600, 1024, 50257
    d = a.out
    os.makedirs(d, exist_ok=True)
    ns = argparse.Namespace(layers=L, heads=25, embd=C, positions=P, vocab=V, dtype=a.dtype)
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(hf_config(ns), f, indent=2, sort_keys=True)
    shapes = {"transformer." + n: s for n, s in hf_shapes(L, C, P, V).items()}
    elem = 2 if a.dtype == "BF16" else 4
    block_raw, _ = to_storage(np.random.default_rng(0).standard_normal(1 << 22) * 0.02, a.dtype)
    header, off = {"__metadata__": {"format": "pt"}}, 0
    for name, shp in shapes.items():
        n = elem * int(np.prod(shp))
        header[name] = {"dtype": a.dtype, "shape": list(shp), "data_offsets": [off, off + n]}
        off += n
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text)
        left = off
        while left > 0:
            chunk = block_raw[:min(left, len(block_raw))]
            f.write(chunk)
            left -= len(chunk)
    print(f"wrote {d}/model.safetensors: {sum(int(np.prod(s)) for s in shapes.values())} parameters, "
          f"{8 + len(text) + off} bytes ({a.dtype})")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    mk = sub.add_parser("make")
    mk.add_argument("out")
    for k, v in (("layers", 2), ("heads", 4), ("embd", 32), ("positions", 16), ("vocab", 101), ("B", 2), ("T", 8),
                 ("shards", 1), ("seed", 1234)):
        mk.add_argument("--" + k, type=int, default=v)
    mk.add_argument("--dtype", choices=["F32", "F16", "BF16"], default="F32")
    mk.add_argument("--no-prefix", dest="prefix", action="store_false", help="GPT2Model's names (no 'transformer.')")
    mk.add_argument("--lm-head", action="store_true", help="also store lm_head.weight (a copy of wte)")
    mk.add_argument("--mask-buffers", action="store_true", help="also store h.N.attn.bias / masked_bias")
    c = sub.add_parser("compare")
    c.add_argument("ref")
    c.add_argument("ours")
    lo = sub.add_parser("loss")
    lo.add_argument("ref")
    lo.add_argument("loss", type=float)
    for name in ("check-export", "transformers"):
        e = sub.add_parser(name)
        e.add_argument("ref")
        e.add_argument("export")
    sp = sub.add_parser("save-pretrained")
    sp.add_argument("out")
    for k, v in (("layers", 2), ("heads", 4), ("embd", 32), ("positions", 16), ("vocab", 101), ("B", 2), ("T", 8),
                 ("seed", 1234)):
        sp.add_argument("--" + k, type=int, default=v)
    tl = sub.add_parser("transformers-logits")
    tl.add_argument("export")
    tl.add_argument("tokens")
    tl.add_argument("B", type=int)
    tl.add_argument("T", type=int)
    tl.add_argument("ours")
    b = sub.add_parser("big")
    b.add_argument("out")
    b.add_argument("--dtype", choices=["F32", "BF16"], default="BF16")
    a = ap.parse_args()
    torch.set_default_dtype(torch.float64)
    {"make": cmd_make, "compare": cmd_compare, "loss": cmd_loss, "check-export": cmd_check_export,
     "transformers": cmd_transformers, "save-pretrained": cmd_save_pretrained,
     "transformers-logits": cmd_transformers_logits, "big": cmd_big}[a.cmd](a)


if __name__ == "__main__":
    main()
