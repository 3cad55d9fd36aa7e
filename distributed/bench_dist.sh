#!/usr/bin/env bash
# make bench-dist: data-parallel training, ZeRO stages 0/1/2, on up to three backends:
#   1. CPU backend over MPI (./train_gpt2cu --device cpu), 1 and 2 ranks;
#   2. the CUDA backend on the emulator, NCCL emulated over MPI
#      (build/train_gpt2cu_emu --device cuda, one emulated GPU per rank), 1 and 2
#      ranks, tiny model (about 20 s); skipped where that binary is not built;
#   3. real GPUs, when `nvidia-smi -L` lists any: ./train_gpt2cu --device cuda at
#      1, 2, 4, .. N GPUs (N = the GPU count, powers of two), bf16.
# Per part, one table per (stage, ranks):
#   step ms   - mean trainer step (JSONL "ms", first step excluded); tok/s = global batch / step
#   eff       - GPUs only: scaling efficiency, tok/s at n / (n x tok/s at 1 GPU)
#   comm ms   - the step's collectives alone, replayed by dist_bench (..._emu/_cuda: --comm nccl)
#   MB sent   - bytes one rank sends per step (the comm layer's ring-model counters,
#               distributed/comm.h): replay / trainer (JSONL "comm_bytes"; the trainer's
#               counter starts after the step's stop check: 4 B less at 2 ranks)
# then the replay's breakdown per collective at the largest world (calls, payload and
# bytes sent per step and rank, gradients/parameters vs host scalars; one rank sends
# nothing), and on GPUs nccl-tests' busbw of all_reduce / reduce_scatter / all_gather /
# broadcast of the model's padded bf16 parameter buffer at each n > 1.
# CPU and emulator: the same global batch at 1 and 2 ranks (1 rank accumulates 2
# micro-batches). GPUs: B x T tokens per GPU (weak scaling: global batch = n B T).
# Knobs: BENCH_LAYERS (6), BENCH_CHANNELS (384), BENCH_STEPS (6): CPU model; BENCH_EMU=0
# skips part 2; BENCH_GPU_MODEL (d12), BENCH_GPU_B (8), BENCH_GPU_T (1024),
# BENCH_GPU_STEPS (20), BENCH_GPU_STAGES ("0 1 2"), BENCH_GPUS (all listed): part 3.
#
# Part 3 has never run: the machine this was written on has no GPU (nvidia-smi
# absent), so only its absence branch has been executed. dist_bench's busbw code
# ran against the emulated NCCL (part 2).
set -u
cd "$(dirname "$0")/.."
W=$(mktemp -d "${TMPDIR:-/tmp}/bench_dist.XXXXXX")
trap 'rm -rf "$W"' EXIT
MPIRUN=(timeout -k 10 600 mpirun --allow-run-as-root --oversubscribe)
cores=$(nproc)

# step_stats JSONL GLOBAL_TOKENS -> "step_ms tok_per_s comm_bytes" (steps after the first)
step_stats() {
  grep '"type":"train"' "$1" | sed -E 's/.*"ms":([0-9.]+).*"comm_bytes":([0-9]+).*/\1 \2/' |
    awk -v tok="$2" 'NR > 1 { s += $1; n++ } { b = $2 } END {
      if (n) printf "%.1f %.0f %d", s / n, tok * 1000 / (s / n), b; else print "n/a n/a n/a" }'
}
# replay FILE STAGE WORLD -> "comm_ms bytes" from dist_bench's summary line
replay() {
  sed -n "s/^summary stage $2 world $3: comm \([0-9.]*\) ms\/step, \([0-9]*\) bytes.*/\1 \2/p" "$1"
}
mb() { awk -v b="$1" 'BEGIN { if (b == "n/a" || b == "") print "n/a"; else printf "%.3f", b / 1e6 }'; }
HDR='%-6s %-6s %10s %10s %7s %10s %14s %14s\n'
header() { printf "$HDR" stage ranks "step ms" "tok/s" eff "comm ms" "MB sent/rank" "(trainer)"; }
# row STAGE N JSONL GLOBAL_TOKENS REPLAY_FILE [TOK1]: one table row; TOK1 = tok/s at 1 rank for eff
row() {
  local ms tps bytes cms cbytes eff=-
  read -r ms tps bytes <<<"$(step_stats "$3" "$4")"
  read -r cms cbytes <<<"$(replay "$5" "$1" "$2")"
  [ -n "${6:-}" ] && eff=$(awk -v a="$tps" -v b="$6" -v n="$2" 'BEGIN { printf "%.0f%%", 100 * a / (n * b) }')
  printf "$HDR" "$1" "$2" "$ms" "$tps" "$eff" "${cms:-n/a}" "$(mb "${cbytes:-n/a}")" "$(mb "$bytes")"
}
# breakdown FILE WORLD: dist_bench's per-collective rows at WORLD
breakdown() {
  sed -n '/^stage world/p' "$1"
  awk -v w="$2" '$1 ~ /^[0-9]+$/ && $2 == w' "$1"
}
# model_shape LOG -> "layers channels max_seq padded_vocab" from the trainer's "| model" line
model_shape() {
  sed -n 's/^| model *n_layer=\([0-9]*\) n_head=[0-9]* n_embd=\([0-9]*\) max_seq=\([0-9]*\) vocab=[0-9]* (padded \([0-9]*\)).*/\1 \2 \3 \4/p' "$1" | head -1
}
fail() { echo "bench-dist: $1 failed:"; tail -n 20 "$2"; exit 1; }

# ---- 1. CPU backend over MPI -------------------------------------------------------------
L=${BENCH_LAYERS:-6} C=${BENCH_CHANNELS:-384} STEPS=${BENCH_STEPS:-6}
T=64 B=4 V=512
python3 test/distributed/synthetic_shard.py "$W/train.bin" 200000 "$V"
args=(--device cpu --model "d$L" --config "n_embd=$C,n_head=$((C / 64)),max_seq=$T,vocab_size=$V,padded_vocab_size=$V"
      -B $B -T $T --total-batch-tokens $((2 * B * T)) --max-steps "$STEPS" --val-every 0 --sample-every 0
      --no-shuffle --train-data "$W/train.bin")
echo "== CPU backend, MPI: ./train_gpt2cu --device cpu; model d$L: n_embd $C, vocab $V, B=$B T=$T," \
     "global batch $((2 * B * T)) tokens; $cores cores split over the ranks"
header
for np in 1 2; do
  "${MPIRUN[@]}" -np $np build/distributed/dist_bench --layers "$L" --channels "$C" --vocab "$V" --seq "$T" \
    --steps 20 >"$W/cpu_comm_$np.txt" 2>&1 || fail "dist_bench -np $np" "$W/cpu_comm_$np.txt"
  for z in 0 1 2; do
    threads=$(( cores / np > 0 ? cores / np : 1 ))
    if [ $np = 1 ]; then launch=(timeout -k 10 600); else launch=("${MPIRUN[@]}" -np $np); fi
    "${launch[@]}" ./train_gpt2cu "${args[@]}" --threads $threads --zero-stage $z \
      --log-jsonl "$W/cpu_s${z}_n$np.jsonl" >"$W/cpu_s${z}_n$np.log" 2>&1 || fail "CPU ZeRO-$z -np $np" "$W/cpu_s${z}_n$np.log"
    row $z $np "$W/cpu_s${z}_n$np.jsonl" $((2 * B * T)) "$W/cpu_comm_$np.txt"
  done
done
echo "per collective, 2 ranks (build/distributed/dist_bench; MB per step and rank):"
breakdown "$W/cpu_comm_2.txt" 2

# ---- 2. CUDA backend on the emulator, NCCL emulated over MPI -----------------------------
EMU=build/train_gpt2cu_emu EMU_BENCH=build/distributed/dist_bench_emu
if [ "${BENCH_EMU:-1}" = 0 ]; then
  echo "== emulated CUDA: skipped (BENCH_EMU=0)"
elif [ ! -x "$EMU" ] || [ ! -x "$EMU_BENCH" ]; then
  echo "== emulated CUDA: skipped ($EMU or $EMU_BENCH not built: no nccl.h/CUDA headers)"
else
  eL=2 eC=64 eV=256 eT=64 eB=2
  python3 test/distributed/synthetic_shard.py "$W/emu.bin" 20000 "$eV"
  export GPT2_EMU_THREADS=1  # one emulator worker per rank: 2 cores, 2 ranks
  EMPI=("${MPIRUN[@]}" -x GPT2_EMU_THREADS -x GPT2_EMU_DEVICE_COUNT)
  eargs=(--device cuda --model "d$eL" --config "n_embd=$eC,n_head=2,max_seq=$eT,vocab_size=$eV,padded_vocab_size=$eV"
         -B $eB -T $eT --total-batch-tokens $((2 * eB * eT)) --max-steps 6 --val-every 0 --sample-every 0
         --no-shuffle --threads 1 --train-data "$W/emu.bin")
  echo
  echo "== emulated CUDA, NCCL emulated over MPI: $EMU --device cuda (fp32), one emulated GPU per rank;" \
       "model d$eL: n_embd $eC, vocab $eV, B=$eB T=$eT, global batch $((2 * eB * eT)) tokens" \
       "(emulator times are not GPU times)"
  header
  for np in 1 2; do
    export GPT2_EMU_DEVICE_COUNT=$np
    busbw=(); [ $np -gt 1 ] && busbw=(--busbw-iters 5)
    "${EMPI[@]}" -np $np "$EMU_BENCH" --comm nccl --layers $eL --channels $eC --vocab $eV --seq $eT --steps 10 \
      "${busbw[@]}" >"$W/emu_comm_$np.txt" 2>&1 || fail "dist_bench_emu -np $np" "$W/emu_comm_$np.txt"
    for z in 0 1 2; do
      "${EMPI[@]}" -np $np "$EMU" "${eargs[@]}" --zero-stage $z --log-jsonl "$W/emu_s${z}_n$np.jsonl" \
        >"$W/emu_s${z}_n$np.log" 2>&1 || fail "emulated ZeRO-$z -np $np" "$W/emu_s${z}_n$np.log"
      row $z $np "$W/emu_s${z}_n$np.jsonl" $((2 * eB * eT)) "$W/emu_comm_$np.txt"
    done
  done
  unset GPT2_EMU_DEVICE_COUNT GPT2_EMU_THREADS
  echo "per collective, 2 ranks ($EMU_BENCH --comm nccl; MB per step and rank):"
  breakdown "$W/emu_comm_2.txt" 2
  echo "(emulated NCCL: the busbw code path, not a bandwidth)"
  sed -n '/^busbw/,$p' "$W/emu_comm_2.txt"
fi

# ---- 3. real GPUs --------------------------------------------------------------------------
# Never executed so far (written on a machine without GPUs).
echo
gpus=$( (nvidia-smi -L 2>/dev/null || true) | grep -c '^GPU ')
if [ "$gpus" = 0 ]; then
  echo "== GPUs: none listed by nvidia-smi -L: step time, scaling efficiency and busbw at 1..N GPUs skipped"
  exit 0
fi
GPU_BENCH=build/distributed/dist_bench_cuda
[ -x "$GPU_BENCH" ] || { echo "bench-dist: $gpus GPUs but $GPU_BENCH is not built (needs nvcc and nccl.h)"; exit 1; }
N=${BENCH_GPUS:-$gpus} gB=${BENCH_GPU_B:-8} gT=${BENCH_GPU_T:-1024} gSTEPS=${BENCH_GPU_STEPS:-20}
gMODEL=${BENCH_GPU_MODEL:-d12} gSTAGES=${BENCH_GPU_STAGES:-0 1 2}
ns=(); for ((n = 1; n <= N; n *= 2)); do ns+=($n); done
N=${ns[-1]}  # the largest power of two
python3 test/distributed/synthetic_shard.py "$W/gpu.bin" $(( (gSTEPS + 2) * N * gB * gT )) 50257
gargs=(--device cuda --dtype bf16 --model "$gMODEL" -B $gB -T $gT --max-steps "$gSTEPS" --val-every 0
       --sample-every 0 --no-shuffle --train-data "$W/gpu.bin")
echo "== $gpus GPUs ($(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)): ./train_gpt2cu --device cuda" \
     "--dtype bf16, model $gMODEL, B=$gB T=$gT per GPU (global batch n x $((gB * gT)) tokens), $gSTEPS steps"
declare -A tok1
for n in "${ns[@]}"; do
  for z in $gSTAGES; do
    if [ $n = 1 ]; then launch=(timeout -k 10 900); else launch=("${MPIRUN[@]}" -np $n); fi
    "${launch[@]}" ./train_gpt2cu "${gargs[@]}" --total-batch-tokens $((n * gB * gT)) --zero-stage $z \
      --log-jsonl "$W/gpu_s${z}_n$n.jsonl" >"$W/gpu_s${z}_n$n.log" 2>&1 || fail "GPU ZeRO-$z, $n GPUs" "$W/gpu_s${z}_n$n.log"
  done
  if [ $n = 1 ]; then  # the model's shape, from the trainer's config line, for dist_bench
    read -r gL gC gS gV <<<"$(model_shape "$W/gpu_s${gSTAGES%% *}_n1.log")"
    [ -n "${gV:-}" ] || { echo "bench-dist: no model shape in the GPU trainer's log"; exit 1; }
  fi
  "${MPIRUN[@]}" -np $n "$GPU_BENCH" --comm nccl --dtype bf16 --layers "$gL" --channels "$gC" --vocab "$gV" \
    --seq "$gS" --steps 10 --busbw-iters 20 >"$W/gpu_comm_$n.txt" 2>&1 || fail "dist_bench_cuda -np $n" "$W/gpu_comm_$n.txt"
done
header
for z in $gSTAGES; do
  for n in "${ns[@]}"; do
    read -r _ t1 _ <<<"$(step_stats "$W/gpu_s${z}_n1.jsonl" $((gB * gT)))"
    row $z $n "$W/gpu_s${z}_n$n.jsonl" $((n * gB * gT)) "$W/gpu_comm_$n.txt" "$t1"
  done
done
echo "per collective, $N GPUs ($GPU_BENCH --comm nccl --dtype bf16; MB per step and rank):"
breakdown "$W/gpu_comm_$N.txt" "$N"
for n in "${ns[@]}"; do
  [ $n -gt 1 ] || continue
  echo "$n GPUs:"
  sed -n '/^busbw/,$p' "$W/gpu_comm_$n.txt"
done
