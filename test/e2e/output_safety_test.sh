#!/usr/bin/env bash
# What a run does with its output directory, its output files and non-finite
# numbers, on the CPU backend:
#   1. a fresh run into a directory holding another run's checkpoints is refused
#      at start, naming them and --resume / --overwrite-output-dir, and leaves
#      them untouched; --overwrite-output-dir deletes them and starts anew
#      (pruning keeps the checkpoint just written), and --resume then continues
#      the new run; --overwrite-output-dir with --resume is a usage error;
#   3. --adam-eps 0 (a zero second moment divides by zero) is refused; initial
#      weights holding a NaN are refused naming the file; --on-nan skip stops
#      with an error after --max-nan-skips consecutive skipped steps, keeping
#      the last checkpoint, instead of skipping forever;
#   5. --eval-json - goes to standard output, /dev/full stays a device and its
#      failed write is an error;
#   6. an unusable --save-hf or --eval-json is an error at start, not after the
#      training or the evaluation.
set -u
cd "$(dirname "$0")/../.."
BIN=${TRAINER:-./train_gpt2cu}  # any trainer binary with the CPU backend
. test/e2e/prologue.sh output_safety "$BIN"
ONE=(timeout -k 10 120)

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 512
common=(--device cpu -B 2 -T 32 --lr 1e-3 --threads 1 --val-every 0 --sample-every 0 --no-shuffle
        --train-data "$W/train.bin")
preset=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=512,padded_vocab_size=512)
train() { "${ONE[@]}" "$BIN" "${common[@]}" "${preset[@]}" "$@"; }
train_file() { "${ONE[@]}" "$BIN" "${common[@]}" "$@"; }  # with --model FILE
evaluate() { "${ONE[@]}" "$BIN" --device cpu -B 2 -T 32 --threads 1 --eval-only "$@"; }  # without training's flags
steps_in() { ls "$1" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tr '\n' ' '; }

# --- 1. an output directory belongs to one run ----------------------------------------------
train --max-steps 6 --checkpoint-every 3 -o "$W/run" >"$W/a.log" 2>&1 || { bad "the first run"; tail "$W/a.log"; }
[ "$(steps_in "$W/run")" = "3 6 " ] || bad "the first run's checkpoints: $(steps_in "$W/run")"
train --max-steps 4 --checkpoint-every 2 -o "$W/run" >"$W/b.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "holds 2 checkpoint(s) of another run (steps 3, 6)" "$W/b.log" &&
   grep -q -- "--resume continues that run, --overwrite-output-dir deletes them" "$W/b.log" &&
   [ "$(steps_in "$W/run")" = "3 6 " ] && ! grep -q "checkpoint step" "$W/b.log"; then
  pass "a fresh run into another run's checkpoints is refused (exit $rc), naming them; they are untouched"
else bad "a fresh run into a used --output-dir: exit $rc, checkpoints $(steps_in "$W/run")"; tail -n 3 "$W/b.log"; fi

train --max-steps 2 --checkpoint-every 1 --keep-checkpoints 1 --overwrite-output-dir -o "$W/run" >"$W/c.log" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(steps_in "$W/run")" = "2 " ] && grep -q "removed the checkpoints of steps 3, 6" "$W/c.log" &&
   [ ! -e "$W/run/model_00000006.bin" ] && [ ! -e "$W/run/state_00000003_00000.bin" ]; then
  pass "--overwrite-output-dir: the old run's checkpoints deleted, the new run's step 2 kept by pruning"
else bad "--overwrite-output-dir: exit $rc, checkpoints $(steps_in "$W/run")"; tail -n 3 "$W/c.log"; fi
train --max-steps 3 --resume -o "$W/run" >"$W/d.log" 2>&1
if [ $? -eq 0 ] && grep -q "resumed from .*model_00000002.bin at step 2" "$W/d.log"; then
  pass "--resume continues the new run at its step 2"
else bad "--resume after --overwrite-output-dir"; tail -n 3 "$W/d.log"; fi
train --max-steps 3 --resume --overwrite-output-dir -o "$W/run" >"$W/e.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--overwrite-output-dir deletes the checkpoints that --resume continues" "$W/e.log"; then
  pass "--overwrite-output-dir with --resume: usage error (exit 2)"
else bad "--overwrite-output-dir --resume: exit $rc"; tail -n 3 "$W/e.log"; fi

# --- 3. non-finite numbers never become weights or checkpoints ------------------------------
train --max-steps 2 --adam-eps 0 >"$W/f.log" 2>&1
rc=$?
if [ $rc -eq 2 ] && grep -q -- "--adam-eps" "$W/f.log" && grep -q "(0, 1\]" "$W/f.log"; then
  pass "--adam-eps 0 refused (exit 2)"
else bad "--adam-eps 0: exit $rc"; tail -n 3 "$W/f.log"; fi
# scale FILE OUT X: the llm.c model file FILE with every parameter set to X (a float, nan allowed)
scale() {
  /usr/bin/env python3 - "$1" "$2" "$3" <<'PY'
import struct, sys
data = bytearray(open(sys.argv[1], "rb").read())
n = (len(data) - 1024) // 4
data[1024:] = struct.pack("<%df" % n, *([float(sys.argv[3])] * n))
open(sys.argv[2], "wb").write(bytes(data))
PY
}
scale "$W/run/model_00000002.bin" "$W/nan.bin" nan
train_file --max-steps 2 --model "$W/nan.bin" >"$W/g.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "nan.bin: the initial weights: .* non-finite value(s), the first at index 0" "$W/g.log"; then
  pass "initial weights with NaN refused, naming the file (exit $rc)"
else bad "NaN initial weights: exit $rc"; tail -n 3 "$W/g.log"; fi
# finite weights of 1e38: every loss overflows, so every step is skipped
scale "$W/run/model_00000002.bin" "$W/huge.bin" 1e38
train_file --max-steps 20 --model "$W/huge.bin" --on-nan skip --max-nan-skips 3 --checkpoint-every 1 -o "$W/skip" \
  >"$W/h.log" 2>&1
rc=$?
if [ $rc -ne 0 ] && grep -q "in 3 consecutive steps, the last step 3 (--on-nan skip, --max-nan-skips 3" "$W/h.log" &&
   [ "$(steps_in "$W/skip")" = "1 2 " ]; then
  pass "--on-nan skip stops after 3 consecutive skips (exit $rc), checkpoints 1 and 2 kept"
else bad "--on-nan skip limit: exit $rc, checkpoints $(steps_in "$W/skip")"; tail -n 3 "$W/h.log"; fi

# --- 5, 6. outputs: checked at start, special files written in place -------------------------
echo x >"$W/file"
train --max-steps 2 --save-hf "$W/file/hf" >"$W/i.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q -- "--save-hf $W/file/hf: " "$W/i.log" && ! grep -q "^step " "$W/i.log"; then
  pass "an unusable --save-hf is an error before the first step"
else bad "--save-hf under a file: exit $rc"; tail -n 3 "$W/i.log"; fi
model="$W/run/model_00000003.bin"
evaluate --model "$model" --eval-json "$W/no/r.json" >"$W/j.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q -- "--eval-json $W/no/r.json: directory $W/no does not exist" "$W/j.log" &&
   ! grep -q "^eval: " "$W/j.log"; then
  pass "an unusable --eval-json is an error before the evaluation"
else bad "--eval-json in a missing directory: exit $rc"; tail -n 3 "$W/j.log"; fi
evaluate --model "$model" --val-data "$W/train.bin" --eval-json - >"$W/k.json" 2>"$W/k.log"
if [ $? -eq 0 ] && /usr/bin/env python3 -c 'import json,sys; json.loads(open(sys.argv[1]).read()[open(sys.argv[1]).read().index("{"):])' "$W/k.json"; then
  pass "--eval-json - writes the JSON to standard output"
else bad "--eval-json -"; tail -n 3 "$W/k.log"; fi
evaluate --model "$model" --val-data "$W/train.bin" --eval-json /dev/full >"$W/l.log" 2>&1
rc=$?
if [ $rc -eq 1 ] && grep -q "/dev/full: write failed" "$W/l.log" && [ -c /dev/full ]; then
  pass "--eval-json /dev/full: the failed write is an error (exit 1), the device stays a device"
else bad "--eval-json /dev/full: exit $rc, $(ls -l /dev/full)"; tail -n 3 "$W/l.log"; fi

# a directory where access() passes for root but no file can be created: refused at start too
if [ "$(id -u)" = 0 ]; then
  train --max-steps 2 --save-hf /proc >"$W/n.log" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q -- "--save-hf /proc: cannot create a file in directory /proc" "$W/n.log" &&
     ! grep -q "^step " "$W/n.log"; then
    pass "--save-hf /proc (root): an error before the first step"
  else bad "--save-hf /proc: exit $rc"; tail -n 3 "$W/n.log"; fi
fi
# stdout redirected to a regular file: /dev/stdout and a link to /proc/self/fd/1 are that
# stream, written through it (what it already holds stays; no rename onto the file)
ln -s /proc/self/fd/1 "$W/stdout_link"
for target in /dev/stdout "$W/stdout_link"; do
  echo "line before" >"$W/m.out"
  ino=$(stat -c %i "$W/m.out")
  evaluate --model "$model" --val-data "$W/train.bin" --eval-json "$target" >>"$W/m.out" 2>"$W/m.log"
  rc=$?
  if [ $rc -eq 0 ] && [ "$(head -n 1 "$W/m.out")" = "line before" ] && [ "$(stat -c %i "$W/m.out")" = "$ino" ] &&
     grep -q '"loss"' "$W/m.out" && [ -L "$W/stdout_link" ]; then
    pass "--eval-json $target with stdout in a file: written through stdout, the file's earlier lines kept"
  else bad "--eval-json $target into redirected stdout: exit $rc, $(head -n 2 "$W/m.out")"; tail -n 3 "$W/m.log"; fi
done

finish output_safety_test
