#!/usr/bin/env bash
# make bench-zero3: ZeRO-3 against ZeRO-2, measured. Two CPU ranks over MPI
# (./train_gpt2cu --device cpu --threads 1) train the same model on the same
# synthetic shard at --zero-stage 2 and 3, the two runs interleaved
# (2 3, 3 2, 2 3, ...: a load change on a shared machine hits both), and the
# script prints per stage the median trainer step (JSONL "ms", each run's first
# step left out: it pays for start-up) over all runs, the bytes one rank sends
# per step (JSONL "comm_bytes"), and the ratio stage 3 / stage 2 (of the pooled
# medians, and the median of each run pair's ratio).
# On CPU ranks the next layer's gather is an MPI_Iallgatherv issued while this
# layer computes (three slots); Open MPI moves it mostly inside MPI calls, so
# the difference is close to ZeRO-3's gathers and copies on top of stage 2's
# step (docs/distributed.md).
# Knobs: BENCH_LAYERS (12), BENCH_CHANNELS (256), BENCH_VOCAB (512), BENCH_B (4),
# BENCH_T (64), BENCH_STEPS (10), BENCH_REPS (5), BENCH_RANKS (2).
set -u
cd "$(dirname "$0")/.."
[ -x ./train_gpt2cu ] || { echo "bench-zero3: ./train_gpt2cu not built (make train_gpt2cu)"; exit 1; }
L=${BENCH_LAYERS:-12} C=${BENCH_CHANNELS:-256} V=${BENCH_VOCAB:-512}
B=${BENCH_B:-4} T=${BENCH_T:-64} STEPS=${BENCH_STEPS:-10} REPS=${BENCH_REPS:-5} NP=${BENCH_RANKS:-2}
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_zero3.XXXXXX")
trap 'rm -rf "$W"' EXIT
python3 test/distributed/synthetic_shard.py "$W/train.bin" 200000 "$V" || exit 1
heads=$((C / 64 > 0 ? C / 64 : 1))
args=(--device cpu --threads 1 --model "d$L" --config "n_embd=$C,n_head=$heads,max_seq=$T,vocab_size=$V,padded_vocab_size=$V"
      -B "$B" -T "$T" --max-steps "$STEPS" --val-every 0 --sample-every 0 --no-shuffle --lr-schedule constant
      --train-data "$W/train.bin")
params=$(./train_gpt2cu --dry-run "$NP" "${args[@]}" --zero-stage 3 2>/dev/null | sed -n 's/.*, \([0-9]*\) parameters;.*/\1/p')
echo "bench-zero3: $NP ranks, d$L C=$C vocab $V (${params:-?} parameters), B=$B T=$T, $STEPS steps x $REPS runs per stage;" \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"

# run STAGE REP: one training run, its JSONL into $W/zSTAGE_REP.jsonl
run() {
  local out=$W/z$1_$2
  timeout -k 10 600 mpirun --allow-run-as-root --oversubscribe -np "$NP" ./train_gpt2cu "${args[@]}" --zero-stage "$1" \
    --output-dir "$out" --log-jsonl "$out.jsonl" >"$out.log" 2>&1 || { echo "stage $1 run $2 failed:"; tail -n 5 "$out.log"; exit 1; }
  rm -rf "$out"
}
for rep in $(seq 1 "$REPS"); do
  if [ $((rep % 2)) = 1 ]; then run 2 "$rep"; run 3 "$rep"; else run 3 "$rep"; run 2 "$rep"; fi
done

# steps STAGE [REP]: the runs' (or run REP's) "ms comm_bytes" per step after the first
steps() {
  for f in "$W"/z"$1"_${2:-*}.jsonl; do
    grep '"type":"train"' "$f" | sed -E 's/.*"ms":([0-9.]+).*"comm_bytes":([0-9]+).*/\1 \2/' | tail -n +2
  done
}
# stats STAGE [REP] -> "median_ms min_ms max_ms steps comm_bytes"
stats() {
  steps "$@" | sort -n | awk '{ ms[NR] = $1; b = $2 } END {
    if (!NR) { print "n/a n/a n/a 0 0"; exit }
    med = NR % 2 ? ms[(NR + 1) / 2] : (ms[NR / 2] + ms[NR / 2 + 1]) / 2
    printf "%.1f %.1f %.1f %d %d", med, ms[1], ms[NR], NR, b }'
}
read -r m2 lo2 hi2 n2 b2 <<<"$(stats 2)"
read -r m3 lo3 hi3 n3 b3 <<<"$(stats 3)"
printf '%-6s %10s %10s %10s %6s %14s\n' stage "median ms" "min ms" "max ms" steps "MB sent/rank"
printf '%-6s %10s %10s %10s %6s %14.3f\n' 2 "$m2" "$lo2" "$hi2" "$n2" "$(awk -v b="$b2" 'BEGIN { print b / 1e6 }')"
printf '%-6s %10s %10s %10s %6s %14.3f\n' 3 "$m3" "$lo3" "$hi3" "$n3" "$(awk -v b="$b3" 'BEGIN { print b / 1e6 }')"
# Each run pair's ratio of medians too (the pair ran back to back), and their median:
# steadier than the pooled ratio when the machine's load drifts between pairs.
pairs=""
for rep in $(seq 1 "$REPS"); do
  read -r a _ <<<"$(stats 3 "$rep")"; read -r b _ <<<"$(stats 2 "$rep")"
  pairs+=" $(awk -v a="$a" -v b="$b" 'BEGIN { printf "%.3f", a / b }')"
done
awk -v a="$m3" -v b="$m2" -v x="$b3" -v y="$b2" -v p="$pairs" 'BEGIN {
  n = split(p, r, " "); for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (r[j] < r[i]) { t = r[i]; r[i] = r[j]; r[j] = t }
  med = n % 2 ? r[(n + 1) / 2] : (r[n / 2] + r[n / 2 + 1]) / 2
  printf "stage 3 / stage 2: step time %.3f (pooled medians), %.3f (median of the run pairs:%s); bytes sent %.3f\n",
    a / b, med, p, (y > 0 ? x / y : 0) }'
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
