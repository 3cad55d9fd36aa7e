#!/usr/bin/env bash
# make profile-cuda: every CUDA op of the d12 training step once in the emulator's
# profile build (dev/profile/profile_cuda_ops.cpp), each case in its own process
# so that a kernel's counts belong to one op; then the per-kernel file and table.
# Usage: dev/profile/profile_cuda.sh DRIVER OUT_DIR
#   OUT_DIR/cases/I.jsonl   GPT2_EMU_PROFILE of case I
#   OUT_DIR/kernels.jsonl   one line per (op, kernel), emu/profile.h's fields plus
#                           "op", "shape", "scale" (to one call at d12 B=64 T=1024)
#                           and "dtype" (the storage type profiled: bf16)
#   OUT_DIR/kernels.md      the table (also printed)
set -euo pipefail
driver=$1 out=$2
mkdir -p "$out/cases"
rm -f "$out"/cases/*.jsonl
"$driver" --list >"$out/cases/list.tsv"
while IFS=$'\t' read -r i op shape scale dtype; do
  start=$(date +%s)
  GPT2_EMU_PROFILE="$out/cases/$i.jsonl" "$driver" --case "$i" </dev/null
  echo "profiled case $i: $op $shape $dtype ($(($(date +%s) - start)) s)" >&2
done <"$out/cases/list.tsv"
/usr/bin/env python3 "$(dirname "$0")/profile_table.py" "$out/cases" "$out/kernels.jsonl" | tee "$out/kernels.md"
