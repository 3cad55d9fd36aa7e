#!/usr/bin/env bash
# test-timeout: 480
# Data-parallel training on the CUDA backend through the NCCL communicator,
# executed by the emulator: build/train_gpt2cu_emu --device cuda under
# `mpirun -np N` (N = 2, 3), one emulated GPU per rank (GPT2_EMU_DEVICE_COUNT=N),
# NCCL (emulated over MPI) for gradients and parameters, MPI for host scalars.
#   1. N ranks at ZeRO 0/1/2/3, fp32 and bf16, against 1 rank doing N
#      micro-batches of accumulation on the same windows (--no-shuffle: the
#      loader gives the ranks of one call consecutive windows):
#        fp32: per-step losses within 1e-6 relative (gradient norms 2e-5: they
#              are logged to 6 digits), final weights within 1e-5;
#        bf16: losses within 1e-3, norms within 5e-3 relative; weights by
#              compare_lib.sh's adamw_weights: sum of 2 R_t lr_t (AdamW's largest
#              step, R_t <= 1.0074 here) + 2 bf16 ulps each, the mean at the
#              rounding level (why: at the bf16 comparison below);
#   2. ZeRO-1, 2 and 3 bitwise equal to ZeRO-0 (weights, losses, norms) at the
#      same N and dtype: the emulated NCCL reduces element j of rank r's block
#      in ring order starting at rank r+1 in every call used (all-reduce chunks
#      = the ZeRO shards, since the buffer is padded to N equal shards;
#      reduce-scatter; the per-block reduces of reduce_scatter_v), so every
#      stage adds the same numbers in the same order; and ZeRO-2 with
#      1000-element exchange slices bitwise equal to ZeRO-2. On GPUs NCCL may
#      pick other algorithms (tree all-reduce) or chunk sizes per call, so this
#      identity is the emulator's; there the stages agree to rounding;
#   3. fp32 CUDA at N ranks against the CPU backend (MPI) at N ranks, ZeRO-0:
#      losses within 1e-6, norms 2e-5, weights 1e-5;
#   4. checkpoint and resume: the 2-rank bf16 ZeRO-2 run resumed from its
#      step-4 checkpoint (fp32 master shards) repeats steps 5..8 bit for bit;
#   5. one rank at ZeRO-2 (its units go through the NCCL communicator, a device
#      copy at world 1) against one rank at ZeRO-0;
#   6. more ranks on a node than (emulated) GPUs is refused at start-up;
#   7. ZeRO-3 (parameters sharded, layers gathered ahead on the communication
#      stream) in 1 as well; one rank at ZeRO-3 equals one rank at ZeRO-2; at 4
#      ranks, bf16, --recompute 2 and dropout 0.1, ZeRO-3 bitwise ZeRO-0;
#   8. the optimizer offloaded to the CPU (--offload-optimizer cpu), pipelined
#      in small chunks under deferred streams, bitwise the on-device one (fp32
#      ZeRO-0, bf16 ZeRO-3, clipping on), and not without its waits; a 2-rank bf16
#      ZeRO-3 offloaded run with one rank SIGKILLed after its step-4 checkpoint
#      resumes bit for bit, offloaded and with the optimizer on the device.
# The model is tiny (2 layers, 64 channels, vocabulary 256) and one emulator
# worker thread per rank (GPT2_EMU_THREADS=1) keeps it cheap and deterministic.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh zero_cuda_emu "$EMU"
export GPT2_EMU_THREADS=1
MPIRUN=(timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -x GPT2_EMU_THREADS -x GPT2_EMU_DEVICE_COUNT)
ONE=(timeout -k 10 120)
bg=""
on_exit() { [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null; }

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256
[ -s "$W/train.bin" ] || { echo "FAIL: could not write the synthetic shard"; exit 1; }

B=2 T=32 STEPS=8 LR=1e-3
common=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256
        -B $B -T $T --lr $LR --warmup-steps 2 --weight-decay 0.1 --max-steps $STEPS --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin")

# run_one NAME ARGS...: a single-rank run into $W/NAME
run_one() {
  local name=$1; shift
  "${ONE[@]}" "$EMU" "${common[@]}" "$@" --output-dir "$W/$name" --log-jsonl "$W/$name.jsonl" >"$W/$name.log" 2>&1 ||
    { bad "$name: run failed"; tail -n 15 "$W/$name.log"; return 1; }
}
# run_np NAME NP ARGS...: mpirun -np NP with NP emulated devices into $W/NAME
# (MPI_EXTRA: more mpirun options)
MPI_EXTRA=()
run_np() {
  local name=$1 np=$2; shift 2
  GPT2_EMU_DEVICE_COUNT=$np "${MPIRUN[@]}" "${MPI_EXTRA[@]}" -np "$np" "$EMU" "${common[@]}" "$@" --output-dir "$W/$name" \
    --log-jsonl "$W/$name.jsonl" >"$W/$name.log" 2>&1 || { bad "$name: mpirun -np $np failed"; tail -n 15 "$W/$name.log"; return 1; }
}

for np in 2 3; do
  total=$((np * B * T))
  for dtype in fp32 bf16; do
    ref=one_${dtype}_x$np
    run_one "$ref" --device cuda --dtype $dtype --total-batch-tokens $total || continue
    grep -q "grad_accum=$np" "$W/$ref.log" || bad "$ref is not $np micro-batches of accumulation"
    for z in 0 1 2 3; do
      name=np${np}_${dtype}_z$z
      ckpt=(); [ $np$dtype$z = 2bf162 ] && ckpt=(--checkpoint-every 4)  # resumed below
      run_np "$name" "$np" --device cuda --dtype $dtype --zero-stage $z "${ckpt[@]}" || continue
      grep -q "^| comm         nccl (buffers), mpi (host scalars)" "$W/$name.log" ||
        bad "$name: the run did not use the NCCL communicator for buffers"
      what="CUDA $dtype ZeRO-$z, $np ranks vs 1 rank x $np micro-batches"
      if [ $dtype = fp32 ]; then
        # One rank accumulates the micro-batches inside the matmuls (beta = 1), N
        # ranks add separately computed gradients in the all-reduce: rounding
        # differences, which Adam amplifies only where a gradient is itself
        # rounding noise. Bound: 1% of one lr step (as for the CPU backend).
        if msg=$(close_steps "$W/$ref.jsonl" "$W/$name.jsonl" 1e-6 2e-5); then pass "$what: $msg"; else bad "$what: $msg"; fi
        if msg=$(same_weights "$W/$ref/model.bin" "$W/$name/model.bin" 1e-5); then pass "$what, weights: $msg"
        else bad "$what, weights: $msg"; fi
      else
        # bf16: one rank adds each micro-batch's gradient into the previous ones
        # in bf16 (the matmul's beta = 1 rounds the sum), N ranks round each
        # micro-batch's gradient to bf16, pre-multiply it by 1/N rounded to bf16
        # (NCCL's average: 0.333984375 for N = 3, so the gradient and its norm
        # come out 0.2% larger) and sum in bf16 hop by hop. Where a gradient is
        # itself rounding noise (the key bias: analytically zero) Adam's steps
        # then take either sign, so such a weight can end up to sum 2 R_t lr_t
        # apart, plus an ulp of each run's bf16 rounding of its master weight;
        # everywhere else the difference stays at rounding (the mean bound).
        # Losses: means of per-token losses from bf16 logits of slightly
        # different weights (measured 1.8e-4); norms: the 0.2% above + rounding.
        if msg=$(close_steps "$W/$ref.jsonl" "$W/$name.jsonl" 1e-3 5e-3); then pass "$what: $msg"; else bad "$what: $msg"; fi
        if msg=$(adamw_weights "$W/$ref/model.bin" "$W/$name/model.bin" "$W/$ref.jsonl" 0 2); then pass "$what, weights: $msg"
        else bad "$what, weights: $msg"; fi
      fi
    done
    for z in 1 2 3; do
      if msg=$(same_weights "$W/np${np}_${dtype}_z0/model.bin" "$W/np${np}_${dtype}_z$z/model.bin") &&
         lmsg=$(close_steps "$W/np${np}_${dtype}_z0.jsonl" "$W/np${np}_${dtype}_z$z.jsonl" 0 0); then
        pass "CUDA $dtype ZeRO-$z vs ZeRO-0, $np ranks: weights $msg, $lmsg"
      else bad "CUDA $dtype ZeRO-$z vs ZeRO-0, $np ranks: weights ${msg:-} ${lmsg:-}"; fi
      unset msg lmsg
    done
  done
  # The CPU backend over MPI at the same world size.
  if run_np cpu_np$np "$np" --device cpu --zero-stage 0; then
    what="CUDA fp32 vs CPU, $np ranks, ZeRO-0"
    # Different kernels (summation orders, cuBLAS vs OpenBLAS) and NCCL's average
    # (1/N pre-multiplied) vs MPI's (sum, then divide): rounding differences,
    # bounded like the rank comparisons.
    if msg=$(close_steps "$W/cpu_np$np.jsonl" "$W/np${np}_fp32_z0.jsonl" 1e-6 2e-5); then pass "$what: $msg"; else bad "$what: $msg"; fi
    if msg=$(same_weights "$W/cpu_np$np/model.bin" "$W/np${np}_fp32_z0/model.bin" 1e-5); then pass "$what, weights: $msg"
    else bad "$what, weights: $msg"; fi
  fi
done

# 4 ranks, bf16, --recompute 2 and dropout: ZeRO-3 bitwise ZeRO-0 (the same ring order).
extra4=(--device cuda --dtype bf16 --recompute 2 --dropout 0.1 --max-steps 4)
if run_np np4_bf16_rd_z0 4 "${extra4[@]}" --zero-stage 0 && run_np np4_bf16_rd_z3 4 "${extra4[@]}" --zero-stage 3; then
  if msg=$(close_steps "$W/np4_bf16_rd_z0.jsonl" "$W/np4_bf16_rd_z3.jsonl" 0 0) &&
     wmsg=$(same_weights "$W/np4_bf16_rd_z0/model.bin" "$W/np4_bf16_rd_z3/model.bin"); then
    pass "CUDA bf16 ZeRO-3 vs ZeRO-0, 4 ranks, --recompute 2, dropout 0.1: $msg; weights $wmsg"
  else bad "CUDA bf16 ZeRO-3 vs ZeRO-0, 4 ranks, recompute and dropout: ${msg:-} ${wmsg:-}"; fi
fi

# ZeRO-2's exchange in 1000-element slices cuts units and pieces anywhere: same bits.
export GPT2_ZERO2_SLICE_ELEMS=1000
MPI_EXTRA=(-x GPT2_ZERO2_SLICE_ELEMS)
if run_np np3_bf16_z2s 3 --device cuda --dtype bf16 --zero-stage 2; then
  if msg=$(same_weights "$W/np3_bf16_z2/model.bin" "$W/np3_bf16_z2s/model.bin"); then
    pass "CUDA bf16 ZeRO-2, 3 ranks, 1000-element slices vs default slices: $msg"
  else bad "CUDA bf16 ZeRO-2 with 1000-element slices: $msg"; fi
fi
unset GPT2_ZERO2_SLICE_ELEMS
MPI_EXTRA=()

# Resume the 2-rank bf16 ZeRO-2 run from its step-4 checkpoint.
if [ -e "$W/np2_bf16_z2/DONE_00000004" ]; then
  cp -r "$W/np2_bf16_z2" "$W/resumed" && rm "$W/resumed/DONE_00000008" "$W/resumed/model.bin"
  GPT2_EMU_DEVICE_COUNT=2 "${MPIRUN[@]}" -np 2 "$EMU" "${common[@]}" --device cuda --dtype bf16 --zero-stage 2 \
    --checkpoint-every 4 --output-dir "$W/resumed" --resume --log-jsonl "$W/resumed.jsonl" >"$W/resumed.log" 2>&1
  rc=$?
  what="CUDA bf16 ZeRO-2, 2 ranks, resumed at step 4"
  if [ $rc = 0 ] && grep -q "resumed from .*model_00000004.bin at step 4" "$W/resumed.log" &&
     msg=$(close_steps <(sed -n '/"step":[5-8],/p' "$W/np2_bf16_z2.jsonl") "$W/resumed.jsonl" 0 0) &&
     wmsg=$(same_weights "$W/np2_bf16_z2/model.bin" "$W/resumed/model.bin"); then
    pass "$what: $msg; weights $wmsg"
  else bad "$what: exit $rc ${msg:-} ${wmsg:-}"; tail -n 5 "$W/resumed.log"; fi
else bad "the 2-rank bf16 ZeRO-2 run wrote no step-4 checkpoint"; fi

# The optimizer offloaded to the CPU (--offload-optimizer cpu) updates the same
# bits as the device kernel (the same roundings, no fma contraction on either
# side): bitwise the on-device runs, with gradient clipping active. The
# offloaded runs pipeline 1000-element chunks (~30 per rank) under deferred
# streams, where a pinned copy lands only when the host waits for it; without
# the wait for a chunk's gradients (GPT2_TEST_DROP_OFFLOAD_WAIT) the host
# updates with gradients that have not landed, and the weights must differ.
offload_env=(-x GPT2_EMU_STREAMS=deferred -x GPT2_TEST_OFFLOAD_CHUNK=1000)
for cfg in "fp32 0" "bf16 3"; do
  set -- $cfg
  MPI_EXTRA=("${offload_env[@]}")
  run_np off_$1_z$2 2 --device cuda --dtype $1 --zero-stage $2 --grad-clip 0.05 --offload-optimizer cpu || continue
  MPI_EXTRA=()
  run_np dev_$1_z$2 2 --device cuda --dtype $1 --zero-stage $2 --grad-clip 0.05 || continue
  on_device="0 B"; [ $1 = bf16 ] && on_device="3.91 KiB"  # bf16: the 1000-element fp32 transfer chunk
  grep -q "optimizer $on_device, .*; optimizer on the host" "$W/off_$1_z$2.log" ||
    bad "off_$1_z$2: optimizer state not on the host (or more than the transfer chunk on the device)"
  if msg=$(close_steps "$W/dev_$1_z$2.jsonl" "$W/off_$1_z$2.jsonl" 0 0) &&
     wmsg=$(same_weights "$W/dev_$1_z$2/model.bin" "$W/off_$1_z$2/model.bin"); then
    pass "CUDA $1 ZeRO-$2, 2 ranks, optimizer offloaded (pipelined in 1000-element chunks) vs on the device: $msg; weights $wmsg"
  else bad "CUDA $1 ZeRO-$2 offloaded vs on the device: ${msg:-} ${wmsg:-}"; fi
done
MPI_EXTRA=("${offload_env[@]}" -x GPT2_TEST_DROP_OFFLOAD_WAIT=1)
if run_np off_nowait 2 --device cuda --dtype bf16 --zero-stage 3 --grad-clip 0.05 --offload-optimizer cpu; then
  if grep -q "GPT2_TEST_DROP_OFFLOAD_WAIT=1: the wait for an offloaded gradient chunk to land is left out" "$W/off_nowait.log" &&
     ! same_weights "$W/dev_bf16_z3/model.bin" "$W/off_nowait/model.bin" >/dev/null; then
    pass "without the wait for each chunk's gradients the offloaded weights differ (the wait is needed)"
  else bad "the offloaded run without its landing wait matched the device run (or the hook did not announce itself)"; fi
fi
MPI_EXTRA=()

# ZeRO-3 with the optimizer offloaded, 2 ranks, bf16: SIGKILL of one rank mid-run
# (after the step-4 checkpoint), then --resume repeats the uninterrupted run's
# steps 5..8 and weights bit for bit; the same checkpoint resumed with the
# optimizer on the device does too. A constant learning rate lets the killed run
# be started for far more steps than it lives.
common_kill=(--device cuda --dtype bf16 --zero-stage 3 --lr-schedule constant --checkpoint-every 4 --offload-optimizer cpu)
if run_np k3_full 2 "${common_kill[@]}"; then
  GPT2_EMU_DEVICE_COUNT=2 "${MPIRUN[@]}" -np 2 "$EMU" "${common[@]}" "${common_kill[@]}" --max-steps 1000 \
    --output-dir "$W/k3" --log-jsonl "$W/k3_killed.jsonl" >"$W/k3_killed.log" 2>&1 &
  bg=$!
  for _ in $(seq 1200); do [ -e "$W/k3/DONE_00000004" ] && break; sleep 0.05; done
  pid=$(pgrep -f -- "--output-dir $W/k3 " | while read -r p; do
          [ "$(cat /proc/$p/comm 2>/dev/null)" = train_gpt2cu_em ] && echo "$p"; done | tail -n 1)
  [ -n "$pid" ] && kill -9 "$pid"
  wait "$bg"; rc=$?; bg=""
  GPT2_EMU_DEVICE_COUNT=2 "${MPIRUN[@]}" -np 2 "$EMU" "${common[@]}" "${common_kill[@]}" --output-dir "$W/k3" --resume \
    --log-jsonl "$W/k3.jsonl" >"$W/k3.log" 2>&1
  rrc=$?
  what="CUDA bf16 ZeRO-3 + offloaded optimizer, 2 ranks, one rank SIGKILLed after step 4's checkpoint (exit $rc), resumed"
  at=$(sed -n 's/.*resumed from .* at step \([0-9]*\).*/\1/p' "$W/k3.log")
  if [ "$rc" != 0 ] && [ $rrc = 0 ] && [ -n "$at" ] &&
     msg=$(close_steps <(awk -v a="$at" -F'"step":' '/"type":"train"/ { split($2, f, ","); if (f[1] > a) print }' \
                         "$W/k3_full.jsonl") "$W/k3.jsonl" 0 0) &&
     wmsg=$(same_weights "$W/k3_full/model.bin" "$W/k3/model.bin"); then
    pass "$what at step $at: $msg; weights $wmsg"
  else bad "$what: resume exit $rrc, step '${at:-}' ${msg:-} ${wmsg:-}"; tail -n 5 "$W/k3.log"; fi
  mkdir -p "$W/k3dev" && cp "$W/k3_full"/*_00000004* "$W/k3dev/"
  if run_np k3dev 2 "${common_kill[@]}" --offload-optimizer none --resume &&
     msg=$(close_steps <(sed -n '/"type":"train".*"step":[5-8],/p' "$W/k3_full.jsonl") "$W/k3dev.jsonl" 0 0) &&
     wmsg=$(same_weights "$W/k3_full/model.bin" "$W/k3dev/model.bin"); then
    pass "the offloaded run's step-4 checkpoint resumed with the optimizer on the device: $msg; weights $wmsg"
  else bad "offloaded checkpoint resumed on the device: ${msg:-} ${wmsg:-}"; fi
fi

# One rank at ZeRO-2 exchanges its units through the NCCL communicator (world 1).
if run_one one_fp32_x2_z2 --device cuda --total-batch-tokens $((2 * B * T)) --zero-stage 2; then
  what="CUDA fp32, 1 rank ZeRO-2 (NCCL communicator at world 1) vs ZeRO-0"
  if msg=$(close_steps "$W/one_fp32_x2.jsonl" "$W/one_fp32_x2_z2.jsonl" 1e-6 2e-5); then pass "$what: $msg"; else bad "$what: $msg"; fi
  if msg=$(same_weights "$W/one_fp32_x2/model.bin" "$W/one_fp32_x2_z2/model.bin" 1e-5); then pass "$what, weights: $msg"
  else bad "$what, weights: $msg"; fi
fi

# ZeRO-3 at one rank: its gathers go through the NCCL communicator too.
if run_one one_fp32_x2_z3 --device cuda --total-batch-tokens $((2 * B * T)) --zero-stage 3 &&
   [ -e "$W/one_fp32_x2_z2/model.bin" ]; then
  if msg=$(close_steps "$W/one_fp32_x2_z2.jsonl" "$W/one_fp32_x2_z3.jsonl" 0 0) &&
     wmsg=$(same_weights "$W/one_fp32_x2_z2/model.bin" "$W/one_fp32_x2_z3/model.bin"); then
    pass "CUDA fp32, 1 rank ZeRO-3 vs ZeRO-2: $msg; weights $wmsg"
  else bad "CUDA fp32, 1 rank ZeRO-3 vs ZeRO-2: ${msg:-} ${wmsg:-}"; fi
fi

# One GPU per rank: 3 ranks on a node with 2 (emulated) GPUs stop at start-up.
GPT2_EMU_DEVICE_COUNT=2 "${MPIRUN[@]}" -np 3 "$EMU" "${common[@]}" --device cuda >"$W/too_many.log" 2>&1
rc=$?
if [ $rc != 0 ] && grep -q "3 ranks on this node but only 2 visible GPUs" "$W/too_many.log"; then
  pass "3 ranks on 2 GPUs refused: $(grep -m1 -o 'rank [0-9]/3 ([^)]*): 3 ranks on this node but only 2 visible GPUs' "$W/too_many.log")"
else bad "3 ranks on 2 GPUs: exit $rc"; tail -n 5 "$W/too_many.log"; fi

[ $fail = 0 ] && echo "zero_cuda_emu_test: all passed"
exit $fail
