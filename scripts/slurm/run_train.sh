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
#     GPT2_TRAIN_ARGS adds arguments before the ones given here;
#   * before srun, the --train-data / --val-data globs that take effect (the
#     last of each) must match a file, else the job fails at once naming the
#     glob (no node time spent); GPT2_SKIP_DATA_CHECK=1 skips this (data only
#     visible on the compute nodes' local disks).
set -u
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
PREEMPTED=75  # kPreemptedExitCode in distributed/preempt.h
read -r -a extra <<<"${GPT2_TRAIN_ARGS:-}"
resume=()
[ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && resume=(--resume)

# check_data ARGS...: the last --train-data and --val-data (unless --val-every 0)
# must each match at least one file (comma lists: any element).
check_data() {
  local train="" val="" val_every="" glob g found bad=0 parts
  while [ $# -gt 0 ]; do
    case "$1" in
      --train-data) train=${2-}; shift ;;
      --train-data=*) train=${1#*=} ;;
      --val-data) val=${2-}; shift ;;
      --val-data=*) val=${1#*=} ;;
      --val-every) val_every=${2-}; shift ;;
      --val-every=*) val_every=${1#*=} ;;
    esac
    shift
  done
  [ "$val_every" = 0 ] && val=""
  for glob in "$train" "$val"; do
    [ -n "$glob" ] || continue
    found=0
    IFS=, read -r -a parts <<<"$glob"
    for g in "${parts[@]}"; do compgen -G "$g" >/dev/null && found=1; done
    if [ $found = 0 ]; then
      echo "error: no token shard matches $glob (from $PWD)" >&2
      bad=1
    fi
  done
  if [ $bad = 1 ]; then
    echo "  write the shards with scripts/prepare_corpus.sh --out-prefix PREFIX INPUT... and submit" >&2
    echo "  with GPT2_DATA_PREFIX=PREFIX (the GPU scripts read PREFIX_train_*.bin, PREFIX_val_*.bin)," >&2
    echo "  or pass --train-data/--val-data after the script name; GPT2_SKIP_DATA_CHECK=1 skips this check" >&2
    return 1
  fi
}
if [ "${GPT2_SKIP_DATA_CHECK:-0}" != 1 ]; then
  check_data "${extra[@]}" "$@" || exit 1
fi

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
