#!/usr/bin/env bash
# check_nvcc_report.sh MAKE_TARGET REPORT SOURCE...
# Builds MAKE_TARGET (an nvcc compile for sm_80 and sm_90 with --resource-usage),
# prints REPORT, and fails unless every __global__ kernel defined in the SOURCEs
# has an entry for both architectures and register counts were recorded.
#
# check_nvcc_report.sh --kernel-names SOURCE...
# Only prints the kernel names found in the SOURCEs, one a line, sorted (for
# test/runner/kernel_names_test.sh, which plants kernels in every spelling).
set -u

# The name of every __global__ function, whatever sits between __global__ and
# the name: void, static, __launch_bounds__(...) in either place CUDA allows,
# __maxnreg__/__cluster_dims__/__attribute__((...)), [[...]], line breaks.
# Comments, string and character literals are skipped. The name is the last
# identifier before the first "(" or "<" that does not open an attribute's
# arguments: __global__ functions return void, so no "<" comes earlier.
kernel_names() {
  awk '
    { text = text $0 "\n" }
    function is_ident(c) { return c ~ /[A-Za-z0-9_]/ }
    # Index just past the ")" matching the "(" at i.
    function skip_parens(i,   depth, c) {
      depth = 0
      for (; i <= n; i++) {
        c = substr(text, i, 1)
        if (c == "(") depth++
        else if (c == ")" && --depth == 0) return i + 1
      }
      return i
    }
    END {
      n = length(text); seeking = 0; last = ""
      for (i = 1; i <= n; ) {
        c = substr(text, i, 1); two = substr(text, i, 2)
        if (two == "//") { while (i <= n && substr(text, i, 1) != "\n") i++; continue }
        if (two == "/*") { j = index(substr(text, i + 2), "*/"); i = j ? i + j + 3 : n + 1; continue }
        if (c == "\047" && i > 1 && is_ident(substr(text, i - 1, 1))) { i++; continue }  # digit separator
        if (c == "\"" || c == "\047") {  # literal: skip to the unescaped closing quote
          for (i++; i <= n && substr(text, i, 1) != c; i++) if (substr(text, i, 1) == "\\") i++
          i++; continue
        }
        if (is_ident(c)) {
          for (j = i; j <= n && is_ident(substr(text, j, 1)); j++) ;
          word = substr(text, i, j - i); i = j
          if (word == "__global__") { seeking = 1; last = ""; continue }
          if (!seeking) continue
          if (word ~ /^(__launch_bounds__|__maxnreg__|__cluster_dims__|__attribute__|__declspec)$/) {
            while (substr(text, i, 1) ~ /[ \t\n]/) i++
            if (substr(text, i, 1) == "(") i = skip_parens(i)
            continue
          }
          last = word; continue
        }
        if (seeking && two == "[[") { j = index(substr(text, i), "]]"); i = j ? i + j + 1 : n + 1; continue }
        if (seeking && (c == "(" || c == "<")) { if (last != "") print last; seeking = 0 }
        else if (seeking && c ~ /[;{}=]/) seeking = 0
        i++
      }
    }
  ' "$@" | sort -u
}

if [ "${1:-}" = "--kernel-names" ]; then
  shift
  kernel_names "$@"
  exit
fi

target=$1 report=$2
shift 2
make --no-print-directory "$target" || { echo "FAIL: nvcc build ($target)"; exit 1; }
cat "$report"
kernels=$(kernel_names "$@")
[ -n "$kernels" ] || { echo "FAIL: no kernels found in $*"; exit 1; }
status=0
for arch in sm_80 sm_90; do
  for k in $kernels; do
    grep -E "^$arch .*::${k}[<(]" "$report" >/dev/null || { echo "FAIL: $k has no $arch entry"; status=1; }
  done
done
grep -q "Used [0-9]* registers" "$report" || { echo "FAIL: no register counts"; status=1; }
[ "$status" -eq 0 ] && echo "PASS: $(echo "$kernels" | wc -l) kernels compiled for sm_80 and sm_90"
exit "$status"
