#!/usr/bin/env bash
# Checkpoint integrity and the output directory lock, on the CPU backend:
#   1. a byte flipped in each kind of checkpoint file (model, state, DONE marker):
#      --resume refuses, naming the file and the previous good step;
#      --resume-fallback resumes from that step and its losses equal an
#      uninterrupted run's bit for bit;
#   2. two runs on one --output-dir: the second fails at start-up naming the
#      first's host and PID; SIGTERM leaves no lock behind; after kill -9 the
#      stale lock is taken over with a warning;
#   3. kill -9 of the trainer process itself (not a wrapper shell) while it
#      writes checkpoints, 10 times at random moments; every restart resumes,
#      and all the losses logged on the way and the final weights equal the
#      uninterrupted run's.
# TRAIN_GPT2CU overrides the binary (default ./train_gpt2cu). CKPT_TEST_SEED
# replays the random kill delays.
set -euo pipefail
cd "$(dirname "$0")/../.."
bin=${TRAIN_GPT2CU:-./train_gpt2cu}
mkdir -p build/test/e2e
work=$(realpath "$(mktemp -d build/test/e2e/ckpt_integrity.XXXXXX)")
pid=""
cleanup() { [ -n "$pid" ] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
fail() { echo "FAIL: $*"; exit 1; }

steps=30
common=(--device cpu --model d2 --config n_embd=64,n_head=2,max_seq=64 -B 4 -T 32 --max-steps $steps
        --val-every 0 --sample-every 0 --lr 1e-3 --warmup-steps 5 --weight-decay 0.1 --threads 2
        --train-data data/tinyshakespeare/tiny_shakespeare_train.bin)
# "step loss" of every complete train line of a JSONL log (a killed run may leave half a line).
losses() { [ -e "$1" ] || return 0; grep '"type":"train"' "$1" | grep '}$' | sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/' || true; }
# Every logged loss must equal the uninterrupted run's at the same step.
check_losses() {
  local bad
  bad=$(awk 'NR == FNR { ref[$1] = $2; next } !($1 in ref) || ref[$1] "" != $2 ""' "$work/ref.txt" <(losses "$1"))
  [ -z "$bad" ] || fail "$2: losses differ from the uninterrupted run: $bad"
}

# ---- the uninterrupted reference (checkpoints every 5 steps, all kept) ----------
"$bin" "${common[@]}" --output-dir "$work/ref" --checkpoint-every 5 --log-jsonl "$work/ref.jsonl" \
  > "$work/ref.log" 2>&1 || { cat "$work/ref.log"; fail "reference run failed"; }
losses "$work/ref.jsonl" > "$work/ref.txt"
[ "$(wc -l < "$work/ref.txt")" -eq $steps ] || fail "reference run logged $(wc -l < "$work/ref.txt") steps"
[ ! -e "$work/ref/.lock" ] || fail "a finished run left its lock file behind"
last=$(printf 'DONE_%08d' $steps)
grep -q '^file model_' "$work/ref/$last" ||
  fail "$last has no checksums: are the trainer hooks integrated (train/trainer.cpp)?"$'\n'"$(cat "$work/ref/$last")"
echo "reference: $steps steps; $last records $(grep -c '^file ' "$work/ref/$last") files with checksums"

# ---- 1. a flipped byte in each kind of file ----------------------------------------
prev=$((steps - 5))
flip() {  # flips one bit of the byte in the middle of $1
  local size off byte
  size=$(stat -c %s "$1")
  off=$((size / 2))
  byte=$(od -An -tu1 -j "$off" -N1 "$1" | tr -d ' ')
  printf '%b' "\\0$(printf '%03o' $((byte ^ 1)))" | dd of="$1" bs=1 seek="$off" conv=notrunc status=none
}
for name in "$(printf 'model_%08d.bin' $steps)" "$(printf 'state_%08d_00000.bin' $steps)" "$last"; do
  dir="$work/flip_$name"
  cp -r "$work/ref" "$dir"
  flip "$dir/$name"
  if "$bin" "${common[@]}" --output-dir "$dir" --resume > "$work/refuse.log" 2>&1; then
    fail "--resume accepted a checkpoint with a flipped byte in $name"
  fi
  grep -q "checkpoint step $steps in $dir is corrupt: $name" "$work/refuse.log" ||
    { cat "$work/refuse.log"; fail "the refusal does not name $name"; }
  grep -q "previous complete checkpoint that verifies is step $prev: rerun with --resume-fallback" "$work/refuse.log" ||
    { cat "$work/refuse.log"; fail "the refusal does not offer step $prev"; }
  echo "flipped byte in $name: $(grep -o 'error: .*' "$work/refuse.log" | cut -c1-160)..."
  "$bin" "${common[@]}" --output-dir "$dir" --resume-fallback --log-jsonl "$work/fallback.jsonl" \
    > "$work/fallback.log" 2>&1 || { cat "$work/fallback.log"; fail "--resume-fallback failed ($name)"; }
  grep -q "^WARNING: checkpoint step $steps in $dir is corrupt: $name" "$work/fallback.log" ||
    { cat "$work/fallback.log"; fail "no warning on fallback ($name)"; }
  grep -q "at step $prev " "$work/fallback.log" || { cat "$work/fallback.log"; fail "fallback did not resume at $prev"; }
  [ "$(losses "$work/fallback.jsonl" | wc -l)" -eq 5 ] || fail "fallback run ($name) did not train steps $((prev + 1))..$steps"
  check_losses "$work/fallback.jsonl" "fallback ($name)"
  cmp -s "$dir/model.bin" "$work/ref/model.bin" || fail "fallback ($name): final weights differ"
  rm -f "$work/fallback.jsonl"
  echo "  --resume-fallback: resumed at step $prev, losses and final weights bitwise identical"
done

# ---- 2. two runs on one directory ---------------------------------------------------
start_long() {  # start_long [ARGS...]: a long run on $work/shared (a later one continues it: --resume)
  "$bin" "${common[@]}" --max-steps 100000 --output-dir "$work/shared" "$@" > "$work/first.log" 2>&1 &
  pid=$!
  for _ in $(seq 3000); do grep -q "pid=$pid" "$work/shared/.lock" 2>/dev/null && return; sleep 0.01; done
  cat "$work/first.log"
  fail "the first run did not take the lock"
}
start_long
host=$(hostname)
if "$bin" "${common[@]}" --output-dir "$work/shared" > "$work/second.log" 2>&1; then fail "a second run on the directory started"; fi
grep -q -- "--output-dir $work/shared is in use by PID $pid on host $host" "$work/second.log" ||
  { cat "$work/second.log"; fail "the second run's error does not name PID $pid on host $host"; }
echo "second run refused: $(grep -o 'error: .*' "$work/second.log" | cut -c1-200)"
kill -TERM "$pid"
rc=0
wait "$pid" || rc=$?
pid=""
[ "$rc" -eq 75 ] || fail "SIGTERM: exit status $rc, expected 75"
[ ! -e "$work/shared/.lock" ] || fail "a run stopped by SIGTERM left its lock behind"
echo "SIGTERM: exit 75, lock released"
start_long --resume  # the requeued job
kill -9 "$pid"
wait "$pid" 2>/dev/null || true
stale=$pid
pid=""
[ -e "$work/shared/.lock" ] || fail "kill -9 should leave the lock file behind"
# (to the step the SIGTERM checkpointed: resuming past --max-steps is an error, at it nothing is trained)
at=$(ls "$work/shared" | sed -nE 's/^DONE_0*([0-9]+)$/\1/p' | sort -n | tail -1)
"$bin" "${common[@]}" --max-steps $(( ${at:-0} > 0 ? at : 1 )) --resume --output-dir "$work/shared" > "$work/third.log" 2>&1 ||
  { cat "$work/third.log"; fail "the stale lock of a killed run was not taken over"; }
grep -q "WARNING: taking over the stale lock .* of PID $stale on host $host" "$work/third.log" ||
  { cat "$work/third.log"; fail "no stale-lock warning"; }
[ ! -e "$work/shared/.lock" ] || fail "the lock was not released"
echo "stale lock of killed PID $stale taken over with a warning"

# ---- 3. kill -9 during checkpoint writes, in a loop, then resume --------------------
seed=${CKPT_TEST_SEED:-$$}
RANDOM=$seed
loop="$work/loop"
mkdir -p "$loop"
newest_step() {  # 0 when there is none
  { echo 0; find "$loop" -name 'DONE_*' | sed -nE 's/.*DONE_0*([0-9]+)$/\1/p'; } | sort -n | tail -1
}
# Polls (10 ms) until the condition $1 holds or the trainer $pid has exited.
poll() { for _ in $(seq 6000); do eval "$1" && return 0; kill -0 "$pid" 2>/dev/null || return 1; sleep 0.01; done; return 1; }
echo "kill loop (CKPT_TEST_SEED=$seed)"
kills=0
for i in $(seq 10); do
  base=$(newest_step)
  let_complete=$((RANDOM % 2))  # checkpoints this run may finish before the one it is killed in
  "$bin" "${common[@]}" --output-dir "$loop" --checkpoint-every 1 --keep-checkpoints 3 --resume \
    --log-jsonl "$work/loop_$i.jsonl" > "$work/loop_$i.log" 2>&1 &
  pid=$!
  poll '[[ "$(readlink "/proc/$pid/exe")" == *train_gpt2cu ]]' || fail "PID $pid is not the trainer process"
  poll '[ "$(newest_step)" -ge $((base + let_complete)) ]' || true
  touch "$work/started"  # temp files of earlier kills are older than this
  # Until a checkpoint file is being written (PATH.tmp), then a random 0-250 ms.
  poll '[ -n "$(find "$loop" -name "*.tmp" -newer "$work/started")" ]' || true
  delay=$((RANDOM % 250))
  sleep "$(printf '0.%03d' $delay)"
  writing=$(cd "$loop" && find . -name '*.tmp' -newer "$work/started" | tr '\n' ' ')
  if ! kill -9 "$pid" 2>/dev/null; then
    wait "$pid" || { cat "$work/loop_$i.log"; fail "iteration $i: the trainer failed"; }
    pid=""
    echo "  run $i finished training before its kill (a fast machine): the loop ends"
    break
  fi
  wait "$pid" 2>/dev/null || true
  pid=""
  kills=$((kills + 1))
  check_losses "$work/loop_$i.jsonl" "kill-loop iteration $i"
  echo "  kill $i: +${delay} ms after a write began (${writing:-its temp file already renamed}); newest complete step $(newest_step)"
done
[ "$kills" -ge 3 ] || fail "only $kills kills landed before the run finished"
"$bin" "${common[@]}" --output-dir "$loop" --checkpoint-every 10 --resume --log-jsonl "$work/final.jsonl" \
  > "$work/final.log" 2>&1 || { cat "$work/final.log"; fail "--resume after the kill loop failed"; }
resumed=$(grep -o 'at step [0-9]*' "$work/final.log" | head -1 | awk '{print $3}')
grep -q "checksums verified" "$work/final.log" || { cat "$work/final.log"; fail "resume did not verify checksums"; }
check_losses "$work/final.jsonl" "resume after the kill loop"
[ "$(losses "$work/final.jsonl" | wc -l)" -eq $((steps - ${resumed:-0})) ] || fail "the final run skipped steps"
cmp -s "$loop/model.bin" "$work/ref/model.bin" || fail "final weights after the kill loop differ"
[ ! -e "$loop/.lock" ] || fail "lock left behind"
echo "after $kills kills: resumed at step ${resumed:-0}, every logged loss and the final weights bitwise identical"
