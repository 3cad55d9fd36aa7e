#!/usr/bin/env bash
# run_train.sh [TRAINER ARGS...] - the body shared by the sbatch scripts in this
# folder; runs inside the job's batch step (submit from the repository root).
#
#   * one srun step, one task per GPU (or per CPU rank): every task is a rank;
#     the trainer takes rank/world/local rank from MPI (PMIx), the local rank
#     picks the GPU;
#   * preemption: `#SBATCH --signal=USR1@120` (SIGUSR1 to every task 120 s
#     before the time limit; SIGTERM works too when it reaches the tasks only)
#     makes every rank checkpoint at the next step boundary and exit with
#     status 75; this script then requeues the job (`#SBATCH --requeue`), and the
#     restarted job (SLURM_RESTART_COUNT > 0) continues with --resume;
#   * GPT2_TRAIN_BIN overrides the program (default ./train_gpt2cu),
#     GPT2_TRAIN_ARGS adds arguments before the ones given here.
set -u
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
PREEMPTED=75  # kPreemptedExitCode in distributed/preempt.h
read -r -a extra <<<"${GPT2_TRAIN_ARGS:-}"
resume=()
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && resume=(--resume)

echo "job ${SLURM_JOB_ID:-?} restart ${SLURM_RESTART_COUNT:-0}: $SLURM_JOB_NUM_NODES node(s) [$SLURM_JOB_NODELIST], ${SLURM_NTASKS:-?} task(s)"
echo "command: srun $BIN ${extra[*]} $* ${resume[*]}"

# srun runs in the background so that this shell stays responsive to signals
# sent only to the batch shell (`--signal=B:USR1@120`, `scancel --batch
# --signal=TERM`): they become SIGUSR1 to srun, which forwards it to every task.
# Never SIGTERM to srun: srun turns its own SIGTERM into SIGKILL of the tasks
# ("srun: forcing job termination"), which would kill the checkpoint. For the
# same reason a plain `scancel JOBID` or the time limit (SIGTERM to every
# process, srun included) cannot checkpoint: warn with --signal=USR1@T ahead of
# the limit, stop early with `scancel --signal=USR1 JOBID`, and on clusters with
# preemption have PreemptParameters=send_user_signal so preemption sends USR1.
srun "$BIN" "${extra[@]}" "$@" "${resume[@]}" &
srun_pid=$!
trap 'kill -USR1 "$srun_pid" 2>/dev/null' TERM USR1
# `wait` returns early when a trapped signal arrives; bash keeps srun's status,
# so the last wait returns it whether or not srun was already reaped.
while kill -0 "$srun_pid" 2>/dev/null; do wait "$srun_pid"; done
wait "$srun_pid"; rc=$?
echo "srun exited with status $rc"
if [ "$rc" = "$PREEMPTED" ]; then
  echo "checkpoint written after a stop signal; requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$rc"
