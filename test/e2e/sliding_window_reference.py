#!/usr/bin/python3
"""Hugging Face's strided sliding-window perplexity, run literally in float64
PyTorch on an llm.c fp32 model file (v3), for test/e2e/eval_generate_test.sh.

  sliding_window_reference.py MODEL.bin T STRIDE SHARD...
prints "tokens N loss X" over all shards, each shard its own stream (the loop
of the transformers docs "Perplexity of fixed-length models": labels before
the last trg_len positions are -100, the model shifts labels by one).
"""
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torch_reference import TENSOR_NAMES, forward, shapes  # noqa: E402


def read_model(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    assert h[0] == 20240326 and h[1] == 3, "need an llm.c fp32 (v3) model file"
    maxT, V, L, NH, C, Vp = (int(x) for x in h[2:8])
    cfg = {"L": L, "NH": NH, "C": C, "V": V, "Vp": Vp, "maxT": maxT}
    flat = np.frombuffer(raw[1024:], dtype="<f4").astype(np.float64)
    p, off = {}, 0
    for name in TENSOR_NAMES:
        shape = shapes(L, C, maxT, Vp)[name]
        n = int(np.prod(shape))
        p[name] = torch.from_numpy(flat[off:off + n].reshape(shape).copy())
        off += n
    assert off == flat.size
    return p, cfg


def read_shard(path):
    raw = open(path, "rb").read()
    h = np.frombuffer(raw[:1024], dtype="<i4")
    return torch.from_numpy(np.frombuffer(raw[1024:], dtype="<u2").astype(np.int64)[: int(h[2])].copy())


def stream_nll(p, cfg, ids, T, stride):
    nll, count, prev_end, n = 0.0, 0, 0, ids.numel()
    for begin in range(0, n, stride):
        end = min(begin + T, n)
        trg_len = end - prev_end
        input_ids = ids[begin:end].unsqueeze(0)
        labels = input_ids.clone()
        labels[:, :-trg_len] = -100
        logits = forward(p, input_ids, cfg)
        shift_logits, shift_labels = logits[:, :-1, :], labels[:, 1:]
        valid = int((shift_labels != -100).sum())
        if valid:
            loss = torch.nn.functional.cross_entropy(shift_logits.reshape(-1, cfg["V"]), shift_labels.reshape(-1),
                                                     ignore_index=-100, reduction="sum")
            nll += float(loss)
            count += valid
        prev_end = end
        if end == n:
            break
    return nll, count


def main():
    model, T, stride, shards = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4:]
    p, cfg = read_model(model)
    nll, count = 0.0, 0
    with torch.no_grad():
        for s in shards:
            a, b = stream_nll(p, cfg, read_shard(s), min(T, cfg["maxT"]), stride)
            nll, count = nll + a, count + b
    print("tokens %d loss %.12f" % (count, nll / count))


if __name__ == "__main__":
    main()
