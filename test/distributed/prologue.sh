# The distributed training tests' common start (bash), sourced from the
# repository root as `. test/distributed/prologue.sh NAME BINARY`:
#   - FAIL (exit 1) unless BINARY is built;
#   - W, a fresh scratch directory build/test/distributed/NAME.XXXXXX, removed on
#     exit unless KEEP is set, after the script's own on_exit if it defines one
#     (to stop a background job first);
#   - fail=0 and the reporters pass/bad, which the script's last line turns into
#     its exit status;
#   - compare_lib.sh's comparisons of logs and weights.
[ -x "$2" ] || { echo "FAIL: $2 not built"; exit 1; }
mkdir -p build/test/distributed
W=$(mktemp -d "build/test/distributed/$1.XXXXXX")
prologue_exit() {
  [ "$(type -t on_exit)" = function ] && on_exit
  [ -n "${KEEP:-}" ] || rm -rf "$W"
}
trap prologue_exit EXIT
fail=0
pass() { echo "PASS $*"; }
bad() { echo "FAIL $*"; fail=1; }
. test/distributed/compare_lib.sh
