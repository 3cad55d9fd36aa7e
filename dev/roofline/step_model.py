"""The step model behind roofline.py: the H100's rates and the named efficiencies, one op
per kernel or GEMM of a training step (FLOPs, HBM bytes, and for flash attention its counted
resources), and the per-rank memory table as the trainer allocates it. roofline.py's docstring
states the assumptions; it prints, compares and documents what this module computes.
"""
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
