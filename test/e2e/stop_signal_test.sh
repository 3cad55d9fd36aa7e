#!/usr/bin/env bash
# A stop signal is honoured within seconds wherever the trainer is, on the CPU
# backend; SIGTERM is sent once the run is inside the long phase, and each run
# must be gone within 30 s of it:
#   a. during the step-0 validation of --val-steps 2^30 batches: exit 75, the
#      checkpoint of step 0 (the last completed one) written;
#   b. the same without --output-dir: exit 143 (128 + SIGTERM), "nothing saved";
#   c. during the step-2 training sample of 2^20 tokens: the sample ends and the
#      run stops before another step: exit 75 with the checkpoint of step 2;
#   d. --eval-only over every window at stride 1: exit 143, no result;
#   e. --generate of 2^20 tokens: exit 143 after the tokens so far;
#   f. SIGINT (Ctrl-C) stops like SIGTERM: exit 75 with its checkpoint, and
#      DIR/.lock is gone (SIGINT must not kill the run and leave the lock behind);
#   g. --generate reading its prompt from a stdin that stays silent: exit 143 within 5 s.
set -u
cd "$(dirname "$0")/../.."
BIN=${TRAINER:-./train_gpt2cu}  # any trainer binary with the CPU backend
. test/e2e/prologue.sh stop_signal "$BIN"

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/tokens.bin" 20000 512
# run: what --eval-only and --generate take too; common adds training's flags
run=(--device cpu -B 2 -T 32 --threads 1 --val-data "$W/tokens.bin")
common=("${run[@]}" --lr 1e-3 --no-shuffle --train-data "$W/tokens.bin")
# GPT-2's vocabulary size: a sample starts from <|endoftext|> (50256)
preset=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=50257,padded_vocab_size=50304)

# stopped NAME LOG PATTERN ARGS...: runs the trainer in the background, waits (up to
# 60 s) for PATTERN in LOG, sends $SIG (TERM) 1 s later, and sets rc and secs (signal
# to exit). Job control (set -m): a script's background job would inherit SIGINT ignored.
stopped() {
  local name=$1 log=$2 pattern=$3 pid t0; shift 3
  set -m
  timeout -k 5 300 "$BIN" "$@" >"$log" 2>&1 &
  pid=$!
  set +m
  for _ in $(seq 600); do grep -q -- "$pattern" "$log" 2>/dev/null && break; sleep 0.1; done
  sleep 1
  t0=$(date +%s)
  kill "-${SIG:-TERM}" "$pid"
  wait "$pid"
  rc=$?
  secs=$(($(date +%s) - t0))
  grep -q -- "$pattern" "$log" || { bad "$name: never reached '$pattern'"; tail -n 3 "$log"; }
}
in_time() { [ "$secs" -le 30 ]; }

stopped a "$W/a.log" "^| memory/rank" "${common[@]}" "${preset[@]}" --max-steps 100 --val-every 2 \
  --val-steps 1073741824 --sample-every 0 -o "$W/a"
if [ $rc -eq 75 ] && in_time && [ -e "$W/a/DONE_00000000" ] && grep -q "checkpointing at step 0" "$W/a.log"; then
  pass "a: SIGTERM during validation: exit 75 after $secs s, checkpoint of step 0"
else bad "a: validation: exit $rc after $secs s, $(ls "$W/a" 2>/dev/null | tr '\n' ' ')"; tail -n 3 "$W/a.log"; fi

stopped b "$W/b.log" "^| memory/rank" "${common[@]}" "${preset[@]}" --max-steps 100 --val-every 2 \
  --val-steps 1073741824 --sample-every 0
if [ $rc -eq 143 ] && in_time && grep -q "no --output-dir: nothing saved (exit 143)" "$W/b.log"; then
  pass "b: the same without --output-dir: exit 143 after $secs s, nothing saved"
else bad "b: exit $rc after $secs s"; tail -n 3 "$W/b.log"; fi

stopped c "$W/c.log" "^step     2/" "${common[@]}" "${preset[@]}" --max-steps 100 --val-every 0 \
  --sample-every 2 --gen-tokens 1048576 -o "$W/c"
n=$(sed -n 's/.*; checkpointing at step \([0-9]*\)$/\1/p' "$W/c.log")
if [ $rc -eq 75 ] && in_time && [ "$n" = 2 ] && [ -e "$W/c/DONE_$(printf %08d "$n")" ]; then
  pass "c: SIGTERM during a sample: exit 75 after $secs s, checkpoint of step $n"
else bad "c: sample: exit $rc after $secs s, $(ls "$W/c" 2>/dev/null | tr '\n' ' ')"; tail -n 3 "$W/c.log"; fi

model=$(ls "$W"/c/model_0*.bin | tail -n 1)
stopped d "$W/d.log" "^eval: " "${run[@]}" --model "$model" --eval-only --eval-stride 1
if [ $rc -eq 143 ] && in_time && grep -q -- "--eval-only: stop requested by signal 15; no result (exit 143)" "$W/d.log"; then
  pass "d: SIGTERM during --eval-only: exit 143 after $secs s"
else bad "d: --eval-only: exit $rc after $secs s"; tail -n 3 "$W/d.log"; fi

stopped e "$W/e.log" "generate:" "${run[@]}" --model "$model" --generate --gen-tokens 1048576
if [ $rc -eq 143 ] && in_time && grep -q "stopped by signal 15 after [0-9]* token(s) (exit 143)" "$W/e.log"; then
  pass "e: SIGTERM during --generate: exit 143 after $secs s"
else bad "e: --generate: exit $rc after $secs s"; tail -n 3 "$W/e.log"; fi

SIG=INT stopped f "$W/f.log" "^step     2/" "${common[@]}" "${preset[@]}" --max-steps 1000000 --val-every 0 \
  --sample-every 0 -o "$W/f"
n=$(sed -n 's/^stop requested by signal 2; checkpointing at step \([0-9]*\)$/\1/p' "$W/f.log")
if [ $rc -eq 75 ] && in_time && [ -n "$n" ] && [ -e "$W/f/DONE_$(printf %08d "$n")" ] && [ ! -e "$W/f/.lock" ]; then
  pass "f: SIGINT: exit 75 after $secs s, checkpoint of step $n, DIR/.lock released"
else bad "f: SIGINT: exit $rc after $secs s, $(ls -A "$W/f" 2>/dev/null | tr '\n' ' ')"; tail -n 3 "$W/f.log"; fi

# g: --generate waiting for its prompt on a stdin that stays silent (a writer
# holds the pipe open 30 s): the signal ends the wait, not the writer.
mkfifo "$W/silent"
sleep 30 > "$W/silent" &
holder=$!
set -m
timeout -k 5 300 "$BIN" "${run[@]}" --model "$model" --generate --prompt-file - < "$W/silent" > "$W/g.log" 2>&1 &
pid=$!
set +m
sleep 2
t0=$(date +%s)
kill -TERM "$pid"
wait "$pid"
rc=$?
secs=$(($(date +%s) - t0))
kill "$holder" 2>/dev/null
if [ $rc -eq 143 ] && [ "$secs" -le 5 ] && grep -q -- "--generate: stop requested by signal 15; no result (exit 143)" "$W/g.log"
then pass "g: SIGTERM while --generate reads a silent stdin: exit 143 after $secs s"
else bad "g: --generate on a silent stdin: exit $rc after $secs s"; tail -n 3 "$W/g.log"; fi

finish stop_signal_test
