#!/usr/bin/env bash
# train_in_container.sh [TRAINER ARGS...] - ./train_gpt2cu inside the Apptainer image built from
# scripts/apptainer/gpt2cu.def; for the sbatch scripts (one srun task per GPU, as outside):
#   GPT2_SIF=$PWD/gpt2cu.sif GPT2_TRAIN_BIN=scripts/apptainer/train_in_container.sh \
#     sbatch scripts/slurm/train_1node_gpus.sbatch
# The current directory is bound (Apptainer's default), so relative --train-data / --output-dir
# paths mean the same inside. GPT2_APPTAINER_ARGS adds options to `apptainer exec` (e.g. --bind
# /scratch). MPI: the image's Open MPI (Debian 12, PMIx) is started by the host's srun --mpi=pmix
# (the "hybrid" model): the host Slurm's PMIx must serve it, as for the native build.
set -eu
sif=${GPT2_SIF:-gpt2cu.sif}
[ -f "$sif" ] || { echo "train_in_container: image $sif not found (set GPT2_SIF; build: apptainer build gpt2cu.sif scripts/apptainer/gpt2cu.def)" >&2; exit 1; }
runner=$(command -v apptainer || command -v singularity) || { echo "train_in_container: neither apptainer nor singularity on PATH" >&2; exit 1; }
read -r -a extra <<<"${GPT2_APPTAINER_ARGS:-}"
exec "$runner" exec --nv "${extra[@]}" "$sif" /opt/gpt2cu/train_gpt2cu "$@"
