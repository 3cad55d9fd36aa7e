#!/usr/bin/env bash
# The main job, from a fresh Debian 12 machine: install packages, build, fetch
# the GPT-2 vocabulary, prepare tinyshakespeare, train a small GPT-2 for a few
# hundred steps (GPU when the CUDA backend is present, else CPU), watch val loss,
# sample text, save the model and plot the loss curve.
#   scripts/quickstart.sh [extra train_gpt2cu flags]
# Output: out/quickstart/{model.bin, log.jsonl, loss.png, train.log}
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install_deps.sh --train
make -j"$(nproc)"
scripts/get_gpt2_vocab.sh
scripts/prepare_tinyshakespeare.sh
out=out/quickstart
mkdir -p "$out"
rm -f "$out/log.jsonl"
./train_gpt2cu --device auto \
  --model d4 --config n_layer=4,n_head=4,n_embd=256,max_seq=128 \
  -B 8 -T 128 --max-steps 300 --lr 1e-3 --warmup-steps 20 --lr-schedule cosine --weight-decay 0.1 \
  --val-every 50 --val-steps 16 --sample-every 100 --gen-tokens 64 --top-k 40 \
  --output-dir "$out" --overwrite-output-dir --checkpoint-every 100 --keep-checkpoints 1 \
  --log-jsonl "$out/log.jsonl" "$@" \
  | tee "$out/train.log"
/usr/bin/python3 scripts/plot_log.py "$out/log.jsonl" -o "$out/loss.png" --smooth 10
echo "done: model $out/model.bin, loss curve $out/loss.png"
