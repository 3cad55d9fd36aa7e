#!/usr/bin/env bash
# Runs every GoogleTest binary and shell test named on the command line and ends
# with one summary line "N passed, N failed" (read by CI).
# Usage: run_tests.sh GTEST_BIN... -- SCRIPT...
# A gtest binary that crashes or exits non-zero without reporting a failed test
# counts as one extra failure; a shell test counts as one test (pass = exit 0).
set -u
passed=0; failed=0; failures=()
log_dir=$(mktemp -d "${TMPDIR:-/tmp}/run_tests.XXXXXX")
mode=gtest
for t in "$@"; do
  if [ "$t" = "--" ]; then mode=script; continue; fi
  name=$(basename "$t")
  out="$log_dir/$name.log"
  start=$(date +%s)
  if [ "$mode" = gtest ]; then
    "$t" --gtest_color=no >"$out" 2>&1; rc=$?
    p=$(grep -c '^\[       OK \]' "$out"); f=$(grep -cE '^\[  FAILED  \] [^ ]+ \(' "$out")
    if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; failures+=("$name (exit $rc)"); fi
    grep -E '^\[  FAILED  \] [^ ]+ \(' "$out" | sed "s/^/  $name: /" | while read -r l; do echo "$l"; done
    passed=$((passed + p)); failed=$((failed + f))
    [ "$f" -gt 0 ] && failures+=("$name")
  else
    bash "$t" >"$out" 2>&1; rc=$?
    if [ "$rc" -eq 0 ]; then p=1; f=0; passed=$((passed + 1)); else p=0; f=1; failed=$((failed + 1)); failures+=("$name (exit $rc)"); fi
  fi
  printf '%-40s %4d passed %4d failed  (%ds)\n' "$name" "$p" "$f" $(( $(date +%s) - start ))
  if [ "$f" -gt 0 ]; then echo "---- tail of $out ----"; tail -n 40 "$out"; echo "----"; fi
done
[ ${#failures[@]} -gt 0 ] && printf 'failing: %s\n' "${failures[*]}"
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
