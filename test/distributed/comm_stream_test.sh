#!/usr/bin/env bash
# test-timeout: 180
# The NCCL communicator's own stream (distributed/comm_nccl.cpp) under the
# emulator's deferred stream mode (GPT2_EMU_STREAMS=deferred, docs/emulator.md):
# queued work runs at synchronisation points, streams interleaved at random
# within what CUDA guarantees, so a missing event wait between the compute
# stream and the comm stream changes results instead of being hidden by the
# synchronous default.
#   1. 2 ranks, CUDA fp32, ZeRO-0 and ZeRO-2, deferred (two seeds each): the same
#      per-step losses (1e-6 relative), gradient norms (2e-5) and final weights
#      (1e-5) as 1 rank doing 2 micro-batches of accumulation (the bounds of
#      test/distributed/zero_cuda_emu_test.sh), and the emulator reports that
#      queued items ran;
#   2. the same with the test hook GPT2_TEST_DROP_COMM_WAIT=before|after (one of
#      the two event waits left out): the comparison must FAIL (or the run stop
#      on a non-finite gradient norm); and
#   3. in the synchronous default mode the dropped wait goes unnoticed (why the
#      deferred mode exists).
# Tiny model, one emulator thread per rank, as zero_cuda_emu_test.sh.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh comm_stream "$EMU"
export GPT2_EMU_THREADS=1 GPT2_EMU_DEVICE_COUNT=2
unset GPT2_EMU_STREAMS GPT2_EMU_STREAM_SEED GPT2_TEST_DROP_COMM_WAIT

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256
[ -s "$W/train.bin" ] || { echo "FAIL: could not write the synthetic shard"; exit 1; }

B=2 T=32
common=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=256,padded_vocab_size=256
        -B $B -T $T --lr 1e-3 --warmup-steps 2 --weight-decay 0.1 --max-steps 6 --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin" --device cuda --dtype fp32)


# run2 NAME ENV...: 2 ranks (ZeRO stage in $Z) with the given environment; sets $rc.
run2() {
  local name=$1; shift
  env "$@" timeout -k 10 60 mpirun --allow-run-as-root --oversubscribe -x GPT2_EMU_THREADS -x GPT2_EMU_DEVICE_COUNT \
    -x GPT2_EMU_STREAMS -x GPT2_EMU_STREAM_SEED -x GPT2_TEST_DROP_COMM_WAIT -np 2 "$EMU" "${common[@]}" \
    --zero-stage "$Z" --output-dir "$W/$name" --log-jsonl "$W/$name.jsonl" >"$W/$name.log" 2>&1
  rc=$?
}

# compare NAME: "" when NAME reproduces the 1-rank reference, else why not.
compare() { reproduces "$W" ref "$1" "$rc"; }

timeout -k 10 60 "$EMU" "${common[@]}" --total-batch-tokens $((2 * B * T)) --output-dir "$W/ref" \
  --log-jsonl "$W/ref.jsonl" >"$W/ref.log" 2>&1 || { echo "FAIL: the 1-rank reference run failed"; tail -n 5 "$W/ref.log"; exit 1; }

for Z in 0 2; do
  for seed in 1 7; do
    name=deferred_z${Z}_s$seed
    run2 "$name" GPT2_EMU_STREAMS=deferred GPT2_EMU_STREAM_SEED=$seed
    what="deferred streams (seed $seed), 2 ranks, ZeRO-$Z vs 1 rank x 2 micro-batches"
    summary=$(grep -m1 -o "emu: deferred streams (seed $seed): [0-9]* queued items run at [0-9]* synchronisation points" "$W/$name.log")
    items=$(echo "$summary" | sed -E 's/.*: ([0-9]+) queued.*/\1/')
    if [ -z "$summary" ] || [ "${items:-0}" -lt 100 ]; then bad "$what: the run was not deferred (${summary:-no summary line})"
    elif msg=$(compare "$name"); then pass "$what: $msg [$summary]"
    else bad "$what: $msg"; tail -n 5 "$W/$name.log"; fi
  done
  for drop in before after; do
    name=drop_${drop}_z$Z
    run2 "$name" GPT2_EMU_STREAMS=deferred GPT2_EMU_STREAM_SEED=1 GPT2_TEST_DROP_COMM_WAIT=$drop
    what="deferred streams, ZeRO-$Z, GPT2_TEST_DROP_COMM_WAIT=$drop"
    grep -q "test hook GPT2_TEST_DROP_COMM_WAIT=$drop" "$W/$name.log" || bad "$what: the test hook did not report itself"
    if msg=$(compare "$name"); then bad "$what: the missing wait went unnoticed: $msg"
    else pass "$what: detected, the comparison fails as it must: $msg"; fi
  done
done

# The synchronous default runs every collective at its call: the hazard is invisible there.
Z=0
run2 sync_drop_before GPT2_TEST_DROP_COMM_WAIT=before
if msg=$(compare sync_drop_before); then pass "synchronous mode, ZeRO-0, wait before dropped: unnoticed, as expected: $msg"
else bad "synchronous mode, ZeRO-0, wait before dropped: $msg"; fi

[ $fail = 0 ] && echo "comm_stream_test: all passed"
exit $fail
