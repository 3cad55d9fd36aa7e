#!/usr/bin/env bash
# scripts/gpu_check.sh [--quick] [--rehearsal] [--kit DIR] OUT_DIR
#
# Proves the CUDA path on a real GPU in one command (docs/gpu.md), from the
# repository root of a lent GPU machine: GPU/driver/CUDA versions; the kit's
# binaries (scripts/gpu_kit.sh, carried as gpu-kit/) or a build for the local
# architecture; every CUDA op test and the CUDA training tests against the CPU
# backend (fp32 and bf16); d12 at ZeRO-3 (optimizer on the device, offloaded)
# bitwise against ZeRO-2; compute-sanitizer memcheck, racecheck and synccheck
# on the op tests; the per-op benchmark (`make bench-cuda`'s program); and d12
# a Hugging Face client on the CPU (save_pretrained into ours, our --save-hf into
# from_pretrained; skipped without transformers); d12 bf16 training throughput
# beside transformers' GPT2LMHeadModel and a compact torch.compile GPT-2 on the
# same config and tokens. Writes OUT_DIR/gpu_check_report.txt
# and OUT_DIR/gpu_check_summary.json.
#
# Every phase has a time budget (full: under 10 minutes in all; --quick: under 3).
# --rehearsal runs every phase with the emulated builds on a machine without a GPU
# (the CI test test/gpu/gpu_check_rehearsal_test.sh): only the hardware is missing,
# and each stand-in is named in the report. Without a GPU and without
# --rehearsal it says so and exits 2 at once.
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
quick=0 rehearsal=0 kit_dir=gpu-kit out=""
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1 ;;
    --rehearsal) rehearsal=1 ;;
    --kit) kit_dir=$2; shift ;;
    -h|--help) sed -n '2,21p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_check: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) [ -z "$out" ] || { echo "gpu_check: one OUT_DIR only" >&2; exit 2; }; out=$1 ;;
  esac
  shift
done
[ -n "$out" ] || { echo "usage: scripts/gpu_check.sh [--quick] [--rehearsal] [--kit DIR] OUT_DIR" >&2; exit 2; }
if [ "$rehearsal" = 0 ] && ! nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "gpu_check: no NVIDIA GPU is visible on $(hostname) (nvidia-smi lists none); nothing to check." >&2
  echo "gpu_check: use --rehearsal for the emulated dry run of every phase." >&2
  exit 2
fi
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)
work=$(mktemp -d "${TMPDIR:-/tmp}/gpu_check.XXXXXX")
trap 'rm -rf "$work"' EXIT
report=$out/gpu_check_report.txt
: > "$report"
exec > >(tee -a "$report") 2>&1
export repo work quick rehearsal kit_dir
export PHASES=$work/phases.tsv METRICS=$work/metrics.tsv
: > "$PHASES"; : > "$METRICS"

# Whole-run deadline: phases get their own budget or what is left, whichever is less.
# A rehearsal runs the emulated builds on the CPU in the GPU's place, on a machine
# that may be shared: twice the deadline, as each phase gets twice its budget.
total_budget=$([ "$quick" = 1 ] && echo 170 || echo 560)
[ "$rehearsal" = 1 ] && total_budget=$((total_budget * 2))
deadline=$(( $(date +%s) + total_budget ))
source scripts/gpu_check_phases.sh

run_phase() {  # run_phase NAME FULL_BUDGET QUICK_BUDGET FUNCTION
  local name=$1 budget=$2 fn=$4 left start rc status detail
  [ "$quick" = 1 ] && budget=$3
  [ "$rehearsal" = 1 ] && budget=$((budget * 2))  # the emulated builds on the CPU (above)
  left=$(( deadline - $(date +%s) ))
  [ "$left" -lt "$budget" ] && budget=$left
  printf '\n===== phase %s (budget %ss) =====\n' "$name" "$budget"
  if [ "$budget" -lt 5 ]; then
    printf '%s\tskipped\t0\t%s\tno time left in the %ss run budget\n' "$name" "$budget" "$total_budget" >> "$PHASES"
    echo "skipped: no time left"; return
  fi
  start=$(date +%s)
  rm -f "$work/skip_reason" "$work/fail_reason"
  timeout --kill-after=10 "$budget" bash -c "source scripts/gpu_check_phases.sh; $fn"; rc=$?
  case $rc in
    0) status=pass detail="" ;;
    77) status=skipped detail=$(cat "$work/skip_reason" 2>/dev/null) ;;
    124|137) status=timeout detail="timed out after ${budget} s" ;;
    *) status=fail detail="exit $rc$([ -s "$work/fail_reason" ] && echo ": $(cat "$work/fail_reason")")" ;;
  esac
  printf '%s\t%s\t%s\t%s\t%s\n' "$name" "$status" "$(( $(date +%s) - start ))" "$budget" "$detail" >> "$PHASES"
  echo "----- phase $name: $status${detail:+ ($detail)} in $(( $(date +%s) - start ))s"
}

echo "gpu_check $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(hostname): mode $([ "$rehearsal" = 1 ] && echo rehearsal || echo gpu)$([ "$quick" = 1 ] && echo ', quick'), budget ${total_budget}s"
#         name       full quick (seconds; the kit makes `binaries` take seconds)
run_phase env          20  10 phase_env
run_phase binaries    200  40 phase_binaries
run_phase op_tests    100  25 phase_op_tests
run_phase train_tests  60  25 phase_train_tests
run_phase zero3        60  40 phase_zero3
run_phase sanitizer   150  25 phase_sanitizer
run_phase attention   60  25 phase_attention
run_phase bench_ops    60  30 phase_bench_ops
run_phase hf_client    30  20 phase_hf_client
run_phase throughput  200  70 phase_throughput

pick_python
"$PY" dev/gpu/gpu_check_summary.py --phases "$PHASES" --metrics "$METRICS" \
  --mode "$([ "$rehearsal" = 1 ] && echo rehearsal || echo gpu)" --quick "$quick" --json "$out/gpu_check_summary.json"
