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
# fp32 resumed steps: losses within 1e-6 relative, norms 2e-5, weights 1e-5 of
# the uninterrupted run (the order of additions changes with the rank count and
# the backend; the bounds of zero_cuda_emu_test.sh); bf16: losses 1e-3, norms
# 5e-3, weights 2e-3 plus one bf16 ulp of the weight against the uninterrupted
# bf16 run (zero_cuda_emu_test.sh allows 2 x the summed lr, 0.016 here; measured
# 1.8e-3 on a weight of 4e-3, a few bf16 ulps; a layernorm weight near 1 whose
# master rounds the other way differs by its ulp, 2^-8, alone).
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
[ -x "$EMU" ] || { echo "FAIL: $EMU not built"; exit 1; }
mkdir -p build/test/distributed
W=$(mktemp -d build/test/distributed/resume_across.XXXXXX)
cleanup() { [ -n "${KEEP:-}" ] || rm -rf "$W"; }
trap cleanup EXIT
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }
export GPT2_EMU_THREADS=1 OMP_NUM_THREADS=1
unset GPT2_ZERO2_WTE_CHUNK_ROWS GPT2_ZERO2_SLICE_ELEMS
. test/distributed/compare_lib.sh  # close_steps, same_weights
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
# compare REF NAME WHAT [LOSS_TOL NORM_TOL WEIGHT_TOL WEIGHT_BF16_ULPS]
compare() {
  local msg wmsg
  if msg=$(close_steps "$W/$1.jsonl" "$W/$2.jsonl" "${4:-1e-6}" "${5:-2e-5}") &&
     wmsg=$(same_weights "$W/$1/model.bin" "$W/$2/model.bin" "${6:-1e-5}" "${7:-0}"); then pass "$3: $msg; weights $wmsg"
  else bad "$3: ${msg:-} ${wmsg:-}"; fi
}
# close_steps wants the same steps: keep the reference's steps 5..8.
tail_steps() { grep '"type":"train"' "$W/$1.jsonl" | awk -F'"step":' '{ split($2, a, ","); if (a[1] > 4) print }' >"$W/$2.jsonl"; }

total=$((4 * B * T))
run full 2 cuda --zero-stage 1 --total-batch-tokens $total --max-steps 8
run cuda2 2 cuda --zero-stage 1 --total-batch-tokens $total --max-steps 4 --checkpoint-every 4
run cpu2 2 cpu --zero-stage 1 --total-batch-tokens $total --max-steps 4 --checkpoint-every 4
tail_steps full ref && cp -r "$W/full" "$W/ref"

resume cuda2 c2_to_c1 1 cuda --zero-stage 1 && compare ref c2_to_c1 "CUDA 2 ranks -> CUDA 1 rank (ZeRO-1)"
resume cuda2 c2_to_c4 4 cuda --zero-stage 1 && compare ref c2_to_c4 "CUDA 2 ranks -> CUDA 4 ranks (ZeRO-1)"
resume cuda2 c2_to_cpu2 2 cpu --zero-stage 1 && compare ref c2_to_cpu2 "CUDA 2 ranks -> CPU 2 ranks"
resume cpu2 cpu2_to_c1 1 cuda --zero-stage 0 && compare ref cpu2_to_c1 "CPU 2 ranks -> CUDA 1 rank (ZeRO-0)"

run bf16_full 2 cuda --dtype bf16 --zero-stage 2 --total-batch-tokens $total --max-steps 8
run bf16_2 2 cuda --dtype bf16 --zero-stage 2 --total-batch-tokens $total --max-steps 4 --checkpoint-every 4
tail_steps bf16_full bf16_ref && cp -r "$W/bf16_full" "$W/bf16_ref"
resume bf16_2 b2_to_b4 4 cuda --dtype bf16 --zero-stage 2 &&
  compare bf16_ref b2_to_b4 "bf16 CUDA 2 ranks ZeRO-2 -> 4 ranks" 1e-3 5e-3 2e-3 1

[ $fail = 0 ] && echo "resume_across_test: all passed"
exit $fail
