#!/usr/bin/python3
"""Float64 PyTorch reference of --eval-hellaswag (run with Debian's /usr/bin/python3).

hellaswag_reference.py OUT_DIR TOKENIZER T
writes OUT_DIR/model.bin (a 2-layer GPT-2 with GPT-2's vocabulary and random weights large enough
that the endings' scores differ clearly), OUT_DIR/hs.jsonl (HellaSwag's format: ctx, endings, label;
one label a string, one context longer than T; the labels chosen from the
reference's own answers so that acc and acc_norm are neither 0 nor 1 nor equal) and OUT_DIR/expected.json: {"n", "acc", "acc_norm"}
scored as llm.c's dev/data/hellaswag.py (tokens of ctx, then of " " + ending; the summed and the mean
loss over the ending's tokens; argmin), the context cut to its newest tokens where a row exceeds T + 1
tokens, as the trainer does; and "margin": the smallest relative gap between an example's best and
second-best score, so that fp32 rounding cannot flip a choice.
"""
import json
import os
import subprocess
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as tr  # noqa: E402  (its float64 GPT-2 forward and llm.c model writer)

EXAMPLES = [
    ("The cat sat on the", ["mat.", "moon, singing loudly to the stars.", "dog", "table and slept"], 0),
    ("She opened the door and", ["walked in.", "the door opened her.", "saw a", "purple"], "1"),
    ("To bake bread, first you", ["mix flour and water.", "fly", "sing a song about rivers", "no"], 2),
    ("A man is playing guitar on stage. He", ["strums", "eats the guitar", "bows to the crowd.", "is"], 3),
    (" ".join(["The long story goes on and on."] * 12) + " Finally,",
     ["it ended.", "the end", "more words here today", "x"], 1),
    ("Water boils at", ["100 degrees.", "night", "the speed of light in a vacuum", "cold"], 0),
]


def encode(tokenizer, text):
    out = subprocess.run([tokenizer, "encode"], input=text.encode(), capture_output=True, check=True).stdout
    return [int(x) for x in out.split()]


def row_scores(p, cfg, ctx, end, T):
    keep = min(len(ctx), T + 1 - len(end))
    row = ctx[len(ctx) - keep:] + end
    idx = torch.tensor([row[:-1]])
    logp = torch.log_softmax(tr.forward(p, idx, cfg)[0], -1)
    losses = [-logp[i, row[i + 1]].item() for i in range(keep - 1, len(row) - 1)]
    return sum(losses), sum(losses) / len(end)


def main():
    out_dir, tokenizer, T = sys.argv[1], sys.argv[2], int(sys.argv[3])
    cfg = {"L": 2, "NH": 2, "C": 64, "V": 50257, "Vp": 50304, "maxT": 64}
    rng = np.random.default_rng(24)
    params32 = {name: rng.normal(0.0, 0.3, shape).astype(np.float32)
                for name, shape in tr.shapes(cfg["L"], cfg["C"], cfg["maxT"], cfg["Vp"]).items()}
    for name in ("ln1w", "ln2w", "lnfw"):
        params32[name] = 1.0 + 0.1 * params32[name]
    tr.write_model(os.path.join(out_dir, "model.bin"), cfg, params32)
    p = {k: torch.tensor(v, dtype=torch.float64) for k, v in params32.items()}
    n = correct = correct_norm = 0
    margin = 1.0
    lines = []
    for i, (ctx, endings, label) in enumerate(EXAMPLES):
        ctx_t = encode(tokenizer, ctx)
        scores = [row_scores(p, cfg, ctx_t, encode(tokenizer, " " + e), T) for e in endings]
        for k in range(2):
            s = sorted(x[k] for x in scores)
            margin = min(margin, (s[1] - s[0]) / abs(s[1]))
        pred = int(np.argmin([s for s, _ in scores]))
        pred_norm = int(np.argmin([m for _, m in scores]))
        # labels that make acc and acc_norm differ from each other and from 0 and 1
        answer = [pred, pred_norm, (pred + 1) % 4, pred, pred_norm, pred][i]
        label = str(answer) if isinstance(label, str) else answer
        lines.append(json.dumps({"ctx": ctx, "endings": endings, "label": label, "activity_label": "x"}))
        n += 1
        correct += pred == answer
        correct_norm += pred_norm == answer
    with open(os.path.join(out_dir, "hs.jsonl"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(out_dir, "expected.json"), "w") as f:
        json.dump({"n": n, "acc": correct / n, "acc_norm": correct_norm / n, "margin": margin}, f)


if __name__ == "__main__":
    main()
