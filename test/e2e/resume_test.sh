#!/usr/bin/env bash
# Crash-and-resume on the CPU backend: a run is SIGKILLed right after a
# checkpoint becomes complete; --resume must continue so that every later loss
# equals an uninterrupted run's bit for bit (the JSONL loss is printed with 17
# significant digits, so equal text means equal doubles). Also: resuming with a
# different model config is a clear error.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/test/e2e
work=$(mktemp -d build/test/e2e/resume.XXXXXX)
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT

common=(--device cpu --model d2 --config n_embd=64,n_head=2,max_seq=64 -B 4 -T 32 --max-steps 40
        --val-every 0 --sample-every 0 --lr 1e-3 --warmup-steps 5 --weight-decay 0.1 --threads 2
        --train-data data/tinyshakespeare/tiny_shakespeare_train.bin)

./train_gpt2cu "${common[@]}" --output-dir "$work/full_ck" --log-jsonl "$work/full.jsonl" > "$work/full.log" 2>&1

./train_gpt2cu "${common[@]}" --output-dir "$work/ck" --checkpoint-every 5 --log-jsonl "$work/a.jsonl" \
  > "$work/a.log" 2>&1 &
pid=$!
for _ in $(seq 3000); do [ -e "$work/ck/DONE_00000010" ] && break; sleep 0.01; done
kill -9 "$pid" 2>/dev/null || true
wait "$pid" 2>/dev/null || true
pid=""
[ -e "$work/ck/DONE_00000010" ] || { echo "FAIL: no checkpoint at step 10"; cat "$work/a.log"; exit 1; }

./train_gpt2cu "${common[@]}" --output-dir "$work/ck" --checkpoint-every 5 --resume --log-jsonl "$work/b.jsonl" \
  > "$work/b.log" 2>&1 || { echo "FAIL: resume run failed"; cat "$work/b.log"; exit 1; }
resumed=$(grep -o 'at step [0-9]*' "$work/b.log" | head -1 | awk '{print $3}')
echo "killed run resumed at step $resumed"
[ -n "$resumed" ] && [ "$resumed" -ge 10 ] && [ "$resumed" -lt 40 ] || { echo "FAIL: bad resume step '$resumed'"; exit 1; }

extract() { grep '"type":"train"' "$1" | sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/'; }
extract "$work/full.jsonl" > "$work/full.txt"
extract "$work/b.jsonl" > "$work/b.txt"
n=$(wc -l < "$work/b.txt")
[ "$n" -eq $((40 - resumed)) ] || { echo "FAIL: resumed run logged $n steps, expected $((40 - resumed))"; exit 1; }
if ! diff <(awk -v s="$resumed" '$1 > s' "$work/full.txt") "$work/b.txt"; then
  echo "FAIL: resumed losses differ from the uninterrupted run"; exit 1
fi
echo "steps $((resumed + 1))..40: $n losses bitwise identical to the uninterrupted run"
cmp "$work/ck/model.bin" "$work/full_ck/model.bin" || { echo "FAIL: final weights differ"; exit 1; }
echo "final model.bin bitwise identical"

# A different model config on resume is an error naming the checkpoint.
if ./train_gpt2cu "${common[@]/n_embd=64/n_embd=128}" --output-dir "$work/ck" --resume > "$work/c.log" 2>&1; then
  echo "FAIL: resume with another config succeeded"; exit 1
fi
grep -q "has config" "$work/c.log" || { echo "FAIL: unclear error:"; cat "$work/c.log"; exit 1; }
echo "config mismatch rejected: $(grep error "$work/c.log" | head -1)"
