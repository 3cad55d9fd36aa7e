#!/usr/bin/env bash
# The trainer binary from outside: --help, bad flags, bad data, bad config,
# --device cuda/auto on this machine (with or without a GPU), NaN handling
# (NaN weights refused at load; --on-nan stop keeps checkpoints and fails;
# skip continues), atomic
# checkpoints and pruning.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/test/e2e
work=$(mktemp -d build/test/e2e/cli.XXXXXX)
trap 'rm -rf "$work"' EXIT
fails=0
check() {  # check NAME EXPECTED_RC GREP_PATTERN -- command...
  local name=$1 want=$2 pat=$3; shift 4
  "$@" > "$work/out" 2>&1; local rc=$?
  if [ "$rc" -ne "$want" ] || ! grep -qE -- "$pat" "$work/out"; then
    echo "FAIL $name: rc=$rc (want $want), pattern '$pat'"; sed 's/^/    /' "$work/out" | tail -5; fails=$((fails + 1))
  else
    echo "ok   $name: $(grep -E -m1 -- "$pat" "$work/out" | cut -c1-110)"
  fi
}
# What --device cuda and --device auto must do depends on the binary and the
# machine, told apart without asking the binary: a CUDA build carries the
# message "no CUDA device is visible", a CPU-only build "built without the
# CUDA backend" instead; a GPU is visible when nvidia-smi lists one and
# CUDA_VISIBLE_DEVICES does not hide them all. With a GPU, --device cuda trains.
gpu_visible() {
  local list  # not piped into grep -q: with pipefail, an early grep exit fails the pipe
  list=$(nvidia-smi -L 2>/dev/null) && grep -q '^GPU ' <<<"$list" || return 1
  case "${CUDA_VISIBLE_DEVICES-all}" in "" | -1* | none | NoDevFiles) return 1 ;; esac
}
check_cuda_device() {
  local no_gpu_msg="no CUDA device is visible" cpu_only_msg="built without the CUDA backend"
  local with_cuda=0
  grep -qaF "$no_gpu_msg" ./train_gpt2cu && with_cuda=1
  if [ "$with_cuda" = "$(grep -qaF "$cpu_only_msg" ./train_gpt2cu && echo 1 || echo 0)" ]; then
    echo "FAIL cuda: ./train_gpt2cu holds both or neither --device cuda error; update this test"
    fails=$((fails + 1)); return
  fi
  if [ "$with_cuda" = 0 ]; then
    check cuda-cpu-only-build 1 "--device cuda: this binary was $cpu_only_msg" -- ./train_gpt2cu "${tiny[@]}" --device cuda
    check auto-cpu-only-build 0 "^\| backend +cpu," -- ./train_gpt2cu "${tiny[@]}" --device auto --max-steps 1
  elif gpu_visible; then
    check cuda-with-gpu 0 "^\| backend +cuda," -- ./train_gpt2cu "${tiny[@]}" --device cuda --max-steps 1
    check auto-with-gpu 0 "^\| backend +cuda," -- ./train_gpt2cu "${tiny[@]}" --device auto --max-steps 1
  else
    check cuda-no-gpu 1 "--device cuda: $no_gpu_msg" -- ./train_gpt2cu "${tiny[@]}" --device cuda
    check auto-no-gpu 0 "^\| backend +cpu," -- ./train_gpt2cu "${tiny[@]}" --device auto --max-steps 1
  fi
}

# A small uint16 shard of random ids < 256 (llm.c format), and a tiny config.
/usr/bin/python3 - "$work/tok.bin" <<'PY'
import random, struct, sys
random.seed(1)
n = 4000
with open(sys.argv[1], "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack("<%dH" % n, *[random.randrange(256) for _ in range(n)]))
PY
tiny=(--device cpu --model d2 --config n_embd=32,n_head=2,max_seq=32,vocab_size=256 -B 2 -T 16
      --train-data "$work/tok.bin" --val-data "$work/tok.bin" --val-every 0 --sample-every 0 --threads 1)

check help 0 "--zero-stage" -- ./train_gpt2cu --help
if diff <(./train_gpt2cu --help) <(sed -n '/^```help$/,/^```$/p' docs/cli.md | sed '1d;$d') > "$work/diff"; then
  echo "ok   docs/cli.md matches --help"
else
  echo "FAIL docs/cli.md differs from --help:"; head -20 "$work/diff"; fails=$((fails + 1))
fi
check unknown-flag 2 "unknown option '--num_train_epochs'" -- ./train_gpt2cu --num_train_epochs 3
check bad-number 2 "--lr: invalid value 'abc'" -- ./train_gpt2cu --lr abc
check missing-value 2 "--max-steps needs a value" -- ./train_gpt2cu --max-steps
check no-data 1 "nonexistent.*(no file|match)" -- ./train_gpt2cu "${tiny[@]}" --train-data "$work/nonexistent_*.bin"
check ids-out-of-range 1 "tok.bin" -- ./train_gpt2cu "${tiny[@]/vocab_size=256/vocab_size=100}"
check batch-not-multiple 2 "not a multiple of B\*T\*world" -- ./train_gpt2cu "${tiny[@]}" --total-batch-tokens 100
# Values bad only with the model, and flags that would be silently ignored or
# replaced: errors of the command line, exit 2 (not a start-up failure, exit 1).
check config-bad-value 2 "--config: 'n_head=0' needs a positive integer" -- ./train_gpt2cu --device cpu --model d2 --config n_head=0
check config-not-dividing 2 "n_embd \(32\) must be divisible by n_head \(3\)" -- \
  ./train_gpt2cu --device cpu --model d2 --config n_embd=32,n_head=3
check config-twice 2 "--config given twice \('n_embd=32,n_head=2,max_seq=32,vocab_size=256', then 'n_layer=3'\)" -- \
  ./train_gpt2cu "${tiny[@]}" --config n_layer=3
check checkpoint-every-without-o 2 "--checkpoint-every needs --output-dir" -- ./train_gpt2cu "${tiny[@]}" --checkpoint-every 2
check keep-checkpoints-without-o 2 "--keep-checkpoints needs --output-dir" -- ./train_gpt2cu "${tiny[@]}" --keep-checkpoints 2
# Flags that would be ignored: the bound on skipped steps without skipping, a
# rendezvous with no launcher at all (test/distributed/launch_nompi_test.sh gives it to mpirun too).
check max-nan-skips-without-skip 2 "--max-nan-skips bounds the steps --on-nan skip skips: it needs --on-nan skip" -- \
  ./train_gpt2cu "${tiny[@]}" --max-nan-skips 3
# Training's flags under the modes that do not train: refused, not ignored.
check eval-only-lr 2 "^error: --eval-only does not train: --lr has no meaning" -- \
  ./train_gpt2cu --device cpu --eval-only --model "$work/m.bin" --lr 1e-3
check generate-max-steps 2 "^error: --generate does not train: --max-steps has no meaning" -- \
  ./train_gpt2cu --device cpu --generate --model "$work/m.bin" --max-steps 5
check eval-only-output-dir 2 "^error: --eval-only does not train: --output-dir has no meaning" -- \
  ./train_gpt2cu --device cpu --eval-only --model "$work/m.bin" -o "$work/out"
check rendezvous-standalone 2 "--rendezvous file:$work/rdzv is where ranks launched without MPI meet .*this run has no launcher, so nothing would use it" -- \
  ./train_gpt2cu "${tiny[@]}" --rendezvous "file:$work/rdzv"
check rendezvous-launcher-world-1 0 "^step +1/1" -- env RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 \
  MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 ./train_gpt2cu "${tiny[@]}" --max-steps 1 --rendezvous "file:$work/rdzv"
# An output name past the directory's NAME_MAX (255 here): refused before any work.
long=$(printf '%0256d' 0)
check log-jsonl-name-256 2 "^error: --log-jsonl $work/$long: a file name of 256 characters" -- \
  ./train_gpt2cu "${tiny[@]}" --max-steps 1 --log-jsonl "$work/$long"
check save-hf-name-256 2 "^error: --save-hf $work/$long: a file name of 256 characters" -- \
  ./train_gpt2cu "${tiny[@]}" --max-steps 1 --save-hf "$work/$long"
# Memory checked against the --dry-run plan before anything is allocated, so that a run
# too big ends with an error, not the OOM killer's silent SIGKILL. n_layer=100000 needs
# 28.65 TiB on any machine; GPT2_TEST_AVAILABLE_MEMORY stands in for what this one has.
check memory-refused 1 "not enough memory: this run needs 28.65 TiB per rank .* more than the .* available \((MemAvailable|the room under)" -- \
  ./train_gpt2cu --device cpu --config n_layer=100000 --max-steps 1
need=$(./train_gpt2cu "${tiny[@]}" --dry-run 1 | awk '$1 == 1 { print $NF }')
GPT2_TEST_AVAILABLE_MEMORY=$((need - 1)) check memory-fake-refused 1 \
  "needs .* more than the .* available \(GPT2_TEST_AVAILABLE_MEMORY.*--memory-check warn \(or off\) to run anyway" -- \
  ./train_gpt2cu "${tiny[@]}" --max-steps 1
GPT2_TEST_AVAILABLE_MEMORY=$need check memory-fits 0 "^step +1/1" -- ./train_gpt2cu "${tiny[@]}" --max-steps 1
GPT2_TEST_AVAILABLE_MEMORY=$((need - 1)) check memory-warn 0 "warning: this run needs .*going on \(--memory-check warn\)" -- \
  ./train_gpt2cu "${tiny[@]}" --max-steps 1 --memory-check warn
GPT2_TEST_AVAILABLE_MEMORY=1 check memory-off 0 "^step +1/1" -- ./train_gpt2cu "${tiny[@]}" --max-steps 1 --memory-check off
check seq-over-max 0 "capped to the model's max_seq 32" -- ./train_gpt2cu "${tiny[@]}" -T 64 --max-steps 1
check_cuda_device
check model-missing 1 "missing.bin: cannot open" -- ./train_gpt2cu --device cpu --model "$work/missing.bin" --train-data "$work/tok.bin"

# Checkpoints: every 2 steps, keep 2, final model.bin; no temp files left.
check train 0 "final model -> " -- ./train_gpt2cu "${tiny[@]}" --max-steps 6 --output-dir "$work/ck" \
  --checkpoint-every 2 --keep-checkpoints 2
got=$(cd "$work/ck" && ls | tr '\n' ' ')
want="DONE_00000004 DONE_00000006 model.bin model_00000004.bin model_00000006.bin state_00000004_00000.bin state_00000006_00000.bin "
if [ "$got" = "$want" ]; then echo "ok   checkpoint files: $got"; else echo "FAIL checkpoint files: '$got'"; fails=$((fails + 1)); fi

# Resuming a checkpoint past --max-steps: an error naming both, not a silent exit 0.
check resume-past-max-steps 1 "--resume: the newest complete checkpoint in $work/ck is at step 6, past the 3 steps this run trains \(--max-steps 3\): nothing to train" -- \
  ./train_gpt2cu "${tiny[@]}" --max-steps 3 --output-dir "$work/ck" --resume
got=$(cd "$work/ck" && ls | tr '\n' ' ')
if [ "$got" = "$want" ]; then echo "ok   checkpoints untouched by the refused resume"; else echo "FAIL after the refused resume: '$got'"; fails=$((fails + 1)); fi

# A first run's --log-jsonl inside a not yet existing --output-dir (as the sbatch scripts pass it).
check log-in-new-output-dir 0 "final model -> " -- ./train_gpt2cu "${tiny[@]}" --max-steps 2 \
  --output-dir "$work/fresh/run" --log-jsonl "$work/fresh/run/log.jsonl"
n=$(grep -c '"type":"train"' "$work/fresh/run/log.jsonl" 2>/dev/null)
if [ "$n" = 2 ]; then echo "ok   log created with its directory: 2 train records"; else echo "FAIL log records: '$n'"; fails=$((fails + 1)); fi

# Non-finite losses: one layernorm weight of a saved model set to 3e38 (finite, so
# the weights load; the first forward overflows). A NaN weight is refused at load.
poison() {  # poison VALUE OUT
  /usr/bin/python3 - "$work/ck/model.bin" "$2" "$1" <<'PY'
import struct, sys
b = bytearray(open(sys.argv[1], "rb").read())
hdr = struct.unpack("<256i", b[:1024])
Vp, C, maxT = hdr[7], hdr[6], hdr[2]
off = 1024 + 4 * (Vp * C + maxT * C)   # first element of ln1w
b[off:off + 4] = struct.pack("<f", float(sys.argv[3]))
open(sys.argv[2], "wb").write(b)
PY
}
poison 3e38 "$work/huge.bin"
poison nan "$work/nan.bin"
hugerun=("${tiny[@]/d2/$work/huge.bin}")
hugerun=("${hugerun[@]/--config/--seed}")
hugerun=("${hugerun[@]/n_embd=32,n_head=2,max_seq=32,vocab_size=256/7}")
nanrun=("${hugerun[@]/$work\/huge.bin/$work/nan.bin}")
check nan-weights 1 "nan.bin: the initial weights: 1 non-finite value" -- ./train_gpt2cu "${nanrun[@]}" --max-steps 3
check nan-stop 1 "non-finite loss at step 1" -- ./train_gpt2cu "${hugerun[@]}" --max-steps 3
check nan-skip 0 "skipped 3 step" -- ./train_gpt2cu "${hugerun[@]}" --max-steps 3 --on-nan skip
# A non-finite stop never destroys earlier checkpoints: two skipped steps checkpointed, then
# the resumed run (--on-nan stop) stops at step 3.
check nan-skip-checkpoints 0 "skipped 2 step" -- ./train_gpt2cu "${hugerun[@]}" --max-steps 2 --on-nan skip \
  --checkpoint-every 1 --output-dir "$work/nanck"
check nan-keeps-checkpoints 1 "non-finite loss at step 3" -- ./train_gpt2cu "${hugerun[@]}" --max-steps 4 --resume \
  --output-dir "$work/nanck"
if [ -e "$work/nanck/DONE_00000002" ] && [ -e "$work/nanck/DONE_00000001" ] && [ -e "$work/nanck/model.bin" ]; then
  echo "ok   checkpoints intact after NaN stop"
else echo "FAIL checkpoints lost after NaN stop"; fails=$((fails + 1)); fi

# --save-dtype picks the saved model files' format: llm.c's version 3 (fp32) or 5 (bf16).
for dt in fp32:3 bf16:5; do
  check "save-dtype-${dt%:*}" 0 "checkpoint step 2" -- ./train_gpt2cu "${tiny[@]}" --max-steps 2 --save-dtype "${dt%:*}" \
    --output-dir "$work/save_${dt%:*}"
  v=$(od -An -t d4 -j 4 -N 4 "$work/save_${dt%:*}/model_00000002.bin" 2>/dev/null | tr -d ' ')
  if [ "$v" = "${dt#*:}" ]; then echo "ok   --save-dtype ${dt%:*}: model_00000002.bin is version $v"
  else echo "FAIL --save-dtype ${dt%:*}: model_00000002.bin is version '$v', want ${dt#*:}"; fails=$((fails + 1)); fi
done

echo "$fails failure(s)"
[ "$fails" -eq 0 ]
