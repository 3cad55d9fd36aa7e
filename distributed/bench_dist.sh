#!/usr/bin/env bash
# make bench-dist: data-parallel step time and bytes communicated per step for
# ZeRO stages 0/1/2 at 1 and 2 ranks on this machine (CPU backend, MPI).
#   step ms   - mean trainer step (./train_gpt2cu, JSONL "ms", first step excluded);
#               same global batch everywhere: 1 rank = 2 micro-batches of accumulation
#   comm ms   - the step's collectives alone, replayed by build/distributed/dist_bench
#   MB sent   - bytes one rank sends per step (ring-model counters of the comm layer)
# Knobs: BENCH_LAYERS (6), BENCH_CHANNELS (384), BENCH_STEPS (6).
set -u
cd "$(dirname "$0")/.."
L=${BENCH_LAYERS:-6} C=${BENCH_CHANNELS:-384} STEPS=${BENCH_STEPS:-6}
T=64 B=4 V=512
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_dist.XXXXXX")
trap 'rm -rf "$W"' EXIT
MPIRUN=(timeout -k 10 600 mpirun --allow-run-as-root --oversubscribe)
python3 test/distributed/synthetic_shard.py "$W/train.bin" 200000 "$V"
cores=$(nproc)
args=(--device cpu --model "d$L" --config "n_embd=$C,n_head=$((C / 64)),max_seq=$T,vocab_size=$V,padded_vocab_size=$V"
      -B $B -T $T --total-batch-tokens $((2 * B * T)) --max-steps "$STEPS" --val-every 0 --sample-every 0
      --no-shuffle --train-data "$W/train.bin")
step_ms() {  # mean "ms" of the JSONL train records after the first
  grep '"type":"train"' "$1" | sed -E 's/.*"ms":([0-9.]+).*/\1/' | awk 'NR > 1 { s += $1; n++ } END { if (n) printf "%.1f", s / n; else print "n/a" }'
}
echo "model d$L: n_embd $C, vocab $V, B=$B T=$T, global batch $((2 * B * T)) tokens; $cores cores split over the ranks"
printf '%-6s %-6s %10s %10s %14s\n' stage ranks "step ms" "comm ms" "MB sent/rank"
for np in 1 2; do
  "${MPIRUN[@]}" -np $np build/distributed/dist_bench --layers "$L" --channels "$C" --vocab "$V" --seq "$T" \
    --steps 20 >"$W/comm_$np.txt" 2>&1 || { cat "$W/comm_$np.txt"; exit 1; }
  for z in 0 1 2; do
    threads=$(( cores / np > 0 ? cores / np : 1 ))
    if [ $np = 1 ]; then launch=(timeout -k 10 600); else launch=("${MPIRUN[@]}" -np $np); fi
    "${launch[@]}" ./train_gpt2cu "${args[@]}" --threads $threads --zero-stage $z \
      --log-jsonl "$W/s${z}_n$np.jsonl" >"$W/s${z}_n$np.log" 2>&1 || { tail "$W/s${z}_n$np.log"; exit 1; }
    comm=$(sed -n "s/^stage $z world $np: comm \([0-9.]*\) ms\/step, \([0-9.]*\) MB.*/\1 \2/p" "$W/comm_$np.txt")
    printf '%-6s %-6s %10s %10s %14s\n' $z $np "$(step_ms "$W/s${z}_n$np.jsonl")" ${comm:-n/a n/a}
  done
done
grep -m1 'dist_bench:' "$W/comm_2.txt"
