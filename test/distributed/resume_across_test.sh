#!/usr/bin/env bash
# test-timeout: 240
# A checkpoint written by N ranks resumes on M ranks and on the other backend:
# build/train_gpt2cu_emu (the trainer with the CUDA backend on the emulator, one
# emulated GPU per rank, NCCL emulated over MPI) and its CPU backend (MPI).
# Each run trains the same global batch (4 micro-batches of B x T per step: the
# checkpoint carries it, so M ranks take 4/M micro-batches each) with a constant
# learning rate; the uninterrupted run is 2 CUDA ranks x 8 steps, fp32 ZeRO-1.
#   1. CUDA 2 ranks -> CUDA 1 rank and 4 ranks (ZeRO-1 shards re-cut: 2 -> 1, 4);
#   2. CUDA 2 ranks -> CPU 2 ranks, and CPU 2 ranks -> CUDA 1 rank;
#   3. bf16 CUDA 2 ranks, ZeRO-2 -> bf16 CUDA 4 ranks (fp32 master shards re-cut).
# Exact where the arithmetic is the same:
#   - the re-cut itself: a checkpoint resumed on another rank count with nothing
#     left to train (--max-steps = its step) is written again, cut for the new
#     count; 2 -> 4 -> 2 ranks gives back every file of the original checkpoint
#     byte for byte (masters, moments, data position, marker), and the 4-rank
#     model file equals the 2-rank one (fp32 ZeRO-1 and bf16 ZeRO-2);
#   - the first resumed step of a CUDA -> CUDA resume: same weights, same
#     micro-batches, same kernels, so the same per-micro-batch losses; only
#     their double sum runs in another order (<= 3 roundings of 2^-53), and the
#     log prints 15-17 significant digits: relative 1e-14.
# Bounded where the order of additions changes (the gradients of 4 micro-batches
# summed across 1, 2 or 4 ranks, or by the other backend):
#   - fp32: losses within 1e-6 relative, norms 2e-5 (logged to 6 digits),
#     weights 1e-5 (the bounds of zero_cuda_emu_test.sh);
#   - bf16: losses 1e-3 and norms 3 x 2^-9 (each gradient element is 4
#     micro-batch parts added in bf16 in another order: up to 3 roundings of half
#     a bf16 ulp); weights by adamw_weights (compare_lib.sh): 2 R_t lr per
#     resumed step, the most AdamW can move a weight whose gradient is rounding
#     noise, plus a bf16 ulp, and a mean at the rounding level.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh resume_across "$EMU"
export GPT2_EMU_THREADS=1 OMP_NUM_THREADS=1
unset GPT2_TEST_WTE_CHUNK_ROWS GPT2_ZERO2_SLICE_ELEMS
/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256

B=2 T=32
common=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256 -B $B -T $T
        --lr 1e-3 --lr-schedule constant --weight-decay 0.1 --threads 1 --val-every 0 --sample-every 0 --no-shuffle
        --train-data "$W/train.bin")
# run NAME NP DEVICE ARGS...: NP ranks (1: no mpirun) of DEVICE into $W/NAME; sets rc.
run() {
  local name=$1 np=$2 dev=$3; shift 3
  local launch=(timeout -k 10 120)
  [ "$np" -gt 1 ] && launch+=(mpirun --allow-run-as-root --oversubscribe -x GPT2_EMU_THREADS -x OMP_NUM_THREADS
                              -x GPT2_EMU_DEVICE_COUNT -np "$np")
  GPT2_EMU_DEVICE_COUNT=$np "${launch[@]}" "$EMU" "${common[@]}" --device "$dev" "$@" --output-dir "$W/$name" \
    --log-jsonl "$W/$name.jsonl" >"$W/$name.log" 2>&1
  rc=$?
  [ $rc = 0 ] || { bad "$name: exit $rc"; tail -n 8 "$W/$name.log"; }
}
# resume FROM NAME NP DEVICE ARGS...: copy checkpoint dir FROM to NAME, resume to step 8 there.
resume() {
  local from=$1 name=$2; shift 2
  cp -r "$W/$from" "$W/$name"
  run "$name" "$@" --max-steps 8 --resume
  if [ $rc = 0 ] && ! grep -q "resumed from .* at step 4" "$W/$name.log"; then bad "$name: no resume at step 4"; rc=1; fi
  return $rc
}
# compare REF NAME WHAT [LOSS_TOL NORM_TOL WEIGHT_TOL]: the resumed steps 5..8 of NAME
# against REF's; WEIGHT_TOL "adamw" bounds bf16 weights by adamw_weights.
compare() {
  local msg wmsg
  if [ "${6:-}" = adamw ]; then wmsg=$(adamw_weights "$W/$1/model.bin" "$W/$2/model.bin" "$W/$1.jsonl" 4 1)
  else wmsg=$(same_weights "$W/$1/model.bin" "$W/$2/model.bin" "${6:-1e-5}"); fi || { bad "$3, weights: $wmsg"; return; }
  if msg=$(close_steps "$W/$1.jsonl" "$W/$2.jsonl" "${4:-1e-6}" "${5:-2e-5}"); then pass "$3: $msg; weights $wmsg"
  else bad "$3: $msg"; fi
}
# first_step_exact REF NAME WHAT: step 5's loss (the weights just resumed) within 1e-14.
first_step_exact() {
  local msg
  if msg=$(close_steps <(grep '"step":5,' "$W/$1.jsonl") <(grep '"step":5,' "$W/$2.jsonl") 1e-14 1); then
    pass "$3, first resumed step from the same weights: $msg"
  else bad "$3, first resumed step: $msg"; fi
}
# recut FROM NP DEVICE ARGS...: FROM's step-4 checkpoint re-written by NP ranks
# (nothing left to train), then by FROM's 2 ranks again: every file as before.
recut() {
  local from=$1 np=$2 f diff=""; shift 2
  cp -r "$W/$from" "$W/${from}_np$np" && run "${from}_np$np" "$np" "$@" --max-steps 4 --resume || return
  cmp -s "$W/$from/model_00000004.bin" "$W/${from}_np$np/model_00000004.bin" || diff+=" model_00000004.bin@$np"
  [ -f "$W/${from}_np$np/state_00000004_0000$((np - 1)).bin" ] || diff+=" (no rank $((np - 1)) state)"
  mkdir -p "$W/${from}_back" && cp "$W/${from}_np$np"/* "$W/${from}_back/" && run "${from}_back" 2 "$@" --max-steps 4 --resume || return
  for f in "$W/$from"/DONE_00000004 "$W/$from"/model_00000004.bin "$W/$from"/state_00000004_*.bin; do
    cmp -s "$f" "$W/${from}_back/$(basename "$f")" || diff+=" $(basename "$f")"
  done
  if [ -z "$diff" ]; then pass "$from re-cut 2 -> $np -> 2 ranks: every checkpoint file byte for byte the same"
  else bad "$from re-cut 2 -> $np -> 2 ranks: differs:$diff"; fi
}
# close_steps wants the same steps: keep the reference's steps 5..8.
tail_steps() { grep '"type":"train"' "$W/$1.jsonl" | awk -F'"step":' '{ split($2, a, ","); if (a[1] > 4) print }' >"$W/$2.jsonl"; }

total=$((4 * B * T))
run full 2 cuda --zero-stage 1 --total-batch-tokens $total --max-steps 8
run cuda2 2 cuda --zero-stage 1 --total-batch-tokens $total --max-steps 4 --checkpoint-every 4
run cpu2 2 cpu --zero-stage 1 --total-batch-tokens $total --max-steps 4 --checkpoint-every 4
tail_steps full ref && cp -r "$W/full" "$W/ref"

recut cuda2 4 cuda --zero-stage 1
resume cuda2 c2_to_c1 1 cuda --zero-stage 1 && compare ref c2_to_c1 "CUDA 2 ranks -> CUDA 1 rank (ZeRO-1)" &&
  first_step_exact ref c2_to_c1 "CUDA 2 ranks -> CUDA 1 rank"
resume cuda2 c2_to_c4 4 cuda --zero-stage 1 && compare ref c2_to_c4 "CUDA 2 ranks -> CUDA 4 ranks (ZeRO-1)" &&
  first_step_exact ref c2_to_c4 "CUDA 2 ranks -> CUDA 4 ranks"
resume cuda2 c2_to_cpu2 2 cpu --zero-stage 1 && compare ref c2_to_cpu2 "CUDA 2 ranks -> CPU 2 ranks"
resume cpu2 cpu2_to_c1 1 cuda --zero-stage 0 && compare ref cpu2_to_c1 "CPU 2 ranks -> CUDA 1 rank (ZeRO-0)"

run bf16_full 2 cuda --dtype bf16 --zero-stage 2 --total-batch-tokens $total --max-steps 8
run bf16_2 2 cuda --dtype bf16 --zero-stage 2 --total-batch-tokens $total --max-steps 4 --checkpoint-every 4
tail_steps bf16_full bf16_ref && cp -r "$W/bf16_full" "$W/bf16_ref"
recut bf16_2 4 cuda --dtype bf16 --zero-stage 2
resume bf16_2 b2_to_b4 4 cuda --dtype bf16 --zero-stage 2 &&
  compare bf16_ref b2_to_b4 "bf16 CUDA 2 ranks ZeRO-2 -> 4 ranks" 1e-3 "$(awk 'BEGIN { print 3 * 2 ^ -9 }')" adamw &&
  first_step_exact bf16_ref b2_to_b4 "bf16 CUDA 2 ranks ZeRO-2 -> 4 ranks"

[ $fail = 0 ] && echo "resume_across_test: all passed"
exit $fail
