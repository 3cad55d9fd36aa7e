#!/usr/bin/env bash
# Runs the whole test suite once per OpenBLAS core type (make test-blas-variants).
# The GEMM libraries pick their kernels per CPU at run time, and each kernel sums
# in its own order: a tolerance tuned to one CPU's rounding fails on another.
# Forcing OPENBLAS_CORETYPE, and oneDNN's ISA to match (ONEDNN_MAX_CPU_ISA: AVX2
# for Haswell and Zen, AVX512_CORE for the AVX-512 cores), reproduces on this
# machine what the suite computes on the CPUs of today's servers (Haswell: AVX2
# Intel and the default where nothing better is known; SkylakeX: what OpenBLAS
# picks by itself on AVX-512 CPUs; Zen: AMD).
# Usage: scripts/test_blas_variants.sh CORETYPE... -- GTEST_BIN... -- SCRIPT...
# Each variant's log goes to build/test-blas/CORETYPE.log; this prints each one's
# closing line and ends with the summed "N passed, N failed". A core type whose
# instructions this CPU lacks (SkylakeX, Cooperlake without AVX-512) is not run
# and is named, with the exit status 77 if nothing else failed.
set -u
cd "$(dirname "$0")/.."
cores=()
while [ $# -gt 0 ] && [ "$1" != -- ]; do cores+=("$1"); shift; done
[ $# -gt 0 ] && shift
[ ${#cores[@]} -gt 0 ] || { echo "usage: $0 CORETYPE... -- GTEST_BIN... -- SCRIPT..." >&2; exit 2; }

# The core OpenBLAS really uses under OPENBLAS_CORETYPE=$1 (an unknown name falls back silently).
corename() {
  OPENBLAS_CORETYPE=$1 /usr/bin/env python3 -c '
import ctypes, ctypes.util
lib = ctypes.CDLL("libopenblas.so.0")
lib.openblas_get_corename.restype = ctypes.c_char_p
print(lib.openblas_get_corename().decode())'
}
has_avx512() { grep -qw avx512f /proc/cpuinfo; }
# oneDNN's widest ISA on the core type $1's CPUs (for fp32: AVX2 or AVX-512).
onednn_isa() { case $1 in SkylakeX|Cooperlake|SapphireRapids) echo AVX512_CORE ;; *) echo AVX2 ;; esac; }

mkdir -p build/test-blas
passed=0 failed=0 not_run=()
for c in "${cores[@]}"; do
  case $c in SkylakeX|Cooperlake|SapphireRapids) has_avx512 || { not_run+=("$c (no AVX-512 here)"); continue; } ;; esac
  got=$(corename "$c") || { echo "$c: cannot load libopenblas.so.0" >&2; failed=$((failed + 1)); continue; }
  if [ "${got,,}" != "${c,,}" ]; then
    echo "$c: OpenBLAS runs $got instead (unknown core type?)"; failed=$((failed + 1)); continue
  fi
  log=build/test-blas/$c.log
  isa=$(onednn_isa "$c")
  echo "== OPENBLAS_CORETYPE=$c ONEDNN_MAX_CPU_ISA=$isa: the whole suite -> $log"
  OPENBLAS_CORETYPE=$c ONEDNN_MAX_CPU_ISA=$isa scripts/run_tests.sh "$@" >"$log" 2>&1
  line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n 1)
  echo "$c: ${line:-no summary line (see $log)}"
  sed -n '/^failed:$/,/^[0-9]* passed/p' "$log" | grep '^  ' | head -n 20
  if [[ $line =~ ^([0-9]+)\ passed,\ ([0-9]+)\ failed ]]; then
    passed=$((passed + BASH_REMATCH[1])) failed=$((failed + BASH_REMATCH[2]))
  else failed=$((failed + 1)); fi
done
for n in "${not_run[@]}"; do echo "not run: $n"; done
echo "$passed passed, $failed failed"
[ $failed = 0 ] || exit 1
[ ${#not_run[@]} = 0 ] || exit 77
