#!/usr/bin/env python3
"""Counts per 64x64 tile pair of the bf16 flash attention kernels: attention_counts.json.

dev/roofline/roofline.py prices attention from this file. For the forward and the
backward kernel (backend/cuda/flash_mma.cuh, Bf16Ops, no dropout) it records:

  * tensor-core FLOPs: the mma.sync instructions the warps issue, counted from
    the PTX, x 4096 FLOPs per m16n8k16, per 64x64 tile pair (a forward block holds
    128 query rows, two 64-row tiles; the backward's blocks hold 64 keys);
  * shared-memory wavefronts and global sectors: the emulator profile's counts
    (build/profile/kernels.jsonl, `make profile-cuda`) for one head at T = 1024,
    divided by that head's tile pairs (136), so the per-block prologue and
    epilogue are spread over the pairs as they are at T = 1024;
  * issue slots by instruction class: warp-instructions of the PTX that nvcc
    emits for sm_90, executed by a small interpreter of the integer part of the
    PTX for every thread of every block of one head at d12's arguments
    (T = 1024, C = 768, 12 heads, 16-byte aligned rows). Floating-point values
    are unknown to it, except constants such as -inf that the masks select; an
    unknown value is taken to be finite. A warp issues an instruction of a loop
    iteration as often as its busiest lane executes it (divergent paths both
    count). A branch on a value the interpreter cannot know (the dq turn
    counter, the clock) skips forward and does not loop back: no waiting.

PTX is not SASS: ptxas folds some moves and address arithmetic and expands
nothing we count here, so the slots are an estimate of the SASS, to check with
Nsight Compute (sm__inst_executed) on a GPU.

Usage: dev/roofline/count_attention.py [--ptx FILE] [--profile FILE] [--out FILE]
Without --ptx it runs nvcc (NVCC, else /usr/local/cuda/bin/nvcc) on
backend/cuda/cuda_backend.cu for sm_90.
"""
import argparse
import collections
import json
import math
import os
import re
import struct
import subprocess
import sys

TILE = 64
WARPS = 4
THREADS = WARPS * 32
MMA_FLOPS = 16 * 8 * 16 * 2  # one m16n8k16: 16x8 outputs, k = 16, a multiply and an add each

CLASSES = ["mma", "shared (ldmatrix, ld/st.shared)", "cp.async", "mufu (ex2, lg2, rcp)",
           "fp32 (fma, mul, add, min/max)", "cvt", "branch/setp", "other", "mov"]
# PTX's mov copies virtual registers, materialises constants and reinterprets bits;
# ptxas folds nearly all of them (immediate operands, register allocation), so they
# are counted apart and not priced as issue slots.
UNPRICED = ("mov",)


def classify(op):
    if op.startswith("mov."):
        return "mov"
    if op.startswith("mma."):
        return "mma"
    if op.startswith("ldmatrix") or op.startswith("ld.shared") or op.startswith("st.shared"):
        return "shared (ldmatrix, ld/st.shared)"
    if op.startswith("cp.async"):
        return "cp.async"
    if op.split(".")[0] in ("ex2", "lg2", "rcp", "rsqrt", "sqrt", "sin", "cos", "tanh") and ".f32" in op:
        return "mufu (ex2, lg2, rcp)"
    if op.startswith("cvt.") and not op.startswith("cvta"):
        return "cvt"
    if op.split(".")[0] in ("fma", "mul", "add", "sub", "min", "max", "neg", "abs") and op.endswith(".f32"):
        return "fp32 (fma, mul, add, min/max)"
    if op.startswith("bra") or op.startswith("setp"):
        return "branch/setp"
    return "other"


# ----------------------------------------------------------------- PTX parsing

class Insn:
    __slots__ = ("line", "pred", "neg", "op", "args", "cls", "text", "base", "bits", "src", "is_bra", "target")


def split_args(s):
    out, depth, cur = [], 0, ""
    for ch in s:
        if ch in "{[":
            depth += 1
        elif ch in "}]":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def entry_body(ptx, pattern):
    """(name, params, [Insn], {label: index}) of the one entry whose name matches pattern."""
    starts = [m for m in re.finditer(r"^\.visible \.entry (\S+)\(", ptx, re.M) if re.search(pattern, m.group(1))]
    if len(starts) != 1:
        raise SystemExit("count_attention: %d entries match %s" % (len(starts), pattern))
    m = starts[0]
    name = m.group(1)
    sig_end = ptx.index(")", m.end())
    params = re.findall(r"\.param [^\n]*?(\S+?)(?:\[\d+\])?,?\n", ptx[m.end():sig_end + 1] + "\n")
    body_start = ptx.index("{", sig_end)
    body_end = ptx.index("\n}\n", body_start)
    insns, labels = [], {}
    for line in ptx[body_start + 1:body_end].split("\n"):
        line = line.split("//")[0].strip()
        if not line or line.startswith(".") or line in ("{", "}"):
            continue
        if line.startswith("{"):  # an inline scope: "{ .reg .b64 %tmp;" then its instructions
            line = line[1:].strip()
            if not line or line.startswith("."):
                continue
        if line.endswith(":"):
            labels[line[:-1]] = len(insns)
            continue
        line = re.sub(r";\s*}$", "", line).rstrip(";").strip()  # "...; }" closes an inline scope
        if not line:
            continue
        i = Insn()
        i.text, i.line = line, len(insns)
        i.pred, i.neg = None, False
        pm = re.match(r"@(!?)(%\w+)\s+(.*)", line)
        if pm:
            i.neg, i.pred, line = pm.group(1) == "!", pm.group(2), pm.group(3)
        parts = line.split(None, 1)
        i.op = parts[0]
        i.args = split_args(parts[1]) if len(parts) > 1 else []
        i.cls = classify(i.op)
        i.base, i.bits, i.src = i.op.split(".")[0], width(i.op), None
        i.is_bra = i.op.startswith("bra")
        i.target = None
        insns.append(i)
    return name, params, insns, labels


# ----------------------------------------------------------------- the interpreter

def width(op):
    m = re.search(r"\.[subf](8|16|32|64)$", op) or re.search(r"\.[subf](8|16|32|64)\b", op)
    return int(m.group(1)) if m else 32


def signed(v, bits):
    v &= (1 << bits) - 1
    return v - (1 << bits) if v >> (bits - 1) else v


class Thread:
    """One thread's walk through an entry: integer registers concrete, floats mostly unknown (None)."""

    def __init__(self, kern, tid, ctaid, nctaid, param_values, on_unknown):
        self.k, self.regs, self.local = kern, {}, {}
        self.special = {"%tid.x": tid, "%tid.y": 0, "%tid.z": 0, "%ntid.x": THREADS, "%ctaid.x": ctaid[0],
                        "%ctaid.y": ctaid[1], "%ctaid.z": 0, "%nctaid.x": nctaid[0], "%nctaid.y": nctaid[1],
                        "%laneid": tid % 32}
        self.params = param_values
        self.on_unknown = on_unknown

    def val(self, a):
        kind, x = a
        if kind == "r":
            return self.regs.get(x)
        if kind == "s":
            return self.special[x]
        return x

    def parse_operand(self, a):
        """('r', register) | ('s', special register) | ('c', value or None), once per instruction."""
        if a.startswith("%"):
            if a in self.special:
                return ("s", a)
            return ("r", a)
        return ("c", self.const(a))

    def const(self, a):
        if a.startswith("%"):
            if a in self.special:
                return self.special[a]
            return self.regs.get(a)
        if re.match(r"^0[fF][0-9a-fA-F]{8}$", a):
            return struct.unpack(">f", bytes.fromhex(a[2:]))[0]
        if re.match(r"^-?(0x[0-9a-fA-F]+|\d+)$", a):
            return int(a, 0)
        if a in self.k.symbols:
            return self.k.symbols[a]
        return None

    def addr(self, a):
        a = a.strip("[]")
        m = re.match(r"^(.*?)\+(-?\d+)$", a)
        base, off = (m.group(1), int(m.group(2))) if m else (a, 0)
        if (base, 0) in self.params:
            return ("param", base, off)
        v = self.regs.get(base) if base.startswith("%") else self.const(base)
        return None if v is None else v + off

    def run(self, trace):
        """Executes from the entry to ret; trace(index) is called for every instruction executed."""
        insns, labels = self.k.insns, self.k.labels
        pc, n = 0, len(insns)
        steps = 0
        while pc < n:
            i = insns[pc]
            trace(pc)
            steps += 1
            if steps > 5_000_000:
                raise SystemExit("count_attention: runaway thread")
            p = True
            if i.pred is not None:
                p = self.regs.get(i.pred)
                if p is not None and i.neg:
                    p = not p
            if i.is_bra:
                if i.target is None:
                    i.target = labels[i.args[0]]
                target = i.target
                if p is None:
                    p = target > pc  # unknown: skip forward, never loop back
                    self.on_unknown(pc)
                pc = target if p else pc + 1
                continue
            if i.op == "ret" or i.op == "trap":
                return
            if p is None:
                self.on_unknown(pc)
                p = False
            if p:
                self.execute(i)
            pc += 1

    def set(self, dst, v, bits=None):
        if dst.startswith("{"):
            for d in split_args(dst[1:-1]):
                if d != "_":
                    self.regs[d.strip()] = None
            return
        if isinstance(v, int) and bits:
            v &= (1 << bits) - 1
        self.regs[dst] = v

    def execute(self, i):
        op, a = i.op, i.args
        base = i.base
        if not a:
            return
        if base in ("st", "cp", "bar", "membar", "nanosleep", "mma", "fence"):
            if op.startswith("st.local"):
                addr = self.addr(a[0])
                vals = split_args(a[1][1:-1]) if a[1].startswith("{") else [a[1]]
                step = width(op) // 8
                for j, r in enumerate(vals):
                    if addr is not None:
                        self.local[addr + j * step] = self.regs.get(r.strip())
            if base == "mma":
                self.set(a[0], None)
            return
        dst = a[0]
        if base == "ld" or base == "ldmatrix":
            v = None
            if op.startswith("ld.param"):
                where = self.addr(a[1])
                v = self.params.get((where[1], where[2])) if isinstance(where, tuple) else None
            elif op.startswith("ld.local") and not dst.startswith("{"):
                addr = self.addr(a[1])
                v = self.local.get(addr) if addr is not None else None
            self.set(dst, v)
            return
        bits = i.bits
        if i.src is None:
            i.src = [self.parse_operand(x) for x in a[1:]]
        src = [self.val(x) for x in i.src]
        v = None
        try:
            v = self.alu(op, base, bits, src)
        except (TypeError, ZeroDivisionError, OverflowError, ValueError):
            v = None
        if base == "setp" and "|" in dst:
            dst = dst.split("|")[0]
        self.set(dst, v, None if (v is None or isinstance(v, (bool, float))) else
                 (64 if ".wide" in op else self.dest_bits(op, bits)))

    @staticmethod
    def dest_bits(op, bits):
        if op.startswith("cvt") or op.startswith("cvta"):
            return width(op.split(".")[0] + "." + op.split(".")[-2]) if op.count(".") >= 2 else bits
        return bits

    def alu(self, op, base, bits, s):
        typ = op.split(".")[-1]
        if base == "mov":
            return s[0]
        if base in ("cvta",):
            return s[0]
        if base == "selp":
            if s[2] is None:
                return None
            return s[0] if s[2] else s[1]
        if base == "setp":
            return self.compare(op, s[0], s[1])
        if typ == "pred":
            if None in s:
                return None
            return {"and": s[0] and s[1], "or": s[0] or s[1], "xor": s[0] != s[1],
                    "not": not s[0]}[base]
        if ".f32" in op or ".f64" in op:
            if base in ("neg",) and s[0] is not None:
                return -s[0]
            return None  # floating-point values other than the selected constants are unknown
        if None in s:
            return None
        sg = op.split(".")[-1].startswith("s")
        x = [signed(v, bits) if sg else v & ((1 << bits) - 1) for v in s]
        if base == "cvt":
            dt, st = op.split(".")[-2], op.split(".")[-1]
            v = s[0]
            v = signed(v, int(st[1:])) if st[0] == "s" else v & ((1 << int(st[1:])) - 1)
            return v
        if base == "add":
            return x[0] + x[1]
        if base == "sub":
            return x[0] - x[1]
        if base == "mul":
            return x[0] * x[1] if (".lo" in op or ".wide" in op) else (x[0] * x[1]) >> bits
        if base == "mad":
            return x[0] * x[1] + x[2]
        if base == "div":
            q = abs(x[0]) // abs(x[1])
            return q if (x[0] >= 0) == (x[1] >= 0) else -q
        if base == "rem":
            r = abs(x[0]) % abs(x[1])
            return r if x[0] >= 0 else -r
        if base == "shl":
            return x[0] << (s[1] & 0xff) if s[1] < bits else 0
        if base == "shr":
            return x[0] >> min(s[1], bits)
        if base == "and":
            return x[0] & x[1]
        if base == "or":
            return x[0] | x[1]
        if base == "xor":
            return x[0] ^ x[1]
        if base == "not":
            return ~x[0]
        if base == "neg":
            return -x[0]
        if base == "min":
            return min(x[0], x[1])
        if base == "max":
            return max(x[0], x[1])
        if base == "abs":
            return abs(x[0])
        if base == "bfi":
            f, b, pos, ln = s
            mask = ((1 << ln) - 1) << pos
            return (b & ~mask) | ((f << pos) & mask)
        return None

    @staticmethod
    def compare(op, x, y):
        cmp = op.split(".")[1]
        if ".f32" in op:
            if x is None or y is None:
                known = y if x is None else x
                if known is not None and math.isinf(known):
                    # an unknown value is finite: never equal to an infinity, on the finite side of it
                    if cmp in ("eq", "equ"):
                        return False
                    if cmp in ("ne", "neu"):
                        return True
                    unknown_first = x is None
                    less = (known > 0) == unknown_first  # unknown < +inf, unknown > -inf
                    return {"lt": less, "le": less, "ltu": less, "leu": less,
                            "gt": not less, "ge": not less, "gtu": not less, "geu": not less}.get(cmp)
                return None
        elif x is None or y is None:
            return None
        else:
            bits = width(op)
            sg = op.split(".")[-1][0] == "s"
            x, y = (signed(x, bits), signed(y, bits)) if sg else (x & ((1 << bits) - 1), y & ((1 << bits) - 1))
        # unsigned-or-unordered float forms (ltu, equ, ...) compare as the ordered ones: no NaNs here
        return {"eq": x == y, "ne": x != y, "lt": x < y, "le": x <= y, "gt": x > y, "ge": x >= y,
                "lo": x < y, "ls": x <= y, "hi": x > y, "hs": x >= y}.get(cmp[:-1] if cmp.endswith("u") else cmp)


class Kernel:
    def __init__(self, ptx, pattern):
        self.name, self.params, self.insns, self.labels = entry_body(ptx, pattern)
        self.symbols = {}
        for i in self.insns:  # the dynamic shared array and the local depot: fixed base addresses
            for x in i.args:
                if re.match(r"^[A-Za-z_]\w*$", x) and x not in self.labels and not x.startswith("%"):
                    self.symbols.setdefault(x, 0x10000 if "local_depot" not in x else 0x100)
        self.loop = self.main_loop()

    def main_loop(self):
        """(head, back edge) of the outermost loop that holds the mma instructions."""
        lo = min(i.line for i in self.insns if i.cls == "mma")
        hi = max(i.line for i in self.insns if i.cls == "mma")
        best = None
        for i in self.insns:
            if i.op.startswith("bra"):
                t = self.labels[i.args[0]]
                if t <= lo and i.line >= hi and (best is None or t < best[0]):
                    best = (t, i.line)
        if best is None:
            raise SystemExit("count_attention: no loop around the mma instructions in " + self.name)
        return best


def simulate_block(kern, bx, nt, pv):
    """One block's per-warp issue counts: (loop, outside) Counters of (class, opcode), unknown branches."""
    head, back = kern.loop
    loop_c, out_c, unknown = collections.Counter(), collections.Counter(), collections.Counter()
    for w in range(WARPS):
        # per loop iteration (visits to the loop head), per instruction: the busiest lane's count
        warp_iters = {}
        for lane in range(32):
            th = Thread(kern, 32 * w + lane, (bx, 0), (nt, 1), pv, lambda pc: unknown.update([pc]))
            seq = []
            th.run(seq.append)
            inside = [k for k, pc in enumerate(seq) if head <= pc <= back]
            first, last = inside[0], inside[-1]
            counts = collections.defaultdict(collections.Counter)
            it = -1
            for k, pc in enumerate(seq):
                if pc == head:
                    it += 1
                counts[("out",) if k < first or k > last else it][pc] += 1
            for key, c in counts.items():
                agg = warp_iters.setdefault(key, collections.Counter())
                for pc, n in c.items():
                    if n > agg[pc]:
                        agg[pc] = n
        for key, c in warp_iters.items():
            target = out_c if isinstance(key, tuple) else loop_c
            for pc, n in c.items():
                target[(kern.insns[pc].cls, kern.insns[pc].op)] += n
    return loop_c, out_c, {kern.insns[pc].text: n for pc, n in unknown.items()}


_WORKER = {}


def _block_worker(job):
    ptx_path, pattern, bx, nt, pv = job
    key = (ptx_path, pattern)
    if key not in _WORKER:
        _WORKER[key] = Kernel(open(ptx_path).read(), pattern)
    return simulate_block(_WORKER[key], bx, nt, pv)


def simulate(ptx_path, kern, pattern, T, C, NH, scale, params, block_rows, jobs):
    """Every block of one head: {'blocks', 'pairs', 'loop', 'outside' (Counters of (class, opcode)), 'unknown'}."""
    nt = (T + TILE - 1) // TILE
    nb = (T + block_rows - 1) // block_rows
    pv = {(nm, 0): v for nm, v in zip(kern.params, params(T, C, NH, scale))}
    work = [(ptx_path, pattern, bx, nb, pv) for bx in range(nb)]
    if jobs > 1:
        import multiprocessing
        with multiprocessing.Pool(jobs) as pool:
            parts = pool.map(_block_worker, work)
    else:
        parts = [_block_worker(j) for j in work]
    loop_c, out_c, unknown = collections.Counter(), collections.Counter(), collections.Counter()
    for lc, oc, un in parts:
        loop_c.update(lc)
        out_c.update(oc)
        unknown.update(un)
    return {"blocks": nb, "pairs": nt * (nt + 1) // 2, "loop": loop_c, "outside": out_c,
            "unknown_branches": dict(unknown)}


def by_class(counter):
    out = collections.Counter()
    for (cls, _), n in counter.items():
        out[cls] += n
    return out


def forward_params(T, C, NH, scale):
    return [0x100000000, 0x200000000, 0x300000000, T, C, NH, scale, 1, 0]


def backward_params(T, C, NH, scale):
    return [0x100000000, 0x200000000, 0x300000000, 0x400000000, 0x500000000, T, C, NH, scale, 1, 0]


# block_rows: query rows (forward) or keys (backward) per block (flash_mma.cuh:
# forward_rows<Bf16Ops>() and kTile). diagonal_skip: products per diagonal tile pair
# that the kernel leaves out because they are all masked (the backward's warp with
# keys 32..63 against queries 0..31 skips its S^T, dP^T and dv's part: 3 products x 1/4).
KERNELS = {
    "forward": {"entry": r"flash_forward_mma_kernelINS0_9flash_mma7Bf16OpsELb0E", "params": forward_params,
                "profile_op": "attention_forward", "profile_kernel": "flash_forward_mma_kernel",
                "products": 2, "block_rows": 128, "diagonal_skip": 0.0},
    "backward": {"entry": r"flash_backward_mma_kernelINS0_9flash_mma7Bf16OpsELb0E", "params": backward_params,
                 "profile_op": "attention_backward", "profile_kernel": "flash_backward_mma_kernel",
                 "products": 5, "block_rows": TILE, "diagonal_skip": 0.75},
}


def make_ptx(path):
    nvcc = os.environ.get("NVCC") or "/usr/local/cuda/bin/nvcc"
    cmd = [nvcc, "-std=c++17", "-O3", "-I.", "-arch=sm_90", "-ptx", "backend/cuda/cuda_backend.cu", "-o", path]
    print("count_attention: " + " ".join(cmd), file=sys.stderr)
    subprocess.check_call(cmd)
    ver = subprocess.run([nvcc, "--version"], capture_output=True, text=True).stdout.strip().split("\n")[-1]
    return " ".join(cmd), ver


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ptx", help="PTX of backend/cuda/cuda_backend.cu for sm_90 (default: run nvcc)")
    ap.add_argument("--profile", default="build/profile/kernels.jsonl")
    ap.add_argument("--out", default="dev/roofline/attention_counts.json")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="processes for the interpreter")
    ap.add_argument("-T", type=int, default=1024, help="sequence length the PTX is run at (the profile's is 1024)")
    a = ap.parse_args(argv)
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    if a.ptx:
        ptx_path, ptx_cmd, nvcc_ver = a.ptx, "given: " + a.ptx, "unknown"
    else:
        ptx_path = "build/roofline/cuda_backend_sm90.ptx"
        os.makedirs(os.path.dirname(ptx_path), exist_ok=True)
        ptx_cmd, nvcc_ver = make_ptx(ptx_path)
    ptx = open(ptx_path).read()
    rows = [json.loads(line) for line in open(a.profile) if line.strip()]
    T, C, NH = a.T, 768, 12
    scale = 1.0 / math.sqrt(C // NH)
    out = {"generated_by": "dev/roofline/count_attention.py", "ptx": ptx_cmd, "nvcc": nvcc_ver,
           "profile": a.profile, "shape": {"T": T, "C": C, "NH": NH, "head_size": C // NH, "dtype": "bf16"},
           "tile": TILE, "classes": CLASSES, "kernels": {}}
    for key, spec in KERNELS.items():
        kern = Kernel(ptx, spec["entry"])
        sim = simulate(ptx_path, kern, spec["entry"], T, C, NH, scale, spec["params"], spec["block_rows"], a.jobs)
        loop, outside = by_class(sim["loop"]), by_class(sim["outside"])
        prof = [r for r in rows if r["op"] == spec["profile_op"] and spec["profile_kernel"] in r["kernel"]
                and r.get("dtype") == "bf16"]
        if len(prof) != 1:
            raise SystemExit("count_attention: %d profile rows for %s in %s" % (len(prof), key, a.profile))
        p = prof[0]
        shape = re.match(r"B=1,T=(\d+),C=%d,NH=1$" % (C // NH), p["shape"])
        if not shape:
            raise SystemExit("count_attention: the profile's %s shape is %s, not one head of %d" %
                             (key, p["shape"], C // NH))
        pt = (int(shape.group(1)) + TILE - 1) // TILE
        profile_pairs = pt * (pt + 1) // 2
        pairs, blocks = sim["pairs"], sim["blocks"]
        mma_total = loop["mma"] + outside["mma"]
        flops_pair = mma_total * MMA_FLOPS / pairs
        nt = (T + TILE - 1) // TILE
        expect = (spec["products"] * pairs - spec["diagonal_skip"] * nt) * 2 * TILE ** 3 / pairs
        if abs(flops_pair - expect) > 0.5:
            raise SystemExit("count_attention: %s has %.0f FLOPs per tile pair, %d products give %.0f" %
                             (key, flops_pair, spec["products"], expect))
        out["kernels"][key] = {
            "entry": kern.name,
            "tile_pairs": pairs, "blocks": blocks, "block_rows": spec["block_rows"],
            "flops_per_pair": flops_pair,
            "shared_wavefronts_per_pair": round(p["shared_wavefronts"] / profile_pairs, 2),
            "global_sectors_per_pair": round(p["global_sectors"] / profile_pairs, 2),
            "profile_tile_pairs": profile_pairs,
            "issue_slots_per_pair": {c: round(loop[c] / pairs, 2) for c in CLASSES},
            "issue_slots_per_block_outside_loop": {c: round(outside[c] / blocks, 2) for c in CLASSES},
            "other_opcodes_per_pair": {op: round(n / pairs, 2) for (cls, op), n in sim["loop"].most_common()
                                       if cls == "other"},
            "profile_row": {k: p[k] for k in ("kernel", "shape", "shared_wavefronts", "global_sectors",
                                              "shared_requests", "global_requests")},
            "unknown_branches": sim["unknown_branches"],
        }
    with open(a.out, "w") as f:
        json.dump(out, f, indent=1, sort_keys=False)
        f.write("\n")
    print("count_attention: wrote " + a.out, file=sys.stderr)


if __name__ == "__main__":
    main(sys.argv[1:])
