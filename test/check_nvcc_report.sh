#!/usr/bin/env bash
# check_nvcc_report.sh MAKE_TARGET REPORT SOURCE...
# Builds MAKE_TARGET (an nvcc compile for sm_80 and sm_90 with --resource-usage),
# prints REPORT, and fails unless every __global__ kernel defined in the SOURCEs
# has an entry for both architectures and register counts were recorded.
set -u
target=$1 report=$2
shift 2
make --no-print-directory "$target" || { echo "FAIL: nvcc build ($target)"; exit 1; }
cat "$report"
kernels=$(grep -ohE '__global__ void [a-z_0-9]+' "$@" | awk '{print $3}' | sort -u)
[ -n "$kernels" ] || { echo "FAIL: no kernels found in $*"; exit 1; }
status=0
for arch in sm_80 sm_90; do
  for k in $kernels; do
    grep -E "^$arch .*::$k[<(]" "$report" >/dev/null || { echo "FAIL: $k has no $arch entry"; status=1; }
  done
done
grep -q "Used [0-9]* registers" "$report" || { echo "FAIL: no register counts"; status=1; }
[ "$status" -eq 0 ] && echo "PASS: $(echo "$kernels" | wc -l) kernels compiled for sm_80 and sm_90"
exit "$status"
