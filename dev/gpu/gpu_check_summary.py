#!/usr/bin/env python3
"""The end of scripts/gpu_check.sh: turns its phase table and metrics into the
summary printed in the report and OUT_DIR/gpu_check_summary.json. Exits 1 when a
phase failed or timed out.

MFU uses llm.c's accounting: 6N + 6*L*C*T FLOPs per token (N = GPT-2's
parameters with the 50257-token vocabulary, lm_head tied), against the GPU's
dense bf16 peak (table below; GPU_PEAK_TFLOPS overrides). In rehearsal there is
no peak and no MFU.
"""
import argparse
import json
import os
import sys

# Dense bf16 tensor-core peaks (NVIDIA data sheets; SXM parts unless named).
BF16_PEAK_TFLOPS = [("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("H800", 989.4),
                    ("A100", 312.0), ("L40S", 362.0), ("A10", 125.0)]


def read_tsv(path, width):
    rows = []
    for line in open(path):
        parts = line.rstrip("\n").split("\t")
        rows.append(parts + [""] * (width - len(parts)))
    return rows


def number(value):
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def gpu_peak(name):
    if os.environ.get("GPU_PEAK_TFLOPS"):
        return float(os.environ["GPU_PEAK_TFLOPS"]), "GPU_PEAK_TFLOPS"
    for key, tflops in BF16_PEAK_TFLOPS:
        if key in (name or ""):
            return tflops, f"{key} dense bf16"
    return None, "unknown GPU: set GPU_PEAK_TFLOPS"


def throughput(metrics, mode):
    cfg = dict(kv.split("=") for kv in metrics.get("throughput.config", "").split())
    if not cfg:
        return None
    L, C, T = int(cfg["L"]), int(cfg["C"]), int(cfg["T"])
    n_params = 50257 * C + T * C + L * (12 * C * C + 13 * C) + 2 * C
    flops_per_token = 6 * n_params + 6 * L * C * T
    peak, peak_source = (None, "rehearsal: no GPU") if mode == "rehearsal" else gpu_peak(metrics.get("gpu.name"))
    result = {"config": cfg, "B": number(metrics.get("throughput.B")), "params": n_params,
              "flops_per_token": flops_per_token, "peak_tflops": peak, "peak_source": peak_source}
    for impl in ("ours", "hf", "compact"):
        tps = number(metrics.get(f"throughput.{impl}.tok_per_s"))
        entry = {"status": metrics.get(f"throughput.{impl}.status", "ok" if tps else "missing"),
                 "tok_per_s": tps, "peak_mem_mib": number(metrics.get(f"throughput.{impl}.peak_mem_mib")),
                 "detail": metrics.get(f"throughput.{impl}.detail")}
        if tps and peak:
            entry["mfu"] = tps * flops_per_token / (peak * 1e12)
        result[impl] = entry
    for impl in ("hf", "compact"):
        a, b = result["ours"], result[impl]
        if a["tok_per_s"] and b["tok_per_s"]:
            result[f"speed_ours_over_{impl}"] = a["tok_per_s"] / b["tok_per_s"]
        if a["peak_mem_mib"] and b["peak_mem_mib"]:
            result[f"memory_ours_over_{impl}"] = a["peak_mem_mib"] / b["peak_mem_mib"]
    return result


def print_summary(summary):
    print("\n===== summary =====")
    print(f"{'phase':<12} {'status':<8} {'s':>5} {'budget':>6}  detail")
    for p in summary["phases"]:
        print(f"{p['name']:<12} {p['status']:<8} {p['seconds']:>5} {p['budget_s']:>6}  {p['detail']}")
    tp = summary.get("throughput")
    if tp:
        print(f"\nthroughput {tp['config']} B={tp['B']:.0f}, bf16; MFU vs {tp['peak_tflops'] or '-'} TFLOP/s "
              f"({tp['peak_source']}), {tp['flops_per_token'] / 1e6:.0f} MFLOP/token")
        print(f"{'impl':<10} {'tok/s':>12} {'MFU':>7} {'peak MiB':>9}  status")
        for impl in ("ours", "hf", "compact"):
            e = tp[impl]
            tps = f"{e['tok_per_s']:.0f}" if e["tok_per_s"] else "-"
            mfu = f"{100 * e['mfu']:.1f}%" if e.get("mfu") else "-"
            mem = f"{e['peak_mem_mib']:.0f}" if e["peak_mem_mib"] else "-"
            print(f"{impl:<10} {tps:>12} {mfu:>7} {mem:>9}  {e['status']}")
        for key in sorted(k for k in tp if k.startswith(("speed_", "memory_"))):
            print(f"{key} = {tp[key]:.2f}x")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--phases", required=True)
    ap.add_argument("--metrics", required=True)
    ap.add_argument("--mode", choices=["gpu", "rehearsal"], required=True)
    ap.add_argument("--quick", type=int, default=0)
    ap.add_argument("--json", required=True)
    args = ap.parse_args()
    phases = [{"name": n, "status": s, "seconds": int(sec or 0), "budget_s": int(b or 0), "detail": d}
              for n, s, sec, b, d in read_tsv(args.phases, 5)]
    metrics = {k: v for k, v in read_tsv(args.metrics, 2)}
    summary = {"mode": args.mode, "quick": bool(args.quick), "phases": phases, "metrics": metrics,
               "throughput": throughput(metrics, args.mode)}
    summary["ok"] = all(p["status"] in ("pass", "skipped") for p in phases)
    print_summary(summary)
    with open(args.json, "w") as f:
        json.dump(summary, f, indent=1)
    print(f"\ngpu_check: {'PASS' if summary['ok'] else 'FAIL'}; report and {args.json}")
    return 0 if summary["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
