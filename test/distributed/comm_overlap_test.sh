#!/usr/bin/env bash
# test-timeout: 300 (fp32 flash attention is 3xTF32 on emulated tensor cores: three mma per product)
# Communication overlapped with the backward (train/data_parallel.cpp, the
# asynchronous collectives of distributed/comm_nccl.cpp), under the emulator's
# deferred stream mode (GPT2_EMU_STREAMS=deferred: queued stream work runs in a
# seeded random order within CUDA's guarantees, docs/emulator.md), so a missing
# wait gives wrong numbers:
#   1. 2 ranks, CUDA fp32, 4 layers, two seeds each:
#        ZeRO-2 (layer l's exchange in flight during layer l-1's backward, two
#          layer buffers; the rest unit's exchange in flight until the optimizer);
#        ZeRO-0 and ZeRO-1 with GPT2_DP_BUCKET_BYTES=1 (one bucket per layer,
#          each reduced asynchronously as soon as the last backward finishes it);
#      reproduce 1 rank doing 2 micro-batches of accumulation: losses within
#      1e-6 relative, gradient norms 2e-5, final weights 1e-5 (the bounds of
#      test/distributed/zero_cuda_emu_test.sh); ZeRO-2 and ZeRO-1 bitwise equal
#      to ZeRO-0 (the emulated ring adds the same numbers in the same order);
#      seed 7 runs with the tied wte gradient in 100-row chunks (3 chunks of
#      the 256-row vocabulary, GPT2_TEST_WTE_CHUNK_ROWS), each exchanged while
#      the next is built, alternating between the two layer buffers;
#   2. ZeRO-2 with 2 micro-batches per rank (a rest exchange in flight across
#      the next micro-step's forward) vs 1 rank x 4 micro-batches; ZeRO-2 bf16
#      vs ZeRO-0 bf16 (bitwise, the same argument; 100-row wte chunks);
#   0. the communicator's overlap entries (CommNcclAsync.* of
#      build/test/distributed/comm_nccl_test: reduce_pieces, tickets,
#      reduce_scatter_v with equal blocks) at -np 2 and 3, synchronous and
#      deferred streams;
#   3. with the test hook GPT2_TEST_DROP_REUSE_WAIT=1 (the compute stream does not
#      wait for an exchange before reusing its buffers and reading what it
#      received) the ZeRO-2 comparison must FAIL (wrong numbers, or a
#      non-finite gradient norm from the poisoned receive buffer); with
#      GPT2_TEST_DROP_REUSE_WAIT=gather (ZeRO-3's compute reads a layer gathered
#      ahead without waiting for the gather) the ZeRO-3 comparison must FAIL
#      under GPT2_EMU_STREAMS=deferred-late (collectives run last), and pass
#      there with the wait.
# ZeRO-3 (layers gathered ahead, three slots) runs in 1 beside the other stages.
# Tiny model, one emulator thread per rank.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh comm_overlap "$EMU"
export GPT2_EMU_THREADS=1 GPT2_EMU_DEVICE_COUNT=2
unset GPT2_EMU_STREAMS GPT2_EMU_STREAM_SEED GPT2_TEST_DROP_COMM_WAIT GPT2_TEST_DROP_REUSE_WAIT GPT2_DP_BUCKET_BYTES \
  GPT2_ZERO2_SLICE_ELEMS GPT2_TEST_WTE_CHUNK_ROWS

NCCL_TEST=build/test/distributed/comm_nccl_test
if [ -x "$NCCL_TEST" ]; then
  for np in 2 3; do
    for mode in sync deferred; do
      if out=$(GPT2_EMU_DEVICE_COUNT=$np timeout -k 10 60 mpirun --allow-run-as-root --oversubscribe \
                 -x GPT2_EMU_DEVICE_COUNT -x GPT2_EMU_THREADS -x GPT2_EMU_STREAMS=$mode -np $np "$NCCL_TEST" \
                 --gtest_filter='CommNcclAsync.*' --gtest_color=no 2>&1) &&
         n=$(echo "$out" | grep -m1 -o '\[  PASSED  \] [0-9]* tests') && [ "${n//[^0-9]/}" -ge 5 ]; then
        pass "CommNcclAsync.* at -np $np, $mode streams: $n"
      else bad "CommNcclAsync.* at -np $np, $mode streams"; echo "$out" | grep -E 'FAIL|error' | head -5; fi
    done
  done
else bad "$NCCL_TEST not built"; fi

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256
[ -s "$W/train.bin" ] || { echo "FAIL: could not write the synthetic shard"; exit 1; }

B=2 T=32
common=(--model d4 --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256
        -B $B -T $T --lr 1e-3 --warmup-steps 2 --weight-decay 0.1 --max-steps 6 --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin" --device cuda)


# run2 NAME ARGS... (environment from the caller's exports): 2 ranks, deferred streams; sets $rc.
run2() {
  local name=$1; shift
  timeout -k 10 60 mpirun --allow-run-as-root --oversubscribe -x GPT2_EMU_THREADS -x GPT2_EMU_DEVICE_COUNT \
    -x GPT2_EMU_STREAMS="${STREAMS:-deferred}" -x GPT2_EMU_STREAM_SEED="${SEED:-1}" -x GPT2_TEST_DROP_REUSE_WAIT="${DROP:-}" \
    -x GPT2_DP_BUCKET_BYTES="${BUCKET:-26214400}" -x GPT2_TEST_WTE_CHUNK_ROWS="${CHUNK:-}" -np 2 "$EMU" "${common[@]}" "$@" \
    --output-dir "$W/$name" --log-jsonl "$W/$name.jsonl" >"$W/$name.log" 2>&1
  rc=$?
}

# compare REF NAME: "" when NAME reproduces REF, else why not.
compare() { reproduces "$W" "$1" "$2" "$rc"; }

# deferred NAME: the emulator's summary line, or "" when the run was not deferred.
deferred() {
  grep -m1 -o "emu: deferred streams (seed [0-9]*): [0-9]* queued items run at [0-9]* synchronisation points" "$W/$1.log"
}

# ref NAME MICRO DTYPE: one rank doing MICRO micro-batches (synchronous streams).
ref() {
  timeout -k 10 60 "$EMU" "${common[@]}" --dtype "$3" --total-batch-tokens $(($2 * B * T)) --output-dir "$W/$1" \
    --log-jsonl "$W/$1.jsonl" >"$W/$1.log" 2>&1 || { echo "FAIL: the reference run $1 failed"; tail -n 5 "$W/$1.log"; exit 1; }
}
ref ref2 2 fp32
ref ref4 4 fp32

for seed in 1 7; do
  for z in 0 1 2 3; do
    name=z${z}_s$seed
    chunk=$([ $seed = 7 ] && echo 100)
    BUCKET=1 SEED=$seed CHUNK=$chunk run2 "$name" --dtype fp32 --zero-stage $z
    what="deferred streams (seed $seed), 2 ranks, ZeRO-$z$([ $z -ge 2 ] || echo ' (a bucket per layer)')${chunk:+, wte in $chunk-row chunks} vs 1 rank x 2 micro-batches"
    summary=$(deferred "$name")
    if [ -z "$summary" ]; then bad "$what: the run was not deferred"; tail -n 5 "$W/$name.log"
    elif msg=$(compare ref2 "$name"); then pass "$what: $msg [$summary]"
    else bad "$what: $msg"; tail -n 5 "$W/$name.log"; fi
  done
  for z in 1 2 3; do
    if msg=$(same_weights "$W/z0_s$seed/model.bin" "$W/z${z}_s$seed/model.bin"); then
      pass "seed $seed: ZeRO-$z weights vs ZeRO-0: $msg"
    else bad "seed $seed: ZeRO-$z weights vs ZeRO-0: $msg"; fi
  done
done

# Two micro-batches per rank: the rest unit's exchange stays in flight over the next forward.
run2 z2_accum --dtype fp32 --zero-stage 2 --total-batch-tokens $((4 * B * T))
what="deferred streams, 2 ranks x 2 micro-batches, ZeRO-2 vs 1 rank x 4 micro-batches"
if msg=$(compare ref4 z2_accum); then pass "$what: $msg"; else bad "$what: $msg"; tail -n 5 "$W/z2_accum.log"; fi

# bf16: ZeRO-2 (overlapped exchange) against ZeRO-0 (one all-reduce), bitwise.
CHUNK=100 run2 bf16_z0 --dtype bf16 --zero-stage 0 && CHUNK=100 run2 bf16_z2 --dtype bf16 --zero-stage 2
what="deferred streams, bf16, 2 ranks, ZeRO-2 vs ZeRO-0"
if [ $rc != 0 ]; then bad "$what: a run failed"; tail -n 5 "$W/bf16_z2.log"
elif msg=$(same_weights "$W/bf16_z0/model.bin" "$W/bf16_z2/model.bin") &&
     [ "$(grep -o '"loss":[^,]*,"grad_norm":[^,]*' "$W/bf16_z0.jsonl")" = "$(grep -o '"loss":[^,]*,"grad_norm":[^,]*' "$W/bf16_z2.jsonl")" ]
then pass "$what: weights $msg, losses and norms identical"
else bad "$what: ${msg:-losses or norms differ}"; fi

# Without the buffer-reuse wait the deferred order must expose the hazard.
DROP=1 CHUNK=100 run2 drop_z2 --dtype fp32 --zero-stage 2
what="deferred streams, ZeRO-2, GPT2_TEST_DROP_REUSE_WAIT=1"
grep -q "test hook GPT2_TEST_DROP_REUSE_WAIT=1" "$W/drop_z2.log" || bad "$what: the test hook did not report itself"
if msg=$(compare ref2 drop_z2); then bad "$what: the missing wait went unnoticed: $msg"
else pass "$what: detected, the comparison fails as it must: $msg"; fi

# ZeRO-3 reads each layer gathered ahead on the communication stream. Uniform
# picks would almost never run a reader before a gather issued a layer ahead,
# so these runs take the collectives-last order (deferred-late): with the wait
# the result holds, without it the readers must see the unwritten slot.
STREAMS=deferred-late run2 late_z3 --dtype fp32 --zero-stage 3
what="deferred-late streams, 2 ranks, ZeRO-3 vs 1 rank x 2 micro-batches"
if msg=$(compare ref2 late_z3); then pass "$what: $msg"; else bad "$what: $msg"; tail -n 5 "$W/late_z3.log"; fi
STREAMS=deferred-late DROP=gather run2 drop_z3 --dtype fp32 --zero-stage 3
what="deferred-late streams, ZeRO-3, GPT2_TEST_DROP_REUSE_WAIT=gather"
grep -q "test hook GPT2_TEST_DROP_REUSE_WAIT=gather" "$W/drop_z3.log" || bad "$what: the test hook did not report itself"
if msg=$(compare ref2 drop_z3); then bad "$what: the missing wait went unnoticed: $msg"
else pass "$what: detected, the comparison fails as it must: $msg"; fi

[ $fail = 0 ] && echo "comm_overlap_test: all passed"
exit $fail
