#!/usr/bin/env bash
# test-timeout: 240
# Pretraining aids of issue 24 on the CPU backend, with a byte-level corpus (vocab 256: tinyshakespeare's
# bytes) and a 2-layer, 64-channel GPT-2, so each step takes milliseconds:
#   a. --overfit-batch: the loss of one batch falls to near zero; the same steps on the data do not;
#   b. --milestone-every: milestones are written between --checkpoint-every, tagged MILESTONE_N and never
#      pruned by --keep-checkpoints, also by a resumed run without the flag; --resume-fallback past a
#      corrupt newest checkpoint lands on a milestone; a bad value exits 2 naming the flag.
# GPT2_TRAIN_BIN overrides ./train_gpt2cu.
set -u
cd "$(dirname "$0")/../.."
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
[ -x "$BIN" ] || { echo "FAIL: $BIN not built"; exit 1; }
TXT=${TINYSHAKESPEARE_TXT:-data/tinyshakespeare/input.txt}  # as `make data` finds it, in the tree
[ -f "$TXT" ] || { echo "SKIP: no tinyshakespeare text (TINYSHAKESPEARE_TXT)"; exit 77; }
mkdir -p build/test/e2e
W=$(mktemp -d build/test/e2e/pretraining.XXXXXX)
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
fail=0
pass() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
RUN=(timeout -k 10 120 "$BIN")

# shards of raw bytes: token = byte, vocab 256
head -c 40000 "$TXT" | python3 test/e2e/byte_shards.py "$W" || { echo "FAIL: writing the shards"; exit 1; }
common=(--device cpu --threads 1 -T 32 -B 4 --sample-every 0 --lr-schedule constant --val-every 0
        --train-data "$W/b_train_*.bin" --val-data "$W/b_val_*.bin" --model d2
        --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256)
# train NAME ARGS...: one run, its log NAME.log and JSONL NAME.jsonl
train() {
  local name=$1
  shift
  "${RUN[@]}" "${common[@]}" --log-jsonl "$W/$name.jsonl" "$@" > "$W/$name.log" 2>&1 ||
    bad "$name: the run failed: $(grep -m1 error "$W/$name.log")"
}
loss_at() { grep '"type":"train","step":'"$2"',' "$W/$1.jsonl" | sed -E 's/.*"loss":([^,]+),.*/\1/'; }
below() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a < b) }'; }

# a ----------------------------------------------------------------------------------------------
train overfit --lr 1e-2 --max-steps 100 --overfit-batch
train plain --lr 1e-2 --max-steps 100
o1=$(loss_at overfit 1) o100=$(loss_at overfit 100) p100=$(loss_at plain 100)
below "$o100" 0.15 && below 1.5 "$p100" &&
  pass "a: --overfit-batch: loss $o1 -> $o100 in 100 steps (the data: $p100)" ||
  bad "a: --overfit-batch: loss $o1 -> $o100, the data's $p100"

# b ----------------------------------------------------------------------------------------------
steps() { (cd "$W/$1" && ls DONE_* 2> /dev/null | grep -v "\\." | sed 's/DONE_0*//' | tr '\n' ' '); }
tags() { (cd "$W/$1" && ls MILESTONE_* 2> /dev/null | sed 's/MILESTONE_0*//' | tr '\n' ' '); }
ck=(--lr 1e-3 --checkpoint-every 2 --keep-checkpoints 1 -o "$W/m")
train m1 "${ck[@]}" --max-steps 12 --milestone-every 5
[ "$(steps m)" = "5 10 12 " ] && [ "$(tags m)" = "5 10 " ] &&
  pass "b: --milestone-every 5 --checkpoint-every 2 --keep-checkpoints 1, 12 steps: checkpoints $(steps m)" ||
  bad "b: checkpoints '$(steps m)', milestones '$(tags m)' (expected 5 10 12 / 5 10)"
train m2 "${ck[@]}" --max-steps 16 --resume
[ "$(steps m)" = "5 10 16 " ] && pass "b: resumed without the flag, 16 steps: the milestones stay ($(steps m))" ||
  bad "b: after the resume: '$(steps m)' (expected 5 10 16)"
printf 'x' | dd of="$W/m/state_00000016_00000.bin" bs=1 seek=200 conv=notrunc status=none
train m3 "${ck[@]}" --max-steps 18 --resume-fallback
grep -q "resuming from step 10 instead" "$W/m3.log" && [ "$(steps m)" = "5 10 18 " ] &&
  [ -f "$W/m/model_00000010.bin" ] &&
  pass "b: corrupt step 16, --resume-fallback: from milestone 10, then $(steps m)" ||
  bad "b: fallback: $(grep -m1 -E 'WARNING|error' "$W/m3.log"); checkpoints '$(steps m)'"
"${RUN[@]}" "${common[@]}" --milestone-every x -o "$W/x" > "$W/bad.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--milestone-every: invalid value 'x'" "$W/bad.log" &&
  pass "b: --milestone-every x: exit 2 naming the flag" || bad "b: --milestone-every x: exit $rc"

[ $fail = 0 ] && echo "PASS pretraining_test" || echo "FAIL pretraining_test"
exit $fail
