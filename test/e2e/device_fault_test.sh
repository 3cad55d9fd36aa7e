#!/usr/bin/env bash
# A device fault in the middle of training (emulated CUDA backend; the classifier
# kernel of step 4 faults through GPT2_EMU_INJECT_FAULT, asynchronously and
# sticky as on a GPU) is fatal: exit 1, the checkpoints of steps 1..3 intact and
# resumable, nothing written for step 4 or later (no model, no state, no DONE
# marker, no final model.bin). As on a GPU the fault surfaces at a later call
# (here the loss download); with CUDA_LAUNCH_BLOCKING=1 the backend synchronises
# after every op and the error names the op that faulted.
set -uo pipefail
cd "$(dirname "$0")/../.."
mkdir -p build/test/e2e
work=$(mktemp -d build/test/e2e/fault.XXXXXX)
trap 'rm -rf "$work"' EXIT
export GPT2_EMU_THREADS=1
args=(--device cuda --model d2 --config n_embd=64,n_head=2,max_seq=64 -B 2 -T 32 --max-steps 6 --val-every 0
      --sample-every 0 --train-data data/tinyshakespeare/tiny_shakespeare_train.bin --checkpoint-every 1)
fails=0
bad() { echo "FAIL $*"; fails=$((fails + 1)); }
want_error=("an illegal memory access was encountered"
            "backend/cuda: classifier_forward_backward: device fault: an illegal memory access was encountered")
for blocking in 0 1; do
  ck=$work/ck$blocking
  GPT2_EMU_INJECT_FAULT=classifier_kernel@4 CUDA_LAUNCH_BLOCKING=$blocking build/train_gpt2cu_emu "${args[@]}" \
    --output-dir "$ck" > "$work/run$blocking.log" 2>&1
  rc=$?
  err=$(grep '^error:' "$work/run$blocking.log")
  if [ $rc -eq 1 ] && grep -qF "${want_error[$blocking]}" <<<"$err"; then
    echo "ok   fault is fatal (CUDA_LAUNCH_BLOCKING=$blocking): ${err:0:150}"
  else bad "CUDA_LAUNCH_BLOCKING=$blocking: rc $rc, error '$err'"; tail -3 "$work/run$blocking.log"; fi
  got=$(cd "$ck" && ls | tr '\n' ' ')
  want="DONE_00000001 DONE_00000002 DONE_00000003 model_00000001.bin model_00000002.bin model_00000003.bin state_00000001_00000.bin state_00000002_00000.bin state_00000003_00000.bin "
  if [ "$got" = "$want" ]; then echo "ok   only steps 1..3 checkpointed: $got"; else bad "files after the fault: '$got'"; fi
done
# The fault in the last kernel before a checkpoint (step 3's 16th and last AdamW
# launch, one per parameter tensor): found before any file of checkpoint 3 exists.
GPT2_EMU_INJECT_FAULT=adamw_kernel@48 build/train_gpt2cu_emu "${args[@]}" --output-dir "$work/ck_last" \
  > "$work/last.log" 2>&1
rc=$?
got=$(cd "$work/ck_last" && ls | tr '\n' ' ')
if [ $rc -eq 1 ] && [ "$got" = "DONE_00000001 DONE_00000002 model_00000001.bin model_00000002.bin state_00000001_00000.bin state_00000002_00000.bin " ]; then
  echo "ok   fault in step 3's last kernel: no checkpoint 3 ($(grep -m1 '^error' "$work/last.log" | cut -c1-90))"
else bad "fault before checkpoint 3: rc $rc, files '$got'"; tail -3 "$work/last.log"; fi
# The last good checkpoint resumes and finishes (no injection this time).
if build/train_gpt2cu_emu "${args[@]}" --output-dir "$work/ck0" --resume > "$work/resume.log" 2>&1 \
   && grep -q "resumed from .*model_00000003.bin at step 3" "$work/resume.log" && [ -e "$work/ck0/model.bin" ]; then
  echo "ok   resumed from step 3 and finished: $(grep -m1 'resumed from' "$work/resume.log")"
else bad "resume after the fault"; tail -5 "$work/resume.log"; fi
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
