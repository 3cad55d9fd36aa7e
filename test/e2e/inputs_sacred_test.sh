#!/usr/bin/env bash
# A run never writes over what it reads: every output path (--eval-json,
# --log-jsonl, --save-hf, --output-dir's files) is held against every input
# (--model, --init-from and its directory, the data shards) by device and inode,
# links resolved, before any work; a collision exits 2 naming both flags and
# leaves the input as it was. On the CPU backend:
#   1. --eval-json naming the --model file, or a link to it, or the config.json
#      of the --model HF directory;
#   2. --log-jsonl naming the training shard or the --init-from model file;
#   3. --init-from DIR/model.bin with --output-dir DIR (the final model would
#      replace it), and --init-from DIR with --output-dir DIR;
#   4. --log-jsonl OUT/model_00000002.bin or OUT/.lock with --output-dir OUT;
#   5. --save-hf naming the --model HF directory;
#   6. an input that is no regular file (--eval-hellaswag on a FIFO nobody
#      writes: reading it would block in open() with no signal noticed);
# and runs whose outputs are elsewhere go ahead (exit 0).
set -u
cd "$(dirname "$0")/../.."
BIN=${TRAINER:-./train_gpt2cu}  # any trainer binary with the CPU backend
. test/e2e/prologue.sh inputs_sacred "$BIN"
ONE=(timeout -k 10 120)

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 512
common=(--device cpu -B 2 -T 32 --lr 1e-3 --threads 1 --val-every 0 --sample-every 0 --no-shuffle
        --train-data "$W/train.bin")
preset=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=512,padded_vocab_size=512)
"${ONE[@]}" "$BIN" "${common[@]}" "${preset[@]}" --max-steps 2 -o "$W/base" --save-hf "$W/hf" >"$W/base.log" 2>&1 ||
  { bad "the run that makes the model"; tail -n 3 "$W/base.log"; }
MODEL=$W/base/model.bin
ln -s "$(realpath "$MODEL")" "$W/link.bin"
evaluate=(--eval-only --device cpu -B 2 -T 32 --threads 1 --val-data "$W/train.bin")

# refused RC LABEL NEEDLE [INPUT...] -- CMD...: exit 2, the message names both, every INPUT unchanged.
refused() {
  local label=$1 needle=$2
  shift 2
  local inputs=()
  while [ "$1" != -- ]; do inputs+=("$1"); shift; done
  shift
  local sums_before sums_after
  sums_before=$(sha256sum "${inputs[@]}" 2>/dev/null)
  "${ONE[@]}" "$@" >"$W/out.log" 2>&1
  local rc=$?
  sums_after=$(sha256sum "${inputs[@]}" 2>/dev/null)
  if [ $rc -eq 2 ] && grep -q -- "$needle" "$W/out.log" && [ "$sums_before" = "$sums_after" ]; then
    pass "$label: exit 2, inputs untouched"
  else bad "$label: exit $rc"; tail -n 3 "$W/out.log"; fi
}

# --- 1. --eval-json over the model ----------------------------------------------------------------
refused "--eval-json naming the --model file" "--eval-json $MODEL is a file --model reads" "$MODEL" -- \
  "$BIN" "${evaluate[@]}" --model "$MODEL" --eval-json "$MODEL"
refused "--eval-json a link to the --model file" "is $MODEL, a file --model reads" "$MODEL" -- \
  "$BIN" "${evaluate[@]}" --model "$MODEL" --eval-json "$W/link.bin"
refused "--eval-json naming the HF directory's config.json" "a file --model reads" "$W/hf/config.json" -- \
  "$BIN" "${evaluate[@]}" --model "$W/hf" --eval-json "$W/hf/config.json"

# --- 2. --log-jsonl over an input --------------------------------------------------------------------
refused "--log-jsonl naming the training shard" "is a file --train-data reads" "$W/train.bin" -- \
  "$BIN" "${common[@]}" "${preset[@]}" --max-steps 1 --log-jsonl "$W/train.bin"
refused "--log-jsonl naming the --init-from model" "is a file --init-from reads" "$MODEL" -- \
  "$BIN" "${common[@]}" --init-from "$MODEL" --max-steps 1 --log-jsonl "$MODEL"

# --- 3. --init-from inside --output-dir ------------------------------------------------------------
refused "--init-from DIR/model.bin with --output-dir DIR" "--init-from's $MODEL lies in --output-dir" "$MODEL" -- \
  "$BIN" "${common[@]}" --init-from "$MODEL" --max-steps 1 -o "$W/base"
refused "--init-from DIR with --output-dir DIR" "lies in --output-dir $W/base" "$MODEL" "$W/base"/model_*.bin -- \
  "$BIN" "${common[@]}" --init-from "$W/base" --max-steps 1 -o "$W/base" --overwrite-output-dir

# --- 4. --log-jsonl on a file the output directory manages ---------------------------------------
mkdir -p "$W/out"
for name in model_00000002.bin .lock; do
  refused "--log-jsonl OUT/$name" "--log-jsonl $W/out/$name is a file --output-dir $W/out writes" -- \
    "$BIN" "${common[@]}" "${preset[@]}" --max-steps 2 -o "$W/out" --log-jsonl "$W/out/$name"
done

# --- 5. --save-hf over the --model directory ----------------------------------------------------------
refused "--save-hf naming the --model HF directory" "lies in --save-hf $W/hf" "$W/hf/config.json" -- \
  "$BIN" "${common[@]}" --model "$W/hf" --max-steps 1 --save-hf "$W/hf"

# --- 6. an input that is no regular file -------------------------------------------------------------
mkfifo "$W/fifo"
refused "--eval-hellaswag naming a FIFO" "--eval-hellaswag $W/fifo is not a regular file" -- \
  "$BIN" "${evaluate[@]}" --model "$MODEL" --eval-hellaswag "$W/fifo"

# --- outputs elsewhere go ahead ------------------------------------------------------------------------
"${ONE[@]}" "$BIN" "${evaluate[@]}" --model "$MODEL" --eval-json "$W/eval.json" \
  >"$W/ok1.log" 2>&1 && [ -s "$W/eval.json" ] && pass "--eval-only with its outputs elsewhere: exit 0" ||
  { bad "--eval-only with its outputs elsewhere"; tail -n 3 "$W/ok1.log"; }
"${ONE[@]}" "$BIN" "${common[@]}" --init-from "$MODEL" --max-steps 1 -o "$W/next" --log-jsonl "$W/next/log.jsonl" \
  >"$W/ok2.log" 2>&1 && [ -s "$W/next/model.bin" ] && pass "--init-from another run's model into a new --output-dir: exit 0" ||
  { bad "--init-from into a new --output-dir"; tail -n 3 "$W/ok2.log"; }

finish inputs_sacred
