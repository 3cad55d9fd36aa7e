#!/usr/bin/env bash
# test-timeout: 400
# scripts/finetune.sh, the fine-tuning recipe of docs/finetuning.md, on a tiny model:
#   a. Hugging Face weights (--save-hf of a 2-step run) fine-tuned on one text file split at blank
#      lines (the tinyshakespeare recipe), one process: eval_before/after.json written, perplexity
#      falls, the fine-tuned Hugging Face directory written; a rerun on the same --out resumes; the
#      training uses config.json's dropout rates, as HF's model.train();
#   b. our own checkpoint directory (a's run/) as --init-from, a directory of long documents (the
#      PG19 / wikitext recipe), under LAUNCH="mpirun -np 2": the evaluation reports world 2; --dropout
#      passes through to the trainer;
#   c. SFT JSONL (--sft): masked training, supervised tokens in the log, a val split of 5% of the
#      examples whose masked loss is logged;
#   d. bad invocations fail with exit 2 and a message;
#   e. evaluation and the best checkpoint on (the default with --val-every > 0), --epochs, --patience.
set -u
cd "$(dirname "$0")/../.."
. test/e2e/prologue.sh finetune_recipe ./prepare_data ./train_gpt2cu
need_text
json() { /usr/bin/env python3 -c "import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])" "$1" "$2"; }

head -c 200000 "$TXT" > "$W/shakespeare.txt"
./prepare_data --progress none --out-prefix "$W/base" --val-tokens 2000 "$W/shakespeare.txt" > /dev/null 2>&1
./train_gpt2cu --device cpu --model d2 --config n_embd=64,n_head=2,max_seq=64 -T 64 -B 4 --max-steps 2 --threads 2 \
  --val-every 0 --sample-every 0 --train-data "$W/base_train_*.bin" --save-hf "$W/hf_start" > "$W/start.log" 2>&1 \
  || { tail -3 "$W/start.log"; echo "FAIL: could not make the starting model"; exit 1; }
recipe=(scripts/finetune.sh --seq-len 64 -B 4 --lr 1e-3 --val-every 0)
extra=(-- --threads 1 --sample-every 0 --val-steps 2)

# a ----------------------------------------------------------------------------------------------
if timeout -k 10 150 "${recipe[@]}" --init-from "$W/hf_start" --out "$W/a" --text "$W/shakespeare.txt" \
     --doc-separator '\n\n' --steps 6 "${extra[@]}" > "$W/a.log" 2>&1; then
  before=$(json "$W/a/eval_before.json" perplexity) after=$(json "$W/a/eval_after.json" perplexity)
  if /usr/bin/env python3 -c "import sys; sys.exit(not float(sys.argv[2]) < float(sys.argv[1]))" "$before" "$after" &&
     [ -f "$W/a/hf/model.safetensors" ] && [ -f "$W/a/hf/config.json" ]; then
    pass "a: HF weights on text, perplexity $before -> $after, stride $(json "$W/a/eval_after.json" stride), hf/ written"
  else
    bad "a: perplexity $before -> $after, hf: $(ls "$W/a/hf" 2>&1)"
  fi
  grep -q "^| dropout      embd 0.1, resid 0.1, attn 0.1 (from $W/hf_start/config.json)" "$W/a.log" &&
    pass "a: dropout from the HF config.json" || bad "a: dropout: $(grep -m1 '^| dropout      ' "$W/a.log")"
  timeout -k 10 150 "${recipe[@]}" --init-from "$W/hf_start" --out "$W/a" --text "$W/shakespeare.txt" \
    --doc-separator '\n\n' --steps 8 "${extra[@]}" > "$W/a2.log" 2>&1
  grep -q 'resumed from .*at step 6' "$W/a2.log" && [ "$(grep -c '"type":"train"' "$W/a/run/log.jsonl")" = 8 ] \
    && pass "a: the rerun resumed at step 6 and trained to 8" || bad "a: rerun did not resume: $(grep -m2 -i 'resum\|error' "$W/a2.log")"
else
  bad "a: finetune.sh failed: $(tail -3 "$W/a.log")"
fi

# b ----------------------------------------------------------------------------------------------
mkdir -p "$W/docs"
for i in 0 1 2 3; do tail -c +$((i * 40000 + 1)) "$W/shakespeare.txt" | head -c 40000 > "$W/docs/book$i.txt"; done
if command -v mpirun > /dev/null; then
  if LAUNCH="mpirun --allow-run-as-root --oversubscribe -np 2" timeout -k 10 200 "${recipe[@]}" --init-from "$W/a/run" \
       --out "$W/b" --text "$W/docs" --steps 3 --dropout resid=0.05 "${extra[@]}" > "$W/b.log" 2>&1 &&
     [ "$(json "$W/b/eval_after.json" world)" = 2 ] && grep -q 'init-from .*/a/run' "$W/b.log" &&
     grep -q '^| dropout      embd 0, resid 0.05, attn 0 (resid: --dropout; embd, attn: none in an llm.c model file)' \
       "$W/b.log"; then
    pass "b: checkpoint dir as --init-from, a directory of documents, mpirun -np 2: $(grep -m1 '^finetune: perplexity [0-9]' "$W/b.log")"
  else
    bad "b: $(tail -3 "$W/b.log")"
  fi
else
  echo "SKIP b: mpirun not found"; skipped+=" b"
fi

# c ----------------------------------------------------------------------------------------------
/usr/bin/env python3 - "$W/qa.jsonl" <<'EOF'
import json, sys
with open(sys.argv[1], "w") as f:
    for i in range(400):
        f.write(json.dumps({"messages": [{"role": "user", "content": f"Say {i}."},
                                          {"role": "assistant", "content": f"{i}."}]}) + "\n")
EOF
if timeout -k 10 150 "${recipe[@]}" -B 2 --init-from "$W/hf_start" --out "$W/c" --sft "$W/qa.jsonl" --steps 3 \
     "${extra[@]}" --val-every 2 > "$W/c.log" 2>&1 && grep -q '"supervised_tokens":' "$W/c/run/log.jsonl" &&
   [ -f "$W/c/data/sft_val_000000.mask" ] && grep -q '"type":"val"' "$W/c/run/log.jsonl"; then
  pass "c: SFT recipe, val split + masked val loss, supervised tokens logged: $(grep -o '"supervised_tokens":[0-9]*' "$W/c/run/log.jsonl" | tr '\n' ' ')"
else
  bad "c: $(tail -3 "$W/c.log")"
fi

# d ----------------------------------------------------------------------------------------------
for args in "--out $W/d --text $W/shakespeare.txt" "--init-from $W/nothing --out $W/d --text x" \
            "--init-from $W/hf_start --out $W/d" "--init-from $W/hf_start --out $W/d --text x --bogus"; do
  out=$(scripts/finetune.sh $args 2>&1); rc=$?
  [ $rc = 2 ] && echo "$out" | grep -q 'finetune: error' && pass "d: refused: $(echo "$out" | tail -1)" \
    || bad "d: '$args' gave rc $rc: $out"
done

# e ----------------------------------------------------------------------------------------------
# The defaults with evaluation on: --keep-best (the final files hold the best evaluation's weights),
# --epochs and --patience passed through.
head -c 30000 "$W/shakespeare.txt" > "$W/small.txt"
if timeout -k 10 200 scripts/finetune.sh --seq-len 64 -B 4 --lr 1e-2 --val-every 4 --patience 2 --epochs 2 \
     --init-from "$W/hf_start" --out "$W/e" --text "$W/small.txt" --doc-separator '\n\n' \
     -- --threads 1 --sample-every 0 --val-steps 2 > "$W/e.log" 2>&1; then
  best=$(sed -nE 's/^best checkpoint: .*at step ([0-9]+).*/\1/p' "$W/e.log")
  kept=$(printf "%s/e/run/model_%08d.bin" "$W" "${best:-0}")
  if [ -n "$best" ] && cmp -s "$W/e/run/model.bin" "$kept" && grep -q -- '--epochs 2 = ceil(2 x ' "$W/e.log" &&
     grep -q 'the weights of the best evaluation' "$W/e.log"; then
    pass "e: evaluation and best checkpoint on: run/model.bin is step $best's ($(grep -o 'early stopping at step [0-9]*\|training [0-9]* steps: --epochs[^)]*)' "$W/e.log" | tr '\n' ';'))"
  else
    bad "e: best '$best': $(grep -m1 'best checkpoint' "$W/e.log")"
  fi
else
  bad "e: finetune.sh failed: $(tail -3 "$W/e.log")"
fi
# A part that could not run makes the whole a counted skip (77), not a pass.
finish finetune_recipe_test
