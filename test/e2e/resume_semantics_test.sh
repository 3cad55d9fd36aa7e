#!/usr/bin/env bash
# Resume semantics and --init-from, on the CPU backend:
#   a. a 20-step cosine run resumed with --max-steps 40 keeps the original
#      schedule (step 21's lr = step 20's, the final lr; no jump back up);
#      with --reset-schedule step 21 follows the new 40-step schedule;
#   b. a 2-rank run without --total-batch-tokens resumed at 1 rank: accepted with
#      grad_accum 2 (the checkpoint's global batch) and the same losses as the
#      uninterrupted 2-rank run; a -B that does not divide it is a clear error;
#   c. --max-steps 0 is refused;
#   d. --init-from a checkpoint directory, an llm.c file and a Hugging Face
#      directory trains exactly like --model on the same weights (fresh moments,
#      schedule and data position); with --resume a checkpoint in --output-dir wins.
set -u
cd "$(dirname "$0")/../.."
. test/e2e/prologue.sh resume_semantics ./train_gpt2cu
ONE=(timeout -k 10 120)
MPIRUN=(timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe)

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 40000 512
[ -s "$W/train.bin" ] || { echo "FAIL: could not write the synthetic shard"; exit 1; }
common=(--device cpu --model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=512,padded_vocab_size=512
        -B 4 -T 32 --lr 1e-3 --warmup-steps 2 --weight-decay 0.1 --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin")
. test/distributed/compare_lib.sh  # losses, same_losses, same_weights

# lr_of JSONL STEP: the lr logged for STEP
lr_of() { grep '"type":"train"' "$1" | grep "\"step\":$2," | sed -E 's/.*"lr":([^,]+),.*/\1/'; }
# close A B: |A - B| <= 1e-5 * |B| (the log prints the lr with 6 digits)
close() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; m = b < 0 ? -b : b; exit !(a != "" && d <= 1e-5 * m) }'; }

# --- a. extending --max-steps keeps the schedule -----------------------------------------
"${ONE[@]}" ./train_gpt2cu "${common[@]}" --max-steps 20 --output-dir "$W/a" --save-hf "$W/a_hf" \
  --log-jsonl "$W/a.jsonl" >"$W/a.log" 2>&1 || { bad "a: 20-step run"; tail "$W/a.log"; exit 1; }
cp -r "$W/a" "$W/a_reset"
cp -r "$W/a" "$W/a0"
"${ONE[@]}" ./train_gpt2cu "${common[@]}" --max-steps 40 --output-dir "$W/a" --resume \
  --log-jsonl "$W/a2.jsonl" >"$W/a2.log" 2>&1 || { bad "a: resume with --max-steps 40"; tail "$W/a2.log"; }
lr20=$(lr_of "$W/a.jsonl" 20) lr21=$(lr_of "$W/a2.jsonl" 21) lr40=$(lr_of "$W/a2.jsonl" 40)
if close "$lr21" "$lr20" && close "$lr40" "$lr20" && close "$lr20" 1e-4; then
  pass "a: --max-steps 20 -> 40 keeps the schedule: lr step 20 $lr20, step 21 $lr21, step 40 $lr40"
else bad "a: lr step 20 '$lr20', step 21 '$lr21', step 40 '$lr40' (want all 1e-4, the final lr)"; fi
grep -qE '^\| lr schedule +cosine, peak lr 0.001, warmup 2, 20 steps.*\(from the checkpoint' "$W/a2.log" &&
  pass "a: $(grep -m1 '^| lr schedule' "$W/a2.log" | cut -c1-110)" || bad "a: no 'lr schedule ... from the checkpoint' line"
# the checkpoint written by the extended run still holds the original schedule
"${ONE[@]}" ./train_gpt2cu "${common[@]}" --max-steps 41 --output-dir "$W/a" --resume \
  --log-jsonl "$W/a3.jsonl" >"$W/a3.log" 2>&1 || bad "a: second resume"
close "$(lr_of "$W/a3.jsonl" 41)" "$lr20" && pass "a: a second resume still holds the original schedule" ||
  bad "a: second resume lr '$(lr_of "$W/a3.jsonl" 41)'"

"${ONE[@]}" ./train_gpt2cu "${common[@]}" --max-steps 40 --output-dir "$W/a_reset" --resume --reset-schedule \
  --log-jsonl "$W/ar.jsonl" >"$W/ar.log" 2>&1 || { bad "a: resume --reset-schedule"; tail "$W/ar.log"; }
# cosine, warmup 2, 40 steps: 0-based step 20 is (20 - 2) / (40 - 1 - 2) of the way down
want=$(awk 'BEGIN { p = 18 / 37; printf "%.9g", 1e-4 + 0.5 * (1 + cos(3.14159265358979 * p)) * (1e-3 - 1e-4) }')
got=$(lr_of "$W/ar.jsonl" 21)
close "$got" "$want" && pass "a: --reset-schedule: step 21 lr $got = the 40-step schedule's $want" ||
  bad "a: --reset-schedule step 21 lr '$got', want $want"
grep -q 'from the flags (--reset-schedule' "$W/ar.log" || bad "a: no --reset-schedule line"

# --- b. 2 ranks -> 1 rank without --total-batch-tokens ------------------------------------
if "${MPIRUN[@]}" -np 2 ./train_gpt2cu "${common[@]}" --max-steps 6 --checkpoint-every 3 --output-dir "$W/b" \
     --log-jsonl "$W/b.jsonl" >"$W/b.log" 2>&1; then
  mkdir "$W/b1"
  cp "$W/b"/*_00000003* "$W/b1/"
  if "${ONE[@]}" ./train_gpt2cu "${common[@]}" --max-steps 6 --output-dir "$W/b1" --resume \
       --log-jsonl "$W/b1.jsonl" >"$W/b1.log" 2>&1; then
    grep -q 'grad_accum=2 -> 256 tokens/step' "$W/b1.log" && pass "b: resumed at 1 rank with grad_accum=2" ||
      bad "b: resumed run is not grad_accum=2: $(grep -m1 '^| batch' "$W/b1.log")"
    if msg=$(same_losses "$W/b.jsonl" "$W/b1.jsonl" 3); then pass "b: 2 -> 1 rank continues the 2-rank run: $msg"
    else bad "b: losses after 2 -> 1: $msg"; fi
  else bad "b: resume at 1 rank refused"; tail -n 5 "$W/b1.log"; fi
  # -B 3: 3*32 does not divide 256
  "${ONE[@]}" ./train_gpt2cu "${common[@]}" -B 3 --max-steps 6 --output-dir "$W/b1" --resume >"$W/b3.log" 2>&1
  rc=$?
  [ $rc = 1 ] && grep -q "global batch is 256 tokens per step, not a multiple of B\*T\*world" "$W/b3.log" &&
    pass "b: -B 3 refused: $(grep -m1 -o 'global batch.*' "$W/b3.log" | cut -c1-90)" ||
    { bad "b: -B 3 rc=$rc"; tail -n 3 "$W/b3.log"; }
else bad "b: mpirun -np 2 run failed"; tail -n 10 "$W/b.log"; fi

# --- c. --max-steps 0 ----------------------------------------------------------------------
./train_gpt2cu "${common[@]}" --max-steps 0 >"$W/c.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--max-steps must be positive, or -1 for one epoch" "$W/c.log" &&
  pass "c: --max-steps 0 refused (exit 2)" || { bad "c: --max-steps 0 rc=$rc"; cat "$W/c.log"; }

# --- d. --init-from ------------------------------------------------------------------------
init=(--device cpu -B 4 -T 32 --lr 1e-3 --warmup-steps 2 --threads 1 --val-every 0 --sample-every 0
      --no-shuffle --train-data "$W/train.bin" --max-steps 3)
"${ONE[@]}" ./train_gpt2cu "${init[@]}" --model "$W/a0/model_00000020.bin" --output-dir "$W/d_model" \
  --log-jsonl "$W/d_model.jsonl" >"$W/d_model.log" 2>&1 || { bad "d: --model run"; tail "$W/d_model.log"; }
for src in "dir:$W/a0" "file:$W/a0/model_00000020.bin" "hf:$W/a_hf"; do
  name=${src%%:*} path=${src#*:}
  # the weights are compared: the HF directory's config.json dropout (0.1) is turned off
  drop=()
  [ "$name" = hf ] && drop=(--dropout 0)
  if ! "${ONE[@]}" ./train_gpt2cu "${init[@]}" "${drop[@]}" --init-from "$path" --output-dir "$W/d_$name" \
       --log-jsonl "$W/d_$name.jsonl" >"$W/d_$name.log" 2>&1; then
    bad "d: --init-from $name"; tail -n 5 "$W/d_$name.log"; continue
  fi
  lr1=$(lr_of "$W/d_$name.jsonl" 1)
  if msg=$(same_losses "$W/d_model.jsonl" "$W/d_$name.jsonl") && close "$lr1" 5e-4 &&
     wmsg=$(same_weights "$W/d_model/model.bin" "$W/d_$name/model.bin"); then
    pass "d: --init-from $name = --model on the same weights (step 1 lr $lr1, fresh moments): $msg; weights $wmsg"
  else bad "d: --init-from $name: ${msg:-} ${wmsg:-} lr1 $lr1"; fi
done
grep -q "from $W/a0/model_00000020.bin" "$W/d_dir.log" || bad "d: the banner does not name the checkpoint's model file"
# with --resume, a checkpoint in --output-dir wins over --init-from
"${ONE[@]}" ./train_gpt2cu "${init[@]}" --max-steps 4 --init-from "$W/a0" --output-dir "$W/d_dir" --resume \
  >"$W/d_resume.log" 2>&1 || bad "d: --init-from with --resume"
grep -q -- "--init-from $W/a0 not used: --resume continues" "$W/d_resume.log" &&
  grep -q "resumed from .*at step 3" "$W/d_resume.log" && pass "d: --resume with a checkpoint ignores --init-from" ||
  { bad "d: --init-from + --resume"; tail -n 5 "$W/d_resume.log"; }
./train_gpt2cu "${init[@]}" --init-from "$W/nothing" >"$W/d_bad.log" 2>&1
grep -q -- "--init-from $W/nothing: not a model file" "$W/d_bad.log" && pass "d: a missing --init-from is named" ||
  { bad "d: missing --init-from"; cat "$W/d_bad.log"; }
./train_gpt2cu "${init[@]}" --init-from "$W/a0" --model d2 >"$W/d_both.log" 2>&1
[ $? = 2 ] && pass "d: --init-from with --model refused" || bad "d: --init-from with --model accepted"

finish resume_semantics_test
