#!/usr/bin/env bash
# dev/cpu/profile_cpu_step (`make profile-cpu`) on a tiny model (2 layers, C=64,
# vocab 1000, B=2, T=16): its table must be the step it claims to be. Checked
# from the printed table, with no timing asserted:
#   * every backend op of a training step appears, with the calls the model
#     makes for 2 layers (4L+1 matmuls each way, 2L+1 layernorms, 16 AdamW
#     updates, ...), and the step row's calls are their sum;
#   * the work column is the op's arguments' work: the forward GEMMs' FLOPs,
#     AdamW's 28 bytes per parameter, the model FLOPs (6N + 6LCT per token);
#   * the shares and the milliseconds add up to the step, the rates are the
#     work over the time, the % of peak / bandwidth are the rates over the
#     header's figures, and the step row's % of peak is the header's MFU;
#   * the CPU backend leaves the compound ops to Backend's defaults, so the
#     decorator (dev/cpu/timing_backend.h) times their parts as the backend runs them.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=build/dev/cpu/profile_cpu_step
[ -x "$BIN" ] || { echo "FAIL: $BIN not built (make $BIN)"; exit 1; }

compound='(matmul_gelu_forward|matmul_gelu_backward|residual_layernorm_forward|adamw_update_clipped|read_clip)\('
fused=$(grep -lE "$compound" backend/cpu/*.cpp backend/cpu/*.h || true)
if [ -n "$fused" ]; then
  echo "FAIL: the CPU backend now implements a compound op ($fused): dev/cpu/timing_backend.h must forward it"
  exit 1
fi

OUT=$(mktemp "${TMPDIR:-/tmp}/profile_cpu_step.XXXXXX")
trap 'rm -f "$OUT"' EXIT
"$BIN" --model d2 --config n_embd=64,n_head=2,max_seq=32,vocab_size=1000 -B 2 -T 16 --steps 2 --warmup 1 \
  --threads 2 >"$OUT" || { echo "FAIL: profile_cpu_step exited $?"; cat "$OUT"; exit 1; }
cat "$OUT"

python3 - "$OUT" <<'EOF'
import re, sys

L, C, B, T, Vp, maxT = 2, 64, 2, 16, 1024, 32
N = B * T
params = Vp * C + maxT * C + L * (12 * C * C + 13 * C) + 2 * C
text = open(sys.argv[1]).read()
fails = []

def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        fails.append(what)

def close(a, b, rel, absolute=0.0):
    return abs(a - b) <= max(rel * abs(b), absolute)

UNITS = {"": 1, "k": 1e3, "M": 1e6, "G": 1e9}
def amount(cell):  # "212.3 MFLOP" -> 212.3e6
    m = re.match(r"([0-9.e+-]+) ([kMG]?)(FLOP|B)", cell)
    return float(m.group(1)) * UNITS[m.group(2)]

rows = {}
for line in text.splitlines():
    if not line.startswith("| ") or line.startswith("| op "):
        continue
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    rows[cells[0]] = cells
step = rows.pop("**step**")
between = rows.pop("(between ops)")

check(f"{params / 1e6:.2f}M parameters" in text, f"header names {params / 1e6:.2f}M parameters")
want_calls = {
    "matmul_forward": 4 * L + 1, "matmul_backward": 4 * L + 1, "attention_forward": L, "attention_backward": L,
    "gelu_forward": L, "gelu_backward": L, "layernorm_forward": 2 * L + 1, "layernorm_backward": 2 * L + 1,
    "residual_forward": 2 * L, "encoder_forward": 1, "encoder_backward": 1, "classifier_forward_backward": 1,
    "sum_squares_into": 1, "clip_scale": 1, "adamw_update": 16, "download64": 16, "upload_tokens": 2,
}
for op, n in want_calls.items():
    got = rows.get(op, [op, "missing"])[1]
    check(got == str(n), f"{op}: {n} calls per step (table: {got})")
check("tied_embedding_backward_rows" in rows, "tied_embedding_backward_rows appears")
check(int(step[1]) == sum(int(r[1]) for r in rows.values()), "the step row's calls are the ops' sum")

gemm_fwd = 2 * N * (L * (3 * C * C + C * C + 4 * C * C + 4 * C * C) + C * Vp)
check(close(amount(rows["matmul_forward"][4]), gemm_fwd, 1e-3), f"matmul_forward work = {gemm_fwd} FLOP")
check(close(amount(rows["adamw_update"][4]), 28 * params, 1e-3), f"adamw_update work = 28 B x {params}")
model = (6 * params + 6 * L * C * T) * N
check(close(amount(step[4].replace(" (model)", "")), model, 1e-3), f"step work = {model} model FLOP")

ms = {op: float(r[2]) for op, r in rows.items()}
share = sum(float(r[3]) for r in rows.values()) + float(between[3])
check(close(share, 100.0, 0, 0.05 * (len(rows) + 1)), f"shares add up to 100% ({share:.1f})")
total = sum(ms.values()) + float(between[2])
check(close(total, float(step[2]), 0, 0.0006 * (len(rows) + 1)), f"ms add up to the step ({total:.3f})")

peak = float(re.search(r"^peak: +([0-9.]+) TFLOP/s", text, re.M).group(1)) * 1e3
bw = float(re.search(r"^bandwidth: +([0-9.]+) GB/s", text, re.M).group(1))
mfu = float(re.search(r"MFU ([0-9.]+)%", text).group(1))
for op, r in rows.items():
    if ms[op] < 0.05:
        continue  # too few digits of time to check a rate
    rate = float(r[5] or r[7])
    per_s = amount(r[4]) / (ms[op] / 1e3) / 1e9
    check(close(rate, per_s, 0.02, 0.1), f"{op}: rate {rate} = work / time ({per_s:.1f})")
    roof, pct = (peak, float(r[6])) if r[5] else (bw, float(r[8]))
    # the rate is printed to 0.1: its rounding moves rate / roof by up to 100 * 0.05 / roof points
    check(close(pct, 100 * rate / roof, 0.01, 0.1 + 100 * 0.05 / roof), f"{op}: {pct}% = rate / {roof:.1f}")
check(close(float(step[6].split()[0]), mfu, 0, 0.05), f"the step row's % of peak is the MFU ({mfu}%)")
sys.exit(1 if fails else 0)
EOF
