#!/usr/bin/env bash
# test-timeout: 240
# --eval-hellaswag against a float64 PyTorch computation of llm.c's scores
# (test/e2e/hellaswag_reference.py: a 2-layer GPT-2 with GPT-2's vocabulary and random weights, six
# HellaSwag-format examples, one of them longer than the context):
#   a. --eval-only -T 24 -B 3 (rows of an example across forwards): n, acc and acc_norm as PyTorch's,
#      in the summary and in --eval-json's "hellaswag"; 2 ranks (mpirun) give the same JSON numbers;
#   b. training with --val-every: a "hellaswag" line and JSONL record at every validation, the one at
#      step 0 (the same weights) equal to --eval-only's;
#   c. errors: a bad line names FILE:LINE (exit 1), --eval-hellaswag without validation exits 2;
#   d. SIGTERM during --eval-only's HellaSwag pass (the fixture 4,000 times over, minutes of work):
#      exit 143 within 30 s, the perplexity scored before it on stdout (a file), no HellaSwag result.
# Needs the GPT-2 vocabulary (data/gpt2 or $GPT2_VOCAB_DIR).
set -u
cd "$(dirname "$0")/../.."
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
PY=/usr/bin/python3
. test/e2e/prologue.sh hellaswag "$BIN" ./gpt2_tokenizer
$PY -c "import torch, numpy" 2> /dev/null || { echo "SKIP: no torch/numpy for $PY"; exit 77; }
echo x | ./gpt2_tokenizer encode > /dev/null 2>&1 || { echo "SKIP: no GPT-2 vocabulary"; exit 77; }
RUN=(timeout -k 10 120 "$BIN")

$PY test/e2e/hellaswag_reference.py "$W" ./gpt2_tokenizer 24 || { echo "FAIL: the PyTorch reference"; exit 1; }
expected=$($PY -c 'import json,sys; e=json.load(open(sys.argv[1])); print(e["n"], e["acc"], e["acc_norm"])' "$W/expected.json")
margin=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["margin"])' "$W/expected.json")
awk -v m="$margin" 'BEGIN { exit !(m > 1e-4) }' || bad "the fixture's scores are too close to compare in fp32 ($margin)"
# the --eval-json's hellaswag numbers, as "n acc acc_norm"
got() { $PY -c 'import json,sys; h=json.load(open(sys.argv[1]))["hellaswag"]; print(h["n"], h["acc"], h["acc_norm"])' "$1"; }
# (val data: the run also reports perplexity; any shard of GPT-2 tokens will do)
$PY -c 'import struct; ids=list(range(300, 800)); open("'"$W"'/val.bin","wb").write(struct.pack("<256i",20240520,1,len(ids),*[0]*253)+struct.pack("<%dH"%len(ids),*ids))'
common=(--device cpu --threads 1 -T 24 --val-data "$W/val.bin" --eval-hellaswag "$W/hs.jsonl")

# a ----------------------------------------------------------------------------------------------
"${RUN[@]}" --eval-only --model "$W/model.bin" "${common[@]}" -B 3 --eval-json "$W/e1.json" > "$W/e1.log" 2>&1 ||
  bad "a: --eval-only failed: $(grep -m1 error "$W/e1.log")"
[ "$(got "$W/e1.json")" = "$expected" ] && grep -q "^eval hellaswag   n 6, acc" "$W/e1.log" &&
  pass "a: --eval-only: n acc acc_norm = $(got "$W/e1.json"), as PyTorch float64 (gaps >= $margin)" ||
  bad "a: --eval-only gives '$(got "$W/e1.json")', PyTorch '$expected'"
if command -v mpirun > /dev/null; then
  timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -np 2 "$BIN" --eval-only --model "$W/model.bin" \
    "${common[@]}" -B 3 --eval-json "$W/e2.json" > "$W/e2.log" 2>&1 || bad "a: 2 ranks failed: $(grep -m1 error "$W/e2.log")"
  [ "$(got "$W/e2.json")" = "$expected" ] && pass "a: 2 ranks: the same ($(got "$W/e2.json"))" ||
    bad "a: 2 ranks give '$(got "$W/e2.json")'"
else
  echo "SKIP a: mpirun not found (2 ranks)"; skipped+=" a"
fi

# b ----------------------------------------------------------------------------------------------
"${RUN[@]}" --model "$W/model.bin" "${common[@]}" -B 3 --train-data "$W/val.bin" --max-steps 2 --val-every 1 \
  --val-steps 1 --sample-every 0 --log-jsonl "$W/t.jsonl" > "$W/t.log" 2>&1 || bad "b: training failed: $(grep -m1 error "$W/t.log")"
step0=$(grep -m1 '"type":"hellaswag","step":0,' "$W/t.jsonl" | sed -E 's/.*"n":([0-9]+),"acc":([^,]+),"acc_norm":([^}]+)}/\1 \2 \3/')
[ "$(grep -c '"type":"hellaswag"' "$W/t.jsonl")" = 3 ] && [ "$(grep -c '^hellaswag ' "$W/t.log")" = 3 ] &&
  [ "$($PY -c "import sys; a=sys.argv[1].split(); print(a[0], float(a[1]), float(a[2]))" "$step0")" = "$expected" ] &&
  pass "b: a hellaswag line and record at steps 0, 1, 2; step 0's = --eval-only's ($step0)" ||
  bad "b: training's hellaswag records: '$step0' ($(grep -c '"type":"hellaswag"' "$W/t.jsonl") records)"

# c ----------------------------------------------------------------------------------------------
{ head -n 2 "$W/hs.jsonl"; echo '{"ctx": "x", "endings": ["a", "b"], "label": 0}'; } > "$W/bad.jsonl"
"${RUN[@]}" --eval-only --model "$W/model.bin" --device cpu -T 24 --val-data "$W/val.bin" \
  --eval-hellaswag "$W/bad.jsonl" > "$W/bad.log" 2>&1
rc=$?
[ $rc = 1 ] && grep -q "$W/bad.jsonl:3: \"endings\" must be a list of 4 strings" "$W/bad.log" &&
  pass "c: a bad line: exit 1 naming $(basename "$W")/bad.jsonl:3" || bad "c: bad line: exit $rc, $(grep -m1 error "$W/bad.log")"
"${RUN[@]}" --model "$W/model.bin" "${common[@]}" --val-every 0 > "$W/noval.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--eval-hellaswag runs with validation" "$W/noval.log" &&
  pass "c: --eval-hellaswag with --val-every 0: exit 2" || bad "c: without validation: exit $rc"

# d ----------------------------------------------------------------------------------------------
for _ in $(seq 4000); do cat "$W/hs.jsonl"; done > "$W/long.jsonl"
set -m  # the run in its own process group, so the signal reaches the trainer alone
"${RUN[@]}" --eval-only --model "$W/model.bin" --device cpu --threads 1 -T 24 -B 3 --val-data "$W/val.bin" \
  --eval-hellaswag "$W/long.jsonl" > "$W/long.out" 2> "$W/long.log" &
pid=$!
set +m
for _ in $(seq 300); do grep -q "^eval: " "$W/long.log" 2>/dev/null && break; sleep 0.1; done
sleep 3  # the windows are scored in well under a second: the HellaSwag pass is running
t0=$(date +%s)
kill -TERM "$pid"
wait "$pid"
rc=$?
secs=$(($(date +%s) - t0))
[ $rc = 143 ] && [ "$secs" -le 30 ] &&
  grep -q -- "--eval-only: stop requested by signal 15; no HellaSwag result (exit 143)" "$W/long.log" &&
  grep -q "^eval loss  " "$W/long.out" && grep -q "^eval perplexity  " "$W/long.out" && ! grep -q "^eval hellaswag" "$W/long.out" &&
  pass "d: SIGTERM during the HellaSwag pass: exit 143 after $secs s, the perplexity on stdout, no HellaSwag result" ||
  { bad "d: SIGTERM during the HellaSwag pass: exit $rc after $secs s"; tail -n 3 "$W/long.log" "$W/long.out"; }

# A part that could not run makes the whole a counted skip (77), not a pass.
finish hellaswag_test
