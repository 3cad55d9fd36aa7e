#!/usr/bin/env python3
"""The ZeRO memory table of docs/distributed.md ("ZeRO-3 and offload: GPT-2 XL").

Runs ./train_gpt2cu --dry-run (nothing allocated, no GPU needed) for d48, bf16,
T=1024 at every ZeRO stage with and without --offload-optimizer cpu, and prints
the device bytes per rank at B=4 for 1 and 8 ranks with and without
--recompute 2, then the largest B whose device total leaves 1 GiB of a 24, 40
and 80 GiB card for the CUDA context and the workspaces the table leaves out.
"""
import re
import subprocess
import sys

GiB = 2 ** 30
RESERVE = 1 * GiB
CARDS = (24, 40, 80)


def planned(stage, offload, world, recompute, batch, model="d48"):
    """(device bytes, host bytes) per rank from the --dry-run row of `world`."""
    args = ["./train_gpt2cu", "--dry-run", str(world), "--model", model, "--device", "cuda", "--dtype", "bf16",
            "-B", str(batch), "-T", "1024", "--zero-stage", str(stage), "--recompute", str(recompute)]
    if offload:
        args += ["--offload-optimizer", "cpu"]
    out = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    row = next(line for line in out.splitlines() if re.match(r"\s+%d\s" % world, line))
    host = re.search(r"\((\d+) bytes\)", row)
    return int(row.split()[12]), int(host.group(1)) if host else 0


def largest_batch(stage, offload, world):
    fits = []
    sizes = {b: planned(stage, offload, world, 2, b)[0] for b in range(1, 65)}
    for card in CARDS:
        ok = [b for b, total in sizes.items() if total + RESERVE <= card * GiB]
        fits.append(str(max(ok)) if ok else "-")
    return " / ".join(fits)


def main():
    print("| ZeRO stage | W=1 | W=1, recompute 2 | W=8 | W=8, recompute 2 "
          "| largest B at W=1, recompute 2: 24 / 40 / 80 GB | the same at W=8 |")
    print("|---|---|---|---|---|---|---|")
    for stage in range(4):
        for offload in (False, True):
            cells = []
            for world in (1, 8):
                for recompute in (0, 2):
                    device, host = planned(stage, offload, world, recompute, 4)
                    cells.append("%.1f" % (device / GiB) + (" (+%.1f host)" % (host / GiB) if offload else ""))
            label = "%d%s" % (stage, " + offload" if offload else "")
            print("| %s | %s | %s | %s |" % (label, " | ".join(cells), largest_batch(stage, offload, 1),
                                            largest_batch(stage, offload, 8)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
