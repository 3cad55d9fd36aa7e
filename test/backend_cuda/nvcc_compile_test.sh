#!/usr/bin/env bash
# Every kernel of kernels/*.cuh is real CUDA: kernels/cuda_backend.cu (which
# includes all of them) must compile with nvcc for sm_80 and sm_90, and each
# __global__ function (each is a template over the storage type, so at least
# one instantiation) must appear in the --resource-usage report of both
# (build/kernels/nvcc_resource_usage.txt; docs/kernels.md tabulates it).
set -u
make --no-print-directory kernels-nvcc || { echo "FAIL: nvcc build"; exit 1; }
report=build/kernels/nvcc_resource_usage.txt
cat "$report"
kernels=$(grep -ohE '__global__ void [a-z_0-9]+' kernels/*.cuh | awk '{print $3}' | sort -u)
[ -n "$kernels" ] || { echo "FAIL: no kernels found"; exit 1; }
status=0
for arch in sm_80 sm_90; do
  for k in $kernels; do
    grep -E "^$arch .*::$k[<(]" "$report" >/dev/null || { echo "FAIL: $k has no $arch entry"; status=1; }
  done
done
grep -q "Used [0-9]* registers" "$report" || { echo "FAIL: no register counts"; status=1; }
[ "$status" -eq 0 ] && echo "PASS: $(echo "$kernels" | wc -l) kernels compiled for sm_80 and sm_90"
exit "$status"
