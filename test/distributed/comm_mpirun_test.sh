#!/usr/bin/env bash
# Multi-rank tests of distributed/ under mpirun (run by `make test` from the repo root):
#   1. the communicator test suite (CommTest.*) with 2 and 3 ranks (3: uneven
#      ZeRO shards), every test of it run and passed (`make test` runs only the
#      world-1 cases, CommWorldOne.*, standalone); then the same suite against
#      the NCCL communicator on emulated devices, with its own cases (CommNccl.*),
#      and a collective failing while it runs (CommNcclFault.*, planted by
#      GPT2_EMU_NCCL_FAIL_AT=2), where the CUDA headers let comm_nccl_test build;
#   2. dist_selfcheck's layout lines under mpirun;
#   3. preemption: SIGUSR1 sent to ONE rank stops every rank at the same step
#      boundary with exit status 75, and --resume finishes the run from there.
# Every launch has a timeout; the temp dir is removed on exit.
set -u
COMM_TEST=${COMM_TEST:-build/test/distributed/comm_test}
COMM_NCCL_TEST=${COMM_NCCL_TEST:-build/test/distributed/comm_nccl_test}
SELFCHECK=${SELFCHECK:-build/distributed/dist_selfcheck}
for b in "$COMM_TEST" "$SELFCHECK"; do
  [ -x "$b" ] || { echo "FAIL: $b not built (make $b)"; exit 1; }
done
MPIRUN=(mpirun --allow-run-as-root --oversubscribe)
WORK=$(mktemp -d "${TMPDIR:-/tmp}/dist_mpirun.XXXXXX")
bg_pid=""
cleanup() {
  [ -n "$bg_pid" ] && kill "$bg_pid" 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
fail=0 skipped=
note() { printf '%s\n' "$*"; }

# run_suite NAME BINARY FILTER [VAR=VALUE]: the binary under mpirun -np 2 and 3.
# Without VAR it gets no filter: it picks its suites itself at world > 1, and
# FILTER (listed beforehand) guards that choice. With VAR it runs FILTER with VAR
# exported to every rank. Every listed test must run and pass; mpirun's status
# covers the failures of every rank (only rank 0 prints the summary).
run_suite() {
  local name=$1 bin=$2 filter=$3 var=${4:-} n np log
  local launch=("${MPIRUN[@]}") test_args=(--gtest_color=no)
  n=$(timeout -k 10 60 "$bin" --gtest_filter="$filter" --gtest_list_tests | grep -c '^  ')
  [ "$n" -gt 0 ] || { note "FAIL $name lists no $filter tests"; fail=1; return; }
  if [ -n "$var" ]; then
    launch=(env "$var" "${MPIRUN[@]}" -x "${var%%=*}")
    test_args+=(--gtest_filter="$filter")
  fi
  for np in 2 3; do
    log=$WORK/${name}_$np.log
    if timeout -k 10 120 "${launch[@]}" -np "$np" "$bin" "${test_args[@]}" >"$log" 2>&1 &&
       grep -qE "^\[  PASSED  \] $n tests?\.$" "$log" && ! grep -q 'SKIPPED' "$log"; then
      note "PASS $name -np $np: $(grep -E '^\[  PASSED  \]' "$log") (all $n of $filter${var:+ with $var})"
    else
      note "FAIL $name -np $np (want all $n $filter tests run and passed${var:+ with $var})"
      tail -n 40 "$log"; fail=1
    fi
  done
}
run_suite comm_test "$COMM_TEST" 'CommTest.*'
if [ -x "$COMM_NCCL_TEST" ]; then
  run_suite comm_nccl_test "$COMM_NCCL_TEST" 'CommTest.*:CommNccl.*'
  run_suite comm_nccl_fault "$COMM_NCCL_TEST" 'CommNcclFault.*' GPT2_EMU_NCCL_FAIL_AT=2
elif [ -f "${CUDA_HOME:-/usr/local/cuda}/include/nccl.h" ]; then
  note "FAIL $COMM_NCCL_TEST not built (make $COMM_NCCL_TEST)"; fail=1
else
  note "SKIP comm_nccl_test: no CUDA headers with nccl.h, the NCCL communicator is not built"
  skipped+=" comm_nccl_test"
fi

# Layout: 3 ranks on this one machine -> ranks 0..2, local ranks 0..2, one node.
out=$(timeout -k 10 60 "${MPIRUN[@]}" -np 3 "$SELFCHECK" 2>&1); rc=$?
ok=0
for r in 0 1 2; do
  grep -q "^selfcheck rank=$r world=3 local_rank=$r local_world=3 node=0 num_nodes=1 .* launch=mpirun .*collectives=ok" <<<"$out" && ok=$((ok + 1))
done
if [ $rc = 0 ] && [ $ok = 3 ]; then note "PASS selfcheck layout under mpirun -np 3"
else note "FAIL selfcheck layout (rc=$rc, $ok/3 lines)"; printf '%s\n' "$out"; fail=1; fi

# Preemption through one rank only.
log=$WORK/preempt.log
timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$SELFCHECK" --max-steps 400 --step-ms 20 \
  --output-dir "$WORK" >"$log" 2>&1 &
bg_pid=$!
rank1_pid=""
for _ in $(seq 300); do
  rank1_pid=$(sed -n 's/^selfcheck rank=1 .* pid=\([0-9]*\) .*/\1/p' "$log")
  [ -n "$rank1_pid" ] && grep -q '^selfcheck: step 5 ' "$log" && break
  sleep 0.05
done
[ -n "$rank1_pid" ] && kill -USR1 "$rank1_pid"
wait "$bg_pid"; rc=$?; bg_pid=""
saved=$(cat "$WORK/selfcheck_step" 2>/dev/null || echo none)
last=$(grep -oE '^selfcheck: step [0-9]+' "$log" | tail -n 1 | awk '{print $3}')
if [ $rc = 75 ] && [ "$saved" = "${last:-x}" ] && [ "$saved" -lt 400 ] 2>/dev/null; then
  note "PASS SIGUSR1 to rank 1 (pid $rank1_pid): all ranks stopped after step $saved, exit 75"
else
  note "FAIL preemption: rc=$rc saved=$saved last logged step=${last:-none}"; cat "$log"; fail=1
fi
out=$(timeout -k 10 120 "${MPIRUN[@]}" -np 2 "$SELFCHECK" --max-steps 400 --step-ms 1 \
  --output-dir "$WORK" --resume 2>&1); rc=$?
if [ $rc = 0 ] && grep -q "^selfcheck: training from step $saved to 400" <<<"$out" &&
   grep -q '^selfcheck: finished 400 steps' <<<"$out" && [ "$(cat "$WORK/selfcheck_step")" = 400 ]; then
  note "PASS --resume continued from step $saved to 400"
else
  note "FAIL resume: rc=$rc"; printf '%s\n' "$out" | tail -n 20; fail=1
fi

# A part that could not run makes the whole a counted skip (77), not a pass.
[ $fail = 0 ] && [ -n "$skipped" ] && { note "comm_mpirun_test: skipped$skipped"; exit 77; }
[ $fail = 0 ] && note "comm_mpirun_test: all passed"
exit $fail
