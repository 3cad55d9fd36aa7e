#!/usr/bin/env bash
# The emulator's test kernels are ordinary CUDA: they must compile with nvcc for
# sm_80 and sm_90. Builds them (make emu-nvcc) and checks that every __global__
# kernel of the file has a --resource-usage entry for both architectures; the
# report is kept in build/emu/nvcc_resource_usage.txt.
set -u
make --no-print-directory emu-nvcc || { echo "FAIL: nvcc build"; exit 1; }
report=build/emu/nvcc_resource_usage.txt
cat "$report"
kernels=$(grep -oE '__global__ void [a-z_]+' test/emu/kernels.cu | awk '{print $3}' | sort -u)
[ -n "$kernels" ] || { echo "FAIL: no kernels found"; exit 1; }
status=0
for arch in sm_80 sm_90; do
  for k in $kernels; do
    grep -E "^$arch .*$k" "$report" >/dev/null || { echo "FAIL: $k has no $arch entry"; status=1; }
  done
done
grep -q "Used [0-9]* registers" "$report" || { echo "FAIL: no register counts"; status=1; }
[ "$status" -eq 0 ] && echo "PASS: $(echo "$kernels" | wc -l) kernels compiled for sm_80 and sm_90"
exit "$status"
