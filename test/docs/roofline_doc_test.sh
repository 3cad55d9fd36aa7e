#!/usr/bin/env bash
# docs/kernels.md's roofline figures are the script's: the block between its
# "roofline.py --doc" markers must equal `dev/roofline/roofline.py --doc` line for
# line, so a changed count, rate or kernel that moves a figure fails here until
# the block is regenerated (roofline.py --update-doc docs/kernels.md). The check
# is first run on a copy with one figure changed, which must fail, so that a
# comparison that sees nothing cannot pass.
set -u
cd "$(dirname "$0")/../.."
DOC=docs/kernels.md
W=$(mktemp -d "${TMPDIR:-/tmp}/roofline_doc.XXXXXX")
trap 'rm -rf "$W"' EXIT
python3 dev/roofline/roofline.py --doc >"$W/want.md" || { echo "FAIL: roofline.py --doc exited $?"; exit 1; }
[ -s "$W/want.md" ] || { echo "FAIL: roofline.py --doc printed nothing"; exit 1; }

block() {  # the lines strictly between the markers of $1
  awk '/^<!-- roofline.py --doc: begin/{on=1; next} /^<!-- roofline.py --doc: end/{on=0} on' "$1"
}
check() {  # 0 when $1's block is the script's output
  [ "$(grep -c '^<!-- roofline.py --doc: begin' "$1")" = 1 ] || return 1
  [ "$(grep -c '^<!-- roofline.py --doc: end' "$1")" = 1 ] || return 1
  block "$1" >"$W/got.md"
  diff -u "$W/want.md" "$W/got.md" >"$W/diff.txt"
}

# The step time of the bold --recompute 2 row, changed by 0.1 ms in a copy.
row=$(grep -m1 '^| \*\*now, cuDNN attention, `--recompute 2`\*\*' "$W/want.md")
ms=$(printf '%s\n' "$row" | awk -F' \\| ' '{print $3}')
case "$ms" in [0-9]*.[0-9]) ;; *) echo "FAIL: no step time in the --recompute 2 row: $row"; exit 1 ;; esac
bad=$(awk -v m="$ms" 'BEGIN{printf "%.1f", m + 0.1}')
awk -v row="$row" -v old="| $ms |" -v new="| $bad |" \
  '$0 == row && !done {i = index($0, old); $0 = substr($0, 1, i - 1) new substr($0, i + length(old)); done = 1} {print}' \
  "$DOC" >"$W/mutated.md"
if cmp -s "$DOC" "$W/mutated.md"; then echo "FAIL: could not change $ms ms in a copy of $DOC"; exit 1; fi
if check "$W/mutated.md"; then echo "FAIL: a copy with $ms ms changed to $bad ms passed the check"; exit 1; fi
echo "ok   a copy with $ms ms changed to $bad ms fails"

if check "$DOC"; then
  echo "ok   $DOC's roofline block is roofline.py --doc ($(wc -l <"$W/want.md") lines; step $ms ms at --recompute 2)"
  exit 0
fi
echo "FAIL: $DOC differs from roofline.py --doc (regenerate: python3 dev/roofline/roofline.py --update-doc $DOC):"
cat "$W/diff.txt"
exit 1
