#!/usr/bin/env bash
# test-timeout: 600
# Evaluation-driven checkpoints, early stopping, --epochs and --resume-from,
# on the CPU backend, with a tiny GPT-2 that overfits 10k tokens of tinyshakespeare (constant lr 1e-2):
#   a. --keep-best --keep-checkpoints 1 --early-stopping-patience 3: the run stops where HF's
#      EarlyStoppingCallback rule says for its logged val losses, keeps exactly the best and the last
#      checkpoint, names the best at the end, and model.bin and --save-hf hold the best's weights;
#   b. the same run killed after an evaluation that did not improve, then --resume: it stops at the
#      same step with the same best, every loss and the final weights bit for bit (the best loss and
#      the patience count came back from the checkpoint);
#   c. --resume-from a named older checkpoint (its marker, or a file of it, into another
#      --output-dir): the same continuation bit for bit, later checkpoints abandoned; incomplete,
#      corrupt and missing checkpoints refused by name;
#   d. --epochs 1.5: ceil(1.5 x steps/epoch) steps, said by the banner, the schedule spanning them;
#      --max-steps overrides it;
#   e. usage errors exit 2 naming the flag;
#   f. 2 ranks (mpirun): the early-stopping decision is the same on both, the run ends cleanly.
set -u
cd "$(dirname "$0")/../.."
. test/e2e/prologue.sh eval_checkpoints ./prepare_data ./train_gpt2cu ./gpt2_convert
need_text
RUN=(timeout -k 10 200 ./train_gpt2cu)

head -c 40000 "$TXT" > "$W/text.txt"
./prepare_data --progress none --out-prefix "$W/d" --val-tokens 2000 "$W/text.txt" > /dev/null 2>&1 ||
  { echo "FAIL: prepare_data"; exit 1; }
common=(--device cpu --model d2 --config n_embd=64,n_head=2,max_seq=64 -T 64 -B 4 --threads 1 --seed 7
        --lr 1e-2 --lr-schedule constant --max-steps 80 --val-every 4 --val-steps 4 --sample-every 0
        --train-data "$W/d_train_*.bin" --val-data "$W/d_val_*.bin")
best_flags=(--keep-best --keep-checkpoints 1 --checkpoint-every 4 --early-stopping-patience 3)
have_mpi=$(command -v mpirun)

# The runs of d and f depend on no other part: they run in the background, beside a-c (one thread
# each), and are checked in their sections.
independent_runs() {
  "${RUN[@]}" "${common[@]}" --max-steps -1 --val-every 0 --lr-schedule cosine --epochs 1.5 --log-jsonl "$W/d.jsonl" \
    > "$W/d.log" 2>&1
  echo $? > "$W/d.rc"
  "${RUN[@]}" "${common[@]}" --max-steps 3 --val-every 0 --epochs 1.5 --log-jsonl "$W/d2.jsonl" > "$W/d2.log" 2>&1
  [ -n "$have_mpi" ] || return 0
  timeout -k 10 300 mpirun --allow-run-as-root --oversubscribe -np 2 ./train_gpt2cu "${common[@]}" -B 2 \
    "${best_flags[@]}" -o "$W/f" --log-jsonl "$W/f.jsonl" > "$W/f.log" 2>&1
  echo $? > "$W/f.rc"
}
independent_runs &
independent_pid=$!
# on an early exit: stop them (timeout and mpirun pass the TERM on)
on_exit() { [ -n "$independent_pid" ] && { pkill -TERM -P "$independent_pid"; kill "$independent_pid"; } 2> /dev/null; }

# the "step loss" (train) and "step val_loss" (val) records of a JSONL log
train_losses() { grep '"type":"train"' "$1" | sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/'; }
val_losses() { grep '"type":"val"' "$1" | sed -E 's/.*"step":([0-9]+),"val_loss":([^,]+),.*/\1 \2/'; }
# HF's EarlyStoppingCallback(patience) over the val losses of a log: "STOP BEST" (STOP 0: never stopped)
hf_decision() {
  val_losses "$1" | /usr/bin/env python3 -c '
import sys
patience, best, best_step, bad = int(sys.argv[1]), None, None, 0
for line in sys.stdin:
    step, loss = int(line.split()[0]), float(line.split()[1])
    if best is None or loss < best:
        best, best_step, bad = loss, step, 0
    else:
        bad += 1
    if bad >= patience:
        print(step, best_step); sys.exit()
print(0, best_step)' "$2"
}
steps_of() { ls "$1" | sed -n 's/^DONE_0*\([0-9][0-9]*\)$/\1/p' | sort -n | tr '\n' ' ' | sed 's/ $//'; }
same_file() { cmp -s "$1" "$2"; }

# a ----------------------------------------------------------------------------------------------
"${RUN[@]}" "${common[@]}" "${best_flags[@]}" -o "$W/a" --save-hf "$W/a_hf" --log-jsonl "$W/a.jsonl" \
  > "$W/a.log" 2>&1 || { tail -5 "$W/a.log"; echo "FAIL a: the reference run failed"; exit 1; }
read -r stop best <<< "$(hf_decision "$W/a.jsonl" 3)"
echo "     a: val losses $(val_losses "$W/a.jsonl" | awk '{printf "%s:%.4f ", $1, $2}')"
if [ "$stop" -gt 0 ] && [ "$best" -lt "$stop" ] && [ "$stop" -lt 80 ]; then
  pass "a: HF's rule on the logged val losses: best step $best, stop at step $stop"
else
  echo "FAIL a: this data no longer overfits in 80 steps (stop '$stop', best '$best'): the test needs new settings"
  exit 1
fi
n_train=$(train_losses "$W/a.jsonl" | wc -l)
grep -q "^early stopping at step $stop: 3 evaluation(s) in a row without beating the best by more than 0 " "$W/a.log" &&
  [ "$n_train" = "$stop" ] && pass "a: early stopping at step $stop after $n_train steps" ||
  bad "a: no early stop at $stop ($n_train train steps): $(grep -m1 'early stop' "$W/a.log")"
[ "$(steps_of "$W/a")" = "$best $stop" ] && pass "a: checkpoints kept: $(steps_of "$W/a") (the best and the last)" ||
  bad "a: checkpoints kept: '$(steps_of "$W/a")', want '$best $stop'"
bestfile=$(printf "%s/a/model_%08d.bin" "$W" "$best")
grep -q "^best checkpoint: $bestfile, val loss [0-9.]* at step $best; the final model files hold its weights" "$W/a.log" &&
  pass "a: $(grep -m1 '^best checkpoint' "$W/a.log" | sed "s|$W/||")" || bad "a: no 'best checkpoint' line for step $best"
./gpt2_convert "$bestfile" "$W/best_hf" > /dev/null 2>&1
if same_file "$W/a/model.bin" "$bestfile" && same_file "$W/a_hf/model.safetensors" "$W/best_hf/model.safetensors" &&
   ! same_file "$W/a/model.bin" "$(printf "%s/a/model_%08d.bin" "$W" "$stop")"; then
  pass "a: model.bin and --save-hf hold the weights of step $best, not those of step $stop"
else
  bad "a: model.bin or the --save-hf directory is not the best checkpoint's"
fi

# b ----------------------------------------------------------------------------------------------
# The checkpoint at best+8 is written before that step's evaluation: it holds the best and a patience
# count of 1 (the evaluation at best+4). The run is killed right after it.
cut=$((best + 8))
GPT2_TEST_EXIT_RANK=0 GPT2_TEST_EXIT_AT_STEP=$((cut + 1)) "${RUN[@]}" "${common[@]}" "${best_flags[@]}" -o "$W/b" \
  --log-jsonl "$W/b1.jsonl" > "$W/b1.log" 2>&1
[ "$(steps_of "$W/b")" = "$best $cut" ] || bad "b: the killed run left checkpoints '$(steps_of "$W/b")', want '$best $cut'"
cp -r "$W/b" "$W/c_src"
"${RUN[@]}" "${common[@]}" "${best_flags[@]}" -o "$W/b" --resume --log-jsonl "$W/b2.jsonl" > "$W/b2.log" 2>&1 ||
  bad "b: resume failed: $(tail -2 "$W/b2.log")"
grep -q "at step $cut (written by 1 rank(s)); best so far: val loss [0-9.]* at step $best, patience count 1$" "$W/b2.log" &&
  pass "b: $(grep -m1 '^resumed from' "$W/b2.log" | sed "s|$W/||")" || bad "b: resume line: $(grep -m1 'resumed' "$W/b2.log")"

if diff <(train_losses "$W/a.jsonl" | awk -v c="$cut" '$1 > c') <(train_losses "$W/b2.jsonl") > /dev/null &&
   grep -q "^early stopping at step $stop:" "$W/b2.log" && same_file "$W/a/model.bin" "$W/b/model.bin" &&
   [ "$(steps_of "$W/b")" = "$best $stop" ]; then
  pass "b: resumed at $cut, stopped at $stop with best $best: losses and final weights bit for bit"
else
  bad "b: resumed run: stop '$(grep -m1 -o 'early stopping at step [0-9]*' "$W/b2.log")' (want $stop), checkpoints" \
      "'$(steps_of "$W/b")', losses $(diff <(train_losses "$W/a.jsonl" | awk -v c="$cut" '$1 > c') \
      <(train_losses "$W/b2.jsonl") > /dev/null && echo same || echo differ)"
fi

# c ----------------------------------------------------------------------------------------------
cp -r "$W/c_src" "$W/c_other_src"
marker=$(printf "%s/c_src/DONE_%08d" "$W" "$best")
# a resume refused at plan time (another micro-batch size) abandons nothing
"${RUN[@]}" "${common[@]}" "${best_flags[@]}" -B 2 --resume-from "$marker" > "$W/c0.log" 2>&1
if [ $? = 1 ] && grep -q "was written with B=4" "$W/c0.log" && [ "$(steps_of "$W/c_src")" = "$best $cut" ]; then
  pass "c: a refused --resume-from (-B 2) leaves the later checkpoint $cut in place"
else
  bad "c: refused resume: $(grep -m1 error "$W/c0.log"); checkpoints '$(steps_of "$W/c_src")'"
fi
"${RUN[@]}" "${common[@]}" "${best_flags[@]}" --resume-from "$marker" --log-jsonl "$W/c.jsonl" > "$W/c.log" 2>&1 ||
  bad "c: --resume-from failed: $(tail -2 "$W/c.log")"
if grep -q "resumed from $W/c_src/model_$(printf %08d "$best").bin at step $best " "$W/c.log" &&
   [ -f "$(printf "%s/c_src/DONE_%08d.abandoned" "$W" "$cut")" ] &&
   diff <(train_losses "$W/a.jsonl" | awk -v b="$best" '$1 > b') <(train_losses "$W/c.jsonl") > /dev/null &&
   same_file "$W/a/model.bin" "$W/c_src/model.bin" && [ "$(steps_of "$W/c_src")" = "$best $stop" ]; then
  pass "c: --resume-from DONE_$best in its own directory: step $cut abandoned, losses and best weights bit for bit"
else
  bad "c: --resume-from $marker: $(grep -m1 -E 'resumed|error' "$W/c.log"); checkpoints '$(steps_of "$W/c_src")'"
fi
model_b=$(printf "%s/c_other_src/model_%08d.bin" "$W" "$best")
"${RUN[@]}" "${common[@]}" "${best_flags[@]}" --resume "$model_b" -o "$W/c_other" --log-jsonl "$W/c2.jsonl" \
  > "$W/c2.log" 2>&1 || bad "c: --resume MODEL_FILE -o OTHER failed: $(tail -2 "$W/c2.log")"
# (the checkpoint of step $best was written before that step's evaluation: the resumed run counts
# it, finds the best, and writes the best checkpoint into its own directory)
if same_file "$W/a/model.bin" "$W/c_other/model.bin" && [ "$(steps_of "$W/c_other_src")" = "$best $cut" ] &&
   grep -q "^best checkpoint: $(printf "%s/c_other/model_%08d.bin" "$W" "$best")," "$W/c2.log" &&
   [ "$(steps_of "$W/c_other")" = "$best $stop" ]; then
  pass "c: --resume model_$best.bin -o another dir: the same best weights, the source untouched"
else
  bad "c: into another directory: source '$(steps_of "$W/c_other_src")', $(grep -m1 'best checkpoint' "$W/c2.log")"
fi
# refusals, by name
expect_error() {  # NAME RC PATTERN -- COMMAND...
  local name=$1 want=$2 pattern=$3 rc; shift 4
  "$@" > "$W/err.log" 2>&1; rc=$?
  if [ "$rc" = "$want" ] && grep -q -- "$pattern" "$W/err.log"; then pass "$name: exit $rc, $(grep -m1 'error' "$W/err.log" | sed "s|$W/||g" | cut -c1-150)"
  else bad "$name: exit $rc (want $want), $(grep -m1 'error' "$W/err.log")"; fi
}
cp -r "$W/c_other_src" "$W/c_bad"
rm "$(printf "%s/c_bad/DONE_%08d" "$W" "$cut")"
expect_error "c: incomplete" 1 "checkpoint step $cut in $W/c_bad is incomplete: it has no completion marker" -- \
  "${RUN[@]}" "${common[@]}" --resume-from "$(printf "%s/c_bad/model_%08d.bin" "$W" "$cut")"
printf 'X' | dd of="$(printf "%s/c_bad/state_%08d_00000.bin" "$W" "$best")" bs=1 seek=300 conv=notrunc 2>/dev/null
expect_error "c: corrupt" 1 "checkpoint step $best in $W/c_bad is corrupt: state_$(printf %08d "$best")_00000.bin checksum mismatch" -- \
  "${RUN[@]}" "${common[@]}" --resume-from "$(printf "%s/c_bad/DONE_%08d" "$W" "$best")"
expect_error "c: missing" 1 "checkpoint step 3 in $W/c_bad does not exist" -- \
  "${RUN[@]}" "${common[@]}" --resume-from "$W/c_bad/DONE_00000003"
expect_error "c: not a checkpoint" 2 "--resume-from $W/c_bad/model.bin: not a checkpoint" -- \
  "${RUN[@]}" "${common[@]}" --resume-from "$W/c_bad/model.bin"

# d ----------------------------------------------------------------------------------------------
wait "$independent_pid"  # the runs of d and f, in the background since the start
independent_pid=
[ "$(cat "$W/d.rc")" = 0 ] || bad "d: --epochs 1.5 failed: $(tail -2 "$W/d.log")"
per_epoch=$(grep -m1 '^| data ' "$W/d.log" | grep -o '[0-9]* steps/epoch' | head -1 | cut -d' ' -f1)
want=$(( (per_epoch * 3 + 1) / 2 ))
if [ -n "$per_epoch" ] && grep -q "steps/epoch; training $want steps: --epochs 1.5 = ceil(1.5 x $per_epoch steps/epoch)$" "$W/d.log" &&
   [ "$(train_losses "$W/d.jsonl" | wc -l)" = "$want" ] &&
   grep -qE "^\| lr schedule +cosine, peak lr 0.01, warmup 0, $want steps" "$W/d.log"; then
  pass "d: $(grep -m1 -o 'training [0-9]* steps: .*' "$W/d.log"), $want steps logged, the schedule spans them"
else
  bad "d: $(grep -m1 'steps/epoch' "$W/d.log"); $(train_losses "$W/d.jsonl" | wc -l) steps logged (want $want)"
fi
grep -q "training 3 steps: --max-steps 3 (overrides --epochs 1.5, as HF's max_steps overrides num_train_epochs)" "$W/d2.log" &&
  [ "$(train_losses "$W/d2.jsonl" | wc -l)" = 3 ] && pass "d: --max-steps 3 overrides --epochs 1.5, said in the banner" ||
  bad "d: $(grep -m1 'steps/epoch' "$W/d2.log")"

# e ----------------------------------------------------------------------------------------------
expect_error "e: --keep-best without --output-dir" 2 "--keep-best needs --output-dir" -- "${RUN[@]}" "${common[@]}" --keep-best
expect_error "e: --keep-best without validation" 2 "--keep-best needs validation: --val-every is 0" -- \
  "${RUN[@]}" "${common[@]}" --keep-best -o "$W/e" --val-every 0
expect_error "e: --epochs 0" 2 "--epochs: invalid value '0'" -- "${RUN[@]}" "${common[@]}" --epochs 0
expect_error "e: threshold alone" 2 "--early-stopping-threshold needs --early-stopping-patience" -- \
  "${RUN[@]}" "${common[@]}" --early-stopping-threshold 0.1
expect_error "e: --resume-from with --resume-fallback" 2 "--resume-fallback replaces a corrupt newest" -- \
  "${RUN[@]}" "${common[@]}" --resume-from "$marker" --resume-fallback

# f ----------------------------------------------------------------------------------------------
if [ -n "$have_mpi" ]; then
  rc=$(cat "$W/f.rc")
  read -r stop_f best_f <<< "$(hf_decision "$W/f.jsonl" 3)"
  if [ "$rc" = 0 ] && [ "$stop_f" -gt 0 ] && grep -q "^early stopping at step $stop_f:" "$W/f.log" &&
     [ "$(steps_of "$W/f")" = "$best_f $stop_f" ] &&
     [ -f "$(printf "%s/f/state_%08d_00001.bin" "$W" "$stop_f")" ]; then
    pass "f: 2 ranks stopped together at step $stop_f (best $best_f), exit 0, both ranks' state files written"
  else
    bad "f: 2 ranks: exit $rc, stop '$stop_f', checkpoints '$(steps_of "$W/f")': $(grep -m1 -i 'error' "$W/f.log")"
  fi
else
  echo "SKIP f: mpirun not found"; skipped+=" f"
fi

# A part that could not run makes the whole a counted skip (77), not a pass.
finish eval_checkpoints_test
