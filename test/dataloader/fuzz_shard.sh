#!/usr/bin/env bash
# Builds the shard/state parser fuzzer with clang's libFuzzer + ASan + UBSan and
# runs it for a bounded time (FUZZ_SECONDS, default 20). Exit 0 = no crash, no
# leak, no sanitizer report. Needs Debian's clang and libclang-rt-14-dev.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANGXX=${CLANGXX:-clang++}
seconds=${FUZZ_SECONDS:-20}
out=build/fuzz/dataloader
mkdir -p "$out"
"$CLANGXX" -std=c++17 -O1 -g -I. -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  dataloader/file_io.cpp dataloader/shard.cpp dataloader/dataloader.cpp dataloader/loss_mask.cpp test/dataloader/fuzz_shard.cpp -o "$out/fuzz_shard"

work=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_shard.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$work/scratch"
# The target writes its own seeds (valid shards of both widths, a valid state)
# into the corpus folder before fuzzing starts.
FUZZ_SHARD_DIR="$work/scratch" FUZZ_SHARD_CORPUS="$work/corpus" \
  "$out/fuzz_shard" -max_total_time="$seconds" -max_len=4096 -timeout=10 -rss_limit_mb=2048 \
  -artifact_prefix="$out/" -print_final_stats=1 "$work/corpus"
