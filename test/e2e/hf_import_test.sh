#!/usr/bin/env bash
# test-timeout: 900
# Hugging Face GPT-2 checkpoints against PyTorch. test/e2e/hf_reference.py
# (Debian's /usr/bin/python3 + torch, its own safetensors writer, GPT-2 with
# HF's names) writes three checkpoints: a tiny one (F32, "transformer." names),
# a distilgpt2-shaped one (6 x 768, GPT-2's vocabulary, BF16, mask buffers and
# an explicit lm_head copy) and a gpt2-medium-shaped one (24 layers, 16 heads,
# narrow width, F16, GPT2Model's unprefixed names, 3 shards + index). For each:
#   * logits and loss of the imported model (build/test/e2e/hf_logits, the CPU
#     backend) match PyTorch's float64 ones to 1e-5 relative;
#   * ./train_gpt2cu --model DIR starts from it (its step-0 validation loss matches);
#   * ./gpt2_convert HF -> llm.c -> HF -> llm.c -> HF is bitwise at both ends, and
#     the export holds exactly the imported values under GPT2LMHeadModel's names;
#   * where `transformers` is installed, GPT2LMHeadModel.from_pretrained(export)
#     gives the reference logits.
# And --save-hf: a trained model exported at the end equals the final model.bin.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/test/e2e
work=$(mktemp -d build/test/e2e/hf.XXXXXX)
trap 'rm -rf "$work"' EXIT
py=/usr/bin/python3
ref=test/e2e/hf_reference.py
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run() {  # run LOG command...: quiet unless it fails
  local log=$1; shift
  "$@" > "$log" 2>&1 || { fail "$* (exit $?)"; sed 's/^/    /' "$log" | tail -8; return 1; }
}

for bin in ./gpt2_convert ./train_gpt2cu build/test/e2e/hf_logits; do
  [ -x "$bin" ] || { echo "FAIL $bin is not built (make gpt2_convert train_gpt2cu build/test/e2e/hf_logits)"; exit 1; }
done

tx_py=""  # a Python with transformers, if any (the GPU machine has one)
for p in python3 /usr/bin/python3; do
  if "$p" -c "import transformers, torch, numpy" > /dev/null 2>&1; then tx_py=$p; break; fi
done

val_loss_at_step0() {  # the trainer's first validation loss from its JSONL log
  sed -n 's/.*"type":"val","step":0,"val_loss":\([^,]*\),.*/\1/p' "$1" | head -1
}

check_case() {  # check_case NAME B T make-options...
  local name=$1 B=$2 T=$3; shift 3
  local d=$work/$name
  echo "== $name"
  run "$d.make.log" $py $ref make "$d" --B "$B" --T "$T" "$@" || return
  head -1 "$d.make.log"
  # logits and loss through the loader entry point the trainer uses
  run "$d.logits.log" build/test/e2e/hf_logits "$d/hf" "$d/tokens.bin" "$B" "$T" "$d/ours.bin" &&
    { $py $ref compare "$d" "$d/ours.bin" || fails=$((fails + 1)); }
  # the trainer loads the directory: its validation loss before any step is the reference loss
  if run "$d.train.log" ./train_gpt2cu --device cpu --model "$d/hf" --train-data "$d/train.bin" \
      --val-data "$d/train.bin" -B "$B" -T "$T" --max-steps 1 --val-steps 1 --sample-every 0 \
      --log-jsonl "$d/train.jsonl"; then
    local vl
    vl=$(val_loss_at_step0 "$d/train.jsonl")
    if [ -z "$vl" ]; then fail "$name: no step-0 validation loss in the trainer's log"; else
      $py $ref loss "$d" "$vl" || fails=$((fails + 1)); fi
  fi
  # converter round trips
  run "$d.c1.log" ./gpt2_convert "$d/hf" "$d/a.bin" &&
    run "$d.c2.log" ./gpt2_convert "$d/a.bin" "$d/exp1" &&
    run "$d.c3.log" ./gpt2_convert "$d/exp1" "$d/b.bin" &&
    run "$d.c4.log" ./gpt2_convert "$d/b.bin" "$d/exp2" || return
  if cmp -s "$d/a.bin" "$d/b.bin" && cmp -s "$d/exp1/model.safetensors" "$d/exp2/model.safetensors" &&
     cmp -s "$d/exp1/config.json" "$d/exp2/config.json"; then
    echo "ok   $name: gpt2_convert HF -> llm.c -> HF -> llm.c -> HF is bitwise ($(stat -c %s "$d/a.bin") + $(stat -c %s "$d/exp1/model.safetensors") bytes)"
  else
    fail "$name: converter round trip is not bitwise"
  fi
  $py $ref check-export "$d" "$d/exp1" || fails=$((fails + 1))
  if [ -n "$tx_py" ]; then
    $tx_py $ref transformers "$d" "$d/exp1" || fails=$((fails + 1))
  else
    echo "--   $name: transformers not installed here; from_pretrained check skipped"
  fi
}

check_case tiny 2 8 --layers 2 --heads 4 --embd 32 --positions 16 --vocab 101 --dtype F32
check_case distilgpt2 1 16 --layers 6 --heads 12 --embd 768 --positions 1024 --vocab 50257 --dtype BF16 \
  --mask-buffers --lm-head
check_case medium-shaped 2 8 --layers 24 --heads 16 --embd 64 --positions 1024 --vocab 50257 --dtype F16 \
  --no-prefix --shards 3

# --save-hf: the final model as an HF directory, equal to the final llm.c model file.
echo "== --save-hf"
d=$work/tiny
if run "$work/save_hf.log" ./train_gpt2cu --device cpu --model "$d/hf" --train-data "$d/train.bin" \
    --val-data "$d/train.bin" -B 2 -T 8 --max-steps 2 --val-every 0 --sample-every 0 --lr 1e-2 \
    --output-dir "$work/run" --save-hf "$work/run_hf"; then
  if [ ! -e "$work/run_hf/config.json" ]; then
    fail "--save-hf wrote no $work/run_hf/config.json"
  elif run "$work/save_hf_convert.log" ./gpt2_convert "$work/run_hf" "$work/run_hf.bin" &&
       cmp -s "$work/run_hf.bin" "$work/run/model.bin"; then
    echo "ok   --save-hf export imports to exactly the final model.bin"
  else
    fail "--save-hf export differs from the final model.bin"
  fi
fi

# Refusals name the key (the unit tests cover every case; this is the binary's exit path).
mkdir -p "$work/bad" && cp -r "$work/tiny/hf/." "$work/bad/"
sed -i 's/"model_type": "gpt2"/"model_type": "llama"/' "$work/bad/config.json"
if ./gpt2_convert "$work/bad" "$work/bad.bin" > "$work/bad.log" 2>&1; then
  fail "gpt2_convert accepted model_type llama"
elif grep -q "'model_type'" "$work/bad.log"; then
  echo "ok   refused: $(cut -c1-150 "$work/bad.log")"
else
  fail "gpt2_convert's error does not name model_type: $(cat "$work/bad.log")"
fi

[ "$fails" -eq 0 ] && echo "hf_import_test: all passed" || echo "hf_import_test: $fails failure(s)"
[ "$fails" -eq 0 ]
