#!/usr/bin/env bash
# The docs name only what exists (test/docs/doc_refs.py): every repository path
# README.md and docs/*.md name is in the tree, and every --flag they give the
# trainer is an option of its --help (cli.md's paragraphs on ./gpt2_convert may
# name that program's options). A stale one fails as DOC:LINE and what is missing.
# GPT2_TRAIN_BIN and GPT2_CONVERT_BIN override ./train_gpt2cu and ./gpt2_convert.
set -u
cd "$(dirname "$0")/../.."
BIN=${GPT2_TRAIN_BIN:-./train_gpt2cu}
CONVERT=${GPT2_CONVERT_BIN:-./gpt2_convert}
for b in "$BIN" "$CONVERT"; do
  [ -x "$b" ] || { echo "FAIL: $b not built (make)"; exit 1; }
done
W=$(mktemp -d "${TMPDIR:-/tmp}/doc_refs.XXXXXX")
trap 'rm -rf "$W"' EXIT
"$BIN" --help >"$W/train.help" || { echo "FAIL: $BIN --help exited $?"; exit 1; }
"$CONVERT" --help >"$W/convert.help" || { echo "FAIL: $CONVERT --help exited $?"; exit 1; }
/usr/bin/env python3 test/docs/doc_refs.py "$W/train.help" --other gpt2_convert="$W/convert.help"
