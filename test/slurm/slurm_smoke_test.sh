#!/usr/bin/env bash
# test-timeout: 900
# slurm_smoke_test.sh - distributed/ under a real Slurm cluster on loopback (munged,
# slurmctld, two slurmd nodes; test/slurm/local_slurm_start.sh), with the
# project's MPI self-check program (build/distributed/dist_selfcheck):
#   0. the cluster's PMIx fences are barriers (build/test/slurm/pmix_barrier_check): no
#      rank leaves the fence that ends MPI_Init before the last rank has entered it;
#   1. srun -N 2 -n 2 and srun -N 2 -n 4: rank, world, local rank, node and
#      hostname of every rank as Slurm placed them;
#   2. an sbatch job running it standalone, with srun and with mpirun;
#   3. a rank whose SLURM_PROCID disagrees with MPI fails with a clear error;
#   4. preemption through scripts/slurm/run_train.sh (the body of the sbatch
#      scripts): scancel --signal=USR1 to the job's tasks, then SIGTERM to the
#      batch shell (passed on as SIGUSR1); each time every rank stops at one
#      step boundary, the job requeues itself and resumes from the saved step
#      until it finishes;
#   5. training: `srun -N 2 -n 2 ./train_gpt2cu` logs the same losses and ends with
#      the same weights as `mpirun -np 2`; scripts/slurm/train_cpu.sbatch (with
#      test-sized overrides) preempted with `scancel --signal=USR1` checkpoints,
#      requeues itself and resumes to the same losses and weights;
#   5b. the CUDA backend on the emulator (build/train_gpt2cu_emu --device cuda, ZeRO-2,
#      fp32): `srun -N 2 -n 2 --mpi=pmix` against `mpirun -np 2`, and
#      scripts/slurm/train_multinode_gpus.sbatch (test-sized overrides) preempted with
#      `scancel --signal=USR1`, requeued and resumed, bitwise equal to mpirun;
#   5c. the same without MPI: `srun -N 2 -n 2 --mpi=none` (ranks from Slurm's variables,
#      TCP rendezvous, the emulated NCCL's socket transport) bitwise equal to mpirun, and
#      scripts/slurm/train_multinode_gpus_nompi.sbatch preempted, requeued, resumed;
#   6. the fine-tuning recipe (scripts/finetune.sh) with LAUNCH="srun -N 2 -n 2".
# Needs root and: munge slurmd slurmctld slurm-client libpmix-dev openmpi-bin.
# Everything lives in a temp dir; the cluster and its jobs are stopped on exit.
set -u
cd "$(dirname "$0")/../.."
SELFCHECK=$PWD/build/distributed/dist_selfcheck
[ -x "$SELFCHECK" ] || { echo "FAIL: $SELFCHECK not built (make build/distributed/dist_selfcheck)"; exit 1; }
BASE=$(mktemp -d "${TMPDIR:-/tmp}/gpt2_slurm.XXXXXX")
W=$BASE/work
mkdir -p "$W"
cleanup() {
  [ -n "${KEEP:-}" ] && { echo "KEEP: cluster left running in $BASE"; return; }
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

# The mpirun reference runs of sections 5 and 5b need no cluster: they run in the background
# from here on, beside sections 1-4 (which mostly wait on Slurm), and section 4b waits for them.
EMU=build/train_gpt2cu_emu
python3 test/distributed/synthetic_shard.py "$W/train.bin" 40000 512
common=(--device cpu --model d16 --config n_embd=64,n_head=2,max_seq=64,vocab_size=512,padded_vocab_size=512
        -B 4 -T 32 --total-batch-tokens 256 --lr 1e-3 --warmup-steps 2 --weight-decay 0.1 --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin" --max-steps 40 --zero-stage 1)
python3 test/distributed/synthetic_shard.py "$W/emu_train_000.bin" 20000 512
cp "$W/emu_train_000.bin" "$W/emu_val_000.bin"  # the GPU script names a val glob too (unused: --val-every 0)
# --tf32 on: flash attention's single tf32 products, the cheaper emulated path (3xTF32
# triples the mma); every comparison below is between runs of the same binary, bitwise.
ecommon=(--device cuda --dtype fp32 --tf32 on --model d2 --config n_embd=64,n_head=2,max_seq=64,vocab_size=512,padded_vocab_size=512
         -B 2 -T 32 --total-batch-tokens 128 --lr 1e-3 --warmup-steps 2 --weight-decay 0.1 --threads 1
         --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/emu_train_*.bin" --max-steps 200 --zero-stage 2)
references() {
  if [ -x ./train_gpt2cu ]; then
    timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe -np 2 ./train_gpt2cu "${common[@]}" \
      --output-dir "$W/t_mpirun" --log-jsonl "$W/t_mpirun.jsonl" >"$W/t_mpirun.log" 2>&1
    echo $? > "$W/t_mpirun.rc"
  fi
  # mpirun puts both ranks on this host: one emulated GPU each (one emulator worker per rank:
  # cheap and deterministic). OMP_NUM_THREADS=1, as the sbatch scripts set it (section 5b).
  if [ -x "$EMU" ]; then
    GPT2_EMU_THREADS=1 GPT2_EMU_DEVICE_COUNT=2 OMP_NUM_THREADS=1 timeout -k 10 240 mpirun --allow-run-as-root \
      --oversubscribe -x GPT2_EMU_THREADS -x OMP_NUM_THREADS -x GPT2_EMU_DEVICE_COUNT -np 2 "$EMU" "${ecommon[@]}" \
      --output-dir "$W/e_mpirun" --log-jsonl "$W/e_mpirun.jsonl" >"$W/e_mpirun.log" 2>&1
    echo $? > "$W/e_mpirun.rc"
  fi
}
references &
references_pid=$!

# expect_ranks DESC OUTPUT LINE_REGEX... : every regex matches a selfcheck line
expect_ranks() {
  local desc=$1 out=$2 missing=0; shift 2
  for re in "$@"; do grep -qE "^selfcheck $re .*collectives=ok" <<<"$out" || { missing=1; echo "  missing: $re"; }; done
  if [ $missing = 0 ]; then pass "$desc"; else bad "$desc"; printf '%s\n' "$out" | sed 's/^/  | /'; fi
}

# --- 0. a rank leaves a PMIx barrier only once every rank has entered it; otherwise a rank
# that leaves MPI_Init early sends to a peer still inside it, which dies of SIGSEGV.
BARRIER_CHECK=$PWD/build/test/slurm/pmix_barrier_check
if [ -x "$BARRIER_CHECK" ]; then
  out=$(DELAY_MS=1500 timeout 60 srun -N 2 -n 4 "$BARRIER_CHECK" 2>&1)
  verdict=$(awk '/^pmix_barrier_check / {
      for (i = 2; i <= NF; i++) { split($i, kv, "="); v[kv[1]] = kv[2] }
      n++; if (v["fence_rc"] != "0,0") bad = 1
      if (v["rank"] == v["world"] - 1) last = v["entered"]
      left[n] = v["left"]; who[n] = v["rank"]
    }
    END {
      if (n != 4 || bad || last == "") { print "no result"; exit }
      for (i = 1; i <= n; i++) if (left[i] + 0.002 < last) { printf "rank %s left %.3f s before the last rank entered\n", who[i], last - left[i]; exit }
      print "ok"
    }' <<<"$out")
  if [ "$verdict" = ok ]; then pass "PMIx barrier: every rank of srun -N 2 -n 4 waited for the late one"
  else bad "PMIx barrier: $verdict"; printf '%s\n' "$out" | sed 's/^/  | /'; fi
else
  bad "$BARRIER_CHECK not built (libpmix-dev's pkg-config file missing?)"
fi

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

# job_state ID: Slurm's state of the job, empty when it cannot be read (a busy
# slurmctld must not look like a finished job)
job_state() { timeout 10 scontrol show job "$1" 2>/dev/null | grep -oE 'JobState=[A-Z_]+' | cut -d= -f2; }
job_done() {
  case "$(job_state "$1")" in
    COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) return 0 ;;
  esac
  return 1
}
# wait_job ID SECONDS: until the job has ended
wait_job() {
  local i
  for i in $(seq $(($2 * 5))); do job_done "$1" && return 0; sleep 0.2; done
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
# job_queued: job $jid has not ended (pending, running, requeued)
job_queued() { ! job_done "$jid"; }
# wait_for REGEX COUNT SECONDS: until the job log $log has COUNT lines matching
# REGEX; gives up early when the job has left the queue
wait_for() {
  local n i
  for i in $(seq $(($3 * 10))); do
    n=$(grep -cE "$1" "$log" 2>/dev/null)
    [ "${n:-0}" -ge "$2" ] && return 0
    [ $((i % 10)) = 0 ] && ! job_queued && { n=$(grep -cE "$1" "$log" 2>/dev/null); [ "${n:-0}" -ge "$2" ]; return; }
    sleep 0.1
  done
  return 1
}
# release: a requeued job becomes eligible only ~2 minutes later; a test need
# not wait. Once it is pending again, make it eligible now - but not in the same
# second as the requeue: the nodes revoked the job's credential at that second
# (1-second resolution), and a restart whose credential is dated no later is
# killed as "non-startable batch job: Job credential revoked" (the job FAILS).
release() {
  local i
  for i in $(seq 150); do
    if [ "$(job_state "$jid")" = PENDING ]; then
      sleep 2
      timeout 10 scontrol update JobId="$jid" StartTime=now && return 0
    fi
    sleep 0.2
  done
  echo "  job $jid did not become pending after the requeue (state $(job_state "$jid"))"
  return 1
}
# preempt_requeued DONE_FILE: once DONE_FILE exists (or job $jid has left the
# queue), USR1 to the job, then wait for its requeue, make it eligible and wait
# for it to finish; status 1, with the reasons printed, when any of that fails.
preempt_requeued() {
  local i status=0
  for i in $(seq 1200); do
    [ -e "$1" ] && break
    [ $((i % 20)) = 0 ] && ! job_queued && break
    sleep 0.05
  done
  timeout 10 scancel --signal=USR1 "$jid"
  wait_for 'requeueing job' 1 120 || { status=1; echo "  no requeue after USR1"; }
  release || status=1
  wait_job "$jid" 180 || { status=1; echo "  job did not finish"; timeout 10 scancel "$jid"; }
  return $status
}
ok=1
# Run 1: SIGUSR1 to the tasks, as `#SBATCH --signal=USR1@T` delivers it.
wait_for '^selfcheck: step 10 ' 1 60 || { ok=0; echo "  run 1 did not reach step 10"; }
timeout 10 scancel --signal=USR1 "$jid"
wait_for 'requeueing job' 1 60 || { ok=0; echo "  no requeue after USR1"; }
release || ok=0
# Run 2: SIGTERM to the batch shell only; run_train.sh passes it on as SIGUSR1.
run1_steps=$(grep -c '^selfcheck: step ' "$log")
wait_for '^selfcheck: training from step' 2 60 && wait_for '^selfcheck: step ' $((run1_steps + 3)) 60 ||
  { ok=0; echo "  run 2 did not start"; }
timeout 10 scancel --batch --signal=TERM "$jid"
wait_for 'requeueing job' 2 60 || { ok=0; echo "  no requeue after TERM"; }
release || ok=0
# Run 3 finishes.
wait_job "$jid" 120 || { ok=0; echo "  job did not finish"; timeout 10 scancel "$jid"; }
saved=($(sed -n 's/^selfcheck: stop (rank 0 saw signal \([0-9]*\)), saved step \([0-9]*\), exiting 75$/\1:\2/p' "$log"))
resumed=($(sed -n 's/^selfcheck: training from step \([0-9]*\) to 200$/\1/p' "$log"))
# Rank 0 prints the signal it saw itself: 10 (SIGUSR1) when it got one before
# the step boundary, 0 when only another rank had (the stop is collective).
if [ $ok = 1 ] && [ "${#saved[@]}" = 2 ] &&
   [ "${resumed[*]}" = "0 ${saved[0]#*:} ${saved[1]#*:}" ] &&
   grep -q '^selfcheck: finished 200 steps' "$log" && grep -q '^srun exited with status 0' "$log" &&
   [ "$(cat "$W/preempt/selfcheck_step")" = 200 ]; then
  pass "preemption: USR1 to the tasks stopped at step ${saved[0]#*:}, TERM to the batch shell at step ${saved[1]#*:}, resumed to 200 after 2 requeues"
else
  bad "preemption/requeue (saved: ${saved[*]:-none}; resumed from: ${resumed[*]:-none})"
  grep -v '^selfcheck: step' "$log" | sed 's/^/  | /'
fi

# --- 4b. the time limit: a 2-minute job with the sbatch scripts' --signal=USR1@T
# warning (T=40 here) checkpoints and requeues itself before Slurm kills it.
# Slurm sends the warning once, from a periodic check, to the steps running then, and up to 60 s
# earlier than asked (sbatch(1)). A 1-minute limit with T=50 put that check at the job's start,
# before srun had started the step, and the warning was lost (seen twice, once in CI). With 2 minutes
# and T=40 it comes 20 to 80 s after the start, at least 40 s before the kill.
# Not beside the background reference runs, which slow the step's start.
wait "$references_pid"  # the mpirun reference runs, started after the cluster
GPT2_TRAIN_ARGS="--max-steps 100000 --step-ms 25 --output-dir $W/timelimit"
mkdir -p "$W/timelimit"
jid=$(timeout 30 sbatch --parsable --time=2 --signal=USR1@40 "$W/preempt.sbatch")
log=$W/preempt-$jid.out
# Slurm signals the tasks one by one: rank 0 reports 10 (SIGUSR1) or 0 when another rank's signal
# reached the collective stop check first (as in section 4).
if wait_for 'requeueing job' 1 150 && grep -qE '^selfcheck: stop \(rank 0 saw signal (10|0)\), saved step [0-9]+, exiting 75$' "$log"; then
  pass "time limit: $(grep -m1 '^selfcheck: stop' "$log" | sed 's/^selfcheck: //'), requeued before the kill"
else
  bad "time limit: no checkpoint and requeue before the 2-minute limit"; sed 's/^/  | /' "$log" | grep -v 'selfcheck: step'
fi
timeout 10 scancel "$jid" 2>/dev/null

# --- 5. training: srun and a preempted, requeued sbatch job vs mpirun ---------------
if [ -x ./train_gpt2cu ]; then
  . test/distributed/compare_lib.sh
  unset GPT2_TRAIN_BIN GPT2_TRAIN_ARGS
  [ "$(cat "$W/t_mpirun.rc")" = 0 ] || bad "mpirun -np 2 training"
  if timeout -k 10 120 srun -N 2 -n 2 ./train_gpt2cu "${common[@]}" --output-dir "$W/t_srun" \
       --log-jsonl "$W/t_srun.jsonl" >"$W/t_srun.log" 2>&1 &&
     grep -q 'rank 0/2 local 0/1 node 0/2 host node1 launch srun' "$W/t_srun.log" &&
     msg=$(same_losses "$W/t_mpirun.jsonl" "$W/t_srun.jsonl") &&
     wmsg=$(same_weights "$W/t_mpirun/model.bin" "$W/t_srun/model.bin"); then
    pass "srun -N 2 -n 2 ./train_gpt2cu vs mpirun -np 2: $msg; weights $wmsg"
  else
    bad "srun training: ${msg:-run failed} ${wmsg:-}"; tail -n 20 "$W/t_srun.log" | sed 's/^/  | /'
  fi
  unset msg wmsg

  # The project's CPU sbatch script with test-sized overrides (later flags win),
  # preempted by USR1 after its first checkpoint, requeued, resumed to the end.
  log=$W/t_sbatch.out
  jid=$(timeout 30 sbatch --parsable --nodes=2 --ntasks-per-node=1 --cpus-per-task=1 --time=10 \
        -o "$log" scripts/slurm/train_cpu.sbatch "${common[@]}" --checkpoint-every 2 \
        --output-dir "$W/t_sbatch" --log-jsonl "$W/t_sbatch.jsonl")
  ok=1
  preempt_requeued "$W/t_sbatch/DONE_00000002" || ok=0
  stopped=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "$log" | head -n 1)
  [ -n "$stopped" ] || { ok=0; echo "  no checkpoint on the stop signal"; }
  grep -q "resumed from .* at step ${stopped:-x}" "$log" || { ok=0; echo "  no resume from step ${stopped:-?}"; }
  grep -q '^srun exited with status 0' "$log" || { ok=0; echo "  the final srun did not exit 0"; }
  if [ $ok = 1 ] && msg=$(same_losses "$W/t_mpirun.jsonl" "$W/t_sbatch.jsonl") &&
     wmsg=$(same_weights "$W/t_mpirun/model.bin" "$W/t_sbatch/model.bin"); then
    pass "sbatch scripts/slurm/train_cpu.sbatch: preempted at step $stopped, requeued, resumed: $msg; weights $wmsg"
  else
    bad "sbatch training with preemption: ${msg:-} ${wmsg:-} (job state $(job_state "$jid"))"
    grep -vE '^(step |\| )' "$log" | tail -n 40 | sed 's/^/  | /'
  fi
else
  bad "./train_gpt2cu not built: training under Slurm not tested"
fi

# --- 5b. the CUDA backend on the emulator under Slurm: srun and the GPU sbatch script vs mpirun ------
# build/train_gpt2cu_emu --device cuda runs the CUDA backend on emulated GPUs with NCCL
# emulated over MPI. fp32 ZeRO-2: the emulated NCCL reduces every element in a fixed ring
# order that depends only on the rank numbers (test/distributed/zero_cuda_emu_test.sh), not
# on where the ranks run, so srun's ranks on two nodes and mpirun's on one host must agree
# bit for bit, and a resumed run too (the checkpoint holds the fp32 master shards).
# --mpi=pmix is the cluster's MpiDefault anyway (Debian's Open MPI supports only PMIx).
# 200 steps (~50 ms each): long enough that the USR1 sent after the step-20 checkpoint
# lands well before the end; the whole section takes under a minute on 2 cores.
if [ -x "$EMU" ]; then
  . test/distributed/compare_lib.sh
  unset GPT2_TRAIN_BIN GPT2_TRAIN_ARGS msg wmsg
  export GPT2_EMU_THREADS=1  # one emulator worker per rank: cheap and deterministic
  # The mpirun reference (started with section 1, above) puts both ranks on this host: one
  # emulated GPU each. Under srun each node runs one rank and its emulator's default of one
  # GPU is enough.
  # OMP_NUM_THREADS=1, as the sbatch scripts set it (= --cpus-per-task). (The emulated cuBLAS,
  # OpenBLAS sgemm, pins itself to one thread: otherwise mpirun's core binding vs srun's none
  # gives 1 vs 2 threads and rounding differences of ~1e-8 in the losses.)
  [ "$(cat "$W/e_mpirun.rc")" = 0 ] || bad "mpirun -np 2 $EMU --device cuda training"
  if OMP_NUM_THREADS=1 timeout -k 10 240 srun -N 2 -n 2 --mpi=pmix "$EMU" "${ecommon[@]}" --output-dir "$W/e_srun" \
       --log-jsonl "$W/e_srun.jsonl" >"$W/e_srun.log" 2>&1 &&
     grep -q 'rank 0/2 local 0/1 node 0/2 host node1 launch srun' "$W/e_srun.log" &&
     grep -q '^| comm         nccl (buffers), mpi (host scalars)' "$W/e_srun.log" &&
     msg=$(same_losses "$W/e_mpirun.jsonl" "$W/e_srun.jsonl") &&
     wmsg=$(same_weights "$W/e_mpirun/model.bin" "$W/e_srun/model.bin"); then
    pass "srun -N 2 -n 2 --mpi=pmix $EMU --device cuda (ZeRO-2 fp32, NCCL) vs mpirun -np 2: $msg; weights $wmsg"
  else
    bad "srun $EMU --device cuda training: ${msg:-run failed or wrong launch/communicator} ${wmsg:-}"
    grep -vE '^(step |\| )' "$W/e_srun.log" | tail -n 20 | sed 's/^/  | /'
  fi
  unset msg wmsg

  # The project's multi-node GPU sbatch script running the emulated binary (GPT2_TRAIN_BIN),
  # with test-sized overrides (later flags win; --gpus-per-node=0: the test cluster has no
  # GPUs to allocate), preempted by USR1 after its first checkpoint, requeued, resumed.
  # gpu_sbatch NAME SCRIPT JOBNAME LAUNCH COMM: SCRIPT (test-sized overrides) preempted by USR1
  # after its first checkpoint, requeued and resumed; launched by LAUNCH both times, its
  # communicators COMM; the same losses and weights as mpirun's run.
  gpu_sbatch() {
    local name=$1 script=$2 jobname=$3 launch=$4 comm=$5 ok=1 stopped msg wmsg
    log=$W/$name.out
    jid=$(GPT2_TRAIN_BIN=$PWD/$EMU GPT2_DATA_PREFIX=$W/emu timeout 30 sbatch --parsable --nodes=2 --ntasks-per-node=1 \
          --cpus-per-task=1 --gpus-per-node=0 --time=10 -o "$log" "$script" \
          "${ecommon[@]}" --checkpoint-every 20 --output-dir "$W/$name" --log-jsonl "$W/$name.jsonl")
    if [ -z "$jid" ]; then
      ok=0; echo "  sbatch refused the job"
    else
      preempt_requeued "$W/$name/DONE_00000020" || ok=0
      rmdir "out/$jobname-$jid" 2>/dev/null  # the script's default output dir, unused here
    fi
    stopped=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "$log" 2>/dev/null | head -n 1)
    [ -n "$stopped" ] && [ "$stopped" -ge 20 ] && [ "$stopped" -lt 200 ] ||
      { ok=0; echo "  no checkpoint on the stop signal between steps 20 and 199 (${stopped:-none})"; }
    grep -q "resumed from .* at step ${stopped:-x} " "$log" || { ok=0; echo "  no resume from step ${stopped:-?}"; }
    [ "$(grep -c "$launch" "$log")" -ge 2 ] || { ok=0; echo "  not launched by '$launch' twice"; }
    grep -q "^| comm         $comm" "$log" || { ok=0; echo "  not the communicators '$comm'"; }
    grep -q '^srun exited with status 0' "$log" || { ok=0; echo "  the final srun did not exit 0"; }
    if [ $ok = 1 ] && msg=$(same_losses "$W/e_mpirun.jsonl" "$W/$name.jsonl") &&
       wmsg=$(same_weights "$W/e_mpirun/model.bin" "$W/$name/model.bin"); then
      pass "sbatch $script ($EMU --device cuda, ZeRO-2 fp32, $launch): preempted at step $stopped, requeued, resumed: $msg; weights $wmsg"
    else
      bad "GPU sbatch training with preemption ($script): ${msg:-} ${wmsg:-} (job state $(job_state "${jid:-0}"))"
      grep -vE '^(step |\| )' "$log" 2>/dev/null | tail -n 40 | sed 's/^/  | /'
    fi
  }
  gpu_sbatch e_sbatch scripts/slurm/train_multinode_gpus.sbatch gpt2-multinode 'launch srun' \
    'nccl (buffers), mpi (host scalars)'

  # --- 5c. the same without MPI: srun --mpi=none, every task reads its rank from
  # SLURM_PROCID/SLURM_NTASKS, the ranks meet at node1 (the first host of the job's node list)
  # on 20000 + job id % 20000, and the emulated NCCL runs over its socket transport (the two
  # slurmd nodes share this host's network namespace). Bitwise mpirun's run; then the no-MPI
  # GPU sbatch script preempted by USR1, requeued and resumed, bitwise too.
  if OMP_NUM_THREADS=1 timeout -k 10 240 srun -N 2 -n 2 --mpi=none "$EMU" "${ecommon[@]}" --output-dir "$W/e_nompi" \
       --log-jsonl "$W/e_nompi.jsonl" >"$W/e_nompi.log" 2>&1 &&
     grep -q 'rank 0/2 local 0/1 node 0/2 host node1 launch srun --mpi=none (SLURM_PROCID/SLURM_NTASKS) rendezvous tcp node1:' "$W/e_nompi.log" &&
     grep -q '^| comm         nccl (buffers), nccl (host buffers staged) (host scalars)' "$W/e_nompi.log" &&
     msg=$(same_losses "$W/e_mpirun.jsonl" "$W/e_nompi.jsonl") &&
     wmsg=$(same_weights "$W/e_mpirun/model.bin" "$W/e_nompi/model.bin"); then
    pass "srun -N 2 -n 2 --mpi=none $EMU --device cuda (no MPI: Slurm variables, TCP rendezvous) vs mpirun -np 2: $msg; weights $wmsg"
  else
    bad "srun --mpi=none $EMU --device cuda training: ${msg:-run failed or wrong launch/communicator} ${wmsg:-}"
    grep -vE '^(step |\| )' "$W/e_nompi.log" | tail -n 20 | sed 's/^/  | /'
  fi
  unset msg wmsg
  gpu_sbatch e_sbatch_nompi scripts/slurm/train_multinode_gpus_nompi.sbatch gpt2-multinode-nompi \
    'launch srun --mpi=none' 'nccl (buffers), nccl (host buffers staged) (host scalars)'
  unset msg wmsg GPT2_EMU_THREADS
else
  bad "$EMU not built: the CUDA backend under Slurm not tested"
fi

# --- 6. the fine-tuning recipe under srun: LAUNCH="srun -N 2 -n 2" scripts/finetune.sh ----------------
TXT=${TINYSHAKESPEARE_TXT:-data/tinyshakespeare/input.txt}  # as `make data` finds it, in the tree
if [ -x ./train_gpt2cu ] && [ -x ./prepare_data ] && [ -f "$TXT" ] && [ -f data/gpt2/encoder.json ]; then
  head -c 100000 "$TXT" > "$W/ft.txt"
  ./prepare_data --progress none --out-prefix "$W/ftbase" --val-tokens 2000 "$W/ft.txt" >/dev/null 2>&1
  ./train_gpt2cu --device cpu --model d2 --config n_embd=64,n_head=2,max_seq=64 -T 64 -B 2 --max-steps 1 \
    --threads 1 --val-every 0 --sample-every 0 --train-data "$W/ftbase_train_*.bin" --save-hf "$W/ft_hf" >/dev/null 2>&1
  if LAUNCH="srun -N 2 -n 2" timeout -k 10 240 scripts/finetune.sh --init-from "$W/ft_hf" --out "$W/ft" \
       --text "$W/ft.txt" --doc-separator '\n\n' --seq-len 64 -B 2 --steps 3 --val-every 0 \
       -- --threads 1 --sample-every 0 >"$W/ft.log" 2>&1 &&
     grep -q 'launch srun' "$W/ft.log" && grep -q '"world": 2' "$W/ft/eval_after.json"; then
    pass "fine-tuning recipe under srun -N 2 -n 2: $(grep -m1 '^finetune: perplexity [0-9]' "$W/ft.log")"
  else
    bad "fine-tuning recipe under srun"; tail -n 20 "$W/ft.log" | sed 's/^/  | /'
  fi
else
  bad "6: needs ./train_gpt2cu, ./prepare_data, the GPT-2 vocabulary and the tinyshakespeare text (make test builds them)"
fi

[ $fail = 0 ] && echo "slurm_smoke_test: all passed"
exit $fail
