#!/usr/bin/env bash
# local_slurm_stop.sh BASE [--purge] - stop the test cluster started by
# local_slurm_start.sh BASE: cancel its jobs, then stop its slurmd, slurmstepd,
# slurmctld and munged - only processes recorded in BASE's pid files or holding
# BASE's log files open, each checked by name before it is signalled.
# --purge also deletes BASE.
set -uo pipefail
BASE=${1:?usage: local_slurm_stop.sh BASE_DIR [--purge]}
PATH=$PATH:/usr/sbin:/sbin
[ -d "$BASE" ] || exit 0
BASE=$(cd "$BASE" && pwd)
say() { printf '[local-slurm] %s\n' "$*"; }

# pid from FILE if that process is alive and named NAME
pid_of() { local p; [ -s "$1" ] && p=$(cat "$1") && [ "$(cat /proc/$p/comm 2>/dev/null)" = "$2" ] && echo "$p"; }
# slurmstepd processes of this cluster: they hold BASE/log/slurmd_* open
stepds() {
  local d f
  for d in /proc/[0-9]*; do
    [ "$(cat "$d/comm" 2>/dev/null)" = slurmstepd ] || continue
    for f in "$d"/fd/*; do
      case "$(readlink "$f" 2>/dev/null)" in "$BASE"/log/slurmd_*) echo "${d#/proc/}"; break ;; esac
    done
  done
}
# stop NAME PID...: SIGTERM, wait up to 10 s, then SIGKILL what is left
stop() {
  local name=$1 p alive; shift
  local pids=()
  for p in "$@"; do
    [ "$(cat /proc/$p/comm 2>/dev/null)" = "$name" ] && kill "$p" 2>/dev/null && pids+=("$p")
  done
  [ ${#pids[@]} -gt 0 ] || return 0
  for _ in $(seq 100); do
    alive=0; for p in "${pids[@]}"; do [ -d /proc/$p ] && alive=1; done
    [ $alive = 0 ] && break; sleep 0.1
  done
  for p in "${pids[@]}"; do [ -d /proc/$p ] && { say "SIGKILL $name $p"; kill -9 "$p" 2>/dev/null; }; done
  say "stopped $name ${pids[*]}"
}

if [ -f "$BASE/etc/slurm.conf" ] && [ -n "$(pid_of "$BASE/run/slurmctld.pid" slurmctld)" ]; then
  export SLURM_CONF=$BASE/etc/slurm.conf
  jobs=$(timeout 10 squeue -h -o %i 2>/dev/null)
  if [ -n "$jobs" ]; then
    timeout 10 scancel --full $jobs 2>/dev/null
    for _ in $(seq 50); do [ -z "$(timeout 5 squeue -h -o %i 2>/dev/null)" ] && break; sleep 0.2; done
  fi
fi
slurmds=()
for f in "$BASE"/run/slurmd_*.pid; do [ -e "$f" ] && slurmds+=($(pid_of "$f" slurmd)); done
stop slurmd "${slurmds[@]}"
stop slurmstepd $(stepds)
stop slurmctld $(pid_of "$BASE/run/slurmctld.pid" slurmctld)
stop munged $(pid_of "$BASE/munge/run/munged.pid" munged)
if [ "${2:-}" = --purge ]; then
  case "$BASE" in /|/tmp|/etc|/usr|/var|/root|"") say "refusing to delete $BASE" ;; *) rm -rf "$BASE" ;; esac
fi
exit 0
