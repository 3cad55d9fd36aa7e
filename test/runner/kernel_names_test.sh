#!/usr/bin/env bash
# test-timeout: 60
# The kernel search of test/check_nvcc_report.sh (the nvcc compile tests fail
# any kernel missing from the --resource-usage report, so a kernel the search
# misses is never checked). On test/runner/fixtures/planted_kernels.cu it must
# find exactly the planted kernels, whatever their qualifiers
# (__launch_bounds__ before or after void, static, templates, line breaks,
# attributes), and none of the decoys; on the real sources it must find at
# least what the plain "__global__ void NAME" spelling finds.
set -u
cd "$(dirname "$0")/../.." || exit 1
CHECK=test/check_nvcc_report.sh
fails=0
got=$("$CHECK" --kernel-names test/runner/fixtures/planted_kernels.cu)
want="attributed_Kernel2
bounds_after_void
bounds_before_void
bounds_two_args
c_linkage_kernel
plain_kernel
split_over_lines
static_after_global
static_kernel
templated_kernel"
if [ "$got" = "$want" ]; then
  echo "ok   planted kernels found: $(echo "$got" | tr '\n' ' ')"
else
  echo "FAIL planted kernels:"; diff <(echo "$want") <(echo "$got") | sed 's/^/    /'; fails=$((fails + 1))
fi

for src in "backend/cuda/*.cuh" test/emu/kernels.cu; do
  # shellcheck disable=SC2086  # the glob is meant to expand
  # The plain spelling "__global__ void NAME(" (or "<"); __x__ words there are
  # qualifiers such as __launch_bounds__, not names.
  plain=$(grep -ohE '__global__ void [A-Za-z_0-9]+ *[(<]' $src |
    awk '{ sub(/ *[(<]$/, "", $3) } $3 !~ /^__.*__$/ { print $3 }' | sort -u)
  # shellcheck disable=SC2086
  found=$("$CHECK" --kernel-names $src)
  missed=$(comm -23 <(echo "$plain") <(echo "$found"))
  if [ -n "$plain" ] && [ -z "$missed" ]; then
    echo "ok   $src: $(echo "$found" | wc -l) kernels"
  else
    echo "FAIL $src: missed $(echo "$missed" | tr '\n' ' ')"; fails=$((fails + 1))
  fi
done
echo "$fails failure(s)"
[ "$fails" -eq 0 ]
