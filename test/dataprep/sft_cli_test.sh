#!/usr/bin/env bash
# ./prepare_data --sft from the command line (docs/sft.md): output files and their headers, exact
# ids and mask bytes of a prompt/completion and a messages example, --format sft == --sft,
# --no-pack, --val-examples, the summary lines, truncation, every CLI error naming file:line, and
# a plain run into an SFT prefix removing the now-stale sidecars. The library side (exact
# template, packing invariants, the DataLoader over the shards) is test/dataprep/sft_test.cpp.
set -uo pipefail
prep=./prepare_data
tmp=$(mktemp -d "${TMPDIR:-/tmp}/sft_cli_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
ids_u16() { od -An -tu2 -v -j1024 "$1" | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }
mask_bytes() { od -An -tu1 -v -j1024 "$1" | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }
header() { od -An -td4 -N"${2:-16}" "$1" | tr -s ' \n' '  ' | sed 's/^ //; s/ $//'; }

cat > "$tmp/d.jsonl" <<'JSONL'
{"prompt": "What is the capital of France?\n", "completion": "Paris."}

{"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Bye"}, {"role": "assistant", "content": "Bye."}]}
{"prompt": "Q:", "completion": " Paris."}
JSONL

# 1. packed, T=24: example 1 (11 tokens) is the val shard; examples 2 (22) and 3 (5) do not share a block
$prep --sft --seq-len 24 --val-examples 1 --progress none --out-prefix "$tmp/o/x" "$tmp/d.jsonl" 2> "$tmp/log" \
  || fail "prepare_data --sft run: $(cat "$tmp/log")"
[ "$(cd "$tmp/o" && ls | tr '\n' ' ')" = "x_train_000001.bin x_train_000001.mask x_val_000000.bin x_val_000000.mask " ] \
  && ok "file names" || fail "files: $(ls "$tmp/o")"
[ "$(header "$tmp/o/x_val_000000.bin")" = "20240520 1 25 0" ] && ok "val shard header: 24 + 1 tokens" \
  || fail "val shard header $(header "$tmp/o/x_val_000000.bin")"
[ "$(header "$tmp/o/x_val_000000.mask" 28)" = "20241123 1 25 0 24 1 0" ] && ok "val mask header (magic, version, count, T, examples)" \
  || fail "val mask header $(header "$tmp/o/x_val_000000.mask" 28)"
[ "$(stat -c %s "$tmp/o/x_train_000001.mask")" = $((1024 + 49)) ] && [ "$(header "$tmp/o/x_train_000001.mask" 24)" = "20241123 1 49 0 24 2" ] \
  && ok "train mask: 2 blocks + 1 pad, 2 examples" || fail "train mask header $(header "$tmp/o/x_train_000001.mask" 24)"
pad() { local n=$1 v=$2 s=""; for ((i = 0; i < n; i++)); do s+=" $v"; done; echo "$s"; }
want="2061 318 262 3139 286 4881 30 198 40313 13 50256$(pad 14 50256)"
[ "$(ids_u16 "$tmp/o/x_val_000000.bin")" = "$want" ] && ok "prompt/completion ids" || fail "val ids $(ids_u16 "$tmp/o/x_val_000000.bin")"
[ "$(mask_bytes "$tmp/o/x_val_000000.mask")" = "0 0 0 0 0 0 0 0 1 1 1$(pad 14 0)" ] && ok "prompt/completion mask" \
  || fail "val mask $(mask_bytes "$tmp/o/x_val_000000.mask")"
want="3856 4506 13 628 12982 25 15902 198 48902 25 18435 0 198 12982 25 47843 198 48902 25 47843 13 50256$(pad 2 50256)"
want+=" 48 25 6342 13 50256$(pad 19 50256) 50256"
[ "$(ids_u16 "$tmp/o/x_train_000001.bin")" = "$want" ] && ok "messages ids, then the next example in a new block" \
  || fail "train ids $(ids_u16 "$tmp/o/x_train_000001.bin")"
[ "$(mask_bytes "$tmp/o/x_train_000001.mask")" = "0 0 0 0 0 0 0 0 0 0 1 1 1 0 0 0 0 0 0 1 1 1$(pad 2 0) 0 0 1 1 1$(pad 19 0) 0" ] \
  && ok "messages mask" || fail "train mask $(mask_bytes "$tmp/o/x_train_000001.mask")"
grep -qx "sft: 3 examples (1 val, 2 train) in 3 blocks of 24 tokens (1 val, 2 train), packed" "$tmp/log" \
  && grep -qx "sft: 12 supervised tokens (16.7% of 72 block tokens), padding 47.2% (34 pad tokens)" "$tmp/log" \
  && grep -qx "sft: truncated 0 of 3 examples to 24 tokens" "$tmp/log" && ok "summary" || fail "summary: $(cat "$tmp/log")"

# 2. --format sft is --sft; --pack packs examples 2 and 3 together at T=64 (22 + 5 tokens)
$prep --format sft --seq-len 64 --progress none --out-prefix "$tmp/f/x" "$tmp/d.jsonl" 2> "$tmp/log" || fail "--format sft"
[ "$(header "$tmp/f/x_train_000001.bin")" = "20240520 1 65 0" ] && grep -q "^sft: 3 examples (0 val, 3 train) in 1 blocks" "$tmp/log" \
  && ok "--format sft, all three in one block of 64" || fail "--format sft: $(cat "$tmp/log")"
$prep --sft --no-pack --seq-len 64 --progress none --out-prefix "$tmp/n/x" "$tmp/d.jsonl" 2> "$tmp/log" || fail "--no-pack"
[ "$(header "$tmp/n/x_train_000001.bin")" = "20240520 1 193 0" ] && grep -q "in 3 blocks of 64 tokens.*(--no-pack)$" "$tmp/log" \
  && ok "--no-pack: one block per example" || fail "--no-pack: $(cat "$tmp/log")"

# 3. truncation (default) and --sft-truncate error
$prep --sft --seq-len 12 --progress none --out-prefix "$tmp/t/x" "$tmp/d.jsonl" 2> "$tmp/log" || fail "truncating run"
grep -qx "sft: truncated 1 of 3 examples to 12 tokens" "$tmp/log" && ok "truncated 1 of 3" || fail "truncation: $(cat "$tmp/log")"

expect_error() {
  local pattern=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [ $rc -eq 1 ] && grep -q -- "^error: .*$pattern" "$tmp/err"; then ok "error: $pattern"
  else fail "expected exit 1 and 'error: ...$pattern' from: $* (rc=$rc, stderr: $(cat "$tmp/err"))"; fi
}
expect_error "d.jsonl:3: example of 22 tokens is longer than --seq-len 12" \
  $prep --sft --seq-len 12 --sft-truncate error --out-prefix "$tmp/e/x" "$tmp/d.jsonl"
printf '{"prompt": "a", "completion": "b"}\n{"text": "c"}\n' > "$tmp/bad1.jsonl"
expect_error "bad1.jsonl:2: neither \"prompt\"/\"completion\" nor \"messages\"" \
  $prep --sft --seq-len 8 --out-prefix "$tmp/e/x" "$tmp/bad1.jsonl"
printf '\n{"messages": [{"role": "tool", "content": "c"}]}\n' > "$tmp/bad2.jsonl"
expect_error "bad2.jsonl:2: message 1: unknown role \"tool\"" $prep --sft --seq-len 8 --out-prefix "$tmp/e/x" "$tmp/bad2.jsonl"
printf '{"prompt": "a", "completion": "b"\n' > "$tmp/bad3.jsonl"
expect_error "bad3.jsonl:1: .*parse error" $prep --sft --seq-len 8 --out-prefix "$tmp/e/x" "$tmp/bad3.jsonl"
expect_error "--sft needs --seq-len" $prep --sft --out-prefix "$tmp/e/x" "$tmp/d.jsonl"
expect_error "--val-tokens does not apply to --sft" $prep --sft --seq-len 8 --val-tokens 5 --out-prefix "$tmp/e/x" "$tmp/d.jsonl"
expect_error "need --sft" $prep --seq-len 8 --out-prefix "$tmp/e/x" "$tmp/d.jsonl"
expect_error "--sft-truncate: expected truncate or error" $prep --sft --seq-len 8 --sft-truncate maybe --out-prefix "$tmp/e/x" "$tmp/d.jsonl"
expect_error "--seq-len: expected 1 .. 2^30" $prep --sft --seq-len 0 --out-prefix "$tmp/e/x" "$tmp/d.jsonl"
[ -z "$(ls "$tmp/e" 2>/dev/null)" ] && ok "no shard, sidecar or .tmp left after an error" || fail "left behind: $(ls "$tmp/e")"

# 4. a plain run into an SFT prefix removes the sidecars that no longer match a shard
printf 'plain text document' > "$tmp/plain.txt"
$prep --val-tokens 0 --progress none --out-prefix "$tmp/o/x" "$tmp/plain.txt" 2> /dev/null || fail "plain run"
[ "$(cd "$tmp/o" && ls | tr '\n' ' ')" = "x_train_000001.bin " ] && ok "plain re-run removed the SFT sidecars and val shard" \
  || fail "after plain re-run: $(ls "$tmp/o")"

echo "$fails failure(s)"
[ $fails -eq 0 ]
