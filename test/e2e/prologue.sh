# The end-to-end tests' common start (bash), sourced from the repository root as
# `. test/e2e/prologue.sh NAME BINARY...`:
#   - FAIL (exit 1) unless every BINARY is built;
#   - W, a fresh scratch directory build/test/e2e/NAME.XXXXXX, removed on exit unless KEEP is
#     set, after the script's own on_exit if it defines one (to stop a background job first);
#   - fail=0, skipped= (a part that could not run adds its letter: skipped+=" c") and the
#     reporters pass/bad;
#   - need_text: TXT, the tinyshakespeare text (TINYSHAKESPEARE_TXT, else the tree's copy as
#     `make data` finds it), or a skip (exit 77) where there is none;
#   - finish NAME, the script's last line: exit 1 when a check failed, 77 (a counted skip,
#     docs/testing.md) when nothing failed but a part could not run, else 0.
for b in "${@:2}"; do [ -x "$b" ] || { echo "FAIL: $b not built"; exit 1; }; done
mkdir -p build/test/e2e
W=$(mktemp -d "build/test/e2e/$1.XXXXXX")
prologue_exit() {
  [ "$(type -t on_exit)" = function ] && on_exit
  [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap prologue_exit EXIT
fail=0 skipped=
pass() { echo "ok   $*"; }
bad() { echo "FAIL $*"; fail=1; }
need_text() {
  TXT=${TINYSHAKESPEARE_TXT:-data/tinyshakespeare/input.txt}
  [ -f "$TXT" ] || { echo "SKIP: no tinyshakespeare text (TINYSHAKESPEARE_TXT)"; exit 77; }
}
finish() {
  [ "$fail" = 0 ] && [ -n "$skipped" ] && { echo "$1: skipped part$skipped"; exit 77; }
  [ "$fail" = 0 ] && { echo "$1: all passed"; exit 0; }
  echo "$1: FAILED (KEEP=1 keeps the scratch directory)"; exit 1
}
