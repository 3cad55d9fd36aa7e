#!/usr/bin/env bash
# The roofline script's memory model against what the trainer really allocates:
# runs the emulated CUDA trainer (build/train_gpt2cu_emu, bf16, flash attention)
# for one step of a tiny config and compares its "| memory/rank" line (params,
# grads, optimizer, activations; format_bytes, 2 decimals) with the script's,
# one rank, ~1 s per config. Then ZeRO 0-3 over several ranks against the
# trainer's --dry-run table (the allocator's own count, byte for byte: its row
# at each world size, total bytes included, and with --offload-optimizer cpu
# the host's bytes), ~0.5 s per config.
set -euo pipefail
cd "$(dirname "$0")/../.."
BIN=${TRAINER:-build/train_gpt2cu_emu}
DRY=${DRY_RUN_TRAINER:-./train_gpt2cu}
[ -x "$BIN" ] || [ -x "$DRY" ] || { echo "SKIP: neither $BIN nor $DRY is built"; exit 77; }
fail=0
check() {  # model B T recompute dtype [offload]
  local model=$1 B=$2 T=$3 rc=$4 dt=$5 off=${6:-none}
  local got want
  got=$("$BIN" --device cuda --dtype "$dt" --model "$model" --config max_seq=64 -B "$B" -T "$T" --max-steps 1 \
        --val-every 0 --sample-every 0 --recompute "$rc" --offload-optimizer "$off" 2>&1 |
        sed -n 's/^| memory\/rank  //p')
  want=$(python3 dev/roofline/roofline.py --model "$model" --max-seq 64 -B "$B" -T "$T" --recompute "$rc" \
         --dtype "$dt" --offload-optimizer "$off" --trainer-line)
  if [ "$got" == "$want" ]; then echo "ok   $model B=$B T=$T recompute=$rc $dt offload $off: $got"
  else echo "FAIL $model B=$B T=$T recompute=$rc $dt offload $off"; echo "  trainer: $got"; echo "  script:  $want"; fail=1; fi
}
# plan MODEL B T RECOMPUTE DTYPE ZERO WORLDS [OFFLOAD]: every row of --dry-run WORLDS --device cuda
plan() {
  local model=$1 B=$2 T=$3 rc=$4 dt=$5 z=$6 worlds=$7 w got want
  local flags=(--model "$model" -B "$B" -T "$T" --recompute "$rc" --dtype "$dt" --offload-optimizer "${8:-none}")
  local seq=() seq_py=()
  case $model in d12|d48) ;; *) seq=(--config max_seq=64); seq_py=(--max-seq 64) ;; esac
  got=$("$DRY" --dry-run "$worlds" --device cuda --zero-stage "$z" "${flags[@]}" "${seq[@]}" 2>&1 |
        sed -n '/^  world/,$p' | tail -n +2)
  want=$(for w in ${worlds//,/ }; do
           python3 dev/roofline/roofline.py "${flags[@]}" "${seq_py[@]}" --zero "$z" --world "$w" --dry-run-line; done)
  if [ -n "$got" ] && [ "$got" == "$want" ]; then
    echo "ok   $model B=$B T=$T recompute=$rc $dt ZeRO-$z offload ${8:-none} at $worlds ranks (--dry-run rows)"
  else
    echo "FAIL $model B=$B T=$T recompute=$rc $dt ZeRO-$z offload ${8:-none} at $worlds ranks"
    echo "  trainer --dry-run:"; echo "$got" | sed 's/^/    /'
    echo "  script:"; echo "$want" | sed 's/^/    /'; fail=1
  fi
}
if [ -x "$BIN" ]; then
  check d2 2 32 0 bf16
  check d2 2 32 1 bf16
  check d3 3 64 1 bf16
  check d3 3 64 2 bf16
  check d2 2 32 2 fp32
  check d2 2 32 0 fp32
  check d2 2 32 0 bf16 cpu
  check d2 2 32 1 fp32 cpu
else echo "SKIP: $BIN not built (make build/train_gpt2cu_emu): the one-rank runs"; fi
if [ -x "$DRY" ]; then
  # ZeRO-3 at one rank has two layer slots, at several three (the next layer
  # gathered ahead); 3 ranks split units unevenly.
  for z in 0 1 2 3; do plan d2 2 32 0 bf16 $z 1,2,3,8; done
  plan d3 3 64 2 bf16 3 1,2,3,8
  plan d2 2 32 1 fp32 3 1,2,3,8
  plan d2 2 32 0 fp32 2 2,3
  plan d12 8 1024 0 bf16 3 8,64
  plan d48 4 1024 0 bf16 3 8,64
  plan d48 4 1024 2 bf16 2 8,64
  # Offloaded: no optimizer on the device, the host column (m, v, fp32 copy,
  # gradient landing buffer) at either precision.
  for z in 0 1 2 3; do plan d2 2 32 0 bf16 $z 1,2,3,8 cpu; done
  plan d2 2 32 1 fp32 3 1,3,8 cpu
  plan d48 4 1024 0 bf16 3 1,8,64 cpu
else echo "SKIP: $DRY not built (make train_gpt2cu): the --dry-run rows"; fi
exit $fail
