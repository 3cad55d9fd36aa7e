#!/usr/bin/env bash
# slurm_smoke_test.sh - dist/ under a real Slurm cluster on loopback (munged,
# slurmctld, two slurmd nodes; test/slurm/local_slurm_start.sh), with the
# project's MPI self-check program (build/dist/dist_selfcheck):
#   1. srun -N 2 -n 2 and srun -N 2 -n 4: rank, world, local rank, node and
#      hostname of every rank as Slurm placed them;
#   2. an sbatch job running it standalone, with srun and with mpirun;
#   3. a rank whose SLURM_PROCID disagrees with MPI fails with a clear error;
#   4. preemption through scripts/slurm/run_train.sh (the body of the sbatch
#      scripts): scancel --signal=USR1 to the job's tasks, then SIGTERM to the
#      batch shell (passed on as SIGUSR1); each time every rank stops at one
#      step boundary, the job requeues itself and resumes from the saved step
#      until it finishes.
# Needs root and: munge slurmd slurmctld slurm-client libpmix-dev openmpi-bin.
# Everything lives in a temp dir; the cluster and its jobs are stopped on exit.
set -u
cd "$(dirname "$0")/../.."
SELFCHECK=$PWD/build/dist/dist_selfcheck
[ -x "$SELFCHECK" ] || { echo "FAIL: $SELFCHECK not built (make build/dist/dist_selfcheck)"; exit 1; }
BASE=$(mktemp -d "${TMPDIR:-/tmp}/gpt2_slurm.XXXXXX")
W=$BASE/work
mkdir -p "$W"
cleanup() {
  timeout 120 bash test/slurm/local_slurm_stop.sh "$BASE" --purge >/dev/null 2>&1
}
trap cleanup EXIT
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }

if ! timeout 120 bash test/slurm/local_slurm_start.sh "$BASE" >"$W/start.log" 2>&1; then
  cat "$W/start.log"; echo "FAIL: cluster did not start"; exit 1
fi
# Only SLURM_CONF: what Open MPI needs inside tasks comes from the cluster's TaskProlog.
export SLURM_CONF=$BASE/etc/slurm.conf

# expect_ranks DESC OUTPUT LINE_REGEX... : every regex matches a selfcheck line
expect_ranks() {
  local desc=$1 out=$2 missing=0; shift 2
  for re in "$@"; do grep -qE "^selfcheck $re .*collectives=ok" <<<"$out" || { missing=1; echo "  missing: $re"; }; done
  if [ $missing = 0 ]; then pass "$desc"; else bad "$desc"; printf '%s\n' "$out" | sed 's/^/  | /'; fi
}

# --- 1. direct srun launches across the two nodes
out=$(timeout 120 srun -N 2 -n 2 "$SELFCHECK" 2>&1)
expect_ranks "srun -N 2 -n 2" "$out" \
  "rank=0 world=2 local_rank=0 local_world=1 node=0 num_nodes=2 host=node1 launch=srun" \
  "rank=1 world=2 local_rank=0 local_world=1 node=1 num_nodes=2 host=node2 launch=srun"
out=$(timeout 120 srun -N 2 -n 4 "$SELFCHECK" 2>&1)
expect_ranks "srun -N 2 -n 4" "$out" \
  "rank=0 world=4 local_rank=0 local_world=2 node=0 num_nodes=2 host=node1 launch=srun" \
  "rank=1 world=4 local_rank=1 local_world=2 node=0 num_nodes=2 host=node1 launch=srun" \
  "rank=2 world=4 local_rank=0 local_world=2 node=1 num_nodes=2 host=node2 launch=srun" \
  "rank=3 world=4 local_rank=1 local_world=2 node=1 num_nodes=2 host=node2 launch=srun"

# wait_job ID SECONDS: until the job has left the queue (or has COMPLETED)
wait_job() {
  local id=$1 limit=$2 st
  for _ in $(seq $((limit * 10))); do
    st=$(timeout 10 squeue -h -j "$id" -o %T 2>/dev/null)
    [ -z "$st" ] && return 0
    sleep 0.1
  done
  return 1
}

# --- 2. an sbatch job: standalone, srun and mpirun inside the allocation
cat >"$W/modes.sbatch" <<EOF
#!/bin/bash
#SBATCH -J modes -N 2 -n 2 -o $W/modes-%j.out
"$SELFCHECK"; echo "standalone rc=\$?"
srun "$SELFCHECK"; echo "srun rc=\$?"
mpirun "$SELFCHECK"; echo "mpirun rc=\$?"
EOF
jid=$(timeout 30 sbatch --parsable "$W/modes.sbatch")
if [ -z "$jid" ] || ! wait_job "$jid" 120; then
  bad "sbatch job did not finish"; [ -n "$jid" ] && timeout 10 scancel "$jid"
else
  out=$(cat "$W/modes-$jid.out")
  expect_ranks "sbatch: standalone/srun/mpirun inside the job" "$out" \
    "rank=0 world=1 local_rank=0 local_world=1 node=0 num_nodes=1 host=node1 launch=standalone" \
    "rank=0 world=2 local_rank=0 local_world=1 node=0 num_nodes=2 host=node1 launch=srun" \
    "rank=1 world=2 local_rank=0 local_world=1 node=1 num_nodes=2 host=node2 launch=srun" \
    "rank=0 world=2 local_rank=0 local_world=1 node=0 num_nodes=2 host=node1 launch=mpirun" \
    "rank=1 world=2 local_rank=0 local_world=1 node=1 num_nodes=2 host=node2 launch=mpirun"
  for m in standalone srun mpirun; do grep -q "^$m rc=0" <<<"$out" || bad "sbatch: $m exit status"; done
fi

# --- 3. Slurm and MPI disagreeing is an error naming the rank
out=$(timeout 120 srun -N 1 -n 2 bash -c 'SLURM_PROCID=$((1 - SLURM_PROCID)) exec "$0"' "$SELFCHECK" 2>&1); rc=$?
if [ $rc != 0 ] && grep -q "error: rank 0/2 (node1): launched by srun but Slurm and MPI disagree: SLURM_PROCID=1 but MPI rank is 0" <<<"$out"; then
  pass "SLURM_PROCID mismatch rejected (exit $rc)"
else
  bad "SLURM_PROCID mismatch not rejected (exit $rc)"; printf '%s\n' "$out" | sed 's/^/  | /'
fi

# --- 4. preemption, requeue and resume through scripts/slurm/run_train.sh
cat >"$W/preempt.sbatch" <<EOF
#!/bin/bash
#SBATCH -J preempt -N 2 -n 2 -o $W/preempt-%j.out --open-mode=append --requeue
exec scripts/slurm/run_train.sh
EOF
export GPT2_TRAIN_BIN=$SELFCHECK
export GPT2_TRAIN_ARGS="--max-steps 200 --step-ms 25 --output-dir $W/preempt"
mkdir -p "$W/preempt"
jid=$(timeout 30 sbatch --parsable "$W/preempt.sbatch")
log=$W/preempt-$jid.out
# wait_for REGEX COUNT SECONDS: until the job log has COUNT lines matching REGEX
wait_for() {
  for _ in $(seq $(($3 * 10))); do
    local n; n=$(grep -cE "$1" "$log" 2>/dev/null)
    [ "${n:-0}" -ge "$2" ] && return 0; sleep 0.1
  done
  return 1
}
# requeued jobs become eligible only ~2 minutes later; a test need not wait
release() {
  for _ in $(seq 100); do
    [ "$(timeout 10 squeue -h -j "$jid" -o %T 2>/dev/null)" = PENDING ] && break; sleep 0.1
  done
  timeout 10 scontrol update JobId="$jid" StartTime=now
}
ok=1
# Run 1: SIGUSR1 to the tasks, as `#SBATCH --signal=USR1@T` delivers it.
wait_for '^selfcheck: step 10 ' 1 60 || { ok=0; echo "  run 1 did not reach step 10"; }
timeout 10 scancel --signal=USR1 "$jid"
wait_for 'requeueing job' 1 60 || { ok=0; echo "  no requeue after USR1"; }
release
# Run 2: SIGTERM to the batch shell only; run_train.sh passes it on as SIGUSR1.
wait_for '^selfcheck: training from step' 2 60 && wait_for '^selfcheck: step ' 12 60 ||
  { ok=0; echo "  run 2 did not start"; }
timeout 10 scancel --batch --signal=TERM "$jid"
wait_for 'requeueing job' 2 60 || { ok=0; echo "  no requeue after TERM"; }
release
# Run 3 finishes.
wait_job "$jid" 120 || { ok=0; echo "  job did not finish"; timeout 10 scancel "$jid"; }
saved=($(sed -n 's/^selfcheck: stop signal \([0-9]*\) seen, saved step \([0-9]*\), exiting 75$/\1:\2/p' "$log"))
resumed=($(sed -n 's/^selfcheck: training from step \([0-9]*\) to 200$/\1/p' "$log"))
# Both stops arrive as SIGUSR1 (10 on Linux x86/arm).
if [ $ok = 1 ] && [ "${#saved[@]}" = 2 ] && [ "${saved[0]%%:*}" = 10 ] && [ "${saved[1]%%:*}" = 10 ] &&
   [ "${resumed[*]}" = "0 ${saved[0]#*:} ${saved[1]#*:}" ] &&
   grep -q '^selfcheck: finished 200 steps' "$log" && grep -q '^srun exited with status 0' "$log" &&
   [ "$(cat "$W/preempt/selfcheck_step")" = 200 ]; then
  pass "preemption: USR1 stop at step ${saved[0]#*:}, TERM stop at step ${saved[1]#*:}, resumed to 200 after 2 requeues"
else
  bad "preemption/requeue (saved: ${saved[*]:-none}; resumed from: ${resumed[*]:-none})"
  grep -v '^selfcheck: step' "$log" | sed 's/^/  | /'
fi

[ $fail = 0 ] && echo "slurm_smoke_test: all passed"
exit $fail
