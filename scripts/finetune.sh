#!/usr/bin/env bash
# finetune.sh - fine-tune GPT-2 weights on your text or instruction data, with perplexity before and after.
#
# usage: scripts/finetune.sh --init-from PATH --out DIR DATA [options] [-- TRAINER ARGS...]
#   --init-from PATH   the starting weights: a Hugging Face GPT-2 directory (config.json +
#                      model.safetensors, e.g. a save_pretrained copy of gpt2 / distilgpt2), an llm.c
#                      model file, or a checkpoint directory of ours; the same command for all three
#   --out DIR          everything goes here: data/, run/ (checkpoints, log.jsonl, model.bin), hf/
#                      (the fine-tuned model as a Hugging Face directory), eval_before.json, eval_after.json
# DATA, one of:
#   --text INPUT...    plain text: files or directories (*.txt one document per file, as PG19 or
#                      wikitext dumps; *.jsonl with a "text" field), tokenized by scripts/prepare_corpus.sh;
#                      --doc-separator SEP splits a single file into documents (tinyshakespeare: '\n\n')
#   --sft FILE.jsonl   instruction data ({"prompt","completion"} or {"messages"} lines, docs/sft.md):
#                      packed rows of --seq-len tokens with a loss mask (only completions are learned);
#                      the first 5% of the examples are the val split (its masked loss is logged)
#   --data TRAIN VAL   shards you already have (globs)
# options:
#   --seq-len T        context (default 1024, capped at the model's)   -B N  micro-batch per rank (4)
#   --epochs E         passes over the data (default 1; fractional)    --lr X  peak lr (5e-5, HF's default)
#   --steps N          optimizer steps (overrides --epochs, as HF)     --warmup N  warmup steps (0)
#   --val-every N      evaluate every N steps (50); 0: no evaluation and no best checkpoint
#   --patience N       early stopping after N evaluations without improvement (default: off)
#   --no-keep-best     the final model is the last step's (default: the best evaluation's, as HF's
#                      load_best_model_at_end: run/model.bin, hf/ and the "after" perplexity use it)
#   --stride S         perplexity window stride (default T/2; docs/cli.md --eval-stride)
#   --dropout P|K=P,.. the trainer's --dropout (default: the model's, as HF's model.train(): a Hugging
#                      Face directory's embd/resid/attn_pdrop, 0.1 in GPT-2's; none in an llm.c file)
#   --doc-separator S  see --text
#
# LAUNCH runs every trainer command through a launcher: LAUNCH="mpirun -np 4" or, inside an sbatch
# allocation, LAUNCH="srun" (one task per GPU). GPT2_TRAIN_BIN overrides ./train_gpt2cu. A rerun with the
# same --out resumes the training from its newest checkpoint (a requeued job continues).
# Recipes: docs/finetuning.md.
set -euo pipefail
root=$(cd "$(dirname "$(readlink -f "$0")")/.." && pwd)
bin=${GPT2_TRAIN_BIN:-$root/train_gpt2cu}
read -r -a launch <<<"${LAUNCH:-}"

log() { echo "finetune: $*" >&2; }
die() { log "error: $*"; exit 2; }
usage() { sed -n '2,34p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }

init="" out="" mode="" T=1024 B=4 steps=-1 epochs="" lr=5e-5 warmup=0 val_every=50 patience=0 keep_best=1
stride="" sep="" dropout=""
texts=() sft="" train_glob="" val_glob="" extra=()
while [ $# -gt 0 ]; do
  case "$1" in
    -h|--help) usage ;;
    --init-from) init=${2?}; shift 2 ;;
    --out) out=${2?}; shift 2 ;;
    --text) mode=text; shift; while [ $# -gt 0 ] && [[ $1 != --* ]]; do texts+=("$1"); shift; done ;;
    --sft) mode=sft; sft=${2?}; shift 2 ;;
    --data) mode=data; train_glob=${2?}; val_glob=${3?}; shift 3 ;;
    --seq-len|-T) T=${2?}; shift 2 ;;
    -B) B=${2?}; shift 2 ;;
    --steps) steps=${2?}; shift 2 ;;
    --epochs) epochs=${2?}; shift 2 ;;
    --patience) patience=${2?}; shift 2 ;;
    --no-keep-best) keep_best=0; shift ;;
    --lr) lr=${2?}; shift 2 ;;
    --warmup) warmup=${2?}; shift 2 ;;
    --val-every) val_every=${2?}; shift 2 ;;
    --stride) stride=${2?}; shift 2 ;;
    --dropout) dropout=${2?}; shift 2 ;;
    --doc-separator) sep=${2?}; shift 2 ;;
    --) shift; extra=("$@"); break ;;
    *) die "unknown option '$1' (scripts/finetune.sh --help)" ;;
  esac
done
[ -n "$init" ] || die "--init-from PATH is required (the weights to start from)"
[ -n "$out" ] || die "--out DIR is required"
[ -n "$mode" ] || die "give the data: --text INPUT..., --sft FILE.jsonl or --data TRAIN VAL"
[ -e "$init" ] || die "--init-from $init: no such file or directory"
[ -x "$bin" ] || die "$bin not found (run make first)"
[[ $T =~ ^[0-9]+$ ]] && [ "$T" -gt 0 ] || die "--seq-len $T: not a positive integer"
[ -n "$stride" ] || stride=$(( T / 2 > 0 ? T / 2 : 1 ))
mkdir -p "$out/data"

# ---- data ---------------------------------------------------------------------------------------
case $mode in
  text)
    [ ${#texts[@]} -gt 0 ] || die "--text needs at least one file or directory"
    if ! ls "$out"/data/text_train_*.bin >/dev/null 2>&1; then
      sep_args=()
      [ -n "$sep" ] && sep_args=(--doc-separator "$sep")
      "$root/scripts/prepare_corpus.sh" --out-prefix "$out/data/text" --min-shard-tokens 0 "${sep_args[@]}" \
        "${texts[@]}" >&2
    fi
    train_glob="$out/data/text_train_*.bin" val_glob="$out/data/text_val_*.bin" ;;
  sft)
    [ -f "$sft" ] || die "--sft $sft: no such file"
    if ! ls "$out"/data/sft_train_*.bin >/dev/null 2>&1; then
      # val: the first 5% of the examples (the masked val loss), none below 20 examples
      val_examples=$(( $(grep -c . "$sft") / 20 ))
      "$root/prepare_data" --sft --seq-len "$T" --val-examples "$val_examples" --out-prefix "$out/data/sft" \
        "$sft" >&2
    fi
    train_glob="$out/data/sft_train_*.bin" val_glob="$out/data/sft_val_*.bin"
    ls $val_glob >/dev/null 2>&1 || { log "no val examples (fewer than 20 lines): no validation"; val_every=0; } ;;
esac

common=(--init-from "$init" -T "$T" -B "$B")
# Dropout: the model's rates unless --dropout says otherwise (HF trains with config.json's).
drop_args=()
[ -n "$dropout" ] && drop_args=(--dropout "$dropout")
# Evaluation-driven flags (HF: eval_strategy="steps", load_best_model_at_end, EarlyStoppingCallback).
best_args=()
[ -n "$epochs" ] && best_args+=(--epochs "$epochs")
if [ "$val_every" = 0 ]; then
  [ "$patience" = 0 ] || die "--patience needs evaluations (--val-every is 0)"
  [ "$keep_best" = 0 ] || log "no evaluation (--val-every 0): the final model is the last step's"
else
  [ "$keep_best" = 1 ] && best_args+=(--keep-best)
  [ "$patience" = 0 ] || best_args+=(--early-stopping-patience "$patience")
fi
# ---- perplexity before (plain text: an SFT val split is scored by the trainer's masked val loss) --
eval_args=(--eval-only --val-data "$val_glob" --eval-stride "$stride")
if [ "$mode" != sft ] && [ ! -f "$out/eval_before.json" ]; then
  log "perplexity of the starting weights on $val_glob"
  "${launch[@]}" "$bin" "${common[@]}" "${eval_args[@]}" --eval-json "$out/eval_before.json"
fi

# ---- fine-tune ----------------------------------------------------------------------------------
log "fine-tuning: ${launch[*]:-(one process)} $bin"
"${launch[@]}" "$bin" "${common[@]}" --train-data "$train_glob" --val-data "$val_glob" \
  --max-steps "$steps" --lr "$lr" --lr-schedule cosine --final-lr-frac 0 --warmup-steps "$warmup" \
  --val-every "$val_every" --output-dir "$out/run" --log-jsonl "$out/run/log.jsonl" --resume \
  --save-hf "$out/hf" "${best_args[@]}" "${drop_args[@]}" "${extra[@]}"

# ---- perplexity after ---------------------------------------------------------------------------
if [ "$mode" != sft ]; then
  "${launch[@]}" "$bin" --model "$out/run/model.bin" -T "$T" -B "$B" "${eval_args[@]}" \
    --eval-json "$out/eval_after.json"
  /usr/bin/env python3 - "$out/eval_before.json" "$out/eval_after.json" <<'EOF'
import json, sys
b, a = (json.load(open(p)) for p in sys.argv[1:3])
print(f"finetune: perplexity {b['perplexity']:.3f} -> {a['perplexity']:.3f} "
      f"(loss {b['loss']:.4f} -> {a['loss']:.4f}, {a['tokens']} tokens, stride {a['stride']})")
EOF
fi
which="the last step's weights"
[[ " ${best_args[*]} " == *" --keep-best "* ]] && which="the weights of the best evaluation"
log "done: $out/run/model.bin and the Hugging Face directory $out/hf ($which), log $out/run/log.jsonl"
