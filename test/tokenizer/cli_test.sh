#!/usr/bin/env bash
# ./gpt2_tokenizer from the outside: encode/decode on stdin and files against tiktoken's ids
# (build/test/tokenizer/refs, made by test/tokenizer/make_refs.js), errors, export-llmc.
set -uo pipefail
refs=build/test/tokenizer/refs
tool=./gpt2_tokenizer
tmp=$(mktemp -d "${TMPDIR:-/tmp}/cli_test.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }

# 1. the form the issue prescribes: echo ... | ./gpt2_tokenizer encode
got=$(echo "Hello world" | $tool encode)
want=$(node -e '
  const r = require("module").createRequire(process.cwd() + "/build/node/x.js");
  const { Tiktoken } = r("tiktoken/lite"); const g = r("tiktoken/encoders/gpt2.json");
  const e = new Tiktoken(g.bpe_ranks, g.special_tokens, g.pat_str);
  console.log(Array.from(e.encode_ordinary("Hello world\n")).join(" "));')
[ "$got" = "$want" ] && [ -n "$got" ] && ok "echo | encode = $got" || fail "echo | encode: got '$got', tiktoken '$want'"

# 2. whole stress text, file argument and stdin
want=$(cat $refs/stress.whole.tiktoken)
[ "$($tool encode test/tokenizer/stress.txt)" = "$want" ] && ok "encode FILE" || fail "encode FILE differs from tiktoken"
[ "$($tool encode < test/tokenizer/stress.txt)" = "$want" ] && ok "encode stdin" || fail "encode stdin differs from tiktoken"
# output is exactly one line
[ "$($tool encode test/tokenizer/stress.txt | wc -l)" = 1 ] && ok "one line" || fail "encode output is not one line"

# 3. decode: tiktoken's ids back to the exact bytes (file and stdin)
$tool decode $refs/stress.whole.tiktoken > "$tmp/dec1" && cmp -s "$tmp/dec1" test/tokenizer/stress.txt \
  && ok "decode FILE" || fail "decode FILE does not give the stress text back"
$tool decode < $refs/stress.whole.tiktoken > "$tmp/dec2" && cmp -s "$tmp/dec2" test/tokenizer/stress.txt \
  && ok "decode stdin" || fail "decode stdin does not give the stress text back"

# 4. a few stress lines one by one through stdin (each ends in "\n" except maybe the last)
for n in 1 2 16 24 25 27 28; do
  line=$(sed -n "${n}p" $refs/stress.lines.txt)
  want=$(sed -n "${n}p" $refs/stress.lines.tiktoken)
  got=$(printf '%s\n' "$line" | $tool encode)
  [ "$got" = "$want" ] && ok "stress line $n" || fail "stress line $n: got '$got' want '$want'"
done

# 5. tinyshakespeare, whole
[ "$($tool encode data/tinyshakespeare/input.txt)" = "$(cat $refs/shakespeare.whole.tiktoken)" ] \
  && ok "tinyshakespeare" || fail "tinyshakespeare differs from tiktoken"

# 6. errors: clear message, exit 1, never a crash
expect_error() {  # expect_error PATTERN CMD...: exit status 1 and "error: " + PATTERN on stderr
  local pattern=$1; shift
  "$@" > "$tmp/out" 2> "$tmp/err"; local rc=$?
  if [ $rc -eq 1 ] && grep -q "^error: .*$pattern" "$tmp/err"; then ok "error: $pattern"
  else fail "expected exit 1 and 'error: ...$pattern' from: $* (rc=$rc, stderr: $(cat "$tmp/err"))"; fi
}
printf 'ab\xffcd' > "$tmp/bad.txt"
expect_error "<stdin>: invalid UTF-8 at byte offset 2" $tool encode < "$tmp/bad.txt"
expect_error "$tmp/bad.txt: invalid UTF-8 at byte offset 2" $tool encode "$tmp/bad.txt"
expect_error "nope.txt: cannot open" $tool encode "$tmp/nope.txt"
echo "15496 50257" > "$tmp/ids"
expect_error "bad token id '50257'" $tool decode "$tmp/ids"
echo "15496 abc" > "$tmp/ids"
expect_error "bad token id 'abc'" $tool decode "$tmp/ids"
# A NUL is no separator and no id: '15496\0995' must not decode as 15496, nor a lone NUL as id 0.
# A directory is no input file: an error, not exit 0.
printf '15496\000995' > "$tmp/ids"
expect_error "<stdin>: bad token id '15496\\\\x00995' at byte offset 0" $tool decode < "$tmp/ids"
printf '15496 \000' > "$tmp/ids"
expect_error "$tmp/ids: bad token id '\\\\x00' at byte offset 6" $tool decode "$tmp/ids"
echo "15496 +995" > "$tmp/ids"
expect_error "bad token id '+995' at byte offset 6" $tool decode "$tmp/ids"
expect_error "$tmp: is a directory, expected a file" $tool encode "$tmp"
expect_error "$tmp: is a directory, expected a file" $tool decode "$tmp"
expect_error "<stdout>: write error" sh -c "echo hi | $tool encode > /dev/full"
expect_error "unknown command 'frobnicate'" $tool frobnicate
expect_error "unknown option --bogus" $tool encode --bogus
GPT2_VOCAB_DIR="$tmp/novocab" expect_error "GPT-2 vocabulary not found" $tool encode test/tokenizer/stress.txt

# 6b. a NUL in the text is a byte like any other: tiktoken's ids, and back to the same bytes
printf 'ab\000cd\000' > "$tmp/nul.txt"
got=$($tool encode "$tmp/nul.txt")
want=$(node -e '
  const r = require("module").createRequire(process.cwd() + "/build/node/x.js");
  const { Tiktoken } = r("tiktoken/lite"); const g = r("tiktoken/encoders/gpt2.json");
  const e = new Tiktoken(g.bpe_ranks, g.special_tokens, g.pat_str);
  console.log(Array.from(e.encode_ordinary("ab\u0000cd\u0000")).join(" "));')
[ "$got" = "$want" ] && [ -n "$got" ] && ok "encode 'ab\\0cd\\0' = $got" || fail "encode with NULs: got '$got', tiktoken '$want'"
echo "$got" | $tool decode > "$tmp/nul.back" && cmp -s "$tmp/nul.back" "$tmp/nul.txt" \
  && ok "decode gives the NULs back" || fail "decode of the NUL text: $(od -c "$tmp/nul.back" | head -1)"

# 7. --replace-invalid: U+FFFD for the bad byte, like Python's errors="replace"
got=$($tool encode --replace-invalid "$tmp/bad.txt" | $tool decode)
[ "$got" = "$(printf 'ab\xef\xbf\xbdcd')" ] && ok "--replace-invalid" || fail "--replace-invalid gave '$got'"

# 8. export-llmc: llm.c's header and size
$tool export-llmc "$tmp/gpt2_tokenizer.bin" 2>/dev/null || fail "export-llmc failed"
header=$(od -An -tu4 -N16 "$tmp/gpt2_tokenizer.bin" | tr -s ' ')
[ "$header" = " 20240328 2 50257 50256" ] && ok "llm.c header" || fail "llm.c header is '$header'"

# 9. --help works and exits 0
$tool --help | grep -q "encode \[--replace-invalid\] \[FILE\]" && ok "--help" || fail "--help"

echo "$fails failure(s)"
[ $fails -eq 0 ]
