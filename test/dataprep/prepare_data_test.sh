#!/usr/bin/env bash
# ./prepare_data and scripts/prepare_tinyshakespeare.sh against tiktoken's ids
# (build/test/tokenizer/refs from test/tokenizer/make_refs.js): llm.c's tinyshakespeare shards,
# whole-file documents cut into many chunks, JSONL, shard sizes and names, u32 shards, progress
# output, memory bound, and every error path (exit 1 with "error: FILE...").
set -uo pipefail
refs=build/test/tokenizer/refs
prep=./prepare_data
tmp=$(mktemp -d "${TMPDIR:-/tmp}/prepare_data_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
# ids of one or more shards (headers skipped), space-separated on one line
ids_u16() { for f in "$@"; do od -An -tu2 -v -j1024 "$f"; done | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }
ids_u32() { for f in "$@"; do od -An -tu4 -v -j1024 "$f"; done | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }
header() { od -An -td4 -N16 "$1" | tr -s ' ' | sed 's/^ //'; }

# 1. the tinyshakespeare shards `make data` wrote: llm.c's split and tiktoken's ids exactly
val=data/tinyshakespeare/tiny_shakespeare_val.bin
train=data/tinyshakespeare/tiny_shakespeare_train.bin
[ "$(header $val)" = "20240520 1 32768 0" ] && ok "val header" || fail "val header: $(header $val)"
[ "$(header $train)" = "20240520 1 305260 0" ] && ok "train header" || fail "train header: $(header $train)"
[ "$(ids_u16 $val $train)" = "$(cat $refs/shakespeare.llmc.tiktoken)" ] \
  && ok "tinyshakespeare shards == tiktoken (llm.c convention)" || fail "tinyshakespeare shards differ from tiktoken"
# the script is idempotent and fast when up to date
before=$(stat -c %Y $val)
out=$(scripts/prepare_tinyshakespeare.sh 2>&1)
[ "$(stat -c %Y $val)" = "$before" ] && grep -q "up to date" <<< "$out" && ok "prepare_tinyshakespeare idempotent" \
  || fail "prepare_tinyshakespeare rewrote up-to-date shards: $out"

# 2. one document per file, cut into ~1 KiB work items on 2 threads: same ids as whole-text tiktoken
$prep --threads 2 --chunk-bytes 1K --val-tokens 1000 --shard-tokens 100K --progress none \
  --out-prefix "$tmp/ts/whole" data/tinyshakespeare/input.txt || fail "prepare_data whole-file run"
shards=$(echo "$tmp"/ts/whole_val_000000.bin "$tmp"/ts/whole_train_*.bin)  # val first, then train in order
[ "$(echo $shards | wc -w)" = 5 ] && ok "5 shards (val + 4 train)" || fail "shards: $shards"
[ "$(ids_u16 $shards)" = "50256 $(cat $refs/shakespeare.whole.tiktoken)" ] \
  && ok "chunked whole-file document == tiktoken" || fail "chunked whole-file document differs from tiktoken"
[ "$(header "$tmp/ts/whole_train_000001.bin")" = "20240520 1 100000 0" ] && ok "train shard size" \
  || fail "train shard header $(header "$tmp/ts/whole_train_000001.bin")"
[ "$(header "$tmp/ts/whole_train_000004.bin")" = "20240520 1 37026 0" ] && ok "last shard size" \
  || fail "last shard header $(header "$tmp/ts/whole_train_000004.bin")"

# re-running into the same prefix with bigger shards removes the now-stale ones
$prep --threads 2 --val-tokens 1000 --shard-tokens 200K --progress none \
  --out-prefix "$tmp/ts/whole" data/tinyshakespeare/input.txt 2> "$tmp/restale.log" || fail "prepare_data re-run"
shards=$(echo "$tmp"/ts/whole_val_000000.bin "$tmp"/ts/whole_train_*.bin)
[ "$(echo $shards | wc -w)" = 3 ] && [ ! -e "$tmp/ts/whole_train_000004.bin" ] && \
  [ "$(ids_u16 $shards)" = "50256 $(cat $refs/shakespeare.whole.tiktoken)" ] \
  && ok "re-run with bigger shards: 3 shards, stale ones removed, same tokens" || fail "stale shards: $shards"

# 3. JSONL: one document per line, EOT before each, u32 shards; the same on 1 thread
want=$(awk '{ printf "%s50256%s%s", (NR > 1 ? " " : ""), ($0 == "" ? "" : " "), $0 }' $refs/stress.lines.tiktoken)
for t in 1 2; do
  $prep --threads $t --chunk-bytes 1K --val-tokens 300 --shard-tokens 500 --token-width u32 --progress none \
    --out-prefix "$tmp/j$t/stress" $refs/stress.jsonl || fail "prepare_data JSONL run ($t threads)"
  [ "$(ids_u32 "$tmp/j$t"/stress_val_000000.bin "$tmp/j$t"/stress_train_*.bin)" = "$want" ] \
    && ok "JSONL ($t threads) == tiktoken per document" || fail "JSONL ($t threads) differs from tiktoken"
done
[ "$(header "$tmp/j2/stress_val_000000.bin")" = "20240801 7 300 0" ] && ok "u32 header" \
  || fail "u32 header $(header "$tmp/j2/stress_val_000000.bin")"

# 4. two text files -> two documents; --doc-separator with escapes
printf 'first doc' > "$tmp/a.txt"; printf 'second\tdoc' > "$tmp/b.txt"
$prep --val-tokens 0 --shard-tokens 0 --no-shard-index --progress none --out-prefix "$tmp/two/x" "$tmp/a.txt" "$tmp/b.txt"
got=$(ids_u16 "$tmp/two/x_train.bin")
want="50256 $(./gpt2_tokenizer encode "$tmp/a.txt") 50256 $(./gpt2_tokenizer encode "$tmp/b.txt")"
[ "$got" = "$want" ] && ok "two files = two documents" || fail "two files: got '$got' want '$want'"
[ ! -e "$tmp/two/x_val.bin" ] && ok "--val-tokens 0 writes no val shard" || fail "val shard written with --val-tokens 0"
printf 'a\tb\tc' > "$tmp/sep.txt"
$prep --doc-separator '\t' --val-tokens 0 --shard-tokens 0 --no-shard-index --progress none \
  --out-prefix "$tmp/sep/x" "$tmp/sep.txt"
got=$(ids_u16 "$tmp/sep/x_train.bin")
[ "$got" = "50256 $(printf 'a\t' | ./gpt2_tokenizer encode) 50256 $(printf 'b\t' | ./gpt2_tokenizer encode) 50256 $(printf c | ./gpt2_tokenizer encode)" ] \
  && ok "--doc-separator keeps SEP at the end of each document" || fail "--doc-separator: $got"

# 5. progress: periodic plain lines when stderr is not a terminal
$prep --progress lines --progress-interval 0.000001 --chunk-bytes 1K --val-tokens 1000 --out-prefix "$tmp/p/x" \
  data/tinyshakespeare/input.txt 2> "$tmp/progress.log"
grep -q "^progress: .*tok/s" "$tmp/progress.log" && grep -q "^done: 1 documents, 338,026 tokens" "$tmp/progress.log" \
  && ! grep -q $'\r' "$tmp/progress.log" && ok "progress lines" || fail "progress output: $(head -3 "$tmp/progress.log")"

# 6. bounded memory: 30 MiB of input (one document) with 64 KiB work items stays far below its size
for i in $(seq 27); do cat data/tinyshakespeare/input.txt; done > "$tmp/big.txt"
rss_mb=$($prep --threads 2 --chunk-bytes 64K --progress lines --out-prefix "$tmp/big/x" "$tmp/big.txt" 2>&1 |
  sed -n 's/^done: .*peak RSS \([0-9]*\) MB.*/\1/p')
# 1 + 27 x 338,025 tokens; the default val split is a tenth of the 30,115,638 bytes at 4 bytes a token.
[ "$(header "$tmp/big/x_val_000000.bin") $(header "$tmp/big/x_train_000001.bin")" = "20240520 1 752890 0 20240520 1 8373786 0" ] \
  && ok "30 MB document: 9,126,676 tokens, default split 752,890 val + 8,373,786 train" \
  || fail "big run headers $(header "$tmp/big/x_val_000000.bin") / $(header "$tmp/big/x_train_000001.bin")"

# 6b. a small corpus without --val-tokens still gets train tokens, and the split is reported;
# an explicit val split that swallows everything is warned about.
$prep --progress none --out-prefix "$tmp/small/x" data/tinyshakespeare/input.txt 2> "$tmp/small.log"
grep -q "^split: 27,884 val tokens (default: a tenth of the corpus), 310,142 train tokens in 1 train shard(s)$" \
  "$tmp/small.log" && ok "small corpus: $(cat "$tmp/small.log")" || fail "small corpus split: $(cat "$tmp/small.log")"
$prep --progress none --val-tokens 1M --out-prefix "$tmp/small2/x" data/tinyshakespeare/input.txt 2> "$tmp/small2.log"
grep -q "^warning: all 338,026 tokens went to the validation shard" "$tmp/small2.log" \
  && ok "val swallowing the corpus is warned about" || fail "no warning: $(cat "$tmp/small2.log")"
[ -n "$rss_mb" ] && [ "$rss_mb" -lt 100 ] && ok "peak RSS ${rss_mb} MB for a 30 MB input" \
  || fail "peak RSS '${rss_mb}' MB (expected < 100 MB)"
rm -rf "$tmp/big.txt" "$tmp/big"

# 7. errors: exit 1, "error: " naming the file (and line / byte offset), no partial shard left
expect_error() {
  local pattern=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [ $rc -eq 1 ] && grep -q "^error: .*$pattern" "$tmp/err"; then ok "error: $pattern"
  else fail "expected exit 1 and 'error: ...$pattern' from: $* (rc=$rc, stderr: $(cat "$tmp/err"))"; fi
}
expect_error "unknown option --frobnicate" $prep --frobnicate --out-prefix "$tmp/e/x" "$tmp/a.txt"
expect_error "no input files" $prep --out-prefix "$tmp/e/x"
expect_error "--out-prefix is required" $prep "$tmp/a.txt"
expect_error "--shard-tokens: bad number" $prep --shard-tokens 12Q --out-prefix "$tmp/e/x" "$tmp/a.txt"
expect_error "missing.txt: cannot stat" $prep --out-prefix "$tmp/e/x" "$tmp/missing.txt"
printf 'good line\nbad \xff byte\n' > "$tmp/bad.txt"
expect_error "bad.txt: invalid UTF-8 at byte offset 14" $prep --out-prefix "$tmp/e/x" "$tmp/bad.txt"
[ -z "$(ls "$tmp/e" 2>/dev/null)" ] && ok "no shard (nor .tmp) left after an error" || fail "left behind: $(ls "$tmp/e")"
$prep --invalid-utf8 replace --val-tokens 0 --shard-tokens 0 --no-shard-index --progress none \
  --out-prefix "$tmp/r/x" "$tmp/bad.txt" && [ "$(ids_u16 "$tmp/r/x_train.bin")" = "50256 $(./gpt2_tokenizer encode --replace-invalid "$tmp/bad.txt")" ] \
  && ok "--invalid-utf8 replace" || fail "--invalid-utf8 replace"
printf '{"text": "ok"}\n{"text": 5}\n' > "$tmp/bad1.jsonl"
expect_error "bad1.jsonl:2: no string field \"text\"" $prep --out-prefix "$tmp/e/x" "$tmp/bad1.jsonl"
printf '{"text": "ok"}\n\n{"text": "unterminated}\n' > "$tmp/bad2.jsonl"
expect_error "bad2.jsonl:3: .*parse error" $prep --out-prefix "$tmp/e/x" "$tmp/bad2.jsonl"
expect_error "needs more than one shard" $prep --val-tokens 10 --shard-tokens 10 --no-shard-index \
  --out-prefix "$tmp/e2/x" data/tinyshakespeare/input.txt

# 8. --help documents every option the parser accepts
help=$($prep --help)
for opt in $(grep -o '"--[a-z0-9-]*"' dataprep/prepare_data.cpp | tr -d '"' | sort -u); do
  grep -q -- "$opt" <<< "$help" || fail "--help does not mention $opt"
done
ok "--help lists every option"

echo "$fails failure(s)"
[ $fails -eq 0 ]
