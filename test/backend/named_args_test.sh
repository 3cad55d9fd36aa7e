#!/usr/bin/env bash
# Every call of a Backend op names its tensors: `be.gelu_backward({.dinp = d, .inp = x, .dout = d, .n = n})`.
# The argument structs of backend/backend.h are aggregates, so a positional brace list
# `be.gelu_backward({d, x, d, n})` would still compile and a swap of two same-shape tensors
# would go unseen; this check refuses such calls in the tree, and must flag a planted one
# while passing its named twin.
set -u
cd "$(dirname "$0")/../.."
ops=$(sed -n 's/^ *virtual void \([a-z_0-9]*\)(const [A-Za-z]*Args& args.*/\1/p' backend/backend.h | paste -sd'|')
[ -n "$ops" ] || { echo "FAIL: no ops with argument structs found in backend/backend.h"; exit 1; }
# A call `.op({` or `->op({` (line breaks allowed) whose brace list does not start with a designator:
# FILE:LINE: text.
positional() {
  perl -0ne 'while (/(\.|->)('"$ops"')\(\s*\{\s*[^.\s]/g) {
    my $at = $-[0];
    my $line = 1 + (() = substr($_, 0, $at) =~ /\n/g);
    my ($text) = substr($_, $at) =~ /^([^\n]*)/;
    print "$ARGV:$line: $text\n" }' "$@"
}
status=0
found=$(positional $(git ls-files '*.cpp' '*.cu' '*.h' '*.cuh') 2>/dev/null)
if [ -z "$found" ]; then echo "ok   every call of the $(tr '|' '\n' <<<"$ops" | wc -l) ops with argument structs names its fields"
else echo "FAIL positional argument lists:"; echo "$found"; status=1; fi
fixture=$(mktemp --suffix=.cpp)
trap 'rm -f "$fixture"' EXIT
printf '%s\n' '  be.gelu_backward(' '      {dinp, inp, dout, n});' '  be.gelu_backward({dinp, inp, dout, n});  // PLANTED' \
  '  be.gelu_backward({.dinp = dinp, .inp = inp, .dout = dout, .n = n});' >"$fixture"
planted=$(positional "$fixture")
if [ "$(wc -l <<<"$planted")" -eq 2 ] && grep -q ':1: ' <<<"$planted" && grep -q ':3: .*PLANTED' <<<"$planted"; then
  echo "ok   both planted positional calls (one across a line break) are flagged, their named twin is not"
else echo "FAIL fixture: expected lines 1 and 3, got: $planted"; status=1; fi
exit $status
