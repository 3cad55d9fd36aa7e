#!/usr/bin/env bash
# test-timeout: 150
# "A dead peer ends the job, always": every rank exits non-zero
# within --comm-timeout + 10 s (kCommTimeoutSlackSeconds, distributed/watchdog.h)
# even when ncclCommAbort never returns. The emulated CUDA trainer under
# mpirun -np 2 with the emulator's switches (docs/emulator.md):
#   a. rank 1 freezes inside its 4th collective (GPT2_EMU_NCCL_FREEZE_RANK=1
#      GPT2_EMU_NCCL_FREEZE_AT=4) and every abort blocks (GPT2_EMU_NCCL_ABORT_BLOCKS=1),
#      --comm-timeout 3: the job exits non-zero within 13 s of the freeze; the
#      watchdog's message names the NCCL call;
#   b. the 2nd collective fails while running on every rank (GPT2_EMU_NCCL_FAIL_AT=2)
#      and aborts block, no --comm-timeout: the error unwinds into the
#      communicator's ncclCommAbort, which blocks, and the exit deadline ends each
#      rank 5 s later (exit 1, "ncclCommAbort did not return within 5 s (aborting
#      after: <the collective's error>)");
#   c. without ABORT_BLOCKS the same failure ends at once (the deadline is disarmed).
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh abort_deadline "$EMU"

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256 || { echo "FAIL: shard"; exit 1; }
common=(--device cuda --model d1 --config n_embd=32,n_head=2,max_seq=32,vocab_size=256,padded_vocab_size=256
        -B 2 -T 16 --threads 1 --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin" --max-steps 6)
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 -x GPT2_EMU_DEVICE_COUNT=2)

# run NAME MARK LIMIT ARGS...: the job in the background; t_mark is when MARK first
# appears on its stderr (or the start), secs the time from then to its end.
run() {
  local name=$1 mark=$2 limit=$3 t0 t_mark=; shift 3
  t0=$(date +%s.%N)
  timeout -k 5 "$limit" "$@" >"$W/$name.out" 2>"$W/$name.err" &
  local pid=$!
  while kill -0 "$pid" 2>/dev/null; do
    [ -z "$t_mark" ] && grep -q -- "$mark" "$W/$name.err" 2>/dev/null && t_mark=$(date +%s.%N)
    sleep 0.1
  done
  wait "$pid"; rc=$?
  secs=$(awk -v a="${t_mark:-$t0}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
  marked=${t_mark:+yes}
}
within() { awk -v s="$secs" -v l="$1" 'BEGIN { exit !(s < l) }'; }
ended_non_zero() { [ "$rc" != 0 ] && [ "$rc" != 124 ] && [ "$rc" != 137 ]; }

# --- a. a frozen rank, aborts that block: the watchdog still ends the job -----------------
run freeze 'freezes in collective 4' 60 "${MPIRUN[@]}" -x GPT2_EMU_NCCL_FREEZE_RANK=1 -x GPT2_EMU_NCCL_FREEZE_AT=4 \
  -x GPT2_EMU_NCCL_ABORT_BLOCKS=1 "$EMU" "${common[@]}" --comm-timeout 3
msg='error: rank [01]/2 \(.*\): nccl [a-z_]* did not complete within 3 s \(a peer rank died or hangs\); aborting'
if ended_non_zero && [ -n "$marked" ] && within 13 && grep -qE "$msg" "$W/freeze.err"; then
  pass "freeze: exit $rc $secs s after rank 1 froze: $(grep -m1 -E "$msg" "$W/freeze.err")"
else
  bad "freeze: exit $rc, $secs s after the freeze (seen: ${marked:-no}), want non-zero within 13 s and '$msg'"
  tail -n 15 "$W/freeze.err"
fi

# --- b. a failed collective, an abort that blocks: the exit deadline ends each rank --------
run fail_blocks 'blocks forever' 60 "${MPIRUN[@]}" -x GPT2_EMU_NCCL_FAIL_AT=2 -x GPT2_EMU_NCCL_ABORT_BLOCKS=1 \
  "$EMU" "${common[@]}" --comm-timeout 0
msg='error: rank [01]/2 \(.*\): ending the process: ncclCommAbort did not return within 5 s \(aborting after: .*injected by GPT2_EMU_NCCL_FAIL_AT=2'
if ended_non_zero && [ -n "$marked" ] && within 10 && grep -qE "$msg" "$W/fail_blocks.err"; then
  pass "fail_blocks: exit $rc $secs s after the abort blocked: $(grep -m1 -E "$msg" "$W/fail_blocks.err")"
else
  bad "fail_blocks: exit $rc, $secs s after the abort blocked (seen: ${marked:-no}), want non-zero within 10 s and '$msg'"
  tail -n 15 "$W/fail_blocks.err"
fi

# --- c. the same failure with an abort that returns: no deadline message, a prompt end -----
run fail_returns 'injected by' 60 "${MPIRUN[@]}" -x GPT2_EMU_NCCL_FAIL_AT=2 "$EMU" "${common[@]}" --comm-timeout 0
if ended_non_zero && within 5 && grep -q 'injected by GPT2_EMU_NCCL_FAIL_AT=2' "$W/fail_returns.err" &&
   ! grep -q 'ending the process' "$W/fail_returns.err"; then
  pass "fail_returns: exit $rc within $secs s of the error, no exit deadline fired"
else
  bad "fail_returns: exit $rc after $secs s"; tail -n 15 "$W/fail_returns.err"
fi

[ $fail = 0 ] && echo "abort_deadline_test: all passed"
exit $fail
