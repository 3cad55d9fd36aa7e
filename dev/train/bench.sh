#!/usr/bin/env bash
# `make bench`: tokens/s of one training step (forward + backward + AdamW, fp32)
# for GPT-2 d12 (124M) at B=4, T=64 and the quick start's model (4 layers,
# C=256, B=8, T=128; scripts/quickstart.sh), ours (CPU backend) next
# to PyTorch (Debian's torch, same thread count) measured in the same run, with
# model FLOPs utilisation against this machine's fp32 peak (measured here too).
# FLOPs per token = 3 x (2 x (12 L C^2 + C Vp) + 4 L T C): matmuls incl. the tied
# lm_head and full (non-causal) attention, forward + backward (PaLM convention).
# OPENBLAS_CORETYPE is left as the machine sets it, for both sides. Ours runs on
# the build's fp32 GEMM library (oneDNN where built with it) and, in a oneDNN
# build, once more on OpenBLAS (GPT2_CPU_GEMM=openblas): the library's gain.
set -euo pipefail
cd "$(dirname "$0")/../.."
threads=${BENCH_THREADS:-$(nproc)}
steps=${BENCH_STEPS:-5}
peak=$(build/dev/train/fp32_peak "$threads" | sed -E 's/.*fp32_peak_gflops=([0-9.]+).*/\1/')
printf 'machine fp32 peak: %s GFLOP/s (%s threads, FMA loop)\n\n' "$peak" "$threads"
printf '%-22s %-14s %10s %9s %9s %7s %11s\n' config impl ms/step tok/s GFLOP/s MFU peak_RSS_MB
field() { sed -E "s/.* $1=([^ ]+).*/\1/" <<<"$2"; }
run() {  # name L NH C B T
  local name=$1 L=$2 NH=$3 C=$4 B=$5 T=$6
  local flops_tok=$(( 3 * (2 * (12 * L * C * C + C * 50304) + 4 * L * T * C) ))
  local ours torch openblas=""
  local step=(build/dev/train/bench_train_step --model "d$L" --config "n_head=$NH,n_embd=$C" -B $B -T $T
              --steps "$steps" --threads "$threads")
  ours=$("${step[@]}" | grep RESULT)
  [ "$(field gemm "$ours")" = OpenBLAS ] || openblas=$(GPT2_CPU_GEMM=openblas "${step[@]}" | grep RESULT)
  torch=$(/usr/bin/python3 dev/train/bench_torch.py --L "$L" --NH "$NH" --C "$C" -B $B -T $T \
          --steps "$steps" --threads "$threads" | grep RESULT)
  local results=("$ours") r
  [ -z "$openblas" ] || results+=("$openblas")
  results+=("$torch")
  for r in "${results[@]}"; do
    local tps ms rss gf mfu impl
    tps=$(field tok_per_s "$r"); ms=$(field ms "$r"); rss=$(field peak_rss_mb "$r")
    impl=$(field impl "$r"); [ "$impl" = ours ] && impl="ours/$(field gemm "$r")"
    gf=$(awk -v t="$tps" -v f="$flops_tok" 'BEGIN{printf "%.1f", t*f/1e9}')
    mfu=$(awk -v g="$gf" -v p="$peak" 'BEGIN{printf "%.1f%%", 100*g/p}')
    printf '%-22s %-14s %10s %9s %9s %7s %11s\n' "$name" "$impl" "$ms" "$tps" "$gf" "$mfu" "$rss"
  done
  awk -v a="$(field tok_per_s "$ours")" -v b="$(field tok_per_s "$torch")" -v ra="$(field peak_rss_mb "$ours")" \
      -v rb="$(field peak_rss_mb "$torch")" \
      'BEGIN{printf "%-22s speed ours/pytorch = %.2fx, peak memory ours/pytorch = %.2fx\n", "", a/b, ra/rb}'
  [ -z "$openblas" ] ||
    awk -v a="$(field tok_per_s "$ours")" -v b="$(field tok_per_s "$openblas")" -v g="$(field gemm "$ours")" \
        'BEGIN{printf "%-22s speed %s/OpenBLAS = %.2fx\n", "", g, a/b}'
  echo
}
run "d12 (124M) B4 T64" 12 12 768 4 64
run "quick start d4 B8 T128" 4 4 256 8 128
