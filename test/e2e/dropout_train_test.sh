#!/usr/bin/env bash
# test-timeout: 300
# --dropout and the model's dropout rates in training, on the CPU backend, with a
# tiny GPT-2 first trained 30 steps on 10k tokens of tinyshakespeare (so that its loss feels the masks):
#   a. an llm.c model file has no rates: --dropout 0 trains bit for bit as without the flag; its
#      Hugging Face export (config.json: 0.1, as GPT-2's) trains with 0.1 by default, bit for bit as the
#      model file with --dropout 0.1, and with --dropout 0 as the model file without it; the banner says
#      where the rates come from;
#   b. --dropout 0.1: the training losses differ, the evaluations at step 0 are the same (evaluation
#      never drops);
#   c. the masks follow the global token: -B 2 x 2 micro-batches trains as -B 4 x 1 and 2 ranks x -B 2
#      (mpirun) as 1 rank x 2 micro-batches, up to the GEMMs' rounding of other shapes (relative 1e-6)
#      while another mask (--seed) moves the losses over 100 times further;
#   d. a run stopped and resumed (--resume) with dropout on: the same losses and final weights, bitwise;
#   e. bad rates: exit 2 naming --dropout and the part; a bad config.json rate names the file and key.
# GPT2_TRAIN_BIN overrides ./train_gpt2cu.
set -u
cd "$(dirname "$0")/../.."
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
. test/e2e/prologue.sh dropout_train ./prepare_data ./gpt2_convert "$BIN"
need_text
RUN=(timeout -k 10 120 "$BIN")

head -c 40000 "$TXT" > "$W/text.txt"
./prepare_data --progress none --out-prefix "$W/d" --val-tokens 2000 "$W/text.txt" > /dev/null 2>&1 ||
  { echo "FAIL: prepare_data"; exit 1; }
data=(--device cpu -T 64 --threads 1 --no-shuffle --sample-every 0 --lr-schedule constant
      --train-data "$W/d_train_*.bin" --val-data "$W/d_val_*.bin")
"${RUN[@]}" "${data[@]}" --model d2 --config n_embd=64,n_head=2,max_seq=64 -B 4 --lr 1e-2 --max-steps 30 \
  --val-every 0 --seed 7 -o "$W/pre" > "$W/pre.log" 2>&1 || { tail -3 "$W/pre.log"; echo "FAIL: pre-training"; exit 1; }
./gpt2_convert "$W/pre/model.bin" "$W/hf" > /dev/null 2>&1 || { echo "FAIL: gpt2_convert"; exit 1; }
common=("${data[@]}" --lr 1e-3 --max-steps 6 --val-every 3 --val-steps 2 --seed 11)

# train NAME ARGS...: one run, its log NAME.log and JSONL NAME.jsonl
train() {
  local name=$1
  shift
  "${RUN[@]}" "${common[@]}" --log-jsonl "$W/$name.jsonl" "$@" > "$W/$name.log" 2>&1 ||
    bad "$name: the run failed: $(grep -m1 error "$W/$name.log")"
}
losses() { grep '"type":"train"' "$W/$1.jsonl" | sed -E 's/.*"step":([0-9]+),"loss":([^,]+),.*/\1 \2/'; }
val_at() { grep '"type":"val","step":'"$2"',' "$W/$1.jsonl" | sed -E 's/.*"val_loss":([^,]+),.*/\1/'; }
same_losses() { [ -n "$(losses "$1")" ] && diff <(losses "$1") <(losses "$2") > /dev/null; }
dropout_line() { grep -m1 '^| dropout      [a-z]' "$W/$1.log" | sed "s|$W/||"; }
# the largest relative difference of two runs' step losses
max_rel() {
  paste <(losses "$1") <(losses "$2") | awk '{ d = ($2 - $4) / $2; if (d < 0) d = -d; if (d > m) m = d }
    END { printf "%.3g\n", m + 0 }'
}

# a ----------------------------------------------------------------------------------------------
train bin --model "$W/pre/model.bin" -B 4
train bin0 --model "$W/pre/model.bin" -B 4 --dropout 0
train bin1 --model "$W/pre/model.bin" -B 4 --dropout 0.1
train hf --model "$W/hf" -B 4
train hf0 --model "$W/hf" -B 4 --dropout 0
same_losses bin bin0 && pass "a: llm.c model file: --dropout 0 = no flag, bit for bit ($(losses bin | wc -l) losses)" ||
  bad "a: --dropout 0 changed the losses of a model file"
grep -q "^| dropout      embd 0, resid 0, attn 0 (none in an llm.c model file; --dropout sets them)" "$W/bin.log" &&
  pass "a: $(dropout_line bin)" || bad "a: banner of the model file run: '$(dropout_line bin)'"
same_losses hf bin1 && ! same_losses hf bin &&
  pass "a: HF directory (config.json 0.1): its rates by default, bit for bit the model file with --dropout 0.1" ||
  bad "a: the HF directory's default differs from --dropout 0.1 on the same weights"
same_losses hf0 bin && pass "a: HF directory with --dropout 0: bit for bit the model file without dropout" ||
  bad "a: --dropout 0 on the HF directory differs from the model file"
grep -q "^| dropout      embd 0.1, resid 0.1, attn 0.1 (from $W/hf/config.json), in training forwards only" \
  "$W/hf.log" && pass "a: $(dropout_line hf)" || bad "a: banner of the HF run: '$(dropout_line hf)'"
sed -i 's/"resid_pdrop": 0.1/"resid_pdrop": 0.2/' "$W/hf/config.json"
train hf_mixed --model "$W/hf" -B 4 --dropout embd=0 --max-steps 1 --val-every 0
grep -q "^| dropout      embd 0, resid 0.2, attn 0.1 (embd: --dropout; resid, attn: from $W/hf/config.json)" \
  "$W/hf_mixed.log" && pass "a: $(dropout_line hf_mixed)" || bad "a: mixed banner: '$(dropout_line hf_mixed)'"

# b ----------------------------------------------------------------------------------------------
v0=$(val_at bin 0) v1=$(val_at bin1 0)
if [ -n "$v0" ] && [ "$v0" = "$v1" ] && ! same_losses bin bin1 && [ "$(val_at bin 3)" != "$(val_at bin1 3)" ]; then
  pass "b: --dropout 0.1: val loss at step 0 the same ($v0), training losses differ" \
       "(step 1: $(losses bin | head -1 | cut -d' ' -f2) -> $(losses bin1 | head -1 | cut -d' ' -f2))"
else
  bad "b: val at step 0 '$v0' / '$v1', training losses $(same_losses bin bin1 && echo same || echo differ)"
fi

# c ----------------------------------------------------------------------------------------------
train b2 --model "$W/pre/model.bin" -B 2 --total-batch-tokens 256 --dropout 0.1
train seed --model "$W/pre/model.bin" -B 4 --dropout 0.1 --seed 12
split=$(max_rel bin1 b2) other=$(max_rel bin1 seed)
if awk -v s="$split" -v o="$other" 'BEGIN { exit !(s < 1e-6 && o > 100 * s && o > 1e-5) }'; then
  pass "c: -B 2 x 2 micro-batches = -B 4: losses within $split (another mask seed: $other)"
else
  bad "c: -B 2 x 2 against -B 4: $split (want < 1e-6), another seed $other (want 100 times more)"
fi
if command -v mpirun > /dev/null; then
  timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN" "${common[@]}" \
    --model "$W/pre/model.bin" -B 2 --dropout 0.1 --log-jsonl "$W/r2.jsonl" > "$W/r2.log" 2>&1 ||
    bad "c: the 2-rank run failed: $(grep -m1 error "$W/r2.log")"
  ranks=$(max_rel b2 r2)
  awk -v s="$ranks" -v o="$other" 'BEGIN { exit !(s < 1e-6 && o > 100 * s) }' &&
    pass "c: 2 ranks x -B 2 = 1 rank x 2 micro-batches: losses within $ranks" ||
    bad "c: 2 ranks against 2 micro-batches: $ranks"
else
  echo "SKIP c: mpirun not found (2 ranks)"; skipped+=" c"
fi

# d ----------------------------------------------------------------------------------------------
drop=(--model "$W/pre/model.bin" -B 4 --dropout 0.1 --checkpoint-every 2)
train whole "${drop[@]}" -o "$W/whole"
GPT2_TEST_EXIT_RANK=0 GPT2_TEST_EXIT_AT_STEP=4 "${RUN[@]}" "${common[@]}" "${drop[@]}" -o "$W/cut" \
  --log-jsonl "$W/cut.jsonl" > "$W/cut.log" 2>&1
[ -f "$W/cut/DONE_00000002" ] && [ ! -f "$W/cut/DONE_00000004" ] || bad "d: the stopped run left no checkpoint 2 only"
train resumed "${drop[@]}" -o "$W/cut" --resume
if grep -q "^resumed from .* at step 2 " "$W/resumed.log" &&
   diff <(losses whole | awk '$1 > 2') <(losses resumed) > /dev/null && [ "$(losses resumed | wc -l)" = 4 ] &&
   cmp -s "$W/whole/model.bin" "$W/cut/model.bin"; then
  pass "d: stopped after step 3, resumed from step 2: steps 3-6 and the final weights bit for bit"
else
  bad "d: the resumed run differs: $(diff <(losses whole | awk '$1 > 2') <(losses resumed) | head -4 | tr '\n' ' ')"
fi

# e ----------------------------------------------------------------------------------------------
usage() {
  "$BIN" "${common[@]}" --model "$W/pre/model.bin" "$@" > "$W/e.log" 2>&1
  echo "$? $(head -1 "$W/e.log")"
}
for c in "1|2 error: --dropout: invalid value '1' (expected a rate in [0, 1))" \
         "embd=0.1,attn=-1|2 error: --dropout: invalid value 'attn=-1' (expected a rate in [0, 1))" \
         "mlp=0.1|2 error: --dropout: invalid value 'mlp=0.1' (expected P, or K=P items with K one of embd, resid, attn)"
do
  got=$(usage --dropout "${c%%|*}")
  [ "$got" = "${c#*|}" ] && pass "e: --dropout ${c%%|*}: exit ${got%% *}" || bad "e: --dropout ${c%%|*}: '$got'"
done
sed -i 's/"attn_pdrop": 0.1/"attn_pdrop": 1.5/' "$W/hf/config.json"
"$BIN" "${common[@]}" --model "$W/hf" -B 4 --max-steps 1 > "$W/bad_cfg.log" 2>&1
rc=$?
[ "$rc" = 1 ] && grep -q "^error: .*$W/hf/config.json: 'attn_pdrop' must be a number in \[0, 1) (got 1.5)" \
  "$W/bad_cfg.log" && pass "e: exit 1, $(grep -m1 '^error' "$W/bad_cfg.log" | sed "s|$W/||")" ||
  bad "e: config.json attn_pdrop 1.5: exit $rc, $(grep -m1 error "$W/bad_cfg.log")"

# A part that could not run makes the whole a counted skip (77), not a pass.
finish dropout_train_test
