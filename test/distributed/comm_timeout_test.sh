#!/usr/bin/env bash
# test-timeout: 240
# Faults of one rank under mpirun -np 2 must not leave the other blocked forever
# (--comm-timeout, distributed/watchdog.h). A small model on a synthetic shard;
# rank 1 misbehaves at the start of step 3 through the trainer's test hook
# (GPT2_TEST_HANG_* / GPT2_TEST_EXIT_*, train/trainer.cpp):
#   1. CPU backend, rank 1 hangs, --comm-timeout 5: the job exits non-zero
#      within 20 s, rank 0's stderr names itself, the MPI collective and the 5 s;
#      the same run with --comm-timeout 0 is still waiting after 8 s (killed);
#   2. the emulated CUDA backend (NCCL path, two emulated devices): at ZeRO-2
#      rank 0 times out in the NCCL reduce_scatter_v of the backward, at ZeRO-0
#      in the NCCL all-reduce of the gradients (the step's first collective:
#      the loss stays on the device until the gradient norm's wait);
#   3. rank 1 exits 1 (--comm-timeout 0, so not the watchdog): mpirun ends the
#      job non-zero within 20 s;
#   4. a healthy run with --comm-timeout 5 and checkpoints is not disturbed;
#      --comm-timeout refuses negative and malformed values.
set -u
cd "$(dirname "$0")/../.."
. test/distributed/prologue.sh comm_timeout ./train_gpt2cu
EMU=build/train_gpt2cu_emu
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2)

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 40000 512
[ -s "$W/train.bin" ] || { echo "FAIL: could not write the synthetic shard"; exit 1; }
common=(--model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=512,padded_vocab_size=512
        -B 4 -T 32 --threads 1 --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin")
HANG=(-x GPT2_TEST_HANG_RANK=1 -x GPT2_TEST_HANG_AT_STEP=3)
DIE=(-x GPT2_TEST_EXIT_RANK=1 -x GPT2_TEST_EXIT_AT_STEP=3)

# launch NAME LIMIT MPIRUN_ARGS... -- PROGRAM_ARGS...: runs under `timeout LIMIT`,
# sets rc and secs (wall seconds), output in $W/NAME.{out,err}.
launch() {
  local name=$1 limit=$2 t0; shift 2
  local mpi=() ; while [ "$1" != -- ]; do mpi+=("$1"); shift; done; shift
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "${MPIRUN[@]}" "${mpi[@]}" "$@" >"$W/$name.out" 2>"$W/$name.err"
  rc=$?
  secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
}
# timed_out NAME KIND CALL: exit non-zero within 20 s, the rank-prefixed message on stderr.
timed_out() {
  local name=$1 kind=$2 call=$3 msg
  msg="^error: rank 0/2 \(.*\): $kind $call did not complete within 5 s \(a peer rank died or hangs\); aborting$"
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] &&
     awk -v s="$secs" 'BEGIN { exit !(s < 20) }' && grep -qE "$msg" "$W/$name.err" &&
     grep -q '^step     2/' "$W/$name.out"; then
    pass "$name: exit $rc after $secs s: $(grep -E "$msg" "$W/$name.err")"
  else
    bad "$name: exit $rc after $secs s, want non-zero within 20 s and '$kind $call ... 5 s' on stderr"
    tail -n 15 "$W/$name.err" "$W/$name.out"
  fi
}

# --- 1. CPU: rank 1 hangs ------------------------------------------------------------------
launch cpu_hang 60 "${HANG[@]}" -- ./train_gpt2cu --device cpu "${common[@]}" --max-steps 8 --comm-timeout 5
timed_out cpu_hang mpi all_reduce
launch cpu_hang_no_timeout 8 "${HANG[@]}" -- ./train_gpt2cu --device cpu "${common[@]}" --max-steps 8 --comm-timeout 0
if [ "$rc" = 124 ] && grep -q '^step     2/' "$W/cpu_hang_no_timeout.out"; then
  pass "cpu_hang_no_timeout: --comm-timeout 0 still waiting at 8 s (killed by timeout, gone after $secs s)"
else
  bad "cpu_hang_no_timeout: exit $rc after $secs s, want a run still blocked at 8 s (124)"
  tail -n 5 "$W/cpu_hang_no_timeout.err"
fi

# --- 2. emulated CUDA + NCCL: rank 1 hangs, rank 0 waits in the ZeRO-2 exchange -------------
if [ -x "$EMU" ]; then
  launch emu_nccl_hang 120 -x GPT2_EMU_DEVICE_COUNT=2 "${HANG[@]}" -- \
    "$EMU" --device cuda "${common[@]}" --max-steps 8 --zero-stage 2 --comm-timeout 5
  if grep -q 'nccl (buffers)' "$W/emu_nccl_hang.out"; then timed_out emu_nccl_hang nccl reduce_scatter_v
  else bad "emu_nccl_hang: the run did not use the NCCL communicator"; tail -n 10 "$W/emu_nccl_hang.err"; fi
  launch emu_zero0_hang 120 -x GPT2_EMU_DEVICE_COUNT=2 "${HANG[@]}" -- \
    "$EMU" --device cuda "${common[@]}" --max-steps 8 --zero-stage 0 --comm-timeout 5
  timed_out emu_zero0_hang nccl all_reduce
else
  bad "emu_nccl_hang: $EMU not built (make test builds it)"
fi

# --- 3. rank 1 dies ------------------------------------------------------------------------
launch cpu_exit 60 "${DIE[@]}" -- ./train_gpt2cu --device cpu "${common[@]}" --max-steps 8 --comm-timeout 0
if [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ] && awk -v s="$secs" 'BEGIN { exit !(s < 20) }' &&
   grep -q 'rank 1/2 (.*): test hook: exiting before step 3' "$W/cpu_exit.err"; then
  pass "cpu_exit: rank 1 exited 1 at step 3; mpirun ended the job with exit $rc after $secs s"
else
  bad "cpu_exit: exit $rc after $secs s, want non-zero within 20 s"; tail -n 10 "$W/cpu_exit.err"
fi

# --- 4. a healthy run, and the flag's validation -------------------------------------------
launch healthy 60 -- ./train_gpt2cu --device cpu "${common[@]}" --max-steps 6 --checkpoint-every 2 \
  --output-dir "$W/ckpt" --comm-timeout 5
if [ "$rc" = 0 ] && grep -q '^step     6/6' "$W/healthy.out" && [ -s "$W/ckpt/model.bin" ]; then
  pass "healthy: 6 steps with checkpoints under --comm-timeout 5, exit 0 ($secs s)"
else
  bad "healthy run: exit $rc"; tail -n 10 "$W/healthy.err"
fi
for v in -1 abc; do
  out=$(./train_gpt2cu --comm-timeout "$v" 2>&1); rc=$?
  if [ "$rc" = 2 ] && [[ $out == *"--comm-timeout: invalid value '$v'"* ]]; then
    pass "--comm-timeout $v refused: $out"
  else
    bad "--comm-timeout $v: exit $rc: $out"
  fi
done

[ $fail = 0 ] && echo "comm_timeout_test: all passed"
exit $fail
