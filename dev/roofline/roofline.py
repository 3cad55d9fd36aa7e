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
import math
import re
import sys

# ----------------------------------------------------------------- hardware (H100 SXM)
PEAK_BF16 = 989e12     # dense bf16 tensor core FLOP/s (H100 SXM datasheet: 989.4 TFLOPS, 1,979 with sparsity)
PEAK_TF32 = 494.7e12   # dense TF32 (fp32 storage with --tf32 on)
PEAK_FP32_SIMT = 66.9e12  # fp32 FMA on CUDA cores (no tensor cores)
HBM_BW = 3.35e12       # bytes/s, HBM3 (datasheet)
# The SM-level rates that price the flash kernels' counts (attention_counts.json).
# H100 SXM5 has 132 SMs (Hopper whitepaper); the datasheet's bf16 peak is 132 SMs
# x 4 tensor cores x 1024 dense FLOP/clock at 1.83 GHz, the clock used here.
SMS = 132
SM_CLOCK = 1.83e9
# Shared memory: 32 banks of 4 bytes, each serving 4 bytes per clock (CUDA C++
# Programming Guide, "Shared Memory" of compute capability 5.x and later): one
# 128-byte wavefront per SM per clock.
SMEM_WAVEFRONTS_PER_CLOCK = 1.0
# Issue: 4 SM sub-partitions, each with one warp scheduler that issues one
# warp-instruction per clock (Hopper whitepaper, "H100 SM architecture").
ISSUE_PER_CLOCK = 4.0
# exp2, log2, reciprocal (the MUFU unit): 16 results per clock per SM on compute
# capability 9.0 (CUDA C++ Programming Guide, "Arithmetic Instructions" table).
MUFU_PER_CLOCK = 16.0
# L2: ~5.5 TB/s (H100 microbenchmarks report 5.5-7 TB/s; the low end).
L2_BW = 5.5e12

# ----------------------------------------------------------------- published attention throughputs
# FlashAttention-3 paper (Shah et al., arXiv 2407.08608), forward, causal, head size
# 64, sequence length 1k, bf16, H100 80GB SXM5, in FLOPs counted as 4 T^2 hs per
# head, halved for causal masking: FlashAttention-2 229 TFLOP/s, cuDNN 288 TFLOP/s.
# Anchors printed beside our prediction; only the "cudnn" attention kind uses cuDNN's
# (the kind that runs cuDNN's fused attention), for the backward too (the paper's
# backward figures are not causal; the same rate is an assumption).
FA2_FWD_PUBLISHED = 229e12
CUDNN_FWD_PUBLISHED = 288e12

# ----------------------------------------------------------------- efficiencies (named)
# GEMM: cuBLASLt bf16 GEMMs of d12's shapes (M = 65,536 rows, K, N in 768..50,304)
# reach ~70-80% of dense peak on H100 (llm.c's and NVIDIA's cuBLASLt numbers for large
# bf16 GEMMs are ~700-750 TFLOP/s); gpu-review.md assumed 560-650 TFLOP/s (0.57-0.66).
EFF_GEMM = 0.75
EFF_GEMM_REVIEW = 0.60  # the review's assumption, used for "before" and as a sensitivity row
# Memory-bound kernels with 128-bit loads/stores: ~85% of HBM bandwidth (what
# well-written x128 streaming kernels, e.g. llm.c's, report on H100: ~2.8-3.0 TB/s).
EFF_BW = 0.85
# Scalar 16-bit kernels (one 2-byte LDG per element, the state before the x128 work):
# ~1.3 TB/s (gpu-review.md); fp32 row kernels ~2.0 TB/s.
EFF_BW_SCALAR16 = 1.3e12 / HBM_BW
EFF_BW_SCALAR32 = 2.0e12 / HBM_BW
# Old layernorm backward (rows pass + partials pass on a 3x64 grid): the review's 16 ms
# per step for 25 calls of 605 MB -> ~0.95 TB/s.
EFF_BW_LN_BWD_OLD = 0.95e12 / HBM_BW
# The fp32 dv SGEMM of classic bf16 attention runs on CUDA cores at ~75% of their peak.
EFF_SIMT = 0.75
MEMSET_EFF = 0.9  # cudaMemsetAsync: write-only streaming

# ----------------------------------------------------------------- the offloaded optimizer (host side)
# PCIe 5.0 x16, H100 SXM's link to the host: 64 GB/s raw per direction, ~55 GB/s
# effective with pinned host memory, as the trainer's transfer buffers are (an
# assumption, not measured here).
PCIE_GBS = 55.0
OFFLOAD_CHUNK = 1 << 22  # elements per pipeline chunk (AdamW::kOffloadChunk, train/optimizer.h)
# The CPU backend's adamw_update over 64M parameters (28 B each: read g, m, v, p,
# write m, v, p): the fastest of several runs of `backend_ops_test --perf adamw
# --elements 67108864` on the shared 2-core development VM (docs/kernels.md), both
# threads.
HOST_ADAMW_GBS = 35.9
ADAMW_HOST_BYTES = 28       # per parameter
OFFLOAD_BUS_BYTES = 4       # per parameter and direction: fp32 crosses the bus at either precision

COUNTS_FILE = "dev/roofline/attention_counts.json"


class Op:
    def __init__(self, name, flops, nbytes, peak, eff_f, eff_b, calls=1, group=None):
        self.name, self.flops, self.bytes = name, float(flops), float(nbytes)
        self.peak, self.eff_f, self.eff_b, self.calls = peak, eff_f, eff_b, calls
        self.group = group or name
        self.wavefronts = 0.0  # shared-memory wavefronts per call (from the profile)
        self.sectors = 0.0     # global sectors per call (from the profile)
        self.kernels = []      # the profiled kernels behind it: (name, wavefronts, sectors)
        self.phase = "other"   # "forward layers" / "backward layers": what a layer's collectives can hide under

    def times(self):  # seconds per call: compute, DRAM, shared memory, L2
        tf = self.flops / (self.peak * self.eff_f) if self.flops else 0.0
        tb = self.bytes / (HBM_BW * self.eff_b) if self.bytes else 0.0
        ts = self.wavefronts / (SMS * SM_CLOCK * SMEM_WAVEFRONTS_PER_CLOCK)
        tl = self.sectors * 32 / L2_BW
        return {"compute": tf, "memory": tb, "shared": ts, "L2": tl}

    def time(self):
        return max(self.times().values())

    def bound(self):
        t = self.times()
        return max(t, key=t.get)


class CountedAttention(Op):
    """A flash kernel priced from its counts per 64x64 tile pair (count_attention.py).

    Each resource's time is its total over the call at the H100's rate, the call's
    time the slowest: tensor-core FLOPs, issue slots (warp-instructions, PTX movs
    left out), MUFU results (32 per warp-instruction), shared-memory wavefronts,
    global sectors at the L2's bandwidth, compulsory HBM bytes. Per-block work
    outside the loop (prologue, epilogue) counts once per block for issue and MUFU;
    the profile's wavefronts and sectors already spread it over the pairs."""

    def __init__(self, name, counts, pairs, blocks, nbytes, group):
        super().__init__(name, pairs * counts["flops_per_pair"], nbytes, PEAK_BF16, 1.0, 1.0, group=group)
        self.counts, self.pairs, self.blocks = counts, pairs, blocks

    def slots(self):
        per_pair, per_block = self.counts["issue_slots_per_pair"], self.counts["issue_slots_per_block_outside_loop"]
        issue = sum(self.pairs * per_pair[k] + self.blocks * per_block[k] for k in per_pair if k != "mov")
        mufu = self.pairs * per_pair[MUFU_CLASS] + self.blocks * per_block[MUFU_CLASS]
        return issue, mufu

    def times(self):
        clocks = SMS * SM_CLOCK
        issue, mufu = self.slots()
        return {"compute": self.flops / PEAK_BF16, "memory": self.bytes / HBM_BW,
                "shared": self.pairs * self.counts["shared_wavefronts_per_pair"] / (clocks * SMEM_WAVEFRONTS_PER_CLOCK),
                "L2": self.pairs * self.counts["global_sectors_per_pair"] * 32 / L2_BW,
                "issue": issue / (clocks * ISSUE_PER_CLOCK), "mufu": mufu * 32 / (clocks * MUFU_PER_CLOCK)}


MUFU_CLASS = "mufu (ex2, lg2, rcp)"


class HostOp(Op):
    """Work of the offloaded optimizer off the GPU, priced in seconds per resource: the bus ("PCIe")
    and host memory traffic ("host"). The GPU waits for the slowest."""

    def __init__(self, name, nbytes, seconds, group):
        super().__init__(name, 0, nbytes, PEAK_BF16, 1.0, 1.0, group=group)
        self.seconds = seconds

    def times(self):
        return dict(self.seconds)


def load_counts(path):
    import json
    import os
    if not os.path.exists(path):
        return None
    return json.load(open(path))


def resolve_attention(flag, dtype, hs, cudnn_present):
    """The kind --attention FLAG runs (train/device_link_cuda.cpp): auto takes cuDNN for
    bf16 when the build has it and the head size is a multiple of 8 up to 128, else flash."""
    if flag != "auto":
        return flag
    return "cudnn" if dtype == "bf16" and cudnn_present and hs % 8 == 0 and hs <= 128 else "flash"


class Config:
    def __init__(self, a):
        self.L, self.C, self.NH, self.V, self.Vp = a.L, a.C, a.NH, a.V, a.Vp
        self.maxT = a.max_seq
        self.B, self.T = a.B, a.T
        self.dtype, self.recompute = a.dtype, a.recompute
        self.zero, self.world = a.zero, a.world
        # the trainer's --attention flag, and the kind that runs (auto resolved)
        self.attention_flag, self.kernels = a.attention, a.kernels
        self.cudnn_present = not a.no_cudnn
        self.attention = resolve_attention(a.attention, a.dtype, a.C // a.NH, self.cudnn_present)
        self.counts = getattr(a, "counts", None)
        self.eff_gemm = a.eff_gemm
        self.gelu_fusion = a.gelu_fusion
        self.ln_fusion = a.ln_fusion
        self.device_comm = a.world > 1  # NCCL-style device-memory communicator (stage-2 overlap)
        self.link_gbps = a.link_gbps
        self.offload = a.offload_optimizer == "cpu"
        self.pcie_gbs, self.host_gbs = a.pcie_gbs, a.host_adamw_gbs
        self.ws_bytes = a.cublaslt_workspace_mib << 20
        self.s = 2 if a.dtype == "bf16" else 4  # storage element size


# ----------------------------------------------------------------- parameters

def param_numels(c):
    C, L, Vp, maxT = c.C, c.L, c.Vp, c.maxT
    return [("wte", Vp * C, 0), ("wpe", maxT * C, 0), ("ln1w", L * C, L), ("ln1b", L * C, L),
            ("qkvw", L * 3 * C * C, L), ("qkvb", L * 3 * C, L), ("attprojw", L * C * C, L),
            ("attprojb", L * C, L), ("ln2w", L * C, L), ("ln2b", L * C, L), ("fcw", L * 4 * C * C, L),
            ("fcb", L * 4 * C, L), ("fcprojw", L * C * 4 * C, L), ("fcprojb", L * C, L),
            ("lnfw", C, 0), ("lnfb", C, 0)]


def num_params(c):
    return sum(n for _, n, _ in param_numels(c))


def layer_numel(c):
    """One layer's parameters, its twelve tensors together (ParamLayout::layer_unit_numel)."""
    return 12 * c.C * c.C + 13 * c.C


def wte_chunk_rows(c):
    """ParamLayout::wte_chunk_rows: as many rows as fit a layer unit, a multiple of 64, at least 64."""
    return min(max(layer_numel(c) // c.C // 64 * 64, 64), c.Vp)


def zero_plan(c):
    """distributed/zero_plan.cpp: shard size and the units [(kind, numel, counts)]: the L layer units,
    the rest unit (wpe, lnfw, lnfb), then wte's chunk units; counts[r] = elements rank r owns."""
    w = c.world
    shard = (num_params(c) + w - 1) // w  # shard_alignment 1 (DataParallel's plan)
    units = [["layer", []] for _ in range(c.L)] + [["rest", []]]
    off = 0
    for name, n, layers in param_numels(c):
        if name == "wte":
            step = wte_chunk_rows(c) * c.C
            units += [["chunk", [(off + b, off + min(n, b + step))]] for b in range(0, n, step)]
        elif layers == 0:
            units[c.L][1].append((off, off + n))
        else:
            per = n // layers
            for l in range(layers):
                units[l][1].append((off + per * l, off + per * (l + 1)))
        off += n
    out = []
    for kind, ranges in units:
        cnt = [0] * w
        for b, e in ranges:
            pos = b
            while pos < e:
                r = pos // shard
                stop = min(e, shard * (r + 1))
                cnt[r] += stop - pos
                pos = stop
        out.append((kind, sum(e - b for b, e in ranges), cnt))
    return shard, out


def zero3_slots(c):
    """ZeroParams: three gathered-layer slots with the device communicator at world > 1 (the next
    layer gathered ahead), else two."""
    return 3 if c.device_comm else 2


# ----------------------------------------------------------------- memory

def memory_table(c):
    """[(group, name, numel, elem_bytes)] per rank, as the trainer allocates it."""
    s, N, C, L, Vp = c.s, c.B * c.T, c.C, c.L, c.Vp
    B, T, NH = c.B, c.T, c.NH
    P = num_params(c)
    shard, units = zero_plan(c)
    cap = shard * c.world  # param_capacity = plan padded size
    rows = []
    if c.zero < 3:
        rows.append(("params", "params (ParamLayout, padded to the ZeRO plan)", cap, s))
    else:  # train/zero_params.cpp: no model buffer, the shard plus what is gathered
        whole = sum(n for k, n, _ in units if k != "layer")
        slots = zero3_slots(c)
        rows.append(("params", "ZeRO-3 parameter shard", shard, s))
        rows.append(("params", "ZeRO-3 whole wte, wpe, lnf (gathered after each update)", whole, s))
        rows.append(("params", "ZeRO-3 gathered-layer slots x%d" % slots, slots * layer_numel(c), s))
    # ---- gradients (GPT2 ctor + DataParallel)
    if c.zero < 2:
        rows.append(("grads", "grads (full)", cap, s))
    else:  # DataParallel::allocate_stage2_buffers and ZeroStaging (stage 3 takes the same path)
        rest_kind = [u for u in units if u[0] == "rest"][0]
        others = [u for u in units if u[0] != "rest"]  # layer units and wte chunks
        layer_most = max([1] + [max(cnt) for _, _, cnt in others])
        rest_most = max(rest_kind[2])
        kcap = 1 << 22  # kMaxExchangeSlice
        overlap = c.device_comm and L > 0
        overlap_rest = overlap and rest_most > 0
        staged = max(n for _, n, _ in others)
        rows.append(("grads", "layer grad buffer x%d (also stages the wte chunks)" % (2 if overlap else 1),
                     (2 if overlap else 1) * staged, s))
        rows.append(("grads", "rest grad buffer (wpe, lnf)", rest_kind[1], s))
        rows.append(("grads", "ZeRO-2 shard grads", shard, s))
        if not overlap_rest:
            rows.append(("grads", "ZeRO-2 receive buffer", min(max(layer_most, rest_most), kcap), s))
        if overlap:
            rows.append(("grads", "ZeRO-2 receive slots x2", 2 * layer_most, s))
        if overlap_rest:
            rows.append(("grads", "ZeRO-2 rest receive slot", rest_most, s))
    # ---- optimizer (AdamW: m, v fp32 over its shard; fp32 master in bf16 mode)
    if c.zero == 0:
        n_opt = P
    else:
        n_opt = max(0, min(shard, P) - 0)  # rank 0's shard [0, shard) clipped to P
    n_alloc = max(n_opt, 1)
    if c.offload:  # train/optimizer.cpp on the host backend: an fp32 copy at either precision, the landing buffer
        rows.append(("host", "AdamW m (fp32, host)", n_alloc, 4))
        rows.append(("host", "AdamW v (fp32, host)", n_alloc, 4))
        rows.append(("host", "fp32 copy + gradient landing, one pinned block (host)", 2 * n_alloc, 4))
        if s == 2 and n_opt > 0:  # bf16 is widened and rounded on the device, one pipeline chunk at a time
            rows.append(("optimizer", "offload transfer chunk (fp32)", min(n_opt, OFFLOAD_CHUNK), 4))
    else:
        rows.append(("optimizer", "AdamW m (fp32)", n_alloc, 4))
        rows.append(("optimizer", "AdamW v (fp32)", n_alloc, 4))
        if s == 2 and n_opt > 0:
            rows.append(("optimizer", "fp32 master weights", n_opt, 4))
    # ---- activations (GPT2::allocate_activations, in its order)
    # sizes follow the flag, as the backend allocates them: auto sizes for flash (it may run it)
    flash = c.attention_flag != "classic"
    if flash:
        lse_floats = B * NH * T
        saved = lse_floats * (4 // s)   # fp32 LSE in storage-type elements
        # fp32 (kScratch; flash_mma.cuh): D, the dq accumulator per query tile, a turn counter per tile
        tiles = B * NH * ((T + 63) // 64)
        scratch, scratch_e = lse_floats + tiles * 64 * 64 + tiles, 4
        if c.attention_flag == "cudnn":  # cuDNN alone: its row sums live in its own workspace
            scratch = 0
    else:
        saved = B * NH * T * T
        S = B * NH * T * T
        scratch = S if s == 4 else S + (S * s + 3) // 4
        scratch_e = 4
    g = L if c.recompute < 1 else 1           # fch_gelu layers kept (--recompute 1)
    lnl = L if c.recompute < 2 else 1         # ln1 layers kept; ln2 shares it at --recompute 2
    # layernorm statistics and per-token losses are kStats: fp32 whatever the storage type
    st = 4
    acts = [("encoded", N * C, s), ("ln1" if lnl == L else "ln1 = ln2 (one layer)", lnl * N * C, s),
            ("ln1_mean (fp32)", L * N, st), ("ln1_rstd (fp32)", L * N, st),
            ("qkv", L * N * 3 * C, s), ("atty", L * N * C, s), ("att_saved", L * saved, s),
            ("attproj = fcproj = dln (one layer)", N * C, s), ("residual2", L * N * C, s)]
    if lnl == L:
        acts.append(("ln2", L * N * C, s))
    acts += [("ln2_mean (fp32)", L * N, st), ("ln2_rstd (fp32)", L * N, st), ("fch", L * N * 4 * C, s),
             ("fch_gelu", g * N * 4 * C, s), ("residual3", L * N * C, s), ("lnf", N * C, s),
             ("lnf_mean (fp32)", N, st), ("lnf_rstd (fp32)", N, st), ("losses (fp32)", N, st),
             ("logits", N * Vp, s),
             ("deferred losses (fp32, a slot per micro-batch: one here)", N, st)]
    for name, n, e in acts:
        rows.append(("activations", name, n, e))
    rows.append(("activations", "tokens (int32)", N, 4))
    rows.append(("activations", "targets (int32)", N, 4))
    # Backward scratch: carved from the logits buffer, largest first, while it
    # fits, when the gradients are not staged (GPT2::allocate_activations).
    room, used = (N * Vp if c.zero < 2 else 0), 0
    for name, n in [("dfch", N * 4 * C), ("dqkv", N * 3 * C), ("datty", N * C), ("dresidual", N * C)]:
        if used + n <= room:
            used += n
            continue
        rows.append(("activations", name, n, s))
    rows.append(("activations", "att_scratch (fp32, kScratch)", scratch, scratch_e))
    # ---- backend-owned (backend/cuda/cuda_backend.cu)
    ln_g = 1 if N < 32 else min(N // 32, 512)
    ln_ws = 2 * ln_g * C * (2 if C > 5120 else 1)
    cs_chunks = 1 if N < 32 else min(N // 32, 64)
    mm_ws = cs_chunks * 4 * C  # largest bias-gradient partials (fc: OC = 4C)
    ws = [ln_ws, mm_ws]
    if s == 2:  # the embedding scatter's fp32 shadow: one wte chunk (ParamLayout::wte_chunk_rows)
        layer = 12 * C * C + 13 * C
        ws.append(min(max(layer // C // 64 * 64, 64), Vp) * C)
    if not flash:
        n = B * T * C
        if s == 2:
            ws += [4 * n // 2 + B * NH * T * T, (7 * n * 2 + 3) // 4 + B * NH * T * T + 2 * n]
        else:
            ws += [4 * n, 7 * n]
    rows.append(("backend", "workspace (fp32, grown to the largest op's need)", max(ws), 4))
    rows.append(("backend", "cuBLASLt workspace", c.ws_bytes, 1))
    if c.attention == "cudnn":  # the dO.O row sums (backend/cuda/cudnn_attention.h); the plan's own not counted
        rows.append(("backend", "cuDNN workspace (row sums; the plan's own not counted)",
                     (B * NH * T * 4 + 255) // 256 * 256, 1))
    rows.append(("backend", "sum_squares partials (fp64)", 1025, 8))
    return rows


def group_totals(c):
    """Bytes per memory group; "host" (the offloaded optimizer) is not device memory."""
    tot = {}
    for g, name, n, e in memory_table(c):
        tot[g] = tot.get(g, 0) + n * e
    return tot


def device_bytes(tot):
    return sum(v for g, v in tot.items() if g != "host")


def fmt_bytes(b):  # metrics/logger.cpp format_bytes
    units = ["B", "KiB", "MiB", "GiB", "TiB"]
    u = 0
    while b >= 1024.0 and u < 4:
        b /= 1024.0
        u += 1
    return ("%.2f %s" % (b, units[u])) if u else ("%.0f %s" % (b, units[u]))


# ----------------------------------------------------------------- step ops

def step_ops(c):
    s, B, T, C, L, NH, Vp = c.s, c.B, c.T, c.C, c.L, c.NH, c.Vp
    N = B * T
    E = N * C
    hs = C // NH
    bf16 = s == 2
    new = c.kernels == "x128"
    gpeak = PEAK_BF16 if bf16 else PEAK_TF32
    ge = c.eff_gemm
    bw = EFF_BW if new else (EFF_BW_SCALAR16 if bf16 else EFF_BW_SCALAR32)
    ops = []

    def add(name, flops, nbytes, peak=gpeak, ef=ge, eb=bw, group=None):
        ops.append(Op(name, flops, nbytes, peak, ef, eb, group=group or name.split(" ")[0]))

    def mm_fwd(tag, n_in, n_out, bias=True, gelu=False):
        # gelu: GELU_AUX_BIAS writes the post-GELU output as well as the pre-GELU aux
        add("matmul_forward " + tag + (" +GELU_AUX_BIAS" if gelu else ""), 2 * N * n_in * n_out,
            (N * n_in + n_in * n_out + (2 if gelu else 1) * N * n_out + (n_out if bias else 0)) * s,
            eb=EFF_BW, group="matmul_fwd")

    def mm_bwd(tag, n_in, n_out, bias=True, dgelu=False):
        # dinp = dout . w ; dW += inp^T . dout (beta 1: dW read and written);
        # dgelu: the DGELU epilogue reads the aux (the pre-GELU input, N x n_in)
        add("matmul_bwd_dinp " + tag + (" +DGELU" if dgelu else ""), 2 * N * n_in * n_out,
            (N * n_out + n_in * n_out + (2 if dgelu else 1) * N * n_in) * s, eb=EFF_BW, group="matmul_bwd")
        add("matmul_bwd_dw " + tag, 2 * N * n_in * n_out, (N * n_in + N * n_out + 2 * n_in * n_out) * s,
            eb=EFF_BW, group="matmul_bwd")
        if bias:  # bf16: column-sum kernels (partials pass + accumulate); fp32: BGRADB epilogue
            chunks = 1 if N < 32 else min(N // 32, 64)
            if bf16:
                add("bias_colsum " + tag, 0, N * n_out * s + chunks * n_out * 4, group="bias_colsum")
                add("bias_accumulate " + tag, 0, chunks * n_out * 4 + 2 * n_out * s, group="bias_colsum")

    stat = 4 if new else s  # mean/rstd and losses: fp32 (kStats) with today's kernels

    def ln_fwd():
        add("layernorm_forward", 0, 2 * E * s + 2 * C * s + 2 * N * stat)

    def residual_ln_fwd():
        # residual = a + b, then its layernorm: read a, b, write residual and out
        # (the re-reads of the row hit L1/L2), one read of the residual less
        if c.ln_fusion:
            add("residual_layernorm_forward", 0, 4 * E * s + 2 * C * s + 2 * N * stat)
        else:
            add("residual_forward", 0, 3 * E * s)
            ln_fwd()

    def ln_bwd():
        G = 1 if N < 32 else min(N // 32, 512)
        if new:
            add("layernorm_backward", 0, 4 * E * s + 3 * N * s + C * s + 2 * G * C * 4)
            add("layernorm_backward_finish", 0, 2 * G * C * 4 + 4 * C * s)
        else:
            add("layernorm_backward", 0, 6 * E * s + 3 * N * s + C * s, eb=EFF_BW_LN_BWD_OLD)

    def gelu_fwd(tag=""):
        add("gelu_forward" + tag, 0, 2 * 4 * E * s, group="gelu_forward")

    nt = (T + 63) // 64
    pairs = B * NH * nt * (nt + 1) // 2  # visited 64x64 tiles (causal)

    def blocks(kind):  # blocks of a flash call: block_rows query rows (forward) or keys (backward) each
        rows = c.counts["kernels"][kind].get("block_rows", 64)
        return B * NH * ((T + rows - 1) // rows)

    counted = c.attention == "flash" and bf16 and c.counts is not None
    gemm_full = 2 * B * NH * T * T * hs  # one full T x T batched GEMM
    S = B * NH * T * T
    fa_fwd = 2 * B * NH * T * T * hs  # FlashAttention's FLOP convention: 4 T^2 hs per head, halved (causal)
    lse = B * NH * T * 4

    def attn_fwd():
        if c.attention == "flash":
            nbytes = 3 * E * s + E * s + lse  # q, k, v read once (tile re-reads hit L2), out, lse
            if counted:
                ops.append(CountedAttention("flash_forward", c.counts["kernels"]["forward"], pairs, blocks("forward"),
                                            nbytes, "flash_forward"))
            else:  # fp32 storage (tf32 kernels, not counted): the tensor-core FLOPs alone, a lower bound
                add("flash_forward", pairs * 2 * 2 * 64 ** 3, nbytes, PEAK_TF32, 1.0, 1.0)
            return
        if c.attention == "cudnn":  # at cuDNN's published forward throughput (no counts of ours)
            add("cudnn_attention_forward", fa_fwd, 3 * E * s + E * s + lse, CUDNN_FWD_PUBLISHED, 1.0, 1.0,
                group="cudnn_forward")
            return
        sp = EFF_BW_SCALAR16 if bf16 else EFF_BW_SCALAR32
        for i in range(3):
            add("split_heads", 0, 2 * E * s, eb=sp, group="attn_classic_fwd")
        add("attn_gemm_qk", gemm_full, 2 * E * s + S * 4, eb=EFF_BW, group="attn_classic_fwd")
        add("causal_softmax", 0, S * 4 + S * s, eb=EFF_BW_SCALAR32, group="attn_classic_fwd")
        add("attn_gemm_pv", gemm_full, S * s + 2 * E * s, eb=EFF_BW, group="attn_classic_fwd")
        add("merge_heads", 0, 2 * E * s, eb=sp, group="attn_classic_fwd")

    def attn_bwd():
        if c.attention == "flash":
            # backend/cuda/flash_mma.cuh: FlashAttention-2's order. D = rowsum(dout * out): reads both once
            add("flash_backward_dsum", 0, 2 * E * s + lse)
            # one kernel per key block: S^T, dP^T, dv, dk and dq's part dS K (5 products); the
            # parts of dq add up in an fp32 accumulator (written and read back once from DRAM,
            # the per-tile-pair traffic is in the L2 term)
            acc = B * NH * nt * 64 * 64 * 4
            nbytes = 3 * E * s + E * s + 2 * lse + 3 * E * s + 2 * acc
            if counted:
                ops.append(CountedAttention("flash_backward", c.counts["kernels"]["backward"], pairs,
                                            blocks("backward"), nbytes, "flash_backward"))
            else:
                add("flash_backward", pairs * 5 * 2 * 64 ** 3, nbytes, PEAK_TF32, 1.0, 1.0)
            return
        if c.attention == "cudnn":  # 2.5 forwards of FLOPs (FlashAttention's convention) at the same rate
            add("cudnn_attention_backward", 2.5 * fa_fwd, 3 * E * s + 2 * E * s + 3 * E * s + lse,
                CUDNN_FWD_PUBLISHED, 1.0, 1.0, group="cudnn_backward")
            return
        sp = EFF_BW_SCALAR16 if bf16 else EFF_BW_SCALAR32
        g = "attn_classic_bwd"
        for i in range(4):
            add("split_heads", 0, 2 * E * s, eb=sp, group=g)
        add("attn_gemm_dP", gemm_full, 2 * E * s + S * 4, eb=EFF_BW, group=g)
        if bf16:
            add("attn_gemm_S_again", gemm_full, 2 * E * s + S * 4, eb=EFF_BW, group=g)
            add("causal_softmax_fp32", 0, 2 * S * 4, eb=EFF_BW_SCALAR32, group=g)
            add("causal_softmax_backward", 0, 2 * S * 4 + S * s, eb=EFF_BW_SCALAR32, group=g)
            add("split_heads_fp32", 0, E * s + E * 4, eb=sp, group=g)
            add("attn_sgemm_dv_fp32", gemm_full, S * 4 + 2 * E * 4, PEAK_FP32_SIMT, EFF_SIMT, EFF_BW, group=g)
            add("merge_heads_fp32", 0, E * 4 + E * s, eb=sp, group=g)
        else:
            add("attn_gemm_dv", gemm_full, S * s + 2 * E * s, eb=EFF_BW, group=g)
            add("causal_softmax_backward", 0, 3 * S * 4, eb=EFF_BW_SCALAR32, group=g)
        add("attn_gemm_dq", gemm_full, S * s + 2 * E * s, eb=EFF_BW, group=g)
        add("attn_gemm_dk", gemm_full, S * s + 2 * E * s, eb=EFF_BW, group=g)
        for i in range(2 if bf16 else 3):
            add("merge_heads", 0, 2 * E * s, eb=sp, group=g)

    fuse = c.gelu_fusion
    # ---------------- forward (GPT2::forward)
    add("encoder_forward", 0, N * 4 + 2 * E * s + T * C * s)
    ln_fwd()  # layer 0's ln1; every later layernorm runs with the residual add before it
    fwd_begin = len(ops)
    for l in range(L):
        mm_fwd("qkv", C, 3 * C)
        attn_fwd()
        mm_fwd("attproj", C, C)
        residual_ln_fwd()  # residual2, ln2
        mm_fwd("fc", C, 4 * C, gelu=fuse)
        if not fuse:
            gelu_fwd()
        mm_fwd("fcproj", 4 * C, C)
        residual_ln_fwd()  # residual3, the next ln1 (lnf after the last layer)
    fwd_end = len(ops)
    mm_fwd("lm_head", C, Vp, bias=False)
    cls_reads = 2 if new else 3
    add("classifier_forward_backward", 0, (cls_reads + 1) * N * Vp * s + N * 4 + N * stat)
    # ---------------- backward (GPT2::backward)
    mm_bwd("lm_head", C, Vp, bias=False)
    add("memset dresidual", 0, E * s, eb=MEMSET_EFF)
    ln_bwd()
    bwd_begin = len(ops)
    for l in range(L):
        if c.recompute:  # the dW GEMM needs fch_gelu; the fused dinp reads fch itself
            gelu_fwd(" (recompute)")
        mm_bwd("fcproj", 4 * C, C, dgelu=fuse)
        if not fuse:
            add("gelu_backward", 0, 3 * 4 * E * s)
        if c.recompute >= 2:
            ln_fwd()  # ln2 recomputed
        mm_bwd("fc", C, 4 * C)
        ln_bwd()
        mm_bwd("attproj", C, C)
        attn_bwd()
        if c.recompute >= 2:
            ln_fwd()  # ln1 recomputed
        mm_bwd("qkv", C, 3 * C)
        ln_bwd()
    for o in ops[fwd_begin:fwd_end]:
        o.phase = "forward layers"
    for o in ops[bwd_begin:]:
        o.phase = "backward layers"
    # encoder backward: wpe kernel (dout, dwpe +=), wte kernel (dout -> fp32 shadow, atomics),
    # bf16: shadow in/out passes over the batch's rows
    add("encoder_backward", 0, E * s + 2 * T * C * s + E * s + N * 4 + 2 * E * 4 +
        (2 * E * s + 2 * E * 4 if bf16 else 0))
    # ---------------- optimizer step (once per step; grad accumulation 1)
    P = num_params(c)
    shard, _ = zero_plan(c)
    n_opt = P if c.zero == 0 else min(shard, P)
    add("memset grads (zero_grad)", 0, (shard * c.world if c.zero < 2 else shard) * s, eb=MEMSET_EFF)
    add("sum_squares (grad norm)", 0, n_opt * s)
    if c.offload:
        ops += offload_ops(c, n_opt)
        return ops
    adam_b = n_opt * (s + 8 + 8 + (8 if bf16 else 0) + (s if bf16 else 2 * s))
    add("adamw_update", 0, adam_b, eb=EFF_BW if new else EFF_BW_SCALAR32)
    return ops


def offload_ops(c, n):
    """--offload-optimizer cpu (train/optimizer.cpp, step_offloaded): a pipeline of OFFLOAD_CHUNK
    parameters per chunk on the backend's one stream. Gradients go down and weights up as fp32 (bf16 is
    widened and rounded on the device: 4 B each way at either precision, no host conversion); the host
    runs AdamW on chunk c (28 B per parameter at the CPU backend's measured rate; on a server, the host's
    AdamW bandwidth divided by the GPUs sharing it) while the bus carries the neighbours. The GPU waits
    for the whole: the slower of the bus (both directions share the stream) and the host, plus the
    pipeline's fill and drain (the first chunk down, the last one up)."""
    pcie, host = c.pcie_gbs * 1e9, c.host_gbs * 1e9
    bus = 2 * OFFLOAD_BUS_BYTES  # per parameter, down and up
    k = min(n, OFFLOAD_CHUNK)
    return [HostOp("offload: pipelined, the slower of PCIe and the host's AdamW", n * ADAMW_HOST_BYTES,
                   {"PCIe": n * bus / pcie, "host": n * ADAMW_HOST_BYTES / host}, "offload pipeline"),
            HostOp("offload: pipeline fill and drain (first chunk down, last up)", k * bus, {"PCIe": k * bus / pcie},
                   "offload fill")]


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
