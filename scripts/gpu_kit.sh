#!/usr/bin/env bash
# scripts/gpu_kit.sh [KIT_DIR]  (`make gpu-kit`; default KIT_DIR: gpu-kit/, git-ignored)
#
# Packs, on this machine, everything scripts/gpu_check.sh needs on a lent GPU
# machine that has only the NVIDIA driver, the CUDA 13 toolkit libraries and
# Python with PyTorch (docs/gpu.md): the trainer, the CUDA op tests and the op
# benchmark built here by nvcc for sm_80 + sm_90 with portable CPU flags, the
# shared libraries they load (oneDNN, OpenBLAS, PCRE2, Open MPI with its components;
# not glibc, not CUDA's), the GPT-2 vocabulary and the tinyshakespeare shards.
# Result: KIT_DIR/gpu-kit.tar.xz (+ MANIFEST.txt beside it), carried to the GPU
# machine (device `carry: ["gpu-kit"]`) and unpacked there by gpu_check.sh.
#
# Why prebuilt binaries rather than Debian packages to build there: the GPU
# machine's compiler and OS are not ours to know, its minutes are for measuring,
# and a build there would need the -dev packages of everything (larger). The
# binaries need glibc >= the version MANIFEST.txt names (Debian 12: 2.36).
set -euo pipefail
cd "$(dirname "$0")/.."
kit_dir=${1:-gpu-kit}
limit_mib=64
# Portable CPU code: the GPU machine's CPU is not this one (-march=native could SIGILL).
kit_opt=${GPU_KIT_OPT:--O3 -march=x86-64-v3 -mtune=generic}
# With the main build's flags (the portable default) its objects serve as they
# are; other flags (NATIVE=1 here, GPU_KIT_OPT) build apart, in build/kit.
main_opt=$(make --no-print-directory -s print-build-config | sed -n 's/^OPT=//p')
kit_build=build/kit
[ "$main_opt" = "$kit_opt" ] && kit_build=build
jobs=${GPU_KIT_JOBS:-$(nproc)}

command -v "${NVCC:-/usr/local/cuda/bin/nvcc}" >/dev/null || { echo "gpu_kit: nvcc not found (${NVCC:-/usr/local/cuda/bin/nvcc})" >&2; exit 1; }

echo "gpu_kit: building with OPT='$kit_opt' in $kit_build (nvcc object shared with the main build)"
make --no-print-directory vocab data build/nvcc/fat/backend/cuda/cuda_backend.o >/dev/null
make --no-print-directory -j"$jobs" BUILD="$kit_build" OPT="$kit_opt" \
  CUDA_BACKEND_FAT_OBJ=build/nvcc/fat/backend/cuda/cuda_backend.o \
  "$kit_build/gpu/train_gpt2cu" "$kit_build/gpu/backend_cuda_gpu_test" "$kit_build/dev/cuda/bench_cuda_ops" \
  "$kit_build/test/e2e/hf_logits" >/dev/null

stage=$(mktemp -d "${TMPDIR:-/tmp}/gpu_kit.XXXXXX")
trap 'rm -rf "$stage"' EXIT
root=$stage/gpu-kit
mkdir -p "$root/bin" "$root/lib" "$root/data/gpt2" "$root/data/tinyshakespeare"
for b in gpu/train_gpt2cu gpu/backend_cuda_gpu_test dev/cuda/bench_cuda_ops test/e2e/hf_logits; do
  strip --strip-debug -o "$root/bin/$(basename "$b")" "$kit_build/$b"
done
cp data/gpt2/encoder.json data/gpt2/vocab.bpe "$root/data/gpt2/"
cp data/tinyshakespeare/tiny_shakespeare_train.bin data/tinyshakespeare/tiny_shakespeare_val.bin \
   "$root/data/tinyshakespeare/"

# Open MPI, relocated: its components and help texts under openmpi/usr (OPAL_PREFIX).
ompi_pkglib=$(ompi_info --path pkglibdir --parsable | sed 's/.*pkglibdir://')
ompi_pkgdata=$(ompi_info --path pkgdatadir --parsable | sed 's/.*pkgdatadir://')
mkdir -p "$root/openmpi$(dirname "$ompi_pkglib")" "$root/openmpi$(dirname "$ompi_pkgdata")"
cp -a "$ompi_pkglib" "$root/openmpi$(dirname "$ompi_pkglib")/"
cp -a "$ompi_pkgdata" "$root/openmpi$(dirname "$ompi_pkgdata")/"

# Every shared library the binaries and components load, except the C library
# family (the target's own, ABI-stable) and CUDA's: cuBLAS, cudart and NCCL come
# from the target's toolkit, which must match its driver (and libnccl alone is
# over 200 MiB).
is_system_lib() { [[ $1 =~ ^(linux-vdso|ld-linux|libc\.|libm\.|libpthread|libdl\.|librt\.|libresolv|libcu|libnv|libnccl) ]]; }
{
  ldd "$root"/bin/* ; find "$root/openmpi" -name '*.so' -exec ldd {} \;
} | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}' | sort -u | while read -r soname path; do
  is_system_lib "$soname" || cp -L "$path" "$root/lib/$soname"
done

glibc_needed=$(objdump -T "$root"/bin/* "$root"/lib/* 2>/dev/null | grep -oE 'GLIBC_[0-9]+\.[0-9]+' | sort -uV | tail -1)
cat > "$root/env.sh" <<'ENV'
# Sourced by scripts/gpu_check.sh: makes the kit's binaries find their libraries.
kit_root=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
export LD_LIBRARY_PATH="$kit_root/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OPAL_PREFIX="$kit_root/openmpi/usr"
# A singleton MPI_Init without Open MPI's orted daemon (not carried), quiet about
# network components whose drivers a GPU box lacks.
export OMPI_MCA_ess_singleton_isolated=1 OMPI_MCA_mca_base_component_show_load_errors=0
export GPT2_VOCAB_DIR="$kit_root/data/gpt2"
ENV
{
  echo "gpt2cu GPU kit"
  echo "commit        $(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet 2>/dev/null || echo '+local changes')"
  echo "built         $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(. /etc/os-release && echo "$PRETTY_NAME")"
  echo "cpu flags     $kit_opt"
  echo "gpu archs     $(make --no-print-directory -s print-cuda-gencode | grep -oE 'sm_[0-9]+a?' | sort -u | tr '\n' ' ')"
  echo "nvcc          $("${NVCC:-/usr/local/cuda/bin/nvcc}" --version | grep -oE 'release [0-9.]+')"
  echo "needs glibc   ${glibc_needed#GLIBC_}"
  echo "files:"
  (cd "$root" && find . -type f -printf '  %-60p %10s\n' | sort)
} > "$root/MANIFEST.txt"

mkdir -p "$kit_dir"
rm -f "$kit_dir/gpu-kit.tar.xz"
tar -C "$stage" -cf - gpu-kit | xz -T"$jobs" -6 > "$kit_dir/gpu-kit.tar.xz"
cp "$root/MANIFEST.txt" "$kit_dir/MANIFEST.txt"
unpacked=$(du -sk "$root" | cut -f1)
packed=$(du -sk "$kit_dir" | cut -f1)
awk -v d="$kit_dir" -v p="$packed" -v u="$unpacked" -v n="$(find "$root" -type f | wc -l)" -v l="$limit_mib" \
  'BEGIN { printf "gpu_kit: %s: %.1f MiB (%.1f MiB unpacked, %d files); carry limit %d MiB\n", d, p / 1024, u / 1024, n, l }'
[ "$packed" -lt $((limit_mib * 1024)) ] || { echo "gpu_kit: over the ${limit_mib} MiB carry limit" >&2; exit 1; }
