#!/usr/bin/env bash
# Data-parallel training with ZeRO 0/1/2 on the CPU backend, against one rank:
#   1. equivalence: `mpirun -np 2 --zero-stage S` (S = 0, 1, 2) logs the same
#      per-step losses (relative 1e-6) and ends with the same weights as one rank
#      doing 2 micro-batches of gradient accumulation on the same data;
#   2. memory per rank from the start-up table: ZeRO-1/2 optimizer state = 1/2 of
#      stage 0's; ZeRO-2 gradients = 1/2 + one layer's staging (the tied wte
#      gradient goes through it in chunks), printed as a ratio;
#   3. preemption and resume: SIGUSR1 to ONE rank of a 2-rank ZeRO-1 run makes it
#      checkpoint and exit 75; resuming with 2 ranks, with 1 rank (2 -> 1) and
#      with 2 ranks at ZeRO-2 all continue exactly like the uninterrupted run;
#   4. crash: SIGKILL of one rank right after a checkpoint; --resume continues.
# A small model with a 512-token vocabulary on synthetic token shards keeps it fast.
set -u
cd "$(dirname "$0")/../.."
. test/distributed/prologue.sh zero_train ./train_gpt2cu
bg=""
on_exit() { [ -n "$bg" ] && kill -9 "$bg" 2>/dev/null; }
MPIRUN=(timeout -k 10 120 mpirun --allow-run-as-root --oversubscribe)
ONE=(timeout -k 10 120)

/usr/bin/env python3 test/distributed/synthetic_shard.py "$W/train.bin" 40000 512
[ -s "$W/train.bin" ] || { echo "FAIL: could not write the synthetic shard"; exit 1; }

# 16 thin layers: each backward unit is small next to the model, as in real
# GPT-2 sizes, so ZeRO-2's per-unit staging does not dominate its memory.
L=16 C=64 V=512 TMAX=64
common=(--device cpu --model d$L --config n_embd=$C,n_head=2,max_seq=$TMAX,vocab_size=$V,padded_vocab_size=$V
        -B 4 -T 32 --total-batch-tokens 256 --lr 1e-3 --warmup-steps 2 --weight-decay 0.1 --threads 1
        --val-every 0 --sample-every 0 --no-shuffle --train-data "$W/train.bin")


# pids of this test's trainer processes writing to DIR (not mpirun, not other tests')
rank_pids() {
  local d comm
  for d in /proc/[0-9]*; do
    read -r comm <"$d/comm" 2>/dev/null && [ "$comm" = train_gpt2cu ] || continue
    tr '\0' ' ' <"$d/cmdline" 2>/dev/null | grep -q -- "--output-dir $1 " && echo "${d#/proc/}"
  done
}
# bytes NAME LOG: a size from the start-up line "| memory/rank  params 1.2 MiB, grads ..."
bytes() {
  sed -n "s/^| memory\/rank .*$1 \([0-9.]*\) \([KMG]*i*B\).*/\1 \2/p" "$2" |
    awk '{ m = $2 == "KiB" ? 1024 : $2 == "MiB" ? 1048576 : $2 == "GiB" ? 1073741824 : 1; printf "%.0f", $1 * m }'
}

# --- 1. equivalence ------------------------------------------------------------------
"${ONE[@]}" ./train_gpt2cu "${common[@]}" --max-steps 10 --output-dir "$W/one" \
  --log-jsonl "$W/one.jsonl" >"$W/one.log" 2>&1 || { bad "1-rank reference run"; tail "$W/one.log"; exit 1; }
grep -q 'grad_accum=2' "$W/one.log" || bad "reference run is not 2 micro-batches of accumulation"
for z in 0 1 2; do
  if ! "${MPIRUN[@]}" -np 2 ./train_gpt2cu "${common[@]}" --max-steps 10 --zero-stage $z \
       --output-dir "$W/z$z" --log-jsonl "$W/z$z.jsonl" >"$W/z$z.log" 2>&1; then
    bad "mpirun -np 2 --zero-stage $z failed"; tail -n 20 "$W/z$z.log"; continue
  fi
  if msg=$(same_losses "$W/one.jsonl" "$W/z$z.jsonl"); then pass "ZeRO-$z, 2 ranks vs 1 rank x 2 micro-batches: $msg"
  else bad "ZeRO-$z losses: $msg"; fi
  # Accumulating two micro-batches in one buffer (BLAS beta=1) rounds differently
  # from adding two separately computed gradients in the all-reduce, so the
  # weights agree to rounding, amplified by Adam only where the gradient itself
  # is rounding noise (the key bias: analytically zero). Bound: 1% of one lr step.
  if msg=$(same_weights "$W/one/model.bin" "$W/z$z/model.bin" 1e-5); then pass "ZeRO-$z final weights vs 1 rank: $msg"
  else bad "ZeRO-$z final weights vs 1 rank: $msg"; fi
done
# ZeRO-2 exchanges each unit in slices (16 MiB by default); an odd slice of 1000
# elements cuts every unit and piece at arbitrary points: same result.
if GPT2_ZERO2_SLICE_ELEMS=1000 "${MPIRUN[@]}" -np 2 -x GPT2_ZERO2_SLICE_ELEMS ./train_gpt2cu "${common[@]}" --max-steps 10 \
     --zero-stage 2 --output-dir "$W/z2s" --log-jsonl "$W/z2s.jsonl" >"$W/z2s.log" 2>&1; then
  cp "$W/z2s/model.bin" "$W/z2s.bin"
else bad "mpirun -np 2 --zero-stage 2 with 1000-element slices failed"; tail -n 20 "$W/z2s.log"; fi
for z in 1 2 2s; do
  if msg=$(same_weights "$W/z0/model.bin" "$W/z$z/model.bin"); then pass "ZeRO-$z final weights vs ZeRO-0 (2 ranks): $msg"
  else bad "ZeRO-$z final weights vs ZeRO-0: $msg"; fi
done
# The tied wte gradient in 100-row chunks (6 chunks, the last 12 rows; the
# default makes one chunk of this 512-row vocabulary): ZeRO-2 exchanges each
# chunk on its own, stage 0 makes its gradient in the same chunks: bitwise.
for z in 0 2; do
  GPT2_TEST_WTE_CHUNK_ROWS=100 "${MPIRUN[@]}" -np 2 -x GPT2_TEST_WTE_CHUNK_ROWS ./train_gpt2cu "${common[@]}" \
    --max-steps 10 --zero-stage $z --output-dir "$W/c$z" --log-jsonl "$W/c$z.jsonl" >"$W/c$z.log" 2>&1 ||
    { bad "mpirun -np 2 --zero-stage $z with 100-row wte chunks failed"; tail -n 20 "$W/c$z.log"; }
done
if msg=$(same_weights "$W/c0/model.bin" "$W/c2/model.bin") && lmsg=$(same_losses "$W/one.jsonl" "$W/c2.jsonl"); then
  pass "ZeRO-2 with 6 wte chunks vs ZeRO-0 (2 ranks): weights $msg; vs 1 rank: $lmsg"
else bad "ZeRO-2 with 100-row wte chunks: ${lmsg:-} ${msg:-}"; fi

# --- 2. memory per rank ----------------------------------------------------------------
opt0=$(bytes optimizer "$W/z0.log"); opt1=$(bytes optimizer "$W/z1.log"); opt2=$(bytes optimizer "$W/z2.log")
g0=$(bytes grads "$W/z0.log"); g1=$(bytes grads "$W/z1.log"); g2=$(bytes grads "$W/z2.log")
echo "     per rank (bytes, 2 ranks): optimizer stage0 $opt0 stage1 $opt1 stage2 $opt2; grads stage0 $g0 stage1 $g1 stage2 $g2"
if awk -v a="$opt0" -v b="$opt1" -v c="$opt2" 'BEGIN { exit !(a > 0 && b / a > 0.495 && b / a < 0.505 && c == b) }'; then
  pass "optimizer state per rank: ZeRO-1 and ZeRO-2 hold $(awk -v a="$opt0" -v b="$opt1" 'BEGIN{printf "%.3f", b/a}') of stage 0's"
else bad "optimizer memory per rank: stage 0 '$opt0', stage 1 '$opt1', stage 2 '$opt2' bytes"; fi
# ZeRO-2 keeps its gradient shard (P/2) plus staging: one layer buffer (which
# also stages the wte chunks), the rest unit (wpe + final layernorm; the tied
# wte is never staged whole) and a receive buffer of at most one layer.
P=$(sed -n 's/^| parameters *\([0-9]*\).*/\1/p' "$W/z0.log")
layer=$((12 * C * C + 13 * C)); rest=$((TMAX * C + 2 * C))
bound=$(awk -v P="$P" -v l="$layer" -v r="$rest" 'BEGIN { printf "%.4f", 0.5 + (r + 2 * l) / P + 1.0 / P }')
ratio=$(awk -v a="$g0" -v b="$g2" 'BEGIN { printf "%.4f", b / a }')
if awk -v g="$ratio" -v b="$bound" 'BEGIN { exit !(g > 0.5 && g <= b) }'; then
  pass "ZeRO-2 gradient memory per rank: $ratio of stage 0's (1/2 + staging; bound $bound for $P params)"
else bad "ZeRO-2 gradients: $ratio of stage 0's, above the bound $bound (g0 $g0, g2 $g2 bytes, P '$P')"; fi

# --- 3. preemption of one rank, resume with 2 ranks, 1 rank, and another stage ---------
# A constant learning rate makes the schedule independent of --max-steps, so the
# runs to be interrupted can be started for far more steps than they will live:
# no race between the signal and the end of the run.
common+=(--lr-schedule constant)
"${MPIRUN[@]}" -np 2 ./train_gpt2cu "${common[@]}" --max-steps 16 --zero-stage 1 \
  --output-dir "$W/full" --log-jsonl "$W/full.jsonl" >"$W/full.log" 2>&1 || bad "uninterrupted 2-rank run"
"${MPIRUN[@]}" -np 2 ./train_gpt2cu "${common[@]}" --max-steps 1000 --zero-stage 1 --checkpoint-every 4 \
  --output-dir "$W/pre" --log-jsonl "$W/pre.jsonl" >"$W/pre.log" 2>&1 &
bg=$!
for _ in $(seq 1200); do [ -e "$W/pre/DONE_00000004" ] && break; sleep 0.05; done
rank_pid=$(rank_pids "$W/pre" | tail -n 1)
[ -n "$rank_pid" ] && kill -USR1 "$rank_pid"
wait "$bg"; rc=$?; bg=""
stopped=$(sed -n 's/.*checkpointing at step \([0-9]*\).*/\1/p' "$W/pre.log" | head -n 1)
if [ "$rc" = 75 ] && [ -n "$stopped" ] && [ -e "$W/pre/DONE_$(printf %08d "$stopped")" ]; then
  pass "SIGUSR1 to one rank: checkpoint at step $stopped, exit 75"
else
  bad "preemption: exit $rc, checkpoint step '${stopped:-none}'"; tail -n 20 "$W/pre.log"; stopped=""
fi
if [ -n "$stopped" ]; then
  for variant in "2 1" "1 1" "2 2"; do
    set -- $variant; np=$1; z=$2
    d="$W/resume_np${np}_z$z"; cp -r "$W/pre" "$d"
    if [ "$np" = 1 ]; then launch=("${ONE[@]}"); else launch=("${MPIRUN[@]}" -np "$np"); fi
    if "${launch[@]}" ./train_gpt2cu "${common[@]}" --max-steps 16 --zero-stage "$z" --checkpoint-every 4 \
         --output-dir "$d" --resume --log-jsonl "$d.jsonl" >"$d.log" 2>&1 &&
       msg=$(same_losses "$W/full.jsonl" "$d.jsonl" "$stopped") &&
       wmsg=$(same_weights "$W/full/model.bin" "$d/model.bin" $([ "$np" = 1 ] && echo 1e-5)); then
      pass "resume at step $stopped with $np rank(s), ZeRO-$z: $msg; weights $wmsg"
    else
      bad "resume with $np rank(s), ZeRO-$z: ${msg:-run failed} ${wmsg:-}"; tail -n 5 "$d.log"
    fi
    unset msg wmsg
  done
fi

# --- 4. crash: SIGKILL one rank after a complete checkpoint ----------------------------
"${MPIRUN[@]}" -np 2 ./train_gpt2cu "${common[@]}" --max-steps 1000 --zero-stage 2 --checkpoint-every 4 \
  --output-dir "$W/crash" --log-jsonl "$W/crash.jsonl" >"$W/crash.log" 2>&1 &
bg=$!
for _ in $(seq 1200); do [ -e "$W/crash/DONE_00000008" ] && break; sleep 0.05; done
rank_pid=$(rank_pids "$W/crash" | tail -n 1)
[ -n "$rank_pid" ] && kill -9 "$rank_pid"
wait "$bg"; rc=$?; bg=""
if [ "$rc" != 0 ] && "${MPIRUN[@]}" -np 2 ./train_gpt2cu "${common[@]}" --max-steps 16 --zero-stage 2 \
     --checkpoint-every 4 --output-dir "$W/crash" --resume --log-jsonl "$W/crash2.jsonl" >"$W/crash2.log" 2>&1; then
  at=$(sed -n 's/.*resumed from .* at step \([0-9]*\).*/\1/p' "$W/crash2.log")
  if msg=$(same_losses "$W/full.jsonl" "$W/crash2.jsonl" "${at:-0}") &&
     wmsg=$(same_weights "$W/full/model.bin" "$W/crash/model.bin"); then
    pass "SIGKILL of one ZeRO-2 rank (exit $rc), resumed at step $at: $msg; weights $wmsg"
  else bad "after SIGKILL: ${msg:-} ${wmsg:-}"; fi
else
  bad "crash/resume: first run exit $rc"; tail -n 10 "$W/crash2.log" 2>/dev/null
fi

[ $fail = 0 ] && echo "zero_train_test: all passed"
exit $fail
