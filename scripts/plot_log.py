#!/usr/bin/python3
"""Turns a train_gpt2cu --log-jsonl file into a PNG loss curve.

usage: scripts/plot_log.py LOG.jsonl [LOG2.jsonl ...] -o loss.png [--smooth N]

Train loss (optionally smoothed with a running mean of N steps) and validation
loss per log, on one axis; step on x. Needs Debian's python3-matplotlib
(run with /usr/bin/python3)."""
import argparse
import json
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def read_log(path):
    train, val = [], []
    with open(path) as f:
        for n, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                sys.exit(f"error: {path}:{n}: not JSON ({e})")
            if rec.get("type") == "train" and rec.get("loss") is not None:
                train.append((rec["step"], rec["loss"]))
            elif rec.get("type") == "val" and rec.get("val_loss") is not None:
                val.append((rec["step"], rec["val_loss"]))
    if not train and not val:
        sys.exit(f"error: {path}: no train or val records")
    return train, val


def running_mean(ys, n):
    out, acc = [], 0.0
    for i, y in enumerate(ys):
        acc += y
        if i >= n:
            acc -= ys[i - n]
        out.append(acc / min(i + 1, n))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("logs", nargs="+")
    ap.add_argument("-o", "--output", default="loss.png")
    ap.add_argument("--smooth", type=int, default=1, help="running mean over N train steps [1]")
    ap.add_argument("--title", default="GPT-2 training loss")
    a = ap.parse_args()
    fig, ax = plt.subplots(figsize=(8, 5), dpi=120)
    for path in a.logs:
        train, val = read_log(path)
        label = path if len(a.logs) > 1 else ""
        if train:
            xs, ys = zip(*train)
            ax.plot(xs, running_mean(list(ys), max(1, a.smooth)), lw=1.2, label=f"{label} train".strip())
        if val:
            xs, ys = zip(*val)
            ax.plot(xs, ys, "o-", ms=3, lw=1.5, label=f"{label} val".strip())
    ax.set_xlabel("step")
    ax.set_ylabel("loss (nats/token)")
    ax.set_title(a.title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(a.output)
    print(f"wrote {a.output}")


if __name__ == "__main__":
    main()
