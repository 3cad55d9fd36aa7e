#!/usr/bin/env bash
# Bounded libFuzzer run (clang, ASan + UBSan) over the vocab parsers and encode/decode round trips
# (test/tokenizer/fuzz_vocab.cpp). Seeds: the heads of the real encoder.json / vocab.bpe and the
# stress text. FUZZ_RUNS / FUZZ_SECONDS bound the run (defaults 20000 runs, 30 s at most).
set -euo pipefail
out=build/test/tokenizer/fuzz
bin=$out/fuzz_vocab
mkdir -p "$out"
srcs=(test/tokenizer/fuzz_vocab.cpp tokenizer/tokenizer.cpp tokenizer/tokenizer.h util/checked_io.cpp util/checked_io.h)
if [ ! -x "$bin" ] || [ -n "$(find "${srcs[@]}" -newer "$bin" 2>/dev/null)" ]; then
  clang++ -std=c++17 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined -I. \
    test/tokenizer/fuzz_vocab.cpp tokenizer/tokenizer.cpp util/checked_io.cpp -lpcre2-8 -o "$bin.tmp"
  mv -f "$bin.tmp" "$bin"
fi
seeds=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_vocab_seeds.XXXXXX")
corpus=$(mktemp -d "${TMPDIR:-/tmp}/fuzz_vocab_corpus.XXXXXX")
trap 'rm -rf "$seeds" "$corpus"' EXIT
vocab=${GPT2_VOCAB_DIR:-data/gpt2}
head -c 2000 "$vocab/encoder.json" > "$seeds/encoder_head.json"
printf '{"!": 0, "\\u0120the": 262, "<|endoftext|>": 50256}' > "$seeds/encoder_small.json"
head -c 2000 "$vocab/vocab.bpe" > "$seeds/vocab_head.bpe"
head -c 3000 test/tokenizer/stress.txt > "$seeds/stress.txt"
"$bin" -runs="${FUZZ_RUNS:-20000}" -max_total_time="${FUZZ_SECONDS:-30}" -max_len=4096 -timeout=10 \
  -rss_limit_mb=2048 "$corpus" "$seeds" 2>&1 | tail -n 20
