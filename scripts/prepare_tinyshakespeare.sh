#!/usr/bin/env bash
# Writes data/tinyshakespeare/tiny_shakespeare_{val,train}.bin exactly as llm.c's
# dev/data/tinyshakespeare.py does with tiktoken: the text is split on "\n\n", every section gets
# <|endoftext|> in front and keeps its "\n\n" (all but the last), the first 32,768 tokens are val,
# the other 305,260 train (uint16 shards, 1024-byte header: 20240520, 1, count).
#
# Text source, first that exists: $TINYSHAKESPEARE_TXT, data/tinyshakespeare/input.txt, the
# char-rnn URL. The text is kept in data/tinyshakespeare/input.txt. Nothing is redone when the
# shards are newer than the text and have the expected sizes. Needs ./prepare_data (`make`) and
# the GPT-2 vocabulary (`make vocab`).
#
# usage: scripts/prepare_tinyshakespeare.sh [--text-only]   (--text-only: just obtain input.txt)
set -euo pipefail
text_only=0
case "${1:-}" in
  --text-only) text_only=1 ;;
  "") ;;
  *) echo "usage: $0 [--text-only]" >&2; exit 1 ;;
esac

dir=data/tinyshakespeare
text=$dir/input.txt
val=$dir/tiny_shakespeare_val.bin
train=$dir/tiny_shakespeare_train.bin
url=https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt
val_tokens=32768
train_tokens=305260
prep=${PREPARE_DATA:-./prepare_data}

log() { echo "prepare_tinyshakespeare: $*" >&2; }

mkdir -p "$dir"
if [ -n "${TINYSHAKESPEARE_TXT:-}" ]; then
  [ -f "$TINYSHAKESPEARE_TXT" ] || { log "error: \$TINYSHAKESPEARE_TXT=$TINYSHAKESPEARE_TXT does not exist"; exit 1; }
  if ! cmp -s "$TINYSHAKESPEARE_TXT" "$text"; then
    cat "$TINYSHAKESPEARE_TXT" > "$text.tmp.$$"
    mv -f "$text.tmp.$$" "$text"
    log "copied $TINYSHAKESPEARE_TXT to $text"
  fi
elif [ ! -s "$text" ]; then
  log "downloading $url"
  if ! curl -fsSL --connect-timeout 10 --max-time 120 -o "$text.tmp.$$" "$url"; then
    rm -f "$text.tmp.$$"
    log "error: download failed; set TINYSHAKESPEARE_TXT to a local copy of input.txt"
    exit 1
  fi
  mv -f "$text.tmp.$$" "$text"
fi

[ $text_only -eq 1 ] && exit 0

size_ok() { [ -f "$1" ] && [ "$(stat -c %s "$1")" -eq $((1024 + 2 * $2)) ]; }

if [ "$val" -nt "$text" ] && [ "$train" -nt "$text" ] && size_ok "$val" $val_tokens && size_ok "$train" $train_tokens; then
  log "$val and $train are up to date"
  exit 0
fi

[ -x "$prep" ] || { log "error: $prep not found (run make first)"; exit 1; }
"$prep" --doc-separator '\n\n' --val-tokens $val_tokens --shard-tokens 0 --no-shard-index \
  --progress none --out-prefix "$dir/tiny_shakespeare" "$text"

for pair in "$val:$val_tokens" "$train:$train_tokens"; do
  f=${pair%%:*} n=${pair##*:}
  if ! size_ok "$f" "$n"; then
    log "error: $f holds $(( ($(stat -c %s "$f") - 1024) / 2 )) tokens, expected $n (is $text the tinyshakespeare text?)"
    exit 1
  fi
done
log "wrote $val_tokens tokens to $val and $train_tokens tokens to $train"
