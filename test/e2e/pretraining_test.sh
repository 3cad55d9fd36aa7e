#!/usr/bin/env bash
# test-timeout: 240
# Pretraining aids on the CPU backend, with a byte-level corpus (vocab 256: tinyshakespeare's
# bytes) and a 2-layer, 64-channel GPT-2, so each step takes milliseconds:
#   a. --overfit-batch: the loss of one batch falls to near zero; the same steps on the data do not;
#   b. --milestone-every: milestones are written between --checkpoint-every, tagged MILESTONE_N and never
#      pruned by --keep-checkpoints, also by a resumed run without the flag; --resume-fallback past a
#      corrupt newest checkpoint lands on a milestone; a bad value exits 2 naming the flag.
#   c. MFU in every step line and JSONL record = 6N + 6LCT FLOP/token x tok/s / the peak: --peak-tflops,
#      the CPU's measured FMA peak, the emulated CUDA backend named an H100 (bf16: 989.4 TFLOP/s), and
#      none for the emulator's own name.
#   d. --profile-steps A:B on the emulated CUDA backend (cudaProfilerStart/Stop, NVTX ranges accepted).
# GPT2_TRAIN_BIN overrides ./train_gpt2cu.
set -u
cd "$(dirname "$0")/../.."
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
. test/e2e/prologue.sh pretraining "$BIN"
need_text
RUN=(timeout -k 10 120 "$BIN")
export GPT2_EMU_THREADS=1

# shards of raw bytes: token = byte, vocab 256
head -c 40000 "$TXT" | python3 test/e2e/byte_shards.py "$W" || { echo "FAIL: writing the shards"; exit 1; }
common=(--device cpu --threads 1 -T 32 -B 4 --sample-every 0 --lr-schedule constant --val-every 0
        --train-data "$W/b_train_*.bin" --val-data "$W/b_val_*.bin" --model d2
        --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256)
# train NAME ARGS...: one run of $TRAIN_BIN (default $BIN), its log NAME.log and JSONL NAME.jsonl
train() {
  local name=$1
  shift
  timeout -k 10 120 "${TRAIN_BIN:-$BIN}" "${common[@]}" --log-jsonl "$W/$name.jsonl" "$@" > "$W/$name.log" 2>&1 ||
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

# c ----------------------------------------------------------------------------------------------
# MFU = FLOP/token x tok/s / peak, FLOP/token = 6N + 6LCT = 6 x 120576 + 6 x 2 x 64 x 32 = 748032
mfu_ok() {  # NAME PEAK_TFLOPS: every step record's mfu is 748032 x tok_per_s / peak (the banner rounds the peak to 3 digits)
  grep '"type":"train"' "$W/$1.jsonl" | sed -E 's/.*"tok_per_s":([^,]+),"mfu":([^,]+),.*/\1 \2/' |
    awk -v p="$2" '{ n++; want = 748032 * $1 / (p * 1e12); d = ($2 - want) / want; if (d < 0) d = -d;
      if (d > 1e-2 || NF != 2) bad++ } END { exit !(n == 3 && !bad) }'
}
train mfu --lr 1e-3 --max-steps 3 --peak-tflops 0.5
mfu_ok mfu 0.5 && [ "$(grep -c '^step .* | mfu [0-9.]*% |' "$W/mfu.log")" = 3 ] &&
  grep -q '^| mfu          748032 FLOP/token (6N + 6LCT) against 0.5 TFLOP/s (--peak-tflops)' "$W/mfu.log" &&
  pass "c: --peak-tflops 0.5: every step line and record has its MFU ($(grep -m1 -o 'mfu [0-9.]*%' "$W/mfu.log"))" ||
  bad "c: MFU against --peak-tflops 0.5: $(grep -m1 '^step' "$W/mfu.log")"
train mfu_cpu --lr 1e-3 --max-steps 3
peak=$(sed -n 's/^| mfu .* against \([0-9.]*\) TFLOP\/s (fp32 FMA peak of this CPU, [^)]*measured at start-up)$/\1/p' "$W/mfu_cpu.log")
[ -n "$peak" ] && mfu_ok mfu_cpu "$peak" && pass "c: the CPU's measured FMA peak: $peak TFLOP/s" ||
  bad "c: CPU peak: $(grep -m1 '^| mfu' "$W/mfu_cpu.log")"
EMU=build/train_gpt2cu_emu
if [ -x "$EMU" ]; then
  GPT2_EMU_DEVICE="name=NVIDIA H100 80GB HBM3" TRAIN_BIN=$EMU train emu_h100 --device cuda --dtype bf16 --lr 1e-3 --max-steps 3
  grep -q '^| mfu .* against 989.4 TFLOP/s (bf16 dense, NVIDIA H100 SXM datasheet)$' "$W/emu_h100.log" &&
    mfu_ok emu_h100 989.4 && pass "c: emulated CUDA named an H100 SXM, --dtype bf16: MFU against 989.4 TFLOP/s" ||
    bad "c: emulated H100: $(grep -m1 '^| mfu' "$W/emu_h100.log")"
  TRAIN_BIN=$EMU train emu_plain --device cuda --lr 1e-3 --max-steps 2
  grep -q '^| mfu .*; no peak known for GPT2 emulated GPU (A100-like): no MFU printed' "$W/emu_plain.log" &&
    ! grep -q '"mfu"' "$W/emu_plain.jsonl" && ! grep -q '| mfu [0-9]' "$W/emu_plain.log" &&
    pass "c: the emulator's own name is no GPU of the table: no MFU printed" || bad "c: emulated GPU without a peak"
else
  echo "SKIP c: $EMU not built"; skipped+=" c"
fi
"${RUN[@]}" "${common[@]}" --peak-tflops 0 > "$W/bad.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--peak-tflops: invalid value '0'" "$W/bad.log" &&
  pass "c: --peak-tflops 0: exit 2 naming the flag" || bad "c: --peak-tflops 0: exit $rc"

# d ----------------------------------------------------------------------------------------------
# --profile-steps on the emulated CUDA backend: cudaProfilerStart/Stop and the NVTX ranges are accepted
if [ -x "$EMU" ]; then
  TRAIN_BIN=$EMU train prof --device cuda --lr 1e-3 --max-steps 4 --profile-steps 2:3
  grep -q '^--profile-steps: profiler capture started before step 2$' "$W/prof.log" &&
    grep -q '^--profile-steps: profiler capture stopped after step 3$' "$W/prof.log" &&
    [ "$(grep -c '"type":"train"' "$W/prof.jsonl")" = 4 ] &&
    pass "d: --profile-steps 2:3 on the emulated CUDA backend: capture started before 2, stopped after 3" ||
    bad "d: --profile-steps: $(grep -m1 -E 'profile|error' "$W/prof.log")"
fi
"${RUN[@]}" "${common[@]}" --profile-steps 3:2 > "$W/bad.log" 2>&1
rc=$?
[ $rc = 2 ] && grep -q -- "--profile-steps: invalid value '3:2' (expected A:B with A <= B)" "$W/bad.log" &&
  pass "d: --profile-steps 3:2: exit 2 naming the flag" || bad "d: --profile-steps 3:2: exit $rc"

# A part that could not run makes the whole a counted skip (77), not a pass.
finish pretraining_test
