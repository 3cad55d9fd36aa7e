#!/usr/bin/env bash
# test-timeout: 300
# Launches without MPI: ranks that torchrun's variables
# describe (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT), started by a plain shell loop or by torch.distributed.run, meet
# at the rendezvous and train through the emulated NCCL's socket transport
# (emu/nccl_socket.h), no MPI anywhere:
#   a. bitwise the `mpirun` run of the emulated CUDA trainer (final model.bin and
#      every step's loss and norm): 2 ranks at ZeRO 0 fp32 and 1 bf16,
#      3 ranks at ZeRO 1 fp32 and 2 bf16, one of them over --rendezvous file:DIR;
#      the banner names the launch and the rendezvous;
#   b. python3 -m torch.distributed.run --no_python (where Debian's torch has it);
#   c. failures, each a clear error naming the rank and the address or path,
#      within the bound: rank 0 never comes, port in use, a stale rendezvous
#      file, CPU ranks refused;
#   d. a dead peer without MPI: rank 1 frozen in a collective with aborts that
#      block (every rank exits non-zero within --comm-timeout + 10 s), rank 1
#      exiting (rank 0 ends with the socket transport's error);
#   e. set-up: a rank that cannot start (two local ranks, one GPU) is named by
#      every rank within seconds, not waited for in NCCL's set-up until
#      --comm-timeout; SIGTERM while NCCL's set-up waits for a peer that never
#      joins ends both ranks with 143 within seconds; a rank killed there
#      (SIGKILL) is named by the other within seconds, not at --comm-timeout,
#      over tcp and over file:DIR.
set -u
cd "$(dirname "$0")/../.."
EMU=build/train_gpt2cu_emu
. test/distributed/prologue.sh launch_nompi "$EMU"
# One emulator worker per rank: the wte gradient's fp32 atomicAdd would add in
# a varying order on several, and the runs are compared bit for bit.
export GPT2_EMU_THREADS=1
port() { /usr/bin/env python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 20000 256 || { echo "FAIL: shard"; exit 1; }
common=(--device cuda --model d1 --config n_embd=32,n_head=2,max_seq=32,vocab_size=256,padded_vocab_size=256
        -B 2 -T 16 --threads 1 --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin" --max-steps 3)

# loop NAME NP ARGS...: NP ranks with torchrun's variables, one process each; rc = the worst exit status.
loop() {
  local name=$1 np=$2 r pids=() p; shift 2
  local mp; mp=$(port)
  for r in $(seq 0 $((np - 1))); do
    GPT2_EMU_DEVICE_COUNT=$np RANK=$r WORLD_SIZE=$np LOCAL_RANK=$r LOCAL_WORLD_SIZE=$np MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$mp timeout -k 5 90 "$EMU" "$@" >"$W/$name.$r.out" 2>"$W/$name.$r.err" &
    pids+=($!)
  done
  rc=0
  for p in "${pids[@]}"; do wait "$p" || rc=$?; done
  return $rc
}
steps() { grep '^step' "$1" | cut -d'|' -f1-3; }

# --- a. bitwise the mpirun run ----------------------------------------------------------
same() {
  local name=$1 np=$2; shift 2
  GPT2_EMU_DEVICE_COUNT=$np timeout -k 5 90 mpirun --allow-run-as-root --oversubscribe -np "$np" -x GPT2_EMU_DEVICE_COUNT -x GPT2_EMU_THREADS \
    "$EMU" "${common[@]}" "$@" --output-dir "$W/$name.mpi" >"$W/$name.mpi.out" 2>"$W/$name.mpi.err" || {
    bad "$name: the mpirun run failed"; tail -n 5 "$W/$name.mpi.err"; return; }
  loop "$name" "$np" "${common[@]}" "$@" --output-dir "$W/$name.nompi"
  if [ "$rc" = 0 ] && cmp -s "$W/$name.mpi/model.bin" "$W/$name.nompi/model.bin" &&
     [ "$(steps "$W/$name.mpi.out")" = "$(steps "$W/$name.0.out")" ] && [ -n "$(steps "$W/$name.0.out")" ] &&
     grep -q "launch torchrun (RANK/WORLD_SIZE) rendezvous" "$W/$name.0.out"; then
    pass "$name: $np ranks without MPI = mpirun bitwise ($(steps "$W/$name.0.out" | tail -n 1 | tr -s ' '))"
  else
    bad "$name: exit $rc; model or losses differ from mpirun's"; tail -n 5 "$W/$name.0.err" "$W/$name.1.err"
  fi
}
same z0_fp32 2 --zero-stage 0
same z1_bf16 2 --zero-stage 1 --dtype bf16
same z1_fp32_np3 3 --zero-stage 1 --rendezvous "file:$W/rdzv"
same z2_bf16_np3 3 --zero-stage 2 --dtype bf16
grep -m1 '| backend' "$W/z1_fp32_np3.0.out" | sed 's/^/  banner: /'
[ -z "$(ls -A "$W/rdzv" 2>/dev/null)" ] || bad "file rendezvous left files: $(ls "$W/rdzv")"

# --- b. torch.distributed.run --no_python -------------------------------------------------
if /usr/bin/python3 -c 'import torch.distributed.run' 2>/dev/null; then
  # -r 1 -t 1: Debian's torch 1.13 on Python 3.11 fails on the default "0" (its
  # Std flag lookup returns None); stdout goes to --log_dir and is teed.
  GPT2_EMU_DEVICE_COUNT=2 timeout -k 5 120 /usr/bin/python3 -m torch.distributed.run --nproc_per_node 2 \
    --master_addr 127.0.0.1 --master_port "$(port)" -r 1 -t 1 --log_dir "$W/torchrun_logs" --no_python \
    "$EMU" "${common[@]}" --zero-stage 1 --dtype bf16 --output-dir "$W/torchrun" >"$W/torchrun.out" 2>"$W/torchrun.err"
  rc=$?
  if [ "$rc" = 0 ] && cmp -s "$W/z1_bf16.mpi/model.bin" "$W/torchrun/model.bin"; then
    pass "torch.distributed.run --no_python --nproc_per_node 2: bitwise the mpirun run (ZeRO-1 bf16); $(grep -m1 -o 'launch torchrun.*' "$W/torchrun.out")"
  else
    bad "torch.distributed.run: exit $rc or a different model"; tail -n 8 "$W/torchrun.err"
  fi
else
  echo "SKIP torch.distributed.run: /usr/bin/python3 has no torch.distributed"
fi

# --- c. rendezvous failures ---------------------------------------------------------------
# expect NAME SECONDS PATTERN: the run ($rc, $secs) failed within SECONDS with PATTERN on stderr.
timed() { local t0; t0=$(date +%s.%N); "$@"; rc=$?; secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'); }
expect() {
  local name=$1 limit=$2 pattern=$3
  if [ "$rc" != 0 ] && [ "$rc" != 124 ] && awk -v s="$secs" -v l="$limit" 'BEGIN { exit !(s < l) }' &&
     grep -qE "$pattern" "$W/$name.err"; then
    pass "$name: exit $rc after $secs s: $(grep -m1 -E "$pattern" "$W/$name.err")"
  else
    bad "$name: exit $rc after $secs s, want an error within $limit s matching '$pattern'"; tail -n 5 "$W/$name.err"
  fi
}
one() {  # one RANK=$1 of WORLD_SIZE=$2 at MASTER_PORT=$3, then args
  local r=$1 n=$2 p=$3 name=$4; shift 4
  GPT2_EMU_DEVICE_COUNT=$n RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r LOCAL_WORLD_SIZE=$n MASTER_ADDR=127.0.0.1 \
    MASTER_PORT=$p timeout -k 5 60 "$@" >"$W/$name.out" 2>"$W/$name.err"
}
timed one 1 2 "$(port)" no_rank0 "$EMU" "${common[@]}" --comm-timeout 2
expect no_rank0 6 '^error: rank 1/2 \(.*\): rendezvous at tcp 127\.0\.0\.1:[0-9]+: rank 0 never came: nothing answered within 2 s'
/usr/bin/env python3 -c 'import socket,time,sys; s=socket.socket(); s.bind(("0.0.0.0",0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(30)' >"$W/holder.port" &
holder=$!
for _ in $(seq 50); do [ -s "$W/holder.port" ] && break; sleep 0.1; done
timed one 0 2 "$(cat "$W/holder.port")" port_in_use "$EMU" "${common[@]}" --comm-timeout 5
kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null
expect port_in_use 6 '^error: rank 0/2 \(.*\): rendezvous at tcp 127\.0\.0\.1:[0-9]+: rank 0 cannot listen on port [0-9]+: Address already in use'
mkdir -p "$W/stale" && printf 'host=old\npid=1\ntime=%s\njob=\nworld=2\nnonce=1\npayload=\n' $(($(date +%s) - 3600)) >"$W/stale/rank0"
timed one 0 2 1 stale "$EMU" "${common[@]}" --comm-timeout 5 --rendezvous "file:$W/stale"
expect stale 4 "^error: rank 0/2 \(.*\): rendezvous at file $W/stale: stale rendezvous file $W/stale/rank0 of an earlier job"
timed one 0 2 1 cpu_ranks ./train_gpt2cu --device cpu "${common[@]:2}"
expect cpu_ranks 4 '^error: rank 0/2 \(.*\): 2 CPU ranks launched by torchrun \(RANK/WORLD_SIZE\) without MPI: .*mpirun -np 2 or srun --mpi=pmix'

# --- d. a dead peer without MPI -------------------------------------------------------------
export GPT2_EMU_NCCL_FREEZE_RANK=1 GPT2_EMU_NCCL_FREEZE_AT=4 GPT2_EMU_NCCL_ABORT_BLOCKS=1
timed loop freeze 2 "${common[@]}" --max-steps 6 --comm-timeout 3
unset GPT2_EMU_NCCL_FREEZE_RANK GPT2_EMU_NCCL_FREEZE_AT GPT2_EMU_NCCL_ABORT_BLOCKS
cat "$W/freeze.0.err" "$W/freeze.1.err" >"$W/freeze.err"
# Start-up (a few seconds) + 3 s + the 10 s slack.
expect freeze 25 '^error: rank [01]/2 \(.*\): nccl [a-z_]+ did not complete within 3 s \(a peer rank died or hangs\); aborting'
if [ "$(grep -cE 'did not complete within 3 s' "$W/freeze.err")" = 2 ] && grep -q 'rank 1 freezes' "$W/freeze.err"; then
  pass "freeze: both ranks (rank 1 frozen inside its collective) ended themselves"
else
  bad "freeze: want both ranks' timeout messages"; cat "$W/freeze.err" | head -n 10
fi
export GPT2_TEST_EXIT_RANK=1 GPT2_TEST_EXIT_AT_STEP=2
timed loop exits 2 "${common[@]}" --max-steps 6 --comm-timeout 0
unset GPT2_TEST_EXIT_RANK GPT2_TEST_EXIT_AT_STEP
cat "$W/exits.0.err" "$W/exits.1.err" >"$W/exits.err"
expect exits 20 '^error: rank 0/2 \(.*\): .*socket transport: rank 1 is gone'

# --- e. set-up failures and signals ----------------------------------------------------------
# two ranks on one node at MASTER_PORT=$1 with GPT2_EMU_DEVICE_COUNT=$2, NAME=$3, then args; pids in $pair
start_pair() {
  local p=$1 gpus=$2 name=$3 r; shift 3
  pair=()
  for r in 0 1; do
    GPT2_EMU_DEVICE_COUNT=$gpus RANK=$r WORLD_SIZE=2 LOCAL_RANK=$r LOCAL_WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 \
      MASTER_PORT=$p timeout -k 5 90 "$@" >"$W/$name.$r.out" 2>"$W/$name.$r.err" &
    pair+=($!)
  done
}
wait_pair() { local p; rc=0; for p in "${pair[@]}"; do wait "$p" || rc=$?; done; }
t0=$(date +%s.%N)
start_pair "$(port)" 1 one_gpu "$EMU" "${common[@]}" --comm-timeout 60
wait_pair
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
cat "$W/one_gpu.0.err" "$W/one_gpu.1.err" >"$W/one_gpu.err"
expect one_gpu 15 'rank 1 \(host [^)]*\) cannot start: local rank 1 but only 1 visible GPU\(s\)'
if grep -q 'rank 0/2 .*cannot start: local rank 1' "$W/one_gpu.0.err"; then
  pass "one_gpu: rank 0 names rank 1's problem: $(grep -m1 -o 'rank 1 (host [^)]*) cannot start.*' "$W/one_gpu.0.err")"
else
  bad "one_gpu: rank 0 does not name rank 1's problem"; cat "$W/one_gpu.0.err"
fi
start_pair "$(port)" 2 init_stop env GPT2_EMU_NCCL_FREEZE_INIT_RANK=1 "$EMU" "${common[@]}" --comm-timeout 60
for _ in $(seq 100); do grep -q 'freezes in ncclCommInitRank' "$W/init_stop.1.err" 2>/dev/null && break; sleep 0.1; done
sleep 1  # rank 0 is in its own ncclCommInitRank by now, waiting for rank 1
t0=$(date +%s.%N)
kill -TERM "${pair[@]}"
rc0=0 rc1=0
wait "${pair[0]}" || rc0=$?
wait "${pair[1]}" || rc1=$?
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc0" = 143 ] && [ "$rc1" = 143 ] && awk -v s="$secs" 'BEGIN { exit !(s < 8) }' &&
   grep -q 'rank 0/2 .*stop requested by signal 15 during nccl ncclCommInitRank' "$W/init_stop.0.err"; then
  pass "init_stop: SIGTERM during NCCL set-up: exits $rc0 and $rc1 after $secs s: $(grep -m1 -o 'stop requested.*' "$W/init_stop.0.err")"
else
  bad "init_stop: exits $rc0 and $rc1 after $secs s, want 143 twice within 8 s"; tail -n 3 "$W/init_stop.0.err" "$W/init_stop.1.err"
fi
start_pair "$(port)" 2 init_kill env GPT2_EMU_NCCL_FREEZE_INIT_RANK=1 "$EMU" "${common[@]}" --comm-timeout 60
for _ in $(seq 100); do grep -q 'freezes in ncclCommInitRank' "$W/init_kill.1.err" 2>/dev/null && break; sleep 0.1; done
sleep 1
t0=$(date +%s.%N)
pkill -KILL -P "${pair[1]}"  # the trainer under rank 1's timeout
rc0=0
wait "${pair[0]}" || rc0=$?
wait "${pair[1]}" 2>/dev/null
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc0" = 1 ] && awk -v s="$secs" 'BEGIN { exit !(s < 8) }' &&
   grep -q "rank 0/2 .*rank 1 (host [^)]*) ended before the communicator's set-up was done" "$W/init_kill.0.err"; then
  pass "init_kill: rank 1 killed in NCCL's set-up: rank 0 exits $rc0 after $secs s: $(grep -m1 -o 'rank 1 (host.*' "$W/init_kill.0.err")"
else
  bad "init_kill: rank 0 exits $rc0 after $secs s, want 1 within 8 s naming rank 1"; tail -n 3 "$W/init_kill.0.err"
fi

# The same over --rendezvous file:DIR, where no connection stays open: rank 1's
# heartbeat file stops changing, and rank 0 removes it (DIR left empty).
start_pair "$(port)" 2 init_kill_file env GPT2_EMU_NCCL_FREEZE_INIT_RANK=1 "$EMU" "${common[@]}" --comm-timeout 60 \
  --rendezvous "file:$W/rdzv_kill"
for _ in $(seq 100); do grep -q 'freezes in ncclCommInitRank' "$W/init_kill_file.1.err" 2>/dev/null && break; sleep 0.1; done
sleep 1
t0=$(date +%s.%N)
pkill -KILL -P "${pair[1]}"
rc0=0
wait "${pair[0]}" || rc0=$?
wait "${pair[1]}" 2>/dev/null
secs=$(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')
if [ "$rc0" = 1 ] && awk -v s="$secs" 'BEGIN { exit !(s < 12) }' && [ -z "$(ls -A "$W/rdzv_kill" 2>/dev/null)" ] &&
   grep -q "rank 0/2 .*rank 1 (host [^)]*) ended before the communicator's set-up was done" "$W/init_kill_file.0.err"; then
  pass "init_kill_file: the same over file:DIR: rank 0 exits $rc0 after $secs s: $(grep -m1 -o 'rank 1 (host.*' "$W/init_kill_file.0.err")"
else
  bad "init_kill_file: rank 0 exits $rc0 after $secs s, want 1 within 12 s naming rank 1, DIR empty ($(ls -A "$W/rdzv_kill" 2>/dev/null))"
  tail -n 3 "$W/init_kill_file.0.err"
fi

[ $fail = 0 ] && echo "launch_nompi_test: all passed"
exit $fail
