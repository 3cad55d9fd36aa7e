#!/usr/bin/env bash
# prepare_corpus.sh - a FineWeb-style pre-training corpus from local JSONL / text files: GPT-2 token
# shards named exactly as the GPU sbatch scripts read them (scripts/slurm/train_*_gpus.sbatch):
#
#   PREFIX_val_000000.bin  PREFIX_train_000001.bin  PREFIX_train_000002.bin ...
#
# (llm.c's fineweb.py naming: first shard val, then train shards of --shard-tokens tokens each.)
#
# usage: scripts/prepare_corpus.sh [--out-prefix PREFIX] [prepare_data options] INPUT...
#   INPUT            a file or a directory; directories are searched recursively for *.jsonl,
#                    *.ndjson, *.json (one JSON object per line, text in "text" or --text-field)
#                    and *.txt (one document per file, or per --doc-separator), in sorted order
#   --out-prefix P   output prefix (default: $GPT2_DATA_PREFIX, else data/corpus/corpus, the
#                    sbatch scripts' default); directories are created, stale shards removed
#   --min-shard-tokens N  a last train shard shorter than N tokens (default 1M) is appended to the
#                    one before: the trainer refuses a shard shorter than one B*T+1 window
#   any other ./prepare_data option is passed on (./prepare_data --help), e.g. --shard-tokens 100M
#   (the default, as fineweb.py), --val-tokens N, --threads N, --token-width u32, --text-field F
#
# Compressed inputs (.gz, .zst) and parquet are not read: decompress / export to JSONL first.
# Prints the --train-data / --val-data globs to give ./train_gpt2cu and the sbatch command line.
# Needs ./prepare_data (`make`) and the GPT-2 vocabulary (`make vocab`; $GPT2_VOCAB_DIR overrides).
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
prep=${PREPARE_DATA:-$root/prepare_data}
vocab=${GPT2_VOCAB_DIR:-$root/data/gpt2}
prefix=${GPT2_DATA_PREFIX:-data/corpus/corpus}

log() { echo "prepare_corpus: $*" >&2; }
usage() { sed -n '9,17p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

min_shard=1000000
pass=() inputs=() has_vocab=0
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage ;;
    --out-prefix|-o) [ $# -ge 2 ] || usage; prefix=$2; shift 2 ;;
    --out-prefix=*) prefix=${1#*=}; shift ;;
    --min-shard-tokens) [ $# -ge 2 ] || usage; min_shard=$2; shift 2 ;;
    --no-shard-index) log "error: --no-shard-index writes PREFIX_train.bin, which the sbatch scripts' PREFIX_train_*.bin does not read"; exit 2 ;;
    --vocab-dir|--vocab-dir=*) has_vocab=1; pass+=("$1"); [ "$1" = --vocab-dir ] && { [ $# -ge 2 ] || usage; pass+=("$2"); shift; }; shift ;;
    --) shift; inputs+=("$@"); break ;;
    --*=*) pass+=("$1"); shift ;;
    --*) [ $# -ge 2 ] || usage; pass+=("$1" "$2"); shift 2 ;;   # every other prepare_data option takes a value
    *) inputs+=("$1"); shift ;;
  esac
done
[[ $min_shard =~ ^[0-9]+$ ]] || { log "error: --min-shard-tokens $min_shard: not a number"; exit 2; }
[ ${#inputs[@]} -gt 0 ] || { log "error: no INPUT given"; usage; }
[ -n "$prefix" ] || { log "error: empty --out-prefix"; exit 2; }
[ -x "$prep" ] || { log "error: $prep not found (run make first)"; exit 1; }
[ $has_vocab = 1 ] || pass+=(--vocab-dir "$vocab")

files=()
for arg in "${inputs[@]}"; do
  if [ -d "$arg" ]; then
    mapfile -t found < <(find "$arg" -type f \( -name '*.jsonl' -o -name '*.ndjson' -o -name '*.json' -o -name '*.txt' \) \
      -print | LC_ALL=C sort)
    [ ${#found[@]} -gt 0 ] || { log "error: $arg: no *.jsonl, *.ndjson, *.json or *.txt file in this directory"; exit 1; }
    files+=("${found[@]}")
  elif [ -f "$arg" ]; then
    case "$arg" in
      *.gz|*.zst|*.bz2|*.xz|*.parquet) log "error: $arg: compressed/parquet input is not read; decompress or export to JSONL first"; exit 1 ;;
    esac
    files+=("$arg")
  else
    log "error: $arg: no such file or directory"; exit 1
  fi
done
log "${#files[@]} input file(s) -> ${prefix}_{val,train}_*.bin"
"$prep" "${pass[@]}" --out-prefix "$prefix" "${files[@]}"

train_glob="${prefix}_train_*.bin"
val_glob="${prefix}_val_*.bin"
mapfile -t train < <(compgen -G "$train_glob" | LC_ALL=C sort)
mapfile -t val < <(compgen -G "$val_glob" | LC_ALL=C sort)
[ ${#train[@]} -gt 0 ] || { log "error: no shard matches $train_glob after ./prepare_data"; exit 1; }

# header: int32 magic (20240520: uint16 tokens, 20240801: uint32), version, token count; 1024 bytes
hdr() { od -An -td4 -j"$2" -N4 "$1" | tr -d ' '; }
le32() { local n=$1; printf '\\x%02x\\x%02x\\x%02x\\x%02x' $((n & 255)) $((n >> 8 & 255)) $((n >> 16 & 255)) $((n >> 24 & 255)); }
n=${#train[@]}
if [ "$n" -ge 2 ] && [ "$(hdr "${train[n-1]}" 8)" -lt "$min_shard" ]; then
  last=${train[n-1]} prev=${train[n-2]}
  tail_count=$(hdr "$last" 8) prev_count=$(hdr "$prev" 8)
  width=2; [ "$(hdr "$prev" 0)" = 20240801 ] && width=4
  total=$((prev_count + tail_count))
  [ "$total" -lt 2147483648 ] || { log "error: $prev + $last exceed 2^31 tokens"; exit 1; }
  tail -c +1025 "$last" >> "$prev"
  printf "$(le32 "$total")" | dd of="$prev" bs=1 seek=8 count=4 conv=notrunc status=none
  [ "$(stat -c %s "$prev")" -eq $((1024 + width * total)) ] || { log "error: merging $last into $prev failed"; exit 1; }
  rm -f "$last"
  unset 'train[n-1]'
  log "appended the last train shard ($tail_count tokens < --min-shard-tokens $min_shard) to $prev ($total tokens)"
fi
echo "train shards: ${#train[@]} (${train[0]} .. ${train[${#train[@]}-1]})"
if [ ${#val[@]} -gt 0 ]; then
  echo "val shards:   ${#val[@]} (${val[0]})"
else
  echo "val shards:   none (--val-tokens 0): give the trainer --val-every 0, or another --val-data"
fi
echo "trainer flags: --train-data \"$train_glob\" --val-data \"$val_glob\""
echo "sbatch:        GPT2_DATA_PREFIX=$prefix sbatch scripts/slurm/train_1node_gpus.sbatch"
