#!/usr/bin/env bash
# local_slurm_start.sh BASE - start a private Slurm cluster on loopback for tests:
# munged + slurmctld + N slurmd "nodes" (node1..nodeN), everything (config,
# state, logs, sockets, pid files) under BASE. Each slurmd runs in its own UTS +
# mount namespace so tasks on node2 see hostname node2, as on a real cluster.
# Debian's Open MPI is launched by srun through PMIx (MpiDefault=pmix).
#
# Needs root and the Debian packages: munge slurmd slurmctld slurm-client libpmix-dev
# (libpmix-dev because Slurm's mpi/pmix plugin dlopen()s the unversioned libpmix.so).
# It installs nothing and touches nothing outside BASE (no /etc/slurm): clients
# use `source BASE/env.sh`, which sets SLURM_CONF. Stop with local_slurm_stop.sh BASE.
#
# Environment knobs: LOCAL_SLURM_NODES (2), LOCAL_SLURM_CPUS (nproc),
# LOCAL_SLURM_TIMEOUT seconds to reach idle (60), LOCAL_SLURM_CTLD_PORT and
# LOCAL_SLURM_NODE_PORT0 (default: free ports picked at random).
set -euo pipefail
BASE=${1:?usage: local_slurm_start.sh BASE_DIR}
NODES=${LOCAL_SLURM_NODES:-2}
CPUS=${LOCAL_SLURM_CPUS:-$(nproc)}
TIMEOUT=${LOCAL_SLURM_TIMEOUT:-60}
PKGS="munge slurmd slurmctld slurm-client libpmix-dev"

say() { printf '[local-slurm] %s\n' "$*"; }
die() { say "ERROR: $*"; exit 1; }
[ "$(id -u)" = 0 ] || die "must run as root (slurmd and munged start as root)"
PATH=$PATH:/usr/sbin:/sbin
for b in munged munge unmunge slurmctld slurmd srun sbatch sinfo scontrol unshare; do
  command -v "$b" >/dev/null || die "$b not found; install the Debian packages: $PKGS"
done
ls /usr/lib/*/pmix*/lib/libpmix.so >/dev/null 2>&1 ||
  die "libpmix.so missing (Slurm's pmix plugin needs it): apt-get install libpmix-dev"
unshare --mount --uts true 2>/dev/null || die "unshare --mount --uts not permitted (need CAP_SYS_ADMIN)"

# A TCP port no socket uses in any state (listening, connected, TIME_WAIT), from
# the kernel's tables, below the ephemeral range that outgoing connections use.
used_ports=""
refresh_used_ports() {
  local hex p=""
  for hex in $(awk 'FNR > 1 { split($2, a, ":"); print a[2] }' /proc/net/tcp /proc/net/tcp6 2>/dev/null | sort -u); do
    p="$p $((16#$hex))"
  done
  used_ports="$p "
}
port_free() { [[ "$used_ports" != *" $1 "* ]]; }
EPHEMERAL_LOW=$(awk '{ print $1 }' /proc/sys/net/ipv4/ip_local_port_range 2>/dev/null || echo 32768)
pick_port_block() {  # pick_port_block COUNT -> first port of COUNT consecutive free ports
  local n=$1 p i ok span=$(( EPHEMERAL_LOW - 10000 - 16 ))
  refresh_used_ports
  for _ in $(seq 50); do
    p=$(( 10000 + RANDOM % span )); ok=1
    for i in $(seq 0 $((n - 1))); do port_free $((p + i)) || { ok=0; break; }; done
    [ $ok = 1 ] && { echo "$p"; return 0; }
  done
  return 1
}
# One block: slurmctld's port, then one per slurmd.
PORT_BLOCK=$(pick_port_block $((NODES + 1))) || die "no $((NODES + 1)) consecutive free ports"
CTLD_PORT=${LOCAL_SLURM_CTLD_PORT:-$PORT_BLOCK}
NODE_PORT0=${LOCAL_SLURM_NODE_PORT0:-$((PORT_BLOCK + 1))}

HOST=$(hostname -s)
case "$(getent ahostsv4 "$HOST" | awk 'NR==1{print $1}')" in
  127.*) ;;
  *) die "hostname $HOST does not resolve to a 127.x address; slurmctld would bind elsewhere" ;;
esac

umask 022
mkdir -p "$BASE" && chmod 0755 "$BASE"  # munged insists that its socket path is world-searchable
mkdir -p "$BASE"/{etc,log,run,state/ctld} "$BASE"/munge/{etc,lib,log,run}
chmod 0700 "$BASE"/munge/etc "$BASE"/munge/lib "$BASE"/munge/log
BASE=$(cd "$BASE" && pwd)
CONF=$BASE/etc/slurm.conf
MSOCK=$BASE/munge/run/munge.socket.2
NODELIST=$(seq -f 'node%g' -s ' ' 1 "$NODES")
for n in $NODELIST; do mkdir -p "$BASE/state/slurmd_$n" "$BASE/state/tmp_$n"; done

# --- munge: a private key and socket for this cluster only.
[ -s "$BASE/munge/etc/munge.key" ] ||
  head -c 1024 /dev/urandom >"$BASE/munge/etc/munge.key"
chmod 0400 "$BASE/munge/etc/munge.key"
munged --key-file="$BASE/munge/etc/munge.key" --socket="$MSOCK" \
  --pid-file="$BASE/munge/run/munged.pid" --log-file="$BASE/munge/log/munged.log" \
  --seed-file="$BASE/munge/lib/munged.seed"
munge -S "$MSOCK" -n | unmunge -S "$MSOCK" >/dev/null || die "munge round trip failed ($BASE/munge/log)"

# --- slurm.conf
MEM_MB=$(awk '/^MemTotal:/{print int($2 / 1024)}' /proc/meminfo)
{
  echo "# written by test/slurm/local_slurm_start.sh for a loopback test cluster"
  cat <<EOF
ClusterName=gpt2test
SlurmctldHost=$HOST(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MSOCK
# daemons and srun bind to loopback only
CommunicationParameters=NoCtldInAddrAny,NoInAddrAny
SlurmctldPort=$CTLD_PORT
StateSaveLocation=$BASE/state/ctld
SlurmdSpoolDir=$BASE/state/slurmd_%n
# one TmpFS per node: the pmix plugin creates per-step dirs there, a shared one
# makes the second "node" fail with 'File exists'
TmpFS=$BASE/state/tmp_%n
SlurmctldPidFile=$BASE/run/slurmctld.pid
SlurmdPidFile=$BASE/run/slurmd_%n.pid
SlurmctldLogFile=$BASE/log/slurmctld.log
SlurmdLogFile=$BASE/log/slurmd_%n.log
SlurmctldDebug=info
SlurmdDebug=info
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=$BASE/etc/task_prolog.sh
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
# Debian's Open MPI only supports PMIx (pmi2/none fail in MPI_Init)
MpiDefault=pmix
ReturnToService=2
SlurmdTimeout=300
InactiveLimit=0
KillWait=5
MinJobAge=300
EOF
  [ "$CPUS" -gt "$(nproc)" ] && echo "SlurmdParameters=config_overrides"
  i=0
  for n in $NODELIST; do
    echo "NodeName=$n NodeHostname=$n NodeAddr=127.0.0.1 Port=$((NODE_PORT0 + i)) CPUs=$CPUS RealMemory=$((MEM_MB * 8 / 10 / NODES)) State=UNKNOWN"
    i=$((i + 1))
  done
  echo "PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO"
} >"$CONF"

# The PMIx plugin's tree collective does not hold a data-less fence (a barrier) until every
# node has joined it: a node's tasks leave it while another node's are still on their way in.
# Open MPI's MPI_Init ends with such a barrier, so a rank could start sending while a slow peer
# was still inside MPI_Init, before it could receive, and that peer died of SIGSEGV. The ring
# collective waits for every node.
echo "PMIxCollFence=ring" >"$BASE/etc/mpi.conf"

# Every task gets Open MPI pinned to loopback (its TCP transport would otherwise
# try eth0 between the "nodes") and permission to run as root.
cat >"$BASE/etc/task_prolog.sh" <<'EOF'
#!/bin/sh
# Slurm TaskProlog: each "export K=V" line printed here enters the task's environment.
echo "export OMPI_MCA_btl=self,vader,tcp"
echo "export OMPI_MCA_btl_tcp_if_include=lo"
echo "export OMPI_MCA_oob_tcp_if_include=lo"
echo "export OMPI_ALLOW_RUN_AS_ROOT=1"
echo "export OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1"
EOF
chmod 0755 "$BASE/etc/task_prolog.sh"
# /etc/hosts as each node sees it (bind-mounted in its mount namespace).
{ cat /etc/hosts; echo "127.0.0.1 $NODELIST"; } >"$BASE/etc/hosts"

cat >"$BASE/env.sh" <<EOF
# source me: client environment for the test cluster in $BASE
export SLURM_CONF=$CONF
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_btl_tcp_if_include=lo OMPI_MCA_oob_tcp_if_include=lo
EOF
export SLURM_CONF=$CONF

# --- daemons
slurmctld -f "$CONF"
for n in $NODELIST; do
  # Own hostname (UTS namespace) and /etc/hosts (mount namespace), inherited by
  # slurmstepd and every task of this node.
  unshare --mount --uts --propagation slave sh -c \
    "mount --bind '$BASE/etc/hosts' /etc/hosts && hostname '$n' && exec slurmd -f '$CONF' -N '$n'"
done

deadline=$(( $(date +%s) + TIMEOUT ))
ctld_pid=""
while :; do
  # a daemon that died at start (e.g. its port was taken meanwhile) fails fast
  [ -n "$ctld_pid" ] || ctld_pid=$(cat "$BASE/run/slurmctld.pid" 2>/dev/null)
  if [ -n "$ctld_pid" ] && [ ! -d "/proc/$ctld_pid" ]; then
    tail -n 5 "$BASE/log/slurmctld.log"; die "slurmctld exited"
  fi
  states=$(sinfo -h -N -o '%N %T' 2>/dev/null | sort -u || true)
  if [ -n "$states" ] && ! awk '$2 != "idle"{bad=1} END{exit !bad}' <<<"$states"; then break; fi
  [ "$(date +%s)" -lt "$deadline" ] || { echo "$states"; tail -n 20 "$BASE"/log/*.log; die "nodes not idle after ${TIMEOUT}s"; }
  sleep 0.2
done
say "cluster up in $BASE: nodes $NODELIST, slurmctld port $CTLD_PORT, slurmd ports from $NODE_PORT0"
