#!/usr/bin/env python3
"""Step-level roofline and memory model of one training step (a prediction, not a measurement).

Lists every kernel / GEMM of one micro-step in the order model/gpt2.cpp issues them
(forward, backward, then the optimizer step), each with FLOPs, HBM bytes and
time = max(FLOPs / (peak * eff_flops), bytes / (bandwidth * eff_bw)); sums them to a
step time, tokens/s and MFU (llm.c's accounting); prints the per-rank memory table
buffer by buffer as GPT2::allocate_activations, AdamW, DataParallel (ZeRO 0-3) and
the CUDA backend allocate them, and at --world W > 1 each ZeRO stage's bytes per rank
and step on the interconnect, their time and the part the schedule leaves exposed
(comm_rows). With --offload-optimizer cpu the optimizer's state moves to the host
(memory rows of group "host", outside the device's total) and the step gains the
offload's pipeline (offload_ops): gradients down and weights up over PCIe beside the
host's AdamW, chunk by chunk.

Byte-counting assumptions (conservative, stated once here):
  * a GEMM reads each operand once and writes its output once (dW GEMMs run with
    beta = 1: dW is read and written); cuBLASLt tiles re-read operands from L2, not HBM;
  * GELU epilogues (--gelu-fusion 1): the fc forward GEMM (GELU_AUX_BIAS) also writes
    fch_gelu beside fch (its aux), the fcproj dinp GEMM (DGELU) also reads fch; the
    epilogue is assumed not to lower the GEMM's efficiency (not measured);
  * an elementwise / row kernel reads each input once and writes each output once;
    "+=" outputs are read and written;
  * flash attention: q, k, v (in place in qkv) read once per kernel, out / dqkv
    written once; the K/V tile re-reads of each query block are in the L2 term
    (the profile's global sectors), not HBM (a head's K and V are 256 KiB);
  * the classifier's second pass re-reads the logits from HBM (no L2 credit);
  * host synchronisations, launch gaps and stream bubbles are NOT modelled (0 s).
FLOPs: tensor-core GEMM work (2 per multiply-add); flash attention counts the visited
64x64 tiles (136 of 256 at T = 1024, causal), cuDNN FlashAttention's convention
(4 T^2 hs per head, halved for causal), classic attention the full T x T.
Elementwise arithmetic is far below the bandwidth bound and is not counted.

Attention kinds (--attention, the trainer's flag; auto resolves as the trainer does):
  * flash: our kernels priced from their counts per 64x64 tile pair
    (attention_counts.json, written by count_attention.py from nvcc's sm_90 PTX and
    the emulator profile): the slowest of tensor-core FLOPs, issue slots, MUFU
    results, shared-memory wavefronts, L2 sectors and HBM bytes at the H100's rates;
  * cudnn: cuDNN's published forward throughput (FlashAttention-3 paper) for both passes;
  * classic: cuBLAS GEMMs at the GEMM efficiency, softmax kernels at bandwidth.

With --profile FILE (default: build/profile/kernels.jsonl when it exists; `make
profile-cuda` writes it) the other kernels' memory transactions, counted by the
emulator's profile build at d12's per-warp access patterns, add two bounds to the
ops they belong to: shared-memory wavefronts at one per SM per clock, and global
sectors (32 bytes each, at the L2's bandwidth: they include re-reads that hit L2).
It applies to the d12 shapes the profile was taken at (C=768, 12 heads of 64,
T=1024) and its dtype.
"""
import argparse
import re
import sys

from step_model import (
    PEAK_BF16, HBM_BW, SMS, SM_CLOCK, SMEM_WAVEFRONTS_PER_CLOCK, ISSUE_PER_CLOCK, MUFU_PER_CLOCK, L2_BW,
    FA2_FWD_PUBLISHED, CUDNN_FWD_PUBLISHED, EFF_GEMM, PCIE_GBS, OFFLOAD_CHUNK, HOST_ADAMW_GBS,
    ADAMW_HOST_BYTES, OFFLOAD_BUS_BYTES, COUNTS_FILE, CountedAttention, MUFU_CLASS, load_counts, Config,
    num_params, layer_numel, zero_plan, zero3_slots, memory_table, group_totals, device_bytes, fmt_bytes,
    step_ops)

# ----------------------------------------------------------------- communication (data parallel)

def comm_rows(c, ops):
    """Per ZeRO stage 0..3, one rank's collectives of one step (one micro-step): [(stage, gradient
    bytes, parameter bytes, seconds at the link, seconds exposed, what is exposed)].

    Bytes: what one rank sends (= receives) through bandwidth-optimal rings, (W-1)/W of each
    reduce-scattered or gathered buffer, twice that for an all-reduce; P counts wte at Vp. Time:
    bytes / the link's bandwidth (--link-gbps per GPU), latency not modelled. Exposed: what the
    schedule (docs/distributed.md, "Overlap with the backward"; train/zero_params.h) cannot hide
    under the compute of this roofline's layers, collectives running one after another on the
    communication stream:
      * stages 0-2: the layers' gradients travel during the backward (stage 0 all-reduces
        buckets, stages 1/2 reduce-scatter); the tied wte gradient is final only after the
        backward, so it and wpe/lnf travel after it; stages 1/2 all-gather the parameters after
        the update, before the next forward;
      * stage 3: the gradients as stage 2, and a layer is all-gathered before each use: layer 0
        before the forward's first layer (nothing to hide under), layer l+1 beside layer l's
        forward; in the backward the layers still in the slots are not gathered again
        (L - slots gathers), each beside the layer above's backward together with that
        layer's reduce-scatter; wte, wpe and lnf are gathered whole after the update.
    With gradient accumulation stages 2/3 reduce-scatter every micro-step and stage 3 gathers
    L - slots layers in each later forward (the slots hold layers 0..slots-1 from the
    backward); stages 0/1 communicate in the last micro-step only."""
    W, s, L = c.world, c.s, c.L
    f = (W - 1) / W
    bw = c.link_gbps * 1e9 / 8
    P, Ln = num_params(c), layer_numel(c)
    whole = P - L * Ln  # wte, wpe, lnf
    regather = max(0, L - zero3_slots(c))
    t = lambda n: f * n * s / bw  # one reduce-scatter or all-gather of n elements
    fwd = sum(o.time() for o in ops if o.phase == "forward layers")
    bwd = sum(o.time() for o in ops if o.phase == "backward layers")
    tf = fwd / L if L else 0.0
    rows = [(0, 2 * f * P * s, 0.0, 2 * t(P), max(0.0, 2 * t(L * Ln) - bwd) + 2 * t(whole),
             "the layers' buckets beyond the backward's compute; the embeddings' bucket (wte, wpe, lnf) after it")]
    for z in (1, 2):
        rows.append((z, f * P * s, f * P * s, 2 * t(P), max(0.0, t(L * Ln) - bwd) + t(whole) + t(P),
                     "the layers' reduce-scatters beyond the backward's compute; wte, wpe, lnf after it; "
                     "the parameter all-gather after the update"))
    gathered = whole + (L + regather) * Ln
    exposed3 = (t(Ln) + (L - 1) * max(0.0, t(Ln) - tf) + max(0.0, t(L * Ln) + t(regather * Ln) - bwd) +
                t(whole) + t(whole)) if L else 0.0
    rows.append((3, f * P * s, f * gathered * s, t(P) + t(gathered), exposed3,
                 "layer 0's gather; each forward gather beyond a layer's forward; the backward's gathers and "
                 "reduce-scatters beyond its compute; wte, wpe, lnf reduce-scattered after it and gathered after "
                 "the update"))
    return rows, fwd, bwd


def print_comm(c, ops, heading="### "):
    W = c.world
    print("%sCommunication per rank and step (ZeRO stages at %d rank%s, %.0f Gb/s = %.0f GB/s per GPU)%s" % (
        heading, W, "" if W == 1 else "s", c.link_gbps, c.link_gbps / 8, "" if heading else ":"))
    print()
    if W == 1:
        print("One rank: nothing travels (`--world W` for data parallelism).")
        print()
        return
    rows, fwd, bwd = comm_rows(c, ops)
    step = sum(o.time() for o in ops)
    Ln, slots = layer_numel(c), zero3_slots(c)
    print("| stage | gradients MB | parameters MB | sent (= received) per rank MB | at the link ms | exposed ms "
          "| step + exposed ms | exposed: |")
    print("|---|---|---|---|---|---|---|---|")
    for z, g, p, t, e, what in rows:
        name = "**%d**" % z if z == c.zero else "%d" % z
        print("| %s | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | %s |" % (
            name, g / 1e6, p / 1e6, (g + p) / 1e6, t * 1e3, e * 1e3, (step + e) * 1e3, what))
    print()
    gather = (W - 1) / W * Ln * c.s / (c.link_gbps * 1e9 / 8)
    print("Stage 3 gathers per step %d layers (%d in the forward, %d in the backward: %d stay in the %d slots) of %.1f MB "
          "each, %.2f ms at the link, beside a layer's forward of %.2f ms and backward of %.2f ms (this roofline, "
          "compute %.1f ms of the %.1f ms step); wte, wpe and lnf (%.0f MB) once. Bandwidth term only; the "
          "collectives' latency (a ring's 2(W-1) hops) is not counted." % (
              c.L + max(0, c.L - slots), c.L, max(0, c.L - slots), min(slots, c.L), slots, Ln * c.s / 1e6,
              gather * 1e3, fwd / c.L * 1e3 if c.L else 0, bwd / c.L * 1e3 if c.L else 0, (fwd + bwd) * 1e3,
              step * 1e3, (num_params(c) - c.L * Ln) * c.s / 1e6))
    print()


def print_offload(argvs, heading="### "):
    """Per config (argv lists, each run with and without --offload-optimizer cpu): the shard, device
    and host memory, and the offload's pipeline in the step."""
    if heading is not None:
        print("%sThe optimizer offloaded (`--offload-optimizer cpu`), per rank and step" % heading)
        print()
    print("| config | shard parameters | device GB without / with | host GB | PCIe MB each way | PCIe ms "
          "| host AdamW ms | added ms | step ms without / with |")
    print("|---|---|---|---|---|---|---|---|---|")
    c = None
    for argv in argvs:
        base = Config(parse(argv + ["--offload-optimizer", "none"]))
        c = Config(parse(argv + ["--offload-optimizer", "cpu"]))
        ops = step_ops(c)
        pipe = [o for o in ops if o.group == "offload pipeline"][0].times()
        added = sum(o.time() for o in ops if o.group in ("offload pipeline", "offload fill"))
        P = num_params(c)
        n = P if c.zero == 0 else min(zero_plan(c)[0], P)
        tot, tot0 = group_totals(c), group_totals(base)
        print("| ZeRO-%d, W=%d | %d | %.2f / %.2f | %.2f | %.0f | %.1f | %.1f | %.1f | %.1f / %.1f |" % (
            c.zero, c.world, n, device_bytes(tot0) / 1e9, device_bytes(tot) / 1e9, tot["host"] / 1e9,
            n * OFFLOAD_BUS_BYTES / 1e6, pipe["PCIe"] * 1e3, pipe["host"] * 1e3, added * 1e3,
            sum(o.time() for o in step_ops(base)) * 1e3, sum(o.time() for o in ops) * 1e3))
    print()
    print("Added to the step (the next forward needs the weights): the slower of PCIe (2 x shard x %d B, fp32 at "
          "either precision, both directions on one stream, at %.0f GB/s: PCIe 5.0 x16, H100 SXM, pinned; "
          "assumed, with a path of its own per GPU) and the host's AdamW (%d B per shard parameter of host memory "
          "traffic at %.1f GB/s, measured on the development VM), plus one %d-parameter chunk down and one up "
          "(the pipeline's fill and drain; `--pcie-gbs`, `--host-adamw-gbs`). On a server, AdamW's rate per rank "
          "is the host's AdamW bandwidth over the GPUs that share it: t = %d B x shard x GPUs per host / "
          "host GB/s. Dropped: the device's AdamW kernel; not counted: the host waits' latency and the "
          "device's bf16 conversions (microseconds)." % (OFFLOAD_BUS_BYTES, c.pcie_gbs, ADAMW_HOST_BYTES,
                                                          c.host_gbs, OFFLOAD_CHUNK, ADAMW_HOST_BYTES))
    print()


# ----------------------------------------------------------------- the profile (make profile-cuda)

MATMUL_SHAPES = {"qkv": "C=768,OC=2304", "attproj": "C=768,OC=768", "fc": "C=768,OC=3072",
                 "fcproj": "C=3072,OC=768", "lm_head": "C=768,OC=50304"}


def load_profile(path):
    import json
    return [json.loads(line) for line in open(path) if line.strip()]


def profile_applies(c, rows):
    dtypes = {r.get("dtype") for r in rows}
    return c.C == 768 and c.NH == 12 and c.T == 1024 and dtypes == {c.dtype}


def profile_rows_for(op, rows):
    """The profiled kernels one roofline op runs: (rows, factor on their scaled counts)."""
    name = op.name
    word, tag = (name.split(" ") + [""])[:2]
    def case(pop, shape=None, kernel=None):
        return [r for r in rows if r["op"] == pop and (shape is None or shape in r["shape"]) and
                (kernel is None or kernel in r["kernel"])]
    if word in ("encoder_forward", "encoder_backward", "layernorm_forward", "residual_layernorm_forward",
                "layernorm_backward", "gelu_backward", "classifier_forward_backward", "adamw_update"):
        return case(word)
    if word.startswith("gelu_forward"):
        return case("gelu_forward")
    if word == "sum_squares":
        return case("sum_squares")
    # flash_forward and flash_backward: their wavefronts and sectors come with the
    # counts (attention_counts.json, from this profile), not again from here
    if word == "flash_backward_dsum":
        return case("attention_backward", kernel="dsum")
    if word in ("bias_colsum", "bias_accumulate") and tag in MATMUL_SHAPES:
        kernel = "accumulate_partials" if word == "bias_accumulate" else "column_sum_partials"
        return case("matmul_backward", MATMUL_SHAPES[tag], kernel)
    return []


def attach_profile(c, ops, rows):
    """Adds each op's profiled shared wavefronts and global sectors (per call at this config)."""
    tokens_ratio = c.B * c.T / (64.0 * 1024)  # the profile's scale is to B=64, T=1024
    P = num_params(c)
    shard, _ = zero_plan(c)
    n_opt = P if c.zero == 0 else min(shard, P)
    for op in ops:
        for r in profile_rows_for(op, rows):
            per_elem = op.name.split(" ")[0] in ("adamw_update", "sum_squares")
            f = r["scale"] * (n_opt / 124475904.0 if per_elem else tokens_ratio)
            op.wavefronts += r["shared_wavefronts"] * f
            op.sectors += r["global_sectors"] * f
            op.kernels.append((r["kernel"], r["shared_wavefronts"] * f, r["global_sectors"] * f))


def print_profile_report(c, ops_after):
    print("Five most expensive ops with their bounds (ms per call; issue and MUFU for the counted flash kernels):")
    print()
    print("| op | calls | compute | DRAM | shared | L2 | issue | MUFU | bound | ms per step |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    per = {}
    for o in ops_after:
        e = per.setdefault(o.name, [0, o])
        e[0] += 1
    top = sorted(per.values(), key=lambda e: -e[0] * e[1].time())[:5]
    for n, o in top:
        t = o.times()
        cell = lambda k: "%.3f" % (t[k] * 1e3) if k in t else "-"
        print("| %s | %d | %s | %s | %s | %s | %s | %s | %s | %.2f |" % (
            o.name, n, cell("compute"), cell("memory"), cell("shared"), cell("L2"), cell("issue"), cell("mufu"),
            o.bound(), n * o.time() * 1e3))
    print()
    print("Profiled kernels (per call at this config):")
    print()
    print("| op | kernel | shared wavefronts | global sectors | shared ms | L2 ms |")
    print("|---|---|---|---|---|---|")
    seen = set()
    for o in ops_after:
        for k, wf, sec in o.kernels:
            if (o.name, k) in seen:
                continue
            seen.add((o.name, k))
            m = re.match(r"^\w+ \((.*)\)$", k)  # the emulator's "VARIABLE (function)" label
            print("| %s | `%s` | %.3g | %.3g | %.3f | %.3f |" % (
                o.name, m.group(1) if m else k, wf, sec, wf / (SMS * SM_CLOCK * SMEM_WAVEFRONTS_PER_CLOCK) * 1e3, sec * 32 / L2_BW * 1e3))
    print()


# ----------------------------------------------------------------- report

def llmc_flops_per_token(c):
    # llm.c gpt2_estimate_mfu: 6 N + 6 L C T, N = model->num_parameters: every parameter
    # tensor including wte at the padded vocabulary Vp, wpe, layernorm weights and biases.
    return 6 * num_params(c) + 6 * c.L * c.C * c.T


def summarize(c, ops):
    t = sum(o.time() for o in ops)
    tokens = c.B * c.T
    tps = tokens / t
    mfu = llmc_flops_per_token(c) * tps / PEAK_BF16
    hw = sum(o.flops for o in ops)
    return t, tps, mfu, hw


def print_roofline(c, title, top=14, profile=None):
    ops = step_ops(c)
    if profile:
        attach_profile(c, ops, profile)
    t, tps, mfu, hw = summarize(c, ops)
    print("### %s" % title)
    print()
    print("%d ops per step; step %.1f ms, %.0f tokens/s, MFU %.1f%% (llm.c accounting: %.1f MFLOP/token x "
          "tokens/s / 989 TFLOP/s); hardware FLOPs %.2f TFLOP/step" %
          (len(ops), t * 1e3, tps, mfu * 100, llmc_flops_per_token(c) / 1e6, hw / 1e12))
    print()
    print_groups(c, ops, t, top)
    return t, tps, mfu


def print_groups(c, ops, t, top=14):
    hw = sum(o.flops for o in ops)
    groups = {}
    for o in ops:
        g = groups.setdefault(o.group, [0, 0.0, 0.0, 0.0, set()])
        g[0] += 1
        g[1] += o.flops
        g[2] += o.bytes
        g[3] += o.time()
        g[4].add(o.bound())
    print("| op group | calls | GFLOP | GB | bound | ms | share |")
    print("|---|---|---|---|---|---|---|")
    for name, g in sorted(groups.items(), key=lambda kv: -kv[1][3])[:top]:
        print("| %s | %d | %.0f | %.2f | %s | %.2f | %.1f%% |" % (
            name, g[0], g[1] / 1e9, g[2] / 1e9, "/".join(sorted(g[4])), g[3] * 1e3, 100 * g[3] / t))
    rest = sorted(groups.items(), key=lambda kv: -kv[1][3])[top:]
    if rest:
        print("| (other %d groups) | %d | %.0f | %.2f | | %.2f | %.1f%% |" % (
            len(rest), sum(g[0] for _, g in rest), sum(g[1] for _, g in rest) / 1e9,
            sum(g[2] for _, g in rest) / 1e9, sum(g[3] for _, g in rest) * 1e3,
            100 * sum(g[3] for _, g in rest) / t))
    print("| **total** | %d | %.0f | %.2f | | **%.1f** | |" % (
        len(ops), hw / 1e9, sum(o.bytes for o in ops) / 1e9, t * 1e3))
    print()


def print_ops(c):
    for i, o in enumerate(step_ops(c)):
        print("%5d  %-34s %12.3f GFLOP %10.4f GB  %-7s %9.1f us" % (
            i, o.name, o.flops / 1e9, o.bytes / 1e9, o.bound(), o.time() * 1e6))


def print_memory(c, title):
    rows = memory_table(c)
    print("### %s" % title)
    print()
    print("| group | buffer | elements | B/elem | GB |")
    print("|---|---|---|---|---|")
    tot = {}
    for g, name, n, e in rows:
        tot[g] = tot.get(g, 0) + n * e
        if n * e >= 1e6 or g in ("params", "grads", "optimizer"):
            print("| %s | %s | %d | %d | %.3f |" % (g, name, n, e, n * e / 1e9))
    small = [(g, n, e) for g, name, n, e in rows if n * e < 1e6 and g not in ("params", "grads", "optimizer", "host")]
    if small:
        print("| - | %d buffers under 1 MB | | | %.3f |" % (len(small), sum(n * e for _, n, e in small) / 1e9))
    total = device_bytes(tot)
    for g in ("params", "grads", "optimizer", "activations", "backend"):
        print("| **%s** | | | | **%.2f** |" % (g, tot.get(g, 0) / 1e9))
    print("| **total per rank** (+ CUDA context and cuBLAS's own workspace, ~0.5-1 GB, not counted) | | | | **%.2f** (%.2f GiB) |"
          % (total / 1e9, total / 2 ** 30))
    if "host" in tot:
        print("| **host per rank** (the offloaded optimizer; not in the total) | | | | **%.2f** (%.2f GiB) |" % (
            tot["host"] / 1e9, tot["host"] / 2 ** 30))
    print()
    return tot, total


def trainer_line(c):
    """The trainer's "| memory/rank" line for this config (train/trainer.cpp)."""
    tot = group_totals(c)
    line = "params %s, grads %s, optimizer %s, activations %s" % (
        fmt_bytes(tot["params"]), fmt_bytes(tot["grads"]), fmt_bytes(tot.get("optimizer", 0)),
        fmt_bytes(tot["activations"]))
    return line + ("; optimizer on the host " + fmt_bytes(tot["host"]) if c.offload else "")


def dry_run_line(c):
    """The row `train_gpt2cu --dry-run W` prints for this config (train/memory_plan.cpp): every device
    group but the backend's on-demand workspaces, plus DataParallel's clip state (two fp64 scalars);
    offloaded, the host's bytes after it."""
    tot = group_totals(c)
    total = device_bytes(tot) - tot.get("backend", 0) + 2 * 8
    line = "%7d %12s %12s %9.3f %12s %12s %12s %14d" % (
        c.world, fmt_bytes(tot["params"]), fmt_bytes(tot["grads"]), tot["grads"] / (num_params(c) * c.s),
        fmt_bytes(tot.get("optimizer", 0)), fmt_bytes(tot["activations"]), fmt_bytes(total), total)
    if c.offload:
        line += "  %s (%d bytes)" % (fmt_bytes(tot["host"]), tot["host"])
    return line


PRESETS = {"d12": (12, 768, 12), "d24": (24, 1024, 16), "d36": (36, 1280, 20), "d48": (48, 1600, 25)}


def parse(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--model", default="d12", help="d12|d24|d36|d48 or dN (64N channels, N heads)")
    p.add_argument("--L", type=int)
    p.add_argument("--C", type=int)
    p.add_argument("--NH", type=int)
    p.add_argument("--V", type=int, default=50257)
    p.add_argument("--Vp", type=int, help="default: V rounded up to 128")
    p.add_argument("--max-seq", type=int, default=1024)
    p.add_argument("-B", type=int, default=64)
    p.add_argument("-T", type=int, default=1024)
    p.add_argument("--dtype", choices=["bf16", "fp32"], default="bf16")
    p.add_argument("--recompute", type=int, choices=[0, 1, 2], default=0)
    p.add_argument("--zero", type=int, choices=[0, 1, 2, 3], default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--link-gbps", type=float, default=400.0,
                   help="interconnect bandwidth per GPU in Gb/s for the communication table (400: one 400 Gb/s "
                        "NIC per GPU, as on H100 clusters)")
    p.add_argument("--offload-optimizer", choices=["none", "cpu"], default="none",
                   help="the trainer's flag: cpu keeps AdamW's state on the host and runs the update there")
    p.add_argument("--pcie-gbs", type=float, default=PCIE_GBS,
                   help="host link per GPU and direction in GB/s (default: PCIe 5.0 x16, ~55 GB/s effective)")
    p.add_argument("--host-adamw-gbs", type=float, default=HOST_ADAMW_GBS,
                   help="the host's AdamW rate per rank in GB/s of state traffic (28 B per parameter); default: "
                        "measured on the development VM; a server: its AdamW bandwidth / the GPUs sharing it")
    p.add_argument("--attention", choices=["auto", "cudnn", "flash", "classic"], default="auto",
                   help="the trainer's flag: auto = cudnn for bf16 (head size a multiple of 8 up to 128) when the "
                        "build has cuDNN, else flash")
    p.add_argument("--no-cudnn", action="store_true", help="a build without cuDNN (auto then runs flash)")
    p.add_argument("--counts", default=None,
                   help="the flash kernels' counts per tile pair (default: attention_counts.json beside this script)")
    p.add_argument("--doc", action="store_true",
                   help="print the block of docs/kernels.md between its roofline markers (test/docs/roofline_doc_test.sh)")
    p.add_argument("--update-doc", metavar="FILE",
                   help="replace the block between FILE's roofline markers with --doc's output")
    p.add_argument("--kernels", choices=["x128", "scalar"], default="x128",
                   help="x128: today's packed kernels; scalar: before (2-byte loads, old layernorm bwd, 3-pass classifier)")
    p.add_argument("--eff-gemm", type=float, default=EFF_GEMM)
    p.add_argument("--gelu-fusion", type=int, choices=[0, 1],
                   help="1: GELU / dGELU in the fc / fcproj dinp GEMM epilogues; 0: separate gelu kernels "
                        "(default: 1 with x128 kernels, 0 with scalar ones: the before state had no fusion)")
    p.add_argument("--ln-fusion", type=int, choices=[0, 1],
                   help="1: residual add and the next layernorm in one kernel (residual_layernorm_forward); "
                        "0: two kernels (default: 1 with x128 kernels, 0 with scalar ones)")
    p.add_argument("--cublaslt-workspace-mib", type=int, default=32)
    p.add_argument("--ops", action="store_true", help="list every op of the step")
    p.add_argument("--profile", default=None,
                   help="the kernels' memory transactions (make profile-cuda); default build/profile/kernels.jsonl "
                        "when it exists; 'none' to leave them out")
    p.add_argument("--memory-only", action="store_true")
    p.add_argument("--trainer-line", action="store_true", help="print the trainer's memory/rank line only")
    p.add_argument("--dry-run-line", action="store_true",
                   help="print the row of the trainer's --dry-run table at --world only")
    a = p.parse_args(argv)
    m = a.model
    if m in PRESETS:
        L, C, NH = PRESETS[m]
    else:
        L = int(m[1:])
        C, NH = 64 * L, L
    a.L = a.L or L
    a.C = a.C or C
    a.NH = a.NH or NH
    a.Vp = a.Vp or (a.V + 127) // 128 * 128
    if a.gelu_fusion is None:
        a.gelu_fusion = int(a.kernels == "x128")
    if a.ln_fusion is None:
        a.ln_fusion = int(a.kernels == "x128")
    import os
    path = a.counts or os.path.join(os.path.dirname(os.path.abspath(__file__)), "attention_counts.json")
    a.counts = load_counts(path)
    if a.counts is None:
        raise SystemExit("roofline: %s is missing (dev/roofline/count_attention.py writes it)" % path)
    return a


def step_with(argv, profile=None):
    """(config, ops, step seconds) of the roofline for these arguments."""
    c = Config(parse(argv))
    ops = step_ops(c)
    if profile:
        attach_profile(c, ops, profile)
    return c, ops, sum(o.time() for o in ops)


def attention_ms(ops):
    return sum(o.time() for o in ops if o.group.startswith(("flash", "attn", "cudnn"))) * 1e3


def kind_table(argv, profile=None):
    """The step with each attention kind, and the kind --attention auto runs."""
    rows = []
    how = {"flash": "our kernels' counts (attention_counts.json) at the H100's rates",
           "cudnn": "cuDNN's published forward throughput, %.0f TFLOP/s, both passes" % (CUDNN_FWD_PUBLISHED / 1e12),
           "classic": "cuBLAS GEMMs at GEMM eff + softmax kernels at bandwidth"}
    for kind in ("flash", "cudnn", "classic"):
        c, ops, t = step_with(argv + ["--attention", kind], profile)
        tps = c.B * c.T / t
        rows.append((kind, how[kind], attention_ms(ops), t * 1e3, tps, llmc_flops_per_token(c) * tps / PEAK_BF16))
    a = parse(argv + ["--attention", "auto"])
    c = Config(a)
    if c.attention == "cudnn":
        why = "%s storage, head size %d (a multiple of 8 up to 128), a build with cuDNN" % (c.dtype, c.C // c.NH)
    else:
        why = "%s storage, head size %d%s" % (c.dtype, c.C // c.NH, ", a build without cuDNN" if a.no_cudnn else "")
    return rows, c.attention, why


def print_kind_table(argv, profile=None):
    rows, pick, why = kind_table(argv, profile)
    print("| attention | priced by | attention ms/step | step ms | tokens/s | MFU |")
    print("|---|---|---|---|---|---|")
    for kind, how, att, t, tps, mfu in rows:
        name = "**%s** (auto)" % kind if kind == pick else kind
        print("| %s | %s | %.1f | %.1f | %.0fk | %.1f%% |" % (name, how, att, t, tps / 1e3, mfu * 100))
    print()
    print("`--attention auto` runs **%s** here (%s); flash otherwise." % (pick, why))
    print()


def print_attention_counts(c):
    """The counts per tile pair, their times at the H100's rates, and the published anchors."""
    k = c.counts["kernels"]
    f, b = k["forward"], k["backward"]
    clk = lambda n, rate: n / rate  # SM clocks per tile pair
    print("Flash attention per 64x64 tile pair (bf16, head size 64; `%s`, regenerated by "
          "dev/roofline/count_attention.py from nvcc's sm_90 PTX and `make profile-cuda`):" % COUNTS_FILE)
    print()
    print("| per tile pair | forward | backward |")
    print("|---|---:|---:|")
    print("| tensor-core FLOPs (mma.sync m16n8k16) | %d | %d |" % (f["flops_per_pair"], b["flops_per_pair"]))
    print("| shared-memory wavefronts (profile) | %.1f | %.1f |" % (f["shared_wavefronts_per_pair"],
                                                                   b["shared_wavefronts_per_pair"]))
    print("| global sectors (profile) | %.1f | %.1f |" % (f["global_sectors_per_pair"], b["global_sectors_per_pair"]))
    print("| shared wavefronts per 1,000 tensor FLOPs | %.3f | %.3f |" % (
        1e3 * f["shared_wavefronts_per_pair"] / f["flops_per_pair"],
        1e3 * b["shared_wavefronts_per_pair"] / b["flops_per_pair"]))
    for cls in c.counts["classes"]:
        note = " (not priced: ptxas folds them)" if cls == "mov" else ""
        print("| issue slots: %s%s | %.1f | %.1f |" % (cls, note, f["issue_slots_per_pair"][cls],
                                                     b["issue_slots_per_pair"][cls]))
    priced = lambda d: sum(v for kk, v in d.items() if kk != "mov")
    print("| issue slots priced (warp-instructions, loop body) | %.1f | %.1f |" % (
        priced(f["issue_slots_per_pair"]), priced(b["issue_slots_per_pair"])))
    print("| issue slots per block outside the loop | %.1f | %.1f |" % (
        priced(f["issue_slots_per_block_outside_loop"]), priced(b["issue_slots_per_block_outside_loop"])))
    tensor = PEAK_BF16 / (SMS * SM_CLOCK)
    print("| SM clocks: tensor (%.0f FLOP/clock) | %.0f | %.0f |" % (
        tensor, clk(f["flops_per_pair"], tensor), clk(b["flops_per_pair"], tensor)))
    print("| SM clocks: shared (%.0f wavefront/clock) | %.0f | %.0f |" % (
        SMEM_WAVEFRONTS_PER_CLOCK, clk(f["shared_wavefronts_per_pair"], SMEM_WAVEFRONTS_PER_CLOCK),
        clk(b["shared_wavefronts_per_pair"], SMEM_WAVEFRONTS_PER_CLOCK)))
    print("| SM clocks: issue (%.0f warp-instructions/clock) | %.0f | %.0f |" % (
        ISSUE_PER_CLOCK, clk(priced(f["issue_slots_per_pair"]), ISSUE_PER_CLOCK),
        clk(priced(b["issue_slots_per_pair"]), ISSUE_PER_CLOCK)))
    print("| SM clocks: MUFU (%.0f results/clock) | %.0f | %.0f |" % (
        MUFU_PER_CLOCK, clk(32 * f["issue_slots_per_pair"][MUFU_CLASS], MUFU_PER_CLOCK),
        clk(32 * b["issue_slots_per_pair"][MUFU_CLASS], MUFU_PER_CLOCK)))
    print("| SM clocks: L2 (%.1f TB/s over %d SMs) | %.0f | %.0f |" % (
        L2_BW / 1e12, SMS, f["global_sectors_per_pair"] * 32 / (L2_BW / (SMS * SM_CLOCK)),
        b["global_sectors_per_pair"] * 32 / (L2_BW / (SMS * SM_CLOCK))))
    print()
    print("H100 SXM rates: %d SMs at %.2f GHz; %.0f TFLOP/s dense bf16; HBM %.2f TB/s. Each flash call's time is "
          "the slowest of its resources over all its tile pairs (causal: %d pairs per head at T = %d)." % (
              SMS, SM_CLOCK / 1e9, PEAK_BF16 / 1e12, HBM_BW / 1e12, (c.T // 64) * (c.T // 64 + 1) // 2, c.T))
    print()


def print_attention_calls(c):
    """Each flash call's resources at this config, and our forward beside the published throughputs."""
    ops = [o for o in step_ops(c) if isinstance(o, CountedAttention)]
    seen = {}
    for o in ops:
        seen.setdefault(o.name, [0, o])[0] += 1
    print("| flash call (ms) | tensor | DRAM | shared | L2 | issue | MUFU | bound | per step |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (n, o) in seen.items():
        t = o.times()
        print("| %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.3f | %s | %.2f |" % (
            name, t["compute"] * 1e3, t["memory"] * 1e3, t["shared"] * 1e3, t["L2"] * 1e3, t["issue"] * 1e3,
            t["mufu"] * 1e3, o.bound(), n * o.time() * 1e3))
    print()
    fwd = seen["flash_forward"][1]
    fa_flops = 2.0 * c.B * c.NH * c.T * c.T * (c.C // c.NH)
    print("Our flash forward: %.0f TFLOP/s in FlashAttention's FLOP convention (4 T^2 hs per head, halved for "
          "causal); published anchors, not inputs (FlashAttention-3 paper, H100 SXM5, bf16, causal, head size 64, "
          "seq 1k): FlashAttention-2 %.0f TFLOP/s, cuDNN %.0f TFLOP/s." % (
              fa_flops / fwd.time() / 1e12, FA2_FWD_PUBLISHED / 1e12, CUDNN_FWD_PUBLISHED / 1e12))
    print()


def print_doc():
    """The generated block of docs/kernels.md ("Step roofline (predicted)"): every figure there is this."""
    d12 = ["--profile", "none"]
    variants = [
        ("before: classic attention, scalar kernels, GEMM 0.60", ["--attention", "classic", "--kernels", "scalar",
                                                                 "--eff-gemm", "0.6"]),
        ("now, flash attention (our counts), recompute 0", ["--attention", "flash"]),
        ("now, cuDNN attention (`--attention auto`), recompute 0", []),
        ("now, cuDNN attention, GEMM at the review's 0.60 (`--eff-gemm 0.6`)", ["--eff-gemm", "0.6"]),
        ("now, cuDNN attention, `--recompute 1`", ["--recompute", "1"]),
        ("**now, cuDNN attention, `--recompute 2`**: the <= 22 GB config", ["--recompute", "2"]),
        ("`--recompute 2`, flash attention (our counts)", ["--recompute", "2", "--attention", "flash"]),
        ("`--recompute 2`, residual and layernorm as two kernels (`--ln-fusion 0`)", ["--recompute", "2",
                                                                                     "--ln-fusion", "0"]),
        ("`--recompute 2`, GELU kernels (`--gelu-fusion 0`)", ["--recompute", "2", "--gelu-fusion", "0"]),
        ("`--recompute 2`, neither fusion", ["--recompute", "2", "--gelu-fusion", "0", "--ln-fusion", "0"]),
    ]
    print("d12 bf16 B=64 T=1024, one H100 SXM (`python3 dev/roofline/roofline.py --profile none [flags]`; "
          "the other ops' profiled transactions left out, attention's are in its counts):")
    print()
    print("| | flags | step ms | tokens/s | MFU | memory GB |")
    print("|---|---|---|---|---|---|")
    for label, flags in variants:
        c, ops, t = step_with(d12 + flags)
        tps = c.B * c.T / t
        mem = device_bytes(group_totals(c)) / 1e9
        print("| %s | %s | %.1f | %.0fk | %.1f%% | %.2f |" % (
            label, "`%s`" % " ".join(flags) if flags else "(none)", t * 1e3, tps / 1e3, 100 * llmc_flops_per_token(c) * tps / PEAK_BF16,
            mem))
    print()
    print("The step with each attention kind at `--recompute 2`:")
    print()
    print_kind_table(d12 + ["--recompute", "2"])
    c = Config(parse(d12 + ["--recompute", "2", "--attention", "flash"]))
    print_attention_counts(c)
    print_attention_calls(c)
    print("Top groups per step at `--recompute 2` (cuDNN attention):")
    print()
    c, ops, t = step_with(d12 + ["--recompute", "2"])
    print_groups(c, ops, t, top=12)
    print("Memory per rank (`--memory-only`), GB = 10^9 B:")
    print()
    cols = [("d12 bf16 B=64 T=1024, rc 0", ["--model", "d12"]), ("rc 1", ["--model", "d12", "--recompute", "1"]),
            ("rc 2", ["--model", "d12", "--recompute", "2"]),
            ("d48 bf16 B=4 T=1024, ZeRO-1, 8 ranks, rc 0", ["--model", "d48", "-B", "4", "--zero", "1",
                                                          "--world", "8"]),
            ("ZeRO-2", ["--model", "d48", "-B", "4", "--zero", "2", "--world", "8"]),
            ("ZeRO-3", ["--model", "d48", "-B", "4", "--zero", "3", "--world", "8"])]
    tots = []
    for _, flags in cols:
        tot = {}
        for g, name, n, e in memory_table(Config(parse(flags))):
            tot[g] = tot.get(g, 0) + n * e
        tots.append(tot)
    print("| | " + " | ".join(name for name, _ in cols) + " |")
    print("|---|" + "---|" * len(cols))
    for g in ("params", "grads", "optimizer", "activations", "backend"):
        print("| %s | %s |" % (g, " | ".join("%.2f" % (t.get(g, 0) / 1e9) for t in tots)))
    print("| **total** (+ CUDA context, cuBLAS's own workspace: ~0.5-1 GB) | %s |" % " | ".join(
        "**%.2f**" % (sum(t.values()) / 1e9) for t in tots))
    print()
    print("ZeRO-3's parameters: the 1/8 shard, wte, wpe and lnf whole, three gathered-layer slots "
          "(`python3 dev/roofline/roofline.py --model d48 -B 4 --zero 3 --world 8 --memory-only`):")
    print()
    c = Config(parse(["--model", "d48", "-B", "4", "--zero", "3", "--world", "8", "--profile", "none"]))
    print("| buffer | elements | GB |")
    print("|---|---|---|")
    for g, name, n, e in memory_table(c):
        if g == "params":
            print("| %s | %d | %.3f |" % (name, n, n * e / 1e9))
    print()
    print("d48 bf16 B=4 T=1024 (`--model d48 -B 4 --zero 3 --world 8 --profile none`); its step below is this "
          "roofline's:")
    print()
    print_comm(c, step_ops(c), heading="")
    d48 = ["--model", "d48", "-B", "4", "--profile", "none"]
    print("d48 bf16 B=4 T=1024 with the optimizer on the host (`--model d48 -B 4 --zero Z --world W "
          "--offload-optimizer cpu --profile none`); the steps are this roofline's compute, without the "
          "communication table's exposed part:")
    print()
    print_offload([d48 + ["--zero", "0", "--world", "1"], d48 + ["--zero", "2", "--world", "8"],
                   d48 + ["--zero", "3", "--world", "8"]], heading=None)


DOC_BEGIN = "<!-- roofline.py --doc: begin (generated; edit the script, not this block) -->"
DOC_END = "<!-- roofline.py --doc: end -->"


def update_doc(path):
    import contextlib
    import io
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        print_doc()
    text = open(path).read()
    if text.count(DOC_BEGIN) != 1 or text.count(DOC_END) != 1:
        raise SystemExit("roofline: %s needs one '%s' and one '%s' line" % (path, DOC_BEGIN, DOC_END))
    head, rest = text.split(DOC_BEGIN + "\n")
    _, tail = rest.split(DOC_END)
    with open(path, "w") as f:
        f.write(head + DOC_BEGIN + "\n" + out.getvalue() + DOC_END + tail)


def main(argv):
    a = parse(argv)
    if a.doc:
        print_doc()
        return
    if a.update_doc:
        update_doc(a.update_doc)
        return
    c = Config(a)
    if a.trainer_line:
        print(trainer_line(c))
        return
    if a.dry_run_line:
        print(dry_run_line(c))
        return
    att = c.attention + (" (--attention auto)" if c.attention_flag == "auto" else "")
    desc = "L=%d C=%d NH=%d V=%d Vp=%d, B=%d T=%d, %s, recompute %d, ZeRO-%d world %d, %s attention, %s kernels" % (
        c.L, c.C, c.NH, c.V, c.Vp, c.B, c.T, c.dtype, c.recompute, c.zero, c.world, att, c.kernels)
    print("parameters N = %d (llm.c's num_parameters: all tensors, wte at Vp)" % num_params(c))
    print()
    if not a.memory_only:
        import os
        path = a.profile if a.profile is not None else (
            "build/profile/kernels.jsonl" if os.path.exists("build/profile/kernels.jsonl") else "none")
        rows = load_profile(path) if path != "none" else None
        if rows is not None and not profile_applies(c, rows):
            print("profile %s: taken at d12 (C=768, 12 heads, T=1024) in %s; not applied to this config" %
                  (path, "/".join(sorted({str(r.get("dtype")) for r in rows}))))
            print()
            rows = None
        title = "Step roofline: " + desc + ", GEMM eff %.2f, GELU fusion %d, residual+LN fusion %d" % (
            c.eff_gemm, c.gelu_fusion, c.ln_fusion)
        if rows is not None:
            title += ", with the kernels' profiled memory transactions (" + path + ")"
        print_roofline(c, title, profile=rows)
        if rows is not None:
            after = step_ops(c)
            attach_profile(c, after, rows)
            print_profile_report(c, after)
        base = [x for x in argv if x not in ("--ops", "--memory-only")]
        base = [x for i, x in enumerate(base) if x != "--attention" and (i == 0 or base[i - 1] != "--attention")]
        print("### The step with each attention kind")
        print()
        print_kind_table(base + ["--profile", path], rows)
        if c.dtype == "bf16":
            fc = Config(parse(base + ["--attention", "flash"]))
            print_attention_counts(fc)
            print_attention_calls(fc)
        else:
            print("fp32 storage runs the tf32 flash kernels, which have no counts: flash is priced at the TF32 "
                  "tensor peak alone (a lower bound).")
            print()
        if a.ops:
            print_ops(c)
        print_comm(c, step_ops(c))
        if c.offload:
            base = [x for i, x in enumerate(argv) if x != "--offload-optimizer" and
                    (i == 0 or argv[i - 1] != "--offload-optimizer")]
            print_offload([base])
    print_memory(c, "Memory per rank: " + desc)


if __name__ == "__main__":
    main(sys.argv[1:])
