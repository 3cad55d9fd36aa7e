#!/usr/bin/env bash
# --attention auto|cudnn|flash|classic through the emulated CUDA trainer
# (build/train_gpt2cu_emu, cuDNN's graph API on the emulator's model of it):
#   - bf16 training with --attention cudnn logs the losses of --attention flash
#     and of the CPU backend within the bf16 bound the emulated trainer is held
#     to (1%, test/e2e/cuda_emu_train_test.sh); auto picks cuDNN here (same bits);
#   - the banner's attention line names the kernel and why;
#   - what cudnn cannot serve exits 2 with the reason (fp32, attention dropout,
#     a head size that is not a multiple of 8), as do --attention on the CPU
#     backend and an unknown value;
#   - --dry-run names cuDNN's workspace.
set -uo pipefail
cd "$(dirname "$0")/../.."
. test/e2e/prologue.sh attention_choice build/train_gpt2cu_emu ./train_gpt2cu
emu=build/train_gpt2cu_emu
export GPT2_EMU_THREADS=1
/usr/bin/python3 test/e2e/torch_reference.py --out "$W" --steps 6 > "$W/ref.log" || { echo "FAIL: reference"; exit 1; }
args=(--model "$W/model.bin" --train-data "$W/train.bin" --no-shuffle -B 2 -T 8 --lr 1e-2 --lr-schedule constant
      --max-steps 6 --val-every 0 --sample-every 0)

train() {  # NAME BINARY FLAGS...: a run that must succeed
  local name=$1 bin=$2
  shift 2
  "$bin" "${args[@]}" "$@" --log-jsonl "$W/$name.jsonl" > "$W/$name.log" 2>&1 \
    || { bad "$name: exit $?"; cat "$W/$name.log"; }
}
train cpu ./train_gpt2cu --device cpu
for kind in cudnn flash auto; do train "$kind" "$emu" --device cuda --dtype bf16 --attention "$kind"; done
grep -q "| attention    cudnn (cuDNN 9\.[0-9]*\.[0-9]*, bf16, head size 8, causal)" "$W/cudnn.log" \
  && pass "banner: cudnn" || { bad "banner of --attention cudnn"; grep attention "$W/cudnn.log"; }
grep -q "| attention    cudnn (.*(--attention auto))" "$W/auto.log" \
  && pass "banner: auto picks cudnn for bf16" || { bad "banner of --attention auto"; grep attention "$W/auto.log"; }
grep -q "| attention    flash (--attention flash)" "$W/flash.log" && pass "banner: flash" || bad "banner of flash"
train auto_fp32 "$emu" --device cuda --tf32 off
grep -q "| attention    flash (--attention auto, not cuDNN: fp32 storage" "$W/auto_fp32.log" \
  && pass "banner: auto picks flash for fp32, saying why" || { bad "banner of auto fp32"; grep attention "$W/auto_fp32.log"; }

/usr/bin/python3 - "$W" <<'PY' && pass "losses: cudnn vs flash and CPU within 1%, auto == cudnn" || bad "losses"
import json, sys
w = sys.argv[1]
def losses(name):
    return [r["loss"] for r in map(json.loads, open(f"{w}/{name}.jsonl")) if r["type"] == "train"]
cpu, cudnn, flash, auto = (losses(n) for n in ("cpu", "cudnn", "flash", "auto"))
assert len(cpu) == len(cudnn) == len(flash) == 6, (len(cpu), len(cudnn), len(flash))
assert auto == cudnn, f"auto {auto} differs from cudnn {cudnn}"
for k, (c, d, f) in enumerate(zip(cpu, cudnn, flash), 1):
    print(f"step {k} cpu {c:.6f} cudnn {d:.6f} flash {f:.6f} (cudnn/flash rel {abs(d - f) / abs(f):.1e})")
    assert abs(d - f) / abs(f) < 1e-2 and abs(d - c) / abs(c) < 1e-2
assert cudnn != flash, "cudnn and flash logged identical losses: did cudnn run?"
PY

refused() {  # NAME PATTERN BINARY FLAGS...: exit 2 naming PATTERN
  local name=$1 pattern=$2 bin=$3 rc=0
  shift 3
  "$bin" "${args[@]}" "$@" > "$W/$name.log" 2>&1 || rc=$?
  if [ "$rc" = 2 ] && grep -q -- "$pattern" "$W/$name.log"; then pass "$name: exit 2"
  else bad "$name: exit $rc"; cat "$W/$name.log"; fi
}
refused cudnn_fp32 "--attention cudnn: cuDNN's fused attention runs with --dtype bf16 only" "$emu" --device cuda \
  --attention cudnn
refused cudnn_dropout "--attention cudnn: attention dropout .*use --attention flash" "$emu" --device cuda \
  --dtype bf16 --attention cudnn --dropout 0.1
small=(--model d2 --config n_embd=48,n_head=4,max_seq=16 --train-data "$W/train.bin" -B 2 -T 8 --max-steps 1
       --val-every 0 --sample-every 0)
rc=0
"$emu" "${small[@]}" --device cuda --dtype bf16 --attention cudnn > "$W/cudnn_hs12.log" 2>&1 || rc=$?
[ "$rc" = 2 ] && grep -q "head size 12 is not a multiple of 8; use --attention flash" "$W/cudnn_hs12.log" \
  && pass "cudnn_hs12: exit 2" || { bad "cudnn_hs12: exit $rc"; cat "$W/cudnn_hs12.log"; }
"$emu" "${small[@]}" --device cuda --dtype bf16 > "$W/auto_hs12.log" 2>&1 \
  && grep -q "| attention    flash (--attention auto, not cuDNN: head size 12 is not a multiple of 8)" "$W/auto_hs12.log" \
  && pass "auto_hs12: flash, saying why" || { bad "auto_hs12"; cat "$W/auto_hs12.log"; }
refused cpu_flash "--attention flash chooses among the CUDA backend's kernels" ./train_gpt2cu --device cpu \
  --attention flash
refused unknown "attention" ./train_gpt2cu --device cpu --attention fast

"$emu" "${args[@]}" --device cuda --dtype bf16 --dry-run 1 > "$W/dry.log" 2>&1 \
  && grep -q "and cuDNN attention (--attention auto): 256 B of backward row sums plus its plan's workspace" "$W/dry.log" \
  && pass "--dry-run names cuDNN's workspace" || { bad "--dry-run"; cat "$W/dry.log"; }
finish attention_choice
