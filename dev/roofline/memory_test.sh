#!/usr/bin/env bash
# The roofline script's memory model against what the trainer really allocates:
# runs the emulated CUDA trainer (build/train_gpt2cu_emu, bf16, flash attention)
# for one step of a tiny config and compares its "| memory/rank" line (params,
# grads, optimizer, activations; format_bytes, 2 decimals) with the script's.
# One rank only (ZeRO-1/2 over several ranks is not checked). ~1 s per config.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${TRAINER:-build/train_gpt2cu_emu}
[ -x "$BIN" ] || { echo "SKIP: $BIN not built (make build/train_gpt2cu_emu)"; exit 77; }
fail=0
check() {  # model B T recompute dtype
  local model=$1 B=$2 T=$3 rc=$4 dt=$5 L=${1#d}
  local got want
  got=$("$BIN" --device cuda --dtype "$dt" --model "$model" --config max_seq=64 -B "$B" -T "$T" --max-steps 1 \
        --val-every 0 --sample-every 0 --recompute "$rc" 2>&1 | sed -n 's/^| memory\/rank  //p')
  want=$(python3 dev/roofline/roofline.py --model "$model" --max-seq 64 -B "$B" -T "$T" --recompute "$rc" \
         --dtype "$dt" --trainer-line)
  if [ "$got" == "$want" ]; then echo "ok   $model B=$B T=$T recompute=$rc $dt: $got"
  else echo "FAIL $model B=$B T=$T recompute=$rc $dt"; echo "  trainer: $got"; echo "  script:  $want"; fail=1; fi
}
check d2 2 32 0 bf16
check d2 2 32 1 bf16
check d3 3 64 1 bf16
check d3 3 64 2 bf16
check d2 2 32 2 fp32
check d2 2 32 0 fp32
exit $fail
