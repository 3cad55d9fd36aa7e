# Helpers sourced by the distributed training tests (bash).
# losses JSONL: "step loss" lines of the trainer's --log-jsonl train records.
losses() { grep '"type":"train"' "$1" | sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/'; }
# same_losses A B [FIRST_STEP]: B logs exactly A's steps after FIRST_STEP, each
# loss within 1e-6 relative of A's.
same_losses() {
  awk -v first="${3:-0}" '
    NR == FNR { if ($1 > first) { ref[$1] = $2; want++ } next }
    !($1 in ref) { extra++; next }
    { d = $2 - ref[$1]; if (d < 0) d = -d; r = d / (ref[$1] < 0 ? -ref[$1] : ref[$1]); if (r > worst) worst = r; c++ }
    END { printf "%d steps, max relative loss difference %.3g", c, worst
          if (extra) printf ", %d unexpected steps", extra
          exit !(c == want && c > 0 && !extra && worst <= 1e-6) }' <(losses "$1") <(losses "$2")
}
# same_weights A.bin B.bin [MAX_ABS]: llm.c fp32 model files; without MAX_ABS they
# must be bitwise identical, with it every weight within MAX_ABS (bf16 runs use
# adamw_weights below). The fp32 callers' 1e-5 after <= 8 steps of lr 1e-3 is an
# allowance, not a worst case: the runs' gradients differ by summation order
# (relative ~1e-7 of their terms), which moves Adam's step by far less than 1% of
# lr except for a weight whose gradient is itself at that noise level, where no
# rounding bound short of adamw_weights' 2 R_t lr per step holds. Measured at most
# 5.4e-6 (resume_across_test.sh, CPU 2 ranks -> CUDA 1 rank, OpenBLAS's SkylakeX
# kernel; 3.7e-6 under Haswell and Zen: make test-blas-variants); the emulated CUDA
# runs are the same bits on every CPU.
same_weights() {
  /usr/bin/env python3 - "$@" <<'EOF'
import struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
if len(a) != len(b) or a[:1024] != b[:1024]:
    print("different size or header"); sys.exit(1)
if a == b:
    print("bitwise identical"); sys.exit(0)
if len(sys.argv) < 4:
    print("not bitwise identical"); sys.exit(1)
n = (len(a) - 1024) // 4
fa, fb = struct.unpack("<%df" % n, a[1024:]), struct.unpack("<%df" % n, b[1024:])
diffs = [abs(x - y) for x, y in zip(fa, fb)]
excess = [d - float(sys.argv[3]) for d in diffs]
worst = max(range(n), key=diffs.__getitem__)
same = sum(1 for d in diffs if d == 0)
print("%.1f%% of weights bitwise equal, max |difference| %.3g at weight %d (%.6g)"
      % (100.0 * same / n, diffs[worst], worst, fa[worst]))
sys.exit(0 if max(excess) <= 0 else 1)
EOF
}
# close_steps A.jsonl B.jsonl [LOSS_TOL NORM_TOL]: B logs exactly A's train steps, each loss and
# gradient norm within the relative bounds (default 1e-6 and 2e-5: norms are logged to 6 digits).
close_steps() {
  /usr/bin/env python3 - "$1" "$2" "${3:-1e-6}" "${4:-2e-5}" <<'EOF'
import json, sys
def steps(p):
    return {r["step"]: r for r in map(json.loads, open(p)) if r["type"] == "train"}
a, b = steps(sys.argv[1]), steps(sys.argv[2])
loss_tol, norm_tol = float(sys.argv[3]), float(sys.argv[4])
rel = lambda x, y: abs(x - y) / abs(x) if x else abs(y)
dl = max((rel(a[s]["loss"], b[s]["loss"]) for s in a if s in b), default=float("inf"))
dn = max((rel(a[s]["grad_norm"], b[s]["grad_norm"]) for s in a if s in b), default=float("inf"))
print("%d of %d steps, max relative difference: loss %.3g (bound %g), grad norm %.3g (bound %g)"
      % (len(b), len(a), dl, loss_tol, dn, norm_tol))
sys.exit(0 if a.keys() == b.keys() and a and dl <= loss_tol and dn <= norm_tol else 1)
EOF
}
# reproduces DIR REF NAME RC: status 0 and a summary when run NAME (exit status RC; DIR/NAME.log,
# DIR/NAME.jsonl, DIR/NAME/model.bin) logs REF's steps (close_steps) and ends within 1e-5 of REF's
# weights; else status 1 and why not.
reproduces() {
  local dir=$1 ref=$2 name=$3 rc=$4 msg wmsg
  [ "$rc" = 0 ] || { echo "run failed (exit $rc): $(grep -m1 -o 'non-finite gradient norm at step [0-9]*\|error: .*' "$dir/$name.log")"; return 1; }
  msg=$(close_steps "$dir/$ref.jsonl" "$dir/$name.jsonl") || { echo "$msg"; return 1; }
  wmsg=$(same_weights "$dir/$ref/model.bin" "$dir/$name/model.bin" 1e-5) || { echo "$msg; weights: $wmsg"; return 1; }
  echo "$msg; weights: $wmsg"
}
# adamw_weights A.bin B.bin LOG.jsonl [FIRST_STEP [BF16_ULPS]]: final weights of two runs
# that started the steps after FIRST_STEP (default 0) from the same weights and optimizer
# state and then differed only in rounding (summation order, bf16 storage), over the
# schedule LOG records (its "lr" per step; AdamW's defaults beta1 0.9, beta2 0.95, as
# every caller trains with).
# Per weight, a bound no rounding can break: AdamW moves a weight by lr_t * u_t with
# |u_t| = |m_hat/(sqrt(v_hat)+eps)| <= R_t, R_t = sqrt(1-b2^t)/(1-b1^t) * (1-b1)/sqrt(1-b2)
#   * sqrt(sum_{j<t} (b1^2/b2)^j)  (Cauchy-Schwarz over the moment sums; 1 at t=1, 1.0074
# at t=8), whatever the gradient's size: where a gradient is rounding noise the two runs
# may step with opposite signs, so |dw| <= sum_t 2 R_t lr_t (decoupled weight decay only
# shrinks a difference), plus one fp32 ulp of the weight per step (the update's own
# rounding), plus BF16_ULPS bf16 ulps of the weight (each bf16 run rounds its own fp32
# master, 2^(floor(log2|w|) - 7) apart at a rounding boundary).
# On average, a bound for rounding: mean |dw| <= the mean over weights of one ulp of the
# weight in the stored precision (bf16 when BF16_ULPS > 0, else fp32) plus
# sum_t 2 R_t lr_t * 1e-3: a bug (a misplaced shard, a moment off) moves every weight
# of a shard by about lr per step, i.e. ~1e3 times the second term.
adamw_weights() {
  /usr/bin/env python3 - "$@" <<'EOF'
import json, math, struct, sys
a, b = (open(p, "rb").read() for p in sys.argv[1:3])
first = int(sys.argv[4]) if len(sys.argv) > 4 else 0
ulps = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
b1, b2 = 0.9, 0.95
def ratio_bound(t):
    s = sum((b1 * b1 / b2) ** j for j in range(t))
    return math.sqrt(1 - b2 ** t) / (1 - b1 ** t) * (1 - b1) / math.sqrt(1 - b2) * math.sqrt(s)
steps = [r for r in map(json.loads, open(sys.argv[3])) if r["type"] == "train" and r["step"] > first]
drift = sum(2 * ratio_bound(r["step"]) * r["lr"] for r in steps)
if len(a) != len(b) or a[:1024] != b[:1024]:
    print("different size or header"); sys.exit(1)
n = (len(a) - 1024) // 4
fa, fb = struct.unpack("<%df" % n, a[1024:]), struct.unpack("<%df" % n, b[1024:])
def ulp(x, mant):
    return 2.0 ** (math.frexp(abs(x))[1] - 1 - mant) if x != 0 else 0.0
diffs = [abs(x - y) for x, y in zip(fa, fb)]
bound = [drift + len(steps) * ulp(x, 23) + ulps * ulp(x, 7) for x in fa]
over = sum(1 for d, m in zip(diffs, bound) if d > m)
mean = sum(diffs) / n
mean_bound = sum(ulp(x, 7 if ulps > 0 else 23) for x in fa) / n + drift * 1e-3
worst = max(range(n), key=diffs.__getitem__)
print("%d steps, %.1f%% bitwise equal, max |difference| %.3g at weight %d (%.4g; bound %.3g = sum 2 R_t lr_t %.3g"
      " + ulps), mean %.3g (bound %.3g), %d over the bound"
      % (len(steps), 100.0 * sum(1 for d in diffs if d == 0) / n, diffs[worst], worst, fa[worst], bound[worst],
         drift, mean, mean_bound, over))
sys.exit(1 if over or mean > mean_bound or not steps else 0)
EOF
}
