#!/usr/bin/env bash
# test-timeout: 400
# Supervised fine-tuning end to end: ./prepare_data --sft (prompt/completion JSONL -> packed shards
# + loss-mask sidecars) -> ./train_gpt2cu. The loss is the mean over the supervised targets of the
# whole optimizer step on all ranks (ignore_index semantics; its exact PyTorch match is
# test/e2e/torch_compare_test.cpp's Masked* cases), so:
#   1. the log reports supervised tokens per step, fewer than B*T (the prompts are masked);
#   2. 1 rank x 2 micro-batches, 2 ranks (mpirun, B halved) and 1 rank at B*2 train on the same
#      tokens and log the same supervised counts and losses (1e-6 relative);
#   3. the CUDA backend (emulated, fp32) logs the CPU backend's losses (1e-5) and counts;
#   4. a run at another --seq-len than the shards were packed for is refused naming the file and both T;
#   5. the model learns the completions: masked val loss falls by more than half over 60 steps.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/e2e/prologue.sh sft_train ./prepare_data ./train_gpt2cu "$EMU"
[ -f data/gpt2/encoder.json ] || { echo "FAIL: no GPT-2 vocabulary in data/gpt2 (make vocab)"; exit 1; }
. test/distributed/compare_lib.sh  # losses, same_losses

# 400 arithmetic questions: the answer is learnable, the prompt is not supervised.
/usr/bin/env python3 - "$W/qa.jsonl" <<'EOF'
import json, random, sys
r = random.Random(7)
with open(sys.argv[1], "w") as f:
    for _ in range(400):
        a, b = r.randint(0, 9), r.randint(0, 9)
        s = a + b  # answers of several lengths, so the supervised count varies from step to step
        c = r.choice([f" {s}", f" {s}.", f" It is {s}.", f" The sum is {s}, I think."])
        f.write(json.dumps({"prompt": f"Q: {a} plus {b}?\nA:", "completion": c}) + "\n")
EOF
./prepare_data --sft --seq-len 32 --val-examples 40 --progress none --out-prefix "$W/qa" "$W/qa.jsonl" \
  2> "$W/prep.log" || { cat "$W/prep.log"; echo "FAIL: prepare_data --sft"; exit 1; }

model=(--model d2 --config n_embd=64,n_head=2,max_seq=64)
common=("${model[@]}" -T 32 --lr 3e-3 --max-steps 6 --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/qa_train_*.bin")
export GPT2_EMU_THREADS=1
run() { local name=$1; shift; timeout -k 10 200 "$@" --log-jsonl "$W/$name.jsonl" > "$W/$name.log" 2>&1 \
          || { bad "$name run failed:"; tail -5 "$W/$name.log"; }; }
run accum ./train_gpt2cu --device cpu "${common[@]}" -B 2 --total-batch-tokens 128
run big ./train_gpt2cu --device cpu "${common[@]}" -B 4
run cuda "$EMU" --device cuda "${common[@]}" -B 4
if command -v mpirun >/dev/null; then
  run np2 timeout -k 10 200 mpirun --allow-run-as-root --oversubscribe -np 2 -x GPT2_EMU_THREADS \
    ./train_gpt2cu --device cpu "${common[@]}" -B 2
else
  bad "mpirun not found"
fi

sup() { grep '"type":"train"' "$1" | sed -E 's/.*"supervised_tokens":([0-9]+).*/\1/' | tr '\n' ' '; }
counts=$(sup "$W/accum.jsonl")
# 1 ---------------------------------------------------------------------------------------------
if [ "$(echo $counts | wc -w)" = 6 ] && [ "$(echo $counts | tr ' ' '\n' | sort -u | wc -l)" -gt 1 ] &&
   echo $counts | tr ' ' '\n' | awk '$1 <= 0 || $1 >= 128 { e = 1 } END { exit e }'; then
  pass "supervised tokens per step reported, varying, between 1 and B*T-1 of 128: $counts"
else
  bad "supervised tokens per step: '$counts'"
fi
# 2 ---------------------------------------------------------------------------------------------
for other in big np2; do
  [ "$(sup "$W/$other.jsonl")" = "$counts" ] && pass "$other: same supervised counts" || bad "$other counts: $(sup "$W/$other.jsonl")"
  msg=$(same_losses "$W/accum.jsonl" "$W/$other.jsonl") && pass "$other vs 1 rank x 2 micro-batches: $msg" \
    || bad "$other vs 1 rank x 2 micro-batches: $msg"
done
# 3 ---------------------------------------------------------------------------------------------
[ "$(sup "$W/cuda.jsonl")" = "$counts" ] && pass "CUDA: same supervised counts" || bad "CUDA counts: $(sup "$W/cuda.jsonl")"
msg=$(paste <(losses "$W/big.jsonl") <(losses "$W/cuda.jsonl") | awk '
  { d = $2 - $4; if (d < 0) d = -d; r = d / $2; if (r > w) w = r; n++ }
  END { printf "%d steps, max relative loss difference %.3g (bound 1e-5)", n, w; exit !(n == 6 && w <= 1e-5) }') \
  && pass "CUDA (emulated) vs CPU: $msg" || bad "CUDA (emulated) vs CPU: $msg"
# 4 ---------------------------------------------------------------------------------------------
out=$(./train_gpt2cu --device cpu "${model[@]}" -B 2 -T 16 --max-steps 1 --train-data "$W/qa_train_*.bin" 2>&1); rc=$?
if [ $rc -ne 0 ] && echo "$out" | grep -q 'qa_train_000001.mask' && echo "$out" | grep -q '32' && echo "$out" | grep -q '16'; then
  pass "another --seq-len refused: $(echo "$out" | grep -m1 error)"
else
  bad "--seq-len 16 on T=32 shards: rc $rc, $(echo "$out" | tail -2)"
fi
# 5 ---------------------------------------------------------------------------------------------
timeout -k 10 200 ./train_gpt2cu --device cpu "${model[@]}" -T 32 -B 8 \
  --lr 3e-3 --warmup-steps 5 --max-steps 60 --threads 2 --val-every 30 --val-steps 2 --sample-every 0 \
  --train-data "$W/qa_train_*.bin" --val-data "$W/qa_val_*.bin" --log-jsonl "$W/learn.jsonl" > "$W/learn.log" 2>&1 \
  || bad "60-step run failed: $(tail -2 "$W/learn.log")"
vals=$(grep '"type":"val"' "$W/learn.jsonl" | sed -E 's/.*"val_loss":([^,]+),.*/\1/' | tr '\n' ' ')
if echo "$vals" | awk '{ exit !(NF == 3 && $3 < $1 / 2) }'; then
  pass "masked val loss at steps 0/30/60: $vals (falls by more than half)"
else
  bad "masked val loss at steps 0/30/60: '$vals'"
fi
finish sft_train_test
