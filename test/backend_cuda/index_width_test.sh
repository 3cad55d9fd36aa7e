#!/usr/bin/env bash
# Static check of index width: clang-tidy's bugprone-implicit-widening-of-multiplication-result
# (an int product used as a pointer offset or widened to size_t: it wraps before the
# widening) over the CUDA backend (backend/cuda/cuda_backend.cu and every backend/cuda/*.cuh it
# includes, compiled as the emulated build sees them: emu/include/ first, as EMU_KERNEL_INC
# puts it) must be clean, and must flag the planted overflow in index_width_fixture.cu
# while passing its widened twin.
set -u
cd "$(dirname "$0")/../.."
command -v clang-tidy >/dev/null || { echo "FAIL: clang-tidy is not installed (scripts/install_deps.sh)"; exit 1; }
check=bugprone-implicit-widening-of-multiplication-result
tidy() {  # tidy FILE -> the warnings in files under backend/cuda/ or test/backend_cuda/, and any
  # compile error (a file that does not parse would otherwise pass unchecked)
  clang-tidy "$1" --quiet --checks="-*,$check" --header-filter='^(\./)?(backend/cuda|test/backend_cuda)/' -- \
    -x c++ -std=c++17 -I. -Iemu/include -isystem "${CUDA_HOME:-/usr/local/cuda}/include" 2>&1 |
    grep -E "warning: .*\[$check\]|error: "
}
status=0
backend=$(tidy backend/cuda/cuda_backend.cu)
if [ -z "$backend" ]; then echo "ok   backend/cuda/cuda_backend.cu and backend/cuda/*.cuh: no implicit widening of an int product"
else echo "FAIL backend/cuda/:"; echo "$backend"; status=1; fi
planted=$(grep -n 'PLANTED' test/backend_cuda/index_width_fixture.cu | cut -d: -f1)
fixture=$(tidy test/backend_cuda/index_width_fixture.cu)
if [ "$(wc -l <<<"$fixture")" -eq 1 ] && grep -q "index_width_fixture.cu:$planted:" <<<"$fixture"; then
  echo "ok   planted overflow flagged, twin clean: $fixture"
else echo "FAIL fixture: expected one warning at line $planted, got:"; echo "$fixture"; status=1; fi
exit $status
