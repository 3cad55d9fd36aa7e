#!/usr/bin/env bash
# test-timeout: 400
# --eval-only and --generate from outside, on a small model trained here (CPU):
#   1. --eval-only over two shards of tinyshakespeare at 1 rank and under
#      mpirun -np 2 (skipped without mpirun): the JSON numbers are the same text
#      (bitwise equal doubles), the token count is n-1 per shard (stride < T),
#      and the loss is within 1e-5 of HF's loop run literally in float64 PyTorch
#      (test/e2e/sliding_window_reference.py; skipped without torch);
#      --eval-stride T (disjoint windows) scores n - windows tokens;
#   2. refusals: a dN preset, both modes at once, a stride above T, mode flags alone,
#      --log-jsonl (nothing to log), an --eval-json name past NAME_MAX (before the evaluation);
#   3. --generate: the prompt from stdin and from a file give the same text for
#      the same --seed; another seed another text; a missing --prompt-file is an
#      error naming it; with weights that make <|endoftext|> likely every sample
#      stops early, and --no-stop-at-eos runs every sample to --gen-tokens, its
#      first sample equal to the stopped one followed by "<|endoftext|>".
set -uo pipefail
cd "$(dirname "$0")/../.."
[ -x ./train_gpt2cu ] || { echo "FAIL: ./train_gpt2cu not built"; exit 1; }
mkdir -p build/test/e2e
work=$(mktemp -d build/test/e2e/evalgen.XXXXXX)
trap '[ -n "${KEEP:-}" ] || rm -rf "$work"' EXIT
fails=0
ok() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
text=${TINYSHAKESPEARE_TXT:-data/tinyshakespeare/input.txt}
[ -s "$text" ] || { echo "FAIL: no tinyshakespeare text ($text)"; exit 1; }

# shard OUT < text: GPT-2 tokens of stdin as an llm.c uint16 shard; prints the count.
shard() {
  ./gpt2_tokenizer encode | /usr/bin/python3 -c '
import struct, sys
ids = [int(x) for x in sys.stdin.read().split()]
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, len(ids), *([0] * 253)))
    f.write(struct.pack("<%dH" % len(ids), *ids))
print(len(ids))' "$@"
}
head -c 60000 "$text" | shard "$work/train.bin" > /dev/null
n1=$(tail -c +60001 "$text" | head -c 2500 | shard "$work/val_1.bin")
n2=$(tail -c +70001 "$text" | head -c 1700 | shard "$work/val_2.bin")
echo "val shards: $n1 and $n2 tokens"

net=(--device cpu --threads 1)
./train_gpt2cu "${net[@]}" --model d2 --config n_embd=32,n_head=2,max_seq=64 -B 4 -T 64 --max-steps 30 \
  --lr 3e-3 --val-every 0 --sample-every 0 --train-data "$work/train.bin" -o "$work/ck" > "$work/train.log" 2>&1 ||
  { echo "FAIL: training the model"; tail "$work/train.log"; exit 1; }
model=$work/ck/model.bin
T=64 S=24
ev=(--eval-only "${net[@]}" --model "$model" --val-data "$work/val_*.bin" -T $T --eval-stride $S -B 3)

# --- 1. evaluation ---------------------------------------------------------------
field() { /usr/bin/python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2"; }
raw() { sed -n "s/^ *\"$2\": \([^,]*\),*$/\1/p" "$1"; }  # the number's text as written
if ./train_gpt2cu "${ev[@]}" --eval-json "$work/one.json" > "$work/one.log" 2>&1; then
  ok "eval 1 rank: $(grep 'eval perplexity' "$work/one.log")"
else bad "eval 1 rank"; tail -5 "$work/one.log"; fi
want=$((n1 - 1 + n2 - 1))
[ "$(raw "$work/one.json" tokens)" = "$want" ] && ok "tokens = n-1 per shard = $want" ||
  bad "tokens $(raw "$work/one.json" tokens), want $want"
for k in model data seq_len stride windows loss perplexity world backend dtype; do
  grep -q "\"$k\":" "$work/one.json" || bad "json has no $k"
done
[ "$(field "$work/one.json" world)" = 1 ] && [ "$(field "$work/one.json" stride)" = $S ] || bad "json world/stride"

if command -v mpirun > /dev/null; then
  if timeout -k 10 200 mpirun --allow-run-as-root --oversubscribe -np 2 ./train_gpt2cu "${ev[@]}" \
       --eval-json "$work/two.json" > "$work/two.log" 2>&1; then
    same=1
    for k in tokens windows nll_sum loss perplexity; do
      [ "$(raw "$work/one.json" $k)" = "$(raw "$work/two.json" $k)" ] || { same=0; bad "2 ranks: $k $(raw "$work/two.json" $k) != $(raw "$work/one.json" $k)"; }
    done
    [ "$same" = 1 ] && ok "2 ranks bitwise equal to 1: perplexity $(raw "$work/two.json" perplexity)"
    [ "$(raw "$work/two.json" world)" = 2 ] || bad "2-rank json world"
  else bad "eval under mpirun -np 2"; tail -5 "$work/two.log"; fi
else
  echo "skip mpirun -np 2 (no mpirun)"
fi

if /usr/bin/python3 -c 'import torch' 2> /dev/null; then
  ref=$(/usr/bin/python3 test/e2e/sliding_window_reference.py "$model" $T $S "$work/val_1.bin" "$work/val_2.bin")
  if /usr/bin/python3 - "$ref" "$(raw "$work/one.json" tokens)" "$(raw "$work/one.json" loss)" <<'PY'
import sys
f = sys.argv[1].split()
ref_tokens, ref_loss, tokens, loss = int(f[1]), float(f[3]), int(sys.argv[2]), float(sys.argv[3])
print("    reference %s; ours tokens %d loss %.9f" % (sys.argv[1], tokens, loss))
sys.exit(0 if tokens == ref_tokens and abs(loss - ref_loss) <= 1e-5 * ref_loss else 1)
PY
  then ok "matches HF's loop in float64 PyTorch"; else bad "differs from the PyTorch reference"; fi
else
  echo "skip PyTorch reference (no torch for /usr/bin/python3)"
fi

./train_gpt2cu "${ev[@]/--eval-stride/--seed}" --eval-json "$work/disjoint.json" > "$work/d.log" 2>&1 ||
  bad "eval with the default stride"
w=$(raw "$work/disjoint.json" windows)
[ "$(raw "$work/disjoint.json" stride)" = $T ] && [ "$(raw "$work/disjoint.json" tokens)" = $((n1 + n2 - w)) ] &&
  ok "stride T: $w disjoint windows, n - windows tokens" || bad "stride T: tokens $(raw "$work/disjoint.json" tokens) windows $w"

# --- 2. refusals -----------------------------------------------------------------
refuse() {  # refuse NAME RC PATTERN -- args
  local name=$1 rc=$2 pat=$3; shift 4
  "$@" > "$work/r.log" 2>&1; local got=$?
  if [ $got = "$rc" ] && grep -qE -- "$pat" "$work/r.log"; then ok "$name: $(grep -E -m1 -- "$pat" "$work/r.log" | cut -c1-100)"
  else bad "$name: rc $got, want $rc and '$pat'"; tail -3 "$work/r.log"; fi
}
refuse preset 1 "needs trained weights" -- ./train_gpt2cu --eval-only "${net[@]}" --model d2 --val-data "$work/val_1.bin"
refuse both-modes 2 "two modes" -- ./train_gpt2cu --eval-only --generate
refuse stride-alone 2 "--eval-stride needs --eval-only" -- ./train_gpt2cu --eval-stride 4
refuse stride-over-T 2 "--eval-stride 65 is larger than --seq-len 64" -- ./train_gpt2cu "${ev[@]}" --eval-stride 65
refuse stride-over-max-seq 2 "--eval-stride 65 is larger than the context length 64" -- \
  ./train_gpt2cu "${ev[@]}" -T 128 --eval-stride 65  # within -T, past the model's max_seq 64
refuse top-p-range 2 "--top-p: invalid value '0'" -- ./train_gpt2cu --generate --top-p 0
refuse samples-alone 2 "--num-samples needs --generate" -- ./train_gpt2cu --num-samples 2
refuse log-jsonl-in-eval 2 "--eval-only does not train: --log-jsonl has no meaning" -- \
  ./train_gpt2cu "${ev[@]}" --log-jsonl "$work/eval_log.jsonl"
# --eval-json's name is checked against the directory's NAME_MAX (255 here) before
# any work, not at the rename after the whole evaluation; 255 characters are written.
long=$(printf '%0250d' 0)
refuse eval-json-name-256 2 "^error: --eval-json $work/${long}x\.json: a file name of 256 characters, more than its directory allows" -- \
  ./train_gpt2cu "${ev[@]}" --eval-json "$work/${long}x.json"
grep -q "^eval loss" "$work/r.log" && bad "eval-json-name-256: the evaluation ran before the refusal"
./train_gpt2cu "${ev[@]}" --eval-json "$work/$long.json" > /dev/null 2>&1 && [ "$(field "$work/$long.json" world)" = 1 ] &&
  ok "eval-json-name-255: written" || bad "eval-json-name-255: not written"

# --- 3. generation ---------------------------------------------------------------
gen=(--generate "${net[@]}" --model "$model" --gen-tokens 40 --temperature 0.9 --top-k 40 --top-p 0.95)
printf 'ROMEO:\nI' > "$work/prompt.txt"
./train_gpt2cu "${gen[@]}" --seed 5 --num-samples 3 --prompt-file "$work/prompt.txt" > "$work/g_file.txt" 2> "$work/g_file.err" ||
  bad "generate from a file"
printf 'ROMEO:\nI' | ./train_gpt2cu "${gen[@]}" --seed 5 --num-samples 3 --prompt-file - > "$work/g_stdin.txt" 2> /dev/null ||
  bad "generate from stdin"
./train_gpt2cu "${gen[@]}" --seed 6 --num-samples 3 --prompt-file "$work/prompt.txt" > "$work/g_seed6.txt" 2> /dev/null
if [ -s "$work/g_file.txt" ] && cmp -s "$work/g_file.txt" "$work/g_stdin.txt"; then ok "stdin and file prompts: same text"
else bad "stdin and file prompts differ"; fi
cmp -s "$work/g_file.txt" "$work/g_seed6.txt" && bad "--seed 6 gave the text of --seed 5" || ok "another seed, another text"
[ "$(grep -c '^--- sample [123]/3 ---$' "$work/g_file.txt")" = 3 ] && [ "$(grep -c '^ROMEO:$' "$work/g_file.txt")" = 3 ] &&
  ok "3 samples, each starting with the prompt" || { bad "sample layout"; head -5 "$work/g_file.txt"; }
refuse prompt-missing 1 "--prompt-file $work/nope.txt: cannot open" -- ./train_gpt2cu "${gen[@]}" --prompt-file "$work/nope.txt"
# A directory is no prompt; a NUL is text (GPT-2's byte-level BPE
# has a token for every byte), all of it printed; a failed write of the samples is an error.
refuse prompt-directory 1 "--prompt-file $work: is a directory, expected a file" -- \
  ./train_gpt2cu "${gen[@]}" --prompt-file "$work"
printf 'ab\0cd' > "$work/nul.txt"
./train_gpt2cu "${gen[@]}" --prompt-file "$work/nul.txt" > "$work/g_nul.txt" 2> "$work/g_nul.err"
if [ $? = 0 ] && cmp -s -n 5 "$work/g_nul.txt" "$work/nul.txt" && grep -q "prompt 3 token(s)" "$work/g_nul.err"; then
  ok "a prompt with a NUL: its 3 tokens, printed whole"
else bad "prompt 'ab\\0cd': $(head -c 20 "$work/g_nul.txt" | od -c | head -1), $(grep -o 'prompt [0-9]* token(s)' "$work/g_nul.err")"; fi
refuse generate-to-dev-full 1 "--generate: standard output: write failed: No space left on device" -- \
  sh -c './train_gpt2cu "$@" > /dev/full' sh "${gen[@]}"

# EOS: the trained model with <|endoftext|> made likely (about 5% at every
# position: final layernorm channel 0 set to the constant 1, and wte[50256][0] = 8),
# so every sample stops early at it; the same seed with --no-stop-at-eos runs
# every sample to the end.
/usr/bin/python3 - "$model" "$work/eos.bin" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
h = struct.unpack("<256i", b[:1024])
C, n = h[6], (len(b) - 1024) // 4
lnfw, lnfb = 1024 + 4 * (n - 2 * C), 1024 + 4 * (n - C)   # the last two tensors
b[lnfw:lnfw + 4] = struct.pack("<f", 0.0)
b[lnfb:lnfb + 4] = struct.pack("<f", 1.0)
b[1024 + 4 * 50256 * C:1024 + 4 * 50256 * C + 4] = struct.pack("<f", 8.0)   # wte[50256][0]
open(sys.argv[2], "wb").write(b)
PY
eos=(--generate "${net[@]}" --model "$work/eos.bin" --gen-tokens 300 --num-samples 4 --seed 3)
./train_gpt2cu "${eos[@]}" > "$work/e_stop.txt" 2> "$work/e_stop.err"
./train_gpt2cu "${eos[@]}" --no-stop-at-eos > "$work/e_all.txt" 2> "$work/e_all.err"
stops=$(grep -c 'stopped at <|endoftext|>' "$work/e_stop.err")
if grep -q 'stopped at' "$work/e_all.err"; then bad "--no-stop-at-eos stopped"
elif [ "$(grep -c ': 300 token(s),' "$work/e_all.err")" != 4 ]; then bad "--no-stop-at-eos: not 4 x 300 tokens"; cat "$work/e_all.err"
elif [ "$stops" != 4 ]; then bad "$stops sample(s) of 4 stopped at <|endoftext|>"; cat "$work/e_stop.err"
else
  # Sample 1 of both runs shares its draws up to the first stop.
  first_stop=$(/usr/bin/python3 - "$work/e_stop.txt" "$work/e_all.txt" <<'PY'
import sys
a = open(sys.argv[1], encoding="utf-8", errors="replace").read().split("--- sample 2/4 ---")[0]
b = open(sys.argv[2], encoding="utf-8", errors="replace").read()
print("prefix" if b.startswith(a[:-1] + "<|endoftext|>") else "differs")
PY
)
  [ "$first_stop" = prefix ] && ok "all 4 samples stopped at <|endoftext|>; --no-stop-at-eos ran all 4 to 300 tokens" ||
    bad "--no-stop-at-eos does not continue the stopped sample"
fi

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
