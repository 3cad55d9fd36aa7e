#!/usr/bin/env bash
# make bench-tokenizer: GPT-2 encode throughput on tinyshakespeare, ours vs npm tiktoken (WASM),
# measured in the same run.
#   1. gpt2::Tokenizer, one thread (build/dev/tokenizer/bench_tokenizer)
#   2. tiktoken WASM encode_ordinary, one thread (node)
#   3. ./prepare_data end to end (read, encode, write shards) with 1 thread and with every core,
#      on tinyshakespeare repeated BENCH_REPEAT times (default 16, ~18 MB) so threads have work;
#      wall-clock MB/s (what scaling means) and MB per CPU-second (its cost)
set -euo pipefail
text=data/tinyshakespeare/input.txt
modules=build/node/node_modules
repeat=${BENCH_REPEAT:-16}
cores=$(nproc)
tmp=$(mktemp -d "${TMPDIR:-/tmp}/bench_tokenizer.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

mbs() { awk '{print $1}'; }
ours=$(build/dev/tokenizer/bench_tokenizer "$text" 3 | mbs)
tik=$(node dev/tokenizer/bench_tiktoken.js "$modules" "$text" 3 | mbs)

for i in $(seq "$repeat"); do cat "$text"; done > "$tmp/big.txt"
bytes=$(stat -c %s "$tmp/big.txt")
prep_run() {  # prep_run THREADS: "wall-MB/s MB-per-CPU-second" of the best of 3 runs (by wall time)
  local best_wall=1e9 best_cpu=0 line wall cpu
  for _ in 1 2 3; do
    line=$( { TIMEFORMAT='%R %U %S'; time ./prepare_data --threads "$1" --progress none --doc-separator '\n\n' \
              --out-prefix "$tmp/out/x" "$tmp/big.txt" > /dev/null; } 2>&1 | tail -n 1)
    wall=$(awk '{print $1}' <<< "$line"); cpu=$(awk '{print $2 + $3}' <<< "$line")
    if awk -v a="$wall" -v b="$best_wall" 'BEGIN { exit !(a < b) }'; then best_wall=$wall best_cpu=$cpu; fi
  done
  awk -v w="$best_wall" -v c="$best_cpu" -v b="$bytes" 'BEGIN { printf "%.1f %.1f", b / w / 1e6, b / c / 1e6 }'
}
read -r p1 p1cpu <<< "$(prep_run 1)"
read -r pn pncpu <<< "$(prep_run "$cores")"

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }
echo "GPT-2 encode throughput on tinyshakespeare ($(stat -c %s "$text") bytes; $cores cores;" \
     "load average $(cut -d' ' -f1 /proc/loadavg); $(date -u +%F))"
echo "  single thread, MB per second of CPU time (robust on a busy machine):"
printf '    %-46s %8s MB/s  %s\n' "tiktoken npm (WASM)" "$tik" "1.00x"
printf '    %-46s %8s MB/s  %s\n' "gpt2::Tokenizer" "$ours" "$(ratio "$ours" "$tik")"
echo "  ./prepare_data end to end on ${repeat}x the text (read, encode, write shards):"
printf '    %-46s %8s MB/s wall  %s   %6s MB/CPU-s\n' "1 encoding thread" "$p1" "$(ratio "$p1" "$tik")" "$p1cpu"
printf '    %-46s %8s MB/s wall  %s   %6s MB/CPU-s   (%s the 1-thread wall rate)\n' "$cores encoding threads" "$pn" \
  "$(ratio "$pn" "$tik")" "$pncpu" "$(ratio "$pn" "$p1")"
