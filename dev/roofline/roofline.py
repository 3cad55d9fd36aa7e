#!/usr/bin/env python3
"""Step-level roofline and memory model of one training step (a prediction, not a measurement).

Lists every kernel / GEMM of one micro-step in the order model/gpt2.cpp issues them
(forward, backward, then the optimizer step), each with FLOPs, HBM bytes and
time = max(FLOPs / (peak * eff_flops), bytes / (bandwidth * eff_bw)); sums them to a
step time, tokens/s and MFU (llm.c's accounting); prints the per-rank memory table
buffer by buffer as GPT2::allocate_activations, AdamW, DataParallel and the CUDA
backend allocate them.

Byte-counting assumptions (conservative, stated once here):
  * a GEMM reads each operand once and writes its output once (dW GEMMs run with
    beta = 1: dW is read and written); cuBLASLt tiles re-read operands from L2, not HBM;
  * GELU epilogues (--gelu-fusion 1): the fc forward GEMM (GELU_AUX_BIAS) also writes
    fch_gelu beside fch (its aux), the fcproj dinp GEMM (DGELU) also reads fch; the
    epilogue is assumed not to lower the GEMM's efficiency (not measured);
  * an elementwise / row kernel reads each input once and writes each output once;
    "+=" outputs are read and written;
  * flash attention: q, k, v (in place in qkv) read once per kernel, out / dqkv
    written once; the K/V tile re-reads of each query block (1.8 GB per layer forward
    at d12 B=64) are assumed to hit the 50 MB L2 (a head's K and V are 256 KiB), so
    they are not counted; the backward's two kernels each read qkv and dout;
  * the classifier's second pass re-reads the logits from HBM (no L2 credit);
  * host synchronisations, launch gaps and stream bubbles are NOT modelled (0 s).
FLOPs: tensor-core GEMM work (2 per multiply-add); flash attention counts the visited
64x64 tiles (136 of 256 at T = 1024, causal), classic attention the full T x T.
Elementwise arithmetic is far below the bandwidth bound and is not counted.

With --profile FILE (default: build/profile/kernels.jsonl when it exists; `make
profile-cuda` writes it) the kernels' own memory transactions, counted by the
emulator's profile build at d12's per-warp access patterns, add a third bound to
each op they belong to: shared-memory wavefronts at one per SM per clock
(SMEM_WAVEFRONTS_PER_CLOCK), and the profiled global sectors (32 bytes each, at the
L2's bandwidth: they include re-reads that hit L2). It applies to the d12 shapes
the profile was taken at (C=768, 12 heads of 64, T=1024) and its dtype; the report
prints attention's time before (the FLOP efficiency alone) and after.
"""
import argparse
import math
import re
import sys

# ----------------------------------------------------------------- hardware (H100 SXM)
PEAK_BF16 = 989e12     # dense bf16 tensor core FLOP/s (H100 SXM datasheet)
PEAK_TF32 = 494.7e12   # dense TF32 (fp32 storage with --tf32 on)
PEAK_FP32_SIMT = 66.9e12  # fp32 FMA on CUDA cores (no tensor cores)
HBM_BW = 3.35e12       # bytes/s, HBM3

# ----------------------------------------------------------------- efficiencies (named)
# GEMM: cuBLASLt bf16 GEMMs of d12's shapes (M = 65,536 rows, K, N in 768..50,304)
# reach ~70-80% of dense peak on H100 (llm.c's and NVIDIA's cuBLASLt numbers for large
# bf16 GEMMs are ~700-750 TFLOP/s); gpu-review.md assumed 560-650 TFLOP/s (0.57-0.66).
EFF_GEMM = 0.75
EFF_GEMM_REVIEW = 0.60  # the review's assumption, used for "before" and as a sensitivity row
# Flash attention on tensor cores: FlashAttention-2 reaches ~35% of H100's peak (the
# FlashAttention-3 paper's figure for FA2 on H100; ~50-70% on A100). Ours is WMMA
# (mma.sync, not wgmma), head size 64, operands staged through shared memory; the
# backward repeats two GEMMs for D: assume a little below FA2.
EFF_ATTN_FWD = 0.35
EFF_ATTN_BWD = 0.30
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
# Shared memory and L2 (the profile's terms): H100 SXM5 has 132 SMs; the datasheet's
# 989 TFLOP/s bf16 dense peak is 132 SMs x 4 tensor cores x 1024 FLOP/clock at
# 1.83 GHz, the clock used here. Each SM's shared memory serves one wavefront
# (32 banks x 4 bytes) per clock (Nsight Compute's l1tex data-pipe definition); L2
# ~5.5 TB/s (H100 microbenchmarks report 5.5-7 TB/s; the low end).
SMS = 132
SM_CLOCK = 1.83e9
SMEM_WAVEFRONTS_PER_CLOCK = 1.0
L2_BW = 5.5e12


class Op:
    def __init__(self, name, flops, nbytes, peak, eff_f, eff_b, calls=1, group=None):
        self.name, self.flops, self.bytes = name, float(flops), float(nbytes)
        self.peak, self.eff_f, self.eff_b, self.calls = peak, eff_f, eff_b, calls
        self.group = group or name
        self.wavefronts = 0.0  # shared-memory wavefronts per call (from the profile)
        self.sectors = 0.0     # global sectors per call (from the profile)
        self.kernels = []      # the profiled kernels behind it: (name, wavefronts, sectors)

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


class Config:
    def __init__(self, a):
        self.L, self.C, self.NH, self.V, self.Vp = a.L, a.C, a.NH, a.V, a.Vp
        self.maxT = a.max_seq
        self.B, self.T = a.B, a.T
        self.dtype, self.recompute = a.dtype, a.recompute
        self.zero, self.world = a.zero, a.world
        self.attention, self.kernels = a.attention, a.kernels
        self.eff_gemm = a.eff_gemm
        self.gelu_fusion = a.gelu_fusion
        self.ln_fusion = a.ln_fusion
        self.device_comm = a.world > 1  # NCCL-style device-memory communicator (stage-2 overlap)
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


def zero_plan(c):
    """distributed/zero_plan.cpp: shard size, and per unit the count each rank owns."""
    P, w = num_params(c), c.world
    shard = (P + w - 1) // w  # shard_alignment 1 (DataParallel's plan)
    offs, off = [], 0
    for name, n, layers in param_numels(c):
        offs.append((off, n, layers))
        off += n
    units = [[] for _ in range(c.L + 1)]  # L layer units, then the rest unit
    for o, n, layers in offs:
        if layers == 0:
            units[c.L].append((o, o + n))
        else:
            per = n // layers
            for l in range(layers):
                units[l].append((o + per * l, o + per * (l + 1)))
    counts = []
    for u in units:
        cnt = [0] * w
        for b, e in u:
            pos = b
            while pos < e:
                r = pos // shard
                stop = min(e, shard * (r + 1))
                cnt[r] += stop - pos
                pos = stop
        counts.append(cnt)
    return shard, counts


# ----------------------------------------------------------------- memory

def memory_table(c):
    """[(group, name, numel, elem_bytes)] per rank, as the trainer allocates it."""
    s, N, C, L, Vp = c.s, c.B * c.T, c.C, c.L, c.Vp
    B, T, NH = c.B, c.T, c.NH
    P = num_params(c)
    shard, counts = zero_plan(c)
    cap = shard * c.world  # param_capacity = plan padded size
    rows = []
    rows.append(("params", "params (ParamLayout, padded to the ZeRO plan)", cap, s))
    # ---- gradients (GPT2 ctor + DataParallel)
    if c.zero != 2:
        rows.append(("grads", "grads (full)", cap, s))
    else:
        layer_numel = sum(n // L for _, n, layers in param_numels(c) if layers)
        rest_numel = sum(n for _, n, layers in param_numels(c) if not layers)
        most = max(max(cnt) for cnt in counts) if counts else 1
        layer_most = max(max(cnt) for cnt in counts[:L]) if L else 1
        rest_most = max(counts[L])
        kcap = 1 << 22  # kMaxExchangeSlice
        overlap = c.device_comm and L > 0 and layer_most <= kcap
        rows.append(("grads", "layer grad buffer x%d" % (2 if overlap else 1),
                     (2 if overlap else 1) * layer_numel, s))
        rows.append(("grads", "rest grad buffer (wte, wpe, lnf)", rest_numel, s))
        rows.append(("grads", "ZeRO-2 shard grads", shard, s))
        rows.append(("grads", "ZeRO-2 receive buffer", min(max(most, 1), kcap), s))
        if overlap:
            rows.append(("grads", "ZeRO-2 receive slots x2", 2 * layer_most, s))
            if 0 < rest_most <= kcap:
                rows.append(("grads", "ZeRO-2 rest receive slot", rest_most, s))
    # ---- optimizer (AdamW: m, v fp32 over its shard; fp32 master in bf16 mode)
    if c.zero == 0:
        n_opt = P
    else:
        n_opt = max(0, min(shard, P) - 0)  # rank 0's shard [0, shard) clipped to P
    n_alloc = max(n_opt, 1)
    rows.append(("optimizer", "AdamW m (fp32)", n_alloc, 4))
    rows.append(("optimizer", "AdamW v (fp32)", n_alloc, 4))
    if s == 2 and n_opt > 0:
        rows.append(("optimizer", "fp32 master weights", n_opt, 4))
    # ---- activations (GPT2::allocate_activations, in its order)
    flash = c.attention == "flash"
    if flash:
        lse_floats = B * NH * T
        saved = lse_floats * (4 // s)   # fp32 LSE in storage-type elements
        # fp32 (kScratch; flash_mma.cuh): D, the dq accumulator per query tile, a turn counter per tile
        tiles = B * NH * ((T + 63) // 64)
        scratch, scratch_e = lse_floats + tiles * 64 * 64 + tiles, 4
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
    room, used = (N * Vp if c.zero != 2 else 0), 0
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
    rows.append(("backend", "sum_squares partials (fp64)", 1025, 8))
    return rows


def fmt_bytes(b):  # train/logger.cpp format_bytes
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

    flash_tiles = 0
    if c.attention == "flash":
        nt = (T + 63) // 64
        flash_tiles = nt * (nt + 1) // 2
        tile_frac = flash_tiles / float(nt * nt)
    gemm_full = 2 * B * NH * T * T * hs  # one full T x T batched GEMM
    S = B * NH * T * T

    def attn_fwd():
        if c.attention == "flash":
            f = 2 * gemm_full * tile_frac * (64.0 / hs if hs < 64 else 1.0)
            peak = PEAK_BF16 if bf16 else PEAK_TF32  # flash_mma.cuh: mma.sync, fp32 storage on tf32
            add("flash_forward", f, 3 * E * s + E * s + B * NH * T * 4, peak, EFF_ATTN_FWD)
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
            f1 = gemm_full * tile_frac * (64.0 / hs if hs < 64 else 1.0)
            peak = PEAK_BF16 if bf16 else PEAK_TF32  # flash_mma.cuh: mma.sync, fp32 storage on tf32
            lse = B * NH * T * 4
            # backend/cuda/flash_mma.cuh: FlashAttention-2's order. D = rowsum(dout * out): reads both once
            add("flash_backward_dsum", 2 * E, 2 * E * s + lse, peak, EFF_ATTN_BWD)
            # one kernel per key block: S^T, dP^T, dv, dk and dq's part dS K (5 GEMMs); the
            # parts of dq add up in an fp32 accumulator (written and read back once from DRAM,
            # the per-tile-pair traffic is in the profile's L2 term)
            acc = B * NH * ((T + 63) // 64) * 64 * 64 * 4
            add("flash_backward", 5 * f1, 3 * E * s + E * s + 2 * lse + 3 * E * s + 2 * acc, peak, EFF_ATTN_BWD)
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
    mm_fwd("lm_head", C, Vp, bias=False)
    cls_reads = 2 if new else 3
    add("classifier_forward_backward", 0, (cls_reads + 1) * N * Vp * s + N * 4 + N * stat)
    # ---------------- backward (GPT2::backward)
    mm_bwd("lm_head", C, Vp, bias=False)
    add("memset dresidual", 0, E * s, eb=MEMSET_EFF)
    ln_bwd()
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
    # encoder backward: wpe kernel (dout, dwpe +=), wte kernel (dout -> fp32 shadow, atomics),
    # bf16: shadow in/out passes over the batch's rows
    add("encoder_backward", 0, E * s + 2 * T * C * s + E * s + N * 4 + 2 * E * 4 +
        (2 * E * s + 2 * E * 4 if bf16 else 0))
    # ---------------- optimizer step (once per step; grad accumulation 1)
    P = num_params(c)
    shard, _ = zero_plan(c)
    n_opt = P if c.zero == 0 else min(shard, P)
    add("memset grads (zero_grad)", 0, (shard * c.world if c.zero != 2 else 0) * s, eb=MEMSET_EFF)
    add("sum_squares (grad norm)", 0, n_opt * s)
    adam_b = n_opt * (s + 8 + 8 + (8 if bf16 else 0) + (s if bf16 else 2 * s))
    add("adamw_update", 0, adam_b, eb=EFF_BW if new else EFF_BW_SCALAR32)
    return ops


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
    if word == "flash_forward":
        return case("attention_forward")
    if word == "flash_backward":
        return case("attention_backward", kernel="flash_backward_mma")
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


def print_profile_report(c, ops_before, ops_after):
    def attn(ops):
        return sum(o.time() for o in ops if o.group.startswith("flash") or o.group.startswith("attn"))
    tb, ta = attn(ops_before), attn(ops_after)
    print("Attention per step: %.1f ms before the profile (FLOP efficiency alone), %.1f ms with the "
          "profiled shared-memory and L2 terms" % (tb * 1e3, ta * 1e3))
    print()
    print("Five most expensive ops with their bounds (ms per call: compute / DRAM / shared / L2):")
    print()
    print("| op | calls | compute | DRAM | shared | L2 | bound | ms per step |")
    print("|---|---|---|---|---|---|---|---|")
    per = {}
    for o in ops_after:
        e = per.setdefault(o.name, [0, o])
        e[0] += 1
    top = sorted(per.values(), key=lambda e: -e[0] * e[1].time())[:5]
    for n, o in top:
        t = o.times()
        print("| %s | %d | %.3f | %.3f | %.3f | %.3f | %s | %.2f |" % (
            o.name, n, t["compute"] * 1e3, t["memory"] * 1e3, t["shared"] * 1e3, t["L2"] * 1e3, o.bound(),
            n * o.time() * 1e3))
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
    groups = {}
    for o in ops:
        g = groups.setdefault(o.group, [0, 0.0, 0.0, 0.0, set()])
        g[0] += 1
        g[1] += o.flops
        g[2] += o.bytes
        g[3] += o.time()
        g[4].add(o.bound())
    print("### %s" % title)
    print()
    print("%d ops per step; step %.1f ms, %.0f tokens/s, MFU %.1f%% (llm.c accounting: %.1f MFLOP/token x "
          "tokens/s / 989 TFLOP/s); hardware FLOPs %.2f TFLOP/step" %
          (len(ops), t * 1e3, tps, mfu * 100, llmc_flops_per_token(c) / 1e6, hw / 1e12))
    print()
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
    return t, tps, mfu


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
    small = [(g, n, e) for g, name, n, e in rows if n * e < 1e6 and g not in ("params", "grads", "optimizer")]
    if small:
        print("| - | %d buffers under 1 MB | | | %.3f |" % (len(small), sum(n * e for _, n, e in small) / 1e9))
    total = sum(tot.values())
    for g in ("params", "grads", "optimizer", "activations", "backend"):
        print("| **%s** | | | | **%.2f** |" % (g, tot.get(g, 0) / 1e9))
    print("| **total per rank** (+ CUDA context and cuBLAS's own workspace, ~0.5-1 GB, not counted) | | | | **%.2f** (%.2f GiB) |"
          % (total / 1e9, total / 2 ** 30))
    print()
    return tot, total


def trainer_line(c):
    """The trainer's "| memory/rank" line for this config (train/trainer.cpp)."""
    tot = {}
    for g, name, n, e in memory_table(c):
        tot[g] = tot.get(g, 0) + n * e
    acts = tot["activations"]
    return "params %s, grads %s, optimizer %s, activations %s" % (
        fmt_bytes(tot["params"]), fmt_bytes(tot["grads"]), fmt_bytes(tot["optimizer"]), fmt_bytes(acts))


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
    p.add_argument("--zero", type=int, choices=[0, 1, 2], default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--attention", choices=["flash", "classic"], default="flash")
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
    return a


def main(argv):
    a = parse(argv)
    c = Config(a)
    if a.trainer_line:
        print(trainer_line(c))
        return
    desc = "L=%d C=%d NH=%d V=%d Vp=%d, B=%d T=%d, %s, recompute %d, ZeRO-%d world %d, %s attention, %s kernels" % (
        c.L, c.C, c.NH, c.V, c.Vp, c.B, c.T, c.dtype, c.recompute, c.zero, c.world, c.attention, c.kernels)
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
            print_profile_report(c, step_ops(c), after)
        if a.ops:
            print_ops(c)
    print_memory(c, "Memory per rank: " + desc)


if __name__ == "__main__":
    main(sys.argv[1:])
