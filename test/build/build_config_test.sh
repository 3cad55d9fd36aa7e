#!/usr/bin/env bash
# The build finds nvcc the way clusters provide it (Makefile, `make print-build-config`):
# NVCC first, then $CUDA_HOME/bin, $CUDA_PATH/bin, then PATH (`module load cuda`),
# then /usr/local/cuda; CUDA_HOME follows the nvcc found; NCCL's header comes from
# NCCL_HOME, the toolkit or /usr/include; the CPU flags are portable unless NATIVE=1. Fake toolkits (an executable file named nvcc) stand in.
set -u
cd "$(dirname "$0")/../.."
work=$(mktemp -d "${TMPDIR:-/tmp}/build_config.XXXXXX")
trap 'rm -rf "$work"' EXIT
for t in home module; do
  mkdir -p "$work/$t/bin" "$work/$t/include" && touch "$work/$t/include/cuda_runtime.h"
  printf '#!/bin/sh\nexit 0\n' > "$work/$t/bin/nvcc" && chmod +x "$work/$t/bin/nvcc"
done
fails=0
config() { env -u NVCC -u CUDA_HOME -u CUDA_PATH "$@" make --no-print-directory -s print-build-config; }
expect() {  # NAME PATTERN -- env assignments...
  local name=$1 pat=$2; shift 3
  local out; out=$(config "$@" | tr '\n' ' ')
  if grep -qE -- "$pat" <<<"$out"; then echo "ok   $name: $out"; else echo "FAIL $name: '$out' lacks /$pat/"; fails=$((fails + 1)); fi
}
expect nvcc-variable "NVCC=$work/home/bin/nvcc " -- NVCC="$work/home/bin/nvcc"
expect cuda-home "NVCC=$work/home/bin/nvcc CUDA_HOME=$work/home " -- CUDA_HOME="$work/home"
expect cuda-path "NVCC=$work/home/bin/nvcc CUDA_HOME=$work/home " -- CUDA_PATH="$work/home"
expect path-only "NVCC=$work/module/bin/nvcc CUDA_HOME=$work/module .*CUDA=yes" -- PATH="$work/module/bin:$PATH"
expect home-before-path "NVCC=$work/home/bin/nvcc " -- CUDA_HOME="$work/home" PATH="$work/module/bin:$PATH"
expect portable "OPT=-O3 -march=x86-64-v3 " --
expect native "OPT=-O3 -march=native " -- NATIVE=1
expect missing "CUDA_HOME=/usr/local/cuda OPT=.* CUDA=no" -- NVCC=/nonexistent/nvcc
mkdir -p "$work/nccl/include" && touch "$work/nccl/include/nccl.h"
expect nccl-home "NCCL=$work/nccl/include" -- NCCL_HOME="$work/nccl"
expect nccl-missing "CUDA=yes NCCL=no" -- CUDA_HOME="$work/home"
# GPU architectures: sm_80 + sm_90, plus every GPU visible at build time (a fake nvidia-smi here).
mkdir -p "$work/smi" && printf '#!/bin/sh\necho 8.6\necho 9.0\n' > "$work/smi/nvidia-smi" && chmod +x "$work/smi/nvidia-smi"
archs=$(env -u CUDA_GENCODE PATH="$work/smi:$PATH" make --no-print-directory -s print-cuda-gencode)
if [ "$archs" = "-gencode arch=compute_80,code=sm_80 -gencode arch=compute_86,code=sm_86 -gencode arch=compute_90,code=sm_90" ]; then
  echo "ok   visible GPU architectures added: $archs"
else echo "FAIL gencode with GPUs 8.6 and 9.0 visible: '$archs'"; fails=$((fails + 1)); fi
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
