#!/usr/bin/env python3
"""Merges make profile-cuda's per-case profiles into one file and a table.

profile_table.py CASES_DIR OUT.jsonl: CASES_DIR holds list.tsv (the driver's --list:
index, op, shape, scale, dtype) and I.jsonl per case (emu/profile.h's lines). Writes
one line per (op, kernel) with the profile's fields plus "op", "shape", "scale" (the
factor from these counts to one call at d12 B=64 T=1024) and "dtype", and prints a markdown
table: per kernel the requests, wavefronts per shared request against the
conflict-free minimum, and sectors per global request against the ideal.
"""
import json
import os
import re
import sys


def function_name(label):
    """The emulator labels a launch "VARIABLE (function<args>)": the function."""
    m = re.match(r"^\w+ \((.*)\)$", label)
    return m.group(1) if m else label


def ratio(a, b):
    return "%.2f" % (a / b) if b else "-"


def main():
    cases, out_path = sys.argv[1], sys.argv[2]
    rows = []
    with open(os.path.join(cases, "list.tsv")) as f:
        for line in f:
            index, op, shape, scale, dtype = line.rstrip("\n").split("\t")
            path = os.path.join(cases, index + ".jsonl")
            for rec in map(json.loads, open(path)) if os.path.exists(path) else []:
                rec.update(op=op, shape=shape, scale=float(scale), dtype=dtype)
                rows.append(rec)
    with open(out_path, "w") as f:
        for r in rows:
            f.write(json.dumps(r, sort_keys=False) + "\n")
    print("| op | shape | kernel | launches | shared req | wavefronts/req | ideal/req | x ideal |"
          " global req | sectors/req | ideal/req | x ideal |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        sr, gr = r["shared_requests"], r["global_requests"]
        print("| %s | %s | `%s` | %d | %d | %s | %s | %s | %d | %s | %s | %s |" % (
            r["op"], r["shape"], function_name(r["kernel"]), r["launches"], sr, ratio(r["shared_wavefronts"], sr),
            ratio(r["shared_ideal_wavefronts"], sr), ratio(r["shared_wavefronts"], r["shared_ideal_wavefronts"]),
            gr, ratio(r["global_sectors"], gr), ratio(r["global_ideal_sectors"], gr),
            ratio(r["global_sectors"], r["global_ideal_sectors"])))
    print("\n%d kernel rows -> %s" % (len(rows), out_path))


if __name__ == "__main__":
    main()
